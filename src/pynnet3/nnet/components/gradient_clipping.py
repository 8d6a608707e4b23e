"""Components that pass values through and limit the derivative in backprop,
to keep (mostly recurrent) networks stable: ClipGradientComponent (Kaldi's
nnet-simple-component.{h,cc}) and BackpropTruncationComponent (Kaldi's
nnet-general-component.{h,cc}; the identity times ``scale`` forward, it clips
the norm of derivative rows and zeroes them at periodic time boundaries).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine
from ..index import index_columns
from .base import Component, Prop, expect_or_error, fmt_g, register, rng
from .numeric import F32, F64


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
        expect_or_error(dim is not None and dim > 0 and self.clipping_threshold >= 0
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


def _zeroing(output_indexes: list, zi: int, ri: int) -> tuple[np.ndarray, float]:
    """(zeroing, zeroing_sum) of BackpropTruncationComponentPrecomputedIndexes.

    Row t crosses a boundary (a multiple of zeroing-interval ``zi``, shifted
    by n so that sequences differ) if [t - recurrence-interval, t] contains
    one.  (Floor division on int64 columns: Kaldi's DivideRoundingDown.)
    """
    cols = index_columns(output_indexes)
    shifted = cols[:, 1] - cols[:, 0]
    crosses = shifted // zi != (shifted - ri) // zi
    zeroing = np.zeros(len(cols), dtype=F32)
    zeroing[crosses] = -1.0
    return zeroing, f32(-float(-np.count_nonzero(crosses)))   # (-0.0 when none: minus a zero sum)


@dataclass
class BackpropTruncationComponentPrecomputedIndexes:
    """zeroing[i] = -1 where row i's derivative may be zeroed (it crosses a
    zeroing-interval boundary), else 0; zeroing_sum = number of such rows."""

    zeroing: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=F32))
    zeroing_sum: float = 0.0
    type_name = "BackpropTruncationComponentPrecomputedIndexes"

    def write(self, w: KaldiWriter) -> None:
        w.write_token(f"<{self.type_name}>")
        w.write_token("<Zeroing>")
        w.write_vector(self.zeroing)
        w.write_token("<ZeroingSum>")
        w.write_float(self.zeroing_sum)
        w.write_token(f"</{self.type_name}>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens(f"<{self.type_name}>", "<Zeroing>")
        self.zeroing = r.read_vector()
        r.expect_token("<ZeroingSum>")
        self.zeroing_sum = r.read_float()
        r.expect_token(f"</{self.type_name}>")


@register
class BackpropTruncationComponent(Component):
    """Identity (times ``scale``) forward; in backprop it clips derivative
    rows and zeroes them at periodic boundaries (for recurrent networks)."""

    type_name = "BackpropTruncationComponent"

    def __init__(self) -> None:
        self.dim = 0
        self.scale_ = 1.0
        self.clipping_threshold = -1.0
        self.zeroing_threshold = -1.0
        self.zeroing_interval = 0
        self.recurrence_interval = 0
        # Statistics (doubles in Kaldi).
        self.num_clipped = 0.0
        self.num_zeroed = 0.0
        self.count = 0.0
        self.count_zeroing_boundaries = 0.0

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        return int(Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE)

    def init(self, dim: int, scale: float, clipping_threshold: float, zeroing_threshold: float,
             zeroing_interval: int, recurrence_interval: int) -> None:
        if not (clipping_threshold >= 0 and zeroing_threshold >= 0 and scale > 0.0
                and zeroing_interval > 0 and recurrence_interval > 0 and dim > 0):
            raise ValueError("BackpropTruncationComponent: invalid parameters")
        self.dim = dim
        self.scale_ = f32(scale)
        self.clipping_threshold = f32(clipping_threshold)
        self.zeroing_threshold = f32(zeroing_threshold)
        self.zeroing_interval = zeroing_interval
        self.recurrence_interval = recurrence_interval
        self.zero_stats()

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("dim")
        scale = cfl.get_float("scale", 1.0)
        clipping_threshold = cfl.get_float("clipping-threshold", 30.0)
        zeroing_threshold = cfl.get_float("zeroing-threshold", 15.0)
        zeroing_interval = cfl.get_int("zeroing-interval", 20)
        recurrence_interval = cfl.get_int("recurrence-interval", 1)
        # "not >=" so that a NaN threshold is refused too (Kaldi asserts).
        if (dim is None or dim <= 0 or not clipping_threshold >= 0
                or not zeroing_threshold >= 0 or zeroing_interval < 1
                or recurrence_interval < 1):
            raise self.config_error(cfl, "invalid initializer (need dim > 0, thresholds >= 0, "
                                         "zeroing-interval and recurrence-interval >= 1)")
        if not scale > 0.0:
            raise self.config_error(cfl, "scale must be > 0")
        self.init(dim, scale, clipping_threshold, zeroing_threshold, zeroing_interval,
                  recurrence_interval)

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        tok = r.read_token()
        if tok == "<Scale>":
            self.scale_ = r.read_float()
            tok = r.read_token()
        else:
            self.scale_ = 1.0
        if tok != "<ClippingThreshold>":
            raise r.error(f"BackpropTruncationComponent: expected <ClippingThreshold>, got {tok[:40]}")
        self.clipping_threshold = r.read_float()
        r.expect_token("<ZeroingThreshold>")
        self.zeroing_threshold = r.read_float()
        r.expect_token("<ZeroingInterval>")
        self.zeroing_interval = r.read_int32()
        r.expect_token("<RecurrenceInterval>")
        self.recurrence_interval = r.read_int32()
        r.expect_token("<NumElementsClipped>")
        self.num_clipped = r.read_double()
        r.expect_token("<NumElementsZeroed>")
        self.num_zeroed = r.read_double()
        r.expect_token("<NumElementsProcessed>")
        self.count = r.read_double()
        r.expect_token("<NumZeroingBoundaries>")
        self.count_zeroing_boundaries = r.read_double()
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<Scale>")
        w.write_float(self.scale_)
        w.write_token("<ClippingThreshold>")
        w.write_float(self.clipping_threshold)
        w.write_token("<ZeroingThreshold>")
        w.write_float(self.zeroing_threshold)
        w.write_token("<ZeroingInterval>")
        w.write_int32(self.zeroing_interval)
        w.write_token("<RecurrenceInterval>")
        w.write_int32(self.recurrence_interval)
        w.write_token("<NumElementsClipped>")
        w.write_double(self.num_clipped)
        w.write_token("<NumElementsZeroed>")
        w.write_double(self.num_zeroed)
        w.write_token("<NumElementsProcessed>")
        w.write_double(self.count)
        w.write_token("<NumZeroingBoundaries>")
        w.write_double(self.count_zeroing_boundaries)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        clipped = self.num_clipped / self.count if self.count > 0.0 else 0
        zeroed = (self.num_zeroed / self.count_zeroing_boundaries
                  if self.count_zeroing_boundaries > 0.0 else 0)
        return (f"{self.type_name}, dim={self.dim}, scale={fmt_g(self.scale_)}"
                f", count={fmt_g(self.count, 3)}"
                f", recurrence-interval={self.recurrence_interval}"
                f", clipping-threshold={fmt_g(self.clipping_threshold)}"
                f", clipped-proportion={fmt_g(clipped)}"
                f", zeroing-threshold={fmt_g(self.zeroing_threshold)}"
                f", zeroing-interval={self.zeroing_interval}"
                f", zeroed-proportion={fmt_g(zeroed)}"
                f", count-zeroing-boundaries={int(self.count_zeroing_boundaries)}")

    # -- stats -------------------------------------------------------------
    def zero_stats(self) -> None:
        self.count = 0.0
        self.count_zeroing_boundaries = 0.0
        self.num_clipped = 0.0
        self.num_zeroed = 0.0

    def scale(self, alpha: float) -> None:
        a = f32(alpha)
        self.count *= a
        self.count_zeroing_boundaries *= a
        self.num_clipped *= a
        self.num_zeroed *= a

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, BackpropTruncationComponent)
        a = f32(alpha)
        self.count += a * other.count
        self.count_zeroing_boundaries += a * other.count_zeroing_boundaries
        self.num_clipped += a * other.num_clipped
        self.num_zeroed += a * other.num_zeroed

    # -- compiler / math ---------------------------------------------------
    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> BackpropTruncationComponentPrecomputedIndexes:
        if len(input_indexes) != len(output_indexes):
            raise RuntimeError("BackpropTruncationComponent: input/output index count differs")
        zi, ri = self.zeroing_interval, self.recurrence_interval
        derived = getattr(output_indexes, "derived", None)
        if derived is None:
            zeroing, total = _zeroing(output_indexes, zi, ri)
        else:
            # (An LSTM's layers see the same few lists at every time step.)
            zeroing, total = derived(f"backprop-truncation-zeroing {zi} {ri}",
                                     lambda indexes: _zeroing(indexes, zi, ri))
        return BackpropTruncationComponentPrecomputedIndexes(zeroing, total)

    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray):
        if self.scale_ != 1.0:
            out_value[...] = np.asarray(in_value, dtype=F32) * F32(self.scale_)
        elif out_value is not in_value:
            out_value[...] = in_value
        return None

    def backprop(self, debug_info: str,
                 indexes: BackpropTruncationComponentPrecomputedIndexes, in_value, out_value,
                 out_deriv: np.ndarray, memo, to_update,
                 in_deriv: np.ndarray | None) -> None:
        """Sets in_deriv = scale * out_deriv, then scales each row down to a
        norm of at most clipping-threshold, and zeroes rows at zeroing
        boundaries whose norm exceeds zeroing-threshold; statistics go to
        ``to_update``."""
        if in_deriv is None:
            return
        if indexes.zeroing.shape[0] != out_deriv.shape[0]:
            raise ValueError("BackpropTruncationComponent.backprop: indexes do not match")
        if in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
        if self.scale_ != 1.0:
            in_deriv *= F32(self.scale_)
        update = to_update if isinstance(to_update, BackpropTruncationComponent) else None
        row_sumsq = np.einsum("ij,ij->i", in_deriv.astype(np.float64),
                              in_deriv.astype(np.float64))
        clip = self.clipping_threshold if self.clipping_threshold > 0.0 else 1.0e+10
        clipping_scales = row_sumsq * float(F32(clip ** -2))
        num_not_scaled = int(np.count_nonzero(clipping_scales < 1.0))
        clipping_scales = np.maximum(clipping_scales, 1.0) ** -0.5
        if update is not None:
            update.num_clipped += clipping_scales.shape[0] - num_not_scaled
            update.count += clipping_scales.shape[0]
        zero = self.zeroing_threshold if self.zeroing_threshold > 0.0 else 1.0e+10
        # -1 where a row at a zeroing boundary has a norm above the threshold.
        zeroing_scales = (row_sumsq - float(F32(zero)) ** 2 > 0).astype(np.float64)
        zeroing_scales *= np.asarray(indexes.zeroing, dtype=np.float64)
        if update is not None:
            update.num_zeroed -= float(zeroing_scales.sum())
            update.count_zeroing_boundaries += float(indexes.zeroing_sum)
        combined = (clipping_scales * (zeroing_scales + 1.0)).astype(F32)
        in_deriv *= combined[:, None]
