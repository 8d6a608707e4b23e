"""The numerator forward-backward of chain training (Kaldi's
chain::NumeratorComputation, chain/chain-numerator.{h,cc}).

The supervision FST of a merged minibatch is one acceptor over pdf-id + 1
for all its sequences one after another (time runs from 0 to
``num_sequences * frames_per_sequence``), epsilon-free and with its states in
time order.  Its frame ``t`` is row ``(t % F) * S + t // F`` of the network
output (F frames per sequence, S sequences).  The forward-backward is in log
space, in double precision, with the network outputs as log-likelihoods.
"""
from __future__ import annotations

import numpy as np

from ... import log
from ...errors import PynnetError
from ...nnet.components.base import fmt_g
from ..chain.supervision import Supervision
from . import kernels
from .fst import Fst

F32 = np.float32

__all__ = ["NumeratorComputation", "fst_state_times"]


def fst_state_times(fst: Fst) -> tuple[np.ndarray, int]:
    """Kaldi's ComputeFstStateTimes: the time (number of arcs from the start)
    of every state of an epsilon-free, topologically sorted FST whose paths
    all have the same length; and that length."""
    n = fst.num_states
    if n == 0 or fst.start != 0:
        raise PynnetError("the supervision FST must be non-empty with start state 0")
    src = fst.arc_state()
    if np.any(fst.nextstate <= src):
        raise PynnetError("the supervision FST is not topologically sorted (or has "
                          "self-loops)")
    if np.any(fst.ilabel == 0):
        raise PynnetError("the supervision FST has epsilon arcs")
    times = np.empty(n, np.int32)
    code = kernels.state_times(fst.arc_begin, fst.nextstate, times)
    if code == 1:
        raise PynnetError("the supervision FST has paths of different lengths")
    if code == 2:
        raise PynnetError("the supervision FST has unreachable states")
    final_times = times[~np.isinf(fst.final)]
    if final_times.size == 0 or np.any(final_times != final_times[0]):
        raise PynnetError("the supervision FST's final states are at different times")
    return times, int(final_times[0])


class NumeratorComputation:
    def __init__(self, supervision: Supervision, nnet_output: np.ndarray) -> None:
        self.sup = supervision
        self.output = np.ascontiguousarray(nnet_output, dtype=F32)
        fst = supervision.fst
        self.times, total = fst_state_times(fst)
        rows = supervision.num_sequences * supervision.frames_per_sequence
        if rows != self.output.shape[0] or supervision.label_dim != self.output.shape[1]:
            raise PynnetError(f"supervision ({supervision.num_sequences} x "
                              f"{supervision.frames_per_sequence} frames, label-dim "
                              f"{supervision.label_dim}) does not match the network output "
                              f"({self.output.shape[0]} x {self.output.shape[1]})")
        if total != rows:
            raise PynnetError(f"the supervision FST has {total} frames, expected {rows}")
        if fst.num_arcs and (fst.ilabel.min() < 1 or fst.ilabel.max() > supervision.label_dim):
            raise PynnetError("the supervision FST has labels outside 1..label-dim")
        self.log_alpha = np.empty(fst.num_states, np.float64)
        self.tot_log_prob = -np.inf

    def _args(self) -> tuple:
        f = self.sup.fst
        return (f.arc_begin, f.ilabel, f.weight, f.nextstate, f.final, self.times,
                self.output, self.sup.frames_per_sequence, self.sup.num_sequences)

    def forward(self) -> float:
        """The log-likelihood times the supervision weight (float32, as Kaldi's)."""
        self.tot_log_prob = kernels.num_forward(*self._args(), self.log_alpha)
        return float(F32(self.tot_log_prob * self.sup.weight))

    def backward(self, nnet_output_deriv: np.ndarray) -> None:
        """Adds weight times the occupation probabilities into ``nnet_output_deriv``."""
        post = np.zeros_like(self.output)
        log_beta = np.empty_like(self.log_alpha)
        tot_backward = kernels.num_backward(*self._args(), self.log_alpha, self.tot_log_prob,
                                            log_beta, post)
        a, b = tot_backward, self.tot_log_prob
        if not (a == b or abs(a - b) <= 0.001 * max(abs(a), abs(b))):
            log.warn(f"Disagreement in forward/backward log-probs: {fmt_g(a)} vs. {fmt_g(b)}")
        if self.sup.weight == 1.0:
            nnet_output_deriv += post
        else:
            nnet_output_deriv += F32(self.sup.weight) * post
