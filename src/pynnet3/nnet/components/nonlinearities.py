"""Nonlinearities (Kaldi's nnet-simple-component.{h,cc}): SigmoidComponent,
TanhComponent, RectifiedLinearComponent, SoftmaxComponent, LogSoftmaxComponent
with their common base NonlinearComponent, and PnormComponent.

Simple components map each input row to one output row and don't care about
indexes.  NonlinearComponent keeps statistics of the values and derivatives
it sees (for diagnostics and self-repair).  Model files store them divided by
their count (float32) while memory holds the sums (float64): reading
multiplies back, writing divides again, so a Kaldi read/write cycle is not
always the identity.  To be byte-identical with Kaldi we repeat its exact
arithmetic: see :func:`_stats_to_file` and :meth:`NonlinearComponent.read`.

Propagate/backprop operate on float32 2-d arrays whose rows are frames;
they write into ``out_value`` / ``in_deriv`` (which may be the same array as
the input for in-place components).
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ...threads import run_row_blocks
from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine
from .base import (Component, InOutDimComponent, Prop, expect_or_error, fmt_g, register, rng,
                   summarize_vector)
from .numeric import F32, F64, seq_sum_f32


# Kaldi's NonlinearComponent::kUnsetThreshold.
UNSET_THRESHOLD = -1000.0


def _stats_to_file(sum64: np.ndarray, count: float) -> np.ndarray:
    """What Kaldi writes for a stored sum: float32(sum) scaled by the float32
    value of 1/count (Vector<float>::Scale, one float multiply)."""
    temp = sum64.astype(F32)
    if count != 0.0:
        temp = temp * F32(1.0 / count)
    return temp


class NonlinearComponent(Component):
    """Kaldi's NonlinearComponent: dims, self-repair options and activation
    statistics (sums of output values, of the function derivative and of the
    squared output derivative)."""

    def __init__(self) -> None:
        self.dim = -1
        self.block_dim = -1
        self.value_sum = np.zeros(0, dtype=F64)
        self.deriv_sum = np.zeros(0, dtype=F64)
        self.count = 0.0
        self.oderiv_sumsq = np.zeros(0, dtype=F64)
        self.oderiv_count = 0.0
        self.num_dims_self_repaired = 0.0
        self.num_dims_processed = 0.0
        self.self_repair_lower_threshold = UNSET_THRESHOLD
        self.self_repair_upper_threshold = UNSET_THRESHOLD
        self.self_repair_scale = 0.0

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("dim")
        self.dim = dim if dim is not None else -1
        self.block_dim = cfl.get_int("block-dim", self.dim)
        self.self_repair_lower_threshold = f32(
            cfl.get_float("self-repair-lower-threshold", UNSET_THRESHOLD))
        self.self_repair_upper_threshold = f32(
            cfl.get_float("self-repair-upper-threshold", UNSET_THRESHOLD))
        self.self_repair_scale = f32(cfl.get_float("self-repair-scale", 0.0))
        if (dim is None or self.dim <= 0 or self.block_dim <= 0
                or self.dim % self.block_dim != 0):
            raise self.config_error(cfl, "Invalid initializer for layer of type "
                                         f"{self.type_name}: dim must be > 0 and a "
                                         "multiple of block-dim")

    # -- statistics ----------------------------------------------------------
    def zero_stats(self) -> None:
        self.value_sum[:] = 0.0
        self.deriv_sum[:] = 0.0
        self.oderiv_sumsq[:] = 0.0
        self.count = 0.0
        self.oderiv_count = 0.0
        self.num_dims_self_repaired = 0.0
        self.num_dims_processed = 0.0

    def scale(self, alpha: float) -> None:
        s = f32(alpha)  # BaseFloat argument, applied in double
        self.value_sum = self.value_sum * s
        self.deriv_sum = self.deriv_sum * s
        self.oderiv_sumsq = self.oderiv_sumsq * s
        self.count *= s
        self.oderiv_count *= s
        self.num_dims_self_repaired *= s
        self.num_dims_processed *= s

    def add(self, alpha: float, other: Component) -> None:
        if not isinstance(other, NonlinearComponent):
            raise TypeError(f"{self.type_name}.add: other is {other.type_name}")
        a = f32(alpha)
        for name in ("value_sum", "deriv_sum", "oderiv_sumsq"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine.shape[0] == 0 and theirs.shape[0] != 0:
                mine = np.zeros(theirs.shape[0], dtype=F64)
            if theirs.shape[0] != 0:
                mine = mine + a * theirs
            setattr(self, name, mine)
        self.count += a * other.count
        self.oderiv_count += a * other.oderiv_count
        self.num_dims_self_repaired += a * other.num_dims_self_repaired
        self.num_dims_processed += a * other.num_dims_processed

    def store_stats_internal(self, out_value: np.ndarray,
                             deriv: np.ndarray | None = None) -> None:
        """Kaldi's StoreStatsInternal: accumulate column sums of the output
        (and of the function derivative) into the float64 statistics."""
        dim = self.dim
        if self.value_sum.shape[0] != dim:
            self.value_sum = np.zeros(dim, dtype=F64)
            self.count = 0.0
        if deriv is not None and self.deriv_sum.shape[0] != dim:
            self.deriv_sum = np.zeros(dim, dtype=F64)
            self.count = 0.0
            self.value_sum[:] = 0.0
        self.count += out_value.shape[0]
        # Kaldi sums the rows into a float32 temporary, then adds in double.
        self.value_sum = self.value_sum + out_value.sum(axis=0, dtype=F32)
        if deriv is not None:
            self.deriv_sum = self.deriv_sum + deriv.sum(axis=0, dtype=F32)

    def store_backprop_stats(self, out_deriv: np.ndarray) -> None:
        """Kaldi's StoreBackpropStats: squared output derivatives, on about 3
        in 4 minibatches (always on the first)."""
        if int(rng().integers(0, 4)) == 0 and self.oderiv_count != 0:
            return
        if self.oderiv_sumsq.shape[0] != self.dim:
            self.oderiv_sumsq = np.zeros(self.dim, dtype=F64)
            self.oderiv_count = 0.0
        self.oderiv_sumsq = self.oderiv_sumsq + (out_deriv * out_deriv).sum(axis=0, dtype=F32)
        self.oderiv_count += out_deriv.shape[0]

    def _stats_sample_skip(self) -> bool:
        """Stats are stored on about every other minibatch (always the first)."""
        return int(rng().integers(0, 2)) == 0 and self.count != 0

    # -- I/O -------------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        if r.peek_token().startswith("<B"):
            r.expect_token("<BlockDim>")
            self.block_dim = r.read_int32()
        else:
            self.block_dim = self.dim
        # The file holds averages; memory holds sums.  Vectors are read in
        # double (text numbers parse straight to double) and multiplied by
        # the double count, exactly as CuVector<double>::Scale does.
        r.expect_token("<ValueAvg>")
        value_avg = r.read_double_vector()
        r.expect_token("<DerivAvg>")
        deriv_avg = r.read_double_vector()
        r.expect_token("<Count>")
        self.count = r.read_double()
        if r.peek_token().startswith("<O"):
            r.expect_token("<OderivRms>")
            rms = r.read_double_vector()
            oderiv_sumsq = rms * rms
            r.expect_token("<OderivCount>")
            self.oderiv_count = r.read_double()
        else:
            self.oderiv_count = 0.0
            oderiv_sumsq = np.zeros(0, dtype=F64)
        self.value_sum = value_avg * self.count
        self.deriv_sum = deriv_avg * self.count
        self.oderiv_sumsq = oderiv_sumsq * self.oderiv_count

        self.num_dims_self_repaired = 0.0
        self.num_dims_processed = 0.0
        self.self_repair_lower_threshold = UNSET_THRESHOLD
        self.self_repair_upper_threshold = UNSET_THRESHOLD
        self.self_repair_scale = 0.0
        token = r.read_token()
        if not token.startswith("<"):
            token = "<" + token
        if token == "<NumDimsSelfRepaired>":
            self.num_dims_self_repaired = r.read_double()
            token = r.read_token()
        if token == "<NumDimsProcessed>":
            self.num_dims_processed = r.read_double()
            token = r.read_token()
        if token == "<SelfRepairLowerThreshold>":
            self.self_repair_lower_threshold = r.read_float()
            token = r.read_token()
        if token == "<SelfRepairUpperThreshold>":
            self.self_repair_upper_threshold = r.read_float()
            token = r.read_token()
        if token == "<SelfRepairScale>":
            self.self_repair_scale = r.read_float()
            token = r.read_token()
        if token != self.closing_tag():
            raise r.error(f"{self.type_name}: expected token {self.closing_tag()}, "
                          f"got {token[:40]}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        if self.block_dim != self.dim:
            w.write_token("<BlockDim>")
            w.write_int32(self.block_dim)
        w.write_token("<ValueAvg>")
        w.write_vector(_stats_to_file(self.value_sum, self.count))
        w.write_token("<DerivAvg>")
        w.write_vector(_stats_to_file(self.deriv_sum, self.count))
        w.write_token("<Count>")
        w.write_double(self.count)
        w.write_token("<OderivRms>")
        temp = _stats_to_file(self.oderiv_sumsq, self.oderiv_count)
        # ApplyFloor(0) is std::max(x, 0): NaN stays NaN.
        temp = np.where(temp < 0, F32(0.0), temp)
        w.write_vector(np.sqrt(temp))
        w.write_token("<OderivCount>")
        w.write_double(self.oderiv_count)
        w.write_token("<NumDimsSelfRepaired>")
        w.write_double(self.num_dims_self_repaired)
        w.write_token("<NumDimsProcessed>")
        w.write_double(self.num_dims_processed)
        if self.self_repair_lower_threshold != UNSET_THRESHOLD:
            w.write_token("<SelfRepairLowerThreshold>")
            w.write_float(self.self_repair_lower_threshold)
        if self.self_repair_upper_threshold != UNSET_THRESHOLD:
            w.write_token("<SelfRepairUpperThreshold>")
            w.write_float(self.self_repair_upper_threshold)
        if self.self_repair_scale != 0.0:
            w.write_token("<SelfRepairScale>")
            w.write_float(self.self_repair_scale)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = [f"{self.type_name}, dim={self.dim}"]
        if self.block_dim != self.dim:
            s.append(f", block-dim={self.block_dim}")
        if self.self_repair_lower_threshold != UNSET_THRESHOLD:
            s.append(f", self-repair-lower-threshold={fmt_g(self.self_repair_lower_threshold)}")
        if self.self_repair_upper_threshold != UNSET_THRESHOLD:
            s.append(f", self-repair-upper-threshold={fmt_g(self.self_repair_upper_threshold)}")
        if self.self_repair_scale != 0.0:
            s.append(f", self-repair-scale={fmt_g(self.self_repair_scale)}")
        if self.count > 0 and self.value_sum.shape[0] == self.dim:
            s.append(f", count={fmt_g(self.count, 3)}")
            prop = (self.num_dims_self_repaired / self.num_dims_processed
                    if self.num_dims_processed > 0 else 0.0)
            s.append(f", self-repaired-proportion={fmt_g(prop)}")
            # value-avg: converted to float first, then a float scale;
            # deriv-avg: scaled in double, converted for printing.
            value_avg = self.value_sum.astype(F32) * F32(1.0 / self.count)
            s.append(", value-avg=" + summarize_vector(value_avg))
            if self.deriv_sum.shape[0] == self.dim:
                deriv_avg = self.deriv_sum * (1.0 / self.count)
                s.append(", deriv-avg=" + summarize_vector(deriv_avg.astype(F32)))
        if self.oderiv_count > 0 and self.oderiv_sumsq.shape[0] == self.dim:
            rms = self.oderiv_sumsq * (1.0 / self.oderiv_count)
            rms = np.sqrt(np.where(rms < 0, 0.0, rms))
            s.append(", oderiv-rms=" + summarize_vector(rms.astype(F32))
                     + f", oderiv-count={fmt_g(self.oderiv_count)}")
        return "".join(s)

    # -- self-repair helpers -------------------------------------------------
    def _repair_probability_skip(self) -> bool:
        # Self-repair runs on about half of the minibatches.
        return float(rng().random()) > 0.5


@register
class SigmoidComponent(NonlinearComponent):
    """Kaldi's SigmoidComponent: ``y = 1 / (1 + exp(-x))`` element-wise, with self-repair."""

    type_name = "SigmoidComponent"

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.BACKPROP_NEEDS_OUTPUT | Prop.PROPAGATE_IN_PLACE
                | Prop.STORES_STATS)

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = sigmoid_f32(in_value)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        y = out_value
        # diff * value is a float product; (1.0 - value) is double.
        in_deriv[...] = ((out_deriv * y).astype(F64) * (1.0 - y.astype(F64))).astype(F32)
        if isinstance(to_update, SigmoidComponent):
            self._repair_gradients(y, in_deriv, to_update)
            to_update.store_backprop_stats(out_deriv)

    def _repair_gradients(self, out_value: np.ndarray, in_deriv: np.ndarray,
                          to_update: NonlinearComponent) -> None:
        # Options and statistics come from self (the model being run); the
        # counters go to to_update (possibly a separate gradient/delta model).
        to_update.num_dims_processed += self.dim
        if (self.self_repair_scale == 0.0 or self.count == 0.0
                or self.deriv_sum.shape[0] != self.dim or self._repair_probability_skip()):
            return
        if self.self_repair_upper_threshold != UNSET_THRESHOLD:
            raise ValueError("Do not set the self-repair-upper-threshold for sigmoid "
                             "components, it does nothing.")
        lower = f32((0.05 if self.self_repair_lower_threshold == UNSET_THRESHOLD
                     else self.self_repair_lower_threshold) * self.count)
        thresholds = (F32(lower) - self.deriv_sum.astype(F32) > 0).astype(F32)
        to_update.num_dims_self_repaired += float(thresholds.sum())
        scale = self.self_repair_scale / 0.5
        in_deriv += F32(-2.0 * scale) * out_value * thresholds
        in_deriv += F32(scale) * thresholds

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray, memo: Any) -> None:
        if self._stats_sample_skip():
            return
        deriv = (F32(1.0) - out_value) * out_value
        self.store_stats_internal(out_value, deriv)


@register
class TanhComponent(NonlinearComponent):
    """Kaldi's TanhComponent: ``y = tanh(x)`` element-wise, with self-repair."""

    type_name = "TanhComponent"

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.BACKPROP_NEEDS_OUTPUT | Prop.PROPAGATE_IN_PLACE
                | Prop.STORES_STATS)

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = tanh_f32(in_value)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        y = out_value
        in_deriv[...] = (out_deriv.astype(F64) * (1.0 - (y * y).astype(F64))).astype(F32)
        if isinstance(to_update, TanhComponent):
            self._repair_gradients(y, in_deriv, to_update)
            to_update.store_backprop_stats(out_deriv)

    def _repair_gradients(self, out_value: np.ndarray, in_deriv: np.ndarray,
                          to_update: NonlinearComponent) -> None:
        # Options and statistics come from self (the model being run); the
        # counters go to to_update (possibly a separate gradient/delta model).
        to_update.num_dims_processed += self.dim
        if (self.self_repair_scale == 0.0 or self.count == 0.0
                or self.deriv_sum.shape[0] != self.dim or self._repair_probability_skip()):
            return
        if self.self_repair_upper_threshold != UNSET_THRESHOLD:
            raise ValueError("Do not set the self-repair-upper-threshold for sigmoid "
                             "components, it does nothing.")
        lower = f32((0.2 if self.self_repair_lower_threshold == UNSET_THRESHOLD
                     else self.self_repair_lower_threshold) * self.count)
        thresholds = (F32(lower) - self.deriv_sum.astype(F32) > 0).astype(F32)
        to_update.num_dims_self_repaired += float(thresholds.sum())
        in_deriv += F32(-self.self_repair_scale / 0.5) * out_value * thresholds

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray, memo: Any) -> None:
        if self._stats_sample_skip():
            return
        deriv = F32(1.0) - out_value * out_value
        self.store_stats_internal(out_value, deriv)


#: A ReLU backprop (a fraction of a nanosecond per element) is split between
#: threads only from this size: below it, handing a block to a thread costs
#: about what it saves (pynnet3.threads.run_row_blocks).
RELU_ROW_BLOCKS_MIN_ELEMENTS = 1 << 20


@register
class RectifiedLinearComponent(NonlinearComponent):
    """Kaldi's RectifiedLinearComponent: ``y = max(0, x)`` element-wise, with self-repair."""

    type_name = "RectifiedLinearComponent"

    _PROPS: ClassVar[int] = int(Prop.SIMPLE | Prop.BACKPROP_NEEDS_OUTPUT | Prop.PROPAGATE_IN_PLACE
                                | Prop.STORES_STATS)   # an int: asked many times per minibatch

    def properties(self) -> int:
        if self.block_dim != self.dim:
            return self._PROPS | int(Prop.INPUT_CONTIGUOUS)
        return self._PROPS

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        # Kaldi's ApplyFloor(0): NaN stays NaN, as here.  (Kaldi's CPU code
        # also keeps -0.0, which comes out as +0.0 here: the same value, and a
        # select written into out_value costs ~20x this on large matrices.)
        np.maximum(in_value, F32(0.0), out=out_value)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        # in_deriv = (y > 0) * out_deriv, one pass per block of rows: the
        # mask is cast to 1.0/0.0 inside the multiply, the same float
        # products as multiplying by a float copy of it.
        run_row_blocks(lambda b, e: np.multiply(out_deriv[b:e], out_value[b:e] > 0,
                                                out=in_deriv[b:e]),
                       in_deriv.shape[0], in_deriv.size, RELU_ROW_BLOCKS_MIN_ELEMENTS)
        if isinstance(to_update, RectifiedLinearComponent):
            self._repair_gradients(in_deriv, to_update)
            to_update.store_backprop_stats(out_deriv)

    def _repair_gradients(self, in_deriv: np.ndarray,
                          to_update: "RectifiedLinearComponent") -> None:
        # Options and statistics come from self; counters go to to_update.
        src = self
        dim, block_dim = src.dim, src.block_dim
        if (src.self_repair_scale == 0.0 or src.count == 0.0
                or src.deriv_sum.shape[0] != dim):
            return
        if self._repair_probability_skip():
            return
        to_update.num_dims_processed += block_dim
        count = f32(src.count)
        lower = f32((0.05 if src.self_repair_lower_threshold == UNSET_THRESHOLD
                     else src.self_repair_lower_threshold) * count)
        upper = f32((0.95 if src.self_repair_upper_threshold == UNSET_THRESHOLD
                     else src.self_repair_upper_threshold) * count)
        if block_dim == dim:
            stats = src.deriv_sum.astype(F32)
        else:
            stats = (src.deriv_sum.reshape(dim // block_dim, block_dim).sum(axis=0)
                     * (block_dim * 1.0 / dim)).astype(F32)
        row0 = (stats + F32(-lower) > 0).astype(F32)
        row1 = (stats + F32(-upper) > 0).astype(F32)
        row0 = row0 + row1 - F32(1.0)
        to_update.num_dims_self_repaired += float((row0 * row0).sum())
        row0 = row0 * F32(-src.self_repair_scale / 0.5)
        rows = in_deriv.reshape(-1, block_dim)
        rows += row0

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray, memo: Any) -> None:
        if self._stats_sample_skip():
            return
        deriv = (out_value > 0).astype(F32)
        self.store_stats_internal(out_value, deriv)


@register
class SoftmaxComponent(NonlinearComponent):
    """Kaldi's SoftmaxComponent: softmax of each row (floored at 1e-20)."""

    type_name = "SoftmaxComponent"

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE
                | Prop.BACKPROP_NEEDS_OUTPUT | Prop.STORES_STATS)

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        x = in_value.astype(F32, copy=True)
        x -= x.max(axis=1, keepdims=True)
        e = np.exp(x)
        total = seq_sum_f32(e, axis=1)
        inv = (1.0 / total.astype(F64)).astype(F32)  # Scale(1.0 / sum) takes a float
        y = e * inv[:, None]
        out_value[...] = np.maximum(y, F32(1.0e-20))
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if isinstance(to_update, SoftmaxComponent):
            to_update.store_backprop_stats(out_deriv)
        if in_deriv is None:
            return
        p = out_value.astype(F32)
        e = out_deriv.astype(F32)
        pe = (p * e).sum(axis=1, dtype=F32)
        in_deriv[...] = p * e - pe[:, None] * p

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray, memo: Any) -> None:
        self.store_stats_internal(out_value, None)


@register
class LogSoftmaxComponent(NonlinearComponent):
    """Kaldi's LogSoftmaxComponent: log-softmax of each row."""

    type_name = "LogSoftmaxComponent"

    _PROPS: ClassVar[int] = int(Prop.SIMPLE | Prop.BACKPROP_NEEDS_OUTPUT | Prop.STORES_STATS)

    def properties(self) -> int:
        return self._PROPS

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        # Each row on its own: blocks of rows go to the thread budget's
        # threads (the same bits as one block; pynnet3.threads.run_row_blocks).
        run_row_blocks(lambda b, e: self._propagate_rows(in_value[b:e], out_value[b:e]),
                       out_value.shape[0], out_value.size)
        return None

    @staticmethod
    def _propagate_rows(in_value: np.ndarray, out_value: np.ndarray) -> None:
        # Kaldi's ApplyLogSoftMax per row: x - max, then minus the log of the
        # sequential float sum of exp; written in out_value, no temporaries
        # but exp's.  (x + (-l) and x - l round identically.)
        x = out_value
        np.subtract(in_value, in_value.max(axis=1, keepdims=True), out=x)
        if x.dtype == F32 and x.ndim == 2:
            from .row_sums import seq_exp_row_sums_f32   # Numba: imported on first use

            total = seq_exp_row_sums_f32(x)
        else:
            total = seq_sum_f32(np.exp(x), axis=1)
        x -= np.log(total)[:, None]

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if isinstance(to_update, LogSoftmaxComponent):
            to_update.store_backprop_stats(out_deriv)
        if in_deriv is None:
            return
        if np.may_share_memory(in_deriv, out_deriv) or np.may_share_memory(in_deriv, out_value):
            e_sum = out_deriv.sum(axis=1, dtype=F32)
            in_deriv[...] = out_deriv - np.exp(out_value) * e_sum[:, None]
            return
        run_row_blocks(lambda b, e: self._backprop_rows(out_value[b:e], out_deriv[b:e],
                                                        in_deriv[b:e]),
                       in_deriv.shape[0], in_deriv.size)

    @staticmethod
    def _backprop_rows(out_value: np.ndarray, out_deriv: np.ndarray,
                       in_deriv: np.ndarray) -> None:
        e_sum = out_deriv.sum(axis=1, dtype=F32)
        # out_deriv - exp(out_value) * e_sum, built in in_deriv (Kaldi's
        # DiffLogSoftmaxPerRow on the CPU does the same steps).
        np.exp(out_value, out=in_deriv)
        in_deriv *= e_sum[:, None]
        np.subtract(out_deriv, in_deriv, out=in_deriv)


def sigmoid_f32(x: np.ndarray) -> np.ndarray:
    """Kaldi's Vector::Sigmoid for float: expf, then the division in double."""
    x = np.asarray(x, dtype=F32)
    e = np.exp(-np.abs(x)).astype(F64)
    with np.errstate(invalid="ignore"):
        y = np.where(x > 0, 1.0 / (1.0 + e), e / (e + 1.0))
    return y.astype(F32)


def tanh_f32(x: np.ndarray) -> np.ndarray:
    """Kaldi's Vector::Tanh for float: expf, a float square, the rest in double."""
    x = np.asarray(x, dtype=F32)
    e = np.exp(-np.abs(x))
    e2 = (e * e).astype(F64)
    with np.errstate(invalid="ignore"):
        y = np.where(x > 0, -1.0 + 2.0 / (1.0 + e2), 1.0 - 2.0 / (1.0 + e2))
    return y.astype(F32)


@register
class PnormComponent(InOutDimComponent):
    """Output j = 2-norm of input group j (groups of input-dim/output-dim)."""

    type_name = "PnormComponent"

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT | Prop.BACKPROP_NEEDS_OUTPUT

    def init_from_config(self, cfl: ConfigLine) -> None:
        output_dim = cfl.get_int("output-dim")
        input_dim = cfl.get_int("input-dim")
        expect_or_error(output_dim is not None and input_dim is not None
                        and output_dim > 0, self, cfl, "input-dim and output-dim > 0 required")
        expect_or_error(input_dim > 0 and input_dim % output_dim == 0, self, cfl,
                        "input-dim must be a positive multiple of output-dim")
        self._input_dim, self._output_dim = input_dim, output_dim

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        rows = in_value.shape[0]
        g = in_value.reshape(rows, self._output_dim, -1)
        sq = g * g
        out_value[...] = np.sqrt(seq_sum_f32(sq, axis=2))
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        rows = in_value.shape[0]
        group = self._input_dim // self._output_dim
        y = np.repeat(out_value, group, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            d = np.where(y == 0, F32(0.0), in_value / y)
        in_deriv[...] = (d * np.repeat(out_deriv, group, axis=1)).reshape(rows, -1)
