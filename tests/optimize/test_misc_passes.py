"""The small passes of nnet-optimize.cc, on hand-built computations whose
rewrite is worked out from Kaldi's code: addition->assignment, unnecessary
zeroing, moving sizing commands, allocation from other matrices, I/O order."""
from __future__ import annotations

import dataclasses

from pynnet3.compile.computation import Command, CommandType, StrideType
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.misc import (compute_command_pairs, consolidate_io_operations,
                                   convert_addition_to_assignment, move_sizing_commands,
                                   remove_unnecessary_allocation, remove_unnecessary_zeroing)
from tests.optimize.helpers import IN, NOOP, OUT, RELU, _alloc, _new, _prop, _types

T = CommandType
C = Command


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
