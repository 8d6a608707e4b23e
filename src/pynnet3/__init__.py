"""pynnet3: Kaldi's nnet3 framework in Python.

Stages, in the order data flows through them: ``nnet`` (configs, Descriptors,
components, Kaldi model files), ``compile`` (ComputationRequest ->
NnetComputation), ``optimize``, ``compute`` (NnetComputer and backends),
``train``; ``cli`` holds one thin module per Kaldi binary.
"""
__version__ = "0.1.0"
