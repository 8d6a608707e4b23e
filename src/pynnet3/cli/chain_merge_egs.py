"""nnet3-chain-merge-egs: merge chain egs into minibatches (Kaldi's exact output)."""
from __future__ import annotations

from typing import Any

import click

from ..train.egs_merge import ExampleMergingConfig
from .common import check_num_args, kaldi_command, options_from, register_options, run

USAGE = """This copies nnet3+chain training examples from input to output, merging them
into composite examples.  The --minibatch-size option controls how many egs
are merged into a single output eg.

\b
Usage:  nnet3-chain-merge-egs [options] <egs-rspecifier> <egs-wspecifier>
e.g.
nnet3-chain-merge-egs --minibatch-size=128 ark:1.cegs ark:- | nnet3-chain-train-simple ...
See also nnet3-chain-copy-egs"""

# Kaldi's ExampleMergingConfig("64"): the chain binaries' default minibatch size.
_DEFAULTS = ExampleMergingConfig(minibatch_size="64")


@kaldi_command(USAGE)
@register_options(_DEFAULTS, names=(
    "compress", "measure_output_frames", "discard_partial_minibatches", "minibatch_size",
    "multilingual_eg"))
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (2,))
    from ..train.chain.egs_tools import merge_chain_egs

    status = merge_chain_egs(args[0], args[1], options_from(_DEFAULTS, kw))
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-chain-merge-egs")
