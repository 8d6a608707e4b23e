"""What the chain egs binaries do (Kaldi's chainbin/nnet3-chain-*-egs.cc):
get, copy, merge, shuffle, subset and normalize chain egs.

Each public ``*_chain_egs`` function is the body of one binary on
rspecifiers / wspecifiers, with Kaldi's warnings, LOG summaries and exit
status; the CLI modules only parse options and call them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ... import log
from ...errors import ConfigError, FormatError
from ...io.general_matrix import (GeneralMatrix, extract_row_range_with_padding,
                                filter_general_matrix_rows)
from ...io.table import (GENERAL_MATRIX_HOLDER, MATRIX_HOLDER, VECTOR_HOLDER,
                         RandomAccessTableReader, SequentialTableReader, TableWriter)
from ..egs import NnetIo
from ..egs_merge import ExampleMergingConfig
from ..egs_split import ExampleGenerationConfig, UtteranceSplitter
from ..egs_tools import _FloatHolder, _TokenHolder, _chunk_ivector, get_count
from ..kaldi_random import MT19937, GlibcRand, std_shuffle
from .egs import CHAIN_EXAMPLE_HOLDER, NnetChainExample, NnetChainSupervision
from .fst import Fst, apply_probability_scale, read_fst_file
from .merge import ChainExampleMerger
from .supervision import (SUPERVISION_HOLDER, NormalizationFst, Supervision, SupervisionSplitter,
                          add_weight_to_supervision_fst)

F32 = np.float32


# ---------------------------------------------------------------------------
# nnet3-chain-copy-egs


@dataclass
class ChainCopyEgsOptions:
    """The options of nnet3-chain-copy-egs."""

    random: bool = field(default=False, metadata={
        "flag": "random", "help": "If true, will write frames to output archives randomly, not "
        "round-robin."})
    keep_proportion: float = field(default=1.0, metadata={
        "flag": "keep-proportion", "help": "If <1.0, this program will randomly keep this "
        "proportion of the input samples.  If >1.0, it will in expectation copy a sample this "
        "many times.  It will copy it a number of times equal to floor(keep-proportion) or "
        "ceil(keep-proportion)."})
    srand: int = field(default=0, metadata={
        "flag": "srand", "help": "Seed for random number generator (only relevant if "
        "--random=true or --keep-proportion != 1.0)"})
    frame_shift: int = field(default=0, metadata={
        "flag": "frame-shift", "help": "Allows you to shift time values in the supervision data "
        "(excluding iVector data) - useful in augmenting data.  Note, the outputs will remain "
        "at the closest exact multiples of the frame subsampling factor"})
    # (an option of Kaldi's earlier nnet3-chain-copy-egs, kept for old recipes)
    truncate_deriv_weights: int = field(default=0, metadata={
        "flag": "truncate-deriv-weights", "help": "If nonzero, the number of initial/final "
        "subsample frames that will have their derivatives' weights set to zero."})
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


def truncate_deriv_weights(truncate: int, eg: NnetChainExample) -> None:
    """Kaldi's TruncateDerivWeights: zero the deriv weights of the first and
    last ``truncate`` frames of every sequence (all ones first if absent)."""
    for sup in eg.outputs:
        n_seq = sup.supervision.num_sequences
        fps = sup.supervision.frames_per_sequence
        if not 2 * truncate < fps:
            raise ConfigError(f"--truncate-deriv-weights={truncate} too large for "
                              f"{fps} frames per sequence")
        dw = (sup.deriv_weights.copy() if sup.deriv_weights.shape[0]
              else np.ones(sup.indexes.shape[0], np.float32))
        dw[:truncate * n_seq] = 0.0
        dw[(fps - truncate) * n_seq:] = 0.0
        sup.deriv_weights = dw


def _frame_subsampling_factor(indexes: np.ndarray) -> int:
    """Kaldi's GetFrameSubsamplingFactor: the first change of ``t`` in the indexes."""
    t = indexes[:, 1]
    diff = np.nonzero(t != t[0])[0] if t.size else np.zeros(0, int)
    if not diff.size:
        raise FormatError("Error getting frame subsampling factor")
    return int(t[diff[0]] - t[0])


def shift_chain_example_times(frame_shift: int, exclude_names: Sequence[str],
                              eg: NnetChainExample) -> None:
    """Kaldi's ShiftChainExampleTimes: inputs (but ``exclude_names``) shift by
    ``frame_shift``; outputs by the nearest multiple of their subsampling factor."""
    for io in eg.inputs:
        if io.name not in exclude_names:
            io.indexes = io.indexes.copy()
            io.indexes[:, 1] += frame_shift
    for sup in eg.outputs:
        fss = _frame_subsampling_factor(sup.indexes)
        shift = fss * int(math.floor(0.5 + frame_shift * 1.0 / fss))
        if shift != 0:
            sup.indexes = sup.indexes.copy()
            sup.indexes[:, 1] += shift


def _single_example_ranges(eg: NnetChainExample) -> tuple[int, int, int, int] | None:
    """Kaldi's ContainsSingleExample: t ranges of 'input' and 'output' if all n are 0."""
    msg = ("Example does not contain just a single example; too late to do frame selection "
           "or reduce context.")
    in_range = out_range = None
    for io in eg.inputs:
        if not io.indexes.shape[0]:
            raise FormatError(f"empty input '{io.name}'")
        if np.any(io.indexes[:, 0] != 0):
            log.warn(msg)
            return None
        if io.name == "input":
            in_range = (int(io.indexes[:, 1].min()), int(io.indexes[:, 1].max()))
    for sup in eg.outputs:
        if not sup.indexes.shape[0]:
            raise FormatError(f"empty output '{sup.name}'")
        if np.any(sup.indexes[:, 0] != 0):
            log.warn(msg)
            return None
        if sup.name == "output":
            out_range = (int(sup.indexes[:, 1].min()), int(sup.indexes[:, 1].max()))
    if in_range is None:
        log.warn("Example does not have any input named 'input'")
        return None
    if out_range is None:
        log.warn("Example does not have any output named 'output'")
        return None
    return in_range + out_range


class _ContextModifier:
    """Kaldi's ModifyChainExampleContext (with its warn-once flags)."""

    def __init__(self, left_context: int, right_context: int) -> None:
        self.left_context = left_context
        self.right_context = right_context
        self.warned_left = self.warned_right = False

    def modify(self, eg: NnetChainExample) -> None:
        ranges = _single_example_ranges(eg)
        if ranges is None:
            raise FormatError("Too late to perform frame selection/context reduction on these "
                              "examples (already merged?)")
        min_in, max_in, min_out, max_out = ranges
        if self.left_context != -1:
            observed = min_out - min_in
            if not self.warned_left and observed < self.left_context:
                self.warned_left = True
                log.warn(f"You requested --left-context={self.left_context}, but example only "
                         f"has left-context of {observed} (will warn only once; this may be "
                         "harmless if using any --*left-context-initial options)")
            min_in = max(min_in, min_out - self.left_context)
        if self.right_context != -1:
            observed = max_in - max_out
            if not self.warned_right and observed < self.right_context:
                self.warned_right = True
                log.warn(f"You requested --right-context={self.right_context}, but example only "
                         f"has right-context of {observed} (will warn only once; this may be "
                         "harmless if using any --*right-context-final options.")
            max_in = min(max_in, max_out + self.right_context)
        for io in eg.inputs:
            if io.name != "input":
                continue
            t = io.indexes[:, 1]
            keep = (t >= min_in) & (t <= max_in)
            if not keep.any():
                raise FormatError(f"FilterExample removed all indexes for '{io.name}'")
            io.indexes = io.indexes[keep]
            io.features = filter_general_matrix_rows(io.features, keep)


def _rename_chain_outputs(new_name: str, eg: NnetChainExample) -> None:
    found = False
    for sup in eg.outputs:
        if sup.name == "output":
            sup.name = new_name
            found = True
    if not found:
        raise FormatError("No supervision with name 'output'exists in eg.")


def _scale_chain_supervision_weight(weight: float, eg: NnetChainExample) -> None:
    if F32(weight) == 1.0:
        return
    found = False
    for sup in eg.outputs:
        if sup.name == "output":
            sup.supervision.weight = float(F32(sup.supervision.weight) * F32(weight))
            found = True
    if not found:
        raise FormatError("No supervision with name 'output'exists in eg.")


def copy_chain_egs(egs_rspecifier: str, egs_wspecifiers: Sequence[str],
                   opts: ChainCopyEgsOptions) -> int:
    """nnet3-chain-copy-egs; returns the exit status."""
    rand = GlibcRand(opts.srand)
    modifier = _ContextModifier(opts.left_context, opts.right_context)
    weights = (RandomAccessTableReader(opts.weights_rspecifier, _FloatHolder())
               if opts.weights_rspecifier else None)
    names = (RandomAccessTableReader(opts.outputs_rspecifier, _TokenHolder())
             if opts.outputs_rspecifier else None)
    writers = [TableWriter(w, CHAIN_EXAMPLE_HOLDER) for w in egs_wspecifiers]
    num_read = num_written = 0
    try:
        with SequentialTableReader(egs_rspecifier, CHAIN_EXAMPLE_HOLDER) as reader:
            for key, eg in reader:
                num_read += 1
                count = get_count(float(F32(opts.keep_proportion)), rand)
                if weights is not None:
                    if not weights.has_key(key):
                        log.warn(f"No weight for example key {key}")
                        continue
                    _scale_chain_supervision_weight(weights.value(key), eg)
                if names is not None:
                    if not names.has_key(key):
                        log.warn(f"No new output-name for example key {key}")
                        continue
                    _rename_chain_outputs(names.value(key), eg)
                if opts.frame_shift != 0:
                    shift_chain_example_times(opts.frame_shift, ["ivector"], eg)
                if opts.left_context != -1 or opts.right_context != -1:
                    modifier.modify(eg)
                if opts.truncate_deriv_weights != 0:
                    truncate_deriv_weights(opts.truncate_deriv_weights, eg)
                for _ in range(count):
                    index = (rand.rand() if opts.random else num_written) % len(writers)
                    writers[index].write(key, eg)
                    num_written += 1
    except BaseException:
        for w in writers:
            w.abort()
        raise
    finally:
        for w in writers:
            w.close()
        for r in (weights, names):
            if r is not None:
                r.close()
    log.log(f"Read {num_read} neural-network training examples, wrote {num_written}")
    return 0 if num_written > 0 else 1


# ---------------------------------------------------------------------------
# nnet3-chain-merge-egs


def merge_chain_egs(egs_rspecifier: str, egs_wspecifier: str,
                    config: ExampleMergingConfig) -> int:
    """nnet3-chain-merge-egs; returns the exit status."""
    config.compute_derived()
    with TableWriter(egs_wspecifier, CHAIN_EXAMPLE_HOLDER) as writer:
        merger = ChainExampleMerger(config, writer.write)
        with SequentialTableReader(egs_rspecifier, CHAIN_EXAMPLE_HOLDER) as reader:
            for key, eg in reader:
                if config.multilingual_eg:
                    eg.outputs[0].name = "output-" + _lang_from_key(key)
                merger.accept_example(eg)
        if not config.multilingual_eg:
            # (Kaldi calls Finish() only here; with --multilingual-eg its
            # ExitStatus() finishes, which prints the same statistics.)
            merger.finish()
        status = merger.exit_status()
    return status


def _lang_from_key(key: str) -> str:
    """Kaldi's ParseFromQueryString(key, "lang"): the value of ``lang=`` after '?'."""
    q = key.rfind("?")
    if q < 0:
        return ""
    loc = q
    while True:
        loc = key.find("lang=", loc + 1)
        if loc < 0 or loc == q + 1 or key[loc - 1] == "&":
            break
    if loc < 0:
        return ""
    value = key[loc + 5:]
    amp = value.find("&")
    return value if amp < 0 else value[:amp]


# ---------------------------------------------------------------------------
# nnet3-chain-shuffle-egs / nnet3-chain-subset-egs


def shuffle_chain_egs(egs_rspecifier: str, egs_wspecifier: str, srand: int = 0,
                      buffer_size: int = 0) -> int:
    """nnet3-chain-shuffle-egs.  Full shuffling: Kaldi seeds its std::mt19937
    from std::random_device (not repeatable); pynnet3 seeds it with --srand.
    The buffered mode is Kaldi's exactly (RandInt after srand(--srand))."""
    if buffer_size < 0:
        raise ConfigError("--buffer-size must be >= 0")
    num_done = 0
    with TableWriter(egs_wspecifier, CHAIN_EXAMPLE_HOLDER) as writer, \
            SequentialTableReader(egs_rspecifier, CHAIN_EXAMPLE_HOLDER) as reader:
        if buffer_size == 0:
            egs: list = list(reader)
            std_shuffle(egs, MT19937(srand))
        else:
            rand = GlibcRand(srand)
            egs = [None] * buffer_size
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


def subset_chain_egs(egs_rspecifier: str, egs_wspecifier: str, n: int = 1000, srand: int = 0,
                     randomize_order: bool = True) -> int:
    """nnet3-chain-subset-egs: reservoir sampling with glibc rand() (never
    seeded by this binary), then std::shuffle with std::mt19937(--srand)."""
    if n < 0:
        raise ConfigError(f"--n must be >= 0, got {n}")
    rand = GlibcRand(1)
    egs: list[tuple[str, NnetChainExample]] = []
    num_read = 0
    with SequentialTableReader(egs_rspecifier, CHAIN_EXAMPLE_HOLDER) as reader:
        for key, eg in reader:
            num_read += 1
            if num_read <= n:
                egs.append((key, eg))
            elif rand.with_prob(float(F32(n) / F32(num_read))):
                egs[rand.rand_int(0, n - 1)] = (key, eg)
    if randomize_order:
        std_shuffle(egs, MT19937(srand))
    with TableWriter(egs_wspecifier, CHAIN_EXAMPLE_HOLDER) as writer:
        for key, eg in egs:
            writer.write(key, eg)
    log.log(f"Selected a subset of {len(egs)} out of {num_read} nnet3+chain training examples ")
    return 0 if num_read else 1


# ---------------------------------------------------------------------------
# nnet3-chain-normalize-egs


def read_normalization_fst(rxfilename: str, scale: float = 1.0) -> NormalizationFst:
    fst = read_fst_file(rxfilename)
    if F32(scale) != 1.0:
        fst = apply_probability_scale(scale, fst)
    return NormalizationFst(fst)


def normalize_chain_egs(normalization_fst_rxfilename: str, egs_rspecifier: str,
                        egs_wspecifier: str, normalization_fst_scale: float = 1.0) -> int:
    """nnet3-chain-normalize-egs; returns the exit status."""
    if normalization_fst_scale < 0.0:
        raise ConfigError("Invalid scale on normalization FST; must be >= 0.0")
    norm = read_normalization_fst(normalization_fst_rxfilename, normalization_fst_scale)
    num_written = num_err = 0
    with TableWriter(egs_wspecifier, CHAIN_EXAMPLE_HOLDER) as writer, \
            SequentialTableReader(egs_rspecifier, CHAIN_EXAMPLE_HOLDER) as reader:
        for key, eg in reader:
            if len(eg.outputs) != 1:
                raise FormatError("Expected example to have exactly one output.")
            if not add_weight_to_supervision_fst(norm, eg.outputs[0].supervision):
                log.warn(f"For example {key}, FST was empty after composing with normalization "
                         "FST. This should be extremely rare (a few per corpus, at most)")
                num_err += 1
            else:
                writer.write(key, eg)
                num_written += 1
    log.log(f"Added normalization to {num_written} egs; had errors on {num_err}")
    return 0 if num_written else 1


# ---------------------------------------------------------------------------
# nnet3-chain-get-egs


@dataclass
class ChainGetEgsOptions:
    """The options of nnet3-chain-get-egs (besides ExampleGenerationConfig's)."""

    compress: bool = field(default=True, metadata={
        "flag": "compress", "help": "If true, write egs with input features in compressed "
        "format (recommended).  Update: this is now only relevant if the features being read "
        "are un-compressed; if already compressed, we keep the same compressed format when "
        "dumping egs."})
    online_ivector_rspecifier: str = field(default="", metadata={
        "flag": "online-ivectors", "help": "Rspecifier of ivector features, as a matrix."})
    online_ivector_period: int = field(default=1, metadata={
        "flag": "online-ivector-period", "help": "Number of frames between iVectors in "
        "matrices supplied to the --online-ivectors option"})
    srand: int = field(default=0, metadata={
        "flag": "srand", "help": "Seed for random number generator "})
    length_tolerance: int = field(default=100, metadata={
        "flag": "length-tolerance", "help": "Tolerance for difference in num-frames between "
        "feat and ivector matrices"})
    supervision_length_tolerance: int = field(default=1, metadata={
        "flag": "supervision-length-tolerance", "help": "Tolerance for difference in "
        "num-frames-subsampled between supervision and deriv weights, and also between "
        "supervision and input frames."})
    deriv_weights_rspecifier: str = field(default="", metadata={
        "flag": "deriv-weights-rspecifier", "help": "Per-frame weights that scales a frame's "
        "gradient during backpropagation. Not specifying this is equivalent to specifying a "
        "vector of all 1s."})
    normalization_fst_scale: float = field(default=1.0, metadata={
        "flag": "normalization-fst-scale", "help": "Scale the weights from the 'normalization' "
        "FST before applying them to the examples. (Useful for semi-supervised training)"})
    transition_model: str = field(default="", metadata={
        "flag": "transition-model", "help": "Filename of transition model to read; should only "
        "be supplied if you want 'unconstrained' egs, and if you supplied "
        "--convert-to-pdfs=false to chain-get-supervision."})
    long_key: bool = field(default=False, metadata={
        "flag": "long-key", "help": "If true, a long format will be used for the key, which "
        "encodes context info, etc."})


def process_chain_utterance(normalization: NormalizationFst | None, feats,
                            ivector_feats: np.ndarray | None, ivector_period: int,
                            supervision: Supervision, deriv_weights: np.ndarray | None,
                            utt_id: str, opts: ChainGetEgsOptions, splitter: UtteranceSplitter,
                            forced_starts: Sequence[int] | None = None
                            ) -> list[tuple[str, NnetChainExample]] | None:
    """Kaldi's ProcessFile of nnet3-chain-get-egs: the keyed egs of one
    utterance, or None on error (after a warning)."""
    if supervision.num_sequences != 1:
        raise FormatError(f"supervision for {utt_id} has {supervision.num_sequences} sequences")
    num_input_frames = feats.num_rows
    num_output_frames = supervision.frames_per_sequence
    sf = splitter.config.frame_subsampling_factor
    tol = opts.supervision_length_tolerance
    if deriv_weights is not None and abs(deriv_weights.shape[0] - num_output_frames) > tol:
        log.warn(f"For utterance {utt_id}, mismatch between deriv-weights dim and "
                 f"num-output-frames; {deriv_weights.shape[0]} vs {num_output_frames}")
        return None
    if not splitter.lengths_match(utt_id, num_input_frames, num_output_frames, tol):
        return None
    # Never read supervision frames past the end when the features are longer.
    num_input_frames = min(num_input_frames, num_output_frames * sf)
    chunks = splitter.get_chunks_for_utterance(num_input_frames, forced_starts)
    if not chunks:
        log.warn(f"Not producing egs for utterance {utt_id} because it is too short: "
                 f"{num_input_frames} frames.")
        return None
    sup_splitter = SupervisionSplitter(supervision)
    out = []
    for chunk in chunks:
        start_sub, num_sub = chunk.first_frame // sf, chunk.num_frames // sf
        part = sup_splitter.get_frame_range(start_sub, num_sub)
        if normalization is not None and not add_weight_to_supervision_fst(normalization, part):
            log.warn(f"For utterance {utt_id}, feature frames {chunk.first_frame} to "
                     f"{chunk.first_frame + chunk.num_frames}, FST was empty after composing "
                     "with normalization FST. This should be extremely rare (a few per corpus, "
                     "at most)")
        output_weights = np.asarray(chunk.output_weights, dtype=np.float32)
        if deriv_weights is None:
            dw = output_weights
        else:
            t = np.arange(num_sub) + start_sub
            dw = np.zeros(num_sub, np.float32)
            ok = t < deriv_weights.shape[0]
            dw[ok] = deriv_weights[t[ok]]
            dw = (dw * output_weights).astype(np.float32)
        sup = NnetChainSupervision.create("output", part, dw, 0, sf)
        tot_input_frames = chunk.left_context + chunk.num_frames + chunk.right_context
        start_frame = chunk.first_frame - chunk.left_context
        input_frames = extract_row_range_with_padding(feats, start_frame, tot_input_frames)
        inputs = [NnetIo.from_matrix("input", -chunk.left_context, input_frames)]
        if ivector_feats is not None:
            ivector = _chunk_ivector(ivector_feats, start_frame, num_input_frames,
                                     ivector_period, splitter.rand)
            inputs.append(NnetIo.from_matrix("ivector", 0, ivector))
        eg = NnetChainExample(inputs, [sup])
        if opts.long_key:
            key = (f"{utt_id}-{chunk.first_frame}-{chunk.left_context}-{chunk.num_frames}-"
                   f"{chunk.right_context}-v1")
        else:
            key = f"{utt_id}-{chunk.first_frame}"
        out.append((key, eg))
    if opts.compress:
        # (Kaldi's NnetChainExample::Compress of each eg; the chunks of one
        # utterance share their shapes: compressed together, the same bytes)
        GeneralMatrix.compress_all([io.features for _, eg in out for io in eg.inputs])
    return out


def chain_chunk_starts_from_keys(egs_rspecifier: str) -> dict[str, list[tuple[int, int]]]:
    """The chunks of a chain-egs archive per utterance, as (first frame,
    number of frames): the first frame from the key ``<utt>-<first_frame>``
    (or Kaldi's long key ``<utt>-<first>-<left>-<frames>-<right>-v1``), the
    size from the eg's output frames times the frame-subsampling factor."""
    chunks: dict[str, list[tuple[int, int]]] = {}
    with SequentialTableReader(egs_rspecifier, CHAIN_EXAMPLE_HOLDER) as reader:
        for key, eg in reader:
            parts = key.split("-")
            if len(parts) >= 6 and parts[-1] == "v1":
                utt, first = "-".join(parts[:-5]), parts[-5]
            else:
                utt, _, first = key.rpartition("-")
            if not utt or not first.lstrip("-").isdigit():
                raise FormatError(f"eg key '{key}' is not of the form <utt>-<first-frame>",
                                  where=egs_rspecifier)
            sup = eg.outputs[0]
            t = sup.indexes[:, 1]
            sf = int(t[1] - t[0]) if t.shape[0] > 1 else 1
            chunks.setdefault(utt, []).append((int(first), t.shape[0] * sf))
    return chunks


class _ForcedChunkSplitter(UtteranceSplitter):
    """An UtteranceSplitter whose chunk sizes, for the utterance at hand, are
    given (they still draw from the random stream as Kaldi's do, so the
    iVector frames that follow come out the same)."""

    forced_sizes: list[int] | None = None

    def get_chunk_sizes_for_utterance(self, utterance_length: int) -> list[int]:
        sizes = super().get_chunk_sizes_for_utterance(utterance_length)
        if self.forced_sizes is None:
            return sizes
        if sorted(sizes) != sorted(self.forced_sizes):
            log.warn(f"Chunk sizes {self.forced_sizes} given for an utterance of "
                     f"{utterance_length} frames; this splitter would use {sizes}")
        return list(self.forced_sizes)


def get_chain_egs(normalization_fst_rxfilename: str, feature_rspecifier: str,
                  supervision_rspecifier: str, egs_wspecifier: str,
                  eg_config: ExampleGenerationConfig, opts: ChainGetEgsOptions,
                  chunk_starts: Mapping[str, Sequence[int | tuple[int, int]]] | None = None
                  ) -> int:
    """nnet3-chain-get-egs; returns the exit status.  ``normalization_fst_rxfilename``
    may be empty (egs then need nnet3-chain-normalize-egs).  ``chunk_starts``
    (utterance -> first frames, or (first frame, size) pairs as
    :func:`chain_chunk_starts_from_keys` reads them from an archive) forces
    the chunks, to reproduce a Kaldi run."""
    if opts.transition_model:
        raise ConfigError("--transition-model ('unconstrained' e2e egs) is not supported by "
                          "pynnet3's nnet3-chain-get-egs")
    eg_config.compute_derived()
    rand = GlibcRand(opts.srand)
    splitter = _ForcedChunkSplitter(eg_config, seed=opts.srand, rand=rand)
    normalization = None
    if normalization_fst_rxfilename:
        if opts.normalization_fst_scale <= 0.0:
            raise ConfigError("Invalid scale on normalization FST; must be > 0.0")
        normalization = read_normalization_fst(normalization_fst_rxfilename,
                                               opts.normalization_fst_scale)
        if normalization.fst.num_states == 0:
            raise FormatError(f"normalization FST {normalization_fst_rxfilename} has no states")
    sup_reader = RandomAccessTableReader(supervision_rspecifier, SUPERVISION_HOLDER)
    ivector_reader = (RandomAccessTableReader(opts.online_ivector_rspecifier, MATRIX_HOLDER)
                      if opts.online_ivector_rspecifier else None)
    dw_reader = (RandomAccessTableReader(opts.deriv_weights_rspecifier, VECTOR_HOLDER)
                 if opts.deriv_weights_rspecifier else None)
    num_err = 0
    try:
        with TableWriter(egs_wspecifier, CHAIN_EXAMPLE_HOLDER) as writer, \
                SequentialTableReader(feature_rspecifier, GENERAL_MATRIX_HOLDER) as feat_reader:
            for key, feats in feat_reader:
                if not sup_reader.has_key(key):
                    log.warn(f"No pdf-level posterior for key {key}")
                    num_err += 1
                    continue
                supervision = sup_reader.value(key)
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
                                 f"{ivectors.shape[0]}exceeds tolerance {opts.length_tolerance}")
                        num_err += 1
                        continue
                deriv_weights = None
                if dw_reader is not None:
                    if not dw_reader.has_key(key):
                        log.warn(f"No deriv weights for utterance {key}")
                        num_err += 1
                        continue
                    deriv_weights = np.asarray(dw_reader.value(key), dtype=np.float32)
                forced = chunk_starts.get(key) if chunk_starts is not None else None
                splitter.forced_sizes = None
                if forced is not None and forced and isinstance(forced[0], tuple):
                    splitter.forced_sizes = [size for _, size in forced]
                    forced = [first for first, _ in forced]
                egs = process_chain_utterance(normalization, feats, ivectors,
                                              opts.online_ivector_period, supervision,
                                              deriv_weights, key, opts, splitter, forced)
                if egs is None:
                    num_err += 1
                    continue
                for eg_key, eg in egs:
                    writer.write(eg_key, eg)
    finally:
        for r in (sup_reader, ivector_reader, dw_reader):
            if r is not None:
                r.close()
    if num_err > 0:
        log.warn(f"{num_err} utterances had errors and could not be processed.")
    splitter.print_stats()
    return splitter.exit_status()


__all__ = ["ChainCopyEgsOptions", "copy_chain_egs", "merge_chain_egs", "shuffle_chain_egs",
           "subset_chain_egs", "normalize_chain_egs", "ChainGetEgsOptions", "get_chain_egs",
           "process_chain_utterance", "chain_chunk_starts_from_keys", "shift_chain_example_times",
           "truncate_deriv_weights",
           "read_normalization_fst", "Fst"]
