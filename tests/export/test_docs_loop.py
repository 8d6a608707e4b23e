"""The onnxruntime-only loop of docs/export.md gives nnet3-compute-onnx's
output (one, two and many chunk geometries; with and without iVectors)."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT, nnet_from_config, reference_dir

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from pynnet3.compute.decodable import NnetSimpleComputationOptions  # noqa: E402
from pynnet3.export.exporter import ExportOptions, translate_nnet  # noqa: E402
from pynnet3.export.onnx_model import nnet3_export_onnx, to_onnx_model  # noqa: E402
from pynnet3.export.runtime import OnnxNnet  # noqa: E402

RECURRENT = """\
input-node name=input dim=3
component name=a type=NaturalGradientAffineComponent input-dim=7 output-dim=4
component-node name=a component=a input=Append(input, IfDefined(Offset(t, {offset})))
component name=t type=TanhComponent dim=4
component-node name=t component=t input=a
component name=o type=AffineComponent input-dim=4 output-dim=2
component-node name=o component=o input=t
output-node name=output input=o
"""


def _docs_compute():
    page = (ROOT / "docs" / "export.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 1
    namespace: dict = {}
    exec(compile(blocks[0], "docs/export.md", "exec"), namespace)
    return namespace["compute"]


@pytest.mark.parametrize("offset,opts", [
    (-1, dict(frames_per_chunk=5, extra_left_context=4, extra_left_context_initial=0)),
    (2, dict(frames_per_chunk=4, extra_right_context=3, extra_right_context_final=0)),
], ids=["forward", "backward"])
def test_docs_loop_synthetic(offset: int, opts: dict, tmp_path: Path) -> None:
    compute = _docs_compute()
    nnet = nnet_from_config(RECURRENT.format(offset=offset))
    t = translate_nnet(copy.deepcopy(nnet), ExportOptions(
        opts=NnetSimpleComputationOptions(acoustic_scale=1.0, **opts)))
    assert len(t.programs) > 1
    path = tmp_path / "m.onnx"
    path.write_bytes(to_onnx_model(t).SerializeToString())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    model = OnnxNnet(str(path))
    rng = np.random.RandomState(2)
    for n in (1, 3, 4, 9, 22):
        feats = rng.randn(n, 3).astype(np.float32)
        np.testing.assert_array_equal(compute(session, feats), model.compute(feats))


def test_docs_loop_tdnn_with_ivectors(tmp_path: Path) -> None:
    compute = _docs_compute()
    case = "tdnn_xent_nnet3_wsj_1b"
    d = reference_dir(f"small/{case}/1.raw") / "small" / case
    path = tmp_path / "m.onnx"
    nnet3_export_onnx(ExportOptions(opts=NnetSimpleComputationOptions(
        acoustic_scale=1.0, frames_per_chunk=20, frame_subsampling_factor=3)),
        str(d / "1.raw"), str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    model = OnnxNnet(str(path))
    rng = np.random.RandomState(3)
    ivector = rng.randn(20).astype(np.float32)
    for n in (2, 21, 70):
        feats = rng.randn(n, 40).astype(np.float32)
        np.testing.assert_array_equal(compute(session, feats, ivector),
                                      model.compute(feats, ivector))
