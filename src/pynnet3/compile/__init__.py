"""The nnet3 compiler: from a ComputationRequest to a NnetComputation.

Mirrors Kaldi's nnet-computation-graph, nnet-compile and related files:
requests (``request``), the graph stage (``graph``: the computation graph,
its builder and the network context found with it), steps, the compiler
(``compiler``, ``descriptor_commands``, ``split_locations``) and the
shortcut.  Model files (``model_io``, ``am_nnet``) live here because reading
an ``.mdl`` recomputes its context, which builds computation graphs.
"""
