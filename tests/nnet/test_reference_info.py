"""nnet3-init + nnet3-info against real Kaldi's output (../shared/reference)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from pynnet3.compile.graph.context import nnet_info
from pynnet3.compile.model_io import read_nnet
from pynnet3.nnet.nnet import Nnet
from tests.helpers import SHARED_REFERENCE

CONFIG_DIRS = sorted((SHARED_REFERENCE / "configs").glob("*/")) if SHARED_REFERENCE.is_dir() else []
RANDOM_DIRS = sorted((SHARED_REFERENCE / "random").glob("[0-9]*/")) if SHARED_REFERENCE.is_dir() else []
_DIM_RE = re.compile(r"\b((?:input-|output-)?dim)=(\d+)")


def structure(info: str) -> tuple[list[str], list[tuple]]:
    """Header and node lines verbatim; component lines reduced to name, type, dims."""
    head, comps = [], []
    for line in info.splitlines():
        if line.startswith("component name="):
            m = re.match(r"component name=(\S+) type=(\w+)", line)
            assert m, line
            dims = _DIM_RE.findall(line.split(", ", 1)[1]) if ", " in line else []
            comps.append((m.group(1), m.group(2), tuple(dims[:2])))
        else:
            head.append(line)
    return head, comps


def init_from(paths: list[Path]) -> Nnet:
    nnet = Nnet()
    for p in paths:
        nnet.read_config(p.read_text(), str(p))
    return nnet


@pytest.mark.skipif(not CONFIG_DIRS, reason="reference configs/ not present")
@pytest.mark.parametrize("d", CONFIG_DIRS, ids=lambda d: d.name)
def test_recipe_config_structure_matches_kaldi(d: Path) -> None:
    ours = structure(nnet_info(init_from([d / "ref.config"])))
    kaldi = structure((d / "kaldi-nnet3-info.txt").read_text())
    assert ours[0] == kaldi[0]
    assert ours[1] == kaldi[1]


@pytest.mark.skipif(not RANDOM_DIRS, reason="reference random/ not present")
@pytest.mark.parametrize("d", RANDOM_DIRS, ids=lambda d: d.name)
def test_random_config_sequence_structure_matches_kaldi(d: Path) -> None:
    configs = sorted(d.glob("config*.txt"), key=lambda p: int(re.sub(r"\D", "", p.name)))
    ours = structure(nnet_info(init_from(configs)))
    kaldi = structure((d / "nnet-info.txt").read_text())
    assert ours == kaldi


@pytest.mark.skipif(not RANDOM_DIRS, reason="reference random/ not present")
@pytest.mark.parametrize("d", RANDOM_DIRS, ids=lambda d: d.name)
def test_kaldi_random_models_info_is_identical(d: Path) -> None:
    expected = (d / "nnet-info.txt").read_text()
    for name in ("final.raw", "final.txt.raw"):
        ours = nnet_info(read_nnet(str(d / name)))
        if ours != expected:
            diff = [(a, b) for a, b in zip(ours.splitlines(), expected.splitlines()) if a != b]
            pytest.fail(f"{name}: {len(diff)} lines differ, first:\n ours: {diff[0][0] if diff else ''}"
                        f"\nkaldi: {diff[0][1] if diff else ''}")
