"""Convolution components (convolution.py): TimeHeightConvolutionComponent
config, hooks and forward pass against a direct convolution;
ConvolutionComponent and MaxpoolingComponent; malformed files."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.errors import ConfigError, FormatError
from pynnet3.io.kaldi_io import KaldiWriter
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.components.convolution import (ConvolutionComponent, MaxpoolingComponent,
                                                 TimeHeightConvolutionComponent)
from pynnet3.nnet.index import Index, K_NO_TIME

from tests.helpers_components import assert_round_trip, make_component, read_bytes, write_bytes


def test_time_height_conv_config_and_io():
    c = make_component(TimeHeightConvolutionComponent,
                       "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10 "
                       "height-offsets=0,1,2 time-offsets=-1,0,1 required-time-offsets=-1 "
                       "use-natural-gradient=false rank-out=4 alpha-in=2.0 max-change=0.5")
    assert (c.input_dim(), c.output_dim()) == (36, 60)
    assert c.num_parameters() == 6 * 27 + 6
    assert c.properties() == (Prop.UPDATABLE | Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS
                              | Prop.BACKPROP_NEEDS_INPUT | Prop.INPUT_CONTIGUOUS
                              | Prop.OUTPUT_CONTIGUOUS)
    assert (c.rank_in, c.rank_out, c.alpha_in, c.alpha_out) == (14, 4, 2.0, 4.0)
    assert "required-time-offsets=[-1]" in c.info() and "use-natural-gradient=0" in c.info()
    assert_round_trip(c)
    # 'offsets' form, default required offsets = all, init-unit
    c2 = make_component(TimeHeightConvolutionComponent,
                        "num-filters-in=2 num-filters-out=2 height-in=4 height-out=4 "
                        "offsets=1,0;0,0;0,-1;0,1;-1,0 init-unit=true")
    assert c2.model.offsets == [(-1, 0), (0, -1), (0, 0), (0, 1), (1, 0)]
    assert c2.model.required_time_offsets == {-1, 0, 1}
    block = c2.linear_params[:, 4:6]
    assert np.array_equal(block, np.eye(2, dtype=np.float32))
    assert np.count_nonzero(c2.linear_params) == 2
    assert "alpha=4" in c2.info() and "rank-in=6" in c2.info()
    assert_round_trip(c2)


@pytest.mark.parametrize("line", [
    "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10",        # no offsets
    "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10 offsets=0,0;0,0",
    "num-filters-in=3 num-filters-out=6 height-in=4 height-out=10 height-offsets=0 "
    "time-offsets=0 required-time-offsets=1",                                # not a subset
    "num-filters-in=3 num-filters-out=6 height-in=12 height-out=10 height-offsets=0 "
    "time-offsets=0 init-unit=true",                                        # filters differ
    "num-filters-in=3 num-filters-out=3 height-in=2 height-out=2 height-offsets=5 time-offsets=0",
])
def test_time_height_conv_bad_configs(line):
    with pytest.raises(ConfigError):
        make_component(TimeHeightConvolutionComponent, line)


def test_time_height_conv_hooks():
    c = make_component(TimeHeightConvolutionComponent,
                       "num-filters-in=1 num-filters-out=1 height-in=3 height-out=3 "
                       "height-offsets=-1,0,1 time-offsets=-2,0,2 required-time-offsets=0")
    assert c.get_input_indexes(None, Index(1, 10, 0)) == [Index(1, 8), Index(1, 10), Index(1, 12)]
    ok, used = c.is_computable(None, Index(0, 5, 0), {Index(0, 5), Index(0, 7)})
    assert ok and used == [Index(0, 5), Index(0, 7)]
    ok, used = c.is_computable(None, Index(0, 5, 0), {Index(0, 3), Index(0, 7)})
    assert not ok and used == []


def _direct_conv(c, inputs: dict, n: int, t: int) -> np.ndarray:
    """Straightforward convolution for one output frame; missing inputs are 0."""
    m = c.model
    nfi, nfo = m.num_filters_in, m.num_filters_out
    out = np.tile(c.bias_params.astype(np.float64), m.height_out)
    for ho in range(m.height_out):
        for i, (dt, dh) in enumerate(m.offsets):
            hi = ho * m.height_subsample_out + dh
            frame = inputs.get((n, t + dt))
            if frame is None or not 0 <= hi < m.height_in:
                continue
            w = c.linear_params[:, i * nfi:(i + 1) * nfi].astype(np.float64)
            out[ho * nfo:(ho + 1) * nfo] += w @ frame[hi * nfi:(hi + 1) * nfi]
    return out


@pytest.mark.parametrize("line,t_in,t_out", [
    # padding in height and (non-required) time
    ("num-filters-in=2 num-filters-out=3 height-in=5 height-out=5 height-offsets=-1,0,1 "
     "time-offsets=-1,0,1 required-time-offsets=0", range(0, 6), range(0, 6)),
    # height subsampling, time offsets with gaps
    ("num-filters-in=3 num-filters-out=2 height-in=6 height-out=3 height-subsample-out=2 "
     "height-offsets=0,1 time-offsets=-2,0,2", range(-2, 9), range(0, 7)),
    # time subsampling: input step 1, output step 3 (appended input frames)
    ("num-filters-in=2 num-filters-out=2 height-in=4 height-out=4 height-offsets=-1,0,1 "
     "time-offsets=-1,0,1 max-memory-mb=0.0001", range(-1, 11), range(0, 10, 3)),
])
def test_time_height_conv_forward(line, t_in, t_out):
    c = make_component(TimeHeightConvolutionComponent, line + " bias-stddev=0.5")
    rs = np.random.RandomState(0)
    in_idx = [Index(n, t) for t in t_in for n in range(2)]
    out_idx = [Index(n, t) for t in t_out for n in range(2)]
    new_in, new_out = c.reorder_indexes(in_idx, out_idx)
    assert set(in_idx) <= set(new_in) and set(out_idx) <= set(new_out)
    assert all(ix.t == K_NO_TIME for ix in new_in if ix not in set(in_idx))
    pre = c.precompute_indexes(None, new_in, new_out, False)
    frames = {(ix.n, ix.t): rs.randn(c.input_dim()).astype(np.float32) for ix in in_idx}
    x = np.stack([frames.get((ix.n, ix.t), np.zeros(c.input_dim(), np.float32))
                  if ix.t != K_NO_TIME else np.zeros(c.input_dim(), np.float32)
                  for ix in new_in])
    y = np.full((len(new_out), c.output_dim()), np.nan, dtype=np.float32)
    c.propagate(pre, x, y)
    for row, ix in enumerate(new_out):
        if ix.t == K_NO_TIME:
            continue
        np.testing.assert_allclose(y[row], _direct_conv(c, frames, ix.n, ix.t),
                                   rtol=1e-4, atol=1e-4)
    # precomputed indexes serialise
    w = KaldiWriter(False)
    pre.write(w)
    assert b"<ConvComputation>" in w.getvalue()


def test_convolution_component():
    c = make_component(ConvolutionComponent,
                       "input-x-dim=5 input-y-dim=6 input-z-dim=2 filt-x-dim=3 "
                                   "filt-y-dim=2 filt-x-step=2 filt-y-step=2 num-filters=4 "
                                   "input-vectorization-order=yzx learning-rate=0.01")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (60, 2 * 3 * 4, 4 * 13)
    assert c.properties() == (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.BACKPROP_ADDS | Prop.PROPAGATE_ADDS)
    assert "input-vectorization=0, num-filters=4" in c.info()
    assert_round_trip(c)
    # Kaldi's reader accepts a file without <IsGradient>
    data = write_bytes(c, False).replace(b"<IsGradient> F ", b"")
    assert write_bytes(read_bytes(data, False), False) == write_bytes(c, False)
    # forward vs direct loops (the op adds to the output)
    rs = np.random.RandomState(1)
    x = rs.randn(3, 60).astype(np.float32)
    y = np.ones((3, 24), dtype=np.float32)
    c.propagate(None, x, y)
    for vec in (0, 1):
        c.input_vectorization = vec
        y = np.zeros((3, 24), dtype=np.float32)
        c.propagate(None, x, y)
        for r in range(3):
            for xs in range(2):
                for ys in range(3):
                    patch = []
                    for fx in range(3):
                        for fy in range(2):
                            for z in range(2):
                                xx, yy = xs * 2 + fx, ys * 2 + fy
                                col = (xx * 12 + yy * 2 + z) if vec == 1 else (xx * 12 + z * 6 + yy)
                                patch.append(x[r, col])
                    want = c.filter_params @ np.array(patch) + c.bias_params
                    p = xs * 3 + ys
                    np.testing.assert_allclose(y[r, p * 4:(p + 1) * 4], want, rtol=1e-5,
                                               atol=1e-5)


def test_maxpooling_component():
    c = make_component(MaxpoolingComponent,
                       "input-x-dim=4 input-y-dim=5 input-z-dim=6 pool-x-size=2 "
                                  "pool-y-size=3 pool-z-size=2 pool-x-step=2 pool-y-step=1 "
                                  "pool-z-step=2")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (120, 2 * 3 * 3, 0)
    assert c.properties() == (Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT
                              | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)
    assert c.info() == ("MaxpoolingComponent, input-x-dim=4, input-y-dim=5, input-z-dim=6, "
                        "pool-x-size=2, pool-y-size=3, pool-z-size=2, pool-x-step=2, "
                        "pool-y-step=1, pool-z-step=2")
    assert_round_trip(c)
    x = np.random.RandomState(2).randn(4, 120).astype(np.float32)
    y = np.zeros((4, 18), dtype=np.float32)
    c.propagate(None, x, y)
    t = x.reshape(4, 4, 5, 6)          # zyx vectorisation: x major, z minor
    for px in range(2):
        for py in range(3):
            for pz in range(3):
                want = t[:, px * 2:px * 2 + 2, py:py + 3, pz * 2:pz * 2 + 2].max(axis=(1, 2, 3))
                assert np.array_equal(y[:, (px * 3 + py) * 3 + pz], want)
    with pytest.raises(ConfigError):
        make_component(MaxpoolingComponent,
                       "input-x-dim=4 input-y-dim=5 input-z-dim=6 pool-x-size=3 "
                                  "pool-y-size=3 pool-z-size=2 pool-x-step=2 pool-y-step=1 "
                                  "pool-z-step=2")


def test_bad_files_raise_format_error():
    c = make_component(MaxpoolingComponent,
                       "input-x-dim=2 input-y-dim=2 input-z-dim=2 pool-x-size=2 "
                                  "pool-y-size=2 pool-z-size=2 pool-x-step=1 pool-y-step=1 "
                                  "pool-z-step=1")
    data = write_bytes(c, False).replace(b"<PoolZStep> 1", b"<PoolZStep> 5")
    with pytest.raises(FormatError):
        read_bytes(data, False)
    t = make_component(TimeHeightConvolutionComponent,
                       "num-filters-in=1 num-filters-out=1 height-in=2 "
                                             "height-out=2 height-offsets=0 time-offsets=0")
    data = write_bytes(t, False).replace(b"[ 0,0 ]", b"[ 0;0 ]")
    with pytest.raises(FormatError):
        read_bytes(data, False)
