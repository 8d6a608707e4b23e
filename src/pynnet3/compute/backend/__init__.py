"""Backends: where the matrices of a computation live and how each matrix
and row operation is carried out.

The executor (:class:`pynnet3.compute.computer.NnetComputer`) never knows the
device.  It owns a list of backend arrays, cuts submatrices out of them with
:meth:`Backend.view`, and asks the backend to do every operation a command
needs.  A backend is chosen once, by name, with :func:`get_backend`:

* ``reference`` (:mod:`.reference`): plain NumPy.  It is the definition of
  every operation; the other backends are tested against it.
* ``cpu`` (:mod:`.cpu`): the same NumPy matrices, operations as
  ``@numba.njit`` kernels.
* ``cuda`` (:mod:`.cuda`): device matrices, ``@numba.cuda.jit`` kernels.

Same interface, same results up to float rounding.  :func:`select_backend`
maps Kaldi's ``--use-gpu`` option onto ``cpu`` / ``cuda``;
:func:`select_compute_backend` is nnet3-compute's choice (no ``--use-gpu``:
the GPU when usable, as Kaldi's CUDA build, else the CPU).

Conventions shared by every backend
-----------------------------------
* Matrices are 2-D float32 arrays; a submatrix is a view (a slice) of one.
* Row-index vectors (``indexes``) are int32; ``-1`` means "no row".
* A *multi* row operation addresses rows spread over several submatrices.
  The executor resolves Kaldi's ``(submatrix, row)`` pairs into a list of
  array views (``arrays``) and an int32 ``[n, 2]`` table ``pairs`` of
  ``(position in arrays, row in that view)``, with ``(-1, -1)`` for "none".
  Every view in ``arrays`` has as many columns as the other operand.
* Row ranges (``ranges``) are int32 ``[n, 2]`` of ``(begin, end)``, end
  exclusive; Kaldi writes an empty range as ``(-1, -1)``.
* Index tables pass through :meth:`Backend.prepare_indexes` once, when the
  computer is built (a device backend copies them to the device there, as
  Kaldi's ``ComputeCudaIndexes`` does).
"""
from __future__ import annotations

from importlib import import_module
from typing import Any, Protocol, runtime_checkable

import os

from ... import log
from ...errors import ConfigError, DeviceError, PynnetError


@runtime_checkable
class Backend(Protocol):
    """The operations an executor needs.  ``Array`` is the backend's matrix
    type (``numpy.ndarray`` for the reference backend)."""

    name: str

    # -- memory ----------------------------------------------------------
    def alloc(self, num_rows: int, num_cols: int, fill: float = 0.0) -> Any:
        """A new ``num_rows x num_cols`` matrix with every element ``fill``."""
        ...

    def empty_matrix(self) -> Any:
        """A 0 x 0 matrix (Kaldi's empty submatrix, index 0)."""
        ...

    def view(self, mat: Any, row_offset: int, num_rows: int, col_offset: int,
             num_cols: int) -> Any:
        """The submatrix ``mat[row_offset:+num_rows, col_offset:+num_cols]``, no copy."""
        ...

    def from_host(self, host: Any) -> Any:
        """A new backend matrix holding a copy of the NumPy array ``host``."""
        ...

    def take_host(self, host: Any) -> Any:
        """A backend matrix with the contents of ``host``, which the caller
        hands over (it may be used as is, where no copy is needed)."""
        ...

    def to_host(self, mat: Any) -> Any:
        """The contents of ``mat`` as a NumPy float32 array (may share memory
        with ``mat`` on a host backend)."""
        ...

    def prepare_indexes(self, table: Any) -> Any:
        """An int32 index table in the form the row operations take."""
        ...

    # -- whole-matrix operations ---------------------------------------------
    def set_const(self, dst: Any, value: float) -> None: ...

    def scale(self, dst: Any, alpha: float) -> None: ...

    def copy(self, dst: Any, src: Any, alpha: float = 1.0) -> None:
        """``dst = alpha * src``."""
        ...

    def add(self, dst: Any, src: Any, alpha: float = 1.0) -> None:
        """``dst += alpha * src``."""
        ...

    # -- row operations ------------------------------------------------------
    def copy_rows(self, dst: Any, src: Any, indexes: Any, alpha: float = 1.0) -> None:
        """``dst[r] = alpha * src[indexes[r]]``; rows with index -1 become 0."""
        ...

    def add_rows(self, dst: Any, src: Any, indexes: Any, alpha: float = 1.0) -> None:
        """``dst[r] += alpha * src[indexes[r]]``; index -1 rows are left alone."""
        ...

    def copy_rows_multi(self, dst: Any, arrays: list[Any], pairs: Any,
                        alpha: float = 1.0) -> None:
        """``dst[r] = alpha * arrays[p][row]``; ``(-1, -1)`` rows become 0."""
        ...

    def copy_to_rows_multi(self, src: Any, arrays: list[Any], pairs: Any) -> None:
        """``arrays[p][row] = src[r]``; ``(-1, -1)`` rows of src are not copied."""
        ...

    def add_rows_multi(self, dst: Any, arrays: list[Any], pairs: Any,
                       alpha: float = 1.0) -> None:
        """``dst[r] += alpha * arrays[p][row]``; ``(-1, -1)`` rows are left alone."""
        ...

    def add_to_rows_multi(self, src: Any, arrays: list[Any], pairs: Any,
                          alpha: float = 1.0) -> None:
        """``arrays[p][row] += alpha * src[r]``; ``(-1, -1)`` rows are skipped."""
        ...

    def add_row_ranges(self, dst: Any, src: Any, ranges: Any, alpha: float = 1.0) -> None:
        """``dst[r] += alpha * sum(src[begin:end])`` for ``(begin, end) = ranges[r]``."""
        ...

    # -- compression (Kaldi's CuCompressedMatrix) -----------------------------
    def compress(self, mat: Any, kind: int, range_: float, truncate: bool) -> Any:
        """A lossy compressed copy of ``mat`` (opaque to the executor)."""
        ...

    def decompress(self, compressed: Any, dst: Any) -> None:
        """Write the values a compressed matrix stands for into ``dst``."""
        ...

    # -- component math --------------------------------------------------------
    def propagate(self, component: Any, precomputed: Any, in_value: Any, out_value: Any) -> Any:
        """Run ``component.propagate``; returns its memo (or None)."""
        ...

    def backprop(self, component: Any, debug_info: str, precomputed: Any, in_value: Any,
                 out_value: Any, out_deriv: Any, memo: Any, to_update: Any,
                 in_deriv: Any) -> None: ...

    def store_stats(self, component: Any, in_value: Any, out_value: Any, memo: Any) -> None: ...

    # -- diagnostics -------------------------------------------------------
    def stddev(self, mat: Any) -> float:
        """Uncentred standard deviation sqrt(sum(x^2) / size) (0 for empty)."""
        ...


# name -> module implementing it (each module defines ``BACKEND_CLASS``).
_MODULES = {
    "reference": "pynnet3.compute.backend.reference",
    "numpy": "pynnet3.compute.backend.reference",
    "cpu": "pynnet3.compute.backend.cpu",
    "cuda": "pynnet3.compute.backend.cuda",
}

_INSTANCES: dict[str, Backend] = {}


def backend_names() -> list[str]:
    return sorted(_MODULES)


def get_backend(name: "str | Backend" = "reference") -> Backend:
    """The backend called ``name`` (one instance per name), or ``name`` itself
    when it already is a backend object."""
    if not isinstance(name, str):
        return name
    if name in _INSTANCES:
        return _INSTANCES[name]
    module_name = _MODULES.get(name)
    if module_name is None:
        raise PynnetError(f"unknown compute backend {name!r} (known: {', '.join(backend_names())})")
    try:
        module = import_module(module_name)
    except ImportError as e:
        raise PynnetError(f"compute backend {name!r} is not available: {e}") from e
    backend = module.BACKEND_CLASS()
    _INSTANCES[name] = backend
    return backend


USE_GPU_CHOICES = ("yes", "no", "optional", "wait")


def cuda_unavailable_reason() -> str | None:
    """Why the cuda backend cannot run in this process, or None if it can."""
    try:
        from .cuda import cuda_unavailable_reason as reason
    except ImportError as e:
        return f"numba.cuda cannot be imported: {e}"
    return reason()


def select_backend(use_gpu: str) -> Backend:
    """The backend for Kaldi's ``--use-gpu`` (CuDevice::SelectGpuId):

    * ``no``: the cpu backend.
    * ``yes``: the cuda backend; a PynnetError if no usable GPU.
    * ``optional``: cuda if usable, else cpu with a warning (Kaldi warns).
    * ``wait``: as ``yes``.  Kaldi's ``wait`` retries until a GPU in
      compute-exclusive mode becomes free; with no GPU at all it fails as
      ``yes`` does, and pynnet3 does not manage exclusive-mode contention, so
      the two are the same here.
    """
    if use_gpu not in USE_GPU_CHOICES:
        raise ConfigError(f"Please choose : --use-gpu=yes|no|optional|wait, passed '{use_gpu}'")
    if use_gpu == "no":
        log.log("Manually selected to compute on CPU.")
        return get_backend("cpu")
    reason = cuda_unavailable_reason()
    if reason is None:
        return get_backend("cuda")
    if use_gpu == "optional":
        log.warn(f"No CUDA GPU detected; running on CPU since --use-gpu=optional specified. "
                 f"({reason})")
        return get_backend("cpu")
    raise DeviceError(f"No CUDA GPU detected! (--use-gpu={use_gpu}: {reason})")


def gpu_may_be_present() -> bool:
    """False when this machine certainly has no CUDA GPU to offer (no NVIDIA
    device files and no CUDA simulator), which is cheap to see."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "") not in ("", "0"):
        return True
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0",
                                           "/proc/driver/nvidia"))


def select_compute_backend(use_gpu: str | None, cpu_backend: str = "numpy") -> Backend:
    """nnet3-compute's backend: an explicit ``use_gpu`` as :func:`select_backend`
    (CuDevice::SelectGpuId); None, the GPU if usable (a CUDA build's default)
    else the CPU.  On the CPU, ``cpu_backend`` picks the NumPy ("numpy", the
    reference backend) or the Numba ("numba") backend."""
    cpu = get_backend("reference" if cpu_backend == "numpy" else "cpu")
    if use_gpu == "no":
        log.log("Manually selected to compute on CPU.")
        return cpu
    if use_gpu is None and not gpu_may_be_present():
        # (Asking numba.cuda would cost a second of start-up for nothing.)
        log.vlog(1, "no GPU device: computing on the CPU")
        return cpu
    if use_gpu is not None:
        backend = select_backend(use_gpu)
        return cpu if backend.name != "cuda" else backend
    if cuda_unavailable_reason() is None:
        return get_backend("cuda")
    log.vlog(1, "no usable GPU: computing on the CPU")
    return cpu
