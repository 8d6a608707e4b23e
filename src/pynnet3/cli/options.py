"""Option groups that several binaries share, each declared once here.

* ``--optimization.*`` (Kaldi's NnetOptimizeOptions), ``--compiler.*``
  (CachingCompilerOptions), ``--computation.*`` (NnetComputeOptions): the
  library's options dataclasses registered with
  :func:`pynnet3.cli.common.register_options` under Kaldi's prefixes, and
  :func:`compiler_and_computation_options` / :func:`build_compile_options`,
  the three together as the training and diagnostic binaries have them.
* ``--cache-dir`` / ``--use-disk-cache``: pynnet3's on-disk computation cache.
* ``--use-gpu``: Kaldi's GPU selection (the choice itself is made by
  :func:`pynnet3.compute.backend.select_compute_backend`).

A binary whose help text for an option differs from the dataclass's passes
its own (``help=``); flags, defaults and types come from the dataclass.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import click

from ..cache import CachingCompilerOptions
from ..compute.backend import USE_GPU_CHOICES
from ..compute.computer import NnetComputeOptions
from ..optimize.options import OptimizeOptions
from .common import bool_option, options_from, register_options

__all__ = ["optimization_options", "optimize_options_from", "compiler_options",
           "compiler_options_from", "computation_options", "computation_options_from",
           "compiler_and_computation_options", "build_compile_options", "disk_cache_options",
           "disk_cache_dir_from",
           "use_gpu_option", "num_threads_option", "apply_num_threads"]

OPTIMIZATION_PREFIX = "optimization"
COMPILER_PREFIX = "compiler"
COMPUTATION_PREFIX = "computation"


def optimization_options(f: Callable) -> Callable:
    """Kaldi's ``--optimization.<flag>`` options (NnetOptimizeOptions), values
    as ``optimization_<field>`` keyword arguments."""
    return register_options(OptimizeOptions, prefix=OPTIMIZATION_PREFIX)(f)


def optimize_options_from(kwargs: dict[str, Any]) -> OptimizeOptions:
    """The OptimizeOptions of :func:`optimization_options`' values (removed
    from ``kwargs``)."""
    return options_from(OptimizeOptions, kwargs, prefix=OPTIMIZATION_PREFIX)


def compiler_options(names: Sequence[str] = ("use_shortcut", "cache_capacity"),
                     help: Mapping[str, str] | None = None) -> Callable[[Callable], Callable]:
    """``--compiler.<flag>`` (CachingCompilerOptions), as ``compiler_<field>``."""
    return register_options(CachingCompilerOptions, prefix=COMPILER_PREFIX, names=names,
                            help=help)


def compiler_options_from(kwargs: dict[str, Any], **overrides: Any) -> CachingCompilerOptions:
    return options_from(CachingCompilerOptions, kwargs, prefix=COMPILER_PREFIX, **overrides)


def computation_options(f: Callable) -> Callable:
    """``--computation.debug`` (NnetComputeOptions), as ``computation_debug``."""
    return register_options(NnetComputeOptions, prefix=COMPUTATION_PREFIX)(f)


def computation_options_from(kwargs: dict[str, Any], **overrides: Any) -> NnetComputeOptions:
    return options_from(NnetComputeOptions, kwargs, prefix=COMPUTATION_PREFIX, **overrides)


def compiler_and_computation_options(f: Callable) -> Callable:
    """Kaldi's ``--optimization.*``, ``--compiler.*`` and ``--computation.*``
    options, in that order (the training and diagnostic binaries)."""
    f = computation_options(f)
    f = compiler_options(names=("use_shortcut", "cache_capacity"))(f)
    return optimization_options(f)


def build_compile_options(kwargs: dict[str, Any]) -> tuple[OptimizeOptions,
                                                          CachingCompilerOptions, bool]:
    """(OptimizeOptions, CachingCompilerOptions, computation debug) from the
    keyword arguments of :func:`compiler_and_computation_options` (removed
    from ``kwargs``)."""
    optimize = optimize_options_from(kwargs)
    compiler = compiler_options_from(kwargs)
    return optimize, compiler, computation_options_from(kwargs).debug


def disk_cache_options(note: str = "(pynnet3) ") -> Callable[[Callable], Callable]:
    """``--cache-dir`` and ``--use-disk-cache`` (pynnet3's on-disk computation
    cache), as ``cache_dir`` and ``use_disk_cache``; ``note`` starts the help."""

    def deco(f: Callable) -> Callable:
        f = bool_option("--use-disk-cache", True, f"{note}Look computations up in, and add "
                        "them to, the on-disk cache.")(f)
        return click.option("--cache-dir", default="", help=f"{note}Directory of the on-disk "
                            "computation cache (default: $PYNNET3_CACHE_DIR or "
                            "~/.cache/pynnet3/computations).")(f)

    return deco


def disk_cache_dir_from(kwargs: dict[str, Any]) -> str | None:
    """The on-disk cache folder that :func:`disk_cache_options` asked for
    (``cache_dir`` and ``use_disk_cache``, removed from ``kwargs``): the
    given ``--cache-dir``, else the default folder; None with
    ``--use-disk-cache=false``."""
    cache_dir = kwargs.pop("cache_dir")
    if not kwargs.pop("use_disk_cache"):
        return None
    if cache_dir:
        return cache_dir
    from ..cache import default_cache_dir

    return str(default_cache_dir())


def use_gpu_option(default: str | None, help: str,
                   check_choice: bool = True) -> Callable[[Callable], Callable]:
    """Kaldi's ``--use-gpu=yes|no|optional|wait``, as ``use_gpu``.  Binaries
    that compute on the CPU whatever it says accept any value (as Kaldi's
    CPU build does: ``check_choice=False``)."""
    return click.option("--use-gpu", default=default, show_default=default is not None,
                        type=click.Choice(list(USE_GPU_CHOICES)) if check_choice else str,
                        help=help)



NUM_THREADS_SOURCES = ("0: the smallest of OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, "
                       "MKL_NUM_THREADS and NUMBA_NUM_THREADS where set, else the cores "
                       "available to the process.")


# What the training and diagnostic binaries spend --num-threads on.
BLAS_PRODUCTS_USE = ("the matrix products run on that many BLAS threads (when neither it nor a "
                     "thread variable such as OPENBLAS_NUM_THREADS is set, one: faster for "
                     "these products where the cores are shared).")


def num_threads_option(use: str) -> Callable[[Callable], Callable]:
    """pynnet3's ``--num-threads`` (as ``num_threads``): the process's thread
    budget (:mod:`pynnet3.threads`); ``use`` says what this binary spends it
    on."""
    return click.option("--num-threads", type=int, default=0, show_default=True,
                        help=f"(pynnet3) Threads to use: {use}  {NUM_THREADS_SOURCES}")


def apply_num_threads(requested: int, default_blas_threads: int | None = None) -> int:
    """Resolves ``--num-threads`` (:func:`pynnet3.threads.resolve_num_threads`)
    and sets the BLAS threads: the budget when ``--num-threads`` was given
    (> 0), when the user set a thread variable, or when ``default_blas_threads``
    is None, else at most
    ``default_blas_threads``; returns the budget."""
    from ..threads import env_num_threads, resolve_num_threads, use_blas_threads

    if requested < 0:
        raise click.UsageError("--num-threads must be >= 0")
    budget = resolve_num_threads(requested)
    # A thread count the user asked for (the option, or OPENBLAS_NUM_THREADS
    # and the like, as a Kaldi user sets them) is honoured; only the default
    # budget (all cores) is capped for the BLAS.
    asked = requested > 0 or env_num_threads() is not None
    blas = budget if asked or default_blas_threads is None \
        else min(default_blas_threads, budget)
    use_blas_threads(blas)
    return budget
