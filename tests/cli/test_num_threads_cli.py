"""--num-threads on the compute-type binaries other than nnet3-compute:
the thread budget of pynnet3/threads.py, spent on BLAS threads only when
given (see cli/compute_prob.py), and the results do not depend on it."""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import click
import numpy as np
import pytest

from pynnet3 import threads
from pynnet3.cli.options import apply_num_threads


def _blas_threads() -> dict[str, int]:
    ans = {}
    for path, lib, _, getter in threads.blas_libraries():
        if getter is not None:
            get = getattr(lib, getter)
            get.restype = ctypes.c_int
            ans[path] = int(get())
    return ans


def test_apply_num_threads_keeps_blas_at_one_unless_asked(monkeypatch) -> None:
    np.ones((2, 2), np.float32) @ np.ones((2, 2), np.float32)
    if not any(True for *_, g in threads.blas_libraries() if g is not None):
        pytest.skip("no BLAS with a thread getter is loaded")
    for var in threads.THREAD_ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    try:
        assert apply_num_threads(0, 1) == threads.available_cores()
        assert set(_blas_threads().values()) == {1}
        assert apply_num_threads(2, 1) == 2
        assert set(_blas_threads().values()) == {2}
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert apply_num_threads(0, None) == 1
        assert set(_blas_threads().values()) == {1}
        with pytest.raises(click.UsageError):
            apply_num_threads(-1, 1)
    finally:
        threads.set_blas_threads(threads.available_cores())
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.pop(var, None)


def _run(name: str, *args: str, cwd) -> subprocess.CompletedProcess:
    code = f"import sys; from pynnet3.cli import {name} as m; sys.exit(m.main())"
    # (this checkout's package, also when PYTHONPATH is relative)
    src = os.path.dirname(os.path.dirname(os.path.abspath(threads.__file__)))
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          text=True, env=env)


@pytest.mark.parametrize("module", ["compute_prob", "compute_from_egs", "train",
                                    "compute_looped"])
def test_num_threads_option_is_listed_and_checked(module: str, tmp_path) -> None:
    p = _run(module, "--help", cwd=tmp_path)
    assert "--num-threads" in p.stdout + p.stderr
    p = _run(module, "--num-threads=-1", "a", "b", "c", cwd=tmp_path)
    assert p.returncode != 0
