"""Shortcut compilation (Kaldi's RequestIsDecomposable / ExpandComputation).

The expander is checked here three ways:
  * find_n_stride against a line-by-line Python port of Kaldi's FindNStride;
  * expand(toy(2), N) == toy(N) for a hand-written 'compiler' that builds
    the same small computation for any number of sequences (every command
    kind with index tables, partial submatrices, -1 rows, two n-strides,
    precomputed indexes);
  * Kaldi's own expanded computations (reference seeds with N > 2), parsed,
    contracted to two sequences and expanded again, reproduce Kaldi's print.
test_shortcut_pipeline.py checks it against the compiler, executor and
optimizer.
"""
from __future__ import annotations

import itertools
import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3 import fast_paths
from pynnet3.compile.computation import (Command, CommandType, MatrixDebugInfo, NnetComputation,
                                         PrecomputedIndexesInfo)
from pynnet3.compile.n_stride import (CINDEX_N_COL, INDEX_N_COL, CindexList, cindex_array,
                                      convert_num_n_values, find_n_stride, index_array)
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.compile.shortcut import (ShortcutError, compile_via_shortcut, expand_computation,
                                      request_is_decomposable)
from pynnet3.errors import PynnetError
from pynnet3.nnet.index import Index
from tests.helpers_shortcut import assert_same_computation, kaldi_expanded_cases

CT = CommandType


# -- Kaldi's FindNStride, ported line by line (the reference) -------------------------

def _kaldi_find_n_stride(indexes: list[tuple]) -> int:
    """FindNStride(indexes, full_check=true) for Index tuples (n, ...)."""
    size = len(indexes)
    N = indexes[-1][0] + 1
    if N <= 1:
        return 0
    if indexes[0][0] != 0 or size % N != 0:
        return 0
    first = (1,) + tuple(indexes[0][1:])
    if tuple(indexes[1]) == first:
        n_stride = 1
    elif tuple(indexes[size // N]) == first:
        n_stride = size // N
    else:
        n_stride = -1
        for stride in range(2, size // N):
            if size % stride == 0 and tuple(indexes[stride]) == first:
                n_stride = stride
                break
        if n_stride == -1:
            return 0
    block = n_stride * N
    for i in range(size):
        ix = tuple(indexes[i])
        n = ix[0]
        if n < N - 1:
            if i + n_stride >= size or tuple(indexes[i + n_stride]) != (n + 1,) + ix[1:]:
                return 0
        if n == 0:
            if i // block != (i + n_stride * (N - 1)) // block:
                return 0
        else:
            if i - n_stride < 0 or tuple(indexes[i - n_stride]) != (n - 1,) + ix[1:]:
                return 0
    return n_stride


def _layout(num_n: int, ts: list[int], inner: int, blocks: int = 1) -> list[Index]:
    """Indexes in blocks; inside a block, ``inner`` t values vary fastest, then n."""
    out = []
    per_block = len(ts) // blocks
    for b in range(blocks):
        bt = ts[b * per_block:(b + 1) * per_block]
        for g in range(0, len(bt), inner):
            for n in range(num_n):
                out.extend(Index(n, t, 0) for t in bt[g:g + inner])
    return out


def test_find_n_stride_matches_kaldi_port() -> None:
    rng = random.Random(7)
    cases = []
    for num_n in (1, 2, 3, 5):
        ts = list(range(12))
        cases.append(_layout(num_n, ts, 1))              # t-major, stride 1
        cases.append(_layout(num_n, ts, 12))             # n-major, stride size/N
        cases.append(_layout(num_n, ts, 2))              # interleaved pairs, stride 2
        cases.append(_layout(num_n, ts, 3))
        cases.append(_layout(num_n, ts, 3, blocks=2))
    broken = []
    for c in cases:
        for _ in range(4):
            d = list(c)
            i, j = rng.randrange(len(d)), rng.randrange(len(d))
            d[i], d[j] = d[j], d[i]
            broken.append(d)
        if len(c) > 1:
            broken.append(c[:-1])
            broken.append(c[1:])
            e = list(c)
            e[rng.randrange(len(e))] = Index(0, 99, 0)
            broken.append(e)
    found = {0: 0, 1: 0, "other": 0}
    for ixs in cases + broken:
        want = _kaldi_find_n_stride(ixs)
        got = find_n_stride(index_array(ixs), INDEX_N_COL)
        assert got == want, ixs
        found[want if want in (0, 1) else "other"] += 1
    assert found[0] > 20 and found[1] > 3 and found["other"] > 10
    # the cindex form also compares the node
    cix = [(3 if k % 2 else 4, ix) for k, ix in enumerate(_layout(2, [0, 1], 1))]
    assert find_n_stride(cindex_array(cix), CINDEX_N_COL) == 0
    cix = [(4, ix) for ix in _layout(2, [0, 1], 1)]
    assert find_n_stride(cindex_array(cix), CINDEX_N_COL) == 1


def test_find_n_stride_wide_values_and_cindexes() -> None:
    """The array path (more rows than n_stride_list_rows) with t and x far
    apart (negative, near the int32 limits) and cindexes of large node
    numbers: the rows' other columns are compared exactly, as Kaldi's port."""
    rng = random.Random(11)
    big = 2 ** 31 - 5
    for num_n, inner in ((3, 1), (4, 5), (2, 10), (5, 2)):
        ts = [-big, -7, 0, 3, big, 12, -100, 40, 41, 2 ** 20]
        base = [Index(n, t, x) for n, t, x in (
            (ix.n, ix.t, (ix.t % 3) - 1 if ix.t < 2 ** 20 else -big)
            for ix in _layout(num_n, ts, inner))]
        variants = [base]
        for _ in range(6):
            d = list(base)
            i = rng.randrange(len(d))
            d[i] = Index(d[i].n, d[i].t, d[i].x + rng.choice((1, -1, 2 ** 31 - 1)))
            variants.append(d)
        for ixs in variants:
            ixs = [Index(n, t, max(-2 ** 31, min(2 ** 31 - 1, x))) for n, t, x in ixs]
            want = _kaldi_find_n_stride(ixs)
            assert find_n_stride(index_array(ixs), INDEX_N_COL) == want, ixs
            for node in (0, 7, 2 ** 30):
                cix = [(node, ix) for ix in ixs]
                assert find_n_stride(cindex_array(cix), CINDEX_N_COL) == want
            cix = [(node, ix) for node, ix in zip(itertools.cycle((5, 2 ** 30)), ixs)]
            # (The port compares whole rows, n first: give it (n, t, x, node).)
            want_c = _kaldi_find_n_stride([(ix.n, ix.t, ix.x, node) for node, ix in cix])
            assert find_n_stride(cindex_array(cix), CINDEX_N_COL) == want_c


def test_convert_num_n_values_roundtrip() -> None:
    for inner, blocks in ((1, 1), (6, 1), (2, 1), (3, 2)):
        two = _layout(2, list(range(6)), inner, blocks)
        seven = _layout(7, list(range(6)), inner, blocks)
        s2 = find_n_stride(index_array(two), INDEX_N_COL)
        s7 = find_n_stride(index_array(seven), INDEX_N_COL)
        assert s2 == s7 > 0 or inner == 6  # n-major: stride is the block size
        got = convert_num_n_values(s2, 2, 7, index_array(two), INDEX_N_COL)
        assert np.array_equal(got, index_array(seven))
        back = convert_num_n_values(s7, 7, 2, index_array(seven), INDEX_N_COL)
        assert np.array_equal(back, index_array(two))


# -- RequestIsDecomposable ---------------------------------------------------------

def _req(inputs: list[tuple[str, list[Index]]], outputs: list[tuple[str, list[Index]]],
         deriv: bool = False) -> ComputationRequest:
    return ComputationRequest(
        inputs=[IoSpecification(n, ix, deriv) for n, ix in inputs],
        outputs=[IoSpecification(n, ix, deriv) for n, ix in outputs],
        need_model_derivative=deriv)


def test_request_is_decomposable() -> None:
    feats5 = _layout(5, list(range(-3, 12)), 15)                 # n-major
    ivec5 = [Index(n, 0, 0) for n in range(5)]
    out5 = _layout(5, list(range(0, 9, 3)), 1)                   # t-major, stride 1
    ok, mini, num_n = request_is_decomposable(
        _req([("input", feats5), ("ivector", ivec5)], [("output", out5)], deriv=True))
    assert ok and num_n == 5
    assert mini.inputs[0].indexes == _layout(2, list(range(-3, 12)), 15)
    assert mini.inputs[1].indexes == [Index(0, 0, 0), Index(1, 0, 0)]
    assert mini.outputs[0].indexes == _layout(2, list(range(0, 9, 3)), 1)
    assert mini.need_model_derivative and mini.outputs[0].has_deriv
    assert [io.name for io in mini.inputs] == ["input", "ivector"]

    # not decomposable: two sequences, n from 1, N differs, a frame missing
    two = _layout(2, list(range(4)), 4)
    assert request_is_decomposable(_req([("input", two)], [("output", two)]))[0] is False
    from1 = [Index(n + 1, t, 0) for n, t, _ in _layout(3, list(range(4)), 4)]
    assert not request_is_decomposable(_req([("input", from1)], [("output", from1)]))[0]
    three = _layout(3, list(range(4)), 4)
    four = _layout(4, list(range(4)), 4)
    assert not request_is_decomposable(_req([("input", four)], [("output", three)]))[0]
    holey = [ix for ix in four if ix != Index(2, 1, 0)]
    assert not request_is_decomposable(_req([("input", holey)], [("output", four)]))[0]
    with pytest.raises(PynnetError):
        request_is_decomposable(_req([("input", [])], [("output", four)]))


# -- a toy 'compiler' that builds the same computation for any N ---------------------

class _ToyComponent:
    """Precomputes a record of the indexes it was given (so the test sees them)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, bool]] = []

    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> Any:
        self.calls.append((len(input_indexes), len(output_indexes), need_backprop))
        return ("toy", tuple(input_indexes), tuple(output_indexes), need_backprop)


class _ToyNnet:
    def __init__(self) -> None:
        self.components = [_ToyComponent(), _ToyComponent()]

    def get_component(self, c: int) -> _ToyComponent:
        return self.components[c]


def _toy_computation(N: int, T: int = 6, d: int = 3) -> NnetComputation:
    """Input node 0 (rows n-major, t = 0..T+1), a splice (node 1, t-major, t = 1..T),
    a range-sum (node 2, pairs of t interleaved: stride 2) and an output (node 3).

    Built directly for N sequences, the way a compiler would lay it out.
    """
    comp = NnetComputation()
    comp.matrix_debug_info = [MatrixDebugInfo()]
    tin = list(range(0, T + 2))
    tmid = list(range(1, T + 1))
    rows_in = [(0, Index(n, t, 0)) for n in range(N) for t in tin]               # n-major
    rows_sp = [(1, Index(n, t, 0)) for t in tmid for n in range(N)]              # t-major
    rows_rs = [(2, Index(n, t, 0)) for g in range(0, T, 2) for n in range(N)     # pairs
               for t in tmid[g:g + 2]]
    rows_out = [(3, Index(n, t, 0)) for t in tmid for n in range(N)]

    def add_matrix(rows: list, cols: int, is_deriv: bool = False) -> int:
        s = comp.new_matrix(len(rows), cols)
        comp.matrix_debug_info[-1] = MatrixDebugInfo(is_deriv, list(rows))
        return s

    m_in = add_matrix(rows_in, d)
    m_sp = add_matrix(rows_sp, 2 * d)
    m_rs = add_matrix(rows_rs, d)
    m_out = add_matrix(rows_out, 2 * d)
    m_dout = add_matrix(rows_out, 2 * d, is_deriv=True)
    m_dsp = add_matrix(rows_sp, 2 * d, is_deriv=True)
    pos_in = {c: i for i, c in enumerate(rows_in)}
    pos_sp = {c: i for i, c in enumerate(rows_sp)}
    pos_rs = {c: i for i, c in enumerate(rows_rs)}
    sp_left = comp.new_submatrix(m_sp, 0, -1, 0, d)
    sp_right = comp.new_submatrix(m_sp, 0, -1, d, d)
    # rows of t in [2, T-1] of the splice (t-major: a contiguous block)
    sp_mid = comp.new_submatrix(m_sp, N, (T - 2) * N, 0, -1)
    in_tail = comp.new_submatrix(m_in, 0, -1, 1, d - 1)

    cmds = [Command(CT.ACCEPT_INPUT, arg1=m_in, arg2=0)]
    cmds.append(Command(CT.ALLOC_MATRIX, arg1=m_sp))
    # left half: input at t-1 (t=1 has no t-1 ... it does: t=0); right: t+1
    left = comp.add_indexes([pos_in[(0, Index(n, t - 1, 0))] for _, (n, t, _) in rows_sp])
    cmds.append(Command(CT.COPY_ROWS, 1.0, sp_left, m_in, left))
    # right half via CopyRowsMulti, with t = T missing (-1 pairs)
    # (two source submatrices, so that each row's source must follow it)
    in_alias = comp.new_submatrix(m_in, 0, -1, 0, -1)
    multi = [(-1, -1) if t == T else (m_in if t % 2 else in_alias,
                                      pos_in[(0, Index(n, t + 1, 0))])
             for _, (n, t, _) in rows_sp]
    im = comp.add_indexes_multi(multi)
    cmds.append(Command(CT.COPY_ROWS_MULTI, 1.0, sp_right, im))
    # range-sum: each (n, t) sums input rows (n, t-1 .. t+1): contiguous (n-major)
    cmds.append(Command(CT.ALLOC_MATRIX, arg1=m_rs))
    ranges = [(pos_in[(0, Index(n, t - 1, 0))], pos_in[(0, Index(n, t + 1, 0))] + 1)
              for _, (n, t, _) in rows_rs]
    ranges = [(-1, -1) if t == 1 else r for r, (_, (n, t, _)) in zip(ranges, rows_rs)]
    ir = comp.add_indexes_ranges(ranges)
    cmds.append(Command(CT.ADD_ROW_RANGES, 0.5, m_rs, m_in, ir))
    # a 'component' with precomputed indexes: splice -> output
    in_ix = [ix for _, ix in rows_in]
    out_ix = [ix for _, ix in rows_out]
    comp.component_precomputed_indexes.append(PrecomputedIndexesInfo(
        ("toy", tuple(in_ix), tuple(out_ix), True), in_ix, out_ix))
    cmds.append(Command(CT.ALLOC_MATRIX, arg1=m_out))
    cmds.append(Command(CT.PROPAGATE, 1.0, 1, 1, m_sp, m_out, 0))
    # AddRows from the range-sum into the middle rows of the output
    out_mid = comp.new_submatrix(m_out, N, (T - 2) * N, 0, d)
    add = comp.add_indexes([pos_rs[(2, Index(n, t, 0))]
                            for n_t in rows_out[N:(T - 1) * N] for n, t in [n_t[1][:2]]])
    cmds.append(Command(CT.ADD_ROWS, 2.0, out_mid, m_rs, add))
    # AddToRowsMulti: scatter the range-sum back into the splice's left half
    scatter = [(sp_left if t % 2 else sp_right, pos_sp[(1, Index(n, t, 0))])
               for _, (n, t, _) in rows_rs]
    cmds.append(Command(CT.ADD_TO_ROWS_MULTI, 1.0, m_rs, comp.add_indexes_multi(scatter)))
    cmds.append(Command(CT.PROVIDE_OUTPUT, arg1=m_out, arg2=3))
    cmds.append(Command(CT.NO_OPERATION_MARKER))
    cmds.append(Command(CT.ACCEPT_INPUT, arg1=m_dout, arg2=3))
    cmds.append(Command(CT.ALLOC_MATRIX, arg1=m_dsp))
    cmds.append(Command(CT.BACKPROP, 1.0, 1, 1, m_sp, m_out, m_dout, m_dsp, 0))
    cmds.append(Command(CT.MATRIX_ADD, 1.0, sp_mid, sp_mid))
    cmds.append(Command(CT.SET_CONST, 0.0, in_tail))
    for m in (m_sp, m_rs, m_dsp):
        cmds.append(Command(CT.DEALLOC_MATRIX, arg1=m))
    comp.commands = cmds
    comp.need_model_derivative = True
    return comp


@pytest.mark.parametrize("N", [3, 5, 8])
def test_expand_toy_equals_direct_build(N: int) -> None:
    nnet = _ToyNnet()
    mini = _toy_computation(2)
    got = expand_computation(nnet, None, mini, True, N)
    assert_same_computation(got, _toy_computation(N))
    assert nnet.components[1].calls == [(8 * N, 6 * N, True)]
    # the printer accepts it (debug info read through the lazy list)
    text = got.print(["c0", "toy"], ["input", "splice", "rsum", "output"])
    assert "m1 == value: input[(0,0:7), (1,0:7)" in text
    # without debug info
    bare = expand_computation(nnet, None, mini, False, N)
    assert bare.matrix_debug_info == [] and bare.commands == got.commands


def test_expand_checks_structure() -> None:
    nnet = _ToyNnet()
    mini = _toy_computation(2)
    with pytest.raises(ValueError):
        expand_computation(nnet, None, mini, True, 2)
    # a submatrix that stops at an n = 0 row
    bad = _toy_computation(2)
    bad.new_submatrix(1, 0, 3, 0, -1)
    with pytest.raises(ShortcutError, match="strange"):
        expand_computation(nnet, None, bad, True, 4)
    # a matrix whose rows are not regular in n
    bad = _toy_computation(2)
    rows = list(bad.matrix_debug_info[2].cindexes)
    rows[0], rows[2] = rows[2], rows[0]
    bad.matrix_debug_info[2] = MatrixDebugInfo(False, rows)
    with pytest.raises(ShortcutError, match="regular n structure"):
        expand_computation(nnet, None, bad, True, 4)
    # no debug info
    bad = _toy_computation(2)
    bad.matrix_debug_info = []
    with pytest.raises(ShortcutError, match="debug info"):
        expand_computation(nnet, None, bad, True, 4)


def test_compile_via_shortcut_calls_compile_on_mini_request() -> None:
    seen: list[ComputationRequest] = []

    def compile_fn(request: ComputationRequest) -> NnetComputation:
        seen.append(request)
        return _toy_computation(2)

    feats = [Index(n, t, 0) for n in range(4) for t in range(8)]
    out = [Index(n, t, 0) for t in range(1, 7) for n in range(4)]
    req = _req([("input", feats)], [("output", out)], deriv=True)
    comp = compile_via_shortcut(compile_fn, _ToyNnet(), req)
    assert comp is not None and comp.matrices[1].num_rows == 4 * 8
    assert seen[0].inputs[0].indexes == [Index(n, t, 0) for n in range(2) for t in range(8)]

    class _Opts:
        use_shortcut = False

    assert compile_via_shortcut(compile_fn, _ToyNnet(), req, _Opts()) is None
    two = _req([("input", feats[:16])], [("output", out[:12])])
    assert compile_via_shortcut(compile_fn, _ToyNnet(), two) is None
    assert len(seen) == 1


def test_cindex_list_is_a_read_only_list() -> None:
    arr = np.array([[1, 0, 5, 0], [1, 1, 5, 2]], dtype=np.int32)
    cl = CindexList(arr)
    assert len(cl) == 2 and cl[1] == (1, Index(1, 5, 2)) and cl[:1] == [(1, Index(0, 5, 0))]
    assert cl == [(1, Index(0, 5, 0)), (1, Index(1, 5, 2))]
    assert [c for c in cl][0][1].t == 5
    # the lazy form builds its array once, on first use
    made = []

    def factory() -> np.ndarray:
        made.append(1)
        return arr

    lazy = CindexList(factory=factory, length=2)
    assert len(lazy) == 2 and not made
    assert lazy == cl and lazy[0] == (1, Index(0, 5, 0)) and made == [1]
    with pytest.raises(ValueError):
        CindexList(factory=lambda: arr, length=3).array


# -- against Kaldi's own expanded computations ----------------------------------------

def _contract(comp: NnetComputation, N: int) -> NnetComputation:
    """The n in {0, 1} computation that expands to ``comp`` (the inverse of the
    expansion, written out row by row; test only).

    In an expanded matrix with n-stride s, each block of N*s rows holds
    sub-blocks of s rows for n = 0, 1, ..., N-1; the mini matrix keeps the
    first two.  A submatrix ends at an n = N-1 row, which maps to n = 1.
    """
    strides = [0] + [find_n_stride(cindex_array(d.cindexes), CINDEX_N_COL)
                     for d in comp.matrix_debug_info[1:]]
    assert all(s > 0 for s in strides[1:])

    def to_mini(m: int, r: int, end: bool = False) -> int | None:
        s = strides[m]
        b, off = divmod(r, N * s)
        n, w = divmod(off, s)
        if end and n == N - 1:
            n = 1
        return b * 2 * s + n * s + w if n < 2 else None

    def to_full(m: int, r: int) -> int:
        s = strides[m]
        b, off = divmod(r, 2 * s)
        return b * N * s + off

    out = NnetComputation()
    out.need_model_derivative = comp.need_model_derivative
    out.matrices = [replace(m, num_rows=m.num_rows // N * 2) if k else m
                    for k, m in enumerate(comp.matrices)]
    out.matrix_debug_info = [MatrixDebugInfo()]
    for m in range(1, len(comp.matrices)):
        cix = list(comp.matrix_debug_info[m].cindexes)
        out.matrix_debug_info.append(MatrixDebugInfo(
            comp.matrix_debug_info[m].is_deriv,
            [cix[to_full(m, r)] for r in range(out.matrices[m].num_rows)]))
    out.submatrices = [comp.submatrices[0]]
    for sm in comp.submatrices[1:]:
        first = to_mini(sm.matrix_index, sm.row_offset)
        last = to_mini(sm.matrix_index, sm.row_offset + sm.num_rows - 1, end=True)
        out.submatrices.append(replace(sm, row_offset=first, num_rows=last - first + 1))

    def rows_of(s: int) -> list[int]:
        """Full-computation row (inside submatrix s) of each mini row of s."""
        sm, mm = comp.submatrices[s], out.submatrices[s]
        return [to_full(sm.matrix_index, mm.row_offset + i) - sm.row_offset
                for i in range(mm.num_rows)]

    def src_row(s: int, r: int, end: bool = False) -> int:
        sm = comp.submatrices[s]
        mini = to_mini(sm.matrix_index, sm.row_offset + r, end)
        assert mini is not None
        return mini - out.submatrices[s].row_offset

    commands = []
    for c in comp.commands:
        t = c.command_type
        if t in (CT.COPY_ROWS, CT.ADD_ROWS):
            old = comp.indexes[c.arg3]
            new = [-1 if old[r] < 0 else src_row(c.arg2, int(old[r])) for r in rows_of(c.arg1)]
            c = replace(c, arg3=out.add_indexes(new))
        elif t in (CT.COPY_ROWS_MULTI, CT.ADD_ROWS_MULTI, CT.COPY_TO_ROWS_MULTI,
                   CT.ADD_TO_ROWS_MULTI):
            old = comp.indexes_multi[c.arg2]
            new = [(-1, -1) if old[r, 0] < 0 else (int(old[r, 0]), src_row(int(old[r, 0]),
                                                                          int(old[r, 1])))
                   for r in rows_of(c.arg1)]
            c = replace(c, arg2=out.add_indexes_multi(new))
        elif t is CT.ADD_ROW_RANGES:
            old = comp.indexes_ranges[c.arg3]
            new = [(-1, -1) if old[r, 0] == old[r, 1] else
                   (src_row(c.arg2, int(old[r, 0])), src_row(c.arg2, int(old[r, 1]) - 1) + 1)
                   for r in rows_of(c.arg1)]
            c = replace(c, arg3=out.add_indexes_ranges(new))
        commands.append(c)
    out.commands = commands
    for p in comp.component_precomputed_indexes[1:]:
        ixs = []
        for lst in (p.input_indexes, p.output_indexes):
            arr = index_array(lst)
            ixs.append([Index(*r) for r in convert_num_n_values(
                find_n_stride(arr, INDEX_N_COL), N, 2, arr, INDEX_N_COL).tolist()])
        out.component_precomputed_indexes.append(PrecomputedIndexesInfo(None, *ixs))
    return out


@pytest.mark.parametrize("case", kaldi_expanded_cases(), ids=lambda p: p.name)
def test_expand_reproduces_kaldi_expansion(case: Path) -> None:
    """Kaldi printed computation (optimized, then expanded by Kaldi's shortcut):
    contracting it to n in {0, 1} and expanding with pynnet3 gives it back."""
    from pynnet3.testing.kaldi_print_parser import UnparseableComputation, parse_kaldi_computation
    from pynnet3.compile.request_io import parse_printed_request
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(str(case / "final.raw"))
    text = (case / "computation.txt").read_text()
    request = parse_printed_request((case / "request.txt").read_text())
    ok, _mini, N = request_is_decomposable(request)
    assert ok and N > 2
    try:
        kaldi = parse_kaldi_computation(text, nnet,
                                        need_model_derivative=request.need_model_derivative,
                                        store_component_stats=request.store_component_stats)
    except UnparseableComputation as e:
        pytest.skip(f"Kaldi's printer cut this computation: {e}")
    mini = _contract(kaldi, N)
    got = expand_computation(nnet, request.misc_info, mini, True, N)
    assert_same_computation(got, kaldi)
    names = list(nnet.component_names), list(nnet.node_names)
    assert got.print(*names) == kaldi.print(*names)


def test_find_n_stride_small_lists_match_arrays():
    """find_n_stride works on Python lists for short vectors; both versions
    must agree (regular layouts, near misses and random rows)."""
    import random

    import pynnet3.compile.n_stride as ns

    rng = random.Random(11)
    for _ in range(3000):
        num_n, per_n = rng.choice([1, 2, 2, 3, 4]), rng.randint(1, 5)
        base = [(rng.randint(-2, 5), rng.randint(0, 1)) for _ in range(per_n)]
        if rng.random() < 0.4:      # n-stride 1, maybe broken
            rows = [(k, t + (rng.random() < 0.03), x) for t, x in base for k in range(num_n)]
        elif rng.random() < 0.7:    # n-stride per_n, maybe broken
            rows = [(k if rng.random() > 0.03 else rng.randint(0, num_n), t, x)
                    for k in range(num_n) for t, x in base]
        else:
            rows = [(rng.randint(0, num_n - 1), rng.randint(0, 3), 0)
                    for _ in range(rng.randint(1, 12))]
        for n_col, arr in ((INDEX_N_COL, np.array(rows)),
                           (CINDEX_N_COL, np.array([(rng.randint(0, 2),) + r for r in rows]))):
            answers = []
            for small in (-1, 10 ** 9):
                with fast_paths.override(n_stride_list_rows=small):
                    answers.append(ns.find_n_stride(arr, n_col))
            assert answers[0] == answers[1], (rows, n_col)
