"""chain-est-phone-lm: estimate the un-smoothed phone n-gram used to build the
'chain' denominator graph (Kaldi's chainbin/chain-est-phone-lm)."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.language_model import LanguageModelOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)

USAGE = """Initialize un-smoothed phone language model for 'chain' training
Output in FST format (epsilon-free deterministic acceptor)

\b
Usage:  chain-est-phone-lm [options] <phone-seqs-rspecifier> <phone-lm-fst-out>
The phone-sequences are used to train a language model.
e.g.:
gunzip -c input_dir/ali.*.gz | ali-to-phones input_dir/final.mdl ark:- ark:- | \\
 chain-est-phone-lm --leftmost-context-questions=dir/leftmost_questions.txt ark:- dir/phone_G.fst"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@register_options(LanguageModelOptions)
@click.argument("args", nargs=-1)
def command(binary: bool, args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (2,))
    from .. import log
    from ..io.kaldi_io import write_wxfilename
    from ..io.table import INT32_VECTOR_HOLDER, SequentialTableReader
    from ..train.chain.fst import write_vector_fst
    from ..train.chain.language_model import LanguageModelEstimator

    opts = options_from(LanguageModelOptions, kw)
    est = LanguageModelEstimator(opts)
    log.log("Reading phone sequences")
    for _key, seq in SequentialTableReader(args[0], INT32_VECTOR_HOLDER):
        est.add_counts(seq)
    log.log("Estimating phone LM")
    fst = est.estimate()
    # Kaldi's WriteFstKaldi(fst, wxfilename) always writes OpenFst's binary
    # format; --binary is accepted but has no effect, as in Kaldi.
    write_wxfilename(args[1], write_vector_fst(fst))
    log.log(f"Estimated phone language model and wrote it to {args[1]}")


def main() -> int:
    return run(command, "chain-est-phone-lm")
