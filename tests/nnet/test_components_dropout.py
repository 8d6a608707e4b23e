"""Dropout components (dropout.py): DropoutComponent test mode,
DropoutMaskComponent (no inputs), GeneralDropoutComponent and
SpecAugmentTimeMaskComponent precomputed indexes and propagate."""
from __future__ import annotations

import numpy as np

from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.index import Index

from tests.helpers_components import make_by_type, make_simple, propagate_rows, rand_matrix


def test_dropout_test_mode():
    c = make_simple("dim=4 dropout-proportion=0.25", "DropoutComponent")
    c.set_test_mode(True)
    x = rand_matrix(3, 4)
    assert np.array_equal(propagate_rows(c, x), x * np.float32(0.75))
    c.set_test_mode(False)
    y = propagate_rows(c, x)
    assert np.all((y == 0) | (y == x))


def test_dropout_mask_hooks_and_propagate():
    c = make_by_type("DropoutMaskComponent", "output-dim=3")
    assert c.get_input_indexes(None, Index(0, 4)) == []
    assert c.is_computable(None, Index(0, 4), set()) == (True, [])
    m = make_by_type("DropoutMaskComponent", "output-dim=2 dropout-proportion=0.3")
    out = np.zeros((50, 2), dtype=np.float32)
    m.propagate(None, np.zeros((0, 2), dtype=np.float32), out)
    assert set(np.unique(out)) <= {0.0, 1.0} and np.all(out.sum(1) >= 1)
    m.set_test_mode(True)
    m.propagate(None, None, out)
    np.testing.assert_allclose(out, 0.7)
    m.set_dropout_proportion(0.0)
    m.propagate(None, None, out)
    assert np.all(out == 1.0)


def test_general_dropout_precompute_and_propagate():
    c = make_by_type("GeneralDropoutComponent",
                     "dim=4 block-dim=2 time-period=3 dropout-proportion=0.5")
    idx = [Index(0, -1), Index(0, 0), Index(0, 2), Index(0, 3), Index(1, 0), Index(0, -3)]
    pi = c.precompute_indexes(None, idx, idx, False)
    # (n, floor(t/3)): (0,-1)->0, (0,0)->1, (0,0)->1, (0,1)->2, (1,0)->3, (0,-1)->0
    assert pi.num_mask_rows == 8
    assert pi.indexes == [0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 0, 0]
    c0 = make_by_type("GeneralDropoutComponent", "dim=4")
    pi0 = c0.precompute_indexes(None, idx, idx, False)
    assert (pi0.num_mask_rows, pi0.indexes) == (2, [0, 0, 0, 0, 1, 0])
    x = np.ones((6, 4), dtype=np.float32)
    mask = c.propagate(pi, x, x)
    assert mask.shape == (8, 2)
    np.testing.assert_array_equal(x.reshape(-1, 2), mask[pi.indexes])
    assert set(np.unique(mask)) <= {0.0, 2.0}
    c.set_test_mode(True)
    y = np.ones((6, 4), dtype=np.float32)
    assert c.propagate(pi, y, y) is None and np.all(y == 1)
    s = make_by_type("GeneralDropoutComponent", "dim=10 specaugment-max-proportion=0.3 "
                     "specaugment-max-regions=2")
    pi_s = s.precompute_indexes(None, idx, idx, False)
    mask = s._get_memo(50)
    assert set(np.unique(mask)) <= {0.0, 1.0} and (10 - mask.sum(1)).max() <= 3
    for binary in (False, True):
        w = KaldiWriter(binary)
        pi_s.write(w)
        back = type(pi_s)()
        back.read(KaldiReader(w.getvalue(), binary))
        assert back == pi_s


def test_specaugment_time_mask_precompute_and_propagate():
    c = make_by_type("SpecAugmentTimeMaskComponent", "dim=3 zeroed-proportion=0.5 "
                     "time-mask-max-frames=3")
    idx = [Index(2, 1), Index(0, 5), Index(2, 0), Index(0, 4), Index(0, 6)]
    pi = c.precompute_indexes(None, idx, idx, False)
    assert pi.indexes == [[3, 1, 4], [2, 0]] and pi.tot_size == 5
    w = KaldiWriter(False)
    pi.write(w)
    assert w.getvalue() == (b"<SpecAugmentTimeMaskComponentPrecomputedIndexes> <Indexes> 2 "
                            b"[ 3 1 4 ]\n[ 2 0 ]\n"
                            b"</SpecAugmentTimeMaskComponentPrecomputedIndexes> ")
    back = type(pi)()
    back.read(KaldiReader(w.getvalue(), False))
    assert back == pi
    x = np.ones((5, 3), dtype=np.float32)
    mask = c.propagate(pi, x, x)
    assert set(np.unique(mask)) <= {0.0, 1.0}
    np.testing.assert_array_equal(x, np.repeat(mask[:, None], 3, axis=1))
