"""Egs (NnetExample) I/O, compression, merging, shuffling and chunking against real Kaldi.

The reference archives in /work/shared/reference/train/<case>/ were written by
Kaldi's nnet3-get-egs / nnet3-copy-egs / nnet3-merge-egs / nnet3-shuffle-egs
(see the README there); most checks here are byte-for-byte comparisons.
"""
from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.train.egs import (EXAMPLE_HOLDER, NnetExample, NnetIo, iter_examples,
                               read_index_vector, structure_hash, write_index_vector)
from pynnet3.train.egs_merge import (ExampleMerger, ExampleMergingConfig, IntSet,
                                     StdUnorderedOrder, merge_examples)
from pynnet3.train.egs_split import ExampleGenerationConfig, UtteranceSplitter
from pynnet3.train.egs_tools import (CopyEgsOptions, GetEgsOptions, copy_egs, get_egs,
                                     merge_egs, shuffle_egs)
from pynnet3.io.general_matrix import (CompressedMatrix, CompressionMethod, GeneralMatrix,
                                       MatrixType, SparseMatrix, extract_row_range_with_padding)
from pynnet3.train.kaldi_random import MT19937, GlibcRand, std_shuffle
from pynnet3.io.posterior import POSTERIOR_HOLDER
from pynnet3.io.table import (GENERAL_MATRIX_HOLDER, MATRIX_HOLDER, RandomAccessTableReader,
                              SequentialTableReader, TableWriter)
from tests.helpers import curated, reference_dir

CASES = curated("train", ["affine_xent", "ngaffine_bn", "quadratic", "momentum_l2"])


def case_dir(case: str) -> Path:
    d = reference_dir() / "train" / case
    if not d.is_dir():
        pytest.skip(f"no reference case {d}")
    return d


def get_egs_args(case: str) -> tuple[int, int, int, int]:
    """--num-pdfs, --left-context, --right-context, --num-frames of the case's nnet3-get-egs."""
    text = (case_dir(case) / "commands.txt").read_text()
    m = re.search(r"nnet3-get-egs --num-pdfs=(\d+) --left-context=(\d+) "
                  r"--right-context=(\d+) --num-frames=(\d+)", text)
    return tuple(int(v) for v in m.groups())  # type: ignore[return-value]


def read_all(path: Path) -> list[tuple[str, NnetExample]]:
    return list(iter_examples(f"ark:{path}"))


def write_all(path: Path, egs, binary: bool = True) -> bytes:
    with TableWriter(("ark:" if binary else "ark,t:") + str(path), EXAMPLE_HOLDER) as w:
        for key, eg in egs:
            w.write(key, eg)
    return path.read_bytes()


def starts_from_keys(egs) -> dict[str, list[int]]:
    starts: dict[str, list[int]] = {}
    for key, _ in egs:
        utt, _, first = key.rpartition("-")
        starts.setdefault(utt, []).append(int(first))
    return starts


# ---------------------------------------------------------------------------
# Reading and writing


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", ["egs.ark", "egs.txt.ark", "egs_cm.ark", "egs_cm.txt.ark",
                                  "merged.ark", "merged.txt.ark", "shuffled_merged.ark"])
def test_rewrite_is_byte_identical(case: str, name: str, tmp_path: Path) -> None:
    src = case_dir(case) / name
    egs = read_all(src)
    assert len(egs) in (12, 16, 200, 261)
    assert write_all(tmp_path / name, egs, binary=".txt." not in name) == src.read_bytes()


@pytest.mark.parametrize("case", curated("train", ["affine_xent", "quadratic"]))
def test_binary_and_text_agree(case: str, tmp_path: Path) -> None:
    d = case_dir(case)
    binary, text = read_all(d / "egs.ark"), read_all(d / "egs.txt.ark")
    assert [k for k, _ in binary] == [k for k, _ in text]
    for (_, a), (_, b) in zip(binary, text):
        assert [io.name for io in a.io] == [io.name for io in b.io] == ["input", "output"]
        for x, y in zip(a.io, b.io):
            assert np.array_equal(x.indexes, y.indexes)
            assert x.features.type == y.features.type
            np.testing.assert_allclose(x.features.to_matrix(), y.features.to_matrix(),
                                       rtol=6e-7, atol=1e-30)
    # What nnet3-copy-egs ark:egs.ark ark,t:egs.txt.ark did, byte for byte.
    assert write_all(tmp_path / "t.ark", binary, binary=False) == (d / "egs.txt.ark").read_bytes()


@pytest.mark.parametrize("case", CASES)
def test_compressed_egs_decompress_like_kaldi(case: str, tmp_path: Path) -> None:
    d = case_dir(case)
    cm = read_all(d / "egs_cm.ark")
    assert all(eg.io[0].features.type == MatrixType.COMPRESSED for _, eg in cm)
    assert all(eg.io[0].features.value.format == 1 for _, eg in cm)   # 12 rows > 8: "CM"
    # Kaldi's text copy prints the decompressed values.
    assert write_all(tmp_path / "t.ark", cm, binary=False) == (d / "egs_cm.txt.ark").read_bytes()
    text = dict(read_all(d / "egs_cm.txt.ark"))
    for key, eg in cm[:40]:
        np.testing.assert_allclose(eg.io[0].features.to_matrix(),
                                   text[key].io[0].features.to_matrix(), rtol=6e-7, atol=1e-30)


@pytest.mark.parametrize("case", CASES)
def test_compression_is_kaldis(case: str) -> None:
    d = case_dir(case)
    cm = dict(read_all(d / "egs_cm.ark"))
    n = 0
    for key, eg in read_all(d / "egs.ark"):
        if key in cm:     # same chunk in both runs: compressing ours must give Kaldi's bytes
            eg.compress()
            assert eg.to_bytes() == cm[key].to_bytes(), key
            n += 1
    assert n > 150


def test_compressed_formats_roundtrip() -> None:
    rng = np.random.default_rng(0)
    mat = (rng.standard_normal((7, 5)) * 3).astype(np.float32)
    for method, fmt, tol in ((CompressionMethod.TWO_BYTE_AUTO, 2, 1 / 65535),
                             (CompressionMethod.ONE_BYTE_AUTO, 3, 1 / 255),
                             (CompressionMethod.SPEECH_FEATURE, 1, 1 / 60)):
        c = CompressedMatrix.from_matrix(mat, method)
        assert c.format == fmt
        span = mat.max() - mat.min()
        assert np.abs(c.to_matrix() - mat).max() <= span * tol * 0.51 + 1e-6
        w = KaldiWriter(True)
        c.write(w)
        data = w.getvalue()
        assert data.startswith({1: b"CM ", 2: b"CM2 ", 3: b"CM3 "}[fmt])
        back = CompressedMatrix.read_binary(KaldiReader(data, True))
        assert np.array_equal(back.to_matrix(), c.to_matrix()) and back.format == fmt
    # Automatic: > 8 rows -> one byte with column headers, otherwise two bytes.
    assert CompressedMatrix.from_matrix(np.ones((9, 2), np.float32)).format == 1
    assert CompressedMatrix.from_matrix(np.ones((8, 2), np.float32)).format == 2
    # Fixed-range methods: 16-bit PCM and bytes are stored exactly.
    pcm = np.array([[-32768, 0, 32767]], np.float32)
    assert np.array_equal(CompressedMatrix.from_matrix(
        pcm, CompressionMethod.TWO_BYTE_SIGNED_INTEGER).to_matrix(), pcm)
    u8 = np.array([[0, 17, 255]], np.float32)
    assert np.array_equal(CompressedMatrix.from_matrix(
        u8, CompressionMethod.ONE_BYTE_UNSIGNED_INTEGER).to_matrix(), u8)


def test_compressed_row_range_with_padding() -> None:
    rng = np.random.default_rng(1)
    g = GeneralMatrix(rng.standard_normal((20, 3)).astype(np.float32))
    g.compress()
    full = g.to_matrix()
    sub = extract_row_range_with_padding(g, -2, 12)     # still 'CM': stored bytes are copied
    assert sub.type == MatrixType.COMPRESSED and sub.value.format == 1
    assert np.array_equal(sub.to_matrix(), full[np.clip(np.arange(-2, 10), 0, 19)])
    small = extract_row_range_with_padding(g, 17, 5)    # < 8 rows: re-compressed two-byte
    assert small.value.format == 2
    ref = full[np.clip(np.arange(17, 22), 0, 19)]
    assert np.abs(small.to_matrix() - ref).max() <= (ref.max() - ref.min()) / 65535
    s = GeneralMatrix(SparseMatrix.from_pairs(4, [[(1, 0.5)], [(3, 2.0), (0, 1.0)]]))
    padded = extract_row_range_with_padding(s, -1, 4)
    assert padded.type == MatrixType.SPARSE
    assert np.array_equal(padded.to_matrix(), s.to_matrix()[[0, 0, 1, 1]])


def test_sparse_rows_merge_duplicates_and_drop_zeros() -> None:
    m = SparseMatrix.from_pairs(5, [[(3, 0.25), (1, 0.5), (3, 0.25)], [(2, 0.0)], []])
    assert m.indptr.tolist() == [0, 2, 2, 2]
    assert m.indices.tolist() == [1, 3] and m.values.tolist() == [0.5, 0.5]
    for binary in (True, False):
        w = KaldiWriter(binary)
        m.write(w)
        back = SparseMatrix.read(KaldiReader(w.getvalue(), binary))
        assert np.array_equal(back.to_matrix(), m.to_matrix()) and back.num_cols == 5
    w = KaldiWriter(False)
    m.write(w)
    assert w.getvalue() == b"rows=3 dim=5 [ 1 0.5 3 0.5 ] dim=5 [ ] dim=5 [ ] \n"


def test_index_vector_encoding() -> None:
    simple = np.array([[0, -2, 0], [0, -1, 0], [0, 5, 0]])
    w = KaldiWriter(True)
    write_index_vector(w, simple)
    assert w.getvalue() == b"<I1V> \x04\x03\x00\x00\x00\xfe\x01\x06"
    # n or x changes, or a jump of 125 or more, need the 127 escape + three int32s.
    hard = np.array([[0, 0, 0], [1, 0, 0], [1, 200, 0], [1, 201, 3], [1, 202, 3],
                     [0, -124, 0], [0, 0, 0], [0, -(2 ** 31), 0], [7, 124, -1]])
    for binary in (True, False):
        w = KaldiWriter(binary)
        write_index_vector(w, hard)
        data = w.getvalue()
        r = KaldiReader(data, binary)
        assert np.array_equal(read_index_vector(r), hard)
        assert r.pos == len(data) - (0 if binary else 1)   # text leaves the trailing space
    w = KaldiWriter(False)
    write_index_vector(w, simple)
    assert w.getvalue() == b"<I1V> 3 <I1> 0 -2 0 <I1> 0 -1 0 <I1> 0 5 0 "


def test_index_vector_of_a_merged_minibatch() -> None:
    """Many escapes (one per example, as in merged egs) among t-deltas: read
    back exactly, and each kind of damage reported at its byte."""
    from pynnet3.errors import FormatError

    rng = np.random.default_rng(5)
    n = np.repeat(np.arange(40), 12)
    t = np.tile(np.arange(-2, 10), 40) + np.repeat(rng.integers(-300, 300, 40), 12)
    x = np.repeat(rng.integers(0, 2, 40), 12)
    idx = np.stack([n, t, x], axis=1)
    w = KaldiWriter(True)
    write_index_vector(w, idx)
    data = w.getvalue()
    r = KaldiReader(data + b"rest", True)
    assert np.array_equal(read_index_vector(r), idx) and r.pos == len(data)
    first_delta = data.index(b"\x7f", 12) - 1           # the last t-delta of example 0
    for damaged, message in (
            (data[:-3], "end of file"),
            (data[:first_delta] + bytes([125]) + data[first_delta + 1:], "unexpected character"),
            (data[:first_delta + 2] + b"\x05" + data[first_delta + 3:], "bad integer size")):
        with pytest.raises(FormatError, match=message):
            read_index_vector(KaldiReader(damaged, True))


def test_index_vector_with_every_row_escaped() -> None:
    """t-major rows (n changes every row, as in merged chain minibatches) are
    all escapes, read in one go: same values as written (payload bytes equal
    to the escape byte included), the reader after the vector, and damage
    still reported at its byte by the row-by-row reader."""
    from pynnet3.errors import FormatError

    num_seq, frames = 6, 5
    t = np.repeat(np.arange(frames) * 3 + 127, num_seq)      # 127: the escape byte in t
    n = np.tile(np.arange(num_seq), frames)
    x = np.tile([0, 127, -1], num_seq * frames // 3)
    idx = np.stack([n, t, x], axis=1)
    w = KaldiWriter(True)
    write_index_vector(w, idx)
    data = w.getvalue()
    assert len(data) == 11 + 16 * len(idx)                   # every row escaped
    # Leading t-delta rows, then escapes only (a chain minibatch starts at (0, 0, 0)).
    lead = np.array([[0, 0, 0], [0, 1, 0], [0, -3, 0], [1, 0, 0], [0, 0, 0], [2, 0, 0]])
    w = KaldiWriter(True)
    write_index_vector(w, lead)
    lead_data = w.getvalue()
    assert len(lead_data) == 11 + 3 + 16 * 3
    r = KaldiReader(lead_data, True)
    assert np.array_equal(read_index_vector(r), lead) and r.pos == len(lead_data)
    bad_delta = lead_data[:12] + bytes([126]) + lead_data[13:]
    with pytest.raises(FormatError, match="unexpected character"):
        read_index_vector(KaldiReader(bad_delta, True))
    r = KaldiReader(data + b"\x7f\x04rest", True)
    got = read_index_vector(r)
    assert got.dtype == np.int32 and np.array_equal(got, idx) and r.pos == len(data)
    bad_size = data[:11 + 16 * 3 + 6] + b"\x05" + data[11 + 16 * 3 + 7:]
    with pytest.raises(FormatError, match="bad integer size"):
        read_index_vector(KaldiReader(bad_size, True))
    with pytest.raises(FormatError, match="end of file"):
        read_index_vector(KaldiReader(data[:-1], True))


def test_truncated_archive_is_a_format_error(tmp_path: Path) -> None:
    from pynnet3.errors import FormatError

    data = (case_dir("affine_xent") / "egs.ark").read_bytes()
    cut = tmp_path / "cut.ark"
    cut.write_bytes(data[:5000])
    with pytest.raises(FormatError):
        read_all(cut)


# ---------------------------------------------------------------------------
# Tables


def test_scp_and_pipes(tmp_path: Path) -> None:
    d = case_dir("affine_xent")
    egs = read_all(d / "egs.ark")[:30]
    ark, scp = tmp_path / "a.ark", tmp_path / "a.scp"
    with TableWriter(f"ark,scp:{ark},{scp}", EXAMPLE_HOLDER) as w:
        for key, eg in egs:
            w.write(key, eg)
    lines = scp.read_text().splitlines()
    assert lines[0] == f"{egs[0][0]} {ark}:{len(egs[0][0]) + 1}"
    via_scp = list(SequentialTableReader(f"scp:{scp}", EXAMPLE_HOLDER))
    assert [e.to_bytes() for _, e in via_scp] == [e.to_bytes() for _, e in egs]
    via_pipe = list(SequentialTableReader(f"ark:cat {ark} |", EXAMPLE_HOLDER))
    assert [k for k, _ in via_pipe] == [k for k, _ in egs]
    out = tmp_path / "b.ark"
    with TableWriter(f"ark:| cat > {out}", EXAMPLE_HOLDER) as w:
        for key, eg in egs:
            w.write(key, eg)
    assert out.read_bytes() == ark.read_bytes()
    ra = RandomAccessTableReader(f"scp:{scp}", EXAMPLE_HOLDER)
    assert ra.has_key(egs[7][0]) and not ra.has_key("nope")
    assert ra.value(egs[7][0]).to_bytes() == egs[7][1].to_bytes()


def test_streaming_in_small_blocks(tmp_path: Path, monkeypatch) -> None:
    from pynnet3.io import table

    monkeypatch.setattr(table.ObjectStream, "BLOCK", 97)   # objects straddle every block
    d = case_dir("quadratic")
    for name in ("egs.txt.ark", "egs_cm.ark"):
        egs = read_all(d / name)
        assert write_all(tmp_path / name, egs, ".txt." not in name) == (d / name).read_bytes()


def test_posteriors_and_feature_tables(tmp_path: Path) -> None:
    d = case_dir("quadratic")
    post = dict(SequentialTableReader(f"ark:{d}/post.ark", POSTERIOR_HOLDER))
    assert len(post) == 16 and all(len(frame) == 8 for frame in post["utt0001"])
    assert post["utt0001"][0][:2] == [(0, float(np.float32(0.135345))), (1, float(np.float32(0.411862)))]
    for spec in ("ark:", "ark,t:"):
        with TableWriter(spec + str(tmp_path / "p.ark"), POSTERIOR_HOLDER) as w:
            for k, v in post.items():
                w.write(k, v)
        assert dict(SequentialTableReader(f"ark:{tmp_path}/p.ark", POSTERIOR_HOLDER)) == post
    import kaldiio

    ref = dict(kaldiio.load_ark(str(d / "feats.ark")))
    feats = dict(SequentialTableReader(f"ark:{d}/feats.ark", GENERAL_MATRIX_HOLDER))
    assert set(feats) == set(ref)
    assert all(np.array_equal(feats[k].to_matrix(), ref[k]) for k in ref)
    mats = RandomAccessTableReader(f"ark:{d}/feats.ark", MATRIX_HOLDER)
    assert np.array_equal(mats.value("utt0009"), ref["utt0009"])


# ---------------------------------------------------------------------------
# nnet3-get-egs


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name,compress", [("egs.ark", False), ("egs_cm.ark", True)])
def test_get_egs_with_kaldis_chunk_starts(case: str, name: str, compress: bool,
                                          tmp_path: Path) -> None:
    d = case_dir(case)
    num_pdfs, lc, rc, nf = get_egs_args(case)
    starts = starts_from_keys(read_all(d / name))
    out = tmp_path / "egs.ark"
    status = get_egs(f"ark:{d}/feats.ark", f"ark:{d}/post.ark", f"ark:{out}",
                     ExampleGenerationConfig(left_context=lc, right_context=rc, num_frames_str=str(nf)),
                     GetEgsOptions(compress=compress, num_pdfs=num_pdfs), chunk_starts=starts)
    assert status == 0
    assert out.read_bytes() == (d / name).read_bytes()


DEGENERATE = Path(__file__).resolve().parents[1] / "data" / "compression"


@pytest.mark.parametrize("rows,lc,nf", [(12, 2, 8), (4, 0, 4)])
def test_get_egs_compresses_degenerate_matrices_as_kaldi(rows: int, lc: int, nf: int,
                                                         tmp_path: Path) -> None:
    """Features whose column percentiles coincide in float (a range tiny next
    to the values, constant columns, one outlier: tests/data/compression)
    compress to Kaldi's bytes: where a fraction is 0/0 or x/0, Kaldi's int
    cast gives INT_MIN and the clamp the range's lowest code (192 in the upper
    range; NumPy's cast of NaN gave 0).  12-row chunks use the one-byte
    per-column format, 4-row ones the two-byte format."""
    out = tmp_path / "egs.ark"
    status = get_egs(f"ark:{DEGENERATE}/feats.ark", f"ark:{DEGENERATE}/post.ark", f"ark:{out}",
                     ExampleGenerationConfig(left_context=lc, right_context=lc,
                                             num_frames_str=str(nf)),
                     GetEgsOptions(compress=True, num_pdfs=10))
    assert status == 0
    assert out.read_bytes() == (DEGENERATE / f"kaldi_egs_{rows}rows.ark").read_bytes()


@pytest.mark.parametrize("case", curated("train", ["affine_xent", "quadratic"]))
def test_get_egs_chunking_rules(case: str, tmp_path: Path) -> None:
    """Our (seeded) chunk placement obeys Kaldi's rules; sizes/counts match Kaldi's run."""
    d = case_dir(case)
    num_pdfs, lc, rc, nf = get_egs_args(case)
    import kaldiio

    feats = dict(kaldiio.load_ark(str(d / "feats.ark")))
    post = dict(SequentialTableReader(f"ark:{d}/post.ark", POSTERIOR_HOLDER))

    def run(seed: int) -> list:
        out = tmp_path / f"egs{seed}.ark"
        get_egs(f"ark:{d}/feats.ark", f"ark:{d}/post.ark", f"ark:{out}",
                ExampleGenerationConfig(left_context=lc, right_context=rc, num_frames_str=str(nf)),
                GetEgsOptions(compress=False, num_pdfs=num_pdfs, seed=seed))
        return read_all(out)

    ours = run(0)
    kaldi = read_all(d / "egs.ark")
    ours_starts, kaldi_starts = starts_from_keys(ours), starts_from_keys(kaldi)
    assert {u: len(s) for u, s in ours_starts.items()} == {u: len(s) for u, s in kaldi_starts.items()}
    for utt, starts in ours_starts.items():
        length = feats[utt].shape[0]
        assert starts == sorted(starts) and starts[0] >= 0 and starts[-1] + nf <= length
        assert all(b >= a for a, b in zip(starts, starts[1:]))
    coverage = {u: Counter(t for s in st for t in range(s, s + nf)) for u, st in ours_starts.items()}
    for key, eg in ours:
        utt, _, first = key.rpartition("-")
        first = int(first)
        inp, out = eg.io
        assert inp.name == "input" and out.name == "output"
        assert inp.indexes[:, 1].tolist() == list(range(-lc, nf + rc))
        assert out.indexes[:, 1].tolist() == list(range(nf))
        rows = np.clip(np.arange(first - lc, first + nf + rc), 0, feats[utt].shape[0] - 1)
        assert np.array_equal(inp.features.to_matrix(), feats[utt][rows])
        expect = np.zeros((nf, num_pdfs), np.float32)
        for i in range(nf):
            for pdf, p in post[utt][first + i]:
                expect[i, pdf] += np.float32(p) * np.float32(1.0 / coverage[utt][first + i])
        np.testing.assert_allclose(out.features.to_matrix(), expect, rtol=1e-6)
    # Deterministic for a seed; another seed moves the gaps.
    assert [e.to_bytes() for _, e in run(0)] == [e.to_bytes() for _, e in ours]
    assert [k for k, _ in run(5)] != [k for k, _ in ours]


def test_splitter_tables_and_quirks() -> None:
    cfg = ExampleGenerationConfig(num_frames_str="8,6", left_context=3, right_context=2,
                                  left_context_initial=1, right_context_final=0)
    cfg.compute_derived()
    sp = UtteranceSplitter(cfg, seed=3)
    assert sp.max_utterance_length() == 24
    assert sp.splits_for_length[5] == []                   # shorter than any chunk
    assert (6,) in sp.splits_for_length[6] and (8,) in sp.splits_for_length[8]
    for length in range(6, 120):
        chunks = sp.get_chunks_for_utterance(length)
        sizes = [c.num_frames for c in chunks]
        assert sum(1 for s in sizes if s != 8) <= 2 and set(sizes) <= {6, 8}
        assert chunks[0].first_frame >= 0 and chunks[-1].first_frame + sizes[-1] <= length
        assert chunks[0].left_context == 1 and chunks[-1].right_context == 0
        if len(chunks) > 2:
            assert chunks[1].left_context == 3 and chunks[1].right_context == 2
        covered = Counter(t for c in chunks for t in range(c.first_frame, c.first_frame + c.num_frames))
        for c in chunks:
            assert c.output_weights == [float(np.float32(1 / covered[t]))
                                        for t in range(c.first_frame, c.first_frame + c.num_frames)]
    # Kaldi's DistributeRandomly truncates its fractional parts: extras go to the first slots.
    assert UtteranceSplitter._distribute_randomly(-5, [8, 8, 8]) == [-2, -2, -1]
    assert UtteranceSplitter._distribute_randomly(7, [1, 3]) == [2, 5]
    # Frame subsampling: sizes rounded up to multiples of the factor.
    cfg3 = ExampleGenerationConfig(num_frames_str="7,5", frame_subsampling_factor=3)
    cfg3.compute_derived()
    assert cfg3.num_frames == [9, 6]


def test_get_egs_dense_targets_and_ivectors(tmp_path: Path) -> None:
    d = case_dir("quadratic")
    import kaldiio

    feats = dict(kaldiio.load_ark(str(d / "feats.ark")))
    post = dict(SequentialTableReader(f"ark:{d}/post.ark", POSTERIOR_HOLDER))
    dense = {u: np.array([[p for _, p in frame] for frame in post[u]], np.float32) for u in post}
    ivec = {u: np.arange(3 * ((f.shape[0] + 9) // 10), dtype=np.float32).reshape(-1, 3) + 1000 * i
            for i, (u, f) in enumerate(sorted(feats.items()))}
    kaldiio.save_ark(str(tmp_path / "targets.ark"), dense)
    kaldiio.save_ark(str(tmp_path / "ivec.ark"), ivec)
    out = tmp_path / "egs.ark"
    status = get_egs(f"ark:{d}/feats.ark", f"ark:{tmp_path}/targets.ark", f"ark:{out}",
                     ExampleGenerationConfig(left_context=2, right_context=2, num_frames_str="8"),
                     GetEgsOptions(compress=True, num_pdfs=8,
                                   online_ivector_rspecifier=f"ark:{tmp_path}/ivec.ark",
                                   online_ivector_period=10), dense=True)
    assert status == 0
    egs = read_all(out)
    assert len(egs) == 200
    for key, eg in egs:
        utt, _, first = key.rpartition("-")
        first = int(first)
        inp, iv, outp = eg.io
        assert (inp.name, iv.name, outp.name) == ("input", "ivector", "output")
        assert inp.features.value.format == 1 and outp.features.value.format == 2  # 12 and 8 rows
        assert iv.features.value.format == 2 and iv.indexes.tolist() == [[0, 0, 0]]
        target = dense[utt][first:first + 8]                        # unweighted
        assert np.abs(outp.features.to_matrix() - target).max() <= (target.max() - target.min()) / 65535
        row = iv.features.to_matrix()[0]
        assert np.any(np.all(np.abs(ivec[utt] - row) <= 1000 / 65535 + 1e-3, axis=1))


# ---------------------------------------------------------------------------
# Merging and shuffling


@pytest.mark.parametrize("case", CASES)
def test_merge_is_byte_identical(case: str, tmp_path: Path) -> None:
    d = case_dir(case)
    for src, ref in (("egs.ark", "merged.ark"), ("shuffled.ark", "shuffled_merged.ark")):
        out = tmp_path / ref
        assert merge_egs(f"ark:{d}/{src}", f"ark:{out}", ExampleMergingConfig(minibatch_size="16")) == 0
        assert out.read_bytes() == (d / ref).read_bytes()


@pytest.mark.parametrize("case", CASES)
def test_shuffle(case: str, tmp_path: Path) -> None:
    d = case_dir(case)
    egs = read_all(d / "egs.ark")
    shuffled = read_all(d / "shuffled.ark")
    # Kaldi's shuffle is a permutation of its input ...
    assert Counter((k, e.to_bytes()) for k, e in shuffled) == Counter((k, e.to_bytes()) for k, e in egs)
    assert [k for k, _ in shuffled] != [k for k, _ in egs]
    # ... and ours, with the same --srand, is the same permutation (std::mt19937 + std::shuffle).
    out = tmp_path / "s.ark"
    assert shuffle_egs(f"ark:{d}/egs.ark", f"ark:{out}", srand=1) == 0
    assert out.read_bytes() == (d / "shuffled.ark").read_bytes()
    assert shuffle_egs(f"ark:{d}/egs.ark", f"ark:{tmp_path}/s2.ark", srand=2) == 0
    assert (tmp_path / "s2.ark").read_bytes() != out.read_bytes()
    assert shuffle_egs(f"ark:{d}/egs.ark", f"ark:{tmp_path}/b.ark", buffer_size=10) == 0
    buffered = read_all(tmp_path / "b.ark")
    assert sorted(k for k, _ in buffered) == sorted(k for k, _ in egs)


def test_minibatch_size_rules() -> None:
    s = IntSet.parse("16:32,64")
    assert [s.largest_value_in_range(v) for v in (128, 64, 63, 31, 16, 15, 0)] == [64, 64, 32, 31, 16, 0, 0]
    cfg = ExampleMergingConfig(minibatch_size="128=64:128,256/256=32:64")
    cfg.compute_derived()
    assert cfg.minibatch_size_for(100, 256, False) == 256     # closest rule: eg-size 128
    assert cfg.minibatch_size_for(100, 255, False) == 0
    assert cfg.minibatch_size_for(100, 200, True) == 128
    assert cfg.minibatch_size_for(100, 63, True) == 0
    assert cfg.minibatch_size_for(300, 64, False) == 64
    assert cfg.minibatch_size_for(300, 40, True) == 40
    for bad in ("", "0", "8:4", "64/128", "1=2=3", "a", "128=64/128=32"):
        with pytest.raises(Exception):
            ExampleMergingConfig(minibatch_size=bad).compute_derived()


def test_merger_with_several_structures() -> None:
    def eg(num: int, offset: float) -> NnetExample:
        return NnetExample([NnetIo.from_matrix("input", -1, np.full((num + 2, 2), offset, np.float32)),
                            NnetIo.from_posterior("output", 4, 0, [[(1, 1.0)]] * num)])

    cfg = ExampleMergingConfig(minibatch_size="3,4")
    cfg.compute_derived()
    out: list[tuple[str, NnetExample]] = []
    merger = ExampleMerger(cfg, lambda k, e: out.append((k, e)))
    sizes = [8, 6, 8, 6, 8, 8, 8, 6, 5, 8, 8, 6, 6, 6]
    for i, n in enumerate(sizes):
        merger.accept_example(eg(n, i))
    assert merger.exit_status() == 0
    assert [k for k, _ in out][:2] == ["merged-0-4", "merged-1-4"]
    total = sum(int(k.split("-")[2]) for k, _ in out)
    # Six 6-frame egs: one minibatch of 4, and 2 left that no rule size fits; the
    # 5-frame eg is alone.  The 3-eg minibatch of 8-frame egs is flushed at the end.
    assert total == len(sizes) - 3
    assert [k for k, _ in out] == ["merged-0-4", "merged-1-4", "merged-2-3"]
    for _, m in out:
        n = m.io[0].indexes[:, 0]
        assert n.min() == 0 and n.max() == int(len(set(n.tolist()))) - 1
    # Sorted by eg size (frames + context); minibatch sizes in std::unordered_map order.
    assert merger.stats.specific_stats() == "7={,d=1},8={4->1,d=2},10={3->1,4->1,d=0}"


def test_merge_examples_renumbers_n() -> None:
    a = NnetExample([NnetIo.from_matrix("input", 0, np.ones((2, 3), np.float32)),
                     NnetIo.from_matrix("ivector", 0, np.zeros((1, 2), np.float32))])
    b = NnetExample([NnetIo.from_matrix("ivector", 0, np.ones((1, 2), np.float32)),
                     NnetIo.from_matrix("input", 0, 2 * np.ones((2, 3), np.float32))])
    m = merge_examples([a, b], compress=False)
    assert [io.name for io in m.io] == ["input", "ivector"]
    assert m.io[0].indexes.tolist() == [[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]]
    assert np.array_equal(m.io[0].features.to_matrix()[:, 0], [1, 1, 2, 2])
    mm = merge_examples([m, m], compress=True)                 # already-merged: stride 2
    assert mm.io[0].indexes[:, 0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert mm.io[1].features.type == MatrixType.COMPRESSED     # 4 rows -> CM2
    assert structure_hash(m) != structure_hash(mm)


# ---------------------------------------------------------------------------
# nnet3-copy-egs


def test_copy_egs_selection(tmp_path: Path) -> None:
    d = case_dir("affine_xent")
    egs = read_all(d / "egs.ark")[:40]
    write_all(tmp_path / "in.ark", egs)
    assert copy_egs(f"ark:{tmp_path}/in.ark", [f"ark:{tmp_path}/f.ark"],
                    CopyEgsOptions(frame="3", left_context=1, right_context=0, frame_shift=2)) == 0
    for (k1, a), (k2, b) in zip(egs, read_all(tmp_path / "f.ark")):
        assert k1 == k2
        assert b.io[0].indexes[:, 1].tolist() == [4, 5]            # t in [2, 3], shifted by 2
        assert b.io[1].indexes[:, 1].tolist() == [5]
        assert np.array_equal(b.io[0].features.to_matrix(), a.io[0].features.to_matrix()[4:6])
        assert np.array_equal(b.io[1].features.to_matrix(), a.io[1].features.to_matrix()[3:4])
    # Round robin over two outputs; --keep-proportion draws from glibc rand() seeded by --srand.
    outs = [f"ark:{tmp_path}/o{i}.ark" for i in range(2)]
    assert copy_egs(f"ark:{tmp_path}/in.ark", outs, CopyEgsOptions()) == 0
    o0, o1 = read_all(tmp_path / "o0.ark"), read_all(tmp_path / "o1.ark")
    assert [k for k, _ in o0] == [k for k, _ in egs[0::2]] and [k for k, _ in o1] == [k for k, _ in egs[1::2]]
    copy_egs(f"ark:{tmp_path}/in.ark", [f"ark:{tmp_path}/k.ark"],
             CopyEgsOptions(keep_proportion=0.5, srand=3))
    rand = GlibcRand(3)
    kept = [k for k, _ in egs if rand.with_prob(0.5)]
    assert [k for k, _ in read_all(tmp_path / "k.ark")] == kept


# ---------------------------------------------------------------------------
# Kaldi's random streams


def test_glibc_rand_and_mt19937() -> None:
    g = GlibcRand(1)
    assert [g.rand() for _ in range(3)] == [1804289383, 846930886, 1681692777]
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        libc = None
    if libc is not None:
        for seed in (0, 7, 12345):
            libc.srand(ctypes.c_uint(seed))
            g = GlibcRand(seed)
            assert [libc.rand() for _ in range(500)] == [g.rand() for _ in range(500)]
    m = MT19937(5489)
    for _ in range(9999):
        m()
    assert m() == 4123659995           # the C++ standard's check value for mt19937
    items = list(range(10))
    std_shuffle(items, MT19937(1))
    assert sorted(items) == list(range(10)) and items != list(range(10))


def test_unordered_map_order_matches_libstdcxx(tmp_path: Path) -> None:
    """StdUnorderedOrder against a real libstdc++ std::unordered_map (needs g++)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not available")
    src = tmp_path / "t.cc"
    src.write_text(r"""
#include <unordered_map>
#include <cstdio>
#include <cstdlib>
struct H { size_t operator()(const long &k) const noexcept { return (size_t)(k * 2654435761u % 1000003u) * 7 + (k % 5); } };
int main(int argc, char **argv) {
  srand(atoi(argv[1])); std::unordered_map<long, int, H> m;
  for (int i = 0; i < atoi(argv[2]); i++) {
    long k = rand() % atoi(argv[3]);
    if (rand() % 3 == 0) { m.erase(k); printf("e %ld\n", k); } else { m[k] = 1; printf("i %ld\n", k); }
  }
  printf("order"); for (auto &p : m) printf(" %ld", p.first); printf("\n");
}
""")
    exe = tmp_path / "t"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(src)], check=True, capture_output=True)
    h = lambda k: (k * 2654435761 % 1000003) * 7 + (k % 5)
    for seed, nops, rng in ((1, 30, 10), (2, 300, 60), (3, 400, 200), (4, 100, 5000)):
        lines = subprocess.run([str(exe), str(seed), str(nops), str(rng)], check=True,
                               capture_output=True, text=True).stdout.splitlines()
        order = StdUnorderedOrder()
        for line in lines[:-1]:
            op, k = line.split()
            order.insert(int(k), h(int(k))) if op == "i" else order.erase(int(k))
        assert list(order) == [int(v) for v in lines[-1].split()[1:]]


def test_index_vectors_of_many_layouts_read_back_exactly() -> None:
    """Regular layouts (t-deltas, then groups of one escaped row and m deltas:
    merged n-major egs, t-major chain minibatches) take the one-go reader,
    irregular ones the row-by-row reader; both give back what was written,
    with the reader right after the vector."""
    from pynnet3.train.egs import _read_escaped_tail

    rng = np.random.default_rng(11)
    fast_seen = slow_seen = 0
    for trial in range(300):
        num_egs, frames = int(rng.integers(1, 20)), int(rng.integers(1, 16))
        n = np.repeat(np.arange(num_egs), frames)
        t = np.tile(np.arange(frames), num_egs) + np.repeat(rng.integers(-5, 5, num_egs), frames)
        x = np.zeros_like(n)
        if trial % 3 == 1:                  # t-major (chain): n changes every row
            n, t = np.tile(np.arange(num_egs), frames), np.repeat(np.arange(frames), num_egs)
        elif trial % 3 == 2:                # irregular: x changes, t jumps, odd lengths
            x = rng.integers(0, 2, len(n)) * (rng.random(len(n)) < 0.1)
            t = t + 300 * (rng.random(len(n)) < 0.05)
            keep = rng.random(len(n)) < 0.9
            n, t, x = n[keep], t[keep], x[keep]
        idx = np.stack([n, t, x], axis=1).astype(np.int64)
        w = KaldiWriter(True)
        write_index_vector(w, idx)
        data = w.getvalue()
        r = KaldiReader(data + b"\x7f\x04\x04\x7f", True)
        got = read_index_vector(r)
        assert got.dtype == np.int32 and np.array_equal(got, idx) and r.pos == len(data)
        body = 6 + 5                                  # "<I1V> " and the size
        fast = _read_escaped_tail(data + b"\x7f\x04", body, len(idx))
        if fast is None:
            slow_seen += 1
        else:
            fast_seen += 1
            assert np.array_equal(fast[0], idx) and fast[1] == len(data)
    assert fast_seen > 100 and slow_seen > 20


def test_sparse_rows_of_equal_and_unequal_counts() -> None:
    """Sparse matrices whose rows all have the same count are read in one go,
    others row by row: both as written, the reader right after the matrix;
    damage in a later row is still reported."""
    from pynnet3.errors import FormatError

    rng = np.random.default_rng(3)
    for counts in ([1] * 50, [3] * 7, [0] * 4, [1, 2, 1, 1], [2] * 9 + [1]):
        rows = [[(int(c), float(v)) for c, v in zip(np.sort(rng.choice(30, k, replace=False)),
                                                     rng.random(k) + 0.5)] for k in counts]
        m = SparseMatrix.from_pairs(30, rows)
        w = KaldiWriter(True)
        m.write(w)
        data = w.getvalue()
        r = KaldiReader(data + b"SV \x04", True)
        back = SparseMatrix.read(r)
        assert r.pos == len(data) and back.num_cols == 30
        assert back.indptr.dtype == np.int64 and back.indices.dtype == np.int32
        assert np.array_equal(back.indptr, np.concatenate([[0], np.cumsum(counts)]))
        assert np.array_equal(back.to_matrix(), m.to_matrix())
    m = SparseMatrix.from_pairs(30, [[(4, 1.0)]] * 10)
    w = KaldiWriter(True)
    m.write(w)
    data = w.getvalue()
    at = data.index(b"SV ") + 23 * 6 + 13              # row 6's first pair: its size byte
    with pytest.raises(FormatError, match="size byte"):
        SparseMatrix.read(KaldiReader(data[:at] + b"\x05" + data[at + 1:], True))


def test_index_vector_memo_gives_fresh_arrays_and_follows_the_bytes() -> None:
    """Index vectors are remembered by their bytes (read) and values (write):
    the results are those of a fresh decode or encode, every array returned
    is the caller's own, and a vector of the same length with other bytes is
    decoded anew."""
    from pynnet3.train import egs as egs_mod

    a = np.array([[0, t, 0] for t in range(-2, 10)], dtype=np.int32)
    b = a.copy()
    b[5:, 0] = 1                       # an escape: n changes
    w = KaldiWriter(True)
    for m in (a, a, b, a):
        egs_mod.write_index_vector(w, m)
    data = w.getvalue()
    fresh = KaldiWriter(True)
    egs_mod.write_index_vector(fresh, b)
    assert fresh.getvalue() in data   # the coding of b, not a remembered one

    r = KaldiReader(data, binary=True)
    first = egs_mod.read_index_vector(r)
    first[:, 1] += 100                 # the caller shifts t in place
    second = egs_mod.read_index_vector(r)
    third = egs_mod.read_index_vector(r)
    fourth = egs_mod.read_index_vector(r)
    assert r.pos == len(data)
    np.testing.assert_array_equal(second, a)
    np.testing.assert_array_equal(third, b)
    np.testing.assert_array_equal(fourth, a)
    assert second is not fourth and not np.shares_memory(second, fourth)

    # The same length, different bytes right after a remembered vector.
    egs_mod._read_memo.clear()
    w2 = KaldiWriter(True)
    c = a.copy()
    c[:, 1] += 1
    for m in (a, c):
        egs_mod.write_index_vector(w2, m)
    r2 = KaldiReader(w2.getvalue(), binary=True)
    np.testing.assert_array_equal(egs_mod.read_index_vector(r2), a)
    np.testing.assert_array_equal(egs_mod.read_index_vector(r2), c)


@pytest.mark.parametrize("num_rows", [1, 4, 8, 9, 12, 40])
def test_compressing_a_stack_gives_each_matrix_its_own_bytes(num_rows: int) -> None:
    """CompressedMatrix.from_matrices (and GeneralMatrix.compress_all, which
    nnet3-get-egs uses for an utterance's chunks) writes, matrix by matrix,
    the bytes from_matrix writes: both formats (up to 8 rows and more),
    ties, constant matrices, a tiny and a large range; a NaN is refused."""
    from pynnet3.errors import FormatError

    rng = np.random.default_rng(num_rows)
    mats = [rng.standard_normal((num_rows, 40)).astype(np.float32),
            rng.integers(-3, 3, (num_rows, 40)).astype(np.float32),
            np.full((num_rows, 40), 2.5, np.float32),
            np.zeros((num_rows, 40), np.float32),
            (rng.standard_normal((num_rows, 40)) * 1e4).astype(np.float32),
            (1 + 1e-6 * rng.standard_normal((num_rows, 40))).astype(np.float32)]

    def coded(cm: CompressedMatrix) -> bytes:
        w = KaldiWriter(True)
        cm.write(w)
        return w.getvalue()

    expected = [coded(CompressedMatrix.from_matrix(m)) for m in mats]
    assert [coded(c) for c in CompressedMatrix.from_matrices(np.stack(mats))] == expected
    general = [GeneralMatrix(m.copy()) for m in mats] + [GeneralMatrix(mats[0][:1].copy())]
    GeneralMatrix.compress_all(general)
    assert [coded(g.value) for g in general[:-1]] == expected
    assert coded(general[-1].value) == coded(CompressedMatrix.from_matrix(mats[0][:1]))
    bad = np.stack(mats[:2])
    bad[1, 0, 3] = np.nan
    with pytest.raises(FormatError, match="NaN"):
        CompressedMatrix.from_matrices(bad)
