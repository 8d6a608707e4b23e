"""Phases and steps (Kaldi's ComputeComputationPhases / ComputationStepsComputer).

Every case checks the rules that the compiler relies on (see
``_check_steps``); the reference cases also check each step against the
matrices of the computations real Kaldi printed (their debug info lists the
cindexes of the step each matrix was made for).
"""
from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict
from itertools import chain

import numpy as np
import pytest

from pynnet3.compile.graph.builder import ComputationGraphBuilder
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.compile.steps import (compute_computation_phases, compute_computation_steps,
                                   compute_computation_steps_full,
                                   unordered_set_iteration_order)
from pynnet3.errors import PynnetError
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.graph import compute_nnet_computation_epochs
from pynnet3.nnet.index import K_NO_TIME, Index, print_indexes
from pynnet3.nnet.nnet import Nnet, NodeType
from tests.helpers import enough, nnet_from_config, reference_dir
from tests.helpers_graph import TDNN


def _frames(t0: int, t1: int, num_seq: int = 1, step: int = 1) -> list[Index]:
    return [Index(n, t, 0) for n in range(num_seq) for t in range(t0, t1, step)]


def _request(inputs: dict, outputs: dict) -> ComputationRequest:
    return ComputationRequest(
        inputs=[IoSpecification(name, idx) for name, idx in inputs.items()],
        outputs=[IoSpecification(name, idx, True) for name, idx in outputs.items()])


def _kaldi_key(index) -> tuple:
    """Kaldi's Index ordering: t, then x, then n."""
    return (index[1], index[2], index[0])


# -- the checks ---------------------------------------------------------------------------

def _build(nnet: Nnet, requests: list[ComputationRequest]):
    builder = ComputationGraphBuilder(nnet)
    for request in requests:
        builder.compute(request)
        assert builder.all_outputs_are_computable()
        builder.prune()
    return builder.graph


def _flat_deps(graph, ids):
    lists = [graph.dependencies[c] for c in ids]
    lens = np.fromiter(map(len, lists), np.int64, len(lists))
    flat = np.fromiter(chain.from_iterable(lists), np.int64, int(lens.sum()))
    return np.repeat(np.asarray(ids, dtype=np.int64), lens), flat


def _check_phases(nnet: Nnet, graph, phases) -> None:
    num = len(graph.cindexes)
    ends = graph.segment_ends
    assert len(phases) == len(ends)
    seg_of = np.repeat(np.arange(len(ends)), np.diff([0] + list(ends)))
    phase_of = np.full(num, -1)
    node_to_epoch = compute_nnet_computation_epochs(nnet)
    for s, segment in enumerate(phases):
        last_epoch = -1
        for p, phase in enumerate(segment):
            assert phase and phase == sorted(phase)
            arr = np.asarray(phase)
            assert (seg_of[arr] == s).all() and (phase_of[arr] == -1).all()
            phase_of[arr] = p
            # One epoch per phase, epochs in order (inputs first).
            epochs = {-1 if graph.is_input[c] else node_to_epoch[graph.cindexes[c][0]]
                      for c in phase}
            assert len(epochs) == 1
            epoch = epochs.pop()
            assert epoch >= last_epoch
            last_epoch = epoch
    assert (phase_of >= 0).all(), "some cindex has no phase"
    dependent, dependency = _flat_deps(graph, range(num))
    ok = (seg_of[dependency] < seg_of[dependent]) | (
        (seg_of[dependency] == seg_of[dependent])
        & (phase_of[dependency] < phase_of[dependent]))
    assert ok.all(), "a cindex is in a phase before one of its dependencies"


def _check_steps(nnet: Nnet, graph, num_orig: int, requests, res) -> None:
    """The rules of Kaldi's steps, checked one by one."""
    steps = res.steps
    cindexes = graph.cindexes
    names = nnet.node_names
    num = len(cindexes)
    assert len(res.step_to_segment) == len(steps)
    assert res.step_to_segment[0] == 0 and res.step_to_segment[-1] == len(requests) - 1
    assert all(a <= b for a, b in zip(res.step_to_segment, res.step_to_segment[1:]))
    t_of = np.array([c[1][1] for c in cindexes], dtype=np.int64)
    blank = t_of == K_NO_TIME
    flat = np.fromiter(chain.from_iterable(steps), np.int64)
    counts = np.bincount(flat, minlength=num)
    # Every cindex of the graph is in exactly one step (padding may repeat).
    assert (counts[:num_orig][~blank[:num_orig]] == 1).all()
    assert (counts[num_orig:] >= 1).all()
    # ... and at the location the computer recorded for it.
    for c in np.flatnonzero(~blank).tolist():
        assert steps[res.location_step[c]][res.location_row[c]] == c
    # Cindexes the steps added: padding (t = kNoTime) or rows of dim-range nodes.
    for c in range(num_orig, num):
        node = cindexes[c][0]
        assert blank[c] or nnet.nodes[node].node_type is NodeType.DIM_RANGE
        assert not graph.is_input[c] and graph.dependencies[c] == []
    ends = [0] + list(graph.segment_ends)
    seen: dict[tuple, int] = {}
    for s, step in enumerate(steps):
        segment = res.step_to_segment[s]
        request = requests[segment]
        nodes = {cindexes[c][0] for c in step}
        if not step:
            # Only a component's input step may be empty.
            assert nnet.is_component_input_node(cindexes[steps[s + 1][0]][0] - 1)
            continue
        assert len(nodes) == 1, f"step {s} mixes nodes"
        node = nodes.pop()
        indexes = [tuple(cindexes[c][1]) for c in step]
        orig = [c for c in step if c < num_orig and not blank[c]]
        assert all(ends[segment] <= c < ends[segment + 1] for c in orig)
        kind = nnet.nodes[node].node_type
        name = names[node]
        if kind is NodeType.INPUT or nnet.is_output_node(node):
            ios = request.inputs if kind is NodeType.INPUT else request.outputs
            (io,) = [io for io in ios if io.name == name]
            assert indexes == [tuple(i) for i in io.indexes], f"{name}: not in request order"
        elif kind is NodeType.COMPONENT:
            prev = steps[s - 1]
            assert all(cindexes[c][0] == node - 1 for c in prev), \
                f"component step {name} not preceded by its input step"
            prev_indexes = [tuple(cindexes[c][1]) for c in prev]
            props = nnet.component_for_node(node).properties()
            if not props & Prop.REORDERS_INDEXES:
                assert indexes == sorted(indexes, key=_kaldi_key)
            if props & Prop.SIMPLE:
                assert prev_indexes == indexes
            else:
                _, deps = _flat_deps(graph, orig)
                needed = set(deps.tolist())
                assert needed <= set(prev)
                assert all(blank[c] for c in set(prev) - needed)
                if not props & Prop.REORDERS_INDEXES:
                    assert prev_indexes == sorted(prev_indexes, key=_kaldi_key)
        elif kind is NodeType.DESCRIPTOR:
            assert s + 1 < len(steps) and cindexes[steps[s + 1][0]][0] == node + 1
        else:
            # A dim-range step mirrors an earlier step of its source node.
            source = nnet.nodes[node].node_index
            assert seen.get((source, tuple(indexes)), s) < s, f"{name}: no mirrored step"
        seen.setdefault((node, tuple(indexes)), s)
    # Every dependency of a cindex is computed in an earlier step.
    loc = res.location_step
    dependent, dependency = _flat_deps(graph, range(num_orig))
    assert (loc[dependency] < loc[dependent]).all(), "a step comes before its inputs"


def _run(nnet: Nnet, requests: list[ComputationRequest]):
    graph = _build(nnet, requests)
    num_orig = len(graph.cindexes)
    phases = compute_computation_phases(nnet, graph)
    _check_phases(nnet, graph, phases)
    res = compute_computation_steps_full(nnet, requests if len(requests) > 1 else requests[0],
                                         phases, graph)
    _check_steps(nnet, graph, num_orig, requests, res)
    return graph, phases, res


def _step_summary(nnet: Nnet, graph, steps) -> list[tuple[str, str]]:
    return [(nnet.node_names[graph.cindexes[s[0]][0]] if s else "",
             print_indexes([graph.cindexes[c][1] for c in s])) for s in steps]


# -- libstdc++'s unordered_set order ---------------------------------------------------------

@pytest.mark.parametrize("values, expected", [
    # Printed by a C++ program built with g++ 12 (Debian 12), the compiler
    # Kaldi's reference outputs were made with.
    ([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]),
    (list(range(14)), [13, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
    (list(range(31)), [30, 29, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 13, 14, 15, 16,
                       17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28]),
    ([13, 26, 39, 0, 52, 1, 14], [14, 1, 52, 0, 39, 26, 13]),
    ([3, 1, 4, 15, 9, 2, 6, 5, 35, 8, 97, 93, 23, 84, 62, 64, 33, 83, 27, 95],
     [27, 83, 84, 3, 1, 33, 62, 4, 15, 2, 9, 64, 93, 35, 6, 97, 5, 95, 8, 23]),
    ([5, 3, 5, 1, 3, 7], [7, 1, 3, 5]),
])
def test_unordered_set_iteration_order_matches_libstdcxx(values, expected):
    assert unordered_set_iteration_order(values) == expected


# -- small networks -------------------------------------------------------------------------


_RNN = """
input-node name=input dim=4
component name=a1 type=AffineComponent input-dim=7 output-dim=3
component name=t1 type=TanhComponent dim=3
component name=a2 type=AffineComponent input-dim=2 output-dim=3
component-node name=a1 component=a1 input=Append(input, IfDefined(Offset(r, -1)))
component-node name=r component=t1 input=a1
dim-range-node name=d input-node=r dim-offset=1 dim=2
component-node name=a2 component=a2 input=d
output-node name=output input=a2
"""


def test_feedforward_steps_are_one_per_node_in_kaldi_order():
    nnet = nnet_from_config(TDNN)
    # Output rows in n-major order: the output step keeps the request's order,
    # the other steps are in Kaldi's Cindex order (t, then x, then n).
    req = _request({"input": _frames(-4, 8, 2)}, {"output": _frames(0, 3, 2)})
    graph, phases, res = _run(nnet, [req])
    assert len(phases[0]) == 8   # input, 3 x (descriptor, component), output
    r1 = "[(0,-3), (1,-3), (0,-2), (1,-2), (0,-1), (1,-1), (0,3), (1,3), (0,4), (1,4), (0,5), (1,5)]"
    assert _step_summary(nnet, graph, res.steps) == [
        ("input", "[(0,-4:7), (1,-4:7)]"),
        ("a1_input", r1), ("a1", r1), ("r1_input", r1), ("r1", r1),
        ("a2_input", "[(0,0), (1,0), (0,1), (1,1), (0,2), (1,2)]"),
        ("a2", "[(0,0), (1,0), (0,1), (1,1), (0,2), (1,2)]"),
        ("output", "[(0,0:2), (1,0:2)]")]
    assert compute_computation_steps(nnet, req, phases, graph) == res.steps


def test_recurrent_layer_gets_one_step_per_frame():
    nnet = nnet_from_config(_RNN)
    num_frames = 6
    req = _request({"input": _frames(0, num_frames, 2)}, {"output": _frames(0, num_frames, 2)})
    graph, phases, res = _run(nnet, [req])
    # inputs; a1_input, a1, r_input, r per frame; then d, a2_input, a2, output.
    assert len(phases[0]) == 1 + 4 * num_frames + 4
    names = [name for name, _ in _step_summary(nnet, graph, res.steps)]
    counts = Counter(names)
    for name in ("a1_input", "a1", "r_input", "r", "d"):
        assert counts[name] == num_frames, name
    for name in ("input", "a2_input", "a2", "output"):
        assert counts[name] == 1, name
    summary = _step_summary(nnet, graph, res.steps)
    assert summary[1:5] == [("a1_input", "[(0,0), (1,0)]"), ("a1", "[(0,0), (1,0)]"),
                            ("r_input", "[(0,0), (1,0)]"), ("r", "[(0,0), (1,0)]")]
    # The recurrence in time order; then the dim-range steps, one per source
    # step, in the order Kaldi's unordered_set<int> of source steps gives.
    r_steps = [s for s, (name, _) in enumerate(summary) if name == "r"]
    assert [summary[s][1] for s in r_steps] == [f"[(0,{t}), (1,{t})]" for t in range(num_frames)]
    d_steps = [s for s, (name, _) in enumerate(summary) if name == "d"]
    order = unordered_set_iteration_order(r_steps)
    assert order == r_steps[::-1]
    assert [summary[s][1] for s in d_steps] == [summary[s][1] for s in order]
    assert d_steps == list(range(d_steps[0], d_steps[0] + num_frames))


def test_reordering_component_pads_with_blank_indexes():
    # Output at every third frame of a TdnnComponent that reads t-1 and t+1:
    # the input rows it needs (t = -1, 1, 2, 4, 5, 7) are padded to a regular
    # grid with blank rows where t = 0, 3, 6 would be, and (output stride 3)
    # ordered in blocks of 3 frames per sequence.
    nnet = nnet_from_config("""
input-node name=input dim=4
component name=tdnn type=TdnnComponent input-dim=4 output-dim=3 time-offsets=-1,1
component-node name=tdnn component=tdnn input=input
output-node name=output input=tdnn
""")
    req = _request({"input": _frames(-2, 9, 2)}, {"output": _frames(0, 9, 2, step=3)})
    graph = _build(nnet, [req])
    num_orig = len(graph.cindexes)
    phases = compute_computation_phases(nnet, graph)
    res = compute_computation_steps_full(nnet, req, phases, graph)
    _check_steps(nnet, graph, num_orig, [req], res)
    added = graph.cindexes[num_orig:]
    assert sorted((nnet.node_names[node], tuple(i)) for node, i in added) == [
        ("tdnn_input", (0, K_NO_TIME, 0)), ("tdnn_input", (1, K_NO_TIME, 0))]
    summary = dict(_step_summary(nnet, graph, res.steps))
    blank0, blank1 = "(0,-2147483648)", "(1,-2147483648)"
    assert summary["tdnn_input"] == (
        f"[(0,-1), {blank0}, (0,1), (1,-1), {blank1}, (1,1), (0,2), {blank0}, (0,4), "
        f"(1,2), {blank1}, (1,4), (0,5), {blank0}, (0,7), (1,5), {blank1}, (1,7)]")
    assert summary["tdnn"] == "[(0,0), (1,0), (0,3), (1,3), (0,6), (1,6)]"


def test_looped_computation_with_several_segments():
    nnet = nnet_from_config(_RNN)
    requests = [_request({"input": _frames(5 * k, 5 * k + 5, 2)},
                         {"output": _frames(5 * k, 5 * k + 5, 2)}) for k in range(3)]
    graph, phases, res = _run(nnet, requests)
    assert len(phases) == 3
    # input; 4 steps per frame; a dim-range step per frame; a2_input, a2, output.
    assert Counter(res.step_to_segment) == Counter({0: 29, 1: 29, 2: 29})
    names = nnet.node_names
    # Segment 1 starts its recurrence from r(4), computed in segment 0.
    a1_in = names.index("a1_input")
    cid = graph.get_cindex_id((a1_in, Index(0, 5, 0)))
    deps = [d for d in graph.dependencies[cid] if names[graph.cindexes[d][0]] == "r"]
    assert len(deps) == 1 and res.step_to_segment[res.location_step[deps[0]]] == 0
    assert res.step_to_segment[res.location_step[cid]] == 1
    assert compute_computation_steps(nnet, requests, phases, graph) == res.steps


def test_errors():
    nnet = nnet_from_config(TDNN)
    req = _request({"input": _frames(-4, 8)}, {"output": _frames(0, 3)})
    builder = ComputationGraphBuilder(nnet)
    builder.compute(req)
    with pytest.raises(PynnetError, match="pruned"):
        compute_computation_phases(nnet, builder.graph)
    builder.prune()
    phases = compute_computation_phases(nnet, builder.graph)
    with pytest.raises(PynnetError, match="2 requests but phases for 1"):
        compute_computation_steps(nnet, [req, req], phases, builder.graph)
    # A request whose output indexes differ from those the graph was built for.
    other = _request({"input": _frames(-4, 8)}, {"output": _frames(1, 4)})
    with pytest.raises(PynnetError):
        compute_computation_steps(nnet, other, phases, builder.graph)


# -- real Kaldi's test networks and requests ----------------------------------------------------

_MATRIX_LINE = re.compile(r"^m\d+ == (?:value|deriv): (\S+?)\[(.*)\]$", re.M)
_PRINTED_INDEX = re.compile(r"\((-?\d+),(-?\d+)(?::(-?\d+))?(?:,(-?\d+))?\)")


def _parse_printed_indexes(body: str) -> list[tuple]:
    out = []
    for n, t0, t1, x in _PRINTED_INDEX.findall(body):
        last = int(t1) if t1 else int(t0)
        out.extend((int(n), t, int(x or 0)) for t in range(int(t0), last + 1))
    return out


def _check_against_kaldi_debug_info(nnet: Nnet, graph, steps, text: str) -> Counter:
    """Each matrix of Kaldi's printed computation must be one of our steps.

    Two optimizations change a matrix: ExtendMatrices appends blank rows,
    and ConsolidateModelUpdate concatenates several steps of one node.
    """
    by_node: dict[str, list[list[tuple]]] = defaultdict(list)
    printed: set[tuple[str, str]] = set()
    for step in steps:
        if step:
            name = nnet.node_names[graph.cindexes[step[0]][0]]
            indexes = [tuple(graph.cindexes[c][1]) for c in step]
            by_node[name].append(indexes)
            printed.add((name, print_indexes(indexes)))
    how: Counter = Counter()
    for name, body in _MATRIX_LINE.findall(text):
        candidates = by_node[name]
        if " ... " in body:    # printed shortened: compare the text, or the start
            if (name, f"[{body}]") in printed:
                how["same"] += 1
            else:
                _match_pieces(_parse_printed_indexes(body.split(" ... ")[0]), candidates,
                              partial_last=True)
                how["shortened"] += 1
            continue
        indexes = _parse_printed_indexes(body)
        if indexes in candidates:
            how["same"] += 1
            continue
        stripped = list(indexes)
        while stripped and stripped[-1][1] == K_NO_TIME:
            stripped.pop()
        if stripped != indexes and stripped in candidates:
            how["extended"] += 1
            continue
        assert _match_pieces(indexes, candidates) >= 2, f"matrix {name}[{body}] matches no step"
        how["concatenated"] += 1
    return how


def _match_pieces(indexes: list, candidates: list[list], partial_last: bool = False) -> int:
    """Number of whole steps (``candidates``) that ``indexes`` is made of, or 0.

    With ``partial_last`` the last piece may be the start of a step.
    """
    pos, pieces = 0, 0
    while pos < len(indexes):
        rest = indexes[pos:]
        piece = next((c for c in candidates if c and rest[:len(c)] == c), None)
        if piece is None:
            assert partial_last and any(c[:len(rest)] == rest for c in candidates), \
                f"indexes {rest[:8]}... match no step"
            return pieces + 1
        pos += len(piece)
        pieces += 1
    return pieces


_OFFSET = re.compile(r"Offset\( *([^,() ]+) *, *(-?\d+) *\)")


def _random_cases():
    ref = reference_dir() / "random"
    if not ref.is_dir():
        pytest.skip("no random reference networks")
    return sorted(p for p in ref.iterdir() if (p / "request.kaldi-text").is_file())


def test_kaldi_random_networks():
    from pynnet3.compile.request_io import read_request_file

    total: Counter = Counter()
    recurrent = 0
    for d in _random_cases():
        nnet = Nnet()
        for cfg in sorted(d.glob("config*.txt"), key=lambda p: int(p.stem[6:])):
            nnet.read_config(cfg.read_text(), str(cfg))
        req = read_request_file(str(d / "request.kaldi-text"))
        graph, phases, res = _run(nnet, [req])
        total += _check_against_kaldi_debug_info(nnet, graph, res.steps,
                                                 (d / "computation.txt").read_text())
        node_to_epoch = compute_nnet_computation_epochs(nnet)
        epoch_size = Counter(node_to_epoch)
        in_loop = {nnet.node_names[n] for n in range(nnet.num_nodes())
                   if epoch_size[node_to_epoch[n]] > 1}
        if in_loop:
            recurrent += 1
            # The shortest time offset around a loop: that many frames per step.
            text = "".join(p.read_text() for p in d.glob("config*.txt"))
            delay = min(abs(int(k)) for name, k in _OFFSET.findall(text)
                        if name in in_loop and int(k) != 0)
            for step in res.steps:
                if step and nnet.node_names[graph.cindexes[step[0]][0]] in in_loop:
                    ts = [graph.cindexes[c][1][1] for c in step]
                    assert max(ts) - min(ts) < delay, (d.name, ts)
    print(f"\nKaldi's matrices: {dict(total)}; {recurrent} recurrent networks")
    assert total["same"] > enough(1500, 300) and recurrent >= enough(10, 2)


# -- recipe networks -------------------------------------------------------------------------

def _recipe(name: str) -> tuple[Nnet, str, int, int]:
    d = reference_dir() / "configs" / name
    if not d.is_dir():
        pytest.skip(f"reference config {name} absent")
    text = (d / "ref.config").read_text()
    info = (d / "kaldi-nnet3-info.txt").read_text()
    left = int(re.search(r"left-context: (\d+)", info).group(1))
    right = int(re.search(r"right-context: (\d+)", info).group(1))
    return nnet_from_config(text), text, left, right


def _recipe_request(nnet: Nnet, text: str, left: int, right: int, num_seq: int,
                    num_frames: int) -> ComputationRequest:
    inputs = {"input": _frames(-left, num_frames + right, num_seq)}
    if nnet.get_node_index("ivector") >= 0:
        inputs["ivector"] = (_frames(0, 1, num_seq) if "ReplaceIndex(ivector, t, 0)" in text
                             else _frames(-left, num_frames + right, num_seq))
    if "StatisticsPoolingComponent" in text:
        # x-vector extraction: one output per sequence from the whole chunk.
        return _request(inputs, {"output": _frames(0, 1, num_seq)})
    return _request(inputs, {name: _frames(0, num_frames, num_seq)
                             for name in nnet.output_node_names()})


_RECIPES = ["cnn_e2eali_ocr_bentham_1a", "lstmp_swbd_6j", "tdnn_attention_swbd_1a",
            "tdnn_lstm_swbd_1e", "tdnn_norm_opgru_ami_1a", "tdnn_xent_nnet3_wsj_1b",
            "tdnnf_librispeech_1d", "xvector_sre16_1a"]


def _check_recurrent_structure(nnet: Nnet, text: str, graph, steps) -> int:
    """Recurrent layers: one step per `delay` frames; all else one step per node."""
    node_to_epoch = compute_nnet_computation_epochs(nnet)
    epoch_size = Counter(node_to_epoch)
    offsets = {abs(int(o)) for o in re.findall(r"IfDefined\(Offset\([^,()]+, *(-?\d+)\)\)", text)}
    spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for step in steps:
        if step:
            ts = [graph.cindexes[c][1][1] for c in step if graph.cindexes[c][1][1] != K_NO_TIME]
            spans[graph.cindexes[step[0]][0]].append((min(ts), max(ts)))
    num_recurrent = 0
    for node, node_spans in spans.items():
        if epoch_size[node_to_epoch[node]] > 1:
            num_recurrent += 1
            (delay,) = offsets
            all_ts = {graph.cindexes[c][1][1] for s in steps if s and graph.cindexes[s[0]][0] == node
                      for c in s}
            assert len(node_spans) == math.ceil(len(all_ts) / delay), nnet.node_names[node]
            assert all(b - a < delay for a, b in node_spans)
            assert node_spans == sorted(node_spans)
        elif nnet.nodes[node].node_type is not NodeType.DIM_RANGE:
            assert len(node_spans) == 1, nnet.node_names[node]
    assert (num_recurrent > 0) == bool(offsets)
    return num_recurrent


@pytest.mark.parametrize("name", [
    # x-vector: stats pooling over 10000 frames makes the graph slow to build.
    pytest.param(n, marks=pytest.mark.slow) if n.startswith("xvector") else n for n in _RECIPES])
def test_recipe_networks_one_sequence(name):
    nnet, text, left, right = _recipe(name)
    req = _recipe_request(nnet, text, left, right, 1, 40 if name.startswith("xvector") else 150)
    graph, phases, res = _run(nnet, [req])
    _check_recurrent_structure(nnet, text, graph, res.steps)


@pytest.mark.slow
@pytest.mark.parametrize("name", _RECIPES)
def test_recipe_networks_64_sequences(name):
    """64 x 150 frames: the same steps as for one sequence, each 64 times the rows."""
    nnet, text, left, right = _recipe(name)
    frames = 40 if name.startswith("xvector") else 150
    one = _run(nnet, [_recipe_request(nnet, text, left, right, 1, frames)])
    graph = _build(nnet, [_recipe_request(nnet, text, left, right, 64, frames)])
    num_orig = len(graph.cindexes)
    start = time.perf_counter()
    phases = compute_computation_phases(nnet, graph)
    res = compute_computation_steps_full(
        nnet, _recipe_request(nnet, text, left, right, 64, frames), phases, graph)
    elapsed = time.perf_counter() - start
    print(f"\n{name}: {num_orig} cindexes, {len(res.steps)} steps, phases+steps {elapsed:.2f} s")
    _check_steps(nnet, graph, num_orig, [_recipe_request(nnet, text, left, right, 64, frames)],
                 res)
    assert [len(s) * 64 for s in one[2].steps] == [len(s) for s in res.steps]


# -- the vosk TDNN-F model --------------------------------------------------------------------

def _vosk_request(num_seq: int, last_t: int, stride: int) -> ComputationRequest:
    # The requests of the reference computations: input t from first-34 to
    # last+34, the ivector at t=0, output 'output' at the listed t values.
    inputs = {"input": _frames(-34, last_t + 35, num_seq), "ivector": _frames(0, 1, num_seq)}
    return _request(inputs, {"output": _frames(0, last_t + 1, num_seq, stride)})


def _vosk_nnet(path) -> Nnet:
    from pynnet3.compile.am_nnet import read_mdl

    _, am, _ = read_mdl(str(path))
    return am.nnet


@pytest.mark.parametrize("chunks", [
    "t0-14[79]",                                              # 150 frames, 50 at stride 3
    pytest.param("t0-447", marks=pytest.mark.slow)])          # 150 frames at stride 3
def test_vosk_steps_match_kaldi_computations(vosk_mdl, chunks):
    compile_dir = reference_dir() / "compile"
    files = sorted(compile_dir.glob(f"computation.*_{chunks}*.txt"))
    if not files:
        pytest.skip("no printed vosk computations")
    nnet = _vosk_nnet(vosk_mdl)
    cache: dict[tuple, tuple] = {}
    total: Counter = Counter()
    for f in files:
        m = re.search(r"computation\.(every|stride3)_t0-(\d+)", f.name)
        assert m, f.name
        key = (int(m.group(2)), 1 if m.group(1) == "every" else 3)
        if key not in cache:
            graph, _, res = _run(nnet, [_vosk_request(1, *key)])
            cache[key] = (graph, res)
        graph, res = cache[key]
        total += _check_against_kaldi_debug_info(nnet, graph, res.steps, f.read_text())
    # Every TDNN-F layer is one step (with its input step), however long the chunk.
    for graph, res in cache.values():
        assert len(res.steps) == 195
    print(f"\nKaldi's matrices: {dict(total)}")
    assert total["same"] >= 30 * len(files)


@pytest.mark.slow
def test_vosk_64_sequences_speed(vosk_mdl):
    nnet = _vosk_nnet(vosk_mdl)
    req = _vosk_request(64, 147, 3)
    graph = _build(nnet, [req])
    num_orig = len(graph.cindexes)
    start = time.perf_counter()
    phases = compute_computation_phases(nnet, graph)
    mid = time.perf_counter()
    res = compute_computation_steps_full(nnet, req, phases, graph)
    end = time.perf_counter()
    print(f"\nvosk 64 x 50 frames (stride 3): {num_orig} cindexes, phases {mid - start:.2f} s, "
          f"steps {end - mid:.2f} s")
    _check_steps(nnet, graph, num_orig, [req], res)
    assert len(res.steps) == 195
