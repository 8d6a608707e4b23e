"""cindex -> cindex_id lookups for the vectorised graph builder (:mod:`.bulk`).

The builder asks, once per level, for the ids of thousands of cindexes
``(node, n, t, x)`` at once and adds the ones that are missing.
:class:`CindexIndex` answers with a dense table when the cindexes fit in a
box ``nodes x t-range x (n, x) pairs`` of reasonable size (the usual case:
a few hundred nodes, a few hundred frames, the sequences of a minibatch),
which makes a lookup one gather; otherwise (t values spread far apart,
e.g. ``t = kNoTime`` next to ordinary frames) it keeps per node a sorted
array of keys and uses binary search.

The (n, x) pairs seen get append-only small codes (in practice n is the
sequence and x is 0), so a cindex's key is ``(node, t, code)``.
"""
from __future__ import annotations

import numpy as np

from ...arraytools import sorted_unique

_I64 = np.int64
_TWO32 = 2 ** 32
# A dense table this big (int32 entries) is always fine; beyond it, only if
# it is not much bigger than the graph.
_DENSE_MIN = 1 << 24


class CindexIndex:
    """Ids of the cindexes added so far; ids are given in order of addition."""

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = num_nodes
        self._pair_vals = np.zeros(0, dtype=_I64)   # sorted (n, x) pair values
        self._pair_codes = np.zeros(0, dtype=_I64)  # their codes
        self._chunks: list[tuple[np.ndarray, ...]] = []   # columns of everything added
        self.count = 0
        # Dense mode: _grid[(node * _tspan + t - _t0) * _pcap + code] = id or -1.
        self._grid: np.ndarray | None = None
        self._t0 = self._tspan = self._pcap = 0
        # Sorted mode (when the box would be too sparse): per node, sorted
        # keys t * 2**32 + code and the ids that go with them.
        self._keys: list[np.ndarray | None] | None = None
        self._ids: list[np.ndarray | None] | None = None

    # -- (n, x) codes --------------------------------------------------------------------
    def _codes(self, n: np.ndarray, x: np.ndarray) -> np.ndarray:
        vals = self._pair_vals
        num = len(vals)
        if num == 1 and vals[0] == 0 and not n.any() and not x.any():
            # (n = 0 and x = 0 throughout, a one-sequence request's usual
            # case: every code is the one pair's, 0; two reductions instead
            # of forming and comparing the pair values.)
            return np.zeros(len(n), dtype=_I64)
        pair = n * _TWO32 + (x & 0xFFFFFFFF)
        if num == 1 and (pair == vals[0]).all():
            # (One sequence and x = 0, the usual case: every code is 0.)
            return np.zeros(len(pair), dtype=_I64) + self._pair_codes[0]
        pos = np.searchsorted(vals, pair)
        if num and (vals[np.minimum(pos, num - 1)] == pair).all():
            return self._pair_codes[pos]
        known = (vals[np.minimum(pos, num - 1)] == pair) if num else np.zeros(len(pair), bool)
        new = sorted_unique(pair[~known])
        vals = np.concatenate([vals, new])
        codes = np.concatenate([self._pair_codes, np.arange(num, num + len(new), dtype=_I64)])
        order = np.argsort(vals)
        self._pair_vals, self._pair_codes = vals[order], codes[order]
        return self._pair_codes[np.searchsorted(self._pair_vals, pair)]

    # -- layout ----------------------------------------------------------------------------
    def _fits(self, t_min: int, t_max: int, num_codes: int) -> bool:
        return (self._grid is not None and t_min >= self._t0
                and t_max < self._t0 + self._tspan and num_codes <= self._pcap)

    def _relayout(self, t_min: int, t_max: int, num_codes: int, extra: int) -> None:
        """Make room for t in [t_min, t_max] and num_codes codes (dense if the
        box is not much bigger than the graph, else sorted)."""
        span = t_max - t_min + 1
        if self._grid is not None:
            # Grow geometrically, so that a range widening level by level
            # costs few rebuilds.
            t_min, t_max = min(t_min, self._t0), max(t_max, self._t0 + self._tspan - 1)
            span = max(t_max - t_min + 1, 2 * self._tspan)
        margin = span // 4 + 16
        t0, tspan = t_min - margin, span + 2 * margin
        pcap = max(1, self._pcap)
        while pcap < num_codes:
            pcap *= 2
        size = self.num_nodes * tspan * pcap
        if self._keys is None and size <= max(_DENSE_MIN, 16 * (self.count + extra)):
            self._t0, self._tspan, self._pcap = t0, tspan, pcap
            self._grid = np.full(size, -1, dtype=np.int32)
            for node, n, t, x, ids in self._all_rows():
                self._grid[self._dense_keys(node, t, self._codes(n, x))] = ids
            return
        self._grid = None
        self._keys = [None] * self.num_nodes
        self._ids = [None] * self.num_nodes
        for node, n, t, x, ids in self._all_rows():
            keys = t * _TWO32 + self._codes(n, x)
            for nd in sorted_unique(node).tolist():
                sel = node == nd
                self._insert_sorted(nd, keys[sel], ids[sel])

    def _all_rows(self):
        start = 0
        for node, n, t, x in self._chunks:
            yield node, n, t, x, np.arange(start, start + len(node), dtype=_I64)
            start += len(node)

    def _dense_keys(self, node: np.ndarray, t: np.ndarray, codes: np.ndarray) -> np.ndarray:
        if self._pcap == 1:
            # (One (n, x) pair fits: every code is 0.)
            return node * self._tspan + (t - self._t0)
        return (node * self._tspan + (t - self._t0)) * self._pcap + codes

    def _insert_sorted(self, nd: int, keys: np.ndarray, ids: np.ndarray) -> None:
        order = np.argsort(keys)
        keys, ids = keys[order], ids[order]
        table = self._keys[nd]
        if table is None:
            self._keys[nd], self._ids[nd] = keys, ids
            return
        pos = np.searchsorted(table, keys)
        self._keys[nd] = np.insert(table, pos, keys)
        self._ids[nd] = np.insert(self._ids[nd], pos, ids)

    # -- the one operation ---------------------------------------------------------------
    def resolve(self, node: np.ndarray, n: np.ndarray, t: np.ndarray,
                x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(ids, first): the id of each cindex (int64 columns), adding the
        absent ones with ids ``count, count + 1, ...`` in order of first
        occurrence; ``first`` holds the position of each new cindex's first
        occurrence, in id order."""
        if not len(node):
            return np.zeros(0, dtype=_I64), np.zeros(0, dtype=_I64)
        codes = self._codes(n, x)
        if self._keys is None:
            t_min, t_max = int(t.min()), int(t.max())
            if not self._fits(t_min, t_max, len(self._pair_vals)):
                self._relayout(t_min, t_max, len(self._pair_vals), len(node))
        if self._grid is not None:
            keys = self._dense_keys(node, t, codes)
            ids = self._grid[keys].astype(_I64)
            absent = np.flatnonzero(ids < 0)
            if not absent.size:
                return ids, absent
            # First occurrences without sorting: mark each absent key with
            # -2 - (its position among the absent), writing in reverse so
            # that the earliest position is written last and stays.
            grid = self._grid
            absent_keys = keys[absent]
            num_absent = len(absent)
            grid[absent_keys[::-1]] = np.arange(-1 - num_absent, -1, dtype=np.int32)
            first_of = -2 - grid[absent_keys].astype(_I64)
            first = np.flatnonzero(first_of == np.arange(num_absent, dtype=_I64))
            new_ids = np.empty(num_absent, dtype=_I64)
            new_ids[first] = np.arange(self.count, self.count + len(first), dtype=_I64)
            grid[absent_keys[first]] = new_ids[first]
            ids[absent] = new_ids[first_of]
            return ids, self._record(absent[first], node, n, t, x)
        return self._resolve_sorted(node, n, t, x, codes)

    def _number(self, first: np.ndarray) -> np.ndarray:
        """New ids for cindexes whose first occurrences are at ``first``."""
        new_ids = np.empty(len(first), dtype=_I64)
        new_ids[np.argsort(first, kind="stable")] = np.arange(
            self.count, self.count + len(first), dtype=_I64)
        return new_ids

    def _record(self, src: np.ndarray, node: np.ndarray, n: np.ndarray, t: np.ndarray,
                x: np.ndarray) -> np.ndarray:
        self._chunks.append((node[src], n[src], t[src], x[src]))
        self.count += len(src)
        return src

    def _resolve_sorted(self, node, n, t, x, codes) -> tuple[np.ndarray, np.ndarray]:
        keys = t * _TWO32 + codes
        ids = np.empty(len(keys), dtype=_I64)
        parts = []
        for nd in sorted_unique(node).tolist():
            sel = np.flatnonzero(node == nd)
            table = self._keys[nd]
            if table is None or not len(table):
                found = np.full(len(sel), -1, dtype=_I64)
            else:
                pos = np.minimum(np.searchsorted(table, keys[sel]), len(table) - 1)
                found = np.where(table[pos] == keys[sel], self._ids[nd][pos], -1)
            ids[sel] = found
            absent = sel[found < 0]
            if absent.size:
                uniq, first, inverse = np.unique(keys[absent], return_index=True,
                                                 return_inverse=True)
                parts.append((nd, absent, first, uniq, inverse))
        if not parts:
            return ids, np.zeros(0, dtype=_I64)
        first_all = np.concatenate([absent[first] for _, absent, first, _, _ in parts])
        new_ids = self._number(first_all)
        offset = 0
        for nd, absent, _, uniq, inverse in parts:
            mine = new_ids[offset:offset + len(uniq)]
            ids[absent] = mine[inverse]
            self._insert_sorted(nd, uniq, mine)
            offset += len(uniq)
        return ids, self._record(np.sort(first_all), node, n, t, x)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """node, n, t, x (int32) of every cindex, by id."""
        return tuple(np.concatenate([c[i] for c in self._chunks]).astype(np.int32)
                     for i in range(4))

    def add_initial(self, node: np.ndarray, n: np.ndarray, t: np.ndarray,
                    x: np.ndarray) -> bool:
        """Add the request's cindexes (ids 0, 1, ...); False if one repeats."""
        ids, first = self.resolve(node, n, t, x)
        return len(first) == len(node)

    def lookup(self, node: np.ndarray, n: np.ndarray, t: np.ndarray,
               x: np.ndarray) -> np.ndarray:
        """Ids of cindexes (-1 for absent ones), adding nothing."""
        codes = self._codes(n, x)
        if self._grid is not None:
            inside = ((t >= self._t0) & (t < self._t0 + self._tspan) & (codes < self._pcap))
            keys = self._dense_keys(node, np.where(inside, t, self._t0),
                                    np.where(inside, codes, 0))
            return np.where(inside, self._grid[keys], -1).astype(_I64)
        keys = t * _TWO32 + codes
        ids = np.full(len(keys), -1, dtype=_I64)
        for nd in sorted_unique(node).tolist():
            table = self._keys[nd]
            if table is None or not len(table):
                continue
            sel = np.flatnonzero(node == nd)
            pos = np.minimum(np.searchsorted(table, keys[sel]), len(table) - 1)
            ids[sel] = np.where(table[pos] == keys[sel], self._ids[nd][pos], -1)
        return ids
