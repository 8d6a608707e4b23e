"""The CUDA backend against the reference backend, operation by operation
and under the executor.

Runs on a real GPU when one is usable, else only under the CUDA simulator:
tests/compute/test_backends.py::test_cuda_kernels_under_simulator runs this
directory in a subprocess with NUMBA_ENABLE_CUDASIM=1 (the variable must be
set before Numba is imported, so it is never set in the main test process).
Shapes are small because the simulator runs every CUDA thread as a Python
thread.
"""
from __future__ import annotations

import os
from typing import Any, Callable

import numpy as np
import pytest

from pynnet3.compute.backend import cuda_unavailable_reason, get_backend

_REASON = cuda_unavailable_reason()
if _REASON is not None:
    # One skip for the module rather than one per test.
    pytest.skip(f"CUDA backend unusable ({_REASON}); test_backends.py runs these tests under "
                f"the CUDA simulator", allow_module_level=True)

SIMULATOR = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
F32 = np.float32


@pytest.fixture(scope="module")
def cuda_backend() -> Any:
    return get_backend("cuda")


def test_backend_kind(cuda_backend: Any) -> None:
    from pynnet3.compute.backend import Backend, select_backend

    assert isinstance(cuda_backend, Backend) and cuda_backend.name == "cuda"
    assert select_backend("yes") is cuda_backend
    assert select_backend("optional") is cuda_backend


def _cases() -> list[Callable[..., None]]:
    from tests.compute.backend_cases import CASES

    return CASES


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.__name__[5:])
def test_cuda_matches_reference(case: Callable[..., None], cuda_backend: Any) -> None:
    # Bit-exact under the simulator (NumPy float32 arithmetic); a GPU fuses
    # multiply-adds, so there only to rounding.
    case(cuda_backend, np.random.default_rng(_cases().index(case)), SIMULATOR)


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("alpha,beta", [(1.0, 0.0), (-2.0, 0.25)])
def test_gemm_kernel(cuda_backend: Any, trans_b: bool, alpha: float, beta: float) -> None:
    from pynnet3.compute.backend.cuda import CudaBackend

    rng = np.random.default_rng(int(trans_b) + 3)
    backends = [cuda_backend]
    if cuda_backend._cupy is not None:          # also the Numba kernel
        backends.append(CudaBackend(use_cupy=False))
    for m, k, n in ((5, 7, 6), (9, 1, 3), (4, 0, 3)):
        a = rng.standard_normal((m, k + 2)).astype(F32)[:, 1:k + 1]    # a strided view
        b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(F32)
        c = rng.standard_normal((m, n)).astype(F32)
        c[0, 0] = np.nan if beta == 0.0 else c[0, 0]                # beta 0 ignores c
        want = alpha * (a.astype(np.float64) @ (b.T if trans_b else b))
        if beta != 0.0:
            want += beta * c
        for backend in backends:
            dc = backend.from_host(c)
            backend.gemm(dc, backend.from_host(a), backend.from_host(b), trans_b, alpha, beta)
            np.testing.assert_allclose(backend.to_host(dc), want, rtol=1e-5, atol=1e-5)


def test_strided_views_to_host_and_back(cuda_backend: Any) -> None:
    x = np.arange(42, dtype=F32).reshape(6, 7)
    dev = cuda_backend.from_host(x)
    view = cuda_backend.view(dev, 1, 3, 2, 4)
    np.testing.assert_array_equal(cuda_backend.to_host(view), x[1:4, 2:6])
    cuda_backend.set_const(view, -1.0)
    x[1:4, 2:6] = -1.0
    np.testing.assert_array_equal(cuda_backend.to_host(dev), x)
    assert cuda_backend.to_host(cuda_backend.empty_matrix()).shape == (0, 0)
    assert cuda_backend.stddev(view) == pytest.approx(1.0)


@pytest.fixture
def cuda_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from pynnet3.compute import computer as computer_module

    real = computer_module.get_backend
    monkeypatch.setattr(computer_module, "get_backend",
                        lambda name="reference": real("cuda" if name == "reference" else name))


def test_computer_on_cuda(cuda_by_default: None) -> None:
    """The executor's hand-made computations (every row command, memos, the
    host fallback of a Python component, compression) on the device."""
    from tests.compute import computer_checks as checks

    checks.check_row_commands_match_loops()
    checks.check_compress_commands_in_computer()
    checks.check_goto_loop_over_chunks()
    checks.check_errors()
    checks.check_memo_stats_and_update_target(True, checks.T.BACKPROP, True, "update")


def test_bounds_are_checked_before_launch(cuda_backend: Any) -> None:
    # Device kernels do not check bounds; the backend must, on the host.
    from pynnet3.errors import PynnetError

    dst, src = cuda_backend.alloc(3, 2), cuda_backend.alloc(4, 2)
    with pytest.raises(PynnetError, match="out of range"):
        cuda_backend.copy_rows(dst, src, np.array([0, 4, -1], np.int32))
    table = cuda_backend.prepare_indexes(np.array([[0, 0], [0, 9], [-1, -1]], np.int32))
    with pytest.raises(PynnetError, match="out of range"):
        cuda_backend.add_rows_multi(dst, [src], table)
    with pytest.raises(PynnetError, match="out of the source"):
        cuda_backend.add_row_ranges(dst, src, np.array([[0, 5], [-1, -1], [1, 2]], np.int32))
