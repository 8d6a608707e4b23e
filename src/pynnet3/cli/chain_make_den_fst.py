"""chain-make-den-fst: the denominator FST and normalization FST of 'chain'
training from the tree, transition model and phone LM (Kaldi's
chainbin/chain-make-den-fst)."""
from __future__ import annotations

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Created 'denominator' FST for 'chain' training
Outputs in FST format.  <denominator-fst-out> is an epsilon-free acceptor
<normalization-fst-out> is a modified version of <denominator-fst> (w.r.t.
initial and final probs) that is used in example generation.

\b
Usage: chain-make-den-fsth [options] <tree> <transition-model> <phone-lm-fst> <denominator-fst-out> <normalization-fst-out>
e.g.:
chain-make-den-fst dir/tree dir/0.trans_mdl dir/phone_lm.fst dir/den.fst dir/normalization.fst"""


@kaldi_command(USAGE)
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...]) -> None:
    check_num_args(args, (5,))
    from ..train.chain.make_den_fst import make_den_fst

    make_den_fst(*args)


def main() -> int:
    return run(command, "chain-make-den-fst")
