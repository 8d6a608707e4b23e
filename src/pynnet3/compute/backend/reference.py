"""The reference backend: every matrix and row operation in plain NumPy.

This module is the definition the Numba CPU and CUDA backends are tested
against, so it favours clarity and exactness over speed (row operations are
still vectorised: they run on training-sized computations too).

Where Kaldi's CPU and GPU code differ in a corner case, the comment says
which one is followed.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...compile.computation import CompressedMatrixType
from ...errors import PynnetError

F32 = np.float32

# (numpy type, smallest, largest) per compressed-matrix type.
_COMPRESSED_TYPES: dict[CompressedMatrixType, tuple[type, int, int]] = {
    CompressedMatrixType.INT8: (np.int8, -128, 127),
    CompressedMatrixType.UINT8: (np.uint8, 0, 255),
    CompressedMatrixType.INT16: (np.int16, -32768, 32767),
    CompressedMatrixType.UINT16: (np.uint16, 0, 65535),
}


class CompressionPlan(NamedTuple):
    """How a matrix is compressed to one of Kaldi's CuCompressedMatrix types:
    codes of ``int_type`` in [lo, hi]; code = x * inv_scale rounded, or, in
    the range-0 ``sign_form`` (uint8 only), code = (x > 0); ``scale`` maps
    codes back to values."""

    int_type: type
    lo: int
    hi: int
    scale: np.float32
    inv_scale: np.float32
    sign_form: bool


def compression_plan(kind: int, range_: float) -> CompressionPlan:
    """The :class:`CompressionPlan` of Kaldi's CuCompressedMatrix<I>
    (scale = range / max(I)); every backend compresses by it."""
    kind = CompressedMatrixType(kind)
    int_type, lo, hi = _COMPRESSED_TYPES[kind]
    scale = F32(F32(range_) / F32(hi))
    sign_form = bool(scale == 0.0)
    if sign_form and kind is not CompressedMatrixType.UINT8:
        raise PynnetError(f"compression with range 0 is only implemented for uint8, "
                          f"not {kind.name.lower()}")
    if sign_form:
        return CompressionPlan(int_type, lo, hi, F32(1.0), F32(0.0), True)
    return CompressionPlan(int_type, lo, hi, scale, F32(1.0 / float(scale)), False)


class CompressedMatrix:
    """What :meth:`ReferenceBackend.compress` returns: the integer codes and
    the scale that maps them back (Kaldi's CuCompressedMatrix<I>)."""

    __slots__ = ("data", "scale")

    def __init__(self, data: np.ndarray, scale: np.float32):
        self.data = data
        self.scale = scale

    @property
    def shape(self) -> tuple[int, int]:
        return self.data.shape  # type: ignore[return-value]


def _group_by_array(which: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """[(array position, positions in the table that refer to it)], -1 left out."""
    order = np.argsort(which, kind="stable")
    sorted_which = which[order]
    start = int(np.searchsorted(sorted_which, 0))
    if start == sorted_which.shape[0]:
        return []
    values, firsts = np.unique(sorted_which[start:], return_index=True)
    ends = np.append(firsts[1:], sorted_which.shape[0] - start)
    return [(int(v), order[start + b:start + e]) for v, b, e in zip(values, firsts, ends)]


class ReferenceBackend:
    """Matrices are NumPy float32 arrays; submatrices are slices of them."""

    name = "reference"

    def __init__(self) -> None:
        self._empty = np.zeros((0, 0), dtype=F32)

    # -- memory ----------------------------------------------------------
    def alloc(self, num_rows: int, num_cols: int, fill: float = 0.0) -> np.ndarray:
        # A matrix with every element ``fill`` (the computer uses
        # alloc_undefined, as Kaldi allocates, or NaN to expose reads of
        # values never written).
        if fill == 0.0:
            return np.zeros((num_rows, num_cols), dtype=F32)
        return np.full((num_rows, num_cols), fill, dtype=F32)

    def alloc_undefined(self, num_rows: int, num_cols: int) -> np.ndarray:
        """A new matrix whose elements are whatever the memory held (Kaldi's
        kUndefined): for matrices the computation writes before reading."""
        return np.empty((num_rows, num_cols), dtype=F32)

    def empty_matrix(self) -> np.ndarray:
        return self._empty

    def view(self, mat: np.ndarray, row_offset: int, num_rows: int, col_offset: int,
             num_cols: int) -> np.ndarray:
        return mat[row_offset:row_offset + num_rows, col_offset:col_offset + num_cols]

    def from_host(self, host: Any) -> np.ndarray:
        return np.array(host, dtype=F32, order="C", copy=True)

    def take_host(self, host: Any) -> np.ndarray:
        """``host`` itself when it can serve as a backend matrix (C-contiguous,
        writable float32 that owns its memory), else a copy: for arrays the
        caller hands over and no longer uses (Kaldi's AcceptInput swaps the
        matrix in, which spares the 8 MB output-derivative copy of a
        minibatch of 1024 x 2000)."""
        if (isinstance(host, np.ndarray) and host.dtype == F32 and host.ndim == 2
                and host.flags.c_contiguous and host.flags.writeable and host.flags.owndata):
            return host
        return self.from_host(host)

    def to_host(self, mat: np.ndarray) -> np.ndarray:
        return mat

    def prepare_indexes(self, table: Any) -> np.ndarray:
        return np.ascontiguousarray(table, dtype=np.int32)

    # -- whole-matrix operations ---------------------------------------------
    def set_const(self, dst: np.ndarray, value: float) -> None:
        dst[...] = F32(value)

    def scale(self, dst: np.ndarray, alpha: float) -> None:
        dst *= F32(alpha)

    def copy(self, dst: np.ndarray, src: np.ndarray, alpha: float = 1.0) -> None:
        if alpha == 1.0:
            dst[...] = src
        else:
            np.multiply(src, F32(alpha), out=dst)

    def add(self, dst: np.ndarray, src: np.ndarray, alpha: float = 1.0) -> None:
        if alpha == 1.0:
            dst += src
        else:
            dst += F32(alpha) * src

    # -- row operations ------------------------------------------------------
    def copy_rows(self, dst: np.ndarray, src: np.ndarray, indexes: np.ndarray,
                  alpha: float = 1.0) -> None:
        # Kaldi (CPU and GPU): a row whose index is -1 is set to zero.
        if (alpha == 1.0 and dst.flags.c_contiguous and indexes.shape[0]
                and dst.shape[0] == indexes.shape[0] and dst.shape[1] == src.shape[1]
                and 0 <= indexes.min() and indexes.max() < src.shape[0]):
            # Gathered straight into dst: one pass, no temporary (twice as
            # fast as src[indexes] and a copy; for a strided dst, a column
            # range, NumPy's take is slower than the two passes).  The
            # bounds are checked above, so 'clip' (which spares take its
            # own buffered checks) never clips.
            np.take(src, indexes, axis=0, out=dst, mode="clip")
            return
        valid = indexes >= 0
        if valid.all():
            rows = src[indexes]
        else:
            rows = np.zeros((indexes.shape[0], src.shape[1]), dtype=F32)
            rows[valid] = src[indexes[valid]]
        if alpha != 1.0:
            rows *= F32(alpha)
        dst[...] = rows

    def add_rows(self, dst: np.ndarray, src: np.ndarray, indexes: np.ndarray,
                 alpha: float = 1.0) -> None:
        valid = indexes >= 0
        if valid.all():
            rows = src[indexes]
            if alpha != 1.0:
                rows *= F32(alpha)
            dst += rows
            return
        sel = np.nonzero(valid)[0]
        rows = src[indexes[sel]]
        if alpha != 1.0:
            rows *= F32(alpha)
        dst[sel] += rows

    def copy_rows_multi(self, dst: np.ndarray, arrays: list[np.ndarray], pairs: np.ndarray,
                        alpha: float = 1.0) -> None:
        # Kaldi: a NULL source pointer sets the row to zero.
        out = np.zeros(dst.shape, dtype=F32)
        rows = pairs[:, 1]
        for p, sel in _group_by_array(pairs[:, 0]):
            out[sel] = arrays[p][rows[sel]]
        if alpha != 1.0:
            out *= F32(alpha)
        dst[...] = out

    def copy_to_rows_multi(self, src: np.ndarray, arrays: list[np.ndarray],
                           pairs: np.ndarray) -> None:
        rows = pairs[:, 1]
        for p, sel in _group_by_array(pairs[:, 0]):
            arrays[p][rows[sel]] = src[sel]

    def add_rows_multi(self, dst: np.ndarray, arrays: list[np.ndarray], pairs: np.ndarray,
                       alpha: float = 1.0) -> None:
        rows = pairs[:, 1]
        for p, sel in _group_by_array(pairs[:, 0]):
            part = arrays[p][rows[sel]]
            if alpha != 1.0:
                part *= F32(alpha)
            dst[sel] += part

    def add_to_rows_multi(self, src: np.ndarray, arrays: list[np.ndarray], pairs: np.ndarray,
                          alpha: float = 1.0) -> None:
        rows = pairs[:, 1]
        for p, sel in _group_by_array(pairs[:, 0]):
            part = src[sel]
            if alpha != 1.0:
                part = part * F32(alpha)
            # add.at: correct even if two rows of src go to the same place
            # (Kaldi forbids that, but a wrong computation should not be
            # silently different on different backends).
            np.add.at(arrays[p], rows[sel], part)

    def add_row_ranges(self, dst: np.ndarray, src: np.ndarray, ranges: np.ndarray,
                       alpha: float = 1.0) -> None:
        # Kaldi's AddRowRanges: dst[r] += sum of src rows begin..end-1; an
        # empty range (Kaldi writes (-1, -1)) adds nothing.  Sums are taken
        # in float64 (Kaldi sums in float; the difference is rounding only).
        begin, end = ranges[:, 0], ranges[:, 1]
        sel = np.nonzero(end > begin)[0]
        if sel.size == 0:
            return
        cums = np.zeros((src.shape[0] + 1, src.shape[1]), dtype=np.float64)
        np.cumsum(src, axis=0, dtype=np.float64, out=cums[1:])
        sums = cums[end[sel]] - cums[begin[sel]]
        if alpha != 1.0:
            sums *= float(F32(alpha))
        dst[sel] += sums.astype(F32)

    # -- compression ---------------------------------------------------------
    def compress(self, mat: np.ndarray, kind: int, range_: float,
                 truncate: bool) -> CompressedMatrix:
        """Kaldi's CuCompressedMatrix<I>::CopyFromMat (a GPU-only class).

        scale = range / max(I); code = round_half_even(x / scale) clamped to
        I's range.  range 0 is the 'sign' form (uint8 only): code = (x > 0),
        read back as 0 or 1.  Kaldi's NewCuCompressedMatrix never passes its
        ``truncate`` argument on, so codes are always clamped; we do the same.
        """
        plan = compression_plan(kind, range_)
        if plan.sign_form:
            return CompressedMatrix((mat > 0).astype(np.uint8), plan.scale)
        scaled = np.rint(mat * plan.inv_scale)        # float32 product, round half to even
        scaled = np.nan_to_num(scaled, nan=0.0)
        codes = np.clip(scaled, plan.lo, plan.hi).astype(plan.int_type)
        return CompressedMatrix(codes, plan.scale)

    def decompress(self, compressed: CompressedMatrix, dst: np.ndarray) -> None:
        np.multiply(compressed.data.astype(F32), compressed.scale, out=dst)

    # -- component math --------------------------------------------------------
    def propagate(self, component: Any, precomputed: Any, in_value: np.ndarray,
                  out_value: np.ndarray) -> Any:
        return component.propagate(precomputed, in_value, out_value)

    def backprop(self, component: Any, debug_info: str, precomputed: Any,
                 in_value: np.ndarray, out_value: np.ndarray, out_deriv: np.ndarray, memo: Any,
                 to_update: Any, in_deriv: np.ndarray | None) -> None:
        component.backprop(debug_info, precomputed, in_value, out_value, out_deriv, memo,
                           to_update, in_deriv)

    def store_stats(self, component: Any, in_value: np.ndarray, out_value: np.ndarray,
                    memo: Any) -> None:
        component.store_stats(in_value, out_value, memo)

    # -- diagnostics -------------------------------------------------------
    def stddev(self, mat: np.ndarray) -> float:
        if mat.size == 0:
            return 0.0
        m = mat.astype(np.float64)
        return float(np.sqrt(np.vdot(m, m) / m.size))


BACKEND_CLASS = ReferenceBackend
