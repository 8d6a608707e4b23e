"""The cyclic garbage collector at a binary's start-up (pynnet3.cli): a
process started as a binary pauses it while importing, then freezes what
exists and turns it back on; other processes (tests, library users) keep
their collector as it is."""
from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

import pynnet3.cli as cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def restore_gc():
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    if enabled:
        gc.enable()


def test_resume_freezes_only_a_binary_process(monkeypatch, restore_gc) -> None:
    gc.unfreeze()
    monkeypatch.setattr(cli, "_startup_gc_paused", False)
    monkeypatch.setattr(cli, "_started_as_binary", False)
    cli.resume_startup_gc()
    cli.freeze_after_command()
    assert gc.get_freeze_count() == 0          # not a binary: nothing frozen

    gc.disable()
    monkeypatch.setattr(cli, "_startup_gc_paused", True)
    monkeypatch.setattr(cli, "_started_as_binary", True)
    cli.resume_startup_gc()
    assert gc.isenabled() and gc.get_freeze_count() > 0
    cli.resume_startup_gc()                    # idempotent: still on
    assert gc.isenabled()
    gc.unfreeze()
    cli.freeze_after_command()
    assert gc.get_freeze_count() > 0


def test_binary_process_runs_with_the_collector_on_and_frozen_imports(tmp_path) -> None:
    """Through the bin/ launcher: after start-up the collector is on (cycles
    made by the command are still collected) and the imports are frozen."""
    probe = tmp_path / "nnet3-info"
    probe.write_text(
        "import gc, sys\n"
        f"sys.path.insert(0, {str(ROOT / 'src')!r})\n"
        "import pynnet3.cli as cli\n"
        "assert not gc.isenabled()\n"
        "cli.resume_startup_gc()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 1000)\n")
    out = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == ["True", "True"]
