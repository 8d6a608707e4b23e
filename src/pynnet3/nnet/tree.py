"""Kaldi's phonetic-context decision tree: EventMap and ContextDependency.

A ``tree`` file (what ``build-tree`` writes and ``nnet3-am-init tree topo ...``
reads) is a ContextDependency::

    ContextDependency <N> <P> ToPdf <EventMap> EndContextDependency

``N`` is the context width (1 monophone, 2 biphone, 3 triphone), ``P`` the
position of the central phone.  The EventMap maps an *event* -- a set of
(key, value) pairs: key ``0..N-1`` is the phone at that context position, key
``-1`` (kPdfClass) the HMM state's pdf-class -- to a pdf-id.  Three node kinds
exist, written as tokens in both text and binary form:

* ``CE <answer>``: a constant answer (a leaf);
* ``TE <key> <size> ( child_0 ... child_{size-1} )``: a table indexed by the
  event's value of ``key``; a child may be ``NULL``;
* ``SE <key> [ yes-values ] { yes no }``: a binary split on whether the
  value of ``key`` is in the (sorted) yes-set.

``multi_map`` is Kaldi's MultiMap: every answer an event can reach, where a
key missing from the event means "any value".  The TransitionModel is built
from :meth:`ContextDependency.get_pdf_info` (which (phone, pdf-class) pairs
each pdf-id can belong to) and, for "chain" topologies whose self-loops carry
their own pdf-class, :meth:`ContextDependency.get_pdf_pair_info`.

The table size is a ``uint32``: Kaldi marks unsigned integers in binary files
with the size byte ``-4`` (0xFC), which this module reads and writes itself.
"""
from __future__ import annotations

import bisect
import struct
from typing import Sequence

from .. import log as _logmod
from ..errors import FormatError
from ..io.kaldi_io import (KaldiReader, KaldiWriter, kaldi_object_bytes, open_kaldi_object,
                           write_wxfilename)

K_PDF_CLASS = -1   # the event key of the pdf-class (kPdfClass)

_WS = b" \t\n\r\v\f"


def _read_uint32(r: KaldiReader) -> int:
    """Kaldi's ReadBasicType<uint32>: size byte 0xFC in binary, a number in text."""
    if not r.binary:
        value = r.read_int32()
        if value < 0:
            raise r.error(f"expected an unsigned integer, got {value}")
        return value
    if r.pos + 5 > len(r.data):
        raise r.error("unexpected end of file reading uint32")
    if r.data[r.pos] != 0xFC:
        raise r.error(f"expected uint32 (size byte -4), got size byte {r.data[r.pos]}")
    value = struct.unpack_from("<I", r.data, r.pos + 1)[0]
    r.pos += 5
    return value


def _write_uint32(w: KaldiWriter, value: int) -> None:
    if w.binary:
        w.write_raw(b"\xfc" + struct.pack("<I", int(value)))
    else:
        w.write_raw(f"{int(value)} ")


def _peek(r: KaldiReader) -> str:
    """Kaldi's Peek: the next character (after whitespace in text mode only)."""
    pos = r.pos
    if not r.binary:
        while pos < len(r.data) and r.data[pos] in _WS:
            pos += 1
    return chr(r.data[pos]) if pos < len(r.data) else ""


# ---------------------------------------------------------------------------
# EventMap


class EventMap:
    """Base class of the three node kinds."""

    def multi_map(self, event: dict[int, int], out: list[int]) -> None:
        raise NotImplementedError

    def map(self, event: dict[int, int]) -> int | None:
        """Kaldi's Map: the answer, or None where the event has no answer."""
        raise NotImplementedError

    def write(self, w: KaldiWriter) -> None:
        raise NotImplementedError

    def children(self) -> list["EventMap"]:
        raise NotImplementedError

    def max_result(self) -> int | None:
        """Kaldi's MaxResult: the largest answer of any leaf (None if none)."""
        out: list[int] = []
        self.multi_map({}, out)
        return max(out) if out else None

    def __eq__(self, other: object) -> bool:
        raise NotImplementedError

    def __hash__(self) -> int:  # mutable tree nodes: identity hash
        return id(self)


class ConstantEventMap(EventMap):
    def __init__(self, answer: int) -> None:
        self.answer = int(answer)

    def multi_map(self, event: dict[int, int], out: list[int]) -> None:
        out.append(self.answer)

    def map(self, event: dict[int, int]) -> int | None:
        return self.answer

    def children(self) -> list[EventMap]:
        return []

    def write(self, w: KaldiWriter) -> None:
        w.write_token("CE")
        w.write_int32(self.answer)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstantEventMap) and other.answer == self.answer

    __hash__ = EventMap.__hash__


class TableEventMap(EventMap):
    def __init__(self, key: int, table: Sequence[EventMap | None]) -> None:
        self.key = int(key)
        self.table: list[EventMap | None] = list(table)

    def multi_map(self, event: dict[int, int], out: list[int]) -> None:
        value = event.get(self.key)
        if value is not None:
            if 0 <= value < len(self.table) and self.table[value] is not None:
                self.table[value].multi_map(event, out)
        else:
            # A key the event does not fix: every entry is possible.
            for child in self.table:
                if child is not None:
                    child.multi_map(event, out)

    def map(self, event: dict[int, int]) -> int | None:
        value = event.get(self.key)
        if value is not None and 0 <= value < len(self.table) and self.table[value] is not None:
            return self.table[value].map(event)
        return None

    def children(self) -> list[EventMap]:
        return [c for c in self.table if c is not None]

    def write(self, w: KaldiWriter) -> None:
        w.write_token("TE")
        w.write_int32(self.key)
        _write_uint32(w, len(self.table))
        w.write_token("(")
        for child in self.table:
            if child is None:
                w.write_token("NULL")
            else:
                child.write(w)
        w.write_token(")")
        if not w.binary:
            w.write_raw("\n")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TableEventMap) and other.key == self.key
                and other.table == self.table)

    __hash__ = EventMap.__hash__


class SplitEventMap(EventMap):
    def __init__(self, key: int, yes_set: Sequence[int], yes: EventMap, no: EventMap) -> None:
        if yes is None or no is None:
            raise FormatError("SplitEventMap: NULL child")
        self.key = int(key)
        # Kept as read (Kaldi writes it sorted and searches it by bisection).
        self.yes_set: list[int] = [int(v) for v in yes_set]
        self.yes = yes
        self.no = no
        # A sorted set (what Kaldi writes) is searched by hashing: the same answers.
        ordered = all(a < b for a, b in zip(self.yes_set, self.yes_set[1:]))
        self._members = frozenset(self.yes_set) if ordered else None

    def _is_yes(self, value: int) -> bool:
        if self._members is not None:
            return value in self._members
        i = bisect.bisect_left(self.yes_set, value)
        return i < len(self.yes_set) and self.yes_set[i] == value

    def multi_map(self, event: dict[int, int], out: list[int]) -> None:
        value = event.get(self.key)
        if value is not None:
            (self.yes if self._is_yes(value) else self.no).multi_map(event, out)
        else:
            self.yes.multi_map(event, out)
            self.no.multi_map(event, out)

    def map(self, event: dict[int, int]) -> int | None:
        value = event.get(self.key)
        if value is None:
            return None
        return (self.yes if self._is_yes(value) else self.no).map(event)

    def children(self) -> list[EventMap]:
        return [self.yes, self.no]

    def write(self, w: KaldiWriter) -> None:
        w.write_token("SE")
        w.write_int32(self.key)
        w.write_int_vector(self.yes_set)
        w.write_token("{")
        self.yes.write(w)
        self.no.write(w)
        w.write_token("}")
        if not w.binary:
            w.write_raw("\n")

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SplitEventMap) and other.key == self.key
                and other.yes_set == self.yes_set and other.yes == self.yes
                and other.no == self.no)

    __hash__ = EventMap.__hash__


def read_event_map(r: KaldiReader) -> EventMap | None:
    """Kaldi's EventMap::Read (None for ``NULL``)."""
    c = _peek(r)
    if c == "N":
        r.expect_token("NULL")
        return None
    if c == "C":
        r.expect_token("CE")
        return ConstantEventMap(r.read_int32())
    if c == "T":
        r.expect_token("TE")
        key = r.read_int32()
        size = _read_uint32(r)
        r.expect_token("(")
        table = [read_event_map(r) for _ in range(size)]
        r.expect_token(")")
        return TableEventMap(key, table)
    if c == "S":
        r.expect_token("SE")
        key = r.read_int32()
        yes_set = r.read_int_vector()
        r.expect_token("{")
        yes = read_event_map(r)
        no = read_event_map(r)
        r.expect_token("}")
        if yes is None or no is None:
            raise r.error("SplitEventMap::Read, NULL pointers.")
        return SplitEventMap(key, yes_set, yes, no)
    raise r.error(f"EventMap::read, was not expecting character {c!r}")


def write_event_map(w: KaldiWriter, emap: EventMap | None) -> None:
    if emap is None:
        w.write_token("NULL")
    else:
        emap.write(w)


# ---------------------------------------------------------------------------
# ContextDependency


class ContextDependency:
    """Kaldi's ContextDependency: context width N, central position P, to-pdf map."""

    def __init__(self, context_width: int = 0, central_position: int = 0,
                 to_pdf: EventMap | None = None) -> None:
        self.context_width = int(context_width)
        self.central_position = int(central_position)
        self.to_pdf = to_pdf

    def num_pdfs(self) -> int:
        """One plus the largest pdf-id of any leaf (0 for an empty tree)."""
        if self.to_pdf is None:
            return 0
        best = self.to_pdf.max_result()
        if best is None:
            _logmod.warn("EventMap::MaxResult(), empty result")
            return 0
        return best + 1 if best >= 0 else 0

    def compute(self, phone_seq: Sequence[int], pdf_class: int) -> int | None:
        """The pdf-id of ``pdf_class`` of the central phone in context ``phone_seq``
        (0 stands for "no phone" at an utterance edge); None if the tree has none."""
        if len(phone_seq) != self.context_width:
            raise ValueError(f"ContextDependency::Compute: need {self.context_width} phones, "
                             f"got {len(phone_seq)}")
        event = {K_PDF_CLASS: int(pdf_class)}
        event.update((i, int(p)) for i, p in enumerate(phone_seq))
        return None if self.to_pdf is None else self.to_pdf.map(event)

    def _pdfs_of(self, event: dict[int, int]) -> list[int]:
        out: list[int] = []
        self.to_pdf.multi_map(event, out)
        return sorted(set(out))

    def get_pdf_info(self, phones: Sequence[int],
                     num_pdf_classes: Sequence[int]) -> list[list[tuple[int, int]]]:
        """For each pdf-id, the sorted (phone, pdf-class) pairs it can stand for
        (Kaldi's GetPdfInfo for ordinary HMMs); ``num_pdf_classes`` is indexed by phone."""
        pdf_info: list[list[tuple[int, int]]] = [[] for _ in range(self.num_pdfs())]
        for phone in phones:
            if not 0 <= phone < len(num_pdf_classes):
                raise FormatError(f"GetPdfInfo: phone {phone} has no number of pdf-classes")
            for pos in range(num_pdf_classes[phone]):
                pdfs = self._pdfs_of({self.central_position: phone, K_PDF_CLASS: pos})
                if not pdfs:
                    _logmod.warn(f"ContextDependency::GetPdfInfo, no pdfs returned for position "
                                 f"{pos} of phone {phone}.   Continuing but this is a serious "
                                 f"error.")
                for pdf in pdfs:
                    if not 0 <= pdf < len(pdf_info):
                        raise FormatError(f"GetPdfInfo: pdf-id {pdf} out of range")
                    pdf_info[pdf].append((phone, pos))
        for pairs in pdf_info:
            pairs.sort()
            if any(a == b for a, b in zip(pairs, pairs[1:])):
                raise FormatError("GetPdfInfo: duplicate (phone, pdf-class) pairs")
        return pdf_info

    def get_pdf_pair_info(
            self, phones: Sequence[int],
            pdf_class_pairs: Sequence[Sequence[tuple[int, int]]],
    ) -> list[list[list[tuple[int, int]]]]:
        """Kaldi's GetPdfInfo for topologies with separate self-loop pdf-classes.

        ``pdf_class_pairs[phone]`` lists (forward pdf-class, self-loop pdf-class)
        of the phone's emitting states; the answer, indexed the same way, lists
        the sorted (forward pdf-id, self-loop pdf-id) pairs each can produce.
        """
        max_phone = max(phones)
        pdf_info: list[list[list[tuple[int, int]]]] = [[] for _ in range(max_phone + 1)]
        window = [-1] * self.context_width
        for phone in phones:
            classes = pdf_class_pairs[phone]
            pdf_info[phone] = [[] for _ in classes]
            for j, (pdf_class, self_loop_pdf_class) in enumerate(classes):
                window[self.central_position] = phone
                pairs: set[tuple[int, int]] = set()
                self._enumerate_pairs(phones, self_loop_pdf_class, pdf_class, window, pairs)
                pdf_info[phone][j] = sorted(pairs)
        return pdf_info

    def _enumerate_pairs(self, phones: Sequence[int], self_loop_pdf_class: int,
                         forward_pdf_class: int, window: list[int],
                         pairs: set[tuple[int, int]]) -> None:
        """Kaldi's EnumeratePairs: fix more context positions (nearest the
        centre first) until the forward or the self-loop pdf is determined."""
        known = {i: p for i, p in enumerate(window) if p >= 0}
        forward = self._pdfs_of({**known, K_PDF_CLASS: forward_pdf_class})
        if self_loop_pdf_class < 0:
            pairs.update((f, -1) for f in forward)
            return
        self_loop = self._pdfs_of({**known, K_PDF_CLASS: self_loop_pdf_class})
        if len(forward) == 1 or len(self_loop) == 1:
            pairs.update((f, s) for f in forward for s in self_loop)
            return
        n, p = self.context_width, self.central_position
        position, min_dist = 0, n - 1
        for i in range(n):
            dist = abs(p - i)
            if window[i] == -1 and dist < min_dist:
                position, min_dist = i, dist
        if min_dist >= n or position == p:
            raise FormatError("ContextDependency::EnumeratePairs: no free context position "
                              "(tree and topology do not fit)")
        new_window = list(window)
        # Phone 0 in a non-central position means "no phone" (utterance edge).
        for value in [0, *phones]:
            new_window[position] = value
            self._enumerate_pairs(phones, self_loop_pdf_class, forward_pdf_class,
                                  new_window, pairs)

    # -- I/O -------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        r.expect_token("ContextDependency")
        self.context_width = r.read_int32()
        self.central_position = r.read_int32()
        tok = r.read_token()
        if tok == "ToLength":   # an old field, read and ignored as Kaldi does
            read_event_map(r)
            tok = r.read_token()
        if tok != "ToPdf":
            raise r.error(f"Got unexpected token {tok[:40]} reading context-dependency object.")
        self.to_pdf = read_event_map(r)
        r.expect_token("EndContextDependency")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("ContextDependency")
        w.write_int32(self.context_width)
        w.write_int32(self.central_position)
        w.write_token("ToPdf")
        write_event_map(w, self.to_pdf)
        w.write_token("EndContextDependency")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ContextDependency):
            return NotImplemented
        return (self.context_width == other.context_width
                and self.central_position == other.central_position
                and self.to_pdf == other.to_pdf)

    __hash__ = None  # type: ignore[assignment]


def read_context_dependency(rxfilename: str) -> ContextDependency:
    """A tree file (ReadKaldiObject of a ContextDependency), text or binary."""
    r = open_kaldi_object(rxfilename)
    ctx_dep = ContextDependency()
    ctx_dep.read(r)
    return ctx_dep


def write_context_dependency(wxfilename: str, ctx_dep: ContextDependency,
                             binary: bool = True) -> None:
    """Write a tree file as Kaldi's WriteKaldiObject does."""
    w = KaldiWriter(binary)
    ctx_dep.write(w)
    write_wxfilename(wxfilename, kaldi_object_bytes(w))


def monophone_context_dependency(phones: Sequence[int],
                                 num_pdf_classes: Sequence[int]) -> ContextDependency:
    """Kaldi's MonophoneContextDependency: N=1, P=0, one pdf-id per (phone,
    pdf-class), numbered in phone order (GetStubMap with no shared roots).

    ``num_pdf_classes`` is indexed by phone (HmmTopology.get_phone_to_num_pdf_classes).
    """
    phones = [int(p) for p in phones]
    if not phones or phones != sorted(set(phones)) or phones[0] < 0:
        raise ValueError("monophone_context_dependency: phones must be sorted, unique, >= 0")
    counter = [0]

    def stub(sets: list[int]) -> EventMap:
        if len(sets) == 1:
            n = int(num_pdf_classes[sets[0]])
            if n <= 0:
                raise ValueError(f"phone {sets[0]} has no pdf-classes")
            leaves: list[EventMap | None] = []
            for _ in range(n):
                leaves.append(ConstantEventMap(counter[0]))
                counter[0] += 1
            return TableEventMap(K_PDF_CLASS, leaves)
        if len(sets) <= 2 * max(sets):
            table: list[EventMap | None] = [None] * (max(sets) + 1)
            for phone in sets:
                table[phone] = stub([phone])
            return TableEventMap(0, table)
        # Very sparse phone ids: split the list in halves instead of a table.
        half = len(sets) // 2
        first = stub(sets[:half])
        return SplitEventMap(0, sets[:half], first, stub(sets[half:]))

    return ContextDependency(1, 0, stub(phones))
