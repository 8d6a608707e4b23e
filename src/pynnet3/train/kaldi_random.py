"""The random-number streams Kaldi's egs binaries draw from, reproduced exactly.

Kaldi uses two generators in the egs tools:

* ``Rand()`` / ``RandInt()`` / ``WithProb()`` (base/kaldi-math.cc) are glibc's
  ``rand()``: a TYPE_3 additive-feedback generator, seeded by ``srand(seed)``
  (the default state equals ``srand(1)``).  nnet3-copy-egs (``--random``,
  ``--keep-proportion``, ``--frame=random``), nnet3-shuffle-egs
  ``--buffer-size`` and the chunk-size choice in nnet3-get-egs use it.
* ``std::mt19937`` with ``std::shuffle`` (libstdc++): nnet3-shuffle-egs.

Reproducing both lets ``nnet3-shuffle-egs --srand=N`` and
``nnet3-copy-egs --random`` give Kaldi's output byte for byte.  The one stream
that cannot be reproduced is ``std::random_device`` (used by Kaldi's
UtteranceSplitter::DistributeRandomlyUniform); pynnet3 replaces it with a
seeded mt19937 (see :mod:`pynnet3.train.egs_split`).
"""
from __future__ import annotations

from typing import MutableSequence

import numpy as np

RAND_MAX = 2147483647
_MASK32 = 0xFFFFFFFF


def _c_div(a: int, b: int) -> tuple[int, int]:
    """C's truncating integer division and remainder."""
    q = abs(a) // abs(b)
    if (a < 0) != (b < 0):
        q = -q
    return q, a - q * b


class GlibcRand:
    """glibc ``rand()`` / ``srand()`` (random_r.c, TYPE_3, degree 31, separation 3)."""

    def __init__(self, seed: int = 1) -> None:
        self.srand(seed)

    def srand(self, seed: int) -> None:
        seed = seed & _MASK32
        if seed >= 1 << 31:          # the seed is stored in an int32_t
            seed -= 1 << 32
        if seed == 0:
            seed = 1
        r = [seed]
        word = seed
        for _ in range(1, 31):
            hi, lo = _c_div(word, 127773)
            word = 16807 * lo - 2836 * hi
            if word < 0:
                word += 2147483647
            r.append(word)
        self._state = [v & _MASK32 for v in r]   # the 31-word ring, oldest first
        self._front = 3                          # fptr - state
        self._rear = 0                           # rptr - state
        for _ in range(310):                     # glibc discards 10 * degree values
            self.rand()

    def rand(self) -> int:
        state = self._state
        f, r = self._front, self._rear
        val = (state[f] + state[r]) & _MASK32
        state[f] = val
        f += 1
        r += 1
        if f >= 31:
            f = 0
        elif r >= 31:
            r = 0
        self._front, self._rear = f, r
        return val >> 1

    # -- Kaldi's helpers on top of rand() (base/kaldi-math.cc) -------------
    def rand_int(self, min_val: int, max_val: int) -> int:
        """Kaldi's RandInt: ``min + Rand() % (max + 1 - min)``."""
        if max_val < min_val:
            raise ValueError(f"rand_int: max {max_val} < min {min_val}")
        if max_val == min_val:
            return min_val
        return min_val + self.rand() % (max_val + 1 - min_val)

    def with_prob(self, prob: float) -> bool:
        """Kaldi's WithProb(prob), float arithmetic (and int -> float comparison) included."""
        prob32 = np.float32(prob)
        if prob32 == 0:
            return False
        if prob32 == 1.0:
            return True
        if prob32 * np.float32(RAND_MAX) < 128.0:
            if self.rand() < RAND_MAX // 128:
                return self.with_prob(float(prob32) * 128.0)
            return False
        threshold = (np.float32(RAND_MAX) + np.float32(1.0)) * prob32
        return bool(np.float32(self.rand()) < threshold)


class MT19937:
    """``std::mt19937`` (32-bit Mersenne Twister, seeded like the C++ constructor)."""

    def __init__(self, seed: int = 5489) -> None:
        mt = [seed & _MASK32]
        for i in range(1, 624):
            x = mt[-1]
            mt.append((1812433253 * (x ^ (x >> 30)) + i) & _MASK32)
        self._mt = mt
        self._index = 624

    def _twist(self) -> None:
        mt = self._mt
        for i in range(624):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
            v = mt[(i + 397) % 624] ^ (y >> 1)
            if y & 1:
                v ^= 0x9908B0DF
            mt[i] = v
        self._index = 0

    def __call__(self) -> int:
        if self._index >= 624:
            self._twist()
        y = self._mt[self._index]
        self._index += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        y ^= y >> 18
        return y & _MASK32


def uniform_int(g: MT19937, a: int, b: int) -> int:
    """libstdc++ ``uniform_int_distribution<unsigned long>{a, b}(g)`` for a 32-bit engine.

    libstdc++ (GCC >= 11) downscales with Lemire's nearly-divisionless method
    using 64-bit products.
    """
    urange = b - a
    if urange >= _MASK32:
        raise ValueError("uniform_int: ranges wider than 32 bits are not needed here")
    erange = urange + 1
    product = g() * erange
    low = product & _MASK32
    if low < erange:
        threshold = ((1 << 32) - erange) % erange
        while low < threshold:
            product = g() * erange
            low = product & _MASK32
    return a + (product >> 32)


def std_shuffle(items: MutableSequence, g: MT19937) -> None:
    """libstdc++ ``std::shuffle(begin, end, g)`` in place (GCC >= 10 algorithm).

    When the range is small enough, libstdc++ draws the swap positions of two
    successive elements from a single random number.
    """
    n = len(items)
    if n == 0:
        return
    urngrange = _MASK32
    if urngrange // n >= n:
        i = 1
        if n % 2 == 0:
            j = uniform_int(g, 0, 1)
            items[i], items[j] = items[j], items[i]
            i += 1
        while i != n:
            swap_range = i + 1
            b1 = swap_range + 1
            x = uniform_int(g, 0, swap_range * b1 - 1)
            p1, p2 = divmod(x, b1)
            items[i], items[p1] = items[p1], items[i]
            i += 1
            items[i], items[p2] = items[p2], items[i]
            i += 1
        return
    for i in range(1, n):
        j = uniform_int(g, 0, i)
        items[i], items[j] = items[j], items[i]
