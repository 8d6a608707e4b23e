"""Kaldi's HMM topology and TransitionModel, as stored at the head of a ``.mdl``.

An acoustic-model file (``final.mdl``) is a TransitionModel followed by the
acoustic model proper (for nnet3, an AmNnetSimple).  We only need to read the
TransitionModel faithfully, keep it, and write it back byte-for-byte, plus the
integer mappings a decoder needs (transition-id -> pdf-id and friends).

Data is kept in plain Python / NumPy structures:

* ``HmmTopology.entries``: list of topology entries, each a list of
  :class:`HmmState` (forward / self-loop pdf-class and ``(dst, prob)`` pairs);
  ``phones`` (sorted) and ``phone2idx`` (phone -> entry index, -1 = none) are
  kept exactly as read because the binary format stores them verbatim.
* ``TransitionModel.tuples``: list of :class:`TransitionTuple`
  ``(phone, hmm_state, forward_pdf, self_loop_pdf)``; transition-state ``s``
  is ``tuples[s - 1]``.
* ``TransitionModel.log_probs``: float32 vector indexed by transition-id
  (element 0 unused, as in Kaldi).

Kaldi's on-disk variants handled on reading: binary topologies with and
without the ``-1`` marker that announces separate self-loop pdf-classes; text
topologies using ``<PdfClass>`` or ``<ForwardPdfClass>``/``<SelfLoopPdfClass>``;
``<Triples>`` (legacy, self-loop pdf = forward pdf) or ``<Tuples>`` tuple
lists; log-probs stored as float or double vectors.  Two tolerances go beyond
Kaldi's own reader and never change what is written: ``<Tuple>``/``</Tuple>``
tokens wrapped around individual tuples are skipped, and a missing
``</TransitionModel>`` is accepted.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .. import log as _logmod
from ..errors import FormatError
from ..io.kaldi_io import KaldiReader, KaldiWriter

K_NO_PDF = -1

_WS = b" \t\n\r\v\f"
_INT_RE = re.compile(r"\s*[+-]?[0-9]+")


def _next_token_is(r: KaldiReader, token: str) -> bool:
    """True when the next token in ``r`` is ``token`` (nothing is consumed).

    Compares bytes in place rather than peeking a whole word: in binary mode
    the next item may be a size-prefixed number, whose bytes need not contain
    any whitespace for a long stretch.
    """
    data, pos = r.data, r.pos
    while pos < len(data) and data[pos] in _WS:
        pos += 1
    tok = token.encode()
    end = pos + len(tok)
    return data.startswith(tok, pos) and (end == len(data) or data[end] in _WS)


def _parse_int(r: KaldiReader, word: str, what: str) -> int:
    """A decimal integer as Kaldi's ConvertStringToInteger accepts it."""
    if not _INT_RE.fullmatch(word) or not -2 ** 31 <= int(word) < 2 ** 31:
        raise r.error(f"reading HmmTopology, expected {what} (an int32), got {word[:40]}")
    return int(word)


# ---------------------------------------------------------------------------
# HmmTopology


@dataclass
class HmmState:
    """One state of a topology entry.

    ``self_loop_pdf_class`` equals ``forward_pdf_class`` in ordinary HMMs; the
    two differ only in "chain"-style topologies that label the self-loop with
    its own pdf-class.  ``transitions`` lists ``(destination_state, prob)``.
    """

    forward_pdf_class: int = K_NO_PDF
    self_loop_pdf_class: int = K_NO_PDF
    transitions: list[tuple[int, float]] = field(default_factory=list)


class HmmTopology:
    """Kaldi's HmmTopology: which HMM each phone uses."""

    def __init__(self) -> None:
        self.phones: list[int] = []
        self.phone2idx: list[int] = []
        self.entries: list[list[HmmState]] = []

    # -- queries ---------------------------------------------------------
    def topology_for_phone(self, phone: int) -> list[HmmState]:
        if phone < 0 or phone >= len(self.phone2idx) or self.phone2idx[phone] < 0:
            raise FormatError(f"TopologyForPhone(): phone {phone} not covered")
        return self.entries[self.phone2idx[phone]]

    def is_hmm(self) -> bool:
        """True unless some state has a distinct self-loop pdf-class."""
        if not self.phones:
            raise FormatError("HmmTopology::IsHmm(): empty topology")
        for phone in self.phones:
            for state in self.topology_for_phone(phone):
                if state.forward_pdf_class != state.self_loop_pdf_class:
                    return False
        return True

    def num_pdf_classes(self, phone: int) -> int:
        best = 0
        for state in self.topology_for_phone(phone):
            best = max(best, state.forward_pdf_class, state.self_loop_pdf_class)
        return best + 1

    def get_phone_to_num_pdf_classes(self) -> list[int]:
        if not self.phones:
            raise FormatError("HmmTopology: no phones")
        ans = [-1] * (self.phones[-1] + 1)
        for p in self.phones:
            ans[p] = self.num_pdf_classes(p)
        return ans

    def min_length(self, phone: int) -> int:
        """Fewest emitting states a path through ``phone``'s HMM can visit."""
        entry = self.topology_for_phone(phone)
        big = 2 ** 31 - 1
        lengths = [big] * len(entry)
        lengths[0] = 0 if entry[0].forward_pdf_class == K_NO_PDF else 1
        changed = True
        while changed:
            changed = False
            for s, state in enumerate(entry):
                if lengths[s] == big:
                    continue
                for dst, _prob in state.transitions:
                    cand = lengths[s] + (0 if entry[dst].forward_pdf_class == K_NO_PDF else 1)
                    if cand < lengths[dst]:
                        lengths[dst] = cand
                        # Only a backward arc can invalidate states already visited.
                        if dst < s:
                            changed = True
        if lengths[-1] == big:
            raise FormatError(f"HmmTopology: final state of phone {phone} is unreachable")
        return lengths[-1]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HmmTopology):
            return NotImplemented
        return (self.phones == other.phones and self.phone2idx == other.phone2idx
                and self.entries == other.entries)

    # -- I/O -------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        r.expect_token("<Topology>")
        if r.binary:
            self._read_binary(r)
        else:
            self._read_text(r)
        err = self.check()
        if err is not None:
            raise r.error(err)

    def _read_binary(self, r: KaldiReader) -> None:
        self.phones = r.read_int_vector()
        self.phone2idx = r.read_int_vector()
        num_entries = r.read_int32()
        # A leading -1 announces that each state stores a separate self-loop
        # pdf-class (Kaldi writes it only for non-HMM topologies).
        separate_self_loop = num_entries == -1
        if separate_self_loop:
            num_entries = r.read_int32()
        if num_entries < 0:
            raise r.error(f"bad number of topology entries {num_entries}")
        entries: list[list[HmmState]] = []
        for _ in range(num_entries):
            num_states = r.read_int32()
            if num_states < 0:
                raise r.error(f"bad number of states {num_states}")
            entry = []
            for _ in range(num_states):
                fwd = r.read_int32()
                loop = r.read_int32() if separate_self_loop else fwd
                num_trans = r.read_int32()
                if num_trans < 0:
                    raise r.error(f"bad number of transitions {num_trans}")
                trans = []
                for _ in range(num_trans):
                    dst = r.read_int32()
                    trans.append((dst, r.read_float()))
                entry.append(HmmState(fwd, loop, trans))
            entries.append(entry)
        self.entries = entries
        r.expect_token("</Topology>")

    def _read_text(self, r: KaldiReader) -> None:
        phones: list[int] = []
        phone2idx: list[int] = []
        entries: list[list[HmmState]] = []
        while True:
            tok = r.read_token()
            if tok == "</Topology>":
                break
            if tok != "<TopologyEntry>":
                raise r.error(f"reading HmmTopology, expected </Topology> or <TopologyEntry>, got {tok[:40]}")
            r.expect_token("<ForPhones>")
            entry_phones: list[int] = []
            while True:
                s = r.read_token()
                if s == "</ForPhones>":
                    break
                entry_phones.append(_parse_int(r, s, "integer"))
            entry: list[HmmState] = []
            tok = r.read_token()
            while tok != "</TopologyEntry>":
                if tok != "<State>":
                    raise r.error(f"expected </TopologyEntry> or <State>, got {tok[:40]}")
                state_id = r.read_int32()
                if state_id != len(entry):
                    raise r.error(f"states are expected to be in order from zero, "
                                  f"expected {len(entry)}, got {state_id}")
                tok = r.read_token()
                if tok == "<PdfClass>":
                    pdf_class = r.read_int32()
                    entry.append(HmmState(pdf_class, pdf_class))
                    tok = r.read_token()
                    if tok == "<SelfLoopPdfClass>":
                        raise r.error("pdf classes should be defined using <PdfClass> "
                                      "or a <ForwardPdfClass>/<SelfLoopPdfClass> pair")
                elif tok == "<ForwardPdfClass>":
                    fwd = r.read_int32()
                    tok = r.read_token()
                    if tok != "<SelfLoopPdfClass>":
                        raise r.error(f"expected <SelfLoopPdfClass>, got {tok[:40]}")
                    loop = r.read_int32()
                    entry.append(HmmState(fwd, loop))
                    tok = r.read_token()
                else:
                    entry.append(HmmState(K_NO_PDF, K_NO_PDF))
                while tok == "<Transition>":
                    dst = r.read_int32()
                    entry[-1].transitions.append((dst, r.read_float()))
                    tok = r.read_token()
                if tok == "<Final>":
                    raise r.error("old-format topology (<Final>) is not supported")
                if tok != "</State>":
                    raise r.error(f"expected </State>, got {tok[:40]}")
                tok = r.read_token()
            index = len(entries)
            entries.append(entry)
            for phone in entry_phones:
                if phone <= 0:
                    raise r.error(f"reading HmmTopology, invalid phone {phone}")
                if len(phone2idx) <= phone:
                    phone2idx.extend([-1] * (phone + 1 - len(phone2idx)))
                if phone2idx[phone] != -1:
                    raise r.error(f"phone {phone} appears in multiple topology entries")
                phone2idx[phone] = index
                phones.append(phone)
        phones.sort()
        self.phones = phones
        self.phone2idx = phone2idx
        self.entries = entries

    def write(self, w: KaldiWriter) -> None:
        is_hmm = self.is_hmm()
        w.write_token("<Topology>")
        if not w.binary:
            w.write_raw("\n")
            for i, entry in enumerate(self.entries):
                w.write_token("<TopologyEntry>")
                w.write_raw("\n")
                w.write_token("<ForPhones>")
                w.write_raw("\n")
                # Phones are listed by scanning phone2idx, so in increasing order.
                w.write_raw("".join(f"{p} " for p, idx in enumerate(self.phone2idx) if idx == i))
                w.write_raw("\n")
                w.write_token("</ForPhones>")
                w.write_raw("\n")
                for j, state in enumerate(entry):
                    w.write_token("<State>")
                    w.write_int32(j)
                    if state.forward_pdf_class != K_NO_PDF:
                        if is_hmm:
                            w.write_token("<PdfClass>")
                            w.write_int32(state.forward_pdf_class)
                        else:
                            w.write_token("<ForwardPdfClass>")
                            w.write_int32(state.forward_pdf_class)
                            w.write_token("<SelfLoopPdfClass>")
                            w.write_int32(state.self_loop_pdf_class)
                    for dst, prob in state.transitions:
                        w.write_token("<Transition>")
                        w.write_int32(dst)
                        w.write_float(prob)
                    w.write_token("</State>")
                    w.write_raw("\n")
                w.write_token("</TopologyEntry>")
                w.write_raw("\n")
        else:
            w.write_int_vector(self.phones)
            w.write_int_vector(self.phone2idx)
            if not is_hmm:
                w.write_int32(-1)
            w.write_int32(len(self.entries))
            for entry in self.entries:
                w.write_int32(len(entry))
                for state in entry:
                    w.write_int32(state.forward_pdf_class)
                    if not is_hmm:
                        w.write_int32(state.self_loop_pdf_class)
                    w.write_int32(len(state.transitions))
                    for dst, prob in state.transitions:
                        w.write_int32(dst)
                        w.write_float(prob)
        w.write_token("</Topology>")
        if not w.binary:
            w.write_raw("\n")

    def check(self) -> str | None:
        """Kaldi's HmmTopology::Check: the first problem found, or None."""
        if not self.entries or not self.phones or not self.phone2idx:
            return "HmmTopology::Check(), empty object"
        seen = [False] * len(self.entries)
        for phone in self.phones:
            if (phone < 0 or phone >= len(self.phone2idx)
                    or not 0 <= self.phone2idx[phone] < len(self.entries)):
                return f"HmmTopology::Check(), phone {phone} has no valid index"
            seen[self.phone2idx[phone]] = True
        for i, entry in enumerate(self.entries):
            if not seen[i]:
                return f"HmmTopology::Check(), entry {i} has no corresponding phones"
            n = len(entry)
            if n <= 1:
                return "HmmTopology::Check(), an entry must have at least one emitting state"
            if entry[-1].transitions:
                return "HmmTopology::Check(), last state must have no transitions"
            if entry[-1].forward_pdf_class != K_NO_PDF:
                return "HmmTopology::Check(), last state must not be emitting"
            has_trans_in = [False] * n
            pdf_classes: set[int] = set()
            for j, state in enumerate(entry):
                if state.forward_pdf_class != K_NO_PDF:
                    pdf_classes.add(state.forward_pdf_class)
                    pdf_classes.add(state.self_loop_pdf_class)
                # Kaldi sums the probabilities in float.
                tot = np.float32(0.0)
                dsts: set[int] = set()
                for k, (dst, prob) in enumerate(state.transitions):
                    tot = np.float32(tot + np.float32(prob))
                    if prob <= 0.0:
                        return "HmmTopology::Check(), negative or zero transition prob"
                    if dst == n - 1 and state.forward_pdf_class == K_NO_PDF:
                        return ("HmmTopology::Check(), a non-emitting state may not have "
                                "a transition to the final state")
                    if dst < 0 or dst >= n:
                        return f"HmmTopology::Check(), invalid dest state {dst}"
                    if dst in dsts:
                        return "HmmTopology::Check(), duplicate transition found"
                    # Kaldi compares the destination with the transition's
                    # index (not the state id) here; we accept and reject
                    # exactly the same topologies it does.
                    if dst == k and state.self_loop_pdf_class == K_NO_PDF:
                        return "HmmTopology::Check(), non-emitting states cannot have self-loops"
                    dsts.add(dst)
                    has_trans_in[dst] = True
                if j + 1 < n:
                    if not tot > 0.0:
                        return "HmmTopology::Check(), non-final state must have transitions out"
                    if abs(float(tot) - 1.0) > 0.01:
                        _warn("Total probability for state %d in topology entry is %s",
                                     j, "%.6g" % tot)
                elif tot != 0.0:
                    return "HmmTopology::Check(), final state must have no transitions"
            for j in range(1, n):
                if not has_trans_in[j]:
                    return f"HmmTopology::Check(), state {j} has no input transitions"
            ordered = sorted(pdf_classes)
            if not ordered or ordered[0] != 0 or ordered[-1] != len(ordered) - 1:
                return ("HmmTopology::Check(), pdf_classes are expected to be "
                        "contiguous and start from zero")
        return None


# ---------------------------------------------------------------------------
# TransitionModel


class TransitionTuple(NamedTuple):
    """A transition-state: phone, HMM state and the pdf-ids it emits.

    Tuple ordering is field order, which is Kaldi's Tuple::operator<.
    """

    phone: int
    hmm_state: int
    forward_pdf: int
    self_loop_pdf: int


class TransitionModel:
    """Kaldi's TransitionModel (read, write, integer mappings)."""

    def __init__(self) -> None:
        self.topo = HmmTopology()
        self.tuples: list[TransitionTuple] = []
        self.log_probs = np.zeros(0, dtype=np.float32)
        # Derived (recomputed after reading):
        self.state2id = np.zeros(0, dtype=np.int32)   # transition-state -> first transition-id
        self.id2state = np.zeros(0, dtype=np.int32)   # transition-id -> transition-state
        self.id2pdf_id = np.zeros(0, dtype=np.int32)  # transition-id -> pdf-id
        self.non_self_loop_log_probs = np.zeros(0, dtype=np.float32)
        self._num_pdfs = 0

    # -- sizes -----------------------------------------------------------
    def num_pdfs(self) -> int:
        """One plus the highest pdf-id any tuple mentions (Kaldi's NumPdfs)."""
        return self._num_pdfs

    def num_transition_ids(self) -> int:
        return max(len(self.id2state) - 1, 0)

    def num_transition_states(self) -> int:
        return len(self.tuples)

    def num_phones(self) -> int:
        """The highest phone id in any tuple (Kaldi's NumPhones)."""
        return max([t.phone for t in self.tuples], default=0)

    def get_phones(self) -> list[int]:
        return self.topo.phones

    def is_hmm(self) -> bool:
        return self.topo.is_hmm()

    # -- integer mappings ----------------------------------------------
    def _check_tid(self, trans_id: int) -> None:
        if not 0 < trans_id < len(self.id2state):
            raise IndexError(f"transition-id {trans_id} out of range 1..{self.num_transition_ids()}")

    def _check_tstate(self, trans_state: int) -> None:
        if not 0 < trans_state <= len(self.tuples):
            raise IndexError(f"transition-state {trans_state} out of range 1..{len(self.tuples)}")

    def tuple_to_transition_state(self, phone: int, hmm_state: int, pdf: int,
                                  self_loop_pdf: int) -> int:
        key = TransitionTuple(phone, hmm_state, pdf, self_loop_pdf)
        pos = bisect.bisect_left(self.tuples, key)
        if pos == len(self.tuples) or self.tuples[pos] != key:
            raise FormatError("TupleToTransitionState: tuple not found (incompatible tree and model?)")
        return pos + 1

    def pair_to_transition_id(self, trans_state: int, trans_index: int) -> int:
        self._check_tstate(trans_state)
        if not 0 <= trans_index < self.num_transition_indices(trans_state):
            raise IndexError(f"transition-index {trans_index} out of range")
        return int(self.state2id[trans_state]) + trans_index

    def num_transition_indices(self, trans_state: int) -> int:
        return int(self.state2id[trans_state + 1] - self.state2id[trans_state])

    def transition_id_to_transition_state(self, trans_id: int) -> int:
        self._check_tid(trans_id)
        return int(self.id2state[trans_id])

    def transition_id_to_transition_index(self, trans_id: int) -> int:
        self._check_tid(trans_id)
        return trans_id - int(self.state2id[self.id2state[trans_id]])

    def transition_state_to_phone(self, trans_state: int) -> int:
        self._check_tstate(trans_state)
        return self.tuples[trans_state - 1].phone

    def transition_state_to_hmm_state(self, trans_state: int) -> int:
        self._check_tstate(trans_state)
        return self.tuples[trans_state - 1].hmm_state

    def transition_state_to_forward_pdf(self, trans_state: int) -> int:
        self._check_tstate(trans_state)
        return self.tuples[trans_state - 1].forward_pdf

    def transition_state_to_self_loop_pdf(self, trans_state: int) -> int:
        self._check_tstate(trans_state)
        return self.tuples[trans_state - 1].self_loop_pdf

    def transition_state_to_forward_pdf_class(self, trans_state: int) -> int:
        t = self.tuples[trans_state - 1]
        return self.topo.topology_for_phone(t.phone)[t.hmm_state].forward_pdf_class

    def transition_state_to_self_loop_pdf_class(self, trans_state: int) -> int:
        t = self.tuples[trans_state - 1]
        return self.topo.topology_for_phone(t.phone)[t.hmm_state].self_loop_pdf_class

    def transition_id_to_pdf(self, trans_id: int) -> int:
        self._check_tid(trans_id)
        return int(self.id2pdf_id[trans_id])

    def transition_id_to_pdf_array(self) -> np.ndarray:
        """pdf-id of every transition-id (index 0 unused)."""
        return self.id2pdf_id

    def transition_id_to_phone(self, trans_id: int) -> int:
        return self.tuples[self.transition_id_to_transition_state(trans_id) - 1].phone

    def transition_id_to_hmm_state(self, trans_id: int) -> int:
        return self.tuples[self.transition_id_to_transition_state(trans_id) - 1].hmm_state

    def transition_id_to_pdf_class(self, trans_id: int) -> int:
        t = self.tuples[self.transition_id_to_transition_state(trans_id) - 1]
        state = self.topo.topology_for_phone(t.phone)[t.hmm_state]
        return state.self_loop_pdf_class if self.is_self_loop(trans_id) else state.forward_pdf_class

    def _transition_of(self, trans_id: int) -> tuple[TransitionTuple, list[HmmState], int]:
        self._check_tid(trans_id)
        tstate = int(self.id2state[trans_id])
        index = trans_id - int(self.state2id[tstate])
        t = self.tuples[tstate - 1]
        return t, self.topo.topology_for_phone(t.phone), index

    def is_self_loop(self, trans_id: int) -> bool:
        t, entry, index = self._transition_of(trans_id)
        trans = entry[t.hmm_state].transitions
        return index < len(trans) and trans[index][0] == t.hmm_state

    def is_final(self, trans_id: int) -> bool:
        """True if ``trans_id`` enters the final (non-emitting) state of its phone."""
        t, entry, index = self._transition_of(trans_id)
        return entry[t.hmm_state].transitions[index][0] + 1 == len(entry)

    def self_loop_of(self, trans_state: int) -> int:
        """The self-loop transition-id of ``trans_state``, or 0 if it has none."""
        self._check_tstate(trans_state)
        t = self.tuples[trans_state - 1]
        for index, (dst, _p) in enumerate(self.topo.topology_for_phone(t.phone)[t.hmm_state].transitions):
            if dst == t.hmm_state:
                return self.pair_to_transition_id(trans_state, index)
        return 0

    def get_transition_log_prob(self, trans_id: int) -> float:
        return float(self.log_probs[trans_id])

    def get_transition_prob(self, trans_id: int) -> float:
        return float(np.exp(self.log_probs[trans_id]))

    def get_non_self_loop_log_prob(self, trans_state: int) -> float:
        if trans_state == 0:
            raise IndexError("transition-state 0 does not exist")
        return float(self.non_self_loop_log_probs[trans_state])

    def get_transition_log_prob_ignoring_self_loops(self, trans_id: int) -> float:
        return float(np.float32(self.log_probs[trans_id]
                                - self.non_self_loop_log_probs[self.transition_id_to_transition_state(trans_id)]))

    # -- derived quantities ------------------------------------------------
    def compute_derived(self) -> None:
        """Transition-id numbering: the transitions of each state, in tuple order."""
        n = len(self.tuples)
        counts = np.zeros(n, dtype=np.int64)
        num_pdfs = 0
        # Per (phone, HMM state): whether each of its transitions is a self-loop
        # (thousands of tuples share a few topologies).
        loops_of: dict[tuple[int, int], list[bool]] = {}
        tuple_loops: list[list[bool]] = []
        for i, t in enumerate(self.tuples):
            key = (t.phone, t.hmm_state)
            loops = loops_of.get(key)
            if loops is None:
                entry = self.topo.topology_for_phone(t.phone)
                if not 0 <= t.hmm_state < len(entry):
                    raise FormatError(f"TransitionModel: tuple {i + 1} names HMM state "
                                      f"{t.hmm_state} but phone {t.phone} has {len(entry)} "
                                      f"states")
                loops = [dst == t.hmm_state for dst, _ in entry[t.hmm_state].transitions]
                loops_of[key] = loops
            tuple_loops.append(loops)
            counts[i] = len(loops)
            num_pdfs = max(num_pdfs, 1 + t.forward_pdf, 1 + t.self_loop_pdf)
        self._num_pdfs = num_pdfs
        state2id = np.ones(n + 2, dtype=np.int64)
        state2id[0] = 0  # unused; transition-states are one-based
        state2id[2:] = 1 + np.cumsum(counts)
        num_ids_plus_one = int(state2id[n + 1])
        id2state = np.zeros(num_ids_plus_one, dtype=np.int32)
        id2pdf = np.zeros(num_ids_plus_one, dtype=np.int32)
        # Transition-id 0 is unused; ids 1.. belong to transition-states in order.
        id2state[1:] = np.repeat(np.arange(1, n + 1, dtype=np.int32), counts)
        is_loop = np.fromiter((x for loops in tuple_loops for x in loops), dtype=bool,
                              count=num_ids_plus_one - 1)
        forward = np.array([t.forward_pdf for t in self.tuples], dtype=np.int32)
        self_loop = np.array([t.self_loop_pdf for t in self.tuples], dtype=np.int32)
        id2pdf[1:] = np.where(is_loop, np.repeat(self_loop, counts), np.repeat(forward, counts))
        self.state2id = state2id.astype(np.int32)
        self.id2state = id2state
        self.id2pdf_id = id2pdf
        self._self_loop_index = {key: (loops.index(True) if True in loops else -1)
                                 for key, loops in loops_of.items()}

    def compute_derived_of_probs(self) -> None:
        """log(1 - self-loop prob) of each transition-state, in float like Kaldi."""
        n = len(self.tuples)
        out = np.zeros(n + 1, dtype=np.float32)
        loop_index = getattr(self, "_self_loop_index", None)
        if loop_index is not None and len(self.state2id) == n + 2:
            # Vectorised: the same float32 arithmetic as the loop below.
            index = np.array([loop_index[(t.phone, t.hmm_state)] for t in self.tuples],
                             dtype=np.int64)
            has_loop = np.nonzero(index >= 0)[0]
            tids = self.state2id[1:n + 1].astype(np.int64)[has_loop] + index[has_loop]
            self_loop_prob = np.exp(np.asarray(self.log_probs, dtype=np.float32)[tids])
            non_self_loop = (1.0 - self_loop_prob.astype(np.float64)).astype(np.float32)
            for bad in np.nonzero(non_self_loop <= 0.0)[0].tolist():
                _warn("ComputeDerivedOfProbs(): non-self-loop prob is %s",
                      "%.6g" % non_self_loop[bad])
                non_self_loop[bad] = np.float32(1.0e-10)
            out[has_loop + 1] = np.log(non_self_loop)
            self.non_self_loop_log_probs = out
            return
        for tstate in range(1, n + 1):
            tid = self.self_loop_of(tstate)
            if tid == 0:
                continue
            self_loop_prob = np.exp(np.float32(self.log_probs[tid]))
            non_self_loop_prob = np.float32(1.0 - float(self_loop_prob))
            if non_self_loop_prob <= 0.0:
                _warn("ComputeDerivedOfProbs(): non-self-loop prob is %s",
                             "%.6g" % non_self_loop_prob)
                non_self_loop_prob = np.float32(1.0e-10)
            out[tstate] = np.log(non_self_loop_prob)
        self.non_self_loop_log_probs = out

    def check(self) -> str | None:
        """Kaldi's TransitionModel::Check: the first problem found, or None."""
        if self.num_transition_ids() == 0 or self.num_transition_states() == 0:
            return "TransitionModel is empty"
        if any(b <= a for a, b in zip(self.tuples, self.tuples[1:])):
            return "TransitionModel: tuples are not sorted and unique"
        # Kaldi indexes log-probs by transition-id without a size check; a
        # longer vector is tolerated (and written back as it was).
        if self.log_probs.shape[0] < self.num_transition_ids() + 1:
            return (f"TransitionModel: log-probs have dimension {self.log_probs.shape[0]}, "
                    f"expected {self.num_transition_ids() + 1}")
        lp = self.log_probs[1:self.num_transition_ids() + 1]
        if not (np.all(np.isfinite(lp)) and np.all(lp <= 0.0)):
            return "TransitionModel: log-probs must be finite and non-positive"
        return None

    # -- I/O -------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        r.expect_token("<TransitionModel>")
        topo = HmmTopology()
        topo.read(r)
        self.topo = topo
        tok = r.read_token()
        if tok not in ("<Tuples>", "<Triples>"):
            raise r.error(f"expected <Tuples> or <Triples>, got {tok[:40]}")
        with_self_loop = tok == "<Tuples>"
        size = r.read_int32()
        if size < 0:
            raise r.error(f"bad number of tuples {size}")
        tuples = []
        for _ in range(size):
            wrapped = _next_token_is(r, "<Tuple>")
            if wrapped:
                r.read_token()
            phone = r.read_int32()
            hmm_state = r.read_int32()
            fwd = r.read_int32()
            loop = r.read_int32() if with_self_loop else fwd
            if wrapped and _next_token_is(r, "</Tuple>"):
                r.read_token()
            tuples.append(TransitionTuple(phone, hmm_state, fwd, loop))
        tok = r.read_token()
        if tok not in ("</Triples>", "</Tuples>"):
            raise r.error(f"expected </Tuples> or </Triples>, got {tok[:40]}")
        self.tuples = tuples
        try:
            self.compute_derived()
        except FormatError as e:
            raise r.error(str(e)) from None
        r.expect_token("<LogProbs>")
        self.log_probs = r.read_vector()
        r.expect_token("</LogProbs>")
        if _next_token_is(r, "</TransitionModel>"):
            r.read_token()
        err = self.check()
        if err is not None:
            raise r.error(err)
        self.compute_derived_of_probs()

    def write(self, w: KaldiWriter) -> None:
        is_hmm = self.is_hmm()
        w.write_token("<TransitionModel>")
        if not w.binary:
            w.write_raw("\n")
        self.topo.write(w)
        w.write_token("<Triples>" if is_hmm else "<Tuples>")
        w.write_int32(len(self.tuples))
        if not w.binary:
            w.write_raw("\n")
        for t in self.tuples:
            w.write_int32(t.phone)
            w.write_int32(t.hmm_state)
            w.write_int32(t.forward_pdf)
            if not is_hmm:
                w.write_int32(t.self_loop_pdf)
            if not w.binary:
                w.write_raw("\n")
        w.write_token("</Triples>" if is_hmm else "</Tuples>")
        if not w.binary:
            w.write_raw("\n")
        w.write_token("<LogProbs>")
        if not w.binary:
            w.write_raw("\n")
        w.write_vector(self.log_probs)
        w.write_token("</LogProbs>")
        if not w.binary:
            w.write_raw("\n")
        w.write_token("</TransitionModel>")
        if not w.binary:
            w.write_raw("\n")

    def __eq__(self, other: object) -> bool:
        """Kaldi's Compatible() plus equal log-probs."""
        if not isinstance(other, TransitionModel):
            return NotImplemented
        return (self.topo == other.topo and self.tuples == other.tuples
                and np.array_equal(self.log_probs, other.log_probs))

    def compatible(self, other: TransitionModel) -> bool:
        """Same topology, tuples and pdf count (Kaldi's Compatible)."""
        return (self.topo == other.topo and self.tuples == other.tuples
                and self._num_pdfs == other._num_pdfs)


def _warn(fmt: str, *args: object) -> None:
    _logmod.warn(fmt % args if args else fmt)
