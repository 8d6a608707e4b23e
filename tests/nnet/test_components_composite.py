"""CompositeComponent (composite.py): config, I/O, propagate and bad configs."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.components.composite import CompositeComponent
from pynnet3.nnet.components.convolution import ConvolutionComponent, MaxpoolingComponent

from tests.helpers_components import assert_round_trip, make_component, read_bytes, write_bytes


COMPOSITE_LINE = ("max-rows-process=2 num-components=2 "
                  "component1='type=ConvolutionComponent input-x-dim=4 input-y-dim=3 "
                  "input-z-dim=2 filt-x-dim=2 filt-y-dim=3 filt-x-step=1 filt-y-step=1 "
                  "num-filters=3' "
                  "component2='type=MaxpoolingComponent input-x-dim=3 input-y-dim=1 "
                  "input-z-dim=3 pool-x-size=3 pool-y-size=1 pool-z-size=1 pool-x-step=1 "
                  "pool-y-step=1 pool-z-step=1'")


def test_composite_component():
    c = make_component(CompositeComponent, COMPOSITE_LINE)
    conv, pool = c.components
    assert isinstance(conv, ConvolutionComponent) and isinstance(pool, MaxpoolingComponent)
    assert (c.input_dim(), c.output_dim()) == (24, 3)
    assert c.num_parameters() == conv.num_parameters() == 3 * 13
    assert c.properties() == (Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT | Prop.UPDATABLE
                              | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)
    assert c.info() == ("CompositeComponent sub-component1 = { " + conv.info()
                        + " }, sub-component2 = { " + pool.info() + " }")
    assert_round_trip(c)
    data = write_bytes(c, False)
    assert data.startswith(b"<CompositeComponent> <LearningRate> 0.001 <MaxRowsProcess> 2 "
                           b"<NumComponents> 2 <ConvolutionComponent> ")
    # old files without a learning rate are accepted
    old = data.replace(b"<LearningRate> 0.001 ", b"")
    assert read_bytes(old, False).max_rows_process == 2
    # forward: chains the sub-components (in blocks of max-rows-process rows)
    x = np.random.RandomState(7).randn(5, 24).astype(np.float32)
    y = np.zeros((5, 3), dtype=np.float32)
    c.propagate(None, x, y)
    mid = np.zeros((5, 9), dtype=np.float32)
    conv.propagate(None, x, mid)
    want = np.zeros((5, 3), dtype=np.float32)
    pool.propagate(None, mid, want)
    np.testing.assert_allclose(y, want, rtol=1e-6)
    # learning rates reach the sub-components
    c.set_underlying_learning_rate(0.5)
    assert conv.learning_rate == 0.5
    c.scale(0.0)
    assert not conv.filter_params.any()


@pytest.mark.parametrize("line", [
    "num-components=1",
    "num-components=1 component1='type=NoSuchComponent dim=3'",
    "num-components=1 component1='type=CompositeComponent num-components=1'",
    "num-components=2 component1='type=MaxpoolingComponent input-x-dim=1 input-y-dim=1 "
    "input-z-dim=4 pool-x-size=1 pool-y-size=1 pool-z-size=2 pool-x-step=1 pool-y-step=1 "
    "pool-z-step=2' component2='type=LstmNonlinearityComponent cell-dim=2'",   # dims mismatch
    "num-components=1 component1='type=RestrictedAttentionComponent key-dim=2 value-dim=2 "
    "num-left-inputs=1 num-right-inputs=0'",                                   # not simple
])
def test_composite_bad_configs(line):
    with pytest.raises(ConfigError):
        make_component(CompositeComponent, line)
