"""Kaldi's packed (lower-triangular) matrices: SpMatrix and TpMatrix on disk.

Both are a PackedMatrix (matrix/packed-matrix.cc): the lower triangle stored
row by row, element (i, j) with j <= i at i*(i+1)/2 + j.

* binary: the token ``FP`` (``DP`` for double), an int32 size and the raw
  data;
* text: ``[`` and a newline, then row i's i+1 values each followed by a space
  and ending with a newline (the last row with ``]`` and a newline); a size-0
  matrix is ``[ ]``.  Kaldi also reads the older text form ``FP size v v ...``.

Here a packed matrix is handed around as a full square array whose lower
triangle holds the values (the upper triangle is ignored on writing and
filled by :func:`symmetric_from_lower` where the symmetric matrix is wanted).
"""
from __future__ import annotations

import numpy as np

from .kaldi_io import KaldiReader, KaldiWriter, format_float_array

__all__ = ["read_packed_matrix", "write_packed_matrix", "symmetric_from_lower"]


def _unpack(values: np.ndarray, size: int) -> np.ndarray:
    out = np.zeros((size, size), dtype=np.float64)
    out[np.tril_indices(size)] = values
    return out


def _size_from_count(count: int) -> int:
    """The n with n*(n+1)/2 == count (Kaldi asserts there is one)."""
    n = int((2 * count) ** 0.5)
    return n if n * (n + 1) // 2 == count else -1


def read_packed_matrix(r: KaldiReader) -> np.ndarray:
    """A packed matrix (``FP``/``DP``, binary or text) as a float64 square
    array with the values in its lower triangle.  Text values are parsed in
    double precision, as Kaldi's SpMatrix<double>::Read does."""
    if r.binary:
        tok = r.read_token()
        if tok not in ("FP", "DP"):
            raise r.error(f"expected packed matrix (FP or DP), got {tok[:40]}")
        size = r.read_int32()
        if size < 0:
            raise r.error(f"bad packed matrix size {size}")
        dtype = np.dtype("<f4") if tok == "FP" else np.dtype("<f8")
        count = size * (size + 1) // 2
        nbytes = count * dtype.itemsize
        if r.pos + nbytes > len(r.data):
            raise r.error(f"file truncated inside a packed matrix of size {size}")
        vals = np.frombuffer(r.data, dtype=dtype, count=count, offset=r.pos)
        r.pos += nbytes
        return _unpack(vals.astype(np.float64), size)
    r._skip_ws()
    if r.data[r.pos:r.pos + 2] in (b"FP", b"DP"):
        # The old text form: token, size, values.
        r.read_token()
        size = r.read_int32()
        if size < 0:
            raise r.error(f"bad packed matrix size {size}")
        count = size * (size + 1) // 2
        try:
            vals = np.array([float(r._read_word()) for _ in range(count)], dtype=np.float64)
        except ValueError:
            raise r.error("bad number inside packed matrix") from None
        return _unpack(vals, size)
    start = r.pos
    body = r._read_text_bracketed()
    try:
        vals = np.array(body.split(), dtype=np.float64)
    except ValueError:
        r.pos = start
        raise r.error("bad number inside packed matrix") from None
    size = _size_from_count(len(vals))
    if size < 0:
        r.pos = start
        raise r.error(f"packed matrix with {len(vals)} values (not a triangular number)")
    # Kaldi eats the newline it wrote after ']'.
    if r.data[r.pos:r.pos + 1] == b"\n":
        r.pos += 1
    return _unpack(vals, size)


def write_packed_matrix(w: KaldiWriter, lower: np.ndarray, double: bool = False) -> None:
    """Write the lower triangle of the square array ``lower`` as Kaldi's
    PackedMatrix<float> (``double``: PackedMatrix<double>)."""
    lower = np.asarray(lower)
    size = lower.shape[0]
    if lower.ndim != 2 or lower.shape[1] != size:
        raise ValueError("write_packed_matrix needs a square matrix")
    vals = lower[np.tril_indices(size)].astype(np.float64 if double else np.float32)
    if w.binary:
        w.write_token("DP" if double else "FP")
        w.write_int32(size)
        w.write_raw(np.ascontiguousarray(vals, dtype="<f8" if double else "<f4").tobytes())
        return
    if size == 0:
        w.write_raw("[ ]\n")
        return
    parts = ["[\n"]
    pos = 0
    for i in range(size):
        parts.append(format_float_array(vals[pos:pos + i + 1]) + " ")
        pos += i + 1
        parts.append("]\n" if i == size - 1 else "\n")
    w.write_raw("".join(parts))


def symmetric_from_lower(lower: np.ndarray) -> np.ndarray:
    """The symmetric matrix whose lower triangle is that of ``lower``."""
    low = np.tril(lower)
    return low + np.tril(low, -1).T
