"""Kaldi's NnetExample ("egs"): named inputs/outputs with Indexes and features.

An NnetExample (nnet3/nnet-example.h) is a list of :class:`NnetIo`, each with
a node name, one Index ``(n, t, x)`` per row and a :class:`GeneralMatrix` of
features (inputs) or targets (outputs).  The on-disk form is

    <Nnet3Eg> <NumIo> 2 <NnetIo> input <I1V> 12 ... FM ... </NnetIo> ... </Nnet3Eg>

where the index vector uses Kaldi's compact encoding (nnet-common.cc
WriteIndexVector): in binary each Index is one signed byte holding the change
in ``t`` when ``n`` and ``x`` are unchanged and the change is under 125 in
magnitude, otherwise byte 127 followed by the three int32s; in text every
Index is ``<I1> n t x``.  Reading and writing here are byte-identical to
Kaldi's in both modes.

Indexes are held as an int32 NumPy array of shape (num_rows, 3), columns
n, t, x, so that merging and filtering are array operations.
"""
from __future__ import annotations

import functools
import re
import struct
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import FormatError
from ..io.kaldi_io import KaldiReader, KaldiWriter
from ..nnet.index import Index
from ..io.general_matrix import GeneralMatrix, MatrixType, SparseMatrix

_WORD = re.compile(rb"\S+")
_ESCAPE = 127
# One escaped Index row as written: escape byte, then (size byte, int32) x 3.
_ESCAPED_INDEX = np.dtype([("esc", "u1"), ("s1", "u1"), ("n", "<i4"), ("s2", "u1"),
                           ("t", "<i4"), ("s3", "u1"), ("x", "<i4")])


def make_indexes(num_rows: int, t_begin: int = 0, t_stride: int = 1) -> np.ndarray:
    """Indexes (0, t_begin + i * t_stride, 0) for i < num_rows, as NnetIo's constructor makes."""
    out = np.zeros((num_rows, 3), dtype=np.int32)
    out[:, 1] = t_begin + t_stride * np.arange(num_rows)
    return out


# ---------------------------------------------------------------------------
# Index vectors (nnet-common.cc WriteIndexVector / ReadIndexVector)


# Egs of one archive mostly share their Index vectors (every eg of
# nnet3-get-egs has the same t-range, every merged minibatch the same n and
# t pattern), so the binary coding is remembered both ways: the bytes last
# read for each vector length (a vector whose bytes are the same decodes to
# the same Indexes, and the bytes say where it ends), and the bytes written
# for recent Index arrays.  Callers get a copy of a remembered array (some
# shift t in place).  Bounded: vectors of up to _MEMO_MAX_ROWS rows, and
# the write memo is emptied when it holds _MEMO_MAX_ENTRIES of them.
_MEMO_MAX_ROWS = 4096
_MEMO_MAX_ENTRIES = 64
_read_memo: dict[int, tuple[bytes, np.ndarray]] = {}
_write_memo: dict[bytes, bytes] = {}


def write_index_vector(w: KaldiWriter, indexes: np.ndarray) -> None:
    indexes = np.asarray(indexes, dtype=np.int64).reshape(-1, 3)
    size = indexes.shape[0]
    w.write_token("<I1V>")
    w.write_int32(size)
    if size == 0:
        return
    if not w.binary:
        w.write_raw("".join(f"<I1> {n} {t} {x} " for n, t, x in indexes.tolist()))
        return
    key = indexes.tobytes() if size <= _MEMO_MAX_ROWS else None
    coded = _write_memo.get(key) if key is not None else None
    if coded is None:
        coded = _index_vector_bytes(indexes)
        if key is not None:
            if len(_write_memo) >= _MEMO_MAX_ENTRIES:
                _write_memo.clear()
            _write_memo[key] = coded
    w.write_raw(coded)


def _index_vector_bytes(indexes: np.ndarray) -> bytes:
    """The binary coding of a non-empty (size x 3) int64 Index array (after
    its size): one int8 t-delta per row, or an escape byte and the whole
    (n, t, x) where n or x changes or t jumps by 125 or more."""
    # Each element is coded relative to the previous one; the first relative to (0, 0, 0).
    prev = np.vstack([np.zeros((1, 3), np.int64), indexes[:-1]])
    dt = indexes[:, 1] - prev[:, 1]
    simple = ((indexes[:, 0] == prev[:, 0]) & (indexes[:, 2] == prev[:, 2])
              & (dt < 125) & (dt > -125))
    if simple.all():
        return dt.astype(np.int8).tobytes()
    deltas = dt.astype(np.int8)
    parts: list[bytes] = []
    start = 0
    for i in np.nonzero(~simple)[0].tolist():
        parts.append(deltas[start:i].tobytes())
        n, t, x = indexes[i].tolist()
        parts.append(struct.pack("<BBiBiBi", _ESCAPE, 4, n, 4, t, 4, x))
        start = i + 1
    parts.append(deltas[start:].tobytes())
    return b"".join(parts)


@functools.lru_cache(maxsize=64)     # (bounded: m comes from the file)
def _group_dtype(m: int) -> np.dtype:
    """One escaped Index row followed by ``m`` int8 t-deltas."""
    return np.dtype(list(_ESCAPED_INDEX.descr) + ([("d", "i1", (m,))] if m else []))


def _read_escaped_tail(data: Any, start: int, size: int) -> tuple[np.ndarray, int] | None:
    """The Index vector at ``start`` and the position after it when it has a
    regular layout: a few t-delta rows, then groups that are each one escaped
    row followed by the same number ``m`` of t-delta rows.  That is what
    merged minibatches hold: n-major egs (``m`` = frames per eg - 1: the first
    eg's rows are deltas from (0, 0, 0), each further eg starts with an
    escape because n changes) and t-major chain minibatches (``m`` = 0, n
    changes from row to row).  Else None, and the row-by-row reader below
    takes over (it reports any damage); it would read exactly these records
    one by one."""
    if size <= 0:
        return None
    escape = bytes([_ESCAPE])
    j = data.find(escape, start, start + size)
    if j < 0:
        return None
    k = j - start                       # leading t-delta rows (no escape byte among them)
    # The group length from the second escape (t-delta bytes are never the
    # escape byte, which ends their range; the escaped row's payload is skipped).
    rest = size - k
    j2 = data.find(escape, j + 16, j + 16 + (rest - 1))
    m = rest - 1 if j2 < 0 else j2 - (j + 16)
    if rest % (m + 1):
        return None
    groups = rest // (m + 1)
    if j + (16 + m) * groups > len(data):
        return None
    rec = np.frombuffer(data, dtype=_group_dtype(m), count=groups, offset=j)
    if not ((rec["esc"] == _ESCAPE) & (rec["s1"] == 4) & (rec["s2"] == 4)
            & (rec["s3"] == 4)).all():
        return None
    out = np.empty((size, 3), dtype=np.int32)
    if k:
        deltas = np.frombuffer(data, dtype=np.int8, count=k, offset=start).astype(np.int64)
        if (np.abs(deltas) >= 125).any():
            return None
        out[:k, 0] = 0
        out[:k, 1] = np.cumsum(deltas)
        out[:k, 2] = 0
    body = out[k:].reshape(groups, m + 1, 3)
    body[:, :, 0] = rec["n"][:, None]
    body[:, :, 2] = rec["x"][:, None]
    t = np.empty((groups, m + 1), dtype=np.int64)
    t[:, 0] = rec["t"]
    if m:
        d = rec["d"].astype(np.int64)
        if (np.abs(d) >= 125).any():
            return None
        t[:, 1:] = d
    body[:, :, 1] = np.cumsum(t, axis=1)
    return out, j + (16 + m) * groups


def read_index_vector(r: KaldiReader) -> np.ndarray:
    """Kaldi's ReadIndexVector: the (size x 3) int32 Indexes (n, t, x) at
    ``r.pos`` (a new array, the caller's to change)."""
    r.expect_token("<I1V>")
    size = r.read_int32()
    if size < 0:
        raise r.error(f"error reading Index vector: size = {size}")
    if not r.binary:
        return _read_index_vector_text(r, size)
    data, start = r.data, r.pos
    memo = _read_memo.get(size)
    if memo is not None and data[start:start + len(memo[0])] == memo[0]:
        r.pos = start + len(memo[0])
        return memo[1].copy()
    ans = _read_index_vector_binary(r, size)
    if 0 < size <= _MEMO_MAX_ROWS:
        if len(_read_memo) >= _MEMO_MAX_ENTRIES and size not in _read_memo:
            _read_memo.clear()
        _read_memo[size] = (bytes(data[start:r.pos]), ans.copy())
    return ans


def _read_index_vector_binary(r: KaldiReader, size: int) -> np.ndarray:
    """The binary Index vector of ``size`` rows at ``r.pos`` (after the size)."""
    data, start = r.data, r.pos
    fast = _read_escaped_tail(data, start, size)
    if fast is not None:
        r.pos = fast[1]
        return fast[0]
    # Rows are one int8 t-delta each, or an escape byte and the full (n, t, x)
    # (16 bytes) where n or x changes or t jumps: a merged minibatch has one
    # escape per example.  The loop below only finds the escapes; the rows
    # are then assembled with NumPy.
    esc_rows: list[int] = []
    esc_vals: list[tuple[int, int, int]] = []
    escape = bytes([_ESCAPE])
    i, pos = 0, start
    bad_escape: tuple[int, str] | None = None
    while i < size:
        j = data.find(escape, pos, pos + (size - i))
        if j < 0:
            j = pos + (size - i)
            if j > len(data):
                bad_escape = (len(data), "end of file while reading vector of Index")
                i += len(data) - pos
                break
        i += j - pos
        pos = j
        if i < size:
            if pos + 16 > len(data):
                bad_escape = (pos, "end of file while reading vector of Index")
                break
            s1, n, s2, t, s3, x = struct.unpack_from("<BiBiBi", data, pos + 1)
            if (s1, s2, s3) != (4, 4, 4):
                bad_escape = (pos, "bad integer size inside Index vector")
                break
            esc_rows.append(i)
            esc_vals.append((n, t, x))
            i += 1
            pos += 16
    # The delta rows read (up to an error, if any): byte offset of row k is
    # start + k + 15 * (escapes before k).
    num_rows = min(i, size)
    is_esc = np.zeros(num_rows + 1, dtype=bool)
    is_esc[esc_rows] = True
    rows = np.arange(num_rows)
    esc_before = np.cumsum(is_esc[:num_rows]) - is_esc[:num_rows]
    delta_rows = rows[~is_esc[:num_rows]]
    raw = np.frombuffer(data, dtype=np.int8)
    deltas = raw[start + delta_rows + 15 * esc_before[delta_rows]].astype(np.int64)
    bad = np.abs(deltas) >= 125
    if bad.any():
        k = int(np.argmax(bad))
        r.pos = start + int(delta_rows[k]) + 15 * int(esc_before[delta_rows[k]])
        raise r.error("unexpected character encountered while reading Index vector")
    if bad_escape is not None:
        r.pos = bad_escape[0]
        raise r.error(bad_escape[1])
    # t: the running sum of the deltas, restarted at each escape's t.
    v = np.zeros(size, dtype=np.int64)
    v[delta_rows] = deltas
    cs = np.cumsum(v)
    seg = np.cumsum(is_esc[:size])            # segment k >= 1 starts at escape k-1
    base = np.zeros((len(esc_rows) + 1, 3), dtype=np.int64)
    offset = np.zeros(len(esc_rows) + 1, dtype=np.int64)
    if esc_rows:
        base[1:] = esc_vals
        offset[1:] = cs[esc_rows]
    out = base[seg]
    out[:, 1] += cs - offset[seg]
    r.pos = pos
    return out.astype(np.int32)


def _read_index_vector_text(r: KaldiReader, size: int) -> np.ndarray:
    words = [m for m in islice(_WORD.finditer(r.data, r.pos), 4 * size)]
    if len(words) < 4 * size:
        r.pos = len(r.data)
        raise r.error("end of file while reading vector of Index")
    toks = [m.group() for m in words]
    if any(tok != b"<I1>" for tok in toks[0::4]):
        bad = next(k for k in range(0, 4 * size, 4) if toks[k] != b"<I1>")
        r.pos = words[bad].start()
        raise r.error(f"expected token <I1>, got {toks[bad][:40]!r}")
    try:
        vals = np.array([int(v) for k, v in enumerate(toks) if k % 4], dtype=np.int64)
    except ValueError:
        raise r.error("bad integer inside Index vector") from None
    if words:
        r.pos = words[-1].end()
    return vals.reshape(size, 3).astype(np.int32)


# ---------------------------------------------------------------------------
# NnetIo / NnetExample


@dataclass
class NnetIo:
    """One named input or output of an example (Kaldi's NnetIo)."""

    name: str
    indexes: np.ndarray                   # int32 (num_rows, 3): n, t, x
    features: GeneralMatrix

    def __post_init__(self) -> None:
        self.indexes = np.asarray(self.indexes, dtype=np.int32).reshape(-1, 3)
        if not isinstance(self.features, GeneralMatrix):
            self.features = GeneralMatrix(self.features)

    @classmethod
    def from_matrix(cls, name: str, t_begin: int, feats, t_stride: int = 1) -> "NnetIo":
        """Kaldi's NnetIo(name, t_begin, feats, t_stride): indexes (0, t_begin + i*t_stride, 0)."""
        g = feats if isinstance(feats, GeneralMatrix) else GeneralMatrix(feats)
        if g.num_rows <= 0:
            raise FormatError(f"NnetIo '{name}' with no rows")
        return cls(name, make_indexes(g.num_rows, t_begin, t_stride), g)

    @classmethod
    def from_posterior(cls, name: str, dim: int, t_begin: int,
                       labels: Sequence[Sequence[tuple[int, float]]], t_stride: int = 1) -> "NnetIo":
        """Kaldi's NnetIo(name, dim, t_begin, labels, t_stride): sparse targets."""
        if len(labels) <= 0:
            raise FormatError(f"NnetIo '{name}' with no rows")
        smat = SparseMatrix.from_pairs(dim, labels)
        return cls(name, make_indexes(len(labels), t_begin, t_stride), GeneralMatrix(smat))

    def index_list(self) -> list[Index]:
        return [Index(n, t, x) for n, t, x in self.indexes.tolist()]

    def write(self, w: KaldiWriter) -> None:
        if self.features.num_rows != self.indexes.shape[0]:
            raise FormatError(f"NnetIo '{self.name}': {self.indexes.shape[0]} indexes but "
                              f"{self.features.num_rows} feature rows")
        w.write_token("<NnetIo>")
        w.write_token(self.name)
        write_index_vector(w, self.indexes)
        self.features.write(w)
        w.write_token("</NnetIo>")

    @staticmethod
    def read(r: KaldiReader) -> "NnetIo":
        r.expect_token("<NnetIo>")
        name = r.read_token()
        indexes = read_index_vector(r)
        features = GeneralMatrix.read(r)
        r.expect_token("</NnetIo>")
        return NnetIo(name, indexes, features)

    def structure_equal(self, other: "NnetIo") -> bool:
        """Kaldi's NnetIoStructureCompare: same name, shape and indexes."""
        return (self.name == other.name and self.features.num_rows == other.features.num_rows
                and self.features.num_cols == other.features.num_cols
                and np.array_equal(self.indexes, other.indexes))


@dataclass
class NnetExample:
    """Kaldi's NnetExample: a list of NnetIo (inputs and outputs)."""

    io: list[NnetIo] = field(default_factory=list)

    def write(self, w: KaldiWriter) -> None:
        if not self.io:
            raise FormatError("writing empty nnet example")
        w.write_token("<Nnet3Eg>")
        w.write_token("<NumIo>")
        w.write_int32(len(self.io))
        for io in self.io:
            io.write(w)
        w.write_token("</Nnet3Eg>")

    @staticmethod
    def read(r: KaldiReader) -> "NnetExample":
        r.expect_token("<Nnet3Eg>")
        r.expect_token("<NumIo>")
        size = r.read_int32()
        if size <= 0 or size > 1000000:
            raise r.error(f"invalid size {size}")
        io = [NnetIo.read(r) for _ in range(size)]
        r.expect_token("</Nnet3Eg>")
        return NnetExample(io)

    def to_bytes(self, binary: bool = True) -> bytes:
        """The example as an archive stores it after ``key `` (with ``\\0B`` in binary)."""
        w = KaldiWriter(binary)
        self.write(w)
        return (b"\0B" if binary else b"") + w.getvalue()

    def compress(self) -> None:
        """Compress every full-matrix NnetIo (sparse and compressed ones are kept)."""
        for io in self.io:
            io.features.compress()

    def get_io(self, name: str) -> NnetIo | None:
        for io in self.io:
            if io.name == name:
                return io
        return None

    def copy(self) -> "NnetExample":
        return NnetExample([NnetIo(io.name, io.indexes.copy(), io.features.copy())
                            for io in self.io])

    def structure_equal(self, other: "NnetExample") -> bool:
        return (len(self.io) == len(other.io)
                and all(a.structure_equal(b) for a, b in zip(self.io, other.io)))

    def structure_key(self) -> tuple:
        """A hashable key equal for examples Kaldi would merge together."""
        return tuple((io.name, io.features.num_rows, io.features.num_cols, io.indexes.tobytes())
                     for io in self.io)


def example_size(eg: NnetExample) -> int:
    """Kaldi's GetNnetExampleSize: the largest number of Indexes of any NnetIo."""
    return max((io.indexes.shape[0] for io in eg.io), default=0)


# ---------------------------------------------------------------------------
# Kaldi's structure hash (NnetExampleStructureHasher), needed to print the
# merge statistics in Kaldi's order.

_M64 = (1 << 64) - 1


def _wrap32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _string_hash(s: str) -> int:
    ans = 0
    for c in s.encode():
        c = c - 256 if c >= 128 else c      # char is signed
        ans = (ans * 7853 + c) & _M64
    return ans


def _index_vector_hash(indexes: np.ndarray) -> int:
    size = indexes.shape[0]
    ans = (1433 + 34949 * size) & _M64
    sel = list(range(min(15, size))) + list(range(15, size, 10))
    for n, t, x in indexes[sel].tolist():
        ans = (ans + _wrap32(n * 1619) + _wrap32(t * 15649) + _wrap32(x * 89809)) & _M64
    return ans


def structure_hash(eg: NnetExample) -> int:
    """Kaldi's NnetExampleStructureHasher (size_t arithmetic, 64-bit)."""
    ans = (len(eg.io) * 35099) & _M64
    for io in eg.io:
        h = (_string_hash(io.name) + _index_vector_hash(io.indexes)
             + 19249 * io.features.num_rows + 14731 * io.features.num_cols) & _M64
        ans = (ans * 19157 + h) & _M64
    return ans


def iter_examples(rspecifier: str) -> Iterator[tuple[str, NnetExample]]:
    """(key, example) pairs of an egs rspecifier (``ark:...``, ``scp:...``)."""
    from ..io.table import SequentialTableReader

    with SequentialTableReader(rspecifier, EXAMPLE_HOLDER) as reader:
        yield from reader


class _ExampleHolder:
    """Table holder for NnetExample (Kaldi's KaldiObjectHolder<NnetExample>)."""

    name = "NnetExample"

    @staticmethod
    def read(r: KaldiReader) -> NnetExample:
        return NnetExample.read(r)

    @staticmethod
    def write(w: KaldiWriter, eg: NnetExample) -> None:
        eg.write(w)


EXAMPLE_HOLDER = _ExampleHolder()

__all__ = ["NnetIo", "NnetExample", "make_indexes", "read_index_vector", "write_index_vector",
           "example_size", "structure_hash", "iter_examples", "EXAMPLE_HOLDER", "MatrixType"]
