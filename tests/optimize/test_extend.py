"""extend_matrices (Kaldi's MatrixExtender) on computations whose rewrite is
known."""
from __future__ import annotations


import numpy as np

from pynnet3.compile.computation import Command, CommandType, MatrixDebugInfo, SubMatrixInfo
from pynnet3.compile.n_stride import cindex_array
from pynnet3.nnet.index import Index, K_NO_TIME
from pynnet3.optimize import copy_computation
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.extend import extend_matrices
from tests.optimize.helpers import _IO_NNET, _alloc_zero, _hand_computation, _nnet, _run_io

T = CommandType
C = Command
F32 = np.float32


def test_extend_matrices_known_rewrite() -> None:
    nnet = _nnet(_IO_NNET)
    inp, out = nnet.get_node_index("input"), nnet.get_node_index("output")
    comp, s = _hand_computation([(10, 3), (12, 3), (12, 3)])
    comp.matrix_debug_info = [MatrixDebugInfo()] + [
        MatrixDebugInfo(False, [(0, Index(0, t, 0)) for t in range(rows)])
        for rows in (10, 12, 12)]
    dest = comp.new_submatrix(s[2], 4, 8, 0, 3)
    src = comp.new_submatrix(s[1], 0, 8, 0, 3)
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=inp), *_alloc_zero(s[2]),
                     C(T.MATRIX_COPY, 1.0, dest, src),
                     C(T.ALLOC_MATRIX, arg1=s[3]), C(T.MATRIX_COPY, 1.0, s[3], s[2]),
                     C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.DEALLOC_MATRIX, arg1=s[2]),
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=out)]
    check_computation(nnet, comp)
    opt = copy_computation(comp)
    extend_matrices(opt)
    check_computation(nnet, opt)
    # m2 grew by the two rows the copy left out; the copy takes all of m1
    assert opt.matrices[2].num_rows == 14 and opt.matrices[1].num_rows == 10
    copy_cmd = opt.commands[3]
    assert opt.submatrices[copy_cmd.arg1] == SubMatrixInfo(2, 4, 10, 0, 3)
    assert opt.is_whole_matrix(copy_cmd.arg2)
    for c in (1, 2, 7):   # allocation, zeroing, deallocation of m2: the whole grown matrix
        assert opt.is_whole_matrix(opt.commands[c].arg1)
        assert opt.submatrices[opt.commands[c].arg1].matrix_index == 2
    assert opt.submatrices[opt.commands[5].arg2] == SubMatrixInfo(2, 0, 12, 0, 3)
    ts = cindex_array(opt.matrix_debug_info[2].cindexes)[:, 2].tolist()
    assert ts == list(range(12)) + [K_NO_TIME, K_NO_TIME]
    x = np.random.default_rng(3).standard_normal((10, 3)).astype(F32)
    np.testing.assert_array_equal(_run_io(nnet, opt, x, ["output"])["output"],
                                  _run_io(nnet, comp, x, ["output"])["output"])


def test_extend_matrices_leaves_other_copies() -> None:
    comp, s = _hand_computation([(10, 3), (12, 3)])
    too_small = comp.new_submatrix(s[1], 0, 7, 0, 3)     # 7 < 0.8 * 10 rows
    not_to_end = comp.new_submatrix(s[2], 0, 7, 0, 3)
    comp.commands = [C(T.MATRIX_COPY, 1.0, comp.new_submatrix(s[2], 5, 7, 0, 3), too_small),
                     C(T.MATRIX_COPY, 1.0, not_to_end, comp.new_submatrix(s[1], 0, 7, 0, 3)),
                     C(T.MATRIX_COPY, 2.0, comp.new_submatrix(s[2], 4, 8, 0, 3),
                       comp.new_submatrix(s[1], 0, 8, 0, 3))]
    before = copy_computation(comp)
    extend_matrices(comp)
    assert comp.commands == before.commands and comp.matrices == before.matrices
