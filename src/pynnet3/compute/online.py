"""Streaming evaluation of a network: feature frames in, output frames out, as
they arrive (the looped computation of :mod:`pynnet3.compute.looped`, fed the
way Kaldi's DecodableNnetLoopedOnlineBase feeds it).

    info = DecodableNnetSimpleLoopedInfo(opts, nnet)      # compiled once
    stream = OnlineNnetComputer(info, ivector=ivector)     # one per utterance
    for piece in pieces:                                   # any sizes, even 1 frame
        out = stream.accept_features(piece)                # rows that became computable
    out = stream.finish()                                  # the rest, end padded

A chunk is computed as soon as every input frame it takes has arrived: chunk
k needs frames up to ``(k + 1) * frames_per_chunk + right_context`` (Kaldi's
NumFramesReady).  At :meth:`OnlineNnetComputer.finish` the remaining chunks
are computed with the last frame repeated, and the output is cut to
``ceil(num_frames / frame_subsampling_factor)`` rows.  The chunks, their
input rows and their i-vectors are exactly those of the whole-utterance
:class:`~pynnet3.compute.looped.DecodableNnetSimpleLooped`, so the
concatenated outputs are identical to its output whatever the piece sizes.

I-vectors: one for the whole utterance (``ivector=``), or online i-vectors,
one row every ``online_ivector_period`` frames, given with the features
(``accept_features(feats, ivectors)``) or on their own
(:meth:`OnlineNnetComputer.accept_ivectors`).  Each chunk uses the row of
the frame just past its input (``end_input_frame // period``, as the
whole-utterance decodable does); a chunk waits for that row unless the input
has finished, when the last row stands in for missing ones.  (Kaldi's
online decodable uses instead whatever row is newest when the chunk runs;
waiting keeps the streaming output equal to the whole-utterance output.)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ConfigError, PynnetError
from .looped import DecodableNnetSimpleLoopedInfo, LoopedChunkComputer

__all__ = ["OnlineNnetComputer"]


class OnlineNnetComputer:
    """One utterance, streamed through the looped computation of ``info``.

    ``ivector``: one i-vector for the whole utterance; otherwise, for a
    network with an i-vector input, online i-vectors every
    ``online_ivector_period`` frames.  ``backend``: the compute backend
    (:func:`pynnet3.compute.backend.get_backend` name or object).
    """

    def __init__(self, info: DecodableNnetSimpleLoopedInfo, ivector: Any = None,
                 online_ivector_period: int = 0, backend: Any = "reference") -> None:
        self.info = info
        self.chunks = LoopedChunkComputer(info, backend)
        self.ivector = None if ivector is None else np.asarray(ivector, dtype=np.float32).ravel()
        self.online_ivector_period = online_ivector_period
        if info.has_ivectors:
            if self.ivector is None and online_ivector_period <= 0:
                raise ConfigError("the network has an 'ivector' input: give an iVector for the "
                                  "utterance or an --online-ivector-period > 0 (and online "
                                  "iVectors with the features)")
            if self.ivector is not None and self.ivector.shape[0] != info.ivector_dim:
                raise PynnetError(f"Neural net expects 'ivector' features with dimension "
                                  f"{info.ivector_dim} but you provided {self.ivector.shape[0]}")
        # Features kept: rows [feats_begin, num_frames_received); earlier ones
        # are dropped once no chunk needs them.
        self._feats = np.zeros((0, info.input_dim), dtype=np.float32)
        self._feats_begin = 0
        self.num_frames_received = 0
        self._ivectors = np.zeros((0, info.ivector_dim), dtype=np.float32)
        self.num_frames_output = 0
        self.finished = False

    # -- input ------------------------------------------------------------------
    def accept_ivectors(self, ivectors: Any) -> None:
        """Append online i-vector rows (row i is the i-vector of frame
        ``i * online_ivector_period``)."""
        if self.finished:
            raise PynnetError("accept_ivectors after finish()")
        if self.online_ivector_period <= 0:
            raise ConfigError("online iVectors need online_ivector_period > 0")
        rows = np.asarray(ivectors, dtype=np.float32)
        if rows.ndim == 1:
            rows = rows.reshape(1, -1)
        if rows.ndim != 2 or (rows.shape[0] and rows.shape[1] != self._ivectors.shape[1]):
            raise PynnetError(f"Neural net expects 'ivector' features with dimension "
                              f"{self._ivectors.shape[1]} but you provided "
                              f"{rows.shape[-1] if rows.ndim else 0}")
        if rows.shape[0]:
            self._ivectors = np.concatenate([self._ivectors, rows])

    def accept_features(self, feats: Any, ivectors: Any = None) -> np.ndarray:
        """Append feature frames (a matrix, any number of rows; and online
        i-vector rows if given); returns the output rows that became
        computable (possibly none), after those returned before."""
        if self.finished:
            raise PynnetError("accept_features after finish()")
        if ivectors is not None:
            self.accept_ivectors(ivectors)
        rows = np.asarray(feats, dtype=np.float32)
        if rows.ndim == 1:
            rows = rows.reshape(1, -1)
        if rows.ndim != 2 or rows.shape[1] != self.info.input_dim:
            raise PynnetError(f"Neural net expects 'input' features with dimension "
                              f"{self.info.input_dim} but you provided "
                              f"{rows.shape[-1] if rows.ndim else 0}")
        if rows.shape[0]:
            self._feats = np.concatenate([self._feats, rows])
            self.num_frames_received += rows.shape[0]
        return self._compute_ready()

    def finish(self) -> np.ndarray:
        """End of input: compute the remaining chunks (the last frame
        repeated as right context) and return the remaining output rows."""
        if self.finished:
            raise PynnetError("finish() called twice")
        self.finished = True
        if self.num_frames_received == 0:
            return np.zeros((0, self.info.output_dim), dtype=np.float32)
        sf = self.info.opts.frame_subsampling_factor
        total = (self.num_frames_received + sf - 1) // sf
        pieces = []
        while self.chunks.next_output_offset() < total:
            pieces.append(self._compute_chunk())
        return self._emit(pieces, total)

    # -- state --------------------------------------------------------------------
    def num_frames_ready(self) -> int:
        """Output frames computable from the input so far (Kaldi's NumFramesReady)."""
        return self.chunks.next_output_offset() + self.info.output_frames_per_chunk * \
            self._num_chunks_ready()

    @property
    def latency_frames(self) -> int:
        """Input frames that must follow an output frame's chunk before it can
        be computed (the network's right context)."""
        return self.info.frames_right_context

    # -- internals ----------------------------------------------------------------
    def _num_chunks_ready(self) -> int:
        info = self.info
        fpc, right = info.frames_per_chunk, info.frames_right_context
        k0 = self.chunks.num_chunks_computed
        # chunk k takes input up to (k + 1) * fpc + right (exclusive)
        by_feats = (self.num_frames_received - right) // fpc - k0
        if info.has_ivectors and self.ivector is None:
            # chunk k uses the i-vector row ((k + 1) * fpc + right) // period
            period = self.online_ivector_period
            ready = 0
            while ready < by_feats and \
                    ((k0 + ready + 1) * fpc + right) // period < self._ivectors.shape[0]:
                ready += 1
            return ready
        return max(0, by_feats)

    def _compute_ready(self) -> np.ndarray:
        pieces = [self._compute_chunk() for _ in range(self._num_chunks_ready())]
        return self._emit(pieces, None)

    def _emit(self, pieces: list[np.ndarray], total: int | None) -> np.ndarray:
        if not pieces:
            return np.zeros((0, self.info.output_dim), dtype=np.float32)
        out = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        if total is not None:
            out = out[:max(0, total - self.num_frames_output)]
        self.num_frames_output += out.shape[0]
        return out

    def _compute_chunk(self) -> np.ndarray:
        info = self.info
        begin, end = self.chunks.next_input_range()
        last = self.num_frames_received - 1
        if last < 0:
            raise PynnetError("no input frames")
        rows = np.clip(np.arange(begin, end), 0, last) - self._feats_begin
        feats_chunk = self._feats[rows]
        ivector = None
        if info.has_ivectors:
            if self.ivector is not None:
                ivector = self.ivector
            else:
                if self._ivectors.shape[0] == 0:
                    raise PynnetError("no online iVectors were given for this utterance")
                row = min(end // self.online_ivector_period, self._ivectors.shape[0] - 1)
                ivector = self._ivectors[row]
        out = self.chunks.compute(feats_chunk, ivector)
        # Drop the frames no later chunk reads (keep the last one: it pads the end).
        next_begin, _ = self.chunks.next_input_range()
        keep_from = min(max(next_begin, 0), last)
        if keep_from > self._feats_begin:
            self._feats = self._feats[keep_from - self._feats_begin:]
            self._feats_begin = keep_from
        return out
