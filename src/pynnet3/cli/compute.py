"""nnet3-compute: run a raw network over feature matrices and write its outputs."""
from __future__ import annotations

from typing import Any

import click

from ..compute.decodable import NnetSimpleComputationOptions
from ..compute.utterances import Nnet3ComputeConfig
from .common import check_num_args, kaldi_command, options_from, register_options, run
from .options import (compiler_options, compiler_options_from, computation_options,
                      computation_options_from, disk_cache_options, optimization_options,
                      optimize_options_from, use_gpu_option)

USAGE = """Propagate the features through raw neural network model and write the output.
If --apply-exp=true, apply the Exp() function to the output before writing it out.

\b
Usage: nnet3-compute [options] <nnet-in> <features-rspecifier> <matrix-wspecifier>
 e.g.: nnet3-compute final.raw scp:feats.scp ark:nnet_prediction.ark
See also: nnet3-compute-from-egs
Note: this program does not currently make very efficient use of the GPU."""


@kaldi_command(USAGE)
@register_options(NnetSimpleComputationOptions(acoustic_scale=1.0), names=(
    "extra_left_context", "extra_right_context", "extra_left_context_initial",
    "extra_right_context_final", "frame_subsampling_factor", "acoustic_scale",
    "frames_per_chunk", "debug_computation"))
@optimization_options
@computation_options
@register_options(Nnet3ComputeConfig, names=(
    "ivector_rspecifier", "utt2spk_rspecifier", "online_ivector_rspecifier",
    "online_ivector_period", "apply_exp"))
@use_gpu_option(None, "yes|no|optional|wait.  Default: the GPU when one is usable (as Kaldi's "
                "CUDA build with 'yes'), else the CPU (as Kaldi's CPU build, where the option "
                "has no effect).")
@register_options(Nnet3ComputeConfig, names=("use_priors",))
@compiler_options(help={
    "use_shortcut": "(pynnet3) If true, use the 'shortcut' in compilation.",
    "cache_capacity": "(pynnet3) Number of computations cached in memory."})
@disk_cache_options()
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute on the CPU: numpy (NumPy and "
              "its BLAS only) or numba (the Numba backend's kernels for the row operations, "
              "faster on large row copies; loading them costs about 0.7 s at start-up).")
@register_options(Nnet3ComputeConfig, names=("minibatch_size", "kaldi_chunks"))
@click.option("--num-threads", type=int, default=0, show_default=True,
              help="(pynnet3) Threads to use: that many utterances are computed at once, each "
              "with single-threaded BLAS.  0: the smallest of OMP_NUM_THREADS, "
              "OPENBLAS_NUM_THREADS, MKL_NUM_THREADS and NUMBA_NUM_THREADS where set, else "
              "the cores available to the process.")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (3,))
    if kw["minibatch_size"] < 1:
        raise click.UsageError("--minibatch-size must be >= 1")
    from ..compute.backend import select_compute_backend
    from ..compute.utterances import nnet3_compute
    from ..io.table import classify_wspecifier
    from ..threads import limit_malloc_arenas, resolve_num_threads, use_blas_threads
    from .progress import Progress, progress_wanted

    opts = options_from(
        NnetSimpleComputationOptions(acoustic_scale=1.0), kw,
        optimize_config=optimize_options_from(kw), compute_config=computation_options_from(kw),
        compiler_config=compiler_options_from(kw))
    config = options_from(
        Nnet3ComputeConfig, kw, opts=opts,
        backend=select_compute_backend(kw.pop("use_gpu"), kw.pop("cpu_backend")),
        cache_dir=kw.pop("cache_dir") or None, use_disk_cache=kw.pop("use_disk_cache"),
        num_threads=resolve_num_threads(kw.pop("num_threads")))
    # The thread budget goes to utterances, not to BLAS: see pynnet3/threads.py.
    use_blas_threads(1)
    if config.num_threads > 1:
        limit_malloc_arenas(1)   # the workers share one heap (see threads.py)
    bar = (Progress("nnet3-compute", unit="frames", enabled=True)
           if progress_wanted(classify_wspecifier(args[2])[1]) else None)
    try:
        result = nnet3_compute(config, args[0], args[1], args[2],
                               (lambda utt, frames: bar.update(1, frames)) if bar else None)
    finally:
        if bar is not None:
            bar.close()
    if result.num_success == 0:  # Kaldi's exit status when nothing was computed
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-compute")
