"""nnet3-am-copy: copy an nnet3 acoustic model (.mdl), or extract its raw nnet."""
from __future__ import annotations

import dataclasses
from typing import Any

import click

from ..nnet.edit import NnetEditOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)

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
@register_options(NnetEditOptions, names=(
    "nnet_config", "edits_config", "edits", "learning_rate", "scale", "prepare_for_test"), help={
    "edits_config": "Edits-config file that modifies the network.",
    "edits": "Inline alternative to --edits-config; semicolons become newlines."})
@click.argument("args", nargs=-1)
def command(binary: bool, raw: bool, set_raw_nnet: str, args: tuple[str, ...],
            **kw: Any) -> None:
    check_num_args(args, (2,))
    from .. import log
    from ..compile.am_nnet import read_mdl, write_mdl
    from ..nnet.edit import edit_nnet
    from ..compile.model_io import read_nnet, write_nnet

    trans_model, am_nnet, _ = read_mdl(args[0])
    if set_raw_nnet:
        am_nnet.set_nnet(read_nnet(set_raw_nnet))
    opts = options_from(NnetEditOptions, kw)
    # The structural edits (then the model's context is updated), then scaling
    # and test-time preparation of the edited network.
    edit_nnet(am_nnet.nnet, dataclasses.replace(opts, scale=1.0, prepare_for_test=False),
              after_edits=am_nnet.set_context)
    edit_nnet(am_nnet.nnet, NnetEditOptions(scale=opts.scale,
                                            prepare_for_test=opts.prepare_for_test))
    if raw:
        write_nnet(args[1], am_nnet.nnet, binary)
        log.log(f"Copied neural net from {args[0]} to raw format as {args[1]}")
    else:
        write_mdl(args[1], trans_model, am_nnet, binary)
        log.log(f"Copied neural net from {args[0]} to {args[1]}")


def main() -> int:
    return run(command, "nnet3-am-copy")
