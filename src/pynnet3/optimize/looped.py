"""Turn a multi-segment computation into an endless loop (Kaldi's
ComputationLoopedOptimizer and OptimizeLoopedComputation, nnet-optimize-utils).

Online ('looped') decoding compiles several successive chunk requests that
differ only by a time shift into one computation with one segment per
chunk.  After a few segments the computation settles into a steady state:
at the start of some segment j the matrices still alive are those alive at
the start of an earlier segment i, shifted in time.  This pass finds the
first such pair (i, j), cuts the commands after segment j's start, swaps the
matrices of segment j's state into those of segment i, and jumps back to
segment i (NoOperationLabel ... GotoLabel).  The result runs for ever, one
chunk per loop.

The splice points are the NoOperationPermanent commands the compiler puts
into every segment after its input commands.  Matrices are compared through
their debug info (cindexes with t made relative to the first row's, plus
whether the matrix is a derivative).

The passes that move commands afterwards re-point the final GotoLabel with
FixGotoLabel (:func:`.renumber.fix_goto_label`); :func:`compile_looped`
(nnet-compile-looped), which runs this pass, is in :mod:`.compile_looped`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..compile.computation import Command, CommandType, NnetComputation
from ..compile.n_stride import cindex_array
from ..errors import PynnetError
from ..log import vlog
from ..nnet.index import K_NO_TIME
from .analysis import Analyzer, ComputationAnalysis, get_commands_of_type
from .renumber import fix_goto_label, renumber_computation

__all__ = ["optimize_looped_computation", "ComputationLoopedOptimizer"]

T = CommandType
Pair = tuple[int, int]   # (unique id of the time-normalised debug info, time offset)


class ComputationLoopedOptimizer:
    """Kaldi's ComputationLoopedOptimizer; use :func:`optimize_looped_computation`."""

    def __init__(self, nnet: Any, computation: NnetComputation) -> None:
        self.nnet = nnet
        self.computation = computation
        self.analyzer = Analyzer()

    def optimize(self) -> bool:
        """True if the loop was formed (the computation now ends in GotoLabel)."""
        comp = self.computation
        self.analyzer.init(self.nnet, comp)
        if not comp.matrix_debug_info:
            raise PynnetError("looped computations must be compiled with matrix debug info")
        splice_points = get_commands_of_type(comp, T.NO_OPERATION_PERMANENT)
        time_shift_per_segment = self.find_time_shift(comp)
        active_matrices = self.find_active_matrices(comp, self.analyzer, splice_points)
        matrix_to_pair = self.create_matrix_pairs(comp)
        pair_to_matrix = {p: m for m, p in enumerate(matrix_to_pair) if m > 0}
        pair_lists = [[matrix_to_pair[m] for m in ms] for ms in active_matrices]
        found = self.find_first_repeat(pair_lists, time_shift_per_segment)
        if found is None:
            vlog(2, "Could not find repeats of variables.")
            return False
        seg1, seg2 = found
        matrices1, matrices2 = self.get_identified_matrices(pair_lists[seg1], pair_lists[seg2],
                                                            pair_to_matrix)
        self.check_identified_matrices(comp, matrices1, matrices2,
                                       time_shift_per_segment * (seg2 - seg1))
        self.form_infinite_loop(splice_points[seg1], splice_points[seg2], comp)
        self.add_matrix_swap_commands(matrices1, matrices2, comp)
        renumber_computation(comp)
        fix_goto_label(comp)
        return True

    # -- finding the repeat ----------------------------------------------------
    @staticmethod
    def find_time_shift(computation: NnetComputation) -> int:
        """The shift in t between segments, from the first output of
        segments 2 and 3 (segment 1 is special: it has more left context)."""
        ends = get_commands_of_type(computation, T.NO_OPERATION_MARKER)
        if len(ends) < 3:
            raise PynnetError("looped optimization needs at least 4 segments")
        commands = computation.commands

        def first_output(begin: int, end: int) -> int:
            for c in range(begin, end):
                if commands[c].command_type is T.PROVIDE_OUTPUT:
                    return c
            raise PynnetError("Could not locate output commands for segments 2 and 3.")

        c2 = commands[first_output(ends[0], ends[1])]
        c3 = commands[first_output(ends[1], ends[2])]
        if c2.arg2 != c3.arg2:
            raise PynnetError("segments 2 and 3 start with outputs of different nodes")
        if not (computation.is_whole_matrix(c2.arg1) and computation.is_whole_matrix(c3.arg1)):
            raise PynnetError("output of a looped computation is not a whole matrix")
        m2 = computation.submatrices[c2.arg1].matrix_index
        m3 = computation.submatrices[c3.arg1].matrix_index
        if computation.matrices[m2].num_rows != computation.matrices[m3].num_rows:
            raise PynnetError("outputs of segments 2 and 3 differ in size")
        t2 = cindex_array(computation.matrix_debug_info[m2].cindexes)[:, 2].astype(np.int64)
        t3 = cindex_array(computation.matrix_debug_info[m3].cindexes)[:, 2].astype(np.int64)
        offset = int(t3[0] - t2[0])
        if not np.array_equal(t3, t2 + offset):
            raise PynnetError("outputs of segments 2 and 3 are not shifted copies")
        return offset

    @staticmethod
    def create_matrix_pairs(computation: NnetComputation) -> list[Pair]:
        """For each matrix, (unique_id, time_offset): time_offset is the t of
        its first cindex with a real time; unique_id is shared by matrices
        whose cindexes agree once that offset is taken off (kNoTime rows
        as they are) and which are both values or both derivatives."""
        num_matrices = len(computation.matrices)
        if len(computation.matrix_debug_info) != num_matrices:
            raise PynnetError("looped optimization needs the matrix debug info")
        ids: dict[bytes, int] = {}
        ans: list[Pair] = [(0, 0)]
        for m in range(1, num_matrices):
            debug = computation.matrix_debug_info[m]
            if not len(debug.cindexes):
                raise PynnetError(f"matrix m{m} has no debug info")
            arr = cindex_array(debug.cindexes).astype(np.int64)
            t = arr[:, 2]
            real = np.flatnonzero(t != K_NO_TIME)
            if len(real) == 0:
                raise PynnetError(f"All t values are kNoTime in matrix m{m}.")
            t_offset = int(t[real[0]])
            arr[real, 2] -= t_offset
            key = arr.tobytes()
            vector_id = ids.setdefault(key, len(ids) + 1)
            ans.append((2 * vector_id + (1 if debug.is_deriv else 0), t_offset))
        return ans

    @staticmethod
    def find_active_matrices(computation: NnetComputation, analyzer: Analyzer,
                             splice_points: list[int]) -> list[list[int]]:
        """For each splice point, the matrices written before it (zeroing
        counts) and read after it, in increasing order."""
        if sorted(set(splice_points)) != list(splice_points):
            raise PynnetError("splice points must be sorted and unique")
        analysis = ComputationAnalysis(computation, analyzer)
        whole = computation.whole_submatrices()
        active: list[list[int]] = [[] for _ in splice_points]
        points = np.asarray(splice_points, dtype=np.int64)
        for m in range(1, len(computation.matrices)):
            s = whole[m]
            first = analysis.first_nontrivial_access(s)
            last = analysis.last_access(s)
            for i in np.flatnonzero((first < points) & (last > points)).tolist():
                active[i].append(m)
        return active

    @staticmethod
    def lists_are_equal_except_for_possible_shift(a: list[Pair], b: list[Pair],
                                                  shift: int) -> bool:
        if len(a) != len(b):
            return False
        for (id1, o1), (id2, o2) in zip(a, b):
            if id1 != id2 or (o2 != o1 + shift and o2 != o1):
                return False
        return True

    @classmethod
    def find_first_repeat(cls, pair_lists: list[list[Pair]],
                          time_shift_per_segment: int) -> tuple[int, int] | None:
        """The first segments s < t whose active matrices agree up to the time
        shift (t - s) * time_shift_per_segment (insisting on the expected
        shift avoids false repeats where matrices were not really shifted)."""
        n = len(pair_lists)
        if n < 2:
            raise PynnetError("looped optimization needs at least two splice points")
        for s in range(n):
            for t in range(s + 1, n):
                if cls.lists_are_equal_except_for_possible_shift(
                        pair_lists[s], pair_lists[t], (t - s) * time_shift_per_segment):
                    return s, t
        return None

    @staticmethod
    def get_identified_matrices(pairs1: list[Pair], pairs2: list[Pair],
                                pair_to_matrix: dict[Pair, int]) -> tuple[list[int], list[int]]:
        """The two lists as matrix indexes, leaving out matrices that are the
        same in both (no time shift: nothing to swap)."""
        if len(pairs1) != len(pairs2):
            raise PynnetError("get_identified_matrices: lists differ in length")
        list1, list2 = [], []
        for p1, p2 in zip(pairs1, pairs2):
            if p1[1] == p2[1]:
                continue
            if p1 not in pair_to_matrix or p2 not in pair_to_matrix:
                raise PynnetError("Could not find pair in map (code error)")
            list1.append(pair_to_matrix[p1])
            list2.append(pair_to_matrix[p2])
        return list1, list2

    @staticmethod
    def check_identified_matrices(computation: NnetComputation, list1: list[int],
                                  list2: list[int], time_difference: int) -> None:
        """Each list2[i] must be list1[i] shifted by time_difference."""
        if time_difference <= 0 or len(list1) != len(list2):
            raise PynnetError("check_identified_matrices: bad arguments")
        for m1, m2 in zip(list1, list2):
            a, b = computation.matrices[m1], computation.matrices[m2]
            if (a.num_rows, a.num_cols, a.stride_type) != (b.num_rows, b.num_cols, b.stride_type):
                raise PynnetError(f"identified matrices m{m1} and m{m2} differ in shape")
            d1, d2 = computation.matrix_debug_info[m1], computation.matrix_debug_info[m2]
            if d1.is_deriv != d2.is_deriv:
                raise PynnetError(f"identified matrices m{m1} and m{m2} differ in kind")
            c1 = cindex_array(d1.cindexes).astype(np.int64)
            c2 = cindex_array(d2.cindexes).astype(np.int64)
            no_time = (c1[:, 2] == K_NO_TIME) & (c2[:, 2] == K_NO_TIME)
            ok = (len(c1) == len(c2)
                  and np.array_equal(c1[:, [0, 1, 3]], c2[:, [0, 1, 3]])
                  and bool(np.all(no_time | (c2[:, 2] == c1[:, 2] + time_difference))))
            if not ok:
                raise PynnetError(f"identified matrices m{m1} and m{m2} are not shifted copies")

    # -- forming the loop ----------------------------------------------------------
    @staticmethod
    def get_matrix_swap_order(matrices1: list[int], matrices2: list[int]) -> list[Pair]:
        """An order for the swaps (matrices1[i] <- matrices2[i]) in which no
        matrix is overwritten while it still holds state to be moved: a swap
        into m1 waits until m1 has itself been moved (appeared as a
        matrices2 entry of an earlier swap).  Such chains cannot cycle
        because t increases along them."""
        if len(matrices1) != len(matrices2):
            raise PynnetError("get_matrix_swap_order: lists differ in length")
        n = len(matrices1)
        position_in_2 = {m: i for i, m in enumerate(matrices2)}
        processed = [False] * n
        swaps: list[Pair] = []
        loops = 0
        while len(swaps) < n:
            for i in range(n):
                if processed[i]:
                    continue
                m1, m2 = matrices1[i], matrices2[i]
                j = position_in_2.get(m1)
                if j is None or processed[j]:
                    swaps.append((m1, m2))
                    processed[i] = True
            loops += 1
            if loops > n + 1:
                raise PynnetError("get_matrix_swap_order: cyclic dependency (code error)")
        return swaps

    @classmethod
    def add_matrix_swap_commands(cls, matrices1: list[int], matrices2: list[int],
                                 computation: NnetComputation) -> None:
        """Insert before the final GotoLabel the swaps that move segment j's
        state into segment i's matrices."""
        swaps = cls.get_matrix_swap_order(matrices1, matrices2)
        goto = computation.commands.pop()
        if goto.command_type is not T.GOTO_LABEL:
            raise PynnetError("add_matrix_swap_commands: computation does not end in a goto")
        whole = computation.whole_submatrices()
        for m1, m2 in swaps:
            computation.commands.append(Command(T.SWAP_MATRIX, 1.0, whole[m1], whole[m2]))
        computation.commands.append(goto)

    @staticmethod
    def form_infinite_loop(command1: int, command2: int, computation: NnetComputation) -> None:
        """Drop the commands after command2, make command2 'goto command1' and
        put a label just before command1 (both NoOperationPermanent)."""
        commands = computation.commands
        if not (command1 < command2 < len(commands)):
            raise PynnetError("form_infinite_loop: bad command indexes")
        if commands[command1].command_type is not T.NO_OPERATION_PERMANENT or \
                commands[command2].command_type is not T.NO_OPERATION_PERMANENT:
            raise PynnetError("form_infinite_loop: splice points must be NoOperationPermanent")
        del commands[command2 + 1:]
        commands[command2] = Command(T.GOTO_LABEL, 1.0, command1)
        commands.insert(command1, Command(T.NO_OPERATION_LABEL))


def optimize_looped_computation(nnet: Any, computation: NnetComputation) -> bool:
    """Kaldi's OptimizeLoopedComputation, in place (see the module docstring).
    Returns whether the loop was formed; if not, the computation is
    unchanged and should be recompiled with more segments."""
    return ComputationLoopedOptimizer(nnet, computation).optimize()
