"""nnet3-acc-lda-stats: LDA statistics of a network's output on egs (for nnet-get-feature-transform)."""
from __future__ import annotations

import click

from .common import bool_option, check_num_args, kaldi_command, run

USAGE = """Accumulate statistics in the same format as acc-lda (i.e. stats for
estimation of LDA and similar types of transform), starting from nnet
training examples.  This program puts the features through the network,
and the network output will be the features; the supervision in the
training examples is used for the class labels.  Used in obtaining
feature transforms that help nnet training work better.

\b
Usage:  nnet3-acc-lda-stats [options] <raw-nnet-in> <training-examples-in> <lda-stats-out>
e.g.:
nnet3-acc-lda-stats 0.raw ark:1.egs 1.acc
See also: nnet-get-feature-transform"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@click.option("--rand-prune", type=float, default=0.0, show_default=True,
              help="Randomized pruning threshold for posteriors")
@click.argument("args", nargs=-1)
def command(binary: bool, rand_prune: float, args: tuple[str, ...]) -> None:
    check_num_args(args, (3,))
    from ..train.lda import acc_lda_stats

    acc_lda_stats(args[0], args[1], args[2], rand_prune, binary)


def main() -> int:
    return run(command, "nnet3-acc-lda-stats")
