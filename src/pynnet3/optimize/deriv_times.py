"""Limit the times at which derivatives are computed (Kaldi's
DerivativeTimeLimiter and LimitDerivativeTimes, nnet-optimize-utils, plus the
``--max-deriv-time-relative`` handling of Kaldi's Optimize()).

Recurrent models are trained on chunks with extra left/right context, but
one often does not want derivatives to flow into that context (truncated
BPTT).  With ``min_deriv_time`` / ``max_deriv_time`` set, every derivative
row whose ``t`` lies outside ``[min_deriv_time, max_deriv_time]`` is taken
to be zero, and the computation is rewritten to exploit that:

* commands writing only such rows, or reading only such rows, disappear;
* row-wise commands are restricted to the rows that can be nonzero, and row
  index tables lose the entries that point at zero rows;
* Backprop of simple components runs on the kept row range only (or not at
  all), and the memo of a deleted Backprop is no longer stored;
* derivative matrices shrink to the row range that can be nonzero, or
  vanish when nothing but zeroing touches them.

Which rows are derivatives, and their ``t``, comes from the matrix debug
info, so this must be the first pass: it relies on the debug info being
accurate and on every matrix having been zeroed when it was allocated.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compile.computation import Command, CommandType, NnetComputation, SubMatrixInfo
from ..compile.n_stride import cindex_array
from ..nnet.index_lists import CindexList
from ..errors import PynnetError
from ..nnet.components.base import Prop
from .analysis import Analyzer
from .options import INT32_MAX, INT32_MIN
from .renumber import (matrix_is_unused, remove_commands_for_unused_matrix, remove_no_ops,
                       renumber_computation)

if TYPE_CHECKING:
    from .options import OptimizeOptions

__all__ = ["limit_derivative_times", "DerivativeTimeLimiter",
           "limit_derivative_times_from_options"]

T = CommandType
_NO_OP = Command(T.NO_OPERATION)
_P_SIMPLE = int(Prop.SIMPLE)
_P_USES_MEMO = int(Prop.USES_MEMO)


@dataclass(slots=True)
class MatrixPruneInfo:
    """How a matrix's rows sit relative to the derivative time window.

    ``row_begin`` / ``row_end`` (only meaningful when partly inside) are the
    first in-window row and one past the last one; rows between them may
    still be outside the window when the rows are not sorted by time.
    """

    is_deriv: bool = False
    fully_inside_range: bool = False
    partly_inside_range: bool = False
    row_begin: int = 0
    row_end: int = 0


class DerivativeTimeLimiter:
    """Kaldi's DerivativeTimeLimiter; use :func:`limit_derivative_times`."""

    def __init__(self, nnet: Any, min_deriv_time: int, max_deriv_time: int,
                 computation: NnetComputation) -> None:
        self.nnet = nnet
        self.min_deriv_time = int(min_deriv_time)
        self.max_deriv_time = int(max_deriv_time)
        self.computation = computation
        self.whole_submatrices: list[int] = []
        self.matrix_prune_info: list[MatrixPruneInfo] = []
        # Per submatrix of the original computation: itself when it lies inside
        # the window, 0 when outside, else a new submatrix of its in-window rows.
        self.submatrix_map: list[int] = []
        # submatrix_map for derivative submatrices, identity for the others.
        self.submatrix_map_if_deriv: list[int] = []
        self.memos_to_delete: set[int] = set()
        # Row-keep flags of all matrices, flattened: matrix m's row r is at
        # _row_start[m] + r.  Rows of non-derivative matrices are always kept.
        self._row_kept = np.zeros(0, dtype=bool)
        self._row_start = np.zeros(1, dtype=np.int64)
        # Submatrix tables (matrix, row offset, num rows) as arrays, rebuilt
        # when submatrices have been added since.
        self._sub_cache: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    # -- driver ----------------------------------------------------------------
    def limit_deriv_times(self) -> None:
        if self.max_deriv_time < self.min_deriv_time:
            raise PynnetError(f"max-deriv-time {self.max_deriv_time} < min-deriv-time "
                              f"{self.min_deriv_time}")
        if self.min_deriv_time == INT32_MIN and self.max_deriv_time == INT32_MAX:
            return   # nothing to limit
        comp = self.computation
        self.whole_submatrices = comp.whole_submatrices()
        self.compute_matrix_prune_info()
        self.compute_submatrix_maps()
        self.modify_commands()
        self.prune_matrices()
        remove_no_ops(comp)
        self.remove_unused_memos()
        renumber_computation(comp)

    # -- set-up ------------------------------------------------------------------
    def compute_matrix_prune_info(self) -> None:
        comp = self.computation
        num_matrices = len(comp.matrices)
        if len(comp.matrix_debug_info) != num_matrices:
            raise PynnetError("limiting derivative times requires the matrix debug info")
        self.matrix_prune_info = [MatrixPruneInfo()]
        kept_parts = [np.zeros(0, dtype=bool)]
        for m in range(1, num_matrices):
            debug = comp.matrix_debug_info[m]
            num_rows = comp.matrices[m].num_rows
            if len(debug.cindexes) != num_rows:
                raise PynnetError(f"debug info of matrix m{m} has {len(debug.cindexes)} "
                                  f"cindexes for {num_rows} rows")
            t = cindex_array(debug.cindexes)[:, 2].astype(np.int64)
            inside = (t >= self.min_deriv_time) & (t <= self.max_deriv_time)
            info = MatrixPruneInfo(is_deriv=debug.is_deriv)
            rows = np.flatnonzero(inside)
            if len(rows) == 0:
                pass   # completely outside
            elif rows[0] == 0 and rows[-1] == num_rows - 1:
                info.fully_inside_range = True
            else:
                info.partly_inside_range = True
                info.row_begin = int(rows[0])
                info.row_end = int(rows[-1]) + 1
            self.matrix_prune_info.append(info)
            kept_parts.append(inside if debug.is_deriv else np.ones(num_rows, dtype=bool))
        self._row_kept = np.concatenate(kept_parts)
        self._row_start = np.zeros(num_matrices + 1, dtype=np.int64)
        np.cumsum([len(p) for p in kept_parts], out=self._row_start[1:])

    def compute_submatrix_maps(self) -> None:
        comp = self.computation
        num_submatrices = len(comp.submatrices)
        self.submatrix_map = [0] * num_submatrices
        self.submatrix_map_if_deriv = [0] * num_submatrices
        for s in range(1, num_submatrices):
            info = comp.submatrices[s]
            prune = self.matrix_prune_info[info.matrix_index]
            if prune.fully_inside_range:
                mapped = s
            elif not prune.partly_inside_range:
                mapped = 0
            else:
                begin = max(prune.row_begin, info.row_offset)
                end = min(prune.row_end, info.row_offset + info.num_rows)
                if end <= begin:
                    mapped = 0
                else:
                    mapped = comp.new_submatrix(s, begin - info.row_offset, end - begin, 0, -1)
            self.submatrix_map[s] = mapped
            self.submatrix_map_if_deriv[s] = mapped if prune.is_deriv else s

    # -- helpers -----------------------------------------------------------------
    def _sub_arrays(self, needed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(matrix, row offset, num rows) of the submatrices as arrays, built
        once the submatrix maps exist and rebuilt only when a submatrix at or
        beyond the cached ones is asked for (the submatrices that narrowed
        matrix commands add later never appear in index tables)."""
        subs = self.computation.submatrices
        if self._sub_cache is None or needed >= self._sub_cache[0]:
            table = np.array([(s.matrix_index, s.row_offset, s.num_rows) for s in subs],
                             dtype=np.int64).reshape(-1, 3)
            self._sub_cache = (len(subs), table[:, 0], table[:, 1], table[:, 2])
        return self._sub_cache[1], self._sub_cache[2], self._sub_cache[3]

    def rows_kept(self, submatrices: np.ndarray | int, rows: np.ndarray) -> np.ndarray:
        """Kaldi's RowIsKept, vectorised: whether row ``rows[i]`` of submatrix
        ``submatrices[i]`` (or of one submatrix) is a row that may be nonzero
        (always true for rows of non-derivative matrices)."""
        if isinstance(submatrices, (int, np.integer)):
            info = self.computation.submatrices[int(submatrices)]
            if submatrices <= 0 or (len(rows) and (rows.min() < 0 or rows.max() >= info.num_rows)):
                raise PynnetError("row index out of range of its submatrix (code error)")
            return self._row_kept[self._row_start[info.matrix_index] + info.row_offset + rows]
        if not len(rows):
            return np.zeros(0, dtype=bool)
        mat, offset, num_rows = self._sub_arrays(int(submatrices.max()))
        if (rows < 0).any() or (rows >= num_rows[submatrices]).any() or (submatrices <= 0).any():
            raise PynnetError("row index out of range of its submatrix (code error)")
        return self._row_kept[self._row_start[mat[submatrices]] + offset[submatrices] + rows]

    def get_prune_values(self, initial_submatrix: int, new_submatrix: int) -> tuple[int, int]:
        """Rows removed at the start and at the end when ``initial_submatrix``
        was narrowed to ``new_submatrix`` (same matrix)."""
        subs = self.computation.submatrices
        if initial_submatrix <= 0 or new_submatrix <= 0:
            raise PynnetError("get_prune_values: empty submatrix (code error)")
        a, b = subs[initial_submatrix], subs[new_submatrix]
        if a.matrix_index != b.matrix_index:
            raise PynnetError("get_prune_values: different matrices (code error)")
        left = b.row_offset - a.row_offset
        right = a.num_rows - b.num_rows - left
        if left < 0 or right < 0:
            raise PynnetError("get_prune_values: not a narrowing (code error)")
        return left, right

    # -- rewriting the commands ------------------------------------------------------
    def modify_commands(self) -> None:
        commands = self.computation.commands
        for c in range(len(commands)):
            commands[c] = self.modify_command(commands[c])

    def modify_command(self, command: Command) -> Command:
        t = command.command_type
        if t in (T.ALLOC_MATRIX, T.DEALLOC_MATRIX, T.SET_CONST, T.SWAP_MATRIX):
            return command   # sizes are dealt with in prune_matrices()
        if t is T.PROPAGATE:
            # Statistics are not stored for outputs entirely outside the window
            # (as Kaldi; it makes little difference).
            if self.submatrix_map[command.arg4] == 0:
                return command.with_args(arg6=0)
            return command
        if t is T.BACKPROP or t is T.BACKPROP_NO_MODEL_UPDATE:
            return self.map_backprop_command(command)
        if t is T.MATRIX_COPY or t is T.MATRIX_ADD:
            return self.map_simple_matrix_command(command)
        if t is T.COPY_ROWS or t is T.ADD_ROWS:
            return self.map_indexes_command(command)
        if t in (T.COPY_ROWS_MULTI, T.COPY_TO_ROWS_MULTI, T.ADD_ROWS_MULTI, T.ADD_TO_ROWS_MULTI):
            return self.map_indexes_multi_command(command)
        if t is T.ADD_ROW_RANGES:
            return self.map_add_row_ranges_command(command)
        if t in (T.ACCEPT_INPUT, T.PROVIDE_OUTPUT, T.NO_OPERATION, T.NO_OPERATION_PERMANENT,
                 T.NO_OPERATION_MARKER):
            return command
        raise PynnetError(f"limit_derivative_times: unexpected command type {t.kaldi_name}")

    def map_backprop_command(self, command: Command) -> Command:
        properties = int(self.nnet.get_component(command.arg1).properties())
        if not properties & _P_SIMPLE:
            # Non-simple components would need their precomputed indexes
            # recomputed for fewer rows; Kaldi leaves them alone.
            return command
        m = self.submatrix_map
        in_value, out_value = m[command.arg3], m[command.arg4]
        out_deriv, in_deriv = m[command.arg5], m[command.arg6]
        if out_deriv == 0:
            if in_deriv != 0 or in_value != 0 or out_value != 0:
                raise PynnetError("backprop whose output derivative is outside the time "
                                  "window but whose other matrices are not (code error)")
            if command.arg7 > 0:
                self.memos_to_delete.add(command.arg7)
            return _NO_OP
        if out_deriv != command.arg5 and not properties & _P_USES_MEMO:
            # (a memo describes all rows, so memo users keep their rows)
            return command.with_args(arg3=in_value, arg4=out_value, arg5=out_deriv,
                                     arg6=in_deriv)
        return command

    def map_simple_matrix_command(self, c: Command) -> Command:
        s1, s2 = c.arg1, c.arg2
        m1, m2 = self.submatrix_map_if_deriv[s1], self.submatrix_map_if_deriv[s2]
        if m1 == s1 and m2 == s2:
            return c
        if m1 == 0 or m2 == 0:
            return _NO_OP
        orig_num_rows = self.computation.submatrices[s1].num_rows
        left1, right1 = self.get_prune_values(s1, m1)
        left2, right2 = self.get_prune_values(s2, m2)
        if left1 == left2 and right1 == right2:
            return c.with_args(arg1=m1, arg2=m2)
        # The two sides were narrowed differently: keep the rows both keep.
        left, right = max(left1, left2), max(right1, right2)
        if left + right >= orig_num_rows:
            return _NO_OP
        num_rows = orig_num_rows - left - right
        comp = self.computation
        return c.with_args(arg1=comp.new_submatrix(s1, left, num_rows, 0, -1),
                           arg2=comp.new_submatrix(s2, left, num_rows, 0, -1))

    def map_indexes_command(self, c: Command) -> Command:
        """CopyRows / AddRows.  Making a CopyRows whose source or destination
        is all zero a no-op is right only because this is the first pass:
        the destination was zeroed and nothing nonzero was written before."""
        out_sub, in_sub = c.arg1, c.arg2
        in_mapped = self.submatrix_map_if_deriv[in_sub]
        out_mapped = self.submatrix_map_if_deriv[out_sub]
        if in_mapped == 0 or out_mapped == 0:
            return _NO_OP
        comp = self.computation
        old = comp.indexes[c.arg3].astype(np.int64)
        left_in, _ = self.get_prune_values(in_sub, in_mapped)
        left_out, _ = self.get_prune_values(out_sub, out_mapped)
        num_in = comp.submatrices[in_mapped].num_rows
        num_out = comp.submatrices[out_mapped].num_rows
        orig = old[left_out:left_out + num_out]
        valid = orig >= 0
        keep = valid.copy()
        keep[valid] = self.rows_kept(in_sub, orig[valid])
        keep &= self.rows_kept(out_mapped, np.arange(num_out, dtype=np.int64))
        if not keep.any():
            return _NO_OP
        new = np.where(keep, orig - left_in, -1)
        if (new[keep] < 0).any() or (new[keep] >= num_in).any():
            raise PynnetError("map_indexes_command: mapped row out of range (code error)")
        return c.with_args(arg1=out_mapped, arg2=in_mapped, arg3=comp.add_indexes(new))

    def map_indexes_multi_command(self, c: Command) -> Command:
        dest, k = c.arg1, c.arg2
        dest_mapped = self.submatrix_map_if_deriv[dest]
        if dest_mapped == 0:
            return _NO_OP
        comp = self.computation
        left, _ = self.get_prune_values(dest, dest_mapped)
        num_rows = comp.submatrices[dest_mapped].num_rows
        old = comp.indexes_multi[k]
        new = old[left:left + num_rows].astype(np.int64)
        subs, rows = new[:, 0], new[:, 1]
        valid = subs != -1
        keep = valid.copy()
        keep[valid] = self.rows_kept(subs[valid], rows[valid])
        keep &= self.rows_kept(dest_mapped, np.arange(num_rows, dtype=np.int64))
        if not keep.any():
            return _NO_OP
        new[valid & ~keep] = -1
        # Point the kept pairs at the narrowed source submatrices.
        sub_map = np.asarray(self.submatrix_map_if_deriv, dtype=np.int64)
        mapped_subs = sub_map[subs[keep]]
        if (mapped_subs == 0).any():
            raise PynnetError("map_indexes_multi_command: kept row in a removed submatrix "
                              "(code error)")
        _, offset, sub_rows = self._sub_arrays(int(max(mapped_subs.max(), subs[keep].max())))
        mapped_rows = rows[keep] - (offset[mapped_subs] - offset[subs[keep]])
        if (mapped_rows < 0).any() or (mapped_rows >= sub_rows[mapped_subs]).any():
            raise PynnetError("map_indexes_multi_command: mapped row out of range (code error)")
        new[keep, 0] = mapped_subs
        new[keep, 1] = mapped_rows
        if dest_mapped == dest and np.array_equal(new, old):
            return c
        return c.with_args(arg1=dest_mapped, arg2=comp.add_indexes_multi(new))

    def map_add_row_ranges_command(self, c: Command) -> Command:
        dest, src = c.arg1, c.arg2
        dest_mapped = self.submatrix_map_if_deriv[dest]
        src_mapped = self.submatrix_map_if_deriv[src]
        if dest_mapped == dest and src_mapped == src:
            return c
        if dest_mapped == 0 or src_mapped == 0:
            return _NO_OP
        comp = self.computation
        dest_rows = comp.submatrices[dest_mapped].num_rows
        src_rows = comp.submatrices[src_mapped].num_rows
        dest_left, _ = self.get_prune_values(dest, dest_mapped)
        src_left, _ = self.get_prune_values(src, src_mapped)
        ranges = comp.indexes_ranges[c.arg3][dest_left:dest_left + dest_rows].astype(np.int64)
        start, end = ranges[:, 0].copy(), ranges[:, 1].copy()
        dest_kept = self.rows_kept(dest_mapped, np.arange(dest_rows, dtype=np.int64))
        # Shrink each range to its first and last kept source rows: the first
        # kept row at or after r is next_kept[r], the last at or before r is
        # prev_kept[r] (computed over the source submatrix's rows).
        n_src = comp.submatrices[src].num_rows
        src_kept = self.rows_kept(src, np.arange(n_src, dtype=np.int64))
        pos = np.arange(n_src, dtype=np.int64)
        prev_kept = np.maximum.accumulate(np.where(src_kept, pos, -1)) if n_src else pos
        next_kept = (np.minimum.accumulate(np.where(src_kept, pos, n_src)[::-1])[::-1]
                     if n_src else pos)
        has_range = dest_kept & (start >= 0)
        new_start = np.full(len(start), -1, dtype=np.int64)
        new_end = np.full(len(start), -1, dtype=np.int64)
        nonempty = has_range & (start < end)
        if nonempty.any():
            s0 = next_kept[start[nonempty]]
            e0 = prev_kept[end[nonempty] - 1] + 1
            shrunk = s0 < e0
            idx = np.flatnonzero(nonempty)[shrunk]
            new_start[idx] = s0[shrunk] - src_left
            new_end[idx] = e0[shrunk] - src_left
        # Kept destination rows whose range is (-1, -1) stay as they are;
        # ranges that became empty are (-1, -1).
        negative = dest_kept & (start < 0)
        new_start[negative] = start[negative]
        new_end[negative] = end[negative]
        kept_rows = has_range & (new_start >= 0)
        if not kept_rows.any():
            return _NO_OP
        if (new_end[kept_rows] > src_rows).any() or \
                (new_start[kept_rows] >= new_end[kept_rows]).any():
            raise PynnetError("map_add_row_ranges_command: range out of range (code error)")
        new = np.stack([new_start, new_end], axis=1)
        return c.with_args(arg1=dest_mapped, arg2=src_mapped,
                           arg3=comp.add_indexes_ranges(new))

    # -- shrinking the matrices ----------------------------------------------------
    def can_limit_matrix(self, analyzer: Analyzer, m: int) -> bool:
        """Whether rows of derivative matrix m outside its kept row range are
        touched by nothing but SetConst (then the matrix can shrink)."""
        s_whole = self.whole_submatrices[m]
        s_mapped = self.submatrix_map[s_whole]
        if s_mapped == 0 or s_mapped == s_whole:
            raise PynnetError("can_limit_matrix: matrix not partly inside (code error)")
        variables = analyzer.variables
        whole = variables.variables_for_submatrix(s_whole)
        mapped = set(variables.variables_for_submatrix(s_mapped))
        excluded = [v for v in whole if v not in mapped]
        if len(excluded) != len(whole) - len(mapped):
            raise PynnetError("can_limit_matrix: variables not nested (code error)")
        commands = self.computation.commands
        table = analyzer.variable_accesses
        for v in excluded:
            for access in table[v]:
                if commands[access.command_index].command_type is not T.SET_CONST:
                    return False
        return True

    def limit_matrices(self, will_limit: list[bool]) -> None:
        comp = self.computation
        subs = comp.submatrices
        for s in range(1, len(subs)):
            info = subs[s]
            m = info.matrix_index
            if not will_limit[m]:
                continue
            prune = self.matrix_prune_info[m]
            new_num_rows = prune.row_end - prune.row_begin
            if not (prune.partly_inside_range and 0 < new_num_rows < comp.matrices[m].num_rows):
                raise PynnetError("limit_matrices: bad prune info (code error)")
            new_row_begin = info.row_offset - prune.row_begin
            if new_row_begin >= 0 and info.num_rows + new_row_begin <= new_num_rows:
                subs[s] = SubMatrixInfo(m, new_row_begin, info.num_rows, info.col_offset,
                                         info.num_cols)
            elif comp.is_whole_matrix(s):
                # Still used by allocation and deallocation: the whole new matrix.
                subs[s] = SubMatrixInfo(m, 0, new_num_rows, 0, info.num_cols)
            else:
                # Never used any more (the commands were rewritten); a valid
                # but useless 1x1 shape that would fail loudly if it were.
                subs[s] = SubMatrixInfo(m, 0, 1, 0, 1)
        for m in range(1, len(comp.matrices)):
            if not will_limit[m]:
                continue
            prune = self.matrix_prune_info[m]
            if comp.matrix_debug_info:
                debug = comp.matrix_debug_info[m]
                arr = cindex_array(debug.cindexes)
                debug.cindexes = CindexList(np.ascontiguousarray(
                    arr[prune.row_begin:prune.row_end]))
            comp.matrices[m].num_rows = prune.row_end - prune.row_begin

    def prune_matrices(self) -> None:
        comp = self.computation
        analyzer = Analyzer(self.nnet, comp)
        num_matrices = len(comp.matrices)
        if len(self.whole_submatrices) != num_matrices:
            raise PynnetError("prune_matrices: matrices changed (code error)")
        will_limit = [False] * num_matrices
        for m in range(1, num_matrices):
            accesses = analyzer.matrix_accesses[m]
            prune = self.matrix_prune_info[m]
            if (prune.fully_inside_range or accesses.is_input or accesses.is_output
                    or not comp.matrix_debug_info[m].is_deriv):
                continue
            if not prune.partly_inside_range:
                if matrix_is_unused(analyzer, comp, m):
                    remove_commands_for_unused_matrix(analyzer, m, comp)
            elif self.can_limit_matrix(analyzer, m):
                will_limit[m] = True
        if any(will_limit):
            self.limit_matrices(will_limit)

    def remove_unused_memos(self) -> None:
        if not self.memos_to_delete:
            return
        commands = self.computation.commands
        removed = 0
        for c, command in enumerate(commands):
            if command.command_type is T.PROPAGATE and command.arg5 in self.memos_to_delete:
                commands[c] = command.with_args(arg5=0)
                removed += 1
        if removed != len(self.memos_to_delete):
            raise PynnetError("remove_unused_memos: memo without its Propagate (code error)")


def limit_derivative_times(nnet: Any, min_deriv_time: int, max_deriv_time: int,
                           computation: NnetComputation) -> None:
    """Kaldi's LimitDerivativeTimes, in place: derivatives at ``t`` outside
    ``[min_deriv_time, max_deriv_time]`` are treated as zero.  Does nothing
    when both are at their 'unset' values (INT32_MIN, INT32_MAX).  Needs the
    matrix debug info; must run before any other optimization."""
    DerivativeTimeLimiter(nnet, min_deriv_time, max_deriv_time, computation).limit_deriv_times()


def limit_derivative_times_from_options(options: "OptimizeOptions", nnet: Any,
                                        max_output_time: int | None,
                                        computation: NnetComputation) -> None:
    """The first step of Kaldi's Optimize(): ``--max-deriv-time-relative``
    (when set) becomes ``max_output_time + max_deriv_time_relative``
    (``max_output_time`` as :func:`pynnet3.optimize.max_output_time_in_request`
    computes it), and the limiter runs if either bound is set.  Not gated by
    ``options.optimize``, as in Kaldi."""
    max_deriv_time = options.effective_max_deriv_time(max_output_time)
    if options.min_deriv_time != INT32_MIN or max_deriv_time != INT32_MAX:
        limit_derivative_times(nnet, options.min_deriv_time, max_deriv_time, computation)
