"""nnet3-compile and nnet3-info on computations."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from pynnet3.cli import BINARIES
from tests.helpers import reference_dir

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config"


def run(*args: str, cache: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    env = dict(os.environ, PYNNET3_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, *args[1:]], input=stdin,
                          capture_output=True, timeout=300, env=env)


def _summary(text: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^(num-\S+|matrix-elements-\S+): (\d+)$", text,
                                             re.M)}


def test_compile_write_info_and_disk_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    raw = tmp_path / "0.raw"
    assert run("nnet3-init", str(CONFIG), str(raw), cache=cache).returncode == 0
    out = tmp_path / "train.cmp"
    args = ("nnet3-compile", "--num-sequences=3", "--frames-per-chunk=5",
            "--need-model-derivative", "--extra-left-context=2", str(raw), str(out))
    p = run(*args, cache=cache)
    assert p.returncode == 0, p.stderr.decode()
    err = p.stderr.decode()
    assert "seconds taken in nnet3 compilation total" in err and "0 disk hits" in err
    assert out.read_bytes().startswith(b"pynnet3-computation v4\n")
    assert len(os.listdir(cache)) >= 1

    # The library agrees with the file.
    from pynnet3.cache import CachingCompiler, CachingCompilerOptions
    from pynnet3.compile.computation_io import computation_from_bytes, computation_to_bytes
    from pynnet3.compile.request_io import build_request
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(str(raw))
    request = build_request(nnet, 3, 5, extra_left_context=2, need_model_derivative=True)
    expected = CachingCompiler(nnet, CachingCompilerOptions(), use_disk=False).compile(request)
    assert computation_to_bytes(computation_from_bytes(out.read_bytes())) == \
        computation_to_bytes(expected)

    info = run("nnet3-info", str(out), cache=cache)
    assert info.returncode == 0, info.stderr.decode()
    summary = _summary(info.stdout.decode())
    assert summary["num-commands"] == len(expected.commands)
    assert summary["num-matrices"] == len(expected.matrices)
    assert summary["matrix-elements-total"] == expected.matrix_elements_total()
    assert summary["num-kBackprop"] + summary.get("num-kBackpropNoModelUpdate", 0) > 0

    both = run("nnet3-info", str(raw), str(out), cache=cache)
    assert both.returncode == 0, both.stderr.decode()
    text = both.stdout.decode()
    assert text == expected.print(nnet.component_names, nnet.node_names) + expected.summary()

    again = run(*args, cache=cache)
    assert again.returncode == 0 and "1 disk hits" in again.stderr.decode()
    assert again.stderr.decode().count("0 compiled") == 1


def test_print_from_request_files(tmp_path: Path) -> None:
    d = reference_dir() / "random" / "005"
    cache = tmp_path / "cache"
    outs = []
    for name in ("request.txt", "request.kaldi-text"):
        p = run("nnet3-compile", "--print", f"--request={d / name}", "--use-disk-cache=false",
                str(d / "final.raw"), cache=cache)
        assert p.returncode == 0, p.stderr.decode()
        outs.append(p.stdout.decode())
    assert outs[0] == outs[1] and outs[0].startswith("matrix m1(")
    assert "# begin forward commands" in outs[0]
    assert not cache.exists()


def test_stdout_output_and_usage_errors(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    raw = tmp_path / "0.raw"
    assert run("nnet3-init", str(CONFIG), str(raw), cache=cache).returncode == 0
    p = run("nnet3-compile", "--frames-per-chunk=2", str(raw), "-", cache=cache)
    assert p.returncode == 0 and p.stdout.startswith(b"pynnet3-computation v4\n")
    info = run("nnet3-info", "-", cache=cache, stdin=p.stdout)
    assert info.returncode == 0 and info.stdout.decode().startswith("num-commands: ")
    bad = run("nnet3-compile", "--print", str(raw), "-", cache=cache)
    assert bad.returncode == 1 and "both write to stdout" in bad.stderr.decode()
    bad = run("nnet3-compile", "--outputs=nope", str(raw), cache=cache)
    assert bad.returncode == 1 and "no output node 'nope'" in bad.stderr.decode()
    assert "Traceback" not in bad.stderr.decode()
    bad = run("nnet3-info", str(raw), str(raw), cache=cache)
    assert bad.returncode == 1 and "not a computation" in bad.stderr.decode()
