"""Tests of Kaldi nnet3 Descriptors (parsing, normalisation, text, semantics)."""
from __future__ import annotations

import glob
import math
import os
import random
import re

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.nnet.config_line import ConfigLine
from pynnet3.nnet.descriptor import (
    BinarySumDescriptor, ConstantSumDescriptor, Descriptor, OffsetForwardingDescriptor,
    OptionalSumDescriptor, ReplaceIndexForwardingDescriptor, RoundingForwardingDescriptor,
    SimpleForwardingDescriptor, SimpleSumDescriptor, SwitchingForwardingDescriptor)
from pynnet3.nnet.descriptor_parse import (GeneralDescriptor, normalize_descriptor_text,
                                           parse_descriptor, parse_general_descriptor,
                                           tokenize_descriptor)
from pynnet3.nnet.index import K_NO_TIME, Index
from tests.helpers import REFERENCE, enough

REF = str(REFERENCE)
NAMES = ["a", "b", "c", "d"]


def norm(text: str, names=NAMES) -> str:
    return parse_descriptor(text, names).text(names)


# ---------------------------------------------------------------------------
# Normalisation: Kaldi's UnitTestGeneralDescriptorSpecial and more
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,expected", [
    ("a", "a"),
    ("Scale(-1.0, a)", "Scale(-1, a)"),
    ("Scale(-1.0, Scale(-2.0, a))", "Scale(2, a)"),
    ("Scale(2.0, Sum(Scale(2.0, a), b, c))",
     "Sum(Scale(4, a), Sum(Scale(2, b), Scale(2, c)))"),
    ("Const(1.0, 512)", "Const(1, 512)"),
    ("Sum(Const(1.0, 512), Scale(-1.0, a))", "Sum(Const(1, 512), Scale(-1, a))"),
    ("Offset(Offset(a, 3, 5), 2, 1)", "Offset(a, 5, 6)"),
    ("Offset(Sum(a, b), 2, 1)", "Sum(Offset(a, 2, 1), Offset(b, 2, 1))"),
    ("Sum(Append(a, b), Append(c, d))", "Append(Sum(a, c), Sum(b, d))"),
    ("Append(Append(a, b), Append(c, d))", "Append(a, b, c, d)"),
    ("Sum(a, b, c, d)", "Sum(a, Sum(b, Sum(c, d)))"),
    ("Sum(a)", "a"),
    ("Offset(a, 0)", "a"),
    # more cases, worked out from Kaldi's Normalize()
    ("Append(a)", "a"),
    ("Offset(a, 0, 0)", "a"),
    ("Offset(Offset(a, 1), -1)", "a"),
    ("Offset(a, 0, 2)", "Offset(a, 0, 2)"),
    ("Scale(1.0, a)", "a"),
    ("Scale(0.5, Scale(2, a))", "a"),
    ("Scale(0.1, a)", "Scale(0.1, a)"),
    ("Scale(1e-7, a)", "Scale(1e-07, a)"),
    ("Scale(2, Offset(a, 1))", "Offset(Scale(2, a), 1)"),
    ("Scale(2, ReplaceIndex(a, t, 0))", "ReplaceIndex(Scale(2, a), t, 0)"),
    ("Scale(2, Round(a, 3))", "Round(Scale(2, a), 3)"),
    ("Scale(2, Offset(Sum(a, b), 1))", "Sum(Offset(Scale(2, a), 1), Offset(Scale(2, b), 1))"),
    ("Offset(Append(a, b), -1)", "Append(Offset(a, -1), Offset(b, -1))"),
    ("Scale(3, Append(a, b))", "Append(Scale(3, a), Scale(3, b))"),
    ("Offset(Failover(a, b), 1)", "Failover(Offset(a, 1), Offset(b, 1))"),
    ("Offset(IfDefined(a), -3)", "IfDefined(Offset(a, -3))"),
    ("Round(Sum(a, b), 2)", "Sum(Round(a, 2), Round(b, 2))"),
    ("ReplaceIndex(IfDefined(a), x, 1)", "IfDefined(ReplaceIndex(a, x, 1))"),
    ("Switch(Sum(a, b))", "Sum(Switch(a), Switch(b))"),
    ("Switch(a, Offset(b, 1), Round(c, 2))", "Switch(a, Offset(b, 1), Round(c, 2))"),
    ("Offset(Switch(a, b), 1)", "Offset(Switch(a, b), 1)"),
    ("Offset(Sum(a, Offset(b, 1)), 2)", "Sum(Offset(a, 2), Offset(b, 3))"),
    ("IfDefined(Sum(a, b))", "IfDefined(Sum(a, b))"),
    ("Failover(Sum(a, b), IfDefined(c))", "Failover(Sum(a, b), IfDefined(c))"),
    ("Append(Sum(a, Const(2, 5)), Const(-0.5, 3))", "Append(Sum(a, Const(2, 5)), Const(-0.5, 3))"),
    ("Append(Offset(a, -1), a, Offset(a, 1), ReplaceIndex(b, t, 0))",
     "Append(Offset(a, -1), a, Offset(a, 1), ReplaceIndex(b, t, 0))"),
    ("  Sum ( a ,\tb )  ", "Sum(a, b)"),
    ("Offset(a, +3)", "Offset(a, 3)"),
    ("Scale(.5, a)", "Scale(0.5, a)"),
])
def test_normalize_text(text, expected):
    assert norm(text) == expected
    # the canonical text is a fixed point
    assert norm(expected) == expected
    assert parse_descriptor(expected, NAMES) == parse_descriptor(text, NAMES)


def test_normalize_structure():
    d = parse_descriptor("Append(Sum(Scale(0.5, a), IfDefined(Offset(b, -2, 1))), "
                         "Failover(Switch(c, d), Const(1, 7)))", NAMES)
    assert d.num_parts() == 2
    assert d.part(0) == BinarySumDescriptor(
        "Sum", SimpleSumDescriptor(SimpleForwardingDescriptor(0, 0.5)),
        OptionalSumDescriptor(SimpleSumDescriptor(
            OffsetForwardingDescriptor(SimpleForwardingDescriptor(1), Index(0, -2, 1)))))
    assert d.part(1) == BinarySumDescriptor(
        "Failover",
        SimpleSumDescriptor(SwitchingForwardingDescriptor(
            [SimpleForwardingDescriptor(2), SimpleForwardingDescriptor(3)])),
        ConstantSumDescriptor(1.0, 7))
    assert d.copy() == d and d.copy() is not d
    assert d != parse_descriptor("Append(a, b)", NAMES)


def test_general_descriptor_name_agnostic():
    g = parse_general_descriptor("Append(Offset(foo, -1), bar, Sum(foo, baz.x))")
    assert isinstance(g, GeneralDescriptor)
    assert g.referenced_names() == ["foo", "bar", "foo", "baz.x"]
    assert g.text() == "Append(Offset(foo, -1), bar, Sum(foo, baz.x))"
    names = ["bar", "baz.x", "foo"]
    d = g.resolve(names).convert_to_descriptor()
    assert d == parse_descriptor("Append(Offset(foo, -1), bar, Sum(foo, baz.x))", names)
    assert d.get_node_dependencies() == [0, 1, 2]
    with pytest.raises(ConfigError, match="unknown node name 'foo'"):
        g.resolve(["bar", "baz.x"])
    # normalized() returns a new tree and leaves the original alone
    g2 = parse_general_descriptor("Sum(a, b, c)")
    assert g2.normalized().text() == "Sum(a, Sum(b, c))"
    assert g2.text() == "Sum(a, b, c)"
    assert normalize_descriptor_text("Offset(Sum(x, y), 1)") == "Sum(Offset(x, 1), Offset(y, 1))"


def test_name_lookup_mapping_and_first_wins():
    assert parse_descriptor("b", {"a": 0, "b": 5}).get_node_dependencies() == [5]
    # a repeated name resolves to its first node, like Kaldi's linear search
    assert parse_descriptor("a", ["x", "a", "a"]).get_node_dependencies() == [1]
    # reserved words are never node names
    with pytest.raises(ConfigError, match="expected '\\('"):
        parse_descriptor("Sum", ["Sum"])


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("text,message", [
    ("Offset(a -1)", "expected ',' in descriptor 'Offset(a -1)' at '-1)'"),
    ("Offset(a, 1.5)", "expected an integer in descriptor 'Offset(a, 1.5)' at '1.5)'"),
    ("Offset(a, 1, 2, 3)", "expected ')' in descriptor 'Offset(a, 1, 2, 3)' at ', 3)'"),
    ("Offset(a, 2147483648)", "expected an integer"),
    ("foo", "unknown node name 'foo' in descriptor 'foo' at 'foo'"),
    ("Append(a, foo)", "unknown node name 'foo'"),
    ("Append(a, 1.5)", "expected a descriptor, got '1.5'"),
    ("", "expected a descriptor in descriptor '' at end of input"),
    ("Append(a,", "at end of input"),
    ("Append(a b)", "expected ',' or ')' in descriptor 'Append(a b)' at 'b)'"),
    ("a b", "expected end of input in descriptor 'a b' at 'b'"),
    ("a)", "expected end of input"),
    ("Sum a", "expected '('"),
    ("IfDefined(a, b)", "expected ')'"),
    ("Failover(a)", "expected ','"),
    ("Failover(a, b, c)", "expected ')'"),
    ("Scale(a, b)", "expected a floating-point value in descriptor 'Scale(a, b)' at 'a, b)'"),
    ("Scale(1e50, a)", "could not tokenize"),
    ("a=b", "could not tokenize"),
    ("Const(1, 0)", "expected a positive integer dimension"),
    ("Const(1, -3)", "expected a positive integer dimension"),
    ("Const(x, 3)", "expected a floating-point value"),
    ("Const(nan, 3)", "Const() value must be finite"),
    ("Round(a, 0)", "expected a positive integer"),
    ("Round(a, 2.5)", "expected an integer"),
    ("ReplaceIndex(a, n, 0)", "expected 't' or 'x' in descriptor"),
    ("ReplaceIndex(a, t, b)", "expected an integer"),
    ("Sum(Append(a, b), c)", "different numbers of terms (2 vs. 1)"),
    ("Failover(a, Append(b, c))", "different numbers of terms (1 vs. 2)"),
    ("Scale(2, Failover(a, b))", "cannot normalize Scale() applied to Failover()"),
    ("Scale(2, IfDefined(a))", "cannot normalize Scale() applied to IfDefined()"),
    ("Scale(2, Switch(a, b))", "cannot normalize Scale() applied to Switch()"),
    ("Scale(2, Const(1, 3))", "cannot normalize Scale() applied to Const()"),
    ("Switch(Sum(a, b), c)", "Sum() expression as the first argument of Switch()"),
    ("Switch(a, Sum(b, c))", "Sum() cannot appear inside Switch()"),
    ("Offset(Const(1, 3), 1)", "Const() appears too deep"),
    ("Switch(a, Const(1, 3))", "Const() appears too deep"),
])
def test_parse_errors(text, message):
    with pytest.raises(ConfigError) as info:
        parse_descriptor(text, NAMES)
    assert message in str(info.value)
    assert f"'{text}'" in str(info.value)


def test_tokenize():
    assert tokenize_descriptor("Offset( in.put ,-1)") == [
        ("Offset", 0), ("(", 6), ("in.put", 8), (",", 15), ("-1", 16), (")", 18)]
    assert [t for t, _ in tokenize_descriptor("Scale(1e-3,x)")] == ["Scale", "(", "1e-3", ",", "x", ")"]


# ---------------------------------------------------------------------------
# Semantics
# ---------------------------------------------------------------------------
def test_dependencies_and_map_to_input():
    names = ["input", "ivector"]
    d = parse_descriptor("Append(Offset(input, -1), input, Offset(input, 1), "
                         "ReplaceIndex(ivector, t, 0))", names)
    assert d.text(names) == ("Append(Offset(input, -1), input, Offset(input, 1), "
                             "ReplaceIndex(ivector, t, 0))")
    assert d.get_dependencies(Index(2, 5, 0)) == [
        (0, Index(2, 4, 0)), (0, Index(2, 5, 0)), (0, Index(2, 6, 0)), (1, Index(2, 0, 0))]
    assert d.get_node_dependencies() == [0, 1]
    assert d.modulus() == 1
    assert d.dim(lambda n: [40, 100][n]) == 220

    fd = parse_descriptor("Offset(a, 2, -1)", NAMES).part(0).src
    assert fd.map_to_input(Index(0, 3, 1)) == (0, Index(0, 5, 0))
    # int32 wrap-around as in Kaldi when offsetting kNoTime
    assert fd.map_to_input(Index(0, K_NO_TIME, 0))[1].t == K_NO_TIME + 2
    assert (parse_descriptor("Offset(a, -1)", NAMES).part(0).src
            .map_to_input(Index(0, K_NO_TIME, 0))[1].t == 2 ** 31 - 1)
    sw = parse_descriptor("Switch(a, b, c)", NAMES).part(0).src
    assert [sw.map_to_input(Index(0, t, 0))[0] for t in range(-4, 4)] == [2, 0, 1, 2, 0, 1, 2, 0]
    rd = parse_descriptor("Round(a, 3)", NAMES).part(0).src
    assert [rd.map_to_input(Index(0, t, 0))[1].t for t in range(-4, 4)] == [-6, -3, -3, -3, 0, 0, 0, 3]
    rx = parse_descriptor("ReplaceIndex(a, x, 7)", NAMES).part(0).src
    assert rx.map_to_input(Index(1, 2, 3)) == (0, Index(1, 2, 7))
    # Offset is applied before the inner ReplaceIndex, so it has no effect on t
    rt = parse_descriptor("Offset(ReplaceIndex(a, t, 0), 5)", NAMES).part(0).src
    assert rt.map_to_input(Index(1, 2, 0)) == (0, Index(1, 0, 0))
    assert parse_descriptor("Sum(a, Sum(b, a))", NAMES).get_dependencies(Index(0, 1, 0)) == [
        (0, Index(0, 1, 0)), (1, Index(0, 1, 0)), (0, Index(0, 1, 0))]
    assert parse_descriptor("Sum(a, Const(1, 5))", NAMES).get_dependencies(Index()) == [(0, Index())]


def test_modulus():
    assert parse_descriptor("Switch(a, b, c)", NAMES).modulus() == 3
    assert parse_descriptor("Round(a, 4)", NAMES).modulus() == 4
    assert parse_descriptor("Append(Switch(a, b), Round(c, 3))", NAMES).modulus() == 6
    assert parse_descriptor("Sum(Round(a, 4), Offset(Round(b, 6), 1))", NAMES).modulus() == 12
    assert parse_descriptor("Switch(Round(a, 4), b)", NAMES).modulus() == 4
    # Kaldi: ReplaceIndex has modulus 1; Round ignores its argument's modulus
    assert parse_descriptor("ReplaceIndex(Switch(a, b), t, 0)", NAMES).modulus() == 1
    assert parse_descriptor("Round(Switch(a, b, c), 2)", NAMES).modulus() == 2


def test_dim():
    dims = {0: 10, 1: 10, 2: 20, 3: 5}.__getitem__
    assert parse_descriptor("Append(a, c, Const(1, 3))", NAMES).dim(dims) == 33
    assert parse_descriptor("Sum(a, Failover(b, Const(0, 10)))", NAMES).dim(dims) == 10
    assert parse_descriptor("IfDefined(Offset(c, -1))", NAMES).dim(dims) == 20
    # only Switch's first argument counts, as in Kaldi
    assert parse_descriptor("Switch(d, c)", NAMES).dim(dims) == 5
    with pytest.raises(ConfigError, match="Sum expression with inconsistent dimension: 10 vs. 20"):
        parse_descriptor("Sum(a, c)", NAMES).dim(dims)
    with pytest.raises(ConfigError, match="Failover expression with inconsistent dimension: 10 vs. 3"):
        parse_descriptor("Failover(a, Const(1, 3))", NAMES).dim(dims)


class _Avail:
    """A CindexSet-like container that counts lookups."""

    def __init__(self, items):
        self.items = set(items)
        self.lookups = 0

    def __contains__(self, c):
        self.lookups += 1
        return c in self.items


def test_is_computable():
    i = Index(0, 5, 0)
    a5, b5, a4, c5 = (0, Index(0, 5, 0)), (1, Index(0, 5, 0)), (0, Index(0, 4, 0)), (2, i)
    avail = {a5, a4}

    def comp(text, cset=avail):
        d = parse_descriptor(text, NAMES)
        used: list = ["junk"]
        ok = d.is_computable(i, cset, used)
        assert d.is_computable(i, cset) == ok
        used_set: set = {"junk"}
        assert d.is_computable(i, cset, used_set) == ok
        assert used_set == set(used)
        return ok, used

    assert comp("a") == (True, [a5])
    assert comp("b") == (False, [])
    assert comp("Sum(a, Offset(a, -1))") == (True, [a5, a4])
    assert comp("Sum(a, b)") == (False, [])
    assert comp("Sum(a, IfDefined(b))") == (True, [a5])
    assert comp("IfDefined(b)") == (True, [])
    assert comp("IfDefined(Sum(a, b))") == (True, [])
    assert comp("IfDefined(Sum(a, Offset(a, -1)))") == (True, [a5, a4])
    assert comp("Failover(b, a)") == (True, [a5])
    assert comp("Failover(a, Offset(a, -1))") == (True, [a5])
    assert comp("Failover(b, c)") == (False, [])
    assert comp("Failover(b, Const(1, 3))") == (True, [])
    assert comp("Sum(Const(1, 3), a)") == (True, [a5])
    assert comp("Append(a, IfDefined(b), Offset(a, -1))") == (True, [a5, a4])
    assert comp("Append(a, b)") == (False, [])
    assert comp("Sum(a, b)", {a5, b5, c5}) == (True, [a5, b5])
    # Failover evaluates both sides (Kaldi does not short-circuit)
    cset = _Avail(avail)
    parse_descriptor("Failover(a, b)", NAMES).is_computable(i, cset)
    assert cset.lookups == 2


def test_get_scale_for_node():
    p = parse_descriptor("Sum(Scale(0.66, a), b)", NAMES).part(0)
    assert p.get_scale_for_node(0) == pytest.approx(0.66, rel=1e-7)
    assert p.get_scale_for_node(0) == _F32_066
    assert p.get_scale_for_node(1) == 1.0
    assert p.get_scale_for_node(2) == math.inf
    assert p.get_scale_for_node(-1) == 0.0
    p = parse_descriptor("Sum(Offset(Scale(2, a), -1), Sum(Scale(2, a), Const(0.5, 4)))", NAMES).part(0)
    assert p.get_scale_for_node(0) == 2.0
    assert p.get_scale_for_node(-1) == 0.5
    assert parse_descriptor("Sum(Const(1, 4), Const(2, 4))", NAMES).part(0).get_scale_for_node(-1) == 3.0
    assert parse_descriptor("Switch(Scale(3, a), b)", NAMES).part(0).get_scale_for_node(0) == 3.0
    assert parse_descriptor("Failover(a, b)", NAMES).part(0).get_scale_for_node(-1) == 0.0
    assert parse_descriptor("IfDefined(Offset(a, -1))", NAMES).part(0).get_scale_for_node(-1) == 0.0
    for text, node, msg in [("Sum(a, Scale(2, a))", 0, "inconsistent scales"),
                            ("Switch(a, Scale(2, a))", 0, "two different scales"),
                            ("IfDefined(Const(1, 4))", -1, "IfDefined() and Const()"),
                            ("Failover(a, Const(1, 4))", -1, "Failover() and Const()")]:
        with pytest.raises(ConfigError, match=re.escape(msg)):
            parse_descriptor(text, NAMES).part(0).get_scale_for_node(node)


# ---------------------------------------------------------------------------
# Random descriptors (seeded property tests)
# ---------------------------------------------------------------------------
_F32_066 = float(np.float32(0.66))  # scales are float32, as Kaldi's BaseFloat


def _gen_forwarding(rng: random.Random, num_nodes: int, depth: int = 0):
    """Like Kaldi's GenRandForwardingDescriptor, plus random scales."""
    if rng.randrange(2) != 0 or depth > 4:
        return SimpleForwardingDescriptor(rng.randrange(num_nodes),
                                          rng.choice([1.0, 1.0, 0.5, -2.0, _F32_066]))
    r = rng.randrange(4)
    if r == 0:
        return OffsetForwardingDescriptor(_gen_forwarding(rng, num_nodes, depth + 1),
                                          Index(0, rng.randrange(5), rng.randrange(2)))
    if r == 1:
        return SwitchingForwardingDescriptor(
            [_gen_forwarding(rng, num_nodes, depth + 1) for _ in range(1 + rng.randrange(3))])
    if r == 2:
        return RoundingForwardingDescriptor(_gen_forwarding(rng, num_nodes, depth + 1),
                                            1 + rng.randrange(4))
    return ReplaceIndexForwardingDescriptor(_gen_forwarding(rng, num_nodes, depth + 1),
                                            rng.choice("tx"), -2 + rng.randrange(4))


def _gen_sum(rng: random.Random, num_nodes: int, depth: int = 0):
    if rng.randrange(3) != 0 or depth > 3:
        if rng.randrange(5) == 0:
            return OptionalSumDescriptor(_gen_sum(rng, num_nodes, depth + 1))
        if rng.randrange(10) == 0:
            return ConstantSumDescriptor(rng.choice([1.0, -0.5, 0.25]), 10)
        return SimpleSumDescriptor(_gen_forwarding(rng, num_nodes))
    return BinarySumDescriptor(rng.choice(["Sum", "Failover"]),
                               _gen_sum(rng, num_nodes, depth + 1),
                               _gen_sum(rng, num_nodes, depth + 1))


def _random_indexes(rng, n=4):
    return [Index(rng.randrange(2), rng.randrange(-6, 7), rng.randrange(2)) for _ in range(n)]


def _random_cindex_set(rng, num_nodes):
    return {(node, Index(n, t, x)) for node in range(num_nodes) for n in range(2)
            for t in range(-12, 13) for x in range(-3, 4) if rng.random() < 0.7}


def _semantics(desc: Descriptor, indexes, cset):
    out = []
    for ind in indexes:
        used: list = []
        out.append((desc.is_computable(ind, cset, used), used, desc.get_dependencies(ind)))
    return out


def test_random_descriptor_io():
    """Kaldi's UnitTestDescriptorIo: write -> parse gives the same descriptor,
    except where Offset normalisation legitimately changes it (and then the
    meaning is unchanged)."""
    rng = random.Random(1234)
    for _ in range(300):
        num_nodes = 1 + rng.randrange(5)
        names = [f"a{i + 1}" for i in range(num_nodes)]
        desc = Descriptor([_gen_sum(rng, num_nodes) for _ in range(1 + rng.randrange(3))])
        text = desc.text(names)
        assert desc.copy().text(names) == text
        desc2 = parse_descriptor(text, names)
        text2 = desc2.text(names)
        if text2 != text:
            assert "Offset(Offset" in text or ", 0)" in text or ", 0, " in text, (text, text2)
        else:
            assert desc2 == desc
        assert parse_descriptor(text2, names) == desc2
        assert parse_descriptor(text2, names).text(names) == text2
        assert desc2.modulus() == desc.modulus()
        assert desc2.get_node_dependencies() == desc.get_node_dependencies()
        assert desc2.dim(lambda n: 10) == desc.dim(lambda n: 10) == 10 * desc.num_parts()
        indexes = _random_indexes(rng)
        cset = _random_cindex_set(rng, num_nodes)
        assert _semantics(desc2, indexes, cset) == _semantics(desc, indexes, cset)


# A direct interpreter of un-normalised expressions, to check that
# normalisation keeps the meaning.  A part's value is None (not computable) or
# (list of (cindex, scale), constant).
def _interp(g: GeneralDescriptor, ind: Index, cset) -> list:
    t = g.type
    if t == "NodeName":
        c = (g.value1, ind)
        return [([(c, 1.0)], 0.0) if c in cset else None]
    if t == "Const":
        return [([], g.alpha)]
    if t == "Append":
        return [p for d in g.descriptors for p in _interp(d, ind, cset)]
    if t == "Offset":
        return _interp(g.descriptors[0], Index(ind.n, ind.t + g.value1, ind.x + g.value2), cset)
    if t == "Round":
        return _interp(g.descriptors[0], Index(ind.n, ind.t - ind.t % g.value1, ind.x), cset)
    if t == "ReplaceIndex":
        new = Index(ind.n, g.value2, ind.x) if g.value1 == 1 else Index(ind.n, ind.t, g.value2)
        return _interp(g.descriptors[0], new, cset)
    if t == "Switch":
        return _interp(g.descriptors[ind.t % len(g.descriptors)], ind, cset)
    if t == "Scale":
        return [None if p is None else ([(c, s * g.alpha) for c, s in p[0]], p[1] * g.alpha)
                for p in _interp(g.descriptors[0], ind, cset)]
    if t == "IfDefined":
        return [([], 0.0) if p is None else p for p in _interp(g.descriptors[0], ind, cset)]
    args = [_interp(d, ind, cset) for d in g.descriptors]
    out = []
    for parts in zip(*args):
        if t == "Sum":
            if any(p is None for p in parts):
                out.append(None)
            else:
                out.append(([x for p in parts for x in p[0]], sum(p[1] for p in parts)))
        else:
            assert t == "Failover"
            out.append(parts[0] if parts[0] is not None else parts[1])
    return out


def _gen_text(rng: random.Random, depth: int = 0) -> str:
    names = ["a", "b", "c"]
    if depth > 3 or rng.random() < 0.3:
        return rng.choice(names)
    sep = rng.choice([", ", ",", " , "])
    k = rng.randrange(11)
    sub = lambda: _gen_text(rng, depth + 1)  # noqa: E731
    if k == 0:
        return "Append(" + sep.join(sub() for _ in range(rng.randrange(1, 4))) + ")"
    if k == 1:
        return "Sum(" + sep.join(sub() for _ in range(rng.randrange(1, 4))) + ")"
    if k == 2:
        return f"Failover({sub()}{sep}{sub()})"
    if k == 3:
        return f"IfDefined({sub()})"
    if k == 4:
        x = rng.choice(["", f"{sep}{rng.randrange(-1, 2)}"])
        return f"Offset({sub()}{sep}{rng.randrange(-3, 4)}{x})"
    if k == 5:
        return "Switch(" + sep.join(sub() for _ in range(rng.randrange(1, 4))) + ")"
    if k == 6:
        return f"Round({sub()}{sep}{rng.randrange(1, 5)})"
    if k == 7:
        return f"ReplaceIndex({sub()}{sep}{rng.choice('tx')}{sep}{rng.randrange(-2, 3)})"
    if k == 8 or k == 9:
        return f"Scale({rng.choice(['0.5', '-1.0', '2', '1', '0.25'])}{sep}{sub()})"
    return f"Const({rng.choice(['1.0', '-2', '0.5'])}{sep}10)"


def test_random_general_descriptors():
    """Random free-form expressions: either a ConfigError, or a Descriptor
    whose text is a fixed point and whose meaning equals the raw tree's."""
    rng = random.Random(99)
    names = ["a", "b", "c"]
    num_ok = num_err = 0
    for _ in range(1500):
        text = _gen_text(rng)
        try:
            desc = parse_descriptor(text, names)
        except ConfigError as e:
            assert f"'{text}'" in str(e)
            num_err += 1
            continue
        num_ok += 1
        canon = desc.text(names)
        desc2 = parse_descriptor(canon, names)
        assert desc2 == desc, (text, canon)
        assert desc2.text(names) == canon
        assert "Append(" not in canon[1:]  # Append only at the top
        raw = parse_general_descriptor(text, names)
        for ind in _random_indexes(rng, 3):
            cset = _random_cindex_set(rng, 3)
            expected = _interp(raw, ind, cset)
            assert len(expected) == desc.num_parts()
            used: list = []
            ok = desc.is_computable(ind, cset, used)
            assert ok == all(p is not None for p in expected), (text, canon, ind)
            if not ok:
                continue
            exp_inputs = sorted(c for p in expected for c, _ in p[0])
            assert sorted(used) == exp_inputs, (text, canon, ind)
            for part, p in zip(desc.parts, expected):
                pu: list = []
                assert part.is_computable(ind, cset, pu)
                try:
                    scales = [(c, part.get_scale_for_node(c[0])) for c in pu]
                    const = part.get_scale_for_node(-1)
                except ConfigError:
                    continue  # combination Kaldi's compiler rejects
                got, want = sorted(scales), sorted(p[0])
                assert [c for c, _ in got] == [c for c, _ in want]
                assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=1e-6)
                assert const == pytest.approx(p[1], rel=1e-6)
    assert num_ok > 300 and num_err > 100, (num_ok, num_err)


# ---------------------------------------------------------------------------
# Kaldi reference networks
# ---------------------------------------------------------------------------
_NODE_LINES = ("input-node", "component-node", "output-node", "dim-range-node")


def _node_lines(paths):
    """(node names in index order, {node: input descriptor text}), later lines
    redefining earlier ones as Kaldi's ReadConfig does."""
    names: dict = {}
    descs: dict = {}
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                line = line.split("#")[0].strip()
                if not line or line.split()[0] not in _NODE_LINES:
                    continue
                cl = ConfigLine(line)
                name = cl.get_str("name")
                names.setdefault(name, len(names))
                if line.split()[0] in ("component-node", "output-node"):
                    descs[name] = cl.get_str("input")
    return list(names), descs


def _ref_cases():
    cases = []
    for d in sorted(glob.glob(f"{REF}/configs/*/")):
        cases.append(([d + "ref.config"], d + "kaldi-nnet3-info.txt"))
    for d in sorted(glob.glob(f"{REF}/random/[0-9]*/")):
        cfgs = sorted(glob.glob(d + "config*.txt"),
                      key=lambda p: int(re.findall(r"\d+", os.path.basename(p))[0]))
        cases.append((cfgs, d + "nnet-info.txt"))
    for d in sorted(glob.glob(f"{REF}/small/*/")):
        if os.path.exists(d + "final.config"):
            cases.append(([d + "final.config"], d + "nnet3-info.txt"))
    return cases


def test_reference_configs_match_kaldi_info():
    if not os.path.isdir(REF):
        pytest.skip(f"reference data ({REF}) absent")
    total = matched = 0
    mismatches = []
    for cfgs, info in _ref_cases():
        names, descs = _node_lines(cfgs)
        _, kaldi = _node_lines([info])
        for name, text in descs.items():
            desc = parse_descriptor(text, names)
            out = desc.text(names)
            again = parse_descriptor(out, names)
            assert again == desc and again.text(names) == out
            if name in kaldi:
                total += 1
                if kaldi[name] == out:
                    matched += 1
                else:
                    mismatches.append((info, name, text, out, kaldi[name]))
    assert total > enough(1000, 250)
    assert not mismatches, f"{matched}/{total} match; first: {mismatches[:3]}"


def test_reference_printed_descriptors_are_fixed_points():
    if not os.path.isdir(REF):
        pytest.skip(f"reference data ({REF}) absent")
    files = (glob.glob(f"{REF}/vosk_ko/nnet3-info.txt")
             + glob.glob(f"{REF}/random/*/final.txt.raw")
             + glob.glob(f"{REF}/small/*/nnet3-info.txt"))
    total = 0
    for path in files:
        names, descs = _node_lines([path])
        for text in descs.values():
            assert parse_descriptor(text, names).text(names) == text, (path, text)
            total += 1
    assert total > enough(500, 120)
