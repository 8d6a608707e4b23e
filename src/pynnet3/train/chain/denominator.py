"""The denominator forward-backward of chain training (Kaldi's
chain::DenominatorComputation, chain/chain-denominator.{h,cc}).

The network output of a minibatch (rows ``t * S + s``, t-major) is clamped
to [-30, 30] and exponentiated (the computation is not in log space); the
forward pass runs the leaky HMM of :class:`~.den_graph.DenominatorGraph`
(each frame, a fraction ``leaky_hmm_coefficient`` of the total alpha mass
re-enters every state in proportion to the initial probabilities), rescaling
each frame's alphas by the inverse of the previous frame's alpha sum (the
"arbitrary scale", corrected for in the total log-likelihood).  The backward
pass gives the occupation probabilities per pdf, the derivative of the log
likelihood w.r.t. the network output.  The kernels are in :mod:`.kernels`.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ... import log
from ...nnet.components.base import fmt_g
from .den_graph import DenominatorGraph
from . import kernels

F32 = np.float32

__all__ = ["DenominatorComputation"]


def _approx_equal(a: float, b: float, tol: float = 0.001) -> bool:
    # Kaldi's ApproxEqual (relative, on float values)
    if a == b:
        return True
    return abs(a - b) <= tol * max(abs(a), abs(b))


class DenominatorComputation:
    """One minibatch's denominator computation: :meth:`forward` gives the
    total log-likelihood, then :meth:`backward` adds ``deriv_weight`` times
    the occupation probabilities into a derivative matrix."""

    def __init__(self, leaky_hmm_coefficient: float, den_graph: DenominatorGraph,
                 num_sequences: int, nnet_output: np.ndarray,
                 rand_int: Callable[[int, int], int] | None = None,
                 use_cuda: bool = False) -> None:
        if not 0.0 < leaky_hmm_coefficient < 1.0:
            raise ValueError("--leaky-hmm-coefficient must be in (0, 1)")
        nnet_output = np.asarray(nnet_output, dtype=F32)
        rows, num_pdfs = nnet_output.shape
        if rows % num_sequences != 0:
            raise ValueError(f"the network output has {rows} rows, not a multiple of "
                             f"{num_sequences} sequences")
        self.graph = den_graph
        self.leaky = F32(leaky_hmm_coefficient)
        self.num_sequences = num_sequences
        self.frames_per_sequence = rows // num_sequences
        self.ok = True
        if rand_int is not None and rand_int(0, 99) == 0:
            max_val, min_val = float(nnet_output.max()), float(nnet_output.min())
            if max_val > 30.0 or min_val < -30.0:
                log.warn(f"Nnet outputs {fmt_g(min_val)}, {fmt_g(max_val)} outside the "
                            "range [-30,30], derivs may be inaccurate.")
        self.probs = np.exp(np.clip(nnet_output, F32(-30.0), F32(30.0))).T.copy()
        h, s, t = den_graph.num_states, num_sequences, self.frames_per_sequence
        # (on the GPU the alphas live on the device)
        self.alpha = np.empty((0 if use_cuda else t + 1, (h + 1) * s), F32)
        self.tot_prob: np.ndarray | None = None
        # On the GPU (kernels_cuda) forward and backward run together when
        # the derivative is wanted; backward() then only adds the result.
        self.use_cuda = use_cuda
        self._cuda_result: tuple | None = None

    def forward(self, will_backward: bool = True) -> float:
        g = self.graph
        s, t = self.num_sequences, self.frames_per_sequence
        if self.use_cuda:
            from .kernels_cuda import den_forward_backward_cuda
            self._cuda_result = den_forward_backward_cuda(self.probs, g, self.leaky, s, t,
                                                          will_backward)
            self.tot_prob, sums = self._cuda_result[:2]
            inv_scales = sums[:t]
        else:
            self.tot_prob = kernels.den_forward(self.probs, g.bwd_begin, g.bwd_prob,
                                                g.bwd_pdf, g.bwd_state, g.initial_probs,
                                                self.leaky, s, t, self.alpha)
            inv_scales = self.alpha[:t, g.num_states * s:]
        tot_log_prob = np.log(self.tot_prob).astype(np.float64).sum()
        log_scales = np.log(inv_scales).astype(np.float64).sum()
        return float(F32(F32(tot_log_prob) + F32(log_scales)))

    def backward(self, deriv_weight: float, nnet_output_deriv: np.ndarray) -> bool:
        """Adds ``deriv_weight`` times d(log-like)/d(output) into
        ``nnet_output_deriv``; False if the checks failed (Kaldi then
        abandons the minibatch)."""
        g = self.graph
        s, t = self.num_sequences, self.frames_per_sequence
        if self.use_cuda:
            if self._cuda_result is None or self._cuda_result[2] is None:
                raise ValueError("forward(will_backward=True) must come before backward()")
            deriv_t, ab, dsum = self._cuda_result[2:]
        else:
            deriv_t = np.zeros_like(self.probs)
            beta = np.empty((2, (g.num_states + 1) * s), F32)
            ab, dsum = kernels.den_backward(self.probs, g.fwd_begin, g.fwd_prob, g.fwd_pdf,
                                            g.fwd_state, g.initial_probs, self.leaky, s, t,
                                            self.alpha, self.tot_prob, deriv_t, beta)
        self._check_frame0(float(F32(ab)), float(F32(dsum)))
        nnet_output_deriv += F32(deriv_weight) * deriv_t.T
        return self.ok

    def _check_frame0(self, alpha_beta_product: float, deriv_sum: float) -> None:
        s = self.num_sequences
        if not _approx_equal(alpha_beta_product, s):
            log.warn(f"On time 0, alpha-beta product {fmt_g(alpha_beta_product)} != {s}")
            if abs(alpha_beta_product - s) > 2.0:
                log.warn("Excessive error detected, will abandon this minibatch")
                self.ok = False
        if not _approx_equal(deriv_sum, s, 0.01):
            log.warn(f"On time 0, log-prob-deriv sum {fmt_g(deriv_sum)} != {s}")
            if abs(deriv_sum - s) > 2.0:
                log.warn("Excessive error detected, will abandon this minibatch")
                self.ok = False
