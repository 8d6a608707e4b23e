"""NormalizeComponent and BatchNormComponent (normalization.py): config, I/O,
statistics, Kaldi's nnet3-copy / nnet3-average bytes, propagate, and the
in-place training-mode BatchNorm against its plain definition, bit for bit."""
from __future__ import annotations

import glob
import math
import os

import numpy as np
import pytest

from pynnet3.errors import ConfigError, FormatError
from pynnet3.io.kaldi_io import KaldiReader
from pynnet3.nnet.components.base import Prop, read_component
from pynnet3.nnet.components.normalization import BatchNormComponent

from tests.helpers import HAVE_FULL_REFERENCE
from tests.helpers_components import (F32, REF, assert_rewrite_round_trip, make_by_type, make_plain,
                                      require_ref, reread, typed_component_spans, write_bytes)


def test_batchnorm_binary_to_text_matches_kaldi_copy():
    """1.txt.raw is Kaldi's nnet3-copy --binary=false of 1.raw: reading the
    binary BatchNorm and writing text must give Kaldi's text exactly."""
    require_ref()
    n = 0
    for d in sorted(glob.glob(f"{REF}/small/*_*/")):
        if not os.path.exists(d + "1.txt.raw"):
            continue
        b = open(d + "1.raw", "rb").read()
        t = open(d + "1.txt.raw", "rb").read()
        text_spans = {nm: (s, e) for nm, _, s, e in typed_component_spans(t,
                                                                          {"BatchNormComponent"})}
        for name, _, s, e in typed_component_spans(b, {"BatchNormComponent"}):
            comp = read_component(KaldiReader(b, True, "b", pos=s))
            ts, te = text_spans[name]
            assert write_bytes(comp, False) + b"\n" == t[ts:te], (d, name)
            n += 1
    if n == 0 and not HAVE_FULL_REFERENCE:
        pytest.skip("no small/*/1.txt.raw (Kaldi's text copy) in the curated subset")
    assert n >= 10


def test_batchnorm_average_matches_kaldi():
    """nnet3-average 1.raw 1b.raw avg.raw = read, Scale(0.5), Add(0.5, other),
    write: the BatchNorm bytes must equal Kaldi's."""
    require_ref()
    d = f"{REF}/train/ngaffine_bn/"
    if not os.path.exists(d + "avg.raw"):
        pytest.skip("train/ngaffine_bn absent")
    a, b, avg = (open(d + f, "rb").read() for f in ("1.raw", "1b.raw", "avg.raw"))
    types = {"BatchNormComponent"}
    sb = {nm: s for nm, _, s, _ in typed_component_spans(b, types)}
    sv = {nm: (s, e) for nm, _, s, e in typed_component_spans(avg, types)}
    n = 0
    for name, _, s, _ in typed_component_spans(a, types):
        ca = read_component(KaldiReader(a, True, "a", pos=s))
        cb = read_component(KaldiReader(b, True, "b", pos=sb[name]))
        ca.scale(0.5)
        ca.add(0.5, cb)
        vs, ve = sv[name]
        assert write_bytes(ca, True) == avg[vs:ve], name
        n += 1
    assert n == 2


def test_normalize_config_and_io():
    c = make_by_type("NormalizeComponent", "dim=12 block-dim=4 add-log-stddev=true target-rms=0.5")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (12, 15, 0)
    p = c.properties()
    assert p & Prop.SIMPLE and p & Prop.INPUT_CONTIGUOUS and not p & Prop.PROPAGATE_IN_PLACE
    assert c.info() == ("NormalizeComponent, input-dim=12, output-dim=15, target-rms=0.5, "
                        "add-log-stddev=true, block-dim=4")
    assert_rewrite_round_trip(c)
    c2 = make_by_type("NormalizeComponent", "input-dim=10")
    assert c2.output_dim() == 10 and c2.properties() & Prop.PROPAGATE_IN_PLACE
    assert write_bytes(c2, False) == (b"<NormalizeComponent> <InputDim> 10 <TargetRms> 1 "
                                      b"<AddLogStddev> F </NormalizeComponent> ")
    for bad in ("dim=10 block-dim=3", "dim=0", "dim=4 target-rms=0", "block-dim=2"):
        with pytest.raises(ConfigError):
            make_by_type("NormalizeComponent", bad)


def test_normalize_reads_legacy_forms():
    old = (b"<NormalizeComponent> <Dim> 6 <ValueAvg> [ 1 2 ] <DerivAvg> [ 3 4 ] "
           b"<Count> 5 </NormalizeComponent> ")
    c = reread(old, False)
    assert (c.input_dim(), c.block_dim, c.target_rms, c.add_log_stddev) == (6, 6, 1.0, False)
    with pytest.raises(FormatError):
        reread(b"<NormalizeComponent> <Foo> 6 </NormalizeComponent> ", False)


def test_batchnorm_config_io_and_stats():
    c = make_by_type("BatchNormComponent", "dim=12 block-dim=4 epsilon=0.01 target-rms=2")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (12, 12, 0)
    p = c.properties()
    assert p & Prop.STORES_STATS and p & Prop.USES_MEMO and p & Prop.INPUT_CONTIGUOUS
    assert c.info() == ("BatchNormComponent, dim=12, block-dim=4, epsilon=0.01, target-rms=2, "
                        "count=0, test-mode=false")
    assert_rewrite_round_trip(c)
    for bad in ("block-dim=4", "dim=12 block-dim=5", "dim=4 epsilon=0", "dim=4 target-rms=-1"):
        with pytest.raises(ConfigError):
            make_by_type("BatchNormComponent", bad)
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
    c = make_by_type("BatchNormComponent", "dim=3 target-rms=0.5 epsilon=0.1")
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
    c = make_by_type("BatchNormComponent", "dim=5 test-mode=true")
    assert c.count == 1.0 and c.scale_.shape == (5,) and np.all(c.scale_ > 0)


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
    c = make_by_type("NormalizeComponent", cfg)
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
    c = make_by_type("BatchNormComponent", cfg)
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


@pytest.mark.parametrize("use_jit", [False, True], ids=["numpy", "numba"])
@pytest.mark.parametrize("spread", [0.0, 8.0], ids=["plain", "wide-magnitudes"])
def test_batchnorm_train_mode_bitwise(use_jit: bool, spread: float) -> None:
    """Both ways (NumPy and the Numba loops) give the definition's bits; with
    wide magnitudes the double column sums depend on their order (row 0
    first, as Kaldi's and NumPy's)."""
    rng = np.random.default_rng(1)
    for line, shape in (("dim=64", (300, 64)), ("dim=64 block-dim=16", (100, 64))):
        comp = make_plain(BatchNormComponent, line)
        x = np.maximum(rng.standard_normal(shape), 0)
        x = (x * np.exp(spread * rng.standard_normal(shape))).astype(F32)
        out = np.empty_like(x)
        memo = comp.propagate(None, x, out, use_jit=use_jit)
        # The definition: double column sums, float arithmetic.
        block = comp.block_dim
        xb = x.reshape(-1, block)
        n = xb.shape[0]
        x64 = xb.astype(np.float64)
        mean = x64.sum(axis=0).astype(F32) * F32(1.0 / n)
        uvar = np.einsum("ij,ij->j", x64, x64).astype(F32) * F32(1.0 / n)
        var_scale = F32(1.0 / (comp.target_rms * comp.target_rms))
        sc = uvar * var_scale + (-var_scale * mean) * mean
        sc = np.maximum(sc, F32(0.0)) + F32(var_scale * F32(comp.epsilon))
        scale = (1.0 / np.sqrt(sc.astype(np.float64))).astype(F32)
        want = ((xb - mean) * scale).reshape(shape)
        assert np.array_equal(out, want)
        in_place = x.copy()
        comp.propagate(None, in_place, in_place, use_jit=use_jit)
        assert np.array_equal(in_place, want)

        dz = (rng.standard_normal(shape) * np.exp(spread * rng.standard_normal(shape))
              ).astype(F32)
        z, dzb = want.reshape(-1, block), dz.reshape(-1, block)
        coeff = F32(-1.0 / (comp.target_rms * comp.target_rms * n))
        vdm = coeff * np.einsum("ij,ij->j", z.astype(np.float64),
                                dzb.astype(np.float64)).astype(F32) * scale
        temp = F32(-1.0 / n) * dzb.sum(axis=0, dtype=np.float64).astype(F32)
        want_dx = ((dzb + temp) * scale + z * vdm).reshape(shape)
        dx = np.full_like(dz, np.nan)
        comp.backprop("", None, x, want, dz, memo, None, dx, use_jit=use_jit)
        assert np.array_equal(dx, want_dx)
        comp.backprop("", None, x, want, dz, memo, None, dz, use_jit=use_jit)  # in place
        assert np.array_equal(dz, want_dx)
