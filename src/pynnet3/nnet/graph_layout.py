"""A drawing layout of a network's node graph (for ``nnet3-info --graph``).

Kaldi has no picture of a network; this module computes what one needs, with
no drawing library: one box per input, component and output node (and per
dim-range node), the component's input Descriptor folded into the edges that
enter it, each edge labelled with a short summary of how the Descriptor uses
its source (``Append: t-1,t,t+1``, ``Sum: x0.66``, ``ReplaceIndex t=0``...).

Boxes are placed by *level*, the longest path from an input node, top to
bottom; within a level, in the mean order of their sources (one barycentric
pass, which keeps the chains of a TDNN straight).  Deep networks (a TDNN-F has
about a hundred levels) are folded into several columns of at most
``max_rows`` levels each, read left to right.  Recurrent networks have cycles
(``IfDefined(Offset(lstm.r, -3))``); the edges that close a cycle, found by a
depth-first search from the inputs, are kept for drawing (``recurrent``) but
take no part in the levels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from .descriptor import (BinarySumDescriptor, ConstantSumDescriptor, Descriptor,
                         ForwardingDescriptor, OffsetForwardingDescriptor,
                         OptionalSumDescriptor, ReplaceIndexForwardingDescriptor,
                         RoundingForwardingDescriptor, SimpleForwardingDescriptor,
                         SimpleSumDescriptor, SumDescriptor, SwitchingForwardingDescriptor,
                         format_float)

if TYPE_CHECKING:
    from .nnet import Nnet

__all__ = ["GraphLayout", "LayoutEdge", "LayoutNode", "descriptor_edge_labels",
           "layout_nnet_graph"]


@dataclass(frozen=True)
class LayoutNode:
    node: int          # index in Nnet.nodes (a component's own node, not its input descriptor)
    name: str
    kind: str          # "input", "component", "output" or "dim-range"
    type_name: str     # the component's type without "Component"; else the kind
    dim: int           # output dim of the node (input dim for an output node)
    level: int         # longest path from an input node
    order: int         # position within the level, 0-based
    x: float = 0.0     # drawing position: column offset + order (centred in the column)
    y: float = 0.0     # drawing row within the column, 0 at the top


@dataclass(frozen=True)
class LayoutEdge:
    src: int           # LayoutNode.node of the source
    dst: int           # LayoutNode.node of the destination
    label: str         # short Descriptor summary ('' for plain forwarding)
    recurrent: bool = False   # closes a cycle (drawn, but not used for levels)


@dataclass
class GraphLayout:
    nodes: list[LayoutNode] = field(default_factory=list)
    edges: list[LayoutEdge] = field(default_factory=list)
    num_levels: int = 0
    num_columns: int = 1
    rows_per_column: int = 0
    width: float = 0.0   # total drawing width in node slots

    def node(self, index: int) -> LayoutNode:
        for n in self.nodes:
            if n.node == index:
                return n
        raise KeyError(index)


# ---------------------------------------------------------------------------
# Descriptor summaries
# ---------------------------------------------------------------------------
def _offset_text(name: str, value: int) -> str:
    return name if value == 0 else f"{name}{value:+d}"


def _forwarding_terms(fd: ForwardingDescriptor, mods: tuple[str, ...],
                      out: list[tuple[int, tuple[str, ...]]]) -> None:
    """(source node, modifiers from the outside in) of each leaf of ``fd``."""
    if isinstance(fd, SimpleForwardingDescriptor):
        scale = () if fd.scale == 1.0 else (f"x{format_float(fd.scale)}",)
        out.append((fd.src_node, mods + scale))
    elif isinstance(fd, OffsetForwardingDescriptor):
        parts = []
        if fd.offset.t != 0 or fd.offset.x == 0:
            parts.append(_offset_text("t", fd.offset.t))
        if fd.offset.x != 0:
            parts.append(_offset_text("x", fd.offset.x))
        _forwarding_terms(fd.src, mods + (" ".join(parts),), out)
    elif isinstance(fd, ReplaceIndexForwardingDescriptor):
        _forwarding_terms(fd.src, mods + (f"ReplaceIndex {fd.variable_name}={fd.value}",), out)
    elif isinstance(fd, RoundingForwardingDescriptor):
        _forwarding_terms(fd.src, mods + (f"Round {fd.t_modulus}",), out)
    elif isinstance(fd, SwitchingForwardingDescriptor):
        for src in fd.src:
            _forwarding_terms(src, mods + ("Switch",), out)
    else:  # a kind this module does not know: name it by its class
        for dep in fd.get_node_dependencies():
            out.append((dep, mods + (type(fd).__name__,)))


def _sum_terms(sd: SumDescriptor, wrappers: tuple[str, ...],
               out: list[tuple[int, tuple[str, ...], tuple[str, ...]]]) -> None:
    """(source node, wrappers, modifiers) of each leaf of ``sd``."""
    if isinstance(sd, SimpleSumDescriptor):
        leaves: list[tuple[int, tuple[str, ...]]] = []
        _forwarding_terms(sd.src, (), leaves)
        out.extend((node, wrappers, mods) for node, mods in leaves)
    elif isinstance(sd, OptionalSumDescriptor):
        _sum_terms(sd.src, wrappers + ("IfDefined",), out)
    elif isinstance(sd, BinarySumDescriptor):
        _sum_terms(sd.src1, wrappers + (sd.op,), out)
        _sum_terms(sd.src2, wrappers + (sd.op,), out)
    elif isinstance(sd, ConstantSumDescriptor):
        return
    else:
        for dep in sd.get_node_dependencies():
            out.append((dep, wrappers + (type(sd).__name__,), ()))


def descriptor_edge_labels(desc: Descriptor) -> dict[int, str]:
    """For each node ``desc`` reads, a short label of how it reads it.

    Wrappers (Append, Sum, Failover, IfDefined) come first, then the terms
    (offsets, scales, ReplaceIndex...), e.g. ``Append: t-1,t,t+1`` for
    ``Append(Offset(x, -1), x, Offset(x, 1))``; '' for a plain ``x``.
    """
    terms: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = []
    outer = ("Append",) if len(desc.parts) > 1 else ()
    for part in desc.parts:
        _sum_terms(part, outer, terms)
    by_node: dict[int, tuple[list[str], list[str]]] = {}
    for node, wrappers, mods in terms:
        wl, tl = by_node.setdefault(node, ([], []))
        for w in wrappers:
            if w not in wl:
                wl.append(w)
        tl.append(" ".join(mods))
    labels = {}
    for node, (wl, tl) in by_node.items():
        if len(tl) > 1:  # several reads of one node: a plain one is "t"
            tl = [t if t else "t" for t in tl]
        shown = [t for i, t in enumerate(tl) if t and t not in tl[:i]]
        head = " ".join(wl)
        body = ",".join(shown)
        labels[node] = f"{head}: {body}" if head and body else (head or body)
    return labels


# ---------------------------------------------------------------------------
# Layout
# ---------------------------------------------------------------------------
def _back_edges(succ: dict[int, list[int]], order: Sequence[int]) -> set[tuple[int, int]]:
    """Edges to a node still on the stack of an iterative depth-first search."""
    white, grey, black = 0, 1, 2
    color = {n: white for n in order}
    back: set[tuple[int, int]] = set()
    for root in order:
        if color[root] != white:
            continue
        color[root] = grey
        stack = [(root, iter(succ[root]))]
        while stack:
            n, it = stack[-1]
            for m in it:
                if color[m] == grey:
                    back.add((n, m))
                elif color[m] == white:
                    color[m] = grey
                    stack.append((m, iter(succ[m])))
                    break
            else:
                color[n] = black
                stack.pop()
    return back


def layout_nnet_graph(nnet: "Nnet", max_rows: int = 24) -> GraphLayout:
    """Place every drawable node of ``nnet`` (see the module docstring)."""
    from .nnet import NodeType

    kinds: dict[int, str] = {}
    edges: list[LayoutEdge] = []
    for n, node in enumerate(nnet.nodes):
        t = node.node_type
        if t is NodeType.INPUT:
            kinds[n] = "input"
        elif t is NodeType.COMPONENT:
            kinds[n] = "component"
            desc = nnet.nodes[n - 1].descriptor
            assert desc is not None
            edges += [LayoutEdge(s, n, lab) for s, lab in descriptor_edge_labels(desc).items()]
        elif t is NodeType.DIM_RANGE:
            kinds[n] = "dim-range"
            edges.append(LayoutEdge(node.node_index, n,
                                    f"dims {node.dim_offset}:{node.dim_offset + node.dim}"))
        elif nnet.is_output_node(n):
            kinds[n] = "output"
            assert node.descriptor is not None
            edges += [LayoutEdge(s, n, lab)
                      for s, lab in descriptor_edge_labels(node.descriptor).items()]
    drawn = sorted(kinds)
    succ: dict[int, list[int]] = {n: [] for n in drawn}
    for e in edges:
        succ[e.src].append(e.dst)
    roots = [n for n in drawn if kinds[n] == "input"] + [n for n in drawn if kinds[n] != "input"]
    back = _back_edges(succ, roots)
    edges = [LayoutEdge(e.src, e.dst, e.label, (e.src, e.dst) in back) for e in edges]
    forward = [e for e in edges if not e.recurrent]

    # Longest path from the sources, in a topological order (Kahn).
    indegree = {n: 0 for n in drawn}
    preds: dict[int, list[int]] = {n: [] for n in drawn}
    fsucc: dict[int, list[int]] = {n: [] for n in drawn}
    for e in forward:
        indegree[e.dst] += 1
        preds[e.dst].append(e.src)
        fsucc[e.src].append(e.dst)
    level = {n: 0 for n in drawn}
    ready = [n for n in drawn if indegree[n] == 0]
    while ready:
        n = ready.pop(0)
        for m in fsucc[n]:
            level[m] = max(level[m], level[n] + 1)
            indegree[m] -= 1
            if indegree[m] == 0:
                ready.append(m)
    num_levels = max(level.values(), default=-1) + 1

    # Order within each level: by the mean order of the sources (inputs by index).
    by_level: list[list[int]] = [[] for _ in range(num_levels)]
    for n in drawn:
        by_level[level[n]].append(n)
    order: dict[int, int] = {}
    for lev, members in enumerate(by_level):
        if lev > 0:
            def key(n: int) -> tuple[float, int]:
                ps = [order[p] for p in preds[n] if p in order]
                return (sum(ps) / len(ps) if ps else math.inf, n)
            members.sort(key=key)
        for i, n in enumerate(members):
            order[n] = i

    # Fold into columns of at most max_rows levels.
    num_columns = max(1, math.ceil(num_levels / max(1, max_rows)))
    rows = math.ceil(num_levels / num_columns) if num_levels else 0
    col_width = [0] * num_columns
    for lev, members in enumerate(by_level):
        c = lev // rows
        col_width[c] = max(col_width[c], len(members))
    col_start = [sum(col_width[:c]) + 0.6 * c for c in range(num_columns)]
    # x within the column: under the mean of the sources where there is room
    # (so a chain stays straight below a branch), one slot apart, inside the column.
    rel: dict[int, float] = {}
    for lev, members in enumerate(by_level):
        w = col_width[lev // rows]
        centred = [(w - len(members)) / 2.0 + i for i in range(len(members))]
        want = []
        for i, n in enumerate(members):
            ps = [rel[p] for p in preds[n] if p in rel]
            want.append(sum(ps) / len(ps) if ps and len(members) < w else centred[i])
        for i in range(len(members)):
            lo = 0.0 if i == 0 else want[i - 1] + 1.0
            want[i] = max(want[i], lo)
        for i in range(len(members) - 1, -1, -1):
            hi = w - 1.0 if i == len(members) - 1 else want[i + 1] - 1.0
            want[i] = min(want[i], hi)
        for n, x in zip(members, want):
            rel[n] = x
    nodes = []
    for n in drawn:
        lev = level[n]
        c = lev // rows
        x = col_start[c] + rel[n]
        node = nnet.nodes[n]
        if kinds[n] == "component":
            comp = nnet.components[node.component_index]
            type_name = (comp.type_name or type(comp).__name__).removesuffix("Component")
        else:
            type_name = kinds[n]
        nodes.append(LayoutNode(n, nnet.node_names[n], kinds[n], type_name, nnet.node_dim(n),
                                lev, order[n], x, float(lev - c * rows)))
    width = sum(col_width) + 0.6 * (num_columns - 1)
    return GraphLayout(nodes, edges, num_levels, num_columns, rows, width)
