"""Helpers shared by the optimizer tests: small networks and hand-built
computations, Kaldi's random test networks (reference/random) and running a
computation to compare it with another."""
from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any, Callable

import numpy as np
import pytest

from pynnet3.compile.compiler import Compiler, CompilerOptions
from pynnet3.compile.computation import Command, CommandType, NnetComputation
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.compute import NnetComputeOptions, NnetComputer
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import pipeline
from pynnet3.optimize.check import check_computation
from tests.helpers import REFERENCE, reference_dir


T = CommandType
C = Command


# Components: 0 relu (propagates in place), 1 aff (updatable), 2 noop (in
# place both ways).  Nodes: 0 input, 2 relu, 4 aff, 6 noop, 7 output.
_CONFIG = """input-node name=input dim=4
component name=relu type=RectifiedLinearComponent dim=4
component-node name=relu component=relu input=input
component name=aff type=AffineComponent input-dim=4 output-dim=4
component-node name=aff component=aff input=relu
component name=noop type=NoOpComponent dim=4
component-node name=noop component=noop input=aff
output-node name=output input=noop
"""


IN, OUT = 0, 7


RELU, AFF, NOOP = 0, 1, 2


def _new(shapes: list[tuple[int, int]]) -> tuple[NnetComputation, list[int]]:
    comp = NnetComputation()
    return comp, [0] + [comp.new_matrix(r, c) for r, c in shapes]


def _types(comp: NnetComputation) -> list[CommandType]:
    return [c.command_type for c in comp.commands]


def _alloc(s: int) -> list[Command]:
    return [C(T.ALLOC_MATRIX, arg1=s), C(T.SET_CONST, 0.0, arg1=s)]


def _prop(component: int, s_in: int, s_out: int) -> Command:
    return C(T.PROPAGATE, arg1=component, arg2=0, arg3=s_in, arg4=s_out, arg5=0, arg6=0)


F32 = np.float32


def _nnet(config: str) -> Nnet:
    n = Nnet()
    n.read_config(config, "<test>")
    return n


_IO_NNET = ("input-node name=input dim=3\n"
            "output-node name=output input=input\n"
            "output-node name=aux input=input\n")


def _grad_copy(nnet: Nnet) -> Nnet:
    """A copy of ``nnet`` set up as Kaldi's nnet-optimize-test does (ScaleNnet
    0, SetNnetAsGradient): backprop accumulates plain gradients in it."""
    g = copy.deepcopy(nnet)
    for c in range(g.num_components()):
        comp = g.get_component(c)
        if comp.properties() & Prop.UPDATABLE:
            comp.scale(0.0)
            comp.set_actual_learning_rate(1.0)
            comp.set_as_gradient()
    return g


def _run(nnet: Nnet, request: ComputationRequest, comp: NnetComputation,
         inputs: dict[str, np.ndarray], out_derivs: dict[str, np.ndarray]
         ) -> tuple[dict[str, np.ndarray], Nnet | None]:
    """Forward (and backward) pass; newly allocated matrices are NaN so that
    reading something never written shows."""
    work = copy.deepcopy(nnet)
    grads = _grad_copy(nnet) if request.need_model_derivative else None
    computer = NnetComputer(NnetComputeOptions(poison_undefined=True), comp, work,
                            nnet_to_update=grads, nnet_to_store_stats=work)
    for name, x in inputs.items():
        computer.accept_input(name, x)
    computer.run()
    res = {"out_" + o.name: np.array(computer.get_output(o.name)) for o in request.outputs}
    if out_derivs:
        for name, x in out_derivs.items():
            computer.accept_input(name, x)
        computer.run()
        for io in request.inputs:
            if io.has_deriv:
                res["inderiv_" + io.name] = np.array(computer.get_output(io.name))
    return res, grads


def _random_io(nnet: Nnet, request: ComputationRequest, seed: int = 0
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    inputs = {io.name: rng.standard_normal((len(io.indexes), nnet.input_dim(io.name))).astype(F32)
              for io in request.inputs}
    derivs = {io.name: rng.standard_normal((len(io.indexes),
                                            nnet.output_dim(io.name))).astype(F32)
              for io in request.outputs if io.has_deriv}
    return inputs, derivs


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    if not b.size:
        return 0.0
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-20))


def _gradients(n: Nnet) -> dict[str, np.ndarray]:
    out = {}
    for c in range(n.num_components()):
        comp = n.get_component(c)
        if comp.properties() & Prop.UPDATABLE and hasattr(comp, "vectorize"):
            out[n.component_names[c]] = np.array(comp.vectorize())
    return out


def _compare_runs(nnet: Nnet, request: ComputationRequest, reference: NnetComputation,
             optimized: NnetComputation, tol: float = 1e-5) -> dict[str, float]:
    """Relative errors of optimized vs reference (outputs, input derivatives,
    parameter gradients); asserts they are within ``tol``."""
    inputs, derivs = _random_io(nnet, request)
    r1, g1 = _run(nnet, request, reference, inputs, derivs)
    r2, g2 = _run(nnet, request, optimized, inputs, derivs)
    errs = {k: _rel(r2[k], r1[k]) for k in r1}
    if g1 is not None:
        p1, p2 = _gradients(g1), _gradients(g2)
        errs.update({"grad_" + k: _rel(p2[k], p1[k]) for k in p1})
    bad = {k: v for k, v in errs.items() if not v <= tol}
    assert not bad, f"optimized and unoptimized computations differ: {bad}"
    return errs


def _request(inputs: list[tuple[str, int, int, bool]], outputs: list[tuple[str, int, int, bool]],
             need_model_derivative: bool = False) -> ComputationRequest:
    return ComputationRequest([IoSpecification.from_range(*i) for i in inputs],
                              [IoSpecification.from_range(*o) for o in outputs],
                              need_model_derivative=need_model_derivative)


def _compile(nnet: Nnet, request: ComputationRequest) -> NnetComputation:
    return Compiler([request], nnet).create_computation(CompilerOptions())


def _consolidate_io(nnet: Nnet, comp: NnetComputation) -> None:
    """Inputs first, outputs last in each segment (the pipeline always does
    this last; passes that insert commands at the start need it to run)."""
    from pynnet3.optimize.misc import consolidate_io_operations

    consolidate_io_operations(nnet, comp)


def _run_io(nnet: Nnet, comp: NnetComputation, x: np.ndarray, outputs: list[str]
            ) -> dict[str, np.ndarray]:
    computer = NnetComputer(NnetComputeOptions(poison_undefined=True), comp, nnet)
    computer.accept_input("input", x)
    computer.run()
    return {name: np.array(computer.get_output(name)) for name in outputs}


def _hand_computation(shapes: list[tuple[int, int]]) -> tuple[NnetComputation, list[int]]:
    comp = NnetComputation()
    return comp, [0] + [comp.new_matrix(r, c) for r, c in shapes]


def _alloc_zero(s: int) -> list[Command]:
    return [C(T.ALLOC_MATRIX, arg1=s), C(T.SET_CONST, 0.0, s)]


def _copy_then_relu(nnet: Nnet) -> NnetComputation:
    """input m1; m2 = m1; m3 = relu(m2); output m3 (as compiled, unoptimized)."""
    comp, s = _new([(3, 4), (3, 4), (3, 4)])
    comp.commands = [C(T.ACCEPT_INPUT, arg1=s[1], arg2=IN),
                     *_alloc(s[2]), C(T.MATRIX_COPY, arg1=s[2], arg2=s[1]),
                     *_alloc(s[3]), _prop(RELU, s[2], s[3]),
                     C(T.DEALLOC_MATRIX, arg1=s[1]), C(T.DEALLOC_MATRIX, arg1=s[2]),
                     C(T.PROVIDE_OUTPUT, arg1=s[3], arg2=OUT)]
    check_computation(nnet, comp, check_rewrite=True)
    return comp


def _random_seeds() -> list[str]:
    root = REFERENCE / "random"
    return sorted(p.name for p in root.iterdir() if p.name.isdigit()) if root.is_dir() else []


@functools.lru_cache(maxsize=None)
def _case(seed: str) -> tuple[Nnet, ComputationRequest, NnetComputation]:
    from pynnet3.compile.compiler import Compiler, CompilerOptions
    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    d = reference_dir() / "random" / seed
    nnet = read_nnet(str(d / "final.raw"))
    request = read_request_file(str(d / "request.kaldi-text"))
    return nnet, request, Compiler([request], nnet).create_computation(CompilerOptions())


def _with_all_derivatives(request: ComputationRequest) -> ComputationRequest:
    """The request with model and input derivatives (Kaldi's test draws these
    at random; asking for all exercises every backward pass)."""
    return dataclasses.replace(
        request, need_model_derivative=True,
        inputs=[IoSpecification(io.name, io.indexes, True) for io in request.inputs],
        outputs=[IoSpecification(io.name, io.indexes, True) for io in request.outputs])


@functools.lru_cache(maxsize=None)
def _random_case(seed: str) -> tuple[Nnet, ComputationRequest, NnetComputation]:
    from pynnet3.compile.request_io import parse_printed_request
    from pynnet3.compile.model_io import read_nnet

    d = reference_dir() / "random" / seed
    nnet = read_nnet(str(d / "final.raw"))
    request = parse_printed_request((d / "request.txt").read_text(), str(d))
    return nnet, request, _compile(nnet, request)


@functools.lru_cache(maxsize=None)
def _one_sequence_case(seed: str) -> tuple[Nnet, ComputationRequest, NnetComputation]:
    """The seed's request cut down to its first sequence: with one n, every
    matrix's rows are sorted by t (multi-sequence inputs and outputs are
    n-major, which Kaldi's limiter handles only approximately)."""
    nnet, request, _ = _random_case(seed)
    n0 = min(i.n for i in request.inputs[0].indexes)
    one = copy.deepcopy(request)
    for io in one.inputs + one.outputs:
        io.indexes = [i for i in io.indexes if i.n == n0]
    return nnet, one, _compile(nnet, one)


_TDNN = """input-node name=input dim=3
component name=a type=AffineComponent input-dim=6 output-dim=5
component name=r type=RectifiedLinearComponent dim=5
component name=b type=AffineComponent input-dim=10 output-dim=4
component-node name=a component=a input=Append(Offset(input, -1), input)
component-node name=r component=r input=a
component-node name=b component=b input=Append(r, Offset(r, 1))
output-node name=output input=b
"""


def replace_pass(monkeypatch: pytest.MonkeyPatch, name: str,
                 function: Callable[..., Any]) -> None:
    """Run ``function`` in place of the pass ``name`` for the rest of the test."""
    assert any(p.name == name for p in pipeline.PASSES), name
    monkeypatch.setattr(pipeline, "PASSES", tuple(
        dataclasses.replace(p, function=function) if p.name == name else p
        for p in pipeline.PASSES))
