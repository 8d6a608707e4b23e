"""Test-time simplification of a network (Kaldi's CollapseModel in nnet-utils.cc).

Pairs of components where the first feeds the second through a simple
descriptor (``foo``, ``Offset(foo, -3)``, or an Append of such terms all
naming the same node) are merged into one new component, and the node of the
second component is rewired to read what the first one read.  Nodes and
components nobody uses any more are removed at the end.  Supported pairs, in
the order Kaldi tries them:

* dropout (Dropout/GeneralDropout) -> Affine/Linear/Tdnn/TimeHeightConvolution:
  the dropout is dropped and its scale folded into the linear parameters;
* BatchNorm (test mode) -> Affine/Linear/Tdnn: the per-dimension scale and
  offset are folded into the parameters;
* FixedAffine/Affine (not dimension-reducing) -> Affine: the product;
* Affine -> FixedScale of the same dim: the scales folded into the rows.

Names of new components follow Kaldi (``a.b``, ``name.scale2``), and a
combined component that already exists under that name is reused, which is
what lets several nodes sharing a component share the collapsed one too.

Kaldi's defaults are kept: collapse_dropout and collapse_batchnorm are off,
so nnet3-compute and ``nnet3-copy --prepare-for-test`` only merge affine
pairs and fixed scales.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import log
from ..errors import PynnetError
from .components.base import Component, fmt_g, new_component_of_type
from .descriptor import (Descriptor, OffsetForwardingDescriptor,
                         SimpleForwardingDescriptor, SimpleSumDescriptor,
                         SumDescriptor)
from .descriptor_parse import parse_descriptor
from .nnet import Nnet, NodeType
from .utils import remove_orphan_components, remove_orphan_nodes

_F32 = np.float32

# Kaldi decides by dynamic_cast; in Kaldi's class tree only
# NaturalGradientAffineComponent derives from AffineComponent (FixedAffine
# does not), so matching on type names is exact and independent of how the
# Python classes happen to be arranged.
_AFFINE_TYPES = frozenset(("AffineComponent", "NaturalGradientAffineComponent"))


@dataclass
class CollapseModelConfig:
    """Kaldi's CollapseModelConfig, with Kaldi's defaults."""

    collapse_dropout: bool = False
    collapse_batchnorm: bool = False
    collapse_affine: bool = True
    collapse_scale: bool = True


def collapse_model(nnet: Nnet, config: CollapseModelConfig | None = None) -> None:
    """Simplify ``nnet`` in place for test-time use (Kaldi's CollapseModel).

    BatchNorm and dropout components must already be in test mode where the
    corresponding option is on (set_batchnorm_test_mode / set_dropout_test_mode).
    """
    _ModelCollapser(config if config is not None else CollapseModelConfig(), nnet).collapse()


def _is_affine(comp: Component) -> bool:
    return comp.type_name in _AFFINE_TYPES


class _ModelCollapser:
    def __init__(self, config: CollapseModelConfig, nnet: Nnet) -> None:
        self.config = config
        self.nnet = nnet

    # -- driver --------------------------------------------------------------
    def collapse(self) -> None:
        nnet = self.nnet
        num_nodes = nnet.num_nodes()
        num_components1 = nnet.num_components()
        changed = True
        num_iters = 0
        while changed:
            changed = False
            for n in range(num_nodes):
                if self._optimize_node(n):
                    changed = True
            # Each pass can only shorten chains, so a handful of passes suffice;
            # more means something is looping.
            if num_iters >= 10:
                raise PynnetError("something went wrong collapsing model")
            num_iters += 1
        num_components2 = nnet.num_components()
        remove_orphan_nodes(nnet)
        remove_orphan_components(nnet)
        num_components3 = nnet.num_components()
        if num_components2 != num_components1 or num_components3 != num_components2:
            log.log(f"Added {num_components2 - num_components1} components, "
                    f"removed {num_components2 - num_components3}")

    def _add_component(self, name: str, comp: Component) -> int:
        self.nnet.components.append(comp)
        self.nnet.component_names.append(name)
        return len(self.nnet.components) - 1

    def _collapse_components(self, c1: int, c2: int) -> int:
        """Index of a component equivalent to ``c2`` applied to the output of
        ``c1`` (created or found), or -1 if the pair can't be merged."""
        cfg = self.config
        if cfg.collapse_dropout:
            ans = self._collapse_dropout(c1, c2)
            if ans != -1:
                return ans
        if cfg.collapse_batchnorm:
            ans = self._collapse_batchnorm(c1, c2)
            if ans != -1:
                return ans
        if cfg.collapse_affine:
            ans = self._collapse_affine(c1, c2)
            if ans != -1:
                return ans
        if cfg.collapse_scale:
            ans = self._collapse_scale(c1, c2)
            if ans != -1:
                return ans
        return -1

    # -- descriptors -----------------------------------------------------------
    @staticmethod
    def _sum_descriptor_node(part: SumDescriptor) -> int:
        """The node of a part that is ``node`` or ``Offset(node, ...)``, else -1.

        As in Kaldi, a Scale(...) on the node is not looked at (it survives
        the rewrite textually).
        """
        if not isinstance(part, SimpleSumDescriptor):
            return -1
        fd = part.src
        if isinstance(fd, OffsetForwardingDescriptor):
            fd = fd.src
        if not isinstance(fd, SimpleForwardingDescriptor):
            return -1
        return fd.src_node

    def _descriptor_node(self, desc: Descriptor) -> int:
        """The single node every part of ``desc`` reads (possibly at an
        offset), or -1 if the parts differ or are more complex."""
        ans = self._sum_descriptor_node(desc.part(0))
        for i in range(1, desc.num_parts()):
            if ans != -1 and self._sum_descriptor_node(desc.part(i)) != ans:
                ans = -1
        return ans

    def _replace_node_in_descriptor(self, src: Descriptor, node_to_replace: int,
                                    expr: Descriptor) -> Descriptor:
        """``src`` with node ``node_to_replace`` replaced by the expression ``expr``.

        Done on the text, as Kaldi does: print ``src`` with that node's name
        replaced by the text of ``expr`` and parse the result, letting the
        parser's normalisation merge nested Offsets and lift Appends.
        """
        names = list(self.nnet.node_names)
        fake_names = list(names)
        fake_names[node_to_replace] = expr.text(names)
        return parse_descriptor(src.text(fake_names), names)

    def _optimize_node(self, node_index: int) -> bool:
        """Try to merge the component of node ``node_index + 1`` with the
        component feeding it; True if the network changed."""
        nnet = self.nnet
        descriptor_node = nnet.nodes[node_index]
        if (descriptor_node.node_type is not NodeType.DESCRIPTOR
                or node_index + 1 >= nnet.num_nodes()):
            return False
        component_node = nnet.nodes[node_index + 1]
        if component_node.node_type is not NodeType.COMPONENT:
            return False
        descriptor = descriptor_node.descriptor
        assert descriptor is not None
        input_node_index = self._descriptor_node(descriptor)
        if input_node_index == -1:
            return False
        input_node = nnet.nodes[input_node_index]
        if input_node.node_type is not NodeType.COMPONENT:
            return False
        combined = self._collapse_components(input_node.component_index,
                                             component_node.component_index)
        if combined == -1:
            return False
        component_node.component_index = combined
        # Read what the bypassed component read; it and its node become orphans
        # (and are removed at the end) unless something else still uses them.
        input_descriptor = nnet.nodes[input_node_index - 1].descriptor
        assert input_descriptor is not None
        descriptor_node.descriptor = self._replace_node_in_descriptor(
            descriptor, input_node_index, input_descriptor)
        return True

    # -- the pairs ---------------------------------------------------------------
    def _collapse_dropout(self, c1: int, c2: int) -> int:
        comp1 = self.nnet.components[c1]
        if comp1.type_name == "DropoutComponent":
            # Kaldi's correction factor, computed in double and stored as float.
            # (Note: test-mode DropoutComponent multiplies by 1 - p, so this
            # is not an exact equivalence; it is what Kaldi does.)
            p = float(comp1.dropout_proportion)  # type: ignore[attr-defined]
            scale = float(_F32(1.0 / (1.0 - p)))
        elif comp1.type_name == "GeneralDropoutComponent":
            # Its nonzero mask values are 1/(1-p), so the expectation is 1.
            scale = 1.0
        else:
            return -1
        return self._scaled_component_index(c2, scale)

    def _collapse_batchnorm(self, c1: int, c2: int) -> int:
        bn = self.nnet.components[c1]
        if bn.type_name != "BatchNormComponent":
            return -1
        offset = np.asarray(bn.offset, dtype=_F32)  # type: ignore[attr-defined]
        if offset.shape[0] == 0:
            raise PynnetError("Expected batch-norm components to have test-mode set.")
        scale = np.asarray(bn.scale_, dtype=_F32)  # type: ignore[attr-defined]
        return self._diagonally_pre_modified_component_index(
            offset, scale, self.nnet.component_names[c1], c2)

    def _collapse_affine(self, c1: int, c2: int) -> int:
        nnet = self.nnet
        comp1, comp2 = nnet.components[c1], nnet.components[c2]
        is_fixed1 = comp1.type_name == "FixedAffineComponent"
        if not _is_affine(comp2) or not (is_fixed1 or _is_affine(comp1)):
            return -1
        name = f"{nnet.component_names[c1]}.{nnet.component_names[c2]}"
        existing = nnet.get_component_index(name)
        if existing >= 0:
            return existing
        if comp1.input_dim() > comp1.output_dim():
            # Merging after a dimension-reducing transform would cost more
            # than it saves.
            return -1
        linear1 = np.asarray(comp1.linear_params, dtype=_F32)  # type: ignore[attr-defined]
        bias1 = np.asarray(comp1.bias_params, dtype=_F32)  # type: ignore[attr-defined]
        output_dim1, input_dim1 = linear1.shape
        linear2 = np.asarray(comp2.linear_params, dtype=_F32)  # type: ignore[attr-defined]
        bias2 = np.asarray(comp2.bias_params, dtype=_F32)  # type: ignore[attr-defined]
        input_dim2 = comp2.input_dim()
        if input_dim2 % output_dim1 != 0:
            raise PynnetError(f"collapsing {name}: input dim {input_dim2} is not a "
                              f"multiple of {output_dim1}")
        # Spliced inputs (Append of several offsets of the first component's
        # output) turn the first transform into a block-diagonal one.
        multiple = input_dim2 // output_dim1
        bias1_full = np.tile(bias1, multiple)
        linear1_full = np.zeros((input_dim2, multiple * input_dim1), dtype=_F32)
        for i in range(multiple):
            linear1_full[i * output_dim1:(i + 1) * output_dim1,
                         i * input_dim1:(i + 1) * input_dim1] = linear1
        new_bias = (bias2 + linear2 @ bias1_full).astype(_F32)
        new_linear = (linear2 @ linear1_full).astype(_F32)
        # A plain AffineComponent with default learning-rate settings, as Kaldi
        # creates (its random Init is overwritten by the parameters anyway).
        new_comp = _new("AffineComponent")
        new_comp.set_params(new_bias, new_linear)  # type: ignore[attr-defined]
        return self._add_component(name, new_comp)

    def _collapse_scale(self, c1: int, c2: int) -> int:
        nnet = self.nnet
        comp1, comp2 = nnet.components[c1], nnet.components[c2]
        if (not _is_affine(comp1) or comp2.type_name != "FixedScaleComponent"
                or comp1.output_dim() != comp2.input_dim()):
            return -1
        name = f"{nnet.component_names[c1]}.{nnet.component_names[c2]}"
        existing = nnet.get_component_index(name)
        if existing >= 0:
            return existing
        scales = np.asarray(comp2.scales, dtype=_F32)  # type: ignore[attr-defined]
        new_comp = comp1.copy()  # keeps the type (natural gradient) and its options
        bias = np.asarray(comp1.bias_params, dtype=_F32) * scales  # type: ignore[attr-defined]
        linear = np.asarray(comp1.linear_params, dtype=_F32) * scales[:, None]  # type: ignore[attr-defined]
        new_comp.set_params(bias.astype(_F32), linear.astype(_F32))  # type: ignore[attr-defined]
        return self._add_component(name, new_comp)

    # -- helpers that fold transforms into a component -----------------------------
    def _diagonally_pre_modified_component_index(self, offset: np.ndarray, scale: np.ndarray,
                                                 src_identifier: str, c: int) -> int:
        """A component equal to component ``c`` preceded by ``x -> scale*x + offset``
        (per dimension, repeated across the input if it is spliced); found by
        name if made before, created otherwise; -1 if ``c`` can't absorb it.
        The identity transform returns ``c`` itself, whatever its type."""
        assert offset.shape[0] > 0 and offset.shape == scale.shape
        if (offset.max() == 0.0 and offset.min() == 0.0
                and scale.max() == 1.0 and scale.min() == 1.0):
            return c
        nnet = self.nnet
        name = f"{src_identifier}.{nnet.component_names[c]}"
        existing = nnet.get_component_index(name)
        if existing >= 0:
            return existing
        comp = nnet.components[c]
        if _is_affine(comp):
            new_comp = comp.copy()
            new_comp.bias_params, new_comp.linear_params = _pre_multiply_affine(  # type: ignore[attr-defined]
                offset, scale, new_comp.bias_params, new_comp.linear_params)  # type: ignore[attr-defined]
        elif comp.type_name == "LinearComponent":
            # Kaldi's AffineComponent(linear-params, zero bias, learning-rate).
            params = np.asarray(comp.params, dtype=_F32)  # type: ignore[attr-defined]
            new_comp = _new("AffineComponent")
            bias, linear = _pre_multiply_affine(
                offset, scale, np.zeros(params.shape[0], dtype=_F32), params)
            new_comp.set_params(bias, linear)  # type: ignore[attr-defined]
            new_comp.set_underlying_learning_rate(comp.learning_rate)  # type: ignore[attr-defined]
        elif comp.type_name == "TdnnComponent":
            new_comp = comp.copy()
            bias = np.asarray(new_comp.bias_params, dtype=_F32)  # type: ignore[attr-defined]
            if bias.shape[0] == 0:
                # The offset needs somewhere to go.
                bias = np.zeros(new_comp.output_dim(), dtype=_F32)
            new_comp.bias_params, new_comp.linear_params = _pre_multiply_affine(  # type: ignore[attr-defined]
                offset, scale, bias, new_comp.linear_params)  # type: ignore[attr-defined]
        else:
            return -1
        return self._add_component(name, new_comp)

    def _scaled_component_index(self, c: int, scale: float) -> int:
        """A component equal to component ``c`` applied to its input times
        ``scale`` (found by name or created), or -1 if ``c`` can't be scaled.
        A scale of 1 returns ``c`` itself, whatever its type."""
        if scale == 1.0:
            return c
        nnet = self.nnet
        # Kaldi prints the float with std::setprecision(3), e.g. "foo.scale2".
        name = f"{nnet.component_names[c]}.scale{fmt_g(scale, 3)}"
        existing = nnet.get_component_index(name)
        if existing >= 0:
            return existing
        comp = nnet.components[c]
        s = _F32(scale)
        if _is_affine(comp) or comp.type_name in ("TimeHeightConvolutionComponent",
                                                   "TdnnComponent"):
            new_comp = comp.copy()
            new_comp.linear_params = (  # type: ignore[attr-defined]
                np.asarray(new_comp.linear_params, dtype=_F32) * s).astype(_F32)  # type: ignore[attr-defined]
        elif comp.type_name == "LinearComponent":
            new_comp = comp.copy()
            new_comp.params = (np.asarray(new_comp.params, dtype=_F32) * s).astype(_F32)  # type: ignore[attr-defined]
        else:
            return -1
        return self._add_component(name, new_comp)


def _new(type_name: str) -> Component:
    comp = new_component_of_type(type_name)
    assert comp is not None, type_name
    return comp


def _pre_multiply_affine(offset: np.ndarray, scale: np.ndarray, bias: np.ndarray,
                         linear: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bias, linear) of ``y = linear (scale*x + offset) + bias``, i.e.
    ``bias + linear @ offset`` and ``linear * scale`` by column, with
    offset/scale repeated to cover a spliced input."""
    linear = np.asarray(linear, dtype=_F32)
    bias = np.asarray(bias, dtype=_F32)
    input_dim, transform_dim = linear.shape[1], offset.shape[0]
    if bias.shape[0] != linear.shape[0] or input_dim % transform_dim != 0:
        raise PynnetError(f"cannot fold a diagonal transform of dim {transform_dim} into "
                          f"a {linear.shape[0]} x {input_dim} affine transform")
    reps = input_dim // transform_dim
    full_offset = np.tile(offset.astype(_F32), reps)
    full_scale = np.tile(scale.astype(_F32), reps)
    new_bias = (bias + linear @ full_offset).astype(_F32)
    new_linear = np.ascontiguousarray(linear * full_scale, dtype=_F32)
    return new_bias, new_linear
