"""LDA statistics and the feature transform (pynnet3.train.lda), against their
definitions and against real Kaldi's figures kept in tests/data/lda."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pynnet3.errors import PynnetError
from pynnet3.io.general_matrix import GeneralMatrix, SparseMatrix
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter, kaldi_object_bytes, open_kaldi_object
from pynnet3.io.packed_matrix import read_packed_matrix, write_packed_matrix
from pynnet3.compile.model_io import read_nnet
from pynnet3.train.egs import NnetExample, NnetIo, make_indexes
from pynnet3.train.kaldi_random import RAND_MAX, GlibcRand
from pynnet3.train.lda import (FeatureTransformEstimateOptions, LdaEstimate,
                               NnetLdaStatsAccumulator, estimate_feature_transform, rand_prune,
                               read_lda_stats)

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "lda"


def _random_stats(rng: np.random.Generator, num_frames: int = 400, dim: int = 6,
                  num_classes: int = 5) -> tuple[LdaEstimate, np.ndarray, np.ndarray, np.ndarray]:
    x = (rng.standard_normal((num_frames, dim)) + 0.3).astype(np.float32)
    cls = rng.integers(0, num_classes, num_frames)
    x += (cls[:, None] * 0.4 * rng.standard_normal(dim)).astype(np.float32)  # class means
    w = rng.choice(np.array([1.0, 0.5, 2.0], dtype=np.float32), num_frames)
    stats = LdaEstimate()
    stats.init(num_classes, dim)
    stats.accumulate(x, cls, w)
    return stats, x, cls, w


def test_accumulate_matches_per_frame_definition() -> None:
    rng = np.random.default_rng(0)
    stats, x, cls, w = _random_stats(rng)
    zero = np.zeros(5)
    first = np.zeros((5, 6))
    second = np.zeros((6, 6))
    for xi, c, wi in zip(x.astype(np.float64), cls, w.astype(np.float64)):
        zero[c] += wi
        first[c] += wi * xi
        second += wi * np.outer(xi, xi)
    assert np.array_equal(stats.zero_acc, zero)
    assert np.array_equal(stats.first_acc, first)       # same order of additions
    np.testing.assert_allclose(stats.total_second_acc, second, rtol=1e-12)
    with pytest.raises(PynnetError, match="out of range"):
        stats.accumulate(x[:1], np.array([5]), w[:1])


def test_get_stats_are_covariances() -> None:
    rng = np.random.default_rng(1)
    stats, x, cls, w = _random_stats(rng)
    total, between, mean, count = stats.get_stats()
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    assert count == pytest.approx(wd.sum())
    np.testing.assert_allclose(mean, (wd[:, None] * xd).sum(0) / wd.sum(), rtol=1e-12)
    np.testing.assert_allclose(total, np.cov(xd.T, aweights=wd, bias=True), rtol=1e-10,
                               atol=1e-12)
    within = np.zeros((6, 6))
    for c in range(5):
        sel = cls == c
        within += np.cov(xd[sel].T, aweights=wd[sel], bias=True) * wd[sel].sum()
    np.testing.assert_allclose(total - between, within / wd.sum(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("binary", [True, False])
def test_stats_file_round_trip_and_sum(binary: bool) -> None:
    rng = np.random.default_rng(2)
    a, xa, ca, wa = _random_stats(rng)
    b, xb, cb, wb = _random_stats(rng)
    w = KaldiWriter(binary)
    a.write(w)
    data = kaldi_object_bytes(w)
    assert data.startswith(b"\0B<LDAACCS> <VECSIZE> " if binary else b"<LDAACCS> <VECSIZE> 6 ")
    # The file stores the within-class scatter.
    r = KaldiReader(data, binary, pos=data.index(b"<SECOND_ACCS> ") + len(b"<SECOND_ACCS> "))
    stored = read_packed_matrix(r)
    total, between, _, count = a.get_stats()
    np.testing.assert_allclose(np.tril(stored), np.tril((total - between) * count), rtol=2e-6,
                               atol=1e-4)
    # Reading back, and reading with add=True, sum as accumulating everything.
    back = LdaEstimate()
    back.read(KaldiReader(data, binary, pos=2 if binary else 0), add=False)
    scale = np.abs(a.total_second_acc).max()
    np.testing.assert_allclose(back.total_second_acc, a.total_second_acc, atol=1e-6 * scale)
    both = LdaEstimate()
    both.init(5, 6)
    both.accumulate(np.concatenate([xa, xb]), np.concatenate([ca, cb]), np.concatenate([wa, wb]))
    wb_ = KaldiWriter(binary)
    b.write(wb_)
    back.read(KaldiReader(kaldi_object_bytes(wb_), binary, pos=2 if binary else 0), add=True)
    np.testing.assert_allclose(back.zero_acc, both.zero_acc)
    np.testing.assert_allclose(back.first_acc, both.first_acc, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(back.total_second_acc, both.total_second_acc, atol=2e-6 * scale)
    other = LdaEstimate()
    other.init(4, 6)
    w2 = KaldiWriter(binary)
    other.write(w2)
    with pytest.raises(PynnetError, match="mismatch"):
        back.read(KaldiReader(kaldi_object_bytes(w2), binary, pos=2 if binary else 0), add=True)


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("size", [0, 1, 4])
def test_packed_matrix_round_trip(binary: bool, size: int) -> None:
    rng = np.random.default_rng(size)
    low = np.tril(rng.standard_normal((size, size))).astype(np.float32)
    w = KaldiWriter(binary)
    write_packed_matrix(w, low)
    data = w.getvalue()
    if not binary:
        assert data == (b"[ ]\n" if size == 0 else
                        b"[\n" + b"".join(
                            (" ".join("%.7g" % v for v in low[i, :i + 1]) + " ").encode()
                            + (b"]\n" if i == size - 1 else b"\n") for i in range(size)))
    back = read_packed_matrix(KaldiReader(data, binary))
    assert np.array_equal(back, low.astype(np.float64)) or not binary
    np.testing.assert_allclose(back, low, rtol=1e-6)
    if not binary and size:
        old = ("FP %d " % size + " ".join("%.9g" % v for v in low[np.tril_indices(size)])).encode()
        np.testing.assert_allclose(read_packed_matrix(KaldiReader(old, False)), low, rtol=1e-7)


def _kaldi_rand_prune(post: float, thresh: float, rng: GlibcRand) -> np.float32:
    """Kaldi's RandPrune<float> written out one weight at a time."""
    post, thresh = np.float32(post), np.float32(thresh)
    if post == 0.0 or abs(post) >= thresh:
        return post
    uniform = np.float32((rng.rand() + 1.0) / (RAND_MAX + 2.0))
    keep = float(uniform) <= abs(float(post)) / float(thresh)
    return np.float32((1.0 if post >= 0 else -1.0) * (float(thresh) if keep else 0.0))


def test_rand_prune_is_kaldis_randprune() -> None:
    weights = np.array([1.0, 0.5, 0.0, 4.0, -0.25, 5.0, 3.9, 1e-3, -6.0] * 50, dtype=np.float32)
    got = rand_prune(weights, 4.0, GlibcRand(7))
    rng = GlibcRand(7)
    expected = np.array([_kaldi_rand_prune(p, 4.0, rng) for p in weights], dtype=np.float32)
    assert np.array_equal(got, expected)
    assert set(np.unique(got[np.abs(weights) < 4])) <= {-4.0, 0.0, 4.0}
    # The streams end in the same place: one draw per pruned weight.
    a, b = GlibcRand(7), rng
    rand_prune(weights, 4.0, a)
    assert a.rand() == b.rand()
    # Threshold 0 prunes nothing and draws nothing.
    c = GlibcRand(3)
    assert np.array_equal(rand_prune(weights, 0.0, c), weights)
    assert c.rand() == GlibcRand(3).rand()
    with pytest.raises(PynnetError):
        rand_prune(weights, -1.0, GlibcRand(1))


def test_plain_lda_diagonalises_the_covariances() -> None:
    stats, *_ = _random_stats(np.random.default_rng(3), num_frames=2000, dim=6, num_classes=9)
    total, between, _, _ = stats.get_stats()
    opts = FeatureTransformEstimateOptions(remove_offset=False, within_class_factor=1.0,
                                           max_singular_value=0.0)
    m, chol = estimate_feature_transform(stats, opts, want_cholesky=True)
    assert m.shape == (6, 6) and m.dtype == np.float32
    md = m.astype(np.float64)
    within = total - between
    np.testing.assert_allclose(md @ within @ md.T, np.eye(6), atol=1e-5)
    projected = md @ between @ md.T
    d = np.diag(projected)
    np.testing.assert_allclose(projected, np.diag(d), atol=1e-5)
    assert np.all(np.diff(d) <= 1e-6)                     # largest first
    np.testing.assert_allclose(chol.astype(np.float64) @ chol.T, within, rtol=1e-5, atol=1e-6)


def test_transform_scaling_ceiling_and_offset(capsys: pytest.CaptureFixture) -> None:
    stats, *_ = _random_stats(np.random.default_rng(4), num_frames=2000, dim=6, num_classes=9)
    total, between, mean, _ = stats.get_stats()
    plain, _ = estimate_feature_transform(stats, FeatureTransformEstimateOptions(
        remove_offset=False, within_class_factor=1.0, max_singular_value=0.0))
    scaled, _ = estimate_feature_transform(stats, FeatureTransformEstimateOptions(
        remove_offset=False, max_singular_value=0.0))
    d = np.diag(plain.astype(np.float64) @ between @ plain.T.astype(np.float64))
    np.testing.assert_allclose(scaled, plain * np.sqrt((0.001 + d) / (1 + d))[:, None],
                               rtol=1e-5)
    capsys.readouterr()
    ceiling = 0.5 * np.linalg.svd(scaled, compute_uv=False).max()
    full, _ = estimate_feature_transform(stats, FeatureTransformEstimateOptions(
        dim=4, max_singular_value=ceiling))
    err = capsys.readouterr().err
    assert full.shape == (4, 7)
    assert re.search(r"Applied ceiling to \d+ out of 4 singular values of transform using "
                     r"ceiling [0-9.e+-]+, max is ", err)
    assert np.linalg.svd(full[:, :6], compute_uv=False).max() <= ceiling * (1 + 1e-5)
    # The last column removes the mean.
    np.testing.assert_allclose(full[:, :6] @ mean.astype(np.float32) + full[:, 6], 0, atol=1e-5)
    with pytest.raises(PynnetError, match="--dim"):
        estimate_feature_transform(stats, FeatureTransformEstimateOptions(dim=7))


def test_singular_within_covariance_is_smoothed(capsys: pytest.CaptureFixture) -> None:
    stats = LdaEstimate()
    stats.init(3, 8)
    rng = np.random.default_rng(5)
    stats.accumulate(rng.standard_normal((5, 8)).astype(np.float32), np.array([0, 1, 2, 0, 1]),
                     np.ones(5, np.float32))
    m, chol = estimate_feature_transform(stats, FeatureTransformEstimateOptions(),
                                         want_cholesky=True)
    assert "Cholesky failed (possibly not +ve definite), so adding " in capsys.readouterr().err
    assert m.shape == (8, 9) and np.isfinite(m).all()
    assert chol.shape == (0, 0)      # as Kaldi leaves it when it had to smooth


# -- real Kaldi's figures (tests/data/lda, see its make_golden.py) ----------------------

def _golden_examples() -> list[NnetExample]:
    egs = []
    zeros = np.zeros((12, 20), dtype=np.float32)
    for line in (GOLDEN / "labels.txt").read_text().splitlines():
        rows = [[(int(p), float(v)) for p, v in (e.split(":") for e in row.split(","))]
                for row in line.split()]
        out = NnetIo("output", make_indexes(len(rows), 0), GeneralMatrix(
            SparseMatrix.from_pairs(32, rows)))
        egs.append(NnetExample([NnetIo("input", make_indexes(12, -2), zeros), out]))
    return egs


@pytest.mark.parametrize("prune, tag", [(4.0, "prune4"), (0.0, "prune0")])
def test_class_counts_match_kaldi(prune: float, tag: str) -> None:
    """Kaldi's soft counts per class with --rand-prune=4.0: the same rand()
    stream, including the draws Kaldi's graph builder takes when it compiles."""
    expected = {line.split()[0]: np.array(line.split()[1:], dtype=np.float64)
                for line in (GOLDEN / "kaldi_zero_accs.txt").read_text().splitlines()}
    nnet = read_nnet(str(GOLDEN / "init.raw"))
    acc = NnetLdaStatsAccumulator(prune, nnet)
    for eg in _golden_examples():
        acc.acc_stats(eg)
    assert acc.num_egs == 261
    assert np.array_equal(acc.stats.zero_acc, expected[tag])


def _log_figures(text: str) -> dict[str, object]:
    values = re.search(r"LDA singular values are  \[ ([^\]]*)\]", text).group(1).split()
    return {"count": float(re.search(r"Data count is (\S+)", text).group(1)),
            "values": np.array(values, dtype=np.float64),
            "sum_all": float(re.search(r"Sum of all singular values is (\S+)", text).group(1)),
            "sum_sel": float(re.search(r"Sum of selected singular values is (\S+)",
                                       text).group(1))}


def assert_same_figures(ours: str, kaldi: str) -> None:
    a, b = _log_figures(ours), _log_figures(kaldi)
    assert a["count"] == b["count"]
    va, vb = a["values"], b["values"]
    assert va.shape == vb.shape
    # Directions with no between-class variance print rounding noise (1e-16).
    big = vb > 1e-10 * vb.max()
    np.testing.assert_allclose(va[big], vb[big], rtol=1e-5)
    assert np.all(va[~big] < 1e-10 * vb.max())
    assert a["sum_all"] == pytest.approx(b["sum_all"], rel=1e-5)
    assert a["sum_sel"] == pytest.approx(b["sum_sel"], rel=1e-5)


@pytest.mark.parametrize("dim, tag, log_name", [(-1, "full", "log.get_transform.txt"),
                                                (20, "dim20", "log.get_transform_dim.txt")])
def test_transform_matches_kaldi(dim: int, tag: str, log_name: str,
                                 capsys: pytest.CaptureFixture) -> None:
    stats = read_lda_stats([str(GOLDEN / "lda_stats")])
    capsys.readouterr()
    m, _ = estimate_feature_transform(stats, FeatureTransformEstimateOptions(dim=dim))
    assert_same_figures(capsys.readouterr().err, (GOLDEN / log_name).read_text())
    digest = {tuple(line.split()[:2]): np.array(line.split()[2:], dtype=np.float64)
              for line in (GOLDEN / "mtm_digest.txt").read_text().splitlines()}
    md = m.astype(np.float64)
    mtm = md.T @ md
    scale = np.abs(digest[(tag, "diag")]).max()
    assert np.abs(np.diag(mtm) - digest[(tag, "diag")]).max() <= 1e-5 * scale
    assert np.abs(mtm[-1] - digest[(tag, "last")]).max() <= 1e-5 * scale


def test_kaldi_stats_file_rewrites_identically() -> None:
    """sum-lda-accs of one Kaldi file gives Kaldi's bytes back (as Kaldi's does)."""
    data = (GOLDEN / "lda_stats").read_bytes()
    stats = read_lda_stats([str(GOLDEN / "lda_stats")])
    w = KaldiWriter(True)
    stats.write(w)
    assert kaldi_object_bytes(w) == data
    assert open_kaldi_object(str(GOLDEN / "lda_stats")).binary


def test_dense_targets_accumulate_as_sparse() -> None:
    """Posteriors as a full target matrix (nnet3-get-egs-dense-targets) give the
    stats, and take the rand() draws, of the same posteriors as a sparse matrix:
    Kaldi walks each row's pdfs in order and zeros draw nothing."""
    from tests.helpers import nnet_from_config

    nnet = nnet_from_config("input-node name=input dim=3\n"
                            "output-node name=output input=Append(Offset(input,-1), input)\n")
    rng = np.random.default_rng(6)
    egs_sparse, egs_dense = [], []
    for _ in range(20):
        feats = rng.standard_normal((5, 3)).astype(np.float32)
        post = np.where(rng.random((4, 6)) < 0.3, rng.random((4, 6)), 0).astype(np.float32)
        post[:, 0] += np.float32(2.5)     # above the threshold: kept, without a draw
        inp = NnetIo("input", make_indexes(5, -1), feats)
        egs_sparse.append(NnetExample([inp, NnetIo("output", make_indexes(4, 0), GeneralMatrix(
            SparseMatrix.from_dense(post)))]))
        egs_dense.append(NnetExample([inp, NnetIo("output", make_indexes(4, 0), post)]))
    accs = []
    for egs in (egs_sparse, egs_dense):
        acc = NnetLdaStatsAccumulator(0.75, nnet)
        for eg in egs:
            acc.acc_stats(eg)
        accs.append(acc)
    a, b = accs
    assert a.stats.tot_count() > 0
    assert np.array_equal(a.stats.zero_acc, b.stats.zero_acc)
    assert np.array_equal(a.stats.first_acc, b.stats.first_acc)
    assert np.array_equal(a.stats.total_second_acc, b.stats.total_second_acc)
    assert a.rng.rand() == b.rng.rand()
