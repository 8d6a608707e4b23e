"""Extend matrices so that whole-matrix copies become possible (Kaldi's
MatrixExtender and ExtendMatrices, nnet-optimize-utils).

In TDNNs a layer's output matrix is often copied, all but its last few
rows, into the tail of a bigger matrix (the input of the next layer).  If
the destination is grown by those few rows, the copy covers the whole
source matrix, and variable merging can then make the two matrices one
(removing the copy).  This pass does the growing: for each MatrixCopy (alpha
1) from rows 0..k-1 of a matrix with more than k rows into a row range that
ends at the last row of another matrix, the destination matrix gets the
missing rows and the copy is widened to the whole source.

The new rows are never written or read except by that copy; the checker
tolerates such unused parts at the end of a matrix (see check.py, which
uses the same 0.8 proportion).
"""
from __future__ import annotations

import numpy as np

from ..compile.computation import CommandType, NnetComputation
from ..compile.n_stride import cindex_array
from ..errors import PynnetError
from ..nnet.index import K_NO_TIME
from ..nnet.index_lists import CindexList
from .arrays import ComputationArrays, rows_with_type, type_mask
from .renumber import renumber_arrays

__all__ = ["extend_matrices", "MatrixExtender"]

T = CommandType
_T_SWAP_MATRIX = int(T.SWAP_MATRIX)
_T_MATRIX_COPY = int(T.MATRIX_COPY)
_T_SET_CONST = int(T.SET_CONST)
_IO_TYPES = type_mask([T.PROVIDE_OUTPUT, T.ACCEPT_INPUT])
_SIZING_TYPES = type_mask([T.ALLOC_MATRIX, T.DEALLOC_MATRIX])

# A destination is not extended unless the copied part is already at least
# this proportion of the source (keep equal to check.py's _EXTEND_MIN_PROPORTION).
_MIN_PROPORTION = np.float32(0.8)


class MatrixExtender:
    """Kaldi's MatrixExtender; use :func:`extend_matrices`.

    Works on the array form of the computation (given a computation, it
    writes the result back to it at the end)."""

    def __init__(self, computation: NnetComputation | ComputationArrays) -> None:
        if isinstance(computation, ComputationArrays):
            self.computation: NnetComputation | None = None
            self.arrays = st = computation
        else:
            self.computation = computation
            self.arrays = st = ComputationArrays(computation)
        table = st.table
        types = table[:, 0]
        swaps = np.flatnonzero(types == _T_SWAP_MATRIX)
        if len(swaps):
            raise PynnetError(f"extend_matrices: c{swaps[0]} is a SwapMatrix; this pass must run "
                              "before allocate-from-other")
        num_matrices = len(st.matrices)
        self.orig_num_rows: list[int] = st.sizes[:, 0].tolist()
        self._num_rows = list(self.orig_num_rows)
        self._num_cols: list[int] = st.sizes[:, 1].tolist()
        self.is_input_or_output = [False] * num_matrices
        io = rows_with_type(types, _IO_TYPES)
        for m in st.sub[table[io, 1], 0].tolist():
            self.is_input_or_output[m] = True
        # The submatrices as rows [matrix, row offset, rows, column offset,
        # columns]; new ones are appended.
        self._subs: list[list[int]] = st.sub.tolist()

    def can_be_extended(self, dest_submatrix: int, src_submatrix: int) -> bool:
        src_m, src_r0, src_nr, src_c0, src_nc = self._subs[src_submatrix]
        dest_m, dest_r0, dest_nr, _, _ = self._subs[dest_submatrix]
        if src_m == dest_m:
            return False
        if self.is_input_or_output[dest_m]:
            return False   # inputs and outputs keep their sizes
        # (float32 product, as Kaldi's BaseFloat arithmetic)
        if src_nr < _MIN_PROPORTION * np.float32(self.orig_num_rows[src_m]):
            return False
        # The source is the matrix minus some final rows; the destination
        # range reaches the last row of its matrix.
        return (src_c0 == 0 and src_nc == self._num_cols[src_m]
                and src_r0 == 0 and src_nr < self._num_rows[src_m]
                and dest_r0 + dest_nr == self.orig_num_rows[dest_m])

    def extend(self, dest_submatrix: int, src_submatrix: int) -> tuple[int, int]:
        """Grow the destination matrix and return the new (dest, src)
        submatrices of the widened copy.  Allocation commands are fixed later
        by :meth:`fix_computation`."""
        subs = self._subs
        src_m = subs[src_submatrix][0]
        dest_m, dest_r0, _, dest_c0, dest_nc = subs[dest_submatrix]
        src_rows = self._num_rows[src_m]
        new_dest_num_rows = dest_r0 + src_rows
        if new_dest_num_rows > self._num_rows[dest_m]:
            self._num_rows[dest_m] = new_dest_num_rows
            self.arrays.matrices[dest_m].num_rows = new_dest_num_rows
            # a submatrix covering the whole grown matrix
            subs.append([dest_m, 0, new_dest_num_rows, 0, self._num_cols[dest_m]])
        subs.append([dest_m, dest_r0, src_rows, dest_c0, dest_nc])
        subs.append([src_m, 0, src_rows, 0, self._num_cols[src_m]])
        return len(subs) - 2, len(subs) - 1

    def extend_matrices(self) -> None:
        st = self.arrays
        table = st.table
        changed = False
        candidates = np.flatnonzero((table[:, 0] == _T_MATRIX_COPY) & (st.alpha == 1.0))
        for c, a1, a2 in zip(candidates.tolist(), table[candidates, 1].tolist(),
                             table[candidates, 2].tolist()):
            if self.can_be_extended(a1, a2):
                dest, src = self.extend(a1, a2)
                table[c, 1] = dest
                table[c, 2] = src
                changed = True
        if changed:
            self.fix_computation()
            if self.computation is not None:
                st.write_back(self.computation)

    def fix_computation(self) -> None:
        """Point allocations, deallocations and whole-matrix zeroings at the
        whole (grown) matrices, fix the debug info, renumber."""
        st = self.arrays
        num_new = len(self._subs) - len(st.sub)
        st.sub = np.array(self._subs, dtype=np.int64).reshape(-1, 5)
        st.sub_origin = np.concatenate([st.sub_origin, np.full(num_new, -1, dtype=np.int64)])
        st.sizes[:, 0] = self._num_rows
        sub = st.sub
        rows = st.sizes[:, 0]
        cols = st.sizes[:, 1]
        orig_rows = np.array(self.orig_num_rows, dtype=np.int64)
        # For each matrix, its first submatrix that covers it whole (0 if none).
        m_of = sub[:, 0]
        is_whole = ((sub[:, 1] == 0) & (sub[:, 3] == 0) & (sub[:, 2] == rows[m_of])
                    & (sub[:, 4] == cols[m_of]))
        is_whole[0] = False
        whole = np.zeros(len(rows), dtype=np.int64)
        candidates = np.flatnonzero(is_whole)
        if len(candidates):
            matrices, first = np.unique(m_of[candidates], return_index=True)
            whole[matrices] = candidates[first]
        table = st.table
        types = table[:, 0]
        sizing = rows_with_type(types, _SIZING_TYPES)
        if len(sizing):
            s = table[sizing, 1]
            m = sub[s, 0]
            w = whole[m]
            moved = w != s
            fine = (sub[s] == sub[w]).all(axis=1) | (orig_rows[m] != rows[m])
            bad = moved & ~fine
            if bad.any():
                c = int(sizing[np.flatnonzero(bad)[0]])
                raise PynnetError(f"extend_matrices: c{c} does not allocate a whole "
                                  "matrix (code error)")
            table[sizing[moved], 1] = w[moved]
        zeroing = np.flatnonzero((types == _T_SET_CONST) & (st.alpha == 0.0))
        if len(zeroing):
            s = table[zeroing, 1]
            info = sub[s]
            m = info[:, 0]
            w = whole[m]
            # it zeroed the whole matrix before it grew: it still should
            moved = ((w != s) & (info[:, 1] == 0) & (info[:, 3] == 0) & (info[:, 4] == cols[m])
                     & (info[:, 2] == orig_rows[m]))
            table[zeroing[moved], 1] = w[moved]
        if st.matrix_debug_info:
            self.fix_debug_info()
        renumber_arrays(st)

    def fix_debug_info(self) -> None:
        """Debug info for the new rows: copies of the last rows' cindexes with
        t = kNoTime (they are not real time steps)."""
        st = self.arrays
        for m in range(1, len(st.matrices)):
            debug = st.matrix_debug_info[m]
            new_rows = st.matrices[m].num_rows
            old_rows = len(debug.cindexes)
            if new_rows == old_rows:
                continue
            extra = new_rows - old_rows
            if not 0 < extra <= old_rows:
                raise PynnetError(f"extend_matrices: m{m} grew by {extra} rows (code error)")
            arr = cindex_array(debug.cindexes)
            tail = arr[old_rows - extra:old_rows].copy()
            tail[:, 2] = K_NO_TIME
            debug.cindexes = CindexList(np.ascontiguousarray(np.concatenate([arr, tail])))


def extend_matrices(computation: NnetComputation | ComputationArrays) -> None:
    """Kaldi's ExtendMatrices, in place (see the module docstring)."""
    MatrixExtender(computation).extend_matrices()
