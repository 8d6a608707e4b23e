"""nnet3-copy: copy a raw nnet3 network, optionally editing it on the way."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Copy 'raw' nnet3 neural network to standard output
Also supports setting all the learning rates to a value
(the --learning-rate option)

\b
Usage:  nnet3-copy [options] <nnet-in> <nnet-out>
e.g.:
 nnet3-copy --binary=false 0.raw text.raw"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@click.option("--learning-rate", type=float, default=-1.0, show_default=True,
              help="If supplied, all the learning rates of updatable components are set to this value.")
@click.option("--nnet-config", default="", help="nnet3 config file that adds or replaces "
              "components or nodes (as given to nnet3-init).")
@click.option("--edits-config", default="", help="Edits-config file that modifies the network "
              "(applied after --nnet-config).")
@click.option("--edits", default="", help="Inline alternative to --edits-config; semicolons "
              "become newlines, e.g. '--edits=remove-orphans'.")
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="The parameter matrices are scaled by the specified value.")
@bool_option("--prepare-for-test", False, "If true, prepares the model for test time: test mode "
             "in dropout and batch-norm components, and CollapseModel().")
@bool_option("--batchnorm-test-mode", False, "Batch-norm components' test mode is set to this "
             "value (overridden by --prepare-for-test).")
@click.argument("args", nargs=-1)
def command(binary: bool, learning_rate: float, nnet_config: str, edits_config: str, edits: str,
            scale: float, prepare_for_test: bool, batchnorm_test_mode: bool,
            args: tuple[str, ...]) -> None:
    check_num_args(args, (2,))
    from .. import log
    from ..nnet.edit import NnetEditOptions, edit_nnet
    from ..compile.model_io import read_nnet, write_nnet

    nnet = read_nnet(args[0])
    edit_nnet(nnet, NnetEditOptions(nnet_config=nnet_config, learning_rate=learning_rate,
                                    scale=scale, edits_config=edits_config, edits=edits,
                                    prepare_for_test=prepare_for_test,
                                    batchnorm_test_mode=batchnorm_test_mode))
    write_nnet(args[1], nnet, binary)
    log.log(f"Copied raw neural net from {args[0]} to {args[1]}")


def main() -> int:
    return run(command, "nnet3-copy")
