"""nnet3-merge-egs: merge egs into minibatches."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """This copies nnet training examples from input to output, but while doing so it
merges many NnetExample objects into one, forming a minibatch consisting of a
single NnetExample.

\b
Usage:  nnet3-merge-egs [options] <egs-rspecifier> <egs-wspecifier>
e.g.
nnet3-merge-egs --minibatch-size=512 ark:1.egs ark:- | nnet3-train-simple ...
See also nnet3-copy-egs"""


@kaldi_command(USAGE)
@bool_option("--compress", False, "If true, compress the output examples (not recommended "
             "unless you are writing to disk)")
@click.option("--measure-output-frames", default="deprecated", show_default=True,
              help="This value will be ignored (included for back-compatibility)")
@click.option("--discard-partial-minibatches", default="deprecated", show_default=True,
              help="This value will be ignored (included for back-compatibility)")
@click.option("--minibatch-size", default="256", show_default=True,
              help="String controlling the minibatch size.  May be just an integer, meaning a "
              "fixed minibatch size (e.g. --minibatch-size=128). May be a list of ranges and "
              "values, e.g. --minibatch-size=32,64 or --minibatch-size=16:32,64,128.  All "
              "minibatches will be of the largest size until the end of the input is reached; "
              "then, increasingly smaller sizes will be allowed.  Only egs with the same "
              "structure (e.g num-frames) are merged.  You may specify different minibatch "
              "sizes for different sizes of eg (defined as the maximum number of Indexes on any "
              "input), in the format --minibatch-size='eg_size1=mb_sizes1/eg_size2=mb_sizes2', "
              "e.g. --minibatch-size=128=64:128,256/256=32:64,128.  Egs are given "
              "minibatch-sizes based on the specified eg-size closest to their actual size.")
@bool_option("--multilingual-eg", False, "Appends language name to the merged egs. Used only by "
             "chain2 recipes for now.For example, when merging examples with output-langName we "
             "would want to add ?lang=langName")
@click.argument("args", nargs=-1)
def command(compress: bool, measure_output_frames: str, discard_partial_minibatches: str,
            minibatch_size: str, multilingual_eg: bool, args: tuple[str, ...]) -> None:
    check_num_args(args, (2,))
    from ..train.egs_merge import ExampleMergingConfig
    from ..train.egs_tools import merge_egs

    config = ExampleMergingConfig(compress=compress, measure_output_frames=measure_output_frames,
                                  minibatch_size=minibatch_size,
                                  discard_partial_minibatches=discard_partial_minibatches,
                                  multilingual_eg=multilingual_eg)
    status = merge_egs(args[0], args[1], config)
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-merge-egs")
