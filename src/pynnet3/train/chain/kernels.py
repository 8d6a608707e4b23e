"""Numba CPU kernels of the chain forward-backward computations.

Denominator (Kaldi's DenominatorComputation, chain-denominator.cc): the
leaky-HMM forward-backward over den.fst for all sequences of a minibatch at
once.  Layouts follow Kaldi's so that the arithmetic is the same:

* ``probs``: exp of the clamped network output, transposed:
  ``(num_pdfs, T * S)``, column ``t * S + s`` (S sequences, T frames);
* ``alpha``: ``(T + 1, (H + 1) * S)``: for each frame the alpha-dash of state
  ``h`` and sequence ``s`` at ``h * S + s``, and in the last S columns the
  alpha sums (the inverse "arbitrary scales" of the next frame);
* ``beta``: two such rows, used alternately;
* the innermost loops run over the sequences (contiguous), so each arc of
  the graph is one vectorised pass over S values: the loops read and write
  1-d slices (row views), and the backward pass computes an arc's products
  into a small buffer before adding them to the two sums, so that LLVM
  vectorises them (about 2x faster than element indexing into the 2-d
  arrays; each element's arithmetic, and so the result, is unchanged).

Values are stored in float32 and sums over arcs accumulated in float64, as
Kaldi's CPU code does (its products are float, its accumulators double).

Numerator (Kaldi's NumeratorComputation, chain-numerator.cc): a log-space
forward-backward in float64 over the merged supervision FST, whose states are
in time order (the FST of all sequences of the minibatch one after another).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...numba_cache import ensure_numba_cache

ensure_numba_cache()

__all__ = ["den_forward", "den_backward", "num_forward", "num_backward", "log_add"]

_MIN_LOG_DIFF_DOUBLE = math.log(np.finfo(np.float64).eps)


@njit(cache=True)
def _alpha_dash(alpha_row, init, leaky, H, S):
    # alpha sums (float, states in order), then alpha += leaky * init[h] * sum[s]
    base = H * S
    sums = alpha_row[base:base + S]
    for s in range(S):
        sums[s] = np.float32(0.0)
    for h in range(H):
        row = alpha_row[h * S:h * S + S]
        for s in range(S):
            sums[s] += row[s]
    for h in range(H):
        row = alpha_row[h * S:h * S + S]
        f = np.float32(leaky * init[h])
        for s in range(S):
            row[s] += f * sums[s]


@njit(cache=True)
def den_forward(probs, bwd_begin, bwd_prob, bwd_pdf, bwd_state, init, leaky, S, T, alpha):
    """Fills ``alpha`` (see the module doc); returns the per-sequence total
    probabilities (float32, before the arbitrary-scale correction)."""
    H = init.shape[0]
    tmp = np.zeros(S, np.float64)
    scale = np.empty(S, np.float32)
    for h in range(H):
        for s in range(S):
            alpha[0, h * S + s] = init[h]
    _alpha_dash(alpha[0], init, leaky, H, S)
    for t in range(1, T + 1):
        prev = alpha[t - 1]
        cur = alpha[t]
        pcol = (t - 1) * S
        psum = prev[H * S:H * S + S]
        for s in range(S):
            scale[s] = np.float32(1.0 / psum[s])
        for h in range(H):
            for s in range(S):
                tmp[s] = 0.0
            for a in range(bwd_begin[h], bwd_begin[h + 1]):
                tp = bwd_prob[a]
                pr = probs[bwd_pdf[a], pcol:pcol + S]
                poff = bwd_state[a] * S
                pv = prev[poff:poff + S]
                for s in range(S):
                    tmp[s] += (pv[s] * tp) * pr[s]
            crow = cur[h * S:h * S + S]
            for s in range(S):
                crow[s] = np.float32(tmp[s] * scale[s])
        _alpha_dash(cur, init, leaky, H, S)
    tot_prob = np.zeros(S, np.float32)
    last = alpha[T]
    for h in range(H):
        for s in range(S):
            tot_prob[s] += last[h * S + s]
    return tot_prob


@njit(cache=True)
def _beta(beta_row, init, leaky, H, S):
    # beta-dash -> beta: add leaky * sum_h beta_dash[h] init[h] to every state
    base = H * S
    for s in range(S):
        acc = np.float32(0.0)
        for h in range(H):
            acc += beta_row[h * S + s] * init[h]
        beta_row[base + s] = np.float32(leaky * acc)
    sums = beta_row[base:base + S]
    for h in range(H):
        row = beta_row[h * S:h * S + S]
        for s in range(S):
            row[s] += sums[s]


@njit(cache=True)
def den_backward(probs, fwd_begin, fwd_prob, fwd_pdf, fwd_state, init, leaky, S, T, alpha,
                 tot_prob, deriv_t, beta):
    """Adds the denominator occupation probabilities into ``deriv_t`` (shape
    of ``probs``).  Returns (alpha-beta product, derivative sum) of frame 0,
    which should both be S (Kaldi's BetaGeneralFrameDebug)."""
    H = init.shape[0]
    tmp = np.zeros(S, np.float64)
    occ = np.zeros(S, np.float32)
    vfs = np.zeros(S, np.float32)
    last = beta[T % 2]
    for s in range(S):
        v = np.float32(1.0 / tot_prob[s])
        for h in range(H):
            last[h * S + s] = v
    _beta(last, init, leaky, H, S)
    ab_product = 0.0
    deriv_sum = 0.0
    for t in range(T - 1, -1, -1):
        a_row = alpha[t]
        nb = beta[(t + 1) % 2]
        cur = beta[t % 2]
        col = t * S
        asum = a_row[H * S:H * S + S]
        for h in range(H):
            arow = a_row[h * S:h * S + S]
            for s in range(S):
                tmp[s] = 0.0
                occ[s] = arow[s] / asum[s]
            for a in range(fwd_begin[h], fwd_begin[h + 1]):
                tp = fwd_prob[a]
                pdf = fwd_pdf[a]
                noff = fwd_state[a] * S
                nv = nb[noff:noff + S]
                pr = probs[pdf, col:col + S]
                dr = deriv_t[pdf, col:col + S]
                for s in range(S):
                    vfs[s] = (tp * nv[s]) * pr[s]
                for s in range(S):
                    tmp[s] += vfs[s]
                for s in range(S):
                    dr[s] += vfs[s] * occ[s]
            crow = cur[h * S:h * S + S]
            for s in range(S):
                crow[s] = np.float32(tmp[s] / asum[s])
        if t == 0:
            for i in range(H * S):
                ab_product += np.float64(a_row[i]) * np.float64(cur[i])
            for p in range(deriv_t.shape[0]):
                for s in range(S):
                    deriv_sum += deriv_t[p, s]
        _beta(cur, init, leaky, H, S)
    return ab_product, deriv_sum


@njit(cache=True)
def log_add(x, y):
    """Kaldi's LogAdd in double."""
    if x < y:
        x, y = y, x
    diff = y - x
    if diff >= _MIN_LOG_DIFF_DOUBLE:
        return x + math.log1p(math.exp(diff))
    return x


@njit(cache=True)
def _row_index(t, frames_per_sequence, num_sequences):
    return (t % frames_per_sequence) * num_sequences + t // frames_per_sequence


@njit(cache=True)
def num_forward(arc_begin, ilabel, weight, nextstate, final, state_times, output,
                frames_per_sequence, num_sequences, log_alpha):
    """Fills ``log_alpha`` (float64 per state); returns the total log-prob
    (float64; -inf if no path)."""
    n = final.shape[0]
    for i in range(n):
        log_alpha[i] = -np.inf
    log_alpha[0] = 0.0
    tot = -np.inf
    for state in range(n):
        this_alpha = log_alpha[state]
        row = _row_index(state_times[state], frames_per_sequence, num_sequences)
        for a in range(arc_begin[state], arc_begin[state + 1]):
            like = output[row, ilabel[a] - 1] + (-weight[a])
            nxt = nextstate[a]
            log_alpha[nxt] = log_add(log_alpha[nxt], like + this_alpha)
        if final[state] != np.inf:
            tot = log_add(tot, this_alpha + (-final[state]))
    return tot


@njit(cache=True)
def num_backward(arc_begin, ilabel, weight, nextstate, final, state_times, output,
                 frames_per_sequence, num_sequences, log_alpha, tot_log_prob, log_beta,
                 post):
    """Adds the numerator occupation probabilities into ``post`` (float32,
    shape of ``output``); returns the backward total log-prob."""
    n = final.shape[0]
    for state in range(n - 1, -1, -1):
        this_beta = -np.float64(final[state])
        this_alpha = log_alpha[state]
        row = _row_index(state_times[state], frames_per_sequence, num_sequences)
        for a in range(arc_begin[state], arc_begin[state + 1]):
            pdf = ilabel[a] - 1
            like = output[row, pdf] + (-weight[a])
            next_beta = log_beta[nextstate[a]]
            this_beta = log_add(this_beta, like + next_beta)
            occ_logprob = np.float32(this_alpha + like + next_beta - tot_log_prob)
            post[row, pdf] += np.float32(math.exp(occ_logprob))
        log_beta[state] = this_beta
    return log_beta[0]


@njit(cache=True)
def state_times(arc_begin, nextstate, times):
    """Times of the states of a topologically sorted, epsilon-free FST
    (``times`` filled, -1 where unreachable).  Returns 0, or 1 if the paths
    have different lengths, 2 if a state is not reachable."""
    n = times.shape[0]
    for i in range(n):
        times[i] = -1
    times[0] = 0
    for state in range(n):
        t = times[state]
        if t < 0:
            return 2
        for a in range(arc_begin[state], arc_begin[state + 1]):
            nxt = nextstate[a]
            if times[nxt] >= 0 and times[nxt] != t + 1:
                return 1
            times[nxt] = t + 1
    return 0
