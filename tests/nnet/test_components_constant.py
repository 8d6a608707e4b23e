"""ConstantComponent (constant.py): no inputs, propagate, scale/add."""
from __future__ import annotations

import numpy as np

from pynnet3.nnet.index import Index

from tests.helpers_components import make_by_type


def test_constant_hooks_and_propagate():
    c = make_by_type("ConstantComponent", "output-dim=3 output-mean=2")
    assert c.get_input_indexes(None, Index(0, 4)) == []
    assert c.is_computable(None, Index(0, 4), set()) == (True, [])
    c = make_by_type("ConstantComponent", "output-dim=3 output-mean=2")
    out = np.zeros((4, 3), dtype=np.float32)
    c.propagate(None, np.zeros((0, 3), dtype=np.float32), out)
    assert np.all(out == 2.0)
    c.scale(0.5)
    c.add(1.0, make_by_type("ConstantComponent", "output-dim=3 output-mean=1"))
    assert c.output.tolist() == [2.0, 2.0, 2.0]
    assert c.dot_product(c) == 12.0
