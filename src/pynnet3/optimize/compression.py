"""Compress matrices kept for the backward pass (Kaldi's
MemoryCompressionOptimizer and OptimizeMemoryCompression, nnet-optimize-utils).

In training, many forward values are held only until the backward pass
reads them.  Between their last forward use and first backward use they
can be stored compressed (CompressMatrix / DecompressMatrix commands):

* level >= 1: a matrix whose only backward use is the Backprop of a
  RectifiedLinearComponent (which needs only the sign of its output) is
  stored as signs in one byte per element (alpha 0, uint8) -- exact;
* level >= 2: any other such matrix is stored in 16 bits over [-10, 10]
  (lossy; zero stays exactly zero).

Must run after the other optimizations (variable merging would not handle
compressed matrices) and is not applied to looped computations.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compile.computation import Command, CommandType, CompressedMatrixType, NnetComputation
from .. import log
from .accesses import MatrixAccessesList
from .analysis import LazyAnalyzer, analyzer_of, get_max_memory_use
from .variables import AccessType
from .renumber import insert_commands, whole_submatrices

__all__ = ["optimize_memory_compression", "MemoryCompressionOptimizer"]

T = CommandType


@dataclass(frozen=True, slots=True)
class MatrixCompressInfo:
    """Compress matrix ``m`` just after command ``compression_command_index``
    and decompress it just before ``uncompression_command_index``."""

    m: int
    compression_command_index: int
    uncompression_command_index: int
    compression_type: CompressedMatrixType
    # Values are stored in [-range, range] (signed types) or [0, range];
    # range 0 stores only the sign.
    range: float
    # Whether values outside the range may occur (and must be clipped).
    truncate: bool


class MemoryCompressionOptimizer:
    """Kaldi's MemoryCompressionOptimizer; use :func:`optimize_memory_compression`.

    ``middle_command`` is the NoOperationMarker between the forward and the
    backward commands."""

    def __init__(self, nnet: Any, memory_compression_level: int, middle_command: int,
                 computation: NnetComputation) -> None:
        self.nnet = nnet
        self.memory_compression_level = memory_compression_level
        self.middle_command = middle_command
        self.computation = computation
        self.compress_info: list[MatrixCompressInfo] = []

    analyzer = LazyAnalyzer()

    def optimize(self) -> None:
        self.analyzer = analyzer_of(self.nnet, self.computation)
        for m in self._candidate_matrices():
            self.process_matrix(m)
        if self.compress_info:
            self.modify_computation()

    def _candidate_matrices(self) -> list[int]:
        """The matrices :meth:`process_matrix` may compress: not outputs, and
        accessed both before and after the marker (all others it leaves)."""
        ma = self.analyzer.matrix_accesses
        num_matrices = len(self.computation.matrices)
        if not isinstance(ma, MatrixAccessesList) or num_matrices < 2:
            return list(range(1, num_matrices))
        bounds = ma.bounds
        before = np.concatenate(
            [[0], np.cumsum(ma.access_commands < self.middle_command)])[bounds]
        num_before = np.diff(before)[1:]
        count = np.diff(bounds)[1:]
        ok = (num_before > 0) & (num_before < count) & ~np.array(ma.is_output[1:], dtype=bool)
        return (np.flatnonzero(ok) + 1).tolist()

    def process_matrix(self, m: int) -> None:
        accesses = self.analyzer.matrix_accesses[m]
        if accesses.is_output:
            return   # the user reads it as it is
        acc = accesses.accesses
        # first access at or after the marker
        i = bisect.bisect_left([a.command_index for a in acc], self.middle_command)
        if i == len(acc) or i == 0:
            return   # not used in both the forward and the backward pass
        backward, forward = acc[i], acc[i - 1]
        is_last_access = i + 1 == len(acc)
        backward_command = self.computation.commands[backward.command_index]
        if (self.memory_compression_level >= 1 and is_last_access
                and backward.access_type is AccessType.READ
                and backward_command.command_type is T.BACKPROP
                and self.nnet.get_component(backward_command.arg1).type_name
                == "RectifiedLinearComponent"):
            # the ReLU's backprop needs only the sign of its output
            self.compress_info.append(MatrixCompressInfo(
                m, forward.command_index, backward.command_index,
                CompressedMatrixType.UINT8, 0.0, True))
            return
        if self.memory_compression_level >= 2:
            self.compress_info.append(MatrixCompressInfo(
                m, forward.command_index, backward.command_index,
                CompressedMatrixType.INT16, 10.0, True))
            return
        # (Kaldi has nothing more for level 3 yet.)

    def modify_computation(self) -> None:
        whole = whole_submatrices(self.computation)
        pairs: list[tuple[int, Command]] = []
        for info in self.compress_info:
            s = whole[info.m]
            pairs.append((info.compression_command_index + 1,
                          Command(T.COMPRESS_MATRIX, info.range, s, int(info.compression_type),
                                  1 if info.truncate else 0)))
            pairs.append((info.uncompression_command_index,
                          Command(T.DECOMPRESS_MATRIX, 1.0, s)))
        insert_commands(pairs, self.computation)


def optimize_memory_compression(nnet: Any, memory_compression_level: int,
                                computation: NnetComputation) -> None:
    """Kaldi's OptimizeMemoryCompression, in place (see the module docstring).
    Does nothing at level 0, for looped computations, and for computations
    without a backward pass."""
    commands = computation.commands
    if memory_compression_level == 0 or not commands:
        return
    if commands[-1].command_type is T.GOTO_LABEL:
        return
    markers = [i for i, c in enumerate(commands) if c.command_type is T.NO_OPERATION_MARKER]
    if not markers:
        return   # no backward pass
    if len(markers) > 1:
        log.warn("Found more than one command of type kNoOperationMarker in non-looped "
                 "computation.")
        return
    verbose = log.verbose_level() >= 2
    before = get_max_memory_use(computation) if verbose else 0
    MemoryCompressionOptimizer(nnet, memory_compression_level, markers[0], computation).optimize()
    if verbose:
        after = get_max_memory_use(computation)
        if after != before:
            log.vlog(2, f"Memory compression reduced  memory use from {before} to "
                        f"{after} bytes.")
