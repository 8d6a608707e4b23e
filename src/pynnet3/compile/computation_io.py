"""Saving and loading NnetComputations (``NnetComputation.to_bytes`` /
``from_bytes``): safe formats, never pickle.

Two containers:

* ``npz`` (format 2, what ``to_bytes`` writes and ``nnet3-compile`` saves):
  a NumPy ``.npz`` (zip) with a JSON header (sizes, matrices, submatrices,
  commands ...) and six int32 arrays (index tables, debug cindexes,
  precomputed-index Indexes) as members;
* ``raw`` (format 4, what the computation cache writes): a magic line, the
  header's length, a small JSON header (the layout), then little-endian
  arrays back to back.  It is made for loading fast: everything, commands
  and submatrices included, is an array (no per-command JSON to parse), and
  the Index / Cindex lists of debug info and precomputed indexes are stored
  once per distinct list and, where a list is regular in n (as nearly all
  of a many-sequence computation's are, see :class:`~pynnet3.nnet.index_lists.NTiling`),
  as the rows of its first n value only: a 64-sequence training computation
  that holds 40 MB of cindexes stores well under 1 MB of them.  On loading,
  those lists become array-backed lists that are expanded only when somebody
  reads them (the executor never does).  Format 3 (the previous raw
  container, which stored every list in full) is no longer read: the cache
  recompiles such entries.

:func:`computation_from_bytes` reads both.
"""
from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import FormatError

if TYPE_CHECKING:
    from .computation import NnetComputation

__all__ = ["computation_to_bytes", "computation_from_bytes"]

_ARRAYS = (("ix", 1), ("im", 2), ("ir", 2), ("dbg", 4), ("pin", 3), ("pout", 3))
_NPZ_MAGIC = b"PK\x03\x04"
_RAW_PREFIX = b"pynnet3-computation v"


def _header(comp: "NnetComputation", version: int) -> dict[str, Any]:
    return {
        "format": "pynnet3-computation", "version": version,
        "need_model_derivative": comp.need_model_derivative,
        "matrices": [[m.num_rows, m.num_cols, int(m.stride_type)] for m in comp.matrices],
        "submatrices": [[s.matrix_index, s.row_offset, s.num_rows, s.col_offset, s.num_cols]
                        for s in comp.submatrices],
        "commands": [[int(c.command_type), c.alpha, *c.args] for c in comp.commands],
        "debug": [[d.is_deriv, len(d.cindexes)] for d in comp.matrix_debug_info],
        "precomputed": [[len(p.input_indexes), len(p.output_indexes)]
                        for p in comp.component_precomputed_indexes],
        "index_lengths": [[len(a) for a in lst] for lst in
                          (comp.indexes, comp.indexes_multi, comp.indexes_ranges)],
    }


def _arrays(comp: "NnetComputation") -> dict[str, np.ndarray]:
    # Array-backed lists (IndexList / CindexList) are saved without building
    # millions of Python tuples.
    from .n_stride import cindex_array, index_array

    return {
        "ix": _concat([np.asarray(a, np.int32).reshape(-1) for a in comp.indexes], (0,)),
        "im": _concat([np.asarray(a, np.int32).reshape(-1, 2) for a in comp.indexes_multi],
                      (0, 2)),
        "ir": _concat([np.asarray(a, np.int32).reshape(-1, 2) for a in comp.indexes_ranges],
                      (0, 2)),
        "dbg": _concat([cindex_array(d.cindexes) for d in comp.matrix_debug_info
                        if d.cindexes], (0, 4)),
        "pin": _concat([index_array(p.input_indexes) for p in comp.component_precomputed_indexes
                        if p.input_indexes], (0, 3)),
        "pout": _concat([index_array(p.output_indexes)
                         for p in comp.component_precomputed_indexes if p.output_indexes],
                        (0, 3)),
    }


def computation_to_bytes(comp: "NnetComputation", container: str = "npz") -> bytes:
    """The computation in the ``npz`` or ``raw`` container (module docstring)."""
    if container == "raw":
        from .computation_raw import raw_bytes

        return raw_bytes(comp)
    if container != "npz":
        raise ValueError(f"unknown container {container!r}")
    header = _header(comp, 2)
    buf = io.BytesIO()
    np.savez(buf, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
             **_arrays(comp))
    return buf.getvalue()


def computation_from_bytes(cls: type, data: bytes | memoryview,
                           where: str = "<computation>") -> "NnetComputation":
    """Inverse of :func:`computation_to_bytes` (format 4 or format 2).
    Precomputed-index objects are not restored (``data`` stays None)."""
    view = memoryview(data)
    if bytes(view[:len(_NPZ_MAGIC)]) == _NPZ_MAGIC:
        return _from_npz(cls, bytes(view), where)
    if bytes(view[:len(_RAW_PREFIX)]) == _RAW_PREFIX:
        from .computation_raw import from_raw

        return from_raw(cls, view, where)
    raise FormatError("not a pynnet3 computation", where)


def _from_npz(cls: type, data: bytes, where: str) -> "NnetComputation":
    """Format 2: an .npz of the JSON header and the concatenated arrays."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode())
            if header.get("format") != "pynnet3-computation" or header.get("version") != 2:
                raise FormatError("not a pynnet3 computation of this format version", where)
            return _build(cls, header, {name: z[name] for name, _ in _ARRAYS}, where)
    except FormatError:
        raise
    except Exception as e:  # any damage in the container or header
        raise FormatError(f"corrupt computation file ({type(e).__name__}: {e})", where) from None


def _build(cls: type, header: dict[str, Any], arrays: dict[str, np.ndarray],
           where: str) -> "NnetComputation":
    # Cindexes and Indexes come back as array-backed lists: their Python
    # tuples are only built if somebody reads them.
    from .computation import (Command, CommandType, MatrixDebugInfo, MatrixInfo,
                              PrecomputedIndexesInfo, StrideType, SubMatrixInfo)
    from .n_stride import CindexList, IndexList

    try:
        comp = cls(matrices=[MatrixInfo(r, c, StrideType(s)) for r, c, s in header["matrices"]],
                   submatrices=[SubMatrixInfo(*s) for s in header["submatrices"]],
                   commands=[Command(CommandType(c[0]), float(c[1]), *c[2:])
                             for c in header["commands"]],
                   need_model_derivative=bool(header["need_model_derivative"]))
        n_ix, n_im, n_ir = header["index_lengths"]
        # Index tables are small: give each its own (writable) memory.
        comp.indexes = [a.copy() for a in _split(arrays["ix"], n_ix, 1)]
        comp.indexes_multi = [a.copy() for a in _split(arrays["im"], n_im, 2)]
        comp.indexes_ranges = [a.copy() for a in _split(arrays["ir"], n_ir, 2)]
        debug = header["debug"]
        parts = iter(_split(arrays["dbg"], [n for _, n in debug if n], 4))
        comp.matrix_debug_info = [
            MatrixDebugInfo(bool(is_deriv), CindexList(next(parts)) if n else [])
            for is_deriv, n in debug]
        pre = header["precomputed"]
        pins = iter(_split(arrays["pin"], [a for a, _ in pre if a], 3))
        pouts = iter(_split(arrays["pout"], [b for _, b in pre if b], 3))
        comp.component_precomputed_indexes = [
            PrecomputedIndexesInfo(None, IndexList(next(pins)) if a else [],
                                   IndexList(next(pouts)) if b else [])
            for a, b in pre]
        return comp
    except FormatError:
        raise
    except Exception as e:  # inconsistent header
        raise FormatError(f"corrupt computation file ({type(e).__name__}: {e})", where) from None


def _concat(arrays: list[np.ndarray], empty_shape: tuple[int, ...]) -> np.ndarray:
    if not arrays:
        return np.zeros(empty_shape, dtype=np.int32)
    return np.concatenate(arrays).astype(np.int32, copy=False)


def _split(array: np.ndarray, lengths: list[int], width: int) -> list[np.ndarray]:
    """``array`` (int32) cut into consecutive pieces of ``lengths`` rows."""
    array = np.asarray(array, dtype=np.int32)
    array = array.reshape(-1) if width == 1 else array.reshape(-1, width)
    if sum(lengths) != array.shape[0]:
        raise ValueError(f"lengths add up to {sum(lengths)}, array has {array.shape[0]} rows")
    return np.split(array, np.cumsum(lengths)[:-1]) if lengths else []
