"""Nonlinearities (nonlinearities.py): NonlinearComponent statistics and their
file arithmetic, self-repair, Kaldi's float formulas for sigmoid/tanh, and the
in-place LogSoftmax against its plain NumPy definition, bit for bit."""
from __future__ import annotations

import numpy as np

from pynnet3.io.kaldi_io import KaldiReader
from pynnet3.nnet.components import nonlinearities
from pynnet3.nnet.components.nonlinearities import LogSoftmaxComponent

from tests.helpers_components import (F32, make_plain, make_simple, propagate_rows, rand_matrix,
                                      read_bytes, with_stats, write_bytes)


def test_rectified_linear_store_stats():
    x = rand_matrix(3, 4)
    r = make_simple("dim=4", "RectifiedLinearComponent")
    yr = propagate_rows(r, x)
    r.store_stats(x, yr, None)
    assert r.count == 3 and np.allclose(r.value_sum, yr.sum(0))
    assert np.allclose(r.deriv_sum, (yr > 0).sum(0))
    assert r.info().startswith("RectifiedLinearComponent, dim=4, count=3, self-repaired-proportion=0, "
                               "value-avg=[ ")


def test_nonlinear_stats_file_arithmetic():
    """Write divides float32(sum) by float32(1/count); read multiplies in double."""
    c = make_simple("dim=3", "SigmoidComponent")
    c.value_sum = np.array([1.0, 2.0, 10.0], dtype=np.float64)
    c.deriv_sum = np.array([0.3, 0.6, 0.9], dtype=np.float64)
    c.count = 3.0
    c.oderiv_sumsq = np.array([4.0, 9.0, -1.0], dtype=np.float64)
    c.oderiv_count = 7.0
    data = write_bytes(c, True)
    r = KaldiReader(data, True, "t")
    r.expect_token("<SigmoidComponent>")
    r.expect_token("<Dim>")
    assert r.read_int32() == 3
    r.expect_token("<ValueAvg>")
    v = r.read_vector()
    inv = np.float32(1.0 / 3.0)
    assert v.tolist() == (np.array([1, 2, 10], dtype=np.float32) * inv).tolist()
    r.expect_token("<DerivAvg>")
    r.read_vector()
    r.expect_token("<Count>")
    assert r.read_double() == 3.0
    r.expect_token("<OderivRms>")
    rms = r.read_vector()
    expect = np.sqrt(np.maximum(np.array([4, 9, -1], dtype=np.float32) * np.float32(1 / 7.0), 0))
    assert rms.tolist() == expect.astype(np.float32).tolist()
    c2 = read_bytes(data, True)
    assert c2.value_sum.tolist() == (v.astype(np.float64) * 3.0).tolist()
    assert c2.oderiv_sumsq.tolist() == (rms.astype(np.float64) ** 2 * 7.0).tolist()


def test_nonlinear_scale_add_zero():
    a = with_stats(make_simple("dim=4", "TanhComponent"))
    b = with_stats(make_simple("dim=4", "TanhComponent"))
    vs = a.value_sum.copy()
    a.scale(0.5)
    a.add(0.5, b)
    assert np.allclose(a.value_sum, vs)
    assert a.count == 48.0 and a.oderiv_count == 29.0
    e = make_simple("dim=4", "TanhComponent")
    e.add(1.0, b)  # empty stats get resized
    assert e.value_sum.tolist() == b.value_sum.tolist() and e.count == b.count
    a.zero_stats()
    assert a.count == 0 and not a.value_sum.any() and a.info() == "TanhComponent, dim=4"


def test_sigmoid_tanh_float_formulas():
    x = np.linspace(-30, 30, 2001, dtype=np.float32).reshape(1, -1)
    s = nonlinearities.sigmoid_f32(x)
    t = nonlinearities.tanh_f32(x)
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=3e-7, atol=1e-30)
    np.testing.assert_allclose(t, np.tanh(x.astype(np.float64)), rtol=0, atol=2e-7)
    assert s.dtype == np.float32 and np.all((s >= 0) & (s <= 1))


def test_self_repair(monkeypatch):
    """ReLU self-repair adds +scale/0.5 for rarely-active units and -scale/0.5
    for always-active ones; Sigmoid/Tanh push saturated outputs back."""
    monkeypatch.setattr(nonlinearities.NonlinearComponent, "_repair_probability_skip", lambda self: False)
    r = make_simple("dim=3 self-repair-scale=1e-05", "RectifiedLinearComponent")
    r.value_sum = np.array([1.0, 1.0, 1.0])
    r.deriv_sum = np.array([0.01, 0.5, 0.99]) * 100
    r.count = 100.0
    dx = np.zeros((2, 3), dtype=np.float32)
    r._repair_gradients(dx, r)
    np.testing.assert_allclose(dx, [[2e-5, 0, -2e-5]] * 2, rtol=1e-6)
    assert r.num_dims_processed == 3 and r.num_dims_self_repaired == 2
    t = make_simple("dim=2 self-repair-scale=1e-05", "TanhComponent")
    t.value_sum = np.zeros(2)
    t.deriv_sum = np.array([0.1, 0.9]) * 10
    t.count = 10.0
    y = np.array([[0.99, 0.99]], dtype=np.float32)
    dx = np.zeros((1, 2), dtype=np.float32)
    t._repair_gradients(y, dx, t)
    np.testing.assert_allclose(dx, [[-2e-5 * 0.99, 0]], rtol=1e-6)
    s = make_simple("dim=2 self-repair-scale=1e-05", "SigmoidComponent")
    s.value_sum = np.zeros(2)
    s.deriv_sum = np.array([0.01, 0.2]) * 10
    s.count = 10.0
    y = np.array([[0.9, 0.9]], dtype=np.float32)
    dx = np.zeros((1, 2), dtype=np.float32)
    s._repair_gradients(y, dx, s)
    np.testing.assert_allclose(dx, [[2e-5 * (1 - 2 * 0.9), 0]], rtol=1e-5)


def logsoftmax_definition(x: np.ndarray) -> np.ndarray:
    """Kaldi's ApplyLogSoftMax per row: sequential float sum of exp."""
    y = x - x.max(axis=1, keepdims=True)
    total = np.cumsum(np.exp(y), axis=1, dtype=F32)[:, -1]
    return y + (-np.log(total))[:, None]


def test_logsoftmax_bitwise() -> None:
    rng = np.random.default_rng(0)
    comp = make_plain(LogSoftmaxComponent, "dim=301")
    x = (rng.standard_normal((700, 301)) * 4).astype(F32)
    out = np.full_like(x, np.nan)
    comp.propagate(None, x, out)
    assert np.array_equal(out, logsoftmax_definition(x))
    deriv = rng.standard_normal(x.shape).astype(F32)
    want = deriv - np.exp(out) * deriv.sum(axis=1, dtype=F32)[:, None]
    in_deriv = np.full_like(x, np.nan)
    comp.backprop("", None, x, out, deriv, None, None, in_deriv)
    assert np.array_equal(in_deriv, want)
    aliased = deriv.copy()           # in_deriv is out_deriv: the safe path
    comp.backprop("", None, x, out, aliased, None, None, aliased)
    assert np.array_equal(aliased, want)
