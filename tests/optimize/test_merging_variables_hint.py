"""The first round of variable merging reuses the ComputationVariables that
the analysis before the passes made (optimize.arrays.ComputationArrays.
variables_hint) only while they are of the same tables, and merges the same."""
from __future__ import annotations

import numpy as np

from pynnet3.compile.compiler import Compiler
from pynnet3.compile.request_io import build_request
from pynnet3.optimize.analysis import analyzer_of
from pynnet3.optimize.arrays import ComputationArrays
from pynnet3.optimize.options import OptimizeOptions
from pynnet3.optimize.pipeline import copy_computation
from pynnet3.optimize.variable_merging import _RoundAnalysis, variable_merging_optimization
from pynnet3.optimize.variables import variables_of
from tests.helpers import nnet_from_config
from tests.helpers_graph import TDNN


def _computation():
    nnet = nnet_from_config(TDNN)
    request = build_request(nnet, 2, 5, need_model_derivative=True, need_input_derivative=True)
    computation = Compiler(request, nnet).create_computation()
    analyzer_of(nnet, computation)          # (as the check before the passes does)
    return nnet, computation


def test_hint_is_the_analysis_variables_and_gives_the_same_merges():
    nnet, computation = _computation()
    copy = copy_computation(computation)
    with_hint = ComputationArrays(copy)
    assert with_hint.variables_hint is not None
    assert with_hint.variables_hint[2] is variables_of(computation)
    assert _RoundAnalysis(nnet, with_hint, {}).variables is variables_of(computation)
    without = ComputationArrays(copy)
    without.variables_hint = None
    fresh = _RoundAnalysis(nnet, without, {}).variables
    assert fresh is not variables_of(computation)
    assert np.array_equal(fresh.variables_flat, variables_of(computation).variables_flat)
    options = OptimizeOptions()
    variable_merging_optimization(options, nnet, with_hint)
    variable_merging_optimization(options, nnet, without)
    assert np.array_equal(with_hint.table, without.table)
    assert np.array_equal(with_hint.sub, without.sub)


def test_hint_not_used_for_other_tables():
    nnet, computation = _computation()
    copy = copy_computation(computation)
    # A pass that adds a submatrix: the variables of the old tables no longer hold.
    copy.new_submatrix(1, 0, 1, 0, -1)
    assert ComputationArrays(copy).variables_hint is None
    # After a round that merged, the tables differ: the last round's
    # analysis has variables of its own.
    arrays = ComputationArrays(copy_computation(computation))
    hint = arrays.variables_hint
    variable_merging_optimization(OptimizeOptions(), nnet, arrays)
    assert not np.array_equal(arrays.sub, hint[0])        # (something merged)
    final_variables = arrays.final_analysis[1].variables
    assert final_variables is not hint[2]
    assert final_variables.num_variables != hint[2].num_variables
