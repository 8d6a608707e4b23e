#!/usr/bin/env bash
# Initialise a small TDNN with nnet3-init, print it with nnet3-info, and
# round-trip it through the text format with nnet3-copy.
#   ./run.sh [--stage N]
set -euo pipefail
cd "$(dirname "$0")"
stage=0
if [ "${1:-}" = "--stage" ]; then stage=$2; fi
. ./path.sh

dir=exp/mini_tdnn
mkdir -p $dir

if [ $stage -le 0 ]; then
  echo "$0: stage 0: initialising the network"
  nnet3-init --srand=1 conf/tdnn.config $dir/0.raw
fi

if [ $stage -le 1 ]; then
  echo "$0: stage 1: nnet3-info"
  nnet3-info $dir/0.raw | tee $dir/0.info | head -n 20
  echo "... ($(wc -l < $dir/0.info) lines in $dir/0.info)"
fi

if [ $stage -le 2 ]; then
  echo "$0: stage 2: binary -> text -> binary round trip"
  nnet3-copy --binary=false $dir/0.raw $dir/0.txt.raw
  nnet3-copy $dir/0.txt.raw $dir/0.copy.raw
  # Text stores 7 significant digits, so compare what nnet3-info reports.
  if nnet3-info $dir/0.copy.raw | cmp -s - $dir/0.info; then
    echo "$0: nnet3-info is unchanged by a text round trip"
  else
    echo "$0: ERROR: the text round trip changed the model" >&2; exit 1
  fi
fi
echo "$0: done; see $dir/"
