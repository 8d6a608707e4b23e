"""The phone language model of 'chain' training (Kaldi's chain::LanguageModelEstimator,
used by ``chain-est-phone-lm``).

An un-smoothed phone n-gram with a 'hard' backoff: history states of length
``>= no_prune_ngram_order`` may be removed entirely (their counts move to the
state with one less phone of history) until the number of states with counts is
``num_basic_states + num_extra_lm_states``, removing first the states whose removal
costs the least training-data log-likelihood.  There are no backoff arcs: the
output is an epsilon-free deterministic acceptor over phones, each state's arcs
and final weight being its relative counts (phone 0 = end of sentence = final).

Everything that decides which states are removed follows Kaldi's arithmetic:
log-likelihoods summed in double and rounded to float, their differences in
float, the priority queue ordered on (float change, state index), Kaldi's
ApproxEqual test for stale queue entries, and the states numbered in creation
order, so the resulting FST is the same, state for state, as Kaldi's.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from ... import log
from ...errors import PynnetError
from .fst import Fst

f32 = np.float32


@dataclass
class LanguageModelOptions:
    ngram_order: int = field(default=4, metadata={
        "flag": "ngram-order",
        "help": "n-gram order for the phone language model used for the 'denominator model'"})
    num_extra_lm_states: int = field(default=1000, metadata={
        "flag": "num-extra-lm-states",
        "help": "Number of LM states desired on top of the number determined by the "
                "--no-prune-ngram-order option."})
    no_prune_ngram_order: int = field(default=3, metadata={
        "flag": "no-prune-ngram-order",
        "help": "n-gram order below which the language model is not pruned (should probably "
                "be set the same as your --context-width for phone context in tree building, "
                "to make the graph as compact as possible)"})


def _approx_equal(a: np.float32, b: np.float32, rel: float = 0.001) -> bool:
    """Kaldi's ApproxEqual(float, float) in float arithmetic."""
    if a == b:
        return True
    diff = abs(f32(a) - f32(b))
    if not np.isfinite(diff):
        return False
    return bool(diff <= f32(rel) * (abs(f32(a)) + abs(f32(b))))


class _LmState:
    __slots__ = ("history", "counts", "tot_count", "tot_count_with_parents",
                 "backoff", "fst_state", "backoff_allowed")

    def __init__(self, history: tuple[int, ...]) -> None:
        self.history = history
        self.counts: dict[int, int] = {}
        self.tot_count = 0
        self.tot_count_with_parents = 0
        self.backoff = -1
        self.fst_state = -1
        self.backoff_allowed = False

    def add_count(self, phone: int, count: int) -> None:
        self.counts[phone] = self.counts.get(phone, 0) + count
        self.tot_count += count

    def clear(self) -> None:
        self.counts = {}
        self.tot_count = 0
        # Kaldi's Clear() sets this to 'false', i.e. zero; BackoffAllowed() of
        # the shorter history looks at it.
        self.tot_count_with_parents = 0
        self.backoff_allowed = False


def _log_like(counts: dict[int, int], tot: int) -> np.float32:
    """sum over phones of count * log(count / tot), in double, as a float."""
    ans = 0.0
    for phone in sorted(counts):
        c = counts[phone]
        ans += math.log(c * 1.0 / tot) * c
    return f32(ans)


class LanguageModelEstimator:
    """Kaldi's chain::LanguageModelEstimator: ``add_counts`` per phone sequence,
    then ``estimate`` gives the FST."""

    def __init__(self, opts: LanguageModelOptions) -> None:
        if opts.ngram_order < 1 or opts.no_prune_ngram_order < 1:
            raise PynnetError("--ngram-order and --no-prune-ngram-order must be >= 1")
        self.opts = opts
        self.states: list[_LmState] = []
        self.index: dict[tuple[int, ...], int] = {}
        self.num_active = 0
        self.num_basic = 0
        self.queue: list[tuple[float, int]] = []

    # -- counting ------------------------------------------------------------

    def add_counts(self, sentence: list[int]) -> None:
        order = self.opts.ngram_order
        if order < 2:
            raise PynnetError("--ngram-order must be >= 2")
        if order < self.opts.no_prune_ngram_order:
            raise PynnetError("--ngram-order must be >= --no-prune-ngram-order")
        history: list[int] = [0]  # 0 is the beginning-of-sentence context
        for phone in sentence:
            if phone == 0:
                raise PynnetError("phone sequences must not contain zero")
            self._increment(tuple(history), int(phone))
            history.append(int(phone))
            if len(history) >= order:
                del history[0]
        self._increment(tuple(history), 0)  # end of sentence

    def _increment(self, history: tuple[int, ...], phone: int) -> None:
        st = self.states[self._find_or_create(history)]
        if st.tot_count == 0:
            self.num_active += 1
        st.add_count(phone, 1)

    def _find_or_create(self, hist: tuple[int, ...]) -> int:
        ans = self.index.get(hist)
        if ans is not None:
            return ans
        ans = len(self.states)
        self.states.append(_LmState(hist))
        self.index[hist] = ans
        if len(hist) >= self.opts.no_prune_ngram_order:
            self.states[ans].backoff = self._find_or_create(hist[1:])
        return ans

    def _find_nonzero(self, hist: tuple[int, ...]) -> int:
        while True:
            idx = self.index.get(hist, -1)
            if idx == -1 or self.states[idx].tot_count == 0:
                if not hist:
                    raise PynnetError("Error looking up LM state index for history "
                                      "(likely code bug)")
                hist = hist[1:]
            else:
                return idx

    # -- pruning -------------------------------------------------------------

    def _set_parent_counts(self) -> None:
        for idx, st in enumerate(self.states):
            c = st.tot_count
            j = idx
            while j != -1:
                self.states[j].tot_count_with_parents += c
                j = self.states[j].backoff

    def _check_active_states(self) -> int:
        active = sum(1 for st in self.states if st.tot_count != 0)
        if active != self.num_active:
            raise PynnetError("LanguageModelEstimator: inconsistent count of active states")
        return sum(1 for st in self.states
                   if len(st.history) == self.opts.no_prune_ngram_order - 1)

    def _backoff_allowed(self, idx: int) -> bool:
        st = self.states[idx]
        if len(st.history) < self.opts.no_prune_ngram_order:
            return False
        if st.tot_count != st.tot_count_with_parents or st.tot_count == 0:
            return False
        if len(st.history) == self.opts.ngram_order - 1:
            return True
        for phone in st.counts:
            if phone != 0:
                nxt = self.index.get(st.history + (phone,), -1)
                if nxt != -1 and self.states[nxt].tot_count_with_parents != 0:
                    return False
        return True

    def _like_change(self, idx: int) -> np.float32:
        st = self.states[idx]
        if not st.backoff_allowed or st.backoff < 0 or st.tot_count == 0:
            raise PynnetError("LanguageModelEstimator: backing off a state that may not be")
        bst = self.states[st.backoff]
        if bst.tot_count == 0:
            return f32(-1.0e-15 * st.tot_count)
        merged = dict(bst.counts)
        for p, c in st.counts.items():
            merged[p] = merged.get(p, 0) + c
        change = (_log_like(merged, bst.tot_count + st.tot_count)
                  - _log_like(st.counts, st.tot_count) - _log_like(bst.counts, bst.tot_count))
        if not change < 0.1:
            raise PynnetError("LanguageModelEstimator: positive log-likelihood change")
        return f32(0.0) if change > 0.0 else f32(change)

    def _push(self, change: np.float32, idx: int) -> None:
        # std::priority_queue<pair<float,int>> pops the largest pair first.
        heapq.heappush(self.queue, (-float(change), -idx))

    def _initialize_queue(self) -> None:
        self.queue = []
        for idx, st in enumerate(self.states):
            st.backoff_allowed = self._backoff_allowed(idx)
            if st.backoff_allowed:
                self._push(self._like_change(idx), idx)

    def _back_off_state(self, idx: int) -> None:
        st = self.states[idx]
        bidx = st.backoff
        bst = self.states[bidx]
        had_allowed = bst.backoff_allowed
        if bst.tot_count != 0:
            self.num_active -= 1
        for p, c in sorted(st.counts.items()):
            bst.add_count(p, c)
        st.clear()
        bst.backoff_allowed = self._backoff_allowed(bidx)
        if not had_allowed and bst.backoff_allowed:
            self._push(self._like_change(bidx), bidx)

    def _do_backoff(self) -> None:
        initial = self.num_active
        target = self.num_basic + self.opts.num_extra_lm_states
        num_targets = 4
        # C++ integer division truncates toward zero.
        targets = [initial + int((target - initial) * (t + 1) / num_targets)
                   for t in range(num_targets)]
        for this_target in targets:
            self._initialize_queue()
            while self.num_active > this_target and self.queue:
                neg_change, neg_idx = heapq.heappop(self.queue)
                change, idx = f32(-neg_change), -neg_idx
                recomputed = self._like_change(idx)
                if not _approx_equal(change, recomputed):
                    self._push(recomputed, idx)
                else:
                    self._back_off_state(idx)
        log.log(f"In LM [hard] backoff, target num states was {self.num_basic} + "
                f"--num-extra-lm-states={self.opts.num_extra_lm_states} = {target}, "
                f"pruned from {initial} to {self.num_active}")

    # -- output --------------------------------------------------------------

    def estimate(self) -> Fst:
        o = self.opts
        log.log(f"Estimating language model with --no-prune-ngram-order={o.no_prune_ngram_order}"
                f", --ngram-order={o.ngram_order}, --num-extra-lm-states={o.num_extra_lm_states}")
        if not self.states:
            raise PynnetError("no phone sequences were seen: cannot estimate a phone LM")
        self._set_parent_counts()
        self.num_basic = self._check_active_states()
        self._do_backoff()
        self._check_active_states()
        n = 0
        for st in self.states:
            if st.tot_count != 0:
                st.fst_state = n
                n += 1
        return self._output_to_fst(n)

    def _output_to_fst(self, num_states: int) -> Fst:
        start = self.states[self._find_nonzero((0,))].fst_state
        final = np.full(num_states, np.inf, np.float32)
        src: list[int] = []
        dst: list[int] = []
        lab: list[int] = []
        wt: list[float] = []
        tot_count = 0
        tot_logprob = 0.0
        for st in self.states:
            if st.fst_state == -1:
                continue
            for phone in sorted(st.counts):
                count = st.counts[phone]
                logprob = f32(math.log(count * 1.0 / st.tot_count))
                tot_count += count
                tot_logprob += float(logprob * f32(count))
                if phone == 0:
                    final[st.fst_state] = -logprob
                else:
                    dest = self.states[self._find_nonzero(st.history + (phone,))].fst_state
                    src.append(st.fst_state)
                    dst.append(dest)
                    lab.append(phone)
                    wt.append(-logprob)
        perplexity = f32(math.exp(-(tot_logprob / tot_count)))
        log.log(f"Total number of phone instances seen was {tot_count}")
        log.log(f"Perplexity on training data is: {float(perplexity):.6g}")
        log.log("Note: perplexity on unseen data will be infinity as there is no smoothing.  "
                "This is by design, to reduce the number of arcs.")
        fst = Fst.from_arcs(num_states, start, final, src, lab, lab, wt, dst)
        # Arcs are already in phone order within each state (Kaldi arc-sorts).
        fst.properties = PHONE_LM_PROPERTIES
        log.log(f"Created phone language model with {num_states} states and "
                f"{fst.num_arcs} arcs.")
        return fst


# What OpenFst knows about the LM when Kaldi writes it (after Connect and
# ArcSort): expanded, mutable, acceptor, no epsilons, i/o-label sorted,
# accessible, co-accessible.
PHONE_LM_PROPERTIES = 0x5005A810003


def estimate_phone_lm(sequences, opts: LanguageModelOptions) -> Fst:
    """The phone LM of the given phone sequences (an iterable of int lists)."""
    est = LanguageModelEstimator(opts)
    for seq in sequences:
        est.add_counts(list(seq))
    return est.estimate()
