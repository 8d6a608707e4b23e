"""Element math shared by the Numba CPU kernels (:mod:`.cpu`) and the CUDA
kernels (:mod:`.cuda`).

Each helper is a plain ``@numba.njit`` function of scalars.  The CPU kernels
call them directly; a ``@numba.cuda.jit`` kernel that calls one makes Numba
compile it again as a CUDA device function, so the two backends cannot
drift apart.  The formulas follow the NumPy reference (the components'
``sigmoid_f32`` / ``tanh_f32`` and ``ReferenceBackend.compress``) operation
by operation, including where Kaldi switches between float and double, so
that results agree to rounding (only ``expf`` itself may differ by an ulp
between NumPy, LLVM's libm and CUDA's libdevice).

Helpers take and return float32 scalars unless said otherwise; literals are
written as float32 / float64 explicitly because Numba would otherwise widen
float32 arithmetic to double.
"""
from __future__ import annotations

import math

from numba import float32, float64, njit

from ...numba_cache import ensure_numba_cache

ensure_numba_cache()  # (before the kernels below are decorated with cache=True)

# Unary nonlinearities, selected by a small integer so that one kernel serves
# all three (the branch is loop-invariant, so the compilers unswitch it).
SIGMOID = 0
TANH = 1
RELU = 2


@njit(cache=True)
def sigmoid(x):
    """Kaldi's float Sigmoid: expf of -|x|, the division in double."""
    e = float64(math.exp(-abs(x)))
    if x > 0:
        return float32(1.0 / (1.0 + e))
    return float32(e / (e + 1.0))


@njit(cache=True)
def tanh(x):
    """Kaldi's float Tanh: expf, a float square, the rest in double."""
    e = math.exp(-abs(x))
    e2 = float64(e * e)
    if x > 0:
        return float32(-1.0 + 2.0 / (1.0 + e2))
    return float32(1.0 - 2.0 / (1.0 + e2))


@njit(cache=True)
def relu(x):
    """max(x, 0) that keeps NaN and -0.0 as they are (std::max(x, 0.0f))."""
    if x < 0:
        return float32(0.0)
    return x


@njit(cache=True)
def unary_forward(x, op):
    if op == SIGMOID:
        return sigmoid(x)
    if op == TANH:
        return tanh(x)
    return relu(x)


@njit(cache=True)
def unary_backward(y, d, op):
    """Input derivative from the output value ``y`` and output derivative ``d``."""
    if op == SIGMOID:
        # float product d*y, then times (1 - y) in double
        return float32(float64(d * y) * (1.0 - float64(y)))
    if op == TANH:
        return float32(float64(d) * (1.0 - float64(y * y)))
    if y > 0:
        return d * float32(1.0)
    return d * float32(0.0)


@njit(cache=True)
def compress_code(x, inv_scale, lo, hi):
    """The integer code of ``x`` (as float32): x * inv_scale rounded half to
    even (rint, __float2int_rn) and clamped to [lo, hi]; NaN gives 0, as in
    ReferenceBackend.compress.  Values at or beyond a bound are clamped
    before rounding, so the floor below always fits an integer."""
    y = x * inv_scale
    if y != y:
        return float32(0.0)
    if y <= lo:
        return lo
    if y >= hi:
        return hi
    f = math.floor(y)              # an integer in Python 3 semantics
    diff = y - float32(f)          # exact: y and f are close float32 values
    if diff > float32(0.5) or (diff == float32(0.5) and f % 2 != 0):
        f += 1
    return float32(f)


@njit(cache=True)
def sign_code(x):
    """The code of the range-0 'sign' compression: 1 for x > 0, else 0."""
    if x > 0:
        return float32(1.0)
    return float32(0.0)


@njit(cache=True)
def code_of(x, inv_scale, lo, hi, sign_form):
    """The code of ``x`` under a CompressionPlan: :func:`sign_code` in the
    sign form, else :func:`compress_code`."""
    if sign_form:
        return sign_code(x)
    return compress_code(x, inv_scale, lo, hi)
