"""nnet3-chain-get-egs: cut features + chain supervision into chunked chain egs."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.egs_tools import ChainGetEgsOptions
from ..train.egs_split import ExampleGenerationConfig
from .common import check_num_args, kaldi_command, options_from, register_options, run

USAGE = """Get frame-by-frame examples of data for nnet3+chain neural network
training.  This involves breaking up utterances into pieces of a
fixed size.  Input will come from chain-get-supervision.
Note: if <normalization-fst> is not supplied the egs will not be
ready for training; in that case they should later be processed
with nnet3-chain-normalize-egs

\b
Usage:  nnet3-chain-get-egs [options] [<normalization-fst>] <features-rspecifier> <chain-supervision-rspecifier> <egs-wspecifier>

\b
An example [where $feats expands to the actual features]:
chain-get-supervision [args] | \\
  nnet3-chain-get-egs --left-context=25 --right-context=9 --num-frames=150,100,90 dir/normalization.fst \\
  "$feats" ark,s,cs:- ark:cegs.1.ark
Note: the --frame-subsampling-factor option must be the same as given to
chain-get-supervision.

\b
Chunk placement: Kaldi spreads the gaps between chunks with std::random_device
(different on every run); pynnet3 uses a generator seeded by --srand, so its
output is repeatable.  --chunk-starts reproduces a given Kaldi run.
--transition-model ('unconstrained' egs) is not supported."""


@kaldi_command(USAGE)
@register_options(ChainGetEgsOptions, names=(
    "compress", "online_ivector_rspecifier", "online_ivector_period", "srand",
    "length_tolerance", "supervision_length_tolerance", "deriv_weights_rspecifier",
    "normalization_fst_scale", "transition_model", "long_key"))
@click.option("--ivectors", default="", help="Alias for --online-ivectors option, for back "
              "compatibility")
@register_options(ExampleGenerationConfig, names=(
    "left_context", "right_context", "left_context_initial", "right_context_final",
    "num_frames_str", "num_frames_overlap", "frame_subsampling_factor"))
@click.option("--chunk-starts", default="",
              help="pynnet3 only: chain-egs rspecifier whose keys <utt>-<first-frame> fix where "
              "the chunks start (reproduces the chunking of that archive).")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (3, 4))
    from ..train.chain.egs_tools import chain_chunk_starts_from_keys, get_chain_egs

    config = options_from(ExampleGenerationConfig, kw)
    ivectors = kw.pop("ivectors")
    if not kw["online_ivector_rspecifier"]:
        kw["online_ivector_rspecifier"] = ivectors
    opts = options_from(ChainGetEgsOptions, kw)
    starts = chain_chunk_starts_from_keys(kw["chunk_starts"]) if kw["chunk_starts"] else None
    norm = args[0] if len(args) == 4 else ""
    rest = args[-3:]
    status = get_chain_egs(norm, rest[0], rest[1], rest[2], config, opts, chunk_starts=starts)
    if status:
        raise click.exceptions.Exit(status)


def main() -> int:
    return run(command, "nnet3-chain-get-egs")
