"""nnet3-acc-lda-stats, sum-lda-accs and nnet-get-feature-transform re-run on
the reference folder's recipe cases, against real Kaldi's files and logs
(recipe/CASE/commands.txt)."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import curated, reference_dir
from pynnet3.cli import BINARIES
from pynnet3.cli.common import run as run_cli
from pynnet3.io.kaldi_io import open_kaldi_object

CASES = curated("recipe", ["affine_xent", "ngaffine_bn"])


def _case(name: str) -> Path:
    return reference_dir(f"recipe/{name}") / "recipe" / name


def _run(capsys: pytest.CaptureFixture, cwd: Path, line: str) -> tuple[int, str]:
    """Run one binary in this process (the CLI path, argv as a shell would split it)."""
    import importlib
    import os

    argv = shlex.split(line)
    module, func = BINARIES[argv[0]].split(":")
    command = importlib.import_module(module).command
    capsys.readouterr()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        status = run_cli(command, argv[0], argv[1:])
    finally:
        os.chdir(old)
    return status, capsys.readouterr().err


def _log_lines(text: str) -> list[str]:
    """LOG messages without the (prog[version]:func():file:line) prefix."""
    return [re.sub(r"^LOG \(.*?:\d+\) ", "", ln) for ln in text.splitlines() if ln.startswith("LOG")]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("opts, out", [("--rand-prune=4.0", "lda.1.acc"),
                                       ("--rand-prune=4.0 --binary=false", "lda.1.txt.acc"),
                                       ("--binary=false", "lda.0.txt.acc")])
def test_acc_lda_stats_is_kaldis(case: str, opts: str, out: str, tmp_path: Path,
                                 capsys: pytest.CaptureFixture) -> None:
    ref = _case(case)
    status, err = _run(capsys, ref, f"nnet3-acc-lda-stats {opts} init.raw "
                       f"ark:../../train/{case}/egs.ark {tmp_path / out}")
    assert status == 0, err
    assert (tmp_path / out).read_bytes() == (ref / out).read_bytes()
    kaldi_log = {"lda.1.acc": "log.acc_lda.txt", "lda.1.txt.acc": "log.acc_lda_t.txt",
                 "lda.0.txt.acc": "log.acc_lda_0.txt"}[out]
    ours = _log_lines(err)[:2]
    theirs = _log_lines((ref / kaldi_log).read_text())[:2]
    assert ours == [t.replace(out, str(tmp_path / out)) for t in theirs]


@pytest.mark.parametrize("case", CASES)
def test_sum_lda_accs_is_kaldis(case: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = _case(case)
    status, err = _run(capsys, ref, f"sum-lda-accs {tmp_path / 'lda_stats'} lda.1.acc")
    assert status == 0, err
    assert (tmp_path / "lda_stats").read_bytes() == (ref / "lda_stats").read_bytes()
    # Text and binary inputs mixed: the counts add up.
    status, err = _run(capsys, ref, f"sum-lda-accs --binary=false {tmp_path / 'sum.txt'} "
                       "lda.1.txt.acc lda.0.txt.acc lda.1.acc")
    assert status == 0, err
    text = (tmp_path / "sum.txt").read_text()
    assert text.startswith("<LDAACCS> <VECSIZE> 100 <NUMCLASSES> 32 <ZERO_ACCS>  [ ")
    counts = [np.array(re.search(r"<ZERO_ACCS>\s+\[([^\]]*)\]", (ref / n).read_text(
        encoding="latin-1")).group(1).split(), dtype=np.float64)
        for n in ("lda.1.txt.acc", "lda.0.txt.acc")]
    total = np.array(re.search(r"<ZERO_ACCS>\s+\[([^\]]*)\]", text).group(1).split(),
                     dtype=np.float64)
    assert np.array_equal(total, 2 * counts[0] + counts[1])


def _figures(text: str) -> dict[str, object]:
    values = re.search(r"LDA singular values are  \[ ([^\]]*)\]", text).group(1).split()
    return {"count": re.search(r"Data count is (\S+)", text).group(1),
            "values": np.array(values, dtype=np.float64),
            "sum_all": float(re.search(r"Sum of all singular values is (\S+)", text).group(1)),
            "sum_sel": float(re.search(r"Sum of selected singular values is (\S+)",
                                       text).group(1))}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("opts, out, kaldi_log", [
    ("", "lda.mat", "log.get_transform.txt"),
    ("--dim=20 --binary=false", "lda_dim.txt.mat", "log.get_transform_dim.txt")])
def test_feature_transform_is_kaldis(case: str, opts: str, out: str, kaldi_log: str,
                                     tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = _case(case)
    status, err = _run(capsys, ref, f"nnet-get-feature-transform {opts} {tmp_path / out} "
                       "lda_stats")
    assert status == 0, err
    ours_r, kaldi_r = open_kaldi_object(str(tmp_path / out)), open_kaldi_object(str(ref / out))
    assert ours_r.binary == kaldi_r.binary == (out == "lda.mat")
    ours, kaldi = ours_r.read_matrix(), kaldi_r.read_matrix()
    assert ours.shape == kaldi.shape == ((100 if out == "lda.mat" else 20), 101)
    # Rows are defined up to sign (and rotation within equal singular values).
    a, b = ours.astype(np.float64), kaldi.astype(np.float64)
    diff = np.abs(a.T @ a - b.T @ b).max() / np.abs(b.T @ b).max()
    assert diff < 1e-5, diff
    # The printed figures (the null directions' singular values are rounding noise).
    f, g = _figures(err), _figures((ref / kaldi_log).read_text())
    assert f["count"] == g["count"]
    big = g["values"] > 1e-10 * g["values"].max()
    assert f["values"].shape == g["values"].shape and big.sum() == 31
    np.testing.assert_allclose(f["values"][big], g["values"][big], rtol=5e-6)
    assert np.all(f["values"][~big] < 1e-10 * g["values"].max())
    assert f["sum_all"] == pytest.approx(g["sum_all"], rel=5e-6)
    assert f["sum_sel"] == pytest.approx(g["sum_sel"], rel=5e-6)
    assert "Applied ceiling" not in err and "Applied ceiling" not in (ref / kaldi_log).read_text()


def test_extra_outputs_and_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ref = _case("affine_xent")
    status, err = _run(capsys, ref, f"nnet-get-feature-transform --write-cholesky="
                       f"{tmp_path / 'chol'} --write-within-covar={tmp_path / 'wc'} "
                       f"{tmp_path / 'm'} lda_stats")
    assert status == 0, err
    from pynnet3.io.packed_matrix import read_packed_matrix, symmetric_from_lower
    from pynnet3.train.lda import read_lda_stats

    chol = read_packed_matrix(open_kaldi_object(str(tmp_path / "chol")))
    within = symmetric_from_lower(read_packed_matrix(open_kaldi_object(str(tmp_path / "wc"))))
    total, between, _, _ = read_lda_stats([str(ref / "lda_stats")]).get_stats()
    np.testing.assert_allclose(chol @ chol.T, total - between, atol=1e-6)
    np.testing.assert_allclose(within, total - between, atol=1e-6)
    # No egs: Kaldi's "Accumulated no stats." error.
    (tmp_path / "empty.ark").write_bytes(b"")
    status, err = _run(capsys, ref, f"nnet3-acc-lda-stats init.raw ark:{tmp_path / 'empty.ark'} "
                       f"{tmp_path / 'x.acc'}")
    assert status == 1 and "Accumulated no stats." in err.splitlines()[-1]
    assert not (tmp_path / "x.acc").exists()
    status, err = _run(capsys, ref, "sum-lda-accs only-one-arg")
    assert status == 1 and "Usage: sum-lda-accs" in err


@pytest.mark.slow
def test_binaries_run_as_commands(tmp_path: Path) -> None:
    """The installed entry points: a pipe between two of them, as recipes use."""
    import os

    ref = _case("affine_xent")
    code = ("import sys; from pynnet3.cli.{} import main; sys.exit(main())")
    # Run in the case's folder: a relative PYTHONPATH (PYTHONPATH=src) must stay valid.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p))
    acc = subprocess.run([sys.executable, "-c", code.format("acc_lda_stats"), "--rand-prune=4.0",
                          "init.raw", "ark:../../train/affine_xent/egs.ark", "-"], cwd=ref,
                         env=env, capture_output=True, timeout=300)
    assert acc.returncode == 0, acc.stderr.decode()
    assert acc.stdout == (ref / "lda.1.acc").read_bytes()
    out = tmp_path / "lda.mat"
    fte = subprocess.run([sys.executable, "-c", code.format("get_feature_transform"), str(out),
                          "-"], input=acc.stdout, capture_output=True, timeout=300)
    assert fte.returncode == 0, fte.stderr.decode()
    assert fte.stderr.decode().splitlines()[0] == f"nnet-get-feature-transform {out} -"
    assert out.read_bytes()[:2] == b"\0B"
