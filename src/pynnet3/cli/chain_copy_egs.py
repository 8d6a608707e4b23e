"""nnet3-chain-copy-egs: copy chain egs (round-robin to several outputs, frame shift, context)."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.egs_tools import ChainCopyEgsOptions
from .common import check_min_args, kaldi_command, options_from, register_options, run

USAGE = """Copy examples for nnet3+chain network training, possibly changing the binary mode.
Supports multiple wspecifiers, in which case it will write the examples
round-robin to the outputs.

\b
Usage:  nnet3-chain-copy-egs [options] <egs-rspecifier> <egs-wspecifier1> [<egs-wspecifier2> ...]

\b
e.g.
nnet3-chain-copy-egs ark:train.cegs ark,t:text.cegs
or:
nnet3-chain-copy-egs ark:train.cegs ark:1.cegs ark:2.cegs"""


@kaldi_command(USAGE)
@register_options(ChainCopyEgsOptions, names=(
    "random", "keep_proportion", "srand", "frame_shift", "truncate_deriv_weights",
    "left_context", "right_context",
    "weights_rspecifier", "outputs_rspecifier"))
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_min_args(args, 2)
    from ..train.chain.egs_tools import copy_chain_egs

    status = copy_chain_egs(args[0], args[1:], options_from(ChainCopyEgsOptions, kw))
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-chain-copy-egs")
