"""Looped ('online') computations: Kaldi's ComputationLoopedOptimizer,
FixGotoLabel and nnet-compile-looped.  A looped computation run chunk by
chunk must give the outputs of the whole-utterance computation on the same
frames (tiny TDNN, Kaldi's random networks, the real vosk TDNN-F model)."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.compiler import Compiler, CompilerOptions
from pynnet3.compile.computation import Command, CommandType, NnetComputation
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.compute import NnetComputeOptions, NnetComputer
from pynnet3.errors import PynnetError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import copy_computation
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.compile_looped import (compile_looped, create_looped_computation_request,
                                             extrapolate_computation_request, get_chunk_size,
                                             modify_nnet_ivector_period)
from pynnet3.optimize.looped import ComputationLoopedOptimizer
from pynnet3.optimize.renumber import fix_goto_label
from pynnet3.optimize.options import OptimizeOptions
from tests.helpers import curated
from tests.optimize.helpers import _TDNN, _compile, _nnet, _random_case, _request, _types

T = CommandType
F32 = np.float32
C = Command


def test_fix_goto_label() -> None:
    comp = NnetComputation()
    comp.commands = [C(T.NO_OPERATION), C(T.NO_OPERATION_LABEL), C(T.NO_OPERATION),
                     C(T.GOTO_LABEL, 1.0, 0), C(T.PROVIDE_OUTPUT, arg1=1, arg2=0)]
    fix_goto_label(comp)
    assert comp.commands[3].arg1 == 1
    fix_goto_label(comp)
    assert comp.commands[3].arg1 == 1
    plain = [C(T.NO_OPERATION), C(T.PROVIDE_OUTPUT, arg1=1, arg2=0)]
    comp.commands = list(plain)
    fix_goto_label(comp)
    assert comp.commands == plain
    comp.commands = [C(T.NO_OPERATION), C(T.GOTO_LABEL, 1.0, 0)]
    with pytest.raises(PynnetError, match="Label not found"):
        fix_goto_label(comp)


def test_matrix_swap_order() -> None:
    order = ComputationLoopedOptimizer.get_matrix_swap_order
    assert order([1, 2], [3, 4]) == [(1, 3), (2, 4)]
    # m2 receives m3 but must first hand its own state to m1
    swaps = order([2, 1], [3, 2])
    assert swaps == [(1, 2), (2, 3)]
    state = {1: "a", 2: "b", 3: "c"}
    for m1, m2 in swaps:
        state[m1], state[m2] = state[m2], state[m1]
    assert (state[1], state[2]) == ("b", "c")


def test_create_looped_computation_request() -> None:
    nnet = _nnet("input-node name=input dim=3\ninput-node name=ivector dim=2\n"
                 "component name=c type=NoOpComponent dim=5\n"
                 "component-node name=c component=c input=Append(input, "
                 "ReplaceIndex(ivector, t, 0))\n"
                 "output-node name=output input=c\n")
    r1, r2, r3 = create_looped_computation_request(nnet, 6, 3, 6, 4, 2, 2)
    assert [i.t for i in r1.inputs[0].indexes] == list(range(-4, 8)) * 2
    assert [i.n for i in r1.inputs[0].indexes] == [0] * 12 + [1] * 12
    assert [i.t for i in r1.outputs[0].indexes] == [0, 3] * 2
    assert [i.t for i in r2.inputs[0].indexes] == list(range(8, 14)) * 2
    assert [i.t for i in r3.outputs[0].indexes] == [12, 15] * 2
    # each chunk asks only for i-vector times no earlier chunk asked for
    assert [i.t for i in r1.inputs[1].indexes] == [-6, 0, 6] * 2
    assert [i.t for i in r2.inputs[1].indexes] == [12] * 2
    r4 = extrapolate_computation_request(r2, r3)
    assert r4 is not None and [i.t for i in r4.outputs[0].indexes] == [18, 21] * 2
    assert extrapolate_computation_request(r1, r2) is None    # chunk 1 is special
    assert get_chunk_size(nnet, 3, 7) == 9
    with pytest.raises(PynnetError, match="multiple"):
        create_looped_computation_request(nnet, 7, 3, 6, 4, 2, 1)
    modify_nnet_ivector_period(6, nnet)
    assert any("input=Append(input, Round(ivector, 6))" in line
               for line in nnet.get_config_lines())


def _check_looped_against_whole(nnet: Nnet, chunk: int, num_chunks: int = 5) -> NnetComputation:
    """compile_looped on a simple network, run chunk by chunk, against the
    whole-utterance computation on the same frames."""
    from pynnet3.compile.graph.context import compute_simple_nnet_context
    from pynnet3.optimize.compile_looped import create_looped_computation_request_simple

    r1, r2, r3 = create_looped_computation_request_simple(nnet, chunk, 1, chunk, 0, 0, 1)
    comp = compile_looped(nnet, OptimizeOptions(), r1, r2, r3)
    assert comp.commands[-1].command_type is T.GOTO_LABEL
    label = _types(comp).index(T.NO_OPERATION_LABEL)
    assert comp.commands[-1].arg1 == label
    check_computation(nnet, comp)
    left, right = compute_simple_nnet_context(nnet)
    t0, t1 = -left, num_chunks * chunk + right
    rng = np.random.default_rng(5)
    feats = rng.standard_normal((t1 - t0, nnet.input_dim("input"))).astype(F32)
    requests = [r1, r2, r3]
    while len(requests) < num_chunks:
        requests.append(extrapolate_computation_request(requests[-2], requests[-1]))
    computer = NnetComputer(NnetComputeOptions(poison_undefined=True), comp, copy.deepcopy(nnet))
    outputs = []
    for r in requests:
        computer.accept_input("input", feats[np.array([i.t for i in r.inputs[0].indexes]) - t0])
        computer.run()
        outputs.append(np.array(computer.get_output("output")))
    whole = _request([("input", t0, t1, False)], [("output", 0, num_chunks * chunk, False)])
    full = NnetComputer(NnetComputeOptions(), _compile(nnet, whole), copy.deepcopy(nnet))
    full.accept_input("input", feats)
    full.run()
    # float32, and the chunks' products have other shapes than the whole
    # utterance's (other BLAS blocking): deep random networks (e.g. 014) differ
    # by up to ~3e-5 relative; a wrong carried-over activation differs by O(1).
    np.testing.assert_allclose(np.concatenate(outputs), full.get_output("output"),
                               rtol=1e-4, atol=1e-5)
    return comp


def test_compile_looped_tdnn() -> None:
    comp = _check_looped_against_whole(_nnet(_TDNN), chunk=4)
    # the loop carries state: matrices are swapped before jumping back
    assert T.SWAP_MATRIX in _types(comp)


def test_optimize_looped_computation_gives_up_without_repeat() -> None:
    from pynnet3.optimize.compile_looped import create_looped_computation_request_simple
    from pynnet3.optimize.looped import optimize_looped_computation

    nnet = _nnet(_TDNN)
    r1, r2, r3 = create_looped_computation_request_simple(nnet, 4, 1, 4, 0, 0, 1)
    # three chunks are too few for the state to repeat (compile_looped starts at 5)
    comp = Compiler([r1, r2, r3], nnet).create_computation(CompilerOptions())
    before = copy_computation(comp)
    assert not optimize_looped_computation(nnet, comp)
    assert comp.commands == before.commands
    with pytest.raises(PynnetError, match="at least 4 segments"):
        optimize_looped_computation(nnet, Compiler([r1, r2], nnet).create_computation())


# ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("seed", curated("random", ["003", "008", "014", "024", "042"]))
def test_compile_looped_kaldi_random_networks(seed: str) -> None:
    """Forward LSTMs, TDNNs, attention: chunked = whole utterance."""
    nnet, _, _ = _random_case(seed)
    _check_looped_against_whole(nnet, chunk=6, num_chunks=6)


@pytest.mark.slow
def test_compile_looped_vosk(vosk_mdl: Path) -> None:
    """The real TDNN-F model as online decoding compiles it (i-vector period
    = chunk size, frame subsampling 3): chunked = whole utterance."""
    from pynnet3.compile.graph.context import compute_simple_nnet_context
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode
    from pynnet3.optimize.compile_looped import create_looped_computation_request_simple

    def load() -> Nnet:
        n = read_nnet(str(vosk_mdl))
        set_batchnorm_test_mode(True, n)
        set_dropout_test_mode(True, n)
        return n

    nnet, original = load(), load()
    chunk = get_chunk_size(nnet, 3, 50)
    modify_nnet_ivector_period(chunk, nnet)
    r1, r2, r3 = create_looped_computation_request_simple(nnet, chunk, 3, chunk, 0, 0, 1)
    comp = compile_looped(nnet, OptimizeOptions(), r1, r2, r3)
    check_computation(nnet, comp)
    left, right = compute_simple_nnet_context(nnet)
    num_chunks = 3
    t0, t1 = -left, num_chunks * chunk + right
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((t1 - t0, 40)).astype(F32)
    ivector = rng.standard_normal((1, 100)).astype(F32)
    computer = NnetComputer(NnetComputeOptions(), comp, nnet)
    outputs = []
    for r in (r1, r2, r3):
        computer.accept_input("input", feats[np.array([i.t for i in r.inputs[0].indexes]) - t0])
        if len(r.inputs) > 1:
            computer.accept_input("ivector", np.repeat(ivector, len(r.inputs[1].indexes), 0))
        computer.run()
        outputs.append(np.array(computer.get_output("output")))
    whole = ComputationRequest(
        [IoSpecification.from_range("input", t0, t1), IoSpecification("ivector", [Index(0, 0, 0)])],
        [IoSpecification("output", [Index(0, t, 0) for t in range(0, num_chunks * chunk, 3)])])
    full = NnetComputer(NnetComputeOptions(), _compile(original, whole), original)
    full.accept_input("input", feats)
    full.accept_input("ivector", ivector)
    full.run()
    np.testing.assert_allclose(np.concatenate(outputs), full.get_output("output"),
                               rtol=1e-4, atol=1e-5)
