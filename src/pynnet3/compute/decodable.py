"""Chunked evaluation of a simple network over whole utterances (Kaldi's
nnet-am-decodable-simple.{h,cc}: NnetSimpleComputationOptions and
DecodableNnetSimple), as used by ``nnet3-compute`` and decoders.

An utterance is cut into chunks of ``frames_per_chunk`` input frames (counted
before frame subsampling).  Each chunk is one ComputationRequest: the output
frames of the chunk, and the input frames they need (the network's own
context plus any extra context, the utterance's first and last frames
repeated where the window runs past its ends), shifted in time so that the
first output frame is t=0.  Thanks to that shift, every chunk but the first
(different extra left context) and the last (fewer frames) asks for the same
request, so the computation cache compiles only a few distinct computations
per run.

Chunks are computed exactly where Kaldi computes them: chunk k starts at
output frame ``k * frames_per_chunk`` (subsampled), and the last chunk is
shorter; recurrent and statistics-pooling networks see exactly the frames
they see in Kaldi, so their outputs agree with Kaldi's.
"""
from __future__ import annotations

import dataclasses
import math
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import log
from ..compile.request import ComputationRequest, IoSpecification
from ..errors import ConfigError, PynnetError
from ..nnet.index import Index
from .computer import NnetComputeOptions, NnetComputer

if TYPE_CHECKING:
    from ..cache import CachingCompiler, CachingCompilerOptions
    from ..nnet.nnet import Nnet
    from ..optimize.options import OptimizeOptions

__all__ = ["NnetSimpleComputationOptions", "DecodableNnetSimple", "ChunkInputs", "ChunkWindow",
           "chunk_window", "online_ivector_row",
           "simple_nnet_context", "prepare_nnet_for_test", "compute_utterance"]


def _default_optimize_options() -> "OptimizeOptions | None":
    try:
        from ..optimize.options import OptimizeOptions
    except ImportError:
        return None
    return OptimizeOptions()


def _default_compiler_options() -> "CachingCompilerOptions":
    from ..cache import CachingCompilerOptions

    # Kaldi's NnetSimpleComputationOptions constructor enlarges the cache by
    # frames_per_chunk (its default), so that decoders with many distinct
    # chunk sizes keep them all.
    return CachingCompilerOptions(cache_capacity=CachingCompilerOptions().cache_capacity + 50)


@dataclass
class NnetSimpleComputationOptions:
    """Kaldi's NnetSimpleComputationOptions, same fields and defaults.

    ``frames_per_chunk`` counts input frames (before subsampling).
    ``extra_left_context_initial`` / ``extra_right_context_final``: when
    >= 0, they replace ``extra_left_context`` / ``extra_right_context`` for
    the first / last chunk of an utterance.  ``acoustic_scale`` multiplies
    the outputs (Kaldi's default 0.1; nnet3-compute uses 1.0).
    """

    extra_left_context: int = field(default=0, metadata={
        "flag": "extra-left-context", "help": "Number of frames of additional left-context to "
        "add on top of the neural net's inherent left context (may be useful in recurrent "
        "setups"})
    extra_right_context: int = field(default=0, metadata={
        "flag": "extra-right-context", "help": "Number of frames of additional right-context "
        "to add on top of the neural net's inherent right context (may be useful in recurrent "
        "setups"})
    extra_left_context_initial: int = field(default=-1, metadata={
        "flag": "extra-left-context-initial", "help": "If >= 0, overrides the "
        "--extra-left-context value at the start of an utterance."})
    extra_right_context_final: int = field(default=-1, metadata={
        "flag": "extra-right-context-final", "help": "If >= 0, overrides the "
        "--extra-right-context value at the end of an utterance."})
    frame_subsampling_factor: int = field(default=1, metadata={
        "flag": "frame-subsampling-factor", "help": "Required if the frame-rate of the output "
        "(e.g. in 'chain' models) is less than the frame-rate of the original alignment."})
    frames_per_chunk: int = field(default=50, metadata={
        "flag": "frames-per-chunk", "help": "Number of frames in each chunk that is separately "
        "evaluated by the neural net.  Measured before any subsampling, if the "
        "--frame-subsampling-factor options is used (i.e. counts input frames"})
    acoustic_scale: float = field(default=0.1, metadata={
        "flag": "acoustic-scale", "help": "Scaling factor for acoustic log-likelihoods "
        "(caution: is a no-op if set in the program nnet3-compute"})
    debug_computation: bool = field(default=False, metadata={
        "flag": "debug-computation", "help": "If true, turn on debug for the actual "
        "computation (very verbose!)"})
    optimize_config: "OptimizeOptions | None" = field(default_factory=_default_optimize_options)
    compute_config: NnetComputeOptions = field(default_factory=NnetComputeOptions)
    compiler_config: "CachingCompilerOptions" = field(default_factory=_default_compiler_options)

    def check_and_fix_configs(self, nnet_modulus: int,
                              log_change: bool = True) -> "NnetSimpleComputationOptions":
        """A copy with ``frames_per_chunk`` rounded up to a multiple of
        lcm(frame_subsampling_factor, nnet_modulus), as Kaldi's
        CheckAndFixConfigs; logs the change (Kaldi logs it once per run:
        callers that fix the options once up front get the same)."""
        if self.frame_subsampling_factor < 1 or self.frames_per_chunk < 1:
            raise ConfigError("--frame-subsampling-factor and --frames-per-chunk must be > 0")
        if self.extra_left_context < 0 or self.extra_right_context < 0:
            raise ConfigError("--extra-left-context and --extra-right-context must be >= 0")
        if nnet_modulus <= 0:
            raise PynnetError(f"invalid network modulus {nnet_modulus}")
        n = math.lcm(self.frame_subsampling_factor, nnet_modulus)
        if self.frames_per_chunk % n == 0:
            return self
        new_frames_per_chunk = n * ((self.frames_per_chunk + n - 1) // n)
        if log_change:
            if nnet_modulus == 1:
                log.log(f"Increasing --frames-per-chunk from {self.frames_per_chunk} to "
                        f"{new_frames_per_chunk} to make it a multiple of "
                        f"--frame-subsampling-factor={self.frame_subsampling_factor}")
            else:
                log.log(f"Increasing --frames-per-chunk from {self.frames_per_chunk} to "
                        f"{new_frames_per_chunk} due to --frame-subsampling-factor="
                        f"{self.frame_subsampling_factor} and nnet shift-invariance modulus = "
                        f"{nnet_modulus}")
        return dataclasses.replace(self, frames_per_chunk=new_frames_per_chunk)


def prepare_nnet_for_test(nnet: "Nnet") -> None:
    """What nnet3-compute does to a network before using it: batch-norm and
    dropout in test mode, then CollapseModel with Kaldi's default config."""
    from ..nnet.collapse import collapse_model
    from ..nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode

    set_batchnorm_test_mode(True, nnet)
    set_dropout_test_mode(True, nnet)
    collapse_model(nnet)


# Kaldi's CachingOptimizingCompiler remembers the simple-network context it
# computed; our CachingCompiler has no such member, so it is remembered here,
# per compiler object, for as long as the compiler lives.
_CONTEXTS: "weakref.WeakKeyDictionary[Any, tuple[int, int]]" = weakref.WeakKeyDictionary()


def simple_nnet_context(compiler: "CachingCompiler") -> tuple[int, int]:
    """(left, right) context of the compiler's network (Kaldi's
    CachingOptimizingCompiler::GetSimpleNnetContext), computed once per
    compiler."""
    method = getattr(compiler, "get_simple_nnet_context", None)
    if callable(method):
        return tuple(method())  # type: ignore[return-value]
    try:
        return _CONTEXTS[compiler]
    except (KeyError, TypeError):
        pass
    from ..compile.graph.context import compute_simple_nnet_context

    ans = compute_simple_nnet_context(compiler.nnet)
    try:
        _CONTEXTS[compiler] = ans
    except TypeError:  # not weak-referenceable: just recompute next time
        pass
    return ans


class ChunkInputs(NamedTuple):
    """One chunk of an utterance: its input rows (frames ``input_t_start``
    onwards, edges padded), its iVector (or None) and the output frames it
    gives (``num_subsampled_frames`` from ``output_t_start``, in input frames)."""

    input_t_start: int
    input_feats: np.ndarray
    ivector: np.ndarray | None
    output_t_start: int
    num_subsampled_frames: int


class ChunkWindow(NamedTuple):
    """Where one chunk of an utterance lies (the chunk starting at a
    subsampled output frame): its output frames (in input frames, first and
    last), how many subsampled output frames, and the extra left/right
    context it uses (the -initial/-final values at the utterance's ends)."""

    first_output_frame: int
    last_output_frame: int
    num_subsampled_frames: int
    extra_left_context: int
    extra_right_context: int


def chunk_window(opts: NnetSimpleComputationOptions, num_subsampled_frames: int,
                 subsampled_frame: int) -> ChunkWindow:
    """The chunk of Kaldi's DecodableNnetSimple::EnsureFrameIsComputed that
    starts at ``subsampled_frame`` (``opts`` already fixed by
    check_and_fix_configs); shared with the ONNX runtime (pynnet3.export)."""
    subsampling_factor = opts.frame_subsampling_factor
    subsampled_frames_per_chunk = opts.frames_per_chunk // subsampling_factor
    num_frames = min(num_subsampled_frames - subsampled_frame, subsampled_frames_per_chunk)
    last_subsampled_frame = subsampled_frame + num_frames - 1
    extra_left_context = opts.extra_left_context
    extra_right_context = opts.extra_right_context
    if subsampled_frame == 0 and opts.extra_left_context_initial >= 0:
        extra_left_context = opts.extra_left_context_initial
    if (last_subsampled_frame == num_subsampled_frames - 1
            and opts.extra_right_context_final >= 0):
        extra_right_context = opts.extra_right_context_final
    return ChunkWindow(subsampled_frame * subsampling_factor,
                       last_subsampled_frame * subsampling_factor, num_frames,
                       extra_left_context, extra_right_context)


def online_ivector_row(online_ivectors: np.ndarray, period: int, output_t_start: int,
                       num_output_frames: int) -> np.ndarray:
    """The online iVector of a chunk: the row of the frame near its middle
    (Kaldi's GetCurrentIvector); shared with the ONNX runtime."""
    frame_to_search = output_t_start + num_output_frames // 2
    ivector_frame = frame_to_search // period
    num_rows = online_ivectors.shape[0]
    if ivector_frame >= num_rows:
        margin = ivector_frame - (num_rows - 1)
        if margin * period > 50:
            # More than half a second: not an edge effect.
            raise PynnetError(f"Could not get iVector for frame {frame_to_search}, only "
                              f"available till frame {num_rows} * ivector-period="
                              f"{period} (mismatched --online-ivector-period?)")
        ivector_frame = num_rows - 1
    return online_ivectors[ivector_frame]


class DecodableNnetSimple:
    """Evaluates ``nnet`` on one utterance chunk by chunk (Kaldi's
    DecodableNnetSimple).

    ``priors``: if non-empty, the log of these is subtracted from the output
    (dividing by the priors).  ``ivector``: one iVector for the whole
    utterance; or ``online_ivectors``, one row every ``online_ivector_period``
    frames.  ``compiler`` is shared across utterances so that each distinct
    chunk shape compiles once.  ``backend``: the compute backend
    (:func:`pynnet3.compute.backend.get_backend` name or object).
    """

    def __init__(self, opts: NnetSimpleComputationOptions, nnet: "Nnet", priors: Any,
                 feats: np.ndarray, compiler: "CachingCompiler",
                 ivector: np.ndarray | None = None, online_ivectors: np.ndarray | None = None,
                 online_ivector_period: int = 1, backend: Any = "reference") -> None:
        from ..compile.graph.context import is_simple_nnet

        self.nnet = nnet
        self.output_dim = nnet.output_dim("output")
        self.feats = np.asarray(feats, dtype=np.float32)
        if self.feats.ndim != 2:
            raise PynnetError("features must be a matrix")
        if ivector is not None and online_ivectors is not None:
            raise PynnetError("give either an iVector per utterance or online iVectors, not both")
        if online_ivectors is not None and online_ivector_period <= 0:
            raise ConfigError("You need to set the --online-ivector-period option!")
        if not is_simple_nnet(nnet):
            raise PynnetError("the network is not a simple network (it needs an output node "
                              "'output', an input node 'input' and optionally an input node "
                              "'ivector')")
        self.opts = opts.check_and_fix_configs(nnet.modulus())
        self.num_subsampled_frames = ((self.feats.shape[0] + self.opts.frame_subsampling_factor
                                       - 1) // self.opts.frame_subsampling_factor)
        self.compiler = compiler
        self.nnet_left_context, self.nnet_right_context = simple_nnet_context(compiler)
        self.ivector = None if ivector is None else np.asarray(ivector, dtype=np.float32).ravel()
        self.online_ivector_feats = (None if online_ivectors is None
                                     else np.asarray(online_ivectors, dtype=np.float32))
        self.online_ivector_period = online_ivector_period
        priors = np.asarray(priors if priors is not None else [], dtype=np.float32).ravel()
        with np.errstate(divide="ignore"):
            self.log_priors = np.log(priors)
        if self.log_priors.shape[0] not in (0, self.output_dim):
            raise PynnetError(f"priors have dimension {self.log_priors.shape[0]}, the network "
                              f"output has {self.output_dim}")
        self.backend = backend
        self.current_log_post = np.zeros((0, self.output_dim), dtype=np.float32)
        self.current_log_post_subsampled_offset = 0

    # -- queries (Kaldi's NumFrames, OutputDim, GetOutputForFrame, GetOutput) ---
    def num_frames(self) -> int:
        """Number of output frames (after subsampling)."""
        return self.num_subsampled_frames

    def get_output_for_frame(self, subsampled_frame: int) -> np.ndarray:
        """Output row of one (subsampled) frame; computes its chunk if needed."""
        self._ensure(subsampled_frame)
        return self.current_log_post[subsampled_frame - self.current_log_post_subsampled_offset]

    def get_output(self, subsampled_frame: int, pdf_id: int) -> float:
        return float(self.get_output_for_frame(subsampled_frame)[pdf_id])

    def get_all_output(self) -> np.ndarray:
        """The output for every frame: nnet3-compute's loop over the frames,
        which computes the chunks starting at 0, frames_per_chunk, ..."""
        out = np.empty((self.num_subsampled_frames, self.output_dim), dtype=np.float32)
        t = 0
        while t < self.num_subsampled_frames:
            self._ensure(t)
            rows = self.current_log_post
            offset = self.current_log_post_subsampled_offset
            end = offset + rows.shape[0]
            out[t:end] = rows[t - offset:]
            t = end
        return out

    def _ensure(self, subsampled_frame: int) -> None:
        offset = self.current_log_post_subsampled_offset
        if not offset <= subsampled_frame < offset + self.current_log_post.shape[0]:
            self.ensure_frame_is_computed(subsampled_frame)

    # -- the computation ------------------------------------------------------
    def ivector_dim(self) -> int:
        if self.ivector is not None:
            return self.ivector.shape[0]
        if self.online_ivector_feats is not None:
            return self.online_ivector_feats.shape[1]
        return 0

    def check_input_dims(self) -> None:
        """The features' and iVectors' dimensions must be the network's."""
        feature_dim = self.feats.shape[1]
        nnet_input_dim = self.nnet.input_dim("input")
        if feature_dim != nnet_input_dim:
            raise PynnetError(f"Neural net expects 'input' features with dimension "
                              f"{nnet_input_dim} but you provided {feature_dim}")
        nnet_ivector_dim = max(0, self.nnet.input_dim("ivector"))
        ivector_dim = self.ivector_dim()
        if ivector_dim != nnet_ivector_dim:
            hint = ""
            if ivector_dim == 0:
                hint = (" (the network has an 'ivector' input: supply iVectors, e.g. with "
                        "--ivectors or --online-ivectors)")
            elif nnet_ivector_dim == 0:
                hint = " (the network has no 'ivector' input: do not supply iVectors)"
            raise PynnetError(f"Neural net expects 'ivector' features with dimension "
                              f"{nnet_ivector_dim} but you provided {ivector_dim}{hint}")

    def ensure_frame_is_computed(self, subsampled_frame: int) -> None:
        """Compute the chunk whose first output frame is ``subsampled_frame``."""
        chunk = self.chunk_inputs(subsampled_frame)
        self.do_nnet_computation(chunk.input_t_start, chunk.input_feats, chunk.ivector,
                                 chunk.output_t_start, chunk.num_subsampled_frames)

    def chunk_inputs(self, subsampled_frame: int) -> "ChunkInputs":
        """What the chunk starting at output frame ``subsampled_frame`` is
        computed from (the first half of Kaldi's EnsureFrameIsComputed)."""
        if not 0 <= subsampled_frame < self.num_subsampled_frames:
            raise PynnetError(f"frame {subsampled_frame} out of range "
                              f"[0, {self.num_subsampled_frames})")
        self.check_input_dims()
        window = chunk_window(self.opts, self.num_subsampled_frames, subsampled_frame)
        first_output_frame, last_output_frame = window.first_output_frame, window.last_output_frame
        num_subsampled_frames = window.num_subsampled_frames
        left_context = self.nnet_left_context + window.extra_left_context
        right_context = self.nnet_right_context + window.extra_right_context
        first_input_frame = first_output_frame - left_context
        last_input_frame = last_output_frame + right_context
        num_input_frames = last_input_frame + 1 - first_input_frame
        # Kaldi passes the distance between the first and last output frame
        # as the "number of output frames" here; kept for identical results.
        ivector = self.get_current_ivector(first_output_frame,
                                           last_output_frame - first_output_frame)
        num_rows = self.feats.shape[0]
        if first_input_frame >= 0 and last_input_frame < num_rows:
            input_feats = self.feats[first_input_frame:last_input_frame + 1]
        else:
            # Repeat the first / last frame where the window runs off the utterance.
            rows = np.clip(np.arange(first_input_frame, last_input_frame + 1), 0, num_rows - 1)
            input_feats = self.feats[rows]
        assert input_feats.shape[0] == num_input_frames
        return ChunkInputs(first_input_frame, input_feats, ivector, first_output_frame,
                           num_subsampled_frames)

    def get_current_ivector(self, output_t_start: int, num_output_frames: int) -> np.ndarray | None:
        """The iVector for a chunk: the utterance's, or the online iVector of
        the frame near the middle of the chunk (Kaldi's GetCurrentIvector)."""
        if self.ivector is not None:
            return self.ivector
        if self.online_ivector_feats is None:
            return None
        return online_ivector_row(self.online_ivector_feats, self.online_ivector_period,
                                  output_t_start, num_output_frames)

    def make_request(self, input_t_start: int, num_input_frames: int, has_ivector: bool,
                     output_t_start: int, num_subsampled_frames: int) -> ComputationRequest:
        """The chunk's request, shifted so that its first output frame is t=0
        (identical chunks then share one compiled computation)."""
        time_offset = -output_t_start
        start = time_offset + input_t_start
        inputs = [IoSpecification.from_range("input", start, start + num_input_frames)]
        if has_ivector:
            inputs.append(IoSpecification("ivector", [Index(0, 0, 0)]))
        subsample = self.opts.frame_subsampling_factor
        outputs = [IoSpecification("output", [Index(0, i * subsample, 0)
                                              for i in range(num_subsampled_frames)])]
        return ComputationRequest(inputs=inputs, outputs=outputs, need_model_derivative=False,
                                  store_component_stats=False)

    def do_nnet_computation(self, input_t_start: int, input_feats: np.ndarray,
                            ivector: np.ndarray | None, output_t_start: int,
                            num_subsampled_frames: int) -> None:
        has_ivector = ivector is not None and ivector.shape[0] != 0
        request = self.make_request(input_t_start, input_feats.shape[0], has_ivector,
                                    output_t_start, num_subsampled_frames)
        computation = self.compiler.compile(request)
        compute_config = self.opts.compute_config
        if self.opts.debug_computation and not compute_config.debug:
            compute_config = dataclasses.replace(compute_config, debug=True)
        computer = NnetComputer(compute_config, computation, self.nnet, None,
                                backend=self.backend)
        computer.accept_input("input", np.ascontiguousarray(input_feats))
        if has_ivector:
            computer.accept_input("ivector", ivector.reshape(1, -1))
        computer.run()
        output = np.asarray(computer.get_output_destructive("output"), dtype=np.float32)
        if not output.flags.writeable or not output.flags.c_contiguous:
            output = np.array(output, dtype=np.float32)
        if self.log_priors.shape[0] != 0:
            output -= self.log_priors
        if self.opts.acoustic_scale != 1.0:
            output *= np.float32(self.opts.acoustic_scale)
        self.current_log_post = output
        self.current_log_post_subsampled_offset = output_t_start // self.opts.frame_subsampling_factor

    def piece_inputs(self, start_subsampled_frame: int, num_subsampled_frames: int
                     ) -> "ChunkInputs":
        """The inputs of any run of output frames with the network's own
        context only (no extra context) and the utterance's iVector, edges
        padded as Kaldi pads its chunks: for networks whose outputs do not
        depend on the chunking (pynnet3.compute.batched.chunking_free), what
        Kaldi's chunks give for these frames."""
        if not (0 <= start_subsampled_frame and num_subsampled_frames > 0
                and start_subsampled_frame + num_subsampled_frames
                <= self.num_subsampled_frames):
            raise PynnetError(f"frames [{start_subsampled_frame}, "
                              f"{start_subsampled_frame + num_subsampled_frames}) out of range "
                              f"[0, {self.num_subsampled_frames})")
        if self.online_ivector_feats is not None:
            raise PynnetError("pieces need one iVector per utterance (online iVectors change "
                              "from chunk to chunk)")
        self.check_input_dims()
        factor = self.opts.frame_subsampling_factor
        first_output_frame = start_subsampled_frame * factor
        last_output_frame = (start_subsampled_frame + num_subsampled_frames - 1) * factor
        first_input_frame = first_output_frame - self.nnet_left_context
        last_input_frame = last_output_frame + self.nnet_right_context
        num_rows = self.feats.shape[0]
        if first_input_frame >= 0 and last_input_frame < num_rows:
            input_feats = self.feats[first_input_frame:last_input_frame + 1]
        else:
            rows = np.clip(np.arange(first_input_frame, last_input_frame + 1), 0, num_rows - 1)
            input_feats = self.feats[rows]
        return ChunkInputs(first_input_frame, input_feats, self.ivector, first_output_frame,
                           num_subsampled_frames)


def compute_utterance(opts: NnetSimpleComputationOptions, nnet: "Nnet", feats: np.ndarray,
                      compiler: "CachingCompiler", priors: Any = None,
                      ivector: np.ndarray | None = None,
                      online_ivectors: np.ndarray | None = None, online_ivector_period: int = 1,
                      backend: Any = "reference") -> np.ndarray:
    """The network's output for every (subsampled) frame of one utterance,
    as nnet3-compute writes it (before ``--apply-exp``)."""
    decodable = DecodableNnetSimple(opts, nnet, priors, feats, compiler, ivector,
                                    online_ivectors, online_ivector_period, backend)
    return decodable.get_all_output()
