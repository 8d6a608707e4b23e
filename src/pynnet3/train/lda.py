"""LDA-style statistics and the feature transform a network's input is
initialised with (Kaldi's LdaEstimate, transform/lda-estimate.{h,cc};
FeatureTransformEstimate, nnet2/get-feature-transform.{h,cc}; and
NnetLdaStatsAccumulator of nnet3bin/nnet3-acc-lda-stats.cc).

The statistics are, per class c, the soft count ``zero_acc[c]`` and the
weighted sum of the feature vectors ``first_acc[c]``, plus the total weighted
scatter ``total_second_acc`` (sum of w x x^T over all frames), all in double.
On disk (``<LDAACCS>``) the counts and sums are stored as floats and the
scatter as the *within-class* scatter (total minus sum_c first_c first_c^T /
zero_c), a float packed matrix; reading adds the between-class part back.

The feature transform (nnet-get-feature-transform) is LDA with Kaldi's
normalisation for network inputs: with W the within-class and B the
between-class covariance, W = L L^T (Cholesky), the eigen-directions U of
L^-1 B L^-T (an SVD, singular values d sorted down) give the rows of
U^T L^-1; row i is scaled by sqrt((within_class_factor + d_i) / (1 + d_i)),
the transform's singular values are floored at ``max_singular_value`` and a
last column ``-A mean`` removes the mean (``remove_offset``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .. import log
from ..errors import PynnetError
from ..io.kaldi_io import (KaldiReader, KaldiWriter, kaldi_object_bytes, open_kaldi_object,
                           read_double_matrix, write_wxfilename)
from ..io.packed_matrix import read_packed_matrix, symmetric_from_lower, write_packed_matrix
from ..nnet.components.base import fmt_g
from .kaldi_random import RAND_MAX, GlibcRand

if TYPE_CHECKING:
    from ..compile.computation import NnetComputation
    from ..compile.request import ComputationRequest
    from ..nnet.nnet import Nnet
    from .egs import NnetExample

__all__ = ["LdaEstimate", "FeatureTransformEstimateOptions", "estimate_feature_transform",
           "read_lda_stats", "write_lda_stats", "rand_prune", "NnetLdaStatsAccumulator",
           "format_double_vector", "acc_lda_stats", "sum_lda_accs", "get_feature_transform"]

F32 = np.float32


def format_double_vector(vec: np.ndarray) -> str:
    """Kaldi's ``operator<<`` of a Vector<double> in a log message (precision 6)."""
    return " [ " + "".join("%g " % v for v in np.asarray(vec, dtype=np.float64).tolist()) + "]\n"


class LdaEstimate:
    """Kaldi's LdaEstimate accumulators (double precision)."""

    def __init__(self) -> None:
        self.zero_acc = np.zeros(0, dtype=np.float64)
        self.first_acc = np.zeros((0, 0), dtype=np.float64)
        self.total_second_acc = np.zeros((0, 0), dtype=np.float64)   # full symmetric

    def init(self, num_classes: int, dim: int) -> None:
        self.zero_acc = np.zeros(num_classes, dtype=np.float64)
        self.first_acc = np.zeros((num_classes, dim), dtype=np.float64)
        self.total_second_acc = np.zeros((dim, dim), dtype=np.float64)

    @property
    def num_classes(self) -> int:
        return self.first_acc.shape[0]

    @property
    def dim(self) -> int:
        return self.first_acc.shape[1]

    def tot_count(self) -> float:
        return float(self.zero_acc.sum())

    def scale(self, f: float) -> None:
        d = float(F32(f))
        self.zero_acc *= d
        self.first_acc *= d
        self.total_second_acc *= d

    def accumulate(self, data: np.ndarray, class_ids: np.ndarray, weights: np.ndarray) -> None:
        """Kaldi's Accumulate(data.Row(i), class_ids[i], weights[i]) for each row
        i in turn: float32 data and weights, added in double.  The counts and
        class sums are added in Kaldi's order (so they come out the same to the
        bit); the scatter is one matrix product."""
        data = np.asarray(data, dtype=F32)
        class_ids = np.asarray(class_ids, dtype=np.int64)
        weights = np.asarray(weights, dtype=F32)
        if data.ndim != 2 or data.shape[0] != class_ids.shape[0] \
                or class_ids.shape != weights.shape:
            raise PynnetError(f"LdaEstimate.accumulate: {data.shape} data, "
                              f"{class_ids.shape} classes, {weights.shape} weights")
        if data.shape[0] == 0:
            return
        if data.shape[1] != self.dim:
            raise PynnetError(f"LDA stats: feature dimension {data.shape[1]} does not match "
                              f"the accumulators' {self.dim}")
        bad = (class_ids < 0) | (class_ids >= self.num_classes)
        if bad.any():
            raise PynnetError(f"LDA stats: class {int(class_ids[bad][0])} out of range "
                              f"[0, {self.num_classes})")
        x = data.astype(np.float64)
        w = weights.astype(np.float64)
        wx = w[:, None] * x          # exact: a float times a float fits a double
        np.add.at(self.zero_acc, class_ids, w)
        np.add.at(self.first_acc, class_ids, wx)
        self.total_second_acc += wx.T @ x

    # -- derived statistics ---------------------------------------------------
    def get_stats(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
        """Kaldi's GetStats: (total covariance, between-class covariance,
        total mean, total count)."""
        count = self.tot_count()
        total_mean = self.first_acc.sum(axis=0) / count
        total_covar = self.total_second_acc / count - np.outer(total_mean, total_mean)
        nz = self.zero_acc != 0.0
        means = self.first_acc[nz] / self.zero_acc[nz, None]
        between = (means.T * (self.zero_acc[nz] / count)) @ means
        between -= np.outer(total_mean, total_mean)
        return total_covar, between, total_mean, count

    def _within_scatter(self) -> np.ndarray:
        """total_second_acc less each class's sum first first^T / zero: the
        within-class scatter the file stores."""
        nz = self.zero_acc != 0.0
        f = self.first_acc[nz]
        return self.total_second_acc - (f.T / self.zero_acc[nz]) @ f

    # -- I/O ------------------------------------------------------------------
    def write(self, w: KaldiWriter) -> None:
        w.write_token("<LDAACCS>")
        w.write_token("<VECSIZE>")
        w.write_int32(self.dim)
        w.write_token("<NUMCLASSES>")
        w.write_int32(self.num_classes)
        w.write_token("<ZERO_ACCS>")
        w.write_vector(self.zero_acc.astype(F32))
        w.write_token("<FIRST_ACCS>")
        w.write_matrix(self.first_acc.astype(F32))
        w.write_token("<SECOND_ACCS>")
        write_packed_matrix(w, self._within_scatter())
        w.write_token("</LDAACCS>")

    def read(self, r: KaldiReader, add: bool) -> None:
        """Kaldi's LdaEstimate::Read (``add``: sum into the current stats)."""
        r.expect_token("<LDAACCS>")
        r.expect_token("<VECSIZE>")
        dim = r.read_int32()
        r.expect_token("<NUMCLASSES>")
        num_classes = r.read_int32()
        if dim < 0 or num_classes < 0:
            raise r.error(f"bad LDA accumulator sizes: dim {dim}, {num_classes} classes")
        if add and (self.num_classes != 0 or self.dim != 0):
            if num_classes != self.num_classes or dim != self.dim:
                raise r.error(f"LdaEstimate::Read, dimension or classes count mismatch, "
                              f"{self.num_classes}, {self.dim},  vs. {num_classes}, {dim}")
        else:
            self.init(num_classes, dim)
        tmp_zero: np.ndarray | None = None
        tmp_first: np.ndarray | None = None
        token = r.read_token()
        while token != "</LDAACCS>":
            if token == "<ZERO_ACCS>":
                tmp_zero = r.read_double_vector()
                if tmp_zero.shape != (num_classes,):
                    raise r.error(f"<ZERO_ACCS> of dimension {tmp_zero.shape[0]}, expected "
                                  f"{num_classes}")
                if not add:
                    self.zero_acc[:] = 0.0
                self.zero_acc += tmp_zero
            elif token == "<FIRST_ACCS>":
                tmp_first = read_double_matrix(r)
                if tmp_first.shape != (num_classes, dim):
                    raise r.error(f"<FIRST_ACCS> of size {tmp_first.shape}, expected "
                                  f"{(num_classes, dim)}")
                if not add:
                    self.first_acc[:] = 0.0
                self.first_acc += tmp_first
            elif token == "<SECOND_ACCS>":
                sec = read_packed_matrix(r)
                if sec.shape != (dim, dim):
                    raise r.error(f"<SECOND_ACCS> of size {sec.shape[0]}, expected {dim}")
                if tmp_zero is None or tmp_first is None:
                    raise r.error("<SECOND_ACCS> before <ZERO_ACCS> and <FIRST_ACCS>")
                sec = symmetric_from_lower(sec)
                nz = tmp_zero != 0.0
                f = tmp_first[nz]
                sec += (f.T / tmp_zero[nz]) @ f
                if not add:
                    self.total_second_acc[:] = 0.0
                self.total_second_acc += sec
            else:
                raise r.error(f"Unexpected token '{token}' in file")
            token = r.read_token()


def read_lda_stats(rxfilenames: Sequence[str], stats: LdaEstimate | None = None) -> LdaEstimate:
    """The sum of the LDA accumulators in ``rxfilenames`` (text or binary),
    as sum-lda-accs and nnet-get-feature-transform read them."""
    stats = stats if stats is not None else LdaEstimate()
    for name in rxfilenames:
        stats.read(open_kaldi_object(name), add=True)
    return stats


def write_lda_stats(wxfilename: str, stats: LdaEstimate, binary: bool) -> None:
    w = KaldiWriter(binary)
    stats.write(w)
    write_wxfilename(wxfilename, kaldi_object_bytes(w))


# ---------------------------------------------------------------------------
# The feature transform (nnet-get-feature-transform)


@dataclass
class FeatureTransformEstimateOptions:
    """Kaldi's FeatureTransformEstimateOptions (same flags and defaults)."""

    remove_offset: bool = field(default=True, metadata={
        "flag": "remove-offset", "help": "If true, output an affine transform that makes the "
        "projected data mean equal to zero."})
    dim: int = field(default=-1, metadata={
        "flag": "dim", "help": "Dimension to project to with LDA"})
    within_class_factor: float = field(default=0.001, metadata={
        "flag": "within-class-factor", "help": "If 1.0, do conventional LDA where the "
        "within-class variance will be unit in the projected space.  May be set to less than "
        "1.0, which scales the features to have less variance, particularly for dimensions "
        "where between-class variance is small. "})
    max_singular_value: float = field(default=5.0, metadata={
        "flag": "max-singular-value", "help": "If >0, maximum allowed singular value of final "
        "transform (they are floored to this)"})


def _cholesky(mat: np.ndarray) -> np.ndarray | None:
    try:
        return np.linalg.cholesky(mat)
    except np.linalg.LinAlgError:
        return None


def estimate_feature_transform(stats: LdaEstimate, opts: FeatureTransformEstimateOptions,
                               want_cholesky: bool = False
                               ) -> tuple[np.ndarray, np.ndarray | None]:
    """Kaldi's FeatureTransformEstimate::Estimate: the float32 transform
    (target-dim x dim, plus a last offset column with ``remove_offset``) and,
    with ``want_cholesky``, the float32 Cholesky factor of the within-class
    covariance (size 0 when Kaldi had to smooth that covariance, as Kaldi
    leaves it then)."""
    if stats.dim == 0 or stats.num_classes == 0:
        raise PynnetError("no LDA statistics to estimate a transform from")
    total_covar, between, total_mean, count = stats.get_stats()
    log.log(f"Data count is {fmt_g(count)}")
    if not count > 0:
        raise PynnetError(f"LDA statistics have total count {fmt_g(count)}")
    dim = total_covar.shape[0]
    target_dim = opts.dim if opts.dim > 0 else dim
    if target_dim > dim:
        raise PynnetError(f"--dim={opts.dim} is more than the feature dimension {dim}")

    within = total_covar - between
    chol = _cholesky(within)
    cholesky_out: np.ndarray | None = None
    if chol is not None:
        if want_cholesky:
            cholesky_out = np.tril(chol).astype(F32)
    else:
        smooth = F32(1.0e-03 * np.trace(within) / dim)
        log.log(f"Cholesky failed (possibly not +ve definite), so adding {fmt_g(smooth)} to "
                "diagonal and trying again.\n")
        within = within + float(smooth) * np.eye(dim)
        chol = _cholesky(within)
        if chol is None:
            raise PynnetError("Cholesky decomposition failed. Maybe matrix is not positive "
                              "definite (the within-class covariance, even after smoothing)")
        if want_cholesky:
            cholesky_out = np.zeros((0, 0), dtype=F32)
    from scipy.linalg import solve_triangular

    chol_inv = solve_triangular(chol, np.eye(dim), lower=True)
    tmp = chol_inv @ between @ chol_inv.T
    tmp = 0.5 * (tmp + tmp.T)               # Kaldi holds it as a symmetric (packed) matrix
    svd_u, svd_d, _ = np.linalg.svd(tmp)
    order = np.argsort(-svd_d, kind="stable")       # Kaldi's SortSvd: largest first
    svd_d, svd_u = svd_d[order], svd_u[:, order]

    log.log(f"LDA singular values are {format_double_vector(svd_d)}")
    log.log(f"Sum of all singular values is {fmt_g(svd_d.sum())}")
    log.log(f"Sum of selected singular values is {fmt_g(svd_d[:target_dim].sum())}")

    lda_mat = svd_u.T @ chol_inv
    m = lda_mat[:target_dim].astype(F32)
    wcf = F32(opts.within_class_factor)
    if wcf != F32(1.0):
        # BaseFloat arithmetic, as Kaldi scales each row.
        old_var = (1.0 + svd_d[:target_dim]).astype(F32)
        new_var = (float(wcf) + svd_d[:target_dim]).astype(F32)
        scale = np.sqrt(new_var / old_var).astype(F32)
        m = (m * scale[:, None]).astype(F32)

    ceiling = F32(opts.max_singular_value)
    if ceiling > 0.0:
        u, s, vt = np.linalg.svd(m, full_matrices=False)
        max_s = s.max()
        over = s > ceiling
        n = int(over.sum())
        if n > 0:
            log.log(f"Applied ceiling to {n} out of {s.shape[0]} singular values of transform "
                    f"using ceiling {fmt_g(ceiling)}, max is {fmt_g(max_s)}")
            s = np.where(over, ceiling, s).astype(F32)
            m = (u @ (vt * s[:, None])).astype(F32)

    if opts.remove_offset:
        mean = total_mean.astype(F32)
        neg_projected_mean = (-(m @ mean)).astype(F32)
        m = np.concatenate([m, neg_projected_mean[:, None]], axis=1)
    return np.ascontiguousarray(m, dtype=F32), cholesky_out


# ---------------------------------------------------------------------------
# Accumulation from egs (nnet3-acc-lda-stats)


def rand_prune(weights: np.ndarray, threshold: float, rng: GlibcRand) -> np.ndarray:
    """Kaldi's RandPrune on each float weight in turn: a weight that is nonzero
    and below ``threshold`` in magnitude becomes +-threshold with probability
    |weight| / threshold and 0 otherwise (one rand() draw each, glibc's
    stream); the others are kept.  A negative threshold is an error, as
    Kaldi's assertion."""
    thresh = F32(threshold)
    if thresh < 0:
        raise PynnetError(f"--rand-prune must be >= 0, got {threshold}")
    w = np.asarray(weights, dtype=F32)
    with np.errstate(invalid="ignore"):
        # NaN draws too: Kaldi's test is (post == 0 || |post| >= thresh).
        need = (w != 0) & ~(np.abs(w) >= thresh)
    n = int(need.sum())
    if n == 0:
        return w.copy()
    draws = np.array([rng.rand() for _ in range(n)], dtype=np.float64)
    uniform = ((draws + 1.0) / (RAND_MAX + 2.0)).astype(F32)      # Kaldi's RandUniform
    sel = w[need]
    with np.errstate(invalid="ignore", divide="ignore"):
        keep = uniform.astype(np.float64) <= np.abs(sel).astype(np.float64) / float(thresh)
    sign = np.where(sel >= 0, F32(1.0), F32(-1.0))
    out = w.copy()
    out[need] = np.where(keep, sign * thresh, F32(0.0)).astype(F32)
    return out


class NnetLdaStatsAccumulator:
    """Kaldi's NnetLdaStatsAccumulator: runs the network on each example (no
    derivatives, the model as it is) and accumulates LDA statistics of the
    rows of its 'output' with the example's 'output' supervision as class
    posteriors (a sparse or full target matrix), pruned with
    :func:`rand_prune` when ``rand_prune_threshold`` > 0.

    ``rng`` is glibc's rand() stream, which a Kaldi binary starts at srand(1);
    the draws happen per example, row by row, in each row's element order.
    """

    def __init__(self, rand_prune_threshold: float, nnet: "Nnet", rng: GlibcRand | None = None,
                 backend: str = "cpu", compiler=None) -> None:
        from ..cache import CachingCompiler

        if F32(rand_prune_threshold) < 0:
            raise PynnetError(f"--rand-prune must be >= 0, got {rand_prune_threshold}")
        self.rand_prune = rand_prune_threshold
        self.nnet = nnet
        self.rng = rng if rng is not None else GlibcRand(1)
        self.backend = backend
        if compiler is None:
            compile_fn = self._compile_with_kaldi_draws if F32(rand_prune_threshold) > 0 else None
            compiler = CachingCompiler(nnet, use_disk=False, compile_fn=compile_fn)
        self.compiler = compiler
        self.stats = LdaEstimate()
        self.num_egs = 0

    def _compile_with_kaldi_draws(self, request: "ComputationRequest") -> "NnetComputation":
        """Compile as usual, first taking from the rand() stream what Kaldi's
        graph builder takes when it compiles this request (the draws that
        --rand-prune makes later depend on it)."""
        from ..compile.compiler import Compiler, CompilerOptions
        from ..compile.graph.kaldi_draws import replay_graph_builder_draws

        replay_graph_builder_draws(self.nnet, request, self.rng, log.verbose_level())
        return Compiler([request], self.nnet).create_computation(CompilerOptions())

    def acc_stats(self, eg: "NnetExample") -> None:
        from ..compute.computer import NnetComputeOptions, NnetComputer
        from .eg_request import accept_example_inputs, get_computation_request

        request = get_computation_request(self.nnet, eg, False, False)
        computation = self.compiler.compile(request)
        options = NnetComputeOptions(debug=log.verbose_level() >= 3, compress_matrices=False)
        computer = NnetComputer(options, computation, self.nnet, backend=self.backend)
        accept_example_inputs(computer, self.nnet, eg)
        computer.run()
        self._acc_stats_from_output(eg, np.asarray(computer.get_output("output")))
        self.num_egs += 1

    def _acc_stats_from_output(self, eg: "NnetExample", output: np.ndarray) -> None:
        from ..io.general_matrix import MatrixType

        sup = eg.get_io("output")
        if sup is None:
            raise PynnetError("no output in eg named 'output'")
        num_rows, num_pdfs = sup.features.num_rows, sup.features.num_cols
        if num_rows != output.shape[0]:
            raise PynnetError(f"the example's 'output' has {num_rows} rows but the network "
                              f"output has {output.shape[0]}")
        if self.stats.dim == 0:
            self.stats.init(num_pdfs, output.shape[1])
        if sup.features.type is MatrixType.SPARSE:
            smat = sup.features.value
            rows = np.repeat(np.arange(num_rows), np.diff(smat.indptr))
            pdfs = np.asarray(smat.indices, dtype=np.int64)
            weights = np.asarray(smat.values, dtype=F32)
        else:
            mat = np.asarray(sup.features.to_matrix(), dtype=F32)
            # Kaldi walks every (row, pdf) in row-major order; zeros draw nothing.
            with np.errstate(invalid="ignore"):
                rows, pdfs = np.nonzero(mat != 0)
            weights = mat[rows, pdfs]
        pruned = rand_prune(weights, self.rand_prune, self.rng)
        keep = pruned != 0
        self.stats.accumulate(output[rows[keep]], pdfs[keep], pruned[keep])

    def write_stats(self, wxfilename: str, binary: bool) -> None:
        """Kaldi's WriteStats: an error when no stats were accumulated."""
        count = self.stats.tot_count()
        if self.stats.dim == 0 or count == 0:
            raise PynnetError("Accumulated no stats.")
        write_lda_stats(wxfilename, self.stats, binary)
        log.log(f"Accumulated stats, soft frame count = {fmt_g(count)}.  Wrote to "
                f"{wxfilename}")



# ---------------------------------------------------------------------------
# The binaries' work, one call each


def acc_lda_stats(nnet_rxfilename: str, egs_rspecifier: str, stats_wxfilename: str,
                  rand_prune_threshold: float = 0.0, binary: bool = True) -> None:
    """nnet3-acc-lda-stats: LDA statistics of the network's output on the
    examples, written to ``stats_wxfilename``."""
    from ..compile.model_io import read_nnet
    from .egs import iter_examples

    nnet = read_nnet(nnet_rxfilename)
    accumulator = NnetLdaStatsAccumulator(rand_prune_threshold, nnet)
    for _, eg in iter_examples(egs_rspecifier):
        accumulator.acc_stats(eg)
    log.log(f"Processed {accumulator.num_egs} examples.")
    accumulator.write_stats(stats_wxfilename, binary)
    log.log(accumulator.compiler.timing_summary())


def sum_lda_accs(stats_wxfilename: str, stats_rxfilenames: Sequence[str],
                 binary: bool = True) -> None:
    """sum-lda-accs: the sum of LDA accumulators, written out."""
    write_lda_stats(stats_wxfilename, read_lda_stats(stats_rxfilenames), binary)


def get_feature_transform(matrix_wxfilename: str, stats_rxfilenames: Sequence[str],
                          opts: FeatureTransformEstimateOptions, binary: bool = True,
                          cholesky_wxfilename: str = "",
                          within_covar_wxfilename: str = "") -> None:
    """nnet-get-feature-transform: the transform from the summed statistics,
    and optionally the Cholesky factor of the within-class covariance (a
    TpMatrix) and that covariance itself (an SpMatrix, the factor times its
    transpose)."""
    stats = read_lda_stats(stats_rxfilenames)
    want = bool(cholesky_wxfilename or within_covar_wxfilename)
    mat, cholesky = estimate_feature_transform(stats, opts, want_cholesky=want)
    w = KaldiWriter(binary)
    w.write_matrix(mat)
    write_wxfilename(matrix_wxfilename, kaldi_object_bytes(w))
    if cholesky_wxfilename:
        w = KaldiWriter(binary)
        write_packed_matrix(w, cholesky)
        write_wxfilename(cholesky_wxfilename, kaldi_object_bytes(w))
    if within_covar_wxfilename:
        w = KaldiWriter(binary)
        write_packed_matrix(w, (cholesky @ cholesky.T).astype(F32))
        write_wxfilename(within_covar_wxfilename, kaldi_object_bytes(w))
