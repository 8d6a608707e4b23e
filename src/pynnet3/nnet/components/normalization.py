"""Normalisation components: NormalizeComponent and BatchNormComponent.

Both are simple components (one output row per input row).  Kaldi reference:
nnet-normalize-component.{h,cc}.

BatchNormComponent keeps its statistics in double precision (``count`` and the
per-dimension sums of x and x^2) but writes them as float mean / variance, and
re-derives the sums on reading.  The arithmetic here follows Kaldi's order of
float/double operations step by step, because any difference would change the
bytes of a re-written model.
"""
from __future__ import annotations

import math
from typing import ClassVar
from dataclasses import dataclass

import numpy as np

from ... import log
from ...io.kaldi_io import KaldiReader, KaldiWriter, f32
from ...numba_cache import lazy_njit, numba_loaded
from ...threads import run_column_blocks
from ..config_line import ConfigLine
from .base import Component, Prop, fmt_bool, fmt_g, register, reshape_rows, rng, summarize_vector

_F32 = np.float32


def _same_data(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays start at the same address (Kaldi's Data() == Data())."""
    return a.__array_interface__["data"][0] == b.__array_interface__["data"][0]


# ---------------------------------------------------------------------------
# Training-mode BatchNorm kernels.  NumPy's column sums in double
# (``x.sum(axis=0, dtype=float64)``, ``einsum("ij,ij->j", ..., dtype=float64)``)
# add the rows one after another, row 0 first, but cast each block to double
# in a buffer first (about 150 us for 128 x 512); these loops make the same
# additions in the same order (so the same bits) in one pass over the rows,
# and the elementwise formulas in one more pass, with the same float32
# operations in the same order (Numba contracts nothing into fused
# multiply-adds without fastmath).  They run only where the process has
# Numba loaded anyway (--cpu-backend=numba, library use) and the matrix is
# not tiny: nnet3-train's default NumPy backend never imports Numba (its
# import would cost more start-up than these loops save), and NumPy then
# makes the same sums.

#: Smallest matrix (elements) for the Numba BatchNorm loops.
BN_JIT_MIN_ELEMENTS = 4096


def _bn_use_jit(x: np.ndarray, use_jit: bool | None) -> bool:
    if use_jit is not None:
        return use_jit
    return x.size >= BN_JIT_MIN_ELEMENTS and numba_loaded()


@lazy_njit(cache=True, nogil=True)
def _bn_forward_jit(x: np.ndarray, y: np.ndarray, sums: np.ndarray, sumsq: np.ndarray,
                    inv_n: np.float32, var_scale: np.float32, var_floor: np.float32,
                    mean: np.ndarray, uvar: np.ndarray, scale: np.ndarray) -> None:
    rows, cols = x.shape
    sums[:] = 0.0
    sumsq[:] = 0.0
    for i in range(rows):
        for j in range(cols):
            v = np.float64(x[i, j])
            sums[j] += v
            sumsq[j] += v * v
    for j in range(cols):
        m = np.float32(sums[j]) * inv_n
        u = np.float32(sumsq[j]) * inv_n
        mean[j] = m
        uvar[j] = u
        sc = u * var_scale + (-var_scale * m) * m
        if sc < np.float32(0.0):        # (NaN stays NaN, as with np.maximum)
            sc = np.float32(0.0)
        sc = sc + var_floor
        scale[j] = np.float32(1.0 / np.sqrt(np.float64(sc)))
    for i in range(rows):
        for j in range(cols):
            y[i, j] = (x[i, j] - mean[j]) * scale[j]


@lazy_njit(cache=True, nogil=True)
def _bn_backprop_jit(z: np.ndarray, dz: np.ndarray, dx: np.ndarray, sums: np.ndarray,
                     dots: np.ndarray, coeff: np.float32, minus_inv_n: np.float32,
                     scale: np.ndarray, var_deriv_mod: np.ndarray, temp: np.ndarray) -> None:
    rows, cols = z.shape
    sums[:] = 0.0
    dots[:] = 0.0
    for i in range(rows):
        for j in range(cols):
            g = np.float64(dz[i, j])
            sums[j] += g
            dots[j] += np.float64(z[i, j]) * g
    for j in range(cols):
        var_deriv_mod[j] = (coeff * np.float32(dots[j])) * scale[j]
        temp[j] = minus_inv_n * np.float32(sums[j])
    # dx may be dz itself: each element is read before it is written.
    for i in range(rows):
        for j in range(cols):
            z_term = z[i, j] * var_deriv_mod[j]
            dx[i, j] = (dz[i, j] + temp[j]) * scale[j] + z_term


@register
class NormalizeComponent(Component):
    """y = x * sqrt(D) * target_rms / |x|, per block of ``block_dim`` values.

    With add-log-stddev=true an extra output per block holds log(rms of x).
    """

    type_name = "NormalizeComponent"

    # 2^-66: floor of the mean square, so that an all-zero row gives zero
    # output instead of a division by zero (its square root is exact in float).
    SQUARED_NORM_FLOOR = 2.0 ** -66

    def __init__(self) -> None:
        self.input_dim_ = 0
        self.block_dim = 0
        self.target_rms = 1.0
        self.add_log_stddev = False

    # -- dims and flags ----------------------------------------------------
    def input_dim(self) -> int:
        return self.input_dim_

    def output_dim(self) -> int:
        extra = self.input_dim_ // self.block_dim if (self.add_log_stddev and self.block_dim) else 0
        return self.input_dim_ + extra

    def properties(self) -> int:
        p = Prop.SIMPLE | Prop.BACKPROP_NEEDS_INPUT | Prop.BACKPROP_ADDS
        if not self.add_log_stddev:
            p |= Prop.PROPAGATE_IN_PLACE | Prop.BACKPROP_IN_PLACE
        if self.block_dim != self.input_dim_:
            p |= Prop.INPUT_CONTIGUOUS | Prop.OUTPUT_CONTIGUOUS
        return int(p)

    # -- config ------------------------------------------------------------
    def init_from_config(self, cfl: ConfigLine) -> None:
        # "input-dim" is the older spelling of "dim"; both are accepted.
        dim = cfl.get_int("dim")
        if dim is None:
            dim = cfl.get_int("input-dim")
        ok = dim is not None
        self.input_dim_ = dim if dim is not None else 0
        self.block_dim = cfl.get_int("block-dim", self.input_dim_)
        self.target_rms = f32(cfl.get_float("target-rms", 1.0))
        self.add_log_stddev = cfl.get_bool("add-log-stddev", False)
        if (not ok or self.input_dim_ <= 0 or self.target_rms <= 0.0 or self.block_dim <= 0
                or self.input_dim_ % self.block_dim != 0):
            raise self.config_error(cfl, "invalid initializer (need dim>0, target-rms>0, "
                                         "block-dim>0 dividing dim)")

    # -- I/O ---------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        token = r.read_token()
        if token == self.opening_tag():
            token = r.read_token()
        if token not in ("<Dim>", "<InputDim>"):
            raise r.error(f"NormalizeComponent: expected <Dim> or <InputDim>, got {token[:40]}")
        self.input_dim_ = r.read_int32()
        token = r.read_token()
        if token == "<BlockDim>":
            self.block_dim = r.read_int32()
            token = r.read_token()
        else:
            self.block_dim = self.input_dim_
        if token == "<TargetRms>":
            self.target_rms = r.read_float()
            token = r.read_token()
        if token == "<AddLogStddev>":
            self.add_log_stddev = r.read_bool()
            token = r.read_token()
        else:
            self.add_log_stddev = False
        if token == "<ValueAvg>":
            # Very old models stored unused statistics here; skip them.
            r.read_double_vector()
            r.expect_token("<DerivAvg>")
            r.read_double_vector()
            r.expect_token("<Count>")
            r.read_double()
            token = r.read_token()
        if token != self.closing_tag():
            raise r.error(f"NormalizeComponent: expected {self.closing_tag()}, got {token[:40]}")
        if (self.input_dim_ <= 0 or self.block_dim <= 0
                or self.input_dim_ % self.block_dim != 0):
            raise r.error(f"NormalizeComponent: bad dims {self.input_dim_}/{self.block_dim}")

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<InputDim>")
        w.write_int32(self.input_dim_)
        if self.block_dim != self.input_dim_:
            w.write_token("<BlockDim>")
            w.write_int32(self.block_dim)
        w.write_token("<TargetRms>")
        w.write_float(self.target_rms)
        w.write_token("<AddLogStddev>")
        w.write_bool(self.add_log_stddev)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = (f"{self.type_name}, input-dim={self.input_dim()}, output-dim={self.output_dim()}"
             f", target-rms={fmt_g(self.target_rms)}, add-log-stddev={fmt_bool(self.add_log_stddev)}")
        if self.block_dim != self.input_dim_:
            s += f", block-dim={self.block_dim}"
        return s

    # -- math --------------------------------------------------------------
    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray):
        rows = in_value.shape[0]
        bd = self.block_dim
        x = np.asarray(in_value, dtype=_F32).reshape(rows * (self.input_dim_ // bd), bd)
        # Mean square scaled by 1/target_rms^2, floored, to the power -0.5.
        d_scaled = _F32(bd) * _F32(self.target_rms) * _F32(self.target_rms)
        sumsq = np.einsum("ij,ij->i", x.astype(np.float64), x.astype(np.float64))
        in_norm = (sumsq * float(_F32(1.0 / float(d_scaled)))).astype(_F32)
        in_norm = np.maximum(in_norm, _F32(self.SQUARED_NORM_FLOOR))
        in_norm = (1.0 / np.sqrt(in_norm.astype(np.float64))).astype(_F32)
        y = x * in_norm[:, None]
        if self.add_log_stddev:
            log_col = (-np.log(in_norm.astype(np.float64))).astype(_F32) + _F32(math.log(self.target_rms))
            y = np.concatenate([y, log_col[:, None].astype(_F32)], axis=1)
        out_value[...] = y.reshape(rows, self.output_dim())
        return None

    def backprop(self, debug_info, indexes, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo,
                 to_update, in_deriv: np.ndarray | None) -> None:
        """Kaldi's DiffNormalizePerRow, per block.  With y = f x and
        f = (max(floor, x.x / (D target_rms^2)))^{-1/2}:
        dF/dx = f dF/dy - f^3 / (D target_rms^2) (dF/dy . x) x  (the second
        term vanishes where the floor is active), plus, with add-log-stddev,
        dF/dlog_stddev x / max(x.x, D floor).  BACKPROP_ADDS, except that in
        place (in_deriv is out_deriv) the first term replaces the content."""
        if in_deriv is None:
            return
        bd = self.block_dim
        out_bd = bd + (1 if self.add_log_stddev else 0)
        x = np.asarray(in_value, dtype=_F32).reshape(-1, bd)
        od = np.asarray(out_deriv).reshape(-1, out_bd)
        idr = reshape_rows(in_deriv, bd)
        od_no_log = od[:, :bd]
        x64 = x.astype(np.float64)
        dot_products = np.einsum("ij,ij->i", od_no_log.astype(np.float64), x64).astype(_F32)
        in_norm = np.einsum("ij,ij->i", x64, x64).astype(_F32)
        d_scaled = _F32(bd) * _F32(self.target_rms) * _F32(self.target_rms)
        floor = _F32(self.SQUARED_NORM_FLOOR)
        in_place = _same_data(idr, od_no_log)
        if self.add_log_stddev:
            log_stddev_deriv = (_F32(1.0) / np.maximum(in_norm, _F32(bd) * floor)
                                * od[:, bd]).astype(_F32)
            idr += log_stddev_deriv[:, None] * x
        f = np.maximum(in_norm * _F32(1.0 / float(d_scaled)), floor)
        f = (1.0 / np.sqrt(f.astype(np.float64))).astype(_F32)
        if in_place:
            idr *= f[:, None]
        else:
            idr += f[:, None] * od_no_log
        f3 = np.where(f == _F32(1.0 / math.sqrt(self.SQUARED_NORM_FLOOR)), _F32(0.0), f) ** 3
        idr += (_F32(-1.0 / float(d_scaled)) * (dot_products * f3))[:, None] * x


# ---------------------------------------------------------------------------


@dataclass
class BatchNormMemo:
    """What the training-mode forward pass keeps for backprop / StoreStats:
    rows 0..2 of ``mean_uvar_scale`` are the minibatch mean, the uncentred
    variance (mean of x^2) and the scale applied; rows 3..4 are scratch space
    for backprop (as in Kaldi)."""

    num_frames: int
    mean_uvar_scale: np.ndarray


@register
class BatchNormComponent(Component):
    """Batch normalisation, optionally sharing statistics across blocks
    (block-dim < dim: each block of block-dim values is treated as a row)."""

    type_name = "BatchNormComponent"

    def __init__(self) -> None:
        self.dim = 0
        self.block_dim = 0
        self.epsilon = f32(1.0e-03)
        self.target_rms = 1.0
        self.test_mode = False
        self.count = 0.0                     # double in Kaldi
        self.stats_sum = np.zeros(0, dtype=np.float64)
        self.stats_sumsq = np.zeros(0, dtype=np.float64)
        # Derived (only in test mode): out = in * scale_ + offset.
        self.offset = np.zeros(0, dtype=_F32)
        self.scale_ = np.zeros(0, dtype=_F32)

    # -- dims and flags ----------------------------------------------------
    def input_dim(self) -> int:
        return self.dim

    def output_dim(self) -> int:
        return self.dim

    # Plain ints built once: properties() is asked many times per minibatch.
    _PROPS: ClassVar[int] = int(Prop.SIMPLE | Prop.BACKPROP_NEEDS_OUTPUT | Prop.PROPAGATE_IN_PLACE
                                | Prop.BACKPROP_IN_PLACE)
    _PROPS_CONTIGUOUS: ClassVar[int] = int(Prop.INPUT_CONTIGUOUS | Prop.OUTPUT_CONTIGUOUS)
    _PROPS_TRAIN: ClassVar[int] = int(Prop.USES_MEMO | Prop.STORES_STATS)

    def properties(self) -> int:
        p = self._PROPS
        if self.block_dim < self.dim:
            p |= self._PROPS_CONTIGUOUS
        if not self.test_mode:
            p |= self._PROPS_TRAIN
        return p

    def _check(self) -> bool:
        return (self.dim > 0 and self.block_dim > 0 and self.dim % self.block_dim == 0
                and self.epsilon > 0.0 and self.target_rms > 0.0)

    # -- derived quantities ------------------------------------------------
    def _mean_and_var_f32(self) -> tuple[np.ndarray, np.ndarray]:
        """Float mean and (unfloored) variance as Kaldi's Write/Info compute
        them: float copies of the double sums, scaled by float(1/count), then
        var -= mean*mean in float (product rounded, then subtracted)."""
        mean = self.stats_sum.astype(_F32)
        var = self.stats_sumsq.astype(_F32)
        if self.count != 0:
            inv = _F32(1.0 / self.count)
            mean = mean * inv
            var = var * inv
            var = var - mean * mean
        return mean, var

    def _compute_derived(self) -> None:
        if not self.test_mode:
            self.offset = np.zeros(0, dtype=_F32)
            self.scale_ = np.zeros(0, dtype=_F32)
            return
        if self.count == 0.0:
            log.warn("Test-mode is set but there is no data count.  Creating random counts.  "
                     "This is NOT A PROBLEM if the message appears in unit-tests or in "
                     "compute_prob_*.0.log.  If you see this elsewhere, something is very wrong.")
            self.count = 1.0
            self.stats_sum = rng().standard_normal(self.block_dim)
            self.stats_sumsq = rng().standard_normal(self.block_dim)
            self.stats_sumsq = self.stats_sumsq + self.stats_sum * self.stats_sum
        offset = self.stats_sum.astype(_F32) * _F32(-1.0 / self.count)    # -mean
        scale = self.stats_sumsq.astype(_F32) * _F32(1.0 / self.count)
        scale = scale - offset * offset                                     # variance
        scale = np.maximum(scale, _F32(0.0))
        scale = scale + _F32(self.epsilon)
        scale = (1.0 / np.sqrt(scale.astype(np.float64))).astype(_F32)
        scale = scale * _F32(self.target_rms)
        self.scale_ = scale.astype(_F32)
        self.offset = (offset * self.scale_).astype(_F32)                   # -(scale*mean)

    def set_test_mode(self, test_mode: bool) -> None:
        self.test_mode = bool(test_mode)
        self._compute_derived()

    # -- config ------------------------------------------------------------
    def init_from_config(self, cfl: ConfigLine) -> None:
        dim = cfl.get_int("dim")
        self.block_dim = cfl.get_int("block-dim", -1)
        self.epsilon = f32(cfl.get_float("epsilon", 1.0e-03))
        self.target_rms = f32(cfl.get_float("target-rms", 1.0))
        self.test_mode = cfl.get_bool("test-mode", False)
        if dim is None or dim <= 0:
            raise self.config_error(cfl, "BatchNormComponent must have 'dim' specified, and > 0")
        self.dim = dim
        if self.block_dim == -1:
            self.block_dim = self.dim
        if not (self.block_dim > 0 and self.dim % self.block_dim == 0
                and self.epsilon > 0 and self.target_rms > 0):
            raise self.config_error(cfl, "invalid configuration (block-dim must divide dim; "
                                         "epsilon and target-rms must be > 0)")
        self.count = 0.0
        self.stats_sum = np.zeros(self.block_dim, dtype=np.float64)
        self.stats_sumsq = np.zeros(self.block_dim, dtype=np.float64)
        if self.test_mode:
            self._compute_derived()

    # -- I/O ---------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        self.expect_opening_or(r, "<Dim>")
        self.dim = r.read_int32()
        r.expect_token("<BlockDim>")
        self.block_dim = r.read_int32()
        r.expect_token("<Epsilon>")
        self.epsilon = r.read_float()
        r.expect_token("<TargetRms>")
        self.target_rms = r.read_float()
        r.expect_token("<TestMode>")
        self.test_mode = r.read_bool()
        r.expect_token("<Count>")
        self.count = r.read_double()
        r.expect_token("<StatsMean>")
        mean = r.read_double_vector()
        r.expect_token("<StatsVar>")
        var = r.read_double_vector()
        if mean.shape[0] != var.shape[0]:
            raise r.error("BatchNormComponent: <StatsMean> and <StatsVar> differ in size")
        # Back to sums: sumsq = (var + mean^2) * count, sum = mean * count (double).
        self.stats_sumsq = (var + mean * mean) * self.count
        self.stats_sum = mean * self.count
        r.expect_token(self.closing_tag())
        if not self._check():
            raise r.error(f"BatchNormComponent: invalid dim={self.dim} block-dim={self.block_dim} "
                          f"epsilon={self.epsilon} target-rms={self.target_rms}")
        self._compute_derived()

    def write(self, w: KaldiWriter) -> None:
        w.write_token(self.opening_tag())
        w.write_token("<Dim>")
        w.write_int32(self.dim)
        w.write_token("<BlockDim>")
        w.write_int32(self.block_dim)
        w.write_token("<Epsilon>")
        w.write_float(self.epsilon)
        w.write_token("<TargetRms>")
        w.write_float(self.target_rms)
        w.write_token("<TestMode>")
        w.write_bool(self.test_mode)
        w.write_token("<Count>")
        w.write_double(self.count)
        mean, var = self._mean_and_var_f32()
        w.write_token("<StatsMean>")
        w.write_vector(mean)
        w.write_token("<StatsVar>")
        w.write_vector(var)
        w.write_token(self.closing_tag())

    def info(self) -> str:
        s = (f"{self.type_name}, dim={self.dim}, block-dim={self.block_dim}"
             f", epsilon={fmt_g(self.epsilon)}, target-rms={fmt_g(self.target_rms)}"
             f", count={fmt_g(self.count)}, test-mode={fmt_bool(self.test_mode)}")
        if self.count > 0:
            mean, var = self._mean_and_var_f32()
            var = np.maximum(var, _F32(0.0))
            stddev = np.sqrt(var.astype(np.float64)).astype(_F32)
            s += f", data-mean={summarize_vector(mean)}, data-stddev={summarize_vector(stddev)}"
        return s

    # -- stats -------------------------------------------------------------
    def scale(self, alpha: float) -> None:
        if alpha == 0:
            self.count = 0.0
            self.stats_sum = np.zeros_like(self.stats_sum)
            self.stats_sumsq = np.zeros_like(self.stats_sumsq)
        else:
            a = f32(alpha)
            self.count *= a
            self.stats_sum = self.stats_sum * a
            self.stats_sumsq = self.stats_sumsq * a

    def add(self, alpha: float, other: Component) -> None:
        assert isinstance(other, BatchNormComponent)
        a = f32(alpha)
        self.count += a * other.count
        self.stats_sum = self.stats_sum + a * other.stats_sum
        self.stats_sumsq = self.stats_sumsq + a * other.stats_sumsq
        # The stats may have changed, so the test-mode transform must follow.
        self._compute_derived()

    def zero_stats(self) -> None:
        # In test mode the stats define the transform, so they are kept.
        if not self.test_mode:
            self.count = 0.0
            self.stats_sum = np.zeros_like(self.stats_sum)
            self.stats_sumsq = np.zeros_like(self.stats_sumsq)

    # -- math --------------------------------------------------------------
    def _reshaped(self, mat: np.ndarray) -> np.ndarray:
        """Rows of block_dim values (a view when ``mat`` is contiguous)."""
        return np.asarray(mat).reshape(-1, self.block_dim)

    def propagate(self, indexes, in_value: np.ndarray, out_value: np.ndarray,
                  use_jit: bool | None = None):
        """``use_jit``: force the Numba loops (True) or NumPy (False), for tests."""
        if in_value.shape != out_value.shape or in_value.shape[1] not in (self.dim, self.block_dim):
            raise ValueError("BatchNormComponent.propagate: bad matrix shapes")
        x = self._reshaped(np.asarray(in_value, dtype=_F32))
        if not self.test_mode:
            num_frames = x.shape[0]
            memo = BatchNormMemo(num_frames, np.zeros((5, self.block_dim), dtype=_F32))
            mean, uvar, scale = memo.mean_uvar_scale[0], memo.mean_uvar_scale[1], memo.mean_uvar_scale[2]
            inv_n = _F32(1.0 / num_frames)
            # Scale by 1/target_rms^2 here, which saves a multiply later.
            var_scale = _F32(1.0 / (self.target_rms * self.target_rms))
            var_floor = _F32(var_scale * _F32(self.epsilon))
            # out = (x - mean) * scale, in place in out_value (which may be x).
            y = reshape_rows(out_value, self.block_dim)
            if _bn_use_jit(x, use_jit):
                work = np.empty((2, self.block_dim), dtype=np.float64)
                _bn_forward_jit(x, y, work[0], work[1], inv_n, var_scale, var_floor,
                                mean, uvar, scale)
                return memo
            def columns(b: int, e: int) -> None:
                # Column sums in double (float32 products are exact there);
                # the dtype= forms cast in small buffers instead of copying x.
                xs, ys = x[:, b:e], y[:, b:e]
                m, u, s = mean[b:e], uvar[b:e], scale[b:e]
                m[:] = xs.sum(axis=0, dtype=np.float64).astype(_F32) * inv_n
                u[:] = np.einsum("ij,ij->j", xs, xs, dtype=np.float64).astype(_F32) * inv_n
                sc = u * var_scale + (-var_scale * m) * m
                sc = np.maximum(sc, _F32(0.0)) + var_floor
                s[:] = (1.0 / np.sqrt(sc.astype(np.float64))).astype(_F32)
                np.subtract(xs, m, out=ys)
                ys *= s

            run_column_blocks(columns, x.shape[1], x.size)
            return memo
        if self.offset.shape[0] != self.block_dim:
            raise RuntimeError("Test mode set in BatchNormComponent, but no stats.")
        # out = in * scale + offset, written straight into out_value (the
        # usual case is in place) when it can be seen in blocks without a copy.
        if x.shape == out_value.shape:
            y = out_value
        elif out_value.flags.c_contiguous:
            y = out_value.reshape(x.shape)       # a view
        else:
            y = None
        if y is None:
            out_value[...] = (x * self.scale_ + self.offset).reshape(out_value.shape)
        else:
            np.multiply(x, self.scale_, out=y)
            y += self.offset
        return None

    def backprop(self, debug_info, indexes, in_value: np.ndarray | None,
                 out_value: np.ndarray | None, out_deriv: np.ndarray, memo,
                 to_update, in_deriv: np.ndarray | None, use_jit: bool | None = None) -> None:
        """Sets in_deriv (may be out_deriv itself: BACKPROP_IN_PLACE);
        ``use_jit`` as in :meth:`propagate`.

        Training mode, with z = the output, z' its derivative, I frames and
        scale = the memo's scale: x' = scale (z' - mean(z')) + z v, where
        v = -mean(z' z) scale / target_rms^2 (the derivative through the
        variance).  Test mode is a fixed per-column scale."""
        if in_deriv is None:
            return
        z = self._reshaped(out_value)
        dz = self._reshaped(out_deriv)
        dx = reshape_rows(in_deriv, self.block_dim)
        if self.test_mode:
            if self.offset.shape[0] != self.block_dim:
                raise RuntimeError("BatchNormComponent.backprop: test mode without stats")
            dx[...] = dz * self.scale_
            return
        if not isinstance(memo, BatchNormMemo):
            raise ValueError("BatchNormComponent.backprop needs the memo from propagate")
        num_frames = memo.num_frames
        if z.shape[0] != num_frames:
            raise ValueError("BatchNormComponent.backprop: row count differs from propagate")
        scale = memo.mean_uvar_scale[2]
        var_deriv_mod = memo.mean_uvar_scale[3]
        temp = memo.mean_uvar_scale[4]
        coeff = _F32(-1.0 / (self.target_rms * self.target_rms * num_frames))
        if _bn_use_jit(z, use_jit):
            work = np.empty((2, self.block_dim), dtype=np.float64)
            _bn_backprop_jit(z, dz, dx, work[0], work[1], coeff, _F32(-1.0 / num_frames),
                             scale, var_deriv_mod, temp)
            return
        minus_inv_n = _F32(-1.0 / num_frames)

        def columns(b: int, e: int) -> None:
            zs, dzs, dxs = z[:, b:e], dz[:, b:e], dx[:, b:e]
            v, t, s = var_deriv_mod[b:e], temp[b:e], scale[b:e]
            v[:] = coeff * np.einsum("ij,ij->j", zs, dzs, dtype=np.float64).astype(_F32)
            v *= s
            t[:] = minus_inv_n * dzs.sum(axis=0, dtype=np.float64).astype(_F32)
            # Both column statistics are taken before dx (maybe dz) is
            # written.  dx = (dz + temp) * scale + z * var_deriv_mod, rounded
            # in that order.
            z_term = zs * v
            np.add(dzs, t, out=dxs)
            dxs *= s
            dxs += z_term

        run_column_blocks(columns, z.shape[1], z.size)

    def store_stats(self, in_value: np.ndarray, out_value: np.ndarray, memo) -> None:
        if self.test_mode:
            raise RuntimeError("BatchNormComponent.store_stats called in test mode")
        if memo is None:
            raise ValueError("BatchNormComponent.store_stats needs the memo from propagate")
        if self.stats_sum.shape[0] != self.block_dim:
            self.stats_sum = np.zeros(self.block_dim, dtype=np.float64)
            self.stats_sumsq = np.zeros(self.block_dim, dtype=np.float64)
        n = f32(memo.num_frames)
        self.count += n
        self.stats_sum = self.stats_sum + n * memo.mean_uvar_scale[0].astype(np.float64)
        self.stats_sumsq = self.stats_sumsq + n * memo.mean_uvar_scale[1].astype(np.float64)
