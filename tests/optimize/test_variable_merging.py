"""Variable merging (Kaldi's VariableMergingOptimizer): removing assignments
and in-place propagation/backprop, its switches and the conditions it checks."""
from __future__ import annotations

import pytest

from pynnet3.compile.computation import Command, CommandType
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.options import OptimizeOptions
from pynnet3.optimize.variable_merging import (VariableMergingOptimizer,
                                               variable_merging_optimization)
from tests.optimize.helpers import (IN, NOOP, OUT, RELU, _alloc, _copy_then_relu, _new, _prop,
                                    _types)

T = CommandType
C = Command


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
