"""nnet3-get-egs: cut features + pdf posteriors into chunked training examples."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Get frame-by-frame examples of data for nnet3 neural network training.
Essentially this is a format change from features and posteriors
into a special frame-by-frame format.  This program handles the
common case where you have some input features, possibly some
iVectors, and one set of labels.  If people in future want to
do different things they may have to extend this program or create
different versions of it for different tasks (the egs format is quite
general)

\b
Usage:  nnet3-get-egs [options] <features-rspecifier> <pdf-post-rspecifier> <egs-out>

\b
An example [where $feats expands to the actual features]:
nnet3-get-egs --num-pdfs=2658 --left-context=12 --right-context=9 --num-frames=8 "$feats"\\
"ark:gunzip -c exp/nnet/ali.1.gz | ali-to-pdf exp/nnet/1.nnet ark:- ark:- | ali-to-post ark:- ark:- |" \\
   ark:-
See also: nnet3-chain-get-egs, nnet3-get-egs-simple

\b
Chunk placement: Kaldi spreads the gaps between chunks with std::random_device
(different on every run); pynnet3 uses a generator seeded by --srand, so its
output is repeatable.  --chunk-starts reproduces a given Kaldi run."""


def egs_generation_options(f):
    """ExampleGenerationConfig::Register (shared with nnet3-get-egs-dense-targets)."""
    opts = [
        click.option("--left-context", type=int, default=0, show_default=True,
                     help="Number of frames of left context of input features that are added "
                     "to each example"),
        click.option("--right-context", type=int, default=0, show_default=True,
                     help="Number of frames of right context of input features that are added "
                     "to each example"),
        click.option("--left-context-initial", type=int, default=-1, show_default=True,
                     help="Number of frames of left context of input features that are added to "
                     "each example at the start of the utterance (if <0, this defaults to the "
                     "same as --left-context)"),
        click.option("--right-context-final", type=int, default=-1, show_default=True,
                     help="Number of frames of right context of input features that are added "
                     "to each example at the end of the utterance (if <0, this defaults to the "
                     "same as --right-context)"),
        click.option("--num-frames", default="1", show_default=True,
                     help="Number of frames with labels that each example contains (i.e. the "
                     "left and right context are to be added to this).  May just be an integer "
                     "(e.g. --num-frames=8), or a principal value followed by alternative values "
                     "to be used at most once for each utterance to deal with odd-sized input, "
                     "e.g. --num-frames=40,25,50 means that most of the time the number of "
                     "frames will be 40, but to deal with odd-sized inputs we may also generate "
                     "egs with these other sizes.  All these values will be rounded up to the "
                     "closest multiple of --frame-subsampling-factor.  As a special case, "
                     "--num-frames=-1 means 'don't do any splitting'."),
        click.option("--num-frames-overlap", type=int, default=0, show_default=True,
                     help="Number of frames of overlap between adjacent samples (applies to "
                     "chunks of size equal to the primary [first-listed] --num-frames value... "
                     "will be adjusted for different-sized chunks).  Advisory; will not be "
                     "exactly enforced."),
        click.option("--frame-subsampling-factor", type=int, default=1, show_default=True,
                     help="Used if the frame-rate of the output labels in the generated examples "
                     "will be less than the frame-rate at the input"),
        click.option("--ivectors", default="", help="Alias for --online-ivectors option, for "
                     "back compatibility"),
        click.option("--online-ivectors", default="", help="Rspecifier of ivector features, "
                     "as a matrix."),
        click.option("--online-ivector-period", type=int, default=1, show_default=True,
                     help="Number of frames between iVectors in matrices supplied to the "
                     "--online-ivectors option"),
        click.option("--length-tolerance", type=int, default=100, show_default=True,
                     help="Tolerance for difference in num-frames between feat and ivector "
                     "matrices"),
        click.option("--targets-length-tolerance", type=int, default=2, show_default=True,
                     help="Tolerance for difference in num-frames (after subsampling) between "
                     "feature matrix and posterior"),
        click.option("--srand", type=int, default=0, show_default=True,
                     help="pynnet3 only: seed for placing the gaps between chunks (Kaldi uses "
                     "std::random_device there)."),
        click.option("--chunk-starts", default="",
                     help="pynnet3 only: egs rspecifier whose keys <utt>-<first-frame> fix where "
                     "the chunks start (reproduces the chunking of that archive)."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def run_get_egs(kw: dict, args: tuple[str, ...], dense: bool, num_targets: int) -> None:
    """Shared body of nnet3-get-egs and nnet3-get-egs-dense-targets."""
    check_num_args(args, (3,))
    from ..train.egs_split import ExampleGenerationConfig
    from ..train.egs_tools import GetEgsOptions, chunk_starts_from_keys, get_egs

    config = ExampleGenerationConfig(
        left_context=kw["left_context"], right_context=kw["right_context"],
        left_context_initial=kw["left_context_initial"],
        right_context_final=kw["right_context_final"],
        num_frames_overlap=kw["num_frames_overlap"],
        frame_subsampling_factor=kw["frame_subsampling_factor"], num_frames_str=kw["num_frames"])
    opts = GetEgsOptions(compress=kw["compress"], num_pdfs=num_targets,
                         online_ivector_rspecifier=kw["online_ivectors"] or kw["ivectors"],
                         online_ivector_period=kw["online_ivector_period"],
                         length_tolerance=kw["length_tolerance"],
                         targets_length_tolerance=kw["targets_length_tolerance"],
                         seed=kw["srand"])
    starts = chunk_starts_from_keys(kw["chunk_starts"]) if kw["chunk_starts"] else None
    status = get_egs(args[0], args[1], args[2], config, opts, dense=dense, chunk_starts=starts)
    if status:
        raise click.exceptions.Exit(status)


@kaldi_command(USAGE)
@bool_option("--compress", True, "If true, write egs with input features in compressed format "
             "(recommended). This is only relevant if the features being read are "
             "un-compressed; if already compressed, we keep the same compressed format when "
             "dumping egs.")
@click.option("--num-pdfs", type=int, default=-1, show_default=True,
              help="Number of pdfs in the acoustic model")
@egs_generation_options
@click.argument("args", nargs=-1)
def command(num_pdfs: int, args: tuple[str, ...], **kw) -> None:
    run_get_egs(kw, args, dense=False, num_targets=num_pdfs)


def main() -> int:
    return run(command, "nnet3-get-egs")
