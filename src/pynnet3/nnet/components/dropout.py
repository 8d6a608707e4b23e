"""Dropout and random masking: DropoutComponent (Kaldi's
nnet-simple-component.{h,cc}) and, from nnet-general-component.{h,cc},
the RandomComponent base with DropoutMaskComponent, GeneralDropoutComponent
and SpecAugmentTimeMaskComponent.

Random masks are drawn from NumPy's generator (:func:`base.rng`); Kaldi uses
its own CuRand / rand() streams, which cannot be reproduced, so training-mode
masks differ from Kaldi's draw by draw (their distribution is the same).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine
from ..index import Index, first_appearance_numbers, index_columns
from .base import Component, Prop, expect_or_error, fmt_bool, fmt_g, register, reshape_rows, rng
from .numeric import F32


def _rand_int(lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi] (Kaldi's RandInt)."""
    return int(rng().integers(lo, hi + 1))


class RandomComponent(Component):
    """Kaldi's RandomComponent: a test-mode flag and a random generator."""

    def __init__(self) -> None:
        self.test_mode = False

    def set_test_mode(self, test_mode: bool) -> None:
        self.test_mode = bool(test_mode)

    def reset_generator(self) -> None:
        """Kaldi reseeds its GPU generator here; NumPy's is process-wide."""


@register
class DropoutComponent(Component):
    """Zeroes a random proportion of the input (per element or per frame);
    in test mode scales by (1 - proportion) instead."""

    type_name = "DropoutComponent"

    def __init__(self) -> None:
        self.dim = 0
        self.dropout_proportion = 0.0
        self.dropout_per_frame = False
        self.test_mode = False

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        return (Prop.BACKPROP_IN_PLACE | Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT
                | Prop.BACKPROP_NEEDS_OUTPUT | Prop.RANDOM)

    def set_test_mode(self, test_mode: bool) -> None:
        self.test_mode = bool(test_mode)

    def set_dropout_proportion(self, proportion: float) -> None:
        self.dropout_proportion = f32(proportion)

    def reset_generator(self) -> None:
        """Kaldi reseeds its GPU generator here; NumPy's generator is process-wide."""

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.test_mode = False
        dim = cfl.get_int("dim")
        prop = cfl.get_float("dropout-proportion")
        self.dropout_per_frame = cfl.get_bool("dropout-per-frame", False)
        self.test_mode = cfl.get_bool("test-mode", False)
        expect_or_error(dim is not None and prop is not None and dim > 0
                        and 0.0 <= prop <= 1.0, self, cfl,
                        "dim > 0 and dropout-proportion in [0, 1] required")
        self.dim = dim
        self.dropout_proportion = f32(prop)

    def info(self) -> str:
        return (f"{self.type_name}, dim={self.dim}, dropout-proportion="
                f"{fmt_g(self.dropout_proportion)}, dropout-per-frame="
                f"{'true' if self.dropout_per_frame else 'false'}")

    def read(self, r: KaldiReader) -> None:
        token = r.read_token()
        if token == "<DropoutComponent>":
            token = r.read_token()
        if token != "<Dim>":
            raise r.error(f"DropoutComponent: expected <Dim>, got {token[:40]}")
        self.dim = r.read_int32()
        r.expect_token("<DropoutProportion>")
        self.dropout_proportion = r.read_float()
        token = r.read_token()
        if token == "<DropoutPerFrame>":
            self.dropout_per_frame = r.read_bool()
            token = r.read_token()
        else:
            self.dropout_per_frame = False
        if token == "<TestMode>":
            self.test_mode = r.read_bool()
            r.expect_token("</DropoutComponent>")
        else:
            self.test_mode = False
            if token != "</DropoutComponent>":
                raise r.error(f"DropoutComponent: expected </DropoutComponent>, got {token[:40]}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<DropoutComponent>")
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<DropoutProportion>")
        w.write_float(self.dropout_proportion)
        w.write_token("<DropoutPerFrame>")
        w.write_bool(self.dropout_per_frame)
        w.write_token("<TestMode>")
        w.write_bool(self.test_mode)
        w.write_token("</DropoutComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        p = self.dropout_proportion
        if self.test_mode:
            out_value[...] = in_value * F32(1.0 - p)
            return None
        # Not Kaldi's CuRand stream: the masks are random all the same.
        if not self.dropout_per_frame:
            mask = (rng().random(in_value.shape, dtype=F32) - F32(p) > 0).astype(F32)
        else:
            mask = (rng().random((in_value.shape[0], 1), dtype=F32) - F32(p) > 0).astype(F32)
        out_value[...] = mask * in_value
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        # SetMatMatDivMat: out_deriv * out_value / in_value, or out_deriv
        # itself where the input is zero.
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = out_deriv * out_value / in_value
        in_deriv[...] = np.where(in_value == 0, out_deriv, ratio)


@register
class DropoutMaskComponent(RandomComponent):
    """Outputs a random 0/1 (or continuous) dropout mask; needs no input."""

    type_name = "DropoutMaskComponent"

    def __init__(self) -> None:
        super().__init__()
        self.output_dim_ = -1
        self.dropout_proportion = 0.5
        self.continuous = False

    def input_dim(self) -> int:
        return self.output_dim_

    def output_dim(self) -> int:
        return self.output_dim_

    def properties(self) -> int:
        return int(Prop.RANDOM)

    def set_dropout_proportion(self, p: float) -> None:
        self.dropout_proportion = f32(p)

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("output-dim")
        if dim is None or dim <= 0:
            raise self.config_error(cfl, "output-dim must be given and > 0")
        self.output_dim_ = dim
        self.dropout_proportion = f32(cfl.get_float("dropout-proportion", 0.5))
        self.continuous = cfl.get_bool("continuous", False)
        self.test_mode = cfl.get_bool("test-mode", False)

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<OutputDim>")
        self.output_dim_ = r.read_int32()
        r.expect_token("<DropoutProportion>")
        self.dropout_proportion = r.read_float()
        if r.peek_char() == "T":
            r.expect_token("<TestMode>")
            self.test_mode = r.read_bool()
        else:
            self.test_mode = False
        if r.peek_char() == "C":
            r.expect_token("<Continuous>")
            self.continuous = True
        else:
            self.continuous = False
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<OutputDim>")
        w.write_int32(self.output_dim_)
        w.write_token("<DropoutProportion>")
        w.write_float(self.dropout_proportion)
        w.write_token("<TestMode>")
        w.write_bool(self.test_mode)
        if self.continuous:
            w.write_token("<Continuous>")
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = (f"{self.type_name}, output-dim={self.output_dim_}"
             f", dropout-proportion={fmt_g(self.dropout_proportion)}")
        if self.continuous:
            s += ", continuous=true"
        return s

    def get_input_indexes(self, misc_info: Any, output_index) -> list[Index]:
        return []

    def is_computable(self, misc_info: Any, output_index, input_index_set) -> tuple[bool, list]:
        return True, []

    def propagate(self, indexes, in_value, out_value: np.ndarray):
        p = self.dropout_proportion
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"DropoutMaskComponent: bad dropout-proportion {p}")
        if p == 0:
            out_value[...] = 1.0
            return None
        if self.continuous:
            if self.test_mode:
                out_value[...] = 1.0
            else:
                u = rng().random(out_value.shape, dtype=F32)
                out_value[...] = u * F32(p * 4.0) + F32(1.0 - 2.0 * p)
            return None
        if self.test_mode:
            out_value[...] = F32(1.0 - p)
            return None
        u = rng().random(out_value.shape, dtype=F32)
        mask = (u - F32(p) > 0).astype(F32)
        if out_value.shape[1] in (2, 3):
            # For LSTMs: never drop both of the first two columns in a row.
            v = rng().random(out_value.shape[0], dtype=F32)
            mask[:, 0] = (v - F32(p) > 0)
            mask[:, 1] = ((F32(1.0 - p) - v) > 0)
        out_value[...] = mask
        return None

    def backprop(self, debug_info: str, indexes, in_value, out_value, out_deriv, memo,
                 to_update, in_deriv) -> None:
        """Nothing to do: there is no input, and nothing to update."""


def _dropout_rows_tiled(input_indexes: list, output_indexes: list, time_period: int
                        ) -> tuple[int, np.ndarray] | None:
    """GeneralDropoutComponent's mask-row numbering worked out on the base of
    an n-tiled list (see :class:`~pynnet3.nnet.index_lists.NTiling`; the
    lists of a computation loaded from the cache), or None where that does
    not apply (no tiling, output not the same list, base n values not all 0).

    With the base's n all 0, row (block b, copy k, position j) has key
    (k, g) where g = t // time-period of base row (b, j).  Key (k, g) first
    appears in copy k of the block where g first appears in the base, so in
    order of first appearance the keys come block by block, in each block
    copy by copy, and in each copy in the order of the g's that first appear
    in that block.
    """
    tiling = getattr(input_indexes, "n_tiling", None)
    if tiling is None or tiling.n_col != 0:
        return None
    if output_indexes is not input_indexes:
        other = getattr(output_indexes, "n_tiling", None)
        if (other is None or (other.num_n, other.n_stride) != (tiling.num_n, tiling.n_stride)
                or not np.array_equal(other.base, tiling.base)):
            return None
    base = np.asarray(tiling.base, dtype=np.int64)
    if base[:, 0].any():
        return None
    num_n, stride = tiling.num_n, tiling.n_stride
    g = base[:, 1] // time_period if time_period != 0 else np.zeros(len(base), dtype=np.int64)
    num_g, u = first_appearance_numbers(g)
    # (u numbers the g's by first appearance, so their first positions and
    # blocks increase with u.)
    _, first_pos = np.unique(u, return_index=True)
    block = first_pos // stride
    start = np.searchsorted(block, block, side="left")     # first g of each g's block
    count = np.searchsorted(block, block, side="right") - start
    k = np.arange(num_n, dtype=np.int64)[None, :, None]
    rows = ((num_n * start[u] + u - start[u]).reshape(-1, 1, stride)
            + k * count[u].reshape(-1, 1, stride))
    return num_n * num_g, rows.reshape(-1)


@dataclass
class GeneralDropoutComponentPrecomputedIndexes:
    """``indexes[i]`` is the mask row for (reshaped) row i of the data."""

    num_mask_rows: int = 0
    indexes: list[int] = field(default_factory=list)
    type_name = "GeneralDropoutComponentPrecomputedIndexes"

    def write(self, w: KaldiWriter) -> None:
        w.write_token(f"<{self.type_name}>")
        w.write_token("<NumMaskRows>")
        w.write_int32(self.num_mask_rows)
        w.write_token("<Indexes>")
        w.write_int_vector(self.indexes)
        w.write_token(f"</{self.type_name}>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens(f"<{self.type_name}>", "<NumMaskRows>")
        self.num_mask_rows = r.read_int32()
        r.expect_token("<Indexes>")
        self.indexes = r.read_int_vector()
        r.expect_token(f"</{self.type_name}>")


@register
class GeneralDropoutComponent(RandomComponent):
    """Dropout with masks shared over time (or over time-period blocks), per
    sequence, optionally per block of block-dim; also the frequency part of
    SpecAugment (specaugment-max-proportion)."""

    type_name = "GeneralDropoutComponent"

    def __init__(self) -> None:
        super().__init__()
        self.dim = -1
        self.block_dim = -1
        self.time_period = 0
        self.dropout_proportion = 0.5
        self.specaugment_max_proportion = 0.0
        self.specaugment_max_regions = 1
        self.continuous = False

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        p = Prop.RANDOM | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE | Prop.USES_MEMO
        if self.block_dim != self.dim:
            p |= Prop.INPUT_CONTIGUOUS | Prop.OUTPUT_CONTIGUOUS
        return int(p)

    def set_dropout_proportion(self, p: float) -> None:
        self.dropout_proportion = f32(p)

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("dim")
        if dim is None or dim <= 0:
            raise self.config_error(cfl, "dim must be given and > 0")
        self.dim = dim
        self.block_dim = cfl.get_int("block-dim", dim)
        if not (self.block_dim > 0 and self.dim % self.block_dim == 0):
            raise self.config_error(cfl, f"invalid configuration dim={self.dim}, "
                                         f"block-dim={self.block_dim}")
        self.time_period = cfl.get_int("time-period", 0)
        self.dropout_proportion = f32(cfl.get_float("dropout-proportion", 0.5))
        self.specaugment_max_proportion = f32(cfl.get_float("specaugment-max-proportion", 0.0))
        self.specaugment_max_regions = cfl.get_int("specaugment-max-regions", 1)
        self.continuous = cfl.get_bool("continuous", False)
        self.test_mode = cfl.get_bool("test-mode", False)
        if self.specaugment_max_proportion != 0.0:
            if (self.specaugment_max_proportion < 0.0 or self.specaugment_max_proportion > 1.0
                    or self.continuous or self.specaugment_max_regions < 1):
                raise self.config_error(
                    cfl, f"invalid config values: specaugment-max-proportion = "
                         f"{fmt_g(self.specaugment_max_proportion)}, continuous = "
                         f"{fmt_bool(self.continuous)}, specaugment-max-regions = "
                         f"{self.specaugment_max_regions}")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        r.expect_token("<BlockDim>")
        self.block_dim = r.read_int32()
        r.expect_token("<TimePeriod>")
        self.time_period = r.read_int32()
        r.expect_token("<DropoutProportion>")
        self.dropout_proportion = r.read_float()
        self.specaugment_max_proportion = 0.0
        self.specaugment_max_regions = 1
        if r.peek_char() == "S":
            r.expect_token("<SpecAugmentMaxProportion>")
            self.specaugment_max_proportion = r.read_float()
            if r.peek_char() == "S":
                r.expect_token("<SpecAugmentMaxRegions>")
                self.specaugment_max_regions = r.read_int32()
        self.test_mode = r.peek_char() == "T"
        if self.test_mode:
            r.expect_token("<TestMode>")
        self.continuous = r.peek_char() == "C"
        if self.continuous:
            r.expect_token("<Continuous>")
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<BlockDim>")
        w.write_int32(self.block_dim)
        w.write_token("<TimePeriod>")
        w.write_int32(self.time_period)
        w.write_token("<DropoutProportion>")
        w.write_float(self.dropout_proportion)
        if self.specaugment_max_proportion:
            w.write_token("<SpecAugmentMaxProportion>")
            w.write_float(self.specaugment_max_proportion)
            if self.specaugment_max_regions != 1:
                w.write_token("<SpecAugmentMaxRegions>")
                w.write_int32(self.specaugment_max_regions)
        if self.test_mode:
            w.write_token("<TestMode>")
        if self.continuous:
            w.write_token("<Continuous>")
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = (f"{self.type_name}, dim={self.dim}, block-dim={self.block_dim}"
             f", dropout-proportion={fmt_g(self.dropout_proportion)}")
        if self.continuous:
            s += ", continuous=true"
        if self.specaugment_max_proportion != 0:
            s += (f", specaugment-max-proportion={fmt_g(self.specaugment_max_proportion)}"
                  f", specaugment-max-regions={self.specaugment_max_regions}")
        if self.time_period > 0:
            s += f", time-period={self.time_period}"
        return s

    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> GeneralDropoutComponentPrecomputedIndexes:
        # One mask row per (n, t // time-period) in order of first appearance
        # (t is ignored when time-period is 0); x never matters.
        tiled = _dropout_rows_tiled(input_indexes, output_indexes, self.time_period)
        if tiled is not None:
            num_mask_rows, rows = tiled
        else:
            in_cols, out_cols = index_columns(input_indexes), index_columns(output_indexes)
            if in_cols.shape != out_cols.shape or not np.array_equal(in_cols, out_cols):
                raise RuntimeError("GeneralDropoutComponent: input and output indexes differ")
            keys = np.zeros((len(in_cols), 2), dtype=np.int64)
            keys[:, 0] = in_cols[:, 0]
            if self.time_period != 0:
                keys[:, 1] = in_cols[:, 1] // self.time_period
            num_mask_rows, rows = first_appearance_numbers(keys)
        multiple = self.dim // self.block_dim
        if multiple == 1:
            return GeneralDropoutComponentPrecomputedIndexes(num_mask_rows, rows.tolist())
        # With blocks, each data row becomes `multiple` rows of block-dim that
        # share its mask row.
        return GeneralDropoutComponentPrecomputedIndexes(num_mask_rows * multiple,
                                                         np.repeat(rows, multiple).tolist())

    def _get_memo(self, num_mask_rows: int) -> np.ndarray:
        """The random mask, num_mask_rows x block_dim."""
        bd = self.block_dim
        if self.specaugment_max_proportion != 0.0:
            mask = np.ones((num_mask_rows, bd), dtype=F32)
            max_zeroed = int(bd * self.specaugment_max_proportion + 0.5)
            for seq in range(num_mask_rows):
                this_mask = mask[seq]
                num_zeroed = _rand_int(0, max_zeroed)
                if num_zeroed == 0:
                    continue
                # The zeroed band may wrap around the top of the spectrum.
                start = _rand_int(0, bd - 1)
                for i in range(start, start + num_zeroed):
                    this_mask[i % bd] = 0.0
                # To make up to max-regions bands, flip a random half-circle
                # of the spectrum (swap pairs around its centre).
                for _ in range(1, self.specaugment_max_regions):
                    half = bd // 2
                    quarter = half // 2
                    s = _rand_int(0, bd - 1)
                    e = s + half
                    for i in range(quarter):
                        a, b = (s + i) % bd, (e - i) % bd
                        this_mask[a], this_mask[b] = this_mask[b], this_mask[a]
            return mask
        p = F32(self.dropout_proportion)
        u = rng().random((num_mask_rows, bd), dtype=F32)
        if not self.continuous:
            return ((u - p > 0).astype(F32) * F32(1.0 / (1.0 - p))).astype(F32)
        return (u * F32(p * 4.0) + F32(1.0 - 2.0 * p)).astype(F32)

    def propagate(self, indexes: GeneralDropoutComponentPrecomputedIndexes,
                  in_value: np.ndarray, out_value: np.ndarray):
        if out_value is not in_value:
            out_value[...] = in_value
        if self.test_mode or (self.dropout_proportion == 0.0
                              and self.specaugment_max_proportion == 0.0):
            return None
        mask = self._get_memo(indexes.num_mask_rows)
        per_row = mask[np.asarray(indexes.indexes, dtype=np.int64)]
        rows = out_value.shape[0]
        out_value[...] = (np.asarray(out_value).reshape(-1, self.block_dim) * per_row).reshape(
            rows, self.dim)
        return mask

    def backprop(self, debug_info: str, indexes: GeneralDropoutComponentPrecomputedIndexes,
                 in_value, out_value, out_deriv: np.ndarray, memo, to_update,
                 in_deriv: np.ndarray | None) -> None:
        # Sets in_deriv (may be out_deriv: BACKPROP_IN_PLACE): the same mask.
        if in_deriv is None:
            return
        if in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
        if self.test_mode or (self.dropout_proportion == 0.0
                              and self.specaugment_max_proportion == 0.0):
            return
        if memo is None:
            raise ValueError("GeneralDropoutComponent.backprop needs the mask from propagate")
        per_row = memo[np.asarray(indexes.indexes, dtype=np.int64)]
        reshape_rows(in_deriv, self.block_dim)[...] *= per_row


@dataclass
class SpecAugmentTimeMaskComponentPrecomputedIndexes:
    """For each sequence (distinct n, in increasing order) the data rows of
    its frames in increasing t; tot_size is the total number of rows."""

    indexes: list[list[int]] = field(default_factory=list)
    tot_size: int = 0
    type_name = "SpecAugmentTimeMaskComponentPrecomputedIndexes"

    def write(self, w: KaldiWriter) -> None:
        w.write_token(f"<{self.type_name}>")
        w.write_token("<Indexes>")
        w.write_int32(len(self.indexes))
        for v in self.indexes:
            w.write_int_vector(v)
        w.write_token(f"</{self.type_name}>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens(f"<{self.type_name}>", "<Indexes>")
        size = r.read_int32()
        if size < 0:
            raise r.error(f"negative size {size}")
        self.indexes = [r.read_int_vector() for _ in range(size)]
        r.expect_token(f"</{self.type_name}>")
        self.tot_size = sum(len(v) for v in self.indexes)


@register
class SpecAugmentTimeMaskComponent(RandomComponent):
    """The time part of SpecAugment: zeroes many short random time regions."""

    type_name = "SpecAugmentTimeMaskComponent"

    def __init__(self) -> None:
        super().__init__()
        self.dim = -1
        self.zeroed_proportion = 0.25
        self.time_mask_max_frames = 10

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        return int(Prop.RANDOM | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE
                   | Prop.USES_MEMO)

    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("dim")
        if dim is None or dim <= 0:
            raise self.config_error(cfl, "dim must be given and > 0")
        self.dim = dim
        self.zeroed_proportion = f32(cfl.get_float("zeroed-proportion", 0.25))
        self.time_mask_max_frames = cfl.get_int("time-mask-max-frames", 10)
        if self.time_mask_max_frames <= 1:
            raise self.config_error(cfl, "time-mask-max-frames must be > 1")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        r.expect_token("<ZeroedProportion>")
        self.zeroed_proportion = r.read_float()
        r.expect_token("<TimeMaskMaxFrames>")
        self.time_mask_max_frames = r.read_int32()
        self.test_mode = r.peek_char() == "T"
        if self.test_mode:
            r.expect_token("<TestMode>")
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<ZeroedProportion>")
        w.write_float(self.zeroed_proportion)
        w.write_token("<TimeMaskMaxFrames>")
        w.write_int32(self.time_mask_max_frames)
        if self.test_mode:
            w.write_token("<TestMode>")
        w.write_token(self.closing_tag())

    def info(self) -> str:
        return (f"{self.type_name}, dim={self.dim}"
                f", zeroed-proportion={fmt_g(self.zeroed_proportion)}"
                f", time-mask-max-frames={self.time_mask_max_frames}")

    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> SpecAugmentTimeMaskComponentPrecomputedIndexes:
        if list(input_indexes) != list(output_indexes):
            raise RuntimeError("SpecAugmentTimeMaskComponent: input and output indexes differ")
        if not input_indexes:
            raise RuntimeError("SpecAugmentTimeMaskComponent: no indexes")
        order = sorted((idx[0], idx[1], i) for i, idx in enumerate(input_indexes))
        seqs: list[list[int]] = []
        cur_n = None
        for n, _t, i in order:
            if n != cur_n:
                seqs.append([])
                cur_n = n
            seqs[-1].append(i)
        return SpecAugmentTimeMaskComponentPrecomputedIndexes(seqs, len(input_indexes))

    def _get_memo(self, pi: SpecAugmentTimeMaskComponentPrecomputedIndexes) -> np.ndarray:
        z = self.zeroed_proportion
        max_zeroed = self.time_mask_max_frames
        # int * float / float in C++ float arithmetic, truncated to int.
        max_kept = int(F32(max_zeroed) * F32(1 - F32(z)) / F32(z))
        if max_zeroed <= 0 or max_kept <= 0:
            raise ValueError("SpecAugmentTimeMaskComponent: zeroed-proportion too large")
        mask = np.zeros(pi.tot_size, dtype=F32)
        for rows in pi.indexes:
            t = 0
            while t < len(rows):
                # Alternate kept and zeroed stretches; the first kind is random.
                if t > 0 or rng().random() < z:
                    k = _rand_int(1, max_kept)
                    while t < len(rows) and k > 0:
                        mask[rows[t]] = 1.0
                        t += 1
                        k -= 1
                k = _rand_int(1, max_zeroed)
                while t < len(rows) and k > 0:
                    mask[rows[t]] = 0.0
                    t += 1
                    k -= 1
        return mask

    def propagate(self, indexes: SpecAugmentTimeMaskComponentPrecomputedIndexes,
                  in_value: np.ndarray, out_value: np.ndarray):
        if out_value is not in_value:
            out_value[...] = in_value
        if self.test_mode or self.zeroed_proportion == 0.0:
            return None
        mask = self._get_memo(indexes)
        out_value *= mask[:, None]
        return mask

    def backprop(self, debug_info: str,
                 indexes: SpecAugmentTimeMaskComponentPrecomputedIndexes, in_value, out_value,
                 out_deriv: np.ndarray, memo, to_update, in_deriv: np.ndarray | None) -> None:
        # Sets in_deriv (may be out_deriv): the rows zeroed forward are zeroed.
        if in_deriv is None:
            return
        if in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
        if self.test_mode or self.zeroed_proportion == 0.0:
            return
        if memo is None:
            raise ValueError("SpecAugmentTimeMaskComponent.backprop needs the mask")
        in_deriv *= memo[:, None]
