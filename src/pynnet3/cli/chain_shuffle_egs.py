"""nnet3-chain-shuffle-egs: shuffle the order of chain egs."""
from __future__ import annotations

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Copy nnet3+chain examples for neural network training, from the input to output,
while randomly shuffling the order.  This program will keep all of the examples
in memory at once, unless you use the --buffer-size option

\b
Usage:  nnet3-chain-shuffle-egs [options] <egs-rspecifier> <egs-wspecifier>

\b
nnet3-chain-shuffle-egs --srand=1 ark:train.egs ark:shuffled.egs

\b
Full shuffling: Kaldi seeds its generator from std::random_device (a different
order on every run); pynnet3 seeds it with --srand, so its order is repeatable."""


@kaldi_command(USAGE)
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for random number generator ")
@click.option("--buffer-size", type=int, default=0, show_default=True,
              help="If >0, size of a buffer we use to do limited-memory partial randomization.  "
              "Otherwise, do full randomization.")
@click.argument("args", nargs=-1)
def command(srand: int, buffer_size: int, args: tuple[str, ...]) -> None:
    check_num_args(args, (2,))
    from ..train.chain.egs_tools import shuffle_chain_egs

    status = shuffle_chain_egs(args[0], args[1], srand=srand, buffer_size=buffer_size)
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-chain-shuffle-egs")
