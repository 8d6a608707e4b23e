"""The nnet3 compiler: from a ComputationRequest to a NnetComputation.

Mirrors Kaldi's nnet-computation-graph, nnet-compile and related files:
requests (``request``), the computation graph and its builder (``graph``).
"""
