"""nnet3-export-onnx: write a network's chunk computation as an ONNX model."""
from __future__ import annotations

from typing import Any

import click

from ..compute.decodable import NnetSimpleComputationOptions
from .common import bool_option, check_num_args, kaldi_command, options_from, register_options, run

USAGE = """Export a raw neural network (or the network of a .mdl) as an ONNX model that
computes the chunks nnet3-compute evaluates with the same options (test mode,
CollapseModel).  Run it with nnet3-compute-onnx, or with onnxruntime alone (the
chunk geometry is in the model's metadata; see docs/export.md).

\b
Usage: nnet3-export-onnx [options] <nnet-in> <onnx-out>
 e.g.: nnet3-export-onnx --frame-subsampling-factor=3 final.raw final.onnx
See also: nnet3-compute-onnx, nnet3-compute"""


@kaldi_command(USAGE)
@register_options(NnetSimpleComputationOptions(acoustic_scale=1.0), names=(
    "extra_left_context", "extra_right_context", "extra_left_context_initial",
    "extra_right_context_final", "frame_subsampling_factor", "frames_per_chunk"))
@click.option("--online-ivector-period", type=int, default=0, show_default=True,
              help="Number of frames between iVectors in matrices supplied to the "
              "--online-ivectors option (stored as nnet3-compute-onnx's default)")
@bool_option("--use-priors", False, "If true, subtract the logs of the priors stored with the "
             "model (in this case, a .mdl file is expected as input).")
@click.option("--output", "output", default="output", show_default=True,
              help="Output node(s) to export, comma-separated (e.g. output,output-xent)")
@click.option("--opset", type=int, default=17, show_default=True,
              help="ONNX opset of the model (17 runs on onnxruntime >= 1.14)")
@bool_option("--exact-chunks", False, "(pynnet3) If true, one computation per distinct chunk "
             "shape even where the network makes them equivalent (bigger model, same output).")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (2,))
    from ..export.exporter import ExportOptions
    from ..export.onnx_model import nnet3_export_onnx

    if kw["opset"] < 13:
        raise click.UsageError("--opset must be >= 13")
    outputs = tuple(o for o in kw.pop("output").split(",") if o)
    if not outputs:
        raise click.UsageError("--output must name at least one output node")
    opts = options_from(NnetSimpleComputationOptions(acoustic_scale=1.0), kw)
    options = ExportOptions(opts=opts, outputs=outputs,
                            online_ivector_period=kw["online_ivector_period"],
                            opset=kw["opset"], detect_equivalent_chunks=not kw["exact_chunks"])
    nnet3_export_onnx(options, args[0], args[1], kw["use_priors"])


def main() -> int:
    return run(command, "nnet3-export-onnx")
