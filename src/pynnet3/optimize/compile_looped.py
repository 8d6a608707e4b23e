"""Compile a looped ('online') computation (Kaldi's nnet-compile-looped).

Online decoding runs the network chunk by chunk, keeping the activations a
later chunk still needs.  It is compiled from three requests -- the first
chunk (with the left context), the second and the third, each shifted by
the chunk size -- extrapolated to a few more chunks, compiled as one
multi-segment computation and optimized with ``optimize_looped_computation``
so that it ends in a loop (see :mod:`.looped`).  If no repeat is found the
number of chunks is doubled and it is tried again.

Also here: the helpers that build those requests for simple networks, and
:func:`modify_nnet_ivector_period`, which makes a network read its i-vector
only every few frames.
"""
from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING

from ..compile.compiler import Compiler, CompilerOptions
from ..compile.computation import CommandType
from ..compile.request import ComputationRequest, IoSpecification
from ..errors import PynnetError
from ..log import log, vlog
from ..nnet.index import Index
from .pipeline import max_output_time_in_request, optimize

if TYPE_CHECKING:
    from ..compile.computation import NnetComputation
    from ..nnet.nnet import Nnet
    from .options import OptimizeOptions

__all__ = ["compile_looped", "create_looped_computation_request",
           "create_looped_computation_request_simple", "add_time_offset_to_computation_request",
           "extrapolate_computation_request", "get_chunk_size", "modify_nnet_ivector_period"]


def modify_nnet_ivector_period(ivector_period: int, nnet: "Nnet") -> None:
    """Kaldi's ModifyNnetIvectorPeriod: in every component-node line,
    ``ReplaceIndex(X, t, 0)`` becomes ``Round(X, ivector_period)``, so the
    i-vector is read at multiples of the period instead of at t = 0."""
    if ivector_period <= 0:
        raise PynnetError("ivector-period must be > 0")
    needle, tail = "ReplaceIndex(", ", t, 0)"
    new_lines = []
    for line in nnet.get_config_lines(False):
        if not line.startswith("component-node"):
            continue
        pos = line.find(needle)
        if pos < 0:
            continue
        comma = line.find(tail, pos)
        if comma < 0:
            raise PynnetError(f"Could not process the ReplaceIndex expression in: {line}")
        name = line[pos + len(needle):comma]
        new_lines.append(line[:pos] + f"Round({name}, {ivector_period})"
                         + line[comma + len(tail):])
    if new_lines:
        nnet.read_config("\n".join(new_lines) + "\n", "<modify-ivector-period>")


def get_chunk_size(nnet: "Nnet", frame_subsampling_factor: int, advised_chunk_size: int) -> int:
    """Kaldi's GetChunkSize: the smallest size >= the advised one that is a
    multiple of the network's modulus and of the frame-subsampling factor."""
    modulus = nnet.modulus()
    if modulus <= 0 or frame_subsampling_factor <= 0 or advised_chunk_size <= 0:
        raise PynnetError("get_chunk_size: arguments must be positive")
    chunk_size = advised_chunk_size
    while chunk_size % modulus != 0 or chunk_size % frame_subsampling_factor != 0:
        chunk_size += 1
    return chunk_size


def _create_computation_request_internal(begin_input_t: int, end_input_t: int,
                                         begin_output_t: int, end_output_t: int,
                                         num_sequences: int, frame_subsampling_factor: int,
                                         ivector_times: list[int]) -> ComputationRequest:
    """One chunk's request.  Rows are n-major (all t of sequence 0 first),
    the layout convenient for callers; the computation reorders internally."""
    inputs = [IoSpecification("input", [Index(n, t, 0) for n in range(num_sequences)
                                        for t in range(begin_input_t, end_input_t)], False)]
    outputs = [IoSpecification("output", [Index(n, t, 0) for n in range(num_sequences)
                                          for t in range(begin_output_t, end_output_t,
                                                         frame_subsampling_factor)], False)]
    if ivector_times:
        inputs.append(IoSpecification("ivector", [Index(n, t, 0) for n in range(num_sequences)
                                                  for t in sorted(ivector_times)], False))
    return ComputationRequest(inputs=inputs, outputs=outputs)


def create_looped_computation_request(
        nnet: "Nnet", chunk_size: int, frame_subsampling_factor: int, ivector_period: int,
        left_context_begin: int, right_context: int, num_sequences: int,
) -> tuple[ComputationRequest, ComputationRequest, ComputationRequest]:
    """Kaldi's CreateLoopedComputationRequest: the requests of the first
    three chunks.  Chunk 1 takes input from -left_context_begin to
    chunk_size + right_context; the others take the next chunk_size
    frames; outputs are [0, chunk_size), [chunk_size, 2 chunk_size), ...
    Each chunk asks only for the i-vector times (multiples of
    ivector_period) that no earlier chunk asked for."""
    has_ivector = nnet.input_dim("ivector") > 0
    if (chunk_size % frame_subsampling_factor != 0 or chunk_size % nnet.modulus() != 0
            or chunk_size % ivector_period != 0):
        raise PynnetError(f"chunk size {chunk_size} must be a multiple of the frame-subsampling "
                          "factor, the network's modulus and the ivector period")
    if left_context_begin < 0 or right_context < 0:
        raise PynnetError("contexts must be >= 0")
    begin1, end1 = -left_context_begin, chunk_size + right_context
    bounds = [(begin1, end1), (end1, end1 + chunk_size),
              (end1 + chunk_size, end1 + 2 * chunk_size)]
    seen: set[int] = set()
    requests = []
    for k, (begin, end) in enumerate(bounds):
        times: list[int] = []
        if has_ivector:
            # (t - t mod period, with a nonnegative modulus)
            for t in range(begin, end):
                it = t - t % ivector_period
                if it not in seen:
                    seen.add(it)
                    times.append(it)
        requests.append(_create_computation_request_internal(
            begin, end, k * chunk_size, (k + 1) * chunk_size, num_sequences,
            frame_subsampling_factor, times))
    return requests[0], requests[1], requests[2]


def create_looped_computation_request_simple(
        nnet: "Nnet", chunk_size: int, frame_subsampling_factor: int, ivector_period: int,
        extra_left_context_begin: int, extra_right_context: int, num_sequences: int,
) -> tuple[ComputationRequest, ComputationRequest, ComputationRequest]:
    """Kaldi's CreateLoopedComputationRequestSimple: as
    :func:`create_looped_computation_request` with the network's own
    context added to the extra context."""
    from ..compile.graph.context import compute_simple_nnet_context

    left_context, right_context = compute_simple_nnet_context(nnet)
    return create_looped_computation_request(
        nnet, chunk_size, frame_subsampling_factor, ivector_period,
        extra_left_context_begin + left_context, extra_right_context + right_context,
        num_sequences)


def add_time_offset_to_computation_request(t_offset: int,
                                           request: ComputationRequest) -> None:
    """Kaldi's AddTimeOffsetToComputationRequest, in place."""
    for io in list(request.inputs) + list(request.outputs):
        io.indexes = [Index(i.n, i.t + t_offset, i.x) for i in io.indexes]


def extrapolate_computation_request(request1: ComputationRequest,
                                    request2: ComputationRequest) -> ComputationRequest | None:
    """Kaldi's ExtrapolateComputationRequest: request2 shifted once more by
    the shift from request1 to request2; None if request2 is not exactly
    request1 shifted."""
    if not (request1.inputs and request1.inputs[0].indexes and request2.inputs
            and request2.inputs[0].indexes):
        raise PynnetError("extrapolate_computation_request: requests without inputs")
    t_offset = request2.inputs[0].indexes[0].t - request1.inputs[0].indexes[0].t
    request3 = copy.deepcopy(request2)
    add_time_offset_to_computation_request(-t_offset, request3)
    if request3 != request1:
        return None
    add_time_offset_to_computation_request(2 * t_offset, request3)
    return request3


def _compile_looped_internal(nnet: "Nnet", optimize_opts: "OptimizeOptions",
                             request1: ComputationRequest, request2: ComputationRequest,
                             request3: ComputationRequest,
                             num_requests: int) -> "NnetComputation":
    if num_requests < 3:
        raise PynnetError("looped compilation needs at least 3 requests")
    requests = [request1, request2, request3]
    while len(requests) < num_requests:
        extra = extrapolate_computation_request(requests[-2], requests[-1])
        if extra is None:
            raise PynnetError("Computation requests do not have the right relationship:\n"
                              f"prev_request is:\n{requests[-2].print()}"
                              f"cur_request is:\n{requests[-1].print()}")
        requests.append(extra)
    computation = Compiler(requests, nnet).create_computation(CompilerOptions())
    options = optimize_opts.replace(optimize_looped_computation=True)
    # (the output time only matters with max-deriv-time-relative, which a
    # computation without backprop ignores)
    return optimize(options, nnet, max_output_time_in_request(request3), computation)


def compile_looped(nnet: "Nnet", optimize_opts: "OptimizeOptions",
                   request1: ComputationRequest, request2: ComputationRequest,
                   request3: ComputationRequest) -> "NnetComputation":
    """Kaldi's CompileLooped: a computation that takes chunk after chunk for
    ever (it ends in a GotoLabel).  Tries 5, 10, 20, ... chunks until the
    looped optimization finds a repeat."""
    start = time.perf_counter()
    num_requests, factor, max_requests = 5, 2, 100
    while num_requests <= max_requests:
        computation = _compile_looped_internal(nnet, optimize_opts, request1, request2,
                                               request3, num_requests)
        if computation.commands and \
                computation.commands[-1].command_type is CommandType.GOTO_LABEL:
            log(f"Spent {time.perf_counter() - start:g} seconds in looped compilation.")
            return computation
        vlog(2, f"Looped compilation failed with {num_requests} requests, trying "
                f"{num_requests * factor}")
        num_requests *= factor
    raise PynnetError(f"Looped compilation failed with {num_requests // factor} requests, "
                      "which we expect should be enough... something went wrong.")
