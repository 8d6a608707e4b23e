"""Atomic file writes: a file appears at its name complete or not at all.

Models, computation-cache entries and ``ark:file`` / ``ark,scp:`` archives
are written to a temporary file beside the final name, which is renamed over
it (``os.replace``) when the writer finishes successfully.  A writer that
fails removes its temporary file; one that is killed (SIGKILL, power loss)
leaves it behind under a recognisable name,

    ``.<name>.pynnet3-tmp.<host>.<pid>.<random>``

and the next write to the same name removes such leftovers: those of a
process of this host (and PID namespace) that is no longer running, and any
older than
:data:`STALE_SECONDS` (a writer on another host, whose pid cannot be
checked here).  A live writer's temporary file is never touched, so two
processes writing the same name still each replace it whole.

What is at the final name decides how it is written (:func:`open_atomic`):

* nothing, or a regular file: atomically, as above (the new file gets the
  old one's permission bits, or what a plain ``open()`` would give it);
* a symbolic link: its target, atomically where that is a regular file (or
  does not exist yet), so the link stays a link as with Kaldi's ofstream;
* a device, FIFO or socket (``/dev/null``, ``/dev/stdout``, a named pipe),
  or anything under ``/dev`` or ``/proc``: opened and streamed to as it is,
  as Kaldi does (never renamed over);
* a directory: :class:`IsADirectoryError`.

``replace=True`` (the computation cache) instead always replaces whatever
directory entry is at the name, never following a link: an entry that has
become a symbolic link, FIFO or device is swapped for a regular file.
"""
from __future__ import annotations

import errno
import os
import re
import stat
import time
import weakref
from typing import BinaryIO, Sequence

from .hashing import sha1

__all__ = ["AtomicFile", "HOST_TAG", "STALE_SECONDS", "TEMP_MARKER", "atomic_write", "open_atomic",
           "remove_stale_temps", "temp_prefix"]

TEMP_MARKER = ".pynnet3-tmp."
# A leftover temporary file this old is removed whoever wrote it (a writer
# keeps its file's modification time fresh while it writes).
STALE_SECONDS = 24 * 3600
# Names longer than this (in bytes) are shortened in temporary names, which
# must stay under the file system's 255-byte limit.
_MAX_NAME_IN_TEMP = 160
_SPECIAL_TREES = ("/dev/", "/proc/")


def _host_name() -> str:
    # os.uname() is the same gethostname(2) answer without loading the
    # socket module.
    if hasattr(os, "uname"):
        return os.uname().nodename
    import socket

    return socket.gethostname()


def _host_tag() -> str:
    """This host's name and, where there is one, the PID namespace's number:
    a pid is checked only against processes that this process can see
    (containers on one host may share a name and a file system)."""
    name = re.sub(r"[^A-Za-z0-9-]", "-", _host_name() or "host")[:24] or "host"
    try:
        return f"{name}-{os.stat('/proc/self/ns/pid').st_ino:x}"
    except OSError:
        return name


HOST_TAG = _host_tag()


def temp_prefix(name: str) -> str:
    """The start of the temporary names of a file named ``name`` (a base name)."""
    if len(name.encode("utf-8", "surrogateescape")) > _MAX_NAME_IN_TEMP:
        digest = sha1(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        name = name[:64] + "~" + digest
    return "." + name + TEMP_MARKER


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return True  # (not ours to judge)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # EPERM: somebody else's live process
        return True
    return True


def remove_stale_temps(directory: str, name: str, now: float | None = None) -> int:
    """Remove the temporary files of ``name`` in ``directory`` that a killed
    writer left behind (see the module docstring); returns how many."""
    prefix = temp_prefix(name)
    now = time.time() if now is None else now
    removed = 0
    try:
        entries = [e for e in os.scandir(directory) if e.name.startswith(prefix)]
    except OSError:
        return 0
    for entry in entries:
        parts = entry.name[len(prefix):].split(".")
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        ours = len(parts) == 3 and parts[0] == HOST_TAG and parts[1].isdigit()
        dead = ours and not _pid_alive(int(parts[1]))
        if dead or now - st.st_mtime > STALE_SECONDS:
            try:
                os.unlink(entry.path)
                removed += 1
            except OSError:
                pass
    return removed


def _new_file_mode() -> int:
    """0o666 less the process's umask (read once): what open() would create."""
    global _MODE
    if _MODE is None:
        mask = os.umask(0o022)
        os.umask(mask)
        _MODE = 0o666 & ~mask
    return _MODE


_MODE: int | None = None


def _write_all(f: BinaryIO, data: "bytes | Sequence[bytes | memoryview]") -> None:
    """Write ``data`` (bytes, or consecutive pieces: bytes and byte views,
    see KaldiWriter.parts) to ``f`` in chunks (a seam for tests of failed
    writes)."""
    chunk = 1 << 20
    for piece in ((data,) if isinstance(data, (bytes, bytearray, memoryview)) else data):
        view = memoryview(piece)
        for start in range(0, len(view), chunk):
            f.write(view[start:start + chunk])


def _is_dir_error(path: str) -> IsADirectoryError:
    return IsADirectoryError(errno.EISDIR, "is a directory", path)


def _plan(path: str, replace: bool) -> tuple[bool, str, int | None]:
    """(write atomically?, the path to write, permission bits of the file
    replaced or None) for a write to ``path``."""
    if path.endswith(os.sep) or path.endswith("/"):
        # "dir/" names a directory, never a file (open() refuses it too).
        if os.path.isdir(path):
            raise _is_dir_error(path)
        raise FileNotFoundError(errno.ENOENT, "no such directory", path)
    target = os.path.abspath(path)
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise _is_dir_error(path)
    if replace:
        return True, target, None
    if target.startswith(_SPECIAL_TREES):
        return False, target, None
    if st is not None and stat.S_ISLNK(st.st_mode):
        target = os.path.realpath(target)
        if target.startswith(_SPECIAL_TREES):
            return False, target, None
        try:
            st = os.stat(target)
        except FileNotFoundError:
            st = None     # a dangling link: its target is created
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise _is_dir_error(path)
    if st is None:
        return True, target, None
    if stat.S_ISREG(st.st_mode):
        return True, target, stat.S_IMODE(st.st_mode) & 0o777
    return False, target, None     # device, FIFO, socket: streamed to as Kaldi does


def _create_temp(target: str) -> tuple[int, str]:
    directory, name = os.path.split(target)
    prefix = temp_prefix(name)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_NOFOLLOW", 0)
    for _ in range(100):
        tmp = os.path.join(directory, f"{prefix}{HOST_TAG}.{os.getpid()}.{os.urandom(4).hex()}")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "could not create a temporary file", target)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class AtomicFile:
    """A binary file object that writes a temporary file and, on
    :meth:`close`, renames it to its final name; :meth:`abort` (or an
    exception leaving a ``with`` block, or the object being dropped unclosed)
    removes the temporary file and leaves the final name untouched."""

    def __init__(self, target: str, mode_bits: int | None = None,
                 buffering: int = 1 << 16) -> None:
        self.name = target
        remove_stale_temps(os.path.dirname(target), os.path.basename(target))
        fd, self.temp_name = _create_temp(target)
        # Removes the temporary file if this object is dropped (or the
        # interpreter exits) before close() or abort().
        self._cleanup = weakref.finalize(self, _unlink_quietly, self.temp_name)
        try:
            os.fchmod(fd, _new_file_mode() if mode_bits is None else mode_bits)
            self._file = os.fdopen(fd, "wb", buffering=buffering)
        except BaseException:
            os.close(fd)
            self._cleanup()
            raise
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> int:
        return self._file.write(data)

    def flush(self) -> None:
        self._file.flush()

    def fileno(self) -> int:
        return self._file.fileno()

    def tell(self) -> int:
        return self._file.tell()

    def close(self) -> None:
        """Finish: the file appears at its final name (a no-op once closed)."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
            os.replace(self.temp_name, self.name)
        except BaseException:
            self._cleanup()
            raise
        self._cleanup.detach()

    def abort(self) -> None:
        """Give up: remove the temporary file; the final name is untouched."""
        if self.closed:
            return
        self.closed = True
        try:
            self._file.close()
        except OSError:
            pass
        finally:
            self._cleanup()

    def __enter__(self) -> "AtomicFile":
        return self

    def __exit__(self, exc_type: object, *args: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()


def open_atomic(path: str | os.PathLike, replace: bool = False) -> BinaryIO:
    """A binary file object writing ``path`` (see the module docstring): an
    :class:`AtomicFile` where the name is (or will be) a regular file, else
    the special file opened as it is."""
    atomic, target, mode_bits = _plan(os.fspath(path), replace)
    if atomic:
        return AtomicFile(target, mode_bits)  # type: ignore[return-value]
    return open(target, "wb")


def atomic_write(path: str | os.PathLike, data: "bytes | Sequence[bytes | memoryview]",
                 replace: bool = False) -> None:
    """Write ``data`` (bytes, or pieces written one after the other) to
    ``path`` whole, via :func:`open_atomic`: on any
    failure the temporary file is removed and the exception re-raised, so
    ``path`` is either untouched or complete."""
    f = open_atomic(path, replace)
    if not isinstance(f, AtomicFile):
        with f:
            _write_all(f, data)
        return
    try:
        _write_all(f, data)
    except BaseException:
        f.abort()
        raise
    f.close()
