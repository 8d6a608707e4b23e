"""Makes the LDA goldens in this folder from the real-Kaldi reference folder
(../shared/reference/recipe/affine_xent and ../shared/reference/train/affine_xent).

Run from the repository root:  PYTHONPATH=src python tests/data/lda/make_golden.py

* ``labels.txt``: the 'output' supervision of each eg of train/affine_xent/egs.ark
  (one line per eg, rows separated by spaces, a row's pdf:weight pairs by commas).
  Every eg there has input t=-2..9 and output t=0..7 (n=0, x=0), which the
  script checks; the features are left out (the class counts do not use them).
* ``kaldi_zero_accs.txt``: Kaldi's <ZERO_ACCS> of lda.1.acc (--rand-prune=4.0) and
  lda.0.txt.acc (no pruning), copied as text.
* ``init.raw``, ``lda_stats``, ``log.get_transform*.txt``: Kaldi's files, copied.
* ``mtm_digest.txt``: of Kaldi's transforms M = [A b] (lda.mat; lda_dim.txt.mat,
  --dim=20), the diagonal and last row of M^T M (which do not depend on the
  arbitrary row signs / null-space rotations of M).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

from pynnet3.io.kaldi_io import open_kaldi_object
from pynnet3.train.egs import iter_examples
from pynnet3.train.lda import LdaEstimate

HERE = Path(__file__).resolve().parent
REF = HERE.parents[2].parent / "shared" / "reference"
RECIPE = REF / "recipe" / "affine_xent"


def main() -> int:
    lines = []
    for _, eg in iter_examples(f"ark:{REF / 'train' / 'affine_xent' / 'egs.ark'}"):
        inp, out = eg.get_io("input"), eg.get_io("output")
        assert [io.name for io in eg.io] == ["input", "output"]
        assert inp.indexes[:, 1].tolist() == list(range(-2, 10))
        assert out.indexes[:, 1].tolist() == list(range(0, 8))
        assert not inp.indexes[:, [0, 2]].any() and not out.indexes[:, [0, 2]].any()
        smat = out.features.value
        rows = []
        for r in range(smat.num_rows):
            idx, val = smat.row(r)
            rows.append(",".join(f"{i}:{v:.9g}" for i, v in zip(idx.tolist(), val.tolist())))
        lines.append(" ".join(rows))
    (HERE / "labels.txt").write_text("\n".join(lines) + "\n")

    out = []
    for tag, name in (("prune4", "lda.1.acc"), ("prune0", "lda.0.txt.acc")):
        stats = LdaEstimate()
        stats.read(open_kaldi_object(str(RECIPE / name)), add=False)
        out.append(tag + " " + " ".join(f"{v:.9g}" for v in stats.zero_acc.tolist()))
    (HERE / "kaldi_zero_accs.txt").write_text("\n".join(out) + "\n")

    for name in ("init.raw", "lda_stats", "log.get_transform.txt", "log.get_transform_dim.txt"):
        shutil.copyfile(RECIPE / name, HERE / name)

    out = []
    for tag, name in (("full", "lda.mat"), ("dim20", "lda_dim.txt.mat")):
        m = open_kaldi_object(str(RECIPE / name)).read_matrix().astype(np.float64)
        mtm = m.T @ m
        out.append(f"{tag} diag " + " ".join(f"{v:.9g}" for v in np.diag(mtm)))
        out.append(f"{tag} last " + " ".join(f"{v:.9g}" for v in mtm[-1]))
    (HERE / "mtm_digest.txt").write_text("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
