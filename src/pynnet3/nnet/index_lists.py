"""Read-only lists of Indexes / Cindexes held as int32 arrays.

The compiler passes index lists of whole steps around (100k rows for a
64-sequence training request) and often only needs them as arrays; these
lists keep the array and make the Python tuples only if somebody reads the
elements.  Code that can work on arrays uses ``.array`` (or
:func:`~pynnet3.nnet.index.index_columns`, which accepts any list).
"""
from __future__ import annotations

import gc
import itertools
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence, overload

import numpy as np

from .index import Index

__all__ = ["IndexList", "CindexList"]

_TUPLE_NEW = tuple.__new__


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while many small tuples are made
    (they form no cycles; collecting during it would walk them all again)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _ArrayBackedList(Sequence):
    """A read-only list held as an int32 array; Python objects are made on demand.

    Expanded computations have millions of cindexes that nothing may ever
    look at (the executor does not); building the tuples only when somebody
    reads them keeps shortcut expansion fast.
    """

    __slots__ = ("_array", "_factory", "_len", "_items")

    def __init__(self, array: np.ndarray | None = None, *,
                 factory: Callable[[], np.ndarray] | None = None, length: int = -1) -> None:
        """Either ``array``, or ``factory`` (called once, on first use) and ``length``."""
        if (array is None) == (factory is None):
            raise ValueError("give either an array or a factory")
        self._array = array
        self._factory = factory
        self._len = int(array.shape[0]) if array is not None else length
        self._items: list | None = None

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            assert self._factory is not None
            self._array = self._factory()
            self._factory = None
            if self._array.shape[0] != self._len:
                raise ValueError("lazy list: the factory made the wrong number of rows")
        return self._array

    def _make_items(self) -> list:
        raise NotImplementedError

    def items(self) -> list:
        if self._items is None:
            self._items = self._make_items()
        return self._items

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, i: int) -> Any: ...

    @overload
    def __getitem__(self, i: slice) -> list: ...

    def __getitem__(self, i):
        return self.items()[i]

    def __iter__(self) -> Iterator:
        return iter(self.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _ArrayBackedList):
            return self.array.shape == other.array.shape and bool(np.all(self.array == other.array))
        if isinstance(other, (list, tuple)):
            return self.items() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(len={len(self)})"


def _indexes_from_columns(n: list[int], t: list[int], x: list[int]) -> list[Index]:
    """Index objects from three columns, made at C speed (tuple.__new__ over
    zip skips the Python-level NamedTuple constructor; ~3x faster)."""
    with _gc_paused():
        return list(map(_TUPLE_NEW, itertools.repeat(Index), zip(n, t, x)))


class IndexList(_ArrayBackedList):
    """A list of :class:`Index` backed by an (len, 3) array n, t, x."""

    __slots__ = ()

    def _make_items(self) -> list:
        return _indexes_from_columns(*self.array.T.tolist())


class CindexList(_ArrayBackedList):
    """A list of (node, Index) backed by an (len, 4) array node, n, t, x."""

    __slots__ = ()

    def _make_items(self) -> list:
        cols = self.array.T.tolist()
        with _gc_paused():
            return list(zip(cols[0], _indexes_from_columns(*cols[1:])))
