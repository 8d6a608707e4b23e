"""nnet3-compute: run a raw network over feature matrices and write its outputs."""
from __future__ import annotations

from typing import Any

import click

from .common import BOOL, bool_option, check_num_args, kaldi_command, run

USAGE = """Propagate the features through raw neural network model and write the output.
If --apply-exp=true, apply the Exp() function to the output before writing it out.

\b
Usage: nnet3-compute [options] <nnet-in> <features-rspecifier> <matrix-wspecifier>
 e.g.: nnet3-compute final.raw scp:feats.scp ark:nnet_prediction.ark
See also: nnet3-compute-from-egs, nnet3-chain-compute-post
Note: this program does not currently make very efficient use of the GPU."""


def _optimization_options(f: Any) -> Any:
    # --optimization.* (Kaldi's NnetOptimizeOptions under the "optimization" prefix).
    from .optimize_options import register_click_options

    return register_click_options(f)


@kaldi_command(USAGE)
@click.option("--extra-left-context", type=int, default=0, show_default=True,
              help="Number of frames of additional left-context to add on top of the neural "
              "net's inherent left context (may be useful in recurrent setups")
@click.option("--extra-right-context", type=int, default=0, show_default=True,
              help="Number of frames of additional right-context to add on top of the neural "
              "net's inherent right context (may be useful in recurrent setups")
@click.option("--extra-left-context-initial", type=int, default=-1, show_default=True,
              help="If >= 0, overrides the --extra-left-context value at the start of an "
              "utterance.")
@click.option("--extra-right-context-final", type=int, default=-1, show_default=True,
              help="If >= 0, overrides the --extra-right-context value at the end of an "
              "utterance.")
@click.option("--frame-subsampling-factor", type=int, default=1, show_default=True,
              help="Required if the frame-rate of the output (e.g. in 'chain' models) is less "
              "than the frame-rate of the original alignment.")
@click.option("--acoustic-scale", type=float, default=1.0, show_default=True,
              help="Scaling factor for acoustic log-likelihoods (caution: is a no-op if set in "
              "the program nnet3-compute")
@click.option("--frames-per-chunk", type=int, default=50, show_default=True,
              help="Number of frames in each chunk that is separately evaluated by the neural "
              "net.  Measured before any subsampling, if the --frame-subsampling-factor options "
              "is used (i.e. counts input frames")
@bool_option("--debug-computation", False, "If true, turn on debug for the actual computation "
             "(very verbose!)")
@_optimization_options
@click.option("--computation.debug", "computation_debug", type=BOOL, default=False,
              show_default=True, help="If true, turn on debug for the neural net computation "
              "(very verbose!) Will be turned on regardless if --verbose >= 5")
@click.option("--ivectors", default="", help="Rspecifier for iVectors as vectors (i.e. not "
              "estimated online); per utterance by default, or per speaker if you provide the "
              "--utt2spk option.")
@click.option("--utt2spk", default="", help="Rspecifier for utt2spk option used to get ivectors "
              "per speaker")
@click.option("--online-ivectors", default="", help="Rspecifier for iVectors estimated online, "
              "as matrices.  If you supply this, you must set the --online-ivector-period "
              "option.")
@click.option("--online-ivector-period", type=int, default=0, show_default=True,
              help="Number of frames between iVectors in matrices supplied to the "
              "--online-ivectors option")
@bool_option("--apply-exp", False, "If true, apply exp function to output")
@click.option("--use-gpu", default=None, type=click.Choice(["yes", "no", "optional", "wait"]),
              help="yes|no|optional|wait.  Default: the GPU when one is usable (as Kaldi's CUDA "
              "build with 'yes'), else the CPU (as Kaldi's CPU build, where the option has no "
              "effect).")
@bool_option("--use-priors", False, "If true, subtract the logs of the priors stored with the "
             "model (in this case, a .mdl file is expected as input).")
@click.option("--compiler.use-shortcut", "compiler_use_shortcut", type=BOOL, default=True,
              show_default=True, help="(pynnet3) If true, use the 'shortcut' in compilation.")
@click.option("--compiler.cache-capacity", "cache_capacity", type=int, default=64,
              show_default=True, help="(pynnet3) Number of computations cached in memory.")
@click.option("--cache-dir", default="", help="(pynnet3) Directory of the on-disk computation "
              "cache (default: $PYNNET3_CACHE_DIR or ~/.cache/pynnet3/computations).")
@bool_option("--use-disk-cache", True, "(pynnet3) Look computations up in, and add them to, "
             "the on-disk cache.")
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute on the CPU: numpy (NumPy and "
              "its BLAS only) or numba (the Numba backend's kernels for the row operations, "
              "faster on large row copies; loading them costs about 0.7 s at start-up).")
@click.option("--minibatch-size", type=int, default=16, show_default=True,
              help="(pynnet3) Most chunks computed together, as the sequences of one "
              "computation: the same chunks as one at a time and the same output up to float "
              "rounding, much faster.  1: one chunk per computation, as Kaldi's nnet3-compute.")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (3,))
    if kw["minibatch_size"] < 1:
        raise click.UsageError("--minibatch-size must be >= 1")
    from ..cache import CachingCompilerOptions
    from ..compute.computer import NnetComputeOptions
    from ..compute.decodable import NnetSimpleComputationOptions
    from ..compute.utterances import Nnet3ComputeConfig, nnet3_compute
    from .optimize_options import options_from_click_kwargs
    from ..io.table import classify_wspecifier
    from .progress import Progress

    opts = NnetSimpleComputationOptions(
        **{k: kw.pop(k) for k in ("extra_left_context", "extra_right_context",
                                  "extra_left_context_initial", "extra_right_context_final",
                                  "frame_subsampling_factor", "acoustic_scale",
                                  "frames_per_chunk", "debug_computation")},
        optimize_config=options_from_click_kwargs(kw),
        compute_config=NnetComputeOptions(debug=kw.pop("computation_debug")),
        compiler_config=CachingCompilerOptions(use_shortcut=kw.pop("compiler_use_shortcut"),
                                               cache_capacity=kw.pop("cache_capacity")))
    config = Nnet3ComputeConfig(
        opts=opts, ivector_rspecifier=kw["ivectors"], utt2spk_rspecifier=kw["utt2spk"],
        online_ivector_rspecifier=kw["online_ivectors"],
        online_ivector_period=kw["online_ivector_period"], apply_exp=kw["apply_exp"],
        use_priors=kw["use_priors"], backend=_backend(kw["use_gpu"], kw["cpu_backend"]),
        cache_dir=kw["cache_dir"] or None, use_disk_cache=kw["use_disk_cache"],
        minibatch_size=kw["minibatch_size"])
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


def progress_wanted(output_target: str, stream: Any = None) -> bool:
    """A progress display only when stderr is a terminal and the output goes
    to a file (not to stdout or a pipe, whose reader may share the terminal)."""
    import sys

    stream = stream if stream is not None else sys.stderr
    target = output_target.strip()
    if target in ("", "-") or target.startswith("|"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _backend(use_gpu: str | None, cpu_backend: str = "numpy") -> Any:
    """Kaldi's --use-gpu: an explicit value as CuDevice::SelectGpuId; none
    given, the GPU if usable (a CUDA build's default) else the CPU.  On the
    CPU, ``cpu_backend`` picks the NumPy (reference) or the Numba backend."""
    from .. import log
    from ..compute.backend import get_backend

    cpu = get_backend("reference" if cpu_backend == "numpy" else "cpu")
    if use_gpu == "no":
        log.log("Manually selected to compute on CPU.")
        return cpu
    if use_gpu is None and not gpu_may_be_present():
        # (Asking numba.cuda would cost a second of start-up for nothing.)
        log.vlog(1, "no GPU device: computing on the CPU")
        return cpu
    from ..compute.backend import cuda_unavailable_reason, select_backend

    if use_gpu is not None:
        backend = select_backend(use_gpu)
        return cpu if backend.name != "cuda" else backend
    if cuda_unavailable_reason() is None:
        return get_backend("cuda")
    log.vlog(1, "no usable GPU: computing on the CPU")
    return cpu


def gpu_may_be_present() -> bool:
    """False when this machine certainly has no CUDA GPU to offer (no NVIDIA
    device files and no CUDA simulator), which is cheap to see."""
    import os

    if os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0"):
        return True
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0",
                                           "/proc/driver/nvidia"))


def main() -> int:
    return run(command, "nnet3-compute")
