"""From a ComputationRequest to an (unoptimized) NnetComputation.

A port of Kaldi's Compiler (nnet-compile.{h,cc}).  The work is:

1. build the computation graph for each request (segment) and prune it;
2. group its cindexes into phases and then *steps* (compile/steps.py); a
   step is a list of cindexes of one node computed together, i.e. one
   matrix, one row per cindex;
3. describe each step (:class:`StepInfo`): its value and derivative
   submatrices, where the inputs of each row come from (for descriptor
   steps), its precomputed component indexes;
4. emit commands: allocation (with zeroing), the forward commands of each
   step in order, a marker, the backward commands in reverse order (only for
   steps whose derivative is needed), deallocation of everything the user
   will not read afterwards; then move input/output commands to the edges of
   each segment (Kaldi's ConsolidateIoOperations) and attach debug info.

The Descriptor-specific code below one SumDescriptor (input locations, row
commands) is in descriptor_commands.py.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..arraytools import sorted_unique
from .. import fast_paths
from ..errors import PynnetError
from ..log import verbose_level, vlog
from ..nnet.components.base import Prop, UpdatableComponent
from ..nnet.index import Index
from ..nnet.nnet import NodeType
from ..nnet.properties_cache import component_properties, component_properties_cached
from .split_locations import PairLists
from .descriptor_commands import (CindexTable, compile_backward_from_step_locations,
                                  compile_forward_from_step_locations,
                                  compute_input_locations_lists, split_by_scale)
from .computation import (Command, CommandType, MatrixDebugInfo, NnetComputation, make_command,
                          PrecomputedIndexesInfo, StrideType)
from .graph.builder import ComputationGraphBuilder
from .nnet_memo import nnet_memo
from .graph.computation_graph import ComputationGraph
from ..nnet.index_lists import CindexList, IndexList
from .request import ComputationRequest
from .steps import compute_computation_phase_arrays, compute_computation_steps_full

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

__all__ = ["CompilerOptions", "Compiler", "StepInfo", "consolidate_io_operations",
           "compile_computation"]

T = CommandType
# Component property bits as plain ints (IntFlag operators are slow).
_P_UPDATABLE = int(Prop.UPDATABLE)
_P_USES_MEMO = int(Prop.USES_MEMO)
_P_STORES_STATS = int(Prop.STORES_STATS)
_P_BACKPROP_NEEDS_INPUT = int(Prop.BACKPROP_NEEDS_INPUT)
_P_BACKPROP_NEEDS_OUTPUT = int(Prop.BACKPROP_NEEDS_OUTPUT)
_P_INPUT_CONTIGUOUS = int(Prop.INPUT_CONTIGUOUS)
_P_OUTPUT_CONTIGUOUS = int(Prop.OUTPUT_CONTIGUOUS)


def _stride_rules(nnet: "Nnet") -> list[tuple[int, int] | None]:
    """Per node, what decides its matrices' stride (Compiler.get_stride_type):
    (component index, property flag) -- EQUAL_NUM_COLS if the component has
    the flag (its input must be contiguous, for a component-input node; its
    output, for a component node) -- or None (always the default stride).
    The flags themselves are asked at each compilation."""
    rules: list[tuple[int, int] | None] = []
    for node_index in range(nnet.num_nodes()):
        if nnet.is_component_input_node(node_index):
            rules.append((nnet.nodes[node_index + 1].component_index, _P_INPUT_CONTIGUOUS))
        elif nnet.is_component_node(node_index):
            rules.append((nnet.nodes[node_index].component_index, _P_OUTPUT_CONTIGUOUS))
        else:
            rules.append(None)
    return rules


@dataclass
class CompilerOptions:
    """Kaldi's CompilerOptions."""

    output_debug_info: bool = True


_NO_IDS = np.zeros(0, dtype=np.int64)
_NO_IDS.flags.writeable = False


@dataclass
class StepInfo:
    """What the compiler knows about one step (Kaldi's Compiler::StepInfo)."""

    node_index: int = -1
    value: int = 0          # submatrix of the step's output
    deriv: int = 0          # submatrix of the derivative there; 0 if none
    segment: int = 0
    precomputed_indexes_index: int = 0
    output_indexes: list[Index] = field(default_factory=list)
    output_cindex_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # Descriptor steps: a submatrix per Append part (column range), and per
    # part, for each row the (step, row) locations it sums.
    value_parts: list[int] = field(default_factory=list)
    deriv_parts: list[int] = field(default_factory=list)
    input_locations_list: list[PairLists] = field(default_factory=list)


class Compiler:
    """Kaldi's Compiler: ``Compiler(requests, nnet).create_computation(opts)``.

    ``requests`` is one ComputationRequest, or several for a multi-segment
    (online/looped) computation.
    """

    def __init__(self, requests: ComputationRequest | Sequence[ComputationRequest],
                 nnet: "Nnet") -> None:
        if isinstance(requests, ComputationRequest):
            requests = [requests]
        self.requests: list[ComputationRequest] = list(requests)
        if not self.requests:
            raise PynnetError("Compiler needs at least one request")
        if len(self.requests) > 1:
            for r in self.requests:
                if r.need_model_derivative:
                    raise PynnetError("model derivatives are not supported for "
                                      "multi-segment computations")
                if r.store_component_stats != self.requests[0].store_component_stats:
                    raise PynnetError("store_component_stats must agree across segments")
        self.nnet = nnet
        self.graph = ComputationGraph()
        self.steps: list[StepInfo] = []
        # cindex_id -> (step, row) of where it is computed (Kaldi's cindex_id_to_location_).
        self.loc_step = np.zeros(0, dtype=np.int64)
        self.loc_row = np.zeros(0, dtype=np.int64)
        # Per-compilation memo: component property flags; per network (the
        # structure alone decides them): descriptor-part scales.
        self._props: dict[int, int] = {}
        self._scales: dict[int, tuple] = nnet_memo(nnet, "part_scales", lambda n: {})
        # descriptor node -> its parts' dims (structure: kept per network)
        self._part_dims: dict[int, list[int]] = nnet_memo(nnet, "part_dims", lambda n: {})
        self._graph_arrays = None   # set by _set_graph_columns() once the steps are known

    # -- the driver -------------------------------------------------------------
    def create_computation(self, options: CompilerOptions | None = None) -> NnetComputation:
        with component_properties_cached():
            return self._create_computation(options or CompilerOptions())

    def _create_computation(self, options: CompilerOptions) -> NnetComputation:
        computation = NnetComputation()
        builder = ComputationGraphBuilder(self.nnet, self.graph)
        for request in self.requests:
            builder.compute(request)
            if not builder.all_outputs_are_computable():
                raise PynnetError("Not all outputs were computable, cannot create computation.\n"
                                  + builder.explain_why_all_outputs_not_computable())
            builder.prune()
        # From here on the graph is read as columns (and only grows by the
        # padding rows of the steps); a graph the builder left as lists is
        # converted once rather than at every graph.arrays().
        if self.graph.has_lists():
            self.graph.set_arrays(self.graph.arrays())
        # Per segment, a list of phases (lists of cindex_ids); each phase
        # becomes one or more steps.  The steps computer may add a few
        # cindexes to the graph (padding rows, dim-range rows).
        phases_per_segment = compute_computation_phase_arrays(self.nnet, self.graph)
        result = compute_computation_steps_full(self.nnet, self.requests,
                                                phases_per_segment, self.graph)
        del phases_per_segment
        steps, step_to_segment = result.step_ids, result.step_to_segment
        self.loc_step, self.loc_row = result.location_step, result.location_row
        self._set_graph_columns()
        deriv_needed = self.compute_deriv_needed(steps, step_to_segment)
        self.create_step_info(deriv_needed, step_to_segment, steps, computation)
        self.add_commands(deriv_needed, step_to_segment, computation)
        consolidate_io_operations(computation)
        if options.output_debug_info:
            self.output_debug_info(computation)
        return computation

    def add_commands(self, deriv_needed: list[bool], step_to_segment: list[int],
                     computation: NnetComputation) -> None:
        computation.need_model_derivative = self.requests[0].need_model_derivative
        whole = computation.whole_submatrices()
        self.allocate_matrices(whole, computation)
        self.set_up_precomputed_indexes(step_to_segment, computation)
        num_steps = len(self.steps)
        for step in range(num_steps):
            self.compile_forward(step, computation)
            if step + 1 < num_steps and step_to_segment[step + 1] != step_to_segment[step]:
                # separates the segments of a multi-segment computation
                computation.commands.append(Command(T.NO_OPERATION_MARKER))
        computation.commands.append(Command(T.NO_OPERATION_MARKER))  # end of forward
        for step in range(num_steps - 1, -1, -1):
            if deriv_needed[step]:
                self.compile_backward(step, computation)
        self.deallocate_matrices(whole, step_to_segment, computation)

    def _set_graph_columns(self) -> None:
        """The finished graph as columns (node, n, t, x; int32), its input
        flags and dependencies (CSR), for the array work below."""
        arrays = self.graph.arrays()
        self._graph_arrays = arrays
        self._cindex_cols = np.stack([arrays.node, arrays.n, arrays.t, arrays.x], axis=1)
        self._cindex_node = arrays.node.astype(np.int64)

    def _properties(self, component_index: int) -> int:
        """Property flags of a component (asked once per component)."""
        p = self._props.get(component_index)
        if p is None:
            p = self._props[component_index] = component_properties(
                self.nnet.components[component_index])
        return p

    # -- which steps need derivatives ---------------------------------------------
    def compute_step_dependencies(self, this_step: Sequence[int], step_index: int) -> set[int]:
        """Steps whose output this step reads (Kaldi's ComputeStepDependencies)."""
        if len(this_step) == 0:
            return set()
        if self._graph_arrays is None:
            self._set_graph_columns()
        node_index = int(self._cindex_node[this_step[0]])
        if self.nnet.is_component_node(node_index):
            if step_index == 0:
                raise PynnetError("component step with no preceding input step")
            return {step_index - 1}   # its component-input step
        arrays = self._graph_arrays
        ids = np.asarray(this_step, dtype=np.int64)
        starts = arrays.dep_offsets[ids]
        lens = arrays.dep_offsets[ids + 1] - starts
        total = int(lens.sum())
        if total == 0:
            return set()
        first = np.repeat(starts - (np.cumsum(lens) - lens), lens)
        flat = arrays.dep_flat[first + np.arange(total, dtype=np.int64)]
        return set(sorted_unique(self.loc_step[flat]).tolist())

    def _all_step_dependencies(self, steps: Sequence[Sequence[int]]) -> list[list[int]]:
        """compute_step_dependencies() of every step at once, ignoring that
        a component step reads only its input step (the caller knows)."""
        arrays = self._graph_arrays
        sizes = np.fromiter(map(len, steps), np.int64, len(steps))
        ids = (np.concatenate([np.asarray(s, dtype=np.int64) for s in steps])
               if len(steps) else np.zeros(0, dtype=np.int64))
        starts = arrays.dep_offsets[ids]
        lens = arrays.dep_offsets[ids + 1] - starts
        total = int(lens.sum())
        first = np.repeat(starts - (np.cumsum(lens) - lens), lens)
        dep_step = self.loc_step[arrays.dep_flat[first + np.arange(total, dtype=np.int64)]]
        src_step = np.repeat(np.repeat(np.arange(len(steps), dtype=np.int64), sizes), lens)
        # Distinct (step, dependency step) pairs, sorted.
        keys = sorted_unique(src_step * (len(steps) + 1) + (dep_step + 1))
        src, dep = np.divmod(keys, len(steps) + 1)
        bounds = np.searchsorted(src, np.arange(len(steps) + 1)).tolist()
        dep_list = (dep - 1).tolist()
        return [dep_list[bounds[s]:bounds[s + 1]] for s in range(len(steps))]

    def compute_deriv_needed(self, steps: Sequence[Sequence[int]],
                             step_to_segment: list[int]) -> list[bool]:
        """Kaldi's ComputeDerivNeeded: a step needs a derivative if a step it
        reads does, if it is an input whose derivative the user wants, an
        output whose derivative the user supplies, or an updatable component
        with a nonzero learning rate when model derivatives are wanted."""
        if not (len(steps) == len(step_to_segment) and step_to_segment[0] == 0
                and step_to_segment[-1] + 1 == len(self.requests)):
            raise PynnetError("compute_deriv_needed: inconsistent steps / segments")
        nnet = self.nnet
        is_input = self._graph_arrays.is_input
        deriv_needed = [False] * len(steps)
        step_deps = self._all_step_dependencies(steps)
        for step, this_step in enumerate(steps):
            if len(this_step) == 0:
                continue  # e.g. the input step of a component that needs no input
            cindex_id = this_step[0]
            node_index = int(self._cindex_node[cindex_id])
            node_name = nnet.node_names[node_index]
            if nnet.is_component_node(node_index):
                if step == 0:
                    raise PynnetError("component step with no preceding input step")
                deps = [step - 1]   # its component-input step
            else:
                deps = step_deps[step]
            for dep_step in deps:
                if dep_step >= step:
                    raise PynnetError("step depends on a later step (bad step order)")
                if deriv_needed[dep_step]:
                    deriv_needed[step] = True
            request = self.requests[step_to_segment[step]]
            if is_input[cindex_id]:
                i = request.index_for_input(node_name)
                if i == -1:
                    raise PynnetError(f"input step for {node_name} not in the request")
                if request.inputs[i].has_deriv:
                    deriv_needed[step] = True
            if nnet.is_output_node(node_index):
                i = request.index_for_output(node_name)
                if i == -1:
                    raise PynnetError(f"output step for {node_name} not in the request")
                if request.outputs[i].has_deriv:
                    deriv_needed[step] = True
            if nnet.is_component_node(node_index) and request.need_model_derivative:
                c = nnet.component_for_node(node_index)
                if self._properties(nnet.nodes[node_index].component_index) & _P_UPDATABLE:
                    if not isinstance(c, UpdatableComponent):
                        raise PynnetError(f"component {c.type_name} is updatable but not an "
                                          "UpdatableComponent")
                    if c.learning_rate != 0:
                        deriv_needed[step] = True
        if verbose_level() >= 5:
            vlog(5, "deriv_needed = " + "".join("t" if x else "f" for x in deriv_needed))
        return deriv_needed

    # -- step info -----------------------------------------------------------------
    def get_stride_type(self, node_index: int) -> StrideType:
        """EQUAL_NUM_COLS where the component wants contiguous input/output
        (create_step_info asks the same through _stride_rules)."""
        nnet = self.nnet
        if nnet.is_component_input_node(node_index):
            flag, comp_node = _P_INPUT_CONTIGUOUS, node_index + 1
        elif nnet.is_component_node(node_index):
            flag, comp_node = _P_OUTPUT_CONTIGUOUS, node_index
        else:
            return StrideType.DEFAULT
        props = self._properties(nnet.nodes[comp_node].component_index)
        return StrideType.EQUAL_NUM_COLS if props & flag else StrideType.DEFAULT

    def create_step_info(self, deriv_needed: list[bool], step_to_segment: list[int],
                         by_step: Sequence[Sequence[int]], computation: NnetComputation) -> None:
        """Kaldi's CreateStepInfo: matrices and submatrices for every step,
        and input locations of descriptor steps."""
        if len(by_step) == 0:
            raise PynnetError("no steps to compile")
        nnet = self.nnet
        arrays = self._graph_arrays
        cindex_node = self._cindex_node
        table = CindexTable(self.graph, nnet.num_nodes())
        step_node = np.zeros(len(by_step), dtype=np.int64)
        # (output_cindex_ids is given: its default would make an array per step.)
        self.steps = [StepInfo(output_cindex_ids=_NO_IDS) for _ in by_step]
        node_shape: dict[int, tuple[int, StrideType]] = {}
        node_dims = nnet_memo(nnet, "node_dims",
                              lambda n: [n.node_dim(i) for i in range(n.num_nodes())])
        stride_rules = nnet_memo(nnet, "stride_rules", _stride_rules)
        # Every step's (n, t, x) rows gathered at once; each step's
        # output_indexes is a slice (a contiguous view) of them.
        id_arrays = [np.asarray(ids, dtype=np.int64) for ids in by_step]
        bounds = np.cumsum([0] + [len(a) for a in id_arrays]).tolist()
        all_ntx = self._cindex_cols[np.concatenate(id_arrays), 1:]
        for step, ids in enumerate(by_step):
            info = self.steps[step]
            info.output_cindex_ids = ids_arr = id_arrays[step]
            info.segment = step_to_segment[step]
            # Array-backed: Index objects are made only if somebody reads them.
            info.output_indexes = IndexList(all_ntx[bounds[step]:bounds[step + 1]])
            if len(ids) == 0:
                # The (empty) input step of a component needing no input
                # (e.g. ConstantFunctionComponent): a placeholder, no commands.
                if step + 1 >= len(by_step) or len(by_step[step + 1]) == 0:
                    raise PynnetError("empty step not followed by a component step")
                info.node_index = int(cindex_node[by_step[step + 1][0]]) - 1
                step_node[step] = info.node_index
                continue
            info.node_index = node_index = int(cindex_node[ids[0]])
            step_node[step] = node_index
            node = nnet.nodes[node_index]
            # (A recurrent layer has a step per frame: ask the network once per node.)
            shape = node_shape.get(node_index)
            if shape is None:
                rule = stride_rules[node_index]
                stride = (StrideType.EQUAL_NUM_COLS
                          if rule is not None and self._properties(rule[0]) & rule[1]
                          else StrideType.DEFAULT)
                shape = node_shape[node_index] = (node_dims[node_index], stride)
            num_rows, (num_cols, stride) = len(ids), shape
            if node.node_type is not NodeType.DIM_RANGE:
                info.value = computation.new_matrix(num_rows, num_cols, stride)
                if deriv_needed[step]:
                    info.deriv = computation.new_matrix(num_rows, num_cols, stride)
            else:
                # A column range of the step it is taken from (same rows).
                offsets = arrays.dep_offsets
                has_deps = np.flatnonzero(offsets[ids_arr + 1] > offsets[ids_arr])
                source = (int(arrays.dep_flat[offsets[ids_arr[has_deps[0]]]])
                          if has_deps.size else -1)
                if source < 0:
                    raise PynnetError("dim-range step with no source")
                input_step = int(self.loc_step[source])
                src = self.steps[input_step]
                if not (0 <= input_step < step and len(src.output_indexes) == num_rows):
                    raise PynnetError("dim-range step does not match its source step")
                info.value = computation.new_submatrix(src.value, 0, -1, node.dim_offset, node.dim)
                if deriv_needed[step]:
                    info.deriv = computation.new_submatrix(src.deriv, 0, -1,
                                                           node.dim_offset, node.dim)
            if node.node_type is NodeType.DESCRIPTOR:
                self._set_up_descriptor_step(step, deriv_needed[step], table, computation)
            if computation.submatrices[info.value].num_rows != num_rows:
                raise PynnetError("step matrix has the wrong number of rows")
        self._compute_input_locations(table)
        # steps[s].node_index / .value / .deriv as arrays, for mapping (step, row)
        # locations to (submatrix, row) ones.
        self.step_node = step_node
        self.step_value_list = [s.value for s in self.steps]
        self.step_value = np.array(self.step_value_list, dtype=np.int64)
        self.step_deriv_list = [s.deriv for s in self.steps]
        self.step_deriv = np.array(self.step_deriv_list, dtype=np.int64)

    def _set_up_descriptor_step(self, step: int, need_deriv: bool, table: CindexTable,
                                computation: NnetComputation) -> None:
        info = self.steps[step]
        part_dims = self._part_dims.get(info.node_index)
        if part_dims is None:
            nnet = self.nnet
            desc = nnet.nodes[info.node_index].descriptor
            if desc.num_parts() == 0:
                raise PynnetError("descriptor with no parts")
            part_dims = [desc.part(p).dim(nnet.node_dim) for p in range(desc.num_parts())]
            if sum(part_dims) != desc.dim(nnet.node_dim):
                raise PynnetError("descriptor parts do not add up to its dimension")
            self._part_dims[info.node_index] = part_dims
        # (input_locations_list: see _compute_input_locations, after all steps)
        if len(part_dims) == 1:
            info.value_parts = [info.value]
            if need_deriv:
                info.deriv_parts = [info.deriv]
            return
        offset = 0
        for dim in part_dims:
            info.value_parts.append(computation.new_submatrix(info.value, 0, -1, offset, dim))
            if need_deriv:
                info.deriv_parts.append(computation.new_submatrix(info.deriv, 0, -1, offset, dim))
            offset += dim

    def _compute_input_locations(self, table: CindexTable) -> None:
        """Kaldi's ComputeInputLocationsList for every part of every
        descriptor step.  The steps of one node share the descriptor, so
        they are done together (a recurrent layer has a step per frame) and
        the result is cut back into steps."""
        by_node: dict[int, list[StepInfo]] = {}
        for info in self.steps:
            if info.value_parts:
                by_node.setdefault(info.node_index, []).append(info)
        jobs: list[tuple] = []
        groups: list[tuple[list[StepInfo], list[int]]] = []
        # The (n, t, x) rows of every group gathered at once, then sliced.
        group_ids = [infos[0].output_cindex_ids if len(infos) == 1
                     else np.concatenate([info.output_cindex_ids for info in infos])
                     for infos in by_node.values()]
        group_bounds = np.cumsum([0] + [len(ids) for ids in group_ids]).tolist()
        all_rows = table.index[np.concatenate(group_ids)] if group_ids else None
        for g, (node_index, infos) in enumerate(by_node.items()):
            desc = self.nnet.nodes[node_index].descriptor
            bounds = [0]
            for info in infos:
                bounds.append(bounds[-1] + len(info.output_cindex_ids))
                info.input_locations_list = []
            out_arr = all_rows[group_bounds[g]:group_bounds[g + 1]]
            for p in range(desc.num_parts()):
                jobs.append((desc.part(p), out_arr))
                groups.append((infos, bounds))
        results = compute_input_locations_lists(jobs, self.graph, table, self.loc_step,
                                                self.loc_row,
                                                fast_paths.current().input_locations,
                                                nnet_memo(self.nnet, "input_terms",
                                                          lambda nnet: {}))
        for (infos, bounds), locations in zip(groups, results):
            if len(infos) == 1:
                infos[0].input_locations_list.append(locations)
                continue
            for k, info in enumerate(infos):
                info.input_locations_list.append(locations.rows(bounds[k], bounds[k + 1]))

    # -- matrices and precomputed indexes --------------------------------------------
    def allocate_matrices(self, whole_submatrices: list[int],
                          computation: NnetComputation) -> None:
        """Allocate and zero every matrix except the inputs and the output
        derivatives (the user supplies those)."""
        if computation.commands:
            raise PynnetError("allocate_matrices must come first")
        supplied: set[int] = set()
        for info in self.steps:
            if len(info.output_cindex_ids) == 0:
                continue
            if self._graph_arrays.is_input[int(info.output_cindex_ids[0])]:
                supplied.add(computation.submatrices[info.value].matrix_index)
            if self.nnet.is_output_node(info.node_index) and info.deriv != 0:
                supplied.add(computation.submatrices[info.deriv].matrix_index)
        append = computation.commands.append
        for m in range(1, len(computation.matrices)):
            if m not in supplied:
                s = whole_submatrices[m]
                append(make_command(T.ALLOC_MATRIX, 1.0, s, -1, -1, -1, -1, -1, -1))
                # Kaldi zeroes every matrix here; the optimizer removes what is redundant.
                append(make_command(T.SET_CONST, 0.0, s, -1, -1, -1, -1, -1, -1))

    def set_up_precomputed_indexes(self, step_to_segment: list[int],
                                   computation: NnetComputation) -> None:
        """Ask each component step's component for its precomputed indexes."""
        nnet = self.nnet
        computation.component_precomputed_indexes = [PrecomputedIndexesInfo()]
        for step, info in enumerate(self.steps):
            node = nnet.nodes[info.node_index]
            if node.node_type is not NodeType.COMPONENT:
                continue
            input_info = self.steps[step - 1]
            if input_info.node_index != info.node_index - 1:
                raise PynnetError("component step not preceded by its input step")
            component = nnet.components[node.component_index]
            request = self.requests[step_to_segment[step]]
            data = component.precompute_indexes(request.misc_info, input_info.output_indexes,
                                                info.output_indexes, request.need_derivatives())
            if data is None:
                info.precomputed_indexes_index = 0
                continue
            info.precomputed_indexes_index = len(computation.component_precomputed_indexes)
            # Kaldi keeps the indexes only when a shortcut expansion may need
            # them; we always keep them, so that the data can be recomputed
            # when a computation is read back from the cache.
            # (The steps' index lists are read-only and array-backed: shared.)
            computation.component_precomputed_indexes.append(PrecomputedIndexesInfo(
                data, input_info.output_indexes, info.output_indexes))

    def deallocate_matrices(self, whole_submatrices: list[int], step_to_segment: list[int],
                            computation: NnetComputation) -> None:
        """Free every matrix except outputs and requested input derivatives."""
        nnet = self.nnet
        will_destroy = [True] * len(computation.matrices)
        for step, info in enumerate(self.steps):
            request = self.requests[step_to_segment[step]]
            if nnet.is_output_node(info.node_index):
                will_destroy[computation.submatrices[info.value].matrix_index] = False
            elif nnet.is_input_node(info.node_index):
                name = nnet.node_names[info.node_index]
                matches = [io for io in request.inputs if io.name == name]
                if not matches:
                    raise PynnetError(f"input step for {name} not in the request")
                if matches[0].has_deriv:
                    will_destroy[computation.submatrices[info.deriv].matrix_index] = False
        append = computation.commands.append
        for m in range(1, len(computation.matrices)):
            if will_destroy[m]:
                append(make_command(T.DEALLOC_MATRIX, 1.0, whole_submatrices[m],
                                    -1, -1, -1, -1, -1, -1))

    # -- forward ---------------------------------------------------------------------
    def is_input_step(self, step: int) -> bool:
        if step >= len(self.steps):
            return False
        return self.nnet.nodes[self.steps[step].node_index].node_type is NodeType.INPUT

    def compile_forward(self, step: int, computation: NnetComputation) -> None:
        kind = self.nnet.nodes[self.steps[step].node_index].node_type
        if kind is NodeType.INPUT:
            self.add_forward_step_input(step, computation)
            if not self.is_input_step(step + 1):
                # keeps the forward part of the computation non-empty
                computation.commands.append(Command(T.NO_OPERATION_PERMANENT))
        elif kind is NodeType.COMPONENT:
            self.add_forward_step_component(step, computation)
        elif kind is NodeType.DESCRIPTOR:
            self.compile_forward_descriptor(step, computation)
        # dim-range steps are submatrices: nothing to do

    def add_forward_step_input(self, step: int, computation: NnetComputation) -> None:
        info = self.steps[step]
        if not computation.is_whole_matrix(info.value):
            raise PynnetError("input step value is not a whole matrix")
        kind = self.nnet.nodes[info.node_index].node_type
        if kind not in (NodeType.INPUT, NodeType.COMPONENT):
            raise PynnetError("input step of a node that is neither input nor component")
        computation.commands.append(Command(T.ACCEPT_INPUT, 1.0, info.value, info.node_index))

    def add_forward_step_component(self, step: int, computation: NnetComputation) -> None:
        info = self.steps[step]
        input_info = self.steps[step - 1]
        node = self.nnet.nodes[info.node_index]
        props = self._properties(node.component_index)
        # The step index serves as the memo index (renumbered by the optimizer).
        memo_index = step if (info.deriv > 0 and props & _P_USES_MEMO) else 0
        store_stats = 1 if (self.requests[0].store_component_stats
                            and props & _P_STORES_STATS) else 0
        computation.commands.append(Command(
            T.PROPAGATE, 1.0, node.component_index, info.precomputed_indexes_index,
            input_info.value, info.value, memo_index, store_stats))

    def compile_forward_descriptor(self, step: int, computation: NnetComputation) -> None:
        info = self.steps[step]
        for part in range(len(info.value_parts)):
            self.compile_forward_sum_descriptor(step, part, computation)
        if self.nnet.is_output_node(info.node_index):
            if not computation.is_whole_matrix(info.value):
                raise PynnetError("output step value is not a whole matrix")
            computation.commands.append(Command(T.PROVIDE_OUTPUT, 1.0, info.value,
                                                info.node_index))

    def compile_forward_sum_descriptor(self, step: int, part_index: int,
                                       computation: NnetComputation) -> None:
        info = self.steps[step]
        value_sub = info.value_parts[part_index]
        part = self.nnet.nodes[info.node_index].descriptor.part(part_index)
        offset_term = part.get_scale_for_node(-1)
        if offset_term != 0.0:
            # a Const() term; zero needs nothing (the matrix was zeroed)
            computation.commands.append(Command(T.SET_CONST, float(np.float32(offset_term)),
                                                value_sub))
        locations = info.input_locations_list[part_index]
        shared_alpha, split = split_by_scale(part, locations, self.step_node, self._scales)
        if shared_alpha - shared_alpha == 0.0:
            split = [(shared_alpha, locations)]
        for alpha, locs in split:
            compile_forward_from_step_locations(computation, value_sub, alpha, locs,
                                                self.step_value, self.step_value_list)

    # -- backward --------------------------------------------------------------------
    def compile_backward(self, step: int, computation: NnetComputation) -> None:
        kind = self.nnet.nodes[self.steps[step].node_index].node_type
        if kind is NodeType.INPUT:
            self.add_backward_step_input(step, computation)
            if not self.is_input_step(step + 1):
                computation.commands.append(Command(T.NO_OPERATION_PERMANENT))
        elif kind is NodeType.COMPONENT:
            self.add_backward_step_component(step, computation)
        elif kind is NodeType.DESCRIPTOR:
            self.compile_backward_descriptor(step, computation)

    def add_backward_step_input(self, step: int, computation: NnetComputation) -> None:
        info = self.steps[step]
        if info.deriv == 0:
            return
        if not computation.is_whole_matrix(info.deriv):
            raise PynnetError("input derivative is not a whole matrix")
        computation.commands.append(Command(T.PROVIDE_OUTPUT, 1.0, info.deriv, info.node_index))

    def add_backward_step_component(self, step: int, computation: NnetComputation) -> None:
        info = self.steps[step]
        input_info = self.steps[step - 1]
        node = self.nnet.nodes[info.node_index]
        props = self._properties(node.component_index)
        if not (info.deriv > 0 and (input_info.deriv > 0 or props & _P_UPDATABLE)):
            raise PynnetError("backprop of a component with nothing to compute")
        in_value = input_info.value if props & _P_BACKPROP_NEEDS_INPUT else 0
        out_value = info.value if props & _P_BACKPROP_NEEDS_OUTPUT else 0
        memo_index = step if props & _P_USES_MEMO else 0
        # Always kBackprop; the optimizer turns it into kBackpropNoModelUpdate
        # where the model is not being updated.
        computation.commands.append(Command(
            T.BACKPROP, 1.0, node.component_index, info.precomputed_indexes_index,
            in_value, out_value, info.deriv, input_info.deriv, memo_index))

    def compile_backward_descriptor(self, step: int, computation: NnetComputation) -> None:
        info = self.steps[step]
        if self.nnet.is_output_node(info.node_index) and info.deriv > 0:
            if not computation.is_whole_matrix(info.deriv):
                raise PynnetError("output derivative is not a whole matrix")
            computation.commands.append(Command(T.ACCEPT_INPUT, 1.0, info.deriv, info.node_index))
        for part in range(len(info.value_parts)):
            self.compile_backward_sum_descriptor(step, part, computation)

    def compile_backward_sum_descriptor(self, step: int, part_index: int,
                                        computation: NnetComputation) -> None:
        info = self.steps[step]
        deriv_sub = info.deriv_parts[part_index]
        if deriv_sub <= 0:
            raise PynnetError("backward descriptor step without a derivative")
        part = self.nnet.nodes[info.node_index].descriptor.part(part_index)
        # A Const() term has no derivative to pass back.
        locations = info.input_locations_list[part_index]
        shared_alpha, split = split_by_scale(part, locations, self.step_node, self._scales)
        if shared_alpha - shared_alpha == 0.0:
            split = [(shared_alpha, locations)]
        for alpha, locs in split:
            # (Inputs whose derivative is not needed are left out.)
            compile_backward_from_step_locations(computation, deriv_sub, alpha, locs,
                                                 self.step_deriv, self.step_deriv_list)

    # -- debug info --------------------------------------------------------------------
    def output_debug_info(self, computation: NnetComputation) -> None:
        """Which cindexes each matrix holds (for printing and checks)."""
        computation.matrix_debug_info = [MatrixDebugInfo() for _ in computation.matrices]
        # Every step's rows gathered at once; a step's list is a slice (view).
        steps = self.steps
        bounds = np.cumsum([0] + [len(info.output_cindex_ids) for info in steps]).tolist()
        all_cols = self._cindex_cols[np.concatenate([info.output_cindex_ids for info in steps])]
        for k, info in enumerate(steps):
            if info.value == 0 or not computation.is_whole_matrix(info.value):
                continue
            value_matrix = computation.submatrices[info.value].matrix_index
            deriv_matrix = 0
            if info.deriv != 0 and computation.is_whole_matrix(info.deriv):
                deriv_matrix = computation.submatrices[info.deriv].matrix_index
            dbg = computation.matrix_debug_info[value_matrix]
            dbg.is_deriv = False
            if dbg.cindexes:
                continue  # a dim-range alias covering the whole matrix
            # Array-backed (node, Index) lists, shared by the value and the
            # derivative: the tuples are made only if somebody reads them.
            dbg.cindexes = CindexList(all_cols[bounds[k]:bounds[k + 1]])
            if deriv_matrix != 0:
                ddbg = computation.matrix_debug_info[deriv_matrix]
                ddbg.is_deriv = True
                ddbg.cindexes = dbg.cindexes


def consolidate_io_operations(computation: NnetComputation) -> None:
    """Kaldi's ConsolidateIoOperations: within each marker-separated segment
    put the kAcceptInput commands first and the kProvideOutput commands last,
    keeping the order of everything else."""
    commands = computation.commands
    out: list[Command] = []
    start = 0
    for end in [i for i, c in enumerate(commands) if c.command_type is T.NO_OPERATION_MARKER] \
            + [len(commands)]:
        segment = commands[start:end]
        out.extend(c for c in segment if c.command_type is T.ACCEPT_INPUT)
        out.extend(c for c in segment
                   if c.command_type not in (T.ACCEPT_INPUT, T.PROVIDE_OUTPUT))
        out.extend(c for c in segment if c.command_type is T.PROVIDE_OUTPUT)
        if end < len(commands):
            out.append(Command(T.NO_OPERATION_MARKER))
        start = end + 1
    computation.commands = out


def compile_computation(request: ComputationRequest | Sequence[ComputationRequest], nnet: "Nnet",
                        options: CompilerOptions | None = None) -> NnetComputation:
    """Convenience: ``Compiler(request, nnet).create_computation(options)``."""
    return Compiler(request, nnet).create_computation(options)
