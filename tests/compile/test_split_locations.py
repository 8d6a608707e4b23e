"""split_locations (Kaldi's nnet-compile-utils): the vectorised functions
against plain loop ports of Kaldi's code, and Kaldi's documented examples."""
from __future__ import annotations

import random

import numpy as np
import pytest

from pynnet3 import fast_paths
from pynnet3.compile.split_locations import (PairLists, convert_to_indexes,
                                             ensure_contiguous_property, has_contiguous_property,
                                             occurrence_rank, split_locations,
                                             split_locations_backward, split_pair_list)
from pynnet3.errors import PynnetError
from pynnet3.std_order import iteration_order


# -- loop ports of Kaldi's functions (the reference) --------------------------------

def _ref_split_locations(submat_lists):
    num_rows = len(submat_lists)
    num_out = max((len(x) for x in submat_lists), default=0)
    if num_out == 0:
        return []
    if num_out == 1:
        out = [(-1, -1)] * num_rows
        for i, lst in enumerate(submat_lists):
            if lst:
                out[i] = lst[0]
        return [out]
    counts: dict[int, int] = {}
    for lst in submat_lists:
        for s, _ in lst:
            counts[s] = counts.get(s, 0) + 1
    # Kaldi walks a std::unordered_map filled in row-major order.
    large = [s for s in iteration_order(list(counts), hash_fn=int) if counts[s] > num_rows // 2]
    if large:
        split = [[(-1, -1)] * num_rows for _ in large]
        reduced = [[] for _ in range(num_rows)]
        where = {s: i for i, s in enumerate(large)}
        for r, lst in enumerate(submat_lists):
            for p in lst:
                i = where.get(p[0])
                if i is None or split[i][r][0] >= 0:
                    reduced[r].append(p)
                else:
                    split[i][r] = p
        return split + _ref_split_locations(reduced)
    out = [[(-1, -1)] * num_rows for _ in range(num_out)]
    for r, lst in enumerate(submat_lists):
        for i, p in enumerate(lst):
            out[i][r] = p
    return out


def _ref_ensure_contiguous(indexes):
    out = []
    if not indexes or max(indexes) == -1:
        return out
    seen: dict[int, int] = {}
    i, dim = 0, len(indexes)
    while i < dim:
        if indexes[i] == -1:
            i += 1
            continue
        value, start = indexes[i], i
        while i < dim and indexes[i] == value:
            i += 1
        k = seen.get(value, 0)
        seen[value] = k + 1
        if k >= len(out):
            out.append([-1] * dim)
        for j in range(start, i):
            out[k][j] = value
    return out


def _ref_has_contiguous(indexes):
    if not indexes or max(indexes) == -1:
        return True, []
    ranges = [[-1, -1] for _ in range(max(indexes) + 1)]
    for i, j in enumerate(indexes):
        if j == -1:
            continue
        if ranges[j][0] == -1:
            ranges[j] = [i, i + 1]
        else:
            ranges[j] = [min(ranges[j][0], i), max(ranges[j][1], i + 1)]
    ok = all(indexes[k] == v for v, (a, b) in enumerate(ranges) if a != -1 for k in range(a, b))
    return ok, ranges


def _random_lists(rng: random.Random, num_rows: int, max_len: int, num_submats: int,
                  num_src_rows: int):
    return [[(rng.randrange(num_submats), rng.randrange(num_src_rows))
             for _ in range(rng.randrange(max_len + 1))] for _ in range(num_rows)]


def _as_lists(arrs):
    return [[tuple(p) for p in a.tolist()] for a in arrs]


# -- tests -------------------------------------------------------------------------------

def test_occurrence_rank():
    assert occurrence_rank(np.array([3, 1, 3, 3, 1, 7])).tolist() == [0, 0, 1, 2, 1, 0]


@pytest.mark.parametrize("seed", range(40))
def test_split_locations_matches_loop_port(seed):
    rng = random.Random(seed)
    lists = _random_lists(rng, rng.randrange(1, 30), rng.choice([1, 2, 3, 5]),
                          rng.choice([1, 2, 4]), rng.choice([1, 3, 10]))
    got = _as_lists(split_locations(PairLists.from_lists(lists)))
    assert got == _ref_split_locations(lists)
    # Every pair of each row lands in exactly one split list at that row.
    for r, lst in enumerate(lists):
        assert sorted(x[r] for x in got if x[r] != (-1, -1)) == sorted(lst)


def test_split_locations_large_counts_get_own_list():
    # submatrix 5 occurs in all 4 rows: it gets a single-source list.
    lists = [[(5, 0), (7, 1)], [(5, 1)], [(8, 0), (5, 2)], [(5, 3), (5, 0)]]
    got = _as_lists(split_locations(PairLists.from_lists(lists)))
    assert got[0] == [(5, 0), (5, 1), (5, 2), (5, 3)]
    assert got[1:] == [[(7, 1), (-1, -1), (8, 0), (5, 0)]]


@pytest.mark.parametrize("seed", range(40))
def test_ensure_and_has_contiguous_property(seed):
    rng = random.Random(seed)
    n = rng.randrange(0, 25)
    idx = []
    while len(idx) < n:  # runs, so that contiguity is sometimes true
        idx.extend([rng.randrange(-1, 5)] * rng.randrange(1, 4))
    ok, ranges = has_contiguous_property(np.array(idx, dtype=np.int32))
    ref_ok, ref_ranges = _ref_has_contiguous(idx)
    assert ok == ref_ok
    assert ranges.tolist() == ref_ranges
    got = [a.tolist() for a in ensure_contiguous_property(np.array(idx, dtype=np.int32))]
    assert got == _ref_ensure_contiguous(idx)
    for vec in got:
        assert has_contiguous_property(np.array(vec))[0]


def test_ensure_contiguous_property_kaldi_example():
    got = ensure_contiguous_property(np.array([-1, 1, 1, 1, 2, 2, 1, 1]))
    assert [a.tolist() for a in got] == [[-1, 1, 1, 1, 2, 2, -1, -1],
                                         [-1, -1, -1, -1, -1, -1, 1, 1]]
    assert not has_contiguous_property(np.array([1, 2, 1]))[0]
    assert has_contiguous_property(np.array([-1, 4, -1]))[0]


def test_convert_to_indexes():
    assert convert_to_indexes(np.array([[3, 1], [-1, -1], [3, 0]]))[0] == 3
    assert convert_to_indexes(np.array([[3, 1], [-1, -1], [3, 0]]))[1].tolist() == [1, -1, 0]
    assert convert_to_indexes(np.array([[3, 1], [4, 1]])) is None
    assert convert_to_indexes(np.array([[-1, -1]]))[0] == -1


def test_split_pair_list():
    lst = np.array([[1, 2], [1, 2], [-1, -1], [3, 0], [1, 2], [3, 0]])
    got = [a.tolist() for a in split_pair_list(lst)]
    assert got == [[[1, 2], [-1, -1], [-1, -1], [3, 0], [-1, -1], [-1, -1]],
                   [[-1, -1], [1, 2], [-1, -1], [-1, -1], [-1, -1], [3, 0]],
                   [[-1, -1], [-1, -1], [-1, -1], [-1, -1], [1, 2], [-1, -1]]]
    with pytest.raises(PynnetError):
        split_pair_list(np.array([[-1, -1]]))


@pytest.mark.parametrize("seed", range(40))
def test_split_locations_backward_properties(seed):
    rng = random.Random(100 + seed)
    lists = _random_lists(rng, rng.randrange(1, 30), rng.choice([1, 2, 3]),
                          rng.choice([1, 2, 3]), rng.choice([2, 4, 40]))
    got = split_locations_backward(PairLists.from_lists(lists))
    for r, lst in enumerate(lists):
        assert sorted(tuple(a[r]) for a in got if a[r][0] != -1) == sorted(lst)
    for a in got:
        conv = convert_to_indexes(a)
        assert conv is None or conv[0] != -1
        if conv is not None:
            assert has_contiguous_property(conv[1])[0]
        else:
            valid = a[a[:, 0] != -1]
            assert len({tuple(p) for p in valid.tolist()}) == len(valid)


@pytest.mark.parametrize("seed", range(20))
def test_small_list_versions_match_array_versions(seed):
    """split_locations(_backward) run on Python lists for small inputs
    (use_lists, fast_paths' split_on_lists); both versions must give the same
    split lists."""
    import pynnet3.compile.split_locations as cu

    rng = random.Random(500 + seed)
    for _ in range(50):
        lists = _random_lists(rng, rng.randrange(1, 14), rng.choice([1, 2, 3, 5]),
                              rng.choice([1, 2, 3]), rng.choice([2, 4, 40]))
        pl = PairLists.from_lists(lists)
        results = []
        for use_lists in (False, True):
            with fast_paths.override(split_on_lists=use_lists):
                results.append([[a.tolist() for a in f(pl)] for f in
                                (cu.split_locations, cu.split_locations_backward)])
        assert results[0] == results[1], lists


@pytest.mark.parametrize("seed", range(20))
def test_ensure_contiguous_property_sorted_input(seed):
    """Non-decreasing input without -1 (the fast case) and with -1 mixed in."""
    rng = random.Random(seed)
    idx = sorted(rng.randrange(0, 6) for _ in range(rng.randrange(1, 20)))
    got = [a.tolist() for a in ensure_contiguous_property(np.array(idx, dtype=np.int32))]
    assert got == _ref_ensure_contiguous(idx) == [idx]
    with_blank = [-1] + idx
    got = [a.tolist() for a in ensure_contiguous_property(np.array(with_blank, dtype=np.int32))]
    assert got == _ref_ensure_contiguous(with_blank)
