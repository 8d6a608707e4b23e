"""Graph algorithms on network nodes (Kaldi's nnet-graph) and cycle checks."""
from __future__ import annotations

import random

import pytest

from pynnet3.errors import ConfigError, PynnetError
from pynnet3.nnet import graph as g
from tests.helpers import nnet_from_config
from tests.helpers_graph import TDNN


# -- pure graph algorithms ----------------------------------------------------------

def _reachable(graph, start):
    seen = {start}
    stack = [start]
    while stack:
        v = stack.pop()
        for w in graph[v]:
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return seen


def _brute_force_sccs(graph):
    reach = [_reachable(graph, v) for v in range(len(graph))]
    return {frozenset(w for w in range(len(graph)) if w in reach[v] and v in reach[w])
            for v in range(len(graph))}


def test_find_sccs_small():
    # 0 -> 1 -> 2 -> 0 is a cycle; 3 -> 4, 4 -> 3; 5 alone with a self loop.
    graph = [[1], [2], [0, 3], [4], [3], [5]]
    sccs = g.find_sccs(graph)
    assert sorted(sorted(s) for s in sccs) == [[0, 1, 2], [3, 4], [5]]
    # Tarjan completes SCCs in reverse topological order: {3,4} before {0,1,2}.
    order = [frozenset(s) for s in sccs]
    assert order.index(frozenset({3, 4})) < order.index(frozenset({0, 1, 2}))
    # Kaldi's recursive version pops the stack: 2, 1, 0 is the pop order.
    assert [s for s in sccs if 0 in s][0] == [2, 1, 0]


def test_find_sccs_matches_brute_force_on_random_graphs():
    rng = random.Random(5)
    for _ in range(40):
        num = rng.randint(1, 25)
        graph = [[rng.randrange(num) for _ in range(rng.randint(0, 3))] for _ in range(num)]
        sccs = g.find_sccs(graph)
        assert {frozenset(s) for s in sccs} == _brute_force_sccs(graph)
        assert sum(len(s) for s in sccs) == num
        # The SCC graph is acyclic, and a topological order of it exists.
        scc_graph = g.make_scc_graph(graph, sccs)
        order = g.compute_topological_order(scc_graph)
        assert sorted(order) == list(range(len(sccs)))
        for i, dests in enumerate(scc_graph):
            assert i not in dests and dests == sorted(set(dests))
            for j in dests:
                assert order[i] < order[j]


def test_long_chain_has_no_recursion_limit():
    num = 20000
    chain = [[i + 1] for i in range(num - 1)] + [[]]
    assert len(g.find_sccs(chain)) == num
    assert g.compute_topological_order(chain) == list(range(num))
    cycle = [[(i + 1) % num] for i in range(num)]
    assert [len(s) for s in g.find_sccs(cycle)] == [num]
    assert g.graph_has_cycles(cycle)
    assert not g.graph_has_cycles(chain)


def test_topological_order_and_transpose():
    graph = [[2], [2, 3], [4], [4], []]
    order = g.compute_topological_order(graph)
    for i, dests in enumerate(graph):
        for j in dests:
            assert order[i] < order[j]
    # The DFS order of Kaldi's ComputeTopSortOrder, worked by hand.
    assert order == [2, 0, 3, 1, 4]
    assert g.compute_graph_transpose(graph) == [[], [], [0, 1], [1], [2, 3]]
    with pytest.raises(PynnetError):
        g.compute_topological_order([[1], [0]])
    assert g.print_graph_to_string([[1, 2], []]) == "0 -> (1,2); 1 -> ()"
    assert g.graph_has_cycles([[0]])


# -- networks -----------------------------------------------------------------------


# A recurrent layer: r depends on its own past through IfDefined(Offset(r, -1)).
_RNN = """
input-node name=input dim=4
component name=a1 type=AffineComponent input-dim=7 output-dim=3
component name=t1 type=TanhComponent dim=3
component name=extra type=RectifiedLinearComponent dim=3
component-node name=a1 component=a1 input=Append(input, IfDefined(Offset(r, -1)))
component-node name=r component=t1 input=a1
output-node name=output input=r
"""


def test_directed_graph_epochs_and_orphans():
    nnet = nnet_from_config(TDNN)
    names = nnet.node_names
    assert names == ["input", "a1_input", "a1", "r1_input", "r1", "a2_input", "a2", "output"]
    graph = g.nnet_to_directed_graph(nnet)
    assert graph == [[1], [2], [3], [4], [5], [6], [7], []]
    assert g.compute_nnet_computation_epochs(nnet) == list(range(8))
    assert g.find_orphan_nodes(nnet) == []
    assert g.find_orphan_components(nnet) == []

    rnn = nnet_from_config(_RNN)
    epochs = g.compute_nnet_computation_epochs(rnn)
    # a1_input, a1, r form one SCC and share an epoch; output comes after.
    n = {name: i for i, name in enumerate(rnn.node_names)}
    assert epochs[n["a1_input"]] == epochs[n["a1"]] == epochs[n["r"]]
    assert epochs[n["input"]] < epochs[n["a1"]] < epochs[n["output"]]
    assert g.find_orphan_components(rnn) == [rnn.get_component_index("extra")]


def test_orphan_nodes():
    nnet = nnet_from_config(TDNN + "component-node name=unused component=r1 input=a1\n")
    orphans = [nnet.node_names[i] for i in g.find_orphan_nodes(nnet)]
    assert orphans == ["unused_input", "unused"]


def test_instantaneous_cycle_is_rejected():
    text = """
input-node name=input dim=3
component name=c type=RectifiedLinearComponent dim=3
component name=d type=RectifiedLinearComponent dim=3
component-node name=x component=c input=input
component-node name=a component=c input=Sum(x, b)
component-node name=b component=d input=a
output-node name=output input=b
"""
    with pytest.raises(ConfigError) as e:
        nnet_from_config(text)
    msg = str(e.value)
    assert "cycle" in msg and "(nodes a, b depend" in msg


def test_self_loop_is_rejected_and_offsets_are_fine():
    with pytest.raises(ConfigError, match=r"nodes a\b"):
        nnet_from_config("input-node name=input dim=3\n"
              "component name=c type=RectifiedLinearComponent dim=3\n"
              "component-node name=a component=c input=Sum(input, a)\n"
              "output-node name=output input=a\n")
    # Same loop through a time offset: a legal recurrence.
    nnet_from_config("input-node name=input dim=3\n"
          "component name=c type=RectifiedLinearComponent dim=3\n"
          "component-node name=a component=c input=Sum(input, IfDefined(Offset(a, -1)))\n"
          "output-node name=output input=a\n")
    nnet_from_config(_RNN)
    # A cycle through a dim-range node with no offset.
    with pytest.raises(ConfigError, match="cycle"):
        nnet_from_config("input-node name=input dim=3\n"
              "component name=c type=RectifiedLinearComponent dim=6\n"
              "component-node name=a component=c input=Append(input, d)\n"
              "dim-range-node name=d input-node=a dim-offset=0 dim=3\n"
              "output-node name=output input=a\n")


def test_cycle_through_switch_phase_is_found():
    # At even t, a reads input; at odd t, it reads b at the same t, and b reads a.
    with pytest.raises(ConfigError, match="nodes a, b"):
        nnet_from_config("input-node name=input dim=3\n"
              "component name=c type=RectifiedLinearComponent dim=3\n"
              "component-node name=a component=c input=Switch(input, b)\n"
              "component-node name=b component=c input=a\n"
              "output-node name=output input=b\n")


def test_constant_component_self_reference_is_not_a_cycle():
    # Kaldi's test networks write `component-node name=c0 component=c0 input=c0`
    # for a ConstantComponent, whose output needs no input at all.
    nnet = nnet_from_config("input-node name=input dim=3\n"
                 "component name=c0 type=ConstantComponent output-dim=3\n"
                 "component name=r type=RectifiedLinearComponent dim=3\n"
                 "component-node name=c0 component=c0 input=c0\n"
                 "component-node name=r component=r input=Sum(input, c0)\n"
                 "output-node name=output input=r\n")
    assert g.compute_nnet_computation_epochs(nnet)[nnet.get_node_index("c0")] >= 0
