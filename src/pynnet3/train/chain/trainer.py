"""Chain training (Kaldi's NnetChainTrainer, nnet3/nnet-chain-training.{h,cc}).

:class:`NnetChainTrainer` is pynnet3's :class:`~pynnet3.train.trainer.NnetTrainer`
(SGD step, max-change, momentum, l2, natural gradient, batch-norm,
backstitch, caches) with the example hooks for chain egs:

* the request (Kaldi's GetChainComputationRequest): the example's inputs,
  and for each supervised output its Indexes, plus ``<name>-xent`` with the
  same Indexes when ``--xent-regularize`` is nonzero;
* the objective: :func:`~.objective.compute_chain_objf_and_deriv` on the
  output; with xent, the ``-xent`` output's objective is the trace of its
  output times the numerator posteriors, and its derivative is those
  posteriors times ``xent_regularize``; both derivatives are scaled by the
  example's deriv weights with ``--apply-deriv-weights``;
* GetNumNvalues (the l2 factor) looks at the inputs only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...compile.request import ComputationRequest, IoSpecification
from ...errors import PynnetError
from ...nnet.index import Index
from ..kaldi_random import GlibcRand
from ..trainer import NnetTrainer, NnetTrainerOptions
from .den_graph import DenominatorGraph
from .objective import ChainTrainingOptions, compute_chain_objf_and_deriv, sum_of_products

if TYPE_CHECKING:
    from ...compute.computer import NnetComputer
    from ...nnet.nnet import Nnet
    from .egs import NnetChainExample

F32 = np.float32

__all__ = ["NnetChainTrainingOptions", "NnetChainTrainer", "get_chain_computation_request",
           "chain_example_key"]


@dataclass
class NnetChainTrainingOptions:
    """Kaldi's NnetChainTrainingOptions."""

    nnet_config: NnetTrainerOptions = field(default_factory=NnetTrainerOptions)
    chain_config: ChainTrainingOptions = field(default_factory=ChainTrainingOptions)
    apply_deriv_weights: bool = field(default=True, metadata={
        "flag": "apply-deriv-weights", "help": "If true, apply the per-frame derivative "
        "weights stored with the example"})


def get_chain_computation_request(nnet: "Nnet", eg: "NnetChainExample",
                                  need_model_derivative: bool, store_component_stats: bool,
                                  use_xent_regularization: bool,
                                  use_xent_derivative: bool) -> ComputationRequest:
    """Kaldi's GetChainComputationRequest."""
    request = ComputationRequest(need_model_derivative=need_model_derivative,
                                 store_component_stats=store_component_stats)
    for io in eg.inputs:
        if io.name.startswith("__"):      # non-compute data (e.g. for LWF)
            continue
        node = nnet.get_node_index(io.name)
        if node == -1 or not nnet.is_input_node(node):
            raise PynnetError(f"Nnet example has input named '{io.name}', but no such input "
                              "node is in the network.")
        request.inputs.append(IoSpecification(io.name, io.index_list(), False))
    for sup in eg.outputs:
        node = nnet.get_node_index(sup.name)
        if node == -1 or not nnet.is_output_node(node):
            raise PynnetError(f"Nnet example has output named '{sup.name}', but no such "
                              "output node is in the network.")
        index_list = [Index(n, t, x) for n, t, x in sup.indexes.tolist()]
        request.outputs.append(IoSpecification(sup.name, index_list, need_model_derivative))
        if use_xent_regularization:
            request.outputs.append(IoSpecification(sup.name + "-xent", list(index_list),
                                                   use_xent_derivative))
    if not request.inputs:
        raise PynnetError("No inputs in computation request.")
    return request


def chain_example_key(eg: "NnetChainExample") -> tuple:
    """What a chain example's computation depends on (names and Indexes)."""
    return (tuple((io.name, io.indexes.tobytes()) for io in eg.inputs),
            tuple((sup.name, sup.indexes.tobytes()) for sup in eg.outputs))


class NnetChainTrainer(NnetTrainer):
    """Kaldi's NnetChainTrainer; ``nnet`` is trained in place."""

    def __init__(self, opts: NnetChainTrainingOptions, den_graph: DenominatorGraph,
                 nnet: "Nnet", rand: GlibcRand | None = None, backend: Any = "reference") -> None:
        opts.chain_config.check()
        self.chain_opts = opts
        self.den_graph = den_graph
        super().__init__(opts.nnet_config, nnet, rand, backend)

    @property
    def _use_cuda(self) -> bool:
        return getattr(self.backend, "name", self.backend) == "cuda"

    @property
    def _use_xent(self) -> bool:
        return self.chain_opts.chain_config.xent_regularize != 0.0

    def _example_key(self, eg: Any) -> tuple:
        return chain_example_key(eg)

    def _computation_request(self, eg: Any) -> Any:
        return get_chain_computation_request(self.nnet, eg, True,
                                             self.config.store_component_stats,
                                             self._use_xent, True)

    def _accept_inputs(self, computer: "NnetComputer", eg: Any) -> None:
        computer.accept_inputs(self.nnet, eg.inputs)

    def _nvalues_ios(self, eg: Any) -> Any:
        return eg.inputs

    def _process_outputs(self, is_backstitch_step2: bool, eg: Any,
                         computer: "NnetComputer") -> None:
        suffix = "_backstitch" if is_backstitch_step2 else ""
        chain_config = self.chain_opts.chain_config
        use_xent = self._use_xent
        for sup in eg.outputs:
            node = self.nnet.get_node_index(sup.name)
            if node < 0 or not self.nnet.is_output_node(node):
                raise PynnetError(f"Network has no output named {sup.name}")
            nnet_output = computer.get_output(sup.name)
            xent_name = sup.name + "-xent"
            res = compute_chain_objf_and_deriv(chain_config, self.den_graph, sup.supervision,
                                               nnet_output, True, use_xent,
                                               self.rand.rand_int, self._use_cuda)
            deriv, xent_deriv = res.deriv, res.xent_deriv
            if use_xent:
                xent_output = computer.get_output(xent_name)
                xent_objf = float(F32(sum_of_products(xent_output, xent_deriv)))
                self._objf_info(xent_name + suffix).update_stats(
                    xent_name + suffix, self.config.print_interval,
                    self.num_minibatches_processed, res.weight, xent_objf)
            if self.chain_opts.apply_deriv_weights and sup.deriv_weights.size:
                dw = sup.deriv_weights.astype(F32)[:, None]
                deriv *= dw
                if use_xent:
                    xent_deriv *= dw
            computer.accept_input(sup.name, deriv)
            self._objf_info(sup.name + suffix).update_stats(
                sup.name + suffix, self.config.print_interval, self.num_minibatches_processed,
                res.weight, res.objf, res.l2_term)
            if use_xent:
                xent_deriv *= F32(chain_config.xent_regularize)
                computer.accept_input(xent_name, xent_deriv)
