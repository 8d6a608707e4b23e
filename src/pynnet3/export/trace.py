"""The translating backend: the compute backend interface of
:mod:`pynnet3.compute.backend` (the reference backend's operations, same
meanings), but every operation appends tensor operators to a
:class:`~.ir.Program` instead of computing.

:class:`pynnet3.compute.computer.NnetComputer` runs a compiled computation
on it exactly as on NumPy, so what each command means comes from the
executor and the reference backend; this module only says how each
operation is written as tensor operators:

* a matrix holds the name of its current value (SSA); a submatrix is a
  :class:`View`; reading it is a Slice, writing it makes a new value of its
  matrix (Concat of the untouched parts around the new block);
* row operations are Gather with constant index tensors; a ``-1`` index
  reads an appended zero row; writes to rows (CopyToRowsMulti,
  AddToRowsMulti) are gathers too, choosing for each row of the destination
  its old value or a row of the source; AddRowRanges is a product with a
  constant 0/1 matrix;
* Propagate is translated per component type (:mod:`.components`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..arraytools import sorted_unique
from ..errors import PynnetError
from .ir import Program


class Mat:
    """A matrix of the computation: its shape and current value (None:
    never written, read as zeros)."""

    __slots__ = ("rows", "cols", "value")

    def __init__(self, rows: int, cols: int, value: str | None = None) -> None:
        self.rows, self.cols, self.value = rows, cols, value

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)


class View:
    """Rows [r0, r0+nr) and columns [c0, c0+nc) of a :class:`Mat`."""

    __slots__ = ("base", "r0", "nr", "c0", "nc")

    def __init__(self, base: Mat, r0: int, nr: int, c0: int, nc: int) -> None:
        self.base, self.r0, self.nr, self.c0, self.nc = base, r0, nr, c0, nc

    @property
    def shape(self) -> tuple[int, int]:
        return (self.nr, self.nc)


class TraceBackend:
    """A compute backend whose operations write a :class:`Program`."""

    name = "onnx-trace"

    def __init__(self, program: Program, nnet: Any) -> None:
        self.p = program
        self.nnet = nnet
        self._empty = Mat(0, 0)

    # -- reading and writing values -------------------------------------------
    def read(self, x: Any) -> str:
        if isinstance(x, Mat):
            if x.value is None:
                x.value = self.p.const(np.zeros((x.rows, x.cols), np.float32))
            return x.value
        base = x.base
        whole = self.read(base)
        if x.r0 == 0 and x.nr == base.rows and x.c0 == 0 and x.nc == base.cols:
            return whole
        return self.p.op("Slice", [whole, self.p.ints([x.r0, x.c0]),
                                   self.p.ints([x.r0 + x.nr, x.c0 + x.nc]),
                                   self.p.ints([0, 1])], "slice")

    def _slice(self, v: str, r0: int, r1: int, c0: int, c1: int) -> str:
        return self.p.op("Slice", [v, self.p.ints([r0, c0]), self.p.ints([r1, c1]),
                                   self.p.ints([0, 1])], "slice")

    def write(self, x: Any, value: str) -> None:
        if isinstance(x, Mat):
            x.value = value
            return
        base = x.base
        if x.r0 == 0 and x.nr == base.rows and x.c0 == 0 and x.nc == base.cols:
            base.value = value
            return
        old = self.read(base)
        row_block = value
        if x.c0 > 0 or x.c0 + x.nc < base.cols:
            parts = []
            if x.c0 > 0:
                parts.append(self._slice(old, x.r0, x.r0 + x.nr, 0, x.c0))
            parts.append(value)
            if x.c0 + x.nc < base.cols:
                parts.append(self._slice(old, x.r0, x.r0 + x.nr, x.c0 + x.nc, base.cols))
            row_block = self.p.op("Concat", parts, "write", axis=1)
        parts = []
        if x.r0 > 0:
            parts.append(self._slice(old, 0, x.r0, 0, base.cols))
        parts.append(row_block)
        if x.r0 + x.nr < base.rows:
            parts.append(self._slice(old, x.r0 + x.nr, base.rows, 0, base.cols))
        base.value = parts[0] if len(parts) == 1 else self.p.op("Concat", parts, "write", axis=0)

    def _scaled(self, v: str, alpha: float) -> str:
        if alpha == 1.0:
            return v
        return self.p.op("Mul", [v, self.p.const(np.float32(alpha))], "scale")

    def _with_zero_row(self, values: list[str], cols: int) -> str:
        return self.p.op("Concat", values + [self.p.const(np.zeros((1, cols), np.float32))],
                         "rows", axis=0)

    # -- memory ---------------------------------------------------------------
    def alloc(self, num_rows: int, num_cols: int, fill: float = 0.0) -> Mat:
        m = Mat(num_rows, num_cols)
        if fill != 0.0:
            m.value = self.p.const(np.full((num_rows, num_cols), fill, np.float32))
        return m

    def alloc_undefined(self, num_rows: int, num_cols: int) -> Mat:
        return Mat(num_rows, num_cols)

    def empty_matrix(self) -> Mat:
        return self._empty

    def view(self, mat: Any, row_offset: int, num_rows: int, col_offset: int,
             num_cols: int) -> View:
        if isinstance(mat, View):
            return View(mat.base, mat.r0 + row_offset, num_rows, mat.c0 + col_offset, num_cols)
        return View(mat, row_offset, num_rows, col_offset, num_cols)

    def from_host(self, host: Any) -> Any:
        if isinstance(host, (Mat, View)):
            return host
        arr = np.asarray(host, dtype=np.float32)
        return Mat(arr.shape[0], arr.shape[1], self.p.const(arr))

    def to_host(self, mat: Any) -> Any:
        return mat

    def prepare_indexes(self, table: Any) -> np.ndarray:
        return np.ascontiguousarray(table, dtype=np.int64)

    # -- whole-matrix operations ------------------------------------------------
    def set_const(self, dst: Any, value: float) -> None:
        self.write(dst, self.p.const(np.full(dst.shape, value, np.float32)))

    def scale(self, dst: Any, alpha: float) -> None:
        self.write(dst, self._scaled(self.read(dst), alpha))

    def copy(self, dst: Any, src: Any, alpha: float = 1.0) -> None:
        self.write(dst, self._scaled(self.read(src), alpha))

    def add(self, dst: Any, src: Any, alpha: float = 1.0) -> None:
        self.write(dst, self.p.op("Add", [self.read(dst), self._scaled(self.read(src), alpha)],
                                  "add"))

    # -- row operations (reference.py's meanings) ------------------------------
    def _gather_rows(self, src: Any, indexes: np.ndarray) -> str:
        idx = np.asarray(indexes, dtype=np.int64)
        n = src.shape[0]
        if (idx >= 0).all():
            if np.array_equal(idx, np.arange(n)):
                return self.read(src)
            return self.p.op("Gather", [self.read(src), self.p.ints(idx)], "rows", axis=0)
        table = self._with_zero_row([self.read(src)], src.shape[1])
        return self.p.op("Gather", [table, self.p.ints(np.where(idx >= 0, idx, n))], "rows",
                         axis=0)

    def copy_rows(self, dst: Any, src: Any, indexes: np.ndarray, alpha: float = 1.0) -> None:
        self.write(dst, self._scaled(self._gather_rows(src, indexes), alpha))

    def add_rows(self, dst: Any, src: Any, indexes: np.ndarray, alpha: float = 1.0) -> None:
        rows = self._scaled(self._gather_rows(src, indexes), alpha)
        self.write(dst, self.p.op("Add", [self.read(dst), rows], "add_rows"))

    def _multi_source(self, arrays: list[Any], pairs: np.ndarray, cols: int) -> str:
        offsets = np.cumsum([0] + [a.shape[0] for a in arrays])
        table = self._with_zero_row([self.read(a) for a in arrays], cols)
        p = np.asarray(pairs, dtype=np.int64)
        valid = p[:, 0] >= 0
        idx = np.full(p.shape[0], offsets[-1], dtype=np.int64)
        idx[valid] = offsets[p[valid, 0]] + p[valid, 1]
        return self.p.op("Gather", [table, self.p.ints(idx)], "rows_multi", axis=0)

    def copy_rows_multi(self, dst: Any, arrays: list[Any], pairs: np.ndarray,
                        alpha: float = 1.0) -> None:
        self.write(dst, self._scaled(self._multi_source(arrays, pairs, dst.shape[1]), alpha))

    def add_rows_multi(self, dst: Any, arrays: list[Any], pairs: np.ndarray,
                       alpha: float = 1.0) -> None:
        rows = self._scaled(self._multi_source(arrays, pairs, dst.shape[1]), alpha)
        self.write(dst, self.p.op("Add", [self.read(dst), rows], "add_rows_multi"))

    def _scatter(self, src: Any, arrays: list[Any], pairs: np.ndarray, alpha: float,
                 add: bool) -> None:
        p = np.asarray(pairs, dtype=np.int64)
        src_v = self._scaled(self.read(src), alpha)
        n_src = src.shape[0]
        for k, arr in enumerate(arrays):
            sel = np.nonzero(p[:, 0] == k)[0]
            if sel.size == 0:
                continue
            targets = p[sel, 1]
            n = arr.shape[0]
            if add:
                if sorted_unique(targets).size != targets.size:
                    # two source rows to one row: a 0/1 matrix sums them
                    m = np.zeros((n, n_src), np.float32)
                    np.add.at(m, (targets, sel), 1.0)
                    part = self.p.op("MatMul", [self.p.const(m), src_v], "add_to_rows")
                else:
                    idx = np.full(n, n_src, dtype=np.int64)
                    idx[targets] = sel
                    part = self.p.op("Gather", [self._with_zero_row([src_v], src.shape[1]),
                                                self.p.ints(idx)], "add_to_rows", axis=0)
                self.write(arr, self.p.op("Add", [self.read(arr), part], "add_to_rows"))
            else:
                idx = np.arange(n, dtype=np.int64)
                idx[targets] = n + sel
                table = self.p.op("Concat", [self.read(arr), src_v], "copy_to_rows", axis=0)
                self.write(arr, self.p.op("Gather", [table, self.p.ints(idx)], "copy_to_rows",
                                          axis=0))

    def copy_to_rows_multi(self, src: Any, arrays: list[Any], pairs: np.ndarray) -> None:
        self._scatter(src, arrays, pairs, 1.0, add=False)

    def add_to_rows_multi(self, src: Any, arrays: list[Any], pairs: np.ndarray,
                          alpha: float = 1.0) -> None:
        self._scatter(src, arrays, pairs, alpha, add=True)

    def add_row_ranges(self, dst: Any, src: Any, ranges: np.ndarray, alpha: float = 1.0) -> None:
        r = np.asarray(ranges, dtype=np.int64)
        m = range_sum_matrix(r, src.shape[0]) * np.float32(alpha)
        part = self.p.op("MatMul", [self.p.const(m), self.read(src)], "add_row_ranges")
        self.write(dst, self.p.op("Add", [self.read(dst), part], "add_row_ranges"))

    # -- compression: never used (the export computes with compress_matrices off)
    def compress(self, mat: Any, kind: int, range_: float, truncate: bool) -> Any:
        raise PynnetError("matrix compression cannot be exported")

    def decompress(self, compressed: Any, dst: Any) -> None:
        raise PynnetError("matrix compression cannot be exported")

    # -- components ----------------------------------------------------------
    def propagate(self, component: Any, precomputed: Any, in_value: Any, out_value: Any) -> Any:
        from .components import translate_propagate

        name = self._component_name(component)
        x = self.read(in_value) if in_value.shape[1] else None
        y, adds = translate_propagate(self.p, component, name, precomputed, x,
                                      in_value.shape, out_value.shape)
        if adds:
            y = self.p.op("Add", [self.read(out_value), y], f"{name}.adds")
        self.write(out_value, y)
        return None

    def _component_name(self, component: Any) -> str:
        for i, c in enumerate(self.nnet.components):
            if c is component:
                return self.nnet.component_names[i]
        return type(component).__name__

    def backprop(self, *args: Any) -> None:
        raise PynnetError("the export translates forward computations only")

    def store_stats(self, *args: Any) -> None:
        pass

    def stddev(self, mat: Any) -> float:
        return 0.0


def range_sum_matrix(ranges: np.ndarray, num_src_rows: int) -> np.ndarray:
    """The 0/1 matrix whose row r sums source rows ranges[r, 0] .. ranges[r, 1]-1
    (an empty range, including Kaldi's (-1, -1), sums nothing)."""
    r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    cols = np.arange(num_src_rows)
    return ((cols[None, :] >= r[:, 0:1]) & (cols[None, :] < r[:, 1:2])).astype(np.float32)
