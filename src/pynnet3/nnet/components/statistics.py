"""StatisticsExtractionComponent and StatisticsPoolingComponent (Kaldi's
nnet-general-component.{h,cc}): the mean (and standard deviation) of the
input over a window of frames, as x-vector networks pool them.

Both are general (non-simple) components: they map indexes in their own way,
so they implement the compiler hooks (get_input_indexes, is_computable,
reorder_indexes, precompute_indexes) and keep precomputed indexes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from ...errors import ConfigError
from ...io.kaldi_io import (KaldiReader, KaldiWriter, f32, read_int_pair_vector,
                            write_int_pair_vector)
from ..config_line import ConfigLine
from ..index import K_NO_TIME, Index, index_columns
from ..index_lists import IndexList
from .base import Component, Prop, register
from .numeric import F32


def divide_rounding_down(a: int, b: int) -> int:
    """Kaldi's DivideRoundingDown: integer division rounding towards -inf."""
    return a // b


def sort_nxt(indexes: list) -> IndexList:
    """Sort on n, then x, then t (Kaldi's IndexLessNxt); an array-backed list."""
    cols = index_columns(indexes)
    return IndexList(cols[np.lexsort((cols[:, 1], cols[:, 2], cols[:, 0]))].astype(np.int32))


_TUPLE_NEW = tuple.__new__


def _indexes_at_times(n: int, times: range, x: int) -> map:
    """Index(n, s, x) for s in ``times``, made at C speed (the statistics
    components ask for thousands of them per output Index)."""
    return map(_TUPLE_NEW, repeat(Index), zip(repeat(n), times, repeat(x)))


def _void_rows(cols: np.ndarray) -> np.ndarray:
    cols = np.ascontiguousarray(cols, dtype=np.int64)
    return cols.view(np.dtype((np.void, 8 * cols.shape[1]))).ravel()


def _positions(table: np.ndarray, queries: np.ndarray) -> np.ndarray | None:
    """Row of ``table`` (int64 [m, 3]) equal to each row of ``queries``
    ([k, 3]), -1 where none; None if ``table`` has repeated rows."""
    keys = _void_rows(table)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    if len(sorted_keys) > 1 and (sorted_keys[1:] == sorted_keys[:-1]).any():
        return None
    q = _void_rows(queries)
    if len(sorted_keys) == 0:
        return np.full(len(q), -1, dtype=np.int64)
    pos = np.minimum(np.searchsorted(sorted_keys, q), len(sorted_keys) - 1)
    return np.where(sorted_keys[pos] == q, order[pos], -1)


def _period_start(t: int, period: int) -> int:
    """Largest multiple of ``period`` that is <= t."""
    return period * (t // period)


@dataclass
class StatisticsExtractionComponentPrecomputedIndexes:
    """forward_indexes[i] = (first, end) input rows summed into output row i;
    counts[i] = their number; backward_indexes[j] = output row of input row j
    (only filled when backprop is needed)."""

    forward_indexes: list[tuple[int, int]] = field(default_factory=list)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=F32))
    backward_indexes: list[int] = field(default_factory=list)
    type_name = "StatisticsExtractionComponentPrecomputedIndexes"

    def write(self, w: KaldiWriter) -> None:
        w.write_token(f"<{self.type_name}>")
        w.write_token("<ForwardIndexes>")
        write_int_pair_vector(w, self.forward_indexes)
        w.write_token("<Counts>")
        w.write_vector(self.counts)
        w.write_token("<BackwardIndexes>")
        w.write_int_vector(self.backward_indexes)
        w.write_token(f"</{self.type_name}>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens(f"<{self.type_name}>", "<ForwardIndexes>")
        self.forward_indexes = read_int_pair_vector(r)
        r.expect_token("<Counts>")
        self.counts = r.read_vector()
        r.expect_token("<BackwardIndexes>")
        self.backward_indexes = r.read_int_vector()
        r.expect_token(f"</{self.type_name}>")


def _row_range_sums(mat: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """Sum of rows [first, end) of ``mat`` for each range (float64 result)."""
    m64 = np.asarray(mat, dtype=np.float64)
    cs = np.zeros((m64.shape[0] + 1, m64.shape[1]), dtype=np.float64)
    np.cumsum(m64, axis=0, out=cs[1:])
    r = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    return cs[r[:, 1]] - cs[r[:, 0]]


# The most inputs one statistics component's output may depend on.  Kaldi
# has no limit, but every output depends on each of them: nnet3-info's context
# computation (800 outputs) needs that many graph entries per output, and a
# model saying left-context=2147483647 exhausts any memory.  Kaldi's recipes
# pool over at most 10000 frames.
MAX_POOLING_INPUTS = 100000


@register
class StatisticsExtractionComponent(Component):
    """Counts, sums and (optionally) sums of squares of the input over blocks
    of output-period frames (inputs every input-period frames)."""

    type_name = "StatisticsExtractionComponent"

    def __init__(self) -> None:
        self.input_dim_ = -1
        self.input_period = 1
        self.output_period = 1
        self.include_variance = True

    def input_dim(self) -> int:
        return self.input_dim_

    def output_dim(self) -> int:
        return 1 + self.input_dim_ + (self.input_dim_ if self.include_variance else 0)

    def properties(self) -> int:
        p = Prop.PROPAGATE_ADDS | Prop.REORDERS_INDEXES
        if self.include_variance:
            p |= Prop.BACKPROP_NEEDS_INPUT
        return int(p)

    def _valid(self) -> bool:
        return (self.input_dim_ > 0 and self.input_period > 0 and self.output_period > 0
                and self.output_period % self.input_period == 0)

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("input-dim")
        self.input_period = cfl.get_int("input-period", 1)
        self.output_period = cfl.get_int("output-period", 1)
        self.include_variance = cfl.get_bool("include-variance", True)
        self.input_dim_ = dim if dim is not None else -1
        if dim is None or not self._valid():
            raise self.config_error(cfl, "need input-dim > 0, input-period > 0 and "
                                         "output-period a positive multiple of input-period")
        if self._too_many_inputs():
            raise self.config_error(cfl, self._too_many_inputs())

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<InputDim>")
        self.input_dim_ = r.read_int32()
        r.expect_token("<InputPeriod>")
        self.input_period = r.read_int32()
        r.expect_token("<OutputPeriod>")
        self.output_period = r.read_int32()
        r.expect_token("<IncludeVarinance>")   # sic: Kaldi's spelling
        self.include_variance = r.read_bool()
        r.expect_token(self.closing_tag())
        if not self._valid():
            raise r.error("invalid StatisticsExtractionComponent configuration")
        if self._too_many_inputs():
            raise r.error(f"StatisticsExtractionComponent: {self._too_many_inputs()}")

    def _too_many_inputs(self) -> str:
        """A reason to refuse absurd periods ('' if fine); see
        MAX_POOLING_INPUTS (each output sums output-period/input-period inputs)."""
        span = self.output_period // self.input_period
        if span > MAX_POOLING_INPUTS:
            return (f"output-period / input-period = {span} inputs per output; at most "
                    f"{MAX_POOLING_INPUTS} are supported")
        return ""

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<InputDim>")
        w.write_int32(self.input_dim_)
        w.write_token("<InputPeriod>")
        w.write_int32(self.input_period)
        w.write_token("<OutputPeriod>")
        w.write_int32(self.output_period)
        w.write_token("<IncludeVarinance>")
        w.write_bool(self.include_variance)
        w.write_token(self.closing_tag())

    # -- compiler hooks ----------------------------------------------------
    def _input_ts(self, t: int) -> range:
        start = _period_start(t, self.output_period)
        return range(start, start + self.output_period, self.input_period)

    def get_input_indexes(self, misc_info: Any, output_index) -> list[Index]:
        n, t, x = output_index
        return list(_indexes_at_times(n, self._input_ts(t), x))

    def is_computable(self, misc_info: Any, output_index, input_index_set) -> tuple[bool, list]:
        n, t, x = output_index
        used = list(filter(input_index_set.__contains__,
                           _indexes_at_times(n, self._input_ts(t), x)))
        return bool(used), used

    def get_input_index_range(self) -> tuple[int, int, int, int, int]:
        # The block of output-period frames that t falls in, every input-period.
        return (self.output_period, 0, self.input_period,
                len(range(0, self.output_period, self.input_period)), 1)

    def reorder_indexes(self, input_indexes: list, output_indexes: list) -> tuple[list, list]:
        return sort_nxt(input_indexes), sort_nxt(output_indexes)

    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> StatisticsExtractionComponentPrecomputedIndexes:
        fast = self._precompute_indexes_arrays(index_columns(input_indexes),
                                               index_columns(output_indexes), need_backprop)
        if fast is not None:
            return fast
        # Something irregular: the loop below finds it and says what.
        return self._precompute_indexes_loop(input_indexes, output_indexes, need_backprop)

    def _precompute_indexes_arrays(self, in_cols: np.ndarray, out_cols: np.ndarray,
                                   need_backprop: bool
                                   ) -> StatisticsExtractionComponentPrecomputedIndexes | None:
        """The regular case as array operations; None if anything is off."""
        num_out = len(out_cols)
        per_output = len(range(0, self.output_period, self.input_period))
        t = out_cols[:, 1]
        start = (t // self.output_period) * self.output_period
        cand = np.repeat(out_cols, per_output, axis=0)
        cand[:, 1] = (start[:, None] + self.input_period
                      * np.arange(per_output, dtype=np.int64)[None, :]).ravel()
        pos = _positions(in_cols, cand)
        if pos is None:
            return None
        pos = pos.reshape(num_out, per_output)
        found = pos >= 0
        num_found = found.sum(axis=1)
        if num_out == 0 or (num_found == 0).any():
            return None
        # The inputs of an output must be consecutive rows, in order of t.
        first = pos[np.arange(num_out), np.argmax(found, axis=1)]
        rank = np.cumsum(found, axis=1) - 1
        if (found & (pos != first[:, None] + rank)).any():
            return None
        used = pos[found]
        if len(used) != len(in_cols) or (np.bincount(used, minlength=len(in_cols)) != 1).any():
            return None
        backward = np.empty(len(in_cols), dtype=np.int64)
        backward[used] = np.repeat(np.arange(num_out, dtype=np.int64), num_found)
        forward = list(zip(first.tolist(), (first + num_found).tolist()))
        return StatisticsExtractionComponentPrecomputedIndexes(
            forward, num_found.astype(F32), backward.tolist() if need_backprop else [])

    def _precompute_indexes_loop(self, input_indexes: list, output_indexes: list,
                                 need_backprop: bool
                                 ) -> StatisticsExtractionComponentPrecomputedIndexes:
        pos_of = {Index(*i): p for p, i in enumerate(input_indexes)}
        forward: list[tuple[int, int]] = []
        counts = np.zeros(len(output_indexes), dtype=F32)
        backward = [-1] * len(input_indexes)
        for i, (n, t, x) in enumerate(output_indexes):
            first = end = -1
            for s in self._input_ts(t):
                p = pos_of.get(Index(n, s, x))
                if p is None:
                    continue
                if first == -1:
                    first, end = p, p + 1
                else:
                    # Rows of one output must be consecutive (inputs are
                    # sorted on n, x, t); anything else is a code error.
                    if end != p:
                        raise RuntimeError("StatisticsExtractionComponent: unexpected index order")
                    end += 1
                if backward[p] != -1:
                    raise RuntimeError("StatisticsExtractionComponent: input used twice")
                backward[p] = i
            if first == -1:
                raise RuntimeError("StatisticsExtractionComponent: output with no inputs")
            forward.append((first, end))
            counts[i] = end - first
        if -1 in backward:
            raise RuntimeError("StatisticsExtractionComponent: unused input index")
        return StatisticsExtractionComponentPrecomputedIndexes(
            forward, counts, backward if need_backprop else [])

    def propagate(self, indexes: StatisticsExtractionComponentPrecomputedIndexes,
                  in_value: np.ndarray, out_value: np.ndarray):
        d = self.input_dim_
        out_value[...] = 0.0
        out_value[:, 0] = indexes.counts
        out_value[:, 1:1 + d] = _row_range_sums(in_value, indexes.forward_indexes)
        if self.include_variance:
            sq = np.square(np.asarray(in_value, dtype=F32))
            out_value[:, 1 + d:1 + 2 * d] = _row_range_sums(sq, indexes.forward_indexes)
        return None

    def backprop(self, debug_info: str,
                 indexes: StatisticsExtractionComponentPrecomputedIndexes,
                 in_value: np.ndarray | None, out_value, out_deriv: np.ndarray, memo,
                 to_update, in_deriv: np.ndarray | None) -> None:
        # Sets in_deriv: each input row gets the derivative of the sum (and,
        # with variance, 2 x times that of the sum of squares) of its output.
        if in_deriv is None:
            return
        d = self.input_dim_
        back = np.asarray(indexes.backward_indexes, dtype=np.int64)
        if back.shape[0] != in_deriv.shape[0]:
            raise ValueError("StatisticsExtractionComponent.backprop: precomputed indexes "
                             "lack backward indexes (need_backprop was false?)")
        in_deriv[...] = out_deriv[back, 1:1 + d]
        if self.include_variance:
            in_deriv += F32(2.0) * out_deriv[back, 1 + d:1 + 2 * d] * in_value


@dataclass
class StatisticsPoolingComponentPrecomputedIndexes:
    """forward_indexes[i] = input row range pooled into output i;
    backward_indexes[j] = output row range that input j contributes to."""

    forward_indexes: list[tuple[int, int]] = field(default_factory=list)
    backward_indexes: list[tuple[int, int]] = field(default_factory=list)
    type_name = "StatisticsPoolingComponentPrecomputedIndexes"

    def write(self, w: KaldiWriter) -> None:
        w.write_token(f"<{self.type_name}>")
        w.write_token("<ForwardIndexes>")
        write_int_pair_vector(w, self.forward_indexes)
        w.write_token("<BackwardIndexes>")
        write_int_pair_vector(w, self.backward_indexes)
        w.write_token(f"</{self.type_name}>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens(f"<{self.type_name}>", "<ForwardIndexes>")
        self.forward_indexes = read_int_pair_vector(r)
        r.expect_token("<BackwardIndexes>")
        self.backward_indexes = read_int_pair_vector(r)
        r.expect_token(f"</{self.type_name}>")


@register
class StatisticsPoolingComponent(Component):
    """Pools StatisticsExtraction outputs over [t-left, t+right] and turns
    them into means (optionally log-counts and standard deviations)."""

    type_name = "StatisticsPoolingComponent"

    def __init__(self) -> None:
        self.input_dim_ = -1
        self.input_period = 1
        self.left_context = -1
        self.right_context = -1
        self.num_log_count_features = 0
        self.output_stddevs = False
        self.variance_floor = f32(1.0e-10)
        # Only set in memory by batched x-vector extraction; never written.
        self.require_direct_input = False

    def input_dim(self) -> int:
        return self.input_dim_

    def output_dim(self) -> int:
        return self.input_dim_ + self.num_log_count_features - 1

    def properties(self) -> int:
        p = Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS
        if self.output_stddevs or self.num_log_count_features > 0:
            p |= Prop.BACKPROP_NEEDS_OUTPUT
        if self.num_log_count_features == 0:
            p |= Prop.BACKPROP_NEEDS_INPUT
        return int(p)

    def _check_message(self) -> str | None:
        if self.input_dim_ <= 0:
            return "input-dim must be > 0"
        if self.input_period <= 0:
            return "input-period must be > 0"
        if not (self.left_context >= 0 and self.right_context >= 0
                and self.left_context + self.right_context > 0):
            return "left-context and right-context must be >= 0 with a positive sum"
        if self.left_context % self.input_period != 0 or self.right_context % self.input_period != 0:
            return "left-context and right-context must be multiples of input-period"
        span = (self.left_context + self.right_context) // self.input_period + 1
        if span > MAX_POOLING_INPUTS:
            return (f"left-context + right-context span {span} inputs per output; at most "
                    f"{MAX_POOLING_INPUTS} are supported")
        if not (0.0 < self.variance_floor < 1.0):
            return "variance-floor must be in (0, 1)"
        if self.output_stddevs and (self.input_dim_ - 1) % 2 != 0:
            return "output-stddevs=true needs an odd input-dim (count + 2 x feature dim)"
        return None

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("input-dim")
        self.input_period = cfl.get_int("input-period", 1)
        self.left_context = cfl.get_int("left-context", -1)
        self.right_context = cfl.get_int("right-context", -1)
        self.num_log_count_features = cfl.get_int("num-log-count-features", 0)
        self.output_stddevs = cfl.get_bool("output-stddevs", False)
        self.variance_floor = f32(cfl.get_float("variance-floor", 1.0e-10))
        self.input_dim_ = dim if dim is not None else -1
        if (dim is None or self.input_dim_ <= 0 or self.left_context + self.right_context <= 0
                or self.num_log_count_features < 0):
            raise self.config_error(cfl, "invalid initializer (need input-dim > 0, "
                                         "left-context + right-context > 0, "
                                         "num-log-count-features >= 0)")
        msg = self._check_message()
        if msg:
            raise self.config_error(cfl, msg)

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<InputDim>")
        self.input_dim_ = r.read_int32()
        r.expect_token("<InputPeriod>")
        self.input_period = r.read_int32()
        r.expect_token("<LeftContext>")
        self.left_context = r.read_int32()
        r.expect_token("<RightContext>")
        self.right_context = r.read_int32()
        r.expect_token("<NumLogCountFeatures>")
        self.num_log_count_features = r.read_int32()
        r.expect_token("<OutputStddevs>")
        self.output_stddevs = r.read_bool()
        r.expect_token("<VarianceFloor>")
        self.variance_floor = r.read_float()
        r.expect_token(self.closing_tag())
        self.require_direct_input = False
        msg = self._check_message()
        if msg:
            raise r.error(f"StatisticsPoolingComponent: {msg}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<InputDim>")
        w.write_int32(self.input_dim_)
        w.write_token("<InputPeriod>")
        w.write_int32(self.input_period)
        w.write_token("<LeftContext>")
        w.write_int32(self.left_context)
        w.write_token("<RightContext>")
        w.write_int32(self.right_context)
        w.write_token("<NumLogCountFeatures>")
        w.write_int32(self.num_log_count_features)
        w.write_token("<OutputStddevs>")
        w.write_bool(self.output_stddevs)
        w.write_token("<VarianceFloor>")
        w.write_float(self.variance_floor)
        w.write_token(self.closing_tag())

    def set_require_direct_input(self, b: bool) -> None:
        self.require_direct_input = bool(b)

    # -- compiler hooks ----------------------------------------------------
    def _input_ts(self, t: int) -> range:
        return range(t - self.left_context, t + self.right_context + 1, self.input_period)

    def get_input_indexes(self, misc_info: Any, output_index) -> list[Index]:
        n, t, x = output_index
        if t % self.input_period != 0:
            # Kaldi asserts this: a descriptor such as Round(pooling, 19) asks
            # for outputs that do not exist.  It is the network's mistake, so
            # a ConfigError (one clear line), not an internal error.
            raise ConfigError(f"the network asks a StatisticsPoolingComponent for t={t}, "
                              f"which is not a multiple of its input-period "
                              f"{self.input_period} (descriptors that use its output must "
                              "ask for multiples of it)")
        return list(_indexes_at_times(n, self._input_ts(t), x))

    def is_computable(self, misc_info: Any, output_index, input_index_set) -> tuple[bool, list]:
        n, t, x = output_index
        # Outputs exist only at multiples of the input period.
        if t % self.input_period != 0:
            return False, []
        used = list(filter(input_index_set.__contains__,
                           _indexes_at_times(n, self._input_ts(t), x)))
        return bool(used), used

    def get_input_index_range(self) -> tuple[int, int, int, int, int]:
        # [t - left-context, t + right-context] every input-period; outputs
        # only at multiples of the input period.
        return (1, -self.left_context, self.input_period,
                len(self._input_ts(0)), self.input_period)

    def reorder_indexes(self, input_indexes: list, output_indexes: list) -> tuple[list, list]:
        return sort_nxt(input_indexes), sort_nxt(output_indexes)

    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> StatisticsPoolingComponentPrecomputedIndexes:
        fast = self._precompute_indexes_arrays(index_columns(input_indexes),
                                               index_columns(output_indexes), need_backprop)
        if fast is not None:
            return fast
        # Something irregular: the loop below finds it and says what.
        return self._precompute_indexes_loop(input_indexes, output_indexes, need_backprop)

    def _precompute_indexes_arrays(self, in_cols: np.ndarray, out_cols: np.ndarray,
                                   need_backprop: bool
                                   ) -> StatisticsPoolingComponentPrecomputedIndexes | None:
        """The usual case (inputs sorted on n, x, t, all at multiples of the
        input period; outputs whose input ranges advance with them) as array
        operations: each output pools one run of input rows, and each input
        row feeds one run of outputs.  None if the case is not that."""
        num_in, num_out = len(in_cols), len(out_cols)
        if num_in == 0 or num_out == 0:
            return None
        n, t, x = in_cols[:, 0], in_cols[:, 1], in_cols[:, 2]
        nx = n * (1 << 32) + (x + (1 << 31))
        if ((t == K_NO_TIME) | (t % self.input_period != 0)).any():
            return None
        # Strictly increasing in (n, x, t): sorted, no repeats.
        if num_in > 1 and not ((nx[1:] > nx[:-1]) | ((nx[1:] == nx[:-1]) & (t[1:] > t[:-1]))).all():
            return None
        group_start = np.concatenate([[True], nx[1:] != nx[:-1]])
        group_keys = nx[group_start]
        group = np.cumsum(group_start) - 1
        t_min = int(t.min())
        span = int(t.max()) - t_min + 1
        mul = span + 1
        keys = group * mul + (t - t_min)
        out_nx = out_cols[:, 0] * (1 << 32) + (out_cols[:, 2] + (1 << 31))
        g = np.searchsorted(group_keys, out_nx)
        g_ok = np.minimum(g, len(group_keys) - 1)
        if not (group_keys[g_ok] == out_nx).all():
            return None             # an output with no inputs at all
        t_out = out_cols[:, 1]
        if ((t_out - self.left_context) % self.input_period != 0).any():
            return None
        lo = np.searchsorted(keys, g_ok * mul + np.clip(t_out - self.left_context - t_min,
                                                        0, span))
        hi = np.searchsorted(keys, g_ok * mul + np.clip(t_out + self.right_context + 1 - t_min,
                                                        0, span))
        if (lo >= hi).any() or (np.diff(lo) < 0).any() or (np.diff(hi) < 0).any():
            return None
        rows = np.arange(num_in)
        first_out = np.searchsorted(hi, rows, side="right")
        end_out = np.searchsorted(lo, rows, side="right")
        if (first_out >= end_out).any():
            return None             # an input no output uses
        forward = list(zip(lo.tolist(), hi.tolist()))
        backward = list(zip(first_out.tolist(), end_out.tolist())) if need_backprop else []
        return StatisticsPoolingComponentPrecomputedIndexes(forward, backward)

    def _precompute_indexes_loop(self, input_indexes: list, output_indexes: list,
                                 need_backprop: bool
                                 ) -> StatisticsPoolingComponentPrecomputedIndexes:
        pos_of = {Index(*i): p for p, i in enumerate(input_indexes)}
        forward: list[tuple[int, int]] = []
        backward = [[-1, -1] for _ in input_indexes]
        for i, (n, t, x) in enumerate(output_indexes):
            first = end = -1
            for s in self._input_ts(t):
                p = pos_of.get(Index(n, s, x))
                if p is None:
                    continue
                if first == -1:
                    first, end = p, p + 1
                else:
                    if end != p:
                        raise RuntimeError("StatisticsPoolingComponent: unexpected index order")
                    end += 1
                b = backward[p]
                if b[0] == -1:
                    b[0], b[1] = i, i + 1
                else:
                    if b[1] != i:
                        raise RuntimeError("StatisticsPoolingComponent: unexpected index order")
                    b[1] += 1
            if first == -1:
                raise RuntimeError("StatisticsPoolingComponent: output with no inputs")
            forward.append((first, end))
        if any(b[0] == -1 for b in backward):
            raise RuntimeError("StatisticsPoolingComponent: unused input index")
        return StatisticsPoolingComponentPrecomputedIndexes(
            forward, [(a, b) for a, b in backward] if need_backprop else [])

    def propagate(self, indexes: StatisticsPoolingComponentPrecomputedIndexes,
                  in_value: np.ndarray, out_value: np.ndarray):
        nl = self.num_log_count_features
        d = self.input_dim_ - 1
        sums = _row_range_sums(in_value, indexes.forward_indexes).astype(F32)
        counts = sums[:, 0]
        out = np.zeros((len(indexes.forward_indexes), self.output_dim()), dtype=F32)
        out[:, nl:nl + d] = sums[:, 1:] / counts[:, None]
        if nl > 0:
            out[:, :nl] = np.log(counts.astype(np.float64)).astype(F32)[:, None]
        if self.output_stddevs:
            f = d // 2
            mean = out[:, nl:nl + f]
            var = out[:, nl + f:nl + 2 * f] - mean * mean
            var = np.maximum(var, F32(self.variance_floor))
            out[:, nl + f:nl + 2 * f] = np.sqrt(var)
        out_value[...] = out
        return None

    def backprop(self, debug_info: str, indexes: StatisticsPoolingComponentPrecomputedIndexes,
                 in_value: np.ndarray | None, out_value: np.ndarray | None,
                 out_deriv: np.ndarray, memo, to_update, in_deriv: np.ndarray | None) -> None:
        """BACKPROP_ADDS.  As in Kaldi the variance floor is ignored (the
        derivative is treated as if unfloored) and nothing is propagated to
        the count column (counts are not differentiable)."""
        if in_deriv is None:
            return
        nl = self.num_log_count_features
        d = self.input_dim_ - 1
        od = np.array(out_deriv, dtype=np.float64)
        if self.output_stddevs:
            f = d // 2
            mean = np.asarray(out_value[:, nl:nl + f], dtype=np.float64)
            stddev = np.asarray(out_value[:, nl + f:nl + 2 * f], dtype=np.float64)
            # d stddev / d var = 0.5 / stddev; var = E[x^2] - mean^2.
            od[:, nl + f:nl + 2 * f] *= 0.5 / stddev
            od[:, nl:nl + f] += -2.0 * mean * od[:, nl + f:nl + 2 * f]
        if nl > 0:
            counts = np.exp(np.asarray(out_value[:, 0], dtype=np.float64))
        else:
            counts = _row_range_sums(in_value[:, 0:1], indexes.forward_indexes)[:, 0]
        od /= counts[:, None]
        if len(indexes.backward_indexes) != in_deriv.shape[0]:
            raise ValueError("StatisticsPoolingComponent.backprop: precomputed indexes "
                             "lack backward indexes (need_backprop was false?)")
        in_deriv[:, 1:] += _row_range_sums(od[:, nl:nl + d],
                                           indexes.backward_indexes).astype(in_deriv.dtype)
