"""LightGenerator (nnet/components/light_rng.py): the components' random
stream without importing numpy.random must be NumPy's default_rng stream
value for value, and hand its exact state over to NumPy for other draws."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.nnet.components.light_rng import LightGenerator, _seed_words

SEEDS = [0, 1, 2, 7, 123, 2**31 - 1, 2**32 - 1, 2**32, 2**40 + 7, 12345678901234567890]


@pytest.mark.parametrize("seed", SEEDS)
def test_seeding_matches_seed_sequence_and_pcg64(seed: int) -> None:
    words = np.random.SeedSequence(seed).generate_state(4, np.uint64)
    assert _seed_words(seed) == [int(w) for w in words]
    g, n = LightGenerator(seed), np.random.default_rng(seed)
    state = n.bit_generator.state
    assert (g._state, g._inc) == (state["state"]["state"], state["state"]["inc"])


@pytest.mark.parametrize("seed", SEEDS)
def test_integers_match_numpy_value_for_value(seed: int) -> None:
    """Mixed ranges (one value, 2 and 4 as the stats sampling draws, odd
    ranges that meet Lemire's rejection, ranges near 2^32), negative lows."""
    g, n = LightGenerator(seed), np.random.default_rng(seed)
    choose = np.random.RandomState(seed % 2**32)
    spans = [1, 2, 3, 4, 7, 1000, 2**31 + 3, 3 * 2**30, 2**32 - 1]
    for _ in range(3000):
        low = int(choose.randint(-5, 5))
        high = low + int(choose.choice(spans))
        assert g.integers(low, high) == n.integers(low, high)
    assert g._numpy is None                      # all drawn without NumPy's generator


@pytest.mark.parametrize("seed", [0, 1, 99])
def test_other_draws_continue_the_stream_in_numpy(seed: int) -> None:
    g, n = LightGenerator(seed), np.random.default_rng(seed)
    for k in range(5):                           # leaves a buffered 32-bit half
        assert g.integers(0, 2 + k) == n.integers(0, 2 + k)
    np.testing.assert_array_equal(g.standard_normal(7), n.standard_normal(7))
    np.testing.assert_array_equal(g.random((3, 4), dtype=np.float32),
                                  n.random((3, 4), dtype=np.float32))
    assert g.integers(0, 4) == n.integers(0, 4)              # now NumPy's own
    np.testing.assert_array_equal(g.integers(0, 9, size=5), n.integers(0, 9, size=5))
    assert g.random() == n.random()


def test_array_and_unusual_integer_calls_go_to_numpy() -> None:
    g, n = LightGenerator(3), np.random.default_rng(3)
    np.testing.assert_array_equal(g.integers(0, 5, size=4), n.integers(0, 5, size=4))
    assert g._numpy is not None
    assert g.integers(10) == n.integers(10)
    assert g.integers(np.int64(0), np.int64(3)) == n.integers(np.int64(0), np.int64(3))


@pytest.mark.parametrize("seed", SEEDS)
def test_scalar_random_matches_numpy_between_integer_draws(seed: int) -> None:
    """random() (one float64, the self-repair draw) interleaved with small
    integer draws that leave a buffered 32-bit half, all without NumPy."""
    g, n = LightGenerator(seed), np.random.default_rng(seed)
    choose = np.random.RandomState(seed % 2**32)
    for _ in range(2000):
        if choose.rand() < 0.5:
            assert g.random() == n.random()
        else:
            span = int(choose.choice([2, 4, 7]))
            assert g.integers(0, span) == n.integers(0, span)
    assert g._numpy is None
    assert g.random(dtype=np.float64) == n.random(dtype=np.float64)   # NumPy's from here
    assert g._numpy is not None
    assert g.random() == n.random()
