"""Online natural-gradient preconditioning (Kaldi's natural-gradient-online.{h,cc}).

The preconditioner keeps a running estimate of the scatter of the rows it
is given (minibatches of derivatives or of inputs), as a rank-R
approximation plus a multiple of the identity,

    F_t = R_t^T D_t R_t + rho_t I,

and multiplies every new minibatch X_t (N x D, one vector per row) by the
inverse of F_t smoothed with ``alpha``/D tr(F_t) I, then rescales so that the
Frobenius norm is unchanged (the scale is returned instead of applied, as in
Kaldi, so that callers can fold it into the learning rate).  R_t is not
stored; ``W_t`` = E_t^{1/2} R_t is, with E_t the diagonal matrix of Kaldi's
(eqn:etdef).  The estimate is refreshed with a power-method step on every
minibatch for the first 10 calls and then every ``update_period`` calls.

Precision follows Kaldi: matrices and most scalars are float32 (BaseFloat);
the R x R matrix Z_t is assembled in float64 and scaled before its float32
eigendecomposition.  Matrix products go through NumPy's BLAS, whose
summation order differs from OpenBLAS's, so results match Kaldi to float32
round-off, not bit for bit.

Initialisation (the first call) is deterministic in this Kaldi version: the
basis starts from a fixed orthonormal pattern and is refined by three
iterations on the first minibatch.  Random numbers appear only when
re-orthogonalisation by Gram-Schmidt meets an exactly-zero row (drawn from
:func:`pynnet3.nnet.components.base.rng`, as Kaldi draws from its own RNG).

The state (``t``, ``W_t``, ``d_t``, ``rho_t``) is never written to model files,
so it restarts whenever a model is read, exactly as in Kaldi.
"""
from __future__ import annotations

import math

import numpy as np

from ... import log
from ...blas import add_mat_mat, trace_mat_mat_t
from ...errors import NumericalError
from ...io.kaldi_io import f32
from .base import fmt_g, rng

F32 = np.float32
F64 = np.float64

# Calls on which the estimate is always updated before update_period applies
# (must exceed the 3 iterations of initialisation).
NUM_INITIAL_UPDATES = 10
# Largest ratio of the eigenvalues of C_t before R_{t+1} is re-orthogonalised.
CONDITION_THRESHOLD = 1.0e+06
# O_t = R_t R_t^T may deviate this much from the identity before we act.
ORTHOGONALITY_THRESHOLD = 1.0e-03


def _trace_mat_mat_t(x: np.ndarray) -> float:
    """tr(X X^T) as a float (Kaldi's TraceMatMat(X, X, kTrans))."""
    return f32(trace_mat_mat_t(x))


def init_orthonormal_special(num_rows: int, num_cols: int) -> np.ndarray:
    """Kaldi's InitOrthonormalSpecial: orthonormal rows with no zero entries
    pattern-wise; row r has 1.1 in column r and 1 in columns r + k*num_rows,
    normalised.  The 1.1 breaks the symmetry (a weighted sum of all rows must
    not be the all-ones vector)."""
    if num_cols < num_rows:
        raise ValueError("init_orthonormal_special: need num_cols >= num_rows")
    first_elem = F32(1.1)
    # Column c belongs to row c % num_rows; row r has 1 + (num_cols - 1 - r)
    # // num_rows such columns.  (Whole-array float64 arithmetic rounds as
    # the scalar formula does, element by element.)
    rows = np.arange(num_rows)
    counts = (num_cols - 1 - rows) // num_rows + 1
    normalizers = (1.0 / np.sqrt(float(first_elem * first_elem) + (counts - 1))).astype(F32)
    cols = np.arange(num_cols)
    out = np.zeros((num_rows, num_cols), dtype=F32)
    out[cols % num_rows, cols] = normalizers[cols % num_rows]
    out[rows, rows] = normalizers * first_elem
    return out


def orthogonalize_rows(m: np.ndarray) -> None:
    """Kaldi's MatrixBase::OrthogonalizeRows (Gram-Schmidt, in place)."""
    num_rows = m.shape[0]
    if num_rows > m.shape[1]:
        raise ValueError("orthogonalize_rows: more rows than columns")
    for i in range(num_rows):
        counter = 0
        while True:
            start_prod = float(np.dot(m[i], m[i]))
            if not math.isfinite(start_prod) or start_prod == 0.0:
                log.warn(f"Self-product of row {i} of matrix is {start_prod}, randomizing.")
                m[i] = rng().standard_normal(m.shape[1]).astype(m.dtype)
                counter += 1
                continue
            for j in range(i):
                prod = np.dot(m[i], m[j])
                m[i] -= prod * m[j]
            end_prod = float(np.dot(m[i], m[i]))
            if end_prod <= 0.01 * start_prod:
                # Nearly all of the row was removed: its orthogonality is in
                # doubt because of round-off, so go round again.
                if end_prod == 0.0:
                    m[i] = rng().standard_normal(m.shape[1]).astype(m.dtype)
                counter += 1
                if counter > 100:
                    raise NumericalError("loop detected while orthogonalizing a matrix")
            else:
                m[i] *= m.dtype.type(1.0 / math.sqrt(end_prod))
                break


_LOWER_MASKS: dict[int, np.ndarray] = {}


def _lower_mask(n: int) -> np.ndarray:
    """The lower triangle (diagonal included) of an n x n matrix, as a mask."""
    mask = _LOWER_MASKS.get(n)
    if mask is None:
        mask = _LOWER_MASKS[n] = np.tri(n, dtype=bool)
    return mask


class OnlineNaturalGradient:
    """Kaldi's OnlineNaturalGradient: options (with Kaldi's defaults) and state.

    Options: ``rank``, ``update_period``, ``num_samples_history``,
    ``num_minibatches_history`` (0 = unset; overrides num_samples_history when
    set), ``alpha``, ``epsilon``, ``delta``, ``frozen`` and ``self_debug``.
    State: ``t`` (number of calls so far), ``W_t``, ``d_t``, ``rho_t``.
    Setters validate like Kaldi's asserts and raise ``ValueError``.

    Keyword arguments of the constructor set options (``rank=20,
    update_period=4`` ...) through the validating setters.
    """

    def __init__(self, rank: int | None = None, update_period: int | None = None,
                 num_samples_history: float | None = None, alpha: float | None = None,
                 num_minibatches_history: float | None = None) -> None:
        self.rank = 40
        self.update_period = 1
        self.num_samples_history = 2000.0
        self.num_minibatches_history = 0.0
        self.alpha = 4.0
        self.epsilon = 1.0e-10
        self.delta = 5.0e-04
        self.frozen = False
        self.self_debug = False
        self.t = 0
        self.W_t: np.ndarray | None = None
        self.rho_t = -1.0e+10
        self.d_t: np.ndarray | None = None
        self.configure(rank, update_period, num_samples_history, alpha)
        if num_minibatches_history is not None:
            self.set_num_minibatches_history(num_minibatches_history)

    # -- options (Kaldi's Set*/Get*) ----------------------------------------
    def set_rank(self, rank: int) -> None:
        if rank <= 0:
            raise ValueError(f"natural-gradient rank must be > 0, got {rank}")
        self.rank = int(rank)

    def set_update_period(self, update_period: int) -> None:
        if update_period <= 0:
            raise ValueError(f"natural-gradient update-period must be > 0, got {update_period}")
        self.update_period = int(update_period)

    def set_num_samples_history(self, num_samples_history: float) -> None:
        if not (0.0 < num_samples_history < 1.0e+6):
            raise ValueError("natural-gradient num-samples-history must be in (0, 1e6), "
                             f"got {num_samples_history}")
        self.num_samples_history = f32(num_samples_history)

    def set_num_minibatches_history(self, num_minibatches_history: float) -> None:
        if not num_minibatches_history > 1.0:
            raise ValueError("natural-gradient num-minibatches-history must be > 1, "
                             f"got {num_minibatches_history}")
        self.num_minibatches_history = f32(num_minibatches_history)

    def set_alpha(self, alpha: float) -> None:
        if not alpha >= 0.0:
            raise ValueError(f"natural-gradient alpha must be >= 0, got {alpha}")
        self.alpha = f32(alpha)

    def freeze(self, frozen: bool) -> None:
        """Stop (or resume) updating the Fisher estimate; the first call still
        initialises it."""
        self.frozen = bool(frozen)

    def turn_on_debug(self) -> None:
        self.self_debug = True

    def configure(self, rank: int | None = None, update_period: int | None = None,
                  num_samples_history: float | None = None,
                  alpha: float | None = None) -> None:
        """Set several options at once (None leaves an option unchanged)."""
        if rank is not None:
            self.set_rank(rank)
        if update_period is not None:
            self.set_update_period(update_period)
        if num_samples_history is not None:
            self.set_num_samples_history(num_samples_history)
        if alpha is not None:
            self.set_alpha(alpha)

    def copy(self) -> "OnlineNaturalGradient":
        """Kaldi's copy constructor: options and state (arrays copied)."""
        other = OnlineNaturalGradient()
        other.__dict__.update(self.__dict__)
        other.W_t = None if self.W_t is None else self.W_t.copy()
        other.d_t = None if self.d_t is None else self.d_t.copy()
        return other

    def swap(self, other: "OnlineNaturalGradient") -> None:
        self.__dict__, other.__dict__ = other.__dict__, self.__dict__

    def options_str(self) -> str:
        return (f"rank={self.rank}, update-period={self.update_period}, "
                f"num-samples-history={fmt_g(self.num_samples_history)}, "
                f"alpha={fmt_g(self.alpha)}")

    def __repr__(self) -> str:
        return f"OnlineNaturalGradient({self.options_str()}, t={self.t})"

    # -- small helpers ----------------------------------------------------------
    def updating(self) -> bool:
        """Whether this call refreshes the Fisher estimate (Kaldi's Updating)."""
        return (not self.frozen
                and (self.t <= NUM_INITIAL_UPDATES
                     or (self.t - NUM_INITIAL_UPDATES) % self.update_period == 0))

    def eta(self, num_rows: int) -> float:
        """Forgetting factor of the estimate for a minibatch of N rows."""
        if self.num_minibatches_history > 0.0:
            return f32(1.0 / self.num_minibatches_history)
        ans = f32(1.0 - math.exp(f32(-num_rows / self.num_samples_history)))
        # Too close to 1 invites NaNs when the input is all zero.
        return min(ans, f32(0.9))

    def _beta(self, rho: float, d: np.ndarray, dim: int) -> float:
        # beta_t = rho_t (1 + alpha) + alpha/D tr(D_t)  (Kaldi's eqn:betat2)
        return f32(rho * (1.0 + self.alpha) + f32(self.alpha * float(d.sum(dtype=F32)) / dim))

    @staticmethod
    def compute_et(d: np.ndarray, beta: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(e, sqrt(e), 1/sqrt(e)) with e_ii = 1 / (beta / d_ii + 1), in float."""
        # (float32 arrays and scalars throughout: every result is float32)
        e = F32(1.0) / (F32(beta) / d.astype(F32, copy=False) + F32(1.0))
        sqrt_e = np.sqrt(e)
        return e, sqrt_e, F32(1.0) / sqrt_e

    # -- initialisation ------------------------------------------------------
    def init_default(self, dim: int) -> None:
        """Small default values before the first minibatch (Kaldi's InitDefault)."""
        if self.rank >= dim:
            log.warn(f"Rank {self.rank} of online preconditioner is >= dim {dim}, setting it "
                     f"to {dim - 1} (but this is probably still too high)")
            self.rank = dim - 1
        if self.rank == 0:
            return          # a 1-dim space: the preconditioner is the identity
        if not (0.0 < self.num_samples_history <= 1.0e+06):
            raise ValueError("natural-gradient: bad num-samples-history")
        if not ((self.num_minibatches_history == 0.0 or self.num_minibatches_history > 1.0)
                and self.num_minibatches_history < 1.0e+06):
            raise ValueError("natural-gradient: bad num-minibatches-history")
        if not (self.alpha >= 0.0 and 0.0 < self.epsilon <= 1.0e-05
                and 0.0 < self.delta <= 1.0e-02):
            raise ValueError("natural-gradient: bad alpha, epsilon or delta")
        # R_0 a fixed orthonormal matrix, D_0 = rho_0 = epsilon, so that every
        # e_ii = 1 / (2 + alpha (D + R) / D); W_0 = E_0^{1/2} R_0.
        eps = f32(self.epsilon)
        self.rho_t = eps
        self.d_t = np.full(self.rank, eps, dtype=F32)
        e_tii = f32(1.0 / (2.0 + (dim + self.rank) * self.alpha / dim))
        self.W_t = (init_orthonormal_special(self.rank, dim) * F32(math.sqrt(e_tii))).astype(F32)
        self.t = 0

    def init(self, x0: np.ndarray) -> None:
        """Estimate the initial subspace from the first minibatch: a few
        power-method iterations from the default start (faster than an
        eigendecomposition).  Works on a copy so that the options (``frozen``)
        of this object are untouched."""
        dim = x0.shape[1]
        this_copy = self.copy()
        this_copy.init_default(dim)
        this_copy.t = 1          # so that precondition_directions won't recurse
        # With no more rows than the rank, one iteration already gives the row
        # space of X0 (up to epsilon effects).
        num_init_iters = 1 if x0.shape[0] <= this_copy.rank else 3
        this_copy.frozen = False
        # Kaldi preconditions a fresh copy of X0 on each iteration and keeps
        # only the refreshed estimate (W_t, d_t, rho_t): the preconditioned
        # copy and its scale are thrown away.  So only the estimate is
        # refreshed here, from X0 itself (never written): no copy, no
        # X - H_t W_t product (a fifth of an iteration's flops), no final
        # trace; the estimate is bit for bit what the full calls give.
        x0 = np.ascontiguousarray(x0, dtype=F32)
        tr_x_xt = _trace_mat_mat_t(x0)
        for _ in range(num_init_iters):
            # (t <= NUM_INITIAL_UPDATES and not frozen: always updating)
            this_copy._precondition_directions_internal(
                this_copy.rho_t, tr_x_xt, True, this_copy.d_t, x0, apply=False)
            this_copy.t += 1
        self.rank = this_copy.rank
        self.W_t = this_copy.W_t
        self.d_t = this_copy.d_t
        self.rho_t = this_copy.rho_t

    # -- the main entry point ----------------------------------------------
    def precondition_directions(self, X: np.ndarray) -> float:
        """Precondition the rows of ``X`` (float32, N x D) in place.

        Returns the scale that the caller should apply to the result so that
        its Frobenius norm equals that of the input (Kaldi's ``*scale``).
        """
        if X.dtype != F32 or X.ndim != 2:
            raise TypeError("precondition_directions needs a 2-d float32 array")
        if X.shape[1] == 1:
            # One dimension: preconditioning with rescaling is the identity.
            return 1.0
        if self.t == 0:
            self.init(X)
        rho_t = self.rho_t
        d_t = self.d_t        # (read only below: the update makes a new d_t)
        updating = self.updating()
        initial_product = _trace_mat_mat_t(X)
        self._precondition_directions_internal(rho_t, initial_product, updating, d_t, X)
        if initial_product <= 0.0:
            scale = 1.0
        else:
            final_product = _trace_mat_mat_t(X)
            scale = f32(math.sqrt(initial_product / final_product))
        self.t += 1
        return scale

    def _precondition_directions_internal(self, rho_t: float, tr_x_xt: float, updating: bool,
                                          d_t: np.ndarray, X: np.ndarray,
                                          apply: bool = True) -> None:
        """Precondition X in place and, when ``updating``, refresh the
        estimate; ``apply=False`` (initialisation) refreshes the estimate only
        and leaves X as it is."""
        N, D = X.shape
        R = self.rank
        if not 0 < R < D:
            raise ValueError(f"natural-gradient: rank {R} must be in (0, {D})")
        eta = self.eta(N)
        W_t = self.W_t
        H_t = X @ W_t.T                                          # N x R
        if not updating:
            # Apply the current estimate only: X_hat = X - H_t W_t.
            add_mat_mat(-1.0, H_t, W_t, 1.0, X)
            return
        J_t = H_t.T @ X                                          # R x D
        if N > D:
            L_t = W_t @ J_t.T                                    # = H_t^T H_t
        else:
            L_t = H_t.T @ H_t
        K_t = J_t @ J_t.T
        beta_t = self._beta(rho_t, d_t, D)
        _, _, inv_sqrt_e_t = self.compute_et(d_t, beta_t)

        # Z_t is proportional to the 4th power of the data: assemble it in
        # double and scale it to unit-ish trace before the float eigensolver.
        Z_t = self.compute_zt(N, rho_t, d_t, inv_sqrt_e_t, K_t, L_t)
        z_t_scale = f32(max(1.0, float(np.trace(Z_t))))
        Z_scaled = (Z_t * (1.0 / z_t_scale)).astype(F32)
        try:
            c_t, U_t = np.linalg.eigh(Z_scaled.astype(F64))
        except np.linalg.LinAlgError as e:     # NaN / inf in the data
            raise NumericalError(f"natural-gradient: eigendecomposition of Z_t failed ({e}); "
                                 "the derivatives probably contain NaN or inf") from None
        # Kaldi's SortSvd: decreasing absolute value.
        order = np.argsort(-np.abs(c_t), kind="stable")
        c_t = c_t[order].astype(F32)
        U_t = U_t[:, order].astype(F32)
        c_t = (c_t * F32(z_t_scale)).astype(F32)

        # A negative last eigenvalue also triggers this, which is right.
        must_reorthogonalize = bool(c_t[0] > CONDITION_THRESHOLD * c_t[R - 1])
        c_t_floor = F32((rho_t * (1.0 - eta)) ** 2)
        num_floored = int(np.count_nonzero(c_t < c_t_floor))
        if num_floored > 0:
            c_t = np.maximum(c_t, c_t_floor)
            must_reorthogonalize = True
            if self.self_debug:
                log.warn(f"Floored {num_floored} elements of C_t.")

        if apply:
            add_mat_mat(-1.0, H_t, W_t, 1.0, X)                  # X_hat = X - H_t W_t

        sqrt_c_t = np.sqrt(c_t).astype(F32)
        # rho_{t+1} keeps tr(F_{t+1}) = tr(T_t)  (Kaldi's eqn:rhot1).
        rho_t1 = f32(1.0 / (D - R) * (eta / N * tr_x_xt
                                      + (1.0 - eta) * (D * rho_t + float(d_t.sum(dtype=F32)))
                                      - float(sqrt_c_t.sum(dtype=F32))))
        d_t1 = (sqrt_c_t - F32(rho_t1)).astype(F32)       # D_{t+1} = C_t^{1/2} - rho_{t+1} I
        floor_val = max(f32(self.epsilon), f32(self.delta * float(sqrt_c_t.max())))
        if rho_t1 < floor_val:
            rho_t1 = floor_val
        d_t1 = np.maximum(d_t1, F32(floor_val))

        W_t1 = self.compute_wt1(N, d_t, d_t1, rho_t, rho_t1, U_t, sqrt_c_t, inv_sqrt_e_t,
                                W_t, J_t)
        if must_reorthogonalize:
            if self.self_debug:
                log.warn("Reorthogonalizing.")
            self.reorthogonalize_rt1(d_t1, rho_t1, W_t1)
        self.W_t = W_t1
        self.d_t = d_t1
        self.rho_t = rho_t1
        if self.self_debug:
            self.self_test()

    def compute_zt(self, N: int, rho_t: float, d_t: np.ndarray, inv_sqrt_e_t: np.ndarray,
                   K_t: np.ndarray, L_t: np.ndarray) -> np.ndarray:
        """Z_t = Y_t Y_t^T (Kaldi's eqn:Zt), in double (full symmetric matrix)."""
        eta = self.eta(N)
        d_t_rho_t = (d_t + F32(rho_t)).astype(F64)               # diag(D_t + rho_t I)
        eta_n = eta / N
        eta1 = 1.0 - eta
        inv = inv_sqrt_e_t.astype(F64)
        L_sym = 0.5 * (L_t.astype(F64) + L_t.astype(F64).T)
        K_sym = 0.5 * (K_t.astype(F64) + K_t.astype(F64).T)
        outer = np.outer(inv, inv)
        Z = (eta_n * eta_n) * outer * K_sym
        Z += (eta_n * eta1) * outer * L_sym * d_t_rho_t[None, :]
        Z += (eta_n * eta1) * d_t_rho_t[:, None] * outer * L_sym
        Z.flat[::Z.shape[0] + 1] += eta1 * eta1 * d_t_rho_t * d_t_rho_t
        # Kaldi fills the lower triangle of a symmetric (packed) matrix; the
        # two middle terms are each other's transposes, so symmetrise by
        # mirroring the lower triangle.
        return np.where(_lower_mask(Z.shape[0]), Z, Z.T)

    def compute_wt1(self, N: int, d_t: np.ndarray, d_t1: np.ndarray, rho_t: float,
                    rho_t1: float, U_t: np.ndarray, sqrt_c_t: np.ndarray,
                    inv_sqrt_e_t: np.ndarray, W_t: np.ndarray, J_t: np.ndarray) -> np.ndarray:
        """W_{t+1} = A_t B_t with
        A_t = (eta/N) E_{t+1}^{1/2} C_t^{-1/2} U_t^T E_t^{-1/2} and
        B_t = J_t + (1-eta)/(eta/N) (D_t + rho_t I) W_t."""
        D = W_t.shape[1]
        eta = self.eta(N)
        beta_t1 = self._beta(rho_t1, d_t1, D)
        if not beta_t1 > 0.0:
            raise NumericalError("natural-gradient: beta_{t+1} <= 0")
        _, sqrt_e_t1, _ = self.compute_et(d_t1, beta_t1)
        # (float32 operands: the products and sums below are float32)
        inv_sqrt_c_t = F32(1.0) / sqrt_c_t
        w_t_coeff = ((1.0 - eta) / (eta / N) * (d_t.astype(F64) + rho_t)).astype(F32)
        B_t = J_t + w_t_coeff[:, None] * W_t
        i_factor = F32(eta / N) * sqrt_e_t1 * inv_sqrt_c_t
        A_t = U_t.T * (i_factor[:, None] * inv_sqrt_e_t[None, :])
        return A_t @ B_t

    def reorthogonalize_rt1(self, d_t1: np.ndarray, rho_t1: float, W_t1: np.ndarray) -> None:
        """Make R_{t+1} = E_{t+1}^{-1/2} W_{t+1} orthonormal again (in place):
        W <- (E^{1/2} C^{-1} E^{-1/2}) W where C C^T = R R^T (Cholesky), or
        Gram-Schmidt on the CPU if the Cholesky factor is ill-conditioned."""
        R, D = W_t1.shape
        beta_t1 = self._beta(rho_t1, d_t1, D)
        _, sqrt_e_t1, inv_sqrt_e_t1 = self.compute_et(d_t1, beta_t1)
        O = (W_t1 @ W_t1.T).astype(F32)
        O = (O * inv_sqrt_e_t1[:, None] * inv_sqrt_e_t1[None, :]).astype(F32)
        if float(np.max(np.abs(np.tril(O) - np.eye(R, dtype=F32)))) <= ORTHOGONALITY_THRESHOLD:
            if self.self_debug:
                log.warn("Not reorthogonalizing since already orthogonal")
            return
        cholesky_ok = True
        C_inv = None
        try:
            C = np.linalg.cholesky(np.tril(O).astype(F64) + np.tril(O, -1).astype(F64).T)
            C_inv = np.linalg.inv(C).astype(F32)
            C_inv = np.tril(C_inv)
            if not float(C_inv.max()) < 100.0:
                log.warn("Cholesky out of expected range, reorthogonalizing with Gram-Schmidt")
                cholesky_ok = False
        except np.linalg.LinAlgError:
            log.warn("Cholesky or Invert() failed while re-orthogonalizing R_t. "
                     "Re-orthogonalizing on CPU.")
            cholesky_ok = False
        if not cholesky_ok:
            orthogonalize_rows(W_t1)          # now W_t1 holds R_{t+1}
            W_t1 *= sqrt_e_t1[:, None]
            return
        # E^{1/2} C^{-1} E^{-1/2}: the diagonal factors cancel on the diagonal.
        factor = (sqrt_e_t1[:, None] * inv_sqrt_e_t1[None, :]).astype(F32)
        np.fill_diagonal(factor, F32(1.0))
        C_inv = (C_inv * factor).astype(F32)
        W_t1[...] = C_inv @ W_t1

    def self_test(self) -> None:
        """Check the invariants of the state (Kaldi's SelfTest, debug only)."""
        if not self.rho_t >= self.epsilon:
            raise NumericalError("natural-gradient self-test: rho_t < epsilon")
        d_max, d_min = float(self.d_t.max()), float(self.d_t.min())
        if not (d_min >= self.epsilon and d_min > 0.9 * self.delta * d_max
                and self.rho_t > 0.9 * self.delta * d_max):
            raise NumericalError("natural-gradient self-test: d_t / rho_t out of range")
        R, D = self.W_t.shape
        beta_t = self._beta(self.rho_t, self.d_t, D)
        _, _, inv_sqrt_e_t = self.compute_et(self.d_t, beta_t)
        O = (self.W_t.astype(F64) @ self.W_t.T.astype(F64)) * np.outer(inv_sqrt_e_t,
                                                                     inv_sqrt_e_t)
        err = np.abs(O - np.eye(R))
        worst = float(err.max()) if not np.isnan(err).any() else float("nan")
        if not worst <= 1.0e-02:
            i, j = np.unravel_index(int(np.nanargmax(err)), err.shape)
            log.warn(f"Failed to verify W_t (worst error: O[{i},{j}] = {O[i, j]}, "
                     f"d_t = {self.d_t})")


# ---------------------------------------------------------------------------
# The pattern shared by the natural-gradient updates of the affine family
# (NaturalGradientAffine, Linear, Tdnn, TimeHeightConvolution): precondition
# the inputs and the output derivatives separately and fold both scales into
# the learning rate.


def precondition_in_out(pre_in: OnlineNaturalGradient, pre_out: OnlineNaturalGradient,
                        in_value: np.ndarray, out_deriv: np.ndarray, learning_rate: float,
                        append_ones: bool) -> tuple[np.float32, np.ndarray, np.ndarray]:
    """Precondition copies of ``in_value`` and ``out_deriv``.

    With ``append_ones`` the input copy gets a last column of ones, standing
    for the bias (whose preconditioned value is then that column).  Returns
    (learning_rate * in_scale * out_scale, input copy, derivative copy).
    """
    rows, cols = in_value.shape
    in_temp = np.empty((rows, cols + (1 if append_ones else 0)), dtype=F32)
    in_temp[:, :cols] = in_value
    if append_ones:
        in_temp[:, cols] = 1.0
    out_temp = np.array(out_deriv, dtype=F32, order="C", copy=True)
    in_scale = pre_in.precondition_directions(in_temp)
    out_scale = pre_out.precondition_directions(out_temp)
    local_lrate = F32(F32(in_scale * out_scale) * F32(learning_rate))
    return local_lrate, in_temp, out_temp


def cached_preconditioner(owner: object, attr: str, **options: float) -> OnlineNaturalGradient:
    """The preconditioner ``owner.<attr>`` configured with ``options``, made on
    first use (for components that store only the options as attributes).
    It is re-made (its state forgotten, as when Kaldi reads a model) when the
    options differ from those it was made with."""
    key = tuple(sorted(options.items()))
    pre = owner.__dict__.get(attr)
    if pre is None or owner.__dict__.get(attr + "_options") != key:
        pre = OnlineNaturalGradient(**options)
        setattr(owner, attr, pre)
        setattr(owner, attr + "_options", key)
    return pre
