"""chain-get-supervision: chain supervision (numerator FSTs) from phone
alignments with lengths (Kaldi's chainbin/chain-get-supervision)."""
from __future__ import annotations

from typing import Any

import click

from ..train.chain.make_supervision import SupervisionOptions
from .common import (bool_option, check_num_args, kaldi_command, options_from, register_options,
                     run)

USAGE = """Get a 'chain' supervision object for each file of training data.
This will normally be piped into nnet3-chain-get-egs, where it
will be split up into pieces and combined with the features.
Input can come in two formats: from alignments
(from ali-to-phones --write-lengths=true), or from lattices
(e.g. derived from aligning the data, see steps/align_fmllr_lats.sh)
that have been converged to phone-level lattices with
lattice-align-phones --replace-output-symbols=true.

\b
Usage: chain-get-supervision [options] <tree> <transition-model> [<phones-with-lengths-rspecifier>|<phone-lattice-rspecifier>] <supervision-wspecifier>
See steps/nnet3/chain/get_egs.sh for example
e.g.:
 chain-get-supervision --frame-subsampling-factor=3 tree 0.trans_mdl ark:phone_lengths.txt ark:supervision.ark"""


@kaldi_command(USAGE)
@register_options(SupervisionOptions)
@bool_option("--lattice-input", False, "If true, expect phone lattices as input")
@click.argument("args", nargs=-1)
def command(lattice_input: bool, args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (4,))
    from ..errors import UsageError
    from ..train.chain.make_supervision import get_supervision

    if lattice_input:
        raise UsageError("--lattice-input=true (phone lattices) is not supported by pynnet3's "
                         "chain-get-supervision; give phone alignments with lengths "
                         "(ali-to-phones --write-lengths=true)")
    done, errors = get_supervision(args[0], args[1], args[2], args[3],
                                   options_from(SupervisionOptions, kw))
    if not done > errors:
        raise click.exceptions.Exit(1)


def main() -> int:
    return run(command, "chain-get-supervision")
