"""Kaldi's GeneralMatrix: a full, compressed or sparse float matrix.

Egs store their features in a GeneralMatrix (matrix/sparse-matrix.h): a full
``FM`` matrix, a lossily compressed one (``CM`` / ``CM2`` / ``CM3``,
matrix/compressed-matrix.cc) or a sparse one (``SM``, rows of ``SV``).

Compressed matrices are kept as their stored integers so that reading and
re-writing is byte-identical, and decompression reproduces Kaldi's float
arithmetic exactly (float32 steps where Kaldi uses float, float64 where the C++
expression promotes to double), so the decompressed values are bit-identical
to Kaldi's.  Compression (``--compress=true``) follows CopyFromMat() step by
step for the same reason.
"""
from __future__ import annotations

import enum
import functools
import struct
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..errors import FormatError
from .kaldi_io import KaldiReader, KaldiWriter, format_float

F32 = np.float32


class CompressionMethod(enum.IntEnum):
    """Kaldi's CompressionMethod enum (same values)."""

    AUTOMATIC = 1
    SPEECH_FEATURE = 2
    TWO_BYTE_AUTO = 3
    TWO_BYTE_SIGNED_INTEGER = 4
    ONE_BYTE_AUTO = 5
    ONE_BYTE_UNSIGNED_INTEGER = 6
    ONE_BYTE_ZERO_ONE = 7


# DataFormat of the stored data: 1 = one byte per element with per-column
# headers ("CM"), 2 = two bytes ("CM2"), 3 = one byte ("CM3").
_FORMAT_TOKENS = {1: "CM", 2: "CM2", 3: "CM3"}
_TOKEN_FORMATS = {v: k for k, v in _FORMAT_TOKENS.items()}
_INV_65535 = F32(1.52590218966964e-05)


def _float_to_uint16(min_value: np.float32, range_: np.float32, values: np.ndarray) -> np.ndarray:
    """FloatToUint16: float32 ratio, clamp, ``int(f * 65535 + 0.499)``."""
    with np.errstate(all="ignore"):
        f = (values.astype(F32) - min_value) / range_
        f = np.clip(f, F32(0.0), F32(1.0))
        return ((f * F32(65535)).astype(np.float64) + 0.499).astype(np.int64)


def _float_to_uint8(min_value: np.float32, range_: np.float32, values: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        f = (values.astype(F32) - min_value) / range_
        f = np.clip(f, F32(0.0), F32(1.0))
        return ((f * F32(255)).astype(np.float64) + 0.499).astype(np.int64)


def _uint16_to_float(min_value: np.float32, range_: np.float32, values: np.ndarray) -> np.ndarray:
    """Uint16ToFloat: ``min + range * (1/65535)F * value``, all in float32."""
    return min_value + (range_ * _INV_65535) * values.astype(F32)


def _char_to_float(p0, p25, p75, p100, values: np.ndarray) -> np.ndarray:
    """CharToFloat for a column (p* broadcast); the ``* (1/64.0)`` promotes to double."""
    v = values.astype(np.int64)
    low = (np.float64(p0) + ((p25 - p0) * v.astype(F32)).astype(np.float64) * (1 / 64.0))
    mid = (np.float64(p25) + ((p75 - p25) * (v - 64).astype(F32)).astype(np.float64) * (1 / 128.0))
    high = (np.float64(p75) + ((p100 - p75) * (v - 192).astype(F32)).astype(np.float64) * (1 / 63.0))
    return np.where(v <= 64, low, np.where(v <= 192, mid, high)).astype(F32)


_INT_MIN = -2.0 ** 31


def _c_int(x: np.ndarray) -> np.ndarray:
    """``static_cast<int>(x)`` of doubles, as x86-64 computes it (``cvttsd2si``,
    where Kaldi's reference outputs were made): truncation toward zero, and
    INT_MIN ("integer indefinite") for NaN and for values outside int's
    range, which C leaves undefined.  As float64."""
    t = np.trunc(x)
    return np.where((t >= _INT_MIN) & (t < 2.0 ** 31), t, _INT_MIN)


def _float_to_char(p0, p25, p75, p100, values: np.ndarray) -> np.ndarray:
    """FloatToChar: three ranges, ``int(f * k + 0.5)`` truncated then clamped.

    Where the percentiles of a column coincide in float (a range tiny next
    to the values: every row alike), a fraction is 0/0 or x/0; Kaldi's int
    cast makes that INT_MIN, which the clamp turns into its range's lowest
    code (192 for the upper range), and so does :func:`_c_int` here."""
    v = values.astype(F32)
    with np.errstate(all="ignore"):
        f0 = (v - p0) / (p25 - p0)
        a0 = np.clip(_c_int((f0 * F32(64)).astype(np.float64) + 0.5), 0, 64)
        f1 = (v - p25) / (p75 - p25)
        a1 = np.clip(64 + _c_int((f1 * F32(128)).astype(np.float64) + 0.5), 64, 192)
        f2 = (v - p75) / (p100 - p75)
        a2 = np.clip(192 + _c_int((f2 * F32(63)).astype(np.float64) + 0.5), 192, 255)
    return np.where(v < p25, a0, np.where(v < p75, a1, a2)).astype(np.uint8)


@dataclass
class CompressedMatrix:
    """Kaldi's CompressedMatrix, holding exactly the integers Kaldi stores.

    ``data`` is, by format: 1 -> uint8 (num_cols, num_rows) (column by column,
    as Kaldi stores it) with ``col_headers`` uint16 (num_cols, 4) holding the
    0/25/75/100 percentiles; 2 -> uint16 (num_rows, num_cols); 3 -> uint8
    (num_rows, num_cols).  An empty matrix has num_rows == 0.
    """

    format: int
    min_value: np.float32
    range: np.float32
    num_rows: int
    num_cols: int
    data: np.ndarray
    col_headers: np.ndarray | None = None

    # -- construction --------------------------------------------------
    @staticmethod
    def empty() -> "CompressedMatrix":
        return CompressedMatrix(1, F32(0), F32(0), 0, 0, np.zeros((0, 0), np.uint8))

    @staticmethod
    def from_matrix(mat: np.ndarray,
                    method: CompressionMethod = CompressionMethod.AUTOMATIC) -> "CompressedMatrix":
        """Kaldi's CopyFromMat (lossy compression)."""
        mat = np.asarray(mat, dtype=F32)
        num_rows, num_cols = mat.shape
        if num_rows == 0:
            return CompressedMatrix.empty()
        if method == CompressionMethod.AUTOMATIC:
            method = (CompressionMethod.SPEECH_FEATURE if num_rows > 8
                      else CompressionMethod.TWO_BYTE_AUTO)
        if method == CompressionMethod.SPEECH_FEATURE:
            fmt = 1
        elif method in (CompressionMethod.TWO_BYTE_AUTO, CompressionMethod.TWO_BYTE_SIGNED_INTEGER):
            fmt = 2
        elif method in (CompressionMethod.ONE_BYTE_AUTO, CompressionMethod.ONE_BYTE_UNSIGNED_INTEGER,
                        CompressionMethod.ONE_BYTE_ZERO_ONE):
            fmt = 3
        else:
            raise ValueError(f"invalid compression method {method}")
        if method in (CompressionMethod.SPEECH_FEATURE, CompressionMethod.TWO_BYTE_AUTO,
                      CompressionMethod.ONE_BYTE_AUTO):
            mins, ranges = _global_headers(np.array([mat.min()], dtype=F32),
                                           np.array([mat.max()], dtype=F32))
            min_value, range_ = mins[0], ranges[0]
        elif method == CompressionMethod.TWO_BYTE_SIGNED_INTEGER:
            min_value, range_ = F32(-32768.0), F32(65535.0)
        elif method == CompressionMethod.ONE_BYTE_UNSIGNED_INTEGER:
            min_value, range_ = F32(0.0), F32(255.0)
        else:
            min_value, range_ = F32(0.0), F32(1.0)

        if fmt == 1:
            headers = _compute_col_headers(min_value, range_, mat)
            p = [_uint16_to_float(min_value, range_, headers[:, k])[:, None] for k in range(4)]
            data = _float_to_char(p[0], p[1], p[2], p[3], mat.T)
            return CompressedMatrix(1, min_value, range_, num_rows, num_cols,
                                    np.ascontiguousarray(data), headers)
        if fmt == 2:
            data = _float_to_uint16(min_value, range_, mat).astype(np.uint16)
        else:
            data = _float_to_uint8(min_value, range_, mat).astype(np.uint8)
        return CompressedMatrix(fmt, min_value, range_, num_rows, num_cols, data)

    @staticmethod
    def from_matrices(mats: np.ndarray) -> list["CompressedMatrix"]:
        """:meth:`from_matrix` with the automatic method for each matrix of a
        stack (B x rows x cols, e.g. the input chunks of an utterance's egs),
        computed for all of them at once: the same arithmetic element by
        element, with each matrix's minimum, range and column headers
        broadcast, so the same bytes as one at a time."""
        mats = np.asarray(mats, dtype=F32)
        count, num_rows, num_cols = mats.shape
        if count == 0 or num_rows == 0 or num_cols == 0:
            return [CompressedMatrix.from_matrix(m) for m in mats]
        flat = mats.reshape(count, -1)
        mins, ranges = _global_headers(flat.min(axis=1), flat.max(axis=1))
        mn, rg = mins[:, None, None], ranges[:, None, None]
        if num_rows > 8:                                       # SPEECH_FEATURE
            headers = _compute_col_headers(mins[:, None], ranges[:, None], mats, axis=1)
            p = [_uint16_to_float(mn, rg, headers[:, :, k:k + 1]) for k in range(4)]
            data = _float_to_char(p[0], p[1], p[2], p[3], mats.transpose(0, 2, 1))
            return [CompressedMatrix(1, mins[b], ranges[b], num_rows, num_cols,
                                     np.ascontiguousarray(data[b]), headers[b])
                    for b in range(count)]
        data = _float_to_uint16(mn, rg, mats).astype(np.uint16)   # TWO_BYTE_AUTO
        return [CompressedMatrix(2, mins[b], ranges[b], num_rows, num_cols, data[b])
                for b in range(count)]

    # -- decompression -------------------------------------------------
    def to_matrix(self) -> np.ndarray:
        """Kaldi's CopyToMat: float32, bit-identical to Kaldi's decompression."""
        if self.num_rows == 0:
            return np.zeros((0, 0), dtype=F32)
        if self.format == 1:
            h = self.col_headers
            p = [_uint16_to_float(self.min_value, self.range, h[:, k])[:, None] for k in range(4)]
            return np.ascontiguousarray(_char_to_float(p[0], p[1], p[2], p[3], self.data).T)
        scale = (1.0 / 65535.0) if self.format == 2 else (1.0 / 255.0)
        increment = F32(np.float64(self.range) * scale)
        return self.min_value + self.data.astype(F32) * increment

    # -- operations ----------------------------------------------------
    def scale(self, alpha: float) -> None:
        self.min_value = F32(self.min_value * F32(alpha))
        self.range = F32(self.range * F32(alpha))

    def row_range(self, row_offset: int, num_rows: int, allow_padding: bool = False) -> "CompressedMatrix":
        """Kaldi's sub-matrix constructor (rows only): copies the stored integers.

        With ``allow_padding`` rows outside the matrix repeat the first/last
        row.  A one-byte-with-headers result of fewer than 8 rows is
        re-compressed as two-byte, as Kaldi does.
        """
        if self.num_rows == 0:
            if num_rows != 0:
                raise FormatError("cannot extract rows from an empty compressed matrix")
            return CompressedMatrix.empty()
        if num_rows == 0:
            return CompressedMatrix.empty()
        if not allow_padding and (row_offset < 0 or row_offset + num_rows > self.num_rows):
            raise FormatError(f"row range {row_offset}+{num_rows} outside {self.num_rows} rows")
        rows = np.clip(np.arange(row_offset, row_offset + num_rows), 0, self.num_rows - 1)
        if self.format == 1:
            out = CompressedMatrix(1, self.min_value, self.range, num_rows, self.num_cols,
                                   np.ascontiguousarray(self.data[:, rows]), self.col_headers.copy())
            if num_rows < 8:
                return CompressedMatrix.from_matrix(out.to_matrix(), CompressionMethod.TWO_BYTE_AUTO)
            return out
        return CompressedMatrix(self.format, self.min_value, self.range, num_rows, self.num_cols,
                                np.ascontiguousarray(self.data[rows]))

    # -- I/O -----------------------------------------------------------
    @staticmethod
    def read_binary(r: KaldiReader) -> "CompressedMatrix":
        tok = r.read_token()
        if tok not in _TOKEN_FORMATS:
            raise r.error(f"unexpected token {tok}, expecting CM, CM2 or CM3")
        fmt = _TOKEN_FORMATS[tok]
        if r.pos + 16 > len(r.data):
            raise r.error("unexpected end of file in compressed-matrix header")
        min_value, range_, num_rows, num_cols = struct.unpack_from("<ffii", r.data, r.pos)
        r.pos += 16
        min_value, range_ = F32(min_value), F32(range_)
        if num_cols == 0:
            return CompressedMatrix.empty()
        if num_rows < 0 or num_cols < 0:
            raise r.error(f"bad compressed-matrix size {num_rows} x {num_cols}")
        headers = None
        if fmt == 1:
            nbytes = num_cols * (8 + num_rows)
            if r.pos + nbytes > len(r.data):
                raise r.error("file truncated inside a compressed matrix")
            headers = np.frombuffer(r.data, "<u2", 4 * num_cols, r.pos).astype(np.uint16).reshape(num_cols, 4)
            data = np.frombuffer(r.data, np.uint8, num_rows * num_cols, r.pos + 8 * num_cols)
            data = data.copy().reshape(num_cols, num_rows)
        elif fmt == 2:
            nbytes = 2 * num_rows * num_cols
            if r.pos + nbytes > len(r.data):
                raise r.error("file truncated inside a compressed matrix")
            data = np.frombuffer(r.data, "<u2", num_rows * num_cols, r.pos).astype(np.uint16)
            data = data.reshape(num_rows, num_cols)
        else:
            nbytes = num_rows * num_cols
            if r.pos + nbytes > len(r.data):
                raise r.error("file truncated inside a compressed matrix")
            data = np.frombuffer(r.data, np.uint8, nbytes, r.pos).copy().reshape(num_rows, num_cols)
        r.pos += nbytes
        return CompressedMatrix(fmt, min_value, range_, num_rows, num_cols, data, headers)

    def write(self, w: KaldiWriter) -> None:
        if not w.binary:
            w.write_matrix(self.to_matrix())
            return
        if self.num_rows == 0:
            w.write_token("CM")
            w.write_raw(struct.pack("<ffii", 0.0, 0.0, 0, 0))
            return
        w.write_token(_FORMAT_TOKENS[self.format])
        w.write_raw(struct.pack("<ffii", float(self.min_value), float(self.range),
                                self.num_rows, self.num_cols))
        if self.format == 1:
            w.write_raw(self.col_headers.astype("<u2").tobytes())
            w.write_raw(self.data.astype(np.uint8).tobytes())
        elif self.format == 2:
            w.write_raw(self.data.astype("<u2").tobytes())
        else:
            w.write_raw(self.data.astype(np.uint8).tobytes())


def _global_headers(mins: np.ndarray, maxs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ComputeGlobalHeader's (min, range) of matrices with these float32
    minima and maxima: a constant matrix gets max = min + (1 + |min|) (C++:
    float + double -> double, stored back into a float); NaN or Inf is
    refused."""
    same = maxs == mins
    if same.any():
        m64 = mins[same].astype(np.float64)
        maxs = maxs.copy()
        maxs[same] = (m64 + (1.0 + np.abs(m64))).astype(F32)
    if not (np.isfinite(mins).all() and np.isfinite(maxs).all()):
        raise FormatError("cannot compress a matrix with NaN's or Inf's")
    return mins, maxs - mins                                  # float32


def _compute_col_headers(min_value: Any, range_: Any, mat: np.ndarray,
                         axis: int = 0) -> np.ndarray:
    """ComputeColHeader for every column at once: percentiles as uint16 codes
    (num_cols x 4).  ``axis`` 1: for a stack of matrices (B x rows x cols,
    ``min_value`` and ``range_`` B x 1), B x num_cols x 4."""
    num_rows, num_cols = mat.shape[axis], mat.shape[axis + 1]
    s = np.sort(mat, axis=axis)  # Kaldi's nth_element picks exactly these order statistics
    code = lambda row: _float_to_uint16(min_value, range_, s[(slice(None),) * axis + (row,)])
    out = np.zeros(mat.shape[:axis] + (num_cols, 4), dtype=np.int64)
    if num_rows >= 5:
        q = num_rows // 4
        p0 = np.minimum(code(0), 65532)
        p25 = np.minimum(np.maximum(code(q), p0 + 1), 65533)
        p75 = np.minimum(np.maximum(code(3 * q), p25 + 1), 65534)
        p100 = np.maximum(code(num_rows - 1), p75 + 1)
    else:
        p0 = np.minimum(code(0), 65532)
        p25 = np.minimum(np.maximum(code(1), p0 + 1), 65533) if num_rows > 1 else p0 + 1
        p75 = np.minimum(np.maximum(code(2), p25 + 1), 65534) if num_rows > 2 else p25 + 1
        p100 = np.maximum(code(3), p75 + 1) if num_rows > 3 else p75 + 1
    out[..., 0], out[..., 1], out[..., 2], out[..., 3] = p0, p25, p75, p100
    return out.astype(np.uint16)


# ---------------------------------------------------------------------------
# (int32, float) pairs as Kaldi's WriteBasicType writes them: 04 iiii 04 ffff

PAIR_DTYPE = np.dtype([("s1", "u1"), ("i", "<i4"), ("s2", "u1"), ("v", "<f4")])


def pack_pairs(indices: np.ndarray, values: np.ndarray) -> bytes:
    """All pairs, 10 bytes each (callers slice this per row/frame)."""
    pairs = np.empty(len(indices), dtype=PAIR_DTYPE)
    pairs["s1"], pairs["s2"] = 4, 4
    pairs["i"], pairs["v"] = indices, values
    return pairs.tobytes()


def gather_pairs(r: KaldiReader, starts: list[int], counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of several runs (run k: ``counts[k]`` pairs from byte ``starts[k]``) at once."""
    total = sum(counts)
    if total == 0:
        return np.zeros(0, np.int32), np.zeros(0, F32)
    first = np.repeat(np.asarray(starts, np.int64) - 10 * np.cumsum([0] + counts[:-1]), counts)
    offsets = first + 10 * np.arange(total)
    raw = np.frombuffer(r.data, np.uint8)
    recs = raw[offsets[:, None] + np.arange(10)].reshape(-1).view(PAIR_DTYPE)
    if np.any(recs["s1"] != 4) or np.any(recs["s2"] != 4):
        raise r.error("bad integer/float size byte inside (index, value) pairs")
    return recs["i"].astype(np.int32), recs["v"].astype(F32)


# ---------------------------------------------------------------------------
# Sparse matrices


@dataclass
class SparseMatrix:
    """Kaldi's SparseMatrix<float> in CSR form.

    Row ``r`` holds ``indices[indptr[r]:indptr[r+1]]`` (strictly increasing
    column indexes) and the matching ``values``; every row has dimension
    ``num_cols`` (Kaldi's SparseVector::Dim()).
    """

    num_cols: int
    indptr: np.ndarray                      # int64, num_rows + 1
    indices: np.ndarray                     # int32
    values: np.ndarray                      # float32

    @property
    def num_rows(self) -> int:
        return len(self.indptr) - 1

    @staticmethod
    def from_pairs(dim: int, rows: Sequence[Sequence[tuple[int, float]]]) -> "SparseMatrix":
        """Kaldi's SparseMatrix(dim, pairs): each row's pairs sorted by index,
        duplicates summed (float32) and zeros dropped (SparseVector's constructor)."""
        indptr = [0]
        indices: list[int] = []
        values: list[np.float32] = []
        for row in rows:
            merged: dict[int, np.float32] = {}
            for i, p in sorted(row, key=lambda ip: ip[0]):
                i = int(i)
                if i in merged:
                    merged[i] = F32(merged[i] + F32(p))
                else:
                    merged[i] = F32(p)
            for i, p in merged.items():
                if p != 0.0:
                    if i < 0 or i >= dim:
                        raise FormatError(f"sparse-vector index {i} out of range [0, {dim})")
                    indices.append(i)
                    values.append(p)
            indptr.append(len(indices))
        return SparseMatrix(dim, np.array(indptr, np.int64), np.array(indices, np.int32),
                            np.array(values, F32))

    @staticmethod
    def from_dense(mat: np.ndarray) -> "SparseMatrix":
        mat = np.asarray(mat, dtype=F32)
        nz = mat != 0
        indptr = np.concatenate([[0], np.cumsum(nz.sum(axis=1))]).astype(np.int64)
        rows, cols = np.nonzero(nz)
        return SparseMatrix(mat.shape[1], indptr, cols.astype(np.int32), mat[rows, cols])

    def to_matrix(self) -> np.ndarray:
        out = np.zeros((self.num_rows, self.num_cols), dtype=F32)
        rows = np.repeat(np.arange(self.num_rows), np.diff(self.indptr))
        out[rows, self.indices] = self.values
        return out

    def row(self, r: int) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.indptr[r], self.indptr[r + 1]
        return self.indices[a:b], self.values[a:b]

    def take_rows(self, rows: np.ndarray) -> "SparseMatrix":
        """A new matrix made of the given rows (in order, repeats allowed)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.indptr[rows], self.indptr[rows + 1]
        lengths = ends - starts
        indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        if len(rows) and lengths.sum():
            pos = np.repeat(starts - indptr[:-1], lengths) + np.arange(indptr[-1])
        else:
            pos = np.zeros(0, dtype=np.int64)
        return SparseMatrix(self.num_cols, indptr, self.indices[pos], self.values[pos])

    def scale(self, alpha: float) -> None:
        self.values = (self.values * F32(alpha)).astype(F32)

    @staticmethod
    def append_rows(mats: Sequence["SparseMatrix"]) -> "SparseMatrix":
        """Kaldi's AppendSparseMatrixRows (all rows must have the same dim)."""
        mats = [m for m in mats if m.num_rows > 0]
        if not mats:
            return SparseMatrix(0, np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, F32))
        num_cols = mats[0].num_cols
        for m in mats:
            if m.num_cols != num_cols:
                raise FormatError(f"appending rows with inconsistent dimensions, "
                                  f"{m.num_cols} vs. {num_cols}")
        offsets = np.cumsum([0] + [m.indptr[-1] for m in mats[:-1]])
        indptr = np.concatenate([[0]] + [m.indptr[1:] + o for m, o in zip(mats, offsets)])
        return SparseMatrix(num_cols, indptr.astype(np.int64),
                            np.concatenate([m.indices for m in mats]),
                            np.concatenate([m.values for m in mats]))

    # -- I/O -----------------------------------------------------------
    @staticmethod
    def read(r: KaldiReader) -> "SparseMatrix":
        return _read_sparse_binary(r) if r.binary else _read_sparse_text(r)

    def write(self, w: KaldiWriter) -> None:
        n = self.num_rows
        if w.binary:
            w.write_token("SM")
            w.write_int32(n)
            head = b"SV \x04" + struct.pack("<i", self.num_cols) + b"\x04"
            data = pack_pairs(self.indices, self.values)
            ptr = self.indptr.tolist()
            w.write_raw(b"".join(head + struct.pack("<i", ptr[r + 1] - ptr[r])
                                 + data[10 * ptr[r]:10 * ptr[r + 1]] for r in range(n)))
            return
        parts = [f"rows={n} "]
        dim = f"dim={self.num_cols} [ "
        ind, val = self.indices.tolist(), self.values.tolist()
        for r in range(n):
            a, b = int(self.indptr[r]), int(self.indptr[r + 1])
            parts.append(dim + "".join(f"{ind[k]} {format_float(val[k])} " for k in range(a, b)) + "] ")
        parts.append("\n")
        w.write_raw("".join(parts))


@functools.lru_cache(maxsize=64)     # (bounded: the count comes from the file)
def _sparse_rows_dtype(count: int) -> np.dtype:
    """A binary sparse row of ``count`` pairs: "SV " 04 dim 04 count, pairs."""
    fields = [("tag", "S3"), ("s1", "u1"), ("dim", "<i4"), ("s2", "u1"), ("n", "<i4")]
    if count:
        fields.append(("pairs", PAIR_DTYPE, (count,)))
    return np.dtype(fields)


def _read_sparse_rows_uniform(r: KaldiReader, num_rows: int) -> SparseMatrix | None:
    """The rows at once when all have the count of the first (posteriors with
    one pdf per frame, one-hot targets); None (nothing consumed) otherwise,
    or where anything is out of the ordinary, so that the row-by-row reader
    below reads them and reports any damage."""
    data, pos = r.data, r.pos
    if num_rows == 0 or data[pos:pos + 4] != b"SV \x04" or pos + 13 > len(data):
        return None
    dim, count = struct.unpack_from("<ixi", data, pos + 4)
    if dim < 0 or count < 0 or count > dim:
        return None
    dt = _sparse_rows_dtype(count)
    if pos + dt.itemsize * num_rows > len(data):
        return None
    rows = np.frombuffer(data, dtype=dt, count=num_rows, offset=pos)
    if not ((rows["tag"] == b"SV ").all() and (rows["s1"] == 4).all()
            and (rows["s2"] == 4).all() and (rows["dim"] == dim).all()
            and (rows["n"] == count).all()):
        return None
    if count:
        pairs = rows["pairs"].reshape(-1)
        if np.any(pairs["s1"] != 4) or np.any(pairs["s2"] != 4):
            return None
        indices, values = pairs["i"].astype(np.int32), pairs["v"].astype(F32)
    else:
        indices, values = np.zeros(0, np.int32), np.zeros(0, F32)
    r.pos = pos + dt.itemsize * num_rows
    return SparseMatrix(dim, np.arange(num_rows + 1, dtype=np.int64) * count, indices, values)


def _read_sparse_binary(r: KaldiReader) -> SparseMatrix:
    r.expect_token("SM")
    num_rows = r.read_int32()
    if num_rows < 0 or num_rows >= 10000000:
        raise r.error(f"bad sparse-matrix row count {num_rows}")
    uniform = _read_sparse_rows_uniform(r, num_rows)
    if uniform is not None:
        return uniform
    starts: list[int] = []
    counts: list[int] = []
    num_cols = None
    data = r.data
    for _ in range(num_rows):
        # "SV " 04 dim 04 count, then count pairs.
        if data[r.pos:r.pos + 3] == b"SV " and data[r.pos + 3:r.pos + 4] == b"\x04" \
                and data[r.pos + 8:r.pos + 9] == b"\x04" and r.pos + 13 <= len(data):
            dim, num_elems = struct.unpack_from("<ixi", data, r.pos + 4)
            r.pos += 13
        else:
            r.expect_token("SV")
            dim = r.read_int32()
            num_elems = r.read_int32()
        if dim < 0 or num_elems < 0 or num_elems > dim:
            raise r.error(f"bad sparse vector: dim={dim}, {num_elems} elements")
        if num_cols is None:
            num_cols = dim
        elif dim != num_cols:
            raise r.error(f"sparse-matrix rows of different dims ({dim} vs {num_cols})")
        if r.pos + 10 * num_elems > len(data):
            raise r.error("file truncated inside a sparse vector")
        starts.append(r.pos)
        counts.append(num_elems)
        r.pos += 10 * num_elems
    indices, values = gather_pairs(r, starts, counts)
    return SparseMatrix(num_cols or 0, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                        indices, values)


def _read_sparse_text(r: KaldiReader) -> SparseMatrix:
    word = r._read_word()
    if not word.startswith(b"rows="):
        raise r.error(f"reading sparse matrix, expected 'rows=xxx', got {word[:40]!r}")
    try:
        num_rows = int(word[5:])
    except ValueError:
        num_rows = -1
    if num_rows < 0:
        raise r.error(f"reading sparse matrix, expected 'rows=[int]', got {word[:40]!r}")
    indptr = [0]
    indices: list[int] = []
    values: list[float] = []
    num_cols = None
    for _ in range(num_rows):
        word = r._read_word()
        if not word.startswith(b"dim="):
            raise r.error(f"reading sparse vector, expected 'dim=xxx', got {word[:40]!r}")
        try:
            dim = int(word[4:])
        except ValueError:
            dim = -1
        if dim < 0:
            raise r.error(f"reading sparse vector, expected 'dim=[int]', got {word[:40]!r}")
        if num_cols is None:
            num_cols = dim
        elif dim != num_cols:
            raise r.error(f"sparse-matrix rows of different dims ({dim} vs {num_cols})")
        if r._read_word() != b"[":
            raise r.error("reading sparse vector, expected '['")
        end = r.data.find(b"]", r.pos)
        if end < 0:
            raise r.error("unterminated sparse vector")
        body = r.data[r.pos:end].split()
        r.pos = end + 1
        if len(body) % 2:
            raise r.error("error reading sparse vector, expecting pairs of numbers")
        try:
            idx = [int(x) for x in body[0::2]]
            val = [float(x) for x in body[1::2]]
        except ValueError:
            raise r.error("error reading sparse vector, expecting numbers") from None
        for k, i in enumerate(idx):
            if i < 0 or i >= dim or (k > 0 and i <= idx[k - 1]):
                raise r.error(f"bad sparse-vector index {i} (dim {dim})")
        indices += idx
        values += val
        indptr.append(len(indices))
    return SparseMatrix(num_cols or 0, np.array(indptr, np.int64), np.array(indices, np.int32),
                        np.array(values, np.float64).astype(F32))


# ---------------------------------------------------------------------------
# GeneralMatrix


class MatrixType(enum.Enum):
    FULL = "full"
    COMPRESSED = "compressed"
    SPARSE = "sparse"


@dataclass
class GeneralMatrix:
    """One of a full float32 matrix, a CompressedMatrix or a SparseMatrix.

    As in Kaldi, a matrix with no rows counts as an (empty) full matrix.
    """

    value: np.ndarray | CompressedMatrix | SparseMatrix = field(
        default_factory=lambda: np.zeros((0, 0), dtype=F32))

    def __post_init__(self) -> None:
        if isinstance(self.value, np.ndarray):
            v = np.asarray(self.value, dtype=F32)
            if v.ndim != 2:
                raise ValueError("GeneralMatrix needs a 2-d matrix")
            self.value = np.ascontiguousarray(v)
        if self.num_rows == 0 and not isinstance(self.value, np.ndarray):
            self.value = np.zeros((0, 0), dtype=F32)

    @property
    def type(self) -> MatrixType:
        if isinstance(self.value, SparseMatrix):
            return MatrixType.SPARSE
        if isinstance(self.value, CompressedMatrix):
            return MatrixType.COMPRESSED
        return MatrixType.FULL

    @property
    def num_rows(self) -> int:
        v = self.value
        return v.shape[0] if isinstance(v, np.ndarray) else v.num_rows

    @property
    def num_cols(self) -> int:
        v = self.value
        return v.shape[1] if isinstance(v, np.ndarray) else v.num_cols

    def to_matrix(self) -> np.ndarray:
        """Kaldi's GetMatrix(): the values as a full float32 matrix."""
        v = self.value
        return v if isinstance(v, np.ndarray) else v.to_matrix()

    def compress(self, method: CompressionMethod = CompressionMethod.AUTOMATIC) -> None:
        """Compress a non-empty full matrix (sparse/compressed ones are left alone)."""
        if isinstance(self.value, np.ndarray) and self.value.shape[0] != 0:
            self.value = CompressedMatrix.from_matrix(self.value, method)

    @staticmethod
    def compress_all(matrices: "Sequence[GeneralMatrix]") -> None:
        """:meth:`compress` (automatic method) of each, the full matrices of
        one shape compressed together (:meth:`CompressedMatrix.from_matrices`)."""
        groups: dict[tuple[int, ...], list[GeneralMatrix]] = {}
        for g in matrices:
            v = g.value
            if isinstance(v, np.ndarray) and v.shape[0] != 0:
                groups.setdefault(v.shape, []).append(g)
        for members in groups.values():
            if len(members) == 1:
                members[0].compress()
                continue
            stack = np.stack([np.asarray(g.value, dtype=F32) for g in members])
            for g, cm in zip(members, CompressedMatrix.from_matrices(stack)):
                g.value = cm

    def uncompress(self) -> None:
        if isinstance(self.value, CompressedMatrix):
            self.value = self.value.to_matrix()

    def scale(self, alpha: float) -> None:
        v = self.value
        if isinstance(v, np.ndarray):
            self.value = (v * F32(alpha)).astype(F32)
        else:
            v.scale(alpha)

    def copy(self) -> "GeneralMatrix":
        import copy

        return copy.deepcopy(self)

    # -- I/O -----------------------------------------------------------
    @staticmethod
    def read(r: KaldiReader) -> "GeneralMatrix":
        """Kaldi's GeneralMatrix::Read: the type follows the stored token."""
        if r.binary:
            c = r.data[r.pos:r.pos + 1]
            if c == b"C":
                return GeneralMatrix(CompressedMatrix.read_binary(r))
            if c == b"S":
                return GeneralMatrix(SparseMatrix.read(r))
            return GeneralMatrix(r.read_matrix())
        r._skip_ws()
        if r.data[r.pos:r.pos + 1] == b"r":
            return GeneralMatrix(SparseMatrix.read(r))
        return GeneralMatrix(r.read_matrix())

    def write(self, w: KaldiWriter) -> None:
        v = self.value
        if isinstance(v, np.ndarray):
            if v.shape[0] == 0 or v.shape[1] == 0:
                v = np.zeros((0, 0), dtype=F32)
            w.write_matrix(v)
        else:
            v.write(w)


def append_general_matrix_rows(mats: Sequence[GeneralMatrix]) -> GeneralMatrix:
    """Kaldi's AppendGeneralMatrixRows: sparse if all are sparse, else full."""
    if not mats:
        return GeneralMatrix()
    if all(m.type == MatrixType.SPARSE or m.num_rows == 0 for m in mats):
        return GeneralMatrix(SparseMatrix.append_rows([m.value for m in mats if m.num_rows]))
    num_cols = -1
    parts = []
    for m in mats:
        if m.num_rows == 0:
            continue
        if num_cols == -1:
            num_cols = m.num_cols
        elif m.num_cols != num_cols:
            raise FormatError(f"appending rows of matrices with inconsistent num-cols: "
                              f"{num_cols} vs. {m.num_cols}")
        parts.append(m.to_matrix())
    return GeneralMatrix(np.concatenate(parts, axis=0) if parts else np.zeros((0, 0), F32))


def filter_general_matrix_rows(m: GeneralMatrix, keep: np.ndarray) -> GeneralMatrix:
    """Kaldi's FilterGeneralMatrixRows: keep the rows where ``keep`` is true.

    Keeping every row returns the matrix unchanged; otherwise a compressed
    matrix becomes a full one, sparse stays sparse.
    """
    keep = np.asarray(keep, dtype=bool)
    if keep.shape[0] != m.num_rows:
        raise ValueError("filter_general_matrix_rows: keep has the wrong length")
    if not keep.any():
        raise FormatError("no kept rows")
    if keep.all():
        return m.copy()
    if m.type == MatrixType.SPARSE:
        return GeneralMatrix(m.value.take_rows(np.nonzero(keep)[0]))
    return GeneralMatrix(m.to_matrix()[keep])


def extract_row_range_with_padding(m: GeneralMatrix, row_offset: int, num_rows: int) -> GeneralMatrix:
    """Kaldi's ExtractRowRangeWithPadding: rows outside the matrix repeat the
    first/last row; compressed matrices stay compressed (no re-quantisation)."""
    if num_rows == 0:
        return GeneralMatrix()
    if m.num_rows == 0:
        raise FormatError("cannot extract rows from an empty matrix")
    if m.type == MatrixType.COMPRESSED:
        return GeneralMatrix(m.value.row_range(row_offset, num_rows, allow_padding=True))
    rows = np.clip(np.arange(row_offset, row_offset + num_rows), 0, m.num_rows - 1)
    if m.type == MatrixType.SPARSE:
        return GeneralMatrix(m.value.take_rows(rows))
    return GeneralMatrix(m.value[rows])
