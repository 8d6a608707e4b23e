"""Fixed (non-trainable) linear maps of each row (Kaldi's
nnet-simple-component.{h,cc}): NoOpComponent, SumGroupComponent,
SumBlockComponent, PermuteComponent, FixedScaleComponent and
FixedBiasComponent.  FixedAffineComponent is with the other affine
components in :mod:`.affine`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ..config_line import ConfigLine
from .base import (Component, Prop, expect_or_error, fmt_g, print_parameter_stats, read_vector_file,
                   register, rng, split_ints)
from .numeric import F32, axpy_f32, seq_sum_f32


@register
class NoOpComponent(Component):
    """Copies its input; the derivative may be scaled by backprop-scale."""

    type_name = "NoOpComponent"

    def __init__(self) -> None:
        self.dim = 0
        self.backprop_scale = 1.0

    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.backprop_scale = f32(cfl.get_float("backprop-scale", 1.0))
        dim = cfl.get_int("dim")
        expect_or_error(dim is not None and dim > 0, self, cfl, "dim > 0 required")
        self.dim = dim

    def info(self) -> str:
        s = f"{self.type_name}, dim={self.dim}"
        if self.backprop_scale != 1.0:
            s += f", backprop-scale={fmt_g(self.backprop_scale)}"
        return s

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<NoOpComponent>")
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<BackpropScale>")
        w.write_float(self.backprop_scale)
        w.write_token("</NoOpComponent>")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        if r.peek_token().startswith("<V"):
            # Old format, from when NoOpComponent was a NonlinearComponent:
            # skip the statistics.
            self.backprop_scale = 1.0
            r.expect_token("<ValueAvg>")
            r.read_vector()
            r.expect_token("<DerivAvg>")
            r.read_vector()
            r.expect_token("<Count>")
            r.read_float()
            if r.peek_token().startswith("<O"):
                r.expect_token("<OderivRms>")
                r.read_vector()
                r.expect_token("<OderivCount>")
                r.read_float()
            token = r.read_token()
            if not token.startswith("<"):
                token = "<" + token
            if token == "<NumDimsSelfRepaired>":
                r.read_float()
                token = r.read_token()
            if token == "<NumDimsProcessed>":
                r.read_float()
                token = r.read_token()
            if token != "</NoOpComponent>":
                raise r.error(f"NoOpComponent: expected </NoOpComponent>, got {token[:40]}")
            return
        r.expect_token("<BackpropScale>")
        self.backprop_scale = r.read_float()
        r.expect_token("</NoOpComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        if out_value is not in_value:
            out_value[...] = in_value
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        if in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
        if self.backprop_scale != 1.0:
            in_deriv *= F32(self.backprop_scale)


@register
class SumGroupComponent(Component):
    """Output i is the sum of a contiguous group of inputs (sizes listed)."""

    type_name = "SumGroupComponent"

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self._input_dim = 0
        self._output_dim = 0
        self._starts = np.zeros(0, dtype=np.int64)
        self.reverse_indexes = np.zeros(0, dtype=np.int64)

    def input_dim(self) -> int:
        return self._input_dim

    def output_dim(self) -> int:
        return self._output_dim

    def properties(self) -> int:
        return Prop.SIMPLE

    def init_sizes(self, sizes: list[int]) -> None:
        if not sizes or any(s <= 0 for s in sizes):
            raise ValueError("SumGroupComponent: sizes must be non-empty and positive")
        self.sizes = list(sizes)
        self._input_dim = sum(sizes)
        self._output_dim = len(sizes)
        self._starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        self.reverse_indexes = np.repeat(np.arange(len(sizes)), sizes).astype(np.int64)

    def init_from_config(self, cfl: ConfigLine) -> None:
        sizes = split_ints(cfl, "sizes", ":,")
        if sizes is not None:
            expect_or_error(bool(sizes) and all(s > 0 for s in sizes), self, cfl,
                            "sizes must be positive")
            self.init_sizes(sizes)
            return
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        expect_or_error(input_dim is not None and output_dim is not None, self, cfl,
                        "sizes, or input-dim and output-dim, required")
        expect_or_error(output_dim > 0 and input_dim > 0 and input_dim % output_dim == 0,
                        self, cfl, "input-dim must be a multiple of output-dim")
        self.init_sizes([input_dim // output_dim] * output_dim)

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Sizes>")
        sizes = r.read_int_vector()
        token = r.read_token()
        if token not in ("<SumGroupComponent>", "</SumGroupComponent>"):
            raise r.error(f"SumGroupComponent: expected </SumGroupComponent>, got {token[:40]}")
        try:
            self.init_sizes(sizes)
        except ValueError as e:
            raise r.error(str(e)) from None

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<SumGroupComponent>")
        w.write_token("<Sizes>")
        w.write_int_vector(self.sizes)
        w.write_token("</SumGroupComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out = np.empty((in_value.shape[0], self._output_dim), dtype=F32)
        start = 0
        for i, size in enumerate(self.sizes):
            # Left-to-right float accumulation over the group.
            out[:, i] = seq_sum_f32(in_value[:, start:start + size], axis=1)
            start += size
        out_value[...] = out
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None:
            in_deriv[...] = out_deriv[:, self.reverse_indexes]


@register
class SumBlockComponent(Component):
    """Adds scale times the sum of the input-dim/output-dim input blocks to
    the output (the output is added to, not overwritten)."""

    type_name = "SumBlockComponent"

    def __init__(self) -> None:
        self._input_dim = 0
        self._output_dim = 0
        self.scale_ = 1.0

    def input_dim(self) -> int:
        return self._input_dim

    def output_dim(self) -> int:
        return self._output_dim

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_ADDS | Prop.BACKPROP_ADDS

    def init_from_config(self, cfl: ConfigLine) -> None:
        self.scale_ = 1.0
        input_dim = cfl.get_int("input-dim")
        output_dim = cfl.get_int("output-dim")
        if input_dim is None or output_dim is None:
            raise self.config_error(cfl, "input-dim and output-dim must both be provided.")
        if input_dim <= 0 or output_dim <= 0 or input_dim % output_dim != 0:
            raise self.config_error(cfl, f"Invalid values input-dim={input_dim} "
                                         f"output-dim={output_dim}")
        self._input_dim, self._output_dim = input_dim, output_dim
        self.scale_ = f32(cfl.get_float("scale", 1.0))

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<InputDim>")
        self._input_dim = r.read_int32()
        r.expect_token("<OutputDim>")
        self._output_dim = r.read_int32()
        r.expect_token("<Scale>")
        self.scale_ = r.read_float()
        r.expect_token("</SumBlockComponent>")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<SumBlockComponent>")
        w.write_token("<InputDim>")
        w.write_int32(self._input_dim)
        w.write_token("<OutputDim>")
        w.write_int32(self._output_dim)
        w.write_token("<Scale>")
        w.write_float(self.scale_)
        w.write_token("</SumBlockComponent>")

    def info(self) -> str:
        return (f"{self.type_name}, input-dim={self._input_dim}, output-dim={self._output_dim}"
                f", scale={fmt_g(self.scale_)}")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        d = self._output_dim
        acc = out_value.astype(F32, copy=True)
        for b in range(self._input_dim // d):
            acc = axpy_f32(self.scale_, in_value[:, b * d:(b + 1) * d], acc)
        out_value[...] = acc
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is None:
            return
        d = self._output_dim
        for b in range(self._input_dim // d):
            blk = in_deriv[:, b * d:(b + 1) * d]
            blk[...] = axpy_f32(self.scale_, out_deriv, blk)


@register
class PermuteComponent(Component):
    """Output column i is input column column_map[i]."""

    type_name = "PermuteComponent"

    def __init__(self) -> None:
        self.column_map = np.zeros(0, dtype=np.int64)
        self.reverse_column_map = np.zeros(0, dtype=np.int64)

    def input_dim(self) -> int:
        return int(self.column_map.shape[0])

    def output_dim(self) -> int:
        return int(self.column_map.shape[0])

    def properties(self) -> int:
        return Prop.SIMPLE

    def init_column_map(self, column_map: list[int]) -> None:
        dim = len(column_map)
        if dim == 0:
            raise ValueError("PermuteComponent: empty column map")
        reverse = [-1] * dim
        for i, c in enumerate(column_map):
            if not 0 <= c < dim or reverse[c] != -1:
                raise ValueError("Column map does not represent a permutation.")
            reverse[c] = i
        self.column_map = np.asarray(column_map, dtype=np.int64)
        self.reverse_column_map = np.asarray(reverse, dtype=np.int64)

    def init_from_config(self, cfl: ConfigLine) -> None:
        cmap = split_ints(cfl, "column-map", ",")
        expect_or_error(cmap is not None, self, cfl, "column-map required")
        try:
            self.init_column_map(cmap)
        except ValueError as e:
            raise self.config_error(cfl, str(e)) from None

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<ColumnMap>")
        if r.binary and r.data[r.pos:r.pos + 1] == b"F":
            # Very old models stored the map as a float vector.
            fmap = r.read_vector()
            cmap = [int(np.float32(v) + np.float32(0.5)) for v in fmap]
            if cmap:
                cmap[-1] = len(cmap) - 1
        else:
            cmap = r.read_int_vector()
        r.expect_token("</PermuteComponent>")
        try:
            self.init_column_map(cmap)
        except ValueError as e:
            raise r.error(str(e)) from None

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<PermuteComponent>")
        w.write_token("<ColumnMap>")
        w.write_int_vector(self.column_map.tolist())
        w.write_token("</PermuteComponent>")

    def info(self) -> str:
        cmap = self.column_map.tolist()
        s = f"{self.type_name}, dim={len(cmap)} , column-map=[ "
        s += "".join(f"{c} " for c in cmap[:5])
        if len(cmap) > 5:
            s += "... "
        return s + "]"

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = in_value[:, self.column_map]
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None:
            in_deriv[...] = out_deriv[:, self.reverse_column_map]


@register
class FixedScaleComponent(Component):
    """Multiplies each column by a fixed scale."""

    type_name = "FixedScaleComponent"

    def __init__(self) -> None:
        self.scales = np.zeros(0, dtype=F32)

    def input_dim(self) -> int:
        return int(self.scales.shape[0])

    def output_dim(self) -> int:
        return int(self.scales.shape[0])

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE

    def init_from_config(self, cfl: ConfigLine) -> None:
        if cfl.has("scales"):
            vec = read_vector_file(cfl, self, "scales")
            expect_or_error(not cfl.unused_values(), self, cfl, "only scales= allowed with scales")
        else:
            scale = cfl.get_float("scale")
            dim = cfl.get_int("dim")
            expect_or_error(dim is not None and not cfl.unused_values(), self, cfl,
                            "scales=<file> or dim= required")
            expect_or_error(dim > 0, self, cfl, "dim must be > 0")
            vec = (np.full(dim, scale, dtype=F32) if scale is not None else
                   rng().standard_normal(dim).astype(F32))
        expect_or_error(vec.shape[0] != 0, self, cfl, "empty scales")
        self.scales = np.ascontiguousarray(vec, dtype=F32)

    def info(self) -> str:
        return Component.info(self) + print_parameter_stats("scales", self.scales, True)

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<FixedScaleComponent>")
        w.write_token("<Scales>")
        w.write_vector(self.scales)
        w.write_token("</FixedScaleComponent>")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Scales>")
        self.scales = r.read_vector()
        r.expect_token("</FixedScaleComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = in_value * self.scales
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None:
            in_deriv[...] = out_deriv * self.scales


@register
class FixedBiasComponent(Component):
    """Adds a fixed bias vector to each row."""

    type_name = "FixedBiasComponent"

    def __init__(self) -> None:
        self.bias = np.zeros(0, dtype=F32)

    def input_dim(self) -> int:
        return int(self.bias.shape[0])

    def output_dim(self) -> int:
        return int(self.bias.shape[0])

    def properties(self) -> int:
        return Prop.SIMPLE | Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE

    def init_from_config(self, cfl: ConfigLine) -> None:
        if cfl.has("bias"):
            vec = read_vector_file(cfl, self, "bias")
            expect_or_error(not cfl.unused_values(), self, cfl, "only bias= allowed with bias")
        else:
            dim = cfl.get_int("dim")
            expect_or_error(dim is not None and not cfl.unused_values(), self, cfl,
                            "bias=<file> or dim= required")
            expect_or_error(dim > 0, self, cfl, "dim must be > 0")
            vec = rng().standard_normal(dim).astype(F32)
        expect_or_error(vec.shape[0] != 0, self, cfl, "empty bias")
        self.bias = np.ascontiguousarray(vec, dtype=F32)

    def info(self) -> str:
        return Component.info(self) + print_parameter_stats("bias", self.bias, True)

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<FixedBiasComponent>")
        w.write_token("<Bias>")
        w.write_vector(self.bias)
        w.write_token("</FixedBiasComponent>")

    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Bias>")
        self.bias = r.read_vector()
        r.expect_token("</FixedBiasComponent>")

    def propagate(self, indexes: Any, in_value: np.ndarray, out_value: np.ndarray) -> Any:
        out_value[...] = in_value + self.bias
        return None

    def backprop(self, debug_info: str, indexes: Any, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo: Any,
                 to_update: Component | None, in_deriv: np.ndarray | None) -> None:
        if in_deriv is not None and in_deriv is not out_deriv:
            in_deriv[...] = out_deriv
