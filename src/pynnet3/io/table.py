"""Kaldi tables: archives and scripts of keyed objects (util/kaldi-table).

kaldiio reads and writes matrices and vectors, but not egs or posteriors, so
this module implements Kaldi's table layer for any object type given a
*holder* (an object with ``read(reader)`` and ``write(writer, obj)`` working on
:class:`~pynnet3.io.kaldi_io.KaldiReader` / ``KaldiWriter``):

* rspecifiers ``ark:file``, ``ark:-``, ``"ark:cmd |"``, ``scp:file`` (script
  lines ``key rxfilename`` where rxfilename may be ``file:offset``, ``cmd |``
  or carry a matrix range ``[r1:r2,c1:c2]``), with Kaldi's option letters
  (``t``, ``b``, ``o``, ``s``, ``cs``, ``p``, ``bg`` ...; accepted, mostly
  without effect here);
* wspecifiers ``ark:file``, ``ark,t:file``, ``ark:-``, ``"ark:| cmd"``,
  ``ark,scp:file.ark,file.scp`` (script lines point at ``file.ark:offset``),
  ``scp:file`` (one file per key, as named in an existing script).

An archive is ``key`` + one space + the object, in binary preceded by
``\\0B``; objects follow each other with no separator.  Archives are read
incrementally (a growing buffer, so pipes and huge archives stream) and
written object by object.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, BinaryIO, Iterator, Protocol

import numpy as np

from ..errors import FormatError, UsageError
from .kaldi_io import KaldiReader, KaldiWriter, open_input, open_output


class Holder(Protocol):
    name: str

    def read(self, r: KaldiReader) -> Any: ...

    def write(self, w: KaldiWriter, obj: Any) -> None: ...


@dataclass
class RspecifierOptions:
    once: bool = False
    sorted: bool = False
    called_sorted: bool = False
    permissive: bool = False
    background: bool = False


@dataclass
class WspecifierOptions:
    binary: bool = True
    flush: bool = False
    permissive: bool = False


def classify_rspecifier(rspecifier: str) -> tuple[str, str, RspecifierOptions]:
    """Kaldi's ClassifyRspecifier: ('ark' | 'scp', rxfilename, options)."""
    pos = rspecifier.find(":")
    if pos < 0 or not rspecifier or rspecifier[-1].isspace():
        raise UsageError(f"invalid rspecifier '{rspecifier}'")
    opts = RspecifierOptions()
    kind = ""
    for part in re.split(r"[, ]", rspecifier[:pos]):
        if part in ("b", "t"):
            continue
        flags = {"o": ("once", True), "no": ("once", False), "p": ("permissive", True),
                 "np": ("permissive", False), "s": ("sorted", True), "ns": ("sorted", False),
                 "cs": ("called_sorted", True), "ncs": ("called_sorted", False),
                 "bg": ("background", True)}
        if part in flags:
            setattr(opts, *flags[part])
        elif part in ("ark", "scp") and not kind:
            kind = part
        else:
            raise UsageError(f"invalid rspecifier '{rspecifier}'")
    if not kind:
        raise UsageError(f"invalid rspecifier '{rspecifier}'")
    return kind, rspecifier[pos + 1:], opts


def classify_wspecifier(wspecifier: str) -> tuple[str, str, str, WspecifierOptions]:
    """Kaldi's ClassifyWspecifier: ('ark' | 'scp' | 'both', archive, script, options)."""
    pos = wspecifier.find(":")
    if pos < 0 or not wspecifier or wspecifier[-1].isspace():
        raise UsageError(f"invalid wspecifier '{wspecifier}'")
    opts = WspecifierOptions()
    kind = ""
    for part in re.split(r"[, ]", wspecifier[:pos]):
        if part == "b":
            opts.binary = True
        elif part == "t":
            opts.binary = False
        elif part == "f":
            opts.flush = True
        elif part == "nf":
            opts.flush = False
        elif part == "p":
            opts.permissive = True
        elif part == "ark" and not kind:
            kind = "ark"
        elif part == "scp" and kind in ("", "ark"):
            kind = "both" if kind == "ark" else "scp"
        else:
            raise UsageError(f"invalid wspecifier '{wspecifier}'")
    after = wspecifier[pos + 1:]
    if kind == "ark":
        return kind, after, "", opts
    if kind == "scp":
        return kind, "", after, opts
    if kind == "both":
        comma = after.find(",")
        if comma < 0:
            raise UsageError(f"invalid wspecifier '{wspecifier}' (expected ark,scp:ark-file,scp-file)")
        return kind, after[:comma], after[comma + 1:], opts
    raise UsageError(f"invalid wspecifier '{wspecifier}'")


# ---------------------------------------------------------------------------
# Opening rxfilenames / wxfilenames


def open_rxfilename(rxfilename: str) -> BinaryIO:
    """A readable binary stream for ``-``, ``cmd |``, ``file:offset`` or a file."""
    return open_input(rxfilename)


def open_wxfilename(wxfilename: str) -> BinaryIO:
    """A writable binary stream for ``-``, ``| cmd`` or a file (Kaldi's
    ClassifyWxfilename: ``x.ark |`` is refused, not a file of that name)."""
    return open_output(wxfilename)


def close_stream(f: Any, name: str) -> None:
    """Close a stream; a pipe's non-zero exit status is an error (as in Kaldi)."""
    try:
        status = f.close()
    except OSError as e:   # e.g. a file's final rename
        raise FormatError(f"could not write: {e.strerror or e}", where=name) from None
    if status:
        raise FormatError(f"pipe had nonzero return status {status}", where=name)


def abort_stream(f: Any) -> None:
    """Give up a stream after an error: a file being written atomically is
    removed (its final name untouched); a pipe or stdout is just closed."""
    abort = getattr(f, "abort", None)
    try:
        if abort is not None:
            abort()
        else:
            f.close()
    except Exception:  # noqa: BLE001 (already failing; the first error is the one to report)
        pass


# ---------------------------------------------------------------------------
# Incremental parsing of a stream


_SPACE = b" \t\n\r\v\f"
_NOT_SPACE = re.compile(rb"[^ \t\n\r\v\f]")
_SPACE_RE = re.compile(rb"[ \t\n\r\v\f]")
_MAX_OBJECT_BYTES = 1 << 28


class _NeedMore(Exception):
    pass


class ObjectStream:
    """Reads keys and objects from a stream through a growing in-memory buffer.

    A parse that runs off the end of the buffer is retried after reading more,
    so objects of any size stream through without reading the whole input.
    """

    # (256 KiB: the buffer, and the copy made when consumed bytes are
    # dropped, count in a run's peak memory; larger objects still read in
    # one go, as the read size follows what the parse needs)
    BLOCK = 1 << 18

    def __init__(self, f: BinaryIO, name: str) -> None:
        self.f = f
        self.name = name
        self.buf = b""
        self.pos = 0
        self.eof = False

    def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = self.f.read(max(self.BLOCK, len(self.buf) - self.pos))
        if not chunk:
            self.eof = True
            return False
        if self.pos > 0 and self.pos >= len(self.buf) // 2:
            # Drop what has been consumed (positions shift; callers re-read self.pos).
            self.buf = self.buf[self.pos:] + chunk
            self.pos = 0
        else:
            self.buf += chunk
        return True

    def read_key(self) -> str | None:
        """The next key, or None at the end; consumes the space after it."""
        while True:
            m = _NOT_SPACE.search(self.buf, self.pos)
            if m is None:
                self.pos = len(self.buf)
                if not self._fill():
                    return None
                continue
            self.pos = m.start()
            end = _SPACE_RE.search(self.buf, self.pos)
            if end is None:
                if self._fill():
                    continue
                raise FormatError(f"invalid archive: key {self.buf[self.pos:self.pos + 40]!r} "
                                  "is not followed by an object", where=self.name)
            # Keys are bytes in Kaldi: surrogateescape keeps any byte (and a
            # writer puts the same bytes back).
            key = self.buf[self.pos:end.start()].decode("utf-8", errors="surrogateescape")
            c = self.buf[end.start():end.start() + 1]
            if c not in (b" ", b"\t", b"\n"):
                raise FormatError(f"invalid archive file format: expected space after key {key}",
                                  where=self.name)
            self.pos = end.start() + (0 if c == b"\n" else 1)
            return key

    def read_object(self, holder: Holder) -> Any:
        """One object at the current position (``\\0B`` marks binary)."""
        while len(self.buf) - self.pos < 2 and self._fill():
            pass
        while True:
            binary = self.buf[self.pos:self.pos + 2] == b"\0B"
            r = KaldiReader(self.buf, binary, self.name, self.pos + (2 if binary else 0))
            try:
                obj = holder.read(r)
                if r.pos >= len(self.buf) and not self.eof:
                    raise _NeedMore()
            except Exception as e:
                if (not self.eof and len(self.buf) - self.pos < _MAX_OBJECT_BYTES
                        and self._fill()):
                    continue
                if isinstance(e, _NeedMore):
                    self.pos = r.pos
                    return obj
                if isinstance(e, FormatError):
                    raise
                raise FormatError(f"error reading {holder.name}: {type(e).__name__}: {e}",
                                  where=f"{self.name} (byte {r.pos})") from None
            self.pos = r.pos
            return obj

    def close(self, strict: bool = True) -> None:
        """Close (a failing pipe warns, as Kaldi's Input::Close).  With
        ``strict``, a pipe that failed is an error once its output was read to
        the end, as Kaldi's table readers' Close(): the data may be incomplete.
        (If we stopped early the writer may just have got SIGPIPE.)"""
        status = self.f.close()
        if status and self.eof and strict:
            raise FormatError(f"error detected closing archive: the command failed "
                              f"(status {status}), so its output may be incomplete",
                              where=self.name)


# ---------------------------------------------------------------------------
# Readers


def _parse_range(rxfilename: str) -> tuple[str, str]:
    """Split ``file:offset[range]`` into (file:offset, range); range may be ''."""
    if rxfilename.endswith("]") and "[" in rxfilename:
        base, _, rng = rxfilename.rpartition("[")
        if base and len(rng) > 1:
            return base, rng[:-1]
        raise FormatError(f"bad range specifier in '{rxfilename}'")
    return rxfilename, ""


def read_object_from(rxfilename: str, holder: Holder) -> Any:
    """One object from an rxfilename (a script entry), with an optional range."""
    name, rng = _parse_range(rxfilename.strip())
    stream = ObjectStream(open_rxfilename(name), name)
    try:
        obj = stream.read_object(holder)
    finally:
        # A whole object was read: a failing command is only warned about
        # (Kaldi ignores the status of a script entry's input).
        stream.close(strict=False)
    if rng:
        extract = getattr(holder, "extract_range", None)
        if extract is None:
            raise FormatError(f"range specifiers are not supported for {holder.name}",
                              where=rxfilename)
        obj = extract(obj, rng)
    return obj


_SCRIPT_SPACE = re.compile(r"[ \t\n\r\f\v]+")   # Kaldi's SplitStringOnFirstSpace


def read_script_file(rxfilename: str, permissive: bool = False) -> list[tuple[str, str]]:
    """Kaldi's ReadScriptFile: lines ``key rxfilename``.  Keys and file names
    are bytes in Kaldi (kept with surrogateescape).  A bad line, or a pipe
    that failed, is an error; with ``permissive`` a warning, and the lines
    before it are used (Kaldi's ``p`` option)."""
    from .. import log

    f = open_rxfilename(rxfilename)
    try:
        data = f.read()
    finally:
        status = f.close()
    if status:
        message = f"command failed (status {status}) reading the script file"
        if not permissive:
            raise FormatError(message, where=rxfilename)
        log.warn(f"{rxfilename}: {message}; ignoring it as permissive mode was specified")
    out = []
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    if lines[-1] == "":
        lines.pop()     # the newline ending the last line
    for num, line in enumerate(lines, start=1):
        fields = _SCRIPT_SPACE.split(line.strip(" \t\n\r\f\v"), 1)
        if len(fields) == 2 and fields[0] and fields[1]:
            out.append((fields[0], fields[1]))
        else:
            message = (f"invalid line {num} in script file (expected 'key rxfilename'): "
                       f"{line[:80]!r}")
            if not permissive:
                raise FormatError(message, where=rxfilename)
            log.warn(f"{rxfilename}: {message}; stopping there as permissive mode was specified")
            break
    return out


def _load_failed(rspecifier: str, key: str, rx: str, e: Exception) -> FormatError:
    return FormatError(f"failed to load the object for key {key} from {rx}: {e} (to skip "
                       "unreadable entries, add the permissive option: 'scp,p:...')",
                       where=rspecifier)


class SequentialTableReader:
    """Iterate over (key, object) of an rspecifier, like Kaldi's SequentialTableReader."""

    def __init__(self, rspecifier: str, holder: Holder) -> None:
        self.rspecifier = rspecifier
        self.holder = holder
        self.kind, self.filename, self.opts = classify_rspecifier(rspecifier)
        self._stream: ObjectStream | None = None

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        from .. import log

        permissive = self.opts.permissive
        if self.kind == "scp":
            for key, rx in read_script_file(self.filename, permissive):
                try:
                    obj = read_object_from(rx, self.holder)
                except (FormatError, UsageError) as e:
                    # Kaldi's "p": an entry that cannot be read is as if absent.
                    if not permissive:
                        raise _load_failed(self.rspecifier, key, rx, e) from None
                    log.warn(f"failed to load the object for key {key} from {rx}: {e}; "
                             "skipping it as permissive mode was specified")
                    continue
                yield key, obj
            return
        self._stream = ObjectStream(open_rxfilename(self.filename), self.filename)
        failed = True
        try:
            while True:
                try:
                    key = self._stream.read_key()
                    if key is None:
                        break
                    obj = self._stream.read_object(self.holder)
                except FormatError as e:
                    # Kaldi's "p": a corrupt entry ends the archive, with a warning.
                    if not permissive:
                        raise
                    log.warn(f"object read failed, reading archive {self.filename}: {e}; "
                             "stopping there as permissive mode was specified")
                    break
                yield key, obj
            failed = False
        finally:
            stream, self._stream = self._stream, None
            if stream is not None:
                # After an error, closing must not replace that error.
                stream.close(strict=not (failed or permissive))

    def close(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            stream.close(strict=not self.opts.permissive)

    def __enter__(self) -> "SequentialTableReader":
        return self

    def __exit__(self, *args: Any) -> None:
        self.close()


class RandomAccessTableReader:
    """Look objects up by key (Kaldi's RandomAccessTableReader).

    An archive is read forward as far as needed and what was read is kept;
    a script is indexed and each object loaded when asked for.
    """

    def __init__(self, rspecifier: str, holder: Holder) -> None:
        self.rspecifier = rspecifier
        self.holder = holder
        self.kind, self.filename, self.opts = classify_rspecifier(rspecifier)
        self._cache: dict[str, Any] = {}
        self._script: dict[str, str] = {}
        self._iter: Iterator[tuple[str, Any]] | None = None
        self._reader: SequentialTableReader | None = None
        if self.kind == "scp":
            entries = read_script_file(self.filename, self.opts.permissive)
            for key, rx in entries:
                if key in self._script:
                    # As Kaldi's RandomAccessTableReader: which one is meant?
                    raise FormatError(f"script file contains duplicate key: {key}",
                                      where=self.filename)
                self._script[key] = rx
        else:
            self._reader = SequentialTableReader(rspecifier, holder)
            self._iter = iter(self._reader)

    def _read_until(self, key: str) -> bool:
        while self._iter is not None:
            try:
                k, obj = next(self._iter)
            except StopIteration:
                self._iter = None
                break
            if k in self._cache:
                # Kaldi's RandomAccessTableReader: which of the two would be
                # meant is unknown, so this is an error (a sequential reader
                # just yields both).
                raise FormatError(f"duplicate key {k} in archive (a random-access "
                                  "table needs unique keys)", where=self.filename)
            self._cache[k] = obj
            if k == key:
                return True
        return key in self._cache

    def _load(self, key: str) -> Any:
        """The object of script entry ``key`` (the last one loaded is kept)."""
        if key not in self._cache:
            self._cache = {key: read_object_from(self._script[key], self.holder)}
        return self._cache[key]

    def has_key(self, key: str) -> bool:
        if self.kind == "scp":
            if key not in self._script:
                return False
            if not self.opts.permissive:
                return True
            # Kaldi's "p": a key whose entry cannot be read is absent.
            try:
                self._load(key)
            except (FormatError, UsageError) as e:
                from .. import log

                log.warn(f"failed to load the object for key {key} from {self._script[key]}: "
                         f"{e}; treating the key as absent as permissive mode was specified")
                return False
            return True
        return key in self._cache or self._read_until(key)

    def value(self, key: str) -> Any:
        if self.kind == "scp":
            if key not in self._script:
                raise FormatError(f"no key {key} in table", where=self.rspecifier)
            try:
                return self._load(key)
            except (FormatError, UsageError) as e:
                raise _load_failed(self.rspecifier, key, self._script[key], e) from None
        if not self.has_key(key):
            raise FormatError(f"no key {key} in table", where=self.rspecifier)
        return self._cache[key]

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
            self._iter = None

    def __enter__(self) -> "RandomAccessTableReader":
        return self

    def __exit__(self, *args: Any) -> None:
        self.close()


# ---------------------------------------------------------------------------
# Writer


def is_token(s: str) -> bool:
    """Kaldi's IsToken: no space or control character; other bytes beyond
    ASCII are fine (here escaped bytes that are not UTF-8, except 0xff)."""
    if s.isascii():     # (the usual key: '!' to '~' only, checked at C speed)
        return s.isprintable() and bool(s) and " " not in s
    return bool(s) and all((c.isprintable() and not c.isspace())
                           or "\udc80" <= c < "\udcff" for c in s)


class TableWriter:
    """Write (key, object) pairs to a wspecifier, like Kaldi's TableWriter."""

    def __init__(self, wspecifier: str, holder: Holder) -> None:
        self.wspecifier = wspecifier
        self.holder = holder
        self.kind, self.archive_name, self.script_name, self.opts = classify_wspecifier(wspecifier)
        self._archive: BinaryIO | None = None
        self._script: BinaryIO | None = None
        self._script_map: dict[str, str] = {}
        self._offset = 0
        if self.kind in ("ark", "both"):
            self._archive = open_wxfilename(self.archive_name)
        if self.kind == "both":
            try:
                self._script = open_wxfilename(self.script_name)
            except BaseException:
                self.abort()
                raise
        if self.kind == "scp":
            self._script_map = dict(read_script_file(self.script_name))

    def write(self, key: str, obj: Any) -> None:
        if not is_token(key):
            raise FormatError(f"using invalid key '{key}'", where=self.wspecifier)
        w = KaldiWriter(self.opts.binary)
        self.holder.write(w, obj)
        # Written in parts, not joined: joining copies the whole object (a
        # large matrix is a view of the caller's array; see KaldiWriter).
        prefix = b"\0B" if self.opts.binary else b""
        body = w.parts()
        if self.kind == "scp":
            if key not in self._script_map:
                raise FormatError(f"no entry for key {key} in script file", where=self.script_name)
            f = open_wxfilename(self._script_map[key])
            try:
                f.write(prefix)
                for part in body:
                    f.write(part)
            except BaseException:
                abort_stream(f)
                raise
            close_stream(f, self._script_map[key])
            return
        assert self._archive is not None
        head = key.encode("utf-8", "surrogateescape") + b" "
        self._archive.write(head)
        self._offset += len(head)
        if self._script is not None:
            self._script.write(f"{key} {self.archive_name}:{self._offset}\n".encode(
                "utf-8", "surrogateescape"))
        self._archive.write(prefix)
        for part in body:
            self._archive.write(part)
        self._offset += len(prefix) + sum(len(part) for part in body)
        if self.opts.flush:
            self._archive.flush()

    def close(self) -> None:
        """Finish: an archive (then its script) written to a file appears at
        its name now, complete (a no-op after close or abort)."""
        try:
            for attr, name in (("_archive", self.archive_name), ("_script", self.script_name)):
                f = getattr(self, attr)
                if f is not None:
                    setattr(self, attr, None)
                    f.flush()
                    close_stream(f, name)      # stdout's wrapper is never really closed
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Give up after an error: files being written are removed, and their
        final names left as they were (pipes and stdout are just closed)."""
        for attr in ("_archive", "_script"):
            f = getattr(self, attr)
            if f is not None:
                setattr(self, attr, None)
                abort_stream(f)

    def __enter__(self) -> "TableWriter":
        return self

    def __exit__(self, exc_type: Any, *args: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


# ---------------------------------------------------------------------------
# Matrix holders (features, iVectors, dense targets)


def _parse_matrix_range(rng: str, num_rows: int, num_cols: int) -> tuple[int, int, int, int]:
    """Kaldi's ParseMatrixRangeSpecifier: ``r1:r2`` or ``r1:r2,c1:c2`` (inclusive)."""
    parts = rng.split(",")
    if len(parts) not in (1, 2):
        raise FormatError(f"could not parse range specifier '{rng}'")
    out = []
    for part, size in zip(parts + ([":"] if len(parts) == 1 else []), (num_rows, num_cols)):
        if part.strip() in (":", ""):
            out += [0, size - 1]
            continue
        try:
            a, b = (int(v) for v in part.split(":"))
        except ValueError:
            raise FormatError(f"could not parse range specifier '{rng}'") from None
        # Kaldi allows the row end to exceed the matrix by up to 3 (rounding of segments).
        if a < 0 or a > b or b >= size + (3 if len(out) == 0 else 0):
            raise FormatError(f"invalid range specifier '{rng}' for a {num_rows} x {num_cols} matrix")
        out += [a, min(b, size - 1)]
    return out[0], out[1], out[2], out[3]


class GeneralMatrixHolder:
    """Kaldi's GeneralMatrix holder: keeps compressed / sparse matrices as they are."""

    name = "GeneralMatrix"

    @staticmethod
    def read(r: KaldiReader):
        from .general_matrix import GeneralMatrix

        return GeneralMatrix.read(r)

    @staticmethod
    def write(w: KaldiWriter, obj) -> None:
        obj.write(w)

    @staticmethod
    def extract_range(obj, rng: str):
        from .general_matrix import GeneralMatrix

        r1, r2, c1, c2 = _parse_matrix_range(rng, obj.num_rows, obj.num_cols)
        return GeneralMatrix(obj.to_matrix()[r1:r2 + 1, c1:c2 + 1].copy())


class MatrixHolder:
    """Kaldi's BaseFloatMatrix holder: a float32 NumPy matrix."""

    name = "Matrix"

    @staticmethod
    def read(r: KaldiReader):
        # A full matrix (features, network outputs) is read without the
        # GeneralMatrix module, a quarter megabyte of memory once imported.
        if r.binary:
            plain = r.data[r.pos:r.pos + 1] not in (b"C", b"S")
        else:
            r._skip_ws()
            plain = r.data[r.pos:r.pos + 1] != b"r"
        if plain:
            return np.ascontiguousarray(r.read_matrix(), dtype=np.float32)
        from .general_matrix import GeneralMatrix, MatrixType

        g = GeneralMatrix.read(r)
        if g.type == MatrixType.SPARSE:
            raise r.error("expected a matrix, got a sparse matrix")
        return g.to_matrix()

    @staticmethod
    def write(w: KaldiWriter, obj) -> None:
        w.write_matrix(obj)

    @staticmethod
    def extract_range(obj, rng: str):
        r1, r2, c1, c2 = _parse_matrix_range(rng, obj.shape[0], obj.shape[1])
        return obj[r1:r2 + 1, c1:c2 + 1].copy()


GENERAL_MATRIX_HOLDER = GeneralMatrixHolder()
MATRIX_HOLDER = MatrixHolder()


class VectorHolder:
    """Kaldi's BaseFloatVector holder: a float32 NumPy vector (``FV``/``DV``/text)."""

    name = "Vector"

    @staticmethod
    def read(r: KaldiReader):
        return r.read_vector()

    @staticmethod
    def write(w: KaldiWriter, obj) -> None:
        w.write_vector(obj)


class TokenHolder:
    """Kaldi's TokenHolder (e.g. utt2spk archives): one whitespace-free token per key."""

    name = "Token"

    @staticmethod
    def read(r: KaldiReader) -> str:
        # Bytes, like keys (a speaker id is looked up as a key).
        word = r._read_word()
        if r.pos < len(r.data):
            r.pos += 1
        return word.decode("utf-8", "surrogateescape")

    @staticmethod
    def write(w: KaldiWriter, obj: str) -> None:
        if not is_token(obj):
            raise FormatError(f"invalid token '{obj}'")
        w.write_raw((obj + "\n").encode("utf-8", "surrogateescape"))


VECTOR_HOLDER = VectorHolder()
TOKEN_HOLDER = TokenHolder()


_SIZED_INT32 = np.dtype([("size", "u1"), ("value", "<i4")])


class Int32VectorHolder:
    """Kaldi's BasicVectorHolder<int32> (alignments, phone sequences): a list
    of ints.  Text: the values on one line, each followed by a space, then a
    newline; binary: an int32 count, then each value as an int32."""

    name = "Int32Vector"

    @staticmethod
    def read(r: KaldiReader) -> list[int]:
        if r.binary:
            n = r.read_int32()
            if n < 0 or r.pos + 5 * n > len(r.data):
                raise r.error(f"bad or truncated integer vector of size {n}")
            # n records of (size byte 4, little-endian int32).
            rec = np.frombuffer(r.data, dtype=_SIZED_INT32, count=n, offset=r.pos)
            if n and not np.all(rec["size"] == 4):
                raise r.error("expected int32 elements (size byte 4) in integer vector")
            r.pos += 5 * n
            return rec["value"].astype(np.int64).tolist()
        # Text: the rest of the line (a line without a newline ends at the end of the data).
        end = r.data.find(b"\n", r.pos)
        end = len(r.data) if end < 0 else end
        line = r.data[r.pos:end]
        r.pos = min(end + 1, len(r.data))
        try:
            return [int(w) for w in line.split()]
        except ValueError:
            raise r.error(f"could not interpret line as integers: {line[:60]!r}") from None

    @staticmethod
    def write(w: KaldiWriter, obj) -> None:
        values = [int(v) for v in obj]
        if w.binary:
            w.write_int32(len(values))
            for v in values:
                w.write_int32(v)
        else:
            w.write_raw("".join(f"{v} " for v in values) + "\n")


INT32_VECTOR_HOLDER = Int32VectorHolder()


class Int32PairVectorHolder:
    """Kaldi's BasicPairVectorHolder<int32> (e.g. ``ali-to-phones --write-lengths``
    output): a list of (int, int) pairs.  Text: ``a b ; c d ; ...`` on one line;
    binary: an int32 count, then each pair as two int32s."""

    name = "Int32PairVector"

    @staticmethod
    def read(r: KaldiReader) -> list[tuple[int, int]]:
        if r.binary:
            n = r.read_int32()
            if n < 0 or r.pos + 10 * n > len(r.data):
                raise r.error(f"bad or truncated pair vector of size {n}")
            rec = np.frombuffer(r.data, dtype=_SIZED_INT32, count=2 * n, offset=r.pos)
            if n and not np.all(rec["size"] == 4):
                raise r.error("expected int32 elements (size byte 4) in pair vector")
            r.pos += 10 * n
            v = rec["value"].astype(np.int64).reshape(n, 2)
            return [(int(a), int(b)) for a, b in v]
        end = r.data.find(b"\n", r.pos)
        end = len(r.data) if end < 0 else end
        line = r.data[r.pos:end].decode("latin-1")
        r.pos = min(end + 1, len(r.data))
        out: list[tuple[int, int]] = []
        for part in line.split(";"):
            words = part.split()
            if not words and not out and line.strip() == "":
                break
            if len(words) != 2:
                raise r.error(f"Wrong input format, reading vector<pair<?> >; got {len(words)} "
                              "elements, expected 2.")
            try:
                out.append((int(words[0]), int(words[1])))
            except ValueError:
                raise r.error(f"could not interpret {part.strip()!r} as a pair of integers") from None
        return out

    @staticmethod
    def write(w: KaldiWriter, obj) -> None:
        pairs = [(int(a), int(b)) for a, b in obj]
        if w.binary:
            w.write_int32(len(pairs))
            for a, b in pairs:
                w.write_int32(a)
                w.write_int32(b)
        else:
            w.write_raw(" ; ".join(f"{a} {b}" for a, b in pairs) + (" \n" if pairs else "\n"))


INT32_PAIR_VECTOR_HOLDER = Int32PairVectorHolder()
