"""The CUDA backend: matrices are Numba device arrays (submatrices are their
slices) and every row, matrix and compression operation is a
``@numba.cuda.jit`` kernel.

* Host <-> device copies happen only here: :meth:`CudaBackend.from_host`
  (inputs), :meth:`CudaBackend.to_host` (outputs, diagnostics) and the
  fallback below.
* Element math is shared with the CPU kernels through the ``@njit`` helpers
  of :mod:`.elementwise` (Numba compiles them again as device functions).
* Matrix products: CuPy's cuBLAS when ``cupy`` imports, else a tiled
  shared-memory GEMM kernel (:func:`_k_gemm`).
* Component math on the device: sigmoid / tanh / ReLU (forward, and
  backward when no model update is involved) and the products of Affine,
  NaturalGradientAffine, FixedAffine and Linear components (propagate, and
  the input derivative when no model update is involved).  Every other
  component, and every update, runs its NumPy code on host copies of its
  operands, whose written operand is copied back (correct, not fast).
* Multi row operations are split per source/destination array once per
  index table (:mod:`.tables`), one kernel launch per array.  Rows of a group
  run in parallel unless a destination row repeats (Kaldi forbids that in
  the to-rows commands); such a group runs its rows in table order, so the
  result is the reference's, deterministically.

As with Kaldi's kernels, the matrix an operation writes must not partially
overlap one it reads (the same submatrix, as in Kaldi's in-place
nonlinearities and self-scaling copies, is fine); the cpu backend, which
falls back to the reference there, is the one to use for such experiments.

Under the CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``, used by the tests)
everything runs in Python; blocks are made small there because the
simulator starts one Python thread per CUDA thread.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numba import cuda, float32, float64
from numba.core import config as _numba_config

from ...errors import PynnetError
from . import elementwise as ew
from .cpu import unary_op_of
from .reference import CompressedMatrix, compression_plan
from .tables import IndexTable, host_table, range_bounds, table_plan
from ...numba_cache import ensure_numba_cache

ensure_numba_cache()  # (before the kernels below are decorated with cache=True)

F32 = np.float32

SIMULATOR = bool(getattr(_numba_config, "ENABLE_CUDASIM", 0))
# threads per block (x over columns, y over rows) of the elementwise kernels
_BLOCK = (8, 4) if SIMULATOR else (32, 8)
# side of the square tiles of the fallback GEMM (a compile-time constant)
TILE = 4 if SIMULATOR else 16
_MAX_GRID = 65535


def cuda_unavailable_reason() -> str | None:
    """Why the CUDA backend cannot run here, or None when it can."""
    try:
        if not cuda.is_available():
            return "no CUDA GPU detected (numba.cuda.is_available() is false)"
    except Exception as e:  # noqa: BLE001 (driver errors come in many types)
        return f"CUDA driver error: {e}"
    return None


# ---------------------------------------------------------------------------
# kernels.  2-D kernels cover columns with x and rows with y, looping with
# the grid's stride so that any grid size is correct.


@cuda.jit(cache=True)
def _k_fill(dst, value):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        for c in range(c0, dst.shape[1], sc):
            dst[r, c] = value


@cuda.jit(cache=True)
def _k_scale(dst, alpha):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        for c in range(c0, dst.shape[1], sc):
            dst[r, c] *= alpha


@cuda.jit(cache=True)
def _k_copy(dst, src, alpha):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        for c in range(c0, dst.shape[1], sc):
            dst[r, c] = alpha * src[r, c]


@cuda.jit(cache=True)
def _k_add(dst, src, alpha):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        for c in range(c0, dst.shape[1], sc):
            dst[r, c] += alpha * src[r, c]


@cuda.jit(cache=True)
def _k_add_vec_to_rows(dst, vec):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        for c in range(c0, dst.shape[1], sc):
            dst[r, c] += vec[c]


@cuda.jit(cache=True)
def _k_copy_rows(dst, src, indexes, alpha):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        i = indexes[r]
        for c in range(c0, dst.shape[1], sc):
            if i >= 0:
                dst[r, c] = alpha * src[i, c]
            else:
                dst[r, c] = 0.0


@cuda.jit(cache=True)
def _k_add_rows(dst, src, indexes, alpha):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        i = indexes[r]
        if i >= 0:
            for c in range(c0, dst.shape[1], sc):
                dst[r, c] += alpha * src[i, c]


@cuda.jit(cache=True)
def _k_copy_mapped(dst, dst_rows, src, src_rows, alpha):
    """dst[dst_rows[k]] = alpha * src[src_rows[k]]."""
    c0, k0 = cuda.grid(2)
    sc, sk = cuda.gridsize(2)
    for k in range(k0, dst_rows.shape[0], sk):
        d = dst_rows[k]
        s = src_rows[k]
        for c in range(c0, dst.shape[1], sc):
            dst[d, c] = alpha * src[s, c]


@cuda.jit(cache=True)
def _k_add_mapped(dst, dst_rows, src, src_rows, alpha):
    """dst[dst_rows[k]] += alpha * src[src_rows[k]]."""
    c0, k0 = cuda.grid(2)
    sc, sk = cuda.gridsize(2)
    for k in range(k0, dst_rows.shape[0], sk):
        d = dst_rows[k]
        s = src_rows[k]
        for c in range(c0, dst.shape[1], sc):
            dst[d, c] += alpha * src[s, c]


@cuda.jit(cache=True)
def _k_zero_rows(dst, rows):
    c0, k0 = cuda.grid(2)
    sc, sk = cuda.gridsize(2)
    for k in range(k0, rows.shape[0], sk):
        for c in range(c0, dst.shape[1], sc):
            dst[rows[k], c] = 0.0


@cuda.jit(cache=True)
def _k_add_row_ranges(dst, src, ranges, alpha):
    """dst[r] += alpha * sum(src[begin:end]) (summed in double)."""
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    a = float64(alpha)
    for r in range(r0, dst.shape[0], sr):
        begin = ranges[r, 0]
        end = ranges[r, 1]
        if end > begin:
            for c in range(c0, dst.shape[1], sc):
                acc = float64(0.0)
                for k in range(begin, end):
                    acc += src[k, c]
                dst[r, c] += float32(acc * a)


@cuda.jit(cache=True)
def _k_compress(codes, src, inv_scale, lo, hi, sign_form):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, src.shape[0], sr):
        for c in range(c0, src.shape[1], sc):
            codes[r, c] = int(ew.code_of(src[r, c], inv_scale, lo, hi, sign_form))


@cuda.jit(cache=True)
def _k_decompress(dst, codes, scale):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, dst.shape[0], sr):
        for c in range(c0, dst.shape[1], sc):
            dst[r, c] = float32(codes[r, c]) * scale


@cuda.jit(cache=True)
def _k_unary(out, x, op):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, out.shape[0], sr):
        for c in range(c0, out.shape[1], sc):
            out[r, c] = ew.unary_forward(x[r, c], op)


@cuda.jit(cache=True)
def _k_unary_backward(in_deriv, y, d, op):
    c0, r0 = cuda.grid(2)
    sc, sr = cuda.gridsize(2)
    for r in range(r0, in_deriv.shape[0], sr):
        for c in range(c0, in_deriv.shape[1], sc):
            in_deriv[r, c] = ew.unary_backward(y[r, c], d[r, c], op)


@cuda.jit(cache=True)
def _k_gemm(c, a, b, trans_b, alpha, beta):
    """c = beta * c + alpha * a @ op(b), op(b) = b.T if trans_b else b.

    Classic shared-memory tiling: each block computes a TILE x TILE tile of
    c, walking the shared dimension one tile at a time.  beta == 0 does not
    read c (BLAS semantics: c may hold NaN)."""
    sa = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    sb = cuda.shared.array(shape=(TILE, TILE), dtype=float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    j = cuda.blockIdx.x * TILE + tx
    i = cuda.blockIdx.y * TILE + ty
    m = c.shape[0]
    n = c.shape[1]
    kdim = a.shape[1]
    acc = float32(0.0)
    for t in range((kdim + TILE - 1) // TILE):
        ka = t * TILE + tx
        if i < m and ka < kdim:
            sa[ty, tx] = a[i, ka]
        else:
            sa[ty, tx] = 0.0
        kb = t * TILE + ty
        if j < n and kb < kdim:
            if trans_b:
                sb[ty, tx] = b[j, kb]
            else:
                sb[ty, tx] = b[kb, j]
        else:
            sb[ty, tx] = 0.0
        cuda.syncthreads()
        for kk in range(TILE):
            acc += sa[ty, kk] * sb[kk, tx]
        cuda.syncthreads()
    if i < m and j < n:
        if beta == float32(0.0):
            c[i, j] = alpha * acc
        else:
            c[i, j] = beta * c[i, j] + alpha * acc


# ---------------------------------------------------------------------------
# launch helpers


def _grid(rows: int, cols: int, serial_rows: bool = False) -> tuple[tuple[int, int],
                                                                   tuple[int, int]]:
    """(blocks, threads) covering rows x cols; ``serial_rows``: one thread
    per column walks every row in order."""
    bx, by = _BLOCK
    gx = min(max((cols + bx - 1) // bx, 1), _MAX_GRID)
    if serial_rows:
        return (gx, 1), (bx, 1)
    gy = min(max((rows + by - 1) // by, 1), _MAX_GRID)
    return (gx, gy), (bx, by)


def _launch(kernel: Any, rows: int, cols: int, *args: Any, serial_rows: bool = False) -> None:
    if rows == 0 or cols == 0:
        return
    blocks, threads = _grid(rows, cols, serial_rows)
    kernel[blocks, threads](*args)


def _try_cupy() -> Any:
    try:
        import cupy  # noqa: PLC0415 (optional dependency)
    except Exception:  # noqa: BLE001 (ImportError or a CUDA library error)
        return None
    return cupy


class _DeviceIndexes:
    """A prepared row-index vector: the host copy (for bounds checks) and
    the device copy.  (``[n, 2]`` tables are prepared as IndexTable, whose
    ``device`` dict holds the device ranges table or multi groups.)"""

    __slots__ = ("host", "vector")

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.vector = cuda.to_device(host)


class CudaBackend:
    """Matrices are ``numba.cuda`` device arrays; see the module docstring.

    ``use_cupy``: None uses CuPy's cuBLAS when it imports; False always
    uses the Numba GEMM kernel."""

    name = "cuda"

    def __init__(self, use_cupy: bool | None = None) -> None:
        reason = cuda_unavailable_reason()
        if reason is not None:
            raise PynnetError(f"the cuda compute backend cannot run: {reason}")
        self._cupy = _try_cupy() if use_cupy in (None, True) else None
        if use_cupy and self._cupy is None:
            raise PynnetError("use_cupy=True but cupy cannot be imported")
        self._empty = cuda.device_array((0, 0), dtype=F32)

    # -- memory ----------------------------------------------------------
    def alloc(self, num_rows: int, num_cols: int, fill: float = 0.0) -> Any:
        mat = cuda.device_array((num_rows, num_cols), dtype=F32)
        _launch(_k_fill, num_rows, num_cols, mat, F32(fill))
        return mat

    def alloc_undefined(self, num_rows: int, num_cols: int) -> Any:
        """A matrix left as the allocator gives it (Kaldi's kUndefined)."""
        return cuda.device_array((num_rows, num_cols), dtype=F32)

    def empty_matrix(self) -> Any:
        return self._empty

    def view(self, mat: Any, row_offset: int, num_rows: int, col_offset: int,
             num_cols: int) -> Any:
        return mat[row_offset:row_offset + num_rows, col_offset:col_offset + num_cols]

    def from_host(self, host: Any) -> Any:
        return cuda.to_device(np.ascontiguousarray(host, dtype=F32))

    def take_host(self, host: Any) -> Any:
        return self.from_host(host)        # (a transfer either way)

    def to_host(self, mat: Any) -> np.ndarray:
        if mat.size == 0:
            return np.zeros(mat.shape, dtype=F32)
        if not mat.is_c_contiguous():
            # Copy the strided view into a contiguous buffer on the device
            # first: one transfer of exactly the view's elements.
            tmp = cuda.device_array(mat.shape, dtype=F32)
            _launch(_k_copy, mat.shape[0], mat.shape[1], tmp, mat, F32(1.0))
            mat = tmp
        return mat.copy_to_host()

    def _write_back(self, dst: Any, host: np.ndarray) -> None:
        """Copy the host array ``host`` into the device matrix/view ``dst``."""
        if dst.size == 0:
            return
        tmp = cuda.to_device(np.ascontiguousarray(host, dtype=F32))
        _launch(_k_copy, dst.shape[0], dst.shape[1], dst, tmp, F32(1.0))

    def prepare_indexes(self, table: Any) -> Any:
        array = np.asarray(table)
        if array.ndim == 2:
            return IndexTable(array)
        return _DeviceIndexes(np.ascontiguousarray(array, dtype=np.int32))

    def _vector(self, indexes: Any) -> Any:
        if isinstance(indexes, _DeviceIndexes):
            return indexes.host, indexes.vector
        host = np.ascontiguousarray(indexes, dtype=np.int32)
        return host, cuda.to_device(host)

    def _ranges(self, ranges: Any) -> tuple[np.ndarray, Any]:
        if isinstance(ranges, IndexTable):
            if "ranges" not in ranges.device:
                ranges.device["ranges"] = cuda.to_device(ranges.array)
            return ranges.array, ranges.device["ranges"]
        host = host_table(ranges)
        return host, cuda.to_device(host)

    def _groups(self, what: str, one: Any, arrays: list[Any], pairs: Any
                ) -> tuple[list[tuple[int, Any, Any, bool, int]], Any, int]:
        """[(array, positions, rows, serial, count)] on the device, the
        (-1, -1) positions and their count; checks the table against the
        operands first (device kernels do not check bounds)."""
        cached = pairs.device.get("groups") if isinstance(pairs, IndexTable) else None
        if cached is None:
            plan = table_plan(pairs)
            groups = [(g.array, cuda.to_device(g.positions), cuda.to_device(g.rows),
                       g.has_duplicate_rows, int(g.positions.shape[0])) for g in plan.groups]
            n_none = int(plan.none_positions.shape[0])
            none = cuda.to_device(plan.none_positions) if n_none else None
            limits = [(g.array, g.max_row) for g in plan.groups]
            cached = (groups, none, n_none, limits)
            if isinstance(pairs, IndexTable):
                pairs.device["groups"] = cached
        groups, none, n_none, limits = cached
        if sum(g[4] for g in groups) + n_none != one.shape[0]:
            raise PynnetError(f"{what}: {sum(g[4] for g in groups) + n_none} pairs for "
                              f"{one.shape[0]} rows")
        for p, max_row in limits:
            if (p >= len(arrays) or arrays[p].shape[1] != one.shape[1]
                    or max_row >= arrays[p].shape[0]):
                raise PynnetError(f"{what}: array {p}, row or column out of range")
        return groups, none, n_none

    # -- whole-matrix operations ---------------------------------------------
    def set_const(self, dst: Any, value: float) -> None:
        _launch(_k_fill, dst.shape[0], dst.shape[1], dst, F32(value))

    def scale(self, dst: Any, alpha: float) -> None:
        _launch(_k_scale, dst.shape[0], dst.shape[1], dst, F32(alpha))

    def copy(self, dst: Any, src: Any, alpha: float = 1.0) -> None:
        _check_same_shape("copy", dst, src)
        _launch(_k_copy, dst.shape[0], dst.shape[1], dst, src, F32(alpha))

    def add(self, dst: Any, src: Any, alpha: float = 1.0) -> None:
        _check_same_shape("add", dst, src)
        _launch(_k_add, dst.shape[0], dst.shape[1], dst, src, F32(alpha))

    # -- row operations ------------------------------------------------------
    def copy_rows(self, dst: Any, src: Any, indexes: Any, alpha: float = 1.0) -> None:
        host, vec = self._vector(indexes)
        _check_rows("copy_rows", dst, src, host)
        _launch(_k_copy_rows, dst.shape[0], dst.shape[1], dst, src, vec, F32(alpha))

    def add_rows(self, dst: Any, src: Any, indexes: Any, alpha: float = 1.0) -> None:
        host, vec = self._vector(indexes)
        _check_rows("add_rows", dst, src, host)
        _launch(_k_add_rows, dst.shape[0], dst.shape[1], dst, src, vec, F32(alpha))

    def copy_rows_multi(self, dst: Any, arrays: list[Any], pairs: Any,
                        alpha: float = 1.0) -> None:
        groups, none, n_none = self._groups("copy_rows_multi", dst, arrays, pairs)
        a = F32(alpha)
        for p, positions, rows, _, count in groups:
            _launch(_k_copy_mapped, count, dst.shape[1], dst, positions, arrays[p], rows, a)
        if n_none:
            _launch(_k_zero_rows, n_none, dst.shape[1], dst, none)

    def copy_to_rows_multi(self, src: Any, arrays: list[Any], pairs: Any) -> None:
        groups, _, _ = self._groups("copy_to_rows_multi", src, arrays, pairs)
        one = F32(1.0)
        for p, positions, rows, serial, count in groups:
            _launch(_k_copy_mapped, count, src.shape[1], arrays[p], rows, src, positions, one,
                    serial_rows=serial)

    def add_rows_multi(self, dst: Any, arrays: list[Any], pairs: Any,
                       alpha: float = 1.0) -> None:
        groups, _, _ = self._groups("add_rows_multi", dst, arrays, pairs)
        a = F32(alpha)
        for p, positions, rows, _, count in groups:
            _launch(_k_add_mapped, count, dst.shape[1], dst, positions, arrays[p], rows, a)

    def add_to_rows_multi(self, src: Any, arrays: list[Any], pairs: Any,
                          alpha: float = 1.0) -> None:
        groups, _, _ = self._groups("add_to_rows_multi", src, arrays, pairs)
        a = F32(alpha)
        for p, positions, rows, serial, count in groups:
            _launch(_k_add_mapped, count, src.shape[1], arrays[p], rows, src, positions, a,
                    serial_rows=serial)

    def add_row_ranges(self, dst: Any, src: Any, ranges: Any, alpha: float = 1.0) -> None:
        host, dev = self._ranges(ranges)
        if host.shape[0] != dst.shape[0] or dst.shape[1] != src.shape[1]:
            raise PynnetError(f"add_row_ranges: {host.shape[0]} ranges for {dst.shape[0]} "
                              f"rows, {dst.shape[1]} vs {src.shape[1]} columns")
        lowest, highest = range_bounds(ranges)
        if lowest < 0 or highest > src.shape[0]:
            raise PynnetError("add_row_ranges: a range is out of the source's rows")
        _launch(_k_add_row_ranges, dst.shape[0], dst.shape[1], dst, src, dev, F32(alpha))

    # -- compression ---------------------------------------------------------
    def compress(self, mat: Any, kind: int, range_: float, truncate: bool) -> CompressedMatrix:
        plan = compression_plan(kind, range_)
        codes = cuda.device_array(mat.shape, dtype=plan.int_type)
        _launch(_k_compress, mat.shape[0], mat.shape[1], codes, mat, plan.inv_scale,
                F32(plan.lo), F32(plan.hi), plan.sign_form)
        return CompressedMatrix(codes, plan.scale)

    def decompress(self, compressed: CompressedMatrix, dst: Any) -> None:
        _launch(_k_decompress, dst.shape[0], dst.shape[1], dst, compressed.data,
                F32(compressed.scale))

    # -- matrix product ------------------------------------------------------
    def gemm(self, c: Any, a: Any, b: Any, trans_b: bool = False, alpha: float = 1.0,
             beta: float = 0.0) -> None:
        """``c = beta * c + alpha * a @ (b.T if trans_b else b)`` on the device."""
        k_b = b.shape[1] if trans_b else b.shape[0]
        n_b = b.shape[0] if trans_b else b.shape[1]
        if a.shape[0] != c.shape[0] or a.shape[1] != k_b or n_b != c.shape[1]:
            raise PynnetError(f"gemm: shapes {c.shape} = {a.shape} x "
                              f"{b.shape}{'^T' if trans_b else ''} do not match")
        if c.size == 0:
            return
        if a.shape[1] == 0:          # empty product: only the scaling of c
            if beta == 0.0:
                self.set_const(c, 0.0)
            elif beta != 1.0:
                self.scale(c, beta)
            return
        if self._cupy is not None:
            cp = self._cupy
            cc, ca, cb = cp.asarray(c), cp.asarray(a), cp.asarray(b)
            prod = cp.matmul(ca, cb.T if trans_b else cb)
            if alpha != 1.0:
                prod *= F32(alpha)
            if beta == 0.0:
                cc[...] = prod
            else:
                if beta != 1.0:
                    cc *= F32(beta)
                cc += prod
            return
        m, n = c.shape
        blocks = ((n + TILE - 1) // TILE, (m + TILE - 1) // TILE)
        if blocks[1] > _MAX_GRID:
            raise PynnetError(f"gemm: {m} rows is too many for one launch")
        _k_gemm[blocks, (TILE, TILE)](c, a, b, bool(trans_b), F32(alpha), F32(beta))

    # -- component math --------------------------------------------------------
    def propagate(self, component: Any, precomputed: Any, in_value: Any, out_value: Any) -> Any:
        op = unary_op_of(component, "propagate")
        if op is not None and in_value.shape == out_value.shape:
            _launch(_k_unary, out_value.shape[0], out_value.shape[1], out_value, in_value, op)
            return None
        product = _product_params(component, "propagate")
        if product is not None and in_value.shape[0] == out_value.shape[0]:
            weights, bias = product
            if bias is not None:
                # out = bias (each row), then out += in W^T
                self.set_const(out_value, 0.0)
                if bias.size:
                    _launch(_k_add_vec_to_rows, out_value.shape[0], out_value.shape[1],
                            out_value, cuda.to_device(np.ascontiguousarray(bias, F32)))
            self.gemm(out_value, in_value, cuda.to_device(np.ascontiguousarray(weights, F32)),
                      trans_b=True, beta=1.0)
            return None
        # Host fallback: the component's NumPy code on copies; only the
        # output is written back (the input is read-only to propagate).
        host_in = self.to_host(in_value)
        host_out = self.to_host(out_value)
        memo = component.propagate(precomputed, host_in, host_out)
        self._write_back(out_value, host_out)
        return memo

    def backprop(self, component: Any, debug_info: str, precomputed: Any, in_value: Any,
                 out_value: Any, out_deriv: Any, memo: Any, to_update: Any,
                 in_deriv: Any) -> None:
        if to_update is None and in_deriv is not None:
            op = unary_op_of(component, "backprop")
            if op is not None and in_deriv.shape == out_value.shape == out_deriv.shape:
                _launch(_k_unary_backward, in_deriv.shape[0], in_deriv.shape[1], in_deriv,
                        out_value, out_deriv, op)
                return
            product = _product_params(component, "backprop")
            if product is not None:
                # in_deriv += out_deriv W
                weights = cuda.to_device(np.ascontiguousarray(product[0], F32))
                self.gemm(in_deriv, out_deriv, weights, trans_b=False, beta=1.0)
                return
        host = [None if m is None else self.to_host(m)
                for m in (in_value, out_value, out_deriv, in_deriv)]
        component.backprop(debug_info, precomputed, host[0], host[1], host[2], memo,
                           to_update, host[3])
        if in_deriv is not None:
            self._write_back(in_deriv, host[3])

    def store_stats(self, component: Any, in_value: Any, out_value: Any, memo: Any) -> None:
        component.store_stats(self.to_host(in_value), self.to_host(out_value), memo)

    # -- diagnostics -------------------------------------------------------
    def stddev(self, mat: Any) -> float:
        if mat.size == 0:
            return 0.0
        m = self.to_host(mat).astype(np.float64)
        return float(np.sqrt(np.vdot(m, m) / m.size))


# ---------------------------------------------------------------------------
# helpers


def _check_same_shape(what: str, dst: Any, src: Any) -> None:
    if tuple(dst.shape) != tuple(src.shape):
        raise PynnetError(f"{what}: shapes {tuple(dst.shape)} and {tuple(src.shape)} differ")


def _check_rows(what: str, dst: Any, src: Any, indexes: np.ndarray) -> None:
    # Device kernels do not check bounds: check what NumPy would have.
    if indexes.shape[0] != dst.shape[0] or dst.shape[1] != src.shape[1]:
        raise PynnetError(f"{what}: {indexes.shape[0]} indexes for {dst.shape[0]} rows, "
                          f"{dst.shape[1]} vs {src.shape[1]} columns")
    if indexes.size and int(indexes.max()) >= src.shape[0]:
        raise PynnetError(f"{what}: row index {int(indexes.max())} out of range for "
                          f"{src.shape[0]} rows")


_PRODUCT_METHODS: dict[Any, str] = {}


def _product_params(component: Any, method: str) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(weights W, bias or None) when the component's ``method`` is the plain
    affine/linear product (out = b + in W^T, in_deriv += out_deriv W)."""
    if not _PRODUCT_METHODS:
        from ...nnet.components.affine import (AffineComponent, FixedAffineComponent,
                                               LinearComponent)

        for cls, kind in ((AffineComponent, "affine"), (FixedAffineComponent, "affine"),
                          (LinearComponent, "linear")):
            _PRODUCT_METHODS[cls.propagate] = kind
            _PRODUCT_METHODS[cls.backprop] = kind
    kind = _PRODUCT_METHODS.get(getattr(type(component), method, None))
    if kind == "affine":
        return component.linear_params, component.bias_params
    if kind == "linear":
        return component.params, None
    return None


BACKEND_CLASS = CudaBackend
