"""matrix-sum-rows: each matrix of a table summed over its rows (Kaldi's src/bin tool)."""
from __future__ import annotations

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Sum the rows of an input table of matrices and output the corresponding
table of vectors

\b
Usage: matrix-sum-rows [options] <matrix-rspecifier> <vector-wspecifier>
e.g.: matrix-sum-rows ark:- ark:- | vector-sum ark:- sum.vec
See also: vector-sum"""


@kaldi_command(USAGE)
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...]) -> None:
    check_num_args(args, (2,))
    from ..io.vector_sums import matrix_sum_rows

    status = matrix_sum_rows(args[0], args[1])
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "matrix-sum-rows")
