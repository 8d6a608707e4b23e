"""Compiled (Numba) inner loops of steps.py.

:func:`phases_for_epoch_jit` is Kaldi's ComputeComputationPhasesForEpoch for
a recurrent epoch: Kahn's algorithm one frontier at a time, a phase being
every cindex whose last in-epoch dependency was in the previous phase.  An
LSTM request has thousands of such phases with a handful of cindexes each,
so a loop of NumPy calls per phase costs far more than the work.
"""
from __future__ import annotations

import numpy as np

from ..numba_cache import lazy_njit


# Status codes of _kahn_phases.
OK, NO_START, STUCK, NOT_ALL_PLACED = 0, 1, 2, 3


@lazy_njit(cache=True, nogil=True)
def _kahn_phases(num, src, dst):
    """(status, order, bounds, num_phases) for positions 0..num-1 where
    ``src[k]`` depends on ``dst[k]``: phase p is ``order[bounds[p]:bounds[p+1]]``,
    increasing positions."""
    remaining = np.zeros(num, dtype=np.int64)
    starts = np.zeros(num + 1, dtype=np.int64)
    for k in range(src.shape[0]):
        remaining[src[k]] += 1
        starts[dst[k] + 1] += 1
    for p in range(num):
        starts[p + 1] += starts[p]
    # Who depends on each position, in edge order (a stable counting sort).
    fill = starts[:num].copy()
    targets = np.empty(src.shape[0], dtype=np.int64)
    for k in range(src.shape[0]):
        targets[fill[dst[k]]] = src[k]
        fill[dst[k]] += 1
    order = np.empty(num, dtype=np.int64)
    bounds = np.zeros(num + 1, dtype=np.int64)
    tail = 0
    for p in range(num):
        if remaining[p] == 0:
            order[tail] = p
            tail += 1
    if tail == 0:
        return NO_START, order, bounds, 0
    head = 0
    num_phases = 0
    while head < tail:
        num_phases += 1
        bounds[num_phases] = tail
        new_tail = tail
        total = 0
        for i in range(head, tail):
            p = order[i]
            for e in range(starts[p], starts[p + 1]):
                total += 1
                t = targets[e]
                remaining[t] -= 1
                if remaining[t] == 0:
                    order[new_tail] = t
                    new_tail += 1
        if total == 0:
            break
        if new_tail == tail:
            return STUCK, order, bounds, num_phases
        order[tail:new_tail] = np.sort(order[tail:new_tail])
        head, tail = tail, new_tail
    if tail != num:
        return NOT_ALL_PLACED, order, bounds, num_phases
    return OK, order, bounds, num_phases


def phases_for_epoch_jit(ids: np.ndarray, src: np.ndarray, dst: np.ndarray
                         ) -> tuple[int, np.ndarray, list[int]]:
    """(status, cindex_ids in phase order, phase bounds) for one recurrent epoch.

    ``ids``: its sorted cindex_ids; ``src``/``dst``: positions in ``ids`` of
    the dependent and the dependency of each in-epoch edge.
    """
    status, order, bounds, num_phases = _kahn_phases(len(ids), src, dst)
    return status, ids[order], bounds[:num_phases + 1].tolist()
