"""The computation cache: compile each ComputationRequest once.

:class:`CachingCompiler` plays the part of Kaldi's CachingOptimizingCompiler.
``compile(request)`` looks the request up

1. in memory: the ``cache_capacity`` most recently used computations (LRU,
   as Kaldi's ComputationCache);
2. on disk: one file per key in a cache directory (``cache_dir``, else
   ``$PYNNET3_CACHE_DIR``, else ``~/.cache/pynnet3/computations``), which
   Kaldi does not have (its ``--read-cache``/``--write-cache`` files hold the
   whole in-memory cache instead);
3. and otherwise compiles it: through the shortcut (compile the two-sequence
   version of the request, expand it) when ``use_shortcut`` and the request
   allows, else with the Compiler followed by the optimizer.

A disk entry's key is the SHA-256 of everything the computation depends on:
the network's *structure* (node config lines; component names, types, dims,
property flags, whether the learning rate is zero, and the configuration of
non-simple components — not parameter values or training statistics), the
request, the compiler and optimizer options, the computation file format,
the pynnet3 version, the entry container's version and a fingerprint of the
compiler's source code (so an edited compiler never serves computations of
its older self).  Entries hold the computation file of computation_io
(format 4, the one nnet3-compile writes: a small JSON header and arrays,
never pickle; Index lists stored once each and, where regular in n, as
their first sequence) after a header that repeats the key and the payload's
length and CRC-32 (a cache entry needs protection from damage, not from
forgery; the CRC costs a fraction of a millisecond where SHA-256 of the
same bytes cost a few).  Writes go to a temporary file in the same
directory that is then renamed over the entry (``os.replace``), so
concurrent writers and crashes never leave a partial entry.  An entry that
cannot be read or verified (damaged, or written by an older container
version) is ignored with a warning and recompiled (and rewritten).

Whatever sits at an entry's name is treated as hostile until checked
(:func:`read_entry_file`): only a regular file is opened (``lstat`` first,
then ``O_NOFOLLOW | O_NONBLOCK`` and ``fstat``), and only as many bytes as
its header names, at most :data:`MAX_ENTRY_PAYLOAD`, are read; a FIFO, a
link (to ``/dev/zero`` or anywhere), a device, a directory or a huge sparse
file is reported with one warning and replaced by the recompiled entry
(the rename replaces the name itself, never what a link points at; a
directory is moved aside and deleted without following links).  A
computation that passes the checksum is still checked as the executor
needs it before use, cheaply (every index in range and every dimension
consistent, as Kaldi's CheckComputationIndexes, and input/output matrices
of the request's sizes: ``_validate``), so a forged or mistaken entry is
recompiled rather than run.

Loading is made to take milliseconds: the debug info's cindexes stay
unexpanded until somebody reads them (the executor never does), and
component precomputed indexes, which are not serialised, are recomputed from
the stored input/output Indexes once per distinct (component configuration,
lists) (:func:`rebuild_precomputed_indexes`), by index hooks that work on the
lists' compact form where they can.

Computations returned by ``compile`` are shared with the cache: do not modify
them.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
import shutil
import stat
import struct
import time
import zlib
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .io.atomic import atomic_write
from .io.hashing import sha256
from . import __version__, log
from .compile.computation import CommandType, NnetComputation
from .compile.computation_io import FORMAT_VERSION, computation_to_bytes, load_computation
from .compile.request import ComputationRequest
from .errors import ComputationCheckError, FormatError, PynnetError
from .nnet.index_lists import gc_paused
from .optimize.options import OptimizeOptions
from .nnet.properties_cache import component_properties_cached

if TYPE_CHECKING:
    from .nnet.components.base import Component
    from .nnet.nnet import Nnet

__all__ = ["CachingCompilerOptions", "CachingCompiler", "default_cache_dir", "optimize",
           "nnet_structure_text", "request_key_bytes", "ENTRY_SUFFIX"]

ENTRY_SUFFIX = ".computation"
_ENTRY_MAGIC = b"pynnet3-computation-cache 2\n"
_KEY_VERSION = b"pynnet3-computation-key 1\n"


@dataclass(frozen=True)
class CachingCompilerOptions:
    """Kaldi's CachingOptimizingCompilerOptions (``--compiler.use-shortcut``,
    ``--compiler.cache-capacity``) plus CompilerOptions' ``output_debug_info``.

    ``check``: run the ComputationChecker on each computation compiled
    without the shortcut, before and after optimization, as Kaldi always does.
    """

    use_shortcut: bool = field(default=True, metadata={
        "flag": "use-shortcut", "help": "If true, use the 'shortcut' in compilation whereby "
        "computation requests with regular structure are identified as such, a computation "
        "with a smaller number of distinct values of 'n' is compiled (e.g. 2), and the "
        "compiled computation is expanded to match the size of the real computation request."})
    cache_capacity: int = field(default=64, metadata={
        "flag": "cache-capacity", "help": "Determines how many cached computations we'll "
        "store."})
    # pynnet3's (--compiler.output-debug-info of nnet3-compile)
    output_debug_info: bool = field(default=True, metadata={
        "flag": "output-debug-info", "help": "Keep which cindexes each matrix holds (printed "
        "as the 'm1 == value: ...' lines)."})
    check: bool = True


def default_cache_dir() -> Path:
    """``$PYNNET3_CACHE_DIR``, else ``$XDG_CACHE_HOME/pynnet3/computations``
    (``~/.cache/pynnet3/computations``)."""
    env = os.environ.get("PYNNET3_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pynnet3" / "computations"


# ---------------------------------------------------------------------------
# The optimizer hook


def default_optimize_options() -> OptimizeOptions:
    """Kaldi's default NnetOptimizeOptions."""
    return OptimizeOptions()


def optimize(options: Any, nnet: "Nnet", request: ComputationRequest,
             computation: NnetComputation, analyzer: Any = None) -> NnetComputation:
    """Kaldi's Optimize() on a freshly compiled computation.  The optimizer
    is imported here, on first use: a process whose computations all come
    from the disk cache never loads it (nor the Numba loops it brings)."""
    from . import optimize as optimizer

    ans = optimizer.optimize(options, nnet, request, computation, analyzer=analyzer)
    return computation if ans is None else ans  # an in-place pass may return None


# ---------------------------------------------------------------------------
# Keys

# Attributes of non-simple components that training changes but compilation
# never reads: rates, statistics, schedules.  Everything else a component
# holds (ints, bools, strings, shapes of parameter arrays, nested
# configuration objects, other floats) goes into the key; including too much
# only costs a recompilation, leaving out too much would serve a wrong
# computation, so only names known to be harmless are skipped.
_TRAINING_STATE = frozenset({
    "learning_rate", "learning_rate_factor", "is_gradient", "max_change", "l2_regularize",
    "num_clipped", "num_zeroed", "count", "count_zeroing_boundaries",
    "stats_count", "entropy_stats", "posterior_stats", "dropout_proportion",
})


def _structural(value: Any, depth: int = 0) -> Any:
    """A JSON-able description of ``value`` without parameter values."""
    if depth > 8:
        return "..."
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, np.generic):
        return _structural(value.item(), depth)
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "iub":
            return {"int-array": value.shape, "values": value.ravel().tolist()}
        return {"array": list(value.shape), "dtype": value.dtype.str}
    if isinstance(value, (list, tuple)):
        return [_structural(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): _structural(v, depth + 1) for k, v in sorted(value.items(), key=str)}
    if isinstance(value, (set, frozenset)):
        return sorted((_structural(v, depth + 1) for v in value), key=repr)
    if hasattr(value, "__dict__") or hasattr(type(value), "__slots__"):
        return {"class": type(value).__name__, "fields": _object_fields(value, depth + 1)}
    return {"class": type(value).__name__}


def _object_fields(obj: Any, depth: int) -> dict[str, Any]:
    names: list[str] = list(getattr(obj, "__dict__", {}).keys())
    for cls in type(obj).__mro__:
        names += [s for s in getattr(cls, "__slots__", ()) if s not in names]
    out = {}
    for name in sorted(names):
        if name in _TRAINING_STATE or name.startswith("preconditioner") or name.startswith("__"):
            continue
        if not hasattr(obj, name):
            continue
        out[name] = _structural(getattr(obj, name), depth)
    return out


def component_structure(component: "Component") -> str:
    """What the compiler and optimizer can see of a component.

    Simple components are compiled from their type, dims and property flags
    alone; the others' index hooks depend on their configuration, which is
    described from their attributes (parameter arrays by shape only).
    """
    from .nnet.components.base import Prop, UpdatableComponent

    props = int(component.properties())
    desc: dict[str, Any] = {"type": component.type_name, "input-dim": component.input_dim(),
                            "output-dim": component.output_dim(), "properties": props}
    if isinstance(component, UpdatableComponent):
        # Kaldi's compiler skips the model-derivative step of a component whose
        # learning rate is zero.
        desc["learning-rate-nonzero"] = component.learning_rate != 0
    if not props & Prop.SIMPLE:
        desc["config"] = _object_fields(component, 0)
    return json.dumps(desc, sort_keys=True, separators=(",", ":"))


def nnet_structure_text(nnet: "Nnet", structures: list[str] | None = None) -> str:
    """The network as the compiler sees it: node lines and component structures
    (``structures``: the components' :func:`component_structure`, if made already)."""
    if structures is None:
        structures = [component_structure(c) for c in nnet.components]
    lines = ["# nodes"] + nnet.get_config_lines(include_dim=True) + ["# components"]
    for name, text in zip(nnet.component_names, structures):
        lines.append(f"{name} {text}")
    return "\n".join(lines) + "\n"


def request_key_bytes(request: ComputationRequest) -> bytes:
    """A canonical byte string of the request (NumPy-packed Indexes)."""
    parts = [f"need-model-derivative={int(request.need_model_derivative)} "
             f"store-component-stats={int(request.store_component_stats)} "
             f"misc-info={request.misc_info!r}\n".encode()]
    for kind, ios in (("input", request.inputs), ("output", request.outputs)):
        for io in ios:
            parts.append(f"{kind} {io.name} {int(io.has_deriv)} {len(io.indexes)}\n".encode())
            if io.indexes:
                parts.append(_index_bytes(io.indexes))
    return b"".join(parts)


def _index_bytes(indexes: Any) -> bytes:
    """Indexes as little-endian int32 triples (fast for lists and IndexLists)."""
    array = getattr(indexes, "array", None)  # n_stride.IndexList keeps one
    if array is None:
        # (struct packs a list of tuples about twice as fast as np.fromiter)
        return struct.pack(f"<{3 * len(indexes)}i", *itertools.chain.from_iterable(indexes))
    return np.ascontiguousarray(array, dtype="<i4").tobytes()


def _options_description(options: Any) -> Any:
    if options is None:
        return None
    try:
        return _options_description_memo(options)
    except TypeError:   # (not hashable)
        return _describe_options(options)


@lru_cache(maxsize=16)
def _options_description_memo(options: Any) -> Any:
    # (Options objects are frozen dataclasses: equal options, same text.
    # dataclasses.asdict is the larger part of a CachingCompiler's set-up.)
    return _describe_options(options)


def _describe_options(options: Any) -> Any:
    if dataclasses.is_dataclass(options) and not isinstance(options, type):
        return {"class": type(options).__name__,
                "fields": {k: repr(v) for k, v in sorted(dataclasses.asdict(options).items())}}
    return {"class": type(options).__name__, "repr": repr(options)}


# Sub-packages whose code decides what a compiled computation looks like.
_COMPILER_SOURCES = ("compile", "optimize", "nnet")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """BLAKE2b of the source of the compiler, optimizer and network code
    (every ``.py`` file under them: its path and its bytes).

    Made on every run that uses the disk cache, so it is kept cheap: a
    directory walk with ``os.scandir`` and CPython's built-in BLAKE2 (1.8 ms
    for the 1.5 MB of source, against 7 ms with ``Path.rglob`` and the
    built-in SHA-256; io.hashing, so hashlib and OpenSSL are not loaded)."""
    return source_fingerprint(os.path.dirname(os.path.abspath(__file__)), _COMPILER_SOURCES)


def source_fingerprint(root: str, subfolders: tuple[str, ...]) -> str:
    """BLAKE2b of the paths (relative to ``root``) and bytes of the ``.py``
    files under ``root``'s ``subfolders`` (see :func:`code_fingerprint`)."""
    from .io.hashing import blake2b

    h = blake2b(digest_size=32)
    for sub in subfolders:
        for path in _python_sources(os.path.join(root, sub)):
            h.update(os.path.relpath(path, root).replace(os.sep, "/").encode() + b"\0")
            try:
                with open(path, "rb") as f:
                    h.update(f.read())
            except OSError:
                h.update(b"<unreadable>")
    return h.hexdigest()


def _python_sources(folder: str) -> list[str]:
    """The ``.py`` files under ``folder`` (not following links; bytecode
    folders skipped), in a fixed order."""
    found: list[str] = []
    try:
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if entry.name != "__pycache__":
                found += _python_sources(entry.path)
        elif entry.name.endswith(".py"):
            found.append(entry.path)
    return found


# ---------------------------------------------------------------------------
# Disk entries


def _entry_bytes(key: str, payload: bytes) -> bytes:
    header = (f"key {key}\npayload-bytes {len(payload)}\n"
              f"payload-crc32 {zlib.crc32(payload):08x}\n").encode()
    # (padded so that the payload's arrays lie at 8-byte boundaries)
    header += b" " * (-(len(_ENTRY_MAGIC) + len(header) + 1) % 8) + b"\n"
    return _ENTRY_MAGIC + header + payload


# The largest payload an entry may have.  Entries hold one computation
# (tens of kB to a few MB); the cache neither writes nor reads anything
# larger, so a damaged or planted file cannot make a run read gigabytes.
MAX_ENTRY_PAYLOAD = 256 << 20
# The header (magic, key, sizes, padding) is far shorter than this.
_MAX_HEADER = 1024


def _entry_header(data: bytes, where: str) -> tuple[dict[str, str], int]:
    """(header fields, offset of the payload) of an entry's first bytes,
    else FormatError."""
    if not data.startswith(_ENTRY_MAGIC):
        raise FormatError("not a pynnet3 computation-cache entry of this version", where)
    # Header lines up to a blank (padding) line.
    fields: dict[str, str] = {}
    pos = len(_ENTRY_MAGIC)
    while True:
        end = data.find(b"\n", pos, _MAX_HEADER)
        if end < 0:
            raise FormatError("truncated header", where)
        line = data[pos:end].decode("ascii", "replace")
        pos = end + 1
        if not line.strip():
            break
        name, _, value = line.partition(" ")
        fields[name] = value
    return fields, pos


def _entry_payload(data: bytes, key: str, where: str) -> memoryview:
    """The verified payload of an entry file, else FormatError."""
    fields, pos = _entry_header(data, where)
    payload = memoryview(data)[pos:]   # (no copy of a large entry)
    if fields.get("key") != key:
        raise FormatError("entry was written for a different key", where)
    if fields.get("payload-bytes") != str(len(payload)):
        raise FormatError(f"payload has {len(payload)} bytes, header says "
                          f"{fields.get('payload-bytes')}", where)
    if fields.get("payload-crc32") != f"{zlib.crc32(payload):08x}":
        raise FormatError("payload checksum mismatch", where)
    return payload


_FILE_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
               (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
               (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _file_kind(mode: int) -> str:
    return next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")


def read_entry_file(path: str | os.PathLike) -> bytes | None:
    """The bytes of the entry file at ``path``; None if there is none.

    Only a regular file of the size its header names (at most
    :data:`MAX_ENTRY_PAYLOAD` of payload) is read: anything else (a
    symbolic link, FIFO, device or directory, a file too large or of
    another size than its header says) raises FormatError saying what it
    is, without blocking and without reading more than the header's
    bytes.  The name is looked at with ``lstat`` and opened with
    ``O_NOFOLLOW | O_NONBLOCK``, and the opened file checked again with
    ``fstat``, so a file swapped in between cannot get past either.
    """
    where = os.fspath(path)
    try:
        st = os.lstat(where)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise FormatError(f"is {_file_kind(st.st_mode)}, not a regular file", where)
    limit = _MAX_HEADER + MAX_ENTRY_PAYLOAD
    if st.st_size > limit:
        raise FormatError(f"is {st.st_size} bytes, more than an entry may have ({limit})", where)
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(where, flags)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == getattr(os, "ELOOP", -1):
            raise FormatError("is a symbolic link, not a regular file", where) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FormatError(f"is {_file_kind(st.st_mode)}, not a regular file", where)
        size = st.st_size
        if size > limit:
            raise FormatError(f"is {size} bytes, more than an entry may have ({limit})", where)
        head = os.pread(fd, min(size, _MAX_HEADER), 0)
        fields, pos = _entry_header(head, where)
        claimed = fields.get("payload-bytes", "")
        if not claimed.isdigit() or int(claimed) > MAX_ENTRY_PAYLOAD:
            raise FormatError(f"bad payload size {claimed[:20]!r} in the header", where)
        if pos + int(claimed) != size:
            raise FormatError(f"file has {size} bytes, its header says {pos + int(claimed)}",
                              where)
        if len(head) == size:
            return head
        parts = [os.pread(fd, size, 0)]
        got = len(parts[0])
        while got < size:     # (a regular file is normally read in one call)
            chunk = os.pread(fd, size - got, got)
            if not chunk:
                raise FormatError(f"file has {got} bytes, expected {size}", where)
            parts.append(chunk)
            got += len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(fd)


def _set_aside(path: Path) -> None:
    """Move a directory that sits at an entry's name out of the way (so the
    entry can be written) and delete it, never following symbolic links."""
    aside = path.with_name(f".{path.name}.pynnet3-unusable.{os.getpid()}.{os.urandom(4).hex()}")
    try:
        os.rename(path, aside)
    except OSError:
        return
    if getattr(shutil.rmtree, "avoids_symlink_attacks", False):
        shutil.rmtree(aside, ignore_errors=True)


_BACKPROPS = (int(CommandType.BACKPROP), int(CommandType.BACKPROP_NO_MODEL_UPDATE))
_PRECOMPUTED_USERS = (int(CommandType.PROPAGATE),) + _BACKPROPS
_IO_COMMANDS = (int(CommandType.ACCEPT_INPUT), int(CommandType.PROVIDE_OUTPUT))


def rebuild_precomputed_indexes(computation: NnetComputation, nnet: "Nnet", misc_info: Any,
                                component_keys: list[str],
                                commands: np.ndarray | None = None) -> None:
    """compute_precomputed_indexes for a loaded computation, once per distinct
    (component configuration, input list, output list, need_backprop).

    Loaded Index lists are shared objects (the container stores each
    distinct list once), and components that precompute indexes compute
    them from their configuration and the two lists only, so entries that
    agree in all of those get the same (read-only) object: the unrolled
    time steps of an LSTM reuse a handful of them hundreds of times.
    ``component_keys[c]`` describes component c's configuration
    (:func:`component_structure`); simple components, whose structure text
    leaves their configuration out, are told apart by index.  ``commands``:
    the commands as command_table() gives them, if at hand.
    """
    from .compile.computation import command_table

    table = command_table(computation.commands) if commands is None else commands
    users = table[np.isin(table[:, 0], _PRECOMPUTED_USERS) & (table[:, 2] > 0)]
    infos = computation.component_precomputed_indexes
    component_of: dict[int, int] = {}
    need_backprop: dict[int, bool] = {}
    for command_type, component, entry in users[:, :3].tolist():
        if component_of.setdefault(entry, component) != component:
            raise PynnetError(f"precomputed_indexes[{entry}] is used by two components, "
                              f"{nnet.component_names[component_of[entry]]} and "
                              f"{nnet.component_names[component]}")
        need_backprop[entry] = need_backprop.get(entry, False) or command_type in _BACKPROPS
    done: dict[tuple, Any] = {}
    for entry, component in sorted(component_of.items()):
        if entry >= len(infos):
            raise PynnetError(f"command refers to precomputed_indexes[{entry}], which does not "
                              "exist")
        info = infos[entry]
        if info.data is not None:
            continue
        memo_key = (component_keys[component], id(info.input_indexes), id(info.output_indexes),
                    need_backprop[entry])
        data = done.get(memo_key)
        if data is None:
            data = nnet.get_component(component).precompute_indexes(
                misc_info, info.input_indexes, info.output_indexes, need_backprop[entry])
            done[memo_key] = data
        info.data = data


def _component_keys(nnet: "Nnet") -> tuple[list[str], list[str]]:
    """(structure text, memo key) of each component (see rebuild_precomputed_indexes)."""
    from .nnet.components.base import Prop

    texts, keys = [], []
    for c, component in enumerate(nnet.components):
        text = component_structure(component)
        texts.append(text)
        keys.append(f"#{c}" if int(component.properties()) & Prop.SIMPLE else text)
    return texts, keys


# ---------------------------------------------------------------------------
# The caching compiler


CompileFn = Callable[[ComputationRequest], NnetComputation]


class CachingCompiler:
    """Kaldi's CachingOptimizingCompiler with a disk cache.

    ``compile_fn``, if given, replaces the Compiler (it maps a request to an
    unoptimized computation); tests use it.  Create a new CachingCompiler
    when the network's structure changes (parameter changes are fine).
    """

    def __init__(self, nnet: "Nnet", compiler_options: CachingCompilerOptions | None = None,
                 optimize_options: Any = None, cache_dir: str | os.PathLike | None = None,
                 use_disk: bool = True, compile_fn: CompileFn | None = None) -> None:
        self.nnet = nnet
        self.options = compiler_options or CachingCompilerOptions()
        self.optimize_options = (optimize_options if optimize_options is not None
                                 else default_optimize_options())
        self.use_disk = use_disk
        # (Without the disk, the default folder is only worked out if asked
        # for: expanding ~ costs more than a small compile's cache lookup.)
        self._cache_dir = (Path(cache_dir) if cache_dir is not None
                           else default_cache_dir() if use_disk else None)
        self._compile_fn = compile_fn
        self._memory: OrderedDict[bytes, NnetComputation] = OrderedDict()
        self._disk_writable = True
        # Counters and seconds, as in Kaldi's end-of-run LOG line.
        self.num_memory_hits = 0
        self.num_disk_hits = 0
        self.num_compiled = 0
        self.seconds: dict[str, float] = {k: 0.0 for k in (
            "total", "compile", "optimize", "expand", "check", "indexes", "io")}
        context = {
            "pynnet3": __version__,
            "computation-format": FORMAT_VERSION,
            "entry-container": "raw-4",
            "use-shortcut": self.options.use_shortcut,
            "output-debug-info": self.options.output_debug_info,
            "custom-compiler": None if compile_fn is None else (
                getattr(compile_fn, "__qualname__", None) or type(compile_fn).__qualname__),
            "optimize-options": _options_description(self.optimize_options),
        }
        # What describes the network for the disk cache (the structure text
        # of its nodes and components, ~1.3 ms for a 100-component TDNN-F)
        # and the digest of the disk keys are made when first needed: the
        # digest's code fingerprint reads and hashes every source file of
        # compile/, optimize/ and nnet/ (~7 ms).  A compiler that never
        # touches the disk needs neither.
        self._context = context
        self._structure_made: tuple[str, list[str]] | None = None
        self._context_digest_made: bytes | None = None

    def _structure(self) -> tuple[str, list[str]]:
        """(the network's structure text, the components' memo keys for
        :func:`rebuild_precomputed_indexes`), made on first use."""
        if self._structure_made is None:
            structures, keys = _component_keys(self.nnet)
            self._structure_made = (nnet_structure_text(self.nnet, structures), keys)
        return self._structure_made

    @property
    def _component_keys(self) -> list[str]:
        return self._structure()[1]

    @property
    def _key_context(self) -> tuple[dict[str, Any], str]:
        """(the options and versions in the disk keys, the structure text)."""
        return self._context, self._structure()[0]

    @property
    def _context_digest(self) -> bytes:
        if self._context_digest_made is None:
            context, structure_text = self._key_context
            h = sha256(_KEY_VERSION)
            h.update(json.dumps({**context, "code": code_fingerprint()},
                                sort_keys=True).encode() + b"\n")
            h.update(structure_text.encode())
            self._context_digest_made = h.digest()
        return self._context_digest_made

    @property
    def cache_dir(self) -> Path:
        """The folder of the disk cache."""
        if self._cache_dir is None:
            self._cache_dir = default_cache_dir()
        return self._cache_dir

    @cache_dir.setter
    def cache_dir(self, value: str | os.PathLike) -> None:
        self._cache_dir = Path(value)

    # -- keys --------------------------------------------------------------------
    def key(self, request: ComputationRequest) -> str:
        """The disk-cache key (hex SHA-256) of ``request``."""
        return self._disk_key(sha256(request_key_bytes(request)).digest())

    def _disk_key(self, request_digest: bytes) -> str:
        return sha256(self._context_digest + request_digest).hexdigest()

    def entry_path(self, key: str) -> Path:
        return self.cache_dir / (key + ENTRY_SUFFIX)

    # -- compiling -----------------------------------------------------------------
    def compile(self, request: ComputationRequest) -> NnetComputation:
        """The (optimized) computation for ``request``; shared, do not modify it."""
        start = time.perf_counter()
        # Compiling makes hundreds of thousands of small objects (tuples,
        # lists, commands) and no reference cycles worth collecting; with the
        # cyclic collector running, its full passes over a large heap (the
        # network's, the graph's) cost about a fifth of the time.
        try:
            with gc_paused(), component_properties_cached():
                return self._compile_internal(request)
        finally:
            self.seconds["total"] += time.perf_counter() - start

    def _compile_internal(self, request: ComputationRequest) -> NnetComputation:
        request_digest = sha256(request_key_bytes(request)).digest()
        hit = self._memory.get(request_digest)
        if hit is not None:
            self._memory.move_to_end(request_digest)
            self.num_memory_hits += 1
            return hit
        key = self._disk_key(request_digest) if self.use_disk else ""
        computation = self._load(key, request) if self.use_disk else None
        if computation is not None:
            self.num_disk_hits += 1
        else:
            computation = None
            if self.options.use_shortcut:
                computation = self._compile_via_shortcut(request)
            if computation is None:
                computation = self._compile_no_shortcut(request)
            self.num_compiled += 1
            if self.use_disk:
                self._store(key, computation)
        self._insert_memory(request_digest, computation)
        return computation

    def _insert_memory(self, request_digest: bytes, computation: NnetComputation) -> None:
        capacity = self.options.cache_capacity
        if capacity <= 0:
            return
        while len(self._memory) >= capacity:
            self._memory.popitem(last=False)  # least recently used
        self._memory[request_digest] = computation

    def _compile_via_shortcut(self, request: ComputationRequest) -> NnetComputation | None:
        try:
            from .compile.shortcut import ShortcutError, compile_via_shortcut
        except ImportError:
            return None
        nested = [0.0]

        def compile_mini(mini_request: ComputationRequest) -> NnetComputation:
            # The mini request goes through the caches like any other request;
            # its time is not expansion time.
            t0 = time.perf_counter()
            try:
                return self._compile_internal(mini_request)
            finally:
                nested[0] += time.perf_counter() - t0

        start = time.perf_counter()
        try:
            return compile_via_shortcut(compile_mini, self.nnet, request, self.options)
        except ShortcutError as e:
            log.warn(f"shortcut compilation failed ({e}); compiling the whole request")
            return None
        finally:
            self.seconds["expand"] += time.perf_counter() - start - nested[0]

    def _compile_no_shortcut(self, request: ComputationRequest) -> NnetComputation:
        start = time.perf_counter()
        if self._compile_fn is not None:
            computation = self._compile_fn(request)
        else:
            from .compile.compiler import Compiler, CompilerOptions

            opts = CompilerOptions(output_debug_info=self.options.output_debug_info)
            computation = Compiler([request], self.nnet).create_computation(opts)
        self.seconds["compile"] += time.perf_counter() - start
        if log.verbose_level() >= 4:
            log.log("Computation request is " + request.print())
        # (The checker's analysis of the computation is handed to the
        # optimizer, whose first analysing pass would otherwise redo it.)
        analyzer = self._check(computation, check_rewrite=True)
        start = time.perf_counter()
        computation = optimize(self.optimize_options, self.nnet, request, computation,
                               analyzer)
        self.seconds["optimize"] += time.perf_counter() - start
        self._check(computation, check_rewrite=False)
        # (The passes' last analysis, which the check above reused if nothing
        # changed after it, is not kept with a cached computation.)
        computation.__dict__.pop("_analyzer_memo", None)
        return computation

    def _check(self, computation: NnetComputation, check_rewrite: bool) -> Any:
        """The ComputationChecker on ``computation`` (if ``options.check``);
        returns its Analyzer of the computation, or None."""
        if not self.options.check:
            return None
        try:
            from .optimize.check import check_computation
        except ImportError:
            return None
        start = time.perf_counter()
        analyzer = check_computation(self.nnet, computation, check_rewrite=check_rewrite)
        self.seconds["check"] += time.perf_counter() - start
        return analyzer

    # -- disk ----------------------------------------------------------------------
    def _load(self, key: str, request: ComputationRequest) -> NnetComputation | None:
        """The entry's computation; None if there is no usable entry (an
        unusable one is reported with one warning and, once the computation
        is compiled, replaced by :meth:`_store`)."""
        path = self.entry_path(key)
        start = time.perf_counter()
        try:
            data = read_entry_file(path)
            if data is None:
                return None
            payload = _entry_payload(data, key, str(path))
            computation, commands = load_computation(payload, str(path))
            self.seconds["io"] += time.perf_counter() - start
            start = time.perf_counter()
            self._validate(computation, request, commands)
            rebuild_precomputed_indexes(computation, self.nnet, request.misc_info,
                                        self._component_keys, commands)
            self.seconds["indexes"] += time.perf_counter() - start
            if log.verbose_level() >= 2:
                self._check(computation, check_rewrite=False)
        except (PynnetError, OSError, ValueError, IndexError, KeyError, TypeError,
                OverflowError) as e:
            if isinstance(e, OSError):
                e = f"cannot read it: {e.strerror or e}"
            log.warn(f"ignoring unusable computation cache entry {path} ({e}); recompiling")
            if path.is_dir() and not path.is_symlink():
                _set_aside(path)      # (a file or link is simply renamed over)
            return None
        return computation

    def _validate(self, computation: NnetComputation, request: ComputationRequest,
                  commands: np.ndarray) -> None:
        """What the executor relies on, for a computation read from disk: every
        index in range and every dimension consistent (Kaldi's
        CheckComputationIndexes), and input/output matrices of the request's
        sizes.  An entry that passes its checksum can still hold a forged or
        mistaken computation, and the executor's loops do not check bounds.
        ComputationCheckError if not."""
        from .optimize.check_indexes import IndexChecker

        IndexChecker(self.nnet, computation).run()
        io = commands[np.isin(commands[:, 0], _IO_COMMANDS)]
        if not len(io):
            return
        nnet = self.nnet
        rows = {(True, x.name): len(x.indexes) for x in request.inputs}
        rows.update({(False, x.name): len(x.indexes) for x in request.outputs})
        matrices, submatrices = computation.matrices, computation.submatrices
        for sub, node in io[:, 1:3].tolist():
            name = nnet.node_names[node]
            want = rows.get((nnet.is_input_node(node), name))
            m = matrices[submatrices[sub].matrix_index]
            if want != m.num_rows or m.num_cols != nnet.node_dim(node):
                raise ComputationCheckError(
                    f"input/output matrix for node {name} is {m.num_rows} x {m.num_cols}; the "
                    f"request needs {want} x {nnet.node_dim(node)}")

    def _store(self, key: str, computation: NnetComputation) -> None:
        if not self._disk_writable:
            return
        for p, info in enumerate(computation.component_precomputed_indexes[1:], start=1):
            if info.data is not None and not (info.input_indexes and info.output_indexes):
                # They could not be rebuilt after loading.
                log.vlog(1, f"not caching computation on disk: precomputed_indexes[{p}] "
                            "has no input/output indexes")
                return
        start = time.perf_counter()
        path = self.entry_path(key)
        try:
            payload = computation_to_bytes(computation)
            if len(payload) > MAX_ENTRY_PAYLOAD:
                log.vlog(1, f"not caching computation on disk: {len(payload)} bytes")
                return
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            # (replace=True: whatever is at the name, a link or a FIFO left
            # by somebody, is replaced, never written through)
            atomic_write(path, _entry_bytes(key, payload), replace=True)
        except OSError as e:
            log.warn(f"cannot write computation cache entry {path} ({e.strerror or e}); "
                     "continuing without the disk cache")
            self._disk_writable = False
        finally:
            self.seconds["io"] += time.perf_counter() - start

    # -- reporting -------------------------------------------------------------------
    def timing_summary(self) -> str:
        """Kaldi's end-of-run line, plus the cache's hit counts."""
        s = self.seconds
        misc = (s["total"] - s["compile"] - s["optimize"] - s["expand"] - s["check"]
                - s["indexes"] - s["io"])
        return (f"{s['total']:.3g} seconds taken in nnet3 compilation total (breakdown: "
                f"{s['compile']:.3g} compilation, {s['optimize']:.3g} optimization, "
                f"{s['expand']:.3g} shortcut expansion, {s['check']:.3g} checking, "
                f"{s['indexes']:.3g} computing indexes, {s['io']:.3g} disk-cache I/O, "
                f"{misc:.3g} misc.); {self.num_compiled} compiled, {self.num_memory_hits} "
                f"memory hits, {self.num_disk_hits} disk hits.")
