"""First and last accesses of every variable, submatrix and matrix, by
array operations (the questions of Kaldi's ComputationAnalysis, answered
for all submatrices at once; use it through :class:`.analyze.ComputationAnalysis`
or the variable-merging rounds).

The input is the per-variable access records sorted by variable then
command, one per (variable, command).  A submatrix's answer is the minimum
or maximum of its variables' answers; a matrix's variables are one
contiguous range.  Each result is a plain list, indexed by submatrix or
matrix, so that the passes' many small questions are list look-ups.
"""
from __future__ import annotations

from bisect import bisect_right

import numpy as np

from .analyze import ComputationVariables

__all__ = ["AccessSummary"]


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
