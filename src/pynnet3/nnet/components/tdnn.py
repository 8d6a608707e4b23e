"""TdnnComponent (Kaldi's nnet-tdnn-component.cc).

A TdnnComponent splices its input at a fixed list of time offsets and applies
one affine (or linear, with ``use-bias=false``) transform to the spliced
vector, without materialising the spliced matrix: the compiler reorders the
input rows so that "the rows for time ``t + offset``" form a strided view of
the input matrix, and :meth:`TdnnComponent.precompute_indexes` records the
stride and one start row per offset.  The index structure itself is in
:mod:`.tdnn_indexes`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...blas import add_mat_mat
from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine, parse_int32
from ..index import K_NO_TIME, Index, index_columns
from ..index_lists import IndexList
from .affine import (AffineParamsMixin, random_bias, random_params, read_end_of_common,
                     set_preconditioner, verbose_level)
from .base import Prop, UpdatableComponent, fmt_g, print_parameter_stats, register
from .natural_gradient import OnlineNaturalGradient, precondition_in_out
from .numeric import row_sum
from .tdnn_indexes import (_computation_io, _indexes_for_computation_columns,
                           _modify_computation_io, _nx_keys, get_computation_io,
                           reorder_single_image)




@dataclass
class TdnnPrecomputedIndexes:
    """Kaldi's TdnnComponent::PrecomputedIndexes.

    The input rows used for time offset i are
    ``in[row_offsets[i] :: row_stride]`` (as many as there are output rows).
    """

    row_stride: int = 1
    row_offsets: list[int] = field(default_factory=list)

    type_name = "TdnnComponentPrecomputedIndexes"

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<TdnnComponentPrecomputedIndexes>")
        w.write_token("<RowStride>")
        w.write_int32(self.row_stride)
        w.write_token("<RowOffsets>")
        w.write_int_vector(self.row_offsets)
        w.write_token("</TdnnComponentPrecomputedIndexes>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens("<TdnnComponentPrecomputedIndexes>", "<RowStride>")
        self.row_stride = r.read_int32()
        r.expect_token("<RowOffsets>")
        self.row_offsets = r.read_int_vector()
        r.expect_token("</TdnnComponentPrecomputedIndexes>")

    def copy(self) -> "TdnnPrecomputedIndexes":
        return TdnnPrecomputedIndexes(self.row_stride, list(self.row_offsets))


def _input_part(mat: np.ndarray, num_output_rows: int, row_stride: int,
                row_offset: int) -> np.ndarray:
    """Rows row_offset, row_offset + stride, ... (num_output_rows of them), a view."""
    if num_output_rows == 0:
        return mat[:0]
    last = row_offset + row_stride * (num_output_rows - 1)
    if row_offset < 0 or row_stride < 1 or last >= mat.shape[0]:
        raise ValueError(f"TdnnComponent: input has {mat.shape[0]} rows, need row {last}")
    return mat[row_offset:last + 1:row_stride]


@register
class TdnnComponent(AffineParamsMixin, UpdatableComponent):
    """Kaldi's TdnnComponent: splicing at ``time_offsets`` + affine transform."""

    type_name = "TdnnComponent"

    def __init__(self) -> None:
        super().__init__()
        self.time_offsets: list[int] = []
        # output-dim x (input-dim * len(time_offsets)); column block i acts on
        # the input at time t + time_offsets[i].
        self.linear_params = np.zeros((0, 0), dtype=np.float32)
        # Empty when use-bias=false.
        self.bias_params = np.zeros((0,), dtype=np.float32)
        self.orthonormal_constraint = 0.0
        self.use_natural_gradient = True
        self.preconditioner_in = OnlineNaturalGradient()
        self.preconditioner_out = OnlineNaturalGradient()

    # -- dims, properties --------------------------------------------------
    def input_dim(self) -> int:
        if not self.time_offsets:
            return 0
        return int(self.linear_params.shape[1]) // len(self.time_offsets)

    def output_dim(self) -> int:
        return int(self.linear_params.shape[0])

    def properties(self) -> int:
        p = Prop.UPDATABLE | Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS | Prop.BACKPROP_NEEDS_INPUT
        if self.bias_params.shape[0] == 0:
            p |= Prop.PROPAGATE_ADDS
        return int(p)

    def check(self) -> str | None:
        """Kaldi's Check(): a description of the problem, or None if consistent."""
        if self.linear_params.shape[0] <= 0:
            return "no parameters"
        if not self.time_offsets:
            return "empty time-offsets"
        if len(set(self.time_offsets)) != len(self.time_offsets):
            return "repeated time-offsets"
        if self.linear_params.shape[1] % len(self.time_offsets) != 0:
            return "parameter columns not a multiple of the number of time-offsets"
        if self.bias_params.shape[0] not in (0, self.linear_params.shape[0]):
            return "bias dimension does not match output dimension"
        return None

    # -- configuration -----------------------------------------------------
    def init_from_config(self, cfl: ConfigLine) -> None:
        self.init_learning_rates_from_config(cfl)
        offsets_str = cfl.get_str("time-offsets")
        input_dim = cfl.get_int("input-dim", -1)
        output_dim = cfl.get_int("output-dim", -1)
        offsets: list[int] = []
        ok = offsets_str is not None and input_dim > 0 and output_dim > 0
        if ok:
            parts = offsets_str.split(",")
            parsed = [parse_int32(p) for p in parts]
            ok = None not in parsed
            if ok:
                offsets = [int(p) for p in parsed if p is not None]
        if not ok or not offsets:
            raise self.config_error(cfl, "bad initializer: there is a problem with "
                                         "time-offsets, input-dim or output-dim (not defined?)")
        if len(set(offsets)) != len(offsets):
            raise self.config_error(cfl, "bad initializer: repeated time-offsets")
        self.time_offsets = offsets

        param_stddev = cfl.get_float("param-stddev", -1.0)
        bias_stddev = cfl.get_float("bias-stddev", 1.0)
        bias_mean = cfl.get_float("bias-mean", 0.0)
        use_bias = cfl.get_bool("use-bias", True)
        self.orthonormal_constraint = f32(cfl.get_float("orthonormal-constraint", 0.0))
        spliced_input_dim = input_dim * len(offsets)
        if param_stddev < 0.0:
            param_stddev = 1.0 / math.sqrt(spliced_input_dim)
        self.linear_params = random_params(output_dim, spliced_input_dim, param_stddev)
        if use_bias:
            self.bias_params = random_bias(output_dim, bias_stddev, bias_mean)
        else:
            self.bias_params = np.zeros((0,), dtype=np.float32)

        self.use_natural_gradient = cfl.get_bool("use-natural-gradient", True)
        rank_in = cfl.get_int("rank-in", -1)
        rank_out = cfl.get_int("rank-out", -1)
        alpha_in = cfl.get_float("alpha-in", 4.0)
        alpha_out = cfl.get_float("alpha-out", 4.0)
        num_samples_history = cfl.get_float("num-samples-history", 2000.0)
        if rank_in < 0:
            rank_in = min(20, (spliced_input_dim + 1) // 2)
        if rank_out < 0:
            rank_out = min(80, (output_dim + 1) // 2)
        # The update period of a TdnnComponent is fixed at 4.
        set_preconditioner(self, cfl, None, self.preconditioner_in, rank=rank_in,
                           num_samples_history=num_samples_history, alpha=alpha_in,
                           update_period=4)
        set_preconditioner(self, cfl, None, self.preconditioner_out, rank=rank_out,
                           num_samples_history=num_samples_history, alpha=alpha_out,
                           update_period=4)

    # -- I/O -------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        read_end_of_common(r, self)
        r.expect_token("<TimeOffsets>")
        self.time_offsets = r.read_int_vector()
        r.expect_token("<LinearParams>")
        self.linear_params = r.read_matrix()
        r.expect_token("<BiasParams>")
        self.bias_params = r.read_vector()
        r.expect_token("<OrthonormalConstraint>")
        self.orthonormal_constraint = r.read_float()
        r.expect_token("<UseNaturalGradient>")
        self.use_natural_gradient = r.read_bool()
        r.expect_token("<NumSamplesHistory>")
        num_samples_history = r.read_float()
        token = r.read_token()
        if token == "<AlphaInOut>":
            alpha_in = r.read_float()
            alpha_out = r.read_float()
        elif token == "<Alpha>":
            # An unreleased development format with a single alpha.
            alpha_in = alpha_out = r.read_float()
        else:
            raise r.error(f"TdnnComponent: expected <AlphaInOut> or <Alpha>, got {token[:40]}")
        r.expect_token("<RankInOut>")
        rank_in = r.read_int32()
        rank_out = r.read_int32()
        set_preconditioner(self, None, r, self.preconditioner_in, rank=rank_in,
                           num_samples_history=num_samples_history, alpha=alpha_in,
                           update_period=4)
        set_preconditioner(self, None, r, self.preconditioner_out, rank=rank_out,
                           num_samples_history=num_samples_history, alpha=alpha_out,
                           update_period=4)
        r.expect_token("</TdnnComponent>")
        problem = self.check()
        if problem is not None:
            raise r.error(f"TdnnComponent: {problem}")

    def write(self, w: KaldiWriter) -> None:
        self.write_updatable_common(w)
        w.write_token("<TimeOffsets>")
        w.write_int_vector(self.time_offsets)
        w.write_token("<LinearParams>")
        w.write_matrix(self.linear_params)
        w.write_token("<BiasParams>")
        w.write_vector(self.bias_params)
        w.write_token("<OrthonormalConstraint>")
        w.write_float(self.orthonormal_constraint)
        w.write_token("<UseNaturalGradient>")
        w.write_bool(self.use_natural_gradient)
        w.write_token("<NumSamplesHistory>")
        w.write_float(self.preconditioner_in.num_samples_history)
        w.write_token("<AlphaInOut>")
        w.write_float(self.preconditioner_in.alpha)
        w.write_float(self.preconditioner_out.alpha)
        w.write_token("<RankInOut>")
        w.write_int32(self.preconditioner_in.rank)
        w.write_int32(self.preconditioner_out.rank)
        w.write_token("</TdnnComponent>")

    def info(self) -> str:
        s = super().info()
        if self.orthonormal_constraint != 0.0:
            s += f", orthonormal-constraint={fmt_g(self.orthonormal_constraint)}"
        s += ", time-offsets=" + ",".join(str(t) for t in self.time_offsets)
        s += print_parameter_stats("linear-params", self.linear_params, False, True, True,
                                   verbose_level() >= 2)
        if self.bias_params.shape[0] == 0:
            s += ", has-bias=false"
        else:
            s += print_parameter_stats("bias", self.bias_params, True)
        if not self.use_natural_gradient:
            s += ", use-natural-gradient=false"
        else:
            p_in, p_out = self.preconditioner_in, self.preconditioner_out
            s += (f", rank-in={p_in.rank}, rank-out={p_out.rank}"
                  f", num-samples-history={fmt_g(p_in.num_samples_history)}"
                  f", update-period={p_in.update_period}"
                  f", alpha-in={fmt_g(p_in.alpha)}, alpha-out={fmt_g(p_out.alpha)}")
        return s

    # -- compiler hooks ----------------------------------------------------
    def get_input_indexes(self, misc_info: Any, output_index: tuple) -> list[Index]:
        n, t, x = output_index
        if t == K_NO_TIME:
            raise ValueError("TdnnComponent: output index without a time")
        return [Index(n, t + off, x) for off in self.time_offsets]

    def is_computable(self, misc_info: Any, output_index: tuple,
                      input_index_set: Any) -> tuple[bool, list[Index]]:
        """Computable only if the input exists at every time offset."""
        n, t, x = output_index
        if t == K_NO_TIME:
            raise ValueError("TdnnComponent: output index without a time")
        used: list[Index] = []
        for off in self.time_offsets:
            ix = Index(n, t + off, x)
            if ix not in input_index_set:
                return False, []
            used.append(ix)
        return True, used

    def get_input_index_offsets(self) -> list[tuple[int, int, int]]:
        return [(0, off, 0) for off in self.time_offsets]

    def reorder_indexes(self, input_indexes: list, output_indexes: list
                        ) -> tuple[list[Index], list[Index]]:
        """Regular (t-major) order, padding gaps with blank (t = kNoTime) indexes."""
        in_cols, out_cols = index_columns(input_indexes), index_columns(output_indexes)
        single = reorder_single_image(in_cols, out_cols)
        if single is not None:
            return IndexList(single[0]), IndexList(single[1])
        in_keys = _nx_keys(in_cols)
        io, nx = _computation_io(in_cols, out_cols, in_keys)
        _modify_computation_io(io)
        new_in, new_out = _indexes_for_computation_columns(io, nx, in_cols, out_cols, in_keys)
        # (Array-backed: the compiler reads them as arrays.)
        return IndexList(new_in.astype(np.int32)), IndexList(new_out.astype(np.int32))

    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> TdnnPrecomputedIndexes:
        io = get_computation_io(input_indexes, output_indexes)
        _modify_computation_io(io)
        ans = TdnnPrecomputedIndexes(row_stride=io.reorder_t_in)
        n = io.reorder_t_in
        for off in self.time_offsets:
            required_t = io.start_t_out + off
            # Position of required_t in the input grid, counting from 0.
            input_t, rem = divmod(required_t - io.start_t_in, io.t_step_in)
            if rem != 0 or input_t < 0:
                raise ValueError(f"TdnnComponent: input t={required_t} is not on the input "
                                 f"grid (start {io.start_t_in}, step {io.t_step_in})")
            # With reorder_t_in = n, blocks of n t values are interleaved per
            # image: the block index advances by num_images rows, the position
            # inside the block by one row.
            ans.row_offsets.append((input_t // n) * n * io.num_images + input_t % n)
        return ans

    # -- natural gradient ----------------------------------------------------
    def freeze_natural_gradient(self, freeze: bool) -> None:
        self.preconditioner_in.freeze(freeze)
        self.preconditioner_out.freeze(freeze)

    def consolidate_memory(self) -> None:
        """Nothing to do in NumPy."""

    # -- math --------------------------------------------------------------
    def propagate(self, indexes: TdnnPrecomputedIndexes, in_value: np.ndarray,
                  out_value: np.ndarray) -> None:
        if not isinstance(indexes, TdnnPrecomputedIndexes):
            raise TypeError("TdnnComponent.propagate needs TdnnPrecomputedIndexes")
        if len(indexes.row_offsets) != len(self.time_offsets):
            raise ValueError("TdnnComponent.propagate: precomputed indexes do not match")
        # Without bias the component has PROPAGATE_ADDS: out_value is added to.
        num_rows = out_value.shape[0]
        num_offsets = len(self.time_offsets)
        d = self.linear_params.shape[1] // num_offsets if num_offsets else 0
        stride = indexes.row_stride
        has_bias = self.bias_params.shape[0] != 0
        # Kaldi's order: the bias copied into each row first, then one GEMM
        # per time offset on a strided view of the input rows (no splicing
        # copy), each accumulating inside the sgemm (beta = 1, Kaldi's
        # AddMatMat): no temporary and no extra pass over out_value.
        if has_bias:
            out_value[...] = self.bias_params
        for i, row_offset in enumerate(indexes.row_offsets):
            part = _input_part(in_value, num_rows, stride, row_offset)
            weights = self.linear_params[:, i * d:(i + 1) * d].T
            add_mat_mat(1.0, part, weights, 1.0, out_value)
        return None

    def backprop(self, debug_info: str, indexes: TdnnPrecomputedIndexes,
                 in_value: np.ndarray | None, out_value: np.ndarray | None,
                 out_deriv: np.ndarray, memo: Any, to_update: Any,
                 in_deriv: np.ndarray | None) -> None:
        if (not isinstance(indexes, TdnnPrecomputedIndexes)
                or len(indexes.row_offsets) != len(self.time_offsets)):
            raise TypeError("TdnnComponent.backprop needs matching TdnnPrecomputedIndexes")
        num_rows = out_deriv.shape[0]
        d = self.input_dim()
        if in_deriv is not None:
            # BACKPROP_ADDS; the strided parts of different offsets overlap,
            # so they are added one offset at a time.
            for i, row_offset in enumerate(indexes.row_offsets):
                part = _input_part(in_deriv, num_rows, indexes.row_stride, row_offset)
                part += out_deriv @ self.linear_params[:, i * d:(i + 1) * d]
        if to_update is None:
            return
        if not isinstance(to_update, TdnnComponent):
            raise TypeError(f"TdnnComponent.backprop: to_update is {to_update.type_name}")
        if to_update.learning_rate == 0.0:
            return
        if to_update.is_gradient or not to_update.use_natural_gradient:
            to_update._update_simple(indexes, in_value, out_deriv)
        else:
            to_update._update_natural_gradient(indexes, in_value, out_deriv)

    def _spliced_input(self, indexes: TdnnPrecomputedIndexes, in_value: np.ndarray,
                       num_rows: int) -> np.ndarray:
        """The input spliced at every time offset (num_rows x d * offsets)."""
        return np.concatenate([_input_part(in_value, num_rows, indexes.row_stride, off)
                               for off in indexes.row_offsets], axis=1)

    def _update_simple(self, indexes: TdnnPrecomputedIndexes, in_value: np.ndarray,
                       out_deriv: np.ndarray) -> None:
        lr = np.float32(self.learning_rate)
        if self.bias_params.shape[0] != 0:
            self.bias_params += lr * row_sum(out_deriv)
        spliced = self._spliced_input(indexes, in_value, out_deriv.shape[0])
        self.linear_params += lr * (out_deriv.T @ spliced)

    def _update_natural_gradient(self, indexes: TdnnPrecomputedIndexes, in_value: np.ndarray,
                                 out_deriv: np.ndarray) -> None:
        has_bias = self.bias_params.shape[0] != 0
        spliced = self._spliced_input(indexes, in_value, out_deriv.shape[0])
        lrate, in_temp, out_temp = precondition_in_out(
            self.preconditioner_in, self.preconditioner_out, spliced, out_deriv,
            self.learning_rate, append_ones=has_bias)
        cols = spliced.shape[1]
        if has_bias:
            self.bias_params += lrate * (out_temp.T @ in_temp[:, cols])
        self.linear_params += lrate * (out_temp.T @ in_temp[:, :cols])
