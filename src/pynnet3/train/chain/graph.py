"""Graph building shared by chain supervision and the denominator graph: phone
FST -> context-dependent phones -> HMM transition-ids (Kaldi's context FST
composition, GetHTransducer, TableCompose and AddSelfLoops with reorder=true).

The general FST algorithms OpenFst provides (epsilon removal, the context
composition of Kaldi's fstext) come from kaldifst; the HMM-specific steps, the
composition with H (whose state numbering is that of Kaldi's TableCompose),
Kaldi's RemoveEpsLocal and an arc sort with libstdc++'s std::sort order (the
kaldifst build's ArcSort is a stable sort, Kaldi's is not) are done here on
:class:`~.fst.Fst` arrays, keeping Kaldi's state and arc order throughout, so
that the FSTs written are byte-identical to Kaldi's.
"""
from __future__ import annotations

import numpy as np

from ...arraytools import sorted_unique
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
    for tid in sorted_unique(labels[labels > 0]):
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
    composed = compose_h(h, cd)
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


def compose_h(h: Fst, cd: Fst) -> Fst:
    """H o cd as Kaldi's TableCompose builds it (OpenFst's ComposeFst with a
    table matcher on H's output labels and the sequence filter, copied into a
    VectorFst and connected): states numbered in order of discovery, each
    state's arcs being first H's output-epsilon arcs (cd stays), then for
    each cd arc in order the H arcs with its label (for a cd epsilon, cd
    moving alone)."""
    h_begin, h_il, h_ol = h.arc_begin.tolist(), h.ilabel.tolist(), h.olabel.tolist()
    h_w, h_ns = h.weight.tolist(), h.nextstate.tolist()
    c_begin, c_il, c_w, c_ns = (cd.arc_begin.tolist(), cd.ilabel.tolist(), cd.weight.tolist(),
                                cd.nextstate.tolist())
    # per H state: output label -> its arcs, in order
    by_label: list[dict[int, list[int]]] = []
    for s in range(h.num_states):
        d: dict[int, list[int]] = {}
        for a in range(h_begin[s], h_begin[s + 1]):
            d.setdefault(h_ol[a], []).append(a)
        by_label.append(d)
    index = {(h.start, cd.start): 0}
    states = [(h.start, cd.start)]
    src, il, ol, wt, ns = [], [], [], [], []

    def state_of(key: tuple[int, int]) -> int:
        k = index.get(key)
        if k is None:
            k = len(states)
            index[key] = k
            states.append(key)
        return k

    k = 0
    while k < len(states):
        s1, s2 = states[k]
        for a in by_label[s1].get(0, ()):
            src.append(k)
            il.append(h_il[a])
            ol.append(0)
            wt.append(h_w[a])
            ns.append(state_of((h_ns[a], s2)))
        for b in range(c_begin[s2], c_begin[s2 + 1]):
            if c_il[b] == 0:
                # cd moves alone (H's implicit epsilon loop): the sequence
                # filter allows it from H states without output-epsilon arcs
                # (the loop state); states with only those arcs block it.
                eps_out = len(by_label[s1].get(0, ()))
                num_out = h_begin[s1 + 1] - h_begin[s1]
                if eps_out == num_out and h.final[s1] == np.inf:
                    continue
                if eps_out:
                    raise PynnetError("compose_h: H state with mixed epsilon and "
                                      "non-epsilon output arcs (not supported)")
                src.append(k)
                il.append(0)
                ol.append(0)
                wt.append(c_w[b])
                ns.append(state_of((s1, c_ns[b])))
                continue
            for a in by_label[s1].get(c_il[b], ()):
                src.append(k)
                il.append(h_il[a])
                ol.append(c_il[b])
                wt.append(float(np.float32(h_w[a]) + np.float32(c_w[b])))
                ns.append(state_of((h_ns[a], c_ns[b])))
        k += 1
    n = len(states)
    final = np.array([np.float32(h.final[s1]) + np.float32(cd.final[s2]) for s1, s2 in states],
                     np.float32)
    out = Fst.from_arcs(n, 0, final, src, il, ol, wt, ns)
    return connect(out)


def connect(fst: Fst) -> Fst:
    """OpenFst's Connect: drop states not on a successful path, keeping the
    order of the others (and of the arcs)."""
    n = fst.num_states
    if n == 0 or fst.start < 0:
        return Fst()
    src = fst.arc_state().astype(np.int64)
    dst = fst.nextstate.astype(np.int64)
    acc = np.zeros(n, bool)
    acc[fst.start] = True
    coacc = fst.final != np.inf
    while True:
        new = acc.copy()
        new[dst[acc[src]]] = True
        if np.array_equal(new, acc):
            break
        acc = new
    while True:
        new = coacc.copy()
        new[src[coacc[dst]]] = True
        if np.array_equal(new, coacc):
            break
        coacc = new
    keep = acc & coacc
    if keep.all():
        return fst
    if not keep[fst.start]:
        return Fst()
    remap = np.full(n, -1, np.int64)
    remap[keep] = np.arange(int(keep.sum()))
    ka = keep[src] & keep[dst]
    return Fst.from_arcs(int(keep.sum()), int(remap[fst.start]), fst.final[keep], remap[src[ka]],
                         fst.ilabel[ka], fst.olabel[ka], fst.weight[ka], remap[dst[ka]])


def remove_eps_local(fst: Fst) -> Fst:
    """Kaldi's fst::RemoveEpsLocal (tropical semiring): removes epsilon arcs
    where that does not add states or arcs, then Connect."""
    inf = np.float32(np.inf)
    f32 = np.float32
    n0 = fst.num_states
    if fst.start < 0:
        return fst
    arcs: list[list[list]] = []   # per state: [ilabel, olabel, weight(f32), nextstate]
    begin = fst.arc_begin.tolist()
    il, ol, w, nxt = fst.ilabel.tolist(), fst.olabel.tolist(), fst.weight.tolist(), fst.nextstate.tolist()
    for s in range(n0):
        arcs.append([[il[a], ol[a], f32(w[a]), nxt[a]] for a in range(begin[s], begin[s + 1])])
    final = [f32(x) for x in fst.final.tolist()]
    dead = n0                      # the non-coaccessible state arcs are "deleted" to
    arcs.append([])
    final.append(inf)
    n_in = [0] * (n0 + 1)
    n_out = [0] * (n0 + 1)
    n_in[fst.start] += 1
    for s in range(n0 + 1):
        if final[s] != inf:
            n_out[s] += 1
        for a in arcs[s]:
            n_in[a[3]] += 1
            n_out[s] += 1

    def combine(a: list, b: list) -> list | None:
        if a[0] != 0 and b[0] != 0:
            return None
        if a[1] != 0 and b[1] != 0:
            return None
        return [a[0] if a[0] != 0 else b[0], a[1] if a[1] != 0 else b[1], f32(a[2] + b[2]), b[3]]

    def reweight(s: int, pos: int, rw: np.float32) -> None:
        arc = arcs[s][pos]
        arc[2] = f32(arc[2] + rw)
        for na in arcs[arc[3]]:
            if na[3] != dead:
                na[2] = f32(na[2] - rw)
        if final[arc[3]] != inf:
            final[arc[3]] = f32(final[arc[3]] - rw)

    def pattern1(s: int, pos: int, arc: list) -> None:
        nxs = arc[3]
        removed, kept = inf, inf
        to_add = []
        for na in arcs[nxs]:
            if na[3] == dead:
                continue
            c = combine(arc, na)
            if c is not None:
                removed = min(removed, na[2])
                n_out[nxs] -= 1
                n_in[na[3]] -= 1
                na[3] = dead
                to_add.append(c)
            else:
                kept = min(kept, na[2])
        if final[nxs] != inf:
            if arc[0] == 0 and arc[1] == 0:
                removed = min(removed, final[nxs])
                if final[s] == inf:
                    n_out[s] += 1
                final[s] = min(final[s], f32(arc[2] + final[nxs]))
                n_out[nxs] -= 1
                final[nxs] = inf
            else:
                kept = min(kept, final[nxs])
        if removed != inf:
            if kept == inf:
                n_out[s] -= 1
                n_in[arc[3]] -= 1
                arcs[s][pos][3] = dead
            else:
                total = min(removed, kept)
                reweight(s, pos, f32(kept - total))
        for c in to_add:
            n_out[s] += 1
            n_in[c[3]] += 1
            arcs[s].append(c)

    def pattern2(s: int, pos: int, arc: list) -> None:
        nxs = arc[3]
        can_delete_next = n_in[nxs] == 1
        delete_arc = False
        if final[nxs] != inf:
            if arc[0] == 0 and arc[1] == 0:
                if final[s] == inf:
                    n_out[s] += 1
                final[s] = min(final[s], f32(arc[2] + final[nxs]))
                delete_arc = True
                if can_delete_next:
                    n_out[nxs] -= 1
                    final[nxs] = inf
        else:
            na = next(x for x in arcs[nxs] if x[3] != dead)
            c = combine(arc, na)
            if c is not None:
                delete_arc = True
                if can_delete_next:
                    n_out[nxs] -= 1
                    n_in[na[3]] -= 1
                    na[3] = dead
                n_out[s] += 1
                n_in[c[3]] += 1
                arcs[s].append(c)
        if delete_arc:
            n_out[s] -= 1
            n_in[nxs] -= 1
            arcs[s][pos][3] = dead

    for s in range(n0 + 1):
        pos = 0
        while pos < len(arcs[s]):
            arc = list(arcs[s][pos])
            nxs = arc[3]
            if nxs != dead and nxs != s:
                if n_in[nxs] == 1 and n_out[nxs] > 1:
                    pattern1(s, pos, arc)
                elif n_out[nxs] == 1:
                    pattern2(s, pos, arc)
            pos += 1
    src_l, il_l, ol_l, w_l, ns_l = [], [], [], [], []
    for s in range(n0 + 1):
        for a in arcs[s]:
            src_l.append(s)
            il_l.append(a[0])
            ol_l.append(a[1])
            w_l.append(a[2])
            ns_l.append(a[3])
    out = Fst.from_arcs(n0 + 1, fst.start, np.array(final, np.float32), src_l, il_l, ol_l, w_l, ns_l)
    return connect(out)


def libstdcxx_sort_order(keys: list) -> list[int]:
    """The permutation GNU libstdc++'s std::sort (introsort, then insertion
    sort) makes of ``keys`` under ``<``: which of the equal keys comes first
    depends on the algorithm, and OpenFst's ArcSort in Kaldi's build is a
    std::sort, so arcs with equal labels end up in its order."""
    a = list(range(len(keys)))

    def less(i: int, j: int) -> bool:
        return keys[i] < keys[j]

    def adjust_heap(first: int, hole: int, length: int, value: int) -> None:
        top = hole
        child = hole
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if less(a[first + child], a[first + child - 1]):
                child -= 1
            a[first + hole] = a[first + child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            a[first + hole] = a[first + child - 1]
            hole = child - 1
        parent = (hole - 1) // 2
        while hole > top and less(a[first + parent], value):
            a[first + hole] = a[first + parent]
            hole = parent
            parent = (hole - 1) // 2
        a[first + hole] = value

    def heap_sort(first: int, last: int) -> None:
        length = last - first
        if length >= 2:
            parent = (length - 2) // 2
            while True:
                adjust_heap(first, parent, length, a[first + parent])
                if parent == 0:
                    break
                parent -= 1
        while last - first > 1:
            last -= 1
            value = a[last]
            a[last] = a[first]
            adjust_heap(first, 0, last - first, value)

    def move_median_to_first(result: int, x: int, y: int, z: int) -> None:
        if less(a[x], a[y]):
            if less(a[y], a[z]):
                m = y
            elif less(a[x], a[z]):
                m = z
            else:
                m = x
        elif less(a[x], a[z]):
            m = x
        elif less(a[y], a[z]):
            m = z
        else:
            m = y
        a[result], a[m] = a[m], a[result]

    def partition_pivot(first: int, last: int) -> int:
        mid = first + (last - first) // 2
        move_median_to_first(first, first + 1, mid, last - 1)
        lo, hi, pivot = first + 1, last, first
        while True:
            while less(a[lo], a[pivot]):
                lo += 1
            hi -= 1
            while less(a[pivot], a[hi]):
                hi -= 1
            if not lo < hi:
                return lo
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1

    def introsort(first: int, last: int, depth: int) -> None:
        while last - first > 16:
            if depth == 0:
                heap_sort(first, last)
                return
            depth -= 1
            cut = partition_pivot(first, last)
            introsort(cut, last, depth)
            last = cut

    def linear_insert(i: int) -> None:
        val = a[i]
        j = i - 1
        while less(val, a[j]):
            a[i] = a[j]
            i = j
            j -= 1
        a[i] = val

    def insertion_sort(first: int, last: int) -> None:
        for i in range(first + 1, last):
            if less(a[i], a[first]):
                val = a[i]
                a[first + 1:i + 1] = a[first:i]
                a[first] = val
            else:
                linear_insert(i)

    n = len(a)
    if n > 1:
        introsort(0, n, 2 * (n.bit_length() - 1))
        if n > 16:
            insertion_sort(0, 16)
            for i in range(16, n):
                linear_insert(i)
        else:
            insertion_sort(0, n)
    return a


def arcsort_ilabel(fst: Fst) -> Fst:
    """OpenFst's ArcSort(ILabelCompare) as in Kaldi's build (std::sort per state)."""
    out = fst.copy()
    begin = fst.arc_begin.tolist()
    il = fst.ilabel.tolist()
    perm = np.arange(fst.num_arcs)
    for s in range(fst.num_states):
        a, b = begin[s], begin[s + 1]
        if b - a > 1:
            perm[a:b] = a + np.asarray(libstdcxx_sort_order(il[a:b]))
    out.ilabel, out.olabel = fst.ilabel[perm], fst.olabel[perm]
    out.weight, out.nextstate = fst.weight[perm], fst.nextstate[perm]
    return out
