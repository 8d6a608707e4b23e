"""Renumbering and small editing utilities the optimization passes share
(Kaldi's ComputationRenumberer, RenumberComputation, RemoveNoOps,
IdentifySubmatrixArgs & co., MatrixIsUnused, RemoveCommandsForUnusedMatrix,
InsertCommands, FixGotoLabel; nnet-optimize-utils).

Passes rewrite a computation by pointing commands at new or different
submatrices and by turning commands into no-ops; they leave behind
submatrices, matrices and index tables nobody refers to any more, and
duplicates of them.  :func:`renumber_computation` removes those and numbers
what is left densely, keeping the first of each group of duplicates and the
original order otherwise (so that our numbering is Kaldi's).

Where Kaldi collects pointers to arguments and writes through them, these
functions build new (frozen) Command records with the arguments mapped.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from ..compile.computation import COMMAND_SPECS, Command, CommandType, IndexTable, NnetComputation
from ..errors import ComputationCheckError, PynnetError
from .analysis import Analyzer
from .arrays import ComputationArrays, computation_and_arrays, rows_with_type, type_mask

__all__ = ["renumber_computation", "remove_no_ops", "identify_submatrix_args",
           "identify_indexes_args", "identify_indexes_multi_args", "identify_indexes_ranges_args",
           "map_submatrix_args", "matrix_is_unused", "remove_commands_for_unused_matrix",
           "insert_commands", "ComputationRenumberer", "renumber_arrays", "whole_submatrices"]

T = CommandType
_T_PROPAGATE = int(T.PROPAGATE)
_T_BACKPROP = int(T.BACKPROP)
_T_BACKPROP_NO_MODEL_UPDATE = int(T.BACKPROP_NO_MODEL_UPDATE)

# Per command type, the 0-based positions (in Command.args) of the
# arguments that are submatrix indexes.  Kaldi lists these by hand in
# IdentifySubmatrixArgs; here they come from the command specs (which also
# cover the compression commands Kaldi's list leaves out).
_SUBMATRIX_POSITIONS: dict[CommandType, tuple[int, ...]] = {
    t: tuple(pos - 1 for pos in spec.submatrix_args()) for t, spec in COMMAND_SPECS.items()}
_ARG_NAMES = ("arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7")


def _index_positions(table: IndexTable) -> dict[CommandType, int]:
    """Where the argument into ``table`` is (0-based), per command type using it."""
    return {t: spec.index_arg - 1 for t, spec in COMMAND_SPECS.items()
            if spec.index_table is table}


_INDEXES_POSITION = _index_positions(IndexTable.INDEXES)
_INDEXES_MULTI_POSITION = _index_positions(IndexTable.INDEXES_MULTI)
_INDEXES_RANGES_POSITION = _index_positions(IndexTable.INDEXES_RANGES)


# ---------------------------------------------------------------------------
# Identifying arguments


def identify_submatrix_args(command: Command) -> list[int]:
    """The submatrix indexes among a command's arguments (optional ones may be 0)."""
    args = command.args
    return [args[i] for i in _SUBMATRIX_POSITIONS[command.command_type]]


def identify_indexes_args(commands: Sequence[Command]) -> list[tuple[int, int]]:
    """(command index, indexes index) of every CopyRows / AddRows."""
    return [(c, cmd.args[_INDEXES_POSITION[cmd.command_type]]) for c, cmd in enumerate(commands)
            if cmd.command_type in _INDEXES_POSITION]


def identify_indexes_multi_args(commands: Sequence[Command]) -> list[tuple[int, int]]:
    """(command index, indexes_multi index) of every *RowsMulti command."""
    return [(c, cmd.arg2) for c, cmd in enumerate(commands)
            if cmd.command_type in _INDEXES_MULTI_POSITION]


def identify_indexes_ranges_args(commands: Sequence[Command]) -> list[tuple[int, int]]:
    """(command index, indexes_ranges index) of every AddRowRanges."""
    return [(c, cmd.arg3) for c, cmd in enumerate(commands)
            if cmd.command_type in _INDEXES_RANGES_POSITION]


def map_submatrix_args(command: Command, mapping: Callable[[int], int] | Sequence[int]
                       ) -> Command:
    """The command with every non-zero submatrix argument s replaced by
    ``mapping[s]`` (or ``mapping(s)``); 0 (an absent optional argument) stays."""
    positions = _SUBMATRIX_POSITIONS[command.command_type]
    if not positions:
        return command
    get = mapping if callable(mapping) else mapping.__getitem__
    args = command.args
    changes = {}
    for i in positions:
        s = args[i]
        if s > 0:
            new = get(s)
            if new != s:
                changes[_ARG_NAMES[i]] = int(new)
    return command.with_args(**changes) if changes else command


# ---------------------------------------------------------------------------
# The renumberer


def _create_renumbering(used: np.ndarray) -> tuple[np.ndarray, int]:
    """old -> new index keeping the used elements in order (-1 for unused)."""
    new = np.full(len(used), -1, dtype=np.int64)
    count = int(used.sum())
    new[used] = np.arange(count, dtype=np.int64)
    return new, count


def _dedup_arrays(arrays: Sequence[np.ndarray], used: np.ndarray | None
                  ) -> tuple[np.ndarray, list[int]]:
    """old -> new numbering of a list of index arrays that drops unused
    entries and merges equal ones (the first occurrence keeps its place);
    also the old index of each kept entry."""
    old_to_new = np.full(len(arrays), -1, dtype=np.int64)
    seen: dict[tuple[tuple[int, ...], bytes], int] = {}
    kept: list[int] = []
    for i, arr in enumerate(arrays):
        if used is not None and not used[i]:
            continue
        key = (arr.shape, np.ascontiguousarray(arr, dtype=np.int32).tobytes())
        j = seen.get(key)
        if j is None:
            j = seen[key] = len(kept)
            kept.append(i)
        old_to_new[i] = j
    return old_to_new, kept


# _SUBMATRIX_MASK[type, i]: argument i (0-based) of commands of that type is a submatrix.
_SUBMATRIX_MASK = np.zeros((len(CommandType), 7), dtype=bool)
for _t, _positions in _SUBMATRIX_POSITIONS.items():
    _SUBMATRIX_MASK[int(_t), list(_positions)] = True
# Masks over command types (see arrays.type_mask).
_MULTI_TYPES = type_mask(_INDEXES_MULTI_POSITION)
_INDEXES_TYPES = type_mask(_INDEXES_POSITION)
_RANGES_TYPES = type_mask(_INDEXES_RANGES_POSITION)


class ComputationRenumberer:
    """Kaldi's ComputationRenumberer; use :func:`renumber_computation` (or
    :func:`renumber_arrays` inside a pass that works on
    :class:`~.arrays.ComputationArrays`).

    Works on the array form of the computation (the command table: type and
    arguments of every command as one int array; the submatrix table), so
    that finding and mapping arguments is array work; the commands whose
    arguments change are rebuilt once, when the arrays are written back.
    """

    def __init__(self, computation: NnetComputation | ComputationArrays) -> None:
        self.computation: NnetComputation | None
        self.computation, self.arrays = computation_and_arrays(computation)
        self.submatrix_is_used = np.zeros(0, dtype=bool)
        self.submatrix_is_kept = np.zeros(0, dtype=bool)
        self.matrix_is_used = np.zeros(0, dtype=bool)
        self.old_to_new_matrix = np.zeros(0, dtype=np.int64)
        self.old_to_new_submatrix = np.zeros(0, dtype=np.int64)
        self.num_matrices_new = 0
        self.num_submatrices_new = 0

    def renumber(self) -> None:
        self.remove_unused_indexes_multi()
        self.compute_submatrix_is_used()
        self.compute_matrix_is_used()
        self.set_up_mappings()
        self.renumber_submatrices()
        self.renumber_matrices()
        self.remove_indexes_multi_duplicates()
        self.renumber_indexes()
        self.renumber_indexes_ranges()
        self.renumber_memos()
        # (Later renumbering of these arrays only drops tables.)
        self.arrays.tables_distinct = True
        if self.computation is not None:
            self.arrays.write_back(self.computation)

    # -- the command table ---------------------------------------------------------
    @property
    def table(self) -> np.ndarray:
        return self.arrays.table

    def _args_of_types(self, types: np.ndarray, position: int) -> tuple[np.ndarray, np.ndarray]:
        """(commands, their argument at 0-based ``position``) for commands of
        the types mask ``types`` selects."""
        table = self.table
        rows = rows_with_type(table[:, 0], types)
        return rows, table[rows, position + 1]

    # -- indexes_multi -----------------------------------------------------------
    def remove_unused_indexes_multi(self) -> None:
        st = self.arrays
        n = len(st.indexes_multi)
        if n == 0:
            return
        rows, ks = self._args_of_types(_MULTI_TYPES, 1)
        bad = (ks < 0) | (ks >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ComputationCheckError(f"indexes_multi index {ks[i]} out of range", int(rows[i]))
        used = np.zeros(n, dtype=bool)
        used[ks] = True
        old_to_new, count = _create_renumbering(used)
        if count == n:
            return
        st.indexes_multi = [st.indexes_multi[i] for i in np.flatnonzero(used).tolist()]
        self._renumber_table_args(rows, ks, old_to_new, 1)

    def _renumber_table_args(self, rows: np.ndarray, ks: np.ndarray, old_to_new: np.ndarray,
                             position: int) -> None:
        self.table[rows, position + 1] = old_to_new[ks]

    # -- submatrices and matrices ------------------------------------------------
    def _submatrix_arg_mask(self) -> np.ndarray:
        table = self.table
        types = table[:, 0]
        if len(types) and (types.min() < 0 or types.max() >= len(_SUBMATRIX_MASK)):
            raise ComputationCheckError("command of unknown type")
        return _SUBMATRIX_MASK[types]

    def compute_submatrix_is_used(self) -> None:
        st = self.arrays
        num_submatrices = st.num_submatrices
        used = np.zeros(num_submatrices, dtype=bool)
        used[0] = True
        refs_arr = self.table[:, 1:][self._submatrix_arg_mask()]
        parts = [refs_arr] + [im[:, 0].astype(np.int64) for im in st.indexes_multi]
        all_refs = np.concatenate(parts) if len(parts) > 1 else refs_arr
        all_refs = all_refs[all_refs > 0]
        if len(all_refs) and all_refs.max() >= num_submatrices:
            raise ComputationCheckError(f"submatrix index {int(all_refs.max())} out of range "
                                        f"({num_submatrices} submatrices)")
        used[all_refs] = True
        self.submatrix_is_used = used

    def compute_matrix_is_used(self) -> None:
        st = self.arrays
        used = np.zeros(len(st.matrices), dtype=bool)
        used[0] = True
        used[st.sub[self.submatrix_is_used, 0]] = True
        self.matrix_is_used = used

    def set_up_mappings(self) -> None:
        st = self.arrays
        self.old_to_new_matrix, self.num_matrices_new = _create_renumbering(self.matrix_is_used)
        num_submatrices = st.num_submatrices
        old_to_new = np.full(num_submatrices, -1, dtype=np.int64)
        old_to_new[0] = 0
        kept = self.submatrix_is_used.copy()
        used = np.flatnonzero(self.submatrix_is_used[1:]) + 1
        cur = 1
        if len(used):
            # Equal submatrices share the number of the first of them; the
            # distinct ones are numbered in order of first appearance.
            rows = st.sub[used]
            first, inverse = _first_occurrence(rows)
            rank = np.empty(len(first), dtype=np.int64)
            rank[np.argsort(first)] = np.arange(len(first))
            old_to_new[used] = 1 + rank[inverse]
            kept[used] = np.arange(len(used)) == first[inverse]
            cur = 1 + len(first)
        self.old_to_new_submatrix = old_to_new
        self.submatrix_is_kept = kept
        self.num_submatrices_new = cur

    def renumber_submatrices(self) -> None:
        st = self.arrays
        mapping = self.old_to_new_submatrix
        if self.num_submatrices_new == len(mapping) and \
                (mapping == np.arange(len(mapping))).all():
            return
        table = self.table
        args = table[:, 1:]
        mask = self._submatrix_arg_mask() & (args > 0)
        table[:, 1:] = np.where(mask, mapping[np.where(mask, args, 0)], args)
        new_multi = []
        for im in st.indexes_multi:
            col = im[:, 0]
            valid = col != -1
            new_col = np.where(valid, mapping[np.where(valid, col, 0)], -1)
            if (new_col[valid] <= 0).any():
                raise ComputationCheckError("indexes_multi refers to a removed submatrix")
            if (new_col != col).any():
                im = im.copy()
                im[:, 0] = new_col
            new_multi.append(im)
        st.indexes_multi = new_multi
        kept = self.submatrix_is_kept
        st.sub = st.sub[kept]
        st.sub_origin = st.sub_origin[kept]

    def renumber_matrices(self) -> None:
        st = self.arrays
        mapping = self.old_to_new_matrix
        if self.num_matrices_new == len(st.matrices):
            return
        new_m = mapping[st.sub[1:, 0]]
        if len(new_m) and new_m.min() <= 0:
            i = int(np.flatnonzero(new_m <= 0)[0]) + 1
            raise ComputationCheckError(f"submatrix refers to removed matrix m{st.sub[i, 0]}")
        st.sub[1:, 0] = new_m
        keep = np.flatnonzero(self.matrix_is_used).tolist()
        old_num_matrices = len(st.matrices)
        st.matrices = [st.matrices[m] for m in keep]
        st.sizes = st.sizes[self.matrix_is_used]
        if st.matrix_debug_info:
            if len(st.matrix_debug_info) != old_num_matrices:
                raise ComputationCheckError(
                    f"debug info has {len(st.matrix_debug_info)} entries for "
                    f"{old_num_matrices} matrices")
            st.matrix_debug_info = [st.matrix_debug_info[m] for m in keep]

    def remove_indexes_multi_duplicates(self) -> None:
        st = self.arrays
        if not st.indexes_multi or st.tables_distinct:
            return
        old_to_new, kept = _dedup_arrays(st.indexes_multi, None)
        if len(kept) == len(st.indexes_multi):
            return
        st.indexes_multi = [st.indexes_multi[i] for i in kept]
        rows, ks = self._args_of_types(_MULTI_TYPES, 1)
        self._renumber_table_args(rows, ks, old_to_new, 1)

    def _renumber_tables(self, name: str, types: np.ndarray, position: int) -> None:
        st = self.arrays
        arrays = getattr(st, name)
        n = len(arrays)
        if n == 0:
            return
        rows, ks = self._args_of_types(types, position)
        bad = (ks < 0) | (ks >= n)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ComputationCheckError(f"{name} index {ks[i]} out of range", int(rows[i]))
        used = np.zeros(n, dtype=bool)
        used[ks] = True
        if st.tables_distinct:
            if used.all():
                return
            old_to_new, _ = _create_renumbering(used)
            kept = np.flatnonzero(used).tolist()
        else:
            old_to_new, kept = _dedup_arrays(arrays, used)
        if len(kept) == n:
            return
        setattr(st, name, [arrays[i] for i in kept])
        self._renumber_table_args(rows, ks, old_to_new, position)

    def renumber_indexes(self) -> None:
        self._renumber_tables("indexes", _INDEXES_TYPES, 2)

    def renumber_indexes_ranges(self) -> None:
        self._renumber_tables("indexes_ranges", _RANGES_TYPES, 2)

    # -- memos -------------------------------------------------------------------
    def renumber_memos(self) -> None:
        """Number the memos 1, 2, ... in the order of the Propagate commands
        that create them (Backprop commands name the same number)."""
        table = self.table
        types = table[:, 0]
        # Only commands that name a memo matter.
        is_prop = (types == _T_PROPAGATE) & (table[:, 5] > 0)
        is_back = (((types == _T_BACKPROP) | (types == _T_BACKPROP_NO_MODEL_UPDATE))
                   & (table[:, 7] > 0))
        candidates = np.flatnonzero(is_prop | is_back)
        if len(candidates) == 0:
            return
        propagate_of: dict[int, int] = {}
        backprop_of: dict[int, int] = {}
        order: list[int] = []
        for c, t, a5, a7 in zip(candidates.tolist(), types[candidates].tolist(),
                                table[candidates, 5].tolist(), table[candidates, 7].tolist()):
            if t == _T_PROPAGATE:
                if a5 in propagate_of:
                    raise ComputationCheckError(f"memo {a5} is created twice", c)
                propagate_of[a5] = c
                order.append(a5)
            else:
                # (Kaldi looks at kBackprop only; no component that uses a
                # memo is updatable, so the other kind never has one there.)
                if a7 not in propagate_of or a7 in backprop_of:
                    raise ComputationCheckError(f"memo {a7} used by a Backprop without "
                                                "exactly one Propagate before it", c)
                backprop_of[a7] = c
        for new, memo in enumerate(order, start=1):
            if memo not in backprop_of:
                raise ComputationCheckError(f"a Propagate creates memo {memo} but no Backprop "
                                            "uses it", propagate_of[memo])
            if new != memo:
                table[propagate_of[memo], 5] = new
                table[backprop_of[memo], 7] = new


def _first_occurrence(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the rows of a 2-d int array: the position of the first row of
    each distinct value (in sorted-value order) and, per row, which
    distinct value it is."""
    rows = np.ascontiguousarray(rows)
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def renumber_computation(computation: NnetComputation) -> None:
    """Kaldi's RenumberComputation: drop unused and duplicate submatrices,
    matrices and index tables and renumber memos, in place.  Leaves no-op
    commands where they are (see :func:`remove_no_ops`)."""
    ComputationRenumberer(computation).renumber()


def renumber_arrays(arrays: ComputationArrays) -> None:
    """:func:`renumber_computation` on the array form of a computation."""
    ComputationRenumberer(arrays).renumber()


def remove_no_ops(computation: NnetComputation) -> None:
    """Kaldi's RemoveNoOps: delete the NoOperation commands (the permanent,
    marker and label kinds stay)."""
    computation.commands = [c for c in computation.commands
                            if c.command_type is not T.NO_OPERATION]


# ---------------------------------------------------------------------------
# Unused matrices


def matrix_is_unused(analyzer: Analyzer, computation: NnetComputation, m: int) -> bool:
    """Kaldi's MatrixIsUnused: matrix m is neither input nor output and is
    touched only by no-ops and SetConst (besides allocation/deallocation)."""
    accesses = analyzer.matrix_accesses[m]
    if accesses.is_input or accesses.is_output:
        return False
    for access in accesses.accesses:
        t = computation.commands[access.command_index].command_type
        if t is not T.NO_OPERATION and t is not T.SET_CONST:
            return False
    return True


def remove_commands_for_unused_matrix(analyzer: Analyzer, m: int,
                                      computation: NnetComputation) -> None:
    """Kaldi's RemoveCommandsForUnusedMatrix: turn the allocation,
    deallocation and SetConst commands of an unused matrix into no-ops."""
    accesses = analyzer.matrix_accesses[m]
    commands = computation.commands
    no_op = Command(T.NO_OPERATION)

    def remove(c: int, allowed: Iterable[CommandType]) -> None:
        if commands[c].command_type not in allowed:
            raise ComputationCheckError(f"unexpected command for unused matrix m{m}", c)
        commands[c] = no_op

    if accesses.allocate_command >= 0:
        remove(accesses.allocate_command, (T.NO_OPERATION, T.ALLOC_MATRIX))
    if accesses.deallocate_command >= 0:
        remove(accesses.deallocate_command, (T.NO_OPERATION, T.DEALLOC_MATRIX))
    for access in accesses.accesses:
        remove(access.command_index, (T.NO_OPERATION, T.SET_CONST))


# ---------------------------------------------------------------------------
# Whole submatrices


def whole_submatrices(computation: NnetComputation) -> list[int]:
    """``computation.whole_submatrices()`` (for each matrix, the first
    submatrix covering it whole, 0 if none) by array operations."""
    sub = computation.submatrix_table()
    num_matrices = len(computation.matrices)
    ans = np.zeros(num_matrices, dtype=np.int64)
    if len(sub) > 1:
        rows = np.fromiter((m.num_rows for m in computation.matrices), dtype=np.int64,
                           count=num_matrices)
        cols = np.fromiter((m.num_cols for m in computation.matrices), dtype=np.int64,
                           count=num_matrices)
        m = sub[1:, 0]
        whole = np.flatnonzero((sub[1:, 1] == 0) & (sub[1:, 3] == 0) & (sub[1:, 2] == rows[m])
                               & (sub[1:, 4] == cols[m])) + 1
        if len(whole):
            matrices, first = np.unique(sub[whole, 0], return_index=True)
            ans[matrices] = whole[first]
    return ans.tolist()


# ---------------------------------------------------------------------------
# Inserting commands


def insert_commands(new_commands: Sequence[tuple[int, Command]],
                    computation: NnetComputation) -> None:
    """Kaldi's InsertCommands: each (c, command) goes just before the command
    now at position c (c == len(commands) appends); pairs with the same c
    keep their relative order.  Fixes the target of a final GotoLabel."""
    if not new_commands:
        return
    old = computation.commands
    n = len(old)
    ordered = sorted(new_commands, key=lambda p: p[0])   # stable
    if ordered[0][0] < 0 or ordered[-1][0] > n:
        raise ValueError(f"insert position out of range [0, {n}]")
    merged: list[Command] = []
    done = 0
    for c, command in ordered:
        if c > done:
            merged.extend(old[done:c])
            done = c
        merged.append(command)
    merged.extend(old[done:])
    computation.commands = merged
    fix_goto_label_if_any(computation)


def fix_goto_label_if_any(computation: NnetComputation) -> None:
    """Kaldi's FixGotoLabel where a computation has a GotoLabel (only a
    looped computation has one)."""
    if any(c.command_type is T.GOTO_LABEL for c in computation.commands):
        fix_goto_label(computation)


def fix_goto_label(computation: NnetComputation) -> None:
    """Kaldi's FixGotoLabel: point the final GotoLabel (possibly followed by
    ProvideOutput commands) at the NoOperationLabel again, after passes
    that moved commands."""
    commands = computation.commands
    for c in range(len(commands) - 1, -1, -1):
        t = commands[c].command_type
        if t is T.GOTO_LABEL:
            dest = commands[c].arg1
            if 0 <= dest < len(commands) and \
                    commands[dest].command_type is T.NO_OPERATION_LABEL:
                return
            for d in range(len(commands) - 1):
                if commands[d].command_type is T.NO_OPERATION_LABEL:
                    commands[c] = commands[c].with_args(arg1=d)
                    return
            raise PynnetError("Label not found.")
        if t is not T.PROVIDE_OUTPUT:
            return   # no goto: it would be last, or followed only by outputs
