"""Kaldi's Optimize() (nnet-optimize.cc): the optimization passes in
Kaldi's order, each switched by a field of :class:`OptimizeOptions`.

Every pass is a plain function that rewrites a computation in place;
:func:`optimize` runs them on a copy and returns it, calling
``after_each_pass(name, computation)`` after each one (tests run the
ComputationChecker there; see :func:`checking_hook`).  A failure in a pass
or in the hook raises :class:`OptimizationPassError` naming the pass and the
passes that ran before it.

Without a hook, the renumbering after the row-op passes, extend_matrices
and variable merging share the array form of the computation
(:class:`~.arrays.ComputationArrays`) and write it back once; with a hook
each writes its result back, so the hook sees every step (the results are
the same).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from ..compile.computation import MatrixDebugInfo, MatrixInfo, NnetComputation
from ..compile.request import ComputationRequest
from ..errors import ComputationCheckError, PynnetError
from .. import log
from ..log import vlog
from ..nnet.properties_cache import component_properties_cached
from .arrays import ComputationArrays, share_table_memos
from .check import check_computation
from .compression import optimize_memory_compression
from .deriv_times import limit_derivative_times
from .extend import extend_matrices
from .looped import optimize_looped_computation
from .misc import (consolidate_io_operations, convert_addition_to_assignment,
                   move_sizing_commands, remove_unnecessary_allocation,
                   remove_unnecessary_zeroing)
from .model_update import consolidate_model_update
from .options import INT32_MAX, INT32_MIN, OptimizeOptions
from .renumber import fix_goto_label, renumber_arrays, renumber_computation
from .row_ops import replace_row_with_matrix_ops, snip_row_ops, split_row_ops
from .variable_merging import remember_final_analysis, variable_merging_optimization

__all__ = ["optimize", "max_output_time_in_request", "OptimizationPass",
           "PASSES", "enabled_passes", "copy_computation", "checking_hook",
           "OptimizationPassError", "PassHook"]

PassHook = Callable[[str, NnetComputation], None]


class OptimizationPassError(ComputationCheckError):
    """An optimization pass failed, or the computation after it failed the
    ``after_each_pass`` check.  ``pass_name`` is that pass and
    ``passes_before`` the passes that ran before it, in order."""

    def __init__(self, pass_name: str, passes_before: Sequence[str], cause: BaseException,
                 in_hook: bool) -> None:
        self.pass_name = pass_name
        self.passes_before = list(passes_before)
        self.cause = cause
        where = "the computation after" if in_hook else "running"
        before = ", ".join(self.passes_before) or "none"
        super().__init__(f"optimization pass '{pass_name}' failed ({where} it: "
                         f"{type(cause).__name__}: {cause}); passes before it: {before}")


def max_output_time_in_request(request: ComputationRequest) -> int:
    """Kaldi's MaxOutputTimeInRequest: the largest t of any output Index."""
    ans = None
    for io in request.outputs:
        for index in io.indexes:
            if ans is None or index.t > ans:
                ans = index.t
    if ans is None:
        raise PynnetError("Failed to find any output indexes in computation request.")
    return ans


def copy_computation(computation: NnetComputation) -> NnetComputation:
    """A copy that passes may rewrite freely without touching the original:
    matrices, submatrices, commands, index tables and the debug-info records
    are new.  The cindex lists inside the debug info and the precomputed-index
    objects are shared (copying the cindexes of a large request costs more
    than all the passes), so passes must replace them, never change them in
    place."""
    copy = replace(
        computation,
        matrices=[MatrixInfo(m.num_rows, m.num_cols, m.stride_type)
                  for m in computation.matrices],
        matrix_debug_info=[MatrixDebugInfo(d.is_deriv, d.cindexes)
                           for d in computation.matrix_debug_info],
        submatrices=list(computation.submatrices),
        component_precomputed_indexes=list(computation.component_precomputed_indexes),
        indexes=[a.copy() for a in computation.indexes],
        indexes_multi=[a.copy() for a in computation.indexes_multi],
        indexes_ranges=[a.copy() for a in computation.indexes_ranges],
        commands=list(computation.commands))
    # The same command and submatrix records: the tables remembered for
    # them hold (they are checked against the records when used).
    share_table_memos(computation, copy)
    return copy


# ---------------------------------------------------------------------------
# The passes


@dataclass
class _Context:
    options: OptimizeOptions
    nnet: Any
    max_output_time: Callable[[], int | None]
    computation: NnetComputation
    # An analysis of ctx.computation as it is now (made by the checker before
    # optimization), while no pass has changed it; None otherwise.
    analyzer: Any = None


@dataclass(frozen=True)
class OptimizationPass:
    """One pass: ``function`` run as ``call(function, context)`` when
    ``gate(options)`` is true.  ``renumber_group`` passes report whether
    they changed anything; the group is followed by renumbering."""

    name: str
    function: Callable[..., Any]
    gate: Callable[[OptimizeOptions], bool]
    call: Callable[[Callable[..., Any], _Context], Any]
    renumber_group: bool = False
    # The function also takes the array form of the computation
    # (ComputationArrays) in place of the computation: consecutive such
    # passes share one, written back after the last (when no hook needs to
    # see the computation in between).
    on_arrays: bool = False


def _deriv_time_limits(ctx: _Context) -> tuple[int, int]:
    o = ctx.options
    max_deriv = o.max_deriv_time
    if o.max_deriv_time_relative != INT32_MAX:
        max_deriv = o.effective_max_deriv_time(ctx.max_output_time())
    return o.min_deriv_time, max_deriv


def _limits_set(o: OptimizeOptions) -> bool:
    return (o.min_deriv_time != INT32_MIN or o.max_deriv_time != INT32_MAX
            or o.max_deriv_time_relative != INT32_MAX)


def _row_ops_gate(flag: str) -> Callable[[OptimizeOptions], bool]:
    return lambda o: o.optimize and getattr(o, flag)


def _nnet_comp(fn: Callable[..., Any], ctx: _Context) -> Any:
    return fn(ctx.nnet, ctx.computation)


def _comp(fn: Callable[..., Any], ctx: _Context) -> Any:
    return fn(ctx.computation)


# In Kaldi's order (nnet-optimize.cc, Optimize()).
PASSES: tuple[OptimizationPass, ...] = (
    # Must come first: it assumes every matrix is zeroed when allocated.
    # Not switched off by --optimize=false (it only does something when a
    # deriv-time limit is set).
    OptimizationPass("limit_derivative_times", limit_derivative_times,
                     _limits_set,
                     lambda fn, ctx: fn(ctx.nnet, *_deriv_time_limits(ctx), ctx.computation)),
    OptimizationPass("consolidate_model_update", consolidate_model_update,
                     lambda o: o.optimize and o.consolidate_model_update, _nnet_comp),
    OptimizationPass("convert_addition_to_assignment", convert_addition_to_assignment,
                     lambda o: o.optimize and o.convert_addition,
                     lambda fn, ctx: _nnet_comp(fn, ctx) if ctx.analyzer is None
                     or fn is not convert_addition_to_assignment
                     else fn(ctx.nnet, ctx.computation, ctx.analyzer)),
    OptimizationPass("snip_row_ops", snip_row_ops,
                     _row_ops_gate("snip_row_ops"), _comp, renumber_group=True),
    OptimizationPass("split_row_ops", split_row_ops,
                     _row_ops_gate("split_row_ops"), _comp, renumber_group=True),
    OptimizationPass("replace_row_with_matrix_ops", replace_row_with_matrix_ops,
                     _row_ops_gate("optimize_row_ops"), _comp, renumber_group=True),
    OptimizationPass("extend_matrices", extend_matrices,
                     lambda o: o.optimize and o.extend_matrices
                     and not o.optimize_looped_computation, _comp, on_arrays=True),
    OptimizationPass("variable_merging_optimization", variable_merging_optimization,
                     lambda o: o.optimize and (o.remove_assignments or o.backprop_in_place
                                               or o.propagate_in_place),
                     lambda fn, ctx: fn(ctx.options, ctx.nnet, ctx.computation),
                     on_arrays=True),
    OptimizationPass("remove_unnecessary_zeroing", remove_unnecessary_zeroing,
                     lambda o: o.optimize and o.initialize_undefined, _nnet_comp),
    OptimizationPass("move_sizing_commands", move_sizing_commands,
                     lambda o: (o.optimize and o.move_sizing_commands)
                     or o.optimize_looped_computation, _nnet_comp),
    # Needed for a looped computation to run at all, so not switched by
    # --optimize; it must come before remove_unnecessary_allocation.
    OptimizationPass("optimize_looped_computation", optimize_looped_computation,
                     lambda o: o.optimize_looped_computation, _nnet_comp),
    OptimizationPass("remove_unnecessary_allocation", remove_unnecessary_allocation,
                     lambda o: o.optimize and o.allocate_from_other
                     and not o.optimize_looped_computation, _nnet_comp),
    # Needed to run the computation: always.
    OptimizationPass("consolidate_io_operations", consolidate_io_operations,
                     lambda o: True, _nnet_comp),
    OptimizationPass("fix_goto_label", fix_goto_label,
                     lambda o: o.optimize_looped_computation, _comp),
    # Not switched by --optimize either (as in Kaldi).
    OptimizationPass("optimize_memory_compression", optimize_memory_compression,
                     lambda o: o.memory_compression_level > 0
                     and not o.optimize_looped_computation,
                     lambda fn, ctx: fn(ctx.nnet, ctx.options.memory_compression_level,
                                        ctx.computation)),
)


def enabled_passes(options: OptimizeOptions) -> list[str]:
    """Names of the passes ``options`` switches on, in order."""
    return [p.name for p in PASSES if p.gate(options)]


def optimize(options: OptimizeOptions | None, nnet: Any,
             max_output_time: int | ComputationRequest | None,
             computation: NnetComputation,
             after_each_pass: PassHook | None = None,
             analyzer: Any = None) -> NnetComputation:
    """Kaldi's Optimize(): the optimized copy of ``computation``.

    ``max_output_time`` is Kaldi's ``max_output_time_in_request`` (only used
    with ``max_deriv_time_relative``); the request itself may be passed
    instead.  ``after_each_pass(name, computation)`` runs after every pass
    that ran (and after the renumbering that follows the row-op passes).
    ``analyzer``: an Analyzer of ``computation`` as passed (what
    check_computation returns); the first pass that analyses the computation
    uses it instead of analysing it again, if no pass changed it before.
    """
    with component_properties_cached():
        return _optimize(options if options is not None else OptimizeOptions(), nnet,
                         max_output_time, computation, after_each_pass, analyzer)


def _optimize(options: OptimizeOptions, nnet: Any,
              max_output_time: int | ComputationRequest | None,
              computation: NnetComputation,
              after_each_pass: PassHook | None, analyzer: Any = None) -> NnetComputation:
    ctx = _Context(options, nnet, lambda: _max_time(max_output_time),
                   copy_computation(computation), analyzer)
    done: list[str] = []
    # The array form shared by consecutive array passes (only without a
    # hook, which must see the computation after every pass).
    arrays: ComputationArrays | None = None

    def to_arrays() -> ComputationArrays:
        nonlocal arrays
        if arrays is None:
            arrays = ComputationArrays(ctx.computation)
        return arrays

    def flush() -> None:
        nonlocal arrays
        if arrays is not None:
            arrays.write_back(ctx.computation)
            if arrays.final_analysis is not None:
                remember_final_analysis(ctx.computation, arrays.final_analysis)
            arrays = None

    def run_hook(name: str) -> None:
        if after_each_pass is None:
            return
        try:
            after_each_pass(name, ctx.computation)
        except Exception as e:  # re-raised with the pass named
            raise OptimizationPassError(name, done[:-1], e, in_hook=True) from e

    must_renumber = False
    for i, p in enumerate(PASSES):
        if not p.gate(options):
            continue
        fn = p.function
        done.append(p.name)
        on_arrays = p.on_arrays and after_each_pass is None
        try:
            if on_arrays:
                computation_now = ctx.computation
                ctx.computation = to_arrays()  # type: ignore[assignment]
                arrays.final_analysis = None    # (left by variable merging, if last)
                try:
                    result = p.call(fn, ctx)
                finally:
                    ctx.computation = computation_now
            else:
                flush()
                result = p.call(fn, ctx)
        except Exception as e:
            raise OptimizationPassError(p.name, done[:-1], e, in_hook=False) from e
        if isinstance(result, NnetComputation):   # a pass that returns a new computation
            ctx.computation = result
        if not (p.name in _REPORTS_CHANGE and result is False):
            ctx.analyzer = None       # (the pass may have changed the computation)
        if log.verbose_level() >= 3:
            if arrays is not None:
                sizes = (arrays.num_commands, len(arrays.matrices))
            else:
                sizes = (len(ctx.computation.commands), len(ctx.computation.matrices))
            vlog(3, f"after {p.name}: {sizes[0]} commands, {sizes[1]} matrices")
        run_hook(p.name)
        if p.renumber_group:
            must_renumber |= bool(result)
            last_in_group = i + 1 == len(PASSES) or not PASSES[i + 1].renumber_group
            if last_in_group and must_renumber:
                done.append("renumber_computation")
                try:
                    if after_each_pass is None:
                        renumber_arrays(to_arrays())
                    else:
                        renumber_computation(ctx.computation)
                except Exception as e:
                    raise OptimizationPassError("renumber_computation", done[:-1], e,
                                                in_hook=False) from e
                run_hook("renumber_computation")
    flush()
    return ctx.computation


# Passes that return False when they left the computation as it was.
_REPORTS_CHANGE = frozenset({"consolidate_model_update"})


def _max_time(value: int | ComputationRequest | None) -> int | None:
    if isinstance(value, ComputationRequest):
        return max_output_time_in_request(value)
    return value


# Passes after which Kaldi's verbose checking also checks that nothing is
# modified after it is read (true until the row-op passes start re-using
# memory).
_REWRITE_CHECKED = frozenset({"limit_derivative_times", "consolidate_model_update",
                              "convert_addition_to_assignment"})


def checking_hook(nnet: Any) -> PassHook:
    """An ``after_each_pass`` hook running the ComputationChecker (as Kaldi
    does after every pass at --verbose=3 and above)."""
    def hook(name: str, computation: NnetComputation) -> None:
        check_computation(nnet, computation, check_rewrite=name in _REWRITE_CHECKED)

    return hook
