"""nnet3-am-train-transitions: re-estimate the transition probabilities (and
the priors) of an nnet3 acoustic model from alignments."""
from __future__ import annotations

from typing import Any

import click

from ..nnet.transition_model import MleTransitionUpdateConfig
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)

USAGE = """Train the transition probabilities of an nnet3 neural network acoustic model

\b
Usage:  nnet3-am-train-transitions [options] <nnet-in> <alignments-rspecifier> <nnet-out>
e.g.:
 nnet3-am-train-transitions 1.nnet "ark:gunzip -c ali.*.gz|" 2.nnet"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@bool_option("--set-priors", True, "If true, also set priors in neural net (we divide by "
             "these in test time)")
@click.option("--prior-floor", type=float, default=5.0e-06, show_default=True,
              help="When setting priors, floor for priors")
@register_options(MleTransitionUpdateConfig)
@click.argument("args", nargs=-1)
def command(binary: bool, set_priors: bool, prior_floor: float, args: tuple[str, ...],
            **kwargs: Any) -> None:
    check_num_args(args, (3,))
    from ..train.acoustic_model import train_transitions

    train_transitions(args[0], args[1], args[2],
                      cfg=options_from(MleTransitionUpdateConfig, kwargs),
                      set_priors=set_priors, prior_floor=prior_floor, binary=binary)


def main() -> int:
    return run(command, "nnet3-am-train-transitions")
