"""Small NumPy helpers shared by every layer.

:func:`sorted_unique` stands in for the plain ``np.unique(a)`` (sorted
distinct values): NumPy 2's version first asks ``np.ma.is_masked``, which
imports ``numpy.ma`` (about 6 ms and a megabyte, once per process) on the
first call, and then hashes, which costs several times more than a sort on
the arrays of tens to a few thousand integers the compiler and the
components work with.
"""
from __future__ import annotations

import numpy as np

__all__ = ["sorted_unique"]


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``a`` (flattened), as ``np.unique(a)``
    gives them for arrays without NaN (integer arrays, here)."""
    s = np.sort(np.asarray(a).ravel())
    if len(s) > 1:
        keep = np.empty(len(s), dtype=bool)
        keep[0] = True
        np.not_equal(s[1:], s[:-1], out=keep[1:])
        s = s[keep]
    return s
