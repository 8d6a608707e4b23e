"""The small passes of Kaldi's nnet-optimize.cc: ConvertAdditionToAssignment,
RemoveUnnecessaryZeroing, MoveSizingCommands, RemoveUnnecessaryAllocation and
ConsolidateIoOperations.  Each rewrites the computation in place.

* convert_addition_to_assignment: ``x += y`` (and the row-wise additions)
  where nothing was written to x before (other than zeroing) becomes
  ``x = y``, which later lets the zeroing go.
* remove_unnecessary_zeroing: a matrix whose every part is fully written by
  its first access after the zeroing need not be zeroed.
* move_sizing_commands: allocate (and zero) each matrix just before its
  first use and free it just after its last, to lower peak memory.
* remove_unnecessary_allocation: a free followed later by an allocation of
  a matrix of the same size and stride becomes one SwapMatrix that hands the
  memory over.
* consolidate_io_operations: inputs first and outputs last in each segment
  (needed to run the computation, so not optional).
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Any

import numpy as np

from .. import fast_paths
from ..compile.compiler import consolidate_io_operations as compiler_consolidate_io_operations
from ..compile.computation import Command, CommandType, NnetComputation, StrideType
from ..errors import ComputationCheckError
from .accesses import MatrixAccessesList
from .analysis import Analyzer, ComputationAnalysis, analysis_after_removing, analyzer_of
from .variables import _W, AccessType
from .arrays import rows_with_type, type_mask
from .renumber import fix_goto_label_if_any, remove_no_ops

__all__ = ["convert_addition_to_assignment", "remove_unnecessary_zeroing",
           "move_sizing_commands", "remove_unnecessary_allocation", "compute_command_pairs",
           "consolidate_io_operations"]

T = CommandType
_NO_OP = Command(T.NO_OPERATION)

# The additions that have an assignment counterpart.
_ADD_TO_COPY = {T.MATRIX_ADD: T.MATRIX_COPY, T.ADD_ROWS: T.COPY_ROWS,
                T.ADD_ROWS_MULTI: T.COPY_ROWS_MULTI, T.ADD_TO_ROWS_MULTI: T.COPY_TO_ROWS_MULTI}
_ADDITION_TYPES = type_mask(_ADD_TO_COPY)
_T_SET_CONST = int(T.SET_CONST)
_T_ALLOC_MATRIX = int(T.ALLOC_MATRIX)
_T_DEALLOC_MATRIX = int(T.DEALLOC_MATRIX)
_T_GOTO_LABEL = int(T.GOTO_LABEL)
_SIZING_TYPES = type_mask([T.ALLOC_MATRIX, T.DEALLOC_MATRIX])


def convert_addition_to_assignment(nnet: Any, computation: NnetComputation,
                                   analyzer: Analyzer | None = None) -> None:
    """Kaldi's ConvertAdditionToAssignment.  ``analyzer``: an analysis of
    this very computation (the same commands, matrices, submatrices and
    index tables) made earlier, e.g. by the ComputationChecker just before
    optimization; it saves analysing the computation again."""
    if analyzer is None:
        analyzer = analyzer_of(nnet, computation)
    analysis = ComputationAnalysis(computation, analyzer)
    commands = computation.commands
    num_commands = len(commands)
    candidates = rows_with_type(computation.command_table()[:, 0], _ADDITION_TYPES)
    if len(candidates) == 0:
        return
    # Each addition's written submatrices, and those of them touched (other
    # than zeroed) before it: if there are any, the old value matters and
    # the addition must stay.
    rec = analyzer.submatrix_records
    if rec is None:
        raise ComputationCheckError("convert_addition_to_assignment: no analysis")
    if num_commands < 3 * fast_paths.current().analysis_python_below:
        for c in _additions_to_convert(commands, analyzer, rec, candidates.tolist()):
            _convert_addition(commands, c)
        return
    is_candidate = np.zeros(num_commands, dtype=bool)
    is_candidate[candidates] = True
    sel = ((rec.flag & _W) != 0) & is_candidate[rec.cmd]
    w_cmd, w_sub = rec.cmd[sel], rec.item[sel]
    summary = analysis.summary(zeroing=True)
    if summary is None:
        raise ComputationCheckError("convert_addition_to_assignment: commands changed")
    first = np.array(summary.submatrix_first_nontrivial, dtype=np.int64)
    num_written = np.bincount(w_cmd, minlength=num_commands)[candidates]
    touched_before = np.bincount(w_cmd[first[w_sub] != w_cmd], minlength=num_commands)
    if (num_written == 0).any():
        c = int(candidates[np.flatnonzero(num_written == 0)[0]])
        raise ComputationCheckError("an addition command writes nothing", c)
    for c in candidates[touched_before[candidates] == 0].tolist():
        _convert_addition(commands, c)


def _convert_addition(commands: list[Command], c: int) -> None:
    command = commands[c]
    new_type = _ADD_TO_COPY[command.command_type]
    # (Kaldi's CopyToRowsMulti has no scale.)
    if new_type is T.COPY_TO_ROWS_MULTI and command.alpha != 1.0:
        return
    commands[c] = command.with_args(command_type=new_type)


def _additions_to_convert(commands: list[Command], analyzer: Analyzer, rec: Any,
                          candidates: list[int]) -> list[int]:
    """The additions convert_addition_to_assignment turns into assignments,
    by loops over lists (small computations): those whose every written
    submatrix is first touched, other than by zeroing, by the addition."""
    is_candidate = set(candidates)
    written: dict[int, list[int]] = {}
    for c, s, f in zip(rec.cmd.tolist(), rec.item.tolist(), rec.flag.tolist()):
        if f & _W and c in is_candidate:
            written.setdefault(c, []).append(s)
    for c in candidates:
        if c not in written:
            raise ComputationCheckError("an addition command writes nothing", c)
    table = analyzer.variable_accesses
    offsets = table.offsets.tolist()
    access_commands = table.commands.tolist()
    variables = analyzer.variables
    zeroing: dict[int, bool] = {}

    def is_zeroing(c: int) -> bool:
        z = zeroing.get(c)
        if z is None:
            command = commands[c]
            z = zeroing[c] = command.command_type is T.SET_CONST and command.alpha == 0.0
        return z

    def first_nontrivial(s: int) -> int:
        ans = len(commands)
        for v in variables.variables_for_submatrix(s):
            for i in range(offsets[v], offsets[v + 1]):
                c = access_commands[i]
                if not is_zeroing(c):
                    ans = min(ans, c)
                    break
        return ans

    return [c for c in candidates if all(first_nontrivial(s) == c for s in written[c])]


def remove_unnecessary_zeroing(nnet: Any, computation: NnetComputation) -> None:
    """Kaldi's RemoveUnnecessaryZeroing: turns into a no-op each zeroing that
    is a matrix's first access when, for every variable of the matrix, the
    next access is a pure write.  (The no-ops stay until
    remove_unnecessary_allocation or the end.)"""
    a = analyzer_of(nnet, computation)
    commands = computation.commands
    ma = a.matrix_accesses
    table = a.variable_accesses
    variables = a.variables
    if not isinstance(ma, MatrixAccessesList):
        raise ComputationCheckError("remove_unnecessary_zeroing: no matrix access arrays")
    if len(commands) < 3 * fast_paths.current().analysis_python_below:
        removed = _remove_zeroing_python(commands, computation.command_table(), ma, table,
                                         variables)
        # (move_sizing_commands, next, analyses the result: it is this
        # analysis less the removed zeroings.)
        analysis_after_removing(nnet, computation, a, removed)
        return
    # Per matrix: is its first access a zeroing?
    bounds = ma.bounds
    has_access = np.flatnonzero(bounds[1:] > bounds[:-1])
    first = ma.access_commands[bounds[has_access]]
    types = computation.command_table()[:, 0]
    zeroed = [(m, c) for m, c in zip(has_access[types[first] == _T_SET_CONST].tolist(),
                                      first[types[first] == _T_SET_CONST].tolist())
              if commands[c].alpha == 0.0]
    if not zeroed:
        return
    # Per variable: read (or added to) after the zeroing, or only ever
    # zeroed and handed to the user (the zeros are the answer: a derivative
    # that limits on t made all zero).  Any such variable keeps its
    # matrix's zeroing.
    counts = np.diff(table.offsets)
    second = np.minimum(table.offsets[:-1] + 1, max(len(table.types) - 1, 0))
    second_type = table.types[second] if len(table.types) else np.zeros(0, dtype=np.int64)
    is_output = np.array(ma.is_output, dtype=bool)
    keeps = (((counts > 1) & (second_type != AccessType.WRITE))
             | ((counts == 1) & is_output[variables.variable_to_matrix]))
    keeps_per_matrix = np.bincount(variables.variable_to_matrix[keeps],
                                   minlength=len(ma)).tolist()
    for m, c in zeroed:
        if keeps_per_matrix[m] == 0:
            commands[c] = _NO_OP


def _remove_zeroing_python(commands: list[Command], table: np.ndarray,
                           ma: MatrixAccessesList, accesses: Any, variables: Any) -> list[int]:
    """What remove_unnecessary_zeroing does with arrays, by loops over lists
    (for small computations); returns the commands it removed."""
    types = table[:, 0].tolist()
    bounds = ma.bounds.tolist()
    first_access = ma.access_commands.tolist()
    zeroed = []
    for m in range(len(bounds) - 1):
        if bounds[m + 1] > bounds[m]:
            c = first_access[bounds[m]]
            if types[c] == _T_SET_CONST and commands[c].alpha == 0.0:
                zeroed.append((m, c))
    removed: list[int] = []
    if not zeroed:
        return removed
    offsets = accesses.offsets.tolist()
    access_types = accesses.types.tolist()
    first_var = variables.matrix_to_variable_index.tolist()
    is_output = ma.is_output
    write = int(AccessType.WRITE)
    for m, c in zeroed:
        # (as the array version: a variable read or added to after the
        # zeroing, or only zeroed and handed to the user, keeps it)
        for v in range(first_var[m], first_var[m + 1]):
            count = offsets[v + 1] - offsets[v]
            if (count > 1 and access_types[offsets[v] + 1] != write) or \
                    (count == 1 and is_output[m]):
                break
        else:
            commands[c] = _NO_OP
            removed.append(c)
    return removed


def _sizing_order_python(commands: list[Command], table: np.ndarray,
                         ma: MatrixAccessesList) -> list[int]:
    """The new command order of move_sizing_commands, by loops over lists
    (for small computations; the array version below is the same)."""
    n = len(commands)
    rows = table[:, :2].tolist()
    types = [r[0] for r in rows]
    is_pair = [False] * n
    for c in range(n - 1):
        if (types[c] == _T_ALLOC_MATRIX and types[c + 1] == _T_SET_CONST
                and rows[c][1] == rows[c + 1][1] and commands[c + 1].alpha == 0.0):
            is_pair[c] = True
    position = [3 * c for c in range(n)]
    num_matrices = len(ma)
    if num_matrices > 1 and n:
        bounds = ma.bounds.tolist()
        acc = ma.access_commands.tolist()
        alloc, dealloc = ma.allocate, ma.deallocate
        moved: list[tuple[int, int]] = []
        for m in range(1, num_matrices):
            lo, hi = bounds[m], bounds[m + 1]
            count = hi - lo
            first = acc[lo] if count > 0 else -1
            a = alloc[m]
            if a != -1 and types[a] == _T_ALLOC_MATRIX:
                if first == a + 1 and is_pair[a]:
                    first = acc[lo + 1] if count > 1 else -1
                if first != -1:
                    if first <= a:
                        raise ComputationCheckError(f"matrix m{m} is accessed before it is "
                                                    "allocated", first)
                    moved.append((a, 3 * first - 1))
            d = dealloc[m]
            if d != -1 and count > 0 and types[d] == _T_DEALLOC_MATRIX:
                moved.append((d, 3 * acc[hi - 1] + 1))
        for c, p in moved:
            position[c] = p
    order = sorted(range(n), key=position.__getitem__)
    reordered = []
    for c in order:
        if c > 0 and is_pair[c - 1]:
            continue        # (the zeroing travels with its allocation)
        reordered.append(c)
        if is_pair[c]:
            reordered.append(c + 1)
    return reordered


def move_sizing_commands(nnet: Any, computation: NnetComputation) -> None:
    """Kaldi's MoveSizingCommands: each AllocMatrix (with the zeroing right
    after it) moves to just before the matrix's first other access, each
    DeallocMatrix to just after its last access.  Input/output commands stay."""
    # (Kaldi computes the variables, command attributes and matrix accesses
    # here; the Analyzer does just that.)
    ma = analyzer_of(nnet, computation).matrix_accesses
    if not isinstance(ma, MatrixAccessesList):
        raise ComputationCheckError("move_sizing_commands: no matrix access arrays")
    commands = computation.commands
    num_commands = len(commands)
    table = computation.command_table()
    types = table[:, 0]
    if (types == _T_GOTO_LABEL).any():
        raise ComputationCheckError("move_sizing_commands cannot run after the looped-"
                                    "computation optimization",
                                    int(np.flatnonzero(types == _T_GOTO_LABEL)[0]))
    if num_commands < 3 * fast_paths.current().analysis_python_below:
        order = _sizing_order_python(commands, table, ma)
        computation.commands = [commands[c] for c in order]
        return
    # An AllocMatrix followed by the zeroing of the same submatrix is a pair
    # that moves together.
    is_pair = np.zeros(num_commands, dtype=bool)
    if num_commands > 1:
        maybe = np.flatnonzero((types[:-1] == _T_ALLOC_MATRIX) & (types[1:] == _T_SET_CONST)
                               & (table[:-1, 1] == table[1:, 1]))
        is_pair[[c for c in maybe.tolist() if commands[c + 1].alpha == 0.0]] = True
    # Positions are scaled by 3 so that a command can be placed just before
    # (3c - 1) or just after (3c + 1) command c.
    position = np.arange(num_commands, dtype=np.int64) * 3
    num_matrices = len(ma)
    if num_matrices > 1 and num_commands:
        bounds = ma.bounds
        acc = np.concatenate([ma.access_commands, [-1, -1]])   # -1 past the end
        lo, hi = bounds[1:-1], bounds[2:]
        count = hi - lo
        first = np.where(count > 0, acc[lo], -1)
        second = np.where(count > 1, acc[np.minimum(lo + 1, len(acc) - 1)], -1)
        last = np.where(count > 0, acc[np.maximum(hi - 1, 0)], -1)
        alloc = np.array(ma.allocate[1:], dtype=np.int64)
        dealloc = np.array(ma.deallocate[1:], dtype=np.int64)
        moves = (alloc != -1) & (types[alloc] == _T_ALLOC_MATRIX)
        with_pair = moves & (first == alloc + 1) & is_pair[alloc]
        first = np.where(with_pair, second, first)
        moves &= first != -1
        if (first[moves] <= alloc[moves]).any():
            i = int(np.flatnonzero(moves & (first <= alloc))[0])
            raise ComputationCheckError(f"matrix m{i + 1} is accessed before it is "
                                        "allocated", int(first[i]))
        position[alloc[moves]] = 3 * first[moves] - 1
        frees = (dealloc != -1) & (count > 0) & (types[dealloc] == _T_DEALLOC_MATRIX)
        position[dealloc[frees]] = 3 * last[frees] + 1
    order = np.argsort(position, kind="stable")
    # The zeroing travels with its allocation.
    follows_pair = np.zeros(num_commands, dtype=bool)
    follows_pair[1:] = is_pair[:-1]
    order = order[~follows_pair[order]]
    with_follower = is_pair[order]
    reordered = np.repeat(order, 1 + with_follower)
    reordered[np.cumsum(1 + with_follower) - 1] += with_follower
    computation.commands = [commands[c] for c in reordered.tolist()]


def compute_command_pairs(deallocs: list[int], allocs: list[int]) -> list[tuple[int, int]]:
    """Kaldi's ComputeCommandPairs: (d, a) pairs with d < a, each input used
    at most once, from the latest deallocation backwards, each taking the
    earliest unused allocation after it."""
    free = sorted(allocs)
    pairs = []
    for d in reversed(deallocs):
        i = bisect_right(free, d)
        if i == len(free):
            continue
        pairs.append((d, free.pop(i)))
    return pairs


def remove_unnecessary_allocation(nnet: Any, computation: NnetComputation) -> None:
    """Kaldi's RemoveUnnecessaryAllocation: pairs a DeallocMatrix with a later
    AllocMatrix of the same rows, columns and stride type and replaces them by
    one SwapMatrix (new matrix takes the freed one's memory); then removes the
    no-op commands."""
    lists: dict[tuple[int, int], tuple[list[int], list[int]]] = {}
    commands = computation.commands
    matrices = computation.matrices
    if len(commands) < 3 * fast_paths.current().analysis_python_below:
        # (the same, command by command)
        submatrices = computation.submatrices
        for c, command in enumerate(commands):
            t = command.command_type
            if t is T.ALLOC_MATRIX or t is T.DEALLOC_MATRIX:
                m = matrices[submatrices[command.arg1].matrix_index]
                key = (m.num_rows, m.num_cols if m.stride_type is StrideType.DEFAULT
                       else -m.num_cols)
                deallocs, allocs = lists.setdefault(key, ([], []))
                (deallocs if t is T.DEALLOC_MATRIX else allocs).append(c)
    else:
        table = computation.command_table()
        sizing = rows_with_type(table[:, 0], _SIZING_TYPES)
        # Per matrix: rows, and columns negated for a stride = num-cols matrix
        # (those pair only among themselves).
        rows = np.fromiter((m.num_rows for m in matrices), dtype=np.int64, count=len(matrices))
        cols = np.fromiter((m.num_cols if m.stride_type is StrideType.DEFAULT else -m.num_cols
                            for m in matrices), dtype=np.int64, count=len(matrices))
        mats = computation.submatrix_table()[table[sizing, 1], 0]
        for c, t, r, k in zip(sizing.tolist(), table[sizing, 0].tolist(), rows[mats].tolist(),
                              cols[mats].tolist()):
            deallocs, allocs = lists.setdefault((r, k), ([], []))
            (deallocs if t == _T_DEALLOC_MATRIX else allocs).append(c)
    for deallocs, allocs in lists.values():
        for d, a in compute_command_pairs(deallocs, allocs):
            dealloc, alloc = commands[d], commands[a]
            if dealloc.command_type is not T.DEALLOC_MATRIX or \
                    alloc.command_type is not T.ALLOC_MATRIX:
                raise ComputationCheckError("remove_unnecessary_allocation paired the wrong "
                                            "commands", a)
            commands[d] = _NO_OP
            commands[a] = alloc.with_args(command_type=T.SWAP_MATRIX, arg2=dealloc.arg1)
    remove_no_ops(computation)
    fix_goto_label_if_any(computation)


def consolidate_io_operations(nnet: Any, computation: NnetComputation) -> None:
    """Kaldi's ConsolidateIoOperations: within each segment (between
    NoOperationMarker commands) AcceptInput commands first, ProvideOutput
    commands last, the rest in order.  The compiler runs the same function."""
    compiler_consolidate_io_operations(computation)
