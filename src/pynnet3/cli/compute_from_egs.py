"""nnet3-compute-from-egs: the network's output for each eg (e.g. posteriors for priors)."""
from __future__ import annotations


import click

from .common import bool_option, check_num_args, kaldi_command, run
from .options import (BLAS_PRODUCTS_USE, apply_num_threads, disk_cache_options,
                      num_threads_option, use_gpu_option)

USAGE = """Read input nnet training examples, and compute the output for each one.
If --apply-exp=true, apply the Exp() function to the output before writing
it out.

\b
Usage:  nnet3-compute-from-egs [options] <raw-nnet-in> <training-examples-in> <matrices-out>
e.g.:
nnet3-compute-from-egs --apply-exp=true 0.raw ark:1.egs ark:- | matrix-sum-rows ark:- ... 
See also: nnet3-compute"""


# --num-threads buys BLAS threads for the matrix products, and only when
# given: by default the BLAS keeps to one thread, because its threads split
# these products (hundreds of rows) with a spinning barrier each, which costs
# more CPU than it saves wherever the cores are shared (bench/train.py's
# egs, minibatches of 128 x 8 frames, on the project's loaded 2-core machine:
# nnet3-train 8.3-11.0 s with one BLAS thread, 20-53 s with two;
# nnet3-compute-prob 2.45 CPU seconds with one, 3.55 with two, no faster).
BLAS_THREADS = 1

@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode (as in Kaldi, the matrices-out "
             "wspecifier decides: 'ark,t:' for text)")
@bool_option("--apply-exp", False, "If true, apply exp function to output")
@click.option("--output-name", default="output", show_default=True,
              help="Do computation for specified output-node")
@use_gpu_option(None, "yes|no|optional|wait.  Default: the GPU when one is usable (as Kaldi's "
                "CUDA build with its default 'yes'), else the CPU (as Kaldi's CPU build, where "
                "the option has no effect).")
@disk_cache_options()
@num_threads_option(BLAS_PRODUCTS_USE)
@click.argument("args", nargs=-1)
def command(binary: bool, apply_exp: bool, output_name: str, use_gpu: str | None,
            cache_dir: str, use_disk_cache: bool, num_threads: int,
            args: tuple[str, ...]) -> None:
    check_num_args(args, (3,))
    apply_num_threads(num_threads, BLAS_THREADS)
    from ..compile.model_io import read_nnet
    from ..compute.backend import select_compute_backend
    from ..train.compute_from_egs import NnetComputerFromEg, compute_from_egs

    backend = select_compute_backend(use_gpu)
    nnet = read_nnet(args[0])
    computer = NnetComputerFromEg(nnet, backend, cache_dir=cache_dir or None,
                                  use_disk_cache=use_disk_cache)
    compute_from_egs(nnet, args[1], args[2], apply_exp=apply_exp, output_name=output_name,
                     computer=computer)


def main() -> int:
    return run(command, "nnet3-compute-from-egs")
