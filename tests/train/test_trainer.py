"""Training (NnetTrainer), objectives, max-change and diagnostics against
real Kaldi runs (/work/shared/reference/train, see README.md there) and
against plain NumPy definitions."""
from __future__ import annotations

import contextlib
import copy
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.model_io import read_nnet
from pynnet3.nnet.nnet import ObjectiveType
from pynnet3.nnet.utils import set_batchnorm_test_mode
from pynnet3.train.diagnostics import NnetComputeProb, NnetComputeProbOptions
from pynnet3.train.egs import iter_examples
from pynnet3.io.general_matrix import CompressedMatrix, GeneralMatrix, SparseMatrix
from pynnet3.train.kaldi_random import GlibcRand
from pynnet3.train.nnet_update import (MaxChangeStats, apply_l2_regularization,
                                       get_num_nvalues, update_nnet_with_max_change)
from pynnet3.train.objective import compute_accuracy, compute_objective
from pynnet3.train.trainer import NnetTrainer, NnetTrainerOptions
from tests.helpers import curated, reference_dir

CASES = curated("train", ["affine_xent", "quadratic", "momentum_l2", "ngaffine_bn"])
# Options each case was trained with (commands.txt).
CASE_OPTIONS = {"momentum_l2": {"momentum": 0.5, "max_param_change": 0.5}}
FLOAT = r"(?<![\w.])(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf))"


def case_dir(case: str) -> Path:
    d = reference_dir() / "train" / case
    if not d.is_dir():
        pytest.skip(f"no Kaldi training reference {d}")
    return d


def examples(case: str, name: str = "merged.ark") -> list:
    return [eg for _, eg in iter_examples(f"ark:{case_dir(case) / name}")]


def train_case(case: str, egs_name: str = "merged.ark", num_egs: int | None = None,
               **overrides) -> tuple:
    """(trained nnet, trainer, captured stderr) of nnet3-train --srand=1 on the case."""
    d = case_dir(case)
    nnet = read_nnet(str(d / "0.raw"))
    opts = NnetTrainerOptions(**{**CASE_OPTIONS.get(case, {}), **overrides})
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        with NnetTrainer(opts, nnet, GlibcRand(1)) as trainer:
            for eg in examples(case, egs_name)[:num_egs]:
                trainer.train(eg)
            trainer.print_total_stats()
    return nnet, trainer, err.getvalue()


@pytest.fixture(scope="module")
def trained() -> dict:
    reference_dir()
    return {case: train_case(case) for case in CASES}


def parameter_arrays(nnet) -> dict[tuple[str, str], np.ndarray]:
    """Every float array of the updatable components and of BatchNorm (its
    stats), by (component, attribute)."""
    out = {}
    for name, comp in zip(nnet.component_names, nnet.components):
        if not (comp.is_updatable() or comp.type_name == "BatchNormComponent"):
            continue
        for attr, value in vars(comp).items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                out[(name, attr)] = value
    return out


def max_relative_difference(ours, kaldi) -> dict:
    a, b = parameter_arrays(ours), parameter_arrays(kaldi)
    assert a.keys() == b.keys() and a
    return {k: float(np.abs(a[k].astype(np.float64) - b[k]).max() / np.abs(b[k]).max())
            for k in a}


def kaldi_log_values(text: str, pattern: str) -> list[tuple[str, ...]]:
    return re.findall(pattern, text)


# ---------------------------------------------------------------------------
# nnet3-train against Kaldi


@pytest.mark.parametrize("case", CASES)
def test_trained_parameters_match_kaldi(trained: dict, case: str) -> None:
    """Parameters (and batch-norm stats) after nnet3-train --srand=1 0.raw
    ark:merged.ark: Kaldi's 1.raw to float precision.  ngaffine_bn includes
    natural gradient, batch-norm, TdnnComponent and LinearComponent."""
    nnet, _, _ = trained[case]
    kaldi = read_nnet(str(case_dir(case) / "1.raw"))
    diffs = max_relative_difference(nnet, kaldi)
    worst = max(diffs.items(), key=lambda kv: kv[1])
    assert worst[1] < 1e-4, f"{case}: {worst}"


@pytest.mark.parametrize("case", CASES)
def test_training_log_matches_kaldi(trained: dict, case: str) -> None:
    """The overall objective and every max-change LOG line, as Kaldi printed them."""
    _, trainer, err = trained[case]
    kaldi_log = (case_dir(case) / "log.train.txt").read_text()
    overall = r"Overall average objective function for 'output' is " + FLOAT + \
        r" over " + FLOAT + r" frames\."
    (k_objf, k_frames), = kaldi_log_values(kaldi_log, overall)
    (o_objf, o_frames), = kaldi_log_values(err, overall)
    assert float(o_frames) == float(k_frames)
    assert float(o_objf) == pytest.approx(float(k_objf), rel=1e-5)
    info = trainer.objf_info["output"]
    assert info.tot_objf / info.tot_weight == pytest.approx(float(k_objf), rel=1e-5)
    parsed = "[this line is to be parsed by a script:] log-prob-per-frame="
    assert parsed + k_objf in err
    factor = r"Global max-change factor was " + FLOAT + r" with max-change=" + FLOAT
    k_factors = kaldi_log_values(kaldi_log, factor)
    o_factors = kaldi_log_values(err, factor)
    assert len(o_factors) == len(k_factors)
    for (ok, om), (kk, km) in zip(o_factors, k_factors):
        assert float(ok) == pytest.approx(float(kk), rel=1e-4) and om == km
    per_comp = r"Per-component max-change active on (\d+) / (\d+) Updatable Components\. " \
        r"\(Smallest factor=" + FLOAT + r" on (\S+) with max-change=" + FLOAT + r"\)"
    k_pc = kaldi_log_values(kaldi_log, per_comp)
    o_pc = kaldi_log_values(err, per_comp)
    assert [(a, b, n, m) for a, b, _, n, m in o_pc] == [(a, b, n, m) for a, b, _, n, m in k_pc]
    for o, k in zip(o_pc, k_pc):
        assert float(o[2]) == pytest.approx(float(k[2]), rel=1e-4)
    for line in ("per-component max-change was enforced", "The global max-change was enforced"):
        k_lines = [ln.split(") ", 1)[1] for ln in kaldi_log.splitlines() if line in ln]
        o_lines = [ln.split(") ", 1)[1] for ln in err.splitlines() if line in ln]
        assert o_lines == k_lines


def test_training_on_shuffled_egs_matches_kaldi() -> None:
    """1b.raw: the same training on shuffled_merged.ark."""
    nnet, _, _ = train_case("affine_xent", "shuffled_merged.ark")
    kaldi = read_nnet(str(case_dir("affine_xent") / "1b.raw"))
    assert max(max_relative_difference(nnet, kaldi).values()) < 1e-4


def test_phase_lines_follow_the_trajectory() -> None:
    """--print-interval=N: each 'Average objective function ... for minibatches
    a-b' line is the objective of the minibatches a..b, each evaluated with the
    model as it was before its own update (checked by evaluating saved
    models with NnetComputeProb), and the last, incomplete phase is not printed
    (as in Kaldi)."""
    case = "affine_xent"
    egs = examples(case)[:11]
    nnet = read_nnet(str(case_dir(case) / "0.raw"))
    err = io.StringIO()
    per_mb = []
    with contextlib.redirect_stderr(err):
        trainer = NnetTrainer(NnetTrainerOptions(print_interval=3), nnet, GlibcRand(1))
        for eg in egs:
            prob = NnetComputeProb(NnetComputeProbOptions(compute_accuracy=False),
                                   copy.deepcopy(nnet))
            prob.compute(eg)
            info = prob.get_objective("output")
            per_mb.append((info.tot_objective, info.tot_weight))
            trainer.train(eg)
    lines = re.findall(r"Average objective function for 'output' for minibatches (\d+)-(\d+) "
                       r"is " + FLOAT + r" over " + FLOAT + r" frames\.", err.getvalue())
    assert [(int(a), int(b)) for a, b, _, _ in lines] == [(0, 2), (3, 5), (6, 8)]
    for a, b, objf, frames in lines:
        tot = sum(per_mb[i][0] for i in range(int(a), int(b) + 1))
        w = sum(per_mb[i][1] for i in range(int(a), int(b) + 1))
        assert float(frames) == pytest.approx(w, rel=1e-6)
        assert float(objf) == pytest.approx(tot / w, rel=1e-5)


def test_component_stats_follow_kaldis_random_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    """The nonlinearities store their stats on a random subset of minibatches
    (RandInt(0,1) in StoreStats, RandInt(0,3) in StoreBackpropStats).  Kaldi
    draws them, and the trainer's RandInt(0,100) of GetNumNvalues, from one
    glibc rand() stream; its compiler's debug checks draw 770 more numbers
    when compiling the first minibatch here (pynnet3's compiler draws none).
    Feeding the components the same glibc stream, advanced by those 770
    draws after the first compilation, reproduces Kaldi's ReLU / LogSoftmax
    stats exactly: the draws happen in Kaldi's order."""
    import pynnet3.nnet.components.base as base

    if not hasattr(base, "_RNG"):
        pytest.skip("component RNG is not the module-level _RNG any more")
    rand = GlibcRand(1)

    class GlibcAsNumpy:          # numpy Generator.integers(lo, hi) == RandInt(lo, hi - 1)
        def integers(self, lo: int, hi: int) -> int:
            return rand.rand_int(lo, hi - 1)

    monkeypatch.setattr(base, "_RNG", GlibcAsNumpy())
    case = "affine_xent"
    nnet = read_nnet(str(case_dir(case) / "0.raw"))
    with contextlib.redirect_stderr(io.StringIO()):
        trainer = NnetTrainer(NnetTrainerOptions(), nnet, rand)
        compile_once = trainer.compiler.compile
        calls = []

        def compile_and_burn(request):
            computation = compile_once(request)
            if not calls:
                for _ in range(770):
                    rand.rand()
            calls.append(1)
            return computation

        trainer.compiler.compile = compile_and_burn
        for eg in examples(case):
            trainer.train(eg)
    kaldi = read_nnet(str(case_dir(case) / "1.raw"))
    checked = 0
    for name, ours, theirs in zip(nnet.component_names, nnet.components, kaldi.components):
        if ours.type_name not in ("RectifiedLinearComponent", "LogSoftmaxComponent"):
            continue
        for attr in ("count", "oderiv_count"):
            assert getattr(ours, attr) == getattr(theirs, attr), (name, attr)
        for attr in ("value_sum", "deriv_sum", "oderiv_sumsq"):
            a, b = getattr(ours, attr), getattr(theirs, attr)
            if b.size:
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3, err_msg=f"{name} {attr}")
                checked += 1
    assert checked == 7


def test_backstitch_runs_and_reports_both_objectives() -> None:
    case = "affine_xent"
    nnet, trainer, err = train_case(case, num_egs=8, backstitch_training_scale=0.3,
                                    backstitch_training_interval=2)
    assert set(trainer.objf_info) == {"output", "output_backstitch"}
    # Half of the 8 minibatches (which half depends on the trainer's seed)
    # get the two backstitch steps.
    assert trainer.max_change_stats.num_minibatches_processed == 12
    assert "Overall average objective function for 'output_backstitch'" in err
    plain = read_nnet(str(case_dir(case) / "1.raw"))
    assert max(max_relative_difference(nnet, plain).values()) > 1e-3
    assert all(np.isfinite(a).all() for a in parameter_arrays(nnet).values())


# ---------------------------------------------------------------------------
# nnet3-compute-prob's numbers (library level)


def kaldi_compute_prob(case: str, model: str) -> tuple[float, float, float, float]:
    text = (case_dir(case) / f"log.compute_prob.{model}.txt").read_text()
    (objf, w), = re.findall(r"Overall (?:log-likelihood|objective) for 'output' is " + FLOAT
                            + r" per frame, over " + FLOAT + " frames", text)
    (acc, aw), = re.findall(r"Overall accuracy for 'output' is " + FLOAT
                            + r" per frame, over " + FLOAT + " frames", text)
    return float(objf), float(w), float(acc), float(aw)


@pytest.mark.parametrize("case,model", [(c, m) for c in CASES for m in ("1", "avg")]
                         + [("affine_xent", "0"), ("quadratic", "0")])
def test_compute_prob_matches_kaldi(case: str, model: str) -> None:
    nnet = read_nnet(str(case_dir(case) / f"{model}.raw"))
    set_batchnorm_test_mode(True, nnet)
    prob = NnetComputeProb(NnetComputeProbOptions(), nnet)
    for eg in examples(case):
        prob.compute(eg)
    objf, w, acc, aw = kaldi_compute_prob(case, model)
    info = prob.get_objective("output")
    assert info.tot_weight == pytest.approx(w, rel=1e-5)
    assert info.tot_objective / info.tot_weight == pytest.approx(objf, rel=1e-4)
    a = prob.accuracy_info["output"]
    assert a.tot_weight == pytest.approx(aw, rel=1e-5)
    assert a.tot_objective / a.tot_weight == pytest.approx(acc, rel=1e-4)


def test_compute_deriv_is_the_gradient() -> None:
    """compute_deriv: the gradient network (Kaldi's SetNnetAsGradient) holds
    d(total objective)/d(parameters): its dot product with a small parameter
    change predicts the change of the objective (central difference)."""
    case = "affine_xent"
    egs = examples(case)[:3]
    nnet = read_nnet(str(case_dir(case) / "1.raw"))
    prob = NnetComputeProb(NnetComputeProbOptions(compute_deriv=True, compute_accuracy=False),
                           nnet)
    for eg in egs:
        prob.compute(eg)
    grad = prob.get_deriv()
    rs = np.random.RandomState(0)
    eps = 1e-3
    predicted = 0.0
    plus, minus = copy.deepcopy(nnet), copy.deepcopy(nnet)
    for c, comp in enumerate(nnet.components):
        if not comp.is_updatable():
            continue
        for attr in ("linear_params", "bias_params"):
            d = rs.randn(*getattr(comp, attr).shape).astype(np.float32)
            predicted += float(np.sum(getattr(grad.components[c], attr).astype(np.float64) * d))
            getattr(plus.components[c], attr)[...] += eps * d
            getattr(minus.components[c], attr)[...] -= eps * d
    totals = []
    for net in (plus, minus):
        p = NnetComputeProb(NnetComputeProbOptions(compute_accuracy=False), net)
        for eg in egs:
            p.compute(eg)
        totals.append(p.get_objective("output").tot_objective)
    measured = (totals[0] - totals[1]) / (2 * eps)
    assert measured == pytest.approx(predicted, rel=2e-2)


# ---------------------------------------------------------------------------
# objectives and accuracy against NumPy definitions


def _sparse(rows: list[list[tuple[int, float]]], dim: int) -> GeneralMatrix:
    return GeneralMatrix(SparseMatrix.from_pairs(dim, rows))


def test_linear_objective_all_supervision_types() -> None:
    rs = np.random.RandomState(0)
    out = rs.randn(5, 4).astype(np.float32)
    rows = [[(1, 1.0)], [(0, 0.5), (3, 0.25)], [(2, 1.0)], [], [(3, 0.5)]]
    sparse = _sparse(rows, 4)
    dense = sparse.to_matrix()
    want_objf = float(np.sum(dense.astype(np.float64) * out))
    for sup in (sparse, GeneralMatrix(dense), GeneralMatrix(CompressedMatrix.from_matrix(dense))):
        res = compute_objective(sup, ObjectiveType.LINEAR, out)
        ref = sup.to_matrix()
        assert res.tot_weight == pytest.approx(float(ref.sum()), rel=1e-6)
        assert res.tot_objf == pytest.approx(float(np.sum(ref.astype(np.float64) * out)),
                                             rel=1e-6)
        np.testing.assert_array_equal(res.deriv, ref)
    assert compute_objective(sparse, ObjectiveType.LINEAR, out).tot_weight == 3.25
    assert compute_objective(sparse, ObjectiveType.LINEAR, out).tot_objf == \
        pytest.approx(want_objf, rel=1e-6)


def test_quadratic_objective() -> None:
    rs = np.random.RandomState(1)
    out = rs.randn(6, 3).astype(np.float32)
    target = rs.randn(6, 3).astype(np.float32)
    for sup in (GeneralMatrix(target), GeneralMatrix(SparseMatrix.from_dense(target))):
        res = compute_objective(sup, ObjectiveType.QUADRATIC, out)
        assert res.tot_weight == 6.0                       # rows, not the target sum
        assert res.tot_objf == pytest.approx(-0.5 * float(np.sum((target - out) ** 2.0)),
                                             rel=1e-6)
        np.testing.assert_allclose(res.deriv, target - out, rtol=0, atol=0)


def test_objective_dimension_mismatch_is_an_error() -> None:
    from pynnet3.errors import PynnetError

    with pytest.raises(PynnetError, match="mismatch for 'output': 3 \\(nnet\\) vs. 4 \\(egs\\)"):
        compute_objective(_sparse([[(0, 1.0)]], 4), ObjectiveType.LINEAR,
                          np.zeros((1, 3), np.float32))


def test_accuracy_as_kaldi_counts_it() -> None:
    out = np.array([[0.1, 0.9, 0.0], [0.5, 0.5, 0.0], [0.2, 0.1, 0.7], [0.0, 0.0, 1.0]],
                   dtype=np.float32)
    # row 0: label 1, weight 1 (right); row 1: tie in the output -> first max
    # (0) vs label 0 (right, weight 0.5); row 2: soft label, max at 0 (wrong,
    # weight 1); row 3: only a negative value stored -> the first unstored
    # zero (column 1) is the label (wrong, weight -0.5).
    sup = _sparse([[(1, 1.0)], [(0, 0.5)], [(0, 0.6), (2, 0.4)], [(0, -0.5), (2, 0.0)]], 3)
    w, a, wv, av = compute_accuracy(sup, out, per_dim=True)
    assert w == pytest.approx(1.0 + 0.5 + 1.0 - 0.5)
    assert a == pytest.approx(1.5)
    np.testing.assert_allclose(wv, [0.5 + 1.0, 1.0 - 0.5, 0.0])
    np.testing.assert_allclose(av, [0.5, 1.0, 0.0])
    w2, a2, _, _ = compute_accuracy(GeneralMatrix(sup.to_matrix()), out)
    # dense rows: row 3 is [-0.5, 0, 0] whose first max is column 1, the same.
    assert (w2, a2) == pytest.approx((w, a))


# ---------------------------------------------------------------------------
# max-change and l2 against NumPy


def _two_affine_nnets(max_change: float = 0.0, l2: float = 0.0):
    from pynnet3.nnet.nnet import Nnet

    cfg = ("input-node name=input dim=3\n"
           f"component name=a type=AffineComponent input-dim=3 output-dim=4 max-change="
           f"{max_change} l2-regularize={l2} learning-rate=0.1\n"
           "component name=r type=RectifiedLinearComponent dim=4\n"
           f"component name=b type=AffineComponent input-dim=4 output-dim=2 max-change="
           f"{max_change} l2-regularize={l2} learning-rate=0.2\n"
           "component-node name=a component=a input=input\n"
           "component-node name=r component=r input=a\n"
           "component-node name=b component=b input=r\n"
           "output-node name=output input=b\n")
    nnet = Nnet()
    nnet.read_config(cfg)
    return nnet


def test_update_with_max_change_numpy() -> None:
    rs = np.random.RandomState(3)
    nnet = _two_affine_nnets(max_change=0.5)
    delta = copy.deepcopy(nnet)
    for comp in delta.components:
        if comp.is_updatable():
            comp.linear_params[...] = rs.randn(*comp.linear_params.shape)
            comp.bias_params[...] = rs.randn(*comp.bias_params.shape)
    before = copy.deepcopy(nnet)
    scale, max_param_change = 0.7, 0.6
    stats = MaxChangeStats.for_nnet(nnet)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert update_nnet_with_max_change(delta, max_param_change, 1.0, scale, nnet, stats)
    comps = [i for i, c in enumerate(nnet.components) if c.is_updatable()]
    norms = np.array([np.sqrt(np.sum(delta.components[i].linear_params.astype(np.float64) ** 2)
                              + np.sum(delta.components[i].bias_params.astype(np.float64) ** 2))
                      for i in comps])
    factors = np.minimum(1.0, 0.5 / (norms * scale))
    total = np.sqrt(np.sum((factors * norms) ** 2)) * scale
    global_factor = min(1.0, max_param_change / total)
    for i, f in zip(comps, factors):
        for attr in ("linear_params", "bias_params"):
            want = getattr(before.components[i], attr) + scale * global_factor * f * \
                getattr(delta.components[i], attr)
            np.testing.assert_allclose(getattr(nnet.components[i], attr), want, rtol=1e-5,
                                       atol=1e-6)
    assert stats.num_max_change_per_component_applied == [int(f < 1) for f in factors]
    assert stats.num_max_change_global_applied == int(global_factor < 1)
    assert "Per-component max-change active on 2 / 2 Updatable Components." in err.getvalue()


def test_update_without_limits_takes_no_norms(monkeypatch) -> None:
    """No --max-param-change and no component max-change: the change is
    applied as it is, without the norms (which decide nothing then); with
    one component limit, every norm is taken again."""
    from pynnet3.train import nnet_update

    rs = np.random.RandomState(5)
    real_dot = nnet_update._dot
    for max_change, max_param_change, want_dots in ((0.0, 0.0, 0), (0.5, 0.0, 2),
                                                    (0.0, 2.0, 2)):
        nnet = _two_affine_nnets(max_change=max_change)
        delta = copy.deepcopy(nnet)
        for comp in delta.components:
            if comp.is_updatable():
                comp.linear_params[...] = 0.01 * rs.randn(*comp.linear_params.shape)
                comp.bias_params[...] = 0.01 * rs.randn(*comp.bias_params.shape)
        before = copy.deepcopy(nnet)
        dots = []
        monkeypatch.setattr(nnet_update, "_dot", lambda a, b: dots.append(1) or real_dot(a, b))
        stats = MaxChangeStats.for_nnet(nnet)
        assert update_nnet_with_max_change(delta, max_param_change, 1.0, 0.5, nnet, stats)
        assert len(dots) == want_dots
        assert stats.num_minibatches_processed == 1
        for i, comp in enumerate(nnet.components):
            if comp.is_updatable():
                for attr in ("linear_params", "bias_params"):
                    want = (getattr(before.components[i], attr)
                            + np.float32(0.5) * getattr(delta.components[i], attr))
                    np.testing.assert_array_equal(getattr(comp, attr), want)


def test_infinite_change_is_not_applied() -> None:
    nnet = _two_affine_nnets()
    delta = copy.deepcopy(nnet)
    delta.components[0].linear_params[0, 0] = np.inf
    before = copy.deepcopy(nnet)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert not update_nnet_with_max_change(delta, 2.0, 1.0, 1.0, nnet)
    assert "Infinite parameter change, will not apply." in err.getvalue()
    np.testing.assert_array_equal(nnet.components[0].linear_params,
                                  before.components[0].linear_params)


def test_l2_regularization_numpy() -> None:
    nnet = _two_affine_nnets(l2=0.01)
    delta = copy.deepcopy(nnet)
    for comp in delta.components:
        comp.scale(0.0)
    apply_l2_regularization(nnet, 16 * 1.0, delta)
    for c, lr in ((0, 0.1), (2, 0.2)):
        want = -2.0 * 16 * lr * 0.01 * nnet.components[c].linear_params
        np.testing.assert_allclose(delta.components[c].linear_params, want, rtol=1e-5)


def test_get_num_nvalues() -> None:
    egs = examples("affine_xent")
    assert get_num_nvalues(egs[0].io, False) == 16
    assert get_num_nvalues(egs[0].io, True) == 16
    assert get_num_nvalues(egs[0].io, False, GlibcRand(1).rand_int) == 16


# -- updates straight into the network (NnetTrainer.updates_in_place) -----------

def _train_without_limits(case: str, num_egs: int, in_place: bool,
                          monkeypatch: pytest.MonkeyPatch) -> tuple:
    """(network, trainer, log) after ``num_egs`` minibatches with no limit of
    any kind (so that the updates may go into the network), forcing the
    delta network when ``in_place`` is False."""
    if not in_place:
        monkeypatch.setattr(NnetTrainer, "updates_in_place", lambda self, computation: False)
    else:
        monkeypatch.undo()
    nnet = read_nnet(str(case_dir(case) / "0.raw"))
    for comp in nnet.components:
        if comp.is_updatable():
            comp.max_change = 0.0
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        with NnetTrainer(NnetTrainerOptions(max_param_change=0.0), nnet, GlibcRand(1)) as tr:
            for eg in examples(case)[:num_egs]:
                tr.train(eg)
            tr.print_total_stats()
    return nnet, tr, err.getvalue()


@pytest.mark.parametrize("case", curated("train", ["affine_xent", "ngaffine_bn"]))
def test_in_place_updates_match_the_delta_network(case: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With no max-change, momentum, l2 or backstitch the updates go straight
    into the network (no delta network is made) and give the model of the
    delta network's way up to float rounding (affine, natural-gradient
    affine, TDNN and linear components; batch-norm stats too), and the
    same log lines."""
    ours, trainer, log_in_place = _train_without_limits(case, 6, True, monkeypatch)
    assert trainer._delta_nnet is None
    ref, ref_trainer, log_delta = _train_without_limits(case, 6, False, monkeypatch)
    assert ref_trainer._delta_nnet is not None
    diffs = max_relative_difference(ours, ref)
    assert diffs and max(diffs.values()) < 2e-5, diffs
    # the same lines, and numbers equal to about the printed precision
    assert [re.sub(FLOAT, "#", m) for m in log_in_place.splitlines()] == \
        [re.sub(FLOAT, "#", m) for m in log_delta.splitlines()]
    assert [float(x) for x in re.findall(FLOAT, log_in_place)] == \
        pytest.approx([float(x) for x in re.findall(FLOAT, log_delta)], rel=1e-4)


def test_in_place_updates_only_when_nothing_needs_the_change() -> None:
    from pynnet3.compile.request_io import build_request
    from pynnet3.nnet.nnet import Nnet
    from pynnet3.optimize.options import OptimizeOptions
    from pynnet3.train.trainer import _in_place_update_possible, components_read_after_update

    def nnet_of(cfg: str) -> Nnet:
        nnet = Nnet()
        nnet.read_config(cfg)
        return nnet

    plain = _two_affine_nnets()
    assert _in_place_update_possible(NnetTrainerOptions(max_param_change=0.0), plain) == {0, 2}
    for options in (NnetTrainerOptions(),                      # --max-param-change=2
                    NnetTrainerOptions(max_param_change=0.0, momentum=0.5),
                    NnetTrainerOptions(max_param_change=0.0, backstitch_training_scale=0.3)):
        assert not _in_place_update_possible(options, plain)
    no_limits = NnetTrainerOptions(max_param_change=0.0)
    assert not _in_place_update_possible(no_limits, _two_affine_nnets(max_change=0.5))
    assert not _in_place_update_possible(no_limits, _two_affine_nnets(l2=0.01))
    assert _in_place_update_possible(NnetTrainerOptions(max_param_change=0.0,
                                                        l2_regularize_factor=0.0),
                                     _two_affine_nnets(l2=0.01))
    # another updatable type; one component run by two nodes
    block = nnet_of("input-node name=input dim=4\n"
                    "component name=a type=BlockAffineComponent input-dim=4 output-dim=4 "
                    "num-blocks=2\n"
                    "component-node name=a component=a input=input\n"
                    "output-node name=output input=a\n")
    assert not _in_place_update_possible(no_limits, block)
    shared = nnet_of("input-node name=input dim=4\n"
                     "component name=a type=AffineComponent input-dim=4 output-dim=4\n"
                     "component-node name=a1 component=a input=input\n"
                     "component-node name=a2 component=a input=a1\n"
                     "output-node name=output input=a2\n")
    assert not _in_place_update_possible(no_limits, shared)
    # A recurrent node is split into per-time-step Backprops; model-update
    # consolidation (the default) leaves one that updates, after the others:
    # in place is fine.  Without it, each step's Backprop updates and the
    # later ones would see the updated parameters: the delta network.
    recurrent = nnet_of("input-node name=input dim=4\n"
                        "component name=a type=AffineComponent input-dim=7 output-dim=3\n"
                        "component-node name=a component=a "
                        "input=Append(input, IfDefined(Offset(a, -1)))\n"
                        "output-node name=output input=a\n")
    assert _in_place_update_possible(no_limits, recurrent) == {0}
    request = build_request(recurrent, 2, 5, need_model_derivative=True, context=(0, 0))
    err = io.StringIO()
    for consolidate, late in ((True, frozenset()), (False, {0})):
        opts = copy.deepcopy(no_limits)
        opts.optimize_config = OptimizeOptions(consolidate_model_update=consolidate)
        with contextlib.redirect_stderr(err), \
                NnetTrainer(opts, recurrent, GlibcRand(1)) as trainer:
            computation = trainer.compiler.compile(request)
            types = [c.command_type.name for c in computation.commands]
            assert types.count("BACKPROP") == (1 if consolidate else 5)
            assert components_read_after_update(computation) == late
            assert trainer.updates_in_place(computation) == consolidate
    with contextlib.redirect_stderr(err), \
            NnetTrainer(no_limits, plain, GlibcRand(1)) as trainer:
        computation = trainer.compiler.compile(
            build_request(plain, 2, 5, need_model_derivative=True, context=(0, 0)))
        assert components_read_after_update(computation) == frozenset()
        assert trainer.updates_in_place(computation)
        trainer.delta_nnet                  # once made, the delta network is used
        assert not trainer.updates_in_place(computation)


def test_computations_are_reused_per_example_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """Minibatches of one shape are compiled once (later ones count as
    memory hits); an example of another shape gets its own computation."""
    merged = examples("affine_xent")
    single = examples("affine_xent", "egs.ark")          # unmerged: 1 eg, other n's
    nnet = read_nnet(str(case_dir("affine_xent") / "0.raw"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), \
            NnetTrainer(NnetTrainerOptions(), nnet, GlibcRand(1)) as trainer:
        requests = []
        compile_request = trainer.compiler.compile
        monkeypatch.setattr(trainer.compiler, "compile",
                            lambda request: requests.append(request) or compile_request(request))
        for eg in merged[:4]:
            trainer.train(eg)
        assert len(requests) == 1 and len(requests[0].outputs[0].indexes) == 16 * 8
        hits = trainer.compiler.num_memory_hits
        assert hits >= 3
        trainer.train(single[0])
        trainer.train(merged[4])
        assert len(requests) == 2 and len(requests[1].outputs[0].indexes) == 8
        assert trainer.compiler.num_memory_hits == hits + 1


# -- heap reuse between minibatches (keep_freed_heap) --------------------------

_HEAP_SCRIPT = """
import resource, sys
import numpy as np
from pynnet3.train.trainer import keep_freed_heap
print(keep_freed_heap(), keep_freed_heap())
def round_():
    # four 8 MB matrices, as a minibatch of 1024 x 2000 outputs makes, then freed
    arrays = [np.ones((1024, 2000), dtype=np.float32) for _ in range(4)]
    del arrays
round_()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    round_()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) // 5)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt (Linux only)")
def test_keep_freed_heap_reuses_memory_between_minibatches() -> None:
    # Once set, freed matrices stay in the heap: a second round of the same
    # allocations touches no new pages (with glibc's defaults the 32 MB were
    # trimmed and faulted in again, ~2000 faults with huge pages, 8192 without).
    env = {k: v for k, v in os.environ.items()
           if k not in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")}
    out = subprocess.run([sys.executable, "-c", _HEAP_SCRIPT], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[:2] == ["True", "True"]          # set, and idempotent
    assert int(out[2]) < 200, f"{out[2]} page faults per round"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt (Linux only)")
def test_keep_freed_heap_respects_users_malloc_settings() -> None:
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="131072")
    out = subprocess.run([sys.executable, "-c", _HEAP_SCRIPT], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    assert out[:2] == ["False", "False"]
