"""Kaldi's chain::Supervision (chain/chain-supervision.h): the numerator FST of
a chunk (or of several appended chunks), with its frame counts and weight.

On disk (Supervision::Write)::

    <Supervision> <Weight> 1 <NumSequences> 1 <FramesPerSeq> 50 <LabelDim> 64
    <End2End> F  FST  [<AlignmentPdfs> [ ... ]] </Supervision>

where FST is, in binary, an OpenFst ``compact_acceptor`` (Kaldi writes the
supervision through StdCompactAcceptorFst) and, in text, Kaldi's text form of
the FST (a newline, FstPrinter's lines, an empty line).  With ``<End2End> T``
there is instead ``<Fsts>`` and one FST per sequence, then ``</Fsts>``.
Reading and writing here are byte-identical to Kaldi's in both modes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ... import log
from ...errors import FormatError
from ...io.kaldi_io import KaldiReader, KaldiWriter
from .fst import (Fst, concat_into, from_kaldifst, fst_from_text_lines, fst_to_text, read_fst,
                  sort_breadth_first, to_kaldifst, to_kaldifst_fast, write_compact_acceptor)

# Kaldi's kSupervisionMaxStates (chain-supervision.cc).
SUPERVISION_MAX_STATES = 200000


def read_fst_kaldi_text(r: KaldiReader) -> Fst:
    """Kaldi's ReadFstKaldi in text mode at ``r.pos``: spaces, one newline,
    then FST lines up to an empty line (or the end of the data)."""
    data, pos, n = r.data, r.pos, len(r.data)
    while pos < n and data[pos] in b" \t\r\v\f":
        pos += 1
    if pos >= n or data[pos] != 0x0A:
        r.pos = pos
        raise r.error("Reading FST: unexpected sequence of spaces")
    pos += 1
    lines: list[str] = []
    while pos < n:
        end = data.find(b"\n", pos)
        if end < 0:
            end = n
        line = data[pos:end].decode("utf-8", "replace")
        pos = min(end + 1, n)
        if not line.replace("\t", "").replace("\r", "").strip(" "):
            break
        lines.append(line)
    r.pos = pos
    return fst_from_text_lines(lines, where=f"{r.name} (byte {pos})")


def write_fst_kaldi_text(w: KaldiWriter, fst: Fst) -> None:
    """Kaldi's WriteFstKaldi in text mode: newline, the FST's lines, newline."""
    w.write_raw("\n" + fst_to_text(fst) + "\n")


def _read_fst(r: KaldiReader) -> Fst:
    if not r.binary:
        return read_fst_kaldi_text(r)
    fst, r.pos = read_fst(r.data, r.pos)
    if not fst.is_acceptor():
        raise r.error("supervision FST is not an acceptor")
    return fst


def _write_fst(w: KaldiWriter, fst: Fst) -> None:
    if w.binary:
        w.write_raw(write_compact_acceptor(fst))
    else:
        write_fst_kaldi_text(w, fst)


@dataclass
class Supervision:
    """Kaldi's chain::Supervision."""

    weight: float = 1.0
    num_sequences: int = 1
    frames_per_sequence: int = -1
    label_dim: int = -1
    fst: Fst = field(default_factory=Fst)
    e2e_fsts: list[Fst] = field(default_factory=list)
    alignment_pdfs: list[int] = field(default_factory=list)

    @property
    def e2e(self) -> bool:
        return bool(self.e2e_fsts)

    def write(self, w: KaldiWriter) -> None:
        if not (self.frames_per_sequence > 0 and self.label_dim > 0 and self.num_sequences > 0):
            raise FormatError("writing a Supervision with invalid frames_per_sequence, "
                              "label_dim or num_sequences")
        w.write_token("<Supervision>")
        w.write_token("<Weight>")
        w.write_float(self.weight)
        w.write_token("<NumSequences>")
        w.write_int32(self.num_sequences)
        w.write_token("<FramesPerSeq>")
        w.write_int32(self.frames_per_sequence)
        w.write_token("<LabelDim>")
        w.write_int32(self.label_dim)
        w.write_token("<End2End>")
        w.write_bool(self.e2e)
        if not self.e2e:
            _write_fst(w, self.fst)
        else:
            if len(self.e2e_fsts) != self.num_sequences:
                raise FormatError("Supervision: number of e2e FSTs differs from num_sequences")
            w.write_token("<Fsts>")
            for f in self.e2e_fsts:
                _write_fst(w, f)
            w.write_token("</Fsts>")
        if self.alignment_pdfs:
            w.write_token("<AlignmentPdfs>")
            w.write_int_vector(self.alignment_pdfs)
        w.write_token("</Supervision>")

    @staticmethod
    def read(r: KaldiReader) -> "Supervision":
        s = Supervision()
        r.expect_token("<Supervision>")
        r.expect_token("<Weight>")
        s.weight = r.read_float()
        r.expect_token("<NumSequences>")
        s.num_sequences = r.read_int32()
        r.expect_token("<FramesPerSeq>")
        s.frames_per_sequence = r.read_int32()
        r.expect_token("<LabelDim>")
        s.label_dim = r.read_int32()
        r.expect_token("<End2End>")
        e2e = r.read_bool()
        if not e2e:
            s.fst = _read_fst(r)
        else:
            if not 0 < s.num_sequences <= 1000000:
                raise r.error(f"invalid num_sequences {s.num_sequences}")
            r.expect_token("<Fsts>")
            s.e2e_fsts = [_read_fst(r) for _ in range(s.num_sequences)]
            r.expect_token("</Fsts>")
        if r.peek_char() == "A":
            r.expect_token("<AlignmentPdfs>")
            s.alignment_pdfs = r.read_int_vector()
        r.expect_token("</Supervision>")
        return s

    def copy(self) -> "Supervision":
        return Supervision(self.weight, self.num_sequences, self.frames_per_sequence,
                           self.label_dim, self.fst.copy(), [f.copy() for f in self.e2e_fsts],
                           list(self.alignment_pdfs))

    def __eq__(self, other: object) -> bool:
        """Kaldi's Supervision::operator== (weight, sizes and the FST)."""
        if not isinstance(other, Supervision):
            return NotImplemented
        return (np.float32(self.weight) == np.float32(other.weight)
                and self.num_sequences == other.num_sequences
                and self.frames_per_sequence == other.frames_per_sequence
                and self.label_dim == other.label_dim and self.fst == other.fst)


# ---------------------------------------------------------------------------
# Algorithms on supervision (chain-supervision.cc)


def compute_fst_state_times(fst: Fst) -> tuple[np.ndarray, int]:
    """Kaldi's ComputeFstStateTimes: the frame of every state of an
    epsilon-free FST whose states are sorted by time, and the path length."""
    if fst.start != 0:
        raise FormatError("Expecting input FST start state to be zero")
    n = fst.num_states
    times = np.full(n, -1, np.int64)
    times[0] = 0
    begin = fst.arc_begin
    total = -1
    bad = FormatError("Input FST does not have required properties.")
    if fst.num_arcs and np.any(fst.ilabel == 0):
        raise bad
    final = fst.final != np.inf
    for s in range(n):
        nt = times[s] + 1
        if nt <= 0:
            raise bad
        dst = fst.nextstate[begin[s]:begin[s + 1]]
        if dst.size:
            cur = times[dst]
            if np.any((cur != -1) & (cur != nt)):
                raise bad
            times[dst] = nt
        if final[s]:
            if total == -1:
                total = int(nt - 1)
            elif total != nt - 1:
                raise bad
    if n > 1 and np.any(np.diff(times) < 0):
        raise FormatError("supervision FST states are not sorted by time")
    if total < 0:
        raise bad
    return times, total


class SupervisionSplitter:
    """Kaldi's SupervisionSplitter: pieces of a supervision by frame range."""

    def __init__(self, supervision: Supervision) -> None:
        self.supervision = supervision
        if supervision.num_sequences != 1:
            log.warn("Splitting already-reattached sequence (only expected in testing code)")
        self.frame, total = compute_fst_state_times(supervision.fst)
        if total != supervision.frames_per_sequence * supervision.num_sequences:
            raise FormatError(f"supervision FST has paths of {total} frames, expected "
                              f"{supervision.frames_per_sequence * supervision.num_sequences}")

    def get_frame_range(self, begin_frame: int, num_frames: int) -> Supervision:
        """Frames ``begin_frame <= t < begin_frame + num_frames`` (Kaldi's
        GetFrameRange): the FST still has its epsilons from the special start
        state; AddWeightToSupervisionFst removes them."""
        sup = self.supervision
        end_frame = begin_frame + num_frames
        if not (num_frames > 0 and begin_frame >= 0
                and end_frame <= sup.num_sequences * sup.frames_per_sequence):
            raise FormatError(f"frame range {begin_frame}+{num_frames} outside the supervision "
                              f"of {sup.frames_per_sequence} frames")
        frame = self.frame
        begin_state = int(np.searchsorted(frame, begin_frame, side="left"))
        end_state = int(np.searchsorted(frame, end_frame, side="left"))
        if begin_state >= frame.shape[0] or frame[begin_state] != begin_frame:
            raise FormatError(f"no supervision state at frame {begin_frame}")
        fst = self._create_range_fst(begin_frame, begin_state, end_state)
        return Supervision(sup.weight, 1, num_frames, sup.label_dim, fst)

    def _create_range_fst(self, begin_frame: int, begin_state: int, end_state: int) -> Fst:
        src_fst = self.supervision.fst
        nrange = end_state - begin_state
        final_state = nrange + 1
        a0, a1 = int(src_fst.arc_begin[begin_state]), int(src_fst.arc_begin[end_state])
        counts = np.diff(src_fst.arc_begin[begin_state:end_state + 1])
        starts = np.nonzero(self.frame[begin_state:end_state] == begin_frame)[0]
        # State 0: epsilon arcs to the states on the first frame; then the
        # range's states, arcs leaving the range going to the final state.
        dst = src_fst.nextstate[a0:a1].astype(np.int64)
        dst = np.where(dst >= end_state, final_state, dst - begin_state + 1)
        n = nrange + 2
        final = np.full(n, np.inf, np.float32)
        final[final_state] = 0.0
        arc_begin = np.zeros(n + 1, np.int64)
        arc_begin[1] = starts.shape[0]
        arc_begin[2:n] = starts.shape[0] + np.cumsum(counts)
        arc_begin[n] = arc_begin[n - 1]
        ne = starts.shape[0]
        return Fst(0, final, arc_begin,
                   np.concatenate([np.zeros(ne, np.int32), src_fst.ilabel[a0:a1]]),
                   np.concatenate([np.zeros(ne, np.int32), src_fst.olabel[a0:a1]]),
                   np.concatenate([np.zeros(ne, np.float32), src_fst.weight[a0:a1]]),
                   np.concatenate([(starts + 1).astype(np.int32), dst.astype(np.int32)]))


def _try_determinize_minimize(kf, max_states: int = SUPERVISION_MAX_STATES):
    """Kaldi's TryDeterminizeMinimize on a kaldifst FST; None on failure."""
    import kaldifst

    if kf.num_states >= max_states:
        log.warn(f"Not attempting determinization as number of states is too large "
                 f"{kf.num_states}")
        return None
    det = kaldifst.determinize(kf, nstate=max_states)
    if det.num_states >= max_states - 1:
        log.warn(f"Determinization stopped early after reaching {det.num_states} states.  "
                 "Likely this utterance has a very strange transcription.")
        return None
    kaldifst.minimize(det)
    return det


class NormalizationFst:
    """The normalization FST, held once as a kaldifst FST for composition."""

    def __init__(self, fst: Fst) -> None:
        self.fst = fst
        self._kf = None

    @property
    def kaldifst(self):
        if self._kf is None:
            self._kf = to_kaldifst(self.fst)
        return self._kf


def add_weight_to_supervision_fst(normalization: NormalizationFst | Fst,
                                  supervision: Supervision) -> bool:
    """Kaldi's AddWeightToSupervisionFst: remove epsilons, determinize and
    minimize, compose with the normalization FST (adding its weights),
    determinize and minimize again and sort the states breadth-first.
    Returns False (supervision unchanged) when the composition is empty or
    determinization fails."""
    import kaldifst

    if not isinstance(normalization, NormalizationFst):
        normalization = NormalizationFst(normalization)
    if supervision.e2e_fsts:
        if supervision.num_sequences != 1 or len(supervision.e2e_fsts) != 1:
            raise FormatError("AddWeightToSupervisionFst: expected one e2e FST")
        kf = to_kaldifst(supervision.e2e_fsts[0])
        kaldifst.rmepsilon(kf)
        composed = kaldifst.compose(kf, normalization.kaldifst)
        if composed.num_states == 0:
            return False
        supervision.e2e_fsts[0] = from_kaldifst(composed)
        return True
    kf = to_kaldifst(supervision.fst)
    kaldifst.rmepsilon(kf)
    kf = _try_determinize_minimize(kf)
    if kf is None:
        log.warn("Failed to determinize supervision fst")
        return False
    composed = kaldifst.compose(kf, normalization.kaldifst)
    if composed.num_states == 0:
        return False
    composed = _try_determinize_minimize(composed)
    if composed is None:
        log.warn("Failed to determinize normalized supervision fst")
        return False
    supervision.fst = sort_breadth_first(from_kaldifst(composed))
    return True


def merge_supervision(inputs: list[Supervision]) -> Supervision:
    """Kaldi's chain::MergeSupervision: the sequences appended into one
    supervision (FSTs concatenated, epsilons removed, states sorted
    breadth-first)."""
    if not inputs:
        raise ValueError("merge_supervision: no inputs")
    if len(inputs) == 1:
        return inputs[0].copy()
    if inputs[0].e2e_fsts:
        out = inputs[0].copy()
        if len(out.e2e_fsts) != 1:
            raise FormatError("merging e2e supervision with more than one FST")
        for sup in inputs[1:]:
            if len(sup.e2e_fsts) != 1 or sup.frames_per_sequence != out.frames_per_sequence:
                raise FormatError("Mismatch in e2e supervision being merged")
            out.num_sequences += 1
            out.e2e_fsts.append(sup.e2e_fsts[0].copy())
        out.alignment_pdfs = []
        return out
    label_dim = inputs[0].label_dim
    for sup in inputs[1:]:
        if sup.label_dim != label_dim:
            raise FormatError("Trying to append incompatible Supervision objects")
        if sup.alignment_pdfs:
            raise FormatError("Trying to merge supervision with alignment-pdfs")
    last = inputs[-1]
    out = Supervision(last.weight, last.num_sequences, last.frames_per_sequence, last.label_dim,
                      last.fst, [], list(last.alignment_pdfs))
    fst = last.fst
    for src in reversed(inputs[:-1]):
        if (np.float32(out.weight) != np.float32(src.weight)
                or out.frames_per_sequence != src.frames_per_sequence):
            raise FormatError("Mismatch weight or frames_per_sequence  between inputs")
        fst = concat_into(src.fst, fst)
        out.num_sequences += 1
    out.fst = sort_breadth_first(rm_epsilon(fst))
    return out


def rm_epsilon(fst: Fst) -> Fst:
    """OpenFst's RmEpsilon (through kaldifst) of an acyclic FST.  For acyclic
    FSTs its result does not depend on the stored properties (they only pick
    the order in which states are processed, always a reverse topological
    one), so the fast conversion is safe here."""
    import kaldifst

    kf = to_kaldifst_fast(fst)
    kaldifst.rmepsilon(kf)
    return from_kaldifst(kf)


class _SupervisionHolder:
    """Table holder for chain::Supervision (``chain-get-supervision`` archives)."""

    name = "Supervision"

    @staticmethod
    def read(r: KaldiReader) -> Supervision:
        return Supervision.read(r)

    @staticmethod
    def write(w: KaldiWriter, sup: Supervision) -> None:
        sup.write(w)


SUPERVISION_HOLDER = _SupervisionHolder()

__all__ = ["Supervision", "SUPERVISION_HOLDER", "read_fst_kaldi_text", "write_fst_kaldi_text",
           "SupervisionSplitter", "compute_fst_state_times", "add_weight_to_supervision_fst",
           "merge_supervision", "rm_epsilon", "NormalizationFst", "SUPERVISION_MAX_STATES"]
