"""nnet3-compute-onnx's library side: an exported model run with
onnxruntime over whole utterances, chunk by chunk as nnet3-compute does.

The chunks are Kaldi's (:func:`pynnet3.compute.decodable.chunk_window`);
each is computed with the geometry the export chose for it
(:func:`pynnet3.export.exporter.geometry_key`): the input rows are the
chunk's window, the utterance's first / last frame repeated past its ends,
and a last chunk computed as a full one keeps only its own rows.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from .. import log
from ..compute.decodable import (NnetSimpleComputationOptions, chunk_window,
                                 online_ivector_row)
from ..compute.utterance_options import (apply_exp_option, ivectors_option,
                                         online_ivector_period_option, online_ivectors_option,
                                         utt2spk_option)
from ..errors import ConfigError, PynnetError
from .exporter import Geometry, geometry_key

__all__ = ["OnnxNnet", "ComputeOnnxConfig", "nnet3_compute_onnx"]

_INT_KEYS = ("input_dim", "ivector_dim", "left_context", "right_context", "frames_per_chunk",
             "frame_subsampling_factor", "chunk_frames", "extra_left_context",
             "extra_right_context", "extra_left_context_initial", "extra_right_context_final",
             "online_ivector_period", "left_local", "right_causal")


class OnnxNnet:
    """An exported model in an onnxruntime session, with its chunk metadata."""

    def __init__(self, path: str, num_threads: int = 0) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:  # pragma: no cover - the extra is missing
            raise PynnetError("nnet3-compute-onnx needs onnxruntime (pip install "
                              "'pynnet3[onnx]')") from e
        so = ort.SessionOptions()
        so.intra_op_num_threads = num_threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 (onnxruntime raises its own types)
            raise PynnetError(f"could not load ONNX model {path}: {e}") from e
        props = self.session.get_modelmeta().custom_metadata_map
        if "chunks" not in props:
            raise PynnetError(f"{path} is not a model written by nnet3-export-onnx (no chunk "
                              f"metadata)")
        self.meta: dict[str, Any] = {k: int(props[k]) for k in _INT_KEYS}
        self.outputs = props["outputs"].split(",")
        self.chunks = [Geometry(c["extra_left"], c["extra_right"], c["frames"])
                       for c in json.loads(props["chunks"])]
        self.chunk_index = {g: i for i, g in enumerate(self.chunks)}
        self.has_chunk_input = len(self.chunks) > 1
        m = self.meta
        self.opts = NnetSimpleComputationOptions(
            extra_left_context=m["extra_left_context"],
            extra_right_context=m["extra_right_context"],
            extra_left_context_initial=m["extra_left_context_initial"],
            extra_right_context_final=m["extra_right_context_final"],
            frame_subsampling_factor=m["frame_subsampling_factor"],
            frames_per_chunk=m["frames_per_chunk"], acoustic_scale=1.0)

    def compute(self, feats: np.ndarray, ivector: np.ndarray | None = None,
                online_ivectors: np.ndarray | None = None, online_ivector_period: int = 0,
                output: str | None = None) -> np.ndarray:
        """nnet3-compute's output matrix for one utterance."""
        m = self.meta
        feats = np.asarray(feats, dtype=np.float32)
        if feats.ndim != 2 or feats.shape[1] != m["input_dim"]:
            raise PynnetError(f"the model expects 'input' features with dimension "
                              f"{m['input_dim']} but you provided {feats.shape[-1]}")
        have_ivector = ivector is not None or online_ivectors is not None
        if bool(m["ivector_dim"]) != have_ivector:
            raise PynnetError("the model has an 'ivector' input: supply iVectors (--ivectors or "
                              "--online-ivectors)" if m["ivector_dim"] else
                              "the model has no 'ivector' input: do not supply iVectors")
        out_name = output or self.outputs[0]
        fss = m["frame_subsampling_factor"]
        num_rows = feats.shape[0]
        total = (num_rows + fss - 1) // fss
        pieces = []
        s = 0
        while s < total:
            w = chunk_window(self.opts, total, s)
            g = geometry_key(s == 0, s + w.num_subsampled_frames == total,
                             w.num_subsampled_frames, m)
            first_input = w.first_output_frame - m["left_context"] - g.extra_left
            n_in = g.input_frames(m["left_context"], m["right_context"], fss)
            rows = np.clip(np.arange(first_input, first_input + n_in), 0, num_rows - 1)
            feeds = {"input": feats[rows]}
            if m["ivector_dim"]:
                if ivector is not None:
                    iv = np.asarray(ivector, dtype=np.float32).reshape(1, -1)
                else:
                    iv = online_ivector_row(np.asarray(online_ivectors, dtype=np.float32),
                                            online_ivector_period, w.first_output_frame,
                                            w.last_output_frame - w.first_output_frame
                                            ).reshape(1, -1)
                if iv.shape[1] != m["ivector_dim"]:
                    raise PynnetError(f"the model expects 'ivector' features with dimension "
                                      f"{m['ivector_dim']} but you provided {iv.shape[1]}")
                feeds["ivector"] = iv
            idx = self.chunk_index.get(g)
            if idx is None:
                raise PynnetError(f"a chunk of {g.frames} output frames (extra context "
                                  f"{g.extra_left}/{g.extra_right}) is not computable by this "
                                  f"network (nnet3-compute fails the same way)")
            if self.has_chunk_input:
                feeds["chunk"] = np.array(idx, dtype=np.int64)
            out = self.session.run([out_name], feeds)[0]
            pieces.append(out[:w.num_subsampled_frames])
            s += w.num_subsampled_frames
        return np.concatenate(pieces, axis=0)


@dataclass
class ComputeOnnxConfig:
    ivector_rspecifier: str = ivectors_option()
    utt2spk_rspecifier: str = utt2spk_option()
    online_ivector_rspecifier: str = online_ivectors_option()
    online_ivector_period: int = online_ivector_period_option(
        " (default: the value given to nnet3-export-onnx)")
    apply_exp: bool = apply_exp_option()
    num_threads: int = field(default=1, metadata={
        "flag": "num-threads", "help": "Number of onnxruntime intra-op threads (0: "
        "onnxruntime's default, all cores)"})
    output: str = field(default="", metadata={
        "flag": "output", "help": "Output node to write (default: the first one exported)"})


def nnet3_compute_onnx(config: ComputeOnnxConfig, model_path: str, feature_rspecifier: str,
                       matrix_wspecifier: str,
                       progress: Callable[[str, int], None] | None = None) -> tuple[int, int]:
    """nnet3-compute's loop with an exported model; (num done, num failed)."""
    from ..compute.utterances import MappedVectorReader, utterance_inputs
    from ..io.table import MATRIX_HOLDER, RandomAccessTableReader, SequentialTableReader, \
        TableWriter

    start = time.perf_counter()
    if config.online_ivector_rspecifier and config.ivector_rspecifier:
        raise ConfigError("give --ivectors or --online-ivectors, not both")
    model = OnnxNnet(model_path, config.num_threads)
    period = config.online_ivector_period or model.meta["online_ivector_period"]
    if config.online_ivector_rspecifier and period <= 0:
        raise ConfigError("You need to set the --online-ivector-period option!")
    if config.output and config.output not in model.outputs:
        raise ConfigError(f"--output={config.output}: the model's outputs are "
                          f"{', '.join(model.outputs)}")
    online_reader = (RandomAccessTableReader(config.online_ivector_rspecifier, MATRIX_HOLDER)
                     if config.online_ivector_rspecifier else None)
    ivector_reader = (MappedVectorReader(config.ivector_rspecifier, config.utt2spk_rspecifier)
                      if config.ivector_rspecifier else None)
    num_done = frames = 0
    failed = SimpleNamespace(num_fail=0)  # counted by utterance_inputs
    writer = TableWriter(matrix_wspecifier, MATRIX_HOLDER)
    try:
        with SequentialTableReader(feature_rspecifier, MATRIX_HOLDER) as reader:
            for utt, feats, ivector, online in utterance_inputs(
                    reader, ivector_reader, online_reader, failed):
                out = model.compute(feats, ivector, online, period, config.output or None)
                if config.apply_exp:
                    out = np.exp(out)
                writer.write(utt, out)
                num_done += 1
                frames += feats.shape[0]
                if progress is not None:
                    progress(utt, feats.shape[0])
    except BaseException:
        writer.abort()
        raise
    finally:
        writer.close()
        for r in (ivector_reader, online_reader):
            if r is not None:
                r.close()
    seconds = time.perf_counter() - start
    rtf = seconds * 100.0 / frames if frames else float("inf")
    log.log(f"Time taken {seconds:g}s: real-time factor assuming 100 frames/sec is {rtf:g}")
    log.log(f"Done {num_done} utterances, failed for {failed.num_fail}")
    return num_done, failed.num_fail
