"""Kaldi's NnetBatchComputer and NnetBatchInference (nnet3/nnet-batch-compute.{h,cc})
and what nnet3-compute-batch does with them (nnet3bin/nnet3-compute-batch.cc).

Each utterance is split into *tasks* (chunks) as Kaldi's
SplitUtteranceIntoTasks does, which is not quite DecodableNnetSimple's
chunking (nnet3-compute):

* chunks of ``frames_per_chunk / frame_subsampling_factor`` output frames;
  the last one is moved back to end at the last frame, overlapping the
  previous one (its first outputs are computed but not used), so every
  chunk has the same length;
* an utterance shorter than one chunk is one chunk of the full length, its
  input padded by repeating the last frame (``--ensure-exact-final-context``:
  an exact-length, "irregular" chunk instead, computed alone);
* each chunk's input is its frames plus the network's context plus the extra
  context (``--extra-left-context-initial`` / ``--extra-right-context-final``
  at the utterance's edges), frames outside the utterance being copies of
  its first / last frame; a chunk whose edge context differs from the usual
  one is an "edge" task;
* online iVectors: the row at the middle of the chunk's output frames (the
  last row if the matrix is short by at most 20 frames).

Tasks of the same shape (number of input frames, first input t, number of
output frames) from any utterances are computed together, task ``j`` as
sequence ``n = j`` of one request laid out as
:func:`pynnet3.compute.batched.multi_chunk_request` lays it out (which is
Kaldi's GetComputationRequest); ``--minibatch-size`` sequences per
computation (``--edge-minibatch-size`` for edge tasks, 1 for irregular
ones).  While input comes, only full minibatches are computed; at the end
partial ones too: the size is multiplied by f = ``--partial-minibatch-factor``
(rounded down) while the tasks left fill less than f of it, as Kaldi's
GetActualMinibatchSize (the unused sequences get zero input and their
outputs are dropped).  Among
groups with work the one with the highest priority goes first (earlier
utterances first, full minibatches before partial ones), as Kaldi's
GetPriority.  Kaldi runs the computations in a second thread; here they run
in the caller's thread when enough tasks have been accepted, which changes
when things are computed but not what: in test mode no component mixes
sequences, so each task's output is the one it gets alone, up to float
rounding in the matrix products.

Outputs have the log-priors subtracted (``.mdl`` with ``--use-priors``) and
are scaled by the acoustic scale, as Kaldi does; utterances come out in
input order.
"""
from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import log
from ..errors import ConfigError, PynnetError
from .batched import ChunkShape, multi_chunk_request
from .computer import NnetComputer
from .decodable import NnetSimpleComputationOptions, prepare_nnet_for_test

__all__ = ["NnetBatchComputerOptions", "NnetInferenceTask", "NnetBatchComputer",
           "NnetBatchInference", "BatchComputeConfig", "nnet3_compute_batch"]

ProgressFn = Callable[[str, int], None]


@dataclass
class NnetBatchComputerOptions:
    """The options NnetBatchComputerOptions adds to NnetSimpleComputationOptions."""

    minibatch_size: int = field(default=128, metadata={
        "flag": "minibatch-size", "help": "Number of chunks per minibatch (see also "
        "edge-minibatch-size)"})
    edge_minibatch_size: int = field(default=32, metadata={
        "flag": "edge-minibatch-size", "help": "Number of chunks per minibatch: this applies "
        "to chunks at the beginnings and ends of utterances, in cases (such as recurrent "
        "models) when the computation would be different from the usual one."})
    ensure_exact_final_context: bool = field(default=False, metadata={
        "flag": "ensure-exact-final-context", "help": "If true, for utterances shorter than "
        "--frames-per-chunk, use exact-length, special computations.  If false, pad with "
        "repeats of the last frame.  Would only affect the output for backwards-recurrent "
        "models, but would negatively impact speed in all cases."})
    partial_minibatch_factor: float = field(default=0.5, metadata={
        "flag": "partial-minibatch-factor", "help": "Factor that controls how small partial "
        "minibatches will be they become necessary.  We will potentially do the computation "
        "for sizes: int(partial_minibatch_factor^n * minibatch_size , for n = 0, 1, 2....  "
        "Set it to 0.0 if you want to use only the specified minibatch sizes."})

    def check(self) -> None:
        if self.minibatch_size < 1 or self.edge_minibatch_size < 1:
            raise ConfigError("--minibatch-size and --edge-minibatch-size must be >= 1")
        if not 0.0 <= self.partial_minibatch_factor < 1.0:
            raise ConfigError("--partial-minibatch-factor must be in [0, 1)")


@dataclass
class NnetInferenceTask:
    """One chunk of one utterance (Kaldi's NnetInferenceTask)."""

    input: np.ndarray                  # input rows, context included
    first_input_t: int                 # t of input row 0 (output frame 0 is t = 0)
    num_output_frames: int
    output_t_stride: int
    num_initial_unused_output_frames: int
    num_used_output_frames: int
    first_used_output_frame_index: int
    is_irregular: bool
    is_edge: bool = False
    ivector: np.ndarray | None = None
    priority: float = 0.0
    output: np.ndarray | None = None   # (num_output_frames, dim) once computed; used rows set
    done: bool = False

    def group_key(self) -> tuple[int, int, int, bool]:
        # Kaldi's ComputationGroupKey (+ whether there is an iVector).
        return (self.input.shape[0], self.first_input_t, self.num_output_frames,
                self.ivector is not None)


def output_frame_info(opts: NnetSimpleComputationOptions, batch_opts: NnetBatchComputerOptions,
                      num_subsampled_frames: int, fpc: int) -> list[NnetInferenceTask]:
    """Kaldi's GetOutputFrameInfoForTasks (tasks without input yet)."""
    if num_subsampled_frames <= 0:
        raise PynnetError("an utterance with no output frames")
    f = opts.frame_subsampling_factor
    empty = np.zeros((0, 0), dtype=np.float32)
    num_tasks = (num_subsampled_frames + fpc - 1) // fpc
    if num_subsampled_frames <= fpc:
        exact = batch_opts.ensure_exact_final_context
        return [NnetInferenceTask(empty, 0, num_subsampled_frames if exact else fpc, f, 0,
                                  num_subsampled_frames, 0, exact)]
    tasks = [NnetInferenceTask(empty, 0, fpc, f, 0, fpc, i * fpc, False)
             for i in range(num_tasks - 1)]
    # The last chunk ends at the last frame; its overlap with the previous
    # one is computed but not used.
    tasks.append(NnetInferenceTask(
        empty, 0, fpc, f, (num_tasks - 1) * fpc - (num_subsampled_frames - fpc),
        num_subsampled_frames - (num_tasks - 1) * fpc, (num_tasks - 1) * fpc, False))
    return tasks


def split_input_to_tasks(opts: NnetSimpleComputationOptions, left_context: int,
                         right_context: int, features: np.ndarray,
                         tasks: list[NnetInferenceTask]) -> None:
    """Kaldi's SplitInputToTasks: each task's input rows (clamped at the
    utterance's edges), first input t and edge flag."""
    num_input_frames = features.shape[0]
    f = opts.frame_subsampling_factor
    num_subsampled = (num_input_frames + f - 1) // f
    elc_initial = (opts.extra_left_context if opts.extra_left_context_initial < 0
                   else opts.extra_left_context_initial)
    erc_final = (opts.extra_right_context if opts.extra_right_context_final < 0
                 else opts.extra_right_context_final)
    usual_left = left_context + opts.extra_left_context
    usual_right = right_context + opts.extra_right_context
    for task in tasks:
        begin_output_t = task.first_used_output_frame_index - task.num_initial_unused_output_frames
        end_output_t = begin_output_t + task.num_output_frames
        left_edge = begin_output_t <= 0
        right_edge = end_output_t >= num_subsampled
        tot_left = left_context + (elc_initial if left_edge else opts.extra_left_context)
        tot_right = right_context + (erc_final if right_edge else opts.extra_right_context)
        task.is_edge = tot_left != usual_left or tot_right != usual_right
        begin_padded = begin_output_t * f - tot_left
        end_padded = end_output_t * f + tot_right
        task.first_input_t = begin_padded - begin_output_t * f
        rows = np.clip(np.arange(begin_padded, end_padded), 0, num_input_frames - 1)
        task.input = features[rows]


def add_online_ivectors(opts: NnetSimpleComputationOptions, online_ivectors: np.ndarray,
                        period: int, tasks: list[NnetInferenceTask]) -> None:
    """Kaldi's AddOnlineIvectorsToTasks: the row at the middle of each chunk."""
    f = opts.frame_subsampling_factor
    num_rows = online_ivectors.shape[0]
    margin = (20 + period - 1) // period
    for task in tasks:
        begin_output_t = task.first_used_output_frame_index - task.num_initial_unused_output_frames
        frame = (begin_output_t + task.num_output_frames // 2) * f // period
        if frame >= num_rows:
            if num_rows > 0 and frame > num_rows - margin:
                frame = num_rows - 1
            else:
                raise PynnetError(f"Could not get iVector for frame {frame}, online-ivectors "
                                  f"matrix has {num_rows} rows.  Mismatched "
                                  "--online-ivector-period?")
        task.ivector = np.asarray(online_ivectors[frame], dtype=np.float32)


class NnetBatchComputer:
    """Groups tasks by shape and computes them a minibatch at a time (see the
    module docstring).  ``compiler`` is a CachingCompiler for ``nnet`` (made
    ready for test by the caller)."""

    def __init__(self, opts: NnetSimpleComputationOptions, batch_opts: NnetBatchComputerOptions,
                 nnet: Any, priors: np.ndarray, compiler: Any, backend: Any = "reference") -> None:
        from ..compile.graph.context import compute_simple_nnet_context

        batch_opts.check()
        self.opts = opts.check_and_fix_configs(nnet.modulus())
        self.batch_opts = batch_opts
        self.nnet = nnet
        self.compiler = compiler
        self.backend = backend
        priors = np.asarray(priors, dtype=np.float32)
        self.log_priors = np.log(priors) if priors.shape[0] else priors
        self.left_context, self.right_context = compute_simple_nnet_context(nnet)
        self.input_dim = nnet.input_dim("input")
        self.ivector_dim = max(0, nnet.input_dim("ivector"))
        self.output_dim = nnet.output_dim("output")
        if self.input_dim <= 0 or self.output_dim <= 0:
            raise PynnetError("the network needs an input node 'input' and an output node "
                              "'output'")
        # Kaldi's ComputationGroupInfo: the pending tasks of each shape.
        self._groups: dict[tuple[int, int, int, bool], list[NnetInferenceTask]] = {}
        # Statistics: minibatch size -> (computations, tasks).
        self.stats: dict[tuple[int, int], list[int]] = {}

    # -- utterances into tasks --------------------------------------------------------
    def split_utterance_into_tasks(self, features: np.ndarray, ivector: np.ndarray | None,
                                   online_ivectors: np.ndarray | None,
                                   online_ivector_period: int) -> list[NnetInferenceTask]:
        if features.shape[1] != self.input_dim:
            raise PynnetError(f"Input features did not have expected dimension: expected "
                              f"{self.input_dim}, got {features.shape[1]}")
        ivector_dim = (ivector.shape[0] if ivector is not None else
                       online_ivectors.shape[1] if online_ivectors is not None else 0)
        if self.ivector_dim != 0 and ivector_dim == 0:
            raise PynnetError("Model expects i-vectors but none were supplied")
        if self.ivector_dim == 0 and ivector_dim != 0:
            raise PynnetError("You supplied i-vectors but model does not expect them.")
        if ivector_dim != self.ivector_dim:
            raise PynnetError(f"I-vector dimensions mismatch: model expects {self.ivector_dim}"
                              f", you supplied {ivector_dim}")
        f = self.opts.frame_subsampling_factor
        features = np.asarray(features, dtype=np.float32)
        num_subsampled = (features.shape[0] + f - 1) // f
        tasks = output_frame_info(self.opts, self.batch_opts, num_subsampled,
                                  self.opts.frames_per_chunk // f)
        split_input_to_tasks(self.opts, self.left_context, self.right_context, features, tasks)
        if ivector is not None:
            iv = np.asarray(ivector, dtype=np.float32).ravel()
            for task in tasks:
                task.ivector = iv
        elif online_ivectors is not None:
            add_online_ivectors(self.opts, np.asarray(online_ivectors, dtype=np.float32),
                                online_ivector_period, tasks)
        return tasks

    # -- scheduling (GetMinibatchSize, GetActualMinibatchSize, GetPriority) -------------
    def _minibatch_size(self, tasks: list[NnetInferenceTask]) -> int:
        if not tasks:
            return self.batch_opts.minibatch_size
        if tasks[0].is_irregular:
            return 1
        if tasks[0].is_edge:
            return self.batch_opts.edge_minibatch_size
        return self.batch_opts.minibatch_size

    def _actual_minibatch_size(self, tasks: list[NnetInferenceTask]) -> int:
        factor = self.batch_opts.partial_minibatch_factor
        size = self._minibatch_size(tasks)
        while len(tasks) < int(factor * size):
            size = int(size * factor)     # (Kaldi: int32 *= float)
        return size

    def _priority(self, allow_partial: bool, tasks: list[NnetInferenceTask]) -> float:
        if not tasks:
            return -np.inf
        size = self._minibatch_size(tasks)
        if not allow_partial and len(tasks) < size:
            return -np.inf
        penalty = 10.0 * (min(len(tasks), size) / size - 1.0)
        priorities = sorted((t.priority for t in tasks), reverse=True)[:size]
        return penalty + sum(priorities) / len(priorities)

    def accept_task(self, task: NnetInferenceTask) -> None:
        self._groups.setdefault(task.group_key(), []).append(task)

    def has_pending(self) -> bool:
        return any(self._groups.values())

    def compute(self, allow_partial: bool) -> bool:
        """Kaldi's Compute(): one minibatch of the group with the highest
        priority; False if there was none (none full, unless ``allow_partial``)."""
        best_key, best = None, -np.inf
        for key, tasks in self._groups.items():
            p = self._priority(allow_partial, tasks)
            if p > best:
                best_key, best = key, p
        if best_key is None:
            return False
        pending = self._groups[best_key]
        size = self._actual_minibatch_size(pending)
        # The highest-priority tasks (the earliest utterances) go first.
        order = sorted(range(len(pending)), key=lambda i: -pending[i].priority)
        chosen = set(order[:size])
        batch = [t for i, t in enumerate(pending) if i in chosen]
        self._groups[best_key] = [t for i, t in enumerate(pending) if i not in chosen]
        self._compute_batch(batch, size)
        return True

    def _compute_batch(self, tasks: list[NnetInferenceTask], size: int) -> None:
        example = tasks[0]
        shape = ChunkShape(example.first_input_t, example.input.shape[0],
                           example.ivector is not None, example.num_output_frames)
        request = multi_chunk_request(shape, size, example.output_t_stride)
        computation = self.compiler.compile(request)
        compute_config = self.opts.compute_config
        if self.opts.debug_computation and not compute_config.debug:
            compute_config = dataclasses.replace(compute_config, debug=True)
        computer = NnetComputer(compute_config, computation, self.nnet, None,
                                backend=self.backend)
        rows = example.input.shape[0]
        feats = np.zeros((size * rows, example.input.shape[1]), dtype=np.float32)
        for n, task in enumerate(tasks):
            feats[n * rows:(n + 1) * rows] = task.input
        computer.accept_input("input", feats)
        if example.ivector is not None:
            ivectors = np.zeros((size, example.ivector.shape[0]), dtype=np.float32)
            for n, task in enumerate(tasks):
                ivectors[n] = task.ivector
            computer.accept_input("ivector", ivectors)
        computer.run()
        output = np.asarray(computer.get_output_destructive("output"), dtype=np.float32)
        if self.log_priors.shape[0]:
            output = output - self.log_priors
        if self.opts.acoustic_scale != 1.0:
            output = output * np.float32(self.opts.acoustic_scale)
        frames = example.num_output_frames
        for n, task in enumerate(tasks):
            skip, used = task.num_initial_unused_output_frames, task.num_used_output_frames
            task.output = output[n * frames + skip:n * frames + skip + used]
            task.done = True
        stat = self.stats.setdefault((size, frames), [0, 0])
        stat[0] += 1
        stat[1] += len(tasks)

    def print_minibatch_stats(self) -> None:
        """Kaldi's PrintMinibatchStats, in short: computations per size."""
        for (size, frames), (count, num_tasks) in sorted(self.stats.items()):
            log.log(f"Minibatch size {size} ({frames} output frames per chunk): "
                    f"{count} computations, average {num_tasks / count:.3g} tasks filled")


def merge_task_output(tasks: list[NnetInferenceTask]) -> np.ndarray:
    """Kaldi's MergeTaskOutput: the used rows of every task, in order."""
    return np.concatenate([t.output for t in tasks if t.output is not None], axis=0)


class NnetBatchInference:
    """Kaldi's NnetBatchInference without its thread: accept utterances, get
    their outputs back in order (see the module docstring)."""

    # Kaldi's AcceptInput blocks while more than this many minibatches are
    # full; here they are computed before the next utterance is accepted.
    MAX_FULL_MINIBATCHES = 2

    def __init__(self, computer: NnetBatchComputer) -> None:
        self.computer = computer
        self._utts: deque[tuple[str, list[NnetInferenceTask]]] = deque()
        self._counter = 0
        self._finished = False

    def accept_input(self, utt: str, features: np.ndarray, ivector: np.ndarray | None = None,
                     online_ivectors: np.ndarray | None = None,
                     online_ivector_period: int = 0) -> None:
        tasks = self.computer.split_utterance_into_tasks(features, ivector, online_ivectors,
                                                         online_ivector_period)
        # Earlier utterances have higher priority.
        priority = -float(self._counter)
        self._counter += 1
        for task in tasks:
            task.priority = priority
            self.computer.accept_task(task)
        self._utts.append((utt, tasks))
        while self.computer.compute(False):
            pass

    def get_output(self) -> tuple[str, np.ndarray] | None:
        """The next utterance's output if all its tasks are done, else None."""
        if not self._utts:
            return None
        utt, tasks = self._utts[0]
        if not all(t.done for t in tasks):
            if not self._finished:
                return None
            raise PynnetError(f"internal error: tasks of {utt} were never computed")
        self._utts.popleft()
        return utt, merge_task_output(tasks)

    def finished(self) -> None:
        self._finished = True
        while self.computer.compute(True):
            pass


@dataclass
class BatchComputeConfig:
    """The options of nnet3-compute-batch besides the computation options."""

    opts: NnetSimpleComputationOptions = field(
        default_factory=lambda: NnetSimpleComputationOptions(acoustic_scale=1.0))
    batch_opts: NnetBatchComputerOptions = field(default_factory=NnetBatchComputerOptions)
    ivector_rspecifier: str = ""
    utt2spk_rspecifier: str = ""
    online_ivector_rspecifier: str = ""
    online_ivector_period: int = 0
    apply_exp: bool = False
    use_priors: bool = False
    backend: Any = "reference"
    cache_dir: str | None = None
    use_disk_cache: bool = True


@dataclass
class BatchComputeResult:
    num_success: int = 0
    num_fail: int = 0
    frame_count: int = 0
    seconds: float = 0.0


def nnet3_compute_batch(config: BatchComputeConfig, nnet_rxfilename: str,
                        feature_rspecifier: str, matrix_wspecifier: str,
                        progress: ProgressFn | None = None) -> BatchComputeResult:
    """Kaldi's nnet3-compute-batch main loop."""
    from ..cache import CachingCompiler
    from ..io.table import (MATRIX_HOLDER, RandomAccessTableReader, SequentialTableReader,
                            TableWriter)
    from .utterances import MappedVectorReader, read_model, utterance_inputs

    start = time.perf_counter()
    if config.online_ivector_rspecifier and config.online_ivector_period <= 0:
        raise ConfigError("You need to set the --online-ivector-period option!")
    nnet, priors = read_model(nnet_rxfilename, config.use_priors)
    prepare_nnet_for_test(nnet)
    opts = config.opts
    compiler = CachingCompiler(nnet, opts.compiler_config, opts.optimize_config,
                               cache_dir=config.cache_dir, use_disk=config.use_disk_cache)
    computer = NnetBatchComputer(opts, config.batch_opts, nnet, priors, compiler, config.backend)
    inference = NnetBatchInference(computer)
    online_reader = (RandomAccessTableReader(config.online_ivector_rspecifier, MATRIX_HOLDER)
                     if config.online_ivector_rspecifier else None)
    ivector_reader = (MappedVectorReader(config.ivector_rspecifier, config.utt2spk_rspecifier)
                      if config.ivector_rspecifier else None)
    result = BatchComputeResult()
    writer = TableWriter(matrix_wspecifier, MATRIX_HOLDER)
    num_frames: dict[str, int] = {}

    def drain() -> None:
        while True:
            got = inference.get_output()
            if got is None:
                return
            utt, matrix = got
            if config.apply_exp:
                np.exp(matrix, out=matrix)
            writer.write(utt, matrix)
            result.num_success += 1
            frames = num_frames.pop(utt, 0)
            result.frame_count += frames
            if progress is not None:
                progress(utt, frames)

    try:
        with SequentialTableReader(feature_rspecifier, MATRIX_HOLDER) as feature_reader:
            for utt, features, ivector, online_ivectors in utterance_inputs(
                    feature_reader, ivector_reader, online_reader, result):
                num_frames[utt] = features.shape[0]
                inference.accept_input(utt, features, ivector, online_ivectors,
                                       config.online_ivector_period)
                drain()
        inference.finished()
        drain()
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()
        for reader in (ivector_reader, online_reader):
            if reader is not None:
                reader.close()
    result.seconds = time.perf_counter() - start
    computer.print_minibatch_stats()
    log.log(f"Time taken {result.seconds:g}s")
    log.log(f"Done {result.num_success} utterances, failed for {result.num_fail}")
    return result
