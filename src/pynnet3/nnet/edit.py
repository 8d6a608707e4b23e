"""The editing steps shared by nnet3-copy and nnet3-am-copy, in Kaldi's order."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..io.kaldi_io import read_rxfilename
from .nnet import Nnet
from .utils import (read_edit_config, scale_nnet, set_batchnorm_test_mode,
                    set_dropout_test_mode, set_learning_rate)


@dataclass
class NnetEditOptions:
    """The edits of nnet3-copy and nnet3-am-copy (flags and help in the
    fields' metadata)."""

    nnet_config: str = field(default="", metadata={
        "flag": "nnet-config", "help": "nnet3 config file that adds or replaces components or "
        "nodes (as given to nnet3-init)."})
    learning_rate: float = field(default=-1.0, metadata={
        "flag": "learning-rate", "help": "If supplied, all the learning rates of updatable "
        "components are set to this value."})
    scale: float = field(default=1.0, metadata={
        "flag": "scale", "help": "The parameter matrices are scaled by the specified value."})
    edits_config: str = field(default="", metadata={
        "flag": "edits-config", "help": "Edits-config file that modifies the network (applied "
        "after --nnet-config)."})
    edits: str = field(default="", metadata={
        "flag": "edits", "help": "Inline alternative to --edits-config; semicolons become "
        "newlines, e.g. '--edits=remove-orphans'."})
    prepare_for_test: bool = field(default=False, metadata={
        "flag": "prepare-for-test", "help": "If true, prepares the model for test time: test "
        "mode in dropout and batch-norm components, and CollapseModel()."})
    # None: leave batch-norm test mode alone (nnet3-am-copy); a bool: set it
    # (nnet3-copy always sets it, to false unless asked).
    batchnorm_test_mode: bool | None = field(default=None, metadata={
        "flag": "batchnorm-test-mode", "help": "Batch-norm components' test mode is set to "
        "this value (overridden by --prepare-for-test)."})


def edit_nnet(nnet: Nnet, opts: NnetEditOptions,
              after_edits: Callable[[], None] | None = None) -> None:
    if opts.nnet_config:
        nnet.read_config(read_rxfilename(opts.nnet_config), opts.nnet_config)
    if opts.learning_rate >= 0:
        set_learning_rate(opts.learning_rate, nnet)
    if opts.scale != 1.0:
        scale_nnet(opts.scale, nnet)
    if opts.edits_config:
        read_edit_config(read_rxfilename(opts.edits_config), nnet,
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
