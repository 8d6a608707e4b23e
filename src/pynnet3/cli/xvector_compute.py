"""nnet3-xvector-compute: one x-vector per utterance from a network's ``output`` node."""
from __future__ import annotations

from typing import Any

import click

from ..cache import CachingCompilerOptions
from ..compute.decodable import NnetSimpleComputationOptions
from ..compute.xvector import XvectorComputeConfig
from .common import check_num_args, kaldi_command, options_from, register_options, run
from .options import (computation_options, computation_options_from, disk_cache_options,
                      optimization_options, optimize_options_from, use_gpu_option)

USAGE = """Propagate features through an xvector neural network model and write
the output vectors.  "Xvector" is our term for a vector or
embedding which is the output of a particular type of neural network
architecture found in speaker recognition.  This architecture
consists of several layers that operate on frames, a statistics
pooling layer that aggregates over the frame-level representations
and possibly additional layers that operate on segment-level
representations.  The xvectors are generally extracted from an
output layer after the statistics pooling layer.  By default, one
xvector is extracted directly from the set of features for each
utterance.  Optionally, xvectors are extracted from chunks of input
features and averaged, to produce a single vector.

\b
Usage: nnet3-xvector-compute [options] <raw-nnet-in> <features-rspecifier> <vector-wspecifier>
e.g.: nnet3-xvector-compute final.raw scp:feats.scp ark:nnet_prediction.ark
See also: nnet3-compute"""


@kaldi_command(USAGE)
@register_options(NnetSimpleComputationOptions(acoustic_scale=1.0), names=(
    "extra_left_context", "extra_right_context", "extra_left_context_initial",
    "extra_right_context_final", "frame_subsampling_factor", "acoustic_scale",
    "frames_per_chunk", "debug_computation"))
@optimization_options
@computation_options
# (Kaldi registers the compiler's options here without a prefix.)
@register_options(CachingCompilerOptions, names=("use_shortcut", "cache_capacity"))
@use_gpu_option("no", "yes|no|optional|wait, only has effect if compiled with CUDA")
@register_options(XvectorComputeConfig, names=("chunk_size", "min_chunk_size", "pad_input"))
@disk_cache_options()
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute on the CPU: numpy (NumPy and "
              "its BLAS only) or numba (the Numba backend's kernels).")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (3,))
    from ..compute.backend import select_compute_backend
    from ..compute.xvector import nnet3_xvector_compute

    compiler_config = options_from(CachingCompilerOptions, kw,
                                   names=("use_shortcut", "cache_capacity"))
    opts = options_from(
        NnetSimpleComputationOptions(acoustic_scale=1.0), kw,
        optimize_config=optimize_options_from(kw), compute_config=computation_options_from(kw),
        compiler_config=compiler_config)
    config = options_from(
        XvectorComputeConfig, kw, names=("chunk_size", "min_chunk_size", "pad_input"),
        opts=opts, backend=select_compute_backend(kw.pop("use_gpu"), kw.pop("cpu_backend")),
        cache_dir=kw.pop("cache_dir") or None, use_disk_cache=kw.pop("use_disk_cache"))
    result = nnet3_xvector_compute(config, args[0], args[1], args[2])
    if result.num_success == 0:  # Kaldi's exit status when nothing was computed
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-xvector-compute")
