"""Kaldi nnet3 Descriptors: how a node's input is glued from other nodes.

A Descriptor is the ``input=...`` expression of a component-node or
output-node, e.g. ``Append(Offset(input, -1), input, ReplaceIndex(ivector, t, 0))``.
The structure mirrors Kaldi's nnet-descriptor.h:

* :class:`Descriptor` concatenates (Append) its ``parts``; each part is a
  :class:`SumDescriptor` and the dimension is the sum of the parts' dims.
* A :class:`SumDescriptor` adds things of equal dimension:
  :class:`SimpleSumDescriptor` wraps one ForwardingDescriptor,
  :class:`BinarySumDescriptor` is ``Sum(a, b)`` or ``Failover(a, b)`` (a if it
  is computable, else b), :class:`OptionalSumDescriptor` is ``IfDefined(a)``
  (a if computable, else zero) and :class:`ConstantSumDescriptor` is
  ``Const(value, dim)``.
* A :class:`ForwardingDescriptor` maps a requested Index to the single Cindex
  (node, Index) the data comes from: :class:`SimpleForwardingDescriptor` is a
  node name with a scale (``Scale(0.5, tdnn1)``), wrapped by
  :class:`OffsetForwardingDescriptor` (``Offset(x, t[, x])``),
  :class:`SwitchingForwardingDescriptor` (``Switch(a, b, ...)``, chosen by
  t modulo the number of arguments), :class:`RoundingForwardingDescriptor`
  (``Round(x, m)``, t rounded down to a multiple of m) and
  :class:`ReplaceIndexForwardingDescriptor` (``ReplaceIndex(x, t|x, v)``).

Text is parsed into a free-form ``GeneralDescriptor`` tree, normalised and
converted to this restricted form by :mod:`.descriptor_parse`;
:meth:`Descriptor.text` prints Kaldi's canonical form, and text -> parse ->
text is a fixed point.
"""
from __future__ import annotations

import math
from typing import Callable, Collection, Optional, Sequence

import numpy as np

from ..errors import ConfigError
from .index import Cindex, Index

__all__ = [
    "Descriptor", "SumDescriptor", "OptionalSumDescriptor", "SimpleSumDescriptor",
    "ConstantSumDescriptor", "BinarySumDescriptor", "ForwardingDescriptor",
    "SimpleForwardingDescriptor", "OffsetForwardingDescriptor",
    "SwitchingForwardingDescriptor", "RoundingForwardingDescriptor",
    "ReplaceIndexForwardingDescriptor", "format_float",
]

NodeDim = Callable[[int], int]
INF = float("inf")
_INT32_MIN, _INT32_MAX = -(2 ** 31), 2 ** 31 - 1


def format_float(value: float) -> str:
    """C++ ``ostream << float`` with the default precision (6)."""
    return "%g" % value


def _wrap32(v: int) -> int:
    # Kaldi adds offsets in int32, so e.g. kNoTime - 1 wraps around.
    if _INT32_MIN <= v <= _INT32_MAX:
        return v
    return (v - _INT32_MIN) % (2 ** 32) + _INT32_MIN


def _lcm(a: int, b: int) -> int:
    if a <= 0 or b <= 0:
        raise ConfigError(f"invalid modulus in descriptor ({a}, {b}): must be positive")
    return a * b // math.gcd(a, b)


def _add_f32(a: float, b: float) -> float:
    # Kaldi adds the constant terms as BaseFloat (float32).
    return float(np.float32(a) + np.float32(b))


# ---------------------------------------------------------------------------
# ForwardingDescriptors
# ---------------------------------------------------------------------------
class ForwardingDescriptor:
    """Maps an output Index to one input Cindex (Kaldi's ForwardingDescriptor)."""

    def map_to_input(self, index: Index) -> Cindex:
        raise NotImplementedError

    def dim(self, node_dim: NodeDim) -> int:
        raise NotImplementedError

    def copy(self) -> "ForwardingDescriptor":
        raise NotImplementedError

    def modulus(self) -> int:
        """Smallest shift of t under which this expression is invariant."""
        return 1

    def write_config(self, node_names: Sequence[str]) -> str:
        raise NotImplementedError

    def text(self, node_names: Sequence[str]) -> str:
        return self.write_config(node_names)

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        """Append the node indexes this may read from (unsorted, repeats kept)."""
        raise NotImplementedError

    def get_scale_for_node(self, node_index: int) -> float:
        """The scale on ``node_index`` in this expression, +inf if absent."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def _key(self) -> tuple:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._key()!r}"


class SimpleForwardingDescriptor(ForwardingDescriptor):
    """A node with a scale; written ``name`` or ``Scale(alpha, name)``."""

    __slots__ = ("src_node", "scale")

    def __init__(self, src_node: int, scale: float = 1.0) -> None:
        assert src_node >= 0
        self.src_node = src_node
        self.scale = scale

    def map_to_input(self, index: Index) -> Cindex:
        return Cindex(self.src_node, index)

    def dim(self, node_dim: NodeDim) -> int:
        return node_dim(self.src_node)

    def copy(self) -> "SimpleForwardingDescriptor":
        return SimpleForwardingDescriptor(self.src_node, self.scale)

    def write_config(self, node_names: Sequence[str]) -> str:
        name = node_names[self.src_node]
        if self.scale == 1.0:
            return name
        return f"Scale({format_float(self.scale)}, {name})"

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        if node_indexes is None:
            node_indexes = []
        node_indexes.append(self.src_node)
        return node_indexes

    def get_scale_for_node(self, node_index: int) -> float:
        return self.scale if node_index == self.src_node else INF

    def _key(self) -> tuple:
        return (self.src_node, self.scale)


class OffsetForwardingDescriptor(ForwardingDescriptor):
    """``Offset(src, t[, x])``: adds an Index offset before forwarding."""

    __slots__ = ("src", "offset")

    def __init__(self, src: ForwardingDescriptor, offset: Index) -> None:
        self.src = src
        self.offset = Index(*offset)

    def map_to_input(self, index: Index) -> Cindex:
        o = self.offset
        return self.src.map_to_input(Index(_wrap32(index[0] + o[0]),
                                           _wrap32(index[1] + o[1]),
                                           _wrap32(index[2] + o[2])))

    def dim(self, node_dim: NodeDim) -> int:
        return self.src.dim(node_dim)

    def copy(self) -> "OffsetForwardingDescriptor":
        return OffsetForwardingDescriptor(self.src.copy(), self.offset)

    def modulus(self) -> int:
        return self.src.modulus()

    def write_config(self, node_names: Sequence[str]) -> str:
        assert self.offset.n == 0
        x = f", {self.offset.x}" if self.offset.x != 0 else ""
        return f"Offset({self.src.write_config(node_names)}, {self.offset.t}{x})"

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        return self.src.get_node_dependencies(node_indexes)

    def get_scale_for_node(self, node_index: int) -> float:
        return self.src.get_scale_for_node(node_index)

    def _key(self) -> tuple:
        return (self.src, self.offset)


class SwitchingForwardingDescriptor(ForwardingDescriptor):
    """``Switch(a, b, ...)``: argument number (t mod number-of-arguments)."""

    __slots__ = ("src",)

    def __init__(self, src: Sequence[ForwardingDescriptor]) -> None:
        assert len(src) > 0
        self.src = list(src)

    def map_to_input(self, index: Index) -> Cindex:
        # Python's % is the mathematical modulus Kaldi computes by hand.
        return self.src[index[1] % len(self.src)].map_to_input(index)

    def dim(self, node_dim: NodeDim) -> int:
        # As in Kaldi, only the first argument's dimension is consulted.
        return self.src[0].dim(node_dim)

    def copy(self) -> "SwitchingForwardingDescriptor":
        return SwitchingForwardingDescriptor([s.copy() for s in self.src])

    def modulus(self) -> int:
        ans = len(self.src)
        for s in self.src:
            ans = _lcm(ans, s.modulus())
        return ans

    def write_config(self, node_names: Sequence[str]) -> str:
        return "Switch(" + ", ".join(s.write_config(node_names) for s in self.src) + ")"

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        if node_indexes is None:
            node_indexes = []
        for s in self.src:
            s.get_node_dependencies(node_indexes)
        return node_indexes

    def get_scale_for_node(self, node_index: int) -> float:
        ans = INF
        for s in self.src:
            this_ans = s.get_scale_for_node(node_index)
            if this_ans != INF:
                if ans != INF and ans != this_ans:
                    raise ConfigError(
                        f"invalid Descriptor: node {node_index} appears in "
                        f"Switch() with two different scales "
                        f"{format_float(this_ans)} vs. {format_float(ans)}")
                ans = this_ans
        return ans

    def _key(self) -> tuple:
        return tuple(self.src)


class RoundingForwardingDescriptor(ForwardingDescriptor):
    """``Round(src, m)``: t rounded down to a multiple of m."""

    __slots__ = ("src", "t_modulus")

    def __init__(self, src: ForwardingDescriptor, t_modulus: int) -> None:
        self.src = src
        self.t_modulus = t_modulus

    def map_to_input(self, index: Index) -> Cindex:
        assert self.t_modulus >= 1
        t = index[1]
        return self.src.map_to_input(Index(index[0], t - t % self.t_modulus, index[2]))

    def dim(self, node_dim: NodeDim) -> int:
        return self.src.dim(node_dim)

    def copy(self) -> "RoundingForwardingDescriptor":
        return RoundingForwardingDescriptor(self.src.copy(), self.t_modulus)

    def modulus(self) -> int:
        # Kaldi returns the rounding modulus alone (not an lcm with src's).
        return self.t_modulus

    def write_config(self, node_names: Sequence[str]) -> str:
        return f"Round({self.src.write_config(node_names)}, {self.t_modulus})"

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        return self.src.get_node_dependencies(node_indexes)

    def get_scale_for_node(self, node_index: int) -> float:
        return self.src.get_scale_for_node(node_index)

    def _key(self) -> tuple:
        return (self.src, self.t_modulus)


class ReplaceIndexForwardingDescriptor(ForwardingDescriptor):
    """``ReplaceIndex(src, t|x, value)``: sets t or x to a fixed value."""

    __slots__ = ("src", "variable_name", "value")

    def __init__(self, src: ForwardingDescriptor, variable_name: str, value: int) -> None:
        if variable_name not in ("t", "x"):
            raise ValueError(f"ReplaceIndex variable must be 't' or 'x', got {variable_name!r}")
        self.src = src
        self.variable_name = variable_name
        self.value = value

    def map_to_input(self, index: Index) -> Cindex:
        if self.variable_name == "t":
            return self.src.map_to_input(Index(index[0], self.value, index[2]))
        return self.src.map_to_input(Index(index[0], index[1], self.value))

    def dim(self, node_dim: NodeDim) -> int:
        return self.src.dim(node_dim)

    def copy(self) -> "ReplaceIndexForwardingDescriptor":
        return ReplaceIndexForwardingDescriptor(self.src.copy(), self.variable_name,
                                                self.value)

    # Kaldi does not override Modulus() here, so it is 1 whatever src is.

    def write_config(self, node_names: Sequence[str]) -> str:
        return (f"ReplaceIndex({self.src.write_config(node_names)}, "
                f"{self.variable_name}, {self.value})")

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        return self.src.get_node_dependencies(node_indexes)

    def get_scale_for_node(self, node_index: int) -> float:
        return self.src.get_scale_for_node(node_index)

    def _key(self) -> tuple:
        return (self.src, self.variable_name, self.value)


# ---------------------------------------------------------------------------
# SumDescriptors
# ---------------------------------------------------------------------------
class SumDescriptor:
    """One Append term: a sum of things of the same dimension."""

    def get_dependencies(self, index: Index, dependencies: Optional[list] = None) -> list:
        """Append every Cindex this may read for ``index`` (repeats kept)."""
        raise NotImplementedError

    def is_computable(self, index: Index, cindex_set: Collection,
                      used_inputs: Optional[list] = None) -> bool:
        """True if computable from ``cindex_set``; then the Cindexes really
        used are appended to ``used_inputs`` (left alone otherwise)."""
        raise NotImplementedError

    def dim(self, node_dim: NodeDim) -> int:
        raise NotImplementedError

    def copy(self) -> "SumDescriptor":
        raise NotImplementedError

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        raise NotImplementedError

    def get_scale_for_node(self, node_index: int) -> float:
        """Scale of ``node_index`` (+inf if absent); for node_index < 0 the
        constant term (0.0 if there is no Const())."""
        raise NotImplementedError

    def modulus(self) -> int:
        raise NotImplementedError

    def write_config(self, node_names: Sequence[str]) -> str:
        raise NotImplementedError

    def text(self, node_names: Sequence[str]) -> str:
        return self.write_config(node_names)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))

    def _key(self) -> tuple:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._key()!r}"


class OptionalSumDescriptor(SumDescriptor):
    """``IfDefined(src)``: src where it is computable, zero elsewhere."""

    __slots__ = ("src",)

    def __init__(self, src: SumDescriptor) -> None:
        self.src = src

    def get_dependencies(self, index: Index, dependencies: Optional[list] = None) -> list:
        return self.src.get_dependencies(index, dependencies)

    def is_computable(self, index: Index, cindex_set: Collection,
                      used_inputs: Optional[list] = None) -> bool:
        self.src.is_computable(index, cindex_set, used_inputs)
        return True

    def dim(self, node_dim: NodeDim) -> int:
        return self.src.dim(node_dim)

    def copy(self) -> "OptionalSumDescriptor":
        return OptionalSumDescriptor(self.src.copy())

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        return self.src.get_node_dependencies(node_indexes)

    def get_scale_for_node(self, node_index: int) -> float:
        ans = self.src.get_scale_for_node(node_index)
        if node_index < 0 and ans != 0.0:
            raise ConfigError("illegal combination of IfDefined() and Const() "
                              "expressions in a Descriptor")
        return ans

    def modulus(self) -> int:
        return self.src.modulus()

    def write_config(self, node_names: Sequence[str]) -> str:
        return f"IfDefined({self.src.write_config(node_names)})"

    def _key(self) -> tuple:
        return (self.src,)


class SimpleSumDescriptor(SumDescriptor):
    """A single required term, wrapping a ForwardingDescriptor."""

    __slots__ = ("src",)

    def __init__(self, src: ForwardingDescriptor) -> None:
        self.src = src

    def get_dependencies(self, index: Index, dependencies: Optional[list] = None) -> list:
        if dependencies is None:
            dependencies = []
        dependencies.append(self.src.map_to_input(index))
        return dependencies

    def is_computable(self, index: Index, cindex_set: Collection,
                      used_inputs: Optional[list] = None) -> bool:
        c = self.src.map_to_input(index)
        present = c in cindex_set
        if present and used_inputs is not None:
            used_inputs.append(c)
        return present

    def dim(self, node_dim: NodeDim) -> int:
        return self.src.dim(node_dim)

    def copy(self) -> "SimpleSumDescriptor":
        return SimpleSumDescriptor(self.src.copy())

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        return self.src.get_node_dependencies(node_indexes)

    def get_scale_for_node(self, node_index: int) -> float:
        # A forwarding expression never holds a constant term.
        return self.src.get_scale_for_node(node_index) if node_index >= 0 else 0.0

    def modulus(self) -> int:
        return self.src.modulus()

    def write_config(self, node_names: Sequence[str]) -> str:
        return self.src.write_config(node_names)

    def _key(self) -> tuple:
        return (self.src,)


class ConstantSumDescriptor(SumDescriptor):
    """``Const(value, dim)``: a constant vector; always computable."""

    __slots__ = ("value", "dim_")

    def __init__(self, value: float, dim: int) -> None:
        if not (dim > 0 and value - value == 0.0):
            raise ConfigError(f"invalid Const({format_float(value)}, {dim}) in "
                              f"descriptor: need a finite value and dim > 0")
        self.value = value
        self.dim_ = dim

    def get_dependencies(self, index: Index, dependencies: Optional[list] = None) -> list:
        return dependencies if dependencies is not None else []

    def is_computable(self, index: Index, cindex_set: Collection,
                      used_inputs: Optional[list] = None) -> bool:
        return True

    def dim(self, node_dim: NodeDim) -> int:
        return self.dim_

    def copy(self) -> "ConstantSumDescriptor":
        return ConstantSumDescriptor(self.value, self.dim_)

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        return node_indexes if node_indexes is not None else []

    def get_scale_for_node(self, node_index: int) -> float:
        return self.value if node_index < 0 else INF

    def modulus(self) -> int:
        return 1

    def write_config(self, node_names: Sequence[str]) -> str:
        return f"Const({format_float(self.value)}, {self.dim_})"

    def _key(self) -> tuple:
        return (self.value, self.dim_)


class BinarySumDescriptor(SumDescriptor):
    """``Sum(src1, src2)`` (both needed) or ``Failover(src1, src2)`` (src1 if
    computable, else src2).  ``op`` is "Sum" or "Failover"."""

    __slots__ = ("op", "src1", "src2")
    SUM = "Sum"
    FAILOVER = "Failover"

    def __init__(self, op: str, src1: SumDescriptor, src2: SumDescriptor) -> None:
        if op not in (self.SUM, self.FAILOVER):
            raise ValueError(f"BinarySumDescriptor op must be 'Sum' or 'Failover', got {op!r}")
        self.op = op
        self.src1 = src1
        self.src2 = src2

    def get_dependencies(self, index: Index, dependencies: Optional[list] = None) -> list:
        dependencies = self.src1.get_dependencies(index, dependencies)
        return self.src2.get_dependencies(index, dependencies)

    def is_computable(self, index: Index, cindex_set: Collection,
                      used_inputs: Optional[list] = None) -> bool:
        r = used_inputs is not None
        inputs1: Optional[list] = [] if r else None
        inputs2: Optional[list] = [] if r else None
        # Both sides are evaluated, as in Kaldi (no short-circuit).
        ok1 = self.src1.is_computable(index, cindex_set, inputs1)
        ok2 = self.src2.is_computable(index, cindex_set, inputs2)
        if self.op == self.SUM:
            if ok1 and ok2:
                if r:
                    used_inputs.extend(inputs1)
                    used_inputs.extend(inputs2)
                return True
            return False
        if ok1:
            if r:
                used_inputs.extend(inputs1)
            return True
        if ok2:
            if r:
                used_inputs.extend(inputs2)
            return True
        return False

    def dim(self, node_dim: NodeDim) -> int:
        dim1, dim2 = self.src1.dim(node_dim), self.src2.dim(node_dim)
        if dim1 != dim2:
            raise ConfigError(f"neural net contains {self.op} expression with "
                              f"inconsistent dimension: {dim1} vs. {dim2}")
        return dim1

    def copy(self) -> "BinarySumDescriptor":
        return BinarySumDescriptor(self.op, self.src1.copy(), self.src2.copy())

    def get_node_dependencies(self, node_indexes: Optional[list] = None) -> list:
        node_indexes = self.src1.get_node_dependencies(node_indexes)
        return self.src2.get_node_dependencies(node_indexes)

    def get_scale_for_node(self, node_index: int) -> float:
        ans1 = self.src1.get_scale_for_node(node_index)
        ans2 = self.src2.get_scale_for_node(node_index)
        valid1 = ans1 - ans1 == 0
        valid2 = ans2 - ans2 == 0
        if node_index < 0:  # asking for the constant term
            assert valid1 and valid2
            if self.op == self.SUM:
                return _add_f32(ans1, ans2)
            if ans1 != ans2:
                raise ConfigError("illegal combination of Failover() and Const() "
                                  "expressions in a Descriptor (not supported)")
        if valid1 and valid2 and ans1 != ans2:
            raise ConfigError(
                f"inconsistent scales in a Descriptor: node {node_index} has "
                f"scales {format_float(ans1)} vs. {format_float(ans2)} (this "
                f"combination of expressions is not supported)")
        return ans1 if not valid2 else ans2

    def modulus(self) -> int:
        return _lcm(self.src1.modulus(), self.src2.modulus())

    def write_config(self, node_names: Sequence[str]) -> str:
        return (f"{self.op}({self.src1.write_config(node_names)}, "
                f"{self.src2.write_config(node_names)})")

    def _key(self) -> tuple:
        return (self.op, self.src1, self.src2)


# ---------------------------------------------------------------------------
# Descriptor
# ---------------------------------------------------------------------------
class Descriptor:
    """The input of a node: the concatenation (Append) of ``parts``."""

    __slots__ = ("parts",)

    def __init__(self, parts: Optional[Sequence[SumDescriptor]] = None) -> None:
        self.parts: list[SumDescriptor] = list(parts) if parts is not None else []

    def dim(self, node_dim: NodeDim) -> int:
        dim = sum(p.dim(node_dim) for p in self.parts)
        if dim <= 0:
            raise ConfigError(f"descriptor has non-positive dimension {dim}")
        return dim

    def write_config(self, node_names: Sequence[str]) -> str:
        """Kaldi's WriteConfig: the canonical text (as nnet3-info prints it)."""
        assert self.parts, "empty Descriptor"
        if len(self.parts) == 1:
            return self.parts[0].write_config(node_names)
        return "Append(" + ", ".join(p.write_config(node_names) for p in self.parts) + ")"

    text = write_config

    def get_dependencies(self, index: Index) -> list[Cindex]:
        """Every Cindex this may read for ``index`` (unsorted, repeats kept)."""
        deps: list = []
        for p in self.parts:
            p.get_dependencies(index, deps)
        return deps

    def is_computable(self, index: Index, cindex_set: Collection,
                      used_inputs=None) -> bool:
        """True if ``index`` can be computed from ``cindex_set``.

        ``used_inputs`` (a list or a set, optional) is cleared and, on
        success, receives the Cindexes that take part in the computation.
        """
        if used_inputs is None:
            for p in self.parts:
                if not p.is_computable(index, cindex_set, None):
                    return False
            return True
        used_inputs.clear()
        inputs: list = []
        for p in self.parts:
            if not p.is_computable(index, cindex_set, inputs):
                return False
        if isinstance(used_inputs, list):
            used_inputs.extend(inputs)
        else:
            used_inputs.update(inputs)
        return True

    def get_node_dependencies(self) -> list[int]:
        """The node indexes this descriptor may read from, sorted and unique."""
        nodes: list = []
        for p in self.parts:
            p.get_node_dependencies(nodes)
        return sorted(set(nodes))

    def modulus(self) -> int:
        ans = 1
        for p in self.parts:
            ans = _lcm(ans, p.modulus())
        return ans

    def num_parts(self) -> int:
        return len(self.parts)

    def part(self, n: int) -> SumDescriptor:
        assert 0 <= n < len(self.parts)
        return self.parts[n]

    def copy(self) -> "Descriptor":
        return Descriptor([p.copy() for p in self.parts])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Descriptor):
            return NotImplemented
        return self.parts == other.parts

    def __hash__(self) -> int:
        return hash(tuple(self.parts))

    def __repr__(self) -> str:
        return f"Descriptor({self.parts!r})"
