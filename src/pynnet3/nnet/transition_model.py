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
import ctypes
import ctypes.util
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from .. import log as _logmod
from ..errors import FormatError
from ..io.kaldi_io import (KaldiReader, KaldiWriter, kaldi_object_bytes, open_kaldi_object,
                           write_wxfilename)

if TYPE_CHECKING:
    from .tree import ContextDependency

K_NO_PDF = -1

F32 = np.float32


# ---------------------------------------------------------------------------
# Kaldi's float Log() and Exp() are the C library's logf and expf; NumPy's own
# float32 log/exp differ from glibc's in the last bit for a good fraction of
# inputs, and log-probabilities are written to the model, so we call libm.


def _load_libm() -> ctypes.CDLL | None:
    for name in (ctypes.util.find_library("m"), "libm.so.6", None):
        try:
            lib = ctypes.CDLL(name)
            lib.logf.restype = ctypes.c_float
            lib.logf.argtypes = [ctypes.c_float]
            lib.expf.restype = ctypes.c_float
            lib.expf.argtypes = [ctypes.c_float]
            return lib
        except (OSError, AttributeError):
            continue
    return None


_LIBM = _load_libm()


def logf(values: np.ndarray | float) -> np.ndarray:
    """Kaldi's Log(float) elementwise: the C library's logf, as float32."""
    a = np.asarray(values, dtype=F32)
    if _LIBM is None:   # no C library found: correctly rounded (nearly always the same)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(a.astype(np.float64)).astype(F32)
    f = _LIBM.logf
    return np.array([f(x) for x in a.reshape(-1).tolist()], dtype=F32).reshape(a.shape)


def expf(values: np.ndarray | float) -> np.ndarray:
    """Kaldi's Exp(float) elementwise: the C library's expf, as float32."""
    a = np.asarray(values, dtype=F32)
    if _LIBM is None:
        with np.errstate(over="ignore"):
            return np.exp(a.astype(np.float64)).astype(F32)
    f = _LIBM.expf
    return np.array([f(x) for x in a.reshape(-1).tolist()], dtype=F32).reshape(a.shape)

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

    # -- construction from a tree and a topology --------------------------
    @classmethod
    def from_tree(cls, ctx_dep: "ContextDependency", topo: HmmTopology) -> "TransitionModel":
        """Kaldi's TransitionModel(ctx_dep, topo): one transition-state per
        (phone, HMM state, forward pdf, self-loop pdf) the tree allows, sorted;
        log-probabilities initialised from the topology's transition probabilities."""
        tm = cls()
        tm.topo = topo
        phones = topo.phones
        if not phones:
            raise FormatError("TransitionModel: the topology has no phones")
        if topo.is_hmm():
            tuples = tm._tuples_is_hmm(ctx_dep)
        else:
            tuples = tm._tuples_not_hmm(ctx_dep)
        tm.tuples = sorted(tuples)
        tm.compute_derived()
        tm._initialize_probs()
        err = tm.check()
        if err is not None:
            raise FormatError(err)
        tm.compute_derived_of_probs()
        return tm

    def _tuples_is_hmm(self, ctx_dep: "ContextDependency") -> list[TransitionTuple]:
        topo = self.topo
        phones = topo.phones
        num_pdf_classes = [-1] * (max(phones) + 1)
        for phone in phones:
            num_pdf_classes[phone] = topo.num_pdf_classes(phone)
        pdf_info = ctx_dep.get_pdf_info(phones, num_pdf_classes)
        # (phone, pdf-class) -> the HMM states of that phone emitting that pdf-class.
        states_of: dict[tuple[int, int], list[int]] = {}
        for phone in phones:
            for j, state in enumerate(topo.topology_for_phone(phone)):
                if state.forward_pdf_class != K_NO_PDF:
                    states_of.setdefault((phone, state.forward_pdf_class), []).append(j)
        tuples = []
        for pdf, pairs in enumerate(pdf_info):
            for phone, pdf_class in pairs:
                states = states_of.get((phone, pdf_class))
                if not states:
                    raise FormatError(f"TransitionModel: the tree gives pdf {pdf} to pdf-class "
                                      f"{pdf_class} of phone {phone}, which its topology lacks")
                tuples.extend(TransitionTuple(phone, s, pdf, pdf) for s in states)
        return tuples

    def _tuples_not_hmm(self, ctx_dep: "ContextDependency") -> list[TransitionTuple]:
        topo = self.topo
        phones = topo.phones
        max_phone = max(phones)
        class_pairs: list[list[tuple[int, int]]] = [[] for _ in range(max_phone + 1)]
        states_of: list[dict[tuple[int, int], list[int]]] = [{} for _ in range(max_phone + 1)]
        for phone in phones:
            for j, state in enumerate(topo.topology_for_phone(phone)):
                if state.forward_pdf_class != K_NO_PDF:
                    pair = (state.forward_pdf_class, state.self_loop_pdf_class)
                    class_pairs[phone].append(pair)
                    states_of[phone].setdefault(pair, []).append(j)
        pdf_info = ctx_dep.get_pdf_pair_info(phones, class_pairs)
        tuples = []
        for phone in phones:
            for j, pair in enumerate(class_pairs[phone]):
                for s in states_of[phone][pair]:
                    tuples.extend(TransitionTuple(phone, s, pdf, loop_pdf)
                                  for pdf, loop_pdf in pdf_info[phone][j])
        return tuples

    def _initialize_probs(self) -> None:
        """log_probs[tid] = logf(the topology's probability of that transition)."""
        n = self.num_transition_ids()
        probs = np.zeros(n + 1, dtype=F32)
        for tstate, t in enumerate(self.tuples, start=1):
            first = int(self.state2id[tstate])
            for index, (_dst, prob) in enumerate(
                    self.topo.topology_for_phone(t.phone)[t.hmm_state].transitions):
                if prob <= 0.0:
                    raise FormatError("TransitionModel::InitializeProbs, zero probability "
                                      "[should remove that entry in the topology]")
                if prob > 1.0:
                    _warn("TransitionModel::InitializeProbs, prob greater than one.")
                probs[first + index] = prob
        log_probs = np.zeros(n + 1, dtype=F32)
        log_probs[1:] = logf(probs[1:])
        self.log_probs = log_probs

    # -- statistics and the maximum-likelihood update -----------------------
    def init_stats(self) -> np.ndarray:
        """Zero counts indexed by transition-id (element 0 unused): Kaldi's InitStats."""
        return np.zeros(self.num_transition_ids() + 1, dtype=np.float64)

    def accumulate(self, stats: np.ndarray, prob: float, trans_id: int) -> None:
        if not 0 <= trans_id <= self.num_transition_ids():
            raise FormatError(f"transition-id {trans_id} out of range "
                              f"(the model has {self.num_transition_ids()})")
        stats[trans_id] += float(F32(prob))

    def accumulate_alignment(self, stats: np.ndarray, alignment: np.ndarray | list[int]) -> None:
        """Add one count per frame for each transition-id of ``alignment``."""
        ali = np.asarray(alignment, dtype=np.int64).reshape(-1)
        if ali.size and (ali.min() < 0 or ali.max() > self.num_transition_ids()):
            bad = ali[(ali < 0) | (ali > self.num_transition_ids())][0]
            raise FormatError(f"transition-id {int(bad)} out of range "
                              f"(the model has {self.num_transition_ids()})")
        # Integer counts: summing them in any order is exact.
        stats += np.bincount(ali, minlength=stats.shape[0]).astype(np.float64)

    def mle_update(self, stats: np.ndarray,
                   cfg: "MleTransitionUpdateConfig") -> tuple[float, float]:
        """Kaldi's MleUpdate: new transition probabilities from counts.

        Returns (total objective improvement, total count), both float32 values
        as Kaldi accumulates them, and logs Kaldi's two summary lines.
        """
        if cfg.share_for_pdfs:
            return self._mle_update_shared(stats, cfg)
        stats = np.asarray(stats, dtype=np.float64)
        if stats.shape[0] != self.num_transition_ids() + 1:
            raise FormatError(f"transition stats have dimension {stats.shape[0]}, expected "
                              f"{self.num_transition_ids() + 1}")
        count_sum, objf_sum = F32(0.0), F32(0.0)
        num_skipped = num_floored = 0
        floor, mincount = F32(cfg.floor), F32(cfg.mincount)
        for tstate in range(1, self.num_transition_states() + 1):
            first = int(self.state2id[tstate])
            n = int(self.state2id[tstate + 1]) - first
            if n <= 1:   # nothing to estimate
                continue
            counts = stats[first:first + n]
            tot = _sum_f64(counts)
            count_sum = F32(float(count_sum) + tot)
            if tot < mincount:
                num_skipped += 1
                continue
            new_probs, floored, objf = self._estimate(counts, tot, first, floor)
            num_floored += floored
            for c in objf:
                objf_sum = F32(float(objf_sum) + c)
            self._commit(first, new_probs)
        _logmod.log(f"TransitionModel::Update, objf change is {_g(F32(objf_sum / count_sum))} "
                    f"per frame over {_g(count_sum)} frames. ")
        _logmod.log(f"{num_floored} probabilities floored, {num_skipped} out of "
                    f"{self.num_transition_states()} transition-states skipped due to "
                    f"insuffient data (it is normal to have some skipped.)")
        self.compute_derived_of_probs()
        return float(objf_sum), float(count_sum)

    def _mle_update_shared(self, stats: np.ndarray,
                           cfg: "MleTransitionUpdateConfig") -> tuple[float, float]:
        """MleUpdate with --share-for-pdfs: states with the same pdf pool their
        counts and get the same probabilities (Kaldi's MleUpdateShared)."""
        stats = np.asarray(stats, dtype=np.float64)
        if stats.shape[0] != self.num_transition_ids() + 1:
            raise FormatError(f"transition stats have dimension {stats.shape[0]}, expected "
                              f"{self.num_transition_ids() + 1}")
        is_hmm = self.is_hmm()
        pdf_to_tstates: dict[int, set[int]] = {}
        for tstate, t in enumerate(self.tuples, start=1):
            pdf_to_tstates.setdefault(t.forward_pdf, set()).add(tstate)
            if not is_hmm:
                pdf_to_tstates.setdefault(t.self_loop_pdf, set()).add(tstate)
        count_sum, objf_sum = F32(0.0), F32(0.0)
        num_skipped = num_floored = 0
        floor, mincount = F32(cfg.floor), F32(cfg.mincount)
        for pdf in sorted(pdf_to_tstates):
            tstates = sorted(pdf_to_tstates[pdf])
            one = tstates[0]
            n = self.num_transition_indices(one)
            if n <= 1:
                continue
            counts = np.zeros(n, dtype=np.float64)
            for tstate in tstates:
                if self.num_transition_indices(tstate) != n:
                    raise FormatError("Mismatch in #transition indices: you cannot use the "
                                      "--share-for-pdfs option with this topology and sharing "
                                      "scheme.")
                first = int(self.state2id[tstate])
                counts += stats[first:first + n]
            tot = _sum_f64(counts)
            count_sum = F32(float(count_sum) + tot)
            if tot < mincount:
                num_skipped += 1
                continue
            # The old probabilities are taken from the first state (the
            # objective assumes they were already shared).
            new_probs, floored, objf = self._estimate(counts, tot, int(self.state2id[one]),
                                                      floor)
            num_floored += floored
            for c in objf:
                objf_sum = F32(float(objf_sum) + c)
            for tstate in tstates:
                self._commit(int(self.state2id[tstate]), new_probs)
        _logmod.log(f"Objf change is {_g(F32(objf_sum / count_sum))} per frame over "
                    f"{_g(count_sum)} frames; {num_floored} probabilities floored, "
                    f"{num_skipped} pdf-ids skipped due to insuffient data.")
        self.compute_derived_of_probs()
        return float(objf_sum), float(count_sum)

    def _estimate(self, counts: np.ndarray, tot: float, old_first: int,
                  floor: np.float32) -> tuple[np.ndarray, int, list[float]]:
        """Normalised, floored probabilities from ``counts`` (float32, as Kaldi),
        the number floored, and each transition's objective change (doubles);
        the old probabilities are those of the transition-ids from ``old_first``."""
        # Kaldi's float Sum() (OpenBLAS's order); imported here, as the
        # components are not needed just to read a transition model.
        from .components.base import blas_sum

        n = counts.shape[0]
        old_probs = expf(self.log_probs[old_first:old_first + n])
        with np.errstate(divide="ignore", invalid="ignore"):
            new_probs = (counts / np.float64(tot)).astype(F32)
            for _ in range(3):   # Kaldi floors and renormalises three times
                new_probs = np.maximum(kaldi_normalize(new_probs, blas_sum), floor)
        floored = int(np.count_nonzero(new_probs == floor))
        with np.errstate(divide="ignore", invalid="ignore"):
            diff = logf(new_probs) - logf(old_probs)
        objf = [float(c) * float(d) for c, d in zip(counts.tolist(), diff.tolist())]
        return new_probs, floored, objf

    def _commit(self, first: int, new_probs: np.ndarray) -> None:
        logs = logf(new_probs)
        if not np.all(np.isfinite(logs)):
            raise FormatError("Log probs is inf or NaN: error in update or bad stats?")
        self.log_probs[first:first + new_probs.shape[0]] = logs

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


def kaldi_scale(vec: np.ndarray, alpha: float) -> np.ndarray:
    """Kaldi's ``VectorBase<float>::Scale(alpha)``: OpenBLAS's sscal, which
    (in the 0.3.21 Kaldi links) sets the vector to zero for alpha 0 *or NaN*
    instead of multiplying, so NaN and inf elements disappear.  That is what
    rescues Kaldi's transition update of a state with no counts (0/0 probabilities,
    then a NaN scale): the floor then applies and the probabilities become uniform."""
    a = F32(alpha)
    if a == 0.0 or np.isnan(a):
        return np.zeros_like(np.asarray(vec, dtype=F32))
    with np.errstate(over="ignore", invalid="ignore"):
        return (np.asarray(vec, dtype=F32) * a).astype(F32)


def kaldi_normalize(vec: np.ndarray, float_sum) -> np.ndarray:
    """Kaldi's ``v.Scale(1.0 / v.Sum())`` of a float vector: the reciprocal in
    double (inf or NaN for a zero or NaN sum, as in C++), then :func:`kaldi_scale`.
    ``float_sum`` is Kaldi's float Sum() (``nnet.components.base.blas_sum``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.float64(1.0) / np.float64(float_sum(vec))
    return kaldi_scale(vec, float(alpha))


def _g(value: float) -> str:
    """A float as C++'s ``operator<<`` prints it (precision 6)."""
    return "%.6g" % float(value)


def _sum_f64(values: np.ndarray) -> float:
    """Vector<double>::Sum of a few counts, left to right."""
    total = 0.0
    for v in values.tolist():
        total += v
    return total


@dataclass
class MleTransitionUpdateConfig:
    """Kaldi's MleTransitionUpdateConfig (options of the transition update)."""

    floor: float = field(default=0.01, metadata={
        "flag": "transition-floor", "help": "Floor for transition probabilities"})
    mincount: float = field(default=5.0, metadata={
        "flag": "transition-min-count",
        "help": "Minimum count required to update transitions from a state"})
    share_for_pdfs: bool = field(default=False, metadata={
        "flag": "share-for-pdfs",
        "help": "If true, share all transition parameters where the states have the same pdf."})


def read_topology(rxfilename: str) -> HmmTopology:
    """A topology file (``topo``), text or binary."""
    r = open_kaldi_object(rxfilename)
    topo = HmmTopology()
    topo.read(r)
    return topo


def write_topology(wxfilename: str, topo: HmmTopology, binary: bool = False) -> None:
    """Write a topology file as Kaldi's WriteKaldiObject does (text by default,
    the form recipes keep in ``lang/topo``)."""
    w = KaldiWriter(binary)
    topo.write(w)
    write_wxfilename(wxfilename, kaldi_object_bytes(w))


def read_transition_model(rxfilename: str) -> TransitionModel:
    """The TransitionModel at the head of a file (a ``.mdl`` or a bare one);
    whatever follows it is not read."""
    r = open_kaldi_object(rxfilename)
    tm = TransitionModel()
    tm.read(r)
    return tm
