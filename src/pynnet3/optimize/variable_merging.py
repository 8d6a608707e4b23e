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
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..compile.computation import Command, CommandType, NnetComputation, StrideType, SubMatrixInfo
from ..errors import ComputationCheckError
from ..log import vlog
from ..nnet.components.base import Prop
from ..nnet.properties_cache import nnet_component_properties
from .analyze import Analyzer, ComputationAnalysis, compute_matrix_to_submatrix
from .renumber import remove_no_ops, renumber_computation

if TYPE_CHECKING:
    from .options import OptimizeOptions

__all__ = ["VariableMergingOptimizer", "variable_merging_optimization"]

T = CommandType
_P_PROPAGATE_IN_PLACE = int(Prop.PROPAGATE_IN_PLACE)
_P_BACKPROP_IN_PLACE = int(Prop.BACKPROP_IN_PLACE)
_NO_OP = Command(T.NO_OPERATION)
_T_MATRIX_COPY = int(T.MATRIX_COPY)
_T_PROPAGATE = int(T.PROPAGATE)
_T_BACKPROP = int(T.BACKPROP)
_T_BACKPROP_NO_MODEL_UPDATE = int(T.BACKPROP_NO_MODEL_UPDATE)


def _get_submatrix_of_submatrix(computation: NnetComputation, submat_a: int,
                                submat_b: int) -> SubMatrixInfo:
    """Submatrix a, re-expressed inside submatrix b, where b has exactly the
    dimensions of a's whole matrix (Kaldi's GetSubMatrixOfSubMatrix)."""
    a = computation.submatrices[submat_a]
    b = computation.submatrices[submat_b]
    a_mat = computation.matrices[a.matrix_index]
    if a_mat.num_rows != b.num_rows or a_mat.num_cols != b.num_cols:
        raise ComputationCheckError(f"cannot merge: matrix m{a.matrix_index} is "
                                    f"{a_mat.num_rows}x{a_mat.num_cols} but submatrix "
                                    f"{submat_b} is {b.num_rows}x{b.num_cols}")
    return SubMatrixInfo(b.matrix_index, a.row_offset + b.row_offset, a.num_rows,
                         a.col_offset + b.col_offset, a.num_cols)


class VariableMergingOptimizer:
    """One round of merging (Kaldi's class of the same name).  Call
    :meth:`merge_variables` once; if it returns True, another instance may
    find more merges."""

    def __init__(self, config: "OptimizeOptions", nnet: Any,
                 computation: NnetComputation) -> None:
        self.config = config
        self.nnet = nnet
        self.computation = computation
        self.analyzer = Analyzer(nnet, computation)
        self.matrix_to_submatrix = compute_matrix_to_submatrix(computation)
        self.variable_dirty = [False] * self.analyzer.variables.num_variables
        # The analysis answers questions about the computation as it was at the
        # start of the round (Kaldi's answers come from the same stale
        # analyzer; everything a merge changes is marked dirty and is not
        # asked about again).
        snapshot = replace(computation, commands=list(computation.commands),
                           submatrices=list(computation.submatrices))
        self.analysis = ComputationAnalysis(snapshot, self.analyzer)
        self._already_called = False

    # -- the round ---------------------------------------------------------------
    def merge_variables(self) -> bool:
        if self._already_called:
            raise RuntimeError("merge_variables() may be called only once per instance")
        self._already_called = True
        config = self.config
        if not config.optimize:
            return False
        comp = self.computation
        merged = False
        props = nnet_component_properties(self.nnet)
        # Only these command types can lead to a merge (a merge never turns
        # one of them into another, so they can be listed up front).
        types = comp.command_table()[:, 0]
        candidates = np.flatnonzero((types == _T_MATRIX_COPY) | (types == _T_PROPAGATE)
                                    | (types == _T_BACKPROP)
                                    | (types == _T_BACKPROP_NO_MODEL_UPDATE)).tolist()
        for command_index in candidates:
            c = comp.commands[command_index]
            t = c.command_type
            s1 = s2 = -1
            if t is T.MATRIX_COPY and config.remove_assignments:
                s2, s1 = c.arg1, c.arg2        # s2 is written
            elif t is T.PROPAGATE and config.propagate_in_place:
                if props[c.arg1] & _P_PROPAGATE_IN_PLACE:
                    s1, s2 = c.arg3, c.arg4
            elif (t is T.BACKPROP or t is T.BACKPROP_NO_MODEL_UPDATE) \
                    and config.backprop_in_place:
                if props[c.arg1] & _P_BACKPROP_IN_PLACE:
                    s1, s2 = c.arg5, c.arg6
                    # Never expected, but merging a derivative into the
                    # value arguments of the same backprop would be wrong.
                    if s1 in (c.arg3, c.arg4) or s2 in (c.arg3, c.arg4):
                        s1 = s2 = -1
            if s1 > 0 and s2 > 0:
                left, right = self.may_be_merged(command_index, s1, s2)
                if left:
                    self.do_merge(command_index, s1, s2)
                    merged = True
                elif right:
                    self.do_merge(command_index, s2, s1)
                    merged = True
        if merged:
            renumber_computation(comp)
            remove_no_ops(comp)
        return merged

    # -- conditions --------------------------------------------------------------
    def may_be_merged(self, command_index: int, s1: int, s2: int) -> tuple[bool, bool]:
        """(left merge possible, right merge possible) for command C with
        source s1 and destination s2 (Kaldi's MayBeMerged)."""
        config = self.config
        comp = self.computation
        if not (s1 > 0 and s2 > 0 and 0 <= command_index < len(comp.commands)):
            raise ValueError("bad arguments to may_be_merged")
        if not config.allow_left_merge and not config.allow_right_merge:
            return False, False
        m1 = comp.submatrices[s1].matrix_index
        m2 = comp.submatrices[s2].matrix_index
        if m1 == m2:          # two parts of one matrix cannot share memory
            return False, False
        variables = self.analyzer.variables
        dirty = self.variable_dirty
        # c5
        for s in (s1, s2):
            for v in variables.variables_for_submatrix(s):
                if dirty[v]:
                    return False, False
        ma = self.analyzer.matrix_accesses
        a1, a2 = ma[m1], ma[m2]
        # c1
        if (a1.is_input and a2.is_input) or (a1.is_output and a2.is_output):
            return False, False
        whole1 = comp.is_whole_matrix(s1)
        whole2 = comp.is_whole_matrix(s2)
        # c2
        if (a1.is_input or a1.is_output or a2.is_input or a2.is_output) \
                and not (whole1 and whole2):
            return False, False
        left = config.allow_left_merge
        right = config.allow_right_merge
        if not whole2:     # c3
            left = False
        if not whole1:     # c4
            right = False
        if comp.matrices[m2].stride_type is StrideType.EQUAL_NUM_COLS and not whole1:   # c6
            left = False
        if comp.matrices[m1].stride_type is StrideType.EQUAL_NUM_COLS and not whole2:   # c7
            right = False
        if not left and not right:
            return False, False
        command = comp.commands[command_index]
        analysis = self.analysis
        if command.command_type is T.MATRIX_COPY and command.alpha == 1.0:
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
        for v in self.analyzer.variables.variables_for_submatrix(s):
            self.variable_dirty[v] = True

    def do_merge(self, command_index: int, s_to_keep: int, s_to_discard: int) -> None:
        """Make the matrix of ``s_to_discard`` a part of the matrix of
        ``s_to_keep`` (Kaldi's DoMerge)."""
        self.mark_as_dirty(s_to_keep)
        self.mark_as_dirty(s_to_discard)
        comp = self.computation
        commands = comp.commands
        m_to_keep = comp.submatrices[s_to_keep].matrix_index
        m_to_discard = comp.submatrices[s_to_discard].matrix_index
        if not (m_to_keep != m_to_discard and m_to_keep > 0 and m_to_discard > 0):
            raise ComputationCheckError(f"bad merge of m{m_to_discard} into m{m_to_keep}",
                                        command_index)

        # Every submatrix of the discarded matrix becomes the same region
        # inside s_to_keep (renumbering later merges the duplicates).
        for s in self.matrix_to_submatrix[m_to_discard]:
            if comp.submatrices[s].matrix_index != m_to_discard:
                raise ComputationCheckError(f"submatrix {s} changed matrix during merging")
            comp.submatrices[s] = _get_submatrix_of_submatrix(comp, s, s_to_keep)

        matrix_accesses = self.analyzer.matrix_accesses
        c = commands[command_index]
        # An assignment with scale 1 disappears; with another scale it stays
        # (now scaling the shared memory in place).
        if c.command_type is T.MATRIX_COPY and c.alpha == 1.0:
            commands[command_index] = Command(T.NO_OPERATION)

        # One deallocation must remain: drop the discarded matrix's if it
        # has one (it is not an output), else the kept one's.
        dealloc_keep = matrix_accesses[m_to_keep].deallocate_command
        dealloc_discard = matrix_accesses[m_to_discard].deallocate_command
        if dealloc_discard != -1:
            commands[dealloc_discard] = _NO_OP
        else:
            if dealloc_keep == -1:
                raise ComputationCheckError(f"merging two matrices m{m_to_keep}, "
                                            f"m{m_to_discard} that are both outputs")
            commands[dealloc_keep] = _NO_OP

        # One allocation must remain: an AcceptInput has to stay where it is,
        # so if the discarded matrix is an input, the kept matrix's
        # allocation goes; otherwise the discarded one's.  The zeroing that
        # followed the removed allocation goes with it.
        alloc_keep = matrix_accesses[m_to_keep].allocate_command
        alloc_discard = matrix_accesses[m_to_discard].allocate_command
        if alloc_keep == -1 or alloc_discard == -1:
            raise ComputationCheckError(f"merging matrices m{m_to_keep}, m{m_to_discard}: "
                                        "one is never allocated", command_index)
        discard_is_input = commands[alloc_discard].command_type is T.ACCEPT_INPUT
        # Kaldi asserts this unconditionally, which fails for a right merge of
        # an input (reachable only with allow_left_merge=false): there the
        # kept matrix's allocation is dropped and the AcceptInput allocates
        # the merged matrix, so the order does not matter.
        if not discard_is_input and \
                not self.analysis.first_nontrivial_matrix_access(m_to_discard) > alloc_keep:
            raise ComputationCheckError(f"merging m{m_to_discard} into m{m_to_keep}: it is "
                                        "used before the kept matrix is allocated", command_index)
        if discard_is_input:
            commands[alloc_keep] = _NO_OP
            zeroed_matrix = m_to_keep
        else:
            commands[alloc_discard] = _NO_OP
            zeroed_matrix = m_to_discard
        zeroing = matrix_accesses[zeroed_matrix].accesses[0].command_index
        zc = commands[zeroing]
        if zc.command_type is T.SET_CONST and zc.alpha == 0.0:
            commands[zeroing] = _NO_OP

        # The kept matrix inherits a stride requirement of the discarded one.
        discard_info = comp.matrices[m_to_discard]
        if discard_info.stride_type is StrideType.EQUAL_NUM_COLS:
            keep_info = comp.matrices[m_to_keep]
            if (discard_info.num_rows, discard_info.num_cols) != \
                    (keep_info.num_rows, keep_info.num_cols):
                raise ComputationCheckError(f"merging m{m_to_discard} (stride = num-cols) into "
                                            f"m{m_to_keep} of a different size")
            comp.matrices[m_to_keep] = replace(keep_info, stride_type=StrideType.EQUAL_NUM_COLS)
        vlog(5, f"merged m{m_to_discard} into m{m_to_keep} at c{command_index}")


def variable_merging_optimization(config: "OptimizeOptions", nnet: Any,
                                  computation: NnetComputation) -> None:
    """Kaldi's VariableMergingOptimization: merge rounds until one merges
    nothing (in place)."""
    rounds = 0
    while VariableMergingOptimizer(config, nnet, computation).merge_variables():
        rounds += 1
    vlog(4, f"variable merging: {rounds} round(s) merged something")
