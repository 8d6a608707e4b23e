"""The compiled exact graph builder (compile/graph/jit_exact.py) gives the Python one's graph.

``graph_builder(nnet, False)`` runs Kaldi's algorithm
in Python, asking every Descriptor and Component; that is the reference.  The
default builder takes the compiled path for recurrent networks (and for
feed-forward requests the vectorised path declines).  Each test compares the
whole state after compute() (cindex_ids in order, dependencies, input flags,
computable states, usable counts, queue flags, depend_on_this), the
computable info, and the graph after prune() done straight from the compiled
state, and checks which path was taken.
"""
from __future__ import annotations

import random

import pytest

from pynnet3.compile.graph.builder import ComputationGraphBuilder
from pynnet3.compile.graph.programs import make_jit_plan
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import PynnetError
from pynnet3.nnet.index import K_NO_TIME, Index
from pynnet3.nnet.nnet import Nnet
from tests.helpers_graph import (MIXED, TDNN, frames_of, graph_builder, reference_random_cases,
                                 tdnnf_config)
from tests.helpers import enough, nnet_from_config, reference_dir


def _results(nnet: Nnet, request: ComputationRequest, fast: bool):
    """(took the compiled path, state after compute(), info, graph after prune()
    or "error")."""
    b = graph_builder(nnet, fast)
    b.compute(request)
    jit = b._jit is not None
    # Answered from the compiled state, before the lists exist.
    info = (b.get_computable_info(), b.all_outputs_are_computable())
    try:
        b.prune()
        g = b.graph
        after = (list(g.cindexes), [list(d) for d in g.dependencies], list(g.is_input),
                 list(g.segment_ends))
    except PynnetError:
        # (The message may differ: with shortcuts the Python path does not ask
        # a component again whose inputs are all required.)
        after = "error"
    # The state after compute(), from a second builder (prune() changes it).
    b = graph_builder(nnet, fast)
    b.compute(request)
    bulk = b._bulk is not None
    g = b.graph
    before = (list(g.cindexes), [list(d) for d in g.dependencies], list(g.is_input),
              list(b.computable), list(b.usable_count), list(b.queued),
              list(b.dependencies_computed), [list(d) for d in b.depend_on_this],
              # (The vectorised path does not reproduce the iteration count.)
              b.current_distance if not bulk else None)
    return jit, before, info, after


def _assert_same(nnet: Nnet, request: ComputationRequest, what: str = "") -> bool:
    """Compare the compiled and the Python paths; return whether the compiled one ran."""
    jit, before, info, after = _results(nnet, request, True)
    ref_jit, ref_before, ref_info, ref_after = _results(nnet, request, False)
    assert not ref_jit
    if before[-1] is None:
        ref_before = ref_before[:-1] + (None,)
    for i, (a, b) in enumerate(zip(before, ref_before)):
        assert a == b, f"{what}: field {i} of the state after compute() differs"
    assert info == ref_info, f"{what}: computable info differs"
    assert after == ref_after, f"{what}: prune() differs"
    return jit


_LSTM = """
input-node name=input dim=4
input-node name=ivector dim=2
component name=a1 type=AffineComponent input-dim=9 output-dim=3
component name=t1 type=TanhComponent dim=3
component-node name=a1 component=a1 input=Append(input, ReplaceIndex(ivector, t, 0), \
IfDefined(Offset(r, -1)))
component-node name=r component=t1 input=a1
component name=a2 type=AffineComponent input-dim=6 output-dim=3
component name=t2 type=TanhComponent dim=3
component-node name=a2 component=a2 input=Append(Sum(r, IfDefined(Offset(s, -2))), \
Failover(Offset(s, -3), Offset(r, -1)))
component-node name=s component=t2 input=a2
dim-range-node name=d input-node=s dim-offset=0 dim=2
component name=a3 type=AffineComponent input-dim=4 output-dim=3
component-node name=a3 component=a3 input=Append(d, Offset(d, 1))
output-node name=output input=a3
"""


def _lstm_request(t0: int, t1: int, outs: list[Index]) -> ComputationRequest:
    return ComputationRequest(
        inputs=[IoSpecification("input", frames_of(t0, t1, 2)),
                IoSpecification("ivector", [Index(n, 0, 0) for n in range(2)])],
        outputs=[IoSpecification("output", outs)])


def test_recurrent_network_every_case():
    nnet = nnet_from_config(_LSTM)
    assert make_jit_plan(nnet) is not None
    t_major = [Index(n, t, 0) for t in range(10) for n in range(2)]
    # Enough input; the recurrences stop at the first frame (IfDefined).
    assert _assert_same(nnet, _lstm_request(-5, 20, t_major), "enough")
    # Too little input on the right: some outputs are not computable.
    assert _assert_same(nnet, _lstm_request(0, 8, t_major), "short")
    b = ComputationGraphBuilder(nnet)
    b.compute(_lstm_request(0, 8, t_major))
    assert not b.all_outputs_are_computable()
    flags = b.get_computable_info()[0]
    # (a3 needs d at t+1, s needs r at t-1 through the Failover: both ends lose.)
    assert any(flags) and not all(flags) and not flags[-1]
    with pytest.raises(PynnetError, match="not everything is computable"):
        b.prune()
    # Outputs in reverse order, odd n and x values.
    odd = [Index(n, t, x) for n in (7, -2) for x in (0, 3) for t in range(12, -1, -1)]
    req = ComputationRequest(
        inputs=[IoSpecification("input", [Index(n, t, x) for n in (7, -2) for x in (0, 3)
                                          for t in range(-4, 16)]),
                IoSpecification("ivector", [Index(n, 0, x) for n in (7, -2) for x in (0, 3)])],
        outputs=[IoSpecification("output", odd)])
    assert _assert_same(nnet, req, "odd")


def test_mixed_descriptors_and_short_input():
    """Switch, Round, Const, Failover, dim-range; vectorised path declines
    when frames are missing, the compiled one takes over."""
    nnet = nnet_from_config(MIXED)
    req = ComputationRequest(
        inputs=[IoSpecification("input", frames_of(-1, 12, 2)),
                IoSpecification("ivector", [Index(n, 0, 0) for n in range(2)])],
        outputs=[IoSpecification("output", [Index(n, t, 0) for t in range(10)
                                            for n in range(2)])])
    assert _assert_same(nnet, req, "short input")


def test_component_node_given_as_input():
    nnet = nnet_from_config(_LSTM)
    r = [Index(n, t, 0) for n in range(2) for t in range(0, 6)]
    req = ComputationRequest(
        inputs=[IoSpecification("input", frames_of(0, 12, 2)),
                IoSpecification("ivector", [Index(n, 0, 0) for n in range(2)]),
                IoSpecification("r", r)],
        outputs=[IoSpecification("output", [Index(n, t, 0) for t in range(8)
                                            for n in range(2)])])
    assert _assert_same(nnet, req, "component input")


@pytest.mark.parametrize("seed", range(2))
def test_random_requests(seed: int):
    rng = random.Random(seed)
    nets = [nnet_from_config(_LSTM), nnet_from_config(MIXED), nnet_from_config(tdnnf_config(2)), nnet_from_config(TDNN)]
    compiled = 0
    for case in range(30):
        nnet = rng.choice(nets)
        ns = rng.sample(range(-3, 70), rng.randint(1, 3))
        xs = rng.choice([[0], [0, 1], [5]])
        lo, hi = rng.randint(-30, 0), rng.randint(5, 40)
        inputs = [IoSpecification("input", [
            Index(n, t, x) for n in ns for x in xs for t in range(lo, hi)
            if rng.random() > 0.03])]
        if nnet.get_node_index("ivector") != -1:
            inputs.append(IoSpecification("ivector", [
                Index(n, t, x) for n in ns for x in xs for t in rng.choice([[0], [-5, 0, 5]])]))
        outputs = sorted({Index(n, rng.randint(-5, 30), x) for n in ns for x in xs
                          for _ in range(rng.randint(1, 20))})
        rng.shuffle(outputs)
        request = ComputationRequest(inputs=inputs, outputs=[IoSpecification("output", outputs)])
        compiled += _assert_same(nnet, request, f"seed {seed} case {case}")
    assert compiled >= 10


def test_fallbacks():
    nnet = nnet_from_config(_LSTM)
    # An input listed twice: the Python algorithm runs and raises.
    req = _lstm_request(0, 8, [Index(0, 0, 0)])
    req.inputs[0].indexes.append(Index(0, 3, 0))
    with pytest.raises(PynnetError, match="more than once"):
        ComputationGraphBuilder(nnet).compute(req)
    # kNoTime reaching an offset-style component (TDNN): the Python path decides.
    tdnn = nnet_from_config("""
input-node name=input dim=2
component name=td type=TdnnComponent input-dim=2 output-dim=2 time-offsets=-1,0,1
component-node name=td component=td input=input
output-node name=output input=td
""")
    req = ComputationRequest(
        inputs=[IoSpecification("input", [Index(0, t, 0) for t in range(-2, 5)])],
        outputs=[IoSpecification("output", [Index(0, K_NO_TIME, 0), Index(0, 1, 0)])])
    for fast in (True, False):
        with pytest.raises(ValueError, match="without a time"):
            graph_builder(tdnn, fast).compute(req)
    req = ComputationRequest(
        inputs=[IoSpecification("input", [Index(0, t, 0) for t in range(-2, 5)])],
        outputs=[IoSpecification("output", [Index(0, t, 0) for t in range(4)])])
    req.inputs[0].indexes.pop()   # a frame missing: not the vectorised path
    assert _assert_same(tdnn, req, "tdnn")


def test_multi_segment_after_compiled_first_segment():
    nnet = nnet_from_config(_LSTM)
    t_major = [Index(n, t, 0) for t in range(10) for n in range(2)]
    second = ComputationRequest(
        inputs=[IoSpecification("input", frames_of(20, 30, 2))],
        outputs=[IoSpecification("output", [Index(n, t, 0) for t in range(20, 26)
                                            for n in range(2)])])
    states = []
    for fast in (True, False):
        b = graph_builder(nnet, fast)
        b.compute(_lstm_request(-5, 20, t_major))
        assert (b._jit is not None) == fast
        b.prune()
        b.compute(second)
        assert b.all_outputs_are_computable()
        b.prune()
        states.append((list(b.graph.cindexes), list(b.graph.dependencies),
                       list(b.graph.is_input), list(b.graph.segment_ends)))
    assert states[0] == states[1]


def test_kaldi_random_requests():
    """Kaldi's own test networks and requests: every recurrent one compiled."""
    compared = compiled = 0
    for name, nnet, request in reference_random_cases():
        compiled += _assert_same(nnet, request, name)
        compared += 1
    assert compared >= enough(50, 15)
    assert compiled >= enough(15, 2)


@pytest.mark.parametrize("name", ["lstmp_swbd_6j", "tdnn_lstm_swbd_1e",
                                  "tdnn_norm_opgru_ami_1a"])
def test_recipe_recurrent_networks(name: str):
    path = reference_dir() / "configs" / name / "ref.config"
    if not path.is_file():
        pytest.skip(f"{path} absent")
    nnet = nnet_from_config(path.read_text())
    # Input that ends early: the last outputs are not computable.
    inputs = [IoSpecification("input", frames_of(-30, 12, 2))]
    if nnet.get_node_index("ivector") != -1:
        inputs.append(IoSpecification("ivector", frames_of(-30, 12, 2)))
    outs = [Index(n, t, 0) for t in range(0, 8) for n in range(2)]
    request = ComputationRequest(inputs=inputs, outputs=[IoSpecification("output", outs)])
    assert _assert_same(nnet, request, name)


# Statistics extraction (blocks of 3 frames) and pooling (every 3rd frame,
# a window of [t-6, t+9]) after a small TDNN: window components, whose
# dependencies and "computable when any input is" the compiled loop computes
# itself (programs.component_range).
_STATS = """
input-node name=input dim=4
component name=a type=AffineComponent input-dim=8 output-dim=4
component-node name=a component=a input=Append(Offset(input, -1), Offset(input, 1))
component name=r type=RectifiedLinearComponent dim=4
component-node name=r component=r input=a
component name=e type=StatisticsExtractionComponent input-dim=4 input-period=1 output-period=3 include-variance=true
component-node name=e component=e input=r
component name=p type=StatisticsPoolingComponent input-dim=9 input-period=3 left-context=6 right-context=9 num-log-count-features=1 output-stddevs=true
component-node name=p component=p input=e
component name=b type=AffineComponent input-dim=13 output-dim=3
component-node name=b component=b input=Append(Round(p, 3), r)
output-node name=output input=b
"""


def test_window_components_every_case():
    nnet = nnet_from_config(_STATS)
    plan = make_jit_plan(nnet)
    assert plan is not None and plan.has_ranges
    outs = [Index(n, t, 0) for t in range(12) for n in range(2)]
    for t0, t1 in ((-20, 40), (0, 12), (3, 5), (-1, 30)):
        req = ComputationRequest(inputs=[IoSpecification("input", frames_of(t0, t1, 2))],
                                 outputs=[IoSpecification("output", outs)])
        assert _assert_same(nnet, req, f"input {t0}..{t1}"), "the compiled path did not run"
    rng = random.Random(3)
    for case in range(12):
        ns = rng.sample(range(-3, 20), rng.randint(1, 3))
        lo, hi = rng.randint(-15, 3), rng.randint(4, 30)
        inputs = [IoSpecification("input", [Index(n, t, 0) for n in ns for t in range(lo, hi)
                                            if rng.random() > 0.1])]
        outputs = sorted({Index(n, rng.randint(-5, 25), 0) for n in ns
                          for _ in range(rng.randint(1, 10))})
        rng.shuffle(outputs)
        req = ComputationRequest(inputs=inputs, outputs=[IoSpecification("output", outputs)])
        _assert_same(nnet, req, f"random case {case}")


def test_window_component_at_a_time_it_lacks():
    """Round(p, 2) asks pooling (input-period 3) for odd multiples of 2: the
    Python path raises the ConfigError; the compiled one must not answer."""
    nnet = nnet_from_config(_STATS.replace("Round(p, 3)", "Round(p, 2)"))
    req = ComputationRequest(inputs=[IoSpecification("input", frames_of(-20, 40, 1))],
                             outputs=[IoSpecification("output", frames_of(0, 6, 1))])
    b = ComputationGraphBuilder(nnet)
    with pytest.raises(PynnetError, match="not a multiple of its input-period"):
        b.compute(req)


def test_unpruned_graph_arrays_made_only_when_read():
    """The compiled builder's unpruned graph (large for statistics pooling) is
    turned into GraphArrays only if something reads the graph before prune();
    len() answers without it, and prune() works from the builder's state."""
    nnet = nnet_from_config(_STATS)
    req = ComputationRequest(inputs=[IoSpecification("input", frames_of(-20, 40, 2))],
                             outputs=[IoSpecification("output", frames_of(0, 12, 2))])
    b = ComputationGraphBuilder(nnet)
    b.compute(req)
    assert b._jit is not None, "the compiled path did not run"
    assert b._jit.state.dtype.itemsize == 4 and b._jit.deps.dtype.itemsize == 4
    g = b.graph
    make = g._make_arrays
    assert make is not None and not g.has_lists()
    made = []
    g._make_arrays = lambda: made.append(1) or make()
    num = len(g)
    assert num == len(b._jit) and not made
    b.prune()
    assert not made and g._make_arrays is None and g.segment_ends == [len(g)]
    # Read before prune(): made then, equal to the Python path's graph.
    b2 = ComputationGraphBuilder(nnet)
    b2.compute(req)
    ref = graph_builder(nnet, False)
    ref.compute(req)
    assert len(b2.graph) == num == len(ref.graph)
    assert list(b2.graph.cindexes) == list(ref.graph.cindexes)
    assert [list(d) for d in b2.graph.dependencies] == [list(d) for d in ref.graph.dependencies]
