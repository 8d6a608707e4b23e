"""The optimization pipeline (Kaldi's Optimize()): the passes' order and
switches, the after-each-pass hook, failures naming their pass."""
from __future__ import annotations

import pytest

from pynnet3.compile.computation import CommandType, NnetComputation
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import ComputationCheckError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import (OptimizationPassError, PASSES, checking_hook, enabled_passes,
                              max_output_time_in_request, optimize)
from pynnet3.optimize.options import INT32_MAX, INT32_MIN, OptimizeOptions
from tests.optimize.helpers import _copy_then_relu, _types, replace_pass

T = CommandType


def test_pipeline_order_is_kaldis() -> None:
    assert [p.name for p in PASSES] == [
        "limit_derivative_times", "consolidate_model_update", "convert_addition_to_assignment",
        "snip_row_ops", "split_row_ops", "replace_row_with_matrix_ops", "extend_matrices",
        "variable_merging_optimization", "remove_unnecessary_zeroing", "move_sizing_commands",
        "optimize_looped_computation", "remove_unnecessary_allocation",
        "consolidate_io_operations", "fix_goto_label", "optimize_memory_compression"]
    assert enabled_passes(OptimizeOptions(optimize=False)) == [
        "consolidate_io_operations", "optimize_memory_compression"]
    assert enabled_passes(OptimizeOptions(min_deriv_time=0, optimize_looped_computation=True,
                                          memory_compression_level=0))[:2] == \
        ["limit_derivative_times", "consolidate_model_update"]
    looped = enabled_passes(OptimizeOptions(optimize_looped_computation=True))
    assert "extend_matrices" not in looped and "remove_unnecessary_allocation" not in looped
    assert "fix_goto_label" in looped


def test_pipeline_runs_hook_and_keeps_input(nnet: Nnet) -> None:
    comp = _copy_then_relu(nnet)
    before = comp.print(nnet.component_names, nnet.node_names)
    seen = []
    out = optimize(None, nnet, 0, comp, lambda name, c: seen.append(name))
    assert comp.print(nnet.component_names, nnet.node_names) == before
    assert seen[0] == "consolidate_model_update" and seen[-1] == "optimize_memory_compression"
    assert "variable_merging_optimization" in seen
    assert _types(out) == [T.ACCEPT_INPUT, T.PROPAGATE, T.PROVIDE_OUTPUT]
    # The checker between passes, and optimize=False keeps the commands.
    out2 = optimize(OptimizeOptions(optimize=False), nnet, 0, comp, checking_hook(nnet))
    assert out2.commands == comp.commands


def test_pipeline_failure_names_the_pass(nnet: Nnet, monkeypatch: pytest.MonkeyPatch) -> None:
    comp = _copy_then_relu(nnet)

    def hook(name: str, c: NnetComputation) -> None:
        if name == "remove_unnecessary_zeroing":
            raise ComputationCheckError("broken")

    with pytest.raises(OptimizationPassError) as e:
        optimize(None, nnet, 0, comp, hook)
    assert e.value.pass_name == "remove_unnecessary_zeroing"
    assert e.value.passes_before[-1] == "variable_merging_optimization"
    assert "convert_addition_to_assignment" in e.value.passes_before
    assert "passes before it: consolidate_model_update" in str(e.value)

    # A pass that breaks the computation is caught by the checker hook.
    def reverse_commands(nnet_: Nnet, c: NnetComputation) -> None:
        c.commands = c.commands[::-1]

    replace_pass(monkeypatch, "move_sizing_commands", reverse_commands)
    with pytest.raises(OptimizationPassError) as e:
        optimize(None, nnet, 0, _copy_then_relu(nnet), checking_hook(nnet))
    assert e.value.pass_name == "move_sizing_commands"


def test_passes_are_the_functions_they_name() -> None:
    """PASSES holds the pass functions themselves (a missing one is an
    ImportError when pynnet3.optimize is imported, never a skipped pass)."""
    for p in PASSES:
        assert callable(p.function) and p.function.__name__ == p.name


def test_max_output_time_in_request() -> None:
    req = ComputationRequest([IoSpecification("input", [Index(0, 9, 0)])],
                             [IoSpecification("output", [Index(0, 3, 0), Index(1, 5, 0)]),
                              IoSpecification("xent", [Index(0, 4, 0)])])
    assert max_output_time_in_request(req) == 5
    with pytest.raises(Exception, match="Failed to find any output"):
        max_output_time_in_request(ComputationRequest([], []))
    assert OptimizeOptions().max_deriv_time == INT32_MAX
    assert OptimizeOptions().min_deriv_time == INT32_MIN
