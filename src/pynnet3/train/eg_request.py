"""From an example to a computation: Kaldi's GetComputationRequest
(nnet-example-utils.cc) and the matching input feeding (AcceptInputs)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..compile.request import ComputationRequest, IoSpecification
from ..errors import PynnetError

if TYPE_CHECKING:
    from ..compute.computer import NnetComputer
    from ..nnet.nnet import Nnet
    from .egs import NnetExample

__all__ = ["get_computation_request", "accept_example_inputs"]


def get_computation_request(nnet: "Nnet", eg: "NnetExample", need_model_derivative: bool,
                            store_component_stats: bool) -> ComputationRequest:
    """The request of a (merged) example: each NnetIo becomes an input or an
    output of the request with the example's Indexes; outputs carry a
    derivative exactly when the model derivative is wanted."""
    request = ComputationRequest(need_model_derivative=need_model_derivative,
                                 store_component_stats=store_component_stats)
    for io in eg.io:
        node = nnet.get_node_index(io.name)
        if node == -1 or not (nnet.is_input_node(node) or nnet.is_output_node(node)):
            raise PynnetError(f"Nnet example has input or output named '{io.name}', but no "
                              "such input or output node is in the network.")
        is_input = nnet.is_input_node(node)
        spec = IoSpecification(io.name, io.index_list(),
                               has_deriv=nnet.is_output_node(node) and need_model_derivative)
        (request.inputs if is_input else request.outputs).append(spec)
    if not request.inputs:
        raise PynnetError("No inputs in computation request.")
    if not request.outputs:
        raise PynnetError("No outputs in computation request.")
    return request


def accept_example_inputs(computer: "NnetComputer", nnet: "Nnet", eg: "NnetExample") -> None:
    """Kaldi's NnetComputer::AcceptInputs(nnet, eg.io): every NnetIo of an
    input node (compressed or sparse features are expanded to a full matrix)."""
    computer.accept_inputs(nnet, eg.io)
