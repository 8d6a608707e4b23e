"""Analysis, checking and optimization of compiled NnetComputations.

Mirrors Kaldi's nnet-analyze (``analyze``: variables, command attributes,
per-variable and per-matrix accesses), its ComputationChecker (``check``) and
the optimization passes that rewrite a computation in place of Kaldi's
nnet-optimize*.
"""
