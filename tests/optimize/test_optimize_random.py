"""Kaldi's nnet-optimize-test on random networks.

For each seed: draw a network of one of Kaldi's test families
(:mod:`pynnet3.testing.generate`) and a random request for it; compile the
request without optimization, with optimization (Kaldi's default options,
sometimes with derivative-time limits that change nothing), and through the
shortcut (a two-sequence computation, optimized, expanded to all sequences)
where the request allows; check every computation with the
ComputationChecker; run them all on the same random inputs and output
derivatives, each with its own copy of the network and a zeroed copy set up
as a gradient (Kaldi's ScaleNnet(0) + SetNnetAsGradient), so that parameter
gradients are compared rather than preconditioned updates.

As Kaldi's test: outputs and input derivatives must agree to a relative
Frobenius error of 0.01 (ApproxEqual), the gradient networks to 1e-5
(NnetParametersAreIdentical's dot-product test).  Newly allocated matrices
are filled with NaN, so a computation that reads a value it never wrote
fails instead of reading zeros.  On failure the optimizations are switched
off one at a time (:func:`pynnet3.compute.diagnose.find_breaking_optimization`)
and the message names those whose removal fixes it.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import pytest

from pynnet3.compile.compiler import Compiler, CompilerOptions
from pynnet3.compile.computation import NnetComputation
from pynnet3.compile.request import ComputationRequest
from pynnet3.compile.shortcut import compile_via_shortcut
from pynnet3.compute.computer import NnetComputeOptions, NnetComputer
from pynnet3.nnet.components.base import set_random_seed
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import OptimizeOptions, checking_hook, optimize
from pynnet3.optimize.check import check_computation
from pynnet3.compute.diagnose import find_breaking_optimization
from pynnet3.testing.generate import (NnetGenerationOptions,
                                      compute_example_computation_request_simple,
                                      draw_network_type,
                                      generate_config_sequence, nnet_from_configs,
                                      nnet_parameters_are_identical)
from pynnet3.train.nnet_update import reset_generators, scale_nnet, set_nnet_as_gradient
from tests.optimize.helpers import replace_pass

CI_SEEDS = range(60)
SLOW_SEEDS = range(60, 360)
REL_TOL = 0.01            # Kaldi's ApproxEqual default for matrices
PARAM_TOL = 1.0e-5        # Kaldi's NnetParametersAreIdentical threshold


@dataclass
class Case:
    seed: int
    family: str
    configs: list[str]
    nnet: Nnet
    request: ComputationRequest
    inputs: list[np.ndarray]
    output_deriv: np.ndarray
    options: OptimizeOptions
    debug: bool

    def describe(self) -> str:
        return (f"seed {self.seed} ({self.family}); configs:\n" + "".join(self.configs)
                + "request:\n" + self.request.print()
                + f"optimize options: min_deriv_time={self.options.min_deriv_time}, "
                  f"max_deriv_time={self.options.max_deriv_time}")


def make_case(seed: int) -> Case:
    rng = np.random.default_rng(seed)
    set_random_seed(seed)                 # parameter initialisation
    family = draw_network_type(NnetGenerationOptions(), rng)
    configs = generate_config_sequence(NnetGenerationOptions(), rng, family)
    nnet = nnet_from_configs(configs, f"seed {seed}")
    request, inputs = compute_example_computation_request_simple(nnet, rng)
    options = OptimizeOptions()
    # Limits that cut nothing still send the computation through
    # limit_derivative_times (as Kaldi's test does).
    if rng.integers(0, 4) == 0:
        options = options.replace(min_deriv_time=-200)
    if rng.integers(0, 4) == 0:
        options = options.replace(max_deriv_time=1000)
    output_deriv = rng.standard_normal((len(request.outputs[0].indexes),
                                        nnet.output_dim("output"))).astype(np.float32)
    return Case(seed, family, configs, nnet, request, inputs, output_deriv, options,
                debug=bool(rng.integers(0, 2) == 0))


@dataclass
class Run:
    output: np.ndarray
    input_derivs: dict[str, np.ndarray] = field(default_factory=dict)
    gradient: Nnet | None = None


def run(case: Case, computation: NnetComputation) -> Run:
    """Forward (and backward if the output has a derivative) with fresh
    copies of the network, as Kaldi's test does."""
    nnet = copy.deepcopy(case.nnet)        # backprop may change the network
    to_update = copy.deepcopy(case.nnet)
    scale_nnet(0.0, to_update)
    set_nnet_as_gradient(to_update)
    computer = NnetComputer(NnetComputeOptions(debug=case.debug, poison_undefined=True),
                            computation, nnet, to_update)
    for io, value in zip(case.request.inputs, case.inputs):
        computer.accept_input(io.name, value)
    set_random_seed(case.seed)
    reset_generators(nnet)
    computer.run()
    ans = Run(np.array(computer.get_output("output"), copy=True), gradient=to_update)
    if case.request.outputs[0].has_deriv:
        computer.accept_input("output", case.output_deriv)
        computer.run()
        for io in case.request.inputs:
            if io.has_deriv:
                ans.input_derivs[io.name] = np.array(computer.get_output(io.name), copy=True)
    return ans


def approx_equal(a: np.ndarray, b: np.ndarray, tol: float = REL_TOL) -> bool:
    """Kaldi's ApproxEqual(a, b, tol): ||a - b|| <= tol ||a|| (Frobenius)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return bool(np.linalg.norm(a64 - b64) <= tol * np.linalg.norm(a64))


def compare(reference: Run, other: Run) -> list[str]:
    problems = []
    if not np.all(np.isfinite(other.output)) or not approx_equal(reference.output, other.output):
        problems.append("outputs differ")
    for name, value in reference.input_derivs.items():
        if not approx_equal(value, other.input_derivs[name]):
            problems.append(f"input derivatives of '{name}' differ")
    assert reference.gradient is not None and other.gradient is not None
    if not nnet_parameters_are_identical(reference.gradient, other.gradient, PARAM_TOL):
        problems.append("parameter gradients differ")
    return problems


def compile_all(case: Case) -> dict[str, NnetComputation]:
    nnet, request, options = case.nnet, case.request, case.options
    unoptimized = Compiler([request], nnet).create_computation(CompilerOptions())
    # Before optimization nothing may be written after it is read.
    check_computation(nnet, unoptimized, check_rewrite=True)
    # The checker runs after every pass, so that a failure names the pass.
    hook = checking_hook(nnet)
    ans = {"unoptimized": unoptimized,
           "optimized": optimize(options, nnet, request, unoptimized, hook)}

    def compile_mini(r: ComputationRequest) -> NnetComputation:
        return optimize(options, nnet, r, Compiler([r], nnet).create_computation(), hook)

    shortcut = compile_via_shortcut(compile_mini, nnet, request)
    if shortcut is not None:
        ans["shortcut"] = shortcut
    for name in ("optimized", "shortcut"):
        if name in ans:
            check_computation(nnet, ans[name])
    return ans


def check_seed(seed: int) -> str:
    """Runs the test for one seed; returns the names of the computations
    compared (for reports); raises AssertionError on failure."""
    case = make_case(seed)
    computations = compile_all(case)
    runs = {name: run(case, comp) for name, comp in computations.items()}
    reference = runs.pop("unoptimized")
    # NaN here means the unoptimized computation read a matrix it never
    # wrote (poisoned at allocation): a compiler bug, not an optimizer one.
    values = [reference.output, *reference.input_derivs.values()]
    assert all(np.all(np.isfinite(v)) for v in values), \
        f"unoptimized computation produced non-finite values\n{case.describe()}"
    failures = {name: p for name, r in runs.items() if (p := compare(reference, r))}
    if failures:
        report = find_breaking_optimization(case.nnet, case.request, case.options,
                                            seed=seed, use_shortcut="shortcut" in failures)
        what = "; ".join(f"{k}: {', '.join(v)}" for k, v in failures.items())
        raise AssertionError(
            f"{what}\n{report.summary()}\nbreaking: {report.breaking}\n{case.describe()}")
    return ",".join(computations)


@pytest.mark.parametrize("seed", CI_SEEDS)
def test_optimize_random(seed: int) -> None:
    check_seed(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_optimize_random_slow(seed: int) -> None:
    check_seed(seed)


def test_a_broken_pass_is_caught_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that scales the copies it produces by 1.5 makes the optimized
    computation differ, and the report names the switch that turns it off."""
    import dataclasses

    from pynnet3.compile.computation import CommandType as CT
    from pynnet3.optimize import misc

    original = misc.convert_addition_to_assignment

    def broken(nnet: Nnet, computation: NnetComputation) -> object:
        ans = original(nnet, computation)
        for i, c in enumerate(computation.commands):
            if c.command_type in (CT.MATRIX_COPY, CT.COPY_ROWS, CT.MATRIX_ADD, CT.ADD_ROWS):
                computation.commands[i] = dataclasses.replace(c, alpha=c.alpha * 1.5)
        return ans

    replace_pass(monkeypatch, "convert_addition_to_assignment", broken)
    with pytest.raises(AssertionError) as info:
        check_seed(11)
    message = str(info.value)
    assert "optimized: outputs differ" in message
    assert "breaking: ['convert_addition', 'optimize']" in message
