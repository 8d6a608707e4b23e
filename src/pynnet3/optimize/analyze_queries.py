"""Queries on an analysed computation (Kaldi's ComputationAnalysis) and small
utilities of nnet-analyze: matrix-to-submatrix lists, commands of a type,
peak memory, debugging printouts.  Import them from :mod:`.analyze`."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..compile.computation import CommandType, CompressedMatrixType, NnetComputation
from ..errors import ComputationCheckError
from .analyze import AccessType, Analyzer, CommandAttributes, MatrixAccesses
from .analyze_summary import AccessSummary


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
