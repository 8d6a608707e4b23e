"""Index tables as the Numba backends keep them.

A *multi* row operation names its rows as ``(position in arrays, row)``
pairs (see :mod:`pynnet3.compute.backend`).  A kernel cannot take a Python
list of differently-shaped views, so the Numba backends split the table once
into one group per array: the rows of the single-matrix operand
(``positions``) and the rows of ``arrays[p]`` they pair with (``rows``).  A
multi operation then becomes one plain two-index kernel call per array,
which is also what makes it safe to run rows in parallel: within a group,
destination rows are distinct unless ``has_duplicate_rows`` says otherwise
(Kaldi forbids duplicates in the to-rows commands; the reference still adds
every one, and so do the backends, serially).

:class:`IndexTable` is what ``prepare_indexes`` returns for ``[n, 2]``
tables: the int32 array plus its plan, made on first use and kept for the
life of the computer, so the split costs nothing per command.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ...arraytools import sorted_unique


class RowGroup(NamedTuple):
    array: int                  # position in the ``arrays`` list
    positions: np.ndarray       # int32 rows of the single-matrix operand
    rows: np.ndarray            # int32 rows of ``arrays[array]``
    has_duplicate_rows: bool    # some row of arrays[array] appears twice
    max_row: int                # largest of ``rows`` (for bounds checks)


class MultiPlan(NamedTuple):
    groups: list[RowGroup]      # by increasing array position
    none_positions: np.ndarray  # int32 positions whose pair is (-1, -1)


def make_multi_plan(pairs: np.ndarray) -> MultiPlan:
    """Split an int32 ``[n, 2]`` table of (array position, row) pairs."""
    pairs = np.asarray(pairs, dtype=np.int32).reshape(-1, 2)
    which = pairs[:, 0]
    # A stable sort keeps each group's positions in table order, so that
    # duplicates are added in the order the reference adds them.
    order = np.argsort(which, kind="stable").astype(np.int32)
    sorted_which = which[order]
    start = int(np.searchsorted(sorted_which, 0))
    none_positions = np.ascontiguousarray(order[:start])
    groups: list[RowGroup] = []
    if start < order.shape[0]:
        values, firsts = np.unique(sorted_which[start:], return_index=True)
        ends = np.append(firsts[1:], order.shape[0] - start)
        for v, b, e in zip(values.tolist(), firsts.tolist(), ends.tolist()):
            positions = np.ascontiguousarray(order[start + b:start + e])
            rows = np.ascontiguousarray(pairs[positions, 1])
            dup = bool(sorted_unique(rows).shape[0] != rows.shape[0])
            groups.append(RowGroup(int(v), positions, rows, dup, int(rows.max())))
    return MultiPlan(groups, none_positions)


class IndexTable:
    """A prepared int32 ``[n, 2]`` table (multi pairs or row ranges).

    ``array`` is the host table; ``device`` is a dict in which a device
    backend keeps its own copies; :meth:`plan` is the multi split, made once.
    """

    __slots__ = ("array", "device", "_plan", "_bounds")

    def __init__(self, table: Any) -> None:
        array = np.array(table, dtype=np.int32, order="C", copy=True).reshape(-1, 2)
        array.flags.writeable = False    # the plan must not go stale
        self.array = array
        self.device: dict[str, Any] = {}
        self._plan: MultiPlan | None = None
        self._bounds: tuple[int, int] | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    def plan(self) -> MultiPlan:
        if self._plan is None:
            self._plan = make_multi_plan(self.array)
        return self._plan

    def range_bounds(self) -> tuple[int, int]:
        if self._bounds is None:
            self._bounds = _range_bounds(self.array)
        return self._bounds


def _range_bounds(ranges: np.ndarray) -> tuple[int, int]:
    """(smallest begin, largest end) over the non-empty ranges; (0, 0) if none."""
    nonempty = ranges[:, 1] > ranges[:, 0]
    if not nonempty.any():
        return 0, 0
    return int(ranges[nonempty, 0].min()), int(ranges[nonempty, 1].max())


def range_bounds(table: Any) -> tuple[int, int]:
    """:meth:`IndexTable.range_bounds` of a prepared or raw ranges table."""
    if isinstance(table, IndexTable):
        return table.range_bounds()
    return _range_bounds(host_table(table))


def host_table(table: Any) -> np.ndarray:
    """The int32 host array of a prepared or raw ``[n, 2]`` table."""
    if isinstance(table, IndexTable):
        return table.array
    return np.ascontiguousarray(table, dtype=np.int32).reshape(-1, 2)


def table_plan(table: Any) -> MultiPlan:
    """The plan of a prepared table (cached) or of a raw one (made now)."""
    if isinstance(table, IndexTable):
        return table.plan()
    return make_multi_plan(np.asarray(table))
