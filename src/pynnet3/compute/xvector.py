"""What nnet3-xvector-compute does (Kaldi's src/nnet3bin/nnet3-xvector-compute.cc):
one embedding ("x-vector") per utterance from the ``output`` node of a
network that pools statistics over time.

:func:`nnet3_xvector_compute` reads the raw network, prepares it for test as
Kaldi's binary does (batch-norm and dropout test mode, CollapseModel), and
for each utterance of a feature table:

* takes chunks of ``chunk_size`` frames (-1: the whole utterance; an
  utterance shorter than the chunk size is one chunk), the last one shorter;
* without ``pad_input``, skips an utterance shorter than ``min_chunk_size``
  (a failure) and any chunk shorter than it; with ``pad_input`` (the
  default), a chunk shorter than ``min_chunk_size`` is padded to that length
  by repeating its first frame (half the padding, rounded down) and its last
  frame (the rest);
* runs each chunk as its own computation: input frames t = 0 .. rows-1 of
  sequence 0, one output Index (0, 0, 0) at the node ``output``;
* averages the chunks' vectors weighted by their unpadded lengths (float32
  sums, as Kaldi's Vector<BaseFloat>), and writes the average.

Kaldi's end-of-run log lines are logged; nothing is printed.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .. import log
from ..errors import ConfigError, PynnetError
from .decodable import NnetSimpleComputationOptions, prepare_nnet_for_test

__all__ = ["XvectorComputeConfig", "XvectorComputeResult", "nnet3_xvector_compute",
           "xvector_request", "compute_xvector", "pad_chunk"]

ProgressFn = Callable[[str, int], None]


@dataclass
class XvectorComputeConfig:
    """The options of nnet3-xvector-compute besides the computation options."""

    opts: NnetSimpleComputationOptions = field(
        default_factory=lambda: NnetSimpleComputationOptions(acoustic_scale=1.0))
    chunk_size: int = field(default=-1, metadata={
        "flag": "chunk-size", "help": "If set, extracts xvectors from specified chunk-size, "
        "and averages.  If not set, extracts an xvector from all available features."})
    min_chunk_size: int = field(default=100, metadata={
        "flag": "min-chunk-size", "help": "Minimum chunk-size allowed when extracting "
        "xvectors."})
    pad_input: bool = field(default=True, metadata={
        "flag": "pad-input", "help": "If true, duplicate the first and last frames of the "
        "input features as required to equal min-chunk-size."})
    # A backend name or object (pynnet3.compute.backend).
    backend: Any = "reference"
    # The on-disk computation cache (pynnet3.cache); None: its default place.
    cache_dir: str | None = None
    use_disk_cache: bool = True


@dataclass
class XvectorComputeResult:
    num_success: int = 0
    num_fail: int = 0
    frame_count: int = 0
    seconds: float = 0.0


def xvector_request(num_rows: int) -> Any:
    """Kaldi's request for one chunk: input t = 0 .. num_rows-1 (n = x = 0),
    the single output Index (0, 0, 0) at ``output``, no derivatives."""
    from ..compile.request import ComputationRequest, IoSpecification
    from ..nnet.index import Index

    return ComputationRequest(
        inputs=[IoSpecification("input", [Index(0, t, 0) for t in range(num_rows)])],
        outputs=[IoSpecification("output", [Index(0, 0, 0)])],
        need_model_derivative=False, store_component_stats=False)


def compute_xvector(features: np.ndarray, nnet: Any, compiler: Any,
                    opts: NnetSimpleComputationOptions, backend: Any = "reference") -> np.ndarray:
    """Kaldi's RunNnetComputation: the ``output`` row of one chunk."""
    from .computer import NnetComputer

    computation = compiler.compile(xvector_request(features.shape[0]))
    compute_config = opts.compute_config
    if opts.debug_computation and not compute_config.debug:
        import dataclasses
        compute_config = dataclasses.replace(compute_config, debug=True)
    computer = NnetComputer(compute_config, computation, nnet, None, backend=backend)
    computer.accept_input("input", np.ascontiguousarray(features, dtype=np.float32))
    computer.run()
    output = np.asarray(computer.get_output_destructive("output"), dtype=np.float32)
    return output[0].copy()


def pad_chunk(chunk: np.ndarray, min_chunk_size: int) -> np.ndarray:
    """A chunk of ``offset`` < min_chunk_size rows padded to min_chunk_size:
    (min_chunk_size - offset) // 2 copies of the first row before, the rest
    copies of the last row after."""
    offset = chunk.shape[0]
    left = (min_chunk_size - offset) // 2
    right = min_chunk_size - offset - left
    return np.concatenate([np.repeat(chunk[:1], left, axis=0), chunk,
                           np.repeat(chunk[-1:], right, axis=0)], axis=0)


def utterance_xvector(features: np.ndarray, config: XvectorComputeConfig, nnet: Any,
                      compiler: Any, opts: NnetSimpleComputationOptions,
                      xvector_dim: int, utt: str = "") -> np.ndarray | None:
    """The averaged x-vector of one utterance, or None where Kaldi skips it
    (too short without --pad-input); Kaldi's per-utterance loop."""
    num_rows = features.shape[0]
    chunk_size = config.chunk_size
    min_chunk = config.min_chunk_size
    this_chunk_size = chunk_size
    if not config.pad_input and num_rows < min_chunk:
        log.warn(f"Minimum chunk size of {min_chunk} is greater than the number of rows "
                 f"in utterance: {utt}")
        return None
    if num_rows < chunk_size:
        log.log(f"Chunk size of {chunk_size} is greater than the number of rows in "
                f"utterance: {utt}, using chunk size  of {num_rows}")
        this_chunk_size = num_rows
    elif chunk_size == -1:
        this_chunk_size = num_rows
    num_chunks = math.ceil(num_rows / this_chunk_size)
    total = np.zeros(xvector_dim, dtype=np.float32)
    tot_weight = np.float32(0.0)
    for i in range(num_chunks):
        # (Kaldi's "offset" is the chunk's length.)
        offset = min(this_chunk_size, num_rows - i * this_chunk_size)
        if not config.pad_input and offset < min_chunk:
            continue
        chunk = features[i * this_chunk_size:i * this_chunk_size + offset]
        tot_weight = np.float32(tot_weight + np.float32(offset))
        if config.pad_input and offset < min_chunk:
            chunk = pad_chunk(chunk, min_chunk)
        xvector = compute_xvector(chunk, nnet, compiler, opts, config.backend)
        if xvector.shape[0] != xvector_dim:
            raise PynnetError(f"the output has dimension {xvector.shape[0]}, expected "
                              f"{xvector_dim}")
        total += np.float32(offset) * xvector
    # Kaldi's Scale(1.0 / tot_weight); all chunks skipped gives 0/0 = nan there too.
    with np.errstate(divide="ignore", invalid="ignore"):
        total *= np.float32(1.0 / float(tot_weight)) if tot_weight else np.float32(np.nan)
    return total


def nnet3_xvector_compute(config: XvectorComputeConfig, nnet_rxfilename: str,
                          feature_rspecifier: str, vector_wspecifier: str,
                          progress: ProgressFn | None = None) -> XvectorComputeResult:
    """Kaldi's nnet3-xvector-compute main loop; see the module docstring."""
    from ..cache import CachingCompiler
    from ..compile.model_io import read_nnet
    from ..io.table import MATRIX_HOLDER, VECTOR_HOLDER, SequentialTableReader, TableWriter

    start = time.perf_counter()
    if config.chunk_size == 0 or config.chunk_size < -1:
        raise ConfigError(f"--chunk-size must be -1 or positive, got {config.chunk_size}")
    if config.min_chunk_size < 1:
        raise ConfigError(f"--min-chunk-size must be positive, got {config.min_chunk_size}")
    nnet = read_nnet(nnet_rxfilename)
    prepare_nnet_for_test(nnet)
    node = nnet.get_node_index("output")
    if node == -1 or not nnet.is_output_node(node):
        raise PynnetError("the network has no output node named 'output' (make one with "
                          "nnet3-copy --nnet-config, e.g. 'output-node name=output "
                          "input=tdnn6.affine', as Kaldi's x-vector recipes do)")
    xvector_dim = nnet.output_dim("output")
    opts = config.opts
    compiler = CachingCompiler(nnet, opts.compiler_config, opts.optimize_config,
                               cache_dir=config.cache_dir, use_disk=config.use_disk_cache)
    result = XvectorComputeResult()
    writer = TableWriter(vector_wspecifier, VECTOR_HOLDER)
    try:
        with SequentialTableReader(feature_rspecifier, MATRIX_HOLDER) as reader:
            for utt, features in reader:
                if features.shape[0] == 0:
                    log.warn(f"Zero-length utterance: {utt}")
                    result.num_fail += 1
                    continue
                xvector = utterance_xvector(features, config, nnet, compiler, opts,
                                            xvector_dim, utt)
                if xvector is None:
                    result.num_fail += 1
                    continue
                writer.write(utt, xvector)
                result.frame_count += features.shape[0]
                result.num_success += 1
                if progress is not None:
                    progress(utt, features.shape[0])
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()
    result.seconds = time.perf_counter() - start
    rtf = result.seconds * 100.0 / result.frame_count if result.frame_count else float("inf")
    log.log(f"Time taken {result.seconds:g}s: real-time factor assuming 100 frames/sec is "
            f"{rtf:g}")
    log.log(f"Done {result.num_success} utterances, failed for {result.num_fail}")
    return result
