"""Hostile inputs to the binaries, as Kaldi treats them: bytes in configs,
int32 ranges, duplicate keys, failing pipes, permissive tables and output
pipes.  Binaries run in this process (tests/helpers.py: run_binary); each
refused input must end in exit status 1 and exactly one ERROR line."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import run_binary

CONFIG = (b"input-node name=input dim=3\n"
          b"component name=a type=AffineComponent input-dim=3 output-dim=4\n"
          b"component-node name=a component=a input=input\n"
          b"output-node name=output input=a\n")


def error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("ERROR (")]


def refused(capsys: pytest.CaptureFixture, status: int) -> str:
    """The one ERROR line of a run that must have failed with status 1."""
    err = capsys.readouterr().err
    assert status == 1, err
    assert "Traceback" not in err and "internal error" not in err
    errors = error_lines(err)
    assert len(errors) == 1, err
    return errors[0]


# ---------------------------------------------------------------------------
# Item 3: configs are bytes


def test_init_accepts_latin1_comments(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(b"# r\xe9seau\n" + CONFIG.replace(b"dim=3\n", b"dim=3 # entr\xe9e\n", 1))
    assert run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")) == 0
    assert (tmp_path / "0.raw").is_file()


def test_init_refuses_latin1_outside_comment(tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG.replace(b"name=a type", b"name=a\xe9 type", 1))
    line = refused(capsys, run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")))
    assert f"{conf}:2: byte 0xe9 at column 17" in line
    assert not (tmp_path / "0.raw").exists()


def test_copy_nnet_config_and_edits_config_bytes(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG)
    raw = tmp_path / "0.raw"
    assert run_binary("nnet3-init", str(conf), str(raw)) == 0
    add = tmp_path / "add.config"
    add.write_bytes(b"# \xe0 ajouter\ncomponent name=a type=AffineComponent input-dim=3 "
                    b"output-dim=4 learning-rate=0.25 # \xe9\n")
    edits = tmp_path / "edits.config"
    edits.write_bytes(b"# \xe9dition\nset-learning-rate learning-rate=0.5\n")
    out = tmp_path / "1.txt"
    assert run_binary("nnet3-copy", "--binary=false", f"--nnet-config={add}",
                      f"--edits-config={edits}", str(raw), str(out)) == 0
    assert b"<LearningRate> 0.5 " in out.read_bytes()
    edits.write_bytes(b"set-learning-rate learning-rate=0.5 \xe9=1\n")
    line = refused(capsys, run_binary("nnet3-copy", f"--edits-config={edits}", str(raw),
                                      str(out)))
    assert f"{edits}:1: byte 0xe9 at column 37" in line


def test_option_config_file_bytes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG)
    opts = tmp_path / "opts.conf"
    opts.write_bytes(b"# options \xe9crites \xe0 la main\n--binary=false  # \xe9\n")
    out = tmp_path / "0.raw"
    assert run_binary("nnet3-init", f"--config={opts}", str(conf), str(out)) == 0
    assert out.read_bytes().startswith(b"<Nnet3> ")
    opts.write_bytes(b"--binary=f\xe9lse\n")
    line = refused(capsys, run_binary("nnet3-init", f"--config={opts}", str(conf), str(out)))
    assert f"{opts}:1: byte 0xe9 at column 11" in line


# ---------------------------------------------------------------------------
# Item 5: int32 values


@pytest.mark.parametrize("dims,key", [
    ("input-dim=2147483648 output-dim=4", "input-dim=2147483648"),
    ("input-dim=3 output-dim=99999999999999999999", "output-dim=99999999999999999999"),
])
def test_init_refuses_values_beyond_int32(tmp_path: Path, capsys: pytest.CaptureFixture,
                                          dims: str, key: str) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG.replace(b"input-dim=3 output-dim=4", dims.encode()))
    line = refused(capsys, run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")))
    assert f"{conf}:2:" in line and key in line and "-2147483648 .. 2147483647" in line


@pytest.mark.parametrize("dims,expect", [
    ("input-dim=-3 output-dim=4", "must be positive"),
    ("input-dim=2147483647 output-dim=2147483647", "not enough memory"),
])
def test_init_refuses_impossible_dims(tmp_path: Path, capsys: pytest.CaptureFixture,
                                      dims: str, expect: str) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG.replace(b"input-dim=3 output-dim=4", dims.encode()))
    line = refused(capsys, run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")))
    assert f"{conf}:2:" in line and expect in line
