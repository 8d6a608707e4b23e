"""A Numba cache that works without a writable home or package directory.

pynnet3's Numba kernels are compiled with ``cache=True``.  Numba looks for a
place to cache each one in ``$NUMBA_CACHE_DIR``, then in ``__pycache__``
beside its source file, then in the user's cache directory
(``$XDG_CACHE_HOME/numba`` or ``~/.cache/numba``), and raises ``RuntimeError:
cannot cache function ...: no locator available`` when it decorates the
function if none is writable: as a user without a writable home (``nobody``,
a read-only container) with pynnet3 installed read-only, no binary would
start.  :func:`ensure_numba_cache` (each module that defines cached kernels
calls it before its decorators run) adds two places Numba tries last:

1. ``<temp dir>/pynnet3-numba-cache-<uid>``, made private to the user (it is
   used only if it is a real directory owned by the user that nobody else
   can write to: another user's planted directory or link is never used, as
   Numba loads code from its cache);
2. failing that, a private directory made for this process
   (``tempfile.mkdtemp``), removed when the process ends;

and, should even that fail, compiles the kernels without a cache.  Whichever
is used, the process says so in one WARNING.  Nothing changes where one of
Numba's own places works.
"""
from __future__ import annotations

import atexit
import functools
import os
import stat
from typing import Any

from . import log

__all__ = ["ensure_numba_cache", "fallback_cache_dir", "lazy_njit", "LazyKernel", "numba_loaded"]

_warned = False
_shared: str | None = None
_private_dir: str | None = None


def _warn_once(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        log.warn(message)


def _temp_root() -> str | None:
    # (tempfile, shutil and the random module behind tempfile are imported
    # where a Numba cache is set up: most nnet3-train runs never load Numba,
    # and these imports cost their start-up ~1.5 ms)
    import tempfile

    try:
        return tempfile.gettempdir()
    except OSError:   # (no usable temporary directory at all)
        return None


def _is_private_dir(path: str) -> bool:
    """A directory (not a link) owned by this user that nobody else may write."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
            and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _shared_dir() -> str | None:
    global _shared
    if _shared is not None:
        return _shared
    root = _temp_root()
    if root is None:
        return None
    path = os.path.join(root, f"pynnet3-numba-cache-{os.geteuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    if not _is_private_dir(path):
        return None
    _shared = path
    return path


def _process_dir() -> str | None:
    global _private_dir
    if _private_dir is None:
        import shutil
        import tempfile

        try:
            _private_dir = tempfile.mkdtemp(prefix="pynnet3-numba-cache-")
        except OSError:
            return None
        atexit.register(shutil.rmtree, _private_dir, True)
    return _private_dir


def fallback_cache_dir() -> str | None:
    """Where kernels are cached when Numba's own places are not writable
    (None if nowhere)."""
    return _shared_dir() or _process_dir()


def _where_numba_looked() -> str:
    home_cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache")
    given = os.environ.get("NUMBA_CACHE_DIR")
    return (f"{'NUMBA_CACHE_DIR=' + given + ', ' if given else ''}__pycache__ beside the "
            f"sources, {os.path.join(home_cache, 'numba')}")


def ensure_numba_cache() -> None:
    """Add pynnet3's fallbacks to Numba's cache locators (once; call it before
    decorating functions with ``cache=True``)."""
    try:
        from numba.core import caching
        from numba.core.dispatcher import Dispatcher
        base: Any = caching._CacheLocator
        mixin: Any = caching._SourceFileBackedLocatorMixin
        locators: list = caching.CacheImpl._locator_classes
        null_cache: Any = caching.NullCache
    except (ImportError, AttributeError):  # another Numba: its own behaviour stands
        return
    if any(getattr(cls, "_pynnet3", False) for cls in locators):
        return

    class FallbackCacheLocator(mixin, base):
        """Numba's locator for pynnet3's fallback directory (tried last)."""

        _pynnet3 = True

        def __init__(self, py_func: Any, py_file: str, root: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(root, self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self) -> str:
            return self._cache_path

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if not os.path.exists(py_file):
                return None
            root = fallback_cache_dir()
            if root is None:
                return None
            self = cls(py_func, py_file, root)
            try:
                self.ensure_cache_path()
            except OSError:
                return None
            _warn_once(f"no writable Numba cache ({_where_numba_looked()}); caching compiled "
                       f"kernels in {root} instead (set NUMBA_CACHE_DIR to choose the place)")
            return self

    locators.append(FallbackCacheLocator)

    enable_caching = Dispatcher.enable_caching

    def enable_caching_or_not(self: Any) -> None:
        try:
            enable_caching(self)
        except RuntimeError as e:
            if "no locator available" not in str(e):
                raise
            _warn_once(f"no writable Numba cache ({_where_numba_looked()}, a temporary "
                       "directory); compiling kernels without a cache (slower start-up)")
            self._cache = null_cache()

    Dispatcher.enable_caching = enable_caching_or_not



class LazyKernel:
    """A function to be compiled by ``numba.njit(**options)`` when first
    needed, not when its module is imported (:func:`lazy_njit`).

    Calling it compiles (or loads from Numba's cache) and runs the compiled
    code, as a Numba dispatcher does; ``py_func`` is the plain Python
    function (the same algorithm, interpreted: for inputs too small to be
    worth a compilation).  Numba is imported only when some kernel is
    compiled, so a run that needs no kernel never pays the second or so that
    importing Numba and setting up its compiler cost.
    """

    def __init__(self, func: Any, options: dict[str, Any]) -> None:
        functools.update_wrapper(self, func)
        self.py_func = func
        self.options = options
        self._dispatcher: Any = None

    @property
    def compiled(self) -> Any:
        """The Numba dispatcher (made, with its module's other kernels, on first use)."""
        if self._dispatcher is None:
            _materialise(self.py_func.__module__)
        return self._dispatcher

    @property
    def is_materialised(self) -> bool:
        return self._dispatcher is not None

    def __call__(self, *args: Any) -> Any:
        return self.compiled(*args)

    def __repr__(self) -> str:
        return f"<lazy kernel {self.py_func.__module__}.{self.py_func.__qualname__}>"


def lazy_njit(**options: Any) -> Any:
    """``@lazy_njit(cache=True, nogil=True)``: as ``@numba.njit(...)``, but
    nothing is imported or compiled until the function is first called
    (:class:`LazyKernel`).  Kernels may call each other (also across
    modules): each is compiled with globals in which the lazy kernels it
    names are Numba dispatchers."""
    def wrap(func: Any) -> LazyKernel:
        return LazyKernel(func, options)
    return wrap


def _materialise(module_name: str) -> None:
    """Make the Numba dispatchers of every lazy kernel of a module (compiling
    happens when each is first called)."""
    import sys
    import types

    import numba

    ensure_numba_cache()
    module = sys.modules[module_name]
    jit_globals = dict(vars(module))
    own = {name: obj for name, obj in jit_globals.items()
           if isinstance(obj, LazyKernel) and obj.py_func.__module__ == module_name}
    for name, kernel in own.items():
        f = kernel.py_func
        copy = types.FunctionType(f.__code__, jit_globals, f.__name__, f.__defaults__,
                                  f.__closure__)
        copy.__qualname__ = f.__qualname__
        copy.__doc__ = f.__doc__
        kernel._dispatcher = numba.njit(**kernel.options)(copy)
    for name, obj in list(jit_globals.items()):
        if isinstance(obj, LazyKernel):
            jit_globals[name] = obj.compiled
    uncached = [k for k in own.values() if not _in_cache(k._dispatcher)]
    if uncached:
        global _compile_noted
        if not _compile_noted:
            _compile_noted = True
            log.log("compiling Numba kernels for large inputs (first use after an install: "
                    "tens of seconds, once; later runs load them from Numba's cache)")
        log.vlog(1, f"compiling {len(uncached)} Numba kernels of {module_name}")


_compile_noted = False


def _in_cache(dispatcher: Any) -> bool:
    """Whether Numba's cache has an index for this kernel (then its first
    call loads it rather than compiling it; a stale index is not detected)."""
    try:
        return os.path.exists(dispatcher._cache._cache_file._index_path)
    except AttributeError:     # (another Numba, or no cache)
        return True


def numba_loaded() -> bool:
    """Whether this process has imported Numba already (then a compiled
    kernel costs no start-up, only its compilation or cache load)."""
    import sys
    return "numba" in sys.modules
