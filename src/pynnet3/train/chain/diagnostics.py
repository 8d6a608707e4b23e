"""Chain objectives on held-out examples (Kaldi's NnetChainComputeProb,
nnet3/nnet-chain-diagnostics.{h,cc}), as nnet3-chain-compute-prob prints
them, and RecomputeStats for nnet3-chain-combine.

:class:`NnetChainComputeProb` is :class:`~pynnet3.train.diagnostics.NnetComputeProb`
with the chain example hooks: per output the chain objective (plus its l2
term) and, with ``--xent-regularize``, the ``-xent`` output's cross-entropy
against the numerator posteriors, each over the supervision's weight.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ... import log
from ...errors import PynnetError
from ...nnet.components.base import fmt_g
from ..diagnostics import NnetComputeProb, NnetComputeProbOptions
from ..nnet_update import zero_component_stats
from .den_graph import DenominatorGraph
from .objective import ChainTrainingOptions, compute_chain_objf_and_deriv, sum_of_products
from .trainer import get_chain_computation_request

if TYPE_CHECKING:
    from ...compute.computer import NnetComputer
    from ...nnet.nnet import Nnet
    from .egs import NnetChainExample

F32 = np.float32

__all__ = ["ChainObjectiveInfo", "NnetChainComputeProb", "recompute_chain_stats"]


@dataclass
class ChainObjectiveInfo:
    tot_weight: float = 0.0
    tot_like: float = 0.0
    tot_l2_term: float = 0.0


class NnetChainComputeProb(NnetComputeProb):
    """Kaldi's NnetChainComputeProb (``stats_nnet=nnet``: the constructor
    taking ``Nnet*``, which stores component stats in the network)."""

    def __init__(self, config: NnetComputeProbOptions, chain_config: ChainTrainingOptions,
                 den_graph: DenominatorGraph, nnet: "Nnet", stats_nnet: "Nnet | None" = None,
                 backend: Any = "reference", compiler: Any = None, rand_int: Any = None) -> None:
        chain_config.check()
        super().__init__(config, nnet, stats_nnet=stats_nnet, backend=backend,
                         compiler=compiler)
        self.chain_config = chain_config
        self.den_graph = den_graph
        self.rand_int = rand_int
        self.chain_info: dict[str, ChainObjectiveInfo] = {}

    def reset(self) -> None:
        super().reset()
        self.chain_info.clear()

    def _computation_request(self, eg: Any) -> Any:
        return get_chain_computation_request(self.nnet, eg, self.config.compute_deriv,
                                             self.config.store_component_stats,
                                             self.chain_config.xent_regularize != 0.0, False)

    def _accept_inputs(self, computer: "NnetComputer", eg: Any) -> None:
        computer.accept_inputs(self.nnet, eg.inputs)

    def _info(self, name: str) -> ChainObjectiveInfo:
        info = self.chain_info.get(name)
        if info is None:
            info = self.chain_info[name] = ChainObjectiveInfo()
        return info

    def _process_outputs(self, eg: Any, computer: "NnetComputer") -> None:
        use_xent = self.chain_config.xent_regularize != 0.0
        for sup in eg.outputs:
            node = self.nnet.get_node_index(sup.name)
            if node < 0 or not self.nnet.is_output_node(node):
                raise PynnetError(f"Network has no output named {sup.name}")
            nnet_output = computer.get_output(sup.name)
            res = compute_chain_objf_and_deriv(self.chain_config, self.den_graph,
                                               sup.supervision, nnet_output,
                                               self.config.compute_deriv, use_xent,
                                               self.rand_int)
            totals = self._info(sup.name)
            totals.tot_weight += res.weight
            totals.tot_like += res.objf
            totals.tot_l2_term += res.l2_term
            if self.config.compute_deriv:
                computer.accept_input(sup.name, res.deriv)
            if use_xent:
                xent_output = computer.get_output(sup.name + "-xent")
                xent_objf = F32(sum_of_products(xent_output, res.xent_deriv))
                xent = self._info(sup.name + "-xent")
                xent.tot_weight += res.weight
                xent.tot_like += float(xent_objf)
            self.num_minibatches_processed += 1

    def print_total_stats(self) -> bool:
        """Kaldi's LOG lines.  Kaldi walks an unordered_map; with two entries
        libstdc++ lists the one added last first, which is the order used
        here (newest first)."""
        ans = False
        for name in reversed(list(self.chain_info)):
            info = self.chain_info[name]
            like = F32(_div(info.tot_like, info.tot_weight))
            l2 = F32(_div(info.tot_l2_term, info.tot_weight))
            if info.tot_l2_term == 0.0:
                log.log(f"Overall log-probability for '{name}' is {fmt_g(like)} per frame, "
                        f"over {fmt_g(info.tot_weight)} frames.")
            else:
                log.log(f"Overall log-probability for '{name}' is {fmt_g(like)} + "
                        f"{fmt_g(l2)} = {fmt_g(F32(like + l2))} per frame, over "
                        f"{fmt_g(info.tot_weight)} frames.")
            if info.tot_weight > 0:
                ans = True
        return ans

    def get_chain_objective(self, output_name: str) -> ChainObjectiveInfo | None:
        return self.chain_info.get(output_name)

    def get_total_objective(self) -> tuple[float, float]:
        """(total objective with l2 terms, total weight) over all outputs."""
        return (sum(i.tot_like + i.tot_l2_term for i in self.chain_info.values()),
                sum(i.tot_weight for i in self.chain_info.values()))


def _div(a: float, b: float) -> float:
    if b == 0.0:
        return float("nan") if a == 0.0 else (float("inf") if a > 0 else float("-inf"))
    return a / b


def _has_xent_outputs(nnet: "Nnet") -> bool:
    return any(nnet.is_output_node(i) and "-xent" in name
               for i, name in enumerate(nnet.node_names))


def recompute_chain_stats(egs: Sequence["NnetChainExample"], chain_config: ChainTrainingOptions,
                          den_graph: DenominatorGraph, nnet: "Nnet",
                          backend: Any = "reference") -> None:
    """Kaldi's RecomputeStats (nnet-chain-diagnostics.cc)."""
    log.log("Recomputing stats on nnet (affects batch-norm)")
    chain_config = copy.copy(chain_config)
    if _has_xent_outputs(nnet) and chain_config.xent_regularize == 0:
        chain_config.xent_regularize = 0.1
    zero_component_stats(nnet)
    opts = NnetComputeProbOptions(store_component_stats=True)
    prob = NnetChainComputeProb(opts, chain_config, den_graph, nnet, stats_nnet=nnet,
                                backend=backend)
    for eg in egs:
        prob.compute(eg)
    prob.print_total_stats()
    log.log("Done recomputing stats.")


def compute_chain_derivs(nnet: "Nnet", den_graph: DenominatorGraph, eg: "NnetChainExample",
                         chain_config: ChainTrainingOptions, rand_int: Any = None,
                         backend: Any = "reference", compiler: Any = None
                         ) -> dict[str, np.ndarray]:
    """The forward pass of ``eg`` and ComputeChainObjfAndDeriv on its first
    output (for nnet3-chain-compute-deriv): ``output`` (network output, rows
    t-major), ``deriv`` (d objf / d output, l2 and out-of-range terms
    included, not scaled by deriv weights), ``xent_deriv`` (numerator
    posteriors), ``output_xent`` (when the network has ``<name>-xent``) and
    ``objf_l2_weight`` (1 x 3: objf, l2 term, weight)."""
    from ...cache import CachingCompiler, default_optimize_options
    from ...compute.computer import NnetComputeOptions, NnetComputer

    if not eg.outputs:
        raise PynnetError("the chain example has no outputs")
    sup = eg.outputs[0]
    xent_name = sup.name + "-xent"
    has_xent = nnet.get_node_index(xent_name) >= 0 and nnet.is_output_node(
        nnet.get_node_index(xent_name))
    request = get_chain_computation_request(nnet, eg, False, False, has_xent, False)
    request.outputs = [o for o in request.outputs
                       if o.name in (sup.name, xent_name)]
    if compiler is None:
        compiler = CachingCompiler(nnet, None, default_optimize_options(), use_disk=False)
    computer = NnetComputer(NnetComputeOptions(compress_matrices=False),
                            compiler.compile(request), nnet, backend=backend)
    computer.accept_inputs(nnet, eg.inputs)
    computer.run()
    output = np.array(computer.get_output(sup.name), dtype=F32)
    res = compute_chain_objf_and_deriv(chain_config, den_graph, sup.supervision, output,
                                       True, True, rand_int)
    out = {"output": output, "deriv": res.deriv, "xent_deriv": res.xent_deriv}
    if has_xent:
        out["output_xent"] = np.array(computer.get_output(xent_name), dtype=F32)
    out["objf_l2_weight"] = np.array([[res.objf, res.l2_term, res.weight]], dtype=F32)
    return out
