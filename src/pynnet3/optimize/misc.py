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

from ..compile.computation import Command, CommandType, NnetComputation, StrideType
from ..errors import ComputationCheckError
from .analyze import AccessType, Analyzer, ComputationAnalysis
from .renumber import fix_goto_label_if_any, remove_no_ops

__all__ = ["convert_addition_to_assignment", "remove_unnecessary_zeroing",
           "move_sizing_commands", "remove_unnecessary_allocation", "compute_command_pairs",
           "consolidate_io_operations"]

T = CommandType
_NO_OP = Command(T.NO_OPERATION)

# The additions that have an assignment counterpart.
_ADD_TO_COPY = {T.MATRIX_ADD: T.MATRIX_COPY, T.ADD_ROWS: T.COPY_ROWS,
                T.ADD_ROWS_MULTI: T.COPY_ROWS_MULTI, T.ADD_TO_ROWS_MULTI: T.COPY_TO_ROWS_MULTI}


def convert_addition_to_assignment(nnet: Any, computation: NnetComputation) -> None:
    """Kaldi's ConvertAdditionToAssignment."""
    analyzer = Analyzer(nnet, computation)
    analysis = ComputationAnalysis(computation, analyzer)
    commands = computation.commands
    for c, command in enumerate(commands):
        new_type = _ADD_TO_COPY.get(command.command_type)
        if new_type is None:
            continue
        written = analyzer.command_attributes[c].submatrices_written
        if not written:
            raise ComputationCheckError("an addition command writes nothing", c)
        # If anything it adds to was touched before (other than zeroed), the
        # old value matters and the addition must stay.
        if any(analysis.first_nontrivial_access(s) != c for s in written):
            continue
        # (Kaldi's CopyToRowsMulti has no scale.)
        if new_type is T.COPY_TO_ROWS_MULTI and command.alpha != 1.0:
            continue
        commands[c] = command.with_args(command_type=new_type)


def remove_unnecessary_zeroing(nnet: Any, computation: NnetComputation) -> None:
    """Kaldi's RemoveUnnecessaryZeroing: turns into a no-op each zeroing that
    is a matrix's first access when, for every variable of the matrix, the
    next access is a pure write.  (The no-ops stay until
    remove_unnecessary_allocation or the end.)"""
    a = Analyzer(nnet, computation)
    commands = computation.commands
    table = a.variable_accesses
    for m, accesses in enumerate(a.matrix_accesses):
        if not accesses.accesses:
            continue
        zeroing = accesses.accesses[0].command_index
        command = commands[zeroing]
        if not (command.command_type is T.SET_CONST and command.alpha == 0.0):
            continue
        all_ok = True
        for v in a.variables.variables_for_matrix(m):
            v_acc = table[v]
            if len(v_acc) > 1 and v_acc[1].access_type is not AccessType.WRITE:
                all_ok = False   # read (or added to) after the zeroing
                break
            if len(v_acc) == 1 and accesses.is_output:
                # Only ever zeroed, and handed to the user: the zeros are the
                # answer (a derivative that limits on t made all zero).
                all_ok = False
                break
        if all_ok:
            commands[zeroing] = _NO_OP


def move_sizing_commands(nnet: Any, computation: NnetComputation) -> None:
    """Kaldi's MoveSizingCommands: each AllocMatrix (with the zeroing right
    after it) moves to just before the matrix's first other access, each
    DeallocMatrix to just after its last access.  Input/output commands stay."""
    # (Kaldi computes the variables, command attributes and matrix accesses
    # here; the Analyzer does just that.)
    matrix_accesses = Analyzer(nnet, computation).matrix_accesses
    commands = computation.commands
    num_commands = len(commands)
    # Positions are scaled by 3 so that a command can be placed just before
    # (3c - 1) or just after (3c + 1) command c.
    is_pair = [False] * num_commands
    for c in range(num_commands - 1):
        a, b = commands[c], commands[c + 1]
        if (a.command_type is T.ALLOC_MATRIX and b.command_type is T.SET_CONST
                and a.arg1 == b.arg1 and b.alpha == 0.0):
            is_pair[c] = True
    position = [3 * c for c in range(num_commands)]
    for m in range(1, len(matrix_accesses)):
        ma = matrix_accesses[m]
        if ma.allocate_command != -1 and \
                commands[ma.allocate_command].command_type is T.ALLOC_MATRIX:
            first = -1
            if ma.accesses:
                first = ma.accesses[0].command_index
                if first == ma.allocate_command + 1 and is_pair[ma.allocate_command]:
                    first = ma.accesses[1].command_index if len(ma.accesses) > 1 else -1
            if first != -1:
                if first <= ma.allocate_command:
                    raise ComputationCheckError(f"matrix m{m} is accessed before it is "
                                                "allocated", first)
                position[ma.allocate_command] = 3 * first - 1
        if ma.deallocate_command != -1 and ma.accesses and \
                commands[ma.deallocate_command].command_type is T.DEALLOC_MATRIX:
            position[ma.deallocate_command] = 3 * ma.accesses[-1].command_index + 1
    order = sorted(range(num_commands), key=lambda c: (position[c], c))
    reordered: list[Command] = []
    for old in order:
        if commands[old].command_type is T.GOTO_LABEL:
            raise ComputationCheckError("move_sizing_commands cannot run after the looped-"
                                        "computation optimization", old)
        if old > 0 and is_pair[old - 1]:
            continue          # the zeroing travels with its allocation
        reordered.append(commands[old])
        if is_pair[old]:
            reordered.append(commands[old + 1])
    computation.commands = reordered


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
    for c, command in enumerate(commands):
        t = command.command_type
        if t is T.ALLOC_MATRIX or t is T.DEALLOC_MATRIX:
            m = computation.matrices[computation.submatrices[command.arg1].matrix_index]
            cols = m.num_cols if m.stride_type is StrideType.DEFAULT else -m.num_cols
            deallocs, allocs = lists.setdefault((m.num_rows, cols), ([], []))
            (deallocs if t is T.DEALLOC_MATRIX else allocs).append(c)
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
    from ..compile.compiler import consolidate_io_operations as consolidate

    consolidate(computation)
