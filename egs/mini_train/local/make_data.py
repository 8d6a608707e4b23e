#!/usr/bin/env python3
"""Toy acoustic data for the mini_train recipe (like a Kaldi recipe's local/ step).

Writes <dir>/feats.ark (Kaldi float matrices) and <dir>/post.ark (text
Posterior archive, one pdf per frame).  A frame's label is a fixed random
linear function of the features at t-1, t, t+1 (argmax over classes), with a
per-utterance offset playing the speaker, so a small TDNN can learn it.
"""
import argparse

import kaldiio
import numpy as np


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--num-pdfs", type=int, default=24)
    p.add_argument("--num-utts", type=int, default=40)
    p.add_argument("--min-frames", type=int, default=80)
    p.add_argument("--max-frames", type=int, default=200)
    p.add_argument("--model-seed", type=int, default=100,
                   help="seed of the labelling function (same for train and test)")
    p.add_argument("dir")
    a = p.parse_args()
    weights = np.random.default_rng(a.model_seed).standard_normal((a.num_pdfs, 3 * a.dim))
    rng = np.random.default_rng(a.seed)
    with kaldiio.WriteHelper(f"ark:{a.dir}/feats.ark") as feats, \
            open(f"{a.dir}/post.ark", "w") as post:
        for u in range(a.num_utts):
            key = f"utt{a.seed:02d}_{u:04d}"
            num_frames = int(rng.integers(a.min_frames, a.max_frames + 1))
            x = (0.5 * rng.standard_normal(a.dim) + rng.standard_normal((num_frames, a.dim)))
            padded = np.concatenate([x[:1], x, x[-1:]])
            context = np.concatenate([padded[:-2], padded[1:-1], padded[2:]], axis=1)
            labels = np.argmax(context @ weights.T, axis=1)
            feats(key, x.astype(np.float32))
            post.write(key + " " + " ".join(f"[ {k} 1 ]" for k in labels) + "\n")


if __name__ == "__main__":
    main()
