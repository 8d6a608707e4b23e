"""Checks of NnetComputer run on whichever backend NnetComputer picks by
default: test_computer.py runs them on the reference backend,
test_backends.py on the cpu backend and cuda/test_cuda_backend.py on the
device (each makes its backend the default), so that every backend passes
the same executor checks.  Also the helpers those modules share: small
hand-made computations, Kaldi's compression formula, Kaldi's random test
cases."""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3.compile.computation import (Command, CommandType, CompressedMatrixType,
                                         NnetComputation)
from pynnet3.compute import NnetComputeOptions, NnetComputer
from pynnet3.errors import PynnetError
from pynnet3.nnet.components.base import Component, Prop
from pynnet3.nnet.nnet import Nnet
from pynnet3.testing.kaldi_print_parser import (UnparseableComputation,
                                                parse_kaldi_computation_file)
from tests.helpers import SHARED_REFERENCE, reference_dir


T = CommandType

F32 = np.float32

def small_nnet() -> Nnet:
    """input(0) -> fake_input(1) -> fake(2) -> output(3); component 0 = 'fake'."""
    nnet = Nnet()
    nnet.read_config("input-node name=input dim=4\n"
                     "component name=fake type=NoOpComponent dim=4\n"
                     "component-node name=fake component=fake input=input\n"
                     "output-node name=output input=fake\n", "test")
    return nnet

def new_computation(shapes: list[tuple[int, int]]) -> tuple[NnetComputation, list[int]]:
    comp = NnetComputation()
    subs = [0] + [comp.new_matrix(r, c) for r, c in shapes]
    return comp, subs

def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(F32)

def check_row_commands_match_loops() -> None:
    rng = np.random.default_rng(1)
    x = rand(rng, 6, 4)
    comp, s = new_computation([(6, 4), (5, 4), (5, 4), (6, 4), (3, 4), (4, 4), (4, 2), (6, 4)])
    # submatrices: rows 1..4 of m8 (for indexes-multi), cols 1..2 of m6, m6 rows 0..2
    m8_rows = comp.new_submatrix(s[8], 1, 4, 0, 4)
    m6_cols = comp.new_submatrix(s[6], 0, 4, 1, 2)
    m6_top = comp.new_submatrix(s[6], 0, 3, 0, 4)
    idx_copy = comp.add_indexes([5, -1, 0, 0, 3])
    idx_add = comp.add_indexes([-1, 2, 4, 1, -1])
    multi_src = comp.add_indexes_multi([(s[1], 0), (s[2], 4), (-1, -1), (m8_rows, 3), (s[1], 5),
                                        (s[2], 0)])
    multi_dst = comp.add_indexes_multi([(s[5], 2), (-1, -1), (m8_rows, 0), (s[5], 0)])
    ranges = comp.add_indexes_ranges([(0, 2), (-1, -1), (3, 6), (5, 6)])
    c = comp.commands
    c.append(Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0))
    for k in range(2, 9):
        c.append(Command(T.ALLOC_MATRIX, arg1=s[k]))
    c += [
        Command(T.SET_CONST, alpha=7.0, arg1=s[2]),
        Command(T.COPY_ROWS, alpha=0.5, arg1=s[2], arg2=s[1], arg3=idx_copy),
        Command(T.SET_CONST, alpha=1.0, arg1=s[3]),
        Command(T.ADD_ROWS, alpha=2.0, arg1=s[3], arg2=s[1], arg3=idx_add),
        Command(T.SET_CONST, alpha=3.0, arg1=s[4]),
        Command(T.SET_CONST, alpha=5.0, arg1=s[8]),
        Command(T.COPY_ROWS_MULTI, alpha=1.0, arg1=s[4], arg2=multi_src),
        Command(T.SET_CONST, alpha=0.0, arg1=s[5]),
        Command(T.ADD_ROWS_MULTI, alpha=-1.5, arg1=s[4], arg2=multi_src),
        Command(T.SET_CONST, alpha=-2.0, arg1=s[6]),
        Command(T.COPY_TO_ROWS_MULTI, alpha=1.0, arg1=s[6], arg2=multi_dst),
        Command(T.ADD_TO_ROWS_MULTI, alpha=0.25, arg1=s[6], arg2=multi_dst),
        Command(T.ADD_ROW_RANGES, alpha=0.5, arg1=s[6], arg2=s[1], arg3=ranges),
        Command(T.MATRIX_COPY, alpha=2.0, arg1=s[7], arg2=m6_cols),
        Command(T.MATRIX_ADD, alpha=-1.0, arg1=m6_top, arg2=m6_top),
        Command(T.MATRIX_ADD, alpha=1.0, arg1=m6_cols, arg2=s[7]),
        Command(T.COPY_ROWS, alpha=0.0, arg1=s[3], arg2=s[1], arg3=idx_copy),  # Kaldi: no-op
        Command(T.PROVIDE_OUTPUT, arg1=s[1], arg2=3),
    ]
    computer = NnetComputer(NnetComputeOptions(), comp, small_nnet())
    computer.accept_input("input", x)
    computer.run()
    m = {k: computer.get_matrix(k) for k in range(1, 9)}

    # per-row references (Kaldi semantics: CopyRows zeroes -1 rows, AddRows skips them)
    m2 = np.full((5, 4), 7.0, F32)
    for r, i in enumerate([5, -1, 0, 0, 3]):
        m2[r] = 0.5 * x[i] if i >= 0 else 0.0
    m3 = np.ones((5, 4), F32)
    for r, i in enumerate([-1, 2, 4, 1, -1]):
        if i >= 0:
            m3[r] += 2.0 * x[i]
    m8 = np.full((6, 4), 5.0, F32)
    srcs = {s[1]: x, s[2]: m2, m8_rows: m8[1:5]}
    pairs = [(s[1], 0), (s[2], 4), (-1, -1), (m8_rows, 3), (s[1], 5), (s[2], 0)]
    m4 = np.full((6, 4), 3.0, F32)
    for r, (sub, row) in enumerate(pairs):
        m4[r] = srcs[sub][row] if sub >= 0 else 0.0     # NULL: row set to zero
    for r, (sub, row) in enumerate(pairs):
        if sub >= 0:
            m4[r] += F32(-1.5) * srcs[sub][row]
    m5 = np.zeros((3, 4), F32)
    m6 = np.full((4, 4), -2.0, F32)
    dst_pairs = [(s[5], 2), (-1, -1), (m8_rows, 0), (s[5], 0)]
    for r, (sub, row) in enumerate(dst_pairs):
        if sub == s[5]:
            m5[row] = m6[r]
        elif sub == m8_rows:
            m8[1 + row] = m6[r]
    for r, (sub, row) in enumerate(dst_pairs):
        if sub == s[5]:
            m5[row] += F32(0.25) * m6[r]
        elif sub == m8_rows:
            m8[1 + row] += F32(0.25) * m6[r]
    for r, (b, e) in enumerate([(0, 2), (-1, -1), (3, 6), (5, 6)]):
        if e > b:
            m6[r] += F32(0.5) * x[b:e].astype(np.float64).sum(axis=0).astype(F32)
    m7 = 2.0 * m6[:, 1:3]
    m6[0:3] -= m6[0:3]
    m6[:, 1:3] += m7
    np.testing.assert_allclose(m[2], m2, rtol=1e-6)
    np.testing.assert_allclose(m[3], m3, rtol=1e-6)
    np.testing.assert_allclose(m[4], m4, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m[5], m5, rtol=1e-6)
    np.testing.assert_allclose(m[6], m6, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m[7], m7, rtol=1e-6)
    np.testing.assert_allclose(m[8], m8, rtol=1e-6)

def kaldi_compress(x: float, kind: CompressedMatrixType, range_: float) -> float:
    """Element formula of Kaldi's _cuda_compress_bounds_check / _cuda_uncompress."""
    lo, hi = {CompressedMatrixType.INT8: (-128, 127), CompressedMatrixType.UINT8: (0, 255),
              CompressedMatrixType.INT16: (-32768, 32767),
              CompressedMatrixType.UINT16: (0, 65535)}[kind]
    scale = F32(F32(range_) / F32(hi))
    if scale == 0:
        return 1.0 if x > 0 else 0.0
    inv = F32(1.0 / float(scale))
    q = round(float(F32(F32(x) * inv)))      # Python rounds half to even, as __float2int_rn
    q = min(max(q, lo), hi)
    return float(F32(F32(q) * scale))

MAX_CODE = {CompressedMatrixType.INT8: 127, CompressedMatrixType.UINT8: 255,
             CompressedMatrixType.INT16: 32767, CompressedMatrixType.UINT16: 65535}

def check_compress_commands_in_computer() -> None:
    x = np.array([[0.3, -1.2, 5.0, 0.0]], F32)
    for enabled in (True, False):
        comp, s = new_computation([(1, 4)])
        comp.commands += [Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0),
                          Command(T.COMPRESS_MATRIX, alpha=2.0, arg1=s[1],
                                  arg2=int(CompressedMatrixType.INT8), arg3=1),
                          Command(T.DECOMPRESS_MATRIX, arg1=s[1]),
                          Command(T.PROVIDE_OUTPUT, arg1=s[1], arg2=3)]
        computer = NnetComputer(NnetComputeOptions(compress_matrices=enabled), comp, small_nnet())
        computer.accept_input("input", x)
        computer.run()
        out = computer.get_output("output")
        if enabled:
            expected = [kaldi_compress(float(v), CompressedMatrixType.INT8, 2.0) for v in x[0]]
            np.testing.assert_array_equal(out[0], np.array(expected, F32))
            assert out[0, 2] == pytest.approx(2.0)   # clamped at the range
        else:
            np.testing.assert_array_equal(out, x)    # Kaldi's CPU build: no-op

class FakeComponent(Component):
    """Records what the computer hands it."""

    type_name = "FakeComponent"

    def __init__(self, updatable: bool) -> None:
        self.updatable = updatable
        self.calls: list[tuple[str, Any]] = []

    def input_dim(self) -> int:
        return 4

    def output_dim(self) -> int:
        return 4

    def properties(self) -> int:
        p = Prop.SIMPLE | Prop.USES_MEMO | Prop.STORES_STATS | Prop.BACKPROP_NEEDS_INPUT
        return p | (Prop.UPDATABLE if self.updatable else 0)

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = 2 * in_value
        memo = {"rows": in_value.shape[0]}
        self.calls.append(("propagate", memo))
        return memo

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray, memo: Any) -> None:
        self.calls.append(("store_stats", (in_value.shape, memo)))

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        self.calls.append(("backprop", (debug_info, memo, to_update, out_value.shape)))
        if in_deriv is not None:
            in_deriv[...] = 2 * out_deriv

def memo_computation(backprop_type: CommandType, need_model_derivative: bool,
                      in_place: bool = False) -> NnetComputation:
    comp, s = new_computation([(3, 4), (3, 4), (3, 4), (3, 4)])
    comp.need_model_derivative = need_model_derivative
    out = s[1] if in_place else s[2]
    comp.commands += [
        Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0),
        Command(T.ALLOC_MATRIX, arg1=s[2]),
        Command(T.PROPAGATE, arg1=0, arg2=0, arg3=s[1], arg4=out, arg5=1, arg6=1),
        Command(T.PROVIDE_OUTPUT, arg1=out, arg2=3),
        Command(T.NO_OPERATION_MARKER),
        Command(T.ACCEPT_INPUT, arg1=s[3], arg2=3),
        Command(T.ALLOC_MATRIX, arg1=s[4]),
        Command(backprop_type, arg1=0, arg2=0, arg3=s[1], arg4=0, arg5=s[3], arg6=s[4], arg7=1),
        Command(T.PROVIDE_OUTPUT, arg1=s[4], arg2=0),
    ]
    return comp

def check_memo_stats_and_update_target(updatable: bool, backprop_type: CommandType,
                                      need_model_derivative: bool, expect: str | None) -> None:
    nnet = small_nnet()
    nnet.components[0] = FakeComponent(updatable)
    upd, stats = copy.deepcopy(nnet), copy.deepcopy(nnet)
    computer = NnetComputer(NnetComputeOptions(),
                            memo_computation(backprop_type, need_model_derivative), nnet,
                            nnet_to_update=upd, nnet_to_store_stats=stats)
    x = np.arange(12, dtype=F32).reshape(3, 4)
    computer.accept_input("input", x)
    computer.run()
    np.testing.assert_array_equal(computer.get_output("output"), 2 * x)
    computer.accept_output_deriv("output", np.ones((3, 4), F32))
    computer.run()
    np.testing.assert_array_equal(computer.get_input_deriv("input"), np.full((3, 4), 2, F32))
    kinds = [k for k, _ in nnet.components[0].calls]
    assert kinds == ["propagate", "backprop"]
    memo = nnet.components[0].calls[0][1]
    debug_info, got_memo, to_update, out_shape = nnet.components[0].calls[1][1]
    assert got_memo is memo and debug_info == "fake" and out_shape == (0, 0)
    assert stats.components[0].calls == [("store_stats", ((3, 4), memo))]
    want = {"update": upd.components[0], "stats": stats.components[0], None: None}[expect]
    assert to_update is want

def check_store_stats_after_in_place_propagate_gets_empty_input() -> None:
    nnet = small_nnet()
    nnet.components[0] = FakeComponent(False)
    upd = copy.deepcopy(nnet)
    computer = NnetComputer(NnetComputeOptions(), memo_computation(T.BACKPROP, False, True),
                            nnet, nnet_to_update=upd)
    computer.accept_input("input", np.ones((3, 4), F32))
    computer.run()
    assert upd.components[0].calls[0][1][0] == (0, 0)

def check_goto_loop_over_chunks() -> None:
    comp, s = new_computation([(2, 4), (2, 4)])
    comp.commands += [
        Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0),      # c0
        Command(T.ALLOC_MATRIX, arg1=s[2]),              # c1
        Command(T.SET_CONST, alpha=0.0, arg1=s[2]),      # c2
        Command(T.NO_OPERATION_LABEL),                   # c3
        Command(T.MATRIX_ADD, arg1=s[2], arg2=s[1]),     # c4
        Command(T.DEALLOC_MATRIX, arg1=s[1]),            # c5
        Command(T.PROVIDE_OUTPUT, arg1=s[2], arg2=3),    # c6
        Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0),      # c7
        Command(T.GOTO_LABEL, arg1=3),                   # c8
    ]
    computer = NnetComputer(NnetComputeOptions(), comp, small_nnet())
    total = np.zeros((2, 4), F32)
    for chunk in range(4):
        x = np.full((2, 4), chunk + 1, F32)
        total += x
        computer.accept_input("input", x)
        computer.run()
        np.testing.assert_array_equal(computer.get_output("output"), total)
    assert computer.get_matrix(1) is None   # deallocated by c5

def check_errors() -> None:
    comp, s = new_computation([(2, 4), (2, 4)])
    comp.commands += [Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0),
                      Command(T.MATRIX_COPY, arg1=s[2], arg2=s[1]),   # m2 never allocated
                      Command(T.PROVIDE_OUTPUT, arg1=s[2], arg2=3)]
    nnet = small_nnet()
    computer = NnetComputer(NnetComputeOptions(), comp, nnet)
    with pytest.raises(PynnetError, match="did not get input for node 'input'"):
        computer.run()
    computer = NnetComputer(NnetComputeOptions(), comp, nnet)
    with pytest.raises(PynnetError, match="num-rows mismatch"):
        computer.accept_input("input", np.zeros((3, 4), F32))
    with pytest.raises(PynnetError, match="not expected at this point"):
        computer.accept_input("output", np.zeros((2, 4), F32))
    computer.accept_input("input", np.zeros((2, 4), F32))
    with pytest.raises(PynnetError, match=r"Error running command c1: m2 = m1.*not allocated"):
        computer.run()

def random_dirs() -> list[str]:
    root = SHARED_REFERENCE / "random"
    return sorted(p.name for p in root.iterdir() if p.name.isdigit()) if root.is_dir() else []

def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-20)) if b.size else 0.0

def load_case(seed: str) -> tuple[Path, Nnet, NnetComputation]:
    from pynnet3.compile.model_io import read_nnet

    d = reference_dir() / "random" / seed
    request = (d / "request.txt").read_text()
    nnet = read_nnet(str(d / "final.raw"))
    try:
        comp = parse_kaldi_computation_file(
            str(d / "computation.txt"), nnet,
            need_model_derivative="need-model-derivative: true" in request,
            store_component_stats="store-component-stats: true" in request)
    except UnparseableComputation as e:
        pytest.skip(f"Kaldi's printout cannot be parsed: {e}")
    return d, nnet, comp

def check_vosk_computation_matches_nnet3_compute(vosk_mdl: Path) -> None:
    import kaldiio

    from pynnet3.compile.model_io import read_nnet
    from pynnet3.nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode

    ref = reference_dir()
    nnet = read_nnet(str(vosk_mdl))
    # what nnet3-compute does before compiling
    set_batchnorm_test_mode(True, nnet)
    set_dropout_test_mode(True, nnet)
    comp = parse_kaldi_computation_file(
        str(ref / "compile" / "computation.every_t0-149.seq1.deriv0.shortcut1.txt"), nnet)
    assert any(p.data is not None for p in comp.component_precomputed_indexes[1:])
    feats = dict(kaldiio.load_ark(str(ref / "vosk_ko" / "feats.ark"))).get("utt2_300")
    if feats is None:
        pytest.skip("vosk_ko utterance utt2_300 (300 frames) is not in the curated subset")
    ivector = dict(kaldiio.load_ark(str(ref / "vosk_ko" / "ivectors.ark")))["utt2_300"]
    expected = dict(kaldiio.load_ark(str(ref / "vosk_ko" / "out_b_fss1.ark")))["utt2_300"][:150]
    # the request: input t = -34..183 (edges padded with the first frame, as
    # nnet3-compute does), ivector at t = 0, output t = 0..149
    computer = NnetComputer(NnetComputeOptions(), comp, nnet)
    computer.accept_input("input", feats[np.clip(np.arange(-34, 184), 0, feats.shape[0] - 1)])
    computer.accept_input("ivector", ivector.reshape(1, -1))
    computer.run()
    assert rel_err(computer.get_output("output"), expected) < 1e-4
    assert math.isfinite(float(computer.get_output("output").sum()))
