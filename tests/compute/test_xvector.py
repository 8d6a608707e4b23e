"""nnet3-xvector-compute (compute/xvector.py, cli/xvector_compute.py) against
real Kaldi's outputs on the reference x-vector network
(reference/small/xvector_sre16_1a: its README says how they were made):
X1 ``--chunk-size=-1`` (default --min-chunk-size=100, so the short
utterances are padded), X2 ``--chunk-size=30 --min-chunk-size=10``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from pynnet3.compute.xvector import XvectorComputeConfig, nnet3_xvector_compute, pad_chunk
from pynnet3.errors import PynnetError
from pynnet3.io.table import MATRIX_HOLDER, VECTOR_HOLDER, SequentialTableReader
from tests.helpers import reference_dir

ROOT = Path(__file__).resolve().parents[2]
CASE = "small/xvector_sre16_1a"


def _vectors(path: Path) -> dict[str, np.ndarray]:
    with SequentialTableReader(f"ark:{path}", VECTOR_HOLDER) as r:
        return {k: np.array(v) for k, v in r}


def _network(case: Path) -> str:
    # As Kaldi's recipes (and the reference) make the extraction network.
    return (f"{sys.executable} -c 'import sys; from pynnet3.cli.copy import main; "
            f"sys.exit(main())' --nnet-config={case / 'extract.config'} {case / '1.raw'} - |")


@pytest.mark.parametrize("which,feats,options", [
    pytest.param("X1", "feats_test.ark", dict(chunk_size=-1), marks=pytest.mark.slow),
    ("X2", "feats_test_x2.ark", dict(chunk_size=30, min_chunk_size=10)),
])
def test_matches_kaldi(tmp_path: Path, which: str, feats: str, options: dict) -> None:
    case = reference_dir(f"{CASE}/xvector_{which}.ark", f"{CASE}/1.raw") / CASE
    out = tmp_path / "xvec.ark"
    config = XvectorComputeConfig(use_disk_cache=False, **options)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    old = os.environ.copy()
    os.environ.update(env)     # (the network pipe runs nnet3-copy from this checkout)
    try:
        result = nnet3_xvector_compute(config, _network(case), f"ark:{case / feats}",
                                       f"ark:{out}")
    finally:
        os.environ.clear()
        os.environ.update(old)
    ref = _vectors(case / f"xvector_{which}.ark")
    ours = _vectors(out)
    assert result.num_success == len(ref) and result.num_fail == 0
    assert list(ours) == list(ref)
    for utt in ref:
        assert ours[utt].shape == ref[utt].shape == (64,)
        err = float(np.abs(ours[utt] - ref[utt]).max())
        assert err < 1e-3, f"{which} {utt}: max abs error {err}"


def test_pad_chunk_repeats_edge_frames() -> None:
    chunk = np.arange(12, dtype=np.float32).reshape(4, 3)
    padded = pad_chunk(chunk, 9)      # 5 rows of padding: 2 before, 3 after
    assert padded.shape == (9, 3)
    assert (padded[:2] == chunk[0]).all() and (padded[6:] == chunk[3]).all()
    assert (padded[2:6] == chunk).all()


def _short_case(tmp_path: Path) -> tuple[Path, str]:
    case = reference_dir(f"{CASE}/feats_test.ark", f"{CASE}/1.raw") / CASE
    with SequentialTableReader(f"ark:{case / 'feats_test.ark'}", MATRIX_HOLDER) as r:
        first = next(iter(r))
    assert first[0] == "test01" and first[1].shape[0] == 13
    from pynnet3.io.table import TableWriter
    feats = tmp_path / "short.ark"
    w = TableWriter(f"ark:{feats}", MATRIX_HOLDER)
    w.write("test01", first[1])
    w.close()
    return case, f"ark:{feats}"


def test_unpadded_short_chunk_is_not_computable(tmp_path: Path) -> None:
    """As real Kaldi (small/README.md): 13 frames with --chunk-size=30
    --min-chunk-size=10 are not padded and this network needs more frames."""
    case, feats = _short_case(tmp_path)
    config = XvectorComputeConfig(use_disk_cache=False, chunk_size=30, min_chunk_size=10)
    network = tmp_path / "ext.raw"
    _copy_network(case, network)
    with pytest.raises(PynnetError, match="computable"):
        nnet3_xvector_compute(config, str(network), feats, f"ark:{tmp_path / 'o.ark'}")


def _copy_network(case: Path, out: Path) -> None:
    code = "import sys; from pynnet3.cli.copy import main; sys.exit(main())"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    subprocess.run([sys.executable, "-c", code, f"--nnet-config={case / 'extract.config'}",
                    str(case / "1.raw"), str(out)], check=True, capture_output=True, env=env)


def test_cli_without_padding_skips_short_utterances(tmp_path: Path) -> None:
    """--pad-input=false: an utterance shorter than --min-chunk-size is a
    failure (WARNING), and none written means exit status 1, as Kaldi."""
    case, feats = _short_case(tmp_path)
    network = tmp_path / "ext.raw"
    _copy_network(case, network)
    module, func = BINARIES["nnet3-xvector-compute"].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYNNET3_CACHE_DIR=str(tmp_path / "c"))
    p = subprocess.run([sys.executable, "-c", code, "--pad-input=false", str(network), feats,
                        f"ark,t:{tmp_path / 'o.txt'}"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert p.returncode == 1, p.stderr
    assert ("Minimum chunk size of 100 is greater than the number of rows in utterance: "
            "test01") in p.stderr
    assert "Done 0 utterances, failed for 1" in p.stderr
    assert (tmp_path / "o.txt").read_text() == ""
