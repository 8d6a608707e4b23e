"""nnet3-compute-batch (compute/batch_computer.py, Kaldi's NnetBatchComputer):
task splitting as Kaldi's SplitUtteranceIntoTasks, minibatch sizes as
GetActualMinibatchSize, and the output against real Kaldi's nnet3-compute
on reference/small/tdnn_xent_nnet3_wsj_1b (a TDNN with an iVector: the same
output whatever the chunking) and against pynnet3's nnet3-compute."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from pynnet3.compute.batch_computer import (BatchComputeConfig, NnetBatchComputer,
                                            NnetBatchComputerOptions, NnetInferenceTask,
                                            add_online_ivectors, nnet3_compute_batch,
                                            output_frame_info)
from pynnet3.compute.decodable import NnetSimpleComputationOptions
from pynnet3.compute.utterances import Nnet3ComputeConfig, nnet3_compute
from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader
from tests.helpers import reference_dir

ROOT = Path(__file__).resolve().parents[2]
CASE = "small/tdnn_xent_nnet3_wsj_1b"


def _matrices(path: Path) -> dict[str, np.ndarray]:
    with SequentialTableReader(f"ark:{path}", MATRIX_HOLDER) as r:
        return {k: np.array(v) for k, v in r}


def test_output_frame_info_as_kaldi() -> None:
    opts = NnetSimpleComputationOptions(frame_subsampling_factor=1)
    batch = NnetBatchComputerOptions()
    tasks = output_frame_info(opts, batch, 23, 10)
    # Two full chunks and a last one moved back to end at frame 23: its
    # first 7 outputs overlap the second chunk and are not used.
    assert [(t.first_used_output_frame_index, t.num_initial_unused_output_frames,
             t.num_used_output_frames, t.num_output_frames) for t in tasks] == [
        (0, 0, 10, 10), (10, 0, 10, 10), (20, 7, 3, 10)]
    short = output_frame_info(opts, batch, 4, 10)
    assert [(t.num_output_frames, t.num_used_output_frames, t.is_irregular)
            for t in short] == [(10, 4, False)]
    batch.ensure_exact_final_context = True
    exact = output_frame_info(opts, batch, 4, 10)
    assert [(t.num_output_frames, t.num_used_output_frames, t.is_irregular)
            for t in exact] == [(4, 4, True)]


def test_online_ivector_rows() -> None:
    opts = NnetSimpleComputationOptions(frame_subsampling_factor=3)
    tasks = output_frame_info(opts, NnetBatchComputerOptions(), 40, 17)
    ivectors = np.arange(12, dtype=np.float32).reshape(12, 1)   # period 10: 120 frames
    add_online_ivectors(opts, ivectors, 10, tasks)
    # Middle output frame of each chunk (begin + 17 // 2) * 3 // 10.
    begins = [0, 17, 23]
    assert [int(t.ivector[0]) for t in tasks] == [(b + 8) * 3 // 10 for b in begins]


def test_partial_minibatch_sizes() -> None:
    class _Stub(NnetBatchComputer):
        def __init__(self, opts: NnetBatchComputerOptions) -> None:
            self.batch_opts = opts

    computer = _Stub(NnetBatchComputerOptions(minibatch_size=128, partial_minibatch_factor=0.5))
    task = NnetInferenceTask(np.zeros((1, 1)), 0, 1, 1, 0, 1, 0, False)
    # 128 -> 64 -> 32 -> 16 while fewer tasks than half of it remain (so
    # one task gets a minibatch of 2: 1 < int(0.5 * 2) is false).
    assert [computer._actual_minibatch_size([task] * k) for k in (200, 64, 63, 10, 8, 7, 1)] == [
        128, 128, 64, 16, 16, 8, 2]
    computer.batch_opts.partial_minibatch_factor = 0.0
    assert computer._actual_minibatch_size([task]) == 128


@pytest.mark.parametrize("golden,options,batch", [
    ("out_a.ark", {}, dict(minibatch_size=4, edge_minibatch_size=2)),
    pytest.param("out_b.ark", dict(frames_per_chunk=20, extra_left_context=15,
                                   extra_right_context=5),
                 dict(minibatch_size=3, edge_minibatch_size=2), marks=pytest.mark.slow),
    # Edge tasks (different context at the utterance's ends) and exact-length
    # short utterances: other computations, the same output.
    pytest.param("out_b.ark", dict(frames_per_chunk=20, extra_left_context=15,
                                   extra_right_context=5, extra_left_context_initial=0,
                                   extra_right_context_final=2),
                 dict(minibatch_size=8, edge_minibatch_size=1,
                      ensure_exact_final_context=True), marks=pytest.mark.slow),
])
def test_matches_kaldi_nnet3_compute(tmp_path: Path, golden: str, options: dict,
                                     batch: dict) -> None:
    case = reference_dir(f"{CASE}/{golden}", f"{CASE}/1.raw") / CASE
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, **options)
    config = BatchComputeConfig(opts=opts, batch_opts=NnetBatchComputerOptions(**batch),
                                ivector_rspecifier=f"ark:{case / 'ivectors_test.ark'}",
                                use_disk_cache=False)
    out = tmp_path / "batch.ark"
    result = nnet3_compute_batch(config, str(case / "1.raw"), f"ark:{case / 'feats_test.ark'}",
                                 f"ark:{out}")
    ref = _matrices(case / golden)
    ours = _matrices(out)
    assert result.num_success == 3 and list(ours) == list(ref)
    for utt in ref:
        assert ours[utt].shape == ref[utt].shape
        np.testing.assert_allclose(ours[utt], ref[utt], rtol=1e-4, atol=1e-4, err_msg=utt)
    # And pynnet3's nnet3-compute with the same options.
    mine = tmp_path / "compute.ark"
    nnet3_compute(Nnet3ComputeConfig(opts=opts, ivector_rspecifier=config.ivector_rspecifier,
                                     use_disk_cache=False), str(case / "1.raw"),
                  f"ark:{case / 'feats_test.ark'}", f"ark:{mine}")
    for utt, mat in _matrices(mine).items():
        np.testing.assert_allclose(ours[utt], mat, rtol=1e-5, atol=1e-5, err_msg=utt)


def test_cli_apply_exp_and_missing_ivector(tmp_path: Path) -> None:
    case = reference_dir(f"{CASE}/out_a.ark", f"{CASE}/1.raw") / CASE
    module, func = BINARIES["nnet3-compute-batch"].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYNNET3_CACHE_DIR=str(tmp_path / "c"))
    ivectors = tmp_path / "iv.txt"
    # Only test02's iVector: the others fail (WARNING) and are not written.
    from pynnet3.io.table import VECTOR_HOLDER, TableWriter
    with SequentialTableReader(f"ark:{case / 'ivectors_test.ark'}", VECTOR_HOLDER) as r:
        vectors = dict(r)
    w = TableWriter(f"ark,t:{ivectors}", VECTOR_HOLDER)
    w.write("test02", vectors["test02"])
    w.close()
    out = tmp_path / "o.ark"
    p = subprocess.run([sys.executable, "-c", code, "--apply-exp=true", "--use-gpu=no",
                        f"--ivectors=ark:{ivectors}", str(case / "1.raw"),
                        f"ark:{case / 'feats_test.ark'}", f"ark:{out}"],
                       capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "No iVector available for utterance test01" in p.stderr
    assert "Done 1 utterances, failed for 2" in p.stderr
    ours = _matrices(out)
    assert list(ours) == ["test02"]
    ref = _matrices(case / "out_a.ark")["test02"]
    np.testing.assert_allclose(ours["test02"], np.exp(ref), rtol=1e-4, atol=1e-6)
