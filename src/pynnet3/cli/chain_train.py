"""nnet3-chain-train: SGD training of a raw nnet3 network with the chain (LF-MMI) objective."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.objective import ChainTrainingOptions
from ..train.chain.trainer import NnetChainTrainingOptions
from ..train.trainer import NnetTrainerOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)
from .options import (BLAS_PRODUCTS_USE, apply_num_threads, build_compile_options,
                      compiler_and_computation_options, disk_cache_dir_from,
                      disk_cache_options, num_threads_option, use_gpu_option)

USAGE = """Train nnet3+chain neural network parameters with backprop and stochastic
gradient descent.  Minibatches are to be created by nnet3-chain-merge-egs in
the input pipeline.  This training program is single-threaded (best to
use it with a GPU).

\b
Usage:  nnet3-chain-train [options] <raw-nnet-in> <denominator-fst-in> <chain-training-examples-in> <raw-nnet-out>

\b
nnet3-chain-train 1.raw den.fst 'ark:nnet3-merge-egs 1.cegs ark:-|' 2.raw

Computation caches (the on-disk cache, --read-cache and --write-cache) are
pynnet3's own, as for nnet3-train.  The output model is written atomically."""


# As nnet3-train (cli/train.py): one BLAS thread unless --num-threads or a
# thread variable asks for more, and the NumPy backend by default (the chain
# minibatches' row operations are as fast there, and the Numba backend's
# kernels cost start-up time to load).
BLAS_THREADS = 1


@kaldi_command(USAGE)
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for random number generator ")
@bool_option("--binary", True, "Write output in binary mode")
@use_gpu_option("no", "yes|no|optional|wait: where the network runs (cuda or the CPU, see "
                "--cpu-backend).  NOTE: Kaldi's default is 'yes', which only has an effect in a CUDA "
                "build; pynnet3's default is 'no'.")
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute the network on the CPU: numpy "
              "(NumPy and its BLAS only) or numba (the Numba backend's kernels for the row "
              "operations).  The chain objective always uses its Numba kernels.  The trained "
              "model is the same.")
@register_options(NnetTrainerOptions, names=(
    "store_component_stats", "zero_component_stats", "print_interval", "max_param_change",
    "momentum", "l2_regularize_factor", "batchnorm_stats_scale", "backstitch_training_scale",
    "backstitch_training_interval", "read_cache", "write_cache", "binary_write_cache"))
@compiler_and_computation_options
@disk_cache_options()
@register_options(ChainTrainingOptions)
@register_options(NnetChainTrainingOptions, names=("apply_deriv_weights",))
@num_threads_option(BLAS_PRODUCTS_USE)
@click.argument("args", nargs=-1)
def command(srand: int, binary: bool, use_gpu: str, cpu_backend: str, num_threads: int,
            args: tuple[str, ...], **kwargs: Any) -> None:
    check_num_args(args, (4,))
    apply_num_threads(num_threads, BLAS_THREADS)
    from .. import log
    from ..compile.model_io import read_nnet, write_nnet
    from ..compute.backend import select_compute_backend
    from ..compute.computer import NnetComputeOptions
    from ..nnet.components.base import set_random_seed
    from ..train.chain.den_graph import DenominatorGraph
    from ..train.chain.egs import iter_chain_examples
    from ..train.chain.fst import read_fst_file
    from ..train.chain.trainer import NnetChainTrainer
    from ..train.kaldi_random import GlibcRand
    from .progress import Progress

    optimize, compiler, debug = build_compile_options(kwargs)
    nnet_config = options_from(
        NnetTrainerOptions, kwargs, debug_computation=debug, optimize_config=optimize,
        compute_config=NnetComputeOptions(debug=debug, compress_matrices=False),
        compiler_config=compiler, disk_cache_dir=disk_cache_dir_from(kwargs))
    chain_config = options_from(ChainTrainingOptions, kwargs)
    opts = options_from(NnetChainTrainingOptions, kwargs, names=("apply_deriv_weights",),
                        nnet_config=nnet_config, chain_config=chain_config)
    set_random_seed(srand)
    rand = GlibcRand(srand)
    backend = select_compute_backend(use_gpu, cpu_backend)
    nnet = read_nnet(args[0])
    den_fst = read_fst_file(args[1])
    den_graph = DenominatorGraph.from_fst(den_fst, nnet.output_dim("output"))
    progress = Progress("nnet3-chain-train", unit="frames")
    with NnetChainTrainer(opts, den_graph, nnet, rand, backend=backend) as trainer:
        try:
            for _, eg in iter_chain_examples(args[2]):
                trainer.train(eg)
                progress.update(1, sum(sup.indexes.shape[0] for sup in eg.outputs))
        finally:
            progress.close()
        ok = trainer.print_total_stats()
    log.log(trainer.compiler.timing_summary())
    write_nnet(args[3], nnet, binary)
    log.log(f"Wrote raw model to {args[3]}")
    if not ok:
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-chain-train")
