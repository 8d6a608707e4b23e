"""nnet3-am-copy: copy an nnet3 acoustic model (.mdl), or extract its raw nnet."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Copy nnet3 neural-net acoustic model file; supports conversion
to raw model (--raw=true).
Also supports setting all learning rates to a supplied
value (the --learning-rate option),
and supports replacing the raw nnet in the model (the Nnet)
with a provided raw nnet (the --set-raw-nnet option)

\b
Usage:  nnet3-am-copy [options] <nnet-in> <nnet-out>
e.g.:
 nnet3-am-copy --binary=false 1.mdl text.mdl
 nnet3-am-copy --raw=true 1.mdl 1.raw"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@bool_option("--raw", False, "If true, write only 'raw' neural net without transition model and priors.")
@click.option("--set-raw-nnet", default="", help="Set the raw nnet inside the model to the one "
              "provided (an rxfilename); done before the learning-rate is changed.")
@click.option("--nnet-config", default="", help="nnet3 config file that adds or replaces "
              "components or nodes (as given to nnet3-init).")
@click.option("--edits-config", default="", help="Edits-config file that modifies the network.")
@click.option("--edits", default="", help="Inline alternative to --edits-config; semicolons "
              "become newlines.")
@click.option("--learning-rate", type=float, default=-1.0, show_default=True,
              help="If supplied, all the learning rates of updatable components are set to this value.")
@click.option("--scale", type=float, default=1.0, show_default=True,
              help="The parameter matrices are scaled by the specified value.")
@bool_option("--prepare-for-test", False, "If true, prepares the model for test time: test mode "
             "in dropout and batch-norm components, and CollapseModel().")
@click.argument("args", nargs=-1)
def command(binary: bool, raw: bool, set_raw_nnet: str, nnet_config: str, edits_config: str,
            edits: str, learning_rate: float, scale: float, prepare_for_test: bool,
            args: tuple[str, ...]) -> None:
    check_num_args(args, (2,))
    from .. import log
    from ..compile.am_nnet import read_mdl, write_mdl
    from ..nnet.edit import NnetEditOptions, edit_nnet
    from ..compile.model_io import read_nnet, write_nnet

    trans_model, am_nnet, _ = read_mdl(args[0])
    if set_raw_nnet:
        am_nnet.set_nnet(read_nnet(set_raw_nnet))
    edit_nnet(am_nnet.nnet, NnetEditOptions(
        nnet_config=nnet_config, learning_rate=learning_rate, edits_config=edits_config,
        edits=edits), after_edits=am_nnet.set_context)
    edit_nnet(am_nnet.nnet, NnetEditOptions(scale=scale, prepare_for_test=prepare_for_test,
                                            batchnorm_test_mode=None))
    if raw:
        write_nnet(args[1], am_nnet.nnet, binary)
        log.log(f"Copied neural net from {args[0]} to raw format as {args[1]}")
    else:
        write_mdl(args[1], trans_model, am_nnet, binary)
        log.log(f"Copied neural net from {args[0]} to {args[1]}")


def main() -> int:
    return run(command, "nnet3-am-copy")
