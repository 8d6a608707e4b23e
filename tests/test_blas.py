"""pynnet3.blas (in-place sgemm on strided views, TraceMatMat) against plain
NumPy in double precision, and the sequential row sums of
nnet/components/row_sums.py against a cumulative float32 sum."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3 import blas
from pynnet3.blas import add_mat_mat, trace_mat_mat_t
from pynnet3.nnet.components.row_sums import seq_exp_row_sums_f32, seq_row_sums_f32

F32 = np.float32


def layouts(rng: np.random.Generator, rows: int, cols: int) -> list[np.ndarray]:
    """The same kind of matrix in every layout a caller may pass: C and
    Fortran order, a column range, a row range, a transposed view."""
    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(F32)
    return [r(rows, cols), np.asfortranarray(r(rows, cols)), r(rows, cols + 3)[:, 1:cols + 1],
            r(rows + 2, cols)[1:rows + 1], r(cols, rows).T]


@pytest.mark.parametrize("use_blas", [True, False])
def test_add_mat_mat_all_layouts(use_blas: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if use_blas and not blas.have_blas():
        pytest.skip("SciPy's BLAS is not available")
    if not use_blas:
        monkeypatch.setattr(blas, "_looked_up", True)
        monkeypatch.setattr(blas, "_sgemm", None)
    rng = np.random.default_rng(0)
    checked = 0
    for m, n, k in [(1, 1, 1), (1, 5, 3), (4, 1, 3), (5, 4, 1), (7, 6, 9), (33, 17, 65)]:
        for a in layouts(rng, m, k):
            for b in layouts(rng, k, n):
                for c in layouts(rng, m, n):
                    alpha, beta = float(rng.standard_normal()), float(rng.choice([1.0, -0.5]))
                    want = (alpha * (a.astype(np.float64) @ b.astype(np.float64))
                            + beta * c.astype(np.float64))
                    add_mat_mat(alpha, a, b, beta, c)
                    np.testing.assert_allclose(c, want, rtol=2e-5, atol=2e-5)
                    checked += 1
    assert checked == 6 * 125


def test_add_mat_mat_beta_zero_ignores_nan_and_bias_column() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((6, 4)).astype(F32), rng.standard_normal((4, 3)).astype(F32)
    c = np.full((6, 3), np.nan, dtype=F32)
    add_mat_mat(2.0, a, b, 0.0, c)
    np.testing.assert_allclose(c, 2.0 * (a.astype(np.float64) @ b), rtol=1e-5, atol=1e-5)
    # The natural-gradient bias update: a vector seen as a column, times the
    # last column of a wider matrix (both strided 1-column views).
    bias = rng.standard_normal(5).astype(F32)
    out = rng.standard_normal((8, 5)).astype(F32)
    wide = rng.standard_normal((8, 7)).astype(F32)
    want = bias + 0.25 * (out.T.astype(np.float64) @ wide[:, -1])
    add_mat_mat(0.25, out.T, wide[:, 6:], 1.0, bias[:, None])
    np.testing.assert_allclose(bias, want, rtol=1e-5, atol=1e-6)


def test_add_mat_mat_aliasing_and_errors() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 5)).astype(F32)
    want = x + x.astype(np.float64) @ x
    add_mat_mat(1.0, x, x, 1.0, x)             # operands are copied first
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        add_mat_mat(1.0, x[:, :2], x, 1.0, np.zeros((5, 5), F32))
    if blas.have_blas():
        strided = np.zeros((5, 10), F32)[:, ::2]   # no unit stride: BLAS cannot write it
        with pytest.raises(ValueError):
            add_mat_mat(1.0, x, x, 1.0, strided)
    # Other dtypes go through NumPy (components are tested in float64).
    d = np.ones((5, 5))
    add_mat_mat(0.5, x.astype(np.float64), x.astype(np.float64), 2.0, d)
    np.testing.assert_allclose(d, 2.0 + 0.5 * (x.astype(np.float64) @ x))


def test_trace_mat_mat_t() -> None:
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((300, 257)) * 0.01 + 0.003).astype(F32)
    y = rng.standard_normal((300, 257)).astype(F32)
    exact = float(np.sum(x.astype(np.float64) * y.astype(np.float64)))
    assert trace_mat_mat_t(x, y) == pytest.approx(exact, rel=1e-6)
    sq = float(np.sum(x.astype(np.float64) ** 2))
    assert trace_mat_mat_t(x) == pytest.approx(sq, rel=1e-7)
    assert trace_mat_mat_t(x[:, 3:100]) == pytest.approx(
        float(np.sum(x[:, 3:100].astype(np.float64) ** 2)), rel=1e-7)
    v = x[0]
    assert trace_mat_mat_t(v) == pytest.approx(float(np.dot(v.astype(np.float64), v)), rel=1e-6)
    assert trace_mat_mat_t(np.zeros(0, F32)) == 0.0


def sequential_sums(x: np.ndarray) -> np.ndarray:
    return np.cumsum(x, axis=1, dtype=F32)[:, -1]


@pytest.mark.parametrize("use_jit", [None, False, True])
def test_sequential_row_sums_are_bitwise_a_left_to_right_float_sum(use_jit: bool | None) -> None:
    """Both ways (NumPy column by column, the Numba loop) and the choice by size."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((37, 1001)) * 10.0).astype(F32)
    assert np.array_equal(seq_row_sums_f32(x, use_jit=use_jit), sequential_sums(x))
    assert np.array_equal(seq_row_sums_f32(x[:, 5:600], use_jit=use_jit),
                          sequential_sums(x[:, 5:600]))
    assert np.array_equal(seq_row_sums_f32(np.zeros((3, 0), F32), use_jit=use_jit), np.zeros(3))
    for shape in ((1, 5000), (2, 40000), (0, 3), (500, 7)):
        y = (rng.standard_normal(shape) * 10.0).astype(F32)
        assert np.array_equal(seq_row_sums_f32(y, use_jit=use_jit), sequential_sums(y)), shape
    # A row of zeros and negative zeros sums to +0, as a C loop from 0.0f does.
    z = np.array([[-0.0, -0.0]], dtype=F32)
    assert not np.signbit(seq_row_sums_f32(z, use_jit=use_jit)[0])
    z = np.full((3, 4), -0.0, dtype=F32)          # (the NumPy reduction's path)
    assert not np.signbit(seq_row_sums_f32(z, use_jit=use_jit)).any()
    assert not np.signbit(seq_exp_row_sums_f32(np.full((3, 4), -np.inf, F32),
                                               use_jit=use_jit)).any()
    # NumPy's own (pairwise) sum is not the same thing.
    assert not np.array_equal(x.sum(axis=1, dtype=F32), sequential_sums(x))
    # exp taken block by block: the same bits for any block size.
    want = sequential_sums(np.exp(x * F32(0.1)))
    for block_bytes in (1, 4 * 1001 * 5, 1 << 21):
        got = seq_exp_row_sums_f32(x * F32(0.1), block_bytes=block_bytes, use_jit=use_jit)
        assert np.array_equal(got, want), block_bytes
