"""Kaldi's Analyzer and ComputationAnalysis (nnet-analyze): an analysed
computation and the questions the optimization passes ask of it ("when is
this submatrix first touched for real?"), plus nnet-analyze's small
utilities (matrix-to-submatrix lists, commands of a type, peak memory,
debugging printouts).

:class:`Analyzer` bundles the variables (:mod:`.variables`) and the
accesses (:mod:`.accesses`) of one computation.  :class:`AccessSummary`
answers ComputationAnalysis's first/last-access questions for every
variable, submatrix and matrix at once by array operations; a round of
variable merging asks for the same answers from raw access records, as one
Numba loop (:func:`access_summary_arrays`).
"""
from __future__ import annotations

from bisect import bisect_right
from operator import is_
from typing import Any, Sequence

import numpy as np

from .. import fast_paths
from ..compile.computation import CommandType, CompressedMatrixType, NnetComputation
from ..errors import ComputationCheckError
from .accesses import (CommandAttributes, CommandAttributesList, MatrixAccesses,
                       VariableAccessTable, _AccessArrays, _merge_records,
                       _submatrix_access_records, compute_matrix_accesses)
from .variables import _RW, _W, AccessType, ComputationVariables, variables_of
from ..numba_cache import lazy_njit


__all__ = ["Analyzer", "analyzer_of", "forget_analysis", "ComputationAnalysis", "AccessSummary", "access_summary_arrays",
           "compute_matrix_to_submatrix", "get_commands_of_type", "get_max_memory_use",
           "max_memory_usage", "print_command_attributes", "print_matrix_accesses"]


class Analyzer:
    """Kaldi's Analyzer: variables, command attributes, variable accesses
    and matrix accesses of one computation.

    :meth:`init` analyses (and validates) the computation; the per-command,
    per-variable and per-matrix views are made from the analysis arrays the
    first time a pass asks for them.
    """

    def __init__(self, nnet: Any = None, computation: NnetComputation | None = None) -> None:
        if computation is not None:
            self.init(nnet, computation)
            return
        self.variables = ComputationVariables()
        self._command_attributes: Sequence[CommandAttributes] | None = []
        self._variable_accesses: VariableAccessTable | None = VariableAccessTable(
            0, *(np.zeros(0, dtype=np.int64),) * 3)
        self._matrix_accesses: Sequence[MatrixAccesses] = []
        self._submatrix_records: _AccessArrays | None = None
        self._arrays: tuple[Any, ...] = ()

    def init(self, nnet: Any, computation: NnetComputation) -> None:
        variables = variables_of(computation)
        table = computation.command_table()
        cmd, sub, flag, side_effects = _submatrix_access_records(nnet, computation, table)
        self._init_from_records(nnet, computation, variables, table, cmd, sub, flag,
                                side_effects)

    def _init_from_records(self, nnet: Any, computation: NnetComputation,
                           v: ComputationVariables, table: np.ndarray, cmd: np.ndarray,
                           sub: np.ndarray, flag: np.ndarray, side_effects: np.ndarray) -> None:
        """:meth:`init` from the computation's variables, command table and
        submatrix access records (as :func:`_submatrix_access_records` makes
        them)."""
        self.variables = v
        if len(cmd) < fast_paths.current().analysis_python_below:
            var, mat = _expand_records_python(v, cmd, sub, flag)
        else:
            # Each record expanded to the variables of its submatrix; for the
            # matrix, a write to only part of it is also a read.
            counts = v.variables_offsets[sub + 1] - v.variables_offsets[sub]
            first = np.repeat(v.variables_offsets[sub] - (np.cumsum(counts) - counts), counts)
            var_items = v.variables_flat[first + np.arange(int(counts.sum()), dtype=np.int64)]
            var = _AccessArrays(np.repeat(cmd, counts), var_items, np.repeat(flag, counts))
            partial_write = (flag == _W) & ~v.submatrix_is_whole_matrix[sub]
            mat = _AccessArrays(cmd, v.submatrix_to_matrix[sub],
                                np.where(partial_write, _RW, flag))
        self._arrays = (len(table), var, _AccessArrays(cmd, sub, flag), mat, side_effects)
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


class LazyAnalyzer:
    """A class attribute giving each instance an ``analyzer`` made empty only
    if it is read before one is set (an empty Analyzer costs a few
    microseconds, otherwise paid on every compile by the passes that set
    their analysis straight away)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = "_" + name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.__dict__.get(self._slot)
        if value is None:
            value = obj.__dict__[self._slot] = Analyzer()
        return value

    def __set__(self, obj: Any, value: "Analyzer") -> None:
        obj.__dict__[self._slot] = value


def analyzer_of(nnet: Any, computation: NnetComputation) -> Analyzer:
    """``Analyzer(nnet, computation)``, reused while the computation is what
    it was when it was analysed: the same network, the same command,
    submatrix and index-table objects (all treated as immutable; passes
    replace them rather than change them) and the same matrix sizes.  A pass
    that changed nothing thus leaves its analysis to the next pass and to
    the checker after optimization (each analysis is a fixed cost of every
    compile).  The Analyzer is shared: read it, never change it."""
    key = (nnet, computation.commands, computation.submatrices,
           [(m.num_rows, m.num_cols) for m in computation.matrices],
           computation.indexes, computation.indexes_multi)
    memo = computation.__dict__.get("_analyzer_memo")
    if memo is not None and _same_state(memo[0], key):
        if _VERIFY_REUSE:
            _verify_same_analysis(memo[1], Analyzer(nnet, computation))
        return memo[1]
    analyzer = Analyzer(nnet, computation)
    _remember_analysis(nnet, computation, analyzer)
    return analyzer


_T_NO_OPERATION = int(CommandType.NO_OPERATION)


# Tests set this: every reused analysis is compared with a fresh one.
_VERIFY_REUSE = False


def _verify_same_analysis(reused: Analyzer, fresh: Analyzer) -> None:
    a, b = reused, fresh
    for name in ("matrix_to_variable_index", "submatrix_to_matrix", "submatrix_is_whole_matrix",
                 "variables_flat", "variables_offsets"):
        if not np.array_equal(getattr(a.variables, name), getattr(b.variables, name)):
            raise AssertionError(f"reused analysis differs: variables.{name}")
    if list(a.matrix_accesses) != list(b.matrix_accesses):
        raise AssertionError("reused analysis differs: matrix accesses")
    if list(a.command_attributes) != list(b.command_attributes):
        raise AssertionError("reused analysis differs: command attributes")
    for name in ("offsets", "commands", "types"):
        if not np.array_equal(getattr(a.variable_accesses, name),
                              getattr(b.variable_accesses, name)):
            raise AssertionError(f"reused analysis differs: variable accesses ({name})")
    ra, rb = a.submatrix_records, b.submatrix_records
    if not all(np.array_equal(getattr(ra, f), getattr(rb, f)) for f in ("cmd", "item", "flag")):
        raise AssertionError("reused analysis differs: submatrix records")


def _remember_analysis(nnet: Any, computation: NnetComputation, analyzer: Analyzer) -> None:
    computation.__dict__["_analyzer_memo"] = (
        (nnet, list(computation.commands), list(computation.submatrices),
         [(m.num_rows, m.num_cols) for m in computation.matrices],
         list(computation.indexes), list(computation.indexes_multi)), analyzer)


def analysis_after_removing(nnet: Any, computation: NnetComputation, analyzer: Analyzer,
                            removed: Sequence[int]) -> None:
    """``computation`` is the computation ``analyzer`` analysed, with the
    commands ``removed`` just turned into no-ops and nothing else changed:
    remember its analysis for :func:`analyzer_of`, made from ``analyzer``'s
    records less those of the removed commands.  That is what analysing it
    afresh gives: the variables and the other commands' accesses are as
    they were, a no-op accesses nothing, and the matrix lifetimes are
    worked out again from the new command table."""
    _, _, raw, _, side_effects = analyzer._arrays
    table = computation.command_table()
    if len(table) != len(side_effects) or \
            (len(removed) and (table[list(removed), 0] != _T_NO_OPERATION).any()):
        raise ValueError("analysis_after_removing: the removed commands are not no-ops")
    gone = np.zeros(len(side_effects), dtype=bool)
    gone[list(removed)] = True
    keep = ~gone[raw.cmd]
    new = Analyzer.__new__(Analyzer)
    new._init_from_records(nnet, computation, analyzer.variables, table, raw.cmd[keep],
                           raw.item[keep], raw.flag[keep], side_effects & ~gone)
    _remember_analysis(nnet, computation, new)


def _same_state(old: tuple, new: tuple) -> bool:
    if old[0] is not new[0] or old[3] != new[3]:
        return False
    for a, b in zip(old[1:3] + old[4:], new[1:3] + new[4:]):
        if len(a) != len(b) or not all(map(is_, a, b)):
            return False
    return True


def forget_analysis(computation: NnetComputation) -> None:
    """Drop the analysis :func:`analyzer_of` keeps with ``computation`` (its
    arrays are as large as the computation)."""
    computation.__dict__.pop("_analyzer_memo", None)


def _expand_records_python(v: ComputationVariables, cmd: np.ndarray, sub: np.ndarray,
                           flag: np.ndarray) -> tuple[_AccessArrays, _AccessArrays]:
    """What :meth:`Analyzer.init` makes of the submatrix records by array
    operations (the records per variable, and per matrix with partial writes
    as read-writes), by a loop over the records (few of them)."""
    offsets = v.variables_offsets.tolist()
    flat = v.variables_flat.tolist()
    whole = v.submatrix_is_whole_matrix.tolist()
    to_matrix = v.submatrix_to_matrix.tolist()
    var_cmd: list[int] = []
    var_item: list[int] = []
    var_flag: list[int] = []
    mat_item, mat_flag = [], []
    for c, s, f in zip(cmd.tolist(), sub.tolist(), flag.tolist()):
        lo, hi = offsets[s], offsets[s + 1]
        var_item += flat[lo:hi]
        var_cmd += [c] * (hi - lo)
        var_flag += [f] * (hi - lo)
        mat_item.append(to_matrix[s])
        mat_flag.append(_RW if f == _W and not whole[s] else f)
    i64 = np.int64
    return (_AccessArrays(np.array(var_cmd, dtype=i64), np.array(var_item, dtype=i64),
                          np.array(var_flag, dtype=i64)),
            _AccessArrays(cmd, np.array(mat_item, dtype=i64), np.array(mat_flag, dtype=i64)))


# The per-command record building and the passes' queries live beside this


# ---------------------------------------------------------------------------
# Questions the optimization passes ask
# ---------------------------------------------------------------------------

class ComputationAnalysis:
    """Kaldi's ComputationAnalysis.  Allocation, deallocation and swapping
    never count as accesses.  Holds references: rebuild after the
    computation changes.

    The per-submatrix answers come from an :class:`AccessSummary` built on
    the first question (all submatrices at once, by array operations); a
    question asked after the number of commands changed is answered from
    the access lists, as Kaldi does.
    """

    def __init__(self, computation: NnetComputation, analyzer: Analyzer) -> None:
        self.computation = computation
        self.analyzer = analyzer
        self._zeroing: list[bool] | None = None
        self._summary: AccessSummary | None = None
        self._summary_zeroing = False

    def _is_zeroing(self, c: int) -> bool:
        if self._zeroing is None:
            self._zeroing = [cmd.command_type is CommandType.SET_CONST and cmd.alpha == 0.0
                             for cmd in self.computation.commands]
        return self._zeroing[c]

    def summary(self, zeroing: bool = False) -> AccessSummary | None:
        """The access summary (with the zeroing commands known if
        ``zeroing``), or None if the number of commands changed since it was
        made."""
        n = len(self.computation.commands)
        summary = self._summary
        if summary is None:
            table = self.analyzer.variable_accesses
            summary = self._summary = AccessSummary.from_offsets(
                self.analyzer.variables, table.offsets, table.commands,
                table.types != AccessType.READ, n)
        if summary.num_commands != n:
            return None
        if zeroing and not self._summary_zeroing:
            if self._zeroing is None:
                self._zeroing = [cmd.command_type is CommandType.SET_CONST and cmd.alpha == 0.0
                                 for cmd in self.computation.commands]
            summary.set_zeroing(np.array(self._zeroing, dtype=bool))
            self._summary_zeroing = True
        return summary

    def _check_submatrix(self, s: int) -> None:
        if not 0 < s < len(self.computation.submatrices):
            raise IndexError(f"submatrix index {s} out of range")

    def first_nontrivial_access(self, s: int) -> int:
        """First command touching any part of submatrix ``s`` other than by
        zeroing it (SetConst with alpha 0); num_commands if none."""
        self._check_submatrix(s)
        summary = self.summary(zeroing=True)
        if summary is not None:
            return summary.submatrix_first_nontrivial[s]
        ans = len(self.computation.commands)
        table = self.analyzer.variable_accesses
        for v in self.analyzer.variables.variables_for_submatrix(s):
            for access in table[v]:
                if not self._is_zeroing(access.command_index):
                    ans = min(ans, access.command_index)
                    break
        return ans

    def first_access(self, s: int) -> int:
        """First command touching any part of ``s``, zeroing included;
        num_commands if none."""
        self._check_submatrix(s)
        summary = self.summary()
        if summary is not None:
            return summary.submatrix_first[s]
        ans = len(self.computation.commands)
        table = self.analyzer.variable_accesses
        for v in self.analyzer.variables.variables_for_submatrix(s):
            acc = table[v]
            if acc:
                ans = min(ans, acc[0].command_index)
        return ans

    def last_access(self, s: int) -> int:
        """Last command touching any part of ``s``; -1 if none."""
        self._check_submatrix(s)
        summary = self.summary()
        if summary is not None:
            return summary.submatrix_last[s]
        ans = -1
        table = self.analyzer.variable_accesses
        for v in self.analyzer.variables.variables_for_submatrix(s):
            acc = table[v]
            if acc:
                ans = max(ans, acc[-1].command_index)
        return ans

    def last_write_access(self, s: int) -> int:
        """Last command writing (or read-writing) any part of ``s``; -1 if
        none, num_commands if the matrix is an output of the computation."""
        self._check_submatrix(s)
        m = self.computation.submatrices[s].matrix_index
        if self.analyzer.matrix_accesses[m].is_output:
            return len(self.computation.commands)
        summary = self.summary()
        if summary is not None:
            return summary.submatrix_last_write[s]
        ans = -1
        table = self.analyzer.variable_accesses
        for v in self.analyzer.variables.variables_for_submatrix(s):
            for access in reversed(table[v]):
                if access.access_type is not AccessType.READ:
                    ans = max(ans, access.command_index)
                    break
        return ans

    def data_invalidated_command(self, c: int, s: int) -> int:
        """First command after ``c`` writing any part of ``s``; else the
        command deallocating its matrix; else num_commands."""
        if not 0 <= c < len(self.computation.commands):
            raise IndexError(f"command index {c} out of range")
        self._check_submatrix(s)
        m = self.computation.submatrices[s].matrix_index
        ans = self.analyzer.matrix_accesses[m].deallocate_command
        if ans == -1:
            ans = len(self.computation.commands)
        table = self.analyzer.variable_accesses
        for v in self.analyzer.variables.variables_for_submatrix(s):
            for access in table[v]:
                if access.command_index > c and access.access_type is not AccessType.READ:
                    ans = min(ans, access.command_index)
                    break  # accesses are sorted: later ones cannot be smaller
        return ans

    def first_nontrivial_matrix_access(self, m: int) -> int:
        """First non-zeroing command touching matrix ``m``; num_commands if none."""
        if not 0 < m < len(self.computation.matrices):
            raise IndexError(f"matrix index {m} out of range")
        for access in self.analyzer.matrix_accesses[m].accesses:
            if not self._is_zeroing(access.command_index):
                return access.command_index
        return len(self.computation.commands)

    def last_matrix_access(self, m: int) -> int:
        """Last command touching matrix ``m``; -1 if none."""
        if not 0 < m < len(self.computation.matrices):
            raise IndexError(f"matrix index {m} out of range")
        acc = self.analyzer.matrix_accesses[m].accesses
        return acc[-1].command_index if acc else -1


def compute_matrix_to_submatrix(computation: NnetComputation) -> list[list[int]]:
    """For each matrix, the submatrices that refer to it (empty for matrix 0)."""
    ans: list[list[int]] = [[] for _ in computation.matrices]
    for s in range(1, len(computation.submatrices)):
        ans[computation.submatrices[s].matrix_index].append(s)
    return ans


def get_commands_of_type(computation: NnetComputation, t: CommandType) -> list[int]:
    """Indexes of the commands of type ``t``."""
    return [c for c, command in enumerate(computation.commands) if command.command_type is t]


_FLOAT_BYTES = 4


def get_max_memory_use(computation: NnetComputation) -> int:
    """Kaldi's GetMaxMemoryUse: the most bytes of matrix memory held at once
    (allocations and inputs add, deallocations subtract, compression trades
    float32 for 1- or 2-byte storage)."""
    cur = peak = 0
    subs = computation.submatrices
    compressed_bytes: dict[int, int] = {}
    T = CommandType
    for c, command in enumerate(computation.commands):
        t = command.command_type
        if t not in (T.ALLOC_MATRIX, T.ACCEPT_INPUT, T.DEALLOC_MATRIX, T.COMPRESS_MATRIX,
                     T.DECOMPRESS_MATRIX):
            continue
        if not 0 <= command.arg1 < len(subs):
            raise ComputationCheckError(f"submatrix index {command.arg1} out of range", c)
        s = subs[command.arg1]
        num_bytes = _FLOAT_BYTES * s.num_rows * s.num_cols
        if t is T.ALLOC_MATRIX or t is T.ACCEPT_INPUT:
            cur += num_bytes
        elif t is T.DEALLOC_MATRIX:
            cur -= num_bytes
        elif t is T.COMPRESS_MATRIX:
            one_byte = (CompressedMatrixType.INT8, CompressedMatrixType.UINT8)
            per_element = 1 if command.arg2 in one_byte else 2
            compressed_bytes[command.arg1] = per_element * s.num_rows * s.num_cols
            cur += compressed_bytes[command.arg1] - num_bytes
        else:
            if command.arg1 not in compressed_bytes:
                raise ComputationCheckError("matrix decompressed but never compressed", c)
            cur += num_bytes - compressed_bytes[command.arg1]
        if cur < 0:
            raise ComputationCheckError("more memory freed than allocated", c)
        peak = max(peak, cur)
    return peak


# Kaldi's header declares the same quantity as MaxMemoryUsage.
max_memory_usage = get_max_memory_use


def print_matrix_accesses(matrix_accesses: Sequence[MatrixAccesses]) -> str:
    """Kaldi's PrintMatrixAccesses (debugging text)."""
    names = {AccessType.READ: "r", AccessType.WRITE: "w", AccessType.READ_WRITE: "rw"}
    lines = []
    for m in range(1, len(matrix_accesses)):
        a = matrix_accesses[m]
        acc = "".join(f"c{x.command_index}({names[x.access_type]}) " for x in a.accesses)
        lines.append(f"m{m}: init-command={a.allocate_command}, "
                     f"destroy-command={a.deallocate_command}, accesses={acc}\n")
    return "".join(lines)


def print_command_attributes(attributes: Sequence[CommandAttributes]) -> str:
    """Kaldi's PrintCommandAttributes (debugging text)."""
    lines = []
    for c, a in enumerate(attributes):
        parts = [f"c{c}: "]
        if a.variables_read:
            parts.append("r(" + ",".join(f"v{v}" for v in a.variables_read) + ") ")
        if a.variables_written:
            parts.append("w(" + ",".join(f"v{v}" for v in a.variables_written) + ") ")
        if a.matrices_read:
            parts.append("r(" + ",".join(f"m{m}" for m in a.matrices_read) + ") ")
        if a.matrices_written:
            parts.append("w(" + ",".join(f"m{m}" for m in a.matrices_written) + ")")
        lines.append("".join(parts) + "\n")
    return "".join(lines)


# ---------------------------------------------------------------------------
# First and last accesses of every variable, submatrix and matrix
# ---------------------------------------------------------------------------


def _firsts_and_lasts(owner: np.ndarray, values: np.ndarray, num_groups: int,
                      first_default: int, last_default: int) -> tuple[np.ndarray, np.ndarray]:
    """For records sorted by ``owner`` (and by value within an owner): each
    owner's first and last value (defaults where an owner has none)."""
    first = np.full(num_groups, first_default, dtype=np.int64)
    last = np.full(num_groups, last_default, dtype=np.int64)
    if len(owner):
        change = owner[1:] != owner[:-1]
        starts = np.flatnonzero(np.concatenate(([True], change)))
        ends = np.flatnonzero(np.concatenate((change, [True])))
        first[owner[starts]] = values[starts]
        last[owner[ends]] = values[ends]
    return first, last


def _segment_reduce(ufunc: np.ufunc, per_item: np.ndarray, flat: np.ndarray | None,
                    offsets: np.ndarray, default: int) -> list[int]:
    """``ufunc`` over ``per_item[flat[offsets[i]:offsets[i+1]]]`` (over
    ``per_item[offsets[i]:offsets[i+1]]`` if ``flat`` is None) for every
    group i; ``default`` for empty groups."""
    n = len(offsets) - 1
    out = np.full(n, default, dtype=np.int64)
    nonempty = offsets[1:] > offsets[:-1]
    if nonempty.any():
        values = per_item[flat] if flat is not None else per_item
        out[nonempty] = ufunc.reduceat(values, offsets[:-1][nonempty])
    return out.tolist()


class AccessSummary:
    """Per variable, submatrix and matrix: first access, first access
    that is not a zeroing, last access, last write (a write or read-write
    access); and the first write to a variable after a given command.

    ``variable``, ``command``, ``is_write``: the access records, sorted by
    variable then command.  Commands are numbered 0 .. num_commands-1;
    "none" is num_commands for a first access and -1 for a last one.
    """

    def __init__(self, variables: ComputationVariables, variable: np.ndarray,
                 command: np.ndarray, is_write: np.ndarray, num_commands: int) -> None:
        self.variables = variables
        self.num_commands = num_commands
        self._variable = variable
        self._command = command
        self._is_write = is_write
        nv = variables.num_variables
        self._v_first, self._v_last = _firsts_and_lasts(variable, command, nv, num_commands, -1)
        self._sub_first: list[int] | None = None
        self._sub_last: list[int] | None = None
        self._sub_last_write: list[int] | None = None
        self._sub_first_nontrivial: list[int] | None = None
        self._matrix_first: list[int] | None = None
        self._matrix_first_nontrivial: list[int] | None = None
        self._write_keys: list[int] | None = None

    @classmethod
    def from_offsets(cls, variables: ComputationVariables, offsets: np.ndarray,
                     command: np.ndarray, is_write: np.ndarray,
                     num_commands: int) -> "AccessSummary":
        """From records in compressed-row form (variable v's records are
        ``offsets[v]:offsets[v+1]``)."""
        owner = np.repeat(np.arange(len(offsets) - 1, dtype=np.int64), np.diff(offsets))
        return cls(variables, owner, command, is_write, num_commands)

    # -- per submatrix -------------------------------------------------------------
    def _over_submatrices(self, per_variable: np.ndarray, ufunc: np.ufunc,
                          default: int) -> list[int]:
        v = self.variables
        return _segment_reduce(ufunc, per_variable, v.variables_flat, v.variables_offsets,
                               default)

    def _over_matrices(self, per_variable: np.ndarray, ufunc: np.ufunc,
                       default: int) -> list[int]:
        return _segment_reduce(ufunc, per_variable, None,
                               self.variables.matrix_to_variable_index, default)

    @property
    def submatrix_first(self) -> list[int]:
        if self._sub_first is None:
            self._sub_first = self._over_submatrices(self._v_first, np.minimum,
                                                     self.num_commands)
        return self._sub_first

    @property
    def submatrix_last(self) -> list[int]:
        if self._sub_last is None:
            self._sub_last = self._over_submatrices(self._v_last, np.maximum, -1)
        return self._sub_last

    @property
    def submatrix_last_write(self) -> list[int]:
        if self._sub_last_write is None:
            w = self._is_write
            _, last = _firsts_and_lasts(self._variable[w], self._command[w],
                                        self.variables.num_variables, self.num_commands, -1)
            self._sub_last_write = self._over_submatrices(last, np.maximum, -1)
        return self._sub_last_write

    def set_zeroing(self, zeroing: np.ndarray) -> None:
        """Which commands are zeroings (SetConst with alpha 0): needed for
        the first non-zeroing accesses (computed here, once)."""
        keep = ~zeroing[self._command]
        first, _ = _firsts_and_lasts(self._variable[keep], self._command[keep],
                                     self.variables.num_variables, self.num_commands, -1)
        self._sub_first_nontrivial = self._over_submatrices(first, np.minimum,
                                                            self.num_commands)
        self._matrix_first_nontrivial = self._over_matrices(first, np.minimum,
                                                            self.num_commands)

    @property
    def submatrix_first_nontrivial(self) -> list[int]:
        if self._sub_first_nontrivial is None:
            raise RuntimeError("AccessSummary.set_zeroing() was not called")
        return self._sub_first_nontrivial

    # -- per matrix ----------------------------------------------------------------
    @property
    def matrix_first(self) -> list[int]:
        if self._matrix_first is None:
            self._matrix_first = self._over_matrices(self._v_first, np.minimum,
                                                     self.num_commands)
        return self._matrix_first

    @property
    def matrix_first_nontrivial(self) -> list[int]:
        if self._matrix_first_nontrivial is None:
            raise RuntimeError("AccessSummary.set_zeroing() was not called")
        return self._matrix_first_nontrivial

    # -- writes after a command ----------------------------------------------------
    def first_write_after(self, variables: list[int], c: int) -> int:
        """The first command after ``c`` that writes any of ``variables``;
        num_commands if none."""
        keys = self._write_keys
        base = self.num_commands + 1
        if keys is None:
            w = self._is_write
            keys = self._write_keys = (self._variable[w] * base + self._command[w]).tolist()
        ans = self.num_commands
        for v in variables:
            i = bisect_right(keys, v * base + c)
            if i < len(keys) and keys[i] < (v + 1) * base:
                ans = min(ans, keys[i] - v * base)
        return ans


@lazy_njit(cache=True, nogil=True)
def _access_summary_kernel(cmd, sub, flag, var_flat, var_offsets, first_var, num_variables,
                           zeroing, num_commands):
    # Every (submatrix) access record expanded to the submatrix's variables,
    # as sort keys (variable * n + command) * 4 + flag.
    n = max(num_commands, 1)
    total = 0
    for i in range(cmd.shape[0]):
        total += var_offsets[sub[i] + 1] - var_offsets[sub[i]]
    keys = np.empty(total, dtype=np.int64)
    k = 0
    for i in range(cmd.shape[0]):
        for j in range(var_offsets[sub[i]], var_offsets[sub[i] + 1]):
            keys[k] = (var_flat[j] * n + cmd[i]) * 4 + flag[i]
            k += 1
    keys.sort()
    v_first = np.full(num_variables, num_commands, dtype=np.int64)
    v_last = np.full(num_variables, -1, dtype=np.int64)
    v_first_nt = np.full(num_variables, num_commands, dtype=np.int64)
    v_last_write = np.full(num_variables, -1, dtype=np.int64)
    write_keys = np.empty(total, dtype=np.int64)
    num_writes = 0
    base = num_commands + 1
    i = 0
    while i < total:
        key = keys[i] >> 2
        f = keys[i] & 3
        i += 1
        while i < total and (keys[i] >> 2) == key:      # one command's accesses merged
            f |= keys[i] & 3
            i += 1
        v = key // n
        c = key - v * n
        if v_first[v] == num_commands:
            v_first[v] = c
        v_last[v] = c
        if not zeroing[c] and v_first_nt[v] == num_commands:
            v_first_nt[v] = c
        if f & 2:
            v_last_write[v] = c
            write_keys[num_writes] = v * base + c
            num_writes += 1
    num_subs = var_offsets.shape[0] - 1
    sub_first_nt = np.full(num_subs, num_commands, dtype=np.int64)
    sub_last = np.full(num_subs, -1, dtype=np.int64)
    sub_last_write = np.full(num_subs, -1, dtype=np.int64)
    for s in range(num_subs):
        for j in range(var_offsets[s], var_offsets[s + 1]):
            v = var_flat[j]
            sub_first_nt[s] = min(sub_first_nt[s], v_first_nt[v])
            sub_last[s] = max(sub_last[s], v_last[v])
            sub_last_write[s] = max(sub_last_write[s], v_last_write[v])
    num_matrices = first_var.shape[0] - 1
    matrix_first = np.full(num_matrices, num_commands, dtype=np.int64)
    matrix_first_nt = np.full(num_matrices, num_commands, dtype=np.int64)
    for m in range(num_matrices):
        for v in range(first_var[m], first_var[m + 1]):
            matrix_first[m] = min(matrix_first[m], v_first[v])
            matrix_first_nt[m] = min(matrix_first_nt[m], v_first_nt[v])
    return (sub_first_nt, sub_last, sub_last_write, matrix_first, matrix_first_nt,
            write_keys[:num_writes].copy())


def _segment_extreme(ufunc: np.ufunc, values: np.ndarray, offsets: np.ndarray,
                    empty: int) -> np.ndarray:
    """``ufunc`` over each segment ``values[offsets[i]:offsets[i + 1]]``;
    ``empty`` for an empty segment."""
    counts = np.diff(offsets)
    ans = np.full(len(counts), empty, dtype=np.int64)
    nonempty = np.flatnonzero(counts > 0)
    if len(nonempty):
        ans[nonempty] = ufunc.reduceat(values, offsets[nonempty])
    return ans


def _access_summary_numpy(cmd: np.ndarray, sub: np.ndarray, flag: np.ndarray,
                          var_flat: np.ndarray, var_offsets: np.ndarray, first_var: np.ndarray,
                          num_variables: int, zeroing: np.ndarray, num_commands: int
                          ) -> tuple[np.ndarray, ...]:
    """What :func:`_access_summary_kernel` computes, with whole-array NumPy
    operations (for computations too small to pay for the Numba loop: its
    code interpreted costs a Python iteration per record)."""
    n = max(num_commands, 1)
    counts = var_offsets[sub + 1] - var_offsets[sub]
    total = int(counts.sum())
    starts = np.repeat(var_offsets[sub] - (np.cumsum(counts) - counts), counts)
    variables = var_flat[starts + np.arange(total, dtype=np.int64)]
    keys = np.sort((variables * n + np.repeat(cmd, counts)) * 4 + np.repeat(flag, counts))
    # One entry per (variable, command), flags merged.
    vc = keys >> 2
    if total:
        begin = np.flatnonzero(np.concatenate([[True], vc[1:] != vc[:-1]]))
        vc = vc[begin]
        f = np.bitwise_or.reduceat(keys & 3, begin)
    else:
        f = keys
    v = vc // n
    c = vc - v * n
    new_v = np.concatenate([[True], v[1:] != v[:-1]]) if len(v) else np.zeros(0, dtype=bool)
    last_v = np.concatenate([v[1:] != v[:-1], [True]]) if len(v) else new_v
    v_first = np.full(num_variables, num_commands, dtype=np.int64)
    v_first[v[new_v]] = c[new_v]
    v_last = np.full(num_variables, -1, dtype=np.int64)
    v_last[v[last_v]] = c[last_v]
    v_first_nt = np.full(num_variables, num_commands, dtype=np.int64)
    nt = ~zeroing[c]
    # (Within a variable the commands are increasing: assigning in reverse
    # leaves the first one.)
    v_first_nt[v[nt][::-1]] = c[nt][::-1]
    w = (f & 2) != 0
    v_last_write = np.full(num_variables, -1, dtype=np.int64)
    v_last_write[v[w]] = c[w]
    write_keys = v[w] * (num_commands + 1) + c[w]
    sub_first_nt = _segment_extreme(np.minimum, v_first_nt[var_flat], var_offsets,
                                    num_commands)
    sub_last = _segment_extreme(np.maximum, v_last[var_flat], var_offsets, -1)
    sub_last_write = _segment_extreme(np.maximum, v_last_write[var_flat], var_offsets, -1)
    matrix_first = _segment_extreme(np.minimum, v_first, first_var, num_commands)
    matrix_first_nt = _segment_extreme(np.minimum, v_first_nt, first_var, num_commands)
    return (sub_first_nt, sub_last, sub_last_write, matrix_first, matrix_first_nt,
            write_keys.astype(np.int64, copy=False))


def _access_summary_python(cmd: np.ndarray, sub: np.ndarray, flag: np.ndarray,
                           var_flat: np.ndarray, var_offsets: np.ndarray, first_var: np.ndarray,
                           num_variables: int, zeroing: np.ndarray, num_commands: int
                           ) -> tuple[np.ndarray, ...]:
    """What :func:`_access_summary_kernel` computes, by loops over Python
    lists (for a few records, where the NumPy version's thirty-odd calls
    cost more)."""
    flat = var_flat.tolist()
    offsets = var_offsets.tolist()
    first_of_matrix = first_var.tolist()
    is_zeroing = zeroing.tolist()
    merged: dict[tuple[int, int], int] = {}
    get = merged.get
    for c, s, f in zip(cmd.tolist(), sub.tolist(), flag.tolist()):
        for v in flat[offsets[s]:offsets[s + 1]]:
            key = (v, c)
            merged[key] = get(key, 0) | f
    none = num_commands
    v_first = [none] * num_variables
    v_last = [-1] * num_variables
    v_first_nt = [none] * num_variables
    v_last_write = [-1] * num_variables
    write_keys = []
    base = num_commands + 1
    for key in sorted(merged):
        v, c = key
        if v_first[v] == none:
            v_first[v] = c
        v_last[v] = c
        if not is_zeroing[c] and v_first_nt[v] == none:
            v_first_nt[v] = c
        if merged[key] & 2:
            v_last_write[v] = c
            write_keys.append(v * base + c)
    num_subs = len(offsets) - 1
    sub_first_nt = [none] * num_subs
    sub_last = [-1] * num_subs
    sub_last_write = [-1] * num_subs
    for s in range(num_subs):
        lo, hi = offsets[s], offsets[s + 1]
        if lo < hi:
            vs = flat[lo:hi]
            sub_first_nt[s] = min(min(v_first_nt[v] for v in vs), none)
            sub_last[s] = max(max(v_last[v] for v in vs), -1)
            sub_last_write[s] = max(max(v_last_write[v] for v in vs), -1)
    num_matrices = len(first_of_matrix) - 1
    matrix_first = [none] * num_matrices
    matrix_first_nt = [none] * num_matrices
    for m in range(num_matrices):
        lo, hi = first_of_matrix[m], first_of_matrix[m + 1]
        if lo < hi:
            matrix_first[m] = min(min(v_first[lo:hi]), none)
            matrix_first_nt[m] = min(min(v_first_nt[lo:hi]), none)
    i64 = np.int64
    return (np.array(sub_first_nt, dtype=i64), np.array(sub_last, dtype=i64),
            np.array(sub_last_write, dtype=i64), np.array(matrix_first, dtype=i64),
            np.array(matrix_first_nt, dtype=i64), np.array(write_keys, dtype=i64))


def access_summary_arrays(cmd: np.ndarray, sub: np.ndarray, flag: np.ndarray,
                          var_flat: np.ndarray, var_offsets: np.ndarray,
                          first_var: np.ndarray, zeroing: np.ndarray,
                          num_commands: int) -> tuple[np.ndarray, ...]:
    """From submatrix access records (command, submatrix, flag 1 read / 2
    write / 3 both, any order) and the variables: per submatrix the first
    access that is not a zeroing, the last access and the last write; per
    matrix the first access and the first non-zeroing access (num_commands
    / -1 where none); and the writes as sorted keys variable *
    (num_commands + 1) + command."""
    fp = fast_paths.current()
    # (For small computations the same with NumPy operations: compiling the
    # kernel costs more than it saves; see fast_paths.analysis_jit_from.
    # Without analysis_jit, the kernel's own code interpreted.)
    # (Once loaded, the kernel beats both from analysis_jit_loaded_from on.)
    kernel = (_access_summary_kernel.py_func if not fp.analysis_jit
              else _access_summary_kernel if (len(var_offsets) > fp.analysis_jit_from
                                              or fp.analysis_loop_loaded(_access_summary_kernel,
                                                                         len(cmd)))
              else _access_summary_python if len(cmd) < 2 * fp.analysis_python_below
              else _access_summary_numpy)
    return kernel(
        np.ascontiguousarray(cmd, dtype=np.int64), np.ascontiguousarray(sub, dtype=np.int64),
        np.ascontiguousarray(flag, dtype=np.int64), var_flat, var_offsets, first_var,
        int(first_var[-1]), np.ascontiguousarray(zeroing, dtype=np.bool_), int(num_commands))
