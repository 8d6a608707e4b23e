"""nnet3-train, nnet3-compute-prob, nnet3-average and nnet3-show-progress
against real Kaldi runs (/work/shared/reference/train)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from pynnet3.compile.model_io import read_nnet
from tests.helpers import curated, reference_dir

CASES = curated("train", ["affine_xent", "quadratic", "momentum_l2", "ngaffine_bn"])
FLOAT = r"(?<![\w.])(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf))"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    return subprocess.run([sys.executable, "-c", code, *args[1:]], capture_output=True,
                          timeout=300, cwd=cwd)


def case_dir(case: str) -> Path:
    d = reference_dir() / "train" / case
    if not d.is_dir():
        pytest.skip(f"no Kaldi training reference {d}")
    return d


def kaldi_train_options(case: str) -> list[str]:
    """The options of the first nnet3-train line of commands.txt."""
    for line in (case_dir(case) / "commands.txt").read_text().splitlines():
        if line.startswith("nnet3-train ") and "merged.ark 1.raw" in line:
            return [a for a in line.split()[1:] if a.startswith("--")]
    raise AssertionError("no nnet3-train line in commands.txt")


def messages(stderr: bytes) -> list[str]:
    """LOG/WARNING lines without the '(program[version]:function():file:line)' prefix."""
    return [ln.split(") ", 1)[1] for ln in stderr.decode().splitlines()
            if ln.startswith(("LOG (", "WARNING ("))]


@pytest.mark.parametrize("case", CASES)
def test_average_is_byte_identical(tmp_path: Path, case: str) -> None:
    d = case_dir(case)
    out = tmp_path / "avg.raw"
    p = run("nnet3-average", str(d / "1.raw"), str(d / "1b.raw"), str(out))
    assert p.returncode == 0, p.stderr.decode()
    assert out.read_bytes() == (d / "avg.raw").read_bytes()
    assert messages(p.stderr)[-1] == f"Averaged parameters of 2 neural nets, and wrote to {out}"


def test_average_weights_and_threads(tmp_path: Path) -> None:
    """--weights are normalised; with more models Kaldi sums in per-thread
    groups, which changes nothing beyond float rounding."""
    d = case_dir("affine_xent")
    models = [str(d / n) for n in ("0.raw", "1.raw", "1b.raw", "1.raw", "1b.raw", "0.raw",
                                   "1.raw")]
    out = tmp_path / "w.raw"
    p = run("nnet3-average", "--weights=1:1:2:1:1:1:1", *models, str(out))
    assert p.returncode == 0, p.stderr.decode()
    nets = [read_nnet(m) for m in models]
    w = np.array([1, 1, 2, 1, 1, 1, 1], dtype=np.float64) / 8
    got = read_nnet(str(out))
    for c, comp in enumerate(got.components):
        if comp.is_updatable():
            want = sum(wi * n.components[c].linear_params.astype(np.float64)
                       for wi, n in zip(w, nets))
            np.testing.assert_allclose(comp.linear_params, want, rtol=1e-5, atol=1e-6)
    bad = run("nnet3-average", "--weights=1:2", *models[:3], str(out))
    assert bad.returncode == 1 and b"colon-separated list with 3 elements" in bad.stderr


@pytest.mark.parametrize("case", CASES)
def test_compute_prob_log_lines_match_kaldi(case: str) -> None:
    d = case_dir(case)
    for model in ("1",):          # (1b, avg and 0: tests/train/test_trainer.py)
        p = run("nnet3-compute-prob", str(d / f"{model}.raw"), f"ark:{d / 'merged.ark'}")
        assert p.returncode == 0, p.stderr.decode()
        kaldi = [m for m in messages((d / f"log.compute_prob.{model}.txt").read_bytes())
                 if m.startswith("Overall")]
        ours = [m for m in messages(p.stderr) if m.startswith("Overall")]
        assert len(ours) == len(kaldi) == 2
        for o, k in zip(ours, kaldi):
            o_nums = [float(x) for x in re.findall(FLOAT, o)]
            k_nums = [float(x) for x in re.findall(FLOAT, k)]
            assert re.sub(FLOAT, "#", o) == re.sub(FLOAT, "#", k)
            assert o_nums == pytest.approx(k_nums, rel=1e-4)


def test_compute_prob_batchnorm_train_mode() -> None:
    """ngaffine_bn 0.raw has no batch-norm stats: Kaldi's test mode invents
    random ones (warning); --batchnorm-test-mode=false gives its exact numbers."""
    d = case_dir("ngaffine_bn")
    p = run("nnet3-compute-prob", "--batchnorm-test-mode=false", str(d / "0.raw"),
            f"ark:{d / 'merged.ark'}")
    assert p.returncode == 0, p.stderr.decode()
    text = "\n".join(messages(p.stderr))
    assert "Overall log-likelihood for 'output' is -4.28363 per frame, over 2003 frames." in text
    assert "Overall accuracy for 'output' is 0.0242137 per frame, over 2003 frames." in text
    p = run("nnet3-compute-prob", str(d / "0.raw"), f"ark:{d / 'merged.ark'}")
    assert p.returncode == 0
    assert sum("Test-mode is set but there is no data count" in m
               for m in messages(p.stderr)) == 2


def test_compute_prob_per_dim_accuracy() -> None:
    d = case_dir("affine_xent")
    p = run("nnet3-compute-prob", "--compute-per-dim-accuracy", str(d / "1.raw"),
            f"ark:{d / 'merged.ark'}")
    assert p.returncode == 0, p.stderr.decode()
    err = p.stderr.decode()
    m = re.search(r"Overall per-dim accuracy vector for 'output' is  \[ ([^\]]*)\]\n per frame, "
                  r"over 2003 frames\.", err)
    assert m is not None, err
    values = [float(v) for v in m.group(1).split()]
    assert len(values) == 32 and all(v == -1 or 0 <= v <= 1 for v in values)


@pytest.mark.parametrize("case", curated("train", ["affine_xent", "momentum_l2"]))
def test_train_matches_kaldi(tmp_path: Path, case: str) -> None:
    """nnet3-train --srand=1 [Kaldi's options] 0.raw ark:merged.ark: the model
    matches Kaldi's 1.raw to float precision and the LOG lines are Kaldi's."""
    d = case_dir(case)
    out = tmp_path / "1.raw"
    p = run("nnet3-train", *kaldi_train_options(case), str(d / "0.raw"),
            f"ark:{d / 'merged.ark'}", str(out))
    assert p.returncode == 0, p.stderr.decode()
    ours, kaldi = read_nnet(str(out)), read_nnet(str(d / "1.raw"))
    for a, b in zip(ours.components, kaldi.components):
        if a.is_updatable():
            for attr in ("linear_params", "bias_params"):
                x, y = getattr(a, attr), getattr(b, attr)
                assert np.abs(x - y).max() <= 1e-4 * np.abs(y).max()
    kaldi_msgs = messages((d / "log.train.txt").read_bytes())
    ours_msgs = messages(p.stderr)
    # Every Kaldi line up to 'Wrote model' (max-change, objective, stats) in
    # order, with numbers equal to the printed precision (or 1e-4).
    k_lines = kaldi_msgs[:kaldi_msgs.index("Wrote model to 1.raw")]
    o_lines = [m for m in ours_msgs if not m.startswith(("Manually selected",))]
    o_lines = o_lines[:o_lines.index(f"Wrote model to {out}")]
    assert [re.sub(FLOAT, "#", m) for m in o_lines] == [re.sub(FLOAT, "#", m) for m in k_lines]
    for o, k in zip(o_lines, k_lines):
        assert [float(x) for x in re.findall(FLOAT, o)] == \
            pytest.approx([float(x) for x in re.findall(FLOAT, k)], rel=1e-4)
    assert out.read_bytes()[:2] == b"\0B"


def test_train_cache_files(tmp_path: Path) -> None:
    """--write-cache writes a bundle; --read-cache of it compiles nothing and
    gives the same model; Kaldi's own cache file is refused with a warning."""
    d = case_dir("quadratic")
    egs = f"ark:{d / 'merged.ark'}"
    p1 = run("nnet3-train", "--srand=1", f"--write-cache={tmp_path / 'cache.1'}",
             str(d / "0.raw"), egs, str(tmp_path / "a.raw"))
    assert p1.returncode == 0, p1.stderr.decode()
    assert (tmp_path / "cache.1").read_bytes().startswith(b"pynnet3-computation-cache-bundle")
    assert f"Wrote computation cache to {tmp_path / 'cache.1'}" in messages(p1.stderr)
    p2 = run("nnet3-train", "--srand=1", f"--read-cache={tmp_path / 'cache.1'}",
             f"--write-cache={tmp_path / 'cache.2'}", str(d / "0.raw"), egs,
             str(tmp_path / "b.raw"))
    assert p2.returncode == 0, p2.stderr.decode()
    assert f"Read computation cache from {tmp_path / 'cache.1'}" in messages(p2.stderr)
    assert re.search(r" 0 compiled, \d+ memory hits, [1-9]\d* disk hits", p2.stderr.decode())
    assert (tmp_path / "a.raw").read_bytes() == (tmp_path / "b.raw").read_bytes()
    assert (tmp_path / "cache.2").read_bytes() == (tmp_path / "cache.1").read_bytes()
    # A directory works as the cache itself.
    cache_dir = tmp_path / "cdir"
    cache_dir.mkdir()
    p3 = run("nnet3-train", "--srand=1", f"--write-cache={cache_dir}", str(d / "0.raw"), egs,
             str(tmp_path / "c.raw"))
    assert p3.returncode == 0 and any(cache_dir.iterdir())
    p4 = run("nnet3-train", "--srand=1", f"--read-cache={d / 'cache.1'}", str(d / "0.raw"),
             egs, str(tmp_path / "d.raw"))
    assert p4.returncode == 0, p4.stderr.decode()
    assert any("is a Kaldi computation cache, which pynnet3 cannot read" in m
               for m in messages(p4.stderr))
    assert (tmp_path / "d.raw").read_bytes() == (tmp_path / "a.raw").read_bytes()


def test_train_and_compute_prob_use_the_disk_cache(tmp_path: Path) -> None:
    """Without --read-cache/--write-cache, nnet3-train keeps its computations
    in the on-disk cache (--cache-dir): a second run loads them (compiling
    nothing) and writes the same model bytes as a run without the cache;
    --read-cache takes the disk cache's place; nnet3-compute-prob uses it too."""
    d = case_dir("quadratic")
    egs = f"ark:{d / 'merged.ark'}"
    cache = tmp_path / "disk"
    p0 = run("nnet3-train", "--srand=1", "--use-disk-cache=false", str(d / "0.raw"), egs,
             str(tmp_path / "none.raw"))
    assert p0.returncode == 0, p0.stderr.decode()
    assert " 0 disk hits" in p0.stderr.decode()
    outs = []
    for i in range(2):
        out = tmp_path / f"{i}.raw"
        p = run("nnet3-train", "--srand=1", f"--cache-dir={cache}", str(d / "0.raw"), egs,
                str(out))
        assert p.returncode == 0, p.stderr.decode()
        outs.append(out.read_bytes())
        summary = p.stderr.decode()
        if i == 0:
            assert re.search(r" [1-9]\d* compiled, \d+ memory hits, 0 disk hits", summary)
            entries = sorted(cache.iterdir())
            assert entries and all(e.name.endswith(".computation") for e in entries)
        else:
            assert re.search(r" 0 compiled, \d+ memory hits, [1-9]\d* disk hits", summary)
            assert sorted(cache.iterdir()) == entries      # nothing new written
    assert outs[0] == outs[1] == (tmp_path / "none.raw").read_bytes()
    # --read-cache / --write-cache replace the disk cache.
    bundle_dir = tmp_path / "bundle"
    bundle_dir.mkdir()
    p = run("nnet3-train", "--srand=1", f"--cache-dir={tmp_path / 'unused'}",
            f"--write-cache={bundle_dir}", str(d / "0.raw"), egs, str(tmp_path / "w.raw"))
    assert p.returncode == 0, p.stderr.decode()
    assert any(bundle_dir.iterdir()) and not (tmp_path / "unused").exists()
    # nnet3-compute-prob: its (forward-only) computation is added once, and
    # the second run, which loads it, prints the same figures.
    lines, sizes = [], [len(entries)]
    for i in range(2):
        p = run("nnet3-compute-prob", f"--cache-dir={cache}", str(d / "0.raw"), egs)
        assert p.returncode == 0, p.stderr.decode()
        lines.append([m for m in messages(p.stderr) if m.startswith("Overall")])
        sizes.append(len(list(cache.iterdir())))
    assert lines[0] and lines[0] == lines[1]
    assert sizes[0] < sizes[1] == sizes[2]


def test_show_progress(tmp_path: Path) -> None:
    d = case_dir("affine_xent")
    p = run("nnet3-show-progress", str(d / "0.raw"), str(d / "1.raw"), f"ark:{d / 'merged.ark'}")
    assert p.returncode == 0, p.stderr.decode()
    msgs = messages(p.stderr)
    change = next(m for m in msgs if m.startswith("Total objf change per component is"))
    parts = dict(re.findall(r"(\w+):" + FLOAT, change))
    assert set(parts) == {"affine1", "affine2", "final_affine"}
    # First-order estimate of the objective change from 0.raw to 1.raw
    # (Kaldi's compute-prob: -4.26172 -> -3.21387), to within 25%.
    assert sum(float(v) for v in parts.values()) == pytest.approx(-3.21387 + 4.26172, rel=0.25)
    diffs = next(m for m in msgs if m.startswith("Parameter differences per layer are"))
    ours, theirs = read_nnet(str(d / "0.raw")), read_nnet(str(d / "1.raw"))
    want = np.sqrt(np.sum((ours.components[0].linear_params.astype(np.float64)
                           - theirs.components[0].linear_params) ** 2)
                   + np.sum((ours.components[0].bias_params.astype(np.float64)
                             - theirs.components[0].bias_params) ** 2))
    got = float(re.search(r"affine1:" + FLOAT, diffs).group(1))
    assert got == pytest.approx(want, rel=1e-4)
    only = run("nnet3-show-progress", str(d / "0.raw"), str(d / "1.raw"))
    assert only.returncode == 0
    assert not any(m.startswith("Total objf change") for m in messages(only.stderr))


def test_usage_errors() -> None:
    p = run("nnet3-train", "only-one-arg")
    assert p.returncode == 1 and b"Usage:  nnet3-train" in p.stderr
    p = run("nnet3-average", "one.raw")
    assert p.returncode == 1 and b"Usage:  nnet3-average" in p.stderr


def test_progress_only_on_a_terminal() -> None:
    import io

    from pynnet3.cli.progress import Progress

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    plain, tty = io.StringIO(), Tty()
    for stream in (plain, tty):
        p = Progress("nnet3-train", unit="frames", stream=stream, interval=0.0)
        p.update(1, 128)
        p.update(1, 128)
        p.close()
    assert plain.getvalue() == ""
    text = tty.getvalue()
    assert "nnet3-train: 2 done, 256 frames" in text and text.endswith("\r\033[K")


def test_startup_gc_pause_only_in_binaries_and_resumed_by_run() -> None:
    """A process started as a binary (argv[0] named like one) imports with
    the cyclic collector paused, and run() turns it back on before the
    command parses its options; any other process keeps it on throughout."""
    import subprocess
    import sys

    code = """
import gc, sys
sys.argv[0] = sys.argv[1]
import pynnet3.cli
paused = not gc.isenabled()
from pynnet3.cli.copy import command
from pynnet3.cli.common import run
seen = []
real = command.main
def main(*a, **k):
    seen.append(gc.isenabled())
    return real(*a, **k)
command.main = main
status = run(command, "nnet3-copy", ["--help"])
print(paused, seen, gc.isenabled(), status)
"""
    for argv0, paused in (("/usr/local/bin/nnet3-train", True), ("bin/nnet3-copy", True),
                          ("-c", False), ("pytest", False), ("run.pl", False)):
        p = subprocess.run([sys.executable, "-c", code, argv0], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip().splitlines()[-1] == f"{paused} [True] True 0", (argv0, p.stdout)


def test_help_option_is_clicks_own() -> None:
    """KaldiCommand makes the --help option itself (without click's gettext
    lookup): same flag, same text, eager, and the same one on every parse."""
    import click

    from pynnet3.cli.train import command

    ctx = click.Context(command)
    opt = command.get_help_option(ctx)
    assert opt is command.get_help_option(ctx)
    assert opt.opts == ["--help"] and opt.is_flag and opt.is_eager and not opt.expose_value
    assert opt.help == "Show this message and exit."
    record = opt.get_help_record(ctx)
    assert record == ("--help", "Show this message and exit.")
