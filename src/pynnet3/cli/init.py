"""nnet3-init: initialise a raw nnet3 network from a config file."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Initialize nnet3 neural network from a config file; outputs 'raw' nnet
without associated information such as transition model and priors.
Can also be used to add layers to existing model (provide existing model
as 1st arg)

\b
Usage:  nnet3-init [options] [<existing-model-in>] <config-in> <raw-nnet-out>
e.g.:
 nnet3-init nnet.config 0.raw
or: nnet3-init 1.raw nnet.config 2.raw
See also: nnet3-copy, nnet3-info"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@click.option("--srand", type=int, default=0, show_default=True,
              help="Seed for random number generator")
@click.argument("args", nargs=-1)
def command(binary: bool, srand: int, args: tuple[str, ...]) -> None:
    check_num_args(args, (2, 3))
    from .. import log
    from ..io.kaldi_io import read_rxfilename
    from ..nnet.components.base import set_random_seed
    from ..compile.model_io import read_nnet, write_nnet
    from ..nnet.nnet import Nnet

    set_random_seed(srand)
    nnet = Nnet()
    if len(args) == 3:
        nnet = read_nnet(args[0])
        log.log(f"Read raw neural net from {args[0]}")
    config_in, raw_out = args[-2], args[-1]
    nnet.read_config(read_rxfilename(config_in), config_in)
    write_nnet(raw_out, nnet, binary)
    log.log(f"Initialized raw neural net and wrote it to {raw_out}")


def main() -> int:
    return run(command, "nnet3-init")
