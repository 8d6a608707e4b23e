"""The egs binaries against real Kaldi's outputs and logs (reference/train/<case>)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pynnet3.cli import BINARIES
from tests.helpers import reference_dir


def run(*args: str, stdin: bytes | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-c", code, *args[1:]], input=stdin, cwd=cwd,
                          capture_output=True, timeout=300,
                          env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin"})


def case(name: str = "affine_xent") -> Path:
    d = reference_dir() / "train" / name
    if not d.is_dir():
        pytest.skip(f"no reference case {d}")
    return d


def log_messages(stderr: str) -> list[str]:
    """The text of the LOG/WARNING lines, without Kaldi's ``LOG (prog[version]:where) `` prefix."""
    return [re.sub(r"^(LOG|WARNING) \(.*?\.(?:py|cc):\d+\) ", r"\1 ", line)
            for line in stderr.splitlines() if line.startswith(("LOG (", "WARNING ("))]


def test_get_egs_reproduces_kaldi(tmp_path: Path) -> None:
    d = case()
    out = tmp_path / "egs_cm.ark"
    p = run("nnet3-get-egs", "--num-pdfs=32", "--left-context=2", "--right-context=2",
            "--num-frames=8", f"--chunk-starts=ark:{d}/egs_cm.ark",
            f"ark:{d}/feats.ark", f"ark:{d}/post.ark", f"ark:{out}")
    assert p.returncode == 0, p.stderr.decode()
    assert out.read_bytes() == (d / "egs_cm.ark").read_bytes()
    kaldi = log_messages((d / "log.get_egs_cm.txt").read_text())
    assert log_messages(p.stderr.decode()) == kaldi


def test_copy_shuffle_merge_pipeline(tmp_path: Path) -> None:
    d = case("quadratic")
    p = run("nnet3-copy-egs", f"ark:{d}/egs.ark", f"ark,t:{tmp_path}/egs.txt.ark")
    assert p.returncode == 0, p.stderr.decode()
    assert (tmp_path / "egs.txt.ark").read_bytes() == (d / "egs.txt.ark").read_bytes()
    assert log_messages(p.stderr.decode()) == log_messages((d / "log.copy_egs.txt").read_text())
    # nnet3-shuffle-egs --srand=1 ... ark:- | nnet3-merge-egs --minibatch-size=16 ark:- ...
    shuf = run("nnet3-shuffle-egs", "--srand=1", f"ark:{d}/egs.ark", "ark:-")
    assert shuf.returncode == 0 and shuf.stdout == (d / "shuffled.ark").read_bytes()
    assert log_messages(shuf.stderr.decode()) == log_messages((d / "log.shuffle.txt").read_text())
    merge = run("nnet3-merge-egs", "--minibatch-size=16", "ark:-", f"ark:{tmp_path}/sm.ark",
                stdin=shuf.stdout)
    assert merge.returncode == 0, merge.stderr.decode()
    assert (tmp_path / "sm.ark").read_bytes() == (d / "shuffled_merged.ark").read_bytes()
    assert log_messages(merge.stderr.decode()) == log_messages((d / "log.merge_shuffled.txt").read_text())


def test_merge_options_and_errors(tmp_path: Path) -> None:
    d = case()
    p = run("nnet3-merge-egs", "--minibatch-size=16", "--measure-output-frames=false",
            f"ark:{d}/egs.ark", f"ark:{tmp_path}/m.ark")
    assert p.returncode == 0
    assert "WARNING The --measure-output-frames option is deprecated and will be ignored." \
        in log_messages(p.stderr.decode())
    assert (tmp_path / "m.ark").read_bytes() == (d / "merged.ark").read_bytes()
    for args, text in ((["--minibatch-size=0", f"ark:{d}/egs.ark", "ark:/dev/null"],
                        "--minibatch-size=0"),
                       ([f"ark:{tmp_path}/missing.ark", "ark:/dev/null"], "missing.ark"),
                       (["egs.ark", "ark:/dev/null"], "invalid rspecifier")):
        p = run("nnet3-merge-egs", *args)
        err = p.stderr.decode()
        assert p.returncode == 1 and "Traceback" not in err
        assert err.strip().splitlines()[-1].startswith("ERROR (nnet3-merge-egs") and text in err


def test_get_egs_usage(tmp_path: Path) -> None:
    d = case()
    p = run("nnet3-get-egs", "--left-context=2", f"ark:{d}/feats.ark", f"ark:{d}/post.ark",
            f"ark:{tmp_path}/x.ark")
    assert p.returncode == 1 and "--num-pdfs options is required." in p.stderr.decode()
    p = run("nnet3-get-egs-dense-targets", "--help")
    assert p.returncode == 0 and "nnet3-get-egs-dense-targets --num-targets=<n>" in p.stdout.decode()
    p = run("nnet3-copy-egs", f"ark:{d}/egs.ark")
    assert p.returncode == 1 and "Usage:  nnet3-copy-egs" in p.stderr.decode()
