"""Training progress read back from a recipe's logs (nnet3-plot-progress)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pynnet3.train.progress_logs import (parse_compute_prob_log, parse_train_log,
                                         read_training_progress)

# Lines as nnet3-compute-prob and nnet3-train write them (pynnet3's, as Kaldi's).
PROB = """nnet3-compute-prob exp/tdnn/3.mdl 'ark,bg:nnet3-copy-egs ark:valid.egs ark:- |'
LOG (nnet3-compute-prob[pynnet3-0.1.0]:print_total_stats():diagnostics.py:182) Overall log-likelihood for 'output' is -0.979007 per frame, over 1188.5 frames.
LOG (nnet3-compute-prob[pynnet3-0.1.0]:print_total_stats():diagnostics.py:188) Overall accuracy for 'output' is 0.690366 per frame, over 1188.5 frames.
"""
PROB_XENT = """LOG (nnet3-compute-prob[5.5]:PrintTotalStats():nnet-diagnostics.cc:194) Overall log-likelihood for 'output-xent' is -2.5 per frame, over 100 frames.
LOG (nnet3-compute-prob[5.5]:PrintTotalStats():nnet-diagnostics.cc:194) Overall log-likelihood for 'output' is -1.25 per frame, over 100 frames.
"""
TRAIN = """LOG (nnet3-train[pynnet3-0.1.0]:print_stats_for_this_phase():trainer.py:176) Average objective function for 'output' for minibatches 0-9 is -1.63037 over 640 frames.
LOG (nnet3-train[pynnet3-0.1.0]:print_total_stats():trainer.py:200) Overall average objective function for 'output' is -1.47346 over 2176 frames.
"""


def test_parse_lines() -> None:
    assert parse_compute_prob_log(PROB) == (-0.979007, 0.690366)
    assert parse_compute_prob_log(PROB_XENT) == (-1.25, None)
    assert parse_compute_prob_log(PROB_XENT, "output-xent") == (-2.5, None)
    assert parse_compute_prob_log("nnet3-compute-prob a b\n") == (None, None)
    assert parse_train_log(TRAIN) == (-1.47346, 2176.0)
    assert parse_train_log(TRAIN.splitlines()[0]) is None   # an unfinished job


def _write(log: Path, name: str, text: str) -> None:
    (log / name).write_text(text)


def test_read_exp_dir(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.mkdir()
    for it, (v, t, acc) in enumerate([(-3.0, -3.1, 0.1), (-1.5, -1.4, 0.5), (-1.0, -0.9, 0.7)]):
        _write(log, f"compute_prob_valid.{it}.log", PROB.replace("-0.979007", str(v))
               .replace("0.690366", str(acc)))
        _write(log, f"compute_prob_train.{it}.log", PROB.replace("-0.979007", str(t)))
    # Iteration 10 sorts after 2 (numbers, not text); a word-named one stays apart.
    _write(log, "compute_prob_valid.10.log", PROB.replace("-0.979007", "-0.5"))
    _write(log, "compute_prob_valid.combined.log", PROB.replace("-0.979007", "-0.4"))
    # Two jobs of iteration 0, frame-weighted; job 2 of iteration 1 unfinished.
    _write(log, "train.0.1.log", TRAIN)
    _write(log, "train.0.2.log", TRAIN.replace("-1.47346", "-2.0").replace("2176", "1000"))
    _write(log, "train.1.1.log", TRAIN.replace("-1.47346", "-1.0"))
    _write(log, "train.1.2.log", "nnet3-train ...\n")
    _write(log, "compute_prob_valid.3.log", "")            # still running
    _write(log, "progress.1.log", PROB)                     # not a diagnostics log
    p = read_training_progress(tmp_path)
    assert p.valid_objf.iters == [0, 1, 2, 10]
    assert p.valid_objf.values == [-3.0, -1.5, -1.0, -0.5]
    assert p.valid_objf.named == {"combined": -0.4}
    assert p.train_objf.values == [-3.1, -1.4, -0.9]
    assert p.valid_acc.values == [0.1, 0.5, 0.7, 0.690366]
    assert p.train_jobs_objf.iters == [0, 1]
    assert p.train_jobs_objf.values[0] == pytest.approx((-1.47346 * 2176 - 2.0 * 1000) / 3176)
    assert p.train_jobs_objf.values[1] == -1.0
    assert p.num_logs == 5 + 3 + 3   # 5 valid, 3 train diagnostics, 3 finished train jobs
    assert read_training_progress(log).valid_objf.values == p.valid_objf.values
    assert read_training_progress(tmp_path / "missing").is_empty()
