"""No writable Numba cache (pynnet3.numba_cache): the binaries still work,
with one WARNING, caching kernels in a private directory under the temporary
directory, or in a directory of their own, or nowhere.

What is simulated, honestly: tests may run as root, who can write anywhere,
so the places Numba tries are made unusable in ways that stop root too:
``NUMBA_CACHE_DIR`` and ``HOME`` point under /proc (where nothing can be
created), and the package runs from a copy of the sources in which every
``__pycache__`` is a regular file (so Numba's ``__pycache__`` beside the
sources cannot be made, as for a read-only installation).  Each case runs in
a subprocess (the locators are chosen when the kernels are decorated, at
import)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pynnet3.cli import BINARIES
from tests.helpers import reference_dir

ROOT = Path(__file__).resolve().parents[1]
# One small kernel (forced: small sums are otherwise taken with NumPy):
# decorating it, at its first call, is what fails without a cache; calling it
# compiles (or loads) it.
KERNEL = ("import numpy as np\nfrom pynnet3.nnet.components.row_sums import seq_row_sums_f32\n"
          "print(seq_row_sums_f32(np.ones((3, 4), np.float32), use_jit=True).tolist())\n")


@pytest.fixture(scope="module")
def readonly_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of src/ whose every __pycache__ is a regular file."""
    dest = tmp_path_factory.mktemp("ro") / "src"
    shutil.copytree(ROOT / "src", dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for d, _, _ in os.walk(dest):
        (Path(d) / "__pycache__").write_bytes(b"")
    return dest


def _env(src: Path, tmpdir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "PYTHONPATH")}
    env.update(HOME="/proc/nonexistent-home", NUMBA_CACHE_DIR="/proc/nonexistent-numba",
               TMPDIR=str(tmpdir), PYTHONPATH=str(src), **extra)
    return env


def _python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300,
                          env=env, cwd=env["TMPDIR"])


def _warnings(p: subprocess.CompletedProcess) -> list[str]:
    return [x for x in p.stderr.decode().splitlines() if x.startswith("WARNING (")]


def test_without_the_fallback_numba_refuses(readonly_src: Path, tmp_path: Path) -> None:
    """The simulation is real: with pynnet3's fallback taken out, Numba finds
    no place and the import fails as the issue describes."""
    code = ("import pynnet3.numba_cache as m\nm.ensure_numba_cache = lambda: None\n" + KERNEL)
    p = _python(code, _env(readonly_src, tmp_path))
    assert p.returncode != 0
    assert "no locator available" in p.stderr.decode()


def test_kernels_cached_in_a_private_temporary_directory(readonly_src: Path,
                                                         tmp_path: Path) -> None:
    env = _env(readonly_src, tmp_path, NUMBA_DEBUG_CACHE="1")
    first = _python(KERNEL, env)
    assert first.returncode == 0, first.stderr.decode()
    assert "[4.0, 4.0, 4.0]" in first.stdout.decode()
    shared = tmp_path / f"pynnet3-numba-cache-{os.geteuid()}"
    (warning,) = _warnings(first)
    assert "no writable Numba cache" in warning and str(shared) in warning
    assert "/proc/nonexistent-numba" in warning and "/proc/nonexistent-home" in warning
    assert (os.stat(shared).st_mode & 0o777) == 0o700
    assert any(f.suffix == ".nbi" for f in shared.rglob("*"))
    # The next process loads the kernel from there (one warning again).
    second = _python(KERNEL, env)
    assert second.returncode == 0 and len(_warnings(second)) == 1, second.stderr.decode()
    assert "data loaded from" in second.stdout.decode()


@pytest.mark.parametrize("planted", ["link", "writable-by-others"])
def test_a_planted_shared_directory_is_never_used(readonly_src: Path, tmp_path: Path,
                                                  planted: str) -> None:
    """Numba loads code from its cache: a directory somebody else could have
    filled is not used; the process makes its own and removes it at exit."""
    other = tmp_path / "attacker"
    other.mkdir(mode=0o777)
    os.chmod(other, 0o777)
    shared = tmp_path / f"pynnet3-numba-cache-{os.geteuid()}"
    if planted == "link":
        shared.symlink_to(other)
    else:
        shared.mkdir()
        os.chmod(shared, 0o777)
    p = _python(KERNEL, _env(readonly_src, tmp_path))
    assert p.returncode == 0, p.stderr.decode()
    (warning,) = _warnings(p)
    assert str(shared) + " " not in warning and str(tmp_path / "pynnet3-numba-cache-") in warning
    assert os.listdir(other) == [] and (planted == "link" or os.listdir(shared) == [])
    assert sorted(os.listdir(tmp_path)) == ["attacker", shared.name]   # its own one removed


def test_uncached_when_no_directory_at_all(readonly_src: Path, tmp_path: Path) -> None:
    code = ("import pynnet3.numba_cache as m\nm.fallback_cache_dir = lambda: None\n" + KERNEL)
    p = _python(code, _env(readonly_src, tmp_path))
    assert p.returncode == 0, p.stderr.decode()
    assert "[4.0, 4.0, 4.0]" in p.stdout.decode()
    (warning,) = _warnings(p)
    assert "compiling kernels without a cache" in warning
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_nnet3_info_without_a_writable_home(readonly_src: Path, tmp_path: Path) -> None:
    """The issue's case: nnet3-info on a model whose context computation uses
    the graph kernels (an LSTM), as a user without a writable home.  Small
    graphs take the NumPy paths since kernels are compiled on demand, so the
    Numba paths are forced here (the kernels must compile, be cached in the
    fallback, and give the same output)."""
    model = reference_dir("small/lstmp_swbd_6j/1.raw") / "small" / "lstmp_swbd_6j" / "1.raw"
    module, func = BINARIES["nnet3-info"].split(":")
    code = (f"import sys\nfrom pynnet3 import fast_paths\nfrom {module} import {func}\n"
            f"with fast_paths.override(graph_jit_from=0, analysis_jit_from=0):\n"
            f"    status = {func}()\nsys.exit(status)")
    argv = [sys.executable, "-c", code, str(model)]
    normal = subprocess.run(argv, capture_output=True, timeout=600,
                            env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    assert normal.returncode == 0, normal.stderr.decode()
    p = subprocess.run(argv, capture_output=True, timeout=600, env=_env(readonly_src, tmp_path))
    assert p.returncode == 0, p.stderr.decode()
    assert len(_warnings(p)) == 1 and "no writable Numba cache" in _warnings(p)[0]
    assert "ERROR" not in p.stderr.decode()
    assert p.stdout == normal.stdout
