"""Fixtures of the optimizer tests."""
from __future__ import annotations

import pytest

from pynnet3.nnet.nnet import Nnet
from tests.optimize.helpers import _CONFIG


@pytest.fixture(scope="module")
def nnet() -> Nnet:
    """The small network of the hand-built computations (see helpers._CONFIG)."""
    n = Nnet()
    n.read_config(_CONFIG, "<test>")
    return n
