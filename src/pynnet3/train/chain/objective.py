"""The chain (LF-MMI) objective and its derivative (Kaldi's
chain::ComputeChainObjfAndDeriv, chain/chain-training.{h,cc}).

For a minibatch with supervision weight w::

    objf   = w * log p_num(output) - w * log p_den(output)
    deriv  = w * (numerator posteriors - denominator posteriors)
    l2     = -0.5 * w * l2_regularize * ||output||^2   (and its derivative)

plus, on about every other minibatch (a ``RandInt(0, 1)`` draw, as Kaldi),
twice ``out_of_range_regularize`` times the part of the output beyond
[-30, 30] pulled back into the derivative.  The numerator posteriors are the
cross-entropy "derivative" Kaldi hands to the ``output-xent`` output
(scaled by ``xent_regularize`` there).  If the objective is not finite or the
denominator's checks fail, the derivatives are zeroed and the objective is
set to -10 per frame, with Kaldi's warning.

All totals are float32 as Kaldi returns them (BaseFloat).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ... import log
from ...errors import PynnetError
from ...nnet.components.base import fmt_g
from .den_graph import DenominatorGraph
from .denominator import DenominatorComputation
from .numerator import NumeratorComputation
from .supervision import Supervision

F32 = np.float32

__all__ = ["ChainTrainingOptions", "ChainObjective", "compute_chain_objf_and_deriv",
           "penalize_out_of_range", "sum_of_products"]


@dataclass
class ChainTrainingOptions:
    """Kaldi's chain::ChainTrainingOptions (same flags and defaults)."""

    l2_regularize: float = field(default=0.0, metadata={
        "flag": "l2-regularize", "help": "l2 regularization constant for 'chain' training, "
        "applied to the output of the neural net."})
    lwf_scale: float = field(default=0.0, metadata={
        "flag": "lwf-scale", "help": "Scale for the Learning Without Forgetting (LWF) term. "
        "See https://arxiv.org/abs/2110.07055.Currently only works with unconstrained egs."})
    lwf_den_scale: float = field(default=0.0, metadata={
        "flag": "lwf-den-scale", "help": "Scale for the DenLWF term.See --lwf-scale and the "
        "paper. DenLWF is a variant of LWF."})
    out_of_range_regularize: float = field(default=0.01, metadata={
        "flag": "out-of-range-regularize", "help": "Constant that controls how much we "
        "penalize the nnet output being outside the range [-30,30].  This is needed because "
        "we limit it to that range in the denominator computation (which is to avoid NaNs "
        "because it is not done in log space."})
    leaky_hmm_coefficient: float = field(default=1.0e-05, metadata={
        "flag": "leaky-hmm-coefficient", "help": "Coefficient that allows transitions from "
        "each HMM state to each other HMM state, to ensure gradual forgetting of context "
        "(can improve generalization).  For numerical reasons, may not be exactly zero."})
    xent_regularize: float = field(default=0.0, metadata={
        "flag": "xent-regularize", "help": "Cross-entropy regularization constant for "
        "'chain' training.  If nonzero, the network is expected to have an output named "
        "'output-xent', which should have a softmax as its final nonlinearity."})
    numerator_graph_threads: int = field(default=4, metadata={
        "flag": "numerator-graph-threads", "help": "Number of threads to use to parallelize "
        "the chain numerator graph computation. If 0, use available hardware concurrency."})

    def check(self) -> None:
        if not 0.0 < self.leaky_hmm_coefficient < 1.0:
            raise PynnetError(f"--leaky-hmm-coefficient must be in (0, 1), got "
                              f"{self.leaky_hmm_coefficient}")
        if self.lwf_scale != 0.0 or self.lwf_den_scale != 0.0:
            raise PynnetError("--lwf-scale and --lwf-den-scale are not supported by pynnet3")


@dataclass
class ChainObjective:
    objf: float            # float32 value: num - den (or -10 * weight on failure)
    l2_term: float
    weight: float
    deriv: np.ndarray | None        # d objf / d output (float32), if asked for
    xent_deriv: np.ndarray | None   # numerator posteriors (times the weight), if asked for
    ok: bool = True


def sum_of_products(a: np.ndarray, b: np.ndarray) -> float:
    """tr(a b^T) (Kaldi's TraceMatMat(a, b, kTrans)) of two float32 matrices,
    summed in double.  einsum rather than ``np.vdot`` of float64 copies: the
    same float value, no copies, and no BLAS ddot, which OpenBLAS splits
    across its threads above 10,000 elements (with OPENBLAS_NUM_THREADS=2 on
    a busy machine one such call took 5 ms instead of 8 us)."""
    return float(np.einsum("ij,ij->", a, b, dtype=np.float64))


def penalize_out_of_range(output: np.ndarray, limit: float, scale: float,
                          deriv: np.ndarray) -> None:
    """Kaldi's PenalizeOutOfRange: pull the derivative of values beyond
    [-limit, limit] back towards the range with slope ``scale``."""
    if scale == 0.0:
        return
    s, lim = F32(scale), F32(limit)
    low = output < -lim
    high = output > lim
    deriv[low] -= s * (output[low] + lim)
    deriv[high] -= s * (output[high] - lim)


def compute_chain_objf_and_deriv(opts: ChainTrainingOptions, den_graph: DenominatorGraph,
                                 supervision: Supervision, nnet_output: np.ndarray,
                                 want_deriv: bool, want_xent: bool,
                                 rand_int: Callable[[int, int], int] | None = None,
                                 use_cuda: bool = False) -> ChainObjective:
    """Kaldi's ComputeChainObjfAndDeriv.  ``rand_int`` is Kaldi's RandInt
    stream (the trainer's glibc stream): the denominator draws ``(0, 99)`` for
    its range check and, with a derivative, ``(0, 1)`` decides the
    out-of-range penalty; without it the check is skipped and the penalty
    applied every time.  ``use_cuda``: the denominator runs on the GPU
    (:mod:`.kernels_cuda`); the numerator always on the CPU, as in Kaldi."""
    if supervision.e2e:
        raise PynnetError("end-to-end (e2e) chain supervision is not supported yet")
    nnet_output = np.ascontiguousarray(nnet_output, dtype=F32)
    rows, cols = nnet_output.shape
    if cols != den_graph.num_pdfs:
        raise PynnetError(f"the network output has {cols} columns but den.fst has "
                          f"{den_graph.num_pdfs} pdfs")
    w = F32(supervision.weight)
    deriv = np.zeros_like(nnet_output) if want_deriv else None
    den = DenominatorComputation(opts.leaky_hmm_coefficient, den_graph,
                                 supervision.num_sequences, nnet_output, rand_int, use_cuda)
    den_logprob_weighted = F32(w * F32(den.forward(deriv is not None)))
    ok = True
    if deriv is not None:
        ok = den.backward(-float(w), deriv)
        if rand_int is None or rand_int(0, 1) == 0:
            penalize_out_of_range(nnet_output, 30.0, 2.0 * opts.out_of_range_regularize, deriv)
    del den
    xent_deriv = np.zeros_like(nnet_output) if want_xent else None
    num = NumeratorComputation(supervision, nnet_output)
    num_logprob_weighted = F32(num.forward())
    if xent_deriv is not None:
        num.backward(xent_deriv)
        if deriv is not None:
            deriv += xent_deriv
    elif deriv is not None:
        num.backward(deriv)
    objf = F32(num_logprob_weighted - den_logprob_weighted)
    weight = F32(w * F32(supervision.num_sequences * supervision.frames_per_sequence))
    if not np.isfinite(objf) or not ok:
        if deriv is not None:
            deriv[:] = 0.0
        if xent_deriv is not None:
            xent_deriv[:] = 0.0
        default_objf = -10
        log.warn(f"Objective function is {fmt_g(objf)} and denominator computation (if done) "
                 f"returned {'true' if ok else 'false'}, setting objective function to "
                 f"{default_objf} per frame.")
        objf = F32(default_objf * weight)
    l2_term = F32(0.0)
    if opts.l2_regularize != 0.0:
        scale = F32(w * F32(opts.l2_regularize))
        trace = F32(sum_of_products(nnet_output, nnet_output))
        l2_term = F32(F32(-0.5) * scale * trace)
        if deriv is not None:
            deriv -= scale * nnet_output
    return ChainObjective(float(objf), float(l2_term), float(weight), deriv, xent_deriv, ok)
