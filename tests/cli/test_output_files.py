"""Output files of the binaries: a directory given as output is a one-line
error; models and archives appear at their names complete or not at all (a
killed binary leaves no partial archive there), and a killed writer's
temporary file is removed by the next write to the same name."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pynnet3.cli import BINARIES
from pynnet3.io.atomic import HOST_TAG, temp_prefix
from tests.helpers import reference_dir

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config"


def _argv(*args: str) -> list[str]:
    module, func = BINARIES[args[0]].split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())",
            *args[1:]]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep
                + os.environ.get("PYTHONPATH", ""))


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(*args), capture_output=True, timeout=300, env=_env(), cwd=cwd)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    raw = tmp_path_factory.mktemp("model") / "0.raw"
    p = run("nnet3-init", "--srand=1", str(CONFIG), str(raw))
    assert p.returncode == 0, p.stderr.decode()
    return raw


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("ERROR (")]


@pytest.mark.parametrize("suffix", ["", "/"])
def test_model_written_to_a_directory_is_a_one_line_error(model: Path, tmp_path: Path,
                                                          suffix: str) -> None:
    out = tmp_path / "somedir"
    out.mkdir()
    p = run("nnet3-copy", str(model), str(out) + suffix)
    err = p.stderr.decode()
    assert p.returncode == 1, err
    errors = _error_lines(err)
    assert len(errors) == 1 and f"{out}{suffix}: " in errors[0] and "is a directory" in errors[0]
    assert "Traceback" not in err and "internal error" not in err
    assert os.listdir(out) == [] and os.listdir(tmp_path) == ["somedir"]


def test_archive_written_to_a_directory_is_a_one_line_error(tmp_path: Path) -> None:
    d = reference_dir() / "train" / "affine_xent"
    (tmp_path / "out").mkdir()
    p = run("nnet3-copy-egs", f"ark:{d}/egs.ark", f"ark:{tmp_path}/out")
    err = p.stderr.decode()
    assert p.returncode == 1, err
    errors = _error_lines(err)
    assert len(errors) == 1 and f"{tmp_path}/out" in errors[0]
    assert "is a directory" in errors[0].lower() and "Traceback" not in err


def test_stale_temporary_file_removed_live_one_kept(model: Path, tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "60"])
    try:
        prefix = temp_prefix("copy.raw")
        stale = tmp_path / f"{prefix}{HOST_TAG}.{dead.pid}.12345678"
        live = tmp_path / f"{prefix}{HOST_TAG}.{alive.pid}.9abcdef0"
        for f in (stale, live):
            f.write_bytes(b"\0Bpartial")
        p = run("nnet3-copy", str(model), str(tmp_path / "copy.raw"))
        assert p.returncode == 0, p.stderr.decode()
        assert (tmp_path / "copy.raw").read_bytes() == model.read_bytes()
        assert not stale.exists() and live.exists()
    finally:
        alive.kill()
        alive.wait()


def test_killed_merge_egs_leaves_no_partial_archive(tmp_path: Path) -> None:
    """SIGKILL while the input pipe stalls: nothing at the final name; the next
    run writes Kaldi's archive there and removes the dead run's leftover.
    (The pipe sends the egs four times, more than the reader's 1 MiB blocks,
    before it stalls.)"""
    d = reference_dir() / "train" / "affine_xent"
    out = tmp_path / "merged.ark"
    proc = subprocess.Popen(
        _argv("nnet3-merge-egs", "--minibatch-size=16", f"ark:(for i in 1 2 3 4; do cat {d}/egs.ark; done; sleep 120) |",
              f"ark:{out}"),
        env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    prefix = temp_prefix(out.name)
    try:
        deadline = time.monotonic() + 60
        temps: list[Path] = []
        while time.monotonic() < deadline and proc.poll() is None:
            temps = [p for p in tmp_path.iterdir() if p.name.startswith(prefix)]
            if temps and temps[0].stat().st_size > 0:
                break               # minibatches have been written: mid-way
            time.sleep(0.1)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert temps and temps[0].stat().st_size > 0, "no archive data written in 60 s"
        assert not out.exists()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)     # the binary and its input pipe
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == [temps[0].name]
    p = run("nnet3-merge-egs", "--minibatch-size=16", f"ark:{d}/egs.ark", f"ark:{out}")
    assert p.returncode == 0, p.stderr.decode()
    assert out.read_bytes() == (d / "merged.ark").read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]
