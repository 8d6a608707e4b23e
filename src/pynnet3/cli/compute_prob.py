"""nnet3-compute-prob: average objective and accuracy of a network on egs."""
from __future__ import annotations

from typing import Any

import click

from ..train.diagnostics import NnetComputeProbOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)
from .options import (BLAS_PRODUCTS_USE, apply_num_threads, build_compile_options,
                      compiler_and_computation_options, disk_cache_dir_from,
                      disk_cache_options, num_threads_option)

USAGE = """Computes and prints in logging messages the average log-prob per frame of
the given data with an nnet3 neural net.  The input of this is the output of
e.g. nnet3-get-egs | nnet3-merge-egs.

\b
Usage:  nnet3-compute-prob [options] <raw-model-in> <training-examples-in>
e.g.: nnet3-compute-prob 0.raw ark:valid.egs"""


# --num-threads buys BLAS threads for the matrix products, and only when
# given: by default the BLAS keeps to one thread, because its threads split
# these products (hundreds of rows) with a spinning barrier each, which costs
# more CPU than it saves wherever the cores are shared (bench/train.py's
# egs, minibatches of 128 x 8 frames, on the project's loaded 2-core machine:
# nnet3-train 8.3-11.0 s with one BLAS thread, 20-53 s with two;
# nnet3-compute-prob 2.45 CPU seconds with one, 3.55 with two, no faster).
BLAS_THREADS = 1

@kaldi_command(USAGE)
@bool_option("--batchnorm-test-mode", True, "If true, set test-mode to true on any "
             "BatchNormComponents.")
@bool_option("--dropout-test-mode", True, "If true, set test-mode to true on any "
             "DropoutComponents and DropoutMaskComponents.")
@bool_option("--collapse-model", True, "If true, collapse model to the extent possible before "
             "using it (for efficiency).")
@register_options(NnetComputeProbOptions)
@compiler_and_computation_options
@disk_cache_options()
@num_threads_option(BLAS_PRODUCTS_USE)
@click.option("--cpu-backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="(pynnet3) How to compute on the CPU: numpy (NumPy and "
              "its BLAS only) or numba (the Numba backend's kernels for the row operations; "
              "loading them costs about 0.4 s at start-up).  The figures printed are the same.")
@click.argument("args", nargs=-1)
def command(batchnorm_test_mode: bool, dropout_test_mode: bool, collapse_model: bool,
            num_threads: int, cpu_backend: str, args: tuple[str, ...], **kwargs: Any) -> None:
    check_num_args(args, (2,))
    apply_num_threads(num_threads, BLAS_THREADS)
    from ..compute.computer import NnetComputeOptions
    from ..nnet.collapse import CollapseModelConfig
    from ..nnet.collapse import collapse_model as collapse
    from ..compile.model_io import read_nnet
    from ..nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode
    from ..train.diagnostics import NnetComputeProb
    from ..train.egs import iter_examples
    from .progress import Progress

    optimize, compiler, debug = build_compile_options(kwargs)
    nnet = read_nnet(args[0])
    if batchnorm_test_mode:
        set_batchnorm_test_mode(True, nnet)
    if dropout_test_mode:
        set_dropout_test_mode(True, nnet)
    if collapse_model:
        collapse(nnet, CollapseModelConfig())
    opts = options_from(
        NnetComputeProbOptions, kwargs, optimize_config=optimize, compiler_config=compiler,
        disk_cache_dir=disk_cache_dir_from(kwargs),
        compute_config=NnetComputeOptions(debug=debug or kwargs["debug_computation"],
                                          compress_matrices=False))
    # Kaldi's nnet3-compute-prob has no GPU option: it runs on the CPU, by
    # default on the NumPy backend (as nnet3-train), which spares the Numba
    # start-up of every diagnostic job of a recipe.
    prob_computer = NnetComputeProb(opts, nnet,
                                    backend="reference" if cpu_backend == "numpy" else "cpu")
    # A progress line on stderr when it is a terminal (never in a log file).
    progress = Progress("nnet3-compute-prob", unit="frames")
    try:
        for _, eg in iter_examples(args[1]):
            prob_computer.compute(eg)
            progress.update(1, sum(io.indexes.shape[0] for io in eg.io
                                   if nnet.is_output_node(nnet.get_node_index(io.name))))
    finally:
        progress.close()
    if not prob_computer.print_total_stats():
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-compute-prob")
