"""Saving and loading NnetComputations: pynnet3's computation file (format
4), what ``nnet3-compile`` writes, ``nnet3-info`` reads and the computation
cache stores.  Safe (never pickle), checksummed by its users where they
need it (the cache), and made to load in a few milliseconds: everything,
commands and submatrices included, is an array (no per-command text to
parse), and the Index / Cindex lists of debug info and precomputed indexes
are stored once per distinct list and, where a list is regular in n (as
nearly all of a many-sequence computation's are, see
:class:`~pynnet3.nnet.index_lists.NTiling`), as the rows of its first n
value only.  On loading, those lists become array-backed lists that are
expanded only when somebody reads them (the executor never does), and
large arrays are read-only views of the data.  Precomputed-index objects
are not stored: callers recompute them from the stored input/output
indexes with the network's components.

Damaged data raises :class:`~pynnet3.errors.FormatError` naming the file.
Files of the older containers (format 2, an ``.npz``; format 3) are not
read: the error says so, and the computation has to be compiled again.

Layout: ``pynnet3-computation v4\\n``, the header's length (uint64), a JSON
header (padded to 8 bytes) naming each array's offset, type and shape, then
the arrays back to back (little-endian, each at an 8-byte boundary):

==============  ==========================================================
``mat``         int32 [matrices, 3]: rows, cols, stride type
``sub``         int32 [submatrices, 5]: matrix, row offset, rows, col offset, cols
``cmd``         int32 [commands, 8]: command type, arg1 .. arg7
``alpha``       float64 [commands]
``ix*``         index tables: ``ix_len`` / ``im_len`` / ``ir_len`` (rows of
                each) and ``ix`` / ``im`` / ``ir`` (int32, concatenated)
``dbg``         int32 [matrix debug infos, 2]: is_deriv, cindex list (-1: none)
``pre``         int32 [precomputed entries, 2]: input and output Index list (-1: none)
``c_meta``      int32 [cindex lists, 4]: first row in ``c_rows``, rows stored,
                num_n, n_stride (num_n = 1: stored as it is)
``c_rows``      int32 [rows, 4]: node, n, t, x
``i_meta``      the same for Index lists (``i_rows``: n, t, x)
==============  ==========================================================

A list with num_n > 1 is stored as the ``NTiling`` base of the list (the
rows of the first n value of each block); distinct lists are stored once,
and all references to one list load as one (read-only) list object.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import struct
from itertools import repeat
from typing import Any, Sequence

import numpy as np

from ..errors import FormatError
from ..nnet.index_lists import CindexList, IndexList, ListTable, NTiling, slotted_maker
from .computation import (Command, CommandType, MatrixDebugInfo, MatrixInfo, NnetComputation,
                          PrecomputedIndexesInfo, StrideType, SubMatrixInfo, command_table,
                          remember_tables, submatrix_table)
from .n_stride import (CINDEX_N_COL, INDEX_N_COL, cindex_array, expand_rows_by_n, find_n_stride,
                       index_array)

__all__ = ["computation_to_bytes", "computation_from_bytes", "load_computation",
           "is_computation_file",
           "find_n_tiling", "FORMAT_VERSION"]

FORMAT_VERSION = 4
_NPZ_MAGIC = b"PK\x03\x04"
_MAGIC = b"pynnet3-computation v4\n"
_PREFIX = b"pynnet3-computation v"
_INT32 = np.dtype("<i4")
_FLOAT64 = np.dtype("<f8")
_DTYPES = {"i4": _INT32, "f8": _FLOAT64}


# ---------------------------------------------------------------------------
# n tilings


def find_n_tiling(array: np.ndarray, n_col: int) -> NTiling | None:
    """The :class:`NTiling` of an index (n_col 0) or cindex (n_col 1) array,
    or None when the rows are not regular in n (or have a single n value).

    The stride comes from Kaldi's FindNStride; the tiling is then confirmed
    by expanding it and comparing with ``array``, so a list is only ever
    stored compactly when it comes back exactly.
    """
    rows = array.shape[0]
    if rows < 2:
        return None
    stride = find_n_stride(array, n_col)
    if stride <= 0:
        return None
    num_n = int(array[-1, n_col]) + 1
    if num_n < 2 or rows % (stride * num_n) != 0:
        return None
    width = array.shape[1]
    base = np.ascontiguousarray(
        array.reshape(-1, num_n, stride, width)[:, 0].reshape(-1, width), dtype=np.int32)
    tiling = NTiling(base, num_n, stride, n_col)
    return tiling if np.array_equal(tiling.expand(), array) else None


def _expander_args(lst: Any, n_col: int) -> tuple | None:
    """The arguments (arr, stride, new_row_of_n0, num_n, num_rows) of the
    factory of a list that the shortcut expander left unbuilt, if it is
    ``expand_rows_by_n`` making this list; else None."""
    factory = getattr(lst, "_factory", None)
    if not (isinstance(factory, functools.partial) and factory.func is expand_rows_by_n
            and not factory.keywords and len(factory.args) == 6):
        return None
    arr, col, stride, new_row_of_n0, num_n, num_rows = factory.args
    if col != n_col or num_n < 2 or stride < 1 or num_rows != len(lst):
        return None
    return np.asarray(arr), int(stride), np.asarray(new_row_of_n0), int(num_n), int(num_rows)


def _factory_tilings(args: list[tuple], n_col: int) -> list[NTiling | None]:
    """The tilings of unbuilt expander lists (:func:`_expander_args`), worked
    out from the factories' arguments for all of them at once, without
    building the lists.

    expand_rows_by_n(arr, n_col, s, new_row_of_n0, N, rows) puts each row
    r of ``arr`` with n = 0 at rows new_row_of_n0[r] + k * s (n = k); when
    those start rows are exactly the first s rows of each block of N * s
    rows, the list is the tiling whose base is those rows in order of start.
    """
    out: list[NTiling | None] = [None] * len(args)
    if not args:
        return out
    rows = np.concatenate([a[0] for a in args])
    starts_all = np.concatenate([a[2] for a in args]).astype(np.int64)
    sizes = np.array([len(a[0]) for a in args], dtype=np.int64)
    stride = np.array([a[1] for a in args], dtype=np.int64)
    num_n = np.array([a[3] for a in args], dtype=np.int64)
    owner = np.repeat(np.arange(len(args)), sizes)
    zero = rows[:, n_col] == 0
    rows, start, owner = rows[zero], starts_all[zero], owner[zero]
    order = np.lexsort((start, owner))
    rows, start, owner = rows[order], start[order], owner[order]
    counts = np.bincount(owner, minlength=len(args))
    first = np.zeros(len(args), dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    pos = np.arange(len(owner), dtype=np.int64) - first[owner]
    s, nn = stride[owner], num_n[owner]
    wrong = np.bincount(owner[start != (pos // s) * (nn * s) + pos % s], minlength=len(args))
    bases = np.split(rows, first[1:])
    for i, ((_, stride_i, _, num_n_i, num_rows_i), base) in enumerate(zip(args, bases)):
        if wrong[i] == 0 and len(base) % stride_i == 0 and len(base) * num_n_i == num_rows_i:
            out[i] = NTiling(np.ascontiguousarray(base, dtype=np.int32), num_n_i, stride_i,
                             n_col)
    return out


def _find_tilings(arrays: list[np.ndarray], n_col: int) -> list[NTiling | None]:
    """find_n_tiling for many arrays at once (array operations over all rows
    of all of them; a computation has thousands of small lists).

    Each array's candidate is num_n = last n + 1 and stride 1 (n varies
    fastest) or size / num_n (n varies slowest), Kaldi's first two guesses;
    it is kept where every row is its block's first copy plus k in n.  Arrays
    with several n values that fail are given to find_n_tiling (other strides).
    """
    out: list[NTiling | None] = [None] * len(arrays)
    if not arrays:
        return out
    sizes = np.array([a.shape[0] for a in arrays], dtype=np.int64)
    starts = np.zeros(len(arrays), dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    rows = np.concatenate(arrays)
    n = rows[:, n_col].astype(np.int64)
    ok = sizes >= 2
    safe_last, safe_second = starts + np.maximum(sizes, 2) - 1, starts + np.minimum(sizes - 1, 1)
    num_n = np.where(ok, n[np.minimum(safe_last, len(n) - 1)] + 1, 0)
    several_n = num_n >= 2
    ok &= several_n & (n[np.minimum(starts, len(n) - 1)] == 0)
    num_n = np.maximum(num_n, 1)
    ok &= sizes % num_n == 0
    stride = np.where(n[np.minimum(safe_second, len(n) - 1)] == 1, 1, sizes // num_n)
    stride = np.maximum(stride, 1)
    # Rows of the candidates, each against the first copy of its block.
    owner = np.repeat(np.arange(len(arrays)), sizes)
    row_ok = ok[owner]
    pos = np.arange(len(rows), dtype=np.int64) - starts[owner]
    s, nn = stride[owner], num_n[owner]
    block_rows = s * nn
    k = (pos % block_rows) // s
    first = starts[owner] + (pos // block_rows) * block_rows + pos % s
    same = np.ones(len(rows), dtype=bool)
    for col in range(rows.shape[1]):
        if col != n_col:
            same &= rows[:, col] == rows[first, col]
    same &= n == n[first] + k
    bad = np.bincount(owner[row_ok & ~same], minlength=len(arrays))
    ok &= bad == 0
    is_base = ok[owner] & (k == 0)
    bases = np.split(rows[is_base], np.cumsum(np.bincount(owner[is_base],
                                                          minlength=len(arrays)))[:-1])
    for i in np.flatnonzero(ok).tolist():
        out[i] = NTiling(bases[i], int(num_n[i]), int(stride[i]), n_col)
    for i in np.flatnonzero(~ok & several_n).tolist():
        out[i] = find_n_tiling(arrays[i], n_col)
    return out


class _ListTable:
    """Distinct Index or Cindex lists, each stored plain or as its n tiling.

    :meth:`add` registers a list and gives a provisional number;
    :meth:`finish` works out the tilings (all lists at once), stores each
    distinct list once and maps provisional numbers to stored ones.
    """

    def __init__(self, width: int, n_col: int) -> None:
        self.width, self.n_col = width, n_col
        self._by_object: dict[int, int] = {}
        self._lists: list[Any] = []

    def add(self, lst: Sequence) -> int:
        """A provisional number of the list (-1 for an empty list)."""
        if len(lst) == 0:
            return -1
        number = self._by_object.get(id(lst))
        if number is None:
            number = self._by_object[id(lst)] = len(self._lists)
            self._lists.append(lst)
        return number

    def finish(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(meta, rows, stored number of each provisional number)."""
        to_array = cindex_array if self.width == 4 else index_array
        tilings: list[NTiling | None] = []
        plain: list[int] = []
        arrays: list[np.ndarray] = []
        lazy: list[int] = []
        lazy_args: list[tuple] = []
        for i, lst in enumerate(self._lists):
            tiling = getattr(lst, "n_tiling", None)
            tilings.append(tiling)
            if tiling is None:
                args = _expander_args(lst, self.n_col)
                if args is not None:
                    lazy.append(i)
                    lazy_args.append(args)
        for i, tiling in zip(lazy, _factory_tilings(lazy_args, self.n_col)):
            tilings[i] = tiling
        for i, lst in enumerate(self._lists):
            if tilings[i] is None:
                plain.append(i)
                arrays.append(np.ascontiguousarray(to_array(lst), dtype=np.int32))
        for i, array, tiling in zip(plain, arrays, _find_tilings(arrays, self.n_col)):
            tilings[i] = tiling if tiling is not None else NTiling(array, 1, 1, self.n_col)
        by_content: dict[tuple[int, int, bytes], int] = {}
        meta: list[tuple[int, int, int, int]] = []
        blocks: list[np.ndarray] = []
        stored_as = np.zeros(len(self._lists), dtype=np.int64)
        num_rows = 0
        for i, tiling in enumerate(tilings):
            assert tiling is not None
            base = np.ascontiguousarray(tiling.base, dtype=np.int32)
            key = (tiling.num_n, tiling.n_stride, base.tobytes())
            number = by_content.get(key)
            if number is None:
                number = by_content[key] = len(meta)
                meta.append((num_rows, base.shape[0], tiling.num_n, tiling.n_stride))
                blocks.append(base)
                num_rows += base.shape[0]
            stored_as[i] = number
        rows = np.concatenate(blocks) if blocks else np.zeros((0, self.width), dtype=np.int32)
        return np.array(meta, dtype=np.int64).reshape(-1, 4), rows, stored_as


# ---------------------------------------------------------------------------
# Writing


def _int32(array: Any, what: str) -> np.ndarray:
    a = np.asarray(array)
    if a.size and (int(a.min()) < -2 ** 31 or int(a.max()) >= 2 ** 31):
        raise ValueError(f"computation has {what} values that do not fit in int32")
    return a.astype(_INT32, copy=False)


def computation_to_bytes(comp: NnetComputation) -> bytes:
    """The computation file's bytes (format 4)."""
    arrays: dict[str, np.ndarray] = {}
    arrays["mat"] = _int32(np.array([(m.num_rows, m.num_cols, int(m.stride_type))
                                     for m in comp.matrices], dtype=np.int64).reshape(-1, 3),
                           "matrix")
    arrays["sub"] = _int32(submatrix_table(comp.submatrices), "submatrix")
    arrays["cmd"] = _int32(command_table(comp.commands), "command argument")
    arrays["alpha"] = np.fromiter((c.alpha for c in comp.commands), dtype=np.float64,
                                  count=len(comp.commands)).astype(_FLOAT64, copy=False)
    for name, tables, width in (("ix", comp.indexes, 1), ("im", comp.indexes_multi, 2),
                                ("ir", comp.indexes_ranges, 2)):
        parts = [np.asarray(a).reshape((-1,) if width == 1 else (-1, width)) for a in tables]
        arrays[name + "_len"] = _int32(np.array([p.shape[0] for p in parts], dtype=np.int64),
                                       "index-table length")
        arrays[name] = _int32(np.concatenate(parts) if parts else
                              np.zeros((0,) if width == 1 else (0, width), dtype=np.int64),
                              "index-table")
    cindexes, indexes = _ListTable(4, CINDEX_N_COL), _ListTable(3, INDEX_N_COL)
    dbg = np.array([(int(bool(d.is_deriv)), cindexes.add(d.cindexes))
                    for d in comp.matrix_debug_info], dtype=np.int64).reshape(-1, 2)
    pre = np.array([(indexes.add(p.input_indexes), indexes.add(p.output_indexes))
                    for p in comp.component_precomputed_indexes], dtype=np.int64).reshape(-1, 2)
    for prefix, table, refs in (("c", cindexes, dbg[:, 1:]), ("i", indexes, pre)):
        meta, rows, stored_as = table.finish()
        refs[...] = np.where(refs >= 0, stored_as[np.maximum(refs, 0)] if len(stored_as)
                             else -1, -1)
        arrays[prefix + "_meta"] = _int32(meta, "list-table")
        arrays[prefix + "_rows"] = _int32(rows, "index")
    arrays["dbg"] = _int32(dbg, "debug-info")
    arrays["pre"] = _int32(pre, "precomputed-index")
    layout = {}
    blobs = []
    offset = 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        layout[name] = [offset, a.dtype.str[1:], list(a.shape)]
        blob = a.tobytes()
        blob += b"\0" * (-len(blob) % 8)
        blobs.append(blob)
        offset += len(blob)
    header = {"format": "pynnet3-computation", "version": FORMAT_VERSION,
              "need_model_derivative": bool(comp.need_model_derivative), "arrays": layout}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(len(_MAGIC) + 8 + len(text)) % 8)
    return b"".join([_MAGIC, struct.pack("<Q", len(text)), text] + blobs)


# ---------------------------------------------------------------------------
# Reading

_MAKERS: dict[type, Any] = {}


def _make_objects(cls: type, columns: Sequence[Any]) -> list:
    """Instances of the slotted dataclass ``cls``, one per row of the field
    columns (in field order), made by :func:`slotted_maker`: a frozen
    dataclass's ``__init__`` goes through ``object.__setattr__`` per field,
    which made building the 20k commands of a recurrent network's
    computation most of the time of a cache hit."""
    make = _MAKERS.get(cls)
    if make is None:
        names = tuple(f.name for f in dataclasses.fields(cls))
        if (tuple(getattr(cls, "__slots__", ())) != names or hasattr(cls, "__post_init__")
                or any(isinstance(getattr(cls, n, None), property) for n in names)):
            raise TypeError(f"computation_io: {cls.__name__} is no longer a plain slotted "
                            "dataclass; update _make_objects")
        make = _MAKERS[cls] = slotted_maker(cls, names)
    return make(*columns)


def _arrays(view: memoryview, base: int, layout: dict[str, Any],
            where: str) -> dict[str, np.ndarray]:
    out = {}
    for name, (offset, dtype, shape) in layout.items():
        dt = _DTYPES[dtype]
        count = int(np.prod(shape, dtype=np.int64))
        if offset < 0 or count < 0 or base + offset + dt.itemsize * count > len(view):
            raise FormatError(f"array {name} lies outside the data", where)
        a = np.frombuffer(view, dtype=dt, count=count, offset=base + offset)
        out[name] = a.astype(dt.newbyteorder("="), copy=False).reshape(shape)
    return out


def is_computation_file(data: bytes | memoryview) -> bool:
    """Whether ``data`` claims to be a pynnet3 computation file (of this
    format or of an older one, which :func:`computation_from_bytes` refuses
    with a clear error)."""
    head = bytes(memoryview(data)[:len(_PREFIX)])
    return head == _PREFIX or head.startswith(_NPZ_MAGIC)


def computation_from_bytes(data: bytes | memoryview,
                           where: str = "<computation>") -> NnetComputation:
    """Inverse of :func:`computation_to_bytes`; large arrays stay views of
    ``data``.  ``where`` (the file name) is named in errors."""
    return load_computation(data, where)[0]


def load_computation(data: bytes | memoryview, where: str = "<computation>"
                     ) -> tuple[NnetComputation, np.ndarray]:
    """:func:`computation_from_bytes`, and the commands as an int32 array
    [commands, 8] (type, arg1 .. arg7), which callers may use instead of
    command_table()."""
    view = memoryview(data)
    if bytes(view[:len(_MAGIC)]) != _MAGIC:
        if bytes(view[:len(_NPZ_MAGIC)]) == _NPZ_MAGIC:
            raise FormatError("an .npz computation (format 2, written by an older pynnet3); "
                              f"this version reads format {FORMAT_VERSION} only: compile it "
                              "again", where)
        raise FormatError("not a pynnet3 computation of this format version (format 4; "
                          "the older formats 2 and 3 are no longer read)", where)
    try:
        (size,) = struct.unpack_from("<Q", view, len(_MAGIC))
        start = len(_MAGIC) + 8
        if start + size > len(view):
            raise FormatError("truncated computation header", where)
        header = json.loads(bytes(view[start:start + size]).decode())
        if header.get("format") != "pynnet3-computation" or header.get("version") != FORMAT_VERSION:
            raise FormatError("not a pynnet3 computation of this format version", where)
        a = _arrays(view, start + size, header["arrays"], where)
        return _build(bool(header["need_model_derivative"]), a), a["cmd"].reshape(-1, 8)
    except FormatError:
        raise
    except Exception as e:  # any damage in the header or the arrays
        raise FormatError(f"corrupt computation file ({type(e).__name__}: {e})", where) from None


def _split(array: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Copies of consecutive pieces of ``array`` (index tables are small and
    each gets its own writable memory, as the executor may expect)."""
    if lengths.size and int(lengths.min()) < 0:
        raise ValueError("negative index-table length")
    ends = np.cumsum(lengths, dtype=np.int64)
    if (int(ends[-1]) if ends.size else 0) != array.shape[0]:
        raise ValueError("index-table lengths do not match the data")
    return [p.copy() for p in np.split(array, ends[:-1])] if lengths.size else []


def _build(need_model_derivative: bool, a: dict[str, np.ndarray]) -> NnetComputation:
    comp = NnetComputation()
    comp.need_model_derivative = need_model_derivative
    mat = a["mat"].reshape(-1, 3)
    stride_types = list(StrideType)
    if mat.size and (int(mat[:, 2].min()) < 0 or int(mat[:, 2].max()) >= len(stride_types)):
        raise ValueError("bad matrix stride type")
    rows, cols, strides = mat.T.tolist()
    comp.matrices = _make_objects(MatrixInfo, (rows, cols, map(stride_types.__getitem__,
                                                                strides)))
    sub = a["sub"].reshape(-1, 5)
    comp.submatrices = _make_objects(SubMatrixInfo, sub.T.tolist())
    cmd = a["cmd"].reshape(-1, 8)
    alpha = a["alpha"].reshape(-1)
    if alpha.shape[0] != cmd.shape[0]:
        raise ValueError("commands and alphas differ in number")
    command_types = list(CommandType)
    if cmd.size and (int(cmd[:, 0].min()) < 0 or int(cmd[:, 0].max()) >= len(command_types)):
        raise ValueError("bad command type")
    columns = cmd.T.tolist()
    comp.commands = _make_objects(
        Command, [map(command_types.__getitem__, columns[0]), alpha.tolist(), *columns[1:]])
    remember_tables(comp, cmd, sub)
    comp.indexes = _split(a["ix"].reshape(-1), a["ix_len"].reshape(-1))
    comp.indexes_multi = _split(a["im"].reshape(-1, 2), a["im_len"].reshape(-1))
    comp.indexes_ranges = _split(a["ir"].reshape(-1, 2), a["ir_len"].reshape(-1))
    cindex_lists = ListTable(a["c_rows"].reshape(-1, 4), a["c_meta"], CINDEX_N_COL
                             ).lists(CindexList)
    index_lists = ListTable(a["i_rows"].reshape(-1, 3), a["i_meta"], INDEX_N_COL
                            ).lists(IndexList)
    dbg = a["dbg"].reshape(-1, 2)
    deriv, refs = dbg.T.tolist()
    comp.matrix_debug_info = _make_objects(
        MatrixDebugInfo, (map(bool, deriv), [cindex_lists[r] if r >= 0 else [] for r in refs]))
    pre = a["pre"].reshape(-1, 2)
    ins, outs = pre.T.tolist()
    comp.component_precomputed_indexes = _make_objects(
        PrecomputedIndexesInfo, (repeat(None, len(ins)),
                                 [index_lists[r] if r >= 0 else [] for r in ins],
                                 [index_lists[r] if r >= 0 else [] for r in outs]))
    if max(refs, default=-1) >= len(cindex_lists) or min(refs, default=0) < -1 \
            or max(ins + outs, default=-1) >= len(index_lists) or min(ins + outs, default=0) < -1:
        raise ValueError("list reference out of range")
    return comp
