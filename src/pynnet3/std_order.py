"""The iteration order of libstdc++'s ``std::unordered_map``.

Kaldi iterates unordered maps in a few places where the order shows in its
output (which Sum term the compiler emits first, which leftover minibatches
nnet3-merge-egs writes first).  To produce Kaldi's exact output we model the
order of the GCC library Kaldi is built with; it was checked against a real
``std::unordered_map<int, int>`` compiled with g++.
"""
from __future__ import annotations

import bisect
from typing import Hashable


# libstdc++'s _Prime_rehash_policy bucket counts (the start of its __prime_list).
_PRIMES = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
           83, 89, 97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193, 199, 211, 227, 241,
           257, 277, 293, 313, 337, 359, 383, 409, 439, 467, 503, 541, 577, 619, 661, 709, 761,
           823, 887, 953, 1031, 1109, 1187, 1277, 1361, 1459, 1567, 1693, 1823, 1931, 2053,
           # beyond here only the counts reached by doubling (checked with g++ 12)
           2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061, 712697, 1447153, 2938679]
_FAST_BKT = [2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13]


class StdUnorderedOrder:
    """The iteration order of a libstdc++ ``std::unordered_map`` (unique keys).

    A new node goes in front of the nodes of its bucket, or at the head of the
    list when its bucket is empty; a rehash re-inserts the nodes in their old
    order the same way.  Only the order is modelled (values live elsewhere).
    """

    def __init__(self) -> None:
        self.keys: list[Hashable] = []
        self.hashes: dict[Hashable, int] = {}
        self.bucket_count = 1
        self.next_resize = 0

    def _next_bkt(self, n: int) -> int:
        if n < len(_FAST_BKT):
            self.next_resize = _FAST_BKT[n]
            return _FAST_BKT[n]
        i = bisect.bisect_left(_PRIMES, n, lo=6)
        if i >= len(_PRIMES):
            raise NotImplementedError("more distinct keys than StdUnorderedOrder models")
        self.next_resize = _PRIMES[i]
        return _PRIMES[i]

    def _place(self, order: list, key: Hashable, nbkt: int) -> None:
        b = self.hashes[key] % nbkt
        for i, k in enumerate(order):
            if self.hashes[k] % nbkt == b:
                order.insert(i, key)
                return
        order.insert(0, key)

    def insert(self, key: Hashable, hash_value: int) -> None:
        if key in self.hashes:
            return
        n_elt = len(self.keys)
        if n_elt + 1 > self.next_resize:
            min_bkts = max(n_elt + 1, 0 if self.next_resize else 11) / 1.0
            if min_bkts >= self.bucket_count:
                nbkt = self._next_bkt(max(int(min_bkts) + 1, self.bucket_count * 2))
                old, self.keys = self.keys, []
                self.bucket_count = nbkt
                for k in old:
                    self._place(self.keys, k, nbkt)
            else:
                self.next_resize = int(self.bucket_count * 1.0)
        self.hashes[key] = hash_value
        self._place(self.keys, key, self.bucket_count)

    def erase(self, key: Hashable) -> None:
        if key in self.hashes:
            self.keys.remove(key)
            del self.hashes[key]

    def __iter__(self):
        return iter(list(self.keys))


def iteration_order(keys_in_insert_order, hash_fn=hash) -> list:
    """Iteration order of an unordered_map after inserting these keys in order."""
    order = StdUnorderedOrder()
    for k in keys_in_insert_order:
        order.insert(k, hash_fn(k))
    return list(order)
