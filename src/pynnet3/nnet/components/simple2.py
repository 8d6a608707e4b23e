"""Simple components (Kaldi's nnet-simple-component.{h,cc}), part 2: the
fixed, non-trainable ones (NoOp, ClipGradient, Dropout, SumGroup, SumBlock,
Permute, FixedScale, FixedBias).

Shared helpers come from :mod:`.simple`; see its docstring for the array
conventions of propagate/backprop.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import FormatError
from ...io.kaldi_io import KaldiReader, KaldiWriter, open_kaldi_object
from ..config_line import ConfigLine
from .base import Component, Prop, fmt_g, print_parameter_stats, register, rng
from .simple import F32, _axpy_f32, _expect_or_error, _seq_sum_f32, _split_ints, f32


@register
class NoOpComponent(Component):
    """Copies its input; the derivative may be scaled by backprop-scale."""

    type_name = "NoOpComponent"

    def __init__(self) -> None:
        self.dim = 0
        self.backprop_scale = 1.0

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.backprop_scale = f32(cfl.get_float("backprop-scale", 1.0))
        dim = cfl.get_int("dim")
        _expect_or_error(dim is not None and dim > 0, self, cfl, "dim > 0 required")
        self.dim = dim

    def info(self) -> str:
        s = f"{self.type_name}, dim={self.dim}"
        if self.backprop_scale != 1.0:
            s += f", backprop-scale={fmt_g(self.backprop_scale)}"
        return s

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<NoOpComponent>")
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<BackpropScale>")
        w.write_float(self.backprop_scale)
        w.write_token("</NoOpComponent>")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        if r.peek_token().startswith("<V"):
            # Old format, from when NoOpComponent was a NonlinearComponent:
            # skip the statistics.
            self.backprop_scale = 1.0
            r.expect_token("<ValueAvg>")
            r.read_vector()
            r.expect_token("<DerivAvg>")
            r.read_vector()
            r.expect_token("<Count>")
            r.read_float()
            if r.peek_token().startswith("<O"):
                r.expect_token("<OderivRms>")
                r.read_vector()
                r.expect_token("<OderivCount>")
                r.read_float()
            token = r.read_token()
            if not token.startswith("<"):
                token = "<" + token
            if token == "<NumDimsSelfRepaired>":
                r.read_float()
                token = r.read_token()
            if token == "<NumDimsProcessed>":
                r.read_float()
                token = r.read_token()
            if token != "</NoOpComponent>":
                raise r.error(f"NoOpComponent: expected </NoOpComponent>, got {token[:40]}")
            return
        r.expect_token("<BackpropScale>")
        self.backprop_scale = r.read_float()
        r.expect_token("</NoOpComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        if out_value is not in_value:
            out_value[...] = in_value
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        if in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
        if self.backprop_scale != 1.0:
            in_deriv *= F32(self.backprop_scale)


@register
class ClipGradientComponent(Component):
    """Identity forward; clips the backpropagated derivative (per element, or
    per row norm), with an optional self-repair term."""

    type_name = "ClipGradientComponent"

    def __init__(self) -> None:
        self.dim = 0
        self.clipping_threshold = -1.0
        self.norm_based_clipping = False
        self.self_repair_clipped_proportion_threshold = 1.0
        self.self_repair_target = 0.0
        self.self_repair_scale = 0.0
        self.num_clipped = 0
        self.count = 0
        self.num_self_repaired = 0
        self.num_backpropped = 0

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE
                | Prop.BACKPROP_NEEDS_INPUT)

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("dim")
        self.clipping_threshold = f32(cfl.get_float("clipping-threshold", 15.0))
        self.norm_based_clipping = cfl.get_bool("norm-based-clipping", False)
        self.self_repair_clipped_proportion_threshold = f32(
            cfl.get_float("self-repair-clipped-proportion-threshold", 0.01))
        self.self_repair_target = f32(cfl.get_float("self-repair-target", 0.0))
        self.self_repair_scale = f32(cfl.get_float("self-repair-scale", 1.0))
        _expect_or_error(dim is not None and dim > 0 and self.clipping_threshold >= 0
                         and self.self_repair_clipped_proportion_threshold >= 0.0
                         and self.self_repair_target >= 0.0 and self.self_repair_scale >= 0.0,
                         self, cfl, "dim > 0 and non-negative thresholds required")
        self.dim = dim
        self.num_clipped = self.count = self.num_self_repaired = self.num_backpropped = 0

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        r.expect_token("<ClippingThreshold>")
        self.clipping_threshold = r.read_float()
        r.expect_token("<NormBasedClipping>")
        self.norm_based_clipping = r.read_bool()
        token = r.read_token()
        if token == "<SelfRepairClippedProportionThreshold>":
            self.self_repair_clipped_proportion_threshold = r.read_float()
            r.expect_token("<SelfRepairTarget>")
            self.self_repair_target = r.read_float()
            r.expect_token("<SelfRepairScale>")
            self.self_repair_scale = r.read_float()
            r.expect_token("<NumElementsClipped>")
        else:
            self.self_repair_clipped_proportion_threshold = 1.0
            self.self_repair_target = 0.0
            self.self_repair_scale = 0.0
            if token != "<NumElementsClipped>":
                raise r.error(f"ClipGradientComponent: expected <NumElementsClipped>, "
                              f"got {token[:40]}")
        self.num_clipped = r.read_int32()
        r.expect_token("<NumElementsProcessed>")
        self.count = r.read_int32()
        token = r.read_token()
        if token == "<NumSelfRepaired>":
            self.num_self_repaired = r.read_int32()
            r.expect_token("<NumBackpropped>")
            self.num_backpropped = r.read_int32()
            r.expect_token("</ClipGradientComponent>")
        else:
            self.num_self_repaired = 0
            self.num_backpropped = 0
            if token != "</ClipGradientComponent>":
                raise r.error(f"ClipGradientComponent: expected </ClipGradientComponent>, "
                              f"got {token[:40]}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<ClipGradientComponent>")
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<ClippingThreshold>")
        w.write_float(self.clipping_threshold)
        w.write_token("<NormBasedClipping>")
        w.write_bool(self.norm_based_clipping)
        w.write_token("<SelfRepairClippedProportionThreshold>")
        w.write_float(self.self_repair_clipped_proportion_threshold)
        w.write_token("<SelfRepairTarget>")
        w.write_float(self.self_repair_target)
        w.write_token("<SelfRepairScale>")
        w.write_float(self.self_repair_scale)
        w.write_token("<NumElementsClipped>")
        w.write_int32(self.num_clipped)
        w.write_token("<NumElementsProcessed>")
        w.write_int32(self.count)
        w.write_token("<NumSelfRepaired>")
        w.write_int32(self.num_self_repaired)
        w.write_token("<NumBackpropped>")
        w.write_int32(self.num_backpropped)
        w.write_token("</ClipGradientComponent>")

    def info(self) -> str:
        # float(num_clipped) / int count is a float division.
        prop = float(F32(self.num_clipped) / F32(self.count)) if self.count > 0 else 0.0
        s = (f"{self.type_name}, dim={self.dim}, norm-based-clipping="
             f"{'true' if self.norm_based_clipping else 'false'}, clipping-threshold="
             f"{fmt_g(self.clipping_threshold)}, clipped-proportion={fmt_g(prop)}")
        if self.self_repair_scale != 0.0:
            s += (f", self-repair-clipped-proportion-threshold="
                  f"{fmt_g(self.self_repair_clipped_proportion_threshold)}"
                  f", self-repair-target={fmt_g(self.self_repair_target)}"
                  f", self-repair-scale={fmt_g(self.self_repair_scale)}")
        return s

    def zero_stats(self) -> None:
        self.count = 0
        self.num_clipped = 0
        self.num_self_repaired = 0
        self.num_backpropped = 0

    # The int32 counters are multiplied in float and truncated back to int.
    def scale(self, alpha: float) -> None:
        a = F32(alpha)
        self.count = int(F32(self.count) * a)
        self.num_clipped = int(F32(self.num_clipped) * a)

    def add(self, alpha: float, other: Component) -> None:
        if not isinstance(other, ClipGradientComponent):
            raise TypeError(f"ClipGradientComponent.add: other is {other.type_name}")
        a = F32(alpha)
        self.count = int(F32(self.count) + a * F32(other.count))
        self.num_clipped = int(F32(self.num_clipped) + a * F32(other.num_clipped))

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        if out_value is not in_value:
            out_value[...] = in_value
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        d = out_deriv.astype(F32, copy=True)
        upd = to_update if isinstance(to_update, ClipGradientComponent) else None
        thr = self.clipping_threshold
        if thr > 0:
            if self.norm_based_clipping:
                # Squared row norms over threshold^2, floored at 1; rows above
                # the threshold are scaled down to norm = threshold.
                sq = (d * d).sum(axis=1, dtype=F32) * F32(thr ** -2.0)
                num_not_scaled = int((sq < 1.0).sum())
                sq = np.maximum(sq, F32(1.0))
                if num_not_scaled != sq.shape[0]:
                    d *= (F32(1.0) / np.sqrt(sq))[:, None]
                    if upd is not None:
                        upd.num_clipped += sq.shape[0] - num_not_scaled
                if upd is not None:
                    upd.count += sq.shape[0]
            else:
                d = np.clip(d, F32(-thr), F32(thr))
            if upd is not None:
                upd.num_backpropped += 1
                self._repair_gradients(in_value, d, upd)
        elif thr == 0.0:
            d[...] = 0.0
        in_deriv[...] = d

    def _repair_gradients(self, in_value: np.ndarray, in_deriv: np.ndarray,
                          to_update: "ClipGradientComponent") -> None:
        """Push inputs towards self-repair-target when too many derivatives
        were clipped, keeping the average row norm of in_deriv unchanged."""
        if (self.self_repair_clipped_proportion_threshold >= 1.0
                or self.self_repair_scale == 0.0 or self.count == 0
                or float(rng().random()) > 0.5):
            return
        clipped = float(F32(self.num_clipped) / F32(self.count)) if self.count > 0 else 0.0
        if clipped <= self.self_repair_clipped_proportion_threshold:
            return
        to_update.num_self_repaired += 1
        sign = np.where(in_value > 0, F32(1.0), F32(-1.0))
        repair = np.maximum(np.abs(in_value) - F32(self.self_repair_target), F32(0.0)) * sign
        norms = np.sqrt((in_deriv.astype(F64) ** 2).sum(axis=1))
        norm_sum = float(norms.sum())
        magnitude = self.self_repair_scale * clipped * (norm_sum / norms.shape[0])
        rnorm_sum = float(np.sqrt((repair.astype(F64) ** 2).sum(axis=1)).sum())
        scale = magnitude / (rnorm_sum / norms.shape[0]) if rnorm_sum != 0.0 else 0.0
        in_deriv += F32(-scale / 0.5) * repair
        new_sum = float(np.sqrt((in_deriv.astype(F64) ** 2).sum(axis=1)).sum())
        if new_sum != 0.0:
            in_deriv *= F32(norm_sum / new_sum)


@register
class DropoutComponent(Component):
    """Zeroes a random proportion of the input (per element or per frame);
    in test mode scales by (1 - proportion) instead."""

    type_name = "DropoutComponent"

    def __init__(self) -> None:
        self.dim = 0
        self.dropout_proportion = 0.0
        self.dropout_per_frame = False
        self.test_mode = False

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        return (Prop.BACKPROP_IN_PLACE | Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT
                | Prop.BACKPROP_NEEDS_OUTPUT | Prop.RANDOM)

    def set_test_mode(self, test_mode: bool) -> None:
        self.test_mode = bool(test_mode)

    def set_dropout_proportion(self, proportion: float) -> None:
        self.dropout_proportion = f32(proportion)

    def reset_generator(self) -> None:
        """Kaldi reseeds its GPU generator here; NumPy's generator is process-wide."""

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.test_mode = False
        dim = cfl.get_int("dim")
        prop = cfl.get_float("dropout-proportion")
        self.dropout_per_frame = cfl.get_bool("dropout-per-frame", False)
        self.test_mode = cfl.get_bool("test-mode", False)
        _expect_or_error(dim is not None and prop is not None and dim > 0
                         and 0.0 <= prop <= 1.0, self, cfl,
                         "dim > 0 and dropout-proportion in [0, 1] required")
        self.dim = dim
        self.dropout_proportion = f32(prop)

    def info(self) -> str:
        return (f"{self.type_name}, dim={self.dim}, dropout-proportion="
                f"{fmt_g(self.dropout_proportion)}, dropout-per-frame="
                f"{'true' if self.dropout_per_frame else 'false'}")

    def read(self, r: KaldiReader) -> None:
        token = r.read_token()
        if token == "<DropoutComponent>":
            token = r.read_token()
        if token != "<Dim>":
            raise r.error(f"DropoutComponent: expected <Dim>, got {token[:40]}")
        self.dim = r.read_int32()
        r.expect_token("<DropoutProportion>")
        self.dropout_proportion = r.read_float()
        token = r.read_token()
        if token == "<DropoutPerFrame>":
            self.dropout_per_frame = r.read_bool()
            token = r.read_token()
        else:
            self.dropout_per_frame = False
        if token == "<TestMode>":
            self.test_mode = r.read_bool()
            r.expect_token("</DropoutComponent>")
        else:
            self.test_mode = False
            if token != "</DropoutComponent>":
                raise r.error(f"DropoutComponent: expected </DropoutComponent>, got {token[:40]}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<DropoutComponent>")
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<DropoutProportion>")
        w.write_float(self.dropout_proportion)
        w.write_token("<DropoutPerFrame>")
        w.write_bool(self.dropout_per_frame)
        w.write_token("<TestMode>")
        w.write_bool(self.test_mode)
        w.write_token("</DropoutComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        p = self.dropout_proportion
        if self.test_mode:
            out_value[...] = in_value * F32(1.0 - p)
            return None
        # Not Kaldi's CuRand stream: the masks are random all the same.
        if not self.dropout_per_frame:
            mask = (rng().random(in_value.shape, dtype=F32) - F32(p) > 0).astype(F32)
        else:
            mask = (rng().random((in_value.shape[0], 1), dtype=F32) - F32(p) > 0).astype(F32)
        out_value[...] = mask * in_value
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        # SetMatMatDivMat: out_deriv * out_value / in_value, or out_deriv
        # itself where the input is zero.
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = out_deriv * out_value / in_value
        in_deriv[...] = np.where(in_value == 0, out_deriv, ratio)


@register
class SumGroupComponent(Component):
    """Output i is the sum of a contiguous group of inputs (sizes listed)."""

    type_name = "SumGroupComponent"

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self._input_dim = 0
        self._output_dim = 0
        self._starts = np.zeros(0, dtype=np.int64)
        self.reverse_indexes = np.zeros(0, dtype=np.int64)

    def input_dim(self) -> int:
        return self._input_dim

    def output_dim(self) -> int:
        return self._output_dim

    def properties(self) -> int:
        return Prop.SIMPLE

    def init_sizes(self, sizes: list[int]) -> None:
        if not sizes or any(s <= 0 for s in sizes):
            raise ValueError("SumGroupComponent: sizes must be non-empty and positive")
        self.sizes = list(sizes)
        self._input_dim = sum(sizes)
        self._output_dim = len(sizes)
        self._starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.reverse_indexes = np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)

    def init_from_config(self, cfl: ConfigLine) -> None:
        sizes = _split_ints(cfl, "sizes", ":,")
        if sizes is not None:
            _expect_or_error(bool(sizes) and all(s > 0 for s in sizes), self, cfl,
                             "sizes must be positive")
            self.init_sizes(sizes)
            return
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        _expect_or_error(input_dim is not None and output_dim is not None, self, cfl,
                         "sizes, or input-dim and output-dim, required")
        _expect_or_error(output_dim > 0 and input_dim > 0 and input_dim % output_dim == 0,
                         self, cfl, "input-dim must be a multiple of output-dim")
        self.init_sizes([input_dim // output_dim] * output_dim)

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Sizes>")
        sizes = r.read_int_vector()
        token = r.read_token()
        if token not in ("<SumGroupComponent>", "</SumGroupComponent>"):
            raise r.error(f"SumGroupComponent: expected </SumGroupComponent>, got {token[:40]}")
        try:
            self.init_sizes(sizes)
        except ValueError as e:
            raise r.error(str(e)) from None

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<SumGroupComponent>")
        w.write_token("<Sizes>")
        w.write_int_vector(self.sizes)
        w.write_token("</SumGroupComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out = np.empty((in_value.shape[0], self._output_dim), dtype=F32)
        start = 0
        for i, size in enumerate(self.sizes):
            # Left-to-right float accumulation over the group.
            out[:, i] = _seq_sum_f32(in_value[:, start:start + size], axis=1)
            start += size
        out_value[...] = out
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None:
            in_deriv[...] = out_deriv[:, self.reverse_indexes]


@register
class SumBlockComponent(Component):
    """Adds scale times the sum of the input-dim/output-dim input blocks to
    the output (the output is added to, not overwritten)."""

    type_name = "SumBlockComponent"

    def __init__(self) -> None:
        self._input_dim = 0
        self._output_dim = 0
        self.scale_ = 1.0

    def input_dim(self) -> int:
        return self._input_dim

    def output_dim(self) -> int:
        return self._output_dim

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_ADDS | Prop.BACKPROP_ADDS

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.scale_ = 1.0
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        if input_dim is None or output_dim is None:
            raise self.config_error(cfl, "input-dim and output-dim must both be provided.")
        if input_dim <= 0 or output_dim <= 0 or input_dim % output_dim != 0:
            raise self.config_error(cfl, f"Invalid values input-dim={input_dim} "
                                         f"output-dim={output_dim}")
        self._input_dim, self._output_dim = input_dim, output_dim
        self.scale_ = f32(cfl.get_float("scale", 1.0))

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<InputDim>")
        self._input_dim = r.read_int32()
        r.expect_token("<OutputDim>")
        self._output_dim = r.read_int32()
        r.expect_token("<Scale>")
        self.scale_ = r.read_float()
        r.expect_token("</SumBlockComponent>")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<SumBlockComponent>")
        w.write_token("<InputDim>")
        w.write_int32(self._input_dim)
        w.write_token("<OutputDim>")
        w.write_int32(self._output_dim)
        w.write_token("<Scale>")
        w.write_float(self.scale_)
        w.write_token("</SumBlockComponent>")

    def info(self) -> str:
        return (f"{self.type_name}, input-dim={self._input_dim}, output-dim={self._output_dim}"
                f", scale={fmt_g(self.scale_)}")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        d = self._output_dim
        acc = out_value.astype(F32, copy=True)
        for b in range(self._input_dim // d):
            acc = _axpy_f32(self.scale_, in_value[:, b * d:(b + 1) * d], acc)
        out_value[...] = acc
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        d = self._output_dim
        for b in range(self._input_dim // d):
            blk = in_deriv[:, b * d:(b + 1) * d]
            blk[...] = _axpy_f32(self.scale_, out_deriv, blk)


@register
class PermuteComponent(Component):
    """Output column i is input column column_map[i]."""

    type_name = "PermuteComponent"

    def __init__(self) -> None:
        self.column_map = np.zeros(0, dtype=np.int64)
        self.reverse_column_map = np.zeros(0, dtype=np.int64)

    def input_dim(self) -> int:
        return int(self.column_map.shape[0])

    def output_dim(self) -> int:
        return int(self.column_map.shape[0])

    def properties(self) -> int:
        return Prop.SIMPLE

    def init_column_map(self, column_map: list[int]) -> None:
        dim = len(column_map)
        if dim == 0:
            raise ValueError("PermuteComponent: empty column map")
        reverse = [-1] * dim
        for i, c in enumerate(column_map):
            if not 0 <= c < dim or reverse[c] != -1:
                raise ValueError("Column map does not represent a permutation.")
            reverse[c] = i
        self.column_map = np.asarray(column_map, dtype=np.int64)
        self.reverse_column_map = np.asarray(reverse, dtype=np.int64)

    def init_from_config(self, cfl: ConfigLine) -> None:
        cmap = _split_ints(cfl, "column-map", ",")
        _expect_or_error(cmap is not None, self, cfl, "column-map required")
        try:
            self.init_column_map(cmap)
        except ValueError as e:
            raise self.config_error(cfl, str(e)) from None

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<ColumnMap>")
        if r.binary and r.data[r.pos:r.pos + 1] == b"F":
            # Very old models stored the map as a float vector.
            fmap = r.read_vector()
            cmap = [int(np.float32(v) + np.float32(0.5)) for v in fmap]
            if cmap:
                cmap[-1] = len(cmap) - 1
        else:
            cmap = r.read_int_vector()
        r.expect_token("</PermuteComponent>")
        try:
            self.init_column_map(cmap)
        except ValueError as e:
            raise r.error(str(e)) from None

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<PermuteComponent>")
        w.write_token("<ColumnMap>")
        w.write_int_vector(self.column_map.tolist())
        w.write_token("</PermuteComponent>")

    def info(self) -> str:
        cmap = self.column_map.tolist()
        s = f"{self.type_name}, dim={len(cmap)} , column-map=[ "
        s += "".join(f"{c} " for c in cmap[:5])
        if len(cmap) > 5:
            s += "... "
        return s + "]"

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = in_value[:, self.column_map]
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None:
            in_deriv[...] = out_deriv[:, self.reverse_column_map]


def _read_vector_file(cfl: ConfigLine, comp: Component, key: str) -> np.ndarray:
    """A Kaldi vector from the rxfilename given as option ``key``."""
    filename = cfl.get_str(key)
    try:
        r = open_kaldi_object(filename)
        return r.read_vector()
    except FormatError as e:
        raise comp.config_error(cfl, f"could not read vector from {key}={filename}: {e}") from None


@register
class FixedScaleComponent(Component):
    """Multiplies each column by a fixed scale."""

    type_name = "FixedScaleComponent"

    def __init__(self) -> None:
        self.scales = np.zeros(0, dtype=F32)

    def input_dim(self) -> int:
        return int(self.scales.shape[0])

    def output_dim(self) -> int:
        return int(self.scales.shape[0])

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE

    def init_from_config(self, cfl: ConfigLine) -> None:
        if cfl.has("scales"):
            vec = _read_vector_file(cfl, self, "scales")
            _expect_or_error(not cfl.unused_values(), self, cfl, "only scales= allowed with scales")
        else:
            scale = cfl.get_float("scale")
            dim = cfl.get_int("dim")
            _expect_or_error(dim is not None and not cfl.unused_values(), self, cfl,
                             "scales=<file> or dim= required")
            _expect_or_error(dim > 0, self, cfl, "dim must be > 0")
            vec = (np.full(dim, scale, dtype=F32) if scale is not None else
                   rng().standard_normal(dim).astype(F32))
        _expect_or_error(vec.shape[0] != 0, self, cfl, "empty scales")
        self.scales = np.ascontiguousarray(vec, dtype=F32)

    def info(self) -> str:
        return Component.info(self) + print_parameter_stats("scales", self.scales, True)

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<FixedScaleComponent>")
        w.write_token("<Scales>")
        w.write_vector(self.scales)
        w.write_token("</FixedScaleComponent>")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Scales>")
        self.scales = r.read_vector()
        r.expect_token("</FixedScaleComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = in_value * self.scales
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None:
            in_deriv[...] = out_deriv * self.scales


@register
class FixedBiasComponent(Component):
    """Adds a fixed bias vector to each row."""

    type_name = "FixedBiasComponent"

    def __init__(self) -> None:
        self.bias = np.zeros(0, dtype=F32)

    def input_dim(self) -> int:
        return int(self.bias.shape[0])

    def output_dim(self) -> int:
        return int(self.bias.shape[0])

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE

    def init_from_config(self, cfl: ConfigLine) -> None:
        if cfl.has("bias"):
            vec = _read_vector_file(cfl, self, "bias")
            _expect_or_error(not cfl.unused_values(), self, cfl, "only bias= allowed with bias")
        else:
            dim = cfl.get_int("dim")
            _expect_or_error(dim is not None and not cfl.unused_values(), self, cfl,
                             "bias=<file> or dim= required")
            _expect_or_error(dim > 0, self, cfl, "dim must be > 0")
            vec = rng().standard_normal(dim).astype(F32)
        _expect_or_error(vec.shape[0] != 0, self, cfl, "empty bias")
        self.bias = np.ascontiguousarray(vec, dtype=F32)

    def info(self) -> str:
        return Component.info(self) + print_parameter_stats("bias", self.bias, True)

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<FixedBiasComponent>")
        w.write_token("<Bias>")
        w.write_vector(self.bias)
        w.write_token("</FixedBiasComponent>")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Bias>")
        self.bias = r.read_vector()
        r.expect_token("</FixedBiasComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = in_value + self.bias
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None and in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
