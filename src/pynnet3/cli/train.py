"""nnet3-train: SGD training of a raw nnet3 network on merged egs."""
from __future__ import annotations

from typing import Any

import click

from ..train.trainer import NnetTrainerOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)
from .options import (BLAS_PRODUCTS_USE, apply_num_threads, build_compile_options,
                      compiler_and_computation_options, disk_cache_dir_from,
                      disk_cache_options, num_threads_option, use_gpu_option)

USAGE = """Train nnet3 neural network parameters with backprop and stochastic
gradient descent.  Minibatches are to be created by nnet3-merge-egs in
the input pipeline.  This training program is single-threaded (best to
use it with a GPU); see nnet3-train-parallel for multi-threaded training
that is better suited to CPUs.

\b
Usage:  nnet3-train [options] <raw-model-in> <training-examples-in> <raw-model-out>

\b
e.g.:
nnet3-train 1.raw 'ark:nnet3-merge-egs 1.egs ark:-|' 2.raw

Computation caches: a run keeps the computations it compiles in pynnet3's
on-disk cache (--cache-dir, as nnet3-compute does), so that the next job
of a recipe with the same network and minibatch shapes loads them instead
of compiling; --use-disk-cache=false turns it off.  --read-cache and
--write-cache, when given, take its place, as in Kaldi.  pynnet3 cannot
read Kaldi's cache files (it warns and compiles afresh, as Kaldi does when
the file is missing).  Its own cache is a set of self-verifying entries
(no pickle): a path that is an existing directory is used as the cache
directory itself (read and added to); any other path is a single bundle
file holding the entries, so that '--read-cache=cache.N
--write-cache=cache.N+1' works as in Kaldi's scripts.
--binary-write-cache is accepted and has no effect.  The output model is
written atomically (temporary file and rename).  A progress
line is shown on stderr when it is a terminal."""


# --num-threads buys BLAS threads for the matrix products, and only when
# given: by default the BLAS keeps to one thread, because its threads split
# these products (hundreds of rows) with a spinning barrier each, which costs
# more CPU than it saves wherever the cores are shared (bench/train.py's
# egs, minibatches of 128 x 8 frames, on the project's loaded 2-core machine:
# nnet3-train 8.3-11.0 s with one BLAS thread, 20-53 s with two;
# nnet3-compute-prob 2.45 CPU seconds with one, 3.55 with two, no faster).
BLAS_THREADS = 1

@kaldi_command(USAGE)
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for random number generator ")
@bool_option("--binary", True, "Write output in binary mode")
@use_gpu_option("no", "yes|no|optional|wait: where the computation runs (cuda or the CPU, "
                "see --cpu-backend).  NOTE: Kaldi's default is 'yes', which only has an effect "
                "in a CUDA build; pynnet3's default is 'no'.")
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute on the CPU: numpy (NumPy and "
              "its BLAS only) or numba (the Numba backend's kernels for the row operations; "
              "loading them costs about a second of CPU at start-up).  The trained model is "
              "the same.")
@register_options(NnetTrainerOptions, names=(
    "store_component_stats", "zero_component_stats", "print_interval", "max_param_change",
    "momentum", "l2_regularize_factor", "batchnorm_stats_scale", "backstitch_training_scale",
    "backstitch_training_interval", "read_cache", "write_cache", "binary_write_cache"))
@compiler_and_computation_options
@disk_cache_options()
@num_threads_option(BLAS_PRODUCTS_USE)
@click.argument("args", nargs=-1)
def command(srand: int, binary: bool, use_gpu: str, cpu_backend: str, num_threads: int,
            args: tuple[str, ...],
            **kwargs: Any) -> None:
    check_num_args(args, (3,))
    apply_num_threads(num_threads, BLAS_THREADS)
    from .. import log
    from ..compute.backend import select_compute_backend
    from ..compute.computer import NnetComputeOptions
    from ..nnet.components.base import set_random_seed
    from ..compile.model_io import read_nnet, write_nnet
    from ..train.egs import iter_examples
    from ..train.kaldi_random import GlibcRand
    from ..train.trainer import NnetTrainer
    from .progress import Progress

    optimize, compiler, debug = build_compile_options(kwargs)
    config = options_from(
        NnetTrainerOptions, kwargs, debug_computation=debug, optimize_config=optimize,
        compute_config=NnetComputeOptions(debug=debug, compress_matrices=False),
        compiler_config=compiler, disk_cache_dir=disk_cache_dir_from(kwargs))
    set_random_seed(srand)
    rand = GlibcRand(srand)
    # (Kaldi's --use-gpu=no; on the CPU the NumPy backend by default: as fast
    # as the Numba one on training's row copies, without Numba's start-up.)
    backend = select_compute_backend(use_gpu, cpu_backend)
    nnet = read_nnet(args[0])
    progress = Progress("nnet3-train", unit="frames")
    with NnetTrainer(config, nnet, rand, backend=backend) as trainer:
        try:
            for _, eg in iter_examples(args[1]):
                trainer.train(eg)
                out = [io for io in eg.io if nnet.is_output_node(nnet.get_node_index(io.name))]
                progress.update(1, sum(io.indexes.shape[0] for io in out))
        finally:
            progress.close()
        ok = trainer.print_total_stats()
        write_nnet(args[2], nnet, binary)
        log.log(f"Wrote model to {args[2]}")
    # After the cache is written, as Kaldi's destructors do it.
    log.log(trainer.compiler.timing_summary())
    if not ok:
        raise click.exceptions.Exit(1)


def main() -> int:
    # (A process started as nnet3-train freezes its objects out of the
    # cyclic collector's reach after start-up and after the command: see
    # pynnet3.cli.resume_startup_gc.)
    return run(command, "nnet3-train")
