"""Prune() of a graph built by :mod:`.bulk`: an acceleration of
:meth:`.builder.ComputationGraphBuilder.prune` (the reference), same result.

Kaldi's Prune() keeps the dependencies each cindex really uses and then the
cindexes the outputs need (plus the inputs), renumbered.  On a graph from
:func:`~pynnet3.compile.graph.bulk.build_graph_bulk` everything is
computable, so a Descriptor uses every dependency except those in the second
branch of a ``Failover()`` and a component with its own hooks says what it
uses; when nothing is dropped, everything is needed.  Components (and
Descriptors) that :mod:`.bulk` cannot vectorise are asked once per cindex.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...arraytools import sorted_unique
from ...nnet.index import Index
from .bulk import (KIND_INPUT, KIND_RANGE, KIND_TERMS, BulkGraph, BulkPlan, Fallback, NodeSets,
                   hook_is_computable)
from .computation_graph import GraphArrays

_I64 = np.int64
_new_index = tuple.__new__


# -- pruning -----------------------------------------------------------------------------------

def _csr_rows(offsets: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Positions in the flat array of the given CSR rows, concatenated."""
    begin = offsets[rows]
    counts = offsets[rows + 1] - begin
    total = int(counts.sum())
    return np.repeat(begin - (np.cumsum(counts) - counts), counts) + np.arange(total)


def prune_bulk(plan: BulkPlan, bulk: BulkGraph, misc_info: Any) -> GraphArrays | None:
    """Kaldi's Prune() of a graph from build_graph_bulk: the renumbered arrays,
    or None if the exact algorithm should do it (it then reports the problem)."""
    a = bulk.arrays
    num = len(a.node)
    offsets, flat = a.dep_offsets, a.dep_flat
    # 1. Dependencies actually used.  Only Failover() second branches and
    # components with their own hooks drop any.
    replaced: dict[int, np.ndarray] = {}     # node -> new (parent, dep) edge rows
    sets: NodeSets | None = None
    for nd, p in enumerate(plan.plans):
        # (A window component uses every input that is there: here all are.)
        if p.kind in (KIND_INPUT, KIND_RANGE) or (p.kind == KIND_TERMS and p.all_used):
            continue
        sel = np.flatnonzero((a.node == nd) & ~a.is_input)
        if not sel.size:
            continue
        if p.kind == KIND_TERMS:
            cols = [np.asarray(c, dtype=_I64) for c in (a.n[sel], a.t[sel], a.x[sel])]
            parts = []
            for term, used in p.terms:
                if used:
                    try:
                        dep_node, dep_n, dep_t, dep_x = term(*cols)
                    except Fallback:    # (cannot happen: build_graph_bulk made them)
                        return None
                    dep_node = np.broadcast_to(np.asarray(dep_node, dtype=_I64), dep_n.shape)
                    parts.append((dep_node, dep_n, dep_t, dep_x))
            if parts:
                e_node = np.stack([q[0] for q in parts], axis=1).ravel()
                e_cols = [np.stack([q[i] for q in parts], axis=1).ravel() for i in (1, 2, 3)]
                e_parent = np.repeat(sel, len(parts))
            else:
                e_node = e_parent = np.zeros(0, dtype=_I64)
                e_cols = [e_node] * 3
        else:
            if sets is None:
                sets = NodeSets(a)
            rows = []
            try:
                for c, row in zip(sel.tolist(), zip(a.n[sel].tolist(), a.t[sel].tolist(),
                                                    a.x[sel].tolist())):
                    ok, used = hook_is_computable(p, nd, _new_index(Index, row), sets,
                                                  misc_info, True)
                    if not ok:
                        return None
                    rows.extend((c,) + u for u in used)
            except Exception:
                return None
            arr = np.array(rows, dtype=_I64).reshape(len(rows), 5)
            e_parent, e_node = arr[:, 0], arr[:, 1]
            e_cols = [arr[:, 2], arr[:, 3], arr[:, 4]]
        e_dep = bulk.index.lookup(e_node, *e_cols)
        if (e_dep < 0).any():
            return None
        combined = sorted_unique(e_parent * num + e_dep)
        new_parent, new_dep = combined // num, combined % num
        # Used inputs must be among the dependencies.
        old = np.repeat(sel, offsets[sel + 1] - offsets[sel]) * num + flat[_csr_rows(offsets, sel)]
        if not np.isin(combined, old).all():
            return None
        replaced[nd] = np.stack([new_parent, new_dep])
    if replaced:
        keep_edge = ~np.isin(np.repeat(a.node, np.diff(offsets)),
                             np.array(list(replaced), dtype=np.int32))
        parent = np.repeat(np.arange(num, dtype=_I64), np.diff(offsets))[keep_edge]
        dep = flat[keep_edge]
        parent = np.concatenate([parent] + [r[0] for r in replaced.values()])
        dep = np.concatenate([dep] + [r[1] for r in replaced.values()])
        order = np.lexsort((dep, parent))
        parent, flat = parent[order], dep[order]
        offsets = np.zeros(num + 1, dtype=_I64)
        np.cumsum(np.bincount(parent, minlength=num), out=offsets[1:])
    # 2. What the outputs need.  Every cindex was added as a dependency of
    # one reachable from the outputs, so unless a dependency was dropped,
    # all are needed.
    if flat is a.dep_flat:
        return a
    required = np.zeros(num, dtype=bool)
    frontier = np.flatnonzero(plan.is_output_node[a.node])
    required[frontier] = True
    stamp = np.zeros(num, dtype=_I64)
    while frontier.size:
        nxt = flat[_csr_rows(offsets, frontier)]
        nxt = nxt[~required[nxt]]
        # One copy of each (whichever write wins, exactly one position matches).
        stamp[nxt] = np.arange(len(nxt))
        nxt = nxt[stamp[nxt] == np.arange(len(nxt))]
        required[nxt] = True
        frontier = nxt
    keep = required | a.is_input
    # 3. Renumber.
    if keep.all():
        return GraphArrays(a.node, a.n, a.t, a.x, a.is_input, offsets,
                           flat.astype(np.int32))
    old2new = np.cumsum(keep) - 1
    kept = np.flatnonzero(keep)
    pos = _csr_rows(offsets, kept)
    new_flat = flat[pos]
    if not keep[new_flat].all():
        return None      # (the exact algorithm raises "dependency on a removed cindex-id")
    counts = (offsets[kept + 1] - offsets[kept])
    new_offsets = np.zeros(len(kept) + 1, dtype=_I64)
    np.cumsum(counts, out=new_offsets[1:])
    return GraphArrays(a.node[kept], a.n[kept], a.t[kept], a.x[kept], a.is_input[kept],
                       new_offsets, old2new[new_flat].astype(np.int32))
