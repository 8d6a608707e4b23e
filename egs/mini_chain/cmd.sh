# How the recipe runs its jobs, as in Kaldi's cmd.sh.  Each stage calls
#   $train_cmd [JOB=1:N] <log-file> <command> ...
# and the command named here decides where the jobs run:
#   run.pl    on this machine, at most --max-jobs-run at a time (the default);
#   queue.pl  through GridEngine's qsub (options mapped by conf/queue.conf);
#   slurm.pl  through Slurm's sbatch (options mapped by conf/slurm.conf).
# All three are installed with pynnet3 (and are in bin/ for a checkout).
# With a queue, the experiment directory (exp/) must be on a filesystem that
# every node sees; the jobs share one computation cache in exp/chain/cache.
# Options a runner does not use (run.pl and --mem) are ignored, so one line
# can be switched between runners.  See docs/running-at-scale.md.

export train_cmd="run.pl --mem 2G"
# export train_cmd="queue.pl --mem 2G"
# export train_cmd="slurm.pl --mem 2G"
