"""DistributeComponent (distribute.py): compiler hooks and propagate."""
from __future__ import annotations

import numpy as np

from pynnet3.nnet.index import Index

from tests.helpers_components import make_by_type


def test_distribute_hooks_and_propagate():
    c = make_by_type("DistributeComponent", "input-dim=12 output-dim=4")    # 3 blocks
    assert c.get_input_indexes(None, Index(0, 5, 0)) == [Index(0, 5, 0)]
    assert c.get_input_indexes(None, Index(0, 5, 5)) == [Index(0, 5, 1)]
    assert c.get_input_indexes(None, Index(0, 5, -1)) == [Index(0, 5, -1)]
    assert c.get_input_indexes(None, Index(0, 5, -4)) == [Index(0, 5, -2)]
    assert c.is_computable(None, Index(1, 2, 2), {Index(1, 2, 0)}) == (True, [Index(1, 2, 0)])
    assert c.is_computable(None, Index(1, 2, 3), {Index(1, 2, 0)}) == (False, [])
    inputs = [Index(0, 0, 0), Index(0, 1, 0)]
    outputs = [Index(0, 1, 2), Index(0, 0, 0), Index(0, 0, 1)]
    pi = c.precompute_indexes(None, inputs, outputs, False)
    assert pi.pairs == [(1, 8), (0, 0), (0, 4)]
    x = np.arange(24, dtype=np.float32).reshape(2, 12)
    out = np.zeros((3, 4), dtype=np.float32)
    c.propagate(pi, x, out)
    np.testing.assert_array_equal(out, [x[1, 8:12], x[0, 0:4], x[0, 4:8]])
