"""A real single-node Slurm cluster on this machine, for the tests of
``slurm.pl`` and for running a recipe through Slurm.

Debian's ``slurm-wlm`` and ``munge`` packages provide the daemons (``.ci/run``
installs them when apt is there).  :class:`SlurmCluster` writes a minimal
``slurm.conf`` in a temporary directory (one node on 127.0.0.1 with this
machine's CPUs and memory, one partition named ``shared`` as Kaldi's default
slurm.pl configuration asks for, ``proctrack/linuxproc``, ``task/none``, no
accounting storage, ``jobcomp/filetxt`` so that finished jobs can be listed),
starts ``munged``, ``slurmctld`` and ``slurmd`` as root in the foreground
(``-D``/``-F``, so their pids are ours), waits until ``sinfo`` shows the
node idle, and at the end cancels the jobs left and stops the daemons by pid.
Clients find it through ``$SLURM_CONF`` (:meth:`env`).

    python -m tests.helpers_slurm <command> ...

runs one command with a cluster up (``SLURM_CONF`` set) and prints the
cluster's job list (the jobcomp log) after it.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["SlurmCluster", "slurm_unavailable", "job_list"]

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue", "scancel")


def _find(name: str) -> str | None:
    return shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}")
                                       if os.access(p, os.X_OK)), None)


def slurm_unavailable() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if os.geteuid() != 0:
        return "the Slurm test cluster needs root (slurmd runs jobs as their user)"
    missing = [d for d in DAEMONS if _find(d) is None]
    if missing:
        return (f"Slurm/munge not installed ({', '.join(missing)} missing; "
                "apt-get install slurm-wlm munge)")
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mem_mb() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1024


class SlurmCluster:
    """Context manager: a running one-node cluster rooted at ``root``."""

    def __init__(self, root: Path, cpus: int | None = None) -> None:
        self.root = Path(root)
        self.cpus = cpus or os.cpu_count() or 1
        self.conf = self.root / "slurm.conf"
        self.jobcomp = self.root / "jobcomp.log"
        self.procs: dict[str, subprocess.Popen] = {}

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        r = self.root
        for d in ("state", "spool", "munge"):
            (r / d).mkdir(parents=True, exist_ok=True)
        os.chmod(r / "munge", 0o700)
        key = r / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        self.munge_socket = r / "munge" / "munge.socket"
        self.conf.write_text(f"""\
# a one-node test cluster (tests/helpers_slurm.py)
ClusterName=pynnet3test
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc={self.jobcomp}
MinJobAge=300
MaxArraySize=1001
NodeName=node1 NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory={_mem_mb()} State=UNKNOWN
PartitionName=shared Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env(), start_new_session=True)
        log.close()

    def start(self, timeout: float = 30.0) -> "SlurmCluster":
        self._write_config()
        r = self.root
        self._start("munged", [_find("munged"), "-F", "--force", f"--socket={self.munge_socket}",
                               f"--key-file={r}/munge/munge.key",
                               f"--pid-file={r}/munge/munged.pid",
                               f"--log-file={r}/munge/munged.log",
                               f"--seed-file={r}/munge/munged.seed"])
        deadline = time.monotonic() + timeout
        while not self.munge_socket.exists():
            self._check_alive(deadline)
            time.sleep(0.05)
        self._start("slurmctld", [_find("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._start("slurmd", [_find("slurmd"), "-D", "-N", "node1", "-f", str(self.conf)])
        while True:
            self._check_alive(deadline)
            p = subprocess.run([_find("sinfo"), "-h", "-o", "%T"], env=self.env(),
                               capture_output=True, text=True)
            if p.returncode == 0 and p.stdout.strip() == "idle":
                return self
            time.sleep(0.1)

    def _check_alive(self, deadline: float) -> None:
        dead = [n for n, p in self.procs.items() if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            logs = "".join(f"--- {f.name}\n{f.read_text(errors='replace')[-2000:]}"
                           for f in sorted(self.root.glob("*.out")) + sorted(self.root.glob("*.log"))
                           if f.is_file())
            self.stop()
            raise RuntimeError(f"Slurm test cluster did not come up ({', '.join(dead) or 'timeout'})"
                               f"\n{logs}")

    def stop(self) -> None:
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run([_find("scancel"), "--user=root"], env=self.env(), capture_output=True)
        for name in ("slurmd", "slurmctld", "munged"):   # the reverse of the start order
            p = self.procs.pop(name, None)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> "SlurmCluster":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def job_list(cluster: SlurmCluster) -> list[dict[str, str]]:
    """The finished jobs, from the jobcomp/filetxt log (one ``Key=Value ...``
    line per job; array tasks are jobs of their own)."""
    jobs = []
    if cluster.jobcomp.exists():
        for line in cluster.jobcomp.read_text().splitlines():
            fields = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if fields:
                jobs.append(fields)
    return jobs


if __name__ == "__main__":
    import tempfile

    why = slurm_unavailable()
    if why:
        sys.exit(f"tests.helpers_slurm: {why}")
    with tempfile.TemporaryDirectory(prefix="pynnet3-slurm-") as tmp, SlurmCluster(Path(tmp)) as c:
        rc = subprocess.run(sys.argv[1:], env=c.env()).returncode
        print(f"# the cluster's jobs ({c.jobcomp}):")
        sys.stdout.write(c.jobcomp.read_text() if c.jobcomp.exists() else "(none)\n")
    sys.exit(rc)
