"""Fixtures of the job-runner tests: a real one-node Slurm cluster
(tests/helpers_slurm.py), skipped with the reason where it cannot run."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from tests.helpers_slurm import SlurmCluster, slurm_unavailable


@pytest.fixture(scope="session")
def slurm_cluster():
    why = slurm_unavailable()
    if why:
        pytest.skip(why)
    # not under pytest's tmp_path: slurmd's spool and the munge socket want a short, private path
    with tempfile.TemporaryDirectory(prefix="pynnet3-slurm-") as tmp:
        with SlurmCluster(Path(tmp)) as cluster:
            yield cluster
