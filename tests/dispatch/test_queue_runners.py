"""queue.pl (GridEngine) and slurm.pl (Slurm): with fake qsub/sbatch
commands on PATH (they record their arguments and run the array's tasks at
once), and slurm.pl through a real one-node Slurm cluster (slow)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers_slurm import job_list

SRC = str(Path(__file__).resolve().parents[2] / "src")

FAKE_QSUB = r"""#!/bin/bash
# fake GridEngine qsub: records its arguments, runs the tasks one after another
echo "$@" >> "$FAKE_ARGS"
out=/dev/null; range=""; script=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift 2;;
    -t) range=$2; shift 2;;
    -cwd|-V) shift;;
    -*) shift 2;;
    *) script=$1; shift;;
  esac
done
if [ -n "$range" ]; then
  echo "Your job-array 4242.${range}:1 (\"$(basename $script)\") has been submitted"
  for t in $(seq ${range%:*} ${range#*:}); do SGE_TASK_ID=$t bash $script >> $out 2>&1; done
else
  echo "Your job 4242 (\"$(basename $script)\") has been submitted"
  bash $script >> $out 2>&1
fi
exit 0
"""

FAKE_SBATCH = r"""#!/bin/bash
# fake Slurm sbatch: records its arguments, runs the tasks one after another
echo "$@" >> "$FAKE_ARGS"
out=/dev/null; range=""; script=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift 2;;
    --array) range=${2%%\%*}; shift 2;;
    --*=*) shift;;
    -*) shift 2;;
    *) script=$1; shift;;
  esac
done
echo "Submitted batch job 77"
if [ -n "$range" ]; then
  for t in $(seq ${range%-*} ${range#*-}); do SLURM_ARRAY_TASK_ID=$t bash $script >> $out 2>&1; done
else
  bash $script >> $out 2>&1
fi
exit 0
"""

ENTRY = {"queue.pl": "queue_main", "slurm.pl": "slurm_main"}


def fake_queue(tmp_path: Path) -> dict[str, str]:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    for name, text in (("qsub", FAKE_QSUB), ("sbatch", FAKE_SBATCH)):
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "FAKE_ARGS": str(tmp_path / "submit.args"), "PYNNET3_QUEUE_DIR_SLEEP": "0",
            "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}


def runner(prog: str, *args: str, cwd: Path, env: dict[str, str],
           timeout: float = 120) -> subprocess.CompletedProcess:
    code = f"import sys; from pynnet3.dispatch.queue import {ENTRY[prog]} as m; sys.exit(m())"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("prog", ["queue.pl", "slurm.pl"])
def test_array_job_logs_statuses_and_message(tmp_path: Path, prog: str) -> None:
    env = fake_queue(tmp_path)
    p = runner(prog, "JOB=1:3", "exp/log/a.JOB.log", "echo", "job JOB", ";", "test", "JOB",
               "-ne", "2", cwd=tmp_path, env=env)
    assert p.returncode == 1
    assert p.stderr.strip().endswith(f"{prog}: 1 / 3 failed, log is in exp/log/a.*.log")
    args = (tmp_path / "submit.args").read_text()
    assert ("-t 1:3" if prog == "queue.pl" else "--array 1-3") in args
    assert (tmp_path / "exp" / "q" / "a.sh").exists()      # log/ -> q/, as Kaldi's scripts
    for j in (1, 2, 3):
        log = (tmp_path / "exp" / "log" / f"a.{j}.log").read_text().splitlines()
        assert log[0].startswith("# Running on ")
        assert f'# echo "job {j}" ; test {j} -ne 2 ' in log
        assert f"job {j}" in log
        assert re.fullmatch(r"# Accounting: time=\d+ threads=1", log[-2])
        assert re.fullmatch(rf"# Finished at .* with status {int(j == 2)}", log[-1])
    # no sync file left behind
    assert not [f for f in (tmp_path / "exp" / "q").rglob("done.*")]


@pytest.mark.parametrize("prog", ["queue.pl", "slurm.pl"])
def test_single_job(tmp_path: Path, prog: str) -> None:
    env = fake_queue(tmp_path)
    p = runner(prog, "exp/log/s.log", "echo", "hi", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    assert "hi" in (tmp_path / "exp" / "log" / "s.log").read_text().splitlines()
    p = runner(prog, "exp/log/f.log", "false", cwd=tmp_path, env=env)
    assert p.returncode == 1
    assert f"{prog}: job failed with status 1, log is in exp/log/f.log" in p.stderr
    assert "-t " not in (tmp_path / "submit.args").read_text()


def test_queue_pl_options_through_default_config(tmp_path: Path) -> None:
    env = fake_queue(tmp_path)
    p = runner("queue.pl", "--mem", "2G", "--num-threads", "4", "--max-jobs-run", "2",
               "-q", "all.q", "JOB=1:2", "log/o.JOB.log", "true", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    args = (tmp_path / "submit.args").read_text()
    for part in ("-v PATH -cwd -S /bin/bash -j y", "-l mem_free=2G,ram_free=2G", "-pe smp 4",
                 "-tc 2", "-q all.q", "-t 1:2"):
        assert part in args, (part, args)
    assert "-l gpu" not in args


def test_slurm_pl_options_through_default_config(tmp_path: Path) -> None:
    env = fake_queue(tmp_path)
    p = runner("slurm.pl", "--mem", "2G", "--num-threads", "4", "--gpu", "1", "--time", "1:00:00",
               "--max-jobs-run", "2", "JOB=1:3", "log/o.JOB.log", "true", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    args = (tmp_path / "submit.args").read_text()
    for part in ("--export=PATH", "--mem-per-cpu 2G", "--cpus-per-task 4", "-p gpu --gres=gpu:1",
                 "--time 1:00:00", "--array 1-3%2", "--open-mode=append"):
        assert part in args, (part, args)
    assert "-p shared" not in args     # --gpu 1 replaced the default gpu=0's partition


def test_config_file(tmp_path: Path) -> None:
    env = fake_queue(tmp_path)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "slurm.conf").write_text(
        "command sbatch --export=PATH\n"
        "option mem=* --mem $0   # per job, not per cpu\n"
        "default gpu=0\n"
        "option gpu=0 -p cpu\n"
        "option gpu=* -p gpu --gres=gpu:$0\n")
    p = runner("slurm.pl", "--mem", "3G", "log/c.log", "true", cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stderr
    args = (tmp_path / "submit.args").read_text()
    assert "--mem 3G" in args and "-p cpu" in args and "--ntasks-per-node" not in args
    p = runner("slurm.pl", "--foo", "1", "log/c.log", "true", cwd=tmp_path, env=env)
    assert p.returncode == 255
    assert "Command line option foo not described in conf/slurm.conf" in p.stderr
    p = runner("slurm.pl", "--config", "conf/none.conf", "log/c.log", "true", cwd=tmp_path,
               env=env)
    assert p.returncode == 1 and "Could not open config file conf/none.conf" in p.stderr
    (tmp_path / "bad.conf").write_text("option mem=* --mem $0\n")
    p = runner("queue.pl", "--config", "bad.conf", "log/c.log", "true", cwd=tmp_path, env=env)
    assert p.returncode == 1 and 'does not contain the line "command .*"' in p.stderr


def test_one_log_for_many_jobs_is_refused(tmp_path: Path) -> None:
    env = fake_queue(tmp_path)
    p = runner("queue.pl", "JOB=1:2", "log/one.log", "true", cwd=tmp_path, env=env)
    assert p.returncode == 1 and "putting the output into just one log file" in p.stderr
    assert not (tmp_path / "submit.args").exists()


# --- a real Slurm cluster -------------------------------------------------

def slurm_env(cluster) -> dict[str, str]:
    return {**cluster.env(), "PYNNET3_QUEUE_DIR_SLEEP": "0",
            "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_slurm_array_job_on_cluster(slurm_cluster, tmp_path: Path) -> None:
    before = len(job_list(slurm_cluster))
    p = runner("slurm.pl", "--mem", "100M", "JOB=1:3", "exp/log/arr.JOB.log", "echo", "task JOB",
               cwd=tmp_path, env=slurm_env(slurm_cluster), timeout=300)
    assert p.returncode == 0, p.stderr
    for j in (1, 2, 3):
        log = (tmp_path / "exp" / "log" / f"arr.{j}.log").read_text().splitlines()
        assert f"# SLURM_ARRAY_TASK_ID={j}" in log      # really ran as task j of an array
        assert f"task {j}" in log and log[-1].endswith("with status 0")
    jobs = job_list(slurm_cluster)[before:]
    assert [j["JobState"] for j in jobs if j["Name"] == "arr.sh"] == ["COMPLETED"] * 3


@pytest.mark.slow
def test_slurm_failing_job_on_cluster(slurm_cluster, tmp_path: Path) -> None:
    before = len(job_list(slurm_cluster))
    p = runner("slurm.pl", "JOB=1:2", "exp/log/f.JOB.log", "test", "JOB", "-ne", "2",
               cwd=tmp_path, env=slurm_env(slurm_cluster), timeout=300)
    assert p.returncode == 1
    assert "slurm.pl: 1 / 2 failed, log is in exp/log/f.*.log" in p.stderr
    states = sorted(j["JobState"] for j in job_list(slurm_cluster)[before:] if j["Name"] == "f.sh")
    assert states == ["COMPLETED", "FAILED"]
