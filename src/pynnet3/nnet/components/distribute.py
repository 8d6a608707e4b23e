"""DistributeComponent (Kaldi's nnet-general-component.{h,cc}): splits each
input row into blocks and sends block b to a different x index of the output,
a general (non-simple) component with precomputed indexes.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, read_int_pair_vector, write_int_pair_vector
from ..config_line import ConfigLine
from ..index import Index
from .base import Component, register


@dataclass
class DistributeComponentPrecomputedIndexes:
    """For each output row: (input row, first input column of its block)."""

    pairs: list[tuple[int, int]] = field(default_factory=list)
    type_name = "DistributeComponentPrecomputedIndexes"

    def write(self, w: KaldiWriter) -> None:
        w.write_token(f"<{self.type_name}>")
        w.write_token("<Pairs>")
        write_int_pair_vector(w, self.pairs)
        w.write_token(f"</{self.type_name}>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens(f"<{self.type_name}>", "<Pairs>")
        self.pairs = read_int_pair_vector(r)
        r.expect_token(f"</{self.type_name}>")


@register
class DistributeComponent(Component):
    """Splits the input dim into blocks of output-dim and sends block b of
    input x to output x * num_blocks + b (floor division for negative x)."""

    type_name = "DistributeComponent"

    def __init__(self) -> None:
        self.input_dim_ = 0
        self.output_dim_ = 0

    def input_dim(self) -> int:
        return self.input_dim_

    def output_dim(self) -> int:
        return self.output_dim_

    def properties(self) -> int:
        return 0

    def init(self, input_dim: int, output_dim: int) -> None:
        if not (input_dim > 0 and output_dim > 0 and input_dim % output_dim == 0):
            raise ValueError(f"DistributeComponent: bad dims {input_dim}, {output_dim}")
        self.input_dim_ = input_dim
        self.output_dim_ = output_dim

    def init_from_config(self, cfl: ConfigLine) -> None:
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        if (input_dim is None or output_dim is None or input_dim <= 0 or output_dim <= 0
                or input_dim % output_dim != 0):
            raise self.config_error(cfl, "need input-dim and output-dim > 0, "
                                         "input-dim a multiple of output-dim")
        self.init(input_dim, output_dim)

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<InputDim>")
        self.input_dim_ = r.read_int32()
        r.expect_token("<OutputDim>")
        self.output_dim_ = r.read_int32()
        r.expect_token(self.closing_tag())

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<InputDim>")
        w.write_int32(self.input_dim_)
        w.write_token("<OutputDim>")
        w.write_int32(self.output_dim_)
        w.write_token(self.closing_tag())

    # -- compiler hooks ----------------------------------------------------
    def _input_index_and_block(self, output_index) -> tuple[Index, int]:
        num_blocks = self.input_dim_ // self.output_dim_
        n, t, x = output_index
        input_x = x // num_blocks
        return Index(n, t, input_x), x - input_x * num_blocks

    def get_input_indexes(self, misc_info: Any, output_index) -> list[Index]:
        return [self._input_index_and_block(output_index)[0]]

    def is_computable(self, misc_info: Any, output_index, input_index_set) -> tuple[bool, list]:
        input_index = self._input_index_and_block(output_index)[0]
        if input_index not in input_index_set:
            return False, []
        return True, [input_index]

    def precompute_indexes(self, misc_info: Any, input_indexes: list, output_indexes: list,
                           need_backprop: bool) -> DistributeComponentPrecomputedIndexes:
        row_of = {Index(*i): row for row, i in enumerate(input_indexes)}
        block_size = self.output_dim_
        pairs = []
        for o in output_indexes:
            input_index, block = self._input_index_and_block(o)
            row = row_of.get(input_index)
            if row is None:
                raise RuntimeError("DistributeComponent: input index not found (code error)")
            pairs.append((row, block * block_size))
        return DistributeComponentPrecomputedIndexes(pairs)

    def propagate(self, indexes: DistributeComponentPrecomputedIndexes,
                  in_value: np.ndarray, out_value: np.ndarray):
        d = self.output_dim_
        for i, (row, col) in enumerate(indexes.pairs):
            out_value[i] = in_value[row, col:col + d]
        return None

    def backprop(self, debug_info: str, indexes: DistributeComponentPrecomputedIndexes,
                 in_value, out_value, out_deriv: np.ndarray, memo, to_update,
                 in_deriv: np.ndarray | None) -> None:
        # Each output row is a copy of one block of one input row: copy back.
        if in_deriv is None:
            return
        num_blocks = self.input_dim_ // self.output_dim_
        if out_deriv.shape[0] != in_deriv.shape[0] * num_blocks:
            in_deriv[...] = 0.0         # some input blocks are never used
        pairs = np.asarray(indexes.pairs, dtype=np.int64).reshape(-1, 2)
        cols = pairs[:, 1:2] + np.arange(self.output_dim_)
        in_deriv[pairs[:, 0:1], cols] = out_deriv
