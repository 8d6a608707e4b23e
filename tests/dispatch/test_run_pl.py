"""run.pl (pynnet3.dispatch.local) against Kaldi's utils/parallel/run.pl."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "dispatch"
# the jobs run in temporary directories: this checkout's src/ by its absolute path
SRC = str(Path(__file__).resolve().parents[2] / "src")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
RUN_PL = f"{sys.executable} -m pynnet3.dispatch.local"


def run_pl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pynnet3.dispatch.local", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120, env=ENV)


def test_cases_match_kaldi_run_pl() -> None:
    """JOB substitution in the command and the log name, quoting, log header
    and footer, exit statuses (a job killed by a signal too), the failure
    messages, a single JOB=N, invalid ranges, one log for many jobs, usage."""
    p = subprocess.run(["bash", str(DATA / "run_pl_cases.sh"), RUN_PL], capture_output=True,
                       text=True, timeout=300, env=ENV)
    assert p.returncode == 0, p.stderr
    assert p.stdout == (DATA / "run_pl_kaldi.txt").read_text()


@pytest.mark.parametrize("max_jobs", [1, 2])
def test_max_jobs_run_bounds_concurrency(tmp_path: Path, max_jobs: int) -> None:
    # Each job marks itself running, records how many are running, waits, unmarks.
    job = ("mkdir run.JOB \\; ls -d run.* \\| wc -l \\> count.JOB \\; sleep 0.4 \\; "
           "rmdir run.JOB")
    p = subprocess.run(f"{RUN_PL} --max-jobs-run {max_jobs} JOB=1:4 log/x.JOB.log {job}",
                       shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 0, p.stderr
    counts = [int((tmp_path / f"count.{j}").read_text()) for j in range(1, 5)]
    assert max(counts) <= max_jobs
    if max_jobs > 1:     # four jobs of 0.4 s, two slots: some ran side by side
        assert max(counts) == max_jobs


def test_smallest_max_jobs_run_wins_and_zero_is_invalid(tmp_path: Path) -> None:
    job = "mkdir run.JOB \\; ls -d run.* \\| wc -l \\> count.JOB \\; sleep 0.3 \\; rmdir run.JOB"
    p = subprocess.run(f"{RUN_PL} --max-jobs-run 3 -tc 1 JOB=1:3 log/x.JOB.log {job}",
                       shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=120, env=ENV)
    assert p.returncode == 0, p.stderr
    assert max(int((tmp_path / f"count.{j}").read_text()) for j in range(1, 4)) == 1
    p = run_pl("--max-jobs-run", "0", "log/y.log", "true", cwd=tmp_path)
    assert p.returncode == 255 and "invalid option --max-jobs-run 0" in p.stderr


def test_pick_failed_reruns_only_failed_jobs(tmp_path: Path) -> None:
    # job 2 fails while the file 'broken' exists; every run appends to ran.JOB
    cmd = ["echo", "x", ">>", "ran.JOB", ";", "test", "!", "-e", "broken.JOB"]
    (tmp_path / "broken.2").write_text("")
    p = run_pl("JOB=1:3", "log/p.JOB.log", *cmd, cwd=tmp_path)
    assert p.returncode == 1
    assert "run.pl: 1 / 3 failed, log is in log/p.*.log" in p.stderr
    os.remove(tmp_path / "broken.2")
    p = run_pl("--pick", "failed", "JOB=1:3", "log/p.JOB.log", *cmd, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert [len((tmp_path / f"ran.{j}").read_text().split()) for j in (1, 2, 3)] == [1, 2, 1]
    assert "# Ended (code 0)" in (tmp_path / "log" / "p.2.log").read_text()


def test_command_reads_no_stdin(tmp_path: Path) -> None:
    # run.pl feeds its script to bash on stdin: a job reading stdin gets end-of-file
    p = subprocess.run([sys.executable, "-m", "pynnet3.dispatch.local", "log/c.log", "wc", "-c"],
                       cwd=tmp_path, input="not for the job\n", capture_output=True, text=True, env=ENV)
    assert p.returncode == 0
    assert (tmp_path / "log" / "c.log").read_text().splitlines()[3] == "0"
