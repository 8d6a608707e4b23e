"""The editing steps shared by nnet3-copy and nnet3-am-copy, in Kaldi's order."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..io.kaldi_io import read_rxfilename
from .nnet import Nnet
from .utils import (read_edit_config, scale_nnet, set_batchnorm_test_mode,
                    set_dropout_test_mode, set_learning_rate)


@dataclass
class NnetEditOptions:
    nnet_config: str = ""
    learning_rate: float = -1.0
    scale: float = 1.0
    edits_config: str = ""
    edits: str = ""
    prepare_for_test: bool = False
    # None: leave batch-norm test mode alone (nnet3-am-copy); a bool: set it
    # (nnet3-copy always sets it, to false unless asked).
    batchnorm_test_mode: bool | None = None


def edit_nnet(nnet: Nnet, opts: NnetEditOptions,
              after_edits: Callable[[], None] | None = None) -> None:
    if opts.nnet_config:
        nnet.read_config(read_rxfilename(opts.nnet_config).decode("utf-8"), opts.nnet_config)
    if opts.learning_rate >= 0:
        set_learning_rate(opts.learning_rate, nnet)
    if opts.scale != 1.0:
        scale_nnet(opts.scale, nnet)
    if opts.edits_config:
        read_edit_config(read_rxfilename(opts.edits_config).decode("utf-8"), nnet,
                         opts.edits_config)
    if opts.edits:
        read_edit_config(opts.edits.replace(";", "\n"), nnet, "--edits")
    if after_edits is not None:
        after_edits()
    if opts.prepare_for_test:
        from .collapse import collapse_model

        set_batchnorm_test_mode(True, nnet)
        set_dropout_test_mode(True, nnet)
        collapse_model(nnet)
    elif opts.batchnorm_test_mode is not None:
        set_batchnorm_test_mode(opts.batchnorm_test_mode, nnet)
