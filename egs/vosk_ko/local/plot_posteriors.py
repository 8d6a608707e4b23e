#!/usr/bin/env python3
"""Draw the network's output for one utterance as a heat map: the posteriors
of the most probable pdfs over time.  nnet3-compute writes a chain model's
output as unnormalised log-probabilities, so each frame is normalised here
(log-softmax) before exp()."""
import argparse

import kaldiio
import numpy as np

from pynnet3.cli.pictures import draw_posteriors


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--utt", default="", help="utterance to draw (default: the first)")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--frame-shift-ms", type=float, default=30.0,
                   help="time per output frame (10 ms x --frame-subsampling-factor)")
    p.add_argument("rspecifier")
    p.add_argument("picture")
    a = p.parse_args()
    for key, mat in kaldiio.ReadHelper(a.rspecifier):
        if a.utt and key != a.utt:
            continue
        x = mat.astype(np.float64)
        x -= x.max(axis=1, keepdims=True)
        logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
        draw_posteriors(logp, a.picture, top=a.top, frame_shift_ms=a.frame_shift_ms,
                        title=f"{key}: posteriors of the {a.top} most probable pdfs "
                              f"({mat.shape[0]} frames x {mat.shape[1]} pdfs)")
        print(f"{key}: {mat.shape[0]} frames; mean max posterior "
              f"{np.exp(logp).max(axis=1).mean():.3f}; wrote {a.picture}")
        return
    raise SystemExit(f"{a.rspecifier}: no utterance {a.utt or ''} found")


if __name__ == "__main__":
    main()
