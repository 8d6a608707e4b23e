"""Parsing and normalisation of Descriptor text (Kaldi's GeneralDescriptor
and DescriptorTokenize, nnet-descriptor.{h,cc}).

Text such as ``Append(Offset(input, -1), Sum(a, Scale(0.5, b)))`` is first
split into tokens (:func:`tokenize_descriptor`, Kaldi's DescriptorTokenize),
then read into a :class:`GeneralDescriptor` parse tree that allows any nesting.
:meth:`GeneralDescriptor.normalized` rewrites that tree the way Kaldi does
(Append moved to the top, Offset/Switch/Round/ReplaceIndex pushed inside
Sum/Failover/IfDefined, Scale pushed down to the node names, nested Offsets
and Scales merged, Sum(a, b, c) turned into Sum(a, Sum(b, c)) ...), and
:meth:`GeneralDescriptor.convert_to_descriptor` builds the real
:class:`~pynnet3.nnet.descriptor.Descriptor` from the normalised tree.

The rewriting order matters for which inputs are accepted and for the exact
canonical text, so :func:`_normalize` follows Kaldi's pass structure exactly
(including that a pass stops descending once something has changed).
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

import numpy as np

from ..errors import ConfigError
from .config_line import is_valid_name, parse_int32, string_to_real
from .descriptor import (BinarySumDescriptor, ConstantSumDescriptor, Descriptor,
                         ForwardingDescriptor, OffsetForwardingDescriptor, OptionalSumDescriptor,
                         ReplaceIndexForwardingDescriptor, RoundingForwardingDescriptor,
                         SimpleForwardingDescriptor, SimpleSumDescriptor, SumDescriptor,
                         SwitchingForwardingDescriptor, format_float)
from .index import Index

NodeNames = Union[Sequence[str], Mapping[str, int]]

# GeneralDescriptor types (Kaldi's DescriptorType); the keyword's own text is
# used as the value so that trees print readably while debugging.
K_APPEND = "Append"
K_SUM = "Sum"
K_FAILOVER = "Failover"
K_IF_DEFINED = "IfDefined"
K_OFFSET = "Offset"
K_SWITCH = "Switch"
K_ROUND = "Round"
K_REPLACE_INDEX = "ReplaceIndex"
K_SCALE = "Scale"
K_CONST = "Const"
K_NODE_NAME = "NodeName"

_KEYWORDS = frozenset([K_APPEND, K_SUM, K_FAILOVER, K_IF_DEFINED, K_OFFSET,
                       K_SWITCH, K_ROUND, K_REPLACE_INDEX, K_SCALE, K_CONST])

# Kaldi's values for the replaced variable of ReplaceIndex (value1 of the tree).
REPLACE_T = 1
REPLACE_X = 2

def string_to_int32(text: str) -> Optional[int]:
    """Kaldi's ConvertStringToInteger<int32>: the value, or None."""
    return parse_int32(text)


def tokenize_descriptor(text: str) -> list[tuple[str, int]]:
    """Kaldi's DescriptorTokenize: ``[(token, start_offset), ...]``.

    Tokens are ``(``, ``)``, ``,`` and the runs between them and spaces/tabs;
    each run must be a valid name or a number.
    """
    tokens: list[tuple[str, int]] = []
    pos, size = 0, len(text)
    while pos < size:
        c = text[pos]
        if c == " " or c == "\t":
            pos += 1
            continue
        if c in "(),":
            tokens.append((c, pos))
            pos += 1
            continue
        end = pos
        while end < size and text[end] not in " \t(),":
            end += 1
        token = text[pos:end]
        if not is_valid_name(token) and string_to_real(token) is None:
            raise ConfigError(f"could not tokenize descriptor '{text}': "
                              f"'{token}' is neither a name nor a number, at "
                              f"'{text[pos:]}'")
        tokens.append((token, pos))
        pos = end
    return tokens


class _NormalizeError(ConfigError):
    """A descriptor that parsed but cannot be normalised/converted."""


class GeneralDescriptor:
    """Kaldi's GeneralDescriptor: a parse tree of any Descriptor expression.

    ``value1``/``value2``/``alpha`` mean what they mean in Kaldi: the node
    index (NodeName), t and x offsets (Offset), t-modulus (Round), variable
    (REPLACE_T/REPLACE_X) and value (ReplaceIndex), dimension (Const); alpha is
    the scale (Scale) or the constant (Const).  ``name`` keeps the node name
    of a NodeName leaf, whose ``value1`` is -1 until it is resolved.
    """

    __slots__ = ("type", "value1", "value2", "alpha", "descriptors", "name")

    def __init__(self, type_: str, value1: int = -1, value2: int = -1,
                 alpha: float = 0.0, descriptors: Optional[list] = None,
                 name: Optional[str] = None) -> None:
        self.type = type_
        self.value1 = value1
        self.value2 = value2
        self.alpha = alpha
        self.descriptors: list[GeneralDescriptor] = descriptors if descriptors is not None else []
        self.name = name

    # -- generic helpers -------------------------------------------------
    def copy(self) -> "GeneralDescriptor":
        return GeneralDescriptor(self.type, self.value1, self.value2, self.alpha,
                                 [d.copy() for d in self.descriptors], self.name)

    def _take(self, other: "GeneralDescriptor") -> None:
        """Become ``other`` (which is dropped by the caller)."""
        self.type = other.type
        self.value1 = other.value1
        self.value2 = other.value2
        self.alpha = other.alpha
        self.descriptors = other.descriptors
        self.name = other.name

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GeneralDescriptor):
            return NotImplemented
        return (self.type == other.type and self.value1 == other.value1
                and self.value2 == other.value2 and self.alpha == other.alpha
                and self.name == other.name and self.descriptors == other.descriptors)

    def __repr__(self) -> str:
        return f"GeneralDescriptor({self.text()!r})"

    def referenced_names(self) -> list[str]:
        """Names of the nodes referenced, in order of appearance, repeats kept."""
        if self.type == K_NODE_NAME:
            return [self.name if self.name is not None else str(self.value1)]
        out: list[str] = []
        for d in self.descriptors:
            out.extend(d.referenced_names())
        return out

    def resolve(self, node_names: NodeNames) -> "GeneralDescriptor":
        """A copy with every NodeName leaf's index looked up in ``node_names``."""
        lookup = name_lookup(node_names)
        ans = self.copy()
        stack = [ans]
        while stack:
            d = stack.pop()
            if d.type == K_NODE_NAME:
                index = lookup.get(d.name)
                if index is None:
                    raise ConfigError(f"unknown node name '{d.name}' in descriptor "
                                      f"'{self.text()}'")
                d.value1 = index
            stack.extend(d.descriptors)
        return ans

    def text(self, node_names: Optional[Sequence[str]] = None) -> str:
        """Kaldi's debug Print() of the tree (not necessarily normalised).

        Unlike Kaldi's Print, Round() is printed as Round (Kaldi prints
        ``Offset(`` for it, a harmless slip in debug output).
        """
        t = self.type
        if t == K_NODE_NAME:
            if node_names is not None and 0 <= self.value1 < len(node_names):
                return node_names[self.value1]
            return self.name if self.name is not None else f"<node {self.value1}>"
        if t == K_CONST:
            return f"Const({format_float(self.alpha)}, {self.value1})"
        args = [d.text(node_names) for d in self.descriptors]
        if t == K_OFFSET:
            extra = f", {self.value2}" if self.value2 != 0 else ""
            return f"Offset({args[0]}, {self.value1}{extra})"
        if t == K_ROUND:
            return f"Round({args[0]}, {self.value1})"
        if t == K_REPLACE_INDEX:
            var = "t" if self.value1 == REPLACE_T else "x"
            return f"ReplaceIndex({args[0]}, {var}, {self.value2})"
        if t == K_SCALE:
            return f"Scale({format_float(self.alpha)}, {', '.join(args)})"
        return f"{t}({', '.join(args)})"

    # -- Append normalisation ---------------------------------------------
    def num_append_terms(self) -> int:
        """How many terms the tree has once Append() is moved to the top."""
        t = self.type
        if t == K_NODE_NAME or t == K_CONST:
            return 1
        if t == K_APPEND:
            return sum(d.num_append_terms() for d in self.descriptors)
        ans = self.descriptors[0].num_append_terms()
        for d in self.descriptors[1:]:
            n = d.num_append_terms()
            if n != ans:
                raise _NormalizeError(
                    f"the arguments of {t}() contain Append() expressions with "
                    f"different numbers of terms ({ans} vs. {n}); Append() "
                    f"can only be moved outside {t}() when they agree")
        return ans

    def get_append_term(self, term: int) -> "GeneralDescriptor":
        """A new tree for Append-term ``term`` of this one."""
        t = self.type
        if t == K_NODE_NAME:
            assert term == 0
            return GeneralDescriptor(K_NODE_NAME, self.value1, name=self.name)
        if t == K_APPEND:
            cur = term
            for d in self.descriptors:
                n = d.num_append_terms()
                if cur < n:
                    return d.get_append_term(cur)
                cur -= n
            raise AssertionError("get_append_term: term out of range")
        return GeneralDescriptor(t, self.value1, self.value2, self.alpha,
                                 [d.get_append_term(term) for d in self.descriptors],
                                 self.name)

    def normalize_append(self) -> "GeneralDescriptor":
        """A new tree with every Append() merged into one at the top."""
        num_terms = self.num_append_terms()
        assert num_terms > 0
        if num_terms == 1:
            return self.get_append_term(0)
        return GeneralDescriptor(K_APPEND, descriptors=[
            self.get_append_term(i) for i in range(num_terms)])

    def normalized(self) -> "GeneralDescriptor":
        """Kaldi's GetNormalizedDescriptor: a new, fully normalised tree."""
        ans = self.normalize_append()
        while _normalize(ans):
            pass
        return ans

    # -- conversion ----------------------------------------------------------
    def convert_to_descriptor(self) -> Descriptor:
        """Normalise, then build the Descriptor (node names must be resolved)."""
        normalized = self.normalized()
        if normalized.type == K_APPEND:
            parts = [d.convert_to_sum_descriptor() for d in normalized.descriptors]
        else:
            parts = [normalized.convert_to_sum_descriptor()]
        return Descriptor(parts)

    def convert_to_sum_descriptor(self) -> SumDescriptor:
        t = self.type
        if t == K_APPEND:
            raise _NormalizeError("Append() is only allowed at the top level of a "
                                  "descriptor (badly normalized descriptor)")
        if t == K_SUM or t == K_FAILOVER:
            assert len(self.descriptors) == 2, "bad descriptor"
            return BinarySumDescriptor(
                t, self.descriptors[0].convert_to_sum_descriptor(),
                self.descriptors[1].convert_to_sum_descriptor())
        if t == K_IF_DEFINED:
            assert len(self.descriptors) == 1, "bad descriptor"
            return OptionalSumDescriptor(self.descriptors[0].convert_to_sum_descriptor())
        if t == K_CONST:
            assert not self.descriptors and self.value1 > 0
            if self.alpha - self.alpha != 0.0:
                raise _NormalizeError(f"Const() value must be finite, got "
                                      f"{format_float(self.alpha)}")
            return ConstantSumDescriptor(self.alpha, self.value1)
        return SimpleSumDescriptor(self.convert_to_forwarding_descriptor())

    def convert_to_forwarding_descriptor(self) -> ForwardingDescriptor:
        t = self.type
        if t == K_NODE_NAME:
            if self.value1 < 0:
                raise _NormalizeError(f"node name '{self.name}' was not resolved "
                                      f"to a node index")
            return SimpleForwardingDescriptor(self.value1)
        if t == K_OFFSET:
            return OffsetForwardingDescriptor(
                self.descriptors[0].convert_to_forwarding_descriptor(),
                Index(0, self.value1, self.value2))
        if t == K_SWITCH:
            return SwitchingForwardingDescriptor(
                [d.convert_to_forwarding_descriptor() for d in self.descriptors])
        if t == K_ROUND:
            return RoundingForwardingDescriptor(
                self.descriptors[0].convert_to_forwarding_descriptor(), self.value1)
        if t == K_REPLACE_INDEX:
            assert self.value1 in (REPLACE_T, REPLACE_X)
            return ReplaceIndexForwardingDescriptor(
                self.descriptors[0].convert_to_forwarding_descriptor(),
                "t" if self.value1 == REPLACE_T else "x", self.value2)
        if t == K_SCALE:
            if not (len(self.descriptors) == 1
                    and self.descriptors[0].type == K_NODE_NAME):
                raise _NormalizeError(
                    "invalid combination of Scale() expression and other "
                    "expressions (Scale() can only be applied, after "
                    "normalization, directly to a node name)")
            child = self.descriptors[0]
            if child.value1 < 0:
                raise _NormalizeError(f"node name '{child.name}' was not resolved "
                                      f"to a node index")
            return SimpleForwardingDescriptor(child.value1, self.alpha)
        if t == K_CONST:
            raise _NormalizeError("Const() appears too deep in the expression (it "
                                  "may only appear at the top, in Append() or "
                                  "in Sum())")
        raise _NormalizeError(
            f"{t}() cannot appear inside Switch() or other index-mapping "
            f"expressions (normalization could not move it outward)")


def _normalize(desc: GeneralDescriptor) -> bool:
    """One pass of Kaldi's GeneralDescriptor::Normalize; True if it changed.

    Append() must already have been normalised away (except at the top).
    """
    changed = False
    t = desc.type
    push_check = t in (K_SWITCH, K_ROUND, K_REPLACE_INDEX)
    if t == K_OFFSET:
        child = desc.descriptors[0]
        if child.type == K_OFFSET:
            # Offset(Offset(x, a), b) -> Offset(x, a + b)
            desc.value1 += child.value1
            desc.value2 += child.value2
            desc.descriptors[0] = child.descriptors[0]
            changed = True
            push_check = True
        elif desc.value1 == 0 and desc.value2 == 0:
            # Offset(x, 0) -> x; 'desc' is no longer an Offset, so no more here.
            desc._take(child)
            changed = True
        else:
            push_check = True
    if push_check:
        child = desc.descriptors[0]
        assert child.type != K_APPEND
        if child.type in (K_SUM, K_FAILOVER, K_IF_DEFINED):
            if len(desc.descriptors) > 1:
                raise _NormalizeError(
                    f"{child.type}() expression as the first argument of "
                    f"Switch() cannot be normalized")
            # e.g. Offset(Sum(x, y), 1) -> Sum(Offset(x, 1), Offset(y, 1))
            child.descriptors = [
                GeneralDescriptor(desc.type, desc.value1, desc.value2, desc.alpha, [gc])
                for gc in child.descriptors]
            desc.type = child.type
            desc.value1 = child.value1
            desc.value2 = child.value2
            desc.descriptors = child.descriptors
            changed = True
    elif t == K_SUM:
        if len(desc.descriptors) == 1:
            desc._take(desc.descriptors[0])  # Sum(x) -> x
            changed = True
        elif len(desc.descriptors) > 2:
            # Sum(a, b, c, ...) -> Sum(a, Sum(b, c, ...))
            rest = GeneralDescriptor(K_SUM, descriptors=desc.descriptors[1:])
            desc.descriptors = [desc.descriptors[0], rest]
            changed = True
    elif t == K_SCALE:
        child = desc.descriptors[0]
        if child.type in (K_OFFSET, K_REPLACE_INDEX, K_ROUND):
            # Scale(a, Offset(x, 1)) -> Offset(Scale(a, x), 1): swap the roles.
            desc.type, child.type = child.type, desc.type
            desc.alpha, child.alpha = child.alpha, desc.alpha
            desc.value1, child.value1 = child.value1, desc.value1
            desc.value2, child.value2 = child.value2, desc.value2
            changed = True
        elif child.type == K_SUM:
            desc.descriptors = [GeneralDescriptor(K_SCALE, -1, -1, desc.alpha, [c])
                                for c in child.descriptors]
            desc.type = K_SUM
            desc.alpha = 0.0
            changed = True
        elif child.type == K_SCALE:
            # Scale(a, Scale(b, x)) -> Scale(a*b, x), multiplied in float32.
            desc.alpha = float(np.float32(desc.alpha) * np.float32(child.alpha))
            desc.descriptors[0] = child.descriptors[0]
            changed = True
        elif child.type != K_NODE_NAME:
            raise _NormalizeError(
                f"cannot normalize Scale() applied to {child.type}(); you can "
                f"work around this by pushing Scale() inside other expressions")
    for d in desc.descriptors:
        # Like Kaldi, stop descending once this pass changed something.
        changed = changed or _normalize(d)
    return changed


def name_lookup(node_names: NodeNames) -> Mapping[str, int]:
    """Name -> node index (the first node of a name wins); a mapping is
    returned as it is.  Make it once for many descriptors over the same
    nodes: parse_descriptor makes one per call when given a list."""
    if isinstance(node_names, Mapping):
        return node_names
    lookup: dict[str, int] = {}
    for i, name in enumerate(node_names):
        lookup.setdefault(name, i)  # the first node of a name wins, as in Kaldi
    return lookup


class _Parser:
    """Recursive-descent reader over the tokens of one descriptor text."""

    def __init__(self, text: str, node_names: Optional[NodeNames]) -> None:
        self.text = text
        self.tokens = tokenize_descriptor(text)
        self.pos = 0
        self.lookup = name_lookup(node_names) if node_names is not None else None

    def peek(self) -> Optional[str]:
        return self.tokens[self.pos][0] if self.pos < len(self.tokens) else None

    def error(self, message: str, what: Optional[str] = None) -> ConfigError:
        """``<message> in descriptor '<text>' at '<rest>' (while parsing <what>)``."""
        if self.pos < len(self.tokens):
            where = f"'{self.text[self.tokens[self.pos][1]:]}'"
        else:
            where = "end of input"
        context = f" (while parsing {what})" if what else ""
        return ConfigError(f"{message} in descriptor '{self.text}' at {where}{context}")

    def expect(self, token: str, what: str) -> None:
        if self.peek() != token:
            raise self.error(f"expected '{token}'", what)
        self.pos += 1

    def read_int(self, what: str) -> int:
        tok = self.peek()
        value = string_to_int32(tok) if tok is not None else None
        if value is None:
            raise self.error("expected an integer", what)
        self.pos += 1
        return value

    def read_real(self, what: str) -> float:
        tok = self.peek()
        value = string_to_real(tok) if tok is not None else None
        if value is None:
            raise self.error("expected a floating-point value", what)
        self.pos += 1
        return value

    def parse(self) -> GeneralDescriptor:
        tok = self.peek()
        if tok in _KEYWORDS:
            self.pos += 1
            self.expect("(", f"{tok}()")
            return getattr(self, "_parse_" + tok)(tok)
        if tok is None or tok in "(),":
            raise self.error("expected a descriptor")
        if self.lookup is None:
            if not is_valid_name(tok):
                raise self.error(f"expected a descriptor, got '{tok}'")
            self.pos += 1
            return GeneralDescriptor(K_NODE_NAME, -1, name=tok)
        index = self.lookup.get(tok)
        if index is None:
            if is_valid_name(tok):
                raise self.error(f"unknown node name '{tok}'")
            raise self.error(f"expected a descriptor, got '{tok}'")
        self.pos += 1
        return GeneralDescriptor(K_NODE_NAME, index, name=tok)

    def _parse_list(self, type_: str) -> GeneralDescriptor:
        ans = GeneralDescriptor(type_, descriptors=[self.parse()])
        while True:
            tok = self.peek()
            if tok == ")":
                self.pos += 1
                return ans
            if tok == ",":
                self.pos += 1
                ans.descriptors.append(self.parse())
            else:
                raise self.error("expected ',' or ')'", f"{type_}()")

    _parse_Append = _parse_Sum = _parse_Switch = _parse_list

    def _parse_IfDefined(self, type_: str) -> GeneralDescriptor:
        ans = GeneralDescriptor(type_, descriptors=[self.parse()])
        self.expect(")", "IfDefined()")
        return ans

    def _parse_Failover(self, type_: str) -> GeneralDescriptor:
        ans = GeneralDescriptor(type_, descriptors=[self.parse()])
        self.expect(",", "Failover()")
        ans.descriptors.append(self.parse())
        self.expect(")", "Failover()")
        return ans

    def _parse_Scale(self, type_: str) -> GeneralDescriptor:
        alpha = self.read_real("the scale of Scale()")
        self.expect(",", "Scale()")
        ans = GeneralDescriptor(type_, alpha=alpha, descriptors=[self.parse()])
        self.expect(")", "Scale()")
        return ans

    def _parse_Const(self, type_: str) -> GeneralDescriptor:
        alpha = self.read_real("the value of Const()")
        self.expect(",", "Const()")
        tok = self.peek()
        dim = string_to_int32(tok) if tok is not None else None
        if dim is None or dim <= 0:
            raise self.error("expected a positive integer dimension", "Const()")
        self.pos += 1
        self.expect(")", "Const()")
        return GeneralDescriptor(type_, dim, -1, alpha)

    def _parse_Offset(self, type_: str) -> GeneralDescriptor:
        src = self.parse()
        self.expect(",", "Offset()")
        t_offset = self.read_int("the t offset of Offset()")
        x_offset = 0
        if self.peek() == ",":
            self.pos += 1
            x_offset = self.read_int("the x offset of Offset()")
        self.expect(")", "Offset()")
        return GeneralDescriptor(type_, t_offset, x_offset, descriptors=[src])

    def _parse_Round(self, type_: str) -> GeneralDescriptor:
        src = self.parse()
        self.expect(",", "Round()")
        # Kaldi accepts any integer here and fails later (Lcm / MapToInput
        # assertions); we reject a modulus < 1 straight away.
        t_modulus = self.read_int("the t-modulus of Round()")
        if t_modulus < 1:
            self.pos -= 1
            raise self.error("expected a positive integer", "the t-modulus of Round()")
        self.expect(")", "Round()")
        return GeneralDescriptor(type_, t_modulus, descriptors=[src])

    def _parse_ReplaceIndex(self, type_: str) -> GeneralDescriptor:
        src = self.parse()
        self.expect(",", "ReplaceIndex()")
        tok = self.peek()
        if tok == "t":
            var = REPLACE_T
        elif tok == "x":
            var = REPLACE_X
        else:
            raise self.error("expected 't' or 'x'", "ReplaceIndex()")
        self.pos += 1
        self.expect(",", "ReplaceIndex()")
        value = self.read_int("the value of ReplaceIndex()")
        self.expect(")", "ReplaceIndex()")
        return GeneralDescriptor(type_, var, value, descriptors=[src])


def parse_general_descriptor(text: str,
                             node_names: Optional[NodeNames] = None) -> GeneralDescriptor:
    """Parse descriptor text into a (not normalised) :class:`GeneralDescriptor`.

    With ``node_names`` (a sequence, or a name -> index mapping) each name is
    resolved to its node index and unknown names are errors; without it any
    valid name is accepted and kept unresolved (see
    :meth:`GeneralDescriptor.resolve`).  The whole text must be consumed.
    """
    parser = _Parser(text, node_names)
    ans = parser.parse()
    if parser.peek() is not None:
        raise parser.error("expected end of input")
    return ans


def parse_descriptor(text: str, node_names: NodeNames) -> Descriptor:
    """Parse Kaldi descriptor text (``input=`` value) into a Descriptor:
    parse, normalise and convert.

    ``node_names`` is the list of node names (a name's position is its node
    index; the first one wins), or a name -> index mapping.  Raises
    ConfigError naming the problem, the descriptor and the remaining text.
    """
    general = parse_general_descriptor(text, node_names)
    try:
        return general.convert_to_descriptor()
    except _NormalizeError as e:
        raise ConfigError(f"{e} in descriptor '{text}'") from None


def normalize_descriptor_text(text: str) -> str:
    """The canonical form of ``text``, resolving names against themselves."""
    general = parse_general_descriptor(text)
    names = list(dict.fromkeys(general.referenced_names()))
    return parse_descriptor(text, names).text(names)
