#!/usr/bin/env bash
# Train a small TDNN acoustic model on toy data, following the stages of
# Kaldi's steps/nnet3/train_dnn.py, and end with a final.mdl a decoder can use:
#
#   data, lang and alignments  (a real recipe has them from GMM training)
#   init.raw -> egs (+ held-out subsets made by nnet3-subset-egs)
#   -> LDA stats -> lda.mat -> 0.raw -> 0.mdl (nnet3-am-init | nnet3-am-train-transitions)
#   -> iterations of parallel nnet3-train jobs, averaged (the first: the best job kept)
#   -> nnet3-combine of the last models -> combined.mdl
#   -> average posteriors (nnet3-compute-from-egs) -> nnet3-am-adjust-priors -> final.mdl
#   -> nnet3-am-info and nnet3-compute --use-priors on the test set.
#
# Every command runs through $train_cmd (cmd.sh; --cmd overrides it) as
# Kaldi's scripts do: "$train_cmd JOB=1:N log/x.JOB.log prog ... JOB ..." runs
# N jobs (run.pl: on this machine; slurm.pl / queue.pl: on a cluster), each
# with its own log; a failed job stops the recipe with its log named.
#
#   ./run.sh [--stage N] [--num-epochs X] [--num-jobs N] [--cmd "slurm.pl --mem 2G"]
set -euo pipefail
cd "$(dirname "$0")"
. ./cmd.sh
stage=0
num_epochs=2          # passes over the training egs (each eg used for one of its frames per pass)
num_jobs=2            # parallel nnet3-train jobs per iteration (= number of egs archives)
frames_per_eg=4
initial_effective_lrate=0.003
final_effective_lrate=0.0003
minibatch_size=64
max_param_change=2.0
max_models_combine=20
prior_subset_size=2000
while [ $# -gt 0 ]; do
  case "$1" in
    --stage) stage=$2; shift 2 ;;
    --num-epochs) num_epochs=$2; shift 2 ;;
    --num-jobs) num_jobs=$2; shift 2 ;;
    --cmd) train_cmd=$2; shift 2 ;;
    *) echo "$0: unknown option $1" >&2; exit 1 ;;
  esac
done
. ./path.sh

data=data
lang=data/lang
ali=exp/tri_ali        # what steps/align_si.sh would have written
dir=exp/tdnn
egs=$dir/egs
num_pdfs=24
mkdir -p $dir/log $dir/configs $egs
# One computation cache for all the training jobs: a directory that
# nnet3-train reads from and adds to (entries are written atomically, so jobs
# on several machines can share it on a network filesystem).
mkdir -p $dir/cache
cache_opts="--read-cache=$dir/cache --write-cache=$dir/cache"

# Background jobs (one $train_cmd per job, as train_dnn.py's
# background_command) and waiting for all of them: the first failure stops the
# recipe (the runner has already named the job's log).
pids=()
bg() { "$@" & pids+=($!); }
wait_all() {
  local failed=0 pid
  for pid in "${pids[@]}"; do wait $pid || failed=1; done
  pids=()
  if [ $failed -ne 0 ]; then echo "$0: $1 failed (see the log named above)" >&2; exit 1; fi
}

stage_start=$SECONDS
stage_done() {  # prints how long the stage took, as Kaldi's scripts log it
  echo "$0: ... $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}

if [ $stage -le 0 ]; then
  echo "$0: stage 0: toy data, lang and alignments"
  mkdir -p $data/train $data/valid $data/test
  python3 local/make_data.py --seed=1 --num-utts=120 --num-pdfs=$num_pdfs $data/train
  python3 local/make_data.py --seed=2 --num-utts=15 --num-pdfs=$num_pdfs $data/valid
  python3 local/make_data.py --seed=3 --num-utts=5 --num-pdfs=$num_pdfs $data/test
  python3 local/make_lang.py --num-pdfs=$num_pdfs $data/train $lang $ali
  stage_done "stage 0"
fi

if [ $stage -le 1 ]; then
  echo "$0: stage 1: configs; initialising the network for the preconditioning matrix"
  cp conf/init.config $dir/configs/init.config
  sed "s|@LDA_MAT@|$dir/configs/lda.mat|" conf/tdnn.config > $dir/configs/final.config
  $train_cmd $dir/log/nnet_init.log nnet3-init --srand=-2 $dir/configs/init.config $dir/init.raw
  # ref.config: the same network with a placeholder for the transform, only
  # to read the model's context (xconfig_to_configs.py's ref.config and vars).
  sed "s|matrix=@LDA_MAT@|input-dim=60 output-dim=60|" conf/tdnn.config > $dir/configs/ref.config
  nnet3-init $dir/configs/ref.config $dir/ref.raw 2> $dir/log/ref_init.log
  nnet3-info $dir/ref.raw > $dir/ref.info 2> /dev/null
  stage_done "stage 1"
fi

left_context=$(awk '/^left-context:/ {print $2}' $dir/ref.info)
right_context=$(awk '/^right-context:/ {print $2}' $dir/ref.info)

if [ $stage -le 2 ]; then
  echo "$0: stage 2: egs ($frames_per_eg frames each, context $left_context/$right_context, $num_jobs archives)"
  egs_opts="--num-pdfs=$num_pdfs --left-context=$left_context --right-context=$right_context"
  egs_opts="$egs_opts --num-frames=$frames_per_eg"
  bg $train_cmd $dir/log/get_egs.train.log nnet3-get-egs $egs_opts --srand=1 \
    ark:$data/train/feats.ark ark:$data/train/post.ark ark:$egs/train_all.egs
  bg $train_cmd $dir/log/get_egs.valid.log nnet3-get-egs $egs_opts --srand=2 \
    ark:$data/valid/feats.ark ark:$data/valid/post.ark ark:$egs/valid_all.egs
  wait_all "getting egs"
  # Held-out subsets for diagnostics and for nnet3-combine, as steps/nnet3/get_egs.sh makes
  # them, and the training archives: the egs split at random between them.
  bg $train_cmd $dir/log/subset_valid.log nnet3-subset-egs --srand=1 --n=300 \
    ark:$egs/valid_all.egs ark:$egs/valid_diagnostic.egs
  bg $train_cmd $dir/log/subset_train.log nnet3-subset-egs --srand=2 --n=300 \
    ark:$egs/train_all.egs ark:$egs/train_diagnostic.egs
  bg $train_cmd $dir/log/subset_combine.log nnet3-subset-egs --srand=3 --n=400 \
    "ark:cat $egs/valid_all.egs $egs/train_all.egs |" ark:$egs/combine.egs
  bg $train_cmd $dir/log/split_egs.log nnet3-copy-egs --random=true --srand=1 ark:$egs/train_all.egs \
    $(for n in $(seq $num_jobs); do echo ark:$egs/egs.$n.ark; done)
  wait_all "splitting egs"
  echo "$0: $(grep -o 'into [0-9]* chunks' $dir/log/get_egs.train.log | awk '{print $2}') training egs" \
       "in $num_jobs archives; held out: $(for s in valid train combine; do
         grep -o 'subset of [0-9]* out of [0-9]*' $dir/log/subset_$s.log | awk -v s=$s '{print s, $3 "/" $6}'; done | paste -sd, -)"
  stage_done "stage 2"
fi

if [ $stage -le 3 ]; then
  echo "$0: stage 3: preconditioning matrix (LDA-like transform of the spliced input)"
  $train_cmd JOB=1:$num_jobs $dir/log/get_lda_stats.JOB.log \
    nnet3-acc-lda-stats --rand-prune=4.0 $dir/init.raw "ark:nnet3-copy-egs ark:$egs/egs.JOB.ark ark:- |" \
      $dir/JOB.lda_stats
  $train_cmd $dir/log/sum_transform_stats.log \
    sum-lda-accs $dir/lda_stats $(for n in $(seq $num_jobs); do echo $dir/$n.lda_stats; done)
  rm $(for n in $(seq $num_jobs); do echo $dir/$n.lda_stats; done)
  $train_cmd $dir/log/get_transform.log nnet-get-feature-transform $dir/lda.mat $dir/lda_stats
  cp $dir/lda.mat $dir/configs/lda.mat
  stage_done "stage 3"
fi

if [ $stage -le 4 ]; then
  echo "$0: stage 4: initial acoustic model (nnet3-am-init | nnet3-am-train-transitions)"
  $train_cmd $dir/log/add_first_layer.log nnet3-init --srand=-3 $dir/configs/final.config $dir/0.raw
  $train_cmd $dir/log/init_mdl.log nnet3-am-init $ali/tree $lang/topo $dir/0.raw - \| \
    nnet3-am-train-transitions - "ark:gunzip -c $ali/ali.*.gz|" $dir/0.mdl
  grep -h "objf\|Trained" $dir/log/init_mdl.log | grep -v "^#" | sed "s|^|$0: |" | head -3 || true
  stage_done "stage 4"
fi

# The schedule of steps/libs/nnet3/train/common.py: each iteration processes
# num_jobs archives (one frame of each eg); the effective learning rate
# decays geometrically and is multiplied by the number of jobs.
num_archives_expanded=$((num_jobs * frames_per_eg))
num_archives_to_process=$(awk -v e=$num_epochs -v n=$num_archives_expanded 'BEGIN { print int(e * n) }')
num_iters=$((num_archives_to_process / num_jobs))
# get_model_combine_iters(): the last models (about half an epoch's worth) are combined.
iters_per_epoch=$((num_archives_expanded / num_jobs))
num_iters_combine=$(( iters_per_epoch / 2 + 1 < num_iters / 2 ? iters_per_epoch / 2 + 1 : num_iters / 2 ))
[ $num_iters_combine -gt $max_models_combine ] && num_iters_combine=$max_models_combine
[ $num_iters_combine -lt 1 ] && num_iters_combine=1
first_model_combine=$((num_iters - num_iters_combine + 1))

compute_prob() {  # <iter>: diagnostics on the held-out subsets, as compute_train_cv_probabilities()
  for set in valid train; do
    bg $train_cmd $dir/log/compute_prob_$set.$1.log nnet3-compute-prob $dir/$1.mdl \
      "ark,bg:nnet3-copy-egs ark:$egs/${set}_diagnostic.egs ark:- | nnet3-merge-egs --minibatch-size=1:64 ark:- ark:- |"
  done
  wait_all "diagnostics of model $1"
  echo "$0: iter $1: $(grep -o "Overall log-likelihood for 'output' is [^ ]*" $dir/log/compute_prob_valid.$1.log | awk '{print "valid logprob", $NF}')," \
       "$(grep -o "Overall accuracy for 'output' is [^ ]*" $dir/log/compute_prob_valid.$1.log | awk '{print "accuracy", $NF}')" \
       "(train: $(grep -o "Overall log-likelihood for 'output' is [^ ]*" $dir/log/compute_prob_train.$1.log | awk '{print $NF}'))"
}

if [ $stage -le 5 ]; then
  echo "$0: stage 5: training: $num_epochs epochs = $num_iters iterations x $num_jobs jobs"
  for iter in $(seq 0 $((num_iters - 1))); do
    num_archives_processed=$((iter * num_jobs))
    lrate=$(awk -v i=$initial_effective_lrate -v f=$final_effective_lrate -v p=$num_archives_processed \
                -v t=$num_archives_to_process -v j=$num_jobs 'BEGIN { printf "%.6f", j * i * exp(p / t * log(f / i)) }')
    echo "$0: Iter: $iter/$((num_iters - 1))   Jobs: $num_jobs   Epoch: $(awk -v p=$num_archives_processed \
      -v t=$num_archives_to_process -v e=$num_epochs 'BEGIN { printf "%.2f/%.1f (%.1f%% complete)", p * e / t, e, p * 100 / t }')   lr: $lrate"
    compute_prob $iter
    if [ $iter -gt 0 ]; then
      $train_cmd $dir/log/progress.$iter.log \
        nnet3-show-progress --use-gpu=no $dir/$((iter - 1)).mdl $dir/$iter.mdl
    fi
    # The first iteration uses half the minibatch and keeps the best job's model
    # instead of the average (the models are too far apart to average yet).
    mb=$minibatch_size; mpc=$max_param_change
    if [ $iter -eq 0 ]; then
      mb=$((minibatch_size / 2)); mpc=$(awk -v m=$max_param_change 'BEGIN { print m / sqrt(2) }')
    fi
    # One $train_cmd per job (the archive and frame depend on the job), in the
    # background, as train_dnn.py's train_new_models() does.
    for job in $(seq $num_jobs); do
      k=$((num_archives_processed + job - 1))
      archive=$((k % num_jobs + 1))
      frame=$(( (k / num_jobs + archive) % frames_per_eg ))
      bg $train_cmd $dir/log/train.$iter.$job.log \
        nnet3-train --print-interval=10 --max-param-change=$mpc --srand=$iter $cache_opts \
        "nnet3-copy --learning-rate=$lrate $dir/$iter.mdl - |" \
        "ark,bg:nnet3-copy-egs --frame=$frame ark:$egs/egs.$archive.ark ark:- | nnet3-shuffle-egs --buffer-size=5000 --srand=$iter ark:- ark:- | nnet3-merge-egs --minibatch-size=$mb ark:- ark:- |" \
        $dir/$((iter + 1)).$job.raw
    done
    wait_all "training iteration $iter"
    if [ $iter -eq 0 ]; then
      best=$(for job in $(seq $num_jobs); do
               echo "$job $(grep -o "Overall average objective function for 'output' is [^ ]*" \
                 $dir/log/train.$iter.$job.log | awk '{print $NF}')"; done | sort -k2 -g -r | head -1 | cut -d' ' -f1)
      $train_cmd $dir/log/select.$iter.log \
        nnet3-am-copy --set-raw-nnet=$dir/$((iter + 1)).$best.raw $dir/$iter.mdl $dir/$((iter + 1)).mdl
    else
      $train_cmd $dir/log/average.$iter.log \
        nnet3-average $(for job in $(seq $num_jobs); do echo $dir/$((iter + 1)).$job.raw; done) - \| \
        nnet3-am-copy --set-raw-nnet=- $dir/$iter.mdl $dir/$((iter + 1)).mdl
    fi
    rm $(for job in $(seq $num_jobs); do echo $dir/$((iter + 1)).$job.raw; done)
  done
  compute_prob $num_iters
  stage_done "stage 5"
fi

if [ $stage -le 6 ]; then
  # Freshest first: the batch-norm statistics are taken from the first model.
  models=$(for i in $(seq $num_iters -1 $first_model_combine); do echo $dir/$i.mdl; done)
  echo "$0: stage 6: combining the models of iterations $first_model_combine..$num_iters"
  $train_cmd $dir/log/combine.log \
    nnet3-combine --max-objective-evaluations=30 --verbose=3 $models \
    "ark,bg:nnet3-copy-egs ark:$egs/combine.egs ark:- | nnet3-merge-egs --minibatch-size=1:$minibatch_size ark:- ark:- |" \
    "| nnet3-am-copy --set-raw-nnet=- $dir/$num_iters.mdl $dir/combined.mdl"
  grep -h "Combining\|objective" $dir/log/combine.log | grep -v "^nnet3\|^#" | tail -2 | sed "s|^|$0: |"
  compute_prob combined
  stage_done "stage 6"
fi

if [ $stage -le 7 ]; then
  echo "$0: stage 7: priors from the average posterior; final.mdl"
  $train_cmd JOB=1:$num_jobs $dir/log/get_post.JOB.log \
    nnet3-copy-egs ark:$egs/egs.JOB.ark ark:- \| \
    nnet3-subset-egs --srand=JOB --n=$prior_subset_size ark:- ark:- \| \
    nnet3-merge-egs --minibatch-size=128 ark:- ark:- \| \
    nnet3-compute-from-egs --apply-exp=true $dir/combined.mdl ark:- ark:- \| \
    matrix-sum-rows ark:- ark:- \| \
    vector-sum ark:- $dir/post.combined.JOB.vec
  $train_cmd $dir/log/vector_sum.combined.log \
    vector-sum $(for n in $(seq $num_jobs); do echo $dir/post.combined.$n.vec; done) $dir/post.combined.vec
  $train_cmd $dir/log/adjust_priors.final.log \
    nnet3-am-adjust-priors $dir/combined.mdl $dir/post.combined.vec $dir/final.mdl
  grep -h "priors\|Prior" $dir/log/adjust_priors.final.log | grep -v "^nnet3\|^#" | sed "s|^|$0: |" || true
  stage_done "stage 7"
fi

if [ $stage -le 8 ]; then
  echo "$0: stage 8: the final model: nnet3-am-info, and nnet3-compute --use-priors on the test set"
  nnet3-am-info $dir/final.mdl > $dir/final.info 2> $dir/log/am_info.log
  grep "^num-pdfs\|^left-context\|^right-context\|^prior dimension\|^# Nnet info\|^num-parameters" \
    $dir/final.info | sed "s|^|$0:   |"
  $train_cmd $dir/log/compute.log \
    nnet3-compute --use-priors=true $dir/final.mdl ark:$data/test/feats.ark ark,t:$dir/test_loglikes.txt
  echo "$0: wrote $(grep -c '\[' $dir/test_loglikes.txt) utterances of scaled log-likelihoods" \
       "(log-posteriors minus log-priors) to $dir/test_loglikes.txt"
  stage_done "stage 8"
fi
if [ $stage -le 9 ]; then
  echo "$0: stage 9: a picture of the training progress (objective and accuracy per iteration)"
  nnet3-plot-progress $dir $dir/progress.png 2> $dir/log/plot_progress.log
  stage_done "stage 9"
fi
echo "$0: done in $SECONDS s; models and logs in $dir/ (log/ has each command's Kaldi-style log)"
echo "$0: training progress: $dir/progress.png; logs: $dir/log/"
