"""Fixed components (fixed.py): SumBlockComponent adds into its output and
derivative."""
from __future__ import annotations

import numpy as np

from tests.helpers_components import make_simple, rand_matrix


def test_sum_block_adds():
    c = make_simple("input-dim=6 output-dim=2 scale=0.5", "SumBlockComponent")
    x = rand_matrix(3, 6)
    out = np.ones((3, 2), dtype=np.float32)
    c.propagate(None, x, out)
    np.testing.assert_allclose(out, 1 + 0.5 * (x[:, 0:2] + x[:, 2:4] + x[:, 4:6]), rtol=1e-6)
    dx = np.ones((3, 6), dtype=np.float32)
    dy = rand_matrix(3, 2, seed=5)
    c.backprop("", None, x, out, dy, None, None, dx)
    np.testing.assert_allclose(dx, 1 + 0.5 * np.tile(dy, 3), rtol=1e-6)
