"""Single-process SGD training of an nnet3 network on merged examples
(Kaldi's NnetTrainer, nnet-training.{h,cc}).

For each minibatch (a merged NnetExample) :meth:`NnetTrainer.train`

1. builds the ComputationRequest of the example (model derivative wanted,
   component stats stored) and compiles it through the CachingCompiler;
2. runs the forward pass, computes the objective at every output node and
   hands its derivative back, runs the backward pass.  Backprop adds
   ``learning_rate * gradient`` (natural-gradient preconditioned where the
   component does that) into ``delta_nnet``, a zero-scaled copy of the
   network that also owns the natural-gradient state; statistics (batch-norm,
   nonlinearity stats) go into the network itself;
3. adds the l2-regularization term to ``delta_nnet``, adds ``delta_nnet`` to
   the network with per-component and global max-change (scaled by
   1 - momentum), decays the batch-norm stats, applies the orthonormal
   constraint, and scales ``delta_nnet`` by the momentum (0 by default), so
   that with momentum the next step includes part of this one.

When nothing in step 3 needs the change before it is applied (no
max-change of any kind, no momentum, no l2 regularization, no backstitch),
each component's update goes straight into the network instead
(:meth:`NnetTrainer.updates_in_place`), as a PyTorch optimizer step does:
that saves adding ``delta_nnet`` to the network and zeroing it again, two
passes over every parameter per minibatch, and gives the same model up to
float rounding (the product and the addition round once instead of twice).

Backstitch training (``backstitch_training_scale`` > 0) replaces step 2-3 on
every ``backstitch_training_interval``-th minibatch with a small step
against the gradient followed by a larger step along a new gradient.

Random draws that Kaldi makes with ``RandInt`` (glibc ``rand()``, seeded by
``--srand``) are drawn from :class:`~pynnet3.train.kaldi_random.GlibcRand` in
the same order where pynnet3 makes the same draws (the trainer's seed, the
GetNumNvalues check, the orthonormal constraint's 1-in-4 choice).
"""
from __future__ import annotations

import copy
import ctypes
import os
import sys
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import log
from ..cache import CachingCompiler, CachingCompilerOptions, default_optimize_options
from ..compute.computer import NnetComputeOptions, NnetComputer
from ..compile.computation import CommandType
from ..errors import PynnetError
from ..nnet.components.base import fmt_g, set_random_seed
from ..nnet.nnet import NodeType
from .cache_file import CacheLocation
from .eg_request import accept_example_inputs, get_computation_request
from .kaldi_random import GlibcRand
from .nnet_update import (MaxChangeStats, apply_l2_regularization, change_limits_set,
                          consolidate_memory, freeze_natural_gradient, get_num_nvalues,
                          reset_generators, scale_batchnorm_stats, scale_nnet,
                          update_nnet_with_max_change, zero_component_stats)
from .objective import compute_objective_function
from .orthonormal import constrain_orthonormal

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet
    from .egs import NnetExample

__all__ = ["NnetTrainerOptions", "NnetTrainer", "ObjectiveFunctionInfo"]


def _kaldi_compute_options() -> NnetComputeOptions:
    # Kaldi's CPU build skips the CompressMatrix commands of memory
    # compression; doing the same keeps results equal to a CPU Kaldi run.
    return NnetComputeOptions(compress_matrices=False)


@dataclass
class NnetTrainerOptions:
    """Kaldi's NnetTrainerOptions: same names (with underscores), same defaults."""

    zero_component_stats: bool = field(default=True, metadata={
        "flag": "zero-component-stats", "help": "If both this and --store-component-stats are "
        "true, then the component stats are zeroed before training."})
    store_component_stats: bool = field(default=True, metadata={
        "flag": "store-component-stats", "help": "If true, store activations and derivatives "
        "for nonlinear components during training."})
    print_interval: int = field(default=100, metadata={
        "flag": "print-interval", "help": "Interval (measured in minibatches) after which we "
        "print out objective function during training"})
    debug_computation: bool = False
    momentum: float = field(default=0.0, metadata={
        "flag": "momentum", "help": "Momentum constant to apply during training (help "
        "stabilize update).  e.g. 0.9.  Note: we automatically multiply the learning rate by "
        "(1-momentum) so that the 'effective' learning rate is the same as before (because "
        "momentum would normally increase the effective learning rate by 1/(1-momentum))"})
    l2_regularize_factor: float = field(default=1.0, metadata={
        "flag": "l2-regularize-factor", "help": "Factor that affects the strength of l2 "
        "regularization on model parameters.  The primary way to specify this type of l2 "
        "regularization is via the 'l2-regularize' configuration value at the config-file "
        "level.  --l2-regularize-factor will be multiplied by the component-level l2-regularize "
        "values and can be used to correct for effects related to parallelization by model "
        "averaging."})
    backstitch_training_scale: float = field(default=0.0, metadata={
        "flag": "backstitch-training-scale", "help": "backstitch training factor. if 0 then in "
        "the normal training mode. It is referred to as '\\alpha' in our publications."})
    backstitch_training_interval: int = field(default=1, metadata={
        "flag": "backstitch-training-interval", "help": "do backstitch training with the "
        "specified interval of minibatches. It is referred to as 'n' in our publications."})
    batchnorm_stats_scale: float = field(default=0.8, metadata={
        "flag": "batchnorm-stats-scale", "help": "Factor by which we scale down the "
        "accumulated stats of batchnorm layers after processing each minibatch.  Ensure that "
        "the final model we write out has batchnorm stats that are fairly fresh."})
    read_cache: str = field(default="", metadata={
        "flag": "read-cache", "help": "The location from which to read the cached computation "
        "(a pynnet3 cache directory or bundle file; see above)."})
    write_cache: str = field(default="", metadata={
        "flag": "write-cache", "help": "The location to which to write the cached computation "
        "(a pynnet3 cache directory or bundle file; see above)."})
    # accepted for Kaldi's scripts; see cache_file.py
    binary_write_cache: bool = field(default=True, metadata={
        "flag": "binary-write-cache", "help": "Write computation cache in binary mode (no "
        "effect: pynnet3's cache format is always binary)."})
    max_param_change: float = field(default=2.0, metadata={
        "flag": "max-param-change", "help": "The maximum change in parameters allowed per "
        "minibatch, measured in Euclidean norm over the entire model (change will be clipped "
        "to this value)"})
    optimize_config: Any = None           # OptimizeOptions; None = defaults
    compute_config: NnetComputeOptions = field(default_factory=_kaldi_compute_options)
    compiler_config: CachingCompilerOptions = field(default_factory=CachingCompilerOptions)
    # pynnet3: the on-disk computation cache to use when neither --read-cache
    # nor --write-cache is given (the binaries' --cache-dir); None = none.
    disk_cache_dir: str | None = None

    def check(self) -> None:
        if (self.momentum < 0.0 or self.max_param_change < 0.0
                or self.backstitch_training_interval <= 0):
            raise PynnetError("need --momentum >= 0, --max-param-change >= 0 and "
                              "--backstitch-training-interval > 0")
        if self.print_interval <= 0:
            raise PynnetError("--print-interval must be positive")
        if self.backstitch_training_scale > 0.0 and self.momentum != 0.0:
            raise PynnetError("backstitch training is incompatible with momentum > 0")


class ObjectiveFunctionInfo:
    """Kaldi's ObjectiveFunctionInfo: totals of one output, overall and for
    the current phase of ``print_interval`` minibatches (double precision)."""

    def __init__(self) -> None:
        self.current_phase = 0
        self.minibatches_this_phase = 0
        self.tot_weight = 0.0
        self.tot_objf = 0.0
        self.tot_aux_objf = 0.0
        self.tot_weight_this_phase = 0.0
        self.tot_objf_this_phase = 0.0
        self.tot_aux_objf_this_phase = 0.0

    def update_stats(self, output_name: str, minibatches_per_phase: int, minibatch_counter: int,
                     this_minibatch_weight: float, this_minibatch_tot_objf: float,
                     this_minibatch_tot_aux_objf: float = 0.0) -> None:
        phase = minibatch_counter // minibatches_per_phase
        if phase != self.current_phase:
            if phase < self.current_phase:
                raise PynnetError("minibatch counter went backwards")
            self.print_stats_for_this_phase(output_name, minibatches_per_phase, phase)
            self.current_phase = phase
            self.tot_weight_this_phase = 0.0
            self.tot_objf_this_phase = 0.0
            self.tot_aux_objf_this_phase = 0.0
            self.minibatches_this_phase = 0
        self.minibatches_this_phase += 1
        self.tot_weight_this_phase += this_minibatch_weight
        self.tot_objf_this_phase += this_minibatch_tot_objf
        self.tot_aux_objf_this_phase += this_minibatch_tot_aux_objf
        self.tot_weight += this_minibatch_weight
        self.tot_objf += this_minibatch_tot_objf
        self.tot_aux_objf += this_minibatch_tot_aux_objf

    def print_stats_for_this_phase(self, output_name: str, minibatches_per_phase: int,
                                   phase: int) -> None:
        start = self.current_phase * minibatches_per_phase
        end = phase * minibatches_per_phase - 1
        w = self.tot_weight_this_phase
        objf = _div(self.tot_objf_this_phase, w)
        full = minibatches_per_phase == self.minibatches_this_phase
        # The odd quoting and spacing of the partial-phase lines are Kaldi's.
        if self.tot_aux_objf_this_phase == 0.0:
            if full:
                log.log(f"Average objective function for '{output_name}' for minibatches "
                        f"{start}-{end} is {fmt_g(objf)} over {fmt_g(w)} frames.")
            else:
                log.log(f"Average objective function for '{output_name} using "
                        f"{self.minibatches_this_phase} minibatches in minibatch range "
                        f"{start}-{end} is {fmt_g(objf)} over {fmt_g(w)} frames.")
        else:
            o = np.float32(objf)
            aux = np.float32(_div(self.tot_aux_objf_this_phase, w))
            total = np.float32(o + aux)
            if full:
                log.log(f"Average objective function for '{output_name}' for minibatches "
                        f"{start}-{end} is {fmt_g(o)} + {fmt_g(aux)} = {fmt_g(total)} over "
                        f"{fmt_g(w)} frames.")
            else:
                log.log(f"Average objective function for '{output_name}' using "
                        f"{self.minibatches_this_phase} minibatches in  minibatch range "
                        f"{start}-{end} is {fmt_g(o)} + {fmt_g(aux)} = {fmt_g(total)} over "
                        f"{fmt_g(w)} frames.")

    def print_total_stats(self, name: str) -> bool:
        objf = np.float32(_div(self.tot_objf, self.tot_weight))
        aux = np.float32(_div(self.tot_aux_objf, self.tot_weight))
        if self.tot_aux_objf == 0.0:
            log.log(f"Overall average objective function for '{name}' is "
                    f"{fmt_g(_div(self.tot_objf, self.tot_weight))} over "
                    f"{fmt_g(self.tot_weight)} frames.")
        else:
            log.log(f"Overall average objective function for '{name}' is {fmt_g(objf)} + "
                    f"{fmt_g(aux)} = {fmt_g(np.float32(objf + aux))} over "
                    f"{fmt_g(self.tot_weight)} frames.")
        log.log(f"[this line is to be parsed by a script:] log-prob-per-frame={fmt_g(objf)}")
        return self.tot_weight != 0.0


def _div(a: float, b: float) -> float:
    # C++ double division: x/0 is inf or nan, not an exception.
    if b == 0.0:
        return float("nan") if a == 0.0 else (float("inf") if a > 0 else float("-inf"))
    return a / b


# glibc's mallopt parameters: largest block taken from the heap rather than
# mmap (its ceiling on 64-bit systems is 32 MiB), and the free space at the
# top of the heap beyond which free() gives memory back to the system.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_heap_kept = False


def keep_freed_heap() -> bool:
    """Tell glibc to keep freed memory for the next minibatch (once per
    process; a no-op off Linux and where the user set MALLOC_TRIM_THRESHOLD_
    or MALLOC_MMAP_THRESHOLD_).  True when the settings were made.

    Why.  Every minibatch allocates and frees the same matrices.  With
    glibc's defaults the 8 MB ones (1024 frames x 2000 outputs) go to the top
    of the heap and are trimmed back to the system when freed, so that each
    minibatch of 128 x 8 frames faulted in about 32 MB again: 3-7 ms of
    system time per minibatch (bench/train.py's network), and the page
    zeroing on top.  Raising the mmap threshold to its ceiling keeps such
    blocks on the heap, and a trim threshold above a minibatch's working set
    keeps the heap from shrinking between minibatches; the peak is the same,
    the memory is reused instead of returned and faulted in again."""
    global _heap_kept
    if _heap_kept:
        return True
    if (not sys.platform.startswith("linux") or os.environ.get("MALLOC_TRIM_THRESHOLD_")
            or os.environ.get("MALLOC_MMAP_THRESHOLD_")):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # (Setting either turns off glibc's own adjustment of both, so both are set.)
    _heap_kept = bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(
        mallopt(_M_TRIM_THRESHOLD, 1 << 30))
    return _heap_kept


def _in_place_types() -> tuple[type, ...]:
    """Component types whose Backprop computes the input derivative before
    updating, and whose update only adds to its own parameters (so that the
    update may go to the component itself rather than to its copy in
    ``delta_nnet``)."""
    from ..nnet.components.affine import (AffineComponent, LinearComponent,
                                          NaturalGradientAffineComponent)
    from ..nnet.components.tdnn import TdnnComponent

    return (AffineComponent, NaturalGradientAffineComponent, LinearComponent, TdnnComponent)


def _in_place_update_possible(config: NnetTrainerOptions, nnet: "Nnet") -> frozenset[int]:
    """The updatable components' indexes if the options and the network let
    the updates go straight into the network (see
    :meth:`NnetTrainer.updates_in_place`), else the empty set: no global or
    per-component max-change, no momentum, no backstitch, no l2
    regularization, only the component types of :func:`_in_place_types`
    (exactly those types), none of them used by two nodes."""
    if (config.momentum != 0.0 or config.backstitch_training_scale != 0.0
            or change_limits_set(nnet, config.max_param_change)):
        return frozenset()
    types = _in_place_types()
    updatable = [c for c, comp in enumerate(nnet.components) if comp.is_updatable()]
    for c in updatable:
        comp = nnet.components[c]
        if (type(comp) not in types or comp.is_gradient
                or (comp.l2_regularize != 0.0 and config.l2_regularize_factor != 0.0)):
            return frozenset()
    uses = Counter(node.component_index for node in nnet.nodes
                   if node.node_type is NodeType.COMPONENT)
    if any(uses[c] > 1 for c in updatable):
        return frozenset()
    return frozenset(updatable)


_READS_PARAMS = (CommandType.PROPAGATE, CommandType.BACKPROP,
                 CommandType.BACKPROP_NO_MODEL_UPDATE)


def components_read_after_update(computation: Any) -> frozenset[int]:
    """Components whose parameters a command of ``computation`` uses after a
    model-updating Backprop of the same component (a second Backprop
    included); kept with the computation, which is all it depends on.

    Usually none: each component node has one Backprop, and the optimizer's
    model-update consolidation turns the per-time-step Backprops of a
    recurrent node into BackpropNoModelUpdate commands followed by one
    Backprop that updates (without it, with
    ``--optimization.consolidate-model-update=false``, there is one updating
    Backprop per step)."""
    memo = computation.__dict__.get("_components_read_after_update")
    if memo is None:
        updated: set[int] = set()
        late: set[int] = set()
        for cmd in computation.commands:
            if cmd.command_type in _READS_PARAMS:
                if cmd.arg1 in updated:
                    late.add(cmd.arg1)
                if cmd.command_type is CommandType.BACKPROP:
                    updated.add(cmd.arg1)
        memo = computation.__dict__["_components_read_after_update"] = frozenset(late)
    return memo


class NnetTrainer:
    """Kaldi's NnetTrainer.  ``nnet`` is trained in place.

    ``rand``: the glibc-compatible stream for Kaldi's RandInt draws (the
    binary seeds it with ``--srand``); ``backend``: the executor backend
    (``reference``, ``cpu``, ``cuda``).  Call :meth:`close` (or use the
    trainer as a context manager) at the end: it writes ``--write-cache``.
    """

    def __init__(self, config: NnetTrainerOptions, nnet: "Nnet", rand: GlibcRand | None = None,
                 backend: Any = "reference") -> None:
        config.check()
        keep_freed_heap()
        self.config = config
        self.nnet = nnet
        self.rand = rand if rand is not None else GlibcRand(1)
        self.backend = backend
        optimize_config = (config.optimize_config if config.optimize_config is not None
                           else default_optimize_options())
        self.cache_location = CacheLocation(config.read_cache, config.write_cache,
                                            config.disk_cache_dir)
        self.compiler = CachingCompiler(
            nnet, config.compiler_config, optimize_config,
            cache_dir=self.cache_location.cache_dir,
            use_disk=self.cache_location.cache_dir is not None)
        self.num_minibatches_processed = 0
        # Computations by example structure (see _computation_for).
        self._computations: OrderedDict[tuple, Any] = OrderedDict()
        self.max_change_stats = MaxChangeStats.for_nnet(nnet)
        self.srand_seed = self.rand.rand_int(0, 100000)
        self.objf_info: dict[str, ObjectiveFunctionInfo] = {}
        if config.zero_component_stats:
            zero_component_stats(nnet)
        # The gradient holder (see the delta_nnet property), made when first
        # needed: never when every minibatch updates in place.
        self._delta_nnet: "Nnet | None" = None
        self._in_place_components = _in_place_update_possible(config, nnet)
        self._closed = False

    @property
    def delta_nnet(self) -> "Nnet":
        """The gradient holder: the network's components (learning rates,
        max-change, natural-gradient settings and state) with parameters and
        stats at zero."""
        if self._delta_nnet is None:
            self._delta_nnet = copy.deepcopy(self.nnet)
            scale_nnet(0.0, self._delta_nnet)
        return self._delta_nnet

    def updates_in_place(self, computation: Any) -> bool:
        """Whether the backward pass of ``computation`` may update the
        network's own components instead of ``delta_nnet``.

        That needs (besides the options, checked once) no command to use an
        updatable component's parameters after its update: a component's
        Backprop computes the input derivative before updating, but a later
        command (a second Backprop of the same component, as for a
        recurrent node without model-update consolidation) would see the
        updated parameters.  Once ``delta_nnet`` exists (an earlier
        minibatch needed it) it keeps being used, so that the natural-gradient
        state lives in one place."""
        if not self._in_place_components or self._delta_nnet is not None:
            return False
        return not (components_read_after_update(computation)
                    & self._in_place_components)

    # -- the public interface ---------------------------------------------------
    def train(self, eg: "NnetExample") -> None:
        """One SGD step on the minibatch ``eg``."""
        computation = self._computation_for(eg)
        cfg = self.config
        if (cfg.backstitch_training_scale > 0.0
                and self.num_minibatches_processed % cfg.backstitch_training_interval
                == self.srand_seed % cfg.backstitch_training_interval):
            freeze_natural_gradient(True, self.delta_nnet)
            self._reseed_for_backstitch()
            self._train_internal_backstitch(eg, computation, True)
            freeze_natural_gradient(False, self.delta_nnet)
            self._reseed_for_backstitch()
            self._train_internal_backstitch(eg, computation, False)
        else:
            self._train_internal(eg, computation)
        if self.num_minibatches_processed == 0:
            consolidate_memory(self.nnet)
            if self._delta_nnet is not None:
                consolidate_memory(self._delta_nnet)
        self.num_minibatches_processed += 1

    def print_total_stats(self) -> bool:
        """The end-of-training LOG lines; True if any output had data."""
        ans = False
        for name in sorted(self.objf_info):
            ok = self.objf_info[name].print_total_stats(name)
            ans = ans or ok
        self.max_change_stats.print(self.nnet)
        return ans

    def close(self) -> None:
        """Write ``--write-cache`` (Kaldi does this in the destructor)."""
        if not self._closed:
            self._closed = True
            self.cache_location.finish()

    def __enter__(self) -> "NnetTrainer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------
    def _computation_for(self, eg: "NnetExample") -> Any:
        """The compiled computation of ``eg``'s request.

        The request is a function of the names and Indexes of the example's
        inputs and outputs (the network and the options are fixed for this
        trainer), so successive minibatches of the same shape - nearly all of
        them - reuse the computation without building the request's Index
        lists and hashing them again; such reuses count as memory hits of the
        compiler's cache."""
        capacity = self.config.compiler_config.cache_capacity
        key = self._example_key(eg)
        computation = self._computations.get(key)
        if computation is not None:
            self._computations.move_to_end(key)
            self.compiler.num_memory_hits += 1
            return computation
        computation = self.compiler.compile(self._computation_request(eg))
        if capacity > 0:          # (no cache: compile every time, as Kaldi does)
            self._computations[key] = computation
            while len(self._computations) > capacity:
                self._computations.popitem(last=False)
        return computation

    # -- the example hooks: how an example becomes a computation, its inputs
    # and its outputs' objectives.  The chain trainer (train/chain/trainer.py)
    # overrides these for NnetChainExample; everything else is shared.
    def _example_key(self, eg: Any) -> tuple:
        """What the computation depends on: names and Indexes of the example's ios."""
        return tuple((io.name, io.indexes.tobytes()) for io in eg.io)

    def _computation_request(self, eg: Any) -> Any:
        return get_computation_request(self.nnet, eg, True, self.config.store_component_stats)

    def _accept_inputs(self, computer: NnetComputer, eg: Any) -> None:
        accept_example_inputs(computer, self.nnet, eg)

    def _nvalues_ios(self, eg: Any) -> Any:
        """The ios GetNumNvalues looks at (for the l2 regularization)."""
        return eg.io

    def _objf_info(self, key: str) -> "ObjectiveFunctionInfo":
        info = self.objf_info.get(key)
        if info is None:
            info = self.objf_info[key] = ObjectiveFunctionInfo()
        return info

    def _reseed_for_backstitch(self) -> None:
        # Kaldi: srand(seed + minibatch) then ResetGenerators, so that both
        # backstitch passes see the same dropout masks.
        seed = self.srand_seed + self.num_minibatches_processed
        self.rand.srand(seed)
        set_random_seed(seed)
        reset_generators(self.nnet)

    def _new_computer(self, computation: Any, in_place: bool = False) -> NnetComputer:
        return NnetComputer(self.config.compute_config, computation, self.nnet,
                            nnet_to_update=self.nnet if in_place else self.delta_nnet,
                            backend=self.backend, nnet_to_store_stats=self.nnet)

    def _forward_backward(self, eg: "NnetExample", computation: Any,
                          is_backstitch_step2: bool, in_place: bool = False) -> None:
        computer = self._new_computer(computation, in_place)
        self._accept_inputs(computer, eg)
        computer.run()
        self._process_outputs(is_backstitch_step2, eg, computer)
        computer.run()

    def _train_internal(self, eg: "NnetExample", computation: Any) -> None:
        cfg = self.config
        in_place = self.updates_in_place(computation)
        self._forward_backward(eg, computation, False, in_place)
        # (drawn in either case: the GetNumNvalues check keeps Kaldi's
        # random stream in step)
        num_nvalues = get_num_nvalues(self._nvalues_ios(eg), False, self.rand.rand_int)
        if in_place:
            # The change is in the network already; with no limit of any
            # kind the update would have added it whole, finite or not.
            self.max_change_stats.num_minibatches_processed += 1
        else:
            apply_l2_regularization(self.nnet, num_nvalues * cfg.l2_regularize_factor,
                                    self.delta_nnet)
            success = update_nnet_with_max_change(self.delta_nnet, cfg.max_param_change, 1.0,
                                                  1.0 - cfg.momentum, self.nnet,
                                                  self.max_change_stats)
        scale_batchnorm_stats(cfg.batchnorm_stats_scale, self.nnet)
        constrain_orthonormal(self.nnet, self.rand.rand_int)
        if not in_place:
            scale_nnet(cfg.momentum if success else 0.0, self.delta_nnet)

    def _train_internal_backstitch(self, eg: "NnetExample", computation: Any,
                                   is_backstitch_step1: bool) -> None:
        cfg = self.config
        self._forward_backward(eg, computation, not is_backstitch_step1)
        if is_backstitch_step1:
            max_change_scale = cfg.backstitch_training_scale
            scale_adding = -cfg.backstitch_training_scale
        else:
            max_change_scale = 1.0 + cfg.backstitch_training_scale
            scale_adding = 1.0 + cfg.backstitch_training_scale
            apply_l2_regularization(
                self.nnet, 1.0 / scale_adding * get_num_nvalues(self._nvalues_ios(eg), False, self.rand.rand_int)
                * cfg.l2_regularize_factor, self.delta_nnet)
        update_nnet_with_max_change(self.delta_nnet, cfg.max_param_change, max_change_scale,
                                    scale_adding, self.nnet, self.max_change_stats)
        if is_backstitch_step1:
            constrain_orthonormal(self.nnet, self.rand.rand_int)
        else:
            scale_batchnorm_stats(cfg.batchnorm_stats_scale, self.nnet)
        scale_nnet(0.0, self.delta_nnet)

    def _process_outputs(self, is_backstitch_step2: bool, eg: "NnetExample",
                         computer: NnetComputer) -> None:
        suffix = "_backstitch" if is_backstitch_step2 else ""
        for io in eg.io:
            node = self.nnet.get_node_index(io.name)
            if node < 0:
                raise PynnetError(f"no node named '{io.name}' in the network")
            if not self.nnet.is_output_node(node):
                continue
            obj_type = self.nnet.nodes[node].objective_type
            tot_weight, tot_objf = compute_objective_function(io.features, obj_type, io.name,
                                                              True, computer)
            key = io.name + suffix
            self._objf_info(key).update_stats(key, self.config.print_interval, self.num_minibatches_processed,
                              tot_weight, tot_objf)
