"""Which input frames each output frame of a feed-forward network reads, for
computing its context without building computation graphs: an acceleration
of :func:`.context.compute_simple_nnet_context` (the reference), same answer.

Kaldi's ComputeSimpleNnetContext (:mod:`.context`) builds the computation
graph of a window of frames, several times, to see which outputs are
computable.  For a network without recurrence, whose descriptors and
components need *all* their inputs (no ``IfDefined``, no ``Failover``, no
component that accepts missing inputs), an output is computable exactly
when every input frame it reads is supplied.  So it is enough to know, for
each output frame, the range of frames it reads from each input node; and
since a network's dependencies repeat with its modulus, that is one small
summary per node and time modulo the modulus, found by following the
descriptors' and components' own dependency functions.

A dependency either moves with the output frame (``Offset(x, -3)``: frame
t - 3) or stays put (``ReplaceIndex(ivector, t, 0)``: frame 0); the two are
told apart by asking for the dependencies at t and at t + modulus.  Anything
that fits neither, or a network outside the class above, makes
:func:`output_reads` return None and the graphs are built as Kaldi does.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ...nnet.graph import graph_has_cycles, nnet_to_directed_graph
from ...nnet.index import Index
from ...nnet.nnet import NodeType
from ..request import MiscComputationInfo
from .programs import analyse_descriptor, component_offsets

if TYPE_CHECKING:
    from ...nnet.nnet import Nnet

# Per input node: [min relative, max relative, min absolute, max absolute]
# frame read (None where there is none of that kind).  A relative frame r
# of an output at t is frame t + r; an absolute frame is that frame.
Summary = dict[int, list[Any]]


class _NotApplicable(Exception):
    pass


class OutputReads:
    """For output frames t = phase (mod modulus): the frames they read."""

    def __init__(self, nnet: "Nnet", modulus: int, per_phase: list[Summary]) -> None:
        self.modulus = modulus
        self.per_phase = per_phase
        self.input_node = nnet.get_node_index("input")
        self.ivector_node = nnet.get_node_index("ivector")

    def computable_outputs(self, input_start: int, window_size: int) -> list[bool]:
        """Which outputs t in [input_start, +window_size) are computable when
        ``input`` is given at the same frames and ``ivector`` (if any) from a
        modulus earlier (the request of Kaldi's context computation)."""
        input_end = input_start + window_size
        ranges = {self.input_node: (input_start, input_end)}
        if self.ivector_node != -1:
            ranges[self.ivector_node] = (input_start - self.modulus, input_end)
        ans = []
        for t in range(input_start, input_end):
            ok = True
            for node, (rmin, rmax, amin, amax) in self.per_phase[t % self.modulus].items():
                lo_hi = ranges.get(node)
                if lo_hi is None:
                    ok = False
                    break
                lo, hi = lo_hi
                if rmin is not None and (t + rmin < lo or t + rmax >= hi):
                    ok = False
                    break
                if amin is not None and (amin < lo or amax >= hi):
                    ok = False
                    break
            ans.append(ok)
        return ans


def _applies(nnet: "Nnet") -> bool:
    if graph_has_cycles(nnet_to_directed_graph(nnet)):
        return False
    for node in nnet.nodes:
        # Every dependency required: the same reading of the network as the
        # accelerated graph builders' (programs.py).
        if node.node_type is NodeType.DESCRIPTOR:
            if not analyse_descriptor(node.descriptor)[0]:
                return False
        elif node.node_type is NodeType.COMPONENT:
            if component_offsets(nnet.components[node.component_index]) is None:
                return False
    return True


def output_reads(nnet: "Nnet", modulus: int) -> OutputReads | None:
    """The frames each output frame of ``output`` reads, or None if the
    network is not one whose context this can decide (see the module doc)."""
    try:
        if not _applies(nnet):
            return None
        output = nnet.get_node_index("output")
        walker = _Walker(nnet, modulus)
        return OutputReads(nnet, modulus, [walker.summary(output, p) for p in range(modulus)])
    except _NotApplicable:
        return None


class _Walker:
    def __init__(self, nnet: "Nnet", modulus: int) -> None:
        self.nnet = nnet
        self.modulus = modulus
        self.misc_info = MiscComputationInfo()
        self.memo: dict[tuple[int, int], Summary] = {}

    def dependencies(self, node: int, t: int) -> list[tuple[int, Index]]:
        nnet = self.nnet
        info = nnet.nodes[node]
        index = Index(0, t, 0)
        if info.node_type is NodeType.DESCRIPTOR:
            return [(n, i if type(i) is Index else Index(*i))
                    for n, i in info.descriptor.get_dependencies(index)]
        if info.node_type is NodeType.COMPONENT:
            component = nnet.components[info.component_index]
            return [(node - 1, i if type(i) is Index else Index(*i))
                    for i in component.get_input_indexes(self.misc_info, index)]
        if info.node_type is NodeType.DIM_RANGE:
            return [(info.node_index, index)]
        return []

    def summary(self, node: int, phase: int) -> Summary:
        key = (node, phase)
        ans = self.memo.get(key)
        if ans is not None:
            return ans
        if self.nnet.nodes[node].node_type is NodeType.INPUT:
            ans = {node: [0, 0, None, None]}
            self.memo[key] = ans
            return ans
        # Deep networks recurse one level per node.
        if sys.getrecursionlimit() < 4 * len(self.nnet.nodes) + 100:
            sys.setrecursionlimit(4 * len(self.nnet.nodes) + 100)
        modulus = self.modulus
        here = self.dependencies(node, phase)
        later = self.dependencies(node, phase + modulus)
        if len(here) != len(later):
            raise _NotApplicable
        ans = {}
        for (src, i0), (src1, i1) in zip(here, later):
            if src != src1 or i0.n != 0 or i1.n != 0 or i0.x != 0 or i1.x != 0:
                raise _NotApplicable
            sub = self.summary(src, i0.t % modulus)
            if i1.t - i0.t == modulus:      # moves with the output frame
                shift, absolute = i0.t - phase, False
            elif i1.t == i0.t:              # a fixed frame
                shift, absolute = i0.t, True
            else:
                raise _NotApplicable
            for input_node, (rmin, rmax, amin, amax) in sub.items():
                cur = ans.setdefault(input_node, [None, None, None, None])
                if rmin is not None:
                    if absolute:
                        _merge(cur, 2, rmin + shift, rmax + shift)
                    else:
                        _merge(cur, 0, rmin + shift, rmax + shift)
                if amin is not None:
                    _merge(cur, 2, amin, amax)
        self.memo[key] = ans
        return ans


def _merge(cur: list[Any], at: int, lo: int, hi: int) -> None:
    cur[at] = lo if cur[at] is None else min(cur[at], lo)
    cur[at + 1] = hi if cur[at + 1] is None else max(cur[at + 1], hi)
