"""Convolution components.

* ``TimeHeightConvolutionComponent`` (Kaldi's nnet-convolutional-component):
  2-D convolution over time (the 't' of the Indexes) and height; a
  non-simple component whose structure is a :class:`ConvolutionModel`.
* ``ConvolutionComponent`` and ``MaxpoolingComponent`` (Kaldi's
  nnet-combined-component): the older, simple (frame-by-frame) 2-D
  convolution and 3-D max-pooling over a vectorised x/y/z tensor.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, open_kaldi_object
from ...log import warn
from ..config_line import ConfigLine, int32_error_detail, parse_int32
from ..index import Index
from .base import (Component, Prop, UpdatableComponent, fmt_g, print_parameter_stats, randn,
                   register)
from .convolution_model import (ConvolutionComputation, ConvolutionModel,
                                compile_convolution_computation,
                                compile_reordered_convolution_computation, convolve_backward_data,
                                convolve_backward_params, convolve_forward)
from .natural_gradient import OnlineNaturalGradient, cached_preconditioner
from .numeric import add_scaled_f32, scale_arrays


def _split_ints(cfl: ConfigLine, comp: Component, text: str, sep: str, what: str) -> list[int]:
    """Kaldi's SplitStringToIntegers (empty pieces are an error)."""
    out = []
    for p in text.split(sep):
        parsed = parse_int32(p)
        if parsed is None:
            raise comp.config_error(cfl, f"bad value {what}={text} "
                                         f"({p.strip()}: {int32_error_detail(p)})")
        out.append(parsed)
    return out


def _is_sorted_uniq(v: list) -> bool:
    return all(a < b for a, b in zip(v, v[1:]))


@dataclass
class TimeHeightConvolutionPrecomputedIndexes:
    """Kaldi's TimeHeightConvolutionComponent::PrecomputedIndexes."""

    computation: ConvolutionComputation

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<TimeHeightConvolutionComponentPrecomputedIndexes>")
        w.write_token("<Computation>")
        self.computation.write(w)
        w.write_token("</TimeHeightConvolutionComponentPrecomputedIndexes>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens("<TimeHeightConvolutionComponentPrecomputedIndexes>",
                                   "<Computation>")
        self.computation = ConvolutionComputation()
        self.computation.read(r)
        r.expect_token("</TimeHeightConvolutionComponentPrecomputedIndexes>")


@register
class TimeHeightConvolutionComponent(UpdatableComponent):
    """Kaldi's TimeHeightConvolutionComponent: 2-D convolution over time and height (the
    feature axis), with filters given by time/height offsets; the input and output are
    height-major blocks of num-filters-in / num-filters-out."""

    type_name = "TimeHeightConvolutionComponent"

    def __init__(self) -> None:
        super().__init__()
        self.model = ConvolutionModel()
        self.linear_params = np.zeros((0, 0), dtype=np.float32)
        self.bias_params = np.zeros(0, dtype=np.float32)
        self.max_memory_mb = 200.0
        self.use_natural_gradient = True
        # natural-gradient settings (Kaldi keeps them in its two
        # OnlineNaturalGradient objects; only these values are stored).
        self.rank_in = 20
        self.rank_out = 80
        self.alpha_in = 4.0
        self.alpha_out = 4.0
        self.num_minibatches_history = 4.0
        # derived from the model
        self.all_time_offsets: list[int] = []
        self.time_offset_required: list[bool] = []

    # -- dims and flags --------------------------------------------------
    def input_dim(self) -> int:
        return self.model.input_dim()

    def output_dim(self) -> int:
        return self.model.output_dim()

    def properties(self) -> int:
        return (Prop.UPDATABLE | Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS
                | Prop.BACKPROP_NEEDS_INPUT | Prop.INPUT_CONTIGUOUS | Prop.OUTPUT_CONTIGUOUS)

    def num_parameters(self) -> int:
        return int(self.linear_params.size + self.bias_params.size)

    def compute_derived(self) -> None:
        self.all_time_offsets = list(self.model.all_time_offsets)
        self.time_offset_required = [t in self.model.required_time_offsets
                                     for t in self.all_time_offsets]

    # -- configuration -----------------------------------------------------
    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        m = ConvolutionModel()
        nfi = cfl.get_int("num-filters-in")
        nfo = cfl.get_int("num-filters-out")
        hi = cfl.get_int("height-in")
        ho = cfl.get_int("height-out")
        if nfi is None or nfo is None or hi is None or ho is None:
            raise self.config_error(cfl, "expected all the values num-filters-in, "
                                         "num-filters-out, height-in, height-out to be defined")
        m.num_filters_in, m.num_filters_out, m.height_in, m.height_out = nfi, nfo, hi, ho
        required = cfl.get_str("required-time-offsets", "undef")
        m.height_subsample_out = cfl.get_int("height-subsample-out", 1)
        self.max_memory_mb = float(np.float32(cfl.get_float("max-memory-mb", 200.0)))
        if not self.max_memory_mb > 0.0:
            raise self.config_error(cfl, "max-memory-mb must be > 0")

        offsets_str = cfl.get_str("offsets")
        if offsets_str is not None:
            offsets = []
            for piece in offsets_str.split(";"):
                pair = _split_ints(cfl, self, piece, ",", "offsets")
                if len(pair) != 2:
                    raise self.config_error(cfl, f"bad config value offsets={offsets_str}")
                offsets.append((pair[0], pair[1]))
            offsets.sort()
            if not offsets or not _is_sorted_uniq(offsets):
                raise self.config_error(cfl, "error in offsets: probably repeated offset, "
                                             f"offsets={offsets_str}")
        else:
            h_str = cfl.get_str("height-offsets")
            t_str = cfl.get_str("time-offsets") if h_str is not None else None
            if h_str is None or t_str is None:
                raise self.config_error(cfl, "expected either 'offsets', or both "
                                             "'height-offsets' and 'time-offsets', to be defined")
            h_vec = _split_ints(cfl, self, h_str, ",", "height-offsets")
            t_vec = _split_ints(cfl, self, t_str, ",", "time-offsets")
            if not h_vec or not _is_sorted_uniq(h_vec) or not t_vec or not _is_sorted_uniq(t_vec):
                raise self.config_error(cfl, "time-offsets and height-offsets must be "
                                             "nonempty, sorted and unique")
            offsets = [(t, h) for t in t_vec for h in h_vec]
        m.offsets = offsets

        if required == "undef":
            m.required_time_offsets = {t for t, _ in offsets}
        else:
            req = _split_ints(cfl, self, required, ",", "required-time-offsets")
            if not req or not _is_sorted_uniq(req):
                raise self.config_error(cfl, "formatting problem in required-time-offsets")
            m.required_time_offsets = set(req)
        m.compute_derived()
        problem = m.check(False, True)
        if problem:
            raise self.config_error(cfl, f"parameters do not make sense: {problem}")
        if m.check(True, True):
            warn("There are input heights unused in TimeHeightConvolutionComponent; consider "
                 "increasing output height or decreasing height of preceding layer."
                 + cfl.whole_line)
        self.model = m

        param_stddev = cfl.get_float("param-stddev", -1.0)
        bias_stddev = cfl.get_float("bias-stddev", 0.0)
        init_unit = cfl.get_bool("init-unit", False)
        if param_stddev < 0.0:
            param_stddev = 1.0 / math.sqrt(m.num_filters_in * len(m.offsets))
        rows, cols = m.param_rows(), m.param_cols()
        if not init_unit:
            self.linear_params = randn(rows, cols) * np.float32(param_stddev)
        else:
            self.linear_params = np.zeros((rows, cols), dtype=np.float32)
            self._init_unit(cfl)
        self.bias_params = randn(m.num_filters_out) * np.float32(bias_stddev)

        self.use_natural_gradient = cfl.get_bool("use-natural-gradient", True)
        rank_in = cfl.get_int("rank-in", -1)
        rank_out = cfl.get_int("rank-out", -1)
        self.alpha_in = float(np.float32(cfl.get_float("alpha-in", 4.0)))
        self.alpha_out = float(np.float32(cfl.get_float("alpha-out", 4.0)))
        self.num_minibatches_history = float(np.float32(
            cfl.get_float("num-minibatches-history", 4.0)))
        dim_in, dim_out = cols + 1, rows
        self.rank_in = rank_in if rank_in >= 0 else min(80, (dim_in + 1) // 2)
        self.rank_out = rank_out if rank_out >= 0 else min(80, (dim_out + 1) // 2)
        self.compute_derived()

    def _init_unit(self, cfl: ConfigLine) -> None:
        m = self.model
        if m.num_filters_in != m.num_filters_out:
            raise self.config_error(cfl, "you cannot specify init-unit if num-filters-in "
                                         "and num-filters-out differ")
        if (0, 0) not in m.offsets:
            raise self.config_error(cfl, "you cannot specify init-unit if the model does not "
                                         "have the offset (0, 0)")
        start = m.offsets.index((0, 0)) * m.num_filters_in
        block = self.linear_params[:, start:start + m.num_filters_in]
        block[np.diag_indices(m.num_filters_in)] += 1.0

    # -- I/O -------------------------------------------------------------------
    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<Model>")
        self.model.write(w)
        w.write_token("<LinearParams>")
        w.write_matrix(self.linear_params)
        w.write_token("<BiasParams>")
        w.write_vector(self.bias_params)
        w.write_token("<MaxMemoryMb>")
        w.write_float(self.max_memory_mb)
        w.write_token("<UseNaturalGradient>")
        w.write_bool(self.use_natural_gradient)
        w.write_token("<NumMinibatchesHistory>")
        w.write_float(self.num_minibatches_history)
        w.write_token("<AlphaInOut>")
        w.write_float(self.alpha_in)
        w.write_float(self.alpha_out)
        w.write_token("<RankInOut>")
        w.write_int32(self.rank_in)
        w.write_int32(self.rank_out)
        w.write_token(self.closing_tag())

    def read(self, r: KaldiReader) -> None:
        token = self.read_updatable_common(r)
        if token == "":
            r.expect_token("<Model>")
        elif token != "<Model>":
            raise r.error(f"{self.type_name}: expected <Model>, got {token[:40]}")
        self.model = ConvolutionModel()
        self.model.read(r)
        r.expect_token("<LinearParams>")
        self.linear_params = r.read_matrix()
        r.expect_token("<BiasParams>")
        self.bias_params = r.read_vector()
        r.expect_token("<MaxMemoryMb>")
        self.max_memory_mb = r.read_float()
        r.expect_token("<UseNaturalGradient>")
        self.use_natural_gradient = r.read_bool()
        r.expect_token("<NumMinibatchesHistory>")
        self.num_minibatches_history = r.read_float()
        r.expect_token("<AlphaInOut>")
        self.alpha_in = r.read_float()
        self.alpha_out = r.read_float()
        r.expect_token("<RankInOut>")
        self.rank_in = r.read_int32()
        self.rank_out = r.read_int32()
        r.expect_token(self.closing_tag())
        self.compute_derived()
        m = self.model
        if (self.bias_params.shape[0] != m.num_filters_out
                or self.linear_params.shape != (m.param_rows(), m.param_cols())):
            raise r.error(f"{self.type_name}: parameter dimensions do not match the model")

    def info(self) -> str:
        s = super().info() + " " + self.model.info()
        s += print_parameter_stats("filter-params", self.linear_params)
        s += print_parameter_stats("bias-params", self.bias_params, include_mean=True)
        s += (f", num-params={self.num_parameters()}, max-memory-mb={fmt_g(self.max_memory_mb)}"
              f", use-natural-gradient={int(self.use_natural_gradient)}")
        if self.use_natural_gradient:
            s += (f", num-minibatches-history={fmt_g(self.num_minibatches_history)}"
                  f", rank-in={self.rank_in}, rank-out={self.rank_out}"
                  f", alpha={fmt_g(self.alpha_in)}")
        return s

    # -- parameters ------------------------------------------------------------
    def scale(self, alpha: float) -> None:
        scale_arrays(alpha, self.linear_params, self.bias_params)

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, TimeHeightConvolutionComponent)
        add_scaled_f32(alpha, other.linear_params, self.linear_params)
        add_scaled_f32(alpha, other.bias_params, self.bias_params)

    def dot_product(self, other: "TimeHeightConvolutionComponent") -> float:
        return float(np.vdot(self.linear_params.astype(np.float64), other.linear_params)
                     + np.dot(self.bias_params.astype(np.float64), other.bias_params))

    def vectorize(self) -> np.ndarray:
        return np.concatenate([self.linear_params.reshape(-1), self.bias_params])

    def unvectorize(self, params: np.ndarray) -> None:
        n = self.linear_params.size
        self.linear_params[...] = params[:n].reshape(self.linear_params.shape)
        self.bias_params[...] = params[n:]

    # -- compiler hooks ------------------------------------------------------
    def get_input_indexes(self, misc_info, output_index: tuple) -> list[Index]:
        n, t, x = output_index
        return [Index(n, t + off, x) for off in self.all_time_offsets]

    def is_computable(self, misc_info, output_index: tuple,
                      input_index_set) -> tuple[bool, list[Index]]:
        n, t, x = output_index
        used = []
        for off, required in zip(self.all_time_offsets, self.time_offset_required):
            ix = Index(n, t + off, x)
            if ix in input_index_set:
                used.append(ix)
            elif required:
                return False, []
        return True, used

    def reorder_indexes(self, input_indexes: list[tuple], output_indexes: list[tuple]
                        ) -> tuple[list[Index], list[Index]]:
        _, new_in, new_out = compile_convolution_computation(
            self.model, input_indexes, output_indexes, self.max_memory_mb)
        return new_in, new_out

    def precompute_indexes(self, misc_info, input_indexes: list[tuple],
                           output_indexes: list[tuple], need_backprop: bool
                           ) -> TimeHeightConvolutionPrecomputedIndexes:
        # (Array form of Kaldi's check that reordering leaves the lists alone.)
        try:
            cc = compile_reordered_convolution_computation(
                self.model, input_indexes, output_indexes, self.max_memory_mb)
        except ValueError as e:
            raise ValueError(f"{self.type_name}: {e}") from None
        return TimeHeightConvolutionPrecomputedIndexes(cc)

    # -- math -----------------------------------------------------------------
    def propagate(self, indexes: TimeHeightConvolutionPrecomputedIndexes, in_value: np.ndarray,
                  out_value: np.ndarray) -> None:
        m = self.model
        # the bias is set (not added); the convolution adds on top of it.
        out_value[...] = np.tile(self.bias_params, m.height_out)[None, :]
        convolve_forward(indexes.computation, in_value, self.linear_params, out_value)
        return None

    def backprop(self, debug_info: str, indexes: TimeHeightConvolutionPrecomputedIndexes,
                 in_value: np.ndarray | None, out_value, out_deriv: np.ndarray, memo,
                 to_update, in_deriv: np.ndarray | None) -> None:
        if not isinstance(indexes, TimeHeightConvolutionPrecomputedIndexes):
            raise TypeError(f"{self.type_name}.backprop needs its precomputed indexes")
        cc = indexes.computation
        if in_deriv is not None:      # BACKPROP_ADDS
            convolve_backward_data(cc, self.linear_params, out_deriv, in_deriv)
        if to_update is None:
            return
        if not isinstance(to_update, TimeHeightConvolutionComponent):
            raise TypeError(f"{self.type_name}.backprop: to_update is {to_update.type_name}")
        if to_update.learning_rate == 0.0:
            return
        nfo = self.model.num_filters_out
        od = np.ascontiguousarray(out_deriv)
        bias_deriv = od.reshape(-1, nfo).sum(axis=0, dtype=np.float32)
        lr = np.float32(to_update.learning_rate)
        if to_update.is_gradient or not to_update.use_natural_gradient:
            to_update.bias_params += lr * bias_deriv
            convolve_backward_params(cc, in_value, od, to_update.learning_rate,
                                     to_update.linear_params)
            return
        # Natural gradient on [W | b] (filters-out x params-cols + 1): rows
        # with the input-side preconditioner, columns with the output side.
        cols = to_update.linear_params.shape[1]
        params_deriv = np.zeros((to_update.linear_params.shape[0], cols + 1), dtype=np.float32)
        params_deriv[:, cols] = bias_deriv
        convolve_backward_params(cc, in_value, od, 1.0, params_deriv[:, :cols])
        pre_in, pre_out = to_update.preconditioners()
        scale1 = pre_in.precondition_directions(params_deriv)
        deriv_t = np.ascontiguousarray(params_deriv.T)
        scale2 = pre_out.precondition_directions(deriv_t)
        local_lr = np.float32(lr * np.float32(scale1) * np.float32(scale2))
        to_update.linear_params += local_lr * deriv_t[:cols].T
        to_update.bias_params += local_lr * deriv_t[cols]

    def preconditioners(self) -> tuple[OnlineNaturalGradient, OnlineNaturalGradient]:
        """(input side, output side), made on first use from the stored options."""
        pre_in = cached_preconditioner(self, "preconditioner_in", rank=self.rank_in,
                                       alpha=self.alpha_in,
                                       num_minibatches_history=self.num_minibatches_history)
        pre_out = cached_preconditioner(self, "preconditioner_out", rank=self.rank_out,
                                        alpha=self.alpha_out,
                                        num_minibatches_history=self.num_minibatches_history)
        return pre_in, pre_out

    def perturb_params(self, stddev: float) -> None:
        self.linear_params += np.float32(stddev) * randn(*self.linear_params.shape)
        self.bias_params += np.float32(stddev) * randn(*self.bias_params.shape)

    def freeze_natural_gradient(self, freeze: bool) -> None:
        for pre in self.preconditioners():
            pre.freeze(freeze)


# ---------------------------------------------------------------------------
# The older, simple 2-D convolution and 3-D max-pooling.

K_YZX = 0
K_ZYX = 1


@register
class ConvolutionComponent(UpdatableComponent):
    """Kaldi's (older) ConvolutionComponent: 2-D convolution of one frame's x-y-z input
    patches (filt-x/y-dim, filt-x/y-step) with num-filters filters."""

    type_name = "ConvolutionComponent"

    def __init__(self) -> None:
        super().__init__()
        self.input_x_dim = 0
        self.input_y_dim = 0
        self.input_z_dim = 0
        self.filt_x_dim = 0
        self.filt_y_dim = 0
        self.filt_x_step = 0
        self.filt_y_step = 0
        self.input_vectorization = K_ZYX
        self.filter_params = np.zeros((0, 0), dtype=np.float32)
        self.bias_params = np.zeros(0, dtype=np.float32)

    def input_dim(self) -> int:
        return self.input_x_dim * self.input_y_dim * self.input_z_dim

    def _num_steps(self) -> tuple[int, int]:
        return (1 + (self.input_x_dim - self.filt_x_dim) // self.filt_x_step,
                1 + (self.input_y_dim - self.filt_y_dim) // self.filt_y_step)

    def output_dim(self) -> int:
        nx, ny = self._num_steps()
        return nx * ny * self.filter_params.shape[0]

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.UPDATABLE | Prop.BACKPROP_NEEDS_INPUT | Prop.BACKPROP_ADDS
                | Prop.PROPAGATE_ADDS)

    def num_parameters(self) -> int:
        return (self.filter_params.shape[1] + 1) * self.filter_params.shape[0]

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        names = ("input-x-dim", "input-y-dim", "input-z-dim", "filt-x-dim", "filt-y-dim",
                 "filt-x-step", "filt-y-step")
        vals = [cfl.get_int(k) for k in names]
        if any(v is None for v in vals):
            raise self.config_error(cfl, "bad initializer: all of " + ", ".join(names)
                                    + " are required")
        order = cfl.get_str("input-vectorization-order", "zyx")
        if order == "zyx":
            vec = K_ZYX
        elif order == "yzx":
            vec = K_YZX
        else:
            raise self.config_error(cfl, f"unknown or unsupported input vectorization order "
                                         f"{order}; accepted candidates are 'yzx' and 'zyx'")
        (self.input_x_dim, self.input_y_dim, self.input_z_dim, self.filt_x_dim,
         self.filt_y_dim, self.filt_x_step, self.filt_y_step) = vals
        self.input_vectorization = vec
        # Kaldi does not check these (it would divide by zero or assert later).
        if any(v <= 0 for v in vals):
            raise self.config_error(cfl, "bad initializer: " + ", ".join(names)
                                    + " must all be positive")
        if self.filt_x_dim > self.input_x_dim or self.filt_y_dim > self.input_y_dim:
            raise self.config_error(cfl, "bad initializer: the filter is larger than the input "
                                         f"(filt-x-dim={self.filt_x_dim}, input-x-dim="
                                         f"{self.input_x_dim}, filt-y-dim={self.filt_y_dim}, "
                                         f"input-y-dim={self.input_y_dim})")
        if (self.filt_x_step <= 0 or self.filt_y_step <= 0
                or (self.input_x_dim - self.filt_x_dim) % self.filt_x_step != 0
                or (self.input_y_dim - self.filt_y_dim) % self.filt_y_step != 0):
            raise self.config_error(cfl, "filter dims and steps do not fit the input dims")
        filter_dim = self.filt_x_dim * self.filt_y_dim * self.input_z_dim
        matrix = cfl.get_str("matrix")
        if matrix is not None:
            mat = open_kaldi_object(matrix).read_matrix()
            if mat.shape[1] != filter_dim + 1:
                raise self.config_error(cfl, f"matrix in {matrix} has {mat.shape[1]} columns, "
                                             f"expected {filter_dim + 1}")
            self.filter_params = np.ascontiguousarray(mat[:, :filter_dim])
            self.bias_params = np.ascontiguousarray(mat[:, filter_dim])
            return
        num_filters = cfl.get_int("num-filters")
        if num_filters is None or num_filters < 0:
            raise self.config_error(cfl, "bad initializer: num-filters is required "
                                         "(and must not be negative)")
        param_stddev = cfl.get_float("param-stddev", 1.0 / math.sqrt(filter_dim))
        bias_stddev = cfl.get_float("bias-stddev", 1.0)
        if not (param_stddev >= 0.0 and bias_stddev >= 0.0):  # NaN too
            raise self.config_error(cfl, "param-stddev and bias-stddev must be >= 0")
        self.filter_params = randn(num_filters, filter_dim) * np.float32(param_stddev)
        self.bias_params = randn(num_filters) * np.float32(bias_stddev)

    _INT_FIELDS = (("<InputXDim>", "input_x_dim"), ("<InputYDim>", "input_y_dim"),
                   ("<InputZDim>", "input_z_dim"), ("<FiltXDim>", "filt_x_dim"),
                   ("<FiltYDim>", "filt_y_dim"), ("<FiltXStep>", "filt_x_step"),
                   ("<FiltYStep>", "filt_y_step"), ("<InputVectorization>",
                                                    "input_vectorization"))

    def read(self, r: KaldiReader) -> None:
        token = self.read_updatable_common(r)
        for i, (tok, attr) in enumerate(self._INT_FIELDS):
            if i == 0 and token != "":
                if token != tok:
                    raise r.error(f"{self.type_name}: expected {tok}, got {token[:40]}")
            else:
                r.expect_token(tok)
            setattr(self, attr, r.read_int32())
        r.expect_token("<FilterParams>")
        self.filter_params = r.read_matrix()
        r.expect_token("<BiasParams>")
        self.bias_params = r.read_vector()
        tok = r.read_token()
        if tok == "<IsGradient>":
            self.is_gradient = r.read_bool()
            r.expect_token(self.closing_tag())
        elif tok == self.closing_tag():
            self.is_gradient = False
        else:
            raise r.error(f"{self.type_name}: expected {self.closing_tag()}, got {tok[:40]}")

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        for tok, attr in self._INT_FIELDS:
            w.write_token(tok)
            w.write_int32(getattr(self, attr))
        w.write_token("<FilterParams>")
        w.write_matrix(self.filter_params)
        w.write_token("<BiasParams>")
        w.write_vector(self.bias_params)
        w.write_token("<IsGradient>")
        w.write_bool(self.is_gradient)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = (super().info() + f", input-x-dim={self.input_x_dim}, input-y-dim={self.input_y_dim}"
             f", input-z-dim={self.input_z_dim}, filt-x-dim={self.filt_x_dim}"
             f", filt-y-dim={self.filt_y_dim}, filt-x-step={self.filt_x_step}"
             f", filt-y-step={self.filt_y_step}"
             f", input-vectorization={self.input_vectorization}"
             f", num-filters={self.filter_params.shape[0]}")
        s += print_parameter_stats("filter-params", self.filter_params)
        s += print_parameter_stats("bias-params", self.bias_params, include_mean=True)
        return s

    def scale(self, alpha: float) -> None:
        scale_arrays(alpha, self.filter_params, self.bias_params)

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, ConvolutionComponent)
        add_scaled_f32(alpha, other.filter_params, self.filter_params)
        add_scaled_f32(alpha, other.bias_params, self.bias_params)

    def dot_product(self, other: "ConvolutionComponent") -> float:
        return float(np.vdot(self.filter_params.astype(np.float64), other.filter_params)
                     + np.dot(self.bias_params.astype(np.float64), other.bias_params))

    def vectorize(self) -> np.ndarray:
        return np.concatenate([self.filter_params.reshape(-1), self.bias_params])

    def unvectorize(self, params: np.ndarray) -> None:
        n = self.filter_params.size
        self.filter_params[...] = params[:n].reshape(self.filter_params.shape)
        self.bias_params[...] = params[n:]

    def patch_column_map(self) -> np.ndarray:
        """Input column of each (patch, filter-x, filter-y, z) position."""
        nx, ny = self._num_steps()
        x_step = np.arange(nx)[:, None, None, None, None]
        y_step = np.arange(ny)[None, :, None, None, None]
        fx = np.arange(self.filt_x_dim)[None, None, :, None, None]
        fy = np.arange(self.filt_y_dim)[None, None, None, :, None]
        z = np.arange(self.input_z_dim)[None, None, None, None, :]
        x = x_step * self.filt_x_step + fx
        y = y_step * self.filt_y_step + fy
        yz = self.input_y_dim * self.input_z_dim
        if self.input_vectorization == K_ZYX:
            cols = yz * x + self.input_z_dim * y + z
        else:
            cols = yz * x + self.input_y_dim * z + y
        return cols.reshape(-1)

    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray) -> None:
        nx, ny = self._num_steps()
        num_filters, filter_dim = self.filter_params.shape
        patches = in_value[:, self.patch_column_map()].reshape(-1, nx * ny, filter_dim)
        result = patches @ self.filter_params.T + self.bias_params
        out_value += result.reshape(in_value.shape[0], nx * ny * num_filters)
        return None

    def backprop(self, debug_info: str, indexes, in_value: np.ndarray | None, out_value,
                 out_deriv: np.ndarray, memo, to_update, in_deriv: np.ndarray | None) -> None:
        # One dot product per (patch, filter): the derivative of each patch is
        # od_patch @ W, scattered back (added) onto the input columns.
        nx, ny = self._num_steps()
        num_filters, filter_dim = self.filter_params.shape
        rows = out_deriv.shape[0]
        od = out_deriv.reshape(rows, nx * ny, num_filters)
        if in_deriv is not None:
            patch_derivs = (od @ self.filter_params).reshape(rows, -1)
            np.add.at(in_deriv, (slice(None), self.patch_column_map()), patch_derivs)
        if isinstance(to_update, ConvolutionComponent):
            # Plain SGD (Kaldi has no natural gradient for this type).
            patches = in_value[:, self.patch_column_map()].reshape(rows, nx * ny, filter_dim)
            filters_grad = np.einsum("rpf,rpd->fd", od, patches, dtype=np.float32)
            bias_grad = od.sum(axis=(0, 1), dtype=np.float32)
            lr = np.float32(to_update.learning_rate)
            to_update.filter_params += lr * filters_grad
            to_update.bias_params += lr * bias_grad

    def perturb_params(self, stddev: float) -> None:
        self.filter_params += np.float32(stddev) * randn(*self.filter_params.shape)
        self.bias_params += np.float32(stddev) * randn(*self.bias_params.shape)


@register
class MaxpoolingComponent(Component):
    """Kaldi's MaxpoolingComponent: the maximum over pools of size pool-x/y/z-size taken at
    steps pool-x/y/z-step of one frame's x-y-z input."""

    type_name = "MaxpoolingComponent"

    _FIELDS = (("<InputXDim>", "input_x_dim"), ("<InputYDim>", "input_y_dim"),
               ("<InputZDim>", "input_z_dim"), ("<PoolXSize>", "pool_x_size"),
               ("<PoolYSize>", "pool_y_size"), ("<PoolZSize>", "pool_z_size"),
               ("<PoolXStep>", "pool_x_step"), ("<PoolYStep>", "pool_y_step"),
               ("<PoolZStep>", "pool_z_step"))

    def __init__(self) -> None:
        for _, attr in self._FIELDS:
            setattr(self, attr, 0)

    def _num_pools(self) -> tuple[int, int, int]:
        return (1 + (self.input_x_dim - self.pool_x_size) // self.pool_x_step,
                1 + (self.input_y_dim - self.pool_y_size) // self.pool_y_step,
                1 + (self.input_z_dim - self.pool_z_size) // self.pool_z_step)

    def input_dim(self) -> int:
        return self.input_x_dim * self.input_y_dim * self.input_z_dim

    def output_dim(self) -> int:
        px, py, pz = self._num_pools()
        return px * py * pz

    def properties(self) -> int:
        return (Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT | Prop.BACKPROP_NEEDS_OUTPUT
                | Prop.BACKPROP_ADDS)

    def check(self) -> str:
        for dim, size, step, axis in ((self.input_x_dim, self.pool_x_size, self.pool_x_step, "x"),
                                      (self.input_y_dim, self.pool_y_size, self.pool_y_step, "y"),
                                      (self.input_z_dim, self.pool_z_size, self.pool_z_step, "z")):
            if dim <= 0 or size <= 0 or step <= 0:
                return f"input-{axis}-dim, pool-{axis}-size and pool-{axis}-step must be > 0"
            if dim < size or size < step:
                return f"need input-{axis}-dim >= pool-{axis}-size >= pool-{axis}-step"
            if (dim - size) % step != 0:
                return (f"(input-{axis}-dim - pool-{axis}-size) must be a multiple of "
                        f"pool-{axis}-step")
        return ""

    def init_from_config(self, cfl: ConfigLine) -> None:
        names = ["input-x-dim", "input-y-dim", "input-z-dim", "pool-x-size", "pool-y-size",
                 "pool-z-size", "pool-x-step", "pool-y-step", "pool-z-step"]
        vals = [cfl.get_int(k) for k in names]
        if any(v is None for v in vals):
            raise self.config_error(cfl, "bad initializer: all of " + ", ".join(names)
                                    + " are required")
        for (_, attr), v in zip(self._FIELDS, vals):
            setattr(self, attr, v)
        problem = self.check()
        if problem:
            raise self.config_error(cfl, problem)

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, self._FIELDS[0][0])
        for i, (tok, attr) in enumerate(self._FIELDS):
            if i > 0:
                r.expect_token(tok)
            setattr(self, attr, r.read_int32())
        r.expect_token(self.closing_tag())
        problem = self.check()
        if problem:
            raise r.error(f"{self.type_name}: {problem}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        for tok, attr in self._FIELDS:
            w.write_token(tok)
            w.write_int32(getattr(self, attr))
        w.write_token(self.closing_tag())

    def info(self) -> str:
        return (f"{self.type_name}, input-x-dim={self.input_x_dim}"
                f", input-y-dim={self.input_y_dim}, input-z-dim={self.input_z_dim}"
                f", pool-x-size={self.pool_x_size}, pool-y-size={self.pool_y_size}"
                f", pool-z-size={self.pool_z_size}, pool-x-step={self.pool_x_step}"
                f", pool-y-step={self.pool_y_step}, pool-z-step={self.pool_z_step}")

    def patch_column_map(self) -> np.ndarray:
        """Input column for (position in pool, pool index); pool index runs
        x-major then y then z, which is also the output order."""
        px, py, pz = self._num_pools()

        def ax(n: int, k: int) -> np.ndarray:
            # 0..n-1 along axis k of a 6-d grid (pool position x,y,z, pool x,y,z)
            return np.arange(n).reshape([-1 if i == k else 1 for i in range(6)])

        x = ax(px, 3) * self.pool_x_step + ax(self.pool_x_size, 0)
        y = ax(py, 4) * self.pool_y_step + ax(self.pool_y_size, 1)
        z = ax(pz, 5) * self.pool_z_step + ax(self.pool_z_size, 2)
        cols = x * (self.input_y_dim * self.input_z_dim) + y * self.input_z_dim + z
        return cols.reshape(-1)

    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray) -> None:
        num_pools = self.output_dim()
        pool_size = self.pool_x_size * self.pool_y_size * self.pool_z_size
        patches = in_value[:, self.patch_column_map()].reshape(-1, pool_size, num_pools)
        out_value[...] = np.maximum(patches.max(axis=1), np.float32(-1e20))
        return None

    def backprop(self, debug_info: str, indexes, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo, to_update,
                 in_deriv: np.ndarray | None) -> None:
        # Every pool member equal to the pool's output (ties included, as in
        # Kaldi) receives the output derivative; added onto in_deriv.
        if in_deriv is None:
            return
        num_pools = self.output_dim()
        pool_size = self.pool_x_size * self.pool_y_size * self.pool_z_size
        cols = self.patch_column_map()
        patches = in_value[:, cols].reshape(-1, pool_size, num_pools)
        mask = patches == out_value[:, None, :]
        patch_derivs = (mask * out_deriv[:, None, :]).reshape(in_value.shape[0], -1)
        np.add.at(in_deriv, (slice(None), cols), patch_derivs.astype(in_deriv.dtype))
