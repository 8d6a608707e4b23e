"""The element-wise parts of recurrent cells (Kaldi's
nnet-combined-component.{h,cc}): LstmNonlinearityComponent,
GruNonlinearityComponent and OutputGruNonlinearityComponent, with their few
diagonal or recurrent parameters and value/derivative statistics for
self-repair.

Statistics are kept as sums (float64) in memory but written as averages
(float32), dividing by the count exactly as Kaldi does so that re-writing a
model gives Kaldi's bytes.  The backprop follows cu::BackpropLstmNonlinearity
(cu-math.cc, its CPU loop) and GruNonlinearityComponent /
OutputGruNonlinearityComponent::Backprop.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, read_double_matrix
from ..config_line import ConfigLine
from .base import (Component, Prop, UpdatableComponent, fmt_bool, fmt_g, print_parameter_stats,
                   randn, register, rng, summarize_vector)
from .natural_gradient import OnlineNaturalGradient, cached_preconditioner, precondition_in_out
from .numeric import F32, F64, add_scaled_f32


def kaldi_sigmoid(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    e = np.exp(-np.abs(a))
    one = np.float32(1.0)
    return np.where(a > 0, one / (one + e), e / (e + one)).astype(np.float32)


def kaldi_tanh(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    e = np.exp(-np.abs(a))
    t = np.float32(2.0) / (np.float32(1.0) + e * e)
    return np.where(a > 0, t - np.float32(1.0), np.float32(1.0) - t).astype(np.float32)


def _scale_stats_for_write(sums: np.ndarray, count: float) -> np.ndarray:
    """Kaldi: convert the float64 sums to float32, then scale by the float32
    value of 1/count (when count != 0)."""
    avg = np.asarray(sums, dtype=np.float32)
    if count != 0.0:
        avg = avg * np.float32(1.0 / count)
    return avg


def _expect_after_common(r: KaldiReader, pending: str, token: str) -> None:
    """After read_updatable_common: ``pending`` is the token it already
    consumed ("" if it stopped after <LearningRate>)."""
    if pending == "":
        r.expect_token(token)
    elif pending != token:
        raise r.error(f"expected {token}, got {pending[:40]}")


def _zero_or_scale(scale: float, *arrays: np.ndarray) -> None:
    for a in arrays:
        if scale == 0.0:
            a[...] = 0.0
        else:
            a *= a.dtype.type(scale)


@register
class LstmNonlinearityComponent(UpdatableComponent):
    """Kaldi's LstmNonlinearityComponent: the element-wise part of an LSTM cell (gates with
    diagonal peephole weights) on the concatenated affine outputs and the previous cell."""

    type_name = "LstmNonlinearityComponent"

    _NONLIN_NAMES = ("i_t_sigmoid", "f_t_sigmoid", "c_t_tanh", "o_t_sigmoid", "m_t_tanh")

    def __init__(self) -> None:
        super().__init__()
        self.params = np.zeros((3, 0), dtype=np.float32)     # rows w_ic, w_fc, w_oc
        self.use_dropout = False
        self.value_sum = np.zeros((5, 0), dtype=np.float64)
        self.deriv_sum = np.zeros((5, 0), dtype=np.float64)
        # 5 self-repair thresholds, then 5 self-repair scales.
        self.self_repair_config = np.zeros(10, dtype=np.float32)
        self.self_repair_total = np.zeros(5, dtype=np.float64)
        self.count = 0.0
        # Not configurable in Kaldi: the preconditioner only sees the
        # per-minibatch parameter derivative (3 rows), hence the small values.
        self.preconditioner = OnlineNaturalGradient(rank=20, update_period=2,
                                                    num_samples_history=1000.0)

    def cell_dim(self) -> int:
        return int(self.params.shape[1])

    def input_dim(self) -> int:
        return self.value_sum.shape[1] * 5 + (3 if self.use_dropout else 0)

    def output_dim(self) -> int:
        return self.value_sum.shape[1] * 2

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT

    def num_parameters(self) -> int:
        return int(self.params.size)

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        cell_dim = cfl.get_int("cell-dim")
        param_stddev = cfl.get_float("param-stddev", 1.0)
        tanh_thr = cfl.get_float("tanh-self-repair-threshold", 0.2)
        sigmoid_thr = cfl.get_float("sigmoid-self-repair-threshold", 0.05)
        sr_scale = cfl.get_float("self-repair-scale", 1.0e-05)
        use_dropout = cfl.get_bool("use-dropout", False)
        if cell_dim is None:
            raise self.config_error(cfl, "cell-dim is required")
        if not (cell_dim > 0 and param_stddev >= 0.0 and 0.0 <= tanh_thr <= 1.0
                and 0.0 <= sigmoid_thr <= 0.25 and 0.0 <= sr_scale <= 0.1):
            raise self.config_error(cfl, "invalid values: need cell-dim > 0, param-stddev >= 0, "
                                         "0 <= tanh-self-repair-threshold <= 1, "
                                         "0 <= sigmoid-self-repair-threshold <= 0.25, "
                                         "0 <= self-repair-scale <= 0.1")
        self.use_dropout = use_dropout
        self.params = randn(3, cell_dim) * np.float32(param_stddev)
        self.value_sum = np.zeros((5, cell_dim), dtype=np.float64)
        self.deriv_sum = np.zeros((5, cell_dim), dtype=np.float64)
        cfg = np.full(10, sigmoid_thr, dtype=np.float32)
        cfg[2] = tanh_thr
        cfg[4] = tanh_thr
        cfg[5:] = sr_scale
        self.self_repair_config = cfg
        self.self_repair_total = np.zeros(5, dtype=np.float64)
        self.count = 0.0

    def read(self, r: KaldiReader) -> None:
        pending = self.read_updatable_common(r)
        _expect_after_common(r, pending, "<Params>")
        self.params = r.read_matrix()
        r.expect_token("<ValueAvg>")
        value_avg = read_double_matrix(r)
        r.expect_token("<DerivAvg>")
        deriv_avg = read_double_matrix(r)
        r.expect_token("<SelfRepairConfig>")
        self.self_repair_config = r.read_vector()
        r.expect_token("<SelfRepairProb>")
        self_repair_prob = r.read_double_vector()
        tok = r.read_token()
        self.use_dropout = False
        if tok == "<UseDropout>":
            self.use_dropout = r.read_bool()
            tok = r.read_token()
        if tok != "<Count>":
            raise r.error(f"{self.type_name}: expected <Count>, got {tok[:40]}")
        self.count = r.read_double()
        # on disk: averages; in memory: sums.
        self.value_sum = value_avg * self.count
        self.deriv_sum = deriv_avg * self.count
        self.self_repair_total = self_repair_prob * (self.count * self.cell_dim())
        r.expect_token(self.closing_tag())
        if (self.params.shape[0] != 3 or self.value_sum.shape != (5, self.cell_dim())
                or self.deriv_sum.shape != (5, self.cell_dim())
                or self.self_repair_config.shape[0] != 10
                or self.self_repair_total.shape[0] != 5):
            raise r.error(f"{self.type_name}: inconsistent dimensions")

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<Params>")
        w.write_matrix(self.params)
        w.write_token("<ValueAvg>")
        w.write_matrix(_scale_stats_for_write(self.value_sum, self.count))
        w.write_token("<DerivAvg>")
        w.write_matrix(_scale_stats_for_write(self.deriv_sum, self.count))
        w.write_token("<SelfRepairConfig>")
        w.write_vector(self.self_repair_config)
        w.write_token("<SelfRepairProb>")
        w.write_vector(_scale_stats_for_write(self.self_repair_total,
                                              self.count * self.cell_dim()))
        if self.use_dropout:
            w.write_token("<UseDropout>")
            w.write_bool(True)
        w.write_token("<Count>")
        w.write_double(self.count)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        cell_dim = self.cell_dim()
        s = (super().info() + f", cell-dim={cell_dim}"
             f", use-dropout={fmt_bool(self.use_dropout)}")
        for i, name in enumerate(("w_ic", "w_fc", "w_oc")):
            s += print_parameter_stats(name, self.params[i])
        if self.count > 0:
            s += f", count={fmt_g(self.count, 3)}"
        for i, name in enumerate(self._NONLIN_NAMES):
            s += (f", {name}={{ self-repair-lower-threshold={fmt_g(self.self_repair_config[i])}"
                  f", self-repair-scale={fmt_g(self.self_repair_config[i + 5])}")
            if self.count != 0:
                prop = np.float32(self.self_repair_total[i] / (self.count * cell_dim))
                inv = np.float32(1.0 / self.count)
                value_avg = self.value_sum[i].astype(np.float32) * inv
                deriv_avg = self.deriv_sum[i].astype(np.float32) * inv
                s += (f", self-repaired-proportion={fmt_g(prop)}"
                      f", value-avg={summarize_vector(value_avg)}"
                      f", deriv-avg={summarize_vector(deriv_avg)}")
            s += " }"
        return s

    def zero_stats(self) -> None:
        self.value_sum[...] = 0.0
        self.deriv_sum[...] = 0.0
        self.self_repair_total[...] = 0.0
        self.count = 0.0

    def scale(self, alpha: float) -> None:
        _zero_or_scale(alpha, self.params, self.value_sum, self.deriv_sum,
                       self.self_repair_total)
        self.count = 0.0 if alpha == 0.0 else self.count * alpha

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, LstmNonlinearityComponent)
        add_scaled_f32(alpha, other.params, self.params)
        self.value_sum += alpha * other.value_sum
        self.deriv_sum += alpha * other.deriv_sum
        self.self_repair_total += alpha * other.self_repair_total
        self.count += alpha * other.count

    def perturb_params(self, stddev: float) -> None:
        self.params += np.float32(stddev) * randn(*self.params.shape)

    def dot_product(self, other: "LstmNonlinearityComponent") -> float:
        return float(np.vdot(self.params.astype(np.float64), other.params))

    def vectorize(self) -> np.ndarray:
        return self.params.reshape(-1).copy()

    def unvectorize(self, params: np.ndarray) -> None:
        self.params[...] = params.reshape(self.params.shape)

    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray) -> None:
        c = self.cell_dim()
        x = np.asarray(in_value, dtype=np.float32)
        i_part, f_part = x[:, 0:c], x[:, c:2 * c]
        c_part, o_part, c_prev = x[:, 2 * c:3 * c], x[:, 3 * c:4 * c], x[:, 4 * c:5 * c]
        if x.shape[1] == 5 * c + 3:
            # per-frame dropout masks for i_t, f_t and o_t
            i_scale, f_scale, o_scale = (x[:, 5 * c:5 * c + 1], x[:, 5 * c + 1:5 * c + 2],
                                         x[:, 5 * c + 2:5 * c + 3])
        elif x.shape[1] == 5 * c:
            i_scale = f_scale = o_scale = np.float32(1.0)
        else:
            raise ValueError(f"{self.type_name}: input has {x.shape[1]} columns, "
                             f"expected {5 * c} or {5 * c + 3}")
        w_ic, w_fc, w_oc = self.params[0], self.params[1], self.params[2]
        i_t = kaldi_sigmoid(i_part + w_ic * c_prev)
        f_t = kaldi_sigmoid(f_part + w_fc * c_prev)
        c_t = f_t * f_scale * c_prev + i_t * i_scale * kaldi_tanh(c_part)
        o_t = kaldi_sigmoid(o_part + w_oc * c_t)
        out_value[:, :c] = c_t
        out_value[:, c:2 * c] = o_t * o_scale * kaldi_tanh(c_t)
        return None

    def backprop(self, debug_info: str, indexes, in_value: np.ndarray | None, out_value,
                 out_deriv: np.ndarray, memo, to_update, in_deriv: np.ndarray | None) -> None:
        """Kaldi's BackpropLstmNonlinearity (sets in_deriv's first 5 x cell-dim
        columns; the dropout-mask columns are left as they are, as in Kaldi).
        Self-repair uses the statistics of ``self``; the statistics and the
        parameter update go to ``to_update``."""
        if to_update is not None and not isinstance(to_update, LstmNonlinearityComponent):
            raise TypeError(f"{self.type_name}.backprop: to_update is {to_update.type_name}")
        lstm_backprop(self, in_value, out_deriv, to_update, in_deriv)

    def freeze_natural_gradient(self, freeze: bool) -> None:
        self.preconditioner.freeze(freeze)


class _GruStatsMixin:
    """Value/derivative statistics shared by the two GRU nonlinearities."""

    cell_dim: int
    value_sum: np.ndarray
    deriv_sum: np.ndarray
    self_repair_total: float
    count: float
    self_repair_threshold: float
    self_repair_scale: float

    def _read_stats(self, r: KaldiReader) -> None:
        r.expect_token("<ValueAvg>")
        value_avg = r.read_double_vector()
        r.expect_token("<DerivAvg>")
        deriv_avg = r.read_double_vector()
        r.expect_token("<SelfRepairTotal>")
        self.self_repair_total = r.read_double()
        r.expect_token("<Count>")
        self.count = r.read_double()
        self.value_sum = value_avg * self.count
        self.deriv_sum = deriv_avg * self.count
        r.expect_token("<SelfRepairThreshold>")
        self.self_repair_threshold = r.read_float()
        r.expect_token("<SelfRepairScale>")
        self.self_repair_scale = r.read_float()

    def _write_stats(self, w: KaldiWriter) -> None:
        w.write_token("<ValueAvg>")
        w.write_vector(_scale_stats_for_write(self.value_sum, self.count))
        w.write_token("<DerivAvg>")
        w.write_vector(_scale_stats_for_write(self.deriv_sum, self.count))
        w.write_token("<SelfRepairTotal>")
        w.write_double(self.self_repair_total)
        w.write_token("<Count>")
        w.write_double(self.count)
        w.write_token("<SelfRepairThreshold>")
        w.write_float(self.self_repair_threshold)
        w.write_token("<SelfRepairScale>")
        w.write_float(self.self_repair_scale)

    def _stats_info(self) -> str:
        s = (f", self-repair-threshold={fmt_g(self.self_repair_threshold)}"
             f", self-repair-scale={fmt_g(self.self_repair_scale)}")
        if self.count > 0:
            inv = np.float32(1.0 / self.count)
            s += (f", count={fmt_g(self.count, 3)}"
                  f", self-repaired-proportion="
                  f"{fmt_g(self.self_repair_total / (self.count * self.cell_dim))}"
                  f", value-avg={summarize_vector(self.value_sum.astype(np.float32) * inv)}"
                  f", deriv-avg={summarize_vector(self.deriv_sum.astype(np.float32) * inv)}")
        return s

    def _init_stats(self) -> None:
        self.count = 0.0
        self.self_repair_total = 0.0
        self.value_sum = np.zeros(self.cell_dim, dtype=np.float64)
        self.deriv_sum = np.zeros(self.cell_dim, dtype=np.float64)

    def zero_stats(self) -> None:
        self.value_sum[...] = 0.0
        self.deriv_sum[...] = 0.0
        self.self_repair_total = 0.0
        self.count = 0.0

    def _scale_stats(self, alpha: float) -> None:
        _zero_or_scale(alpha, self.value_sum, self.deriv_sum)
        self.self_repair_total = 0.0 if alpha == 0.0 else self.self_repair_total * alpha
        self.count = 0.0 if alpha == 0.0 else self.count * alpha

    def _add_stats(self, alpha: float, other: "_GruStatsMixin") -> None:
        self.value_sum += alpha * other.value_sum
        self.deriv_sum += alpha * other.deriv_sum
        self.self_repair_total += alpha * other.self_repair_total
        self.count += alpha * other.count


@register
class GruNonlinearityComponent(_GruStatsMixin, UpdatableComponent):
    """(z_t, r_t, hpart_t, c_{t-1}[, s_{t-1}]) -> (h_t, c_t); s_{t-1} is a
    separate input only for projected GRUs (recurrent-dim < cell-dim)."""

    type_name = "GruNonlinearityComponent"

    def __init__(self) -> None:
        super().__init__()
        self.cell_dim = 0
        self.recurrent_dim = 0
        self.w_h = np.zeros((0, 0), dtype=np.float32)
        self.self_repair_threshold = 0.2
        self.self_repair_scale = 1.0e-05
        self.alpha = 4.0
        self.rank_in = 20
        self.rank_out = 80
        self.update_period = 4
        self._init_stats()

    def input_dim(self) -> int:
        if self.recurrent_dim == self.cell_dim:
            return 4 * self.cell_dim
        return 3 * self.cell_dim + 2 * self.recurrent_dim

    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)

    def num_parameters(self) -> int:
        return int(self.w_h.size)

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        cell_dim = cfl.get_int("cell-dim", -1)
        if cell_dim <= 0:
            raise self.config_error(cfl, "cell-dim > 0 is required")
        self.cell_dim = cell_dim
        param_stddev = cfl.get_float("param-stddev", 1.0 / math.sqrt(cell_dim))
        self.recurrent_dim = cfl.get_int("recurrent-dim", -1)
        self.self_repair_threshold = float(np.float32(cfl.get_float("self-repair-threshold", 0.2)))
        self.self_repair_scale = float(np.float32(cfl.get_float("self-repair-scale", 1.0e-05)))
        self.alpha = float(np.float32(cfl.get_float("alpha", 4.0)))
        self.rank_in = cfl.get_int("rank-in", 20)
        self.rank_out = cfl.get_int("rank-out", 80)
        self.update_period = cfl.get_int("update-period", 4)
        if self.recurrent_dim < 0:
            self.recurrent_dim = cell_dim
        if self.recurrent_dim == 0 or self.recurrent_dim > cell_dim:
            raise self.config_error(cfl, "invalid values for cell-dim and recurrent-dim")
        if self.self_repair_threshold < 0.0 or self.self_repair_scale < 0.0:
            raise self.config_error(cfl, "self-repair-threshold and self-repair-scale must be >= 0")
        self.w_h = randn(cell_dim, self.recurrent_dim) * np.float32(param_stddev)
        self._init_stats()

    def read(self, r: KaldiReader) -> None:
        pending = self.read_updatable_common(r)
        _expect_after_common(r, pending, "<CellDim>")
        self.cell_dim = r.read_int32()
        r.expect_token("<RecurrentDim>")
        self.recurrent_dim = r.read_int32()
        r.expect_token("<w_h>")
        self.w_h = r.read_matrix()
        self._read_stats(r)
        r.expect_token("<Alpha>")
        self.alpha = r.read_float()
        r.expect_token("<RankInOut>")
        self.rank_in = r.read_int32()
        self.rank_out = r.read_int32()
        r.expect_token("<UpdatePeriod>")
        self.update_period = r.read_int32()
        r.expect_token(self.closing_tag())
        if (self.w_h.shape != (self.cell_dim, self.recurrent_dim)
                or self.value_sum.shape[0] != self.cell_dim
                or self.deriv_sum.shape[0] != self.cell_dim):
            raise r.error(f"{self.type_name}: inconsistent dimensions")

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<CellDim>")
        w.write_int32(self.cell_dim)
        w.write_token("<RecurrentDim>")
        w.write_int32(self.recurrent_dim)
        w.write_token("<w_h>")
        w.write_matrix(self.w_h)
        self._write_stats(w)
        w.write_token("<Alpha>")
        w.write_float(self.alpha)
        w.write_token("<RankInOut>")
        w.write_int32(self.rank_in)
        w.write_int32(self.rank_out)
        w.write_token("<UpdatePeriod>")
        w.write_int32(self.update_period)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = (super().info() + f", cell-dim={self.cell_dim}, recurrent-dim={self.recurrent_dim}"
             + print_parameter_stats("w_h", self.w_h) + self._stats_info())
        s += (f", alpha={fmt_g(self.alpha)}, rank-in={self.rank_in}, rank-out={self.rank_out}"
              f", update-period={self.update_period}")
        return s

    def scale(self, alpha: float) -> None:
        _zero_or_scale(alpha, self.w_h)
        self._scale_stats(alpha)

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, GruNonlinearityComponent)
        add_scaled_f32(alpha, other.w_h, self.w_h)
        self._add_stats(alpha, other)

    def perturb_params(self, stddev: float) -> None:
        self.w_h += np.float32(stddev) * randn(*self.w_h.shape)

    def dot_product(self, other: "GruNonlinearityComponent") -> float:
        return float(np.vdot(self.w_h.astype(np.float64), other.w_h))

    def vectorize(self) -> np.ndarray:
        return self.w_h.reshape(-1).copy()

    def unvectorize(self, params: np.ndarray) -> None:
        self.w_h[...] = params.reshape(self.w_h.shape)

    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray) -> None:
        c, r = self.cell_dim, self.recurrent_dim
        x = np.asarray(in_value, dtype=np.float32)
        z_t, r_t = x[:, :c], x[:, c:c + r]
        hpart_t, c_t1 = x[:, c + r:2 * c + r], x[:, 2 * c + r:3 * c + r]
        # for a non-projected GRU s_{t-1} is the same memory as c_{t-1}
        s_t1 = x[:, x.shape[1] - r:]
        h_t = kaldi_tanh(hpart_t + (r_t * s_t1) @ self.w_h.T)
        out_value[:, :c] = h_t
        out_value[:, c:] = h_t - z_t * h_t + z_t * c_t1
        return None

    def backprop(self, debug_info: str, indexes, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo, to_update,
                 in_deriv: np.ndarray | None) -> None:
        if to_update is not None and not isinstance(to_update, GruNonlinearityComponent):
            raise TypeError(f"{self.type_name}.backprop: to_update is {to_update.type_name}")
        gru_backprop(self, in_value, out_value, out_deriv, to_update, in_deriv)

    def update_parameters(self, sdotr: np.ndarray, h_t_deriv: np.ndarray) -> None:
        """w_h += lr * h_t_deriv^T (r_t . s_{t-1}), natural gradient unless
        is_gradient (compare AffineComponent)."""
        if self.is_gradient:
            self.w_h += np.float32(self.learning_rate) * (h_t_deriv.T @ sdotr)
            return
        pre_in = cached_preconditioner(self, "preconditioner_in", rank=self.rank_in,
                                       alpha=self.alpha, update_period=self.update_period)
        pre_out = cached_preconditioner(self, "preconditioner_out", rank=self.rank_out,
                                        alpha=self.alpha, update_period=self.update_period)
        lrate, in_temp, out_temp = precondition_in_out(pre_in, pre_out, sdotr, h_t_deriv,
                                                       self.learning_rate, append_ones=False)
        self.w_h += lrate * (out_temp.T @ in_temp)

    def freeze_natural_gradient(self, freeze: bool) -> None:
        for name in ("preconditioner_in", "preconditioner_out"):
            if name in self.__dict__:
                self.__dict__[name].freeze(freeze)


@register
class OutputGruNonlinearityComponent(_GruStatsMixin, UpdatableComponent):
    """(z_t, hpart_t, c_{t-1}) -> (h_t, c_t) with a diagonal recurrence."""

    type_name = "OutputGruNonlinearityComponent"

    def __init__(self) -> None:
        super().__init__()
        self.cell_dim = 0
        self.w_h = np.zeros(0, dtype=np.float32)
        self.self_repair_threshold = 0.2
        self.self_repair_scale = 1.0e-05
        self.alpha = 4.0
        self.rank = 8
        self.update_period = 10
        self._init_stats()

    def input_dim(self) -> int:
        return 3 * self.cell_dim

    def output_dim(self) -> int:
        return 2 * self.cell_dim

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                | Prop.BACKPROP_NEEDS_OUTPUT | Prop.BACKPROP_ADDS)

    def num_parameters(self) -> int:
        return int(self.w_h.size)

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        cell_dim = cfl.get_int("cell-dim", -1)
        if cell_dim <= 0:
            raise self.config_error(cfl, "cell-dim > 0 is required")
        self.cell_dim = cell_dim
        self.self_repair_threshold = float(np.float32(cfl.get_float("self-repair-threshold", 0.2)))
        self.self_repair_scale = float(np.float32(cfl.get_float("self-repair-scale", 1.0e-05)))
        param_mean = cfl.get_float("param-mean", 0.0)
        param_stddev = cfl.get_float("param-stddev", 1.0)
        self.alpha = float(np.float32(cfl.get_float("alpha", 4.0)))
        self.rank = cfl.get_int("rank", 8)
        self.update_period = cfl.get_int("update-period", 10)
        if self.self_repair_threshold < 0.0 or self.self_repair_scale < 0.0:
            raise self.config_error(cfl, "self-repair-threshold and self-repair-scale must be >= 0")
        self.w_h = randn(cell_dim) * np.float32(param_stddev) + np.float32(param_mean)
        self._init_stats()

    def read(self, r: KaldiReader) -> None:
        pending = self.read_updatable_common(r)
        _expect_after_common(r, pending, "<CellDim>")
        self.cell_dim = r.read_int32()
        r.expect_token("<w_h>")
        self.w_h = r.read_vector()
        self._read_stats(r)
        r.expect_token("<Alpha>")
        self.alpha = r.read_float()
        r.expect_token("<Rank>")
        self.rank = r.read_int32()
        r.expect_token("<UpdatePeriod>")
        self.update_period = r.read_int32()
        r.expect_token(self.closing_tag())
        if (self.w_h.shape[0] != self.cell_dim or self.value_sum.shape[0] != self.cell_dim
                or self.deriv_sum.shape[0] != self.cell_dim):
            raise r.error(f"{self.type_name}: inconsistent dimensions")

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<CellDim>")
        w.write_int32(self.cell_dim)
        w.write_token("<w_h>")
        w.write_vector(self.w_h)
        self._write_stats(w)
        w.write_token("<Alpha>")
        w.write_float(self.alpha)
        w.write_token("<Rank>")
        w.write_int32(self.rank)
        w.write_token("<UpdatePeriod>")
        w.write_int32(self.update_period)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = (super().info() + f", cell-dim={self.cell_dim}"
             + print_parameter_stats("w_h", self.w_h) + self._stats_info())
        s += (f", alpha={fmt_g(self.alpha)}, rank={self.rank}"
              f", update-period={self.update_period}")
        return s

    def scale(self, alpha: float) -> None:
        _zero_or_scale(alpha, self.w_h)
        self._scale_stats(alpha)

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, OutputGruNonlinearityComponent)
        add_scaled_f32(alpha, other.w_h, self.w_h)
        self._add_stats(alpha, other)

    def perturb_params(self, stddev: float) -> None:
        self.w_h += np.float32(stddev) * randn(*self.w_h.shape)

    def dot_product(self, other: "OutputGruNonlinearityComponent") -> float:
        return float(np.dot(self.w_h.astype(np.float64), other.w_h))

    def vectorize(self) -> np.ndarray:
        return self.w_h.copy()

    def unvectorize(self, params: np.ndarray) -> None:
        self.w_h[...] = params

    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray) -> None:
        c = self.cell_dim
        x = np.asarray(in_value, dtype=np.float32)
        z_t, hpart_t, c_t1 = x[:, :c], x[:, c:2 * c], x[:, 2 * c:3 * c]
        h_t = kaldi_tanh(c_t1 * self.w_h + hpart_t)
        out_value[:, :c] = h_t
        out_value[:, c:] = h_t - z_t * h_t + z_t * c_t1
        return None

    def backprop(self, debug_info: str, indexes, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo, to_update,
                 in_deriv: np.ndarray | None) -> None:
        if to_update is not None and not isinstance(to_update, OutputGruNonlinearityComponent):
            raise TypeError(f"{self.type_name}.backprop: to_update is {to_update.type_name}")
        output_gru_backprop(self, in_value, out_value, out_deriv, to_update, in_deriv)

    def update_parameters(self, c_t1: np.ndarray, h_t_deriv: np.ndarray) -> None:
        """w_h += lr * column sums of c_{t-1} . h_t_deriv (per-element scale),
        natural gradient unless is_gradient."""
        derivs_per_frame = np.asarray(c_t1 * h_t_deriv, dtype=np.float32, order="C")
        if self.is_gradient:
            self.w_h += np.float32(self.learning_rate) * derivs_per_frame.sum(axis=0)
            return
        pre = cached_preconditioner(self, "preconditioner", rank=self.rank, alpha=self.alpha,
                                    update_period=self.update_period)
        scale = pre.precondition_directions(derivs_per_frame)
        self.w_h += (np.float32(np.float32(scale) * np.float32(self.learning_rate))
                     * derivs_per_frame.sum(axis=0, dtype=np.float32))

    def freeze_natural_gradient(self, freeze: bool) -> None:
        if "preconditioner" in self.__dict__:
            self.__dict__["preconditioner"].freeze(freeze)


def lstm_backprop(comp: "LstmNonlinearityComponent", in_value: np.ndarray,
                  out_deriv: np.ndarray, to_update: "LstmNonlinearityComponent | None",
                  in_deriv: np.ndarray | None) -> None:
    c = comp.cell_dim()
    x = np.asarray(in_value, dtype=F32)
    num_rows = x.shape[0]
    i_part, f_part = x[:, 0:c], x[:, c:2 * c]
    c_part, o_part, c_prev = x[:, 2 * c:3 * c], x[:, 3 * c:4 * c], x[:, 4 * c:5 * c]
    if x.shape[1] == 5 * c + 3:
        i_scale, f_scale, o_scale = x[:, 5 * c:5 * c + 1], x[:, 5 * c + 1:5 * c + 2], \
            x[:, 5 * c + 2:5 * c + 3]
    elif x.shape[1] == 5 * c:
        i_scale = f_scale = o_scale = F32(1.0)
    else:
        raise ValueError(f"{comp.type_name}: input has {x.shape[1]} columns")
    w_ic, w_fc, w_oc = comp.params[0], comp.params[1], comp.params[2]
    one = F32(1.0)

    # Self-repair (from the statistics of the model being run): a unit whose
    # average derivative is below its threshold gets its scale, else 0.
    count = F32(1.0 + comp.count)        # + 1 avoids dividing by zero
    cfg = comp.self_repair_config
    active = comp.deriv_sum / float(count) < cfg[:5, None].astype(F64)    # (5, c)
    sr = np.where(active, cfg[5:, None], F32(0.0)).astype(F32)
    i_t_sr, f_t_sr, c_part_sr, o_t_sr, c_t_sr = sr

    i_t = kaldi_sigmoid(i_part + w_ic * c_prev)
    f_t = kaldi_sigmoid(f_part + w_fc * c_prev)
    tanh_c_part = kaldi_tanh(c_part)
    c_t = f_t * f_scale * c_prev + i_t * i_scale * tanh_c_part
    o_t = kaldi_sigmoid(o_part + w_oc * c_t)
    tanh_c_t = kaldi_tanh(c_t)

    dc_t_out = out_deriv[:, :c]
    dm_t = out_deriv[:, c:2 * c]
    dtanh_c_t = o_t * o_scale * dm_t
    do_t = o_scale * tanh_c_t * dm_t
    do_t_input = o_t * (one - o_t) * do_t - (F32(2.0) * o_t - one) * o_t_sr
    dc_t = ((one - tanh_c_t * tanh_c_t) * dtanh_c_t + dc_t_out + do_t_input * w_oc
            - tanh_c_t * c_t_sr)
    dtanh_c_part = i_t * i_scale * dc_t
    df_t = dc_t * f_scale * c_prev
    df_t_input = df_t * f_t * (one - f_t) - (F32(2.0) * f_t - one) * f_t_sr
    di_t = dc_t * i_scale * tanh_c_part
    di_t_input = di_t * i_t * (one - i_t) - (F32(2.0) * i_t - one) * i_t_sr

    if in_deriv is not None:
        in_deriv[:, 0:c] = di_t_input
        in_deriv[:, c:2 * c] = df_t_input
        in_deriv[:, 2 * c:3 * c] = ((one - tanh_c_part * tanh_c_part) * dtanh_c_part
                                    - tanh_c_part * c_part_sr)
        in_deriv[:, 3 * c:4 * c] = do_t_input
        in_deriv[:, 4 * c:5 * c] = w_ic * di_t_input + w_fc * df_t_input + f_t * f_scale * dc_t
    if to_update is None:
        return

    params_deriv = np.stack([(c_prev * di_t_input).sum(axis=0, dtype=F32),
                             (c_prev * df_t_input).sum(axis=0, dtype=F32),
                             (c_t * do_t_input).sum(axis=0, dtype=F32)]).astype(F32)
    values = (i_t, f_t, tanh_c_part, o_t, tanh_c_t)
    derivs = (i_t * (one - i_t), f_t * (one - f_t), one - tanh_c_part * tanh_c_part,
              o_t * (one - o_t), one - tanh_c_t * tanh_c_t)
    to_update.value_sum += np.stack([v.sum(axis=0, dtype=F32) for v in values]).astype(F64)
    # The self-repair counts use the statistics from before this minibatch.
    to_update.self_repair_total += active.sum(axis=1) * float(num_rows)
    to_update.deriv_sum += np.stack([d.sum(axis=0, dtype=F32) for d in derivs]).astype(F64)
    to_update.count += float(num_rows)
    scale = 1.0
    if not to_update.is_gradient:
        scale = to_update.preconditioner.precondition_directions(params_deriv)
    to_update.params += F32(F32(to_update.learning_rate) * F32(scale)) * params_deriv


def _tanh_stats_and_self_repair(to_update: Any, h_t: np.ndarray, h_t_deriv: np.ndarray) -> None:
    """Kaldi's TanhStatsAndSelfRepair of the GRU components: on about half of
    the minibatches, accumulate tanh value/derivative statistics and push
    units whose average derivative is below the threshold away from
    saturation (modifies h_t_deriv in place)."""
    repair_and_stats_probability = 0.5
    if rng().random() > repair_and_stats_probability:
        return
    tanh_deriv = F32(1.0) - h_t * h_t
    to_update.count += h_t.shape[0]
    to_update.value_sum += h_t.sum(axis=0, dtype=F32).astype(F64)
    to_update.deriv_sum += tanh_deriv.sum(axis=0, dtype=F32).astype(F64)
    if to_update.count <= 0.0:
        return
    thresholds = ((-to_update.deriv_sum + to_update.self_repair_threshold * to_update.count)
                  .astype(F32) > 0).astype(F32)
    to_update.self_repair_total += float(thresholds.sum())
    h_t_deriv += (F32(-to_update.self_repair_scale / repair_and_stats_probability)
                  * h_t * thresholds)


def _backprop_c_t(z_t: np.ndarray, c_t1: np.ndarray, h_t: np.ndarray, out_deriv: np.ndarray,
                  c: int, in_deriv: np.ndarray | None, z_col: int,
                  c_t1_col: int) -> np.ndarray:
    """The part shared by both GRUs, for c_t = (1 - z_t) h_t + z_t c_{t-1}:
    adds to the z_t and c_{t-1} derivatives; returns the derivative w.r.t.
    the argument of the tanh giving h_t (the h_t output's own derivative,
    normally zero, is included so that tests can check it)."""
    c_t_deriv = out_deriv[:, c:2 * c]
    h_t_deriv = out_deriv[:, :c] + c_t_deriv - c_t_deriv * z_t
    if in_deriv is not None:
        in_deriv[:, z_col:z_col + c] += c_t_deriv * (c_t1 - h_t)
        in_deriv[:, c_t1_col:c_t1_col + c] += c_t_deriv * z_t
    return (h_t_deriv * (F32(1.0) - h_t * h_t)).astype(F32)       # tanh'


def gru_backprop(comp: "GruNonlinearityComponent", in_value: np.ndarray,
                 out_value: np.ndarray, out_deriv: np.ndarray,
                 to_update: "GruNonlinearityComponent | None",
                 in_deriv: np.ndarray | None) -> None:
    """BACKPROP_ADDS.  As in Kaldi the parameters are updated before the input
    derivative is computed, so when to_update is comp that derivative uses
    the updated w_h."""
    if in_deriv is None and to_update is None:
        raise ValueError("GruNonlinearityComponent.backprop: nothing to do")
    c, r = comp.cell_dim, comp.recurrent_dim
    ncol = in_value.shape[1]
    z_t, r_t = in_value[:, :c], in_value[:, c:c + r]
    c_t1, s_t1 = in_value[:, 2 * c + r:3 * c + r], in_value[:, ncol - r:]
    h_t = out_value[:, :c]
    sdotr = (r_t * s_t1).astype(F32)
    h_t_deriv = _backprop_c_t(z_t, c_t1, h_t, out_deriv, c, in_deriv, 0, 2 * c + r)
    if to_update is not None:
        _tanh_stats_and_self_repair(to_update, h_t, h_t_deriv)
        to_update.update_parameters(sdotr, h_t_deriv)
    if in_deriv is not None:
        in_deriv[:, c + r:2 * c + r] += h_t_deriv
        sdotr_deriv = h_t_deriv @ comp.w_h
        in_deriv[:, c:c + r] += sdotr_deriv * s_t1
        in_deriv[:, ncol - r:] += sdotr_deriv * r_t


def output_gru_backprop(comp: "OutputGruNonlinearityComponent", in_value: np.ndarray,
                        out_value: np.ndarray, out_deriv: np.ndarray,
                        to_update: "OutputGruNonlinearityComponent | None",
                        in_deriv: np.ndarray | None) -> None:
    """BACKPROP_ADDS; the update comes first, as in gru_backprop."""
    if in_deriv is None and to_update is None:
        raise ValueError("OutputGruNonlinearityComponent.backprop: nothing to do")
    c = comp.cell_dim
    z_t, c_t1 = in_value[:, :c], in_value[:, 2 * c:3 * c]
    h_t = out_value[:, :c]
    h_t_deriv = _backprop_c_t(z_t, c_t1, h_t, out_deriv, c, in_deriv, 0, 2 * c)
    if to_update is not None:
        _tanh_stats_and_self_repair(to_update, h_t, h_t_deriv)
        to_update.update_parameters(c_t1, h_t_deriv)
    if in_deriv is not None:
        in_deriv[:, c:2 * c] += h_t_deriv
        in_deriv[:, 2 * c:3 * c] += h_t_deriv * comp.w_h
