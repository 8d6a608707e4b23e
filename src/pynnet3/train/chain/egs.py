"""Kaldi's chain examples (nnet3/nnet-chain-example.h): NnetChainSupervision
and NnetChainExample, in Kaldi's binary and text formats.

::

    <Nnet3ChainEg> <NumInputs> 1 <NnetIo> input ... </NnetIo>
    <NumOutputs> 1 <NnetChainSup> output <I1V> ... <Supervision> ... </Supervision>
    <DW2> FV 0 </NnetChainSup> </Nnet3ChainEg>

In text mode Kaldi puts a newline after each count and after each input and
output.  The inputs are ordinary :class:`~pynnet3.train.egs.NnetIo`; the
output indexes are ``(n, t, 0)`` for ``t`` the frame-subsampled output times,
``t``-major (``row = t_index * num_sequences + n``), and ``deriv_weights`` (if
not empty) has one weight per index.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ...errors import FormatError
from ...io.kaldi_io import KaldiReader, KaldiWriter
from ..egs import NnetIo, _index_vector_hash, _string_hash, read_index_vector, write_index_vector
from .supervision import Supervision

_M64 = (1 << 64) - 1


def _read_vector_as_char(r: KaldiReader) -> np.ndarray:
    """Kaldi's ReadVectorAsChar (the old ``<DW>`` deriv weights): bytes / 255."""
    if not r.binary:
        return r.read_vector()
    data, pos = r.data, r.pos
    if pos + 5 > len(data) or data[pos] != 1:
        raise r.error("ReadIntegerVector: expected integer type of size 1")
    (size,) = struct.unpack_from("<i", data, pos + 1)
    if size < 0 or pos + 5 + size > len(data):
        raise r.error("error reading char vector")
    chars = np.frombuffer(data, np.uint8, count=size, offset=pos + 5)
    r.pos = pos + 5 + size
    return (np.float32(1.0 / 255.0) * chars.astype(np.float32)).astype(np.float32)


def chain_output_indexes(num_sequences: int, frames_per_sequence: int, first_frame: int,
                         frame_skip: int) -> np.ndarray:
    """NnetChainSupervision's indexes: (n, first_frame + i * frame_skip, 0), i-major."""
    out = np.zeros((num_sequences * frames_per_sequence, 3), np.int32)
    out[:, 0] = np.tile(np.arange(num_sequences), frames_per_sequence)
    out[:, 1] = first_frame + frame_skip * np.repeat(np.arange(frames_per_sequence), num_sequences)
    return out


@dataclass
class NnetChainSupervision:
    """Kaldi's NnetChainSupervision: a named output with its chain supervision."""

    name: str
    indexes: np.ndarray                      # int32 (rows, 3): n, t, x
    supervision: Supervision
    deriv_weights: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))

    def __post_init__(self) -> None:
        self.indexes = np.asarray(self.indexes, dtype=np.int32).reshape(-1, 3)
        self.deriv_weights = np.asarray(self.deriv_weights, dtype=np.float32).reshape(-1)

    @classmethod
    def create(cls, name: str, supervision: Supervision, deriv_weights, first_frame: int,
               frame_skip: int) -> "NnetChainSupervision":
        """Kaldi's constructor from a supervision, first output frame and frame skip."""
        idx = chain_output_indexes(supervision.num_sequences, supervision.frames_per_sequence,
                                   first_frame, frame_skip)
        out = cls(name, idx, supervision, deriv_weights)
        out.check_dim()
        return out

    def check_dim(self) -> None:
        """Kaldi's NnetChainSupervision::CheckDim."""
        sup = self.supervision
        if sup.frames_per_sequence == -1:
            if self.indexes.shape[0]:
                raise FormatError(f"chain output '{self.name}': indexes without supervision")
            return
        n_seq, fps = sup.num_sequences, sup.frames_per_sequence
        if self.indexes.shape[0] != n_seq * fps or fps <= 1 or not self.indexes.shape[0]:
            raise FormatError(f"chain output '{self.name}': {self.indexes.shape[0]} indexes for "
                              f"{n_seq} sequences of {fps} frames")
        first = int(self.indexes[0, 1])
        skip = int(self.indexes[n_seq, 1]) - first
        if not np.array_equal(self.indexes, chain_output_indexes(n_seq, fps, first, skip)):
            raise FormatError(f"chain output '{self.name}': indexes are not in the expected order")
        dw = self.deriv_weights
        if dw.shape[0]:
            if dw.shape[0] != self.indexes.shape[0]:
                raise FormatError(f"chain output '{self.name}': deriv-weights dimension "
                                  f"{dw.shape[0]} vs. {self.indexes.shape[0]} indexes")
            if dw.min() < 0.0:
                raise FormatError(f"chain output '{self.name}': negative deriv weights")

    def write(self, w: KaldiWriter) -> None:
        self.check_dim()
        w.write_token("<NnetChainSup>")
        w.write_token(self.name)
        write_index_vector(w, self.indexes)
        self.supervision.write(w)
        w.write_token("<DW2>")
        w.write_vector(self.deriv_weights)
        w.write_token("</NnetChainSup>")

    @staticmethod
    def read(r: KaldiReader) -> "NnetChainSupervision":
        r.expect_token("<NnetChainSup>")
        name = r.read_token()
        indexes = read_index_vector(r)
        sup = Supervision.read(r)
        tok = r.read_token()
        dw = np.zeros(0, np.float32)
        if tok != "</NnetChainSup>":
            if tok == "<DW>":
                dw = _read_vector_as_char(r)
            elif tok == "<DW2>":
                dw = r.read_vector()
            else:
                raise r.error(f"expected <DW2> or </NnetChainSup>, got {tok[:40]}")
            r.expect_token("</NnetChainSup>")
        out = NnetChainSupervision(name, indexes, sup, dw)
        out.check_dim()
        return out

    def copy(self) -> "NnetChainSupervision":
        return NnetChainSupervision(self.name, self.indexes.copy(), self.supervision.copy(),
                                    self.deriv_weights.copy())


@dataclass
class NnetChainExample:
    """Kaldi's NnetChainExample: NnetIo inputs and chain-supervised outputs."""

    inputs: list[NnetIo] = field(default_factory=list)
    outputs: list[NnetChainSupervision] = field(default_factory=list)

    def write(self, w: KaldiWriter) -> None:
        if not self.inputs:
            raise FormatError("Attempting to write NnetChainExample with no inputs")
        if not self.outputs:
            raise FormatError("Attempting to write NnetChainExample with no outputs")
        w.write_token("<Nnet3ChainEg>")
        w.write_token("<NumInputs>")
        w.write_int32(len(self.inputs))
        if not w.binary:
            w.write_raw("\n")
        for io in self.inputs:
            io.write(w)
            if not w.binary:
                w.write_raw("\n")
        w.write_token("<NumOutputs>")
        w.write_int32(len(self.outputs))
        if not w.binary:
            w.write_raw("\n")
        for sup in self.outputs:
            sup.write(w)
            if not w.binary:
                w.write_raw("\n")
        w.write_token("</Nnet3ChainEg>")

    @staticmethod
    def read(r: KaldiReader) -> "NnetChainExample":
        r.expect_token("<Nnet3ChainEg>")
        r.expect_token("<NumInputs>")
        size = r.read_int32()
        if size < 1 or size > 1000000:
            raise r.error(f"Invalid size {size}")
        inputs = [NnetIo.read(r) for _ in range(size)]
        r.expect_token("<NumOutputs>")
        size = r.read_int32()
        if size < 1 or size > 1000000:
            raise r.error(f"Invalid size {size}")
        outputs = [NnetChainSupervision.read(r) for _ in range(size)]
        r.expect_token("</Nnet3ChainEg>")
        return NnetChainExample(inputs, outputs)

    def to_bytes(self, binary: bool = True) -> bytes:
        """The example as an archive stores it after ``key `` (``\\0B`` first in binary)."""
        w = KaldiWriter(binary)
        self.write(w)
        return (b"\0B" if binary else b"") + w.getvalue()

    def compress(self) -> None:
        """Kaldi's NnetChainExample::Compress: compress the input features."""
        for io in self.inputs:
            io.features.compress()

    def copy(self) -> "NnetChainExample":
        return NnetChainExample([NnetIo(io.name, io.indexes.copy(), io.features.copy())
                                 for io in self.inputs], [o.copy() for o in self.outputs])

    def structure_key(self) -> tuple:
        """Equal for examples Kaldi's NnetChainExampleStructureCompare calls equal."""
        return (tuple((io.name, io.features.num_rows, io.features.num_cols, io.indexes.tobytes())
                      for io in self.inputs),
                tuple((o.name, o.indexes.tobytes()) for o in self.outputs))


def chain_example_size(eg: NnetChainExample) -> int:
    """Kaldi's GetNnetChainExampleSize: the most Indexes of any input or output."""
    return max([io.indexes.shape[0] for io in eg.inputs]
               + [o.indexes.shape[0] for o in eg.outputs] + [0])


def chain_structure_hash(eg: NnetChainExample) -> int:
    """Kaldi's NnetChainExampleStructureHasher (64-bit size_t arithmetic)."""
    ans = (len(eg.inputs) * 35099) & _M64
    for io in eg.inputs:
        h = (_string_hash(io.name) + _index_vector_hash(io.indexes)
             + 19249 * io.features.num_rows + 14731 * io.features.num_cols) & _M64
        ans = (ans * 19157 + h) & _M64
    for o in eg.outputs:
        ans = (ans * 17957 + _string_hash(o.name) + _index_vector_hash(o.indexes)) & _M64
    return ans


class _ChainExampleHolder:
    """Table holder for NnetChainExample."""

    name = "NnetChainExample"

    @staticmethod
    def read(r: KaldiReader) -> NnetChainExample:
        return NnetChainExample.read(r)

    @staticmethod
    def write(w: KaldiWriter, eg: NnetChainExample) -> None:
        eg.write(w)


CHAIN_EXAMPLE_HOLDER = _ChainExampleHolder()


def iter_chain_examples(rspecifier: str) -> Iterator[tuple[str, NnetChainExample]]:
    """(key, example) pairs of a chain-egs rspecifier (``ark:...``, ``scp:...``)."""
    from ...io.table import SequentialTableReader

    with SequentialTableReader(rspecifier, CHAIN_EXAMPLE_HOLDER) as reader:
        yield from reader


__all__ = ["NnetChainSupervision", "NnetChainExample", "CHAIN_EXAMPLE_HOLDER",
           "iter_chain_examples", "chain_example_size", "chain_structure_hash",
           "chain_output_indexes"]
