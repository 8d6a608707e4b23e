"""The array and compiled fast paths of the analysis, the checker and the
passes give the same answers as the straightforward versions they stand
in for (which stay in the code as the reference and the error path).

* ComputationVariables: the Numba loop against the NumPy version;
* the variable-merging round analysis against Analyzer/ComputationAnalysis;
* the submatrix access records against the command-by-command loop;
* the checker's array checks against its loops, on many randomly broken
  computations (same verdict, same error message);
* the vectorised row-op helpers against the per-table functions;
* the optimizer with and without a hook (array form shared between passes,
  or written back after each pass);
* ComputationArrays written back unchanged gives the same records;
* the optimizer with and without the checker's analysis handed to it.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest

from pynnet3.compile.computation import Command, CommandType, NnetComputation
from pynnet3.errors import PynnetError
from pynnet3.optimize import OptimizeOptions, copy_computation, optimize
from pynnet3 import fast_paths
from pynnet3.optimize.accesses import _submatrix_access_records_loop, access_records_from_table
from pynnet3.optimize.analysis import Analyzer, ComputationAnalysis
from pynnet3.optimize.arrays import ComputationArrays
from pynnet3.optimize.check import ComputationChecker, check_computation
from pynnet3.optimize.check_indexes import IndexChecker
from pynnet3.optimize.model_update import consolidate_model_update
from pynnet3.optimize.variables import ComputationVariables
from pynnet3.optimize.row_ops import (_leading_trailing, _leading_trailing_all,
                                      _special_structures, indexes_have_special_structure)
from pynnet3.optimize.variable_merging import VariableMergingOptimizer
from tests.helpers import curated, reference_dir

T = CommandType


@pytest.fixture(autouse=True)
def _only_the_named_paths():
    """Each test here names the paths it compares (thresholds forced to 0
    or to 10**9); analysis loops loaded by an earlier test must not take
    over the Python and NumPy paths (the test of that rule sets it itself)."""
    with fast_paths.override(analysis_jit_when_loaded=False):
        yield


def _reference_or_skip():
    root = reference_dir()
    if root is None or not (root / "random").is_dir():
        pytest.skip("reference/random not available (needs /work/shared)")
    return root


@functools.lru_cache(maxsize=None)
def _case(seed: str):
    from pynnet3.compile.compiler import Compiler, CompilerOptions
    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    d = _reference_or_skip() / "random" / seed
    nnet = read_nnet(str(d / "final.raw"))
    request = read_request_file(str(d / "request.kaldi-text"))
    comp = Compiler([request], nnet).create_computation(CompilerOptions())
    return nnet, request, comp


# Recurrent with model derivative (038), TDNN-like (009, 023), attention with
# memos (019), statistics pooling (003).
_SEEDS = curated("random", ["003", "009", "019", "023", "038"])


# -- variables ---------------------------------------------------------------------

def _random_tables(rng: np.random.Generator, num_matrices: int, num_subs: int):
    sizes = [(0, 0)] + [(int(rng.integers(1, 40)), int(rng.integers(1, 40)))
                        for _ in range(num_matrices)]
    sub = [(0, 0, 0, 0, 0)]
    for m in range(1, num_matrices + 1):
        sub.append((m, 0, sizes[m][0], 0, sizes[m][1]))
    for _ in range(num_subs):
        m = int(rng.integers(1, num_matrices + 1))
        nr, nc = sizes[m]
        r0, c0 = int(rng.integers(0, nr)), int(rng.integers(0, nc))
        sub.append((m, r0, int(rng.integers(1, nr - r0 + 1)), c0,
                    int(rng.integers(1, nc - c0 + 1))))
    return np.array(sub, dtype=np.int64), np.array(sizes, dtype=np.int64)


def _assert_same_variables(fast: ComputationVariables, slow: ComputationVariables,
                           num_matrices: int, num_submatrices: int,
                           more: tuple[str, ...] = ()) -> None:
    """The two ComputationVariables hold the same arrays (dtypes too), split
    points and per-submatrix variables."""
    assert fast.num_variables == slow.num_variables
    for name in ("matrix_to_variable_index", "variable_to_matrix", "submatrix_to_matrix",
                 "submatrix_is_whole_matrix", "variables_flat", "variables_offsets", *more):
        a, b = getattr(fast, name), getattr(slow, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    for m in range(num_matrices):
        assert fast.row_split_points[m].tolist() == slow.row_split_points[m].tolist()
        assert fast.column_split_points[m].tolist() == slow.column_split_points[m].tolist()
    for s in range(num_submatrices):
        assert fast.variables_for_submatrix(s) == slow.variables_for_submatrix(s)


@pytest.mark.parametrize("seed", range(6))
def test_variables_compiled_loop_matches_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # (some matrices with many submatrices: the loop sorts those differently)
    sub, sizes = _random_tables(rng, int(rng.integers(1, 30)), int(rng.integers(0, 200)))
    with fast_paths.override(analysis_jit_from=0):
        fast = ComputationVariables()
        fast.init_from_tables(sub, sizes)
    with fast_paths.override(analysis_jit=False):
        slow = ComputationVariables()
        slow.init_from_tables(sub, sizes)
    _assert_same_variables(fast, slow, len(sizes), len(sub))


@pytest.mark.parametrize("seed", range(12))
def test_variables_python_loops_match_numpy(seed: int) -> None:
    """The plain-Python variables of small computations equal the NumPy
    version's (same arrays, dtypes and split points); invalid tables fall
    through to the NumPy version's error."""
    rng = np.random.default_rng(200 + seed)
    sub, sizes = _random_tables(rng, int(rng.integers(1, 8)), int(rng.integers(0, 30)))
    with fast_paths.override(analysis_python_below=10 ** 9):
        fast = ComputationVariables()
        fast.init_from_tables(sub, sizes)
    with fast_paths.override(analysis_jit=False):
        slow = ComputationVariables()
        slow.init_from_tables(sub, sizes)
    _assert_same_variables(fast, slow, len(sizes), len(sub), ("_row_first", "_col_first"))
    bad = sub.copy()
    bad[-1, 2] = sizes[bad[-1, 0], 0] + 1          # more rows than its matrix has
    messages = []
    for override in ({"analysis_python_below": 10 ** 9}, {"analysis_jit": False}):
        with fast_paths.override(**override), pytest.raises(PynnetError) as e:
            ComputationVariables().init_from_tables(bad, sizes)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


@pytest.mark.parametrize("seed", range(4))
def test_merged_records_in_a_dict_match_arrays(seed: int, monkeypatch) -> None:
    """_merge_records and VariableAccessTable on few records (merged in a
    dict) give the arrays their NumPy versions give."""
    from pynnet3.optimize import accesses

    rng = np.random.default_rng(300 + seed)
    for _ in range(50):
        n, nv = int(rng.integers(1, 100)), int(rng.integers(1, 30))
        args = (rng.integers(0, nv, n), rng.integers(0, 20, n), rng.integers(1, 4, n))
        results = []
        for below in (10 ** 9, 0):
            monkeypatch.setattr(accesses, "_MERGE_PYTHON_BELOW", below)
            table = accesses.VariableAccessTable(nv, *args)
            merged = accesses._merge_records(args[1], args[0], args[2], nv)
            results.append((table, merged))
        (a, ma), (b, mb) = results
        for name in ("commands", "types", "offsets"):
            x, y = getattr(a, name), getattr(b, name)
            assert x.dtype == y.dtype and np.array_equal(x, y), name
        assert [a[v] for v in range(nv)] == [b[v] for v in range(nv)]
        for x, y in zip(ma, mb):
            assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("seed", range(12))
def test_access_summary_compiled_loop_matches_its_python_code(seed: int) -> None:
    """access_summary_arrays: the Numba loop (large computations), its NumPy
    counterpart (small ones) and the loop's code interpreted
    (analysis_jit=False) give equal arrays."""
    from pynnet3.optimize.analysis import access_summary_arrays

    rng = np.random.default_rng(100 + seed)
    sub, sizes = _random_tables(rng, int(rng.integers(1, 20)), int(rng.integers(1, 120)))
    v = ComputationVariables()
    v.init_from_tables(sub, sizes)
    num_commands = int(rng.integers(1, 40))
    num_records = int(rng.integers(0, 200))
    args = (rng.integers(0, num_commands, num_records), rng.integers(1, len(sub), num_records),
            rng.integers(1, 4, num_records), v.variables_flat, v.variables_offsets,
            v.matrix_to_variable_index, rng.random(num_commands) < 0.3, num_commands)
    with fast_paths.override(analysis_jit_from=0):
        fast = access_summary_arrays(*args)
    with fast_paths.override(analysis_jit_from=10 ** 9, analysis_python_below=0):
        small = access_summary_arrays(*args)      # the NumPy version
    with fast_paths.override(analysis_jit_from=10 ** 9, analysis_python_below=10 ** 9):
        tiny = access_summary_arrays(*args)       # the Python-list version
    with fast_paths.override(analysis_jit=False):
        slow = access_summary_arrays(*args)
    assert len(fast) == len(small) == len(slow) == len(tiny) == 6
    for a, b, c, d in zip(fast, slow, small, tiny):
        assert a.dtype == b.dtype == c.dtype == d.dtype
        assert np.array_equal(a, b) and np.array_equal(c, b) and np.array_equal(d, b)


@pytest.mark.parametrize("num_matrices, num_submatrices, num_records",
                         [(12, 90, 300),      # the NumPy paths' sizes
                          (4, 20, 40),        # the Python lists' sizes
                          (2, 6, 10)])        # below analysis_jit_loaded_from
def test_loaded_analysis_loops_take_smaller_computations(
        num_matrices: int, num_submatrices: int, num_records: int, monkeypatch) -> None:
    """With analysis_jit_when_loaded, a computation below analysis_jit_from
    is analysed by the compiled loops once this process has loaded them
    (and by the NumPy code or the Python lists before, or with the setting
    off), unless it is below analysis_jit_loaded_from; the arrays are the
    same either way."""
    from pynnet3.optimize import analysis, variables

    rng = np.random.default_rng(7)
    sub, sizes = _random_tables(rng, num_matrices, num_submatrices)
    n = 60
    records = (rng.integers(0, n, num_records), rng.integers(1, len(sub), num_records),
               rng.integers(1, 4, num_records))
    calls: list[str] = []
    kernels = ((variables._variables_kernel, "variables"),
               (analysis._access_summary_kernel, "summary"))
    recorders = {}
    for kernel, name in kernels:
        dispatcher = kernel.compiled          # (loads it: this process now has it)

        def record(*args, _d=dispatcher, _name=name):
            calls.append(_name)
            return _d(*args)
        recorders[name] = record
    results = []
    for loaded, when_loaded in ((False, True), (True, False), (True, True)):
        calls.clear()
        for kernel, name in kernels:
            monkeypatch.setattr(kernel, "_dispatcher", recorders[name] if loaded else None)
        with fast_paths.override(analysis_jit_from=10 ** 9, analysis_python_below=64,
                                 analysis_jit_when_loaded=when_loaded,
                                 analysis_jit_loaded_from=16):
            v = ComputationVariables()
            v.init_from_tables(sub, sizes)
            summary = analysis.access_summary_arrays(
                *records, v.variables_flat, v.variables_offsets, v.matrix_to_variable_index,
                np.zeros(n, dtype=bool), n)
        big_enough = num_submatrices >= 16 and num_records >= 16
        assert sorted(calls) == (["summary", "variables"]
                                 if loaded and when_loaded and big_enough else [])
        results.append((v, summary))
    monkeypatch.undo()
    (v0, s0), _, (v2, s2) = results
    _assert_same_variables(v2, v0, len(sizes), len(sub))
    for a, b in zip(s2, s0):
        assert a.dtype == b.dtype and np.array_equal(a, b)


# -- the merging round's analysis ----------------------------------------------------------

@pytest.mark.parametrize("seed", _SEEDS)
def test_round_analysis_matches_computation_analysis(seed: str) -> None:
    nnet, request, comp = _case(seed)
    states: dict[str, NnetComputation] = {}
    optimize(OptimizeOptions(), nnet, request, comp,
             after_each_pass=lambda name, c: states.setdefault(name, copy_computation(c)))
    before = states.get("extend_matrices") or states["convert_addition_to_assignment"]
    opt = VariableMergingOptimizer(OptimizeOptions(), nnet, copy_computation(before))
    fast = opt.analysis
    analyzer = Analyzer(nnet, before)
    slow = ComputationAnalysis(before, analyzer)
    n = len(before.commands)
    assert fast.num_commands == n
    for s in range(1, len(before.submatrices)):
        assert fast.first_nontrivial_access(s) == slow.first_nontrivial_access(s)
        assert fast.last_access(s) == slow.last_access(s)
        assert fast.last_write_access(s) == slow.last_write_access(s)
        for c in {0, n // 3, n // 2, max(n - 2, 0)}:
            assert fast.data_invalidated_command(c, s) == slow.data_invalidated_command(c, s)
    ma = analyzer.matrix_accesses
    for m in range(1, len(before.matrices)):
        a = ma[m]
        assert fast.allocate[m] == a.allocate_command
        assert fast.deallocate[m] == a.deallocate_command
        assert (fast.is_input[m], fast.is_output[m]) == (a.is_input, a.is_output)
        assert fast.matrix_first[m] == (a.accesses[0].command_index if a.accesses else n)
        assert fast.matrix_first_nontrivial[m] == slow.first_nontrivial_matrix_access(m)


@pytest.mark.parametrize("seed", _SEEDS)
def test_access_records_match_command_loop(seed: str) -> None:
    nnet, request, comp = _case(seed)
    out = optimize(OptimizeOptions(), nnet, request, comp)
    for c in (comp, out):
        cmd, sub, flag, side = access_records_from_table(
            nnet, c.command_table(), c.indexes, c.indexes_multi, len(c.submatrices))
        loop_side = [False] * len(c.commands)
        rec = _submatrix_access_records_loop(nnet, c, loop_side)
        assert sorted(zip(cmd.tolist(), sub.tolist(), flag.tolist())) == \
            sorted(zip(rec.cmd, rec.sub, rec.flag))
        assert side.tolist() == loop_side


def _records_or_error(nnet, c: NnetComputation):
    from pynnet3.optimize.accesses import _BadArgument
    try:
        cmd, sub, flag, side = access_records_from_table(
            nnet, c.command_table(), c.indexes, c.indexes_multi, len(c.submatrices))
    except _BadArgument:
        return "bad argument"
    assert cmd.dtype == sub.dtype == flag.dtype == np.int64 and side.dtype == bool
    return cmd.tolist(), sub.tolist(), flag.tolist(), side.tolist()


@pytest.mark.parametrize("seed", _SEEDS)
def test_access_records_three_ways(seed: str) -> None:
    """Access records (command, submatrix, flag; side effects) are the same,
    in the same order, from the Python loop, the array version and the
    compiled loop, or all three find a bad argument, on whole computations
    (before and after optimizing, with CopyRows tables that have -1 and
    *Multi commands) and on randomly broken ones."""
    nnet, request, comp = _case(seed)
    out = optimize(OptimizeOptions(), nnet, request, comp)
    rng = np.random.default_rng(3000 + int(seed))
    verdicts = set()
    for c in [comp, out, *_mutations(comp, rng, 40), *_mutations(out, rng, 40)]:
        results = []
        for override in ({"analysis_python_below": 10 ** 9},
                         {"analysis_python_below": 0, "analysis_jit_from": 10 ** 9},
                         {"analysis_python_below": 0, "analysis_jit_from": 0}):
            with fast_paths.override(**override):
                results.append(_records_or_error(nnet, c))
        assert results[1] == results[0] and results[2] == results[0]
        verdicts.add(results[0] == "bad argument")
    assert verdicts == {True, False}


@pytest.mark.parametrize("seed", _SEEDS)
def test_matrix_lifetimes_three_ways(seed: str) -> None:
    """Matrix lifetimes (allocating / freeing command, input, output; None
    for a computation that breaks the rules) are the same from the Python
    loop, the array version and the compiled loop, on whole computations
    and on randomly broken ones."""
    from pynnet3.optimize.accesses import _matrix_lifetimes

    nnet, request, comp = _case(seed)
    out = optimize(OptimizeOptions(), nnet, request, comp)
    rng = np.random.default_rng(2000 + int(seed))
    found_none = found_some = False
    for c in [comp, out, *_mutations(comp, rng, 40), *_mutations(out, rng, 40)]:
        table = c.command_table()
        results = []
        for override in ({"analysis_python_below": 10 ** 9},
                         {"analysis_python_below": 0, "analysis_jit_from": 10 ** 9},
                         {"analysis_python_below": 0, "analysis_jit_from": 0}):
            with fast_paths.override(**override):
                try:
                    variables = ComputationVariables()
                    variables.init(c)
                except PynnetError:
                    break
                results.append(_matrix_lifetimes(table, variables, len(c.matrices)))
        assert all(r == results[0] for r in results)
        found_none |= bool(results) and results[0] is None
        found_some |= bool(results) and results[0] is not None
    assert found_some and found_none


@pytest.mark.parametrize("seed", _SEEDS)
def test_python_analysis_matches_arrays(seed: str, monkeypatch) -> None:
    """The plain-Python analysis of small computations (access records in
    the same order, merged records, matrix lifetimes, the records expanded
    to variables) gives what the array versions give -- on whole
    computations and on randomly broken ones (same checker verdict)."""
    from pynnet3.optimize import accesses

    nnet, request, comp = _case(seed)
    out = optimize(OptimizeOptions(), nnet, request, comp)
    rng = np.random.default_rng(1000 + int(seed))
    cases = [(c, rewrite) for base, rewrite in ((comp, True), (out, False))
             for c in [base, *_mutations(base, rng, 25)]]
    python_everywhere = {"analysis_python_below": 10 ** 9}
    for c, rewrite in cases:
        c.__dict__.pop("_variables_memo", None)
        with fast_paths.override(**python_everywhere):
            monkeypatch.setattr(accesses, "_MERGE_PYTHON_BELOW", 10 ** 9)
            records = _records_or_error(nnet, c)
            verdict = _verdict(nnet, c, rewrite)
            analyzer = Analyzer(nnet, c) if verdict is None else None
        c.__dict__.pop("_variables_memo", None)
        with fast_paths.override(analysis_python_below=0):
            monkeypatch.setattr(accesses, "_MERGE_PYTHON_BELOW", 0)
            assert _records_or_error(nnet, c) == records
            assert _verdict(nnet, c, rewrite) == verdict
            if analyzer is not None:
                reference = Analyzer(nnet, c)
                assert list(analyzer.matrix_accesses) == list(reference.matrix_accesses)
                for name in ("access_commands", "access_types", "bounds"):
                    x = getattr(analyzer.matrix_accesses, name)
                    y = getattr(reference.matrix_accesses, name)
                    assert x.dtype == y.dtype and np.array_equal(x, y), name
                assert list(analyzer.command_attributes) == list(reference.command_attributes)
                for name in ("offsets", "commands", "types"):
                    assert np.array_equal(getattr(analyzer.variable_accesses, name),
                                          getattr(reference.variable_accesses, name))


@pytest.mark.parametrize("seed", _SEEDS)
@pytest.mark.parametrize("level", [1, 2])
def test_optimizer_python_paths_match_arrays(seed: str, level: int, monkeypatch) -> None:
    """The whole optimizer (and the checker after every pass) with every
    plain-Python small-computation path forced on gives the same optimized
    computation as with the array versions only."""
    from pynnet3.optimize import accesses, checking_hook

    nnet, request, comp = _case(seed)
    options = OptimizeOptions(memory_compression_level=level)
    printed = []
    for below in (10 ** 9, 0):
        monkeypatch.setattr(accesses, "_MERGE_PYTHON_BELOW", below)
        with fast_paths.override(analysis_python_below=below):
            out = optimize(options, nnet, request, copy_computation(comp),
                           after_each_pass=checking_hook(nnet) if level == 1 else None)
            check_computation(nnet, out)
        printed.append(out.print(nnet.component_names, nnet.node_names))
    assert printed[0] == printed[1]


@pytest.mark.parametrize("seed", _SEEDS + curated("random", ["013", "027", "039", "055"]))
@pytest.mark.parametrize("below", [None, 10 ** 9])
def test_reused_analyses_equal_fresh_ones(seed: str, below: int | None, monkeypatch) -> None:
    """Every analysis the optimizer and the checker take over from an
    earlier pass (analyzer_of's memo, the analysis left by
    remove_unnecessary_zeroing) equals analysing the computation afresh."""
    from pynnet3.optimize import analysis, accesses, checking_hook

    nnet, request, comp = _case(seed)
    monkeypatch.setattr(analysis, "_VERIFY_REUSE", True)
    reused = []
    real = analysis._verify_same_analysis
    monkeypatch.setattr(analysis, "_verify_same_analysis",
                        lambda a, b: (reused.append(1), real(a, b)))
    overrides = {} if below is None else {"analysis_python_below": below}
    if below is not None:
        monkeypatch.setattr(accesses, "_MERGE_PYTHON_BELOW", below)
    with fast_paths.override(**overrides):
        for level in (1, 2):
            options = OptimizeOptions(memory_compression_level=level)
            analyzer = check_computation(nnet, comp, check_rewrite=True)
            out = optimize(options, nnet, request, comp, analyzer=analyzer)
            check_computation(nnet, out)
            optimize(options, nnet, request, comp, after_each_pass=checking_hook(nnet))
    assert reused        # (something was reused)


# -- the checker -------------------------------------------------------------------------

def _verdict(nnet, comp: NnetComputation, check_rewrite: bool) -> str | None:
    try:
        check_computation(nnet, comp, check_rewrite=check_rewrite)
    except (PynnetError, IndexError, KeyError, ValueError, TypeError) as e:
        return f"{type(e).__name__}: {e}"
    return None


def _slow_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the checker run every loop (no array shortcuts)."""
    monkeypatch.setattr(IndexChecker, "_all_ok", lambda self: False)
    monkeypatch.setattr(ComputationChecker, "_suspect_matrices",
                        lambda self: range(1, len(self.analyzer.matrix_accesses)))
    monkeypatch.setattr(ComputationChecker, "_compression_matrices",
                        lambda self: range(1, len(self.analyzer.matrix_accesses)))
    monkeypatch.setattr(ComputationChecker, "_debug_info_ok", lambda self, info: False)


def _mutations(comp: NnetComputation, rng: np.random.Generator, count: int):
    """Randomly broken (or not) copies of ``comp``: one argument, type or
    alpha of one command changed, a command dropped or moved, a submatrix or
    matrix resized, debug info shortened."""
    n = len(comp.commands)
    num_subs = len(comp.submatrices)
    types = list(CommandType)
    for _ in range(count):
        kind = int(rng.integers(0, 9))
        commands = list(comp.commands)
        c = int(rng.integers(0, n))
        old = commands[c]
        if kind <= 3:
            i = int(rng.integers(1, 8))
            v = getattr(old, f"arg{i}")
            choices = [-2, -1, 0, 1, v - 1, v + 1, num_subs - 1, num_subs,
                       int(rng.integers(0, max(num_subs, 1)))]
            commands[c] = replace(old, **{f"arg{i}": int(rng.choice(choices))})
        elif kind == 4:
            commands[c] = replace(old, command_type=types[int(rng.integers(0, len(types)))])
        elif kind == 5:
            commands[c] = replace(old, alpha=float(rng.choice([0.0, 1.0, 0.5, -1.0, 2000.0])))
        elif kind == 6:
            del commands[c]
        elif kind == 7:
            d = int(rng.integers(0, n))
            commands.insert(d, commands.pop(c))
        else:
            broken = copy_computation(comp)
            what = int(rng.integers(0, 3))
            if what == 0 and num_subs > 1:
                s = int(rng.integers(1, num_subs))
                info = broken.submatrices[s]
                broken.submatrices[s] = replace(info, num_rows=max(info.num_rows - 1, 1))
            elif what == 1 and len(broken.matrices) > 1:
                m = int(rng.integers(1, len(broken.matrices)))
                broken.matrices[m].num_rows += 1
            elif broken.matrix_debug_info:
                m = int(rng.integers(1, len(broken.matrix_debug_info)))
                d = broken.matrix_debug_info[m]
                broken.matrix_debug_info[m] = replace(d, cindexes=list(d.cindexes)[:-1])
            yield broken
            continue
        yield replace(comp, commands=commands)


def test_some_seed_has_compression() -> None:
    """(So that the checker test below covers the compression checks.)"""
    found = False
    for seed in _SEEDS:
        nnet, request, comp = _case(seed)
        out = optimize(OptimizeOptions(memory_compression_level=2), nnet, request, comp)
        found |= any(c.command_type is T.COMPRESS_MATRIX for c in out.commands)
    assert found


@pytest.mark.parametrize("seed", _SEEDS)
def test_checker_shortcuts_agree_with_loops(seed: str, monkeypatch) -> None:
    nnet, request, comp = _case(seed)
    out = optimize(OptimizeOptions(), nnet, request, comp)
    # (level 2 compresses every matrix kept for the backward pass)
    compressed = optimize(OptimizeOptions(memory_compression_level=2), nnet, request, comp)
    rng = np.random.default_rng(int(seed))
    cases = [(c, rewrite) for base, rewrite in ((comp, True), (out, False), (compressed, False))
             for c in [base, *_mutations(base, rng, 60)]]
    # (the shortcuts also for computations small enough to skip them)
    with fast_paths.override(check_indexes_loop_below=0, check_arrays_from=0):
        fast = [_verdict(nnet, c, rewrite) for c, rewrite in cases]
    _slow_checker(monkeypatch)
    slow = [_verdict(nnet, c, rewrite) for c, rewrite in cases]
    assert fast[0] is None and fast[61] is None and fast[122] is None  # unbroken ones pass
    assert sum(v is not None for v in slow) > 50      # most mutations are caught
    assert fast == slow


# -- row ops -------------------------------------------------------------------------

def _random_index_tables(rng: np.random.Generator, count: int) -> list[np.ndarray]:
    out = []
    for _ in range(count):
        n = int(rng.integers(1, 12))
        kind = int(rng.integers(0, 4))
        if kind == 0:       # -1s, a consecutive run, -1s
            a = np.full(n, -1)
            lo = int(rng.integers(0, n))
            hi = int(rng.integers(lo + 1, n + 1))
            a[lo:hi] = int(rng.integers(0, 20)) + np.arange(hi - lo)
        elif kind == 1:
            a = rng.integers(-1, 6, n)
        elif kind == 2:
            a = np.full(n, -1)
        else:
            a = int(rng.integers(0, 5)) + np.arange(n)
            a[int(rng.integers(0, n))] = int(rng.integers(-1, 10))
        out.append(a.astype(np.int32))
    return out


def test_special_structures_match_per_table() -> None:
    arrays = _random_index_tables(np.random.default_rng(3), 400)
    assert _special_structures(arrays) == [indexes_have_special_structure(a) for a in arrays]


def test_special_structures_of_few_tables_scanned_as_lists() -> None:
    """A few short tables (fewer entries than row_ops._LIST_SCAN_BELOW) are
    scanned as lists: the same answers."""
    from pynnet3.optimize import row_ops

    rng = np.random.default_rng(5)
    arrays = _random_index_tables(rng, 400)
    for i in range(0, 400, 4):
        group = arrays[i:i + 4]
        assert sum(map(len, group)) < row_ops._LIST_SCAN_BELOW
        assert _special_structures(group) == [indexes_have_special_structure(a) for a in group]


def test_leading_trailing_all_match_per_table() -> None:
    arrays = _random_index_tables(np.random.default_rng(4), 400)
    expected = []
    for a in arrays:
        try:
            expected.append(_leading_trailing(a < 0))
        except PynnetError:
            expected.append(None)
    assert _leading_trailing_all(arrays) == expected


# -- the pipeline and the array form ---------------------------------------------------------

@pytest.mark.parametrize("seed", _SEEDS)
def test_pipeline_same_with_and_without_hook(seed: str) -> None:
    nnet, request, comp = _case(seed)
    names = []
    hooked = optimize(OptimizeOptions(), nnet, request, comp,
                      after_each_pass=lambda name, c: names.append(name))
    plain = optimize(OptimizeOptions(), nnet, request, comp)
    assert "variable_merging_optimization" in names
    assert plain.print(nnet.component_names, nnet.node_names) == \
        hooked.print(nnet.component_names, nnet.node_names)
    assert plain.commands == hooked.commands and plain.submatrices == hooked.submatrices
    assert [(m.num_rows, m.num_cols, m.stride_type) for m in plain.matrices] == \
        [(m.num_rows, m.num_cols, m.stride_type) for m in hooked.matrices]


@pytest.mark.parametrize("seed", _SEEDS)
def test_pipeline_same_with_the_checkers_analysis(seed: str, monkeypatch) -> None:
    """The Analyzer the checker made before optimization, handed to the
    optimizer (as CachingCompiler does), gives the same optimized
    computation, and spares the first analysing pass one analysis."""
    nnet, request, comp = _case(seed)
    analyzer = check_computation(nnet, comp, check_rewrite=True)
    assert analyzer is not None
    inits = []
    real_init = Analyzer.init

    def counting_init(self, *args):
        inits.append(1)
        return real_init(self, *args)

    monkeypatch.setattr(Analyzer, "init", counting_init)
    handed = optimize(OptimizeOptions(), nnet, request, comp, analyzer=analyzer)
    with_handoff = len(inits)
    plain = optimize(OptimizeOptions(), nnet, request, comp)
    # (Only when consolidate_model_update, which runs first, left the
    # computation alone; a change there makes the analysis stale.)
    consolidated = consolidate_model_update(nnet, copy_computation(comp))
    assert with_handoff == len(inits) - with_handoff - (0 if consolidated else 1)
    assert plain.print(nnet.component_names, nnet.node_names) == \
        handed.print(nnet.component_names, nnet.node_names)
    assert plain.commands == handed.commands and plain.submatrices == handed.submatrices


def test_handed_analysis_dropped_once_a_pass_changed_the_computation(monkeypatch) -> None:
    """With a deriv-time limit, limit_derivative_times runs first and may
    change the computation: the handed analysis must not be used."""
    nnet, request, comp = _case(_SEEDS[0])
    analyzer = check_computation(nnet, comp, check_rewrite=True)
    import pynnet3.optimize.pipeline as pipeline

    seen = []
    i = [p.name for p in pipeline.PASSES].index("convert_addition_to_assignment")
    real_call = pipeline.PASSES[i].call

    def call(fn, ctx):
        seen.append(ctx.analyzer)
        return real_call(fn, ctx)

    monkeypatch.setattr(pipeline, "PASSES", pipeline.PASSES[:i] + (
        replace(pipeline.PASSES[i], call=call),) + pipeline.PASSES[i + 1:])
    optimize(OptimizeOptions(min_deriv_time=0), nnet, request, comp, analyzer=analyzer)
    optimize(OptimizeOptions(consolidate_model_update=False), nnet, request, comp,
             analyzer=analyzer)
    assert seen[0] is None and seen[1] is analyzer


@pytest.mark.parametrize("seed", _SEEDS[:2])
def test_computation_arrays_round_trip(seed: str) -> None:
    _, _, comp = _case(seed)
    copy = copy_computation(comp)
    arrays = ComputationArrays(copy)
    arrays.write_back(copy)
    assert all(a is b for a, b in zip(copy.commands, comp.commands))
    assert all(a is b for a, b in zip(copy.submatrices, comp.submatrices))
    # The tables the write-back leaves are the ones built from the records.
    from pynnet3.compile.computation import command_table, submatrix_table

    assert np.array_equal(copy.command_table(), command_table(copy.commands))
    assert np.array_equal(copy.submatrix_table(), submatrix_table(copy.submatrices))
    # A changed row gets a new record; a no-op row the NoOperation record.
    arrays = ComputationArrays(copy)
    arrays.set_no_op(0)
    arrays.table[1, 1] = arrays.table[1, 1]          # unchanged
    arrays.write_back(copy)
    assert copy.commands[0] == Command(T.NO_OPERATION)
    assert copy.commands[1] is comp.commands[1]
    assert np.array_equal(copy.command_table(), command_table(copy.commands))


@pytest.mark.parametrize("seed", _SEEDS[:3])
def test_whole_submatrices_matches_computation_method(seed: str) -> None:
    from pynnet3.optimize.renumber import whole_submatrices

    nnet, request, comp = _case(seed)
    for c in (comp, optimize(OptimizeOptions(), nnet, request, comp)):
        extra = copy_computation(c)
        # (a duplicate whole submatrix and a part: the first whole one counts)
        extra.new_submatrix(1, 0, -1, 0, -1)
        extra.new_submatrix(1, 0, 1, 0, -1)
        for x in (c, extra):
            assert whole_submatrices(x) == x.whole_submatrices()


def test_insert_commands_matches_definition() -> None:
    from pynnet3.optimize.renumber import insert_commands

    rng = np.random.default_rng(5)
    for _ in range(50):
        comp = NnetComputation()
        n = int(rng.integers(0, 8))
        comp.commands = [Command(T.NO_OPERATION_PERMANENT, float(i)) for i in range(n)]
        new = [(int(rng.integers(0, n + 1)), Command(T.NO_OPERATION_MARKER, float(100 + j)))
               for j in range(int(rng.integers(1, 6)))]
        expected = []
        for c in range(n + 1):
            expected += [cmd for pos, cmd in new if pos == c]
            if c < n:
                expected.append(comp.commands[c])
        insert_commands(new, comp)
        assert [c.alpha for c in comp.commands] == [c.alpha for c in expected]


@pytest.mark.parametrize("seed", _SEEDS)
@pytest.mark.parametrize("options", [OptimizeOptions(), OptimizeOptions(allow_left_merge=False),
                                     OptimizeOptions(allow_right_merge=False),
                                     OptimizeOptions(remove_assignments=False)])
def test_round_verdicts_match_may_be_merged(seed: str, options: OptimizeOptions) -> None:
    """At the start of a round the array verdicts, and the compiled loop's,
    are may_be_merged's, for every round of the merging (each round's start
    state checked)."""
    from pynnet3.nnet.components.base import Prop

    nnet, request, comp = _case(seed)
    states: dict[str, NnetComputation] = {}
    optimize(options, nnet, request, comp,
             after_each_pass=lambda name, c: states.setdefault(name, copy_computation(c)))
    current = copy_computation(states.get("extend_matrices")
                               or states["convert_addition_to_assignment"])
    props = [int(c.properties()) for c in nnet.components]
    rounds = 0
    while True:
        opt = VariableMergingOptimizer(options, nnet, current)
        expected = []
        for c, cmd in enumerate(current.commands):
            t = cmd.command_type
            s1 = s2 = -1
            if t is T.MATRIX_COPY and options.remove_assignments:
                s2, s1 = cmd.arg1, cmd.arg2
            elif t is T.PROPAGATE and options.propagate_in_place \
                    and props[cmd.arg1] & Prop.PROPAGATE_IN_PLACE:
                s1, s2 = cmd.arg3, cmd.arg4
            elif t in (T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE) and options.backprop_in_place \
                    and props[cmd.arg1] & Prop.BACKPROP_IN_PLACE \
                    and not {cmd.arg5, cmd.arg6} & {cmd.arg3, cmd.arg4}:
                s1, s2 = cmd.arg5, cmd.arg6
            if s1 > 0 and s2 > 0:
                left, right = opt.may_be_merged(c, s1, s2)
                if left or right:
                    expected.append((c, s1, s2, left))
        assert opt._verdicts() == expected
        assert opt._verdicts_jit() == expected
        rounds += 1
        if not opt.merge_variables():
            break
    if options == OptimizeOptions():
        assert rounds >= 2          # (merges happened: later rounds were checked too)


@pytest.mark.parametrize("seed", _SEEDS)
def test_round_verdicts_compiled_match_arrays(seed: str) -> None:
    """The compiled loop's verdicts equal the array verdicts on randomly
    changed computations too (inputs and outputs merged, stride rules,
    assignments of outputs ...), for every combination of the options."""
    from pynnet3.optimize.arrays import ComputationArrays

    nnet, request, comp = _case(seed)
    states: dict[str, NnetComputation] = {}
    optimize(OptimizeOptions(), nnet, request, comp,
             after_each_pass=lambda name, c: states.setdefault(name, copy_computation(c)))
    start = states.get("extend_matrices") or states["convert_addition_to_assignment"]
    rng = np.random.default_rng(4000 + int(seed))
    options = [OptimizeOptions(), OptimizeOptions(allow_left_merge=False),
               OptimizeOptions(allow_right_merge=False),
               OptimizeOptions(remove_assignments=False, propagate_in_place=False),
               OptimizeOptions(backprop_in_place=False)]
    compared = verdicts = 0
    for c in [start, *_mutations(start, rng, 60)]:
        for o in options:
            try:
                opt = VariableMergingOptimizer(o, nnet, ComputationArrays(copy_computation(c)))
            except (PynnetError, IndexError, KeyError, ValueError, TypeError):
                continue
            try:
                want = opt._verdicts()
            except IndexError:
                continue
            assert opt._verdicts_jit() == want
            compared += 1
            verdicts += len(want or ())
    assert compared > 100 and verdicts > 100


@pytest.mark.parametrize("seed", range(8))
def test_round_verdicts_compiled_match_arrays_synthetic(seed: int, monkeypatch) -> None:
    """The compiled loop's verdicts equal the array verdicts on random
    round states (commands, submatrices, inputs, outputs, stride rules,
    first and last accesses, component properties), where every condition
    (c1-c7, the first and last accesses, assignments) decides some
    candidates."""
    from types import SimpleNamespace

    from pynnet3.compile.computation import MatrixInfo, StrideType
    from pynnet3.nnet.components.base import Prop
    from pynnet3.optimize import variable_merging as vm

    rng = np.random.default_rng(5000 + seed)
    kinds = [T.MATRIX_COPY, T.PROPAGATE, T.BACKPROP, T.BACKPROP_NO_MODEL_UPDATE,
             T.ALLOC_MATRIX, T.ADD_ROWS]
    bits = [int(Prop.PROPAGATE_IN_PLACE), int(Prop.BACKPROP_IN_PLACE), 0]
    total = nones = 0
    for _ in range(200):
        num_matrices = int(rng.integers(3, 12))
        num_subs = int(rng.integers(2 * num_matrices, 4 * num_matrices))
        n = int(rng.integers(1, 12))
        sub = np.zeros((num_subs, 5), dtype=np.int64)
        sub[1:, 0] = rng.integers(1, num_matrices, num_subs - 1)
        whole = rng.random(num_subs) < 0.7
        props = np.array([sum(b for b in bits if rng.random() < 0.6) for _ in range(4)],
                         dtype=np.int64)
        monkeypatch.setattr(vm, "properties_array", lambda nnet, _p=props: _p)
        table = np.zeros((n, 8), dtype=np.int64)
        table[:, 0] = [int(kinds[i]) for i in rng.integers(0, len(kinds), n)]
        table[:, 1] = rng.integers(0, 4, n)
        table[:, 2:7] = rng.integers(0, num_subs, (n, 5))
        copies = table[:, 0] == int(T.MATRIX_COPY)
        table[copies, 1] = rng.integers(0, num_subs + 1, int(copies.sum()))
        alpha = np.where(rng.random(n) < 0.7, 1.0, 0.5)
        # Accesses that often make the candidates' own commands decide.
        first_nt = rng.integers(-1, n + 1, num_subs)
        last = rng.integers(-1, n + 1, num_subs)
        last_write = rng.integers(-1, n + 1, num_subs)
        for c in rng.integers(0, n, n).tolist():
            s2_col, s1_col = [(1, 2), (4, 3), (6, 5)][int(rng.integers(0, 3))]
            first_nt[table[c, s2_col] % num_subs] = c
            if rng.random() < 0.8:
                last[table[c, s1_col] % num_subs] = c
        analysis = SimpleNamespace(
            arrays=(first_nt, last, last_write), num_commands=n,
            is_input=(rng.random(num_matrices) < 0.2).tolist(),
            is_output=(rng.random(num_matrices) < 0.2).tolist(),
            last_access=lambda s, _l=last: int(_l[s]),
            data_invalidated_command=lambda c, s: c + 1 + s % 3)
        matrices = [MatrixInfo(2, 3, StrideType.EQUAL_NUM_COLS if rng.random() < 0.3
                               else StrideType.DEFAULT) for _ in range(num_matrices)]
        for config in (OptimizeOptions(), OptimizeOptions(allow_left_merge=False),
                       OptimizeOptions(allow_right_merge=False),
                       OptimizeOptions(remove_assignments=False, backprop_in_place=False)):
            fake = SimpleNamespace(
                config=config, nnet=None, analysis=analysis,
                arrays=SimpleNamespace(table=table, alpha=alpha, sub=sub, matrices=matrices),
                variables=SimpleNamespace(submatrix_is_whole_matrix=whole))
            fake._sources_and_destinations = lambda f=fake: \
                vm.VariableMergingOptimizer._sources_and_destinations(f)
            want = vm.VariableMergingOptimizer._verdicts(fake)
            assert vm.VariableMergingOptimizer._verdicts_jit(fake) == want
            total += len(want or ())
            nones += want is None
    assert total > 50 and nones > 0, (total, nones)


def test_debug_info_check_on_unexpanded_n_tilings(monkeypatch) -> None:
    """A debug-info list laid out regularly in n is checked on its first
    copy without being expanded, with the loop's verdict."""
    from pynnet3.compile.computation import MatrixDebugInfo
    from pynnet3.nnet.index_lists import CindexList, NTiling

    nnet, request, comp = _case("009")
    out = optimize(OptimizeOptions(), nnet, request, comp)

    def tiled(computation: NnetComputation, n0: int) -> NnetComputation:
        c = copy_computation(computation)
        m = 1
        rows = c.matrices[m].num_rows
        # (two copies in n of a first copy of rows/2 rows, if rows is even)
        if rows % 2:
            c.matrices[m].num_rows = rows = rows + 1
            c.submatrices[1] = replace(c.submatrices[1], num_rows=rows)
        base = np.zeros((rows // 2, 4), dtype=np.int32)
        base[:, 1] = n0
        base[:, 2] = np.arange(rows // 2)
        c.matrix_debug_info[m] = MatrixDebugInfo(
            False, CindexList.from_tiling(NTiling(base, 2, rows // 2, 1)))
        return c

    from pynnet3.errors import ComputationCheckError

    for n0 in (0, -1):
        c = tiled(out, n0)
        fast = ComputationChecker(None, nnet, c)._debug_info_ok(c.matrix_debug_info)
        assert not c.matrix_debug_info[1].cindexes.is_built   # not expanded
        assert fast == (n0 >= 0)
        # The loop (which expands the list) agrees.
        monkeypatch.setattr(ComputationChecker, "_debug_info_ok", lambda self, info: False)
        checker = ComputationChecker(None, nnet, c)
        if n0 >= 0:
            checker.check_computation_debug_info()
        else:
            with pytest.raises(ComputationCheckError, match="negative n"):
                checker.check_computation_debug_info()
        monkeypatch.undo()
