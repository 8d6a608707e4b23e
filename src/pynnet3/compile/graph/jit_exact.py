"""Kaldi's exact graph-building algorithm as one compiled (Numba) loop: an
acceleration of :class:`.builder.ComputationGraphBuilder` (the reference:
compute() and prune() of a first segment).

The reference runs Kaldi's
ComputeComputationGraph one cindex at a time in Python: a few microseconds
per cindex, tens of thousands of cindexes for an LSTM request (the
vectorised path of :mod:`.bulk` does not apply when the network has
recurrence, since there the timing of "known uncomputable" decides which
cindexes get expanded).  This module runs the *same* algorithm -- same queue
discipline (each iteration takes its queue from the back), same usable
counts, same two-question computability test, hence the same cindex_ids,
dependencies and states -- in compiled code, and Prune() after it.

It applies when every node's dependencies can be written as small tables
(:mod:`.programs`):

* input nodes; dim-range nodes;
* component nodes whose component keeps the default index hooks (one input,
  the same Index) or declares plain offsets (get_input_index_offsets(), e.g.
  TdnnComponent: every listed input required);
* component nodes whose component reads a window of its input (the
  statistics components: programs.component_range): thousands of
  dependencies, computable when any is; their computable / not-computable
  inputs are counted as the states change, so deciding never rescans them;
* descriptor nodes built from node names, ``Offset``, ``Round``,
  ``ReplaceIndex``, ``Switch`` (forwarding expressions, each giving one
  dependency "term") combined by ``Append``, ``Sum``, ``Failover``,
  ``IfDefined`` and ``Const``, with at most 64 terms.

A descriptor's computability is a small postfix program over its terms
(TERM k, CONST, IFDEF, AND, FAILOVER), evaluated on the states of the
term's cindexes; it also yields, as a bit mask over terms, the inputs that
Descriptor.is_computable() would report as used (Prune() keeps only those).

Cindexes are found through an open-addressing hash table keyed on
(node, n, t, x), so any Index values work.  Whatever the loop cannot promise
to do exactly as the Python code does (an offset component given kNoTime,
a component offset or Round() leaving the int32 range, an Index listed
twice in the request, the 10000-iteration limit) makes it return a status
other than OK, and the caller then runs the Python algorithm from scratch,
which raises the error or handles the case.

The main loop (:func:`_run`) never rebinds an array and calls no helper
that takes arrays in its hot paths (the recursive usable-count updates and
the computability test are written out): Numba otherwise does atomic
reference counting each time round, which cost 10x.  When an array might
overflow, _run stops before taking the next cindex and :func:`_build`
grows the arrays and resumes it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...nnet.index import K_NO_TIME
from .computation_graph import GraphArrays
from .jit_bulk import grow, wrap32
from .programs import (INT32_MAX, INT32_MIN, MAX_TERMS, NK_COMPONENT, NK_DESCRIPTOR,
                       NK_DIM_RANGE, NK_INPUT, OP_COMP_OFFSET, OP_NODE, OP_OFFSET, OP_ROUND_T,
                       OP_SET_T, OP_SET_X, P_AND, P_CONST, P_IFDEF, P_TERM, JitPlan)
from ...numba_cache import lazy_njit


if TYPE_CHECKING:
    from ...nnet.nnet import Nnet

_I64 = np.int64
# The per-cindex state, the dependency and edge lists, the hash slots and
# queues are int32: cindex ids, list positions and Index values all fit (a
# request that would need more than 2**31 dependencies goes to the Python
# code), and a statistics-pooling request reaches tens of millions of
# cindexes with ~10,000 dependencies for each window.
_LIMIT = 2 ** 31 - 1
_MAX_TERMS = MAX_TERMS

# Status codes.
OK, FALLBACK, DUPLICATE, LOOP, PRUNE_ERROR = 0, 1, 2, 3, 4

# Columns of the per-cindex state matrix.
C_NODE, C_N, C_T, C_X = 0, 1, 2, 3
C_COMP, C_USABLE, C_QUEUED, C_DEPS_DONE, C_IS_INPUT = 4, 5, 6, 7, 8
C_DEP_START, C_DEP_LEN, C_RAW_START, C_RAW_LEN, C_DOT_HEAD, C_DOT_TAIL = (
    9, 10, 11, 12, 13, 14)
NUM_COLS = 15

# ComputableInfo values (as computation_graph.K_*).
_UNKNOWN, _COMPUTABLE, _NOT_COMPUTABLE = 0, 1, 2


# -- compiled helpers --------------------------------------------------------------------

@lazy_njit(cache=True, nogil=True)
def _grow_rows(a, used, need):
    """``a``, or a copy with room for ``need`` rows of which the first
    ``used`` are copied (the rest is left untouched: not resident)."""
    if need <= a.shape[0]:
        return a
    size = max(need, 2 * a.shape[0] + 16)
    b = np.empty((size, a.shape[1]), dtype=a.dtype)
    b[:used] = a[:used]
    return b


@lazy_njit(cache=True, nogil=True)
def _grow_used(a, used, need):
    """As jit_bulk.grow, copying only the first ``used`` entries."""
    if need <= a.shape[0]:
        return a
    size = max(need, 2 * a.shape[0] + 16)
    b = np.empty(size, dtype=a.dtype)
    b[:used] = a[:used]
    return b


@lazy_njit(cache=True, nogil=True)
def _hash(nd, n, t, x, mask):
    # Each product stays below 2**63 (32-bit values times 31-bit odd
    # constants): no signed overflow.
    a = (t & 0xFFFFFFFF) * 0x5BD1E995
    b = (n & 0xFFFFFFFF) * 0x27D4EB2F
    c = (x & 0xFFFFFFFF) * 0x165667B1
    h = a ^ (b >> 3) ^ (c << 2) ^ (nd * 0x61C88647 << 5)
    h ^= h >> 29
    return h & mask


@lazy_njit(cache=True, nogil=True)
def _find(slots, state, nd, n, t, x):
    """(cindex_id or -1, the slot where it is or would go)."""
    mask = slots.shape[0] - 1
    i = _hash(nd, n, t, x, mask)
    while True:
        c = slots[i]
        if c < 0:
            return -1, i
        if (state[c, C_NODE] == nd and state[c, C_T] == t and state[c, C_N] == n
                and state[c, C_X] == x):
            return c, i
        i = (i + 1) & mask


@lazy_njit(cache=True, nogil=True)
def _rehash(state, count, size):
    slots = np.full(size, -1, dtype=np.int32)
    mask = size - 1
    for c in range(count):
        i = _hash(state[c, C_NODE], state[c, C_N], state[c, C_T], state[c, C_X], mask)
        while slots[i] >= 0:
            i = (i + 1) & mask
        slots[i] = c
    return slots


@lazy_njit(cache=True, nogil=True)
def _map_term(fwd, switch_table, row, n, t, x):
    """(ok, node, n, t, x): the cindex a term maps (n, t, x) to; ok is False
    when the Python code would do something this loop does not copy."""
    while True:
        op = fwd[row, 0]
        if op == OP_NODE:
            return True, fwd[row, 1], n, t, x
        if op == OP_OFFSET:
            n = wrap32(n + fwd[row, 1])
            t = wrap32(t + fwd[row, 2])
            x = wrap32(x + fwd[row, 3])
        elif op == OP_COMP_OFFSET:
            if t == K_NO_TIME:
                return False, 0, n, t, x
            n += fwd[row, 1]
            t += fwd[row, 2]
            x += fwd[row, 3]
            if (n < INT32_MIN or n > INT32_MAX or t < INT32_MIN or t > INT32_MAX
                    or x < INT32_MIN or x > INT32_MAX):
                return False, 0, n, t, x
        elif op == OP_ROUND_T:
            t -= t % fwd[row, 1]      # floor modulus, as Python's
            if t < INT32_MIN:
                return False, 0, n, t, x
        elif op == OP_SET_T:
            t = fwd[row, 1]
        elif op == OP_SET_X:
            x = fwd[row, 1]
        else:   # OP_SWITCH
            row = switch_table[fwd[row, 2] + t % fwd[row, 1]]
            continue
        row = fwd[row, 4]


@lazy_njit(cache=True, nogil=True)
def _eval_prog(prog, start, length, raw, raw_start, state, unknown_ok, ok_stack, mask_stack):
    """(computable, mask of the terms used) of one cindex's program."""
    if length == 0:
        return True, 0
    sp = 0
    for p in range(start, start + length):
        op = prog[p, 0]
        if op == P_TERM:
            k = prog[p, 1]
            s = state[raw[raw_start + k], C_COMP]
            present = s == _COMPUTABLE or (unknown_ok and s == _UNKNOWN)
            ok_stack[sp] = present
            mask_stack[sp] = (np.int64(1) << k) if present else 0
            sp += 1
        elif op == P_CONST:
            ok_stack[sp] = True
            mask_stack[sp] = 0
            sp += 1
        elif op == P_IFDEF:
            # Always computable; uses its inputs only if they are there
            # (the mask of a failed expression is already 0).
            ok_stack[sp - 1] = True
        elif op == P_AND:
            sp -= 1
            if ok_stack[sp - 1] and ok_stack[sp]:
                mask_stack[sp - 1] |= mask_stack[sp]
            else:
                ok_stack[sp - 1] = False
                mask_stack[sp - 1] = 0
        else:   # P_FAILOVER
            sp -= 1
            if not ok_stack[sp - 1]:
                if ok_stack[sp]:
                    ok_stack[sp - 1] = True
                    mask_stack[sp - 1] = mask_stack[sp]
                else:
                    mask_stack[sp - 1] = 0
    return ok_stack[0], mask_stack[0]


# -- ComputeComputationGraph ---------------------------------------------------------------

# Indexes into the scalar state of _run (kept in an array so that _run can
# stop when an array is full and resume after _build has grown it).
S_COUNT, S_NUM_DEPS, S_NUM_RAW, S_NUM_EDGES, S_NUM_CUR, S_NUM_NXT, S_DISTANCE, S_WHICH = range(8)
_NEED_ROOM = -1
# What one cindex's expansion may add at most (each of cindexes, raw and
# sorted dependencies, edges).
_ROOM = _MAX_TERMS


@lazy_njit(cache=True, nogil=True)
def _run(sc, max_distance, state, slots, queues, stack_c, stack_i, deps, raw, edge_src,
         edge_next, kind, needs_time, term_start, term_count, term_root, fwd,
         switch_table, prog_start, prog_len, prog, range_spec, room):
    """The iterations of BuildGraphOneIter until the queue is empty: OK,
    FALLBACK, LOOP, or _NEED_ROOM (before taking a cindex whose expansion
    might not fit; nothing is lost, call again after growing).

    No array is rebound in here: Numba would otherwise do atomic reference
    counting on every trip round the loops.
    """
    ok_stack = np.zeros(_MAX_TERMS * 2 + 8, dtype=np.bool_)
    scratch = np.empty(room, dtype=np.int64)
    count = sc[S_COUNT]
    num_deps = sc[S_NUM_DEPS]
    num_raw = sc[S_NUM_RAW]
    num_edges = sc[S_NUM_EDGES]
    num_cur = sc[S_NUM_CUR]
    num_nxt = sc[S_NUM_NXT]
    distance = sc[S_DISTANCE]
    which = sc[S_WHICH]
    cap = state.shape[0]
    status = OK
    while distance < max_distance:
        cur_q = which
        nxt_q = 1 - which
        while num_cur > 0:
            if (count + room > cap or num_raw + room > raw.shape[0]
                    or num_deps + room > deps.shape[0]
                    or num_edges + room > edge_src.shape[0]
                    or 2 * (count + room) > slots.shape[0]):
                status = _NEED_ROOM
                break
            num_cur -= 1
            cid = queues[cur_q, num_cur]
            state[cid, C_QUEUED] = 0
            if state[cid, C_DEPS_DONE] == 0 and state[cid, C_USABLE] != 0:
                state[cid, C_DEPS_DONE] = 1
                # AddDependencies.
                nd = state[cid, C_NODE]
                if needs_time[nd] and state[cid, C_T] == K_NO_TIME:
                    status = FALLBACK
                    break
                raw_start = num_raw
                n0 = np.int64(state[cid, C_N])
                t0 = np.int64(state[cid, C_T])
                x0 = np.int64(state[cid, C_X])
                failed = False
                first = 0
                window = range_spec[nd, 0]
                if window > 0:
                    # A window component: times first + k * step.
                    if t0 % range_spec[nd, 4] != 0:
                        status = FALLBACK      # (get_input_indexes raises)
                        break
                    first = t0 - t0 % range_spec[nd, 1] + range_spec[nd, 2]
                    if (first < INT32_MIN
                            or first + (window - 1) * range_spec[nd, 3] > INT32_MAX):
                        status = FALLBACK
                        break
                    num_terms = window
                else:
                    num_terms = term_count[nd]
                for k in range(num_terms):
                    if window > 0:
                        ok, dnode, dn, dt, dx = (True, nd - 1, n0,
                                                 first + k * range_spec[nd, 3], x0)
                    else:
                        ok, dnode, dn, dt, dx = _map_term(
                            fwd, switch_table, term_root[term_start[nd] + k], n0, t0, x0)
                    if not ok:
                        failed = True
                        break
                    dep, pos = _find(slots, state, dnode, dn, dt, dx)
                    if dep < 0:
                        # A new cindex, queued so that its dependencies get added.
                        dep = count
                        count += 1
                        slots[pos] = dep
                        state[dep, C_NODE] = dnode
                        state[dep, C_N] = dn
                        state[dep, C_T] = dt
                        state[dep, C_X] = dx
                        state[dep, C_COMP] = _UNKNOWN
                        state[dep, C_USABLE] = 0
                        state[dep, C_QUEUED] = 1
                        state[dep, C_DEPS_DONE] = 0
                        state[dep, C_IS_INPUT] = 0
                        state[dep, C_DEP_START] = 0
                        state[dep, C_DEP_LEN] = 0
                        state[dep, C_RAW_START] = 0
                        state[dep, C_RAW_LEN] = 0
                        state[dep, C_DOT_HEAD] = -1
                        state[dep, C_DOT_TAIL] = -1
                        queues[nxt_q, num_nxt] = dep
                        num_nxt += 1
                    raw[num_raw] = dep
                    num_raw += 1
                if failed:
                    status = FALLBACK
                    break
                # Sorted and unique (insertion sort: a handful of terms; a
                # window's thousands are distinct and are sorted).
                nuniq = 0
                if window > 0:
                    nuniq = num_raw - raw_start
                    # (Nearly always in order already: new cindexes are
                    # numbered as the window is walked.)
                    in_order = True
                    for k in range(raw_start + 1, num_raw):
                        if raw[k - 1] > raw[k]:
                            in_order = False
                            break
                    if in_order:
                        scratch[:nuniq] = raw[raw_start:num_raw]
                    else:
                        scratch[:nuniq] = np.sort(raw[raw_start:num_raw])
                for k in range(raw_start, num_raw if window == 0 else raw_start):
                    v = raw[k]
                    j = nuniq
                    while j > 0 and scratch[j - 1] > v:
                        j -= 1
                    if j > 0 and scratch[j - 1] == v:
                        continue
                    for q in range(nuniq, j, -1):
                        scratch[q] = scratch[q - 1]
                    scratch[j] = v
                    nuniq += 1
                dep_start = num_deps
                for k in range(nuniq):
                    deps[num_deps] = scratch[k]
                    num_deps += 1
                if window > 0:
                    # A window needs no raw list (its inputs are distinct, and
                    # it uses those that are there): its RAW columns count
                    # its computable and not-computable inputs instead, kept
                    # up to date as their states change, so that deciding its
                    # own state does not mean scanning thousands of inputs.
                    num_raw = raw_start
                    n_ok = 0
                    n_not = 0
                    for k in range(dep_start, dep_start + nuniq):
                        st = state[deps[k], C_COMP]
                        if st == _COMPUTABLE:
                            n_ok += 1
                        elif st == _NOT_COMPUTABLE:
                            n_not += 1
                    state[cid, C_RAW_START] = n_ok
                    state[cid, C_RAW_LEN] = n_not
                else:
                    state[cid, C_RAW_START] = raw_start
                    state[cid, C_RAW_LEN] = num_raw - raw_start
                state[cid, C_DEP_START] = dep_start
                state[cid, C_DEP_LEN] = nuniq
                # depend_on_this, and the usable counts of what it depends on.
                for k in range(dep_start, dep_start + nuniq):
                    dep = deps[k]
                    # (Edge k runs from cid to deps[k]: edges and deps are
                    # appended together.)
                    edge_src[num_edges] = cid
                    edge_next[num_edges] = -1
                    if state[dep, C_DOT_HEAD] < 0:
                        state[dep, C_DOT_HEAD] = num_edges
                    else:
                        edge_next[state[dep, C_DOT_TAIL]] = num_edges
                    state[dep, C_DOT_TAIL] = num_edges
                    num_edges += 1
                    # IncrementUsableCount (recursive in Kaldi; an explicit
                    # stack here, written out: calls that take arrays cost
                    # reference counting).
                    state[dep, C_USABLE] += 1
                    if state[dep, C_USABLE] != 1 or state[dep, C_COMP] == _NOT_COMPUTABLE:
                        continue
                    top = 0
                    stack_c[0] = dep
                    stack_i[0] = 0
                    while top >= 0:
                        c = stack_c[top]
                        i = stack_i[top]
                        if i < state[c, C_DEP_LEN]:
                            stack_i[top] = i + 1
                            y = deps[state[c, C_DEP_START] + i]
                            state[y, C_USABLE] += 1
                            if state[y, C_USABLE] == 1 and state[y, C_COMP] != _NOT_COMPUTABLE:
                                top += 1
                                stack_c[top] = y
                                stack_i[top] = 0
                            continue
                        top -= 1
                        if state[c, C_COMP] == _UNKNOWN and state[c, C_QUEUED] == 0:
                            state[c, C_QUEUED] = 1
                            queues[nxt_q, num_nxt] = c
                            num_nxt += 1
                # Re-queued: next time round its computability can be decided.
                if state[cid, C_QUEUED] == 0:
                    state[cid, C_QUEUED] = 1
                    queues[nxt_q, num_nxt] = cid
                    num_nxt += 1
            elif state[cid, C_COMP] == _UNKNOWN and state[cid, C_USABLE] != 0:
                # UpdateComputableInfo.
                # ComputeComputableInfo, written out (see above).
                nd = state[cid, C_NODE]
                k = kind[nd]
                if k == NK_INPUT:
                    out = _COMPUTABLE if state[cid, C_IS_INPUT] != 0 else _NOT_COMPUTABLE
                elif k == NK_DIM_RANGE:
                    out = state[raw[state[cid, C_RAW_START]], C_COMP]
                elif range_spec[nd, 0] > 0:
                    # A window component: computable when any input is (the
                    # counts of computable / not-computable inputs).
                    if state[cid, C_RAW_START] > 0:
                        out = _COMPUTABLE
                    elif state[cid, C_RAW_LEN] == state[cid, C_DEP_LEN]:
                        out = _NOT_COMPUTABLE
                    else:
                        out = _UNKNOWN
                else:
                    # The program, first counting only known-computable inputs
                    # (true: computable), then unknown ones too (false: not).
                    out = _UNKNOWN
                    raw_start = state[cid, C_RAW_START]
                    p0 = prog_start[nd]
                    p1 = p0 + prog_len[nd]
                    for unknown_ok in (False, True):
                        sp = 0
                        for p in range(p0, p1):
                            op = prog[p, 0]
                            if op == P_TERM:
                                st = state[raw[raw_start + prog[p, 1]], C_COMP]
                                ok_stack[sp] = st == _COMPUTABLE or (unknown_ok and st == _UNKNOWN)
                                sp += 1
                            elif op == P_CONST:
                                ok_stack[sp] = True
                                sp += 1
                            elif op == P_IFDEF:
                                ok_stack[sp - 1] = True
                            elif op == P_AND:
                                sp -= 1
                                ok_stack[sp - 1] = ok_stack[sp - 1] and ok_stack[sp]
                            else:   # P_FAILOVER
                                sp -= 1
                                ok_stack[sp - 1] = ok_stack[sp - 1] or ok_stack[sp]
                        ok = True if p1 == p0 else ok_stack[0]
                        if not unknown_ok and ok:
                            out = _COMPUTABLE
                            break
                        if unknown_ok and not ok:
                            out = _NOT_COMPUTABLE
                if out != _UNKNOWN:
                    state[cid, C_COMP] = out
                    e = state[cid, C_DOT_HEAD]
                    while e >= 0:
                        other = edge_src[e]
                        if range_spec[state[other, C_NODE], 0] > 0:
                            if out == _COMPUTABLE:
                                state[other, C_RAW_START] += 1
                            else:
                                state[other, C_RAW_LEN] += 1
                        if state[other, C_COMP] == _UNKNOWN and state[other, C_QUEUED] == 0:
                            state[other, C_QUEUED] = 1
                            queues[nxt_q, num_nxt] = other
                            num_nxt += 1
                        e = edge_next[e]
                    if out == _NOT_COMPUTABLE and state[cid, C_USABLE] != 0:
                        for k in range(state[cid, C_DEP_START],
                                       state[cid, C_DEP_START] + state[cid, C_DEP_LEN]):
                            # DecrementUsableCount, written out.
                            dep = deps[k]
                            state[dep, C_USABLE] -= 1
                            if state[dep, C_USABLE] != 0 or state[dep, C_COMP] == _NOT_COMPUTABLE:
                                continue
                            top = 0
                            stack_c[0] = dep
                            stack_i[0] = 0
                            while top >= 0:
                                c = stack_c[top]
                                i = stack_i[top]
                                if i < state[c, C_DEP_LEN]:
                                    stack_i[top] = i + 1
                                    y = deps[state[c, C_DEP_START] + i]
                                    state[y, C_USABLE] -= 1
                                    if (state[y, C_USABLE] == 0
                                            and state[y, C_COMP] != _NOT_COMPUTABLE):
                                        top += 1
                                        stack_c[top] = y
                                        stack_i[top] = 0
                                    continue
                                top -= 1
        if status != OK:
            break
        which = nxt_q
        num_cur, num_nxt = num_nxt, 0
        distance += 1
        if num_cur == 0:
            break
    if status == OK and distance == max_distance:
        status = LOOP
    sc[S_COUNT] = count
    sc[S_NUM_DEPS] = num_deps
    sc[S_NUM_RAW] = num_raw
    sc[S_NUM_EDGES] = num_edges
    sc[S_NUM_CUR] = num_cur
    sc[S_NUM_NXT] = num_nxt
    sc[S_DISTANCE] = distance
    sc[S_WHICH] = which
    return status


@lazy_njit(cache=True, nogil=True)
def _grow_queues(queues, need):
    if need <= queues.shape[1]:
        return queues
    b = np.empty((2, max(need, 2 * queues.shape[1])), dtype=queues.dtype)
    b[:, :queues.shape[1]] = queues
    return b


@lazy_njit(cache=True, nogil=True)
def _build(init_node, init_n, init_t, init_x, num_in, max_distance, kind, needs_time, term_start,
           term_count, term_root, fwd, switch_table, prog_start, prog_len, prog, range_spec,
           room):
    """(status, count, distance, num_deps, num_raw, num_edges, state, deps, raw,
    edge_src): the arrays are valid up to count, num_deps, num_raw, num_edges.

    The first ``num_in`` initial cindexes are the request's inputs, the rest
    its outputs.  ``state`` rows are the cindexes (C_* columns); ``deps`` /
    ``raw`` hold each cindex's sorted unique / get_dependencies()-order
    dependencies at C_DEP_START / C_RAW_START; edge k says that
    ``edge_src[k]`` was appended to depend_on_this of ``deps[k]``.
    """
    num_init = init_node.shape[0]
    cap = max(1024, 4 * num_init) + room
    state = np.zeros((cap, NUM_COLS), dtype=np.int32)
    size = 4096
    while size < 4 * cap:
        size *= 2
    slots = np.full(size, -1, dtype=np.int32)
    queues = np.empty((2, cap), dtype=np.int32)
    stack_c = np.empty(cap, dtype=np.int32)
    stack_i = np.empty(cap, dtype=np.int32)
    deps = np.empty(4 * cap, dtype=np.int32)
    raw = np.empty(4 * cap, dtype=np.int32)
    edge_src = np.empty(4 * cap, dtype=np.int32)
    edge_next = np.empty(4 * cap, dtype=np.int32)
    sc = np.zeros(8, dtype=np.int64)
    # AddInputs, AddOutputs (the outputs make the first queue).
    count = 0
    num_queued = 0
    for i in range(num_init):
        c, pos = _find(slots, state, init_node[i], init_n[i], init_t[i], init_x[i])
        if c >= 0:
            return DUPLICATE, 0, 0, 0, 0, 0, state, deps, raw, edge_src
        c = count
        count += 1
        slots[pos] = c
        state[c, C_NODE] = init_node[i]
        state[c, C_N] = init_n[i]
        state[c, C_T] = init_t[i]
        state[c, C_X] = init_x[i]
        state[c, C_DOT_HEAD] = -1
        state[c, C_DOT_TAIL] = -1
        if i < num_in:
            state[c, C_IS_INPUT] = 1
            state[c, C_COMP] = _COMPUTABLE
        else:
            state[c, C_USABLE] = 1
            state[c, C_QUEUED] = 1
            queues[0, num_queued] = c
            num_queued += 1
    sc[S_COUNT] = count
    sc[S_NUM_CUR] = num_queued
    while True:
        status = _run(sc, max_distance, state, slots, queues, stack_c, stack_i, deps, raw,
                      edge_src, edge_next, kind, needs_time, term_start, term_count,
                      term_root, fwd, switch_table, prog_start, prog_len, prog, range_spec, room)
        if status != _NEED_ROOM:
            break
        count = sc[S_COUNT]
        if (4 * (count + room) > _LIMIT or sc[S_NUM_DEPS] + room > _LIMIT
                or sc[S_NUM_RAW] + room > _LIMIT):
            status = FALLBACK       # (beyond the int32 arrays)
            break
        if count + room > state.shape[0]:
            cap = 2 * state.shape[0]
            state = _grow_rows(state, count, cap)
            queues = _grow_queues(queues, cap)
            stack_c = grow(stack_c, cap)
            stack_i = grow(stack_i, cap)
        if 2 * (count + room) > slots.shape[0]:
            # (Doubling keeps the table between a quarter and half full.)
            size = 2 * slots.shape[0]
            while 2 * (count + room) > size:
                size *= 2
            slots = _rehash(state, count, size)
        deps = _grow_used(deps, sc[S_NUM_DEPS], sc[S_NUM_DEPS] + room)
        raw = _grow_used(raw, sc[S_NUM_RAW], sc[S_NUM_RAW] + room)
        need = sc[S_NUM_EDGES] + room
        edge_src = _grow_used(edge_src, sc[S_NUM_EDGES], need)
        edge_next = _grow_used(edge_next, sc[S_NUM_EDGES], need)
    if status != OK:
        return status, 0, 0, 0, 0, 0, state, deps, raw, edge_src
    return (OK, sc[S_COUNT], sc[S_DISTANCE], sc[S_NUM_DEPS], sc[S_NUM_RAW], sc[S_NUM_EDGES],
            state, deps, raw, edge_src)


# -- Prune ------------------------------------------------------------------------------------

@lazy_njit(cache=True, nogil=True)
def _prune(state, deps, raw, kind, is_output, prog_start, prog_len, prog, range_spec):
    """Kaldi's Prune() of a first segment: (status, keep, dep_offsets, dep_flat,
    flat length), the dependencies renumbered to the kept cindexes."""
    count = state.shape[0]
    ok_stack = np.zeros(_MAX_TERMS * 2 + 8, dtype=np.bool_)
    mask_stack = np.zeros(_MAX_TERMS * 2 + 8, dtype=np.int64)
    scratch = np.empty(_MAX_TERMS, dtype=np.int64)
    start = np.zeros(count + 1, dtype=np.int64)
    flat = np.empty(deps.shape[0], dtype=np.int32)
    keep = np.zeros(count, dtype=np.bool_)
    pos = 0
    # PruneDependencies: only what is really used stays.
    for c in range(count):
        start[c] = pos
        comp = state[c, C_COMP]
        usable = state[c, C_USABLE]
        if comp == _UNKNOWN and usable != 0:
            return PRUNE_ERROR, keep, start, flat, 0
        if comp == _NOT_COMPUTABLE or usable == 0:
            continue
        if comp != _COMPUTABLE:
            return PRUNE_ERROR, keep, start, flat, 0
        nd = state[c, C_NODE]
        if kind[nd] == NK_DESCRIPTOR:
            raw_start = state[c, C_RAW_START]
            ok, mask = _eval_prog(prog, prog_start[nd], prog_len[nd], raw, raw_start,
                                  state, False, ok_stack, mask_stack)
            if not ok:
                return PRUNE_ERROR, keep, start, flat, 0
            nuniq = 0
            for k in range(state[c, C_RAW_LEN]):
                if (mask >> k) & 1 == 0:
                    continue
                v = raw[raw_start + k]
                j = nuniq
                while j > 0 and scratch[j - 1] > v:
                    j -= 1
                if j > 0 and scratch[j - 1] == v:
                    continue
                for q in range(nuniq, j, -1):
                    scratch[q] = scratch[q - 1]
                scratch[j] = v
                nuniq += 1
            for k in range(nuniq):
                flat[pos] = scratch[k]
                pos += 1
        elif range_spec[nd, 0] > 0:
            # A window component uses the inputs that are there.
            first_pos = pos
            for k in range(state[c, C_DEP_START], state[c, C_DEP_START] + state[c, C_DEP_LEN]):
                if state[deps[k], C_COMP] == _COMPUTABLE:
                    flat[pos] = deps[k]
                    pos += 1
            if pos == first_pos:
                return PRUNE_ERROR, keep, start, flat, 0
        else:
            # Components (every input required), dim-range nodes: all used.
            for k in range(state[c, C_DEP_START], state[c, C_DEP_START] + state[c, C_DEP_LEN]):
                flat[pos] = deps[k]
                pos += 1
    start[count] = pos
    # What the outputs need.
    required = np.zeros(count, dtype=np.bool_)
    stack = np.empty(count, dtype=np.int32)
    top = 0
    for c in range(count):
        if is_output[state[c, C_NODE]]:
            required[c] = True
            stack[top] = c
            top += 1
    while top > 0:
        top -= 1
        c = stack[top]
        for k in range(start[c], start[c + 1]):
            dep = flat[k]
            if not required[dep]:
                required[dep] = True
                stack[top] = dep
                top += 1
    old2new = np.full(count, -1, dtype=np.int32)
    num_kept = 0
    for c in range(count):
        if required[c] and state[c, C_USABLE] == 0:
            return PRUNE_ERROR, keep, start, flat, 0
    for c in range(count):
        if required[c] or state[c, C_IS_INPUT] != 0:
            if state[c, C_COMP] != _COMPUTABLE:
                return PRUNE_ERROR, keep, start, flat, 0
            keep[c] = True
            old2new[c] = num_kept
            num_kept += 1
    # Renumber.
    new_start = np.zeros(num_kept + 1, dtype=np.int64)
    new_flat = np.empty(pos, dtype=np.int32)
    p = 0
    for c in range(count):
        if not keep[c]:
            continue
        for k in range(start[c], start[c + 1]):
            dep = old2new[flat[k]]
            if dep < 0:
                return PRUNE_ERROR, keep, start, flat, 0
            new_flat[p] = dep
            p += 1
        new_start[old2new[c] + 1] = p
    return OK, keep, new_start, new_flat, p


@lazy_njit(cache=True, nogil=True)
def _gather_deps(state, deps):
    """(offsets, flat): each cindex's sorted dependencies, in cindex order."""
    count = state.shape[0]
    offsets = np.zeros(count + 1, dtype=np.int64)
    for c in range(count):
        offsets[c + 1] = offsets[c] + state[c, C_DEP_LEN]
    flat = np.empty(offsets[count], dtype=np.int32)
    for c in range(count):
        p = state[c, C_DEP_START]
        flat[offsets[c]:offsets[c + 1]] = deps[p:p + state[c, C_DEP_LEN]]
    return offsets, flat


# -- the Python side ----------------------------------------------------------------------------

class JitGraph:
    """What the compiled builder found for one request (before pruning)."""

    def __init__(self, plan: JitPlan, num_in: int, num_out: int, distance: int,
                 state: np.ndarray, deps: np.ndarray, raw: np.ndarray,
                 edge_src: np.ndarray) -> None:
        self.plan = plan
        self.num_in = num_in
        self.num_out = num_out
        self.distance = distance
        self.state = state
        self.deps = deps
        self.raw = raw
        # Edge k: edge_src[k] depends on deps[k] (they are appended together).
        self.edge_src = edge_src

    def __len__(self) -> int:
        return len(self.state)

    @property
    def computable(self) -> np.ndarray:
        return self.state[:, C_COMP]

    def graph_arrays(self) -> "Any":
        """The unpruned graph as GraphArrays (dependencies sorted, unique)."""
        s = self.state
        offsets, flat = _gather_deps(s, self.deps)
        return GraphArrays(s[:, C_NODE].copy(), s[:, C_N].copy(), s[:, C_T].copy(),
                           s[:, C_X].copy(), s[:, C_IS_INPUT] != 0, offsets, flat)

    def depend_on_this(self) -> list[list[int]]:
        """Per cindex_id, who depends on it, in the order they were added."""
        num = len(self.state)
        edge_dst = self.deps[:len(self.edge_src)]
        order = np.argsort(edge_dst, kind="stable")
        src = self.edge_src[order].tolist()
        bounds = np.zeros(num + 1, dtype=_I64)
        np.cumsum(np.bincount(edge_dst, minlength=num), out=bounds[1:])
        b = bounds.tolist()
        return [src[b[i]:b[i + 1]] for i in range(num)]

    def state_lists(self) -> tuple[list[int], list[int], list[bool], list[bool], list[list[int]]]:
        """The builder's per-cindex lists: computable, usable_count, queued,
        dependencies_computed, depend_on_this."""
        s = self.state
        return (s[:, C_COMP].tolist(), s[:, C_USABLE].tolist(), (s[:, C_QUEUED] != 0).tolist(),
                (s[:, C_DEPS_DONE] != 0).tolist(), self.depend_on_this())

    def computable_info(self, request: Any) -> list[list[bool]]:
        """Per requested output, whether each Index is computable (the
        outputs are the cindex_ids after the inputs, in request order)."""
        flags = (self.computable[self.num_in:self.num_in + self.num_out]
                 == _COMPUTABLE).tolist()
        ans, pos = [], 0
        for io in request.outputs:
            ans.append(flags[pos:pos + len(io.indexes)])
            pos += len(io.indexes)
        return ans

    def all_outputs_are_computable(self) -> bool:
        s = self.state
        is_out = self.plan.is_output[s[:, C_NODE]]
        return bool((s[is_out, C_COMP] == _COMPUTABLE).all())

    def prune(self) -> "Any | None":
        """The pruned graph as GraphArrays, or None where Prune() would fail."""
        p = self.plan
        status, keep, offsets, flat, num_flat = _prune(self.state, self.deps, self.raw, p.kind,
                                             p.is_output, p.prog_start, p.prog_len, p.prog,
                                             p.range_spec)
        if status != OK:
            return None
        s = self.state[keep]
        return GraphArrays(s[:, C_NODE].copy(), s[:, C_N].copy(), s[:, C_T].copy(),
                           s[:, C_X].copy(), s[:, C_IS_INPUT] != 0, offsets,
                           flat[:num_flat].copy())


def build_graph_jit(plan: JitPlan, nnet: "Nnet", request: Any,
                    max_distance: int = 10000) -> JitGraph | None:
    """Kaldi's ComputeComputationGraph for ``request`` on an empty graph, or
    None when the Python algorithm must run instead (it raises the errors)."""
    from ...nnet.index import index_columns

    nodes, cols = [], []
    num_in = num_out = 0
    for is_output, ios in ((False, request.inputs), (True, request.outputs)):
        for io in ios:
            node = nnet.get_node_index(io.name)
            if node == -1:
                return None
            if not is_output and plan.kind[node] not in (NK_INPUT, NK_COMPONENT):
                return None
            rows = index_columns(io.indexes)
            nodes.append(np.full(len(rows), node, dtype=_I64))
            cols.append(rows)
            if is_output:
                num_out += len(rows)
            else:
                num_in += len(rows)
    if num_in == 0 or num_out == 0:
        return None
    rows = np.concatenate(cols)
    if rows.min() < INT32_MIN or rows.max() > INT32_MAX:
        return None
    init_node = np.concatenate(nodes)
    (status, count, distance, num_deps, num_raw, num_edges, state, deps, raw,
     edge_src) = _build(
        init_node, np.ascontiguousarray(rows[:, 0]), np.ascontiguousarray(rows[:, 1]),
        np.ascontiguousarray(rows[:, 2]), num_in, max_distance, plan.kind, plan.needs_time,
        plan.term_start,
        plan.term_count, plan.term_root, plan.fwd, plan.switch_table, plan.prog_start,
        plan.prog_len, plan.prog, plan.range_spec, plan.max_deps)
    if status != OK:
        return None
    return JitGraph(plan, num_in, num_out, distance, state[:count], deps[:num_deps],
                    raw[:num_raw], edge_src[:num_edges])
