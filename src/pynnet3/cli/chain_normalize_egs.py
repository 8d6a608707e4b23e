"""nnet3-chain-normalize-egs: add the normalization FST's weights to chain egs."""
from __future__ import annotations

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Add weights from 'normalization' FST to nnet3+chain examples.
Should be done if and only if the <normalization-fst> argument of
nnet3-chain-get-egs was not supplied when the original egs were
created.

\b
Usage:  nnet3-chain-normalize-egs [options] <normalization-fst> <egs-rspecifier> <egs-wspecifier>

\b
e.g.
nnet3-chain-normalize-egs dir/normalization.fst ark:train_in.cegs ark:train_out.cegs"""


@kaldi_command(USAGE)
@click.option("--normalization-fst-scale", type=float, default=1.0, show_default=True,
              help="Scale the weights from the 'normalization' FST before applying them to the "
              "examples. (Useful for semi-supervised training)")
@click.argument("args", nargs=-1)
def command(normalization_fst_scale: float, args: tuple[str, ...]) -> None:
    check_num_args(args, (3,))
    from ..train.chain.egs_tools import normalize_chain_egs

    status = normalize_chain_egs(args[0], args[1], args[2], normalization_fst_scale)
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-chain-normalize-egs")
