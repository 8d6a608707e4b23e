"""Shortcut compilation: compile two sequences, stretch the result to N.

A request for N > 2 sequences whose inputs and outputs are laid out
regularly in n (see :mod:`pynnet3.compile.n_stride`) is *decomposable*: the
same request with only n = 0 and n = 1 (the *mini request*) compiles to a
computation with the same commands, and every matrix of the full computation
is that of the mini computation with each pair of n values widened to N.
Expanding is linear in the computation's size and needs no graph work, so
a 64-sequence training request costs about as much as a 2-sequence one
(Kaldi's CachingOptimizingCompiler::CompileViaShortcut).

Ported from Kaldi's nnet-optimize-utils.cc (RequestIsDecomposable,
ExpandComputation / class ComputationExpander) and nnet-optimize.cc
(CompileViaShortcut); every per-row loop of Kaldi is a NumPy operation here.
"""
from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ..errors import PynnetError
from ..nnet.index import Index
from ..nnet.index_lists import gc_paused
from .computation import (Command, CommandType, MatrixDebugInfo, MatrixInfo, NnetComputation,
                          PrecomputedIndexesInfo, SubMatrixInfo)
from ..nnet.index_lists import CindexList, IndexList
from .n_stride import (CINDEX_N_COL, INDEX_N_COL, cindex_array, convert_num_n_values,
                       expand_rows_by_n, find_n_stride, index_array, widened_tiling)
from .request import ComputationRequest, IoSpecification

__all__ = ["request_is_decomposable", "expand_computation", "compile_via_shortcut",
           "ComputationExpander", "ShortcutError"]


class ShortcutError(PynnetError):
    """The mini computation lacks the structure that expansion needs.

    Kaldi stops with "Try compiling with --use-shortcut=false"; the same
    advice applies (compile the full request directly).
    """


# -- is the request decomposable? -------------------------------------------

def io_specification_is_decomposable(io_spec: IoSpecification
                                     ) -> tuple[bool, IoSpecification | None, int]:
    """(decomposable, mini io-spec with n in {0, 1}, number of n values).

    Two or fewer n values are never decomposable: there would be nothing to
    gain by compiling a two-sequence version first.
    """
    if len(io_spec.indexes) == 0:
        raise PynnetError(f"empty Indexes for '{io_spec.name}' in computation request")
    num_n_values = io_spec.indexes[-1][0] + 1
    if num_n_values <= 2:
        return False, None, num_n_values
    arr = index_array(io_spec.indexes)
    n_stride = find_n_stride(arr, INDEX_N_COL, full_check=True)
    if n_stride == 0:
        return False, None, num_n_values
    mini = convert_num_n_values(n_stride, num_n_values, 2, arr, INDEX_N_COL)
    return True, IoSpecification(io_spec.name, IndexList(mini).items(), io_spec.has_deriv), \
        num_n_values


def request_is_decomposable(request: ComputationRequest
                            ) -> tuple[bool, ComputationRequest | None, int]:
    """Kaldi's RequestIsDecomposable: (ok, mini_request, num_n_values).

    Decomposable means every input and output has n values 0 .. N-1 for the
    same N > 2, with a regular n-stride.  When not decomposable the result is
    ``(False, None, 0)``.
    """
    if not request.inputs or not request.outputs:
        raise PynnetError("computation request without inputs or outputs")
    mini = ComputationRequest(need_model_derivative=request.need_model_derivative,
                              store_component_stats=request.store_component_stats,
                              misc_info=copy.copy(request.misc_info))
    num_n_values = 0
    for dest, ios in ((mini.inputs, request.inputs), (mini.outputs, request.outputs)):
        for io_spec in ios:
            ok, mini_io, this_n = io_specification_is_decomposable(io_spec)
            if not ok:
                return False, None, 0
            if num_n_values == 0:
                num_n_values = this_n
            elif this_n != num_n_values:
                return False, None, 0
            dest.append(mini_io)
    return True, mini, num_n_values


# -- expanding the mini computation -----------------------------------------

@dataclass
class _RowMaps:
    """Per-row facts of all matrices of the mini computation, concatenated.

    Row r of matrix m is global row ``start[m] + r``.
    """

    start: np.ndarray        # [num_matrices + 1] first global row of each matrix
    n: np.ndarray            # [total_rows] the n of each row (0 or 1)
    new_row: np.ndarray      # [total_rows] Kaldi's GetNewMatrixLocationInfo (n=1 -> n=N-1)
    n_stride: np.ndarray     # [num_matrices] n-stride of each matrix (0 for matrix 0)


class ComputationExpander:
    """Kaldi's ComputationExpander: build the N-sequence computation.

    ``computation`` must have been compiled for n in {0, 1} with debug info
    (the cindexes of every matrix), and its precomputed-index entries must
    carry the input/output indexes they were made from.
    """

    def __init__(self, nnet: Any, misc_info: Any, computation: NnetComputation,
                 need_debug_info: bool, num_n_values: int) -> None:
        if num_n_values <= 2:
            raise ValueError("shortcut expansion needs more than 2 n values")
        self.nnet = nnet
        self.misc_info = misc_info
        self.computation = computation
        self.need_debug_info = need_debug_info
        self.num_n_values = num_n_values
        self.expanded = NnetComputation()
        self._cindexes: list[np.ndarray] = []

    def expand(self) -> NnetComputation:
        with gc_paused():  # components' precompute hooks make many small objects
            return self._expand()

    def _expand(self) -> NnetComputation:
        self.init_stride_info()
        self.compute_matrix_info()
        if self.need_debug_info:
            self.compute_debug_info()
        else:
            self.expanded.matrix_debug_info = []
        self.compute_submatrix_info()
        self.compute_precomputed_indexes()
        self.compute_commands()
        self.expanded.need_model_derivative = self.computation.need_model_derivative
        return self.expanded

    # -- strides and row maps ------------------------------------------------
    def init_stride_info(self) -> None:
        """n-stride of every matrix (Kaldi's InitStrideInfo) and the row maps."""
        comp = self.computation
        num_matrices = len(comp.matrices)
        if len(comp.matrix_debug_info) != num_matrices:
            raise ShortcutError("the computation to expand has no debug info (cindexes of its "
                                "matrices); compile it with output_debug_info")
        self._cindexes = [np.zeros((0, 4), dtype=np.int32)]
        strides = np.zeros(num_matrices, dtype=np.int64)
        for m in range(1, num_matrices):
            arr = cindex_array(comp.matrix_debug_info[m].cindexes)
            if arr.shape[0] != comp.matrices[m].num_rows:
                raise ShortcutError(f"matrix m{m}: debug info has {arr.shape[0]} cindexes for "
                                    f"{comp.matrices[m].num_rows} rows")
            self._cindexes.append(arr)
            strides[m] = find_n_stride(arr, CINDEX_N_COL, full_check=True)
            if strides[m] == 0:
                raise ShortcutError(
                    f"matrix m{m}: the computation does not have the regular n structure that "
                    "'shortcut' compilation needs; compile without the shortcut")
        sizes = np.array([a.shape[0] for a in self._cindexes], dtype=np.int64)
        start = np.zeros(num_matrices + 1, dtype=np.int64)
        np.cumsum(sizes, out=start[1:])
        n = np.concatenate([a[:, CINDEX_N_COL] for a in self._cindexes]).astype(np.int64)
        matrix_of_row = np.repeat(np.arange(num_matrices), sizes)
        r = np.arange(start[-1], dtype=np.int64) - start[matrix_of_row]
        s = strides[matrix_of_row]
        # Kaldi's GetNewMatrixLocationInfo, for every row: within a block of
        # 2*s rows the first s have n = 0 and the next s n = 1; in the new
        # block of N*s rows, n = 0 stays put and n = 1 maps to n = N-1 (so
        # the end of a range maps to the end of the widened range).
        safe_s = np.maximum(s, 1)
        block, offset = np.divmod(r, 2 * safe_s)
        old_n, within = np.divmod(offset, safe_s)
        if np.any(old_n != n):
            bad = int(np.flatnonzero(old_n != n)[0])
            raise ShortcutError(f"matrix m{int(matrix_of_row[bad])}: n values are not in "
                                "{0, 1} blocks as the stride implies")
        new_row = block * self.num_n_values * s + within + np.where(
            old_n == 0, 0, self.num_n_values - 1) * s
        self._rows = _RowMaps(start=start, n=n, new_row=new_row, n_stride=strides)

    def _new_matrix_rows(self, m: int) -> np.ndarray:
        return self._rows.new_row[self._rows.start[m]:self._rows.start[m + 1]]

    def compute_matrix_info(self) -> None:
        """Each matrix has its rows multiplied by N/2; columns and stride type stay."""
        comp, N = self.computation, self.num_n_values
        self.expanded.matrices = [MatrixInfo(0, 0)] + [
            MatrixInfo((m.num_rows // 2) * N, m.num_cols, m.stride_type)
            for m in comp.matrices[1:]]

    def compute_debug_info(self) -> None:
        """Cindexes of every expanded matrix.

        They are built on first use (:class:`CindexList` with a factory):
        a 64-sequence training computation has over a million of them and
        the executor never reads them, so eager building would be most of
        the expansion time.
        """
        comp = self.computation
        out = [MatrixDebugInfo(comp.matrix_debug_info[0].is_deriv, [])]
        for m in range(1, len(comp.matrices)):
            factory = functools.partial(
                expand_rows_by_n, self._cindexes[m], CINDEX_N_COL, int(self._rows.n_stride[m]),
                self._new_matrix_rows(m).copy(), self.num_n_values,
                self.expanded.matrices[m].num_rows)
            out.append(MatrixDebugInfo(comp.matrix_debug_info[m].is_deriv, CindexList(
                factory=factory, length=self.expanded.matrices[m].num_rows)))
        self.expanded.matrix_debug_info = out

    def compute_submatrix_info(self) -> None:
        """Row ranges widened: first row (n = 0) to last row (n = 1 -> N-1)."""
        comp, rows = self.computation, self._rows
        subs = comp.submatrices
        mat = np.array([s.matrix_index for s in subs], dtype=np.int64)
        off = np.array([s.row_offset for s in subs], dtype=np.int64)
        num = np.array([s.num_rows for s in subs], dtype=np.int64)
        first = rows.start[mat] + off
        last = first + num - 1
        real = np.arange(len(subs)) > 0
        bad = real & ~((rows.n[first] == 0) & (rows.n[np.where(real, last, 0)] == 1))
        if np.any(bad):
            s = int(np.flatnonzero(bad)[0])
            raise ShortcutError(f"submatrix s{s} = {comp.submatrix_strings()[s]} has strange "
                                "dimensions: its rows do not run from an n = 0 to an n = 1 row")
        new_first = np.where(real, rows.new_row[first], 0)
        new_last = np.where(real, rows.new_row[np.where(real, last, 0)], -1)
        self._sub_matrix = mat
        self._sub_old_offset = off
        self._sub_new_offset = new_first
        self.expanded.submatrices = [SubMatrixInfo(0, 0, 0, 0, 0)] + [
            SubMatrixInfo(s.matrix_index, int(nf), int(nl - nf + 1), s.col_offset, s.num_cols)
            for s, nf, nl in zip(subs[1:], new_first[1:].tolist(), new_last[1:].tolist())]

    # -- precomputed indexes ---------------------------------------------------
    def compute_precomputed_indexes(self) -> None:
        """Ask each component again, with the indexes widened to N sequences.

        The widened input/output indexes are kept in the entry (Kaldi drops
        them) because pynnet3's computation cache recomputes precomputed
        indexes from them instead of serialising component objects.
        """
        comp = self.computation
        num_p = len(comp.component_precomputed_indexes)
        component_index = [-1] * num_p
        need_backprop = [False] * num_p
        for c in comp.commands:
            if c.command_type is CommandType.PROPAGATE and c.arg2 > 0:
                component_index[c.arg2] = c.arg1
            elif c.command_type in (CommandType.BACKPROP, CommandType.BACKPROP_NO_MODEL_UPDATE) \
                    and c.arg2 > 0:
                need_backprop[c.arg2] = True
                # (Kaldi takes the component from the Propagate only; a
                # Backprop names the same one.)
                if component_index[c.arg2] < 0:
                    component_index[c.arg2] = c.arg1
        widened: dict[bytes, IndexList] = {}
        out = [PrecomputedIndexesInfo()]
        for p in range(1, num_p):
            old = comp.component_precomputed_indexes[p]
            if not old.input_indexes or not old.output_indexes:
                raise ShortcutError(f"precomputed_indexes[{p}] of the computation to expand "
                                    "lacks its input/output indexes")
            if component_index[p] < 0:
                raise ShortcutError(f"precomputed_indexes[{p}] is used by no command")
            inputs = self._expand_indexes(old.input_indexes, widened)
            outputs = self._expand_indexes(old.output_indexes, widened)
            component = self.nnet.get_component(component_index[p])
            data = component.precompute_indexes(self.misc_info, inputs, outputs, need_backprop[p])
            if data is None:
                raise ShortcutError(f"component {component_index[p]} returned no precomputed "
                                    "indexes for the expanded computation")
            out.append(PrecomputedIndexesInfo(data, inputs, outputs))
        self.expanded.component_precomputed_indexes = out

    def _expand_indexes(self, indexes: list[Index], cache: dict[bytes, IndexList]
                        ) -> IndexList:
        """Kaldi's ExpandIndexes; identical index lists are widened once.

        The result is an array-backed (read-only) list, shared between the
        entries that widen the same indexes: components that work on arrays
        never make its Index objects, the others make them once, on demand.
        """
        arr = index_array(indexes)
        key = arr.tobytes()
        hit = cache.get(key)
        if hit is not None:
            return hit
        n_stride = find_n_stride(arr, INDEX_N_COL, full_check=False)
        if n_stride == 0:
            raise ShortcutError("precomputed indexes lack the regular n structure")
        # (As a tiling where the layout allows: made into a list on first use.)
        tiling = widened_tiling(n_stride, self.num_n_values, arr, INDEX_N_COL)
        ans = (IndexList.from_tiling(tiling) if tiling is not None else
               IndexList(convert_num_n_values(n_stride, 2, self.num_n_values, arr, INDEX_N_COL)))
        cache[key] = ans
        return ans

    # -- commands --------------------------------------------------------------
    def compute_commands(self) -> None:
        """Commands are copied; those with row-index tables get widened tables."""
        T = CommandType
        new_commands: list[Command] = []
        for c in self.computation.commands:
            t = c.command_type
            if t is T.COPY_ROWS or t is T.ADD_ROWS:
                c = self.expand_rows_command(c)
            elif t in (T.COPY_ROWS_MULTI, T.ADD_ROWS_MULTI, T.COPY_TO_ROWS_MULTI,
                       T.ADD_TO_ROWS_MULTI):
                c = self.expand_rows_multi_command(c)
            elif t is T.ADD_ROW_RANGES:
                c = self.expand_row_ranges_command(c)
            new_commands.append(c)
        self.expanded.commands = new_commands

    def _locate(self, subs: np.ndarray, rows_in_sub: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For rows of submatrices: (n, new row inside the new submatrix, n-stride).

        Kaldi's GetNewSubmatLocationInfo, without its "only for n = 0" gate
        (callers mask on the returned n).
        """
        g = self._rows.start[self._sub_matrix[subs]] + self._sub_old_offset[subs] + rows_in_sub
        return (self._rows.n[g], self._rows.new_row[g] - self._sub_new_offset[subs],
                self._rows.n_stride[self._sub_matrix[subs]])

    def _dest_rows(self, s1: int, num_rows_old: int) -> tuple[np.ndarray, np.ndarray, int]:
        """(mask of destination rows with n = 0, their new row, n-stride of s1)."""
        n1, new_i1, stride1 = self._locate(np.full(num_rows_old, s1),
                                           np.arange(num_rows_old, dtype=np.int64))
        mask = n1 == 0
        return mask, new_i1[mask], int(stride1[0]) if num_rows_old else 1

    def _n_steps(self) -> np.ndarray:
        return np.arange(self.num_n_values, dtype=np.int64)[None, :]

    def expand_rows_command(self, c: Command) -> Command:
        """CopyRows / AddRows: widen the row-index table (Kaldi's ExpandRowsCommand)."""
        old = self.computation.indexes[c.arg3].astype(np.int64)
        s1, s2 = c.arg1, c.arg2
        if old.shape[0] != self.computation.submatrices[s1].num_rows:
            raise ShortcutError("row-index table does not match its destination submatrix")
        mask, new_i1, stride1 = self._dest_rows(s1, old.shape[0])
        i2 = old[mask]
        has_src = i2 >= 0
        new_i1, i2 = new_i1[has_src], i2[has_src]
        n2, new_i2, stride2 = self._locate(np.full(i2.shape[0], s2), i2)
        if np.any(n2 != 0):
            raise ShortcutError("a row with n = 0 is copied from a row with n = 1")
        out = np.full(self.expanded.submatrices[s1].num_rows, -1, dtype=np.int32)
        ns = self._n_steps()
        rows = (new_i1[:, None] + stride1 * ns).ravel()
        out[rows] = (new_i2[:, None] + stride2[:, None] * ns).ravel()
        return replace(c, arg3=self.expanded.add_indexes(out))

    def expand_rows_multi_command(self, c: Command) -> Command:
        """The *RowsMulti commands: widen the (submatrix, row) table."""
        old = self.computation.indexes_multi[c.arg2].astype(np.int64)
        s1 = c.arg1
        if old.shape[0] != self.computation.submatrices[s1].num_rows:
            raise ShortcutError("indexes_multi table does not match its submatrix")
        mask, new_i1, stride1 = self._dest_rows(s1, old.shape[0])
        pairs = old[mask]
        has_src = pairs[:, 0] >= 0
        new_i1, pairs = new_i1[has_src], pairs[has_src]
        n2, new_i2, stride2 = self._locate(pairs[:, 0], pairs[:, 1])
        if np.any(n2 != 0):
            raise ShortcutError("a row with n = 0 is copied from a row with n = 1")
        out = np.full((self.expanded.submatrices[s1].num_rows, 2), -1, dtype=np.int32)
        ns = self._n_steps()
        rows = (new_i1[:, None] + stride1 * ns).ravel()
        out[rows, 0] = np.repeat(pairs[:, 0], self.num_n_values)
        out[rows, 1] = (new_i2[:, None] + stride2[:, None] * ns).ravel()
        return replace(c, arg2=self.expanded.add_indexes_multi(out))

    def expand_row_ranges_command(self, c: Command) -> Command:
        """AddRowRanges: widen the (begin, end) table."""
        old = self.computation.indexes_ranges[c.arg3].astype(np.int64)
        s1, s2 = c.arg1, c.arg2
        if old.shape[0] != self.computation.submatrices[s1].num_rows:
            raise ShortcutError("indexes_ranges table does not match its submatrix")
        mask, new_i1, stride1 = self._dest_rows(s1, old.shape[0])
        ranges = old[mask]
        nonempty = ranges[:, 1] != ranges[:, 0]
        new_i1, ranges = new_i1[nonempty], ranges[nonempty]
        src = np.full(ranges.shape[0], s2)
        n_b, new_b, stride2 = self._locate(src, ranges[:, 0])
        n_l, new_l, _ = self._locate(src, ranges[:, 1] - 1)
        if np.any(n_b != 0) or np.any(n_l != 0) or np.any(new_l < new_b) or np.any(new_b < 0):
            raise ShortcutError("a row range does not lie within the rows with n = 0")
        out = np.full((self.expanded.submatrices[s1].num_rows, 2), -1, dtype=np.int32)
        ns = self._n_steps()
        rows = (new_i1[:, None] + stride1 * ns).ravel()
        out[rows, 0] = (new_b[:, None] + stride2[:, None] * ns).ravel()
        out[rows, 1] = (new_l[:, None] + 1 + stride2[:, None] * ns).ravel()
        return replace(c, arg3=self.expanded.add_indexes_ranges(out))


def expand_computation(nnet: Any, misc_info: Any, mini_computation: NnetComputation,
                       need_debug_info: bool, num_n_values: int) -> NnetComputation:
    """Kaldi's ExpandComputation: the computation for ``num_n_values``
    sequences, from one compiled (and maybe optimized) for n in {0, 1}."""
    return ComputationExpander(nnet, misc_info, mini_computation, need_debug_info,
                               num_n_values).expand()


def compile_via_shortcut(compile_fn: Callable[[ComputationRequest], NnetComputation],
                         nnet: Any, request: ComputationRequest,
                         opts: Any = None) -> NnetComputation | None:
    """Kaldi's CompileViaShortcut: None when the request is not decomposable
    (or ``opts.use_shortcut`` is false), else the expanded computation.

    ``compile_fn`` compiles (and optimizes) the mini request; a caching
    compiler passes its own cached entry point so the mini computation is
    cached like any other.  As in Kaldi the result keeps its debug info.
    """
    if opts is not None and not getattr(opts, "use_shortcut", True):
        return None
    ok, mini_request, num_n_values = request_is_decomposable(request)
    if not ok:
        return None
    mini_computation = compile_fn(mini_request)
    return expand_computation(nnet, request.misc_info, mini_computation, True, num_n_values)
