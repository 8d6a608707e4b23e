"""The drawing layout of a network's node graph (nnet3-info --graph)."""
from __future__ import annotations

from pynnet3.nnet.graph_layout import descriptor_edge_labels, layout_nnet_graph
from tests.helpers import nnet_from_config

CONFIG = """
input-node name=input dim=4
input-node name=ivector dim=2
component name=lda type=FixedAffineComponent input-dim=14 output-dim=6
component-node name=lda component=lda input=Append(Offset(input, -1), input, Offset(input, 1), ReplaceIndex(ivector, t, 0))
component name=a1 type=AffineComponent input-dim=6 output-dim=6
component-node name=a1 component=a1 input=lda
component name=r1 type=RectifiedLinearComponent dim=6
component-node name=r1 component=r1 input=a1
component name=noop type=NoOpComponent dim=6
component-node name=noop component=noop input=Sum(Scale(0.5, lda), r1)
dim-range-node name=half input-node=noop dim-offset=0 dim=3
component name=out type=AffineComponent input-dim=3 output-dim=5
component-node name=out component=out input=half
output-node name=output input=out
output-node name=output-raw input=Offset(noop, 2) objective=quadratic
"""

RECURRENT = """
input-node name=input dim=3
component name=a type=AffineComponent input-dim=6 output-dim=3
component-node name=a component=a input=Append(input, IfDefined(Offset(b, -1)))
component name=b type=TanhComponent dim=3
component-node name=b component=b input=a
output-node name=output input=b
"""


def _drawn(nnet) -> list[int]:
    return [n for n in range(nnet.num_nodes()) if not nnet.is_component_input_node(n)]


def _expected_edges(nnet) -> set[tuple[int, int]]:
    """From the Descriptors directly: each node's dependencies (a component's
    are those of its input descriptor node)."""
    edges = set()
    for n in _drawn(nnet):
        node = nnet.nodes[n]
        if nnet.is_component_node(n):
            deps = nnet.nodes[n - 1].descriptor.get_node_dependencies()
        elif nnet.is_dim_range_node(n):
            deps = [node.node_index]
        elif nnet.is_output_node(n):
            deps = node.descriptor.get_node_dependencies()
        else:
            deps = []
        edges |= {(d, n) for d in deps}
    return edges


def test_every_node_placed_once_and_edges_from_descriptors() -> None:
    nnet = nnet_from_config(CONFIG)
    layout = layout_nnet_graph(nnet)
    placed = [n.node for n in layout.nodes]
    assert sorted(placed) == _drawn(nnet)          # each drawable node exactly once
    assert {(e.src, e.dst) for e in layout.edges} == _expected_edges(nnet)
    assert len(layout.edges) == len({(e.src, e.dst) for e in layout.edges})
    level = {n.node: n.level for n in layout.nodes}
    for e in layout.edges:
        assert not e.recurrent and level[e.dst] > level[e.src]
    # Levels are longest paths: noop reads lda (level 1) and r1 (level 3).
    idx = nnet.get_node_index
    assert level[idx("input")] == level[idx("ivector")] == 0
    assert level[idx("lda")] == 1 and level[idx("r1")] == 3 and level[idx("noop")] == 4
    assert level[idx("output")] == 7 and level[idx("output-raw")] == 5
    # No two boxes in one place.
    assert len({(n.x, n.y) for n in layout.nodes}) == len(layout.nodes)
    kinds = {n.name: (n.kind, n.type_name, n.dim) for n in layout.nodes}
    assert kinds["lda"] == ("component", "FixedAffine", 6)
    assert kinds["half"] == ("dim-range", "dim-range", 3)
    assert kinds["output-raw"] == ("output", "output", 6)


def test_edge_labels_summarise_descriptors() -> None:
    nnet = nnet_from_config(CONFIG)
    idx = nnet.get_node_index
    labels = {(e.src, e.dst): e.label for e in layout_nnet_graph(nnet).edges}
    assert labels[idx("input"), idx("lda")] == "Append: t-1,t,t+1"
    assert labels[idx("ivector"), idx("lda")] == "Append: ReplaceIndex t=0"
    assert labels[idx("lda"), idx("noop")] == "Sum: x0.5"
    assert labels[idx("r1"), idx("noop")] == "Sum"
    assert labels[idx("a1"), idx("r1")] == ""
    assert labels[idx("noop"), idx("half")] == "dims 0:3"
    assert labels[idx("noop"), idx("output-raw")] == "t+2"
    desc = nnet.nodes[idx("lda") - 1].descriptor
    assert descriptor_edge_labels(desc) == {idx("input"): "Append: t-1,t,t+1",
                                            idx("ivector"): "Append: ReplaceIndex t=0"}


def test_recurrent_edge_kept_but_not_levelled() -> None:
    nnet = nnet_from_config(RECURRENT)
    layout = layout_nnet_graph(nnet)
    idx = nnet.get_node_index
    rec = [(e.src, e.dst, e.label) for e in layout.edges if e.recurrent]
    assert rec == [(idx("b"), idx("a"), "Append IfDefined: t-1")]
    level = {n.node: n.level for n in layout.nodes}
    assert [level[idx(k)] for k in ("input", "a", "b", "output")] == [0, 1, 2, 3]


def test_deep_network_folds_into_columns() -> None:
    lines = ["input-node name=input dim=2"]
    prev = "input"
    for i in range(30):
        lines += [f"component name=c{i} type=TanhComponent dim=2",
                  f"component-node name=c{i} component=c{i} input={prev}"]
        prev = f"c{i}"
    lines.append(f"output-node name=output input={prev}")
    layout = layout_nnet_graph(nnet_from_config("\n".join(lines)), max_rows=10)
    assert layout.num_levels == 32 and layout.num_columns == 4 and layout.rows_per_column == 8
    assert max(n.y for n in layout.nodes) == 7
    assert len({(n.x, n.y) for n in layout.nodes}) == 32
