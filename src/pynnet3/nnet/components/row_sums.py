"""Row sums accumulated left to right in float32, as a C loop
``float sum = 0; for (j...) sum += x[j];`` takes them (Kaldi's
VectorBase::ApplySoftMax / ApplyLogSoftMax and friends on the CPU).

NumPy has no sequential float32 reduction: its sums are pairwise, and a
cumulative sum (the exact alternative) writes a full-size temporary and runs
about 4x slower than this loop.  Imported lazily (it compiles with Numba)
by :func:`pynnet3.nnet.components.numeric.seq_sum_f32`.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ...numba_cache import ensure_numba_cache

ensure_numba_cache()  # (before the kernels below are decorated with cache=True)

__all__ = ["seq_row_sums_f32", "seq_exp_row_sums_f32"]


@njit(cache=True)
def _seq_row_sums(x: np.ndarray, out: np.ndarray) -> None:
    for i in range(x.shape[0]):
        total = np.float32(0.0)
        for j in range(x.shape[1]):
            total += x[i, j]
        out[i] = total


def seq_row_sums_f32(x: np.ndarray) -> np.ndarray:
    """Sequential float32 sums of the rows of the 2-d float32 array ``x``."""
    out = np.empty(x.shape[0], dtype=np.float32)
    _seq_row_sums(x, out)
    return out


def seq_exp_row_sums_f32(x: np.ndarray, block_bytes: int = 1 << 21) -> np.ndarray:
    """Sequential float32 sums of the rows of ``np.exp(x)`` (2-d float32),
    taking the exponentials a block of rows at a time so that they stay in
    cache and no full-size temporary is made."""
    rows, cols = x.shape
    out = np.empty(rows, dtype=np.float32)
    step = max(1, block_bytes // (4 * max(cols, 1)))
    buf = np.empty((min(rows, step), cols), dtype=np.float32)
    for begin in range(0, rows, step):
        end = min(rows, begin + step)
        block = buf[:end - begin]
        np.exp(x[begin:end], out=block)
        _seq_row_sums(block, out[begin:end])
    return out
