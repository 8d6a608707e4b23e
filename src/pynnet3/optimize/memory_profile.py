"""Matrix memory alive over a computation's program (``nnet3-compile --plot-memory``).

The accounting is Kaldi's GetMaxMemoryUse (:func:`.analysis.get_max_memory_use`)
kept per command instead of only its maximum: kAllocMatrix and kAcceptInput
add a float32 matrix, kDeallocMatrix frees one, kCompressMatrix trades it for
1 or 2 bytes per element and kDecompressMatrix back.  Outputs handed to the
user stay allocated, so the curve need not end at zero.  The backward pass
starts at the first kNoOperationMarker (the compiler's separator of the
forward and backward segments) or, without one, at the first Backprop.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..compile.computation import CommandType, CompressedMatrixType, NnetComputation

__all__ = ["MemoryProfile", "memory_profile"]

_FLOAT_BYTES = 4
_BACKPROPS = (int(CommandType.BACKPROP), int(CommandType.BACKPROP_NO_MODEL_UPDATE))


@dataclass(frozen=True)
class MemoryProfile:
    alive: np.ndarray        # int64 [num_commands]: bytes of matrices held after each command
    delta: np.ndarray        # int64 [num_commands]: what each command adds (+) or frees (-)
    peak: int                # max of alive (0 for an empty program): GetMaxMemoryUse
    peak_index: int          # first command where alive reaches the peak (-1 if none)
    backward_start: int      # first command of the backward pass; -1 if there is none

    @property
    def num_commands(self) -> int:
        return int(self.alive.shape[0])


def memory_profile(computation: NnetComputation) -> MemoryProfile:
    """The per-command memory profile of ``computation`` (see the module docstring)."""
    T = CommandType
    n = len(computation.commands)
    delta = np.zeros(n, dtype=np.int64)
    backward_start = -1
    if n:
        table = computation.command_table()        # columns: type, arg1, ..., arg7
        kind, arg1, arg2 = table[:, 0], table[:, 1], table[:, 2]
        subs = computation.submatrix_table()       # matrix, row_off, rows, col_off, cols
        valid = (arg1 >= 0) & (arg1 < subs.shape[0])
        safe = np.where(valid, arg1, 0)
        full = _FLOAT_BYTES * subs[safe, 2] * subs[safe, 4]
        adds = (kind == int(T.ALLOC_MATRIX)) | (kind == int(T.ACCEPT_INPUT))
        frees = kind == int(T.DEALLOC_MATRIX)
        delta[adds] = full[adds]
        delta[frees] = -full[frees]
        # Compression: what a matrix was compressed to is remembered until it
        # is decompressed (rare commands, walked in order).
        compressed: dict[int, int] = {}
        one_byte = (int(CompressedMatrixType.INT8), int(CompressedMatrixType.UINT8))
        for i in np.flatnonzero((kind == int(T.COMPRESS_MATRIX))
                                | (kind == int(T.DECOMPRESS_MATRIX))):
            elements = int(full[i]) // _FLOAT_BYTES
            if kind[i] == int(T.COMPRESS_MATRIX):
                compressed[int(arg1[i])] = (1 if int(arg2[i]) in one_byte else 2) * elements
                delta[i] = compressed[int(arg1[i])] - int(full[i])
            else:
                delta[i] = int(full[i]) - compressed.get(int(arg1[i]), int(full[i]))
        markers = np.flatnonzero(kind == int(T.NO_OPERATION_MARKER))
        backprops = np.flatnonzero(np.isin(kind, _BACKPROPS))
        if backprops.size:
            before = markers[markers < backprops[0]]
            backward_start = int(before[0] if before.size else backprops[0])
    alive = np.cumsum(delta)
    peak = int(alive.max()) if n else 0
    peak_index = int(np.argmax(alive)) if n and peak > 0 else -1
    return MemoryProfile(alive, delta, max(peak, 0), peak_index, backward_start)
