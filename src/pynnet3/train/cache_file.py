"""``--read-cache`` / ``--write-cache`` of the training binaries.

Kaldi's nnet3-train writes its whole in-memory computation cache to one file
(``--write-cache``) and reads it back in the next iteration
(``--read-cache``); the file holds Kaldi's own serialisation of the requests
and computations.  pynnet3 cannot read those files (a warning says so, and
training goes on, compiling afresh, as Kaldi does when the file is missing).

pynnet3's computation cache (:mod:`pynnet3.cache`) keeps one self-verifying
entry per computation in a directory.  A cache path given on the command line
may be

* an existing directory: used as that cache directory directly (read from,
  and new computations added to it);
* a file (or a path that does not exist yet): a *bundle*, one file holding
  the entries of a cache directory, so that Kaldi scripts that pass
  ``--read-cache=$dir/cache.$x --write-cache=$dir/cache.$[x+1]`` and delete
  old caches with ``rm`` keep working.

A bundle is ``MAGIC`` followed, per entry, by a line ``<file name> <size>``
and the entry's bytes.  Names are checked against the cache's own entry
names (64 hex digits + ``.computation``); the entries' own headers (key,
length and CRC-32 of the payload) are checked when the compiler loads them,
so a damaged entry is recompiled, never used.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Iterator

from .. import log
from ..cache import ENTRY_SUFFIX, atomic_write, read_entry_file
from ..errors import FormatError

__all__ = ["CacheLocation", "BUNDLE_MAGIC", "read_bundle", "bundle_bytes"]

BUNDLE_MAGIC = b"pynnet3-computation-cache-bundle 1\n"
_ENTRY_NAME = re.compile(r"^[0-9a-f]{64}" + re.escape(ENTRY_SUFFIX) + r"$")
_KALDI_CACHE_START = b"\0B<NnetOptimizeOptions>"


def _entries(directory: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of the entries in ``directory`` that are regular files
    of a plausible size (:func:`~pynnet3.cache.read_entry_file`); anything
    else at an entry's name (a link, FIFO, directory, a huge file) is
    skipped with a warning, never opened or read whole."""
    for p in sorted(directory.iterdir()):
        if not _ENTRY_NAME.match(p.name):
            continue
        try:
            data = read_entry_file(p)
        except (FormatError, OSError) as e:
            log.warn(f"skipping unusable computation cache entry {p} ({e})")
            continue
        if data is not None:
            yield p.name, data


def bundle_bytes(directory: Path) -> tuple[bytes, int]:
    """(bundle of every entry in ``directory``, number of entries)."""
    parts = [BUNDLE_MAGIC]
    count = 0
    for name, data in _entries(directory):
        parts.append(f"{name} {len(data)}\n".encode())
        parts.append(data)
        count += 1
    return b"".join(parts), count


def read_bundle(data: bytes, where: str) -> list[tuple[str, bytes]]:
    """The (name, bytes) entries of a bundle; raises ValueError if ``data``
    is not one (the message says what it looks like instead)."""
    if not data.startswith(BUNDLE_MAGIC):
        if data.startswith(_KALDI_CACHE_START) or data.startswith(b"<NnetOptimizeOptions>"):
            raise ValueError(f"{where} is a Kaldi computation cache, which pynnet3 cannot read")
        raise ValueError(f"{where} is not a pynnet3 computation cache")
    pos = len(BUNDLE_MAGIC)
    entries: list[tuple[str, bytes]] = []
    while pos < len(data):
        nl = data.find(b"\n", pos)
        if nl < 0:
            raise ValueError(f"{where}: truncated entry header at byte {pos}")
        try:
            name, size_text = data[pos:nl].decode("ascii").split(" ")
            size = int(size_text)
        except (UnicodeDecodeError, ValueError):
            raise ValueError(f"{where}: bad entry header at byte {pos}") from None
        if not _ENTRY_NAME.match(name) or size < 0 or nl + 1 + size > len(data):
            raise ValueError(f"{where}: bad or truncated entry {name!r} at byte {pos}")
        entries.append((name, data[nl + 1:nl + 1 + size]))
        pos = nl + 1 + size
    return entries


class CacheLocation:
    """Where a CachingCompiler keeps its disk cache for one run, given Kaldi's
    ``--read-cache`` and ``--write-cache`` values ("" = not given).

    When neither is given, ``cache_dir`` is ``default_dir``: the binaries
    pass pynnet3's own on-disk cache there (``--cache-dir``, on unless
    ``--use-disk-cache=false``), and None (no disk cache, as in Kaldi) is the
    library's default.  Call :meth:`finish` at the end of the run (Kaldi
    writes the cache in the trainer's destructor); it writes
    ``--write-cache`` and removes the temporary directory, if one was made.
    """

    def __init__(self, read_cache: str = "", write_cache: str = "",
                 default_dir: str | os.PathLike | None = None) -> None:
        self.read_cache = read_cache
        self.write_cache = write_cache
        self._tmp: Path | None = None
        self.cache_dir: Path | None = None
        if not read_cache and not write_cache:
            self.cache_dir = Path(default_dir) if default_dir is not None else None
            return
        read_dir = Path(read_cache) if read_cache and os.path.isdir(read_cache) else None
        write_dir = Path(write_cache) if write_cache and os.path.isdir(write_cache) else None
        if read_dir is not None and (not write_cache or write_dir == read_dir
                                     or (write_dir is not None
                                         and write_dir.resolve() == read_dir.resolve())):
            self.cache_dir = read_dir
            log.log(f"Read computation cache from {read_cache}")
            return
        if write_dir is not None and not read_cache:
            self.cache_dir = write_dir
            return
        # (imported here: tempfile and the random module behind it are
        # start-up cost for the runs without a cache file, the usual case)
        import tempfile

        self._tmp = Path(tempfile.mkdtemp(prefix="pynnet3-cache-"))
        self.cache_dir = self._tmp
        if read_cache:
            self._fill_from(read_cache, read_dir)

    def _fill_from(self, read_cache: str, read_dir: Path | None) -> None:
        assert self._tmp is not None
        if read_dir is not None:
            for name, data in _entries(read_dir):
                (self._tmp / name).write_bytes(data)
            log.log(f"Read computation cache from {read_cache}")
            return
        try:
            with open(read_cache, "rb") as f:
                data = f.read()
        except OSError:
            log.warn("Could not open cached computation. Probably this is the first training "
                     "iteration.")
            return
        try:
            entries = read_bundle(data, read_cache)
        except ValueError as e:
            log.warn(f"Could not read cached computation ({e}); compiling afresh.")
            return
        for name, blob in entries:
            (self._tmp / name).write_bytes(blob)
        log.log(f"Read computation cache from {read_cache}")

    def finish(self) -> None:
        """Write ``--write-cache`` (if given) and clean up."""
        try:
            if self.write_cache and self.cache_dir is not None:
                target = Path(self.write_cache)
                if self.cache_dir != target and not (target.is_dir() and self.cache_dir.resolve()
                                                     == target.resolve()):
                    if target.is_dir():
                        for name, data in _entries(self.cache_dir):
                            atomic_write(target / name, data, replace=True)
                    else:
                        data, _ = bundle_bytes(self.cache_dir)
                        parent = target.parent if str(target.parent) else Path(".")
                        atomic_write(parent / target.name, data)
                log.log(f"Wrote computation cache to {self.write_cache}")
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None
