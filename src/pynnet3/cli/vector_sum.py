"""vector-sum: add up vectors (tables key by key, one table into a file, or files)."""
from __future__ import annotations

import click

from .common import ArgumentCountError, bool_option, kaldi_command, run

USAGE = """Add vectors (e.g. weights, transition-accs; speaker vectors)
If you need to scale the inputs, use vector-scale on the inputs

\b
Type one usage:
 vector-sum [options] <vector-in-rspecifier1> [<vector-in-rspecifier2> <vector-in-rspecifier3> ...] <vector-out-wspecifier>
  e.g.: vector-sum ark:1.weights ark:2.weights ark:combine.weights
Type two usage (sums a single table input to produce a single output):
 vector-sum [options] <vector-in-rspecifier> <vector-out-wxfilename>
 e.g.: vector-sum --binary=false vecs.ark sum.vec
Type three usage (sums single-file inputs to produce a single output):
 vector-sum [options] <vector-in-rxfilename1> <vector-in-rxfilename2> ... <vector-out-wxfilename>
 e.g.: vector-sum --binary=false 1.vec 2.vec 3.vec sum.vec"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "If true, write output as binary (only relevant for usage types "
             "two or three")
@bool_option("--average", False, "Do average instead of sum")
@click.argument("args", nargs=-1)
def command(binary: bool, average: bool, args: tuple[str, ...]) -> None:
    from ..io.vector_sums import VectorSumUsageError, vector_sum

    try:
        status = vector_sum(args, binary=binary, average=average)
    except VectorSumUsageError as e:
        raise ArgumentCountError(str(e)) from None
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "vector-sum")
