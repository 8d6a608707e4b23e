"""The row-op passes (snip_row_ops, split_row_ops,
replace_row_with_matrix_ops) on hand-built computations whose rewrite is
known, command by command."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.compile.computation import Command, CommandType, SubMatrixInfo
from pynnet3.errors import PynnetError
from pynnet3.optimize import copy_computation
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.renumber import renumber_computation
from pynnet3.optimize.row_ops import (indexes_have_special_structure, replace_row_with_matrix_ops,
                                      snip_row_ops, split_row_ops)
from tests.optimize.helpers import _IO_NNET, _alloc_zero, _hand_computation, _nnet, _run_io

T = CommandType
C = Command
F32 = np.float32


def test_snip_row_ops_known_rewrites() -> None:
    nnet = _nnet(_IO_NNET)
    inp, out, aux = (nnet.get_node_index(n) for n in ("input", "output", "aux"))
    comp, s = _hand_computation([(6, 3), (6, 3), (4, 3)])
    add_rows = comp.add_indexes([-1, 3, -1, 4, -1, -1])
    copy_rows = comp.add_indexes([-1, 2, 3, -1])
    multi = comp.add_indexes_multi([(-1, -1), (s[1], 0), (-1, -1), (s[1], 5)])
    ranges = comp.add_indexes_ranges([(-1, -1), (0, 3), (-1, -1), (4, 6), (-1, -1), (-1, -1)])
    to_multi = comp.add_indexes_multi([(-1, -1), (s[3], 0), (s[3], 2), (-1, -1), (-1, -1),
                                       (-1, -1)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=inp), *_alloc_zero(s[2]),
                     *_alloc_zero(s[3]),
                     C(T.COPY_ROWS, 1.0, s[3], s[1], copy_rows),            # c5: never snipped
                     C(T.ADD_ROWS, 2.0, s[2], s[1], add_rows),              # c6
                     C(T.ADD_ROWS_MULTI, 1.0, s[3], multi),                 # c7
                     C(T.ADD_ROW_RANGES, 0.5, s[2], s[1], ranges),          # c8
                     C(T.ADD_TO_ROWS_MULTI, 1.0, s[1], to_multi),           # c9
                     C(T.DEALLOC_MATRIX, arg1=s[1]),
                     C(T.PROVIDE_OUTPUT, arg1=s[2], arg2=out),
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=aux)]
    check_computation(nnet, comp)
    opt = copy_computation(comp)
    assert snip_row_ops(opt)
    cmds, subs = opt.commands, opt.submatrices
    assert cmds[5] == comp.commands[5]
    assert subs[cmds[6].arg1] == SubMatrixInfo(2, 1, 3, 0, 3)
    assert opt.indexes[cmds[6].arg3].tolist() == [3, -1, 4] and cmds[6].alpha == 2.0
    assert subs[cmds[7].arg1] == SubMatrixInfo(3, 1, 3, 0, 3)
    assert opt.indexes_multi[cmds[7].arg2].tolist() == [[s[1], 0], [-1, -1], [s[1], 5]]
    assert subs[cmds[8].arg1] == SubMatrixInfo(2, 1, 3, 0, 3) and cmds[8].arg2 == s[1]
    assert opt.indexes_ranges[cmds[8].arg3].tolist() == [[0, 3], [-1, -1], [4, 6]]
    assert subs[cmds[9].arg1] == SubMatrixInfo(1, 1, 2, 0, 3)   # the source rows
    assert opt.indexes_multi[cmds[9].arg2].tolist() == [[s[3], 0], [s[3], 2]]
    assert not snip_row_ops(opt)          # nothing left to snip
    renumber_computation(opt)
    assert len(opt.indexes) == 2 and len(opt.indexes_multi) == 2 and len(opt.indexes_ranges) == 1
    check_computation(nnet, opt)
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(F32)
    a, b = _run_io(nnet, comp, x, ["output", "aux"]), _run_io(nnet, opt, x, ["output", "aux"])
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-6, atol=1e-6)


def test_snip_row_ops_rejects_tables_that_do_nothing() -> None:
    comp, s = _hand_computation([(3, 3), (3, 3)])
    comp.commands = [C(T.ADD_ROWS, 1.0, s[2], s[1], comp.add_indexes([-1, -1, -1]))]
    with pytest.raises(PynnetError, match="does nothing"):
        snip_row_ops(comp)


def test_split_row_ops_known_rewrites() -> None:
    nnet = _nnet(_IO_NNET)
    inp, out, aux = (nnet.get_node_index(n) for n in ("input", "output", "aux"))
    comp, s = _hand_computation([(6, 3), (5, 3), (4, 3), (4, 3)])
    m2_top = comp.new_submatrix(s[2], 0, 2, 0, 3)
    k_two_blocks = comp.add_indexes_multi([(s[1], 2), (s[1], 3), (s[1], 4), (s[4], 0), (s[4], 1)])
    k_permuted = comp.add_indexes_multi([(s[1], 0), (s[1], 2), (s[1], 4), (s[1], 1), (s[1], 5)])
    k_to = comp.add_indexes_multi([(s[3], 3), (s[3], 0), (s[3], 2), (s[3], 1)])
    k_copy_to = comp.add_indexes_multi([(s[3], 3), (s[3], 0), (s[3], 2), (s[3], 1)])
    k_sparse = comp.add_indexes_multi([(s[1], 0), (s[1], 5)])
    comp.commands = [
        C(T.ACCEPT_INPUT, arg1=s[1], arg2=inp), *_alloc_zero(s[2]), *_alloc_zero(s[3]),
        C(T.ALLOC_MATRIX, arg1=s[4]),
        C(T.COPY_ROWS, 1.0, s[4], s[1], comp.add_indexes([5, 4, 0, 1])),      # c6
        C(T.COPY_ROWS_MULTI, 1.0, s[2], k_two_blocks),                        # c7
        C(T.ADD_ROWS_MULTI, 0.5, s[2], k_permuted),                           # c8
        C(T.ADD_TO_ROWS_MULTI, 2.0, s[4], k_to),                              # c9
        C(T.COPY_TO_ROWS_MULTI, 1.0, s[4], k_copy_to),                        # c10: kept
        C(T.ADD_ROWS_MULTI, 1.0, m2_top, k_sparse),                           # c11: kept
        C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.DEALLOC_MATRIX, arg1=s[4]),
        C(T.PROVIDE_OUTPUT, arg1=s[2], arg2=out), C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=aux)]
    check_computation(nnet, comp)
    opt = copy_computation(comp)
    assert split_row_ops(opt)
    cmds, subs = opt.commands, opt.submatrices
    # the two-block CopyRowsMulti became two MatrixCopy commands (c7, c8)
    assert [c.command_type for c in cmds[7:9]] == [T.MATRIX_COPY, T.MATRIX_COPY]
    assert (subs[cmds[7].arg1], subs[cmds[7].arg2]) == (SubMatrixInfo(2, 0, 3, 0, 3),
                                                          SubMatrixInfo(1, 2, 3, 0, 3))
    assert (subs[cmds[8].arg1], subs[cmds[8].arg2]) == (SubMatrixInfo(2, 3, 2, 0, 3),
                                                          SubMatrixInfo(4, 0, 2, 0, 3))
    # permuted rows of one submatrix: an AddRows with the offsets
    assert cmds[9].command_type is T.ADD_ROWS and cmds[9].alpha == 0.5
    assert subs[cmds[9].arg2] == SubMatrixInfo(1, 0, 6, 0, 3)
    assert opt.indexes[cmds[9].arg3].tolist() == [0, 2, 4, 1, 5]
    # AddToRowsMulti: the table inverted into an AddRows onto m3
    assert cmds[10].command_type is T.ADD_ROWS and cmds[10].alpha == 2.0
    assert (subs[cmds[10].arg1], subs[cmds[10].arg2]) == (SubMatrixInfo(3, 0, 4, 0, 3),
                                                            SubMatrixInfo(4, 0, 4, 0, 3))
    assert opt.indexes[cmds[10].arg3].tolist() == [1, 3, 2, 0]
    assert cmds[11:13] == comp.commands[10:12]    # left alone
    renumber_computation(opt)
    check_computation(nnet, opt)
    x = np.random.default_rng(1).standard_normal((6, 3)).astype(F32)
    a, b = _run_io(nnet, comp, x, ["output", "aux"]), _run_io(nnet, opt, x, ["output", "aux"])
    for k in a:
        np.testing.assert_allclose(b[k], a[k], rtol=1e-6, atol=1e-6)


def test_replace_row_with_matrix_ops_known_rewrites() -> None:
    assert indexes_have_special_structure(np.array([-1, -1, 5, 6, 7, -1])) == (2, 5, 3)
    assert indexes_have_special_structure(np.array([0, 1, 2])) == (0, 0, 3)
    assert indexes_have_special_structure(np.array([-1, 3, 5])) is None
    assert indexes_have_special_structure(np.array([1, 2, -1, 3])) is None
    assert indexes_have_special_structure(np.array([-1, -1])) is None
    nnet = _nnet(_IO_NNET)
    inp, out = nnet.get_node_index("input"), nnet.get_node_index("output")
    comp, s = _hand_computation([(6, 3), (6, 3)])
    comp.commands = [
        C(T.ACCEPT_INPUT, arg1=s[1], arg2=inp), *_alloc_zero(s[2]),
        C(T.COPY_ROWS, 1.0, s[2], s[1], comp.add_indexes([-1, -1, 3, 4, 5, -1])),
        C(T.ADD_ROWS, 3.0, s[2], s[1], comp.add_indexes([0, 1, 2, 3, 4, 5])),
        C(T.ADD_ROWS, 1.0, s[2], s[1], comp.add_indexes([0, 2, 1, 3, 4, 5])),
        C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.PROVIDE_OUTPUT, arg1=s[2], arg2=out)]
    opt = copy_computation(comp)
    assert replace_row_with_matrix_ops(opt)
    cmds, subs = opt.commands, opt.submatrices
    assert cmds[3].command_type is T.MATRIX_COPY
    assert (subs[cmds[3].arg1], subs[cmds[3].arg2]) == (SubMatrixInfo(2, 2, 3, 0, 3),
                                                          SubMatrixInfo(1, 3, 3, 0, 3))
    assert cmds[4].command_type is T.MATRIX_ADD and cmds[4].alpha == 3.0
    assert opt.is_whole_matrix(cmds[4].arg1) and opt.is_whole_matrix(cmds[4].arg2)
    assert cmds[5] == comp.commands[5]
    renumber_computation(opt)
    assert len(opt.indexes) == 1
    check_computation(nnet, opt)
    x = np.random.default_rng(2).standard_normal((6, 3)).astype(F32)
    np.testing.assert_allclose(_run_io(nnet, opt, x, ["output"])["output"],
                               _run_io(nnet, comp, x, ["output"])["output"], rtol=1e-6)
