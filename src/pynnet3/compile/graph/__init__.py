"""The graph stage of the compiler: Kaldi's ComputationGraph and its builder
(nnet-computation-graph), and the network context found with it (nnet-utils'
ComputeSimpleNnetContext).

The definition is :mod:`.builder` (Kaldi's ComputationGraphBuilder, one
cindex at a time, on :mod:`.computation_graph`).  The other builders are
declared accelerations of it that give the identical graph and state, chosen
by ``fast_paths.current().graph``:

* :mod:`.bulk` (+ :mod:`.cindex_index`, :mod:`.jit_bulk`, :mod:`.bulk_prune`):
  level-by-level breadth-first building with NumPy or one Numba loop, for
  networks without recurrence whose requests leave nothing uncomputable;
* :mod:`.jit_exact`: the reference algorithm itself as one Numba loop;
* :mod:`.programs`: the node tables and the one op-code encoding of
  forwarding programs both Numba loops read.

:mod:`.context` is ComputeSimpleNnetContext (it builds graphs);
:mod:`.context_reads` is its acceleration for feed-forward networks, chosen
by ``fast_paths.current().context_from_reads``.
"""
