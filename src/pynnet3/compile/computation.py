"""NnetComputation: the program the compiler produces and the executor runs.

A computation owns *matrices* (sizes only; index 0 is the empty matrix),
*submatrices* (row/column ranges of a matrix; index 0 is the empty one),
integer index tables used by row commands, and a list of *commands*.

Commands are data: one frozen :class:`Command` record per command, with
Kaldi's command types and argument positions (``arg1``..``arg7``), and one
table, :data:`COMMAND_SPECS`, saying what each command type means: what
each argument refers to, which arguments it reads and writes, which index
table it uses, which arguments must be whole matrices and how Kaldi prints
it.  The printer here, the analysis, the checker's index checks, the
renumbering and the executor's debug write sets are all driven by that
table, so a command type is described in one place.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter, is_
from typing import Any, Sequence

import numpy as np

from ..nnet.index import Index, print_indexes


class CommandType(enum.IntEnum):
    """Kaldi's CommandType, same order (the integer values match Kaldi's)."""

    ALLOC_MATRIX = 0
    DEALLOC_MATRIX = 1
    SWAP_MATRIX = 2
    SET_CONST = 3
    PROPAGATE = 4
    BACKPROP = 5
    BACKPROP_NO_MODEL_UPDATE = 6
    MATRIX_COPY = 7
    MATRIX_ADD = 8
    COPY_ROWS = 9
    ADD_ROWS = 10
    COPY_ROWS_MULTI = 11
    COPY_TO_ROWS_MULTI = 12
    ADD_ROWS_MULTI = 13
    ADD_TO_ROWS_MULTI = 14
    ADD_ROW_RANGES = 15
    COMPRESS_MATRIX = 16
    DECOMPRESS_MATRIX = 17
    ACCEPT_INPUT = 18
    PROVIDE_OUTPUT = 19
    NO_OPERATION = 20
    NO_OPERATION_PERMANENT = 21
    NO_OPERATION_MARKER = 22
    NO_OPERATION_LABEL = 23
    GOTO_LABEL = 24

    @property
    def kaldi_name(self) -> str:
        """Kaldi's enum name, e.g. ``kCopyRowsMulti``."""
        return "k" + "".join(p.capitalize() for p in self.name.split("_"))


class Role(enum.Enum):
    """What an argument of a command refers to, and how it is accessed."""

    SUBMATRIX_READ = "submatrix-read"        # read only
    SUBMATRIX_WRITE = "submatrix-write"      # written without reading (assignment)
    SUBMATRIX_RW = "submatrix-readwrite"     # read and written (+=, in-place)
    SUBMATRIX_ALLOC = "submatrix-alloc"      # allocated / deallocated
    SUBMATRIX_MAYBE_READ = "submatrix-opt-read"   # 0 allowed; read when non-zero
    SUBMATRIX_MAYBE_RW = "submatrix-opt-readwrite"  # 0 allowed (e.g. in_deriv)
    COMPONENT = "component"
    PRECOMPUTED = "precomputed-indexes"
    INDEXES = "indexes"
    INDEXES_MULTI = "indexes-multi"
    INDEXES_RANGES = "indexes-ranges"
    NODE = "node"
    INT = "int"
    COMMAND = "command"
    MEMO = "memo"
    UNUSED = "unused"


class ArgAccess(enum.Enum):
    """How a command accesses one submatrix argument (Kaldi's
    ComputeCommandAttributes, per argument)."""

    NONE = "none"                # not an access (allocation, swapping)
    READ = "read"
    WRITE = "write"              # every element overwritten
    READ_WRITE = "read-write"    # added to, or changed in place
    # Written, or added to when the component's properties say that it adds
    # (Propagate's output, Backprop's input derivative).
    COMPONENT_OUTPUT = "component-output"
    # Written row by row; rows whose index is -1 keep their contents (read).
    INDEXED_ROWS = "indexed-rows"


class IndexTable(enum.Enum):
    """The index table of a computation that a command's index argument
    points into."""

    NONE = "none"
    INDEXES = "indexes"                  # int32 [rows]
    INDEXES_MULTI = "indexes_multi"      # int32 [rows, 2]: (submatrix, row)
    INDEXES_RANGES = "indexes_ranges"    # int32 [rows, 2]: [first, end)


_DEFAULT_ACCESS = {Role.SUBMATRIX_READ: ArgAccess.READ, Role.SUBMATRIX_MAYBE_READ: ArgAccess.READ,
                   Role.SUBMATRIX_WRITE: ArgAccess.WRITE, Role.SUBMATRIX_RW: ArgAccess.READ_WRITE,
                   Role.SUBMATRIX_MAYBE_RW: ArgAccess.READ_WRITE}
_INDEX_ROLES = {Role.INDEXES: IndexTable.INDEXES, Role.INDEXES_MULTI: IndexTable.INDEXES_MULTI,
                Role.INDEXES_RANGES: IndexTable.INDEXES_RANGES}
_SUBMATRIX_ROLES = {Role.SUBMATRIX_READ, Role.SUBMATRIX_WRITE, Role.SUBMATRIX_RW,
                    Role.SUBMATRIX_ALLOC, Role.SUBMATRIX_MAYBE_READ, Role.SUBMATRIX_MAYBE_RW}


@dataclass(frozen=True)
class CommandSpec:
    """Everything a command type means, in one record.

    ``roles``: what arg1, arg2, ... refer to.  ``access``: how each
    argument is accessed (:class:`ArgAccess`; NONE for arguments that are
    not submatrices).  ``index_table``/``index_arg``: the index table the
    command uses and the argument (1-based) holding its position there.
    ``multi_access``: for the *Multi commands, how the submatrices named in
    the indexes_multi rows are accessed.  ``whole_args``: arguments that
    must be whole matrices.  ``print_form``: Kaldi's NnetComputation::Print
    text, with fields ``{kindN}`` rendering argument N (see
    :data:`_PRINT_FIELDS`) and ``{alpha}``, ``{scale}``, ``{model}``.
    """

    command_type: CommandType
    roles: tuple[Role, ...]
    print_form: str
    access: tuple[ArgAccess, ...] = ()
    index_table: IndexTable = IndexTable.NONE
    index_arg: int = 0
    multi_access: ArgAccess = ArgAccess.NONE
    whole_args: tuple[int, ...] = ()

    def submatrix_args(self) -> tuple[int, ...]:
        """1-based positions of the submatrix arguments."""
        return tuple(i + 1 for i, r in enumerate(self.roles) if r in _SUBMATRIX_ROLES)

    def written_args(self) -> tuple[int, ...]:
        """1-based positions of the submatrix arguments the command writes
        (entirely or in part)."""
        return tuple(i + 1 for i, a in enumerate(self.access)
                     if a not in (ArgAccess.NONE, ArgAccess.READ))

    def writes_multi_rows(self) -> bool:
        """Whether the submatrices named in its indexes_multi rows are written."""
        return self.multi_access not in (ArgAccess.NONE, ArgAccess.READ)


def _spec(t: CommandType, roles: tuple[Role, ...], print_form: str,
          access: dict[int, ArgAccess] | None = None, multi: ArgAccess = ArgAccess.NONE,
          whole: tuple[int, ...] = ()) -> CommandSpec:
    """A CommandSpec whose submatrix accesses follow the roles, except
    those given in ``access`` (1-based argument -> access)."""
    acc = [_DEFAULT_ACCESS.get(r, ArgAccess.NONE) for r in roles]
    for pos, a in (access or {}).items():
        acc[pos - 1] = a
    index = [(i + 1, _INDEX_ROLES[r]) for i, r in enumerate(roles) if r in _INDEX_ROLES]
    index_arg, table = index[0] if index else (0, IndexTable.NONE)
    return CommandSpec(t, roles, print_form, tuple(acc), table, index_arg, multi, whole)


T = CommandType
R = Role
_SM, _RD, _WR = R.SUBMATRIX_MAYBE_READ, R.SUBMATRIX_READ, R.SUBMATRIX_WRITE
_RW, _AL = R.SUBMATRIX_RW, R.SUBMATRIX_ALLOC
_NO_ACCESS = ArgAccess.NONE
_BACKPROP_ROLES = (R.COMPONENT, R.PRECOMPUTED, _SM, _SM, _RD, R.SUBMATRIX_MAYBE_RW, R.MEMO)

#: The meaning of every command type (Kaldi keeps it in a comment on
#: CommandType and in the switch statements of the printer, the analyser, the
#: checker, the renumbering and the executor).
COMMAND_SPECS: dict[CommandType, CommandSpec] = {s.command_type: s for s in (
    _spec(T.ALLOC_MATRIX, (_AL,), "{sub1} = undefined({rows1},{cols1})", whole=(1,)),
    _spec(T.DEALLOC_MATRIX, (_AL,), "{sub1} = []", whole=(1,)),
    # Swapping moves whole matrices: their contents are not accessed.
    _spec(T.SWAP_MATRIX, (_RW, _RW), "{sub1}.swap({sub2}) [dim = {rows1} x {cols1}]",
          access={1: _NO_ACCESS, 2: _NO_ACCESS}, whole=(1, 2)),
    _spec(T.SET_CONST, (_WR,), "{sub1}.set({alpha}) [dim = {rows1} x {cols1}];"),
    # component, precomputed, input, output, memo, store-stats flag (1 = StoreStats)
    _spec(T.PROPAGATE, (R.COMPONENT, R.PRECOMPUTED, _RD, _WR, R.MEMO, R.INT, R.UNUSED),
          "{component1}.Propagate({precomputed2}, {sub3}, &{sub4})",
          access={4: ArgAccess.COMPONENT_OUTPUT}),
    # component, precomputed, in_value, out_value, out_deriv, in_deriv, memo
    _spec(T.BACKPROP, _BACKPROP_ROLES,
          "{component1}.Backprop({precomputed2}, {sub3}, {sub4}, {sub5}, {model}, {ptr6})",
          access={6: ArgAccess.COMPONENT_OUTPUT}),
    _spec(T.BACKPROP_NO_MODEL_UPDATE, _BACKPROP_ROLES,
          "{component1}.Backprop({precomputed2}, {sub3}, {sub4}, {sub5}, NULL, {ptr6})",
          access={6: ArgAccess.COMPONENT_OUTPUT}),
    _spec(T.MATRIX_COPY, (_WR, _RD), "{sub1} = {scale}{sub2}"),
    _spec(T.MATRIX_ADD, (_RW, _RD), "{sub1} += {scale}{sub2}"),
    _spec(T.COPY_ROWS, (_RW, _RD, R.INDEXES), "{sub1}.CopyRows({alpha}, {sub2}{indexes3})",
          access={1: ArgAccess.INDEXED_ROWS}),
    _spec(T.ADD_ROWS, (_RW, _RD, R.INDEXES), "{sub1}.AddRows({alpha}, {sub2}{indexes3})"),
    # Rows without a source are set to zero: the destination is written.
    _spec(T.COPY_ROWS_MULTI, (_RW, R.INDEXES_MULTI), "{sub1}.CopyRowsMulti({alpha}, {multi2})",
          access={1: ArgAccess.WRITE}, multi=ArgAccess.READ),
    _spec(T.COPY_TO_ROWS_MULTI, (_RD, R.INDEXES_MULTI),
          "{sub1}.CopyToRowsMulti({alpha}, {multi2})", multi=ArgAccess.READ_WRITE),
    _spec(T.ADD_ROWS_MULTI, (_RW, R.INDEXES_MULTI), "{sub1}.AddRowsMulti({alpha}, {multi2})",
          multi=ArgAccess.READ),
    _spec(T.ADD_TO_ROWS_MULTI, (_RD, R.INDEXES_MULTI),
          "{sub1}.AddToRowsMulti({alpha}, {multi2})", multi=ArgAccess.READ_WRITE),
    _spec(T.ADD_ROW_RANGES, (_RW, _RD, R.INDEXES_RANGES),
          "{sub1}.AddRowRanges({alpha}, {sub2}, {ranges3})"),
    # submatrix, compression type, truncate flag (alpha = range)
    _spec(T.COMPRESS_MATRIX, (_RW, R.INT, R.INT),
          "CompressMatrix({sub1}, {alpha}, {compression2}, {bool3})", whole=(1,)),
    _spec(T.DECOMPRESS_MATRIX, (_RW,), "DecompressMatrix({sub1})",
          access={1: ArgAccess.WRITE}, whole=(1,)),
    _spec(T.ACCEPT_INPUT, (_WR, R.NODE), "{sub1} = user input [for node: '{node2}']",
          whole=(1,)),
    _spec(T.PROVIDE_OUTPUT, (_RD, R.NODE), "output {sub1} to user [for node: '{node2}']",
          whole=(1,)),
    _spec(T.NO_OPERATION, (), "[no-op]"),
    _spec(T.NO_OPERATION_PERMANENT, (), "[no-op-permanent]"),
    _spec(T.NO_OPERATION_MARKER, (),
          "# computation segment separator [e.g., begin backward commands]"),
    _spec(T.NO_OPERATION_LABEL, (), "[label for goto statement]"),
    _spec(T.GOTO_LABEL, (R.COMMAND,), "goto c{int1}"),
)}
if set(COMMAND_SPECS) != set(CommandType):
    raise ImportError("COMMAND_SPECS must describe every CommandType")

#: ARG_ROLES[type] = roles of (arg1, ..., arg7): the roles of COMMAND_SPECS.
ARG_ROLES: dict[CommandType, tuple[Role, ...]] = {t: s.roles for t, s in COMMAND_SPECS.items()}


class StrideType(enum.IntEnum):
    """Kaldi's MatrixStrideType."""

    DEFAULT = 0
    EQUAL_NUM_COLS = 1


class CompressedMatrixType(enum.IntEnum):
    """Kaldi's CuCompressedMatrixType (same integer codes)."""

    INT8 = 1
    UINT8 = 2
    INT16 = 3
    UINT16 = 4


@dataclass(frozen=True, slots=True)
class Command:
    command_type: CommandType
    alpha: float = 1.0
    arg1: int = -1
    arg2: int = -1
    arg3: int = -1
    arg4: int = -1
    arg5: int = -1
    arg6: int = -1
    arg7: int = -1

    def __init__(self, command_type: CommandType, alpha: float = 1.0, arg1: int = -1,
                 arg2: int = -1, arg3: int = -1, arg4: int = -1, arg5: int = -1,
                 arg6: int = -1, arg7: int = -1) -> None:
        # (dataclass's generated __init__ for a frozen class assigns through
        # object.__setattr__; storing through the slots is twice as fast, and
        # the compiler makes tens of thousands of commands.)
        s0, s1, s2, s3, s4, s5, s6, s7, s8 = _SET_FIELDS
        s0(self, command_type)
        s1(self, alpha)
        s2(self, arg1)
        s3(self, arg2)
        s4(self, arg3)
        s5(self, arg4)
        s6(self, arg5)
        s7(self, arg6)
        s8(self, arg7)

    @property
    def args(self) -> tuple[int, int, int, int, int, int, int]:
        return (self.arg1, self.arg2, self.arg3, self.arg4, self.arg5, self.arg6, self.arg7)

    def with_args(self, **changes: Any) -> "Command":
        """A copy with some fields changed (``dataclasses.replace`` without its
        per-field introspection, which made renumbering slow)."""
        if not changes.keys() <= _COMMAND_FIELD_SET:
            bad = sorted(changes.keys() - _COMMAND_FIELD_SET)
            raise TypeError(f"Command has no field(s) {bad}")
        get = changes.get
        return make_command(get("command_type", self.command_type), get("alpha", self.alpha),
                            get("arg1", self.arg1), get("arg2", self.arg2),
                            get("arg3", self.arg3), get("arg4", self.arg4),
                            get("arg5", self.arg5), get("arg6", self.arg6),
                            get("arg7", self.arg7))

    def submatrix_args(self) -> list[tuple[int, Role]]:
        """(argument position 1..7, role) of every submatrix argument."""
        roles = COMMAND_SPECS[self.command_type].roles
        return [(i + 1, role) for i, role in enumerate(roles) if role in _SUBMATRIX_ROLES]


_COMMAND_FIELD_SET = frozenset(("command_type", "alpha", "arg1", "arg2", "arg3", "arg4", "arg5",
                                "arg6", "arg7"))
_COMMAND_INT_FIELDS = attrgetter("command_type", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6",
                                 "arg7")


_SET_FIELDS = tuple(getattr(Command, name).__set__ for name in Command.__slots__)
if tuple(Command.__slots__) != ("command_type", "alpha", "arg1", "arg2", "arg3", "arg4", "arg5",
                                "arg6", "arg7"):
    raise ImportError("Command's fields changed: update Command.__init__")


# Another name for Command's constructor (the compiler's).
make_command = Command


_SUBMATRIX_FIELDS = attrgetter("matrix_index", "row_offset", "num_rows", "col_offset", "num_cols")


def submatrix_table(submatrices: Sequence["SubMatrixInfo"]) -> np.ndarray:
    """int64 [len, 5]: matrix, row_offset, num_rows, col_offset, num_cols."""
    n = len(submatrices)
    flat = np.fromiter(chain.from_iterable(map(_SUBMATRIX_FIELDS, submatrices)), dtype=np.int64,
                       count=5 * n)
    return flat.reshape(n, 5)


def _memo_table(owner: Any, attr: str, items: list, make: Any) -> np.ndarray:
    """``make(items)``, reusing the rows of items that are the same (immutable)
    objects as at the last call (memo kept in ``owner.<attr>``)."""
    memo = owner.__dict__.get(attr)
    if memo is not None:
        old_items, old_table = memo
        # (A list comparison tries identity first and stops at the first
        # difference; items equal field by field give the same rows, so an
        # equal list, the common case, needs no array work at all.)
        if old_items == items:
            return old_table
        if len(old_items) == len(items):
            same = np.fromiter(map(is_, old_items, items), dtype=bool, count=len(items))
            if same.all():
                return old_table
            table = old_table.copy()
            changed = np.flatnonzero(~same)
            table[changed] = make([items[i] for i in changed.tolist()])
        else:
            table = make(items)
    else:
        table = make(items)
    table.flags.writeable = False
    owner.__dict__[attr] = (list(items), table)
    return table


def remember_tables(computation: "NnetComputation", commands: np.ndarray,
                    submatrices: np.ndarray) -> None:
    """Give ``computation`` its command and submatrix tables (as
    :meth:`NnetComputation.command_table` and ``submatrix_table`` return
    them), where they are at hand already: a computation read from a file
    was built from them, and whoever checks it first need not rebuild them
    from the records."""
    for attr, items, array in (("_command_table_memo", computation.commands, commands),
                               ("_submatrix_table_memo", computation.submatrices, submatrices)):
        table = np.array(array, dtype=np.int64)      # (a copy)
        if table.shape != (len(items), 8 if attr == "_command_table_memo" else 5):
            raise ValueError(f"{attr}: table of shape {table.shape} for {len(items)} records")
        table.flags.writeable = False
        computation.__dict__[attr] = (list(items), table)


def command_table(commands: Sequence[Command]) -> np.ndarray:
    """The commands as an int64 array [num_commands, 8]: type, arg1 .. arg7.

    Passes that look at every command's arguments (analysis, renumbering)
    work on this array instead of on thousands of Command objects.
    """
    n = len(commands)
    flat = np.fromiter(chain.from_iterable(map(_COMMAND_INT_FIELDS, commands)), dtype=np.int64,
                       count=8 * n)
    return flat.reshape(n, 8)


@dataclass(slots=True)
class MatrixInfo:
    num_rows: int
    num_cols: int
    stride_type: StrideType = StrideType.DEFAULT


@dataclass(slots=True)
class MatrixDebugInfo:
    is_deriv: bool = False
    cindexes: list[tuple[int, Index]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SubMatrixInfo:
    matrix_index: int
    row_offset: int
    num_rows: int
    col_offset: int
    num_cols: int


@dataclass(slots=True)
class PrecomputedIndexesInfo:
    """What a component precomputed for one Propagate/Backprop (Kaldi's
    ComponentPrecomputedIndexes), plus the indexes it was computed from, so
    that it can be recomputed instead of serialised."""

    data: Any = None
    input_indexes: list[Index] = field(default_factory=list)
    output_indexes: list[Index] = field(default_factory=list)


@dataclass
class NnetComputation:
    matrices: list[MatrixInfo] = field(default_factory=lambda: [MatrixInfo(0, 0)])
    matrix_debug_info: list[MatrixDebugInfo] = field(default_factory=list)
    submatrices: list[SubMatrixInfo] = field(default_factory=lambda: [SubMatrixInfo(0, 0, 0, 0, 0)])
    # Index 0 is a placeholder: Propagate/Backprop use 0 for "no precomputed indexes".
    component_precomputed_indexes: list[PrecomputedIndexesInfo] = field(
        default_factory=lambda: [PrecomputedIndexesInfo()])
    indexes: list[np.ndarray] = field(default_factory=list)          # int32 [rows]
    indexes_multi: list[np.ndarray] = field(default_factory=list)    # int32 [rows, 2]
    indexes_ranges: list[np.ndarray] = field(default_factory=list)   # int32 [rows, 2]
    commands: list[Command] = field(default_factory=list)
    need_model_derivative: bool = False

    # -- construction --------------------------------------------------------
    def new_matrix(self, num_rows: int, num_cols: int,
                   stride_type: StrideType = StrideType.DEFAULT) -> int:
        """Add a matrix and a submatrix covering it; returns the submatrix index."""
        if num_rows <= 0 or num_cols <= 0:
            raise ValueError(f"bad matrix size {num_rows} x {num_cols}")
        if not self.matrices:
            self.matrices.append(MatrixInfo(0, 0))
            self.submatrices.append(SubMatrixInfo(0, 0, 0, 0, 0))
        matrix_index = len(self.matrices)
        self.matrices.append(MatrixInfo(num_rows, num_cols, stride_type))
        if self.matrix_debug_info:
            self.matrix_debug_info.append(MatrixDebugInfo())
        self.submatrices.append(SubMatrixInfo(matrix_index, 0, num_rows, 0, num_cols))
        return len(self.submatrices) - 1

    def new_submatrix(self, base_submatrix: int, row_offset: int, num_rows: int,
                      col_offset: int, num_cols: int) -> int:
        """A submatrix of ``base_submatrix``; -1 for num_rows/num_cols means 'the rest'."""
        base = self.submatrices[base_submatrix]
        if num_rows == -1:
            num_rows = base.num_rows - row_offset
        if num_cols == -1:
            num_cols = base.num_cols - col_offset
        if not (0 <= row_offset and num_rows > 0 and row_offset + num_rows <= base.num_rows
                and 0 <= col_offset and num_cols > 0 and col_offset + num_cols <= base.num_cols):
            raise ValueError("submatrix out of range of its base")
        self.submatrices.append(SubMatrixInfo(base.matrix_index, base.row_offset + row_offset,
                                              num_rows, base.col_offset + col_offset, num_cols))
        return len(self.submatrices) - 1

    def is_whole_matrix(self, submatrix_index: int) -> bool:
        s = self.submatrices[submatrix_index]
        m = self.matrices[s.matrix_index]
        return s.row_offset == 0 and s.col_offset == 0 and s.num_rows == m.num_rows \
            and s.num_cols == m.num_cols

    def whole_submatrices(self) -> list[int]:
        """For each matrix, a submatrix index that covers it whole (0 for matrix 0)."""
        ans = [0] * len(self.matrices)
        for s in range(len(self.submatrices) - 1, 0, -1):
            if self.is_whole_matrix(s):
                ans[self.submatrices[s].matrix_index] = s
        return ans

    def add_indexes(self, values: Sequence[int] | np.ndarray) -> int:
        self.indexes.append(np.ascontiguousarray(values, dtype=np.int32))
        return len(self.indexes) - 1

    def add_indexes_multi(self, pairs: Sequence[tuple[int, int]] | np.ndarray) -> int:
        self.indexes_multi.append(np.ascontiguousarray(pairs, dtype=np.int32).reshape(-1, 2))
        return len(self.indexes_multi) - 1

    def add_indexes_ranges(self, pairs: Sequence[tuple[int, int]] | np.ndarray) -> int:
        self.indexes_ranges.append(np.ascontiguousarray(pairs, dtype=np.int32).reshape(-1, 2))
        return len(self.indexes_ranges) - 1

    # -- tables for array work -------------------------------------------------
    def command_table(self) -> np.ndarray:
        """:func:`command_table` of the commands (read-only array).

        Remembered between calls: the analysis runs a dozen times per
        optimization, and rows of commands that are still the same objects
        (commands are immutable) are reused.
        """
        table = _memo_table(self, "_command_table_memo", self.commands, command_table)
        return table

    def submatrix_table(self) -> np.ndarray:
        """int64 [num_submatrices, 5]: matrix, row_offset, num_rows,
        col_offset, num_cols (read-only; remembered like command_table)."""
        return _memo_table(self, "_submatrix_table_memo", self.submatrices, submatrix_table)

    # -- summary -----------------------------------------------------------
    def matrix_elements_total(self) -> int:
        return sum(m.num_rows * m.num_cols for m in self.matrices)

    def matrix_elements_peak(self) -> int:
        """Most matrix elements allocated at once while the commands run.

        Matrices that are never allocated by a command (none, in a correct
        computation) are not counted.
        """
        cur = peak = 0
        for c in self.commands:
            if c.command_type is CommandType.ALLOC_MATRIX:
                m = self.matrices[self.submatrices[c.arg1].matrix_index]
                cur += m.num_rows * m.num_cols
                peak = max(peak, cur)
            elif c.command_type is CommandType.DEALLOC_MATRIX:
                m = self.matrices[self.submatrices[c.arg1].matrix_index]
                cur -= m.num_rows * m.num_cols
        return peak

    def summary(self) -> str:
        """``key: value`` lines: counts, elements, and commands by type."""
        lines = [f"num-commands: {len(self.commands)}",
                 f"num-matrices: {len(self.matrices)}",
                 f"num-submatrices: {len(self.submatrices)}",
                 f"matrix-elements-total: {self.matrix_elements_total()}",
                 f"matrix-elements-peak: {self.matrix_elements_peak()}"]
        counts: dict[CommandType, int] = {}
        for c in self.commands:
            counts[c.command_type] = counts.get(c.command_type, 0) + 1
        for t in CommandType:
            if t in counts:
                lines.append(f"num-{t.kaldi_name}: {counts[t]}")
        return "\n".join(lines) + "\n"

    # -- printing (Kaldi's NnetComputation::Print) ---------------------------
    def submatrix_strings(self) -> list[str]:
        out = ["[]"]
        for i in range(1, len(self.submatrices)):
            s = self.submatrices[i]
            if self.is_whole_matrix(i):
                out.append(f"m{s.matrix_index}")
            else:
                out.append(f"m{s.matrix_index}({s.row_offset}:{s.row_offset + s.num_rows - 1}, "
                           f"{s.col_offset}:{s.col_offset + s.num_cols - 1})")
        return out

    def _indexes_multi_string(self, pairs: np.ndarray) -> str:
        parts = []
        for sub, row in pairs.tolist():
            if sub == -1:
                parts.append("NULL")
                continue
            s = self.submatrices[sub]
            m = self.matrices[s.matrix_index]
            r = row + s.row_offset
            if s.col_offset == 0 and s.num_cols == m.num_cols:
                parts.append(f"m{s.matrix_index}({r},:)")
            else:
                parts.append(f"m{s.matrix_index}({r},{s.col_offset}:{s.col_offset + s.num_cols - 1})")
        return "[" + ",".join(parts) + "]"

    def command_string(self, i: int, component_names: Sequence[str], node_names: Sequence[str],
                       sub: list[str] | None = None) -> str:
        """Kaldi's printout of command ``i`` (one line), from the print form of
        its :class:`CommandSpec`."""
        if sub is None:
            sub = self.submatrix_strings()
        c = self.commands[i]
        args = c.args
        parts = []
        for literal, render, pos in _PRINT_PROGRAMS[c.command_type]:
            parts.append(literal)
            if render is not None:
                parts.append(render(self, c, args[pos - 1] if pos else 0, sub,
                                    component_names, node_names))
        text = f"c{i}: {''.join(parts)}\n"
        if len(text) > 200:
            text = text[:100] + " ... " + text[len(text) - 100:]
        return text

    def print(self, component_names: Sequence[str], node_names: Sequence[str]) -> str:
        out = ["matrix ", ", ".join(f"m{i}({m.num_rows}, {m.num_cols})"
                                    for i, m in enumerate(self.matrices) if i > 0), "\n"]
        if self.matrix_debug_info:
            out.append("# The following show how matrices correspond to network-nodes and\n"
                       "# cindex-ids.  Format is: matrix = <node-id>.[value|deriv][ <list-of-cindex-ids> ]\n"
                       "# where a cindex-id is written as (n,t[,x]) but ranges of t values are compressed\n"
                       "# so we write (n, tfirst:tlast).\n")
            for i in range(1, len(self.matrices)):
                d = self.matrix_debug_info[i]
                out.append(f"m{i} == {'deriv' if d.is_deriv else 'value'}: "
                           f"{print_cindexes(d.cindexes, node_names)}\n")
        out.append("# begin forward commands\n")
        sub = self.submatrix_strings()
        for i in range(len(self.commands)):
            out.append(self.command_string(i, component_names, node_names, sub))
        return "".join(out)


def fmt_alpha(alpha: float) -> str:
    return "%g" % float(np.float32(alpha))


def print_integer_vector(ints: Sequence[int] | np.ndarray) -> str:
    """Kaldi's PrintIntegerVector: runs of equal values as ``vxN``, increasing
    runs as ``a:b``; runs of two are printed as two values."""
    v = ints.tolist() if isinstance(ints, np.ndarray) else list(ints)
    if not v:
        return "[ ]"
    parts = []
    start, n = 0, len(v)
    while start < n:
        end = start + 1
        if end < n:
            step = v[start + 1] - v[start]
            if step in (0, 1):
                while end < n and v[end] == v[start] + step * (end - start):
                    end += 1
        length = end - start
        if length == 1:
            parts.append(str(v[start]))
        elif length == 2:
            parts.append(f"{v[start]}, {v[start + 1]}")
        elif v[start] == v[start + 1]:
            parts.append(f"{v[start]}x{length}")
        else:
            parts.append(f"{v[start]}:{v[end - 1]}")
        start = end
    return "[" + ", ".join(parts) + "]"


def print_cindexes(cindexes: Sequence[tuple[int, Index]], node_names: Sequence[str]) -> str:
    """Kaldi's PrintCindexes: node name followed by its compact index list."""
    if not cindexes:
        return "[ ]"
    out = []
    i, n = 0, len(cindexes)
    while i < n:
        node = cindexes[i][0]
        j = i
        while j < n and cindexes[j][0] == node:
            j += 1
        out.append(node_names[node] + print_indexes([c[1] for c in cindexes[i:j]]))
        i = j
    return "".join(out)


# ---------------------------------------------------------------------------
# The print forms of COMMAND_SPECS, compiled

def _ranges_string(ranges: np.ndarray) -> str:
    return "[" + ",".join("null" if f == -1 else f"{f}:{e - 1}" for f, e in ranges.tolist()) + "]"


# Field kind -> render(computation, command, argument value, submatrix
# strings, component names, node names).
_PRINT_FIELDS: dict[str, Any] = {
    "sub": lambda comp, c, a, sub, cn, nn: sub[a],
    "ptr": lambda comp, c, a, sub, cn, nn: "NULL" if a == 0 else "&" + sub[a],
    "rows": lambda comp, c, a, sub, cn, nn: str(comp.submatrices[a].num_rows),
    "cols": lambda comp, c, a, sub, cn, nn: str(comp.submatrices[a].num_cols),
    "component": lambda comp, c, a, sub, cn, nn: cn[a],
    "precomputed": lambda comp, c, a, sub, cn, nn:
        "NULL" if a == 0 else f"precomputed_indexes[{a}]",
    "node": lambda comp, c, a, sub, cn, nn: nn[a],
    "indexes": lambda comp, c, a, sub, cn, nn: print_integer_vector(comp.indexes[a]),
    "multi": lambda comp, c, a, sub, cn, nn: comp._indexes_multi_string(comp.indexes_multi[a]),
    "ranges": lambda comp, c, a, sub, cn, nn: _ranges_string(comp.indexes_ranges[a]),
    "compression": lambda comp, c, a, sub, cn, nn: CompressedMatrixType(a).name.lower(),
    "bool": lambda comp, c, a, sub, cn, nn: "true" if a != 0 else "false",
    "int": lambda comp, c, a, sub, cn, nn: str(a),
    "alpha": lambda comp, c, a, sub, cn, nn: fmt_alpha(c.alpha),
    # Kaldi prints a scale only when it is not 1.
    "scale": lambda comp, c, a, sub, cn, nn: "" if c.alpha == 1.0 else f"{fmt_alpha(c.alpha)} * ",
    # The component pointer Kaldi passes when the model is updated.
    "model": lambda comp, c, a, sub, cn, nn:
        "[component-pointer]" if comp.need_model_derivative else "NULL",
}
_FIELD = re.compile(r"\{([a-z]+)(\d?)\}")


def _print_program(form: str) -> list[tuple[str, Any, int]]:
    """A print form as (literal text, renderer or None, argument position)."""
    out, last = [], 0
    for m in _FIELD.finditer(form):
        out.append((form[last:m.start()], _PRINT_FIELDS[m.group(1)], int(m.group(2) or 0)))
        last = m.end()
    out.append((form[last:], None, 0))
    return out


_PRINT_PROGRAMS = {t: _print_program(s.print_form) for t, s in COMMAND_SPECS.items()}
