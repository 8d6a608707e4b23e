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

from ..compile.computation import CommandType, NnetComputation, SubMatrixInfo
from ..compile.n_stride import CindexList, cindex_array
from ..errors import PynnetError
from ..nnet.index import K_NO_TIME
from .renumber import renumber_computation

__all__ = ["extend_matrices", "MatrixExtender"]

T = CommandType

# A destination is not extended unless the copied part is already at least
# this proportion of the source (keep equal to check.py's _EXTEND_MIN_PROPORTION).
_MIN_PROPORTION = np.float32(0.8)


class MatrixExtender:
    """Kaldi's MatrixExtender; use :func:`extend_matrices`."""

    def __init__(self, computation: NnetComputation) -> None:
        self.computation = computation
        num_matrices = len(computation.matrices)
        self.orig_num_rows = [m.num_rows for m in computation.matrices]
        self.is_input_or_output = [False] * num_matrices
        for c, command in enumerate(computation.commands):
            if command.command_type is T.SWAP_MATRIX:
                raise PynnetError(f"extend_matrices: c{c} is a SwapMatrix; this pass must run "
                                  "before allocate-from-other")
            if command.command_type in (T.PROVIDE_OUTPUT, T.ACCEPT_INPUT):
                m = computation.submatrices[command.arg1].matrix_index
                self.is_input_or_output[m] = True

    def can_be_extended(self, dest_submatrix: int, src_submatrix: int) -> bool:
        comp = self.computation
        src = comp.submatrices[src_submatrix]
        dest = comp.submatrices[dest_submatrix]
        if src.matrix_index == dest.matrix_index:
            return False
        if self.is_input_or_output[dest.matrix_index]:
            return False   # inputs and outputs keep their sizes
        src_matrix = comp.matrices[src.matrix_index]
        # (float32 product, as Kaldi's BaseFloat arithmetic)
        if src.num_rows < _MIN_PROPORTION * np.float32(self.orig_num_rows[src.matrix_index]):
            return False
        # The source is the matrix minus some final rows; the destination
        # range reaches the last row of its matrix.
        return (src.col_offset == 0 and src.num_cols == src_matrix.num_cols
                and src.row_offset == 0 and src.num_rows < src_matrix.num_rows
                and dest.row_offset + dest.num_rows == self.orig_num_rows[dest.matrix_index])

    def extend(self, dest_submatrix: int, src_submatrix: int) -> tuple[int, int]:
        """Grow the destination matrix and return the new (dest, src)
        submatrices of the widened copy.  Allocation commands are fixed later
        by :meth:`fix_computation`."""
        comp = self.computation
        src = comp.submatrices[src_submatrix]
        dest = comp.submatrices[dest_submatrix]
        src_matrix = comp.matrices[src.matrix_index]
        dest_matrix = comp.matrices[dest.matrix_index]
        new_dest_num_rows = dest.row_offset + src_matrix.num_rows
        if new_dest_num_rows > dest_matrix.num_rows:
            dest_matrix.num_rows = new_dest_num_rows
            # a submatrix covering the whole grown matrix
            comp.submatrices.append(SubMatrixInfo(dest.matrix_index, 0, new_dest_num_rows, 0,
                                                  dest_matrix.num_cols))
        comp.submatrices.append(SubMatrixInfo(dest.matrix_index, dest.row_offset,
                                              src_matrix.num_rows, dest.col_offset,
                                              dest.num_cols))
        new_dest = len(comp.submatrices) - 1
        comp.submatrices.append(SubMatrixInfo(src.matrix_index, 0, src_matrix.num_rows, 0,
                                              src_matrix.num_cols))
        return new_dest, len(comp.submatrices) - 1

    def extend_matrices(self) -> None:
        commands = self.computation.commands
        changed = False
        for c, command in enumerate(commands):
            if command.command_type is T.MATRIX_COPY and command.alpha == 1.0 \
                    and self.can_be_extended(command.arg1, command.arg2):
                dest, src = self.extend(command.arg1, command.arg2)
                commands[c] = command.with_args(arg1=dest, arg2=src)
                changed = True
        if changed:
            self.fix_computation()

    def fix_computation(self) -> None:
        """Point allocations, deallocations and whole-matrix zeroings at the
        whole (grown) matrices, fix the debug info, renumber."""
        comp = self.computation
        whole = comp.whole_submatrices()
        commands = comp.commands
        for c, command in enumerate(commands):
            t = command.command_type
            if t is T.ALLOC_MATRIX or t is T.DEALLOC_MATRIX:
                s = command.arg1
                m = comp.submatrices[s].matrix_index
                if whole[m] != s:
                    if not (comp.submatrices[s] == comp.submatrices[whole[m]]
                            or self.orig_num_rows[m] != comp.matrices[m].num_rows):
                        raise PynnetError(f"extend_matrices: c{c} does not allocate a whole "
                                          "matrix (code error)")
                    commands[c] = command.with_args(arg1=whole[m])
            elif t is T.SET_CONST and command.alpha == 0.0:
                s = command.arg1
                info = comp.submatrices[s]
                m = info.matrix_index
                if whole[m] != s and info.row_offset == 0 and info.col_offset == 0 \
                        and info.num_cols == comp.matrices[m].num_cols \
                        and info.num_rows == self.orig_num_rows[m]:
                    # it zeroed the whole matrix before it grew: it still should
                    commands[c] = command.with_args(arg1=whole[m])
        if comp.matrix_debug_info:
            self.fix_debug_info()
        renumber_computation(comp)

    def fix_debug_info(self) -> None:
        """Debug info for the new rows: copies of the last rows' cindexes with
        t = kNoTime (they are not real time steps)."""
        comp = self.computation
        for m in range(1, len(comp.matrices)):
            debug = comp.matrix_debug_info[m]
            new_rows = comp.matrices[m].num_rows
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


def extend_matrices(computation: NnetComputation) -> None:
    """Kaldi's ExtendMatrices, in place (see the module docstring)."""
    MatrixExtender(computation).extend_matrices()
