"""ConvolutionModel.check (Kaldi's ConvolutionModel::Check) works with
intervals instead of looping over every height: the same verdict as Kaldi's
loop on random small models, and no time or memory for huge heights (a
model file saying height-in=2147483647 took 16 GB before)."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.nnet.components.convolution_model import ConvolutionModel


def kaldi_loop_check(m: ConvolutionModel, check_heights_used: bool,
                     allow_height_padding: bool) -> str:
    """Kaldi's loop, transcribed (messages as pynnet3 words them)."""
    h_in_used = [False] * m.height_in
    offsets_used = [False] * len(m.offsets)
    for h_out in range(0, m.height_out * m.height_subsample_out, m.height_subsample_out):
        some_input_available = False
        for i, (t_off, h_off) in enumerate(m.offsets):
            h_in = h_out + h_off
            if 0 <= h_in < m.height_in:
                offsets_used[i] = True
                h_in_used[h_in] = True
                if t_off in m.required_time_offsets:
                    some_input_available = True
            elif not allow_height_padding:
                return "height padding not allowed but is required"
        if not some_input_available:
            return (f"for output height {h_out // m.height_subsample_out}, no input is "
                    "available if only the required time offsets are available")
    if check_heights_used:
        for h, used in enumerate(h_in_used):
            if not used:
                return f"the input at height {h} is never used"
    for i, used in enumerate(offsets_used):
        if not used:
            t_off, h_off = m.offsets[i]
            return f"(time,height) offset ({t_off},{h_off}) is never used"
    return ""


def random_model(rng: np.random.Generator) -> ConvolutionModel:
    offsets = sorted({(int(rng.integers(-2, 3)), int(rng.integers(-6, 7)))
                      for _ in range(int(rng.integers(1, 7)))})
    times = sorted({t for t, _ in offsets})
    required = {t for t in times if rng.random() < 0.6} or {times[0]}
    m = ConvolutionModel(num_filters_in=2, num_filters_out=3,
                         height_in=int(rng.integers(1, 15)), height_out=int(rng.integers(1, 15)),
                         height_subsample_out=int(rng.integers(1, 4)), offsets=offsets,
                         required_time_offsets=required)
    m.compute_derived()
    return m


def test_check_agrees_with_kaldis_loop() -> None:
    rng = np.random.default_rng(7)
    verdicts = set()
    for _ in range(3000):
        m = random_model(rng)
        for heights_used in (True, False):
            for padding in (True, False):
                expected = kaldi_loop_check(m, heights_used, padding)
                assert m.check(heights_used, padding) == expected, (m, heights_used, padding)
                verdicts.add(expected.split(" ")[0] if expected else "ok")
    # Every kind of verdict was met.
    assert verdicts == {"ok", "height", "for", "the", "(time,height)"}


@pytest.mark.parametrize("height_in,height_out", [(2 ** 31 - 1, 2 ** 31 - 1), (2 ** 31 - 1, 3)])
def test_check_of_huge_heights_is_immediate(height_in: int, height_out: int) -> None:
    m = ConvolutionModel(num_filters_in=1, num_filters_out=1, height_in=height_in,
                         height_out=height_out, height_subsample_out=1,
                         offsets=[(0, -1), (0, 0), (0, 1)], required_time_offsets={0})
    m.compute_derived()
    expected = "" if height_in == height_out else f"the input at height {height_out + 1} is never used"
    assert m.check(True, True) == expected
    assert m.check(False, False) == "height padding not allowed but is required"
