"""Graph algorithms on the node graph of an Nnet (Kaldi's nnet-graph.{h,cc}).

A graph is a ``list[list[int]]``: ``graph[i]`` lists the nodes that have an
edge *from* ``i``.  :func:`nnet_to_directed_graph` builds the graph of a
network with an edge from each node to the nodes that depend on it, so a
topological order of it is a valid order of computation.

Every traversal here is iterative: real networks have hundreds of nodes and
Python's recursion limit must never decide whether a model can be loaded.
The iterative versions visit nodes and edges in exactly the order of Kaldi's
recursive ones, so SCC numbering and epochs come out identical.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..errors import ConfigError, PynnetError
from .components.base import Prop
from .index import Index

if TYPE_CHECKING:
    from .nnet import Nnet

Graph = list[list[int]]


def _node_dependencies(nnet: "Nnet", n: int) -> list[int]:
    """Nodes that node ``n`` reads from (any time offset), sorted and unique."""
    node = nnet.nodes[n]
    if nnet.is_input_node(n):
        return []
    if nnet.is_descriptor_node(n):
        assert node.descriptor is not None
        return sorted(set(node.descriptor.get_node_dependencies()))
    if nnet.is_component_node(n):
        return [n - 1]
    return [node.node_index]


def nnet_to_directed_graph(nnet: "Nnet") -> Graph:
    """Edges from each node to the nodes that depend on it (NnetToDirectedGraph)."""
    num_nodes = nnet.num_nodes()
    graph: Graph = [[] for _ in range(num_nodes)]
    for n in range(num_nodes):
        for dep in _node_dependencies(nnet, n):
            if not 0 <= dep < num_nodes:
                raise ConfigError(f"node {nnet.node_names[n]} depends on invalid node index {dep}")
            graph[dep].append(n)
    return graph


def compute_graph_transpose(graph: Sequence[Sequence[int]]) -> Graph:
    transpose: Graph = [[] for _ in range(len(graph))]
    for n, dests in enumerate(graph):
        for dest in dests:
            transpose[dest].append(n)
    return transpose


def find_sccs(graph: Sequence[Sequence[int]]) -> Graph:
    """Strongly connected components by Tarjan's algorithm (FindSccs).

    SCCs come out in the order Tarjan's algorithm completes them (reverse
    topological order), and each SCC lists its nodes in stack-pop order, both
    as in Kaldi's recursive implementation.
    """
    size = len(graph)
    index = [-1] * size
    lowlink = [-1] * size
    on_stack = [False] * size
    stack: list[int] = []
    sccs: Graph = []
    counter = 0
    for root in range(size):
        if index[root] != -1:
            continue
        index[root] = lowlink[root] = counter
        counter += 1
        on_stack[root] = True
        stack.append(root)
        # Each frame: (node, position of the next edge to look at).
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            edges = graph[v]
            if i < len(edges):
                work[-1] = (v, i + 1)
                w = edges[i]
                if index[w] == -1:
                    index[w] = lowlink[w] = counter
                    counter += 1
                    on_stack[w] = True
                    stack.append(w)
                    work.append((w, 0))
                elif on_stack[w]:
                    # A back edge: use w's index, not its lowlink (v cannot be
                    # the root of w's component).
                    if index[w] < lowlink[v]:
                        lowlink[v] = index[w]
                continue
            work.pop()
            if lowlink[v] == index[v]:
                scc = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    scc.append(w)
                    if w == v:
                        break
                sccs.append(scc)
            if work:
                u = work[-1][0]
                if lowlink[v] < lowlink[u]:
                    lowlink[u] = lowlink[v]
    return sccs


def make_scc_graph(graph: Sequence[Sequence[int]], sccs: Sequence[Sequence[int]]) -> Graph:
    """The graph between SCCs (MakeSccGraph): no self-edges, sorted, unique."""
    node_to_scc = [0] * len(graph)
    for i, scc in enumerate(sccs):
        for node in scc:
            node_to_scc[node] = i
    scc_graph: Graph = []
    for i, scc in enumerate(sccs):
        dests = {node_to_scc[dest] for node in scc for dest in graph[node]}
        dests.discard(i)
        scc_graph.append(sorted(dests))
    return scc_graph


def compute_topological_order(graph: Sequence[Sequence[int]]) -> list[int]:
    """``node_to_order`` for an acyclic graph (Kaldi's ComputeTopSortOrder).

    Depth-first search; a node gets its place once everything reachable from
    it has been placed, and the order is the reverse of that.  Raises
    PynnetError on a cycle.
    """
    size = len(graph)
    in_progress = [False] * size
    visited = [False] * size
    reversed_order: list[int] = []
    for start in range(size):
        if visited[start]:
            continue
        in_progress[start] = True
        work = [(start, 0)]
        while work:
            v, i = work[-1]
            edges = graph[v]
            if i < len(edges):
                work[-1] = (v, i + 1)
                w = edges[i]
                if in_progress[w]:
                    raise PynnetError("cycle detected when computing the topological sorting order")
                if not visited[w]:
                    in_progress[w] = True
                    work.append((w, 0))
                continue
            work.pop()
            in_progress[v] = False
            visited[v] = True
            reversed_order.append(v)
    node_to_order = [0] * size
    for i, node in enumerate(reversed_order):
        node_to_order[node] = size - i - 1
    return node_to_order


def print_graph_to_string(graph: Sequence[Sequence[int]]) -> str:
    return "; ".join(f"{i} -> ({','.join(str(d) for d in dests)})"
                     for i, dests in enumerate(graph))


def graph_has_cycles(graph: Sequence[Sequence[int]]) -> bool:
    if any(len(scc) > 1 for scc in find_sccs(graph)):
        return True
    return any(i in dests for i, dests in enumerate(graph))


def compute_nnet_computation_epochs(nnet: "Nnet") -> list[int]:
    """Epoch of each node (ComputeNnetComputationEpochs).

    Nodes in the same strongly connected component (e.g. one LSTM layer)
    share an epoch; epochs follow a topological order of the SCC graph.
    """
    graph = nnet_to_directed_graph(nnet)
    sccs = find_sccs(graph)
    scc_node_to_epoch = compute_topological_order(make_scc_graph(graph, sccs))
    node_to_epoch = [0] * len(graph)
    for i, scc in enumerate(sccs):
        for node in scc:
            node_to_epoch[node] = scc_node_to_epoch[i]
    return node_to_epoch


def find_orphan_components(nnet: "Nnet") -> list[int]:
    """Components that no component-node uses (FindOrphanComponents)."""
    used = [False] * nnet.num_components()
    for n in range(nnet.num_nodes()):
        if nnet.is_component_node(n):
            used[nnet.nodes[n].component_index] = True
    return [c for c, u in enumerate(used) if not u]


def find_orphan_nodes(nnet: "Nnet") -> list[int]:
    """Nodes not needed to compute any output (FindOrphanNodes)."""
    dependency_graph = compute_graph_transpose(nnet_to_directed_graph(nnet))
    num_nodes = nnet.num_nodes()
    required = [False] * num_nodes
    queue = [n for n in range(num_nodes) if nnet.is_output_node(n)]
    while queue:
        i = queue.pop()
        if not required[i]:
            required[i] = True
            queue.extend(dependency_graph[i])
    return [n for n in range(num_nodes) if not required[n]]


# -- instantaneous cycles ------------------------------------------------------

_ZERO = Index(0, 0, 0)


def _instantaneous_dependencies(nnet: "Nnet", n: int) -> list[int]:
    """Nodes that node ``n`` needs at the very same Index, e.g. (0, 0, 0).

    A loop made only of such edges can never be computed: each cindex on it
    would wait for itself.  Edges through time offsets (``Offset(x, -1)``)
    are left out, which is what makes recurrent networks legal.
    """
    node = nnet.nodes[n]
    if nnet.is_input_node(n):
        return []
    if nnet.is_dim_range_node(n):
        return [node.node_index]
    if nnet.is_descriptor_node(n):
        desc = node.descriptor
        assert desc is not None
        # Switch() picks its source by t modulo its period: try each phase.
        ans = set()
        for t_value in range(min(desc.modulus(), 64)):
            index = Index(0, t_value, 0)
            ans.update(c[0] for c in desc.get_dependencies(index) if tuple(c[1]) == index)
        return sorted(ans)
    comp = nnet.component_for_node(n)
    if comp.properties() & Prop.SIMPLE:
        return [n - 1]
    try:
        input_indexes = comp.get_input_indexes(None, _ZERO)
    except Exception:  # noqa: BLE001 - be conservative if a component cannot say
        return [n - 1]
    return [n - 1] if any(tuple(i) == _ZERO for i in input_indexes) else []


def check_no_instantaneous_cycles(nnet: "Nnet") -> None:
    """Raise ConfigError if some node depends on itself with no time offset.

    Example: ``component-node name=a component=c input=b`` together with
    ``component-node name=b component=d input=a``.  Kaldi itself only finds
    this when building a computation ("Loop detected ..."); we refuse such a
    network when it is created.
    """
    num_nodes = nnet.num_nodes()
    graph: Graph = [[] for _ in range(num_nodes)]
    self_loops = []
    for n in range(num_nodes):
        for dep in _instantaneous_dependencies(nnet, n):
            if dep == n:
                self_loops.append([n])
            elif 0 <= dep < num_nodes:
                graph[dep].append(n)
    cycles = [scc for scc in find_sccs(graph) if len(scc) > 1] + self_loops
    if not cycles:
        return
    # Name the nodes a user wrote (component-input descriptors are implicit).
    cycle = sorted(cycles[0])
    named = [m for m in cycle if not nnet.is_component_input_node(m)] or cycle
    names = ", ".join(nnet.node_names[m] for m in named)
    raise nnet.node_error(named[0], f"the network has a cycle with no time offset (nodes {names} "
                      "depend on each other at the same time index); recurrent "
                      "connections need a time offset, e.g. IfDefined(Offset(x, -1))")
