"""Tests of the Numba backends against the NumPy reference backend.

* The cpu backend, operation by operation (tests/compute/backend_cases.py),
  bit for bit where the reference's float operations are reproduced; its
  opt-in parallel kernels on every case too (marked slow: compiling them
  all takes ~20 s on a cold Numba cache) and on larger shapes.
* The cpu backend under the executor: the executor's checks
  (computer_checks.py, which test_computer.py runs on the reference backend)
  run again with ``cpu`` as the default backend, and on Kaldi's random test
  computations the two backends' outputs and input derivatives agree to
  1e-6 relative.
* ``select_backend`` (Kaldi's --use-gpu) and ``select_compute_backend``
  (nnet3-compute's choice) without a GPU.
* The CUDA kernels: tests/compute/cuda/ runs in a subprocess with the CUDA
  simulator switched on (NUMBA_ENABLE_CUDASIM=1 must be set before Numba is
  imported, so it cannot be switched on inside this process without leaking
  into every other test).
"""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from pynnet3.compute import NnetComputeOptions, NnetComputer
from pynnet3.compute import backend as backend_module
from pynnet3.compute import computer as computer_module
from pynnet3.compute.backend import (Backend, get_backend, select_backend,
                                     select_compute_backend)
from pynnet3.compute.backend.tables import IndexTable, make_multi_plan
from pynnet3.errors import ConfigError, DeviceError, PynnetError
from tests.compute import computer_checks as checks
from tests.compute.backend_cases import CASES

F32 = np.float32
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cpu() -> Backend:
    return get_backend("cpu")


def test_cpu_backend_conforms_to_protocol(cpu: Backend) -> None:
    assert isinstance(cpu, Backend) and cpu.name == "cpu"
    assert get_backend("cpu") is cpu


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[5:])
def test_cpu_matches_reference(case: Callable[..., None], cpu: Backend) -> None:
    case(cpu, np.random.default_rng(CASES.index(case)), True)


@pytest.mark.slow      # compiles every parallel twin for every layout: ~20 s cold
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__[5:])
def test_cpu_parallel_kernels_match_reference(case: Callable[..., None]) -> None:
    # Every operation through the prange twins (threshold 1 element).
    from pynnet3.compute.backend.cpu import CpuBackend

    case(CpuBackend(parallel_min_elements=1), np.random.default_rng(CASES.index(case) + 50),
         True)


def test_cpu_large_shapes(cpu: Backend) -> None:
    from pynnet3.compute.backend.cpu import PARALLEL_MIN_ELEMENTS, CpuBackend

    rng = np.random.default_rng(5)
    rows, cols = 300, 128
    assert rows * cols >= PARALLEL_MIN_ELEMENTS
    ref = get_backend("reference")
    src = rng.standard_normal((rows + 5, cols)).astype(F32)
    idx = rng.integers(-1, rows + 5, rows).astype(np.int32)
    pairs = np.stack([rng.integers(-1, 2, rows), rng.permutation(rows)], axis=1).astype(np.int32)
    pairs[pairs[:, 0] < 0] = -1
    arrays_host = [rng.standard_normal((rows, cols)).astype(F32) for _ in range(2)]
    ranges = np.sort(rng.integers(0, rows + 5, (rows, 2)), axis=1).astype(np.int32)
    results = []
    for b in (ref, cpu, CpuBackend(parallel_min_elements=PARALLEL_MIN_ELEMENTS)):
        dst = np.ones((rows, cols), F32)
        b.copy_rows(dst, src, idx, 0.5)
        b.add_rows(dst, src, idx[::-1].copy(), 2.0)
        arrays = [a.copy() for a in arrays_host]
        b.add_rows_multi(dst, arrays, pairs, -1.0)
        b.add_to_rows_multi(dst, arrays, pairs, 0.25)
        b.add_row_ranges(dst, src, ranges, 1.5)
        b.scale(dst, 0.5)
        results.append((dst, arrays[0], arrays[1]))
    for other in results[1:]:
        for want, got in zip(results[0], other):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_overlapping_operands_fall_back_to_reference(cpu: Backend) -> None:
    # A shift of a matrix onto itself: a naive row loop would read rows it
    # has already written.
    x = np.arange(24, dtype=F32).reshape(6, 4)
    for b in (get_backend("reference"), cpu):
        m = x.copy()
        b.copy(m[1:], m[:-1], 2.0)
        np.testing.assert_array_equal(m[1:], 2 * x[:-1])
        m = x.copy()
        b.add_rows(m[0:3], m[1:4], np.array([0, 1, 2], np.int32))
        np.testing.assert_array_equal(m[0:3], x[0:3] + x[1:4])


def test_reference_copy_rows_gathers_into_contiguous_dst() -> None:
    """The reference backend's one-pass gather (a C-contiguous dst, alpha 1,
    every index in range) gives src[indexes] exactly; a column-range dst,
    -1 rows and alpha take the general path; an index past the source
    still raises instead of being clipped."""
    ref = get_backend("reference")
    rng = np.random.default_rng(8)
    src = rng.standard_normal((9, 5)).astype(F32)
    idx = rng.integers(0, 9, 12).astype(np.int32)
    dst = np.full((12, 5), np.nan, F32)
    ref.copy_rows(dst, src, idx)
    np.testing.assert_array_equal(dst, src[idx])
    wide = np.full((12, 8), 7.0, F32)
    ref.copy_rows(wide[:, 2:7], src, idx)
    np.testing.assert_array_equal(wide[:, 2:7], src[idx])
    assert (wide[:, :2] == 7.0).all() and (wide[:, 7:] == 7.0).all()
    with_missing = idx.copy()
    with_missing[3] = -1
    ref.copy_rows(dst, src, with_missing, 2.0)
    want = 2.0 * src[idx]
    want[3] = 0.0
    np.testing.assert_array_equal(dst, want)
    with pytest.raises(IndexError):
        ref.copy_rows(dst, src, np.append(idx[:-1], 9).astype(np.int32))


def test_errors_for_out_of_range_indexes(cpu: Backend) -> None:
    dst, src = np.zeros((3, 2), F32), np.zeros((4, 2), F32)
    with pytest.raises(PynnetError, match="out of range"):
        cpu.copy_rows(dst, src, np.array([0, 4, -1], np.int32))
    with pytest.raises(PynnetError, match="indexes for 3 rows"):
        cpu.add_rows(dst, src, np.array([0, 1], np.int32))
    with pytest.raises(PynnetError, match="out of range"):
        cpu.add_rows_multi(dst, [src], np.array([[0, 0], [0, 9], [-1, -1]], np.int32))
    with pytest.raises(PynnetError, match="out of the source"):
        cpu.add_row_ranges(dst, src, np.array([[0, 5], [-1, -1], [1, 2]], np.int32))


def test_multi_plan_and_prepared_tables(cpu: Backend) -> None:
    pairs = np.array([[2, 0], [-1, -1], [0, 3], [2, 1], [0, 3], [-1, -1]], np.int32)
    plan = make_multi_plan(pairs)
    assert plan.none_positions.tolist() == [1, 5]
    assert [(g.array, g.positions.tolist(), g.rows.tolist(), g.has_duplicate_rows, g.max_row)
            for g in plan.groups] == [(0, [2, 4], [3, 3], True, 3), (2, [0, 3], [0, 1], False, 1)]
    prepared = cpu.prepare_indexes(pairs)
    assert isinstance(prepared, IndexTable) and prepared.plan() is prepared.plan()
    pairs[0] = (-1, -1)     # the prepared copy does not follow the caller's array
    assert prepared.array[0].tolist() == [2, 0]
    assert cpu.prepare_indexes(np.array([3, -1, 0])).dtype == np.int32


# ---------------------------------------------------------------------------
# the executor on the cpu backend


@pytest.fixture
def cpu_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """NnetComputer built without a backend argument gets ``cpu``."""
    real = computer_module.get_backend

    def pick(name: Any = "reference") -> Backend:
        return real("cpu" if name == "reference" else name)

    monkeypatch.setattr(computer_module, "get_backend", pick)


def test_computer_tests_on_cpu(cpu_by_default: None) -> None:
    comp, _ = checks.new_computation([(1, 4)])
    assert NnetComputer(NnetComputeOptions(), comp, checks.small_nnet()).backend.name == "cpu"
    checks.check_row_commands_match_loops()
    checks.check_compress_commands_in_computer()
    checks.check_goto_loop_over_chunks()
    checks.check_errors()
    checks.check_store_stats_after_in_place_propagate_gets_empty_input()
    for args in [(True, checks.T.BACKPROP, True, "update"), (False, checks.T.BACKPROP, False, "stats")]:
        checks.check_memo_stats_and_update_target(*args)


def test_vosk_computation_on_cpu(cpu_by_default: None, vosk_mdl: Path) -> None:
    checks.check_vosk_computation_matches_nnet3_compute(vosk_mdl)


def _run_case(seed: str, backend: str) -> dict[str, np.ndarray]:
    import kaldiio

    d, nnet, comp = checks.load_case(seed)
    io = dict(kaldiio.load_ark(str(d / "io.ark")))
    computer = NnetComputer(NnetComputeOptions(), comp, nnet,
                            nnet_to_update=copy.deepcopy(nnet), backend=backend)
    for key, value in io.items():
        if key.startswith("in_"):
            computer.accept_input(key[3:], value)
    from pynnet3.nnet.components.base import set_random_seed

    set_random_seed(7)      # dropout and self-repair draw random numbers
    computer.run()
    out = {"output": np.array(computer.get_output("output"))}
    if "outderiv_output" in io:
        computer.accept_input("output", io["outderiv_output"])
        computer.run()
        for key in io:
            if key.startswith("inderiv_"):
                name = key[len("inderiv_"):]
                out[key] = np.array(computer.get_input_deriv(name))
    return out


@pytest.mark.parametrize("seed", checks.random_dirs()[::3] or ["000"])
def test_cpu_equals_reference_on_kaldi_computations(seed: str) -> None:
    try:
        want = _run_case(seed, "reference")
    except NotImplementedError as e:
        pytest.skip(f"component math not implemented yet: {str(e).rsplit(': ', 1)[-1]}")
    got = _run_case(seed, "cpu")
    assert want.keys() == got.keys()
    for key in want:
        scale = max(float(np.max(np.abs(want[key]))), 1e-20) if want[key].size else 1.0
        err = float(np.max(np.abs(got[key] - want[key]))) / scale if want[key].size else 0.0
        assert err <= 1e-6, f"{key}: relative difference {err}"


# ---------------------------------------------------------------------------
# --use-gpu


def test_select_backend_without_gpu(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(backend_module, "cuda_unavailable_reason", lambda: "no GPU here")
    assert select_backend("no").name == "cpu"
    assert "Manually selected to compute on CPU." in capsys.readouterr().err
    assert select_backend("optional").name == "cpu"
    err = capsys.readouterr().err
    assert "WARNING (" in err and "running on CPU since --use-gpu=optional" in err
    for choice in ("yes", "wait"):
        with pytest.raises(PynnetError, match=f"No CUDA GPU detected.*use-gpu={choice}.*no GPU"):
            select_backend(choice)
    with pytest.raises(ConfigError, match="passed 'maybe'"):
        select_backend("maybe")


def test_select_compute_backend_without_gpu(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """nnet3-compute's choice: the CPU backend named by --cpu-backend unless
    a GPU is usable or asked for."""
    monkeypatch.setattr(backend_module, "cuda_unavailable_reason", lambda: "no GPU here")
    monkeypatch.setattr(backend_module, "gpu_may_be_present", lambda: False)
    assert select_compute_backend(None).name == "reference"
    assert select_compute_backend(None, "numba").name == "cpu"
    assert select_compute_backend("no", "numba").name == "cpu"
    assert "Manually selected to compute on CPU." in capsys.readouterr().err
    assert select_compute_backend("optional").name == "reference"
    monkeypatch.setattr(backend_module, "gpu_may_be_present", lambda: True)
    assert select_compute_backend(None).name == "reference"
    for choice in ("yes", "wait"):
        with pytest.raises(DeviceError, match=f"No CUDA GPU detected.*use-gpu={choice}"):
            select_compute_backend(choice)


def test_select_backend_here() -> None:
    reason = backend_module.cuda_unavailable_reason()
    if reason is None:
        assert select_backend("yes").name == "cuda"
    else:
        assert "GPU" in reason or "CUDA" in reason or "cuda" in reason
        with pytest.raises(PynnetError, match="No CUDA GPU detected"):
            select_backend("yes")
        with pytest.raises(PynnetError, match="cannot run"):
            get_backend("cuda")


# ---------------------------------------------------------------------------
# CUDA kernels under the simulator


def test_cuda_kernels_under_simulator() -> None:
    pytest.importorskip("numba.cuda")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), str(ROOT),
                                                    env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/compute/cuda"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], tail
