"""nnet3-compute-looped: nnet3-compute with Kaldi's looped decodable
(DecodableNnetSimpleLooped), the way online decoders evaluate a network.

Kaldi has no such binary (its looped decodable is used by
nnet3-latgen-faster-looped and the online decoders); this is nnet3-compute's
interface on it, with the options of NnetSimpleLoopedComputationOptions."""
from __future__ import annotations

from typing import Any

import click

from ..compute.looped import Nnet3ComputeLoopedConfig, NnetSimpleLoopedComputationOptions
from .common import check_num_args, kaldi_command, options_from, register_options, run
from .options import (apply_num_threads, computation_options, computation_options_from,
                      num_threads_option, optimization_options,
                      optimize_options_from, use_gpu_option)

USAGE = """Propagate the features through raw neural network model and write the output,
using a 'looped' computation, as in online decoding: chunk after chunk, the
network's state and left context carried over rather than recomputed.
If --apply-exp=true, apply the Exp() function to the output before writing it out.

\b
Usage: nnet3-compute-looped [options] <nnet-in> <features-rspecifier> <matrix-wspecifier>
 e.g.: nnet3-compute-looped --frames-per-chunk=20 final.raw scp:feats.scp ark:nnet_prediction.ark
See also: nnet3-compute"""


@kaldi_command(USAGE)
@register_options(NnetSimpleLoopedComputationOptions(acoustic_scale=1.0), names=(
    "extra_left_context_initial", "frame_subsampling_factor", "acoustic_scale",
    "frames_per_chunk", "debug_computation"))
@optimization_options
@computation_options
@register_options(Nnet3ComputeLoopedConfig, names=(
    "ivector_rspecifier", "utt2spk_rspecifier", "online_ivector_rspecifier",
    "online_ivector_period", "apply_exp"))
@use_gpu_option(None, "yes|no|optional|wait.  Default: the GPU when one is usable (as Kaldi's "
                "CUDA build with 'yes'), else the CPU (as Kaldi's CPU build, where the option "
                "has no effect).")
@register_options(Nnet3ComputeLoopedConfig, names=("use_priors",))
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute on the CPU: numpy (NumPy and "
              "its BLAS only) or numba (the Numba backend's kernels for the row operations).")
@num_threads_option("the matrix products run on that many BLAS threads (one when not "
                    "given: the looped chunks' products are small, and BLAS threads split "
                    "them with a spinning barrier each).")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (3,))
    apply_num_threads(kw.pop("num_threads"), 1)
    from ..compute.backend import select_compute_backend
    from ..compute.looped import nnet3_compute_looped
    from ..io.table import classify_wspecifier
    from .progress import Progress, progress_wanted

    opts = options_from(
        NnetSimpleLoopedComputationOptions(acoustic_scale=1.0), kw,
        optimize_config=optimize_options_from(kw), compute_config=computation_options_from(kw))
    config = options_from(
        Nnet3ComputeLoopedConfig, kw, opts=opts,
        backend=select_compute_backend(kw.pop("use_gpu"), kw.pop("cpu_backend")))
    bar = (Progress("nnet3-compute-looped", unit="frames", enabled=True)
           if progress_wanted(classify_wspecifier(args[2])[1]) else None)
    try:
        result = nnet3_compute_looped(config, args[0], args[1], args[2],
                                      (lambda utt, frames: bar.update(1, frames)) if bar
                                      else None)
    finally:
        if bar is not None:
            bar.close()
    if result.num_success == 0:  # as nnet3-compute: nothing computed
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-compute-looped")
