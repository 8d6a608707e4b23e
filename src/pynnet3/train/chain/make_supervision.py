"""Chain supervision from phone alignments (Kaldi's AlignmentToProtoSupervision
and ProtoSupervisionToSupervision, used by ``chain-get-supervision``).

A phone sequence with durations becomes a 'proto-supervision': the linear phone
acceptor plus, for each (subsampled) output frame, the phones allowed there (each
phone may appear from ``left_tolerance`` frames before its aligned start to
``right_tolerance`` frames after its end).  The phone acceptor is expanded to
context-dependent phones and HMM transition-ids (with no transition
probabilities: those come from the denominator graph), then intersected with
the frame constraints, giving an acceptor over pdf-id + 1 whose paths all have
``frames_per_sequence`` arcs, its states numbered in breadth-first order.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ...errors import PynnetError
from ...nnet.transition_model import TransitionModel
from ...nnet.tree import ContextDependency
from .fst import Fst
from .graph import linear_acceptor, rm_epsilon, state_sort, transition_id_fst
from .supervision import Supervision


@dataclass
class SupervisionOptions:
    left_tolerance: int = field(default=5, metadata={
        "flag": "left-tolerance",
        "help": "Left tolerance for shift in phone position relative to the alignment"})
    right_tolerance: int = field(default=5, metadata={
        "flag": "right-tolerance",
        "help": "Right tolerance for shift in phone position relative to the alignment"})
    frame_subsampling_factor: int = field(default=1, metadata={
        "flag": "frame-subsampling-factor",
        "help": "Used if the frame-rate for the chain model will be less than the frame-rate "
                "of the original alignment.  Applied after left-tolerance and right-tolerance "
                "are applied (so they are in terms of the original num-frames."})
    weight: float = field(default=1.0, metadata={
        "flag": "weight",
        "help": "Use this to set the supervision weight for training. This can be used to "
                "assign different weights to different data sources."})
    lm_scale: float = field(default=0.0, metadata={
        "flag": "lm-scale",
        "help": "The scale with which the graph/lm weights from the phone lattice are "
                "included in the supervision fst."})
    convert_to_pdfs: bool = field(default=True, metadata={
        "flag": "convert-to-pdfs",
        "help": "If true, convert transition-ids to pdf-ids + 1 in supervision FSTs."})

    def check(self) -> None:
        if not (self.left_tolerance >= 0 and self.right_tolerance >= 0
                and self.frame_subsampling_factor > 0
                and self.left_tolerance + self.right_tolerance + 1 >= self.frame_subsampling_factor):
            raise PynnetError("invalid supervision options: need tolerances >= 0, "
                              "--frame-subsampling-factor > 0 and left-tolerance + "
                              "right-tolerance + 1 >= frame-subsampling-factor")
        if not 0.0 <= self.lm_scale < 1.0:
            raise PynnetError("--lm-scale must be in [0, 1)")


@dataclass
class ProtoSupervision:
    allowed_phones: list[list[int]]
    fst: Fst


def alignment_to_proto_supervision(opts: SupervisionOptions,
                                   phones_durations: list[tuple[int, int]]) -> ProtoSupervision | None:
    """Kaldi's AlignmentToProtoSupervision; None for an empty alignment."""
    opts.check()
    if not phones_durations:
        raise PynnetError("empty phone alignment")
    phones = [int(p) for p, _ in phones_durations]
    durs = [int(d) for _, d in phones_durations]
    num_frames = sum(durs)
    factor = opts.frame_subsampling_factor
    nsub = (num_frames + factor - 1) // factor
    if nsub == 0:
        return None
    allowed: list[set[int]] = [set() for _ in range(nsub)]
    cur = 0
    for phone, dur in zip(phones, durs):
        if phone <= 0 or dur <= 0:
            raise PynnetError(f"invalid phone {phone} or duration {dur} in alignment")
        t_start = max(0, cur - opts.left_tolerance)
        t_end = min(num_frames, cur + dur + opts.right_tolerance)
        s_start = (t_start + factor - 1) // factor
        s_end = (t_end + factor - 1) // factor
        if not (s_end > s_start and s_end <= nsub):
            # Kaldi asserts here (a phone with no frame it may appear on)
            raise PynnetError(f"phone {phone} at frames {cur}..{cur + dur - 1} has no allowed "
                              f"output frame with --frame-subsampling-factor={factor}")
        for t in range(s_start, s_end):
            allowed[t].add(phone)
        cur += dur
    return ProtoSupervision([sorted(a) for a in allowed], linear_acceptor(phones))


def sort_breadth_first(fst: Fst) -> Fst:
    """Kaldi's SortBreadthFirstSearch (the FST must be connected)."""
    n = fst.num_states
    order = np.full(n, -1, np.int64)
    seen = np.zeros(n, bool)
    queue = deque([fst.start])
    seen[fst.start] = True
    k = 0
    begin, nxt = fst.arc_begin.tolist(), fst.nextstate.tolist()
    while queue:
        s = queue.popleft()
        order[s] = k
        k += 1
        for a in range(begin[s], begin[s + 1]):
            d = nxt[a]
            if not seen[d]:
                seen[d] = True
                queue.append(d)
    if k != n:
        raise PynnetError("Input to SortBreadthFirstSearch must be connected.")
    return state_sort(fst, order)


def _tid_tables(tm: TransitionModel) -> tuple[list[int], list[int]]:
    """phone and pdf-id of each transition-id (index 0 unused), cached on the model."""
    cached = getattr(tm, "_chain_tid_tables", None)
    if cached is None:
        n = tm.num_transition_ids()
        phones = [0] + [tm.transition_id_to_phone(t) for t in range(1, n + 1)]
        pdfs = [int(x) for x in np.asarray(tm.id2pdf_id, np.int64).tolist()]
        cached = (phones, pdfs)
        tm._chain_tid_tables = cached
    return cached


def _enforce_times(tid_fst: Fst, allowed: list[list[int]], tm: TransitionModel,
                   convert_to_pdfs: bool) -> Fst:
    """ComposeDeterministicOnDemand with Kaldi's TimeEnforcerFst, then Connect
    and (with convert_to_pdfs) the projection on pdf-id + 1 labels."""
    T = len(allowed)
    phone_of_tid, pdf_of_tid = _tid_tables(tm)
    allowed_sets = [set(a) for a in allowed]
    begin = tid_fst.arc_begin.tolist()
    il, ns = tid_fst.ilabel.tolist(), tid_fst.nextstate.tolist()
    if any(lab == 0 for lab in il):
        raise PynnetError("epsilon arcs left in the transition-id FST")
    index: dict[tuple[int, int], int] = {}
    states: list[tuple[int, int]] = []
    arcs: list[tuple[int, int, int, int]] = []  # (src, ilabel, olabel, dst)

    def state_of(s: int, t: int) -> int:
        key = (s, t)
        k = index.get(key)
        if k is None:
            k = len(states)
            index[key] = k
            states.append(key)
        return k

    state_of(tid_fst.start, 0)
    k = 0
    while k < len(states):
        s, t = states[k]
        if t < T:
            ok = allowed_sets[t]
            for a in range(begin[s], begin[s + 1]):
                tid = il[a]
                if phone_of_tid[tid] in ok:
                    olabel = pdf_of_tid[tid] + 1 if convert_to_pdfs else tid
                    arcs.append((k, tid, olabel, state_of(ns[a], t + 1)))
        k += 1
    n = len(states)
    final = np.full(n, np.inf, np.float32)
    for k, (s, t) in enumerate(states):
        if t == T and tid_fst.final[s] != np.inf:
            final[k] = tid_fst.final[s]
    # Connect: keep the states on some successful path.  States were numbered
    # frame by frame, so every arc goes to a higher-numbered state and one
    # backward pass over the arcs finds the co-accessible ones.
    src = np.array([a[0] for a in arcs], np.int64)
    dst = np.array([a[3] for a in arcs], np.int64)
    coacc_l = (final != np.inf).tolist()
    for a in reversed(arcs):
        if coacc_l[a[3]]:
            coacc_l[a[0]] = True
    coacc = np.array(coacc_l, bool)
    if not coacc[0]:
        return Fst()
    keep_arc = coacc[src] & coacc[dst] if src.size else np.zeros(0, bool)
    keep = np.flatnonzero(coacc)
    remap = np.full(n, -1, np.int64)
    remap[keep] = np.arange(keep.size)
    lab = np.array([a[2] if convert_to_pdfs else a[1] for a in arcs], np.int64)
    ilab = np.array([a[1] for a in arcs], np.int64)
    if convert_to_pdfs:
        ilab = lab  # Project(PROJECT_OUTPUT): pdf-id + 1 on both sides
    return Fst.from_arcs(keep.size, int(remap[0]), final[keep], remap[src[keep_arc]],
                         ilab[keep_arc], lab[keep_arc],
                         np.zeros(int(keep_arc.sum()), np.float32), remap[dst[keep_arc]])


def proto_supervision_to_supervision(ctx_dep: ContextDependency, tm: TransitionModel,
                                     proto: ProtoSupervision, convert_to_pdfs: bool = True
                                     ) -> Supervision | None:
    """Kaldi's ProtoSupervisionToSupervision; None (with the reason) if the FST is empty."""
    tid = transition_id_fst(proto.fst, ctx_dep, tm, transition_scale=0.0, self_loop_scale=0.0)
    if np.any(tid.ilabel == 0):
        tid = rm_epsilon(tid)
    if tid.num_states == 0:
        raise PynnetError("empty transition-id FST")
    fst = _enforce_times(tid, proto.allowed_phones, tm, convert_to_pdfs)
    if fst.num_states == 0:
        return None
    fst = sort_breadth_first(fst)
    label_dim = tm.num_pdfs() if convert_to_pdfs else tm.num_transition_ids()
    return Supervision(weight=1.0, num_sequences=1, frames_per_sequence=len(proto.allowed_phones),
                       label_dim=label_dim, fst=fst)


def get_supervision(tree_rxfilename: str, trans_model_rxfilename: str, ali_rspecifier: str,
                    supervision_wspecifier: str, opts: SupervisionOptions) -> tuple[int, int]:
    """chain-get-supervision from phone alignments with lengths: returns the
    numbers of utterances done and of errors (each error is warned about)."""
    from ... import log
    from ...io.table import INT32_PAIR_VECTOR_HOLDER, SequentialTableReader, TableWriter
    from ...nnet.transition_model import read_transition_model
    from ...nnet.tree import read_context_dependency
    from .supervision import SUPERVISION_HOLDER

    opts.check()
    tm = read_transition_model(trans_model_rxfilename)
    ctx_dep = read_context_dependency(tree_rxfilename)
    done = errors = 0
    with TableWriter(supervision_wspecifier, SUPERVISION_HOLDER) as writer:
        for key, ali in SequentialTableReader(ali_rspecifier, INT32_PAIR_VECTOR_HOLDER):
            proto = alignment_to_proto_supervision(opts, ali)
            sup = None
            if proto is not None:
                sup = proto_supervision_to_supervision(ctx_dep, tm, proto, opts.convert_to_pdfs)
                if sup is None:
                    log.warn("Supervision FST is empty (too many phones for too few frames?)")
            if sup is None:
                log.warn(f"Failed creating supervision for utterance {key}")
                errors += 1
                continue
            writer.write(key, sup)
            done += 1
    log.log(f"Generated chain supervision information for {done} utterances, errors on {errors}")
    return done, errors
