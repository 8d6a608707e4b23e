"""Does optimization change what a computation computes?  (Kaldi's
nnet-optimize-test as a library: it runs computations, so it sits above
the executor.)

:func:`compare_optimized` compiles a request unoptimized and optimized, runs
both with the executor on the same random inputs (and random output
derivatives when the request has derivatives), and compares the outputs,
the input derivatives and the parameter gradients.  Like Kaldi's test, each
run updates a zeroed copy of the network set up as a gradient, so that the
gradients are compared and not the networks after a (possibly
preconditioned) update.

:func:`find_breaking_optimization` reruns a failing comparison with each
optimization switched off in turn and reports which switches make it pass.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..compile.compiler import Compiler, CompilerOptions
from ..compile.computation import NnetComputation
from ..compile.request import ComputationRequest
from ..compile.shortcut import compile_via_shortcut
from ..errors import PynnetError
from ..nnet.components.base import set_random_seed
from ..nnet.utils import scale_nnet
from ..optimize import optimize
from ..optimize.options import INT32_MAX, INT32_MIN, OptimizeOptions
from .computer import NnetComputeOptions, NnetComputer

__all__ = ["RunResult", "ComparisonResult", "BreakingReport", "run_computation",
           "compare_optimized", "find_breaking_optimization", "compile_optimized",
           "DISABLE_SWITCHES"]


@dataclass
class RunResult:
    """What one run of a computation produced (arrays copied out of the executor)."""

    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    input_derivs: dict[str, np.ndarray] = field(default_factory=dict)
    # (component name, attribute) -> parameter array of the network updated
    # as a gradient.
    gradients: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)


@dataclass
class ComparisonResult:
    ok: bool
    # Relative error (||a - b|| / max(||a||, ||b||)) of every compared
    # quantity, keyed 'output:NAME', 'inderiv:NAME', 'gradient:COMPONENT.ATTR'.
    errors: dict[str, float] = field(default_factory=dict)
    message: str = ""


@dataclass
class BreakingReport:
    """Result of :func:`find_breaking_optimization`.

    ``ok``: the full optimization already matched.  Otherwise
    ``retries`` maps each switch turned off (a name of
    :data:`DISABLE_SWITCHES`) to whether the comparison then succeeded, and
    ``breaking`` lists the switches whose removal fixes it.
    """

    ok: bool
    first_failure: ComparisonResult | None = None
    retries: dict[str, bool] = field(default_factory=dict)
    breaking: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.ok:
            return "optimized and unoptimized computations agree"
        lines = ["Test failed with all optimizations enabled"
                 + (f" ({self.first_failure.message})" if self.first_failure else "")
                 + ". Retried with the following turned off:"]
        for name, succ in self.retries.items():
            lines.append(f"  {name:<26} ... {'SUCCESS' if succ else 'FAILURE'}")
        return "\n".join(lines)


# Each way of retrying: a name and the change to the options (Kaldi's list,
# plus the passes it has gained since that test was written).  'use_shortcut'
# is handled separately (it is a compiler option).
DISABLE_SWITCHES: dict[str, dict[str, Any]] = {
    "propagate_in_place": {"propagate_in_place": False},
    "backprop_in_place": {"backprop_in_place": False},
    "optimize_row_ops": {"optimize_row_ops": False},
    "split_row_ops": {"split_row_ops": False},
    "snip_row_ops": {"snip_row_ops": False},
    "extend_matrices": {"extend_matrices": False},
    "convert_addition": {"convert_addition": False},
    "remove_assignments": {"remove_assignments": False},
    "allow_left_merge": {"allow_left_merge": False},
    "allow_right_merge": {"allow_right_merge": False},
    "initialize_undefined": {"initialize_undefined": False},
    "allocate_from_other": {"allocate_from_other": False},
    "move_sizing_commands": {"move_sizing_commands": False},
    "consolidate_model_update": {"consolidate_model_update": False},
    "memory_compression": {"memory_compression_level": 0},
    "no_deriv_time": {"min_deriv_time": INT32_MIN, "max_deriv_time": INT32_MAX,
                      "max_deriv_time_relative": INT32_MAX},
    "optimize": {"optimize": False, "memory_compression_level": 0},
}


def _rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """Kaldi's ApproxEqual measure: ||a - b|| / max(||a||, ||b||)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    denom = max(float(np.linalg.norm(a)), float(np.linalg.norm(b)))
    diff = float(np.linalg.norm(a - b))
    if denom == 0.0:
        return 0.0 if diff == 0.0 else float("inf")
    return diff / denom


def _gradient_arrays(nnet: Any) -> dict[tuple[str, str], np.ndarray]:
    """Float arrays held by the updatable components (parameters and any
    statistics they accumulate), copied."""
    ans: dict[tuple[str, str], np.ndarray] = {}
    for c, comp in nnet.updatable_components():
        name = nnet.component_names[c]
        attrs = getattr(comp, "__dict__", {})
        for key in sorted(attrs):
            value = attrs[key]
            if isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.floating):
                ans[(name, key)] = value.copy()
    return ans


def _gradient_network(nnet: Any) -> Any:
    """A copy of ``nnet`` with parameters zeroed, set up to accumulate
    gradients (Kaldi's ScaleNnet(0) + SetNnetAsGradient)."""
    ans = copy.deepcopy(nnet)
    scale_nnet(0.0, ans)
    for _, comp in ans.updatable_components():
        comp.set_as_gradient()
    return ans


def run_computation(nnet: Any, computation: NnetComputation, request: ComputationRequest,
                    inputs: dict[str, np.ndarray], output_derivs: dict[str, np.ndarray],
                    seed: int = 0, backend: str = "reference") -> RunResult:
    """Run ``computation`` forward (and backward when ``output_derivs`` is
    not empty) on a private copy of ``nnet``, as Kaldi's test does."""
    nnet_copy = copy.deepcopy(nnet)          # backprop may change the network
    to_update = _gradient_network(nnet) if computation.need_model_derivative else None
    # Statistics (StoreStats) go to the gradient network when there is one,
    # else to the private copy.
    computer = NnetComputer(NnetComputeOptions(), computation, nnet_copy,
                            nnet_to_update=to_update, backend=backend,
                            nnet_to_store_stats=to_update if to_update is not None else nnet_copy,
                            misc_info=request.misc_info)
    for io in request.inputs:
        computer.accept_input(io.name, inputs[io.name])
    set_random_seed(seed)
    computer.run()
    result = RunResult()
    for io in request.outputs:
        result.outputs[io.name] = np.array(computer.get_output(io.name), copy=True)
    if output_derivs:
        for io in request.outputs:
            if io.has_deriv:
                computer.accept_input(io.name, output_derivs[io.name])
        set_random_seed(seed + 1)
        computer.run()
        for io in request.inputs:
            if io.has_deriv:
                result.input_derivs[io.name] = np.array(computer.get_output(io.name), copy=True)
    if to_update is not None:
        result.gradients = _gradient_arrays(to_update)
    return result


def compile_optimized(nnet: Any, request: ComputationRequest,
                      options: OptimizeOptions | None,
                      after_each_pass: Callable[[str, NnetComputation], None] | None = None,
                      use_shortcut: bool = False) -> NnetComputation:
    """Compile and optimize ``request`` (through the shortcut when asked and
    possible, as Kaldi's CachingOptimizingCompiler does)."""
    def compile_no_shortcut(r: ComputationRequest) -> NnetComputation:
        comp = Compiler([r], nnet).create_computation(CompilerOptions())
        return optimize(options, nnet, r, comp, after_each_pass)

    if use_shortcut:
        ans = compile_via_shortcut(compile_no_shortcut, nnet, request)
        if ans is not None:
            return ans
    return compile_no_shortcut(request)


def _random_io(nnet: Any, request: ComputationRequest, seed: int
               ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    inputs = {io.name: rng.standard_normal((len(io.indexes), nnet.input_dim(io.name)))
              .astype(np.float32) for io in request.inputs}
    derivs = {io.name: rng.standard_normal((len(io.indexes), nnet.output_dim(io.name)))
              .astype(np.float32) for io in request.outputs if io.has_deriv}
    return inputs, derivs


def compare_optimized(nnet: Any, request: ComputationRequest,
                      options: OptimizeOptions | None = None, *, seed: int = 0,
                      rel_tol: float = 0.01, gradient_rel_tol: float | None = None,
                      unoptimized: NnetComputation | None = None,
                      after_each_pass: Callable[[str, NnetComputation], None] | None = None,
                      use_shortcut: bool = False, backend: str = "reference"
                      ) -> ComparisonResult:
    """Compile ``request`` without and with optimization (``options``,
    default Kaldi's defaults), run both, compare.  Errors raised while
    optimizing, checking (``after_each_pass``) or running the optimized
    computation count as a failure with their message."""

    gradient_rel_tol = rel_tol if gradient_rel_tol is None else gradient_rel_tol
    if unoptimized is None:
        unoptimized = Compiler([request], nnet).create_computation(CompilerOptions())
    inputs, derivs = _random_io(nnet, request, seed)
    reference = run_computation(nnet, unoptimized, request, inputs, derivs, seed, backend)
    try:
        optimized = compile_optimized(nnet, request, options, after_each_pass, use_shortcut)
        result = run_computation(nnet, optimized, request, inputs, derivs, seed, backend)
    except PynnetError as e:
        return ComparisonResult(False, {}, f"{type(e).__name__}: {e}")
    errors: dict[str, float] = {}
    bad: list[str] = []

    def compare(key: str, a: np.ndarray, b: np.ndarray, tol: float) -> None:
        err = _rel_error(a, b)
        errors[key] = err
        if not err <= tol:
            bad.append(f"{key} (relative error {err:.3g})")

    for name, value in reference.outputs.items():
        compare(f"output:{name}", result.outputs[name], value, rel_tol)
    for name, value in reference.input_derivs.items():
        compare(f"inderiv:{name}", result.input_derivs[name], value, rel_tol)
    for key, value in reference.gradients.items():
        compare(f"gradient:{key[0]}.{key[1]}", result.gradients[key], value, gradient_rel_tol)
    if bad:
        return ComparisonResult(False, errors, "optimized differs from unoptimized in "
                                + ", ".join(bad))
    return ComparisonResult(True, errors, "ok")


def find_breaking_optimization(nnet: Any, request: ComputationRequest,
                               options: OptimizeOptions | None = None, *, seed: int = 0,
                               rel_tol: float = 0.01,
                               switches: Sequence[str] | None = None,
                               after_each_pass: Callable[[str, NnetComputation], None] | None
                               = None, use_shortcut: bool = False) -> BreakingReport:
    """Kaldi's UnitTestNnetOptimizeInternal: compare with ``options``; if
    that fails, retry with each switch of :data:`DISABLE_SWITCHES` (or those
    named in ``switches``; 'use_shortcut' too when ``use_shortcut``) turned
    off, and report which retries succeed."""

    options = options if options is not None else OptimizeOptions()
    unoptimized = Compiler([request], nnet).create_computation(CompilerOptions())

    def attempt(opts: OptimizeOptions, shortcut: bool) -> ComparisonResult:
        return compare_optimized(nnet, request, opts, seed=seed, rel_tol=rel_tol,
                                 unoptimized=unoptimized, after_each_pass=after_each_pass,
                                 use_shortcut=shortcut)

    first = attempt(options, use_shortcut)
    if first.ok:
        return BreakingReport(True, first)
    report = BreakingReport(False, first)
    names = list(switches) if switches is not None else list(DISABLE_SWITCHES)
    if use_shortcut and "use_shortcut" not in names:
        names.insert(0, "use_shortcut")
    for name in names:
        if name == "use_shortcut":
            succ = attempt(options, False).ok
        else:
            if name not in DISABLE_SWITCHES:
                raise KeyError(f"unknown optimization switch {name!r}; known: "
                               f"{', '.join(DISABLE_SWITCHES)}")
            succ = attempt(options.replace(**DISABLE_SWITCHES[name]), use_shortcut).ok
        report.retries[name] = succ
        if succ:
            report.breaking.append(name)
    return report
