"""The denominator FST of chain training and its 'normalization' variant (Kaldi's
chain::CreateDenominatorFst and DenominatorGraph::GetNormalizationFst, used by
``chain-make-den-fst``).

The phone LM is expanded to context-dependent phones and HMM transition-ids
with transition probabilities (scale 1), relabelled with pdf-id + 1, freed of
epsilons, then shrunk by three rounds of (reverse, push, minimize, reverse,
push, minimize) -- Kaldi's DenGraphMinimizeWrapper -- and its states ordered by
decreasing number of arcs in + out.  Epsilon removal, reversal and the encoded
acceptor minimization are OpenFst's (kaldifst); Kaldi's own PushSpecial (make
every state's total out-probability equal, with the top eigenvector of the
transition matrix, in Kaldi's float arithmetic and summation order),
RemoveEpsLocal and the state ordering are done here.  On the reference setup
den.fst and normalization.fst come out byte-identical to Kaldi's.
"""
from __future__ import annotations

import math

import numpy as np

from ... import log
from ...errors import PynnetError
from ...nnet.transition_model import TransitionModel, expf
from ...nnet.tree import ContextDependency
from .fst import Fst, from_kaldifst, to_kaldifst
from .graph import arcsort_ilabel, compose_context, remove_eps_local, rm_epsilon, state_sort, transition_id_fst

K_DELTA = 1.0 / 1024.0  # OpenFst's kDelta

# What OpenFst knows about the two FSTs when chain-make-den-fst writes them
# (the header's property word): expanded, mutable, no epsilons, weighted; the
# normalization FST is also known accessible and co-accessible.
DEN_FST_PROPERTIES = 0x100800003
NORMALIZATION_FST_PROPERTIES = 0x50010800003


def _num_arcs_text(fst: Fst) -> str:
    return f"{fst.num_states} and {fst.num_arcs}"


def push_special(fst: Fst, delta: float) -> Fst:
    """Kaldi's fst::PushSpecial: reweight with the top eigenvector of the
    transition matrix (final probabilities leading back to the start state)
    so that every state sums to the same total.  Kaldi's arithmetic is kept
    (float expf of the weights, its order of summation), so the weights come
    out as Kaldi's."""
    n = fst.num_states
    if n == 0:
        return fst
    start = fst.start
    src = fst.arc_state().astype(np.int64)
    dst = fst.nextstate.astype(np.int64)
    p = expf(-fst.weight).astype(np.float64)
    fin = expf(-fst.final).astype(np.float64)
    # Kaldi keeps, per state i, the list of (j, p) with an arc j -> i (in
    # order of j, then arc order); the final probs of the states j are
    # appended to the start state's list as they come (after j's arcs).
    has_final = fin != 0.0
    e_i = np.concatenate([dst, np.full(int(has_final.sum()), start, np.int64)])
    e_j = np.concatenate([src, np.flatnonzero(has_final)])
    e_p = np.concatenate([p, fin[has_final]])
    # construction order: state j's arcs, then j's final
    e_order_key = np.concatenate([np.arange(src.size) + src, np.flatnonzero(has_final)
                                  + np.asarray(fst.arc_begin[1:])[has_final]])
    order = np.lexsort((e_order_key, e_i))   # by i, then construction order
    e_i, e_j, e_p = e_i[order], e_j[order], e_p[order]
    occ = np.full(n, 1.0 / math.sqrt(n))

    def accuracy() -> float:
        terms = p * occ[dst] / occ[src]
        sums = np.zeros(n)
        np.add.at(sums, src, terms)          # in arc order, as Kaldi's loop
        sums += fin * occ[start] / occ
        return math.log(sums.max() / sums.min())

    max_iter = 200
    converged = False
    for it in range(max_iter):
        new = 0.1 * occ
        np.add.at(new, e_j, occ[e_i] * e_p)  # sequential, in Kaldi's order
        lam = math.sqrt(float(np.cumsum(new * new)[-1]))
        occ = new * (1.0 / lam)
        if it % 5 == 0 and it > 0 and accuracy() <= delta:
            converged = True
            break
    if not converged:
        log.warn(f"push-special: finished {max_iter} iterations without converging.  "
                 "Output will be inaccurate.")
    pot = -np.log(occ)
    out = fst.copy()
    out.properties = None
    out.weight = (fst.weight.astype(np.float64) + pot[dst] - pot[src]).astype(np.float32)
    out.final = np.where(fst.final == np.inf, np.float32(np.inf),
                         fst.final + (pot[start] - pot).astype(np.float32)).astype(np.float32)
    return out


def _reverse(fst: Fst) -> Fst:
    import kaldifst

    out = from_kaldifst(kaldifst.reverse(to_kaldifst(fst), require_superinitial=True))
    out.properties = None
    return out


def _minimize_acceptor_no_push(fst: Fst) -> Fst:
    """Kaldi's MinimizeAcceptorNoPush: quantize, encode labels and weights,
    minimize as an acceptor, decode (kaldifst's minimize_encoded)."""
    import kaldifst

    kf = to_kaldifst(fst)
    kaldifst.minimize_encoded(kf, delta=K_DELTA * 10.0)
    out = from_kaldifst(kf)
    out.properties = None
    return out


def den_graph_minimize(fst: Fst) -> Fst:
    """Kaldi's DenGraphMinimizeWrapper."""
    for i in range(1, 4):
        rev = push_special(_reverse(fst), K_DELTA * 0.01)
        rev = _minimize_acceptor_no_push(rev)
        fst = _reverse(rev)
        log.log("Number of states and arcs in transition-id FST after reversed minimization "
                f"is {_num_arcs_text(fst)} (pass {i})")
        fst = _minimize_acceptor_no_push(push_special(fst, K_DELTA * 0.01))
        log.log("Number of states and arcs in transition-id FST after regular minimization "
                f"is {_num_arcs_text(fst)} (pass {i})")
    fst = rm_epsilon(fst)
    log.log("Number of states and arcs in transition-id FST after removing any epsilons "
            f"introduced by reversal is {_num_arcs_text(fst)}")
    return push_special(fst, K_DELTA * 0.01)


def sort_on_transition_count(fst: Fst) -> Fst:
    """States in decreasing order of arcs in + out (ties: lower state first)."""
    n = fst.num_states
    count = np.bincount(fst.arc_state(), minlength=n) + np.bincount(fst.nextstate, minlength=n)
    ranked = np.lexsort((np.arange(n), -count))
    order = np.empty(n, np.int64)
    order[ranked] = np.arange(n)
    return state_sort(fst, order)


def create_denominator_fst(ctx_dep: ContextDependency, tm: TransitionModel, phone_lm: Fst) -> Fst:
    """Kaldi's chain::CreateDenominatorFst."""
    if phone_lm.num_states == 0:
        raise PynnetError("the phone LM FST is empty")
    log.log(f"Number of states and arcs in phone-LM FST is {_num_arcs_text(phone_lm)}")
    cd, _ilabels = compose_context(phone_lm, ctx_dep)
    log.log("Number of states and arcs in context-dependent LM FST is "
            f"{_num_arcs_text(cd)}")
    tid = transition_id_fst(phone_lm, ctx_dep, tm, transition_scale=1.0, self_loop_scale=1.0)
    pdf_plus_one = np.asarray(tm.id2pdf_id, np.int64) + 1
    lab = np.where(tid.ilabel > 0, pdf_plus_one[np.clip(tid.ilabel, 0, None)], 0).astype(np.int32)
    tid.ilabel = lab
    tid.olabel = lab.copy()
    log.log(f"Number of states and arcs in transition-id FST is {_num_arcs_text(tid)}")
    tid = rm_epsilon(remove_eps_local(tid))
    log.log("Number of states and arcs in transition-id FST after removing epsilons is "
            f"{_num_arcs_text(tid)}")
    den = sort_on_transition_count(den_graph_minimize(tid))
    num_pdfs = tm.num_pdfs()
    if den.num_arcs and (den.ilabel.min() < 1 or den.ilabel.max() > num_pdfs):
        raise PynnetError("denominator FST has a label out of the pdf range")
    seen = np.zeros(num_pdfs, bool)
    seen[den.ilabel - 1] = True
    for pdf in np.flatnonzero(~seen):
        log.warn(f"Pdf-id {pdf} is not seen in denominator graph.")
    n = den.num_states
    out_deg = np.diff(den.arc_begin)
    in_deg = np.bincount(den.nextstate, minlength=n)
    log.log(f"Number of states is {n} and arcs {den.num_arcs}; number of states with "
            f"in-degree <= 3 is {int((in_deg <= 3).sum())} and with out-degree <= 3 is "
            f"{int((out_deg <= 3).sum())}")
    den.properties = DEN_FST_PROPERTIES
    return den


def initial_probs(den: Fst) -> np.ndarray:
    """DenominatorGraph's initial probabilities: the average state occupancy
    over 100 steps of the normalized HMM started in the start state (float)."""
    n = den.num_states
    src = den.arc_state().astype(np.int64)
    dst = den.nextstate.astype(np.int64)
    p = np.exp(-den.weight.astype(np.float64))
    tot = np.exp(-den.final.astype(np.float64)) + np.bincount(src, weights=p, minlength=n)
    if not np.all((tot > 0.0) & (tot < 100.0)):
        raise PynnetError("denominator FST: a state's total probability is out of (0, 100)")
    norm = 1.0 / tot
    cur = np.zeros(n)
    cur[den.start] = 1.0
    avg = np.zeros(n)
    num_iters = 100
    for _ in range(num_iters):
        avg += (1.0 / num_iters) * cur
        nxt = np.bincount(dst, weights=(cur * norm)[src] * p, minlength=n)
        cur = nxt * (1.0 / nxt.sum())
    return avg.astype(np.float32)


def normalization_fst(den: Fst) -> Fst:
    """DenominatorGraph::GetNormalizationFst: a new start state with an epsilon
    arc of weight -log(initial prob) into every state, every state final with
    weight One, then epsilons removed and arcs sorted on labels."""
    import kaldifst

    probs = initial_probs(den)
    if np.any(probs <= 0.0):
        raise PynnetError("denominator FST: a state has zero initial probability")
    n = den.num_states
    src = np.concatenate([den.arc_state(), np.full(n, n, np.int64)])
    zeros = np.zeros(n, np.int32)
    final = np.append(np.zeros(n, np.float32), np.float32(np.inf))
    fst = Fst.from_arcs(n + 1, n, final,
                        src, np.concatenate([den.ilabel, zeros]),
                        np.concatenate([den.olabel, zeros]),
                        np.concatenate([den.weight, -np.log(probs.astype(np.float64)).astype(np.float32)]),
                        np.concatenate([den.nextstate, np.arange(n, dtype=np.int32)]))
    kf = to_kaldifst(fst)
    kaldifst.rmepsilon(kf)
    out = arcsort_ilabel(from_kaldifst(kf))
    out.properties = NORMALIZATION_FST_PROPERTIES
    return out


def make_den_fst(tree_rxfilename: str, trans_model_rxfilename: str, phone_lm_rxfilename: str,
                 den_fst_wxfilename: str, normalization_fst_wxfilename: str) -> None:
    """chain-make-den-fst."""
    from ...io.kaldi_io import write_wxfilename
    from ...nnet.transition_model import read_transition_model
    from ...nnet.tree import read_context_dependency
    from .fst import read_fst_file, write_vector_fst

    ctx_dep = read_context_dependency(tree_rxfilename)
    tm = read_transition_model(trans_model_rxfilename)
    phone_lm = read_fst_file(phone_lm_rxfilename)
    den = create_denominator_fst(ctx_dep, tm, phone_lm)
    norm = normalization_fst(den)
    write_wxfilename(den_fst_wxfilename, write_vector_fst(den))
    write_wxfilename(normalization_fst_wxfilename, write_vector_fst(norm))
    log.log(f"Write denominator FST to {den_fst_wxfilename} and normalization FST to "
            f"{normalization_fst_wxfilename}")
