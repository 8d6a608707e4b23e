"""Model combination (the body of Kaldi's nnet3-combine).

Kaldi's current nnet3-combine no longer optimises per-component weights (the
old NnetCombiner with ``--sum-to-one-penalty`` is gone).  It takes the models
in the order given (the scripts pass the newest first), and grows a running
average over the first 1, 2, ..., N of them:

* the objective of the first model alone on the egs is the starting point;
* after adding model ``n + 1`` (1-based count ``k = n + 1``) the average is
  updated as ``avg = avg * (k - 1) / k + model * 1 / k`` (ScaleNnet then
  AddNnet, float32 arithmetic), and the objective is evaluated after every
  ``ceil(N / max_objective_evaluations)`` models and after the last one;
* the average with the best objective (strictly better than the best so far)
  is kept, and if the network has BatchNorm its statistics are recomputed on
  the same egs (Kaldi's RecomputeStats) before it is written.

The objective is NnetComputeProb's total objective over all outputs divided by
the total weight, on the egs held in memory; inf or NaN counts as ``-inf``.
With ``batchnorm_test_mode`` or ``dropout_test_mode`` (the latter is true by
default) the evaluation runs on a copy of the average with those test modes
set, as Kaldi does; the averages themselves are never put in test mode.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .. import log
from ..compile.model_io import read_nnet
from ..errors import PynnetError
from ..nnet.components.base import fmt_g
from ..nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode
from .diagnostics import NnetComputeProb, NnetComputeProbOptions
from .egs import iter_examples
from .nnet_update import add_nnet, scale_nnet, zero_component_stats

if TYPE_CHECKING:
    from ..cache import CachingCompiler
    from ..nnet.nnet import Nnet
    from .egs import NnetExample

__all__ = ["NnetCombineOptions", "combine_nnets", "read_examples", "compute_objf",
           "update_nnet_moving_average", "has_batchnorm", "recompute_stats",
           "num_models_per_evaluation", "evaluation_counts"]


@dataclass
class NnetCombineOptions:
    """nnet3-combine's options (same names and defaults as Kaldi's)."""

    max_objective_evaluations: int = field(default=30, metadata={
        "flag": "max-objective-evaluations", "help": "The maximum number of objective "
        "evaluations in order to figure out the best number of models to combine. It helps "
        "to speedup if the number of models provided to this binary is quite large (e.g. "
        "several hundred)."})
    batchnorm_test_mode: bool = field(default=False, metadata={
        "flag": "batchnorm-test-mode", "help": "If true, set test-mode to true on any "
        "BatchNormComponents while evaluating objectives."})
    dropout_test_mode: bool = field(default=True, metadata={
        "flag": "dropout-test-mode", "help": "If true, set test-mode to true on any "
        "DropoutComponents and DropoutMaskComponents while evaluating objectives."})


def read_examples(rspecifier: str) -> list["NnetExample"]:
    """All the examples of ``rspecifier``, in order (Kaldi keeps them in
    memory: every evaluation goes over the same ones)."""
    egs = [eg for _, eg in iter_examples(rspecifier)]
    log.log(f"Read {len(egs)} examples.")
    if not egs:
        raise PynnetError(f"no examples were read from {rspecifier} (nnet3-combine needs "
                          "at least one)")
    return egs


def num_models_per_evaluation(num_nnets: int, max_objective_evaluations: int) -> int:
    """How many models are added to the average between two evaluations."""
    if max_objective_evaluations < 1:
        raise PynnetError(f"--max-objective-evaluations must be at least 1, got "
                          f"{max_objective_evaluations}")
    return (num_nnets + max_objective_evaluations - 1) // max_objective_evaluations


def evaluation_counts(num_nnets: int, max_objective_evaluations: int) -> list[int]:
    """The numbers of models averaged at each evaluation after the first
    (which is of the first model alone): every ``num_models_per_evaluation``
    models, and all of them at the end."""
    num_to_add = num_models_per_evaluation(num_nnets, max_objective_evaluations)
    return [n + 1 for n in range(1, num_nnets)
            if (n - 1) % num_to_add == num_to_add - 1 or n == num_nnets - 1]


class _ObjectiveEvaluator:
    """Kaldi's ComputeObjf, with one compiler kept for all the evaluations.

    Kaldi builds a new NnetComputeProb (and compiler) for each test-mode copy;
    the copies all have the same structure, so their computations are the
    same and are compiled once here.
    """

    def __init__(self, config: NnetCombineOptions, prob_options: NnetComputeProbOptions,
                 backend: Any, make_prob: Callable[..., NnetComputeProb] | None = None) -> None:
        self.config = config
        self.prob_options = prob_options
        self.backend = backend
        # (options, nnet, backend=, compiler=) -> an NnetComputeProb; the
        # chain combiner passes NnetChainComputeProb's
        self.make_prob = make_prob or NnetComputeProb
        self._compiler: "CachingCompiler | None" = None
        self._direct: NnetComputeProb | None = None

    def objective(self, egs: Sequence["NnetExample"], nnet: "Nnet") -> float:
        if self.config.batchnorm_test_mode or self.config.dropout_test_mode:
            nnet = copy.deepcopy(nnet)
            if self.config.batchnorm_test_mode:
                set_batchnorm_test_mode(True, nnet)
            if self.config.dropout_test_mode:
                set_dropout_test_mode(True, nnet)
            prob = self.make_prob(self.prob_options, nnet, backend=self.backend,
                                  compiler=self._compiler)
            self._compiler = prob.compiler
        else:
            # No copy: the computer evaluates the running average itself (its
            # parameters change between evaluations, its structure does not).
            if self._direct is None or self._direct.nnet is not nnet:
                self._direct = self.make_prob(self.prob_options, nnet, backend=self.backend,
                                              compiler=self._compiler)
                self._compiler = self._direct.compiler
            prob = self._direct
            prob.reset()
        return compute_objf(egs, prob)


def compute_objf(egs: Sequence["NnetExample"], prob: NnetComputeProb) -> float:
    """The total objective per unit weight of ``prob``'s network on ``egs``
    (``-inf`` if it is inf or NaN)."""
    for eg in egs:
        prob.compute(eg)
    tot_objf, tot_weight = prob.get_total_objective()
    if not tot_weight > 0.0:
        raise PynnetError(f"the examples have a total weight of {fmt_g(tot_weight)} on the "
                          "network's outputs; the objective needs a positive weight")
    if not math.isfinite(tot_objf):
        return -math.inf
    return tot_objf / tot_weight


def update_nnet_moving_average(num_models: int, nnet: "Nnet",
                               moving_average: "Nnet") -> None:
    """Kaldi's UpdateNnetMovingAverage: ``moving_average`` (the average of the
    previous ``num_models - 1`` networks) becomes the average including ``nnet``."""
    if nnet.num_parameters() != moving_average.num_parameters():
        raise PynnetError(f"cannot average networks with {nnet.num_parameters()} and "
                          f"{moving_average.num_parameters()} parameters")
    # Kaldi computes both factors in double and passes them as BaseFloat;
    # the components round them to float32 the same way.
    scale_nnet((num_models - 1.0) / num_models, moving_average)
    add_nnet(nnet, 1.0 / num_models, moving_average)


def has_batchnorm(nnet: "Nnet") -> bool:
    """Kaldi's HasBatchnorm."""
    return any(comp.type_name == "BatchNormComponent" for comp in nnet.components)


def recompute_stats(egs: Sequence["NnetExample"], nnet: "Nnet", backend: Any = "reference",
                    prob_options: NnetComputeProbOptions | None = None) -> None:
    """Kaldi's RecomputeStats: forget the stored statistics of every component
    and accumulate them again by a forward pass over ``egs`` (this is what sets
    BatchNorm's test-mode statistics), printing the objective as
    nnet3-compute-prob does."""
    log.log("Recomputing stats on nnet (affects batch-norm)")
    zero_component_stats(nnet)
    opts = copy.copy(prob_options) if prob_options is not None else NnetComputeProbOptions()
    opts.store_component_stats = True
    opts.compute_deriv = False
    prob = NnetComputeProb(opts, nnet, stats_nnet=nnet, backend=backend)
    for eg in egs:
        prob.compute(eg)
    prob.print_total_stats()
    log.log("Done recomputing stats.")


def combine_nnets(models: Sequence[str], egs_rspecifier: str,
                  config: NnetCombineOptions | None = None, backend: Any = "reference",
                  prob_options: NnetComputeProbOptions | None = None, *,
                  read_egs: Callable[[str], list] | None = None,
                  make_prob: Callable[..., NnetComputeProb] | None = None,
                  recompute: Callable[[Sequence[Any], "Nnet"], None] | None = None) -> "Nnet":
    """nnet3-combine: the running average of the first n of ``models``
    (rxfilenames, newest first) with the best objective on the egs of
    ``egs_rspecifier``, its statistics recomputed if it has BatchNorm.

    The models are read one at a time, as they are added; the egs are read
    (all of them, into memory) after the first model.

    The chain combiner (nnet3-chain-combine) passes its own example reader
    (``read_egs``), objective (``make_prob``, called as NnetComputeProb's
    constructor) and statistics recomputation (``recompute(egs, nnet)``).
    """
    config = config or NnetCombineOptions()
    prob_options = prob_options or NnetComputeProbOptions()
    if not models:
        raise PynnetError("nnet3-combine needs at least one model")
    evaluate_at = set(evaluation_counts(len(models), config.max_objective_evaluations))
    nnet = read_nnet(models[0])
    moving_average = copy.deepcopy(nnet)
    best_nnet = copy.deepcopy(nnet)
    egs = (read_egs or read_examples)(egs_rspecifier)

    evaluator = _ObjectiveEvaluator(config, prob_options, backend, make_prob)
    init_objf = evaluator.objective(egs, moving_average)
    best_objf = init_objf
    best_num_to_combine = 1
    log.log(f"objective function using the last model is {fmt_g(init_objf)}")

    for n in range(1, len(models)):
        nnet = read_nnet(models[n])
        update_nnet_moving_average(n + 1, nnet, moving_average)
        if n + 1 in evaluate_at:
            objf = evaluator.objective(egs, moving_average)
            log.log(f"Combining last {n + 1} models, objective function is {fmt_g(objf)}")
            if objf > best_objf:
                best_objf = objf
                best_nnet = copy.deepcopy(moving_average)
                best_num_to_combine = n + 1
    log.log(f"Combining {best_num_to_combine} nnets, objective function changed from "
            f"{fmt_g(init_objf)} to {fmt_g(best_objf)}")
    if has_batchnorm(nnet):
        if recompute is not None:
            recompute(egs, best_nnet)
        else:
            recompute_stats(egs, best_nnet, backend, prob_options)
    return best_nnet
