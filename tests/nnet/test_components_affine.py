"""Affine components (affine.py): config, natural-gradient options, I/O
including Kaldi's legacy tokens, scale/add, Info() and propagate; the
affine family in Kaldi's models (TdnnComponent included) and LDA matrices."""
from __future__ import annotations

import glob
import math
import os
from pathlib import Path

import numpy as np
import pytest

from pynnet3 import log
from pynnet3.errors import ConfigError, FormatError
from pynnet3.nnet.components.affine import (AffineComponent, BlockAffineComponent,
                                            FixedAffineComponent, LinearComponent,
                                            NaturalGradientAffineComponent,
                                            NaturalGradientRepeatedAffineComponent,
                                            RepeatedAffineComponent)
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.components.natural_gradient import OnlineNaturalGradient
from pynnet3.nnet.components.tdnn import TdnnComponent

from tests.helpers import enough
from tests.helpers_components import (REF, affine_info_lines, make_affine, needs_ref, read_bytes,
                                      write_bytes)


def test_affine_config_defaults():
    c = make_affine(AffineComponent, "input-dim=400 output-dim=300")
    assert (c.input_dim(), c.output_dim()) == (400, 300)
    assert c.num_parameters() == 401 * 300
    assert c.properties() == Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT | \
        Prop.BACKPROP_ADDS
    assert c.linear_params.dtype == np.float32 and c.linear_params.flags.c_contiguous
    # param-stddev = 1/sqrt(input-dim), bias-stddev = 1.
    assert abs(c.linear_params.std() - 1 / math.sqrt(400)) < 0.05 / math.sqrt(400)
    assert abs(c.bias_params.std() - 1.0) < 0.25
    assert c.learning_rate == pytest.approx(0.001)
    assert c.info().startswith("AffineComponent, input-dim=400, output-dim=300, "
                               "learning-rate=0.001, linear-params-rms=")
    assert "orthonormal-constraint" not in c.info()


def test_affine_config_options():
    c = make_affine(AffineComponent, "input-dim=10 output-dim=4 param-stddev=0 bias-stddev=0 "
                              "orthonormal-constraint=-1 learning-rate=0.01 max-change=0.75 "
                              "l2-regularize=0.004 learning-rate-factor=0.5")
    assert not c.linear_params.any() and not c.bias_params.any()
    assert c.orthonormal_constraint == -1.0
    assert (", learning-rate=0.01, l2-regularize=0.004, learning-rate-factor=0.5, "
            "max-change=0.75, orthonormal-constraint=-1, linear-params-rms=0") in c.info()
    with pytest.raises(ConfigError):
        make_affine(AffineComponent, "input-dim=10")
    with pytest.raises(ConfigError):
        make_affine(AffineComponent, "input-dim=10 output-dim=4 bias-mean=1")  # not an option


def test_natural_gradient_affine_config():
    c = make_affine(NaturalGradientAffineComponent, "input-dim=30 output-dim=500 bias-stddev=0 "
                                             "bias-mean=2")
    assert np.all(c.bias_params == 2.0)
    p_in, p_out = c.preconditioner_in, c.preconditioner_out
    assert (p_in.rank, p_out.rank) == (15, 80)
    assert (p_in.update_period, p_in.num_samples_history, p_in.alpha) == (4, 2000.0, 4.0)
    assert c.info().endswith(", rank-in=15, rank-out=80, num-samples-history=2000, "
                             "update-period=4, alpha=4")
    c = make_affine(NaturalGradientAffineComponent, "input-dim=300 output-dim=50 rank-in=7 "
                                             "rank-out=9 update-period=2 alpha=2.5 "
                                             "num-samples-history=1000")
    assert c.info().endswith(", rank-in=7, rank-out=9, num-samples-history=1000, "
                             "update-period=2, alpha=2.5")
    with pytest.raises(ConfigError):
        make_affine(NaturalGradientAffineComponent, "input-dim=3 output-dim=5 rank-in=0")
    with pytest.raises(ConfigError):
        make_affine(NaturalGradientAffineComponent, "input-dim=3 output-dim=5 bias-stddev=-1")


def test_linear_config():
    c = make_affine(LinearComponent, "input-dim=64 output-dim=7 orthonormal-constraint=1.0 "
                              "use-natural-gradient=false")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (64, 7, 448)
    assert c.properties() & Prop.PROPAGATE_ADDS
    assert (c.preconditioner_in.rank, c.preconditioner_out.rank) == (20, 4)
    info = c.info()
    assert info.startswith("LinearComponent, input-dim=64, output-dim=7, learning-rate=0.001, "
                           "params-rms=")
    assert info.endswith(", orthonormal-constraint=1, use-natural-gradient=false, rank-in=20, "
                         "rank-out=4, num-samples-history=2000, update-period=4, alpha=4")


def test_matrix_option(tmp_path):
    import kaldiio

    mat = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    path = str(tmp_path / "m.mat")
    kaldiio.save_mat(path, mat)
    for cls in (AffineComponent, NaturalGradientAffineComponent):
        c = make_affine(cls, f"matrix={path} input-dim=3")
        np.testing.assert_array_equal(c.linear_params, mat[:, :3])
        np.testing.assert_array_equal(c.bias_params, mat[:, 3])
        with pytest.raises(ConfigError):
            make_affine(cls, f"matrix={path} output-dim=4")
    fixed = make_affine(FixedAffineComponent, f"matrix={path}")
    np.testing.assert_array_equal(fixed.bias_params, mat[:, 3])
    assert (fixed.input_dim(), fixed.output_dim(), fixed.num_parameters()) == (3, 3, 0)
    assert fixed.properties() == Prop.SIMPLE | Prop.BACKPROP_ADDS
    lin = make_affine(LinearComponent, f"matrix={path}")
    np.testing.assert_array_equal(lin.params, mat)  # no bias column for Linear
    with pytest.raises(ConfigError):
        make_affine(FixedAffineComponent, f"matrix={tmp_path}/missing.mat")
    # Text-format matrices are accepted too.
    (tmp_path / "t.mat").write_text(" [\n 1 2 3\n 4 5 6 ]\n")
    fixed = make_affine(FixedAffineComponent, f"matrix={tmp_path}/t.mat")
    assert fixed.bias_params.tolist() == [3.0, 6.0]


def test_fixed_affine_random_form():
    c = make_affine(FixedAffineComponent, "input-dim=5 output-dim=6")
    assert (c.input_dim(), c.output_dim()) == (5, 6)
    assert c.info().startswith("FixedAffineComponent, input-dim=5, output-dim=6, "
                               "linear-params-rms=")
    with pytest.raises(ConfigError):
        make_affine(FixedAffineComponent, "input-dim=5")


def test_block_and_repeated_config():
    b = make_affine(BlockAffineComponent, "input-dim=12 output-dim=8 num-blocks=4")
    assert b.linear_params.shape == (8, 3)
    assert (b.input_dim(), b.output_dim(), b.num_parameters()) == (12, 8, 32)
    assert ", num-blocks=4, linear-params-rms=" in b.info()
    with pytest.raises(ConfigError):
        make_affine(BlockAffineComponent, "input-dim=12 output-dim=9 num-blocks=4")
    r = make_affine(RepeatedAffineComponent,
                    "input-dim=12 output-dim=6 num-repeats=3 bias-mean=0.5")
    assert r.linear_params.shape == (2, 4)
    assert (r.input_dim(), r.output_dim(), r.num_parameters()) == (12, 6, 10)
    assert np.all(r.bias_params == 0.5)  # bias-stddev defaults to 0 here
    assert r.properties() & Prop.INPUT_CONTIGUOUS and r.properties() & Prop.OUTPUT_CONTIGUOUS
    assert ", num-repeats=3, linear-params-rms=" in r.info()
    with pytest.raises(ConfigError):
        make_affine(RepeatedAffineComponent, "input-dim=12 output-dim=6 num-repeats=5")
    ng = make_affine(NaturalGradientRepeatedAffineComponent, "input-dim=200 output-dim=10 "
                                                      "num-repeats=2")
    assert (ng.preconditioner_in.rank, ng.preconditioner_in.update_period) == (40, 4)
    ng = make_affine(NaturalGradientRepeatedAffineComponent,
                     "input-dim=2 output-dim=2 num-repeats=2")
    assert ng.preconditioner_in.rank == 1


def test_online_natural_gradient_options():
    p = OnlineNaturalGradient()
    assert (p.rank, p.update_period, p.num_samples_history, p.alpha) == (40, 1, 2000.0, 4.0)
    assert (p.epsilon, p.delta, p.frozen, p.t) == (1.0e-10, 5.0e-4, False, 0)
    p.configure(rank=5, update_period=3, num_samples_history=0.1, alpha=0.0)
    assert p.num_samples_history == float(np.float32(0.1))
    for kwargs in ({"rank": 0}, {"update_period": 0}, {"num_samples_history": 0.0},
                   {"num_samples_history": 2e6}, {"alpha": -1.0}):
        with pytest.raises(ValueError):
            p.configure(**kwargs)
    q = p.copy()
    q.set_rank(7)
    assert p.rank == 5
    # Implemented in natural_gradient.py (tested there): all-zero input has scale 1.
    assert p.precondition_directions(np.zeros((2, 3), np.float32)) == 1.0


def _all_kinds() -> list:
    return [
        make_affine(AffineComponent, "input-dim=5 output-dim=3 orthonormal-constraint=0.5 "
                              "learning-rate-factor=0.25 max-change=1.5 l2-regularize=0.01"),
        make_affine(AffineComponent, "input-dim=5 output-dim=3"),
        make_affine(NaturalGradientAffineComponent, "input-dim=6 output-dim=4 "
                                             "orthonormal-constraint=-1"),
        make_affine(NaturalGradientAffineComponent, "input-dim=6 output-dim=4"),
        make_affine(LinearComponent, "input-dim=6 output-dim=2 orthonormal-constraint=1"),
        make_affine(LinearComponent, "input-dim=6 output-dim=2 use-natural-gradient=false"),
        make_affine(FixedAffineComponent, "input-dim=4 output-dim=2"),
        make_affine(BlockAffineComponent, "input-dim=6 output-dim=4 num-blocks=2"),
        make_affine(RepeatedAffineComponent, "input-dim=6 output-dim=4 num-repeats=2"),
        make_affine(NaturalGradientRepeatedAffineComponent,
                    "input-dim=6 output-dim=4 num-repeats=2"),
        make_affine(TdnnComponent, "input-dim=3 output-dim=2 time-offsets=-1,2"),
        make_affine(TdnnComponent, "input-dim=3 output-dim=2 time-offsets=0 use-bias=false "
                            "use-natural-gradient=false orthonormal-constraint=1"),
    ]


@pytest.mark.parametrize("binary", [False, True])
def test_write_read_round_trip(binary):
    for c in _all_kinds():
        data = write_bytes(c, binary)
        c2 = read_bytes(data, binary)
        assert type(c2) is type(c)
        assert write_bytes(c2, binary) == data
        assert c2.info() == c.info()
        assert c2.input_dim() == c.input_dim() and c2.properties() == c.properties()


def test_text_layout():
    c = make_affine(TdnnComponent, "input-dim=1 output-dim=1 time-offsets=-2,1 use-bias=false")
    c.linear_params[...] = [[0.5, -1.25]]
    assert write_bytes(c, False) == (
        b"<TdnnComponent> <LearningRate> 0.001 <TimeOffsets> [ -2 1 ]\n<LinearParams>  [\n"
        b"  0.5 -1.25 ]\n<BiasParams>  [ ]\n<OrthonormalConstraint> 0 <UseNaturalGradient> T "
        b"<NumSamplesHistory> 2000 <AlphaInOut> 4 4 <RankInOut> 1 1 </TdnnComponent> ")


def test_legacy_tokens():
    body = (b"<LearningRate> 0.001 <LinearParams> [\n 1 2\n 3 4 ]\n<BiasParams> [ 5 6 ]\n")
    # Old AffineComponents stored <IsGradient> after the parameters.
    c = read_bytes(b"<AffineComponent> " + body + b"<IsGradient> T </AffineComponent>", False)
    assert c.is_gradient and c.bias_params.tolist() == [5.0, 6.0]
    # The opening tag may be repeated (Kaldi's ReadUpdatableCommon skips it).
    c = read_bytes(b"<AffineComponent> <AffineComponent> " + body + b"</AffineComponent>", False)
    assert c.linear_params.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    ng = (b"<NaturalGradientAffineComponent> " + body + b"<RankIn> 1 <RankOut> 2 "
          b"<UpdatePeriod> 3 <NumSamplesHistory> 100 <Alpha> 2 <MaxChangePerSample> 0.1 "
          b"<IsGradient> F <UpdateCount> 1 <ActiveScalingCount> 2 <MaxChangeScaleStats> 3 "
          b"<NaturalGradientAffineComponent>")
    c = read_bytes(ng, False)
    assert c.info().endswith("rank-in=1, rank-out=2, num-samples-history=100, "
                             "update-period=3, alpha=2")
    assert b"MaxChangePerSample" not in write_bytes(c, False)
    tdnn = (b"<TdnnComponent> <LearningRate> 0.001 <TimeOffsets> [ 0 1 ]\n<LinearParams> "
            b"[\n 1 2 ]\n<BiasParams> [ ]\n<OrthonormalConstraint> 0 <UseNaturalGradient> F "
            b"<NumSamplesHistory> 2000 <Alpha> 3 <RankInOut> 1 1 </TdnnComponent>")
    c = read_bytes(tdnn, False)
    assert (c.preconditioner_in.alpha, c.preconditioner_out.alpha) == (3.0, 3.0)
    fixed = b"<LinearParams> [\n 1 2 ]\n<BiasParams> [ 3 ]\n</FixedAffineComponent>"
    for data in (b"<FixedAffineComponent> " + fixed,
                 b"<FixedAffineComponent> <FixedAffineComponent> " + fixed):
        assert read_bytes(data, False).bias_params.tolist() == [3.0]
    with pytest.raises(FormatError):
        read_bytes(b"<AffineComponent> <LinearParams> [ ]\n", False)  # no learning rate
    with pytest.raises(FormatError):  # repeated time offsets fail Kaldi's Check()
        read_bytes(tdnn.replace(b"[ 0 1 ]", b"[ 1 1 ]"), False)


def test_scale_add_and_vectorize():
    a = make_affine(NaturalGradientAffineComponent, "input-dim=3 output-dim=2")
    b = a.copy()
    b.add(2.0, a)
    np.testing.assert_allclose(b.linear_params, 3 * a.linear_params, rtol=1e-6)
    b.linear_params[0, 0] = np.nan
    b.scale(0.0)
    assert not b.linear_params.any() and not np.isnan(b.linear_params).any()
    with pytest.raises(TypeError):
        a.add(1.0, make_affine(AffineComponent, "input-dim=3 output-dim=2"))
    v = a.vectorize()
    assert v.shape == (a.num_parameters(),)
    b.unvectorize(v)
    np.testing.assert_array_equal(b.bias_params, a.bias_params)
    assert a.dot_product(a) == pytest.approx(float((v.astype(np.float64) ** 2).sum()))
    t = make_affine(TdnnComponent, "input-dim=2 output-dim=2 time-offsets=0,1 use-bias=false")
    t2 = t.copy()
    t2.add(-1.0, t)
    assert not t2.linear_params.any()
    t.scale(0.5)
    assert t.vectorize().shape == (8,)


def test_verbose_singular_values():
    c = make_affine(AffineComponent, "input-dim=12 output-dim=11")
    assert "singular-values" not in c.info()
    log.set_verbose(2)
    try:
        assert ", linear-params-singular-values=[percentiles(" in c.info()
    finally:
        log.set_verbose(0)


def test_propagate_simple_types():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((7, 12)).astype(np.float32)

    def ref_affine(w, b):
        return np.array([[sum(float(w[i, j]) * float(row[j]) for j in range(w.shape[1]))
                          + float(b[i]) for i in range(w.shape[0])] for row in x])

    for c in (make_affine(AffineComponent, "input-dim=12 output-dim=5"),
              make_affine(NaturalGradientAffineComponent, "input-dim=12 output-dim=5"),
              make_affine(FixedAffineComponent, "input-dim=12 output-dim=5")):
        out = np.full((7, 5), np.nan, np.float32)
        c.propagate(None, x, out)
        np.testing.assert_allclose(out, ref_affine(c.linear_params, c.bias_params),
                                   rtol=1e-5, atol=1e-5)
    lin = make_affine(LinearComponent, "input-dim=12 output-dim=5")
    out = np.ones((7, 5), np.float32)  # PROPAGATE_ADDS: adds to what is there
    lin.propagate(None, x, out)
    np.testing.assert_allclose(out, 1 + ref_affine(lin.params, np.zeros(5)), rtol=1e-5,
                               atol=1e-5)

    blk = make_affine(BlockAffineComponent, "input-dim=12 output-dim=6 num-blocks=3")
    full = np.zeros((6, 12), np.float32)
    for k in range(3):  # block k: rows 2k..2k+1, input columns 4k..4k+3
        full[2 * k:2 * k + 2, 4 * k:4 * k + 4] = blk.linear_params[2 * k:2 * k + 2]
    out = np.full((7, 6), np.nan, np.float32)
    blk.propagate(None, x, out)
    np.testing.assert_allclose(out, ref_affine(full, blk.bias_params), rtol=1e-5, atol=1e-5)

    for cls in (RepeatedAffineComponent, NaturalGradientRepeatedAffineComponent):
        rep = make_affine(cls, "input-dim=12 output-dim=9 num-repeats=3 bias-stddev=1")
        full = np.zeros((9, 12), np.float32)
        for k in range(3):
            full[3 * k:3 * k + 3, 4 * k:4 * k + 4] = rep.linear_params
        out = np.full((7, 9), np.nan, np.float32)
        rep.propagate(None, x, out)
        np.testing.assert_allclose(out, ref_affine(full, np.tile(rep.bias_params, 3)),
                                   rtol=1e-5, atol=1e-5)


@needs_ref
def test_fixed_affine_from_lda_matrix(monkeypatch):
    """matrix= initialisation is deterministic: compare with Kaldi's initial model."""
    checked = 0
    for d in sorted(glob.glob(str(REF / "small" / "*"))):
        if not os.path.isfile(os.path.join(d, "lda.mat")):
            continue
        expected = affine_info_lines(Path(d) / "nnet3-info.0.txt")
        if "lda" not in expected:
            continue
        monkeypatch.chdir(d)
        c = make_affine(FixedAffineComponent, "matrix=lda.mat")
        assert c.info() == expected["lda"][1]
        checked += 1
    assert checked >= enough(3, 2)
