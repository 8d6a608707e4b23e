"""``run.pl``: Kaldi's local job runner (``utils/parallel/run.pl``).

``run.pl [options] [JOB=1:N] <log-file> <command> ...`` runs the command
once per job id on this machine, at most ``--max-jobs-run`` at a time (default:
the number of processors, raised to N when N is less than 1.4 times that; with
``--gpu`` the number of GPUs ``nvidia-smi -L`` lists), with ``JOB`` replaced by
the job id in the command and the log file name.  Each log starts with
``# <command>``, ``# Started at <date>`` and ``#`` and ends with
``# Accounting: time=<s> threads=1`` and ``# Ended (code <n>) at <date>,
elapsed time <s> seconds``.  The exit status is 0 when every job succeeded,
else 1 with ``run.pl: <k> / <N> failed, log is in <log with * for JOB>``.

Options that only mean something to a queue (``--mem 2G``, ``--num-threads 4``,
``-l ...``, ``-q ...``, ``-pe smp 4``, ``-V``, ``-sync y``, ``--config f``)
are accepted and ignored, as in Kaldi, so one ``cmd.sh`` line serves every
runner.  ``--pick failed|incomplete`` re-runs only the jobs whose log does not
end in ``# Ended (code 0)``.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from .common import JobRange, RangeError, kaldi_date, parse_job_range, quote_command, warn

__all__ = ["main", "run_jobs"]

PROG = "run.pl"
_DIE = 255   # what Perl's die exits with


class _Die(Exception):
    pass


def _max_jobs_default(using_gpu: bool, num_jobs: int) -> int:
    if using_gpu:
        try:
            out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
            n = len(out.splitlines())
        except OSError:
            n = 0
        if n == 0:
            warn(f"{PROG}: Warning: failed to detect number of GPUs from nvidia-smi, using 1")
            n = 1
        return n
    n = os.cpu_count() or 10
    # A few more jobs than processors: run them all at once rather than leave
    # a small tail of jobs for a second round (Kaldi's rule).
    if n < num_jobs < 1.4 * n:
        n = num_jobs
    return n


def _picked(logfile: str, pick: str) -> int | None:
    """None when the job is to run; else the status to report without
    running it (Kaldi's pick_or_exit)."""
    if pick == "all":
        return None
    try:
        with open(logfile, errors="replace") as f:
            ended = [line for line in f if re.match(r"# Ended \(code ", line)]
    except OSError:
        return None          # never run
    if not ended:
        return None          # incomplete
    if re.match(r"# Ended \(code 0\)", ended[-1]):
        return 0
    if pick == "failed":
        return None
    return 1                 # failed, and only incomplete jobs are picked


def _run_one(cmd: str, logfile: str, pick: str) -> int:
    """One job: header, the command through bash with stdout and stderr
    appended to the log, footer.  0 on success, else 1."""
    skipped = _picked(logfile, pick)
    if skipped is not None:
        return skipped
    d = os.path.dirname(logfile)
    if d:
        os.makedirs(d, exist_ok=True)
    try:
        with open(logfile, "w") as f:
            f.write(f"# {cmd}\n# Started at {kaldi_date()}\n#\n")
    except OSError:
        warn(f"{PROG}: Error opening log file {logfile}")
        return 1
    start = int(time.time())
    # The script goes to bash on its stdin (as run.pl's open(B, "|bash")), so
    # the command reads end-of-file on stdin rather than the caller's terminal.
    rc = subprocess.run(["bash"], input=f"( {cmd}) 2>>{logfile} >> {logfile}".encode()).returncode
    code = f"code 0; signal {-rc}" if rc < 0 else f"code {rc}"
    end = int(time.time())
    with open(logfile, "a") as f:
        f.write(f"# Accounting: time={end - start} threads=1\n"
                f"# Ended ({code}) at {kaldi_date()}, elapsed time {end - start} seconds\n")
    return 0 if rc == 0 else 1


def run_jobs(jobs: JobRange, logfile: str, cmd: str, max_jobs_run: int,
             pick: str = "all") -> dict[int, int]:
    """Runs the jobs, at most ``max_jobs_run`` at a time; {job id: 0 or 1}."""
    with ThreadPoolExecutor(max_workers=max_jobs_run) as pool:
        futures = {j: pool.submit(_run_one, jobs.substitute(cmd, j), jobs.substitute(logfile, j),
                                  pick) for j in jobs.ids()}
        return {j: f.result() for j, f in futures.items()}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except (_Die, RangeError) as e:
        warn(str(e))
        return _DIE


def _main(args: list[str]) -> int:
    if len(args) < 2:
        raise _Die(f"usage: {PROG} log-file command-line arguments...")
    max_jobs_run = -1.0
    using_gpu = False
    pick = "all"
    jobs = JobRange()
    for _ in range(2):   # a JOB=1:N may come before or after the options
        while len(args) >= 2 and args[0].startswith("-"):
            switch = args.pop(0)
            if switch == "-V":
                continue
            if switch in ("--max-jobs-run", "-tc"):
                value = args.pop(0)
                try:
                    n = float(value)
                except ValueError:
                    n = 0.0
                if max_jobs_run <= 0 or n < max_jobs_run:   # the smallest one given wins
                    max_jobs_run = n
                if not max_jobs_run > 0:
                    raise _Die(f"{PROG}: invalid option --max-jobs-run {value}")
                continue
            argument = args.pop(0)
            if argument.startswith("--"):
                warn(f"{PROG}: WARNING: suspicious argument '{argument}' to {switch}; "
                     "starts with '-'")
            if switch == "-pe" and args:      # e.g. -pe smp 5
                args.pop(0)
            elif switch == "--gpu":
                using_gpu = argument not in ("", "0")
            elif switch == "--pick":
                if argument in ("all", "failed", "incomplete"):
                    pick = argument
                else:
                    warn(f"{PROG}: ERROR: --pick argument must be one of 'all', 'failed' or "
                         "'incomplete'")
            # everything else (--mem, --num-threads, --config, -q, -l, -sync) is for a queue
        if args:
            r = parse_job_range(args[0], PROG)
            if r is not None:
                jobs = r
                args.pop(0)
    if len(args) < 2:
        raise _Die(f"usage: {PROG} log-file command-line arguments...")
    if max_jobs_run == -1.0:
        n_jobs = _max_jobs_default(using_gpu, jobs.count)
    else:
        n_jobs = max(1, int(max_jobs_run))
    logfile = args.pop(0)
    if jobs.name is not None and jobs.name not in logfile and jobs.end > jobs.start:
        warn(f"{PROG}: you are trying to run a parallel job but you are putting the output "
             f"into just one log file ({logfile})")
        return 1
    cmd = quote_command(args)
    status = run_jobs(jobs, logfile, cmd, n_jobs, pick)
    failed = sum(1 for s in status.values() if s != 0)
    if failed == 0:
        return 0
    if jobs.count == 1:
        if jobs.name is not None:
            logfile = logfile.replace(jobs.name, str(jobs.start), 1)
        warn(f"{PROG}: job failed, log is in {logfile}")
        if "JOB" in logfile:
            warn(f"{PROG}: probably you forgot to put JOB=1:$nj in your script.")
    else:
        warn(f"{PROG}: {failed} / {jobs.count} failed, log is in "
             f"{logfile.replace(jobs.name or 'JOB', '*')}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
