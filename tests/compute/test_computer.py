"""Tests of the executor (NnetComputer), the reference backend and the parser
of Kaldi's printed computations.

* Every row/matrix command on a hand-made computation, against per-row
  Python loops written from Kaldi's documented semantics (CuMatrix::CopyRows,
  AddRows, CopyRows/AddRows/CopyToRows/AddToRows with pointer arrays,
  AddRowRanges; the executor's alpha handling).
* Compression, against an element-by-element formula of Kaldi's CUDA kernels.
* I/O segments, memos, StoreStats, to_update, goto loops, errors, --debug.
* Real Kaldi: each optimised computation Kaldi printed for its random test
  networks (reference/random/NNN/computation.txt) is parsed, re-printed
  (must equal Kaldi's text) and run on the inputs in io.ark; the output and
  the input derivatives must match what Kaldi's NnetComputer produced.
* The vosk TDNN-F model: Kaldi's own compiled computation for 150 frames,
  run through our executor, against nnet3-compute's output.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3.compile.computation import (Command, CommandType, CompressedMatrixType,
                                         MatrixDebugInfo, NnetComputation, print_integer_vector)
from pynnet3.testing.kaldi_print_parser import (UnparseableComputation, parse_indexes,
                                                parse_integer_vector, parse_kaldi_computation,
                                                parse_kaldi_computation_file)
from pynnet3.compute import NnetComputeOptions, NnetComputer
from pynnet3.compute.backend import Backend, get_backend
from pynnet3.errors import FormatError, PynnetError
from pynnet3.nnet.components.base import Component, Prop
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from tests.conftest import reference_dir

T = CommandType
F32 = np.float32


# ---------------------------------------------------------------------------
# helpers


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


# ---------------------------------------------------------------------------
# row and matrix commands


def test_row_commands_match_loops() -> None:
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


def test_reference_backend_conforms_to_protocol() -> None:
    backend = get_backend("reference")
    assert isinstance(backend, Backend)
    assert get_backend(backend) is backend
    with pytest.raises(PynnetError, match="unknown compute backend"):
        get_backend("no-such-backend")


def test_add_to_rows_multi_with_repeated_destination() -> None:
    # Kaldi forbids it; the reference still adds every row (np.add.at).
    backend = get_backend("reference")
    dst = np.zeros((2, 3), F32)
    src = np.ones((3, 3), F32)
    backend.add_to_rows_multi(src, [dst], np.array([[0, 1], [0, 1], [-1, -1]], np.int32), 2.0)
    np.testing.assert_array_equal(dst, [[0, 0, 0], [4, 4, 4]])


# ---------------------------------------------------------------------------
# compression


def _kaldi_compress(x: float, kind: CompressedMatrixType, range_: float) -> float:
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


_MAX_CODE = {CompressedMatrixType.INT8: 127, CompressedMatrixType.UINT8: 255,
             CompressedMatrixType.INT16: 32767, CompressedMatrixType.UINT16: 65535}


@pytest.mark.parametrize("kind,range_", [(CompressedMatrixType.INT8, 2.0),
                                         (CompressedMatrixType.UINT8, 1.0),
                                         (CompressedMatrixType.INT16, 10.0),
                                         (CompressedMatrixType.UINT16, 3.5),
                                         (CompressedMatrixType.UINT8, 0.0)])
def test_compression_matches_kaldi_kernel(kind: CompressedMatrixType, range_: float) -> None:
    rng = np.random.default_rng(int(kind) + 7)
    x = (rng.standard_normal((7, 5)) * 3).astype(F32)
    x[0, :3] = [0.0, -0.0, 1e9]
    if range_ > 0:  # exact ties of the rounding
        scale = F32(F32(range_) / F32(_MAX_CODE[kind]))
        x[1, :2] = [F32(2.5) * scale, F32(-3.5) * scale]
    backend = get_backend("reference")
    out = np.empty_like(x)
    backend.decompress(backend.compress(x, int(kind), range_, True), out)
    expected = np.array([[_kaldi_compress(float(v), kind, range_) for v in row] for row in x], F32)
    np.testing.assert_array_equal(out, expected)
    if range_ > 0:  # lossy but bounded inside the range
        inside = (x >= (0 if kind.name.startswith("U") else -range_)) & (x <= range_)
        step = range_ / _MAX_CODE[kind]
        assert np.all(np.abs(out - x)[inside] <= 0.5 * step * (1 + 1e-5))


def test_compression_range0_needs_uint8() -> None:
    with pytest.raises(PynnetError, match="uint8"):
        get_backend("reference").compress(np.ones((2, 2), F32), int(CompressedMatrixType.INT8),
                                          0.0, True)


def test_compress_commands_in_computer() -> None:
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
            expected = [_kaldi_compress(float(v), CompressedMatrixType.INT8, 2.0) for v in x[0]]
            np.testing.assert_array_equal(out[0], np.array(expected, F32))
            assert out[0, 2] == pytest.approx(2.0)   # clamped at the range
        else:
            np.testing.assert_array_equal(out, x)    # Kaldi's CPU build: no-op


# ---------------------------------------------------------------------------
# components, memos, stats, update targets


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


def _memo_computation(backprop_type: CommandType, need_model_derivative: bool,
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


@pytest.mark.parametrize("updatable,backprop_type,need_model_derivative,expect",
                         [(True, T.BACKPROP, True, "update"),
                          (True, T.BACKPROP, False, None),
                          (True, T.BACKPROP_NO_MODEL_UPDATE, True, None),
                          (False, T.BACKPROP, False, "stats")])
def test_memo_stats_and_update_target(updatable: bool, backprop_type: CommandType,
                                      need_model_derivative: bool, expect: str | None) -> None:
    nnet = small_nnet()
    nnet.components[0] = FakeComponent(updatable)
    upd, stats = copy.deepcopy(nnet), copy.deepcopy(nnet)
    computer = NnetComputer(NnetComputeOptions(),
                            _memo_computation(backprop_type, need_model_derivative), nnet,
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


def test_store_stats_after_in_place_propagate_gets_empty_input() -> None:
    nnet = small_nnet()
    nnet.components[0] = FakeComponent(False)
    upd = copy.deepcopy(nnet)
    computer = NnetComputer(NnetComputeOptions(), _memo_computation(T.BACKPROP, False, True),
                            nnet, nnet_to_update=upd)
    computer.accept_input("input", np.ones((3, 4), F32))
    computer.run()
    assert upd.components[0].calls[0][1][0] == (0, 0)


# ---------------------------------------------------------------------------
# control flow and errors


def test_goto_loop_over_chunks() -> None:
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


def test_errors() -> None:
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


def test_poison_and_debug_output(capsys: pytest.CaptureFixture[str]) -> None:
    comp, s = new_computation([(2, 4), (2, 4)])
    comp.commands += [Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0),
                      Command(T.ALLOC_MATRIX, arg1=s[2]),
                      Command(T.MATRIX_ADD, arg1=s[2], arg2=s[1]),    # reads undefined m2
                      Command(T.PROVIDE_OUTPUT, arg1=s[2], arg2=3)]
    computer = NnetComputer(NnetComputeOptions(debug=True, poison_undefined=True), comp,
                            small_nnet())
    computer.accept_input("input", np.ones((2, 4), F32))
    computer.run()
    assert np.isnan(computer.get_output("output")).all()
    err = capsys.readouterr().err
    assert "matrix m1(2, 4), m2(2, 4)" in err
    assert "c2: m2 += m1\t|\tm2: nan->nan \t|\t time:" in err


# ---------------------------------------------------------------------------
# the printed-computation parser


def test_parse_integer_vector_round_trip() -> None:
    assert parse_integer_vector("[0:3, 7x3, -1, 5]") == [0, 1, 2, 3, 7, 7, 7, -1, 5]
    assert parse_integer_vector("[ ]") == []
    assert parse_integer_vector("[-3:-1, 4, 5]") == [-3, -2, -1, 4, 5]
    rng = np.random.default_rng(3)
    for _ in range(50):
        v = np.repeat(rng.integers(-1, 6, 12), rng.integers(1, 4, 12))
        v[rng.random(v.shape[0]) < 0.3] = -1
        assert parse_integer_vector(print_integer_vector(v)) == v.tolist()


def test_parse_indexes() -> None:
    assert parse_indexes("(1,2:4), (2,-1), (0,3,1), (5,-2:-1,2)") == [
        Index(1, 2), Index(1, 3), Index(1, 4), Index(2, -1), Index(0, 3, 1),
        Index(5, -2, 2), Index(5, -1, 2)]


def test_parser_errors() -> None:
    nnet = small_nnet()
    with pytest.raises(FormatError, match="'matrix' line"):
        parse_kaldi_computation("c0: [no-op]\n", nnet)
    with pytest.raises(FormatError, match="unrecognised command"):
        parse_kaldi_computation("matrix m1(2, 4)\n# begin forward commands\nc0: m1.Frobnicate()\n",
                                nnet)
    with pytest.raises(FormatError, match="not in the network"):
        parse_kaldi_computation("matrix m1(2, 4)\nc0: bogus.Propagate(NULL, m1, &m1)\n", nnet)
    with pytest.raises(UnparseableComputation, match="c1 was truncated"):
        parse_kaldi_computation("matrix m1(2, 4)\nc0: [no-op]\nc1: m1.CopyRows(1, m1[0, 1 "
                                "... 1])\n", nnet)


# ---------------------------------------------------------------------------
# Kaldi's random test networks


def _random_dirs() -> list[str]:
    root = Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "random"
    return sorted(p.name for p in root.iterdir() if p.name.isdigit()) if root.is_dir() else []


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-20)) if b.size else 0.0


def _load_case(seed: str) -> tuple[Path, Nnet, NnetComputation]:
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


# Kaldi's own derivative here is float noise: each statistics-pooling window
# has one frame, so the stddev is sqrt(rounding error of E[x^2]-E[x]^2) and its
# derivative amplifies the exact order of float operations.
_NOISY_DERIVS = {"045"}


@pytest.mark.parametrize("seed", _random_dirs() or ["000"])
def test_kaldi_random_computation(seed: str) -> None:
    import kaldiio

    d, nnet, comp = _load_case(seed)
    text = (d / "computation.txt").read_text().splitlines()
    printed = comp.print(nnet.component_names, nnet.node_names).splitlines()
    assert len(printed) == len(text)
    for ours, kaldi in zip(printed, text):
        if " ... " not in kaldi:       # lines Kaldi truncated are not reproduced
            assert ours == kaldi
    io = dict(kaldiio.load_ark(str(d / "io.ark")))
    computer = NnetComputer(NnetComputeOptions(), comp, nnet,
                            nnet_to_update=copy.deepcopy(nnet))
    for key, value in io.items():
        if key.startswith("in_"):
            computer.accept_input(key[3:], value)
    try:
        computer.run()
        assert _rel_err(computer.get_output("output"), io["out_output"]) < 1e-4
        if "outderiv_output" not in io:
            return
        computer.accept_input("output", io["outderiv_output"])
        computer.run()
    except NotImplementedError as e:
        pytest.skip(f"component math not implemented yet: {str(e).rsplit(': ', 1)[-1]}")
    checked = 0
    for key, value in io.items():
        if key.startswith("inderiv_"):
            err = _rel_err(computer.get_input_deriv(key[len("inderiv_"):]), value)
            if seed in _NOISY_DERIVS:
                assert err < 0.05
            else:
                assert err < 1e-3, f"{key}: relative error {err}"
            checked += 1
    # (with no input derivative requested, the backward pass only produces
    # model gradients, which the training tests check)
    assert checked == sum(k.startswith("inderiv_") for k in io)


def test_memos_paired_in_kaldi_computation() -> None:
    _, nnet, comp = _load_case("019")   # RestrictedAttention (uses a memo), with backprop
    props = [c for c in comp.commands if c.command_type is T.PROPAGATE
             and nnet.component_names[c.arg1] == "attention"]
    backs = [c for c in comp.commands if c.command_type is T.BACKPROP
             and nnet.component_names[c.arg1] == "attention"]
    assert len(props) == len(backs) == 1
    assert props[0].arg5 == backs[0].arg7 == 1
    assert props[0].arg2 == backs[0].arg2 > 0
    assert comp.component_precomputed_indexes[props[0].arg2].data is not None


def test_truncated_debug_info_is_reported() -> None:
    reference_dir()  # skips when the reference outputs are absent
    with pytest.raises(pytest.skip.Exception, match="attention needs the indexes of m3"):
        _load_case("000")


# ---------------------------------------------------------------------------
# the vosk TDNN-F model: Kaldi's compiled computation vs nnet3-compute


def test_vosk_computation_matches_nnet3_compute(vosk_mdl: Path) -> None:
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
    feats = dict(kaldiio.load_ark(str(ref / "vosk_ko" / "feats.ark")))["utt2_300"]
    ivector = dict(kaldiio.load_ark(str(ref / "vosk_ko" / "ivectors.ark")))["utt2_300"]
    expected = dict(kaldiio.load_ark(str(ref / "vosk_ko" / "out_b_fss1.ark")))["utt2_300"][:150]
    # the request: input t = -34..183 (edges padded with the first frame, as
    # nnet3-compute does), ivector at t = 0, output t = 0..149
    computer = NnetComputer(NnetComputeOptions(), comp, nnet)
    computer.accept_input("input", feats[np.clip(np.arange(-34, 184), 0, feats.shape[0] - 1)])
    computer.accept_input("ivector", ivector.reshape(1, -1))
    computer.run()
    assert _rel_err(computer.get_output("output"), expected) < 1e-4
    assert math.isfinite(float(computer.get_output("output").sum()))


def test_matrix_debug_info_kept_by_parser() -> None:
    _, nnet, comp = _load_case("005")
    info = comp.matrix_debug_info[1]
    assert isinstance(info, MatrixDebugInfo) and not info.is_deriv
    assert info.cindexes[:3] == [(0, Index(1, 7)), (0, Index(1, 8)), (0, Index(1, 9))]


def gradient_nnet(nnet: Nnet) -> Nnet:
    ans = copy.deepcopy(nnet)
    for _, component in ans.updatable_components():
        component.set_as_gradient()
    return ans


def test_vosk_backward_compression_is_lossless_here(vosk_mdl: Path) -> None:
    """Kaldi's optimiser compresses ReLU outputs to their sign (uint8, range 0)
    when only the ReLU's backprop reads them again, which loses nothing: the
    model gradient must be the same with compression emulated or skipped."""
    from pynnet3.nnet.components.base import set_random_seed
    from pynnet3.compile.model_io import nnet_bytes, read_nnet
    from pynnet3.nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode

    ref = reference_dir()
    nnet = read_nnet(str(vosk_mdl))
    set_batchnorm_test_mode(True, nnet)
    set_dropout_test_mode(True, nnet)
    comp = parse_kaldi_computation_file(
        str(ref / "compile" / "computation.every_t0-149.seq1.deriv1.shortcut1.txt"), nnet,
        need_model_derivative=True)
    assert sum(c.command_type is T.COMPRESS_MATRIX for c in comp.commands) > 5
    rng = np.random.default_rng(0)
    x = rng.standard_normal((218, 40)).astype(F32)
    ivector = rng.standard_normal((1, 100)).astype(F32)
    out_deriv = rng.standard_normal((150, 2616)).astype(F32)
    results = []
    for compress in (True, False):
        set_random_seed(5)
        upd = gradient_nnet(nnet)   # plain gradients: no natural-gradient cost
        computer = NnetComputer(NnetComputeOptions(compress_matrices=compress), comp, nnet,
                                nnet_to_update=upd)
        computer.accept_input("input", x)
        computer.accept_input("ivector", ivector)
        computer.run()
        computer.accept_input("output", out_deriv)
        try:
            computer.run()
        except NotImplementedError as e:
            pytest.skip(f"component math not implemented yet: {str(e).rsplit(': ', 1)[-1]}")
        results.append(nnet_bytes(upd, binary=True))
    assert results[0] == results[1]
    assert results[0] != nnet_bytes(gradient_nnet(nnet), binary=True)   # gradients were added
