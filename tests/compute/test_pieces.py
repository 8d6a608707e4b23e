"""nnet3-compute's longer pieces (pynnet3.compute.batched: chunking_free,
plan_pieces, ChunkBatchComputer without kaldi_chunks): for networks whose
outputs do not depend on the chunking, computing an utterance in pieces
that compute their context once gives what Kaldi's chunks give (each with
its own context), within float tolerance; the others keep Kaldi's chunks.

* the cut of an utterance into pieces (the last may overlap the one before);
* the decision, on the reference recipe networks (TDNN, TDNN-F, CNN: free;
  LSTMP, TDNN-LSTM, OPGRU: recurrent; attention, x-vector statistics: not)
  and on tiny configs (IfDefined, ReplaceIndex of a computed node, a
  batch-norm in training mode, a convolution with optional time offsets);
* pieces vs Kaldi's chunks on the TDNN (iVectors), the TDNN-F (iVectors) and
  the CNN (none), with and without frame subsampling, for utterances
  shorter than a chunk, of exactly one chunk, and of several pieces;
* recurrent and statistics networks and online iVectors take Kaldi's chunks.
"""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.compute.batched import ChunkBatchComputer, chunking_free, plan_pieces
from pynnet3.compute.decodable import (DecodableNnetSimple, NnetSimpleComputationOptions,
                                       prepare_nnet_for_test)
from pynnet3.nnet.nnet import Nnet
from tests.compute.nnet3_compute_cases import SMALL, TINY_CONFIG, new_compiler, small_case
from tests.helpers import curated


def test_plan_pieces() -> None:
    # 333 frames, chunks of 17: 16 chunks, then 4 chunks ending at the end
    # (overlapping 7 frames) rather than 2 + (1 chunk + the last 10).
    assert plan_pieces(333, 17, 16) == [(0, 272), (265, 68)]
    assert plan_pieces(333, 17, 4) == [(0, 68), (68, 68), (136, 68), (204, 68), (265, 68)]
    # ... only where it starts on the network's modulus (align): 265 is odd.
    assert plan_pieces(333, 17, 16, align=2) == [(0, 272), (272, 34), (306, 27)]
    assert plan_pieces(333, 17, 16, align=5) == [(0, 272), (265, 68)]
    assert plan_pieces(10, 17, 16) == [(0, 10)]           # shorter than a chunk
    assert plan_pieces(17, 17, 16) == [(0, 17)]           # one chunk
    assert plan_pieces(34, 17, 16) == [(0, 34)]
    assert plan_pieces(40, 17, 16) == [(0, 34), (34, 6)]  # 4 chunks would not fit
    assert plan_pieces(20, 17, 16) == [(0, 20)]           # one chunk + Kaldi's last
    assert plan_pieces(40, 17, 1) == [(0, 17), (17, 17), (34, 6)]
    assert plan_pieces(0, 17, 16) == []
    for num, spc, most, align in [(1, 5, 3, 1), (99, 7, 8, 3), (1000, 50, 16, 1), (3, 1, 2, 1),
                                  (5000, 17, 16, 2), (777, 17, 4, 4)]:
        pieces = plan_pieces(num, spc, most, align)
        covered = np.zeros(num, bool)
        for start, n in pieces:
            assert 0 <= start and start + n <= num
            # A power of two of chunks, or Kaldi's last chunk (+ one chunk).
            chunks = n // spc
            assert (n % spc == 0 and chunks & (chunks - 1) == 0 and chunks <= most) \
                or n < 2 * spc
            assert start % align == 0 or start % spc == 0
            covered[start:start + n] = True
        assert covered.all()


EXPECTED = {
    "cnn_e2eali_ocr_bentham_1a": None, "tdnn_xent_nnet3_wsj_1b": None,
    "tdnnf_librispeech_1d": None, "lstmp_swbd_6j": "recurrent",
    "tdnn_lstm_swbd_1e": "recurrent", "tdnn_norm_opgru_ami_1a": "recurrent",
    "tdnn_attention_swbd_1a": "RestrictedAttentionComponent",
    "xvector_sre16_1a": "StatisticsExtractionComponent",
}


@pytest.mark.parametrize("name", SMALL)
def test_chunking_free_on_recipe_networks(name: str) -> None:
    reason = chunking_free(small_case(name)["nnet"])
    want = EXPECTED[name]
    if want is None:
        assert reason is None
    else:
        assert reason is not None and want in reason


def tiny_nnet(config: str) -> Nnet:
    nnet = Nnet()
    nnet.read_config(config, "tiny")
    return nnet


def test_chunking_free_on_tiny_configs() -> None:
    assert chunking_free(tiny_nnet(TINY_CONFIG)) is None        # ReplaceIndex(ivector, t, 0)
    ifdefined = TINY_CONFIG.replace("Offset(input, -2)", "IfDefined(Offset(input, -2))")
    assert "IfDefined" in chunking_free(tiny_nnet(ifdefined))
    failover = TINY_CONFIG.replace("Offset(input, -2)", "Failover(Offset(input, -2), input)")
    assert "Failover" in chunking_free(tiny_nnet(failover))
    replace = """input-node name=input dim=3
component name=a type=AffineComponent input-dim=3 output-dim=3
component-node name=a component=a input=input
component name=b type=AffineComponent input-dim=6 output-dim=2
component-node name=b component=b input=Append(a, ReplaceIndex(a, t, 0))
output-node name=output input=b
"""
    assert "ReplaceIndex" in chunking_free(tiny_nnet(replace))
    bn = """input-node name=input dim=3
component name=bn type=BatchNormComponent dim=3
component-node name=bn component=bn input=Append(Offset(input, -1), input)
output-node name=output input=bn
""".replace("dim=3\ncomponent-node", "dim=6\ncomponent-node")
    nnet = tiny_nnet(bn)
    assert "test mode" in chunking_free(nnet)
    prepare_nnet_for_test(nnet)
    assert chunking_free(nnet) is None
    conv = """input-node name=input dim=4
component name=conv type=TimeHeightConvolutionComponent num-filters-in=1 height-in=4 height-out=4 num-filters-out=2 height-offsets=-1,0,1 time-offsets=-1,0,1 required-time-offsets=0
component-node name=conv component=conv input=input
output-node name=output input=conv
"""
    assert "optional time offsets" in chunking_free(tiny_nnet(conv))
    assert chunking_free(tiny_nnet(conv.replace(" required-time-offsets=0", ""))) is None


# (network, frame subsampling factor): TDNN and TDNN-F with iVectors, the CNN without.
PIECE_CASES = [(n, f) for n in curated("small", ["tdnn_xent_nnet3_wsj_1b", "tdnnf_librispeech_1d",
                                                 "cnn_e2eali_ocr_bentham_1a"]) for f in (1, 3)]


@pytest.mark.parametrize("name,fss", PIECE_CASES, ids=[f"{n}-fss{f}" for n, f in PIECE_CASES])
def test_pieces_equal_kaldi_chunks(name: str, fss: int) -> None:
    case = small_case(name)
    nnet = case["nnet"]
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=fss)
    opts = opts.check_and_fix_configs(nnet.modulus(), log_change=False)
    compiler = new_compiler(nnet, opts)
    rng = np.random.RandomState(7)
    ivector_dim = nnet.input_dim("ivector")
    ivector = rng.randn(ivector_dim).astype(np.float32) if ivector_dim > 0 else None
    chunk = opts.frames_per_chunk
    pieces = ChunkBatchComputer(4)
    kaldi = ChunkBatchComputer(4, kaldi_chunks=True)
    # Shorter than a chunk, exactly a chunk, and 7 chunks + a bit (pieces 4, 2, 1 + rest).
    for length in (13, chunk, 7 * chunk + 20):
        feats = rng.randn(length, nnet.input_dim("input")).astype(np.float32)

        def dec() -> DecodableNnetSimple:
            return DecodableNnetSimple(opts, nnet, None, feats, compiler, ivector=ivector)

        assert pieces.uses_pieces(dec()) and not kaldi.uses_pieces(dec())
        want = dec().get_all_output()                  # Kaldi's chunks, one at a time
        got = pieces.get_all_output(dec())
        assert got.shape == want.shape == ((length + fss - 1) // fss, nnet.output_dim("output"))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4,
                                   err_msg=f"{name} fss={fss} length={length}")
        np.testing.assert_allclose(kaldi.get_all_output(dec()), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", curated("small", ["lstmp_swbd_6j", "tdnn_attention_swbd_1a",
                                                   "xvector_sre16_1a"]))
def test_other_networks_take_kaldis_chunks(name: str, monkeypatch) -> None:
    case = small_case(name)
    nnet = case["nnet"]
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0)
    ivector_dim = nnet.input_dim("ivector")
    ivector = np.zeros(ivector_dim, np.float32) if ivector_dim > 0 else None
    feats = np.zeros((120, nnet.input_dim("input")), np.float32)
    dec = DecodableNnetSimple(opts, nnet, None, feats, new_compiler(nnet, opts), ivector=ivector)
    batcher = ChunkBatchComputer(4)
    assert not batcher.uses_pieces(dec)
    # ... and get_all_output never asks for a piece.
    monkeypatch.setattr(DecodableNnetSimple, "piece_inputs",
                        lambda *a: pytest.fail("a piece was asked for"))
    if name == "lstmp_swbd_6j":
        assert batcher.get_all_output(dec).shape[0] == 120


def test_online_ivectors_take_kaldis_chunks() -> None:
    nnet = small_case("tdnn_xent_nnet3_wsj_1b")["nnet"]
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0)
    feats = np.zeros((120, nnet.input_dim("input")), np.float32)
    online = np.zeros((12, nnet.input_dim("ivector")), np.float32)
    dec = DecodableNnetSimple(opts, nnet, None, feats, new_compiler(nnet, opts),
                              online_ivectors=online, online_ivector_period=10)
    assert chunking_free(nnet) is None and not ChunkBatchComputer(4).uses_pieces(dec)
