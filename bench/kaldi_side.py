"""Run real Kaldi beside pynnet3 in one benchmark run (shared by bench/*.py).

Timings of two programs taken on different days, or on different machines
of one kind, differ by up to 20% (issue 15), so the benches run Kaldi's
binary and pynnet3's alternately in the same run, under the same load, and
print both figures and their ratio on one line.  When Kaldi is not built
here they print the figures recorded in ``reference/timings.md`` instead,
labelled "recorded, not measured".

Interface (everything a bench needs)::

    import kaldi_side as ks                      # bench/ is on sys.path

    ks.add_arguments(parser)                     # --kaldi-root DIR, --no-kaldi
    kaldi = ks.find_kaldi(args.kaldi_root)       # KaldiTree or None
    # (--kaldi-root, else $KALDI_ROOT, else /work/kaldi when it holds a build;
    #  ks.find_kaldi(False) or --no-kaldi: never)
    kaldi.binary("nnet3-compute")                # Path of src/nnet3bin/nnet3-compute
    ks.pynnet3_command("nnet3-compute", *args)   # [python, bin/nnet3-compute, *args]

    env = ks.thread_env(1)     # OPENBLAS/OMP/MKL/NUMBA_NUM_THREADS = 1 (and torch's
                               # OMP); thread_env(2) = 2; thread_env(None) = none set
    pair = ks.side_by_side(
        [str(kaldi.binary("nnet3-compute")), *kaldi_args],
        ks.pynnet3_command("nnet3-compute", *pynnet3_args),
        runs=3, env=env, cwd=work, warmup=1)     # alternating; best of runs
    print(ks.format_pair("nnet3-compute vosk, 1 thread", pair,
                         work_units=20000, unit="frames"))
    # -> "nnet3-compute vosk, 1 thread: Kaldi 2.23 s 8,970 frames/s 29 MB |
    #     pynnet3 2.15 s 9,294 frames/s 104 MB | pynnet3/Kaldi speed 1.04x
    #     (medians of 3: Kaldi 2.31 s, pynnet3 2.19 s, 1.05x)"

    ks.time_command(cmd, env=env, cwd=work)      # one run: Timing(wall, cpu, rss_mb)
    ks.print_recorded("nnet3-train mb128")       # the fallback lines for a key prefix

``Timing.wall`` is the whole process's wall time (start-up, model reading,
compilation, writing: how Kaldi's figures were taken), ``cpu`` its user +
system seconds (of it and its children), ``rss_mb`` its peak resident set
(GNU time's %M when /usr/bin/time exists, else ``ru_maxrss`` of the child
from ``os.wait4``, which also counts this Python process's memory at fork).  A pair keeps the run
with the least wall time of each side ("best of N": on a shared machine the
fastest run is the least disturbed one).  The speed ratio is
Kaldi's wall / pynnet3's wall: above 1 means pynnet3 is faster.  With 3 or
more runs a side the line ends with both medians and their ratio too: runs
on these machines spread by several percent, Kaldi's as much as pynnet3's,
and a ratio near a target means little unless both agree.

Commands must succeed (exit 0); on failure ``CommandFailed`` carries the
tail of stderr.  Outputs go to files in ``cwd`` as the commands say; the
stdout/stderr of the processes are kept only for error messages.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
DEFAULT_KALDI_ROOT = Path("/work/kaldi")

# Every variable that sets a thread pool a benchmarked process might start:
# OpenBLAS (both Kaldi and NumPy), OpenMP (torch, OpenBLAS built with OpenMP),
# MKL, Numba's parallel kernels.
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")


GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


class CommandFailed(RuntimeError):
    pass


@dataclass
class KaldiTree:
    """A Kaldi checkout with built binaries (``src/<dir>bin/<name>``)."""
    root: Path

    def binary(self, name: str) -> Path | None:
        for sub in sorted((self.root / "src").glob("*bin")):
            path = sub / name
            if path.is_file() and os.access(path, os.X_OK):
                return path
        return None

    def require(self, name: str) -> Path:
        path = self.binary(name)
        if path is None:
            raise FileNotFoundError(f"{name} is not built under {self.root}/src/*bin")
        return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kaldi-root", default=None,
                        help="Kaldi checkout with built binaries (default: $KALDI_ROOT, "
                             f"else {DEFAULT_KALDI_ROOT} when built)")
    parser.add_argument("--no-kaldi", action="store_true",
                        help="do not run Kaldi; print its recorded figures instead")


def find_kaldi(root: str | Path | None | bool = None, *,
               need: str = "nnet3-compute") -> KaldiTree | None:
    """The Kaldi tree to run, or None: ``root`` if given (False: never),
    else $KALDI_ROOT, else /work/kaldi; only if ``need`` is built there."""
    if root is False:
        return None
    candidates = [Path(root)] if root else []
    if not root and os.environ.get("KALDI_ROOT"):
        candidates.append(Path(os.environ["KALDI_ROOT"]))
    if not root:
        candidates.append(DEFAULT_KALDI_ROOT)
    for path in candidates:
        tree = KaldiTree(path.resolve())
        if tree.binary(need) is not None:
            return tree
    if root:
        print(f"# --kaldi-root {root}: no {need} under src/*bin; Kaldi not run",
              file=sys.stderr)
    return None


def kaldi_from_args(args: argparse.Namespace, need: str = "nnet3-compute") -> KaldiTree | None:
    return None if getattr(args, "no_kaldi", False) else find_kaldi(args.kaldi_root, need=need)


def pynnet3_command(name: str, *args: str) -> list[str]:
    """Command line of this checkout's pynnet3 binary ``name`` (bin/ launcher)."""
    return [sys.executable, str(ROOT / "bin" / name), *args]


def blas_cores(kaldi: "KaldiTree | None" = None, binary: str = "nnet3-compute") -> str:
    """Which OpenBLAS kernels each side runs, for a bench's header line.

    OpenBLAS picks its kernels (its "core type") once, when loaded, from the
    CPU, unless ``OPENBLAS_CORETYPE`` names one; a setting in the environment
    applies to both programs, and it changes the products' speed more than
    anything either program does (on this project's Zen 5 machines the
    AVX-512 kernels run sgemm at about twice the AVX2 (Haswell) ones' speed).
    Each side's choice is read from OpenBLAS itself (``OPENBLAS_VERBOSE=2``
    makes it print "Core: <name>" when it loads)."""
    forced = os.environ.get("OPENBLAS_CORETYPE")
    probe = "import numpy"
    sides = [("pynnet3 (NumPy's OpenBLAS)", [sys.executable, "-c", probe])]
    if kaldi is not None and kaldi.binary(binary) is not None:
        sides.append(("Kaldi", [str(kaldi.binary(binary))]))
    parts = []
    for label, cmd in sides:
        env = dict(os.environ, OPENBLAS_VERBOSE="2")
        try:
            # (OpenBLAS prints it on stderr; a usage text may follow)
            out = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, errors="replace", timeout=60).stderr
        except (OSError, subprocess.SubprocessError):
            out = ""
        core = next((line.split(":", 1)[1].strip() for line in out.splitlines()
                     if line.startswith("Core:")), "unknown")
        parts.append(f"{label} {core}")
    setting = (f"OPENBLAS_CORETYPE={forced} set in the environment" if forced
               else "OPENBLAS_CORETYPE unset: OpenBLAS's own choice")
    return f"OpenBLAS kernels: {', '.join(parts)} ({setting})"


def thread_env(threads: int | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment with every thread variable = ``threads`` (None: all unset,
    the out-of-the-box default).  PYTHONPATH gets this checkout's src/."""
    env = dict(os.environ if base is None else base)
    for var in THREAD_VARIABLES:
        if threads is None:
            env.pop(var, None)
        else:
            env[var] = str(threads)
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def thread_label(threads: int | None) -> str:
    return "default threads" if threads is None else \
        f"{threads} thread{'s' if threads != 1 else ''}"


@dataclass
class Timing:
    wall: float       # seconds, whole process
    cpu: float        # user + system seconds
    rss_mb: float     # peak resident set, MB (10^6 bytes)


def time_command(cmd: list[str], *, env: dict[str, str] | None = None,
                 cwd: str | Path | None = None, stdin: str | Path | None = None,
                 timeout: float | None = None) -> Timing:
    """Run ``cmd`` once; its wall time, CPU time and peak RSS."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile(prefix="kaldi-side-rss-") as rss_file:
        fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
        # A child's ru_maxrss counts the memory it had between fork and exec,
        # i.e. this Python process's; GNU time forks from a 2 MB process, so
        # its %M is the command's own peak.
        full = ([GNU_TIME, "-q", "-f", "%M", "-o", rss_file.name, *cmd]
                if GNU_TIME else list(cmd))
        try:
            start = time.perf_counter()
            p = subprocess.Popen(full, env=env, cwd=cwd, stdin=fin, stdout=out, stderr=err)
            deadline = None if timeout is None else start + timeout
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG if deadline else 0)
                if pid:
                    break
                if time.perf_counter() > deadline:  # type: ignore[operator]
                    p.kill()
                    os.wait4(p.pid, 0)
                    raise CommandFailed(f"timed out after {timeout} s: {' '.join(cmd)}")
                time.sleep(0.01)
            wall = time.perf_counter() - start
            p.returncode = os.waitstatus_to_exitcode(status)
        finally:
            if fin is not subprocess.DEVNULL:
                fin.close()  # type: ignore[union-attr]
        if p.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-3000:]
            raise CommandFailed(f"exit {p.returncode}: {' '.join(map(str, cmd))}\n{tail}")
        # Linux reports ru_maxrss and GNU time's %M in KiB.
        rss_kib = usage.ru_maxrss
        if GNU_TIME:
            text = Path(rss_file.name).read_text().split()
            rss_kib = int(text[-1]) if text else rss_kib
    return Timing(wall, usage.ru_utime + usage.ru_stime, rss_kib * 1024 / 1e6)


@dataclass
class Pair:
    kaldi: Timing | None      # best run (least wall), None when Kaldi was not run
    pynnet3: Timing
    kaldi_runs: list[Timing]
    pynnet3_runs: list[Timing]

    @property
    def speed_ratio(self) -> float | None:
        """pynnet3's speed / Kaldi's (Kaldi wall / pynnet3 wall)."""
        return None if self.kaldi is None else self.kaldi.wall / self.pynnet3.wall

    def median_walls(self) -> tuple[float, float] | None:
        """(Kaldi's, pynnet3's) median wall time over the measured runs, or
        None without a Kaldi run or with fewer than 3 runs a side (this
        machine's run-to-run spread is several percent: the medians show it
        beside the best runs)."""
        if len(self.kaldi_runs) < 3 or len(self.pynnet3_runs) < 3:
            return None
        return (statistics.median(t.wall for t in self.kaldi_runs),
                statistics.median(t.wall for t in self.pynnet3_runs))


def side_by_side(kaldi_cmd: list[str] | None, pynnet3_cmd: list[str], *, runs: int = 3,
                 env: dict[str, str] | None = None, cwd: str | Path | None = None,
                 warmup: int = 1, kaldi_env: dict[str, str] | None = None,
                 timeout: float | None = None) -> Pair:
    """Run both commands alternately ``runs`` times (after ``warmup``
    unmeasured runs of each, which fill pynnet3's Numba and computation
    caches and the page cache), Kaldi first in even rounds and pynnet3 first
    in odd ones; keep each side's fastest run.  ``kaldi_cmd`` None: only
    pynnet3 is timed."""
    k_runs: list[Timing] = []
    p_runs: list[Timing] = []
    for _ in range(warmup):
        if kaldi_cmd:
            time_command(kaldi_cmd, env=kaldi_env or env, cwd=cwd, timeout=timeout)
        time_command(pynnet3_cmd, env=env, cwd=cwd, timeout=timeout)
    for r in range(runs):
        order = ("k", "p") if r % 2 == 0 else ("p", "k")
        for side in order:
            if side == "k" and kaldi_cmd:
                k_runs.append(time_command(kaldi_cmd, env=kaldi_env or env, cwd=cwd,
                                           timeout=timeout))
            elif side == "p":
                p_runs.append(time_command(pynnet3_cmd, env=env, cwd=cwd, timeout=timeout))
    best = lambda ts: min(ts, key=lambda t: t.wall)  # noqa: E731
    return Pair(best(k_runs) if k_runs else None, best(p_runs), k_runs, p_runs)


def _side(name: str, t: Timing, work_units: float | None, unit: str) -> str:
    rate = f" {work_units / t.wall:,.0f} {unit}/s" if work_units else ""
    return f"{name} {t.wall:.3f} s{rate} (cpu {t.cpu:.2f} s, {t.rss_mb:.0f} MB)"


def format_pair(label: str, pair: Pair, *, work_units: float | None = None,
                unit: str = "frames", recorded_key: str | None = None) -> str:
    """One line: both sides and the speed ratio.  Without a Kaldi run, the
    recorded figure of ``recorded_key`` (if any) stands in, labelled."""
    ours = _side("pynnet3", pair.pynnet3, work_units, unit)
    if pair.kaldi is not None:
        medians = pair.median_walls()
        spread = (f" (medians of {len(pair.pynnet3_runs)}: Kaldi {medians[0]:.3f} s, pynnet3 "
                  f"{medians[1]:.3f} s, {medians[0] / medians[1]:.2f}x)") if medians else ""
        return (f"{label}: {_side('Kaldi', pair.kaldi, work_units, unit)} | {ours} | "
                f"pynnet3/Kaldi speed {pair.speed_ratio:.2f}x{spread}")
    rec = recorded(recorded_key) if recorded_key else None
    if rec is None or not work_units:
        return f"{label}: Kaldi not run | {ours}"
    fps = work_units / pair.pynnet3.wall
    return (f"{label}: Kaldi {rec[0]:,.0f} {unit}/s (recorded, not measured: {rec[1]}) | "
            f"{ours} | pynnet3/Kaldi speed {fps / rec[0]:.2f}x (vs recorded)")


# ---------------------------------------------------------------------------
# Recorded figures (fallback when Kaldi is not built here).  Key ->
# (rate per second, where it was recorded).  Real Kaldi, commit f4007661,
# CPU build -O1, OpenBLAS 0.3.21, a 2-core machine of this kind.

_T = "reference/timings.md"
_TT = "reference/train/timing.md"
RECORDED: dict[str, tuple[float, str]] = {
    # nnet3-compute, 20 x 1000 frames (frames/s; whole process)
    "nnet3-compute vosk fss3 1": (8970, f"{_T}, side by side, best of 3"),
    "nnet3-compute vosk fss3 2": (12089, f"{_T}, side by side, best of 3"),
    "nnet3-compute vosk fss3 1 median": (7529, f"{_T}, median of 3"),
    "nnet3-compute vosk fss3 2 median": (9430, f"{_T}, median of 3"),
    "nnet3-compute small-tdnn fss3 1": (28119, f"{_T}, median of 3"),
    "nnet3-compute small-tdnn fss3 2": (36815, f"{_T}, median of 3"),
    "nnet3-compute small-tdnn fss1 1": (13843, f"{_T}, median of 3"),
    "nnet3-compute small-tdnn fss1 2": (17900, f"{_T}, median of 3"),
    # nnet3-train, small TDNN, supervised frame rows / wall s (best round's median)
    "nnet3-train mb128 1": (5549, f"{_TT}, median of 3 (5,144-5,549); 5,408 side by side"),
    "nnet3-train mb128 2": (8468, f"{_TT}, median of 3 (6,210-8,468)"),
    "nnet3-train mb16 1": (5379, f"{_TT}, median of 3 (5,201-5,379)"),
    "nnet3-train mb16 2": (7261, f"{_TT}, median of 3 (6,030-7,261)"),
}


def recorded(key: str) -> tuple[float, str] | None:
    """(rate, source) recorded for ``key`` (see RECORDED), thread count
    None mapped to 2 (the machine's cores)."""
    return RECORDED.get(key.replace(" None", " 2"))


def print_recorded(prefix: str) -> None:
    """Print every recorded figure whose key starts with ``prefix``."""
    for key, (rate, source) in RECORDED.items():
        if key.startswith(prefix):
            print(f"# Kaldi {key}: {rate:,.0f}/s (recorded, not measured: {source})")
