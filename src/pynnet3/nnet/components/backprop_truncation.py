"""BackpropTruncationComponent (Kaldi's nnet-general-component.{h,cc}): the
identity (times ``scale``) in the forward pass; in backprop it clips the
norm of derivative rows and zeroes them at periodic time boundaries, to keep
recurrent networks stable.  Split from :mod:`general` to keep files short;
imported (registered) by it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter
from ..config_line import ConfigLine
from .base import Component, Prop, fmt_g, register
from ..index import index_columns
from .general import _F32, _f32


def _zeroing(output_indexes: list, zi: int, ri: int) -> tuple[np.ndarray, float]:
    """(zeroing, zeroing_sum) of BackpropTruncationComponentPrecomputedIndexes.

    Row t crosses a boundary (a multiple of zeroing-interval ``zi``, shifted
    by n so that sequences differ) if [t - recurrence-interval, t] contains
    one.  (Floor division on int64 columns: Kaldi's DivideRoundingDown.)
    """
    cols = index_columns(output_indexes)
    shifted = cols[:, 1] - cols[:, 0]
    crosses = shifted // zi != (shifted - ri) // zi
    zeroing = np.zeros(len(cols), dtype=_F32)
    zeroing[crosses] = -1.0
    return zeroing, _f32(-float(-np.count_nonzero(crosses)))   # (-0.0 when none: minus a zero sum)


@dataclass
class BackpropTruncationComponentPrecomputedIndexes:
    """zeroing[i] = -1 where row i's derivative may be zeroed (it crosses a
    zeroing-interval boundary), else 0; zeroing_sum = number of such rows."""

    zeroing: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=_F32))
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
        self.scale_ = _f32(scale)
        self.clipping_threshold = _f32(clipping_threshold)
        self.zeroing_threshold = _f32(zeroing_threshold)
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
        if (dim is None or dim <= 0 or clipping_threshold < 0 or zeroing_threshold < 0
                or zeroing_interval < 1 or recurrence_interval < 1):
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
        a = _f32(alpha)
        self.count *= a
        self.count_zeroing_boundaries *= a
        self.num_clipped *= a
        self.num_zeroed *= a

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, BackpropTruncationComponent)
        a = _f32(alpha)
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
            out_value[...] = np.asarray(in_value, dtype=_F32) * _F32(self.scale_)
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
            in_deriv *= _F32(self.scale_)
        update = to_update if isinstance(to_update, BackpropTruncationComponent) else None
        row_sumsq = np.einsum("ij,ij->i", in_deriv.astype(np.float64),
                              in_deriv.astype(np.float64))
        clip = self.clipping_threshold if self.clipping_threshold > 0.0 else 1.0e+10
        clipping_scales = row_sumsq * float(_F32(clip ** -2))
        num_not_scaled = int(np.count_nonzero(clipping_scales < 1.0))
        clipping_scales = np.maximum(clipping_scales, 1.0) ** -0.5
        if update is not None:
            update.num_clipped += clipping_scales.shape[0] - num_not_scaled
            update.count += clipping_scales.shape[0]
        zero = self.zeroing_threshold if self.zeroing_threshold > 0.0 else 1.0e+10
        # -1 where a row at a zeroing boundary has a norm above the threshold.
        zeroing_scales = (row_sumsq - float(_F32(zero)) ** 2 > 0).astype(np.float64)
        zeroing_scales *= np.asarray(indexes.zeroing, dtype=np.float64)
        if update is not None:
            update.num_zeroed -= float(zeroing_scales.sum())
            update.count_zeroing_boundaries += float(indexes.zeroing_sum)
        combined = (clipping_scales * (zeroing_scales + 1.0)).astype(_F32)
        in_deriv *= combined[:, None]
