"""Float32 arithmetic shared by the components, done the way Kaldi's CPU code
rounds it, so that propagated values and re-written models match Kaldi's.

NumPy's defaults differ from Kaldi's loops in small ways that change the last
bit: a separate multiply and add where BLAS saxpy fuses them, pairwise sums
where a C loop accumulates left to right, float64 intermediates.  The helpers
here reproduce Kaldi's order of operations.
"""
from __future__ import annotations

import numpy as np

from ...threads import run_column_blocks
from .base import randn


F32 = np.float32
F64 = np.float64


def axpy_f32(alpha: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """y + alpha * x as BLAS saxpy computes it on FMA hardware.

    The float32 product is exact in float64, so a single rounding of the
    float64 sum to float32 matches a fused multiply-add (up to very rare
    double-rounding ties).
    """
    a = F64(F32(alpha))
    return (a * x.astype(F64) + y.astype(F64)).astype(F32)


def add_scaled_f32(alpha: float, x: np.ndarray, y: np.ndarray) -> None:
    """Kaldi's AddMat / AddVec of float32 parameters, ``y += alpha * x`` in
    place, as BLAS saxpy does it: fused multiply-add (:func:`axpy_f32`), a
    plain sum for alpha 1, nothing for alpha 0 (saxpy returns early)."""
    if y.shape != x.shape:
        raise ValueError(f"Add: shape mismatch {y.shape} vs {x.shape}")
    a = F32(alpha)
    if a == 1.0:
        y += x              # the usual case (no max-change): no temporary
    elif a != 0.0:
        y[...] = axpy_f32(a, x, y)


def seq_sum_f32(x: np.ndarray, axis: int) -> np.ndarray:
    """Sum along ``axis`` accumulating left to right in float32 (a C loop
    ``Real sum = 0; sum += ...``), unlike NumPy's pairwise summation."""
    if x.shape[axis] == 0:
        shape = list(x.shape)
        del shape[axis]
        return np.zeros(shape, dtype=F32)
    if x.dtype == F32 and x.ndim == 2 and axis in (1, -1):
        from .row_sums import seq_row_sums_f32   # Numba: imported on first use

        return seq_row_sums_f32(x)
    return np.take(np.cumsum(x, axis=axis, dtype=F32), -1, axis=axis)


def random_vector(dim: int, mean: float, stddev: float) -> np.ndarray:
    """SetRandn, Scale(stddev), Add(mean), all in float32."""
    return randn(dim) * F32(stddev) + F32(mean)


def row_sum(m: np.ndarray) -> np.ndarray:
    """The sum of the rows of a matrix in float32 (Kaldi's AddRowSumMat, as
    NumPy's ``m.sum(axis=0, dtype=float32)`` adds them), its columns split
    between the process's threads on large matrices: each block of columns
    is summed over all rows in the same order, so the bits are the same
    whatever the number of threads (:func:`pynnet3.threads.run_column_blocks`)."""
    if m.ndim != 2:
        return m.sum(axis=0, dtype=F32)
    out = np.empty(m.shape[1], dtype=F32)

    def columns(b: int, e: int) -> None:
        np.sum(m[:, b:e], axis=0, dtype=F32, out=out[b:e])

    run_column_blocks(columns, m.shape[1], m.size)
    return out


def scale_arrays(alpha: float, *arrays: np.ndarray) -> None:
    """Kaldi's Scale(alpha) of float32 parameters: scaling by exactly zero
    sets them to zero, so that NaN and inf disappear."""
    for a in arrays:
        if alpha == 0.0:
            a[...] = 0.0
        else:
            a *= np.float32(alpha)
