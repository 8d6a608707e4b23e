"""Several chunks of an utterance in one computation (pynnet3's speed-up of
``nnet3-compute``; the idea of Kaldi's NnetBatchComputer, applied to the
chunks that nnet3-compute itself makes).

DecodableNnetSimple computes an utterance one chunk at a time, as Kaldi's
nnet3-compute does: every chunk of 50 frames is a computation of its own,
whose matrix products have a few dozen rows.  Products that small run far
below the speed of the BLAS, and the fixed cost of running a computation
(hundreds of commands) comes back for every chunk.

Here the same chunks (same boundaries, same inputs, same iVectors, same edge
padding) are handed to the network together, chunk ``j`` of a batch as
sequence ``n = j`` of one multi-sequence request laid out as Kaldi's
NnetBatchComputer::GetComputationRequest lays it out (sequence-major rows).
In test mode no component mixes different sequences, so each chunk's output
is the one it gets alone, up to float rounding in the matrix products; for
recurrent networks too, since every chunk keeps its own left context.

Chunks of the same shape (all but the first and last of an utterance, as a
rule) are batched together; a group of ``k`` chunks is split into batches
of ``max_chunks``, ``max_chunks / 2``, ... 1 chunks (greedily, no padding),
so that utterances of any length need only a few distinct computations.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..compile.request import ComputationRequest, IoSpecification
from ..errors import ConfigError
from ..nnet.index import Index
from .computer import NnetComputer

if TYPE_CHECKING:
    from .decodable import ChunkInputs, DecodableNnetSimple

__all__ = ["ChunkBatchComputer", "batch_sizes", "multi_chunk_request"]


class ChunkShape(NamedTuple):
    """What makes two chunks' requests identical (times relative to the
    chunk's first output frame, as DecodableNnetSimple shifts them)."""

    input_offset: int           # first input frame - first output frame
    num_input_frames: int
    has_ivector: bool
    num_subsampled_frames: int


def batch_sizes(num_chunks: int, max_chunks: int) -> list[int]:
    """``num_chunks`` as a sum of sizes from max_chunks, max_chunks // 2, ... 1
    (largest first), e.g. 19 with 16 -> [16, 2, 1]."""
    if max_chunks < 1:
        raise ConfigError(f"the number of chunks per batch must be >= 1, got {max_chunks}")
    sizes = []
    size = max_chunks
    while num_chunks > 0:
        while size > num_chunks:
            size //= 2
        sizes.append(size)
        num_chunks -= size
    return sizes


def multi_chunk_request(shape: ChunkShape, num_chunks: int,
                        frame_subsampling_factor: int) -> ComputationRequest:
    """The request of ``num_chunks`` chunks of one shape: sequence n has the
    input frames input_offset ... and the output frames 0, f, 2f, ... (f =
    the frame-subsampling factor); n is the slowest-varying index.  With one
    chunk it is DecodableNnetSimple's request for that chunk."""
    t_begin = shape.input_offset
    t_end = t_begin + shape.num_input_frames
    inputs = [IoSpecification("input", [Index(n, t, 0) for n in range(num_chunks)
                                        for t in range(t_begin, t_end)])]
    if shape.has_ivector:
        inputs.append(IoSpecification("ivector", [Index(n, 0, 0) for n in range(num_chunks)]))
    outputs = [IoSpecification("output", [Index(n, i * frame_subsampling_factor, 0)
                                          for n in range(num_chunks)
                                          for i in range(shape.num_subsampled_frames)])]
    return ComputationRequest(inputs=inputs, outputs=outputs, need_model_derivative=False,
                              store_component_stats=False)


class ChunkBatchComputer:
    """Computes all the chunks of an utterance, ``max_chunks`` at most in
    one computation.  One object serves a whole run: it keeps the requests
    it has built (the compiler keeps their computations)."""

    def __init__(self, max_chunks: int) -> None:
        if max_chunks < 1:
            raise ConfigError(f"the number of chunks per batch must be >= 1, got {max_chunks}")
        self.max_chunks = max_chunks
        self._requests: dict[tuple[ChunkShape, int, int], ComputationRequest] = {}

    def get_all_output(self, decodable: "DecodableNnetSimple") -> np.ndarray:
        """What ``decodable.get_all_output()`` returns, the chunks computed in
        batches."""
        chunks: list[tuple[int, ChunkInputs]] = []
        t = 0
        while t < decodable.num_frames():
            chunk = decodable.chunk_inputs(t)
            chunks.append((t, chunk))
            t += chunk.num_subsampled_frames
        groups: dict[ChunkShape, list[tuple[int, ChunkInputs]]] = {}
        for start, chunk in chunks:
            has_ivector = chunk.ivector is not None and chunk.ivector.shape[0] != 0
            shape = ChunkShape(chunk.input_t_start - chunk.output_t_start,
                               chunk.input_feats.shape[0], has_ivector,
                               chunk.num_subsampled_frames)
            groups.setdefault(shape, []).append((start, chunk))
        out = np.empty((decodable.num_frames(), decodable.output_dim), dtype=np.float32)
        for shape, members in groups.items():
            begin = 0
            for size in batch_sizes(len(members), self.max_chunks):
                batch = members[begin:begin + size]
                begin += size
                output = self._compute(decodable, shape, [c for _, c in batch])
                rows = shape.num_subsampled_frames
                for j, (start, _) in enumerate(batch):
                    out[start:start + rows] = output[j * rows:(j + 1) * rows]
        if decodable.log_priors.shape[0] != 0:
            out -= decodable.log_priors
        if decodable.opts.acoustic_scale != 1.0:
            out *= np.float32(decodable.opts.acoustic_scale)
        return out

    def _request(self, shape: ChunkShape, num_chunks: int,
                 frame_subsampling_factor: int) -> ComputationRequest:
        key = (shape, num_chunks, frame_subsampling_factor)
        request = self._requests.get(key)
        if request is None:
            request = multi_chunk_request(shape, num_chunks, frame_subsampling_factor)
            self._requests[key] = request
        return request

    def _compute(self, decodable: "DecodableNnetSimple", shape: ChunkShape,
                 batch: "list[ChunkInputs]") -> np.ndarray:
        opts = decodable.opts
        request = self._request(shape, len(batch), opts.frame_subsampling_factor)
        computation = decodable.compiler.compile(request)
        compute_config = opts.compute_config
        if opts.debug_computation and not compute_config.debug:
            compute_config = dataclasses.replace(compute_config, debug=True)
        computer = NnetComputer(compute_config, computation, decodable.nnet, None,
                                backend=decodable.backend)
        if len(batch) == 1:
            feats = np.ascontiguousarray(batch[0].input_feats)
        else:
            feats = np.concatenate([c.input_feats for c in batch], axis=0)
        computer.accept_input("input", feats)
        if shape.has_ivector:
            computer.accept_input("ivector", np.stack([np.asarray(c.ivector, dtype=np.float32)
                                                       .ravel() for c in batch]))
        computer.run()
        output: Any = computer.get_output_destructive("output")
        return np.asarray(output, dtype=np.float32)
