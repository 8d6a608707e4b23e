"""nnet3-get-egs: cut features + pdf posteriors into chunked training examples."""
from __future__ import annotations

import click

from ..train.egs_split import ExampleGenerationConfig
from ..train.egs_tools import GetEgsOptions
from .common import check_num_args, kaldi_command, options_from, register_options, run

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
See also: nnet3-get-egs-simple

\b
Chunk placement: Kaldi spreads the gaps between chunks with std::random_device
(different on every run); pynnet3 uses a generator seeded by --srand, so its
output is repeatable.  --chunk-starts reproduces a given Kaldi run."""


def egs_generation_options(f):
    """ExampleGenerationConfig::Register and the rest of GetEgsOptions but
    --compress and --num-pdfs (shared with nnet3-get-egs-dense-targets)."""
    f = click.option("--chunk-starts", default="",
                     help="pynnet3 only: egs rspecifier whose keys <utt>-<first-frame> fix where "
                     "the chunks start (reproduces the chunking of that archive).")(f)
    f = register_options(GetEgsOptions, names=(
        "online_ivector_rspecifier", "online_ivector_period", "length_tolerance",
        "targets_length_tolerance", "seed"))(f)
    f = click.option("--ivectors", default="", help="Alias for --online-ivectors option, for "
                     "back compatibility")(f)
    return register_options(ExampleGenerationConfig, names=(
        "left_context", "right_context", "left_context_initial", "right_context_final",
        "num_frames_str", "num_frames_overlap", "frame_subsampling_factor"))(f)


def run_get_egs(kw: dict, args: tuple[str, ...], dense: bool) -> None:
    """Shared body of nnet3-get-egs and nnet3-get-egs-dense-targets."""
    check_num_args(args, (3,))
    from ..train.egs_tools import chunk_starts_from_keys, get_egs

    config = options_from(ExampleGenerationConfig, kw)
    ivectors = kw.pop("ivectors")
    if not kw["online_ivector_rspecifier"]:
        kw["online_ivector_rspecifier"] = ivectors
    opts = options_from(GetEgsOptions, kw)
    starts = chunk_starts_from_keys(kw["chunk_starts"]) if kw["chunk_starts"] else None
    status = get_egs(args[0], args[1], args[2], config, opts, dense=dense, chunk_starts=starts)
    if status:
        raise click.exceptions.Exit(status)


@kaldi_command(USAGE)
@register_options(GetEgsOptions, names=("compress", "num_pdfs"))
@egs_generation_options
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw) -> None:
    run_get_egs(kw, args, dense=False)


def main() -> int:
    return run(command, "nnet3-get-egs")
