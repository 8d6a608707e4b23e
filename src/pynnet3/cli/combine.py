"""nnet3-combine: the average of the last n models with the best objective on some egs."""
from __future__ import annotations

from typing import Any

import click

from ..train.combine import NnetCombineOptions
from .common import bool_option, check_min_args, kaldi_command, options_from, register_options, run
from .options import use_gpu_option

USAGE = """Using a subset of training or held-out examples, compute the average
over the first n nnet3 models where we maximize the objective function
for n. Note that the order of models has been reversed before
being fed into this binary. So we are actually combining last n models.
Inputs and outputs are 'raw' nnets.

\b
Usage:  nnet3-combine [options] <nnet-in1> <nnet-in2> ... <nnet-inN> <valid-examples-in> <nnet-out>

\b
e.g.:
 nnet3-combine 1.1.raw 1.2.raw 1.3.raw ark:valid.egs 2.raw"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@register_options(NnetCombineOptions)
@use_gpu_option(None, "yes|no|optional|wait: where the objectives are computed (cuda or the "
                "Numba cpu backend).  Default: the CPU, as Kaldi's CPU-only build does "
                "(Kaldi's default is 'yes', which only has an effect in a CUDA build).")
@click.argument("args", nargs=-1)
def command(binary: bool, use_gpu: str | None, args: tuple[str, ...], **kwargs: Any) -> None:
    check_min_args(args, 3)
    from .. import log
    from ..compile.model_io import write_nnet
    from ..compute.backend import get_backend, select_backend
    from ..train.combine import combine_nnets

    config = options_from(NnetCombineOptions, kwargs)
    # (By default on the CPU with the NumPy backend: no Numba start-up.)
    backend = get_backend("reference") if use_gpu is None else select_backend(use_gpu)
    nnet = combine_nnets(list(args[:-2]), args[-2], config, backend=backend)
    write_nnet(args[-1], nnet, binary)
    log.log(f"Finished combining neural nets, wrote model to {args[-1]}")


def main() -> int:
    return run(command, "nnet3-combine")
