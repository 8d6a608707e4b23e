"""sum-lda-accs: sum LDA accumulators (from nnet3-acc-lda-stats or acc-lda)."""
from __future__ import annotations

import click

from .common import bool_option, check_min_args, kaldi_command, run

USAGE = """Sum stats obtained with acc-lda.

\b
Usage: sum-lda-accs [options] <stats-out> <stats-in1> <stats-in2> ..."""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write accumulators in binary mode.")
@click.argument("args", nargs=-1)
def command(binary: bool, args: tuple[str, ...]) -> None:
    check_min_args(args, 2)
    from ..train.lda import sum_lda_accs

    sum_lda_accs(args[0], args[1:], binary)


def main() -> int:
    return run(command, "sum-lda-accs")
