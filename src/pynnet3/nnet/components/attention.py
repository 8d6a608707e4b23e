"""RestrictedAttentionComponent (Kaldi's nnet-attention-component / attention.cc).

Multi-head self-attention restricted to a fixed window of input frames:
for output time t the keys/values come from t + time_stride * i for
i in [-num_left_inputs, num_right_inputs]. Each head's input block is
(key, value, query), the query being key_dim values followed by context_dim
position-dependent biases; each head's output is the attention-weighted sum
of the values, followed (if output-context) by the attention weights.

The component is non-simple: it reorders its input and output Indexes onto a
regular (t, image) grid, padding missing but allowed inputs with blank
Indexes (t = kNoTime) that are zero at run time.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, read_double_matrix
from ..config_line import ConfigLine
from ..index import K_NO_TIME, Index
from .base import Component, Prop, fmt_bool, fmt_g, register, rng
from .convolution_model import ConvolutionComputationIo, get_computation_io, nx_list


@dataclass
class RestrictedAttentionPrecomputedIndexes:
    io: ConvolutionComputationIo

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<RestrictedAttentionComponentPrecomputedIndexes>")
        w.write_token("<Io>")
        self.io.write(w)
        w.write_token("</RestrictedAttentionComponentPrecomputedIndexes>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens("<RestrictedAttentionComponentPrecomputedIndexes>", "<Io>")
        self.io = ConvolutionComputationIo()
        self.io.read(r)
        r.expect_token("</RestrictedAttentionComponentPrecomputedIndexes>")


@dataclass
class RestrictedAttentionMemo:
    """The attention weights, (num output rows) x (num_heads * context_dim)."""

    c: np.ndarray


@register
class RestrictedAttentionComponent(Component):
    """Kaldi's RestrictedAttentionComponent: multi-head self-attention over a limited window of
    frames (num-left-inputs/num-right-inputs at time-stride), optionally with the attention
    weights appended to the output (output-context)."""

    type_name = "RestrictedAttentionComponent"

    def __init__(self) -> None:
        self.num_heads = 1
        self.key_dim = 0
        self.value_dim = 0
        self.num_left_inputs = 0
        self.num_right_inputs = 0
        self.time_stride = 1
        self.context_dim = 1
        self.num_left_inputs_required = 0
        self.num_right_inputs_required = 0
        self.output_context = True
        self.key_scale = 1.0
        self.stats_count = 0.0
        self.entropy_stats = np.zeros(0, dtype=np.float64)
        self.posterior_stats = np.zeros((0, 0), dtype=np.float64)

    # -- dims and flags --------------------------------------------------
    def input_dim(self) -> int:
        query_dim = self.key_dim + self.context_dim
        return self.num_heads * (self.key_dim + self.value_dim + query_dim)

    def output_dim(self) -> int:
        return self.num_heads * (self.value_dim + (self.context_dim if self.output_context else 0))

    def properties(self) -> int:
        return (Prop.REORDERS_INDEXES | Prop.BACKPROP_NEEDS_INPUT | Prop.PROPAGATE_ADDS
                | Prop.BACKPROP_ADDS | Prop.STORES_STATS | Prop.USES_MEMO)

    def check(self) -> str:
        ok = (self.num_heads > 0 and self.key_dim > 0 and self.value_dim > 0
              and self.num_left_inputs >= 0 and self.num_right_inputs >= 0
              and self.num_left_inputs + self.num_right_inputs > 0 and self.time_stride > 0
              and self.context_dim == self.num_left_inputs + 1 + self.num_right_inputs
              and 0 <= self.num_left_inputs_required <= self.num_left_inputs
              and 0 <= self.num_right_inputs_required <= self.num_right_inputs
              and 0.0 < self.key_scale <= 1.0 and self.stats_count >= 0.0)
        return "" if ok else "invalid configuration values"

    # -- configuration -----------------------------------------------------
    def init_from_config(self, cfl: ConfigLine) -> None:
        key_dim = cfl.get_int("key-dim")
        value_dim = cfl.get_int("value-dim")
        num_left = cfl.get_int("num-left-inputs")
        num_right = cfl.get_int("num-right-inputs")
        if key_dim is None or value_dim is None or num_left is None or num_right is None:
            raise self.config_error(cfl, "all of the values key-dim, value-dim, "
                                         "num-left-inputs and num-right-inputs must be defined")
        self.key_dim, self.value_dim = key_dim, value_dim
        self.num_left_inputs, self.num_right_inputs = num_left, num_right
        self.num_heads = cfl.get_int("num-heads", 1)
        self.time_stride = cfl.get_int("time-stride", 1)
        self.num_left_inputs_required = cfl.get_int("num-left-inputs-required", -1)
        self.num_right_inputs_required = cfl.get_int("num-right-inputs-required", -1)
        self.output_context = cfl.get_bool("output-context", True)
        key_scale = cfl.get_float("key-scale", -1.0)
        if key_scale < 0.0 and key_dim > 0:
            key_scale = 1.0 / math.sqrt(key_dim)
        self.key_scale = float(np.float32(key_scale))
        if self.num_left_inputs_required < 0:
            self.num_left_inputs_required = self.num_left_inputs
        if self.num_right_inputs_required < 0:
            self.num_right_inputs_required = self.num_right_inputs
        if (self.num_heads <= 0 or key_dim <= 0 or value_dim <= 0 or num_left < 0
                or num_right < 0 or num_left + num_right <= 0
                or self.num_left_inputs_required > num_left
                or self.num_right_inputs_required > num_right or self.time_stride <= 0):
            raise self.config_error(cfl, "config line contains invalid values")
        self.stats_count = 0.0
        self.entropy_stats = np.zeros(0, dtype=np.float64)
        self.posterior_stats = np.zeros((0, 0), dtype=np.float64)
        self.context_dim = num_left + 1 + num_right
        problem = self.check()
        if problem:
            raise self.config_error(cfl, f"{problem} (key-scale must be in (0, 1])")

    # -- I/O -------------------------------------------------------------------
    _INT_FIELDS = (("<NumHeads>", "num_heads"), ("<KeyDim>", "key_dim"),
                   ("<ValueDim>", "value_dim"), ("<NumLeftInputs>", "num_left_inputs"),
                   ("<NumRightInputs>", "num_right_inputs"), ("<TimeStride>", "time_stride"),
                   ("<NumLeftInputsRequired>", "num_left_inputs_required"),
                   ("<NumRightInputsRequired>", "num_right_inputs_required"))

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        for tok, attr in self._INT_FIELDS:
            w.write_token(tok)
            w.write_int32(getattr(self, attr))
        w.write_token("<OutputContext>")
        w.write_bool(self.output_context)
        w.write_token("<KeyScale>")
        w.write_float(self.key_scale)
        w.write_token("<StatsCount>")
        w.write_double(self.stats_count)
        w.write_token("<EntropyStats>")
        w.write_vector(self.entropy_stats, double=True)
        w.write_token("<PosteriorStats>")
        w.write_matrix(self.posterior_stats, double=True)
        w.write_token(self.closing_tag())

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<NumHeads>")
        for i, (tok, attr) in enumerate(self._INT_FIELDS):
            if i > 0:
                r.expect_token(tok)
            setattr(self, attr, r.read_int32())
        r.expect_token("<OutputContext>")
        self.output_context = r.read_bool()
        r.expect_token("<KeyScale>")
        self.key_scale = r.read_float()
        r.expect_token("<StatsCount>")
        self.stats_count = r.read_double()
        r.expect_token("<EntropyStats>")
        self.entropy_stats = r.read_double_vector()
        r.expect_token("<PosteriorStats>")
        self.posterior_stats = read_double_matrix(r)
        r.expect_token(self.closing_tag())
        self.context_dim = self.num_left_inputs + 1 + self.num_right_inputs

    def info(self) -> str:
        s = (f"{self.type_name}, input-dim={self.input_dim()}, output-dim={self.output_dim()}"
             f", num-heads={self.num_heads}, time-stride={self.time_stride}"
             f", key-dim={self.key_dim}, value-dim={self.value_dim}"
             f", num-left-inputs={self.num_left_inputs}"
             f", num-right-inputs={self.num_right_inputs}, context-dim={self.context_dim}"
             f", num-left-inputs-required={self.num_left_inputs_required}"
             f", num-right-inputs-required={self.num_right_inputs_required}"
             f", output-context={fmt_bool(self.output_context)}"
             f", key-scale={fmt_g(self.key_scale)}")
        if self.stats_count != 0.0:
            count = self.stats_count
            s += ", entropy=" + "".join(fmt_g(v / count) + "," for v in self.entropy_stats)
            for i in range(min(self.num_heads, 5)):
                s += f" posterior-stats[{i}]=" + "".join(
                    fmt_g(v / count) + "," for v in self.posterior_stats[i])
            s += f" stats-count={fmt_g(count)}"
        return s

    # -- stats -----------------------------------------------------------------
    def zero_stats(self) -> None:
        self.entropy_stats[...] = 0.0
        self.posterior_stats[...] = 0.0
        self.stats_count = 0.0

    def scale(self, alpha: float) -> None:
        self.entropy_stats *= alpha
        self.posterior_stats *= alpha
        self.stats_count *= alpha

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, RestrictedAttentionComponent)
        if self.entropy_stats.size == 0 and other.entropy_stats.size != 0:
            self.entropy_stats = np.zeros_like(other.entropy_stats)
        if self.posterior_stats.shape[0] == 0 and other.posterior_stats.shape[0] != 0:
            self.posterior_stats = np.zeros_like(other.posterior_stats)
        if other.entropy_stats.size != 0:
            self.entropy_stats += alpha * other.entropy_stats
        if other.posterior_stats.shape[0] != 0:
            self.posterior_stats += alpha * other.posterior_stats
        self.stats_count += alpha * other.stats_count

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray,
                    memo: RestrictedAttentionMemo) -> None:
        if self.entropy_stats.shape[0] != self.num_heads:
            self.entropy_stats = np.zeros(self.num_heads, dtype=np.float64)
            self.posterior_stats = np.zeros((self.num_heads, self.context_dim), dtype=np.float64)
            self.stats_count = 0.0
        # Kaldi only accumulates on a random third of the minibatches.
        if rng().integers(0, 3) == 0:
            return
        c = memo.c
        c_sum = c.sum(axis=0, dtype=np.float32)
        self.posterior_stats += c_sum.reshape(self.num_heads, self.context_dim)
        log_c = np.log(np.maximum(c, np.float32(1.0e-20)))
        dot = -(c * log_c).sum(axis=0, dtype=np.float32)
        self.entropy_stats += dot.reshape(self.num_heads, self.context_dim).sum(
            axis=1, dtype=np.float32)
        self.stats_count += c.shape[0]

    # -- compiler hooks ------------------------------------------------------
    def get_input_indexes(self, misc_info, output_index: tuple) -> list[Index]:
        n, t, x = output_index
        return [Index(n, t + self.time_stride * i, x)
                for i in range(-self.num_left_inputs, self.num_right_inputs + 1)]

    def is_computable(self, misc_info, output_index: tuple,
                      input_index_set) -> tuple[bool, list[Index]]:
        n, t, x = output_index
        used = []
        for i in range(-self.num_left_inputs, self.num_right_inputs + 1):
            ix = Index(n, t + self.time_stride * i, x)
            if ix in input_index_set:
                used.append(ix)
            elif -self.num_left_inputs_required <= i <= self.num_right_inputs_required:
                return False, []
        return True, used

    def get_computation_structure(self, input_indexes: list[tuple],
                                  output_indexes: list[tuple]) -> ConvolutionComputationIo:
        io = get_computation_io(input_indexes, output_indexes)
        stride = self.time_stride
        if io.t_step_out == 0:
            io.t_step_out = stride
        if io.t_step_in == 0:
            io.t_step_in = stride
        t_step = math.gcd(math.gcd(io.t_step_out, io.t_step_in), stride)
        multiple_out = io.t_step_out // t_step
        multiple_in = io.t_step_in // t_step
        io.t_step_in = io.t_step_out = t_step
        io.num_t_out = 1 + multiple_out * (io.num_t_out - 1)
        io.num_t_in = 1 + multiple_in * (io.num_t_in - 1)
        first_requested = io.start_t_out - stride * self.num_left_inputs
        first_required = io.start_t_out - stride * self.num_left_inputs_required
        last_t_out = io.start_t_out + (io.num_t_out - 1) * t_step
        last_t_in = io.start_t_in + (io.num_t_in - 1) * t_step
        last_requested = last_t_out + stride * self.num_right_inputs
        last_required = last_t_out + stride * self.num_right_inputs_required
        if not (io.start_t_in >= first_requested and last_t_in <= last_requested
                and io.start_t_in <= first_required and last_t_in >= last_required):
            raise ValueError(f"{self.type_name}: input indexes do not cover the required "
                             "context, or exceed the requested context")
        io.start_t_in = first_requested
        io.num_t_in = 1 + (last_requested - first_requested) // t_step
        return io

    @staticmethod
    def _create_indexes_vector(pairs: list[tuple[int, int]], t_start: int, t_step: int,
                               num_t: int, index_set: set) -> list[Index]:
        out = []
        for t in range(t_start, t_start + t_step * num_t, t_step):
            for n, x in pairs:
                ix = Index(n, t, x)
                out.append(ix if ix in index_set else Index(n, K_NO_TIME, x))
        return out

    def _get_indexes(self, input_indexes: list[tuple], output_indexes: list[tuple],
                     io: ConvolutionComputationIo) -> tuple[list[Index], list[Index]]:
        pairs = nx_list(input_indexes)
        assert len(pairs) == io.num_images
        new_in = self._create_indexes_vector(pairs, io.start_t_in, io.t_step_in, io.num_t_in,
                                             set(input_indexes))
        new_out = self._create_indexes_vector(pairs, io.start_t_out, io.t_step_out,
                                              io.num_t_out, set(output_indexes))
        return new_in, new_out

    def reorder_indexes(self, input_indexes: list[tuple], output_indexes: list[tuple]
                        ) -> tuple[list[Index], list[Index]]:
        io = self.get_computation_structure(input_indexes, output_indexes)
        return self._get_indexes(input_indexes, output_indexes, io)

    def precompute_indexes(self, misc_info, input_indexes: list[tuple],
                           output_indexes: list[tuple], need_backprop: bool
                           ) -> RestrictedAttentionPrecomputedIndexes:
        return RestrictedAttentionPrecomputedIndexes(
            self.get_computation_structure(input_indexes, output_indexes))

    # -- math -----------------------------------------------------------------
    def propagate(self, indexes: RestrictedAttentionPrecomputedIndexes, in_value: np.ndarray,
                  out_value: np.ndarray) -> RestrictedAttentionMemo:
        io = indexes.io
        assert (in_value.shape[0] == io.num_t_in * io.num_images
                and out_value.shape[0] == io.num_t_out * io.num_images)
        kd, vd, cd = self.key_dim, self.value_dim, self.context_dim
        in_per_head = kd + vd + kd + cd
        out_per_head = vd + (cd if self.output_context else 0)
        num_out = out_value.shape[0]
        c_all = np.zeros((num_out, cd * self.num_heads), dtype=np.float32)
        left_rows = (io.start_t_out - io.start_t_in) // io.t_step_in * io.num_images
        row_shift = (in_value.shape[0] - num_out) // (cd - 1)
        for h in range(self.num_heads):
            block = in_value[:, h * in_per_head:(h + 1) * in_per_head]
            keys, values = block[:, :kd], block[:, kd:kd + vd]
            queries = block[left_rows:left_rows + num_out, kd + vd:]
            b = np.empty((num_out, cd), dtype=np.float32)
            for o in range(cd):
                keys_o = keys[o * row_shift:o * row_shift + num_out]
                b[:, o] = np.float32(self.key_scale) * np.einsum("ij,ij->i", queries[:, :kd],
                                                                 keys_o)
            b += queries[:, kd:]
            b -= b.max(axis=1, keepdims=True)
            np.exp(b, out=b)
            c = b / b.sum(axis=1, keepdims=True)
            c_all[:, h * cd:(h + 1) * cd] = c
            out_h = out_value[:, h * out_per_head:(h + 1) * out_per_head]
            for o in range(cd):
                out_h[:, :vd] += c[:, o:o + 1] * values[o * row_shift:o * row_shift + num_out]
            if self.output_context:
                out_h[:, vd:] = c
        return RestrictedAttentionMemo(c_all)

    def backprop(self, debug_info: str, indexes: RestrictedAttentionPrecomputedIndexes,
                 in_value: np.ndarray | None, out_value, out_deriv: np.ndarray,
                 memo: RestrictedAttentionMemo, to_update, in_deriv: np.ndarray | None) -> None:
        """Kaldi's AttentionBackward per head (BACKPROP_ADDS): through the
        weighted sum of values and the context output to the weights c, through
        the softmax to the scores b, then to the queries (key and context
        parts), the keys and the values.  Nothing to update."""
        if in_deriv is None:
            return
        if not isinstance(memo, RestrictedAttentionMemo):
            raise ValueError(f"{self.type_name}.backprop needs the memo from propagate")
        io = indexes.io
        kd, vd, cd = self.key_dim, self.value_dim, self.context_dim
        in_per_head = kd + vd + kd + cd
        out_per_head = vd + (cd if self.output_context else 0)
        num_out = out_deriv.shape[0]
        left_rows = (io.start_t_out - io.start_t_in) // io.t_step_in * io.num_images
        row_shift = (in_value.shape[0] - num_out) // (cd - 1)
        key_scale = np.float32(self.key_scale)
        for h in range(self.num_heads):
            block = in_value[:, h * in_per_head:(h + 1) * in_per_head]
            dblock = in_deriv[:, h * in_per_head:(h + 1) * in_per_head]
            keys, values = block[:, :kd], block[:, kd:kd + vd]
            queries = block[left_rows:left_rows + num_out, kd + vd:]
            dqueries = dblock[left_rows:left_rows + num_out, kd + vd:]
            c = memo.c[:, h * cd:(h + 1) * cd]
            dout = out_deriv[:, h * out_per_head:(h + 1) * out_per_head]
            dc = np.empty((num_out, cd), dtype=np.float32)
            for o in range(cd):
                rows = slice(o * row_shift, o * row_shift + num_out)
                dc[:, o] = np.einsum("ij,ij->i", dout[:, :vd], values[rows])
                dblock[rows, kd:kd + vd] += c[:, o:o + 1] * dout[:, :vd]
            if self.output_context:
                dc += dout[:, vd:]
            # softmax: db = c * (dc - sum(c * dc))
            db = c * (dc - np.einsum("ij,ij->i", c, dc)[:, None])
            dqueries[:, kd:] += db
            for o in range(cd):
                rows = slice(o * row_shift, o * row_shift + num_out)
                dqueries[:, :kd] += key_scale * db[:, o:o + 1] * keys[rows]
                dblock[rows, :kd] += key_scale * db[:, o:o + 1] * queries[:, :kd]
