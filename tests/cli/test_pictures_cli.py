"""The pictures: nnet3-info --graph, nnet3-compile --plot-memory, nnet3-plot-progress."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pynnet3.cli import BINARIES
from tests.helpers import vosk_model_path

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config"
PNG = b"\x89PNG\r\n\x1a\n"


def run(*args: str, cache: Path) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    env = dict(os.environ, PYNNET3_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, *args[1:]], capture_output=True,
                          timeout=300, env=env)


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG and data[12:16] == b"IHDR"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pictures")
    out = d / "0.raw"
    p = run("nnet3-init", str(CONFIG), str(out), cache=d / "cache")
    assert p.returncode == 0, p.stderr.decode()
    return out


def test_info_graph_png_and_svg(raw: Path, tmp_path: Path) -> None:
    png = tmp_path / "net.png"
    p = run("nnet3-info", f"--graph={png}", str(raw), cache=tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert b"num-parameters:" in p.stdout        # the usual text is still printed
    assert b"Wrote the graph of" in p.stderr
    w, h = _png_size(png)
    assert 300 <= w <= 4000 and 200 <= h <= 4000 and png.stat().st_size > 5000
    svg = tmp_path / "net.svg"
    p = run("nnet3-info", f"--graph={svg}", str(raw), cache=tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    bad = run("nnet3-info", f"--graph={tmp_path / 'net.txt'}", str(raw), cache=tmp_path)
    assert bad.returncode != 0 and b"must end in" in bad.stderr
    assert not (tmp_path / "net.txt").exists()
    nodir = run("nnet3-info", f"--graph={tmp_path / 'no' / 'net.png'}", str(raw), cache=tmp_path)
    assert nodir.returncode == 1 and b"no such directory" in nodir.stderr


def test_info_graph_of_vosk_model(tmp_path: Path) -> None:
    mdl = vosk_model_path()
    png = tmp_path / "vosk.png"
    p = run("nnet3-info", f"--graph={png}", str(mdl), cache=tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert b"Wrote the graph of 107 nodes in 99 levels" in p.stderr
    w, h = _png_size(png)
    assert 1000 <= w <= 6000 and 800 <= h <= 4000


def test_compile_plot_memory(raw: Path, tmp_path: Path) -> None:
    png = tmp_path / "mem.png"
    p = run("nnet3-compile", "--num-sequences=4", "--frames-per-chunk=6",
            "--need-model-derivative", "--use-disk-cache=false", f"--plot-memory={png}",
            str(raw), cache=tmp_path)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "Wrote the memory profile to" in err and "backward pass from c" in err
    w, h = _png_size(png)
    assert (w, h) == (900, 420) and png.stat().st_size > 10000


def test_plot_progress(tmp_path: Path) -> None:
    log = tmp_path / "exp" / "log"
    log.mkdir(parents=True)
    line = ("LOG (nnet3-compute-prob[pynnet3]:print_total_stats():diagnostics.py:182) "
            "Overall log-likelihood for 'output' is {} per frame, over 100 frames.\n"
            "LOG (nnet3-compute-prob[pynnet3]:print_total_stats():diagnostics.py:188) "
            "Overall accuracy for 'output' is {} per frame, over 100 frames.\n")
    for it in range(4):
        for s, off in (("valid", 0.1), ("train", 0.0)):
            (log / f"compute_prob_{s}.{it}.log").write_text(
                line.format(-3 / (it + 1) - off, 0.2 * it + 0.1 - off))
    (log / "compute_prob_valid.combined.log").write_text(line.format(-0.8, 0.75))
    png = tmp_path / "progress.png"
    p = run("nnet3-plot-progress", str(tmp_path / "exp"), str(png), cache=tmp_path)
    assert p.returncode == 0, p.stderr.decode()
    assert b"Read 9 logs" in p.stderr and b"last valid log-likelihood -0.85 (iteration 3)" \
        in p.stderr
    assert _png_size(png) == (1100, 420)
    empty = run("nnet3-plot-progress", str(tmp_path), str(tmp_path / "x.png"), cache=tmp_path)
    assert empty.returncode == 1 and b"nothing to plot" in empty.stderr
    assert not (tmp_path / "x.png").exists()
    usage = run("nnet3-plot-progress", str(tmp_path), cache=tmp_path)
    assert usage.returncode == 1 and b"Usage:  nnet3-plot-progress" in usage.stderr


def test_binaries_that_draw_nothing_do_not_import_matplotlib(raw: Path, tmp_path: Path) -> None:
    code = ("import sys\n"
            "from pynnet3.cli.info import main\n"
            f"sys.argv = ['nnet3-info', {str(raw)!r}]\n"
            "rc = main()\n"
            "print('matplotlib' in sys.modules, file=sys.stderr)\n"
            "sys.exit(rc)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep +
               os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stderr.decode().strip().splitlines()[-1] == "False"
