#!/usr/bin/env bash
# Train a small TDNN on toy data the way Kaldi's nnet3 recipes do:
# data -> nnet3-init -> nnet3-get-egs -> shuffle/merge -> nnet3-train jobs
# -> nnet3-average -> nnet3-compute-prob -> nnet3-compute.
#   ./run.sh [--stage N] [--num-iters N]
set -euo pipefail
cd "$(dirname "$0")"
stage=0
num_iters=4
num_jobs=2
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --num-iters) num_iters=$2; shift 2 ;;
    *) echo "$0: unknown option $1" >&2; exit 1 ;;
  esac
done
. ./path.sh

data=data
dir=exp/tdnn
mkdir -p $data/train $data/valid $data/test $dir/egs $dir/log

if [ $stage -le 0 ]; then
  echo "$0: stage 0: making toy data"
  python3 local/make_data.py --seed=1 --num-utts=60 $data/train
  python3 local/make_data.py --seed=2 --num-utts=10 $data/valid
  python3 local/make_data.py --seed=3 --num-utts=5 $data/test
fi

if [ $stage -le 1 ]; then
  echo "$0: stage 1: initialising the network"
  nnet3-init --srand=1 conf/tdnn.config $dir/0.raw 2> $dir/log/init.log
  nnet3-info $dir/0.raw > $dir/0.info 2> $dir/log/info.log
  head -n 4 $dir/0.info
fi

left_context=$(awk '/^left-context:/ {print $2}' $dir/0.info)
right_context=$(awk '/^right-context:/ {print $2}' $dir/0.info)

if [ $stage -le 2 ]; then
  echo "$0: stage 2: making egs (context $left_context/$right_context)"
  for set in train valid; do
    nnet3-get-egs --num-pdfs=24 --left-context=$left_context --right-context=$right_context \
      --num-frames=8 --srand=1 ark:$data/$set/feats.ark ark:$data/$set/post.ark \
      ark:$dir/egs/$set.ark 2> $dir/log/get_egs.$set.log
  done
  # Split the training egs between the jobs at random, as Kaldi's scripts do.
  nnet3-copy-egs --random=true --srand=1 ark:$dir/egs/train.ark \
    $(for job in $(seq $num_jobs); do echo ark:$dir/egs/train.$job.ark; done) \
    2> $dir/log/copy_egs.log
  nnet3-merge-egs --minibatch-size=64 ark:$dir/egs/valid.ark ark:$dir/egs/valid_merged.ark \
    2> $dir/log/merge_valid.log
fi

if [ $stage -le 3 ]; then
  echo "$0: stage 3: training ($num_iters iterations x $num_jobs jobs, averaged)"
  for iter in $(seq 0 $((num_iters - 1))); do
    for job in $(seq $num_jobs); do
      nnet3-train --srand=$((iter * num_jobs + job)) --max-param-change=2.0 \
        $dir/$iter.raw \
        "ark:nnet3-shuffle-egs --srand=$((iter + job)) ark:$dir/egs/train.$job.ark ark:- | nnet3-merge-egs --minibatch-size=32 ark:- ark:- |" \
        $dir/$((iter + 1)).$job.raw 2> $dir/log/train.$iter.$job.log &
    done
    wait
    nnet3-average $(for job in $(seq $num_jobs); do echo $dir/$((iter + 1)).$job.raw; done) \
      $dir/$((iter + 1)).raw 2> $dir/log/average.$iter.log
    nnet3-compute-prob $dir/$((iter + 1)).raw ark:$dir/egs/valid_merged.ark \
      2> $dir/log/compute_prob.$((iter + 1)).log
    grep -o "Overall \(log-likelihood\|accuracy\) for 'output' is [^ ]*" \
      $dir/log/compute_prob.$((iter + 1)).log | sed "s|^|$0: iter $((iter + 1)): valid: |"
  done
  cp $dir/$num_iters.raw $dir/final.raw
fi

if [ $stage -le 4 ]; then
  echo "$0: stage 4: nnet3-compute on the test set"
  nnet3-compute $dir/final.raw ark:$data/test/feats.ark ark,t:$dir/test_logprobs.txt \
    2> $dir/log/compute.log
  echo "$0: wrote $(grep -c '\[' $dir/test_logprobs.txt) utterances of log-posteriors to $dir/test_logprobs.txt"
fi
echo "$0: done; models and logs in $dir/"
