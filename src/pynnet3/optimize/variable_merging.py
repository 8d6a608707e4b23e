"""Variable merging (Kaldi's VariableMergingOptimizer and
VariableMergingOptimization, nnet-optimize-utils / nnet-optimize).

Two submatrices s1 (of matrix m1) and s2 (of matrix m2 != m1) are candidates
for sharing one piece of memory when some command C

(a) assigns ``s2 = s1`` (MatrixCopy; option remove_assignments),
(b) propagates a component that may work in place from s1 to s2
    (propagate_in_place), or
(c) backpropagates a component that may work in place from output
    derivative s1 to input derivative s2 (backprop_in_place).

*Left-merging* discards m2 and makes s2 a name for s1; *right-merging*
discards m1 and makes s1 a name for s2.  They differ because s1 and s2 may
be parts of larger matrices: the discarded one must be a whole matrix.

A merge is allowed when (Kaldi's conditions, checked in :meth:`may_be_merged`):

* c1: m1 and m2 are not both inputs, nor both outputs;
* c2: if either is an input or output, s1 and s2 are whole matrices;
* c3/c4: the discarded submatrix is a whole matrix;
* c5: no variable of s1 or s2 took part in a merge already in this round;
* c6/c7: a discarded matrix whose stride must equal its number of columns
  is only merged into a whole matrix;

and, for assignments, s2 is first touched (other than by zeroing) at C, s1
is last written before C and last read before s2 is next written (or
freed); for in-place component commands, s2 is first touched at C and s1
last touched at C.

Each round merges what it can with one (stale) analysis, marking what it
touched as dirty; the computation is then renumbered (duplicate submatrices
and the discarded matrices disappear) and a new round runs until none
merges anything.

The rounds work on the array form of the computation
(:class:`~.arrays.ComputationArrays`), analysed directly from the arrays:
per submatrix and per matrix the few access facts the conditions ask about
are computed once per round (analysis.access_summary_arrays), so that each question is a
list look-up.  The conditions themselves are evaluated for all candidate
commands at once at the start of the round; walking the candidates in
order, each allowed one merges unless an earlier merge of the round made
one of its variables dirty -- the same merges as asking
:meth:`VariableMergingOptimizer.may_be_merged` one command at a time (see
``_verdicts``).  The commands and submatrices are written back once, after
the last round.
"""
from __future__ import annotations

from bisect import bisect_right
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compile.computation import CommandType, NnetComputation, StrideType
from .. import fast_paths
from ..errors import ComputationCheckError
from ..log import vlog
from ..numba_cache import lazy_njit
from ..nnet.components.base import Prop
from ..nnet.properties_cache import component_properties_cached, nnet_component_properties
from .accesses import (_BadArgument, _matrix_lifetimes, access_records_from_table,
                       properties_array)
from .analysis import Analyzer, _remember_analysis, access_summary_arrays
from .variables import ComputationVariables
from .arrays import ComputationArrays, computation_and_arrays
from .renumber import renumber_arrays

if TYPE_CHECKING:
    from .options import OptimizeOptions

__all__ = ["VariableMergingOptimizer", "variable_merging_optimization"]

T = CommandType
_P_PROPAGATE_IN_PLACE = int(Prop.PROPAGATE_IN_PLACE)
_P_BACKPROP_IN_PLACE = int(Prop.BACKPROP_IN_PLACE)
_T_MATRIX_COPY = int(T.MATRIX_COPY)
_T_PROPAGATE = int(T.PROPAGATE)
_T_BACKPROP = int(T.BACKPROP)
_T_BACKPROP_NO_MODEL_UPDATE = int(T.BACKPROP_NO_MODEL_UPDATE)
_T_SET_CONST = int(T.SET_CONST)
_T_ACCEPT_INPUT = int(T.ACCEPT_INPUT)
_T_NO_OPERATION = int(T.NO_OPERATION)
# Per command type: can a command of this type lead to a merge?
_IS_CANDIDATE = np.zeros(len(T), dtype=bool)
_IS_CANDIDATE[[_T_MATRIX_COPY, _T_PROPAGATE, _T_BACKPROP, _T_BACKPROP_NO_MODEL_UPDATE]] = True


class _RoundAnalysis:
    """The facts one round of merging asks about, from the arrays as they
    are at the start of the round (Kaldi's Analyzer and
    ComputationAnalysis answer from the same stale state).  Per submatrix:
    first non-zeroing access, last access, last write (lists indexed by
    submatrix); per matrix: allocating / deallocating command, input /
    output, first access, first non-zeroing access."""

    def __init__(self, nnet: Any, st: ComputationArrays, cache: dict[Any, Any]) -> None:
        table = st.table
        n = len(table)
        self.num_commands = n
        sizes = st.sizes
        hint = st.variables_hint
        if (hint is not None and np.array_equal(hint[0], st.sub)
                and np.array_equal(hint[1], sizes)):
            # (The analysis before the passes made them of these very tables.)
            variables = hint[2]
        else:
            variables = ComputationVariables()
            variables.init_from_tables(st.sub, sizes)
        self.variables = variables
        num_matrices = len(sizes)
        cmd, sub, flag, side_effects = access_records_from_table(
            nnet, table, st.indexes, st.indexes_multi, len(st.sub), cache)
        # (For the Analyzer of the final state: see variable_merging_optimization.)
        self.records = (table, cmd, sub, flag, side_effects)
        lifetimes = _matrix_lifetimes(table, variables, num_matrices)
        if lifetimes is None:
            raise _BadArgument()
        self.allocate, self.deallocate, self.is_input, self.is_output = lifetimes
        zeroing = (table[:, 0] == _T_SET_CONST) & (st.alpha == 0.0)
        (sub_first_nt, sub_last, sub_last_write, matrix_first, matrix_first_nt,
         write_keys) = access_summary_arrays(cmd, sub, flag, variables.variables_flat,
                                             variables.variables_offsets,
                                             variables.matrix_to_variable_index, zeroing, n)
        self.arrays = (sub_first_nt, sub_last, sub_last_write)
        self.sub_first_nontrivial: list[int] = sub_first_nt.tolist()
        self.sub_last: list[int] = sub_last.tolist()
        self.sub_last_write: list[int] = sub_last_write.tolist()
        self.matrix_first: list[int] = matrix_first.tolist()
        self.matrix_first_nontrivial: list[int] = matrix_first_nt.tolist()
        self._write_keys: list[int] = write_keys.tolist()
        self.submatrix_to_matrix: list[int] = st.sub[:, 0].tolist()

    def first_nontrivial_access(self, s: int) -> int:
        return self.sub_first_nontrivial[s]

    def last_access(self, s: int) -> int:
        return self.sub_last[s]

    def last_write_access(self, s: int) -> int:
        if self.is_output[self.submatrix_to_matrix[s]]:
            return self.num_commands
        return self.sub_last_write[s]

    def data_invalidated_command(self, c: int, s: int) -> int:
        ans = self.deallocate[self.submatrix_to_matrix[s]]
        if ans == -1:
            ans = self.num_commands
        # The first write after c to any variable of s (write keys are
        # variable * (num_commands + 1) + command, sorted).
        keys, base = self._write_keys, self.num_commands + 1
        for v in self.variables.variables_for_submatrix(s):
            i = bisect_right(keys, v * base + c)
            if i < len(keys) and keys[i] < (v + 1) * base:
                ans = min(ans, keys[i] - v * base)
        return ans


class VariableMergingOptimizer:
    """One round of merging (Kaldi's class of the same name).  Call
    :meth:`merge_variables` once; if it returns True, another instance may
    find more merges.  Given a computation, the round's result is written
    back to it; given a :class:`ComputationArrays`, the arrays are updated
    (see :func:`variable_merging_optimization`)."""

    def __init__(self, config: "OptimizeOptions", nnet: Any,
                 computation: NnetComputation | ComputationArrays,
                 cache: dict[Any, Any] | None = None) -> None:
        self.config = config
        self.nnet = nnet
        self.computation: NnetComputation | None
        self.computation, self.arrays = computation_and_arrays(computation)
        st = self.arrays
        try:
            self.analysis = _RoundAnalysis(nnet, st, cache if cache is not None else {})
        except _BadArgument:
            # Let the full analysis find and name what is wrong.
            probe = NnetComputation() if self.computation is None else self.computation
            if self.computation is None:
                st.write_back(probe)
            Analyzer(nnet, probe)
            raise ComputationCheckError("variable merging: malformed computation") from None
        self.variables = self.analysis.variables
        self.variable_dirty = [False] * self.variables.num_variables
        # The live state of the round: command types, submatrices, matrix
        # sizes (the analysis keeps the state at the start of the round).
        self._types: list[int] = st.table[:, 0].tolist()
        self._alpha: list[float] = st.alpha.tolist()
        self._subs: list[list[int]] = st.sub.tolist()
        sizes = st.sizes.tolist()
        self._matrix_rows = [r for r, _ in sizes]
        self._matrix_cols = [c for _, c in sizes]
        matrix_to_submatrix: list[list[int]] = [[] for _ in sizes]
        for s, row in enumerate(self._subs[1:], start=1):
            matrix_to_submatrix[row[0]].append(s)
        self.matrix_to_submatrix = matrix_to_submatrix
        # Edits made by do_merge, put into the arrays at the end of the round.
        self._no_ops: list[int] = []
        self._moved: set[int] = set()
        self._already_called = False

    # -- the round ---------------------------------------------------------------
    def merge_variables(self) -> bool:
        if self._already_called:
            raise RuntimeError("merge_variables() may be called only once per instance")
        self._already_called = True
        config = self.config
        if not config.optimize:
            return False
        st = self.arrays
        merged = False
        # (A few candidates are quicker one by one, Kaldi's way, than through
        # the thirty-odd array operations of _verdicts; the merges are the same.)
        fp = fast_paths.current()
        jit = (fp.analysis_loop_loaded(_verdicts_kernel, len(self._types))
               or (fp.analysis_jit and len(st.sub) >= fp.analysis_jit_from))
        small = len(self._types) < 3 * fp.analysis_python_below
        verdicts = (self._verdicts_jit() if jit else None if small else self._verdicts())
        if verdicts is not None:
            # Only candidates allowed at the start of the round can merge,
            # and they do unless a merge before them in this round touched
            # them (see _verdicts).
            for command_index, s1, s2, left in verdicts:
                if self._is_clean(s1) and self._is_clean(s2):
                    if left:
                        self.do_merge(command_index, s1, s2)
                    else:
                        self.do_merge(command_index, s2, s1)
                    merged = True
        else:
            merged = self._merge_one_by_one()
        if merged:
            self._apply_edits()
            renumber_arrays(st)
            st.remove_no_ops()
            if self.computation is not None:
                st.write_back(self.computation)
        return merged

    def _is_clean(self, s: int) -> bool:
        dirty = self.variable_dirty
        for v in self.variables.variables_for_submatrix(s):
            if dirty[v]:
                return False
        return True

    def _sources_and_destinations(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The candidate commands (those that may lead to a merge, in order)
        and their s1 (source) and s2 (destination) submatrices, -1 where the
        options or the component rule the command out."""
        config = self.config
        table = self.arrays.table
        # Only these command types can lead to a merge (a merge never turns
        # one of them into another, and never changes their arguments).
        candidates = np.flatnonzero(_IS_CANDIDATE[table[:, 0]])
        rows = table[candidates]
        t = rows[:, 0]
        s1 = np.full(len(candidates), -1, dtype=np.int64)
        s2 = np.full(len(candidates), -1, dtype=np.int64)
        copy = t == _T_MATRIX_COPY
        if config.remove_assignments:
            s2[copy], s1[copy] = rows[copy, 1], rows[copy, 2]     # s2 is written
        props = np.zeros(len(candidates), dtype=np.int64)
        component = ~copy
        props[component] = properties_array(self.nnet)[rows[component, 1]]
        if config.propagate_in_place:
            sel = (t == _T_PROPAGATE) & ((props & _P_PROPAGATE_IN_PLACE) != 0)
            s1[sel], s2[sel] = rows[sel, 3], rows[sel, 4]
        if config.backprop_in_place:   # Backprop, BackpropNoModelUpdate
            sel = component & (t != _T_PROPAGATE) & ((props & _P_BACKPROP_IN_PLACE) != 0)
            a3, a4, a5, a6 = rows[:, 3], rows[:, 4], rows[:, 5], rows[:, 6]
            # Never expected, but merging a derivative into the value
            # arguments of the same backprop would be wrong.
            sel &= ~((a5 == a3) | (a5 == a4) | (a6 == a3) | (a6 == a4))
            s1[sel], s2[sel] = a5[sel], a6[sel]
        return candidates, s1, s2

    def _verdicts(self) -> list[tuple[int, int, int, bool]] | None:
        """:meth:`may_be_merged` for every candidate at the start of the
        round, by array operations: (command, s1, s2, left) of those that
        may merge (left merge if ``left``, else right).

        Within the round a merge marks the variables it touches dirty, and
        a candidate touching dirty variables cannot merge (c5).  For one
        that touches none, nothing the conditions look at has changed: its
        submatrices and matrices are as they were, and so is every answer
        of the (stale) analysis; the one thing a merge changes beyond its
        dirty variables, the stride requirement of the kept matrix, only
        matters (c6, c7) for a submatrix that is not the whole matrix, which
        c3/c4 have already ruled out.  So the verdicts made here, each
        taken only if its submatrices are still clean when its turn comes,
        are the merges the one-by-one loop makes.  None if an argument is
        out of range (the loop then reports it)."""
        config = self.config
        if not config.allow_left_merge and not config.allow_right_merge:
            return []
        st = self.arrays
        analysis = self.analysis
        candidates, s1, s2 = self._sources_and_destinations()
        ok = (s1 > 0) & (s2 > 0)
        if not ok.any():
            return []
        num_subs = len(st.sub)
        if (s1[ok] >= num_subs).any() or (s2[ok] >= num_subs).any():
            return None
        s1 = np.where(ok, s1, 0)
        s2 = np.where(ok, s2, 0)
        sub_matrix = st.sub[:, 0]
        m1, m2 = sub_matrix[s1], sub_matrix[s2]
        ok &= m1 != m2          # two parts of one matrix cannot share memory
        is_input = np.array(analysis.is_input, dtype=bool)
        is_output = np.array(analysis.is_output, dtype=bool)
        in1, in2, out1, out2 = is_input[m1], is_input[m2], is_output[m1], is_output[m2]
        ok &= ~((in1 & in2) | (out1 & out2))                                  # c1
        whole = self.variables.submatrix_is_whole_matrix
        whole1, whole2 = whole[s1], whole[s2]
        ok &= ~((in1 | out1 | in2 | out2) & ~(whole1 & whole2))              # c2
        equal_stride = np.fromiter((m.stride_type is StrideType.EQUAL_NUM_COLS
                                    for m in st.matrices), dtype=bool, count=len(st.matrices))
        left = whole2 & ~(equal_stride[m2] & ~whole1)                        # c3, c6
        right = whole1 & ~(equal_stride[m1] & ~whole2)                       # c4, c7
        left &= bool(config.allow_left_merge)
        right &= bool(config.allow_right_merge)
        ok &= left | right
        first_nontrivial, last, last_write = analysis.arrays
        n = analysis.num_commands
        ok &= first_nontrivial[s2] == candidates
        assignment = ((st.table[candidates, 0] == _T_MATRIX_COPY)
                      & (st.alpha[candidates] == 1.0))
        last_write1 = np.where(out1, n, last_write[s1])
        ok &= np.where(assignment, last_write1 < candidates, last[s1] == candidates)
        out = []
        for i in np.flatnonzero(ok).tolist():
            c, a, b = int(candidates[i]), int(s1[i]), int(s2[i])
            if assignment[i] and not (analysis.last_access(a)
                                      < analysis.data_invalidated_command(c, b)):
                continue
            out.append((c, a, b, bool(left[i])))
        return out

    def _verdicts_jit(self) -> list[tuple[int, int, int, bool]] | None:
        """:meth:`_verdicts` by :func:`_verdicts_kernel` (the same verdicts)."""
        config = self.config
        if not config.allow_left_merge and not config.allow_right_merge:
            return []
        st = self.arrays
        analysis = self.analysis
        first_nontrivial, last, last_write = analysis.arrays
        equal_stride = np.fromiter((m.stride_type is StrideType.EQUAL_NUM_COLS
                                    for m in st.matrices), dtype=np.bool_, count=len(st.matrices))
        status, cs, s1s, s2s, lefts, assigns = _verdicts_kernel(
            np.ascontiguousarray(st.table, dtype=np.int64),
            np.ascontiguousarray(st.alpha, dtype=np.float64),
            np.ascontiguousarray(st.sub[:, 0], dtype=np.int64),
            np.ascontiguousarray(self.variables.submatrix_is_whole_matrix, dtype=np.bool_),
            np.array(analysis.is_input, dtype=np.bool_),
            np.array(analysis.is_output, dtype=np.bool_), equal_stride,
            properties_array(self.nnet),
            np.ascontiguousarray(first_nontrivial, dtype=np.int64),
            np.ascontiguousarray(last, dtype=np.int64),
            np.ascontiguousarray(last_write, dtype=np.int64),
            bool(config.remove_assignments), bool(config.propagate_in_place),
            bool(config.backprop_in_place), bool(config.allow_left_merge),
            bool(config.allow_right_merge))
        if status != 0:
            return None
        out = []
        for c, a, b, left, assignment in zip(cs.tolist(), s1s.tolist(), s2s.tolist(),
                                             lefts.tolist(), assigns.tolist()):
            if assignment and not (analysis.last_access(a)
                                   < analysis.data_invalidated_command(c, b)):
                continue
            out.append((c, a, b, left))
        return out

    def _merge_one_by_one(self) -> bool:
        """The round as Kaldi writes it: may_be_merged for each candidate in
        turn (used when :meth:`_verdicts` cannot be)."""
        config = self.config
        st = self.arrays
        merged = False
        props = nnet_component_properties(self.nnet)
        candidates = np.flatnonzero(_IS_CANDIDATE[st.table[:, 0]])
        rows = st.table[candidates].tolist()
        for command_index, (t, a1, _a2, a3, a4, a5, a6, _a7) in zip(candidates.tolist(), rows):
            s1 = s2 = -1
            if t == _T_MATRIX_COPY:
                if config.remove_assignments:
                    s2, s1 = a1, _a2        # s2 is written
            elif t == _T_PROPAGATE:
                if config.propagate_in_place and props[a1] & _P_PROPAGATE_IN_PLACE:
                    s1, s2 = a3, a4
            elif config.backprop_in_place:       # Backprop, BackpropNoModelUpdate
                if props[a1] & _P_BACKPROP_IN_PLACE:
                    s1, s2 = a5, a6
                    # Never expected, but merging a derivative into the
                    # value arguments of the same backprop would be wrong.
                    if s1 in (a3, a4) or s2 in (a3, a4):
                        s1 = s2 = -1
            if s1 > 0 and s2 > 0:
                left, right = self.may_be_merged(command_index, s1, s2)
                if left:
                    self.do_merge(command_index, s1, s2)
                    merged = True
                elif right:
                    self.do_merge(command_index, s2, s1)
                    merged = True
        return merged

    # -- conditions --------------------------------------------------------------
    def _is_whole(self, s: int) -> bool:
        m, r0, nr, c0, nc = self._subs[s]
        return r0 == 0 and c0 == 0 and nr == self._matrix_rows[m] and nc == self._matrix_cols[m]

    def may_be_merged(self, command_index: int, s1: int, s2: int) -> tuple[bool, bool]:
        """(left merge possible, right merge possible) for command C with
        source s1 and destination s2 (Kaldi's MayBeMerged)."""
        config = self.config
        analysis = self.analysis
        if not (s1 > 0 and s2 > 0 and 0 <= command_index < analysis.num_commands):
            raise ValueError("bad arguments to may_be_merged")
        if not config.allow_left_merge and not config.allow_right_merge:
            return False, False
        m1 = self._subs[s1][0]
        m2 = self._subs[s2][0]
        if m1 == m2:          # two parts of one matrix cannot share memory
            return False, False
        variables = self.variables
        dirty = self.variable_dirty
        # c5
        for s in (s1, s2):
            for v in variables.variables_for_submatrix(s):
                if dirty[v]:
                    return False, False
        is_input, is_output = analysis.is_input, analysis.is_output
        in1, in2, out1, out2 = is_input[m1], is_input[m2], is_output[m1], is_output[m2]
        # c1
        if (in1 and in2) or (out1 and out2):
            return False, False
        whole1 = self._is_whole(s1)
        whole2 = self._is_whole(s2)
        # c2
        if (in1 or out1 or in2 or out2) and not (whole1 and whole2):
            return False, False
        left = config.allow_left_merge
        right = config.allow_right_merge
        if not whole2:     # c3
            left = False
        if not whole1:     # c4
            right = False
        matrices = self.arrays.matrices
        if matrices[m2].stride_type is StrideType.EQUAL_NUM_COLS and not whole1:   # c6
            left = False
        if matrices[m1].stride_type is StrideType.EQUAL_NUM_COLS and not whole2:   # c7
            right = False
        if not left and not right:
            return False, False
        if self._types[command_index] == _T_MATRIX_COPY and self._alpha[command_index] == 1.0:
            if (analysis.first_nontrivial_access(s2) == command_index
                    and analysis.last_write_access(s1) < command_index
                    and analysis.last_access(s1)
                    < analysis.data_invalidated_command(command_index, s2)):
                return left, right
        else:
            if (analysis.first_nontrivial_access(s2) == command_index
                    and analysis.last_access(s1) == command_index):
                return left, right
        return False, False

    # -- the merge -----------------------------------------------------------------
    def mark_as_dirty(self, s: int) -> None:
        for v in self.variables.variables_for_submatrix(s):
            self.variable_dirty[v] = True

    def _no_op(self, c: int) -> None:
        self._types[c] = _T_NO_OPERATION
        self._alpha[c] = 1.0
        self._no_ops.append(c)

    def _apply_edits(self) -> None:
        """Put the round's edits (commands made no-ops, submatrices moved
        into kept matrices) into the arrays, all at once."""
        st = self.arrays
        if self._no_ops:
            st.set_no_op(self._no_ops)
            self._no_ops = []
        if self._moved:
            moved = sorted(self._moved)
            st.sub[moved] = [self._subs[s] for s in moved]
            self._moved = set()

    def do_merge(self, command_index: int, s_to_keep: int, s_to_discard: int) -> None:
        """Make the matrix of ``s_to_discard`` a part of the matrix of
        ``s_to_keep`` (Kaldi's DoMerge).  The arrays see the changes when
        :meth:`merge_variables` ends the round."""
        self.mark_as_dirty(s_to_keep)
        self.mark_as_dirty(s_to_discard)
        st = self.arrays
        subs = self._subs
        types = self._types
        analysis = self.analysis
        m_to_keep = subs[s_to_keep][0]
        m_to_discard = subs[s_to_discard][0]
        if not (m_to_keep != m_to_discard and m_to_keep > 0 and m_to_discard > 0):
            raise ComputationCheckError(f"bad merge of m{m_to_discard} into m{m_to_keep}",
                                        command_index)

        # Every submatrix of the discarded matrix becomes the same region
        # inside s_to_keep (renumbering later merges the duplicates).
        keep_m, keep_r0, keep_nr, keep_c0, keep_nc = subs[s_to_keep]
        for s in self.matrix_to_submatrix[m_to_discard]:
            a_m, a_r0, a_nr, a_c0, a_nc = subs[s]
            if a_m != m_to_discard:
                raise ComputationCheckError(f"submatrix {s} changed matrix during merging")
            if self._matrix_rows[a_m] != keep_nr or self._matrix_cols[a_m] != keep_nc:
                raise ComputationCheckError(
                    f"cannot merge: matrix m{a_m} is {self._matrix_rows[a_m]}x"
                    f"{self._matrix_cols[a_m]} but submatrix {s_to_keep} is "
                    f"{keep_nr}x{keep_nc}")
            row = [keep_m, a_r0 + keep_r0, a_nr, a_c0 + keep_c0, a_nc]
            subs[s] = row
            self._moved.add(s)

        # An assignment with scale 1 disappears; with another scale it stays
        # (now scaling the shared memory in place).
        if types[command_index] == _T_MATRIX_COPY and self._alpha[command_index] == 1.0:
            self._no_op(command_index)

        # One deallocation must remain: drop the discarded matrix's if it
        # has one (it is not an output), else the kept one's.
        dealloc_keep = analysis.deallocate[m_to_keep]
        dealloc_discard = analysis.deallocate[m_to_discard]
        if dealloc_discard != -1:
            self._no_op(dealloc_discard)
        else:
            if dealloc_keep == -1:
                raise ComputationCheckError(f"merging two matrices m{m_to_keep}, "
                                            f"m{m_to_discard} that are both outputs")
            self._no_op(dealloc_keep)

        # One allocation must remain: an AcceptInput has to stay where it is,
        # so if the discarded matrix is an input, the kept matrix's
        # allocation goes; otherwise the discarded one's.  The zeroing that
        # followed the removed allocation goes with it.
        alloc_keep = analysis.allocate[m_to_keep]
        alloc_discard = analysis.allocate[m_to_discard]
        if alloc_keep == -1 or alloc_discard == -1:
            raise ComputationCheckError(f"merging matrices m{m_to_keep}, m{m_to_discard}: "
                                        "one is never allocated", command_index)
        discard_is_input = types[alloc_discard] == _T_ACCEPT_INPUT
        # Kaldi asserts this unconditionally, which fails for a right merge of
        # an input (reachable only with allow_left_merge=false): there the
        # kept matrix's allocation is dropped and the AcceptInput allocates
        # the merged matrix, so the order does not matter.
        if not discard_is_input and \
                not analysis.matrix_first_nontrivial[m_to_discard] > alloc_keep:
            raise ComputationCheckError(f"merging m{m_to_discard} into m{m_to_keep}: it is "
                                        "used before the kept matrix is allocated", command_index)
        if discard_is_input:
            self._no_op(alloc_keep)
            zeroed_matrix = m_to_keep
        else:
            self._no_op(alloc_discard)
            zeroed_matrix = m_to_discard
        zeroing = analysis.matrix_first[zeroed_matrix]
        if zeroing >= analysis.num_commands:
            raise ComputationCheckError(f"merging: matrix m{zeroed_matrix} is never accessed")
        if types[zeroing] == _T_SET_CONST and self._alpha[zeroing] == 0.0:
            self._no_op(zeroing)

        # The kept matrix inherits a stride requirement of the discarded one.
        matrices = st.matrices
        discard_info = matrices[m_to_discard]
        if discard_info.stride_type is StrideType.EQUAL_NUM_COLS:
            keep_info = matrices[m_to_keep]
            if (discard_info.num_rows, discard_info.num_cols) != \
                    (keep_info.num_rows, keep_info.num_cols):
                raise ComputationCheckError(f"merging m{m_to_discard} (stride = num-cols) into "
                                            f"m{m_to_keep} of a different size")
            matrices[m_to_keep] = replace(keep_info, stride_type=StrideType.EQUAL_NUM_COLS)
        vlog(5, f"merged m{m_to_discard} into m{m_to_keep} at c{command_index}")


@lazy_njit(cache=True, nogil=True)
def _verdicts_kernel(table, alpha, sub_matrix, whole, is_input, is_output, equal_stride,
                     props, first_nontrivial, last, last_write, remove_assignments,
                     propagate_in_place, backprop_in_place, allow_left, allow_right):
    """VariableMergingOptimizer._sources_and_destinations and _verdicts in
    one loop over the commands: (status, commands, s1, s2, left, is
    assignment) of the candidates allowed at the start of the round, in
    command order; status 1 where _verdicts returns None (an argument out
    of range), 2 for a component index out of range (the one-by-one loop
    then reports either)."""
    n = table.shape[0]
    num_subs = sub_matrix.shape[0]
    out_c = np.empty(n, dtype=np.int64)
    out_s1 = np.empty(n, dtype=np.int64)
    out_s2 = np.empty(n, dtype=np.int64)
    out_left = np.empty(n, dtype=np.bool_)
    out_assign = np.empty(n, dtype=np.bool_)
    k = 0
    # (_verdicts first asks whether any candidate's arguments are out of
    # range, then decides; one pass that stops at the first such argument
    # gives the same answer, since the decided verdicts are then dropped.)
    for c in range(n):
        t = table[c, 0]
        if t != _T_MATRIX_COPY and t != _T_PROPAGATE and t != _T_BACKPROP \
                and t != _T_BACKPROP_NO_MODEL_UPDATE:
            continue
        s1 = -1
        s2 = -1
        if t == _T_MATRIX_COPY:
            if remove_assignments:
                s2 = table[c, 1]
                s1 = table[c, 2]
        else:
            comp = table[c, 1]
            if comp < 0 or comp >= props.shape[0]:
                return 2, out_c[:0], out_s1[:0], out_s2[:0], out_left[:0], out_assign[:0]
            p = props[comp]
            if t == _T_PROPAGATE:
                if propagate_in_place and (p & _P_PROPAGATE_IN_PLACE) != 0:
                    s1 = table[c, 3]
                    s2 = table[c, 4]
            elif backprop_in_place and (p & _P_BACKPROP_IN_PLACE) != 0:
                a3, a4, a5, a6 = table[c, 3], table[c, 4], table[c, 5], table[c, 6]
                if not (a5 == a3 or a5 == a4 or a6 == a3 or a6 == a4):
                    s1 = a5
                    s2 = a6
        if not (s1 > 0 and s2 > 0):
            continue
        if s1 >= num_subs or s2 >= num_subs:
            return 1, out_c[:0], out_s1[:0], out_s2[:0], out_left[:0], out_assign[:0]
        m1 = sub_matrix[s1]
        m2 = sub_matrix[s2]
        if m1 == m2:
            continue
        in1, in2, o1, o2 = is_input[m1], is_input[m2], is_output[m1], is_output[m2]
        if (in1 and in2) or (o1 and o2):                                      # c1
            continue
        w1, w2 = whole[s1], whole[s2]
        if (in1 or o1 or in2 or o2) and not (w1 and w2):                     # c2
            continue
        left = allow_left and w2 and not (equal_stride[m2] and not w1)       # c3, c6
        right = allow_right and w1 and not (equal_stride[m1] and not w2)    # c4, c7
        if not (left or right):
            continue
        if first_nontrivial[s2] != c:
            continue
        assignment = t == _T_MATRIX_COPY and alpha[c] == 1.0
        if assignment:
            lw1 = n if o1 else last_write[s1]
            if not lw1 < c:
                continue
        elif last[s1] != c:
            continue
        out_c[k] = c
        out_s1[k] = s1
        out_s2[k] = s2
        out_left[k] = left
        out_assign[k] = assignment
        k += 1
    return 0, out_c[:k], out_s1[:k], out_s2[:k], out_left[:k], out_assign[:k]


def variable_merging_optimization(config: "OptimizeOptions", nnet: Any,
                                  computation: NnetComputation | ComputationArrays) -> None:
    """Kaldi's VariableMergingOptimization: merge rounds until one merges
    nothing (in place).  The rounds run on the array form of the
    computation, written back once at the end (given the array form, the
    arrays are updated)."""
    if isinstance(computation, ComputationArrays):
        arrays = computation
    else:
        arrays = ComputationArrays(computation)
    cache: dict[Any, Any] = {}
    rounds = 0
    with component_properties_cached():
        while True:
            optimizer = VariableMergingOptimizer(config, nnet, arrays, cache)
            if not optimizer.merge_variables():
                break
            rounds += 1
    # The last round merged nothing: its analysis is of the final state,
    # which the next pass (remove_unnecessary_zeroing) analyses again.
    final = (nnet, optimizer.analysis)
    if arrays is not computation:
        if rounds:
            arrays.write_back(computation)  # type: ignore[arg-type]
        remember_final_analysis(computation, final)  # type: ignore[arg-type]
    else:
        arrays.final_analysis = final   # (the pipeline writes the arrays back)
    vlog(4, f"variable merging: {rounds} round(s) merged something")


def remember_final_analysis(computation: NnetComputation, final: Any) -> None:
    """Give :func:`~.analysis.analyzer_of` the analysis of ``computation``
    that the last (empty) round of merging made of it: its variables and
    submatrix access records are what a fresh analysis would find (same
    tables, same functions)."""
    nnet, round_analysis = final
    table, cmd, sub, flag, side_effects = round_analysis.records
    if not np.array_equal(computation.command_table(), table):
        raise ComputationCheckError("variable merging: the final analysis is of another "
                                    "command table")
    analyzer = Analyzer.__new__(Analyzer)
    analyzer._init_from_records(nnet, computation, round_analysis.variables, table, cmd, sub,
                                flag, side_effects)
    _remember_analysis(nnet, computation, analyzer)
