"""The orthonormal constraint (train/orthonormal.py, Kaldi's ConstrainOrthonormal)."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.nnet.components.base import set_random_seed
from pynnet3.nnet.nnet import Nnet
from pynnet3.train.kaldi_random import GlibcRand
from pynnet3.train.orthonormal import constrain_orthonormal, constrain_orthonormal_internal


def _near_orthonormal(rs: np.random.RandomState, rows: int, cols: int,
                      scale: float, noise: float) -> np.ndarray:
    q, _ = np.linalg.qr(rs.randn(cols, rows))
    return (scale * q.T + noise * rs.randn(rows, cols)).astype(np.float32)


def test_one_step_is_kaldis_formula() -> None:
    rs = np.random.RandomState(0)
    M = _near_orthonormal(rs, 5, 9, 2.0, 0.05)
    M64 = M.astype(np.float64)
    # M <- M - 4 * (1/8) / scale^2 * (M M^T - scale^2 I) M
    want = M64 - 0.5 / 4.0 * (M64 @ M64.T - 4.0 * np.eye(5)) @ M64
    constrain_orthonormal_internal(2.0, "x", M)
    np.testing.assert_allclose(M, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_fixed_scale_converges(scale: float) -> None:
    rs = np.random.RandomState(1)
    M = _near_orthonormal(rs, 6, 10, scale, 0.1 * scale)
    errors = []
    for _ in range(6):
        errors.append(np.abs(M @ M.T - scale ** 2 * np.eye(6)).max() / scale ** 2)
        constrain_orthonormal_internal(scale, "x", M)
    assert errors[-1] < 1e-5 < errors[0]
    assert all(b < a for a, b in zip(errors, errors[1:]) if a > 1e-6)


def test_floating_scale() -> None:
    rs = np.random.RandomState(2)
    M = _near_orthonormal(rs, 4, 7, 3.0, 0.05)
    before = M.astype(np.float64).copy()
    constrain_orthonormal_internal(-1.0, "x", M)
    step = M.astype(np.float64) - before
    # the scale is chosen so that the change is orthogonal to M
    assert abs(np.sum(step * before)) < 1e-4 * np.linalg.norm(step) * np.linalg.norm(before)
    for _ in range(10):
        constrain_orthonormal_internal(-1.0, "x", M)
    P = M.astype(np.float64) @ M.T
    s2 = np.trace(P) / 4
    assert s2 == pytest.approx(9.0, rel=0.02)
    np.testing.assert_allclose(P, s2 * np.eye(4), atol=1e-4 * s2)
    Z = np.zeros((3, 5), dtype=np.float32)
    constrain_orthonormal_internal(-1.0, "x", Z)             # all-zero: left alone
    assert not Z.any()


NET = """input-node name=input dim=12
component name=lin type=LinearComponent input-dim=12 output-dim=4 orthonormal-constraint=1.0
component name=tall type=LinearComponent input-dim=4 output-dim=10 orthonormal-constraint=-1
component name=aff type=NaturalGradientAffineComponent input-dim=10 output-dim=6 param-stddev=0.16 orthonormal-constraint=0.5
component name=tdnn type=TdnnComponent input-dim=6 output-dim=3 time-offsets=0 orthonormal-constraint=1.0
component name=free type=AffineComponent input-dim=3 output-dim=3
component-node name=lin component=lin input=input
component-node name=tall component=tall input=lin
component-node name=aff component=aff input=tall
component-node name=tdnn component=tdnn input=aff
component-node name=free component=free input=tdnn
output-node name=output input=free
"""


def _nnet() -> Nnet:
    set_random_seed(3)
    nnet = Nnet()
    nnet.read_config(NET, "test")
    return nnet


def test_constrain_orthonormal_nnet() -> None:
    nnet = _nnet()
    before = [c.vectorize().copy() for c in nnet.components]
    draws = []

    def never(lo: int, hi: int) -> int:
        draws.append((lo, hi))
        return 1
    constrain_orthonormal(nnet, never)
    assert draws == [(0, 3)] * 4         # one draw per constrained component only
    for c, v in zip(nnet.components, before):
        np.testing.assert_array_equal(c.vectorize(), v)

    constrain_orthonormal(nnet, lambda lo, hi: 0)
    comps = dict(zip(nnet.component_names, nnet.components))
    np.testing.assert_array_equal(comps["free"].vectorize(), before[4])
    # each constrained matrix moved towards scale * (semi-)orthonormal
    for name, params, scale in (("lin", comps["lin"].params, 1.0),
                                ("tall", comps["tall"].params.T, None),
                                ("aff", comps["aff"].linear_params, 0.5),
                                ("tdnn", comps["tdnn"].linear_params, 1.0)):
        idx = nnet.component_names.index(name)
        old = before[idx][:params.size].reshape(params.shape if name != "tall"
                                                else params.T.shape)
        old = old.T if name == "tall" else old
        def err(m: np.ndarray) -> float:
            P = m.astype(np.float64) @ m.T
            s2 = scale ** 2 if scale else np.trace(P @ P) / np.trace(P)
            return float(np.linalg.norm(P - s2 * np.eye(P.shape[0])))
        assert err(params) < err(old), name
    # bias untouched by the constraint
    np.testing.assert_array_equal(comps["aff"].bias_params,
                                  before[2][comps["aff"].linear_params.size:])


def test_kaldi_random_stream() -> None:
    """With glibc's rand() (what nnet3-train draws from) the choice of
    components follows RandInt(0, 3) exactly."""
    nnet = _nnet()
    g, ref = GlibcRand(5), GlibcRand(5)
    before = [c.vectorize().copy() for c in nnet.components]
    constrain_orthonormal(nnet, g.rand_int)
    expected = [ref.rand_int(0, 3) == 0 for _ in range(4)]
    changed = [not np.array_equal(c.vectorize(), v)
               for c, v in zip(nnet.components[:4], before[:4])]
    assert changed == expected
