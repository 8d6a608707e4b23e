"""Row sums accumulated left to right in float32, as a C loop
``float sum = 0; for (j...) sum += x[j];`` takes them (Kaldi's
VectorBase::ApplySoftMax / ApplyLogSoftMax and friends on the CPU).

NumPy has no sequential float32 reduction: its sums are pairwise, and a
cumulative sum (the exact alternative) writes a full-size temporary and runs
about 4x slower than a loop.  Two exact ways are used:

* NumPy, a column at a time: ``total += x[:, j]`` for j = 0, 1, ... adds
  every row's j-th element to its running float32 sum, the same additions in
  the same order as the C loop, vectorised over the rows (on a transposed
  copy, so that each column is contiguous).  ``np.add.reduce(xt, axis=0)``
  does exactly these additions in one call when there are at least two rows
  (see :func:`_column_sums`), and needs no compilation;
* a Numba loop (:func:`_seq_row_sums`), for few long rows, where the
  per-column cost would dominate (:data:`JIT_MIN_COLS_PER_ROW`), and for
  any large matrix once the process has imported Numba anyway (the loop is
  about 3x faster on 1000 x 3000).  Numba is imported and the loop compiled
  (or loaded from its cache) only then, so a run that never meets such a
  matrix does not pay Numba's start-up (about a second).
"""
from __future__ import annotations

import numpy as np

from ...numba_cache import lazy_njit, numba_loaded

__all__ = ["seq_row_sums_f32", "seq_exp_row_sums_f32"]

F32 = np.float32

#: The Numba loop is used when a matrix has at least this many columns per
#: row and at least JIT_MIN_ELEMENTS elements (a handful of rows of
#: thousands of columns); otherwise the NumPy column loop, which gives the
#: same bits.
JIT_MIN_COLS_PER_ROW = 16
JIT_MIN_ELEMENTS = 1 << 16


@lazy_njit(cache=True)
def _seq_row_sums(x: np.ndarray, out: np.ndarray) -> None:
    for i in range(x.shape[0]):
        total = np.float32(0.0)
        for j in range(x.shape[1]):
            total += x[i, j]
        out[i] = total


def _use_jit(rows: int, cols: int) -> bool:
    big, long_rows = rows * cols >= JIT_MIN_ELEMENTS, cols >= JIT_MIN_COLS_PER_ROW * rows
    if numba_loaded():      # (Numba's start-up is paid already: the loop is faster)
        return big or long_rows
    return big and long_rows


def _column_sums(xt: np.ndarray, out: np.ndarray) -> None:
    """out[i] = xt[0, i] + xt[1, i] + ... in float32, left to right."""
    if xt.ndim == 2 and xt.shape[0] > 0 and xt.shape[1] >= 2 \
            and xt.strides[1] == xt.itemsize and xt.strides[0] >= xt.shape[1] * xt.itemsize:
        # One C call doing the same additions: NumPy reduces over the outer
        # (strided) axis with the rows' elements as its inner loop, so each
        # out[i] is accumulated sequentially, xt[0, i] first (pairwise
        # summation only happens when the reduced axis is the inner one, as
        # with a single column).  About 10x faster than the loop below on
        # log-softmax's 2000 x 128 (0.04 against 0.47 ms).
        np.add.reduce(xt, axis=0, out=out)
        # The C loop starts from +0.0f, the reduction from xt[0]: they differ
        # only where every element is -0.0 (sum -0.0 here, +0.0 in C).
        out += F32(0.0)
        return
    out[...] = 0.0
    for column in xt:
        out += column


def seq_row_sums_f32(x: np.ndarray, use_jit: bool | None = None) -> np.ndarray:
    """Sequential float32 sums of the rows of the 2-d float32 array ``x``
    (``use_jit``: force one of the two ways, for tests)."""
    rows, cols = x.shape
    out = np.empty(rows, dtype=F32)
    if _use_jit(rows, cols) if use_jit is None else use_jit:
        _seq_row_sums(x, out)
    else:
        _column_sums(np.ascontiguousarray(x.T), out)
    return out


def seq_exp_row_sums_f32(x: np.ndarray, block_bytes: int = 1 << 21,
                         use_jit: bool | None = None) -> np.ndarray:
    """Sequential float32 sums of the rows of ``np.exp(x)`` (2-d float32),
    taking the exponentials a block of rows at a time so that they stay in
    cache and no full-size temporary is made."""
    rows, cols = x.shape
    out = np.empty(rows, dtype=F32)
    step = max(1, block_bytes // (4 * max(cols, 1)))
    jit = _use_jit(rows, cols) if use_jit is None else use_jit
    buf = np.empty((min(rows, step), cols) if jit else (cols, min(rows, step)), dtype=F32)
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        if jit:
            block = buf[:end - begin]
            np.exp(x[begin:end], out=block)
            _seq_row_sums(block, out[begin:end])
        else:
            block = buf[:, :end - begin]
            np.exp(x[begin:end].T, out=block)
            _column_sums(block, out[begin:end])
    return out
