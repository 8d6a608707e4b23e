"""The computation graph: which cindexes a request needs and what each uses.

A port of Kaldi's ComputationGraph and ComputationGraphBuilder
(nnet-computation-graph.{h,cc}).  A *cindex* is ``(node_index, Index)``; the
graph numbers them (``cindex_id``) and records for each the cindex_ids it
depends on.  The builder grows the graph backwards from the requested
outputs, breadth first, while working out which cindexes can be computed
from the supplied inputs:

* ``usable_count[c]`` is 1 for requested outputs, otherwise the number of
  cindexes that depend on ``c`` and are themselves usable and not known to be
  uncomputable.  Only usable cindexes get their dependencies expanded or
  their status evaluated, which keeps the graph from growing without bound
  through optional (``IfDefined``) recurrences.
* ``computable[c]`` moves from UNKNOWN to COMPUTABLE or NOT_COMPUTABLE once
  enough of its dependencies are known; a change re-queues the cindexes
  that depend on ``c``.

The per-cindex state is kept in parallel Python lists and the recursive
usable-count updates of Kaldi are done with explicit stacks (recurrent
networks make dependency chains thousands of cindexes long).

This module is the definition.  It costs tens of microseconds per cindex, so
compute() first tries two declared accelerations of it, which build the
identical graph and state (the tests compare them with this algorithm):

* :mod:`.bulk` (with :mod:`.jit_bulk` and :mod:`.bulk_prune`): for a network
  without recurrence whose request leaves nothing uncomputable (the usual
  training and decoding case), where Kaldi's queue order is a plain
  breadth-first one, level by level with NumPy or one Numba loop;
* :mod:`.jit_exact`: this very algorithm, and Prune(), as one Numba loop,
  for networks whose nodes fit the tables of :mod:`.programs` (recurrent
  networks, requests that leave something uncomputable).

Where neither applies the Python code here runs.  ``fast_paths.current().graph``
(read when a builder is made) switches the accelerations off: then every
Descriptor and Component is asked exactly as Kaldi asks them.
"""
from __future__ import annotations

from collections import deque
from itertools import chain
from typing import TYPE_CHECKING, Any, Iterable

from ... import fast_paths
from ...errors import PynnetError
from ...nnet.components.base import Component
from ...nnet.index import Index
from ...nnet.graph import graph_has_cycles, nnet_to_directed_graph
from ...nnet.nnet import NodeType
from .bulk import BulkGraph, BulkPlan, build_graph_bulk
from .bulk_prune import prune_bulk
from ..nnet_memo import nnet_memo
from .jit_exact import JitGraph, build_graph_jit
from .jit_exact import _build as _jit_exact_build
from .programs import (INT32_MAX, INT32_MIN, JitPlan, analyse_descriptor, make_jit_plan,
                       uses_default_hooks)
from .computation_graph import (K_COMPUTABLE, K_NOT_COMPUTABLE, K_UNKNOWN, K_WILL_NOT_COMPUTE,
                                CindexSet, ComputableInfo, ComputationGraph, IndexSet,
                                computable_info_name)
from ..request import ComputationRequest

if TYPE_CHECKING:
    from ...nnet.nnet import Nnet

# Node kinds as small ints, for the hot loops.
_INPUT, _DESCRIPTOR, _COMPONENT, _DIM_RANGE = 0, 1, 2, 3
_KIND = {NodeType.INPUT: _INPUT, NodeType.DESCRIPTOR: _DESCRIPTOR,
         NodeType.COMPONENT: _COMPONENT, NodeType.DIM_RANGE: _DIM_RANGE}

_new_index = tuple.__new__


def _wrap32(v: int) -> int:
    # Offsets are added in int32 arithmetic in Kaldi (kNoTime - 1 wraps).
    return (v - INT32_MIN) % (2 ** 32) + INT32_MIN


def _node_tables(nnet: "Nnet", fast: bool) -> tuple:
    """The builder's per-node tables (see ComputationGraphBuilder.__init__)."""
    num_nodes = nnet.num_nodes()
    kind = [_KIND[node.node_type] for node in nnet.nodes]
    is_output = [nnet.is_output_node(n) for n in range(num_nodes)]
    descriptor = [node.descriptor for node in nnet.nodes]
    component: list[Component | None] = [
        nnet.component_for_node(n) if kind[n] == _COMPONENT else None
        for n in range(num_nodes)]
    simple_component = [
        c is not None and uses_default_hooks(c) for c in component]
    dim_range_src = [node.node_index for node in nnet.nodes]
    # all_required[n]: cindexes of node n are computable exactly when all
    # their dependencies are (simple components, dim-range nodes and
    # descriptors without IfDefined/Failover); offsets[n]: their
    # dependencies as (node, dn, dt, dx) offsets, when that is possible.
    all_required = [False] * num_nodes
    offsets: list[list | None] = [None] * num_nodes
    for n in range(num_nodes if fast else 0):
        node_kind = kind[n]
        if node_kind == _DESCRIPTOR:
            all_required[n], offsets[n] = analyse_descriptor(descriptor[n])
        elif node_kind == _COMPONENT and simple_component[n]:
            all_required[n] = True
            offsets[n] = [(n - 1, 0, 0, 0)]
        elif node_kind == _DIM_RANGE:
            all_required[n] = True
            offsets[n] = [(dim_range_src[n], 0, 0, 0)]
    return (kind, is_output, descriptor, component, simple_component, dim_range_src,
            all_required, offsets)


class ComputationGraphBuilder:
    """Builds a ComputationGraph for a ComputationRequest (see module docstring).

    Usage: ``b = ComputationGraphBuilder(nnet); b.compute(request)``; then
    ``b.all_outputs_are_computable()`` / ``b.get_computable_info()``, and
    ``b.prune()`` to drop what the outputs do not need.  For multi-segment
    (online) computations call compute() and prune() alternately.
    """

    def __init__(self, nnet: "Nnet", graph: ComputationGraph | None = None) -> None:
        """With ``fast_paths.current().graph`` off when the builder is made, it
        asks every Descriptor and Component exactly as Kaldi does (slower; the
        results are the same, which tests check); ``graph_jit_from`` is also
        read then."""
        self.nnet = nnet
        self._fast = fast = fast_paths.current().graph
        self._jit_from = fast_paths.current().graph_jit_from
        self._jit_when_loaded = fast_paths.current().graph_jit_when_loaded
        self.graph = graph if graph is not None else ComputationGraph()
        if len(self.graph):
            raise PynnetError("ComputationGraphBuilder initialized with a nonempty graph")
        self.request: ComputationRequest | None = None
        # Per cindex_id state (Kaldi's CindexInfo, split into columns).
        self._computable: list[int] = []
        self._usable: list[int] = []
        self._queued: list[bool] = []
        self._deps_computed: list[bool] = []
        # Transpose of graph.dependencies: who depends on each cindex_id.
        self._depend_on_this: list[list[int]] = []
        self.current_distance = -1
        self.current_queue: list[int] = []
        self.next_queue: list[int] = []
        # While the vectorised path (bulk.py) holds the graph, the state
        # above is implied: _bulk is its unpruned result, or _bulk_pruned says
        # the graph was pruned by it; _state_lists() makes the lists on demand.
        self._bulk_plan: BulkPlan | None = None
        self._bulk: BulkGraph | None = None
        self._bulk_pruned = False
        # Likewise while the compiled exact algorithm (jit_exact.py)
        # holds the unpruned graph; _jit_plan is made on first use (False:
        # the network is beyond it).
        self._jit_plan: JitPlan | None | bool = None
        self._jit: JitGraph | None = None
        self._recurrent: bool | None = None
        # Per-node tables for the inner loops (of the network's structure
        # alone: made once per network, see nnet_memo; never changed).
        (self._kind, self._is_output, self._descriptor, self._component,
         self._simple_component, self._dim_range_src, self._all_required,
         self._offsets) = nnet_memo(nnet, "builder_tables_fast" if fast else "builder_tables",
                                    lambda n: _node_tables(n, fast))

    # -- per-cindex state (Kaldi's CindexInfo, one list per field) -------------------
    def _state_lists(self) -> None:
        """Make the state lists if the vectorised path left the state implied."""
        if self._jit is not None:
            (self._computable, self._usable, self._queued, self._deps_computed,
             self._depend_on_this) = self._jit.state_lists()
            self._jit = None
        elif self._bulk is not None:
            bulk = self._bulk
            num = len(bulk)
            self._computable = [K_COMPUTABLE] * num
            self._usable = bulk.usable_count().tolist()
            self._queued = [False] * num
            self._deps_computed = (~bulk.arrays.is_input).tolist()
            self._depend_on_this = bulk.depend_on_this()
            self._bulk = None
        elif self._bulk_pruned:
            # What prune() leaves: everything computable and "usable".
            num = len(self.graph)
            self._computable = [K_COMPUTABLE] * num
            self._usable = [1] * num
            self._queued = [False] * num
            self._deps_computed = [False] * num
            self._depend_on_this = [[] for _ in range(num)]
            self._bulk_pruned = False

    @property
    def computable(self) -> list[int]:
        """ComputableInfo of each cindex_id (K_UNKNOWN, K_COMPUTABLE, ...)."""
        self._state_lists()
        return self._computable

    @property
    def usable_count(self) -> list[int]:
        self._state_lists()
        return self._usable

    @property
    def queued(self) -> list[bool]:
        self._state_lists()
        return self._queued

    @property
    def dependencies_computed(self) -> list[bool]:
        self._state_lists()
        return self._deps_computed

    @property
    def depend_on_this(self) -> list[list[int]]:
        """Transpose of graph.dependencies: who depends on each cindex_id."""
        self._state_lists()
        return self._depend_on_this

    # -- bookkeeping -----------------------------------------------------------
    def _add_cindex_id(self) -> None:
        self._computable.append(K_UNKNOWN)
        self._usable.append(0)
        self._queued.append(False)
        self._deps_computed.append(False)
        self._depend_on_this.append([])

    @property
    def _misc_info(self) -> Any:
        return self.request.misc_info if self.request is not None else None

    def cindex_info(self, cindex_id: int) -> dict:
        """Kaldi's CindexInfo of one cindex_id, for inspection and tests."""
        self._state_lists()
        return {"computable": ComputableInfo(self._computable[cindex_id]),
                "usable_count": self._usable[cindex_id],
                "queued": self._queued[cindex_id],
                "dependencies_computed": self._deps_computed[cindex_id]}

    # -- the main entry points ---------------------------------------------------
    def compute(self, request: ComputationRequest, check: bool = False) -> None:
        """Populate the graph and work out what is computable (no pruning).

        ``check=True`` runs the full internal consistency check after every
        iteration (slow; Kaldi does this at random) and so always uses the
        exact algorithm.  Otherwise the first segment is built by the compiled or
        vectorised path where it applies (same result).
        """
        if self.request is not None and not self.graph.segment_ends:
            raise PynnetError("wrong call order: use compute(), prune(), compute(), prune(), ...")
        if self._fast and not check and not len(self.graph):
            # The vectorised path never applies to a recurrent network.
            if self._recurrent is None:
                self._recurrent = nnet_memo(
                    self.nnet, "recurrent", lambda nnet: graph_has_cycles(nnet_to_directed_graph(nnet)))
            if ((not self._recurrent and self._compute_bulk(request))
                    or self._compute_jit(request)):
                return
        self._state_lists()
        self.graph.invalidate_arrays()     # the exact algorithm changes the lists in place
        cur_segment_start = len(self.graph.cindexes)
        self.request = request
        self._add_inputs()
        self._add_outputs()
        max_distance = 10000
        while self.current_distance < max_distance:
            self._build_graph_one_iter()
            if check:
                self.check(cur_segment_start)
            if not self.current_queue:
                break
        if self.current_distance == max_distance:
            raise PynnetError("loop detected while building computation graph "
                              "(bad network topology?)")

    def _compute_bulk(self, request: ComputationRequest) -> bool:
        """compute() by the vectorised path (bulk.py), if it applies."""
        if self._bulk_plan is None:
            self._bulk_plan = nnet_memo(self.nnet, "bulk_plan", BulkPlan)
        jit_plan = self._bulk_plan.jit_plan
        if jit_plan is not None and jit_plan.has_ranges:
            # A window component (statistics pooling) nearly always reaches
            # input frames the request lacks, where the vectorised path gives
            # up after building most of the graph: go to the exact one.
            return False
        bulk = build_graph_bulk(self._bulk_plan, self.nnet, request, self._jit_from,
                                self._jit_when_loaded)
        if bulk is None:
            return False
        self.request = request
        self.graph.set_arrays(bulk.arrays)
        self._bulk = bulk
        # (The exact algorithm's iteration count is not reproduced; nothing reads it.)
        self.current_distance = 0
        self.current_queue, self.next_queue = [], []
        return True

    def _compute_jit(self, request: ComputationRequest) -> bool:
        """compute() by the compiled exact algorithm (jit_exact.py), if it applies."""
        if self._jit_plan is None:
            bulk_plan = self._bulk_plan
            if bulk_plan is not None and bulk_plan.eligible:
                self._jit_plan = bulk_plan.jit_plan or False   # (made already)
            else:
                self._jit_plan = nnet_memo(self.nnet, "jit_plan", make_jit_plan) or False
        if self._jit_plan is False:
            return False
        # (A window component makes even a small request's graph large.)
        if (not self._jit_plan.has_ranges
                and not (self._jit_when_loaded and _jit_exact_build.is_materialised)
                and sum(len(io.indexes) for io in chain(request.inputs, request.outputs))
                < self._jit_from):
            return False      # (small: the definition, without compiling the Numba loop)
        jit = build_graph_jit(self._jit_plan, self.nnet, request)
        if jit is None:
            return False
        self.request = request
        # (Made only if read before prune(), which works from the builder's
        # own state: for a statistics-pooling request they are large.)
        self.graph.set_arrays_lazy(jit.graph_arrays, len(jit))
        self._jit = jit
        self.current_distance = jit.distance
        self.current_queue, self.next_queue = [], []
        return True

    def _add_inputs(self) -> None:
        assert self.request is not None
        graph = self.graph
        num_added = 0
        for io in self.request.inputs:
            n = self.nnet.get_node_index(io.name)
            if n == -1:
                raise PynnetError(f"network has no input with name {io.name}")
            if self._kind[n] not in (_INPUT, _COMPONENT):
                raise PynnetError(f"inputs to the graph are only allowed for input and "
                                  f"component nodes, not {io.name}")
            for index in io.indexes:
                if type(index) is not Index:
                    index = Index(*index)
                _, is_new = graph.add_cindex((n, index), True)
                if not is_new:
                    raise PynnetError(f"input index {index} of {io.name} is listed more than once")
                self._add_cindex_id()
                self._computable[-1] = K_COMPUTABLE
                num_added += 1
        if num_added == 0:
            raise PynnetError("computation request has no inputs")

    def _add_outputs(self) -> None:
        assert self.request is not None
        graph = self.graph
        num_added = 0
        for io in self.request.outputs:
            n = self.nnet.get_node_index(io.name)
            if n == -1:
                raise PynnetError(f"network has no output with name {io.name}")
            for index in io.indexes:
                if type(index) is not Index:
                    index = Index(*index)
                cid, is_new = graph.add_cindex((n, index), False)
                if not is_new:
                    raise PynnetError(f"output index {index} of {io.name} is listed "
                                      "more than once (or is also an input)")
                self._add_cindex_id()
                self._usable[cid] = 1
                self._queued[cid] = True
                self.next_queue.append(cid)
                num_added += 1
        if num_added == 0:
            raise PynnetError("cannot process a computation request with no outputs")
        self.current_distance = 0
        assert not self.current_queue
        self.current_queue, self.next_queue = self.next_queue, self.current_queue

    def _build_graph_one_iter(self) -> None:
        queue = self.current_queue
        queued = self._queued
        deps_computed = self._deps_computed
        usable = self._usable
        computable = self._computable
        cindexes = self.graph.cindexes
        dependencies = self.graph.dependencies
        all_required = self._all_required
        while queue:
            cid = queue.pop()
            queued[cid] = False
            if not deps_computed[cid] and usable[cid] != 0:
                deps_computed[cid] = True
                self._add_dependencies(cid)
                # Re-queue: next time round we can evaluate whether it is computable.
                if not queued[cid]:
                    queued[cid] = True
                    self.next_queue.append(cid)
            elif computable[cid] == K_UNKNOWN and usable[cid] != 0:
                # UpdateComputableInfo, with the common case done inline.
                if all_required[cindexes[cid][0]]:
                    output = K_COMPUTABLE
                    for dep in dependencies[cid]:
                        state = computable[dep]
                        if state != K_COMPUTABLE:
                            if state != K_UNKNOWN:
                                output = K_NOT_COMPUTABLE
                                break
                            output = K_UNKNOWN
                else:
                    output = self._compute_computable_info(cid)
                if output != K_UNKNOWN:
                    self._set_computable_info(cid, output)
        self.current_queue, self.next_queue = self.next_queue, queue
        self.current_distance += 1

    # -- dependencies --------------------------------------------------------------
    def _input_cindexes(self, cid: int) -> Iterable[tuple]:
        node, index = self.graph.cindexes[cid]
        offsets = self._offsets[node]
        if offsets is not None:
            if len(offsets) == 1 and offsets[0][1:] == (0, 0, 0):
                return ((offsets[0][0], index),)
            n, t, x = index
            ans = []
            for src, dn, dt, dx in offsets:
                if dn == 0 and dt == 0 and dx == 0:
                    ans.append((src, index))
                    continue
                n2, t2, x2 = n + dn, t + dt, x + dx
                if not (INT32_MIN <= t2 <= INT32_MAX and INT32_MIN <= x2 <= INT32_MAX
                        and INT32_MIN <= n2 <= INT32_MAX):
                    n2, t2, x2 = _wrap32(n2), _wrap32(t2), _wrap32(x2)
                ans.append((src, _new_index(Index, (n2, t2, x2))))
            return ans
        kind = self._kind[node]
        if kind == _DESCRIPTOR:
            return self._descriptor[node].get_dependencies(index)
        if kind == _COMPONENT:
            comp = self._component[node]
            return [(node - 1, i) for i in comp.get_input_indexes(self._misc_info, index)]
        if kind == _DIM_RANGE:
            return ((self._dim_range_src[node], index),)
        return ()

    def _add_dependencies(self, cid: int) -> None:
        graph = self.graph
        ids = graph._cindex_to_id
        cindexes = graph.cindexes
        computable = self._computable
        usable = self._usable
        depend_on_this = self._depend_on_this
        this_dep = []
        for cindex in self._input_cindexes(cid):
            dep = ids.get(cindex)
            if dep is None:
                # A new cindex (graph.add_cindex and _add_cindex_id, inlined),
                # queued so that its own dependencies get added.
                dep = len(cindexes)
                ids[cindex] = dep
                cindexes.append(cindex)
                graph.is_input.append(False)
                graph.dependencies.append([])
                computable.append(K_UNKNOWN)
                usable.append(0)
                self._queued.append(True)
                self._deps_computed.append(False)
                depend_on_this.append([])
                self.next_queue.append(dep)
            this_dep.append(dep)
        if len(this_dep) > 1:
            this_dep = sorted(set(this_dep))
        dependencies = graph.dependencies
        dependencies[cid] = this_dep
        for dep in this_dep:
            depend_on_this[dep].append(cid)
            if usable[dep] != 0 or computable[dep] == K_NOT_COMPUTABLE:
                usable[dep] += 1  # nothing else changes
            elif not dependencies[dep]:
                # _increment_usable_count() of a cindex with no dependencies yet.
                usable[dep] = 1
                if computable[dep] == K_UNKNOWN and not self._queued[dep]:
                    self._queued[dep] = True
                    self.next_queue.append(dep)
            else:
                self._increment_usable_count(dep)

    def _increment_usable_count(self, start: int) -> None:
        """Kaldi's recursive IncrementUsableCount, with an explicit stack.

        When a count goes from 0 to 1 on a cindex that is not known to be
        uncomputable, its own dependencies become usable too, and once they
        are done the cindex is queued for evaluation if still UNKNOWN.
        """
        usable = self._usable
        computable = self._computable
        usable[start] += 1
        if usable[start] != 1 or computable[start] == K_NOT_COMPUTABLE:
            return
        deps = self.graph.dependencies
        queued = self._queued
        stack = [(start, 0)]
        while stack:
            c, i = stack[-1]
            d = deps[c]
            if i < len(d):
                stack[-1] = (c, i + 1)
                x = d[i]
                usable[x] += 1
                if usable[x] == 1 and computable[x] != K_NOT_COMPUTABLE:
                    stack.append((x, 0))
                continue
            stack.pop()
            if computable[c] == K_UNKNOWN and not queued[c]:
                queued[c] = True
                self.next_queue.append(c)

    def _decrement_usable_count(self, start: int) -> None:
        """Kaldi's recursive DecrementUsableCount, with an explicit stack."""
        usable = self._usable
        computable = self._computable
        deps = self.graph.dependencies
        stack = [start]
        while stack:
            c = stack.pop()
            usable[c] -= 1
            if usable[c] == 0 and computable[c] != K_NOT_COMPUTABLE:
                stack.extend(deps[c])

    # -- computability ---------------------------------------------------------------
    def _update_computable_info(self, cid: int) -> None:
        if self._usable[cid] == 0:
            return  # not reachable from any usable output: no need to know
        assert self._computable[cid] == K_UNKNOWN
        output = self._compute_computable_info(cid)
        if output != K_UNKNOWN:
            self._set_computable_info(cid, output)

    def _set_computable_info(self, cid: int, output: int) -> None:
        """Record a newly known state; wake up the cindexes that depend on it."""
        computable = self._computable
        computable[cid] = output
        queued = self._queued
        for other in self._depend_on_this[cid]:
            if computable[other] == K_UNKNOWN and not queued[other]:
                queued[other] = True
                self.next_queue.append(other)
        if output == K_NOT_COMPUTABLE and self._usable[cid] != 0:
            # Uncomputable cindexes do not count as users of their inputs.
            for dep in self.graph.dependencies[cid]:
                self._decrement_usable_count(dep)

    def _compute_computable_info(self, cid: int) -> int:
        """kComputable, kNotComputable or kUnknown for one cindex_id.

        Descriptors and components are asked up to twice, as in Kaldi: once
        counting only known-computable inputs (yes => computable) and once
        counting unknown ones as computable too (no => not computable).

        Questions whose answer follows from the states of the dependencies
        are not asked: for "all required" nodes the answer is a function of
        those states; otherwise, a cindex all of whose dependencies are
        available is computable, which makes the second question "yes" when
        no dependency is known to be uncomputable and the two questions the
        same when none is unknown (more available inputs never make a cindex
        uncomputable, which Kaldi's Prune() also relies on).
        """
        graph = self.graph
        node, index = graph.cindexes[cid]
        kind = self._kind[node]
        computable = self._computable
        if kind == _INPUT:
            return K_COMPUTABLE if graph.is_input[cid] else K_NOT_COMPUTABLE
        if kind == _DIM_RANGE:
            src = graph._cindex_to_id.get((self._dim_range_src[node], index))
            return K_UNKNOWN if src is None else computable[src]
        if not self._fast:
            any_unknown = any_not = True
        elif self._deps_computed[cid]:
            states = {computable[d] for d in graph.dependencies[cid]}
            any_unknown = K_UNKNOWN in states
            any_not = K_NOT_COMPUTABLE in states or K_WILL_NOT_COMPUTE in states
            if self._all_required[node]:
                return K_NOT_COMPUTABLE if any_not else K_UNKNOWN if any_unknown else K_COMPUTABLE
            if not any_unknown and not any_not:
                return K_COMPUTABLE
        else:
            any_unknown = any_not = True
        if kind == _DESCRIPTOR:
            desc = self._descriptor[node]
            if desc.is_computable(index, CindexSet(graph, computable, False), None):
                return K_COMPUTABLE
            if not any_unknown:
                return K_NOT_COMPUTABLE
            if not any_not or desc.is_computable(index, CindexSet(graph, computable, True), None):
                return K_UNKNOWN
            return K_NOT_COMPUTABLE
        comp = self._component[node]
        misc = self._misc_info
        ok, _ = comp.is_computable(misc, index, IndexSet(graph, computable, node - 1, False))
        if ok:
            return K_COMPUTABLE
        if not any_unknown:
            return K_NOT_COMPUTABLE
        if not any_not:
            return K_UNKNOWN
        ok, _ = comp.is_computable(misc, index, IndexSet(graph, computable, node - 1, True))
        return K_UNKNOWN if ok else K_NOT_COMPUTABLE

    # -- results ---------------------------------------------------------------------
    def all_outputs_are_computable(self) -> bool:
        if self._bulk is not None or self._bulk_pruned:
            return True      # the vectorised path only succeeds when everything is
        if self._jit is not None:
            return self._jit.all_outputs_are_computable()
        is_output = self._is_output
        cindexes = self.graph.cindexes
        for cid, state in enumerate(self._computable):
            if state != K_COMPUTABLE and is_output[cindexes[cid][0]]:
                return False
        return True

    def get_computable_info(self) -> list[list[bool]]:
        """For each requested output, whether each of its Indexes is computable.

        Call after compute() and before prune().
        """
        if not len(self.graph) or self.request is None:
            raise PynnetError("get_computable_info() must be called after compute()")
        if self._bulk is not None:
            return [[True] * len(io.indexes) for io in self.request.outputs]
        if self._jit is not None:
            return self._jit.computable_info(self.request)
        self._state_lists()
        if not self._computable:
            raise PynnetError("get_computable_info() must be called before prune()")
        ids = self.graph._cindex_to_id
        computable = self._computable
        ans = []
        for io in self.request.outputs:
            n = self.nnet.get_node_index(io.name)
            assert n != -1
            ans.append([computable[ids[(n, Index(*index))]] == K_COMPUTABLE
                        for index in io.indexes])
        return ans

    def _print_cindex_id(self, cid: int) -> str:
        node, (n, t, x) = self.graph.cindexes[cid]
        return f"{self.nnet.node_names[node]}({n}, {t}, {x})"

    def explain_why_not_computable(self, first_cindex_id: int) -> str:
        """Why one cindex is not computable, following uncomputable dependencies."""
        max_lines = 100
        self._state_lists()
        added = {first_cindex_id}
        queue = deque([first_cindex_id])
        lines = [f"*** cindex {self._print_cindex_id(first_cindex_id)} is not computable "
                 "for the following reason: ***"]
        num_lines = 0
        while num_lines < max_lines and queue:
            cid = queue.popleft()
            num_lines += 1
            parts = []
            for dep in self.graph.dependencies[cid]:
                state = self._computable[dep]
                parts.append(f"{self._print_cindex_id(dep)}[{computable_info_name(state)}]")
                if state != K_COMPUTABLE and dep not in added:
                    added.add(dep)
                    queue.append(dep)
            lines.append(f"{self._print_cindex_id(cid)} is "
                         f"{computable_info_name(self._computable[cid])}, dependencies: "
                         + ", ".join(parts))
        return "\n".join(lines) + "\n"

    def explain_why_all_outputs_not_computable(self, num_print: int = 10) -> str:
        """Text saying which requested outputs cannot be computed and why.

        Kaldi logs this before failing; we return it so the caller can put it
        into an error message.
        """
        self._state_lists()
        not_computable = []
        num_outputs = 0
        for cid, (node, _) in enumerate(self.graph.cindexes):
            if self._is_output[node]:
                num_outputs += 1
                if self._computable[cid] != K_COMPUTABLE:
                    not_computable.append(cid)
        if not not_computable:
            return "all outputs are computable"
        out = [f"{len(not_computable)} output cindexes out of {num_outputs} were not computable."]
        if self.request is not None:
            out.append("Computation request was: " + self.request.print().rstrip("\n"))
        if len(not_computable) > num_print:
            out.append(f"Printing the reasons for {num_print} of these.")
        for cid in not_computable[:num_print]:
            out.append(self.explain_why_not_computable(cid).rstrip("\n"))
        return "\n".join(out) + "\n"

    # -- pruning -----------------------------------------------------------------------
    def _prune_dependencies(self, cid: int) -> None:
        """Keep only the dependencies that are really used (drops unused optional ones)."""
        state = self._computable[cid]
        usable = self._usable[cid]
        if state == K_UNKNOWN and usable != 0:
            raise PynnetError("prune(): a usable cindex has unknown computability")
        graph = self.graph
        if state == K_NOT_COMPUTABLE or usable == 0:
            graph.dependencies[cid] = []
            return
        if state != K_COMPUTABLE:
            raise PynnetError("prune(): unexpected computable state")
        node, index = graph.cindexes[cid]
        kind = self._kind[node]
        ids = graph._cindex_to_id
        dependencies = graph.dependencies[cid]
        if self._all_required[node]:
            return  # every dependency is used
        if kind == _DESCRIPTOR:
            used: set = set()
            ok = self._descriptor[node].is_computable(
                index, CindexSet(graph, self._computable, False), used)
            used_ids = [ids[c] for c in used]
        elif kind == _COMPONENT:
            ok, used_indexes = self._component[node].is_computable(
                self._misc_info, index, IndexSet(graph, self._computable, node - 1, False))
            used_ids = [ids[(node - 1, i)] for i in used_indexes]
        else:
            return  # input nodes have none; dim-range nodes have one, required
        if not ok:
            raise PynnetError(f"prune(): cindex {self._print_cindex_id(cid)} was computable "
                              "but is not any more (bug?)")
        dep_set = set(dependencies)
        if any(u not in dep_set for u in used_ids):
            raise PynnetError(f"prune(): cindex {self._print_cindex_id(cid)} uses an input "
                              "that is not among its dependencies")
        graph.dependencies[cid] = sorted(set(used_ids))

    def _compute_required_array(self, start: int) -> list[bool]:
        graph = self.graph
        num = len(graph.cindexes)
        required = [False] * (num - start)
        is_output = self._is_output
        queue = []
        for c in range(start, num):
            if is_output[graph.cindexes[c][0]]:
                required[c - start] = True
                queue.append(c)
        deps = graph.dependencies
        while queue:
            c = queue.pop()
            for d in deps[c]:
                if d >= start and not required[d - start]:
                    required[d - start] = True
                    queue.append(d)
        for c in range(start, num):
            if required[c - start] and self._usable[c] == 0:
                raise PynnetError("prune(): a required cindex has usable_count 0 (bug?)")
        return required

    def prune(self) -> None:
        """Drop cindexes the outputs do not need; the graph becomes one more segment.

        Fails if not every requested output is computable.
        """
        if self._bulk is not None:
            assert self._bulk_plan is not None
            arrays = prune_bulk(self._bulk_plan, self._bulk, self._misc_info)
            if arrays is not None:
                self.graph.set_arrays(arrays)
                self.graph.segment_ends.append(len(arrays.node))
                self._bulk = None
                self._bulk_pruned = True
                return
        if self._jit is not None:
            arrays = self._jit.prune()
            if arrays is not None:
                self.graph.set_arrays(arrays)
                self.graph.segment_ends.append(len(arrays.node))
                self._jit = None
                self._bulk_pruned = True
                return
        self._state_lists()
        self.graph.invalidate_arrays()
        graph = self.graph
        start = graph.segment_ends[-1] if graph.segment_ends else 0
        num = len(graph.cindexes)
        for cid in range(start, num):
            self._prune_dependencies(cid)
        required = self._compute_required_array(start)
        keep = [False] * (num - start)
        for c in range(start, num):
            if required[c - start] or graph.is_input[c]:
                if self._computable[c] != K_COMPUTABLE:
                    raise PynnetError("prune() called when not everything is computable:\n"
                                      + self.explain_why_all_outputs_not_computable())
                keep[c - start] = True
        graph.renumber(start, keep)
        new_num = len(graph.cindexes)
        # Everything kept is computable; a usable count of 1 is enough for
        # later segments (its exact value no longer matters).
        n_new = new_num - start
        del self._computable[start:]
        del self._usable[start:]
        del self._queued[start:]
        del self._deps_computed[start:]
        del self._depend_on_this[start:]
        self._computable += [K_COMPUTABLE] * n_new
        self._usable += [1] * n_new
        self._queued += [False] * n_new
        self._deps_computed += [False] * n_new
        self._depend_on_this += [[] for _ in range(n_new)]
        graph.segment_ends.append(new_num)

    # -- consistency check ---------------------------------------------------------------
    def check(self, start_cindex_id: int = 0) -> None:
        """Kaldi's Check(), over every cindex_id (Kaldi samples them at random)."""
        self._state_lists()
        graph = self.graph
        num = len(graph.cindexes)
        current = set(self.current_queue)
        for cid in range(start_cindex_id, num):
            dot = self._depend_on_this[cid]
            if len(set(dot)) != len(dot):
                raise PynnetError(f"check: depend_on_this of {cid} has repeats")
            for other in dot:
                if graph.dependencies[other].count(cid) != 1:
                    raise PynnetError(f"check: {other} in depend_on_this[{cid}] but not in "
                                      "its dependencies")
            if self._deps_computed[cid]:
                deps = graph.dependencies[cid]
                if len(set(deps)) != len(deps):
                    raise PynnetError(f"check: dependencies of {cid} have repeats")
                for dep in deps:
                    if dep >= start_cindex_id and self._depend_on_this[dep].count(cid) != 1:
                        raise PynnetError(f"check: {cid} missing from depend_on_this[{dep}]")
            expected = 1 if self._is_output[graph.cindexes[cid][0]] else 0
            for other in dot:
                if self._usable[other] != 0 and self._computable[other] != K_NOT_COMPUTABLE:
                    expected += 1
            if self._usable[cid] != expected:
                raise PynnetError(f"check: usable_count of {cid} is {self._usable[cid]}, "
                                  f"expected {expected}")
            if self._deps_computed[cid] and self._computable[cid] != K_UNKNOWN:
                if self._compute_computable_info(cid) != self._computable[cid]:
                    raise PynnetError(f"check: mismatch in computable status of "
                                      f"{self._print_cindex_id(cid)}")
            if self._queued[cid] != (cid in current):
                raise PynnetError(f"check: queued flag of {cid} is wrong")
