"""nnet3-show-progress: objective change and parameter change between two networks."""
from __future__ import annotations

from typing import Any

import click

from ..train.diagnostics import NnetComputeProbOptions
from .common import check_num_args, kaldi_command, options_from, register_options, run
from .options import build_compile_options, compiler_and_computation_options, use_gpu_option

USAGE = """Given an old and a new 'raw' nnet3 network and some training examples
(possibly held-out), show the average objective function given the
mean of the two networks, and the breakdown by component of why this
happened (computed from derivative information). Also shows parameter
differences per layer. If training examples not provided, only shows
parameter differences per layer.

\b
Usage:  nnet3-show-progress [options] <old-net-in> <new-net-in> [<training-examples-in>]
e.g.: nnet3-show-progress 1.nnet 2.nnet ark:valid.egs"""


@kaldi_command(USAGE)
@click.option("--num-segments", type=int, default=1, show_default=True,
              help="Number of line segments used for computing derivatives")
@use_gpu_option("no", "yes|no|optional|wait, only has effect if compiled with CUDA (pynnet3 "
                "computes this on the CPU)", check_choice=False)
@register_options(NnetComputeProbOptions)
@compiler_and_computation_options
@click.argument("args", nargs=-1)
def command(num_segments: int, use_gpu: str, args: tuple[str, ...], **kwargs: Any) -> None:
    check_num_args(args, (2, 3))
    if num_segments < 1:
        raise click.UsageError("--num-segments must be at least 1")
    from ..compute.computer import NnetComputeOptions
    from ..compile.model_io import read_nnet
    from ..train.egs import iter_examples
    from ..train.show_progress import show_progress

    optimize, compiler, debug = build_compile_options(kwargs)
    nnet1 = read_nnet(args[0])
    nnet2 = read_nnet(args[1])
    examples = [eg for _, eg in iter_examples(args[2])] if len(args) == 3 else None
    opts = options_from(
        NnetComputeProbOptions, kwargs, compute_deriv=True, optimize_config=optimize,
        compiler_config=compiler,
        compute_config=NnetComputeOptions(debug=debug or kwargs["debug_computation"],
                                          compress_matrices=False))
    show_progress(nnet1, nnet2, examples, num_segments, opts)


def main() -> int:
    return run(command, "nnet3-show-progress")
