"""Indexes ``(n, t, x)`` and Cindexes ``(node_index, Index)``.

An :class:`Index` is a NamedTuple ``(n, t, x)``: the field order is the one
Kaldi prints, hashing and equality are the fast tuple ones.  Its *ordering*
is Kaldi's ``Index::operator<``: by t, then x, then n (so that e.g. all
sequences at one frame are adjacent, which the compiler relies on).  For
sorting large lists use ``key=index_sort_key``, which avoids a Python-level
comparison per pair.  The compiler works on vectorised forms:
:class:`IndexArray` holds three int32 NumPy columns.
"""
from __future__ import annotations

from itertools import chain, repeat
from typing import Iterable, NamedTuple, Sequence

import numpy as np


class Index(NamedTuple):
    n: int = 0
    t: int = 0
    x: int = 0

    def __str__(self) -> str:
        return f"({self.n}, {self.t})" if self.x == 0 else f"({self.n}, {self.t}, {self.x})"

    def offset(self, t: int = 0, x: int = 0) -> "Index":
        return Index(self.n, self.t + t, self.x + x)

    # Kaldi's Index::operator< : t, then x, then n.
    def __lt__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self[1], self[2], self[0]) < (other[1], other[2], other[0])

    def __le__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self[1], self[2], self[0]) <= (other[1], other[2], other[0])

    def __gt__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self[1], self[2], self[0]) > (other[1], other[2], other[0])

    def __ge__(self, other: tuple) -> bool:  # type: ignore[override]
        return (self[1], self[2], self[0]) >= (other[1], other[2], other[0])


def index_sort_key(index: tuple) -> tuple[int, int, int]:
    """Sort key giving Kaldi's Index order (t, x, n) at C speed."""
    return (index[1], index[2], index[0])


def cindex_sort_key(cindex: tuple) -> tuple[int, int, int, int]:
    """Sort key giving Kaldi's Cindex order: node, then the Index order."""
    i = cindex[1]
    return (cindex[0], i[1], i[2], i[0])


class Cindex(NamedTuple):
    node_index: int
    index: Index


# Kaldi's kNoTime: a "t" value meaning "no time index" (e.g. in Round/Switch
# results and for components that ignore time).
K_NO_TIME = -(2 ** 31)


def print_indexes(indexes: Sequence[Index], max_length: int = 200) -> str:
    """Kaldi's compact PrintIndexes: ``[(0,-1:1), (1,-1:1)]``.

    Runs with the same n and x and t increasing by one fold into
    ``t_begin:t_end``; x is printed only when non-zero.  Strings longer than
    ``max_length`` are cut in the middle with `` ... `` as Kaldi does.
    """
    if len(indexes) == 0:
        return "[ ]"
    parts = []
    i = 0
    num = len(indexes)
    while i < num:
        n, t, x = indexes[i]
        j = i + 1
        while (j < num and indexes[j][1] == indexes[j - 1][1] + 1
               and indexes[j][0] == n and indexes[j][2] == x):
            j += 1
        t_str = str(t) if j == i + 1 else f"{t}:{indexes[j - 1][1]}"
        parts.append(f"({n},{t_str})" if x == 0 else f"({n},{t_str},{x})")
        i = j
    text = "[" + ", ".join(parts) + "]"
    if len(text) <= max_length:
        return text
    half = max_length // 2
    return text[:half] + " ... " + text[len(text) - half:]


class IndexArray:
    """Columns n, t, x of a list of Indexes, as int32 arrays (vectorised form)."""

    __slots__ = ("n", "t", "x")

    def __init__(self, n: np.ndarray, t: np.ndarray, x: np.ndarray):
        self.n = np.asarray(n, dtype=np.int32)
        self.t = np.asarray(t, dtype=np.int32)
        self.x = np.asarray(x, dtype=np.int32)

    @classmethod
    def from_indexes(cls, indexes: Iterable[Index]) -> "IndexArray":
        arr = np.array(list(indexes), dtype=np.int64).reshape(-1, 3)
        return cls(arr[:, 0], arr[:, 1], arr[:, 2])

    def __len__(self) -> int:
        return int(self.n.shape[0])

    def to_indexes(self) -> list[Index]:
        return [Index(int(a), int(b), int(c)) for a, b, c in zip(self.n, self.t, self.x)]

    def sort_order(self) -> np.ndarray:
        """Permutation that sorts in Kaldi's order (t, then x, then n)."""
        return np.lexsort((self.n, self.x, self.t))


_TUPLE_NEW = tuple.__new__


def index_columns(indexes: Sequence) -> np.ndarray:
    """A list of Indexes as an int64 array [len, 3] (columns n, t, x).

    Array-backed lists (those with an ``array`` attribute, e.g. the
    compiler's IndexList) give theirs without looking at the elements.
    """
    array = getattr(indexes, "array", None)
    if array is not None:
        return np.asarray(array, dtype=np.int64).reshape(-1, 3)
    num = len(indexes)
    return np.fromiter(chain.from_iterable(indexes), np.int64, 3 * num).reshape(num, 3)


def indexes_from_columns(columns: np.ndarray) -> list[Index]:
    """Index objects from an int array [len, 3], made at C speed."""
    n, t, x = np.asarray(columns).reshape(-1, 3).T.tolist()
    return list(map(_TUPLE_NEW, repeat(Index), zip(n, t, x)))


def first_appearance_numbers(keys: np.ndarray) -> tuple[int, np.ndarray]:
    """Number the distinct rows of ``keys`` (int array [len, k]) 0, 1, ... in
    order of first appearance: (how many, the number of each row).  What a
    hash map filled in a loop gives, as array operations."""
    keys = np.ascontiguousarray(keys)
    if keys.ndim == 1:
        keys = keys.reshape(-1, 1)
    if len(keys) == 0:
        return 0, np.zeros(0, dtype=np.int64)
    rows, span = _packed_rows(keys)
    if rows is not None and span <= 4 * len(rows) + 1024:
        # Few possible values: a table over them instead of a sort.  Writing
        # the positions in reverse leaves each value's first position.
        num = len(rows)
        first_at = np.full(span, num, dtype=np.int64)
        first_at[rows[::-1]] = np.arange(num - 1, -1, -1, dtype=np.int64)
        seen = np.flatnonzero(first_at < num)
        number = np.empty(span, dtype=np.int64)
        number[seen[np.argsort(first_at[seen], kind="stable")]] = np.arange(len(seen))
        return len(seen), number[rows]
    if rows is None:
        rows = keys.view(np.dtype((np.void, keys.dtype.itemsize * keys.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return len(first), rank[inverse.reshape(-1)]


def _packed_rows(keys: np.ndarray) -> tuple[np.ndarray | None, int]:
    """The rows of an integer array [len, k] as one int64 each in [0, span),
    equal exactly where the rows are (mixed radix over each column's range),
    and span; (None, 0) where the ranges do not fit in 62 bits."""
    if keys.dtype.kind not in "iu" or (keys.dtype.kind == "u" and keys.dtype.itemsize >= 8):
        return None, 0
    # (Column by column, contiguous: a reduction along axis 0 of a narrow
    # row-major array is several times slower.)
    cols = np.ascontiguousarray(keys.T, dtype=np.int64)
    lo, hi = cols.min(axis=1).tolist(), cols.max(axis=1).tolist()
    total = 1
    for a, b in zip(lo, hi):
        total *= b - a + 1
    if total >= 1 << 62:
        return None, 0
    packed = cols[0] - lo[0]
    for j in range(1, len(cols)):
        packed *= hi[j] - lo[j] + 1
        packed += cols[j] - lo[j]
    return packed, total
