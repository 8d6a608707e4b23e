"""nnet3-am-info: print a summary of an nnet3 acoustic model (.mdl)."""
from __future__ import annotations

import sys

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Print some text information about an nnet3 neural network, to
standard output

\b
Usage:  nnet3-am-info [options] <nnet>
e.g.:
 nnet3-am-info 0.mdl
See also: nnet3-info"""


@kaldi_command(USAGE)
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...]) -> None:
    check_num_args(args, (1,))
    from ..compile.am_nnet import read_mdl

    _, am_nnet, _ = read_mdl(args[0])
    sys.stdout.write(am_nnet.info())
    sys.stdout.flush()


def main() -> int:
    return run(command, "nnet3-am-info")
