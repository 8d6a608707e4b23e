"""nnet3-compute-looped as a binary: real Kaldi's looped outputs of
reference/small/tdnn_lstm_swbd_1e (a TDNN-LSTM with an iVector), --apply-exp,
online iVectors, skipped utterances, exit statuses, a network that cannot be
looped, and the usage text."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import reference_dir, run_binary

kaldiio = pytest.importorskip("kaldiio")

CASE = "tdnn_lstm_swbd_1e"
L2 = ["--frames-per-chunk=30", "--frame-subsampling-factor=3", "--extra-left-context-initial=5"]


def load(path: Path) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in kaldiio.load_ark(str(path))}


@pytest.fixture(scope="module")
def src() -> Path:
    return reference_dir(f"small/{CASE}/out_looped_L2.ark") / "small" / CASE


def test_matches_kaldi_looped_with_apply_exp_and_a_missing_ivector(
        src: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ivectors = load(src / "ivectors_test.ark")
    del ivectors["test01"]
    kaldiio.save_ark(str(tmp_path / "two.ark"), ivectors)
    out = tmp_path / "out.ark"
    status = run_binary("nnet3-compute-looped", *L2, "--apply-exp", "--use-gpu=no",
                        f"--ivectors=ark:{tmp_path}/two.ark", str(src / "1.raw"),
                        f"ark:{src}/feats_test.ark", f"ark:{out}")
    err = capsys.readouterr().err
    assert status == 0, err
    assert "WARNING (nnet3-compute-looped[" in err
    assert "No iVector available for utterance test01" in err
    assert "Done 2 utterances, failed for 1" in err and "looped compilation" in err
    ours = load(out)
    ref = load(src / "out_looped_L2.ark")
    assert sorted(ours) == ["test02", "test03"]
    for utt, value in ours.items():
        assert value.shape == ref[utt].shape
        # Kaldi's log-domain output within 1e-3 (the bound), here after exp
        np.testing.assert_allclose(np.log(value), ref[utt], rtol=0, atol=1e-3, err_msg=utt)


def test_online_ivectors_and_exit_status(src: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture) -> None:
    """Online iVectors repeating each utterance's vector give the --ivectors
    output; nothing computed -> exit status 1."""
    feats = load(src / "feats_test.ark")
    online = {k: np.tile(v, ((feats[k].shape[0] + 9) // 10, 1))
              for k, v in load(src / "ivectors_test.ark").items()}
    kaldiio.save_ark(str(tmp_path / "online.ark"), online)
    out = tmp_path / "out.ark"
    status = run_binary("nnet3-compute-looped", *L2, "--online-ivectors=ark:"
                        f"{tmp_path}/online.ark", "--online-ivector-period=10",
                        str(src / "1.raw"), f"ark:{src}/feats_test.ark", f"ark:{out}")
    assert status == 0, capsys.readouterr().err
    ref = load(src / "out_looped_L2.ark")
    for utt, value in load(out).items():
        np.testing.assert_allclose(value, ref[utt], rtol=0, atol=1e-3, err_msg=utt)
    capsys.readouterr()
    status = run_binary("nnet3-compute-looped", "--online-ivectors=ark:"
                        f"{tmp_path}/online.ark", str(src / "1.raw"),
                        f"ark:{src}/feats_test.ark", "ark:/dev/null")
    assert status == 1 and "--online-ivector-period" in capsys.readouterr().err
    kaldiio.save_ark(str(tmp_path / "none.ark"), {"other": np.zeros(20, np.float32)})
    status = run_binary("nnet3-compute-looped", f"--ivectors=ark:{tmp_path}/none.ark",
                        str(src / "1.raw"), f"ark:{src}/feats_test.ark", "ark:/dev/null")
    err = capsys.readouterr().err
    assert status == 1 and "Done 0 utterances, failed for 3" in err


def test_missing_ivectors_and_unloopable_network(src: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    status = run_binary("nnet3-compute-looped", str(src / "1.raw"),
                        f"ark:{src}/feats_test.ark", "ark:/dev/null")
    err = capsys.readouterr().err
    assert status == 1 and "ERROR (nnet3-compute-looped[" in err
    assert "expects iVectors but none provided" in err and "Traceback" not in err
    backward = reference_dir("random/028/final.raw") / "random" / "028" / "final.raw"
    status = run_binary("nnet3-compute-looped", str(backward), f"ark:{src}/feats_test.ark",
                        "ark:/dev/null")
    err = capsys.readouterr().err
    assert status == 1 and "cannot be evaluated by a looped computation" in err
    assert "future frames" in err and "Traceback" not in err


def test_usage(capsys: pytest.CaptureFixture) -> None:
    assert run_binary("nnet3-compute-looped", "--help") == 0
    out = capsys.readouterr().out
    assert "Usage: nnet3-compute-looped [options] <nnet-in> <features-rspecifier> " in out
    for option in ("--frames-per-chunk", "--extra-left-context-initial",
                   "--frame-subsampling-factor", "--ivectors", "--online-ivectors",
                   "--online-ivector-period", "--apply-exp", "--use-priors", "--use-gpu",
                   "--debug-computation", "--optimization.propagate-in-place",
                   "--computation.debug"):
        assert option in out, option
    assert "--extra-right-context" not in out        # a looped computation has none
    assert run_binary("nnet3-compute-looped", "a", "b") == 1
    assert "wrong number of arguments" in capsys.readouterr().err
