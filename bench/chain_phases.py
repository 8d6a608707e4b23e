#!/usr/bin/env python3
"""Per-minibatch CPU time of nnet3-chain-train by phase, in process.

Runs NnetChainTrainer over the reference chain setup (merged.ark repeated
``--repeat`` times, the options of bench/chain.py) and charges
``time.process_time`` to: egs reading, compile lookup, forward, chain
objective, backward (of which natural-gradient preconditioning), and the
update (l2, max-change, scaling).  Wrappers cost a few microseconds per
call; the figures are for comparing before/after, not absolute.

Usage:  python bench/chain_phases.py [--repeat 20] [--skip 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(v, "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import kaldi_side as ks  # noqa: E402

CHAIN = ks.REFERENCE / "chain"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--skip", type=int, default=5, help="minibatches not counted (warm-up)")
    args = p.parse_args()
    t_start = time.process_time()
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.compute import computer as computer_mod
    from pynnet3.nnet.components import natural_gradient as ng
    from pynnet3.train import trainer as trainer_mod
    from pynnet3.train.chain import trainer as chain_trainer_mod
    from pynnet3.train.chain.den_graph import DenominatorGraph
    from pynnet3.train.chain.egs import iter_chain_examples
    from pynnet3.train.chain.fst import read_fst_file
    from pynnet3.train.chain.objective import ChainTrainingOptions
    from pynnet3.train.kaldi_random import GlibcRand
    from pynnet3.train.trainer import NnetTrainerOptions

    acc: dict[str, float] = defaultdict(float)
    counting = [False]
    stack: list[str] = []

    def timed(name, fn):
        def wrapper(*a, **k):
            t0 = time.process_time()
            stack.append(name)
            try:
                return fn(*a, **k)
            finally:
                stack.pop()
                if counting[0]:
                    acc[name] += time.process_time() - t0
        return wrapper

    runs = [0]
    orig_run = computer_mod.NnetComputer.run

    def run(self):
        runs[0] += 1
        name = "forward" if runs[0] % 2 else "backward"
        return timed(name, orig_run)(self)
    computer_mod.NnetComputer.run = run
    ng.OnlineNaturalGradient.precondition_directions = timed(
        "  of which NG precondition", ng.OnlineNaturalGradient.precondition_directions)
    T = chain_trainer_mod.NnetChainTrainer
    T._computation_for = timed("compile lookup", T._computation_for)
    T._process_outputs = timed("chain objective (+xent)", T._process_outputs)
    T._new_computer = timed("new computer + inputs", T._new_computer)
    T._accept_inputs = timed("new computer + inputs", T._accept_inputs)
    for fname in ("apply_l2_regularization", "update_nnet_with_max_change",
                  "scale_batchnorm_stats", "constrain_orthonormal", "scale_nnet"):
        setattr(trainer_mod, fname, timed("update (l2/max-change/scale)",
                                          getattr(trainer_mod, fname)))

    import tempfile
    work = Path(tempfile.mkdtemp(prefix="chain-phases-"))
    (work / "egs.ark").write_bytes((CHAIN / "merged.ark").read_bytes() * args.repeat)
    nnet = read_nnet(str(CHAIN / "0.raw"))
    graph = DenominatorGraph.from_fst(read_fst_file(str(CHAIN / "den.fst")),
                                      nnet.output_dim("output"))
    nnet_config = NnetTrainerOptions(max_param_change=2.0)
    chain_config = ChainTrainingOptions(l2_regularize=5e-05, leaky_hmm_coefficient=0.1,
                                        xent_regularize=0.1, out_of_range_regularize=0.01,
                                        numerator_graph_threads=1)
    opts = chain_trainer_mod.NnetChainTrainingOptions(nnet_config=nnet_config,
                                                      chain_config=chain_config)
    trainer = T(opts, graph, nnet, GlibcRand(1))
    t_setup = time.process_time() - t_start
    it = iter_chain_examples(f"ark:{work / 'egs.ark'}")
    n = 0
    t_loop = 0.0
    while True:
        counting[0] = n >= args.skip
        t0 = time.process_time()
        eg = next(it, None)
        if eg is None:
            break
        t1 = time.process_time()
        trainer.train(eg[1])
        t2 = time.process_time()
        if counting[0]:
            acc["egs reading"] += t1 - t0
            t_loop += t2 - t0
        n += 1
    counted = n - args.skip
    print(f"# {n} minibatches ({counted} counted), setup {t_setup:.2f} s CPU; "
          f"per minibatch (CPU ms):")
    for name in ("egs reading", "compile lookup", "new computer + inputs", "forward",
                 "chain objective (+xent)", "backward", "  of which NG precondition",
                 "update (l2/max-change/scale)"):
        print(f"{name:32s} {1000 * acc[name] / counted:7.3f}")
    named = sum(v for k, v in acc.items() if not k.startswith(" "))
    print(f"{'other':32s} {1000 * (t_loop - named) / counted:7.3f}")
    print(f"{'total':32s} {1000 * t_loop / counted:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
