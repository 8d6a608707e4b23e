"""NnetComputation: the program the compiler produces and the executor runs.

A computation owns *matrices* (sizes only; index 0 is the empty matrix),
*submatrices* (row/column ranges of a matrix; index 0 is the empty one),
integer index tables used by row commands, and a list of *commands*.

Commands are data: one frozen :class:`Command` record per command, with
Kaldi's command types and argument positions (``arg1``..``arg7``), and one
table, :data:`ARG_ROLES`, saying what each argument of each command type
means.  The printer, the analyser and the checker are all driven by that
table, so a new command type is described in one place.
"""
from __future__ import annotations

import enum
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


R = Role
# ARG_ROLES[type] = roles of (arg1, ..., arg7).  Where Kaldi's access depends on
# the component's properties (Propagate writes or adds; Backprop adds or
# writes the input derivative) the analyser refines the role; the table gives
# the shape of the command.
ARG_ROLES: dict[CommandType, tuple[Role, ...]] = {
    CommandType.ALLOC_MATRIX: (R.SUBMATRIX_ALLOC,),
    CommandType.DEALLOC_MATRIX: (R.SUBMATRIX_ALLOC,),
    CommandType.SWAP_MATRIX: (R.SUBMATRIX_RW, R.SUBMATRIX_RW),
    CommandType.SET_CONST: (R.SUBMATRIX_WRITE,),
    # component, precomputed, input, output, memo, store-stats flag (1 = StoreStats)
    CommandType.PROPAGATE: (R.COMPONENT, R.PRECOMPUTED, R.SUBMATRIX_READ, R.SUBMATRIX_WRITE,
                            R.MEMO, R.INT, R.UNUSED),
    # component, precomputed, in_value, out_value, out_deriv, in_deriv, memo
    CommandType.BACKPROP: (R.COMPONENT, R.PRECOMPUTED, R.SUBMATRIX_MAYBE_READ,
                           R.SUBMATRIX_MAYBE_READ, R.SUBMATRIX_READ, R.SUBMATRIX_MAYBE_RW, R.MEMO),
    CommandType.BACKPROP_NO_MODEL_UPDATE: (R.COMPONENT, R.PRECOMPUTED, R.SUBMATRIX_MAYBE_READ,
                                           R.SUBMATRIX_MAYBE_READ, R.SUBMATRIX_READ,
                                           R.SUBMATRIX_MAYBE_RW, R.MEMO),
    CommandType.MATRIX_COPY: (R.SUBMATRIX_WRITE, R.SUBMATRIX_READ),
    CommandType.MATRIX_ADD: (R.SUBMATRIX_RW, R.SUBMATRIX_READ),
    CommandType.COPY_ROWS: (R.SUBMATRIX_RW, R.SUBMATRIX_READ, R.INDEXES),
    CommandType.ADD_ROWS: (R.SUBMATRIX_RW, R.SUBMATRIX_READ, R.INDEXES),
    CommandType.COPY_ROWS_MULTI: (R.SUBMATRIX_RW, R.INDEXES_MULTI),
    CommandType.COPY_TO_ROWS_MULTI: (R.SUBMATRIX_READ, R.INDEXES_MULTI),
    CommandType.ADD_ROWS_MULTI: (R.SUBMATRIX_RW, R.INDEXES_MULTI),
    CommandType.ADD_TO_ROWS_MULTI: (R.SUBMATRIX_READ, R.INDEXES_MULTI),
    CommandType.ADD_ROW_RANGES: (R.SUBMATRIX_RW, R.SUBMATRIX_READ, R.INDEXES_RANGES),
    # submatrix, compression type, truncate flag (alpha = range)
    CommandType.COMPRESS_MATRIX: (R.SUBMATRIX_RW, R.INT, R.INT),
    CommandType.DECOMPRESS_MATRIX: (R.SUBMATRIX_RW,),
    CommandType.ACCEPT_INPUT: (R.SUBMATRIX_WRITE, R.NODE),
    CommandType.PROVIDE_OUTPUT: (R.SUBMATRIX_READ, R.NODE),
    CommandType.NO_OPERATION: (),
    CommandType.NO_OPERATION_PERMANENT: (),
    CommandType.NO_OPERATION_MARKER: (),
    CommandType.NO_OPERATION_LABEL: (),
    CommandType.GOTO_LABEL: (R.COMMAND,),
}

_SUBMATRIX_ROLES = {R.SUBMATRIX_READ, R.SUBMATRIX_WRITE, R.SUBMATRIX_RW, R.SUBMATRIX_ALLOC,
                    R.SUBMATRIX_MAYBE_READ, R.SUBMATRIX_MAYBE_RW}


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
        return [(i + 1, role) for i, role in enumerate(ARG_ROLES[self.command_type])
                if role in _SUBMATRIX_ROLES]


_COMMAND_FIELD_SET = frozenset(("command_type", "alpha", "arg1", "arg2", "arg3", "arg4", "arg5",
                                "arg6", "arg7"))
_COMMAND_INT_FIELDS = attrgetter("command_type", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6",
                                 "arg7")


_SET_FIELDS = tuple(getattr(Command, name).__set__ for name in Command.__slots__)
if tuple(Command.__slots__) != ("command_type", "alpha", "arg1", "arg2", "arg3", "arg4", "arg5",
                                "arg6", "arg7"):
    raise ImportError("Command's fields changed: update Command.__init__")


# (Kept for the passes that name it: Command's own __init__ now stores
# through the slots, which is what this used to do differently.)
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
        if sub is None:
            sub = self.submatrix_strings()
        c = self.commands[i]
        t = c.command_type
        a = fmt_alpha(c.alpha)
        T = CommandType
        if t is T.ALLOC_MATRIX:
            s = self.submatrices[c.arg1]
            body = f"{sub[c.arg1]} = undefined({s.num_rows},{s.num_cols})"
        elif t is T.DEALLOC_MATRIX:
            body = f"{sub[c.arg1]} = []"
        elif t is T.SWAP_MATRIX:
            s = self.submatrices[c.arg1]
            body = f"{sub[c.arg1]}.swap({sub[c.arg2]}) [dim = {s.num_rows} x {s.num_cols}]"
        elif t is T.SET_CONST:
            s = self.submatrices[c.arg1]
            body = f"{sub[c.arg1]}.set({a}) [dim = {s.num_rows} x {s.num_cols}];"
        elif t is T.PROPAGATE:
            pre = "NULL" if c.arg2 == 0 else f"precomputed_indexes[{c.arg2}]"
            body = f"{component_names[c.arg1]}.Propagate({pre}, {sub[c.arg3]}, &{sub[c.arg4]})"
        elif t in (T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE):
            pre = "NULL" if c.arg2 == 0 else f"precomputed_indexes[{c.arg2}]"
            comp = ("[component-pointer]" if self.need_model_derivative and t is T.BACKPROP
                    else "NULL")
            in_deriv = "NULL" if c.arg6 == 0 else "&" + sub[c.arg6]
            body = (f"{component_names[c.arg1]}.Backprop({pre}, {sub[c.arg3]}, {sub[c.arg4]}, "
                    f"{sub[c.arg5]}, {comp}, {in_deriv})")
        elif t is T.MATRIX_COPY or t is T.MATRIX_ADD:
            op = "=" if t is T.MATRIX_COPY else "+="
            scale = "" if c.alpha == 1.0 else f"{a} * "
            body = f"{sub[c.arg1]} {op} {scale}{sub[c.arg2]}"
        elif t is T.COPY_ROWS or t is T.ADD_ROWS:
            name = "CopyRows" if t is T.COPY_ROWS else "AddRows"
            body = f"{sub[c.arg1]}.{name}({a}, {sub[c.arg2]}{print_integer_vector(self.indexes[c.arg3])})"
        elif t in (T.ADD_ROWS_MULTI, T.ADD_TO_ROWS_MULTI, T.COPY_ROWS_MULTI, T.COPY_TO_ROWS_MULTI):
            name = {T.ADD_ROWS_MULTI: "AddRowsMulti", T.ADD_TO_ROWS_MULTI: "AddToRowsMulti",
                    T.COPY_ROWS_MULTI: "CopyRowsMulti", T.COPY_TO_ROWS_MULTI: "CopyToRowsMulti"}[t]
            body = f"{sub[c.arg1]}.{name}({a}, {self._indexes_multi_string(self.indexes_multi[c.arg2])})"
        elif t is T.ADD_ROW_RANGES:
            ranges = ",".join("null" if f == -1 else f"{f}:{e - 1}"
                              for f, e in self.indexes_ranges[c.arg3].tolist())
            body = f"{sub[c.arg1]}.AddRowRanges({a}, {sub[c.arg2]}, [{ranges}])"
        elif t is T.COMPRESS_MATRIX:
            kind = CompressedMatrixType(c.arg2).name.lower()
            body = (f"CompressMatrix({sub[c.arg1]}, {a}, {kind}, "
                    f"{'true' if c.arg3 != 0 else 'false'})")
        elif t is T.DECOMPRESS_MATRIX:
            body = f"DecompressMatrix({sub[c.arg1]})"
        elif t is T.ACCEPT_INPUT:
            body = f"{sub[c.arg1]} = user input [for node: '{node_names[c.arg2]}']"
        elif t is T.PROVIDE_OUTPUT:
            body = f"output {sub[c.arg1]} to user [for node: '{node_names[c.arg2]}']"
        elif t is T.NO_OPERATION:
            body = "[no-op]"
        elif t is T.NO_OPERATION_PERMANENT:
            body = "[no-op-permanent]"
        elif t is T.NO_OPERATION_MARKER:
            body = "# computation segment separator [e.g., begin backward commands]"
        elif t is T.NO_OPERATION_LABEL:
            body = "[label for goto statement]"
        else:
            body = f"goto c{c.arg1}"
        text = f"c{i}: {body}\n"
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

    # -- serialisation (safe: JSON header + int32 arrays, no pickle) ----------
    # 2: the index tables, debug cindexes and precomputed Indexes are each one
    # concatenated array split by lengths in the header (an .npz member per
    # list made loading a 2000-matrix LSTM computation take half a second).
    # (The computation cache stores the same content in a plain container
    # that loads without copies, "format 3"; see computation_io.py.)
    FORMAT_VERSION = 2

    def to_bytes(self) -> bytes:
        """An ``.npz`` (zip) of a JSON header and int32 arrays."""
        from .computation_io import computation_to_bytes

        return computation_to_bytes(self, "npz")

    @classmethod
    def from_bytes(cls, data: bytes | memoryview,
                   where: str = "<computation>") -> "NnetComputation":
        """Inverse of :meth:`to_bytes` (also reads format 2).  Precomputed-
        index objects are not restored (``data`` stays None): callers
        recompute them from the stored input/output indexes with the
        network's components.  Large arrays are read-only views of ``data``."""
        from .computation_io import computation_from_bytes

        return computation_from_bytes(cls, data, where)


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
