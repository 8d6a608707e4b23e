"""Computation analysis (Kaldi's nnet-analyze) and the ComputationChecker."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.computation import Command, CommandType, NnetComputation
from pynnet3.errors import ComputationCheckError
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize.accesses import compute_command_attributes, compute_variable_accesses
from pynnet3.optimize.analysis import (Analyzer, ComputationAnalysis, compute_matrix_to_submatrix,
                                       get_commands_of_type, get_max_memory_use,
                                       print_matrix_accesses)
from pynnet3.optimize.variables import AccessType, ComputationVariables
from pynnet3.optimize.check import CheckComputationOptions, ComputationChecker, check_computation
from tests.helpers import enough

T = CommandType
R, W, RW = AccessType.READ, AccessType.WRITE, AccessType.READ_WRITE

_CONFIG = """input-node name=input dim=4
component name=affine type=AffineComponent input-dim=4 output-dim=3
component name=relu type=RectifiedLinearComponent dim=3
component-node name=affine component=affine input=input
component-node name=relu component=relu input=affine
output-node name=output input=relu
"""


@pytest.fixture(scope="module")
def nnet() -> Nnet:
    n = Nnet()
    n.read_config(_CONFIG, "<test>")
    return n


def _forward_backward() -> NnetComputation:
    """What an unoptimized compile of input -> affine -> relu -> output with
    an input derivative looks like (node 0 = input, node 5 = output)."""
    comp = NnetComputation()
    s_in = comp.new_matrix(5, 4)        # m1 input value
    s_aff = comp.new_matrix(5, 3)       # m2 affine value
    s_relu = comp.new_matrix(5, 3)      # m3 relu value (output)
    s_oderiv = comp.new_matrix(5, 3)    # m4 output derivative (given)
    s_aderiv = comp.new_matrix(5, 3)    # m5 affine-output derivative
    s_ideriv = comp.new_matrix(5, 4)    # m6 input derivative (returned)
    C = Command
    comp.commands = [
        C(T.ACCEPT_INPUT, arg1=s_in, arg2=0),                                  # c0
        C(T.ACCEPT_INPUT, arg1=s_oderiv, arg2=5),                              # c1
        C(T.ALLOC_MATRIX, arg1=s_aff),                                         # c2
        C(T.PROPAGATE, arg1=0, arg2=0, arg3=s_in, arg4=s_aff, arg5=0, arg6=0),  # c3
        C(T.ALLOC_MATRIX, arg1=s_relu),                                        # c4
        C(T.PROPAGATE, arg1=1, arg2=0, arg3=s_aff, arg4=s_relu, arg5=0, arg6=1),  # c5
        C(T.PROVIDE_OUTPUT, arg1=s_relu, arg2=5),                              # c6
        C(T.NO_OPERATION_MARKER),                                              # c7
        C(T.ALLOC_MATRIX, arg1=s_aderiv),                                      # c8
        C(T.BACKPROP, arg1=1, arg2=0, arg3=0, arg4=s_relu, arg5=s_oderiv, arg6=s_aderiv,
          arg7=0),                                                             # c9
        C(T.ALLOC_MATRIX, arg1=s_ideriv),                                      # c10
        C(T.SET_CONST, alpha=0.0, arg1=s_ideriv),                              # c11
        C(T.BACKPROP, arg1=0, arg2=0, arg3=s_in, arg4=0, arg5=s_aderiv, arg6=s_ideriv,
          arg7=0),                                                             # c12
        C(T.PROVIDE_OUTPUT, arg1=s_ideriv, arg2=0),                            # c13
        C(T.DEALLOC_MATRIX, arg1=s_in),                                        # c14
        C(T.DEALLOC_MATRIX, arg1=s_aff),                                       # c15
        C(T.DEALLOC_MATRIX, arg1=s_oderiv),                                    # c16
        C(T.DEALLOC_MATRIX, arg1=s_aderiv),                                    # c17
    ]
    return comp


def _rows_computation() -> NnetComputation:
    """Row operations on parts of matrices: m1 (6x4) input, m2 (6x4) built
    from two halves, m3 (3x8) via *Multi and AddRowRanges."""
    comp = NnetComputation()
    s1 = comp.new_matrix(6, 4)
    s2 = comp.new_matrix(6, 4)
    s3 = comp.new_matrix(3, 8)
    top = comp.new_submatrix(s2, 0, 3, 0, 4)       # s4: m2 rows 0:2
    bottom = comp.new_submatrix(s2, 3, 3, 0, 4)    # s5: m2 rows 3:5
    left = comp.new_submatrix(s3, 0, 3, 0, 4)      # s6: m3 cols 0:3
    right = comp.new_submatrix(s3, 0, 3, 4, 4)     # s7: m3 cols 4:7
    i_rev = comp.add_indexes([5, 4, 3])
    i_gap = comp.add_indexes([0, -1, 2])
    multi = comp.add_indexes_multi([(top, 0), (bottom, 2), (-1, -1)])
    ranges = comp.add_indexes_ranges([(0, 2), (-1, -1), (3, 6)])
    C = Command
    comp.commands = [
        C(T.ACCEPT_INPUT, arg1=s1, arg2=0),                   # c0
        C(T.ALLOC_MATRIX, arg1=s2),                           # c1
        C(T.COPY_ROWS, arg1=top, arg2=s1, arg3=i_rev),        # c2: write (no -1)
        C(T.MATRIX_COPY, alpha=2.0, arg1=bottom, arg2=top),   # c3
        C(T.ALLOC_MATRIX, arg1=s3),                           # c4
        C(T.COPY_ROWS_MULTI, arg1=left, arg2=multi),          # c5
        C(T.SET_CONST, alpha=0.0, arg1=right),                # c6
        C(T.COPY_ROWS, arg1=right, arg2=bottom, arg3=i_gap),  # c7: rw (has -1)
        C(T.ADD_ROW_RANGES, arg1=right, arg2=s1, arg3=ranges),  # c8
        C(T.PROVIDE_OUTPUT, arg1=s3, arg2=5),                 # c9
        C(T.DEALLOC_MATRIX, arg1=s1),                         # c10
        C(T.DEALLOC_MATRIX, arg1=s2),                         # c11
    ]
    return comp


def _with(comp: NnetComputation, c: int, **changes) -> NnetComputation:
    commands = list(comp.commands)
    commands[c] = replace(commands[c], **changes)
    return replace(comp, commands=commands)


def _without(comp: NnetComputation, *cs: int) -> NnetComputation:
    return replace(comp, commands=[x for i, x in enumerate(comp.commands) if i not in cs])


# -- variables -----------------------------------------------------------------------

def test_variables_hand_built():
    comp = NnetComputation()
    s1 = comp.new_matrix(10, 6)
    s2 = comp.new_submatrix(s1, 0, 5, 0, 6)
    s3 = comp.new_submatrix(s1, 5, 5, 0, 3)
    s4 = comp.new_matrix(4, 6)
    v = ComputationVariables(comp)
    assert v.num_variables == 5
    assert [v.row_split_points[1].tolist(), v.column_split_points[1].tolist()] == [[0, 5, 10], [0, 3, 6]]
    assert v.variables_for_submatrix(s1) == [0, 1, 2, 3]
    assert v.variables_for_submatrix(s2) == [0, 1]
    assert v.variables_for_submatrix(s3) == [2]
    assert v.variables_for_submatrix(s4) == [4]
    assert v.variables_for_submatrix(0) == []
    assert list(v.variables_for_matrix(2)) == [4]
    assert v.submatrix_is_whole_matrix.tolist() == [False, True, False, False, True]
    assert [v.describe_variable(i) for i in range(5)] == [
        "m1(0:4,0:2)", "m1(0:4,3:5)", "m1(5:9,0:2)", "m1(5:9,3:5)", "m2"]
    assert v.variable_info(3) == type(comp.submatrices[0])(1, 5, 5, 3, 3)
    assert [v.get_matrix_for_variable(i) for i in range(5)] == [1, 1, 1, 1, 2]


def test_variables_random_against_element_painting():
    """Variables tile every matrix exactly, every submatrix is exactly the
    union of its variables, and every split is needed (coarsest grid)."""
    rng = np.random.default_rng(7)
    comp = NnetComputation()
    shapes = [(17, 9), (8, 30), (1, 1), (12, 12)]
    for r, c in shapes:
        comp.new_matrix(r, c)
    for _ in range(60):
        m = int(rng.integers(1, len(shapes) + 1))
        nr, nc = shapes[m - 1]
        r0, c0 = int(rng.integers(0, nr)), int(rng.integers(0, nc))
        comp.new_submatrix(m, r0, int(rng.integers(1, nr - r0 + 1)), c0,
                           int(rng.integers(1, nc - c0 + 1)))
    v = ComputationVariables(comp)
    paint = [np.full(s, -1) for s in shapes]
    for var in range(v.num_variables):
        info = v.variable_info(var)
        block = paint[info.matrix_index - 1][info.row_offset:info.row_offset + info.num_rows,
                                             info.col_offset:info.col_offset + info.num_cols]
        assert (block == -1).all()
        block[...] = var
    assert all((p >= 0).all() for p in paint)
    for s in range(1, len(comp.submatrices)):
        si = comp.submatrices[s]
        block = paint[si.matrix_index - 1][si.row_offset:si.row_offset + si.num_rows,
                                           si.col_offset:si.col_offset + si.num_cols]
        assert sorted(set(block.ravel().tolist())) == v.variables_for_submatrix(s)
    for m in range(1, len(shapes) + 1):
        rows = {0, shapes[m - 1][0]}
        for s in comp.submatrices[1:]:
            if s.matrix_index == m:
                rows |= {s.row_offset, s.row_offset + s.num_rows}
        assert v.row_split_points[m].tolist() == sorted(rows)


# -- attributes and accesses ------------------------------------------------------------

def test_command_attributes_forward_backward(nnet):
    comp = _forward_backward()
    a = Analyzer(nnet, comp)
    attr = a.command_attributes
    # one variable per matrix: variable v is matrix v+1
    assert (attr[0].variables_written, attr[0].matrices_written) == ([0], [1])
    assert (attr[3].variables_read, attr[3].variables_written) == ([0], [1])   # affine: assigns
    assert attr[3].submatrices_read == [1] and attr[3].submatrices_written == [2]
    assert (attr[9].variables_read, attr[9].variables_written) == ([2, 3], [4])  # relu backprop
    assert not attr[9].has_side_effects
    # affine backprop adds into the input derivative, and updates the model
    assert (attr[12].variables_read, attr[12].variables_written) == ([0, 4, 5], [5])
    assert attr[12].has_side_effects
    assert attr[11].variables_written == [5] and attr[11].variables_read == []
    for c in (2, 4, 7, 8, 10, 14, 15):
        assert attr[c].variables_read == attr[c].variables_written == []
    assert a.variable_accesses[5] == [(11, W), (12, RW), (13, R)]
    assert a.variable_accesses[0] == [(0, W), (3, R), (12, R)]
    ma = a.matrix_accesses
    assert (ma[1].allocate_command, ma[1].deallocate_command, ma[1].is_input) == (0, 14, True)
    assert (ma[3].allocate_command, ma[3].deallocate_command, ma[3].is_output) == (4, -1, True)
    assert [x.command_index for x in ma[2].accesses] == [3, 5]
    assert print_matrix_accesses(ma).splitlines()[5] == \
        "m6: init-command=10, destroy-command=-1, accesses=c11(w) c12(rw) c13(r) "
    assert compute_command_attributes(nnet, comp, a.variables) == attr
    # the table rebuilt from the per-command lists is the same
    table = compute_variable_accesses(a.variables, attr)
    assert [table[v] for v in range(len(table))] == [a.variable_accesses[v]
                                                     for v in range(len(table))]


def test_command_attributes_row_commands(nnet):
    comp = _rows_computation()
    a = Analyzer(nnet, comp)
    v = a.variables
    # m2 split in two row halves, m3 in two column halves
    assert v.variables_for_submatrix(2) == [1, 2] and v.variables_for_submatrix(3) == [3, 4]
    attr = a.command_attributes
    assert (attr[2].variables_written, attr[2].variables_read) == ([1], [0])
    assert attr[2].matrices_read == [1, 2]          # partial write: m2 also "read"
    assert attr[5].variables_written == [3] and attr[5].variables_read == [1, 2]
    assert attr[7].variables_read == [2, 4] and attr[7].variables_written == [4]  # -1 => rw
    assert attr[8].variables_read == [0, 4] and attr[8].variables_written == [4]
    assert a.variable_accesses[4] == [(6, W), (7, RW), (8, RW), (9, R)]
    an = ComputationAnalysis(comp, a)
    right = 7
    assert an.first_nontrivial_access(right) == 7    # c6 only zeroes it
    assert an.first_access(right) == 6
    assert an.last_access(right) == 9
    assert an.last_write_access(right) == len(comp.commands)   # m3 is an output
    assert an.last_write_access(4) == 2                          # m2 top half
    assert an.data_invalidated_command(2, 4) == 11               # then freed at c11
    assert an.data_invalidated_command(0, 1) == 10
    assert an.first_nontrivial_matrix_access(3) == 5
    assert an.last_matrix_access(2) == 7
    check_computation(nnet, comp)


def test_small_utilities(nnet):
    comp = _forward_backward()
    assert get_commands_of_type(comp, T.ALLOC_MATRIX) == [2, 4, 8, 10]
    assert compute_matrix_to_submatrix(_rows_computation())[2] == [2, 4, 5]
    # peak: m1..m4 (80+60+60+60 bytes) then m5, m6 (60+80) before any free
    assert get_max_memory_use(comp) == 4 * (20 + 15 + 15 + 15 + 15 + 20)


# -- the checker -------------------------------------------------------------------------

def test_checker_accepts_hand_built(nnet):
    check_computation(nnet, _forward_backward(), check_rewrite=True)
    check_computation(nnet, _rows_computation())


def _expect(nnet, comp, command_index, text, **opts):
    with pytest.raises(ComputationCheckError) as e:
        check_computation(nnet, comp, **opts)
    assert e.value.command_index == command_index, str(e.value)
    assert text in str(e.value)
    if command_index is not None:
        assert str(e.value).startswith(f"command c{command_index}: ")
        assert e.value.command_text.startswith(f"c{command_index}: ")
    return str(e.value)


def test_read_before_write(nnet):
    # without the zeroing, the affine backprop adds to garbage
    msg = _expect(nnet, _without(_forward_backward(), 11), 11, "is read before it is written")
    assert "affine.Backprop(NULL, m1, [], m5" in msg  # the printed command


def test_write_to_unallocated(nnet):
    _expect(nnet, _without(_forward_backward(), 2), 2, "never initialized")
    comp = _forward_backward()
    moved = comp.commands[:2] + comp.commands[3:4] + comp.commands[2:3] + comp.commands[4:]
    _expect(nnet, replace(comp, commands=moved), 2, "accessed before it is initialized")


def test_use_after_free_and_double_free(nnet):
    comp = _forward_backward()
    freed_early = comp.commands[:3] + [Command(T.DEALLOC_MATRIX, arg1=1)] + comp.commands[3:14] \
        + comp.commands[15:]
    _expect(nnet, replace(comp, commands=freed_early), 13, "accessed after it is destroyed")
    double = replace(comp, commands=comp.commands + [Command(T.DEALLOC_MATRIX, arg1=2)])
    _expect(nnet, double, 18, "destroyed twice")
    _expect(nnet, _without(comp, 17), 8, "never deallocated")
    check_computation(nnet, _without(comp, 17), check_deallocation=False)


def test_bad_indexes(nnet):
    comp = _forward_backward()
    _expect(nnet, _with(comp, 3, arg4=99), 3, "out of range")
    _expect(nnet, _with(comp, 3, arg1=7), 3, "component index 7 out of range")
    _expect(nnet, _with(comp, 3, arg2=3), 3, "precomputed-indexes index out of range")
    _expect(nnet, _with(comp, 0, arg2=2), 0, "invalid network node")
    _expect(nnet, _with(comp, 2, arg1=0), 2, "out of range or not a whole matrix")
    rows = _rows_computation()
    rows.indexes[0] = np.array([5, 6, 3], dtype=np.int32)
    _expect(nnet, rows, 2, "out of range [-1, 6)")
    rows = _rows_computation()
    rows.indexes_multi[0] = np.array([[4, 0], [5, 3], [-1, -1]], dtype=np.int32)
    _expect(nnet, rows, 5, "row index out of range")
    rows = _rows_computation()
    rows.indexes_ranges[0] = np.array([[0, 2], [2, 2], [3, 6]], dtype=np.int32)
    _expect(nnet, rows, 8, "row range 2,2 is invalid")
    _expect(nnet, _with(_rows_computation(), 2, arg3=5), 2, "index out of range")


def test_dim_mismatch(nnet):
    comp = _forward_backward()
    # relu output into the 4-column input-derivative matrix
    _expect(nnet, _with(comp, 5, arg4=6), 5, "output dim 4 != component output-dim 3")
    _expect(nnet, _with(comp, 12, arg6=4), 12, "input derivative has dim 3")
    rows = _rows_computation()
    _expect(nnet, _with(rows, 3, arg2=1), 3, "dimension mismatch")
    sub = rows.new_submatrix(1, 0, 2, 0, 4)
    _expect(nnet, _with(rows, 2, arg1=sub), 2, "indexes[0] has 3 entries for 2 rows")


def test_memo_and_backprop_rules(nnet):
    comp = _forward_backward()
    _expect(nnet, _with(comp, 9, arg7=4), 9, "memo index 4 not produced")
    _expect(nnet, _with(comp, 9, arg6=0), 9, "Backprop has no effect")
    _expect(nnet, _with(comp, 12, arg3=0), 12, "needs the input value")


def test_rewrite_check(nnet):
    comp = _forward_backward()
    # write the affine output again after the relu read it: fine for an
    # optimized computation, not before optimization
    extra = comp.commands[:6] + [Command(T.SET_CONST, alpha=1.0, arg1=2)] + comp.commands[6:]
    late = replace(comp, commands=extra)
    check_computation(nnet, late)
    _expect(nnet, late, 6, "modified after being read", check_rewrite=True)


def test_unused_and_undefined_parts_of_a_matrix(nnet):
    rows = _rows_computation()
    # without c3 the bottom half of m2 is read (by the CopyRowsMulti, now c4)
    # but never written
    _expect(nnet, _without(rows, 3), 4, "m2(3:5,:) is read before it is written")
    # without c3 and its readers it is never used at all
    rows.indexes_multi[0] = np.array([[4, 0], [4, 2], [-1, -1]], dtype=np.int32)
    msg = _expect(nnet, _without(rows, 3, 7), None, "m2(3:5,:) is never used")
    assert msg.startswith("variable 2 = ")
    check_computation(nnet, _without(rows, 3, 7), check_unused_variables=False)


def test_looped_computation(nnet):
    """A looped computation: label, body, swaps, goto (checked as Kaldi does)."""
    comp = NnetComputation()
    s1 = comp.new_matrix(5, 4)
    s2 = comp.new_matrix(5, 3)
    s3 = comp.new_matrix(5, 3)
    C = Command
    comp.commands = [
        C(T.ALLOC_MATRIX, arg1=s3),
        C(T.SET_CONST, alpha=0.0, arg1=s3),
        C(T.NO_OPERATION_LABEL),
        C(T.ACCEPT_INPUT, arg1=s1, arg2=0),
        C(T.ALLOC_MATRIX, arg1=s2),
        C(T.PROPAGATE, arg1=0, arg2=0, arg3=s1, arg4=s2, arg5=0, arg6=0),
        C(T.MATRIX_ADD, arg1=s2, arg2=s3),
        C(T.PROVIDE_OUTPUT, arg1=s2, arg2=5),
        C(T.DEALLOC_MATRIX, arg1=s1),
        C(T.SWAP_MATRIX, arg1=s3, arg2=s2),
        C(T.GOTO_LABEL, arg1=2),
    ]
    check_computation(nnet, comp)
    _expect(nnet, _with(comp, 10, arg1=3), 10, "GotoLabel has an invalid destination")


def test_checker_options_class(nnet):
    checker = ComputationChecker(CheckComputationOptions(check_rewrite=True), nnet,
                                 _forward_backward())
    checker.check()
    assert checker.analyzer.variables.num_variables == 6


# -- speed -------------------------------------------------------------------------------

def _big_computation(num_blocks: int) -> NnetComputation:
    """~9 commands and ~6 submatrices per block over a few shared matrices."""
    comp = NnetComputation()
    rows = 4 * num_blocks
    s_in = comp.new_matrix(rows, 4)
    s_a = comp.new_matrix(rows, 3)
    s_r = comp.new_matrix(rows, 3)
    comp.commands = [Command(T.ACCEPT_INPUT, arg1=s_in, arg2=0),
                     Command(T.ALLOC_MATRIX, arg1=s_a), Command(T.ALLOC_MATRIX, arg1=s_r)]
    idx = comp.add_indexes([3, 2, 1, 0])
    for b in range(num_blocks):
        i = comp.new_submatrix(s_in, 4 * b, 4, 0, 4)
        a = comp.new_submatrix(s_a, 4 * b, 4, 0, 3)
        a1 = comp.new_submatrix(s_a, 4 * b, 2, 0, 3)
        r = comp.new_submatrix(s_r, 4 * b, 4, 0, 3)
        r1 = comp.new_submatrix(s_r, 4 * b, 4, 0, 2)
        r2 = comp.new_submatrix(s_r, 4 * b, 4, 2, 1)
        comp.commands += [Command(T.PROPAGATE, arg1=0, arg2=0, arg3=i, arg4=a, arg5=0, arg6=0),
                          Command(T.MATRIX_ADD, alpha=0.5, arg1=a1, arg2=comp.new_submatrix(
                              s_a, 4 * b + 2, 2, 0, 3)),
                          Command(T.COPY_ROWS, arg1=r, arg2=a, arg3=idx),
                          Command(T.MATRIX_COPY, alpha=2.0, arg1=r1, arg2=r1),
                          Command(T.MATRIX_COPY, alpha=3.0, arg1=r2, arg2=r2)]
    comp.commands += [Command(T.PROVIDE_OUTPUT, arg1=s_r, arg2=5),
                      Command(T.DEALLOC_MATRIX, arg1=s_in), Command(T.DEALLOC_MATRIX, arg1=s_a)]
    return comp


def test_speed_large_computation(nnet):
    """~5,000 commands, ~6,000 submatrices: analysed and checked (timing printed,
    not asserted)."""
    comp = _big_computation(1000)
    assert len(comp.commands) > 5000 and len(comp.submatrices) > 3000
    t0 = time.perf_counter()
    a = Analyzer(nnet, comp)
    t1 = time.perf_counter()
    check_computation(nnet, comp)
    t2 = time.perf_counter()
    print(f"analyze {1000 * (t1 - t0):.1f} ms, check {1000 * (t2 - t1):.1f} ms for "
          f"{len(comp.commands)} commands, {len(comp.submatrices)} submatrices, "
          f"{a.variables.num_variables} variables")
    # matrix m2 is split into 2 row bands per block
    assert a.variables.num_variables == 1000 + 2000 + 2000


# -- real computations ------------------------------------------------------------------

def _random_dirs() -> list[Path]:
    from tests.helpers import reference_dir

    return sorted(p for p in (reference_dir() / "random").iterdir() if (p / "final.raw").is_file())


def _stats(d: Path) -> dict[str, str]:
    out = {}
    for line in (d / "stats.txt").read_text().splitlines():
        fields = line.split("#")[0].split()
        if len(fields) >= 2:
            out[fields[0]] = fields[1]
    return out


def _parse_kaldi(d: Path, nnet):
    """Kaldi's optimized computation of a random net, or None if Kaldi's
    printer truncated something the parser needs."""
    parser = pytest.importorskip("pynnet3.testing.kaldi_print_parser")
    stats = _stats(d)
    try:
        comp = parser.parse_kaldi_computation_file(
            str(d / "computation.txt"), nnet,
            need_model_derivative=stats["need_model_derivative"] == "1",
            store_component_stats=stats["store_component_stats"] == "1")
    except parser.UnparseableComputation:
        return None
    return _drop_truncated_debug_info(comp)


def _drop_truncated_debug_info(comp: NnetComputation) -> NnetComputation:
    # Where Kaldi's printer cut a debug-info line the parser leaves that
    # matrix's cindexes empty; the debug-info check would (rightly) reject
    # that, but it is an artefact of printing, not of Kaldi's computation.
    if any(len(d.cindexes) != m.num_rows
           for d, m in zip(comp.matrix_debug_info[1:], comp.matrices[1:])):
        return replace(comp, matrix_debug_info=[])
    return comp


def test_checker_accepts_kaldi_optimized_computations():
    """Kaldi's own optimized computations are well formed: the checker must
    accept every one the parser can read (a test against false positives)."""
    from pynnet3.compile.model_io import read_nnet

    accepted = 0
    with_backprop = 0
    for d in _random_dirs():
        nnet = read_nnet(str(d / "final.raw"))
        comp = _parse_kaldi(d, nnet)
        if comp is None:
            continue
        check_computation(nnet, comp)
        accepted += 1
        with_backprop += any(c.command_type in (T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE)
                             for c in comp.commands)
    print(f"{accepted} Kaldi computations accepted, {with_backprop} with backprop")
    assert accepted >= enough(40, 12) and with_backprop >= enough(15, 4)


def _naive_attributes(nnet, comp, variables):
    """Kaldi's ComputeCommandAttributes written out command type by command
    type (independently of the ARG_ROLES table the module is driven by)."""
    from pynnet3.nnet.components.base import Prop
    from pynnet3.optimize.accesses import CommandAttributes

    out = []
    for c in comp.commands:
        a = CommandAttributes()
        rec = lambda s, t: variables.record_access_for_submatrix(s, t, a)  # noqa: E731
        t = c.command_type
        props = nnet.get_component(c.arg1).properties() if t in (
            T.PROPAGATE, T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE) else 0
        multi = (sorted(set(comp.indexes_multi[c.arg2][:, 0].tolist()) - {-1}) if t in (
            T.ADD_ROWS_MULTI, T.COPY_ROWS_MULTI, T.ADD_TO_ROWS_MULTI, T.COPY_TO_ROWS_MULTI) else [])
        if t is T.SET_CONST or t is T.DECOMPRESS_MATRIX or t is T.ACCEPT_INPUT:
            rec(c.arg1, W)
        elif t is T.PROPAGATE:
            rec(c.arg3, R)
            rec(c.arg4, RW if props & Prop.PROPAGATE_ADDS else W)
        elif t in (T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE):
            for s in (c.arg3, c.arg4, c.arg5):
                rec(s, R)
            rec(c.arg6, RW if props & Prop.BACKPROP_ADDS else W)
            a.has_side_effects = t is T.BACKPROP and bool(props & Prop.UPDATABLE)
        elif t is T.MATRIX_COPY:
            rec(c.arg1, W)
            rec(c.arg2, R)
        elif t in (T.MATRIX_ADD, T.ADD_ROWS, T.ADD_ROW_RANGES):
            rec(c.arg1, RW)
            rec(c.arg2, R)
        elif t is T.COPY_ROWS:
            rec(c.arg1, RW if (comp.indexes[c.arg3] == -1).any() else W)
            rec(c.arg2, R)
        elif t in (T.ADD_ROWS_MULTI, T.COPY_ROWS_MULTI):
            rec(c.arg1, RW if t is T.ADD_ROWS_MULTI else W)
            for s in multi:
                rec(s, R)
        elif t in (T.ADD_TO_ROWS_MULTI, T.COPY_TO_ROWS_MULTI):
            rec(c.arg1, R)
            for s in multi:
                rec(s, RW)
        elif t is T.COMPRESS_MATRIX:
            rec(c.arg1, RW)
        elif t is T.PROVIDE_OUTPUT:
            rec(c.arg1, R)
        for name in ("variables_read", "variables_written", "submatrices_read",
                     "submatrices_written", "matrices_read", "matrices_written"):
            setattr(a, name, sorted(set(getattr(a, name))))
        out.append(a)
    return out


def test_analyzer_matches_naive_kaldi_algorithm():
    """On real computations (Kaldi's optimized ones and pynnet3's unoptimized
    ones), the vectorised analysis equals a plain per-command,
    per-variable transcription of Kaldi's algorithm."""
    from pynnet3.compile.model_io import read_nnet

    compiler = pytest.importorskip("pynnet3.compile.compiler")
    from pynnet3.compile.request_io import read_request_file

    compared = 0
    for d in _random_dirs()[::3]:
        nnet = read_nnet(str(d / "final.raw"))
        comps = [compiler.compile_computation(read_request_file(str(d / "request.kaldi-text")),
                                              nnet)]
        kaldi = _parse_kaldi(d, nnet)
        if kaldi is not None:
            comps.append(kaldi)
        for comp in comps:
            a = Analyzer(nnet, comp)
            naive = _naive_attributes(nnet, comp, a.variables)
            assert a.command_attributes == naive
            accesses: list[list] = [[] for _ in range(a.variables.num_variables)]
            for c, attr in enumerate(naive):
                for v in sorted(set(attr.variables_read) | set(attr.variables_written)):
                    r, w = v in attr.variables_read, v in attr.variables_written
                    accesses[v].append((c, RW if r and w else (R if r else W)))
            assert [a.variable_accesses[v] for v in range(len(accesses))] == accesses
            for m in range(1, len(comp.matrices)):
                expected = []
                for c, attr in enumerate(naive):
                    r, w = m in attr.matrices_read, m in attr.matrices_written
                    if r or w:
                        expected.append((c, RW if r and w else (R if r else W)))
                assert a.matrix_accesses[m].accesses == expected
            compared += 1
    assert compared >= enough(25, 7)


def test_checker_catches_deletions_in_kaldi_computations():
    """Deleting any allocation, deallocation or input command of a real
    computation is always caught, and names a command."""
    from pynnet3.compile.model_io import read_nnet

    tried = 0
    for d in _random_dirs()[:12]:
        nnet = read_nnet(str(d / "final.raw"))
        comp = _parse_kaldi(d, nnet)
        if comp is None:
            continue
        for i, c in enumerate(comp.commands):
            if c.command_type in (T.ALLOC_MATRIX, T.DEALLOC_MATRIX, T.ACCEPT_INPUT):
                with pytest.raises(ComputationCheckError) as e:
                    check_computation(nnet, _without(comp, i))
                assert e.value.command_index is not None
                tried += 1
    assert tried >= 50


def test_vosk_kaldi_computations(vosk_mdl):
    """The vosk TDNN-F computations Kaldi printed (optimized, with and
    without derivatives) pass the checker."""
    parser = pytest.importorskip("pynnet3.testing.kaldi_print_parser")
    from pynnet3.compile.am_nnet import read_mdl
    from tests.helpers import reference_dir

    nnet = read_mdl(str(vosk_mdl))[1].nnet
    checked = 0
    for f in sorted((reference_dir() / "compile").glob("computation.*.txt")):
        try:
            comp = parser.parse_kaldi_computation_file(str(f), nnet,
                                                       need_model_derivative="deriv1" in f.name)
        except parser.UnparseableComputation:
            continue
        check_computation(nnet, _drop_truncated_debug_info(comp))
        checked += 1
    assert checked >= 2


def test_checker_accepts_unoptimized_compilations():
    """pynnet3's own unoptimized compilations of the random nets' requests
    pass the checker, including the before-optimization rewrite check."""
    compiler = pytest.importorskip("pynnet3.compile.compiler")
    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    checked = 0
    for d in _random_dirs():
        if int(_stats(d).get("num_commands", "0")) > 400:
            continue  # keep the test quick; the big ones are in the slow test
        nnet = read_nnet(str(d / "final.raw"))
        comp = compiler.compile_computation(read_request_file(str(d / "request.kaldi-text")), nnet)
        check_computation(nnet, comp, check_rewrite=True)
        checked += 1
    assert checked >= enough(30, 8)


@pytest.mark.slow
def test_checker_accepts_all_unoptimized_compilations():
    compiler = pytest.importorskip("pynnet3.compile.compiler")
    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    for d in _random_dirs():
        nnet = read_nnet(str(d / "final.raw"))
        comp = compiler.compile_computation(read_request_file(str(d / "request.kaldi-text")), nnet)
        check_computation(nnet, comp, check_rewrite=True)


def test_executor_write_sets_are_the_analysis_write_sets():
    """The executor's debug write sets and the analysis both come from the
    command specs: on Kaldi's optimized computations (every command type the
    parser reads) they name the same submatrices."""
    from types import SimpleNamespace

    from pynnet3.compute.computer import NnetComputer
    from pynnet3.compile.model_io import read_nnet

    compared = 0
    for d in _random_dirs()[:30]:
        nnet = read_nnet(str(d / "final.raw"))
        comp = _parse_kaldi(d, nnet)
        if comp is None:
            continue
        attributes = Analyzer(nnet, comp).command_attributes
        computer = SimpleNamespace(computation=comp)
        for c, command in enumerate(comp.commands):
            assert NnetComputer._written_submatrices(computer, command) == \
                attributes[c].submatrices_written, (d.name, c, command)
        compared += 1
    assert compared >= enough(20, 6)
