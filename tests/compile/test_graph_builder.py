"""ComputationGraphBuilder (Kaldi's nnet-computation-graph) and ComputationRequest."""
from __future__ import annotations

import re
import time

import pytest

from pynnet3.compile.graph.builder import ComputationGraphBuilder
from pynnet3.compile.graph.computation_graph import (K_NOT_COMPUTABLE, K_UNKNOWN, CindexSet,
                                                     ComputationGraph)
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import PynnetError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from tests.helpers_graph import TDNN, graph_builder, parse_kaldi_request, tdnnf_config
from tests.helpers import REFERENCE, enough, nnet_from_config

REF = REFERENCE


def _frames(t0: int, t1: int, n: int = 0) -> list[Index]:
    return [Index(n, t, 0) for t in range(t0, t1)]


def _request(inputs: dict, outputs: dict) -> ComputationRequest:
    return ComputationRequest(
        inputs=[IoSpecification(name, idx) for name, idx in inputs.items()],
        outputs=[IoSpecification(name, idx) for name, idx in outputs.items()])


_RNN = """
input-node name=input dim=4
component name=a1 type=AffineComponent input-dim=7 output-dim=3
component name=t1 type=TanhComponent dim=3
component-node name=a1 component=a1 input=Append(input, IfDefined(Offset(r, -1)))
component-node name=r component=t1 input=a1
output-node name=output input=r
"""


# -- ComputationRequest ---------------------------------------------------------------

def _reference_requests():
    if not (REF / "random").is_dir():
        return []
    return sorted(p for p in (REF / "random").iterdir() if (p / "request.kaldi-text").is_file())


def test_request_print_matches_kaldi():
    dirs = _reference_requests()
    if not dirs:
        pytest.skip("reference data absent")
    for d in dirs:
        req = parse_kaldi_request((d / "request.kaldi-text").read_text())
        assert req.print() == (d / "request.txt").read_text(), d.name
    assert len(dirs) >= enough(50, 20)


def test_request_helpers():
    req = _request({"input": _frames(0, 3)}, {"output": _frames(0, 3)})
    assert req.index_for_input("input") == 0 and req.index_for_output("input") == -1
    assert not req.need_derivatives()
    req.need_model_derivative = True
    with pytest.raises(PynnetError):
        req.need_derivatives()
    req.outputs[0].has_deriv = True
    assert req.need_derivatives()
    io = IoSpecification.from_range("input", -2, 2)
    assert io.print() == "name=input, has-deriv=false, indexes=[(0,-2:1)]\n"


# -- the builder on feed-forward networks ------------------------------------------------

def test_tdnn_computable_info_and_prune():
    nnet = nnet_from_config(TDNN)
    req = _request({"input": _frames(0, 20)}, {"output": _frames(0, 20)})
    b = ComputationGraphBuilder(nnet)
    b.compute(req, check=True)
    info = b.get_computable_info()
    # Context is 4 on the left and 5 on the right.
    assert info == [[4 <= t < 15 for t in range(20)]]
    assert not b.all_outputs_are_computable()
    msg = b.explain_why_all_outputs_not_computable()
    assert msg.startswith("9 output cindexes out of 20 were not computable.")
    assert "Computation request was:  # Computation request:" in msg
    assert "*** cindex output(0, 0, 0) is not computable for the following reason: ***" in msg
    assert "output(0, 0, 0) is kNotComputable, dependencies: a2(0, 0, 0)[kNotComputable]" in msg
    with pytest.raises(PynnetError, match="not everything is computable"):
        b.prune()

    req = _request({"input": _frames(0, 20)}, {"output": _frames(4, 15)})
    b = ComputationGraphBuilder(nnet)
    b.compute(req, check=True)
    assert b.all_outputs_are_computable()
    b.prune()
    graph = b.graph
    names = nnet.node_names
    by_node: dict[str, list[int]] = {}
    for node, index in graph.cindexes:
        by_node.setdefault(names[node], []).append(index.t)
    # Exactly what the outputs need: r1 at t-3 and t+3 for t in [4, 15).
    assert sorted(by_node["r1"]) == sorted(set(range(1, 12)) | set(range(7, 18)))
    assert sorted(by_node["input"]) == list(range(20))  # inputs are always kept
    assert sorted(by_node["output"]) == list(range(4, 15))
    assert graph.segment_ends == [len(graph.cindexes)]
    # Dependencies after pruning are consistent cindex_ids.
    for cid, deps in enumerate(graph.dependencies):
        assert deps == sorted(set(deps))
        assert all(0 <= d < len(graph.cindexes) for d in deps)
        if names[graph.cindexes[cid][0]] == "a1_input":
            t = graph.cindexes[cid][1].t
            assert sorted(graph.cindexes[d][1].t for d in deps) == [t - 1, t, t + 2]
    text = graph.print(names)
    assert "[ output(0,4) -> a2(0,4) ]" in text


def test_graph_renumber_and_lookup():
    graph = ComputationGraph()
    ids = [graph.add_cindex((0, Index(0, t, 0)), t == 0)[0] for t in range(4)]
    assert ids == [0, 1, 2, 3]
    assert graph.add_cindex((0, Index(0, 2, 0)), False) == (2, False)
    graph.dependencies[3] = [0, 2]
    graph.renumber(0, [True, False, True, True])
    assert graph.cindexes == [(0, Index(0, 0, 0)), (0, Index(0, 2, 0)), (0, Index(0, 3, 0))]
    assert graph.dependencies[2] == [0, 1]
    assert graph.get_cindex_id((0, Index(0, 1, 0))) == -1
    assert graph.get_cindex_id((0, Index(0, 3, 0))) == 2
    assert graph.is_input == [True, False, False]
    assert (0, Index(0, 2, 0)) in CindexSet(graph)


# -- recurrent networks ------------------------------------------------------------------

def test_recurrent_network_terminates_and_is_computable():
    nnet = nnet_from_config(_RNN)
    req = _request({"input": _frames(0, 50)}, {"output": _frames(0, 50)})
    b = ComputationGraphBuilder(nnet)
    b.compute(req, check=True)
    assert b.get_computable_info() == [[True] * 50]
    names = nnet.node_names
    # r(t-1) for t=0 was asked for (IfDefined) but is not computable.
    r_minus1 = b.graph.get_cindex_id((names.index("r"), Index(0, -1, 0)))
    assert r_minus1 >= 0 and b.computable[r_minus1] == K_NOT_COMPUTABLE
    # Nothing usable is left in an unknown state.
    for cid in range(len(b.graph.cindexes)):
        assert not (b.computable[cid] == K_UNKNOWN and b.usable_count[cid] != 0)
    b.prune()
    kept = {(names[n], i.t) for n, i in b.graph.cindexes}
    assert ("r", -1) not in kept and ("r", 49) in kept
    a1_in = names.index("a1_input")
    for cid, (node, index) in enumerate(b.graph.cindexes):
        if node == a1_in:
            deps = [(names[b.graph.cindexes[d][0]], b.graph.cindexes[d][1].t)
                    for d in b.graph.dependencies[cid]]
            expected = [("input", index.t)] + ([("r", index.t - 1)] if index.t > 0 else [])
            assert sorted(deps) == sorted(expected)


def test_recurrent_outputs_missing_input_frames():
    # Missing input at t=10: r(10) is not computable, but the optional
    # recurrence lets t=11 onwards go on without it.
    nnet = nnet_from_config(_RNN)
    frames = [f for f in _frames(0, 20) if f.t != 10]
    req = _request({"input": frames}, {"output": _frames(0, 20)})
    b = ComputationGraphBuilder(nnet)
    b.compute(req, check=True)
    assert b.get_computable_info() == [[t != 10 for t in range(20)]]


def test_failover_and_component_inputs():
    # c(t) = Failover(Offset(c, -1), init): uses the previous frame if it exists,
    # else the input.  Providing the component node c at t=-1 as an input
    # (recurrent context supplied by the caller) changes what is used at t=0.
    text = """
input-node name=input dim=3
component name=r type=RectifiedLinearComponent dim=3
component-node name=c component=r input=Sum(input, Failover(Offset(c, -1), input))
output-node name=output input=c
"""
    nnet = nnet_from_config(text)
    c = nnet.get_node_index("c")
    req = _request({"input": _frames(0, 5)}, {"output": _frames(0, 5)})
    b = ComputationGraphBuilder(nnet)
    b.compute(req, check=True)
    assert b.all_outputs_are_computable()
    b.prune()
    assert b.graph.get_cindex_id((c, Index(0, -1, 0))) == -1

    req = ComputationRequest(inputs=[IoSpecification("input", _frames(0, 5)),
                                     IoSpecification("c", _frames(-1, 0))],
                             outputs=[IoSpecification("output", _frames(0, 5))])
    b = ComputationGraphBuilder(nnet)
    b.compute(req, check=True)
    b.prune()
    cid = b.graph.get_cindex_id((c, Index(0, -1, 0)))
    assert cid >= 0 and b.graph.is_input[cid]
    c_in0 = b.graph.get_cindex_id((c - 1, Index(0, 0, 0)))
    assert cid in b.graph.dependencies[c_in0]


def test_multi_segment_compute_and_prune():
    nnet = nnet_from_config(_RNN)
    b = ComputationGraphBuilder(nnet)
    b.compute(_request({"input": _frames(0, 10)}, {"output": _frames(0, 10)}))
    b.prune()
    first = len(b.graph.cindexes)
    b.compute(_request({"input": _frames(10, 20)}, {"output": _frames(10, 20)}))
    assert b.all_outputs_are_computable()
    b.prune()
    assert b.graph.segment_ends == [first, len(b.graph.cindexes)]
    names = nnet.node_names
    # Segment 2's first recurrence reads r(9) from segment 1.
    a1_in = names.index("a1_input")
    cid = b.graph.get_cindex_id((a1_in, Index(0, 10, 0)))
    assert cid >= first
    dep_ts = {(names[b.graph.cindexes[d][0]], b.graph.cindexes[d][1].t)
              for d in b.graph.dependencies[cid]}
    assert ("r", 9) in dep_ts


def test_wrong_requests():
    nnet = nnet_from_config(TDNN)
    with pytest.raises(PynnetError, match="no output with name"):
        ComputationGraphBuilder(nnet).compute(
            _request({"input": _frames(0, 3)}, {"nope": _frames(0, 3)}))
    with pytest.raises(PynnetError, match="no input with name"):
        ComputationGraphBuilder(nnet).compute(
            _request({"nope": _frames(0, 3)}, {"output": _frames(0, 3)}))
    with pytest.raises(PynnetError, match="more than once"):
        ComputationGraphBuilder(nnet).compute(
            _request({"input": _frames(0, 3) + _frames(0, 1)}, {"output": _frames(0, 3)}))
    b = ComputationGraphBuilder(nnet)
    b.compute(_request({"input": _frames(0, 3)}, {"output": _frames(0, 3)}))
    with pytest.raises(PynnetError, match="wrong call order"):
        b.compute(_request({"input": _frames(0, 3)}, {"output": _frames(0, 3)}))


# -- speed ----------------------------------------------------------------------------------

def test_tdnnf_sized_graph_builds_fast():
    nnet = nnet_from_config(tdnnf_config(12))
    assert nnet.num_nodes() >= 100
    num_frames = 300
    context = 12 + 12 + 1
    req = ComputationRequest(
        inputs=[IoSpecification("input", _frames(-context, num_frames + context)),
                IoSpecification("ivector", _frames(0, 1))],
        outputs=[IoSpecification("output", _frames(0, num_frames))])
    start = time.perf_counter()
    b = ComputationGraphBuilder(nnet)
    b.compute(req)
    assert b.all_outputs_are_computable()
    b.prune()
    elapsed = time.perf_counter() - start
    print(f"\n{nnet.num_nodes()} nodes, {num_frames} frames: {len(b.graph.cindexes)} cindexes "
          f"in {elapsed:.3f} s")
    assert len(b.graph.cindexes) > 25000
    # Kaldi-like speed target is well under a second; allow slack for a busy machine.
    assert elapsed < 2.5


def test_check_passes_on_recipe_network():
    """Build a real recipe network's graph and run the full consistency check."""
    path = REF / "configs" / "lstmp_swbd_6j" / "ref.config"
    if not path.is_file():
        pytest.skip("reference data absent")
    try:
        nnet = nnet_from_config(path.read_text())
    except Exception as e:  # noqa: BLE001
        if re.search(r"unknown component type", str(e)):
            pytest.skip(f"component support missing: {e}")
        raise
    req = ComputationRequest(
        inputs=[IoSpecification("input", _frames(-10, 40)),
                IoSpecification("ivector", _frames(-10, 40))],
        outputs=[IoSpecification("output", _frames(0, 30))])
    b = ComputationGraphBuilder(nnet)
    b.compute(req, check=True)
    assert b.all_outputs_are_computable()
    b.prune()
    # The recurrence reaches back to the first frame.
    names = nnet.node_names
    ts = {i.t for n, i in b.graph.cindexes if names[n] == "lstm1.c_t"}
    assert min(ts) < 0


# -- the shortcuts give exactly Kaldi's answers ---------------------------------------------

def _random_nets_and_requests():
    for d in _reference_requests():
        configs = sorted(d.glob("config*.txt"), key=lambda p: int(p.stem[6:]))
        yield d, configs


def _builder_state(nnet, req, use_shortcuts, check_every_iter=True):
    b = graph_builder(nnet, use_shortcuts)
    b.compute(req, check=check_every_iter and not use_shortcuts)
    b.check()
    before = (list(b.graph.cindexes), [list(x) for x in b.graph.dependencies],
              list(b.computable), list(b.usable_count), b.get_computable_info())
    pruned = None
    if b.all_outputs_are_computable():
        b.prune()
        pruned = (list(b.graph.cindexes), [list(x) for x in b.graph.dependencies])
    return before, pruned


def test_shortcuts_match_plain_algorithm_on_reference_networks():
    """Kaldi's requests on Kaldi's test networks: same graph with and without shortcuts."""
    cases = list(_random_nets_and_requests())
    if not cases:
        pytest.skip("reference data absent")
    compared = 0
    for d, configs in cases:
        nnet = Nnet()
        try:
            for cfg in configs:
                nnet.read_config(cfg.read_text(), str(cfg))
        except PynnetError as e:
            if "unknown component type" in str(e):
                continue
            raise
        req = parse_kaldi_request((d / "request.kaldi-text").read_text())
        fast = _builder_state(nnet, req, True)
        slow = _builder_state(nnet, req, False)
        assert fast == slow, d.name
        # Kaldi compiled these requests, so every output was computable.
        assert fast[1] is not None, d.name
        compared += 1
    print(f"\ncompared {compared}/{len(cases)} reference requests")
    assert compared >= len(cases) * 0.8


@pytest.mark.parametrize("case", ["cnn_e2eali_ocr_bentham_1a", "lstmp_swbd_6j",
                                  "tdnn_attention_swbd_1a", "tdnn_lstm_swbd_1e",
                                  "tdnn_norm_opgru_ami_1a", "tdnnf_librispeech_1d"])
def test_shortcuts_match_plain_algorithm_on_recipes(case):
    path = REF / "configs" / case / "ref.config"
    if not path.is_file():
        pytest.skip("reference data absent")
    try:
        nnet = nnet_from_config(path.read_text())
    except PynnetError as e:
        if "unknown component type" in str(e):
            pytest.skip(f"component support missing: {e}")
        raise
    # Fewer input frames than the context needs at the edges: a mix of
    # computable and uncomputable outputs.
    inputs = [IoSpecification("input", _frames(-30, 70))]
    if nnet.get_node_index("ivector") != -1:
        inputs.append(IoSpecification("ivector", _frames(-30, 70)))
    req = ComputationRequest(inputs=inputs, outputs=[IoSpecification("output", _frames(0, 80))])
    fast = _builder_state(nnet, req, True, check_every_iter=False)
    slow = _builder_state(nnet, req, False, check_every_iter=False)
    assert fast == slow
    info = fast[0][4][0]
    assert any(info) and not all(info)
