"""OnlineNaturalGradient (natural_gradient.py) and the natural-gradient
updates of the components, checked

* against a plain double-precision implementation of the same estimator
  written from the equations (Kaldi's natural-gradient-online-test.cc keeps
  such an ``OnlineNaturalGradientSimple``; ported here), with that test's
  properties: same preconditioned matrix and scale, norm preserved by the
  scale, and a positive-definite transform (each row's dot product with its
  preconditioned version is >= 0);
* for scale behaviour, freezing, the update period and degenerate inputs;
* and end to end against real Kaldi: replaying nnet3-train on the
  ``ngaffine_bn`` reference (NaturalGradientAffine + BatchNorm + Tdnn +
  Linear, 16 minibatches) with the components' propagate / backprop /
  store_stats and Kaldi's trainer steps, then comparing the objective and the
  trained parameters with Kaldi's 1.raw and 1b.raw.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.components.natural_gradient import OnlineNaturalGradient
from pynnet3.nnet.index import Index
from tests.helpers import reference_dir

# ---------------------------------------------------------------------------
# Kaldi's OnlineNaturalGradientSimple: the estimator written directly from
# its definition (F_t, S_t, T_t, Y_t, Z_t ...) with dense double matrices.


class SimpleNaturalGradient:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.num_samples_history = 2000.0
        self.alpha = 4.0
        self.epsilon = 1.0e-10
        self.delta = 5.0e-4
        self.R_t: np.ndarray | None = None
        self.d_t = np.zeros(0)
        self.rho_t = 0.0

    def _init_default(self, dim: int) -> None:
        self.rank = min(self.rank, dim - 1)
        R = self.rank
        self.R_t = np.zeros((R, dim))
        for r in range(R):
            cols = list(range(r, dim, R))
            for i, c in enumerate(cols):
                self.R_t[r, c] = (1.1 if i == 0 else 1.0) / math.sqrt(1.1 * 1.1 + len(cols) - 1)
        self.d_t = np.full(R, self.epsilon)
        self.rho_t = self.epsilon

    def _eta(self, n: int) -> float:
        return min(1.0 - math.exp(-n / self.num_samples_history), 0.9)

    def precondition(self, X: np.ndarray) -> tuple[np.ndarray, float]:
        X = np.asarray(X, dtype=np.float64)
        if self.R_t is None:
            self._init_default(X.shape[1])
            for _ in range(3):
                self.precondition(X)
        R, D = self.R_t.shape
        N = X.shape[0]
        eta = self._eta(N)
        F = self.R_t.T @ np.diag(self.d_t) @ self.R_t + self.rho_t * np.eye(D)
        S = X.T @ X / N
        T = eta * S + (1.0 - eta) * F
        Y = self.R_t @ T
        c, U = np.linalg.eigh(Y @ Y.T)
        order = np.argsort(-np.abs(c), kind="stable")
        c, U = c[order], U[:, order]
        c = np.maximum(c, (self.rho_t * (1.0 - eta)) ** 2)
        sqrt_c = np.sqrt(c)
        R_t1 = (U.T @ Y) / sqrt_c[:, None]
        rho_t1 = (eta * np.trace(S) + (1.0 - eta) * (D * self.rho_t + self.d_t.sum())
                  - sqrt_c.sum()) / (D - R)
        d_t1 = sqrt_c - rho_t1
        floor = max(self.epsilon, self.delta * sqrt_c.max())
        rho_t1 = max(rho_t1, floor)
        d_t1 = np.maximum(d_t1, floor)
        G = F + self.alpha / D * np.trace(F) * np.eye(D)
        beta = self.rho_t + self.alpha / D * np.trace(F)
        X_hat = beta * X @ np.linalg.inv(G)
        tr_x, tr_xhat = np.sum(X * X), np.sum(X_hat * X_hat)
        gamma = 1.0 if tr_xhat == 0 else math.sqrt(tr_x / tr_xhat)
        self.rho_t, self.d_t, self.R_t = rho_t1, d_t1, R_t1
        if np.abs(self.R_t @ self.R_t.T - np.eye(R)).max() > 1.0e-3:
            for i in range(R):           # Gram-Schmidt, as the Kaldi test does
                for j in range(i):
                    self.R_t[i] -= (self.R_t[j] @ self.R_t[i]) * self.R_t[j]
                self.R_t[i] /= np.linalg.norm(self.R_t[i])
        return X_hat, gamma


def _kaldi_test_matrix(rs: np.random.RandomState, N: int, D: int, zero: bool,
                       big_eig_vector: np.ndarray) -> np.ndarray:
    if zero:
        return np.zeros((N, D), dtype=np.float32)
    m = rs.randn(N, D) + np.outer(rs.randn(N), big_eig_vector)
    return m.astype(np.float32)


@pytest.mark.parametrize("seed", range(6))
def test_matches_simple_reference(seed: int) -> None:
    """Kaldi's UnitTestPreconditionDirectionsOnline (fewer iterations)."""
    rs = np.random.RandomState(seed)
    R = 1 + rs.randint(30)
    N = 2 * R + rs.randint(30)
    D = R + 1 + rs.randint(20)
    zero = seed == 2                  # all-zero input must not crash either
    big_eig_vector = rs.randn(D) * float(rs.randint(1, 21) ** 2)
    simple = SimpleNaturalGradient(R)
    ours = OnlineNaturalGradient(rank=R)
    ours.turn_on_debug()
    worst = 0.0
    for it in range(40):
        M = _kaldi_test_matrix(rs, N, D, zero, big_eig_vector)
        want, gamma1 = simple.precondition(M)
        got = M.copy()
        gamma2 = ours.precondition_directions(got)
        norm = max(np.linalg.norm(want), np.linalg.norm(got))
        err = np.linalg.norm(want - got) / norm if norm > 0 else 0.0
        worst = max(worst, err)
        assert err <= 0.01, (it, err)                     # Kaldi's AssertEqual(Mcopy1, Mcopy2)
        assert gamma2 == pytest.approx(gamma1, rel=1e-2)
        # the scale restores the Frobenius norm
        assert np.sum(M.astype(np.float64) ** 2) == pytest.approx(
            np.sum((got.astype(np.float64) * gamma2) ** 2), rel=1e-2, abs=1e-30)
        # positive-definite transform: every row keeps a non-negative dot product
        assert (np.einsum("ij,ij->i", M.astype(np.float64), got) >= 0).all()
    print(f"R={R} N={N} D={D}: worst relative difference to the reference {worst:.2e}")
    assert ours.t == 40


def test_scaling_invariance() -> None:
    """Scaling the input scales the (rescaled) output the same way: the
    Fisher estimate scales with the data, its inverse cancels it."""
    rs = np.random.RandomState(5)
    a, b = OnlineNaturalGradient(rank=4), OnlineNaturalGradient(rank=4)
    for _ in range(15):
        X = (rs.randn(32, 12) * np.linspace(0.2, 3.0, 12)).astype(np.float32)
        x1, x2 = X.copy(), (X * np.float32(100.0))
        s1 = a.precondition_directions(x1)
        s2 = b.precondition_directions(x2)
        np.testing.assert_allclose(x2 * s2, 100.0 * x1 * s1, rtol=2e-3, atol=1e-3)
    assert b.rho_t == pytest.approx(1.0e4 * a.rho_t, rel=1e-3)


def test_preconditioning_shrinks_dominant_directions() -> None:
    """Directions of large variance are damped relative to the others."""
    rs = np.random.RandomState(6)
    p = OnlineNaturalGradient(rank=3, num_samples_history=200.0)
    scales = np.array([10.0] + [1.0] * 9)
    for _ in range(30):
        X = (rs.randn(64, 10) * scales).astype(np.float32)
        p.precondition_directions(X)
    X = (rs.randn(1000, 10) * scales).astype(np.float32)
    Y = X.copy()
    p.precondition_directions(Y)
    ratio_in = np.abs(X[:, 0]).mean() / np.abs(X[:, 1:]).mean()
    ratio_out = np.abs(Y[:, 0]).mean() / np.abs(Y[:, 1:]).mean()
    # F ~ diag(100, 1, ..., 1) and G = F + alpha/D tr(F) I, so the first
    # column is damped relative to the others by (43.6 + 1) / (43.6 + 100).
    tr_f = 100.0 + 9.0
    expected = (4.0 / 10 * tr_f + 1.0) / (4.0 / 10 * tr_f + 100.0)
    assert ratio_out / ratio_in == pytest.approx(expected, rel=0.05)


def test_frozen_and_update_period() -> None:
    rs = np.random.RandomState(7)
    p = OnlineNaturalGradient(rank=3, update_period=4)
    p.freeze(True)
    X = rs.randn(20, 8).astype(np.float32)
    p.precondition_directions(X.copy())       # frozen still initialises
    assert p.t == 1 and p.W_t is not None
    W, d, rho = p.W_t.copy(), p.d_t.copy(), p.rho_t
    for _ in range(5):
        Y = rs.randn(20, 8).astype(np.float32)
        Z = Y.copy()
        p.precondition_directions(Z)
        # frozen: the fixed transform X - X W^T W, no update of the estimate
        np.testing.assert_allclose(Z, Y - (Y @ W.T) @ W, rtol=1e-5, atol=1e-6)
    assert p.t == 6
    np.testing.assert_array_equal(p.W_t, W)
    assert p.rho_t == rho and np.array_equal(p.d_t, d)
    p.freeze(False)
    # Unfrozen: every call up to t = 10 updates, then every 4th.
    updated = []
    for _ in range(14):
        before = p.rho_t
        p.precondition_directions(rs.randn(20, 8).astype(np.float32))
        updated.append(p.rho_t != before)
    # calls made at t = 6..19
    assert updated == [t <= 10 or (t - 10) % 4 == 0 for t in range(6, 20)]


def _init_by_full_calls(p: OnlineNaturalGradient, x0: np.ndarray) -> OnlineNaturalGradient:
    """Kaldi's Init written out: from InitDefault, 1 or 3 whole
    PreconditionDirections calls (t = 1, 2, 3) on fresh copies of X0,
    keeping only the estimate."""
    q = p.copy()
    q.init_default(x0.shape[1])
    q.t = 1
    for _ in range(1 if x0.shape[0] <= q.rank else 3):
        q.precondition_directions(np.array(x0, dtype=np.float32, copy=True))
    return q


@pytest.mark.parametrize("rows, dim, rank", [(128, 513, 20), (128, 2000, 80), (128, 201, 20),
                                             (5, 40, 10), (60, 9, 4), (300, 64, 80)])
def test_init_is_the_full_calls_bit_for_bit(rows: int, dim: int, rank: int) -> None:
    """init refreshes the estimate without preconditioning the (discarded)
    copies of X0: W_t, d_t, rho_t and the rank are exactly those of the full
    calls, X0 is left untouched, and the first call's output is the same."""
    rs = np.random.RandomState(rows + dim)
    x0 = (rs.randn(rows, dim) * np.linspace(0.1, 3.0, dim)).astype(np.float32)
    ref = _init_by_full_calls(OnlineNaturalGradient(rank=rank), x0)
    p = OnlineNaturalGradient(rank=rank)
    kept = x0.copy()
    p.init(x0)
    np.testing.assert_array_equal(x0, kept)
    assert p.rank == ref.rank and p.rho_t == ref.rho_t and p.t == 0
    np.testing.assert_array_equal(p.W_t, ref.W_t)
    np.testing.assert_array_equal(p.d_t, ref.d_t)
    # The first call (init, then preconditioning X0 with the new estimate).
    a, b = x0.copy(), x0.copy()
    q = OnlineNaturalGradient(rank=rank)
    scale = q.precondition_directions(a)
    # The reference estimate, used as a first call would use it after init
    # (t = 1 only so that it does not initialise again; calls up to t = 10
    # update the estimate alike).
    ref.t = 1
    assert scale == ref.precondition_directions(b)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(q.W_t, ref.W_t)
    assert q.t == 1 and q.rho_t == ref.rho_t


def test_init_orthonormal_special_matches_definition() -> None:
    """The vectorised InitOrthonormalSpecial equals the row-by-row definition
    (row r: 1.1 at column r, 1 at columns r + k R, normalised in float32)."""
    from pynnet3.nnet.components.natural_gradient import init_orthonormal_special

    f32 = np.float32
    for R, D in [(1, 1), (1, 7), (3, 3), (3, 10), (20, 513), (80, 2000), (80, 201), (7, 8)]:
        want = np.zeros((R, D), dtype=f32)
        for r in range(R):
            cols = np.arange(r, D, R)
            norm = f32(1.0 / math.sqrt(float(f32(1.1) * f32(1.1)) + len(cols) - 1))
            want[r, cols] = norm
            want[r, cols[0]] = norm * f32(1.1)
        got = init_orthonormal_special(R, D)
        assert got.dtype == f32
        np.testing.assert_array_equal(got, want)
        np.testing.assert_allclose(got @ got.T, np.eye(R), atol=1e-6)


def test_degenerate_inputs() -> None:
    p = OnlineNaturalGradient(rank=10)
    X = np.zeros((5, 1), dtype=np.float32)
    assert p.precondition_directions(X) == 1.0 and p.t == 0       # 1-dim: identity
    X = np.zeros((6, 4), dtype=np.float32)
    assert p.precondition_directions(X) == 1.0
    assert p.rank == 3                                            # reduced to dim - 1
    assert not np.isnan(p.W_t).any() and p.rho_t >= p.epsilon
    with pytest.raises(TypeError):
        p.precondition_directions(np.zeros((3, 4)))               # float64 refused


def test_num_minibatches_history() -> None:
    p = OnlineNaturalGradient(num_minibatches_history=4.0)
    assert p.eta(1000) == pytest.approx(0.25)
    q = OnlineNaturalGradient()
    assert q.eta(100) == pytest.approx(1.0 - math.exp(-100 / 2000.0), rel=1e-6)
    assert q.eta(10 ** 6) == pytest.approx(0.9)


# ---------------------------------------------------------------------------
# Replay of Kaldi's nnet3-train on /work/shared/reference/train/ngaffine_bn


def _replay_training(nnet, egs_path: str) -> tuple[float, float, list[float]]:
    """nnet3-train (default options) for the ngaffine_bn topology:
    Append(-2..2) -> NaturalGradientAffine -> ReLU -> BatchNorm -> Tdnn(-1,0,1)
    -> ReLU -> BatchNorm -> Linear -> NaturalGradientAffine -> LogSoftmax,
    objective linear (xent).  Per minibatch, like NnetTrainer::TrainInternal:
    forward (stats stored into the model), backward with to_update = a
    zeroed copy of each component (the "delta nnet", which also keeps the
    natural-gradient state), global max-change 2.0, model += delta, delta
    zeroed, batch-norm stats scaled by 0.8.  Returns (objective, weight,
    norms of the deltas)."""
    from pynnet3.train.egs import iter_examples

    F32 = np.float32
    comps = {name: nnet.get_component(i) for i, name in enumerate(nnet.component_names)}
    for c in comps.values():
        c.zero_stats()
    delta = {name: c.copy() for name, c in comps.items()}
    for c in delta.values():
        c.scale(0.0)
    updatable = [n for n in nnet.component_names if comps[n].properties() & Prop.UPDATABLE]
    tot_objf = tot_weight = 0.0
    delta_norms = []

    def fwd(name, x, indexes=None, rows=None):
        y = np.zeros((x.shape[0] if rows is None else rows, comps[name].output_dim()), F32)
        return y, comps[name].propagate(indexes, x, y)

    def bwd(name, x, y, dy, memo=None, indexes=None, need_in_deriv=True):
        c = comps[name]
        p = c.properties()
        dx = np.zeros((x.shape[0], c.input_dim()), F32) if need_in_deriv else None
        c.backprop("", indexes, x if p & Prop.BACKPROP_NEEDS_INPUT else None,
                   y if p & Prop.BACKPROP_NEEDS_OUTPUT else None, dy, memo, delta[name], dx)
        return dx

    for _key, eg in iter_examples("ark:" + egs_path):
        inp, out = eg.get_io("input"), eg.get_io("output")
        X = inp.features.to_matrix().astype(F32)
        row_of = {(int(n), int(t)): i for i, (n, t, _x) in enumerate(inp.indexes)}
        num_n = int(inp.indexes[:, 0].max()) + 1
        rows1 = [(n, t) for n in range(num_n) for t in range(-1, 9)]   # tdnn1.* frames
        spliced = np.concatenate([X[[row_of[(n, t + o)] for n, t in rows1]]
                                  for o in (-2, -1, 0, 1, 2)], axis=1)
        h1, _ = fwd("tdnn1.affine", spliced)
        h2, _ = fwd("tdnn1.relu", h1)
        h3, m3 = fwd("tdnn1.batchnorm", h2)
        # TdnnComponent: indexes as the compiler makes them (reordered).
        tdnn = comps["tdnn2.tdnn"]
        in_idx = [Index(n, t) for n, t in rows1]
        out_idx = [Index(n, t) for n in range(num_n) for t in range(0, 8)]
        new_in, new_out = tdnn.reorder_indexes(in_idx, out_idx)
        pre = tdnn.precompute_indexes(None, new_in, new_out, True)
        perm = [{ix: i for i, ix in enumerate(in_idx)}[ix] for ix in new_in]
        h3r = h3[perm]
        h4, _ = fwd("tdnn2.tdnn", h3r, pre, len(new_out))
        h5, _ = fwd("tdnn2.relu", h4)
        h6, m6 = fwd("tdnn2.batchnorm", h5)
        h7, _ = fwd("linear3", h6)
        h8, _ = fwd("final_affine", h7)
        h9, _ = fwd("final_log_softmax", h8)
        out_row = {(int(n), int(t)): i for i, (n, t, _x) in enumerate(out.indexes)}
        sup = out.features.to_matrix().astype(F32)[[out_row[(ix.n, ix.t)] for ix in new_out]]
        tot_objf += float(np.sum(sup.astype(np.float64) * h9))
        tot_weight += float(sup.sum(dtype=np.float64))
        comps["tdnn1.relu"].store_stats(h1, h2, None)
        comps["tdnn1.batchnorm"].store_stats(h2, h3, m3)
        comps["tdnn2.relu"].store_stats(h4, h5, None)
        comps["tdnn2.batchnorm"].store_stats(h5, h6, m6)
        # linear objective: the derivative is the supervision itself
        d8 = bwd("final_log_softmax", h8, h9, sup)
        d7 = bwd("final_affine", h7, h8, d8)
        d6 = bwd("linear3", h6, h7, d7)
        d5 = bwd("tdnn2.batchnorm", h5, h6, d6, m6)
        d4 = bwd("tdnn2.relu", h4, h5, d5)
        d3r = bwd("tdnn2.tdnn", h3r, h4, d4, None, pre)
        d3 = np.zeros_like(h3)
        np.add.at(d3, perm, d3r)
        d2 = bwd("tdnn1.batchnorm", h2, h3, d3, m3)
        d1 = bwd("tdnn1.relu", h1, h2, d2)
        bwd("tdnn1.affine", spliced, h1, d1, need_in_deriv=False)
        norm = math.sqrt(sum(delta[n].dot_product(delta[n]) for n in updatable))
        delta_norms.append(norm)
        scale = 1.0 if norm <= 2.0 else 2.0 / norm              # --max-param-change=2
        for n in updatable:
            comps[n].add(scale, delta[n])
            delta[n].scale(0.0)
        for n in ("tdnn1.batchnorm", "tdnn2.batchnorm"):
            comps[n].scale(0.8)                                 # --batchnorm-stats-scale
    return tot_objf, tot_weight, delta_norms


# objective and frame weight from log.train.txt / log.train_b.txt
@pytest.mark.parametrize("egs,model,objf,weight", [
    ("merged.ark", "1.raw", -3.76715, 2003.0),
    ("shuffled_merged.ark", "1b.raw", -3.70998, 2003.5)])
def test_replay_kaldi_training(egs: str, model: str, objf: float, weight: float) -> None:
    from pynnet3.compile.model_io import read_nnet

    case = reference_dir("train/ngaffine_bn") / "train" / "ngaffine_bn"
    nnet = read_nnet(str(case / "0.raw"))
    start = read_nnet(str(case / "0.raw"))
    ref = read_nnet(str(case / model))
    tot_objf, tot_weight, norms = _replay_training(nnet, str(case / egs))
    print(f"objective {tot_objf / tot_weight:.6f} over {tot_weight} frames; "
          f"first minibatch delta norm {norms[0]:.5f}, last {norms[-1]:.5f}")
    assert tot_weight == weight
    assert tot_objf / tot_weight == pytest.approx(objf, abs=5e-6)
    for i, name in enumerate(nnet.component_names):
        ours, kaldi, init = nnet.get_component(i), ref.get_component(i), start.get_component(i)
        if ours.properties() & Prop.UPDATABLE:
            v, r, v0 = (c.vectorize().astype(np.float64) for c in (ours, kaldi, init))
            change = np.linalg.norm(r - v0)
            rel = np.linalg.norm(v - r) / change
            print(f"{name}: Kaldi's change {change:.5f}, ours {np.linalg.norm(v - v0):.5f}, "
                  f"difference / change {rel:.2e}")
            assert change > 0.5
            assert rel < 1e-4
        elif ours.type_name == "BatchNormComponent":
            assert ours.count == pytest.approx(kaldi.count, rel=1e-12)
            for a, b in ((ours.stats_sum, kaldi.stats_sum), (ours.stats_sumsq, kaldi.stats_sumsq)):
                assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-5


def test_nan_input_is_a_typed_error() -> None:
    from pynnet3.errors import NumericalError

    p = OnlineNaturalGradient(rank=3)
    x = np.random.RandomState(8).randn(10, 8).astype(np.float32)
    x[2, 3] = np.nan
    with pytest.raises(NumericalError):
        p.precondition_directions(x)
