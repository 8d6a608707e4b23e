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

from ...errors import FormatError
from ...io.kaldi_io import KaldiReader, KaldiWriter
from .fst import Fst, fst_from_text_lines, fst_to_text, read_fst, write_compact_acceptor


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

__all__ = ["Supervision", "SUPERVISION_HOLDER", "read_fst_kaldi_text", "write_fst_kaldi_text"]
