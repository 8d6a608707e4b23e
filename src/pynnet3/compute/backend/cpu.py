"""The Numba CPU backend: the reference backend's matrices (NumPy float32
arrays and their slices) with its row, matrix and compression operations
done by ``@numba.njit`` kernels.

Every operation gives the reference's result (:mod:`.reference` is the
definition): the same float32 products and sums in the same order, so row
copies and additions agree bit for bit; row-range sums are taken in double
(directly, where the reference differences cumulative sums), which may
change the last float bit.  Matrix products stay in the components (NumPy's
BLAS); the elementwise sigmoid, tanh and ReLU run here when no model update
is involved (their self-repair and statistics stay in the components), equal
to the components' NumPy code up to an ulp of ``expf``.

Each kernel comes as a serial and a ``parallel=True`` (prange over rows)
twin sharing one ``@njit`` row helper.  The serial ones are the default, as
Kaldi's CPU code is single-threaded: on a busy machine (and the project's
machines have 2 cores shared by several jobs) a parallel launch waits for the
scheduler to run Numba's worker threads, measured at a median of 16 ms for
an operation that takes 13 us serially, and it competes with OpenBLAS's
threads inside a forward pass.  ``CpuBackend(parallel_min_elements=N)``
opts in: operations on at least N elements then use the parallel twins
(up to 3x faster than the serial ones on 10,000 x 768 row copies in the
best runs measured here, several times slower in others; see
``bench/row_ops.py``).

Kernels assume that the matrix they write does not overlap the ones they
read, as Kaldi's kernels do; where it might (``np.may_share_memory``), the
operation is handed to the reference, which copies first.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import float32, float64, njit, prange

from ...errors import PynnetError
from . import elementwise as ew
from .reference import CompressedMatrix, ReferenceBackend, compression_plan
from .tables import IndexTable, host_table, range_bounds, table_plan
from ...numba_cache import ensure_numba_cache

ensure_numba_cache()  # (before the kernels below are decorated with cache=True)

F32 = np.float32

# A reasonable ``parallel_min_elements`` on a machine with idle cores: below
# this, waking Numba's thread pool costs more than the work.
PARALLEL_MIN_ELEMENTS = 1 << 15


# ---------------------------------------------------------------------------
# row helpers: the whole body of every kernel below


@njit(cache=True)
def _copy_row(dst, r, src, i, alpha):
    """dst[r] = alpha * src[i], or 0 when i < 0."""
    if i < 0:
        for c in range(dst.shape[1]):
            dst[r, c] = 0.0
    else:
        for c in range(dst.shape[1]):
            dst[r, c] = alpha * src[i, c]


@njit(cache=True)
def _add_row(dst, r, src, i, alpha):
    """dst[r] += alpha * src[i]; nothing when i < 0."""
    if i >= 0:
        for c in range(dst.shape[1]):
            dst[r, c] += alpha * src[i, c]


@njit(cache=True)
def _add_range_row(dst, r, src, begin, end, alpha, acc):
    """dst[r] += alpha * sum(src[begin:end]), summed in double in ``acc``."""
    if end <= begin:
        return
    nc = dst.shape[1]
    for c in range(nc):
        acc[c] = 0.0
    for k in range(begin, end):
        for c in range(nc):
            acc[c] += src[k, c]
    a = float64(alpha)
    for c in range(nc):
        dst[r, c] += float32(acc[c] * a)


# ---------------------------------------------------------------------------
# row-operation kernels (serial / parallel twins)


@njit(cache=True)
def _copy_rows_s(dst, src, indexes, alpha):
    for r in range(dst.shape[0]):
        _copy_row(dst, r, src, indexes[r], alpha)


@njit(cache=True, parallel=True)
def _copy_rows_p(dst, src, indexes, alpha):
    for r in prange(dst.shape[0]):
        _copy_row(dst, r, src, indexes[r], alpha)


@njit(cache=True)
def _add_rows_s(dst, src, indexes, alpha):
    for r in range(dst.shape[0]):
        _add_row(dst, r, src, indexes[r], alpha)


@njit(cache=True, parallel=True)
def _add_rows_p(dst, src, indexes, alpha):
    for r in prange(dst.shape[0]):
        _add_row(dst, r, src, indexes[r], alpha)


@njit(cache=True)
def _copy_mapped_s(dst, dst_rows, src, src_rows, alpha):
    """dst[dst_rows[k]] = alpha * src[src_rows[k]] (one group of a multi op)."""
    for k in range(dst_rows.shape[0]):
        _copy_row(dst, dst_rows[k], src, src_rows[k], alpha)


@njit(cache=True, parallel=True)
def _copy_mapped_p(dst, dst_rows, src, src_rows, alpha):
    for k in prange(dst_rows.shape[0]):
        _copy_row(dst, dst_rows[k], src, src_rows[k], alpha)


@njit(cache=True)
def _add_mapped_s(dst, dst_rows, src, src_rows, alpha):
    """dst[dst_rows[k]] += alpha * src[src_rows[k]], in order of k."""
    for k in range(dst_rows.shape[0]):
        _add_row(dst, dst_rows[k], src, src_rows[k], alpha)


@njit(cache=True, parallel=True)
def _add_mapped_p(dst, dst_rows, src, src_rows, alpha):
    for k in prange(dst_rows.shape[0]):
        _add_row(dst, dst_rows[k], src, src_rows[k], alpha)


@njit(cache=True)
def _zero_rows(dst, rows):
    for k in range(rows.shape[0]):
        for c in range(dst.shape[1]):
            dst[rows[k], c] = 0.0


@njit(cache=True)
def _add_row_ranges_s(dst, src, ranges, alpha):
    acc = np.empty(dst.shape[1], dtype=np.float64)
    for r in range(dst.shape[0]):
        _add_range_row(dst, r, src, ranges[r, 0], ranges[r, 1], alpha, acc)


@njit(cache=True, parallel=True)
def _add_row_ranges_p(dst, src, ranges, alpha):
    for r in prange(dst.shape[0]):
        acc = np.empty(dst.shape[1], dtype=np.float64)
        _add_range_row(dst, r, src, ranges[r, 0], ranges[r, 1], alpha, acc)


# ---------------------------------------------------------------------------
# whole-matrix kernels


@njit(cache=True)
def _set_const_s(dst, value):
    for r in range(dst.shape[0]):
        for c in range(dst.shape[1]):
            dst[r, c] = value


@njit(cache=True, parallel=True)
def _set_const_p(dst, value):
    for r in prange(dst.shape[0]):
        for c in range(dst.shape[1]):
            dst[r, c] = value


@njit(cache=True)
def _scale_s(dst, alpha):
    for r in range(dst.shape[0]):
        for c in range(dst.shape[1]):
            dst[r, c] *= alpha


@njit(cache=True, parallel=True)
def _scale_p(dst, alpha):
    for r in prange(dst.shape[0]):
        for c in range(dst.shape[1]):
            dst[r, c] *= alpha


@njit(cache=True)
def _copy_s(dst, src, alpha):
    for r in range(dst.shape[0]):
        _copy_row(dst, r, src, r, alpha)


@njit(cache=True, parallel=True)
def _copy_p(dst, src, alpha):
    for r in prange(dst.shape[0]):
        _copy_row(dst, r, src, r, alpha)


@njit(cache=True)
def _add_s(dst, src, alpha):
    for r in range(dst.shape[0]):
        _add_row(dst, r, src, r, alpha)


@njit(cache=True, parallel=True)
def _add_p(dst, src, alpha):
    for r in prange(dst.shape[0]):
        _add_row(dst, r, src, r, alpha)


# ---------------------------------------------------------------------------
# compression and elementwise nonlinearities


@njit(cache=True)
def _compress_row(codes, src, r, inv_scale, lo, hi, sign_form):
    for c in range(src.shape[1]):
        codes[r, c] = int(ew.code_of(src[r, c], inv_scale, lo, hi, sign_form))


@njit(cache=True)
def _compress_s(codes, src, inv_scale, lo, hi, sign_form):
    for r in range(src.shape[0]):
        _compress_row(codes, src, r, inv_scale, lo, hi, sign_form)


@njit(cache=True, parallel=True)
def _compress_p(codes, src, inv_scale, lo, hi, sign_form):
    for r in prange(src.shape[0]):
        _compress_row(codes, src, r, inv_scale, lo, hi, sign_form)


@njit(cache=True)
def _decompress_s(dst, codes, scale):
    for r in range(dst.shape[0]):
        for c in range(dst.shape[1]):
            dst[r, c] = float32(codes[r, c]) * scale


@njit(cache=True, parallel=True)
def _decompress_p(dst, codes, scale):
    for r in prange(dst.shape[0]):
        for c in range(dst.shape[1]):
            dst[r, c] = float32(codes[r, c]) * scale


@njit(cache=True)
def _unary_s(out, x, op):
    for r in range(out.shape[0]):
        for c in range(out.shape[1]):
            out[r, c] = ew.unary_forward(x[r, c], op)


@njit(cache=True, parallel=True)
def _unary_p(out, x, op):
    for r in prange(out.shape[0]):
        for c in range(out.shape[1]):
            out[r, c] = ew.unary_forward(x[r, c], op)


@njit(cache=True)
def _unary_backward_s(in_deriv, y, d, op):
    for r in range(in_deriv.shape[0]):
        for c in range(in_deriv.shape[1]):
            in_deriv[r, c] = ew.unary_backward(y[r, c], d[r, c], op)


@njit(cache=True, parallel=True)
def _unary_backward_p(in_deriv, y, d, op):
    for r in prange(in_deriv.shape[0]):
        for c in range(in_deriv.shape[1]):
            in_deriv[r, c] = ew.unary_backward(y[r, c], d[r, c], op)


# ---------------------------------------------------------------------------
# the backend


def _indexes(indexes: Any) -> np.ndarray:
    return np.ascontiguousarray(indexes, dtype=np.int32)


def _overlaps(a: np.ndarray, arrays: list[np.ndarray]) -> bool:
    return any(np.may_share_memory(a, b) for b in arrays)


_UNARY_METHODS: dict[Any, int] = {}


def unary_op_of(component: Any, method: str) -> int | None:
    """The elementwise op (ew.SIGMOID ...) a component's ``propagate`` or
    ``backprop`` computes, or None.  Matched on the function itself, so a
    subclass that overrides the method is not mistaken for its parent."""
    if not _UNARY_METHODS:
        from ...nnet.components.nonlinearities import (RectifiedLinearComponent,
                                                       SigmoidComponent, TanhComponent)

        for cls, op in ((SigmoidComponent, ew.SIGMOID), (TanhComponent, ew.TANH),
                        (RectifiedLinearComponent, ew.RELU)):
            _UNARY_METHODS[cls.propagate] = op
            _UNARY_METHODS[cls.backprop] = op
    return _UNARY_METHODS.get(getattr(type(component), method, None))


class CpuBackend(ReferenceBackend):
    """NumPy matrices, Numba kernels.  Index tables of shape ``[n, 2]`` are
    prepared as :class:`~.tables.IndexTable` (the multi split is cached)."""

    name = "cpu"

    def __init__(self, parallel_min_elements: int | None = None) -> None:
        super().__init__()
        self.parallel_min_elements = parallel_min_elements

    def _pick(self, serial: Any, parallel: Any, num_elements: int) -> Any:
        limit = self.parallel_min_elements
        return parallel if limit is not None and num_elements >= limit else serial

    def prepare_indexes(self, table: Any) -> Any:
        array = np.asarray(table)
        if array.ndim == 2:
            return IndexTable(array)
        return np.ascontiguousarray(array, dtype=np.int32)

    # -- whole-matrix operations ---------------------------------------------
    def set_const(self, dst: np.ndarray, value: float) -> None:
        self._pick(_set_const_s, _set_const_p, dst.size)(dst, F32(value))

    def scale(self, dst: np.ndarray, alpha: float) -> None:
        self._pick(_scale_s, _scale_p, dst.size)(dst, F32(alpha))

    def copy(self, dst: np.ndarray, src: np.ndarray, alpha: float = 1.0) -> None:
        if dst.shape != src.shape:
            raise PynnetError(f"copy: shapes {dst.shape} and {src.shape} differ")
        if np.may_share_memory(dst, src):
            super().copy(dst, src, alpha)
            return
        self._pick(_copy_s, _copy_p, dst.size)(dst, src, F32(alpha))

    def add(self, dst: np.ndarray, src: np.ndarray, alpha: float = 1.0) -> None:
        if dst.shape != src.shape:
            raise PynnetError(f"add: shapes {dst.shape} and {src.shape} differ")
        if np.may_share_memory(dst, src):
            super().add(dst, src, alpha)
            return
        self._pick(_add_s, _add_p, dst.size)(dst, src, F32(alpha))

    # -- row operations ------------------------------------------------------
    def _check_rows(self, what: str, dst: np.ndarray, src: np.ndarray, indexes: np.ndarray,
                    num_rows: int) -> None:
        # njit kernels do not check bounds: check what NumPy would have.
        if indexes.shape[0] != num_rows or dst.shape[1] != src.shape[1]:
            raise PynnetError(f"{what}: {indexes.shape[0]} indexes for {num_rows} rows, "
                              f"{dst.shape[1]} vs {src.shape[1]} columns")
        if indexes.size and int(indexes.max()) >= src.shape[0]:
            raise PynnetError(f"{what}: row index {int(indexes.max())} out of range "
                              f"for {src.shape[0]} rows")

    def copy_rows(self, dst: np.ndarray, src: np.ndarray, indexes: Any,
                  alpha: float = 1.0) -> None:
        indexes = _indexes(indexes)
        self._check_rows("copy_rows", dst, src, indexes, dst.shape[0])
        if np.may_share_memory(dst, src):
            super().copy_rows(dst, src, indexes, alpha)
            return
        self._pick(_copy_rows_s, _copy_rows_p, dst.size)(dst, src, indexes, F32(alpha))

    def add_rows(self, dst: np.ndarray, src: np.ndarray, indexes: Any,
                 alpha: float = 1.0) -> None:
        indexes = _indexes(indexes)
        self._check_rows("add_rows", dst, src, indexes, dst.shape[0])
        if np.may_share_memory(dst, src):
            super().add_rows(dst, src, indexes, alpha)
            return
        self._pick(_add_rows_s, _add_rows_p, dst.size)(dst, src, indexes, F32(alpha))

    def _check_multi(self, what: str, one: np.ndarray, arrays: list[np.ndarray],
                     pairs: Any) -> Any:
        plan = table_plan(pairs)
        n = sum(g.positions.shape[0] for g in plan.groups) + plan.none_positions.shape[0]
        if n != one.shape[0]:
            raise PynnetError(f"{what}: {n} pairs for {one.shape[0]} rows")
        for g in plan.groups:
            if g.array >= len(arrays):
                raise PynnetError(f"{what}: array position {g.array} out of range")
            a = arrays[g.array]
            if a.shape[1] != one.shape[1] or g.max_row >= a.shape[0]:
                raise PynnetError(f"{what}: row or column out of range in array {g.array}")
        return plan

    def copy_rows_multi(self, dst: np.ndarray, arrays: list[np.ndarray], pairs: Any,
                        alpha: float = 1.0) -> None:
        plan = self._check_multi("copy_rows_multi", dst, arrays, pairs)
        if _overlaps(dst, arrays):
            super().copy_rows_multi(dst, arrays, host_table(pairs), alpha)
            return
        a = F32(alpha)
        for g in plan.groups:
            self._pick(_copy_mapped_s, _copy_mapped_p, g.positions.size * dst.shape[1])(
                dst, g.positions, arrays[g.array], g.rows, a)
        _zero_rows(dst, plan.none_positions)

    def copy_to_rows_multi(self, src: np.ndarray, arrays: list[np.ndarray],
                           pairs: Any) -> None:
        plan = self._check_multi("copy_to_rows_multi", src, arrays, pairs)
        if _overlaps(src, arrays):
            super().copy_to_rows_multi(src, arrays, host_table(pairs))
            return
        one = F32(1.0)
        for g in plan.groups:
            # With repeated destinations the last copy wins, as in NumPy.
            kernel = _copy_mapped_s if g.has_duplicate_rows else self._pick(
                _copy_mapped_s, _copy_mapped_p, g.positions.size * src.shape[1])
            kernel(arrays[g.array], g.rows, src, g.positions, one)

    def add_rows_multi(self, dst: np.ndarray, arrays: list[np.ndarray], pairs: Any,
                       alpha: float = 1.0) -> None:
        plan = self._check_multi("add_rows_multi", dst, arrays, pairs)
        if _overlaps(dst, arrays):
            super().add_rows_multi(dst, arrays, host_table(pairs), alpha)
            return
        a = F32(alpha)
        for g in plan.groups:
            self._pick(_add_mapped_s, _add_mapped_p, g.positions.size * dst.shape[1])(
                dst, g.positions, arrays[g.array], g.rows, a)

    def add_to_rows_multi(self, src: np.ndarray, arrays: list[np.ndarray], pairs: Any,
                          alpha: float = 1.0) -> None:
        plan = self._check_multi("add_to_rows_multi", src, arrays, pairs)
        if _overlaps(src, arrays):
            super().add_to_rows_multi(src, arrays, host_table(pairs), alpha)
            return
        a = F32(alpha)
        for g in plan.groups:
            # Repeated destinations are added one after the other (serially).
            kernel = _add_mapped_s if g.has_duplicate_rows else self._pick(
                _add_mapped_s, _add_mapped_p, g.positions.size * src.shape[1])
            kernel(arrays[g.array], g.rows, src, g.positions, a)

    def add_row_ranges(self, dst: np.ndarray, src: np.ndarray, ranges: Any,
                       alpha: float = 1.0) -> None:
        lowest, highest = range_bounds(ranges)
        ranges = host_table(ranges)
        if ranges.shape[0] != dst.shape[0] or dst.shape[1] != src.shape[1]:
            raise PynnetError(f"add_row_ranges: {ranges.shape[0]} ranges for "
                              f"{dst.shape[0]} rows, {dst.shape[1]} vs {src.shape[1]} columns")
        if lowest < 0 or highest > src.shape[0]:
            raise PynnetError("add_row_ranges: a range is out of the source's rows")
        if np.may_share_memory(dst, src):
            super().add_row_ranges(dst, src, ranges, alpha)
            return
        self._pick(_add_row_ranges_s, _add_row_ranges_p, dst.size)(dst, src, ranges, F32(alpha))

    # -- compression ---------------------------------------------------------
    def compress(self, mat: np.ndarray, kind: int, range_: float,
                 truncate: bool) -> CompressedMatrix:
        plan = compression_plan(kind, range_)
        codes = np.empty(mat.shape, dtype=plan.int_type)
        self._pick(_compress_s, _compress_p, codes.size)(
            codes, mat, plan.inv_scale, F32(plan.lo), F32(plan.hi), plan.sign_form)
        return CompressedMatrix(codes, plan.scale)

    def decompress(self, compressed: CompressedMatrix, dst: np.ndarray) -> None:
        self._pick(_decompress_s, _decompress_p, dst.size)(dst, compressed.data,
                                                          F32(compressed.scale))

    # -- component math --------------------------------------------------------
    def propagate(self, component: Any, precomputed: Any, in_value: np.ndarray,
                  out_value: np.ndarray) -> Any:
        op = unary_op_of(component, "propagate")
        if op is not None and in_value.shape == out_value.shape:
            self._pick(_unary_s, _unary_p, out_value.size)(out_value, in_value, op)
            return None
        return component.propagate(precomputed, in_value, out_value)

    def backprop(self, component: Any, debug_info: str, precomputed: Any,
                 in_value: np.ndarray, out_value: np.ndarray, out_deriv: np.ndarray, memo: Any,
                 to_update: Any, in_deriv: np.ndarray | None) -> None:
        # With a component to update, the nonlinearities also self-repair and
        # store statistics: that stays in the component.
        op = unary_op_of(component, "backprop")
        if (op is not None and to_update is None and in_deriv is not None
                and in_deriv.shape == out_value.shape == out_deriv.shape):
            self._pick(_unary_backward_s, _unary_backward_p, in_deriv.size)(
                in_deriv, out_value, out_deriv, op)
            return
        component.backprop(debug_info, precomputed, in_value, out_value, out_deriv, memo,
                           to_update, in_deriv)


BACKEND_CLASS = CpuBackend
