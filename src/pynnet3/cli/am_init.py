"""nnet3-am-init: make an nnet3 acoustic model (.mdl) from a transition model
(or a tree and a topology) and a raw nnet."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Initialize nnet3 am-nnet (i.e. neural network-based acoustic model, with
associated transition model) from an existing transition model and nnet..
Search for examples in scripts in /egs/wsj/s5/steps/nnet3/
Set priors using nnet3-am-train-transitions or nnet3-am-adjust-priors

\b
Usage:  nnet3-am-init [options] <tree-in> <topology-in> <input-raw-nnet> <output-am-nnet>
  or:  nnet3-am-init [options] <trans-model-in> <input-raw-nnet> <output-am-nnet>
e.g.:
 nnet3-am-init tree topo 0.raw 0.mdl
See also: nnet3-init, nnet3-am-copy, nnet3-am-info, nnet3-am-train-transitions,
 nnet3-am-adjust-priors"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@click.argument("args", nargs=-1)
def command(binary: bool, args: tuple[str, ...]) -> None:
    check_num_args(args, (3, 4))
    from ..train.acoustic_model import am_init

    if len(args) == 4:
        am_init(args[2], args[3], tree_rx=args[0], topo_rx=args[1], binary=binary)
    else:
        am_init(args[1], args[2], trans_model_rx=args[0], binary=binary)


def main() -> int:
    return run(command, "nnet3-am-init")
