"""nnet3-copy-egs: copy egs, optionally selecting frames, trimming context, splitting outputs."""
from __future__ import annotations

from typing import Any

import click

from ..train.egs_tools import CopyEgsOptions
from .common import check_min_args, kaldi_command, options_from, register_options, run

USAGE = """Copy examples (single frames or fixed-size groups of frames) for neural
network training, possibly changing the binary mode.  Supports multiple wspecifiers, in
which case it will write the examples round-robin to the outputs.

\b
Usage:  nnet3-copy-egs [options] <egs-rspecifier> <egs-wspecifier1> [<egs-wspecifier2> ...]

\b
e.g.
nnet3-copy-egs ark:train.egs ark,t:text.egs
or:
nnet3-copy-egs ark:train.egs ark:1.egs ark:2.egs
See also: nnet3-subset-egs, nnet3-get-egs, nnet3-merge-egs, nnet3-shuffle-egs"""


@kaldi_command(USAGE)
@register_options(CopyEgsOptions, names=(
    "random", "frame_shift", "keep_proportion", "srand", "frame", "left_context",
    "right_context", "weights_rspecifier", "outputs_rspecifier"))
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_min_args(args, 2)
    from ..train.egs_tools import copy_egs

    status = copy_egs(args[0], args[1:], options_from(CopyEgsOptions, kw))
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-copy-egs")
