"""Analysis, checking and optimization of compiled NnetComputations
(Kaldi's nnet-analyze, nnet-optimize and nnet-optimize-utils).

The analysis: :mod:`.variables` (ComputationVariables), :mod:`.accesses`
(CommandAttributes, variable and matrix accesses), :mod:`.analysis`
(Analyzer, ComputationAnalysis); the checker: :mod:`.check` (ComputationChecker)
with :mod:`.check_indexes` (its CheckComputationIndexes).  The passes live
in one module per family: ``misc`` (addition->assignment, zeroing, sizing
commands, allocation, I/O order), ``variable_merging``, ``renumber`` (the
renumbering utilities), ``deriv_times``, ``model_update``, ``row_ops``,
``extend``, ``compression``, ``looped``; :mod:`.pipeline` runs them in
Kaldi's order (:func:`optimize`), and :mod:`.compile_looped` is Kaldi's
CompileLooped on top of it.
"""
from __future__ import annotations

from .options import OptimizeOptions
from .pipeline import (PASSES, OptimizationPass, OptimizationPassError, PassHook,
                       checking_hook, copy_computation, enabled_passes,
                       max_output_time_in_request, optimize)

__all__ = ["OptimizeOptions", "optimize", "max_output_time_in_request", "OptimizationPass",
           "PASSES", "enabled_passes", "copy_computation", "checking_hook",
           "OptimizationPassError", "PassHook"]
