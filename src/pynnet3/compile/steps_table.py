"""The cindexes of a graph as sortable integer keys, for steps.py.

A cindex ``(node, n, t, x)`` is encoded as one int64 whose numeric order is
Kaldi's Cindex order (node, then t, x, n), so sorting a phase is an argsort,
and the cindex of another node with the same Index is the key plus a
multiple of a stride.
"""
from __future__ import annotations

import numpy as np

from ..arraytools import sorted_unique
from ..errors import PynnetError
from ..nnet.index import K_NO_TIME
from .graph.computation_graph import GraphArrays

_INT64 = np.int64


def _graph_ntx(arrays: GraphArrays) -> np.ndarray:
    """(num, 3) int64 columns n, t, x of every cindex of the graph."""
    return np.stack([arrays.n, arrays.t, arrays.x], axis=1).astype(_INT64)


class _Column:
    """Order-preserving small-integer code of one Index field (n, t or x).

    kNoTime (the smallest int32) gets code 0 so it still sorts first; other
    values are offsets from the smallest, or ranks among the distinct values
    when the range is too wide to multiply into one int64 key.
    """

    def __init__(self, values: np.ndarray, allow_offset: bool = True) -> None:
        real = values[values != K_NO_TIME]
        self.lo = int(real.min()) if real.size else 0
        hi = int(real.max()) if real.size else 0
        self.uniq: np.ndarray | None = None
        if allow_offset and hi - self.lo < (1 << 22):
            self.size = hi - self.lo + 2
        else:
            self.uniq = sorted_unique(real)
            self.size = len(self.uniq) + 1

    def encode(self, values: np.ndarray,
               trusted: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """(codes, valid): ``valid`` is None when every value is known (or
        ``trusted``: the values are those the column was built from)."""
        if self.uniq is None:
            codes = values - (self.lo - 1)
        else:
            pos = np.searchsorted(self.uniq, values)
            codes = pos + 1
        if values.size == 0:
            return codes, None
        blank = values == K_NO_TIME if values.min() == K_NO_TIME else None
        if blank is not None:
            codes[blank] = 0
        if trusted:
            return codes, None
        if self.uniq is None:
            ok = (codes >= 1) & (codes < self.size)
        elif len(self.uniq):
            ok = self.uniq[np.minimum(pos, len(self.uniq) - 1)] == values
        else:
            ok = np.zeros(len(values), dtype=bool)
        if blank is not None:
            ok |= blank
        return codes, (None if ok.all() else ok)


class CindexKeys:
    """The cindexes present when the steps computer starts, as sortable keys.

    ``key = ((node * T + t) * X + x) * N + n`` (fields coded by _Column), so
    sorting by key is sorting in Kaldi's Cindex order, and moving a cindex to
    another node (a component's input node, a dim-range node's source) is
    adding a multiple of ``node_stride``.  Cindexes added later (padding) are
    looked up in the graph's own dictionary instead.
    """

    def __init__(self, arrays: GraphArrays, num_nodes: int) -> None:
        self.num = len(arrays.node)
        self.node = arrays.node.astype(_INT64)
        self.ntx = ntx = _graph_ntx(arrays)
        n, t, x = ntx[:, 0], ntx[:, 1], ntx[:, 2]
        for allow_offset in (True, False):
            self.cols = (_Column(t, allow_offset), _Column(x, allow_offset),
                         _Column(n, allow_offset))
            sizes = [c.size for c in self.cols]
            if float(num_nodes) * sizes[0] * sizes[1] * sizes[2] < 2.0 ** 62:
                break
        else:
            raise PynnetError("indexes too spread out to encode (bad request?)")
        self.x_mul = sizes[2]
        self.t_mul = sizes[1] * sizes[2]
        self.node_stride = sizes[0] * self.t_mul
        self.key = self._combine(self.node, t, x, n, trusted=True)[0]
        # Lookups go through a dense key -> cindex_id array when that is small
        # (the usual case: a few hundred nodes x frames x sequences), else
        # through binary search in the sorted keys.
        total = num_nodes * self.node_stride
        self.dense: np.ndarray | None = None
        if total <= 4 * self.num + (1 << 16):
            self.dense = np.full(total, -1, dtype=np.int32)
            self.dense[self.key] = np.arange(self.num, dtype=np.int32)
        else:
            self.perm = np.argsort(self.key)      # keys are unique: any sort will do
            self.sorted_key = self.key[self.perm]

    def _combine(self, node: np.ndarray, t: np.ndarray, x: np.ndarray, n: np.ndarray,
                 trusted: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        ct, ok_t = self.cols[0].encode(t, trusted)
        cx, ok_x = self.cols[1].encode(x, trusted)
        cn, ok_n = self.cols[2].encode(n, trusted)
        key = node * self.node_stride
        ct *= self.t_mul
        key += ct
        cx *= self.x_mul
        key += cx
        key += cn
        ok = None
        for part in (ok_t, ok_x, ok_n):
            if part is not None:
                ok = part if ok is None else ok & part
        return key, ok

    def lookup_keys(self, keys: np.ndarray, ok: np.ndarray | None = None) -> np.ndarray:
        """cindex_ids of encoded keys; -1 for those not in the table.

        ``ok`` marks the keys whose fields were all encodable; keys of
        cindexes of existing nodes are always in range, as are keys shifted
        to another node.
        """
        if self.num == 0:
            return np.full(len(keys), -1, dtype=_INT64)
        if self.dense is not None:
            if ok is None:
                return self.dense[keys].astype(_INT64)
            return np.where(ok, self.dense[np.where(ok, keys, 0)], -1).astype(_INT64)
        pos = np.searchsorted(self.sorted_key, keys)
        np.minimum(pos, self.num - 1, out=pos)
        found = self.sorted_key[pos] == keys
        if ok is not None:
            found &= ok
        return np.where(found, self.perm[pos], -1)

    def lookup(self, node: np.ndarray, ntx: np.ndarray) -> np.ndarray:
        key, ok = self._combine(node, ntx[:, 1], ntx[:, 2], ntx[:, 0])
        return self.lookup_keys(key, ok)
