"""Simplify row commands (Kaldi's SnipRowOps, SplitRowOps / RowOpsSplitter and
ReplaceRowWithMatrixOps, nnet-optimize-utils).

Row commands (CopyRows, AddRows, the *RowsMulti family, AddRowRanges) move
rows through index tables.  Three rewrites make them cheaper:

* :func:`snip_row_ops`: leading and trailing table entries that do nothing
  (-1 rows of an *add*, empty ranges) are cut off and the command runs on
  the remaining rows of its destination;
* :func:`split_row_ops`: a *RowsMulti command whose pairs come from at most
  two submatrices, each in one contiguous block, becomes at most two
  MatrixCopy/MatrixAdd (consecutive source rows) or CopyRows/AddRows;
* :func:`replace_row_with_matrix_ops`: CopyRows/AddRows whose table is
  -1s, then consecutive rows, then -1s becomes MatrixCopy/MatrixAdd on row
  ranges.

Each returns True if it changed something; the caller then renumbers the
computation (which drops the index tables nobody uses any more).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..arraytools import sorted_unique
from ..compile.computation import Command, CommandType, NnetComputation
from ..errors import PynnetError
from .arrays import rows_with_type, type_mask, unique_ints
from .renumber import insert_commands

__all__ = ["snip_row_ops", "split_row_ops", "replace_row_with_matrix_ops", "RowOpsSplitter",
           "indexes_have_special_structure"]

T = CommandType
_ROWS_TYPES = type_mask([T.COPY_ROWS, T.ADD_ROWS])
_SNIP_TYPES = type_mask([T.ADD_ROWS, T.ADD_ROWS_MULTI, T.ADD_TO_ROWS_MULTI,
                         T.COPY_TO_ROWS_MULTI, T.ADD_ROW_RANGES])
_T_ADD_ROWS = int(T.ADD_ROWS)
_T_ADD_ROW_RANGES = int(T.ADD_ROW_RANGES)


# ---------------------------------------------------------------------------
# ReplaceRowWithMatrixOps


def indexes_have_special_structure(indexes: np.ndarray) -> tuple[int, int, int] | None:
    """Kaldi's IndexesHaveSpecialStructure: if ``indexes`` is some -1s, then
    a nonempty run of consecutive values v, v+1, ..., then -1s, return
    (position of the run, v, length of the run); else None.  Negative
    entries are taken to be -1."""
    if len(indexes) == 0:
        raise PynnetError("indexes_have_special_structure: empty indexes")
    nonneg = np.flatnonzero(indexes >= 0)
    if len(nonneg) == 0:
        return None
    pos = int(nonneg[0])
    first = int(indexes[pos])
    rest = indexes[pos:].astype(np.int64)
    breaks = np.flatnonzero(rest != first + np.arange(len(rest)))
    length = int(breaks[0]) if len(breaks) else len(rest)
    if (rest[length:] >= 0).any():
        return None
    return pos, first, length


# Up to this many entries in all, the index tables are scanned as lists
# (the array version is some twenty NumPy calls).
_LIST_SCAN_BELOW = 512


def _special_structure_of_list(values: list[int]) -> tuple[int, int, int] | None:
    """:func:`indexes_have_special_structure` of a nonempty list."""
    n = len(values)
    pos = 0
    while pos < n and values[pos] < 0:
        pos += 1
    if pos == n:
        return None
    first = values[pos]
    end = pos + 1
    while end < n and values[end] == first + (end - pos):
        end += 1
    for i in range(end, n):
        if values[i] >= 0:
            return None
    return pos, first, end - pos


def _special_structures(arrays: list[np.ndarray]) -> list[tuple[int, int, int] | None]:
    """:func:`indexes_have_special_structure` of each (nonempty) array, with
    array operations over all of them at once."""
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    if len(arrays) == 0:
        return []
    if int(lengths.sum()) < _LIST_SCAN_BELOW and lengths.all():
        return [_special_structure_of_list(a.tolist()) for a in arrays]
    if (lengths == 0).any():
        raise PynnetError("indexes_have_special_structure: empty indexes")
    values = np.concatenate(arrays).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    ends = starts + lengths
    position = np.arange(len(values), dtype=np.int64)
    nonneg = values >= 0
    big = len(values)
    # First nonnegative entry of each array (its end if none).
    first_pos = np.minimum(np.minimum.reduceat(np.where(nonneg, position, big), starts), ends)
    has_run = first_pos < ends
    owner = np.repeat(np.arange(len(arrays)), lengths)
    run_start = first_pos[owner]
    first_value = values[np.minimum(first_pos, big - 1)][owner]
    # Entries from the run's start on that break the run v, v+1, ...
    breaks = (position >= run_start) & (values != first_value + (position - run_start))
    run_end = np.minimum(np.minimum.reduceat(np.where(breaks, position, big), starts), ends)
    run_length = run_end - first_pos
    # The run must hold every nonnegative entry (-1s after it only).
    num_nonneg = np.add.reduceat(nonneg.astype(np.int64), starts)
    ok = has_run & (num_nonneg == run_length)
    first_values = values[np.minimum(first_pos, big - 1)]
    return [(p, v, n) if k else None for k, p, v, n in zip(
        ok.tolist(), (first_pos - starts).tolist(), first_values.tolist(), run_length.tolist())]


def replace_row_with_matrix_ops(computation: NnetComputation) -> bool:
    """Kaldi's ReplaceRowWithMatrixOps (see the module docstring)."""
    changed = False
    commands = computation.commands
    table = computation.command_table()
    rows = rows_with_type(table[:, 0], _ROWS_TYPES)
    if len(rows) == 0:
        return False
    ks = table[rows, 3]
    bad = (ks < 0) | (ks >= len(computation.indexes))
    if bad.any():
        c = int(rows[np.flatnonzero(bad)[0]])
        raise PynnetError(f"c{c}: indexes index {ks[np.flatnonzero(bad)[0]]} out of range")
    unique = unique_ints(ks)
    structures = _special_structures([computation.indexes[k] for k in unique.tolist()])
    by_index = dict(zip(unique.tolist(), structures))
    for c, k in zip(rows.tolist(), ks.tolist()):
        structure = by_index[k]
        if structure is None:
            continue
        command = commands[c]
        t = command.command_type
        pos, first, length = structure
        dest = computation.new_submatrix(command.arg1, pos, length, 0, -1)
        src = computation.new_submatrix(command.arg2, first, length, 0, -1)
        new_type = T.MATRIX_COPY if t is T.COPY_ROWS else T.MATRIX_ADD
        # (CopyRows zeroes its -1 rows, but those lie outside the new
        # destination; Kaldi relies on them being rows nobody reads before
        # they are written, as the compiler only emits CopyRows onto freshly
        # zeroed matrices.)
        commands[c] = Command(new_type, command.alpha, dest, src)
        changed = True
    return changed


# ---------------------------------------------------------------------------
# SnipRowOps


def _leading_trailing(skip: np.ndarray) -> tuple[int, int]:
    """Numbers of leading and trailing True entries of ``skip``; an error if
    all entries are True (a command that does nothing at all)."""
    keep = np.flatnonzero(~skip)
    if len(keep) == 0:
        raise PynnetError("row command whose index table does nothing (all -1 or empty)")
    return int(keep[0]), len(skip) - 1 - int(keep[-1])


def snip_single_row_op(computation: NnetComputation, c: int) -> bool:
    """Kaldi's SnipSingleRowOp, for AddRows."""
    command = computation.commands[c]
    indexes = computation.indexes[command.arg3]
    lead, trail = _leading_trailing(indexes < 0)
    if lead == 0 and trail == 0:
        return False
    num_rows = len(indexes) - lead - trail
    computation.commands[c] = command.with_args(
        arg1=computation.new_submatrix(command.arg1, lead, num_rows, 0, -1),
        arg3=computation.add_indexes(indexes[lead:lead + num_rows]))
    return True


def snip_multi_row_op(computation: NnetComputation, c: int) -> bool:
    """Kaldi's SnipMultiRowOp, for AddRowsMulti, AddToRowsMulti and
    CopyToRowsMulti: leading/trailing (-1, -1) pairs."""
    command = computation.commands[c]
    pairs = computation.indexes_multi[command.arg2]
    lead, trail = _leading_trailing(pairs[:, 0] < 0)
    if lead == 0 and trail == 0:
        return False
    num_rows = len(pairs) - lead - trail
    computation.commands[c] = command.with_args(
        arg1=computation.new_submatrix(command.arg1, lead, num_rows, 0, -1),
        arg2=computation.add_indexes_multi(pairs[lead:lead + num_rows]))
    return True


def snip_ranges_row_op(computation: NnetComputation, c: int) -> bool:
    """Kaldi's SnipRangesRowOp, for AddRowRanges: leading/trailing empty
    ranges (pairs (x, x))."""
    command = computation.commands[c]
    ranges = computation.indexes_ranges[command.arg3]
    lead, trail = _leading_trailing(ranges[:, 0] == ranges[:, 1])
    if lead == 0 and trail == 0:
        return False
    num_rows = len(ranges) - lead - trail
    computation.commands[c] = command.with_args(
        arg1=computation.new_submatrix(command.arg1, lead, num_rows, 0, -1),
        arg3=computation.add_indexes_ranges(ranges[lead:lead + num_rows]))
    return True


def _leading_trailing_all(arrays: list[np.ndarray]) -> list[tuple[int, int] | None]:
    """(leading, trailing) numbers of negative entries of each (nonempty)
    index array, None for an array of only negative entries, with array
    operations over all of them at once."""
    if not arrays:
        return []
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    if (lengths == 0).any():
        raise PynnetError("row command whose index table does nothing (all -1 or empty)")
    keep = np.concatenate(arrays) >= 0
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    ends = starts + lengths
    position = np.arange(len(keep), dtype=np.int64)
    first = np.minimum.reduceat(np.where(keep, position, len(keep)), starts)
    last = np.maximum.reduceat(np.where(keep, position, -1), starts)
    some = (first < ends) & (last >= starts)
    return [(lead, trail) if k else None for k, lead, trail in zip(
        some.tolist(), (first - starts).tolist(), (ends - 1 - last).tolist())]


def snip_row_ops(computation: NnetComputation) -> bool:
    """Kaldi's SnipRowOps.  CopyRows and CopyRowsMulti are left alone: their
    -1 entries zero the destination row, which is not a no-op."""
    changed = False
    table = computation.command_table()
    types = table[:, 0]
    candidates = rows_with_type(types, _SNIP_TYPES)
    if len(candidates) == 0:
        return False
    # AddRows: the -1 entries at the edges of each table, all tables at once.
    add_rows = candidates[types[candidates] == _T_ADD_ROWS]
    edges: dict[int, tuple[int, int] | None] = {}
    if len(add_rows):
        ks = table[add_rows, 3]
        bad = (ks < 0) | (ks >= len(computation.indexes))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise PynnetError(f"c{add_rows[i]}: indexes index {ks[i]} out of range")
        unique = unique_ints(ks).tolist()
        edges = dict(zip(unique, _leading_trailing_all([computation.indexes[k]
                                                        for k in unique])))
    for c, t in zip(candidates.tolist(), types[candidates].tolist()):
        if t == _T_ADD_ROWS:
            command = computation.commands[c]
            lead_trail = edges[command.arg3]
            if lead_trail is None:
                raise PynnetError("row command whose index table does nothing "
                                  "(all -1 or empty)")
            lead, trail = lead_trail
            if lead == 0 and trail == 0:
                continue
            indexes = computation.indexes[command.arg3]
            num_rows = len(indexes) - lead - trail
            computation.commands[c] = command.with_args(
                arg1=computation.new_submatrix(command.arg1, lead, num_rows, 0, -1),
                arg3=computation.add_indexes(indexes[lead:lead + num_rows]))
            changed = True
        elif t == _T_ADD_ROW_RANGES:
            changed |= snip_ranges_row_op(computation, c)
        else:
            changed |= snip_multi_row_op(computation, c)
    return changed


# ---------------------------------------------------------------------------
# SplitRowOps


@dataclass(slots=True)
class SingleSplitInfo:
    """One block of an indexes_multi table whose pairs all name the same
    submatrix (Kaldi's RowOpsSplitter::SingleSplitInfo)."""

    offset: int = 0              # position of the block in the table
    size: int = 0                # number of pairs in the block
    first_value: int = 0         # the submatrix all its pairs name
    min_second_value: int = 0    # smallest row named
    second_value_range: int = 0  # largest row named + 1 - smallest
    # Rows named, minus min_second_value; None when they are consecutive.
    second_value_offsets: np.ndarray | None = None


# Do not split when the source rows spread over more than this many times
# the number of pairs: the matrix commands would touch mostly unused rows.
_MAX_SIZE_RATIO = 2


class RowOpsSplitter:
    """Kaldi's RowOpsSplitter; use :func:`split_row_ops`."""

    def __init__(self, computation: NnetComputation) -> None:
        self.computation = computation
        # Per indexes_multi table: its (one or two) blocks, or [] if it
        # cannot be split.
        self.split_info: list[list[SingleSplitInfo]] = []
        self.new_commands: list[tuple[int, Command]] = []

    def split(self) -> bool:
        return self.split_indexes() and self.split_commands()

    @staticmethod
    def get_split_info(pairs: np.ndarray, offset: int) -> SingleSplitInfo | None:
        """Describe ``pairs`` (a block of a table) as one SingleSplitInfo, or
        None if it has -1s, several submatrices or too sparse rows."""
        size = len(pairs)
        if size == 0:
            raise PynnetError("get_split_info: empty block")
        first = int(pairs[0, 0])
        if first < 0:
            return None
        second = pairs[:, 1].astype(np.int64)
        if (pairs[:, 0] != first).any() or (second < 0).any():
            return None
        lo, hi = int(second.min()), int(second.max())
        value_range = hi + 1 - lo
        if value_range > size * _MAX_SIZE_RATIO:
            return None
        consecutive = bool((second == second[0] + np.arange(size)).all())
        return SingleSplitInfo(offset, size, first, lo, value_range,
                               None if consecutive else second - lo)

    def split_indexes(self) -> bool:
        changed = False
        self.split_info = []
        for pairs in self.computation.indexes_multi:
            if len(pairs) == 0:
                raise PynnetError("split_indexes: empty indexes_multi table")
            firsts = pairs[:, 0]
            change = np.flatnonzero(firsts[1:] != firsts[0])
            if len(change) == 0:
                blocks = [self.get_split_info(pairs, 0)]
            else:
                mid = int(change[0]) + 1
                blocks = [self.get_split_info(pairs[:mid], 0),
                          self.get_split_info(pairs[mid:], mid)]
            if any(b is None for b in blocks):
                self.split_info.append([])
            else:
                self.split_info.append(blocks)   # type: ignore[arg-type]
                changed = True
        return changed

    def split_command(self, c: int) -> bool:
        comp = self.computation
        command = comp.commands[c]
        t = command.command_type
        if t not in (T.ADD_ROWS_MULTI, T.COPY_ROWS_MULTI, T.ADD_TO_ROWS_MULTI,
                     T.COPY_TO_ROWS_MULTI):
            return False
        blocks = self.split_info[command.arg2]
        if not blocks:
            return False
        if t is T.COPY_TO_ROWS_MULTI and any(b.second_value_offsets is not None
                                             for b in blocks):
            # Inverting the table would give a CopyRows with -1 rows, which
            # zeroes rows that CopyToRowsMulti leaves alone.
            return False
        if t is T.ADD_TO_ROWS_MULTI and any(
                b.second_value_offsets is not None
                and len(sorted_unique(b.second_value_offsets)) != b.size for b in blocks):
            # A destination row named twice cannot be inverted into an
            # AddRows table.  (Kaldi asserts here -- with a test that can never
            # pass, so in Kaldi no non-consecutive AddToRowsMulti is split at
            # all; see the report.)
            return False
        split_commands = []
        for block in blocks:
            # (each block's submatrices are made in Kaldi's order, so that
            # the numbering after renumbering is Kaldi's)
            dest = comp.new_submatrix(command.arg1, block.offset, block.size, 0, -1)
            other = comp.new_submatrix(block.first_value, block.min_second_value,
                                       block.second_value_range, 0, -1)
            if block.second_value_offsets is None:
                if t is T.ADD_ROWS_MULTI:
                    new = Command(T.MATRIX_ADD, command.alpha, dest, other)
                elif t is T.COPY_ROWS_MULTI:
                    new = Command(T.MATRIX_COPY, command.alpha, dest, other)
                elif t is T.ADD_TO_ROWS_MULTI:
                    new = Command(T.MATRIX_ADD, command.alpha, other, dest)
                else:
                    new = Command(T.MATRIX_COPY, command.alpha, other, dest)
            elif t is T.ADD_ROWS_MULTI or t is T.COPY_ROWS_MULTI:
                k = comp.add_indexes(block.second_value_offsets)
                new = Command(T.ADD_ROWS if t is T.ADD_ROWS_MULTI else T.COPY_ROWS,
                              command.alpha, dest, other, k)
            else:   # ADD_TO_ROWS_MULTI: invert the table into an AddRows
                inverse = np.full(block.second_value_range, -1, dtype=np.int64)
                inverse[block.second_value_offsets] = np.arange(block.size)
                new = Command(T.ADD_ROWS, command.alpha, other, dest, comp.add_indexes(inverse))
            split_commands.append(new)
        comp.commands[c] = split_commands[0]
        for extra in split_commands[1:]:
            self.new_commands.append((c + 1, extra))   # just after command c
        return True

    def split_commands(self) -> bool:
        changed = False
        for c in range(len(self.computation.commands)):
            changed |= self.split_command(c)
        if self.new_commands:
            insert_commands(self.new_commands, self.computation)
        return changed


def split_row_ops(computation: NnetComputation) -> bool:
    """Kaldi's SplitRowOps (see the module docstring).  Must follow
    :func:`snip_row_ops`, which removes the -1 pairs at the edges."""
    return RowOpsSplitter(computation).split()
