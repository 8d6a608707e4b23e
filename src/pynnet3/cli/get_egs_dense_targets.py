"""nnet3-get-egs-dense-targets: like nnet3-get-egs, with dense matrix targets."""
from __future__ import annotations

import click

from ..train.egs_tools import GetEgsOptions
from .common import kaldi_command, register_options, run
from .get_egs import egs_generation_options, run_get_egs

USAGE = """Get frame-by-frame examples of data for nnet3 neural network training.
This program is similar to nnet3-get-egs, but the targets here are dense matrices
instead of posteriors (sparse matrices).
This is useful when you want the targets to be continuous real-valued with the
neural network possibly trained with a quadratic objective

\b
Usage:  nnet3-get-egs-dense-targets --num-targets=<n> [options] <features-rspecifier> <targets-rspecifier> <egs-out>

\b
An example [where $feats expands to the actual features]:
nnet-get-egs-dense-targets --num-targets=26 --left-context=12 \\
--right-context=9 --num-frames=8 "$feats" \\
"ark:copy-matrix ark:exp/snrs/snr.1.ark ark:- |"
   ark:-"""


@kaldi_command(USAGE)
@register_options(GetEgsOptions, names=("compress",), help={
    "compress": "If true, write egs with input features in compressed format (recommended).  "
    "This is only relevant if the features being read are un-compressed; if already "
    "compressed, we keep the same compressed format when dumping egs."})
@click.option("--num-targets", "num_pdfs", type=int, default=-1, show_default=True,
              help="Output dimension in egs, only used to check targets have correct dim if "
              "supplied.")
@egs_generation_options
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw) -> None:
    run_get_egs(kw, args, dense=True)


def main() -> int:
    return run(command, "nnet3-get-egs-dense-targets")
