"""Chain supervision / egs / FST formats against real Kaldi's files.

Goldens in tests/data/chain (see tests/data/README.md) are byte prefixes of
the reference's chain/ files; the full files are used too when the reference
folder is present.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pynnet3.io.table import SequentialTableReader, TableWriter
from pynnet3.train.chain import fst as F
from pynnet3.train.chain.egs import CHAIN_EXAMPLE_HOLDER, NnetChainExample
from pynnet3.train.chain.supervision import SUPERVISION_HOLDER, Supervision
from tests.helpers import FULL_REFERENCE

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "chain"
FULL = FULL_REFERENCE / "chain"

ARCHIVES = [("supervision.ark", SUPERVISION_HOLDER), ("cegs_32.ark", CHAIN_EXAMPLE_HOLDER),
            ("merged_0.ark", CHAIN_EXAMPLE_HOLDER)]
FULL_ARCHIVES = [("supervision.ark", SUPERVISION_HOLDER), ("cegs.ark", CHAIN_EXAMPLE_HOLDER),
                 ("merged.ark", CHAIN_EXAMPLE_HOLDER)]


def _read(path: Path, holder) -> list:
    with SequentialTableReader(f"ark:{path}", holder) as rd:
        return list(rd)


def _write(path: Path, items, holder, text: bool = False) -> bytes:
    with TableWriter(f"ark{',t' if text else ''}:{path}", holder) as w:
        for k, v in items:
            w.write(k, v)
    return path.read_bytes()


def _fsts(items) -> list[F.Fst]:
    out = []
    for _, obj in items:
        if isinstance(obj, Supervision):
            out.append(obj.fst)
        else:
            out.extend(o.supervision.fst for o in obj.outputs)
    return out


@pytest.mark.parametrize("name,holder", ARCHIVES)
def test_binary_round_trip_is_byte_identical(tmp_path, name, holder):
    items = _read(GOLDEN / name, holder)
    assert items
    assert _write(tmp_path / "out.ark", items, holder) == (GOLDEN / name).read_bytes()


@pytest.mark.parametrize("name,holder", FULL_ARCHIVES)
def test_full_reference_round_trip(tmp_path, name, holder):
    if not (FULL / name).exists():
        pytest.skip(f"{FULL / name} not present")
    items = _read(FULL / name, holder)
    assert _write(tmp_path / "out.ark", items, holder) == (FULL / name).read_bytes()


@pytest.mark.parametrize("name,holder", ARCHIVES)
def test_text_round_trip_and_back_to_binary(tmp_path, name, holder):
    """Text is stable under read/write and converts back to Kaldi's binary (the
    compact FST's property word is then recomputed, not copied).  Text keeps 7
    digits, as Kaldi's, so weighted FSTs and features come back only to float
    precision: exact bytes for the unweighted supervision.ark, else equal
    structure and close values."""
    items = _read(GOLDEN / name, holder)
    text1 = _write(tmp_path / "t1.ark", items, holder, text=True)
    items2 = _read(tmp_path / "t1.ark", holder)
    assert _write(tmp_path / "t2.ark", items2, holder, text=True) == text1
    assert all(f.properties is None for f in _fsts(items2))
    back = _write(tmp_path / "b.ark", items2, holder)
    if name == "supervision.ark":
        assert back == (GOLDEN / name).read_bytes()
    for f, g in zip(_fsts(items), _fsts(_read(tmp_path / "b.ark", holder)), strict=True):
        assert g.properties == f.properties
        assert np.array_equal(f.ilabel, g.ilabel) and np.array_equal(f.nextstate, g.nextstate)
        assert np.array_equal(f.arc_begin, g.arc_begin)
        np.testing.assert_allclose(g.weight, f.weight, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(g.final, f.final, rtol=1e-6, atol=1e-6)


def test_text_form_is_kaldis():
    """Kaldi's text supervision: FstPrinter lines between a newline and an empty line."""
    items = _read(GOLDEN / "supervision.ark", SUPERVISION_HOLDER)
    from pynnet3.io.kaldi_io import KaldiWriter

    w = KaldiWriter(False)
    items[0][1].write(w)
    text = w.getvalue().decode()
    assert text.startswith("<Supervision> <Weight> 1 <NumSequences> 1 <FramesPerSeq> 30 "
                           "<LabelDim> 64 <End2End> F \n0\t1\t51\t51\n1\t2\t27\t27\n")
    assert text.endswith("\n72\n\n</Supervision> ")


def test_properties_computed_equal_kaldis_stored():
    """Every supervision FST Kaldi wrote carries the property word OpenFst
    computed; ours must be the same (it is what we write for new FSTs)."""
    fsts = []
    for name, holder in ARCHIVES:
        fsts += _fsts(_read(GOLDEN / name, holder))
    assert len(fsts) == 30 + 32 + 1
    for f in fsts:
        assert F.compute_properties(f) == f.properties
    weighted = [f for f in fsts if f.properties & F.kWeighted]
    assert weighted  # the egs' FSTs carry normalization weights


@pytest.mark.parametrize("name", ["den.fst", "normalization.fst"])
def test_vector_fst_round_trip_and_kaldifst(name):
    data = (GOLDEN / name).read_bytes()
    f, end = F.read_fst(data)
    assert end == len(data)
    assert F.write_vector_fst(f) == data
    kf = F.to_kaldifst(f)
    assert kf.num_states == f.num_states
    g = F.from_kaldifst(kf)
    assert g == f
    # Our property computation agrees with OpenFst's (kaldifst) on a cyclic FST.
    assert F.compute_properties(f, 0) == kf.properties(F.kCopyProperties, True)


def test_compact_fst_kaldifst_properties_agree():
    items = _read(GOLDEN / "cegs_32.ark", CHAIN_EXAMPLE_HOLDER)
    for f in _fsts(items)[:5]:
        kf = F.to_kaldifst(f)
        assert kf.properties(F.kCopyProperties, True) == F.compute_properties(f, 0)
        assert F.from_kaldifst(kf) == f


def test_chain_example_fields():
    items = _read(GOLDEN / "merged_0.ark", CHAIN_EXAMPLE_HOLDER)
    key, eg = items[0]
    assert key == "merged-0-32"
    assert isinstance(eg, NnetChainExample)
    (sup,) = eg.outputs
    assert sup.name == "output"
    assert sup.supervision.num_sequences == 32
    assert sup.supervision.frames_per_sequence == 10
    assert sup.supervision.label_dim == 64
    # t-major indexes: row = t_index * 32 + n, t = 0, 3, ..., 27
    assert np.array_equal(sup.indexes[:33, 0], np.r_[np.arange(32), 0])
    assert np.array_equal(np.unique(sup.indexes[:, 1]), np.arange(0, 30, 3))
    assert eg.inputs[0].features.num_rows == 32 * 46


def test_errors_name_the_problem(tmp_path):
    from pynnet3.errors import FormatError

    data = (GOLDEN / "supervision.ark").read_bytes()
    (tmp_path / "bad.ark").write_bytes(data[:300])
    with pytest.raises(FormatError):
        _read(tmp_path / "bad.ark", SUPERVISION_HOLDER)
    with pytest.raises(FormatError):
        F.read_fst(b"\x00" * 40)


def test_from_kaldifst_keeping_openfst_properties():
    """An FST read (or made) by kaldifst, converted with keep_properties, is
    written with the property word OpenFst writes: Kaldi's den.fst exactly."""
    import kaldifst

    kf = kaldifst.StdVectorFst.read(str(GOLDEN / "den.fst"))
    f = F.from_kaldifst(kf, keep_properties=True)
    assert F.write_vector_fst(f) == (GOLDEN / "den.fst").read_bytes()
    assert F.from_kaldifst(kf).properties is None
