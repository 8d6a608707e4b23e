"""The regular index structure of TdnnComponent (Kaldi's
ConvolutionComputationIo and the time-grid helpers of nnet-tdnn-component.cc):
which (n, x) images and which grid of t values a step's indexes cover, and
the step's indexes laid out on that grid (t-major, blanks where an index is
missing).

Everything works on int64 index columns (n, t, x), so a step of 100k rows
costs a few array operations; the functions accept lists of Indexes or
array-backed lists alike (:func:`~pynnet3.nnet.index.index_columns`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...arraytools import sorted_unique
from ..index import K_NO_TIME, Index, index_columns, indexes_from_columns

@dataclass
class ComputationIo:
    """Kaldi's ConvolutionComputationIo: the regular grid covering the indexes."""

    num_images: int = 0
    start_t_in: int = 0
    t_step_in: int = 0
    num_t_in: int = 0
    start_t_out: int = 0
    t_step_out: int = 0
    num_t_out: int = 0
    reorder_t_in: int = 1


# The helpers below work on int64 index columns (n, t, x), so that a step of
# 100k rows costs a few array operations; they accept lists of Indexes or
# array-backed lists alike (:func:`index_columns`).

_NX_SHIFT = 1 << 32
_NX_BIAS = 1 << 31


def _nx_keys(columns: np.ndarray) -> np.ndarray:
    """One int64 per (n, x) whose numeric order is the (n, x) tuple order."""
    return columns[:, 0] * _NX_SHIFT + (columns[:, 2] + _NX_BIAS)


def _nx_from_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n = keys // _NX_SHIFT
    return n, keys - n * _NX_SHIFT - _NX_BIAS


def get_nx_list(indexes: list) -> list[tuple[int, int]]:
    """Sorted distinct (n, x) pairs (blank indexes included, as in Kaldi)."""
    n, x = _nx_from_keys(sorted_unique(_nx_keys(index_columns(indexes))))
    return list(zip(n.tolist(), x.tolist()))


def _t_values(columns: np.ndarray) -> np.ndarray:
    t = columns[:, 1]
    return sorted_unique(t[t != K_NO_TIME])


def get_t_list(indexes: list) -> list[int]:
    """Sorted distinct t values, ignoring kNoTime."""
    return _t_values(index_columns(indexes)).tolist()


def regularize_t_list(t_values: Any) -> tuple[int, int, int]:
    """(start, step, count): the smallest arithmetic grid containing t_values
    (sorted and distinct)."""
    t = np.asarray(t_values, dtype=np.int64)
    if t.size == 0:
        raise ValueError("no t values (all indexes blank?)")
    start = int(t[0])
    step = int(np.gcd.reduce(np.diff(t))) if t.size > 1 else 0
    if step == 0:
        return start, 0, 1
    return start, step, 1 + (int(t[-1]) - start) // step


def _regular_t(cols: np.ndarray) -> tuple[int, int, int] | None:
    """(start, step, count) of the t column when it runs strictly upwards by
    one step (so no blanks, no repeats), else None."""
    num = len(cols)
    t = cols[:, 1]
    start = int(t[0])
    if num == 1:
        return (start, 0, 1) if start != K_NO_TIME else None
    step = int(t[1]) - start
    if step <= 0 or int(t[-1]) != start + step * (num - 1):
        return None
    if num > 2 and not (t[1:] - t[:-1] == step).all():
        return None
    return start, step, num


def reorder_single_image(in_cols: np.ndarray, out_cols: np.ndarray
                         ) -> tuple[np.ndarray, np.ndarray] | None:
    """TdnnComponent's reordered (input, output) columns (int32) when input
    and output are one (n, x) image whose t values each run upwards by a
    constant step (the usual layout of a one-sequence request), else None.

    Then the regular grid is the input itself (with one image, the blocks of
    reorder_t_in consecutive t values interleave nothing) followed by the
    blank rows that round its length up to a multiple of reorder_t_in, and
    the output grid is the output itself: the general path's answer, from a
    few comparisons instead of its dozens of small array operations.
    """
    if not len(in_cols) or not len(out_cols):
        return None
    n, x = int(in_cols[0, 0]), int(in_cols[0, 2])
    if int(out_cols[0, 0]) != n or int(out_cols[0, 2]) != x:
        return None
    t_in, t_out = _regular_t(in_cols), _regular_t(out_cols)
    if t_in is None or t_out is None:
        return None
    if not ((in_cols[:, 0] == n).all() and (in_cols[:, 2] == x).all()
            and (out_cols[:, 0] == n).all() and (out_cols[:, 2] == x).all()):
        return None
    io = ComputationIo(num_images=1)
    io.start_t_in, io.t_step_in, io.num_t_in = t_in
    io.start_t_out, io.t_step_out, io.num_t_out = t_out
    _modify_computation_io(io)
    num_in = len(in_cols)
    new_in = np.empty((io.num_t_in, 3), dtype=np.int32)
    new_in[:num_in] = in_cols
    new_in[num_in:] = (n, K_NO_TIME, x)
    return new_in, out_cols.astype(np.int32)


def _computation_io(in_cols: np.ndarray, out_cols: np.ndarray,
                    in_keys: np.ndarray | None = None) -> tuple[ComputationIo, np.ndarray]:
    """The ComputationIo and the sorted distinct (n, x) keys of the input
    (``in_keys``: the input's (n, x) keys, if already made)."""
    nx = sorted_unique(_nx_keys(in_cols) if in_keys is None else in_keys)
    if nx.size == 0:
        raise ValueError("empty input indexes")
    io = ComputationIo(num_images=int(nx.size))
    io.start_t_in, io.t_step_in, io.num_t_in = regularize_t_list(_t_values(in_cols))
    io.start_t_out, io.t_step_out, io.num_t_out = regularize_t_list(_t_values(out_cols))
    io.reorder_t_in = 1
    return io, nx


def _single_image_grid(cols: np.ndarray) -> tuple[int, int, int, int, int] | None:
    """(n, x, start, step, count) when ``cols`` are one (n, x) image whose t
    values run upwards by one step, then maybe blank rows (what
    reorder_indexes makes of a one-sequence step), else None."""
    if not len(cols):
        return None
    t = cols[:, 1]
    num = len(cols)
    if int(t[-1]) == K_NO_TIME:
        num = int(np.argmax(t == K_NO_TIME))
        if num == 0 or not (t[num:] == K_NO_TIME).all():
            return None
    grid = _regular_t(cols[:num])
    if grid is None:
        return None
    n, x = int(cols[0, 0]), int(cols[0, 2])
    if not ((cols[:, 0] == n).all() and (cols[:, 2] == x).all()):
        return None
    return (n, x) + grid


def get_computation_io(input_indexes: list, output_indexes: list) -> ComputationIo:
    if getattr(input_indexes, "n_tiling", None) is None:
        # (One image on a regular grid, the usual one-sequence step: read
        # the grid off the columns instead of sorting distinct values.)
        fast_in = _single_image_grid(index_columns(input_indexes))
        fast_out = (_single_image_grid(index_columns(output_indexes))
                    if fast_in is not None and getattr(output_indexes, "n_tiling", None) is None
                    else None)
        if fast_out is not None:
            io = ComputationIo(num_images=1)
            io.start_t_in, io.t_step_in, io.num_t_in = fast_in[2:]
            io.start_t_out, io.t_step_out, io.num_t_out = fast_out[2:]
            io.reorder_t_in = 1
            return io
    nx, t_in = distinct_nx_and_t(input_indexes)
    if nx.size == 0:
        raise ValueError("empty input indexes")
    io = ComputationIo(num_images=int(nx.size))
    io.start_t_in, io.t_step_in, io.num_t_in = regularize_t_list(t_in)
    io.start_t_out, io.t_step_out, io.num_t_out = regularize_t_list(
        distinct_nx_and_t(output_indexes)[1])
    io.reorder_t_in = 1
    return io


def distinct_nx_and_t(indexes: list) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct (n, x) keys, sorted distinct t values but kNoTime),
    as read-only arrays.

    A list that knows its n tiling (:class:`~pynnet3.nnet.index_lists.NTiling`,
    as the lists of a computation loaded from the cache do) is looked at
    through its base: the whole list has the base's t values and the base's
    (n, x) pairs with k = 0 .. num_n-1 added to n, which for a 64-sequence
    list is 1/64 of the work (and the list is never expanded).  Array-backed
    lists keep the answer (many components see the same lists).
    """
    derived = getattr(indexes, "derived", None)
    if derived is not None:
        return derived("distinct-nx-t", _distinct_nx_and_t)
    return _distinct_nx_and_t(indexes)


def _sorted_distinct(values: np.ndarray) -> np.ndarray:
    # (np.unique costs tens of microseconds of overhead; a set is faster
    # for the few hundred values of a tiling's base.)
    if values.size <= 512:
        return np.array(sorted(set(values.tolist())), dtype=np.int64)
    return sorted_unique(values)


def _distinct_nx_and_t(indexes: list) -> tuple[np.ndarray, np.ndarray]:
    tiling = getattr(indexes, "n_tiling", None)
    if tiling is None or tiling.n_col != 0:
        cols = index_columns(indexes)
        nx = _sorted_distinct(_nx_keys(cols))
    else:
        cols = np.asarray(tiling.base, dtype=np.int64)
        base_nx = _sorted_distinct(_nx_keys(cols))
        shifts = np.arange(tiling.num_n, dtype=np.int64) * _NX_SHIFT
        nx = (base_nx[None, :] + shifts[:, None]).ravel()
        if tiling.num_n > 1 and base_nx.size > 1 and \
                base_nx[-1] // _NX_SHIFT - base_nx[0] // _NX_SHIFT > 0:
            nx = sorted_unique(nx)      # (base n values not all equal: copies interleave)
    t = cols[:, 1]
    t = _sorted_distinct(t[t != K_NO_TIME])
    nx.flags.writeable = False
    t.flags.writeable = False
    return nx, t


def _grid_columns(nx: np.ndarray, t_start: int, t_step: int, num_t_values: int,
                  reorder_t: int, ref: np.ndarray | None = None,
                  ref_keys: np.ndarray | None = None) -> np.ndarray:
    """Indexes on a grid as columns; t has the largest stride, except that
    with reorder_t > 1 each block of reorder_t consecutive t values is
    interleaved (t varies fastest inside a block).  ``nx``: (n, x) keys.
    With ``ref`` (and its (n, x) keys), grid points not in ``ref`` get t =
    kNoTime (Kaldi's blank padding indexes)."""
    if reorder_t < 1 or num_t_values % reorder_t != 0 or t_step < 0:
        raise ValueError("bad grid for index creation")
    if t_step == 0:
        if num_t_values != 1:
            raise ValueError("t_step 0 with more than one t value")
        t_step = 1
    num_blocks, num_nx = num_t_values // reorder_t, len(nx)
    n, x = _nx_from_keys(nx)
    # Axes: block, (n, x) pair, position inside the block.
    t = (t_start + t_step * (reorder_t * np.arange(num_blocks, dtype=np.int64)[:, None, None]
                             + np.arange(reorder_t, dtype=np.int64)[None, None, :]))
    out = np.empty((num_blocks, num_nx, reorder_t, 3), dtype=np.int64)
    out[..., 0] = n[None, :, None]
    out[..., 1] = t
    out[..., 2] = x[None, :, None]
    if ref is not None:
        # Which grid points (t position, pair) the reference has.
        t_off = ref[:, 1] - t_start
        ti = t_off // t_step
        p = np.minimum(np.searchsorted(nx, ref_keys), num_nx - 1)
        on_grid = ((ref[:, 1] != K_NO_TIME) & (t_off % t_step == 0) & (ti >= 0)
                   & (ti < num_t_values) & (nx[p] == ref_keys))
        present = np.zeros(num_t_values * num_nx, dtype=bool)
        present[ti[on_grid] * num_nx + p[on_grid]] = True
        mask = present.reshape(num_blocks, reorder_t, num_nx).transpose(0, 2, 1)
        out[..., 1][~mask] = K_NO_TIME
    return out.reshape(-1, 3)


def _create_indexes(nx_pairs: list[tuple[int, int]], t_start: int, t_step: int,
                    num_t_values: int, reorder_t: int) -> list[Index]:
    """Indexes on a grid (see :func:`_grid_columns`; (n, x) pairs as tuples)."""
    pairs = np.asarray(nx_pairs, dtype=np.int64).reshape(-1, 2)
    nx = pairs[:, 0] * _NX_SHIFT + (pairs[:, 1] + _NX_BIAS)
    return indexes_from_columns(_grid_columns(nx, t_start, t_step, num_t_values, reorder_t))


def _indexes_for_computation_columns(io: ComputationIo, nx: np.ndarray, in_cols: np.ndarray,
                                     out_cols: np.ndarray, in_keys: np.ndarray | None = None
                                     ) -> tuple[np.ndarray, np.ndarray]:
    if len(nx) != io.num_images:
        raise ValueError("(n, x) pairs changed")
    if in_keys is None:
        in_keys = _nx_keys(in_cols)
    new_in = _grid_columns(nx, io.start_t_in, io.t_step_in, io.num_t_in, io.reorder_t_in,
                           in_cols, in_keys)
    new_out = _grid_columns(nx, io.start_t_out, io.t_step_out, io.num_t_out, 1,
                            out_cols, _nx_keys(out_cols))
    return new_in, new_out


def get_indexes_for_computation(io: ComputationIo, orig_input: list,
                                orig_output: list) -> tuple[list[Index], list[Index]]:
    in_cols, out_cols = index_columns(orig_input), index_columns(orig_output)
    nx = sorted_unique(_nx_keys(in_cols))
    new_in, new_out = _indexes_for_computation_columns(io, nx, in_cols, out_cols)
    return indexes_from_columns(new_in), indexes_from_columns(new_out)


def _modify_computation_io(io: ComputationIo) -> None:
    """Tdnn-specific fix-up: nonzero steps, and reorder_t_in for subsampling."""
    if io.t_step_out == 0:
        # A single output (or input) t: the step is a don't-care.
        if io.t_step_in == 0:
            io.t_step_in = 1
        io.t_step_out = io.t_step_in
    if io.t_step_in == 0 or io.t_step_out % io.t_step_in != 0:
        raise ValueError(f"TdnnComponent: output t-step {io.t_step_out} is not a multiple of "
                         f"input t-step {io.t_step_in}")
    io.reorder_t_in = io.t_step_out // io.t_step_in
    n = io.reorder_t_in
    io.num_t_in = n * ((io.num_t_in + n - 1) // n)


