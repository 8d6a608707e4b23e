"""The process's thread budget (pynnet3.threads): which setting wins, and
that the BLAS thread count is really set in the loaded OpenBLAS."""
from __future__ import annotations

import numpy as np
import pytest

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
        pytest.skip("no BLAS with a thread setter is loaded (NumPy without OpenBLAS/MKL?)")
    assert any("openblas" in path.lower() or "mkl" in path.lower() for path, *_ in libs)
    rows_before = threads.row_threads()
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
        threads.set_row_threads(rows_before)


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


@pytest.fixture
def row_blocks(monkeypatch):
    """Row blocks with 3 threads from 0 elements of work on; restored after."""
    before = threads.row_threads()
    monkeypatch.setattr(threads, "ROW_BLOCKS_MIN_ELEMENTS", 0)
    threads.set_row_threads(3)
    yield
    threads.set_row_threads(before)


def test_run_row_blocks_covers_each_row_once(row_blocks) -> None:
    import threading

    seen: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def fn(begin: int, end: int) -> None:
        with lock:
            seen.append((begin, end, threading.current_thread().name))

    threads.run_row_blocks(fn, 10, 10)
    covered = sorted(r for b, e, _ in seen for r in range(b, e))
    assert covered == list(range(10))
    assert len(seen) == 3 and len({name for *_, name in seen}) == 3
    # Too little work, or one thread: one block, in the caller.
    seen.clear()
    threads.ROW_BLOCKS_MIN_ELEMENTS = 100
    threads.run_row_blocks(fn, 10, 99)
    assert seen == [(0, 10, threading.current_thread().name)]
    seen.clear()
    threads.ROW_BLOCKS_MIN_ELEMENTS = 0
    threads.set_row_threads(1)
    threads.run_row_blocks(fn, 10, 10)
    assert [(b, e) for b, e, _ in seen] == [(0, 10)]


def test_run_row_blocks_raises_a_blocks_error_and_nests_serially(row_blocks) -> None:
    def fail(begin: int, end: int) -> None:
        if begin > 0:
            raise ValueError(f"block {begin}")

    with pytest.raises(ValueError, match="block"):
        threads.run_row_blocks(fail, 9, 9)
    # The pool still works after an error, and a nested call (from inside a
    # block, while the pool is busy) runs as one block in its thread.
    inner: list[tuple[int, int]] = []

    def outer(begin: int, end: int) -> None:
        if begin == 0:
            threads.run_row_blocks(lambda b, e: inner.append((b, e)), 6, 6)

    threads.run_row_blocks(outer, 9, 9)
    assert inner == [(0, 6)]


def test_row_blocks_leave_openblas_right_and_environment_alone(row_blocks,
                                                                monkeypatch) -> None:
    """Starting the pool cuts OpenBLAS's worker spin and restarts its
    workers: products at 2 BLAS threads stay right, and the variable used to
    tell OpenBLAS is not left in the environment (child processes)."""
    import os

    a = np.random.default_rng(0).standard_normal((300, 200)).astype(np.float32)
    expected = a.astype(np.float64) @ a.T.astype(np.float64)
    threads.set_blas_threads(2)
    threads.set_row_threads(3)
    monkeypatch.setattr(threads, "_spin_shortened", False)   # (another test may have)
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    try:
        np.testing.assert_allclose(a @ a.T, expected, rtol=1e-4, atol=1e-3)
        threads.run_row_blocks(lambda b, e: None, 8, 8)
        for _ in range(3):
            np.testing.assert_allclose(a @ a.T, expected, rtol=1e-4, atol=1e-3)
        assert threads._spin_shortened
        assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ
    finally:
        threads.set_blas_threads(threads.available_cores())


@pytest.mark.parametrize("shape", [(1024, 2000), (37, 301), (5, 3), (130, 2048)])
def test_log_softmax_row_blocks_give_numpys_bits(row_blocks, shape) -> None:
    """Log-softmax and its backprop in row blocks on 3 threads equal the
    one-block NumPy computation bit for bit (rows are independent; NumPy's
    exp, log and row sums do not depend on where a block starts)."""
    from pynnet3.nnet.components.nonlinearities import LogSoftmaxComponent

    rng = np.random.default_rng(shape[0])
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    x[0, :2] = [80.0, -80.0]
    d = rng.standard_normal(shape).astype(np.float32)
    comp = LogSoftmaxComponent()

    def run() -> tuple[np.ndarray, np.ndarray]:
        y = np.empty_like(x)
        comp.propagate(None, x, y)
        g = np.empty_like(x)
        comp.backprop("", None, None, y, d, None, None, g)
        return y, g

    threads.set_row_threads(1)
    y1, g1 = run()
    # The one-block result is the NumPy formula itself.
    ref = x - x.max(axis=1, keepdims=True)
    ref_total = np.cumsum(np.exp(ref), axis=1, dtype=np.float32)[:, -1]
    np.testing.assert_array_equal(y1, ref - np.log(ref_total)[:, None])
    threads.set_row_threads(3)
    y3, g3 = run()
    np.testing.assert_array_equal(y3, y1)
    np.testing.assert_array_equal(g3, g1)


def test_relu_backprop_row_blocks_give_numpys_bits(row_blocks, monkeypatch) -> None:
    """The one-pass ReLU backprop, in one block and in row blocks, equals
    the former ``(y > 0).astype(float32) * out_deriv`` bit for bit, NaN,
    infinities and signed zeros included."""
    from pynnet3.nnet.components import nonlinearities as nl

    monkeypatch.setattr(nl, "RELU_ROW_BLOCKS_MIN_ELEMENTS", 0)
    rng = np.random.default_rng(5)
    y = np.maximum(rng.standard_normal((67, 33)).astype(np.float32), 0)
    d = rng.standard_normal((67, 33)).astype(np.float32)
    d[0, :5] = [np.nan, np.inf, -np.inf, -0.0, 0.0]
    y[0, :5] = [0.0, 0.0, 1.0, 1.0, 0.0]
    with np.errstate(invalid="ignore"):
        expected = (y > 0).astype(np.float32) * d
    comp = nl.RectifiedLinearComponent()
    for n in (1, 3):
        threads.set_row_threads(n)
        g = np.full_like(d, 7.0)
        with np.errstate(invalid="ignore"):
            comp.backprop("", None, None, y, d, None, None, g)
        np.testing.assert_array_equal(g.view(np.int32), expected.view(np.int32))


def test_run_column_blocks_cover_each_column_once_in_whole_units(row_blocks) -> None:
    import threading

    unit = threads.COLUMN_BLOCK_UNIT
    lock = threading.Lock()
    for num_cols in (unit - 1, 2 * unit - 1, 2 * unit, 5 * unit + 7, 512):
        seen: list[tuple[int, int]] = []

        def fn(begin: int, end: int) -> None:
            with lock:
                seen.append((begin, end))

        threads.run_column_blocks(fn, num_cols, num_cols)
        assert sorted(c for b, e in seen for c in range(b, e)) == list(range(num_cols))
        if num_cols < 2 * unit:
            assert seen == [(0, num_cols)]      # (never a block under one unit)
        else:
            assert len(seen) == min(3, num_cols // unit)
            assert all(b % unit == 0 and e - b >= unit for b, e in seen)
    # One thread: the whole range in one call.
    threads.set_row_threads(1)
    seen = []
    threads.run_column_blocks(lambda b, e: seen.append((b, e)), 512, 512)
    assert seen == [(0, 512)]


def _batchnorm_whole_matrix(x: np.ndarray, dz: np.ndarray, target_rms: float, eps: float):
    """BatchNorm's training forward and backward as one NumPy expression over
    the whole matrix (the formulas before column blocks)."""
    f32, n = np.float32, x.shape[0]
    inv_n = f32(1.0 / n)
    var_scale = f32(1.0 / (target_rms * target_rms))
    mean = x.sum(axis=0, dtype=np.float64).astype(f32) * inv_n
    uvar = np.einsum("ij,ij->j", x, x, dtype=np.float64).astype(f32) * inv_n
    sc = np.maximum(uvar * var_scale + (-var_scale * mean) * mean, f32(0.0)) + f32(
        var_scale * f32(eps))
    scale = (1.0 / np.sqrt(sc.astype(np.float64))).astype(f32)
    y = (x - mean) * scale
    coeff = f32(-1.0 / (target_rms * target_rms * n))
    v = coeff * np.einsum("ij,ij->j", y, dz, dtype=np.float64).astype(f32)
    v *= scale
    t = f32(-1.0 / n) * dz.sum(axis=0, dtype=np.float64).astype(f32)
    z_term = y * v
    dx = (dz + t) * scale
    dx += z_term
    return y, dx


@pytest.mark.parametrize("shape", [(1024, 512), (37, 300), (200, 33), (9, 16), (64, 48)])
def test_batchnorm_column_blocks_give_the_whole_matrix_bits(row_blocks, shape) -> None:
    """BatchNorm's training propagate and backprop split into column blocks
    on 3 threads (each column's sums over all rows, in row order) equal the
    one-block computation and the whole-matrix formulas bit for bit, the
    backprop also in place (in_deriv = out_deriv)."""
    from pynnet3.nnet.components.normalization import BatchNormComponent
    from tests.helpers_components import make_by_type

    rng = np.random.default_rng(shape[1])
    x = (rng.standard_normal(shape) * 3 + rng.standard_normal(shape[1]) * 5).astype(np.float32)
    dz = rng.standard_normal(shape).astype(np.float32)
    comp = make_by_type("BatchNormComponent", f"dim={shape[1]} target-rms=0.8")
    assert isinstance(comp, BatchNormComponent)
    ref_y, ref_dx = _batchnorm_whole_matrix(x, dz, comp.target_rms, comp.epsilon)
    for n in (1, 3):
        threads.set_row_threads(n)
        y = np.empty_like(x)
        memo = comp.propagate(None, x, y, use_jit=False)
        np.testing.assert_array_equal(y, ref_y)
        dx = np.empty_like(x)
        comp.backprop("", None, None, y, dz, memo, None, dx, use_jit=False)
        np.testing.assert_array_equal(dx, ref_dx)
        in_place = dz.copy()
        comp.backprop("", None, None, y, in_place, memo, None, in_place, use_jit=False)
        np.testing.assert_array_equal(in_place, ref_dx)


def test_batchnorm_column_blocks_with_a_block_dim(row_blocks) -> None:
    """With block-dim < dim the statistics are per block column (rows of
    block_dim values): column blocks split those, with the same bits."""
    from tests.helpers_components import make_by_type

    rng = np.random.default_rng(7)
    x = (rng.standard_normal((50, 96)) * 2 + 1).astype(np.float32)
    dz = rng.standard_normal((50, 96)).astype(np.float32)
    comp = make_by_type("BatchNormComponent", "dim=96 block-dim=48")
    ref_y, ref_dx = _batchnorm_whole_matrix(x.reshape(-1, 48), dz.reshape(-1, 48),
                                            comp.target_rms, comp.epsilon)
    for n in (1, 3):
        threads.set_row_threads(n)
        y = np.empty_like(x)
        memo = comp.propagate(None, x, y, use_jit=False)
        np.testing.assert_array_equal(y.reshape(-1, 48), ref_y)
        dx = np.empty_like(x)
        comp.backprop("", None, None, y, dz, memo, None, dx, use_jit=False)
        np.testing.assert_array_equal(dx.reshape(-1, 48), ref_dx)


@pytest.mark.parametrize("layout", ["C", "F", "columns", "rows"])
@pytest.mark.parametrize("shape", [(1024, 2000), (37, 300), (200, 33), (9, 16), (5, 1)])
def test_row_sum_column_blocks_give_numpys_bits(row_blocks, shape, layout) -> None:
    """The bias gradient's row sum (numeric.row_sum), its columns split on 3
    threads, equals NumPy's whole-matrix float32 sum bit for bit, for
    C- and Fortran-ordered matrices and column or row ranges of wider ones."""
    from pynnet3.nnet.components.numeric import row_sum

    rng = np.random.default_rng(shape[0] + shape[1])
    big = (rng.standard_normal((shape[0] + 2, shape[1] + 5)) * 100).astype(np.float32)
    m = {"C": big[:shape[0], :shape[1]].copy(), "F": np.asfortranarray(big[:shape[0], :shape[1]]),
         "columns": big[:shape[0], 2:shape[1] + 2], "rows": big[1:shape[0] + 1, :shape[1]]}[layout]
    want = m.sum(axis=0, dtype=np.float32)
    for n in (1, 3):
        threads.set_row_threads(n)
        np.testing.assert_array_equal(row_sum(m), want)


def test_row_blocks_work_in_a_forked_child(row_blocks) -> None:
    """The pool's threads are not copied by fork: a child starts its own."""
    import os
    import signal

    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    threads.run_row_blocks(lambda b, e: None, 6, 6)      # the parent's pool exists
    pid = os.fork()
    if pid == 0:                                          # the child
        signal.alarm(20)                                  # a hang fails instead of blocking
        try:
            out = np.zeros(6)

            def fill(b: int, e: int) -> None:
                out[b:e] = 1.0

            threads.run_row_blocks(fill, 6, 6)
            os._exit(0 if out.sum() == 6.0 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
