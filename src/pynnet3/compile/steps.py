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
encoded as one int64 key whose numeric order is Kaldi's Cindex order, so
sorting a phase is an ``argsort`` and finding the cindex_ids of (node - 1,
same Indexes) is a lookup.  Components' ``reorder_indexes`` get array-backed
index lists (those that work on arrays make no Index objects).  Per-element
Python remains only for the few cindexes the steps add to the graph
(padding with ``t = kNoTime`` and dim-range rows), which are handed to the
graph at the end.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..std_order import iteration_order
from ..errors import PynnetError
from ..nnet.components.base import Prop
from ..nnet.graph import compute_nnet_computation_epochs
from ..nnet.index import K_NO_TIME, Index, index_columns
from ..nnet.nnet import NodeType
from ..nnet.properties_cache import component_properties
from .graph_types import ComputationGraph, GraphArrays
from .n_stride import IndexList
from .request import ComputationRequest

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

_INT64 = np.int64
# Component property bits as plain ints (IntFlag operators are slow).
_P_SIMPLE = int(Prop.SIMPLE)
_P_REORDERS_INDEXES = int(Prop.REORDERS_INDEXES)


# -- vectorised views of the graph ---------------------------------------------------

def _graph_ntx(arrays: GraphArrays) -> np.ndarray:
    """(num, 3) int64 columns n, t, x of every cindex of the graph."""
    return np.stack([arrays.n, arrays.t, arrays.x], axis=1).astype(_INT64)


def _dependencies_of(arrays: GraphArrays, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(dependent, dependency) edge arrays for the cindex_ids ``ids``."""
    ids = np.asarray(ids, dtype=_INT64)
    starts = arrays.dep_offsets[ids]
    lens = arrays.dep_offsets[ids + 1] - starts
    total = int(lens.sum())
    first = np.repeat(starts - (np.cumsum(lens) - lens), lens)
    flat = arrays.dep_flat[first + np.arange(total, dtype=_INT64)].astype(_INT64)
    return np.repeat(ids, lens), flat


class _Column:
    """Order-preserving small-integer code of one Index field (n, t or x).

    kNoTime (the smallest int32) gets code 0 so it still sorts first; other
    values are offsets from the smallest, or ranks among the distinct values
    when the range is too wide to multiply into one int64 key.
    """

    def __init__(self, values: np.ndarray, allow_offset: bool = True) -> None:
        real = values[values != K_NO_TIME]
        self.lo = int(real.min()) if real.size else 0
        hi = int(real.max()) if real.size else 0
        self.uniq: np.ndarray | None = None
        if allow_offset and hi - self.lo < (1 << 22):
            self.size = hi - self.lo + 2
        else:
            self.uniq = np.unique(real)
            self.size = len(self.uniq) + 1

    def encode(self, values: np.ndarray,
               trusted: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        """(codes, valid): ``valid`` is None when every value is known (or
        ``trusted``: the values are those the column was built from)."""
        if self.uniq is None:
            codes = values - (self.lo - 1)
        else:
            pos = np.searchsorted(self.uniq, values)
            codes = pos + 1
        if values.size == 0:
            return codes, None
        blank = values == K_NO_TIME if values.min() == K_NO_TIME else None
        if blank is not None:
            codes[blank] = 0
        if trusted:
            return codes, None
        if self.uniq is None:
            ok = (codes >= 1) & (codes < self.size)
        elif len(self.uniq):
            ok = self.uniq[np.minimum(pos, len(self.uniq) - 1)] == values
        else:
            ok = np.zeros(len(values), dtype=bool)
        if blank is not None:
            ok |= blank
        return codes, (None if ok.all() else ok)


class _CindexTable:
    """The cindexes present when the steps computer starts, as sortable keys.

    ``key = ((node * T + t) * X + x) * N + n`` (fields coded by _Column), so
    sorting by key is sorting in Kaldi's Cindex order, and moving a cindex to
    another node (a component's input node, a dim-range node's source) is
    adding a multiple of ``node_stride``.  Cindexes added later (padding) are
    looked up in the graph's own dictionary instead.
    """

    def __init__(self, arrays: GraphArrays, num_nodes: int) -> None:
        self.num = len(arrays.node)
        self.node = arrays.node.astype(_INT64)
        self.ntx = ntx = _graph_ntx(arrays)
        n, t, x = ntx[:, 0], ntx[:, 1], ntx[:, 2]
        for allow_offset in (True, False):
            self.cols = (_Column(t, allow_offset), _Column(x, allow_offset),
                         _Column(n, allow_offset))
            sizes = [c.size for c in self.cols]
            if float(num_nodes) * sizes[0] * sizes[1] * sizes[2] < 2.0 ** 62:
                break
        else:
            raise PynnetError("indexes too spread out to encode (bad request?)")
        self.x_mul = sizes[2]
        self.t_mul = sizes[1] * sizes[2]
        self.node_stride = sizes[0] * self.t_mul
        self.key = self._combine(self.node, t, x, n, trusted=True)[0]
        # Lookups go through a dense key -> cindex_id array when that is small
        # (the usual case: a few hundred nodes x frames x sequences), else
        # through binary search in the sorted keys.
        total = num_nodes * self.node_stride
        self.dense: np.ndarray | None = None
        if total <= 4 * self.num + (1 << 16):
            self.dense = np.full(total, -1, dtype=np.int32)
            self.dense[self.key] = np.arange(self.num, dtype=np.int32)
        else:
            self.perm = np.argsort(self.key)      # keys are unique: any sort will do
            self.sorted_key = self.key[self.perm]

    def _combine(self, node: np.ndarray, t: np.ndarray, x: np.ndarray, n: np.ndarray,
                 trusted: bool = False) -> tuple[np.ndarray, np.ndarray | None]:
        ct, ok_t = self.cols[0].encode(t, trusted)
        cx, ok_x = self.cols[1].encode(x, trusted)
        cn, ok_n = self.cols[2].encode(n, trusted)
        key = node * self.node_stride
        ct *= self.t_mul
        key += ct
        cx *= self.x_mul
        key += cx
        key += cn
        ok = None
        for part in (ok_t, ok_x, ok_n):
            if part is not None:
                ok = part if ok is None else ok & part
        return key, ok

    def lookup_keys(self, keys: np.ndarray, ok: np.ndarray | None = None) -> np.ndarray:
        """cindex_ids of encoded keys; -1 for those not in the table.

        ``ok`` marks the keys whose fields were all encodable; keys of
        cindexes of existing nodes are always in range, as are keys shifted
        to another node.
        """
        if self.num == 0:
            return np.full(len(keys), -1, dtype=_INT64)
        if self.dense is not None:
            if ok is None:
                return self.dense[keys].astype(_INT64)
            return np.where(ok, self.dense[np.where(ok, keys, 0)], -1).astype(_INT64)
        pos = np.searchsorted(self.sorted_key, keys)
        np.minimum(pos, self.num - 1, out=pos)
        found = self.sorted_key[pos] == keys
        if ok is not None:
            found &= ok
        return np.where(found, self.perm[pos], -1)

    def lookup(self, node: np.ndarray, ntx: np.ndarray) -> np.ndarray:
        key, ok = self._combine(node, ntx[:, 1], ntx[:, 2], ntx[:, 0])
        return self.lookup_keys(key, ok)


@contextmanager
def _gc_paused():
    """Pause the cyclic garbage collector for a block that allocates many tuples.

    A large graph holds millions of live tuples; the full collections that
    new Index objects (from components' reorder_indexes) set off would walk
    all of them again and again.  Nothing here creates reference cycles.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# -- phases ------------------------------------------------------------------------------

def _phases_for_epoch(ids: np.ndarray, dependent: np.ndarray, dependency: np.ndarray,
                      pos: np.ndarray, phases: list[np.ndarray]) -> None:
    """ComputeComputationPhasesForEpoch for a recurrent (multi-node) epoch.

    ``ids``: sorted cindex_ids of one segment and epoch; ``dependent`` /
    ``dependency``: the dependency edges that stay inside it.  Kahn's
    algorithm one frontier at a time: a phase is every cindex whose last
    in-epoch dependency was in the previous phase (Kaldi's candidates).
    ``pos`` is scratch space mapping cindex_id -> position in ``ids``.
    """
    num = len(ids)
    pos[ids] = np.arange(num)
    src = pos[dependent]
    dst = pos[dependency]
    remaining = np.bincount(src, minlength=num)
    order = np.argsort(dst, kind="stable")
    targets = src[order]
    starts = np.zeros(num + 1, dtype=_INT64)
    np.cumsum(np.bincount(dst, minlength=num), out=starts[1:])
    frontier = np.flatnonzero(remaining == 0)
    if frontier.size == 0:
        raise PynnetError("trying to process a computation with cycles")
    placed = 0
    while frontier.size:
        phases.append(ids[frontier])
        placed += frontier.size
        begin = starts[frontier]
        counts = starts[frontier + 1] - begin
        total = int(counts.sum())
        if total == 0:
            break
        # Positions begin[i] .. begin[i] + counts[i] - 1 of 'targets', all i.
        offsets = np.repeat(begin - np.cumsum(counts) + counts, counts) + np.arange(total)
        cand, num_done = np.unique(targets[offsets], return_counts=True)
        remaining[cand] -= num_done
        frontier = cand[remaining[cand] == 0]
        if frontier.size == 0:
            raise PynnetError(
                "the model has a kind of recurrence that cannot be computed (e.g. x[t] "
                "depending on both x[t+1] and x[t-1]): no order of computation works")
    if placed != num:
        raise PynnetError("not every cindex could be given a phase (cycle in the graph?)")


def compute_computation_phases(nnet: "Nnet", graph: ComputationGraph) -> list[list[list[int]]]:
    """Kaldi's ComputeComputationPhases: per segment, the phases (lists of cindex_ids).

    Within each segment the phases follow the epochs; each phase is sorted
    by cindex_id.  Every cindex_id of the graph is in exactly one phase.
    """
    return [[p.tolist() for p in phases]
            for phases in compute_computation_phase_arrays(nnet, graph)]


def compute_computation_phase_arrays(nnet: "Nnet", graph: ComputationGraph
                                     ) -> list[list[np.ndarray]]:
    """:func:`compute_computation_phases` with each phase an int64 array."""
    num = len(graph)
    if not graph.segment_ends or graph.segment_ends[-1] != num:
        raise PynnetError("compute_computation_phases: the graph must be pruned "
                          "(segment_ends must cover every cindex)")
    node_to_epoch = np.asarray(compute_nnet_computation_epochs(nnet), dtype=_INT64) + 1
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
        self._table = _CindexTable(self._arrays, num_nodes)
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
        self._segment = 0
        self._kind = [node.node_type for node in nnet.nodes]
        self._is_output = [nnet.is_output_node(n) for n in range(num_nodes)]

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
        ids = np.ascontiguousarray(ids, dtype=_INT64)
        self.steps.append(ids)
        if ids.size:
            if may_repeat:
                # A cindex listed twice (padding) is located at its last row, as
                # Kaldi's sequential loop leaves it.
                rev_unique, first_in_rev = np.unique(ids[::-1], return_index=True)
                self._loc_step[rev_unique] = step_index
                self._loc_row[rev_unique] = len(ids) - 1 - first_in_rev
            else:
                self._loc_step[ids] = step_index
                self._loc_row[ids] = np.arange(len(ids))
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
        for phase in phases:
            for sub_phase in self._split_into_sub_phases(phase):
                self._process_sub_phase(request, sub_phase)
        self.step_to_segment.extend([self._segment] * (len(self.steps)
                                                        - len(self.step_to_segment)))
        self._segment += 1

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
        input_ids = self._sorted(np.unique(flat))
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

    def _process_dim_range_sub_phase(self, sub_phase: np.ndarray) -> None:
        table = self._table
        dim_range_node = int(table.node[sub_phase[0]])
        input_node = self.nnet.nodes[dim_range_node].node_index
        shift = (input_node - dim_range_node) * table.node_stride
        input_ids = table.lookup_keys(table.key[sub_phase] + shift)
        if (input_ids < 0).any():
            raise PynnetError(f"computation steps: dim-range node "
                              f"{self.nnet.node_names[dim_range_node]} lacks its input")
        source_steps = self._loc_step[input_ids]
        if (source_steps < 0).any():
            raise PynnetError("computation steps: a dim-range node's input is not computed "
                              "before it (bug?)")
        # Kaldi inserts each run's step into an unordered_set and walks it.
        runs = np.concatenate([[True], source_steps[1:] != source_steps[:-1]])
        for source_step in unordered_set_iteration_order(source_steps[runs].tolist()):
            pair = (source_step, dim_range_node)
            if pair in self._dim_range_done:
                continue
            self._dim_range_done.add(pair)
            src = self.steps[source_step]
            # The step covers every row of the source step, needed or not (it
            # will be a sub-matrix of the source's matrix, so it costs nothing).
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
    with _gc_paused():
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
