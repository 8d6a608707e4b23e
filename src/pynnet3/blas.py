"""Float32 matrix products that accumulate in place, as Kaldi's CPU code does
(CuMatrixBase::AddMatMat, AddMatVec, TraceMatMat).

``c += alpha * (a @ b)`` in NumPy makes a temporary of c's size, a scaling
pass and an add pass, and rounds twice; BLAS sgemm with ``beta`` writes
``alpha op(a) op(b) + beta c`` straight into ``c``.  The training hot paths
(affine backprop and updates, natural-gradient preconditioning) are mostly
such products; in place they are a few percent faster on the large ones and
up to 25% on the skinny natural-gradient ones, and round as Kaldi's do.

The routine is the sgemm of the OpenBLAS that NumPy itself is linked with
(NumPy's wheels bundle one, with 64-bit integers and SciPy's symbol names),
found among the loaded libraries and called through ctypes: no second BLAS
is loaded, so the process has one BLAS thread pool (held to the thread
budget by :mod:`pynnet3.threads`) and saves SciPy's import (about 30 MB of
resident memory and 0.2-0.6 s at start-up).  Where NumPy's BLAS does not
export it, the LP64 sgemm of SciPy's BLAS (its Cython table of function
pointers, the same one Numba uses) serves.  Operands may be
any 2-d float32 views with unit stride along one axis - a transposed view or
a column range of a wider matrix is passed with its leading dimension, as
Kaldi passes a sub-matrix, without a copy.  SciPy (a dependency) is imported
on the first product, so that binaries which never multiply matrices do not
pay for it; should it be missing, the products fall back to NumPy (the same
values up to float32 rounding).

TraceMatMat sums float32 row dot products in double: as accurate as the
float64 copies it replaces, at a tenth of the cost on large matrices.
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable

import numpy as np

__all__ = ["add_mat_mat", "trace_mat_mat_t", "have_blas"]

F32 = np.float32
_ITEM = 4               # bytes per float32

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_float_p = ctypes.POINTER(ctypes.c_float)


def _blas_function(name: str, proto: Any) -> Callable[..., Any] | None:
    """SciPy's Cython BLAS routine ``name`` as a ctypes function, or None."""
    try:
        from scipy.linalg import cython_blas
    except ImportError:
        return None
    capsule = cython_blas.__pyx_capi__[name]
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype = ctypes.c_char_p
    get_name.argtypes = [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return proto(get_pointer(capsule, get_name(capsule)))


# Fortran convention: every argument by reference.
_SGEMM_PROTO = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_char_p, _c_int_p, _c_int_p, _c_int_p, _c_float_p,
    ctypes.c_void_p, _c_int_p, ctypes.c_void_p, _c_int_p, _c_float_p, ctypes.c_void_p,
    _c_int_p)
_sgemm: Callable[..., Any] | None = None
_looked_up = False
_INT: Any = ctypes.c_int        # the BLAS's integer type (c_int64 for ILP64 builds)

# Fortran sgemm symbols of OpenBLAS builds, with their integer type.
_NUMPY_SGEMMS = (("scipy_sgemm_64_", ctypes.c_int64), ("sgemm_64_", ctypes.c_int64))


def _numpy_sgemm() -> tuple[Callable[..., Any], Any] | None:
    """(sgemm, integer type) of the BLAS NumPy is linked with, or None."""
    from .threads import _loaded_library_paths

    for path in _loaded_library_paths():
        if "numpy" not in path:
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name, int_type in _NUMPY_SGEMMS:
            fn = getattr(lib, name, None)
            if fn is None:
                continue
            p = ctypes.POINTER(int_type)
            proto = ctypes.CFUNCTYPE(
                None, ctypes.c_char_p, ctypes.c_char_p, p, p, p, _c_float_p, ctypes.c_void_p,
                p, ctypes.c_void_p, p, _c_float_p, ctypes.c_void_p, p)
            return proto(ctypes.cast(fn, ctypes.c_void_p).value), int_type
    return None


def _get_sgemm() -> Callable[..., Any] | None:
    # Looked up on first use (SciPy, where it serves, is imported then).
    global _sgemm, _looked_up, _INT
    if not _looked_up:
        found = _numpy_sgemm()
        if found is not None:
            _sgemm, _INT = found
        else:
            _sgemm, _INT = _blas_function("sgemm", _SGEMM_PROTO), ctypes.c_int
        _looked_up = True
    return _sgemm


def have_blas() -> bool:
    """Whether the in-place sgemm is available (else NumPy is used)."""
    return _get_sgemm() is not None


def _column_major(v: np.ndarray) -> tuple[bytes, int] | None:
    """(trans flag, leading dimension) under which BLAS reads the logical
    matrix ``v`` from its memory, or None if its strides do not allow it."""
    rows, cols = v.shape
    s0, s1 = v.strides
    if rows == 1 or s0 == _ITEM:                 # unit stride down a column
        ld = s1 // _ITEM if cols > 1 else max(rows, 1)
        if cols == 1 or (s1 > 0 and s1 % _ITEM == 0 and ld >= rows):
            return b"N", ld
    if cols == 1 or s1 == _ITEM:                 # unit stride along a row
        ld = s0 // _ITEM if rows > 1 else max(cols, 1)
        if rows == 1 or (s0 > 0 and s0 % _ITEM == 0 and ld >= cols):
            return b"T", ld
    return None


def _operand(v: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, bytes, int]:
    layout = None if np.may_share_memory(v, c) else _column_major(v)
    if layout is None:          # odd strides, or aliasing the output: copy
        v = np.array(v, dtype=F32, order="F", copy=True)
        layout = _column_major(v)
    return v, layout[0], layout[1]


def add_mat_mat(alpha: float, a: np.ndarray, b: np.ndarray, beta: float,
                c: np.ndarray) -> None:
    """``c = alpha * a @ b + beta * c`` in place (Kaldi's AddMatMat; pass
    ``x.T`` for a transposed operand).  With all three float32 this is one
    sgemm, and ``c`` must have unit stride along one axis; other dtypes go
    through NumPy.  ``beta == 0`` ignores the old contents of c (NaN
    included), as BLAS does."""
    m, n = c.shape
    k = a.shape[1]
    if a.shape[0] != m or b.shape != (k, n):
        raise ValueError(f"add_mat_mat: shapes {a.shape} x {b.shape} -> {c.shape}")
    if m == 0 or n == 0:
        return
    sgemm = _sgemm if _looked_up else _get_sgemm()
    if sgemm is None or k == 0 or not (c.dtype == a.dtype == b.dtype == F32):
        # (tests run components in float64; NumPy serves any dtype)
        _add_mat_mat_numpy(alpha, a, b, beta, c)
        return
    layout = _column_major(c)
    if layout is None:
        raise ValueError("add_mat_mat: the output needs unit stride along one axis")
    # BLAS is column-major: a row-major c is the column-major c^T, and
    # c^T = alpha b^T a^T + beta c^T.
    if layout[0] == b"N":
        left, right, target = a, b, c
    else:
        left, right, target = b.T, a.T, c.T
    ldc = _column_major(target)[1]        # column-major ("N") by construction
    left, trans_l, lda = _operand(left, c)
    right, trans_r, ldb = _operand(right, c)
    byref, c_int = ctypes.byref, _INT
    sgemm(trans_l, trans_r, byref(c_int(target.shape[0])), byref(c_int(target.shape[1])),
          byref(c_int(k)), byref(ctypes.c_float(alpha)), left.ctypes.data, byref(c_int(lda)),
          right.ctypes.data, byref(c_int(ldb)), byref(ctypes.c_float(beta)),
          target.ctypes.data, byref(c_int(ldc)))


def _add_mat_mat_numpy(alpha: float, a: np.ndarray, b: np.ndarray, beta: float,
                       c: np.ndarray) -> None:
    prod = a @ b
    if alpha != 1.0:
        prod *= prod.dtype.type(alpha)
    if beta == 0.0:
        c[...] = prod
    else:
        if beta != 1.0:
            c *= c.dtype.type(beta)
        c += prod


def trace_mat_mat_t(x: np.ndarray, y: Any = None) -> float:
    """tr(x y^T) = the sum of the elementwise products (Kaldi's
    TraceMatMat(x, y, kTrans)); ``y`` defaults to ``x``.

    Kaldi adds up float dot products of the rows; here each row's float32
    dot product is summed in double, which is at least as accurate and
    reads the matrices once (no float64 copies)."""
    y = x if y is None else y
    if x.shape != y.shape:
        raise ValueError(f"trace_mat_mat_t: shapes {x.shape} vs {y.shape}")
    if x.ndim == 1:
        x, y = x[None, :], y[None, :]
    return float(np.einsum("ij,ij->i", x, y).sum(dtype=np.float64))
