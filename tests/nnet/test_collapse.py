"""Tests of collapse_model (Kaldi's CollapseModel).

Structure is checked against what Kaldi's ModelCollapser does (names like
``bn1.affine2``, rewritten descriptors, orphan removal); numerics with a small
NumPy forward evaluator for feed-forward networks whose descriptors are
Append / Offset / Sum / Scale / ReplaceIndex(x, t, 0), which also lets the
collapsed reference models be compared against Kaldi's nnet3-compute output
(nnet3-compute itself collapses the model before computing).
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from pynnet3.io.kaldi_io import KaldiReader
from pynnet3.nnet.collapse import CollapseModelConfig, collapse_model
from pynnet3.nnet.components.base import new_component_of_type
from pynnet3.nnet.descriptor import (BinarySumDescriptor, OffsetForwardingDescriptor,
                                     ReplaceIndexForwardingDescriptor,
                                     SimpleForwardingDescriptor, SimpleSumDescriptor)
from pynnet3.nnet.nnet import Nnet, NodeType
from pynnet3.nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode
from tests.helpers import REFERENCE

F32 = np.float32
SMALL = str(REFERENCE / "small")
ALL_ON = CollapseModelConfig(collapse_dropout=True, collapse_batchnorm=True,
                             collapse_affine=True, collapse_scale=True)


# ---------------------------------------------------------------------------
# A tiny forward evaluator.  A value is (lo, mat): rows for t = lo, lo+1, ...;
# lo None means one row valid at every t (ReplaceIndex(x, t, 0)).


def _align(values):
    finite = [(lo, m) for lo, m in values if lo is not None]
    lo = max(l for l, _ in finite)
    hi = min(l + m.shape[0] for l, m in finite)
    assert hi > lo, "no frames left"
    out = []
    for l, m in values:
        out.append(np.repeat(m, hi - lo, axis=0) if l is None else m[lo - l:hi - l])
    return lo, out


def _eval_forwarding(fd, values):
    if isinstance(fd, SimpleForwardingDescriptor):
        lo, m = values[fd.src_node]
        return lo, (m * F32(fd.scale)).astype(F32) if fd.scale != 1.0 else m
    if isinstance(fd, OffsetForwardingDescriptor):
        lo, m = _eval_forwarding(fd.src, values)
        assert fd.offset.x == 0 and fd.offset.n == 0
        return (None if lo is None else lo - fd.offset.t), m
    if isinstance(fd, ReplaceIndexForwardingDescriptor):
        lo, m = _eval_forwarding(fd.src, values)
        assert fd.variable_name == "t"
        if lo is None:
            return None, m
        return None, m[fd.value - lo:fd.value - lo + 1]
    raise NotImplementedError(type(fd).__name__)


def _eval_sum(sd, values):
    if isinstance(sd, SimpleSumDescriptor):
        return _eval_forwarding(sd.src, values)
    if isinstance(sd, BinarySumDescriptor) and sd.op == "Sum":
        a, b = _eval_sum(sd.src1, values), _eval_sum(sd.src2, values)
        lo, (ma, mb) = _align([a, b])
        return lo, (ma + mb).astype(F32)
    raise NotImplementedError(type(sd).__name__)


def _eval_descriptor(desc, values):
    parts = [_eval_sum(p, values) for p in desc.parts]
    if len(parts) == 1:
        return parts[0]
    lo, mats = _align(parts)
    return lo, np.concatenate(mats, axis=1)


def _propagate(comp, x):
    t = comp.type_name
    if t == "TdnnComponent":
        raise AssertionError("handled by the caller")
    if t == "GeneralDropoutComponent":
        assert comp.test_mode
        return x
    out = np.zeros((x.shape[0], comp.output_dim()), dtype=F32)
    try:
        comp.propagate(None, x.copy(), out)
        return out
    except NotImplementedError:
        pass
    if t == "RectifiedLinearComponent":
        return np.maximum(x, F32(0))
    if t == "NoOpComponent":
        return x
    if t == "DropoutComponent":
        assert comp.test_mode
        return (x * F32(1.0 - comp.dropout_proportion)).astype(F32)
    if t == "LinearComponent":
        return (x @ comp.params.T).astype(F32)
    if t == "LogSoftmaxComponent":
        x64 = x.astype(np.float64)
        mx = x64.max(axis=1, keepdims=True)
        return (x64 - mx - np.log(np.exp(x64 - mx).sum(axis=1, keepdims=True))).astype(F32)
    raise NotImplementedError(f"no forward for {t}")


def forward(nnet: Nnet, inputs: dict, output: str = "output"):
    """inputs: name -> (lo, mat).  Returns (lo, mat) of the output node."""
    values: dict = {}
    for n, node in enumerate(nnet.nodes):
        name = nnet.node_names[n]
        if node.node_type is NodeType.INPUT:
            if name in inputs:
                values[n] = inputs[name]
        elif node.node_type is NodeType.DESCRIPTOR:
            if nnet.is_output_node(n) and name != output:
                continue
            try:
                values[n] = _eval_descriptor(node.descriptor, values)
            except KeyError:
                pass  # depends on something not computed (another output's branch)
        elif node.node_type is NodeType.COMPONENT:
            if n - 1 not in values:
                continue
            lo, x = values[n - 1]
            comp = nnet.components[node.component_index]
            if comp.type_name == "TdnnComponent":
                offs = comp.time_offsets
                rows = x.shape[0] - (max(offs) - min(offs))
                spliced = np.concatenate(
                    [x[o - min(offs):o - min(offs) + rows] for o in offs], axis=1)
                y = spliced @ comp.linear_params.T
                if comp.bias_params.shape[0]:
                    y = y + comp.bias_params
                values[n] = (lo - min(offs), y.astype(F32))
            else:
                values[n] = (lo, _propagate(comp, x))
        else:
            lo, m = values[node.node_index]
            values[n] = (lo, m[:, node.dim_offset:node.dim_offset + node.dim])
    return values[nnet.get_node_index(output)]


def _rel_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b)) / max(1e-30, np.max(np.abs(b))))


def _check_same_output(orig: Nnet, collapsed: Nnet, dims: dict, num_frames: int = 12,
                       seed: int = 0, tol: float = 1e-4) -> None:
    rng = np.random.default_rng(seed)
    inputs = {name: (0, rng.standard_normal((num_frames, d)).astype(F32))
              for name, d in dims.items()}
    lo1, y1 = forward(orig, inputs)
    lo2, y2 = forward(collapsed, inputs)
    assert (lo1, y1.shape) == (lo2, y2.shape)
    assert _rel_err(y2, y1) < tol
    assert np.max(np.abs(y1)) > 0.1  # the comparison is not vacuous


def _bn_set_stats(bn, seed: int, count: float = 37.0) -> None:
    rng = np.random.default_rng(seed)
    mean = rng.standard_normal(bn.block_dim) * 2.0
    var = rng.uniform(0.2, 3.0, bn.block_dim)
    bn.count = count
    bn.stats_sum = mean * count
    bn.stats_sumsq = (var + mean * mean) * count
    bn.set_test_mode(True)


def _make(config: str) -> Nnet:
    nnet = Nnet()
    nnet.read_config(config, "test")
    return nnet


def _comp(nnet: Nnet, name: str):
    c = nnet.get_component_index(name)
    assert c >= 0, f"no component {name}; have {nnet.component_names}"
    return nnet.components[c]


def _desc_text(nnet: Nnet, node_name: str) -> str:
    n = nnet.get_node_index(node_name)
    if nnet.is_component_node(n):
        n -= 1
    return nnet.nodes[n].descriptor.text(nnet.node_names)


def _copy(nnet: Nnet) -> Nnet:
    import copy

    return copy.deepcopy(nnet)


# ---------------------------------------------------------------------------


def test_config_defaults_are_kaldis():
    c = CollapseModelConfig()
    assert (c.collapse_dropout, c.collapse_batchnorm, c.collapse_affine,
            c.collapse_scale) == (False, False, True, True)


BN_NET = """
input-node name=input dim=10
component name=affine1 type=NaturalGradientAffineComponent input-dim=10 output-dim=12 bias-stddev=0.5
component-node name=affine1 component=affine1 input=input
component name=relu1 type=RectifiedLinearComponent dim=12
component-node name=relu1 component=relu1 input=affine1
component name=bn1 type=BatchNormComponent dim=12
component-node name=bn1 component=bn1 input=relu1
component name=affine2 type=NaturalGradientAffineComponent input-dim=36 output-dim=8 bias-stddev=0.5 max-change=0.75
component-node name=affine2 component=affine2 input=Append(Offset(bn1, -1), bn1, Offset(bn1, 1))
output-node name=output input=affine2
"""


def test_batchnorm_not_collapsed_by_default():
    nnet = _make(BN_NET)
    _bn_set_stats(_comp(nnet, "bn1"), 1)
    before = _copy(nnet)
    collapse_model(nnet)
    assert nnet.component_names == before.component_names
    assert nnet.node_names == before.node_names
    assert nnet.get_config_lines() == before.get_config_lines()


def test_batchnorm_into_spliced_affine():
    nnet = _make(BN_NET)
    _bn_set_stats(_comp(nnet, "bn1"), 1)
    orig = _copy(nnet)
    collapse_model(nnet, ALL_ON)
    assert nnet.component_names == ["affine1", "relu1", "bn1.affine2"]
    assert "bn1" not in nnet.node_names and "bn1_input" not in nnet.node_names
    assert _desc_text(nnet, "affine2") == "Append(Offset(relu1, -1), relu1, Offset(relu1, 1))"
    new = _comp(nnet, "bn1.affine2")
    # A copy of the affine component: type and options kept.
    assert new.type_name == "NaturalGradientAffineComponent"
    assert new.max_change == pytest.approx(0.75)
    # Explicit fold: W' = W diag(s,s,s), b' = b + W [o;o;o].
    a2, bn = _comp(orig, "affine2"), _comp(orig, "bn1")
    s, o = np.tile(bn.scale_, 3), np.tile(bn.offset, 3)
    np.testing.assert_allclose(new.linear_params, a2.linear_params * s, rtol=1e-6)
    np.testing.assert_allclose(new.bias_params, a2.bias_params + a2.linear_params @ o,
                               rtol=1e-5, atol=1e-5)
    _check_same_output(orig, nnet, {"input": 10})


def test_batchnorm_requires_test_mode():
    nnet = _make(BN_NET)
    with pytest.raises(Exception, match="test-mode"):
        collapse_model(nnet, ALL_ON)


def test_batchnorm_identity_is_bypassed_for_any_component():
    # An identity BatchNorm (zero offset, unit scale) is skipped whatever follows.
    nnet = _make(BN_NET.replace("input=Append(Offset(bn1, -1), bn1, Offset(bn1, 1))",
                                "input=Append(Offset(relu2, -1), relu2, Offset(relu2, 1))")
                 .replace("component name=affine2",
                          "component name=relu2 type=RectifiedLinearComponent dim=12\n"
                          "component-node name=relu2 component=relu2 input=bn1\n"
                          "component name=affine2"))
    bn = _comp(nnet, "bn1")
    bn.test_mode = True
    bn.offset = np.zeros(12, dtype=F32)
    bn.scale_ = np.ones(12, dtype=F32)
    collapse_model(nnet, ALL_ON)
    assert "bn1" not in nnet.component_names
    assert _desc_text(nnet, "relu2") == "relu1"
    assert "relu2" in nnet.component_names  # same component, not renamed


BLOCK_NET = """
input-node name=input dim=6
component name=affine1 type=AffineComponent input-dim=6 output-dim=12 bias-stddev=0.5
component-node name=affine1 component=affine1 input=input
component name=bn1 type=BatchNormComponent dim=12 block-dim=4
component-node name=bn1 component=bn1 input=affine1
component name=lin1 type=LinearComponent input-dim=12 output-dim=5 learning-rate=0.0025
component-node name=lin1 component=lin1 input=bn1
component name=bn2 type=BatchNormComponent dim=5
component-node name=bn2 component=bn2 input=lin1
component name=tdnn1 type=TdnnComponent input-dim=5 output-dim=7 time-offsets=-1,0,2 use-bias=false
component-node name=tdnn1 component=tdnn1 input=bn2
output-node name=output input=tdnn1
"""


def test_batchnorm_into_linear_and_tdnn():
    nnet = _make(BLOCK_NET)
    _bn_set_stats(_comp(nnet, "bn1"), 2)
    _bn_set_stats(_comp(nnet, "bn2"), 3)
    orig = _copy(nnet)
    collapse_model(nnet, ALL_ON)
    # bn1 -> lin1 gives an AffineComponent (Kaldi's AffineComponent(params, 0, lr));
    # then affine1 (6 -> 12, not reducing) and that affine merge in the next pass.
    assert nnet.component_names == ["bn2.tdnn1", "affine1.bn1.lin1"]
    assert _desc_text(nnet, "lin1") == "input"
    assert _desc_text(nnet, "tdnn1") == "lin1"
    tdnn = _comp(nnet, "bn2.tdnn1")
    assert tdnn.type_name == "TdnnComponent" and tdnn.bias_params.shape == (7,)
    merged = _comp(nnet, "affine1.bn1.lin1")
    assert merged.type_name == "AffineComponent" and merged.linear_params.shape == (5, 6)
    # The merge of two affines is a fresh AffineComponent with default settings.
    assert merged.learning_rate == pytest.approx(0.001)
    _check_same_output(orig, nnet, {"input": 6}, num_frames=15)


def test_linear_to_affine_keeps_learning_rate():
    nnet = _make(BLOCK_NET.replace("output-dim=12 bias-stddev=0.5", "output-dim=4 bias-stddev=0.5")
                 .replace("input-dim=6", "input-dim=16").replace("dim=6", "dim=16")
                 .replace("dim=12 block-dim=4", "dim=4").replace("input-dim=12", "input-dim=4"))
    _bn_set_stats(_comp(nnet, "bn1"), 4)
    _bn_set_stats(_comp(nnet, "bn2"), 5)
    orig = _copy(nnet)
    collapse_model(nnet, ALL_ON)
    # affine1 is dimension-reducing (16 -> 4), so it is not merged further.
    assert nnet.component_names == ["affine1", "bn1.lin1", "bn2.tdnn1"]
    new = _comp(nnet, "bn1.lin1")
    assert new.type_name == "AffineComponent"
    assert new.learning_rate == pytest.approx(0.0025)
    _check_same_output(orig, nnet, {"input": 16}, num_frames=15)


AFFINE_NET = """
input-node name=input dim=8
component name=lda type=FixedAffineComponent input-dim=24 output-dim=24
component-node name=lda component=lda input=Append(Offset(input, -1), input, Offset(input, 1))
component name=affine1 type=NaturalGradientAffineComponent input-dim=48 output-dim=16 bias-stddev=0.5
component-node name=affine1 component=affine1 input=Append(Offset(lda, -2), Offset(lda, 2))
component name=relu1 type=RectifiedLinearComponent dim=16
component-node name=relu1 component=relu1 input=affine1
component name=affine2 type=NaturalGradientAffineComponent input-dim=16 output-dim=20 bias-stddev=0.5
component-node name=affine2 component=affine2 input=relu1
component name=affine3 type=AffineComponent input-dim=20 output-dim=20 bias-stddev=0.5
component-node name=affine3 component=affine3 input=affine2
component name=affine4 type=NaturalGradientAffineComponent input-dim=20 output-dim=6 bias-stddev=0.5
component-node name=affine4 component=affine4 input=affine3
output-node name=output input=affine4
"""


def test_affine_chains_and_block_diagonal_lda(capfd):
    nnet = _make(AFFINE_NET)
    orig = _copy(nnet)
    collapse_model(nnet)
    # lda feeds two offsets of itself into affine1: block-diagonal product, and
    # the descriptor composes the offsets.  affine2 -> affine3 -> affine4 merge
    # within one pass (the name chains as it goes).
    assert nnet.component_names == ["relu1", "lda.affine1", "affine2.affine3.affine4"]
    assert _desc_text(nnet, "affine1") == ("Append(Offset(input, -3), Offset(input, -2), "
                                           "Offset(input, -1), Offset(input, 1), "
                                           "Offset(input, 2), Offset(input, 3))")
    assert _desc_text(nnet, "affine4") == "relu1"
    assert _desc_text(nnet, "output") == "affine4"
    assert [nnet.node_names[n] for n in range(nnet.num_nodes())
            if not nnet.is_component_input_node(n)] == ["input", "affine1", "relu1",
                                                         "affine4", "output"]
    for name in ("lda.affine1", "affine2.affine3.affine4"):
        assert _comp(nnet, name).type_name == "AffineComponent"
    assert _comp(nnet, "lda.affine1").linear_params.shape == (16, 48)
    err = capfd.readouterr().err
    assert "Added 3 components, removed 6" in err
    assert "Removed 3 orphan nodes." in err
    _check_same_output(orig, nnet, {"input": 8}, num_frames=14)


def test_dimension_reducing_first_affine_not_merged():
    nnet = _make(AFFINE_NET.replace("input-dim=20 output-dim=20", "input-dim=20 output-dim=10")
                 .replace("name=affine4 type=NaturalGradientAffineComponent input-dim=20",
                          "name=affine4 type=NaturalGradientAffineComponent input-dim=10"))
    collapse_model(nnet)
    # affine2 (16 -> 20) merges into affine3; affine2.affine3 (16 -> 10) is
    # reducing, so affine4 stays.
    assert nnet.component_names == ["relu1", "affine4", "lda.affine1", "affine2.affine3"]


SCALE_NET = """
input-node name=input dim=7
component name=affine1 type=NaturalGradientAffineComponent input-dim=7 output-dim=9 bias-stddev=0.5 max-change=1.5
component-node name=affine1 component=affine1 input=input
component name=fs type=FixedScaleComponent dim=9
component-node name=fs component=fs input=affine1
component name=relu type=RectifiedLinearComponent dim=9
component-node name=relu component=relu input=fs
component name=pes type=PerElementScaleComponent dim=9
component-node name=pes component=pes input=relu
output-node name=output input=pes
"""


def test_affine_then_fixed_scale():
    nnet = _make(SCALE_NET)
    orig = _copy(nnet)
    collapse_model(nnet)
    # PerElementScale is not something Kaldi folds: it stays.
    assert nnet.component_names == ["relu", "pes", "affine1.fs"]
    new = _comp(nnet, "affine1.fs")
    assert new.type_name == "NaturalGradientAffineComponent"
    assert new.max_change == pytest.approx(1.5)
    assert _desc_text(nnet, "relu") == "fs"
    assert _desc_text(nnet, "fs") == "input"
    scales = _comp(orig, "fs").scales
    np.testing.assert_allclose(new.linear_params,
                               _comp(orig, "affine1").linear_params * scales[:, None], rtol=1e-6)
    _check_same_output(orig, nnet, {"input": 7})
    # Disabled: nothing happens.
    again = _copy(orig)
    collapse_model(again, CollapseModelConfig(collapse_scale=False))
    assert again.component_names == orig.component_names


DROPOUT_NET = """
input-node name=input dim=6
component name=affine1 type=AffineComponent input-dim=6 output-dim=6 bias-stddev=0.5
component-node name=affine1 component=affine1 input=input
component name=relu1 type=RectifiedLinearComponent dim=6
component-node name=relu1 component=relu1 input=affine1
component name=drop1 type=DropoutComponent dim=6 dropout-proportion={p}
component-node name=drop1 component=drop1 input=relu1
component name=affine2 type=NaturalGradientAffineComponent input-dim=12 output-dim=5 bias-stddev=0.5
component-node name=affine2 component=affine2 input=Append(drop1, Offset(drop1, -2))
component name=affine3 type=AffineComponent input-dim=12 output-dim=4 bias-stddev=0.5
component-node name=affine3 component=affine3 input=Append(drop1, Offset(drop1, -2))
component name=sum type=NoOpComponent dim=9
component-node name=sum component=sum input=Append(affine2, affine3)
output-node name=output input=sum
"""


@pytest.mark.parametrize("p, suffix", [(0.5, "scale2"), (0.3, "scale1.43"), (0.2, "scale1.25")])
def test_dropout_component_scales_linear_params(p, suffix):
    nnet = _make(DROPOUT_NET.format(p=p))
    set_dropout_test_mode(True, nnet)
    orig = _copy(nnet)
    collapse_model(nnet)
    assert "drop1" in nnet.component_names  # off by default in Kaldi
    collapse_model(nnet, ALL_ON)
    assert nnet.component_names == ["affine1", "relu1", "sum", f"affine2.{suffix}",
                                    f"affine3.{suffix}"]
    assert _desc_text(nnet, "affine2") == "Append(relu1, Offset(relu1, -2))"
    new = _comp(nnet, f"affine2.{suffix}")
    assert new.type_name == "NaturalGradientAffineComponent"
    # Kaldi multiplies by 1/(1-p) (its test-mode DropoutComponent scales by
    # 1-p, so this is Kaldi's behaviour rather than an exact equivalence).
    factor = np.float32(1.0 / (1.0 - np.float32(p)))
    np.testing.assert_array_equal(new.linear_params,
                                  (_comp(orig, "affine2").linear_params * factor).astype(F32))
    np.testing.assert_array_equal(new.bias_params, _comp(orig, "affine2").bias_params)


GDROP_NET = """
input-node name=input dim=6
component name=affine1 type=AffineComponent input-dim=6 output-dim=8 bias-stddev=0.5
component-node name=affine1 component=affine1 input=input
component name=drop1 type=GeneralDropoutComponent dim=8 dropout-proportion=0.5 continuous=true
component-node name=drop1 component=drop1 input=affine1
component name=relu1 type=RectifiedLinearComponent dim=8
component-node name=relu1 component=relu1 input=drop1
component name=drop2 type=GeneralDropoutComponent dim=8 dropout-proportion=0.5 continuous=true
component-node name=drop2 component=drop2 input=relu1
component name=tdnn1 type=TdnnComponent input-dim=8 output-dim=5 time-offsets=-1,1
component-node name=tdnn1 component=tdnn1 input=drop2
component name=affine2 type=NaturalGradientAffineComponent input-dim=10 output-dim=4 bias-stddev=0.5
component-node name=affine2 component=affine2 input=Append(Offset(drop2, -1), Offset(drop2, 1))
component name=noop type=NoOpComponent dim=9
component-node name=noop component=noop input=Append(tdnn1, affine2)
output-node name=output input=noop
"""


def test_general_dropout_is_bypassed():
    if new_component_of_type("GeneralDropoutComponent") is None:
        pytest.skip("GeneralDropoutComponent not available")
    nnet = _make(GDROP_NET.replace("input-dim=10", "input-dim=16"))
    set_dropout_test_mode(True, nnet)
    orig = _copy(nnet)
    collapse_model(nnet, ALL_ON)
    # Scale 1: the following component is reused as is, whatever its type.
    assert nnet.component_names == ["affine1", "relu1", "tdnn1", "affine2", "noop"]
    assert _desc_text(nnet, "relu1") == "affine1"
    assert _desc_text(nnet, "tdnn1") == "relu1"
    assert _desc_text(nnet, "affine2") == "Append(Offset(relu1, -1), Offset(relu1, 1))"
    _check_same_output(orig, nnet, {"input": 6}, num_frames=10)


def test_shared_component_collapsed_once():
    # Two nodes use affine2 after bn1: one "bn1.affine2" is created and reused.
    nnet = _make(BN_NET.replace("output-node name=output input=affine2", """
component-node name=affine2b component=affine2 input=Append(Offset(bn1, -2), bn1, Offset(bn1, 2))
component name=noop type=NoOpComponent dim=16
component-node name=noop component=noop input=Append(affine2, affine2b)
output-node name=output input=noop
"""))
    _bn_set_stats(_comp(nnet, "bn1"), 6)
    orig = _copy(nnet)
    collapse_model(nnet, ALL_ON)
    assert nnet.component_names == ["affine1", "relu1", "noop", "bn1.affine2"]
    c = nnet.get_component_index("bn1.affine2")
    for node in ("affine2", "affine2b"):
        assert nnet.nodes[nnet.get_node_index(node)].component_index == c
    _check_same_output(orig, nnet, {"input": 10}, num_frames=14)


def test_non_collapsible_descriptors_left_alone():
    # Sum(...) and references to two different nodes are not simple enough.
    nnet = _make("""
input-node name=input dim=5
component name=a1 type=AffineComponent input-dim=5 output-dim=5
component-node name=a1 component=a1 input=input
component name=a2 type=AffineComponent input-dim=5 output-dim=5
component-node name=a2 component=a2 input=input
component name=a3 type=AffineComponent input-dim=5 output-dim=5
component-node name=a3 component=a3 input=Sum(a1, a2)
component name=a4 type=AffineComponent input-dim=10 output-dim=5
component-node name=a4 component=a4 input=Append(a1, a3)
output-node name=output input=a4
""")
    before = _copy(nnet)
    collapse_model(nnet)
    assert nnet.component_names == before.component_names
    assert nnet.get_config_lines() == before.get_config_lines()


def test_scaled_descriptor_rewritten_textually():
    # Kaldi ignores a Scale() on the input node; it survives in the text
    # (and is normalised to sit on the node name).
    nnet = _make("""
input-node name=input dim=5
component name=lda type=FixedAffineComponent input-dim=5 output-dim=5
component-node name=lda component=lda input=Offset(input, 1)
component name=a1 type=AffineComponent input-dim=10 output-dim=3
component-node name=a1 component=a1 input=Append(Scale(0.5, lda), Offset(lda, -1))
output-node name=output input=a1
""")
    collapse_model(nnet)
    assert nnet.component_names == ["lda.a1"]
    assert _desc_text(nnet, "a1") == "Append(Offset(Scale(0.5, input), 1), input)"


# ---------------------------------------------------------------------------
# Kaldi-trained reference models: nnet3-compute collapses with the default
# config; its log says what was added/removed, and out_a.ark is the output of
# the collapsed network.


def _read_ark(path: str) -> dict:
    with open(path, "rb") as f:
        data = f.read()
    out, pos = {}, 0
    while pos < len(data):
        sp = data.index(b" ", pos)
        key = data[pos:sp].decode()
        assert data[sp + 1:sp + 3] == b"\0B"
        r = KaldiReader(data, True, path, sp + 3)
        tok = data[sp + 3:sp + 5]
        out[key] = r.read_matrix() if tok in (b"FM", b"DM") else r.read_vector()
        pos = r.pos
    return out


def _load_small(name: str) -> Nnet:
    path = os.path.join(SMALL, name, "1.raw")
    if not os.path.exists(path):
        pytest.skip("reference models absent")
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(path)
    set_batchnorm_test_mode(True, nnet)
    set_dropout_test_mode(True, nnet)
    return nnet


def _kaldi_log_counts(name: str) -> tuple[int, int, int, int]:
    with open(os.path.join(SMALL, name, "log.compute_a.txt")) as f:
        text = f.read()
    nodes = int(re.search(r"Removed (\d+) orphan nodes", text).group(1))
    comps = int(re.search(r"Removing (\d+) orphan components", text).group(1))
    m = re.search(r"Added (\d+) components, removed (\d+)", text)
    added, removed = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    return nodes, comps, added, removed


def _network_output(nnet: Nnet, feats: np.ndarray, ivector, pad: int = 60):
    idx = np.clip(np.arange(-pad, feats.shape[0] + pad), 0, feats.shape[0] - 1)
    inputs = {"input": (-pad, feats[idx])}
    if ivector is not None:
        inputs["ivector"] = (None, ivector.reshape(1, -1))
    lo, y = forward(nnet, inputs)
    return y[-lo:-lo + feats.shape[0]]


@pytest.mark.parametrize("name", ["tdnn_xent_nnet3_wsj_1b", "tdnnf_librispeech_1d"])
def test_reference_models_match_kaldi(name, capfd):
    nnet = _load_small(name)
    orig = _copy(nnet)
    num_nodes, num_comps = nnet.num_nodes(), nnet.num_components()
    capfd.readouterr()
    collapse_model(nnet)
    err = capfd.readouterr().err
    k_nodes, k_comps, k_added, k_removed = _kaldi_log_counts(name)
    assert f"Removed {k_nodes} orphan nodes." in err
    assert f"Removing {k_comps} orphan components." in err
    assert f"Added {k_added} components, removed {k_removed}" in err
    # Each removed non-input node takes its hidden descriptor node with it.
    assert nnet.num_nodes() == num_nodes - 2 * k_nodes
    assert nnet.num_components() == num_comps + k_added - k_removed
    assert "lda.tdnn1.affine" in nnet.component_names
    assert "lda" not in nnet.component_names and "lda" not in nnet.node_names
    nnet.check()

    feats = _read_ark(os.path.join(SMALL, name, "feats_test.ark"))
    ivecs = _read_ark(os.path.join(SMALL, name, "ivectors_test.ark"))
    kaldi = _read_ark(os.path.join(SMALL, name, "out_a.ark"))
    for utt in ("test01", "test02"):
        y = _network_output(nnet, feats[utt], ivecs.get(utt))
        assert y.shape == kaldi[utt].shape
        assert _rel_err(y, kaldi[utt]) < 1e-4, utt
        y0 = _network_output(orig, feats[utt], ivecs.get(utt))
        assert _rel_err(y, y0) < 1e-4, utt


def test_tdnnf_all_options_equivalent():
    name = "tdnnf_librispeech_1d"
    nnet = _load_small(name)
    orig = _copy(nnet)
    collapse_model(nnet, ALL_ON)
    nnet.check()
    names = nnet.component_names
    # The tdnnf bypass (Sum(Scale(0.75, prev), dropout)) keeps each dropout and
    # batchnorm alive; the linear part of each layer absorbs them.
    assert "tdnn1.batchnorm.tdnnf2.linear" in names
    assert _comp(nnet, "tdnn1.batchnorm.tdnnf2.linear").type_name == "TdnnComponent"
    assert _desc_text(nnet, "tdnnf2.linear") == "tdnn1.relu"
    assert "prefinal-chain.batchnorm2.output.affine" in names
    assert _comp(nnet, "prefinal-chain.batchnorm1.prefinal-chain.linear").type_name == \
        "AffineComponent"
    assert "prefinal-chain.batchnorm2" not in names and "prefinal-chain.batchnorm2" \
        not in nnet.node_names
    assert "lda.tdnn1.affine" in names
    feats = _read_ark(os.path.join(SMALL, name, "feats_test.ark"))
    ivecs = _read_ark(os.path.join(SMALL, name, "ivectors_test.ark"))
    kaldi = _read_ark(os.path.join(SMALL, name, "out_a.ark"))
    utt = "test02"
    y = _network_output(nnet, feats[utt], ivecs[utt])
    y0 = _network_output(orig, feats[utt], ivecs[utt])
    assert _rel_err(y, y0) < 1e-4
    assert _rel_err(y, kaldi[utt]) < 1e-4
