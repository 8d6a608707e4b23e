"""Merging egs into minibatches (nnet3-merge-egs; nnet-example-utils.cc).

:func:`merge_examples` is Kaldi's MergeExamples: the NnetIo's of the same name
are concatenated (in sorted name order), each example's ``n`` index shifted
by its position times the example stride, and the features appended
(AppendGeneralMatrixRows: sparse stays sparse, anything else becomes a full
matrix, compressed again only with ``compress``).

:class:`ExampleMerger` groups examples of identical structure and writes a
minibatch as soon as a group reaches the largest size its
``--minibatch-size`` rule allows; at the end of the input the groups are
flushed with the smaller sizes the rule allows and the rest discarded.  Kaldi
keeps the groups in a ``std::unordered_map``, whose iteration order decides
the order of the final minibatches and of the statistics printed; that order
is reproduced here (:class:`StdUnorderedOrder`), so the output is
byte-identical to Kaldi's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from .. import log
from ..errors import ConfigError, FormatError
from ..std_order import StdUnorderedOrder
from .egs import NnetExample, NnetIo, example_size, structure_hash
from ..io.general_matrix import append_general_matrix_rows


# ---------------------------------------------------------------------------
# MergeExamples


def merge_examples(src: Sequence[NnetExample], compress: bool = False) -> NnetExample:
    """Kaldi's MergeExamples: one example whose ``n`` indexes number the inputs."""
    if not src:
        raise ValueError("merge_examples: no examples")
    names = sorted({io.name for eg in src for io in eg.io})
    pos = {name: i for i, name in enumerate(names)}
    dims: list[int] = [-1] * len(names)
    index_parts: list[list[np.ndarray]] = [[] for _ in names]
    feature_parts: list[list] = [[] for _ in names]
    # 1 for single examples, larger for already-merged ones; must hold for all.
    stride = int(src[0].io[0].indexes[:, 0].max(initial=0)) + 1
    for n, eg in enumerate(src):
        for io in eg.io:
            f = pos[io.name]
            cols = io.features.num_cols
            if dims[f] == -1:
                dims[f] = cols
            elif dims[f] != cols:
                raise FormatError(f"merging examples with inconsistent feature dims: "
                                  f"{dims[f]} vs. {cols} for '{io.name}'.")
            if io.features.num_rows != io.indexes.shape[0]:
                raise FormatError(f"NnetIo '{io.name}' has {io.indexes.shape[0]} indexes but "
                                  f"{io.features.num_rows} rows")
            idx = io.indexes.astype(np.int64).copy()
            if idx.shape[0] and idx[:, 0].max() >= stride:
                raise FormatError("merging examples with inconsistent n-index strides")
            idx[:, 0] += n * stride
            index_parts[f].append(idx)
            feature_parts[f].append(io.features)
    out = []
    for f, name in enumerate(names):
        features = append_general_matrix_rows(feature_parts[f])
        if compress:
            features.compress()
        out.append(NnetIo(name, np.concatenate(index_parts[f]).astype(np.int32), features))
    return NnetExample(out)


# ---------------------------------------------------------------------------
# --minibatch-size rules


@dataclass
class IntSet:
    """A set like ``16:32,64``: ranges of positive integers."""

    ranges: list[tuple[int, int]]
    largest_size: int

    @staticmethod
    def parse(text: str) -> "IntSet | None":
        ranges = []
        for part in text.split(","):
            try:
                vals = [int(v) for v in part.split(":")]
            except ValueError:
                return None
            if not 1 <= len(vals) <= 2 or vals[0] > vals[-1] or vals[0] <= 0:
                return None
            ranges.append((vals[0], vals[-1]))
        if not ranges:
            return None
        return IntSet(ranges, max(r[1] for r in ranges))

    def largest_value_in_range(self, max_value: int) -> int:
        ans = 0
        for lo, hi in self.ranges:
            if max_value >= lo:
                ans = max(ans, hi if max_value >= hi else max_value)
        return ans


@dataclass
class ExampleMergingConfig:
    """Kaldi's ExampleMergingConfig (the options of nnet3-merge-egs)."""

    compress: bool = field(default=False, metadata={
        "flag": "compress", "help": "If true, compress the output examples (not recommended "
        "unless you are writing to disk)"})
    measure_output_frames: str = field(default="deprecated", metadata={
        "flag": "measure-output-frames", "help": "This value will be ignored (included for "
        "back-compatibility)"})
    minibatch_size: str = field(default="256", metadata={
        "flag": "minibatch-size", "help": "String controlling the minibatch size.  May be just "
        "an integer, meaning a fixed minibatch size (e.g. --minibatch-size=128). May be a list "
        "of ranges and values, e.g. --minibatch-size=32,64 or --minibatch-size=16:32,64,128.  "
        "All minibatches will be of the largest size until the end of the input is reached; "
        "then, increasingly smaller sizes will be allowed.  Only egs with the same structure "
        "(e.g num-frames) are merged.  You may specify different minibatch sizes for different "
        "sizes of eg (defined as the maximum number of Indexes on any input), in the format "
        "--minibatch-size='eg_size1=mb_sizes1/eg_size2=mb_sizes2', e.g. "
        "--minibatch-size=128=64:128,256/256=32:64,128.  Egs are given minibatch-sizes based "
        "on the specified eg-size closest to their actual size."})
    discard_partial_minibatches: str = field(default="deprecated", metadata={
        "flag": "discard-partial-minibatches", "help": "This value will be ignored (included "
        "for back-compatibility)"})
    multilingual_eg: bool = field(default=False, metadata={
        "flag": "multilingual-eg", "help": "Appends language name to the merged egs. Used only "
        "by chain2 recipes for now.For example, when merging examples with output-langName we "
        "would want to add ?lang=langName"})
    rules: list[tuple[int, IntSet]] = field(default_factory=list)

    def compute_derived(self) -> None:
        if self.measure_output_frames != "deprecated":
            log.warn("The --measure-output-frames option is deprecated and will be ignored.")
        if self.discard_partial_minibatches != "deprecated":
            log.warn("The --discard-partial-minibatches option is deprecated and will be ignored.")
        bad = ConfigError(f"Could not parse option --minibatch-size={self.minibatch_size}")
        parts = self.minibatch_size.split("/")
        if not self.minibatch_size:
            raise ConfigError(f"Invalid option --minibatch-size={self.minibatch_size}")
        self.rules = []
        for rule in parts:
            if "=" in rule:
                pieces = rule.split("=")
                if len(pieces) != 2:
                    raise bad
                try:
                    eg_size = int(pieces[0])
                except ValueError:
                    raise bad from None
                int_set = IntSet.parse(pieces[1])
            else:
                if len(parts) != 1:
                    raise ConfigError(f"Could not parse option --minibatch-size={self.minibatch_size}"
                                      " (all rules must have eg-size specified if >1 rule)")
                eg_size, int_set = 0, IntSet.parse(rule)
            if int_set is None:
                raise bad
            self.rules.append((eg_size, int_set))
        sizes = sorted(r[0] for r in self.rules)
        if len(set(sizes)) != len(sizes):
            raise ConfigError(f"Invalid --minibatch-size={self.minibatch_size} (repeated example-sizes)")

    def minibatch_size_for(self, size_of_eg: int, num_available_egs: int, input_ended: bool) -> int:
        """Kaldi's MinibatchSize(): how many egs to merge now (0: wait / discard)."""
        if not self.rules:
            raise ConfigError("call compute_derived() before minibatch_size_for()")
        best, best_dist = 0, None
        for i, (eg_size, _) in enumerate(self.rules):
            dist = abs(size_of_eg - eg_size)
            if best_dist is None or dist < best_dist:
                best, best_dist = i, dist
        int_set = self.rules[best][1]
        if not input_ended:
            return int_set.largest_size if int_set.largest_size <= num_available_egs else 0
        return int_set.largest_value_in_range(num_available_egs)


# ---------------------------------------------------------------------------
# ExampleMerger and its statistics


def _fmt(value: float, precision: int) -> str:
    """C++ ``ostream << float`` with the given precision (``%g``)."""
    v = float(np.float32(value))
    if v != v:
        return "-nan"
    return "%.*g" % (precision, v)


@dataclass
class _SizeStats:
    num_discarded: int = 0
    written: dict[int, int] = field(default_factory=dict)
    order: StdUnorderedOrder = field(default_factory=StdUnorderedOrder)


class ExampleMergingStats:
    """Kaldi's ExampleMergingStats: what was merged and discarded, per eg type."""

    def __init__(self) -> None:
        self.stats: dict[tuple[int, int], _SizeStats] = {}

    def wrote_example(self, example_size: int, structure_hash_value: int, minibatch_size: int) -> None:
        s = self.stats.setdefault((example_size, structure_hash_value), _SizeStats())
        if minibatch_size not in s.written:
            s.order.insert(minibatch_size, minibatch_size)
            s.written[minibatch_size] = 0
        s.written[minibatch_size] += 1

    def discarded_examples(self, example_size: int, structure_hash_value: int, num: int) -> None:
        s = self.stats.setdefault((example_size, structure_hash_value), _SizeStats())
        s.num_discarded += num

    def specific_stats(self) -> str:
        parts = []
        for (eg_size, _), s in sorted(self.stats.items(), key=lambda kv: kv[0]):
            body = ",".join(f"{mb}->{s.written[mb]}" for mb in s.order)
            parts.append(f"{eg_size}={{{body},d={s.num_discarded}}}")
        return ",".join(parts)

    def aggregate_stats(self) -> str:
        total_discarded = total_discarded_size = total_kept = total_kept_size = 0
        num_minibatches = num_mb_types = 0
        for (eg_size, _), s in self.stats.items():
            total_discarded += s.num_discarded
            total_discarded_size += s.num_discarded * eg_size
            for mb, num in s.written.items():
                num_mb_types += 1
                num_minibatches += num
                total_kept += num * mb
                total_kept_size += num * mb * eg_size
        total = total_discarded + total_kept
        total_size = total_discarded_size + total_kept_size
        div = lambda a, b: (a / b) if b else float("nan")
        return (f"Processed {total} egs of avg. size {_fmt(div(total_size * 1.0, total), 4)} into "
                f"{num_minibatches} minibatches, discarding "
                f"{_fmt(div(total_discarded * 100.0, total), 4)}% of egs.  Avg minibatch size was "
                f"{_fmt(div(total_kept * 1.0, num_minibatches), 4)}, #distinct types of "
                f"egs/minibatches was {len(self.stats)}/{num_mb_types}")

    def print_stats(self) -> None:
        log.log("Merged specific eg types as follows [format: <eg-size1>={<mb-size1>->"
                "<num-minibatches1>,<mbsize2>-><num-minibatches2>.../d=<num-discarded>},"
                "<egs-size2>={...},... (note,egs-size == number of input frames including context).")
        log.log(self.specific_stats())
        log.log(self.aggregate_stats())


class ExampleMerger:
    """Kaldi's ExampleMerger: accepts egs one by one, writes merged minibatches.

    ``writer(key, eg)`` receives each minibatch, keyed ``merged-<i>-<size>``.
    """

    def __init__(self, config: ExampleMergingConfig,
                 writer: Callable[[str, NnetExample], None]) -> None:
        self.config = config
        self.writer = writer
        self.finished = False
        self.num_egs_written = 0
        self.stats = ExampleMergingStats()
        self._groups: dict[tuple, list[NnetExample]] = {}
        self._hash: dict[tuple, int] = {}
        self._order = StdUnorderedOrder()

    def accept_example(self, eg: NnetExample) -> None:
        if self.finished:
            raise RuntimeError("accept_example() after finish()")
        key = eg.structure_key()
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = []
            self._hash[key] = structure_hash(eg)
            self._order.insert(key, self._hash[key])
        group.append(eg)
        mb = self.config.minibatch_size_for(example_size(eg), len(group), False)
        if mb != 0:
            if mb != len(group):
                raise RuntimeError("minibatch size does not match the number of available egs")
            del self._groups[key]
            self._order.erase(key)
            self._write_minibatch(group, self._hash.pop(key))

    def _write_minibatch(self, egs: list[NnetExample], hash_value: int) -> None:
        self.stats.wrote_example(example_size(egs[0]), hash_value, len(egs))
        merged = merge_examples(egs, self.config.compress)
        key = f"merged-{self.num_egs_written}-{len(egs)}"
        self.num_egs_written += 1
        self.writer(key, merged)

    def finish(self) -> None:
        """Flush the remaining groups as the rules allow, discard the rest, log stats."""
        if self.finished:
            return
        self.finished = True
        for key in list(self._order):
            vec = self._groups.pop(key)
            hash_value = self._hash.pop(key)
            eg_size = example_size(vec[0])
            while vec:
                mb = self.config.minibatch_size_for(eg_size, len(vec), True)
                if mb == 0:
                    break
                batch, vec = vec[:mb], vec[mb:]
                self._write_minibatch(batch, hash_value)
            if vec:
                self.stats.discarded_examples(eg_size, hash_value, len(vec))
        self._order = StdUnorderedOrder()
        self.stats.print_stats()

    def exit_status(self) -> int:
        self.finish()
        return 0 if self.num_egs_written > 0 else 1
