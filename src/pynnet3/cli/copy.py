"""nnet3-copy: copy a raw nnet3 network, optionally editing it on the way."""
from __future__ import annotations

from typing import Any

import click

from ..nnet.edit import NnetEditOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)

USAGE = """Copy 'raw' nnet3 neural network to standard output
Also supports setting all the learning rates to a value
(the --learning-rate option)

\b
Usage:  nnet3-copy [options] <nnet-in> <nnet-out>
e.g.:
 nnet3-copy --binary=false 0.raw text.raw"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@register_options(NnetEditOptions(batchnorm_test_mode=False), names=(
    "learning_rate", "nnet_config", "edits_config", "edits", "scale", "prepare_for_test",
    "batchnorm_test_mode"))
@click.argument("args", nargs=-1)
def command(binary: bool, args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (2,))
    from .. import log
    from ..nnet.edit import edit_nnet
    from ..compile.model_io import read_nnet, write_nnet

    nnet = read_nnet(args[0])
    edit_nnet(nnet, options_from(NnetEditOptions, kw))
    write_nnet(args[1], nnet, binary)
    log.log(f"Copied raw neural net from {args[0]} to {args[1]}")


def main() -> int:
    return run(command, "nnet3-copy")
