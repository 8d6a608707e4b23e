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
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.computation import (Command, CommandType, CompressedMatrixType,
                                         MatrixDebugInfo, print_integer_vector)
from pynnet3.testing.kaldi_print_parser import (UnparseableComputation, parse_indexes,
                                                parse_integer_vector, parse_kaldi_computation,
                                                parse_kaldi_computation_file)
from pynnet3.compute import NnetComputeOptions, NnetComputer
from pynnet3.compute.backend import Backend, get_backend
from pynnet3.errors import FormatError, PynnetError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from tests.compute import computer_checks as checks
from tests.compute.computer_checks import (F32, MAX_CODE, T, kaldi_compress, load_case,
                                           new_computation, random_dirs, rel_err, small_nnet)
from tests.helpers import reference_dir


# ---------------------------------------------------------------------------
# row and matrix commands


def test_row_commands_match_loops() -> None:
    checks.check_row_commands_match_loops()


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
        scale = F32(F32(range_) / F32(MAX_CODE[kind]))
        x[1, :2] = [F32(2.5) * scale, F32(-3.5) * scale]
    backend = get_backend("reference")
    out = np.empty_like(x)
    backend.decompress(backend.compress(x, int(kind), range_, True), out)
    expected = np.array([[kaldi_compress(float(v), kind, range_) for v in row] for row in x], F32)
    np.testing.assert_array_equal(out, expected)
    if range_ > 0:  # lossy but bounded inside the range
        inside = (x >= (0 if kind.name.startswith("U") else -range_)) & (x <= range_)
        step = range_ / MAX_CODE[kind]
        assert np.all(np.abs(out - x)[inside] <= 0.5 * step * (1 + 1e-5))


def test_compression_range0_needs_uint8() -> None:
    with pytest.raises(PynnetError, match="uint8"):
        get_backend("reference").compress(np.ones((2, 2), F32), int(CompressedMatrixType.INT8),
                                          0.0, True)


def test_compress_commands_in_computer() -> None:
    checks.check_compress_commands_in_computer()


# ---------------------------------------------------------------------------
# components, memos, stats, update targets


@pytest.mark.parametrize("updatable,backprop_type,need_model_derivative,expect",
                         [(True, T.BACKPROP, True, "update"),
                          (True, T.BACKPROP, False, None),
                          (True, T.BACKPROP_NO_MODEL_UPDATE, True, None),
                          (False, T.BACKPROP, False, "stats")])
def test_memo_stats_and_update_target(updatable: bool, backprop_type: CommandType,
                                      need_model_derivative: bool, expect: str | None) -> None:
    checks.check_memo_stats_and_update_target(updatable, backprop_type, need_model_derivative,
                                              expect)


def test_store_stats_after_in_place_propagate_gets_empty_input() -> None:
    checks.check_store_stats_after_in_place_propagate_gets_empty_input()


# ---------------------------------------------------------------------------
# control flow and errors


def test_goto_loop_over_chunks() -> None:
    checks.check_goto_loop_over_chunks()


def test_errors() -> None:
    checks.check_errors()


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


# Kaldi's own derivative here is float noise: each statistics-pooling window
# has one frame, so the stddev is sqrt(rounding error of E[x^2]-E[x]^2) and its
# derivative amplifies the exact order of float operations.
_NOISY_DERIVS = {"045"}


@pytest.mark.parametrize("seed", random_dirs() or ["000"])
def test_kaldi_random_computation(seed: str) -> None:
    import kaldiio

    d, nnet, comp = load_case(seed)
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
        assert rel_err(computer.get_output("output"), io["out_output"]) < 1e-4
        if "outderiv_output" not in io:
            return
        computer.accept_input("output", io["outderiv_output"])
        computer.run()
    except NotImplementedError as e:
        pytest.skip(f"component math not implemented yet: {str(e).rsplit(': ', 1)[-1]}")
    checked = 0
    for key, value in io.items():
        if key.startswith("inderiv_"):
            err = rel_err(computer.get_input_deriv(key[len("inderiv_"):]), value)
            if seed in _NOISY_DERIVS:
                assert err < 0.05
            else:
                assert err < 1e-3, f"{key}: relative error {err}"
            checked += 1
    # (with no input derivative requested, the backward pass only produces
    # model gradients, which the training tests check)
    assert checked == sum(k.startswith("inderiv_") for k in io)


def test_memos_paired_in_kaldi_computation() -> None:
    _, nnet, comp = load_case("019")   # RestrictedAttention (uses a memo), with backprop
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
        load_case("000")


# ---------------------------------------------------------------------------
# the vosk TDNN-F model: Kaldi's compiled computation vs nnet3-compute


def test_vosk_computation_matches_nnet3_compute(vosk_mdl: Path) -> None:
    checks.check_vosk_computation_matches_nnet3_compute(vosk_mdl)


def test_matrix_debug_info_kept_by_parser() -> None:
    _, nnet, comp = load_case("005")
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


@pytest.mark.parametrize("backend_name", ["reference", "cpu"])
def test_accept_input_take_keeps_an_owned_array_and_copies_otherwise(backend_name: str) -> None:
    """take=True (the trainer's output derivative) swaps the caller's array in
    where it can serve as the matrix; the default still copies, and views,
    other dtypes and read-only arrays are copied either way."""
    def run(matrix: np.ndarray, take: bool) -> tuple[np.ndarray, NnetComputer]:
        comp, s = new_computation([(2, 4), (2, 4)])
        comp.commands += [Command(T.ACCEPT_INPUT, arg1=s[1], arg2=0),
                          Command(T.ALLOC_MATRIX, arg1=s[2]),
                          Command(T.MATRIX_COPY, arg1=s[2], arg2=s[1]),
                          Command(T.MATRIX_ADD, arg1=s[2], arg2=s[1]),
                          Command(T.PROVIDE_OUTPUT, arg1=s[2], arg2=3)]
        computer = NnetComputer(NnetComputeOptions(), comp, small_nnet(),
                                backend=get_backend(backend_name))
        computer.accept_input("input", matrix, take=take)
        computer.run()
        return computer._matrices[1], computer

    x = np.arange(8, dtype=F32).reshape(2, 4).copy()
    held, computer = run(x, take=True)
    assert held is x
    assert np.array_equal(computer.get_output("output"), 2 * np.arange(8, dtype=F32).reshape(2, 4))
    held, _ = run(x, take=False)
    assert held is not x and np.array_equal(held, x)
    wide = np.arange(16, dtype=F32).reshape(2, 8)
    for other in (x.astype(np.float64), wide[:, :4], np.asfortranarray(x),
                  np.arange(8, dtype=F32).reshape(2, 4)):      # (a view: not owned)
        held, computer = run(other, take=True)
        assert held is not other and held.flags.c_contiguous and held.dtype == F32
        assert np.array_equal(computer.get_output("output"), 2 * np.asarray(other, F32))
    frozen = x.copy()
    frozen.flags.writeable = False
    held, _ = run(frozen, take=True)
    assert held is not frozen
