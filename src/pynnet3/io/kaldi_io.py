"""Kaldi's serialisation primitives, text and binary, and file opening.

Kaldi objects are written as a sequence of whitespace-terminated tokens
(``<LearningRate>``), basic types and vectors/matrices.  In binary mode a file
starts with ``\\0B`` and

* an ``int32`` is one size byte (4) followed by 4 little-endian bytes;
* a ``float`` is one size byte (4, or 8 for double) followed by the value;
* a ``bool`` is the single character ``T`` or ``F``;
* a float vector is the token ``FV`` (``DV`` for double), an int32 size and the
  raw data; a matrix is ``FM``/``DM``, rows, cols and the data row-major.

In text mode the same values are printed with C++ stream semantics: floats
with 7 significant digits (``%.7g``, what Kaldi's output streams use),
vectors as ``[ a b c ]`` and matrices as ``[`` rows on their own lines ``]``.

Readers work on an in-memory ``bytes`` object so that errors can name the byte
offset; models are small enough for that, and it keeps parsing fast.
"""
from __future__ import annotations

import io
import os
import struct
from typing import BinaryIO

import numpy as np

from ..errors import FormatError
from .atomic import atomic_write  # noqa: F401  (the writers' atomic write; re-exported)

BINARY_HEADER = b"\0B"
_WS = b" \t\n\r\v\f"


def format_float(value: float, precision: int = 7) -> str:
    """C++ ``operator<<`` of a float in default (``%g``) notation."""
    s = "%.*g" % (precision, value)
    return s


def format_float_array(values: np.ndarray) -> str:
    """Space-joined ``%.7g`` formatting of a 1-d float array (Kaldi text)."""
    return " ".join(["%.7g" % v for v in values.tolist()])


def f32(x: float) -> float:
    """Round a Python float to float32, as storing it into a Kaldi BaseFloat does
    (options, learning rates and scales are BaseFloats and are written as such)."""
    return float(np.float32(x))


class KaldiReader:
    """Sequential reader of Kaldi-serialised data held in memory."""

    def __init__(self, data: bytes, binary: bool, name: str = "<stream>", pos: int = 0):
        self.data = data
        self.binary = binary
        self.name = name
        self.pos = pos

    # -- helpers ---------------------------------------------------------
    def error(self, message: str) -> FormatError:
        return FormatError(message, where=f"{self.name} (byte {self.pos})")

    def _skip_ws(self) -> None:
        data, pos, n = self.data, self.pos, len(self.data)
        while pos < n and data[pos] in _WS:
            pos += 1
        self.pos = pos

    def at_eof(self) -> bool:
        self._skip_ws()
        return self.pos >= len(self.data)

    def _read_word(self) -> bytes:
        self._skip_ws()
        data, start, n = self.data, self.pos, len(self.data)
        if start >= n:
            raise self.error("unexpected end of file")
        pos = start
        while pos < n and data[pos] not in _WS:
            pos += 1
        self.pos = pos
        return data[start:pos]

    # -- tokens ----------------------------------------------------------
    def read_token(self) -> str:
        word = self._read_word()
        # Kaldi consumes exactly one whitespace character after a token.
        if self.pos < len(self.data):
            self.pos += 1
        try:
            return word.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"expected a token, got bytes {word[:20]!r}") from None

    def peek_token(self) -> str:
        pos = self.pos
        try:
            return self.read_token()
        finally:
            self.pos = pos

    def peek_char(self) -> str:
        """Kaldi's PeekToken: the first character of the next token after its
        '<' (``"I"`` before ``<IsGradient>``), or '' at the end of the data.
        Readers use it to tell which optional field comes next."""
        pos = self.pos
        try:
            self._skip_ws()
            data, p = self.data, self.pos
            if data[p:p + 1] == b"<":
                p += 1
            return chr(data[p]) if p < len(data) else ""
        finally:
            self.pos = pos

    def expect_token(self, token: str) -> None:
        pos = self.pos
        got = self.read_token()
        if got != token:
            self.pos = pos
            raise self.error(f"expected token {token}, got {got[:40]}")

    def expect_one_or_two_tokens(self, first: str, second: str) -> None:
        """Kaldi's ExpectOneOrTwoTokens: ``first`` is optional."""
        tok = self.read_token()
        if tok == first:
            self.expect_token(second)
        elif tok != second:
            raise self.error(f"expected token {first} or {second}, got {tok[:40]}")

    # -- basic types -----------------------------------------------------
    def read_int32(self) -> int:
        if self.binary:
            if self.pos + 5 > len(self.data):
                raise self.error("unexpected end of file reading int32")
            size = self.data[self.pos]
            if size != 4:
                raise self.error(f"expected int32 (size byte 4), got size byte {size}")
            value = struct.unpack_from("<i", self.data, self.pos + 1)[0]
            self.pos += 5
            return value
        word = self._read_word()
        try:
            return int(word)
        except ValueError:
            raise self.error(f"expected an integer, got {word[:40]!r}") from None

    def read_float(self) -> float:
        """A float or double, returned as a Python float (float32-rounded for float)."""
        if self.binary:
            if self.pos + 1 > len(self.data):
                raise self.error("unexpected end of file reading float")
            size = self.data[self.pos]
            if size == 4:
                if self.pos + 5 > len(self.data):
                    raise self.error("unexpected end of file reading float")
                value = struct.unpack_from("<f", self.data, self.pos + 1)[0]
                self.pos += 5
            elif size == 8:
                if self.pos + 9 > len(self.data):
                    raise self.error("unexpected end of file reading double")
                value = float(np.float32(struct.unpack_from("<d", self.data, self.pos + 1)[0]))
                self.pos += 9
            else:
                raise self.error(f"expected float (size byte 4 or 8), got size byte {size}")
            return value
        word = self._read_word()
        try:
            return float(np.float32(float(word)))
        except ValueError:
            raise self.error(f"expected a number, got {word[:40]!r}") from None

    def read_double(self) -> float:
        if self.binary:
            size = self.data[self.pos] if self.pos < len(self.data) else -1
            if size == 8:
                if self.pos + 9 > len(self.data):
                    raise self.error("unexpected end of file reading double")
                value = struct.unpack_from("<d", self.data, self.pos + 1)[0]
                self.pos += 9
                return value
            if size == 4:
                if self.pos + 5 > len(self.data):
                    raise self.error("unexpected end of file reading float")
                value = struct.unpack_from("<f", self.data, self.pos + 1)[0]
                self.pos += 5
                return value
            raise self.error(f"expected double (size byte 8 or 4), got size byte {size}")
        word = self._read_word()
        try:
            return float(word)
        except ValueError:
            raise self.error(f"expected a number, got {word[:40]!r}") from None

    def read_bool(self) -> bool:
        if not self.binary:
            self._skip_ws()
        if self.pos >= len(self.data):
            raise self.error("unexpected end of file reading bool")
        c = self.data[self.pos:self.pos + 1]
        if c not in (b"T", b"F"):
            raise self.error(f"expected bool (T or F), got {c!r}")
        self.pos += 1
        return c == b"T"

    # -- vectors and matrices -------------------------------------------
    def _read_text_bracketed(self) -> bytes:
        """Text between ``[`` and the matching ``]`` (exclusive)."""
        word = self._read_word()
        if word != b"[":
            if word.startswith(b"[") and len(word) > 1:
                # Tolerate "[1 2 3]" written without spaces.
                self.pos -= len(word) - 1
            else:
                raise self.error(f"expected '[', got {word[:40]!r}")
        end = self.data.find(b"]", self.pos)
        if end < 0:
            raise self.error("unterminated '[' (no closing ']')")
        body = self.data[self.pos:end]
        self.pos = end + 1
        return body

    @staticmethod
    def _parse_floats(body: bytes) -> np.ndarray:
        return np.array(body.split(), dtype=np.float64)

    def read_vector(self) -> np.ndarray:
        """A float vector (``FV``/``DV`` or text), returned as float32."""
        if self.binary:
            tok = self.read_token()
            if tok not in ("FV", "DV"):
                raise self.error(f"expected vector (FV or DV), got {tok[:40]}")
            dim = self.read_int32()
            if dim < 0:
                raise self.error(f"negative vector dimension {dim}")
            dtype = np.dtype("<f4") if tok == "FV" else np.dtype("<f8")
            nbytes = dim * dtype.itemsize
            if self.pos + nbytes > len(self.data):
                raise self.error(f"file truncated inside a vector of dimension {dim}")
            arr = np.frombuffer(self.data, dtype=dtype, count=dim, offset=self.pos)
            self.pos += nbytes
            return arr.astype(np.float32)
        body = self._read_text_bracketed()
        try:
            return self._parse_floats(body).astype(np.float32)
        except ValueError:
            raise self.error("bad number inside vector") from None

    def read_double_vector(self) -> np.ndarray:
        """A vector kept in double precision (e.g. TransitionModel log-probs)."""
        if self.binary:
            tok = self.read_token()
            if tok not in ("FV", "DV"):
                raise self.error(f"expected vector (FV or DV), got {tok[:40]}")
            dim = self.read_int32()
            dtype = np.dtype("<f4") if tok == "FV" else np.dtype("<f8")
            nbytes = dim * dtype.itemsize
            if dim < 0 or self.pos + nbytes > len(self.data):
                raise self.error(f"file truncated inside a vector of dimension {dim}")
            arr = np.frombuffer(self.data, dtype=dtype, count=dim, offset=self.pos)
            self.pos += nbytes
            return arr.astype(np.float64)
        body = self._read_text_bracketed()
        try:
            return self._parse_floats(body)
        except ValueError:
            raise self.error("bad number inside vector") from None

    def read_matrix(self) -> np.ndarray:
        """A float matrix (``FM``/``DM`` or text), returned as float32 C-contiguous."""
        if self.binary:
            tok = self.read_token()
            if tok not in ("FM", "DM"):
                raise self.error(f"expected matrix (FM or DM), got {tok[:40]}")
            rows = self.read_int32()
            cols = self.read_int32()
            if rows < 0 or cols < 0:
                raise self.error(f"bad matrix size {rows} x {cols}")
            dtype = np.dtype("<f4") if tok == "FM" else np.dtype("<f8")
            nbytes = rows * cols * dtype.itemsize
            if self.pos + nbytes > len(self.data):
                raise self.error(f"file truncated inside a {rows} x {cols} matrix")
            arr = np.frombuffer(self.data, dtype=dtype, count=rows * cols, offset=self.pos)
            self.pos += nbytes
            return arr.astype(np.float32).reshape(rows, cols)
        body = self._read_text_bracketed()
        lines = [ln for ln in body.split(b"\n") if ln.strip()]
        if not lines:
            return np.zeros((0, 0), dtype=np.float32)
        try:
            rows = [self._parse_floats(ln) for ln in lines]
        except ValueError:
            raise self.error("bad number inside matrix") from None
        cols = len(rows[0])
        if any(len(r) != cols for r in rows):
            raise self.error("matrix rows have different lengths")
        return np.array(rows, dtype=np.float32).reshape(len(rows), cols)

    def read_int_vector(self) -> list[int]:
        """Kaldi's ReadIntegerVector for int32 elements."""
        if self.binary:
            if self.pos + 5 > len(self.data):
                raise self.error("unexpected end of file reading integer vector")
            size = self.data[self.pos]
            if size != 4:
                raise self.error(f"expected int32 vector (size byte 4), got {size}")
            n = struct.unpack_from("<i", self.data, self.pos + 1)[0]
            self.pos += 5
            if n < 0 or self.pos + 4 * n > len(self.data):
                raise self.error(f"file truncated inside integer vector of size {n}")
            arr = np.frombuffer(self.data, dtype="<i4", count=n, offset=self.pos)
            self.pos += 4 * n
            return arr.astype(np.int64).tolist()
        body = self._read_text_bracketed()
        try:
            return [int(w) for w in body.split()]
        except ValueError:
            raise self.error("bad integer inside integer vector") from None


class KaldiWriter:
    """Accumulates Kaldi-serialised output in memory (written out atomically)."""

    def __init__(self, binary: bool):
        self.binary = binary
        self.buf = io.BytesIO()

    def getvalue(self) -> bytes:
        return self.buf.getvalue()

    def write_raw(self, text: str | bytes) -> None:
        self.buf.write(text.encode("utf-8") if isinstance(text, str) else text)

    def write_token(self, token: str) -> None:
        if not token or any(c in token for c in " \t\n"):
            raise ValueError(f"invalid token {token!r}")
        self.buf.write(token.encode("utf-8") + b" ")

    def write_int32(self, value: int) -> None:
        if self.binary:
            self.buf.write(b"\x04" + struct.pack("<i", int(value)))
        else:
            self.buf.write(f"{int(value)} ".encode())

    def write_float(self, value: float) -> None:
        if self.binary:
            self.buf.write(b"\x04" + struct.pack("<f", value))
        else:
            self.buf.write((format_float(float(np.float32(value))) + " ").encode())

    def write_double(self, value: float) -> None:
        if self.binary:
            self.buf.write(b"\x08" + struct.pack("<d", value))
        else:
            self.buf.write((format_float(float(value)) + " ").encode())

    def write_bool(self, value: bool) -> None:
        self.buf.write(b"T" if value else b"F")
        if not self.binary:
            self.buf.write(b" ")

    def write_vector(self, vec: np.ndarray, double: bool = False) -> None:
        vec = np.asarray(vec).reshape(-1)
        if self.binary:
            self.write_token("DV" if double else "FV")
            self.write_int32(vec.shape[0])
            self.buf.write(np.ascontiguousarray(vec, dtype="<f8" if double else "<f4").tobytes())
        else:
            vals = vec.astype(np.float64 if double else np.float32)
            body = format_float_array(vals)
            self.buf.write((" [ " + body + (" " if body else "") + "]\n").encode())

    def write_matrix(self, mat: np.ndarray, double: bool = False) -> None:
        mat = np.asarray(mat)
        if mat.ndim != 2:
            raise ValueError("write_matrix needs a 2-d array")
        rows, cols = mat.shape
        if self.binary:
            self.write_token("DM" if double else "FM")
            self.write_int32(rows)
            self.write_int32(cols)
            self.buf.write(np.ascontiguousarray(mat, dtype="<f8" if double else "<f4").tobytes())
            return
        if cols == 0:
            self.buf.write(b" [ ]\n")
            return
        vals = mat.astype(np.float64 if double else np.float32)
        parts = [" ["]
        for r in range(rows):
            parts.append("\n  " + format_float_array(vals[r]) + " ")
        parts.append("]\n")
        self.buf.write("".join(parts).encode())

    def write_int_vector(self, values) -> None:
        values = [int(v) for v in values]
        if self.binary:
            self.buf.write(b"\x04" + struct.pack("<i", len(values)))
            self.buf.write(np.asarray(values, dtype="<i4").tobytes())
        else:
            self.buf.write(("[ " + "".join(f"{v} " for v in values) + "]\n").encode())


# ---------------------------------------------------------------------------
# Opening Kaldi rxfilenames / wxfilenames


def read_rxfilename(rxfilename: str) -> bytes:
    """All bytes of a Kaldi rxfilename: a path, ``-`` (stdin) or ``"cmd |"``.

    Kaldi's offset form ``file:123`` is also accepted.
    """
    from kaldiio.utils import open_like_kaldi

    name = rxfilename
    offset = None
    stripped = name.strip()
    if not stripped.endswith("|") and stripped != "-" and ":" in stripped:
        base, _, off = stripped.rpartition(":")
        if off.isdigit() and os.path.exists(base):
            name, offset = base, int(off)
    try:
        f = open_like_kaldi(name, "rb")
    except OSError as e:
        raise FormatError(f"could not open for reading: {e.strerror or e}", where=rxfilename) from None
    try:
        if offset is not None:
            f.seek(offset)
        data = f.read()
    finally:
        if f not in (getattr(__import__("sys").stdin, "buffer", None),):
            try:
                f.close()
            except Exception:
                pass
    if stripped.endswith("|") and not data:
        raise FormatError("command produced no output", where=rxfilename)
    return data


def open_kaldi_object(rxfilename: str) -> KaldiReader:
    """Read a whole Kaldi object file and detect its binary header."""
    data = read_rxfilename(rxfilename)
    if data.startswith(BINARY_HEADER):
        return KaldiReader(data, True, rxfilename, pos=2)
    return KaldiReader(data, False, rxfilename, pos=0)


def write_wxfilename(wxfilename: str, data: bytes) -> None:
    """Write bytes to a Kaldi wxfilename: a path (atomically), ``-`` or ``"| cmd"``."""
    import sys

    stripped = wxfilename.strip()
    if stripped == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return
    if stripped.startswith("|"):
        from kaldiio.utils import open_like_kaldi

        f: BinaryIO = open_like_kaldi(wxfilename, "wb")
        try:
            f.write(data)
        finally:
            f.close()
        return
    path = os.path.abspath(wxfilename)
    if not os.path.isdir(os.path.dirname(path) or "."):
        raise FormatError("could not open for writing: no such directory", where=wxfilename)
    try:
        atomic_write(wxfilename, data)
    except OSError as e:   # e.g. a directory of that name, a full disk
        raise FormatError(f"could not write: {e.strerror or e}", where=wxfilename) from None


def kaldi_object_bytes(writer: KaldiWriter) -> bytes:
    """The complete file: binary header (when binary) followed by the object."""
    return (BINARY_HEADER if writer.binary else b"") + writer.getvalue()


# ---------------------------------------------------------------------------
# Kaldi types some components store besides tokens, vectors and matrices:
# integer-pair vectors (WriteIntegerPairVector / ReadIntegerPairVector for
# int32, the precomputed indexes of DistributeComponent and the statistics
# components) and double-precision matrices (Matrix<double>::Read).


def write_int_pair_vector(w: KaldiWriter, pairs: list[tuple[int, int]]) -> None:
    if w.binary:
        flat = np.asarray(pairs, dtype="<i4").reshape(-1)
        w.write_raw(b"\x04" + struct.pack("<i", len(pairs)) + flat.tobytes())
    else:
        w.write_raw("[ " + "".join(f"{a},{b} " for a, b in pairs) + "]\n")


def read_int_pair_vector(r: KaldiReader) -> list[tuple[int, int]]:
    if r.binary:
        if r.pos + 5 > len(r.data) or r.data[r.pos] != 4:
            raise r.error("expected an int32 pair vector")
        n = struct.unpack_from("<i", r.data, r.pos + 1)[0]
        r.pos += 5
        if n < 0 or r.pos + 8 * n > len(r.data):
            raise r.error(f"file truncated inside a pair vector of size {n}")
        arr = np.frombuffer(r.data, dtype="<i4", count=2 * n, offset=r.pos).reshape(n, 2)
        r.pos += 8 * n
        return [(int(a), int(b)) for a, b in arr]
    data = r.data
    pos = r.pos
    while pos < len(data) and data[pos] in b" \t\n\r":
        pos += 1
    if pos >= len(data) or data[pos:pos + 1] != b"[":
        r.pos = pos
        raise r.error("expected '[' starting a pair vector")
    end = data.find(b"]", pos)
    if end < 0:
        r.pos = pos
        raise r.error("unterminated pair vector")
    out = []
    try:
        for word in data[pos + 1:end].split():
            a, b = word.split(b",")
            out.append((int(a), int(b)))
    except ValueError:
        r.pos = pos
        raise r.error("bad element in pair vector") from None
    r.pos = end + 1
    return out


def read_double_matrix(r: KaldiReader) -> np.ndarray:
    """A matrix kept in double precision (Kaldi's Matrix<double>::Read,
    which also accepts a float matrix)."""
    if r.binary:
        tok = r.read_token()
        if tok not in ("FM", "DM"):
            raise r.error(f"expected matrix (FM or DM), got {tok[:40]}")
        rows, cols = r.read_int32(), r.read_int32()
        dtype = np.dtype("<f4") if tok == "FM" else np.dtype("<f8")
        nbytes = rows * cols * dtype.itemsize
        if rows < 0 or cols < 0 or r.pos + nbytes > len(r.data):
            raise r.error(f"bad or truncated {rows} x {cols} matrix")
        arr = np.frombuffer(r.data, dtype=dtype, count=rows * cols, offset=r.pos)
        r.pos += nbytes
        return arr.astype(np.float64).reshape(rows, cols)
    data, pos = r.data, r.pos
    while pos < len(data) and data[pos] in b" \t\n\r\v\f":
        pos += 1
    if data[pos:pos + 1] != b"[":
        r.pos = pos
        raise r.error("expected '[' at the start of a matrix")
    end = data.find(b"]", pos)
    if end < 0:
        r.pos = pos
        raise r.error("unterminated matrix")
    lines = [ln.split() for ln in data[pos + 1:end].split(b"\n") if ln.strip()]
    r.pos = end + 1
    if not lines:
        return np.zeros((0, 0), dtype=np.float64)
    if any(len(ln) != len(lines[0]) for ln in lines):
        raise r.error("matrix rows have different lengths")
    try:
        return np.array(lines, dtype=np.float64)
    except ValueError:
        raise r.error("bad number inside matrix") from None
