"""Kaldi's job-dispatch commands (``utils/run.pl``, ``utils/queue.pl``,
``utils/slurm.pl``), installed with the package under Kaldi's names so that a
Kaldi ``cmd.sh`` (``export train_cmd="run.pl --mem 2G"``) works unchanged:

    run.pl   [options] [JOB=1:N] <log-file> <command> ...   jobs on this machine
    queue.pl [options] [JOB=1:N] <log-file> <command> ...   GridEngine (qsub -t)
    slurm.pl [options] [JOB=1:N] <log-file> <command> ...   Slurm (sbatch --array)

``DISPATCHERS`` maps each console script to its entry point; ``pyproject.toml``
and ``bin/`` list them beside the nnet3 binaries of :data:`pynnet3.cli.BINARIES`.
These are top-level tools: they import nothing of the numerical layers.
"""
DISPATCHERS = {
    "run.pl": "pynnet3.dispatch.local:main",
    "queue.pl": "pynnet3.dispatch.queue:queue_main",
    "slurm.pl": "pynnet3.dispatch.queue:slurm_main",
}
