"""What the egs binaries do: get, copy, shuffle and merge egs.

Each public ``*_egs`` function is the body of one Kaldi binary
(nnet3bin/nnet3-get-egs.cc, nnet3-get-egs-dense-targets.cc, nnet3-copy-egs.cc,
nnet3-shuffle-egs.cc, nnet3-merge-egs.cc) on rspecifiers / wspecifiers, with
the same warnings, LOG summaries and exit status; the CLI modules only parse
options and call them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from .. import log
from ..errors import ConfigError, FormatError, UsageError
from ..io.kaldi_io import KaldiReader, KaldiWriter
from .egs import EXAMPLE_HOLDER, NnetExample, NnetIo
from .egs_merge import ExampleMerger, ExampleMergingConfig
from .egs_split import ChunkTimeInfo, ExampleGenerationConfig, UtteranceSplitter
from ..io.general_matrix import (GeneralMatrix, extract_row_range_with_padding,
                                 filter_general_matrix_rows)
from .kaldi_random import GlibcRand, MT19937, std_shuffle
from ..io.posterior import POSTERIOR_HOLDER, Posterior
from ..io.table import (GENERAL_MATRIX_HOLDER, MATRIX_HOLDER, RandomAccessTableReader,
                        SequentialTableReader, TableWriter, classify_rspecifier, is_token)

F32 = np.float32


# ---------------------------------------------------------------------------
# nnet3-get-egs / nnet3-get-egs-dense-targets


@dataclass
class GetEgsOptions:
    """The options of nnet3-get-egs (and of its dense-targets variant)."""

    compress: bool = field(default=True, metadata={
        "flag": "compress", "help": "If true, write egs with input features in compressed "
        "format (recommended). This is only relevant if the features being read are "
        "un-compressed; if already compressed, we keep the same compressed format when "
        "dumping egs."})
    # --num-targets for the dense variant
    num_pdfs: int = field(default=-1, metadata={
        "flag": "num-pdfs", "help": "Number of pdfs in the acoustic model"})
    online_ivector_rspecifier: str = field(default="", metadata={
        "flag": "online-ivectors", "help": "Rspecifier of ivector features, as a matrix."})
    online_ivector_period: int = field(default=1, metadata={
        "flag": "online-ivector-period", "help": "Number of frames between iVectors in "
        "matrices supplied to the --online-ivectors option"})
    length_tolerance: int = field(default=100, metadata={
        "flag": "length-tolerance", "help": "Tolerance for difference in num-frames between "
        "feat and ivector matrices"})
    targets_length_tolerance: int = field(default=2, metadata={
        "flag": "targets-length-tolerance", "help": "Tolerance for difference in num-frames "
        "(after subsampling) between feature matrix and posterior"})
    # pynnet3: seed of the gap placement (Kaldi: random_device)
    seed: int = field(default=0, metadata={
        "flag": "srand", "help": "pynnet3 only: seed for placing the gaps between chunks "
        "(Kaldi uses std::random_device there)."})


def _chunk_ivector(ivector_feats: np.ndarray, start_frame: int, num_input_frames: int,
                   period: int, rand: GlibcRand) -> np.ndarray:
    # Kaldi picks a random frame from start_frame to start_frame + (utterance
    # length) - 1, not just within the chunk; kept as is.
    frame = rand.rand_int(start_frame, start_frame + num_input_frames - 1)
    sub = int(frame / period)
    sub = min(max(sub, 0), ivector_feats.shape[0] - 1)
    return ivector_feats[sub:sub + 1].copy()


def process_utterance(feats: GeneralMatrix, ivector_feats: np.ndarray | None, ivector_period: int,
                      targets: Posterior | np.ndarray, utt_id: str, opts: GetEgsOptions,
                      splitter: UtteranceSplitter, dense: bool,
                      forced_starts: Sequence[int] | None = None
                      ) -> list[tuple[str, NnetExample]] | None:
    """Kaldi's ProcessFile: the keyed egs of one utterance, or None on error.

    ``targets`` is a Posterior (sparse targets, weighted by each frame's
    output weight) or, with ``dense``, a float matrix copied unweighted.
    """
    num_input_frames = feats.num_rows
    num_targets = targets.shape[0] if dense else len(targets)
    if not splitter.lengths_match(utt_id, num_input_frames, num_targets,
                                  opts.targets_length_tolerance):
        return None
    if dense:
        if num_targets == 0:
            return None
        if opts.num_pdfs >= 0 and targets.shape[1] != opts.num_pdfs:
            raise FormatError(f"targets for {utt_id} have dimension {targets.shape[1]}, "
                              f"expected --num-targets={opts.num_pdfs}")
    chunks: list[ChunkTimeInfo] = splitter.get_chunks_for_utterance(num_input_frames, forced_starts)
    if not chunks:
        log.warn(f"Not producing egs for utterance {utt_id} because it is too short: "
                 f"{num_input_frames} frames.")
        if dense:
            return None
    sf = splitter.config.frame_subsampling_factor
    out = []
    for chunk in chunks:
        tot_input_frames = chunk.left_context + chunk.num_frames + chunk.right_context
        start_frame = chunk.first_frame - chunk.left_context
        input_frames = extract_row_range_with_padding(feats, start_frame, tot_input_frames)
        eg = NnetExample([NnetIo.from_matrix("input", -chunk.left_context, input_frames)])
        if ivector_feats is not None:
            ivector = _chunk_ivector(ivector_feats, start_frame, num_input_frames,
                                     ivector_period, splitter.rand)
            eg.io.append(NnetIo.from_matrix("ivector", 0, ivector))
        start_sub, num_sub = chunk.first_frame // sf, chunk.num_frames // sf
        if dense:
            if start_sub + num_sub - 1 >= targets.shape[0]:
                raise FormatError(f"chunk at frame {chunk.first_frame} of {utt_id} runs past "
                                  f"its {targets.shape[0]} target rows")
            rows = np.minimum(np.arange(start_sub, start_sub + num_sub), targets.shape[0] - 1)
            eg.io.append(NnetIo.from_matrix("output", 0, targets[rows], sf))
        else:
            labels = []
            for i in range(num_sub):
                t = (i + start_sub) * sf
                # Kaldi indexes output_weights with i * sf, which for sf > 1 runs
                # past the end of the vector; the weight of frame i is used here.
                w = F32(chunk.output_weights[i])
                frame = targets[t] if t < len(targets) else []
                labels.append([(pdf, float(F32(F32(p) * w))) for pdf, p in frame])
            eg.io.append(NnetIo.from_posterior("output", opts.num_pdfs, 0, labels, sf))
        out.append((f"{utt_id}-{chunk.first_frame}", eg))
    if opts.compress:
        # (the chunks of one utterance share their shapes: compressed together,
        # the same bytes as one eg at a time)
        GeneralMatrix.compress_all([io.features for _, eg in out for io in eg.io])
    return out


def chunk_starts_from_keys(egs_rspecifier: str) -> dict[str, list[int]]:
    """Chunk start frames per utterance from the keys ``<utt>-<first_frame>`` of an egs archive."""
    starts: dict[str, list[int]] = {}
    with SequentialTableReader(egs_rspecifier, EXAMPLE_HOLDER) as reader:
        for key, _ in reader:
            utt, _, first = key.rpartition("-")
            if not utt or not first.lstrip("-").isdigit():
                raise FormatError(f"eg key '{key}' is not of the form <utt>-<first-frame>",
                                  where=egs_rspecifier)
            starts.setdefault(utt, []).append(int(first))
    return starts


def get_egs(feature_rspecifier: str, targets_rspecifier: str, egs_wspecifier: str,
            eg_config: ExampleGenerationConfig, opts: GetEgsOptions, dense: bool = False,
            chunk_starts: Mapping[str, Sequence[int]] | None = None) -> int:
    """nnet3-get-egs (``dense=False``, Posterior targets) or
    nnet3-get-egs-dense-targets (``dense=True``, matrix targets); returns the exit status.

    ``chunk_starts`` (utterance -> first frames) forces where chunks start,
    e.g. to reproduce a Kaldi run from its eg keys.
    """
    if not dense and opts.num_pdfs <= 0:
        raise ConfigError("--num-pdfs options is required.")
    eg_config.compute_derived()
    splitter = UtteranceSplitter(eg_config, seed=opts.seed)
    targets_reader = RandomAccessTableReader(
        targets_rspecifier, MATRIX_HOLDER if dense else POSTERIOR_HOLDER)
    ivector_reader = (RandomAccessTableReader(opts.online_ivector_rspecifier, MATRIX_HOLDER)
                      if opts.online_ivector_rspecifier else None)
    num_err = 0
    with TableWriter(egs_wspecifier, EXAMPLE_HOLDER) as writer, \
            SequentialTableReader(feature_rspecifier, GENERAL_MATRIX_HOLDER) as feat_reader:
        for key, feats in feat_reader:
            if not targets_reader.has_key(key):
                log.warn(f"No target matrix for key {key}" if dense
                         else f"No pdf-level posterior for key {key}")
                num_err += 1
                continue
            targets = targets_reader.value(key)
            ivectors = None
            if ivector_reader is not None:
                if not ivector_reader.has_key(key):
                    log.warn(f"No iVectors for utterance {key}")
                    num_err += 1
                    continue
                ivectors = ivector_reader.value(key)
                if (abs(feats.num_rows - ivectors.shape[0] * opts.online_ivector_period)
                        > opts.length_tolerance or ivectors.shape[0] == 0):
                    log.warn(f"Length difference between feats {feats.num_rows} and iVectors "
                             f"{ivectors.shape[0]}{' ' if not dense else ''}exceeds tolerance "
                             f"{opts.length_tolerance}")
                    num_err += 1
                    continue
            forced = chunk_starts.get(key) if chunk_starts is not None else None
            egs = process_utterance(feats, ivectors, opts.online_ivector_period, targets, key,
                                    opts, splitter, dense, forced)
            if egs is None:
                num_err += 1
                continue
            for eg_key, eg in egs:
                writer.write(eg_key, eg)
    targets_reader.close()
    if ivector_reader is not None:
        ivector_reader.close()
    if num_err > 0:
        log.warn(f"{num_err} utterances had errors and could not be processed.")
    splitter.print_stats()
    return splitter.exit_status()


# ---------------------------------------------------------------------------
# nnet3-copy-egs


def shift_example_times(t_offset: int, exclude_names: Sequence[str], eg: NnetExample) -> None:
    """Kaldi's ShiftExampleTimes: add ``t_offset`` to t of every io not excluded."""
    if t_offset == 0:
        return
    for io in eg.io:
        if io.name not in exclude_names:
            io.indexes = io.indexes.copy()
            io.indexes[:, 1] += t_offset


def contains_single_example(eg: NnetExample) -> tuple[int, int, int, int] | None:
    """(min_input_t, max_input_t, min_output_t, max_output_t), or None (with a
    warning) if the eg is merged or lacks an 'input' or 'output'."""
    found: dict[str, tuple[int, int]] = {}
    for io in eg.io:
        if io.indexes.shape[0] == 0:
            raise FormatError(f"empty NnetIo '{io.name}'")
        if np.any(io.indexes[:, 0] != 0):
            log.warn("Example does not contain just a single example; too late to do frame "
                     "selection or reduce context.")
            return None
        if io.name in ("input", "output"):
            t = io.indexes[:, 1]
            found[io.name] = (int(t.min()), int(t.max()))
    if "input" not in found:
        log.warn("Example does not have any input named 'input'")
        return None
    if "output" not in found:
        log.warn("Example does not have any output named 'output'")
        return None
    return found["input"] + found["output"]


def filter_example(eg: NnetExample, min_input_t: int, max_input_t: int,
                   min_output_t: int, max_output_t: int) -> NnetExample:
    """Kaldi's FilterExample: drop input/output rows whose t is out of range."""
    out = []
    for io in eg.io:
        if io.name == "input":
            lo, hi = min_input_t, max_input_t
        elif io.name == "output":
            lo, hi = min_output_t, max_output_t
        else:
            out.append(NnetIo(io.name, io.indexes.copy(), io.features.copy()))
            continue
        t = io.indexes[:, 1]
        keep = (t >= lo) & (t <= hi)
        if not keep.any():
            raise FormatError(f"FilterExample removed all indexes for '{io.name}'")
        out.append(NnetIo(io.name, io.indexes[keep], filter_general_matrix_rows(io.features, keep)))
    return NnetExample(out)


class ExampleSelector:
    """Kaldi's SelectFromExample (frame selection, context reduction, time shift)."""

    def __init__(self, frame: str, left_context: int, right_context: int, frame_shift: int,
                 rand: GlibcRand) -> None:
        self.frame = frame
        self.left_context = left_context
        self.right_context = right_context
        self.frame_shift = frame_shift
        self.rand = rand
        self.warned_left = self.warned_right = False

    def select(self, eg: NnetExample) -> NnetExample | None:
        ranges = contains_single_example(eg)
        if ranges is None:
            raise FormatError("Too late to perform frame selection/context reduction on these "
                              "examples (already merged?)")
        min_in, max_in, min_out, max_out = ranges
        if self.frame != "":
            if self.frame == "random":
                min_out = max_out = self.rand.rand_int(min_out, max_out)
            else:
                try:
                    frame = int(self.frame)
                except ValueError:
                    raise ConfigError(f"Invalid option --frame='{self.frame}'") from None
                if frame < min_out or frame > max_out:
                    return None
                min_out = max_out = frame
        if self.left_context != -1:
            if not self.warned_left and min_in > min_out - self.left_context:
                self.warned_left = True
                log.warn(f"You requested --left-context={self.left_context}, but example only has "
                         f"left-context of {min_out - min_in} (will warn only once; this may be "
                         "harmless if using any --*left-context-initial options)")
            min_in = max(min_in, min_out - self.left_context)
        if self.right_context != -1:
            if not self.warned_right and max_in < max_out + self.right_context:
                self.warned_right = True
                log.warn(f"You requested --right-context={self.right_context}, but example only "
                         f"has right-context of {max_in - max_out} (will warn only once; this may "
                         "be harmless if using any --*right-context-final options.")
            max_in = min(max_in, max_out + self.right_context)
        out = filter_example(eg, min_in, max_in, min_out, max_out)
        shift_example_times(self.frame_shift, ["ivector"], out)
        return out


def get_count(expected_count: float, rand: GlibcRand) -> int:
    """Kaldi's GetCount: floor or ceil of ``expected_count``, with that expectation."""
    if expected_count < 0:
        raise ConfigError("--keep-proportion must be >= 0")
    ans = int(math.floor(expected_count))
    if rand.with_prob(expected_count - ans):
        ans += 1
    return ans


class _FloatHolder:
    """Kaldi's BasicHolder<BaseFloat> (``key 0.5`` lines / binary floats)."""

    name = "BaseFloat"

    @staticmethod
    def read(r: KaldiReader) -> float:
        value = r.read_float()
        if not r.binary:
            end = r.data.find(b"\n", r.pos)
            r.pos = len(r.data) if end < 0 else end + 1
        return value

    @staticmethod
    def write(w: KaldiWriter, value: float) -> None:
        w.write_float(value)
        if not w.binary:
            w.write_raw("\n")


class _TokenHolder:
    """Kaldi's TokenHolder (``key token`` lines)."""

    name = "Token"

    @staticmethod
    def read(r: KaldiReader) -> str:
        word = r._read_word().decode()
        end = r.data.find(b"\n", r.pos)
        r.pos = len(r.data) if end < 0 else end + 1
        return word

    @staticmethod
    def write(w: KaldiWriter, token: str) -> None:
        w.write_raw(token + "\n")


def _rename_outputs(new_name: str, eg: NnetExample) -> None:
    found = False
    for io in eg.io:
        if io.name == "output":
            io.name = new_name
            found = True
    if not found:
        raise FormatError("No io-node with name 'output'exists in eg.")


def _scale_supervision_weight(weight: float, eg: NnetExample) -> None:
    if weight == 1.0:
        return
    found = False
    for io in eg.io:
        if io.name == "output":
            io.features.scale(weight)
            found = True
    if not found:
        raise FormatError("No supervision with name 'output'exists in eg.")


@dataclass
class CopyEgsOptions:
    """The options of nnet3-copy-egs."""

    random: bool = field(default=False, metadata={
        "flag": "random", "help": "If true, will write frames to output archives randomly, not "
        "round-robin."})
    srand: int = field(default=0, metadata={
        "flag": "srand", "help": "Seed for random number generator (only relevant if "
        "--random=true or --keep-proportion != 1.0)"})
    frame_shift: int = field(default=0, metadata={
        "flag": "frame-shift", "help": "Allows you to shift time values in the supervision data "
        "(excluding iVector data).  Only really useful in clockwork topologies (i.e. any "
        "topology for which modulus != 1).  Shifting is done after any frame selection."})
    keep_proportion: float = field(default=1.0, metadata={
        "flag": "keep-proportion", "help": "If <1.0, this program will randomly keep this "
        "proportion of the input samples.  If >1.0, it will in expectation copy a sample this "
        "many times.  It will copy it a number of times equal to floor(keep-proportion) or "
        "ceil(keep-proportion)."})
    frame: str = field(default="", metadata={
        "flag": "frame", "help": "This option can be used to select a single frame from each "
        "multi-frame example.  Set to a number 0, 1, etc. to select a frame with a given index, "
        "or 'random' to select a random frame."})
    left_context: int = field(default=-1, metadata={
        "flag": "left-context", "help": "Can be used to truncate the feature left-context that "
        "we output."})
    right_context: int = field(default=-1, metadata={
        "flag": "right-context", "help": "Can be used to truncate the feature right-context "
        "that we output."})
    weights_rspecifier: str = field(default="", metadata={
        "flag": "weights", "help": "Rspecifier indexed by the key of egs, providing a weight by "
        "which we will scale the supervision matrix for that eg. Used in multilingual "
        "training."})
    outputs_rspecifier: str = field(default="", metadata={
        "flag": "outputs", "help": "Rspecifier indexed by the key of egs, providing a "
        "string-valued output name, e.g. 'output-0'.  If provided, the NnetIo with name "
        "'output' will be renamed to the provided name. Used in multilingual training."})


def copy_egs(egs_rspecifier: str, egs_wspecifiers: Sequence[str], opts: CopyEgsOptions) -> int:
    """nnet3-copy-egs; returns the exit status."""
    rand = GlibcRand(opts.srand)
    selector = ExampleSelector(opts.frame, opts.left_context, opts.right_context,
                               opts.frame_shift, rand)
    weights = (RandomAccessTableReader(opts.weights_rspecifier, _FloatHolder())
               if opts.weights_rspecifier else None)
    names = (RandomAccessTableReader(opts.outputs_rspecifier, _TokenHolder())
             if opts.outputs_rspecifier else None)
    writers = [TableWriter(w, EXAMPLE_HOLDER) for w in egs_wspecifiers]
    num_read = num_written = num_err = 0
    modify = not (opts.frame == "" and opts.left_context == -1 and opts.right_context == -1
                  and opts.frame_shift == 0)
    try:
        with SequentialTableReader(egs_rspecifier, EXAMPLE_HOLDER) as reader:
            for key, eg in reader:
                num_read += 1
                count = get_count(opts.keep_proportion, rand)
                if weights is not None:
                    if not weights.has_key(key):
                        log.warn(f"No weight for example key {key}")
                        num_err += 1
                        continue
                    _scale_supervision_weight(weights.value(key), eg)
                new_name = ""
                if names is not None:
                    if not names.has_key(key):
                        log.warn(f"No new output-name for example key {key}")
                        num_err += 1
                        continue
                    new_name = names.value(key)
                for c in range(count):
                    index = (rand.rand() if opts.random else num_written) % len(writers)
                    if not modify:
                        if new_name and c == 0:
                            _rename_outputs(new_name, eg)
                        writers[index].write(key, eg)
                        num_written += 1
                    else:
                        selected = selector.select(eg)
                        if selected is not None:
                            if new_name:
                                _rename_outputs(new_name, selected)
                            writers[index].write(key, selected)
                            num_written += 1
    except BaseException:
        for w in writers:
            w.abort()      # archive files are not left half written at their names
        raise
    finally:
        for w in writers:
            w.close()      # (a no-op after abort)
        for r in (weights, names):
            if r is not None:
                r.close()
    log.log(f"Read {num_read} neural-network training examples, wrote {num_written}, "
            f"{num_err} examples had errors.")
    return 0 if num_written > 0 else 1


# ---------------------------------------------------------------------------
# nnet3-shuffle-egs


def shuffle_egs(egs_rspecifier: str, egs_wspecifier: str, srand: int = 0,
                buffer_size: int = 0) -> int:
    """nnet3-shuffle-egs, with Kaldi's exact random streams.

    Full shuffling uses ``std::mt19937(srand)`` + ``std::shuffle``; the
    buffered mode draws from ``RandInt``, which Kaldi never seeds here (so
    ``--srand`` has no effect on it, as in Kaldi).
    """
    num_done = 0
    with TableWriter(egs_wspecifier, EXAMPLE_HOLDER) as writer, \
            SequentialTableReader(egs_rspecifier, EXAMPLE_HOLDER) as reader:
        if buffer_size == 0:
            egs = list(reader)
            std_shuffle(egs, MT19937(srand))
        else:
            if buffer_size < 0:
                raise ConfigError("--buffer-size must be >= 0")
            rand = GlibcRand(1)
            egs: list = [None] * buffer_size
            for key, eg in reader:
                index = rand.rand_int(0, buffer_size - 1)
                if egs[index] is not None:
                    writer.write(*egs[index])
                    num_done += 1
                egs[index] = (key, eg)
        for item in egs:
            if item is not None:
                writer.write(*item)
                num_done += 1
    log.log(f"Shuffled order of {num_done} neural-network training examples "
            + ("using a buffer (partial randomization)" if buffer_size else ""))
    return 0 if num_done else 1


# ---------------------------------------------------------------------------
# nnet3-subset-egs


def subset_egs(egs_rspecifier: str, egs_wspecifier: str, n: int = 1000, srand: int = 0,
               randomize_order: bool = True) -> int:
    """nnet3-subset-egs: a random subset of ``n`` egs, in Kaldi's exact order.

    Kaldi keeps the first ``n`` egs, then replaces a random one of them
    (``RandInt(0, n-1)``) with the i-th eg with probability ``n / i``
    (``WithProb``, float arithmetic); both draw from glibc ``rand()``, which
    this binary never seeds (``--srand`` only seeds the ``std::mt19937`` of
    the final ``std::shuffle``).  At most ``n`` egs are held in memory.
    Returns the exit status (1 when the input was empty).
    """
    if n < 0:
        raise ConfigError(f"--n must be >= 0, got {n}")
    rand = GlibcRand(1)
    egs: list[tuple[str, NnetExample]] = []
    num_read = 0
    with SequentialTableReader(egs_rspecifier, EXAMPLE_HOLDER) as reader:
        for key, eg in reader:
            num_read += 1
            if num_read <= n:
                egs.append((key, eg))
            elif rand.with_prob(float(F32(n) / F32(num_read))):
                egs[rand.rand_int(0, n - 1)] = (key, eg)
    if randomize_order:
        std_shuffle(egs, MT19937(srand))
    with TableWriter(egs_wspecifier, EXAMPLE_HOLDER) as writer:
        for key, eg in egs:
            writer.write(key, eg)
    log.log(f"Selected a subset of {len(egs)} out of {num_read} neural-network training "
            "examples ")
    return 0 if num_read else 1


# ---------------------------------------------------------------------------
# nnet3-get-egs-simple


def split_arg_on_equals(arg: str) -> tuple[str, str]:
    """A ``name=rspecifier`` argument of nnet3-get-egs-simple, split on the first '='."""
    name, eq, rspecifier = arg.partition("=")
    if not eq:
        raise ConfigError(f"Bad command line argument (expecting '='): {arg}")
    if not is_token(name):
        raise ConfigError(f"Bad command line argument (expecting a valid name before '='): "
                          f"{arg}")
    try:
        classify_rspecifier(rspecifier)
    except UsageError:
        raise ConfigError(f"Bad command line argument (expecting an rspecifier after '='): "
                          f"{arg}") from None
    return name, rspecifier


def get_egs_simple(named_rspecifiers: Sequence[str], egs_wspecifier: str) -> int:
    """nnet3-get-egs-simple: one eg per key of the first ``name=rspecifier``.

    Each named matrix (full, compressed or sparse, kept as read) becomes an
    NnetIo of that name with indexes (0, t, 0), t = 0, 1, ...; the first
    archive is read in order, the others by key.  Returns the exit status
    (1 when no eg was written).
    """
    if not named_rspecifiers:
        raise ConfigError("nnet3-get-egs-simple needs at least one name=rspecifier")
    pairs = [split_arg_on_equals(arg) for arg in named_rspecifiers]
    first_name, first_rspecifier = pairs[0]
    num_done = num_err = 0
    with TableWriter(egs_wspecifier, EXAMPLE_HOLDER) as writer, \
            SequentialTableReader(first_rspecifier, GENERAL_MATRIX_HOLDER) as first_reader:
        others = [(name, RandomAccessTableReader(rspec, GENERAL_MATRIX_HOLDER))
                  for name, rspec in pairs[1:]]
        try:
            for key, feats in first_reader:
                eg = NnetExample([NnetIo.from_matrix(first_name, 0, feats)])
                for name, reader in others:
                    if not reader.has_key(key):
                        log.warn(f"Could not find input for key {key} for io-name={name}")
                        break
                    eg.io.append(NnetIo.from_matrix(name, 0, reader.value(key)))
                else:
                    writer.write(key, eg)
                    num_done += 1
                    continue
                num_err += 1
        finally:
            for _, reader in others:
                reader.close()
    if num_err > 0:
        log.warn(f"{num_err} utterances had errors and could not be processed.")
    return 0 if num_done > 0 else 1


# ---------------------------------------------------------------------------
# nnet3-merge-egs


def merge_egs(egs_rspecifier: str, egs_wspecifier: str, config: ExampleMergingConfig) -> int:
    """nnet3-merge-egs; returns the exit status."""
    config.compute_derived()
    with TableWriter(egs_wspecifier, EXAMPLE_HOLDER) as writer:
        merger = ExampleMerger(config, writer.write)
        with SequentialTableReader(egs_rspecifier, EXAMPLE_HOLDER) as reader:
            for _, eg in reader:
                merger.accept_example(eg)
        merger.finish()
    return merger.exit_status()


__all__ = ["GetEgsOptions", "process_utterance", "get_egs", "chunk_starts_from_keys", "CopyEgsOptions", "copy_egs",
           "ExampleSelector", "filter_example", "shift_example_times", "shuffle_egs",
           "merge_egs", "get_count", "subset_egs",
           "get_egs_simple", "split_arg_on_equals"]
