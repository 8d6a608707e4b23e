"""RestrictedAttentionComponent (attention.py): config, I/O, hooks, forward
pass and statistics."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.nnet.components.attention import RestrictedAttentionComponent
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.index import Index, K_NO_TIME

from tests.helpers_components import assert_round_trip, make_component


def test_attention_config_io_hooks():
    c = make_component(RestrictedAttentionComponent,
                       "num-heads=2 key-dim=4 value-dim=3 time-stride=2 "
                                           "num-left-inputs=2 num-right-inputs=1 "
                                           "num-left-inputs-required=1 output-context=false")
    assert c.context_dim == 4
    assert (c.input_dim(), c.output_dim()) == (2 * (4 + 3 + 4 + 4), 2 * 3)
    assert c.properties() == (Prop.REORDERS_INDEXES | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.PROPAGATE_ADDS | Prop.BACKPROP_ADDS | Prop.STORES_STATS
                              | Prop.USES_MEMO)
    assert "key-scale=0.5" in c.info() and "num-right-inputs-required=1" in c.info()
    assert_round_trip(c)
    assert c.get_input_indexes(None, Index(0, 10)) == [Index(0, t) for t in (6, 8, 10, 12)]
    avail = {Index(0, 8), Index(0, 10), Index(0, 12)}
    assert c.is_computable(None, Index(0, 10), avail) == (True, sorted(avail))
    assert c.is_computable(None, Index(0, 10), avail - {Index(0, 12)})[0] is False
    with pytest.raises(ConfigError):
        make_component(RestrictedAttentionComponent, "key-dim=4 value-dim=3 num-left-inputs=0 "
                                           "num-right-inputs=0")
    with pytest.raises(ConfigError):
        make_component(RestrictedAttentionComponent, "key-dim=4 value-dim=3 num-left-inputs=1 "
                                           "num-right-inputs=0 key-scale=2")


def test_attention_forward_and_stats():
    c = make_component(RestrictedAttentionComponent,
                       "num-heads=2 key-dim=3 value-dim=2 time-stride=1 "
                                           "num-left-inputs=2 num-right-inputs=1 "
                                           "num-left-inputs-required=0 "
                                           "num-right-inputs-required=0")
    rs = np.random.RandomState(4)
    in_idx = [Index(n, t) for n in range(2) for t in range(0, 6)]
    out_idx = [Index(n, t) for n in range(2) for t in range(0, 6)]
    new_in, new_out = c.reorder_indexes(in_idx, out_idx)
    assert len(new_in) == 2 * 9 and new_in[0] == Index(0, K_NO_TIME)
    pre = c.precompute_indexes(None, new_in, new_out, False)
    frames = {(ix.n, ix.t): rs.randn(c.input_dim()).astype(np.float32) for ix in in_idx}
    zero = np.zeros(c.input_dim(), np.float32)
    x = np.stack([frames.get((ix.n, ix.t), zero) for ix in new_in])
    y = np.zeros((len(new_out), c.output_dim()), dtype=np.float32)
    memo = c.propagate(pre, x, y)
    cd, kd, vd = 4, 3, 2
    for row, ix in enumerate(new_out):
        for h in range(2):
            q = frames[(ix.n, ix.t)][h * 12 + kd + vd:(h + 1) * 12]
            ctx = [frames.get((ix.n, ix.t + o), zero)[h * 12:(h + 1) * 12] for o in range(-2, 2)]
            b = np.array([c.key_scale * q[:kd] @ f[:kd] for f in ctx]) + q[kd:]
            p = np.exp(b - b.max())
            p /= p.sum()
            want = sum(p[o] * ctx[o][kd:kd + vd] for o in range(cd))
            np.testing.assert_allclose(y[row, h * 6:h * 6 + 2], want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(y[row, h * 6 + 2:h * 6 + 6], p, rtol=1e-5, atol=1e-6)
    for _ in range(6):
        c.store_stats(x, y, memo)
    assert c.stats_count > 0 and c.posterior_stats.shape == (2, 4)
    assert "stats-count=" in c.info() and "posterior-stats[1]=" in c.info()
    np.testing.assert_allclose(c.posterior_stats.sum(axis=1), c.stats_count, rtol=1e-5)
    assert_round_trip(c)
    c.zero_stats()
    assert "entropy" not in c.info()
