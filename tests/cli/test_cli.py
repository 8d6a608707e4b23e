"""The binaries: Kaldi option syntax, exit codes, one-line errors, pipes."""
from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pynnet3.cli import BINARIES
from pynnet3.cli.common import normalize_argv
from pynnet3.cli.copy import command as copy_command
from pynnet3.dispatch import DISPATCHERS

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config"


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    name = args[0]
    module, func = BINARIES[name].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    return subprocess.run([sys.executable, "-c", code, *args[1:]], input=stdin,
                          capture_output=True, timeout=300)


def test_pyproject_lists_every_binary() -> None:
    with open(ROOT / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    # the nnet3 binaries, and the job runners cmd.sh names (run.pl, queue.pl, slurm.pl)
    assert scripts == {**BINARIES, **DISPATCHERS}
    for name in {**BINARIES, **DISPATCHERS}:
        assert (ROOT / "bin" / name).exists(), f"bin/{name} launcher missing"


def test_kaldi_option_forms() -> None:
    argv = normalize_argv(["--binary", "--learning_rate", "0.5", "--prepare-for-test", "false",
                           "in", "--scale=2", "out"], copy_command)
    assert argv == ["--binary=true", "--learning-rate", "0.5", "--prepare-for-test=false",
                    "in", "--scale=2", "out"]


def test_config_file_options_are_overridden(tmp_path: Path) -> None:
    conf = tmp_path / "opts.conf"
    conf.write_text("# comment\n--binary=false\n--scale=3\n")
    argv = normalize_argv([f"--config={conf}", "--scale=2", "a", "b"], copy_command)
    assert argv == ["--binary=false", "--scale=3", "--scale=2", "a", "b"]


def test_init_info_copy_pipeline(tmp_path: Path) -> None:
    raw = tmp_path / "0.raw"
    p = run("nnet3-init", "--srand=3", str(CONFIG), str(raw))
    assert p.returncode == 0, p.stderr.decode()
    err = p.stderr.decode()
    assert err.splitlines()[0].startswith("nnet3-init --srand=3")
    assert re.search(r"^LOG \(nnet3-init\[.*\]:.*\) Initialized raw neural net and wrote it to ", err, re.M)
    assert raw.read_bytes()[:2] == b"\0B"
    info = run("nnet3-info", str(raw))
    assert info.returncode == 0
    text = info.stdout.decode()
    assert text.startswith("left-context: 5\nright-context: 5\n")
    # Text copy through a pipe, then read back from stdin.
    txt = tmp_path / "0.txt"
    p = run("nnet3-copy", "--binary=false", str(raw), f"| cat > {txt}")
    assert p.returncode == 0, p.stderr.decode()
    assert txt.read_bytes().startswith(b"<Nnet3> \n")
    p = run("nnet3-info", "-", stdin=txt.read_bytes())
    assert p.returncode == 0 and p.stdout.decode().splitlines()[:4] == text.splitlines()[:4]


def test_usage_error_exit_code() -> None:
    p = run("nnet3-info")
    assert p.returncode == 1
    err = p.stderr.decode()
    assert "Usage:  nnet3-info" in err and "ERROR (nnet3-info" in err
    assert "Traceback" not in err


def test_help_exits_zero() -> None:
    p = run("nnet3-init", "--help")
    assert p.returncode == 0
    assert "nnet3-init nnet.config 0.raw" in p.stdout.decode()


@pytest.mark.parametrize("content", [b"", b"\0B<Nnet3> \ninput-node name=input dim=3\n",
                                     b"<Nnet3> \ninput-node name=input dim=3\noutput-node name=output input=input\n\n<NumComponents> 1 \n<ComponentName> x <Bogus> "])
def test_corrupt_model_is_one_line_error(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "bad.raw"
    bad.write_bytes(content)
    p = run("nnet3-info", str(bad))
    assert p.returncode == 1
    err = p.stderr.decode().strip().splitlines()
    assert "Traceback" not in p.stderr.decode()
    assert err[-1].startswith("ERROR (nnet3-info") and "bad.raw" in err[-1]


def test_truncated_binary_model(tmp_path: Path) -> None:
    raw = tmp_path / "0.raw"
    assert run("nnet3-init", str(CONFIG), str(raw)).returncode == 0
    data = raw.read_bytes()
    cut = tmp_path / "cut.raw"
    cut.write_bytes(data[: len(data) * 2 // 3])
    p = run("nnet3-info", str(cut))
    assert p.returncode == 1
    last = p.stderr.decode().strip().splitlines()[-1]
    assert last.startswith("ERROR (nnet3-info") and "cut.raw" in last and "truncated" in last


def test_bad_config_reports_file_and_line(tmp_path: Path) -> None:
    conf = tmp_path / "bad.config"
    conf.write_text("input-node name=input dim=10\ncomponent name=a type=AffineComponent input-dim=x\n")
    p = run("nnet3-init", str(conf), str(tmp_path / "x.raw"))
    assert p.returncode == 1
    last = p.stderr.decode().strip().splitlines()[-1]
    assert f"{conf}:2" in last and "input-dim" in last
    assert not (tmp_path / "x.raw").exists()


def test_init_accepts_negative_srand(tmp_path):
    # Kaldi's training scripts run nnet3-init --srand=-2 (srand takes it modulo 2^32).
    cfg = tmp_path / "init.config"
    cfg.write_text("input-node name=input dim=3\n"
                   "component name=a type=AffineComponent input-dim=3 output-dim=2\n"
                   "component-node name=a component=a input=input\n"
                   "output-node name=output input=a\n")
    outs = []
    for seed in ("-2", "-2", "5"):
        out = tmp_path / f"{seed}.{len(outs)}.raw"
        r = run("nnet3-init", f"--srand={seed}", str(cfg), str(out))
        assert r.returncode == 0, r.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and outs[0] != outs[2]
