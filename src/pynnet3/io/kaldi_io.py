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

Readers work on the whole object in memory (``bytes``, or a read-only memory
map of a model file) so that errors can name the byte offset; models are small
enough for that, and it keeps parsing fast.  A model file is mapped rather
than read (:func:`open_kaldi_object`): the parameters are copied from the map
into their final float32 arrays and the map's pages behind each large
matrix are dropped at once, so reading a 14 MB model costs 14 MB, not the
28 MB of file bytes plus copies.
"""
from __future__ import annotations

import io
import math
import mmap
import os
import re
import stat
import struct
from typing import BinaryIO

import numpy as np

from ..errors import FormatError, UsageError
from .atomic import atomic_write, open_atomic  # noqa: F401  (atomic_write re-exported)

BINARY_HEADER = b"\0B"
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1
_WS = b" \t\n\r\v\f"

# Tokens as written and expected: UTF-8 and one space (memo of the last
# few hundred: the tokens of a format are few; names passed as tokens, such
# as an NnetIo's, repeat too).
_TOKEN_SPACE: dict[str, bytes] = {}


def _token_space(token: str) -> bytes:
    """``token`` coded with its space, remembered if it is a valid token (not
    empty, no whitespace): write_token trusts what it finds here."""
    coded = token.encode("utf-8") + b" "
    if token and not any(c in _WS for c in coded[:-1]):
        if len(_TOKEN_SPACE) >= 512:
            _TOKEN_SPACE.clear()
        _TOKEN_SPACE[token] = coded
    return coded


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


# A binary vector or matrix at least this large read from a memory-mapped
# file gets the map's pages under it dropped once copied (see _release).
_RELEASE_MIN_BYTES = 1 << 18
_PAGE = mmap.PAGESIZE
# A binary array at least this large is written by reference (KaldiWriter).
_VIEW_MIN_BYTES = 1 << 16


class KaldiReader:
    """Sequential reader of Kaldi-serialised data held in memory: ``bytes``
    or a read-only ``mmap`` of a file (indexing, slicing, ``find`` and the
    buffer protocol are all the readers use)."""

    def __init__(self, data: "bytes | mmap.mmap", binary: bool, name: str = "<stream>",
                 pos: int = 0):
        self.data = data
        self.binary = binary
        self.name = name
        self.pos = pos

    def _release(self, start: int, end: int) -> None:
        """Drops the pages of a memory-mapped file between ``start`` and
        ``end`` (the bytes of a vector or matrix just copied into its own
        array) from this process: they stay in the page cache, and would be
        read again from there if touched, but no longer count in our
        resident memory, so a model's parameters are not held twice."""
        if end - start < _RELEASE_MIN_BYTES or not isinstance(self.data, mmap.mmap):
            return
        first = -(-start // _PAGE) * _PAGE
        last = end // _PAGE * _PAGE
        if last > first:
            try:
                self.data.madvise(mmap.MADV_DONTNEED, first, last - first)
            except (AttributeError, OSError, ValueError):   # (no madvise here)
                pass

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
        # The usual case, the token itself and one space, compared at once
        # (what read_token would read and consume there).
        coded = _TOKEN_SPACE.get(token)
        if coded is None:
            coded = _token_space(token)
        end = pos + len(coded)
        if self.data[pos:end] == coded:
            self.pos = end
            return
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
            value = int(word)
        except ValueError:
            raise self.error(f"expected an integer, got {word[:40]!r}") from None
        if not _INT32_MIN <= value <= _INT32_MAX:
            # Kaldi's ReadBasicType<int32> fails on this (stream overflow).
            raise self.error(f"integer {word[:40].decode(errors='replace')} is out of "
                             "int32's range")
        return value

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
            ans = arr.astype(np.float32)
            del arr
            self._release(self.pos, self.pos + nbytes)
            self.pos += nbytes
            return ans
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
            ans = arr.astype(np.float32).reshape(rows, cols)
            del arr
            self._release(self.pos, self.pos + nbytes)
            self.pos += nbytes
            return ans
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
            values = [int(w) for w in body.split()]
        except ValueError:
            raise self.error("bad integer inside integer vector") from None
        if values and not (_INT32_MIN <= min(values) and max(values) <= _INT32_MAX):
            raise self.error("integer out of int32's range inside integer vector")
        return values


class KaldiWriter:
    """Accumulates Kaldi-serialised output in memory (written out atomically).

    A large binary matrix is not copied in: the writer keeps a view of the
    array's own buffer between the bytes written before and after it, and
    :meth:`parts` hands the pieces to a stream one by one (a table writer
    writing a network's output matrix of megabytes held it twice before).
    The array must not change until the writer is done with."""

    def __init__(self, binary: bool):
        self.binary = binary
        self.buf = io.BytesIO()
        # Finished pieces before ``buf``: bytes, or views of arrays' buffers.
        self._parts: list[bytes | memoryview] = []

    def getvalue(self) -> bytes:
        if not self._parts:
            return self.buf.getvalue()
        return b"".join([*self._parts, self.buf.getvalue()])

    def parts(self) -> list[bytes | memoryview]:
        """The serialised object as consecutive pieces (joined, they are
        :meth:`getvalue`), without copying large arrays."""
        return [*self._parts, self.buf.getvalue()]

    def _write_array(self, data: np.ndarray) -> None:
        """Appends a contiguous array's bytes: a view of them when large."""
        if not data.size:      # (memoryview cannot cast an empty shape)
            return
        view = memoryview(data).cast("B")
        if len(view) < _VIEW_MIN_BYTES:
            self.buf.write(view)
            return
        self._parts.append(self.buf.getvalue())
        self._parts.append(view)
        self.buf = io.BytesIO()

    def write_raw(self, text: str | bytes) -> None:
        self.buf.write(text.encode("utf-8") if isinstance(text, str) else text)

    def write_token(self, token: str) -> None:
        coded = _TOKEN_SPACE.get(token)
        if coded is None:
            if not token or any(c in token for c in " \t\n"):
                raise ValueError(f"invalid token {token!r}")
            coded = _token_space(token)
        self.buf.write(coded)

    def write_int32(self, value: int) -> None:
        if self.binary:
            self.buf.write(b"\x04" + struct.pack("<i", int(value)))
        else:
            self.buf.write(f"{int(value)} ".encode())

    def write_float(self, value: float) -> None:
        if self.binary:
            try:
                packed = struct.pack("<f", value)
            except OverflowError:
                # A double beyond float's range becomes +-inf, as C++'s
                # conversion to float gives (struct refuses it).
                packed = struct.pack("<f", math.copysign(math.inf, value))
            self.buf.write(b"\x04" + packed)
        else:
            with np.errstate(over="ignore"):       # beyond float's range: inf, as in C++
                value = float(np.float32(value))
            self.buf.write((format_float(value) + " ").encode())

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
            # (the array's buffer itself: .tobytes() would be one more copy of
            # a matrix that may be megabytes)
            self._write_array(np.ascontiguousarray(mat, dtype="<f8" if double else "<f4"))
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


_OFFSET_SUFFIX = re.compile(r"^(.*):(\d+)$")


def _looks_like_specifier(name: str) -> bool:
    """``ark:x``, ``scp,p:x``, ``b,ark:x`` ...: an rspecifier / wspecifier given
    where a file name is wanted (Kaldi refuses these as file names)."""
    head, colon, _ = name.partition(":")
    if not colon:
        return False
    parts = head.replace(" ", ",").split(",")
    flags = {"b", "t", "o", "no", "p", "np", "s", "ns", "cs", "ncs", "bg", "f", "nf"}
    return any(p in ("ark", "scp") for p in parts) and all(
        p in flags or p in ("ark", "scp") for p in parts)


def classify_rxfilename(rxfilename: str) -> str:
    """Kaldi's ClassifyRxfilename (after stripping surrounding space, which
    pynnet3 tolerates): ``stdin``, ``pipe`` (``cmd |``), ``offset``
    (``file:123``) or ``file``; anything else is a UsageError."""
    name = rxfilename.strip()
    if name in ("", "-"):
        return "stdin"
    if name.startswith("|"):
        raise UsageError(f"invalid rxfilename '{rxfilename}': '| cmd' is an output pipe; "
                         "an input pipe is written 'cmd |'")
    if name.endswith("|"):
        return "pipe"
    if _looks_like_specifier(name):
        raise UsageError(f"invalid rxfilename '{rxfilename}': it looks like an rspecifier "
                         "(a single file name or 'cmd |' is expected here)")
    if "|" in name:
        raise UsageError(f"invalid rxfilename '{rxfilename}': pipe symbol in the wrong "
                         "place (an input pipe is written 'cmd |')")
    m = _OFFSET_SUFFIX.match(name)
    if m and not os.path.exists(name):
        return "offset"
    return "file"


def classify_wxfilename(wxfilename: str) -> str:
    """Kaldi's ClassifyWxfilename (after stripping surrounding space):
    ``stdout``, ``pipe`` (``| cmd``) or ``file``.  What Kaldi calls
    kNoOutput is a UsageError here: a trailing ``|`` (that is an *input*
    pipe), a ``|`` elsewhere, a wspecifier, or ``file:123`` (offsets are for
    reading only).  Without this, ``x.raw |`` became a file of that name."""
    name = wxfilename.strip()
    if name in ("", "-"):
        return "stdout"
    if name.startswith("|"):
        return "pipe"
    if name.endswith("|"):
        raise UsageError(f"invalid wxfilename '{wxfilename}': 'cmd |' is an input pipe; an "
                         "output pipe is written '| cmd' (e.g. '| gzip -c > x.gz')")
    if _looks_like_specifier(name):
        raise UsageError(f"invalid wxfilename '{wxfilename}': it looks like a wspecifier "
                         "(a single file name or '| cmd' is expected here)")
    if _OFFSET_SUFFIX.match(name):
        raise UsageError(f"invalid wxfilename '{wxfilename}': 'file:offset' can only be read")
    if "|" in name:
        raise UsageError(f"invalid wxfilename '{wxfilename}': pipe symbol in the wrong "
                         "place (an output pipe is written '| cmd')")
    return "file"


class PipeStream:
    """A shell command's stdout (``cmd |``) or stdin (``| cmd``) as a binary
    stream, like Kaldi's PipeInputImpl / PipeOutputImpl.

    :meth:`close` waits for the command and returns what ``pclose`` gives in
    Kaldi (the exit status times 256, or the signal number; 0 for success),
    warning as Kaldi does when it is not 0.  Whether that is an error is the
    caller's decision (Kaldi: when the data read was incomplete, when a table
    was read to its end, or always for an output pipe)."""

    def __init__(self, rxfilename: str, writing: bool) -> None:
        import subprocess

        self.name = rxfilename
        command = rxfilename.strip()
        command = command[1:] if writing else command[:-1]
        # os.fsencode: a command holding non-UTF-8 bytes (from argv or a
        # script file, decoded with surrogateescape) runs with its own bytes.
        self._proc = subprocess.Popen(os.fsencode(command), shell=True,
                                      stdin=subprocess.PIPE if writing else None,
                                      stdout=None if writing else subprocess.PIPE)
        stream = self._proc.stdin if writing else self._proc.stdout
        assert stream is not None
        self._stream: BinaryIO | None = stream

    def read(self, size: int = -1) -> bytes:
        assert self._stream is not None
        return self._stream.read(size)

    def write(self, data: bytes) -> int:
        assert self._stream is not None
        return self._stream.write(data)

    def flush(self) -> None:
        if self._stream is not None:
            self._stream.flush()

    def close(self) -> int:
        if self._stream is None:
            return 0
        stream, self._stream = self._stream, None
        try:
            stream.close()
        finally:
            code = self._proc.wait()
        status = code << 8 if code >= 0 else -code
        if status:
            from .. import log

            how = f"exit status {code}" if code >= 0 else f"killed by signal {-code}"
            log.warn(f"Pipe {self.name} had nonzero return status {status} ({how})")
        return status

    def __enter__(self) -> "PipeStream":
        return self

    def __exit__(self, *args: object) -> None:
        self.close()


class _StdStream:
    """stdin / stdout for a table or object: closing it flushes, never closes."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f

    def read(self, size: int = -1) -> bytes:
        return self._f.read(size)

    def write(self, data: bytes) -> int:
        return self._f.write(data)

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> int:
        if self._f.writable():
            self._f.flush()
        return 0


def open_input(rxfilename: str) -> BinaryIO:
    """A readable binary stream for a Kaldi rxfilename: ``-``, ``cmd |``,
    ``file:offset`` or a file.  A pipe's ``close()`` returns its status."""
    import sys

    kind = classify_rxfilename(rxfilename)
    name = rxfilename.strip()
    try:
        if kind == "stdin":
            return _StdStream(sys.stdin.buffer)  # type: ignore[return-value]
        if kind == "pipe":
            return PipeStream(name, writing=False)  # type: ignore[return-value]
        if kind == "offset":
            m = _OFFSET_SUFFIX.match(name)
            assert m is not None
            f = open(m.group(1), "rb")
            f.seek(int(m.group(2)))
            return f
        return open(name, "rb")
    except OSError as e:
        raise FormatError(f"could not open for reading: {e.strerror or e}",
                          where=rxfilename) from None


def open_output(wxfilename: str) -> BinaryIO:
    """A writable binary stream for ``-``, ``| cmd`` or a file (a file is
    written under a temporary name and renamed into place when closed)."""
    import sys

    kind = classify_wxfilename(wxfilename)
    name = wxfilename.strip()
    try:
        if kind == "stdout":
            return _StdStream(sys.stdout.buffer)  # type: ignore[return-value]
        if kind == "pipe":
            return PipeStream(name, writing=True)  # type: ignore[return-value]
        # A file appears complete when closed, or not at all (see io/atomic.py).
        return open_atomic(name)
    except OSError as e:
        raise FormatError(f"could not open for writing: {e.strerror or e}",
                          where=wxfilename) from None


def read_rxfilename(rxfilename: str) -> bytes:
    """All bytes of a Kaldi rxfilename: a path, ``-`` (stdin), ``"cmd |"`` or
    ``file:123`` (from that offset).

    A pipe whose command fails is warned about (as Kaldi's Input::Close
    does); what it produced is returned and the parser decides whether it is
    complete, so a failing command that wrote a whole object is only a
    warning, as in Kaldi, and an incomplete one is an error there.
    """
    f = open_input(rxfilename)
    try:
        data = f.read()
    finally:
        status = f.close()
    if not data and classify_rxfilename(rxfilename) == "pipe":
        detail = f" (it failed: status {status})" if status else ""
        raise FormatError(f"command produced no output{detail}", where=rxfilename)
    return data


class _MappedFile(mmap.mmap):
    """A read-only map of a file, with the methods of ``bytes`` that readers
    use and ``mmap`` lacks."""

    def startswith(self, prefix: bytes, start: int = 0) -> bool:
        return self[start:start + len(prefix)] == prefix


def _map_file(rxfilename: str) -> "mmap.mmap | None":
    """A read-only memory map of a plain, non-empty regular file, or None
    (pipes, stdin, offsets, empty or special files: those are read)."""
    if classify_rxfilename(rxfilename) != "file":
        return None
    try:
        with open(rxfilename.strip(), "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            return _MappedFile(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # (ValueError: an empty file cannot be mapped)
        return None


def open_kaldi_object(rxfilename: str) -> KaldiReader:
    """A reader of a whole Kaldi object file, its binary header detected.  A
    plain file is memory-mapped (see the module docstring), anything else
    read."""
    data: "bytes | mmap.mmap | None" = _map_file(rxfilename)
    if data is None:
        data = read_rxfilename(rxfilename)
    if data[:2] == BINARY_HEADER:
        return KaldiReader(data, True, rxfilename, pos=2)
    return KaldiReader(data, False, rxfilename, pos=0)


def write_wxfilename(wxfilename: str, data: "bytes | list[bytes | memoryview]") -> None:
    """Write bytes to a Kaldi wxfilename: a path (atomically), ``-`` or
    ``"| cmd"`` (a command that exits non-zero is warned about, as Kaldi's
    PipeOutputImpl::Close does).  ``data`` may also be a list of consecutive
    pieces (:func:`kaldi_object_parts`), written one after the other without
    joining them into one copy."""
    import sys

    pieces = [data] if isinstance(data, (bytes, bytearray, memoryview)) else data
    kind = classify_wxfilename(wxfilename)
    if kind == "stdout":
        for piece in pieces:
            sys.stdout.buffer.write(piece)
        sys.stdout.buffer.flush()
        return
    if kind == "pipe":
        f = PipeStream(wxfilename, writing=True)
        try:
            for piece in pieces:
                f.write(piece)
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


def kaldi_object_parts(writer: KaldiWriter) -> list[bytes | memoryview]:
    """:func:`kaldi_object_bytes` as consecutive pieces (the large arrays as
    views of their buffers, see :meth:`KaldiWriter.parts`): joining the pieces
    of a model of megabytes copies it once more (~6 ms for the 6.6 MB bench
    TDNN, mostly page faults of the new buffer)."""
    return [BINARY_HEADER if writer.binary else b"", *writer.parts()]


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
            pair = (int(a), int(b))
            if not (_INT32_MIN <= min(pair) and max(pair) <= _INT32_MAX):
                raise ValueError("out of int32's range")
            out.append(pair)
    except ValueError:
        r.pos = pos
        raise r.error("bad element in pair vector (expected int32 pairs like 1,2)") from None
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
