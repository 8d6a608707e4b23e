"""SplitLocations and its helpers: the index bookkeeping the compiler uses to
turn Descriptors into row commands.

A port of Kaldi's nnet-compile-utils.{h,cc}.  The central data is, for each
row of a matrix being computed, the list of source rows whose sum it is:
Kaldi's ``vector<vector<pair<int32,int32>>>``.  Here it is a
:class:`PairLists` (compressed rows: ``row_ptr`` and a ``(N, 2)`` int array
of pairs) so that the splitting heuristics work on whole arrays at once; a
minibatch of 64 sequences x 150 frames gives ~10k rows per descriptor and
Python loops over them would dominate compilation.

A *split list* is one ``(num_rows, 2)`` int32 array of (submatrix, row)
pairs, ``(-1, -1)`` meaning "nothing for this row"; each becomes one row
command (AddRows, AddRowsMulti, AddToRowsMulti, AddRowRanges ...).

Small inputs take list versions of the same algorithms
(:func:`split_locations_small` ...), chosen by :func:`use_lists`
(``fast_paths.current().split_on_lists``).
"""
from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from .. import fast_paths
from ..errors import PynnetError
from ..log import warn
from ..nnet.index import K_NO_TIME, Index
from ..std_order import iteration_order

__all__ = [
    "PairLists", "split_locations", "split_locations_backward", "convert_to_indexes",
    "has_contiguous_property", "ensure_contiguous_property", "split_pair_list",
    "get_t_list", "get_nx_list", "occurrence_rank", "use_lists", "as_split",
    "split_locations_small", "split_locations_backward_small",
]


class PairLists:
    """For each of ``num_rows`` rows, a list of (a, b) int pairs.

    ``pairs[row_ptr[r]:row_ptr[r + 1]]`` is the list of row ``r``, in order.
    """

    __slots__ = ("row_ptr", "pairs", "_lengths")

    def __init__(self, row_ptr: np.ndarray, pairs: np.ndarray) -> None:
        self.row_ptr = np.asarray(row_ptr, dtype=np.int64)
        self.pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        self._lengths: np.ndarray | None = None
        if self.row_ptr.ndim != 1 or self.row_ptr.shape[0] < 1 \
                or self.row_ptr[-1] != self.pairs.shape[0]:
            raise PynnetError("PairLists: row_ptr does not match the pairs")

    @classmethod
    def trusted(cls, row_ptr: np.ndarray, pairs: np.ndarray) -> "PairLists":
        """From int64 arrays already in shape (``row_ptr`` 1-d, ``pairs``
        (n, 2), agreeing), without the checks and conversions."""
        self = cls.__new__(cls)
        self.row_ptr, self.pairs, self._lengths = row_ptr, pairs, None
        return self

    @classmethod
    def from_lists(cls, lists: Sequence[Sequence[tuple[int, int]]]) -> "PairLists":
        lengths = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
        row_ptr = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=row_ptr[1:])
        flat = [p for x in lists for p in x]
        pairs = np.array(flat, dtype=np.int64).reshape(-1, 2)
        return cls(row_ptr, pairs)

    @classmethod
    def from_row_ids(cls, num_rows: int, row_ids: np.ndarray, pairs: np.ndarray) -> "PairLists":
        """From pairs tagged with their row (``row_ids`` must be non-decreasing)."""
        counts = np.bincount(np.asarray(row_ids, dtype=np.int64), minlength=num_rows)
        row_ptr = np.zeros(num_rows + 1, dtype=np.int64)
        np.cumsum(counts, out=row_ptr[1:])
        return cls(row_ptr, pairs)

    def rows(self, begin: int, end: int) -> "PairLists":
        """The lists of rows ``begin`` .. ``end - 1``."""
        ptr = self.row_ptr[begin:end + 1]
        return PairLists(ptr - ptr[0], self.pairs[ptr[0]:ptr[-1]])

    def to_lists_mapped(self, table: Sequence[int]) -> list[list[tuple[int, int]]]:
        """``map_first(table).to_lists()`` without the intermediate arrays."""
        pairs = self.pairs
        flat = [(table[a], b) for a, b in zip(pairs[:, 0].tolist(), pairs[:, 1].tolist())]
        rp = self.row_ptr.tolist()
        return [flat[rp[r]:rp[r + 1]] for r in range(len(rp) - 1)]

    def to_lists(self) -> list[list[tuple[int, int]]]:
        flat = [tuple(p) for p in self.pairs.tolist()]
        rp = self.row_ptr.tolist()
        return [flat[rp[r]:rp[r + 1]] for r in range(len(rp) - 1)]

    @property
    def num_rows(self) -> int:
        return int(self.row_ptr.shape[0] - 1)

    def lengths(self) -> np.ndarray:
        if self._lengths is None:
            self._lengths = self.row_ptr[1:] - self.row_ptr[:-1]
        return self._lengths

    def row_ids(self) -> np.ndarray:
        """The row of each pair."""
        return np.repeat(np.arange(self.num_rows, dtype=np.int64), self.lengths())

    def select(self, mask: np.ndarray) -> "PairLists":
        """The same rows keeping only the pairs where ``mask`` is true (order kept)."""
        return PairLists.from_row_ids(self.num_rows, self.row_ids()[mask], self.pairs[mask])

    def map_first(self, table: np.ndarray) -> "PairLists":
        """Replace each pair's first member a by ``table[a]``."""
        pairs = self.pairs.copy()
        if pairs.shape[0]:
            pairs[:, 0] = table[pairs[:, 0]]
        return PairLists(self.row_ptr, pairs)


def occurrence_rank(keys: np.ndarray) -> np.ndarray:
    """For each element, how many earlier elements have the same key."""
    keys = np.asarray(keys)
    if keys.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    starts = np.ones(sorted_keys.shape[0], dtype=bool)
    starts[1:] = sorted_keys[1:] != sorted_keys[:-1]
    group_start = np.maximum.accumulate(np.where(starts, np.arange(len(keys)), 0))
    rank = np.empty(len(keys), dtype=np.int64)
    rank[order] = np.arange(len(keys)) - group_start
    return rank


def _pair_keys(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # Both members are small non-negative ints (submatrix / row indexes), or -1.
    return (np.asarray(a, dtype=np.int64) + 1) * (1 << 32) + (np.asarray(b, dtype=np.int64) + 1)


def _empty_split(num_rows: int) -> np.ndarray:
    return np.full((num_rows, 2), -1, dtype=np.int32)


def _get_submat_counts(lists: PairLists) -> list[int]:
    """Submatrix indexes occurring in more than half as many places as there
    are rows (Kaldi's GetSubmatCounts); they get AddRows commands of their own.

    Kaldi collects them from a ``std::unordered_map`` filled in row-major
    order and emits them in its iteration order, which decides the order of
    the Sum terms in the computation; we reproduce that order.
    """
    if lists.pairs.shape[0] == 0:
        return []
    firsts = lists.pairs[:, 0]
    if firsts.min() < 0:
        raise PynnetError("split_locations: -1 is not expected in the input lists")
    values, first_pos, counts = np.unique(firsts, return_index=True, return_counts=True)
    cutoff = lists.num_rows // 2
    large = set(values[counts > cutoff].tolist())
    if not large:
        return []
    insert_order = values[np.argsort(first_pos)].tolist()
    try:
        order = iteration_order(insert_order, hash_fn=int)
    except NotImplementedError:  # more keys than the modelled bucket sizes
        order = sorted(insert_order)
    return [k for k in order if k in large]


def _separate_submats_with_large_counts(
        submats: list[int], lists: PairLists) -> tuple[PairLists, list[np.ndarray]]:
    """Kaldi's SeparateSubmatsWithLargeCounts: the first pair of each listed
    submatrix in each row goes into that submatrix's own split list; the rest
    (other submatrices, and repeats in a row) stay in the reduced lists."""
    num_rows = lists.num_rows
    firsts = lists.pairs[:, 0]
    row_ids = lists.row_ids()
    split_index = np.full(firsts.shape[0], -1, dtype=np.int64)
    for i, s in enumerate(submats):
        split_index[firsts == s] = i
    candidate = split_index >= 0
    # Only the first occurrence of (row, submat) is separated.
    rank = np.zeros(firsts.shape[0], dtype=np.int64)
    if candidate.any():
        rank[candidate] = occurrence_rank(row_ids[candidate] * (len(submats) + 1)
                                          + split_index[candidate])
    moved = candidate & (rank == 0)
    split_lists = []
    for i in range(len(submats)):
        out = _empty_split(num_rows)
        sel = moved & (split_index == i)
        out[row_ids[sel]] = lists.pairs[sel]
        split_lists.append(out)
    return lists.select(~moved), split_lists


# Up to this many pairs the list versions of split_locations(_backward) run
# (where rows have one location each, the array version is cheap already, so
# only up to a few dozen pairs): a recurrent network has thousands of
# descriptor steps of a row or two, where the array versions' dozens of NumPy
# calls per step cost far more than the work.
_SMALL_PAIRS = 384
_SMALL_PAIRS_SIMPLE = 40


def use_lists(lists: PairLists) -> bool:
    """Whether the list versions split ``lists`` (same answer as the arrays'):
    ``fast_paths.current().split_on_lists`` when set, else by size."""
    forced = fast_paths.current().split_on_lists
    if forced is not None:
        return forced
    num_pairs = lists.pairs.shape[0]
    if num_pairs <= _SMALL_PAIRS_SIMPLE:
        return num_pairs <= _SMALL_PAIRS
    return num_pairs <= _SMALL_PAIRS and int(lists.lengths().max()) > 1


def split_locations(lists: PairLists) -> list[np.ndarray]:
    """Kaldi's SplitLocations: split per-row sum lists into split lists.

    Every pair of row ``r`` ends up at row ``r`` of exactly one split list.
    Submatrices that supply more than half the rows get lists of their own
    (so that they become single-source AddRows commands); the remainder is
    split by position within the row.
    """
    if use_lists(lists):
        return [as_split(lst) for lst in split_locations_small(lists.to_lists())]
    num_rows = lists.num_rows
    lengths = lists.lengths()
    num_output_lists = int(lengths.max()) if num_rows else 0
    if num_output_lists == 0:
        return []
    if num_output_lists == 1:
        out = _empty_split(num_rows)
        out[lists.row_ids()] = lists.pairs
        return [out]
    large = _get_submat_counts(lists)
    if large:
        reduced, split_lists = _separate_submats_with_large_counts(large, lists)
        return split_lists + split_locations(reduced)
    # Only small counts: the i'th element of each row goes to list i.
    row_ids = lists.row_ids()
    position = np.arange(lists.pairs.shape[0], dtype=np.int64) - lists.row_ptr[row_ids]
    out_lists = []
    for i in range(num_output_lists):
        out = _empty_split(num_rows)
        sel = position == i
        out[row_ids[sel]] = lists.pairs[sel]
        out_lists.append(out)
    return out_lists


def convert_to_indexes(location_vector: np.ndarray) -> tuple[int, np.ndarray] | None:
    """Kaldi's ConvertToIndexes: if every first member is some i >= 0 or -1,
    return ``(i, second members with -1 where first is -1)`` (i = -1 if all
    are -1), else None."""
    loc = np.asarray(location_vector).reshape(-1, 2)
    firsts = loc[:, 0]
    valid = firsts != -1
    if not valid.any():
        return -1, np.full(loc.shape[0], -1, dtype=np.int32)
    first_value = int(firsts[valid][0])
    if not np.all(firsts[valid] == first_value):
        return None
    return first_value, np.where(valid, loc[:, 1], -1).astype(np.int32)


def has_contiguous_property(indexes: np.ndarray) -> tuple[bool, np.ndarray]:
    """Kaldi's HasContiguousProperty.

    True if each value i != -1 occupies one contiguous run of positions.
    The second result is, per value 0..max, the (begin, end) of its run, or
    (-1, -1) for values that do not occur.
    """
    idx = np.asarray(indexes, dtype=np.int64)
    if idx.shape[0] == 0:
        return True, np.zeros((0, 2), dtype=np.int32)
    num_values = int(idx.max()) + 1
    if num_values < 0 or (idx < -1).any():
        raise PynnetError("has_contiguous_property: indexes below -1")
    if num_values == 0:
        warn("has_contiguous_property called on a vector of -1's.")
        return True, np.zeros((0, 2), dtype=np.int32)
    ranges = np.full((num_values, 2), -1, dtype=np.int64)
    valid = idx != -1
    pos = np.nonzero(valid)[0]
    vals = idx[valid]
    first = np.full(num_values, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(num_values, -1, dtype=np.int64)
    np.minimum.at(first, vals, pos)
    np.maximum.at(last, vals, pos)
    counts = np.bincount(vals, minlength=num_values)
    present = counts > 0
    ranges[present, 0] = first[present]
    ranges[present, 1] = last[present] + 1
    # Each value's run is unbroken iff it occurs (end - begin) times.
    ok = bool(np.all(counts[present] == last[present] + 1 - first[present]))
    return ok, ranges.astype(np.int32)


def ensure_contiguous_property(indexes: np.ndarray) -> list[np.ndarray]:
    """Kaldi's EnsureContiguousProperty: split ``indexes`` into vectors padded
    with -1, the k'th holding the k'th run of each value, so that each has the
    contiguous property.  Empty if there is nothing but -1."""
    idx = np.asarray(indexes, dtype=np.int64)
    if idx.shape[0] == 0:
        return []
    if idx[0] != -1 and not (idx[1:] < idx[:-1]).any():
        # Non-decreasing and no -1 (the usual case): every value is one run.
        return [idx.astype(np.int32)]
    if idx.max() == -1:
        return []
    dim = idx.shape[0]
    run_start = np.ones(dim, dtype=bool)
    run_start[1:] = idx[1:] != idx[:-1]
    starts = np.nonzero(run_start)[0]
    values = idx[starts]
    ends = np.append(starts[1:], dim)
    keep = values != -1
    starts, ends, values = starts[keep], ends[keep], values[keep]
    which = occurrence_rank(values)
    out = [np.full(dim, -1, dtype=np.int32) for _ in range(int(which.max()) + 1)]
    run_of = np.repeat(np.arange(len(starts)), ends - starts)
    positions = _ranges_concat(starts, ends)
    for k in range(len(out)):
        sel = which[run_of] == k
        out[k][positions[sel]] = values[run_of[sel]]
    return out


def _ranges_concat(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, e) over the runs, vectorised."""
    lengths = ends - starts
    total = int(lengths.sum())
    offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return np.arange(total, dtype=np.int64) + offsets


def split_pair_list(pair_list: np.ndarray) -> list[np.ndarray]:
    """Kaldi's SplitPairList: split one split list so that no pair (other
    than (-1, -1)) repeats within a list; the k'th repeat goes to list k."""
    loc = np.asarray(pair_list, dtype=np.int64).reshape(-1, 2)
    valid = loc[:, 0] != -1
    if not valid.any():
        raise PynnetError("split_pair_list: input list has just dummy pairs")
    pos = np.nonzero(valid)[0]
    rank = occurrence_rank(_pair_keys(loc[pos, 0], loc[pos, 1]))
    out = []
    for k in range(int(rank.max()) + 1):
        arr = _empty_split(loc.shape[0])
        sel = pos[rank == k]
        arr[sel] = loc[sel]
        out.append(arr)
    return out


def split_locations_backward(lists: PairLists) -> list[np.ndarray]:
    """Kaldi's SplitLocationsBackward: as :func:`split_locations`, with each
    split list further split so that it is either free of repeated pairs or
    single-source with the contiguous property (what the backprop commands
    AddToRowsMulti, AddRows and AddRowRanges can do without write races)."""
    if use_lists(lists):
        return [as_split(lst) for lst in split_locations_backward_small(lists.to_lists())]
    out: list[np.ndarray] = []
    for lst in split_locations(lists):
        conv = convert_to_indexes(lst)
        if conv is not None:
            first_value, second_values = conv
            if first_value == -1:
                continue  # nothing in it
            parts = ensure_contiguous_property(second_values)
            if len(parts) == 1:
                out.append(lst.astype(np.int32))
            else:
                for p in parts:
                    arr = np.stack([np.where(p == -1, -1, first_value), p], axis=1)
                    out.append(arr.astype(np.int32))
        else:
            out.extend(split_pair_list(lst))
    return out


# -- the same for small inputs, on Python lists -----------------------------------
# (Same algorithms as the array versions above, step for step; the tests run
# both on the same inputs.)

_NONE = (-1, -1)
Pairs = list[tuple[int, int]]


def as_split(lst: Pairs) -> np.ndarray:
    return np.array(lst, dtype=np.int32).reshape(-1, 2)


def split_locations_small(rows: list[Pairs]) -> list[Pairs]:
    """split_locations on per-row lists of pairs; split lists as lists."""
    num_rows = len(rows)
    num_output_lists = max(map(len, rows), default=0)
    if num_output_lists == 0:
        return []
    if num_output_lists == 1:
        return [[r[0] if r else _NONE for r in rows]]
    # Kaldi's GetSubmatCounts: the count of each submatrix, keys met in
    # row-major order, visited in std::unordered_map order.
    counts: dict[int, int] = {}
    for r in rows:
        for s, _ in r:
            counts[s] = counts.get(s, 0) + 1
    if min(counts) < 0:
        raise PynnetError("split_locations: -1 is not expected in the input lists")
    cutoff = num_rows // 2
    if any(c > cutoff for c in counts.values()):
        try:
            order = iteration_order(list(counts), hash_fn=int)
        except NotImplementedError:  # more keys than the modelled bucket sizes
            order = sorted(counts)
        large = [k for k in order if counts[k] > cutoff]
        # SeparateSubmatsWithLargeCounts: the first pair of each large
        # submatrix in each row goes to that submatrix's list.
        own: dict[int, Pairs] = {k: [_NONE] * num_rows for k in large}
        reduced: list[Pairs] = []
        for i, r in enumerate(rows):
            moved: set[int] = set()
            keep: Pairs = []
            for pair in r:
                s = pair[0]
                if s in own and s not in moved:
                    moved.add(s)
                    own[s][i] = pair
                else:
                    keep.append(pair)
            reduced.append(keep)
        return [own[k] for k in large] + split_locations_small(reduced)
    return [[r[i] if len(r) > i else _NONE for r in rows] for i in range(num_output_lists)]


def split_locations_backward_small(rows: list[Pairs]) -> list[Pairs]:
    """split_locations_backward on per-row lists of pairs."""
    out: list[Pairs] = []
    for lst in split_locations_small(rows):
        firsts = {s for s, _ in lst if s != -1}
        if len(firsts) <= 1:            # convert_to_indexes succeeds
            if not firsts:
                continue                # nothing in it
            first_value = next(iter(firsts))
            parts = _ensure_contiguous_small([r for _, r in lst])
            if len(parts) == 1:
                out.append(lst)
            else:
                out.extend([(_NONE if v == -1 else (first_value, v)) for v in p] for p in parts)
        else:
            out.extend(_split_pair_list_small(lst))
    return out


def _ensure_contiguous_small(values: list[int]) -> list[list[int]]:
    """ensure_contiguous_property on a list."""
    dim = len(values)
    out: list[list[int]] = []
    runs_of: dict[int, int] = {}
    i = 0
    while i < dim:
        v = values[i]
        j = i + 1
        while j < dim and values[j] == v:
            j += 1
        if v != -1:
            k = runs_of.get(v, 0)
            runs_of[v] = k + 1
            while len(out) <= k:
                out.append([-1] * dim)
            out[k][i:j] = [v] * (j - i)
        i = j
    return out


def _split_pair_list_small(lst: Pairs) -> list[Pairs]:
    """split_pair_list on a list."""
    seen: dict[tuple[int, int], int] = {}
    out: list[Pairs] = []
    for i, pair in enumerate(lst):
        if pair[0] == -1:
            continue
        k = seen.get(pair, 0)
        seen[pair] = k + 1
        while len(out) <= k:
            out.append([_NONE] * len(lst))
        out[k][i] = pair
    if not out:
        raise PynnetError("split_pair_list: input list has just dummy pairs")
    return out


def get_t_list(indexes: Iterable[Index]) -> list[int]:
    """Sorted unique t values, kNoTime left out (Kaldi's GetTList)."""
    return sorted({idx[1] for idx in indexes if idx[1] != K_NO_TIME})


def get_nx_list(indexes: Iterable[Index]) -> list[tuple[int, int]]:
    """Sorted unique (n, x) pairs (Kaldi's GetNxList)."""
    return sorted({(idx[0], idx[2]) for idx in indexes})
