"""Left and right context of a "simple" network (Kaldi's nnet-utils.cc:
IsSimpleNnet, ComputeSimpleNnetContext, NnetInfo).

A simple network has an output node ``output``, an input node ``input`` and
optionally an input node ``ivector``.  Its context is found empirically:
build the computation graph for a window of frames, see which output frames
are computable, and widen the window until some are.  :mod:`.context_reads`
accelerates this for feed-forward networks (same answer, no graphs).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ... import fast_paths
from ...errors import PynnetError
from ...nnet.index import Index

if TYPE_CHECKING:
    from ..request import ComputationRequest
    from ...nnet.nnet import Nnet


def is_simple_nnet(nnet: "Nnet") -> bool:
    """Kaldi's IsSimpleNnet."""
    out = nnet.get_node_index("output")
    if out == -1 or not nnet.is_output_node(out):
        return False
    inp = nnet.get_node_index("input")
    if inp == -1 or not nnet.is_input_node(inp):
        return False
    if sum(1 for n in range(nnet.num_nodes()) if nnet.is_input_node(n)) == 1:
        return True
    iv = nnet.get_node_index("ivector")
    return iv != -1 and nnet.is_input_node(iv)


def evaluate_computation_request(nnet: "Nnet", request: "ComputationRequest") -> list[list[bool]]:
    """For each output of ``request``, which of its Indexes can be computed."""
    from .builder import ComputationGraphBuilder

    builder = ComputationGraphBuilder(nnet)
    builder.compute(request)
    return builder.get_computable_info()


# Kaldi picks n at random in [0, 10); the context does not depend on it.
_N = 0


def _context_for_shift(nnet: "Nnet", input_start: int, window_size: int,
                       modulus: int) -> tuple[int, int] | None:
    """(left, right) for one window, or None if no output frame is computable."""
    from ..request import ComputationRequest, IoSpecification

    input_end = input_start + window_size
    frames = [Index(_N, t, 0) for t in range(input_start, input_end)]
    request = ComputationRequest(
        inputs=[IoSpecification("input", list(frames))],
        outputs=[IoSpecification("output", list(frames))])
    # The ivector may be needed at earlier times than the input if a Round()
    # descriptor is applied to it, so give it a modulus more on the left.
    if nnet.get_node_index("ivector") != -1:
        request.inputs.append(IoSpecification(
            "ivector", [Index(_N, t, 0) for t in range(input_start - modulus, input_end)]))
    computable = evaluate_computation_request(nnet, request)
    return _context_from_computable(computable[0], window_size)


def _context_from_computable(output_ok: list[bool], window_size: int) -> tuple[int, int] | None:
    """(left, right) from which outputs of the window are computable."""
    try:
        first_ok = output_ok.index(True)
    except ValueError:
        return None
    try:
        first_not_ok = output_ok.index(False, first_ok)
    except ValueError:
        first_not_ok = window_size
    if first_not_ok <= first_ok:
        return None
    return first_ok, window_size - first_not_ok


def compute_simple_nnet_context(nnet: "Nnet") -> tuple[int, int]:
    """(left_context, right_context) of a simple network (ComputeSimpleNnetContext).

    Every time shift modulo the network's modulus is tried (plus one more,
    as a sanity check), and the largest contexts are returned.  The window
    starts at 40 frames and doubles while no output is computable, up to 800.

    Kaldi decides which outputs of each window are computable by building
    the computation graph; for the usual feed-forward networks
    (:mod:`.context_reads`) the same decisions come from a summary of what
    each output frame reads, much faster (``fast_paths.current().context_from_reads``
    off: always build the graphs, as Kaldi).
    """
    if not is_simple_nnet(nnet):
        raise PynnetError("compute_simple_nnet_context: not a simple network (needs nodes "
                          "'input', 'output' and optionally 'ivector')")
    from .context_reads import output_reads

    modulus = nnet.modulus()
    reads = output_reads(nnet, modulus) if fast_paths.current().context_from_reads else None
    window_size, max_window_size = 40, 800
    while window_size < max_window_size:
        contexts = []
        for input_start in range(modulus + 1):
            if reads is not None:
                ans = _context_from_computable(
                    reads.computable_outputs(input_start, window_size), window_size)
            else:
                ans = _context_for_shift(nnet, input_start, window_size, modulus)
            if ans is None:
                break
            contexts.append(ans)
        if len(contexts) <= modulus:
            window_size *= 2  # assume the window was too small for the context
            continue
        if contexts[0] != contexts[modulus]:
            raise PynnetError("compute_simple_nnet_context: the network's context is not "
                              "periodic with its modulus")
        return max(c[0] for c in contexts), max(c[1] for c in contexts)
    raise PynnetError("failure in compute_simple_nnet_context (perhaps not a simple nnet?)")


def nnet_info(nnet: "Nnet") -> str:
    """Kaldi's NnetInfo (what ``nnet3-info`` prints): for a simple network its
    left and right context, then :meth:`Nnet.info`."""
    out = []
    if is_simple_nnet(nnet):
        left, right = compute_simple_nnet_context(nnet)
        out.append(f"left-context: {left}\n")
        out.append(f"right-context: {right}\n")
    return "".join(out) + nnet.info()
