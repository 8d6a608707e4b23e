"""Table-driven checks over the component types of Kaldi's
nnet-simple-component and nnet-general-component: registration, config lines,
dims and properties, write/read round trips, legacy file forms, and
propagate/backprop against float64 references."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.components import nonlinearities
from pynnet3.nnet.components.base import Prop, new_component_of_type

from tests.helpers_components import (SIMPLE_TYPES, assert_rewrite_round_trip, backprop_rows,
                                      make_by_type, make_simple, propagate_rows, rand_matrix,
                                      read_bytes, reread, with_stats, write_bytes)


def test_all_types_registered():
    for t in SIMPLE_TYPES:
        c = new_component_of_type(t)
        assert c is not None and c.type_name == t


def test_component_families_table_matches_registration():
    """Families load on first use (base.COMPONENT_FAMILIES): the table names,
    for every type the modules register, the module that registers it, and
    nothing else; a type not loaded yet is created through it (a fresh
    interpreter, where a run of a TDNN leaves the other families out)."""
    import subprocess
    import sys

    from pynnet3.nnet.components import base, component_types

    types = component_types()          # loads every family
    assert types == sorted(base.COMPONENT_FAMILIES)
    for name in types:
        module = base._REGISTRY[name].__module__
        assert module == f"pynnet3.nnet.components.{base.COMPONENT_FAMILIES[name]}", name
    code = ("import sys; from pynnet3.nnet.components.base import new_component_of_type; "
            "before = 'pynnet3.nnet.components.recurrent' in sys.modules; "
            "c = new_component_of_type('LstmNonlinearityComponent'); "
            "print(before, type(c).__module__, "
            "'pynnet3.nnet.components.attention' in sys.modules, "
            "new_component_of_type('NoSuchComponent'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["False", "pynnet3.nnet.components.recurrent", "False", "None"]


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
def test_simple_config_dims_properties(comp_type, config, idim, odim, props, nparams):
    c = make_simple(config, comp_type)
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
def test_simple_config_errors(comp_type, config):
    with pytest.raises(ConfigError):
        make_simple(config, comp_type)


def test_simple_config_values():
    c = make_simple("dim=20 block-dim=5 self-repair-scale=2e-05 self-repair-lower-threshold=0.05",
                    "RectifiedLinearComponent")
    assert c.info() == ("RectifiedLinearComponent, dim=20, block-dim=5, "
                        "self-repair-lower-threshold=0.05, self-repair-scale=2e-05")
    c = make_simple("sizes=2:3,1", "SumGroupComponent")
    assert c.sizes == [2, 3, 1]
    c = make_simple("dim=4 scale=2.5", "FixedScaleComponent")
    assert c.scales.tolist() == [2.5] * 4
    c = make_simple("dim=4 block-dim=2", "ScaleAndOffsetComponent")
    assert c.scales.tolist() == [1.0, 1.0] and c.offsets.tolist() == [0.0, 0.0]
    assert c.info().startswith("ScaleAndOffsetComponent, input-dim=4, output-dim=4, "
                               "learning-rate=0.001, rank=20, block-size=2")
    c = make_simple("dim=3 learning-rate=0.01", "PerElementScaleComponent")
    assert c.info() == ("PerElementScaleComponent, input-dim=3, output-dim=3, learning-rate=0.01, "
                        "scales-min=1, scales-max=1, scales-{mean,stddev}=1,0")
    c = make_simple("input-dim=2 output-dim=3 is-updatable=false", "ConstantFunctionComponent")
    assert c.info() == ("ConstantFunctionComponent, input-dim=2, output-dim=3, learning-rate=0.001"
                        ", ConstantFunctionComponent, input-dim=2, output-dim=3, is-updatable=false"
                        ", use-natural-gradient=true, output-{mean,stddev}=0,0")
    c = make_simple("column-map=5,4,3,2,1,0", "PermuteComponent")
    assert c.info() == "PermuteComponent, dim=6 , column-map=[ 5 4 3 2 1 ... ]"


def test_vector_file_options(tmp_path):
    path = tmp_path / "v.vec"
    w = KaldiWriter(False)
    w.write_vector(np.array([1.5, -2.0, 3.0], dtype=np.float32))
    path.write_bytes(w.getvalue())
    c = make_simple(f"scales={path}", "FixedScaleComponent")
    assert c.scales.tolist() == [1.5, -2.0, 3.0]
    c = make_simple(f"bias={path}", "FixedBiasComponent")
    assert c.bias.tolist() == [1.5, -2.0, 3.0]
    c = make_simple(f"vector={path} dim=3", "PerElementScaleComponent")
    assert c.scales.tolist() == [1.5, -2.0, 3.0]
    c = make_simple(f"vector={path} dim=3", "PerElementOffsetComponent")
    assert c.offsets.tolist() == [1.5, -2.0, 3.0] and c.input_dim() == 3


@pytest.mark.parametrize("comp_type,config", [(t, c) for t, c, *_ in CONFIGS])
@pytest.mark.parametrize("binary", [True, False])
def test_write_read_write(comp_type, config, binary):
    c = make_simple(config, comp_type)
    if isinstance(c, nonlinearities.NonlinearComponent):
        with_stats(c)
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


def numeric_grad(comp, x, dy, eps=1e-3):
    x64 = x.astype(np.float64)
    g = np.zeros_like(x64)
    for idx in np.ndindex(*x.shape):
        xp, xm = x64.copy(), x64.copy()
        xp[idx] += eps
        xm[idx] -= eps
        fp = (propagate_rows(comp, xp.astype(np.float32)).astype(np.float64) * dy).sum()
        fm = (propagate_rows(comp, xm.astype(np.float32)).astype(np.float64) * dy).sum()
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
    comp = make_simple(config, comp_type)
    x = rand_matrix(5, comp.input_dim())
    y = propagate_rows(comp, x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, ref(x.astype(np.float64)), rtol=2e-6, atol=1e-6)
    dy = rand_matrix(5, comp.output_dim(), seed=1, scale=1.0)
    dx = backprop_rows(comp, x, y, dy)
    np.testing.assert_allclose(dx, numeric_grad(comp, x, dy), rtol=2e-2, atol=2e-3)


def test_propagate_parameters_and_in_place():
    x = rand_matrix(4, 6)
    c = make_simple("dim=6", "FixedBiasComponent")
    assert np.array_equal(propagate_rows(c, x), x + c.bias)
    c = make_simple("dim=6 block-dim=3", "ScaleAndOffsetComponent")
    c.scales = np.array([2.0, 0.0, -3e-5], dtype=np.float32)
    c.offsets = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    s = np.tile(np.array([2.0, 1e-4, -1e-4], dtype=np.float32), 2)
    assert np.array_equal(propagate_rows(c, x), x * s + np.tile(c.offsets, 2))
    c = make_simple("dim=6 param-mean=0.5 param-stddev=0.1", "PerElementScaleComponent")
    assert np.array_equal(propagate_rows(c, x), x * c.scales)
    c = make_simple("input-dim=6 output-dim=2 output-mean=1", "ConstantFunctionComponent")
    assert np.array_equal(propagate_rows(c, x), np.tile(c.output, (4, 1)))
    # in-place propagate (PROPAGATE_IN_PLACE components)
    for t, config in [("SigmoidComponent", "dim=6"), ("RectifiedLinearComponent", "dim=6"),
                      ("TanhComponent", "dim=6"), ("SoftmaxComponent", "dim=6")]:
        comp = make_simple(config, t)
        expect = propagate_rows(comp, x)
        buf = x.copy()
        comp.propagate(None, buf, buf)
        assert np.array_equal(buf, expect)


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
        c = make_by_type(type_name, cfg)
        assert (c.input_dim(), c.output_dim(), c.properties()) == (idim, odim, props), cfg
        assert_rewrite_round_trip(c)
        if hasattr(c, "set_test_mode"):       # the random components
            c.set_test_mode(True)
            assert_rewrite_round_trip(c)
    c = make_by_type("ConstantComponent", "output-dim=6 output-mean=1 output-stddev=0")
    assert c.num_parameters() == 6 and np.all(c.output == 1.0)
    assert c.info() == ("ConstantComponent, input-dim=6, output-dim=6, learning-rate=0.001, "
                        "ConstantComponent, output-dim=6, is-updatable=true, "
                        "use-natural-gradient=true, output-{mean,stddev}=1,0")
    assert make_by_type("ConstantComponent",
                        "output-dim=3 is-updatable=false").num_parameters() == 0
    assert make_by_type("GeneralDropoutComponent",
                        "dim=8 block-dim=4 time-period=10 continuous=true "
                        "specaugment-max-proportion=0").info() == (
        "GeneralDropoutComponent, dim=8, block-dim=4, dropout-proportion=0.5, continuous=true, "
        "time-period=10")
    assert make_by_type("GeneralDropoutComponent",
                        "dim=8 specaugment-max-proportion=0.25").info() == (
        "GeneralDropoutComponent, dim=8, block-dim=8, dropout-proportion=0.5, "
        "specaugment-max-proportion=0.25, specaugment-max-regions=1")
    assert make_by_type("DropoutMaskComponent", "output-dim=3 continuous=true").info() == (
        "DropoutMaskComponent, output-dim=3, dropout-proportion=0.5, continuous=true")
    assert make_by_type("SpecAugmentTimeMaskComponent", "dim=4").info() == (
        "SpecAugmentTimeMaskComponent, dim=4, zeroed-proportion=0.25, time-mask-max-frames=10")
    assert make_by_type("BackpropTruncationComponent", "dim=3").info() == (
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
        make_by_type(type_name, cfg)


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
