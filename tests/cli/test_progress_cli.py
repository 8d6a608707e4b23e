"""The progress line on stderr: drawn when stderr is a terminal (a pseudo-
terminal here), absent when it is a pipe or file; LOG lines the same either way."""
from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from pynnet3.cli import BINARIES

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """input-node name=input dim=6
component name=a1 type=AffineComponent input-dim=18 output-dim=8
component-node name=a1 component=a1 input=Append(Offset(input, -1), input, Offset(input, 1))
component name=r1 type=RectifiedLinearComponent dim=8
component-node name=r1 component=r1 input=a1
component name=a2 type=AffineComponent input-dim=8 output-dim=5
component-node name=a2 component=a2 input=r1
component name=sm type=LogSoftmaxComponent dim=5
component-node name=sm component=sm input=a2
output-node name=output input=sm
"""
BAR = "\r\x1b[K"


def _cmd(*args: str) -> list[str]:
    module, func = BINARIES[args[0]].split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())",
            *args[1:]]


def _env(tmp: Path) -> dict[str, str]:
    return dict(os.environ, PYNNET3_CACHE_DIR=str(tmp / "cache"),
                PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _run_pipe(args: list[str], tmp: Path) -> str:
    p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
                       env=_env(tmp))
    assert p.returncode == 0, p.stderr.decode()
    return p.stderr.decode()


def _run_pty(args: list[str], tmp: Path) -> str:
    """stderr on a pseudo-terminal (stdout to /dev/null); what the terminal got."""
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=slave, env=_env(tmp))
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:      # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert p.wait(timeout=300) == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def _log_lines(text: str) -> list[str]:
    """The LOG lines without the progress line's redraws, and without the
    timing figures that change from run to run."""
    text = re.sub(r"\r\x1b\[K[^\r]*\r", "", text).replace("\r\x1b[K", "")
    lines = [ln for ln in text.splitlines() if ln.startswith("LOG")]
    return [re.sub(r"[0-9.e-]+ ?s(econds)?\b.*", "", ln) for ln in lines
            if "seconds taken" not in ln and "Time taken" not in ln]


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("progress")
    (tmp / "nnet.config").write_text(CONFIG)
    rng = np.random.default_rng(0)
    with kaldiio.WriteHelper(f"ark:{tmp}/feats.ark") as f, open(tmp / "post.txt", "w") as post:
        for u in range(12):
            x = rng.standard_normal((int(rng.integers(20, 40)), 6)).astype(np.float32)
            f(f"u{u:02d}", x)
            post.write(f"u{u:02d} " + " ".join(f"[ {k} 1 ]" for k in
                                               rng.integers(0, 5, x.shape[0])) + "\n")
    for args in (["nnet3-init", str(tmp / "nnet.config"), str(tmp / "0.raw")],
                 ["nnet3-get-egs", "--num-pdfs=5", "--left-context=1", "--right-context=1",
                  f"ark:{tmp}/feats.ark", f"ark:{tmp}/post.txt", f"ark:{tmp}/egs.ark"],
                 ["nnet3-merge-egs", "--minibatch-size=8", f"ark:{tmp}/egs.ark",
                  f"ark:{tmp}/mb.ark"]):
        _run_pipe(_cmd(*args), tmp)
    return tmp


@pytest.mark.parametrize("binary", [
    pytest.param("nnet3-compute", marks=pytest.mark.slow),
    pytest.param("nnet3-train", marks=pytest.mark.slow),
    "nnet3-compute-prob"])
def test_progress_line_on_a_terminal_only(setup: Path, binary: str) -> None:
    tmp = setup
    args = {
        "nnet3-compute": ["nnet3-compute", str(tmp / "0.raw"), f"ark:{tmp}/feats.ark",
                          f"ark:{tmp}/out.ark"],
        "nnet3-train": ["nnet3-train", str(tmp / "0.raw"), f"ark:{tmp}/mb.ark",
                        str(tmp / "1.raw")],
        "nnet3-compute-prob": ["nnet3-compute-prob", str(tmp / "0.raw"), f"ark:{tmp}/mb.ark"],
    }[binary]
    piped = _run_pipe(_cmd(*args), tmp)
    terminal = _run_pty(_cmd(*args), tmp)
    assert BAR not in piped and f"{binary}: " not in piped
    assert BAR in terminal
    assert re.search(re.escape(binary) + r": \d+ done, \d+ frames \(\d+ frames/s", terminal)
    assert terminal.count(BAR) >= 2          # drawn, then cleared at the end
    assert _log_lines(terminal) == _log_lines(piped)
