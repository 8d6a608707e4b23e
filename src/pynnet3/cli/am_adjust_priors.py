"""nnet3-am-adjust-priors: set the priors of an nnet3 acoustic model from
summed posteriors."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Set the priors of the nnet3 neural net to the computed posteriors from the net,
on typical data (e.g. training data). This is correct under more general
circumstances than using the priors of the class labels in the training data

\b
Typical usage of this program will involve computation of an average pdf-level
posterior with nnet3-compute or nnet3-compute-from-egs, piped into matrix-sum-rows
and then vector-sum, to compute the average posterior

\b
Usage: nnet3-am-adjust-priors [options] <nnet-in> <summed-posterior-vector-in> <nnet-out>
e.g.:
 nnet3-am-adjust-priors final.mdl counts.vec final.mdl"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@click.option("--prior-floor", type=float, default=1.0e-15, show_default=True,
              help="When setting priors, floor for priors (only used to avoid generating "
              "NaNs upon inversion)")
@click.argument("args", nargs=-1)
def command(binary: bool, prior_floor: float, args: tuple[str, ...]) -> None:
    check_num_args(args, (3,))
    from ..train.acoustic_model import adjust_priors

    # As in Kaldi, --prior-floor is accepted but the priors are not floored.
    adjust_priors(args[0], args[1], args[2], binary=binary, prior_floor=prior_floor)


def main() -> int:
    return run(command, "nnet3-am-adjust-priors")
