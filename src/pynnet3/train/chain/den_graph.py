"""The denominator graph of chain training (Kaldi's chain::DenominatorGraph,
chain/chain-den-graph.{h,cc}).

den.fst is an acceptor whose labels are pdf-id + 1.  For the forward-backward
of :mod:`.denominator` its arcs are kept twice, as flat arrays:

* leaving each state (``fwd_*``, grouped by source state, arc order kept);
* entering each state (``bwd_*``, grouped by destination, in the order Kaldi
  lists them: by source state, then arc order).

Transition probabilities are ``exp(-weight)`` as float32; nothing is
normalised (the chain model has no transition probabilities to estimate).

The initial probabilities are Kaldi's: starting from the FST's start state,
100 steps of the HMM with each state's outgoing mass (final-prob included)
normalised to one, averaged over the steps (in double, stored as float32).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import PynnetError
from .fst import Fst, read_fst_file

F32 = np.float32

__all__ = ["DenominatorGraph", "read_den_graph"]


@dataclass
class DenominatorGraph:
    num_pdfs: int
    num_states: int
    fwd_begin: np.ndarray      # int32 (num_states + 1)
    fwd_prob: np.ndarray       # float32 per arc
    fwd_pdf: np.ndarray        # int32 per arc (pdf-id = ilabel - 1)
    fwd_state: np.ndarray      # int32: the arc's destination
    bwd_begin: np.ndarray
    bwd_prob: np.ndarray
    bwd_pdf: np.ndarray
    bwd_state: np.ndarray      # int32: the arc's source
    initial_probs: np.ndarray  # float32 (num_states)

    @classmethod
    def from_fst(cls, fst: Fst, num_pdfs: int) -> "DenominatorGraph":
        n = fst.num_states
        if n == 0 or fst.start < 0:
            raise PynnetError("the denominator FST is empty")
        src = fst.arc_state().astype(np.int64)
        pdf = fst.ilabel.astype(np.int64) - 1
        if pdf.size and (pdf.min() < 0 or pdf.max() >= num_pdfs):
            bad = int(pdf.min() + 1) if pdf.min() < 0 else int(pdf.max() + 1)
            raise PynnetError(f"the denominator FST has label {bad}, outside 1..{num_pdfs} "
                              f"(the network's 'output' has {num_pdfs} dims)")
        prob = np.exp(-fst.weight.astype(np.float64)).astype(F32)
        dst = fst.nextstate.astype(np.int64)
        fwd_begin = np.asarray(fst.arc_begin, np.int32)
        # arcs into each state: stable sort by destination keeps (source, arc) order
        order = np.argsort(dst, kind="stable")
        bwd_begin = np.zeros(n + 1, np.int32)
        np.cumsum(np.bincount(dst, minlength=n), out=bwd_begin[1:])
        init = _initial_probs(fst, src, dst)
        return cls(num_pdfs, n, fwd_begin, prob, pdf.astype(np.int32), dst.astype(np.int32),
                   bwd_begin, prob[order].copy(), pdf[order].astype(np.int32),
                   src[order].astype(np.int32), init)


def _initial_probs(fst: Fst, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    n = fst.num_states
    arc_prob = np.exp(-fst.weight.astype(np.float64))
    final = fst.final.astype(np.float64)
    tot = np.where(np.isinf(final), 0.0, np.exp(-final))
    np.add.at(tot, src, arc_prob)
    if not np.all((tot > 0.0) & (tot < 100.0)):
        raise PynnetError("the denominator FST has a state whose outgoing probabilities "
                          "(final-prob included) do not sum to a value in (0, 100)")
    norm = 1.0 / tot
    num_iters = 100
    cur = np.zeros(n)
    cur[fst.start] = 1.0
    avg = np.zeros(n)
    for _ in range(num_iters):
        avg += (1.0 / num_iters) * cur
        nxt = np.bincount(dst, weights=(cur * norm)[src] * arc_prob, minlength=n)
        cur = nxt * (1.0 / nxt.sum())
    return avg.astype(F32)


def read_den_graph(path: str, num_pdfs: int) -> DenominatorGraph:
    """den.fst (an OpenFst binary file, ``-`` for stdin) as a DenominatorGraph."""
    return DenominatorGraph.from_fst(read_fst_file(path), num_pdfs)
