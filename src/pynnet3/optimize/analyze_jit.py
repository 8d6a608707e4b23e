"""Parts of the analysis as compiled loops: the variables of a computation
(see :class:`.analyze.ComputationVariables`) and the first/last accesses a
round of variable merging asks about.

The analysis runs a dozen times per optimization (once per round of
variable merging), and a computation has a few hundred matrices and
submatrices, so the NumPy versions' few dozen array operations cost far
more in per-call overhead than in work.  These Numba functions compute the
same arrays in one pass each; callers validate their input first.
"""
from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["variables_arrays", "access_summary_arrays"]


@njit(cache=True, nogil=True)
def _sorted_unique_segments(points, offsets):
    """Sort each segment ``points[offsets[m]:offsets[m+1]]`` (in place) and
    drop repeated values; returns the values and the new segment offsets."""
    num = offsets.shape[0] - 1
    out = np.empty(points.shape[0], dtype=np.int64)
    first = np.zeros(num + 1, dtype=np.int64)
    k = 0
    for m in range(num):
        first[m] = k
        lo, hi = offsets[m], offsets[m + 1]
        if hi - lo > 32:
            points[lo:hi] = np.sort(points[lo:hi])
        else:
            # (segments are short: insertion sort, in place)
            for i in range(lo + 1, hi):
                x = points[i]
                j = i - 1
                while j >= lo and points[j] > x:
                    points[j + 1] = points[j]
                    j -= 1
                points[j + 1] = x
        for i in range(lo, hi):
            if i == lo or points[i] != points[i - 1]:
                out[k] = points[i]
                k += 1
    first[num] = k
    return out[:k].copy(), first


@njit(cache=True, nogil=True)
def _position(points, lo, hi, value):
    """Index (relative to lo) of ``value`` in the sorted ``points[lo:hi]``
    (where it would be inserted if absent)."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) // 2
        if points[mid] < value:
            a = mid + 1
        else:
            b = mid
    return a - lo


@njit(cache=True, nogil=True)
def _variables_kernel(sub, sizes):
    num_subs = sub.shape[0]
    num_matrices = sizes.shape[0]
    count = np.zeros(num_matrices, dtype=np.int64)
    for s in range(1, num_subs):
        count[sub[s, 0]] += 1
    # Candidate split points: 0 and the size of every matrix m >= 1, and
    # each submatrix's start and end.
    offsets = np.zeros(num_matrices + 1, dtype=np.int64)
    for m in range(num_matrices):
        n = 2 + 2 * count[m] if m >= 1 else 0
        offsets[m + 1] = offsets[m] + n
    row_points = np.empty(offsets[num_matrices], dtype=np.int64)
    col_points = np.empty(offsets[num_matrices], dtype=np.int64)
    fill = offsets[:-1].copy()
    for m in range(1, num_matrices):
        p = fill[m]
        row_points[p] = 0
        row_points[p + 1] = sizes[m, 0]
        col_points[p] = 0
        col_points[p + 1] = sizes[m, 1]
        fill[m] = p + 2
    for s in range(1, num_subs):
        m = sub[s, 0]
        p = fill[m]
        row_points[p] = sub[s, 1]
        row_points[p + 1] = sub[s, 1] + sub[s, 2]
        col_points[p] = sub[s, 3]
        col_points[p + 1] = sub[s, 3] + sub[s, 4]
        fill[m] = p + 2
    row_pts, row_first = _sorted_unique_segments(row_points, offsets)
    col_pts, col_first = _sorted_unique_segments(col_points, offsets)
    num_row_vars = np.zeros(num_matrices, dtype=np.int64)
    num_col_vars = np.zeros(num_matrices, dtype=np.int64)
    first_var = np.zeros(num_matrices + 1, dtype=np.int64)
    for m in range(num_matrices):
        num_row_vars[m] = max(row_first[m + 1] - row_first[m] - 1, 0)
        num_col_vars[m] = max(col_first[m + 1] - col_first[m] - 1, 0)
        first_var[m + 1] = first_var[m] + num_row_vars[m] * num_col_vars[m]
    variable_to_matrix = np.empty(first_var[num_matrices], dtype=np.int64)
    for m in range(num_matrices):
        for v in range(first_var[m], first_var[m + 1]):
            variable_to_matrix[v] = m
    # Each submatrix's block of variables: rows rs..re-1 by columns cs..ce-1.
    whole = np.zeros(num_subs, dtype=np.bool_)
    bounds = np.zeros((num_subs, 4), dtype=np.int64)
    var_offsets = np.zeros(num_subs + 1, dtype=np.int64)
    for s in range(1, num_subs):
        m = sub[s, 0]
        rlo, rhi = row_first[m], row_first[m + 1]
        clo, chi = col_first[m], col_first[m + 1]
        rs = _position(row_pts, rlo, rhi, sub[s, 1])
        re = _position(row_pts, rlo, rhi, sub[s, 1] + sub[s, 2])
        cs = _position(col_pts, clo, chi, sub[s, 3])
        ce = _position(col_pts, clo, chi, sub[s, 3] + sub[s, 4])
        bounds[s, 0], bounds[s, 1], bounds[s, 2], bounds[s, 3] = rs, re, cs, ce
        whole[s] = rs == 0 and re == num_row_vars[m] and cs == 0 and ce == num_col_vars[m]
        var_offsets[s + 1] = var_offsets[s] + (re - rs) * (ce - cs)
    flat = np.empty(var_offsets[num_subs], dtype=np.int64)
    for s in range(1, num_subs):
        m = sub[s, 0]
        k = var_offsets[s]
        ncv = num_col_vars[m]
        for r in range(bounds[s, 0], bounds[s, 1]):
            for c in range(bounds[s, 2], bounds[s, 3]):
                flat[k] = first_var[m] + r * ncv + c
                k += 1
    return (row_pts, row_first, col_pts, col_first, first_var, variable_to_matrix, whole,
            flat, var_offsets)


def variables_arrays(sub: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """(row split points, their per-matrix offsets, column split points,
    their offsets, first variable of each matrix (+ total), matrix of each
    variable, whether each submatrix is a whole matrix, the variables of
    all submatrices flattened, their per-submatrix offsets), for a valid
    submatrix table ``sub`` [num_submatrices, 5] and matrix sizes
    ``sizes`` [num_matrices, 2]."""
    return _variables_kernel(np.ascontiguousarray(sub, dtype=np.int64),
                             np.ascontiguousarray(sizes, dtype=np.int64))


@njit(cache=True, nogil=True)
def _access_summary_kernel(cmd, sub, flag, var_flat, var_offsets, first_var, num_variables,
                           zeroing, num_commands):
    # Every (submatrix) access record expanded to the submatrix's variables,
    # as sort keys (variable * n + command) * 4 + flag.
    n = max(num_commands, 1)
    total = 0
    for i in range(cmd.shape[0]):
        total += var_offsets[sub[i] + 1] - var_offsets[sub[i]]
    keys = np.empty(total, dtype=np.int64)
    k = 0
    for i in range(cmd.shape[0]):
        for j in range(var_offsets[sub[i]], var_offsets[sub[i] + 1]):
            keys[k] = (var_flat[j] * n + cmd[i]) * 4 + flag[i]
            k += 1
    keys.sort()
    v_first = np.full(num_variables, num_commands, dtype=np.int64)
    v_last = np.full(num_variables, -1, dtype=np.int64)
    v_first_nt = np.full(num_variables, num_commands, dtype=np.int64)
    v_last_write = np.full(num_variables, -1, dtype=np.int64)
    write_keys = np.empty(total, dtype=np.int64)
    num_writes = 0
    base = num_commands + 1
    i = 0
    while i < total:
        key = keys[i] >> 2
        f = keys[i] & 3
        i += 1
        while i < total and (keys[i] >> 2) == key:      # one command's accesses merged
            f |= keys[i] & 3
            i += 1
        v = key // n
        c = key - v * n
        if v_first[v] == num_commands:
            v_first[v] = c
        v_last[v] = c
        if not zeroing[c] and v_first_nt[v] == num_commands:
            v_first_nt[v] = c
        if f & 2:
            v_last_write[v] = c
            write_keys[num_writes] = v * base + c
            num_writes += 1
    num_subs = var_offsets.shape[0] - 1
    sub_first_nt = np.full(num_subs, num_commands, dtype=np.int64)
    sub_last = np.full(num_subs, -1, dtype=np.int64)
    sub_last_write = np.full(num_subs, -1, dtype=np.int64)
    for s in range(num_subs):
        for j in range(var_offsets[s], var_offsets[s + 1]):
            v = var_flat[j]
            sub_first_nt[s] = min(sub_first_nt[s], v_first_nt[v])
            sub_last[s] = max(sub_last[s], v_last[v])
            sub_last_write[s] = max(sub_last_write[s], v_last_write[v])
    num_matrices = first_var.shape[0] - 1
    matrix_first = np.full(num_matrices, num_commands, dtype=np.int64)
    matrix_first_nt = np.full(num_matrices, num_commands, dtype=np.int64)
    for m in range(num_matrices):
        for v in range(first_var[m], first_var[m + 1]):
            matrix_first[m] = min(matrix_first[m], v_first[v])
            matrix_first_nt[m] = min(matrix_first_nt[m], v_first_nt[v])
    return (sub_first_nt, sub_last, sub_last_write, matrix_first, matrix_first_nt,
            write_keys[:num_writes].copy())


def access_summary_arrays(cmd: np.ndarray, sub: np.ndarray, flag: np.ndarray,
                          var_flat: np.ndarray, var_offsets: np.ndarray,
                          first_var: np.ndarray, zeroing: np.ndarray,
                          num_commands: int) -> tuple[np.ndarray, ...]:
    """From submatrix access records (command, submatrix, flag 1 read / 2
    write / 3 both, any order) and the variables: per submatrix the first
    access that is not a zeroing, the last access and the last write; per
    matrix the first access and the first non-zeroing access (num_commands
    / -1 where none); and the writes as sorted keys variable *
    (num_commands + 1) + command."""
    return _access_summary_kernel(
        np.ascontiguousarray(cmd, dtype=np.int64), np.ascontiguousarray(sub, dtype=np.int64),
        np.ascontiguousarray(flag, dtype=np.int64), var_flat, var_offsets, first_var,
        int(first_var[-1]), np.ascontiguousarray(zeroing, dtype=np.bool_), int(num_commands))
