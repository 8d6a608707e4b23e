"""nnet3-info: print a summary of a raw nnet3 network (or the Nnet of an .mdl)."""
from __future__ import annotations

import sys

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Print some text information about 'raw' nnet3 neural network, to
standard output

\b
Usage:  nnet3-info [options] <raw-nnet>
e.g.:
 nnet3-info 0.raw
See also: nnet3-am-info"""


@kaldi_command(USAGE)
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...]) -> None:
    check_num_args(args, (1,))
    from ..nnet.model_io import read_nnet

    sys.stdout.write(read_nnet(args[0]).info())
    sys.stdout.flush()


def main() -> int:
    return run(command, "nnet3-info")
