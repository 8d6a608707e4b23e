"""ClipGradientComponent and BackpropTruncationComponent (gradient_clipping.py):
clipping, zeroing and their statistics."""
from __future__ import annotations

import numpy as np

from pynnet3.nnet.index import Index

from tests.helpers_components import backprop_rows, make_by_type, make_simple, rand_matrix


def test_clip_gradient_backprop():
    x = rand_matrix(4, 3)
    dy = np.array([[10, 0, 0], [0.1, 0.2, 0.2], [-30, 40, 0], [1, 1, 1]], dtype=np.float32)
    c = make_simple("dim=3 clipping-threshold=5 norm-based-clipping=true self-repair-scale=0",
                    "ClipGradientComponent")
    dx = backprop_rows(c, x, x, dy, to_update=c)
    norms = np.linalg.norm(dx, axis=1)
    np.testing.assert_allclose(norms, [5, 0.3, 5, np.sqrt(3)], rtol=1e-6)
    assert c.count == 4 and c.num_clipped == 2 and c.num_backpropped == 1
    assert c.info().endswith("clipped-proportion=0.5")
    e = make_simple("dim=3 clipping-threshold=1 self-repair-scale=0", "ClipGradientComponent")
    assert np.array_equal(backprop_rows(e, x, x, dy), np.clip(dy, -1, 1))
    z = make_simple("dim=3 clipping-threshold=0", "ClipGradientComponent")
    assert not backprop_rows(z, x, x, dy).any()
    c.scale(0.5)
    assert c.count == 2 and c.num_clipped == 1


def test_backprop_truncation_precompute_stats_and_propagate():
    c = make_by_type("BackpropTruncationComponent", "dim=2 scale=0.5 zeroing-interval=4 "
                     "recurrence-interval=2")
    outs = [Index(n, t) for n in (0, 1) for t in range(-2, 6)]
    pi = c.precompute_indexes(None, outs, outs, False)
    ref = [-1.0 if (t - n) // 4 != (t - 2 - n) // 4 else 0.0 for n, t, _ in outs]
    assert pi.zeroing.tolist() == ref and pi.zeroing_sum == -sum(ref)
    x = np.ones((3, 2), dtype=np.float32)
    c.propagate(pi, x, x)
    assert np.all(x == 0.5)
    c.count, c.num_clipped = 10.0, 2.0
    other = c.copy()
    c.add(2.0, other)
    assert c.count == 30.0 and c.num_clipped == 6.0
    c.scale(0.5)
    assert c.count == 15.0
    c.zero_stats()
    assert c.count == 0.0 and c.num_clipped == 0.0
