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
    "nnet3-export-onnx": "pynnet3.cli.export_onnx:main",
    "nnet3-compute-onnx": "pynnet3.cli.compute_onnx:main",
}
