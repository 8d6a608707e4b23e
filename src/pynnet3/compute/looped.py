"""Looped ('streaming') evaluation of a simple network (Kaldi's
decodable-simple-looped.{h,cc}: NnetSimpleLoopedComputationOptions,
DecodableNnetSimpleLoopedInfo, DecodableNnetSimpleLooped), and the loop of
``nnet3-compute-looped`` over a feature table.

Unlike the chunked :class:`~pynnet3.compute.decodable.DecodableNnetSimple`,
which recomputes every chunk from scratch with its left context, a looped
computation is compiled once (:func:`pynnet3.optimize.compile_looped.compile_looped`)
as an endless program that takes one chunk of input after another and keeps
the activations later chunks need (the recurrent state of LSTMs and GRUs,
the left context of TDNNs).  Chunk 0 takes input frames
``[-left_context, frames_per_chunk + right_context)``; chunk k > 0 the next
``frames_per_chunk`` frames; chunk k gives the outputs of frames
``[k * frames_per_chunk, (k + 1) * frames_per_chunk)`` (subsampled).  Frames
before the start and past the end of the utterance repeat the first / last
frame.  The network's ``ReplaceIndex(ivector, t, 0)`` is turned into
``Round(ivector, frames_per_chunk)``, so each chunk reads a fresh i-vector:
the one of the frame just past the chunk's last input frame (the online
i-vector row ``end_input_frame // period``, the last row past the end).

:class:`LoopedChunkComputer` is that chunk loop on its own; the whole-utterance
decodable here and the streaming :class:`pynnet3.compute.online.OnlineNnetComputer`
both feed it, so they give identical outputs.

Networks whose recurrence looks into the future (bidirectional LSTMs,
right-to-left GRUs) cannot be evaluated this way: :func:`check_nnet_can_be_looped`
says so before anything is compiled.
"""
from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .. import log
from ..errors import ConfigError, PynnetError
from ..nnet.index import Index
from .computer import NnetComputeOptions, NnetComputer
from .utterance_options import (apply_exp_option, ivectors_option, online_ivector_period_option,
                                online_ivectors_option, use_priors_option, utt2spk_option)

if TYPE_CHECKING:
    from ..compile.computation import NnetComputation
    from ..nnet.nnet import Nnet
    from ..optimize.options import OptimizeOptions

__all__ = ["NnetSimpleLoopedComputationOptions", "DecodableNnetSimpleLoopedInfo",
           "DecodableNnetSimpleLooped", "LoopedChunkComputer", "check_nnet_can_be_looped",
           "Nnet3ComputeLoopedConfig", "nnet3_compute_looped"]


def _default_optimize_options() -> "OptimizeOptions":
    from ..optimize.options import OptimizeOptions

    return OptimizeOptions()


@dataclass
class NnetSimpleLoopedComputationOptions:
    """Kaldi's NnetSimpleLoopedComputationOptions: same fields and defaults
    (``frames_per_chunk`` 24, ``acoustic_scale`` 0.1; nnet3-compute-looped
    sets the scale to 1.0 as nnet3-compute does)."""

    extra_left_context_initial: int = field(default=0, metadata={
        "flag": "extra-left-context-initial", "help": "Extra left context to use at the first "
        "frame of an utterance (note: this will just consist of repeats of the first frame, "
        "and should not usually be necessary."})
    frame_subsampling_factor: int = field(default=1, metadata={
        "flag": "frame-subsampling-factor", "help": "Required if the frame-rate of the output "
        "(e.g. in 'chain' models) is less than the frame-rate of the original alignment."})
    acoustic_scale: float = field(default=0.1, metadata={
        "flag": "acoustic-scale", "help": "Scaling factor for acoustic log-likelihoods"})
    frames_per_chunk: int = field(default=24, metadata={
        "flag": "frames-per-chunk", "help": "Number of frames in each chunk that is separately "
        "evaluated by the neural net.  Measured before any subsampling, if the "
        "--frame-subsampling-factor options is used (i.e. counts input frames.  This is only "
        "advisory (may be rounded up if needed."})
    debug_computation: bool = field(default=False, metadata={
        "flag": "debug-computation", "help": "If true, turn on debug for the actual "
        "computation (very verbose!)"})
    optimize_config: "OptimizeOptions" = field(default_factory=_default_optimize_options)
    compute_config: NnetComputeOptions = field(default_factory=NnetComputeOptions)

    def check(self) -> None:
        """Kaldi's Check(), as a typed error."""
        if (self.extra_left_context_initial < 0 or self.frame_subsampling_factor <= 0
                or self.frames_per_chunk <= 0 or not self.acoustic_scale > 0.0):
            raise ConfigError("looped computation options: need --extra-left-context-initial "
                              ">= 0, --frame-subsampling-factor > 0, --frames-per-chunk > 0 "
                              "and --acoustic-scale > 0")


# ---------------------------------------------------------------------------
# Which networks can be looped
# ---------------------------------------------------------------------------
def _edge_offsets(nnet: "Nnet", n: int, probe_times: range) -> dict[int, int]:
    """{node m that node n reads: the largest time offset (read t minus
    computed t) over the probe times}."""
    node = nnet.nodes[n]
    ans: dict[int, int] = {}
    for t in probe_times:
        index = Index(0, t, 0)
        if nnet.is_descriptor_node(n) and node.descriptor is not None:
            deps = [(c[0], c[1]) for c in node.descriptor.get_dependencies(index)]
        elif nnet.is_component_node(n):
            component = nnet.components[node.component_index]
            deps = [(n - 1, Index(*i)) for i in component.get_input_indexes(None, index)]
        elif nnet.is_dim_range_node(n):
            deps = [(node.node_index, index)]
        else:
            deps = []
        for m, dep in deps:
            offset = dep.t - t
            if m not in ans or offset > ans[m]:
                ans[m] = offset
    return ans


def check_nnet_can_be_looped(nnet: "Nnet") -> None:
    """Raise PynnetError if some recurrence of ``nnet`` reads later frames
    (a cycle of the node graph whose time offsets add up to more than 0, as
    in the backward half of a BLSTM): a looped computation has no future
    frames to give it.  Forward recurrences (offsets adding up to < 0) are
    what looped decoding is for."""
    from ..nnet.graph import find_sccs, nnet_to_directed_graph

    graph = nnet_to_directed_graph(nnet)
    probe_times = range(max(1, nnet.modulus()))
    for scc in find_sccs(graph):
        members = set(scc)
        if len(scc) == 1 and scc[0] not in graph[scc[0]]:
            continue
        # edges within the SCC: dependent node <- source node, with offset
        edges = []
        for n in scc:
            for m, offset in _edge_offsets(nnet, n, probe_times).items():
                if m in members:
                    edges.append((m, n, offset))
        # Longest paths by Bellman-Ford: still improving after |scc| rounds
        # means a cycle of positive total offset.
        dist = {n: 0 for n in scc}
        changed = False
        for _ in range(len(scc) + 1):
            changed = False
            for m, n, offset in edges:
                if dist[m] + offset > dist[n]:
                    dist[n] = dist[m] + offset
                    changed = True
            if not changed:
                break
        if changed:
            names = sorted({nnet.node_names[m] for m, n, o in edges if o > 0})
            raise PynnetError(
                "this network cannot be evaluated by a looped computation: its recurrence "
                f"reads future frames (nodes {', '.join(names)}; e.g. a bidirectional or "
                "right-to-left recurrent layer). Use nnet3-compute (chunked evaluation with "
                "--extra-right-context) instead.")


# ---------------------------------------------------------------------------
# The compiled looped computation
# ---------------------------------------------------------------------------
class DecodableNnetSimpleLoopedInfo:
    """What every utterance of a looped evaluation shares (Kaldi's
    DecodableNnetSimpleLoopedInfo): the contexts, the chunk size, the three
    requests and the compiled looped computation.

    ``priors``: if non-empty, their log is subtracted from the outputs.
    Like Kaldi, a network with an ``ivector`` input has its i-vector period
    changed to the chunk size (ModifyNnetIvectorPeriod); that is done on a
    copy unless ``copy_nnet`` is False, and the network used is ``self.nnet``.
    """

    def __init__(self, opts: NnetSimpleLoopedComputationOptions, nnet: "Nnet",
                 priors: Any = None, copy_nnet: bool = True) -> None:
        from ..compile.graph.context import compute_simple_nnet_context, is_simple_nnet
        from ..optimize.compile_looped import (compile_looped,
                                               create_looped_computation_request,
                                               get_chunk_size, modify_nnet_ivector_period)

        opts.check()
        if not is_simple_nnet(nnet):
            raise PynnetError("the network is not a simple network (it needs an output node "
                              "'output', an input node 'input' and optionally an input node "
                              "'ivector')")
        check_nnet_can_be_looped(nnet)
        self.opts = opts
        self.has_ivectors = nnet.input_dim("ivector") > 0
        left_context, right_context = compute_simple_nnet_context(nnet)
        self.frames_left_context = left_context + opts.extra_left_context_initial
        self.frames_right_context = right_context
        self.frames_per_chunk = get_chunk_size(nnet, opts.frame_subsampling_factor,
                                               opts.frames_per_chunk)
        self.output_dim = nnet.output_dim("output")
        if self.output_dim <= 0:
            raise PynnetError("the network's output node has no dimension")
        priors = np.asarray(priors if priors is not None else [], dtype=np.float32).ravel()
        with np.errstate(divide="ignore"):
            self.log_priors = np.log(priors)
        if self.log_priors.shape[0] not in (0, self.output_dim):
            raise PynnetError(f"priors have dimension {self.log_priors.shape[0]}, the network "
                              f"output has {self.output_dim}")
        # (Kaldi hard-codes the i-vector period to the chunk size.)
        ivector_period = self.frames_per_chunk
        if self.has_ivectors:
            if copy_nnet:
                nnet = copy.deepcopy(nnet)
            modify_nnet_ivector_period(ivector_period, nnet)
        self.nnet = nnet
        requests = create_looped_computation_request(
            nnet, self.frames_per_chunk, opts.frame_subsampling_factor, ivector_period,
            self.frames_left_context, self.frames_right_context, 1)
        self.request1, self.request2, self.request3 = requests
        self.computation: "NnetComputation" = compile_looped(nnet, opts.optimize_config,
                                                             *requests)
        if log.verbose_level() >= 3:
            log.vlog(3, "Computation is:\n"
                     + self.computation.print(nnet.component_names, nnet.node_names))

    @classmethod
    def from_am(cls, opts: NnetSimpleLoopedComputationOptions, am_nnet: Any,
                copy_nnet: bool = True) -> "DecodableNnetSimpleLoopedInfo":
        """With the priors of an AmNnetSimple (Kaldi's AmNnetSimple constructor)."""
        return cls(opts, am_nnet.nnet, am_nnet.priors, copy_nnet)

    @property
    def input_dim(self) -> int:
        return self.nnet.input_dim("input")

    @property
    def ivector_dim(self) -> int:
        return max(0, self.nnet.input_dim("ivector"))

    @property
    def output_frames_per_chunk(self) -> int:
        return self.frames_per_chunk // self.opts.frame_subsampling_factor


class LoopedChunkComputer:
    """Runs the looped computation of ``info`` one chunk after another (the
    common part of Kaldi's DecodableNnetSimpleLooped::AdvanceChunk and
    DecodableNnetLoopedOnlineBase::AdvanceChunk)."""

    def __init__(self, info: DecodableNnetSimpleLoopedInfo, backend: Any = "reference") -> None:
        self.info = info
        compute_config = info.opts.compute_config
        if info.opts.debug_computation and not compute_config.debug:
            compute_config = dataclasses.replace(compute_config, debug=True)
        self.computer = NnetComputer(compute_config, info.computation, info.nnet, None,
                                     backend=backend)
        self.num_chunks_computed = 0

    def next_input_range(self) -> tuple[int, int]:
        """[begin, end) of the input frames the next chunk takes (begin < 0
        and end past the utterance are allowed: those frames repeat the
        first / last one)."""
        info = self.info
        if self.num_chunks_computed == 0:
            return -info.frames_left_context, info.frames_per_chunk + info.frames_right_context
        begin = self.num_chunks_computed * info.frames_per_chunk + info.frames_right_context
        return begin, begin + info.frames_per_chunk

    def next_output_offset(self) -> int:
        """The (subsampled) output frame the next chunk starts at."""
        return self.num_chunks_computed * self.info.output_frames_per_chunk

    def compute(self, feats_chunk: np.ndarray, ivector: np.ndarray | None) -> np.ndarray:
        """Run one chunk: its input rows (``next_input_range()``), the
        i-vector to use (None for a network without i-vectors); returns the
        chunk's output rows, priors subtracted and scaled."""
        info = self.info
        computer = self.computer
        computer.accept_input("input", np.ascontiguousarray(feats_chunk, dtype=np.float32))
        if info.has_ivectors:
            if ivector is None:
                raise PynnetError("Neural net expects iVectors but none provided.")
            request = info.request1 if self.num_chunks_computed == 0 else info.request2
            # all chunks but the first take one i-vector; each row is the same
            num_ivectors = len(request.inputs[1].indexes)
            ivectors = np.repeat(np.asarray(ivector, dtype=np.float32).reshape(1, -1),
                                 num_ivectors, axis=0)
            computer.accept_input("ivector", ivectors)
        computer.run()
        output = np.array(computer.get_output_destructive("output"), dtype=np.float32)
        if info.log_priors.shape[0] != 0:
            output -= info.log_priors
        if info.opts.acoustic_scale != 1.0:
            output *= np.float32(info.opts.acoustic_scale)
        if output.shape != (info.output_frames_per_chunk, info.output_dim):
            raise PynnetError(f"looped computation gave a {output.shape} output, expected "
                              f"({info.output_frames_per_chunk}, {info.output_dim})")
        self.num_chunks_computed += 1
        return output


def _check_dims(info: DecodableNnetSimpleLoopedInfo, feature_dim: int, ivector_dim: int) -> None:
    if feature_dim != info.input_dim:
        raise PynnetError(f"Neural net expects 'input' features with dimension "
                          f"{info.input_dim} but you provided {feature_dim}")
    if info.has_ivectors and ivector_dim != info.ivector_dim:
        if ivector_dim == 0:
            raise PynnetError("Neural net expects iVectors but none provided (the network has "
                              "an 'ivector' input: supply iVectors, e.g. with --ivectors or "
                              "--online-ivectors)")
        raise PynnetError(f"Neural net expects 'ivector' features with dimension "
                          f"{info.ivector_dim} but you provided {ivector_dim}")


class DecodableNnetSimpleLooped:
    """One utterance through the looped computation (Kaldi's
    DecodableNnetSimpleLooped): features, and an i-vector for the whole
    utterance or online i-vectors (one row every ``online_ivector_period``
    frames).  Outputs are computed chunk by chunk as frames are asked for,
    in increasing order.  (I-vectors given to a network without an i-vector
    input are ignored, as Kaldi does here.)"""

    def __init__(self, info: DecodableNnetSimpleLoopedInfo, feats: np.ndarray,
                 ivector: np.ndarray | None = None, online_ivectors: np.ndarray | None = None,
                 online_ivector_period: int = 1, backend: Any = "reference") -> None:
        if ivector is not None and online_ivectors is not None:
            raise PynnetError("give either an iVector per utterance or online iVectors, not both")
        if online_ivectors is not None and online_ivector_period <= 0:
            raise ConfigError("You need to set the --online-ivector-period option!")
        self.info = info
        self.feats = np.asarray(feats, dtype=np.float32)
        if self.feats.ndim != 2:
            raise PynnetError("features must be a matrix")
        self.ivector = None if ivector is None else np.asarray(ivector, dtype=np.float32).ravel()
        self.online_ivector_feats = (None if online_ivectors is None
                                     else np.asarray(online_ivectors, dtype=np.float32))
        if self.online_ivector_feats is not None and self.online_ivector_feats.shape[0] == 0:
            raise PynnetError("the online iVector matrix is empty")
        self.online_ivector_period = online_ivector_period
        ivector_dim = (self.ivector.shape[0] if self.ivector is not None else
                       self.online_ivector_feats.shape[1]
                       if self.online_ivector_feats is not None else 0)
        _check_dims(info, self.feats.shape[1], ivector_dim)
        sf = info.opts.frame_subsampling_factor
        self.num_subsampled_frames = (self.feats.shape[0] + sf - 1) // sf
        self.chunks = LoopedChunkComputer(info, backend)
        self.current_log_post = np.zeros((0, info.output_dim), dtype=np.float32)
        self.current_log_post_subsampled_offset = -1

    def num_frames(self) -> int:
        """Number of output frames (after subsampling)."""
        return self.num_subsampled_frames

    def output_dim(self) -> int:
        return self.info.output_dim

    def get_output_for_frame(self, subsampled_frame: int) -> np.ndarray:
        """Output row of one (subsampled) frame; frames must be asked for in
        increasing order (the looped computation cannot go back)."""
        if subsampled_frame < self.current_log_post_subsampled_offset:
            raise PynnetError("Frames must be accessed in order.")
        while subsampled_frame >= (self.current_log_post_subsampled_offset
                                   + self.current_log_post.shape[0]):
            self.advance_chunk()
        return self.current_log_post[subsampled_frame - self.current_log_post_subsampled_offset]

    def get_output(self, subsampled_frame: int, pdf_id: int) -> float:
        return float(self.get_output_for_frame(subsampled_frame)[pdf_id])

    def get_all_output(self) -> np.ndarray:
        """The output of every frame (what nnet3-compute-looped writes,
        before --apply-exp)."""
        pieces = []
        done = max(0, self.current_log_post_subsampled_offset + self.current_log_post.shape[0])
        if done > 0:
            raise PynnetError("get_all_output: some frames were already computed")
        while done < self.num_subsampled_frames:
            self.advance_chunk()
            pieces.append(self.current_log_post)
            done += self.current_log_post.shape[0]
        if not pieces:
            return np.zeros((0, self.info.output_dim), dtype=np.float32)
        return np.concatenate(pieces)[:self.num_subsampled_frames]

    def advance_chunk(self) -> None:
        """Compute the next chunk (Kaldi's AdvanceChunk)."""
        begin, end = self.chunks.next_input_range()
        num_rows = self.feats.shape[0]
        if num_rows == 0:
            raise PynnetError("cannot compute the output of an utterance without frames")
        if begin >= 0 and end <= num_rows:
            feats_chunk = self.feats[begin:end]
        else:
            feats_chunk = self.feats[np.clip(np.arange(begin, end), 0, num_rows - 1)]
        # Kaldi takes the i-vector of the frame just past the chunk's input.
        ivector = self.get_current_ivector(end) if self.info.has_ivectors else None
        offset = self.chunks.next_output_offset()
        self.current_log_post = self.chunks.compute(feats_chunk, ivector)
        self.current_log_post_subsampled_offset = offset

    def get_current_ivector(self, input_frame: int) -> np.ndarray:
        """The utterance's i-vector, or the online i-vector row of
        ``input_frame`` (the last row past the end)."""
        if self.ivector is not None:
            return self.ivector
        if self.online_ivector_feats is None:
            raise PynnetError("Neural net expects iVectors but none provided.")
        row = min(input_frame // self.online_ivector_period,
                  self.online_ivector_feats.shape[0] - 1)
        return self.online_ivector_feats[row]


# ---------------------------------------------------------------------------
# nnet3-compute-looped
# ---------------------------------------------------------------------------
@dataclass
class Nnet3ComputeLoopedConfig:
    """The options of nnet3-compute-looped besides the looped-computation
    options (the same as nnet3-compute's)."""

    opts: NnetSimpleLoopedComputationOptions = field(
        default_factory=lambda: NnetSimpleLoopedComputationOptions(acoustic_scale=1.0))
    ivector_rspecifier: str = ivectors_option()
    utt2spk_rspecifier: str = utt2spk_option()
    online_ivector_rspecifier: str = online_ivectors_option()
    online_ivector_period: int = online_ivector_period_option()
    apply_exp: bool = apply_exp_option()
    use_priors: bool = use_priors_option()
    backend: Any = "reference"


@dataclass
class Nnet3ComputeLoopedResult:
    num_success: int = 0
    num_fail: int = 0
    frame_count: int = 0
    seconds: float = 0.0


def nnet3_compute_looped(config: Nnet3ComputeLoopedConfig, nnet_rxfilename: str,
                         feature_rspecifier: str, matrix_wspecifier: str,
                         progress: Callable[[str, int], None] | None = None
                         ) -> Nnet3ComputeLoopedResult:
    """nnet3-compute's loop with the looped decodable: read the model (raw,
    or an .mdl with ``use_priors``), test mode and CollapseModel as
    nnet3-compute, compile the looped computation once, then write the
    output of every utterance."""
    from ..io.table import (MATRIX_HOLDER, RandomAccessTableReader, SequentialTableReader,
                            TableWriter)
    from .decodable import prepare_nnet_for_test
    from .utterances import MappedVectorReader, read_model, utterance_inputs

    start = time.perf_counter()
    if config.online_ivector_rspecifier and config.ivector_rspecifier:
        raise ConfigError("give --ivectors or --online-ivectors, not both")
    if config.online_ivector_rspecifier and config.online_ivector_period <= 0:
        raise ConfigError("You need to set the --online-ivector-period option!")
    if config.utt2spk_rspecifier and not config.ivector_rspecifier:
        log.warn("--utt2spk has no effect without --ivectors")
    nnet, priors = read_model(nnet_rxfilename, config.use_priors)
    prepare_nnet_for_test(nnet)
    info = DecodableNnetSimpleLoopedInfo(config.opts, nnet, priors, copy_nnet=False)

    online_reader = (RandomAccessTableReader(config.online_ivector_rspecifier, MATRIX_HOLDER)
                     if config.online_ivector_rspecifier else None)
    ivector_reader = (MappedVectorReader(config.ivector_rspecifier, config.utt2spk_rspecifier)
                      if config.ivector_rspecifier else None)
    result = Nnet3ComputeLoopedResult()
    writer = TableWriter(matrix_wspecifier, MATRIX_HOLDER)
    try:
        with SequentialTableReader(feature_rspecifier, MATRIX_HOLDER) as feature_reader:
            for utt, features, ivector, online_ivectors in utterance_inputs(
                    feature_reader, ivector_reader, online_reader, result):
                decodable = DecodableNnetSimpleLooped(info, features, ivector, online_ivectors,
                                                      config.online_ivector_period,
                                                      config.backend)
                matrix = decodable.get_all_output()
                if config.apply_exp:
                    np.exp(matrix, out=matrix)
                writer.write(utt, matrix)
                result.frame_count += features.shape[0]
                result.num_success += 1
                if progress is not None:
                    progress(utt, features.shape[0])
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()
        for reader in (ivector_reader, online_reader):
            if reader is not None:
                reader.close()
    result.seconds = time.perf_counter() - start
    rtf = result.seconds * 100.0 / result.frame_count if result.frame_count else float("inf")
    log.log(f"Time taken {result.seconds:g}s: real-time factor assuming 100 frames/sec is "
            f"{rtf:g}")
    log.log(f"Done {result.num_success} utterances, failed for {result.num_fail}")
    return result
