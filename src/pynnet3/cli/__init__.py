"""One thin module per Kaldi binary; each ``main()`` parses options and makes one library call.

``BINARIES`` maps each binary's name to its entry point.  ``pyproject.toml``
lists the same console scripts (a test checks they agree) and ``bin/`` holds
launchers for running from a checkout, like Kaldi's ``path.sh``.
"""
BINARIES = {
    "nnet3-init": "pynnet3.cli.init:main",
    "nnet3-info": "pynnet3.cli.info:main",
    "nnet3-copy": "pynnet3.cli.copy:main",
    "nnet3-am-copy": "pynnet3.cli.am_copy:main",
    "nnet3-am-info": "pynnet3.cli.am_info:main",
    "nnet3-am-init": "pynnet3.cli.am_init:main",
    "nnet3-am-adjust-priors": "pynnet3.cli.am_adjust_priors:main",
    "nnet3-am-train-transitions": "pynnet3.cli.am_train_transitions:main",
    "nnet3-compile": "pynnet3.cli.compile:main",
    "nnet3-get-egs": "pynnet3.cli.get_egs:main",
    "nnet3-get-egs-dense-targets": "pynnet3.cli.get_egs_dense_targets:main",
    "nnet3-copy-egs": "pynnet3.cli.copy_egs:main",
    "nnet3-shuffle-egs": "pynnet3.cli.shuffle_egs:main",
    "nnet3-merge-egs": "pynnet3.cli.merge_egs:main",
    "nnet3-compute": "pynnet3.cli.compute:main",
    "nnet3-train": "pynnet3.cli.train:main",
    "nnet3-compute-prob": "pynnet3.cli.compute_prob:main",
    "nnet3-average": "pynnet3.cli.average:main",
    "nnet3-combine": "pynnet3.cli.combine:main",
    "nnet3-show-progress": "pynnet3.cli.show_progress:main",
    "nnet3-plot-progress": "pynnet3.cli.plot_progress:main",
    "nnet3-compute-request": "pynnet3.cli.compute_request:main",
    "nnet3-subset-egs": "pynnet3.cli.subset_egs:main",
    "nnet3-get-egs-simple": "pynnet3.cli.get_egs_simple:main",
    "nnet3-compute-from-egs": "pynnet3.cli.compute_from_egs:main",
    "matrix-sum-rows": "pynnet3.cli.matrix_sum_rows:main",
    "vector-sum": "pynnet3.cli.vector_sum:main",
    "nnet3-acc-lda-stats": "pynnet3.cli.acc_lda_stats:main",
    "sum-lda-accs": "pynnet3.cli.sum_lda_accs:main",
    "nnet-get-feature-transform": "pynnet3.cli.get_feature_transform:main",
    "chain-est-phone-lm": "pynnet3.cli.chain_est_phone_lm:main",
    "chain-make-den-fst": "pynnet3.cli.chain_make_den_fst:main",
    "chain-get-supervision": "pynnet3.cli.chain_get_supervision:main",
    "nnet3-chain-get-egs": "pynnet3.cli.chain_get_egs:main",
    "nnet3-chain-copy-egs": "pynnet3.cli.chain_copy_egs:main",
    "nnet3-chain-merge-egs": "pynnet3.cli.chain_merge_egs:main",
    "nnet3-chain-shuffle-egs": "pynnet3.cli.chain_shuffle_egs:main",
    "nnet3-chain-subset-egs": "pynnet3.cli.chain_subset_egs:main",
    "nnet3-chain-normalize-egs": "pynnet3.cli.chain_normalize_egs:main",
    "nnet3-compute-looped": "pynnet3.cli.compute_looped:main",
    "nnet3-chain-train": "pynnet3.cli.chain_train:main",
    "nnet3-chain-compute-prob": "pynnet3.cli.chain_compute_prob:main",
    "nnet3-chain-combine": "pynnet3.cli.chain_combine:main",
    "nnet3-chain-compute-deriv": "pynnet3.cli.chain_compute_deriv:main",
    "nnet3-xvector-compute": "pynnet3.cli.xvector_compute:main",
    "nnet3-compute-batch": "pynnet3.cli.compute_batch:main",
    "nnet3-export-onnx": "pynnet3.cli.export_onnx:main",
    "nnet3-compute-onnx": "pynnet3.cli.compute_onnx:main",
}

# A binary's start-up imports some 350 modules (NumPy, click, pynnet3), and
# the cyclic garbage collector walks them ~46 times meanwhile (4-6 ms of CPU
# of nnet3-train's ~190 ms start-up, issue 15) to find nothing to free.  A
# process started as one of the binaries (console script or bin/ launcher:
# argv[0] is the binary's name) pauses the collector until
# :func:`resume_startup_gc`, which ``cli.common.run`` calls before it parses
# the command line.  Importing this package in any other process (tests, a
# library user, ``python -c``) leaves the collector alone.
import gc as _gc
import os as _os
import sys as _sys

_startup_gc_paused = (bool(_sys.argv) and _os.path.basename(_sys.argv[0]) in BINARIES
                      and _gc.isenabled())
if _startup_gc_paused:
    _gc.disable()


# In such a process the objects made by then (the modules of NumPy, click
# and pynnet3: some 300,000) are also frozen, i.e. moved out of the
# collector's reach, when it is turned back on, and the objects of the
# command once it is done: the collections while the command runs (reading
# a model makes many objects) and the one of the interpreter's shutdown no
# longer walk them all (nnet3-compute on one utterance: 192 -> 157 ms; the
# shutdown of nnet3-train: 30-50 ms of CPU).  The shutdown still flushes and closes
# files and runs atexit handlers.
_started_as_binary = _startup_gc_paused


def resume_startup_gc() -> None:
    """Turn the collector back on if the start-up paused it (idempotent)."""
    global _startup_gc_paused
    if _startup_gc_paused:
        _startup_gc_paused = False
        _gc.freeze()
        _gc.enable()


def freeze_after_command() -> None:
    """In a process started as a binary, move what the command left out of
    the collector's reach before the interpreter shuts down."""
    if _started_as_binary:
        _gc.freeze()
