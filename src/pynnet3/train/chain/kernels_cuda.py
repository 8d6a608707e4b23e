"""Numba CUDA kernels of the chain denominator forward-backward (the same
recursions and layouts as :mod:`.kernels`; Kaldi's cuda_chain_hmm_forward /
cuda_chain_hmm_backward of chain-kernels.cu do the same work).

One thread per (sequence, HMM state): x covers the sequences, y the states
(looping with the grid's stride, so any graph size works).  A frame's alpha
(or beta) is a gather over the arcs entering (leaving) the state; the
occupation probabilities go into the per-pdf derivative with atomic adds, so
their summation order (and last bits) may differ from the CPU kernels'.  The
per-frame sums over states run one thread per sequence, in state order.

The numerator stays on the CPU, as in Kaldi (its NumeratorComputation is CPU
code whose result is copied to the GPU): it is a short sequential recursion
over a small FST per minibatch.

Under the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) everything runs in Python;
the tests use small graphs there.
"""
from __future__ import annotations

import numpy as np
from numba import cuda, float32, float64

from ...numba_cache import ensure_numba_cache

ensure_numba_cache()

__all__ = ["den_forward_backward_cuda"]

_SIMULATOR = bool(getattr(__import__("numba.core.config", fromlist=["x"]), "ENABLE_CUDASIM", 0))
_BLOCK = (4, 4) if _SIMULATOR else (32, 8)
_BLOCK1 = 8 if _SIMULATOR else 128
_MAX_GRID_Y = 65535


@cuda.jit(cache=True)
def _k_alpha_frame(probs, bwd_begin, bwd_prob, bwd_pdf, bwd_state, prev, cur, S, H, pcol):
    s, h0 = cuda.grid(2)
    sh = cuda.gridsize(2)[1]
    if s >= S:
        return
    inv = prev[H * S + s]
    for h in range(h0, H, sh):
        acc = float64(0.0)
        for a in range(bwd_begin[h], bwd_begin[h + 1]):
            acc += (prev[bwd_state[a] * S + s] * bwd_prob[a]) * probs[bwd_pdf[a], pcol + s]
        scale = float32(1.0 / inv)
        cur[h * S + s] = float32(acc * scale)


@cuda.jit(cache=True)
def _k_alpha_sums(row, H, S, sums_t):
    s = cuda.grid(1)
    if s >= S:
        return
    acc = float32(0.0)
    for h in range(H):
        acc += row[h * S + s]
    row[H * S + s] = acc
    sums_t[s] = acc


@cuda.jit(cache=True)
def _k_add_leaky(row, init, leaky, H, S, use_init):
    # row[h, s] += (leaky * init[h] if use_init else 1) * row[H, s]
    s, h0 = cuda.grid(2)
    sh = cuda.gridsize(2)[1]
    if s >= S:
        return
    v = row[H * S + s]
    for h in range(h0, H, sh):
        f = float32(leaky * init[h]) if use_init else float32(1.0)
        row[h * S + s] += f * v


@cuda.jit(cache=True)
def _k_tot_prob(row, H, S, out):
    s = cuda.grid(1)
    if s >= S:
        return
    acc = float32(0.0)
    for h in range(H):
        acc += row[h * S + s]
    out[s] = acc


@cuda.jit(cache=True)
def _k_beta_last(row, tot_prob, H, S):
    s, h0 = cuda.grid(2)
    sh = cuda.gridsize(2)[1]
    if s >= S:
        return
    v = float32(1.0 / tot_prob[s])
    for h in range(h0, H, sh):
        row[h * S + s] = v


@cuda.jit(cache=True)
def _k_beta_sums(row, init, leaky, H, S):
    s = cuda.grid(1)
    if s >= S:
        return
    acc = float32(0.0)
    for h in range(H):
        acc += row[h * S + s] * init[h]
    row[H * S + s] = float32(leaky * acc)


@cuda.jit(cache=True)
def _k_beta_frame(probs, fwd_begin, fwd_prob, fwd_pdf, fwd_state, a_row, nb, cur, deriv_t,
                  S, H, col):
    s, h0 = cuda.grid(2)
    sh = cuda.gridsize(2)[1]
    if s >= S:
        return
    inv = a_row[H * S + s]
    for h in range(h0, H, sh):
        occ = a_row[h * S + s] / inv
        acc = float64(0.0)
        for a in range(fwd_begin[h], fwd_begin[h + 1]):
            pdf = fwd_pdf[a]
            vf = (fwd_prob[a] * nb[fwd_state[a] * S + s]) * probs[pdf, col + s]
            acc += vf
            cuda.atomic.add(deriv_t, (pdf, col + s), vf * occ)
        cur[h * S + s] = float32(acc / inv)


def _grid2(S: int, H: int) -> tuple[tuple[int, int], tuple[int, int]]:
    bx, by = _BLOCK
    return ((S + bx - 1) // bx, min((H + by - 1) // by, _MAX_GRID_Y)), (bx, by)


def den_forward_backward_cuda(probs: np.ndarray, graph, leaky: np.float32, S: int, T: int,
                              want_deriv: bool):
    """The denominator on the GPU: (tot_prob (S,), alpha sums (T+1, S), and
    with ``want_deriv``: the occupation probabilities (shape of ``probs``),
    the frame-0 alpha-beta product and derivative sum; else None x 3)."""
    H = graph.num_states
    d_probs = cuda.to_device(np.ascontiguousarray(probs, np.float32))
    arrays = {k: cuda.to_device(getattr(graph, k)) for k in (
        "fwd_begin", "fwd_prob", "fwd_pdf", "fwd_state", "bwd_begin", "bwd_prob", "bwd_pdf",
        "bwd_state", "initial_probs")}
    init = arrays["initial_probs"]
    width = (H + 1) * S
    alpha0 = np.zeros((T + 1, width), np.float32)
    alpha0[0, :H * S] = np.repeat(graph.initial_probs, S)
    d_alpha = cuda.to_device(alpha0)
    d_sums = cuda.device_array((T + 1, S), np.float32)
    g2, b2 = _grid2(S, H)
    g1 = (S + _BLOCK1 - 1) // _BLOCK1
    leaky = np.float32(leaky)

    def dash(t: int) -> None:
        _k_alpha_sums[g1, _BLOCK1](d_alpha[t], H, S, d_sums[t])
        _k_add_leaky[g2, b2](d_alpha[t], init, leaky, H, S, True)

    dash(0)
    for t in range(1, T + 1):
        _k_alpha_frame[g2, b2](d_probs, arrays["bwd_begin"], arrays["bwd_prob"],
                               arrays["bwd_pdf"], arrays["bwd_state"], d_alpha[t - 1],
                               d_alpha[t], S, H, (t - 1) * S)
        dash(t)
    d_tot = cuda.device_array(S, np.float32)
    _k_tot_prob[g1, _BLOCK1](d_alpha[T], H, S, d_tot)
    tot_prob = d_tot.copy_to_host()
    sums = d_sums.copy_to_host()
    if not want_deriv:
        return tot_prob, sums, None, None, None
    d_beta = cuda.device_array((2, width), np.float32)
    d_deriv = cuda.to_device(np.zeros_like(probs, dtype=np.float32))

    def beta(row) -> None:
        _k_beta_sums[g1, _BLOCK1](row, init, leaky, H, S)
        _k_add_leaky[g2, b2](row, init, leaky, H, S, False)

    _k_beta_last[g2, b2](d_beta[T % 2], d_tot, H, S)
    beta(d_beta[T % 2])
    ab = 0.0
    for t in range(T - 1, -1, -1):
        _k_beta_frame[g2, b2](d_probs, arrays["fwd_begin"], arrays["fwd_prob"],
                              arrays["fwd_pdf"], arrays["fwd_state"], d_alpha[t],
                              d_beta[(t + 1) % 2], d_beta[t % 2], d_deriv, S, H, t * S)
        if t == 0:
            a0 = d_alpha[0].copy_to_host()[:H * S].astype(np.float64)
            b0 = d_beta[0].copy_to_host()[:H * S].astype(np.float64)
            ab = float(np.dot(a0, b0))
        beta(d_beta[t % 2])
    deriv_t = d_deriv.copy_to_host()
    return tot_prob, sums, deriv_t, ab, float(deriv_t[:, :S].astype(np.float64).sum())
