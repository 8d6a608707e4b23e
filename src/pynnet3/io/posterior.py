"""Kaldi's Posterior (hmm/posterior.cc): per-frame lists of (pdf-id, weight).

Text form, one utterance per line: ``utt [ 11 1 ] [ 9 0.5 30 0.5 ] ...``;
binary form: int32 frame count, then per frame an int32 pair count and the
(int32, float) pairs.  A Posterior is a ``list`` (frames) of ``list`` of
``(int, float)`` pairs, the weights float32 values.
"""
from __future__ import annotations

import struct
from typing import List, Tuple

import numpy as np

from .kaldi_io import KaldiReader, KaldiWriter, format_float
from .general_matrix import gather_pairs, pack_pairs

Posterior = List[List[Tuple[int, float]]]


def read_posterior(r: KaldiReader) -> Posterior:
    if r.binary:
        size = r.read_int32()
        if size < 0 or size > 10000000:
            raise r.error(f"reading posterior: got negative or improbably large size {size}")
        starts: list[int] = []
        counts: list[int] = []
        data = r.data
        for _ in range(size):
            if data[r.pos:r.pos + 1] == b"\x04" and r.pos + 5 <= len(data):
                n = struct.unpack_from("<i", data, r.pos + 1)[0]
                r.pos += 5
            else:
                n = r.read_int32()
            if n < 0:
                raise r.error("reading posteriors: got negative size")
            if r.pos + 10 * n > len(data):
                raise r.error("file truncated inside a posterior")
            starts.append(r.pos)
            counts.append(n)
            r.pos += 10 * n
        indices, values = gather_pairs(r, starts, counts)
        pairs = list(zip(indices.tolist(), values.tolist()))
        post: Posterior = []
        k = 0
        for n in counts:
            post.append(pairs[k:k + n])
            k += n
        return post
    # Text: the rest of the line (Kaldi's getline).
    end = r.data.find(b"\n", r.pos)
    if end < 0:
        end = len(r.data)
    words = r.data[r.pos:end].split()
    r.pos = min(end + 1, len(r.data))
    post = []
    k = 0
    while k < len(words):
        if words[k] != b"[":
            hint = ": did you provide alignments instead of posteriors?" if words[k].lstrip(b"-").isdigit() else ""
            raise r.error(f"reading Posterior object: expecting [, got '{words[k][:40].decode(errors='replace')}'{hint}")
        k += 1
        frame = []
        while True:
            if k >= len(words):
                raise r.error("error reading Posterior object (missing ']')")
            if words[k] == b"]":
                k += 1
                break
            if k + 1 >= len(words):
                raise r.error("error reading Posterior object (could not get data after \"[\")")
            try:
                frame.append((int(words[k]), float(np.float32(float(words[k + 1])))))
            except ValueError:
                raise r.error("error reading Posterior object (could not get data after \"[\")") from None
            k += 2
        post.append(frame)
    return post


def write_posterior(w: KaldiWriter, post: Posterior) -> None:
    if w.binary:
        w.write_int32(len(post))
        counts = [len(frame) for frame in post]
        data = pack_pairs(np.array([p[0] for frame in post for p in frame], np.int32),
                          np.array([p[1] for frame in post for p in frame], np.float32))
        parts, k = [], 0
        for n in counts:
            parts.append(b"\x04" + struct.pack("<i", n) + data[10 * k:10 * (k + n)])
            k += n
        w.write_raw(b"".join(parts))
        return
    w.write_raw("".join("[ " + "".join(f"{i} {format_float(float(np.float32(p)))} " for i, p in frame)
                        + "] " for frame in post) + "\n")


class PosteriorHolder:
    """Table holder for Posterior (Kaldi's PosteriorHolder)."""

    name = "Posterior"

    @staticmethod
    def read(r: KaldiReader) -> Posterior:
        return read_posterior(r)

    @staticmethod
    def write(w: KaldiWriter, post: Posterior) -> None:
        write_posterior(w, post)


POSTERIOR_HOLDER = PosteriorHolder()

__all__ = ["Posterior", "read_posterior", "write_posterior", "POSTERIOR_HOLDER"]
