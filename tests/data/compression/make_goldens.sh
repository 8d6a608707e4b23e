#!/usr/bin/env bash
# Remakes Kaldi's goldens of this folder (see tests/data/README.md) with a
# real Kaldi build: KALDI_ROOT=/path/to/kaldi bash make_goldens.sh
# feats.ark and post.ark are written by make_inputs.py (pynnet3 not needed).
set -euo pipefail
cd "$(dirname "$0")"
python3 make_inputs.py
bin="$KALDI_ROOT/src/nnet3bin/nnet3-get-egs"
"$bin" --num-pdfs=10 --left-context=2 --right-context=2 --num-frames=8 --compress=true \
  ark:feats.ark ark:post.ark ark:kaldi_egs_12rows.ark
"$bin" --num-pdfs=10 --left-context=0 --right-context=0 --num-frames=4 --compress=true \
  ark:feats.ark ark:post.ark ark:kaldi_egs_4rows.ark
