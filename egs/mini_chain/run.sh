#!/usr/bin/env bash
# Train a small chain (LF-MMI) TDNN on toy data, following the stages of Kaldi's
# steps/nnet3/chain/train.py (after the GMM system, tree building and alignment
# that a real recipe does first):
#
#   toy data: topo, left-biphone tree, 0.trans_mdl, phone alignments, features
#   -> chain-est-phone-lm -> phone_lm.fst
#   -> chain-make-den-fst -> den.fst, normalization.fst
#   -> chain-get-supervision (frame subsampling 3) -> supervision
#   -> configs/final.config -> nnet3-init -> 0.raw
#   -> nnet3-chain-get-egs (train, valid), the train egs split into archives
#   -> iterations: parallel nnet3-chain-train jobs, nnet3-average,
#      nnet3-chain-compute-prob on held-out egs (the objective per iteration)
#   -> nnet3-chain-combine of the last models -> final.raw
#   -> nnet3-compute --frame-subsampling-factor=3 on the test features.
#
# Every command runs through $train_cmd (cmd.sh; --cmd overrides it), as in
# Kaldi's scripts.
#
#   ./run.sh [--stage N] [--num-iters N] [--num-jobs N] [--cmd "slurm.pl --mem 2G"]
set -euo pipefail
cd "$(dirname "$0")"
. ./cmd.sh
stage=0
num_iters=6           # training iterations (each: num_jobs jobs over their archives, averaged)
num_jobs=2            # parallel nnet3-chain-train jobs per iteration (= number of egs archives)
frames_per_eg=30      # chunk length in input frames (10 output frames at subsampling 3)
frame_subsampling_factor=3
learning_rate=0.002   # effective learning rate (multiplied by num_jobs, as train.py does)
minibatch_size=32
chain_opts="--l2-regularize=5e-05 --leaky-hmm-coefficient=0.1 --xent-regularize=0.1 --out-of-range-regularize=0.01"
num_models_combine=3
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --num-iters) num_iters=$2; shift 2 ;;
    --num-jobs) num_jobs=$2; shift 2 ;;
    --cmd) train_cmd=$2; shift 2 ;;
    *) echo "$0: unknown option $1" >&2; exit 1 ;;
  esac
done
. ./path.sh
echo "$0: using the binaries in $(dirname "$(command -v nnet3-chain-train)")"

data=data
lang=data/lang
dir=exp/chain
egs=$dir/egs
mkdir -p $dir/log $dir/configs $egs $dir/cache
cache_opts="--read-cache=$dir/cache --write-cache=$dir/cache"

pids=()
bg() { "$@" & pids+=($!); }
wait_all() {
  local failed=0 pid
  for pid in "${pids[@]}"; do wait $pid || failed=1; done
  pids=()
  if [ $failed -ne 0 ]; then echo "$0: $1 failed (see the log named above)" >&2; exit 1; fi
}

if [ $stage -le 0 ]; then
  echo "$0: stage 0: toy data (topo, tree, transition model, phone alignments, features)"
  python3 local/make_data.py --seed=1 --num-utts=train=80,valid=10,test=3 $data
  cp $lang/tree $lang/0.trans_mdl $dir/
fi

if [ $stage -le 1 ]; then
  echo "$0: stage 1: phone LM and the denominator FST"
  $train_cmd $dir/log/make_phone_lm.log \
    chain-est-phone-lm --num-extra-lm-states=200 ark:$data/train/phones.txt $dir/phone_lm.fst
  $train_cmd $dir/log/make_den_fst.log \
    chain-make-den-fst $dir/tree $dir/0.trans_mdl $dir/phone_lm.fst $dir/den.fst $dir/normalization.fst
  grep -h "Created phone language model\|Number of states is" $dir/log/make_phone_lm.log \
    $dir/log/make_den_fst.log | sed "s|^.*) |$0: |"
fi

if [ $stage -le 2 ]; then
  echo "$0: stage 2: supervision (frame-subsampling-factor $frame_subsampling_factor)"
  for set in train valid; do
    bg $train_cmd $dir/log/get_supervision.$set.log \
      chain-get-supervision --frame-subsampling-factor=$frame_subsampling_factor \
        --left-tolerance=5 --right-tolerance=5 $dir/tree $dir/0.trans_mdl \
        ark:$data/$set/phone_lengths.txt ark:$dir/supervision.$set.ark
  done
  wait_all "chain-get-supervision"
fi

num_pdfs=$(python3 -c "
import sys, os; sys.path.insert(0, os.path.join(os.environ['PYNNET3_ROOT'], 'src'))
from pynnet3.nnet.transition_model import read_transition_model
print(read_transition_model('$dir/0.trans_mdl').num_pdfs())")
feat_dim=$(python3 -c "
import sys, os; sys.path.insert(0, os.path.join(os.environ['PYNNET3_ROOT'], 'src'))
from pynnet3.io.table import SequentialTableReader, MATRIX_HOLDER
for _k, m in SequentialTableReader('ark:$data/train/feats.ark', MATRIX_HOLDER):
    print(m.shape[1]); break")

if [ $stage -le 3 ]; then
  echo "$0: stage 3: network ($feat_dim-dim input, $num_pdfs pdfs) -> 0.raw"
  sed -e "s/@FEAT_DIM@/$feat_dim/g" -e "s/@SPLICED_DIM@/$((3 * feat_dim))/g" \
      -e "s/@NUM_PDFS@/$num_pdfs/g" conf/final.config > $dir/configs/final.config
  $train_cmd $dir/log/init.log nnet3-init --srand=1 $dir/configs/final.config $dir/0.raw
  nnet3-info $dir/0.raw > $dir/0.info 2> /dev/null
fi

left_context=$(awk '/^left-context:/ {print $2}' $dir/0.info)
right_context=$(awk '/^right-context:/ {print $2}' $dir/0.info)

if [ $stage -le 4 ]; then
  echo "$0: stage 4: chain egs ($frames_per_eg frames, context $left_context/$right_context, $num_jobs archives)"
  egs_opts="--left-context=$left_context --right-context=$right_context --num-frames=$frames_per_eg"
  egs_opts="$egs_opts --frame-subsampling-factor=$frame_subsampling_factor --compress=false"
  for set in train valid; do
    bg $train_cmd $dir/log/get_egs.$set.log nnet3-chain-get-egs $egs_opts --srand=1 \
      $dir/normalization.fst ark:$data/$set/feats.ark ark:$dir/supervision.$set.ark ark:$egs/$set.cegs
  done
  wait_all "nnet3-chain-get-egs"
  # The training archives: the egs dealt out at random; the held-out egs merged
  # once for nnet3-chain-compute-prob; a random subset of the training egs for
  # nnet3-chain-combine (which also recomputes the batch-norm statistics on
  # them), as steps/nnet3/chain/get_egs.sh's combine.cegs.
  bg $train_cmd $dir/log/split_egs.log nnet3-chain-copy-egs --random=true --srand=1 ark:$egs/train.cegs \
    $(for n in $(seq $num_jobs); do echo ark:$egs/cegs.$n.ark; done)
  bg $train_cmd $dir/log/merge_valid.log nnet3-chain-merge-egs --minibatch-size=$minibatch_size \
    ark:$egs/valid.cegs ark:$egs/valid_merged.cegs
  bg $train_cmd $dir/log/combine_egs.log nnet3-chain-subset-egs --srand=1 --n=160 ark:$egs/train.cegs ark:- \| \
    nnet3-chain-merge-egs --minibatch-size=$minibatch_size ark:- ark:$egs/combine.cegs
  wait_all "splitting / merging egs"
fi

compute_prob() {  # <iter>: the objective of model <iter> on the held-out egs
  $train_cmd $dir/log/compute_prob_valid.$1.log nnet3-chain-compute-prob $chain_opts \
    $dir/$1.raw $dir/den.fst ark:$egs/valid_merged.cegs
  echo "$0: iter $1: valid $(grep -o "Overall log-probability for 'output' is .* per frame" \
    $dir/log/compute_prob_valid.$1.log | awk '{print "objf", $(NF-2)}'), $(grep -o \
    "Overall log-probability for 'output-xent' is [^ ]* per frame" \
    $dir/log/compute_prob_valid.$1.log | awk '{print "xent", $(NF-2)}')"
}

if [ $stage -le 5 ]; then
  echo "$0: stage 5: training: $num_iters iterations x $num_jobs jobs"
  lrate=$(awk -v l=$learning_rate -v j=$num_jobs 'BEGIN { printf "%.6f", l * j }')
  for iter in $(seq 0 $((num_iters - 1))); do
    compute_prob $iter
    for job in $(seq $num_jobs); do
      archive=$(( (iter * num_jobs + job - 1) % num_jobs + 1 ))
      bg $train_cmd $dir/log/train.$iter.$job.log \
        nnet3-chain-train --use-gpu=no $chain_opts --max-param-change=2.0 --srand=$iter $cache_opts \
          "nnet3-copy --learning-rate=$lrate $dir/$iter.raw - |" $dir/den.fst \
          "ark,bg:nnet3-chain-shuffle-egs --srand=$iter ark:$egs/cegs.$archive.ark ark:- | nnet3-chain-merge-egs --minibatch-size=$minibatch_size ark:- ark:- |" \
          $dir/$iter.$job.raw
    done
    wait_all "training iteration $iter"
    $train_cmd $dir/log/average.$iter.log nnet3-average \
      $(for job in $(seq $num_jobs); do echo $dir/$iter.$job.raw; done) $dir/$((iter + 1)).raw
    rm $(for job in $(seq $num_jobs); do echo $dir/$iter.$job.raw; done)
  done
  compute_prob $num_iters
fi

if [ $stage -le 6 ]; then
  first=$((num_iters - num_models_combine + 1)); [ $first -lt 1 ] && first=1
  echo "$0: stage 6: nnet3-chain-combine of models $first..$num_iters -> final.raw"
  $train_cmd $dir/log/combine.log nnet3-chain-combine --use-gpu=no $chain_opts $dir/den.fst \
    $(for i in $(seq $first $num_iters); do echo $dir/$i.raw; done) ark:$egs/combine.cegs $dir/final.raw
  compute_prob final
fi

if [ $stage -le 7 ]; then
  echo "$0: stage 7: nnet3-compute on the test features (one output row per 3 frames)"
  $train_cmd $dir/log/compute_test.log nnet3-compute --frame-subsampling-factor=$frame_subsampling_factor \
    $dir/final.raw ark:$data/test/feats.ark ark,t:$dir/test_output.txt
  python3 - $dir/test_output.txt $data/test/feats.ark <<'PY'
import sys, os
sys.path.insert(0, os.path.join(os.environ["PYNNET3_ROOT"], "src"))
from pynnet3.io.table import SequentialTableReader, MATRIX_HOLDER
outs = dict(SequentialTableReader(f"ark:{sys.argv[1]}", MATRIX_HOLDER))
for key, feats in SequentialTableReader(f"ark:{sys.argv[2]}", MATRIX_HOLDER):
    print(f"run.sh: {key}: {feats.shape[0]} frames -> output {outs[key].shape[0]} x {outs[key].shape[1]}")
PY
fi
echo "$0: done; the model is $dir/final.raw"
