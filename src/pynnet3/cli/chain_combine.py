"""nnet3-chain-combine: the average of the last n models with the best chain objective."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.objective import ChainTrainingOptions
from ..train.combine import NnetCombineOptions
from .common import bool_option, check_min_args, kaldi_command, options_from, register_options, run
from .options import use_gpu_option

USAGE = """Using a subset of training or held-out nnet3+chain examples, compute
the average over the first n nnet models where we maximize the
'chain' objective function for n. Note that the order of models has
been reversed before feeding into this binary. So we are actually
combining last n models.
Inputs and outputs are nnet3 raw nnets.

\b
Usage:  nnet3-chain-combine [options] <den-fst> <raw-nnet-in1> <raw-nnet-in2> ... <raw-nnet-inN> <chain-examples-in> <raw-nnet-out>

\b
e.g.:
 nnet3-combine den.fst 35.raw 36.raw 37.raw 38.raw ark:valid.cegs final.raw"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@register_options(NnetCombineOptions, names=("max_objective_evaluations",))
@use_gpu_option(None, "yes|no|optional|wait: where the objectives are computed (cuda or the "
                "Numba cpu backend).  Default: the CPU, as Kaldi's CPU-only build does "
                "(Kaldi's default is 'yes', which only has an effect in a CUDA build).")
@register_options(NnetCombineOptions, names=("batchnorm_test_mode", "dropout_test_mode"))
@register_options(ChainTrainingOptions)
@click.argument("args", nargs=-1)
def command(binary: bool, use_gpu: str | None, args: tuple[str, ...], **kwargs: Any) -> None:
    check_min_args(args, 4)
    from .. import log
    from ..compile.model_io import write_nnet
    from ..compute.backend import get_backend, select_backend
    from ..train.chain.combine import chain_combine_nnets

    config = options_from(NnetCombineOptions, kwargs)
    chain_config = options_from(ChainTrainingOptions, kwargs)
    backend = get_backend("cpu") if use_gpu is None else select_backend(use_gpu)
    nnet = chain_combine_nnets(args[0], list(args[1:-2]), args[-2], config, chain_config,
                               backend=backend)
    write_nnet(args[-1], nnet, binary)
    log.log(f"Finished combining neural nets, wrote model to {args[-1]}")


def main() -> int:
    return run(command, "nnet3-chain-combine")
