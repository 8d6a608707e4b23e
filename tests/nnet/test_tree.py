"""Decision trees (ContextDependency / EventMap) and the TransitionModel built
from a tree and a topology, against files written by Kaldi's own library
(tests/data/am/kaldi, see tests/data/README.md) and the reference folder."""
from __future__ import annotations

from pathlib import Path

import pytest

from pynnet3.errors import FormatError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter, read_rxfilename
from pynnet3.nnet.transition_model import HmmTopology, TransitionModel, read_topology
from pynnet3.nnet.tree import (ConstantEventMap, ContextDependency, SplitEventMap, TableEventMap,
                               monophone_context_dependency, read_context_dependency,
                               read_event_map)
from tests.helpers import reference_dir

DATA = Path(__file__).resolve().parents[1] / "data" / "am"
# name: (context width, central position, num-pdfs, transition-states, is HMM)
KALDI_TREES = {
    "3": (2, 1, 88, 65, False),     # biphone, "chain" topology (separate self-loop pdf-classes)
    "4": (1, 0, 8, 13, True),       # monophone
    "6": (3, 1, 176, 179, True),    # triphone, 1-3 pdf-classes per phone
    "7": (3, 1, 320, 229, False),   # triphone, chain topology
}


def _bytes(obj, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    obj.write(w)
    return w.getvalue()


@pytest.mark.parametrize("name", sorted(KALDI_TREES))
def test_transition_model_from_kaldi_tree_is_kaldis(name: str) -> None:
    """TransitionModel(tree, topo) as Kaldi's constructor: tuples, transition-ids
    and logf of the topology's probabilities, byte for byte."""
    width, central, num_pdfs, num_tstates, is_hmm = KALDI_TREES[name]
    ctx_dep = read_context_dependency(str(DATA / "kaldi" / f"tree{name}"))
    assert (ctx_dep.context_width, ctx_dep.central_position) == (width, central)
    assert ctx_dep.num_pdfs() == num_pdfs
    topo = read_topology(str(DATA / "kaldi" / f"topo{name}"))
    tm = TransitionModel.from_tree(ctx_dep, topo)
    assert tm.num_transition_states() == num_tstates and tm.is_hmm() == is_hmm
    assert tm.num_pdfs() == num_pdfs
    assert b"\0B" + _bytes(tm, True) == (DATA / "kaldi" / f"trans{name}").read_bytes()


@pytest.mark.parametrize("name", sorted(KALDI_TREES))
def test_tree_round_trips(name: str) -> None:
    data = (DATA / "kaldi" / f"tree{name}").read_bytes()
    ctx_dep = read_context_dependency(str(DATA / "kaldi" / f"tree{name}"))
    assert b"\0B" + _bytes(ctx_dep, True) == data
    text = _bytes(ctx_dep, False)
    assert text.startswith(b"ContextDependency ")
    again = ContextDependency()
    again.read(KaldiReader(text, False, "text"))
    assert again == ctx_dep
    assert _bytes(again, True) == data[2:]


def test_recipe_monophone_tree_gives_kaldis_transition_model() -> None:
    """The recipe's hand-written text tree (a table on the phone) and Kaldi's
    monophone tree (also tables on the pdf-class) both give 0.mdl's model."""
    topo = read_topology(str(DATA / "recipe" / "topo"))
    kaldi_mdl = (DATA / "recipe" / "1.mdl").read_bytes()
    ctx_dep = read_context_dependency(str(DATA / "recipe" / "tree"))
    assert ctx_dep.context_width == 1 and ctx_dep.num_pdfs() == 32
    tm = TransitionModel.from_tree(ctx_dep, topo)
    expected = _bytes(tm, True)
    assert kaldi_mdl[2:2 + len(expected)] == expected
    mono = monophone_context_dependency(topo.phones, topo.get_phone_to_num_pdf_classes())
    assert _bytes(TransitionModel.from_tree(mono, topo), True) == expected
    # MonophoneContextDependency's own shape: a table on the phone, tables on the pdf-class.
    assert isinstance(mono.to_pdf, TableEventMap) and mono.to_pdf.table[0] is None
    assert isinstance(mono.to_pdf.table[5], TableEventMap) and mono.to_pdf.table[5].key == -1


def test_chain_reference_transition_model() -> None:
    """The reference chain setup's biphone tree + 1-state chain topology -> 0.trans_mdl."""
    d = reference_dir() / "chain"
    if not (d / "tree").is_file():
        pytest.skip(f"no chain reference at {d}")
    tm = TransitionModel.from_tree(read_context_dependency(str(d / "tree")),
                                   read_topology(str(d / "topo")))
    assert b"\0B" + _bytes(tm, True) == (d / "0.trans_mdl").read_bytes()


def test_multi_map_and_map() -> None:
    # key 0 in {1, 2} -> table on pdf-class; otherwise 7.
    tree = SplitEventMap(0, [1, 2], TableEventMap(-1, [ConstantEventMap(3), None,
                                                        ConstantEventMap(5)]),
                         ConstantEventMap(7))
    out: list[int] = []
    tree.multi_map({}, out)
    assert out == [3, 5, 7]
    out = []
    tree.multi_map({0: 2}, out)
    assert out == [3, 5]
    out = []
    tree.multi_map({0: 2, -1: 1}, out)          # a NULL entry: no answer
    assert out == []
    assert tree.map({0: 1, -1: 2}) == 5 and tree.map({0: 9, -1: 0}) == 7
    assert tree.map({-1: 0}) is None            # the key split on is missing
    assert tree.max_result() == 7
    ctx = ContextDependency(1, 0, tree)
    assert ctx.num_pdfs() == 8 and ctx.compute([2], 0) == 3


def test_text_tree_format() -> None:
    text = (b"ContextDependency 2 1 ToPdf SE 1 [ 1 3 ]\n{ CE 0 TE -1 2 ( CE 1 NULL ) \n} \n"
            b"EndContextDependency ")
    ctx = ContextDependency()
    ctx.read(KaldiReader(text, False, "t"))
    assert isinstance(ctx.to_pdf, SplitEventMap) and ctx.to_pdf.yes_set == [1, 3]
    assert _bytes(ctx, False) == text
    # Binary: table sizes are uint32, marked by the size byte -4.
    binary = _bytes(ctx, True)
    assert b"TE \x04\xff\xff\xff\xff\xfc\x02\x00\x00\x00( " in binary
    again = ContextDependency()
    again.read(KaldiReader(binary, True, "b"))
    assert again == ctx


def test_bad_trees_are_errors() -> None:
    with pytest.raises(FormatError, match="was not expecting"):
        read_event_map(KaldiReader(b"XE 3 ", False, "t"))
    with pytest.raises(FormatError, match="NULL pointers"):
        read_event_map(KaldiReader(b"SE 0 [ 1 ]\n{ NULL CE 1 } ", False, "t"))
    ctx = ContextDependency()
    with pytest.raises(FormatError, match="unexpected token"):
        ctx.read(KaldiReader(b"ContextDependency 1 0 ToSomething CE 0 EndContextDependency ",
                             False, "t"))


def test_tree_topology_mismatch_is_an_error() -> None:
    """A tree that gives a pdf to a pdf-class the topology's phone lacks."""
    topo = HmmTopology()
    topo.read(KaldiReader(b"<Topology> <TopologyEntry> <ForPhones> 1 2 </ForPhones> "
                          b"<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 "
                          b"</State> <State> 1 </State> </TopologyEntry> </Topology>",
                          False, "topo"))
    # A tree with answers for phone 1 only: phone 2 has no pdf (Kaldi warns), fine;
    ok = ContextDependency(1, 0, TableEventMap(0, [None, ConstantEventMap(0)]))
    tm = TransitionModel.from_tree(ok, topo)
    assert tm.num_transition_states() == 1
    # pdf-class 1 of phone 1 does not exist in the topology.
    bad = ContextDependency(1, 0, TableEventMap(-1, [ConstantEventMap(0), ConstantEventMap(1)]))
    with pytest.raises(FormatError, match="lacks"):
        TransitionModel.from_tree(bad, _two_class_topo_for(topo))


def _two_class_topo_for(topo: HmmTopology) -> HmmTopology:
    """``topo`` with num-pdf-classes 2 claimed by the tree but one emitting state."""
    class _Claims(HmmTopology):
        def num_pdf_classes(self, phone: int) -> int:
            return 2

    out = _Claims()
    out.phones, out.phone2idx, out.entries = topo.phones, topo.phone2idx, topo.entries
    return out


def test_read_binary_topology_and_transition_model_helpers(tmp_path: Path) -> None:
    topo = read_topology(str(DATA / "recipe" / "topo"))
    path = tmp_path / "topo.bin"
    path.write_bytes(b"\0B" + _bytes(topo, True))
    assert read_topology(str(path)) == topo
    assert read_rxfilename(str(DATA / "recipe" / "topo")).startswith(b"<Topology>")


def test_write_tree_and_topology_files(tmp_path: Path) -> None:
    """What a recipe needs to make its own tree and topology: Kaldi's formats."""
    from pynnet3.nnet.transition_model import write_topology
    from pynnet3.nnet.tree import write_context_dependency

    topo = read_topology(str(DATA / "recipe" / "topo"))
    mono = monophone_context_dependency(topo.phones, topo.get_phone_to_num_pdf_classes())
    write_context_dependency(str(tmp_path / "tree"), mono)
    write_context_dependency(str(tmp_path / "tree.txt"), mono, binary=False)
    write_topology(str(tmp_path / "topo"), topo)
    assert (tmp_path / "tree").read_bytes().startswith(b"\0BContextDependency \x04\x01")
    text = (tmp_path / "tree.txt").read_text()
    assert text.startswith("ContextDependency 1 0 ToPdf TE 0 33 ( NULL TE -1 1 ( CE 0 ) \n")
    assert text.endswith("EndContextDependency ")
    assert read_context_dependency(str(tmp_path / "tree")) == mono
    assert read_context_dependency(str(tmp_path / "tree.txt")) == mono
    assert read_topology(str(tmp_path / "topo")) == topo
    assert (tmp_path / "topo").read_text().startswith("<Topology> \n<TopologyEntry> \n")
