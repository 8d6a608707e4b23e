"""Model combination (pynnet3.train.combine, Kaldi's nnet3-combine) at the
library level: the evaluation schedule, --batchnorm-test-mode against real
Kaldi's nnet3-compute-prob / nnet3-average figures, the statistics
recomputation against Kaldi's comb.raw, and the corner cases."""
from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.model_io import read_nnet
from pynnet3.errors import PynnetError
from pynnet3.nnet.components import nonlinearities
from pynnet3.train.combine import (NnetCombineOptions, combine_nnets, compute_objf,
                                   evaluation_counts, has_batchnorm, num_models_per_evaluation,
                                   update_nnet_moving_average)
from pynnet3.train.diagnostics import NnetComputeProb, NnetComputeProbOptions
from pynnet3.train.egs import iter_examples
from pynnet3.train.kaldi_random import GlibcRand
from tests.helpers import reference_dir


def train_dir(case: str) -> Path:
    d = reference_dir() / "train" / case
    if not d.is_dir():
        pytest.skip(f"no reference case {d}")
    return d


def logged_objectives(stderr: str) -> list[float]:
    return [float(x) for x in re.findall(
        r"(?:objective function using the last model is|objective function is) (\S+)", stderr)]


def kaldi_compute_prob(case: str, name: str) -> float:
    text = (train_dir(case) / f"log.compute_prob.{name}.txt").read_text()
    return float(re.search(r"Overall log-likelihood for 'output' is (\S+)", text).group(1))


@pytest.mark.parametrize("num_nnets,max_evals,expected", [
    (1, 30, []),
    (3, 30, [2, 3]),        # every model
    (3, 2, [3]),            # the reference's comb2: 2 models per evaluation
    (7, 3, [4, 7]),         # ceil(7/3) = 3 models per evaluation
    (10, 4, [4, 7, 10]),
    (10, 1, [10]),          # one evaluation besides the first: all models
    (20, 30, list(range(2, 21))),
])
def test_evaluation_schedule(num_nnets: int, max_evals: int, expected: list[int]) -> None:
    """Kaldi evaluates after adding model n (0-based) when (n - 1) %
    num_to_add == num_to_add - 1, and after the last; worked out by hand."""
    assert evaluation_counts(num_nnets, max_evals) == expected
    assert len(expected) <= max_evals


def test_evaluation_schedule_rejects_nonpositive() -> None:
    # (Kaldi divides by zero there.)
    with pytest.raises(PynnetError, match="max-objective-evaluations"):
        num_models_per_evaluation(3, 0)


def test_moving_average_is_the_mean() -> None:
    d = train_dir("affine_xent")
    models = [read_nnet(str(d / f"{n}.raw")) for n in ("0", "1", "1b")]
    avg = copy.deepcopy(models[0])
    for k, m in enumerate(models[1:], start=2):
        update_nnet_moving_average(k, m, avg)
    for c, comp in enumerate(avg.components):
        if comp.is_updatable():
            mean = sum(m.components[c].linear_params.astype(np.float64) for m in models) / 3
            np.testing.assert_allclose(comp.linear_params, mean, rtol=0, atol=1e-6)
    other = read_nnet(str(train_dir("quadratic") / "0.raw"))
    with pytest.raises(PynnetError, match="parameters"):
        update_nnet_moving_average(2, other, avg)


@pytest.mark.parametrize("first,second", [("1", "1b"), ("1b", "1")])
def test_batchnorm_test_mode_matches_kaldi_figures(first: str, second: str, capsys) -> None:
    """--batchnorm-test-mode=true on ngaffine_bn: the objectives are real
    Kaldi's nnet3-compute-prob figures (which uses test mode) of the first
    model and of avg.raw (nnet3-average of 1.raw and 1b.raw: the same float
    arithmetic as a 2-model running average); the better one is kept, still
    in training mode, with its statistics recomputed."""
    d = train_dir("ngaffine_bn")
    out = combine_nnets([str(d / f"{first}.raw"), str(d / f"{second}.raw")],
                        f"ark:{d}/merged.ark", NnetCombineOptions(batchnorm_test_mode=True))
    err = capsys.readouterr().err
    objfs = logged_objectives(err)
    expected = [kaldi_compute_prob("ngaffine_bn", first), kaldi_compute_prob("ngaffine_bn", "avg")]
    assert objfs == pytest.approx(expected, rel=5e-4)
    best = 2 if expected[1] > expected[0] else 1
    assert f"Combining {best} nnets" in err
    assert "Recomputing stats on nnet (affects batch-norm)" in err
    assert has_batchnorm(out)
    reference = read_nnet(str(d / ("avg.raw" if best == 2 else f"{first}.raw")))
    for ours, theirs in zip(out.components, reference.components):
        if ours.type_name == "BatchNormComponent":
            assert not ours.test_mode
        if ours.is_updatable():
            for attr, value in vars(ours).items():
                if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                    assert np.array_equal(value, getattr(theirs, attr)), attr


def test_single_model_in_training_mode_matches_kaldi(capsys) -> None:
    """One model: its objective with BatchNorm in training mode (the default)
    is Kaldi's nnet3-compute-prob --batchnorm-test-mode=false figure, nothing
    is averaged, and its statistics are recomputed.  (0.raw in test mode is
    no check: with no statistics yet Kaldi's BatchNorm makes up random ones.)"""
    d = train_dir("ngaffine_bn")
    out = combine_nnets([str(d / "0.raw")], f"ark:{d}/merged.ark")
    err = capsys.readouterr().err
    assert logged_objectives(err) == pytest.approx(
        [kaldi_compute_prob("ngaffine_bn", "0.bntrain")], rel=5e-4)
    assert "Combining 1 nnets" in err and "Done recomputing stats." in err
    # 0.raw has none; 16 minibatches of 16 egs, 10 and 8 frames per eg at the
    # two BatchNorms (TdnnComponent's context), as in Kaldi's comb.raw.
    assert [c.count for c in out.components if c.type_name == "BatchNormComponent"] == [
        16 * 16 * 10, 16 * 16 * 8]


def test_recomputed_relu_stats_match_kaldi_given_its_draws(monkeypatch) -> None:
    """Kaldi's RectifiedLinearComponent stores statistics on a minibatch only
    when RandInt(0, 1) (glibc rand()) says so (or when it has none yet).  In
    Kaldi's nnet3-combine the rand() stream has first been used by the
    compiler's random self-checks (ComputationGraphBuilder::Check and
    friends), 3789 draws in the reference run (found by searching the stream
    for the draws that reproduce comb.raw's counts and sums; it is the only
    offset below 200000 that does).  Given those draws, the recomputed ReLU
    statistics are Kaldi's; pynnet3 draws from its own generator, so its
    counts differ (see test_combine_cli)."""
    d = train_dir("ngaffine_bn")
    comb = reference_dir() / "recipe" / "ngaffine_bn" / "comb.raw"
    if not comb.is_file():
        pytest.skip(f"no {comb}")
    rand = GlibcRand(1)
    for _ in range(3789):
        rand.rand()

    def kaldi_draw(self) -> bool:
        return rand.rand_int(0, 1) == 0 and self.count != 0

    monkeypatch.setattr(nonlinearities.NonlinearComponent, "_stats_sample_skip", kaldi_draw)
    out = combine_nnets([str(d / n) for n in ("0.raw", "1.raw", "1b.raw")],
                        f"ark:{d}/merged.ark")
    kaldi = read_nnet(str(comb))
    checked = 0
    for ours, theirs in zip(out.components, kaldi.components):
        if ours.type_name == "RectifiedLinearComponent":
            assert ours.count == theirs.count
            for attr in ("value_sum", "deriv_sum"):
                a, b = getattr(ours, attr), getattr(theirs, attr)
                assert np.abs(a - b).max() <= 1e-6 * np.abs(b).max(), attr
            checked += 1
        if ours.type_name == "BatchNormComponent":
            assert ours.count == theirs.count
            for attr in ("stats_sum", "stats_sumsq"):
                a, b = getattr(ours, attr), getattr(theirs, attr)
                assert np.abs(a - b).max() <= 1e-6 * np.abs(b).max(), attr
    assert checked == 2


def test_nan_objective_counts_as_minus_infinity() -> None:
    """An objective that is inf or NaN is -inf (Kaldi), so that such an
    average is never taken as the better one."""
    d = train_dir("affine_xent")
    egs = [eg for _, eg in iter_examples(f"ark:{d}/merged.ark")][:2]
    bad = read_nnet(str(d / "1.raw"))
    bad.components[bad.component_names.index("final_affine")].bias_params[0] = np.nan
    prob = NnetComputeProb(NnetComputeProbOptions(), bad)
    assert compute_objf(egs, prob) == -math.inf
    assert prob.get_total_objective()[1] > 0


def test_combine_needs_examples(tmp_path: Path) -> None:
    d = train_dir("affine_xent")
    (tmp_path / "empty.ark").write_bytes(b"")
    with pytest.raises(PynnetError, match="no examples"):
        combine_nnets([str(d / "0.raw")], f"ark:{tmp_path}/empty.ark")
