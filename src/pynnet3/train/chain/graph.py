"""Graph building shared by chain supervision and the denominator graph: phone
FST -> context-dependent phones -> HMM transition-ids (Kaldi's context FST
composition, GetHTransducer, TableCompose and AddSelfLoops with reorder=true).

The FST algorithms that OpenFst provides (composition, epsilon removal, the
context composition of Kaldi's fstext) come from kaldifst; the HMM-specific
steps, which are small, are done here on :class:`~.fst.Fst` arrays, in Kaldi's
state and arc order where the order reaches the output.
"""
from __future__ import annotations

import numpy as np

from ...errors import PynnetError
from ...nnet.transition_model import K_NO_PDF, TransitionModel
from ...nnet.tree import ContextDependency
from .fst import Fst, from_kaldifst, to_kaldifst


def fst_from_lists(num_states: int, start: int, final: np.ndarray, arcs: list[tuple]) -> Fst:
    """An Fst from (src, ilabel, olabel, weight, nextstate) tuples, kept in order within a state."""
    if arcs:
        src, il, ol, w, ns = zip(*arcs)
    else:
        src = il = ol = w = ns = ()
    return Fst.from_arcs(num_states, start, final, list(src), list(il), list(ol), list(w), list(ns))


def linear_acceptor(labels: list[int]) -> Fst:
    """fst::MakeLinearAcceptor: states 0..n, label i on the arc i -> i+1, n final."""
    n = len(labels)
    final = np.full(n + 1, np.inf, np.float32)
    final[n] = 0.0
    return Fst.from_arcs(n + 1, 0, final, np.arange(n), labels, labels, np.zeros(n), np.arange(1, n + 1))


def compose_context(phone_fst: Fst, ctx_dep: ContextDependency) -> tuple[Fst, list[list[int]]]:
    """Kaldi's ComposeDeterministicOnDemandInverse of a phone acceptor with the
    inverse context FST, projected on the context-dependent phone labels
    (indexes into the returned ilabel info, a phone window each)."""
    import kaldifst

    kf = to_kaldifst(phone_fst)
    out, ilabels = kaldifst.compose_context([], ctx_dep.context_width, ctx_dep.central_position,
                                            kf, project_ifst=True)
    cd = from_kaldifst(out)
    cd.olabel = cd.ilabel.copy()
    cd.properties = None
    return cd, [list(x) for x in ilabels]


def _hmm_as_fsa(window: list[int], ctx_dep: ContextDependency, tm: TransitionModel
                ) -> tuple[tuple, int, list[tuple], int]:
    """GetHmmAsFsa without self-loops: (cache key, number of states, arcs
    (src, tid, weight, dst), final state); the start is state 0."""
    phone = window[ctx_dep.central_position]
    if phone == 0:
        raise PynnetError("phone == 0 in a context window: mismatched tree and phone FST?")
    topo = tm.topo
    entry = topo.topology_for_phone(phone)
    pdfs = []
    for pdf_class in range(topo.num_pdf_classes(phone)):
        pdf = ctx_dep.compute(window, pdf_class)
        if pdf is None:
            raise PynnetError(
                f"GetHmmAsFsa: context-dependency object could not produce an answer: "
                f"pdf-class = {pdf_class} ctx-window = {' '.join(map(str, window))} .  This "
                "probably points to a mismatch of the tree with the topology or phone set.")
        pdfs.append(pdf)
    arcs = []
    for hmm_state, st in enumerate(entry):
        if st.forward_pdf_class == K_NO_PDF:
            if st.transitions:
                raise PynnetError("topologies with non-emitting states (other than the final "
                                  "state) are not supported in chain graph building")
            continue
        fwd, loop = pdfs[st.forward_pdf_class], pdfs[st.self_loop_pdf_class]
        tstate = tm.tuple_to_transition_state(phone, hmm_state, fwd, loop)
        for idx, (dst, _p) in enumerate(st.transitions):
            if dst == hmm_state:
                continue  # self-loops are added later (AddSelfLoops)
            tid = tm.pair_to_transition_id(tstate, idx)
            log_prob = tm.get_transition_log_prob_ignoring_self_loops(tid)
            arcs.append((hmm_state, tid, np.float32(-log_prob), dst))
    return (phone, tuple(pdfs)), len(entry), arcs, len(entry) - 1


def h_transducer(ilabels: list[list[int]], ctx_dep: ContextDependency, tm: TransitionModel,
                 transition_scale: float) -> Fst:
    """Kaldi's GetHTransducer (MakeLoopFst of one HMM acceptor per
    context-dependent phone, identical HMMs shared): transition-ids in,
    context-dependent phone indexes out."""
    if not ilabels or ilabels[0]:
        raise PynnetError("ilabel info must start with the empty (epsilon) entry")
    scale = np.float32(transition_scale)
    num_states = 1  # the loop state 0, start and final
    final = [0.0]
    arcs: list[tuple] = []
    cache: dict[tuple, tuple] = {}
    for j in range(1, len(ilabels)):
        window = ilabels[j]
        if not window or window[0] <= 0 and len(window) == 1:
            raise PynnetError("disambiguation symbols are not expected in chain graphs")
        key, n, hmm_arcs, hmm_final = _hmm_as_fsa(window, ctx_dep, tm)
        if key in cache:
            il, _ol, w, ns = cache[key]
            arcs.append((0, il, j, w, ns))
            continue
        out_of_start = [a for a in hmm_arcs if a[0] == 0]
        into_start = [a for a in hmm_arcs if a[3] == 0]
        share_start = len(out_of_start) == 1 and not into_start and hmm_final != 0
        state_map = []
        for s in range(n):
            if s == 0 and share_start:
                state_map.append(0)
            else:
                state_map.append(num_states)
                num_states += 1
                final.append(np.inf)
        if not share_start:
            arc = (0, j, np.float32(0.0), state_map[0])
            cache[key] = arc
            arcs.append((0,) + arc)
        for s in range(n):
            for (a_src, tid, w, dst) in hmm_arcs:
                if a_src != s:
                    continue
                olabel = j if (s == 0 and share_start) else 0
                new = (tid, olabel, np.float32(w * scale), state_map[dst])
                arcs.append((state_map[s],) + new)
                if s == 0 and share_start:
                    cache[key] = new
            if s == hmm_final:
                arcs.append((state_map[s], 0, 0, np.float32(0.0 * scale), 0))
    return fst_from_lists(num_states, 0, np.array(final, np.float32), arcs)


def compose(a: Fst, b: Fst) -> Fst:
    """OpenFst's Compose (via kaldifst), b arc-sorted on input labels first."""
    import kaldifst

    ka, kb = to_kaldifst(a), to_kaldifst(b)
    kaldifst.arcsort(kb, sort_type="ilabel")
    out = from_kaldifst(kaldifst.compose(ka, kb))
    out.properties = None
    return out


def add_self_loops_reorder(fst: Fst, tm: TransitionModel, self_loop_scale: float) -> Fst:
    """Kaldi's AddSelfLoops with reorder=true (check_no_self_loops): each state
    entered by a transition-id gets the self-loop of that transition's state,
    appended after its arcs, and its other arcs and final weight are
    multiplied by the probability of leaving the state."""
    num_tids = tm.num_transition_ids()
    labels = fst.ilabel
    if labels.size and (labels.min() < 0 or labels.max() > num_tids):
        raise PynnetError("AddSelfLoops: label out of range of transition-ids")
    id2state = np.asarray(tm.id2state)
    cls = np.where(labels > 0, id2state[np.clip(labels, 0, None)], 0)
    for tid in np.unique(labels[labels > 0]):
        if tm.is_self_loop(int(tid)):
            raise PynnetError("AddSelfLoops: FST already has self-loops")
    n = fst.num_states
    state_in = np.full(n, -1, np.int64)
    # Classes of the arcs entering each state must agree (Kaldi would split
    # states otherwise; chain topologies never need that).
    state_in[fst.start] = 0
    order = np.argsort(fst.nextstate, kind="stable")
    dst_sorted, cls_sorted = fst.nextstate[order], cls[order]
    first = np.ones(dst_sorted.shape[0], bool)
    first[1:] = dst_sorted[1:] != dst_sorted[:-1]
    firsts = cls_sorted[first]
    starts = np.flatnonzero(first)
    ends = np.append(starts[1:], dst_sorted.shape[0])
    for d, c, a, b in zip(dst_sorted[first], firsts, starts, ends):
        if np.any(cls_sorted[a:b] != c) or (d == fst.start and c != 0):
            raise PynnetError("AddSelfLoops: a state is entered by transitions of different "
                              "transition-states (topology not supported)")
        state_in[d] = c
    scale = np.float32(self_loop_scale)
    final = fst.final.copy()
    weight = fst.weight.copy()
    src = fst.arc_state()
    extra_src, extra_tid, extra_w = [], [], []
    for s in np.flatnonzero(state_in > 0):
        ts = int(state_in[s])
        w_leave = np.float32(-np.float32(tm.get_non_self_loop_log_prob(ts)) * scale)
        if final[s] != np.inf:
            final[s] = np.float32(final[s] + w_leave)
        weight[src == s] += w_leave
        loop = tm.self_loop_of(ts)
        if loop != 0:
            extra_src.append(s)
            extra_tid.append(loop)
            extra_w.append(np.float32(-np.float32(tm.get_transition_log_prob(loop)) * scale))
    all_src = np.concatenate([src, np.asarray(extra_src, np.int64)])
    return Fst.from_arcs(n, fst.start, final, all_src,
                         np.concatenate([fst.ilabel, np.asarray(extra_tid, np.int32)]),
                         np.concatenate([fst.olabel, np.zeros(len(extra_src), np.int32)]),
                         np.concatenate([weight, np.asarray(extra_w, np.float32)]),
                         np.concatenate([fst.nextstate, np.asarray(extra_src, np.int32)]))


def rm_epsilon(fst: Fst) -> Fst:
    """OpenFst's RmEpsilon (via kaldifst; connects, and as OpenFst does, emits
    each state's arcs in reverse order of discovery)."""
    import kaldifst

    kf = to_kaldifst(fst)
    kaldifst.rmepsilon(kf)
    out = from_kaldifst(kf)
    out.properties = None
    return out


def transition_id_fst(phone_fst: Fst, ctx_dep: ContextDependency, tm: TransitionModel,
                      transition_scale: float, self_loop_scale: float) -> Fst:
    """H o (C o phone_fst) with self-loops, projected on transition-ids (the
    common part of ProtoSupervisionToSupervision and CreateDenominatorFst)."""
    cd, ilabels = compose_context(phone_fst, ctx_dep)
    h = h_transducer(ilabels, ctx_dep, tm, transition_scale)
    composed = compose(h, cd)
    with_loops = add_self_loops_reorder(composed, tm, self_loop_scale)
    with_loops.olabel = with_loops.ilabel.copy()
    return with_loops


def state_sort(fst: Fst, order: np.ndarray) -> Fst:
    """fst::StateSort: state s becomes order[s]; arcs keep their order."""
    order = np.asarray(order, np.int64)
    n = fst.num_states
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    counts = np.diff(fst.arc_begin)
    # arcs of new state k are those of old state inv[k]
    idx = np.concatenate([np.arange(fst.arc_begin[s], fst.arc_begin[s + 1]) for s in inv]) \
        if fst.num_arcs else np.zeros(0, np.int64)
    arc_begin = np.zeros(n + 1, np.int64)
    np.cumsum(counts[inv], out=arc_begin[1:])
    return Fst(int(order[fst.start]) if fst.start >= 0 else -1, fst.final[inv].copy(), arc_begin,
               fst.ilabel[idx].copy(), fst.olabel[idx].copy(), fst.weight[idx].copy(),
               order[fst.nextstate[idx]].astype(np.int32))
