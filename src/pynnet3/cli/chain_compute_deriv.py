"""nnet3-chain-compute-deriv (pynnet3's own): the chain objective and its
derivative w.r.t. the network output for merged chain egs, as matrices."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.objective import ChainTrainingOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)

USAGE = """Computes, for the first --num-egs merged nnet3+chain examples, the network
output 'output', the derivative of the chain objective w.r.t. it (as
chain::ComputeChainObjfAndDeriv gives it: l2 and out-of-range terms included,
not scaled by the examples' deriv weights) and the numerator posteriors, and
writes them as float matrices: KEY/output, KEY/deriv, KEY/xent_deriv,
KEY/output_xent (if the network has 'output-xent') and KEY/objf_l2_weight
(1 x 3: objective, l2 term, weight), rows in Kaldi's order (t-major:
row = t_index * num_sequences + n).  Dropout is in test mode; BatchNorm as
--batchnorm-test-mode says (false: minibatch statistics, as in training).
This is a pynnet3 debugging tool (Kaldi has no such binary).

\b
Usage:  nnet3-chain-compute-deriv [options] <raw-nnet-in> <denominator-fst> <chain-examples-in> <matrix-wspecifier>
e.g.: nnet3-chain-compute-deriv --xent-regularize=0.1 0.raw den.fst ark:merged.cegs ark:deriv.ark"""


@kaldi_command(USAGE)
@bool_option("--batchnorm-test-mode", True, "If true, set test-mode to true on any "
             "BatchNormComponents.")
@click.option("--num-egs", type=int, default=1, show_default=True,
              help="Number of (merged) examples to process, from the start")
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for the random draws of the objective (glibc rand(), as Kaldi: the "
              "range check and the out-of-range penalty applied on about half the calls)")
@register_options(ChainTrainingOptions)
@click.argument("args", nargs=-1)
def command(batchnorm_test_mode: bool, num_egs: int, srand: int, args: tuple[str, ...],
            **kwargs: Any) -> None:
    check_num_args(args, (4,))
    from .. import log
    from ..compile.model_io import read_nnet
    from ..io.table import MATRIX_HOLDER, TableWriter
    from ..nnet.components.base import fmt_g
    from ..nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode
    from ..train.chain.den_graph import DenominatorGraph
    from ..train.chain.diagnostics import compute_chain_derivs
    from ..train.chain.egs import iter_chain_examples
    from ..train.chain.fst import read_fst_file
    from ..train.kaldi_random import GlibcRand

    chain_config = options_from(ChainTrainingOptions, kwargs)
    chain_config.check()
    nnet = read_nnet(args[0])
    set_dropout_test_mode(True, nnet)
    if batchnorm_test_mode:
        set_batchnorm_test_mode(True, nnet)
    den_graph = DenominatorGraph.from_fst(read_fst_file(args[1]), nnet.output_dim("output"))
    rand = GlibcRand(srand)
    done = 0
    with TableWriter(args[3], MATRIX_HOLDER) as writer:
        for key, eg in iter_chain_examples(args[2]):
            if done >= num_egs:
                break
            mats = compute_chain_derivs(nnet, den_graph, eg, chain_config, rand.rand_int,
                                        backend="cpu")
            for name, mat in mats.items():
                writer.write(f"{key}/{name}", mat)
            objf, l2, weight = (float(v) for v in mats["objf_l2_weight"][0])
            log.log(f"eg {key} objf {fmt_g(objf)} l2_term {fmt_g(l2)} weight {fmt_g(weight)} "
                    f"objf/weight {fmt_g(objf / weight)} rows {mats['output'].shape[0]}")
            done += 1
    if done == 0:
        log.warn(f"no examples read from {args[2]}")
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-chain-compute-deriv")
