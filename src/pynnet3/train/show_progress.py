"""The body of Kaldi's nnet3-show-progress: how the objective changes between
two networks, attributed to components, and the size of the parameter change.

Along the straight line from ``nnet1`` to ``nnet2`` (cut into
``num_segments`` pieces) the gradient of the objective is computed at each
piece's midpoint; its dot products with the two networks' parameters give,
per component, the first-order estimate of the objective change.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .. import log
from ..compile.graph.context import is_simple_nnet, nnet_info
from ..errors import PynnetError
from ..nnet.components.base import fmt_g
from .diagnostics import NnetComputeProb, NnetComputeProbOptions
from .nnet_update import (add_nnet, component_dot_products, num_updatable_components,
                          print_vector_per_updatable_component, scale_nnet)

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet
    from .egs import NnetExample

F32 = np.float32

__all__ = ["show_progress"]


def _objf_change(nnet1: "Nnet", nnet2: "Nnet", examples: Sequence["NnetExample"],
                 num_segments: int, opts: NnetComputeProbOptions) -> np.ndarray:
    diff = np.zeros(num_updatable_components(nnet1), dtype=F32)
    for s in range(num_segments):
        start, end = s / num_segments, (s + 1) / num_segments
        middle = 0.5 * (start + end)
        interp = copy.deepcopy(nnet2)
        scale_nnet(middle, interp)
        add_nnet(nnet1, 1.0 - middle, interp)
        prob = NnetComputeProb(opts, interp, backend="reference")
        for eg in examples:
            prob.compute(eg)
        info = prob.get_objective("output")
        if info is None:
            raise PynnetError("no objective for 'output' (the examples have no 'output')")
        objf_per_frame = info.tot_objective / info.tot_weight
        prob.print_total_stats()
        gradient = prob.get_deriv()
        log.log(f"At position {fmt_g(middle)}, objf per frame is {fmt_g(objf_per_frame)}")
        old = component_dot_products(gradient, nnet1) * F32(1.0 / info.tot_weight)
        new = component_dot_products(gradient, nnet2) * F32(1.0 / info.tot_weight)
        diff = (diff + F32(1.0 / num_segments) * new - F32(1.0 / num_segments) * old).astype(F32)
        log.vlog(1, f"By segment {s}, objf change is "
                    + print_vector_per_updatable_component(nnet1, diff))
        # Kaldi's segment-local NnetComputeProb logs its compiler's timing as it is destroyed.
        log.log(prob.compiler.timing_summary())
    return diff


def show_progress(nnet1: "Nnet", nnet2: "Nnet", examples: Sequence["NnetExample"] | None,
                  num_segments: int = 1, opts: NnetComputeProbOptions | None = None) -> None:
    """Log what nnet3-show-progress logs.  ``examples`` may be None (then only
    the parameter differences are shown)."""
    if nnet1.num_parameters() != nnet2.num_parameters():
        log.warn("Parameter-dim mismatch, cannot show progress.")
        return
    if opts is None:
        opts = NnetComputeProbOptions()
    opts.compute_deriv = True
    if examples is not None and is_simple_nnet(nnet1):
        if not examples:
            raise PynnetError("No examples read.")
        diff = _objf_change(nnet1, nnet2, examples, num_segments, opts)
        log.log("Total objf change per component is "
                + print_vector_per_updatable_component(nnet1, diff))
    diff_nnet = copy.deepcopy(nnet1)
    add_nnet(nnet2, -1.0, diff_nnet)
    if log.verbose_level() >= 1:
        log.vlog(1, "Printing info for the difference between the neural nets: "
                    + nnet_info(diff_nnet))
    dot_prod = np.sqrt(component_dot_products(diff_nnet, diff_nnet)).astype(F32)
    log.log("Parameter differences per layer are "
            + print_vector_per_updatable_component(nnet1, dot_prod))
    baseline = np.sqrt(component_dot_products(nnet1, nnet1)).astype(F32)
    new_prod = np.sqrt(component_dot_products(nnet2, nnet2)).astype(F32)
    log.log("Norms of parameter matrices from <new-nnet-in> are "
            + print_vector_per_updatable_component(nnet2, new_prod))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = (dot_prod / baseline).astype(F32)
    log.log("Relative parameter differences per layer are "
            + print_vector_per_updatable_component(nnet1, rel))
