"""nnet3-copy-egs: copy egs, optionally selecting frames, trimming context, splitting outputs."""
from __future__ import annotations

import click

from .common import bool_option, kaldi_command, run

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
@bool_option("--random", False, "If true, will write frames to output archives randomly, not "
             "round-robin.")
@click.option("--frame-shift", type=int, default=0, show_default=True,
              help="Allows you to shift time values in the supervision data (excluding iVector "
              "data).  Only really useful in clockwork topologies (i.e. any topology for which "
              "modulus != 1).  Shifting is done after any frame selection.")
@click.option("--keep-proportion", type=float, default=1.0, show_default=True,
              help="If <1.0, this program will randomly keep this proportion of the input "
              "samples.  If >1.0, it will in expectation copy a sample this many times.  It will "
              "copy it a number of times equal to floor(keep-proportion) or "
              "ceil(keep-proportion).")
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for random number generator (only relevant if --random=true or "
              "--keep-proportion != 1.0)")
@click.option("--frame", default="", help="This option can be used to select a single frame "
              "from each multi-frame example.  Set to a number 0, 1, etc. to select a frame with "
              "a given index, or 'random' to select a random frame.")
@click.option("--left-context", type=int, default=-1, show_default=True,
              help="Can be used to truncate the feature left-context that we output.")
@click.option("--right-context", type=int, default=-1, show_default=True,
              help="Can be used to truncate the feature right-context that we output.")
@click.option("--weights", default="", help="Rspecifier indexed by the key of egs, providing a "
              "weight by which we will scale the supervision matrix for that eg. Used in "
              "multilingual training.")
@click.option("--outputs", default="", help="Rspecifier indexed by the key of egs, providing a "
              "string-valued output name, e.g. 'output-0'.  If provided, the NnetIo with name "
              "'output' will be renamed to the provided name. Used in multilingual training.")
@click.argument("args", nargs=-1)
def command(random: bool, frame_shift: int, keep_proportion: float, srand: int, frame: str,
            left_context: int, right_context: int, weights: str, outputs: str,
            args: tuple[str, ...]) -> None:
    if len(args) < 2:
        raise click.UsageError(f"wrong number of arguments: got {len(args)}, expected 2 or more")
    from ..train.egs_tools import CopyEgsOptions, copy_egs

    status = copy_egs(args[0], args[1:], CopyEgsOptions(
        random=random, srand=srand, frame_shift=frame_shift, keep_proportion=keep_proportion,
        frame=frame, left_context=left_context, right_context=right_context,
        weights_rspecifier=weights, outputs_rspecifier=outputs))
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-copy-egs")
