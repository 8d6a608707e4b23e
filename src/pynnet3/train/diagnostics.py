"""Objective and accuracy of a network on held-out examples (Kaldi's
NnetComputeProb, nnet-diagnostics.{h,cc}), as nnet3-compute-prob prints them.

For each output node of each (merged) example the objective (see
:mod:`pynnet3.train.objective`) and the frame accuracy are added up; with
``compute_deriv`` the derivative of the objective is also backpropagated into
a gradient network (learning rate 1, plain gradients), which
nnet3-show-progress uses.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import log
from ..cache import CachingCompiler, CachingCompilerOptions, default_optimize_options
from ..compute.computer import NnetComputeOptions, NnetComputer
from ..errors import PynnetError
from ..nnet.components.base import fmt_g
from ..nnet.nnet import ObjectiveType
from .eg_request import accept_example_inputs, get_computation_request
from .nnet_update import scale_nnet, set_nnet_as_gradient
from .objective import compute_accuracy, compute_objective_function

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet
    from .egs import NnetExample

__all__ = ["NnetComputeProbOptions", "NnetComputeProb", "SimpleObjectiveInfo",
           "PerDimObjectiveInfo", "format_kaldi_vector"]


def _kaldi_compute_options() -> NnetComputeOptions:
    return NnetComputeOptions(compress_matrices=False)


@dataclass
class NnetComputeProbOptions:
    """Kaldi's NnetComputeProbOptions (same names and defaults)."""

    debug_computation: bool = field(default=False, metadata={
        "flag": "debug-computation", "help": "If true, turn on debug for the actual "
        "computation (very verbose!)"})
    compute_deriv: bool = False
    compute_accuracy: bool = field(default=True, metadata={
        "flag": "compute-accuracy", "help": "If true, compute accuracy values as well as "
        "objective functions"})
    store_component_stats: bool = False
    compute_per_dim_accuracy: bool = field(default=False, metadata={
        "flag": "compute-per-dim-accuracy", "help": "If true, compute accuracy values per-dim"})
    optimize_config: Any = None          # OptimizeOptions; None = defaults
    compute_config: NnetComputeOptions = field(default_factory=_kaldi_compute_options)
    compiler_config: CachingCompilerOptions = field(default_factory=CachingCompilerOptions)
    # pynnet3: the on-disk computation cache (the binaries' --cache-dir);
    # None = none.
    disk_cache_dir: str | None = None


@dataclass
class SimpleObjectiveInfo:
    tot_weight: float = 0.0
    tot_objective: float = 0.0


@dataclass
class PerDimObjectiveInfo(SimpleObjectiveInfo):
    tot_weight_vec: np.ndarray | None = None
    tot_objective_vec: np.ndarray | None = None


def format_kaldi_vector(vec: np.ndarray) -> str:
    """Kaldi's ``operator<<`` of a Vector in text mode: `` [ a b c ]`` and a newline."""
    return " [ " + "".join(fmt_g(v) + " " for v in np.asarray(vec, dtype=np.float32)) + "]\n"


class NnetComputeProb:
    """Kaldi's NnetComputeProb.

    With ``store_component_stats`` (and no ``compute_deriv``), the network
    itself receives the statistics (Kaldi's constructor taking ``Nnet*``);
    pass ``stats_nnet=nnet`` for that.

    ``compiler``: a CachingCompiler made for a network of the same structure
    (and the same options), to reuse its computations; by default a new one.
    """

    def __init__(self, config: NnetComputeProbOptions, nnet: "Nnet",
                 stats_nnet: "Nnet | None" = None, backend: Any = "reference",
                 compiler: CachingCompiler | None = None) -> None:
        self.config = config
        self.nnet = nnet
        self.backend = backend
        self.deriv_nnet: "Nnet | None" = None
        if stats_nnet is not None:
            if stats_nnet is not nnet or not config.store_component_stats \
                    or config.compute_deriv:
                raise PynnetError("stats_nnet must be the network itself, with "
                                  "store_component_stats and without compute_deriv")
            self.deriv_nnet = nnet
        elif config.compute_deriv:
            self.deriv_nnet = copy.deepcopy(nnet)
            scale_nnet(0.0, self.deriv_nnet)
            set_nnet_as_gradient(self.deriv_nnet)
        elif config.store_component_stats:
            raise PynnetError("If you set store_component_stats == true and compute_deriv == "
                              "false, pass stats_nnet=nnet.")
        if compiler is None:
            optimize_config = (config.optimize_config if config.optimize_config is not None
                               else default_optimize_options())
            compiler = CachingCompiler(nnet, config.compiler_config, optimize_config,
                                       cache_dir=config.disk_cache_dir,
                                       use_disk=config.disk_cache_dir is not None)
        self.compiler = compiler
        self.num_minibatches_processed = 0
        self.objf_info: dict[str, SimpleObjectiveInfo] = {}
        self.accuracy_info: dict[str, PerDimObjectiveInfo] = {}

    def reset(self) -> None:
        self.num_minibatches_processed = 0
        self.objf_info.clear()
        self.accuracy_info.clear()
        if self.deriv_nnet is not None and self.deriv_nnet is not self.nnet:
            scale_nnet(0.0, self.deriv_nnet)
            set_nnet_as_gradient(self.deriv_nnet)

    def compute(self, eg: "NnetExample") -> None:
        computation = self.compiler.compile(self._computation_request(eg))
        computer = NnetComputer(self.config.compute_config, computation, self.nnet,
                                nnet_to_update=self.deriv_nnet, backend=self.backend)
        self._accept_inputs(computer, eg)
        computer.run()
        self._process_outputs(eg, computer)
        if self.config.compute_deriv:
            computer.run()

    # -- the example hooks (train/chain/diagnostics.py overrides them for chain egs)
    def _computation_request(self, eg: Any) -> Any:
        return get_computation_request(self.nnet, eg, self.config.compute_deriv,
                                       self.config.store_component_stats)

    def _accept_inputs(self, computer: NnetComputer, eg: Any) -> None:
        accept_example_inputs(computer, self.nnet, eg)

    def _process_outputs(self, eg: "NnetExample", computer: NnetComputer) -> None:
        for io in eg.io:
            node = self.nnet.get_node_index(io.name)
            if node < 0:
                raise PynnetError(f"Network has no output named {io.name}")
            if not self.nnet.is_output_node(node):
                continue
            obj_type = self.nnet.nodes[node].objective_type
            output = computer.get_output(io.name)
            if output.shape[1] != io.features.num_cols:
                raise PynnetError(f"Nnet versus example output dimension (num-classes) "
                                  f"mismatch for '{io.name}': {output.shape[1]} (nnet) vs. "
                                  f"{io.features.num_cols} (egs)")
            if self.config.compute_deriv:
                # The accuracy reads the output after the derivative went in.
                output = np.array(output, copy=True)
            tot_weight, tot_objf = compute_objective_function(
                io.features, obj_type, io.name, self.config.compute_deriv, computer)
            totals = self.objf_info.setdefault(io.name, SimpleObjectiveInfo())
            totals.tot_weight += tot_weight
            totals.tot_objective += tot_objf
            if self.config.compute_accuracy:
                acc = self.accuracy_info.setdefault(io.name, PerDimObjectiveInfo())
                per_dim = self.config.compute_per_dim_accuracy
                w, a, wv, av = compute_accuracy(io.features, output, per_dim)
                if per_dim:
                    # Kaldi's ComputeAccuracy zeroes the per-dim vectors it is
                    # given before filling them, so the per-dim accuracy it
                    # prints is that of the LAST minibatch only (while the
                    # frame count printed with it is the total).  Kept as is
                    # so that the printed vectors agree with Kaldi's.
                    acc.tot_weight_vec = wv
                    acc.tot_objective_vec = av
                acc.tot_weight += w
                acc.tot_objective += a
        self.num_minibatches_processed += 1

    def print_total_stats(self) -> bool:
        """Kaldi's LOG lines (log-likelihood / objective, then accuracies);
        True if some output had data."""
        ans = False
        for name, info in self.objf_info.items():
            node = self.nnet.get_node_index(name)
            obj_type = self.nnet.nodes[node].objective_type
            what = "log-likelihood" if obj_type is ObjectiveType.LINEAR else "objective"
            log.log(f"Overall {what} for '{name}' is "
                    f"{fmt_g(_div(info.tot_objective, info.tot_weight))} per frame, over "
                    f"{fmt_g(info.tot_weight)} frames.")
            if info.tot_weight > 0:
                ans = True
        for name, acc in self.accuracy_info.items():
            log.log(f"Overall accuracy for '{name}' is "
                    f"{fmt_g(_div(acc.tot_objective, acc.tot_weight))} per frame, over "
                    f"{fmt_g(acc.tot_weight)} frames.")
            if acc.tot_weight_vec is not None:
                assert acc.tot_objective_vec is not None
                vec = np.full(acc.tot_weight_vec.shape, -1.0, dtype=np.float32)
                nz = acc.tot_weight_vec != 0
                vec[nz] = acc.tot_objective_vec[nz] / acc.tot_weight_vec[nz]
                log.log(f"Overall per-dim accuracy vector for '{name}' is "
                        f"{format_kaldi_vector(vec)} per frame, over "
                        f"{fmt_g(acc.tot_weight)} frames.")
        return ans

    def get_objective(self, output_name: str) -> SimpleObjectiveInfo | None:
        return self.objf_info.get(output_name)

    def get_total_objective(self) -> tuple[float, float]:
        """(total objective, total weight) over all outputs."""
        return (sum(i.tot_objective for i in self.objf_info.values()),
                sum(i.tot_weight for i in self.objf_info.values()))

    def get_deriv(self) -> "Nnet":
        if not self.config.compute_deriv or self.deriv_nnet is None:
            raise PynnetError("get_deriv() called when no derivatives were requested.")
        return self.deriv_nnet


def _div(a: float, b: float) -> float:
    if b == 0.0:
        return float("nan") if a == 0.0 else (float("inf") if a > 0 else float("-inf"))
    return a / b
