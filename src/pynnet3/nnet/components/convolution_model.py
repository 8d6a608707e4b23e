"""Kaldi's time-height convolution model and the compilation of its computation.

This is the structural part of ``TimeHeightConvolutionComponent`` (Kaldi's
``nnet3/convolution.{h,cc}``, namespace ``time_height_convolution``):

* :class:`ConvolutionModel`: filters in/out, heights, the (time, height)
  offsets of the kernel and the required time offsets; its file format and
  ``Info()`` text.
* :class:`ConvolutionComputationIo` and :func:`compile_convolution_computation`:
  given the Indexes available at the input and requested at the output, put
  them on a regular (t, image) grid, padding with blank indexes (t=kNoTime),
  and work out the steps of the computation: one matrix multiply per distinct
  time offset, on a column-mapped copy of a row range of the input.
* :func:`convolve_forward`: the forward computation with NumPy.

The time axis is identified with the 't' of the Indexes; a row of the input
matrix is one (t, image) pair and holds ``height_in * num_filters_in`` values,
the filter index having stride one.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from ...io.kaldi_io import KaldiReader, KaldiWriter
from ..index import K_NO_TIME, Index, index_columns


# ---------------------------------------------------------------------------
# Integer-pair vectors (Kaldi's Read/WriteIntegerPairVector for int32)

_PAIR_RE = re.compile(rb"([-+]?\d+),\s*([-+]?\d+)")


def write_int_pair_vector(w: KaldiWriter, pairs: list[tuple[int, int]]) -> None:
    if w.binary:
        w.write_raw(b"\x04" + np.int32(len(pairs)).tobytes())
        if pairs:
            w.write_raw(np.asarray(pairs, dtype="<i4").reshape(-1).tobytes())
    else:
        w.write_raw("[ " + "".join(f"{a},{b} " for a, b in pairs) + "]\n")


def read_int_pair_vector(r: KaldiReader) -> list[tuple[int, int]]:
    data = r.data
    if r.binary:
        if r.pos + 5 > len(data) or data[r.pos] != 4:
            raise r.error("expected an int32 pair vector (size byte 4)")
        n = int(np.frombuffer(data, dtype="<i4", count=1, offset=r.pos + 1)[0])
        r.pos += 5
        if n < 0 or r.pos + 8 * n > len(data):
            raise r.error(f"bad or truncated integer pair vector of size {n}")
        arr = np.frombuffer(data, dtype="<i4", count=2 * n, offset=r.pos)
        r.pos += 8 * n
        return [(int(arr[2 * i]), int(arr[2 * i + 1])) for i in range(n)]
    pos = r.pos
    while pos < len(data) and data[pos] in b" \t\n\r\v\f":
        pos += 1
    if pos >= len(data) or data[pos:pos + 1] != b"[":
        r.pos = pos
        raise r.error("expected '[' at the start of an integer pair vector")
    end = data.find(b"]", pos)
    if end < 0:
        r.pos = pos
        raise r.error("unterminated integer pair vector")
    body = data[pos + 1:end]
    pairs = [(int(m.group(1)), int(m.group(2))) for m in _PAIR_RE.finditer(body)]
    if _PAIR_RE.sub(b"", body).strip() or any(
            not -2 ** 31 <= v < 2 ** 31 for pair in pairs for v in pair):
        r.pos = pos
        raise r.error("bad integer pair vector (expected int32 items like 1,2)")
    r.pos = end + 1
    return pairs


# ---------------------------------------------------------------------------


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _first_uncovered(intervals: list[tuple[int, int]], size: int) -> int | None:
    """The smallest j in [0, size) in none of the half-open ``intervals``."""
    covered = 0
    for lo, hi in sorted(intervals):
        if lo > covered:
            break
        covered = max(covered, hi)
    return covered if covered < size else None


def _first_unused_height(height_in: int, s: int, offsets: list[tuple[int, int]],
                         ranges: list[tuple[int, int]]) -> int | None:
    """The smallest input height that no (output height, offset) reads.

    Output k reads height k * s + h_off: for offsets with h_off = r (mod s)
    that is j * s + r with j = k + h_off // s, so each residue class r is
    covered by intervals of j."""
    by_residue: dict[int, list[tuple[int, int]]] = {}
    for (_, h_off), (lo, hi) in zip(offsets, ranges):
        if lo < hi:
            q = h_off // s
            by_residue.setdefault(h_off % s, []).append((lo + q, hi + q))
    candidates = []
    for r, intervals in by_residue.items():
        if r < height_in:
            j = _first_uncovered(intervals, _ceil_div(height_in - r, s))
            if j is not None:
                candidates.append(j * s + r)
    r = 0                   # the smallest residue that no offset has
    while r in by_residue:
        r += 1
    if r < min(s, height_in):
        candidates.append(r)
    return min(candidates, default=None)


@dataclass
class ConvolutionModel:
    """Structure of a 2-D (time x height) convolution, without parameters.

    ``offsets`` are (time_offset, height_offset) pairs kept sorted; the
    parameter matrix is num_filters_out by (len(offsets) * num_filters_in),
    the offset index having the larger stride.
    """

    num_filters_in: int = 0
    num_filters_out: int = 0
    height_in: int = 0
    height_out: int = 0
    height_subsample_out: int = 1
    offsets: list[tuple[int, int]] = field(default_factory=list)
    required_time_offsets: set[int] = field(default_factory=set)
    # derived from 'offsets' by compute_derived()
    all_time_offsets: list[int] = field(default_factory=list)
    time_offsets_modulus: int = 0

    def input_dim(self) -> int:
        return self.num_filters_in * self.height_in

    def output_dim(self) -> int:
        return self.num_filters_out * self.height_out

    def param_rows(self) -> int:
        return self.num_filters_out

    def param_cols(self) -> int:
        return self.num_filters_in * len(self.offsets)

    def copy(self) -> "ConvolutionModel":
        return ConvolutionModel(self.num_filters_in, self.num_filters_out, self.height_in,
                                self.height_out, self.height_subsample_out, list(self.offsets),
                                set(self.required_time_offsets), list(self.all_time_offsets),
                                self.time_offsets_modulus)

    def compute_derived(self) -> None:
        self.all_time_offsets = sorted({t for t, _ in self.offsets})
        modulus = 0
        for a, b in zip(self.all_time_offsets, self.all_time_offsets[1:]):
            modulus = math.gcd(modulus, b - a)
        self.time_offsets_modulus = modulus

    def check(self, check_heights_used: bool = True, allow_height_padding: bool = True) -> str:
        """Kaldi's ConvolutionModel::Check; returns "" if OK, else the reason."""
        if (self.num_filters_in <= 0 or self.num_filters_out <= 0 or self.height_in <= 0
                or self.height_out <= 0 or self.height_subsample_out <= 0
                or not self.offsets or not self.required_time_offsets):
            return "convolution model fails basic check"
        temp = self.copy()
        temp.compute_derived()
        if (temp.all_time_offsets != self.all_time_offsets
                or temp.time_offsets_modulus != self.time_offsets_modulus):
            return "derived variables are incorrect"
        if not self.required_time_offsets.issubset(self.all_time_offsets):
            return "required time offsets not a subset of all time offsets"
        if any(a >= b for a, b in zip(self.offsets, self.offsets[1:])):
            return "offsets are not sorted and unique"
        # Kaldi loops over every output height and marks the input heights
        # used; heights are int32, so that is done here with intervals, in
        # time independent of the heights (a model read from a file may say
        # height-in=2147483647).  Output height k (h_out = k * s) reads input
        # height h_out + h_off for offset i when k is in [lo_i, hi_i).
        s, num_out, height_in = self.height_subsample_out, self.height_out, self.height_in
        ranges = [(max(0, _ceil_div(-h_off, s)), min(num_out, _ceil_div(height_in - h_off, s)))
                  for _, h_off in self.offsets]
        # The first output height where some offset falls outside the input.
        first_pad = min((0 if lo > 0 or hi <= lo else hi for lo, hi in ranges
                         if lo > 0 or hi < num_out), default=None)
        # The first output height where no required offset reads an input.
        covered = 0
        for lo, hi in sorted(rng for (t_off, _), rng in zip(self.offsets, ranges)
                             if t_off in self.required_time_offsets and rng[0] < rng[1]):
            if lo > covered:
                break
            covered = max(covered, hi)
        first_none = covered if covered < num_out else None
        if (not allow_height_padding and first_pad is not None
                and (first_none is None or first_pad <= first_none)):
            return "height padding not allowed but is required"
        if first_none is not None:
            return (f"for output height {first_none}, no input is "
                    "available if only the required time offsets are available")
        if check_heights_used:
            unused = _first_unused_height(height_in, s, self.offsets, ranges)
            if unused is not None:
                return f"the input at height {unused} is never used"
        for (t_off, h_off), (lo, hi) in zip(self.offsets, ranges):
            if lo >= hi:
                return f"(time,height) offset ({t_off},{h_off}) is never used"
        return ""

    def info(self) -> str:
        offs = " ".join(f"{t},{h}" for t, h in self.offsets)
        req = ",".join(str(t) for t in sorted(self.required_time_offsets))
        return (f"num-filters-in={self.num_filters_in}, num-filters-out={self.num_filters_out}"
                f", height-in={self.height_in}, height-out={self.height_out}"
                f", height-subsample-out={self.height_subsample_out}"
                f", {{time,height}}-offsets=[{offs}], required-time-offsets=[{req}]"
                f", input-dim={self.input_dim()}, output-dim={self.output_dim()}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<ConvolutionModel>")
        w.write_token("<NumFiltersIn>")
        w.write_int32(self.num_filters_in)
        w.write_token("<NumFiltersOut>")
        w.write_int32(self.num_filters_out)
        w.write_token("<HeightIn>")
        w.write_int32(self.height_in)
        w.write_token("<HeightOut>")
        w.write_int32(self.height_out)
        w.write_token("<HeightSubsampleOut>")
        w.write_int32(self.height_subsample_out)
        w.write_token("<Offsets>")
        write_int_pair_vector(w, self.offsets)
        w.write_token("<RequiredTimeOffsets>")
        w.write_int_vector(sorted(self.required_time_offsets))
        w.write_token("</ConvolutionModel>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens("<ConvolutionModel>", "<NumFiltersIn>")
        self.num_filters_in = r.read_int32()
        r.expect_token("<NumFiltersOut>")
        self.num_filters_out = r.read_int32()
        r.expect_token("<HeightIn>")
        self.height_in = r.read_int32()
        r.expect_token("<HeightOut>")
        self.height_out = r.read_int32()
        r.expect_token("<HeightSubsampleOut>")
        self.height_subsample_out = r.read_int32()
        r.expect_token("<Offsets>")
        self.offsets = read_int_pair_vector(r)
        r.expect_token("<RequiredTimeOffsets>")
        self.required_time_offsets = set(r.read_int_vector())
        r.expect_token("</ConvolutionModel>")
        self.compute_derived()
        problem = self.check(False, True)
        if problem:
            raise r.error(f"bad ConvolutionModel: {problem}")


# ---------------------------------------------------------------------------
# Compilation of a computation (Kaldi's CompileConvolutionComputation)


@dataclass
class ConvolutionComputationIo:
    """The regular grid of input/output t values for num_images (n, x) pairs."""

    num_images: int = 0
    start_t_in: int = 0
    t_step_in: int = 0
    num_t_in: int = 0
    start_t_out: int = 0
    t_step_out: int = 0
    num_t_out: int = 0
    # >1 when input frames are interleaved in blocks (time subsampling).
    reorder_t_in: int = 1

    def copy(self) -> "ConvolutionComputationIo":
        return ConvolutionComputationIo(**self.__dict__)

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<ConvCompIo>")
        for v in (self.num_images, self.start_t_in, self.t_step_in, self.num_t_in,
                  self.start_t_out, self.t_step_out, self.num_t_out, self.reorder_t_in):
            w.write_int32(v)
        w.write_token("</ConvCompIo>")

    def read(self, r: KaldiReader) -> None:
        r.expect_token("<ConvCompIo>")
        (self.num_images, self.start_t_in, self.t_step_in, self.num_t_in, self.start_t_out,
         self.t_step_out, self.num_t_out, self.reorder_t_in) = [r.read_int32() for _ in range(8)]
        r.expect_token("</ConvCompIo>")


@dataclass
class ConvolutionStep:
    input_time_shift: int
    params_start_col: int
    height_map: list[int]
    # derived (compute_derived)
    columns: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    columns_are_contiguous: bool = False
    first_column: int = 0


@dataclass
class ConvolutionComputation:
    num_filters_in: int = 0
    num_filters_out: int = 0
    height_in: int = 0
    height_out: int = 0
    num_t_in: int = 0
    num_t_out: int = 0
    num_images: int = 0
    temp_rows: int = 0
    temp_cols: int = 0
    steps: list[ConvolutionStep] = field(default_factory=list)

    def compute_derived(self) -> None:
        nf = self.num_filters_in
        for step in self.steps:
            hm = np.asarray(step.height_map, dtype=np.int64)
            cols = (hm[:, None] * nf + np.arange(nf)[None, :]).reshape(-1)
            cols[np.repeat(hm == -1, nf)] = -1
            step.columns = cols
            step.columns_are_contiguous = (step.height_map[0] != -1
                                           and _is_contiguous(step.height_map))
            step.first_column = int(cols[0])

    def write(self, w: KaldiWriter) -> None:
        w.write_token("<ConvComputation>")
        w.write_token("<NumFiltersInOut>")
        w.write_int32(self.num_filters_in)
        w.write_int32(self.num_filters_out)
        w.write_token("<HeightInOut>")
        w.write_int32(self.height_in)
        w.write_int32(self.height_out)
        w.write_token("<NumTInOut>")
        w.write_int32(self.num_t_in)
        w.write_int32(self.num_t_out)
        w.write_token("<NumImages>")
        w.write_int32(self.num_images)
        w.write_token("<TempRowsCols>")
        w.write_int32(self.temp_rows)
        w.write_int32(self.temp_cols)
        w.write_token("<NumSteps>")
        w.write_int32(len(self.steps))
        for step in self.steps:
            w.write_token("<TimeShift>")
            w.write_int32(step.input_time_shift)
            w.write_token("<ParamsStartCol>")
            w.write_int32(step.params_start_col)
            w.write_token("<HeightMap>")
            w.write_int_vector(step.height_map)
        w.write_token("</ConvComputation>")

    def read(self, r: KaldiReader) -> None:
        r.expect_one_or_two_tokens("<ConvComputation>", "<NumFiltersInOut>")
        self.num_filters_in, self.num_filters_out = r.read_int32(), r.read_int32()
        r.expect_token("<HeightInOut>")
        self.height_in, self.height_out = r.read_int32(), r.read_int32()
        r.expect_token("<NumTInOut>")
        self.num_t_in, self.num_t_out = r.read_int32(), r.read_int32()
        r.expect_token("<NumImages>")
        self.num_images = r.read_int32()
        r.expect_token("<TempRowsCols>")
        self.temp_rows, self.temp_cols = r.read_int32(), r.read_int32()
        r.expect_token("<NumSteps>")
        num_steps = r.read_int32()
        self.steps = []
        for _ in range(num_steps):
            r.expect_token("<TimeShift>")
            shift = r.read_int32()
            r.expect_token("<ParamsStartCol>")
            start = r.read_int32()
            r.expect_token("<HeightMap>")
            self.steps.append(ConvolutionStep(shift, start, r.read_int_vector()))
        r.expect_token("</ConvComputation>")
        self.compute_derived()


def _is_contiguous(v: list[int]) -> bool:
    return all(b == a + 1 for a, b in zip(v, v[1:]))


def _t_list(indexes: list[tuple]) -> list[int]:
    return sorted({ix[1] for ix in indexes if ix[1] != K_NO_TIME})


def nx_list(indexes: list[tuple]) -> list[tuple[int, int]]:
    """Kaldi's GetNxList: the sorted distinct (n, x) pairs."""
    return sorted({(ix[0], ix[2]) for ix in indexes})


def regularize_t_list(t_values: list[int]) -> tuple[int, int, int]:
    """(start, step, num) of the smallest regular grid holding ``t_values``."""
    if not t_values:
        raise ValueError("no t values (all indexes blank?)")
    start = t_values[0]
    step = 0
    for a, b in zip(t_values, t_values[1:]):
        step = math.gcd(step, b - a)
    if step == 0:
        return start, 0, 1
    return start, step, 1 + (t_values[-1] - start) // step


def get_computation_io(input_indexes: list[tuple],
                       output_indexes: list[tuple]) -> ConvolutionComputationIo:
    io = ConvolutionComputationIo()
    pairs = nx_list(input_indexes)
    if not pairs:
        raise ValueError("convolution computation with no input indexes")
    io.num_images = len(pairs)
    io.start_t_in, io.t_step_in, io.num_t_in = regularize_t_list(_t_list(input_indexes))
    io.start_t_out, io.t_step_out, io.num_t_out = regularize_t_list(_t_list(output_indexes))
    io.reorder_t_in = 1
    return io


def _time_value_in_input(io: ConvolutionComputationIo, t: int) -> bool:
    step = max(1, io.t_step_in)
    return (io.start_t_in <= t < io.start_t_in + step * io.num_t_in
            and (t - io.start_t_in) % step == 0)


def check_model_and_io(model: ConvolutionModel, io: ConvolutionComputationIo,
                       allow_extra_input: bool = False) -> None:
    """Kaldi's CheckModelAndIo (checking the first and last few outputs,
    deterministically, where Kaldi checks a few random ones)."""
    if not (io.num_t_in > 0 and io.num_t_out > 0 and model.required_time_offsets
            and model.all_time_offsets):
        raise ValueError("convolution: empty model or I/O")
    if not allow_extra_input:
        last_t_in = io.start_t_in + io.t_step_in * (io.num_t_in - 1)
        last_t_out = io.start_t_out + io.t_step_out * (io.num_t_out - 1)
        if (io.start_t_in < io.start_t_out + model.all_time_offsets[0]
                or last_t_in > last_t_out + model.all_time_offsets[-1]):
            raise ValueError("convolution: more input than the model can use")
    check_n = sorted({*range(min(3, io.num_t_out)),
                      *range(max(0, io.num_t_out - 3), io.num_t_out)})
    for n in check_n:
        t_out = io.start_t_out + n * io.t_step_out
        for offset in model.required_time_offsets:
            if not _time_value_in_input(io, t_out + offset):
                raise ValueError(f"convolution: time {t_out + offset} is required "
                                 "but not in the input")


def pad_computation_input_time(model: ConvolutionModel, io: ConvolutionComputationIo) -> None:
    """Make the input grid cover every usable input time, with a step that
    divides the model's time-offset modulus and the output step."""
    if model.time_offsets_modulus == 0:
        return
    min_off, max_off = model.all_time_offsets[0], model.all_time_offsets[-1]
    old_t_step_in = io.t_step_in
    io.t_step_in = math.gcd(io.t_step_in, model.time_offsets_modulus)
    if io.t_step_out != 0:
        io.t_step_in = math.gcd(io.t_step_in, io.t_step_out)
    io.num_t_in = 1 + (old_t_step_in * (io.num_t_in - 1)) // io.t_step_in
    first_desired = io.start_t_out + min_off
    if first_desired < io.start_t_in:
        assert (io.start_t_in - first_desired) % io.t_step_in == 0
        io.num_t_in += (io.start_t_in - first_desired) // io.t_step_in
        io.start_t_in = first_desired
    last_desired = io.start_t_out + (io.num_t_out - 1) * io.t_step_out + max_off
    last_input = io.start_t_in + (io.num_t_in - 1) * io.t_step_in
    if last_desired < last_input:
        raise ValueError("convolution: more input provided than needed")
    if last_desired > last_input:
        assert (last_desired - last_input) % io.t_step_in == 0
        io.num_t_in += (last_desired - last_input) // io.t_step_in


def pad_model_height(model: ConvolutionModel) -> ConvolutionModel:
    """A copy of the model with explicit zero-padding rows on the height axis."""
    padded = model.copy()
    heights = [h for _, h in model.offsets]
    max_required = max(heights) + model.height_subsample_out * (model.height_out - 1)
    bottom = max(0, -min(heights))
    top = max(0, max_required - (model.height_in - 1))
    padded.height_in += bottom + top
    padded.offsets = [(t, h + bottom) for t, h in model.offsets]
    return padded


def _prepare_io_for_appending(io: ConvolutionComputationIo) -> tuple[int, ConvolutionComputationIo]:
    if io.t_step_out == 0:
        assert io.num_t_out == 1
        io.t_step_out = io.t_step_in
    if io.t_step_out == io.t_step_in:
        return 1, io.copy()
    assert io.t_step_out % io.t_step_in == 0
    ratio = io.t_step_out // io.t_step_in
    io.reorder_t_in = ratio
    if io.num_t_in % ratio != 0:
        io.num_t_in += ratio - (io.num_t_in % ratio)
    appended = io.copy()
    appended.reorder_t_in = 1
    appended.t_step_in = io.t_step_out
    appended.num_t_in //= ratio
    return ratio, appended


def append_input_frames(model: ConvolutionModel, io: ConvolutionComputationIo
                        ) -> tuple[ConvolutionModel, ConvolutionComputationIo]:
    """Turn input time-subsampling into a model whose input frames are
    ``ratio`` original frames appended together (so in and out steps agree)."""
    ratio, io_appended = _prepare_io_for_appending(io)
    if ratio == 1:
        return model.copy(), io_appended
    time_step_out = io_appended.t_step_out
    orig_step_in = io.t_step_in
    first_time_offset = model.all_time_offsets[0]
    assert io.start_t_in - io.start_t_out == first_time_offset
    appended = ConvolutionModel(model.num_filters_in, model.num_filters_out,
                                ratio * model.height_in, model.height_out,
                                model.height_subsample_out)
    new_offsets = []
    for t_off, h_off in model.offsets:
        shifted = t_off - first_time_offset
        new_t = time_step_out * (shifted // time_step_out)
        assert (shifted - new_t) % orig_step_in == 0
        row_offset = (shifted - new_t) // orig_step_in
        new_offsets.append((new_t + first_time_offset, h_off + row_offset * model.height_in))
    appended.offsets = new_offsets
    appended.compute_derived()
    appended.required_time_offsets = set(appended.all_time_offsets)
    return appended, io_appended


def _compute_temp_matrix_size(max_memory_mb: float, cc: ConvolutionComputation) -> None:
    temp_cols = 0
    for step in cc.steps:
        this_cols = len(step.height_map) * cc.num_filters_in
        contiguous = step.height_map[0] != -1 and _is_contiguous(step.height_map)
        if not (contiguous and step.height_map[0] == 0
                and this_cols == cc.num_filters_in * cc.height_in):
            temp_cols = max(temp_cols, this_cols)
    temp_rows = 0
    if temp_cols > 0:
        temp_rows = cc.num_t_out * cc.num_images
        # float arithmetic as in Kaldi (BaseFloat megabytes, int ratio)
        num_mb = np.float32(4 * (temp_rows / 1000.0) * (temp_cols / 1000.0))
        ratio = int(1.0 + float(np.float32(num_mb / np.float32(max_memory_mb))))
        new_num_t_out = (cc.num_t_out + ratio - 1) // ratio
        temp_rows = new_num_t_out * cc.num_images
    cc.temp_rows = temp_rows
    cc.temp_cols = temp_cols


def make_computation(model: ConvolutionModel, io: ConvolutionComputationIo,
                     max_memory_mb: float) -> ConvolutionComputation:
    assert io.t_step_in == io.t_step_out and io.reorder_t_in == 1
    cc = ConvolutionComputation(model.num_filters_in, model.num_filters_out, model.height_in,
                                model.height_out, io.num_t_in, io.num_t_out, io.num_images)
    t_step = max(1, io.t_step_in)
    num_t_extra = io.num_t_in - io.num_t_out
    offsets = model.offsets
    start = 0
    while start < len(offsets):
        end = start
        while end < len(offsets) and offsets[end][0] == offsets[start][0]:
            end += 1
        time_offset = offsets[start][0]
        modified = time_offset + io.start_t_out - io.start_t_in
        assert modified >= 0 and modified % t_step == 0
        shift = modified // t_step
        assert shift <= num_t_extra
        height_map = []
        for h_out in range(0, model.height_out * model.height_subsample_out,
                           model.height_subsample_out):
            for o in range(start, end):
                h_in = h_out + offsets[o][1]
                assert 0 <= h_in < model.height_in
                height_map.append(h_in)
        cc.steps.append(ConvolutionStep(shift, model.num_filters_in * start, height_map))
        start = end
    _compute_temp_matrix_size(max_memory_mb, cc)
    return cc


def unpad_model_height(max_memory_mb: float, model: ConvolutionModel,
                       padded: ConvolutionModel, cc: ConvolutionComputation) -> None:
    bottom = padded.offsets[0][1] - model.offsets[0][1]
    top = (padded.height_in - model.height_in) - bottom
    assert cc.height_in % padded.height_in == 0 and cc.height_out == model.height_out
    ratio = cc.height_in // padded.height_in
    cc.height_in = ratio * model.height_in
    for step in cc.steps:
        new_map = []
        for c in step.height_map:
            h, m = c % padded.height_in, c // padded.height_in
            if h < bottom or h >= padded.height_in - top:
                new_map.append(-1)
            else:
                new_map.append((h - bottom) + m * model.height_in)
        step.height_map = new_map
    _compute_temp_matrix_size(max_memory_mb, cc)
    cc.compute_derived()


def _create_indexes(pairs: list[tuple[int, int]], t_start: int, t_step: int, num_t: int,
                    reorder_t: int) -> list[Index]:
    assert reorder_t >= 1 and num_t % reorder_t == 0 and t_step >= 0
    if t_step == 0:
        assert num_t == 1
        t_step = 1
    outer = t_step * reorder_t
    t_end = t_start + num_t * t_step
    out = []
    for t_block in range(t_start, t_end, outer):
        for n, x in pairs:
            for t in range(t_block, t_block + outer, t_step):
                out.append(Index(n, t, x))
    return out


def _blank_missing(ref: list[tuple], indexes: list[Index]) -> list[Index]:
    ref_set = set(ref)
    return [ix if ix in ref_set else Index(ix[0], K_NO_TIME, ix[2]) for ix in indexes]


def get_indexes_for_computation(io: ConvolutionComputationIo, orig_input: list[tuple],
                                orig_output: list[tuple]) -> tuple[list[Index], list[Index]]:
    pairs = nx_list(orig_input)
    assert len(pairs) == io.num_images
    new_in = _blank_missing(orig_input, _create_indexes(pairs, io.start_t_in, io.t_step_in,
                                                        io.num_t_in, io.reorder_t_in))
    new_out = _blank_missing(orig_output, _create_indexes(pairs, io.start_t_out, io.t_step_out,
                                                          io.num_t_out, 1))
    return new_in, new_out


def compile_convolution_computation(model: ConvolutionModel, input_indexes: list[tuple],
                                    output_indexes: list[tuple], max_memory_mb: float
                                    ) -> tuple[ConvolutionComputation, list[Index], list[Index]]:
    """Kaldi's CompileConvolutionComputation: the computation plus the
    input/output Indexes reordered and padded (blank = t kNoTime) to its grid."""
    io = get_computation_io(input_indexes, output_indexes)
    cc = _computation_for_io(model, io, max_memory_mb)
    new_in, new_out = get_indexes_for_computation(io, input_indexes, output_indexes)
    return cc, new_in, new_out


def _computation_for_io(model: ConvolutionModel, io: ConvolutionComputationIo,
                        max_memory_mb: float) -> ConvolutionComputation:
    """The middle of CompileConvolutionComputation (pads ``io`` in place)."""
    check_model_and_io(model, io)
    pad_computation_input_time(model, io)
    check_model_and_io(model, io)
    padded = pad_model_height(model)
    appended, io_appended = append_input_frames(padded, io)
    check_model_and_io(appended, io_appended, True)
    cc = make_computation(appended, io_appended, max_memory_mb)
    unpad_model_height(max_memory_mb, model, padded, cc)
    return cc


def compile_reordered_convolution_computation(model: ConvolutionModel, input_indexes: list,
                                              output_indexes: list, max_memory_mb: float
                                              ) -> ConvolutionComputation:
    """compile_convolution_computation for lists that are already in its order
    (what PrecomputeIndexes gets), checking with array operations that they
    are (ValueError if not) instead of building the reordered Index lists:
    the same computation, at a small fraction of the cost for 64 sequences.
    """
    from .tdnn_indexes import _grid_columns, distinct_nx_and_t

    nx, t_in = distinct_nx_and_t(input_indexes)
    if nx.size == 0:
        raise ValueError("convolution computation with no input indexes")
    io = ConvolutionComputationIo()
    io.num_images = int(nx.size)
    io.start_t_in, io.t_step_in, io.num_t_in = regularize_t_list(t_in.tolist())
    io.start_t_out, io.t_step_out, io.num_t_out = regularize_t_list(
        distinct_nx_and_t(output_indexes)[1].tolist())
    io.reorder_t_in = 1
    cc = _computation_for_io(model, io, max_memory_mb)
    # Reordering makes the grid with t = kNoTime where the list lacks the
    # point; a list is already reordered iff it is the grid with some t
    # values kNoTime (its other rows are then distinct grid points, so none
    # of the blanked ones is present).
    for indexes, start, step, num, reorder in (
            (input_indexes, io.start_t_in, io.t_step_in, io.num_t_in, io.reorder_t_in),
            (output_indexes, io.start_t_out, io.t_step_out, io.num_t_out, 1)):
        cols = index_columns(indexes)
        grid = _grid_columns(nx, start, step, num, reorder)
        if not (grid.shape == cols.shape and np.array_equal(grid[:, 0], cols[:, 0])
                and np.array_equal(grid[:, 2], cols[:, 2])
                and np.all((grid[:, 1] == cols[:, 1]) | (cols[:, 1] == K_NO_TIME))):
            raise ValueError("convolution: problem precomputing indexes (indexes were not "
                             "reordered by reorder_indexes)")
    return cc


# ---------------------------------------------------------------------------


def convolve_forward(cc: ConvolutionComputation, inp: np.ndarray, params: np.ndarray,
                     out: np.ndarray) -> None:
    """out += convolution of ``inp`` (rows = t-major, then image) with params.

    ``inp`` may hold the original (non-appended) frames: it is reshaped
    row-major to ``num_t_in * num_images`` rows, exactly as Kaldi does.
    """
    required_rows = cc.num_images * cc.num_t_in
    if inp.shape[0] != required_rows:
        if inp.size != required_rows * cc.height_in * cc.num_filters_in:
            raise ValueError("convolution input matrix has the wrong size")
        inp = np.ascontiguousarray(inp).reshape(required_rows, -1)
    out_rows = out.shape[0]
    # accumulate in a contiguous buffer: 'out' may be a strided view.
    acc = np.zeros((out_rows * cc.height_out, cc.num_filters_out), dtype=np.float32)
    for step in cc.steps:
        row0 = step.input_time_shift * cc.num_images
        part = inp[row0:row0 + out_rows]
        cols = step.columns
        if step.columns_are_contiguous:
            temp = part[:, step.first_column:step.first_column + cols.shape[0]]
        else:
            temp = np.zeros((out_rows, cols.shape[0]), dtype=np.float32)
            valid = cols >= 0
            temp[:, valid] = part[:, cols[valid]]
        param_cols = cols.shape[0] // cc.height_out
        temp = np.ascontiguousarray(temp).reshape(out_rows * cc.height_out, param_cols)
        p = params[:, step.params_start_col:step.params_start_col + param_cols]
        acc += temp @ p.T
    out += acc.reshape(out.shape)


def _gather_step_input(cc: ConvolutionComputation, step: ConvolutionStep, part: np.ndarray,
                       out_rows: int) -> np.ndarray:
    """The step's column-mapped input, reshaped to (out_rows * height_out) rows
    of the step's parameter columns (padding columns, -1, are zero)."""
    cols = step.columns
    if step.columns_are_contiguous:
        temp = part[:, step.first_column:step.first_column + cols.shape[0]]
    else:
        temp = np.zeros((out_rows, cols.shape[0]), dtype=part.dtype)
        valid = cols >= 0
        temp[:, valid] = part[:, cols[valid]]
    return np.ascontiguousarray(temp).reshape(out_rows * cc.height_out, -1)


def _input_view(cc: ConvolutionComputation, mat: np.ndarray) -> np.ndarray:
    """``mat`` as num_t_in * num_images rows (a view: the original frames of a
    computation with appended frames are several rows of the padded input)."""
    required_rows = cc.num_images * cc.num_t_in
    if mat.shape[0] == required_rows:
        return mat
    if mat.size != required_rows * cc.height_in * cc.num_filters_in:
        raise ValueError("convolution input matrix has the wrong size")
    view = mat.view()
    view.shape = (required_rows, mat.size // required_rows)   # raises if not contiguous
    return view


def convolve_backward_data(cc: ConvolutionComputation, params: np.ndarray,
                           out_deriv: np.ndarray, in_deriv: np.ndarray) -> None:
    """in_deriv += the derivative of the convolution w.r.t. its input
    (Kaldi's ConvolveBackwardData)."""
    in_deriv = _input_view(cc, in_deriv)
    out_rows = out_deriv.shape[0]
    od = np.ascontiguousarray(out_deriv).reshape(out_rows * cc.height_out, cc.num_filters_out)
    for step in cc.steps:
        row0 = step.input_time_shift * cc.num_images
        part = in_deriv[row0:row0 + out_rows]
        cols = step.columns
        param_cols = cols.shape[0] // cc.height_out
        p = params[:, step.params_start_col:step.params_start_col + param_cols]
        temp = (od @ p).reshape(out_rows, cols.shape[0])
        if step.columns_are_contiguous:
            part[:, step.first_column:step.first_column + cols.shape[0]] += temp
        else:
            # A column may be used more than once (height padding aside):
            # scatter-add handles the repeats.
            valid = cols >= 0
            np.add.at(part, (slice(None), cols[valid]), temp[:, valid])


def convolve_backward_params(cc: ConvolutionComputation, inp: np.ndarray,
                             out_deriv: np.ndarray, alpha: float,
                             params_deriv: np.ndarray) -> None:
    """params_deriv += alpha * the derivative of the objective w.r.t. the
    filter parameters (Kaldi's ConvolveBackwardParams)."""
    inp = _input_view(cc, np.ascontiguousarray(inp))
    out_rows = out_deriv.shape[0]
    od = np.ascontiguousarray(out_deriv).reshape(out_rows * cc.height_out, cc.num_filters_out)
    a = np.float32(alpha)
    for step in cc.steps:
        row0 = step.input_time_shift * cc.num_images
        temp = _gather_step_input(cc, step, inp[row0:row0 + out_rows], out_rows)
        param_cols = temp.shape[1]
        params_deriv[:, step.params_start_col:step.params_start_col + param_cols] += \
            a * (od.T @ temp)
