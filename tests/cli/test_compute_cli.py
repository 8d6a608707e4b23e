"""nnet3-compute as a binary: tables (scp, ark, pipes, text), iVector options,
Kaldi's LOG/WARNING/ERROR lines and exit codes, against real Kaldi outputs of
reference/small/tdnn_xent_nnet3_wsj_1b (a TDNN with a 20-dim iVector)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from pynnet3.cli.progress import progress_wanted
from tests.helpers import reference_dir

kaldiio = pytest.importorskip("kaldiio")

ROOT = Path(__file__).resolve().parents[2]
CASE = "tdnn_xent_nnet3_wsj_1b"


def run(*args: str, cache: Path, cwd: Path) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    env = dict(os.environ, PYNNET3_CACHE_DIR=str(cache),
               PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, *args[1:]], capture_output=True,
                          timeout=600, env=env, cwd=cwd)


def load(path_or_bytes: Path | bytes) -> dict[str, np.ndarray]:
    source = io.BytesIO(path_or_bytes) if isinstance(path_or_bytes, bytes) else str(path_or_bytes)
    return {k: np.asarray(v) for k, v in kaldiio.load_ark(source)}


def assert_tables_close(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray],
                        rtol: float = 1e-4, atol: float = 1e-4) -> None:
    assert sorted(ours) == sorted(ref)
    for key in ref:
        np.testing.assert_allclose(ours[key], ref[key], rtol=rtol, atol=atol, err_msg=key)


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    src = reference_dir() / "small" / CASE
    work = tmp_path_factory.mktemp("compute_cli")
    feats = load(src / "feats_test.ark")
    kaldiio.save_ark(str(work / "feats.ark"), feats, scp=str(work / "feats.scp"))
    return {"src": src, "work": work, "cache": work / "cache"}


def test_scp_input_binary_stdout_and_logs(case: dict[str, Path]) -> None:
    src, work = case["src"], case["work"]
    p = run("nnet3-compute", "--use-gpu=no", f"--ivectors=ark:{src}/ivectors_test.ark",
            str(src / "1.raw"), "scp:feats.scp", "ark:-", cache=case["cache"], cwd=work)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert err.splitlines()[0].startswith("nnet3-compute --use-gpu=no --ivectors=")
    assert "LOG (nnet3-compute[" in err and "Time taken " in err
    assert "real-time factor assuming 100 frames/sec is " in err
    assert "Done 3 utterances, failed for 0" in err
    assert "\r" not in err                      # no progress bar off a terminal
    assert_tables_close(load(p.stdout), load(src / "out_a.ark"))


def test_pipe_input_text_output_chunking_and_utt2spk(case: dict[str, Path]) -> None:
    """out_b's chunking options; iVectors looked up per speaker."""
    src, work = case["src"], case["work"]
    ivectors = load(src / "ivectors_test.ark")
    speakers = {utt: f"spk{i}" for i, utt in enumerate(sorted(ivectors))}
    kaldiio.save_ark(str(work / "spk_ivectors.ark"),
                     {speakers[u]: v for u, v in ivectors.items()})
    (work / "utt2spk").write_text("".join(f"{u} {s}\n" for u, s in sorted(speakers.items())))
    p = run("nnet3-compute", "--frames-per-chunk=20", "--extra-left-context=15",
            "--extra-right-context=5", "--ivectors=ark:spk_ivectors.ark",
            "--utt2spk=ark:utt2spk", str(src / "1.raw"), f"ark:cat {src}/feats_test.ark |",
            "ark,t:out_b.txt", cache=case["cache"], cwd=work)
    assert p.returncode == 0, p.stderr.decode()
    assert (work / "out_b.txt").read_bytes().startswith(b"test01  [\n")
    # Text archives hold 7 significant digits.
    assert_tables_close(load(work / "out_b.txt"), load(src / "out_b.ark"), rtol=2e-4)


def test_apply_exp_subsampling_and_missing_ivector(case: dict[str, Path]) -> None:
    """A non-recurrent network with --frame-subsampling-factor=3 gives every
    third row of out_a; an utterance without an iVector is skipped."""
    src, work = case["src"], case["work"]
    ivectors = load(src / "ivectors_test.ark")
    del ivectors["test02"]
    kaldiio.save_ark(str(work / "two_ivectors.ark"), ivectors)
    p = run("nnet3-compute", "--apply-exp", "--frame-subsampling-factor=3",
            "--ivectors=ark:two_ivectors.ark", str(src / "1.raw"),
            f"ark:{src}/feats_test.ark", "ark:out_exp.ark", cache=case["cache"], cwd=work)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert ("Increasing --frames-per-chunk from 50 to 51 to make it a multiple of "
            "--frame-subsampling-factor=3") in err
    assert "WARNING (nnet3-compute[" in err and "No iVector available for utterance test02" in err
    assert "Done 2 utterances, failed for 1" in err
    ref = {k: np.exp(v[::3]) for k, v in load(src / "out_a.ark").items() if k != "test02"}
    assert_tables_close(load(work / "out_exp.ark"), ref, rtol=2e-4, atol=1e-6)


def test_online_ivectors(case: dict[str, Path]) -> None:
    """Online iVectors that repeat each utterance's vector give out_a (as Kaldi
    found for the vosk model)."""
    src, work = case["src"], case["work"]
    feats = load(src / "feats_test.ark")
    online = {k: np.tile(v, ((feats[k].shape[0] + 9) // 10, 1))
              for k, v in load(src / "ivectors_test.ark").items()}
    kaldiio.save_ark(str(work / "online.ark"), online, scp=str(work / "online.scp"))
    p = run("nnet3-compute", "--online-ivectors=scp:online.scp", "--online-ivector-period=10",
            str(src / "1.raw"), f"ark:{src}/feats_test.ark", "ark:out_online.ark",
            cache=case["cache"], cwd=work)
    assert p.returncode == 0, p.stderr.decode()
    assert_tables_close(load(work / "out_online.ark"), load(src / "out_a.ark"))
    p = run("nnet3-compute", "--online-ivectors=scp:online.scp", str(src / "1.raw"),
            f"ark:{src}/feats_test.ark", "ark:/dev/null", cache=case["cache"], cwd=work)
    assert p.returncode == 1 and "--online-ivector-period" in p.stderr.decode()


def test_missing_ivectors_is_a_clear_error(case: dict[str, Path]) -> None:
    src = case["src"]
    p = run("nnet3-compute", str(src / "1.raw"), f"ark:{src}/feats_test.ark", "ark:/dev/null",
            cache=case["cache"], cwd=case["work"])
    err = p.stderr.decode()
    assert p.returncode == 1
    assert "ERROR (nnet3-compute[" in err
    assert "Neural net expects 'ivector' features with dimension 20 but you provided 0" in err
    assert "--ivectors" in err and "Traceback" not in err


def test_usage() -> None:
    p = run("nnet3-compute", "--help", cache=Path("/nonexistent"), cwd=ROOT)
    out = p.stdout.decode()
    assert p.returncode == 0
    assert "Usage: nnet3-compute [options] <nnet-in> <features-rspecifier> " in out
    for option in ("--frames-per-chunk", "--extra-left-context-initial", "--online-ivectors",
                   "--use-priors", "--optimization.propagate-in-place", "--computation.debug",
                   "--use-gpu"):
        assert option in out
    p = run("nnet3-compute", "a", "b", cache=Path("/nonexistent"), cwd=ROOT)
    assert p.returncode == 1 and "wrong number of arguments" in p.stderr.decode()


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal_when_writing_a_file() -> None:
    term = FakeTerminal()
    assert progress_wanted("out.ark", term)
    assert not progress_wanted("-", term) and not progress_wanted("| gzip -c > x", term)
    assert not progress_wanted("out.ark", io.StringIO())


def test_minibatch_size_and_cpu_backends(case: dict[str, Path]) -> None:
    """Chunks one at a time (Kaldi's way), in batches (the default) and with
    the Numba backend all give Kaldi's out_b (several chunks per utterance)."""
    src, work = case["src"], case["work"]
    ref = load(src / "out_b.ark")
    for extra in (["--minibatch-size=1"], ["--minibatch-size=3"], ["--cpu-backend=numba"]):
        p = run("nnet3-compute", *extra, "--use-gpu=no", "--frames-per-chunk=20",
                "--extra-left-context=15", "--extra-right-context=5",
                f"--ivectors=ark:{src}/ivectors_test.ark", str(src / "1.raw"),
                f"ark:{src}/feats_test.ark", "ark:out_mb.ark", cache=case["cache"], cwd=work)
        assert p.returncode == 0, p.stderr.decode()
        assert_tables_close(load(work / "out_mb.ark"), ref)
    p = run("nnet3-compute", "--minibatch-size=0", str(src / "1.raw"),
            f"ark:{src}/feats_test.ark", "ark:/dev/null", cache=case["cache"], cwd=work)
    assert p.returncode == 1 and "--minibatch-size must be >= 1" in p.stderr.decode()


def test_num_threads_gives_the_same_output(case: dict[str, Path]) -> None:
    """Utterances computed by two worker threads are written in input order,
    equal to one thread's (and to Kaldi's)."""
    src, work = case["src"], case["work"]
    outs = {}
    for n in ("1", "2"):
        p = run("nnet3-compute", f"--num-threads={n}", f"--ivectors=ark:{src}/ivectors_test.ark",
                str(src / "1.raw"), f"ark:{src}/feats_test.ark", f"ark:out_threads{n}.ark",
                cache=case["cache"], cwd=work)
        assert p.returncode == 0, p.stderr.decode()
        assert "Done 3 utterances, failed for 0" in p.stderr.decode()
        outs[n] = (work / f"out_threads{n}.ark").read_bytes()
    ref = load(src / "out_a.ark")
    assert list(load(outs["2"])) == list(ref)          # input order
    assert_tables_close(load(outs["2"]), ref)
    assert_tables_close(load(outs["2"]), load(outs["1"]), rtol=1e-6, atol=1e-6)
