"""Kaldi's ComputationGraph: cindexes, their ids and their dependencies.

Also the membership tests (CindexSet, IndexSet) that Descriptors and
Components use while the builder (graph.py) works out what is computable.
"""
from __future__ import annotations

import enum
from typing import Any, Sequence

from ..errors import PynnetError


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

_INFO_NAMES = {K_UNKNOWN: "kUnknown", K_COMPUTABLE: "kComputable",
               K_NOT_COMPUTABLE: "kNotComputable"}


def computable_info_name(info: int) -> str:
    """How Kaldi's operator<< prints a ComputableInfo."""
    return _INFO_NAMES.get(info, "[invalid enum value]")


def print_cindex(cindex: Sequence, node_names: Sequence[str]) -> str:
    """Kaldi's PrintCindex: ``name(n,t)`` or ``name(n,t,x)``."""
    node, (n, t, x) = cindex
    return f"{node_names[node]}({n},{t})" if x == 0 else f"{node_names[node]}({n},{t},{x})"


class ComputationGraph:
    """cindex_id <-> cindex maps, input flags, dependencies and segment ends."""

    def __init__(self) -> None:
        self.cindexes: list[tuple] = []
        self.is_input: list[bool] = []
        self.dependencies: list[list[int]] = []
        self.segment_ends: list[int] = []
        self._cindex_to_id: dict[tuple, int] = {}

    def get_cindex_id(self, cindex: tuple) -> int:
        """The cindex_id of ``cindex``, or -1 if it is not in the graph."""
        return self._cindex_to_id.get(cindex, -1)

    def add_cindex(self, cindex: tuple, is_input: bool) -> tuple[int, bool]:
        """(cindex_id, is_new); a new cindex gets ``is_input`` and no dependencies."""
        cid = self._cindex_to_id.get(cindex)
        if cid is not None:
            return cid, False
        cid = len(self.cindexes)
        self._cindex_to_id[cindex] = cid
        self.cindexes.append(cindex)
        self.is_input.append(is_input)
        self.dependencies.append([])
        return cid, True

    def __len__(self) -> int:
        return len(self.cindexes)

    def renumber(self, start_cindex_id: int, keep: Sequence[bool]) -> None:
        """Keep only cindex_ids ``c >= start_cindex_id`` with ``keep[c - start]``."""
        old_num = len(self.cindexes)
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
        mapping = self._cindex_to_id
        for old in range(start_cindex_id, old_num):
            new = old2new[old - start_cindex_id]
            cindex = self.cindexes[old]
            if new == -1:
                del mapping[cindex]
            elif new != old:
                mapping[cindex] = new
        new_cindexes = self.cindexes[:start_cindex_id]
        new_is_input = self.is_input[:start_cindex_id]
        new_deps = self.dependencies[:start_cindex_id]
        for d in new2old:
            new_cindexes.append(self.cindexes[d])
            new_is_input.append(self.is_input[d])
            deps = []
            for old_dep in self.dependencies[d]:
                if old_dep < start_cindex_id:
                    deps.append(old_dep)
                else:
                    new_dep = old2new[old_dep - start_cindex_id]
                    if new_dep == -1:
                        raise PynnetError("dependency on a removed cindex-id")
                    deps.append(new_dep)
            new_deps.append(deps)
        self.cindexes = new_cindexes
        self.is_input = new_is_input
        self.dependencies = new_deps

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

    __slots__ = ("_ids", "_computable", "_unknown_ok")

    def __init__(self, graph: ComputationGraph, computable: list[int] | None = None,
                 treat_unknown_as_computable: bool = False) -> None:
        self._ids = graph._cindex_to_id
        self._computable = computable
        self._unknown_ok = treat_unknown_as_computable

    def __contains__(self, cindex: Any) -> bool:
        cid = self._ids.get(cindex)
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
