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


# ---------------------------------------------------------------------------
# rxfilenames / wxfilenames (Kaldi's ClassifyRxfilename / ClassifyWxfilename)


@pytest.mark.parametrize("name,kind", [("-", "stdout"), ("", "stdout"), ("x.raw", "file"),
                                       ("| gzip -c > x.gz", "pipe"), (" out.raw ", "file")])
def test_classify_wxfilename(name: str, kind: str) -> None:
    from pynnet3.io.kaldi_io import classify_wxfilename

    assert classify_wxfilename(name) == kind


@pytest.mark.parametrize("name", ["x.raw |", "gzip -c > x.gz |", "ark:x.ark", "t,ark:x.ark",
                                  "x.ark:123", "a|b"])
def test_wxfilenames_kaldi_cannot_write(name: str) -> None:
    from pynnet3.errors import UsageError
    from pynnet3.io.kaldi_io import classify_wxfilename

    with pytest.raises(UsageError, match="invalid wxfilename"):
        classify_wxfilename(name)


def test_classify_rxfilename(tmp_path) -> None:
    from pynnet3.errors import UsageError
    from pynnet3.io.kaldi_io import classify_rxfilename

    assert classify_rxfilename("-") == "stdin"
    assert classify_rxfilename("gunzip -c x.gz |") == "pipe"
    assert classify_rxfilename(f"{tmp_path}/x.ark:12") == "offset"
    (tmp_path / "x:12").write_bytes(b"")
    assert classify_rxfilename(f"{tmp_path}/x:12") == "file"     # an existing file wins
    for bad in ("| gzip -c", "scp:x.scp", "a|b"):
        with pytest.raises(UsageError, match="invalid rxfilename"):
            classify_rxfilename(bad)


def test_archive_keys_are_bytes(tmp_path) -> None:
    """Kaldi's keys are bytes (IsToken allows any byte beyond ASCII): a
    Latin-1 key is read and written back unchanged."""
    from pynnet3.io.table import VECTOR_HOLDER, SequentialTableReader, TableWriter

    data = b"caf\xe9 [ 1 2 ]\nna\xefve [ 3 ]\n"
    (tmp_path / "in.ark").write_bytes(data)
    with SequentialTableReader(f"ark:{tmp_path}/in.ark", VECTOR_HOLDER) as r, \
            TableWriter(f"ark,t:{tmp_path}/out.ark", VECTOR_HOLDER) as w:
        for key, vec in r:
            w.write(key, vec)
    assert (tmp_path / "out.ark").read_bytes() == b"caf\xe9  [ 1 2 ]\nna\xefve  [ 3 ]\n"


@pytest.mark.parametrize("method,text", [("read_int32", b"2147483648 "),
                                         ("read_int32", b"-2147483649 "),
                                         ("read_int_vector", b"[ 1 2147483648 ]"),
                                         ("read_int_pair_vector", b"[ 1,2 3,-2147483649 ]")])
def test_text_int32_out_of_range(method: str, text: bytes) -> None:
    # Kaldi's text ReadBasicType<int32> fails on overflow; a Python int would
    # pass and overflow later (an internal error in NumPy).
    r = KaldiReader(text, False, "m.txt")
    with pytest.raises(FormatError, match="int32"):
        if method == "read_int_pair_vector":
            read_int_pair_vector(r)
        else:
            getattr(r, method)()


def test_write_float_beyond_float_range_is_inf() -> None:
    # C++ converts such a double to +-inf; struct.pack raised OverflowError.
    w = KaldiWriter(True)
    w.write_float(6e38)
    w.write_float(-1e300)
    r = KaldiReader(w.getvalue(), True)
    assert r.read_float() == float("inf") and r.read_float() == float("-inf")
    w = KaldiWriter(False)
    w.write_float(6e38)
    assert w.getvalue() == b"inf "


def test_token_archive_values_are_bytes(tmp_path) -> None:
    """utt2spk: a Latin-1 speaker id is a key of the speaker archive."""
    from pynnet3.io.table import TOKEN_HOLDER, VECTOR_HOLDER, RandomAccessTableReader

    (tmp_path / "utt2spk").write_bytes(b"u1 jos\xe9\n")
    (tmp_path / "spk.ark").write_bytes(b"jos\xe9 [ 1 2 ]\n")
    with RandomAccessTableReader(f"ark:{tmp_path}/utt2spk", TOKEN_HOLDER) as utt2spk, \
            RandomAccessTableReader(f"ark:{tmp_path}/spk.ark", VECTOR_HOLDER) as spk:
        assert spk.value(utt2spk.value("u1")).tolist() == [1.0, 2.0]


def _mapping_rss_kib(path) -> int | None:
    """Resident KiB of this process's mappings of ``path`` (Linux), or None."""
    import os

    try:
        with open("/proc/self/smaps", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    real = os.path.realpath(path)
    total, inside = 0, False
    for line in lines:
        parts = line.split()
        if parts and "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
            inside = len(parts) >= 6 and parts[5] == real
        elif inside and parts[0] == "Rss:":
            total += int(parts[1])
    return total


@pytest.mark.parametrize("binary", [False, True])
def test_model_file_is_mapped_and_its_pages_dropped(tmp_path, binary):
    """open_kaldi_object maps a plain file: the objects read are those of the
    file's bytes, and a large binary matrix's pages are dropped from the
    process once copied (the file's bytes are not held beside the model)."""
    from pynnet3.io.kaldi_io import open_kaldi_object

    rng = np.random.RandomState(0)
    big = rng.randn(1000, 600).astype(np.float32)       # 2.4 MB
    small = rng.randn(7).astype(np.float32)
    w = KaldiWriter(binary)
    w.write_token("<A>")
    w.write_matrix(big)
    w.write_vector(small)
    w.write_token("</A>")
    path = tmp_path / "obj"
    path.write_bytes((b"\0B" if binary else b"") + w.getvalue())
    r = open_kaldi_object(str(path))
    assert not isinstance(r.data, bytes)            # mapped, not read
    assert r.binary == binary and r.data.startswith(b"<A>", r.pos)
    r.expect_token("<A>")
    got = r.read_matrix()
    if binary:
        np.testing.assert_array_equal(got, big)
    else:       # (text: 7 significant digits)
        np.testing.assert_allclose(got, big, rtol=1e-6)
    if binary:
        rss = _mapping_rss_kib(path)
        if rss is not None:
            assert rss < 600, f"{rss} KiB of the mapped file still resident"
    np.testing.assert_allclose(r.read_vector(), small, rtol=1e-6)
    r.expect_token("</A>")
    assert r.at_eof()
    # Not a plain file: read as before (an empty file, a missing one).
    (tmp_path / "empty").write_bytes(b"")
    assert open_kaldi_object(str(tmp_path / "empty")).data == b""
    with pytest.raises(FormatError, match="could not open"):
        open_kaldi_object(str(tmp_path / "missing"))


def test_writer_holds_large_matrices_by_reference():
    """A large binary matrix is a view of the array in KaldiWriter.parts()
    (a table writer writes it from there); getvalue() is the same bytes."""
    big = np.arange(200 * 400, dtype=np.float32).reshape(200, 400)
    w = KaldiWriter(True)
    w.write_token("<X>")
    w.write_matrix(big)
    w.write_int32(5)
    parts = w.parts()
    assert any(isinstance(p, memoryview) and p.obj is big for p in parts)
    joined = b"".join(parts)
    assert joined == w.getvalue()
    assert joined == (b"<X> FM \x04" + np.int32(200).tobytes() + b"\x04"
                      + np.int32(400).tobytes() + big.tobytes() + b"\x04"
                      + np.int32(5).tobytes())


def test_expect_token_reads_as_read_token_does() -> None:
    """expect_token's fast comparison (the token and one space) ends where
    read_token would, and anything else (leading whitespace, another
    separator, a longer word) takes read_token's way, errors included."""
    from pynnet3.errors import FormatError

    r = KaldiReader(b" <A>  <B>\n<C> <D>X <E>\t", binary=False)
    r.expect_token("<A>")
    assert r.pos == 5
    r.expect_token("<B>")
    assert r.pos == 10
    r.expect_token("<C>")
    assert r.pos == 14
    with pytest.raises(FormatError, match=r"byte 14\): expected token <D>, got <D>X"):
        r.expect_token("<D>")
    assert r.pos == 14
    r.read_token()
    r.expect_token("<E>")
    assert r.pos == len(r.data)
    w = KaldiWriter(False)
    for bad in ("", "a b", "a\tb"):
        with pytest.raises(ValueError, match="invalid token"):
            w.write_token(bad)
    w.write_token("<A>")
    w.write_token("<A>")
    assert w.getvalue() == b"<A> <A> "
