"""nnet-get-feature-transform: the LDA-like input transform of a network, from LDA stats."""
from __future__ import annotations

from typing import Any

import click

from ..train.lda import FeatureTransformEstimateOptions
from .common import bool_option, check_min_args, kaldi_command, options_from, register_options, run

USAGE = """Get feature-projection transform using stats obtained with acc-lda.
See comments in the code of nnet2/get-feature-transform.h for more
information.

\b
Usage:  nnet-get-feature-transform [options] <matrix-out> <lda-acc-1> <lda-acc-2> ..."""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write outputs in binary mode.")
@click.option("--write-cholesky", default="", help="If supplied, write to this wxfilename the "
              "Cholesky factor of the within-class covariance. Can be used for perturbing "
              "features.  E.g. --write-cholesky=exp/nnet5/cholesky.tpmat")
@click.option("--write-within-covar", default="", help="If supplied, write to this wxfilename "
              "the within-class covariance (as a symmetric matrix). E.g. "
              "--write-within-covar=exp/nnet5/within_covar.mat")
@register_options(FeatureTransformEstimateOptions)
@click.argument("args", nargs=-1)
def command(binary: bool, write_cholesky: str, write_within_covar: str, args: tuple[str, ...],
            **kwargs: Any) -> None:
    check_min_args(args, 2)
    from ..train.lda import get_feature_transform

    opts = options_from(FeatureTransformEstimateOptions, kwargs)
    get_feature_transform(args[0], args[1:], opts, binary, write_cholesky, write_within_covar)


def main() -> int:
    return run(command, "nnet-get-feature-transform")
