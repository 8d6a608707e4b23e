"""Run the computation of one ComputationRequest on given inputs (what
``nnet3-compute-request`` does; Kaldi has no such binary, its unit tests do
the same with NnetComputer).

Matrices are named as in the reference data of Kaldi's test networks:
``in_<node>`` the value of each input of the request, ``outderiv_<node>``
the derivative supplied for each output that has ``has-deriv``; the results
are ``out_<node>`` for each output and ``inderiv_<node>`` for each input
that has ``has-deriv``.  Rows follow the request's index order.

The computation is compiled (and optimized) through the computation cache,
run forward, and, when the request asks for derivatives, run backward with
the output derivatives.  The network is used as it is (BatchNorm in training
mode computes batch statistics, as Kaldi's NnetComputer does) unless
``test_mode`` puts batch-norm and dropout in test mode first.  Parameter
updates and statistics go to ``nnet_to_update`` (a copy of the network when
none is given), never to ``nnet`` itself.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import PynnetError
from .computer import NnetComputeOptions, NnetComputer

if TYPE_CHECKING:
    from ..cache import CachingCompiler
    from ..compile.request import ComputationRequest
    from ..nnet.nnet import Nnet

__all__ = ["compute_request", "required_input_names"]


def required_input_names(request: "ComputationRequest") -> list[str]:
    """The matrices :func:`compute_request` needs, in the order it uses them."""
    return ([f"in_{io.name}" for io in request.inputs]
            + [f"outderiv_{io.name}" for io in request.outputs if io.has_deriv])


def compute_request(nnet: "Nnet", request: "ComputationRequest",
                    inputs: Mapping[str, Any], compiler: "CachingCompiler",
                    backend: Any = "reference",
                    compute_options: NnetComputeOptions | None = None,
                    nnet_to_update: "Nnet | None" = None) -> dict[str, np.ndarray]:
    """``out_<node>`` (and ``inderiv_<node>``) for ``request`` given ``inputs``
    (``in_<node>``, and ``outderiv_<node>`` for outputs with derivatives)."""
    missing = [name for name in required_input_names(request) if name not in inputs]
    if missing:
        raise PynnetError(f"no matrix for {', '.join(missing)} (the request needs "
                          f"{', '.join(required_input_names(request))})")
    computation = compiler.compile(request)
    needs_target = (request.need_model_derivative or request.store_component_stats
                    or any(io.has_deriv for io in request.outputs))
    if nnet_to_update is None and needs_target:
        nnet_to_update = copy.deepcopy(nnet)
    computer = NnetComputer(compute_options or NnetComputeOptions(), computation, nnet,
                            nnet_to_update, backend=backend)
    for io in request.inputs:
        computer.accept_input(io.name, np.asarray(inputs[f"in_{io.name}"], dtype=np.float32))
    computer.run()
    results: dict[str, np.ndarray] = {}
    for io in request.outputs:
        results[f"out_{io.name}"] = np.array(computer.get_output(io.name), dtype=np.float32)
    if not any(io.has_deriv for io in request.outputs):
        return results
    for io in request.outputs:
        if io.has_deriv:
            computer.accept_output_deriv(
                io.name, np.asarray(inputs[f"outderiv_{io.name}"], dtype=np.float32))
    computer.run()
    for io in request.inputs:
        if io.has_deriv:
            results[f"inderiv_{io.name}"] = np.array(computer.get_input_deriv(io.name),
                                                     dtype=np.float32)
    return results
