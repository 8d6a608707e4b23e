"""The orthonormal constraint of factorized layers (Kaldi's ConstrainOrthonormal
and ConstrainOrthonormalInternal, nnet-utils.cc).

After each minibatch the trainer nudges the linear parameters M of every
LinearComponent, AffineComponent (and subclasses) and TdnnComponent whose
``orthonormal_constraint`` is nonzero towards ``scale`` times a matrix with
orthonormal rows (columns, if M has more rows than columns): one step of
M <- M - 4 nu / scale^2 (M M^T - scale^2 I) M with nu = 1/8 (the TDNN-F
paper, Sec. 2.2).  A negative constraint lets the scale float: it is chosen
so that the step is orthogonal to M (Sec. 2.3), and the step is slowed down
when M is far from the constraint.  To save time each component is
processed on about one minibatch in four, chosen at random.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .. import log
from ..errors import NumericalError
from ..nnet.components.affine import AffineComponent, LinearComponent
from ..nnet.components.tdnn import TdnnComponent
from ..nnet.components.base import rng

F32 = np.float32

# How fast M approaches the constraint; 1/8 converges quadratically near it.
UPDATE_SPEED = 0.125


def constrain_orthonormal_internal(scale: float, component_name: str, M: np.ndarray) -> None:
    """One step moving ``M`` (rows <= cols, float32, updated in place) towards
    ``scale`` times a matrix with orthonormal rows; ``scale < 0`` = floating."""
    if scale == 0.0:
        raise ValueError("constrain_orthonormal_internal: scale must be nonzero")
    P = (M @ M.T).astype(F32)
    update_speed = UPDATE_SPEED
    if scale < 0.0:
        # scale^2 = tr(P P) / tr(P) makes the change orthogonal to M.
        trace_p = float(np.trace(P.astype(np.float64)))
        trace_p_p = float(np.sum(P.astype(np.float64) ** 2))
        if trace_p < 1.0e-15:
            return       # an (almost) all-zero matrix, e.g. an unused component
        scale = math.sqrt(trace_p_p / trace_p)
        # ratio >= 1 measures how unequal the eigenvalues of P are; far from
        # convergence the step is slowed down to avoid divergence.
        ratio = trace_p_p * P.shape[0] / (trace_p * trace_p)
        if not ratio > 0.99:
            log.warn(f"Ratio is {ratio} (should be >= 1.0); component is {component_name}")
            if not ratio > 0.9:
                raise NumericalError(f"orthonormal constraint: ratio {ratio} for "
                                      f"component {component_name}")
        if ratio > 1.02:
            log.warn(f"Ratio is {ratio}, multiplying update speed (currently "
                     f"{update_speed}) by 0.5; component is {component_name}")
            update_speed *= 0.5
            if ratio > 1.1:
                update_speed *= 0.5
    P[np.diag_indices_from(P)] -= F32(scale * scale)      # now Q = P - scale^2 I
    if log.verbose_level() >= 2:
        log.vlog(2, f"Error in orthogonality is {float(np.linalg.norm(P))}")
    alpha = update_speed / (scale * scale)
    M += F32(-4.0 * alpha) * (P @ M)


def _constrained_params(comp) -> tuple[float, np.ndarray] | None:
    """(constraint, parameter matrix) of a component the constraint applies to."""
    if isinstance(comp, LinearComponent) and comp.orthonormal_constraint != 0.0:
        return comp.orthonormal_constraint, comp.params
    if isinstance(comp, (AffineComponent, TdnnComponent)) and comp.orthonormal_constraint != 0.0:
        return comp.orthonormal_constraint, comp.linear_params
    return None


def constrain_orthonormal(nnet, rand_int: Callable[[int, int], int] | None = None) -> None:
    """Kaldi's ConstrainOrthonormal: apply the constraint to every component
    that has one, each with probability 1/4.

    ``rand_int(lo, hi)`` draws the uniform integer deciding that (Kaldi's
    RandInt, i.e. glibc rand(); pass ``GlibcRand(seed).rand_int`` from
    :mod:`pynnet3.train.kaldi_random` to follow nnet3-train's draws); by
    default the component RNG is used.
    """
    if rand_int is None:
        def rand_int(lo: int, hi: int) -> int:
            return int(rng().integers(lo, hi + 1))
    for c in range(nnet.num_components()):
        found = _constrained_params(nnet.get_component(c))
        # The random draw happens only for constrained components (Kaldi
        # short-circuits the RandInt call otherwise).
        if found is None or rand_int(0, 3) != 0:
            continue
        constraint, params = found
        name = nnet.component_names[c]
        if params.shape[0] <= params.shape[1]:
            constrain_orthonormal_internal(constraint, name, params)
        else:
            transposed = np.ascontiguousarray(params.T)
            constrain_orthonormal_internal(constraint, name, transposed)
            params[...] = transposed.T
