"""A computation's commands and submatrices as writable integer arrays, for
passes that rewrite many of them several times over (renumbering, the
rounds of variable merging).

Commands and submatrices are immutable records; a pass that renumbers the
submatrices of every command once per round would build thousands of them
per round and then turn them back into arrays for the next analysis.  A
:class:`ComputationArrays` holds the same information as arrays (one row
per command: type and arguments; one row per submatrix: matrix, row offset,
rows, column offset, columns), remembers which original record each row
came from, and writes back once: rows that are still what they were keep
their original record, the others get a new one.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter, is_
from typing import Iterable

import numpy as np

from ..arraytools import sorted_unique
from ..compile.computation import (Command, CommandType, MatrixDebugInfo, MatrixInfo,
                                   NnetComputation, SubMatrixInfo)
from ..nnet.index_lists import slotted_maker

__all__ = ["ComputationArrays", "NO_OP_ROW", "type_mask", "rows_with_type", "unique_ints",
           "share_table_memos"]

_TYPES: tuple[CommandType, ...] = tuple(CommandType)
if [int(t) for t in _TYPES] != list(range(len(_TYPES))):
    raise ImportError("CommandType values must be 0, 1, 2, ...")
_T_NO_OPERATION = int(CommandType.NO_OPERATION)
_NO_OP = Command(CommandType.NO_OPERATION)
_ALPHA = attrgetter("alpha")
_SIZE = attrgetter("num_rows", "num_cols")
_MAKE_COMMANDS = slotted_maker(Command, Command.__slots__)
_MAKE_SUBMATRICES = slotted_maker(SubMatrixInfo, SubMatrixInfo.__slots__)

# The command-table row of Command(NO_OPERATION).
NO_OP_ROW = np.array([_T_NO_OPERATION] + [_NO_OP.arg1] * 7, dtype=np.int64)


def unique_ints(a: np.ndarray) -> np.ndarray:
    """``np.unique`` of a 1-d integer array (sorted, distinct) by sorting:
    NumPy 2's ``unique`` hashes, which costs several times more on the
    arrays of a few thousand entries the analysis works with."""
    return sorted_unique(a)


def type_mask(types: Iterable[int]) -> np.ndarray:
    """A bool array over command-type values, true for ``types`` (for
    :func:`rows_with_type`, cheaper than ``np.isin`` on a short table)."""
    mask = np.zeros(len(_TYPES), dtype=bool)
    mask[[int(t) for t in types]] = True
    return mask


def rows_with_type(types: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The positions in ``types`` (a column of command types) whose type
    ``mask`` selects; values that are no command type are not selected."""
    if len(types) and (types.min() < 0 or types.max() >= len(mask)):
        ok = (types >= 0) & (types < len(mask))
        return np.flatnonzero(ok & mask[np.where(ok, types, 0)])
    return np.flatnonzero(mask[types])


def computation_and_arrays(computation: "NnetComputation | ComputationArrays"
                           ) -> tuple["NnetComputation | None", "ComputationArrays"]:
    """(the computation or None, its array form) for a pass that accepts either."""
    if isinstance(computation, ComputationArrays):
        return None, computation
    return computation, ComputationArrays(computation)


class ComputationArrays:
    """Writable array form of a computation's commands and submatrices (see
    the module docstring).  Matrices, debug info and index tables stay
    lists of the same objects (passes replace entries; extend_matrices
    grows a MatrixInfo in place, as it always did, and updates ``sizes``).

    ``table``: int64 [num_commands, 8] (type, arg1..arg7); ``sub``: int64
    [num_submatrices, 5].  ``origin`` / ``sub_origin``: the original command
    / submatrix index of each row (-1 for a row with no original).
    ``alpha``: float64 [num_commands], each row's alpha (1 for a no-op);
    ``sizes``: int64 [num_matrices, 2], rows and columns of each matrix
    (kept in step with ``matrices``).  ``tables_distinct``: whether the
    index tables are known to hold no duplicates.
    """

    __slots__ = ("table", "origin", "sub", "sub_origin", "alpha", "sizes", "matrices",
                 "matrix_debug_info", "indexes", "indexes_multi", "indexes_ranges",
                 "tables_distinct", "final_analysis", "variables_hint",
                 "_commands", "_orig_table", "_submatrices", "_orig_sub")

    def __init__(self, computation: NnetComputation) -> None:
        commands = computation.commands
        submatrices = computation.submatrices
        self._commands: list[Command] = list(commands)
        self._orig_table = computation.command_table()
        self.table = self._orig_table.copy()
        self.origin = np.arange(len(commands), dtype=np.int64)
        self._submatrices: list[SubMatrixInfo] = list(submatrices)
        self._orig_sub = computation.submatrix_table()
        self.sub = self._orig_sub.copy()
        self.sub_origin = np.arange(len(submatrices), dtype=np.int64)
        self.alpha = np.fromiter(map(_ALPHA, commands), dtype=np.float64, count=len(commands))
        self.matrices: list[MatrixInfo] = list(computation.matrices)
        m = self.matrices
        self.sizes = np.fromiter(chain.from_iterable(map(_SIZE, m)), dtype=np.int64,
                                 count=2 * len(m)).reshape(-1, 2)
        self.matrix_debug_info: list[MatrixDebugInfo] = list(computation.matrix_debug_info)
        self.indexes: list[np.ndarray] = list(computation.indexes)
        self.indexes_multi: list[np.ndarray] = list(computation.indexes_multi)
        self.indexes_ranges: list[np.ndarray] = list(computation.indexes_ranges)
        # Set by renumbering once no two of indexes (or of indexes_multi, or
        # of indexes_ranges) are equal; a pass that adds a table must clear it.
        self.tables_distinct = False
        # What variable merging leaves for the pipeline: the analysis of the
        # state it ended in (see variable_merging_optimization).
        self.final_analysis: object = None
        # (submatrix table, sizes, ComputationVariables of them): the
        # variables the computation's analysis made already, if they are of
        # its present submatrices and matrix sizes; the first round of
        # variable merging reuses them while the tables still match.
        self.variables_hint: tuple | None = None
        memo = computation.__dict__.get(_VARIABLES_MEMO)
        if memo is not None:
            old_subs, old_sizes, variables = memo
            if (len(old_subs) == len(submatrices) and all(map(is_, old_subs, submatrices))
                    and old_sizes == [(mi.num_rows, mi.num_cols) for mi in m]):
                self.variables_hint = (self._orig_sub, self.sizes.copy(), variables)

    # -- sizes ---------------------------------------------------------------------
    @property
    def num_commands(self) -> int:
        return len(self.table)

    @property
    def num_submatrices(self) -> int:
        return len(self.sub)

    # -- edits ---------------------------------------------------------------------
    def set_no_op(self, c: int | list[int]) -> None:
        """Turn command row ``c`` (or rows) into a NoOperation."""
        self.table[c] = NO_OP_ROW
        self.alpha[c] = 1.0

    def remove_no_ops(self) -> None:
        """Drop the NoOperation rows (Kaldi's RemoveNoOps)."""
        keep = self.table[:, 0] != _T_NO_OPERATION
        if not keep.all():
            self.table = self.table[keep]
            self.origin = self.origin[keep]
            self.alpha = self.alpha[keep]

    # -- back to records -------------------------------------------------------------
    def commands(self) -> list[Command]:
        """The commands: original records where their row is unchanged."""
        origin = self.origin
        table = self.table
        valid = origin >= 0
        same = np.zeros(len(table), dtype=bool)
        if valid.any():
            same[valid] = (table[valid] == self._orig_table[origin[valid]]).all(axis=1)
        old = self._commands
        out = [old[o] if s else None for o, s in zip(origin.tolist(), same.tolist())]
        changed = np.flatnonzero(~same)
        if len(changed):
            rows = table[changed]
            types = rows[:, 0]
            # The very alpha objects of the original commands (an int alpha
            # stays an int); 1.0 for no-ops.
            alphas = [old[o].alpha if t != _T_NO_OPERATION and o >= 0 and old[o].alpha == a
                      else a for t, o, a in zip(types.tolist(), origin[changed].tolist(),
                                                self.alpha[changed].tolist())]
            cols = rows.T.tolist()
            made = _MAKE_COMMANDS(list(map(_TYPES.__getitem__, cols[0])), alphas, *cols[1:])
            for i, command in zip(changed.tolist(), made):
                out[i] = command
        return out  # type: ignore[return-value]

    def submatrices(self) -> list[SubMatrixInfo]:
        """The submatrices: original records where their row is unchanged."""
        origin = self.sub_origin
        sub = self.sub
        valid = origin >= 0
        same = np.zeros(len(sub), dtype=bool)
        if valid.any():
            same[valid] = (sub[valid] == self._orig_sub[origin[valid]]).all(axis=1)
        old = self._submatrices
        out: list[SubMatrixInfo] = [old[o] if s else None  # type: ignore[misc]
                                    for o, s in zip(origin.tolist(), same.tolist())]
        changed = np.flatnonzero(~same)
        if len(changed):
            made = _MAKE_SUBMATRICES(*sub[changed].T.tolist())
            for i, info in zip(changed.tolist(), made):
                out[i] = info
        return out

    def write_back(self, computation: NnetComputation) -> None:
        commands = self.commands()
        submatrices = self.submatrices()
        computation.commands = commands
        computation.submatrices = submatrices
        # The next analysis asks for these tables: they are the arrays.
        _prime_memo(computation, _COMMAND_MEMO, commands, self.table)
        _prime_memo(computation, _SUBMATRIX_MEMO, submatrices, self.sub)
        computation.matrices = list(self.matrices)
        computation.matrix_debug_info = list(self.matrix_debug_info)
        computation.indexes = list(self.indexes)
        computation.indexes_multi = list(self.indexes_multi)
        computation.indexes_ranges = list(self.indexes_ranges)


# NnetComputation.command_table() and submatrix_table() remember the table
# they made, with the list of records it was made from, in these instance
# attributes; write_back leaves the arrays there so that the next pass's
# analysis need not rebuild them from the records.  Checked once here: if
# the memo is not kept that way, write_back leaves it alone.
_COMMAND_MEMO = "_command_table_memo"
_SUBMATRIX_MEMO = "_submatrix_table_memo"
# (what optimize.variables.variables_of keeps on a computation)
_VARIABLES_MEMO = "_variables_memo"


def _memo_layout_ok() -> bool:
    probe = NnetComputation()
    probe.commands = [Command(CommandType.NO_OPERATION)]
    table = probe.command_table()
    sub = probe.submatrix_table()
    for attr, items, arr in ((_COMMAND_MEMO, probe.commands, table),
                             (_SUBMATRIX_MEMO, probe.submatrices, sub)):
        memo = probe.__dict__.get(attr)
        if not (isinstance(memo, tuple) and len(memo) == 2 and memo[1] is arr
                and list(memo[0]) == list(items)):
            return False
    # A primed memo must be what the method returns.
    primed = NnetComputation()
    primed.commands = [Command(CommandType.NO_OPERATION)]
    mark = table.copy()
    primed.__dict__[_COMMAND_MEMO] = (list(primed.commands), mark)
    return primed.command_table() is mark


_MEMO_OK = _memo_layout_ok()


def _prime_memo(computation: NnetComputation, attr: str, items: list, array: np.ndarray) -> None:
    if not _MEMO_OK:
        return
    table = array.copy()
    table.flags.writeable = False
    computation.__dict__[attr] = (list(items), table)


def share_table_memos(source: NnetComputation, target: NnetComputation) -> None:
    """Give ``target`` (a copy holding the same command and submatrix
    records) the tables ``source`` remembers; NnetComputation checks a
    remembered table against the records before using it."""
    if not _MEMO_OK:
        return
    for attr in (_COMMAND_MEMO, _SUBMATRIX_MEMO, _VARIABLES_MEMO):
        memo = source.__dict__.get(attr)
        if memo is not None:
            target.__dict__[attr] = memo
