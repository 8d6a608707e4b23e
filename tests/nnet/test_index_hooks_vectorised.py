"""The components' index hooks work on index arrays (a 64-sequence request
gives steps of ~10k rows).  Each is checked here against a plain per-Index
Python version of the same rule (Kaldi's loops), on random index sets that
include the irregular cases the hooks must reject or pad."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pynnet3.nnet.components.dropout import GeneralDropoutComponent
from pynnet3.nnet.components.statistics import (StatisticsExtractionComponent,
                                                StatisticsPoolingComponent)
from pynnet3.nnet.components.tdnn import TdnnComponent
from pynnet3.nnet.index import K_NO_TIME, Index, first_appearance_numbers, index_columns
from pynnet3.nnet.index_lists import IndexList


def _result(f, *args):
    try:
        return f(*args)
    except (RuntimeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"


# -- TdnnComponent: Kaldi's regular (t-major) layout with blank padding -----------

def _reference_tdnn_reorder(time_offsets: list[int], ins: list[Index], outs: list[Index]):
    """Kaldi's TdnnComponent::ReorderIndexes, Index by Index."""
    def t_grid(indexes):
        ts = sorted({i.t for i in indexes if i.t != K_NO_TIME})
        step = 0
        for a, b in zip(ts, ts[1:]):
            step = math.gcd(step, b - a)
        return (ts[0], 0, 1) if step == 0 else (ts[0], step, 1 + (ts[-1] - ts[0]) // step)

    pairs = sorted({(i.n, i.x) for i in ins})
    start_in, step_in, num_in = t_grid(ins)
    start_out, step_out, num_out = t_grid(outs)
    if step_out == 0:
        step_in = step_in or 1
        step_out = step_in
    if step_in == 0 or step_out % step_in:
        raise ValueError("output t-step is not a multiple of the input t-step")
    reorder = step_out // step_in
    num_in = reorder * ((num_in + reorder - 1) // reorder)

    def grid(start, step, num, block, ref):
        ref = set(ref)
        out = []
        for t0 in range(start, start + num * step, step * block):
            for n, x in pairs:
                for t in range(t0, t0 + step * block, step):
                    out.append(Index(n, t, x) if Index(n, t, x) in ref else Index(n, K_NO_TIME, x))
        return out

    return grid(start_in, step_in, num_in, reorder, ins), grid(start_out, step_out, num_out, 1,
                                                                outs)


@pytest.mark.parametrize("seed", range(4))
def test_tdnn_reorder_indexes_matches_reference(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        comp = TdnnComponent()
        comp.time_offsets = sorted(rng.sample(range(-6, 7), rng.randint(1, 3)))
        step, sub = rng.choice([1, 1, 2, 3]), rng.choice([1, 1, 3])
        ts = sorted(rng.sample(range(0, 30, step), rng.randint(1, 8)))
        outs = [Index(n, t * sub, x) for t in ts for n in range(rng.randint(1, 3))
                for x in range(rng.choice([1, 2]))]
        ins = sorted({Index(o.n, o.t + off, o.x) for o in outs for off in comp.time_offsets})
        if rng.random() < 0.3:
            del ins[rng.randrange(len(ins))]          # a gap: padded with a blank
        rng.shuffle(ins)
        want = _result(_reference_tdnn_reorder, comp.time_offsets, ins, outs)
        got = _result(comp.reorder_indexes, ins, outs)
        if isinstance(want, str):
            assert isinstance(got, str)
            continue
        assert [list(got[0]), list(got[1])] == [want[0], want[1]]
        # Array-backed inputs give the same answer.
        same = comp.reorder_indexes(IndexList(index_columns(ins).astype(np.int32)),
                                    IndexList(index_columns(outs).astype(np.int32)))
        assert [list(same[0]), list(same[1])] == [want[0], want[1]]


# -- GeneralDropoutComponent: mask rows in order of first appearance --------------

@pytest.mark.parametrize("high,dtype,width", [
    (4, np.int64, 2), (4, np.int32, 1), (3, np.int32, 3),     # few values: the table
    (5000, np.int64, 2),                                      # a sort of packed keys
    (2 ** 40, np.int64, 2),                                   # too wide to pack: rows
])
def test_first_appearance_numbers(high: int, dtype, width: int) -> None:
    rng = np.random.default_rng(high + width)
    for size in (1, 7, 200):
        keys = rng.integers(-high, high, size=(size, width)).astype(dtype)
        count, numbers = first_appearance_numbers(keys)
        seen: dict[tuple, int] = {}
        want = [seen.setdefault(tuple(k), len(seen)) for k in keys.tolist()]
        assert (count, numbers.tolist()) == (len(seen), want)
    assert first_appearance_numbers(np.zeros((0, 2), dtype=np.int64))[0] == 0


@pytest.mark.parametrize("block_dim,time_period", [(6, 0), (3, 4), (2, 1), (6, 7)])
def test_general_dropout_precompute_matches_reference(block_dim: int, time_period: int) -> None:
    comp = GeneralDropoutComponent()
    comp.dim, comp.block_dim, comp.time_period = 6, block_dim, time_period
    rng = random.Random(block_dim * 10 + time_period)
    indexes = [Index(rng.randint(0, 3), rng.randint(-20, 20), rng.randint(0, 1))
               for _ in range(300)]
    rows: dict[tuple[int, int], int] = {}
    want = [rows.setdefault((i.n, i.t // time_period if time_period else 0), len(rows))
            for i in indexes]
    multiple = 6 // block_dim
    got = comp.precompute_indexes(None, indexes, list(indexes), True)
    assert got.num_mask_rows == len(rows) * multiple
    assert got.indexes == [r for r in want for _ in range(multiple)]
    with pytest.raises(RuntimeError):
        comp.precompute_indexes(None, indexes, indexes[::-1], True)


# -- Statistics extraction / pooling: ranges of rows ---------------------------------

def _random_statistics_case(rng: random.Random):
    if rng.random() < 0.5:
        comp = StatisticsPoolingComponent()
        comp.input_period = rng.choice([1, 2, 3])
        comp.left_context = comp.input_period * rng.randint(0, 4)
        comp.right_context = comp.input_period * rng.randint(0, 5)
        if comp.left_context + comp.right_context == 0:
            comp.right_context = comp.input_period
    else:
        comp = StatisticsExtractionComponent()
        comp.input_period = rng.choice([1, 2])
        comp.output_period = comp.input_period * rng.choice([1, 2, 3])
    outs = sorted({Index(rng.randint(0, 2), rng.randint(-3, 10) * comp.input_period
                         + (rng.random() < 0.05), rng.choice([0, 0, 1]))
                   for _ in range(rng.randint(1, 8))})
    ins = {i for o in outs if o.t % comp.input_period == 0
           for i in comp.get_input_indexes(None, o) if rng.random() < 0.9}
    ins = list(ins) + ([Index(9, 0, 0)] if rng.random() < 0.1 else [])   # maybe unused
    # The compiler gives sorted lists (reorder_indexes); sometimes not.
    ins = comp.reorder_indexes(ins, [])[0] if rng.random() < 0.9 else ins
    outs = comp.reorder_indexes([], outs)[1] if rng.random() < 0.9 else outs
    return comp, list(ins), list(outs)


def _fields(p) -> object:
    if isinstance(p, str):
        return p
    return (p.forward_indexes, p.backward_indexes,
            getattr(p, "counts", np.zeros(0)).tolist())


@pytest.mark.parametrize("seed", range(4))
def test_statistics_precompute_matches_loop(seed: int) -> None:
    """The array version (used when the indexes are regular) and Kaldi's loop
    (which also explains irregular cases) agree, errors included."""
    rng = random.Random(seed)
    fast = 0
    for _ in range(300):
        comp, ins, outs = _random_statistics_case(rng)
        for need_backprop in (False, True):
            want = _result(comp._precompute_indexes_loop, ins, outs, need_backprop)
            got = _result(comp.precompute_indexes, None, ins, outs, need_backprop)
            assert _fields(got) == _fields(want)
            fast += comp._precompute_indexes_arrays(
                index_columns(ins), index_columns(outs), need_backprop) is not None
    assert fast > 200       # the array version handles the regular cases


def test_statistics_hooks_list_inputs() -> None:
    comp = StatisticsPoolingComponent()
    comp.input_period, comp.left_context, comp.right_context = 1, 0, 10000
    index_set = {Index(0, t, 0) for t in range(150)}
    ok, used = comp.is_computable(None, Index(0, 100, 0), index_set)
    assert ok and used == [Index(0, t, 0) for t in range(100, 150)]
    assert comp.get_input_indexes(None, Index(1, 5, 2))[-1] == Index(1, 10005, 2)
