"""Per-element components (per_element.py): the updates of PerElementScale,
NaturalGradientPerElementScale, ScaleAndOffset and PerElementOffset."""
from __future__ import annotations

import numpy as np

from tests.helpers_components import backprop_rows, make_simple, propagate_rows, rand_matrix


def test_per_element_updates():
    x = rand_matrix(4, 3)
    dy = rand_matrix(4, 3, seed=2)
    c = make_simple("dim=3 learning-rate=0.1", "PerElementScaleComponent")
    before = c.scales.copy()
    dx = backprop_rows(c, x, None, dy, to_update=c)
    np.testing.assert_allclose(c.scales, before + 0.1 * (x * dy).sum(0), rtol=1e-6)
    assert np.array_equal(dx, dy * c.scales)  # Kaldi updates first
    g = make_simple("dim=3", "PerElementScaleComponent")
    g.set_as_gradient()
    g.scales[:] = 0
    dx = backprop_rows(c, x, None, dy, to_update=g)
    np.testing.assert_allclose(g.scales, (x * dy).sum(0), rtol=1e-6)
    assert np.array_equal(dx, dy * c.scales)
    sao = make_simple("dim=3 use-natural-gradient=false learning-rate=0.5",
                      "ScaleAndOffsetComponent")
    sao.scales = np.array([2.0, -1.0, 0.5], dtype=np.float32)
    sao.offsets = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    y = propagate_rows(sao, x)
    delta = sao.copy()
    delta.set_as_gradient()
    delta.scales[:] = 0
    delta.offsets[:] = 0
    backprop_rows(sao, x, y, dy, to_update=delta)
    np.testing.assert_allclose(delta.offsets, dy.sum(0), rtol=1e-5)
    np.testing.assert_allclose(delta.scales, (x * dy).sum(0), rtol=1e-4, atol=1e-5)
    ng = make_simple("dim=3", "NaturalGradientPerElementScaleComponent")
    before = ng.scales.copy()
    # natural gradient: tested in test_natural_gradient.py
    backprop_rows(ng, x, None, dy, to_update=ng)
    assert np.dot(ng.scales - before, (x * dy).sum(0)) > 0    # still uphill
    o = make_simple("dim=3 learning-rate=0.1 use-natural-gradient=false",
                    "PerElementOffsetComponent")
    backprop_rows(o, x, None, dy, to_update=o)
    np.testing.assert_allclose(o.offsets, 0.1 * dy.sum(0), rtol=1e-6)
