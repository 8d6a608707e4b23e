"""ComputationRequest I/O (printed, Kaldi text and binary Write formats) and build_request."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.compile.request_io import (build_request, parse_printed_indexes,
                                        parse_printed_request, read_index_vector, read_request,
                                        read_request_file, request_bytes, request_from_bytes,
                                        write_index_vector, write_request, write_request_file)
from pynnet3.errors import FormatError, PynnetError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.index import K_NO_TIME, Index
from pynnet3.nnet.nnet import Nnet
from tests.helpers import enough, reference_dir


def _random_dirs() -> list[Path]:
    dirs = sorted(p for p in (reference_dir() / "random").iterdir()
                  if (p / "request.txt").is_file())
    assert len(dirs) >= enough(60, 20)
    return dirs


def test_reference_requests_round_trip() -> None:
    """All reference requests: printed == Kaldi text, and both re-written byte-exactly."""
    for d in _random_dirs():
        printed = (d / "request.txt").read_text()
        kaldi_text = (d / "request.kaldi-text").read_bytes()
        from_print = parse_printed_request(printed, str(d))
        from_text = request_from_bytes(kaldi_text, str(d))
        assert from_print == from_text, d
        assert from_text.print() == printed, d
        assert request_bytes(from_text, binary=False) == kaldi_text, d
        binary = request_bytes(from_text, binary=True)
        again = request_from_bytes(binary)
        assert again == from_text, d
        assert request_bytes(again, binary=True) == binary, d


def _requests_in(data: bytes, binary: bool, name: str) -> list[tuple[ComputationRequest, int, int]]:
    found, pos = [], 0
    while (start := data.find(b"<ComputationRequest> ", pos)) >= 0:
        r = KaldiReader(data, binary, name, pos=start)
        found.append((read_request(r), start, r.pos))
        pos = r.pos
    return found


def test_binary_format_against_kaldi_cache_files() -> None:
    """Kaldi's --write-cache files hold requests in binary and text: both read the
    same, and writing them again gives Kaldi's exact bytes."""
    cases = sorted(p for p in (reference_dir() / "train").iterdir() if (p / "cache.1").is_file())
    if not cases:
        pytest.skip("no Kaldi cache files in the reference data")
    total = 0
    for case in cases:
        binary = (case / "cache.1").read_bytes()
        text = (case / "cache.1.txt").read_bytes()
        in_binary = _requests_in(binary, True, str(case / "cache.1"))
        in_text = _requests_in(text, False, str(case / "cache.1.txt"))
        assert len(in_binary) == len(in_text) > 0
        for (rb, b0, b1), (rt, t0, t1) in zip(in_binary, in_text):
            assert rb == rt
            w = KaldiWriter(True)
            write_request(w, rb)
            assert w.getvalue() == binary[b0:b1]
            w = KaldiWriter(False)
            write_request(w, rt)
            # The reader stops after the closing token's space; Kaldi then wrote a newline.
            assert w.getvalue() == text[t0:t1] + b"\n"
            total += 1
    assert total >= enough(4, 1)


def _index_vector_bytes(indexes: list[Index]) -> bytes:
    w = KaldiWriter(True)
    write_index_vector(w, indexes)
    return w.getvalue()


def test_binary_index_vector_encoding_by_hand() -> None:
    """The compact encoding, worked out by hand from nnet-common.cc's rules."""
    def general(n: int, t: int, x: int) -> bytes:
        return b"\x7f" + b"".join(b"\x04" + struct.pack("<i", v) for v in (n, t, x))

    indexes = [Index(0, 5, 0), Index(0, 6, 0), Index(0, -100, 0), Index(1, -100, 0),
               Index(1, 30, 0), Index(1, 30, 2), Index(1, K_NO_TIME, 2), Index(1, 7, 2)]
    # Build the expected bytes element by element to keep the rules readable.
    expected = (b"<I1V> \x04" + struct.pack("<i", 8)
                + bytes([5])                      # first, n=x=0, |t|<125: t itself
                + bytes([1])                      # t+1
                + bytes([256 - 106])              # t-106 as a signed byte
                + general(1, -100, 0)             # n changed
                + general(1, 30, 0)               # t change 130 is too large
                + general(1, 30, 2)               # x changed
                + general(1, K_NO_TIME, 2)        # huge t change
                + general(1, 7, 2))               # back from kNoTime: still huge
    assert _index_vector_bytes(indexes) == expected
    r = KaldiReader(expected, True, "<test>")
    assert read_index_vector(r) == indexes and r.pos == len(expected)
    # First element with n != 0 or |t| >= 125 is never compact.
    assert _index_vector_bytes([Index(0, 125, 0)])[-16:] == general(0, 125, 0)
    assert _index_vector_bytes([Index(0, -124, 0)])[-1:] == bytes([256 - 124])
    # Whitespace-valued delta bytes (t change 9, 10, 32) must not be skipped.
    ws = [Index(0, 0, 0), Index(0, 9, 0), Index(0, 19, 0), Index(0, 51, 0)]
    data = _index_vector_bytes(ws)
    assert data.endswith(b"\x00\t\n ")
    assert read_index_vector(KaldiReader(data, True, "<ws>")) == ws


def test_binary_index_vector_errors() -> None:
    good = _index_vector_bytes([Index(0, 1, 0), Index(3, 4, 5)])
    with pytest.raises(FormatError, match="truncated"):
        read_index_vector(KaldiReader(good[:-10], True, "<cut>"))
    with pytest.raises(FormatError, match="end of file"):
        read_index_vector(KaldiReader(good[:-16], True, "<cut>"))
    bad = good[:11] + bytes([126]) + good[12:]   # 126 is neither compact nor 127
    with pytest.raises(FormatError, match="unexpected character"):
        read_index_vector(KaldiReader(bad, True, "<bad>"))


def test_printed_index_lists() -> None:
    assert parse_printed_indexes("[ ]") == []
    assert parse_printed_indexes("[(0,-2:1), (3,5), (1,2:3,7)]") == [
        Index(0, -2, 0), Index(0, -1, 0), Index(0, 0, 0), Index(0, 1, 0), Index(3, 5, 0),
        Index(1, 2, 7), Index(1, 3, 7)]
    with pytest.raises(FormatError, match="shortened"):
        parse_printed_indexes("[(0,0), (0,3), (0,6) ... , (0,144), (0,147)]")
    with pytest.raises(FormatError):
        parse_printed_indexes("[(0,0) junk]")
    with pytest.raises(FormatError, match="decreasing"):
        parse_printed_indexes("[(0,5:2)]")


def test_file_formats_detected(tmp_path: Path) -> None:
    request = ComputationRequest(
        [IoSpecification("input", [Index(n, t, 0) for n in range(2) for t in range(-3, 7)]),
         IoSpecification("ivector", [Index(0, 0, 0), Index(1, 0, 0)], True)],
        [IoSpecification("output", [Index(n, t, 0) for n in range(2) for t in range(0, 4)],
                         True)],
        need_model_derivative=True)
    write_request_file(str(tmp_path / "r.bin"), request, binary=True)
    write_request_file(str(tmp_path / "r.txt"), request, binary=False)
    # As in Kaldi's verbose log: the request follows a LOG prefix on its first line.
    (tmp_path / "r.print").write_text(
        "LOG (nnet3-train[5.5]:CompileNoShortcut():nnet-optimize.cc:762) Computation request is"
        + request.print() + "\nmatrix m1(20, 4)\n")
    assert (tmp_path / "r.bin").read_bytes().startswith(b"\0B<ComputationRequest> ")
    for name in ("r.bin", "r.txt", "r.print"):
        assert read_request_file(str(tmp_path / name)) == request, name
    (tmp_path / "bad").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(FormatError):
        read_request_file(str(tmp_path / "bad"))


def test_build_request_layout() -> None:
    nnet = Nnet()
    nnet.read_config("input-node name=input dim=3\ninput-node name=ivector dim=2\n"
                     "component name=a type=AffineComponent input-dim=11 output-dim=4\n"
                     "component-node name=a component=a input=Append(Offset(input, -2), "
                     "input, Offset(input, 1), ReplaceIndex(ivector, t, 0))\n"
                     "output-node name=output input=a\n", "<test>")
    req = build_request(nnet, num_sequences=2, frames_per_chunk=3, extra_left_context=1,
                        frame_subsampling_factor=2, need_model_derivative=True)
    assert [io.name for io in req.inputs] == ["input", "ivector"]
    assert req.inputs[0].indexes == [Index(n, t, 0) for n in range(2) for t in range(-3, 6)]
    assert req.inputs[1].indexes == [Index(0, 0, 0), Index(1, 0, 0)]
    assert req.outputs[0].indexes == [Index(n, t, 0) for n in range(2) for t in (0, 2, 4)]
    assert req.outputs[0].has_deriv and not req.inputs[0].has_deriv
    assert req.need_model_derivative
    no_iv = build_request(nnet, ivector=False, need_input_derivative=True, frames_per_chunk=1)
    assert [io.name for io in no_iv.inputs] == ["input"] and no_iv.inputs[0].has_deriv
    assert no_iv.outputs[0].has_deriv and not no_iv.need_model_derivative
    with pytest.raises(PynnetError, match="no output node"):
        build_request(nnet, outputs=["output-xent"])


def _printed_header(path: Path) -> str:
    text = path.read_text()
    return text[:text.index("\n\n") + 1]


@pytest.mark.parametrize("layout,frames,factor", [("every_t0-149", 150, 1),
                                                  ("stride3_t0-447_150frames", 150, 3),
                                                  ("stride3_t0-147_50frames", 50, 3)])
def test_build_request_matches_kaldi_vosk_requests(vosk_mdl: Path, layout: str, frames: int,
                                                   factor: int) -> None:
    """The requests of the compile reference (Kaldi printed them before the computations)."""
    from pynnet3.compile.model_io import read_nnet

    ref = reference_dir() / "compile"
    nnet = _vosk_nnet(vosk_mdl, read_nnet)
    for deriv in (0, 1):
        path = ref / f"computation.{layout}.seq1.deriv{deriv}.shortcut1.txt"
        req = build_request(nnet, 1, frames, frame_subsampling_factor=factor,
                            need_model_derivative=bool(deriv))
        assert req.print() == _printed_header(path)
        if " ... " not in _printed_header(path):
            assert parse_printed_request(path.read_text(), str(path)) == req


_VOSK: dict[str, Nnet] = {}


def _vosk_nnet(path: Path, read_nnet) -> Nnet:
    if str(path) not in _VOSK:
        _VOSK[str(path)] = read_nnet(str(path))
    return _VOSK[str(path)]
