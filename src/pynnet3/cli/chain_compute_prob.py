"""nnet3-chain-compute-prob: average chain objective of a network on chain egs."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.objective import ChainTrainingOptions
from ..train.diagnostics import NnetComputeProbOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)
from .options import (build_compile_options, compiler_and_computation_options,
                      disk_cache_dir_from, disk_cache_options)

USAGE = """Computes and prints to in logging messages the average log-prob per frame of
the given data with an nnet3+chain neural net.  The input of this is the output of
e.g. nnet3-chain-get-egs | nnet3-chain-merge-egs.

\b
Usage:  nnet3-chain-compute-prob [options] <raw-nnet3-model-in> <denominator-fst> <training-examples-in>
e.g.: nnet3-chain-compute-prob 0.mdl den.fst ark:valid.egs"""


@kaldi_command(USAGE)
@bool_option("--batchnorm-test-mode", True, "If true, set test-mode to true on any "
             "BatchNormComponents.")
@bool_option("--dropout-test-mode", True, "If true, set test-mode to true on any "
             "DropoutComponents and DropoutMaskComponents.")
@register_options(NnetComputeProbOptions)
@compiler_and_computation_options
@disk_cache_options()
@register_options(ChainTrainingOptions)
@click.argument("args", nargs=-1)
def command(batchnorm_test_mode: bool, dropout_test_mode: bool, args: tuple[str, ...],
            **kwargs: Any) -> None:
    check_num_args(args, (3,))
    from .. import log
    from ..compile.model_io import read_nnet
    from ..compute.computer import NnetComputeOptions
    from ..nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode
    from ..train.chain.den_graph import DenominatorGraph
    from ..train.chain.diagnostics import NnetChainComputeProb
    from ..train.chain.egs import iter_chain_examples
    from ..train.chain.fst import read_fst_file
    from .progress import Progress

    optimize, compiler, debug = build_compile_options(kwargs)
    chain_config = options_from(ChainTrainingOptions, kwargs)
    opts = options_from(
        NnetComputeProbOptions, kwargs, optimize_config=optimize, compiler_config=compiler,
        disk_cache_dir=disk_cache_dir_from(kwargs),
        compute_config=NnetComputeOptions(debug=debug or kwargs["debug_computation"],
                                          compress_matrices=False))
    nnet = read_nnet(args[0])
    if batchnorm_test_mode:
        set_batchnorm_test_mode(True, nnet)
    if dropout_test_mode:
        set_dropout_test_mode(True, nnet)
    den_graph = DenominatorGraph.from_fst(read_fst_file(args[1]), nnet.output_dim("output"))
    # Kaldi's nnet3-chain-compute-prob has no GPU option: it runs on the CPU.
    prob = NnetChainComputeProb(opts, chain_config, den_graph, nnet, backend="cpu")
    progress = Progress("nnet3-chain-compute-prob", unit="frames")
    try:
        for _, eg in iter_chain_examples(args[2]):
            prob.compute(eg)
            progress.update(1, sum(sup.indexes.shape[0] for sup in eg.outputs))
    finally:
        progress.close()
    ok = prob.print_total_stats()
    log.log(prob.compiler.timing_summary())
    if not ok:
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-chain-compute-prob")
