"""Per-element components (Kaldi's nnet-simple-component.{h,cc}): the trainable
PerElementScaleComponent, NaturalGradientPerElementScaleComponent,
PerElementOffsetComponent and ScaleAndOffsetComponent, and the fixed
ElementwiseProductComponent (products of corresponding elements of the
input's blocks).

Natural-gradient updates use :class:`OnlineNaturalGradient`
(:mod:`.natural_gradient`), whose options are read from / written to model
files; its state is never stored.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine
from .base import (Component, InOutDimComponent, Prop, UpdatableComponent, expect_or_error, fmt_g,
                   print_parameter_stats, randn, read_common_then, read_vector_file, register)
from .natural_gradient import OnlineNaturalGradient
from .numeric import F32, axpy_f32, random_vector, row_sum


def _vmin(v: np.ndarray) -> float:
    """VectorBase::Min (+inf for an empty vector)."""
    return float(v.min()) if v.shape[0] else float("inf")


def _vmax(v: np.ndarray) -> float:
    return float(v.max()) if v.shape[0] else float("-inf")


@register
class PerElementScaleComponent(UpdatableComponent):
    """Multiplies each column by a trainable scale (a diagonal linear map)."""

    type_name = "PerElementScaleComponent"

    def __init__(self) -> None:
        super().__init__()
        self.scales = np.zeros(0, dtype=F32)

    def input_dim(self) -> int:
        return int(self.scales.shape[0])

    def output_dim(self) -> int:
        return int(self.scales.shape[0])

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE)

    def num_parameters(self) -> int:
        return self.input_dim()

    def _init_scales(self, cfl: ConfigLine) -> None:
        if cfl.has("vector"):
            self.scales = np.ascontiguousarray(read_vector_file(cfl, self, "vector"))
            dim = cfl.get_int("dim")
            if dim is not None and dim != self.input_dim():
                raise self.config_error(cfl, "input-dim mismatch vs. vector.")
        else:
            dim = cfl.get_int("dim")
            if dim is None:
                raise self.config_error(cfl, "'dim' not provided in the config line.")
            mean = cfl.get_float("param-mean", 1.0)
            stddev = cfl.get_float("param-stddev", 0.0)
            if dim <= 0 or stddev < 0.0:
                raise self.config_error(cfl, "dim must be > 0 and param-stddev >= 0")
            self.scales = random_vector(dim, mean, stddev)

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        self._init_scales(cfl)

    def info(self) -> str:
        return (super().info() + f", scales-min={fmt_g(_vmin(self.scales))}"
                f", scales-max={fmt_g(_vmax(self.scales))}"
                + print_parameter_stats("scales", self.scales, True))

    def read(self, r: KaldiReader) -> None:
        read_common_then(self, r, "<Params>")
        self.scales = r.read_vector()
        if r.peek_token().startswith("<I"):
            # Older files wrote <IsGradient> here.
            r.expect_token("<IsGradient>")
            self.is_gradient = r.read_bool()
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<Params>")
        w.write_vector(self.scales)
        w.write_token(self.closing_tag())

    # -- parameter algebra ---------------------------------------------------
    def scale(self, alpha: float) -> None:
        self.scales = (np.zeros_like(self.scales) if alpha == 0.0
                       else self.scales * F32(alpha))

    def add(self, alpha: float, other: Component) -> None:
        self.scales = axpy_f32(alpha, other.scales, self.scales)

    def perturb_params(self, stddev: float) -> None:
        self.scales = axpy_f32(stddev, randn(self.scales.shape[0]), self.scales)

    def dot_product(self, other: Component) -> float:
        return float(np.dot(self.scales.astype(np.float64), other.scales.astype(np.float64)))

    def vectorize(self) -> np.ndarray:
        return self.scales.copy()

    def unvectorize(self, params: np.ndarray) -> None:
        self.scales = np.ascontiguousarray(params, dtype=F32).copy()

    # -- math --------------------------------------------------------------
    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = in_value * self.scales
        return None

    def _update_simple(self, in_value: np.ndarray, out_deriv: np.ndarray) -> None:
        grad = (out_deriv * in_value).sum(axis=0, dtype=F32)
        self.scales = axpy_f32(self.learning_rate, grad, self.scales)

    def _update(self, debug_info: str, in_value: np.ndarray, out_deriv: np.ndarray) -> None:
        self._update_simple(in_value, out_deriv)

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        # As in Kaldi the update comes first, so when to_update is self the
        # input derivative uses the updated scales.
        if isinstance(to_update, PerElementScaleComponent):
            if to_update.is_gradient:
                to_update._update_simple(in_value, out_deriv)
            else:
                to_update._update(debug_info, in_value, out_deriv)
        if in_deriv is not None:
            in_deriv[...] = out_deriv * self.scales


@register
class NaturalGradientPerElementScaleComponent(PerElementScaleComponent):
    """PerElementScaleComponent whose update is natural-gradient preconditioned."""

    type_name = "NaturalGradientPerElementScaleComponent"

    def __init__(self) -> None:
        super().__init__()
        self.preconditioner = OnlineNaturalGradient()

    def init_from_config(self, cfl: ConfigLine) -> None:
        rank = cfl.get_int("rank", 8)
        update_period = cfl.get_int("update-period", 10)
        num_samples_history = f32(cfl.get_float("num-samples-history", 2000.0))
        alpha = f32(cfl.get_float("alpha", 4.0))
        self.init_learning_rates_from_config(cfl)
        if cfl.has("scales"):
            self.scales = np.ascontiguousarray(read_vector_file(cfl, self, "scales"))
            if cfl.unused_values():
                raise self.config_error(cfl, "Invalid initializer: unexpected "
                                             + " ".join(cfl.unused_values()))
        else:
            mean = cfl.get_float("param-mean", 1.0)
            stddev = cfl.get_float("param-stddev", 0.0)
            dim = cfl.get_int("dim")
            if dim is None or dim <= 0 or stddev < 0.0:
                raise self.config_error(cfl, "Invalid initializer: dim > 0 required")
            self.scales = random_vector(dim, mean, stddev)
        if rank <= 0 or update_period <= 0 or num_samples_history <= 0.0 or alpha < 0.0:
            raise self.config_error(cfl, "rank, update-period and num-samples-history must "
                                         "be > 0 and alpha >= 0")
        self.preconditioner = OnlineNaturalGradient(rank, update_period, num_samples_history, alpha)

    def info(self) -> str:
        p = self.preconditioner
        return (super().info() + f", rank={p.rank}, update-period={p.update_period}"
                f", num-samples-history={fmt_g(p.num_samples_history)}, alpha={fmt_g(p.alpha)}")

    def read(self, r: KaldiReader) -> None:
        read_common_then(self, r, "<Params>")
        self.scales = r.read_vector()
        r.expect_token("<IsGradient>")
        self.is_gradient = r.read_bool()
        p = OnlineNaturalGradient()
        r.expect_token("<Rank>")
        p.rank = r.read_int32()
        r.expect_token("<UpdatePeriod>")
        p.update_period = r.read_int32()
        r.expect_token("<NumSamplesHistory>")
        p.num_samples_history = r.read_float()
        r.expect_token("<Alpha>")
        p.alpha = r.read_float()
        self.preconditioner = p
        token = r.read_token()
        if token == "<MaxChangePerMinibatch>":
            r.read_float()  # obsolete option, ignored as Kaldi does
            token = r.read_token()
        if token != self.closing_tag():
            raise r.error(f"{self.type_name}: expected {self.closing_tag()}, got {token[:40]}")

    def write(self, w: KaldiWriter) -> None:
        p = self.preconditioner
        self.write_updatable_common(w)
        w.write_token("<Params>")
        w.write_vector(self.scales)
        w.write_token("<IsGradient>")
        w.write_bool(self.is_gradient)
        w.write_token("<Rank>")
        w.write_int32(p.rank)
        w.write_token("<UpdatePeriod>")
        w.write_int32(p.update_period)
        w.write_token("<NumSamplesHistory>")
        w.write_float(p.num_samples_history)
        w.write_token("<Alpha>")
        w.write_float(p.alpha)
        w.write_token(self.closing_tag())

    def _update(self, debug_info: str, in_value: np.ndarray, out_deriv: np.ndarray) -> None:
        # Per-frame derivatives of the scales, preconditioned, then summed.
        derivs_per_frame = np.asarray(in_value * out_deriv, dtype=F32, order="C")
        scale = self.preconditioner.precondition_directions(derivs_per_frame)
        delta = derivs_per_frame.sum(axis=0, dtype=F32) * F32(F32(scale) * F32(self.learning_rate))
        self.scales = (self.scales + delta).astype(F32)

    def freeze_natural_gradient(self, freeze: bool) -> None:
        self.preconditioner.freeze(freeze)


@register
class PerElementOffsetComponent(UpdatableComponent):
    """Adds a trainable offset to each column (the offset vector may be
    shorter than dim and repeated over blocks)."""

    type_name = "PerElementOffsetComponent"

    def __init__(self) -> None:
        super().__init__()
        self.offsets = np.zeros(0, dtype=F32)
        self.dim = 0
        self.use_natural_gradient = True
        self.preconditioner = OnlineNaturalGradient(rank=20, update_period=4)

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        p = Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_IN_PLACE | Prop.PROPAGATE_IN_PLACE
        if self.dim != self.offsets.shape[0]:
            p |= Prop.OUTPUT_CONTIGUOUS
        return p

    def num_parameters(self) -> int:
        return int(self.offsets.shape[0])

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        if cfl.has("vector"):
            self.offsets = np.ascontiguousarray(read_vector_file(cfl, self, "vector"))
            self.dim = cfl.get_int("dim", int(self.offsets.shape[0]))
            if self.dim <= 0 or self.offsets.shape[0] % self.dim != 0:
                raise self.config_error(cfl, f"Invalid dimension dim={self.dim}")
        else:
            dim = cfl.get_int("dim")
            if dim is None:
                raise self.config_error(cfl, "'dim' not provided in the config line.")
            if dim <= 0:
                raise self.config_error(cfl, f"Invalid dimension dim={dim}")
            self.dim = dim
            mean = cfl.get_float("param-mean", 0.0)
            stddev = cfl.get_float("param-stddev", 0.0)
            block_dim = cfl.get_int("block-dim", dim)
            if block_dim <= 0 or dim % block_dim != 0:
                raise self.config_error(cfl, f"Invalid value block-dim={block_dim}")
            self.offsets = random_vector(block_dim, mean, stddev)
        self.use_natural_gradient = cfl.get_bool("use-natural-gradient", True)
        self.preconditioner = OnlineNaturalGradient(rank=20, update_period=4)

    def info(self) -> str:
        s = (super().info() + f", offsets-min={fmt_g(_vmin(self.offsets))}"
             f", offsets-max={fmt_g(_vmax(self.offsets))}")
        s += (f", block-dim={self.offsets.shape[0]}, use-natural-gradient="
              f"{'true' if self.use_natural_gradient else 'false'}")
        return s + print_parameter_stats("offsets", self.offsets, True)

    def read(self, r: KaldiReader) -> None:
        read_common_then(self, r, "<Offsets>")
        self.offsets = r.read_vector()
        if r.peek_token().startswith("<I"):
            r.expect_token("<IsGradient>")
            self.is_gradient = r.read_bool()
        if not r.peek_token().startswith("</"):
            r.expect_token("<Dim>")
            self.dim = r.read_int32()
            r.expect_token("<UseNaturalGradient>")
            self.use_natural_gradient = r.read_bool()
        else:
            self.dim = int(self.offsets.shape[0])
            self.use_natural_gradient = True
        self.preconditioner = OnlineNaturalGradient(rank=20, update_period=4)
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<Offsets>")
        w.write_vector(self.offsets)
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<UseNaturalGradient>")
        w.write_bool(self.use_natural_gradient)
        w.write_token(self.closing_tag())

    def scale(self, alpha: float) -> None:
        self.offsets = (np.zeros_like(self.offsets) if alpha == 0.0
                        else self.offsets * F32(alpha))

    def add(self, alpha: float, other: Component) -> None:
        self.offsets = axpy_f32(alpha, other.offsets, self.offsets)

    def perturb_params(self, stddev: float) -> None:
        self.offsets = axpy_f32(stddev, randn(self.offsets.shape[0]), self.offsets)

    def dot_product(self, other: Component) -> float:
        return float(np.dot(self.offsets.astype(np.float64), other.offsets.astype(np.float64)))

    def vectorize(self) -> np.ndarray:
        return self.offsets.copy()

    def unvectorize(self, params: np.ndarray) -> None:
        self.offsets = np.ascontiguousarray(params, dtype=F32).copy()

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        block = self.offsets.shape[0]
        rows = in_value.shape[0]
        out_value[...] = (in_value.reshape(rows, -1, block) + self.offsets).reshape(rows, -1)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None and in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
        if isinstance(to_update, PerElementOffsetComponent):
            block = to_update.offsets.shape[0]
            reshaped = out_deriv.reshape(-1, block)
            if not to_update.use_natural_gradient or to_update.is_gradient:
                to_update.offsets = axpy_f32(to_update.learning_rate, row_sum(reshaped),
                                             to_update.offsets)
            else:
                deriv = np.array(reshaped, dtype=F32, order="C", copy=True)
                scale = to_update.preconditioner.precondition_directions(deriv)
                to_update.offsets = axpy_f32(f32(scale * to_update.learning_rate),
                                             row_sum(deriv), to_update.offsets)


@register
class ScaleAndOffsetComponent(UpdatableComponent):
    """y = scale * x + offset per column (parameters may repeat over blocks);
    scales smaller than 1e-4 in magnitude are replaced by +-1e-4 in the
    forward pass."""

    type_name = "ScaleAndOffsetComponent"
    EPSILON = 1.0e-04

    def __init__(self) -> None:
        super().__init__()
        self.dim = 0
        self.scales = np.zeros(0, dtype=F32)
        self.offsets = np.zeros(0, dtype=F32)
        self.use_natural_gradient = True
        self.scale_preconditioner = OnlineNaturalGradient()
        self.offset_preconditioner = OnlineNaturalGradient()

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        p = (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_IN_PLACE | Prop.PROPAGATE_IN_PLACE
             | Prop.BACKPROP_NEEDS_OUTPUT)
        if self.dim != self.scales.shape[0]:
            p |= Prop.INPUT_CONTIGUOUS | Prop.OUTPUT_CONTIGUOUS
        return p

    def num_parameters(self) -> int:
        return 2 * int(self.scales.shape[0])

    def _set_rank(self, rank: int) -> None:
        self.scale_preconditioner = OnlineNaturalGradient(rank=rank, update_period=4)
        self.offset_preconditioner = OnlineNaturalGradient(rank=rank, update_period=4)

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        dim = cfl.get_int("dim")
        if dim is None or dim <= 0:
            raise self.config_error(cfl, "Dimension 'dim' must be specified and >0")
        self.dim = dim
        self.use_natural_gradient = cfl.get_bool("use-natural-gradient", True)
        block_dim = cfl.get_int("block-dim", dim)
        if block_dim <= 0 or dim % block_dim != 0:
            raise self.config_error(cfl, "Invalid block-dim")
        rank = cfl.get_int("rank", 20)
        if rank <= 0:
            raise self.config_error(cfl, "rank must be > 0")
        self.scales = np.ones(block_dim, dtype=F32)
        self.offsets = np.zeros(block_dim, dtype=F32)
        self._set_rank(rank)

    def info(self) -> str:
        s = super().info() + f", rank={self.scale_preconditioner.rank}"
        if self.dim != self.scales.shape[0]:
            s += f", block-size={self.scales.shape[0]}"
        return (s + print_parameter_stats("scales", self.scales, True)
                + print_parameter_stats("offsets", self.offsets, True))

    def read(self, r: KaldiReader) -> None:
        read_common_then(self, r, "<Dim>")
        self.dim = r.read_int32()
        r.expect_token("<Scales>")
        self.scales = r.read_vector()
        r.expect_token("<Offsets>")
        self.offsets = r.read_vector()
        r.expect_token("<UseNaturalGradient>")
        self.use_natural_gradient = r.read_bool()
        r.expect_token("<Rank>")
        rank = r.read_int32()
        # Read() only sets the rank; the update period keeps its default.
        self.scale_preconditioner = OnlineNaturalGradient(rank=rank)
        self.offset_preconditioner = OnlineNaturalGradient(rank=rank)
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<Scales>")
        w.write_vector(self.scales)
        w.write_token("<Offsets>")
        w.write_vector(self.offsets)
        w.write_token("<UseNaturalGradient>")
        w.write_bool(self.use_natural_gradient)
        w.write_token("<Rank>")
        w.write_int32(self.scale_preconditioner.rank)
        w.write_token(self.closing_tag())

    def scale(self, alpha: float) -> None:
        if alpha == 0.0:
            self.scales = np.zeros_like(self.scales)
            self.offsets = np.zeros_like(self.offsets)
        else:
            self.scales = self.scales * F32(alpha)
            self.offsets = self.offsets * F32(alpha)

    def add(self, alpha: float, other: Component) -> None:
        self.scales = axpy_f32(alpha, other.scales, self.scales)
        self.offsets = axpy_f32(alpha, other.offsets, self.offsets)

    def perturb_params(self, stddev: float) -> None:
        self.scales = axpy_f32(stddev, randn(self.scales.shape[0]), self.scales)
        self.offsets = axpy_f32(stddev, randn(self.offsets.shape[0]), self.offsets)

    def dot_product(self, other: Component) -> float:
        d = np.float64
        return float(np.dot(other.scales.astype(d), self.scales.astype(d))
                     + np.dot(other.offsets.astype(d), self.offsets.astype(d)))

    def vectorize(self) -> np.ndarray:
        return np.concatenate([self.scales, self.offsets]).astype(F32)

    def unvectorize(self, params: np.ndarray) -> None:
        n = self.scales.shape[0]
        p = np.asarray(params, dtype=F32)
        self.scales = p[:n].copy()
        self.offsets = p[n:2 * n].copy()

    def scales_nonzero(self) -> np.ndarray:
        """Kaldi's cu::EnsureNonzero(scales, 1e-4)."""
        eps = F32(self.EPSILON)
        s = self.scales
        return np.where((s <= -eps) | (s >= eps), s, np.where(s >= 0, eps, -eps)).astype(F32)

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        block = self.scales.shape[0]
        rows = in_value.shape[0]
        x = in_value.reshape(rows, -1, block)
        out_value[...] = (x * self.scales_nonzero() + self.offsets).reshape(rows, -1)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        block = self.scales.shape[0]
        od = out_deriv.reshape(-1, block)
        if isinstance(to_update, ScaleAndOffsetComponent):
            use_ng = to_update.use_natural_gradient and not to_update.is_gradient
            lr = to_update.learning_rate
            if use_ng:
                deriv = np.array(od, dtype=F32, order="C", copy=True)
                scale = to_update.offset_preconditioner.precondition_directions(deriv)
                to_update.offsets = axpy_f32(f32(scale * lr), row_sum(deriv),
                                             to_update.offsets)
            else:
                to_update.offsets = axpy_f32(lr, row_sum(od), to_update.offsets)
            # The input is reconstructed from the output (which is what the
            # backprop keeps): x = (y - offset) / scale.
            inv = (F32(1.0) / self.scales_nonzero()).astype(F32)
            x = (out_value.reshape(-1, block) - self.offsets) * inv
            scale_derivs = np.asarray(x * od, dtype=F32, order="C")
            scale = 1.0
            if use_ng:
                scale = to_update.scale_preconditioner.precondition_directions(scale_derivs)
            to_update.scales = axpy_f32(f32(scale * lr), row_sum(scale_derivs),
                                        to_update.scales)
        if in_deriv is not None:
            # Uses self.scales after any update (when to_update is self), as Kaldi.
            in_deriv[...] = (od * self.scales).reshape(out_deriv.shape)


@register
class ElementwiseProductComponent(InOutDimComponent):
    """Product of the input-dim/output-dim consecutive input blocks."""

    type_name = "ElementwiseProductComponent"

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT

    def init_from_config(self, cfl: ConfigLine) -> None:
        output_dim = cfl.get_int("output-dim")
        input_dim = cfl.get_int("input-dim")
        expect_or_error(output_dim is not None and input_dim is not None
                        and output_dim > 0, self, cfl, "input-dim and output-dim > 0 required")
        expect_or_error(input_dim > output_dim and input_dim % output_dim == 0, self, cfl,
                        "input-dim must be a multiple (>1) of output-dim")
        self._input_dim, self._output_dim = input_dim, output_dim

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        d = self._output_dim
        prod = in_value[:, 0:d].copy()
        for i in range(1, self._input_dim // d):
            prod *= in_value[:, i * d:(i + 1) * d]
        out_value[...] = prod
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        d = self._output_dim
        n = self._input_dim // d
        result = np.empty((out_deriv.shape[0], self._input_dim), dtype=F32)
        for i in range(n):
            cur = out_deriv.astype(F32, copy=True)
            for j in range(n):
                if j != i:
                    cur *= in_value[:, j * d:(j + 1) * d]
            result[:, i * d:(i + 1) * d] = cur
        in_deriv[...] = result
