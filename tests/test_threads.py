"""The process's thread budget (pynnet3.threads): which setting wins, and
that the BLAS thread count is really set in the loaded OpenBLAS."""
from __future__ import annotations

import numpy as np

from pynnet3 import threads


def test_resolve_num_threads_precedence(monkeypatch) -> None:
    for var in threads.THREAD_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    cores = threads.available_cores()
    assert cores >= 1
    assert threads.resolve_num_threads(None) == cores
    assert threads.resolve_num_threads(0) == cores
    assert threads.resolve_num_threads(-1) == cores
    assert threads.resolve_num_threads(3) == 3
    # The smallest variable the user set wins; junk and zero are ignored.
    env = {"OMP_NUM_THREADS": "4,2", "OPENBLAS_NUM_THREADS": "3", "MKL_NUM_THREADS": "x",
           "NUMBA_NUM_THREADS": "0"}
    assert threads.env_num_threads(env) == 3
    assert threads.resolve_num_threads(0, env) == 3
    assert threads.resolve_num_threads(5, env) == 5       # --num-threads beats them
    assert threads.env_num_threads({"MKL_NUM_THREADS": "x"}) is None
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    assert threads.resolve_num_threads() == 1


def test_set_blas_threads_reaches_numpys_openblas() -> None:
    np.ones((2, 2), np.float32) @ np.ones((2, 2), np.float32)
    libs = list(threads.blas_libraries())
    if not libs:
        import pytest
        pytest.skip("no BLAS with a thread setter is loaded (NumPy without OpenBLAS/MKL?)")
    assert any("openblas" in path.lower() or "mkl" in path.lower() for path, *_ in libs)
    before = threads.set_blas_threads(1)
    try:
        assert before and all(n == 1 for n in before.values())
        if threads.available_cores() >= 2:
            after = threads.set_blas_threads(2)
            assert all(n == 2 for n in after.values())
        # Products are still right (the setter did not break the library).
        a = np.arange(600, dtype=np.float32).reshape(20, 30)
        np.testing.assert_allclose(a @ a.T, a.astype(np.float64) @ a.T.astype(np.float64),
                                   rtol=1e-6)
    finally:
        threads.set_blas_threads(threads.available_cores())


def test_limit_malloc_arenas_respects_user_setting() -> None:
    """glibc's arena cap is set through mallopt (True on Linux/glibc), and a
    MALLOC_ARENA_MAX the user set is left to glibc (False)."""
    import os
    import platform
    import subprocess
    import sys

    code = "from pynnet3.threads import limit_malloc_arenas as f; print(f(1))"
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       check=True)
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert p.stdout.strip() == "True"
    p = subprocess.run([sys.executable, "-c", code], env=dict(env, MALLOC_ARENA_MAX="4"),
                       capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "False"
