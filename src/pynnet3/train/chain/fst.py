"""OpenFst's StdArc FSTs as arrays: the binary ``vector`` and ``compact_acceptor``
formats, Kaldi's text form, property bits, and conversion to/from kaldifst.

Chain training handles thousands of small FSTs (one per example), so they are
held here as plain NumPy arrays rather than as OpenFst objects:

* ``start``: the start state (-1 when the FST has no states);
* ``final``: float32 final weight per state (``inf`` is TropicalWeight::Zero());
* ``arc_begin``: int64 offsets, arcs of state ``s`` are ``arc_begin[s]:arc_begin[s+1]``;
* ``ilabel``, ``olabel``, ``nextstate`` (int32) and ``weight`` (float32) per arc,
  in the order OpenFst stores them.

kaldifst (OpenFst in Python) is used only for the algorithms (composition,
determinization, minimization, epsilon removal); :func:`to_kaldifst` and
:func:`from_kaldifst` convert.

File formats (OpenFst ``FstHeader`` then the body, all little-endian):

* header: int32 magic 2125659606, the FST type and arc type as (int32 length,
  bytes), int32 version, int32 flags, uint64 properties, int64 start,
  int64 number of states, int64 number of arcs;
* ``vector`` (version 2): per state the float final weight, an int64 arc count
  and the arcs as (int32 ilabel, int32 olabel, float weight, int32 nextstate);
* ``compact_acceptor`` (version 2; Kaldi's ``StdCompactAcceptorFst``, how
  chain supervision is stored in binary): ``num_states + 1`` uint32 offsets
  into the element array, then the elements (int32 label, float weight, int32
  nextstate); a state's final weight comes first among its elements, as the
  element (-1, weight, -1).

The properties word in the header is what OpenFst knew about the FST when it
was written.  For the compact format OpenFst tests all of them
(``Properties(kCopyProperties, true)``), which :func:`compute_properties`
reproduces; an FST read from a file keeps the word it was read with so that a
copy is byte-identical.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from ...arraytools import sorted_unique
from ...errors import FormatError

FST_MAGIC = 2125659606

# Property bits (OpenFst properties.h).
kExpanded = 0x1
kMutable = 0x2
kError = 0x4
kAcceptor = 0x10000
kNotAcceptor = 0x20000
kIDeterministic = 0x40000
kNonIDeterministic = 0x80000
kODeterministic = 0x100000
kNonODeterministic = 0x200000
kEpsilons = 0x400000
kNoEpsilons = 0x800000
kIEpsilons = 0x1000000
kNoIEpsilons = 0x2000000
kOEpsilons = 0x4000000
kNoOEpsilons = 0x8000000
kILabelSorted = 0x10000000
kNotILabelSorted = 0x20000000
kOLabelSorted = 0x40000000
kNotOLabelSorted = 0x80000000
kWeighted = 0x100000000
kUnweighted = 0x200000000
kCyclic = 0x400000000
kAcyclic = 0x800000000
kInitialCyclic = 0x1000000000
kInitialAcyclic = 0x2000000000
kTopSorted = 0x4000000000
kNotTopSorted = 0x8000000000
kAccessible = 0x10000000000
kNotAccessible = 0x20000000000
kCoAccessible = 0x40000000000
kNotCoAccessible = 0x80000000000
kString = 0x100000000000
kNotString = 0x200000000000
kWeightedCycles = 0x400000000000
kUnweightedCycles = 0x800000000000
kBinaryProperties = 0x7
kTrinaryProperties = 0x0000FFFFFFFF0000
kPosTrinaryProperties = kTrinaryProperties & 0x5555555555555555
kNegTrinaryProperties = kTrinaryProperties & 0xAAAAAAAAAAAAAAAA
kCopyProperties = kError | kTrinaryProperties
kFstProperties = kBinaryProperties | kTrinaryProperties

_ARC_DTYPE = np.dtype([("ilabel", "<i4"), ("olabel", "<i4"), ("weight", "<f4"), ("nextstate", "<i4")])
_COMPACT_DTYPE = np.dtype([("label", "<i4"), ("weight", "<f4"), ("nextstate", "<i4")])
_HEADER_TAIL = struct.Struct("<iiQqqq")


def known_properties(props: int) -> int:
    """OpenFst's KnownProperties: the bits whose value ``props`` determines."""
    return (kBinaryProperties | (props & kTrinaryProperties)
            | ((props & kPosTrinaryProperties) << 1) | ((props & kNegTrinaryProperties) >> 1))


@dataclass
class Fst:
    """An FST over the tropical semiring (OpenFst's StdVectorFst) as arrays."""

    start: int = -1
    final: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    arc_begin: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    ilabel: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    olabel: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    weight: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    nextstate: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    # The property word read with the FST (None for FSTs built in memory:
    # their properties are computed when they are written).
    properties: int | None = None

    @property
    def num_states(self) -> int:
        return int(self.final.shape[0])

    @property
    def num_arcs(self) -> int:
        return int(self.ilabel.shape[0])

    def arc_state(self) -> np.ndarray:
        """The source state of every arc."""
        return np.repeat(np.arange(self.num_states, dtype=np.int32), np.diff(self.arc_begin))

    def copy(self) -> "Fst":
        return Fst(self.start, self.final.copy(), self.arc_begin.copy(), self.ilabel.copy(),
                   self.olabel.copy(), self.weight.copy(), self.nextstate.copy(), self.properties)

    def __eq__(self, other: object) -> bool:
        """Same states, arcs and weights in the same order (OpenFst's Equal with delta 0)."""
        if not isinstance(other, Fst):
            return NotImplemented
        return (self.start == other.start and np.array_equal(self.final, other.final)
                and np.array_equal(self.arc_begin, other.arc_begin)
                and np.array_equal(self.ilabel, other.ilabel)
                and np.array_equal(self.olabel, other.olabel)
                and np.array_equal(self.weight, other.weight)
                and np.array_equal(self.nextstate, other.nextstate))

    @staticmethod
    def from_arcs(num_states: int, start: int, final, src, ilabel, olabel, weight, nextstate,
                  stable: bool = True) -> "Fst":
        """An FST from arc lists; arcs keep their relative order within each state."""
        src = np.asarray(src, dtype=np.int64)
        order = np.argsort(src, kind="stable") if stable else np.arange(src.shape[0])
        counts = np.bincount(src, minlength=num_states) if src.size else np.zeros(num_states, np.int64)
        arc_begin = np.zeros(num_states + 1, np.int64)
        np.cumsum(counts, out=arc_begin[1:])
        return Fst(int(start), np.asarray(final, dtype=np.float32).reshape(num_states).copy(),
                   arc_begin, np.asarray(ilabel, np.int32)[order], np.asarray(olabel, np.int32)[order],
                   np.asarray(weight, np.float32)[order], np.asarray(nextstate, np.int32)[order])

    def is_acceptor(self) -> bool:
        return bool(np.array_equal(self.ilabel, self.olabel))


# ---------------------------------------------------------------------------
# Properties (OpenFst's ComputeProperties with the kCopyProperties mask)


def _scc(fst: Fst) -> np.ndarray:
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    n = fst.num_states
    g = csr_matrix((np.ones(fst.num_arcs, np.int8), (fst.arc_state(), fst.nextstate)), shape=(n, n))
    return connected_components(g, directed=True, connection="strong")[1]


def _reachable(n: int, seeds: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """States reachable from ``seeds`` along arcs src -> dst (a breadth-first
    search over a CSR adjacency; plain lists are fastest for these small FSTs)."""
    order = np.argsort(src, kind="stable")
    begin = np.searchsorted(src[order], np.arange(n + 1)).tolist()
    nxt = dst[order].tolist()
    seen = [False] * n
    queue = [int(s) for s in seeds]
    for s in queue:
        seen[s] = True
    head = 0
    while head < len(queue):
        s = queue[head]
        head += 1
        for t in nxt[begin[s]:begin[s + 1]]:
            if not seen[t]:
                seen[t] = True
                queue.append(t)
    return np.array(seen, dtype=bool)


def compute_properties(fst: Fst, binary_props: int = kExpanded) -> int:
    """The property word OpenFst computes for ``Properties(kCopyProperties, true)``
    of a VectorFst with all trinary properties unknown, restricted to
    kCopyProperties and or-ed with ``binary_props`` (kExpanded for a compact
    FST, kExpanded | kMutable for a VectorFst)."""
    n = fst.num_states
    props = kAcyclic | kInitialAcyclic | kAccessible | kCoAccessible
    src = fst.arc_state().astype(np.int64)
    dst = fst.nextstate.astype(np.int64)
    il, ol, w = fst.ilabel, fst.olabel, fst.weight
    is_final = fst.final != np.inf
    scc = None
    if fst.start >= 0 and n > 0:
        # Cycles: a self-loop, or a strongly connected component of >1 states.
        # Arcs that all go to higher-numbered states (the usual, top-sorted
        # supervision FSTs) cannot form a cycle; else find the components.
        cyclic = bool(np.any(src == dst))
        if not cyclic and fst.num_arcs and not np.all(dst > src):
            scc = _scc(fst)
            cyclic = sorted_unique(scc).shape[0] < n
        if cyclic:
            props = (props | kCyclic) & ~kAcyclic
            if scc is None:
                scc = _scc(fst)
            # A cycle through the start state: an arc back into the start state
            # from a state of its component (or a self-loop on it).
            into_start = (dst == fst.start) & (scc[src] == scc[fst.start])
            if np.any(into_start):
                props = (props | kInitialCyclic) & ~kInitialAcyclic
        acc = _reachable(n, np.array([fst.start]), src, dst)
        if not acc.all():
            props = (props | kNotAccessible) & ~kAccessible
        coacc = _reachable(n, np.nonzero(is_final)[0], dst, src)
        if not coacc.all():
            props = (props | kNotCoAccessible) & ~kCoAccessible
    props |= (kAcceptor | kNoEpsilons | kNoIEpsilons | kNoOEpsilons | kILabelSorted
              | kOLabelSorted | kUnweighted | kTopSorted | kString | kIDeterministic
              | kODeterministic | kUnweightedCycles)

    def flip(pos: int, neg: int) -> None:
        nonlocal props
        props = (props | neg) & ~pos

    if fst.num_arcs:
        if np.any(il != ol):
            flip(kAcceptor, kNotAcceptor)
        if np.any((il == 0) & (ol == 0)):
            flip(kNoEpsilons, kEpsilons)
        if np.any(il == 0):
            flip(kNoIEpsilons, kIEpsilons)
        if np.any(ol == 0):
            flip(kNoOEpsilons, kOEpsilons)
        same_state = src[1:] == src[:-1]
        if np.any(same_state & (il[1:] < il[:-1])):
            flip(kILabelSorted, kNotILabelSorted)
        if np.any(same_state & (ol[1:] < ol[:-1])):
            flip(kOLabelSorted, kNotOLabelSorted)
        if _has_duplicates(src, il):
            flip(kIDeterministic, kNonIDeterministic)
        if _has_duplicates(src, ol):
            flip(kODeterministic, kNonODeterministic)
        weighted = (w != 0.0) & (w != np.inf)
        if np.any(weighted):
            flip(kUnweighted, kWeighted)
            if props & kCyclic:
                if scc is None:
                    scc = _scc(fst)
                if np.any(weighted & (scc[src] == scc[dst])):
                    flip(kUnweightedCycles, kWeightedCycles)
        if np.any(dst <= src):
            flip(kTopSorted, kNotTopSorted)
        if np.any(dst != src + 1):
            flip(kString, kNotString)
    if n:
        fin = np.nonzero(is_final)[0]
        if fin.size and np.any(fst.final[fin] != 0.0):
            flip(kUnweighted, kWeighted)
        # A final state that is not the last state visited, or a non-final
        # state without exactly one arc, breaks the string property.
        if fin.size > 1 or (fin.size == 1 and fin[0] != n - 1):
            flip(kString, kNotString)
        nonfinal_arcs = np.diff(fst.arc_begin)[~is_final]
        if np.any(nonfinal_arcs != 1):
            flip(kString, kNotString)
    if fst.start not in (-1, 0):
        flip(kString, kNotString)
    return (props & kCopyProperties) | binary_props


def _has_duplicates(src: np.ndarray, labels: np.ndarray) -> bool:
    key = src.astype(np.int64) * (1 << 32) + labels.astype(np.int64)
    return sorted_unique(key).shape[0] < key.shape[0]


def properties_to_write(fst: Fst, binary_props: int) -> int:
    """The property word OpenFst writes for ``fst`` after ``Properties(kCopyProperties,
    true)``: the stored word when it determines all of kCopyProperties (an FST
    read from a file and copied), else the computed one."""
    if fst.properties is not None:
        stored = fst.properties
        if (known_properties(stored) & kCopyProperties) == kCopyProperties:
            return (stored & kCopyProperties) | binary_props
    return compute_properties(fst, binary_props)


# ---------------------------------------------------------------------------
# Binary formats


def _read_string(data: bytes, pos: int) -> tuple[str, int]:
    if pos + 4 > len(data):
        raise FormatError("end of data reading FST header")
    (n,) = struct.unpack_from("<i", data, pos)
    if n < 0 or pos + 4 + n > len(data):
        raise FormatError("bad string in FST header")
    return data[pos + 4:pos + 4 + n].decode("latin-1"), pos + 4 + n


def _write_string(s: str) -> bytes:
    b = s.encode("latin-1")
    return struct.pack("<i", len(b)) + b


@dataclass
class FstHeader:
    fst_type: str
    arc_type: str
    version: int
    flags: int
    properties: int
    start: int
    num_states: int
    num_arcs: int


def read_header(data: bytes, pos: int = 0) -> tuple[FstHeader, int]:
    if pos + 4 > len(data) or struct.unpack_from("<i", data, pos)[0] != FST_MAGIC:
        raise FormatError("FST header not found (bad magic number)", where=f"byte {pos}")
    fst_type, pos = _read_string(data, pos + 4)
    arc_type, pos = _read_string(data, pos)
    if pos + _HEADER_TAIL.size > len(data):
        raise FormatError("end of data reading FST header")
    version, flags, props, start, ns, na = _HEADER_TAIL.unpack_from(data, pos)
    pos += _HEADER_TAIL.size
    if flags & 0x3:
        raise FormatError("FSTs with symbol tables are not supported")
    if flags & 0x4:
        raise FormatError("aligned FST files are not supported")
    return FstHeader(fst_type, arc_type, version, flags, props, start, ns, na), pos


def write_header(h: FstHeader) -> bytes:
    return (struct.pack("<i", FST_MAGIC) + _write_string(h.fst_type) + _write_string(h.arc_type)
            + _HEADER_TAIL.pack(h.version, h.flags, h.properties, h.start, h.num_states, h.num_arcs))


def _check_arc_type(h: FstHeader) -> None:
    if h.arc_type != "standard":
        raise FormatError(f"expected arc type 'standard' (tropical float), got '{h.arc_type}'")


def read_fst(data: bytes, pos: int = 0) -> tuple[Fst, int]:
    """One binary FST (``vector`` or ``compact_acceptor``) from ``data[pos:]``;
    returns it and the position after it."""
    h, body = read_header(data, pos)
    _check_arc_type(h)
    if h.fst_type == "vector":
        return _read_vector_body(h, data, body)
    if h.fst_type == "compact_acceptor":
        return _read_compact_acceptor_body(h, data, body)
    raise FormatError(f"unsupported FST type '{h.fst_type}'")


def _read_vector_body(h: FstHeader, data: bytes, pos: int) -> tuple[Fst, int]:
    ns = h.num_states
    if ns < 0:
        raise FormatError("negative number of states in FST header")
    final = np.empty(ns, np.float32)
    counts = np.empty(ns, np.int64)
    chunks = []
    n = len(data)
    for s in range(ns):
        if pos + 12 > n:
            raise FormatError(f"end of data reading state {s} of a vector FST")
        final[s], counts[s] = struct.unpack_from("<fq", data, pos)
        pos += 12
        nbytes = int(counts[s]) * 16
        if counts[s] < 0 or pos + nbytes > n:
            raise FormatError(f"end of data reading arcs of state {s} of a vector FST")
        chunks.append(data[pos:pos + nbytes])
        pos += nbytes
    arcs = np.frombuffer(b"".join(chunks), dtype=_ARC_DTYPE)
    arc_begin = np.zeros(ns + 1, np.int64)
    np.cumsum(counts, out=arc_begin[1:])
    fst = Fst(int(h.start), final, arc_begin, arcs["ilabel"].copy(), arcs["olabel"].copy(),
              arcs["weight"].copy(), arcs["nextstate"].copy(), h.properties)
    _check_states(fst)
    return fst, pos


def _read_compact_acceptor_body(h: FstHeader, data: bytes, pos: int) -> tuple[Fst, int]:
    ns = h.num_states
    if ns < 0 or pos + 4 * (ns + 1) > len(data):
        raise FormatError("end of data reading a compact FST")
    offsets = np.frombuffer(data, dtype="<u4", count=ns + 1, offset=pos).astype(np.int64)
    pos += 4 * (ns + 1)
    ncompacts = int(offsets[-1]) if ns >= 0 else 0
    if pos + 12 * ncompacts > len(data):
        raise FormatError("end of data reading a compact FST")
    elems = np.frombuffer(data, dtype=_COMPACT_DTYPE, count=ncompacts, offset=pos)
    pos += 12 * ncompacts
    is_final = elems["label"] == -1
    owner = np.repeat(np.arange(ns, dtype=np.int64), np.diff(offsets))
    final = np.full(ns, np.inf, np.float32)
    final[owner[is_final]] = elems["weight"][is_final]
    arcs = elems[~is_final]
    counts = np.bincount(owner[~is_final], minlength=ns) if ns else np.zeros(0, np.int64)
    arc_begin = np.zeros(ns + 1, np.int64)
    np.cumsum(counts, out=arc_begin[1:])
    label = arcs["label"].copy()
    fst = Fst(int(h.start), final, arc_begin, label, label.copy(), arcs["weight"].copy(),
              arcs["nextstate"].copy(), h.properties)
    _check_states(fst)
    return fst, pos


def _check_states(fst: Fst) -> None:
    n = fst.num_states
    if fst.start >= n or fst.start < -1:
        raise FormatError(f"FST start state {fst.start} out of range ({n} states)")
    if fst.num_arcs and (fst.nextstate.min() < 0 or fst.nextstate.max() >= n):
        raise FormatError("FST arc to a state out of range")


def write_vector_fst(fst: Fst, properties: int | None = None) -> bytes:
    """OpenFst's binary ``vector`` format.  ``properties`` defaults to the
    stored word (with kExpanded | kMutable), or the computed one."""
    if properties is None:
        if fst.properties is not None:
            properties = (fst.properties & kCopyProperties) | kExpanded | kMutable
        else:
            properties = compute_properties(fst, kExpanded | kMutable)
    # OpenFst's VectorFst::WriteFst leaves the header's arc count at 0 when it
    # knows the number of states up front (always, for an expanded FST).
    h = FstHeader("vector", "standard", 2, 0, properties, fst.start, fst.num_states, 0)
    counts = np.diff(fst.arc_begin)
    arcs = np.empty(fst.num_arcs, _ARC_DTYPE)
    arcs["ilabel"], arcs["olabel"] = fst.ilabel, fst.olabel
    arcs["weight"], arcs["nextstate"] = fst.weight, fst.nextstate
    raw = arcs.tobytes()
    parts = [write_header(h)]
    for s in range(fst.num_states):
        a, b = int(fst.arc_begin[s]), int(fst.arc_begin[s + 1])
        parts.append(struct.pack("<fq", fst.final[s], counts[s]))
        parts.append(raw[16 * a:16 * b])
    return b"".join(parts)


def write_compact_acceptor(fst: Fst, properties: int | None = None) -> bytes:
    """Kaldi's binary supervision FST: ``StdCompactAcceptorFst(fst).Write()``."""
    if not fst.is_acceptor():
        raise FormatError("writing a non-acceptor as a compact acceptor FST")
    if properties is None:
        properties = properties_to_write(fst, kExpanded)
    n = fst.num_states
    is_final = fst.final != np.inf
    counts = np.diff(fst.arc_begin) + is_final
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    elems = np.empty(int(offsets[-1]), _COMPACT_DTYPE)
    # Position of each state's final element (first) and of its arcs after it.
    final_pos = offsets[:-1][is_final]
    elems["label"][final_pos] = -1
    elems["weight"][final_pos] = fst.final[is_final]
    elems["nextstate"][final_pos] = -1
    arc_pos = (np.arange(fst.num_arcs) - np.repeat(fst.arc_begin[:-1], np.diff(fst.arc_begin))
               + np.repeat(offsets[:-1] + is_final, np.diff(fst.arc_begin)))
    elems["label"][arc_pos] = fst.ilabel
    elems["weight"][arc_pos] = fst.weight
    elems["nextstate"][arc_pos] = fst.nextstate
    h = FstHeader("compact_acceptor", "standard", 2, 0, properties, fst.start, n, fst.num_arcs)
    return write_header(h) + offsets.astype("<u4").tobytes() + elems.tobytes()


def read_fst_file(path: str) -> Fst:
    """A binary FST file (Kaldi's ReadFstKaldi of a filename; ``-`` is stdin)."""
    from ...io.kaldi_io import read_rxfilename

    data = read_rxfilename(path)
    fst, pos = read_fst(data, 0)
    return fst


# ---------------------------------------------------------------------------
# Text form (Kaldi's WriteFstKaldi / ReadFstKaldi in text mode)


def format_weight(w: float) -> str:
    """OpenFst's ``ostream << TropicalWeight`` on a Kaldi stream (precision 7)."""
    if w == np.inf:
        return "Infinity"
    if w == -np.inf:
        return "-Infinity"
    if w != w:
        return "BadNumber"
    return "%.7g" % w


def fst_to_text(fst: Fst) -> str:
    """The lines OpenFst's FstPrinter writes (tab-separated, transducer form,
    weights only when not One), start state first; without Kaldi's
    surrounding newlines."""
    if fst.start < 0:
        return ""
    lines: list[str] = []
    il, ol, ns = fst.ilabel.tolist(), fst.olabel.tolist(), fst.nextstate.tolist()
    w = fst.weight.tolist()
    fin = fst.final.tolist()
    begin = fst.arc_begin.tolist()
    order = [fst.start] + [s for s in range(fst.num_states) if s != fst.start]
    for s in order:
        a, b = begin[s], begin[s + 1]
        for k in range(a, b):
            line = f"{s}\t{ns[k]}\t{il[k]}\t{ol[k]}"
            if w[k] != 0.0:
                line += "\t" + format_weight(w[k])
            lines.append(line)
        if fin[s] != np.inf or a == b:
            lines.append(f"{s}" if fin[s] == 0.0 else f"{s}\t{format_weight(fin[s])}")
    return "".join(line + "\n" for line in lines)


def _parse_weight(text: str) -> float:
    if text == "Infinity":
        return float(np.inf)
    if text == "-Infinity":
        return float(-np.inf)
    return float(np.float32(float(text)))


def fst_from_text_lines(lines: list[str], where: str = "FST") -> Fst:
    """Kaldi's ReadFstKaldi text parsing of FST lines (no blank line inside)."""
    num_states = 0
    start = -1
    final: dict[int, float] = {}
    src: list[int] = []
    dst: list[int] = []
    il: list[int] = []
    ol: list[int] = []
    wt: list[float] = []
    for nline, line in enumerate(lines, 1):
        col = [c for c in line.replace("\r", " ").replace("\t", " ").split(" ") if c]
        if not col:
            break
        try:
            s = int(col[0])
            if nline == 1:
                start = s
            num_states = max(num_states, s + 1)
            if len(col) == 1:
                final[s] = 0.0
            elif len(col) == 2:
                final[s] = _parse_weight(col[1])
            elif len(col) in (4, 5):
                d, i, o = int(col[1]), int(col[2]), int(col[3])
                w = _parse_weight(col[4]) if len(col) == 5 else 0.0
                if len(col) == 5 and w == np.inf:
                    raise ValueError
                src.append(s)
                dst.append(d)
                il.append(i)
                ol.append(o)
                wt.append(w)
                num_states = max(num_states, d + 1)
            else:
                raise ValueError
            if s < 0:
                raise ValueError
        except ValueError:
            raise FormatError(f"Bad line in FST: {line}", where=where) from None
    fin = np.full(num_states, np.inf, np.float32)
    for s, v in final.items():
        fin[s] = v
    return Fst.from_arcs(num_states, start, fin, src, il, ol, wt, dst)


# ---------------------------------------------------------------------------
# kaldifst conversion


def to_kaldifst(fst: Fst):
    """A kaldifst.StdVectorFst with the same states and arcs in the same order
    (and, for an FST read from a file, the property word it was read with, as
    OpenFst's reader sets it: algorithms such as Compose consult it)."""
    import kaldifst

    out = kaldifst.StdVectorFst()
    n = fst.num_states
    out.reserve_states(n)
    for _ in range(n):
        out.add_state()
    if fst.start >= 0:
        out.start = fst.start
    fin = fst.final.tolist()
    il, ol, ns = fst.ilabel.tolist(), fst.olabel.tolist(), fst.nextstate.tolist()
    w = fst.weight.tolist()
    begin = fst.arc_begin.tolist()
    StdArc, TW = kaldifst.StdArc, kaldifst.TropicalWeight
    for s in range(n):
        if fin[s] != np.inf:
            out.set_final(s, fin[s])
        for k in range(begin[s], begin[s + 1]):
            out.add_arc(s, StdArc(il[k], ol[k], TW(w[k]), ns[k]))
    if fst.properties is not None:
        out.set_properties(fst.properties, kFstProperties)
    return out


_SCRATCH: list[str] = []


def _scratch_file() -> str:
    """A per-process file in a temporary folder (in memory where /dev/shm
    exists), removed at exit: kaldifst writes FSTs only to files."""
    if not _SCRATCH:
        import atexit
        import os
        import shutil
        import tempfile

        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        d = tempfile.mkdtemp(prefix="pynnet3-fst-", dir=base)
        atexit.register(shutil.rmtree, d, True)
        _SCRATCH.append(os.path.join(d, "fst"))
    return _SCRATCH[0]


def to_kaldifst_fast(fst: Fst):
    """Like :func:`to_kaldifst`, through OpenFst's binary reader (several times
    faster for big FSTs), but with no trinary property known (not what
    building the FST arc by arc leaves).  Use it only where no algorithm's
    choices depend on the stored properties."""
    import kaldifst

    path = _scratch_file()
    with open(path, "wb") as f:
        f.write(write_vector_fst(fst, properties=kExpanded | kMutable))
    return kaldifst.StdVectorFst.read(path)


def from_kaldifst(kf, keep_properties: bool = False) -> Fst:
    """Arrays from a kaldifst StdVectorFst (states in order, arcs as stored).
    OpenFst writes it in its binary format, read back here: far faster than
    iterating over arcs through the Python binding.  The stored property word
    is dropped (properties are then computed when the FST is written) unless
    ``keep_properties``: then :func:`write_vector_fst` writes the word OpenFst
    itself would write for this FST (what a binary like chain-make-den-fst
    puts in its output files)."""
    path = _scratch_file()
    if not kf.write(path):
        raise FormatError("kaldifst could not write an FST")
    with open(path, "rb") as f:
        data = f.read()
    fst, _ = read_fst(data, 0)
    if not keep_properties:
        fst.properties = None
    return fst


# ---------------------------------------------------------------------------
# Operations


def state_sort(fst: Fst, order: np.ndarray) -> Fst:
    """OpenFst's StateSort: state ``s`` becomes ``order[s]``; each state's arcs
    keep their order."""
    order = np.asarray(order, dtype=np.int64)
    n = fst.num_states
    inv = np.empty(n, np.int64)
    inv[order] = np.arange(n)
    counts = np.diff(fst.arc_begin)[inv]
    arc_begin = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=arc_begin[1:])
    # Old arc index of each new arc position.
    old = (np.arange(fst.num_arcs) - np.repeat(arc_begin[:-1], counts)
           + np.repeat(fst.arc_begin[inv], counts))
    return Fst(int(order[fst.start]) if fst.start >= 0 else -1, fst.final[inv].copy(), arc_begin,
               fst.ilabel[old], fst.olabel[old], fst.weight[old],
               order[fst.nextstate[old]].astype(np.int32))


def sort_breadth_first(fst: Fst) -> Fst:
    """Kaldi's SortBreadthFirstSearch: number the states in the order a
    breadth-first search from the start state (arcs in order) reaches them;
    the FST must be connected."""
    n = fst.num_states
    if fst.start < 0:
        raise FormatError("SortBreadthFirstSearch: FST has no start state")
    begin = fst.arc_begin.tolist()
    nxt = fst.nextstate.tolist()
    order = [-1] * n
    seen = [False] * n
    queue = [fst.start]
    seen[fst.start] = True
    head = 0
    while head < len(queue):
        s = queue[head]
        order[s] = head
        head += 1
        for t in nxt[begin[s]:begin[s + 1]]:
            if not seen[t]:
                seen[t] = True
                queue.append(t)
    if head != n:
        raise FormatError("Input to SortBreadthFirstSearch must be connected.")
    return state_sort(fst, np.asarray(order))


def concat_into(fst1: Fst, fst2: Fst) -> Fst:
    """OpenFst's ``Concat(fst1, &fst2)`` (fst1 prepended to fst2): fst1's
    states are appended after fst2's; each final state of fst1 gets, first
    among its arcs, an epsilon arc with its final weight to fst2's start."""
    if fst2.start < 0:
        return fst2.copy()
    n2 = fst2.num_states
    is_final = fst1.final != np.inf
    counts1 = np.diff(fst1.arc_begin)
    new_counts = counts1 + is_final
    # Positions within the appended block: the epsilon arc (if any) first.
    block_begin = np.zeros(fst1.num_states + 1, np.int64)
    np.cumsum(new_counts, out=block_begin[1:])
    m = int(block_begin[-1])
    il = np.zeros(m, np.int32)
    ol = np.zeros(m, np.int32)
    w = np.zeros(m, np.float32)
    ns = np.zeros(m, np.int32)
    eps_pos = block_begin[:-1][is_final]
    w[eps_pos] = fst1.final[is_final]
    ns[eps_pos] = fst2.start
    arc_pos = (np.arange(fst1.num_arcs) - np.repeat(fst1.arc_begin[:-1], counts1)
               + np.repeat(block_begin[:-1] + is_final, counts1))
    il[arc_pos] = fst1.ilabel
    ol[arc_pos] = fst1.olabel
    w[arc_pos] = fst1.weight
    ns[arc_pos] = fst1.nextstate + n2
    start = fst1.start + n2 if fst1.start >= 0 else -1
    final = np.concatenate([fst2.final, np.full(fst1.num_states, np.inf, np.float32)])
    arc_begin = np.concatenate([fst2.arc_begin, fst2.arc_begin[-1] + block_begin[1:]])
    out = Fst(start, final, arc_begin, np.concatenate([fst2.ilabel, il]),
              np.concatenate([fst2.olabel, ol]), np.concatenate([fst2.weight, w]),
              np.concatenate([fst2.nextstate, ns]))
    if fst1.start < 0:
        # OpenFst then adds a new (non-final, arc-less) start state.
        out = Fst(out.num_states, np.append(out.final, np.float32(np.inf)),
                  np.append(out.arc_begin, out.arc_begin[-1]), out.ilabel, out.olabel,
                  out.weight, out.nextstate)
    return out


def apply_probability_scale(scale: float, fst: Fst) -> Fst:
    """Kaldi's ApplyProbabilityScale: every arc and final weight times ``scale``."""
    out = fst.copy()
    sc = np.float32(scale)
    out.weight = (out.weight * sc).astype(np.float32)
    fin = out.final != np.inf
    out.final[fin] = (out.final[fin] * sc).astype(np.float32)
    # Changing arc values through OpenFst's MutableArcIterator forgets every
    # property but these (which decide, e.g., how Compose matches later).
    if fst.properties is not None and fst.num_arcs:
        out.properties = fst.properties & (
            kBinaryProperties | kAcceptor | kNotAcceptor | kEpsilons | kNoEpsilons | kIEpsilons
            | kNoIEpsilons | kOEpsilons | kNoOEpsilons | kWeighted | kUnweighted)
    return out


__all__ = ["Fst", "FstHeader", "read_fst", "read_fst_file", "write_vector_fst",
           "write_compact_acceptor", "compute_properties", "properties_to_write",
           "fst_to_text", "fst_from_text_lines", "to_kaldifst", "to_kaldifst_fast", "from_kaldifst",
           "known_properties", "kCopyProperties", "state_sort", "sort_breadth_first",
           "concat_into", "apply_probability_scale"]
