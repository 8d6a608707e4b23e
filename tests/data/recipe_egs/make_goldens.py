"""Cut the small goldens of this folder out of real Kaldi's outputs in
../shared/reference/recipe/ngaffine_bn (and ../shared/reference/train/ngaffine_bn).

Run from the repository root: ``PYTHONPATH=src python tests/data/recipe_egs/make_goldens.py DIR``
where DIR holds pynnet3's own run of the recipe's nnet3-copy-egs commands (the
reference keeps only the sha256 of egs_ctx1.ark, egs_frame_rand.ark and egs_keep.ark;
the files taken from DIR are checked against those hashes first, so every golden
here is Kaldi's bytes).  Kaldi's egs tools and nnet3-compute-from-egs treat each
eg (nnet3-get-egs-simple each utterance) on its own, so the entries that come
from the first egs of the input are what Kaldi writes for that shorter input.
"""
from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from pynnet3.io.table import GENERAL_MATRIX_HOLDER, MATRIX_HOLDER, SequentialTableReader
from pynnet3.io.kaldi_io import KaldiWriter
from pynnet3.train.egs import EXAMPLE_HOLDER

HERE = Path(__file__).resolve().parent
REF = HERE.parents[2].parent / "shared" / "reference"
CASE = "ngaffine_bn"
NUM_EGS = 10
NUM_UTTS = 2


def entries(path: Path, holder) -> list[tuple[str, bytes]]:
    """(key, bytes of the archive entry) for each entry; checks that re-writing
    every object gives back the file's bytes exactly."""
    out = []
    with SequentialTableReader(f"ark:{path}", holder) as reader:
        for key, obj in reader:
            w = KaldiWriter(True)
            holder.write(w, obj)
            out.append((key, key.encode() + b" \0B" + w.getvalue()))
    if b"".join(e for _, e in out) != path.read_bytes():
        raise SystemExit(f"{path}: re-written entries differ from the file")
    return out


def cut(src: Path, dst: Path, holder, keys: set[str] | None = None, first: int = 0) -> list[str]:
    items = entries(src, holder)
    chosen = items[:first] if keys is None else [(k, e) for k, e in items if k in keys]
    dst.write_bytes(b"".join(e for _, e in chosen))
    return [k for k, _ in chosen]


def main(pynnet3_run: Path) -> None:
    recipe, train = REF / "recipe" / CASE, REF / "train" / CASE
    hashes = dict(reversed(line.split()) for line in (recipe / "sha256.txt").read_text().splitlines())
    for name in ("egs_ctx1.ark", "egs_frame_rand.ark", "egs_keep.ark"):
        digest = hashlib.sha256((pynnet3_run / name).read_bytes()).hexdigest()
        if digest != hashes[name]:
            raise SystemExit(f"{pynnet3_run / name} is not Kaldi's output (sha256 differs)")
    keys = set(cut(train / "egs.ark", HERE / "egs10.ark", EXAMPLE_HOLDER, first=NUM_EGS))
    cut(recipe / "egs_frame3.ark", HERE / "egs10_frame3.ark", EXAMPLE_HOLDER, keys)
    for name in ("egs_ctx1", "egs_frame_rand", "egs_keep"):
        cut(pynnet3_run / f"{name}.ark", HERE / f"egs10_{name[4:]}.ark", EXAMPLE_HOLDER, keys)
    cut(recipe / "cfe_exp.ark", HERE / "egs10_cfe_exp.ark", MATRIX_HOLDER, keys)
    shutil.copyfile(train / "1.raw", HERE / "1.raw")
    utts = set(cut(train / "feats.ark", HERE / "feats2.ark", GENERAL_MATRIX_HOLDER,
                   first=NUM_UTTS))
    cut(recipe / "targets.ark", HERE / "targets2.ark", GENERAL_MATRIX_HOLDER, utts)
    cut(recipe / "egs_simple.ark", HERE / "egs_simple2.ark", EXAMPLE_HOLDER, utts)
    # nnet3-subset-egs depends on the number of egs read: keep the key orders only.
    lines = [" ".join(k for k, _ in entries(train / "egs.ark", EXAMPLE_HOLDER))]
    for name in ("subset", "subset_s3", "subset_ord"):
        lines.append(name + " " + " ".join(k for k, _ in entries(recipe / f"{name}.ark",
                                                                  EXAMPLE_HOLDER)))
    (HERE / "subset_keys.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
