"""Splitting utterances into chunks for nnet3-get-egs (Kaldi's UtteranceSplitter).

For each utterance length the splitter picks chunk sizes from ``--num-frames``
(any number of the first, "principal" size plus at most two alternatives),
preferring splits whose total length matches the utterance, then spreads the
gap (or overlap) between the chunks and computes each output frame's weight
(1 / number of chunks covering it).  The port follows
nnet3/nnet-example-utils.cc step by step, including its float arithmetic and
its quirks (DistributeRandomly's partial counts are truncated to int, so the
extra frames of an overlap go to the first gaps).

Randomness.  Kaldi draws the chunk-size choice from ``RandInt`` (glibc
``rand()``, never seeded by nnet3-get-egs, i.e. ``srand(1)``); that stream is
reproduced exactly (:class:`~pynnet3.train.kaldi_random.GlibcRand`).  The
placement of gaps between chunks uses ``std::random_device`` in Kaldi and is
different on every run; pynnet3 uses an ``std::mt19937`` seeded with
``seed`` and libstdc++'s ``std::shuffle`` instead, so its output is
deterministic.  To reproduce a particular Kaldi run, pass the chunk start
frames (``forced_starts``; Kaldi's eg keys are ``<utt>-<first_frame>``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .. import log
from ..errors import ConfigError, FormatError
from .kaldi_random import GlibcRand, MT19937, std_shuffle

F32 = np.float32
_FLT_MAX = float(np.finfo(np.float32).max)


@dataclass
class ExampleGenerationConfig:
    """Kaldi's ExampleGenerationConfig (options shared by the get-egs binaries).

    Each option field carries its flag and help in its metadata
    (``pynnet3.cli.common.register_options`` registers them)."""

    left_context: int = field(default=0, metadata={
        "flag": "left-context", "help": "Number of frames of left context of input features "
        "that are added to each example"})
    right_context: int = field(default=0, metadata={
        "flag": "right-context", "help": "Number of frames of right context of input features "
        "that are added to each example"})
    left_context_initial: int = field(default=-1, metadata={
        "flag": "left-context-initial", "help": "Number of frames of left context of input "
        "features that are added to each example at the start of the utterance (if <0, this "
        "defaults to the same as --left-context)"})
    right_context_final: int = field(default=-1, metadata={
        "flag": "right-context-final", "help": "Number of frames of right context of input "
        "features that are added to each example at the end of the utterance (if <0, this "
        "defaults to the same as --right-context)"})
    num_frames_overlap: int = field(default=0, metadata={
        "flag": "num-frames-overlap", "help": "Number of frames of overlap between adjacent "
        "samples (applies to chunks of size equal to the primary [first-listed] --num-frames "
        "value... will be adjusted for different-sized chunks).  Advisory; will not be exactly "
        "enforced."})
    frame_subsampling_factor: int = field(default=1, metadata={
        "flag": "frame-subsampling-factor", "help": "Used if the frame-rate of the output "
        "labels in the generated examples will be less than the frame-rate at the input"})
    num_frames_str: str = field(default="1", metadata={
        "flag": "num-frames", "help": "Number of frames with labels that each example "
        "contains (i.e. the left and right context are to be added to this).  May just be an "
        "integer (e.g. --num-frames=8), or a principal value followed by alternative values to "
        "be used at most once for each utterance to deal with odd-sized input, e.g. "
        "--num-frames=40,25,50 means that most of the time the number of frames will be 40, but "
        "to deal with odd-sized inputs we may also generate egs with these other sizes.  All "
        "these values will be rounded up to the closest multiple of --frame-subsampling-factor.  "
        "As a special case, --num-frames=-1 means 'don't do any splitting'."})
    num_frames: list[int] = field(default_factory=list)

    def compute_derived(self) -> None:
        """Parse ``--num-frames`` and round its values up to multiples of the subsampling factor."""
        if self.num_frames_str == "-1":
            return
        try:
            values = [int(v) for v in self.num_frames_str.split(",")]
        except ValueError:
            values = []
        if not values:
            raise ConfigError("Invalid option (expected comma-separated list of integers): "
                              f"--num-frames={self.num_frames_str}")
        m = self.frame_subsampling_factor
        if m < 1:
            raise ConfigError(f"Invalid value --frame-subsampling-factor={m}")
        changed = False
        for i, value in enumerate(values):
            if value <= 0:
                raise ConfigError(f"Invalid option --num-frames={self.num_frames_str}")
            if value % m != 0:
                values[i] = m * (value // m + 1)
                changed = True
        self.num_frames = values
        if changed:
            log.log(f"Rounding up --num-frames={self.num_frames_str} to multiples of "
                    f"--frame-subsampling-factor={m}, to: {','.join(map(str, values))}")


@dataclass
class ChunkTimeInfo:
    first_frame: int
    num_frames: int
    left_context: int
    right_context: int
    output_weights: list[float] = field(default_factory=list)


def _g(value: float, precision: int = 6) -> str:
    """C++ ``ostream <<`` of a floating value (``%g``)."""
    if value != value:
        return "-nan"
    return "%.*g" % (precision, value)


class UtteranceSplitter:
    """Kaldi's UtteranceSplitter, with seeded gap placement (see the module doc)."""

    def __init__(self, config: ExampleGenerationConfig, seed: int = 0,
                 rand: GlibcRand | None = None) -> None:
        self.config = config
        self.rand = rand if rand is not None else GlibcRand(1)
        self.gap_rng = MT19937(seed)
        self.total_num_utterances = 0
        self.total_input_frames = 0
        self.total_frames_overlap = 0
        self.total_num_chunks = 0
        self.total_frames_in_chunks = 0
        self.chunk_size_to_count: dict[int, int] = {}
        self.splits_for_length: list[list[tuple[int, ...]]] = []
        if config.num_frames_str != "-1":
            if not config.num_frames:
                raise ConfigError("call compute_derived() on the ExampleGenerationConfig first")
            self._init_split_for_length()

    # -- the table of splits per utterance length -------------------------
    def _default_duration_of_split(self, split: Sequence[int]) -> np.float32:
        if not split:
            return F32(0.0)
        principal = F32(self.config.num_frames[0])
        overlap = F32(self.config.num_frames_overlap)
        if not overlap < principal:
            raise ConfigError("--num-frames-overlap value is too high")
        proportion = F32(overlap / principal)
        ans = F32(sum(split))
        for a, b in zip(split[:-1], split[1:]):
            ans = F32(ans - F32(proportion * F32(min(a, b))))
        return ans

    def max_utterance_length(self) -> int:
        nf = self.config.num_frames
        return 2 * max(nf) + nf[0]

    def _init_splits(self) -> list[tuple[int, ...]]:
        nf = self.config.num_frames
        primary = nf[0]
        ceiling = self.max_utterance_length() + primary
        splits: set[tuple[int, ...]] = set()
        for i in range(len(nf)):
            for j in range(len(nf)):
                vec = ([nf[i]] if i > 0 else []) + ([nf[j]] if j > 0 else [])
                while self._default_duration_of_split(vec) <= ceiling:
                    if vec:
                        splits.add(tuple(vec))
                    vec = sorted(vec + [primary])
        return sorted(splits)

    def _init_split_for_length(self) -> None:
        max_len = self.max_utterance_length()
        splits = self._init_splits()
        costs = np.empty((max_len + 1, len(splits)), dtype=np.float64)
        for s, split in enumerate(splits):
            d = self._default_duration_of_split(split)
            biggest = max(split)
            for u in range(max_len + 1):
                if d > F32(u):
                    c = F32(d - F32(u))
                else:
                    c = F32(2.0 * float(F32(F32(u) - d)))
                costs[u, s] = _FLT_MAX if u < biggest else c
        self.splits_for_length = []
        for u in range(max_len + 1):
            min_cost = F32(costs[u].min())
            if float(min_cost) == _FLT_MAX:
                self.splits_for_length.append([])
                continue
            threshold = F32(min_cost + F32(1.9999))
            self.splits_for_length.append([splits[s] for s in range(len(splits))
                                           if F32(costs[u, s]) < threshold])
        if log.verbose_level() >= 3:
            text = ", ".join(f"{u}=(" + "/".join(",".join(map(str, sp)) for sp in sps) + ")"
                             for u, sps in enumerate(self.splits_for_length) if sps)
            log.vlog(3, f"Utterance-length-to-splits map is: {text}")

    # -- per utterance ----------------------------------------------------
    def lengths_match(self, utt: str, utterance_length: int, supervision_length: int,
                      length_tolerance: int = 0) -> bool:
        sf = self.config.frame_subsampling_factor
        expected = (utterance_length + sf - 1) // sf
        if abs(supervision_length - expected) <= length_tolerance:
            return True
        if sf == 1:
            log.warn(f"Supervision does not have expected length for utterance {utt}: "
                     f"expected length = {utterance_length}, got {supervision_length}")
        else:
            log.warn(f"Supervision does not have expected length for utterance {utt}: expected "
                     f"length = ({utterance_length} + {sf} - 1) / {sf} = {expected}, got: "
                     f"{supervision_length} (note: --frame-subsampling-factor={sf})")
        return False

    def get_chunk_sizes_for_utterance(self, utterance_length: int) -> list[int]:
        primary = self.config.num_frames[0]
        overlap = self.config.num_frames_overlap
        max_tabulated = len(self.splits_for_length) - 1
        repeats = 0
        while utterance_length > max_tabulated:
            utterance_length -= primary - overlap
            repeats += 1
        possible = self.splits_for_length[utterance_length]
        if not possible:
            return []
        sizes = list(possible[self.rand.rand_int(0, len(possible) - 1)]) + [primary] * repeats
        sizes.sort()
        if self.rand.rand_int(0, 1) == 0:
            sizes.reverse()
        return sizes

    def _distribute_randomly_uniform(self, n: int, size: int) -> list[int]:
        if n < 0:
            return [-v for v in self._distribute_randomly_uniform(-n, size)]
        common, remainder = divmod(n, size)
        vec = [common + 1] * remainder + [common] * (size - remainder)
        std_shuffle(vec, self.gap_rng)
        return vec

    @staticmethod
    def _distribute_randomly(n: int, magnitudes: Sequence[int]) -> list[int]:
        """Kaldi's DistributeRandomly (deterministic despite its name)."""
        if n < 0:
            return [-v for v in UtteranceSplitter._distribute_randomly(-n, magnitudes)]
        total = F32(sum(magnitudes))
        vec, partial = [], []
        for i, m in enumerate(magnitudes):
            count = F32(F32(F32(n) * F32(m)) / total)
            whole = int(count)
            vec.append(whole)
            # Kaldi stores the fractional part in an int32, i.e. always 0.
            partial.append((-float(int(F32(count - F32(whole)))), i))
        partial.sort()
        total_count = sum(vec)
        k = 0
        while total_count < n:
            vec[partial[k][1]] += 1
            k += 1
            total_count += 1
        return vec

    def get_gap_sizes(self, utterance_length: int, enforce_subsampling_factor: bool,
                      chunk_sizes: Sequence[int]) -> list[int]:
        if not chunk_sizes:
            return []
        sf = self.config.frame_subsampling_factor
        if enforce_subsampling_factor and sf > 1:
            reduced = [c // sf for c in chunk_sizes]
            gaps = self.get_gap_sizes((utterance_length + sf - 1) // sf, False, reduced)
            return [g * sf for g in gaps]
        num_chunks = len(chunk_sizes)
        total_gap = utterance_length - sum(chunk_sizes)
        if total_gap < 0:
            if num_chunks == 1:
                raise FormatError(f"Chunk size is {chunk_sizes[0]} but utterance length is only "
                                  f"{utterance_length}")
            magnitudes = [min(a, b) for a, b in zip(chunk_sizes[:-1], chunk_sizes[1:])]
            overlaps = self._distribute_randomly(total_gap, magnitudes)
            return [0] + overlaps
        gaps = self._distribute_randomly_uniform(total_gap, num_chunks + 1)
        return gaps[:num_chunks]

    def get_chunks_for_utterance(self, utterance_length: int,
                                 forced_starts: Sequence[int] | None = None) -> list[ChunkTimeInfo]:
        """Kaldi's GetChunksForUtterance.

        ``forced_starts`` replaces the random gap placement by the given first
        frames (the chunk sizes are still chosen, and the random stream used,
        exactly as without it).
        """
        cfg = self.config
        chunks: list[ChunkTimeInfo] = []
        t = 0
        if cfg.num_frames_str == "-1":
            chunks.append(ChunkTimeInfo(
                0, utterance_length,
                cfg.left_context_initial if cfg.left_context_initial >= 0 else cfg.left_context,
                cfg.right_context_final if cfg.right_context_final >= 0 else cfg.right_context))
            t = utterance_length
        else:
            sizes = self.get_chunk_sizes_for_utterance(utterance_length)
            if forced_starts is not None:
                if len(forced_starts) != len(sizes):
                    raise FormatError(f"{len(forced_starts)} chunk starts given for an utterance "
                                      f"of {utterance_length} frames split into {len(sizes)} chunks")
                gaps = []
                for i, start in enumerate(forced_starts):
                    gaps.append(start - t)
                    t = start + sizes[i]
                t = 0
            else:
                gaps = self.get_gap_sizes(utterance_length, True, sizes)
            n = len(sizes)
            for i, size in enumerate(sizes):
                t += gaps[i]
                left = (cfg.left_context_initial if i == 0 and cfg.left_context_initial >= 0
                        else cfg.left_context)
                right = (cfg.right_context_final if i == n - 1 and cfg.right_context_final >= 0
                         else cfg.right_context)
                chunks.append(ChunkTimeInfo(t, size, left, right))
                t += size
        self._set_output_weights(utterance_length, chunks)
        self._acc_stats_for_utterance(utterance_length, chunks)
        if t - utterance_length >= cfg.frame_subsampling_factor:
            raise FormatError(f"chunks end at frame {t}, past the utterance end {utterance_length}")
        return chunks

    def _set_output_weights(self, utterance_length: int, chunks: list[ChunkTimeInfo]) -> None:
        sf = self.config.frame_subsampling_factor
        count = np.zeros((utterance_length + sf - 1) // sf, dtype=np.int64)
        for c in chunks:
            count[c.first_frame // sf:(c.first_frame + c.num_frames) // sf] += 1
        for c in chunks:
            a, b = c.first_frame // sf, (c.first_frame + c.num_frames) // sf
            c.output_weights = [float(F32(1.0 / k)) for k in count[a:b].tolist()]

    def _acc_stats_for_utterance(self, utterance_length: int, chunks: list[ChunkTimeInfo]) -> None:
        self.total_num_utterances += 1
        self.total_input_frames += utterance_length
        for i, c in enumerate(chunks):
            if i > 0:
                last_end = chunks[i - 1].first_frame + chunks[i - 1].num_frames
                if last_end > c.first_frame:
                    self.total_frames_overlap += last_end - c.first_frame
            self.chunk_size_to_count[c.num_frames] = self.chunk_size_to_count.get(c.num_frames, 0) + 1
            self.total_num_chunks += 1
            self.total_frames_in_chunks += c.num_frames

    # -- summary ----------------------------------------------------------
    def print_stats(self) -> None:
        """The two (or three) LOG lines Kaldi prints when the splitter is destroyed."""
        inp, chunks = self.total_input_frames, self.total_num_chunks
        div = lambda a, b: (a / b) if b else float("nan")
        log.log(f"Split {self.total_num_utterances} utts, with total length {inp} frames "
                f"({_g(inp / 360000.0)} hours assuming 100 frames per second) into {chunks} chunks.")
        avg = F32(div(self.total_frames_in_chunks * 1.0, chunks))
        overlap = F32(div(self.total_frames_overlap * 100.0, inp))
        output = F32(div(self.total_frames_in_chunks * 100.0, inp))
        no_overlap = F32(output - overlap)
        log.log(f"Average chunk length was {_g(float(avg))} frames; overlap between adjacent "
                f"chunks was {_g(float(overlap))}% of input length; length of output was "
                f"{_g(float(output))}% of input length (minus overlap = {_g(float(no_overlap))}%).")
        if len(self.chunk_size_to_count) > 1:
            parts = []
            for size in sorted(self.chunk_size_to_count):
                pct = F32(size * self.chunk_size_to_count[size] * 100.0 / self.total_frames_in_chunks)
                parts.append(f"{size} = {_g(float(pct), 4)}%")
            log.log("Output frames are distributed among chunk-sizes as follows: " + ", ".join(parts))

    def exit_status(self) -> int:
        return 0 if self.total_frames_in_chunks > 0 else 1
