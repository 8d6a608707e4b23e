"""nnet3-compute-onnx: run a model written by nnet3-export-onnx over feature matrices."""
from __future__ import annotations

from typing import Any

import click

from ..export.runtime import ComputeOnnxConfig
from .common import check_num_args, kaldi_command, options_from, register_options, run

USAGE = """Propagate the features through a network exported by nnet3-export-onnx (with
onnxruntime) and write the output, chunk by chunk exactly as nnet3-compute does
with the options given to nnet3-export-onnx.
If --apply-exp=true, apply the Exp() function to the output before writing it out.

\b
Usage: nnet3-compute-onnx [options] <onnx-in> <features-rspecifier> <matrix-wspecifier>
 e.g.: nnet3-compute-onnx final.onnx scp:feats.scp ark:nnet_prediction.ark
See also: nnet3-export-onnx, nnet3-compute"""


@kaldi_command(USAGE)
@register_options(ComputeOnnxConfig)
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (3,))
    from ..export.runtime import nnet3_compute_onnx

    config = options_from(ComputeOnnxConfig, kw)
    if config.num_threads < 0:
        raise click.UsageError("--num-threads must be >= 0")
    num_done, _ = nnet3_compute_onnx(config, args[0], args[1], args[2])
    if num_done == 0:
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "nnet3-compute-onnx")
