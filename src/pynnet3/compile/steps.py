"""Phases and steps: the order in which the cindexes of a graph get computed.

A port of the second half of Kaldi's nnet-computation-graph.cc
(ComputeComputationPhases and ComputationStepsComputer).

* **Epochs** (:func:`~pynnet3.nnet.graph.compute_nnet_computation_epochs`)
  order the nodes of the network; the nodes of one strongly connected
  component (an LSTM layer) share an epoch.  Cindexes supplied as inputs form
  epoch 0 of their segment.
* **Phases** split each epoch further: a cindex goes into the first phase
  after every cindex of its own epoch (and segment) that it depends on.  For a
  one-node epoch that is a single phase; inside a recurrent layer it is one
  phase per time step and per link of the recurrence.
* **Steps** are what the compiler turns into matrices: a phase is split by
  node into sub-phases, each sorted in Kaldi's Cindex order (node, then t, x,
  n).  A component sub-phase becomes two steps, the input (descriptor) step
  then the component step; inputs and outputs follow the request's order; a
  dim-range sub-phase gets one step per step of its source node, mirroring it
  row for row.

Everything index-heavy is done on NumPy columns of the graph
(``graph.arrays()``; the graph's Python lists are never made): a cindex is
encoded as one int64 key whose numeric order is Kaldi's Cindex order
(steps_table.py), so sorting the phases into sub-phases is one sort and
finding the cindex_ids of (node - 1, same Indexes) is a lookup.  The phases
of a recurrent epoch come from a compiled loop (steps_jit.py): an LSTM has
thousands of them, a few cindexes each.  Components' ``reorder_indexes`` get array-backed
index lists (those that work on arrays make no Index objects).  Per-element
Python remains only for the few cindexes the steps add to the graph
(padding with ``t = kNoTime`` and dim-range rows), which are handed to the
graph at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..arraytools import sorted_unique
from ..std_order import iteration_order
from ..errors import PynnetError
from ..nnet.components.base import Prop
from ..nnet.graph import compute_nnet_computation_epochs
from ..nnet.index import K_NO_TIME, Index, index_columns
from ..nnet.index_lists import IndexList, gc_paused
from ..nnet.nnet import NodeType
from ..nnet.properties_cache import component_properties
from .graph.computation_graph import ComputationGraph, GraphArrays
from .graph.programs import uses_default_hooks
from .nnet_memo import nnet_memo
from .request import ComputationRequest
from .steps_table import CindexKeys
from .steps_jit import NO_START, STUCK, phases_for_epoch_jit
from .steps_jit import OK as OK_PHASES

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

_INT64 = np.int64
# What a sub-phase of a node becomes.
(_SUB_NONE, _SUB_SIMPLE_COMPONENT, _SUB_SAME_INDEX_COMPONENT, _SUB_COMPONENT, _SUB_INPUT,
 _SUB_OUTPUT, _SUB_DIM_RANGE) = range(7)
# Component property bits as plain ints (IntFlag operators are slow).
_P_SIMPLE = int(Prop.SIMPLE)
_P_REORDERS_INDEXES = int(Prop.REORDERS_INDEXES)


# -- vectorised views of the graph ---------------------------------------------------

def _dependencies_of(arrays: GraphArrays, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dependent, dependency) edge arrays for the cindex_ids ``ids``."""
    ids = np.asarray(ids, dtype=_INT64)
    starts = arrays.dep_offsets[ids]
    lens = arrays.dep_offsets[ids + 1] - starts
    total = int(lens.sum())
    first = np.repeat(starts - (np.cumsum(lens) - lens), lens)
    flat = arrays.dep_flat[first + np.arange(total, dtype=_INT64)].astype(_INT64)
    return np.repeat(ids, lens), flat


# -- phases ------------------------------------------------------------------------------

def _phases_for_epoch(ids: np.ndarray, dependent: np.ndarray, dependency: np.ndarray,
                      pos: np.ndarray, phases: list[np.ndarray]) -> None:
    """ComputeComputationPhasesForEpoch for a recurrent (multi-node) epoch.

    ``ids``: sorted cindex_ids of one segment and epoch; ``dependent`` /
    ``dependency``: the dependency edges that stay inside it.  Kahn's
    algorithm one frontier at a time: a phase is every cindex whose last
    in-epoch dependency was in the previous phase (Kaldi's candidates), in
    increasing cindex_id order; compiled (steps_jit.py), since an LSTM has
    thousands of small phases.  ``pos`` is scratch space mapping
    cindex_id -> position in ``ids``.
    """
    num = len(ids)
    pos[ids] = np.arange(num)
    status, ordered, bounds = phases_for_epoch_jit(ids, pos[dependent], pos[dependency])
    if status == NO_START:
        raise PynnetError("trying to process a computation with cycles")
    if status == STUCK:
        raise PynnetError(
            "the model has a kind of recurrence that cannot be computed (e.g. x[t] "
            "depending on both x[t+1] and x[t-1]): no order of computation works")
    if status != OK_PHASES:
        raise PynnetError("not every cindex could be given a phase (cycle in the graph?)")
    phases.extend(ordered[a:b] for a, b in zip(bounds[:-1], bounds[1:]))


def compute_computation_phases(nnet: "Nnet", graph: ComputationGraph) -> list[list[list[int]]]:
    """Kaldi's ComputeComputationPhases: per segment, the phases (lists of cindex_ids).

    Within each segment the phases follow the epochs; each phase is sorted
    by cindex_id.  Every cindex_id of the graph is in exactly one phase.
    """
    return [[p.tolist() for p in phases]
            for phases in compute_computation_phase_arrays(nnet, graph)]


def _epochs_plus_one(nnet: "Nnet") -> np.ndarray:
    """Each node's epoch + 1 (read-only: it is shared between compilations)."""
    ans = np.asarray(compute_nnet_computation_epochs(nnet), dtype=_INT64) + 1
    ans.setflags(write=False)
    return ans


def compute_computation_phase_arrays(nnet: "Nnet", graph: ComputationGraph
                                     ) -> list[list[np.ndarray]]:
    """:func:`compute_computation_phases` with each phase an int64 array."""
    num = len(graph)
    if not graph.segment_ends or graph.segment_ends[-1] != num:
        raise PynnetError("compute_computation_phases: the graph must be pruned "
                          "(segment_ends must cover every cindex)")
    node_to_epoch = nnet_memo(nnet, "epochs", _epochs_plus_one)
    num_epochs = int(node_to_epoch.max()) + 1 if len(node_to_epoch) else 1
    epoch_is_trivial = np.bincount(node_to_epoch, minlength=num_epochs) <= 1
    num_segments = len(graph.segment_ends)
    ends = np.asarray(graph.segment_ends, dtype=_INT64)
    seg_sizes = np.diff(np.concatenate([[0], ends]))
    if (seg_sizes < 0).any():
        raise PynnetError("segment_ends are not increasing")
    arrays = graph.arrays()
    node = arrays.node.astype(_INT64)
    is_input = arrays.is_input
    epoch = np.where(is_input, 0, node_to_epoch[node] if num else node)
    seg_epoch = epoch + np.repeat(np.arange(num_segments, dtype=_INT64), seg_sizes) * num_epochs
    # Group the cindex_ids by (segment, epoch), keeping increasing ids in each
    # (a stable sort of int16 values is a radix sort in NumPy: linear time).
    num_groups = num_segments * num_epochs
    order = np.argsort(seg_epoch.astype(np.int16) if num_groups < (1 << 15) else seg_epoch,
                       kind="stable")
    bounds = np.searchsorted(seg_epoch[order], np.arange(num_groups + 1))
    # In-epoch dependency edges, needed only for recurrent epochs.
    group_trivial = np.tile(epoch_is_trivial, num_segments)
    edges: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    if not group_trivial.all() and num:
        recurrent = np.flatnonzero(~group_trivial[seg_epoch])
        dependent, dependency = _dependencies_of(arrays, recurrent)
        keep = seg_epoch[dependency] == seg_epoch[dependent]
        dependent, dependency = dependent[keep], dependency[keep]
        edge_order = np.argsort(seg_epoch[dependent], kind="stable")
        dependent, dependency = dependent[edge_order], dependency[edge_order]
        edge_bounds = np.searchsorted(seg_epoch[dependent],
                                      np.arange(num_groups + 1))
        edges = (dependent, dependency, edge_bounds)
    pos = np.zeros(num, dtype=_INT64)
    ans: list[list[np.ndarray]] = []
    for segment in range(num_segments):
        phases: list[np.ndarray] = []
        for e in range(num_epochs):
            g = segment * num_epochs + e
            ids = order[bounds[g]:bounds[g + 1]]
            if ids.size == 0:
                continue
            if epoch_is_trivial[e]:
                phases.append(ids)
            else:
                assert edges is not None
                b0, b1 = edges[2][g], edges[2][g + 1]
                _phases_for_epoch(ids, edges[0][b0:b1], edges[1][b0:b1], pos, phases)
        ans.append(phases)
    if sum(len(p) for s in ans for p in s) != num:
        raise PynnetError("compute_computation_phases: not every cindex got a phase (bug?)")
    return ans


def unordered_set_iteration_order(values: Sequence[int]) -> list[int]:
    """The order a libstdc++ ``std::unordered_set<int32>`` visits ``values`` in.

    Kaldi's ProcessDimRangeSubPhase walks such a set of source steps, and the
    order decides the order of the dim-range steps (hence matrix numbers).
    """
    return iteration_order([int(v) for v in values], hash_fn=int)


# -- steps -------------------------------------------------------------------------------

@dataclass
class ComputationSteps:
    """What the steps computer produces for the compiler.

    ``step_ids[s]``: the cindex_ids of step ``s`` (one matrix row each), an
    int64 array; ``steps``: the same as lists;
    ``step_to_segment[s]``: the segment (request) the step belongs to;
    ``location_step[c]`` / ``location_row[c]``: where cindex_id ``c`` is
    (Kaldi's cindex_id_to_location; -1 if nowhere).
    """

    step_ids: list[np.ndarray] = field(default_factory=list)
    step_to_segment: list[int] = field(default_factory=list)
    location_step: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=_INT64))
    location_row: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=_INT64))

    @property
    def steps(self) -> list[list[int]]:
        return [s.tolist() for s in self.step_ids]

    def cindex_id_to_location(self) -> list[tuple[int, int]]:
        return list(zip(self.location_step.tolist(), self.location_row.tolist()))


class ComputationStepsComputer:
    """Kaldi's ComputationStepsComputer: turns phases into steps, segment by segment.

    Usage: ``sc = ComputationStepsComputer(nnet, graph)``, then
    ``sc.compute_for_segment(request, phases)`` for each segment, then
    ``sc.check()`` and ``sc.result()``.  The graph may gain cindexes (padding
    rows of components that reorder their indexes, dim-range rows).
    """

    def __init__(self, nnet: "Nnet", graph: ComputationGraph) -> None:
        self.nnet = nnet
        self.graph = graph
        num_nodes = nnet.num_nodes()
        # The graph as columns; cindexes the steps add (padding rows,
        # dim-range rows) are kept here and given to the graph at the end.
        self._arrays = graph.arrays()
        self._table = CindexKeys(self._arrays, num_nodes)
        num = self._table.num
        self._num_total = num
        self._added: dict[tuple[int, int, int, int], int] = {}
        self._added_rows: list[tuple[int, int, int, int]] = []
        self.steps: list[np.ndarray] = []
        self.step_to_segment: list[int] = []
        capacity = num + num // 10 + 16
        self._loc_step = np.full(capacity, -1, dtype=_INT64)
        self._loc_row = np.full(capacity, -1, dtype=_INT64)
        self._dim_range_done: set[tuple[int, int]] = set()
        # Steps that list some cindex_id more than once (padding).
        self._repeating_steps: set[int] = set()
        self._segment = 0
        self._kind = [node.node_type for node in nnet.nodes]
        self._is_output = [nnet.is_output_node(n) for n in range(num_nodes)]
        # Per node, what a sub-phase of it turns into (see _SUB_* below).
        self._sub_kind = [self._sub_phase_kind(n) for n in range(num_nodes)]
        self._arange = np.arange(max(num, 1), dtype=_INT64)
        # Key shift from a node's cindex to its input's with the same Index
        # (simple components, dim-range nodes; 0: none such).
        self._input_shift = [0] * num_nodes
        for n in range(num_nodes):
            if self._sub_kind[n] in (_SUB_SIMPLE_COMPONENT, _SUB_SAME_INDEX_COMPONENT):
                self._input_shift[n] = -self._table.node_stride
            elif self._sub_kind[n] == _SUB_DIM_RANGE:
                self._input_shift[n] = (nnet.nodes[n].node_index - n) * self._table.node_stride

    def _sub_phase_kind(self, node: int) -> int:
        kind = self._kind[node]
        if kind is NodeType.COMPONENT:
            component = self.nnet.component_for_node(node)
            props = component_properties(component)
            if props & _P_SIMPLE:
                return _SUB_SIMPLE_COMPONENT
            if not props & _P_REORDERS_INDEXES and uses_default_hooks(component):
                # Its one input per output is the same Index (e.g.
                # BackpropTruncationComponent): the simple path's lookup gives
                # the sorted union of the dependencies, where all are found.
                return _SUB_SAME_INDEX_COMPONENT
            return _SUB_COMPONENT
        if kind is NodeType.INPUT:
            return _SUB_INPUT
        if self._is_output[node]:
            return _SUB_OUTPUT
        if kind is NodeType.DIM_RANGE:
            return _SUB_DIM_RANGE
        if kind is NodeType.DESCRIPTOR:
            return _SUB_NONE
        raise PynnetError(f"unknown node type {kind}")

    # -- bookkeeping -----------------------------------------------------------------
    def _grow_locations(self) -> None:
        num = self._num_total
        if num > len(self._loc_step):
            extra = num - len(self._loc_step) + num // 10 + 16
            self._loc_step = np.concatenate([self._loc_step, np.full(extra, -1, dtype=_INT64)])
            self._loc_row = np.concatenate([self._loc_row, np.full(extra, -1, dtype=_INT64)])

    def _add_step(self, ids: np.ndarray, may_repeat: bool = False) -> int:
        """AddStep: append a step and record where each of its cindex_ids is."""
        step_index = len(self.steps)
        if ids.dtype != _INT64 or not ids.flags.c_contiguous:
            ids = np.ascontiguousarray(ids, dtype=_INT64)
        self.steps.append(ids)
        if ids.size:
            if may_repeat:
                # A cindex listed twice (padding) is located at its last row, as
                # Kaldi's sequential loop leaves it.
                rev_unique, first_in_rev = np.unique(ids[::-1], return_index=True)
                if len(rev_unique) < len(ids):
                    self._repeating_steps.add(step_index)
                self._loc_step[rev_unique] = step_index
                self._loc_row[rev_unique] = len(ids) - 1 - first_in_rev
            else:
                self._loc_step[ids] = step_index
                num = len(ids)
                self._loc_row[ids] = (self._arange[:num] if num <= len(self._arange)
                                      else np.arange(num))
        return step_index

    def _ids_of(self, node: np.ndarray, ntx: np.ndarray, add_if_absent: bool) -> np.ndarray:
        """cindex_ids of (node[i], ntx[i]); absent ones are added or refused."""
        ids = self._table.lookup(node, ntx)
        missing = np.flatnonzero(ids < 0)
        if missing.size:
            nodes_l = node[missing].tolist()
            rows = ntx[missing].tolist()
            for i, nd, (n, t, x) in zip(missing.tolist(), nodes_l, rows):
                key = (nd, n, t, x)
                cid = self._added.get(key)
                if cid is None:
                    if not add_if_absent:
                        raise PynnetError(
                            f"computation steps: cindex {self.nnet.node_names[nd]}"
                            f"{Index(n, t, x)} is not in the computation graph")
                    cid = self._added[key] = self._num_total
                    self._num_total += 1
                    self._added_rows.append(key)
                ids[i] = cid
            self._grow_locations()
        return ids

    def _added_columns(self, ids: np.ndarray) -> np.ndarray:
        """(node, n, t, x) rows of cindex_ids added by the steps computer."""
        rows = np.asarray(self._added_rows, dtype=_INT64).reshape(-1, 4)
        return rows[ids - self._table.num]

    def _columns_of(self, ids: np.ndarray) -> np.ndarray:
        """(n, t, x) columns of cindex_ids."""
        table = self._table
        if ids.size == 0 or int(ids.max()) < table.num:
            return table.ntx[ids]
        out = np.empty((len(ids), 3), dtype=_INT64)
        old = ids < table.num
        out[old] = table.ntx[ids[old]]
        out[~old] = self._added_columns(ids[~old])[:, 1:]
        return out

    def _commit_added_cindexes(self) -> None:
        """Give the graph the cindexes the steps added (no dependencies, not
        inputs), with the ids they were given here."""
        graph = self.graph
        first = len(graph)
        rows = self._added_rows[first - self._table.num:]
        if not rows:
            return
        if graph.has_lists():
            for k, (nd, n, t, x) in enumerate(rows):
                cid, is_new = graph.add_cindex((nd, Index(n, t, x)), False)
                if not is_new or cid != first + k:
                    raise PynnetError("computation steps: a padding cindex is already in the graph")
            return
        a = self._arrays
        new = np.asarray(rows, dtype=_INT64).reshape(-1, 4)
        graph.set_arrays(GraphArrays(
            np.concatenate([a.node, new[:, 0].astype(a.node.dtype)]),
            np.concatenate([a.n, new[:, 1].astype(a.n.dtype)]),
            np.concatenate([a.t, new[:, 2].astype(a.t.dtype)]),
            np.concatenate([a.x, new[:, 3].astype(a.x.dtype)]),
            np.concatenate([a.is_input, np.zeros(len(new), dtype=bool)]),
            np.concatenate([a.dep_offsets, np.full(len(new), a.dep_offsets[-1],
                                                   dtype=a.dep_offsets.dtype)]),
            a.dep_flat))
        self._arrays = graph.arrays()

    def _sorted(self, ids: np.ndarray) -> np.ndarray:
        """ids in Kaldi's Cindex order (node, t, x, n); all must be original."""
        return ids[np.argsort(self._table.key[ids])]   # keys are unique

    # -- the public driver -----------------------------------------------------------
    def compute_for_segment(self, request: ComputationRequest,
                            phases: Sequence[Sequence[int]]) -> None:
        """ComputeForSegment: the steps of one segment, appended to ``steps``."""
        if phases:
            self._process_phases(request, phases)
        self.step_to_segment.extend([self._segment] * (len(self.steps)
                                                        - len(self.step_to_segment)))
        self._segment += 1

    def _process_phases(self, request: ComputationRequest,
                        phases: Sequence[Sequence[int]]) -> None:
        """Split every phase into sub-phases (one node each, in Kaldi's Cindex
        order) with one sort, then turn each into steps."""
        arrays = [np.asarray(p, dtype=_INT64) for p in phases]
        sizes = np.fromiter(map(len, arrays), _INT64, len(arrays))
        if (sizes == 0).any():
            raise PynnetError("computation steps: empty phase")
        flat = np.concatenate(arrays)
        table = self._table
        if int(flat.max()) >= table.num or int(flat.min()) < 0:
            raise PynnetError("computation steps: phase has an invalid cindex_id")
        phase_of = np.repeat(np.arange(len(arrays), dtype=_INT64), sizes)
        ids = flat[np.lexsort((table.key[flat], phase_of))]   # keys are unique
        nodes = table.node[ids]
        cut = np.flatnonzero((nodes[1:] != nodes[:-1]) | (phase_of[1:] != phase_of[:-1])) + 1
        starts = np.concatenate([[0], cut]).tolist()
        ends = cut.tolist() + [len(ids)]
        sub_nodes = nodes[starts].tolist()
        # The input rows of every simple-component sub-phase at once (the
        # same Indexes one node down), and the source rows of every dim-range
        # sub-phase (the same Indexes at its source node).
        sub_kind = self._sub_kind
        shift = self._input_shift
        with_input = np.array([sh != 0 for sh in shift], dtype=bool)[nodes]
        inputs = np.full(len(ids), -1, dtype=_INT64)
        missing = [0] * (len(ids) + 1)    # prefix counts of inputs not found
        if with_input.any():
            where = np.flatnonzero(with_input)
            inputs[where] = table.lookup_keys(table.key[ids[where]]
                                              + np.array(shift, dtype=_INT64)[nodes[where]])
            bad = np.zeros(len(ids) + 1, dtype=_INT64)
            bad[1:][where] = inputs[where] < 0
            if bad.any():
                missing = np.cumsum(bad).tolist()
        # Simple-component steps are appended at once and located in runs
        # (their cindex_ids are all distinct); anything else that reads or
        # writes locations comes after the pending run is located.
        steps = self.steps
        pending = len(steps)
        for a, b, node in zip(starts, ends, sub_nodes):
            kind = sub_kind[node]
            if kind == _SUB_SIMPLE_COMPONENT or kind == _SUB_SAME_INDEX_COMPONENT:
                if missing[b] == missing[a]:
                    steps.append(inputs[a:b])
                    steps.append(ids[a:b])
                    continue
                if kind == _SUB_SIMPLE_COMPONENT:
                    raise PynnetError(
                        f"computation steps: component node {self.nnet.node_names[node]} has "
                        "cindexes without an input (is a component node given as an input?)")
                kind = _SUB_COMPONENT     # (given as an input, say: ask the graph)
            if kind == _SUB_NONE:
                continue
            if pending < len(steps):
                self._locate_steps(pending)
            if kind == _SUB_COMPONENT:
                self._process_component_step(ids[a:b])
            elif kind == _SUB_INPUT:
                self._process_input_or_output_step(request, False, ids[a:b])
            elif kind == _SUB_OUTPUT:
                self._process_input_or_output_step(request, True, ids[a:b])
            elif kind == _SUB_DIM_RANGE:
                self._process_dim_range_sub_phase(
                    ids[a:b], inputs[a:b] if missing[b] == missing[a] else None)
            # (A component's input descriptor is handled with the component.)
            pending = len(steps)
        if pending < len(steps):
            self._locate_steps(pending)

    def _locate_steps(self, first: int) -> None:
        """Record the locations of steps[first:] (their cindex_ids all distinct)."""
        new = self.steps[first:]
        sizes = np.fromiter(map(len, new), _INT64, len(new))
        flat = np.concatenate(new)
        ends = np.cumsum(sizes)
        self._loc_step[flat] = np.repeat(np.arange(first, first + len(new), dtype=_INT64), sizes)
        self._loc_row[flat] = np.arange(len(flat), dtype=_INT64) - np.repeat(ends - sizes, sizes)

    def _split_into_sub_phases(self, phase: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        ids = np.asarray(phase, dtype=_INT64)
        if ids.size == 0:
            raise PynnetError("computation steps: empty phase")
        if int(ids.max()) >= self._table.num or int(ids.min()) < 0:
            raise PynnetError("computation steps: phase has an invalid cindex_id")
        ids = self._sorted(ids)
        nodes = self._table.node[ids]
        cuts = (np.flatnonzero(nodes[1:] != nodes[:-1]) + 1).tolist()
        if not cuts:
            return [ids]
        bounds = [0] + cuts + [len(ids)]
        return [ids[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def _process_sub_phase(self, request: ComputationRequest, sub_phase: np.ndarray) -> None:
        node = int(self._table.node[sub_phase[0]])
        kind = self._kind[node]
        if kind is NodeType.COMPONENT:
            self._process_component_step(sub_phase)
        elif kind is NodeType.INPUT:
            self._process_input_or_output_step(request, False, sub_phase)
        elif self._is_output[node]:
            self._process_input_or_output_step(request, True, sub_phase)
        elif kind is NodeType.DIM_RANGE:
            self._process_dim_range_sub_phase(sub_phase)
        elif kind is NodeType.DESCRIPTOR:
            # A component's input is handled together with the component.
            return
        else:
            raise PynnetError(f"unknown node type {kind}")

    # -- the kinds of sub-phase -------------------------------------------------------
    def _process_input_or_output_step(self, request: ComputationRequest, is_output: bool,
                                      sub_phase: np.ndarray) -> None:
        io_node = int(self._table.node[sub_phase[0]])
        name = self.nnet.node_names[io_node]
        ios = request.outputs if is_output else request.inputs
        io_index = -1
        for i, io in enumerate(ios):
            if io.name == name:
                io_index = i
        if io_index < 0:
            raise PynnetError(f"computation steps: node {name} is not an "
                              f"{'output' if is_output else 'input'} of the request")
        ntx = index_columns(ios[io_index].indexes)
        ids = self._ids_of(np.full(len(ntx), io_node, dtype=_INT64), ntx, False)
        if len(ids) != len(sub_phase):
            raise PynnetError(f"computation steps: the {name} step has {len(ids)} rows in the "
                              f"request but {len(sub_phase)} in the graph")
        step_index = self._add_step(ids)
        # Same set of cindexes, possibly in another order.
        if not (self._loc_step[sub_phase] == step_index).all():
            raise PynnetError(f"computation steps: the indexes of {name} in the request "
                              "differ from those in the graph")

    def _process_component_step(self, step: np.ndarray) -> None:
        table = self._table
        node = int(table.node[step[0]])
        input_node = node - 1
        component = self.nnet.component_for_node(node)
        props = component_properties(component)
        if props & _P_SIMPLE:
            # Same Indexes as the output; look the input's cindex_ids up directly.
            input_ids = table.lookup_keys(table.key[step] - table.node_stride)
            if (input_ids < 0).any():
                raise PynnetError(
                    f"computation steps: component node {self.nnet.node_names[node]} has "
                    "cindexes without an input (is a component node given as an input?)")
            self._add_step(input_ids)
            self._add_step(step)
            return
        _, flat = _dependencies_of(self._arrays, step)
        input_ids = self._sorted(sorted_unique(flat))
        if not props & _P_REORDERS_INDEXES:
            self._add_step(input_ids)
            self._add_step(step)
            return
        # The component sees array-backed lists: those that work on arrays
        # never make Index objects.
        old_in, old_out = table.ntx[input_ids], table.ntx[step]
        new_input, new_indexes = component.reorder_indexes(
            IndexList(old_in.astype(np.int32)), IndexList(old_out.astype(np.int32)))
        in_ntx, out_ntx = index_columns(new_input), index_columns(new_indexes)
        if np.array_equal(in_ntx, old_in) and np.array_equal(out_ntx, old_out):
            self._add_step(input_ids)
            self._add_step(step)
            return
        added_padding = len(old_in) + len(old_out) != len(in_ntx) + len(out_ntx)
        new_input_ids = self._ids_of(np.full(len(in_ntx), input_node, dtype=_INT64),
                                     in_ntx, added_padding)
        self._add_step(new_input_ids, may_repeat=added_padding)
        new_ids = self._ids_of(np.full(len(out_ntx), node, dtype=_INT64),
                               out_ntx, added_padding)
        self._add_step(new_ids, may_repeat=added_padding)

    def _process_dim_range_sub_phase(self, sub_phase: np.ndarray,
                                     input_ids: np.ndarray | None = None) -> None:
        """``input_ids``: the source node's cindex_ids of the same Indexes, if
        the caller has them (all found)."""
        table = self._table
        dim_range_node = int(table.node[sub_phase[0]])
        input_node = self.nnet.nodes[dim_range_node].node_index
        shift = (input_node - dim_range_node) * table.node_stride
        if input_ids is None:
            input_ids = table.lookup_keys(table.key[sub_phase] + shift)
            if (input_ids < 0).any():
                raise PynnetError(f"computation steps: dim-range node "
                                  f"{self.nnet.node_names[dim_range_node]} lacks its input")
        source_steps = self._loc_step[input_ids]
        first = int(source_steps[0])
        if (source_steps == first).all():
            values = [first]     # one source step (the usual case)
        else:
            runs = np.concatenate([[True], source_steps[1:] != source_steps[:-1]])
            values = source_steps[runs].tolist()
        if min(values) < 0:
            raise PynnetError("computation steps: a dim-range node's input is not computed "
                              "before it (bug?)")
        # Kaldi inserts each run's step into an unordered_set and walks it.
        for source_step in (values if len(values) == 1
                            else unordered_set_iteration_order(values)):
            pair = (source_step, dim_range_node)
            if pair in self._dim_range_done:
                continue
            self._dim_range_done.add(pair)
            src = self.steps[source_step]
            # The step covers every row of the source step, needed or not (it
            # will be a sub-matrix of the source's matrix, so it costs nothing).
            if (source_step not in self._repeating_steps and src.size
                    and int(src.max()) < table.num):
                # Usually every row is in the graph already: shift the keys.
                ids = table.lookup_keys(table.key[src] - shift)
                if (ids >= 0).all():
                    self._add_step(ids)
                    continue
            ids = self._ids_of(np.full(len(src), dim_range_node, dtype=_INT64),
                               self._columns_of(src), True)
            self._add_step(ids, may_repeat=True)

    # -- results -----------------------------------------------------------------------
    def check(self) -> None:
        """Kaldi's Check(): every cindex is at its recorded location, or is padding."""
        self._commit_added_cindexes()
        num = self._num_total
        loc_step = self._loc_step[:num]
        loc_row = self._loc_row[:num]
        sizes = np.fromiter(map(len, self.steps), _INT64, len(self.steps))
        offsets = np.concatenate([[0], np.cumsum(sizes)])
        flat = np.concatenate(self.steps) if self.steps else np.zeros(0, dtype=_INT64)
        placed = (loc_step >= 0) & (loc_row >= 0)
        valid = np.zeros(num, dtype=bool)
        where = np.flatnonzero(placed)
        safe_row = loc_row[where] < sizes[loc_step[where]]
        where = where[safe_row]
        valid[where] = flat[offsets[loc_step[where]] + loc_row[where]] == where
        bad = np.flatnonzero(~valid)
        if bad.size:
            nodes = np.concatenate([self._table.node, self._added_columns(
                np.arange(self._table.num, num, dtype=_INT64))[:, 0]])
            cols = self._columns_of(bad)
            for c, (n, t, x) in zip(bad.tolist(), cols.tolist()):
                if t != K_NO_TIME:
                    raise PynnetError(f"error in computing computation steps: cindex "
                                      f"{self.nnet.node_names[int(nodes[c])]}{Index(n, t, x)} is "
                                      "not where it was recorded (code error)")

    def result(self) -> ComputationSteps:
        self._commit_added_cindexes()
        num = self._num_total
        return ComputationSteps(
            step_ids=list(self.steps),
            step_to_segment=list(self.step_to_segment),
            location_step=self._loc_step[:num].copy(),
            location_row=self._loc_row[:num].copy())


def _as_segments(requests: "ComputationRequest | Sequence[ComputationRequest]",
                 phases: Sequence) -> tuple[list[ComputationRequest], list]:
    reqs = [requests] if isinstance(requests, ComputationRequest) else list(requests)
    phase_list = list(phases)
    # A single segment's phases (a list of lists of ints) are accepted too.
    if (len(reqs) == 1 and phase_list and len(phase_list[0])
            and isinstance(phase_list[0][0], (int, np.integer))):
        phase_list = [phase_list]
    if len(reqs) != len(phase_list):
        raise PynnetError(f"{len(reqs)} requests but phases for {len(phase_list)} segments")
    return reqs, phase_list


def compute_computation_steps_full(
        nnet: "Nnet", requests: "ComputationRequest | Sequence[ComputationRequest]",
        phases: Sequence, graph: ComputationGraph) -> ComputationSteps:
    """Steps, step-to-segment map and cindex locations, as Kaldi's Compiler gets them.

    ``requests``: one request or one per segment (a looped computation);
    ``phases``: :func:`compute_computation_phases` of the same graph.
    """
    reqs, phase_list = _as_segments(requests, phases)
    with gc_paused():
        computer = ComputationStepsComputer(nnet, graph)
        for request, segment_phases in zip(reqs, phase_list):
            computer.compute_for_segment(request, segment_phases)
        computer.check()
        return computer.result()


def compute_computation_steps(nnet: "Nnet",
                              request: "ComputationRequest | Sequence[ComputationRequest]",
                              phases: Sequence, graph: ComputationGraph) -> list[list[int]]:
    """The steps (lists of cindex_ids) for ``phases``; see compute_computation_steps_full."""
    return compute_computation_steps_full(nnet, request, phases, graph).steps
