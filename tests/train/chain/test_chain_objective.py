"""The chain (LF-MMI) objective: against real Kaldi's ComputeChainObjfAndDeriv
(reference deriv.0.ark / deriv.1.ark), against finite differences, and the
Numba kernels against a plain NumPy float64 implementation of the same
leaky-HMM / numerator recursions (goldens den.fst and merged_0.ark from
tests/data/chain)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader
from pynnet3.train.chain.den_graph import DenominatorGraph
from pynnet3.train.chain.denominator import DenominatorComputation
from pynnet3.train.chain.egs import iter_chain_examples
from pynnet3.train.chain.fst import read_fst_file
from pynnet3.train.chain.numerator import NumeratorComputation
from pynnet3.train.chain.objective import ChainTrainingOptions, compute_chain_objf_and_deriv
from pynnet3.train.kaldi_random import GlibcRand
from tests.helpers import reference_dir

GOLDEN = Path(__file__).resolve().parents[2] / "data" / "chain"
REF_OPTS = dict(l2_regularize=5e-05, leaky_hmm_coefficient=0.1, xent_regularize=0.1,
                out_of_range_regularize=0.01)


def read_matrices(path: Path) -> dict[str, np.ndarray]:
    with SequentialTableReader(f"ark:{path}", MATRIX_HOLDER) as reader:
        return dict(reader)


@pytest.fixture(scope="module")
def golden_eg():
    return next(iter(iter_chain_examples(f"ark:{GOLDEN / 'merged_0.ark'}")))[1]


@pytest.fixture(scope="module")
def golden_graph() -> DenominatorGraph:
    return DenominatorGraph.from_fst(read_fst_file(str(GOLDEN / "den.fst")), 64)


@pytest.mark.parametrize("which", ["0", "1"])
def test_objective_and_derivative_match_kaldi(which: str) -> None:
    """Kaldi's objective, l2 term, weight, derivative and numerator posteriors
    for the network output Kaldi computed (0.raw with BatchNorm in training
    mode, 1.raw in test mode): objf within 1e-4, derivatives within 1e-3
    relative to their largest value (measured: 5e-7)."""
    root = reference_dir(f"chain/deriv.{which}.ark", "chain/den.fst", "chain/merged.ark")
    mats = read_matrices(root / f"chain/deriv.{which}.ark")
    key = next(k for k in mats if k.endswith("/output")).rsplit("/", 1)[0]
    eg = next(iter(iter_chain_examples(f"ark:{root / 'chain/merged.ark'}")))[1]
    graph = DenominatorGraph.from_fst(read_fst_file(str(root / "chain/den.fst")), 64)
    res = compute_chain_objf_and_deriv(ChainTrainingOptions(**REF_OPTS), graph,
                                       eg.outputs[0].supervision, mats[f"{key}/output"],
                                       True, True, GlibcRand(1).rand_int)
    objf, l2, weight = mats[f"{key}/objf_l2_weight"][0]
    assert res.weight == weight
    assert abs(res.objf - objf) <= 1e-4 * abs(objf)
    assert abs(res.l2_term - l2) <= 1e-4 * abs(l2) + 1e-12
    for ours, name in ((res.deriv, "deriv"), (res.xent_deriv, "xent_deriv")):
        ref = mats[f"{key}/{name}"]
        assert np.abs(ours - ref).max() <= 1e-3 * np.abs(ref).max(), name


def test_derivative_is_the_gradient(golden_eg, golden_graph) -> None:
    """The derivative against central differences of the objective along random
    directions (outputs random, l2 on, inside [-30, 30])."""
    sup = golden_eg.outputs[0].supervision
    rng = np.random.default_rng(0)
    out = rng.normal(0.0, 2.0, (sup.num_sequences * sup.frames_per_sequence, 64)).astype(np.float32)
    opts = ChainTrainingOptions(l2_regularize=1e-3, leaky_hmm_coefficient=0.1)
    res = compute_chain_objf_and_deriv(opts, golden_graph, sup, out, True, False)
    for _ in range(3):
        d = rng.normal(size=out.shape).astype(np.float32)
        h = 1e-2
        plus = compute_chain_objf_and_deriv(opts, golden_graph, sup, out + h * d, False, False)
        minus = compute_chain_objf_and_deriv(opts, golden_graph, sup, out - h * d, False, False)
        numeric = ((plus.objf + plus.l2_term) - (minus.objf + minus.l2_term)) / (2 * h)
        analytic = float(np.vdot(res.deriv.astype(np.float64), d))
        assert abs(numeric - analytic) <= 1e-2 * abs(analytic), (numeric, analytic)


def _numpy_denominator(graph: DenominatorGraph, out: np.ndarray, num_seq: int,
                       leaky: float) -> np.ndarray:
    """The leaky HMM in float64, one sequence at a time, alphas normalised
    per frame: the occupation probabilities per row and pdf."""
    frames = out.shape[0] // num_seq
    probs = np.exp(np.clip(out.astype(np.float64), -30, 30))
    src = np.repeat(np.arange(graph.num_states), np.diff(graph.fwd_begin))
    dst, pdf, tp = graph.fwd_state, graph.fwd_pdf, graph.fwd_prob.astype(np.float64)
    init = graph.initial_probs.astype(np.float64)
    post = np.zeros_like(probs)
    for s in range(num_seq):
        p = probs[s::num_seq]                    # rows t * S + s
        alphas = []
        a = init + leaky * init * init.sum()
        for t in range(frames):
            alphas.append(a)
            nxt = np.bincount(dst, weights=a[src] * tp * p[t, pdf], minlength=graph.num_states)
            nxt = nxt + leaky * init * nxt.sum()
            a = nxt / nxt.sum()
        b = np.ones(graph.num_states) / a.sum()
        b = b + leaky * np.dot(b, init)
        for t in range(frames - 1, -1, -1):
            contrib = alphas[t][src] * tp * p[t, pdf] * b[dst]
            np.add.at(post[t * num_seq + s], pdf, contrib)
            bd = np.bincount(src, weights=tp * p[t, pdf] * b[dst], minlength=graph.num_states)
            norm = contrib.sum()
            post[t * num_seq + s] /= norm
            b = bd / norm
            b = b + leaky * np.dot(b, init)
    return post


def test_denominator_kernels_against_numpy(golden_eg, golden_graph) -> None:
    """Per-frame occupation probabilities of the Numba kernels (float32 values,
    float64 sums, all sequences at once) against the float64 NumPy recursion;
    each frame's posteriors sum to one per sequence."""
    sup = golden_eg.outputs[0].supervision
    rng = np.random.default_rng(1)
    out = rng.normal(0.0, 1.0, (sup.num_sequences * sup.frames_per_sequence, 64)).astype(np.float32)
    den = DenominatorComputation(0.1, golden_graph, sup.num_sequences, out)
    den.forward()
    deriv = np.zeros_like(out)
    assert den.backward(1.0, deriv)
    post = _numpy_denominator(golden_graph, out, sup.num_sequences, 0.1)
    np.testing.assert_allclose(deriv, post, atol=2e-5)
    np.testing.assert_allclose(deriv.sum(axis=1), 1.0, atol=1e-4)


def test_numerator_against_numpy(golden_eg) -> None:
    """Numerator log-likelihood and posteriors against a log-space NumPy
    forward-backward over the same FST."""
    sup = golden_eg.outputs[0].supervision
    fst = sup.fst
    rng = np.random.default_rng(2)
    out = rng.normal(0.0, 1.0, (sup.num_sequences * sup.frames_per_sequence, 64)).astype(np.float32)
    num = NumeratorComputation(sup, out)
    logp = num.forward()
    post = np.zeros_like(out)
    num.backward(post)
    n = fst.num_states
    src = fst.arc_state()
    times = np.zeros(n, np.int64)
    for a in range(fst.num_arcs):          # states are in topological order
        times[fst.nextstate[a]] = times[src[a]] + 1
    F, S = sup.frames_per_sequence, sup.num_sequences
    rows = (times % F) * S + times // F
    like = out[rows[src], fst.ilabel - 1].astype(np.float64) - fst.weight
    alpha = np.full(n, -np.inf)
    alpha[0] = 0.0
    for a in np.argsort(src, kind="stable"):
        alpha[fst.nextstate[a]] = np.logaddexp(alpha[fst.nextstate[a]], alpha[src[a]] + like[a])
    final = np.where(np.isinf(fst.final), -np.inf, -fst.final.astype(np.float64))
    tot = np.logaddexp.reduce(alpha + final)
    beta = final.copy()
    for a in np.argsort(-src, kind="stable"):
        beta[src[a]] = np.logaddexp(beta[src[a]], like[a] + beta[fst.nextstate[a]])
    occ = np.exp(alpha[src] + like + beta[fst.nextstate] - tot)
    ref = np.zeros(out.shape)
    np.add.at(ref, (rows[src], fst.ilabel - 1), occ)
    assert abs(logp - tot) <= 1e-5 * abs(tot)
    np.testing.assert_allclose(post, ref, atol=1e-5)
    np.testing.assert_allclose(post.sum(axis=1), 1.0, atol=1e-4)


def test_bad_output_gives_kaldis_default_objective(golden_eg, golden_graph) -> None:
    """A NaN in the output: derivatives zeroed, objective -10 per frame."""
    sup = golden_eg.outputs[0].supervision
    out = np.zeros((sup.num_sequences * sup.frames_per_sequence, 64), np.float32)
    out[3, 5] = np.nan
    res = compute_chain_objf_and_deriv(ChainTrainingOptions(), golden_graph, sup, out, True, True)
    assert res.objf == -10 * res.weight
    assert not res.deriv.any() and not res.xent_deriv.any()


def test_cuda_kernels_under_simulator() -> None:
    """tests/train/chain/cuda (the CUDA denominator kernels against the CPU
    ones) in a subprocess under NUMBA_ENABLE_CUDASIM=1 (it must be set before
    Numba is imported)."""
    import os
    import subprocess
    import sys

    pytest.importorskip("numba.cuda")
    root = Path(__file__).resolve().parents[3]
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root / "src"), str(root),
                                                    env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/train/chain/cuda"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], tail
