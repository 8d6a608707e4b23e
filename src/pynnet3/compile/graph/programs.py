"""How each node's dependencies are encoded for the accelerated graph builders.

Everything here is a reading of the network's Descriptors and Components
that lets :mod:`.bulk`, :mod:`.jit_bulk` and :mod:`.jit_exact` (the
accelerations of :mod:`.builder`) skip asking them per cindex:

* :func:`uses_default_hooks` / :func:`component_offsets`: a component whose
  inputs are its output Index plus fixed offsets, all required;
* :func:`analyse_descriptor`: when the reference builder need not ask a
  descriptor at all (its computability follows from its dependencies');
* :func:`make_jit_plan`: the forwarding programs, in the ONE encoding both
  compiled loops (:mod:`.jit_bulk`, :mod:`.jit_exact`) read.  A dependency
  "term" maps an output Index to the Index of one dependency: a chain of
  rows of one forwarding table, each an op (``OP_*``: add an offset, round
  t, replace t or x, pick a Switch() argument) applied in turn, ending in
  the source node.  Each node's computability is a postfix program over its
  terms (``P_*``: TERM k, CONST, IFDEF, AND for Append/Sum and required
  component inputs, FAILOVER); only jit_exact needs that.

Window components (the statistics components: a range of input times per
output, computable when any is there; :func:`component_range`) are one
more row kind, read by jit_exact only.

Networks with a node beyond these tables (a component with its own index
hooks other than plain offsets or a window, an unknown descriptor type, more than 64
terms) get no plan, and :mod:`.bulk`'s NumPy code or the reference builds
their graphs.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ...nnet import descriptor as d
from ...nnet.components.base import Component
from ...nnet.nnet import NodeType

if TYPE_CHECKING:
    from ...nnet.nnet import Nnet

_I64 = np.int64
INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1
# A term's bit in the "used inputs" mask is a bit of an int64.
MAX_TERMS = 64

# Node kinds.
NK_INPUT, NK_DESCRIPTOR, NK_COMPONENT, NK_DIM_RANGE = 0, 1, 2, 3

# Op codes of the forwarding programs: a row of a JitPlan's forwarding table
# is (op, a, b, c, next row).
OP_NODE = 0         # a: the source node (the end of a chain)
OP_OFFSET = 1       # add (a, b, c) to (n, t, x), wrapping like int32 (Kaldi's Offset())
OP_ROUND_T = 2      # t rounded down to a multiple of a
OP_SET_T = 3        # t = a
OP_SET_X = 4        # x = a
OP_SWITCH = 5       # continue with switch_table[b + t mod a]
OP_COMP_OFFSET = 6  # a component's offsets: no kNoTime, no wrapping (the loops give up)

# Computability program ops: (op, arg).
P_TERM, P_CONST, P_IFDEF, P_AND, P_FAILOVER = 0, 1, 2, 3, 4


def _defining_class(cls: type, name: str) -> type | None:
    for c in cls.__mro__:
        if name in c.__dict__:
            return c
    return None


def uses_default_hooks(comp: Component) -> bool:
    """True if the component maps each output Index to the same input Index
    (it keeps Component's hooks; e.g. GeneralDropoutComponent, which is not
    "simple" only because of its precomputed indexes)."""
    cls = type(comp)
    return (cls.get_input_indexes is Component.get_input_indexes
            and cls.is_computable is Component.is_computable)


def component_offsets(comp: Component) -> list[tuple[int, int, int]] | None:
    """Offsets (dn, dt, dx) if the component's inputs are its output Index plus
    fixed offsets, all required (see Component.get_input_index_offsets)."""
    if uses_default_hooks(comp):
        return [(0, 0, 0)]
    cls = type(comp)
    owner = _defining_class(cls, "get_input_index_offsets")
    # The hook speaks for get_input_indexes/is_computable only if it was
    # written next to them (a subclass overriding those must override it too).
    if (owner is None or owner is Component
            or _defining_class(cls, "get_input_indexes") is not owner
            or _defining_class(cls, "is_computable") is not owner):
        return None
    offsets = comp.get_input_index_offsets()
    return None if offsets is None else [tuple(int(v) for v in o) for o in offsets]


def component_range(comp: Component) -> tuple[int, int, int, int, int] | None:
    """(modulus, offset, step, count, multiple) if the component reads a
    window of its input (see Component.get_input_index_range), else None."""
    cls = type(comp)
    owner = _defining_class(cls, "get_input_index_range")
    if (owner is None or owner is Component
            or _defining_class(cls, "get_input_indexes") is not owner
            or _defining_class(cls, "is_computable") is not owner):
        return None
    spec = comp.get_input_index_range()
    if spec is None:
        return None
    modulus, offset, step, count, multiple = (int(v) for v in spec)
    if modulus < 1 or step < 1 or count < 1 or multiple < 1:
        return None
    return modulus, offset, step, count, multiple


def analyse_descriptor(desc: Any) -> tuple[bool, list | None]:
    """(all_required, offsets) for a Descriptor.

    ``all_required``: every cindex that get_dependencies() lists is needed,
    i.e. the descriptor is built from forwarding expressions (node names,
    Offset(), Round(), ReplaceIndex(), Switch()), Sum() and Const() only (no
    IfDefined or Failover).  Then it is computable exactly when all its dependencies are,
    and uses all of them, so the builder need not ask the descriptor.
    ``offsets``: if, in addition, each dependency is ``(node, index + offset)``,
    the list of ``(node, dn, dt, dx)`` in get_dependencies() order, else None.
    """
    offsets: list | None = []

    def forwarding(f: Any) -> bool:
        nonlocal offsets
        dn = dt = dx = 0
        while isinstance(f, d.OffsetForwardingDescriptor):
            dn += f.offset[0]
            dt += f.offset[1]
            dx += f.offset[2]
            f = f.src
        if isinstance(f, d.SimpleForwardingDescriptor):
            if offsets is not None:
                offsets.append((f.src_node, dn, dt, dx))
            return True
        offsets = None
        # Any other forwarding expression still maps to one required cindex.
        return isinstance(f, d.ForwardingDescriptor)

    def sum_part(p: Any) -> bool:
        if type(p) is d.SimpleSumDescriptor:
            return forwarding(p.src)
        if type(p) is d.ConstantSumDescriptor:
            return True
        if type(p) is d.BinarySumDescriptor and p.op == d.BinarySumDescriptor.SUM:
            return sum_part(p.src1) and sum_part(p.src2)
        return False

    try:
        parts = desc.parts
    except AttributeError:
        return False, None
    if type(desc) is not d.Descriptor or not all(sum_part(p) for p in parts):
        return False, None
    return True, offsets


class JitPlan(NamedTuple):
    """Per-node tables the compiled loop reads (see the module docstring)."""

    kind: np.ndarray          # NK_* per node
    is_output: np.ndarray     # bool per node
    needs_time: np.ndarray    # bool: offset-style component (kNoTime: Python decides)
    term_start: np.ndarray    # first term of each node in term_root
    term_count: np.ndarray
    term_root: np.ndarray     # row of the forwarding table that starts each term
    fwd: np.ndarray           # (rows, 5) forwarding table
    switch_table: np.ndarray  # forwarding rows of Switch() arguments
    prog_start: np.ndarray    # each node's computability program in prog
    prog_len: np.ndarray
    prog: np.ndarray          # (ops, 2)
    # Window components (component_range): per node (count, modulus, offset,
    # step, multiple), count 0 for other nodes.  Such a node has no terms;
    # its count dependencies are computed, and it is computable when any is.
    range_spec: np.ndarray

    @property
    def has_ranges(self) -> bool:
        return bool(self.range_spec[:, 0].any())

    @property
    def max_deps(self) -> int:
        """The most dependencies one cindex can have."""
        return max(MAX_TERMS, int(self.range_spec[:, 0].max(initial=0)))


class Unsupported(Exception):
    """A descriptor or component beyond what these encodings express."""


class _PlanBuilder:
    def __init__(self) -> None:
        self.fwd: list[tuple[int, int, int, int, int]] = []
        self.switch: list[int] = []

    def _row(self, op: int, a: int = 0, b: int = 0, c: int = 0, nxt: int = -1) -> int:
        self.fwd.append((op, a, b, c, nxt))
        return len(self.fwd) - 1

    def forwarding(self, f: Any) -> int:
        """Row of the forwarding table that maps an output Index like ``f``."""
        tp = type(f)
        if tp is d.SimpleForwardingDescriptor:
            return self._row(OP_NODE, int(f.src_node))
        if tp is d.OffsetForwardingDescriptor:
            inner = self.forwarding(f.src)
            dn, dt, dx = (int(v) for v in f.offset)
            return self._row(OP_OFFSET, dn, dt, dx, inner)
        if tp is d.RoundingForwardingDescriptor:
            m = int(f.t_modulus)
            if m < 1:
                raise Unsupported("Round() modulus below 1")
            return self._row(OP_ROUND_T, m, 0, 0, self.forwarding(f.src))
        if tp is d.ReplaceIndexForwardingDescriptor:
            value = int(f.value)
            if not INT32_MIN <= value <= INT32_MAX:
                raise Unsupported("ReplaceIndex() value out of range")
            op = OP_SET_T if f.variable_name == "t" else OP_SET_X
            return self._row(op, value, 0, 0, self.forwarding(f.src))
        if tp is d.SwitchingForwardingDescriptor:
            rows = [self.forwarding(s) for s in f.src]
            start = len(self.switch)
            self.switch.extend(rows)
            return self._row(OP_SWITCH, len(rows), start)
        raise Unsupported(f"forwarding descriptor {tp.__name__}")

    def sum_part(self, p: Any, terms: list[int], prog: list[tuple[int, int]]) -> None:
        """Terms (get_dependencies() order) and postfix program of a SumDescriptor."""
        tp = type(p)
        if tp is d.SimpleSumDescriptor:
            prog.append((P_TERM, len(terms)))
            terms.append(self.forwarding(p.src))
        elif tp is d.ConstantSumDescriptor:
            prog.append((P_CONST, 0))
        elif tp is d.OptionalSumDescriptor:
            self.sum_part(p.src, terms, prog)
            prog.append((P_IFDEF, 0))
        elif tp is d.BinarySumDescriptor:
            self.sum_part(p.src1, terms, prog)
            self.sum_part(p.src2, terms, prog)
            if p.op == d.BinarySumDescriptor.SUM:
                prog.append((P_AND, 0))
            elif p.op == d.BinarySumDescriptor.FAILOVER:
                prog.append((P_FAILOVER, 0))
            else:
                raise Unsupported(f"sum operation {p.op}")
        else:
            raise Unsupported(f"sum descriptor {tp.__name__}")


def make_jit_plan(nnet: "Nnet") -> JitPlan | None:
    """The tables for ``nnet``, or None if some node is beyond them."""
    pb = _PlanBuilder()
    num_nodes = nnet.num_nodes()
    kind = np.zeros(num_nodes, dtype=_I64)
    is_output = np.zeros(num_nodes, dtype=bool)
    needs_time = np.zeros(num_nodes, dtype=bool)
    term_start = np.zeros(num_nodes, dtype=_I64)
    term_count = np.zeros(num_nodes, dtype=_I64)
    prog_start = np.zeros(num_nodes, dtype=_I64)
    prog_len = np.zeros(num_nodes, dtype=_I64)
    range_spec = np.zeros((num_nodes, 5), dtype=_I64)
    term_root: list[int] = []
    prog: list[tuple[int, int]] = []
    try:
        for n, node in enumerate(nnet.nodes):
            is_output[n] = nnet.is_output_node(n)
            terms: list[int] = []
            node_prog: list[tuple[int, int]] = []
            nt = node.node_type
            if nt is NodeType.INPUT:
                kind[n] = NK_INPUT
            elif nt is NodeType.DIM_RANGE:
                kind[n] = NK_DIM_RANGE
                terms.append(pb._row(OP_NODE, int(node.node_index)))
            elif nt is NodeType.COMPONENT:
                kind[n] = NK_COMPONENT
                comp = nnet.component_for_node(n)
                window = None if uses_default_hooks(comp) else component_range(comp)
                if uses_default_hooks(comp):
                    terms.append(pb._row(OP_NODE, n - 1))
                elif window is not None:
                    modulus, offset, step, count, multiple = window
                    range_spec[n] = (count, modulus, offset, step, multiple)
                else:
                    offsets = component_offsets(comp)
                    if offsets is None:
                        return None
                    needs_time[n] = True
                    for dn, dt, dx in offsets:
                        terms.append(pb._row(OP_COMP_OFFSET, dn, dt, dx,
                                             pb._row(OP_NODE, n - 1)))
                # Every input is required.
                for k in range(len(terms)):
                    node_prog.append((P_TERM, k))
                    if k:
                        node_prog.append((P_AND, 0))
            elif nt is NodeType.DESCRIPTOR:
                kind[n] = NK_DESCRIPTOR
                desc = node.descriptor
                if type(desc) is not d.Descriptor or not desc.parts:
                    return None
                for i, part in enumerate(desc.parts):
                    pb.sum_part(part, terms, node_prog)
                    if i:
                        node_prog.append((P_AND, 0))
            else:
                return None
            if len(terms) > MAX_TERMS:
                return None
            term_start[n] = len(term_root)
            term_count[n] = len(terms)
            term_root.extend(terms)
            prog_start[n] = len(prog)
            prog_len[n] = len(node_prog)
            prog.extend(node_prog)
    except Unsupported:
        return None
    fwd = np.array(pb.fwd, dtype=_I64).reshape(-1, 5)
    return JitPlan(kind, is_output, needs_time, term_start, term_count,
                   np.array(term_root, dtype=_I64), fwd,
                   np.array(pb.switch, dtype=_I64),
                   prog_start, prog_len, np.array(prog, dtype=_I64).reshape(-1, 2),
                   range_spec)
