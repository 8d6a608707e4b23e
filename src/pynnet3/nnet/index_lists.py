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
from typing import Any, Callable, Iterator, NamedTuple, Sequence, overload

import numpy as np

from .index import Index

__all__ = ["IndexList", "CindexList", "NTiling", "ListTable", "slotted_maker", "gc_paused"]

_TUPLE_NEW = tuple.__new__


class gc_paused:
    """``with gc_paused(): ...`` pauses Python's cyclic garbage collector while
    a block makes many small objects (Index tuples, lists, commands) that form
    no reference cycles.

    Otherwise the collector's repeated full passes walk every live object
    again and again (a large graph holds millions of tuples); nothing is
    lost by collecting later.  A plain class rather than a generator-based
    context manager, whose exit allocates (and so would run the young-object
    pass that re-enabling makes due inside the block's exit instead of at the
    caller's next allocation).
    """

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()


class NTiling(NamedTuple):
    """A list of (c)indexes laid out regularly in n, held as its first copy.

    The rows come in blocks of ``num_n * n_stride``; inside a block, row
    ``k * n_stride + j`` is row ``j`` of the block's first copy with ``k``
    added to its n (column ``n_col``).  ``base`` holds the first copies of
    all blocks (``num_blocks * n_stride`` rows).  A 64-sequence computation's
    lists are almost all of this form (the shortcut expander makes them so),
    which lets the computation cache store and rebuild them at 1/64 of the
    size, and lets index hooks work on the small base.
    """

    base: np.ndarray
    num_n: int
    n_stride: int
    n_col: int

    @property
    def num_rows(self) -> int:
        return self.base.shape[0] * self.num_n

    def expand(self) -> np.ndarray:
        """The whole list as an array (a new, writable one)."""
        base, num_n, stride = self.base, self.num_n, self.n_stride
        width = base.shape[1]
        out = np.empty((base.shape[0] // stride, num_n, stride, width), dtype=base.dtype)
        out[...] = base.reshape(-1, 1, stride, width)
        out[..., self.n_col] += np.arange(num_n, dtype=base.dtype)[None, :, None]
        return out.reshape(-1, width)


class _ArrayBackedList(Sequence):
    """A read-only list held as an int32 array; Python objects are made on demand.

    Expanded computations have millions of cindexes that nothing may ever
    look at (the executor does not); building the tuples only when somebody
    reads them keeps shortcut expansion fast.
    """

    __slots__ = ("_array", "_factory", "_len", "_items", "_tiling", "_table", "_number",
                 "_derived")

    def __init__(self, array: np.ndarray | None = None, *,
                 factory: Callable[[], np.ndarray] | None = None, length: int = -1,
                 tiling: NTiling | None = None) -> None:
        """Either ``array``, or ``factory`` (called once, on first use) and
        ``length``; ``tiling``, if known, describes the list's n structure
        (:meth:`from_tiling` makes a list that is built from it on first use)."""
        if (array is None) == (factory is None):
            raise ValueError("give either an array or a factory")
        self._array = array
        self._factory = factory
        self._len = int(array.shape[0]) if array is not None else length
        self._items: list | None = None
        self._tiling = tiling
        self._table: ListTable | None = None   # (lists of a ListTable: see ListTable.lists)
        self._number = -1
        self._derived: dict[str, Any] | None = None

    @classmethod
    def from_tiling(cls, tiling: NTiling) -> Any:
        """The list that ``tiling`` describes; its array is made on first use."""
        return cls(factory=tiling.expand, length=tiling.num_rows, tiling=tiling)

    @property
    def n_tiling(self) -> NTiling | None:
        """The list's :class:`NTiling` where it is known (else None; a list
        without one may still be regular in n)."""
        if self._tiling is None and self._table is not None:
            return self._table.tiling(self._number)
        return self._tiling

    def derived(self, name: str, compute: Callable[[Any], Any]) -> Any:
        """``compute(self)``, computed once per list and name (the list is
        read-only): index hooks keep what they work out from a list that
        many components see.  Keep the results read-only too."""
        if self._derived is None:
            self._derived = {}
        try:
            return self._derived[name]
        except KeyError:
            value = self._derived[name] = compute(self)
            return value

    @property
    def is_built(self) -> bool:
        """Whether the array exists yet (for tests of laziness)."""
        return self._array is not None

    @property
    def array(self) -> np.ndarray:
        if self._array is None:
            if self._table is not None:
                self._array = self._table.array(self._number)
            else:
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
    with gc_paused():
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
        with gc_paused():
            return list(zip(cols[0], _indexes_from_columns(*cols[1:])))


def slotted_maker(cls: type, names: Sequence[str]) -> Callable[..., list]:
    """A function ``make_all(column1, column2, ...)`` returning a list of
    ``cls`` instances, one per row of the columns (one iterable per name in
    ``names``; they are zipped, so all but one may be endless), with the
    slots ``names`` set to the row's values, without calling ``cls.__init__``.

    For loading tens of thousands of small records (a recurrent network's
    commands): the function is generated (as dataclasses generates
    ``__init__``), so each field is one specialised slot store in one loop.
    A class that forbids setting attributes (a frozen dataclass) is filled
    as a twin class of the same slot layout whose instance then becomes a
    ``cls`` (``__class__`` assignment, which Python allows between classes
    of identical layout); the result is an ordinary ``cls`` instance.
    Fields not named are left unset: name them all.
    """
    frozen = cls.__setattr__ is not object.__setattr__
    target = cls
    if frozen:
        slots = tuple(getattr(cls, "__slots__", ()))
        if cls.__bases__ != (object,) or tuple(names) != slots:
            raise TypeError(f"slotted_maker: {cls.__name__} is not a plain slotted class")
        target = type(f"_{cls.__name__}Twin", (), {"__slots__": slots})
    columns = ", ".join(f"c{i}" for i in range(len(names)))
    values = ", ".join(f"v{i}" for i in range(len(names)))
    lines = [f"def make_all({columns}, *, _new=_new, _target=_target, _cls=_cls):",
             "    out = []",
             "    append = out.append",
             f"    for {values}{',' if len(names) == 1 else ''} in zip({columns}):",
             "        o = _new(_target)"]
    lines += [f"        o.{name} = v{i}" for i, name in enumerate(names)]
    if frozen:
        lines.append("        o.__class__ = _cls")
    lines += ["        append(o)", "    return out"]
    namespace: dict[str, Any] = {}
    exec("\n".join(lines), {"_new": object.__new__, "_target": target, "_cls": cls}, namespace)
    return namespace["make_all"]


_LIST_SLOTS = ("_array", "_factory", "_len", "_items", "_tiling", "_table", "_number",
               "_derived")
_MAKE_LIST = {cls: slotted_maker(cls, _LIST_SLOTS) for cls in (IndexList, CindexList)}


class ListTable:
    """Many Index lists (width 3, n column 0) or Cindex lists (width 4, n
    column 1) in one int32 array, as the computation cache stores them.

    List ``i`` is ``rows[first:first + stored]`` where ``meta[i]`` is (first,
    stored, num_n, n_stride): the list itself when num_n is 1, else the base
    of its :class:`NTiling`.  :meth:`lists` makes the list objects, which
    find their rows here on first use: a recurrent network's computation
    has thousands of lists, and slicing and tiling them all at load time
    would cost more than everything else a cache hit does.
    """

    __slots__ = ("rows", "meta", "n_col", "lengths")

    def __init__(self, rows: np.ndarray, meta: np.ndarray, n_col: int) -> None:
        meta = np.asarray(meta).reshape(-1, 4)
        first, stored, num_n, stride = (meta[:, k].astype(np.int64) for k in range(4))
        if meta.size and (np.any(first < 0) or np.any(stored <= 0) or np.any(num_n < 1)
                          or np.any(stride < 1) or np.any(first + stored > rows.shape[0])
                          or np.any(stored % stride != 0)):
            raise ValueError("bad entry in a table of index lists")
        self.rows, self.meta, self.n_col = rows, meta.tolist(), n_col
        self.lengths = (stored * num_n).tolist()

    def __len__(self) -> int:
        return len(self.meta)

    def tiling(self, i: int) -> NTiling | None:
        first, stored, num_n, stride = self.meta[i]
        if num_n == 1:
            return None
        return NTiling(self.rows[first:first + stored], num_n, stride, self.n_col)

    def array(self, i: int) -> np.ndarray:
        first, stored, num_n, stride = self.meta[i]
        if num_n == 1:
            return self.rows[first:first + stored]
        return NTiling(self.rows[first:first + stored], num_n, stride, self.n_col).expand()

    def lists(self, cls: type) -> list:
        """One ``cls`` (IndexList or CindexList) per list, not yet built
        (made without ``__init__``: see :func:`slotted_maker`)."""
        none = itertools.repeat(None)
        return _MAKE_LIST[cls](none, none, self.lengths, none, none, itertools.repeat(self),
                               range(len(self.meta)), none)
