"""Make tests/data/reference: the curated subset of real Kaldi's reference
outputs that the repository carries, so that the test suite checks parity with
Kaldi on a clone without the (developers-only) full reference folder.

Run from the repository root, with the full reference beside the checkout:

    python tests/data/make_reference.py [FULL_REFERENCE_DIR]

It has the full folder's layout (tests read either through
tests/helpers.py: reference_dir()); every file is copied unchanged except the
vosk_ko archives, which keep their first utterances (byte prefixes of Kaldi's
files).  The choice of cases is below; tests/data/README.md says why.
"""
from __future__ import annotations

import shutil
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "reference"

# Kaldi's unit-test generator networks (random/NNN): one or more seeds per
# family, preferring small ones and those with an updated model (backward +
# update golden).  Families: affine (002), natural-gradient affine +
# restricted attention (000, 019), LSTM (006), LSTM with backprop truncation
# (028), ReLU (023) and ReLU + log-softmax (024), statistics pooling (005, 009, 029, 045),
# Distribute (011, 034, 051), Composite (016, 046), TDNN component (020),
# TimeHeightConvolution (007, 058), Convolution + MaxPooling (026), no
# components at all (048).
RANDOM = ["000", "002", "005", "006", "007", "009", "011", "016", "019", "020", "023",
          "024", "026", "028", "029", "034", "045", "046", "048", "051", "058"]
# Recipe architectures shrunk and trained one pass by Kaldi (small/NAME):
# a plain TDNN with an iVector, a TDNN-LSTM (LstmNonlinearity, backprop
# truncation; chunking and looped decoding matter for recurrent networks) and
# a TDNN with restricted attention and BatchNorm.
# The x-vector network too (statistics pooling; Kaldi's nnet3-xvector-compute
# outputs for tests/compute/test_xvector.py), without its training minibatches
# and text model (1.6 MB, which no test of a user's clone needs).
SMALL = ["tdnn_xent_nnet3_wsj_1b", "tdnn_lstm_swbd_1e", "tdnn_attention_swbd_1a",
         "xvector_sre16_1a"]
SMALL_SKIP = {"xvector_sre16_1a": ["merged.ark", "1.txt.raw"]}
# One training case: egs, merged minibatches, nnet3-train / compute-prob /
# average / combine results.
TRAIN = ["affine_xent"]
# Copied whole: every recipe config (tiny text), Kaldi's compile goldens.
WHOLE = ["configs", "compile"]
# vosk_ko: keep the first utterances of each archive (Kaldi treats each
# utterance on its own in nnet3-compute, so the entries kept are exactly what
# Kaldi writes for the shorter input).
VOSK_UTTS = 2
VOSK_ARKS = ["feats.ark", "ivectors.ark", "online_ivectors.ark", "out_a_fss3.ark",
             "out_a_xent_fss3.ark", "out_b_fss1.ark", "out_c_fss3_elc10_erc10_fpc50.ark"]
VOSK_FILES = ["commands.txt", "sha256.txt", "nnet3-info.txt", "nnet3-am-info.txt"]
TOP_FILES = ["README.md"]


def ark_prefix(data: bytes, count: int) -> bytes:
    """The bytes of the first ``count`` entries of a binary Kaldi archive of
    float/double matrices and vectors."""
    pos = 0
    for _ in range(count):
        pos = data.index(b" ", pos) + 1
        assert data[pos:pos + 2] == b"\0B", "binary entries only"
        pos += 2
        kind = data[pos:pos + 3]
        pos += 3
        size = 4 if kind[0:1] == b"F" else 8
        if kind[1:2] == b"M":
            rows, cols = struct.unpack("<xixi", data[pos:pos + 10])
            pos += 10 + rows * cols * size
        elif kind[1:2] == b"V":
            (dim,) = struct.unpack("<xi", data[pos:pos + 5])
            pos += 5 + dim * size
        else:
            raise ValueError(f"unexpected object {kind!r}")
    return data[:pos]


# Left out, as no test reads it: a text copy of an archive the tests compare
# in binary.
SKIP = ["_tools", "__pycache__", "compute.1.txt.ark"]


def copy_tree(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(*SKIP, *skip),
                    copy_function=shutil.copyfile)  # not the read-only modes


def main() -> None:
    full = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[2] / "shared" / "reference"
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir()
    for name in TOP_FILES:
        shutil.copy(full / name, OUT / name)
    for name in WHOLE:
        copy_tree(full / name, OUT / name)
    for kind, names in (("random", RANDOM), ("small", SMALL), ("train", TRAIN)):
        for name in names:
            skip = SMALL_SKIP.get(name, []) if kind == "small" else []
            copy_tree(full / kind / name, OUT / kind / name, tuple(skip))
    for name in ("README.md", "INDEX.tsv"):
        shutil.copy(full / "small" / name, OUT / "small" / name)
    shutil.copy(full / "train" / "README.md", OUT / "train" / "README.md")
    (OUT / "vosk_ko").mkdir()
    for name in VOSK_FILES:
        shutil.copy(full / "vosk_ko" / name, OUT / "vosk_ko" / name)
    for name in VOSK_ARKS:
        (OUT / "vosk_ko" / name).write_bytes(ark_prefix((full / "vosk_ko" / name).read_bytes(), VOSK_UTTS))
    for p in OUT.rglob("*"):
        p.chmod(0o644 if p.is_file() else 0o755)
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"{OUT}: {total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
