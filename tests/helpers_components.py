"""Helpers for the component tests (tests/nnet/test_components_*.py): making
components from config lines, writing and re-reading them, and locating
components and their Info() lines in Kaldi's models."""
from __future__ import annotations

import os
from pathlib import Path
import re

import numpy as np
import pytest

from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.components.base import new_component_of_type, read_component, set_random_seed
from pynnet3.nnet.config_line import ConfigLine

from tests.helpers import REFERENCE as REF

needs_ref = pytest.mark.skipif(not REF.is_dir(), reason=f"{REF} not present")


def require_ref() -> None:
    if not os.path.isdir(REF):
        pytest.skip(f"{REF} is absent")


def write_bytes(comp, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    comp.write(w)
    return w.getvalue()


def read_bytes(data: bytes, binary: bool):
    return read_component(KaldiReader(data, binary, "test"))


# The component types of Kaldi's nnet-simple-component.{h,cc} (but the affine ones).
SIMPLE_TYPES = [
    "SigmoidComponent", "TanhComponent", "RectifiedLinearComponent", "SoftmaxComponent",
    "LogSoftmaxComponent", "NoOpComponent", "ClipGradientComponent", "PnormComponent",
    "SumGroupComponent", "SumBlockComponent", "PermuteComponent",
    "ElementwiseProductComponent", "DropoutComponent", "FixedScaleComponent",
    "FixedBiasComponent", "PerElementScaleComponent",
    "NaturalGradientPerElementScaleComponent", "PerElementOffsetComponent",
    "ScaleAndOffsetComponent", "ConstantFunctionComponent",
]


def make_simple(line: str, comp_type: str):
    """A component of type ``comp_type`` from its options alone, all of them used."""
    cfl = ConfigLine(line, "test.config", 1)
    comp = new_component_of_type(comp_type)
    comp.init_from_config(cfl)
    cfl.check_all_used(comp_type)
    return comp


def with_stats(c):
    """Give a nonlinear component some statistics (counts not powers of 2)."""
    g = np.random.default_rng(3)
    out = g.standard_normal((37, c.dim)).astype(np.float32)
    c.store_stats_internal(out, (out > 0).astype(np.float32))
    c.store_stats_internal(out[:11], (out[:11] > 0).astype(np.float32))
    c.oderiv_sumsq = (g.random(c.dim) * 3.0).astype(np.float64)
    c.oderiv_count = 29.0
    c.num_dims_processed = 6.0
    c.num_dims_self_repaired = 1.0
    return c


def rand_matrix(rows, cols, seed=0, scale=2.0):
    """A float32 matrix of normal values times ``scale``."""
    return (np.random.default_rng(seed).standard_normal((rows, cols)) * scale).astype(np.float32)


def propagate_rows(comp, x, out_cols=None):
    """Propagate of a simple component into a new zero matrix."""
    out = np.zeros((x.shape[0], out_cols or comp.output_dim()), dtype=np.float32)
    comp.propagate(None, x, out)
    return out


def backprop_rows(comp, x, y, dy, to_update=None):
    """Backprop of a simple component into a new input derivative."""
    dx = np.zeros_like(x)
    comp.backprop("", None, x, y, dy, None, to_update, dx)
    return dx


def make_by_type(type_name: str, config: str):
    """A component from a whole ``component name=x type=...`` line, all options used."""
    comp = new_component_of_type(type_name)
    cfl = ConfigLine(f"component name=x type={type_name} {config}", "test.config", 1)
    cfl.get_str("name")
    cfl.get_str("type")
    comp.init_from_config(cfl)
    cfl.check_all_used("test")
    return comp


def reread(data: bytes, binary: bool):
    """The component written in ``data``, which must hold nothing else."""
    r = KaldiReader(data, binary, "mem")
    comp = read_component(r)
    assert r.at_eof()
    return comp


def assert_rewrite_round_trip(comp) -> None:
    """Written, read and re-written: the same bytes, text and binary."""
    for binary in (False, True):
        data = write_bytes(comp, binary)
        again = write_bytes(reread(data, binary), binary)
        assert again == data, (comp.type_name, binary)


def typed_component_spans(data: bytes, types: set[str]):
    """(name, type, start of the body after the name, end) of each component."""
    out = []
    pos = 0
    while True:
        i = data.find(b"<ComponentName> ", pos)
        if i < 0:
            break
        j = data.index(b" ", i + 16)
        name = data[i + 16:j].decode()
        end = data.find(b"<ComponentName> ", j)
        if end < 0:
            end = data.find(b"</Nnet3>", j)
        k = j + 1
        while data[k:k + 1] in (b" ", b"\n", b"\t"):
            k += 1
        type_name = data[k + 1:data.index(b">", k)].decode()
        if type_name in types:
            out.append((name, type_name, j + 1, end))
        pos = j
    return out


# The affine family, TdnnComponent included.
AFFINE_TYPES = {"AffineComponent", "NaturalGradientAffineComponent", "LinearComponent",
         "FixedAffineComponent", "BlockAffineComponent", "RepeatedAffineComponent",
         "NaturalGradientRepeatedAffineComponent", "TdnnComponent"}


def make_affine(type_cls, line: str):
    """Like :func:`make_component`, random parameters drawn from seed 1."""
    set_random_seed(1)
    c = type_cls()
    cfl = ConfigLine(f"component name=x type={type_cls.type_name} {line}", "test.config", 1)
    cfl.get_str("name")
    cfl.get_str("type")
    c.init_from_config(cfl)
    cfl.check_all_used("component")
    return c


def affine_info_lines(path: Path) -> dict[str, tuple[str, str]]:
    """name -> (type, Info() text) for the component lines of our types."""
    out = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"component name=(\S+) type=(\S+?), ", line)
        if m and m.group(2) in AFFINE_TYPES:
            out[m.group(1)] = (m.group(2), line.rstrip("\n").split(" type=", 1)[1])
    return out


def make_component(cls, line: str):
    """A component of class ``cls`` from a config line, random parameters drawn from seed 3."""
    set_random_seed(3)
    c = cls()
    cfl = ConfigLine(f"component name=x type={cls.type_name} {line}", "test.config", 1)
    cfl.get_str("name")
    cfl.get_str("type")
    c.init_from_config(cfl)
    cfl.check_all_used("component")
    return c


def assert_round_trip(c) -> None:
    """Written and read back: same type, bytes and dims (and Info() in binary)."""
    for binary in (True, False):
        data = write_bytes(c, binary)
        c2 = read_bytes(data, binary)
        assert type(c2) is type(c)
        assert write_bytes(c2, binary) == data
        assert c2.info() == c.info() or not binary  # text rounds floats to 7 digits
        assert c2.input_dim() == c.input_dim() and c2.output_dim() == c.output_dim()


F32 = np.float32


def make_plain(cls: type, line: str):
    """A component of class ``cls`` from a bare config line, unused options allowed."""
    comp = cls()
    comp.init_from_config(ConfigLine(line, "test.config", 1))
    return comp
