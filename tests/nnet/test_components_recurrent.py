"""LSTM and GRU nonlinearities (recurrent.py) against direct formulas."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.components.recurrent import (GruNonlinearityComponent, LstmNonlinearityComponent,
                                               OutputGruNonlinearityComponent)

from tests.helpers_components import assert_round_trip, make_component, read_bytes, write_bytes


def _sig(v):
    return 1.0 / (1.0 + math.exp(-v))


def test_lstm_nonlinearity():
    c = make_component(LstmNonlinearityComponent, "cell-dim=4 max-change=0.75 learning-rate=0.002")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (20, 8, 12)
    assert c.properties() == Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
    assert np.allclose(c.self_repair_config, [.05, .05, .2, .05, .2] + [1e-5] * 5)
    assert "use-dropout=false" in c.info() and "m_t_tanh={ self-repair-lower-threshold=0.2" \
        in c.info()
    assert_round_trip(c)
    # forward vs a per-element reference, with dropout masks
    d = make_component(LstmNonlinearityComponent, "cell-dim=3 use-dropout=true param-stddev=0.5")
    assert d.input_dim() == 18
    assert b"<UseDropout>" in write_bytes(d, True)
    assert_round_trip(d)
    x = np.random.RandomState(5).randn(4, 18).astype(np.float32)
    x[:, 15:] = np.abs(x[:, 15:])
    y = np.zeros((4, 6), dtype=np.float32)
    d.propagate(None, x, y)
    for r in range(4):
        si, sf, so = x[r, 15:18]
        for j in range(3):
            ip, fp, cp, op, cprev = (float(x[r, k * 3 + j]) for k in range(5))
            wi, wf, wo = (float(d.params[k, j]) for k in range(3))
            i_t, f_t = _sig(ip + wi * cprev), _sig(fp + wf * cprev)
            c_t = f_t * sf * cprev + i_t * si * math.tanh(cp)
            m_t = _sig(op + wo * c_t) * so * math.tanh(c_t)
            assert y[r, j] == pytest.approx(c_t, rel=1e-5, abs=1e-6)
            assert y[r, 3 + j] == pytest.approx(m_t, rel=1e-5, abs=1e-6)
    # stats: written as averages, Info shows them once count > 0
    c.count = 10.0
    c.value_sum[...] = 5.0
    c.deriv_sum[...] = 2.0
    c.self_repair_total[...] = 4.0
    text = c.info()
    assert "count=10" in text and "self-repaired-proportion=0.1" in text
    back = read_bytes(write_bytes(c, True), True)
    assert np.allclose(back.value_sum, 5.0) and back.count == 10.0
    with pytest.raises(ConfigError):
        make_component(LstmNonlinearityComponent, "cell-dim=4 sigmoid-self-repair-threshold=0.3")


def test_gru_nonlinearities():
    g = make_component(GruNonlinearityComponent,
                       "cell-dim=5 recurrent-dim=3 self-repair-scale=2e-05")
    assert (g.input_dim(), g.output_dim(), g.num_parameters()) == (3 * 5 + 2 * 3, 10, 15)
    assert g.properties() == (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)
    assert g.info().endswith("self-repair-threshold=0.2, self-repair-scale=2e-05, alpha=4, "
                             "rank-in=20, rank-out=80, update-period=4")
    assert_round_trip(g)
    rs = np.random.RandomState(6)
    x = rs.randn(3, g.input_dim()).astype(np.float32)
    y = np.zeros((3, 10), dtype=np.float32)
    g.propagate(None, x, y)
    z, r, hp, c1, s1 = x[:, :5], x[:, 5:8], x[:, 8:13], x[:, 13:18], x[:, 18:21]
    h = np.tanh(hp + (r * s1) @ g.w_h.T)
    np.testing.assert_allclose(y[:, :5], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[:, 5:], (1 - z) * h + z * c1, rtol=1e-5, atol=1e-6)
    # non-projected: s_{t-1} is c_{t-1}
    g2 = make_component(GruNonlinearityComponent, "cell-dim=4")
    assert g2.input_dim() == 16 and "recurrent-dim=4" in g2.info()
    x = rs.randn(2, 16).astype(np.float32)
    y = np.zeros((2, 8), dtype=np.float32)
    g2.propagate(None, x, y)
    h = np.tanh(x[:, 8:12] + (x[:, 4:8] * x[:, 12:16]) @ g2.w_h.T)
    np.testing.assert_allclose(y[:, :4], h, rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError):
        make_component(GruNonlinearityComponent, "cell-dim=4 recurrent-dim=5")

    o = make_component(OutputGruNonlinearityComponent, "cell-dim=4 param-mean=1.0 param-stddev=0")
    assert np.array_equal(o.w_h, np.ones(4, np.float32))
    assert (o.input_dim(), o.output_dim(), o.num_parameters()) == (12, 8, 4)
    assert o.info().endswith("alpha=4, rank=8, update-period=10")
    assert_round_trip(o)
    x = rs.randn(3, 12).astype(np.float32)
    y = np.zeros((3, 8), dtype=np.float32)
    o.propagate(None, x, y)
    h = np.tanh(x[:, 4:8] + x[:, 8:12])
    np.testing.assert_allclose(y[:, :4], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y[:, 4:], (1 - x[:, :4]) * h + x[:, :4] * x[:, 8:12], rtol=1e-5,
                               atol=1e-6)
    # stats round trip through the file (averages on disk)
    o.count, o.self_repair_total = 4.0, 2.0
    o.value_sum[...] = 2.0
    back = read_bytes(write_bytes(o, True), True)
    assert back.count == 4.0 and np.allclose(back.value_sum, 2.0)
    assert "self-repaired-proportion=0.125" in back.info()
