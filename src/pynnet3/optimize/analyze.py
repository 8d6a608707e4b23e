"""Analysis of a compiled NnetComputation (Kaldi's nnet-analyze).

The optimizer and the checker reason about which command reads or writes
which part of which matrix.  Element-level bookkeeping would be far too
costly, and matrix-level bookkeeping too coarse, so (as Kaldi does) each
matrix is cut into *variables*: the cells of the coarsest grid of row ranges
x column ranges such that every submatrix of the computation is exactly a
union of cells.  Variables are numbered matrix by matrix, row range by row
range, then column range, so the variables of a submatrix come out sorted.

On top of the variables this module computes, per command, which variables,
submatrices and matrices it reads and writes (:class:`CommandAttributes`),
then the same information turned around: per variable and per matrix, the
ordered list of commands that touch it (:class:`Access`,
:class:`MatrixAccesses`).  :class:`Analyzer` bundles all of it and
:class:`ComputationAnalysis` answers the questions the optimization passes
ask ("when is this submatrix first touched for real?").

Index work is vectorised with NumPy: commands are turned into (command,
submatrix, access) records per command type on the command table
(analyze_records.py); expanding those to variables, merging duplicates and
regrouping by variable or by matrix are array ops, and the per-command
attribute lists are only made for the commands a pass asks about, so a
computation of thousands of commands is analysed in about a millisecond.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any, NamedTuple, Sequence

import numpy as np

from ..compile.computation import NnetComputation, SubMatrixInfo
from ..errors import ComputationCheckError
from .arrays import unique_ints
from .analyze_jit import variables_arrays

# Whether ComputationVariables uses the compiled loop (tests compare both).
_USE_JIT = True


class AccessType(enum.IntEnum):
    """Kaldi's AccessType (same values)."""

    READ = 0
    WRITE = 1
    READ_WRITE = 2


_ACCESS_TYPES = (AccessType.READ, AccessType.WRITE, AccessType.READ_WRITE)
_TUPLE_NEW = tuple.__new__

# Internally an access is a two-bit flag so that merging several accesses of
# one command to one variable is a bitwise OR; AccessType = flag - 1.
_R, _W, _RW = 1, 2, 3


class Access(NamedTuple):
    """One command's access to a variable or matrix."""

    command_index: int
    access_type: AccessType


@dataclass(slots=True)
class CommandAttributes:
    """What one command reads and writes.  Every list is sorted and unique.

    A variable (or matrix) both read and written appears in both lists; an
    operation that adds to its output, or writes only some of the rows,
    counts as reading the old contents too.
    """

    variables_read: list[int] = field(default_factory=list)
    variables_written: list[int] = field(default_factory=list)
    submatrices_read: list[int] = field(default_factory=list)
    submatrices_written: list[int] = field(default_factory=list)
    matrices_read: list[int] = field(default_factory=list)
    matrices_written: list[int] = field(default_factory=list)
    # True for commands that change the model (Backprop of an updatable
    # component), which an optimizer must never drop.
    has_side_effects: bool = False


@dataclass(slots=True)
class MatrixAccesses:
    """Lifetime and accesses of one matrix.

    ``allocate_command`` is the AllocMatrix, SwapMatrix (as destination) or
    first AcceptInput command, -1 if none; ``deallocate_command`` the
    DeallocMatrix or SwapMatrix (as source) command, -1 if none.  Allocation,
    deallocation and swapping are not accesses; AcceptInput is a write.
    """

    allocate_command: int = -1
    deallocate_command: int = -1
    accesses: list[Access] = field(default_factory=list)
    is_input: bool = False
    is_output: bool = False


def command_text(computation: NnetComputation, nnet: Any, command_index: int) -> str:
    """The command as the computation printer shows it, or its raw fields when
    its arguments are too broken to print."""
    try:
        return computation.command_string(command_index, nnet.component_names,
                                          nnet.node_names).rstrip("\n")
    except (IndexError, KeyError, ValueError, TypeError, AttributeError):
        return f"c{command_index}: {computation.commands[command_index]!r}"


def command_error(computation: NnetComputation, nnet: Any, command_index: int,
                  message: str) -> ComputationCheckError:
    return ComputationCheckError(message, command_index,
                                 command_text(computation, nnet, command_index))


# ---------------------------------------------------------------------------
# Variables
# ---------------------------------------------------------------------------

def _submatrix_table(computation: NnetComputation) -> np.ndarray:
    """int64 [num_submatrices, 5]: matrix, row_offset, num_rows, col_offset,
    num_cols (read-only)."""
    return computation.submatrix_table()


_MATRIX_SIZE = attrgetter("num_rows", "num_cols")


class _SplitPoints(Sequence):
    """Per matrix, its sorted split points (``points[first[m]:first[m+1]]``),
    sliced on demand."""

    __slots__ = ("_points", "_first")

    def __init__(self, points: np.ndarray, first: np.ndarray) -> None:
        self._points = points
        self._first = first.tolist()

    def __len__(self) -> int:
        return len(self._first) - 1

    def __getitem__(self, m):  # type: ignore[override]
        if isinstance(m, slice):
            return [self[i] for i in range(*m.indices(len(self)))]
        if m < 0:
            m += len(self)
        return self._points[self._first[m]:self._first[m + 1]]


def _split_points(matrix: np.ndarray, starts: np.ndarray, ends: np.ndarray,
                  sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Sorted unique split points of every matrix along one axis.

    Returns (keys, first, K) where ``keys`` holds ``matrix * K + point`` for
    all split points, sorted, and ``first[m]`` is the position of matrix m's
    first key (``first`` has one extra entry at the end).  Every matrix
    m >= 1 gets 0 and its size as split points even when no submatrix
    refers to it.
    """
    num_matrices = len(sizes)
    mats = np.arange(1, num_matrices, dtype=np.int64)
    k = int(max(sizes.max(initial=0), ends.max(initial=0))) + 1
    keys = np.concatenate([matrix * k + starts, matrix * k + ends,
                           mats * k, mats * k + sizes[1:]])
    keys = unique_ints(keys)
    counts = np.bincount(keys // k, minlength=num_matrices)
    first = np.zeros(num_matrices + 1, dtype=np.int64)
    np.cumsum(counts, out=first[1:])
    return keys, first, k


class ComputationVariables:
    """Kaldi's ComputationVariables: variables of a computation and the
    variables of each submatrix (see the module docstring)."""

    def __init__(self, computation: NnetComputation | None = None) -> None:
        self.row_split_points: Sequence[np.ndarray] = []
        self.column_split_points: Sequence[np.ndarray] = []
        # matrix_to_variable_index[m] is the first variable of matrix m; one
        # extra entry at the end equals num_variables.
        self.matrix_to_variable_index = np.zeros(1, dtype=np.int64)
        self.submatrix_to_matrix = np.zeros(0, dtype=np.int64)
        self.submatrix_is_whole_matrix = np.zeros(0, dtype=bool)
        self.variable_to_matrix = np.zeros(0, dtype=np.int64)
        self.num_variables = 0
        # Variables of each submatrix in compressed-row form: those of
        # submatrix s are variables_flat[variables_offsets[s]:variables_offsets[s+1]].
        self.variables_flat = np.zeros(0, dtype=np.int64)
        self.variables_offsets = np.zeros(1, dtype=np.int64)
        self._row_first = np.zeros(1, dtype=np.int64)
        self._col_first = np.zeros(1, dtype=np.int64)
        self._vfs_cache: list[list[int] | None] = []
        if computation is not None:
            self.init(computation)

    # -- construction --------------------------------------------------------
    def init(self, computation: NnetComputation) -> None:
        matrices = computation.matrices
        sizes = np.fromiter(chain.from_iterable(map(_MATRIX_SIZE, matrices)), dtype=np.int64,
                            count=2 * len(matrices)).reshape(-1, 2)
        self.init_from_tables(_submatrix_table(computation), sizes)

    def init_from_tables(self, table: np.ndarray, sizes: np.ndarray) -> None:
        """:meth:`init` from the submatrix table (int64 [num_submatrices, 5])
        and the matrix sizes (int64 [num_matrices, 2]: rows, columns)."""
        if len(table) == 0 or (table[0] != 0).any():
            raise ComputationCheckError("submatrix 0 must be the empty submatrix")
        if len(sizes) == 0:
            raise ComputationCheckError("matrix 0 (the empty matrix) is missing")
        num_matrices = len(sizes)
        sub = table[1:]
        mat, r0, nr, c0, nc = (sub[:, i] for i in range(5))
        self._validate_submatrices(mat, r0, nr, c0, nc, sizes)
        if num_matrices > 1 and (sizes[1:] <= 0).any():
            m = int(np.flatnonzero((sizes[1:] <= 0).any(axis=1))[0]) + 1
            raise ComputationCheckError(f"matrix m{m} has size {sizes[m, 0]} x {sizes[m, 1]}")
        if _USE_JIT:
            self._init_jit(table, sizes)
        else:
            self._init_numpy(table, sizes)

    def _init_jit(self, table: np.ndarray, sizes: np.ndarray) -> None:
        """The arrays of :meth:`_init_numpy`, from one compiled loop."""
        (row_pts, row_first, col_pts, col_first, first_var, variable_to_matrix, whole, flat,
         offsets) = variables_arrays(table, sizes)
        self.row_split_points = _SplitPoints(row_pts, row_first)
        self.column_split_points = _SplitPoints(col_pts, col_first)
        self._row_first, self._col_first = row_first, col_first
        self.matrix_to_variable_index = first_var
        self.num_variables = int(first_var[-1])
        self.variable_to_matrix = variable_to_matrix
        self.submatrix_to_matrix = table[:, 0].copy()
        self.submatrix_is_whole_matrix = whole
        self.variables_flat = flat
        self.variables_offsets = offsets
        self._vfs_cache = [None] * len(table)

    def _init_numpy(self, table: np.ndarray, sizes: np.ndarray) -> None:
        """The variables by array operations (validated input)."""
        num_matrices = len(sizes)
        sub = table[1:]
        mat, r0, nr, c0, nc = (sub[:, i] for i in range(5))
        row_keys, row_first, row_k = _split_points(mat, r0, r0 + nr, sizes[:, 0])
        col_keys, col_first, col_k = _split_points(mat, c0, c0 + nc, sizes[:, 1])
        row_pts = row_keys % row_k
        col_pts = col_keys % col_k
        self.row_split_points = _SplitPoints(row_pts, row_first)
        self.column_split_points = _SplitPoints(col_pts, col_first)
        self._row_first, self._col_first = row_first, col_first

        num_row_vars = np.maximum(np.diff(row_first) - 1, 0)
        num_col_vars = np.maximum(np.diff(col_first) - 1, 0)
        num_vars = num_row_vars * num_col_vars
        self.matrix_to_variable_index = np.zeros(num_matrices + 1, dtype=np.int64)
        np.cumsum(num_vars, out=self.matrix_to_variable_index[1:])
        self.num_variables = int(self.matrix_to_variable_index[-1])
        self.variable_to_matrix = np.repeat(np.arange(num_matrices, dtype=np.int64), num_vars)

        # Row / column split-point index of each submatrix's start and end:
        # position of the key in the sorted key array minus the matrix's first.
        rs = np.searchsorted(row_keys, mat * row_k + r0) - row_first[mat]
        re = np.searchsorted(row_keys, mat * row_k + r0 + nr) - row_first[mat]
        cs = np.searchsorted(col_keys, mat * col_k + c0) - col_first[mat]
        ce = np.searchsorted(col_keys, mat * col_k + c0 + nc) - col_first[mat]
        ncv = num_col_vars[mat]
        whole = (rs == 0) & (re == num_row_vars[mat]) & (cs == 0) & (ce == ncv)
        self.submatrix_to_matrix = np.concatenate([[0], mat])
        self.submatrix_is_whole_matrix = np.concatenate([[False], whole])

        # Expand each submatrix's block of variables (rows re-rs by columns
        # ce-cs, row-major) into a flat array.
        width = ce - cs
        counts = np.concatenate([[0], (re - rs) * width])
        offsets = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        owner = np.repeat(np.arange(len(sub), dtype=np.int64), counts[1:])
        k = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[1:-1][owner]
        w = width[owner]
        self.variables_flat = (self.matrix_to_variable_index[mat[owner]]
                               + (rs[owner] + k // w) * ncv[owner] + cs[owner] + k % w)
        self.variables_offsets = offsets
        self._vfs_cache = [None] * len(table)

    @staticmethod
    def _validate_submatrices(mat: np.ndarray, r0: np.ndarray, nr: np.ndarray, c0: np.ndarray,
                              nc: np.ndarray, sizes: np.ndarray) -> None:
        num_matrices = len(sizes)
        bad = (mat < 1) | (mat >= num_matrices)
        m = np.where(bad, 0, mat)
        bad |= (r0 < 0) | (nr <= 0) | (r0 + nr > sizes[m, 0])
        bad |= (c0 < 0) | (nc <= 0) | (c0 + nc > sizes[m, 1])
        if bad.any():
            s = int(np.flatnonzero(bad)[0])
            raise ComputationCheckError(
                f"submatrix {s + 1} = (matrix {mat[s]}, rows {r0[s]}+{nr[s]}, cols {c0[s]}+{nc[s]})"
                " is out of range of its matrix")

    # -- queries -----------------------------------------------------------
    def variables_for_submatrix(self, submatrix_index: int) -> list[int]:
        """Sorted variables of a submatrix (empty for submatrix 0)."""
        cached = self._vfs_cache[submatrix_index]
        if cached is None:
            o = self.variables_offsets
            cached = self.variables_flat[o[submatrix_index]:o[submatrix_index + 1]].tolist()
            self._vfs_cache[submatrix_index] = cached
        return cached

    def variables_for_matrix(self, matrix_index: int) -> range:
        """The variables of a matrix: a contiguous range."""
        return range(int(self.matrix_to_variable_index[matrix_index]),
                     int(self.matrix_to_variable_index[matrix_index + 1]))

    def append_variables_for_submatrix(self, submatrix_index: int, out: list[int]) -> None:
        out.extend(self.variables_for_submatrix(submatrix_index))

    def append_variables_for_matrix(self, matrix_index: int, out: list[int]) -> None:
        out.extend(self.variables_for_matrix(matrix_index))

    def get_matrix_for_variable(self, variable: int) -> int:
        return int(self.variable_to_matrix[variable])

    def _variable_position(self, variable: int) -> tuple[int, int, int]:
        if not 0 <= variable < self.num_variables:
            raise IndexError(f"variable {variable} out of range [0, {self.num_variables})")
        m = int(self.variable_to_matrix[variable])
        ncv = len(self.column_split_points[m]) - 1
        offset = variable - int(self.matrix_to_variable_index[m])
        return m, offset // ncv, offset % ncv

    def describe_variable(self, variable: int) -> str:
        """``m3``, ``m3(0:9,:)`` or ``m3(0:9,10:19)`` (inclusive ranges)."""
        m, r, c = self._variable_position(variable)
        rows, cols = self.row_split_points[m], self.column_split_points[m]
        if len(rows) == 2 and len(cols) == 2:
            return f"m{m}"
        rtext = ":" if len(rows) == 2 else f"{rows[r]}:{rows[r + 1] - 1}"
        ctext = ":" if len(cols) == 2 else f"{cols[c]}:{cols[c + 1] - 1}"
        return f"m{m}({rtext},{ctext})"

    def variable_info(self, variable: int) -> SubMatrixInfo:
        """The rows and columns a variable covers, as a SubMatrixInfo."""
        m, r, c = self._variable_position(variable)
        rows, cols = self.row_split_points[m], self.column_split_points[m]
        return SubMatrixInfo(m, int(rows[r]), int(rows[r + 1] - rows[r]),
                             int(cols[c]), int(cols[c + 1] - cols[c]))

    def record_access_for_submatrix(self, submatrix_index: int, access_type: AccessType,
                                    ca: CommandAttributes) -> None:
        """Add one access to ``ca`` (unsorted; the batch computation in
        :func:`compute_command_attributes` does not use this)."""
        if submatrix_index == 0:
            return
        m = int(self.submatrix_to_matrix[submatrix_index])
        v = self.variables_for_submatrix(submatrix_index)
        if access_type is not AccessType.WRITE:
            ca.variables_read.extend(v)
            ca.submatrices_read.append(submatrix_index)
            ca.matrices_read.append(m)
        if access_type is not AccessType.READ:
            ca.variables_written.extend(v)
            ca.submatrices_written.append(submatrix_index)
            ca.matrices_written.append(m)
            # Writing part of a matrix leaves the rest as it was, so for the
            # matrix as a whole the result depends on the old contents.
            if access_type is AccessType.WRITE and not self.submatrix_is_whole_matrix[submatrix_index]:
                ca.matrices_read.append(m)


# ---------------------------------------------------------------------------
# Command attributes (the record building lives in analyze_records.py)
# ---------------------------------------------------------------------------

def _merge_records(cmd: np.ndarray, item: np.ndarray, flag: np.ndarray,
                   num_items: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort (command, item, flag) records by command then item, merging
    duplicates by OR-ing their flags."""
    if len(cmd) == 0:
        return cmd, item, flag
    base = max(num_items, int(item.max()) + 1, 1)
    # (The flag, 1..3, rides in the low two bits of the sort key.)
    key = np.sort((cmd * base + item) * 4 + flag)
    merged = key & 3
    key >>= 2
    starts = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]]))
    merged = np.bitwise_or.reduceat(merged, starts)
    key = key[starts]
    cmd = key // base
    return cmd, key - cmd * base, merged


def compute_command_attributes(nnet: Any, computation: NnetComputation,
                               variables: ComputationVariables,
                               _arrays: dict[str, _AccessArrays] | None = None
                               ) -> CommandAttributesList:
    """Kaldi's ComputeCommandAttributes: one CommandAttributes per command
    (a lazily built sequence; see :class:`CommandAttributesList`).

    ``nnet`` supplies component properties (Propagate may add to its output,
    Backprop may add to the input derivative, updatable Backprop has side
    effects).  ``_arrays``, if given, receives the merged access arrays the
    Analyzer reuses.
    """
    var, subm, mat, side_effects = _command_access_arrays(nnet, computation, variables)
    if _arrays is not None:
        _arrays.update(variables=var, matrices=mat)
    return CommandAttributesList(len(computation.commands), (var, subm, mat), side_effects)


# ---------------------------------------------------------------------------
# Per-variable and per-matrix accesses
# ---------------------------------------------------------------------------

class VariableAccessTable:
    """Accesses of every variable, sorted by command, one per command.

    Stored as arrays in compressed-row form (``offsets``, ``commands``,
    ``types``); ``table[v]`` gives variable v's accesses as a list of
    :class:`Access` (built on first use and cached), so it reads like
    Kaldi's ``std::vector<std::vector<Access>>``.
    """

    def __init__(self, num_variables: int, var: np.ndarray, cmd: np.ndarray,
                 flag: np.ndarray) -> None:
        # Sorted by variable then command, several accesses of one command
        # to one variable merged (the input may be in any order).
        var_sorted, self.commands, flag = _merge_records(var, cmd, flag,
                                                         int(cmd.max()) + 1 if len(cmd) else 1)
        self.types = flag - 1  # AccessType values
        self.offsets = np.searchsorted(var_sorted, np.arange(num_variables + 1))
        self._cache: list[list[Access] | None] = [None] * num_variables
        self._commands_list: list[int] | None = None
        self._types_list: list[int] | None = None
        self._offsets_list: list[int] | None = None

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, v: int) -> list[Access]:
        acc = self._cache[v]
        if acc is None:
            if self._commands_list is None:
                self._commands_list = self.commands.tolist()
                self._types_list = self.types.tolist()
                self._offsets_list = self.offsets.tolist()
            lo, hi = self._offsets_list[v], self._offsets_list[v + 1]
            acc = list(map(_TUPLE_NEW, repeat(Access), zip(
                self._commands_list[lo:hi],
                map(_ACCESS_TYPES.__getitem__, self._types_list[lo:hi]))))
            self._cache[v] = acc
        return acc

    def __iter__(self):
        for v in range(len(self)):
            yield self[v]

    def num_accesses(self) -> np.ndarray:
        return np.diff(self.offsets)


def compute_variable_accesses(variables: ComputationVariables,
                              command_attributes: Sequence[CommandAttributes]
                              ) -> VariableAccessTable:
    """Kaldi's ComputeVariableAccesses, from the command attributes."""
    cmds, vars_, flags = [], [], []
    for c, attr in enumerate(command_attributes):
        r, w = attr.variables_read, attr.variables_written
        if not r and not w:
            continue
        both = r + w
        cmds.append(np.full(len(both), c, dtype=np.int64))
        vars_.append(np.array(both, dtype=np.int64))
        flags.append(np.concatenate([np.full(len(r), _R), np.full(len(w), _W)]).astype(np.int64))
    if not cmds:
        e = np.zeros(0, dtype=np.int64)
        return VariableAccessTable(variables.num_variables, e, e, e)
    cmd, var, flag = _merge_records(np.concatenate(cmds), np.concatenate(vars_),
                                    np.concatenate(flags), variables.num_variables)
    return VariableAccessTable(variables.num_variables, var, cmd, flag)


def compute_matrix_accesses(nnet: Any, computation: NnetComputation,
                            variables: ComputationVariables,
                            command_attributes: Sequence[CommandAttributes],
                            _matrix_arrays: _AccessArrays | None = None,
                            _table: np.ndarray | None = None) -> Sequence[MatrixAccesses]:
    """Kaldi's ComputeMatrixAccesses: accesses, allocation, deallocation and
    input/output status of every matrix (index 0 included, unused)."""
    num_matrices = len(computation.matrices)
    if _matrix_arrays is None:
        cmds, mats, flags = [], [], []
        for c, attr in enumerate(command_attributes):
            for m in attr.matrices_read:
                cmds.append(c), mats.append(m), flags.append(_R)
            for m in attr.matrices_written:
                cmds.append(c), mats.append(m), flags.append(_W)
        _matrix_arrays = _AccessArrays(*_merge_records(
            np.array(cmds, dtype=np.int64), np.array(mats, dtype=np.int64),
            np.array(flags, dtype=np.int64), num_matrices))
    a = _matrix_arrays
    # Sorted by matrix, then command, one access per command (merged).
    mats, cmds, flags = _merge_records(a.item, a.cmd, a.flag,
                                       int(a.cmd.max()) + 1 if len(a.cmd) else 1)
    types = flags - 1
    bounds = np.searchsorted(mats, np.arange(num_matrices + 1))
    table = _table if _table is not None else computation.command_table()
    lifetimes = _matrix_lifetimes(table, variables, num_matrices)
    if lifetimes is None:
        # Something is wrong: the loop finds the first bad command and says what.
        every = list(map(_TUPLE_NEW, repeat(Access), zip(
            cmds.tolist(), map(_ACCESS_TYPES.__getitem__, types.tolist()))))
        b = bounds.tolist()
        ans = [MatrixAccesses(accesses=every[lo:hi]) for lo, hi in zip(b[:-1], b[1:])]
        _matrix_lifetimes_loop(nnet, computation, variables, table, ans)
        return ans
    return MatrixAccessesList(cmds, types, bounds, *lifetimes)


class MatrixAccessesList(Sequence):
    """The :class:`MatrixAccesses` of every matrix, each made on first use
    (variable merging asks about a few matrices per round).  Compares equal
    to a list of the same records.

    The same information as arrays, for passes that look at every matrix:
    ``access_commands`` and ``access_types`` (AccessType values) of all
    accesses sorted by matrix then command, matrix m's being
    ``bounds[m]:bounds[m+1]``; ``allocate``, ``deallocate``, ``is_input``,
    ``is_output``: lists indexed by matrix.
    """

    __slots__ = ("access_commands", "access_types", "bounds", "allocate", "deallocate",
                 "is_input", "is_output", "_lists", "_cache")

    def __init__(self, commands: np.ndarray, types: np.ndarray, bounds: np.ndarray,
                 alloc: list[int], dealloc: list[int], is_input: list[bool],
                 is_output: list[bool]) -> None:
        self.access_commands, self.access_types, self.bounds = commands, types, bounds
        self.allocate, self.deallocate = alloc, dealloc
        self.is_input, self.is_output = is_input, is_output
        self._lists: tuple[list[int], list[int], list[int]] | None = None
        self._cache: list[MatrixAccesses | None] = [None] * (len(bounds) - 1)

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, m):  # type: ignore[override]
        if isinstance(m, slice):
            return [self[i] for i in range(*m.indices(len(self)))]
        if m < 0:
            m += len(self._cache)
        ans = self._cache[m]
        if ans is None:
            lists = self._lists
            if lists is None:
                lists = self._lists = (self.access_commands.tolist(), self.access_types.tolist(),
                                       self.bounds.tolist())
            cmds, types, bounds = lists
            lo, hi = bounds[m], bounds[m + 1]
            ans = self._cache[m] = MatrixAccesses(
                self.allocate[m], self.deallocate[m],
                list(map(_TUPLE_NEW, repeat(Access), zip(
                    cmds[lo:hi], map(_ACCESS_TYPES.__getitem__, types[lo:hi])))),
                self.is_input[m], self.is_output[m])
        return ans

    def __iter__(self):
        for m in range(len(self._cache)):
            yield self[m]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, tuple, MatrixAccessesList)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MatrixAccessesList(len={len(self)})"


def _variables_of(computation: NnetComputation) -> ComputationVariables:
    """ComputationVariables(computation), reused while the submatrices (the
    same objects: they are immutable) and the matrix sizes are unchanged;
    most passes change only commands."""
    subs, matrices = computation.submatrices, computation.matrices
    sizes = [(m.num_rows, m.num_cols) for m in matrices]
    memo = computation.__dict__.get("_variables_memo")
    if memo is not None:
        old_subs, old_sizes, variables = memo
        if (old_sizes == sizes and len(old_subs) == len(subs)
                and all(map(is_, old_subs, subs))):
            return variables
    variables = ComputationVariables(computation)
    computation.__dict__["_variables_memo"] = (list(subs), sizes, variables)
    return variables


class Analyzer:
    """Kaldi's Analyzer: variables, command attributes, variable accesses
    and matrix accesses of one computation.

    :meth:`init` analyses (and validates) the computation; the per-command,
    per-variable and per-matrix views are made from the analysis arrays the
    first time a pass asks for them.
    """

    def __init__(self, nnet: Any = None, computation: NnetComputation | None = None) -> None:
        self.variables = ComputationVariables()
        self._command_attributes: Sequence[CommandAttributes] | None = []
        self._variable_accesses: VariableAccessTable | None = VariableAccessTable(
            0, *(np.zeros(0, dtype=np.int64),) * 3)
        self._matrix_accesses: Sequence[MatrixAccesses] = []
        self._submatrix_records: _AccessArrays | None = None
        self._arrays: tuple[Any, ...] = ()
        if computation is not None:
            self.init(nnet, computation)

    def init(self, nnet: Any, computation: NnetComputation) -> None:
        self.variables = v = _variables_of(computation)
        table = computation.command_table()
        cmd, sub, flag, side_effects = _submatrix_access_records(nnet, computation, table)
        # Each record expanded to the variables of its submatrix; for the
        # matrix, a write to only part of it is also a read.
        counts = v.variables_offsets[sub + 1] - v.variables_offsets[sub]
        first = np.repeat(v.variables_offsets[sub] - (np.cumsum(counts) - counts), counts)
        var_items = v.variables_flat[first + np.arange(int(counts.sum()), dtype=np.int64)]
        var = _AccessArrays(np.repeat(cmd, counts), var_items, np.repeat(flag, counts))
        partial_write = (flag == _W) & ~v.submatrix_is_whole_matrix[sub]
        mat = _AccessArrays(cmd, v.submatrix_to_matrix[sub], np.where(partial_write, _RW, flag))
        self._arrays = (len(computation.commands), var, _AccessArrays(cmd, sub, flag), mat,
                        side_effects)
        self._submatrix_records = None
        self._command_attributes = None
        self._variable_accesses = None
        # Made now: it checks allocation and deallocation.
        self._matrix_accesses = compute_matrix_accesses(nnet, computation, self.variables,
                                                        (), mat, table)

    @property
    def submatrix_records(self) -> _AccessArrays | None:
        """Every command's submatrix accesses as arrays (command, submatrix,
        flag: 1 read, 2 write, 3 both), sorted by command then submatrix
        (None before :meth:`init`)."""
        if self._submatrix_records is None and self._arrays:
            raw = self._arrays[2]
            self._submatrix_records = _AccessArrays(*_merge_records(
                raw.cmd, raw.item, raw.flag, len(self.variables.submatrix_to_matrix)))
        return self._submatrix_records

    @property
    def command_attributes(self) -> Sequence[CommandAttributes]:
        if self._command_attributes is None:
            num_commands, var, _, mat, side_effects = self._arrays
            by_command = [_AccessArrays(*_merge_records(a.cmd, a.item, a.flag, n))
                          for a, n in ((var, self.variables.num_variables), (mat, 0))]
            self._command_attributes = CommandAttributesList(
                num_commands, (by_command[0], self.submatrix_records, by_command[1]),
                side_effects)
        return self._command_attributes

    @command_attributes.setter
    def command_attributes(self, value: Sequence[CommandAttributes]) -> None:
        self._command_attributes = value

    @property
    def variable_accesses(self) -> VariableAccessTable:
        if self._variable_accesses is None:
            var = self._arrays[1]
            # Same result as compute_variable_accesses(), without rebuilding
            # the arrays from the per-command lists.
            self._variable_accesses = VariableAccessTable(self.variables.num_variables,
                                                          var.item, var.cmd, var.flag)
        return self._variable_accesses

    @variable_accesses.setter
    def variable_accesses(self, value: VariableAccessTable) -> None:
        self._variable_accesses = value

    @property
    def matrix_accesses(self) -> Sequence[MatrixAccesses]:
        return self._matrix_accesses

    @matrix_accesses.setter
    def matrix_accesses(self, value: Sequence[MatrixAccesses]) -> None:
        self._matrix_accesses = value


# The per-command record building and the passes' queries live beside this
# module (size); the queries are part of this module's interface.
from .analyze_records import (CommandAttributesList, _AccessArrays,  # noqa: E402
                              _command_access_arrays, _matrix_lifetimes,
                              _submatrix_access_records,
                              _matrix_lifetimes_loop)
from .analyze_queries import (ComputationAnalysis, compute_matrix_to_submatrix,  # noqa: E402
                              get_commands_of_type, get_max_memory_use, max_memory_usage,
                              print_command_attributes, print_matrix_accesses)

__all__ = [
    "AccessType", "Access", "CommandAttributes", "MatrixAccesses", "ComputationVariables",
    "CommandAttributesList", "MatrixAccessesList",
    "VariableAccessTable", "Analyzer", "ComputationAnalysis", "compute_command_attributes",
    "compute_variable_accesses", "compute_matrix_accesses", "compute_matrix_to_submatrix",
    "get_commands_of_type", "get_max_memory_use", "max_memory_usage",
    "print_command_attributes", "print_matrix_accesses", "command_text", "command_error",
]
