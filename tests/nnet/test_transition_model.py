"""TransitionModel / HmmTopology / AmNnetSimple I/O against Kaldi's formats."""
from __future__ import annotations

import os

import numpy as np
import pytest

from pynnet3.compile import am_nnet
from pynnet3.compile.am_nnet import AmNnetSimple, mdl_bytes, read_mdl, write_mdl
from pynnet3.compile.graph.context import nnet_info
from pynnet3.errors import FormatError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.transition_model import HmmTopology, TransitionModel, TransitionTuple
from tests.helpers import REFERENCE

VOSK_REF = str(REFERENCE / "vosk_ko")


def _write(obj, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    obj.write(w)
    return w.getvalue()


def _read_tm(data: bytes, binary: bool) -> tuple[TransitionModel, int]:
    r = KaldiReader(data, binary, "test", pos=2 if binary and data.startswith(b"\0B") else 0)
    tm = TransitionModel()
    tm.read(r)
    return tm, r.pos


@pytest.fixture(scope="module")
def vosk_bytes(vosk_mdl) -> bytes:
    with open(vosk_mdl, "rb") as f:
        return f.read()


# ---------------------------------------------------------------------------
# The real model


def test_vosk_transition_model_binary_identity(vosk_bytes):
    tm, end = _read_tm(vosk_bytes, True)
    # The TransitionModel ends right where the nnet starts.
    assert vosk_bytes[end:end + 8] == b"<Nnet3> "
    assert _write(tm, True) == vosk_bytes[2:end]
    # Chain model: separate self-loop pdfs, one topology entry for all phones.
    assert not tm.is_hmm()
    assert len(tm.topo.entries) == 1
    assert tm.num_pdfs() == 2616  # = num-pdfs printed by nnet3-am-info
    assert tm.num_phones() == 194
    assert tm.num_transition_states() == 5943
    assert tm.num_transition_ids() == 11886
    assert tm.log_probs.shape == (11887,)


def test_vosk_transition_model_text_round_trip(vosk_bytes):
    tm, end = _read_tm(vosk_bytes, True)
    text = _write(tm, False)
    assert text.startswith(b"<TransitionModel> \n<Topology> \n<TopologyEntry> \n<ForPhones> \n1 2 3 ")
    assert b"<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 " \
           b"<Transition> 1 0.5 </State> \n<State> 1 </State> \n" in text
    assert b"</Topology> \n<Tuples> 5943 \n1 0 0 44 \n" in text
    assert text.endswith(b" ]\n</LogProbs> \n</TransitionModel> \n")
    tm2, end2 = _read_tm(text, False)
    assert text[end2:].strip() == b""
    assert tm2 == tm
    assert _write(tm2, False) == text
    assert _write(tm2, True) == vosk_bytes[2:end]


def test_vosk_transition_model_mappings(vosk_bytes):
    tm, _ = _read_tm(vosk_bytes, True)
    # Every state has a self-loop (index 0) and a forward transition (index 1)
    # into the final state; pdfs follow the tuple's self-loop / forward pdf.
    for tstate in (1, 11, 5943):
        t = tm.tuples[tstate - 1]
        loop = tm.self_loop_of(tstate)
        fwd = tm.pair_to_transition_id(tstate, 1)
        assert loop == tm.pair_to_transition_id(tstate, 0)
        assert tm.is_self_loop(loop) and not tm.is_self_loop(fwd)
        assert tm.is_final(fwd) and not tm.is_final(loop)
        assert tm.transition_id_to_pdf(loop) == t.self_loop_pdf
        assert tm.transition_id_to_pdf(fwd) == t.forward_pdf
        assert tm.transition_id_to_pdf_class(loop) == 1
        assert tm.transition_id_to_pdf_class(fwd) == 0
        assert tm.transition_id_to_phone(fwd) == t.phone
        assert tm.tuple_to_transition_state(*t) == tstate
        assert tm.get_non_self_loop_log_prob(tstate) == pytest.approx(np.log(0.5), abs=1e-6)
    pdfs = tm.transition_id_to_pdf_array()[1:]
    assert pdfs.min() == 0 and pdfs.max() == tm.num_pdfs() - 1


# ---------------------------------------------------------------------------
# Handwritten models in Kaldi's text format

LP75, LP25, LP50 = "-0.2876821", "-1.386294", "-0.6931472"

HMM_TEXT = (
    "<TransitionModel> \n<Topology> \n"
    "<TopologyEntry> \n<ForPhones> \n1 2 \n</ForPhones> \n"
    "<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State> \n"
    "<State> 1 <PdfClass> 1 <Transition> 1 0.75 <Transition> 2 0.25 </State> \n"
    "<State> 2 </State> \n</TopologyEntry> \n"
    "<TopologyEntry> \n<ForPhones> \n3 \n</ForPhones> \n"
    "<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State> \n"
    "<State> 1 </State> \n</TopologyEntry> \n"
    "</Topology> \n"
    "<Triples> 5 \n1 0 0 \n1 1 1 \n2 0 2 \n2 1 3 \n3 0 4 \n</Triples> \n"
    f"<LogProbs> \n [ 0 {LP75} {LP25} {LP75} {LP25} {LP75} {LP25} {LP75} {LP25} {LP50} {LP50} ]\n"
    "</LogProbs> \n</TransitionModel> \n"
).encode()

CHAIN_TEXT = (
    "<TransitionModel> \n<Topology> \n"
    "<TopologyEntry> \n<ForPhones> \n1 2 \n</ForPhones> \n"
    "<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 <Transition> 1 0.5 </State> \n"
    "<State> 1 </State> \n</TopologyEntry> \n"
    "</Topology> \n"
    "<Tuples> 3 \n1 0 0 3 \n2 0 1 4 \n2 0 2 6 \n</Tuples> \n"
    f"<LogProbs> \n [ 0 {LP50} {LP50} {LP50} {LP50} {LP50} {LP50} ]\n"
    "</LogProbs> \n</TransitionModel> \n"
).encode()


def test_hmm_text_model():
    tm, end = _read_tm(HMM_TEXT, False)
    assert HMM_TEXT[end:].strip() == b""
    assert tm.is_hmm()
    assert tm.topo.phones == [1, 2, 3] and tm.topo.phone2idx == [-1, 0, 0, 1]
    assert tm.tuples[1] == TransitionTuple(1, 1, 1, 1)  # <Triples>: self-loop pdf = forward pdf
    assert tm.num_pdfs() == 5 and tm.num_phones() == 3
    assert tm.num_transition_ids() == 10
    assert tm.transition_id_to_pdf_array().tolist() == [0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert tm.is_final(4) and not tm.is_final(2) and tm.is_self_loop(3)
    assert tm.get_transition_prob(2) == pytest.approx(0.25)
    assert tm.get_non_self_loop_log_prob(1) == pytest.approx(np.log(0.25), rel=1e-6)
    assert tm.get_transition_log_prob_ignoring_self_loops(2) == pytest.approx(0.0, abs=1e-6)
    assert tm.topo.num_pdf_classes(1) == 2 and tm.topo.min_length(1) == 2
    assert tm.topo.min_length(3) == 1
    # Written back exactly as Kaldi writes it, and through binary unchanged.
    assert _write(tm, False) == HMM_TEXT
    binary = _write(tm, True)
    # An HMM topology has no -1 marker before its entry count.
    phone2idx = b"\x04\x04\x00\x00\x00" + np.array([-1, 0, 0, 1], "<i4").tobytes()
    assert phone2idx + b"\x04\x02\x00\x00\x00" in binary
    assert b"<Triples> " in binary
    tm2, end2 = _read_tm(binary, True)
    assert end2 == len(binary) and tm2 == tm
    assert _write(tm2, False) == HMM_TEXT


def test_chain_text_model():
    tm, _ = _read_tm(CHAIN_TEXT, False)
    assert not tm.is_hmm()
    assert tm.num_pdfs() == 7 and tm.num_transition_ids() == 6
    assert tm.transition_id_to_pdf_array().tolist() == [0, 3, 0, 4, 1, 6, 2]
    assert _write(tm, False) == CHAIN_TEXT
    binary = _write(tm, True)
    assert b"<Topology> \x04\x02\x00\x00\x00" in binary  # phones [1 2]
    # The -1 marker announces per-state self-loop pdf-classes.
    assert b"\x04\xff\xff\xff\xff\x04\x01\x00\x00\x00" in binary
    tm2, _ = _read_tm(binary, True)
    assert _write(tm2, True) == binary
    assert _write(tm2, False) == CHAIN_TEXT


def test_legacy_triples_with_chain_topology():
    # <Triples> on a topology with distinct self-loop classes: the self-loop
    # pdf is taken equal to the forward pdf, and Kaldi writes <Tuples> back.
    text = CHAIN_TEXT.replace(b"<Tuples> 3 \n1 0 0 3 \n2 0 1 4 \n2 0 2 6 \n</Tuples>",
                              b"<Triples> 2 \n1 0 0 \n2 0 1 \n</Triples>")
    text = text.replace(f" [ 0 {LP50} {LP50} {LP50} {LP50} {LP50} {LP50} ]".encode(),
                        f" [ 0 {LP50} {LP50} {LP50} {LP50} ]".encode())
    tm, _ = _read_tm(text, False)
    assert tm.tuples == [TransitionTuple(1, 0, 0, 0), TransitionTuple(2, 0, 1, 1)]
    assert tm.num_pdfs() == 2
    out = _write(tm, False)
    assert b"<Tuples> 2 \n1 0 0 0 \n2 0 1 1 \n</Tuples> \n" in out


def test_tolerated_variants():
    # Loosely formatted text (as someone might type a topology), <Tuple>
    # wrappers, and no </TransitionModel>: all read, canonical output.
    loose = (CHAIN_TEXT.replace(b"\n", b"  \n ")
             .replace(b"1 0 0 3 ", b"<Tuple> 1 0 0 3 </Tuple> ")
             .replace(b"</TransitionModel> ", b""))
    tm, _ = _read_tm(loose, False)
    assert _write(tm, False) == CHAIN_TEXT
    # Log-probs stored as a double vector (DV) in binary are read too.
    binary = _write(tm, True)
    tm_b, _ = _read_tm(binary, True)
    lp = tm_b.log_probs
    fv = b"FV \x04" + len(lp).to_bytes(4, "little") + lp.astype("<f4").tobytes()
    dv = b"DV \x04" + len(lp).to_bytes(4, "little") + lp.astype("<f8").tobytes()
    assert fv in binary
    tm_d, end = _read_tm(binary.replace(fv, dv), True)
    assert end == len(binary.replace(fv, dv))
    assert _write(tm_d, True) == binary
    # Missing </TransitionModel> before the nnet in a binary stream.
    cut = binary.replace(b"</TransitionModel> ", b"") + b"<Nnet3> "
    r = KaldiReader(cut, True, "cut")
    TransitionModel().read(r)
    assert cut[r.pos:] == b"<Nnet3> "


@pytest.mark.parametrize("old,new,msg", [
    (b"<State> 1 </State> \n</TopologyEntry> \n</Topology>",
     b"<State> 2 </State> \n</TopologyEntry> \n</Topology>", "in order"),
    (b"<State> 1 </State>", b"<State> 1 <PdfClass> 2 </State>", "last state"),
    (b"<Transition> 1 0.5 </State>", b"<Transition> 1 0 </State>", "zero transition prob"),
    (b"<SelfLoopPdfClass> 1 <Transition>", b"<SelfLoopPdfClass> 2 <Transition>", "contiguous"),
    (b"<SelfLoopPdfClass> 1", b"<Foo> 1", "SelfLoopPdfClass"),
    (b"2 0 1 4 \n2 0 2 6", b"2 0 2 6 \n2 0 1 4", "sorted"),
    (f"{LP50} ]".encode(), b"]", "log-probs"),
    (f"0 {LP50}".encode(), b"0 0.5", "non-positive"),
    (b"</Tuples>", b"</Foo>", "</Tuples>"),
    (b"<ForPhones> \n1 2", b"<ForPhones> \n1_0 2", "expected integer"),
    (b"2 0 2 6", b"4 0 2 6", "not covered"),
])
def test_bad_models_rejected(old, new, msg):
    bad = CHAIN_TEXT.replace(old, new, 1)
    assert bad != CHAIN_TEXT
    with pytest.raises(FormatError, match=msg):
        _read_tm(bad, False)


def test_duplicate_phone_rejected():
    bad = HMM_TEXT.replace(b"<ForPhones> \n3 \n", b"<ForPhones> \n2 \n")
    with pytest.raises(FormatError, match="multiple topology entries"):
        _read_tm(bad, False)


def test_truncated_binary_rejected():
    binary = _write(_read_tm(CHAIN_TEXT, False)[0], True)
    for cut in (20, len(binary) // 2, len(binary) - 30):
        with pytest.raises(FormatError):
            _read_tm(binary[:cut], True)


def test_topology_alone_round_trip():
    topo = HmmTopology()
    r = KaldiReader(HMM_TEXT, False, "t", pos=len(b"<TransitionModel> \n"))
    topo.read(r)
    assert HMM_TEXT[len(b"<TransitionModel> \n"):].startswith(_write(topo, False))
    topo2 = HmmTopology()
    topo2.read(KaldiReader(_write(topo, True), True, "b"))
    assert topo2 == topo and topo2.get_phone_to_num_pdf_classes() == [-1, 2, 2, 1]


# ---------------------------------------------------------------------------
# AmNnetSimple with a stand-in network (the real Nnet is tested elsewhere)


class _StubNnet:
    """Keeps the ``<Nnet3> ... </Nnet3>`` bytes verbatim; dims come from a dict."""

    dims = {"in:input": 40, "in:ivector": 100, "out:output": 2616}

    def __init__(self) -> None:
        self.raw = b""

    def read(self, r: KaldiReader) -> None:
        end = r.data.find(b"</Nnet3> ", r.pos)
        if end < 0:
            raise r.error("no </Nnet3>")
        start = r.data.find(b"<Nnet3> ", r.pos)
        self.raw = r.data[start:end + len(b"</Nnet3> ")]
        r.pos = end + len(b"</Nnet3> ")

    def write(self, w: KaldiWriter) -> None:
        w.write_raw(self.raw)

    def input_dim(self, name: str) -> int:
        return self.dims.get("in:" + name, -1)

    def output_dim(self, name: str) -> int:
        return self.dims.get("out:" + name, -1)

    def info(self) -> str:
        return "left-context: 34\n"


def _read_stub(r: KaldiReader) -> _StubNnet:
    nnet = _StubNnet()
    nnet.read(r)
    return nnet


@pytest.fixture
def stub_nnet(monkeypatch):
    monkeypatch.setattr(am_nnet, "_read_nnet", _read_stub)
    # The stub cannot be compiled: its context is what the files store
    # (34/34 for the vosk model, checked against nnet3-am-info's output by
    # test_am_info_with_real_nnet), so Kaldi's recomputation is replaced by
    # a constant that differs from the text model's stored 3/4.
    monkeypatch.setattr(am_nnet, "_compute_context", lambda nnet: (34, 34))
    monkeypatch.setattr(am_nnet, "nnet_info", lambda nnet: nnet.info())


def test_am_nnet_vosk_binary_identity(vosk_bytes, vosk_mdl, stub_nnet, tmp_path):
    tm, am, binary = read_mdl(str(vosk_mdl))
    assert binary
    assert (am.left_context, am.right_context) == (34, 34)
    assert am.priors.shape == (0,)
    assert am.num_pdfs() == tm.num_pdfs()
    out = tmp_path / "copy.mdl"
    write_mdl(str(out), tm, am, True)
    assert out.read_bytes() == vosk_bytes
    info = am.info()
    ref = os.path.join(VOSK_REF, "nnet3-am-info.txt")
    if os.path.exists(ref):
        with open(ref) as f:
            head = f.read().split("# Nnet info follows.\n")[0]
        assert info.startswith(head + "# Nnet info follows.\n")


def test_am_nnet_text_and_priors(stub_nnet):
    text = (b"<Nnet3> \nstub \n</Nnet3> <LeftContext> 3 <RightContext> 4 "
            b"<Priors>  [ 0.125 0.25 0.5 0.0625 0.0625 ]\n")
    r = KaldiReader(text, False, "t")
    am = AmNnetSimple()
    am.read(r)
    assert r.at_eof()
    # Stored contexts are not trusted: they are recomputed from the network.
    assert (am.left_context, am.right_context) == (34, 34)
    text = text.replace(b"<LeftContext> 3 <RightContext> 4", b"<LeftContext> 34 <RightContext> 34")
    assert _write(am, False) == text
    binary = _write(am, True)
    assert binary.endswith(b"<Priors> FV \x04\x05\x00\x00\x00"
                           + np.array([0.125, 0.25, 0.5, 0.0625, 0.0625], "<f4").tobytes())
    am2 = AmNnetSimple()
    am2.read(KaldiReader(binary, True, "b"))
    assert _write(am2, False) == text
    lines = am.info().splitlines()
    assert lines[:8] == ["input-dim: 40", "ivector-dim: 100", "num-pdfs: 2616",
                         "prior-dimension: 5", "prior-sum: 1", "prior-min: 0.0625",
                         "prior-max: 0.5", "# Nnet info follows."]
    with pytest.raises(FormatError, match="Dimension mismatch"):
        am.set_priors(np.ones(3))
    # Whole-file writer: header only in binary mode.
    tm, _ = _read_tm(CHAIN_TEXT, False)
    assert mdl_bytes(tm, am, False) == CHAIN_TEXT + text
    assert mdl_bytes(tm, am, True).startswith(b"\0B<TransitionModel> ")


def test_prior_sum_matches_kaldi_float_arithmetic():
    v = np.full(10, 0.1, dtype=np.float32)
    # Pairs summed in float, accumulated in double, returned as float.
    expected = np.float32(sum(float(np.float32(np.float32(0.1) + np.float32(0.1))) for _ in range(5)))
    assert am_nnet._kaldi_vector_sum(v) == float(expected)
    assert am_nnet._kaldi_vector_sum(np.array([1.5, 2.0, 0.25], np.float32)) == 3.75


# ---------------------------------------------------------------------------
# With the real Nnet class, when it is available


_NNET_IMPORT: list = []


def _real_nnet_class():
    """pynnet3's Nnet, imported once (a failed import is not retried)."""
    if not _NNET_IMPORT:
        try:
            from pynnet3.nnet.nnet import Nnet
            _NNET_IMPORT.append(Nnet)
        except ImportError as e:
            _NNET_IMPORT.append(e)
    if isinstance(_NNET_IMPORT[0], ImportError):
        pytest.skip(f"pynnet3.nnet.nnet.Nnet not importable yet: {_NNET_IMPORT[0]}")
    return _NNET_IMPORT[0]


def test_am_info_with_real_nnet(vosk_bytes, vosk_mdl):
    _real_nnet_class()
    ref = os.path.join(VOSK_REF, "nnet3-am-info.txt")
    if not os.path.exists(ref):
        pytest.skip("reference nnet3-am-info.txt absent")
    tm, am, binary = read_mdl(str(vosk_mdl))
    with open(ref) as f:
        assert am.info() == f.read()
    # Not compared with the original file as a whole: nonlinear and batch-norm
    # components store averages that Kaldi itself turns into sums on reading
    # and back on writing, in float, so even nnet3-am-copy changes some of
    # their bits.  Everything outside those statistics vectors is reproduced.
    out = mdl_bytes(tm, am, binary)
    assert len(out) == len(vosk_bytes)
    diff = np.nonzero(np.frombuffer(out, np.uint8) != np.frombuffer(vosk_bytes, np.uint8))[0]
    lossy = np.zeros(len(vosk_bytes), dtype=bool)
    for token in (b"<ValueAvg> FV ", b"<DerivAvg> FV ", b"<StatsMean> FV ", b"<StatsVar> FV "):
        pos = vosk_bytes.find(token)
        while pos >= 0:
            start = pos + len(token) + 5
            dim = int.from_bytes(vosk_bytes[start - 4:start], "little")
            lossy[start:start + 4 * dim] = True
            pos = vosk_bytes.find(token, start)
    assert lossy[diff].all()
    assert not lossy[:vosk_bytes.index(b"<Nnet3> ")].any()


def test_am_nnet_with_real_small_nnet(tmp_path):
    Nnet = _real_nnet_class()
    from pynnet3.io.kaldi_io import open_kaldi_object

    ref_dir = str(REFERENCE / "random" / "008")
    if not os.path.exists(ref_dir):
        pytest.skip("reference random/008 absent")
    nnet = Nnet.read(open_kaldi_object(os.path.join(ref_dir, "final.raw")))
    with open(os.path.join(ref_dir, "nnet-info.txt")) as f:
        ref_head = f.read().splitlines()[:2]
    am = AmNnetSimple(nnet)
    assert [f"left-context: {am.left_context}", f"right-context: {am.right_context}"] == ref_head
    num_pdfs = am.num_pdfs()
    am.set_priors(np.full(num_pdfs, 1.0 / num_pdfs, dtype=np.float32))
    tm, _ = _read_tm(CHAIN_TEXT, False)
    for binary in (True, False):
        path = tmp_path / f"m{int(binary)}.mdl"
        write_mdl(str(path), tm, am, binary)
        tm2, am2, was_binary = read_mdl(str(path))
        assert was_binary == binary and tm2 == tm
        # Text keeps 7 significant digits (Kaldi's stream precision).
        np.testing.assert_allclose(am2.priors, am.priors, rtol=0 if binary else 1e-6)
        assert mdl_bytes(tm2, am2, binary) == path.read_bytes()
    # Wrong stored contexts are recomputed on reading, as Kaldi does.
    stale = mdl_bytes(tm, am, False).replace(
        f"<LeftContext> {am.left_context} ".encode(), b"<LeftContext> 99 ")
    r = KaldiReader(stale, False, "stale")
    TransitionModel().read(r)
    am3 = AmNnetSimple()
    am3.read(r)
    assert am3.left_context == am.left_context
    info = am3.info()
    assert info.startswith(f"input-dim: {nnet.input_dim('input')}\nivector-dim: -1\n"
                           f"num-pdfs: {num_pdfs}\nprior-dimension: {num_pdfs}\nprior-sum: 1\n")
    assert info.endswith("# Nnet info follows.\n" + nnet_info(nnet))
