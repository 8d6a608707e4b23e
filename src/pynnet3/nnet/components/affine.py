"""Affine components (Kaldi's nnet-simple-component.{h,cc}):
AffineComponent, NaturalGradientAffineComponent, LinearComponent,
FixedAffineComponent, BlockAffineComponent, RepeatedAffineComponent and
NaturalGradientRepeatedAffineComponent.  TdnnComponent, an affine transform
of spliced frames, is in :mod:`.tdnn`.

The natural-gradient preconditioner (:class:`OnlineNaturalGradient`, in
:mod:`.natural_gradient`) is configured from the model file options (rank,
update period, history, alpha); its state is never written, so it restarts
from scratch whenever a model is read, exactly as in Kaldi.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ...blas import add_mat_mat, trace_mat_mat_t
from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine
from .base import (Component, Prop, UpdatableComponent, fmt_g, print_parameter_stats, randn,
                   register, reshape_rows)
from .natural_gradient import OnlineNaturalGradient, precondition_in_out
from .numeric import add_scaled_f32, row_sum, scale_arrays

# Property masks as plain ints, built once: properties() is asked for every
# component many times per minibatch, and IntFlag arithmetic costs ~1 us an op.
_PROPS_AFFINE = int(Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT | Prop.BACKPROP_ADDS)
_PROPS_LINEAR_ADDS = int(Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT
                         | Prop.PROPAGATE_ADDS | Prop.BACKPROP_ADDS)
_PROPS_FIXED_AFFINE = int(Prop.SIMPLE | Prop.BACKPROP_ADDS)
_PROPS_AFFINE_CONTIGUOUS = _PROPS_AFFINE | int(Prop.INPUT_CONTIGUOUS | Prop.OUTPUT_CONTIGUOUS)


def verbose_level() -> int:
    """Kaldi's GetVerboseLevel(); singular values appear in Info() at >= 2."""
    from ... import log

    return log.verbose_level()


def set_preconditioner(comp: Component, cfl: ConfigLine | None, r: KaldiReader | None,
                       pre: OnlineNaturalGradient, **options: Any) -> None:
    """Apply options to a preconditioner, turning Kaldi's asserts into our errors."""
    try:
        pre.configure(**options)
    except ValueError as e:
        if cfl is not None:
            raise comp.config_error(cfl, str(e)) from None
        if r is not None:
            raise r.error(f"{comp.type_name}: {e}") from None
        raise


def read_matrix_file(comp: Component, cfl: ConfigLine, filename: str) -> np.ndarray:
    """Read a Kaldi matrix (rxfilename: path, ``path:offset`` or ``cmd |``)."""
    import kaldiio

    try:
        mat = kaldiio.load_mat(filename)
    except Exception as e:  # noqa: BLE001 - any read failure is a config error
        raise comp.config_error(cfl, f"could not read matrix from '{filename}': {e}") from None
    mat = np.asarray(mat)
    if mat.ndim != 2:
        raise comp.config_error(cfl, f"'{filename}' does not hold a matrix")
    return np.ascontiguousarray(mat, dtype=np.float32)


def _dim_or_error(comp: Component, cfl: ConfigLine, key: str) -> int:
    value = cfl.get_int(key)
    if value is None:
        raise comp.config_error(cfl, f"bad initializer: '{key}' is required")
    return value


def _check_matrix_dims(comp: Component, cfl: ConfigLine) -> None:
    """With matrix=, input-dim/output-dim are optional but must then match."""
    input_dim = cfl.get_int("input-dim")
    if input_dim is not None and input_dim != comp.input_dim():
        raise comp.config_error(cfl, f"input-dim mismatch vs. matrix ({input_dim} vs "
                                     f"{comp.input_dim()})")
    output_dim = cfl.get_int("output-dim")
    if output_dim is not None and output_dim != comp.output_dim():
        raise comp.config_error(cfl, f"output-dim mismatch vs. matrix ({output_dim} vs "
                                     f"{comp.output_dim()})")


def _split_affine_matrix(comp: Component, cfl: ConfigLine,
                         mat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kaldi's convention: the last column of an affine matrix is the bias."""
    if mat.shape[1] < 2 or mat.shape[0] < 1:
        raise comp.config_error(cfl, f"matrix must have at least 1 row and 2 columns, "
                                     f"got {mat.shape[0]} x {mat.shape[1]}")
    linear = np.ascontiguousarray(mat[:, :-1], dtype=np.float32)
    bias = np.ascontiguousarray(mat[:, -1], dtype=np.float32)
    return linear, bias


def random_params(rows: int, cols: int, stddev: float) -> np.ndarray:
    return np.ascontiguousarray(randn(rows, cols) * np.float32(stddev), dtype=np.float32)


def random_bias(dim: int, stddev: float, mean: float = 0.0) -> np.ndarray:
    b = randn(dim) * np.float32(stddev)
    if mean != 0.0:
        b = b + np.float32(mean)
    return np.ascontiguousarray(b, dtype=np.float32)


def read_end_of_common(r: KaldiReader, comp: UpdatableComponent) -> None:
    """Kaldi's affine-family readers need <LearningRate> in the common part."""
    token = comp.read_updatable_common(r)
    if token != "":
        raise r.error(f"{comp.type_name}: expected <LearningRate>, got {token[:40]}")


def _add_arrays(alpha: float, pairs: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Kaldi's AddMat / AddVec (BLAS saxpy, fused multiply-adds), so that
    e.g. nnet3-combine's running averages (alpha 1/n) are Kaldi's to the bit."""
    for dst, src in pairs:
        add_scaled_f32(alpha, src, dst)


def check_rows(in_value: np.ndarray, out_value: np.ndarray) -> None:
    if in_value.shape[0] != out_value.shape[0]:
        raise ValueError(f"propagate: {in_value.shape[0]} input rows vs "
                         f"{out_value.shape[0]} output rows")


def bias_then_product(in_value: np.ndarray, linear_params: np.ndarray,
                      bias_params: np.ndarray, out_value: np.ndarray) -> None:
    """``out = in W^T + b`` in Kaldi's order (its CopyRowsFromVec, then
    AddMatMat with beta = 1): where the BLAS splits the inner dimension into
    blocks the bias is the first term of each sum, as in Kaldi, and no
    separate pass adds the bias afterwards."""
    check_rows(in_value, out_value)
    out_value[...] = bias_params
    add_mat_mat(1.0, in_value, linear_params.T, 1.0, out_value)


class AffineParamsMixin:
    """Parameter operations of components holding ``linear_params`` and
    ``bias_params`` (the bias may be empty, e.g. TdnnComponent use-bias=false).

    Listed first among the bases so that these override Component's defaults.
    ``add`` requires ``other`` to be an instance of ``_add_family`` (default:
    the class of ``self``), as Kaldi's dynamic_cast in each Add() does.
    """

    linear_params: np.ndarray
    bias_params: np.ndarray
    _add_family: ClassVar[type | None] = None

    def num_parameters(self) -> int:
        return int(self.linear_params.size + self.bias_params.size)

    def scale(self, alpha: float) -> None:
        scale_arrays(alpha, self.linear_params, self.bias_params)

    def add(self, alpha: float, other: Component) -> None:
        family = self._add_family or type(self)
        if not isinstance(other, family):
            raise TypeError(f"{family.type_name}.add: other is {other.type_name}")
        _add_arrays(alpha, [(self.linear_params, other.linear_params),
                            (self.bias_params, other.bias_params)])

    def perturb_params(self, stddev: float) -> None:
        self.linear_params += np.float32(stddev) * randn(*self.linear_params.shape)
        if self.bias_params.size:
            self.bias_params += np.float32(stddev) * randn(*self.bias_params.shape)

    def dot_product(self, other: "AffineParamsMixin") -> float:
        # Kaldi: TraceMatMat(linear, other linear, kTrans) + VecVec(bias, other bias);
        # float32 products, no float64 copies of the parameters.
        return (trace_mat_mat_t(self.linear_params, other.linear_params)
                + trace_mat_mat_t(self.bias_params, other.bias_params))

    def vectorize(self) -> np.ndarray:
        """Kaldi's Vectorize: the linear parameters row by row, then the bias."""
        return np.concatenate([self.linear_params.reshape(-1), self.bias_params])

    def unvectorize(self, params: np.ndarray) -> None:
        params = np.asarray(params, dtype=np.float32).reshape(-1)
        if params.shape[0] != self.num_parameters():
            raise ValueError("unvectorize: wrong number of parameters")
        n = self.linear_params.size
        self.linear_params[...] = params[:n].reshape(self.linear_params.shape)
        self.bias_params[...] = params[n:]


@register
class AffineComponent(AffineParamsMixin, UpdatableComponent):
    """Kaldi's AffineComponent: ``out = in W^T + b`` with trainable W and b."""

    type_name = "AffineComponent"

    def __init__(self) -> None:
        super().__init__()
        self.linear_params = np.zeros((0, 0), dtype=np.float32)
        self.bias_params = np.zeros((0,), dtype=np.float32)
        self.orthonormal_constraint = 0.0

    # -- dims, properties --------------------------------------------------
    def input_dim(self) -> int:
        return int(self.linear_params.shape[1])

    def output_dim(self) -> int:
        return int(self.linear_params.shape[0])

    def properties(self) -> int:
        return _PROPS_AFFINE

    # -- initialisation ----------------------------------------------------
    def init(self, input_dim: int, output_dim: int, param_stddev: float,
             bias_stddev: float, bias_mean: float = 0.0) -> None:
        """Random Gaussian initialisation (Kaldi's Init(input-dim, output-dim, ...))."""
        if not (output_dim > 0 and input_dim > 0 and param_stddev >= 0.0):
            raise ValueError(f"bad dims or param-stddev ({input_dim}, {output_dim}, "
                             f"{param_stddev})")
        self.linear_params = random_params(output_dim, input_dim, param_stddev)
        self.bias_params = random_bias(output_dim, bias_stddev, bias_mean)

    def set_params(self, bias: np.ndarray, linear: np.ndarray) -> None:
        linear = np.ascontiguousarray(linear, dtype=np.float32)
        bias = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
        if bias.shape[0] != linear.shape[0]:
            raise ValueError("set_params: bias dim must equal the number of rows of linear")
        self.linear_params, self.bias_params = linear, bias

    def resize(self, input_dim: int, output_dim: int) -> None:
        """Zero parameters of a new size; other configuration is kept."""
        if input_dim <= 0 or output_dim <= 0:
            raise ValueError("resize: dims must be positive")
        self.linear_params = np.zeros((output_dim, input_dim), dtype=np.float32)
        self.bias_params = np.zeros((output_dim,), dtype=np.float32)

    def _init_params_from_config(self, cfl: ConfigLine, read_bias_mean: bool,
                                 check_bias_stddev: bool) -> None:
        """matrix=FILE, or input-dim/output-dim with the random-init options."""
        matrix = cfl.get_str("matrix")
        if matrix is not None:
            mat = read_matrix_file(self, cfl, matrix)
            self.linear_params, self.bias_params = _split_affine_matrix(self, cfl, mat)
            _check_matrix_dims(self, cfl)
            return
        input_dim = _dim_or_error(self, cfl, "input-dim")
        output_dim = _dim_or_error(self, cfl, "output-dim")
        if input_dim <= 0 or output_dim <= 0:
            raise self.config_error(cfl, "input-dim and output-dim must be positive")
        param_stddev = cfl.get_float("param-stddev", 1.0 / math.sqrt(input_dim))
        bias_stddev = cfl.get_float("bias-stddev", 1.0)
        bias_mean = cfl.get_float("bias-mean", 0.0) if read_bias_mean else 0.0
        if not param_stddev >= 0.0 or (check_bias_stddev and not bias_stddev >= 0.0):
            raise self.config_error(cfl, "param-stddev and bias-stddev must be >= 0")
        self.init(input_dim, output_dim, param_stddev, bias_stddev, bias_mean)

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        self._init_params_from_config(cfl, read_bias_mean=False, check_bias_stddev=False)
        self.orthonormal_constraint = f32(cfl.get_float("orthonormal-constraint",
                                                        self.orthonormal_constraint))

    # -- I/O -------------------------------------------------------------
    def _read_params(self, r: KaldiReader) -> None:
        read_end_of_common(r, self)
        r.expect_token("<LinearParams>")
        self.linear_params = r.read_matrix()
        r.expect_token("<BiasParams>")
        self.bias_params = r.read_vector()
        if self.bias_params.shape[0] != self.linear_params.shape[0]:
            raise r.error(f"{self.type_name}: bias dim {self.bias_params.shape[0]} != "
                          f"output dim {self.linear_params.shape[0]}")

    def read(self, r: KaldiReader) -> None:
        self._read_params(r)
        if r.peek_char() == "I":
            # Old models wrote <IsGradient> here instead of in the common part.
            r.expect_token("<IsGradient>")
            self.is_gradient = r.read_bool()
        if r.peek_char() == "O":
            r.expect_token("<OrthonormalConstraint>")
            self.orthonormal_constraint = r.read_float()
        else:
            self.orthonormal_constraint = 0.0
        r.expect_token("</AffineComponent>")

    def _write_params(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<LinearParams>")
        w.write_matrix(self.linear_params)
        w.write_token("<BiasParams>")
        w.write_vector(self.bias_params)

    def write(self, w: KaldiWriter) -> None:
        self._write_params(w)
        if self.orthonormal_constraint != 0.0:
            w.write_token("<OrthonormalConstraint>")
            w.write_float(self.orthonormal_constraint)
        w.write_token("</AffineComponent>")

    # -- summary -----------------------------------------------------------
    def info(self) -> str:
        s = super().info()
        if self.orthonormal_constraint != 0.0:
            s += f", orthonormal-constraint={fmt_g(self.orthonormal_constraint)}"
        s += print_parameter_stats("linear-params", self.linear_params, False, True, True,
                                   verbose_level() >= 2)
        s += print_parameter_stats("bias", self.bias_params, True)
        return s

    # -- math --------------------------------------------------------------
    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> None:
        bias_then_product(in_value, self.linear_params, self.bias_params, out_value)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        # BACKPROP_ADDS: in_deriv is added to.  The input derivative comes
        # first so that it uses the parameters before any update of self.
        if in_deriv is not None:
            add_mat_mat(1.0, out_deriv, self.linear_params, 1.0, in_deriv)
        if isinstance(to_update, AffineComponent):
            if to_update.is_gradient:
                to_update.update_simple(in_value, out_deriv)
            else:
                to_update.update(debug_info, in_value, out_deriv)

    def update_simple(self, in_value: np.ndarray, out_deriv: np.ndarray) -> None:
        """Plain SGD step (or gradient accumulation when is_gradient)."""
        lr = np.float32(self.learning_rate)
        self.bias_params += lr * row_sum(out_deriv)
        add_mat_mat(float(lr), out_deriv.T, in_value, 1.0, self.linear_params)

    def update(self, debug_info: str, in_value: np.ndarray, out_deriv: np.ndarray) -> None:
        """The training update; subclasses precondition (natural gradient)."""
        self.update_simple(in_value, out_deriv)


@register
class NaturalGradientAffineComponent(AffineComponent):
    """AffineComponent trained with natural gradient (two preconditioners)."""

    type_name = "NaturalGradientAffineComponent"

    def __init__(self) -> None:
        super().__init__()
        self.preconditioner_in = OnlineNaturalGradient()
        self.preconditioner_out = OnlineNaturalGradient()

    def _set_ng_configs(self, cfl: ConfigLine | None, r: KaldiReader | None, rank_in: int,
                        rank_out: int, update_period: int, num_samples_history: float,
                        alpha: float) -> None:
        set_preconditioner(self, cfl, r, self.preconditioner_in, rank=rank_in,
                           update_period=update_period,
                           num_samples_history=num_samples_history, alpha=alpha)
        set_preconditioner(self, cfl, r, self.preconditioner_out, rank=rank_out,
                           update_period=update_period,
                           num_samples_history=num_samples_history, alpha=alpha)

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.is_gradient = False
        self.init_learning_rates_from_config(cfl)
        self._init_params_from_config(cfl, read_bias_mean=True, check_bias_stddev=True)
        self.orthonormal_constraint = f32(cfl.get_float("orthonormal-constraint", 0.0))
        num_samples_history = cfl.get_float("num-samples-history", 2000.0)
        alpha = cfl.get_float("alpha", 4.0)
        rank_in = cfl.get_int("rank-in", -1)
        rank_out = cfl.get_int("rank-out", -1)
        update_period = cfl.get_int("update-period", 4)
        if rank_in < 0:
            rank_in = min(20, (self.input_dim() + 1) // 2)
        if rank_out < 0:
            rank_out = min(80, (self.output_dim() + 1) // 2)
        self._set_ng_configs(cfl, None, rank_in, rank_out, update_period,
                             num_samples_history, alpha)

    def read(self, r: KaldiReader) -> None:
        self._read_params(r)
        r.expect_token("<RankIn>")
        rank_in = r.read_int32()
        r.expect_token("<RankOut>")
        rank_out = r.read_int32()
        if r.peek_char() == "O":
            r.expect_token("<OrthonormalConstraint>")
            self.orthonormal_constraint = r.read_float()
        else:
            self.orthonormal_constraint = 0.0
        r.expect_token("<UpdatePeriod>")
        update_period = r.read_int32()
        r.expect_token("<NumSamplesHistory>")
        num_samples_history = r.read_float()
        r.expect_token("<Alpha>")
        alpha = r.read_float()
        self._set_ng_configs(None, r, rank_in, rank_out, update_period,
                             num_samples_history, alpha)
        if r.peek_char() == "M":
            # <MaxChangePerSample>: an option removed long ago; ignored.
            r.expect_token("<MaxChangePerSample>")
            r.read_float()
        if r.peek_char() == "I":
            r.expect_token("<IsGradient>")
            self.is_gradient = r.read_bool()
        if r.peek_char() == "U":
            # Statistics of a short-lived max-change variant; read and dropped.
            r.expect_token("<UpdateCount>")
            r.read_double()
            r.expect_token("<ActiveScalingCount>")
            r.read_double()
            r.expect_token("<MaxChangeScaleStats>")
            r.read_double()
        token = r.read_token()
        # Kaldi accepts either the closing tag or (very old files) the opening one.
        if "NaturalGradientAffineComponent>" not in token:
            raise r.error(f"expected <NaturalGradientAffineComponent> or "
                          f"</NaturalGradientAffineComponent>, got {token[:40]}")

    def write(self, w: KaldiWriter) -> None:
        self._write_params(w)
        w.write_token("<RankIn>")
        w.write_int32(self.preconditioner_in.rank)
        w.write_token("<RankOut>")
        w.write_int32(self.preconditioner_out.rank)
        if self.orthonormal_constraint != 0.0:
            w.write_token("<OrthonormalConstraint>")
            w.write_float(self.orthonormal_constraint)
        w.write_token("<UpdatePeriod>")
        w.write_int32(self.preconditioner_in.update_period)
        w.write_token("<NumSamplesHistory>")
        w.write_float(self.preconditioner_in.num_samples_history)
        w.write_token("<Alpha>")
        w.write_float(self.preconditioner_in.alpha)
        w.write_token("</NaturalGradientAffineComponent>")

    def info(self) -> str:
        p_in, p_out = self.preconditioner_in, self.preconditioner_out
        return (super().info() + f", rank-in={p_in.rank}, rank-out={p_out.rank}"
                f", num-samples-history={fmt_g(p_in.num_samples_history)}"
                f", update-period={p_in.update_period}, alpha={fmt_g(p_in.alpha)}")

    def freeze_natural_gradient(self, freeze: bool) -> None:
        self.preconditioner_in.freeze(freeze)
        self.preconditioner_out.freeze(freeze)

    def consolidate_memory(self) -> None:
        """Nothing to do in NumPy (Kaldi re-allocates the preconditioner memory)."""

    def update(self, debug_info: str, in_value: np.ndarray, out_deriv: np.ndarray) -> None:
        # The bias is the weight of an extra input column of ones, so it is
        # preconditioned together with the linear part.
        lrate, in_temp, out_temp = precondition_in_out(
            self.preconditioner_in, self.preconditioner_out, in_value, out_deriv,
            self.learning_rate, append_ones=True)
        # Both products accumulate straight into the parameters (Kaldi's
        # AddMatVec / AddMatMat with beta = 1), reading column ranges of in_temp.
        cols = in_value.shape[1]
        add_mat_mat(float(lrate), out_temp.T, in_temp[:, cols:], 1.0, self.bias_params[:, None])
        add_mat_mat(float(lrate), out_temp.T, in_temp[:, :cols], 1.0, self.linear_params)


@register
class LinearComponent(UpdatableComponent):
    """Kaldi's LinearComponent: ``out += in W^T`` (no bias), natural gradient."""

    type_name = "LinearComponent"

    def __init__(self) -> None:
        super().__init__()
        self.params = np.zeros((0, 0), dtype=np.float32)
        self.orthonormal_constraint = 0.0
        self.use_natural_gradient = True
        self.preconditioner_in = OnlineNaturalGradient()
        self.preconditioner_out = OnlineNaturalGradient()

    @classmethod
    def from_params(cls, params: np.ndarray) -> "LinearComponent":
        """Kaldi's LinearComponent(const CuMatrix&) constructor and its defaults."""
        c = cls()
        c.params = np.ascontiguousarray(params, dtype=np.float32)
        c.preconditioner_in.configure(rank=40, update_period=4)
        c.preconditioner_out.configure(rank=80, update_period=4)
        return c

    def input_dim(self) -> int:
        return int(self.params.shape[1])

    def output_dim(self) -> int:
        return int(self.params.shape[0])

    def properties(self) -> int:
        return _PROPS_LINEAR_ADDS

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.is_gradient = False
        self.init_learning_rates_from_config(cfl)
        matrix = cfl.get_str("matrix")
        if matrix is not None:
            self.params = read_matrix_file(self, cfl, matrix)
            if self.params.shape[0] == 0:
                raise self.config_error(cfl, f"matrix '{matrix}' is empty")
            _check_matrix_dims(self, cfl)
        else:
            input_dim = _dim_or_error(self, cfl, "input-dim")
            output_dim = _dim_or_error(self, cfl, "output-dim")
            param_stddev = cfl.get_float("param-stddev",
                                         1.0 / math.sqrt(input_dim) if input_dim > 0 else 0.0)
            if not (output_dim > 0 and input_dim > 0 and param_stddev >= 0.0):
                raise self.config_error(cfl, "input-dim and output-dim must be positive and "
                                             "param-stddev >= 0")
            self.params = random_params(output_dim, input_dim, param_stddev)
        num_samples_history = cfl.get_float("num-samples-history", 2000.0)
        alpha = cfl.get_float("alpha", 4.0)
        rank_in = cfl.get_int("rank-in", -1)
        rank_out = cfl.get_int("rank-out", -1)
        update_period = cfl.get_int("update-period", 4)
        self.use_natural_gradient = cfl.get_bool("use-natural-gradient", True)
        if rank_in < 0:
            rank_in = min(20, (self.input_dim() + 1) // 2)
        if rank_out < 0:
            rank_out = min(80, (self.output_dim() + 1) // 2)
        self._set_ng_configs(cfl, None, rank_in, rank_out, update_period,
                             num_samples_history, alpha)
        self.orthonormal_constraint = f32(cfl.get_float("orthonormal-constraint", 0.0))

    def _set_ng_configs(self, cfl: ConfigLine | None, r: KaldiReader | None, rank_in: int,
                        rank_out: int, update_period: int, num_samples_history: float,
                        alpha: float) -> None:
        set_preconditioner(self, cfl, r, self.preconditioner_in, rank=rank_in,
                           update_period=update_period,
                           num_samples_history=num_samples_history, alpha=alpha)
        set_preconditioner(self, cfl, r, self.preconditioner_out, rank=rank_out,
                           update_period=update_period,
                           num_samples_history=num_samples_history, alpha=alpha)

    def read(self, r: KaldiReader) -> None:
        read_end_of_common(r, self)
        r.expect_token("<Params>")
        self.params = r.read_matrix()
        if r.peek_char() == "O":
            r.expect_token("<OrthonormalConstraint>")
            self.orthonormal_constraint = r.read_float()
        else:
            self.orthonormal_constraint = 0.0
        r.expect_token("<UseNaturalGradient>")
        self.use_natural_gradient = r.read_bool()
        r.expect_token("<RankInOut>")
        rank_in = r.read_int32()
        rank_out = r.read_int32()
        r.expect_token("<Alpha>")
        alpha = r.read_float()
        r.expect_token("<NumSamplesHistory>")
        num_samples_history = r.read_float()
        r.expect_token("<UpdatePeriod>")
        update_period = r.read_int32()
        self._set_ng_configs(None, r, rank_in, rank_out, update_period,
                             num_samples_history, alpha)
        r.expect_token("</LinearComponent>")

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<Params>")
        w.write_matrix(self.params)
        if self.orthonormal_constraint != 0.0:
            w.write_token("<OrthonormalConstraint>")
            w.write_float(self.orthonormal_constraint)
        w.write_token("<UseNaturalGradient>")
        w.write_bool(self.use_natural_gradient)
        w.write_token("<RankInOut>")
        w.write_int32(self.preconditioner_in.rank)
        w.write_int32(self.preconditioner_out.rank)
        w.write_token("<Alpha>")
        w.write_float(self.preconditioner_in.alpha)
        w.write_token("<NumSamplesHistory>")
        w.write_float(self.preconditioner_in.num_samples_history)
        w.write_token("<UpdatePeriod>")
        w.write_int32(self.preconditioner_in.update_period)
        w.write_token("</LinearComponent>")

    def info(self) -> str:
        s = super().info()
        s += print_parameter_stats("params", self.params, False, True, True,
                                   verbose_level() >= 2)
        if self.orthonormal_constraint != 0.0:
            s += f", orthonormal-constraint={fmt_g(self.orthonormal_constraint)}"
        p_in, p_out = self.preconditioner_in, self.preconditioner_out
        s += (f", use-natural-gradient={'true' if self.use_natural_gradient else 'false'}"
              f", rank-in={p_in.rank}, rank-out={p_out.rank}"
              f", num-samples-history={fmt_g(p_in.num_samples_history)}"
              f", update-period={p_in.update_period}, alpha={fmt_g(p_in.alpha)}")
        return s

    def num_parameters(self) -> int:
        return int(self.params.size)

    def scale(self, alpha: float) -> None:
        scale_arrays(alpha, self.params)

    def add(self, alpha: float, other: Component) -> None:
        if not isinstance(other, LinearComponent):
            raise TypeError(f"{self.type_name}.add: other is {other.type_name}")
        _add_arrays(alpha, [(self.params, other.params)])

    def perturb_params(self, stddev: float) -> None:
        self.params += np.float32(stddev) * randn(*self.params.shape)

    def dot_product(self, other: "LinearComponent") -> float:
        return trace_mat_mat_t(self.params, other.params)

    def vectorize(self) -> np.ndarray:
        return self.params.reshape(-1).copy()

    def unvectorize(self, params: np.ndarray) -> None:
        params = np.asarray(params, dtype=np.float32).reshape(-1)
        if params.shape[0] != self.num_parameters():
            raise ValueError("unvectorize: wrong number of parameters")
        self.params[...] = params.reshape(self.params.shape)

    def freeze_natural_gradient(self, freeze: bool) -> None:
        self.preconditioner_in.freeze(freeze)
        self.preconditioner_out.freeze(freeze)

    def consolidate_memory(self) -> None:
        """Nothing to do in NumPy."""

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> None:
        # PROPAGATE_ADDS: the caller has zeroed (or pre-filled) out_value.
        check_rows(in_value, out_value)
        add_mat_mat(1.0, in_value, self.params.T, 1.0, out_value)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None:
            add_mat_mat(1.0, out_deriv, self.params, 1.0, in_deriv)
        if not isinstance(to_update, LinearComponent):
            return
        if to_update.is_gradient:
            add_mat_mat(float(np.float32(to_update.learning_rate)), out_deriv.T, in_value, 1.0,
                        to_update.params)
            return
        # Kaldi preconditions here whatever use-natural-gradient says (the
        # flag is only stored and printed); kept for identical training.
        lrate, in_temp, out_temp = precondition_in_out(
            to_update.preconditioner_in, to_update.preconditioner_out, in_value, out_deriv,
            to_update.learning_rate, append_ones=False)
        add_mat_mat(float(lrate), out_temp.T, in_temp, 1.0, to_update.params)


@register
class FixedAffineComponent(Component):
    """A non-trainable affine transform (e.g. the LDA matrix of a recipe)."""

    type_name = "FixedAffineComponent"

    def __init__(self) -> None:
        self.linear_params = np.zeros((0, 0), dtype=np.float32)
        self.bias_params = np.zeros((0,), dtype=np.float32)

    @classmethod
    def from_affine(cls, c: AffineComponent) -> "FixedAffineComponent":
        """Kaldi's FixedAffineComponent(const AffineComponent&): freeze a layer."""
        ans = cls()
        ans.linear_params = c.linear_params.copy()
        ans.bias_params = c.bias_params.copy()
        return ans

    def init(self, mat: np.ndarray) -> None:
        """Parameters from an output-dim x (input-dim + 1) matrix, bias last."""
        mat = np.asarray(mat, dtype=np.float32)
        if mat.ndim != 2 or mat.shape[1] <= 1:
            raise ValueError("FixedAffineComponent needs a matrix with more than one column")
        self.linear_params = np.ascontiguousarray(mat[:, :-1])
        self.bias_params = np.ascontiguousarray(mat[:, -1])

    def input_dim(self) -> int:
        return int(self.linear_params.shape[1])

    def output_dim(self) -> int:
        return int(self.linear_params.shape[0])

    def properties(self) -> int:
        return _PROPS_FIXED_AFFINE

    def init_from_config(self, cfl: ConfigLine) -> None:
        # Two forms: matrix=<rxfilename>, or input-dim/output-dim with random
        # parameters (Kaldi allows that for testing).
        matrix = cfl.get_str("matrix")
        if matrix is not None:
            mat = read_matrix_file(self, cfl, matrix)
            if mat.shape[0] == 0:
                raise self.config_error(cfl, f"matrix '{matrix}' is empty")
            if mat.shape[1] <= 1:
                raise self.config_error(cfl, f"matrix '{matrix}' needs more than one column "
                                             "(the last one is the bias)")
            self.init(mat)
            return
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        if input_dim is None or output_dim is None or input_dim <= 0 or output_dim <= 0:
            raise self.config_error(cfl, "invalid initializer: need matrix=<rxfilename> or "
                                         "input-dim and output-dim")
        self.init(randn(output_dim, input_dim + 1))

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<LinearParams>")
        self.linear_params = r.read_matrix()
        r.expect_token("<BiasParams>")
        self.bias_params = r.read_vector()
        r.expect_token("</FixedAffineComponent>")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<FixedAffineComponent>")
        w.write_token("<LinearParams>")
        w.write_matrix(self.linear_params)
        w.write_token("<BiasParams>")
        w.write_vector(self.bias_params)
        w.write_token("</FixedAffineComponent>")

    def info(self) -> str:
        return (super().info() + print_parameter_stats("linear-params", self.linear_params)
                + print_parameter_stats("bias", self.bias_params, True))

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> None:
        bias_then_product(in_value, self.linear_params, self.bias_params, out_value)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        # Not trainable: only the (added) input derivative.
        if in_deriv is not None:
            in_deriv += out_deriv @ self.linear_params


@register
class BlockAffineComponent(AffineParamsMixin, UpdatableComponent):
    """Block-diagonal affine transform: ``num_blocks`` equal independent blocks.

    ``linear_params`` stacks the blocks vertically: it is output-dim x
    (input-dim / num-blocks); rows ``[b*R, (b+1)*R)`` (R = output-dim /
    num-blocks) act on input columns ``[b*C, (b+1)*C)``.
    """

    type_name = "BlockAffineComponent"

    def __init__(self) -> None:
        super().__init__()
        self.linear_params = np.zeros((0, 0), dtype=np.float32)
        self.bias_params = np.zeros((0,), dtype=np.float32)
        self.num_blocks = 1

    @classmethod
    def from_repeated(cls, rac: "RepeatedAffineComponent") -> "BlockAffineComponent":
        """Kaldi's BlockAffineComponent(const RepeatedAffineComponent&)."""
        ans = cls()
        for k in ("learning_rate", "learning_rate_factor", "is_gradient", "max_change",
                  "l2_regularize"):
            setattr(ans, k, getattr(rac, k))
        ans.num_blocks = rac.num_repeats
        ans.linear_params = np.ascontiguousarray(np.tile(rac.linear_params, (rac.num_repeats, 1)))
        ans.bias_params = np.ascontiguousarray(np.tile(rac.bias_params, rac.num_repeats))
        return ans

    def input_dim(self) -> int:
        return int(self.linear_params.shape[1]) * self.num_blocks

    def output_dim(self) -> int:
        return int(self.linear_params.shape[0])

    def properties(self) -> int:
        return _PROPS_AFFINE

    def init_from_config(self, cfl: ConfigLine) -> None:
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        num_blocks = cfl.get_int("num-blocks")
        if input_dim is None or output_dim is None or num_blocks is None:
            raise self.config_error(cfl, "invalid initializer: input-dim, output-dim and "
                                         "num-blocks are required")
        self.init_learning_rates_from_config(cfl)
        if not (input_dim > 0 and output_dim > 0 and num_blocks >= 1):
            raise self.config_error(cfl, "input-dim and output-dim must be positive and "
                                         "num-blocks >= 1")
        if output_dim % num_blocks != 0 or input_dim % num_blocks != 0:
            raise self.config_error(cfl, "num-blocks must divide input-dim and output-dim")
        param_stddev = cfl.get_float("param-stddev", 1.0 / math.sqrt(input_dim // num_blocks))
        bias_stddev = cfl.get_float("bias-stddev", 1.0)
        bias_mean = cfl.get_float("bias-mean", 0.0)
        if not (param_stddev >= 0.0 and bias_stddev >= 0.0):  # NaN too
            raise self.config_error(cfl, "param-stddev and bias-stddev must be >= 0")
        self.linear_params = random_params(output_dim, input_dim // num_blocks, param_stddev)
        self.bias_params = random_bias(output_dim, bias_stddev, bias_mean)
        self.num_blocks = num_blocks

    def read(self, r: KaldiReader) -> None:
        read_end_of_common(r, self)
        r.expect_token("<NumBlocks>")
        self.num_blocks = r.read_int32()
        r.expect_token("<LinearParams>")
        self.linear_params = r.read_matrix()
        r.expect_token("<BiasParams>")
        self.bias_params = r.read_vector()
        if r.peek_char() == "I":
            r.expect_token("<IsGradient>")
            self.is_gradient = r.read_bool()
        r.expect_token("</BlockAffineComponent>")
        if self.num_blocks < 1 or self.linear_params.shape[0] % self.num_blocks != 0:
            raise r.error(f"BlockAffineComponent: num-blocks {self.num_blocks} does not divide "
                          f"the {self.linear_params.shape[0]} rows")

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<NumBlocks>")
        w.write_int32(self.num_blocks)
        w.write_token("<LinearParams>")
        w.write_matrix(self.linear_params)
        w.write_token("<BiasParams>")
        w.write_vector(self.bias_params)
        w.write_token("</BlockAffineComponent>")

    def info(self) -> str:
        return (super().info() + f", num-blocks={self.num_blocks}"
                + print_parameter_stats("linear-params", self.linear_params)
                + print_parameter_stats("bias", self.bias_params, True))

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> None:
        check_rows(in_value, out_value)
        nb = self.num_blocks
        rows = in_value.shape[0]
        cols_in = self.linear_params.shape[1]
        rows_out = self.linear_params.shape[0] // nb
        x = in_value.reshape(rows, nb, cols_in).transpose(1, 0, 2)         # (nb, N, C)
        wt = self.linear_params.reshape(nb, rows_out, cols_in).transpose(0, 2, 1)  # (nb, C, R)
        y = np.matmul(x, wt)                                               # (nb, N, R)
        out_value[...] = self.bias_params
        out_value += y.transpose(1, 0, 2).reshape(rows, nb * rows_out)
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Any, in_deriv: np.ndarray | None) -> None:
        # Block b: out cols [b*R, (b+1)*R) <- in cols [b*C, (b+1)*C).
        nb = self.num_blocks
        rows = out_deriv.shape[0]
        cols_in = self.linear_params.shape[1]
        rows_out = self.linear_params.shape[0] // nb
        od = out_deriv.reshape(rows, nb, rows_out).transpose(1, 0, 2)          # (nb, N, R)
        if in_deriv is not None:
            w = self.linear_params.reshape(nb, rows_out, cols_in)              # (nb, R, C)
            in_deriv += np.matmul(od, w).transpose(1, 0, 2).reshape(rows, nb * cols_in)
        if isinstance(to_update, BlockAffineComponent):
            # No natural gradient for this type, even when not is_gradient.
            lr = np.float32(to_update.learning_rate)
            x = in_value.reshape(rows, nb, cols_in).transpose(1, 0, 2)         # (nb, N, C)
            grad = np.matmul(od.transpose(0, 2, 1), x)                          # (nb, R, C)
            to_update.linear_params += lr * grad.reshape(nb * rows_out, cols_in)
            to_update.bias_params += lr * out_deriv.sum(axis=0, dtype=np.float32)


@register
class RepeatedAffineComponent(AffineParamsMixin, UpdatableComponent):
    """One small affine block applied to ``num_repeats`` consecutive input chunks.

    Only that block is stored, so num_parameters() is not multiplied by
    num-repeats (as in Kaldi).
    """

    type_name = "RepeatedAffineComponent"

    def __init__(self) -> None:
        super().__init__()
        self.linear_params = np.zeros((0, 0), dtype=np.float32)
        self.bias_params = np.zeros((0,), dtype=np.float32)
        self.num_repeats = 1

    def input_dim(self) -> int:
        return int(self.linear_params.shape[1]) * self.num_repeats

    def output_dim(self) -> int:
        return int(self.linear_params.shape[0]) * self.num_repeats

    def properties(self) -> int:
        return _PROPS_AFFINE_CONTIGUOUS

    def set_natural_gradient_configs(self) -> None:
        """Hook for the natural-gradient subclass (nothing for plain SGD)."""

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        num_repeats = cfl.get_int("num-repeats")
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        if num_repeats is None or input_dim is None or output_dim is None:
            raise self.config_error(cfl, "bad initializer: num-repeats, input-dim and "
                                         "output-dim are required")
        if num_repeats <= 0 or input_dim <= 0 or output_dim <= 0:
            raise self.config_error(cfl, "num-repeats, input-dim and output-dim must be "
                                         "positive")
        if input_dim % num_repeats != 0:
            raise self.config_error(cfl, "num-repeats must divide input-dim")
        if output_dim % num_repeats != 0:
            raise self.config_error(cfl, "num-repeats must divide output-dim")
        param_stddev = cfl.get_float("param-stddev", 1.0 / math.sqrt(input_dim // num_repeats))
        bias_mean = cfl.get_float("bias-mean", 0.0)
        bias_stddev = cfl.get_float("bias-stddev", 0.0)
        if not param_stddev >= 0.0:  # NaN too
            raise self.config_error(cfl, "param-stddev must be >= 0")
        self.num_repeats = num_repeats
        self.linear_params = random_params(output_dim // num_repeats,
                                           input_dim // num_repeats, param_stddev)
        self.bias_params = random_bias(output_dim // num_repeats, bias_stddev, bias_mean)
        self.set_natural_gradient_configs()

    def read(self, r: KaldiReader) -> None:
        read_end_of_common(r, self)
        r.expect_token("<NumRepeats>")
        self.num_repeats = r.read_int32()
        r.expect_token("<LinearParams>")
        self.linear_params = r.read_matrix()
        r.expect_token("<BiasParams>")
        self.bias_params = r.read_vector()
        if r.peek_char() == "I":
            r.expect_token("<IsGradient>")
            self.is_gradient = r.read_bool()
        r.expect_token(self.closing_tag())
        if self.num_repeats < 1:
            raise r.error(f"{self.type_name}: bad num-repeats {self.num_repeats}")
        self.set_natural_gradient_configs()

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<NumRepeats>")
        w.write_int32(self.num_repeats)
        w.write_token("<LinearParams>")
        w.write_matrix(self.linear_params)
        w.write_token("<BiasParams>")
        w.write_vector(self.bias_params)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        return (super().info() + f", num-repeats={self.num_repeats}"
                + print_parameter_stats("linear-params", self.linear_params)
                + print_parameter_stats("bias", self.bias_params, True))

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> None:
        # Each row is num_repeats consecutive chunks; treat every chunk as a row.
        check_rows(in_value, out_value)
        rows = in_value.shape[0]
        block_in = self.linear_params.shape[1]
        x = np.ascontiguousarray(in_value).reshape(rows * self.num_repeats, block_in)
        y = x @ self.linear_params.T
        y += self.bias_params
        out_value[...] = y.reshape(rows, self.output_dim())
        return None

    def _reshaped(self, mat: np.ndarray, block_dim: int) -> np.ndarray:
        """Each row's num_repeats chunks as separate rows."""
        return np.ascontiguousarray(mat).reshape(mat.shape[0] * self.num_repeats, block_dim)

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Any, in_deriv: np.ndarray | None) -> None:
        block_in = self.linear_params.shape[1]
        block_out = self.linear_params.shape[0]
        od = self._reshaped(out_deriv, block_out)
        if in_deriv is not None:
            # INPUT_CONTIGUOUS: in_deriv is a contiguous matrix, reshape is a view.
            reshape_rows(in_deriv, block_in)[...] += od @ self.linear_params
        if isinstance(to_update, RepeatedAffineComponent):
            to_update.update(self._reshaped(in_value, block_in), od)

    def update(self, in_reshaped: np.ndarray, out_deriv_reshaped: np.ndarray) -> None:
        """SGD step from the reshaped (one chunk per row) input and derivative."""
        lr = np.float32(self.learning_rate)
        self.linear_params += lr * (out_deriv_reshaped.T @ in_reshaped)
        self.bias_params += lr * out_deriv_reshaped.sum(axis=0, dtype=np.float32)


@register
class NaturalGradientRepeatedAffineComponent(RepeatedAffineComponent):
    """RepeatedAffineComponent with a fixed input-side natural-gradient setup."""

    type_name = "NaturalGradientRepeatedAffineComponent"

    def __init__(self) -> None:
        super().__init__()
        self.preconditioner_in = OnlineNaturalGradient()

    def set_natural_gradient_configs(self) -> None:
        # Not configurable in Kaldi: rank min(40, block-input-dim / 2), >= 1.
        rank_in = 40
        block_input_dim = int(self.linear_params.shape[1])
        if rank_in > block_input_dim // 2:
            rank_in = block_input_dim // 2
        if rank_in < 1:
            rank_in = 1
        self.preconditioner_in.set_rank(rank_in)
        self.preconditioner_in.set_update_period(4)

    def consolidate_memory(self) -> None:
        """Nothing to do in NumPy."""

    def update(self, in_reshaped: np.ndarray, out_deriv_reshaped: np.ndarray) -> None:
        # Only the output side is preconditioned here: rows of the gradient
        # [W | b] (block-output x block-input + 1).  Used even when is_gradient
        # (Kaldi then skips only the preconditioning).
        block_in = self.linear_params.shape[1]
        deriv = np.empty((self.linear_params.shape[0], block_in + 1), dtype=np.float32)
        deriv[:, :block_in] = out_deriv_reshaped.T @ in_reshaped
        deriv[:, block_in] = out_deriv_reshaped.sum(axis=0, dtype=np.float32)
        scale = 1.0
        if not self.is_gradient:
            scale = self.preconditioner_in.precondition_directions(deriv)
        lr = np.float32(np.float32(self.learning_rate) * np.float32(scale))
        self.linear_params += lr * deriv[:, :block_in]
        self.bias_params += lr * deriv[:, block_in]
