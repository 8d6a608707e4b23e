"""Whole-network operations of training (the training half of Kaldi's
nnet-utils.cc): adding networks, max-change, l2 regularization, batch-norm
statistics, natural-gradient freezing, and GetNumNvalues.

A "delta" network (Kaldi's ``delta_nnet``) is a copy of the network scaled to
zero; backprop adds ``learning_rate * gradient`` into its parameters, and
:func:`update_nnet_with_max_change` adds it, clipped, to the real network.

The arithmetic follows Kaldi's: the per-component norms, scale factors and
the global norm are BaseFloat (float32) values, so that the clipping factors
(and the LOG lines that print them) agree with Kaldi's to float precision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from .. import log
from ..errors import PynnetError
from ..nnet.components.base import Component, Prop, UpdatableComponent, fmt_g

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet
    from .egs import NnetIo

F32 = np.float32

__all__ = ["num_updatable_components", "zero_component_stats", "scale_nnet", "add_nnet",
           "add_nnet_components", "component_dot_products", "dot_product",
           "set_nnet_as_gradient", "freeze_natural_gradient", "scale_batchnorm_stats",
           "reset_generators", "apply_l2_regularization", "get_num_nvalues", "MaxChangeStats",
           "update_nnet_with_max_change", "change_limits_set",
           "print_vector_per_updatable_component",
           "consolidate_memory"]


_UPDATABLE = int(Prop.UPDATABLE)   # a plain int: IntFlag '&' is slow, and this runs
#                                   for every component several times a minibatch


def _updatable(comp: Component) -> bool:
    return bool(comp.properties() & _UPDATABLE)


def _as_updatable(comp: Component) -> UpdatableComponent:
    if not isinstance(comp, UpdatableComponent):
        raise PynnetError(f"Updatable component {comp.type_name} does not inherit from "
                          "UpdatableComponent")
    return comp


def _dot(a: Component, b: Component) -> float:
    dp = getattr(a, "dot_product", None)
    if dp is None:
        raise PynnetError(f"{a.type_name} has no dot_product")
    return float(dp(b))


def num_updatable_components(nnet: "Nnet") -> int:
    return sum(1 for comp in nnet.components if _updatable(comp))


def zero_component_stats(nnet: "Nnet") -> None:
    """Kaldi's ZeroComponentStats (a no-op for components without stats)."""
    for comp in nnet.components:
        comp.zero_stats()


def scale_nnet(scale: float, nnet: "Nnet") -> None:
    """Kaldi's ScaleNnet: parameters and stored stats of every component;
    scale 0 sets them to zero (so NaNs and infs disappear)."""
    if scale == 1.0:
        return
    for comp in nnet.components:
        comp.scale(scale)


def _check_same_size(src: "Nnet", dest: "Nnet") -> None:
    if src.num_components() != dest.num_components():
        raise PynnetError("Trying to add incompatible nnets.")


def add_nnet(src: "Nnet", alpha: float, dest: "Nnet") -> None:
    """Kaldi's AddNnet: dest += alpha * src, component by component (stats too)."""
    _check_same_size(src, dest)
    for s, d in zip(src.components, dest.components):
        d.add(alpha, s)


def add_nnet_components(src: "Nnet", alphas: Sequence[float], scale: float,
                        dest: "Nnet") -> None:
    """Kaldi's AddNnetComponents: updatable component i (in order) is added
    with ``alphas[i]``, every other component (its stats) with ``scale``."""
    _check_same_size(src, dest)
    i = 0
    for s, d in zip(src.components, dest.components):
        if _updatable(s):
            _as_updatable(s)
            _as_updatable(d)
            if i >= len(alphas):
                raise PynnetError("add_nnet_components: too few alphas")
            d.add(float(alphas[i]), s)
            i += 1
        else:
            d.add(scale, s)
    if i != len(alphas):
        raise PynnetError(f"add_nnet_components: {len(alphas)} alphas for {i} updatable "
                          "components")


def component_dot_products(nnet1: "Nnet", nnet2: "Nnet") -> np.ndarray:
    """Kaldi's ComponentDotProducts: one dot product per updatable component."""
    _check_same_size(nnet1, nnet2)
    return np.array([_dot(a, b) for a, b in zip(nnet1.components, nnet2.components)
                     if _updatable(a)], dtype=F32)


def dot_product(nnet1: "Nnet", nnet2: "Nnet") -> float:
    """Kaldi's DotProduct of two networks (sum over updatable components)."""
    return float(component_dot_products(nnet1, nnet2).astype(np.float64).sum())


def print_vector_per_updatable_component(nnet: "Nnet", vec: Sequence[float]) -> str:
    """Kaldi's PrintVectorPerUpdatableComponent: ``[ name:value name:value ]``."""
    names = [nnet.component_names[c] for c, comp in enumerate(nnet.components)
             if _updatable(comp)]
    if len(names) != len(vec):
        raise PynnetError("print_vector_per_updatable_component: wrong vector size")
    return "[ " + "".join(f"{n}:{fmt_g(F32(v))} " for n, v in zip(names, vec)) + "]"


def set_nnet_as_gradient(nnet: "Nnet") -> None:
    """Kaldi's SetNnetAsGradient: learning rate 1, is-gradient (plain SGD math)."""
    for comp in nnet.components:
        if _updatable(comp):
            comp.set_as_gradient()


def freeze_natural_gradient(freeze: bool, nnet: "Nnet") -> None:
    for comp in nnet.components:
        if _updatable(comp):
            f = getattr(comp, "freeze_natural_gradient", None)
            if f is not None:
                f(freeze)


def consolidate_memory(nnet: "Nnet") -> None:
    """Kaldi's ConsolidateMemory (GPU memory defragmentation; no-op here
    unless a component implements it)."""
    for comp in nnet.components:
        f = getattr(comp, "consolidate_memory", None)
        if f is not None:
            f()


def scale_batchnorm_stats(batchnorm_stats_scale: float, nnet: "Nnet") -> None:
    """Kaldi's ScaleBatchnormStats: decay the stored stats of BatchNorm layers
    so that the stats a model is written with are recent."""
    if not 0.0 <= batchnorm_stats_scale <= 1.0:
        raise PynnetError(f"batchnorm-stats-scale must be in [0, 1], got "
                          f"{batchnorm_stats_scale}")
    if batchnorm_stats_scale == 1.0:
        return
    for comp in nnet.components:
        if comp.type_name == "BatchNormComponent":
            comp.scale(batchnorm_stats_scale)


def reset_generators(nnet: "Nnet") -> None:
    """Kaldi's ResetGenerators (random components re-seed their generators)."""
    for comp in nnet.components:
        f = getattr(comp, "reset_generator", None)
        if f is not None:
            f()


def apply_l2_regularization(nnet: "Nnet", l2_regularize_scale: float,
                            delta_nnet: "Nnet") -> None:
    """Kaldi's ApplyL2Regularization: for each updatable component with
    learning rate eta and ``l2-regularize`` alpha (both read from the delta
    network), delta -= 2 * l2_regularize_scale * eta * alpha * params."""
    if l2_regularize_scale == 0.0:
        return
    for src, dest in zip(nnet.components, delta_nnet.components):
        if not _updatable(src):
            continue
        d = _as_updatable(dest)
        lrate, l2 = d.learning_rate, d.l2_regularize
        if lrate < 0 or l2 < 0:
            raise PynnetError("negative learning rate or l2-regularize")
        scale = F32(-2.0) * F32(l2_regularize_scale) * F32(lrate) * F32(l2)
        if scale != 0.0:
            d.add(float(scale), src)


def get_num_nvalues(io_list: "Sequence[NnetIo]", exhaustive: bool,
                    rand_int: Callable[[int, int], int] | None = None) -> int:
    """Kaldi's GetNumNvalues: the number of sequences (n values) of a
    minibatch, the same for every input and output.  The quick form assumes n
    runs from 0 to N-1 and reads the last Index; like Kaldi it cross-checks
    with the exhaustive form about once in 101 calls when ``rand_int`` is
    given (the draw keeps Kaldi's random stream in step)."""
    num_n_values = -1
    for io in io_list:
        idx = io.indexes
        if idx.shape[0] == 0:
            raise PynnetError("Empty input or output in ComputationRequest?")
        if exhaustive:
            n = idx[:, 0]
            this = int(n.max()) + 1 - int(n.min())
        else:
            this = int(idx[-1, 0]) + 1
        if num_n_values == -1:
            num_n_values = this
        elif num_n_values != this:
            raise PynnetError(f"Different inputs/outputs of ComputationRequest have different "
                              f"numbers of n values: {num_n_values} vs. {this}")
    if not exhaustive and rand_int is not None and rand_int(0, 100) == 0:
        check = get_num_nvalues(io_list, True)
        if check != num_n_values:
            raise PynnetError(f"Exhaustive and quick checks returned different answers: "
                              f"{num_n_values} vs. {check}")
    return num_n_values


@dataclass
class MaxChangeStats:
    """Kaldi's MaxChangeStats: how often each max-change was enforced."""

    num_max_change_global_applied: int = 0
    num_minibatches_processed: int = 0
    num_max_change_per_component_applied: list[int] = field(default_factory=list)

    @classmethod
    def for_nnet(cls, nnet: "Nnet") -> "MaxChangeStats":
        return cls(0, 0, [0] * num_updatable_components(nnet))

    def print(self, nnet: "Nnet") -> None:
        """The end-of-training LOG lines (only for limits that were hit)."""
        i = 0
        for c, comp in enumerate(nnet.components):
            if not _updatable(comp):
                continue
            if self.num_max_change_per_component_applied[i] > 0:
                pct = 100.0 * self.num_max_change_per_component_applied[i] / \
                    self.num_minibatches_processed
                log.log(f"For {nnet.component_names[c]}, per-component max-change was "
                        f"enforced {fmt_g(pct)} % of the time.")
            i += 1
        if self.num_max_change_global_applied > 0:
            pct = 100.0 * self.num_max_change_global_applied / self.num_minibatches_processed
            log.log(f"The global max-change was enforced {fmt_g(pct)} % of the time.")


def change_limits_set(nnet: "Nnet", max_param_change: float) -> bool:
    """Whether a parameter change may be limited: a ``--max-param-change``
    or some updatable component's ``max-change``."""
    return max_param_change != 0.0 or any(
        F32(_as_updatable(comp).max_change) != 0.0
        for comp in nnet.components if _updatable(comp))


def update_nnet_with_max_change(delta_nnet: "Nnet", max_param_change: float,
                                max_change_scale: float, scale: float, nnet: "Nnet",
                                stats: MaxChangeStats | None = None) -> bool:
    """Kaldi's UpdateNnetWithMaxChange: nnet += scale * delta_nnet, where each
    updatable component's change is first limited to its ``max-change``
    (times ``max_change_scale``) in Euclidean norm, and then the whole change
    to ``max_param_change`` (times ``max_change_scale``; 0 = no limit).
    Returns False, changing nothing, when the change is not finite."""
    if stats is None:
        stats = MaxChangeStats.for_nnet(delta_nnet)
    num_updatable = num_updatable_components(delta_nnet)
    if len(stats.num_max_change_per_component_applied) != num_updatable:
        stats.num_max_change_per_component_applied = [0] * num_updatable
    abs_scale = F32(abs(scale))
    mcs = F32(max_change_scale)
    scale_factors = np.ones(num_updatable, dtype=F32)
    param_delta_squared = F32(0.0)
    num_applied_this_minibatch = 0
    min_scale = F32(1.0)
    min_name = ""
    max_change_with_min_scale = 0.0
    # The norms of the changes decide nothing when no limit is set: every
    # factor is then 1 and nothing is logged, so they are not computed
    # (Kaldi computes them anyway; a change that is not finite is applied
    # either way).
    need_norms = change_limits_set(delta_nnet, max_param_change)
    i = 0
    for c, comp in enumerate(delta_nnet.components):
        if not _updatable(comp):
            continue
        uc = _as_updatable(comp)
        max_change_c = F32(uc.max_change)
        if max_change_c < 0:
            raise PynnetError(f"negative max-change in {delta_nnet.component_names[c]}")
        if not need_norms:
            i += 1
            continue
        dot_prod = F32(_dot(uc, uc))
        norm = F32(math.sqrt(dot_prod)) if dot_prod >= 0 else F32("nan")
        if max_change_c != 0.0 and F32(norm * abs_scale) > F32(max_change_c * mcs):
            scale_factors[i] = F32(max_change_c * mcs) / F32(norm * abs_scale)
            stats.num_max_change_per_component_applied[i] += 1
            num_applied_this_minibatch += 1
            log.vlog(2, f"Parameters in {delta_nnet.component_names[c]} change too big: "
                        f"{fmt_g(norm)} * {fmt_g(scale)} > max-change * max-change-scale="
                        f"{fmt_g(max_change_c)} * {fmt_g(max_change_scale)}, scaling by "
                        f"{fmt_g(scale_factors[i])}")
        if i == 0 or scale_factors[i] < min_scale:
            min_scale = scale_factors[i]
            min_name = delta_nnet.component_names[c]
            max_change_with_min_scale = float(max_change_c)
        param_delta_squared = F32(param_delta_squared
                                  + F32(scale_factors[i] * scale_factors[i]) * dot_prod)
        i += 1
    param_delta = F32(math.sqrt(param_delta_squared)) if param_delta_squared >= 0 \
        else F32("nan")
    param_delta = F32(param_delta * abs_scale)
    limit = F32(F32(max_param_change) * mcs)
    global_applied = False
    scale32 = F32(scale)
    if max_param_change != 0.0 and param_delta > limit:
        if not math.isfinite(param_delta):
            log.warn("Infinite parameter change, will not apply.")
            stats.num_minibatches_processed += 1
            return False
        scale32 = F32(scale32 * F32(limit / param_delta))
        stats.num_max_change_global_applied += 1
        global_applied = True
    if global_applied or min_scale < 1.0:
        parts = []
        if min_scale < 1.0:
            parts.append(f"Per-component max-change active on {num_applied_this_minibatch} / "
                         f"{num_updatable} Updatable Components. (Smallest factor="
                         f"{fmt_g(min_scale)} on {min_name} with max-change="
                         f"{fmt_g(max_change_with_min_scale)}). ")
        # Kaldi tests the unscaled condition here, so with --max-param-change=0
        # a per-component line also reports a global factor of 0.
        if param_delta > limit:
            parts.append(f"Global max-change factor was {fmt_g(F32(limit / param_delta))} "
                         f"with max-change={fmt_g(max_param_change)}.")
        log.log("".join(parts))
    alphas = (scale_factors * scale32).astype(F32)
    add_nnet_components(delta_nnet, [float(a) for a in alphas], float(scale32), nnet)
    stats.num_minibatches_processed += 1
    return True
