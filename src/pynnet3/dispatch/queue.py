"""``queue.pl`` (GridEngine) and ``slurm.pl`` (Slurm): Kaldi's queue runners
(``utils/parallel/queue.pl``, ``utils/parallel/slurm.pl``).

Same command line as ``run.pl``; the jobs go to the queue as one array job
(``qsub -t a:b`` / ``sbatch --array a-b[%max]``), each task writing the log
that ``JOB`` names.  The runner writes a job script to ``<logdir>/q/<name>.sh``
(``log/`` itself is replaced by ``q/``: ``exp/foo/log/train.JOB.log`` ->
``exp/foo/q/train.sh``, with the queue's own output in ``exp/foo/q/train.log``),
submits it, waits until every task has touched its sync file
(``q/[sync/]done.<pid>.<task>``; the queue is asked every tenth poll whether the
job still exists, so a job killed by the queue is reported instead of waited
for), then reads each task's status from the last line of its log
(``# Finished at <date> with status <n>``).  Exit status 0 when all tasks
succeeded, else 1 with ``<prog>: <k> / <N> failed, log is in <log with * for JOB>``.

Options.  ``--config <file>`` (default ``conf/queue.conf`` / ``conf/slurm.conf``,
or the built-in default below when that file does not exist) maps Kaldi's
generic options to the queue's: ``--mem 4G``, ``--num-threads 8``, ``--gpu 1``,
``--time 4:00:00``, ``--max-jobs-run 10`` and any ``--name value`` the config
file describes, with lines like::

    command sbatch --export=PATH --ntasks-per-node=1
    option mem=* --mem-per-cpu $0          # --mem X   -> --mem-per-cpu X
    option mem=0                           # --mem 0   -> nothing
    option gpu=* -p gpu --gres=gpu:$0      # $0 is the value given
    default gpu=0                          # as if --gpu 0 were given
    option gpu=0                           # ... which adds nothing

Any other ``-x value`` (``-q all.q``, ``-l h_rt=1:0:0``) is passed to the
queue as it is; ``-sync y`` makes the runner rely on ``qsub``'s own waiting.

Differences from Kaldi's scripts: ``./path.sh`` is sourced by the job script
only when it exists (a pip-installed pynnet3 needs none); the pause after
creating the ``q/`` directory (5 s in Kaldi, for NFS attribute caches) can be
set with ``$PYNNET3_QUEUE_DIR_SLEEP`` (seconds); a job that vanished from the
queue is looked for again for about 10 s (Kaldi: about 80 s) before it is
reported; ``squeue -h -j <id>`` printing nothing also counts as vanished (a
finished job stays in ``squeue -j`` for MinJobAge seconds, printing nothing).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .common import JobRange, RangeError, parse_job_range, quote_command, warn

__all__ = ["QueueSystem", "GRID_ENGINE", "SLURM", "queue_main", "slurm_main", "main"]

_DIE = 255


class _Die(Exception):
    pass


class _Exit(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


@dataclass(frozen=True)
class QueueSystem:
    """What differs between queue.pl and slurm.pl."""
    prog: str
    config_path: str
    default_config: str
    task_var: str               # the array task index in the job's environment
    option_passes: int          # how often JOB=1:N may alternate with options
    sync_subdir: str            # "sync/" (queue.pl) or "" (slurm.pl)
    job_id_re: str              # the job id in the submit command's output
    status_cmd: str             # + job id: non-zero status (or no output) = job gone
    cancel_cmd: str
    name: str                   # the queue's name in messages
    extra_header: str = ""      # more lines of the log header
    extra_setup: str = ""       # lines after the header
    accounting_times: bool = False
    submit_retry_re: str | None = None
    usage_note: str = field(default="qstat")

    def array_opt(self, jobs: JobRange, max_jobs_run: str | None) -> str:
        if self.prog == "slurm.pl":
            suffix = f"%{max_jobs_run}" if max_jobs_run else ""
            return f"--array {jobs.start}-{jobs.end}{suffix}"
        return f"-t {jobs.start}:{jobs.end}"

    def submit_cmd(self, command: str, opts: str, qlog: str, array_opt: str, script: str) -> str:
        if self.prog == "slurm.pl":
            return (f"{command} {opts} --open-mode=append -e {qlog} -o {qlog} {array_opt} "
                    f"{script} >>{qlog} 2>&1")
        return f"{command}-o {qlog} {opts} {array_opt} {script} >>{qlog} 2>&1"


GRID_ENGINE = QueueSystem(
    prog="queue.pl", config_path="conf/queue.conf",
    default_config="""\
# Default configuration
command qsub -v PATH -cwd -S /bin/bash -j y -l arch=*64*
option mem=* -l mem_free=$0,ram_free=$0
option mem=0          # Do not add anything to qsub_opts
option num_threads=* -pe smp $0
option num_threads=1  # Do not add anything to qsub_opts
option max_jobs_run=* -tc $0
default gpu=0
option gpu=0
option gpu=* -l gpu=$0 -q '*.q'
""",
    task_var="SGE_TASK_ID", option_passes=2, sync_subdir="sync/",
    job_id_re=r"Your job\S* (\d+)[. ].+ has been submitted",
    status_cmd="qstat -j", cancel_cmd="qdel", name="SGE",
    submit_retry_re=r"gdi request|qmaster")

SLURM = QueueSystem(
    prog="slurm.pl", config_path="conf/slurm.conf",
    default_config="""\
# Default configuration
command sbatch --export=PATH  --ntasks-per-node=1
option time=* --time $0
option mem=* --mem-per-cpu $0
option mem=0          # Do not add anything to qsub_opts
option num_threads=* --cpus-per-task $0 --ntasks-per-node=1
option num_threads=1 --cpus-per-task 1  --ntasks-per-node=1 # Do not add anything to qsub_opts
default gpu=0
option gpu=0 -p shared
option gpu=* -p gpu --gres=gpu:$0 --time 4:0:0  # this has to be figured out
""",
    task_var="SLURM_ARRAY_TASK_ID", option_passes=3, sync_subdir="",
    job_id_re=r"Submitted batch job (\d+)",
    status_cmd="squeue -h -j", cancel_cmd="scancel", name="SLURM",
    extra_header='  set | grep SLURM | while read line; do echo "# $line"; done\n',
    extra_setup=('if [ "$CUDA_VISIBLE_DEVICES" == "NoDevFiles" ]; then\n'
                 '  ( echo CUDA_VISIBLE_DEVICES set to NoDevFiles, unsetting it... \n'
                 '  )>>{log}\n'
                 '  unset CUDA_VISIBLE_DEVICES\n'
                 'fi\n'),
    accounting_times=True, usage_note="squeue")


def _usage(q: QueueSystem) -> str:
    p = q.prog
    return (f"Usage: {p} [options] [JOB=1:n] log-file command-line arguments...\n"
            f"e.g.: {p} foo.log echo baz\n"
            " (which will echo \"baz\", with stdout and stderr directed to foo.log)\n"
            f"or: {p} -q all.q@xyz foo.log echo bar | sed s/bar/baz/ \n"
            " (which is an example of using a pipe; you can provide other escaped bash constructs)\n"
            f"or: {p} -q all.q@qyz JOB=1:10 foo.JOB.log echo JOB \n"
            " (which illustrates the mechanism to submit parallel jobs; note, you can use \n"
            "  another string other than JOB)\n"
            "Note: if you pass the \"-sync y\" option to qsub, this script will take note\n"
            f"and change its behavior.  Otherwise it uses {q.usage_note} to work out when the job "
            "finished\n"
            "Options:\n"
            f"  --config <config-file> (default: {q.config_path})\n"
            "  --mem <mem-requirement> (e.g. --mem 2G, --mem 500M, \n"
            "                           also support K and numbers mean bytes)\n"
            "  --num-threads <num-threads> (default: 1)\n"
            "  --max-jobs-run <num-jobs>\n"
            "  --gpu <0|1> (default: 0)\n")


def _read_config(q: QueueSystem, cli: dict[str, str], array: bool) -> tuple[str, str]:
    """(submit command, queue options) from the config file and the options."""
    path = cli.get("config", q.config_path)
    try:
        with open(path) as f:
            text = f.read()
        opened = True
    except OSError:
        if "config" in cli:
            warn(f"Could not open config file {path}")
            raise _Exit(1)
        text, path, opened = q.default_config, "Default config", False
    command = None
    with_value: dict[str, str] = {}            # option=* lines, $0 replaced
    fixed: dict[tuple[str, str], str] = {}     # option=value lines
    for line in text.splitlines():
        s = re.sub(r"\s*#.*", "", line)
        if s == "":
            continue
        m = re.match(r"^command (.+)", s)
        if m:
            command = m.group(1) + " "
            continue
        m = re.match(r"^option ([^=]+)=\* (.+)$", s)
        if m:
            opt, arg = m.groups()
            if "$0" not in arg:
                warn(f"Warning: the line '{line}' in config file ({path}) does not substitution "
                     "variable $0")
            if opt in cli:
                with_value[opt] = arg.replace("$0", cli[opt])
            continue
        m = re.match(r"^option ([^=]+)=(\S+)\s?(.*)$", s)
        if m:
            opt, value, arg = m.groups()
            if opt in cli:
                fixed[(opt, value)] = arg
            continue
        m = re.match(r"^default (\S+)=(\S+)", s)
        if m:
            cli.setdefault(m.group(1), m.group(2))
            continue
        warn(f"{q.prog}: unable to parse line '{line}' in config file ({path})")
        raise _Exit(1)
    if command is None:
        warn(f"{q.prog}: config file ({path}) does not contain the line \"command .*\"")
        raise _Exit(1)
    opts = ""
    for opt, value in cli.items():
        if opt == "config":
            continue
        if opt == "max_jobs_run" and (q.prog == "slurm.pl" or not array):
            continue          # slurm.pl: the array's %N; queue.pl: -tc N, for an array job only
        if (opt, value) in fixed:
            opts += fixed[(opt, value)] + " "
        elif opt in with_value:
            opts += with_value[opt] + " "
        else:
            where = path if opened else "default config file"
            raise _Die(f"{q.prog}: Command line option {opt} not described in {where} "
                       f"(or value '{value}' not allowed)")
    return command, opts


def _job_script(q: QueueSystem, cwd: str, cmd: str, logfile: str, num_threads: str,
                syncfile: str, array: bool, submit: str) -> str:
    acct = ""
    if q.accounting_times:
        acct = (f"echo '#' Accounting: begin_time=$time1 >>{logfile}\n"
                f"echo '#' Accounting: end_time=$time2 >>{logfile}\n")
    touch = f"{syncfile}.${q.task_var}" if array else syncfile
    return (
        "#!/bin/bash\n"
        f"cd {cwd}\n"
        "if [ -f ./path.sh ]; then . ./path.sh; fi\n"
        "( echo '#' Running on `hostname`\n"
        "  echo '#' Started at `date`\n"
        f"{q.extra_header}"
        "  echo -n '# '; cat <<EOF\n"
        f"{cmd}\n"          # echoes the command (JOB expanded) into the log without quoting it
        "EOF\n"
        f") >{logfile}\n"
        f"{q.extra_setup.format(log=logfile)}"
        "time1=`date +\"%s\"`\n"
        f" ( {cmd} ) 2>>{logfile} >>{logfile}\n"
        "ret=$?\n"
        "sync || true\n"
        "time2=`date +\"%s\"`\n"
        f"{acct}"
        f"echo '#' Accounting: time=$(($time2-$time1)) threads={num_threads} >>{logfile}\n"
        f"echo '#' Finished at `date` with status $ret >>{logfile}\n"
        # a job killed (e.g. out of memory) exits 100: GridEngine's error state, easy to rerun
        "[ $ret -eq 137 ] && exit 100;\n"
        f"touch {touch}\n"
        "exit $[$ret ? 1 : 0]\n"
        "## submitted with:\n"
        f"# {submit}\n")


def _sh(command: str) -> tuple[str, int]:
    p = subprocess.run(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, errors="replace")
    return p.stdout, p.returncode


def _tail(path: str, n: int = 10) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def _job_gone(q: QueueSystem, job_id: str) -> tuple[bool, str, int]:
    out, rc = _sh(f"{q.status_cmd} {job_id}")
    return rc != 0 or not out.strip(), out, rc


def _wait(q: QueueSystem, job_id: str, syncfiles: list[str], logfile: str) -> None:
    """Waits for every sync file; exits 1 when the job left the queue without
    writing one (killed, time limit, machine gone)."""
    wait, checks = 0.1, 1
    for f in syncfiles:
        while not os.path.exists(f):
            time.sleep(wait)
            wait = min(wait * 1.2, 3.0)
            checks += 1
            if checks % 10 or os.path.exists(f):
                continue
            gone, out, rc = _job_gone(q, job_id)
            if not gone:
                continue
            for pause in (2.0, 3.0, 5.0):   # the sync file may just be late (NFS)
                time.sleep(pause)
                if os.path.exists(f) or not _job_gone(q, job_id)[0]:
                    break
            else:
                task = f.rsplit(".", 1)[-1]
                log = logfile.replace(f"${q.task_var}", task)
                last = _tail(log, 1).rstrip("\n")
                if last.endswith("status 0"):
                    warn(f"**{q.prog}: syncfile {f} was not created but job seems\n"
                         "**to have finished OK.  Probably your file-system has problems.\n"
                         "**This is just a warning.")
                    break
                warn(f"{q.prog}: Error: Job {job_id} seems to no longer exists:\n"
                     f"'{q.status_cmd} {job_id}' returned error code {rc} and said:\n"
                     f"  {out.strip()}\n"
                     f"Syncfile {f} does not exist, meaning that the job did not finish.\n"
                     f"Log is in {log}. Last line '{last}' does not end in 'status 0'.\n"
                     "Possible reasons:\n"
                     "  a) Exceeded time limit? -> Use more jobs!\n"
                     "  b) Shutdown/Frozen machine? -> Run again!")
                raise _Exit(1)
    for f in syncfiles:
        try:
            os.remove(f)
        except OSError:
            pass


def _status_of(log: str) -> int:
    for pause in (0.1, 0.2, 0.2, 0.3, 0.5, 0.5, 1.0, 2.0, 5.0, 5.0, 5.0, 10.0, 25.0, None):
        m = re.search(r"with status (\d+)", _tail(log))
        if m:
            return int(m.group(1))
        if pause is None:
            break
        time.sleep(pause)
    if not os.path.exists(log):
        warn(f"Log-file {log} does not exist.")
    else:
        warn(f"The last line of log-file {log} does not seem to indicate the return status "
             "as expected")
    raise _Exit(1)


def run(q: QueueSystem, args: list[str]) -> int:
    if len(args) < 2:
        warn(_usage(q).rstrip("\n"))
        return 1
    qsub_opts = ""
    sync = False
    num_threads = "1"
    cli: dict[str, str] = {}
    jobs = JobRange()
    array = False
    for _ in range(q.option_passes):
        while len(args) >= 2 and args[0].startswith("-"):
            switch = args.pop(0)
            if switch == "-V":
                qsub_opts += "-V "
                continue
            argument = args.pop(0)
            if argument.startswith("--"):
                warn(f"WARNING: suspicious argument '{argument}' to {switch}; starts with '-'")
            if switch == "-sync" and argument[:1] in ("y", "Y"):
                sync = True
                qsub_opts += f"{switch} {argument} "
            elif switch == "-pe" and args:      # e.g. -pe smp 5
                num_threads = args.pop(0)
                qsub_opts += f"{switch} {argument} {num_threads} "
            elif switch.startswith("--"):       # --mem 2G -> mem=2G, mapped by the config
                cli[switch[2:].replace("-", "_")] = argument
            else:                                # -q all.q and the like: to the queue as is
                qsub_opts += f"{switch} {argument} "
        if args:
            r = parse_job_range(args[0], q.prog)
            if r is not None:
                jobs, array = r, True
                args.pop(0)
    if len(args) < 2:
        warn(_usage(q).rstrip("\n"))
        return 1
    max_jobs_run = cli.get("max_jobs_run") if array else None
    if "max_jobs_run" in cli and not array and q.prog == "slurm.pl":
        warn("Ignoring max_jobs_run since this is not an array task.")
    command, opts = _read_config(q, cli, array)
    qsub_opts += opts

    cwd = os.getcwd()
    logfile = args.pop(0)
    if array and jobs.name not in logfile and jobs.end > jobs.start:
        warn(f"{q.prog}: you are trying to run a parallel job but you are putting the output "
             f"into just one log file ({logfile})")
        return 1
    cmd = quote_command(args)

    d, base = os.path.dirname(logfile) or ".", os.path.basename(logfile)
    qdir = re.sub(r"/(log|LOG)/*q", "/q", f"{d}/q", count=1)   # exp/x/log/q -> exp/x/q
    queue_logfile = f"{qdir}/{base}"
    os.makedirs(d, exist_ok=True)
    syncdir = qdir + ("/" + q.sync_subdir.rstrip("/") if q.sync_subdir else "")
    if not os.path.isdir(syncdir):
        os.makedirs(syncdir, exist_ok=True)
        # a node may not see a just-made directory of a network filesystem yet
        time.sleep(float(os.environ.get("PYNNET3_QUEUE_DIR_SLEEP", "5")))

    array_opt = ""
    if array:
        array_opt = q.array_opt(jobs, max_jobs_run)
        logfile = logfile.replace(jobs.name, f"${q.task_var}")
        cmd = cmd.replace(jobs.name, "${" + q.task_var + "}")
        queue_logfile = re.sub(r"\.?" + re.escape(jobs.name), "", queue_logfile, count=1)
    script = queue_logfile
    script, n = re.subn(r"\.[a-zA-Z]{1,5}$", ".sh", script)
    if not n:
        script += ".sh"
    if not script.startswith("/"):
        script = f"{cwd}/{script}"
    syncfile = f"{qdir}/{q.sync_subdir}done.{os.getpid()}"
    for f in (queue_logfile, syncfile):
        try:
            os.remove(f)
        except OSError:
            pass

    submit = q.submit_cmd(command, qsub_opts, queue_logfile, array_opt, script)
    try:
        with open(script, "w") as f:
            f.write(_job_script(q, cwd, cmd, logfile, num_threads, syncfile, array, submit))
    except OSError as e:
        raise _Die(f"Failed to write to {script} ({e})")
    os.chmod(script, 0o755)

    for attempt in range(4):
        rc = subprocess.run(submit, shell=True).returncode
        if rc == 0:
            break
        if sync and rc == 1:              # with -sync y: the job itself failed
            warn(f"{q.prog}: job writing to {logfile.replace('$' + q.task_var, '*')} failed")
            return 1
        err = _tail(queue_logfile)
        warn(f"{q.prog}: Error submitting jobs to queue (return status was {rc})\n"
             f"queue log file is {queue_logfile}, command was {submit}\n"
             f"Output of the submit command was: {err}")
        if q.submit_retry_re and re.search(q.submit_retry_re, err) and attempt < 3:
            warn(f"{q.prog}: It looks like the queue master may be inaccessible.  "
                 "Trying again after 20 seconds")
            time.sleep(20)
            continue
        return 1

    if not sync:
        ids = [m.group(1) for m in re.finditer(q.job_id_re, _tail(queue_logfile, 1000))]
        if len(ids) > 1:
            raise _Die(f"Error: your job was submitted more than once (see {queue_logfile})")
        if not ids:
            raise _Die(f"Error: log file {queue_logfile} does not specify the {q.name} job-id.")
        job_id = ids[0]

        def cancel(signum: int, _frame: object) -> None:
            subprocess.run(f"{q.cancel_cmd} {job_id}", shell=True)
            warn(f"Caught a signal: {signal.Signals(signum).name} , deleting {q.name} task: "
                 f"{job_id} and exiting")
            raise _Exit(2)

        old = {s: signal.signal(s, cancel) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            syncfiles = ([f"{syncfile}.{j}" for j in jobs.ids()] if array else [syncfile])
            _wait(q, job_id, syncfiles, logfile)
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    logs = [logfile.replace(f"${q.task_var}", str(j)) for j in jobs.ids()] if array else [logfile]
    status = 1
    failed = 0
    for log in logs:
        status = _status_of(log)
        failed += status != 0
    if failed == 0:
        return 0
    if len(logs) == 1:
        log = logs[0]
        warn(f"{q.prog}: job failed with status {status}, log is in {log}")
        if "JOB" in log:
            warn(f"{q.prog}: probably you forgot to put JOB=1:$nj in your script.")
    else:
        warn(f"{q.prog}: {failed} / {jobs.count} failed, log is in "
             f"{logfile.replace('$' + q.task_var, '*')}")
    return 1


def main(q: QueueSystem, argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return run(q, args)
    except _Exit as e:
        return e.code
    except (_Die, RangeError) as e:
        warn(str(e))
        return _DIE


def queue_main(argv: list[str] | None = None) -> int:
    """``queue.pl``: jobs through GridEngine's ``qsub``."""
    return main(GRID_ENGINE, argv)


def slurm_main(argv: list[str] | None = None) -> int:
    """``slurm.pl``: jobs through Slurm's ``sbatch``."""
    return main(SLURM, argv)


if __name__ == "__main__":
    sys.exit(slurm_main() if os.path.basename(sys.argv[0]).startswith("slurm") else queue_main())
