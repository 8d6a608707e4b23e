"""Random components for component tests (Kaldi's GenerateRandomComponentConfig
and GenerateRandomSimpleComponent in nnet-test-utils.cc).

One case per component family Kaldi draws from (38 cases: the affine
families, nonlinearities, normalisation, convolution and pooling, LSTM / GRU
nonlinearities, composite components, dropout, batch-norm, ...), each with
random dims and options in Kaldi's ranges.  Draws are made in Kaldi's order
from a ``numpy.random.Generator``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError
from ..nnet.config_line import ConfigLine
from .config_families import float_text, rand_below, rand_int

if TYPE_CHECKING:
    from ..nnet.components.base import Component

__all__ = ["generate_random_component_config", "generate_random_simple_component",
           "NUM_COMPONENT_CASES"]

NUM_COMPONENT_CASES = 38


def _tf(flag: bool) -> str:
    return "true" if flag else "false"


def _convolution(rng: np.random.Generator, lr: str) -> tuple[str, str]:
    vectorization = "yzx" if rand_below(rng, 2) == 0 else "zyx"
    input_x_dim = 10 + rand_below(rng, 20)
    input_y_dim = 10 + rand_below(rng, 20)
    input_z_dim = 3 + rand_below(rng, 10)
    filt_x_dim = 1 + rand_below(rng, input_x_dim)
    filt_y_dim = 1 + rand_below(rng, input_y_dim)
    num_filters = 1 + rand_below(rng, 10)
    filt_x_step = 1 + rand_below(rng, filt_x_dim)
    filt_y_step = 1 + rand_below(rng, filt_y_dim)
    input_x_dim -= (input_x_dim - filt_x_dim) % filt_x_step
    input_y_dim -= (input_y_dim - filt_y_dim) % filt_y_step
    return "ConvolutionComponent", (
        f"input-x-dim={input_x_dim} input-y-dim={input_y_dim} input-z-dim={input_z_dim} "
        f"filt-x-dim={filt_x_dim} filt-y-dim={filt_y_dim} filt-x-step={filt_x_step} "
        f"filt-y-step={filt_y_step} num-filters={num_filters} "
        f"input-vectorization-order={vectorization} learning-rate={lr}")


def _maxpooling(rng: np.random.Generator) -> tuple[str, str]:
    dims = [5 + rand_below(rng, 10) for _ in range(3)]
    sizes = [1 + rand_below(rng, d) for d in dims]
    steps = [1 + rand_below(rng, s) for s in sizes]
    # Make the pools tile the input exactly.
    dims = [d - (d - s) % st for d, s, st in zip(dims, sizes, steps)]
    axes = "xyz"
    return "MaxpoolingComponent", " ".join(
        [f"input-{a}-dim={d}" for a, d in zip(axes, dims)]
        + [f"pool-{a}-size={s}" for a, s in zip(axes, sizes)]
        + [f"pool-{a}-step={st}" for a, st in zip(axes, steps)])


def _composite(rng: np.random.Generator) -> tuple[str, str]:
    cur_dim = rand_int(rng, 20, 30)
    num_components = rand_int(rng, 1, 3)
    max_rows_process = rand_int(rng, 1, 30)
    config = f"num-components={num_components} max-rows-process={max_rows_process}"
    for i in range(1, num_components + 1):
        if rand_int(rng, 1, 3) == 1:
            config += f" component{i}='type=RectifiedLinearComponent dim={cur_dim}'"
        elif rand_int(rng, 1, 2) == 1:
            config += f" component{i}='type=TanhComponent dim={cur_dim}'"
        else:
            next_dim = rand_int(rng, 20, 30)
            config += (f" component{i}='type=AffineComponent input-dim={cur_dim} "
                       f"output-dim={next_dim}'")
            cur_dim = next_dim
    return "CompositeComponent", config


def _clip_gradient(rng: np.random.Generator) -> tuple[str, str]:
    config = (f"dim={rand_int(rng, 1, 50)} clipping-threshold={rand_int(rng, 1, 50)} "
              f"norm-based-clipping={'false' if rand_int(rng, 0, 1) == 0 else 'true'}")
    if rand_int(rng, 0, 1) == 1:
        config += f" self-repair-scale={0 if rand_int(rng, 0, 1) == 0 else rand_int(rng, 1, 50)}"
    if rand_int(rng, 0, 1) == 1:
        config += f" self-repair-clipped-proportion-threshold={float_text(rng.random())}"
    if rand_int(rng, 0, 1) == 1:
        config += f" self-repair-target={float_text(rng.random())}"
    return "ClipGradientComponent", config


def generate_random_component_config(rng: np.random.Generator,
                                     case: int | None = None) -> tuple[str, str]:
    """(component type, config line without name and type) of a random
    component; ``case`` in [0, 38) picks Kaldi's case instead of drawing it."""
    n = rand_int(rng, 0, NUM_COMPONENT_CASES - 1) if case is None else case
    lr = float_text(0.001 * rand_int(rng, 1, 100))
    if n == 0:
        output_dim, group_size = rand_int(rng, 1, 50), rand_int(rng, 1, 15)
        return "PnormComponent", f"input-dim={output_dim * group_size} output-dim={output_dim}"
    if n == 1:
        target_rms = float_text(rand_int(rng, 1, 200) / 100.0)
        add_log_stddev = "True" if rand_below(rng, 2) == 0 else "False"
        # dim 1 would make every derivative zero, which tests nothing.
        block_dim, num_blocks = rand_int(rng, 2, 50), rand_int(rng, 1, 3)
        return "NormalizeComponent", (f"dim={block_dim * num_blocks} block-dim={block_dim} "
                                      f"target-rms={target_rms} add-log-stddev={add_log_stddev}")
    simple_dim = {2: "SigmoidComponent", 3: "TanhComponent", 4: "RectifiedLinearComponent",
                  5: "SoftmaxComponent", 6: "LogSoftmaxComponent", 7: "NoOpComponent"}
    if n in simple_dim:
        return simple_dim[n], f"dim={rand_int(rng, 1, 50)}"
    if n == 8:
        input_dim, output_dim = rand_int(rng, 1, 50), rand_int(rng, 1, 50)
        return "FixedAffineComponent", f"input-dim={input_dim} output-dim={output_dim}"
    if n in (9, 10, 34):
        kind = {9: "AffineComponent", 10: "NaturalGradientAffineComponent",
                34: "LinearComponent"}[n]
        return kind, (f"input-dim={rand_int(rng, 1, 50)} output-dim={rand_int(rng, 1, 50)} "
                      f"learning-rate={lr}")
    if n == 11:
        num_groups = rand_int(rng, 1, 50)
        return "SumGroupComponent", "sizes=" + ",".join(str(rand_int(rng, 1, 5))
                                                        for _ in range(num_groups))
    if n == 12:
        return "FixedScaleComponent", f"dim={rand_int(rng, 1, 100)}"
    if n == 13:
        return "FixedBiasComponent", f"dim={rand_int(rng, 1, 100)}"
    if n == 14:
        return ("NaturalGradientPerElementScaleComponent",
                f"dim={rand_int(rng, 1, 100)} learning-rate={lr}")
    if n == 15:
        return "PerElementScaleComponent", f"dim={rand_int(rng, 1, 100)} learning-rate={lr}"
    if n == 16:
        output_dim, multiple = rand_int(rng, 1, 100), rand_int(rng, 2, 4)
        return "ElementwiseProductComponent", (f"input-dim={output_dim * multiple} "
                                               f"output-dim={output_dim}")
    if n == 17:
        return _convolution(rng, lr)
    if n == 18:
        input_dim = 10 + rand_below(rng, 100)
        return "PermuteComponent", "column-map=" + ",".join(
            str(int(c)) for c in rng.permutation(input_dim))
    if n == 19:
        param_config = (" param-mean=0.0 param-stddev=0.0" if rand_int(rng, 0, 1)
                        else " param-mean=1.0 param-stddev=1.0")
        block_dim = rand_int(rng, 10, 20)
        dim = block_dim * rand_int(rng, 1, 2)
        return "PerElementOffsetComponent", (
            f"dim={dim} block-dim={block_dim} "
            f"use-natural-gradient={_tf(rand_int(rng, 0, 1) == 0)} "
            f"learning-rate={lr}{param_config}")
    if n in (20, 21):
        return _composite(rng)
    if n == 22:
        num_groups = rand_int(rng, 1, 50)
        return "SumGroupComponent", (f"input-dim={num_groups * rand_int(rng, 1, 15)} "
                                     f"output-dim={num_groups}")
    if n in (23, 24, 25):
        kind, key = {23: ("RepeatedAffineComponent", "num-repeats"),
                     24: ("BlockAffineComponent", "num-blocks"),
                     25: ("NaturalGradientRepeatedAffineComponent", "num-repeats")}[n]
        num = rand_int(rng, 1, 50)
        input_dim, output_dim = num * rand_int(rng, 1, 15), num * rand_int(rng, 1, 15)
        return kind, f"input-dim={input_dim} output-dim={output_dim} {key}={num}"
    if n == 26:
        return _maxpooling(rng)
    if n == 27:
        input_dim, output_dim = rand_int(rng, 1, 50), rand_int(rng, 1, 50)
        is_updatable, use_ng = rand_int(rng, 0, 1) == 0, rand_int(rng, 0, 1) == 0
        return "ConstantFunctionComponent", (
            f"input-dim={input_dim} output-dim={output_dim} learning-rate={lr} "
            f"is-updatable={_tf(is_updatable)} use-natural-gradient={_tf(use_ng)}")
    if n == 28:
        return _clip_gradient(rng)
    if n == 29:
        test_mode = rand_int(rng, 0, 1) == 0
        return "DropoutComponent", (f"dim={rand_int(rng, 1, 200)} "
                                    f"dropout-proportion={float_text(rng.random())} "
                                    f"test-mode={_tf(test_mode)}")
    if n == 30:
        # self-repair off, so that derivative tests can pass.
        return ("LstmNonlinearityComponent",
                f"cell-dim={rand_int(rng, 1, 200)} self-repair-scale=0.0")
    if n == 31:
        block_dim = rand_int(rng, 1, 20)
        dim = block_dim * rand_int(rng, 1, 2)
        test_mode = rand_int(rng, 0, 1) == 0
        return "BatchNormComponent", (f"dim={dim} block-dim={block_dim} "
                                      f"target-rms={rand_int(rng, 1, 4)} "
                                      f"test-mode={_tf(test_mode)} "
                                      f"epsilon={'0.1' if rand_int(rng, 0, 1) == 0 else '1.0'}")
    if n == 32:
        scale = 0.5 * rand_int(rng, 1, 3)
        output_dim = rand_int(rng, 1, 10)
        input_dim = output_dim * rand_int(rng, 1, 3)
        return "SumBlockComponent", (f"input-dim={input_dim} output-dim={output_dim} "
                                     f"scale={float_text(scale)}")
    if n == 33:
        block_dim, num_blocks = rand_int(rng, 10, 20), rand_int(rng, 1, 3)
        return "ScaleAndOffsetComponent", (f"dim={block_dim * num_blocks} block-dim={block_dim} "
                                           f"use-natural-gradient={_tf(rand_int(rng, 0, 1) == 0)}")
    if n == 35:
        # Not a simple component in general, but it behaves as one with
        # time-offsets=0.
        input_dim, output_dim = rand_int(rng, 1, 50), rand_int(rng, 1, 50)
        use_ng, use_bias = rand_int(rng, 0, 1) == 0, rand_int(rng, 0, 1) == 0
        return "TdnnComponent", (f"input-dim={input_dim} output-dim={output_dim} "
                                 f"learning-rate={lr} time-offsets=0 "
                                 f"use-natural-gradient={_tf(use_ng)} use-bias={_tf(use_bias)}")
    if n == 36:
        cell_dim = rand_int(rng, 10, 20)
        recurrent_dim = rand_int(rng, 5, cell_dim - 1) if rand_int(rng, 0, 1) == 0 else cell_dim
        return "GruNonlinearityComponent", f"cell-dim={cell_dim} recurrent-dim={recurrent_dim}"
    if n == 37:
        return "OutputGruNonlinearityComponent", (f"cell-dim={rand_int(rng, 10, 20)} "
                                                  f"learning-rate={lr}")
    raise ValueError(f"no random component case {n} (cases are 0..{NUM_COMPONENT_CASES - 1})")


def generate_random_simple_component(rng: "np.random.Generator | int | None" = None,
                                     case: int | None = None) -> "Component":
    """Kaldi's GenerateRandomSimpleComponent: a random component, initialised
    from its config (every option must be used)."""
    from ..nnet.components.base import new_component_of_type

    if not isinstance(rng, np.random.Generator):
        rng = np.random.default_rng(rng)
    component_type, config = generate_random_component_config(rng, case)
    cfl = ConfigLine(config, "<random component>", None)
    comp = new_component_of_type(component_type)
    if comp is None:
        raise ConfigError(f"Invalid component type {component_type}")
    comp.init_from_config(cfl)
    unused = cfl.unused_values()
    if unused:
        raise ConfigError(f"Config line {config} has unused values: {' '.join(unused)}")
    return comp
