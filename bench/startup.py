#!/usr/bin/env python3
"""Start-up time of the binaries: cold (empty caches) and warm, per binary.

For each of ``nnet3-info``, ``nnet3-init``, ``nnet3-compute``, ``nnet3-train``
and ``nnet3-compute-prob`` on small inputs made here (the TDNN of
``egs/mini_tdnn/conf/tdnn.config``: 40-dim features, 100-dim iVectors, 4
utterances of 150 frames, 64 egs of 8 frames), the whole process's wall time
is measured

* cold: with a fresh, empty ``NUMBA_CACHE_DIR`` (Numba's compiled kernels)
  and ``PYNNET3_CACHE_DIR`` (compiled computations), i.e. the first run
  after an install;
* warm: the next run with the same caches (the steady state).

Each repetition runs every binary cold then warm, alternating between this
tree and ``--baseline`` (another checkout's ``src``, run with that tree on
PYTHONPATH), so that other jobs on the machine disturb both alike; the table
gives the best and the median of ``--runs`` repetitions and the ratio of
the medians, this/baseline.  Python byte-code is compiled first (``compileall``, as ``pip
install`` does: this environment may set PYTHONDONTWRITEBYTECODE).

``--importtime BINARY`` prints the costliest imports of one warm run
(``python -X importtime``); ``--jit-report BINARY`` runs it once cold and
once warm with Numba's ``Dispatcher.compile`` timed, and prints a table of
the kernels it compiled (or loaded from the cache) and how long each took.

With a Kaldi build (``--kaldi-root DIR``, ``$KALDI_ROOT`` or /work/kaldi;
``--no-kaldi`` to skip), Kaldi's binary of the same name runs on the same
inputs right after each of this tree's runs, and its times end each line.

Usage:  python bench/startup.py [--runs 5] [--baseline /other/checkout/src]
                                [--binaries nnet3-compute,...] [--kaldi-root DIR]
        python bench/startup.py --importtime nnet3-compute
        python bench/startup.py --jit-report nnet3-compute [--baseline ...]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kaldi_side as ks  # noqa: E402  (bench/ on sys.path)

ROOT = Path(__file__).resolve().parents[1]
THIS_SRC = ROOT / "src"
BINARIES = ["nnet3-info", "nnet3-init", "nnet3-compute", "nnet3-train", "nnet3-compute-prob"]

# Runs one binary of the tree on sys.path[0] (set through PYTHONPATH) as its
# console script does: argv[0] is the binary's name before pynnet3.cli is
# imported (that is how a process knows it is a binary: see
# pynnet3.cli.resume_startup_gc).
LAUNCH = ("import importlib, sys; "
          "name = sys.argv[1]; del sys.argv[1]; sys.argv[0] = name; "
          "from pynnet3.cli import BINARIES; "
          "m, f = BINARIES[name].split(':'); "
          "sys.exit(getattr(importlib.import_module(m), f)())")

# The same with Numba's compile timed: a table on stderr at exit.
JIT_REPORT = """
import atexit, sys, time
from numba.core import dispatcher
stack, rows = [], {}
orig = dispatcher.Dispatcher.compile
def compile(self, sig):
    name = self.py_func.__module__ + '.' + self.py_func.__qualname__
    t0 = time.perf_counter(); stack.append(0.0)
    try:
        return orig(self, sig)
    finally:
        inner = stack.pop(); dt = time.perf_counter() - t0
        if stack: stack[-1] += dt
        r = rows.setdefault(name, [0, 0.0, 0.0]); r[0] += 1; r[1] += dt; r[2] += dt - inner
dispatcher.Dispatcher.compile = compile
def report():
    total = sum(r[2] for r in rows.values())
    sys.stderr.write('JIT %-70s %5s %9s %9s\\n' % ('kernel', 'sigs', 'incl s', 'excl s'))
    for name, r in sorted(rows.items(), key=lambda kv: -kv[1][2]):
        sys.stderr.write('JIT %-70s %5d %9.3f %9.3f\\n' % (name[-70:], r[0], r[1], r[2]))
    sys.stderr.write('JIT %d kernels, %.2f s in Dispatcher.compile (exclusive sum)\\n'
                     % (len(rows), total))
atexit.register(report)
""" + LAUNCH


def write_matrix(f, key: str, m: np.ndarray) -> None:
    f.write(f"{key}  [\n")
    for i, row in enumerate(m):
        f.write("  " + " ".join(f"{x:.5g}" for x in row) + (" ]\n" if i == len(m) - 1 else "\n"))


def make_inputs(work: Path) -> dict[str, list[str]]:
    """The inputs (made with this tree's binaries) and each binary's arguments."""
    rng = np.random.RandomState(0)
    config = ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config"
    num_pdfs = 200
    with open(work / "feats.txt", "w") as f, open(work / "ivectors.txt", "w") as g, \
            open(work / "post.txt", "w") as p:
        for u in range(4):
            write_matrix(f, f"utt{u}", rng.randn(150, 40).astype(np.float32))
            write_matrix(g, f"utt{u}", rng.randn(15, 100).astype(np.float32))
            p.write(f"utt{u} " + " ".join(f"[ {k} 1 ]" for k in rng.randint(0, num_pdfs, 150))
                    + "\n")
    env = dict(os.environ, PYTHONPATH=str(THIS_SRC))
    run = lambda *a: subprocess.run([sys.executable, "-c", LAUNCH, *a], env=env,  # noqa: E731
                                    check=True, stderr=subprocess.DEVNULL, cwd=work)
    run("nnet3-init", "--srand=1", str(config), "0.raw")
    run("nnet3-get-egs", f"--num-pdfs={num_pdfs}", "--left-context=5", "--right-context=5",
        "--num-frames=8", "--online-ivectors=ark:ivectors.txt", "--online-ivector-period=10",
        "ark:feats.txt", "ark:post.txt", "ark:egs1.ark")
    run("nnet3-merge-egs", "--minibatch-size=16", "ark:egs1.ark", "ark:egs.ark")
    return {
        "nnet3-info": ["0.raw"],
        "nnet3-init": ["--srand=1", str(config), "init.raw"],
        "nnet3-compute": ["--online-ivectors=ark:ivectors.txt", "--online-ivector-period=10",
                          "0.raw", "ark:feats.txt", "ark:out.ark"],
        "nnet3-train": ["0.raw", "ark:egs.ark", "train.raw"],
        "nnet3-compute-prob": ["0.raw", "ark:egs.ark"],
    }


def run_once(src: Path, binary: str, args: list[str], work: Path, caches: Path,
             code: str = LAUNCH) -> tuple[float, str]:
    env = dict(os.environ, PYTHONPATH=str(src),
               NUMBA_CACHE_DIR=str(caches / "numba"), PYNNET3_CACHE_DIR=str(caches / "pynnet3"))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, binary, *args], env=env, cwd=work,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{binary} failed ({src}):\n{proc.stderr}")
    return wall, proc.stderr


def run_kaldi(kaldi: "ks.KaldiTree", binary: str, args: list[str], work: Path) -> float:
    """Wall seconds of Kaldi's ``binary`` on the same arguments (Kaldi has no
    caches: its cold run is its warm run)."""
    t0 = time.perf_counter()
    proc = subprocess.run([str(kaldi.require(binary)), *args], cwd=work,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"Kaldi's {binary} failed:\n{proc.stderr[-2000:]}")
    return wall


def bench(trees: dict[str, Path], binaries: list[str], runs: int, work: Path,
          argv: dict[str, list[str]], kaldi: "ks.KaldiTree | None" = None) -> dict:
    times: dict = {(t, b, k): [] for t in trees for b in binaries for k in ("cold", "warm")}
    for rep in range(runs):
        for tree, src in trees.items():
            for b in binaries:
                caches = Path(tempfile.mkdtemp(prefix="startup-caches-", dir=work))
                try:
                    times[tree, b, "cold"].append(run_once(src, b, argv[b], work, caches)[0])
                    times[tree, b, "warm"].append(run_once(src, b, argv[b], work, caches)[0])
                finally:
                    shutil.rmtree(caches, ignore_errors=True)
                if kaldi is not None and tree == list(trees)[-1]:
                    # (right after this tree's runs of the same binary)
                    times.setdefault(("Kaldi", b, "warm"), []).append(
                        run_kaldi(kaldi, b, argv[b], work))
        print(f"  repetition {rep + 1}/{runs} done", file=sys.stderr)
    return times


def print_table(times: dict, trees: dict[str, Path], binaries: list[str]) -> None:
    names = list(trees)
    head = f"{'binary':20s} {'':5s}" + "".join(f" {n + ' best':>10s} {n + ' med':>10s}"
                                               for n in names)
    if len(names) == 2:
        head += f" {'this/base':>10s}"
    print(head)
    for b in binaries:
        for kind in ("cold", "warm"):
            line = f"{b:20s} {kind:5s}"
            meds = []
            for n in names:
                t = times[n, b, kind]
                meds.append(statistics.median(t))
                line += f" {min(t):10.2f} {meds[-1]:10.2f}"
            if len(names) == 2:
                line += f" {meds[1] / meds[0]:10.2f}"
            kaldi = times.get(("Kaldi", b, "warm"))
            if kaldi:
                line += (f"   Kaldi best {min(kaldi):.3f} med {statistics.median(kaldi):.3f}"
                         f" ({names[-1]}/Kaldi {meds[-1] / statistics.median(kaldi):.1f}x)")
            print(line)


def importtime(src: Path, binary: str, args: list[str], work: Path, top: int = 25) -> None:
    caches = Path(tempfile.mkdtemp(prefix="startup-caches-", dir=work))
    run_once(src, binary, args, work, caches)   # warm the caches first
    env = dict(os.environ, PYTHONPATH=str(src),
               NUMBA_CACHE_DIR=str(caches / "numba"), PYNNET3_CACHE_DIR=str(caches / "pynnet3"))
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", LAUNCH, binary, *args],
                          env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "cumulative" not in line:
            parts = line[len("import time:"):].split("|")
            depth = (len(parts[2]) - len(parts[2].lstrip())) // 2
            rows.append((int(parts[1]), parts[2].strip(), depth))
    tops = [r for r in rows if r[2] <= 1]
    total = sum(r[0] for r in rows if r[2] == 0)
    print(f"{binary}: {total / 1e6:.2f} s of imports (top level); the costliest, cumulative:")
    for cum, name, depth in sorted(tops, key=lambda r: -r[0])[:top]:
        print(f"  {cum / 1e6:7.3f} s  {'  ' * depth}{name}")
    shutil.rmtree(caches, ignore_errors=True)


def jit_report(src: Path, binary: str, args: list[str], work: Path) -> None:
    caches = Path(tempfile.mkdtemp(prefix="startup-caches-", dir=work))
    for kind in ("cold", "warm"):
        wall, err = run_once(src, binary, args, work, caches, code=JIT_REPORT)
        print(f"== {binary} {kind} ({src}): {wall:.2f} s wall")
        for line in err.splitlines():
            if line.startswith("JIT "):
                print(line[4:])
            elif "nnet3 compilation" in line:
                print(line)
    shutil.rmtree(caches, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="another checkout's src/ to compare with")
    ap.add_argument("--binaries", default=",".join(BINARIES))
    ap.add_argument("--importtime", metavar="BINARY")
    ap.add_argument("--jit-report", metavar="BINARY")
    ap.add_argument("--keep", type=Path, help="work in this directory and keep it")
    ks.add_arguments(ap)
    opts = ap.parse_args()
    kaldi = ks.kaldi_from_args(opts, need="nnet3-info")
    trees = {"this": THIS_SRC}
    if opts.baseline:
        trees = {"base": opts.baseline.resolve(), "this": THIS_SRC}
    for src in trees.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True,
                       stdout=subprocess.DEVNULL)
    work = opts.keep or Path(tempfile.mkdtemp(prefix="pynnet3-startup-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        argv = make_inputs(work)
        if opts.importtime:
            for src in trees.values():
                importtime(src, opts.importtime, argv[opts.importtime], work)
            return
        if opts.jit_report:
            for src in trees.values():
                jit_report(src, opts.jit_report, argv[opts.jit_report], work)
            return
        binaries = opts.binaries.split(",")
        print(f"{len(binaries)} binaries x {len(trees)} trees x {opts.runs} runs, cold and warm "
              f"(whole-process wall seconds; {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.1f})", file=sys.stderr)
        if kaldi is not None:
            print(f"Kaldi beside it: {kaldi.root} (its binaries on the same inputs, run right "
                  "after this tree's; Kaldi has no caches, so cold = warm)", file=sys.stderr)
        times = bench(trees, binaries, opts.runs, work, argv, kaldi)
        print_table(times, trees, binaries)
    finally:
        if not opts.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
