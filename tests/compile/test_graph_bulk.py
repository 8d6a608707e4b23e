"""The vectorised graph builder (compile/graph/bulk.py) gives the exact algorithm's graph.

``graph_builder(nnet, False)`` runs Kaldi's algorithm
one cindex at a time, asking every Descriptor and Component; that is the
reference.  The default builder takes the vectorised path when it applies;
every test here compares the whole state (cindex_ids in order, dependencies,
input flags, computable states, usable counts, queue flags, depend_on_this,
computable info) before and after pruning, and checks which path was taken.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.graph.builder import ComputationGraphBuilder
from pynnet3.compile.graph.bulk import BulkPlan, build_graph_bulk
from pynnet3.compile.graph.computation_graph import ComputationGraph
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import PynnetError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from tests.helpers_graph import (MIXED, TDNN, frames_of, graph_builder, reference_random_cases,
                                 tdnnf_config)
from tests.helpers import enough, nnet_from_config, reference_dir


def _state(nnet: Nnet, request: ComputationRequest, fast: bool):
    """(took the vectorised path, state after compute(), state after prune() or None)."""
    b = graph_builder(nnet, fast)
    b.compute(request)
    bulk = b._bulk is not None
    g = b.graph
    before = (list(g.cindexes), [list(d) for d in g.dependencies], list(g.is_input),
              list(b.computable), list(b.usable_count), list(b.queued),
              list(b.dependencies_computed), [list(d) for d in b.depend_on_this],
              b.get_computable_info())
    b.check()
    after = None
    if b.all_outputs_are_computable():
        b.prune()
        after = (list(g.cindexes), [list(d) for d in g.dependencies], list(g.is_input),
                 list(g.segment_ends), list(b.computable), list(b.usable_count))
    return bulk, before, after


def _assert_same(nnet: Nnet, request: ComputationRequest, what: str = "") -> bool:
    """Compare the two paths; return whether the fast one was vectorised."""
    bulk, before, after = _state(nnet, request, True)
    ref_bulk, ref_before, ref_after = _state(nnet, request, False)
    assert not ref_bulk
    for i, (a, b) in enumerate(zip(before, ref_before)):
        assert a == b, f"{what}: field {i} of the state after compute() differs"
    assert after == ref_after, f"{what}: state after prune() differs"
    return bulk


def _mixed_request(t0: int, t1: int) -> ComputationRequest:
    # Outputs ordered t-major (as Kaldi's merged egs are), inputs n-major.
    return ComputationRequest(
        inputs=[IoSpecification("input", frames_of(t0, t1, 2)),
                IoSpecification("ivector", [Index(n, 0, 0) for n in range(2)])],
        outputs=[IoSpecification("output", [Index(n, t, 0) for t in range(10) for n in range(2)])])


def test_every_descriptor_kind_and_failover_pruning():
    nnet = nnet_from_config(MIXED)
    assert _assert_same(nnet, _mixed_request(-20, 30), "enough input")
    b = ComputationGraphBuilder(nnet)
    b.compute(_mixed_request(-20, 30))
    num_before = len(b.graph)
    b.prune()
    y = nnet.get_node_index("y")
    assert y not in {node for node, _ in b.graph.cindexes}   # Failover used Offset(input, -1)
    assert len(b.graph) < num_before
    # Too few input frames: some cindexes are not computable, the exact
    # algorithm runs (and the answer is still the same).
    assert not _assert_same(nnet, _mixed_request(-1, 12), "short input")


def test_descriptor_asked_per_cindex():
    """A Descriptor the vectorised path does not know is asked once per cindex."""
    from pynnet3.nnet.descriptor import Descriptor

    class OwnDescriptor(Descriptor):
        pass

    nnet = nnet_from_config(MIXED)
    for name in ("a_input", "b_input"):
        node = nnet.nodes[nnet.get_node_index(name)]
        node.descriptor = OwnDescriptor(node.descriptor.parts)
    plans = BulkPlan(nnet).plans
    assert plans[nnet.get_node_index("b_input")].hook is not None
    assert _assert_same(nnet, _mixed_request(-20, 30), "own descriptor")


def test_cindex_index_against_a_dict():
    """Batches that widen the t range and add (n, x) pairs: the dense table
    grows, then turns sorted (kNoTime); ids as a dict would give them."""
    from pynnet3.compile.graph.cindex_index import CindexIndex
    from pynnet3.nnet.index import K_NO_TIME

    rng = np.random.default_rng(0)
    index = CindexIndex(5)
    ref: dict[tuple, int] = {}
    for batch in range(12):
        size = int(rng.integers(1, 300))
        spread = 10 * (batch + 1) ** 3
        cols = [rng.integers(0, 5, size), rng.integers(0, 2 + batch, size),
                rng.integers(-spread, spread, size), rng.integers(0, 2, size)]
        if batch == 9:
            cols[2][:5] = K_NO_TIME
        cols = [c.astype(np.int64) for c in cols]
        ids, first = index.resolve(*cols)
        expected, expected_first = [], []
        for i, key in enumerate(zip(*(c.tolist() for c in cols))):
            if key not in ref:
                ref[key] = len(ref)
                expected_first.append(i)
            expected.append(ref[key])
        assert ids.tolist() == expected and first.tolist() == expected_first
        probe = [c[::-1].copy() for c in cols]
        probe[2][0] += 1
        want = [ref.get(k, -1) for k in zip(*(c.tolist() for c in probe))]
        assert index.lookup(*probe).tolist() == want
    assert index._grid is None and index.count == len(ref)


def test_far_apart_frames():
    """Frames a million apart: the dense cindex table would be huge; the
    sorted one is used, with the same answer."""
    nnet = nnet_from_config(tdnnf_config(2))
    frames = frames_of(-20, 30) + [Index(0, t, 0) for t in range(10 ** 6 - 20, 10 ** 6 + 30)]
    request = ComputationRequest(
        inputs=[IoSpecification("input", frames), IoSpecification("ivector", frames_of(0, 1))],
        outputs=[IoSpecification("output", [Index(0, 0, 0), Index(0, 10 ** 6, 0)])])
    assert _assert_same(nnet, request, "far apart")
    b = ComputationGraphBuilder(nnet)
    b.compute(request)
    assert b._bulk.index._grid is None


@pytest.mark.parametrize("seed", range(3))
def test_random_requests_on_small_networks(seed: int):
    """Odd n and x values, shuffled outputs, missing frames (exact path) or not."""
    import random

    rng = random.Random(seed)
    nets = [nnet_from_config(MIXED), nnet_from_config(tdnnf_config(3)), nnet_from_config(TDNN)]
    vectorised = 0
    for case in range(40):
        nnet = rng.choice(nets)
        ns = rng.sample(range(-3, 70), rng.randint(1, 3))
        xs = rng.choice([[0], [0, 1], [5]])
        clean = rng.random() < 0.6
        lo, hi = (-40, 70) if clean else (rng.randint(-30, 0), rng.randint(5, 40))
        inputs = [IoSpecification("input", [
            Index(n, t, x) for n in ns for x in xs for t in range(lo, hi)
            if clean or rng.random() > 0.02])]
        if nnet.get_node_index("ivector") != -1:
            inputs.append(IoSpecification("ivector", [
                Index(n, t, x) for n in ns for x in xs for t in rng.choice([[0], [-5, 0, 5]])]))
        outputs = sorted({Index(n, rng.randint(-5, 30), x) for n in ns for x in xs
                          for _ in range(rng.randint(1, 20))})
        rng.shuffle(outputs)
        request = ComputationRequest(inputs=inputs,
                                     outputs=[IoSpecification("output", outputs)])
        vectorised += _assert_same(nnet, request, f"seed {seed} case {case}")
    assert vectorised >= 10


def test_fallbacks_give_the_exact_answer():
    nnet = nnet_from_config(MIXED)
    plan = BulkPlan(nnet)
    assert plan.eligible
    # Listed twice, and an unknown node: the exact algorithm raises.
    req = _mixed_request(-20, 30)
    req.inputs[0].indexes.append(Index(0, 0, 0))
    assert build_graph_bulk(plan, nnet, req) is None
    with pytest.raises(PynnetError, match="more than once"):
        ComputationGraphBuilder(nnet).compute(req)
    req = _mixed_request(-20, 30)
    req.outputs[0].name = "nope"
    assert build_graph_bulk(plan, nnet, req) is None
    # A recurrent network never takes the vectorised path.
    rnn = nnet_from_config("""
input-node name=input dim=4
component name=a1 type=AffineComponent input-dim=7 output-dim=3
component name=t1 type=TanhComponent dim=3
component-node name=a1 component=a1 input=Append(input, IfDefined(Offset(r, -1)))
component-node name=r component=t1 input=a1
output-node name=output input=r
""")
    assert not BulkPlan(rnn).eligible
    req = ComputationRequest(inputs=[IoSpecification("input", frames_of(0, 8))],
                             outputs=[IoSpecification("output", frames_of(0, 8))])
    assert not _assert_same(rnn, req, "rnn")


def test_multi_segment_after_vectorised_first_segment():
    nnet = nnet_from_config(MIXED)
    second = ComputationRequest(
        inputs=[IoSpecification("input", frames_of(30, 40, 2))],
        outputs=[IoSpecification("output", [Index(n, t, 0) for t in range(10, 20)
                                            for n in range(2)])])
    states = []
    for fast in (True, False):
        b = graph_builder(nnet, fast)
        b.compute(_mixed_request(-20, 30))
        b.prune()
        assert b._bulk_pruned == fast
        b.compute(second)
        assert b.all_outputs_are_computable()
        b.prune()
        states.append((list(b.graph.cindexes), list(b.graph.dependencies),
                       list(b.graph.is_input), list(b.graph.segment_ends)))
    assert states[0] == states[1]
    assert len(states[0][3]) == 2


def test_graph_arrays_match_the_lists():
    nnet = nnet_from_config(MIXED)
    b = ComputationGraphBuilder(nnet)
    b.compute(_mixed_request(-20, 30))
    b.prune()
    graph = b.graph
    assert not graph.has_lists()
    arrays = graph.arrays()
    assert arrays.node.dtype == np.int32 and len(graph) == len(arrays.node)
    # The same graph built from lists gives the same columns.
    copy = ComputationGraph()
    for cindex, is_input, deps in zip(graph.cindexes, graph.is_input, graph.dependencies):
        cid, _ = copy.add_cindex(cindex, is_input)
        copy.dependencies[cid] = list(deps)
    for a, b2 in zip(arrays, copy.arrays()):
        assert np.array_equal(a, b2)
    # Reading the lists keeps the arrays; changing the graph drops them.
    assert graph.arrays() is arrays and graph.get_cindex_id(graph.cindexes[3]) == 3
    cid, new = graph.add_cindex((0, Index(5, 5, 5)), False)
    assert new and cid == len(arrays.node) and graph.has_lists()
    assert len(graph.arrays().node) == cid + 1
    assert np.array_equal(graph.arrays().dep_flat, arrays.dep_flat)


# -- real networks ------------------------------------------------------------------------

def test_same_graph_on_kaldi_random_requests():
    """Kaldi's own test networks and requests (those it compiled)."""
    compared = vectorised = 0
    for name, nnet, request in reference_random_cases():
        vectorised += _assert_same(nnet, request, name)
        compared += 1
    print(f"\n{compared} reference requests, {vectorised} built by the vectorised path")
    assert compared >= enough(50, 15)
    # Kaldi's random networks are a third recurrent; most others are clean.
    assert vectorised >= enough(30, 8)


@pytest.mark.parametrize("name", [
    "cnn_e2eali_ocr_bentham_1a", "tdnn_attention_swbd_1a", "tdnn_lstm_swbd_1e",
    "tdnn_xent_nnet3_wsj_1b", "tdnnf_librispeech_1d",
    # Slow on the exact path, and they do not take the vectorised one anyway.
    pytest.param("lstmp_swbd_6j", marks=pytest.mark.slow),
    pytest.param("tdnn_norm_opgru_ami_1a", marks=pytest.mark.slow),
    pytest.param("xvector_sre16_1a", marks=pytest.mark.slow)])
def test_same_graph_on_recipe_networks(name: str):
    path = reference_dir() / "configs" / name / "ref.config"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    try:
        nnet = nnet_from_config(path.read_text())
    except PynnetError as e:
        if "unknown component type" in str(e):
            pytest.skip(f"component support missing: {e}")
        raise
    feedforward = BulkPlan(nnet).eligible
    # Two sequences, 8 output frames, input wide enough for any of these
    # networks (everything computable: the vectorised path for feed-forward ones).
    inputs = [IoSpecification("input", frames_of(-60, 70, 2))]
    if nnet.get_node_index("ivector") != -1:
        inputs.append(IoSpecification("ivector", frames_of(-60, 70, 2)))
    out_frames = [Index(n, t, 0) for t in range(0, 8) for n in range(2)]
    if name.startswith("xvector"):
        out_frames = [Index(n, 0, 0) for n in range(2)]   # one embedding per sequence
    request = ComputationRequest(inputs=inputs, outputs=[IoSpecification("output", out_frames)])
    assert _assert_same(nnet, request, name) == (feedforward and name not in (
        "xvector_sre16_1a",))   # statistics pooling has optional inputs: not "clean"


def test_same_graph_on_vosk_model(vosk_mdl: Path):
    from pynnet3.compile.request_io import build_request
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(str(vosk_mdl))
    # Every node in bulk (TdnnComponent through its offsets hook): no per-cindex calls.
    assert all(p.hook is None for p in BulkPlan(nnet).plans)
    request = build_request(nnet, 2, 150, need_model_derivative=True, context=(34, 34))
    assert _assert_same(nnet, request, "vosk")


# Offsets in t, n and x, Round() and ReplaceIndex(): every op of the
# compiled closure (jit_bulk.py).
_PROGRAMS = """
input-node name=input dim=2
input-node name=ivector dim=2
component name=a type=AffineComponent input-dim=6 output-dim=2
component-node name=a component=a input=Append(Offset(input, -3), Round(Offset(input, 1), 2), \
ReplaceIndex(ivector, t, 0))
component name=b type=AffineComponent input-dim=4 output-dim=2
component-node name=b component=b input=Append(IfDefined(Offset(a, 5)), Sum(Offset(a, -2), a))
component name=c type=RectifiedLinearComponent dim=4
component-node name=c component=c input=Append(Offset(b, 0, 0), Offset(a, 1))
output-node name=output input=c
"""


def _closure_equals_the_numpy_levels(nnet: Nnet, request: ComputationRequest, what: str):
    """The compiled closure runs (status OK) and gives the NumPy levels' graph."""
    from pynnet3.compile.graph import jit_bulk

    plan = BulkPlan(nnet)
    assert plan.jit_plan is not None
    calls = []
    real = jit_bulk._closure

    def spy(*args):
        result = real(*args)
        calls.append(int(result[0]))
        return result
    jit_bulk._closure = spy
    try:
        fast = build_graph_bulk(plan, nnet, request, jit_from=0)
    finally:
        jit_bulk._closure = real
    assert calls == [jit_bulk.OK]
    plan.jit_plan = None
    slow = build_graph_bulk(plan, nnet, request)
    assert fast is not None and slow is not None
    for name in ("node", "n", "t", "x", "is_input", "dep_offsets", "dep_flat"):
        a, b = getattr(fast.arrays, name), getattr(slow.arrays, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert np.array_equal(fast.expand_rank, slow.expand_rank)
    # The lookup made on demand from the arrays agrees with the builder's.
    a = slow.arrays
    cols = [c.astype(np.int64) for c in (a.node, a.n, a.t, a.x)]
    assert np.array_equal(fast.index.lookup(*cols), slow.index.lookup(*cols))
    # And the whole builder (prune included) still equals the exact algorithm.
    assert _assert_same(nnet, request, what)


@pytest.mark.parametrize("t_range,num_seq", [((-10, 30), 1), ((-10, 30), 3), ((-500, 700), 2)])
def test_compiled_closure_equals_the_numpy_levels(t_range, num_seq):
    nnet = nnet_from_config(_PROGRAMS)
    request = ComputationRequest(
        inputs=[IoSpecification("input", frames_of(*t_range, num_seq)),
                IoSpecification("ivector", [Index(n, 0, 0) for n in range(num_seq)])],
        # Outputs spread out in t: the closure's box starts tight and must grow.
        outputs=[IoSpecification("output", [Index(n, t, 0) for t in
                                            range(t_range[0] + 8, t_range[1] - 8, 7)
                                            for n in range(num_seq)])])
    _closure_equals_the_numpy_levels(nnet, request, "programs")


def test_compiled_closure_with_switch_and_failover():
    """Switch(), Failover(), Const() and dim-range nodes: the same tables
    jit_exact reads, so the compiled closure takes them too."""
    _closure_equals_the_numpy_levels(nnet_from_config(MIXED), _mixed_request(-20, 30), "mixed")


def test_compiled_closure_declines_a_missing_input_frame():
    """An input frame the request lacks: the closure stops, and the graph is
    the exact algorithm's (some outputs not computable)."""
    nnet = nnet_from_config(_PROGRAMS)
    request = ComputationRequest(
        inputs=[IoSpecification("input", frames_of(0, 10)),
                IoSpecification("ivector", [Index(0, 0, 0)])],
        outputs=[IoSpecification("output", [Index(0, t, 0) for t in range(0, 10)])])
    assert build_graph_bulk(BulkPlan(nnet), nnet, request, jit_from=0) is None
    assert not _assert_same(nnet, request, "missing frame")


def test_offsets_past_the_int32_range_wrap_as_in_kaldi():
    """Descriptor offsets are added in int32 arithmetic: an input frame past
    2**31 - 1 wraps to a negative t, the same in the vectorised levels (which
    range-check the n, t, x of a level at once) as in the exact algorithm."""
    nnet = nnet_from_config("""
input-node name=input dim=2
component name=r type=RectifiedLinearComponent dim=2
component-node name=r component=r input=Offset(input, 2147483600)
output-node name=output input=Sum(r, Offset(r, 1))
""")
    wrapped = [(t + 2147483600 + 2 ** 31) % 2 ** 32 - 2 ** 31 for t in range(0, 60)]
    request = ComputationRequest(
        inputs=[IoSpecification("input", [Index(0, t, 0) for t in wrapped])],
        outputs=[IoSpecification("output", [Index(0, t, 0) for t in range(40, 50)])])
    assert min(wrapped) < 0 < max(wrapped)       # (some frames wrapped, some did not)
    assert _assert_same(nnet, request, "wrapped offsets")
    # The NumPy levels (the builder above took the compiled closure) agree.
    plan = BulkPlan(nnet)
    levels = build_graph_bulk(plan, nnet, request, jit_from=10 ** 9, jit_when_loaded=False)
    closure = build_graph_bulk(plan, nnet, request, jit_from=0)
    assert levels is not None and closure is not None
    for name in ("node", "n", "t", "x", "dep_offsets", "dep_flat"):
        assert np.array_equal(getattr(levels.arrays, name), getattr(closure.arrays, name)), name
    assert int(levels.arrays.t.min()) < 0


def test_plan_depth_is_the_longest_node_path():
    """BulkPlan.depth counts the nodes of the longest dependency path (the
    number of levels the NumPy builder takes, roughly), skip connections
    included; a recurrent network is not eligible and gets 0."""
    # input -> a1's input -> a1 -> r1's input -> r1 -> a2's input -> a2 -> output
    assert BulkPlan(nnet_from_config(TDNN)).depth == 8
    skip = TDNN.replace("input=Append(Offset(r1, -3), Offset(r1, 3))",
                        "input=Append(Offset(r1, -3), Offset(input, 3), input)").replace(
                            "input-dim=10 output-dim=3", "input-dim=13 output-dim=3")
    assert BulkPlan(nnet_from_config(skip)).depth == 8
    shallow = """
input-node name=input dim=4
component name=a type=AffineComponent input-dim=8 output-dim=3
component-node name=a component=a input=Append(Offset(input, -1), input)
output-node name=output input=a
"""
    assert BulkPlan(nnet_from_config(shallow)).depth == 4


def test_deep_network_takes_the_closure_once_numba_is_loaded(monkeypatch):
    """With Numba imported, a network at least graph_jit_depth_from nodes
    deep takes the compiled closure for a small request although no earlier
    request loaded it (its graph is the NumPy levels' one); a shallower one,
    or with graph_jit_when_loaded off, keeps the levels."""
    import types

    from pynnet3 import fast_paths
    from pynnet3.compile.graph import bulk, jit_bulk

    nnet = nnet_from_config(TDNN)
    request = ComputationRequest(
        inputs=[IoSpecification("input", frames_of(-10, 20))],
        outputs=[IoSpecification("output", [Index(0, t, 0) for t in range(0, 8)])])
    plan = BulkPlan(nnet)
    real = jit_bulk._closure
    real.compiled    # (materialised, so Numba is imported, before the spy takes its place)
    # ... but as if no earlier request had loaded the closure:
    monkeypatch.setattr(bulk, "_closure_kernel", types.SimpleNamespace(is_materialised=False))
    calls = []

    def spy(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(jit_bulk, "_closure", spy)
    with fast_paths.override(graph_jit_depth_from=plan.depth):
        fast = build_graph_bulk(plan, nnet, request, jit_when_loaded=True)
        assert len(calls) == 1
        slow = build_graph_bulk(plan, nnet, request, jit_when_loaded=False)
        assert len(calls) == 1
    with fast_paths.override(graph_jit_depth_from=plan.depth + 1):
        assert build_graph_bulk(plan, nnet, request, jit_when_loaded=True) is not None
        assert len(calls) == 1
    assert fast is not None and slow is not None
    for name in ("node", "n", "t", "x", "is_input", "dep_offsets", "dep_flat"):
        assert np.array_equal(getattr(fast.arrays, name), getattr(slow.arrays, name)), name
