"""Atomic writes (io/atomic.py) and the archive writers on top of them: a file
appears at its name complete or not at all, temporary files are recognisable
and a killed writer's are cleaned up by the next write to the same name,
special files (/dev/null, FIFOs, links) are written as Kaldi writes them."""
from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from pynnet3.errors import FormatError
from pynnet3.io import atomic
from pynnet3.io.atomic import (HOST_TAG, STALE_SECONDS, AtomicFile, atomic_write, open_atomic,
                               temp_prefix)
from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader, TableWriter


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _temp(directory: Path, name: str, host: str, pid: int, age: float = 0.0) -> Path:
    path = directory / f"{temp_prefix(name)}{host}.{pid}.0badc0de"
    path.write_bytes(b"partial")
    if age:
        t = time.time() - age
        os.utime(path, (t, t))
    return path


def test_temporary_name_and_nothing_at_the_name_until_closed(tmp_path: Path) -> None:
    target = tmp_path / "final.raw"
    f = open_atomic(target)
    assert isinstance(f, AtomicFile)
    f.write(b"abc")
    temp = Path(f.temp_name)
    assert re.fullmatch(rf"\.final\.raw\.pynnet3-tmp\.{re.escape(HOST_TAG)}\.{os.getpid()}"
                        r"\.[0-9a-f]{8}", temp.name)
    assert not target.exists() and temp.parent == tmp_path
    f.close()
    assert target.read_bytes() == b"abc" and os.listdir(tmp_path) == ["final.raw"]
    # A very long name still gives a temporary name the file system accepts.
    long = tmp_path / ("x" * 250)
    atomic_write(long, b"1")
    assert long.read_bytes() == b"1" and os.listdir(tmp_path) == sorted(["final.raw", long.name])


def test_stale_temporary_files_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    name = "out.ark"
    dead = _temp(tmp_path, name, HOST_TAG, _dead_pid())
    live = _temp(tmp_path, name, HOST_TAG, os.getpid())             # a concurrent writer
    elsewhere = _temp(tmp_path, name, "otherhost", 12345)           # pid not checkable here
    old = _temp(tmp_path, name, "otherhost", 12346, age=STALE_SECONDS + 60)
    other_name = _temp(tmp_path, "other.ark", HOST_TAG, _dead_pid())
    atomic_write(tmp_path / name, b"data")
    assert (tmp_path / name).read_bytes() == b"data"
    assert not dead.exists() and not old.exists()
    assert live.exists() and elsewhere.exists() and other_name.exists()


def test_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for name in (tmp_path / "d", f"{tmp_path}/d/"):
        with pytest.raises(IsADirectoryError, match="is a directory"):
            atomic_write(name, b"x")
    with pytest.raises(FileNotFoundError):
        atomic_write(f"{tmp_path}/nodir/", b"x")      # "x/" never names a file
    assert os.listdir(tmp_path) == ["d"] and os.listdir(tmp_path / "d") == []


def test_special_files_are_written_in_place(tmp_path: Path) -> None:
    # /dev/null stays a device (an atomic rename, as root, would replace it:
    # the test gives up such a file rather than close it).
    f = open_atomic("/dev/null")
    try:
        assert not isinstance(f, AtomicFile)
    finally:
        f.abort() if isinstance(f, AtomicFile) else f.close()
    atomic_write("/dev/null", b"x")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    # A FIFO is streamed to.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    atomic_write(fifo, b"through the pipe")
    reader.join(10)
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    # A link stays a link; its target is replaced, keeping its permission bits.
    target = tmp_path / "target"
    target.write_bytes(b"old")
    os.chmod(target, 0o640)
    link = tmp_path / "link"
    link.symlink_to(target)
    atomic_write(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["fifo", "link", "target"]


def test_replace_mode_never_follows_links(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    entry = tmp_path / "entry"
    entry.symlink_to(victim)
    atomic_write(entry, b"entry", replace=True)
    assert not entry.is_symlink() and entry.read_bytes() == b"entry"
    assert victim.read_bytes() == b"keep"


def _matrices() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"utt{i}": rng.standard_normal((3 + i, 4)).astype(np.float32) for i in range(4)}


def test_archive_bytes_unchanged_and_scp_points_at_the_final_name(tmp_path: Path) -> None:
    mats = _matrices()
    with TableWriter(f"ark,scp:{tmp_path}/a.ark,{tmp_path}/a.scp", MATRIX_HOLDER) as w:
        for k, m in mats.items():
            w.write(k, m)
        assert not (tmp_path / "a.ark").exists() and not (tmp_path / "a.scp").exists()
    # The same bytes as streamed through a pipe (written as before).
    with TableWriter(f"ark:| cat > {tmp_path}/piped.ark", MATRIX_HOLDER) as w:
        for k, m in mats.items():
            w.write(k, m)
    assert (tmp_path / "a.ark").read_bytes() == (tmp_path / "piped.ark").read_bytes()
    scp = (tmp_path / "a.scp").read_text()
    assert scp.splitlines()[0].startswith(f"utt0 {tmp_path}/a.ark:")
    with SequentialTableReader(f"scp:{tmp_path}/a.scp", MATRIX_HOLDER) as r:
        back = dict(r)
    assert list(back) == list(mats)
    for k in mats:
        np.testing.assert_array_equal(back[k], mats[k])
    assert sorted(os.listdir(tmp_path)) == ["a.ark", "a.scp", "piped.ark"]


@pytest.mark.parametrize("wspecifier", ["ark:{d}/out.ark", "ark,scp:{d}/out.ark,{d}/out.scp"])
def test_failed_writer_leaves_the_final_names_untouched(tmp_path: Path, wspecifier: str) -> None:
    (tmp_path / "out.ark").write_bytes(b"previous archive")
    spec = wspecifier.format(d=tmp_path)
    with pytest.raises(RuntimeError):
        with TableWriter(spec, MATRIX_HOLDER) as w:
            for i, (k, m) in enumerate(_matrices().items()):
                if i == 2:
                    raise RuntimeError("failed half way")
                w.write(k, m)
    assert (tmp_path / "out.ark").read_bytes() == b"previous archive"
    assert os.listdir(tmp_path) == ["out.ark"]          # no scp, no temporary file


def test_failed_rename_is_a_format_error_and_leaves_nothing(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    w = TableWriter(f"ark:{tmp_path}/out.ark", MATRIX_HOLDER)
    w.write("a", np.zeros((2, 2), np.float32))
    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(FormatError, match="out.ark: could not write: No space left"):
        w.close()
    assert os.listdir(tmp_path) == []


def test_unclosed_atomic_file_is_removed_when_dropped(tmp_path: Path) -> None:
    f = open_atomic(tmp_path / "x")
    f.write(b"partial")
    del f
    assert os.listdir(tmp_path) == []


def _small_nnet():
    from pynnet3.nnet.nnet import Nnet

    nnet = Nnet()
    nnet.read_config(
        "input-node name=input dim=300\n"
        "component name=a type=NaturalGradientAffineComponent input-dim=300 output-dim=400\n"
        "component-node name=a component=a input=input\n"
        "output-node name=output input=a\n")
    comp = nnet.get_component(0)      # the same values in every process
    comp.linear_params[...] = np.sin(np.arange(comp.linear_params.size)).reshape(
        comp.linear_params.shape)
    comp.bias_params[...] = np.cos(np.arange(comp.bias_params.size))
    return nnet


@pytest.mark.parametrize("binary", [True, False])
def test_model_written_in_pieces_is_the_joined_bytes(tmp_path: Path, binary: bool) -> None:
    """write_nnet hands the model's pieces (large matrices as views) to the
    file, the pipe or stdout without joining them: the bytes are those of
    nnet_bytes, the old single buffer, wherever they go."""
    from pynnet3.compile.model_io import nnet_bytes, write_nnet
    from pynnet3.io.kaldi_io import KaldiWriter, kaldi_object_parts

    nnet = _small_nnet()
    want = nnet_bytes(nnet, binary)
    w = KaldiWriter(binary)
    nnet.write(w)
    parts = kaldi_object_parts(w)
    if binary:
        assert any(isinstance(p, memoryview) for p in parts)     # a view, not a copy
    assert b"".join(parts) == want
    (tmp_path / "m.raw").write_bytes(b"previous model")
    write_nnet(str(tmp_path / "m.raw"), nnet, binary)
    write_nnet(f"| cat > {tmp_path / 'p.raw'}", nnet, binary)
    assert (tmp_path / "m.raw").read_bytes() == want
    assert (tmp_path / "p.raw").read_bytes() == want
    code = ("import sys; from tests.test_atomic_writes import _small_nnet; "
            "from pynnet3.compile.model_io import write_nnet; "
            f"write_nnet('-', _small_nnet(), {binary})")
    p = subprocess.run([os.sys.executable, "-c", code], capture_output=True, check=True,
                       cwd=Path(__file__).resolve().parents[1])
    assert p.stdout == want
    assert sorted(os.listdir(tmp_path)) == ["m.raw", "p.raw"]


def test_model_write_failing_half_way_leaves_the_old_file(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from pynnet3.compile.model_io import write_nnet

    (tmp_path / "m.raw").write_bytes(b"previous model")
    real = atomic._write_all

    def failing(f, data) -> None:
        real(f, list(data)[:2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic, "_write_all", failing)
    with pytest.raises(FormatError, match="No space left"):
        write_nnet(str(tmp_path / "m.raw"), _small_nnet(), True)
    assert (tmp_path / "m.raw").read_bytes() == b"previous model"
    assert os.listdir(tmp_path) == ["m.raw"]
