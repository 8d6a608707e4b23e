"""The optimization pipeline (Kaldi's Optimize) and its part-1 passes:
renumbering, variable merging, addition->assignment, zeroing, sizing
commands, allocation from other matrices, I/O order; the options; and
Kaldi's nnet-optimize-test (optimized and unoptimized computations give the
same outputs, input derivatives and gradients) on Kaldi's random networks.

Expected rewrites on hand-built computations are worked out by hand from
Kaldi's code (nnet-optimize.cc, nnet-optimize-utils.cc); on real
compilations the reference is Kaldi's own printed optimized computation
(reference/random/NNN/computation.txt) and stats.txt.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.computation import Command, CommandType, NnetComputation, StrideType
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import ComputationCheckError, ConfigError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import (PASSES, OptimizationPass, OptimizationPassError, OptimizeOptions,
                              checking_hook, enabled_passes,
                              max_output_time_in_request, optimize)
from pynnet3.optimize.analyze import Analyzer
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.diagnose import compare_optimized, find_breaking_optimization
from pynnet3.optimize.misc import (compute_command_pairs, consolidate_io_operations,
                                   convert_addition_to_assignment, move_sizing_commands,
                                   remove_unnecessary_allocation, remove_unnecessary_zeroing)
from pynnet3.optimize.options import (INT32_MAX, INT32_MIN, field_for_flag, flag_name,
                                      options_from_click_kwargs, register_click_options)
from pynnet3.optimize.renumber import (insert_commands, matrix_is_unused,
                                       remove_commands_for_unused_matrix, remove_no_ops,
                                       renumber_computation)
from pynnet3.optimize.variable_merging import (VariableMergingOptimizer,
                                               variable_merging_optimization)
from tests.conftest import reference_dir

T = CommandType
C = Command

# Components: 0 relu (propagates in place), 1 aff (updatable), 2 noop (in
# place both ways).  Nodes: 0 input, 2 relu, 4 aff, 6 noop, 7 output.
_CONFIG = """input-node name=input dim=4
component name=relu type=RectifiedLinearComponent dim=4
component-node name=relu component=relu input=input
component name=aff type=AffineComponent input-dim=4 output-dim=4
component-node name=aff component=aff input=relu
component name=noop type=NoOpComponent dim=4
component-node name=noop component=noop input=aff
output-node name=output input=noop
"""
IN, OUT = 0, 7
RELU, AFF, NOOP = 0, 1, 2


@pytest.fixture(scope="module")
def nnet() -> Nnet:
    n = Nnet()
    n.read_config(_CONFIG, "<test>")
    return n


def _new(shapes: list[tuple[int, int]]) -> tuple[NnetComputation, list[int]]:
    comp = NnetComputation()
    return comp, [0] + [comp.new_matrix(r, c) for r, c in shapes]


def _types(comp: NnetComputation) -> list[CommandType]:
    return [c.command_type for c in comp.commands]


def _alloc(s: int) -> list[Command]:
    return [C(T.ALLOC_MATRIX, arg1=s), C(T.SET_CONST, 0.0, arg1=s)]


def _prop(component: int, s_in: int, s_out: int) -> Command:
    return C(T.PROPAGATE, arg1=component, arg2=0, arg3=s_in, arg4=s_out, arg5=0, arg6=0)


# ---------------------------------------------------------------------------
# options


def test_options_defaults_and_flags_are_kaldis() -> None:
    o = OptimizeOptions()
    kaldi_defaults = dict(optimize=True, consolidate_model_update=True, propagate_in_place=True,
                          backprop_in_place=True, optimize_row_ops=True, split_row_ops=True,
                          extend_matrices=True, convert_addition=True, remove_assignments=True,
                          allow_left_merge=True, allow_right_merge=True,
                          initialize_undefined=True, move_sizing_commands=True,
                          allocate_from_other=True, min_deriv_time=-2147483648,
                          max_deriv_time=2147483647, max_deriv_time_relative=2147483647,
                          snip_row_ops=True, memory_compression_level=1,
                          optimize_looped_computation=False)
    assert dataclasses.asdict(o) == kaldi_defaults
    assert list(dataclasses.asdict(o)) == list(kaldi_defaults)   # Kaldi's member order
    assert flag_name("max_deriv_time_relative") == "max-deriv-time-relative"
    assert flag_name("optimize_looped_computation") is None        # hidden in Kaldi
    assert field_for_flag("--optimization.allow-left-merge") == "allow_left_merge"
    with pytest.raises(KeyError):
        flag_name("nonsense")
    with pytest.raises(ConfigError):
        field_for_flag("--optimization.nonsense")
    with pytest.raises(ConfigError):
        OptimizeOptions(memory_compression_level=-1)
    with pytest.raises(ConfigError):
        OptimizeOptions(optimize="yes")  # type: ignore[arg-type]


def test_options_cache_key_and_relative_deriv_time() -> None:
    a, b = OptimizeOptions(), OptimizeOptions(allow_right_merge=False)
    assert a.cache_key() == OptimizeOptions().cache_key()
    assert a.cache_key() != b.cache_key()
    assert "allow_right_merge=false" in b.cache_key()
    assert OptimizeOptions(max_deriv_time=7).effective_max_deriv_time(None) == 7
    assert OptimizeOptions(max_deriv_time_relative=3).effective_max_deriv_time(10) == 13
    with pytest.raises(ConfigError):
        OptimizeOptions(max_deriv_time_relative=3).effective_max_deriv_time(None)


def test_click_options_round_trip() -> None:
    import click
    from click.testing import CliRunner

    seen = {}

    @click.command()
    @register_click_options
    def cmd(**kwargs: object) -> None:
        seen["options"] = options_from_click_kwargs(kwargs)
        seen["rest"] = dict(kwargs)

    result = CliRunner().invoke(cmd, ["--optimization.min-deriv-time=-5",
                                      "--optimization.allow-left-merge=false",
                                      "--optimization.memory-compression-level", "2"])
    assert result.exit_code == 0, result.output
    assert seen["options"] == OptimizeOptions(min_deriv_time=-5, allow_left_merge=False,
                                              memory_compression_level=2)
    assert seen["rest"] == {}
    help_text = CliRunner().invoke(cmd, ["--help"]).output
    assert "--optimization.max-deriv-time-relative" in help_text
    assert "optimize-looped-computation" not in help_text


# ---------------------------------------------------------------------------
# renumbering and editing utilities


def test_renumber_computation_removes_unused_and_duplicates() -> None:
    comp, s = _new([(3, 4), (3, 4), (2, 2), (3, 4)])      # m4 is never referenced
    dup = comp.new_submatrix(s[1], 0, 3, 0, 4)            # duplicate of s[1]
    part = comp.new_submatrix(s[2], 1, 2, 0, 4)           # used via indexes_multi
    comp.new_submatrix(s[3], 0, 1, 0, 2)                  # unused
    i0 = comp.add_indexes([0, 1, 2])                      # unused
    i1 = comp.add_indexes([2, 1, 0])
    i2 = comp.add_indexes([2, 1, 0])                      # duplicate of i1
    comp.add_indexes_multi([(1, 0)])                      # unused
    m1 = comp.add_indexes_multi([(part, 0), (-1, -1), (part, 1)])
    m2 = comp.add_indexes_multi([(part, 0), (-1, -1), (part, 1)])   # duplicate
    r0 = comp.add_indexes_ranges([(0, 1), (1, 3), (0, 0)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]),
                     C(T.COPY_ROWS, arg1=s[2], arg2=dup, arg3=i1),
                     C(T.ADD_ROWS, arg1=s[2], arg2=s[1], arg3=i2),
                     C(T.ADD_ROWS_MULTI, arg1=s[1], arg2=m1),
                     C(T.COPY_TO_ROWS_MULTI, arg1=s[1], arg2=m2),
                     C(T.ADD_ROW_RANGES, arg1=s[1], arg2=s[2], arg3=r0),
                     C(T.PROPAGATE, arg1=0, arg3=s[1], arg4=s[2], arg5=7, arg6=0),
                     C(T.BACKPROP, arg1=0, arg3=s[1], arg4=s[2], arg5=s[2], arg6=0, arg7=7),
                     C(T.NO_OPERATION),
                     C(T.PROVIDE_OUTPUT, arg1=dup, arg2=OUT)]
    del i0
    renumber_computation(comp)
    # Matrices 1, 2 stay; the submatrix of m3 and m4 itself go (m3 was only
    # referred to by an unused submatrix).
    assert [(m.num_rows, m.num_cols) for m in comp.matrices] == [(0, 0), (3, 4), (3, 4)]
    assert [(x.matrix_index, x.row_offset, x.num_rows) for x in comp.submatrices] == \
        [(0, 0, 0), (1, 0, 3), (2, 0, 3), (2, 1, 2)]
    assert [a.tolist() for a in comp.indexes] == [[2, 1, 0]]
    assert [a.tolist() for a in comp.indexes_multi] == [[[3, 0], [-1, -1], [3, 1]]]
    assert len(comp.indexes_ranges) == 1
    args = [c.args for c in comp.commands]
    assert args[3][:3] == (2, 1, 0) and args[4][:3] == (2, 1, 0)   # dup -> 1, i2 -> i1 = 0
    assert args[5][:2] == (1, 0) and args[6][:2] == (1, 0)
    assert comp.commands[8].arg5 == 1 and comp.commands[9].arg7 == 1     # memo 7 -> 1
    assert comp.commands[-1].arg1 == 1
    remove_no_ops(comp)
    assert T.NO_OPERATION not in _types(comp) and len(comp.commands) == 11


def test_renumber_rejects_unpaired_memo() -> None:
    comp, s = _new([(3, 4), (3, 4)])
    comp.commands = [C(T.PROPAGATE, arg1=0, arg3=s[1], arg4=s[2], arg5=2, arg6=0)]
    with pytest.raises(ComputationCheckError, match="no Backprop"):
        renumber_computation(comp)


def test_insert_commands_is_stable() -> None:
    comp = NnetComputation()
    comp.commands = [C(T.NO_OPERATION_PERMANENT, arg1=i) for i in range(3)]
    insert_commands([(3, C(T.NO_OPERATION, arg1=30)), (1, C(T.NO_OPERATION, arg1=10)),
                     (0, C(T.NO_OPERATION, arg1=0)), (1, C(T.NO_OPERATION, arg1=11))], comp)
    assert [(c.command_type is T.NO_OPERATION, c.arg1) for c in comp.commands] == \
        [(True, 0), (False, 0), (True, 10), (True, 11), (False, 1), (False, 2), (True, 30)]
    with pytest.raises(ValueError):
        insert_commands([(9, C(T.NO_OPERATION))], comp)


def test_unused_matrix_commands_removed(nnet: Nnet) -> None:
    comp, s = _new([(3, 4), (3, 4), (3, 4)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN), *_alloc(s[2]), *_alloc(s[3]),
                     _prop(RELU, s[1], s[3]), C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=OUT),
                     C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.DEALLOC_MATRIX, arg1=s[2])]
    a = Analyzer(nnet, comp)
    assert matrix_is_unused(a, comp, 2)
    assert not matrix_is_unused(a, comp, 1) and not matrix_is_unused(a, comp, 3)
    remove_commands_for_unused_matrix(a, 2, comp)
    remove_no_ops(comp)
    renumber_computation(comp)
    assert len(comp.matrices) == 3 and len(comp.commands) == 6
    check_computation(nnet, comp)


# ---------------------------------------------------------------------------
# the small passes


def test_convert_addition_to_assignment(nnet: Nnet) -> None:
    comp, s = _new([(3, 4), (3, 4), (3, 4), (3, 4), (3, 4)])
    ix = comp.add_indexes([2, 1, 0])
    multi_half = comp.add_indexes_multi([(s[4], 0), (s[4], 1), (s[4], 2)])
    multi_one = comp.add_indexes_multi([(s[5], 0), (s[5], 1), (s[5], 2)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]), *_alloc(s[3]), *_alloc(s[4]), *_alloc(s[5]),
                     C(T.MATRIX_ADD, arg1=s[2], arg2=s[1]),                  # c9: -> copy
                     C(T.MATRIX_ADD, arg1=s[2], arg2=s[1]),                  # c10: stays
                     C(T.ADD_ROWS, 2.0, arg1=s[3], arg2=s[2], arg3=ix),      # c11: -> CopyRows
                     C(T.ADD_TO_ROWS_MULTI, 0.5, arg1=s[3], arg2=multi_half),  # c12: alpha != 1
                     C(T.ADD_TO_ROWS_MULTI, arg1=s[3], arg2=multi_one),      # c13: -> CopyTo
                     C(T.MATRIX_ADD, arg1=s[2], arg2=s[4]),
                     C(T.MATRIX_ADD, arg1=s[2], arg2=s[5]),
                     C(T.PROVIDE_OUTPUT, arg1=s[2], arg2=OUT),
                     *[C(T.DEALLOC_MATRIX, arg1=s[i]) for i in (1, 3, 4, 5)]]
    check_computation(nnet, comp)
    convert_addition_to_assignment(nnet, comp)
    assert _types(comp)[9:14] == [T.MATRIX_COPY, T.MATRIX_ADD, T.COPY_ROWS,
                                  T.ADD_TO_ROWS_MULTI, T.COPY_TO_ROWS_MULTI]
    assert comp.commands[11].alpha == 2.0
    check_computation(nnet, comp)


def test_remove_unnecessary_zeroing(nnet: Nnet) -> None:
    comp, s = _new([(3, 4), (3, 4), (3, 4), (3, 4)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]),                                     # c1, c2
                     C(T.MATRIX_COPY, arg1=s[2], arg2=s[1]),            # c3: full write
                     *_alloc(s[3]),                                     # c4, c5
                     C(T.MATRIX_ADD, arg1=s[3], arg2=s[2]),             # c6: reads zeros
                     *_alloc(s[4]),                                     # c7, c8: read as zeros
                     C(T.MATRIX_ADD, arg1=s[3], arg2=s[4]),
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=OUT),
                     C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.DEALLOC_MATRIX, arg1=s[2]),
                     C(T.DEALLOC_MATRIX, arg1=s[4])]
    remove_unnecessary_zeroing(nnet, comp)
    assert _types(comp)[2] is T.NO_OPERATION
    assert _types(comp)[5] is T.SET_CONST and _types(comp)[8] is T.SET_CONST
    check_computation(nnet, comp)
    # A matrix only ever zeroed and handed out keeps its zeroing.
    comp2, s2 = _new([(3, 4)])
    comp2.commands = [*_alloc(s2[1]), C(T.PROVIDE_OUTPUT, arg1=s2[1], arg2=OUT)]
    remove_unnecessary_zeroing(nnet, comp2)
    assert _types(comp2) == [T.ALLOC_MATRIX, T.SET_CONST, T.PROVIDE_OUTPUT]


def test_move_sizing_commands(nnet: Nnet) -> None:
    comp, s = _new([(3, 4), (3, 4), (3, 4)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]), *_alloc(s[3]),          # c1-c4
                     _prop(RELU, s[1], s[2]),               # c5
                     _prop(NOOP, s[2], s[3]),               # c6
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=OUT),
                     C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.DEALLOC_MATRIX, arg1=s[2])]
    move_sizing_commands(nnet, comp)
    text = [(c.command_type, c.arg1) for c in comp.commands]
    assert text == [(T.ACCEPT_INPUT, s[1]), (T.ALLOC_MATRIX, s[2]), (T.SET_CONST, s[2]),
                    (T.PROPAGATE, RELU), (T.DEALLOC_MATRIX, s[1]),
                    (T.ALLOC_MATRIX, s[3]), (T.SET_CONST, s[3]),
                    (T.PROPAGATE, NOOP), (T.DEALLOC_MATRIX, s[2]), (T.PROVIDE_OUTPUT, s[3])]
    check_computation(nnet, comp)


def test_compute_command_pairs() -> None:
    # From the latest deallocation back, each takes the earliest free allocation after it.
    assert compute_command_pairs([1, 5], [3, 6, 7]) == [(5, 6), (1, 3)]
    assert compute_command_pairs([4, 5], [3, 6]) == [(5, 6)]
    assert compute_command_pairs([8], [3]) == []


def test_remove_unnecessary_allocation(nnet: Nnet) -> None:
    comp, s = _new([(3, 4), (3, 4), (3, 4), (2, 4), (3, 4)])
    comp.matrices[5] = dataclasses.replace(comp.matrices[5],
                                           stride_type=StrideType.EQUAL_NUM_COLS)
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]), _prop(RELU, s[1], s[2]),
                     C(T.DEALLOC_MATRIX, arg1=s[1]),                       # c4
                     *_alloc(s[4]), C(T.COPY_ROWS, arg1=s[4], arg2=s[2],
                                      arg3=comp.add_indexes([0, 1])),    # different size
                     *_alloc(s[5]), C(T.MATRIX_COPY, arg1=s[5], arg2=s[2]),  # other stride
                     *_alloc(s[3]),                                        # c11: takes m1
                     _prop(NOOP, s[2], s[3]),
                     C(T.MATRIX_ADD, arg1=s[3], arg2=s[5]),
                     C(T.COPY_ROWS, arg1=s[3], arg2=s[4], arg3=comp.add_indexes([0, 1, 1])),
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=OUT),
                     *[C(T.DEALLOC_MATRIX, arg1=s[i]) for i in (2, 4, 5)]]
    check_computation(nnet, comp)
    remove_unnecessary_allocation(nnet, comp)
    swaps = [c for c in comp.commands if c.command_type is T.SWAP_MATRIX]
    assert [(c.arg1, c.arg2) for c in swaps] == [(s[3], s[1])]
    assert _types(comp).count(T.ALLOC_MATRIX) == 3 and len(comp.commands) == 19
    check_computation(nnet, comp)


def test_consolidate_io_operations(nnet: Nnet) -> None:
    comp, s = _new([(3, 4), (3, 4)])
    comp.commands = [*_alloc(s[2]), C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     C(T.PROVIDE_OUTPUT, arg1=s[2], arg2=OUT), _prop(RELU, s[1], s[2]),
                     C(T.NO_OPERATION_MARKER), C(T.DEALLOC_MATRIX, arg1=s[1])]
    consolidate_io_operations(nnet, comp)
    assert _types(comp) == [T.ACCEPT_INPUT, T.ALLOC_MATRIX, T.SET_CONST, T.PROPAGATE,
                            T.PROVIDE_OUTPUT, T.NO_OPERATION_MARKER, T.DEALLOC_MATRIX]


# ---------------------------------------------------------------------------
# variable merging


def _copy_then_relu(nnet: Nnet) -> NnetComputation:
    """input m1; m2 = m1; m3 = relu(m2); output m3 (as compiled, unoptimized)."""
    comp, s = _new([(3, 4), (3, 4), (3, 4)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]), C(T.MATRIX_COPY, arg1=s[2], arg2=s[1]),
                     *_alloc(s[3]), _prop(RELU, s[2], s[3]),
                     C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.DEALLOC_MATRIX, arg1=s[2]),
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=OUT)]
    check_computation(nnet, comp, check_rewrite=True)
    return comp


@pytest.mark.parametrize("left", [True, False])
def test_variable_merging_assignment_then_in_place(nnet: Nnet, left: bool) -> None:
    comp = _copy_then_relu(nnet)
    options = OptimizeOptions(allow_left_merge=left)
    # First round: only the assignment (the Propagate's input is then dirty).
    opt = VariableMergingOptimizer(options, nnet, comp)
    assert opt.may_be_merged(3, 1, 2) == (left, True)
    assert opt.merge_variables()
    assert _types(comp) == [T.ACCEPT_INPUT, T.ALLOC_MATRIX, T.SET_CONST, T.PROPAGATE,
                            T.DEALLOC_MATRIX, T.PROVIDE_OUTPUT]
    assert len(comp.matrices) == 3
    with pytest.raises(RuntimeError):
        opt.merge_variables()
    check_computation(nnet, comp)
    # Then the in-place propagate: one matrix is input, relu'd in place, output.
    variable_merging_optimization(options, nnet, comp)
    assert [(c.command_type, c.args[:4]) for c in comp.commands] == \
        [(T.ACCEPT_INPUT, (1, IN, -1, -1)), (T.PROPAGATE, (RELU, 0, 1, 1)),
         (T.PROVIDE_OUTPUT, (1, OUT, -1, -1))]
    assert len(comp.matrices) == 2 and len(comp.submatrices) == 2
    check_computation(nnet, comp)


def test_variable_merging_switches(nnet: Nnet) -> None:
    for options in (OptimizeOptions(remove_assignments=False, propagate_in_place=False),
                    OptimizeOptions(allow_left_merge=False, allow_right_merge=False),
                    OptimizeOptions(optimize=False)):
        comp = _copy_then_relu(nnet)
        before = list(comp.commands)
        variable_merging_optimization(options, nnet, comp)
        assert comp.commands == before
    comp = _copy_then_relu(nnet)
    variable_merging_optimization(OptimizeOptions(remove_assignments=False), nnet, comp)
    assert T.MATRIX_COPY in _types(comp) and len(comp.matrices) == 3   # m2 relu'd into m3


def test_variable_merging_conditions(nnet: Nnet) -> None:
    # m2 = relu(m1); rows 0..2 of m3 (6 rows) = m2; rows 3..5 = m1;
    # m4 = noop(m3), the output.
    comp, s = _new([(3, 4), (3, 4), (6, 4), (6, 4)])
    top = comp.new_submatrix(s[3], 0, 3, 0, 4)
    bottom = comp.new_submatrix(s[3], 3, 3, 0, 4)
    # (Allocated up front, as the compiler does: Kaldi's merge asserts that a
    # discarded matrix is not used before the kept one is allocated.)
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]), *_alloc(s[3]), *_alloc(s[4]),
                     _prop(RELU, s[1], s[2]),                 # c7
                     C(T.MATRIX_COPY, arg1=top, arg2=s[2]),   # c8
                     C(T.MATRIX_COPY, arg1=bottom, arg2=s[1]),  # c9
                     _prop(NOOP, s[3], s[4]),                 # c10
                     *[C(T.DEALLOC_MATRIX, arg1=s[i]) for i in (1, 2, 3)],
                     C(T.PROVIDE_OUTPUT, arg1=s[4], arg2=OUT)]
    check_computation(nnet, comp, check_rewrite=True)
    opt = VariableMergingOptimizer(OptimizeOptions(), nnet, comp)
    assert opt.may_be_merged(8, s[2], top) == (False, True)       # c3: s2 not whole
    assert opt.may_be_merged(9, s[1], bottom) == (False, False)   # c2: m1 input, not whole
    # The relu's input m1 is read again later (c9), so it cannot work in place.
    assert opt.may_be_merged(7, s[1], s[2]) == (False, False)
    assert opt.may_be_merged(10, s[3], s[4]) == (True, True)
    opt.mark_as_dirty(s[2])
    assert opt.may_be_merged(8, s[2], top) == (False, False)      # c5: dirty
    variable_merging_optimization(OptimizeOptions(), nnet, comp)
    # m2 became rows 0..2 of m3, which noop works on in place and hands out.
    assert len(comp.matrices) == 3
    relu = next(c for c in comp.commands if c.command_type is T.PROPAGATE and c.arg1 == RELU)
    out = comp.submatrices[relu.arg4]
    assert (out.matrix_index, out.row_offset, out.num_rows) == (2, 0, 3)
    noop = next(c for c in comp.commands if c.command_type is T.PROPAGATE and c.arg1 == NOOP)
    assert noop.arg3 == noop.arg4 and comp.is_whole_matrix(noop.arg3)
    assert _types(comp).count(T.MATRIX_COPY) == 1
    check_computation(nnet, comp)


def test_variable_merging_never_merges_two_outputs(nnet: Nnet) -> None:
    comp, s = _new([(3, 4), (3, 4), (3, 4)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]), _prop(RELU, s[1], s[2]),
                     *_alloc(s[3]), C(T.MATRIX_COPY, arg1=s[3], arg2=s[2]),
                     C(T.PROVIDE_OUTPUT, arg1=s[2], arg2=OUT),
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=OUT),
                     C(T.DEALLOC_MATRIX, arg1=s[1])]
    opt = VariableMergingOptimizer(OptimizeOptions(), nnet, comp)
    assert opt.may_be_merged(5, s[2], s[3]) == (False, False)     # c1: both outputs


# ---------------------------------------------------------------------------
# the pipeline


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
    import pynnet3.optimize.misc as misc

    def reverse_commands(nnet_: Nnet, c: NnetComputation) -> None:
        c.commands = c.commands[::-1]

    monkeypatch.setattr(misc, "move_sizing_commands", reverse_commands)
    with pytest.raises(OptimizationPassError) as e:
        optimize(None, nnet, 0, _copy_then_relu(nnet), checking_hook(nnet))
    assert e.value.pass_name == "move_sizing_commands"


def test_pipeline_skips_missing_modules(nnet: Nnet, monkeypatch: pytest.MonkeyPatch) -> None:
    import pynnet3.optimize as opt_pkg

    extra = OptimizationPass("future_pass", "module_that_does_not_exist", "f",
                             lambda o: True, lambda fn, ctx: fn(ctx.computation))
    missing_fn = OptimizationPass("missing_function", "misc", "no_such_function",
                                  lambda o: True, lambda fn, ctx: fn(ctx.computation))
    monkeypatch.setattr(opt_pkg, "PASSES", (extra, missing_fn) + PASSES)
    seen = []
    out = optimize(None, nnet, 0, _copy_then_relu(nnet), lambda name, c: seen.append(name))
    assert "future_pass" not in seen and "missing_function" not in seen
    assert len(out.commands) == 3


def test_max_output_time_in_request() -> None:
    req = ComputationRequest([IoSpecification("input", [Index(0, 9, 0)])],
                             [IoSpecification("output", [Index(0, 3, 0), Index(1, 5, 0)]),
                              IoSpecification("xent", [Index(0, 4, 0)])])
    assert max_output_time_in_request(req) == 5
    with pytest.raises(Exception, match="Failed to find any output"):
        max_output_time_in_request(ComputationRequest([], []))
    assert OptimizeOptions().max_deriv_time == INT32_MAX
    assert OptimizeOptions().min_deriv_time == INT32_MIN


# ---------------------------------------------------------------------------
# Kaldi's random networks


def _random_seeds() -> list[str]:
    root = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "random"
    return sorted(p.name for p in root.iterdir() if p.name.isdigit()) if root.is_dir() else []


@functools.lru_cache(maxsize=None)
def _case(seed: str) -> tuple[Nnet, ComputationRequest, NnetComputation]:
    from pynnet3.compile.compiler import Compiler, CompilerOptions
    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    d = reference_dir() / "random" / seed
    nnet = read_nnet(str(d / "final.raw"))
    request = read_request_file(str(d / "request.kaldi-text"))
    return nnet, request, Compiler([request], nnet).create_computation(CompilerOptions())


def _kaldi_stats(seed: str) -> dict[str, int]:
    text = (reference_dir() / "random" / seed / "stats.txt").read_text()
    return {k: int(v) for k, v, *_ in (line.split() for line in text.splitlines() if line.strip())
            if v.lstrip("-").isdigit()}


def _with_all_derivatives(request: ComputationRequest) -> ComputationRequest:
    """The request with model and input derivatives (Kaldi's test draws these
    at random; asking for all exercises every backward pass)."""
    return dataclasses.replace(
        request, need_model_derivative=True,
        inputs=[IoSpecification(io.name, io.indexes, True) for io in request.inputs],
        outputs=[IoSpecification(io.name, io.indexes, True) for io in request.outputs])


def _kaldi_printout_matches(seed: str) -> None:
    nnet, request, comp = _case(seed)
    opt = optimize(OptimizeOptions(), nnet, request, comp, checking_hook(nnet))
    ours = opt.print(nnet.component_names, nnet.node_names)
    kaldi = (reference_dir() / "random" / seed / "computation.txt").read_text()
    stats = _kaldi_stats(seed)
    assert ours == kaldi, (f"{len(opt.commands)} commands / {len(opt.matrices)} matrices, "
                           f"Kaldi {stats['num_commands']} / {stats['num_matrices']}")
    assert opt.matrix_elements_total() == stats["total_matrix_elements"]


# Varied and quick: statistics pooling, distribute, attention (memo), ReLU
# TDNNs with two configs; each has merges, conversions, moved and swapped
# allocations.
# 003 and 058 need Kaldi's unordered_map order of Sum terms (std_order.py).
_FAST_SEEDS = ["003", "009", "011", "019", "023", "043", "045", "058"]


@pytest.mark.parametrize("seed", _FAST_SEEDS)
def test_kaldi_printout_reproduced(seed: str) -> None:
    _kaldi_printout_matches(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", _random_seeds() or ["000"])
def test_kaldi_printout_reproduced_all(seed: str) -> None:
    _kaldi_printout_matches(seed)


# Seeds whose Kaldi printout needs one of this module's passes: switching it
# off must change the result.
@pytest.mark.parametrize("seed,switch", [("023", "remove_assignments"),
                                         ("023", "convert_addition"),
                                         ("045", "move_sizing_commands"),
                                         ("043", "allocate_from_other"),
                                         ("009", "initialize_undefined"),
                                         ("023", "propagate_in_place"),
                                         ("009", "allow_left_merge")])
def test_each_part1_switch_matters(seed: str, switch: str) -> None:
    nnet, request, comp = _case(seed)
    full = optimize(OptimizeOptions(), nnet, request, comp)
    off = optimize(OptimizeOptions(**{switch: False}), nnet, request, comp, checking_hook(nnet))
    assert off.print(nnet.component_names, nnet.node_names) != \
        full.print(nnet.component_names, nnet.node_names)


def test_counts_close_to_kaldi() -> None:
    """Commands and matrices after optimization vs Kaldi's stats.txt, summed
    over the quick seeds plus two with recurrences."""
    ours = kaldi = unopt = 0
    for seed in _FAST_SEEDS + ["024", "052"]:
        nnet, request, comp = _case(seed)
        opt = optimize(OptimizeOptions(), nnet, request, comp)
        stats = _kaldi_stats(seed)
        unopt += len(comp.commands)
        ours += len(opt.commands)
        kaldi += stats["num_commands"]
    assert ours <= 1.05 * kaldi and ours < 0.7 * unopt, (unopt, ours, kaldi)


# -- nnet-optimize-test ------------------------------------------------------------


def _compare(seed: str, all_derivs: bool, options: OptimizeOptions | None = None,
             use_shortcut: bool = False) -> None:
    nnet, request, comp = _case(seed)
    if all_derivs:
        request = _with_all_derivatives(request)
        comp = None
    try:
        r = compare_optimized(nnet, request, options, unoptimized=comp, seed=int(seed),
                              after_each_pass=checking_hook(nnet), use_shortcut=use_shortcut)
    except NotImplementedError as e:
        pytest.skip(f"component math not implemented: {e}")
    if not r.ok:
        report = find_breaking_optimization(nnet, request, options, seed=int(seed))
        pytest.fail(f"{r.message}\n{report.summary()}")
    assert r.errors and all(e < 1e-3 for e in r.errors.values()), r.errors


@pytest.mark.parametrize("seed", ["002", "019", "023", "052", "058"])
def test_optimized_computes_the_same(seed: str) -> None:
    _compare(seed, all_derivs=True)


def test_optimized_computes_the_same_right_merges_only() -> None:
    # Right-merging an input (Kaldi would assert here) and other switches.
    _compare("005", all_derivs=True, options=OptimizeOptions(allow_left_merge=False))
    _compare("029", all_derivs=True, options=OptimizeOptions(allow_left_merge=False))
    _compare("023", all_derivs=True, options=OptimizeOptions(convert_addition=False,
                                                             allow_right_merge=False))


@pytest.mark.slow
@pytest.mark.parametrize("seed", _random_seeds() or ["000"])
def test_optimized_computes_the_same_all(seed: str) -> None:
    _compare(seed, all_derivs=False)
    _compare(seed, all_derivs=True, use_shortcut=True)
    for options in (OptimizeOptions(allow_left_merge=False),
                    OptimizeOptions(allow_right_merge=False),
                    OptimizeOptions(convert_addition=False, initialize_undefined=False),
                    OptimizeOptions(move_sizing_commands=False, allocate_from_other=False),
                    OptimizeOptions(min_deriv_time=-200, max_deriv_time=1000)):
        _compare(seed, all_derivs=True, options=options)


def test_find_breaking_optimization_names_a_broken_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynnet3.optimize.misc as misc

    def convert_everything(nnet_: Nnet, comp: NnetComputation) -> None:
        """Wrong on purpose: every addition becomes an assignment."""
        comp.commands = [c.with_args(command_type=misc._ADD_TO_COPY[c.command_type])
                         if c.command_type in misc._ADD_TO_COPY and c.alpha == 1.0 else c
                         for c in comp.commands]

    nnet, request, _ = _case("058")          # output = Sum(layer1-conv, layer2-conv)
    assert compare_optimized(nnet, request).ok
    monkeypatch.setattr(misc, "convert_addition_to_assignment", convert_everything)
    report = find_breaking_optimization(nnet, request,
                                        switches=["convert_addition", "remove_assignments",
                                                  "optimize"])
    assert not report.ok and "output:output" in report.first_failure.message
    assert report.breaking == ["convert_addition", "optimize"]
    assert report.retries["remove_assignments"] is False
    assert "convert_addition           ... SUCCESS" in report.summary()
    assert np.isfinite(report.first_failure.errors["output:output"])


# -- the vosk TDNN-F model: Kaldi's printed computations -----------------------


def _vosk_request(nnet: Nnet, path: Path) -> ComputationRequest:
    """The request printed at the top of Kaldi's file, or (where Kaldi
    shortened its index lists) the same request rebuilt: outputs every 3rd
    frame, inputs over the context, ivector at t=0."""
    import re

    from pynnet3.compile.request_io import build_request, parse_printed_request
    from pynnet3.errors import FormatError

    try:
        return parse_printed_request(path.read_text(), str(path))
    except FormatError:
        frames = int(re.search(r"_(\d+)frames", path.name).group(1))
        deriv = ".deriv1." in path.name
        request = build_request(nnet, 1, frames, frame_subsampling_factor=3,
                                need_model_derivative=deriv)
        for io in request.outputs:
            io.has_deriv = deriv
        return request


@functools.lru_cache(maxsize=1)
def _vosk_nnet(path: str) -> Nnet:
    from pynnet3.compile.model_io import read_nnet

    return read_nnet(path)


def _check_vosk(vosk_mdl: Path, name: str) -> None:
    from pynnet3.compile.compiler import Compiler, CompilerOptions

    path = reference_dir() / "compile" / f"computation.{name}.shortcut0.txt"
    nnet = _vosk_nnet(str(vosk_mdl))
    request = _vosk_request(nnet, path)
    comp = Compiler([request], nnet).create_computation(CompilerOptions())
    opt = optimize(OptimizeOptions(), nnet, request, comp, checking_hook(nnet))
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("store-component-stats"))
    kaldi = "\n".join(lines[start + 1:]).lstrip("\n") + "\n"
    assert opt.print(nnet.component_names, nnet.node_names) == kaldi


def test_vosk_training_computation_reproduced(vosk_mdl: Path) -> None:
    """602 commands: merges, in-place ReLUs/batchnorm, swaps, compression."""
    _check_vosk(vosk_mdl, "every_t0-149.seq1.deriv1")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["every_t0-149.seq1.deriv0", "stride3_t0-147_50frames.seq1.deriv0",
                                  "stride3_t0-147_50frames.seq1.deriv1",
                                  "stride3_t0-447_150frames.seq1.deriv0",
                                  "stride3_t0-447_150frames.seq1.deriv1"])
def test_vosk_computations_reproduced(vosk_mdl: Path, name: str) -> None:
    _check_vosk(vosk_mdl, name)
