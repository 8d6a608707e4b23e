#!/usr/bin/env python3
"""Training speed (frames/s) of pynnet3 next to real Kaldi's nnet3-train and
PyTorch on the CPU.

The network and data are those of Kaldi's timing anchor
(``../shared/reference/train/timing.md``): input 40 -> Append(Offset -2..2)
-> 3 x [NaturalGradientAffine 512 + ReLU + BatchNorm] -> NaturalGradientAffine
2000 -> LogSoftmax, learning rate 0.001; 100 utterances x 300 frames of the
reference generator (seed 1, bit-identical to Kaldi's feats.ark/post.ark),
egs of 8 frames (+2/+2 context) made by pynnet3's nnet3-get-egs and merged
into minibatches of ``--minibatch-size`` egs (128 x 8 = 1024 frames).
Frames/s counts the supervised frame rows of one pass (29696 for 128), as
timing.md does.  For each minibatch size (``--minibatch-size``, default
128,16) and thread setting (``--threads``, default 1,2; N sets
OPENBLAS/OMP/MKL/NUMBA_NUM_THREADS=N, ``default`` unsets them) it prints:

* ``process``: real Kaldi's ``nnet3-train --srand=1 0.raw ark:mergedN.ark``
  and pynnet3's same command on the same model and egs, run alternately
  (bench/kaldi_side.py), best of ``--runs``: whole-process wall time
  (start-up, model and egs reading, compilation - for pynnet3 a load from
  its on-disk computation cache, filled by the unmeasured warm-up run, as in
  a recipe's later jobs - writing), CPU time, peak
  RSS, and the speed ratio pynnet3 / Kaldi.  The checkout's bytecode is
  compiled first (as installing does), so that start-up is an installed
  package's.  Kaldi is found through
  ``--kaldi-root``, $KALDI_ROOT or /work/kaldi; without a build its
  recorded figure (reference/train/timing.md) stands in, labelled
  "recorded, not measured".
* in-process rows, in a worker process with the same thread setting:
  ``pynnet3 loop, natural gradient`` (NnetTrainer on egs read beforehand,
  fresh model each run), ``pynnet3 loop, plain SGD`` and ``PyTorch loop,
  plain SGD``: the same network with plain affine layers (no natural
  gradient, no max-change), same initial parameters, same minibatches, same
  learning rate; PyTorch builds it from Linear, ReLU, BatchNorm1d (train
  mode, no affine, eps 1e-3 as Kaldi's), log_softmax and the weighted
  cross-entropy (Kaldi's objective: the sum over frames), with
  torch.optim.SGD, torch threads = the setting.  PyTorch and pynnet3's plain
  loop are run alternately for their ratio.  The objective per frame after
  the pass is printed for each as a check that they train the same network.
  PyTorch is optional (not a pynnet3 dependency); without it its row says so.

Usage:  python bench/train.py [--minibatch-size 128,16] [--threads 1,2] [--runs 3]
            [--kaldi-root DIR | --no-kaldi] [--no-torch] [--no-binary] [--no-loops]
            [--keep DIR]
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import kaldi_side as ks  # noqa: E402

CONFIG = """# timing TDNN (reference/train/timing/config.txt)
input-node name=input dim=40
component name=tdnn1.affine type=NaturalGradientAffineComponent input-dim=200 output-dim=512 learning-rate=0.001
component name=tdnn1.relu type=RectifiedLinearComponent dim=512
component name=tdnn1.batchnorm type=BatchNormComponent dim=512
component name=tdnn2.affine type=NaturalGradientAffineComponent input-dim=512 output-dim=512 learning-rate=0.001
component name=tdnn2.relu type=RectifiedLinearComponent dim=512
component name=tdnn2.batchnorm type=BatchNormComponent dim=512
component name=tdnn3.affine type=NaturalGradientAffineComponent input-dim=512 output-dim=512 learning-rate=0.001
component name=tdnn3.relu type=RectifiedLinearComponent dim=512
component name=tdnn3.batchnorm type=BatchNormComponent dim=512
component name=output.affine type=NaturalGradientAffineComponent input-dim=512 output-dim=2000 learning-rate=0.001
component name=output.log_softmax type=LogSoftmaxComponent dim=2000
component-node name=tdnn1.affine component=tdnn1.affine input=Append(Offset(input,-2),Offset(input,-1),input,Offset(input,1),Offset(input,2))
component-node name=tdnn1.relu component=tdnn1.relu input=tdnn1.affine
component-node name=tdnn1.batchnorm component=tdnn1.batchnorm input=tdnn1.relu
component-node name=tdnn2.affine component=tdnn2.affine input=tdnn1.batchnorm
component-node name=tdnn2.relu component=tdnn2.relu input=tdnn2.affine
component-node name=tdnn2.batchnorm component=tdnn2.batchnorm input=tdnn2.relu
component-node name=tdnn3.affine component=tdnn3.affine input=tdnn2.batchnorm
component-node name=tdnn3.relu component=tdnn3.relu input=tdnn3.affine
component-node name=tdnn3.batchnorm component=tdnn3.batchnorm input=tdnn3.relu
component-node name=output.affine component=output.affine input=tdnn3.batchnorm
component-node name=output.log_softmax component=output.log_softmax input=output.affine
output-node name=output input=output.log_softmax objective=linear
"""
AFFINES = ("tdnn1.affine", "tdnn2.affine", "tdnn3.affine", "output.affine")
SPLICE = (-2, -1, 0, 1, 2)
LEARNING_RATE = 0.001


# ---------------------------------------------------------------------------
# data and egs


def make_data(work: Path, seed: int = 1, dim: int = 40, num_classes: int = 2000,
              num_utts: int = 100, num_frames: int = 300) -> None:
    """feats.ark / post.ark as reference/train/make_data.py --task=xent makes
    them (same generator and draws, so the same bytes as Kaldi's inputs)."""
    import kaldiio
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = rng.standard_normal((num_classes, 3 * dim))
    with kaldiio.WriteHelper(f"ark:{work / 'feats.ark'}") as feats, \
            open(work / "post.ark", "w") as post:
        for u in range(1, num_utts + 1):
            key = f"utt{u:04d}"
            t = int(rng.integers(num_frames, num_frames + 1))
            offset = 0.5 * rng.standard_normal(dim)
            x = (offset + rng.standard_normal((t, dim))).astype(np.float32)
            padded = np.concatenate([x[:1], x, x[-1:]], axis=0).astype(np.float64)
            context = np.concatenate([padded[0:t], padded[1:t + 1], padded[2:t + 2]], axis=1)
            labels = np.argmax(context @ weights.T, axis=1)
            feats(key, x)
            post.write(key + " " + " ".join(f"[ {k} 1 ]" for k in labels) + "\n")


def binary(name: str, *args: str, cwd: Path) -> tuple[float, float]:
    """Run a pynnet3 binary; its wall and CPU (user + system) seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    p = subprocess.run([sys.executable, str(ROOT / "bin" / name), *args], cwd=cwd,
                       capture_output=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"{name} failed:\n{p.stderr.decode()[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def prepare(work: Path, minibatch_size: int) -> str:
    """Make what is missing in ``work``; the name of the merged egs archive."""
    if not (work / "egs.ark").exists():
        make_data(work)
        (work / "config.txt").write_text(CONFIG)
        (work / "config_plain.txt").write_text(
            CONFIG.replace("NaturalGradientAffineComponent", "AffineComponent"))
        binary("nnet3-init", "--srand=1", "config.txt", "0.raw", cwd=work)
        binary("nnet3-get-egs", "--num-pdfs=2000", "--left-context=2", "--right-context=2",
               "--num-frames=8", "--compress=false", "ark:feats.ark", "ark:post.ark",
               "ark:egs.ark", cwd=work)
    merged = f"merged{minibatch_size}.ark"
    if not (work / merged).exists():
        binary("nnet3-merge-egs", f"--minibatch-size={minibatch_size}", "ark:egs.ark",
               f"ark:{merged}", cwd=work)
    return merged


# ---------------------------------------------------------------------------
# pynnet3


def load_egs(path: Path) -> list:
    from pynnet3.train.egs import iter_examples

    return [eg for _, eg in iter_examples(f"ark:{path}")]


def supervised_rows(egs: list) -> int:
    return sum(io.indexes.shape[0] for eg in egs for io in eg.io if io.name == "output")


def plain_nnet(work: Path):
    """The network with AffineComponent layers and 0.raw's parameters."""
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.nnet.nnet import Nnet

    ng = read_nnet(str(work / "0.raw"))
    nnet = Nnet()
    nnet.read_config((work / "config_plain.txt").read_text(), "config_plain.txt")
    for name in AFFINES:
        src = ng.components[ng.component_names.index(name)]
        dst = nnet.components[nnet.component_names.index(name)]
        dst.linear_params[...] = src.linear_params
        dst.bias_params[...] = src.bias_params
    return nnet


def pynnet3_loop(work: Path, egs: list, plain: bool) -> tuple[float, float, float]:
    """(wall s, CPU s, objective per frame) of one pass of NnetTrainer."""
    import contextlib
    import io

    from pynnet3.compute.backend import get_backend
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.train.kaldi_random import GlibcRand
    from pynnet3.train.trainer import NnetTrainer, NnetTrainerOptions

    nnet = plain_nnet(work) if plain else read_nnet(str(work / "0.raw"))
    options = NnetTrainerOptions(max_param_change=0.0) if plain else NnetTrainerOptions()
    # nnet3-train's default CPU backend (--cpu-backend=numpy): the NumPy one.
    backend = get_backend("reference")
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stderr(io.StringIO()):
        with NnetTrainer(options, nnet, GlibcRand(1), backend=backend) as trainer:
            for eg in egs:
                trainer.train(eg)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    info = trainer.objf_info["output"]
    return wall, cpu, info.tot_objf / info.tot_weight


def warm_up(work: Path, egs: list) -> None:
    """One minibatch through each variant, so that first-call costs (lazy
    imports, the first compilation) stay out of the timed passes (the
    binary's row pays them in its start-up)."""
    for plain in (False, True):
        pynnet3_loop(work, egs[:1], plain)


# ---------------------------------------------------------------------------
# PyTorch


def torch_batches(egs: list):
    """Per minibatch: input (egs, frames, 40), target class and weight of each
    supervised frame (rows in the order of the network's output)."""
    import numpy as np
    import torch

    batches = []
    for eg in egs:
        ios = {io.name: io for io in eg.io}
        inp, out = ios["input"], ios["output"]
        n, t = inp.indexes[:, 0], inp.indexes[:, 1]
        x = np.zeros((n.max() + 1, t.max() - t.min() + 1, 40), dtype=np.float32)
        x[n, t - t.min()] = inp.features.to_matrix()
        sup = out.features.value                       # SparseMatrix of posteriors
        counts = np.diff(sup.indptr)
        if not (counts == 1).all():
            raise SystemExit("bench: expected one label per frame")
        on, ot = out.indexes[:, 0], out.indexes[:, 1]
        # Output frame (n, t) is row n * frames + (t - t_min) of the network.
        frames = ot.max() - ot.min() + 1
        order = np.argsort(on * frames + (ot - ot.min()), kind="stable")
        batches.append((torch.from_numpy(x),
                        torch.from_numpy(sup.indices[order].astype(np.int64)),
                        torch.from_numpy(sup.values[order].astype(np.float32)),
                        int(frames), int(ot.min() - t.min())))
    return batches


def torch_model(work: Path):
    import torch

    from pynnet3.compile.model_io import read_nnet

    ng = read_nnet(str(work / "0.raw"))
    layers = []
    for name in AFFINES:
        c = ng.components[ng.component_names.index(name)]
        lin = torch.nn.Linear(c.linear_params.shape[1], c.linear_params.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(c.linear_params))
            lin.bias.copy_(torch.from_numpy(c.bias_params))
        layers.append(lin)
        if name != "output.affine":
            layers += [torch.nn.ReLU(), torch.nn.BatchNorm1d(512, eps=1e-3, affine=False)]
    model = torch.nn.Sequential(*layers)
    model.train()
    return model


def torch_loop(work: Path, batches: list) -> tuple[float, float, float]:
    """(wall s, CPU s, objective per frame) of one pass of plain SGD."""
    import torch

    model = torch_model(work)
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    tot_objf = tot_weight = 0.0
    wall, cpu = time.perf_counter(), time.process_time()
    for x, label, weight, frames, left in batches:
        # Append(Offset(input, -2..2)) for each output frame, one row per frame.
        spliced = torch.cat([x[:, left + o:left + o + frames] for o in SPLICE], dim=2)
        logp = torch.log_softmax(model(spliced.reshape(-1, spliced.shape[2])), dim=1)
        objf = (logp.gather(1, label[:, None])[:, 0] * weight).sum()
        opt.zero_grad(set_to_none=True)
        (-objf).backward()                 # Kaldi maximises the summed objective
        opt.step()
        tot_objf += float(objf.detach())
        tot_weight += float(weight.sum())
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, tot_objf / tot_weight


# ---------------------------------------------------------------------------


def loops(args: argparse.Namespace, work: Path, merged: str) -> None:
    """The in-process rows (run in a worker process whose thread variables
    are the setting's, since OpenBLAS fixes its pool when loaded)."""
    egs = load_egs(work / merged)
    rows = supervised_rows(egs)
    kaldi_fps = ks.recorded(f"nnet3-train mb{args.minibatch_size} {args.threads}")

    def row(label: str, walls: list[float], cpus: list[float], objf: float | None,
            ratio: str) -> float:
        w, c = min(walls), min(cpus)
        objf_text = f"{objf:11.5f}" if objf is not None else f"{'-':>11s}"
        print(f"  {label:34s} {w:7.2f} {rows / w:9,.0f} {c:7.2f} {rows / c:9,.0f} "
              f"{objf_text}  {ratio}", flush=True)
        return rows / w

    print(f"  {'in-process loops (best of runs)':34s} {'wall s':>7s} {'frames/s':>9s} "
          f"{'cpu s':>7s} {'frames/s':>9s} {'objf/frame':>11s}  ratio", flush=True)
    warm_up(work, egs)
    results = {}
    for plain in (False, True):
        results[plain] = [pynnet3_loop(work, egs, plain) for _ in range(args.runs)]
    ng = results[False]
    ratio = (f"{rows / min(r[0] for r in ng) / kaldi_fps[0]:.2f} x Kaldi recorded (wall)"
             if kaldi_fps else "")
    row("pynnet3 loop, natural gradient", [r[0] for r in ng], [r[1] for r in ng],
        ng[0][2], ratio)
    pl = results[True]
    plain_fps = row("pynnet3 loop, plain SGD", [r[0] for r in pl], [r[1] for r in pl],
                    pl[0][2], "")
    if args.no_torch:
        print("  PyTorch: skipped (--no-torch)")
        return
    try:
        import torch
    except ImportError:
        print("  PyTorch: not installed (pip install torch), row skipped")
        return
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    batches = torch_batches(egs)
    torch_loop(work, batches[:1])                      # warm-up
    # Alternate with pynnet3's plain loop, so that load hits both alike.
    t_runs, p_runs = [], []
    for _ in range(args.runs):
        t_runs.append(torch_loop(work, batches))
        p_runs.append(pynnet3_loop(work, egs, True))
    p_fps = rows / min(r[0] for r in p_runs)
    torch_fps = row(f"PyTorch {torch.__version__} loop, plain SGD", [r[0] for r in t_runs],
                    [r[1] for r in t_runs], t_runs[0][2], "")
    print(f"  pynnet3 plain SGD / PyTorch plain SGD (wall, alternated): "
          f"{p_fps / torch_fps:.2f}x  (pynnet3 {p_fps:,.0f}, earlier row {plain_fps:,.0f}; "
          f"PyTorch {torch_fps:,.0f} frames/s)", flush=True)


def parse_threads(text: str) -> list[int | None]:
    return [None if t in ("default", "none") else int(t) for t in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minibatch-size", default="128,16",
                    help="egs per minibatch, a comma list of 128 and/or 16 (default both)")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (best of)")
    ap.add_argument("--threads", default="1,2",
                    help="comma list of thread settings: N sets OPENBLAS/OMP/MKL/"
                         "NUMBA_NUM_THREADS=N, 'default' unsets them (default 1,2)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-binary", action="store_true",
                    help="skip the nnet3-train process rows (Kaldi and pynnet3)")
    ap.add_argument("--no-loops", action="store_true",
                    help="skip the in-process rows (pynnet3 loops, PyTorch)")
    ap.add_argument("--keep", metavar="DIR", help="make (or reuse) the data in DIR")
    ap.add_argument("--loops-worker", action="store_true", help=argparse.SUPPRESS)
    ks.add_arguments(ap)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "src"))

    if args.loops_worker:             # one setting; the parent set the environment
        args.minibatch_size = int(args.minibatch_size)
        args.threads = parse_threads(args.threads)[0]
        loops(args, Path(args.keep), f"merged{args.minibatch_size}.ark")
        return

    sizes = [int(m) for m in args.minibatch_size.split(",")]
    threads = parse_threads(args.threads)
    kaldi = ks.kaldi_from_args(args, need="nnet3-train")
    # An installed pynnet3 starts from compiled bytecode (pip writes the .pyc
    # files); a checkout run with PYTHONDONTWRITEBYTECODE=1 (as on the
    # project's machines) would otherwise compile ~100 modules in every
    # process, about 0.2 s of each nnet3-train's start-up.
    import compileall

    compileall.compile_dir(str(ROOT / "src"), quiet=1)
    tmp = None
    if args.keep:
        work = Path(args.keep)
        work.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="pynnet3-bench-train-")
        work = Path(tmp)
    try:
        print(f"timing TDNN (1.65M parameters), egs of 8 frames; best of {args.runs} runs; "
              f"ratio = pynnet3 speed / Kaldi speed; "
              f"Kaldi: {kaldi.root if kaldi else 'not built here (recorded figures)'}",
              flush=True)
        print(ks.blas_cores(kaldi, "nnet3-train"), flush=True)
        for mb in sizes:
            merged = prepare(work, mb)
            egs = load_egs(work / merged)
            rows, num_mb = supervised_rows(egs), len(egs)
            del egs
            for t in threads:
                print(f"nnet3-train, {num_mb} minibatches of {mb} egs, {ks.thread_label(t)}: "
                      f"{rows} supervised frames per pass", flush=True)
                env = ks.thread_env(t)
                if not args.no_binary:
                    kcmd = ([str(kaldi.require("nnet3-train")), "--srand=1", "0.raw",
                             f"ark:{merged}", "kaldi_out.raw"] if kaldi else None)
                    pcmd = ks.pynnet3_command("nnet3-train", "--srand=1", "0.raw",
                                              f"ark:{merged}", "out.raw")
                    pair = ks.side_by_side(kcmd, pcmd, runs=args.runs, env=env, cwd=work)
                    print("  " + ks.format_pair("process", pair, work_units=rows,
                                                recorded_key=f"nnet3-train mb{mb} {t}"),
                          flush=True)
                if not args.no_loops:
                    cmd = [sys.executable, __file__, "--loops-worker", "--keep", str(work),
                           "--minibatch-size", str(mb), "--runs", str(args.runs),
                           "--threads", "default" if t is None else str(t)]
                    if args.no_torch:
                        cmd.append("--no-torch")
                    p = subprocess.run(cmd, env=env)
                    if p.returncode != 0:
                        print(f"  in-process rows failed (exit {p.returncode})", flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
