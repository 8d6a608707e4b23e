"""The Descriptor part of the compiler: where each input row comes from, and
the row commands that sum it up (forward) or spread the derivative back.

Split out of compiler.py; these are the parts of Kaldi's Compiler
(nnet-compile.cc) that deal with one SumDescriptor (one Append term) of a
descriptor step: ComputeInputLocationsList, SplitByScale,
Compile{Forward,Backward}From{SubmatLocationsList,SubmatLocations,Indexes}.

Locations are handled as :class:`~.compile_utils.PairLists` of (step, row)
and then (submatrix, row) pairs, one list per output row, so that a part
with thousands of rows is processed by array operations.
"""
from __future__ import annotations

from itertools import chain
from operator import itemgetter
from typing import Any, Sequence

import numpy as np

from ..errors import PynnetError
from ..nnet import descriptor as d
from ..nnet.index import K_NO_TIME, Index
from .compile_utils import (PairLists, convert_to_indexes, has_contiguous_property,
                            split_locations, split_locations_backward)
from .computation import Command, CommandType, NnetComputation
from .graph_types import CindexSet, ComputationGraph

__all__ = ["CindexTable", "compute_input_locations_list", "split_by_scale",
           "compile_forward_from_submat_locations_list",
           "compile_backward_from_submat_locations_list"]


class CindexTable:
    """Vectorised cindex -> cindex_id lookup over a (finished) graph.

    Each column (n, t, x) is replaced by its rank among the values present,
    so that a cindex packs into one int64 key; lookups are binary searches.
    """

    def __init__(self, graph: ComputationGraph) -> None:
        cindexes = graph.cindexes
        num = len(cindexes)
        self.node = np.fromiter(map(itemgetter(0), cindexes), dtype=np.int64, count=num)
        self.index = np.fromiter(chain.from_iterable(map(itemgetter(1), cindexes)),
                                 dtype=np.int64, count=3 * num).reshape(num, 3)
        self._cols = [np.unique(self.index[:, k]) for k in range(3)]
        self._sizes = [max(len(c), 1) for c in self._cols]
        num_nodes = int(self.node.max()) + 1 if num else 1
        self._packable = float(num_nodes) * np.prod([float(s) for s in self._sizes]) < 2.0 ** 62
        if self._packable:
            keys = self._keys(self.node, self.index[:, 0], self.index[:, 1], self.index[:, 2])
            self._order = np.argsort(keys, kind="stable")
            self._sorted_keys = keys[self._order]
        else:  # absurdly spread indexes: fall back to the graph's dict
            self._ids = graph._cindex_to_id

    def _keys(self, node: np.ndarray, n: np.ndarray, t: np.ndarray, x: np.ndarray) -> np.ndarray:
        """Packed keys; -1 where some value is not present in the graph at all."""
        key = np.asarray(node, dtype=np.int64).copy()
        missing = np.zeros(key.shape[0], dtype=bool)
        for col, size, vals in zip(self._cols, self._sizes, (n, t, x)):
            vals = np.asarray(vals, dtype=np.int64)
            rank = np.searchsorted(col, vals)
            rank_c = np.minimum(rank, len(col) - 1) if len(col) else rank
            missing |= (rank >= len(col)) | (col[rank_c] != vals if len(col) else True)
            key = key * size + np.where(missing, 0, rank)
        key[missing] = -1
        return key

    def lookup(self, node: np.ndarray, n: np.ndarray, t: np.ndarray, x: np.ndarray) -> np.ndarray:
        """cindex_ids of the given cindexes (columns), -1 where absent."""
        if not self._packable:
            ids = self._ids
            return np.array([ids.get((int(a), Index(int(b), int(c), int(e))), -1)
                             for a, b, c, e in zip(node, n, t, x)], dtype=np.int64)
        keys = self._keys(node, n, t, x)
        pos = np.searchsorted(self._sorted_keys, keys)
        pos_c = np.minimum(pos, len(self._sorted_keys) - 1)
        found = (keys >= 0) & (pos < len(self._sorted_keys))
        if len(self._sorted_keys):
            found &= self._sorted_keys[pos_c] == keys
        return np.where(found, self._order[pos_c] if len(self._order) else -1, -1)


# --------------------------------------------------------------------------
# Where the inputs of a descriptor part come from.

def _offset_terms(part: d.SumDescriptor) -> list[tuple[int, int, int, int, bool]] | None:
    """For parts made of node references shifted by constant offsets, summed
    and maybe wrapped in IfDefined: the terms ``(node, dn, dt, dx, optional)``;
    None for anything else (Failover, Round, ReplaceIndex, Switch ...)."""
    terms: list[tuple[int, int, int, int, bool]] = []

    def forwarding(f: Any, optional: bool) -> bool:
        dn = dt = dx = 0
        while isinstance(f, d.OffsetForwardingDescriptor):
            dn += f.offset[0]
            dt += f.offset[1]
            dx += f.offset[2]
            f = f.src
        if type(f) is d.SimpleForwardingDescriptor:
            terms.append((f.src_node, dn, dt, dx, optional))
            return True
        return False

    def walk(p: Any, optional: bool) -> bool:
        if type(p) is d.SimpleSumDescriptor:
            return forwarding(p.src, optional)
        if type(p) is d.ConstantSumDescriptor:
            return True
        if type(p) is d.OptionalSumDescriptor and not optional \
                and type(p.src) is d.SimpleSumDescriptor:
            return forwarding(p.src.src, True)
        if type(p) is d.BinarySumDescriptor and p.op == d.BinarySumDescriptor.SUM:
            return walk(p.src1, optional) and walk(p.src2, optional)
        return False

    return terms if walk(part, False) else None


def compute_input_locations_list(part: d.SumDescriptor, output_indexes: Sequence[Index],
                                 output_index_array: np.ndarray, graph: ComputationGraph,
                                 table: CindexTable, loc_step: np.ndarray,
                                 loc_row: np.ndarray, use_fast_path: bool = True) -> PairLists:
    """Kaldi's ComputeInputLocationsList for one part of a descriptor step.

    For each output row, the (step, row) locations of the inputs it sums,
    ordered as the input cindexes sort in Kaldi (node, then t, x, n); rows
    whose t is kNoTime (padding rows of non-simple components) get none.
    """
    num_rows = len(output_indexes)
    terms = _offset_terms(part) if use_fast_path else None
    if terms is not None:
        return _input_locations_fast(terms, output_index_array, table, loc_step, loc_row)
    cindex_set = CindexSet(graph)
    get_id = graph.get_cindex_id
    row_ids: list[int] = []
    ids: list[int] = []
    for r, index in enumerate(output_indexes):
        if index[1] == K_NO_TIME:
            continue
        used: list = []
        if not part.is_computable(index, cindex_set, used):
            raise PynnetError(f"descriptor input for index {index} is not computable "
                              "(earlier compilation stages should have ensured this)")
        used.sort(key=lambda c: (c[0], c[1][1], c[1][2], c[1][0]))
        for c in used:
            cid = get_id(c)
            if cid == -1:
                raise PynnetError(f"descriptor input {c} is not in the computation graph")
            ids.append(cid)
            row_ids.append(r)
    id_arr = np.asarray(ids, dtype=np.int64)
    pairs = np.stack([loc_step[id_arr], loc_row[id_arr]], axis=1) if ids else \
        np.zeros((0, 2), dtype=np.int64)
    return PairLists.from_row_ids(num_rows, np.asarray(row_ids, dtype=np.int64), pairs)


def _input_locations_fast(terms: list[tuple[int, int, int, int, bool]],
                          out_idx: np.ndarray, table: CindexTable,
                          loc_step: np.ndarray, loc_row: np.ndarray) -> PairLists:
    num_rows = out_idx.shape[0]
    # The order of the terms' cindexes in a row is the same for every row
    # (Kaldi's Cindex order: node, then t, x, n offsets).
    terms = sorted(terms, key=lambda tm: (tm[0], tm[2], tm[3], tm[1]))
    real = out_idx[:, 1] != K_NO_TIME
    ids = np.full((num_rows, len(terms)), -1, dtype=np.int64)
    for k, (node, dn, dt, dx, optional) in enumerate(terms):
        found = table.lookup(np.full(num_rows, node, dtype=np.int64), out_idx[:, 0] + dn,
                             out_idx[:, 1] + dt, out_idx[:, 2] + dx)
        if not optional and np.any((found < 0) & real):
            raise PynnetError("descriptor input not in the computation graph "
                              "(earlier compilation stages should have ensured it)")
        ids[:, k] = np.where(real, found, -1)
    present = ids >= 0
    row_ids = np.nonzero(present)[0]   # row-major: rows in order, terms in order
    flat = ids[present]
    pairs = np.stack([loc_step[flat], loc_row[flat]], axis=1)
    return PairLists.from_row_ids(num_rows, row_ids, pairs)


def split_by_scale(part: d.SumDescriptor, locations: PairLists,
                   step_node: np.ndarray) -> tuple[float, list[tuple[float, PairLists]]]:
    """Kaldi's SplitByScale.

    If every node of the part has the same scale, ``(scale, [])``; otherwise
    ``(inf, [(alpha, locations with only that alpha's terms), ...])`` in
    increasing alpha.  ``step_node[s]`` is the node of step s.
    """
    nodes = sorted(set(part.get_node_dependencies([])))
    alpha_to_nodes: dict[float, list[int]] = {}
    for node in nodes:
        alpha = float(np.float32(part.get_scale_for_node(node)))
        if alpha - alpha != 0.0:
            raise PynnetError(f"descriptor part has no finite scale for node {node}")
        alpha_to_nodes.setdefault(alpha, []).append(node)
    if len(alpha_to_nodes) == 1:
        return next(iter(alpha_to_nodes)), []
    if locations.pairs.shape[0] == 0:
        return float("inf"), [(a, locations) for a in sorted(alpha_to_nodes)]
    node_of_pair = step_node[locations.pairs[:, 0]]
    which = np.full(node_of_pair.shape[0], -1, dtype=np.int64)
    ans = []
    alphas = sorted(alpha_to_nodes)
    for k, alpha in enumerate(alphas):
        which[np.isin(node_of_pair, alpha_to_nodes[alpha])] = k
    if np.any(which < 0):
        raise PynnetError("split_by_scale: an input step's node is not in the descriptor")
    for k, alpha in enumerate(alphas):
        ans.append((alpha, locations.select(which == k)))
    return float("inf"), ans


# --------------------------------------------------------------------------
# Forward: value rows = sums of source rows.

def compile_forward_from_indexes(computation: NnetComputation, value_submatrix: int,
                                 input_submatrix: int, alpha: float,
                                 indexes: np.ndarray) -> None:
    """Kaldi's CompileForwardFromIndexes: MatrixAdd if the rows map one to
    one, else AddRows."""
    num_rows = indexes.shape[0]
    if computation.submatrices[input_submatrix].num_rows == num_rows \
            and np.array_equal(indexes, np.arange(num_rows)):
        computation.commands.append(Command(CommandType.MATRIX_ADD, alpha,
                                            value_submatrix, input_submatrix))
        return
    k = computation.add_indexes(indexes)
    computation.commands.append(Command(CommandType.ADD_ROWS, alpha, value_submatrix,
                                        input_submatrix, k))


def compile_forward_from_submat_locations(computation: NnetComputation, value_submatrix: int,
                                          alpha: float, submat_locations: np.ndarray) -> None:
    """One split list: AddRows/MatrixAdd from one source, else AddRowsMulti."""
    conv = convert_to_indexes(submat_locations)
    if conv is not None:
        compile_forward_from_indexes(computation, value_submatrix, conv[0], alpha, conv[1])
        return
    k = computation.add_indexes_multi(submat_locations)
    computation.commands.append(Command(CommandType.ADD_ROWS_MULTI, alpha, value_submatrix, k))


def compile_forward_from_submat_locations_list(computation: NnetComputation,
                                               value_submatrix: int, alpha: float,
                                               submat_lists: PairLists) -> None:
    for split in split_locations(submat_lists):
        compile_forward_from_submat_locations(computation, value_submatrix, alpha, split)


# --------------------------------------------------------------------------
# Backward: input-derivative rows += derivative rows of what they fed.

def compile_backward_from_indexes(computation: NnetComputation, deriv_submatrix: int,
                                  input_deriv_submatrix: int, alpha: float,
                                  indexes: np.ndarray) -> None:
    """Kaldi's CompileBackwardFromIndexes: MatrixAdd, or AddRows with the
    reversed map when no input row is used twice, or AddRowRanges when the
    rows using each input row are contiguous."""
    num_rows = computation.submatrices[deriv_submatrix].num_rows
    input_num_rows = computation.submatrices[input_deriv_submatrix].num_rows
    if indexes.shape[0] != num_rows:
        raise PynnetError("compile_backward_from_indexes: size mismatch")
    if input_num_rows == num_rows and np.array_equal(indexes, np.arange(num_rows)):
        computation.commands.append(Command(CommandType.MATRIX_ADD, alpha,
                                            input_deriv_submatrix, deriv_submatrix))
        return
    if np.any((indexes < -1) | (indexes >= input_num_rows)):
        raise PynnetError("compile_backward_from_indexes: index out of range")
    if input_num_rows >= num_rows:
        valid = indexes >= 0
        used = indexes[valid]
        if np.unique(used).shape[0] == used.shape[0]:
            reverse = np.full(input_num_rows, -1, dtype=np.int32)
            reverse[used] = np.nonzero(valid)[0]
            k = computation.add_indexes(reverse)
            computation.commands.append(Command(CommandType.ADD_ROWS, alpha,
                                                input_deriv_submatrix, deriv_submatrix, k))
            return
    ok, ranges = has_contiguous_property(indexes)
    if ok:
        if ranges.shape[0] != input_num_rows:
            pad = np.full((input_num_rows - ranges.shape[0], 2), -1, dtype=np.int32)
            ranges = np.concatenate([ranges, pad], axis=0)
        k = computation.add_indexes_ranges(ranges)
        computation.commands.append(Command(CommandType.ADD_ROW_RANGES, alpha,
                                            input_deriv_submatrix, deriv_submatrix, k))
        return
    # Kaldi stops here too ("This case not implemented yet"); split_locations_backward
    # is meant to make it unreachable.
    raise PynnetError("backprop through this descriptor is not supported "
                      "(repeated, non-contiguous input rows)")


def compile_backward_from_submat_locations(computation: NnetComputation, deriv_submatrix: int,
                                           alpha: float, submat_locations: np.ndarray) -> None:
    conv = convert_to_indexes(submat_locations)
    if conv is not None:
        compile_backward_from_indexes(computation, deriv_submatrix, conv[0], alpha, conv[1])
        return
    # Several source matrices.  Kaldi means to require that no (submatrix,
    # row) repeats (AddToRowsMulti would race on a GPU), but its check looks
    # at an empty vector and always passes; split_locations_backward already
    # guarantees it, so we check for real.
    valid = submat_locations[:, 0] != -1
    keys = submat_locations[valid].astype(np.int64)
    keys = keys[:, 0] * (1 << 32) + keys[:, 1]
    if np.unique(keys).shape[0] != keys.shape[0]:
        raise PynnetError("backprop through this descriptor is not supported "
                          "(repeated rows from several matrices)")
    k = computation.add_indexes_multi(submat_locations)
    computation.commands.append(Command(CommandType.ADD_TO_ROWS_MULTI, alpha, deriv_submatrix, k))


def compile_backward_from_submat_locations_list(computation: NnetComputation,
                                                deriv_submatrix: int, alpha: float,
                                                submat_lists: PairLists) -> None:
    for split in split_locations_backward(submat_lists):
        compile_backward_from_submat_locations(computation, deriv_submatrix, alpha, split)
