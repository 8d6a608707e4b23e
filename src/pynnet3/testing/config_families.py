"""The network families of Kaldi's test generator (the
GenerateConfigSequence* functions of nnet-test-utils.cc) and
:class:`NnetGenerationOptions`.

Each family function takes the options and a ``numpy.random.Generator`` and
returns config texts, drawing its random choices in Kaldi's order.
:data:`NETWORK_TYPES` is Kaldi's switch in GenerateConfigSequence.  Use
:func:`pynnet3.testing.generate.generate_config_sequence` rather than these
directly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import log

__all__ = ["NnetGenerationOptions", "NETWORK_TYPES", "NETWORK_TYPE_NAMES", "as_generator",
           "rand_int", "rand_below", "float_text"]


@dataclass
class NnetGenerationOptions:
    """Kaldi's NnetGenerationOptions (same fields, same defaults).

    As in Kaldi, ``allow_multiple_inputs``, ``allow_multiple_outputs`` and
    ``allow_final_nonlinearity`` only matter where a generator looks at them;
    ``allow_clockwork`` is honoured here (Kaldi ignores it).
    """

    allow_context: bool = True
    allow_nonlinearity: bool = True
    allow_recursion: bool = True
    allow_clockwork: bool = True
    allow_multiple_inputs: bool = True
    allow_multiple_outputs: bool = False
    allow_final_nonlinearity: bool = True
    allow_use_of_x_dim: bool = True
    allow_ivector: bool = False
    allow_statistics_pooling: bool = True
    # > 0: the output dim of the network.
    output_dim: int = -1


def as_generator(rng: "np.random.Generator | int | None") -> np.random.Generator:
    """``rng`` itself, or a new generator seeded with it."""
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def rand_int(rng: np.random.Generator, lo: int, hi: int) -> int:
    """Kaldi's RandInt(lo, hi): both ends included."""
    return int(rng.integers(lo, hi + 1))


def rand_below(rng: np.random.Generator, modulus: int) -> int:
    """Kaldi's ``Rand() % modulus``."""
    return int(rng.integers(0, modulus))


def float_text(value: float) -> str:
    """A BaseFloat as C++'s ostream prints it (six significant digits)."""
    return format(float(np.float32(value)), "g")


def _splice_context(rng: np.random.Generator) -> list[int]:
    """Random frame offsets in [-5, 3], each kept with probability 1/3."""
    ans = [i for i in range(-5, 4) if rand_below(rng, 3) == 0]
    return ans or [0]


def _output_dim(opts: NnetGenerationOptions, rng: np.random.Generator) -> int:
    return opts.output_dim if opts.output_dim > 0 else 100 + rand_below(rng, 200)


def _offsets(name: str, splice: list[int]) -> str:
    return ", ".join(f"Offset({name}, {o})" for o in splice)


# ---------------------------------------------------------------------------
# The network families (Kaldi's GenerateConfigSequence*)


def generate_config_sequence_simplest(opts: NnetGenerationOptions,
                                      rng: np.random.Generator) -> list[str]:
    """One affine layer: no context, no nonlinearity."""
    input_dim = 10 + rand_below(rng, 20)
    output_dim = _output_dim(opts, rng)
    return [f"component name=affine1 type=AffineComponent input-dim={input_dim} "
            f"output-dim={output_dim}\n"
            f"input-node name=input dim={input_dim}\n"
            "component-node name=affine1_node component=affine1 input=input\n"
            "output-node name=output input=affine1_node\n"]


def generate_config_sequence_simple_context(opts: NnetGenerationOptions,
                                            rng: np.random.Generator) -> list[str]:
    """Spliced context into one affine layer, either through Append() or
    as a TdnnComponent with time-offsets."""
    splice = _splice_context(rng)
    input_dim = 10 + rand_below(rng, 20)
    spliced_dim = input_dim * len(splice)
    output_dim = _output_dim(opts, rng)
    if rand_int(rng, 0, 1) == 0:
        return [f"component name=affine1 type=AffineComponent input-dim={spliced_dim} "
                f"output-dim={output_dim}\n"
                f"input-node name=input dim={input_dim}\n"
                f"component-node name=affine1_node component=affine1 "
                f"input=Append({_offsets('input', splice)})\n"
                "output-node name=output input=affine1_node\n"]
    use_bias = "true" if rand_int(rng, 0, 1) == 0 else "false"
    use_ng = "true" if rand_int(rng, 0, 1) == 0 else "false"
    return [f"component name=tdnn1 type=TdnnComponent input-dim={input_dim} "
            f"output-dim={output_dim} time-offsets={','.join(map(str, splice))} "
            f"use-bias={use_bias} use-natural-gradient={use_ng}\n"
            f"input-node name=input dim={input_dim}\n"
            "component-node name=tdnn1_node component=tdnn1 input=input\n"
            "output-node name=output input=tdnn1_node\n"]


def generate_config_sequence_simple(opts: NnetGenerationOptions,
                                    rng: np.random.Generator) -> list[str]:
    """Splicing (maybe an ivector), one hidden ReLU layer (maybe batch-norm),
    maybe a final (log-)softmax; sometimes a second config adds a layer."""
    splice = _splice_context(rng)
    input_dim = 10 + rand_below(rng, 20)
    output_dim = _output_dim(opts, rng)
    hidden_dim = 40 + rand_below(rng, 50)
    ivector_dim = 10 + rand_below(rng, 20)
    if rand_int(rng, 0, 1) == 0 or not opts.allow_ivector:
        ivector_dim = 0
    spliced_dim = input_dim * len(splice) + ivector_dim
    use_final_nonlinearity = opts.allow_final_nonlinearity and rand_int(rng, 0, 1) == 0
    use_batch_norm = rand_int(rng, 0, 1) == 0

    lines = [f"component name=affine1 type=NaturalGradientAffineComponent "
             f"input-dim={spliced_dim} output-dim={hidden_dim}",
             f"component name=relu1 type=RectifiedLinearComponent dim={hidden_dim}"]
    if use_batch_norm:
        block_dim = hidden_dim // 2 if hidden_dim % 2 == 0 else hidden_dim
        line = (f"component name=batch-norm type=BatchNormComponent dim={hidden_dim} "
                f"block-dim={block_dim} target-rms=2.0")
        if rand_int(rng, 0, 1) == 0:
            line += " epsilon=3.0"
        lines.append(line)
    lines.append(f"component name=final_affine type=NaturalGradientAffineComponent "
                 f"input-dim={hidden_dim} output-dim={output_dim}")
    if use_final_nonlinearity:
        kind = "SoftmaxComponent" if rand_below(rng, 2) == 0 else "LogSoftmaxComponent"
        lines.append(f"component name=logsoftmax type={kind} dim={output_dim}")
    lines.append(f"input-node name=input dim={input_dim}")
    if ivector_dim != 0:
        lines.append(f"input-node name=ivector dim={ivector_dim}")
    parts = ["ReplaceIndex(ivector, t, 0)"] if ivector_dim != 0 else []
    for offset in splice:
        if rand_int(rng, 0, 1) == 0:
            parts.append(f"Offset(input, {offset})")
        else:                                   # exercises Scale()
            parts.append(f"Scale(-1, Offset(input, {offset}))")
    lines.append(f"component-node name=affine1_node component=affine1 "
                 f"input=Append({', '.join(parts)})")
    if rand_int(rng, 0, 1) == 0:
        lines.append("component-node name=nonlin1 component=relu1 input=affine1_node")
    elif rand_int(rng, 0, 1) == 0:
        lines.append("component-node name=nonlin1 component=relu1 "
                     "input=Scale(-1.0, affine1_node)")
    else:
        lines.append(f"component-node name=nonlin1 component=relu1 "
                     f"input=Sum(Const(1.0, {hidden_dim}), Scale(-1.0, affine1_node))")
    if use_batch_norm:
        lines.append("component-node name=batch-norm component=batch-norm input=nonlin1")
        lines.append("component-node name=final_affine component=final_affine "
                     "input=batch-norm")
    else:
        lines.append("component-node name=final_affine component=final_affine input=nonlin1")
    if use_final_nonlinearity:
        lines.append("component-node name=output_nonlin component=logsoftmax "
                     "input=final_affine")
        lines.append("output-node name=output input=output_nonlin")
    else:
        lines.append("output-node name=output input=final_affine")
    configs = ["\n".join(lines) + "\n"]

    if rand_below(rng, 2) == 0:
        # A second config adds a layer; final_affine is defined again so
        # that it is re-initialised.
        configs.append(
            f"component name=affine2 type=NaturalGradientAffineComponent "
            f"input-dim={hidden_dim} output-dim={hidden_dim}\n"
            f"component name=relu2 type=RectifiedLinearComponent dim={hidden_dim}\n"
            f"component name=final_affine type=NaturalGradientAffineComponent "
            f"input-dim={hidden_dim} output-dim={output_dim}\n"
            "component-node name=affine2 component=affine2 input=nonlin1\n"
            "component-node name=relu2 component=relu2 input=affine2\n"
            "component-node name=final_affine component=final_affine input=relu2\n")
    return configs


def generate_config_sequence_statistics(opts: NnetGenerationOptions,
                                        rng: np.random.Generator) -> list[str]:
    """Statistics extraction and pooling, summed (through Round()) with an
    affine layer of the input."""
    input_dim = rand_int(rng, 10, 30)
    input_period = rand_int(rng, 1, 3)
    stats_period = input_period * rand_int(rng, 1, 3)
    left_context = stats_period * rand_int(rng, 1, 10)
    right_context = stats_period * rand_int(rng, 1, 10)
    log_count_features = rand_int(rng, 0, 3)
    variance_floor = rand_int(rng, 1, 10) * 1.0e-10
    output_stddevs = rand_int(rng, 0, 1) == 0
    raw_stats_dim = 1 + input_dim + (input_dim if output_stddevs else 0)
    pooled_stats_dim = log_count_features + input_dim + (input_dim if output_stddevs else 0)
    b = "true" if output_stddevs else "false"
    return [f"input-node name=input dim={input_dim}\n"
            f"component name=statistics-extraction type=StatisticsExtractionComponent "
            f"input-dim={input_dim} input-period={input_period} output-period={stats_period} "
            f"include-variance={b}\n"
            f"component name=statistics-pooling type=StatisticsPoolingComponent "
            f"input-dim={raw_stats_dim} input-period={stats_period} "
            f"left-context={left_context} right-context={right_context} "
            f"num-log-count-features={log_count_features} output-stddevs={b} "
            f"variance-floor={float_text(variance_floor)}\n"
            f"component name=affine type=AffineComponent input-dim={input_dim} "
            f"output-dim={pooled_stats_dim}\n"
            "component-node name=statistics-extraction component=statistics-extraction "
            "input=input\n"
            "component-node name=statistics-pooling component=statistics-pooling "
            "input=statistics-extraction\n"
            "component-node name=affine component=affine input=input\n"
            f"output-node name=output input=Sum(affine, Round(statistics-pooling, "
            f"{stats_period}))\n"]


def generate_config_sequence_rnn(opts: NnetGenerationOptions,
                                 rng: np.random.Generator) -> list[str]:
    """A simple RNN: the hidden layer sees its own output at t-1."""
    splice = _splice_context(rng)
    input_dim = 10 + rand_below(rng, 20)
    spliced_dim = input_dim * len(splice)
    output_dim = _output_dim(opts, rng)
    hidden_dim = 40 + rand_below(rng, 50)
    nonlin = "RectifiedLinearComponent" if rand_int(rng, 0, 1) == 0 else "TanhComponent"
    return [f"component name=affine1 type=NaturalGradientAffineComponent "
            f"input-dim={spliced_dim} output-dim={hidden_dim}\n"
            f"component name=nonlin1 type={nonlin} dim={hidden_dim}\n"
            f"component name=recurrent_affine1 type=NaturalGradientAffineComponent "
            f"input-dim={hidden_dim} output-dim={hidden_dim}\n"
            f"component name=affine2 type=NaturalGradientAffineComponent "
            f"input-dim={hidden_dim} output-dim={output_dim}\n"
            f"component name=logsoftmax type=LogSoftmaxComponent dim={output_dim}\n"
            f"input-node name=input dim={input_dim}\n"
            f"component-node name=affine1_node component=affine1 "
            f"input=Append({_offsets('input', splice)})\n"
            "component-node name=recurrent_affine1 component=recurrent_affine1 "
            "input=Offset(nonlin1, -1)\n"
            "component-node name=nonlin1 component=nonlin1 "
            "input=Sum(affine1_node, IfDefined(recurrent_affine1))\n"
            "component-node name=affine2 component=affine2 input=nonlin1\n"
            "component-node name=output_nonlin component=logsoftmax input=affine2\n"
            "output-node name=output input=output_nonlin\n"]


def generate_config_sequence_rnn_clockwork(opts: NnetGenerationOptions,
                                           rng: np.random.Generator) -> list[str]:
    """An RNN whose output layer is one of three affine layers chosen by
    t mod 3 (Switch()), each looking at a different frame."""
    splice = _splice_context(rng)
    input_dim = 10 + rand_below(rng, 20)
    spliced_dim = input_dim * len(splice)
    output_dim = _output_dim(opts, rng)
    hidden_dim = 40 + rand_below(rng, 50)
    finals = "".join(f"component name=final_affine_{i} type=NaturalGradientAffineComponent "
                     f"input-dim={hidden_dim} output-dim={output_dim}\n" for i in range(3))
    return [f"component name=affine1 type=NaturalGradientAffineComponent "
            f"input-dim={spliced_dim} output-dim={hidden_dim}\n"
            f"component name=nonlin1 type=RectifiedLinearComponent dim={hidden_dim}\n"
            f"component name=recurrent_affine1 type=NaturalGradientAffineComponent "
            f"input-dim={hidden_dim} output-dim={hidden_dim}\n"
            + finals +
            f"component name=logsoftmax type=LogSoftmaxComponent dim={output_dim}\n"
            f"input-node name=input dim={input_dim}\n"
            f"component-node name=affine1_node component=affine1 "
            f"input=Append({_offsets('input', splice)})\n"
            "component-node name=recurrent_affine1 component=recurrent_affine1 "
            "input=Offset(nonlin1, -1)\n"
            "component-node name=nonlin1 component=nonlin1 "
            "input=Sum(affine1_node, IfDefined(recurrent_affine1))\n"
            "component-node name=final_affine_0 component=final_affine_0 input=nonlin1\n"
            "component-node name=final_affine_1 component=final_affine_1 "
            "input=Offset(nonlin1, -1)\n"
            "component-node name=final_affine_2 component=final_affine_2 "
            "input=Offset(nonlin1, 1)\n"
            "component-node name=output_nonlin component=logsoftmax "
            "input=Switch(final_affine_0, final_affine_1, final_affine_2)\n"
            "output-node name=output input=output_nonlin\n"]


def _lstm_components(spliced_dim: int, projection_dim: int, cell_dim: int,
                     output_dim: int) -> list[str]:
    """The components shared by both LSTM families (Sak et al. 2014's
    equations: gates i, f, o with peepholes, cell input g, projections r, p)."""
    ans = []
    for gate in ("i", "f", "o"):
        ans.append(f"component name=W{gate}-xr type=NaturalGradientAffineComponent "
                   f"input-dim={spliced_dim + projection_dim} output-dim={cell_dim}")
        ans.append(f"component name=W{gate}c type=PerElementScaleComponent dim={cell_dim}")
    ans.append(f"component name=Wc-xr type=NaturalGradientAffineComponent "
               f"input-dim={spliced_dim + projection_dim} output-dim={cell_dim}")
    ans.append(f"component name=W-m type=NaturalGradientAffineComponent "
               f"input-dim={cell_dim} output-dim={2 * projection_dim}")
    ans.append(f"component name=Wy- type=NaturalGradientAffineComponent "
               f"input-dim={2 * projection_dim} output-dim={cell_dim}")
    ans.append(f"component name=final_affine type=NaturalGradientAffineComponent "
               f"input-dim={cell_dim} output-dim={output_dim}")
    ans.append(f"component name=logsoftmax type=LogSoftmaxComponent dim={output_dim}")
    for name, kind in (("i", "Sigmoid"), ("f", "Sigmoid"), ("o", "Sigmoid"), ("g", "Tanh"),
                       ("h", "Tanh")):
        ans.append(f"component name={name} type={kind}Component dim={cell_dim}")
    for name in ("c1", "c2", "m"):
        ans.append(f"component name={name} type=ElementwiseProductComponent "
                   f"input-dim={2 * cell_dim} output-dim={cell_dim}")
    return ans


def _lstm_nodes(spliced: str, r_prev: str, c_prev: str) -> list[str]:
    """The gate, cell and projection nodes of the LSTM families; the caller
    adds the nodes that differ (c0 / truncation, r_t)."""
    return [
        f"component-node name=i1 component=Wi-xr input=Append({spliced}, {r_prev})",
        f"component-node name=i2 component=Wic input={c_prev}",
        "component-node name=i_t component=i input=Sum(i1, i2)",
        f"component-node name=f1 component=Wf-xr input=Append({spliced}, {r_prev})",
        f"component-node name=f2 component=Wfc input={c_prev}",
        "component-node name=f_t component=f input=Sum(f1, f2)",
        f"component-node name=o1 component=Wo-xr input=Append({spliced}, {r_prev})",
        "component-node name=o2 component=Woc input=Sum(c1_t, c2_t)",
        "component-node name=o_t component=o input=Sum(o1, o2)",
        "component-node name=h_t component=h input=Sum(c1_t, c2_t)",
        f"component-node name=g1 component=Wc-xr input=Append({spliced}, {r_prev})",
        "component-node name=g_t component=g input=g1",
        f"component-node name=c1_t component=c1 input=Append(f_t, {c_prev})",
        "component-node name=c2_t component=c2 input=Append(i_t, g_t)",
        "component-node name=m_t component=m input=Append(o_t, h_t)",
        "component-node name=rp_t component=W-m input=m_t",
    ]


def _lstm_tail() -> list[str]:
    return ["component-node name=y_t component=Wy- input=rp_t",
            "component-node name=final_affine component=final_affine input=y_t",
            "component-node name=posteriors component=logsoftmax input=final_affine",
            "output-node name=output input=posteriors"]


def generate_config_sequence_lstm(opts: NnetGenerationOptions,
                                  rng: np.random.Generator) -> list[str]:
    """A projected LSTM with a trainable initial cell (ConstantComponent c0,
    reached through Failover())."""
    splice = _splice_context(rng)
    input_dim = 10 + rand_below(rng, 20)
    spliced_dim = input_dim * len(splice)
    output_dim = _output_dim(opts, rng)
    cell_dim = 40 + rand_below(rng, 50)
    projection_dim = cell_dim // (rand_below(rng, 10) + 1)
    lines = [f"input-node name=input dim={input_dim}",
             f"component name=c0 type=ConstantComponent output-dim={cell_dim}"]
    lines += _lstm_components(spliced_dim, projection_dim, cell_dim, output_dim)
    c_prev = "Sum(Failover(Offset(c1_t, -1), c0), IfDefined(Offset( c2_t, -1)))"
    # c0 needs no input; it names itself to keep the structures happy.
    lines.append("component-node name=c0 component=c0 input=c0")
    lines += _lstm_nodes(_offsets("input", splice), "IfDefined(Offset(r_t, -1))", c_prev)
    lines.append(f"dim-range-node name=r_t input-node=rp_t dim-offset=0 dim={projection_dim}")
    lines += _lstm_tail()
    return ["\n".join(lines) + "\n"]


def generate_config_sequence_lstm_with_truncation(opts: NnetGenerationOptions,
                                                  rng: np.random.Generator) -> list[str]:
    """A projected LSTM whose recurrences (at a random offset in [-3, 3],
    never 0) go through BackpropTruncationComponents."""
    splice = _splice_context(rng)
    input_dim = 10 + rand_below(rng, 20)
    spliced_dim = input_dim * len(splice)
    output_dim = _output_dim(opts, rng)
    cell_dim = 40 + rand_below(rng, 50)
    projection_dim = cell_dim // (rand_below(rng, 10) + 1)
    clipping_threshold = rand_int(rng, 6, 50)
    zeroing_threshold = rand_int(rng, 1, 5)
    zeroing_interval = rand_int(rng, 1, 5) * 10
    scale = 0.8 + 0.1 * rand_int(rng, 0, 3)
    lines = [f"input-node name=input dim={input_dim}"]
    lines += _lstm_components(spliced_dim, projection_dim, cell_dim, output_dim)
    for name, dim in (("c", cell_dim), ("r", projection_dim)):
        lines.append(f"component name={name} type=BackpropTruncationComponent dim={dim} "
                     f"scale={float_text(scale)} clipping-threshold={clipping_threshold} "
                     f"zeroing-threshold={zeroing_threshold} "
                     f"zeroing-interval={zeroing_interval} recurrence-interval=1")
    offset = rand_int(rng, -3, 3)
    if offset == 0:
        offset = -1
    c_prev = f"IfDefined(Offset(c_t, {offset}))"
    lines.append("component-node name=c_t component=c input=Sum(c1_t, c2_t)")
    lines += _lstm_nodes(_offsets("input", splice), f"IfDefined(Offset(r_t, {offset}))",
                         c_prev)
    lines.append(f"dim-range-node name=r_t_pretrunc input-node=rp_t dim-offset=0 "
                 f"dim={projection_dim}")
    lines.append("component-node name=r_t component=r input=r_t_pretrunc")
    lines += _lstm_tail()
    return ["\n".join(lines) + "\n"]


def generate_config_sequence_cnn(opts: NnetGenerationOptions,
                                 rng: np.random.Generator) -> list[str]:
    """The old ConvolutionComponent, followed by a MaxpoolingComponent whose
    node is left unused (as in Kaldi)."""
    input_x_dim = 10 + rand_below(rng, 20)
    input_y_dim = 10 + rand_below(rng, 20)
    input_z_dim = 3 + rand_below(rng, 10)
    filt_x_dim = 1 + rand_below(rng, input_x_dim)
    filt_y_dim = 1 + rand_below(rng, input_y_dim)
    num_filters = 10 + rand_below(rng, 20)
    filt_x_step = 1 + rand_below(rng, filt_x_dim)
    filt_y_step = 1 + rand_below(rng, filt_y_dim)
    # Make the filters tile the input exactly.
    input_x_dim -= (input_x_dim - filt_x_dim) % filt_x_step
    input_y_dim -= (input_y_dim - filt_y_dim) % filt_y_step
    vectorization = "yzx" if rand_below(rng, 2) == 0 else "zyx"
    conv_x = 1 + (input_x_dim - filt_x_dim) // filt_x_step
    conv_y = 1 + (input_y_dim - filt_y_dim) // filt_y_step
    conv_z = num_filters
    pool_size = [1 + rand_below(rng, d) for d in (conv_x, conv_y, conv_z)]
    pool_step = []
    for dim, size in zip((conv_x, conv_y, conv_z), pool_size):
        while True:
            step = 1 + rand_below(rng, size)
            if (dim - size) % step == 0:
                break
        pool_step.append(step)
    return [f"component name=conv type=ConvolutionComponent input-x-dim={input_x_dim} "
            f"input-y-dim={input_y_dim} input-z-dim={input_z_dim} filt-x-dim={filt_x_dim} "
            f"filt-y-dim={filt_y_dim} filt-x-step={filt_x_step} filt-y-step={filt_y_step} "
            f"num-filters={num_filters} input-vectorization-order={vectorization}\n"
            f"component name=maxpooling type=MaxpoolingComponent input-x-dim={conv_x} "
            f"input-y-dim={conv_y} input-z-dim={conv_z} pool-x-size={pool_size[0]} "
            f"pool-y-size={pool_size[1]} pool-z-size={pool_size[2]} "
            f"pool-x-step={pool_step[0]} pool-y-step={pool_step[1]} "
            f"pool-z-step={pool_step[2]}\n"
            f"input-node name=input dim={input_x_dim * input_y_dim * input_z_dim}\n"
            "component-node name=conv_node component=conv input=input\n"
            "component-node name=maxpooling_node component=maxpooling input=conv_node\n"
            "output-node name=output input=conv_node\n"]


def generate_config_sequence_cnn_new(opts: NnetGenerationOptions,
                                     rng: np.random.Generator) -> list[str]:
    """0 to 3 TimeHeightConvolution layers, with random padding, height
    subsampling, time offsets, ResNet-style sums and Round() descriptors.
    (Zero layers is odd but exercises code nothing else does.)"""
    cur_height = rand_int(rng, 5, 15)
    cur_num_filt = rand_int(rng, 1, 3)
    num_layers = rand_int(rng, 0, 3)
    cur_desc = "input"
    lines = [f"input-node name=input dim={cur_height * cur_num_filt}"]
    for l in range(num_layers):
        next_num_filt = rand_int(rng, 1, 10)
        height_padding = cur_height < 5 or rand_int(rng, 0, 1) == 0
        subsampling = rand_int(rng, 1, 2)
        if cur_height < 4:
            # An output height of 1 would leave height-offsets unused.
            subsampling = 1
        next_height = cur_height if height_padding else cur_height - 2   # kernel height 3
        next_height = (next_height + subsampling - 1) // subsampling
        if next_height == cur_height and rand_int(rng, 0, 1) == 0:
            next_num_filt = cur_num_filt          # so that a ResNet-style sum is possible
        if rand_int(rng, 0, 3) == 0:
            time_offsets = "0"
            required = "" if rand_int(rng, 0, 1) == 0 else "0"
        elif rand_int(rng, 0, 1) == 0:
            time_offsets = "-1,0,1"
            required = "" if rand_int(rng, 0, 1) == 0 else "-1"
        else:
            time_offsets = "-2,0,2"
            required = "" if rand_int(rng, 0, 1) == 0 else "0"
        line = (f"component type=TimeHeightConvolutionComponent name=layer{l}-conv "
                f"num-filters-in={cur_num_filt} num-filters-out={next_num_filt} "
                f"height-in={cur_height} height-out={next_height} "
                f"height-offsets={'-1,0,1' if height_padding else '0,1,2'} "
                f"time-offsets={time_offsets}")
        if rand_int(rng, 0, 1) == 0:
            # 100 bytes of temporary memory: the convolution is done in pieces.
            line += " max-memory-mb=1.0e-04"
        if subsampling != 1 or rand_int(rng, 0, 1) == 0:
            line += f" height-subsample-out={subsampling}"
        if required == "" and rand_int(rng, 0, 1) == 0:
            required = time_offsets               # the default, given explicitly
        if required != "":
            line += f" required-time-offsets={required}"
        for extra in (" param-stddev=0.1 bias-stddev=1", " use-natural-gradient=false",
                      " rank-in=4", " rank-out=4", " alpha-in=2.0", " alpha-out=2.0"):
            if rand_int(rng, 0, 1) == 0:
                line += extra
        lines.append(line)
        lines.append(f"component-node name=layer{l}-conv component=layer{l}-conv "
                     f"input={cur_desc}")
        if (next_height == cur_height and next_num_filt == cur_num_filt
                and rand_int(rng, 0, 1) == 0):
            desc = f"Sum({cur_desc}, layer{l}-conv)"
        else:
            desc = f"layer{l}-conv"
        if rand_int(rng, 0, 3) == 0:
            desc = f"Round({desc}, {rand_int(rng, 2, 3)})"
        cur_desc = desc
        cur_height = next_height
        cur_num_filt = next_num_filt
    lines.append(f"output-node name=output input={cur_desc}")
    return ["\n".join(lines) + "\n"]


def generate_config_sequence_restricted_attention(opts: NnetGenerationOptions,
                                                  rng: np.random.Generator) -> list[str]:
    """An affine layer feeding a RestrictedAttentionComponent."""
    input_dim = rand_int(rng, 100, 150)
    num_heads = rand_int(rng, 1, 2)
    key_dim = rand_int(rng, 20, 40)
    value_dim = rand_int(rng, 20, 40)
    time_stride = rand_int(rng, 1, 3)
    num_left_inputs = rand_int(rng, 1, 4)
    num_right_inputs = rand_int(rng, 0, 2)
    num_left_required = rand_int(rng, 0, num_left_inputs)
    num_right_required = rand_int(rng, 0, num_right_inputs)
    output_context = rand_int(rng, 0, 1) == 0
    context_dim = num_left_inputs + 1 + num_right_inputs
    query_dim = key_dim + context_dim
    attention_input_dim = num_heads * (key_dim + value_dim + query_dim)
    key_scale = " key-scale=1.0" if rand_int(rng, 0, 1) == 0 else ""
    return [f"input-node name=input dim={input_dim}\n"
            f"component name=affine type=NaturalGradientAffineComponent "
            f"input-dim={input_dim} output-dim={attention_input_dim}\n"
            "component-node name=affine component=affine input=input\n"
            "component-node name=attention component=attention input=affine\n"
            f"component name=attention type=RestrictedAttentionComponent "
            f"num-heads={num_heads} key-dim={key_dim} value-dim={value_dim} "
            f"time-stride={time_stride} num-left-inputs={num_left_inputs} "
            f"num-right-inputs={num_right_inputs} "
            f"num-left-inputs-required={num_left_required} "
            f"num-right-inputs-required={num_right_required} "
            f"output-context={'true' if output_context else 'false'}{key_scale}\n"
            "output-node name=output input=attention\n"]


def generate_config_sequence_distribute(opts: NnetGenerationOptions,
                                        rng: np.random.Generator) -> list[str]:
    """DistributeComponent spreads the input over x values; the output sums
    them back with ReplaceIndex(..., x, i)."""
    output_dim = opts.output_dim if opts.output_dim > 0 else 100
    x_expand = rand_int(rng, 1, 5)
    after_expand_dim = rand_int(rng, 10, 20)
    input_dim = x_expand * after_expand_dim
    terms = ", ".join(f"ReplaceIndex(affine, x, {i})" for i in range(x_expand))
    return [f"input-node name=input dim={input_dim}\n"
            f"component name=distribute type=DistributeComponent input-dim={input_dim} "
            f"output-dim={after_expand_dim}\n"
            "component-node name=distribute component=distribute input=input\n"
            f"component name=affine type=AffineComponent input-dim={after_expand_dim} "
            f"output-dim={output_dim}\n"
            "component-node name=affine component=affine input=distribute\n"
            f"output-node name=output input=Sum({terms})\n"]


def generate_config_sequence_composite_block(opts: NnetGenerationOptions,
                                             rng: np.random.Generator) -> list[str]:
    """A CompositeComponent of 1-5 block / repeated affine components."""
    num_components = rand_int(rng, 1, 5)
    input_dim = 10 * rand_int(rng, 1, 10)
    if opts.output_dim > 0:
        log.warn("generate_config_sequence_composite_block ignores the requested output_dim")
    max_rows_process = 512 + 512 * rand_int(rng, 1, 3)
    types = ("BlockAffineComponent", "RepeatedAffineComponent",
             "NaturalGradientRepeatedAffineComponent")
    line = (f"component name=composite1 type=CompositeComponent "
            f"max-rows-process={max_rows_process} num-components={num_components}")
    last_output_dim = input_dim
    for i in range(1, num_components + 1):
        kind = types[rand_int(rng, 0, len(types) - 1)]
        output_dim = 10 * rand_int(rng, 1, 10)
        repeats = "num-blocks" if kind == "BlockAffineComponent" else "num-repeats"
        # 10 divides every dim drawn here.
        line += (f" component{i}='type={kind} input-dim={last_output_dim} "
                 f"output-dim={output_dim} {repeats}=10'")
        last_output_dim = output_dim
    return [line + "\n\n"
            f"input-node name=input dim={input_dim}\n"
            "component-node name=composite1 component=composite1 input=input\n"
            "output-node name=output input=composite1\n"]


# Kaldi's switch in GenerateConfigSequence: case number -> (generator, is it
# allowed by these options).  Later families have more cases, so that they
# are drawn more often (as Kaldi does with the newest ones).
_Gen = Callable[[NnetGenerationOptions, np.random.Generator], list[str]]
_Allowed = Callable[[NnetGenerationOptions], bool]


def _recurrent_ok(o: NnetGenerationOptions) -> bool:
    return o.allow_recursion and o.allow_context and o.allow_nonlinearity


NETWORK_TYPES: tuple[tuple[str, _Gen, _Allowed], ...] = (
    ("simplest", generate_config_sequence_simplest, lambda o: True),
    ("simple_context", generate_config_sequence_simple_context, lambda o: o.allow_context),
    ("simple", generate_config_sequence_simple,
     lambda o: o.allow_context and o.allow_nonlinearity),
    ("rnn", generate_config_sequence_rnn, _recurrent_ok),
    ("rnn_clockwork", generate_config_sequence_rnn_clockwork,
     lambda o: _recurrent_ok(o) and o.allow_clockwork),
    ("lstm", generate_config_sequence_lstm, _recurrent_ok),
    ("lstm", generate_config_sequence_lstm, _recurrent_ok),
    ("cnn", generate_config_sequence_cnn, lambda o: o.allow_nonlinearity),
    ("distribute", generate_config_sequence_distribute, lambda o: o.allow_use_of_x_dim),
    ("composite_block", generate_config_sequence_composite_block, lambda o: True),
    ("statistics", generate_config_sequence_statistics,
     lambda o: o.allow_statistics_pooling),
    ("lstm_with_truncation", generate_config_sequence_lstm_with_truncation, _recurrent_ok),
    ("cnn_new", generate_config_sequence_cnn_new,
     lambda o: o.allow_nonlinearity and o.allow_context),
    ("restricted_attention", generate_config_sequence_restricted_attention,
     lambda o: o.allow_nonlinearity and o.allow_context),
    ("restricted_attention", generate_config_sequence_restricted_attention,
     lambda o: o.allow_nonlinearity and o.allow_context),
)

NETWORK_TYPE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(name for name, _, _ in NETWORK_TYPES))
