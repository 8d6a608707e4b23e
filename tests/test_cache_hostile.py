"""Hostile computation-cache entries: whatever sits at an entry's name (a
FIFO, a link to /dev/zero, a 2 GiB sparse file, a directory, a forged entry
whose checksum is right but whose computation is not) costs one warning and
a recompilation, is replaced by a valid entry, and never hangs, exhausts
memory or fails the run.  The FIFO and /dev/zero cases run in a subprocess
under a timeout (a regression would hang or read without end)."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import pynnet3.cache as cache_mod
from pynnet3.cache import CachingCompiler, CachingCompilerOptions, read_entry_file
from pynnet3.compile.computation import CommandType
from pynnet3.compile.computation_io import computation_from_bytes, computation_to_bytes
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import FormatError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from pynnet3.cli import BINARIES
from tests.helpers import reference_dir

ROOT = Path(__file__).resolve().parents[1]
CONFIG = (ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config").read_text()
TWO_GIB = 2 << 30


def _request(num_seq: int = 2, frames: int = 4) -> ComputationRequest:
    return ComputationRequest(
        [IoSpecification("input", [Index(n, t, 0) for n in range(num_seq)
                                   for t in range(-8, frames + 8)]),
         IoSpecification("ivector", [Index(n, 0, 0) for n in range(num_seq)])],
        [IoSpecification("output", [Index(n, t, 0) for n in range(num_seq)
                                    for t in range(frames)])])


@pytest.fixture(scope="module")
def nnet() -> Nnet:
    nnet = Nnet()
    nnet.read_config(CONFIG, "<test>")
    return nnet


def _compiler(nnet: Nnet, cache: Path) -> CachingCompiler:
    return CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=False), cache_dir=cache)


def _call_with_timeout(fn, timeout: float = 30.0):
    """fn() in a daemon thread: a hang fails the test instead of stopping the suite."""
    result: list = []

    def target() -> None:
        try:
            result.append(("ok", fn()))
        except BaseException as e:  # noqa: BLE001
            result.append(("raised", e))

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert result, f"{fn} did not return in {timeout} s"
    return result[0]


def _valid_entry(tmp_path: Path, nnet: Nnet) -> Path:
    cc = _compiler(nnet, tmp_path / "good")
    cc.compile(_request())
    return cc.entry_path(cc.key(_request()))


# -- reading: only regular files of a plausible size -------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "link-to-entry", "sparse", "directory",
                                  "size-mismatch", "huge-header-size"])
def test_read_entry_file_refuses_what_is_not_an_entry(tmp_path: Path, nnet: Nnet,
                                                      kind: str) -> None:
    good = _valid_entry(tmp_path, nnet)
    assert read_entry_file(good) == good.read_bytes()
    assert read_entry_file(tmp_path / "missing") is None
    path = tmp_path / "entry"
    expected = {"fifo": "is a FIFO", "dev-zero": "is a symbolic link",
                "link-to-entry": "is a symbolic link", "sparse": "more than an entry may have",
                "directory": "is a directory", "size-mismatch": "its header says",
                "huge-header-size": "bad payload size"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "link-to-entry":
        path.symlink_to(good)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(TWO_GIB)
    elif kind == "directory":
        path.mkdir()
    elif kind == "size-mismatch":
        path.write_bytes(good.read_bytes() + b"\0" * 10)
    else:
        data = good.read_bytes()
        path.write_bytes(data.replace(b"payload-bytes ", b"payload-bytes 9999999999999"))
    # (in a subprocess: were a FIFO opened or /dev/zero read, it would hang or
    # read without end)
    code = ("import sys\nfrom pynnet3.cache import read_entry_file\nfrom pynnet3.errors "
            "import FormatError\ntry:\n    read_entry_file(sys.argv[1])\n    print('read')\n"
            "except FormatError as e:\n    print('FormatError', e)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, timeout=60,
                       env=env)
    out = p.stdout.decode()
    assert p.returncode == 0 and out.startswith("FormatError"), (out, p.stderr.decode())
    assert expected in out and str(path) in out
    if kind not in ("fifo", "dev-zero"):
        with pytest.raises(FormatError, match=expected):
            read_entry_file(path)


# -- the compiler: warn once, recompile, replace ---------------------------------------


def _forge(kind: str, good: bytes, key: str, nnet: Nnet, tmp_path: Path) -> bytes:
    """An entry for ``key`` whose header and checksum are right but whose
    computation would break the executor."""
    payload = good[good.index(b"pynnet3-computation v4\n"):]
    comp = computation_from_bytes(payload)
    if kind == "row-index":
        k = next(i for i, ix in enumerate(comp.indexes) if len(ix))
        comp.indexes[k][0] = 10 ** 6
    elif kind == "submatrix":
        c = next(i for i, x in enumerate(comp.commands)
                 if x.command_type is CommandType.MATRIX_COPY or x.command_type
                 is CommandType.PROPAGATE)
        comp.commands[c] = dataclasses.replace(comp.commands[c], arg4=len(comp.submatrices) + 5,
                                               arg2=len(comp.submatrices) + 5)
    elif kind == "other-request":
        # A valid computation, of another request (12 frames, not 4).
        other = _compiler(nnet, tmp_path / "other")
        comp = other.compile(_request(frames=12))
    return cache_mod._entry_bytes(key, computation_to_bytes(comp))


@pytest.mark.parametrize("kind", ["fifo", "link", "directory", "sparse", "row-index",
                                  "submatrix", "other-request"])
def test_hostile_entry_is_recompiled_and_replaced(tmp_path: Path, nnet: Nnet, kind: str,
                                                  capsys: pytest.CaptureFixture) -> None:
    cache = tmp_path / "cache"
    first = _compiler(nnet, cache)
    compiled = first.compile(_request())
    path = first.entry_path(first.key(_request()))
    good = path.read_bytes()
    victim = tmp_path / "victim"
    victim.write_bytes(b"not to be deleted")
    if kind == "fifo":
        path.unlink()
        os.mkfifo(path)         # (the compiler runs in a thread under a timeout)
    elif kind == "link":
        path.unlink()
        path.symlink_to(victim)
    elif kind == "directory":
        path.unlink()
        path.mkdir()
        (path / "file").write_bytes(b"x")
        (path / "link").symlink_to(victim)
    elif kind == "sparse":
        with open(path, "wb") as f:
            f.truncate(TWO_GIB)
    else:
        path.write_bytes(_forge(kind, good, first.key(_request()), nnet, tmp_path))
    capsys.readouterr()
    cc = _compiler(nnet, cache)
    status, again = _call_with_timeout(lambda: cc.compile(_request()), timeout=120)
    assert status == "ok", again
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "ignoring unusable computation cache entry" in warnings[0]
    assert str(path) in warnings[0]
    assert cc.num_compiled == 1 and cc.num_disk_hits == 0
    assert computation_to_bytes(again) == computation_to_bytes(compiled)
    # Replaced by a valid entry: the next compiler is served from disk, silently.
    assert path.is_file() and not path.is_symlink() and path.read_bytes() == good
    assert victim.read_bytes() == b"not to be deleted"
    assert sorted(os.listdir(cache)) == [path.name]
    cc2 = _compiler(nnet, cache)
    cc2.compile(_request())
    assert cc2.num_disk_hits == 1 and cc2.num_compiled == 0
    assert "WARNING" not in capsys.readouterr().err


# -- a binary: every kind at once, in a subprocess under a timeout -------------------------


def _run_compute(src: Path, work: Path, cache: Path) -> subprocess.CompletedProcess:
    module, func = BINARIES["nnet3-compute"].split(":")
    env = dict(os.environ, PYNNET3_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())",
         "--compiler.use-shortcut=false", f"--ivectors=ark:{src}/ivectors_test.ark",
         str(src / "1.raw"), f"ark:{src}/feats_test.ark", f"ark:{work}/out.ark"],
        capture_output=True, timeout=300, env=env, cwd=work)


def _summary(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if "disk hits" in line)


@pytest.mark.slow
def test_nnet3_compute_survives_hostile_entries(tmp_path: Path) -> None:
    """nnet3-compute (shortcut off: one entry per request, all read on the next
    run) with its five entries made a FIFO, a link to /dev/zero, a 2 GiB sparse
    file, a directory and a forged entry: one warning each, Kaldi's outputs,
    and all five replaced, so that the next run is served from disk."""
    kaldiio = pytest.importorskip("kaldiio")
    src = reference_dir() / "small" / "tdnn_xent_nnet3_wsj_1b"
    cache = tmp_path / "cache"
    p = _run_compute(src, tmp_path, cache)
    assert p.returncode == 0, p.stderr.decode()
    entries = sorted(cache.iterdir())
    assert len(entries) == 5 and "5 compiled" in _summary(p.stderr.decode())
    good = {e: e.read_bytes() for e in entries}
    fifo, dev_zero, sparse, directory, forged = entries
    for e in entries:
        e.unlink()
    os.mkfifo(fifo)
    dev_zero.symlink_to("/dev/zero")
    with open(sparse, "wb") as f:
        f.truncate(TWO_GIB)
    directory.mkdir()
    # (the entry of another request under this name: checksum right, sizes wrong)
    forged.write_bytes(good[fifo].replace(fifo.stem.encode(), forged.stem.encode()))
    (tmp_path / "out.ark").unlink()

    p = _run_compute(src, tmp_path, cache)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 5, err
    for e in entries:
        assert sum(str(e) in w for w in warnings) == 1, (e, err)
    assert "5 compiled" in _summary(err)
    ours = {k: np.asarray(v) for k, v in kaldiio.load_ark(str(tmp_path / "out.ark"))}
    ref = {k: np.asarray(v) for k, v in kaldiio.load_ark(str(src / "out_a.ark"))}
    assert sorted(ours) == sorted(ref)
    for k in ref:
        np.testing.assert_allclose(ours[k], ref[k], rtol=1e-4, atol=1e-4, err_msg=k)
    for e in entries:
        assert e.is_file() and not e.is_symlink() and e.read_bytes() == good[e]
    assert sorted(cache.iterdir()) == entries

    p = _run_compute(src, tmp_path, cache)
    err = p.stderr.decode()
    assert p.returncode == 0 and "WARNING" not in err, err
    assert "0 compiled" in _summary(err) and "5 disk hits" in _summary(err)


# -- --read-cache / --write-cache bundles of a cache directory ---------------------------


def test_bundle_takes_only_regular_entries(tmp_path: Path, nnet: Nnet,
                                           capsys: pytest.CaptureFixture) -> None:
    from pynnet3.train.cache_file import CacheLocation, bundle_bytes, read_bundle

    good = _valid_entry(tmp_path, nnet)
    d = tmp_path / "dir"
    d.mkdir()
    (d / good.name).write_bytes(good.read_bytes())
    names = [f"{i:064x}.computation" for i in range(3)]
    os.mkfifo(d / names[0])
    (d / names[1]).symlink_to(good)
    with open(d / names[2], "wb") as f:
        f.truncate(TWO_GIB)
    capsys.readouterr()
    status, value = _call_with_timeout(lambda: bundle_bytes(d))
    assert status == "ok", value
    data, count = value
    assert count == 1 and read_bundle(data, "b") == [(good.name, good.read_bytes())]
    warnings = [x for x in capsys.readouterr().err.splitlines() if x.startswith("WARNING")]
    assert len(warnings) == 3 and all("skipping unusable computation cache entry" in w
                                      for w in warnings)
    # --read-cache=<dir> --write-cache=<bundle>: the same entries are carried over.
    loc = _call_with_timeout(lambda: CacheLocation(str(d), str(tmp_path / "bundle")))[1]
    assert sorted(os.listdir(loc.cache_dir)) == [good.name]
    loc.finish()
    assert read_bundle((tmp_path / "bundle").read_bytes(), "b") == [(good.name,
                                                                      good.read_bytes())]
