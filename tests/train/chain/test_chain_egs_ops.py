"""Splitting, normalizing and merging chain supervision against real Kaldi's egs
(goldens in tests/data/chain, see tests/data/README.md)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pynnet3.errors import FormatError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.io.table import SequentialTableReader
from pynnet3.train.chain import fst as F
from pynnet3.train.chain.egs import CHAIN_EXAMPLE_HOLDER, NnetChainExample
from pynnet3.train.chain.merge import merge_chain_examples
from pynnet3.train.chain.supervision import (SUPERVISION_HOLDER, NormalizationFst, Supervision,
                                             SupervisionSplitter, add_weight_to_supervision_fst,
                                             compute_fst_state_times, merge_supervision)

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "chain"


def _read(name: str, holder) -> list:
    with SequentialTableReader(f"ark:{GOLDEN / name}", holder) as rd:
        return list(rd)


@pytest.fixture(scope="module")
def egs() -> list[tuple[str, NnetChainExample]]:
    return _read("cegs_32.ark", CHAIN_EXAMPLE_HOLDER)


def test_split_and_normalize_gives_kaldis_chunk_fsts(egs):
    """nnet3-chain-get-egs's per-chunk supervision: GetFrameRange at the chunk's
    first output frame (key <utt>-<first input frame> / 3), then
    AddWeightToSupervisionFst: the same FST, weights and property word as Kaldi's."""
    sups = dict(_read("supervision.ark", SUPERVISION_HOLDER))
    norm = NormalizationFst(F.read_fst((GOLDEN / "normalization.fst").read_bytes())[0])
    for key, eg in egs:
        utt, first = key.rsplit("-", 1)
        part = SupervisionSplitter(sups[utt]).get_frame_range(int(first) // 3, 10)
        # Before normalization: epsilons from the special start state.
        assert np.any(part.fst.ilabel == 0)
        assert add_weight_to_supervision_fst(norm, part)
        ref = eg.outputs[0].supervision
        assert part == ref, key
        assert F.compute_properties(part.fst) == ref.fst.properties
        assert F.write_compact_acceptor(part.fst) == F.write_compact_acceptor(ref.fst)


def test_merge_gives_kaldis_minibatch(egs):
    merged = merge_chain_examples([eg for _, eg in egs])
    (_, ref), = _read("merged_0.ark", CHAIN_EXAMPLE_HOLDER)
    assert merged.to_bytes() == ref.to_bytes()
    sup = merged.outputs[0]
    assert sup.supervision.num_sequences == 32
    # deriv weights interleaved t-major, as the indexes
    dw = np.stack([eg.outputs[0].deriv_weights for _, eg in egs], axis=1).reshape(-1)
    assert np.array_equal(sup.deriv_weights, dw)


def test_merge_supervision_paths_are_the_sequences_appended(egs):
    """Independent of Kaldi's numbering: the merged FST's path length is the
    sum of the parts' and its best path weight the sum of their best ones."""
    sups = [eg.outputs[0].supervision for _, eg in egs[:3]]
    m = merge_supervision(sups)
    times, total = compute_fst_state_times(m.fst)
    assert total == 30 and m.num_sequences == 3

    def best(f: F.Fst) -> float:
        times, _ = compute_fst_state_times(f)
        d = np.full(f.num_states, np.inf)
        d[f.start] = 0.0
        src = f.arc_state()
        for s in np.argsort(times, kind="stable"):
            sel = src == s
            np.minimum.at(d, f.nextstate[sel], d[s] + f.weight[sel])
        return float(np.min(d + f.final))

    assert best(m.fst) == pytest.approx(sum(best(s.fst) for s in sups), rel=1e-5)


def test_merge_refuses_merged_egs(egs):
    merged = merge_chain_examples([eg for _, eg in egs[:2]])
    with pytest.raises(FormatError, match="already-merged"):
        merge_chain_examples([merged, merged])


def test_state_times_and_splitter_errors(egs):
    sup = egs[0][1].outputs[0].supervision
    times, total = compute_fst_state_times(sup.fst)
    assert total == 10 and times[0] == 0 and np.all(np.diff(times) >= 0)
    with pytest.raises(FormatError):
        SupervisionSplitter(sup).get_frame_range(5, 10)
    bad = sup.fst.copy()
    bad.nextstate = np.zeros_like(bad.nextstate)
    with pytest.raises(FormatError):
        compute_fst_state_times(bad)


def test_sort_breadth_first_and_concat():
    # 0 -a-> 2 -b-> 1(final), start 0: BFS numbering swaps states 1 and 2.
    f = F.Fst.from_arcs(3, 0, [np.inf, 0.0, np.inf], [0, 2], [1, 2], [1, 2], [0.5, 0.0], [2, 1])
    g = F.sort_breadth_first(f)
    assert g.nextstate.tolist() == [1, 2] and g.final.tolist() == [np.inf, np.inf, 0.0]
    c = F.concat_into(g, g)
    # second copy's states first; the prepended copy's final state gets an
    # epsilon (weight = its final weight) to the old start
    assert c.start == 3 and c.num_states == 6
    assert c.ilabel.tolist() == [1, 2, 1, 2, 0] and c.nextstate[-1] == 0
    assert c.final.tolist() == [np.inf, np.inf, 0.0, np.inf, np.inf, np.inf]


def test_e2e_and_alignment_pdfs_round_trip():
    """Formats Kaldi's reference does not exercise: e2e FSTs and alignment pdfs
    (self-consistency in both modes; binary layout as Supervision::Write)."""
    a = F.Fst.from_arcs(2, 0, [np.inf, 0.0], [0, 0, 1], [3, 4, 3], [3, 4, 3],
                        [0.25, 1.5, 0.0], [1, 1, 1])
    sup = Supervision(0.5, 2, 7, 10, F.Fst(), [a, a.copy()], [1, 2, 3])
    for binary in (True, False):
        w = KaldiWriter(binary)
        sup.write(w)
        data = w.getvalue()
        r = KaldiReader(data, binary)
        back = Supervision.read(r)
        assert r.pos == len(data)
        assert back.e2e and len(back.e2e_fsts) == 2 and back.alignment_pdfs == [1, 2, 3]
        assert back.e2e_fsts[0] == a and back.weight == 0.5
        w2 = KaldiWriter(binary)
        back.write(w2)
        assert w2.getvalue() == data
    assert b"<End2End> T<Fsts> " in _binary_bytes(sup)


def _binary_bytes(sup: Supervision) -> bytes:
    w = KaldiWriter(True)
    sup.write(w)
    return w.getvalue()
