"""The per-utterance input options that nnet3-compute, nnet3-compute-looped
and nnet3-compute-onnx share with Kaldi's nnet3-compute (``--ivectors``,
``--utt2spk``, ``--online-ivectors``, ``--online-ivector-period``,
``--apply-exp``, ``--use-priors``), as dataclass fields carrying Kaldi's flag
names and help texts for ``register_options``.  Each call makes a new field
(a dataclass takes ownership of the Field object it is given)."""
from __future__ import annotations

from dataclasses import field
from typing import Any

_ONLINE_PERIOD_HELP = ("Number of frames between iVectors in matrices supplied to the "
                       "--online-ivectors option")


def ivectors_option() -> Any:
    return field(default="", metadata={
        "flag": "ivectors", "help": "Rspecifier for iVectors as vectors (i.e. not estimated "
        "online); per utterance by default, or per speaker if you provide the --utt2spk "
        "option."})


def utt2spk_option() -> Any:
    return field(default="", metadata={
        "flag": "utt2spk", "help": "Rspecifier for utt2spk option used to get ivectors per "
        "speaker"})


def online_ivectors_option() -> Any:
    return field(default="", metadata={
        "flag": "online-ivectors", "help": "Rspecifier for iVectors estimated online, as "
        "matrices.  If you supply this, you must set the --online-ivector-period option."})


def online_ivector_period_option(help_suffix: str = "") -> Any:
    return field(default=0, metadata={
        "flag": "online-ivector-period", "help": _ONLINE_PERIOD_HELP + help_suffix})


def apply_exp_option() -> Any:
    return field(default=False, metadata={
        "flag": "apply-exp", "help": "If true, apply exp function to output"})


def use_priors_option() -> Any:
    return field(default=False, metadata={
        "flag": "use-priors", "help": "If true, subtract the logs of the priors stored with "
        "the model (in this case, a .mdl file is expected as input)."})
