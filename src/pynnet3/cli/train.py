"""nnet3-train: SGD training of a raw nnet3 network on merged egs."""
from __future__ import annotations

from typing import Any, Callable

import click

from .common import BOOL, bool_option, check_num_args, kaldi_command, run

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

Computation caches (--read-cache, --write-cache): pynnet3 cannot read Kaldi's
cache files (it warns and compiles afresh, as Kaldi does when the file is
missing).  Its own cache is a set of self-verifying entries (no pickle): a
path that is an existing directory is used as the cache directory itself
(read and added to); any other path is a single bundle file holding the
entries, so that '--read-cache=cache.N --write-cache=cache.N+1' works as in
Kaldi's scripts.  --binary-write-cache is accepted and has no effect.  The
output model is written atomically (temporary file and rename).  A progress
line is shown on stderr when it is a terminal."""


def compiler_and_computation_options(f: Callable) -> Callable:
    """Kaldi's ``--compiler.*`` and ``--computation.*`` options (shared by the
    training and diagnostic binaries) and ``--optimization.*``."""
    from ..optimize.options import register_click_options

    f = click.option("--computation.debug", "computation_debug", type=BOOL, default=False,
                     show_default=True, help="If true, turn on debug for the neural net "
                     "computation (very verbose!) Will be turned on regardless if "
                     "--verbose >= 5")(f)
    f = click.option("--compiler.cache-capacity", "compiler_cache_capacity", type=int,
                     default=64, show_default=True, help="Determines how many cached "
                     "computations we'll store.")(f)
    f = click.option("--compiler.use-shortcut", "compiler_use_shortcut", type=BOOL,
                     default=True, show_default=True, help="If true, use the 'shortcut' in "
                     "compilation whereby computation requests with regular structure are "
                     "identified as such, a computation with a smaller number of distinct "
                     "values of 'n' is compiled (e.g. 2), and the compiled computation is "
                     "expanded to match the size of the real computation request.")(f)
    return register_click_options(f)


def build_compile_options(kwargs: dict[str, Any]) -> tuple[Any, Any, bool]:
    """(OptimizeOptions, CachingCompilerOptions, computation debug) from the
    keyword arguments of :func:`compiler_and_computation_options`."""
    from ..cache import CachingCompilerOptions
    from ..optimize.options import options_from_click_kwargs

    optimize = options_from_click_kwargs(kwargs)
    compiler = CachingCompilerOptions(use_shortcut=kwargs.pop("compiler_use_shortcut"),
                                      cache_capacity=kwargs.pop("compiler_cache_capacity"))
    return optimize, compiler, kwargs.pop("computation_debug")


def use_gpu_option(f: Callable) -> Callable:
    return click.option(
        "--use-gpu", type=click.Choice(["yes", "no", "optional", "wait"]), default="no",
        show_default=True, help="yes|no|optional|wait: where the computation runs (cuda or "
        "the Numba cpu backend).  NOTE: Kaldi's default is 'yes', which only has an effect "
        "in a CUDA build; pynnet3's default is 'no'.")(f)


@kaldi_command(USAGE)
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for random number generator ")
@bool_option("--binary", True, "Write output in binary mode")
@use_gpu_option
@bool_option("--store-component-stats", True, "If true, store activations and derivatives for "
             "nonlinear components during training.")
@bool_option("--zero-component-stats", True, "If both this and --store-component-stats are "
             "true, then the component stats are zeroed before training.")
@click.option("--print-interval", type=int, default=100, show_default=True,
              help="Interval (measured in minibatches) after which we print out objective "
              "function during training")
@click.option("--max-param-change", type=float, default=2.0, show_default=True,
              help="The maximum change in parameters allowed per minibatch, measured in "
              "Euclidean norm over the entire model (change will be clipped to this value)")
@click.option("--momentum", type=float, default=0.0, show_default=True,
              help="Momentum constant to apply during training (help stabilize update).  e.g. "
              "0.9.  Note: we automatically multiply the learning rate by (1-momentum) so "
              "that the 'effective' learning rate is the same as before (because momentum "
              "would normally increase the effective learning rate by 1/(1-momentum))")
@click.option("--l2-regularize-factor", type=float, default=1.0, show_default=True,
              help="Factor that affects the strength of l2 regularization on model "
              "parameters.  The primary way to specify this type of l2 regularization is via "
              "the 'l2-regularize' configuration value at the config-file level.  "
              "--l2-regularize-factor will be multiplied by the component-level l2-regularize "
              "values and can be used to correct for effects related to parallelization by "
              "model averaging.")
@click.option("--batchnorm-stats-scale", type=float, default=0.8, show_default=True,
              help="Factor by which we scale down the accumulated stats of batchnorm layers "
              "after processing each minibatch.  Ensure that the final model we write out has "
              "batchnorm stats that are fairly fresh.")
@click.option("--backstitch-training-scale", type=float, default=0.0, show_default=True,
              help="backstitch training factor. if 0 then in the normal training mode. It is "
              "referred to as '\\alpha' in our publications.")
@click.option("--backstitch-training-interval", type=int, default=1, show_default=True,
              help="do backstitch training with the specified interval of minibatches. It is "
              "referred to as 'n' in our publications.")
@click.option("--read-cache", default="", help="The location from which to read the cached "
              "computation (a pynnet3 cache directory or bundle file; see above).")
@click.option("--write-cache", default="", help="The location to which to write the cached "
              "computation (a pynnet3 cache directory or bundle file; see above).")
@bool_option("--binary-write-cache", True, "Write computation cache in binary mode (no effect: "
             "pynnet3's cache format is always binary).")
@compiler_and_computation_options
@click.argument("args", nargs=-1)
def command(srand: int, binary: bool, use_gpu: str, store_component_stats: bool,
            zero_component_stats: bool, print_interval: int, max_param_change: float,
            momentum: float, l2_regularize_factor: float, batchnorm_stats_scale: float,
            backstitch_training_scale: float, backstitch_training_interval: int,
            read_cache: str, write_cache: str, binary_write_cache: bool, args: tuple[str, ...],
            **kwargs: Any) -> None:
    check_num_args(args, (3,))
    from .. import log
    from ..compute.backend import select_backend
    from ..compute.computer import NnetComputeOptions
    from ..nnet.components.base import set_random_seed
    from ..compile.model_io import read_nnet, write_nnet
    from ..train.egs import iter_examples
    from ..train.kaldi_random import GlibcRand
    from ..train.trainer import NnetTrainer, NnetTrainerOptions
    from .progress import Progress

    optimize, compiler, debug = build_compile_options(kwargs)
    set_random_seed(srand)
    rand = GlibcRand(srand)
    config = NnetTrainerOptions(
        zero_component_stats=zero_component_stats, store_component_stats=store_component_stats,
        print_interval=print_interval, debug_computation=debug, momentum=momentum,
        l2_regularize_factor=l2_regularize_factor,
        backstitch_training_scale=backstitch_training_scale,
        backstitch_training_interval=backstitch_training_interval,
        batchnorm_stats_scale=batchnorm_stats_scale, read_cache=read_cache,
        write_cache=write_cache, binary_write_cache=binary_write_cache,
        max_param_change=max_param_change, optimize_config=optimize,
        compute_config=NnetComputeOptions(debug=debug, compress_matrices=False),
        compiler_config=compiler)
    backend = select_backend(use_gpu)
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
    return run(command, "nnet3-train")
