"""Writes feats.ark and post.ark: 8 utterances x 16 frames x 6 dims whose
compression is degenerate (percentiles that coincide in float: a range tiny
next to the values; constant columns; one outlier), and 1-best posteriors
(pdf t % 10).  Kaldi's binary archive format, written by hand (no pynnet3)."""
import struct

import numpy as np


def write_matrix_ark(path, mats):
    with open(path, "wb") as f:
        for key, m in mats.items():
            m = np.ascontiguousarray(m, dtype="<f4")
            f.write(key.encode() + b" \0BFM " + b"\4" + struct.pack("<i", m.shape[0])
                    + b"\4" + struct.pack("<i", m.shape[1]) + m.tobytes())


rng = np.random.RandomState(5)
mats = {}
for i in range(8):
    base = rng.randn(16, 6).astype(np.float32)
    if i % 4 == 0:      # tiny range next to the magnitude
        m = 10.0 ** rng.uniform(2, 5) + 10.0 ** rng.uniform(-8, -5) * base
    elif i % 4 == 1:    # constant columns beside ordinary ones
        m = base.copy()
        m[:, [1, 4]] = rng.randn(2) * 50
    elif i % 4 == 2:    # constant but for one element
        m = np.full((16, 6), rng.randn() * 1e3)
        m[rng.randint(16), rng.randint(6)] += 10.0 ** rng.uniform(-5, 1)
    else:               # ones, with a few values a float ulp or so away
        m = np.where(rng.rand(16, 6) < 0.8, 1.0, 1.0 + 1e-7 * rng.randn(16, 6))
    mats[f"utt{i}"] = m.astype(np.float32)
write_matrix_ark("feats.ark", mats)
with open("post.ark", "w") as f:
    for key in mats:
        f.write(key + " " + " ".join(f"[ {t % 10} 1 ]" for t in range(16)) + "\n")
