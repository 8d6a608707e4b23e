"""Descriptor steps as commands: where each input row of a descriptor step
comes from, and the row commands that sum it up (forward) or spread the
derivative back.

These are the parts of Kaldi's Compiler (nnet-compile.cc) that deal with one
SumDescriptor (one Append term) of a descriptor step, below
CompileForwardSumDescriptor / CompileBackwardSumDescriptor (which stay with
the Compiler's step loop in compiler.py): ComputeInputLocationsList,
SplitByScale,
Compile{Forward,Backward}From{SubmatLocationsList,SubmatLocations,Indexes}.

Locations are handled as :class:`~.split_locations.PairLists` of (step, row)
and then (submatrix, row) pairs, one list per output row, so that a part
with thousands of rows is processed by array operations.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..arraytools import sorted_unique
from ..errors import PynnetError
from ..nnet import descriptor as d
from ..nnet.index import K_NO_TIME, Index
from .computation import Command, CommandType, NnetComputation
from .graph.computation_graph import CindexSet, ComputationGraph
from ..nnet.index_lists import IndexList
from .split_locations import (PairLists, as_split, convert_to_indexes, ensure_contiguous_property,
                              has_contiguous_property, split_locations, split_locations_backward,
                              split_locations_backward_small, split_locations_small, use_lists)
from .steps_table import CindexKeys

__all__ = ["CindexTable", "compute_input_locations_list", "split_by_scale",
           "compile_forward_from_submat_locations_list", "compile_forward_from_step_locations",
           "compile_backward_from_step_locations",
           "compile_backward_from_submat_locations_list"]


class CindexTable:
    """Vectorised cindex -> cindex_id lookup over a (finished) graph.

    ``node`` and ``index`` (columns n, t, x) hold every cindex by id; lookups
    go through the steps computer's packed keys (a dense key -> id array when
    the graph is compact, else binary search).
    """

    def __init__(self, graph: ComputationGraph, num_nodes: int | None = None) -> None:
        arrays = graph.arrays()
        if num_nodes is None:
            num_nodes = int(arrays.node.max()) + 1 if len(arrays.node) else 1
        self._table = CindexKeys(arrays, num_nodes)
        self.node = self._table.node
        self.index = self._table.ntx

    def lookup(self, node: np.ndarray, n: np.ndarray, t: np.ndarray, x: np.ndarray) -> np.ndarray:
        """cindex_ids of the given cindexes (columns), -1 where absent."""
        num = len(node)
        ntx = np.empty((num, 3), dtype=np.int64)
        ntx[:, 0], ntx[:, 1], ntx[:, 2] = n, t, x
        return self._table.lookup(np.asarray(node, dtype=np.int64), ntx)


# --------------------------------------------------------------------------
# Where the inputs of a descriptor part come from.

def _forwarding_terms(part: d.SumDescriptor) -> list[tuple[Any, bool]] | None:
    """For parts that are sums of forwarding expressions (maybe wrapped in
    IfDefined) and constants: the terms ``(forwarding descriptor, optional)``;
    None for anything else (Failover, IfDefined of a sum ...)."""
    terms: list[tuple[Any, bool]] = []

    def walk(p: Any, optional: bool) -> bool:
        if type(p) is d.SimpleSumDescriptor:
            terms.append((p.src, optional))
            return True
        if type(p) is d.ConstantSumDescriptor:
            return True
        if type(p) is d.OptionalSumDescriptor and not optional \
                and type(p.src) is d.SimpleSumDescriptor:
            terms.append((p.src.src, True))
            return True
        if type(p) is d.BinarySumDescriptor and p.op == d.BinarySumDescriptor.SUM:
            return walk(p.src1, optional) and walk(p.src2, optional)
        return False

    return terms if walk(part, False) else None


_INT32_MIN = -(1 << 31)


def _wrap32(v: np.ndarray) -> np.ndarray:
    """int32 wrap-around of int64 values (Kaldi adds offsets in int32)."""
    return (v - _INT32_MIN) % (1 << 32) + _INT32_MIN


def _map_to_input(f: Any, rows: np.ndarray | slice, n: np.ndarray, t: np.ndarray,
                  x: np.ndarray, node: np.ndarray) -> bool:
    """ForwardingDescriptor.map_to_input for the ``rows`` (an index array or
    a slice) of the columns, in place (``node`` gets the source node); False
    for an unknown kind."""
    while True:
        kind = type(f)
        if kind is d.SimpleForwardingDescriptor:
            node[rows] = f.src_node
            return True
        if kind is d.OffsetForwardingDescriptor:
            o = f.offset
            n[rows] = _wrap32(n[rows] + o[0])
            t[rows] = _wrap32(t[rows] + o[1])
            x[rows] = _wrap32(x[rows] + o[2])
        elif kind is d.RoundingForwardingDescriptor:
            if f.t_modulus < 1:
                return False
            t[rows] -= t[rows] % f.t_modulus
        elif kind is d.ReplaceIndexForwardingDescriptor:
            (t if f.variable_name == "t" else x)[rows] = f.value
        elif kind is d.SwitchingForwardingDescriptor:
            if isinstance(rows, slice):
                rows = np.arange(len(t))[rows]
            which = t[rows] % len(f.src)
            return all(_map_to_input(src, rows[which == k], n, t, x, node)
                       for k, src in enumerate(f.src))
        else:
            return False
        f = f.src


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
    terms = _forwarding_terms(part) if use_fast_path else None
    if terms is not None:
        ans = _input_locations_fast(terms, output_index_array, table, loc_step, loc_row)
        if ans is not None:
            return ans
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


def compute_input_locations_lists(jobs: Sequence[tuple[d.SumDescriptor, np.ndarray]],
                                  graph: ComputationGraph, table: CindexTable,
                                  loc_step: np.ndarray, loc_row: np.ndarray,
                                  use_fast_path: bool = True,
                                  term_cache: dict | None = None) -> list[PairLists]:
    """:func:`compute_input_locations_list` for many (part, output index
    array) jobs at once: the forwarding terms of all of them are looked up
    in one go (a network has a hundred descriptor parts; one lookup each
    would cost more than the lookups themselves), and the parts that are
    sums of plain offsets are mapped together too.  ``term_cache`` (kept
    per network by the caller) remembers each part's offsets."""
    ans: list[PairLists | None] = [None] * len(jobs)
    # (job, row, node, n, t, x, optional) of every term of every fast job.
    cols: list[list[np.ndarray]] = [[] for _ in range(6)]
    optional_flags: list[np.ndarray] = []
    fast_jobs: list[int] = []
    # Jobs whose terms are all plain offsets (nearly all) are mapped together.
    offset_jobs: list[tuple[int, np.ndarray]] = []
    for j, (part, out_idx) in enumerate(jobs):
        if use_fast_path:
            table_j = _offset_terms_cached(part, term_cache)
            if table_j is not None:
                offset_jobs.append((j, table_j))
                fast_jobs.append(j)
                continue
        terms = _forwarding_terms(part) if use_fast_path else None
        mapped = _map_terms(terms, out_idx) if terms is not None else None
        if mapped is None:
            ans[j] = compute_input_locations_list(part, IndexList(out_idx.astype(np.int32)),
                                                  out_idx, graph, table, loc_step, loc_row,
                                                  use_fast_path=False)
            continue
        fast_jobs.append(j)
        for row, node, n, t, x, optional in mapped:
            for c, v in zip(cols, (np.full(len(row), j, dtype=np.int64), row, node, n, t, x)):
                c.append(v)
            optional_flags.append(np.full(len(row), optional, dtype=bool))
    if not fast_jobs:
        return ans  # type: ignore[return-value]
    if offset_jobs:
        mapped = _map_offset_jobs(offset_jobs, jobs)
        for c, v in zip(cols, mapped[:6]):
            c.append(v)
        optional_flags.append(mapped[6])
    job, row, node, n, t, x = (np.concatenate(c) if c else np.zeros(0, dtype=np.int64)
                               for c in cols)
    optional = np.concatenate(optional_flags) if optional_flags else np.zeros(0, dtype=bool)
    found = table.lookup(node, n, t, x)
    present = found >= 0
    if not (present | optional).all():
        raise PynnetError("descriptor input not in the computation graph "
                          "(earlier compilation stages should have ensured it)")
    job, row, node, n, t, x, found = (a[present] for a in (job, row, node, n, t, x, found))
    # Jobs, then rows in order; inside a row, Kaldi's Cindex order (node,
    # t, x, n), equal cindexes in the order of the terms (a stable sort).
    order = np.lexsort((n, x, t, node, row, job))
    job, row, found = job[order], row[order], found[order]
    pairs = np.stack([loc_step[found], loc_row[found]], axis=1)
    # Every job's row_ptr from one count over all jobs' rows (the pairs are
    # in job, then row order).
    num_rows = [len(out_idx) for _, out_idx in jobs]
    first_row = np.zeros(len(jobs) + 1, dtype=np.int64)
    np.cumsum(num_rows, out=first_row[1:])
    ptr = np.zeros(int(first_row[-1]) + 1, dtype=np.int64)
    np.cumsum(np.bincount(first_row[job] + row, minlength=len(ptr) - 1), out=ptr[1:])
    starts = first_row.tolist()
    for j in fast_jobs:
        row_ptr = ptr[starts[j]:starts[j + 1] + 1]
        lo, hi = int(row_ptr[0]), int(row_ptr[-1])
        ans[j] = PairLists.trusted(row_ptr - lo, pairs[lo:hi])
    return ans  # type: ignore[return-value]


def _offset_terms(part: d.SumDescriptor) -> np.ndarray | None:
    """For a part that is a sum of plain offset terms (``node``,
    ``Offset(node, ...)``, maybe in IfDefined) and constants: a row per term,
    (source node, dn, dt, dx, optional); None otherwise."""
    terms = _forwarding_terms(part)
    if terms is None:
        return None
    rows = []
    for f, optional in terms:
        dn = dt = dx = 0
        while type(f) is d.OffsetForwardingDescriptor:
            o = f.offset
            dn, dt, dx = dn + int(o[0]), dt + int(o[1]), dx + int(o[2])
            f = f.src
        if type(f) is not d.SimpleForwardingDescriptor:
            return None
        rows.append((f.src_node, dn, dt, dx, optional))
    return np.array(rows, dtype=np.int64).reshape(len(rows), 5)


def _offset_terms_cached(part: d.SumDescriptor, cache: dict | None) -> np.ndarray | None:
    if cache is None:
        return _offset_terms(part)
    hit = cache.get(id(part))
    if hit is None or hit[0] is not part:
        # (The part is kept so that its id is not reused while cached.)
        hit = cache[id(part)] = (part, _offset_terms(part))
    return hit[1]


def _map_offset_jobs(offset_jobs: list[tuple[int, np.ndarray]],
                     jobs: Sequence[tuple[d.SumDescriptor, np.ndarray]]
                     ) -> tuple[np.ndarray, ...]:
    """(job, row, node, n, t, x, optional) of every term of every output row
    (t not kNoTime) of jobs whose terms are plain offsets, all at once; the
    n, t, x offsets are added in int32 arithmetic as _map_to_input does."""
    job_ids = np.array([j for j, _ in offset_jobs], dtype=np.int64)
    num_rows = np.array([len(jobs[j][1]) for j, _ in offset_jobs], dtype=np.int64)
    num_terms = np.array([len(tab) for _, tab in offset_jobs], dtype=np.int64)
    out = np.concatenate([jobs[j][1] for j, _ in offset_jobs]).astype(np.int64, copy=False)
    terms = np.concatenate([tab for _, tab in offset_jobs])
    which = np.repeat(np.arange(len(offset_jobs), dtype=np.int64), num_rows)
    row = np.arange(len(out), dtype=np.int64) - np.repeat(np.cumsum(num_rows) - num_rows,
                                                          num_rows)
    real = np.flatnonzero(out[:, 1] != K_NO_TIME)
    if len(real) < len(out):
        which, row, out = which[real], row[real], out[real]
    # Each real row once per term of its job, the terms in order.
    counts = num_terms[which]
    parent = np.repeat(np.arange(len(row), dtype=np.int64), counts)
    term_start = np.cumsum(num_terms) - num_terms
    starts = np.cumsum(counts) - counts
    term = np.arange(int(counts.sum()), dtype=np.int64) - starts[parent] \
        + term_start[which[parent]]
    mapped = out[parent] + terms[term, 1:4]
    if mapped.size and (mapped.min() < _INT32_MIN or mapped.max() > -_INT32_MIN - 1):
        mapped = _wrap32(mapped)
    return (job_ids[which[parent]], row[parent], terms[term, 0], mapped[:, 0], mapped[:, 1],
            mapped[:, 2], terms[term, 4].astype(bool))


def _map_terms(terms: list[tuple[Any, bool]], out_idx: np.ndarray
               ) -> list[tuple[np.ndarray, ...]] | None:
    """Per term: (rows, node, n, t, x, optional) of the input cindex of each
    output row whose t is not kNoTime; None for a term kind not known."""
    blank = out_idx[:, 1] == K_NO_TIME
    if blank.any():
        real = np.flatnonzero(~blank)
        base = out_idx[real].T.astype(np.int64, order="C")
    else:
        real = np.arange(out_idx.shape[0])
        base = out_idx.T.astype(np.int64, order="C")
    out = []
    everything = slice(None)
    for k, (f, optional) in enumerate(terms):
        # (_map_to_input works in place; the last term may use base itself.)
        ntx = base if k == len(terms) - 1 else base.copy()
        node = np.zeros(len(real), dtype=np.int64)
        if not _map_to_input(f, everything, ntx[0], ntx[1], ntx[2], node):
            return None
        out.append((real, node, ntx[0], ntx[1], ntx[2], optional))
    return out


def _input_locations_fast(terms: list[tuple[Any, bool]], out_idx: np.ndarray,
                          table: CindexTable, loc_step: np.ndarray,
                          loc_row: np.ndarray) -> PairLists | None:
    """The same for a sum of forwarding terms, as array operations (None if
    a term is of a kind this does not know)."""
    num_rows = out_idx.shape[0]
    real = np.flatnonzero(out_idx[:, 1] != K_NO_TIME)
    parts: list[tuple[np.ndarray, ...]] = []   # (row, node, n, t, x, cindex_id) per term
    for f, optional in terms:
        n, t, x = (out_idx[real, k].astype(np.int64) for k in range(3))
        node = np.zeros(len(real), dtype=np.int64)
        if not _map_to_input(f, np.arange(len(real)), n, t, x, node):
            return None
        found = table.lookup(node, n, t, x)
        present = found >= 0
        if not optional and not present.all():
            raise PynnetError("descriptor input not in the computation graph "
                              "(earlier compilation stages should have ensured it)")
        parts.append((real[present], node[present], n[present], t[present], x[present],
                      found[present]))
    if not parts:
        return PairLists.from_row_ids(num_rows, np.zeros(0, dtype=np.int64),
                                      np.zeros((0, 2), dtype=np.int64))
    row, node, n, t, x, ids = (np.concatenate(c) for c in zip(*parts))
    # Rows in order; inside a row, Kaldi's Cindex order (node, t, x, n),
    # equal cindexes in the order of the terms (a stable sort).
    order = np.lexsort((n, x, t, node, row))
    flat = ids[order]
    pairs = np.stack([loc_step[flat], loc_row[flat]], axis=1)
    return PairLists.from_row_ids(num_rows, row[order], pairs)


def _scales_of_part(part: d.SumDescriptor) -> dict[float, list[int]]:
    """alpha -> the nodes of the part with that scale (sorted)."""
    nodes = sorted(set(part.get_node_dependencies([])))
    alpha_to_nodes: dict[float, list[int]] = {}
    for node in nodes:
        alpha = float(np.float32(part.get_scale_for_node(node)))
        if alpha - alpha != 0.0:
            raise PynnetError(f"descriptor part has no finite scale for node {node}")
        alpha_to_nodes.setdefault(alpha, []).append(node)
    return alpha_to_nodes


def split_by_scale(part: d.SumDescriptor, locations: PairLists, step_node: np.ndarray,
                   cache: dict[int, tuple[Any, dict[float, list[int]]]] | None = None
                   ) -> tuple[float, list[tuple[float, PairLists]]]:
    """Kaldi's SplitByScale.

    If every node of the part has the same scale, ``(scale, [])``; otherwise
    ``(inf, [(alpha, locations with only that alpha's terms), ...])`` in
    increasing alpha.  ``step_node[s]`` is the node of step s.  ``cache``
    (id(part) -> scales) saves walking the descriptor again for each step.
    """
    hit = cache.get(id(part)) if cache is not None else None
    if hit is not None and hit[0] is part:
        alpha_to_nodes = hit[1]
    else:
        alpha_to_nodes = _scales_of_part(part)
        if cache is not None:
            cache[id(part)] = (part, alpha_to_nodes)
    if len(alpha_to_nodes) == 1:
        return next(iter(alpha_to_nodes)), []
    if locations.pairs.shape[0] == 0:
        return float("inf"), [(a, locations) for a in sorted(alpha_to_nodes)]
    node_of_pair = step_node[locations.pairs[:, 0]]
    alphas = sorted(alpha_to_nodes)
    # Which alpha each node has (-1: not in the part), then per pair.
    alpha_of_node = np.full(int(max(node_of_pair.max(), max(max(v) for v in
                                                            alpha_to_nodes.values()))) + 1,
                            -1, dtype=np.int64)
    for k, alpha in enumerate(alphas):
        alpha_of_node[alpha_to_nodes[alpha]] = k
    which = alpha_of_node[node_of_pair]
    if np.any(which < 0):
        raise PynnetError("split_by_scale: an input step's node is not in the descriptor")
    ans = [(alpha, locations.select(which == k)) for k, alpha in enumerate(alphas)]
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


def _single_source_rows(lists: PairLists) -> tuple[int, np.ndarray] | None:
    """(source, row of each output row) when every row has exactly one pair
    and all pairs share their first member -- the usual descriptor part: the
    split lists are then just that one list."""
    pairs = lists.pairs
    num = pairs.shape[0]
    if num == 0 or num != lists.num_rows or int(lists.lengths().max()) != 1:
        return None
    first = pairs[:, 0]
    source = int(first[0])
    if source < 0 or int(first.min()) != int(first.max()):
        return None
    return source, pairs[:, 1].astype(np.int32)



def compile_forward_from_step_locations(computation: NnetComputation, value_submatrix: int,
                                        alpha: float, step_lists: PairLists,
                                        step_value: np.ndarray,
                                        step_value_list: Sequence[int]) -> None:
    """compile_forward_from_submat_locations_list of (step, row) locations,
    mapped to (submatrix, row) through ``step_value`` (the same as a list)."""
    if use_lists(step_lists):
        # A few rows (a recurrent layer's step per frame): the same decisions
        # on Python lists, which beats a dozen NumPy calls on tiny arrays.
        for split in split_locations_small(step_lists.to_lists_mapped(step_value_list)):
            _compile_forward_small(computation, value_submatrix, alpha, split)
        return
    # The usual part (one input row from one step each): steps have distinct
    # value submatrices, so that is decided on the (step, row) pairs as well.
    single = _single_source_rows(step_lists)
    if single is not None:
        compile_forward_from_indexes(computation, value_submatrix,
                                     step_value_list[single[0]], alpha, single[1])
        return
    compile_forward_from_submat_locations_list(computation, value_submatrix, alpha,
                                               step_lists.map_first(step_value))


def compile_forward_from_submat_locations_list(computation: NnetComputation,
                                               value_submatrix: int, alpha: float,
                                               submat_lists: PairLists) -> None:
    if use_lists(submat_lists):
        for split in split_locations_small(submat_lists.to_lists()):
            _compile_forward_small(computation, value_submatrix, alpha, split)
        return
    single = _single_source_rows(submat_lists)
    if single is not None:
        compile_forward_from_indexes(computation, value_submatrix, single[0], alpha, single[1])
        return
    for split in split_locations(submat_lists):
        compile_forward_from_submat_locations(computation, value_submatrix, alpha, split)


def _compile_forward_small(computation: NnetComputation, value_submatrix: int, alpha: float,
                           split: list[tuple[int, int]]) -> None:
    """compile_forward_from_submat_locations (and ..._from_indexes) on a list."""
    firsts = {s for s, _ in split if s != -1}
    if len(firsts) != 1:
        # Several sources (AddRowsMulti), or none at all (the array code's answer).
        compile_forward_from_submat_locations(computation, value_submatrix, alpha,
                                              as_split(split))
        return
    (source,) = firsts
    indexes = [r if s != -1 else -1 for s, r in split]
    num_rows = len(indexes)
    if computation.submatrices[source].num_rows == num_rows \
            and indexes == list(range(num_rows)):
        computation.commands.append(Command(CommandType.MATRIX_ADD, alpha, value_submatrix,
                                            source))
        return
    k = computation.add_indexes(np.array(indexes, dtype=np.int32))
    computation.commands.append(Command(CommandType.ADD_ROWS, alpha, value_submatrix, source, k))


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
        if sorted_unique(used).shape[0] == used.shape[0]:
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
    if sorted_unique(keys).shape[0] != keys.shape[0]:
        raise PynnetError("backprop through this descriptor is not supported "
                          "(repeated rows from several matrices)")
    k = computation.add_indexes_multi(submat_locations)
    computation.commands.append(Command(CommandType.ADD_TO_ROWS_MULTI, alpha, deriv_submatrix, k))


def compile_backward_from_submat_locations_list(computation: NnetComputation,
                                                deriv_submatrix: int, alpha: float,
                                                submat_lists: PairLists) -> None:
    single = _single_source_rows(submat_lists)
    if single is not None and len(ensure_contiguous_property(single[1])) == 1:
        # (What split_locations_backward leaves of it: the one list, whole.)
        compile_backward_from_indexes(computation, deriv_submatrix, single[0], alpha, single[1])
        return
    for split in split_locations_backward(submat_lists):
        compile_backward_from_submat_locations(computation, deriv_submatrix, alpha, split)


def compile_backward_from_step_locations(computation: NnetComputation, deriv_submatrix: int,
                                         alpha: float, step_lists: PairLists,
                                         step_deriv: np.ndarray,
                                         step_deriv_list: Sequence[int]) -> None:
    """compile_backward_from_submat_locations_list of (step, row) locations,
    mapped to (derivative submatrix, row) through ``step_deriv``; inputs whose
    derivative is not needed (submatrix 0) are left out."""
    if use_lists(step_lists):
        rows = [[p for p in row if p[0] > 0]
                for row in step_lists.to_lists_mapped(step_deriv_list)]
        for split in split_locations_backward_small(rows):
            _compile_backward_small(computation, deriv_submatrix, alpha, split)
        return
    # The usual part: every row from one step (see the forward version).
    single = _single_source_rows(step_lists)
    if single is not None and step_deriv_list[single[0]] > 0 \
            and len(ensure_contiguous_property(single[1])) == 1:
        compile_backward_from_indexes(computation, deriv_submatrix,
                                      step_deriv_list[single[0]], alpha, single[1])
        return
    mapped = step_lists.map_first(step_deriv)
    if mapped.pairs.shape[0]:
        keep = mapped.pairs[:, 0] > 0
        if not keep.all():
            mapped = mapped.select(keep)
    compile_backward_from_submat_locations_list(computation, deriv_submatrix, alpha, mapped)


def _compile_backward_small(computation: NnetComputation, deriv_submatrix: int, alpha: float,
                            split: list[tuple[int, int]]) -> None:
    """compile_backward_from_submat_locations on a list: the MatrixAdd and
    reversed-AddRows cases in Python, anything else by the array code."""
    firsts = {s for s, _ in split if s != -1}
    if len(firsts) != 1:
        compile_backward_from_submat_locations(computation, deriv_submatrix, alpha,
                                               as_split(split))
        return
    (source,) = firsts
    indexes = [r if s != -1 else -1 for s, r in split]
    num_rows = computation.submatrices[deriv_submatrix].num_rows
    input_num_rows = computation.submatrices[source].num_rows
    if len(indexes) == num_rows and min(indexes) >= -1 and max(indexes) < input_num_rows:
        if input_num_rows == num_rows and indexes == list(range(num_rows)):
            computation.commands.append(Command(CommandType.MATRIX_ADD, alpha, source,
                                                deriv_submatrix))
            return
        used = [i for i in indexes if i >= 0]
        if input_num_rows >= num_rows and len(set(used)) == len(used):
            reverse = [-1] * input_num_rows
            for pos, i in enumerate(indexes):
                if i >= 0:
                    reverse[i] = pos
            k = computation.add_indexes(np.array(reverse, dtype=np.int32))
            computation.commands.append(Command(CommandType.ADD_ROWS, alpha, source,
                                                deriv_submatrix, k))
            return
    # AddRowRanges, or the errors: the array code decides.
    compile_backward_from_indexes(computation, deriv_submatrix, source, alpha,
                                  np.array(indexes, dtype=np.int32))
