"""nnet3-get-egs-simple: one eg per utterance from named matrices (``input=...`` ``output=...``)."""
from __future__ import annotations

import click

from .common import check_min_args, kaldi_command, run

USAGE = """Get frame-by-frame examples of data for nnet3 neural network training.
This is like nnet3-get-egs, but does not split up its inputs into pieces
and allows more general generation of egs.  E.g. this is usable for image
recognition tasks.

\b
Usage:  nnet3-get-egs-simple [options] <name1>=<rspecifier1> <name2>=<rspecifier2> ...

\b
e.g.:
nnet3-get-egs-simple input=scp:images.scp \\
output='ark,o:ali-to-post ark:labels.txt ark:- | post-to-smat --dim=10 ark:- ark:-' ark:egs.ark

See also: nnet3-get-egs"""


@kaldi_command(USAGE)
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...]) -> None:
    check_min_args(args, 2)
    from ..train.egs_tools import get_egs_simple

    status = get_egs_simple(args[:-1], args[-1])
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-get-egs-simple")
