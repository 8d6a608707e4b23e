"""nnet3-export-onnx's library side: a network, prepared as nnet3-compute
prepares it, compiled for the chunks nnet3-compute evaluates, translated
into one tensor program per distinct chunk geometry.

Chunk geometries
----------------
nnet3-compute (Kaldi's DecodableNnetSimple) evaluates an utterance in
chunks of ``N = frames_per_chunk / frame_subsampling_factor`` output
frames; each chunk's input is its output frames plus the network's context
plus the extra context (``--extra-left-context-initial`` for the first
chunk, ``--extra-right-context-final`` for the last), the utterance's first
or last frame repeated past its ends; the last chunk has 1..N frames.
A geometry is ``(extra_left, extra_right, frames)``.  Two properties of the
network, checked numerically on the reference executor at export time,
make most of them equivalent:

* ``right_causal``: an output frame's value does not change when the chunk
  is extended to the right (no backward recurrence, no pooling to the
  right).  Then every last chunk is computed as a full chunk of N frames
  with the steady extra right context, and the extra rows are dropped.
* ``left_local``: an output frame's value does not change with more left
  context (no forward recurrence, no pooling to the left).  Then the first
  chunk uses the steady extra left context.

A non-recurrent TDNN has both: one geometry.  A unidirectional LSTM with
``--extra-left-context-initial`` has two; a BLSTM or statistics pooling
needs one per last-chunk length.  The results equal nnet3-compute's in every
case (up to float rounding), because each chunk computed is, or is
equivalent to, the chunk Kaldi computes.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import __version__, log
from ..compile.request import ComputationRequest, IoSpecification
from ..compute.computer import NnetComputeOptions, NnetComputer
from ..compute.decodable import NnetSimpleComputationOptions, prepare_nnet_for_test
from ..errors import ConfigError, PynnetError
from ..nnet.index import Index
from .components import SUPPORTED_TYPES, ExportError
from .ir import Program
from .trace import Mat, TraceBackend

__all__ = ["ExportOptions", "Geometry", "TranslatedNnet", "translate_nnet", "check_exportable",
           "geometry_key"]


@dataclass(frozen=True)
class Geometry:
    extra_left: int
    extra_right: int
    frames: int             # subsampled output frames

    def input_frames(self, left_context: int, right_context: int, subsampling: int) -> int:
        return ((self.frames - 1) * subsampling + 1 + left_context + right_context
                + self.extra_left + self.extra_right)


@dataclass
class ExportOptions:
    opts: NnetSimpleComputationOptions = field(
        default_factory=lambda: NnetSimpleComputationOptions(acoustic_scale=1.0))
    outputs: tuple[str, ...] = ("output",)
    online_ivector_period: int = 0
    opset: int = 17
    # Check the chunk-equivalence properties numerically (see module doc);
    # False: one geometry per distinct Kaldi chunk (always exact, bigger).
    detect_equivalent_chunks: bool = True


@dataclass
class TranslatedNnet:
    """Tensor programs (one per geometry, sharing ``parameters``) and the
    metadata of an export."""

    programs: list[Program]
    geometries: list[Geometry]
    parameters: dict[str, np.ndarray]
    metadata: dict[str, str]
    input_dim: int
    ivector_dim: int
    outputs: list[tuple[str, int]]


def check_exportable(nnet: Any) -> None:
    """ExportError naming every component whose type has no translation."""
    bad = []
    for name, comp in zip(nnet.component_names, nnet.components):
        subs = getattr(comp, "components", None) if comp.type_name == "CompositeComponent" \
            else None
        for c in ([comp] if subs is None else subs):
            if c.type_name not in SUPPORTED_TYPES:
                bad.append(f"'{name}' ({c.type_name})")
    if bad:
        raise ExportError("cannot export to ONNX/PyTorch: no translation for component"
                          f"{'s' if len(bad) > 1 else ''} {', '.join(bad)}")


def geometry_key(first: bool, last: bool, frames: int, meta: dict[str, Any]) -> Geometry:
    """The geometry the runtime uses for a chunk (see the module doc); ``meta``
    holds the export's integer settings."""
    elc, erc = meta["extra_left_context"], meta["extra_right_context"]
    left = meta["extra_left_context_initial"] if first and meta[
        "extra_left_context_initial"] >= 0 else elc
    right = meta["extra_right_context_final"] if last and meta[
        "extra_right_context_final"] >= 0 else erc
    if meta["left_local"]:
        left = elc
    if meta["right_causal"]:
        return Geometry(left, erc, meta["chunk_frames"])
    return Geometry(left, right, frames)


def _request(geometry: Geometry, left: int, right: int, fss: int, outputs: tuple[str, ...],
             has_ivector: bool) -> ComputationRequest:
    start = -(left + geometry.extra_left)
    n_in = geometry.input_frames(left, right, fss)
    inputs = [IoSpecification.from_range("input", start, start + n_in)]
    if has_ivector:
        inputs.append(IoSpecification("ivector", [Index(0, 0, 0)]))
    outs = [IoSpecification(o, [Index(0, i * fss, 0) for i in range(geometry.frames)])
            for o in outputs]
    return ComputationRequest(inputs=inputs, outputs=outs, need_model_derivative=False,
                              store_component_stats=False)


def _run_reference(nnet: Any, computation: Any, feats: np.ndarray, ivector: np.ndarray | None,
                   output: str) -> np.ndarray:
    computer = NnetComputer(NnetComputeOptions(compress_matrices=False), computation, nnet)
    computer.accept_input("input", feats)
    if ivector is not None:
        computer.accept_input("ivector", ivector.reshape(1, -1))
    computer.run()
    return np.array(computer.get_output(output), dtype=np.float32)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    # float rounding of differently shaped computations is ~1e-6 relative
    return bool(np.max(np.abs(a - b), initial=0.0) <= 2e-5 * (1.0 + np.max(np.abs(a),
                                                                            initial=0.0)))


def _equivalences(nnet: Any, compile_fn: Any, left: int, right: int, opts: Any, n: int,
                  outputs: tuple[str, ...], ivector_dim: int) -> tuple[bool, bool]:
    """(left_local, right_causal), checked on random inputs for the very
    chunks that would be replaced: the first chunk with
    --extra-left-context-initial against the steady left context, and last
    chunks of 1, N/2 and N-1 frames (with --extra-right-context-final)
    against a full chunk."""
    rng = np.random.RandomState(0)
    fss = opts.frame_subsampling_factor
    elc, erc = opts.extra_left_context, opts.extra_right_context
    elci, ercf = opts.extra_left_context_initial, opts.extra_right_context_final
    ivector = rng.randn(ivector_dim).astype(np.float32) if ivector_dim else None
    dim = nnet.input_dim("input")

    def run(g: Geometry, x: np.ndarray, out: str) -> np.ndarray:
        comp = compile_fn(_request(g, left, right, fss, outputs, ivector is not None))
        return _run_reference(nnet, comp, x, ivector, out)

    left_local = right_causal = True
    steady = Geometry(elc, erc, n)
    if elci >= 0 and elci != elc:
        first = Geometry(elci, erc, n)
        wide = max(steady, first, key=lambda g: g.extra_left)
        narrow = first if wide is steady else steady
        feats = rng.randn(wide.input_frames(left, right, fss), dim).astype(np.float32)
        skip = wide.extra_left - narrow.extra_left
        for out in outputs:
            try:
                left_local = left_local and _same(run(wide, feats, out),
                                                  run(narrow, feats[skip:], out))
            except PynnetError:    # not computable: not equivalent (conservative)
                left_local = False
    last_right = ercf if ercf >= 0 else erc
    sizes = sorted({1, n // 2, n - 1} - {0, n})
    steady_rows = steady.input_frames(left, right, fss)
    feats = rng.randn(max([steady_rows] + [Geometry(elc, last_right, f).input_frames(
        left, right, fss) for f in sizes]), dim).astype(np.float32)
    for out in outputs:
        full = run(steady, feats[:steady_rows], out)
        for frames in sizes:
            short = Geometry(elc, last_right, frames)
            rows = short.input_frames(left, right, fss)
            try:
                right_causal = right_causal and _same(full[:frames],
                                                      run(short, feats[:rows], out))
            except PynnetError:
                right_causal = False
    return left_local, right_causal


def _geometries(opts: Any, n: int, left_local: bool, right_causal: bool) -> list[Geometry]:
    meta = {"extra_left_context": opts.extra_left_context,
            "extra_right_context": opts.extra_right_context,
            "extra_left_context_initial": opts.extra_left_context_initial,
            "extra_right_context_final": opts.extra_right_context_final,
            "left_local": left_local, "right_causal": right_causal, "chunk_frames": n}
    keys: list[Geometry] = [geometry_key(False, False, n, meta)]
    for first in (True, False):
        for last in (False, True):
            for frames in (range(1, n + 1) if last else (n,)):
                g = geometry_key(first, last, frames, meta)
                if g not in keys:
                    keys.append(g)
    return keys


def translate_nnet(nnet: Any, options: ExportOptions, priors: np.ndarray | None = None,
                   model_bytes: bytes | None = None) -> TranslatedNnet:
    """Prepare ``nnet`` (in place) as nnet3-compute does and translate the
    computations of its chunk geometries."""
    from ..cache import CachingCompiler
    from ..compile.graph.context import compute_simple_nnet_context, is_simple_nnet

    if not is_simple_nnet(nnet):
        raise ExportError("the network is not a simple network (it needs an output node "
                          "'output', an input node 'input' and optionally an input node "
                          "'ivector')")
    for o in options.outputs:
        n = nnet.get_node_index(o)
        if n == -1 or not nnet.is_output_node(n):
            raise ConfigError(f"--output: the network has no output node '{o}' (it has "
                              f"{', '.join(nnet.output_node_names())})")
    check_exportable(nnet)
    prepare_nnet_for_test(nnet)
    opts = options.opts.check_and_fix_configs(nnet.modulus())
    fss = opts.frame_subsampling_factor
    n = opts.frames_per_chunk // fss
    left, right = compute_simple_nnet_context(nnet)
    input_dim = nnet.input_dim("input")
    ivector_dim = max(0, nnet.input_dim("ivector"))
    compiler = CachingCompiler(nnet, opts.compiler_config, opts.optimize_config, use_disk=False)
    if options.detect_equivalent_chunks:
        left_local, right_causal = _equivalences(nnet, compiler.compile, left, right, opts, n,
                                                 options.outputs, ivector_dim)
    else:
        left_local = right_causal = False
    geometries = _geometries(opts, n, left_local, right_causal)
    log.log(f"Exporting {len(geometries)} chunk geometr{'y' if len(geometries) == 1 else 'ies'}"
            f" (left-local={str(left_local).lower()}, right-causal="
            f"{str(right_causal).lower()})")
    parameters: dict[str, np.ndarray] = {}
    log_priors = None
    if priors is not None and np.asarray(priors).size:
        with np.errstate(divide="ignore"):
            log_priors = np.log(np.asarray(priors, dtype=np.float32))
    computations = []
    for k, g in enumerate(geometries):
        request = _request(g, left, right, fss, options.outputs, ivector_dim > 0)
        try:
            computations.append((g, compiler.compile(request)))
        except PynnetError as e:
            if k == 0 or "not computable" not in str(e):
                raise
            # as in nnet3-compute, a chunk this short cannot be computed
            log.warn(f"chunks of {g.frames} output frames (extra context {g.extra_left}/"
                     f"{g.extra_right}) are not computable by this network; utterances "
                     f"that need them fail, as in nnet3-compute")
    geometries = [g for g, _ in computations]
    programs = []
    for k, (g, computation) in enumerate(computations):
        p = Program(parameters=parameters, prefix=f"g{k}_" if len(geometries) > 1 else "")
        backend = TraceBackend(p, nnet)
        computer = NnetComputer(NnetComputeOptions(compress_matrices=False), computation, nnet,
                                backend=backend)
        computer.accept_input("input", Mat(g.input_frames(left, right, fss), input_dim, "input"))
        if ivector_dim:
            computer.accept_input("ivector", Mat(1, ivector_dim, "ivector"))
        computer.run()
        for o in options.outputs:
            value = backend.read(computer.get_output(o))
            if o == "output" and log_priors is not None:
                value = p.op("Sub", [value, p.const(log_priors)], "priors")
            if opts.acoustic_scale != 1.0:
                value = p.op("Mul", [value, p.const(np.float32(opts.acoustic_scale))],
                             "acoustic_scale")
            p.outputs.append((o, value))
        programs.append(p)
    meta = {
        "pynnet3_version": __version__,
        "model_sha256": hashlib.sha256(model_bytes).hexdigest() if model_bytes else "",
        "input_dim": input_dim, "ivector_dim": ivector_dim,
        "left_context": left, "right_context": right,
        "frames_per_chunk": opts.frames_per_chunk, "frame_subsampling_factor": fss,
        "chunk_frames": n,
        "extra_left_context": opts.extra_left_context,
        "extra_right_context": opts.extra_right_context,
        "extra_left_context_initial": opts.extra_left_context_initial,
        "extra_right_context_final": opts.extra_right_context_final,
        "online_ivector_period": options.online_ivector_period,
        "left_local": int(left_local), "right_causal": int(right_causal),
        "outputs": ",".join(options.outputs),
        "output_dims": ",".join(str(nnet.output_dim(o)) for o in options.outputs),
        "priors_subtracted": int(log_priors is not None),
        "chunks": json.dumps([dataclasses.asdict(g) | {
            "input_frames": g.input_frames(left, right, fss)} for g in geometries]),
    }
    return TranslatedNnet(programs, geometries, parameters,
                          {k: str(v) for k, v in meta.items()}, input_dim, ivector_dim,
                          [(o, nnet.output_dim(o)) for o in options.outputs])
