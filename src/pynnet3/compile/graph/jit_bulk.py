"""The level-by-level closure of :mod:`.bulk` as one compiled (Numba) loop:
an acceleration of :meth:`.builder.ComputationGraphBuilder.compute` (the
reference), by way of :mod:`.bulk`, whose result it reproduces.

:func:`.bulk.build_graph_bulk` expands the graph one breadth-first "level" at a
time with a few dozen NumPy operations per level.  A TDNN-F has a couple of
hundred levels, and for a short request each holds only a handful of
cindexes, so NumPy's per-call cost, not the work, is most of the time spent
building its graph.  When every node's dependencies can be written as
forwarding programs over the Index (:mod:`.programs`' JitPlan, which
:mod:`.jit_exact` reads too: names, ``Offset()``, ``Round()``,
``ReplaceIndex()``, ``Switch()``, ``Append``/``Sum``/``IfDefined``/
``Failover`` of them, dim-range nodes, simple and TDNN-style components --
the usual feed-forward network), this module runs the same closure in one
Numba-compiled function: same cindex_ids in the same order, same per-cindex
dependency lists (sorted, unique), same level sizes.

The cindex -> id map is a dense table over a box ``nodes x t x n x x``,
re-laid (bigger) when a cindex falls outside it.  Anything the loop does not
promise to treat exactly as :mod:`.bulk`'s NumPy code (an input-node cindex
the request does not supply, kNoTime given to an offset-style component, a
component offset or Round() leaving the int32 range, a box grown too big)
makes it stop with a status code; the caller then takes the NumPy path,
which handles or rejects those cases.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...nnet.index import K_NO_TIME
from .programs import (INT32_MAX, INT32_MIN, OP_COMP_OFFSET, OP_NODE, OP_OFFSET, OP_ROUND_T,
                       OP_SET_T, OP_SET_X)
from ...numba_cache import lazy_njit


_I64 = np.int64
# Status codes of _closure.
OK, FALLBACK, TOO_BIG, TOO_MANY_LEVELS, OUTSIDE = 0, 1, 2, 3, 4
# The dense table is int32; beyond this many entries take the NumPy path.
_MAX_TABLE = 1 << 25


@lazy_njit(cache=True, nogil=True)
def wrap32(v: int) -> int:
    """``v`` wrapped into int32 as Kaldi's int32 offset arithmetic does."""
    return ((v - INT32_MIN) % 4294967296) + INT32_MIN


@lazy_njit(cache=True, nogil=True)
def _out32(v: int) -> bool:
    return v < INT32_MIN or v > INT32_MAX


@lazy_njit(cache=True, nogil=True)
def grow(a, need):
    """``a``, or a copy with room for ``need`` entries (geometric growth)."""
    if need <= a.shape[0]:
        return a
    size = max(need, 2 * a.shape[0] + 16)
    b = np.empty(size, dtype=a.dtype)
    b[:a.shape[0]] = a
    return b


@lazy_njit(cache=True, nogil=True)
def _key(box, nd, nn, tt, xx):
    """Position of a cindex in the table, or -1 if outside the box
    (t0, tspan, n0, nspan, x0, xspan)."""
    t, n, x = tt - box[0], nn - box[2], xx - box[4]
    if t < 0 or t >= box[1] or n < 0 or n >= box[3] or x < 0 or x >= box[5]:
        return -1
    return ((nd * box[1] + t) * box[3] + n) * box[5] + x


@lazy_njit(cache=True, nogil=True)
def _relayout(box, num_nodes, nn, tt, xx, node, n, t, x, count, max_table):
    """A bigger box containing the old one and (tt, nn, xx), and its table
    refilled with the first ``count`` cindexes; (box, table), or an empty
    table if it would exceed max_table."""
    new = box.copy()
    for j, v in ((0, tt), (2, nn), (4, xx)):
        lo = min(box[j], v)
        hi = max(box[j] + box[j + 1] - 1, v)
        span = hi - lo + 1
        if lo < box[j] or hi > box[j] + box[j + 1] - 1:
            # Grow geometrically so that a range widening bit by bit
            # costs few relayouts.
            margin = max(span // 2, 4)
            lo -= margin if lo < box[j] else 0
            hi += margin if hi > box[j] + box[j + 1] - 1 else 0
        new[j], new[j + 1] = lo, hi - lo + 1
    size = num_nodes * new[1] * new[3] * new[5]
    if size > max_table:
        return new, np.empty(0, dtype=np.int32)
    table = np.full(size, -1, dtype=np.int32)
    for c in range(count):
        table[_key(new, node[c], n[c], t[c], x[c])] = c
    return new, table


@lazy_njit(cache=True, nogil=True)
def _expand_level(lo, hi, count, box, table, node, n, t, x, buf, seg_start, seg_len,
                  is_input_node, needs_time, term_start, term_count, term_root, fwd,
                  switch_table, no_time, where):
    """Expand cindexes lo..hi-1 (arrays already big enough: nothing is
    reassigned here, which keeps reference counting out of the loop).
    Returns (status, count, used); with OUTSIDE, ``where`` holds the
    (t, n, x) that fell outside the box."""
    used = 0
    # Kaldi's queue is taken from its back: highest id first.
    for p in range(hi - 1, lo - 1, -1):
        nd = node[p]
        if is_input_node[nd]:
            return FALLBACK, count, used
        if needs_time[nd] and t[p] == no_time:
            return FALLBACK, count, used
        start = used
        for k in range(term_start[nd], term_start[nd] + term_count[nd]):
            dn, dt, dx = n[p], t[p], x[p]
            # Follow the term's chain of forwarding-table rows to its node.
            row = term_root[k]
            code = fwd[row, 0]
            while code != OP_NODE:
                if code == OP_OFFSET or code == OP_COMP_OFFSET:
                    dn += fwd[row, 1]
                    dt += fwd[row, 2]
                    dx += fwd[row, 3]
                    if _out32(dn) or _out32(dt) or _out32(dx):
                        if code == OP_COMP_OFFSET:
                            return FALLBACK, count, used
                        dn, dt, dx = wrap32(dn), wrap32(dt), wrap32(dx)
                elif code == OP_ROUND_T:
                    dt -= dt % fwd[row, 1]     # (floor modulus, as Python's)
                    if dt < INT32_MIN:
                        return FALLBACK, count, used
                elif code == OP_SET_T:
                    dt = fwd[row, 1]
                elif code == OP_SET_X:
                    dx = fwd[row, 1]
                else:   # OP_SWITCH
                    row = switch_table[fwd[row, 2] + dt % fwd[row, 1]]
                    code = fwd[row, 0]
                    continue
                row = fwd[row, 4]
                code = fwd[row, 0]
            src = fwd[row, 1]
            key = _key(box, src, dn, dt, dx)
            if key < 0:
                where[0], where[1], where[2] = dt, dn, dx
                return OUTSIDE, count, used
            cid = np.int64(table[key])
            if cid < 0:
                cid = count
                table[key] = cid
                node[count] = src
                n[count] = dn
                t[count] = dt
                x[count] = dx
                count += 1
            # Insert into this parent's sorted list unless present.
            j = used
            while j > start and buf[j - 1] > cid:
                j -= 1
            if j > start and buf[j - 1] == cid:
                continue
            for q in range(used, j, -1):
                buf[q] = buf[q - 1]
            buf[j] = cid
            used += 1
        seg_start[p - lo] = start
        seg_len[p - lo] = used - start
    return OK, count, used


@lazy_njit(cache=True, nogil=True)
def _closure(init_node, init_n, init_t, init_x, num_in, max_levels, max_table, box,
             is_input_node, needs_time, term_start, term_count, term_root, fwd, switch_table,
             no_time):
    """(status, count, node, n, t, x, dep_counts, dep_flat, num_flat, sizes, num_levels).

    Columns are by cindex_id (the first ``count`` entries valid); dep_counts
    per cindex_id; dep_flat the dependency ids in cindex_id order; sizes the
    bulk.py level sizes (inputs, outputs, then each new level, ending with
    the empty one)."""
    num_nodes = is_input_node.shape[0]
    table = np.full(num_nodes * box[1] * box[3] * box[5], -1, dtype=np.int32)
    cap = max(16, 4 * init_node.shape[0])
    node = np.empty(cap, dtype=np.int64)
    n = np.empty(cap, dtype=np.int64)
    t = np.empty(cap, dtype=np.int64)
    x = np.empty(cap, dtype=np.int64)
    dep_counts = np.zeros(cap, dtype=np.int64)
    flat = np.empty(cap, dtype=np.int64)
    sizes = np.zeros(16, dtype=np.int64)
    where = np.zeros(3, dtype=np.int64)
    count = 0
    num_flat = 0
    num_init = init_node.shape[0]
    for i in range(num_init):
        key = _key(box, init_node[i], init_n[i], init_t[i], init_x[i])
        if key < 0:     # (the caller's box holds the request)
            return TOO_BIG, 0, node, n, t, x, dep_counts, flat, 0, sizes, 0
        if table[key] >= 0:
            # Listed twice: the exact algorithm reports it.
            return FALLBACK, 0, node, n, t, x, dep_counts, flat, 0, sizes, 0
        table[key] = count
        node[count] = init_node[i]
        n[count] = init_n[i]
        t[count] = init_t[i]
        x[count] = init_x[i]
        count += 1
    sizes[0] = num_in
    sizes[1] = num_init - num_in
    num_levels = 2
    lo, hi = num_in, num_init
    # Per parent of a level: where its (sorted, unique) dependencies sit in buf.
    buf = np.empty(64, dtype=np.int64)
    seg_start = np.empty(16, dtype=np.int64)
    seg_len = np.empty(16, dtype=np.int64)
    while hi > lo:
        if num_levels > max_levels:
            return TOO_MANY_LEVELS, 0, node, n, t, x, dep_counts, flat, 0, sizes, 0
        # Room for the most this level can add.
        bound = 0
        for p in range(lo, hi):
            bound += term_count[node[p]]
        node = grow(node, count + bound)
        n = grow(n, count + bound)
        t = grow(t, count + bound)
        x = grow(x, count + bound)
        dep_counts = grow(dep_counts, count + bound)
        buf = grow(buf, bound)
        seg_start = grow(seg_start, hi - lo)
        seg_len = grow(seg_len, hi - lo)
        while True:
            status, new_count, used = _expand_level(
                lo, hi, count, box, table, node, n, t, x, buf, seg_start, seg_len,
                is_input_node, needs_time, term_start, term_count, term_root, fwd,
                switch_table, no_time, where)
            if status != OUTSIDE:
                break
            # Grow the box and redo the level (the relayout forgets what
            # the interrupted attempt added).
            box, table = _relayout(box, num_nodes, where[1], where[0], where[2],
                                   node, n, t, x, count, max_table)
            if table.shape[0] == 0:
                return TOO_BIG, 0, node, n, t, x, dep_counts, flat, 0, sizes, 0
        if status != OK:
            return status, 0, node, n, t, x, dep_counts, flat, 0, sizes, 0
        count = new_count
        # The level's dependency lists, in cindex_id order.
        flat = grow(flat, num_flat + used)
        for p in range(lo, hi):
            s, c = seg_start[p - lo], seg_len[p - lo]
            dep_counts[p] = c
            for q in range(c):
                flat[num_flat + q] = buf[s + q]
            num_flat += c
        sizes = grow(sizes, num_levels + 1)
        sizes[num_levels] = count - hi
        num_levels += 1
        lo, hi = hi, count
    return OK, count, node, n, t, x, dep_counts, flat, num_flat, sizes, num_levels


def closure(plan: Any, init: tuple[np.ndarray, ...], num_in: int, max_levels: int):
    """The :mod:`.bulk` closure for a bulk.BulkPlan from the request's
    cindexes ``init`` (inputs then outputs: node, n, t, x columns); None when
    the NumPy path must decide.  Else (node, n, t, x, dep_counts, dep_flat,
    sizes)."""
    jp = plan.jit_plan
    node, n, t, x = init
    if jp is None or not len(node) or jp.has_ranges:
        return None
    box = np.zeros(6, dtype=_I64)
    for j, col in enumerate((t, n, x)):
        # The request's inputs usually cover every t needed, and n and x
        # rarely move: start tight and let _relayout grow the box.
        lo, hi = int(col.min()), int(col.max())
        margin = 4 if j == 0 else 0
        box[2 * j], box[2 * j + 1] = lo - margin, hi - lo + 1 + 2 * margin
    if plan.num_nodes * int(box[1]) * int(box[3]) * int(box[5]) > _MAX_TABLE:
        return None
    (status, count, c_node, c_n, c_t, c_x, dep_counts, flat, num_flat, sizes,
     num_levels) = _closure(
        node.astype(_I64), n.astype(_I64), t.astype(_I64), x.astype(_I64), num_in, max_levels,
        _MAX_TABLE, box, plan.is_input_node, jp.needs_time, jp.term_start, jp.term_count,
        jp.term_root, jp.fwd, jp.switch_table, K_NO_TIME)
    if status != OK:
        return None
    return (c_node[:count], c_n[:count], c_t[:count], c_x[:count], dep_counts[:count],
            flat[:num_flat], sizes[:num_levels])
