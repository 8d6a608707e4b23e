#!/usr/bin/env python3
"""Chain (LF-MMI) training speed: pynnet3's nnet3-chain-train next to real
Kaldi's on the same model, den.fst and egs, in one run.

Data: the reference chain setup (``../shared/reference/chain``: a 5-layer
relu-batchnorm TDNN of 64 units with 'output' and 'output-xent' (64 pdfs),
its den.fst, and merged.ark = 5 minibatches of 32 sequences x 10 output
frames, 1600 frames).  The minibatches are repeated ``--repeat`` times in one
archive (default 20: 100 minibatches, 32,000 frames), so that start-up and
compilation weigh as they do in a real job.  Options as commands.txt's
(l2 5e-5, leaky-hmm 0.1, xent 0.1, out-of-range 0.01, max-param-change 2).

Rows, for each ``--threads`` value (OPENBLAS/OMP/MKL/NUMBA threads):

* ``nnet3-chain-train``: both binaries alternately, best of ``--runs`` after
  a warm-up run each (bench/kaldi_side.py), whole-process wall time, frames/s
  = supervised frames / wall; ratio = pynnet3 speed / Kaldi speed.  Without
  a Kaldi build (/work/kaldi, $KALDI_ROOT or --kaldi-root) only pynnet3 is
  measured and the line says Kaldi was not measured.
* ``objective only`` (pynnet3, in process): ComputeChainObjfAndDeriv
  (denominator + numerator forward-backward, xent posteriors, l2) per
  minibatch on the network outputs of the reference deriv.0.ark's shape,
  frames/s, best of runs.

Measured 2026-11-26 on the 2-core dev machine at load average 8-14 (eight
sessions), real Kaldi f4007661 (CPU, -O1, OpenBLAS 0.3.21) beside pynnet3:

* ``--repeat 10``, 1 thread: Kaldi 37,374 frames/s, pynnet3 5,706 (0.15x;
  pynnet3's start-up, ~1.5 s, dominates 50 minibatches);
* ``--repeat 100``, 1 thread: Kaldi 61,982 frames/s (2.58 s), pynnet3 28,469
  (5.62 s): 0.46x; in process pynnet3 spends ~9 ms per minibatch, of which
  the chain objective ~1 ms (the network's forward/backward, natural
  gradient and update are the rest; Kaldi ~5 ms in all);
* ``--repeat 10``, 2 threads: Kaldi 23,550 frames/s, pynnet3 220 (0.01x,
  cpu 40 s): with the cores oversubscribed, NumPy's OpenBLAS with 2 threads
  turns each small GEMM into a spin/scheduler wait; OPENBLAS_NUM_THREADS=2
  alone reproduces it, and plain nnet3-train shows it too (0.8 s -> 5.4 s on
  train/ngaffine_bn);
* objective alone (in process): 150,000-355,000 frames/s.

Usage:  python bench/chain.py [--repeat 20] [--runs 3] [--threads 1,2]
            [--kaldi-root DIR | --no-kaldi] [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kaldi_side as ks  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHAIN = ks.REFERENCE / "chain"
FRAMES_PER_PASS = 1600          # merged.ark: 5 x 32 sequences x 10 frames
CHAIN_OPTS = ["--l2-regularize=5e-05", "--leaky-hmm-coefficient=0.1", "--xent-regularize=0.1",
              "--out-of-range-regularize=0.01"]


def objective_only(runs: int) -> float:
    """Best frames/s of the chain objective alone over the 5 minibatches."""
    sys.path.insert(0, str(ROOT / "src"))
    import numpy as np
    from pynnet3.train.chain.den_graph import DenominatorGraph
    from pynnet3.train.chain.egs import iter_chain_examples
    from pynnet3.train.chain.fst import read_fst_file
    from pynnet3.train.chain.objective import ChainTrainingOptions, compute_chain_objf_and_deriv

    graph = DenominatorGraph.from_fst(read_fst_file(str(CHAIN / "den.fst")), 64)
    egs = [eg for _, eg in iter_chain_examples(f"ark:{CHAIN / 'merged.ark'}")]
    opts = ChainTrainingOptions(l2_regularize=5e-05, leaky_hmm_coefficient=0.1,
                                xent_regularize=0.1)
    rng = np.random.default_rng(0)
    outs = [rng.normal(0, 1, (eg.outputs[0].indexes.shape[0], 64)).astype(np.float32)
            for eg in egs]
    for eg, out in zip(egs, outs):        # warm-up (Numba kernels)
        compute_chain_objf_and_deriv(opts, graph, eg.outputs[0].supervision, out, True, True)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(4):
            for eg, out in zip(egs, outs):
                compute_chain_objf_and_deriv(opts, graph, eg.outputs[0].supervision, out,
                                             True, True)
        best = min(best, time.perf_counter() - start)
    return 4 * FRAMES_PER_PASS / best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--keep", default=None, help="keep the work files in DIR")
    ks.add_arguments(p)
    args = p.parse_args()
    for name in ("0.raw", "den.fst", "merged.ark"):
        if not (CHAIN / name).exists():
            print(f"# {CHAIN / name} not found: the reference chain setup is needed")
            return 1
    kaldi = ks.kaldi_from_args(args, need="nnet3-chain-train")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-chain-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        data = (CHAIN / "merged.ark").read_bytes()
        (work / "egs.ark").write_bytes(data * args.repeat)
        shutil.copy(CHAIN / "0.raw", work / "0.raw")
        shutil.copy(CHAIN / "den.fst", work / "den.fst")
        frames = FRAMES_PER_PASS * args.repeat
        common = ["--srand=1", "--use-gpu=no", "--numerator-graph-threads=1", *CHAIN_OPTS,
                  "--max-param-change=2.0", "0.raw", "den.fst", "ark:egs.ark"]
        print(f"# nnet3-chain-train on {args.repeat} x merged.ark ({5 * args.repeat} "
              f"minibatches of 32 x 10 frames, {frames:,} frames), best of {args.runs}")
        if kaldi is None:
            print("# Kaldi was not measured (no build with src/chainbin/nnet3-chain-train "
                  "found; --kaldi-root DIR or $KALDI_ROOT)")
        for threads in [int(t) for t in args.threads.split(",")]:
            env = ks.thread_env(threads)
            kaldi_cmd = ([str(kaldi.binary("nnet3-chain-train")), *common, "k.raw"]
                         if kaldi else None)
            pair = ks.side_by_side(kaldi_cmd, ks.pynnet3_command("nnet3-chain-train", *common,
                                                                 "p.raw"),
                                   runs=args.runs, env=env, cwd=work, warmup=1)
            print(ks.format_pair(f"nnet3-chain-train, {ks.thread_label(threads)}", pair,
                                 work_units=frames), flush=True)
        os.environ.update({v: "1" for v in ks.THREAD_VARIABLES})
        print(f"objective only (pynnet3 ComputeChainObjfAndDeriv, in process): "
              f"{objective_only(args.runs):,.0f} frames/s")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
