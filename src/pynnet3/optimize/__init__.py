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

from typing import Any

from .options import OptimizeOptions

# The pipeline (and through it every pass and the Numba analysis loops) is
# imported on first use: a binary whose computations all come from the disk
# cache needs only the options, and importing the optimizer costs about a
# tenth of a second of its start-up.
_PIPELINE_NAMES = ("PASSES", "OptimizationPass", "OptimizationPassError", "PassHook",
                   "checking_hook", "copy_computation", "enabled_passes",
                   "max_output_time_in_request", "optimize")

__all__ = ["OptimizeOptions", *_PIPELINE_NAMES]


def __getattr__(name: str) -> Any:
    if name in _PIPELINE_NAMES:
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
