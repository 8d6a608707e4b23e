"""Helpers of the nnet3-compute tests (test_nnet3_compute.py, test_batched.py):
comparison with Kaldi's outputs, the tiny test network, and the cases of
reference/small (real recipe architectures with nnet3-compute's outputs)."""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3.cache import CachingCompiler
from pynnet3.compute.decodable import NnetSimpleComputationOptions, prepare_nnet_for_test
from pynnet3.compile.model_io import read_nnet
from pynnet3.nnet.nnet import Nnet
from tests.helpers import curated, reference_dir


# Kaldi's float32 outputs vs ours: log-probs of magnitude up to ~30.
RTOL = 1e-4
ATOL = 1e-4


def assert_close(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape} vs Kaldi's {ref.shape}"
    diff = np.abs(ours.astype(np.float64) - ref)
    bad = diff > ATOL + RTOL * np.abs(ref)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} values differ; max abs diff "
                    f"{diff.max():.3g}; first at row {r} col {c}: ours {ours[r, c]!r}, "
                    f"Kaldi's {ref[r, c]!r}")


def new_compiler(nnet: Nnet, opts: NnetSimpleComputationOptions) -> CachingCompiler:
    return CachingCompiler(nnet, opts.compiler_config, opts.optimize_config, use_disk=False)


TINY_CONFIG = """input-node name=input dim=3
input-node name=ivector dim=2
component name=affine type=AffineComponent input-dim=11 output-dim=4
component-node name=affine component=affine input=Append(Offset(input, -2), input, Offset(input, 1), ReplaceIndex(ivector, t, 0))
output-node name=output input=affine
"""


def parse_compute_command(line: str) -> tuple[dict[str, int], bool, str]:
    """(NnetSimpleComputationOptions fields, uses --ivectors, output archive
    name) of an ``nnet3-compute`` line of commands.txt."""
    words = shlex.split(line.split(" 2>")[0])
    assert words[0] == "nnet3-compute"
    fields: dict[str, int] = {}
    ivectors = False
    positional = []
    for w in words[1:]:
        if not w.startswith("--"):
            positional.append(w)
            continue
        name, _, value = w[2:].partition("=")
        if name == "ivectors":
            ivectors = True
        else:
            fields[name.replace("-", "_")] = int(value)
    return fields, ivectors, positional[2].split(":", 1)[1]


def load_ark(path: Path) -> dict[str, np.ndarray]:
    import kaldiio

    return {k: np.asarray(v) for k, v in kaldiio.load_ark(str(path))}


SMALL = curated("small", ["cnn_e2eali_ocr_bentham_1a", "lstmp_swbd_6j", "tdnn_attention_swbd_1a",
                          "tdnn_lstm_swbd_1e", "tdnn_norm_opgru_ami_1a", "tdnn_xent_nnet3_wsj_1b",
                          "tdnnf_librispeech_1d", "xvector_sre16_1a"])


_SMALL_CACHE: dict[str, Any] = {}


def small_case(name: str) -> dict[str, Any]:
    """The prepared network, inputs and nnet3-compute commands of one case
    (kept for the module: preparing and compiling is what costs)."""
    if name not in _SMALL_CACHE:
        d = reference_dir() / "small" / name
        nnet = read_nnet(str(d / "1.raw"))
        prepare_nnet_for_test(nnet)
        commands = {}
        for line in (d / "commands.txt").read_text().splitlines():
            if line.startswith("nnet3-compute "):
                fields, ivectors, archive = parse_compute_command(line)
                commands[archive] = (fields, ivectors)
        ivectors_path = d / "ivectors_test.ark"
        _SMALL_CACHE[name] = {
            "dir": d, "nnet": nnet, "commands": commands, "compiler": None,
            "feats": load_ark(d / "feats_test.ark"),
            "ivectors": load_ark(ivectors_path) if ivectors_path.exists() else None}
    return _SMALL_CACHE[name]


# A CI subset: each architecture once, with the short utterances; test02
# (77 frames) where several chunks are what is being tested.
SMALL_CI = [
    ("tdnn_xent_nnet3_wsj_1b", "out_a.ark", ["test01", "test02"]),
    ("tdnn_xent_nnet3_wsj_1b", "out_b.ark", ["test02"]),
    ("lstmp_swbd_6j", "out_b.ark", ["test02"]),        # 4 chunks, extra left context 40
    ("lstmp_swbd_6j", "out_c.ark", ["test01"]),
    ("tdnn_lstm_swbd_1e", "out_a.ark", ["test02"]),    # 2 chunks
    ("tdnn_attention_swbd_1a", "out_c.ark", ["test02"]),
    ("cnn_e2eali_ocr_bentham_1a", "out_a.ark", ["test01"]),
    ("tdnnf_librispeech_1d", "out_c.ark", ["test01"]),
    ("tdnn_norm_opgru_ami_1a", "out_a.ark", ["test01"]),
]
SMALL_CI = [c for c in SMALL_CI if c[0] in SMALL]
