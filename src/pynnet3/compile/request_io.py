"""ComputationRequests in Kaldi's file formats, and the usual requests.

Three formats are read:

* the *printed* form of ``ComputationRequest::Print`` (`` # Computation
  request:`` followed by ``input-0: name=..., has-deriv=..., indexes=[...]``
  lines), which is what Kaldi logs and what the reference data holds;
* Kaldi's ``Write`` format in text mode (``<ComputationRequest> <NumInputs>
  ...``, each Index as ``<I1> n t x``);
* the same in binary mode, where an Index vector is stored compactly
  (nnet-common.cc WriteIndexVector): one signed byte holding the change in
  ``t`` when ``n`` and ``x`` are those of the previous Index (``(0,t,0)``
  for the first) and the change fits in (-125, 125), else the byte 127 and
  the three values as int32.

The Write format is written in both modes, byte-identical to Kaldi's.
:func:`build_request` makes the requests that Kaldi's decoding and training
tools make for a "simple" network (``input``, optional ``ivector``,
``output``).
"""
from __future__ import annotations

import itertools
import re
import struct
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import FormatError, PynnetError
from ..io.kaldi_io import (BINARY_HEADER, KaldiReader, KaldiWriter, kaldi_object_bytes,
                           read_rxfilename, write_wxfilename)
from ..nnet.index import Index
from .request import ComputationRequest, IoSpecification

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

# The marker byte of a non-compact element of a binary Index vector.
_GENERAL = 127
# Compact elements hold a t (or t difference) strictly inside (-125, 125).
_COMPACT_LIMIT = 125


# ---------------------------------------------------------------------------
# Index vectors (Kaldi's WriteIndexVector / ReadIndexVector)


def _as_index_array(indexes: Sequence[Index]) -> np.ndarray:
    """(N, 3) int64 array of (n, t, x) (int64 so that differences cannot wrap)."""
    num = len(indexes)
    array = getattr(indexes, "array", None)  # n_stride.IndexList keeps one
    if array is not None:
        return np.asarray(array, dtype=np.int64).reshape(num, 3)
    return np.fromiter(itertools.chain.from_iterable(indexes), dtype=np.int64,
                       count=3 * num).reshape(num, 3)


def _indexes_from_array(arr: np.ndarray) -> list[Index]:
    return list(map(Index._make, arr.tolist()))


def _wrap_int32(values: np.ndarray) -> np.ndarray:
    """Kaldi computes t differences in int32 arithmetic; reproduce the wrap-around."""
    return ((values + 2 ** 31) % 2 ** 32) - 2 ** 31


def write_index_vector(w: KaldiWriter, indexes: Sequence[Index]) -> None:
    """Kaldi's WriteIndexVector (``<I1V>``, the size, then the elements)."""
    w.write_token("<I1V>")
    arr = _as_index_array(indexes)
    num = arr.shape[0]
    w.write_int32(num)
    if not w.binary:
        w.write_raw("".join(f"<I1> {n} {t} {x} " for n, t, x in arr.tolist()))
        return
    if num == 0:
        return
    # The element before the first one is taken to be (0, 0, 0): then the
    # first element's rule (n == 0, x == 0, |t| < 125) is the same as the
    # others' (same n and x as before, |t change| < 125).
    prev = np.zeros_like(arr)
    prev[1:] = arr[:-1]
    dt = _wrap_int32(arr[:, 1] - prev[:, 1])
    compact = ((arr[:, 0] == prev[:, 0]) & (arr[:, 2] == prev[:, 2])
               & (dt > -_COMPACT_LIMIT) & (dt < _COMPACT_LIMIT))
    # Every element as a 16-byte block: 127, then (4, int32) for n, t and x;
    # compact elements keep only their first byte, set to the t change.
    blocks = np.zeros((num, 16), dtype=np.uint8)
    blocks[:, 0] = _GENERAL
    values = np.ascontiguousarray(arr, dtype="<i4")
    for k in range(3):
        blocks[:, 1 + 5 * k] = 4
        blocks[:, 2 + 5 * k:6 + 5 * k] = values[:, k:k + 1].view(np.uint8)
    blocks[compact, 0] = dt[compact].astype(np.int8).view(np.uint8)
    lengths = np.where(compact, 1, 16)
    keep = np.arange(16)[None, :] < lengths[:, None]
    w.write_raw(blocks[keep].tobytes())


def read_index_vector(r: KaldiReader) -> list[Index]:
    """Kaldi's ReadIndexVector, text or binary."""
    r.expect_token("<I1V>")
    size = r.read_int32()
    if size < 0:
        raise r.error(f"bad size {size} of Index vector")
    if not r.binary:
        return _read_text_index_elements(r, size)
    data, pos, end = r.data, r.pos, len(r.data)
    out = np.empty((size, 3), dtype=np.int64)
    n = t = x = 0
    unpack = struct.unpack_from
    for i in range(size):
        if pos >= end:
            r.pos = pos
            raise r.error("end of file while reading vector of Index")
        c = data[pos]
        c = c - 256 if c >= 128 else c
        pos += 1
        if -_COMPACT_LIMIT < c < _COMPACT_LIMIT:
            # n and x carry over from the previous Index ((0, 0, 0) for the first).
            t += c
            if not -2 ** 31 <= t < 2 ** 31:  # int32 arithmetic, as in Kaldi
                t = ((t + 2 ** 31) % 2 ** 32) - 2 ** 31
        elif c == _GENERAL:
            if pos + 15 > end or data[pos] != 4 or data[pos + 5] != 4 or data[pos + 10] != 4:
                r.pos = pos
                raise r.error("bad or truncated Index in Index vector")
            n = unpack("<i", data, pos + 1)[0]
            t = unpack("<i", data, pos + 6)[0]
            x = unpack("<i", data, pos + 11)[0]
            pos += 15
        else:
            r.pos = pos - 1
            raise r.error(f"unexpected character {c} while reading Index vector")
        out[i, 0] = n
        out[i, 1] = t
        out[i, 2] = x
    r.pos = pos
    return _indexes_from_array(out)


def _read_text_index_elements(r: KaldiReader, size: int) -> list[Index]:
    """``size`` elements ``<I1> n t x``, parsed in one go."""
    if size == 0:
        return []
    num_words = 4 * size
    # Kaldi writes "<I1> n t x " (at most 42 characters); split a window that
    # should hold them all rather than the rest of a possibly large file.
    end = min(len(r.data), r.pos + 48 * size + 64)
    words = r.data[r.pos:end].split(None, num_words)
    if len(words) <= num_words and end < len(r.data):
        end = len(r.data)
        words = r.data[r.pos:end].split(None, num_words)
    if len(words) < num_words:
        r.pos = len(r.data)
        raise r.error("unexpected end of file while reading vector of Index")
    # The remainder (if any) starts at the first word after the Indexes.
    r.pos = end - len(words[num_words]) if len(words) > num_words else end
    grid = np.array(words[:num_words], dtype=object).reshape(size, 4)
    if not np.all(grid[:, 0] == b"<I1>"):
        bad = next(w for w in grid[:, 0] if w != b"<I1>")
        raise r.error(f"expected token <I1> in Index vector, got {bad[:40]!r}")
    try:
        arr = np.array(grid[:, 1:].astype(str), dtype=np.int64)
    except ValueError:
        raise r.error("bad integer in Index vector") from None
    return _indexes_from_array(arr)


# ---------------------------------------------------------------------------
# size_t (Kaldi writes the request's counts with WriteBasicType<size_t>)


def _write_size_t(w: KaldiWriter, value: int) -> None:
    if w.binary:
        # Kaldi marks unsigned types with a negative size byte: -8 for size_t.
        w.write_raw(b"\xf8" + struct.pack("<Q", int(value)))
    else:
        w.write_raw(f"{int(value)} ")


def _read_size_t(r: KaldiReader) -> int:
    if not r.binary:
        value = r.read_int32()  # parses a decimal word
        if value < 0:
            raise r.error(f"expected a non-negative count, got {value}")
        return value
    if r.pos + 9 > len(r.data):
        raise r.error("unexpected end of file reading a count")
    if r.data[r.pos] != 0xF8:
        raise r.error(f"expected size_t (size byte -8), got size byte {r.data[r.pos]}")
    value = struct.unpack_from("<Q", r.data, r.pos + 1)[0]
    r.pos += 9
    return value


# ---------------------------------------------------------------------------
# IoSpecification / ComputationRequest Read and Write


def write_io_specification(w: KaldiWriter, io: IoSpecification) -> None:
    w.write_token("<IoSpecification>")
    if not w.binary:
        w.write_raw("\n")
    w.write_token(io.name)
    w.write_token("<NumIndexes>")
    _write_size_t(w, len(io.indexes))
    w.write_token("<Indexes>")
    write_index_vector(w, io.indexes)
    w.write_token("<HasDeriv>")
    w.write_bool(io.has_deriv)
    if not w.binary:
        w.write_raw("\n")
    w.write_token("</IoSpecification>")
    if not w.binary:
        w.write_raw("\n")


def read_io_specification(r: KaldiReader) -> IoSpecification:
    r.expect_token("<IoSpecification>")
    name = r.read_token()
    r.expect_token("<NumIndexes>")
    num_indexes = _read_size_t(r)
    r.expect_token("<Indexes>")
    indexes = read_index_vector(r)
    if num_indexes != len(indexes):
        # Kaldi ignores <NumIndexes>; a mismatch means the file was edited badly.
        raise r.error(f"<NumIndexes> {num_indexes} disagrees with {len(indexes)} Indexes "
                      f"for '{name}'")
    r.expect_token("<HasDeriv>")
    has_deriv = r.read_bool()
    r.expect_token("</IoSpecification>")
    return IoSpecification(name, indexes, has_deriv)


def write_request(w: KaldiWriter, request: ComputationRequest) -> None:
    """ComputationRequest::Write, token for token."""
    nl = "" if w.binary else "\n"
    w.write_token("<ComputationRequest>")
    w.write_raw(nl)
    for label, ios in (("Inputs", request.inputs), ("Outputs", request.outputs)):
        w.write_token(f"<Num{label}>")
        _write_size_t(w, len(ios))
        w.write_raw(nl)
        w.write_token(f"<{label}>")
        for io in ios:
            write_io_specification(w, io)
        w.write_raw(nl)
    w.write_token("<NeedModelDerivative>")
    w.write_bool(request.need_model_derivative)
    w.write_token("<StoreComponentStats>")
    w.write_bool(request.store_component_stats)
    w.write_token("</ComputationRequest>")
    w.write_raw(nl)


def read_request(r: KaldiReader) -> ComputationRequest:
    """ComputationRequest::Read (text or binary, as ``r`` says)."""
    r.expect_token("<ComputationRequest>")
    lists: list[list[IoSpecification]] = []
    for label in ("Inputs", "Outputs"):
        r.expect_token(f"<Num{label}>")
        num = _read_size_t(r)
        r.expect_token(f"<{label}>")
        lists.append([read_io_specification(r) for _ in range(num)])
    r.expect_token("<NeedModelDerivative>")
    need_model_derivative = r.read_bool()
    r.expect_token("<StoreComponentStats>")
    store_component_stats = r.read_bool()
    r.expect_token("</ComputationRequest>")
    return ComputationRequest(lists[0], lists[1], need_model_derivative, store_component_stats)


def request_bytes(request: ComputationRequest, binary: bool) -> bytes:
    """The whole file Kaldi would write (binary header included when binary)."""
    w = KaldiWriter(binary)
    write_request(w, request)
    return kaldi_object_bytes(w)


# ---------------------------------------------------------------------------
# The printed form (ComputationRequest::Print)

_PRINT_HEADER = "# Computation request:"
_IO_LINE = re.compile(r"^(input|output)-(\d+): name=(\S+), has-deriv=(true|false), "
                      r"indexes=(.*)$")
_FLAG_LINE = re.compile(r"^(need-model-derivative|store-component-stats): (true|false)$")
_RANGE = re.compile(r"\((-?\d+),(-?\d+)(?::(-?\d+))?(?:,(-?\d+))?\)")


def parse_printed_indexes(text: str, where: str = "<request>") -> list[Index]:
    """The inverse of Kaldi's PrintIndexes: ``[(0,-2:6), (1,4,2)]`` -> Indexes.

    Kaldi shortens lists whose printed form exceeds 200 characters to
    ``first ... last``; those cannot be read back and raise FormatError.
    """
    text = text.strip()
    if text == "[ ]":
        return []
    if " ... " in text:
        raise FormatError("the Index list was shortened with '...' when Kaldi printed it; "
                          "use the request in Kaldi's Write format instead", where)
    if not (text.startswith("[") and text.endswith("]")):
        raise FormatError(f"expected an Index list like [(0,1:5)], got {text[:60]!r}", where)
    body = text[1:-1]
    ranges = _RANGE.findall(body)
    # Everything between the ranges must be ", " separators.
    if _RANGE.sub("", body).replace(",", "").strip():
        raise FormatError(f"bad Index list {text[:60]!r}", where)
    if not ranges:
        raise FormatError(f"bad Index list {text[:60]!r}", where)
    spec = np.array([(int(n), int(t0), int(t1) if t1 else int(t0), int(x) if x else 0)
                     for n, t0, t1, x in ranges], dtype=np.int64).reshape(-1, 4)
    lengths = spec[:, 2] - spec[:, 1] + 1
    if np.any(lengths < 1):
        raise FormatError(f"decreasing t range in Index list {text[:60]!r}", where)
    total = int(lengths.sum())
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
    arr = np.empty((total, 3), dtype=np.int64)
    arr[:, 0] = np.repeat(spec[:, 0], lengths)
    arr[:, 1] = np.repeat(spec[:, 1], lengths) + (np.arange(total) - starts)
    arr[:, 2] = np.repeat(spec[:, 3], lengths)
    return _indexes_from_array(arr)


def parse_printed_request(text: str, where: str = "<request>") -> ComputationRequest:
    """A ComputationRequest from the text of ComputationRequest::Print.

    Text before the `` # Computation request:`` line and after the
    ``store-component-stats`` line (e.g. a printed computation) is ignored.
    """
    lines = text.splitlines()
    try:
        # Kaldi's verbose logs print the request after a "LOG (...) ... is" prefix.
        start = next(i for i, line in enumerate(lines) if line.rstrip().endswith(_PRINT_HEADER))
    except StopIteration:
        raise FormatError(f"no '{_PRINT_HEADER}' line: not a printed ComputationRequest",
                          where) from None
    ios: dict[str, list[IoSpecification]] = {"input": [], "output": []}
    flags: dict[str, bool] = {}
    for num in range(start + 1, len(lines)):
        line = lines[num].strip()
        place = f"{where}:{num + 1}"
        if not line:
            continue
        m = _IO_LINE.match(line)
        if m:
            kind, pos, name, deriv, idx = m.groups()
            if int(pos) != len(ios[kind]):
                raise FormatError(f"expected {kind}-{len(ios[kind])}, got {kind}-{pos}", place)
            ios[kind].append(IoSpecification(name, parse_printed_indexes(idx, place),
                                             deriv == "true"))
            continue
        m = _FLAG_LINE.match(line)
        if m:
            flags[m.group(1)] = m.group(2) == "true"
            if m.group(1) == "store-component-stats":
                break
            continue
        raise FormatError(f"unexpected line in printed ComputationRequest: {line[:60]!r}", place)
    for flag in ("need-model-derivative", "store-component-stats"):
        if flag not in flags:
            raise FormatError(f"printed ComputationRequest has no '{flag}:' line", where)
    return ComputationRequest(ios["input"], ios["output"], flags["need-model-derivative"],
                              flags["store-component-stats"])


# ---------------------------------------------------------------------------
# Files in any of the formats


def request_from_bytes(data: bytes, where: str = "<request>") -> ComputationRequest:
    """Detects the format: binary (``\\0B``), Kaldi text or printed."""
    if data.startswith(BINARY_HEADER):
        r = KaldiReader(data, True, where, pos=2)
        return read_request(r)
    stripped = data.lstrip()
    if stripped.startswith(b"<ComputationRequest>"):
        r = KaldiReader(data, False, where, pos=len(data) - len(stripped))
        return read_request(r)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError("not a ComputationRequest (neither Kaldi's binary or text "
                          "Write format nor its printed form)", where) from None
    return parse_printed_request(text, where)


def read_request_file(rxfilename: str) -> ComputationRequest:
    return request_from_bytes(read_rxfilename(rxfilename), rxfilename)


def write_request_file(wxfilename: str, request: ComputationRequest, binary: bool) -> None:
    write_wxfilename(wxfilename, request_bytes(request, binary))


# ---------------------------------------------------------------------------
# The usual requests


def build_request(nnet: "Nnet", num_sequences: int = 1, frames_per_chunk: int = 50,
                  extra_left_context: int = 0, extra_right_context: int = 0,
                  frame_subsampling_factor: int = 1, need_model_derivative: bool = False,
                  need_input_derivative: bool = False, outputs: Sequence[str] = ("output",),
                  ivector: bool | None = None, store_component_stats: bool = False,
                  context: tuple[int, int] | None = None) -> ComputationRequest:
    """The request Kaldi's tools make for a chunk of a "simple" network.

    For each sequence n: outputs at t = 0, f, ..., f*(frames_per_chunk-1)
    (f = ``frame_subsampling_factor``), the input ``input`` at every t from
    ``-(left context + extra_left_context)`` to the last output t plus the
    right context and ``extra_right_context``, and, when ``ivector`` is True
    (or None and the network has an ``ivector`` input), ``ivector`` at t=0.
    Indexes are ordered by n, then t.  Outputs carry a derivative when any
    derivative is needed; inputs when ``need_input_derivative``.  ``context``
    overrides the network's (left, right) context, which is otherwise found
    with compute_simple_nnet_context.
    """
    from .graph.context import compute_simple_nnet_context

    if num_sequences < 1 or frames_per_chunk < 1 or frame_subsampling_factor < 1:
        raise PynnetError("build_request: num_sequences, frames_per_chunk and "
                          "frame_subsampling_factor must be positive")
    if extra_left_context < 0 or extra_right_context < 0:
        raise PynnetError("build_request: extra context must not be negative")
    if not outputs:
        raise PynnetError("build_request: no outputs")
    for name in outputs:
        node = nnet.get_node_index(name)
        if node == -1 or not nnet.is_output_node(node):
            raise PynnetError(f"build_request: the network has no output node '{name}'")
    input_node = nnet.get_node_index("input")
    if input_node == -1 or not nnet.is_input_node(input_node):
        raise PynnetError("build_request: the network has no input node 'input'")
    ivector_node = nnet.get_node_index("ivector")
    has_ivector = ivector_node != -1 and nnet.is_input_node(ivector_node)
    if ivector is None:
        ivector = has_ivector
    elif ivector and not has_ivector:
        raise PynnetError("build_request: an ivector input was asked for but the network "
                          "has no input node 'ivector'")
    left, right = context if context is not None else compute_simple_nnet_context(nnet)

    f = frame_subsampling_factor
    last_t = f * (frames_per_chunk - 1)
    out_t = np.arange(0, last_t + 1, f, dtype=np.int64)
    in_t = np.arange(-left - extra_left_context, last_t + right + extra_right_context + 1,
                     dtype=np.int64)

    def n_major(ts: np.ndarray) -> list[Index]:
        arr = np.zeros((num_sequences * len(ts), 3), dtype=np.int64)
        arr[:, 0] = np.repeat(np.arange(num_sequences), len(ts))
        arr[:, 1] = np.tile(ts, num_sequences)
        return _indexes_from_array(arr)

    inputs = [IoSpecification("input", n_major(in_t), need_input_derivative)]
    if ivector:
        inputs.append(IoSpecification("ivector", n_major(np.zeros(1, dtype=np.int64)),
                                      need_input_derivative))
    output_deriv = need_model_derivative or need_input_derivative
    outs = [IoSpecification(name, n_major(out_t), output_deriv) for name in outputs]
    return ComputationRequest(inputs, outs, need_model_derivative, store_component_stats)
