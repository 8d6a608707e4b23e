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
}
