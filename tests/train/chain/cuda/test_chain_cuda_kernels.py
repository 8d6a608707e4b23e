"""The CUDA denominator kernels against the CPU ones (Numba CUDA; on a real
GPU when one is usable, else run by tests/train/chain/test_chain_objective.py
under the CUDA simulator in a subprocess with NUMBA_ENABLE_CUDASIM=1).
Small random graphs: the simulator runs each CUDA thread as a Python thread."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.compute.backend import cuda_unavailable_reason
from pynnet3.train.chain.den_graph import DenominatorGraph
from pynnet3.train.chain.denominator import DenominatorComputation
from pynnet3.train.chain.fst import Fst

_REASON = cuda_unavailable_reason()
if _REASON is not None:
    pytest.skip(f"CUDA unusable ({_REASON}); run under the CUDA simulator by "
                "test_chain_objective.py", allow_module_level=True)


def random_graph(rng: np.random.Generator, num_states: int, num_pdfs: int) -> DenominatorGraph:
    src, dst = [], []
    for s in range(num_states):          # a self-loop, a next state and random arcs
        for d in {s, (s + 1) % num_states, *rng.integers(0, num_states, 2).tolist()}:
            src.append(s)
            dst.append(d)
    n = len(src)
    fst = Fst.from_arcs(num_states, 0, np.zeros(num_states), src,
                        rng.integers(1, num_pdfs + 1, n), np.zeros(n, np.int32),
                        rng.uniform(0.5, 2.5, n), dst)
    fst.olabel = fst.ilabel.copy()
    return DenominatorGraph.from_fst(fst, num_pdfs)


@pytest.mark.parametrize("num_states,num_seq,frames", [(5, 3, 4), (7, 2, 3)])
def test_cuda_denominator_matches_cpu(num_states: int, num_seq: int, frames: int) -> None:
    rng = np.random.default_rng(num_states)
    graph = random_graph(rng, num_states, 4)
    out = rng.normal(0, 2, (num_seq * frames, 4)).astype(np.float32)
    results = []
    for use_cuda in (False, True):
        den = DenominatorComputation(0.1, graph, num_seq, out, use_cuda=use_cuda)
        logp = den.forward()
        deriv = np.zeros_like(out)
        assert den.backward(-1.0, deriv)
        results.append((logp, deriv))
    (lc, dc), (lg, dg) = results
    assert abs(lc - lg) <= 1e-5 * abs(lc)
    np.testing.assert_allclose(dg, dc, rtol=1e-5, atol=1e-6)
    # the occupation probabilities of each frame and sequence sum to one
    np.testing.assert_allclose(dg.sum(axis=1), -1.0, atol=1e-5)
