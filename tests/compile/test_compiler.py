"""The Compiler (Kaldi's nnet-compile): structure of the unoptimized
computations, and their numbers against real Kaldi's outputs.

* Every network of Kaldi's random test generator in the reference data is
  compiled for its request; the computation is checked structurally (by the
  independent checks below, and by ComputationChecker when present) and run
  with NnetComputer on the inputs Kaldi used: the output must match Kaldi's
  output, and where the request has derivatives, Kaldi's input derivatives.
* The recipe networks of reference/configs are compiled for a 1 x 150-frame
  forward request and a 4 x 50-frame training request.
* Small hand-written networks check Scale()/Const() descriptors, backprop
  through descriptors (dot-product test on linear networks), multi-segment
  computations and errors.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

from pynnet3 import fast_paths
from pynnet3.compile.compiler import (Compiler, CompilerOptions, compile_computation,
                                      consolidate_io_operations)
from pynnet3.compile.computation import (ARG_ROLES, Command, CommandType, NnetComputation,
                                         Role)
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import PynnetError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet, NodeType
from tests.helpers import SHARED_REFERENCE, curated, nnet_from_config, reference_dir

T = CommandType
_UNOPTIMIZED_TYPES = {T.ALLOC_MATRIX, T.DEALLOC_MATRIX, T.SET_CONST, T.PROPAGATE, T.BACKPROP,
                      T.MATRIX_ADD, T.ADD_ROWS, T.ADD_ROWS_MULTI, T.ADD_TO_ROWS_MULTI,
                      T.ADD_ROW_RANGES, T.ACCEPT_INPUT, T.PROVIDE_OUTPUT,
                      T.NO_OPERATION_PERMANENT, T.NO_OPERATION_MARKER}
_READS = {Role.SUBMATRIX_READ, Role.SUBMATRIX_RW, Role.SUBMATRIX_MAYBE_READ,
          Role.SUBMATRIX_MAYBE_RW}
_SUB_ROLES = _READS | {Role.SUBMATRIX_WRITE, Role.SUBMATRIX_ALLOC}


# -- an independent structural check ----------------------------------------------------

def check_structure(nnet: Nnet, computation: NnetComputation, compiler: Compiler) -> None:
    """Allocation, dims and read-after-write at whole-matrix granularity."""
    comp = computation
    subs, mats = comp.submatrices, comp.matrices
    rows = lambda s: subs[s].num_rows  # noqa: E731
    cols = lambda s: subs[s].num_cols  # noqa: E731
    allocated = [False] * len(mats)
    written = [False] * len(mats)
    freed = [False] * len(mats)
    provided: set[int] = set()
    for i, c in enumerate(comp.commands):
        t = c.command_type
        assert t in _UNOPTIMIZED_TYPES, f"c{i}: unexpected command type {t.name}"
        roles = ARG_ROLES[t]
        for pos, role in enumerate(roles):
            s = c.args[pos]
            if role not in _SUB_ROLES:
                continue
            if role in (Role.SUBMATRIX_MAYBE_READ, Role.SUBMATRIX_MAYBE_RW) and s == 0:
                continue
            if t is T.PROPAGATE and pos == 2 and s == 0:
                continue  # a component that needs no input (empty input step)
            assert 0 < s < len(subs), f"c{i}: bad submatrix {s}"
            m = subs[s].matrix_index
            if t is T.ALLOC_MATRIX:
                assert not allocated[m] and not freed[m], f"c{i}: m{m} allocated twice"
                assert comp.is_whole_matrix(s)
                allocated[m] = True
            elif t is T.DEALLOC_MATRIX:
                assert allocated[m] and not freed[m], f"c{i}: m{m} freed before allocation"
                freed[m] = True
            elif t is T.ACCEPT_INPUT:
                assert not freed[m] and comp.is_whole_matrix(s)
                allocated[m] = written[m] = True
            else:
                assert allocated[m] and not freed[m], f"c{i}: m{m} used while not allocated"
                if role in _READS:
                    assert written[m], f"c{i}: m{m} read before written"
                if role in (Role.SUBMATRIX_WRITE, Role.SUBMATRIX_RW, Role.SUBMATRIX_MAYBE_RW):
                    written[m] = True
        if t is T.PROVIDE_OUTPUT:
            provided.add(subs[c.arg1].matrix_index)
        elif t is T.MATRIX_ADD:
            assert (rows(c.arg1), cols(c.arg1)) == (rows(c.arg2), cols(c.arg2)), f"c{i}"
        elif t is T.ADD_ROWS:
            idx = comp.indexes[c.arg3]
            assert len(idx) == rows(c.arg1) and cols(c.arg1) == cols(c.arg2), f"c{i}"
            assert idx.min() >= -1 and idx.max() < rows(c.arg2), f"c{i}"
        elif t in (T.ADD_ROWS_MULTI, T.ADD_TO_ROWS_MULTI):
            pairs = comp.indexes_multi[c.arg2]
            assert len(pairs) == rows(c.arg1), f"c{i}"
            for s, r in pairs.tolist():
                assert (s, r) == (-1, -1) or (0 < s < len(subs) and 0 <= r < rows(s)
                                              and cols(s) == cols(c.arg1)), f"c{i}"
                if s != -1:
                    m = subs[s].matrix_index
                    assert allocated[m] and not freed[m] and written[m], f"c{i}"
        elif t is T.ADD_ROW_RANGES:
            ranges = comp.indexes_ranges[c.arg3]
            assert len(ranges) == rows(c.arg1) and cols(c.arg1) == cols(c.arg2), f"c{i}"
            ok = ranges[:, 0] != -1
            assert np.all(ranges[ok, 0] < ranges[ok, 1]) and np.all(ranges[ok, 1] <= rows(c.arg2))
        elif t is T.PROPAGATE:
            component = nnet.components[c.arg1]
            if c.arg3 != 0:
                assert cols(c.arg3) == component.input_dim(), f"c{i}: input dim"
            assert cols(c.arg4) == component.output_dim(), f"c{i}: output dim"
        elif t is T.BACKPROP:
            component = nnet.components[c.arg1]
            assert cols(c.arg5) == component.output_dim(), f"c{i}: out-deriv dim"
            if c.arg6 != 0:
                assert cols(c.arg6) == component.input_dim(), f"c{i}: in-deriv dim"
    # Everything allocated is freed, except what is handed to the user.
    for m in range(1, len(mats)):
        assert allocated[m], f"m{m} never allocated"
        assert freed[m] != (m in provided), f"m{m}: freed={freed[m]}, provided={m in provided}"
    # One Propagate per component step, with the component of the step's node.
    component_steps = [s for s in compiler.steps
                       if nnet.nodes[s.node_index].node_type is NodeType.COMPONENT]
    props = [c for c in comp.commands if c.command_type is T.PROPAGATE]
    assert len(props) == len(component_steps)
    for c, s in zip(props, component_steps):
        assert c.arg1 == nnet.nodes[s.node_index].component_index and c.arg4 == s.value
    markers = sum(c.command_type is T.NO_OPERATION_MARKER for c in comp.commands)
    assert markers == len(compiler.requests)
    if comp.matrix_debug_info:
        assert len(comp.matrix_debug_info) == len(mats)
        for m in range(1, len(mats)):
            assert len(comp.matrix_debug_info[m].cindexes) == mats[m].num_rows


def kaldi_check(nnet: Nnet, computation: NnetComputation) -> None:
    """ComputationChecker (optimize/check.py), where it exists."""
    try:
        from pynnet3.optimize.check import check_computation
    except ImportError:
        return
    check_computation(nnet, computation, check_rewrite=True)


def compile_and_check(nnet: Nnet, requests) -> tuple[Compiler, NnetComputation]:
    compiler = Compiler(requests, nnet)
    computation = compiler.create_computation(CompilerOptions())
    check_structure(nnet, computation, compiler)
    kaldi_check(nnet, computation)
    return compiler, computation


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


def _computer(computation, nnet):
    from pynnet3.compute.computer import NnetComputeOptions, NnetComputer

    return NnetComputer(NnetComputeOptions(), computation, nnet,
                        nnet_to_update=copy.deepcopy(nnet))


# -- Kaldi's random networks ----------------------------------------------------------------

# Requests whose input derivative is ill-conditioned: standard deviations over
# one-frame windows are sqrt(float rounding noise), so Kaldi's and our order of
# float operations give visibly different derivatives (the forward agrees).
_ILL_CONDITIONED_DERIV = {"045": 1e-2}

RANDOM = sorted(p.name for p in (SHARED_REFERENCE / "random").glob("[0-9]*")) \
    if (SHARED_REFERENCE / "random").is_dir() else ["000"]


@pytest.mark.parametrize("seed", RANDOM)
def test_random_network_against_kaldi(seed):
    import kaldiio

    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    d = reference_dir() / "random" / seed
    nnet = read_nnet(str(d / "final.raw"))
    request = read_request_file(str(d / "request.kaldi-text"))
    compiler, computation = compile_and_check(nnet, request)
    ark = {k: np.asarray(v) for k, v in kaldiio.load_ark(str(d / "io.ark"))}
    computer = _computer(computation, nnet)
    for io in request.inputs:
        computer.accept_input(io.name, ark["in_" + io.name])
    computer.run()
    for io in request.outputs:
        assert rel_err(computer.get_output(io.name), ark["out_" + io.name]) < 1e-4
    if not any(io.has_deriv for io in request.outputs):
        return
    for io in request.outputs:
        if io.has_deriv:
            computer.accept_input(io.name, ark["outderiv_" + io.name])
    try:
        computer.run()
    except PynnetError as e:
        if "NotImplementedError" in str(e):
            pytest.skip(f"forward checked; a component's backprop is not implemented yet ({e})")
        raise
    for io in request.inputs:
        if io.has_deriv:
            tol = _ILL_CONDITIONED_DERIV.get(seed, 1e-4)
            assert rel_err(computer.get_output(io.name), ark["inderiv_" + io.name]) < tol
    if (d / "updated.txt.raw").is_file():
        _check_model_update(nnet, computer.nnet_to_update, computation,
                            read_nnet(str(d / "updated.txt.raw")))


def _check_model_update(nnet: Nnet, ours: Nnet, computation: NnetComputation,
                        kaldi: Nnet) -> None:
    """The parameter change of every component that has one Backprop: Kaldi
    consolidates the model updates of components used at several time steps
    into one Backprop (an optimization), and natural-gradient updates depend
    on how they are split, so those are left out."""
    calls: dict[int, int] = {}
    for c in computation.commands:
        if c.command_type is T.BACKPROP:
            calls[c.arg1] = calls.get(c.arg1, 0) + 1
    checked = 0
    for k, count in calls.items():
        before = nnet.components[k]
        if count != 1 or not before.is_updatable() or not hasattr(before, "vectorize"):
            continue
        delta_kaldi = kaldi.components[k].vectorize() - before.vectorize()
        delta_ours = ours.components[k].vectorize() - before.vectorize()
        assert rel_err(delta_ours, delta_kaldi) < 1e-3, nnet.component_names[k]
        checked += 1
    assert checked > 0 or not calls


@pytest.mark.parametrize("seed", curated("random", ["006", "024", "037", "038", "059"]))
def test_fast_input_locations_agree_with_general_path(seed):
    """The vectorised input-location code gives the same computation as
    asking the Descriptors row by row (LSTM/TDNN nets with IfDefined)."""
    from pynnet3.compile.request_io import read_request_file
    from pynnet3.compile.model_io import read_nnet

    d = reference_dir() / "random" / seed
    if not d.is_dir():
        pytest.skip(f"{d} not in the reference data")
    nnet = read_nnet(str(d / "final.raw"))
    request = read_request_file(str(d / "request.kaldi-text"))
    a = Compiler(request, nnet).create_computation()
    with fast_paths.override(input_locations=False):
        b = Compiler(request, nnet).create_computation()
    names = (nnet.component_names, nnet.node_names)
    assert a.print(*names) == b.print(*names)
    assert all(np.array_equal(x, y) for x, y in zip(a.indexes_multi, b.indexes_multi))


# -- recipe networks ----------------------------------------------------------------------

_FAST_CONFIGS = {"tdnn_xent_nnet3_wsj_1b", "tdnn_attention_swbd_1a",
                 "cnn_e2eali_ocr_bentham_1a"}
CONFIGS = sorted(p.name for p in (SHARED_REFERENCE / "configs").iterdir() if p.is_dir()) \
    if (SHARED_REFERENCE / "configs").is_dir() else []


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in _FAST_CONFIGS
                                               else pytest.mark.slow) for n in CONFIGS])
def test_recipe_config_compiles(name):
    from pynnet3.compile.request_io import build_request

    path = reference_dir() / "configs" / name / "ref.config"
    nnet = Nnet()
    nnet.read_config(path.read_text(), str(path))
    outputs = nnet.output_node_names()
    for num_seq, frames, model_deriv in ((1, 150, False), (4, 50, True)):
        request = build_request(nnet, num_seq, frames, need_model_derivative=model_deriv,
                                outputs=outputs)
        compiler, computation = compile_and_check(nnet, request)
        num_backprop = sum(c.command_type is T.BACKPROP for c in computation.commands)
        if model_deriv:
            # Every updatable component step (nonzero learning rate) backprops.
            assert num_backprop >= sum(
                1 for s in compiler.steps if nnet.nodes[s.node_index].node_type
                is NodeType.COMPONENT and nnet.component_for_node(s.node_index).is_updatable())
        else:
            assert num_backprop == 0


# -- small hand-written networks ----------------------------------------------------------

def _idx(ts, n=0):
    return [Index(n, t, 0) for t in ts]


_SCALE_CONST = """
input-node name=input dim=3
dim-range-node name=alias input-node=input dim-offset=0 dim=3
output-node name=output input=Append(Sum(Scale(-2.0, Offset(input, -1)), alias), Const(1.5, 2), Scale(0.5, input))
"""


def test_scale_and_const_descriptors():
    nnet = nnet_from_config(_SCALE_CONST)
    request = ComputationRequest([IoSpecification("input", _idx(range(0, 6)))],
                                 [IoSpecification("output", _idx(range(1, 6)))])
    compiler, comp = compile_and_check(nnet, request)
    set_consts = [c.alpha for c in comp.commands if c.command_type is T.SET_CONST]
    assert 1.5 in set_consts
    alphas = sorted(c.alpha for c in comp.commands
                    if c.command_type in (T.ADD_ROWS, T.MATRIX_ADD, T.ADD_ROWS_MULTI))
    assert alphas == [-2.0, 0.5, 1.0]
    x = np.random.default_rng(0).standard_normal((6, 3)).astype(np.float32)
    computer = _computer(comp, nnet)
    computer.accept_input("input", x)
    computer.run()
    expected = np.concatenate([-2.0 * x[0:5] + x[1:6], np.full((5, 2), 1.5), 0.5 * x[1:6]],
                              axis=1)
    assert rel_err(computer.get_output("output"), expected) < 1e-6


_LINEAR = """
input-node name=input dim=4
input-node name=ivector dim=3
component name=a1 type=AffineComponent input-dim=15 output-dim=5
component name=a2 type=AffineComponent input-dim=10 output-dim=2
component-node name=a1 component=a1 input=Append(Offset(input, -1), Sum(input, Offset(input, 2)), Offset(input, 1), ReplaceIndex(ivector, t, 0))
component-node name=a2 component=a2 input=Append(a1, Offset(a1, -2))
dim-range-node name=a2_alias input-node=a2 dim-offset=0 dim=2
output-node name=output input=Sum(Scale(2.0, a2), Offset(a2_alias, 1))
"""


@pytest.mark.parametrize("num_seq", [1, 3])
def test_backprop_through_descriptors_dot_product(num_seq):
    """For an affine network f, <g, f(x) - f(0)> == <in_deriv, x> for every g."""
    nnet = nnet_from_config(_LINEAR)
    ts_in, ts_out = range(-3, 9), range(0, 5)
    inputs = [IoSpecification("input", [i for n in range(num_seq) for i in _idx(ts_in, n)], True),
              IoSpecification("ivector", [Index(n, 0, 0) for n in range(num_seq)], True)]
    outputs = [IoSpecification("output", [i for n in range(num_seq) for i in _idx(ts_out, n)],
                               True)]
    request = ComputationRequest(inputs, outputs, need_model_derivative=True)
    compiler, comp = compile_and_check(nnet, request)
    # The ivector row feeds many rows: its derivative is gathered by AddRowRanges
    # (or by AddToRowsMulti / several AddRows); every pattern must be right.
    rng = np.random.default_rng(num_seq)
    x = {io.name: rng.standard_normal((len(io.indexes), nnet.input_dim(io.name)))
         .astype(np.float32) for io in inputs}
    g = rng.standard_normal((len(outputs[0].indexes), 2)).astype(np.float32)

    def run(scale: float):
        computer = _computer(comp, nnet)
        for io in inputs:
            computer.accept_input(io.name, scale * x[io.name])
        computer.run()
        out = computer.get_output("output").astype(np.float64).copy()
        computer.accept_input("output", g)
        computer.run()
        return out, {io.name: computer.get_output(io.name).astype(np.float64) for io in inputs}

    y1, derivs = run(1.0)
    y0, _ = run(0.0)
    lhs = float(np.sum(g * (y1 - y0)))
    rhs = sum(float(np.sum(derivs[k] * x[k])) for k in x)
    assert abs(lhs - rhs) <= 1e-4 * max(abs(lhs), 1.0)


def test_multi_segment_computation():
    """Two segments (as for online decoding): each gets its own I/O, separated
    by a marker; the second segment's output equals a one-segment computation's."""
    nnet = nnet_from_config("""
input-node name=input dim=2
component name=a1 type=AffineComponent input-dim=4 output-dim=3
component-node name=a1 component=a1 input=Append(Offset(input, -1), input)
output-node name=output input=a1
""")
    seg1 = ComputationRequest([IoSpecification("input", _idx(range(-1, 4)))],
                              [IoSpecification("output", _idx(range(0, 4)))])
    seg2 = ComputationRequest([IoSpecification("input", _idx(range(4, 8)))],
                              [IoSpecification("output", _idx(range(4, 8)))])
    compiler, comp = compile_and_check(nnet, [seg1, seg2])
    kinds = [c.command_type for c in comp.commands]
    first_marker = kinds.index(T.NO_OPERATION_MARKER)
    assert kinds[:first_marker].count(T.ACCEPT_INPUT) == 1
    assert kinds[first_marker:].count(T.ACCEPT_INPUT) == 1
    assert kinds[:first_marker].count(T.PROVIDE_OUTPUT) == 1
    x = np.random.default_rng(5).standard_normal((9, 2)).astype(np.float32)
    computer = _computer(comp, nnet)
    computer.accept_input("input", x[:5])
    computer.run()
    out1 = computer.get_output("output").copy()
    computer.accept_input("input", x[5:])
    computer.run()
    out2 = computer.get_output("output").copy()
    whole = compile_computation(ComputationRequest([IoSpecification("input", _idx(range(-1, 8)))],
                                                   [IoSpecification("output",
                                                                    _idx(range(0, 8)))]), nnet)
    ref = _computer(whole, nnet)
    ref.accept_input("input", x)
    ref.run()
    expected = ref.get_output("output")
    assert rel_err(np.concatenate([out1, out2]), expected) < 1e-6


def test_model_derivative_not_allowed_with_segments():
    nnet = nnet_from_config(_SCALE_CONST)
    r = ComputationRequest([IoSpecification("input", _idx(range(0, 3)))],
                           [IoSpecification("output", _idx(range(1, 3)), True)],
                           need_model_derivative=True)
    with pytest.raises(PynnetError):
        Compiler([r, r], nnet)


def test_uncomputable_output_is_explained():
    nnet = nnet_from_config(_SCALE_CONST)
    request = ComputationRequest([IoSpecification("input", _idx(range(0, 3)))],
                                 [IoSpecification("output", _idx(range(0, 3)))])
    with pytest.raises(PynnetError, match="not computable"):
        compile_computation(request, nnet)


def test_debug_info_optional():
    nnet = nnet_from_config(_SCALE_CONST)
    request = ComputationRequest([IoSpecification("input", _idx(range(0, 4)))],
                                 [IoSpecification("output", _idx(range(1, 4)))])
    comp = compile_computation(request, nnet, CompilerOptions(output_debug_info=False))
    assert comp.matrix_debug_info == []
    comp = compile_computation(request, nnet)
    info = comp.matrix_debug_info
    assert info[1].cindexes[0] == (0, Index(0, 0, 0)) and not info[1].is_deriv


def test_consolidate_io_operations():
    a = Command(T.ACCEPT_INPUT, 1.0, 1, 0)
    p = Command(T.PROVIDE_OUTPUT, 1.0, 2, 1)
    x = Command(T.SET_CONST, 0.0, 2)
    m = Command(T.NO_OPERATION_MARKER)
    comp = NnetComputation(commands=[x, p, a, m, p, x, a])
    consolidate_io_operations(comp)
    assert comp.commands == [a, x, p, m, a, x, p]


# -- the definitions alone give what the accelerations give ---------------------------------

_RECURRENT = """
input-node name=input dim=4
component name=a1 type=AffineComponent input-dim=7 output-dim=3
component name=t1 type=TanhComponent dim=3
component name=out type=AffineComponent input-dim=3 output-dim=2
component-node name=a1 component=a1 input=Append(input, IfDefined(Offset(t1, -1)))
component-node name=t1 component=t1 input=a1
component-node name=out component=out input=t1
output-node name=output input=out
"""


@pytest.mark.parametrize("config", ["tdnn", "recurrent"])
@pytest.mark.parametrize("num_sequences,deriv", [(1, False), (3, True)])
def test_reference_fast_paths_compile_the_same(config, num_sequences, deriv):
    """With every acceleration off (``fast_paths.REFERENCE``: Kaldi's graph
    builder, row-by-row input locations, context by graph building, plain
    analysis loops) the compiled and optimized computation is the one the
    fast paths give, command for command."""
    import dataclasses

    from pynnet3.cache import CachingCompiler, CachingCompilerOptions
    from pynnet3.compile.request_io import build_request
    from tests.helpers_graph import TDNN

    nnet = nnet_from_config(TDNN if config == "tdnn" else _RECURRENT)

    def printed() -> str:
        request = build_request(nnet, num_sequences, 7, extra_left_context=2,
                                need_model_derivative=deriv)
        compiler = CachingCompiler(nnet, CachingCompilerOptions(), use_disk=False)
        return compiler.compile(request).print(nnet.component_names, nnet.node_names)

    fast = printed()
    with fast_paths.override(**dataclasses.asdict(fast_paths.REFERENCE)):
        assert fast_paths.current() == fast_paths.REFERENCE
        reference = printed()
    assert reference == fast
