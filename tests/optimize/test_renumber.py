"""Renumbering (Kaldi's RenumberComputation) and the command-editing utilities
of nnet-optimize-utils: unused and duplicate matrices, memos, insertion,
commands of unused matrices."""
from __future__ import annotations

import pytest

from pynnet3.compile.computation import Command, CommandType, NnetComputation
from pynnet3.errors import ComputationCheckError
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize.analysis import Analyzer
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.renumber import (insert_commands, matrix_is_unused,
                                       remove_commands_for_unused_matrix, remove_no_ops,
                                       renumber_computation)
from tests.optimize.helpers import IN, OUT, RELU, _alloc, _new, _prop, _types

T = CommandType
C = Command


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
