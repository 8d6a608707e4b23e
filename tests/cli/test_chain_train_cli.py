"""nnet3-chain-compute-deriv, -compute-prob, -train and -combine against real
Kaldi on the reference chain setup (../shared/reference/chain; skipped when
absent)."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.model_io import read_nnet
from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader
from tests.helpers import reference_dir, run_binary

CHAIN_OPTS = ["--l2-regularize=5e-05", "--leaky-hmm-coefficient=0.1", "--xent-regularize=0.1",
              "--out-of-range-regularize=0.01"]
PROB_RE = re.compile(r"Overall log-probability for '([^']+)' is (.*) per frame, over (\S+) "
                     r"frames")
TRAIN_RE = re.compile(r"Overall average objective function for '([^']+)' is (.*) over (\S+) "
                      r"frames")


def chain_dir(*names: str) -> Path:
    return reference_dir(*(f"chain/{n}" for n in names)) / "chain"


def numbers(text: str) -> list[float]:
    return [float(v) for v in re.findall(r"-?[0-9.]+(?:e[-+]?[0-9]+)?", text)]


def assert_lines_match(ours: str, kaldi: str, pattern: re.Pattern, rtol: float) -> None:
    a, b = pattern.findall(ours), pattern.findall(kaldi)
    assert [x[0] for x in a] == [x[0] for x in b] and b, (a, b)
    for (name, va, wa), (_, vb, wb) in zip(a, b):
        assert float(wa) == float(wb)
        na, nb = numbers(va), numbers(vb)
        assert len(na) == len(nb), (va, vb)
        # the l2 terms are tiny: compare them relative to the objective
        scale = max(abs(x) for x in nb)
        for x, y in zip(na, nb):
            assert abs(x - y) <= rtol * scale, (name, va, vb)


def read_matrices(path: Path) -> dict[str, np.ndarray]:
    with SequentialTableReader(f"ark:{path}", MATRIX_HOLDER) as reader:
        return dict(reader)


def model_arrays(path: str, kinds: str) -> dict:
    """Float arrays of updatable components ('params') or BatchNorm stats ('bn')."""
    nnet = read_nnet(path)
    out = {}
    for name, comp in zip(nnet.component_names, nnet.components):
        if (kinds == "params") != comp.is_updatable():
            continue
        if kinds == "bn" and comp.type_name != "BatchNormComponent":
            continue
        for attr, value in vars(comp).items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                out[(name, attr)] = value.astype(np.float64)
    return out


@pytest.mark.parametrize("which,model,bn_test", [("0", "0.raw", "false"), ("1", "1.raw", "true")])
def test_compute_deriv_matches_kaldi(tmp_path: Path, which: str, model: str, bn_test: str,
                                     capsys) -> None:
    """KEY/objf_l2_weight within 1e-4, KEY/output, KEY/deriv, KEY/xent_deriv and
    KEY/output_xent within 1e-3 of their largest value (BatchNorm in training
    mode for 0.raw, test mode for 1.raw, as deriv.0.ark / deriv.1.ark)."""
    d = chain_dir(f"deriv.{which}.ark", model, "den.fst", "merged.ark")
    out = tmp_path / "d.ark"
    assert run_binary("nnet3-chain-compute-deriv", f"--batchnorm-test-mode={bn_test}",
                      *CHAIN_OPTS, str(d / model), str(d / "den.fst"),
                      f"ark:{d / 'merged.ark'}", f"ark:{out}") == 0
    ours, kaldi = read_matrices(out), read_matrices(d / f"deriv.{which}.ark")
    assert set(ours) == set(kaldi)
    for key, ref in kaldi.items():
        got = ours[key]
        assert got.shape == ref.shape, key
        tol = 1e-4 * np.abs(ref[0, 0]) if key.endswith("objf_l2_weight") else \
            1e-3 * np.abs(ref).max()
        assert np.abs(got - ref).max() <= tol, key
    err = capsys.readouterr().err
    assert re.search(r"eg merged-0-32 objf -3\d\d\.\d+ ", err)


@pytest.mark.parametrize("model,extra,log", [
    ("0.raw", [], "log.compute_prob.0.txt"),
    ("1.raw", [], "log.compute_prob.1.txt"),
    ("0.raw", ["--batchnorm-test-mode=false"], "log.compute_prob.0.bntrain.txt")])
def test_compute_prob_matches_kaldi(model: str, extra: list[str], log: str, capsys) -> None:
    """Kaldi's printed lines (names, order, the 'X + Y = Z' form when there is
    an l2 term, frame counts), numbers within 5e-4 relative."""
    d = chain_dir(model, "den.fst", "merged.ark", log)
    assert run_binary("nnet3-chain-compute-prob", "--numerator-graph-threads=1", *CHAIN_OPTS,
                      *extra, str(d / model), str(d / "den.fst"), f"ark:{d / 'merged.ark'}") == 0
    assert_lines_match(capsys.readouterr().err, (d / log).read_text(), PROB_RE, 5e-4)


@pytest.mark.slow
def test_train_matches_kaldi(tmp_path: Path, capsys) -> None:
    """One nnet3-chain-train pass as Kaldi's commands.txt runs it: parameters
    within 1e-3 max abs of 1.txt.raw (measured 6e-5), BatchNorm stats within
    1e-4 relative (the ReLU / log-softmax stats are sampled with Kaldi's rand()
    and are not compared), and the printed objectives."""
    d = chain_dir("0.raw", "den.fst", "merged.ark", "1.txt.raw", "log.train.txt")
    out = tmp_path / "1.raw"
    assert run_binary("nnet3-chain-train", "--srand=1", "--use-gpu=no",
                      "--numerator-graph-threads=1", *CHAIN_OPTS, "--max-param-change=2.0",
                      str(d / "0.raw"), str(d / "den.fst"), f"ark:{d / 'merged.ark'}",
                      str(out)) == 0
    assert_lines_match(capsys.readouterr().err, (d / "log.train.txt").read_text(), TRAIN_RE,
                       5e-4)
    for kinds, tol in (("params", None), ("bn", 1e-4)):
        ours, kaldi = model_arrays(str(out), kinds), model_arrays(str(d / "1.txt.raw"), kinds)
        assert ours.keys() == kaldi.keys() and kaldi
        for key, ref in kaldi.items():
            diff = np.abs(ours[key] - ref).max()
            assert diff <= (1e-3 if tol is None else tol * np.abs(ref).max()), (key, diff)


@pytest.mark.slow
def test_train_cpu_backends_give_the_same_model(tmp_path: Path) -> None:
    """--cpu-backend=numpy (the default) and =numba, with --num-threads=1,
    write byte-identical models on the reference minibatches (the backends
    differ only in how the row copies run)."""
    d = chain_dir("0.raw", "den.fst", "merged.ark")
    outs = []
    for backend in ("numpy", "numba"):
        out = tmp_path / f"{backend}.raw"
        assert run_binary("nnet3-chain-train", "--srand=1", "--use-gpu=no",
                          f"--cpu-backend={backend}", "--num-threads=1",
                          "--numerator-graph-threads=1", *CHAIN_OPTS, "--max-param-change=2.0",
                          str(d / "0.raw"), str(d / "den.fst"), f"ark:{d / 'merged.ark'}",
                          str(out)) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_combine_matches_kaldi(tmp_path: Path, capsys) -> None:
    """nnet3-chain-combine of 0.raw and 1.raw: combined.txt.raw within 1e-4
    relative (parameters and the recomputed BatchNorm stats), and Kaldi's
    objective lines."""
    d = chain_dir("0.raw", "1.raw", "den.fst", "merged.ark", "combined.txt.raw",
                  "log.combine.txt")
    out = tmp_path / "combined.raw"
    assert run_binary("nnet3-chain-combine", "--use-gpu=no", "--numerator-graph-threads=1",
                      *CHAIN_OPTS, str(d / "den.fst"), str(d / "0.raw"), str(d / "1.raw"),
                      f"ark:{d / 'merged.ark'}", str(out)) == 0
    err = capsys.readouterr().err
    kaldi_log = (d / "log.combine.txt").read_text()
    assert_lines_match(err, kaldi_log, PROB_RE, 5e-4)
    for pat in (r"objective function using the last model is (\S+)",
                r"Combining last 2 models, objective function is (\S+)"):
        a, b = re.search(pat, err), re.search(pat, kaldi_log)
        assert a and b and abs(float(a[1]) - float(b[1])) <= 1e-4 * abs(float(b[1])), pat
    for kinds in ("params", "bn"):
        ours, kaldi = model_arrays(str(out), kinds), model_arrays(str(d / "combined.txt.raw"),
                                                                  kinds)
        assert ours.keys() == kaldi.keys() and kaldi
        for key, ref in kaldi.items():
            assert np.abs(ours[key] - ref).max() <= 1e-4 * np.abs(ref).max(), key
