"""The Kaldi I/O helpers the components share (pynnet3.io.kaldi_io): PeekToken,
BaseFloat rounding, integer-pair vectors and double matrices."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.errors import FormatError
from pynnet3.io.kaldi_io import (KaldiReader, KaldiWriter, f32, read_double_matrix,
                                 read_int_pair_vector, write_int_pair_vector)


@pytest.mark.parametrize("binary", [False, True])
def test_peek_char_is_kaldi_peek_token(binary):
    r = KaldiReader(b"  <IsGradient> T", binary)
    assert r.peek_char() == "I"
    assert r.pos == 0                     # nothing consumed
    r.expect_token("<IsGradient>")
    assert r.peek_char() == "T"           # not a token: its first character
    assert KaldiReader(b"", binary).peek_char() == ""
    assert KaldiReader(b" <", binary).peek_char() == ""


def test_f32_rounds_like_a_base_float():
    assert f32(0.1) == float(np.float32(0.1)) != 0.1
    assert f32(2.5) == 2.5


@pytest.mark.parametrize("binary", [False, True])
def test_int_pair_vector_round_trip(binary):
    pairs = [(0, 1), (-3, 7), (2 ** 31 - 1, -2 ** 31)]
    w = KaldiWriter(binary)
    write_int_pair_vector(w, pairs)
    r = KaldiReader(w.getvalue(), binary)
    assert read_int_pair_vector(r) == pairs
    assert r.at_eof()
    with pytest.raises(FormatError):
        read_int_pair_vector(KaldiReader(b"[ 1;2 ]", False))


@pytest.mark.parametrize("binary", [False, True])
def test_double_matrix_reads_float_and_double(binary):
    m = np.array([[1.5, -2.0], [0.25, 1e-3]])
    for double in (False, True):
        w = KaldiWriter(binary)
        w.write_matrix(m.astype(np.float32), double=double)
        got = read_double_matrix(KaldiReader(w.getvalue(), binary))
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, m.astype(np.float32), rtol=1e-7)
