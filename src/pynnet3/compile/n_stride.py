"""The regular 'n' structure that shortcut compilation relies on.

Shortcut compilation (see :mod:`pynnet3.compile.shortcut`) compiles a
request with two sequences (n = 0, 1) and stretches the result to N
sequences.  That only works when every vector of Indexes (or Cindexes) is
laid out regularly in n: copies of the same (t, x) [and node] that differ
only in n sit a fixed distance apart (the *n-stride*), and the rows come in
blocks of ``n_stride * N`` that those strides never cross.  This module
finds that stride (Kaldi's FindNStride), re-lays vectors for another number
of n values (ConvertNumNValues), and holds the column form of cindex lists
that the expander works on.

Everything here is vectorised: the vectors are arrays with columns
``n, t, x`` (Indexes) or ``node, n, t, x`` (Cindexes), because an expanded
64-sequence training computation has over a million cindexes.
"""
from __future__ import annotations

import itertools
import operator
from typing import Sequence

import numpy as np

from .. import fast_paths
from ..nnet.index import Index
# The array-backed lists live beside the Index type (components use them
# too); they are re-exported here, where the expander introduced them.
from ..nnet.index_lists import CindexList, IndexList, NTiling

_TUPLE_NEW = tuple.__new__
_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)

# Column of 'n' in an index array (n, t, x) and in a cindex array (node, n, t, x).
INDEX_N_COL = 0
CINDEX_N_COL = 1


def index_array(indexes: Sequence[Index]) -> np.ndarray:
    """Indexes as an int32 array of shape (len, 3) with columns n, t, x."""
    if isinstance(indexes, IndexList):
        return indexes.array
    num = len(indexes)
    flat = np.fromiter(itertools.chain.from_iterable(indexes), dtype=np.int64, count=3 * num)
    return flat.astype(np.int32).reshape(num, 3)


def cindex_array(cindexes: Sequence[tuple[int, Index]]) -> np.ndarray:
    """Cindexes (node, Index) as an int32 array of shape (len, 4): node, n, t, x."""
    if isinstance(cindexes, CindexList):
        return cindexes.array
    num = len(cindexes)
    out = np.empty((num, 4), dtype=np.int32)
    out[:, 0] = np.fromiter(map(_FIRST, cindexes), dtype=np.int64, count=num)
    out[:, 1:] = np.fromiter(itertools.chain.from_iterable(map(_SECOND, cindexes)),
                             dtype=np.int64, count=3 * num).reshape(num, 3)
    return out


def find_n_stride(arr: np.ndarray, n_col: int, full_check: bool = True) -> int:
    """Kaldi's FindNStride on an index array (n_col=0) or cindex array (n_col=1).

    Returns the n-stride, or 0 when the rows lack the regular structure.
    N is one more than the n of the last row.  Kaldi checks five random rows
    when ``full_check`` is false; every row is checked here either way (the
    check is vectorised, so it costs little) and the result is then
    deterministic -- ``full_check`` is kept for readers of Kaldi's code.
    """
    del full_check
    size = arr.shape[0]
    if size == 0:
        raise ValueError("find_n_stride: empty vector of indexes")
    if size <= fast_paths.current().n_stride_list_rows:
        return _find_n_stride_small(arr.tolist(), n_col)
    n = arr[:, n_col]
    num_n = int(n[-1]) + 1
    if num_n <= 1:
        return 0
    if n[0] != 0 or size % num_n != 0:
        return 0
    # Rows equal to the first row with n = 1: candidates for the stride.
    others = _row_keys(arr, n_col)
    cand = _rows_equal(others, others[0]) & (n == 1)
    per_n = size // num_n
    if cand[1]:
        n_stride = 1
    elif cand[per_n]:
        n_stride = per_n
    else:
        # Kaldi tries strides 2, 3, ... below size/N that divide the size.
        strides = np.arange(2, per_n)
        ok = strides[(size % strides == 0) & cand[2:per_n]]
        if ok.size == 0:
            return 0
        n_stride = int(ok[0])
    return n_stride if _stride_is_consistent(others, n, num_n, n_stride) else 0


# Up to fast_paths.current().n_stride_list_rows rows find_n_stride works on
# Python lists: the mini computation of a recurrent network has hundreds of
# matrices of a few rows, where the array version's NumPy calls cost more
# than the work.

def _find_n_stride_small(rows: list[list[int]], n_col: int) -> int:
    """find_n_stride on a short list of rows (same algorithm, same answer)."""
    size = len(rows)
    n = [r[n_col] for r in rows]
    num_n = n[-1] + 1
    if num_n <= 1 or n[0] != 0 or size % num_n != 0:
        return 0
    others = [tuple(r[:n_col] + r[n_col + 1:]) for r in rows]
    first = others[0]
    per_n = size // num_n

    def cand(i: int) -> bool:
        return others[i] == first and n[i] == 1

    if cand(1):
        s = 1
    elif cand(per_n):
        s = per_n
    else:
        s = next((k for k in range(2, per_n) if size % k == 0 and cand(k)), 0)
        if s == 0:
            return 0
    for i in range(size):
        if n[i] < num_n - 1 and not (i + s < size and others[i + s] == others[i]
                                     and n[i + s] == n[i] + 1):
            return 0
        if n[i] != 0 and not (i - s >= 0 and others[i - s] == others[i]
                              and n[i - s] == n[i] - 1):
            return 0
    block = s * num_n
    if any(n[i] == 0 and i // block != (i + s * (num_n - 1)) // block for i in range(size)):
        return 0
    return s


def _row_keys(arr: np.ndarray, n_col: int) -> np.ndarray:
    """The rows of an int array [len, k] without column ``n_col``, as one
    int64 each, equal exactly where those rows are (comparing a column beats
    comparing rows), when their values fit in 62 bits; else those rows."""
    other = [j for j in range(arr.shape[1]) if j != n_col]
    if len(other) == 1:
        return arr[:, other[0]].astype(np.int64)
    if len(other) == 2 and arr.dtype.kind == "i" and arr.dtype.itemsize <= 4:
        # (t, x) of int32 Indexes: t * 2**32 + (x mod 2**32) is one-to-one.
        return (arr[:, other[0]].astype(np.int64) << 32) | (
            arr[:, other[1]].astype(np.int64) & 0xFFFFFFFF)
    if arr.dtype.kind == "i" and len(arr):
        # (node, t, x) of cindexes: mixed radix over each column's range.
        cols = [arr[:, j].astype(np.int64) for j in other]
        lo = [int(c.min()) for c in cols]
        hi = [int(c.max()) for c in cols]
        span = 1
        for a, b in zip(lo, hi):
            span *= b - a + 1
        if span < 1 << 62:
            key = cols[0] - lo[0]
            for c, a, b in zip(cols[1:], lo[1:], hi[1:]):
                key *= b - a + 1
                key += c - a
            return key
    return arr[:, other]


def _rows_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-by-row equality of _row_keys results (broadcasting)."""
    eq = a == b
    return eq if eq.ndim == 1 else np.all(eq, axis=-1)


def _stride_is_consistent(others: np.ndarray, n: np.ndarray, num_n: int, s: int) -> bool:
    """Kaldi's checking phase of FindNStride, for every row at once
    (``others``: the rows' other columns, as _row_keys gives them)."""
    size = n.shape[0]
    # step_ok[i]: row i+s is row i with n one larger (for 0 <= i < size - s).
    step_ok = _rows_equal(others[:-s], others[s:]) & (n[s:] == n[:-s] + 1) \
        if s < size else np.zeros(0, dtype=bool)
    pos = np.arange(size)
    # Rows with n < N-1 need their successor at i + s.
    fwd = n < num_n - 1
    fwd_ok = np.zeros(size, dtype=bool)
    fwd_ok[:size - s] = step_ok
    if np.any(fwd & ~fwd_ok):
        return False
    # Rows with n > 0 (Kaldi: every n != 0, negative ones too) need their
    # predecessor at i - s.
    bwd = n != 0
    bwd_ok = np.zeros(size, dtype=bool)
    bwd_ok[s:] = step_ok
    if np.any(bwd & ~bwd_ok):
        return False
    # Rows with n == 0 start a run of N rows that stays inside one block.
    block = s * num_n
    zero = pos[n == 0]
    return bool(np.all(zero // block == (zero + s * (num_n - 1)) // block))


def convert_num_n_values(n_stride: int, old_num_n: int, new_num_n: int,
                         arr: np.ndarray, n_col: int) -> np.ndarray:
    """Kaldi's ConvertNumNValues: the same rows for n in [0, new_num_n).

    ``arr`` must have n-stride ``n_stride`` and n values [0, old_num_n); the
    result keeps the stride and the block layout.
    """
    size_in = arr.shape[0]
    if size_in == 0 or arr[-1, n_col] != old_num_n - 1:
        raise ValueError("convert_num_n_values: indexes do not end with n = old_num_n - 1")
    block_in, block_out = n_stride * old_num_n, n_stride * new_num_n
    zero = np.flatnonzero(arr[:, n_col] == 0)
    start = (zero // block_in) * block_out + zero % block_in
    return _place_copies(arr[zero], n_col, start, n_stride, new_num_n,
                         (size_in // old_num_n) * new_num_n)


def widened_tiling(n_stride: int, new_num_n: int, arr: np.ndarray, n_col: int
                   ) -> NTiling | None:
    """convert_num_n_values(n_stride, 2, new_num_n, arr, n_col) as the
    :class:`NTiling` that describes it (the list is then made only if
    somebody reads it, and index hooks can work on the small base), when
    ``arr`` (n values 0 and 1, n-stride ``n_stride``) has the usual layout:
    each block's first n_stride rows have n = 0.  Else None."""
    size = arr.shape[0]
    zero = np.flatnonzero(arr[:, n_col] == 0)
    k = len(zero)
    if not k or 2 * k != size or k % n_stride:
        return None
    pos = np.arange(k, dtype=np.int64)
    if not np.array_equal(zero, (pos // n_stride) * (2 * n_stride) + pos % n_stride):
        return None
    return NTiling(np.ascontiguousarray(arr[zero]), new_num_n, n_stride, n_col)


def expand_rows_by_n(arr: np.ndarray, n_col: int, n_stride: int, new_row_of_n0: np.ndarray,
                     num_n: int, num_rows_out: int) -> np.ndarray:
    """Rows of an n in {0,1} array placed for ``num_n`` values of n.

    Row r (with n == 0) of ``arr`` goes to rows ``new_row_of_n0[r] + k *
    n_stride`` with n = k; rows with n == 1 are implied by the n == 0 ones.
    """
    zero = np.flatnonzero(arr[:, n_col] == 0)
    return _place_copies(arr[zero], n_col, new_row_of_n0[zero].astype(np.int64), n_stride,
                         num_n, num_rows_out)


def _place_copies(base: np.ndarray, n_col: int, start: np.ndarray, n_stride: int, num_n: int,
                  num_rows_out: int) -> np.ndarray:
    """out[start[i] + k * n_stride] = base[i] with n = k, for k < num_n."""
    k, cols = base.shape
    if k * num_n == num_rows_out and k % n_stride == 0:
        # The usual layout: base rows fill each block's first n_stride rows,
        # block by block.  Then the copies are one broadcast, not a scatter.
        pos = np.arange(k, dtype=np.int64)
        if np.array_equal(start, (pos // n_stride) * (n_stride * num_n) + pos % n_stride):
            out = np.empty((k // n_stride, num_n, n_stride, cols), dtype=base.dtype)
            out[:] = base.reshape(k // n_stride, 1, n_stride, cols)
            out[:, :, :, n_col] = np.arange(num_n, dtype=base.dtype)[None, :, None]
            return out.reshape(num_rows_out, cols)
    ns = np.arange(num_n, dtype=np.int64)
    rows = (start[:, None] + n_stride * ns[None, :]).ravel()
    out = np.empty((num_rows_out, cols), dtype=base.dtype)
    out[rows] = np.broadcast_to(base[:, None, :], (k, num_n, cols)).reshape(k * num_n, cols)
    out[rows, n_col] = np.broadcast_to(ns[None, :], (k, num_n)).ravel()
    return out


