"""Components whose output is a trained constant, whatever the input values:
ConstantComponent (Kaldi's nnet-general-component.{h,cc}; it has no input
and its output can be any Index) and ConstantFunctionComponent (Kaldi's
nnet-simple-component.{h,cc}; one output row per input row).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine
from ..index import Index
from .base import (Component, Prop, UpdatableComponent, fmt_bool, print_parameter_stats, randn,
                   register)
from .natural_gradient import OnlineNaturalGradient
from .numeric import F32, axpy_f32, random_vector, row_sum


@register
class ConstantComponent(UpdatableComponent):
    """Outputs a (possibly trainable) constant vector; needs no input."""

    type_name = "ConstantComponent"

    def __init__(self) -> None:
        super().__init__()
        self.output = np.zeros(0, dtype=F32)
        self.is_updatable_ = True
        self.use_natural_gradient = True
        # Kaldi's defaults (not configurable); its state is never written.
        self.preconditioner = OnlineNaturalGradient()

    def input_dim(self) -> int:
        return int(self.output.shape[0])

    def output_dim(self) -> int:
        return int(self.output.shape[0])

    def properties(self) -> int:
        return int(Prop.UPDATABLE) if self.is_updatable_ else 0

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        output_dim = cfl.get_int("output-dim")
        self.is_updatable_ = cfl.get_bool("is-updatable", True)
        self.use_natural_gradient = cfl.get_bool("use-natural-gradient", True)
        output_mean = F32(cfl.get_float("output-mean", 0.0))
        output_stddev = F32(cfl.get_float("output-stddev", 0.0))
        if output_dim is None or output_dim <= 0:
            raise self.config_error(cfl, "output-dim must be given and > 0")
        self.output = np.ascontiguousarray(randn(output_dim) * output_stddev + output_mean,
                                           dtype=F32)

    def read(self, r: KaldiReader) -> None:
        token = self.read_updatable_common(r, read_next=True)
        if token != "<Output>":
            raise r.error(f"ConstantComponent: expected token <Output>, got {token[:40]}")
        self.output = np.ascontiguousarray(r.read_vector(), dtype=F32)
        r.expect_token("<IsUpdatable>")
        self.is_updatable_ = r.read_bool()
        r.expect_token("<UseNaturalGradient>")
        self.use_natural_gradient = r.read_bool()
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<Output>")
        w.write_vector(self.output)
        w.write_token("<IsUpdatable>")
        w.write_bool(self.is_updatable_)
        w.write_token("<UseNaturalGradient>")
        w.write_bool(self.use_natural_gradient)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        return (UpdatableComponent.info(self)
                + f", {self.type_name}, output-dim={self.output_dim()}"
                + f", is-updatable={fmt_bool(self.is_updatable_)}"
                + f", use-natural-gradient={fmt_bool(self.use_natural_gradient)}"
                + print_parameter_stats("output", self.output, include_mean=True))

    # -- compiler hooks: no input is needed --------------------------------
    def get_input_indexes(self, misc_info: Any, output_index) -> list[Index]:
        return []

    def is_computable(self, misc_info: Any, output_index, input_index_set) -> tuple[bool, list]:
        return True, []

    def get_input_index_offsets(self) -> list[tuple[int, int, int]]:
        # No offsets: no inputs, always computable (the graph builders' table form).
        return []

    # -- parameters --------------------------------------------------------
    def num_parameters(self) -> int:
        return self.output_dim() if self.is_updatable_ else 0

    def scale(self, alpha: float) -> None:
        if self.is_updatable_:
            if alpha == 0.0:
                self.output = np.zeros_like(self.output)
            else:
                self.output = (self.output * F32(alpha)).astype(F32)

    def add(self, alpha: float, other: Component) -> None:
        if self.is_updatable_:
            assert isinstance(other, ConstantComponent)
            self.output = axpy_f32(alpha, other.output, self.output)

    def perturb_params(self, stddev: float) -> None:
        self.output = (self.output + F32(stddev) * randn(self.output_dim())).astype(F32)

    def dot_product(self, other: "ConstantComponent") -> float:
        return float(np.dot(self.output.astype(np.float64), other.output.astype(np.float64)))

    def vectorize(self) -> np.ndarray:
        return self.output.copy()

    def unvectorize(self, params: np.ndarray) -> None:
        self.output = np.ascontiguousarray(params, dtype=F32).reshape(-1).copy()

    def propagate(self, indexes, in_value, out_value: np.ndarray):
        out_value[...] = self.output[None, :]
        return None

    def backprop(self, debug_info: str, indexes, in_value, out_value, out_deriv: np.ndarray,
                 memo, to_update, in_deriv) -> None:
        # The output does not depend on the input: nothing goes to in_deriv.
        if not isinstance(to_update, ConstantComponent) or not to_update.is_updatable_:
            return
        lr = F32(to_update.learning_rate)
        if to_update.use_natural_gradient and not to_update.is_gradient:
            deriv = np.array(out_deriv, dtype=F32, order="C", copy=True)
            scale = to_update.preconditioner.precondition_directions(deriv)
            lr = F32(F32(scale) * lr)
        else:
            deriv = out_deriv
        to_update.output = (to_update.output
                            + lr * deriv.sum(axis=0, dtype=F32)).astype(F32)

    def freeze_natural_gradient(self, freeze: bool) -> None:
        self.preconditioner.freeze(freeze)


@register
class ConstantFunctionComponent(UpdatableComponent):
    """Outputs a (possibly trainable) constant vector whatever the input."""

    type_name = "ConstantFunctionComponent"

    def __init__(self) -> None:
        super().__init__()
        self._input_dim = -1
        self.output = np.zeros(0, dtype=F32)
        self.is_updatable = True
        self.use_natural_gradient = True
        self.preconditioner = OnlineNaturalGradient()

    def input_dim(self) -> int:
        return self._input_dim

    def output_dim(self) -> int:
        return int(self.output.shape[0])

    def properties(self) -> int:
        p = Prop.SIMPLE | Prop.BACKPROP_ADDS
        if self.is_updatable:
            p |= Prop.UPDATABLE
        if self.input_dim() == self.output_dim():
            p |= Prop.PROPAGATE_IN_PLACE
        return p

    def num_parameters(self) -> int:
        # Kaldi asserts is_updatable_ here; callers only ask updatable ones.
        return int(self.output.shape[0]) if self.is_updatable else 0

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        output_dim = cfl.get_int("output-dim")
        input_dim = cfl.get_int("input-dim")
        self.is_updatable = cfl.get_bool("is-updatable", self.is_updatable)
        self.use_natural_gradient = cfl.get_bool("use-natural-gradient",
                                                 self.use_natural_gradient)
        mean = cfl.get_float("output-mean", 0.0)
        stddev = cfl.get_float("output-stddev", 0.0)
        if output_dim is None or input_dim is None or input_dim <= 0 or output_dim <= 0:
            raise self.config_error(cfl, "Bad initializer: input-dim and output-dim > 0 "
                                         "required")
        self._input_dim = input_dim
        self.output = random_vector(output_dim, mean, stddev)

    def info(self) -> str:
        # Kaldi repeats type and dims after the UpdatableComponent part.
        return (super().info() + f", {self.type_name}, input-dim={self.input_dim()}"
                f", output-dim={self.output_dim()}, is-updatable="
                f"{'true' if self.is_updatable else 'false'}, use-natural-gradient="
                f"{'true' if self.use_natural_gradient else 'false'}"
                + print_parameter_stats("output", self.output, True))

    def read(self, r: KaldiReader) -> None:
        token = self.read_updatable_common(r, read_next=True)
        if token != "<InputDim>":
            raise r.error(f"{self.type_name}: expected token <InputDim>, got {token[:40]}")
        self._input_dim = r.read_int32()
        r.expect_token("<Output>")
        self.output = r.read_vector()
        r.expect_token("<IsUpdatable>")
        self.is_updatable = r.read_bool()
        r.expect_token("<UseNaturalGradient>")
        self.use_natural_gradient = r.read_bool()
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<InputDim>")
        w.write_int32(self._input_dim)
        w.write_token("<Output>")
        w.write_vector(self.output)
        w.write_token("<IsUpdatable>")
        w.write_bool(self.is_updatable)
        w.write_token("<UseNaturalGradient>")
        w.write_bool(self.use_natural_gradient)
        w.write_token(self.closing_tag())

    def scale(self, alpha: float) -> None:
        if self.is_updatable:
            self.output = (np.zeros_like(self.output) if alpha == 0.0
                           else self.output * F32(alpha))

    def add(self, alpha: float, other: Component) -> None:
        if self.is_updatable:
            self.output = axpy_f32(alpha, other.output, self.output)

    def perturb_params(self, stddev: float) -> None:
        self.output = axpy_f32(stddev, randn(self.output.shape[0]), self.output)

    def dot_product(self, other: Component) -> float:
        return float(np.dot(self.output.astype(np.float64), other.output.astype(np.float64)))

    def vectorize(self) -> np.ndarray:
        return self.output.copy()

    def unvectorize(self, params: np.ndarray) -> None:
        self.output = np.ascontiguousarray(params, dtype=F32).copy()

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = self.output
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        # The output does not depend on the input: nothing is added to in_deriv.
        if isinstance(to_update, ConstantFunctionComponent) and to_update.is_updatable:
            if to_update.use_natural_gradient and not to_update.is_gradient:
                deriv = np.array(out_deriv, dtype=F32, order="C", copy=True)
                scale = to_update.preconditioner.precondition_directions(deriv)
                to_update.output = axpy_f32(f32(scale * to_update.learning_rate),
                                            row_sum(deriv), to_update.output)
            else:
                to_update.output = axpy_f32(to_update.learning_rate, row_sum(out_deriv),
                                            to_update.output)
