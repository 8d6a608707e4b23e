"""Kaldi's ComputationGraph: cindexes, their ids and their dependencies.

Also the membership tests (CindexSet, IndexSet) that Descriptors and
Components use while the builder (:mod:`.builder`) works out what is computable.
"""
from __future__ import annotations

import enum
from itertools import chain, repeat
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from ...errors import PynnetError
from ...nnet.index import Index
from ...nnet.index_lists import gc_paused


class ComputableInfo(enum.IntEnum):
    """Kaldi's ComputableInfo; the builder stores the plain ints below."""

    UNKNOWN = 0
    COMPUTABLE = 1
    NOT_COMPUTABLE = 2
    WILL_NOT_COMPUTE = 3


# ComputableInfo values (Kaldi's enum, same numbers).
K_UNKNOWN = 0
K_COMPUTABLE = 1
K_NOT_COMPUTABLE = 2
K_WILL_NOT_COMPUTE = 3

_TUPLE_NEW = tuple.__new__


_INFO_NAMES = {K_UNKNOWN: "kUnknown", K_COMPUTABLE: "kComputable",
               K_NOT_COMPUTABLE: "kNotComputable"}


def computable_info_name(info: int) -> str:
    """How Kaldi's operator<< prints a ComputableInfo."""
    return _INFO_NAMES.get(info, "[invalid enum value]")


def print_cindex(cindex: Sequence, node_names: Sequence[str]) -> str:
    """Kaldi's PrintCindex: ``name(n,t)`` or ``name(n,t,x)``."""
    node, (n, t, x) = cindex
    return f"{node_names[node]}({n},{t})" if x == 0 else f"{node_names[node]}({n},{t},{x})"


class GraphArrays(NamedTuple):
    """A whole ComputationGraph as NumPy columns (see ComputationGraph.arrays()).

    ``node, n, t, x``: int32 columns of the cindexes, by cindex_id;
    ``is_input``: bool; the dependencies of cindex_id ``c`` are
    ``dep_flat[dep_offsets[c]:dep_offsets[c + 1]]`` (int64 offsets, int32
    ids, each row sorted where the builder sorted it).
    """

    node: np.ndarray
    n: np.ndarray
    t: np.ndarray
    x: np.ndarray
    is_input: np.ndarray
    dep_offsets: np.ndarray
    dep_flat: np.ndarray


class ComputationGraph:
    """cindex_id <-> cindex maps, input flags, dependencies and segment ends.

    The attributes ``cindexes`` (list of ``(node, Index)``), ``is_input``,
    ``dependencies`` (list of lists) and the dict behind get_cindex_id are
    plain Python lists.  A graph made by the vectorised builder is held as
    :class:`GraphArrays` instead; each list is made when somebody first reads
    it (a million-cindex graph takes seconds to turn into tuples).  Code that
    can work on columns should call :meth:`arrays` and ``len(graph)``, which
    make none of them.
    """

    def __init__(self) -> None:
        # None: not made yet from _arrays.
        self._cindexes: list[tuple] | None = []
        self._is_input: list[bool] | None = []
        self._dependencies: list[list[int]] | None = []
        self._ids: dict[tuple, int] | None = {}
        self.segment_ends: list[int] = []
        self._arrays_value: GraphArrays | None = None
        # set_arrays_lazy(): what makes the arrays, and their length.
        self._make_arrays: Callable[[], GraphArrays] | None = None
        self._lazy_len = 0

    # -- the two representations ----------------------------------------------------
    @property
    def _arrays(self) -> GraphArrays | None:
        if self._make_arrays is not None:
            self._arrays_value = self._make_arrays()
            self._make_arrays = None
        return self._arrays_value

    @_arrays.setter
    def _arrays(self, arrays: GraphArrays | None) -> None:
        self._arrays_value = arrays
        self._make_arrays = None

    def set_arrays(self, arrays: GraphArrays) -> None:
        """Replace the whole content (not segment_ends) by ``arrays``."""
        self._arrays = arrays
        self._cindexes = self._is_input = self._dependencies = self._ids = None

    def set_arrays_lazy(self, make: Callable[[], GraphArrays], num: int) -> None:
        """As set_arrays(make()), ``num`` cindexes, with make() called when
        the graph is first read: an unpruned graph that is pruned at once
        (by the builder, from its own state) is never made."""
        self.set_arrays(None)      # type: ignore[arg-type]
        self._make_arrays = make
        self._lazy_len = num

    def has_lists(self) -> bool:
        """False while the graph is held as arrays (some lists may be made)."""
        return self._arrays_value is None and self._make_arrays is None

    def arrays(self) -> GraphArrays:
        """The graph as columns: free while it is held as arrays (reading the
        lists does not change that), else made from the lists (not kept).

        add_cindex() and renumber() keep the two in step; code that assigns
        into the lists directly must call invalidate_arrays() first.
        """
        if self._arrays is not None:
            return self._arrays
        cindexes, deps = self._cindexes, self._dependencies
        num = len(cindexes)
        cols = np.fromiter(chain.from_iterable((c[0], *c[1]) for c in cindexes),
                           np.int64, 4 * num).reshape(num, 4).astype(np.int32)
        lens = np.fromiter(map(len, deps), np.int64, num)
        offsets = np.zeros(num + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        flat = np.fromiter(chain.from_iterable(deps), np.int32, int(offsets[-1]))
        return GraphArrays(cols[:, 0].copy(), cols[:, 1].copy(), cols[:, 2].copy(),
                           cols[:, 3].copy(), np.array(self._is_input, dtype=bool),
                           offsets, flat)

    def invalidate_arrays(self) -> None:
        """Make every list and drop the arrays (before changing the lists)."""
        if self._arrays is None:
            return
        _ = self.cindexes, self.is_input, self.dependencies, self._cindex_to_id
        self._arrays = None

    _all_lists = invalidate_arrays

    @property
    def cindexes(self) -> list[tuple]:
        if self._cindexes is None:
            a = self._arrays
            with gc_paused():   # millions of new tuples, no cycles
                indexes = map(_TUPLE_NEW, repeat(Index), zip(a.n.tolist(), a.t.tolist(),
                                                             a.x.tolist()))
                self._cindexes = list(zip(a.node.tolist(), indexes))
        return self._cindexes

    @property
    def is_input(self) -> list[bool]:
        if self._is_input is None:
            self._is_input = self._arrays.is_input.tolist()
        return self._is_input

    @property
    def dependencies(self) -> list[list[int]]:
        if self._dependencies is None:
            a = self._arrays
            with gc_paused():
                flat = a.dep_flat.tolist()
                bounds = a.dep_offsets.tolist()
                self._dependencies = list(map(flat.__getitem__,
                                              map(slice, bounds[:-1], bounds[1:])))
        return self._dependencies

    @property
    def _cindex_to_id(self) -> dict[tuple, int]:
        if self._ids is None:
            cindexes = self.cindexes
            with gc_paused():
                self._ids = dict(zip(cindexes, range(len(cindexes))))
        return self._ids

    def get_cindex_id(self, cindex: tuple) -> int:
        """The cindex_id of ``cindex``, or -1 if it is not in the graph."""
        return self._cindex_to_id.get(cindex, -1)

    def add_cindex(self, cindex: tuple, is_input: bool) -> tuple[int, bool]:
        """(cindex_id, is_new); a new cindex gets ``is_input`` and no dependencies."""
        self._all_lists()
        ids = self._ids
        cid = ids.get(cindex)
        if cid is not None:
            return cid, False
        cid = len(self._cindexes)
        ids[cindex] = cid
        self._cindexes.append(cindex)
        self._is_input.append(is_input)
        self._dependencies.append([])
        return cid, True

    def __len__(self) -> int:
        if self._make_arrays is not None:
            return self._lazy_len
        return len(self._arrays.node) if self._arrays is not None else len(self._cindexes)

    def renumber(self, start_cindex_id: int, keep: Sequence[bool]) -> None:
        """Keep only cindex_ids ``c >= start_cindex_id`` with ``keep[c - start]``."""
        self._all_lists()
        old_num = len(self)
        if len(keep) != old_num - start_cindex_id:
            raise PynnetError("renumber: keep has the wrong size")
        old2new = [-1] * (old_num - start_cindex_id)
        new2old: list[int] = []
        for j, k in enumerate(keep):
            if k:
                old2new[j] = len(new2old) + start_cindex_id
                new2old.append(j + start_cindex_id)
        if len(new2old) == len(keep):
            return
        mapping = self._ids
        cindexes, is_input, dependencies = self._cindexes, self._is_input, self._dependencies
        for old in range(start_cindex_id, old_num):
            new = old2new[old - start_cindex_id]
            cindex = cindexes[old]
            if new == -1:
                del mapping[cindex]
            elif new != old:
                mapping[cindex] = new
        new_cindexes = cindexes[:start_cindex_id]
        new_is_input = is_input[:start_cindex_id]
        new_deps = dependencies[:start_cindex_id]
        for d in new2old:
            new_cindexes.append(cindexes[d])
            new_is_input.append(is_input[d])
            deps = []
            for old_dep in dependencies[d]:
                if old_dep < start_cindex_id:
                    deps.append(old_dep)
                else:
                    new_dep = old2new[old_dep - start_cindex_id]
                    if new_dep == -1:
                        raise PynnetError("dependency on a removed cindex-id")
                    deps.append(new_dep)
            new_deps.append(deps)
        self._cindexes = new_cindexes
        self._is_input = new_is_input
        self._dependencies = new_deps

    def print(self, node_names: Sequence[str]) -> str:
        """ComputationGraph::Print: one line per node, sorted cindexes."""
        max_per_line, max_deps = 50, 5
        pairs = sorted(
            (self.cindexes[c], sorted(self.cindexes[d] for d in self.dependencies[c]))
            for c in range(len(self.cindexes)))
        out = []
        cur_start = 0
        for i, (cindex, deps) in enumerate(pairs):
            if cindex[0] != pairs[cur_start][0][0]:
                cur_start = i
                out.append("\n")
            if i - cur_start < max_per_line:
                out.append("[ " + print_cindex(cindex, node_names))
                if not self.is_input[self.get_cindex_id(cindex)]:
                    out.append(" -> ")
                    for j, dep in enumerate(deps):
                        if j < max_deps:
                            out.append(print_cindex(dep, node_names))
                            if j + 1 < len(deps):
                                out.append(", ")
                        elif j == max_deps:
                            out.append("...")
                out.append(" ] ")
            elif i - cur_start == max_per_line:
                out.append("...")
        out.append("\n")
        return "".join(out)


class CindexSet:
    """Membership test a Descriptor uses: which cindexes are (maybe) computable.

    With ``treat_unknown_as_computable`` UNKNOWN counts as computable too
    (an optimistic view); WILL_NOT_COMPUTE never does.  With no
    ``computable`` list, every cindex in the graph is in the set.
    """

    __slots__ = ("_graph", "_ids", "_computable", "_unknown_ok")

    def __init__(self, graph: ComputationGraph, computable: list[int] | None = None,
                 treat_unknown_as_computable: bool = False) -> None:
        self._graph = graph
        # (A graph held as arrays makes its dict only if a membership is asked.)
        self._ids = graph._ids
        self._computable = computable
        self._unknown_ok = treat_unknown_as_computable

    def __contains__(self, cindex: Any) -> bool:
        ids = self._ids
        if ids is None:
            ids = self._ids = self._graph._cindex_to_id
        cid = ids.get(cindex)
        if cid is None:
            return False
        if self._computable is None:
            return True
        c = self._computable[cid]
        return c == K_COMPUTABLE or (c == K_UNKNOWN and self._unknown_ok)

    __call__ = __contains__


class IndexSet:
    """Membership test a Component uses: Indexes of one node that are computable."""

    __slots__ = ("_ids", "_computable", "_node", "_unknown_ok")

    def __init__(self, graph: ComputationGraph, computable: list[int], node_id: int,
                 treat_unknown_as_computable: bool) -> None:
        self._ids = graph._cindex_to_id
        self._computable = computable
        self._node = node_id
        self._unknown_ok = treat_unknown_as_computable

    def __contains__(self, index: Any) -> bool:
        cid = self._ids.get((self._node, index))
        if cid is None:
            return False
        c = self._computable[cid]
        return c == K_COMPUTABLE or (c == K_UNKNOWN and self._unknown_ok)

    __call__ = __contains__
