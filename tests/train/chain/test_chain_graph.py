"""The chain graph tools' library code against real Kaldi's outputs (goldens in
tests/data/chain, copied from the reference's chain/ folder): the phone LM
(byte-identical), the supervision FSTs (byte-identical archive) and the
denominator / normalization FSTs (byte-identical; also checked as graphs and
by the chain objective they give)."""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pynnet3.io.table import (INT32_PAIR_VECTOR_HOLDER, INT32_VECTOR_HOLDER,
                              SequentialTableReader, TableWriter)
from pynnet3.nnet.transition_model import read_transition_model
from pynnet3.nnet.tree import read_context_dependency
from pynnet3.train.chain import fst as F
from pynnet3.train.chain.make_den_fst import (create_denominator_fst, initial_probs,
                                           normalization_fst, push_special)
from pynnet3.train.chain.graph import libstdcxx_sort_order
from pynnet3.train.chain.language_model import LanguageModelOptions, estimate_phone_lm
from pynnet3.train.chain.make_supervision import (SupervisionOptions,
                                                  alignment_to_proto_supervision,
                                                  proto_supervision_to_supervision)
from pynnet3.train.chain.supervision import SUPERVISION_HOLDER
from tests.helpers import fst_isomorphic

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "chain"


def _phone_seqs() -> list[list[int]]:
    with SequentialTableReader(f"ark:{GOLDEN / 'phones.txt'}", INT32_VECTOR_HOLDER) as rd:
        return [v for _k, v in rd]


@pytest.fixture(scope="module")
def models():
    return (read_context_dependency(str(GOLDEN / "tree")),
            read_transition_model(str(GOLDEN / "0.trans_mdl")))


def test_phone_lm_byte_identical_to_kaldi():
    fst = estimate_phone_lm(_phone_seqs(), LanguageModelOptions(num_extra_lm_states=200))
    assert F.write_vector_fst(fst) == (GOLDEN / "phone_lm.fst").read_bytes()


def test_bigram_lm_is_relative_counts():
    """--ngram-order=2 --no-prune-ngram-order=2 with no pruning possible: an
    arc a -> b weighs -log(count(a b) / count(a .)), counted independently."""
    seqs = _phone_seqs()
    fst = estimate_phone_lm(seqs, LanguageModelOptions(ngram_order=2, no_prune_ngram_order=2,
                                                       num_extra_lm_states=1000))
    pairs = Counter()
    for seq in seqs:
        full = [0] + seq + [0]
        pairs.update(zip(full[:-1], full[1:]))
    totals = Counter()
    for (a, _b), c in pairs.items():
        totals[a] += c
    # states are histories of one phone; the arc label says where it goes
    history_of_state = {fst.start: 0}
    for s in range(fst.num_states):
        for k in range(fst.arc_begin[s], fst.arc_begin[s + 1]):
            history_of_state[int(fst.nextstate[k])] = int(fst.ilabel[k])
    assert len(history_of_state) == fst.num_states == len(totals)
    n_arcs = 0
    for s, a in history_of_state.items():
        for k in range(fst.arc_begin[s], fst.arc_begin[s + 1]):
            b = int(fst.ilabel[k])
            assert fst.weight[k] == pytest.approx(-math.log(pairs[a, b] / totals[a]), abs=1e-6)
            n_arcs += 1
        assert fst.final[s] == pytest.approx(-math.log(pairs[a, 0] / totals[a]), abs=1e-6) \
            if pairs[a, 0] else fst.final[s] == np.inf
    assert n_arcs == sum(1 for (a, b) in pairs if b != 0)


@pytest.mark.parametrize("extra", [0, 50, 200, 1000])
def test_phone_lm_is_stochastic_and_sized(extra):
    fst = estimate_phone_lm(_phone_seqs(), LanguageModelOptions(num_extra_lm_states=extra))
    probs = np.exp(-fst.final.astype(np.float64)) + np.bincount(
        fst.arc_state(), weights=np.exp(-fst.weight.astype(np.float64)), minlength=fst.num_states)
    np.testing.assert_allclose(probs, 1.0, rtol=1e-5)
    # 122 history states of length 2 exist in this data; 501 states before pruning
    if extra:
        assert fst.num_states == min(501, 122 + extra)


def test_supervision_byte_identical_to_kaldi(models, tmp_path):
    ctx, tm = models
    opts = SupervisionOptions(frame_subsampling_factor=3, left_tolerance=5, right_tolerance=5)
    with SequentialTableReader(f"ark:{GOLDEN / 'phone_lengths.txt'}", INT32_PAIR_VECTOR_HOLDER) as rd, \
            TableWriter(f"ark:{tmp_path / 'sup.ark'}", SUPERVISION_HOLDER) as w:
        n = 0
        for key, ali in rd:
            proto = alignment_to_proto_supervision(opts, ali)
            assert len(proto.allowed_phones) == (sum(d for _p, d in ali) + 2) // 3
            w.write(key, proto_supervision_to_supervision(ctx, tm, proto))
            n += 1
    assert n == 30
    assert (tmp_path / "sup.ark").read_bytes() == (GOLDEN / "supervision.ark").read_bytes()


def test_supervision_tolerances_and_too_short(models):
    ctx, tm = models
    ali = [(1, 4), (7, 5), (3, 6)]
    proto = alignment_to_proto_supervision(
        SupervisionOptions(left_tolerance=1, right_tolerance=2, frame_subsampling_factor=1), ali)
    # phone 7 spans frames 4..8; with tolerances it may appear on frames 3..10
    assert [t for t, a in enumerate(proto.allowed_phones) if 7 in a] == list(range(3, 11))
    sup = proto_supervision_to_supervision(ctx, tm, proto)
    assert sup.frames_per_sequence == 15 and sup.label_dim == 64
    # every path has exactly 15 arcs: state times are consistent
    fst = sup.fst
    times = np.full(fst.num_states, -1)
    times[fst.start] = 0
    for s in range(fst.num_states):  # BFS order: sources come before destinations
        for k in range(fst.arc_begin[s], fst.arc_begin[s + 1]):
            d = fst.nextstate[k]
            assert times[d] in (-1, times[s] + 1)
            times[d] = times[s] + 1
    assert set(times[fst.final != np.inf]) == {15}
    # three phones need at least three frames: two subsampled frames cannot hold them
    short = alignment_to_proto_supervision(
        SupervisionOptions(left_tolerance=2, right_tolerance=2, frame_subsampling_factor=3),
        [(1, 1), (7, 1), (3, 1)])
    assert short.allowed_phones == [[1, 3, 7]]
    assert proto_supervision_to_supervision(ctx, tm, short) is None
    with pytest.raises(Exception):
        SupervisionOptions(left_tolerance=0, right_tolerance=0,
                           frame_subsampling_factor=3).check()


@pytest.fixture(scope="module")
def den_and_norm(models):
    ctx, tm = models
    den = create_denominator_fst(ctx, tm, F.read_fst_file(str(GOLDEN / "phone_lm.fst")))
    return den, normalization_fst(den)


def _forward_logprob(fst, loglikes: np.ndarray) -> float:
    """log of the total probability of all paths of len(loglikes) frames
    from the initial distribution, ending anywhere (the denominator's sum
    without the leaky-HMM term)."""
    n = fst.num_states
    src, dst = fst.arc_state(), fst.nextstate
    p = np.exp(-fst.weight.astype(np.float64))
    alpha = initial_probs(fst).astype(np.float64)
    tot = 0.0
    for t in range(loglikes.shape[0]):
        alpha = np.bincount(dst, weights=alpha[src] * p * np.exp(loglikes[t, fst.ilabel - 1]),
                            minlength=n)
        s = alpha.sum()
        tot += math.log(s)
        alpha /= s
    return tot


def test_den_fst_byte_identical_to_kaldi(den_and_norm):
    den, norm = den_and_norm
    assert F.write_vector_fst(den) == (GOLDEN / "den.fst").read_bytes()
    assert F.write_vector_fst(norm) == (GOLDEN / "normalization.fst").read_bytes()


def test_den_fst_same_graph_as_kaldi(den_and_norm):
    den, norm = den_and_norm
    kaldi_den = F.read_fst_file(str(GOLDEN / "den.fst"))
    kaldi_norm = F.read_fst_file(str(GOLDEN / "normalization.fst"))
    assert (den.num_states, den.num_arcs) == (319, 867)
    assert fst_isomorphic(den, kaldi_den, tol=1e-5)
    assert fst_isomorphic(norm, kaldi_norm, tol=1e-5)
    # the header's property word is what Kaldi wrote
    assert F.read_header(F.write_vector_fst(den))[0].properties == \
        F.read_header((GOLDEN / "den.fst").read_bytes())[0].properties
    assert F.read_header(F.write_vector_fst(norm))[0].properties == \
        F.read_header((GOLDEN / "normalization.fst").read_bytes())[0].properties
    rng = np.random.default_rng(0)
    ll = rng.normal(size=(60, 64)) * 2
    assert _forward_logprob(den, ll) == pytest.approx(_forward_logprob(kaldi_den, ll), abs=1e-5)
    np.testing.assert_allclose(np.sort(initial_probs(den)), np.sort(initial_probs(kaldi_den)),
                               rtol=1e-5)


def test_libstdcxx_sort_order_sorts():
    rng = np.random.default_rng(5)
    for n in (0, 1, 2, 16, 17, 33, 400, 3000):
        keys = rng.integers(0, 7, size=n).tolist()
        order = libstdcxx_sort_order(keys)
        assert sorted(order) == list(range(n))
        assert [keys[i] for i in order] == sorted(keys)
    # equal keys: not a stable sort beyond 16 elements (as std::sort)
    keys = [1] * 40 + [0] * 40
    assert libstdcxx_sort_order(keys) != sorted(range(80), key=lambda i: keys[i])


def test_push_special_equalizes_state_sums():
    rng = np.random.default_rng(1)
    n = 6
    src = np.repeat(np.arange(n), 3)
    dst = rng.integers(0, n, size=src.size)
    w = rng.uniform(0.1, 3.0, size=src.size)
    final = np.full(n, np.inf, np.float32)
    final[2] = 0.5
    fst = F.Fst.from_arcs(n, 0, final, src, src + 1, src + 1, w, dst)
    pushed = push_special(fst, 1e-6)
    sums = np.bincount(pushed.arc_state(), weights=np.exp(-pushed.weight.astype(np.float64)),
                       minlength=n) + np.exp(-pushed.final.astype(np.float64))
    np.testing.assert_allclose(sums, sums[0], rtol=1e-5)


def test_den_fst_gives_kaldis_chain_objective(den_and_norm):
    """The chain objective and its derivative on the first merged minibatch of
    Kaldi's egs (32 sequences), random network outputs: our den.fst against
    Kaldi's (the numerator part is the same supervision)."""
    from pynnet3.train.chain.den_graph import DenominatorGraph
    from pynnet3.train.chain.egs import CHAIN_EXAMPLE_HOLDER
    from pynnet3.train.chain.objective import ChainTrainingOptions, compute_chain_objf_and_deriv

    den, _norm = den_and_norm
    with SequentialTableReader(f"ark:{GOLDEN / 'merged_0.ark'}", CHAIN_EXAMPLE_HOLDER) as rd:
        _key, eg = next(iter(rd))
    sup = eg.outputs[0].supervision
    rows = sup.num_sequences * sup.frames_per_sequence
    out = np.random.default_rng(3).normal(size=(rows, 64)).astype(np.float32)
    opts = ChainTrainingOptions(leaky_hmm_coefficient=0.1, xent_regularize=0.1,
                                l2_regularize=5e-5, out_of_range_regularize=0.01)
    results = [compute_chain_objf_and_deriv(opts, DenominatorGraph.from_fst(f, 64), sup, out,
                                            want_deriv=True, want_xent=False)
               for f in (den, F.read_fst_file(str(GOLDEN / "den.fst")))]
    ours, kaldi = results
    assert ours.ok and kaldi.ok
    assert abs(ours.objf - kaldi.objf) <= 1e-5 * abs(kaldi.objf)
    np.testing.assert_allclose(ours.deriv, kaldi.deriv, atol=1e-5)


def test_normalization_fst_gives_kaldis_egs_weights(den_and_norm):
    """A chunk of Kaldi's supervision weighted by our normalization.fst and by
    Kaldi's (as nnet3-chain-get-egs does): the same FST, weights within 1e-5."""
    from pynnet3.train.chain.supervision import SupervisionSplitter, add_weight_to_supervision_fst

    _den, norm = den_and_norm
    with SequentialTableReader(f"ark:{GOLDEN / 'supervision.ark'}", SUPERVISION_HOLDER) as rd:
        sups = [s for _k, s in rd][:3]
    kaldi_norm = F.read_fst_file(str(GOLDEN / "normalization.fst"))
    for sup in sups:
        for begin in (0, 7):
            chunks = []
            for nf in (norm, kaldi_norm):
                chunk = SupervisionSplitter(sup).get_frame_range(begin, 10)
                assert add_weight_to_supervision_fst(nf, chunk)
                chunks.append(chunk.fst)
            assert fst_isomorphic(chunks[0], chunks[1], tol=1e-5)


def _accepts(fst, labels: list[int], from_start_only: bool = True) -> bool:
    """Does the (epsilon-free) acceptor have a path with these labels from its
    start state (to a final state when ``from_start_only``)?"""
    cur = {fst.start}
    for lab in labels:
        nxt = set()
        for s in cur:
            for k in range(fst.arc_begin[s], fst.arc_begin[s + 1]):
                if fst.ilabel[k] == lab:
                    nxt.add(int(fst.nextstate[k]))
        cur = nxt
        if not cur:
            return False
    return not from_start_only or any(fst.final[s] != np.inf for s in cur)


@pytest.mark.parametrize("width,central", [(2, 1), (3, 1), (1, 0)])
def test_graphs_accept_the_alignment(width, central, tmp_path):
    """Monophone, left-biphone and triphone trees (made here): the supervision
    of an alignment (no tolerance, no subsampling) accepts the alignment's pdf
    sequence, and the denominator graph built from the same phone sequences
    has a path for it."""
    from pynnet3.nnet.transition_model import TransitionModel, read_topology
    from pynnet3.nnet.tree import (K_PDF_CLASS, ConstantEventMap, ContextDependency,
                                   SplitEventMap, TableEventMap)

    num_phones = 6
    rng = np.random.default_rng(width)
    counter = iter(range(1000))

    def leaf(key: int) -> object:
        if key < 0 or key >= width or key == central:
            return ConstantEventMap(next(counter))
        return SplitEventMap(key, [2, 4, 5], ConstantEventMap(next(counter)),
                             ConstantEventMap(next(counter)))

    table = [None] + [TableEventMap(K_PDF_CLASS, [leaf(central - 1), leaf(central + 1)])
                      for _p in range(num_phones)]
    tree = ContextDependency(width, central, TableEventMap(central, table))
    (tmp_path / "topo").write_text("<Topology>\n<TopologyEntry>\n<ForPhones>\n1 2 3 4 5 6\n</ForPhones>\n"
                 "<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 "
                 "<Transition> 1 0.5 </State>\n<State> 1 </State>\n</TopologyEntry>\n</Topology>\n")
    topo = read_topology(str(tmp_path / "topo"))
    tm = TransitionModel.from_tree(tree, topo)

    def pdf_seq(phones: list[int], durs: list[int]) -> list[int]:
        out = []
        padded = [0] * (width - 1) + phones + [0] * (width - 1)
        for i, (ph, d) in enumerate(zip(phones, durs)):
            window = padded[i + width - 1 - central: i + 2 * width - 1 - central]
            assert window[central] == ph
            out += [tree.compute(window, 0)] + [tree.compute(window, 1)] * (d - 1)
        return out

    seqs = [[1] + [int(x) for x in rng.integers(2, num_phones + 1, size=8)] + [1]
            for _ in range(20)]
    lm = estimate_phone_lm(seqs, LanguageModelOptions(num_extra_lm_states=50))
    den = create_denominator_fst(tree, tm, lm)
    assert den.num_states > 0
    opts = SupervisionOptions(left_tolerance=0, right_tolerance=0)
    for phones in seqs[:5]:
        durs = [int(x) for x in rng.integers(1, 4, size=len(phones))]
        labels = [p + 1 for p in pdf_seq(phones, durs)]
        sup = proto_supervision_to_supervision(
            tree, tm, alignment_to_proto_supervision(opts, list(zip(phones, durs))))
        assert _accepts(sup.fst, labels)
        assert not _accepts(sup.fst, labels[1:] + labels[:1]) or labels[0] == labels[-1]
        assert _accepts(den, labels, from_start_only=False)
