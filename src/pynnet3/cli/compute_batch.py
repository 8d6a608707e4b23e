"""nnet3-compute-batch: nnet3-compute with the chunks of many utterances in one computation."""
from __future__ import annotations

from typing import Any

import click

from ..compute.batch_computer import BatchComputeConfig, NnetBatchComputerOptions
from ..compute.decodable import NnetSimpleComputationOptions
from ..compute.utterances import Nnet3ComputeConfig
from .common import check_num_args, kaldi_command, options_from, register_options, run
from .options import (compiler_options, compiler_options_from, computation_options,
                      computation_options_from, disk_cache_options, optimization_options,
                      optimize_options_from, use_gpu_option)

USAGE = """Propagate the features through raw neural network model and write the output.  This version is optimized for GPU use. If --apply-exp=true, apply the Exp() function to the output before writing it out.

\b
Usage: nnet3-compute-batch [options] <nnet-in> <features-rspecifier> <matrix-wspecifier>
 e.g.: nnet3-compute-batch final.raw scp:feats.scp ark:nnet_prediction.ark"""

_IO_NAMES = ("ivector_rspecifier", "utt2spk_rspecifier", "online_ivector_rspecifier",
             "online_ivector_period", "apply_exp")
_BATCH_NAMES = ("minibatch_size", "edge_minibatch_size", "ensure_exact_final_context",
                "partial_minibatch_factor")


@kaldi_command(USAGE)
@register_options(NnetSimpleComputationOptions(acoustic_scale=1.0), names=(
    "extra_left_context", "extra_right_context", "extra_left_context_initial",
    "extra_right_context_final", "frame_subsampling_factor", "acoustic_scale",
    "frames_per_chunk", "debug_computation"))
@optimization_options
@computation_options
@register_options(NnetBatchComputerOptions, names=_BATCH_NAMES)
@register_options(Nnet3ComputeConfig, names=_IO_NAMES)
@use_gpu_option("yes", "yes|no|optional|wait, only has effect if compiled with CUDA")
@register_options(Nnet3ComputeConfig, names=("use_priors",))
@compiler_options(help={
    "use_shortcut": "(pynnet3) If true, use the 'shortcut' in compilation.",
    "cache_capacity": "(pynnet3) Number of computations cached in memory."})
@disk_cache_options()
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute on the CPU: numpy (NumPy and "
              "its BLAS only) or numba (the Numba backend's kernels).")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (3,))
    from ..compute.backend import select_compute_backend
    from ..compute.batch_computer import nnet3_compute_batch

    opts = options_from(
        NnetSimpleComputationOptions(acoustic_scale=1.0), kw,
        optimize_config=optimize_options_from(kw), compute_config=computation_options_from(kw),
        compiler_config=compiler_options_from(kw))
    batch_opts = options_from(NnetBatchComputerOptions, kw, names=_BATCH_NAMES)
    io = options_from(Nnet3ComputeConfig, kw, names=_IO_NAMES + ("use_priors",))
    # (Kaldi's default --use-gpu=yes means "the GPU when there is one" here:
    # the CPU otherwise, as Kaldi's CPU build.)
    use_gpu = kw.pop("use_gpu")
    config = BatchComputeConfig(
        opts=opts, batch_opts=batch_opts, ivector_rspecifier=io.ivector_rspecifier,
        utt2spk_rspecifier=io.utt2spk_rspecifier,
        online_ivector_rspecifier=io.online_ivector_rspecifier,
        online_ivector_period=io.online_ivector_period, apply_exp=io.apply_exp,
        use_priors=io.use_priors,
        backend=select_compute_backend(None if use_gpu == "yes" else use_gpu,
                                       kw.pop("cpu_backend")),
        cache_dir=kw.pop("cache_dir") or None, use_disk_cache=kw.pop("use_disk_cache"))
    result = nnet3_compute_batch(config, args[0], args[1], args[2])
    if result.num_success == 0:  # Kaldi's exit status when nothing was computed
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-compute-batch")
