"""The rand() draws Kaldi's compiler makes while it builds a computation graph.

Kaldi's ComputationGraphBuilder::Compute (nnet-computation-graph.cc) checks
its own state at random: after each breadth-first iteration it calls
``RandInt(1, current_distance + 1)`` and runs Check() when that is 1, and
once more at the end ``RandInt(1, 2 * (num_segments_done + 1))``.  Check()
itself walks the cindex_ids with a random stride ``1 + RandInt(0, n / 100)``
and draws ``RandInt(0, cindex_id)`` at each one it visits.  All of these take
numbers from glibc's global rand() stream, which binaries such as
nnet3-acc-lda-stats (``--rand-prune``) then go on to use: to reproduce their
output, a program must consume the same draws whenever Kaldi compiles a new
computation.

:func:`replay_graph_builder_draws` does that for one request: it builds the
graph with Kaldi's per-cindex algorithm (the fast paths do not keep Kaldi's
iteration structure), records the graph size after each iteration and
replays the draws.  The graph the compiler builds is not touched.  Draws of
the shortcut's expansion of precomputed indexes and of the optimizer's
SplitRowOps (only where they insert commands) are not modelled.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ... import fast_paths
from .builder import ComputationGraphBuilder

if TYPE_CHECKING:
    from ...nnet.nnet import Nnet
    from ..request import ComputationRequest

__all__ = ["KaldiRand", "replay_graph_builder_draws"]


class KaldiRand(Protocol):
    """What is needed of the random stream: Kaldi's RandInt on glibc rand()
    (``pynnet3.train.kaldi_random.GlibcRand``)."""

    def rand_int(self, min_val: int, max_val: int) -> int: ...


class _IterationRecorder(ComputationGraphBuilder):
    """The builder, noting the number of cindexes after each iteration."""

    def __init__(self, nnet: "Nnet") -> None:
        super().__init__(nnet)
        self.sizes: list[int] = []

    def _build_graph_one_iter(self) -> None:
        super()._build_graph_one_iter()
        self.sizes.append(len(self.graph.cindexes))


def _check_draws(num_cindex_ids: int, start: int, rng: KaldiRand) -> None:
    """The draws of one ComputationGraphBuilder::Check(start)."""
    cindex_id = start
    stride_max = num_cindex_ids // 100
    while cindex_id < num_cindex_ids:
        rng.rand_int(0, cindex_id)                 # whether to check 'queued'
        cindex_id += 1 + rng.rand_int(0, stride_max)


def replay_graph_builder_draws(nnet: "Nnet", request: "ComputationRequest", rng: KaldiRand,
                               verbose: int = 0) -> int:
    """Consume from ``rng`` what Kaldi's graph builder draws when it compiles
    ``request`` (a single-segment request; ``verbose`` is Kaldi's verbose
    level: from 3 on, Check() runs after every iteration without a draw for
    it).  Returns the number of iterations."""
    with fast_paths.override(graph=False):
        builder = _IterationRecorder(nnet)
    builder.compute(request)
    for i, size in enumerate(builder.sizes):
        distance = i + 1
        if verbose >= 3 or rng.rand_int(1, distance + 1) == 1:
            _check_draws(size, 0, rng)
    # The final check: no segment has ended yet when Compute() finishes.
    if rng.rand_int(1, 2) == 1:
        _check_draws(len(builder.graph.cindexes), 0, rng)
    return len(builder.sizes)
