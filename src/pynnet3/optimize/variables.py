"""Kaldi's ComputationVariables (nnet-analyze): the variables of a computation.

The optimizer and the checker reason about which command reads or writes
which part of which matrix.  Element-level bookkeeping would be far too
costly, and matrix-level bookkeeping too coarse, so (as Kaldi does) each
matrix is cut into *variables*: the cells of the coarsest grid of row ranges
x column ranges such that every submatrix of the computation is exactly a
union of cells.  Variables are numbered matrix by matrix, row range by row
range, then column range, so the variables of a submatrix come out sorted.

The grid is defined by NumPy array operations (:meth:`ComputationVariables._init_numpy`);
the analysis runs a dozen times per optimization on a few hundred
submatrices, where per-call overhead dominates, so by default one Numba loop
(:func:`variables_arrays`, below) computes the same arrays
(``fast_paths.current().analysis_jit``; the tests compare the two).
"""
from __future__ import annotations

import enum
from itertools import chain
from operator import attrgetter, is_
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .. import fast_paths
from ..compile.computation import NnetComputation, SubMatrixInfo
from ..errors import ComputationCheckError
from .arrays import unique_ints
from .check_common import validate_submatrices
from ..numba_cache import lazy_njit


if TYPE_CHECKING:
    from .accesses import CommandAttributes

__all__ = ["AccessType", "ComputationVariables", "variables_of", "variables_arrays"]


class AccessType(enum.IntEnum):
    """Kaldi's AccessType (same values)."""

    READ = 0
    WRITE = 1
    READ_WRITE = 2


# Internally an access is a two-bit flag so that merging several accesses of
# one command to one variable is a bitwise OR; AccessType = flag - 1.
_R, _W, _RW = 1, 2, 3


def _submatrix_table(computation: NnetComputation) -> np.ndarray:
    """int64 [num_submatrices, 5]: matrix, row_offset, num_rows, col_offset,
    num_cols (read-only)."""
    return computation.submatrix_table()


_MATRIX_SIZE = attrgetter("num_rows", "num_cols")


class _SplitPoints(Sequence):
    """Per matrix, its sorted split points (``points[first[m]:first[m+1]]``),
    sliced on demand."""

    __slots__ = ("_points", "_first")

    def __init__(self, points: np.ndarray, first: np.ndarray) -> None:
        self._points = points
        self._first = first.tolist()

    def __len__(self) -> int:
        return len(self._first) - 1

    def __getitem__(self, m):  # type: ignore[override]
        if isinstance(m, slice):
            return [self[i] for i in range(*m.indices(len(self)))]
        if m < 0:
            m += len(self)
        return self._points[self._first[m]:self._first[m + 1]]


def _split_points(matrix: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Sorted unique split points of every matrix along one axis.

    Returns (keys, first, K) where ``keys`` holds ``matrix * K + point`` for
    all split points, sorted, and ``first[m]`` is the position of matrix m's
    first key (``first`` has one extra entry at the end).  Every matrix
    m >= 1 gets 0 and its size as split points even when no submatrix
    refers to it.
    """
    num_matrices = len(sizes)
    mats = np.arange(1, num_matrices, dtype=np.int64)
    k = int(max(sizes.max(initial=0), ends.max(initial=0))) + 1
    keys = np.concatenate([matrix * k + starts, matrix * k + ends,
                           mats * k, mats * k + sizes[1:]])
    keys = unique_ints(keys)
    counts = np.bincount(keys // k, minlength=num_matrices)
    first = np.zeros(num_matrices + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    return keys, first, k


class ComputationVariables:
    """Kaldi's ComputationVariables: variables of a computation and the
    variables of each submatrix (see the module docstring)."""

    def __init__(self, computation: NnetComputation | None = None) -> None:
        self.row_split_points: Sequence[np.ndarray] = []
        self.column_split_points: Sequence[np.ndarray] = []
        # matrix_to_variable_index[m] is the first variable of matrix m; one
        # extra entry at the end equals num_variables.
        self.matrix_to_variable_index = np.zeros(1, dtype=np.int64)
        self.submatrix_to_matrix = np.zeros(0, dtype=np.int64)
        self.submatrix_is_whole_matrix = np.zeros(0, dtype=bool)
        self.variable_to_matrix = np.zeros(0, dtype=np.int64)
        self.num_variables = 0
        # Variables of each submatrix in compressed-row form: those of
        # submatrix s are variables_flat[variables_offsets[s]:variables_offsets[s+1]].
        self.variables_flat = np.zeros(0, dtype=np.int64)
        self.variables_offsets = np.zeros(1, dtype=np.int64)
        self._row_first = np.zeros(1, dtype=np.int64)
        self._col_first = np.zeros(1, dtype=np.int64)
        self._vfs_cache: list[list[int] | None] = []
        if computation is not None:
            self.init(computation)

    # -- construction --------------------------------------------------------
    def init(self, computation: NnetComputation) -> None:
        matrices = computation.matrices
        sizes = np.fromiter(chain.from_iterable(map(_MATRIX_SIZE, matrices)), dtype=np.int64,
                            count=2 * len(matrices)).reshape(-1, 2)
        self.init_from_tables(_submatrix_table(computation), sizes)

    def init_from_tables(self, table: np.ndarray, sizes: np.ndarray) -> None:
        """:meth:`init` from the submatrix table (int64 [num_submatrices, 5])
        and the matrix sizes (int64 [num_matrices, 2]: rows, columns)."""
        fp = fast_paths.current()
        # (Once loaded, the compiled loop beats the Python lists from
        # analysis_jit_loaded_from on.)
        loaded = fp.analysis_loop_loaded(_variables_kernel, len(table))
        if (fp.analysis_jit and not loaded and len(table) < fp.analysis_python_below
                and self._init_python(table.tolist(), sizes.tolist())):
            return
        if len(table) == 0 or (table[0] != 0).any():
            raise ComputationCheckError("submatrix 0 must be the empty submatrix")
        if len(sizes) == 0:
            raise ComputationCheckError("matrix 0 (the empty matrix) is missing")
        num_matrices = len(sizes)
        sub = table[1:]
        mat, r0, nr, c0, nc = (sub[:, i] for i in range(5))
        self._validate_submatrices(mat, r0, nr, c0, nc, sizes)
        if num_matrices > 1 and (sizes[1:] <= 0).any():
            m = int(np.flatnonzero((sizes[1:] <= 0).any(axis=1))[0]) + 1
            raise ComputationCheckError(f"matrix m{m} has size {sizes[m, 0]} x {sizes[m, 1]}")
        if fp.analysis_jit and (len(table) >= fp.analysis_jit_from or loaded):
            self._init_jit(table, sizes)
        else:
            self._init_numpy(table, sizes)

    def _init_jit(self, table: np.ndarray, sizes: np.ndarray) -> None:
        """The arrays of :meth:`_init_numpy`, from one compiled loop."""
        (row_pts, row_first, col_pts, col_first, first_var, variable_to_matrix, whole, flat,
         offsets) = variables_arrays(table, sizes)
        self.row_split_points = _SplitPoints(row_pts, row_first)
        self.column_split_points = _SplitPoints(col_pts, col_first)
        self._row_first, self._col_first = row_first, col_first
        self.matrix_to_variable_index = first_var
        self.num_variables = int(first_var[-1])
        self.variable_to_matrix = variable_to_matrix
        self.submatrix_to_matrix = table[:, 0].copy()
        self.submatrix_is_whole_matrix = whole
        self.variables_flat = flat
        self.variables_offsets = offsets
        self._vfs_cache = [None] * len(table)

    def _init_python(self, table: list[list[int]], sizes: list[list[int]]) -> bool:
        """The arrays of :meth:`_init_numpy` by plain loops over lists (for
        small computations); False, having set nothing, where the input is
        not valid (the NumPy path then names what is wrong)."""
        num_matrices = len(sizes)
        if not table or table[0] != [0, 0, 0, 0, 0] or num_matrices == 0:
            return False
        for nr, nc in sizes[1:]:
            if nr <= 0 or nc <= 0:
                return False
        # Split points of the matrices some submatrix cuts (most matrices
        # are only ever used whole: split points 0 and the size).
        row_cuts: dict[int, set[int]] = {}
        col_cuts: dict[int, set[int]] = {}
        for m, r0, nr, c0, nc in table[1:]:
            if not (0 < m < num_matrices and r0 >= 0 and nr > 0 and c0 >= 0 and nc > 0):
                return False
            mr, mc = sizes[m]
            if r0 + nr > mr or c0 + nc > mc:
                return False
            if r0 != 0 or nr != mr:
                cuts = row_cuts.get(m)
                if cuts is None:
                    cuts = row_cuts[m] = {0, mr}
                cuts.add(r0)
                cuts.add(r0 + nr)
            if c0 != 0 or nc != mc:
                cuts = col_cuts.get(m)
                if cuts is None:
                    cuts = col_cuts[m] = {0, mc}
                cuts.add(c0)
                cuts.add(c0 + nc)
        row_pts: list[list[int]] = [[]]
        col_pts: list[list[int]] = [[]]
        for m in range(1, num_matrices):
            cuts = row_cuts.get(m)
            row_pts.append(sorted(cuts) if cuts is not None else [0, sizes[m][0]])
            cuts = col_cuts.get(m)
            col_pts.append(sorted(cuts) if cuts is not None else [0, sizes[m][1]])
        row_first, col_first, first_var = [0], [0], [0]
        var_matrix: list[int] = []
        num_row_vars, num_col_vars = [], []
        for m in range(num_matrices):
            nrp, ncp = len(row_pts[m]), len(col_pts[m])
            row_first.append(row_first[-1] + nrp)
            col_first.append(col_first[-1] + ncp)
            nrv, ncv = max(nrp - 1, 0), max(ncp - 1, 0)
            num_row_vars.append(nrv)
            num_col_vars.append(ncv)
            first_var.append(first_var[-1] + nrv * ncv)
            var_matrix += [m] * (nrv * ncv)
        row_pos = {m: {p: i for i, p in enumerate(row_pts[m])} for m in row_cuts}
        col_pos = {m: {p: i for i, p in enumerate(col_pts[m])} for m in col_cuts}
        to_matrix, whole, flat, offsets = [0], [False], [], [0, 0]
        for m, r0, nr, c0, nc in table[1:]:
            pos = row_pos.get(m)
            rs, re = (0, 1) if pos is None else (pos[r0], pos[r0 + nr])
            pos = col_pos.get(m)
            cs, ce = (0, 1) if pos is None else (pos[c0], pos[c0 + nc])
            ncv = num_col_vars[m]
            to_matrix.append(m)
            whole.append(rs == 0 and re == num_row_vars[m] and cs == 0 and ce == ncv)
            base = first_var[m]
            if re - rs == 1 and ce - cs == 1:
                flat.append(base + rs * ncv + cs)
            else:
                for r in range(rs, re):
                    start = base + r * ncv
                    flat.extend(range(start + cs, start + ce))
            offsets.append(len(flat))
        i64 = np.int64
        row_first_a = np.array(row_first, dtype=i64)
        col_first_a = np.array(col_first, dtype=i64)
        self.row_split_points = _SplitPoints(
            np.array(list(chain.from_iterable(row_pts)), dtype=i64), row_first_a)
        self.column_split_points = _SplitPoints(
            np.array(list(chain.from_iterable(col_pts)), dtype=i64), col_first_a)
        self._row_first, self._col_first = row_first_a, col_first_a
        self.matrix_to_variable_index = np.array(first_var, dtype=i64)
        self.num_variables = first_var[-1]
        self.variable_to_matrix = np.array(var_matrix, dtype=i64)
        self.submatrix_to_matrix = np.array(to_matrix, dtype=i64)
        self.submatrix_is_whole_matrix = np.array(whole, dtype=bool)
        self.variables_flat = np.array(flat, dtype=i64)
        self.variables_offsets = np.array(offsets, dtype=i64)
        self._vfs_cache = [None] * len(table)
        return True

    def _init_numpy(self, table: np.ndarray, sizes: np.ndarray) -> None:
        """The variables by array operations (validated input)."""
        num_matrices = len(sizes)
        sub = table[1:]
        mat, r0, nr, c0, nc = (sub[:, i] for i in range(5))
        row_keys, row_first, row_k = _split_points(mat, r0, r0 + nr, sizes[:, 0])
        col_keys, col_first, col_k = _split_points(mat, c0, c0 + nc, sizes[:, 1])
        row_pts = row_keys % row_k
        col_pts = col_keys % col_k
        self.row_split_points = _SplitPoints(row_pts, row_first)
        self.column_split_points = _SplitPoints(col_pts, col_first)
        self._row_first, self._col_first = row_first, col_first

        num_row_vars = np.maximum(np.diff(row_first) - 1, 0)
        num_col_vars = np.maximum(np.diff(col_first) - 1, 0)
        num_vars = num_row_vars * num_col_vars
        self.matrix_to_variable_index = np.zeros(num_matrices + 1, dtype=np.int64)
        np.cumsum(num_vars, out=self.matrix_to_variable_index[1:])
        self.num_variables = int(self.matrix_to_variable_index[-1])
        self.variable_to_matrix = np.repeat(np.arange(num_matrices, dtype=np.int64), num_vars)

        # Row / column split-point index of each submatrix's start and end:
        # position of the key in the sorted key array minus the matrix's first.
        rs = np.searchsorted(row_keys, mat * row_k + r0) - row_first[mat]
        re = np.searchsorted(row_keys, mat * row_k + r0 + nr) - row_first[mat]
        cs = np.searchsorted(col_keys, mat * col_k + c0) - col_first[mat]
        ce = np.searchsorted(col_keys, mat * col_k + c0 + nc) - col_first[mat]
        ncv = num_col_vars[mat]
        whole = (rs == 0) & (re == num_row_vars[mat]) & (cs == 0) & (ce == ncv)
        self.submatrix_to_matrix = np.concatenate([[0], mat])
        self.submatrix_is_whole_matrix = np.concatenate([[False], whole])

        # Expand each submatrix's block of variables (rows re-rs by columns
        # ce-cs, row-major) into a flat array.
        width = ce - cs
        counts = np.concatenate([[0], (re - rs) * width])
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        owner = np.repeat(np.arange(len(sub), dtype=np.int64), counts[1:])
        k = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[1:-1][owner]
        w = width[owner]
        self.variables_flat = (self.matrix_to_variable_index[mat[owner]]
                               + (rs[owner] + k // w) * ncv[owner] + cs[owner] + k % w)
        self.variables_offsets = offsets
        self._vfs_cache = [None] * len(table)

    _validate_submatrices = staticmethod(validate_submatrices)

    # -- queries -----------------------------------------------------------
    def variables_for_submatrix(self, submatrix_index: int) -> list[int]:
        """Sorted variables of a submatrix (empty for submatrix 0)."""
        cached = self._vfs_cache[submatrix_index]
        if cached is None:
            o = self.variables_offsets
            cached = self.variables_flat[o[submatrix_index]:o[submatrix_index + 1]].tolist()
            self._vfs_cache[submatrix_index] = cached
        return cached

    def variables_for_matrix(self, matrix_index: int) -> range:
        """The variables of a matrix: a contiguous range."""
        return range(int(self.matrix_to_variable_index[matrix_index]),
                     int(self.matrix_to_variable_index[matrix_index + 1]))

    def append_variables_for_submatrix(self, submatrix_index: int, out: list[int]) -> None:
        out.extend(self.variables_for_submatrix(submatrix_index))

    def append_variables_for_matrix(self, matrix_index: int, out: list[int]) -> None:
        out.extend(self.variables_for_matrix(matrix_index))

    def get_matrix_for_variable(self, variable: int) -> int:
        return int(self.variable_to_matrix[variable])

    def _variable_position(self, variable: int) -> tuple[int, int, int]:
        if not 0 <= variable < self.num_variables:
            raise IndexError(f"variable {variable} out of range [0, {self.num_variables})")
        m = int(self.variable_to_matrix[variable])
        ncv = len(self.column_split_points[m]) - 1
        offset = variable - int(self.matrix_to_variable_index[m])
        return m, offset // ncv, offset % ncv

    def describe_variable(self, variable: int) -> str:
        """``m3``, ``m3(0:9,:)`` or ``m3(0:9,10:19)`` (inclusive ranges)."""
        m, r, c = self._variable_position(variable)
        rows, cols = self.row_split_points[m], self.column_split_points[m]
        if len(rows) == 2 and len(cols) == 2:
            return f"m{m}"
        rtext = ":" if len(rows) == 2 else f"{rows[r]}:{rows[r + 1] - 1}"
        ctext = ":" if len(cols) == 2 else f"{cols[c]}:{cols[c + 1] - 1}"
        return f"m{m}({rtext},{ctext})"

    def variable_info(self, variable: int) -> SubMatrixInfo:
        """The rows and columns a variable covers, as a SubMatrixInfo."""
        m, r, c = self._variable_position(variable)
        rows, cols = self.row_split_points[m], self.column_split_points[m]
        return SubMatrixInfo(m, int(rows[r]), int(rows[r + 1] - rows[r]),
                             int(cols[c]), int(cols[c + 1] - cols[c]))

    def record_access_for_submatrix(self, submatrix_index: int, access_type: AccessType,
                                    ca: CommandAttributes) -> None:
        """Add one access to ``ca`` (unsorted; the batch computation in
        :func:`compute_command_attributes` does not use this)."""
        if submatrix_index == 0:
            return
        m = int(self.submatrix_to_matrix[submatrix_index])
        v = self.variables_for_submatrix(submatrix_index)
        if access_type is not AccessType.WRITE:
            ca.variables_read.extend(v)
            ca.submatrices_read.append(submatrix_index)
            ca.matrices_read.append(m)
        if access_type is not AccessType.READ:
            ca.variables_written.extend(v)
            ca.submatrices_written.append(submatrix_index)
            ca.matrices_written.append(m)
            # Writing part of a matrix leaves the rest as it was, so for the
            # matrix as a whole the result depends on the old contents.
            if access_type is AccessType.WRITE and not self.submatrix_is_whole_matrix[submatrix_index]:
                ca.matrices_read.append(m)


def variables_of(computation: NnetComputation) -> ComputationVariables:
    """ComputationVariables(computation), reused while the submatrices (the
    same objects: they are immutable) and the matrix sizes are unchanged;
    most passes change only commands."""
    subs, matrices = computation.submatrices, computation.matrices
    sizes = [(m.num_rows, m.num_cols) for m in matrices]
    memo = computation.__dict__.get("_variables_memo")
    if memo is not None:
        old_subs, old_sizes, variables = memo
        if (old_sizes == sizes and len(old_subs) == len(subs)
                and all(map(is_, old_subs, subs))):
            return variables
    variables = ComputationVariables(computation)
    computation.__dict__["_variables_memo"] = (list(subs), sizes, variables)
    return variables


# ---------------------------------------------------------------------------
# The variables as one compiled loop
# ---------------------------------------------------------------------------

@lazy_njit(cache=True, nogil=True)
def _sorted_unique_segments(points, offsets):
    """Sort each segment ``points[offsets[m]:offsets[m+1]]`` (in place) and
    drop repeated values; returns the values and the new segment offsets."""
    num = offsets.shape[0] - 1
    out = np.empty(points.shape[0], dtype=np.int64)
    first = np.zeros(num + 1, dtype=np.int64)
    k = 0
    for m in range(num):
        first[m] = k
        lo, hi = offsets[m], offsets[m + 1]
        if hi - lo > 32:
            points[lo:hi] = np.sort(points[lo:hi])
        else:
            # (segments are short: insertion sort, in place)
            for i in range(lo + 1, hi):
                x = points[i]
                j = i - 1
                while j >= lo and points[j] > x:
                    points[j + 1] = points[j]
                    j -= 1
                points[j + 1] = x
        for i in range(lo, hi):
            if i == lo or points[i] != points[i - 1]:
                out[k] = points[i]
                k += 1
    first[num] = k
    return out[:k].copy(), first


@lazy_njit(cache=True, nogil=True)
def _position(points, lo, hi, value):
    """Index (relative to lo) of ``value`` in the sorted ``points[lo:hi]``
    (where it would be inserted if absent)."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) // 2
        if points[mid] < value:
            a = mid + 1
        else:
            b = mid
    return a - lo


@lazy_njit(cache=True, nogil=True)
def _variables_kernel(sub, sizes):
    num_subs = sub.shape[0]
    num_matrices = sizes.shape[0]
    count = np.zeros(num_matrices, dtype=np.int64)
    for s in range(1, num_subs):
        count[sub[s, 0]] += 1
    # Candidate split points: 0 and the size of every matrix m >= 1, and
    # each submatrix's start and end.
    offsets = np.zeros(num_matrices + 1, dtype=np.int64)
    for m in range(num_matrices):
        n = 2 + 2 * count[m] if m >= 1 else 0
        offsets[m + 1] = offsets[m] + n
    row_points = np.empty(offsets[num_matrices], dtype=np.int64)
    col_points = np.empty(offsets[num_matrices], dtype=np.int64)
    fill = offsets[:-1].copy()
    for m in range(1, num_matrices):
        p = fill[m]
        row_points[p] = 0
        row_points[p + 1] = sizes[m, 0]
        col_points[p] = 0
        col_points[p + 1] = sizes[m, 1]
        fill[m] = p + 2
    for s in range(1, num_subs):
        m = sub[s, 0]
        p = fill[m]
        row_points[p] = sub[s, 1]
        row_points[p + 1] = sub[s, 1] + sub[s, 2]
        col_points[p] = sub[s, 3]
        col_points[p + 1] = sub[s, 3] + sub[s, 4]
        fill[m] = p + 2
    row_pts, row_first = _sorted_unique_segments(row_points, offsets)
    col_pts, col_first = _sorted_unique_segments(col_points, offsets)
    num_row_vars = np.zeros(num_matrices, dtype=np.int64)
    num_col_vars = np.zeros(num_matrices, dtype=np.int64)
    first_var = np.zeros(num_matrices + 1, dtype=np.int64)
    for m in range(num_matrices):
        num_row_vars[m] = max(row_first[m + 1] - row_first[m] - 1, 0)
        num_col_vars[m] = max(col_first[m + 1] - col_first[m] - 1, 0)
        first_var[m + 1] = first_var[m] + num_row_vars[m] * num_col_vars[m]
    variable_to_matrix = np.empty(first_var[num_matrices], dtype=np.int64)
    for m in range(num_matrices):
        for v in range(first_var[m], first_var[m + 1]):
            variable_to_matrix[v] = m
    # Each submatrix's block of variables: rows rs..re-1 by columns cs..ce-1.
    whole = np.zeros(num_subs, dtype=np.bool_)
    bounds = np.zeros((num_subs, 4), dtype=np.int64)
    var_offsets = np.zeros(num_subs + 1, dtype=np.int64)
    for s in range(1, num_subs):
        m = sub[s, 0]
        rlo, rhi = row_first[m], row_first[m + 1]
        clo, chi = col_first[m], col_first[m + 1]
        rs = _position(row_pts, rlo, rhi, sub[s, 1])
        re = _position(row_pts, rlo, rhi, sub[s, 1] + sub[s, 2])
        cs = _position(col_pts, clo, chi, sub[s, 3])
        ce = _position(col_pts, clo, chi, sub[s, 3] + sub[s, 4])
        bounds[s, 0], bounds[s, 1], bounds[s, 2], bounds[s, 3] = rs, re, cs, ce
        whole[s] = rs == 0 and re == num_row_vars[m] and cs == 0 and ce == num_col_vars[m]
        var_offsets[s + 1] = var_offsets[s] + (re - rs) * (ce - cs)
    flat = np.empty(var_offsets[num_subs], dtype=np.int64)
    for s in range(1, num_subs):
        m = sub[s, 0]
        k = var_offsets[s]
        ncv = num_col_vars[m]
        for r in range(bounds[s, 0], bounds[s, 1]):
            for c in range(bounds[s, 2], bounds[s, 3]):
                flat[k] = first_var[m] + r * ncv + c
                k += 1
    return (row_pts, row_first, col_pts, col_first, first_var, variable_to_matrix, whole,
            flat, var_offsets)


def variables_arrays(sub: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """(row split points, their per-matrix offsets, column split points,
    their offsets, first variable of each matrix (+ total), matrix of each
    variable, whether each submatrix is a whole matrix, the variables of
    all submatrices flattened, their per-submatrix offsets), for a valid
    submatrix table ``sub`` [num_submatrices, 5] and matrix sizes
    ``sizes`` [num_matrices, 2]."""
    return _variables_kernel(np.ascontiguousarray(sub, dtype=np.int64),
                             np.ascontiguousarray(sizes, dtype=np.int64))
