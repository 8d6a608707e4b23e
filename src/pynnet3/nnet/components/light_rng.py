"""The components' random generator without importing ``numpy.random``.

The components draw from ``np.random.default_rng(seed)`` (PCG64 seeded
through a SeedSequence).  Most training runs only ever draw small integers
from it: the nonlinearities' statistics are stored on about every other
minibatch (``integers(0, 2)``, ``integers(0, 4)``).  Importing
``numpy.random`` (ten extension modules, and ``secrets``, ``hmac``,
``hashlib``, ``base64`` behind them) costs about 10 ms of CPU, a sizeable
part of a short nnet3-train job's start-up (Kaldi starts in a few ms).

:class:`LightGenerator` is that generator for scalar ``integers(low, high)``
draws, computed here exactly as NumPy computes them (same seeding, same
128-bit PCG64 (XSL-RR) stream, same Lemire bounded draw), and for a scalar
``random()`` (the ReLU self-repair's draw on each backprop), so every value,
and so every trained model, is the same as with NumPy's generator.  Any
other use (``random`` with arguments, ``standard_normal``, arrays of
integers ...) hands the exact state over to a real ``np.random.Generator``
and goes on there, so the stream continues unbroken.
tests/nnet/test_light_rng.py checks the values and the hand-over against
NumPy.
"""
from __future__ import annotations

from typing import Any

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_M128 = (1 << 128) - 1
# PCG's default 128-bit multiplier (numpy/random/src/pcg64/pcg64.h).
_PCG_MULT = 0x2360ED051FC65DA44385DF649FCCF645

# SeedSequence's hashing constants (numpy/random/bit_generator.pyx).
_INIT_A = 0x43B0D7E5
_MULT_A = 0x931E8875
_INIT_B = 0x8B51F9DD
_MULT_B = 0x58F38DED
_MIX_MULT_L = 0xCA01F9DD
_MIX_MULT_R = 0x4973F715
_XSHIFT = 16
_POOL_SIZE = 4


def _seed_words(seed: int) -> list[int]:
    """SeedSequence(seed).generate_state(4, uint64) for a non-negative int
    seed (no spawn key), as a list of four 64-bit ints."""
    entropy = []
    n = seed
    while True:
        entropy.append(n & _M32)
        n >>= 32
        if n == 0:
            break
    hash_const = _INIT_A

    def hashmix(value: int) -> int:
        nonlocal hash_const
        value ^= hash_const
        hash_const = (hash_const * _MULT_A) & _M32
        value = (value * hash_const) & _M32
        return value ^ (value >> _XSHIFT)

    def mix(x: int, y: int) -> int:
        result = (_MIX_MULT_L * x - _MIX_MULT_R * y) & _M32
        return result ^ (result >> _XSHIFT)

    pool = [hashmix(entropy[i] if i < len(entropy) else 0) for i in range(_POOL_SIZE)]
    for i_src in range(_POOL_SIZE):
        for i_dst in range(_POOL_SIZE):
            if i_src != i_dst:
                pool[i_dst] = mix(pool[i_dst], hashmix(pool[i_src]))
    for i_src in range(_POOL_SIZE, len(entropy)):
        for i_dst in range(_POOL_SIZE):
            pool[i_dst] = mix(pool[i_dst], hashmix(entropy[i_src]))
    hash_b = _INIT_B
    words32 = []
    for i in range(8):
        value = pool[i % _POOL_SIZE] ^ hash_b
        hash_b = (hash_b * _MULT_B) & _M32
        value = (value * hash_b) & _M32
        words32.append(value ^ (value >> _XSHIFT))
    return [words32[2 * i] | (words32[2 * i + 1] << 32) for i in range(4)]


class LightGenerator:
    """``np.random.default_rng(seed)`` for scalar ``integers(low, high)`` and
    ``random()``; anything else is passed on to NumPy's generator, made with
    the state reached so far."""

    def __init__(self, seed: int) -> None:
        w = _seed_words(seed)
        initstate = (w[0] << 64) | w[1]
        initseq = (w[2] << 64) | w[3]
        # pcg_setseq_128_srandom_r: state 0, step, add the seed, step.
        self._inc = ((initseq << 1) | 1) & _M128
        state = (0 * _PCG_MULT + self._inc) & _M128
        state = (state + initstate) & _M128
        self._state = (state * _PCG_MULT + self._inc) & _M128
        self._has_uint32 = 0
        self._uinteger = 0
        self._numpy: Any = None

    def _next64(self) -> int:
        # pcg_setseq_128_xsl_rr_64_random_r: step, then output of the new state.
        s = self._state = (self._state * _PCG_MULT + self._inc) & _M128
        x = ((s >> 64) ^ s) & _M64
        rot = s >> 122
        return ((x >> rot) | (x << ((64 - rot) & 63))) & _M64

    def _next32(self) -> int:
        # pcg64_next32
        if self._has_uint32:
            self._has_uint32 = 0
            return self._uinteger
        x = self._next64()
        self._has_uint32, self._uinteger = 1, x >> 32
        return x & _M32

    def integers(self, low: Any, high: Any = None, size: Any = None, *args: Any,
                 **kwargs: Any) -> Any:
        if (self._numpy is None and size is None and not args and not kwargs
                and type(low) is int and type(high) is int
                and 0 <= high - 1 - low < _M32):
            # Generator.integers (int64, endpoint=False): rng = high - 1 - low;
            # one value within 32 bits is a Lemire draw on the generator's
            # 32-bit outputs (halves of a 64-bit output, low half first,
            # the high half kept for the next draw).
            rng_excl = high - low
            if rng_excl == 1:
                return low                  # (NumPy draws nothing for one value)
            m = self._next32() * rng_excl
            leftover = m & _M32
            if leftover < rng_excl:
                threshold = (_M32 - (rng_excl - 1)) % rng_excl
                while leftover < threshold:
                    m = self._next32() * rng_excl
                    leftover = m & _M32
            return low + (m >> 32)
        return self.numpy_generator().integers(low, high, size, *args, **kwargs)

    def random(self, *args: Any, **kwargs: Any) -> Any:
        if self._numpy is None and not args and not kwargs:
            # Generator.random() for one float64: pcg64_next_double, the top
            # 53 bits of a 64-bit output (the buffered 32-bit half is left
            # as it is).  The ReLU self-repair draws one per backprop.
            return (self._next64() >> 11) * (1.0 / 9007199254740992.0)
        return self.numpy_generator().random(*args, **kwargs)

    def numpy_generator(self) -> Any:
        """The NumPy generator that continues this stream (made once)."""
        if self._numpy is None:
            import numpy as np

            gen = np.random.default_rng(0)
            gen.bit_generator.state = {
                "bit_generator": "PCG64",
                "state": {"state": self._state, "inc": self._inc},
                "has_uint32": self._has_uint32, "uinteger": self._uinteger}
            self._numpy = gen
        return self._numpy

    def __getattr__(self, name: str) -> Any:
        # Everything else (random, standard_normal, bit_generator ...).
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.numpy_generator(), name)
