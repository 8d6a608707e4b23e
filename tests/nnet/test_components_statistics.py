"""StatisticsExtractionComponent and StatisticsPoolingComponent
(statistics.py): compiler hooks, precomputed indexes and propagate."""
from __future__ import annotations

import math

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.index import Index

from tests.helpers_components import make_by_type


def test_statistics_extraction_hooks():
    c = make_by_type("StatisticsExtractionComponent", "input-dim=2 input-period=2 output-period=6")
    assert c.get_input_indexes(None, Index(0, 7, 0)) == [Index(0, 6), Index(0, 8), Index(0, 10)]
    # Negative t rounds down to the period start, not towards zero.
    assert c.get_input_indexes(None, Index(1, -1, 0)) == [Index(1, -6), Index(1, -4), Index(1, -2)]
    ok, used = c.is_computable(None, Index(0, 6, 0), {Index(0, 8), Index(0, 10)})
    assert ok and used == [Index(0, 8), Index(0, 10)]
    assert c.is_computable(None, Index(0, 6, 0), {Index(0, 5)}) == (False, [])
    ins = [Index(1, 0), Index(0, 2), Index(0, 0), Index(0, 4), Index(0, 6)]
    outs = [Index(0, 6), Index(1, 0), Index(0, 0)]
    ins2, outs2 = c.reorder_indexes(ins, outs)
    assert ins2 == [Index(0, 0), Index(0, 2), Index(0, 4), Index(0, 6), Index(1, 0)]
    assert outs2 == [Index(0, 0), Index(0, 6), Index(1, 0)]
    assert c.reorder_indexes([Index(0, 1, 1), Index(0, 2, 0)], [])[0] == [Index(0, 2, 0),
                                                                           Index(0, 1, 1)]
    pi = c.precompute_indexes(None, ins2, outs2, True)
    assert pi.forward_indexes == [(0, 3), (3, 4), (4, 5)]
    assert pi.counts.tolist() == [3.0, 1.0, 1.0]
    assert pi.backward_indexes == [0, 0, 0, 1, 2]
    assert c.precompute_indexes(None, ins2, outs2, False).backward_indexes == []
    x = np.random.default_rng(2).standard_normal((5, 2)).astype(np.float32)
    out = np.full((3, 5), 7.0, dtype=np.float32)
    c.propagate(pi, x, out)
    ref = np.zeros((3, 5))
    for i, (a, b) in enumerate(pi.forward_indexes):
        ref[i, 0] = b - a
        ref[i, 1:3] = x[a:b].sum(0)
        ref[i, 3:5] = (x[a:b].astype(np.float64) ** 2).sum(0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    for binary in (False, True):
        w = KaldiWriter(binary)
        pi.write(w)
        pi2 = type(pi)()
        pi2.read(KaldiReader(w.getvalue(), binary))
        assert pi2.forward_indexes == pi.forward_indexes
        assert pi2.backward_indexes == pi.backward_indexes
        assert pi2.counts.tolist() == pi.counts.tolist()


def test_statistics_pooling_hooks_and_propagate():
    c = make_by_type("StatisticsPoolingComponent", "input-dim=5 input-period=2 left-context=4 "
                     "right-context=2 num-log-count-features=1 output-stddevs=true")
    assert c.output_dim() == 5
    assert c.get_input_indexes(None, Index(0, 6, 0)) == [Index(0, 2), Index(0, 4), Index(0, 6),
                                                          Index(0, 8)]
    with pytest.raises(ConfigError, match="not a multiple of its input-period 2"):
        c.get_input_indexes(None, Index(0, 5, 0))
    assert c.is_computable(None, Index(0, 5, 0), {Index(0, 4)}) == (False, [])
    assert c.is_computable(None, Index(0, 6, 0), {Index(0, 4), Index(0, 10)}) == (
        True, [Index(0, 4)])
    assert c.is_computable(None, Index(0, -2, 0), {Index(0, 4)}) == (False, [])
    ins = [Index(0, t) for t in (0, 2, 4, 6)]
    outs = [Index(0, 0), Index(0, 2), Index(0, 4)]
    pi = c.precompute_indexes(None, ins, outs, True)
    assert pi.forward_indexes == [(0, 2), (0, 3), (0, 4)]
    assert pi.backward_indexes == [(0, 3), (0, 3), (1, 3), (2, 3)]
    # Feed it real extraction statistics (count, sum x, sum x^2) of 2-dim data.
    rng = np.random.default_rng(3)
    feats = rng.standard_normal((4, 3, 2))        # 3 frames per input row
    x = np.concatenate([np.full((4, 1), 3.0), feats.sum(1), (feats ** 2).sum(1)],
                       axis=1).astype(np.float32)
    out = np.zeros((3, 5), dtype=np.float32)
    c.propagate(pi, x, out)
    for i, (a, b) in enumerate(pi.forward_indexes):
        frames = feats[a:b].reshape(-1, 2)
        assert out[i, 0] == pytest.approx(math.log(frames.shape[0]), rel=1e-6)
        np.testing.assert_allclose(out[i, 1:3], frames.mean(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out[i, 3:5], frames.std(0), rtol=1e-4, atol=1e-5)
    w = KaldiWriter(False)
    pi.write(w)
    assert w.getvalue() == (b"<StatisticsPoolingComponentPrecomputedIndexes> <ForwardIndexes> "
                            b"[ 0,2 0,3 0,4 ]\n<BackwardIndexes> [ 0,3 0,3 1,3 2,3 ]\n"
                            b"</StatisticsPoolingComponentPrecomputedIndexes> ")
    pi2 = type(pi)()
    w = KaldiWriter(True)
    pi.write(w)
    pi2.read(KaldiReader(w.getvalue(), True))
    assert pi2 == pi
