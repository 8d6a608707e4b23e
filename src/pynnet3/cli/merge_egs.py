"""nnet3-merge-egs: merge egs into minibatches."""
from __future__ import annotations

from typing import Any

import click

from ..train.egs_merge import ExampleMergingConfig
from .common import check_num_args, kaldi_command, options_from, register_options, run

USAGE = """This copies nnet training examples from input to output, but while doing so it
merges many NnetExample objects into one, forming a minibatch consisting of a
single NnetExample.

\b
Usage:  nnet3-merge-egs [options] <egs-rspecifier> <egs-wspecifier>
e.g.
nnet3-merge-egs --minibatch-size=512 ark:1.egs ark:- | nnet3-train-simple ...
See also nnet3-copy-egs"""


@kaldi_command(USAGE)
@register_options(ExampleMergingConfig, names=(
    "compress", "measure_output_frames", "discard_partial_minibatches", "minibatch_size",
    "multilingual_eg"))
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (2,))
    from ..train.egs_tools import merge_egs

    status = merge_egs(args[0], args[1], options_from(ExampleMergingConfig, kw))
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-merge-egs")
