"""nnet3-chain-subset-egs: a random subset of chain egs (Kaldi's exact selection and order)."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Creates a random subset of the input nnet3+chain examples, of a specified size.
Uses no more memory than the size of the subset.

\b
Usage:  nnet3-chain-cubset-egs [options] <egs-rspecifier> [<egs-wspecifier2> ...]

\b
e.g.
nnet3-chain-subset-egs [args] ark:- | nnet-subset-egs --n=1000 ark:- ark:subset.cegs"""


@kaldi_command(USAGE)
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for random number generator ")
@click.option("--n", "n", type=int, default=1000, show_default=True,
              help="Number of examples to output")
@bool_option("--randomize-order", True, "If true, randomize the order of the output")
@click.argument("args", nargs=-1)
def command(srand: int, n: int, randomize_order: bool, args: tuple[str, ...]) -> None:
    check_num_args(args, (2,))
    from ..train.chain.egs_tools import subset_chain_egs

    status = subset_chain_egs(args[0], args[1], n=n, srand=srand,
                              randomize_order=randomize_order)
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-chain-subset-egs")
