"""The in-place forms of LogSoftmaxComponent and BatchNormComponent (training
mode) give, bit for bit, what their plain NumPy definitions give - also when
the output or the derivative shares memory with an input."""
from __future__ import annotations

import numpy as np

from pynnet3.nnet.components.normalize import BatchNormComponent
from pynnet3.nnet.components.nonlinearities import LogSoftmaxComponent
from pynnet3.nnet.config_line import ConfigLine

F32 = np.float32


def make(cls: type, line: str):
    comp = cls()
    comp.init_from_config(ConfigLine(line, "test.config", 1))
    return comp


def logsoftmax_definition(x: np.ndarray) -> np.ndarray:
    """Kaldi's ApplyLogSoftMax per row: sequential float sum of exp."""
    y = x - x.max(axis=1, keepdims=True)
    total = np.cumsum(np.exp(y), axis=1, dtype=F32)[:, -1]
    return y + (-np.log(total))[:, None]


def test_logsoftmax_bitwise() -> None:
    rng = np.random.default_rng(0)
    comp = make(LogSoftmaxComponent, "dim=301")
    x = (rng.standard_normal((700, 301)) * 4).astype(F32)
    out = np.full_like(x, np.nan)
    comp.propagate(None, x, out)
    assert np.array_equal(out, logsoftmax_definition(x))
    deriv = rng.standard_normal(x.shape).astype(F32)
    want = deriv - np.exp(out) * deriv.sum(axis=1, dtype=F32)[:, None]
    in_deriv = np.full_like(x, np.nan)
    comp.backprop("", None, x, out, deriv, None, None, in_deriv)
    assert np.array_equal(in_deriv, want)
    aliased = deriv.copy()           # in_deriv is out_deriv: the safe path
    comp.backprop("", None, x, out, aliased, None, None, aliased)
    assert np.array_equal(aliased, want)


def test_batchnorm_train_mode_bitwise() -> None:
    rng = np.random.default_rng(1)
    for line, shape in (("dim=64", (300, 64)), ("dim=64 block-dim=16", (100, 64))):
        comp = make(BatchNormComponent, line)
        x = np.maximum(rng.standard_normal(shape), 0).astype(F32)
        out = np.empty_like(x)
        memo = comp.propagate(None, x, out)
        # The definition: double column sums, float arithmetic.
        block = comp.block_dim
        xb = x.reshape(-1, block)
        n = xb.shape[0]
        x64 = xb.astype(np.float64)
        mean = x64.sum(axis=0).astype(F32) * F32(1.0 / n)
        uvar = np.einsum("ij,ij->j", x64, x64).astype(F32) * F32(1.0 / n)
        var_scale = F32(1.0 / (comp.target_rms * comp.target_rms))
        sc = uvar * var_scale + (-var_scale * mean) * mean
        sc = np.maximum(sc, F32(0.0)) + F32(var_scale * F32(comp.epsilon))
        scale = (1.0 / np.sqrt(sc.astype(np.float64))).astype(F32)
        want = ((xb - mean) * scale).reshape(shape)
        assert np.array_equal(out, want)
        in_place = x.copy()
        comp.propagate(None, in_place, in_place)
        assert np.array_equal(in_place, want)

        dz = rng.standard_normal(shape).astype(F32)
        z, dzb = want.reshape(-1, block), dz.reshape(-1, block)
        coeff = F32(-1.0 / (comp.target_rms * comp.target_rms * n))
        vdm = coeff * np.einsum("ij,ij->j", z.astype(np.float64),
                                dzb.astype(np.float64)).astype(F32) * scale
        temp = F32(-1.0 / n) * dzb.sum(axis=0, dtype=np.float64).astype(F32)
        want_dx = ((dzb + temp) * scale + z * vdm).reshape(shape)
        dx = np.full_like(dz, np.nan)
        comp.backprop("", None, x, want, dz, memo, None, dx)
        assert np.array_equal(dx, want_dx)
        comp.backprop("", None, x, want, dz, memo, None, dz)     # in place
        assert np.array_equal(dz, want_dx)
