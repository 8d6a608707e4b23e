"""The chain recipe egs/mini_chain/run.sh end to end (a copy, run in a
temporary folder, on the checkout's binaries): the phone LM, den.fst,
supervision, chain egs, nnet3-chain-train jobs averaged, per-iteration
nnet3-chain-compute-prob (the objective must rise), nnet3-chain-combine and
nnet3-compute on the result."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_mini_chain_recipe(tmp_path):
    recipe = tmp_path / "mini_chain"
    shutil.copytree(ROOT / "egs" / "mini_chain", recipe,
                    ignore=shutil.ignore_patterns("exp", "data"))
    env = dict(os.environ)
    env["PYNNET3_ROOT"] = str(ROOT)
    env["PATH"] = f"{ROOT / 'bin'}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.run(["bash", "run.sh", "--num-iters", "3"], cwd=recipe, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    objf = {m.group(1): float(m.group(2)) for m in
            re.finditer(r"iter (\w+): valid objf (\S+),", proc.stdout)}
    assert list(objf)[:4] == ["0", "1", "2", "3"], proc.stdout
    rising = [objf[str(i)] for i in range(4)]
    assert all(b > a for a, b in zip(rising, rising[1:])), rising
    assert "final" in objf and objf["final"] > objf["0"]
    outputs = re.findall(r"(\d+) frames -> output (\d+) x (\d+)", proc.stdout)
    assert len(outputs) == 3
    for frames, rows, dim in outputs:
        assert int(rows) == (int(frames) + 2) // 3 and int(dim) > 0
    assert (recipe / "exp" / "chain" / "final.raw").is_file()
