"""limit_derivative_times (Kaldi's DerivativeTimeLimiter) against an
independent reference: the unoptimized computation with the out-of-window
rows of every derivative matrix zeroed after each command that writes it."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.compile.computation import Command, CommandType, NnetComputation
from pynnet3.compile.n_stride import cindex_array
from pynnet3.errors import PynnetError
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import copy_computation
from pynnet3.optimize.analysis import Analyzer
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.deriv_times import (limit_derivative_times,
                                          limit_derivative_times_from_options)
from pynnet3.optimize.options import INT32_MAX, INT32_MIN, OptimizeOptions
from tests.helpers import curated
from tests.optimize.helpers import (_TDNN, _compare_runs, _compile, _consolidate_io, _nnet,
                                    _one_sequence_case, _random_io, _random_seeds, _rel, _request,
                                    _run, _types)

T = CommandType
C = Command


def zeroing_reference(nnet: Nnet, comp: NnetComputation, lo: int, hi: int) -> NnetComputation:
    """The computation with, after every command that writes a derivative
    matrix, that matrix's rows whose t is outside [lo, hi] set to zero (an
    in-place CopyRows with -1 for those rows)."""
    ref = copy_computation(comp)
    analyzer = Analyzer(nnet, ref)
    whole = ref.whole_submatrices()
    zeroing: dict[int, Command] = {}
    for m in range(1, len(ref.matrices)):
        debug = ref.matrix_debug_info[m]
        t = cindex_array(debug.cindexes)[:, 2].astype(np.int64)
        keep = (t >= lo) & (t <= hi)
        if debug.is_deriv and not keep.all():
            k = ref.add_indexes(np.where(keep, np.arange(len(t)), -1))
            zeroing[m] = C(T.COPY_ROWS, 1.0, whole[m], whole[m], k)
    commands = []
    for c, command in enumerate(ref.commands):
        commands.append(command)
        commands += [zeroing[m] for m in analyzer.command_attributes[c].matrices_written
                     if m in zeroing]
    ref.commands = commands
    return ref


def _in_window_rows_contiguous(comp: NnetComputation, lo: int, hi: int) -> bool:
    """Kaldi's limiter keeps, per derivative matrix, the row range from the
    first to the last in-window row; the zeroing reference equals it only
    when no out-of-window row lies inside that range."""
    for d in comp.matrix_debug_info[1:]:
        if d.is_deriv:
            t = cindex_array(d.cindexes)[:, 2].astype(np.int64)
            rows = np.flatnonzero((t >= lo) & (t <= hi))
            if len(rows) and len(rows) != rows[-1] - rows[0] + 1:
                return False
    return True


def test_limit_derivative_times_small_tdnn() -> None:
    nnet = _nnet(_TDNN)
    request = _request([("input", -1, 11, True)], [("output", 0, 10, True)],
                       need_model_derivative=True)
    comp = _compile(nnet, request)
    opt = copy_computation(comp)
    limit_derivative_times(nnet, 3, 6, opt)
    check_computation(nnet, opt)
    # derivative matrices that are neither inputs nor outputs shrank to the window
    analyzer = Analyzer(nnet, opt)
    for m in range(1, len(opt.matrices)):
        a, d = analyzer.matrix_accesses[m], opt.matrix_debug_info[m]
        if d.is_deriv and not (a.is_input or a.is_output):
            ts = cindex_array(d.cindexes)[:, 2]
            assert ts.min() >= 3 and ts.max() <= 6, f"m{m}"
    assert len(opt.commands) <= len(comp.commands)
    errs = _compare_runs(nnet, request, zeroing_reference(nnet, comp, 3, 6), opt)
    assert set(errs) == {"out_output", "inderiv_input", "grad_a", "grad_b"}
    # the limit matters: without it the input derivative differs
    inputs, derivs = _random_io(nnet, request)
    full, _ = _run(nnet, request, comp, inputs, derivs)
    limited, _ = _run(nnet, request, opt, inputs, derivs)
    assert _rel(limited["inderiv_input"], full["inderiv_input"]) > 0.1
    ts = np.array([i.t for i in request.inputs[0].indexes])
    assert not limited["inderiv_input"][(ts < 2) | (ts > 6)].any()


def test_limit_derivative_times_options_and_no_ops() -> None:
    nnet = _nnet(_TDNN)
    request = _request([("input", -1, 11, True)], [("output", 0, 10, True)],
                       need_model_derivative=True)
    comp = _compile(nnet, request)
    # unset bounds: nothing happens
    same = copy_computation(comp)
    limit_derivative_times(nnet, INT32_MIN, INT32_MAX, same)
    assert same.commands == comp.commands
    # a window containing everything: only renumbering-level changes, same results
    wide = copy_computation(comp)
    limit_derivative_times(nnet, -200, 1000, wide)
    assert _types(wide) == _types(comp)
    _compare_runs(nnet, request, comp, wide, tol=0.0)
    with pytest.raises(PynnetError, match="max-deriv-time"):
        limit_derivative_times(nnet, 5, 4, copy_computation(comp))
    # max-deriv-time-relative is relative to the last output frame (9)
    rel = copy_computation(comp)
    limit_derivative_times_from_options(
        OptimizeOptions(min_deriv_time=3, max_deriv_time_relative=-3), nnet, 9, rel)
    direct = copy_computation(comp)
    limit_derivative_times(nnet, 3, 6, direct)
    assert rel.commands == direct.commands and rel.matrices == direct.matrices
    untouched = copy_computation(comp)
    limit_derivative_times_from_options(OptimizeOptions(), nnet, 9, untouched)
    assert untouched.commands == comp.commands


def _check_limit_on_seed(seed: str) -> str:
    nnet, request, comp = _one_sequence_case(seed)
    if not any(o.has_deriv for o in request.outputs):
        return "no backward pass"
    ts = [i.t for o in request.outputs for i in o.indexes]
    lo, hi = min(ts) + (max(ts) - min(ts)) // 3, max(ts) - (max(ts) - min(ts)) // 3
    opt = copy_computation(comp)
    limit_derivative_times(nnet, lo, hi, opt)
    _consolidate_io(nnet, opt)
    check_computation(nnet, opt)
    if not _in_window_rows_contiguous(comp, lo, hi):
        # Kaldi's limiter then keeps some out-of-window rows (a heuristic of
        # Kaldi's), which the zeroing reference does not model.
        return "rows not sorted by time"
    _compare_runs(nnet, request, zeroing_reference(nnet, comp, lo, hi), opt)
    return "compared"


def test_limit_derivative_times_on_kaldi_random_networks() -> None:
    seeds = curated("random", ["002", "009", "023", "024", "029"])
    results = {seed: _check_limit_on_seed(seed) for seed in seeds}
    assert list(results.values()).count("compared") >= len(seeds) - 1, results


@pytest.mark.slow
@pytest.mark.parametrize("seed", _random_seeds() or ["000"])
def test_limit_derivative_times_all_kaldi_random_networks(seed: str) -> None:
    _check_limit_on_seed(seed)
