"""Each component type's Propagate (test mode) written as tensor operators.

``translate_propagate`` returns ``(y, adds)``: the value the component
computes from its input and whether its Propagate adds it to the output
matrix (as the component's NumPy ``propagate`` does; the caller adds the
old contents then).  The formulas follow the components' ``propagate``
methods in :mod:`pynnet3.nnet.components`; parameters are named
``<component>.<member>`` so that the PyTorch module's parameters are the
components'.  A type with no translation (or a case of one, e.g. training
mode) raises :class:`ExportError` naming the component.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import PynnetError
from .ir import Program

__all__ = ["ExportError", "translate_propagate", "SUPPORTED_TYPES"]


class ExportError(PynnetError):
    """A network (or a component of it) that cannot be exported."""


Translator = Callable[[Program, Any, str, Any, Any, tuple, tuple], tuple[str, bool]]
_TRANSLATORS: dict[str, Translator] = {}


def _reg(*type_names: str) -> Callable[[Translator], Translator]:
    def deco(fn: Translator) -> Translator:
        for t in type_names:
            _TRANSLATORS[t] = fn
        return fn
    return deco


def translate_propagate(p: Program, comp: Any, name: str, indexes: Any, x: str | None,
                        in_shape: tuple, out_shape: tuple) -> tuple[str, bool]:
    fn = _TRANSLATORS.get(comp.type_name)
    if fn is None:
        raise ExportError(f"component '{name}' of type {comp.type_name} cannot be exported to "
                          f"ONNX/PyTorch (no translation for {comp.type_name})")
    return fn(p, comp, name, indexes, x, in_shape, out_shape)


SUPPORTED_TYPES = _TRANSLATORS      # filled below; keys are Kaldi type names


# -- helpers -------------------------------------------------------------------
def _cols(p: Program, x: str, c0: int, c1: int, name: str) -> str:
    return p.op("Slice", [x, p.ints([c0]), p.ints([c1]), p.ints([1])], name)


def _rows(p: Program, x: str, r0: int, r1: int, name: str) -> str:
    return p.op("Slice", [x, p.ints([r0]), p.ints([r1]), p.ints([0])], name)


def _reshape(p: Program, x: str, shape: list[int], name: str) -> str:
    return p.op("Reshape", [x, p.ints(shape)], name)


def _gemm(p: Program, x: str, w: str, b: str | None, name: str) -> str:
    """x W^T (+ b)."""
    return p.op("Gemm", [x, w] + ([b] if b is not None else []), name, transB=1)


def _need_test_mode(comp: Any, name: str) -> None:
    if not getattr(comp, "test_mode", True):
        raise ExportError(f"component '{name}' ({comp.type_name}) is not in test mode; the "
                          f"export needs the network prepared as nnet3-compute does")


# -- affine family ------------------------------------------------------------
@_reg("AffineComponent", "NaturalGradientAffineComponent", "FixedAffineComponent")
def _affine(p, comp, name, indexes, x, in_shape, out_shape):
    w = p.param(f"{name}.linear_params", comp.linear_params)
    b = p.param(f"{name}.bias_params", comp.bias_params)
    return _gemm(p, x, w, b, name), False


@_reg("LinearComponent")
def _linear(p, comp, name, indexes, x, in_shape, out_shape):
    return _gemm(p, x, p.param(f"{name}.params", comp.params), None, name), True


@_reg("BlockAffineComponent")
def _block_affine(p, comp, name, indexes, x, in_shape, out_shape):
    nb = comp.num_blocks
    rows = in_shape[0]
    cols_in = comp.linear_params.shape[1]
    rows_out = comp.linear_params.shape[0] // nb
    w = p.param(f"{name}.linear_params", comp.linear_params)
    b = p.param(f"{name}.bias_params", comp.bias_params)
    xb = p.op("Transpose", [_reshape(p, x, [rows, nb, cols_in], name)], name, perm=[1, 0, 2])
    wt = p.op("Transpose", [_reshape(p, w, [nb, rows_out, cols_in], name)], name,
              perm=[0, 2, 1])
    y = p.op("Transpose", [p.op("MatMul", [xb, wt], name)], name, perm=[1, 0, 2])
    return p.op("Add", [_reshape(p, y, [rows, nb * rows_out], name), b], name), False


@_reg("RepeatedAffineComponent", "NaturalGradientRepeatedAffineComponent")
def _repeated_affine(p, comp, name, indexes, x, in_shape, out_shape):
    rows = in_shape[0]
    w = p.param(f"{name}.linear_params", comp.linear_params)
    b = p.param(f"{name}.bias_params", comp.bias_params)
    xr = _reshape(p, x, [rows * comp.num_repeats, comp.linear_params.shape[1]], name)
    return _reshape(p, _gemm(p, xr, w, b, name), [rows, out_shape[1]], name), False


@_reg("TdnnComponent")
def _tdnn(p, comp, name, indexes, x, in_shape, out_shape):
    num_rows = out_shape[0]
    offsets = list(indexes.row_offsets)
    has_bias = comp.bias_params.shape[0] != 0
    b = p.param(f"{name}.bias_params", comp.bias_params) if has_bias else None
    if not offsets:
        return p.op("Expand", [b, p.ints(list(out_shape))], name), False
    w = p.param(f"{name}.linear_params", comp.linear_params)
    idx = (np.asarray(offsets, np.int64)[None, :]
           + indexes.row_stride * np.arange(num_rows, dtype=np.int64)[:, None])
    spliced = _reshape(p, p.op("Gather", [x, p.ints(idx)], name, axis=0),
                       [num_rows, len(offsets) * in_shape[1]], name)
    return _gemm(p, spliced, w, b, name), not has_bias


# -- simple nonlinearities and fixed maps ---------------------------------------
def _unary(op: str) -> Translator:
    def fn(p, comp, name, indexes, x, in_shape, out_shape):
        return p.op(op, [x], name), False
    return fn


_reg("SigmoidComponent")(_unary("Sigmoid"))
_reg("TanhComponent")(_unary("Tanh"))
_reg("RectifiedLinearComponent")(_unary("Relu"))
_reg("LogSoftmaxComponent")(lambda p, comp, name, i, x, s, o: (p.op("LogSoftmax", [x], name,
                                                                       axis=1), False))


@_reg("SoftmaxComponent")
def _softmax(p, comp, name, indexes, x, in_shape, out_shape):
    y = p.op("Softmax", [x], name, axis=1)
    return p.op("Max", [y, p.const(np.float32(1.0e-20))], name), False


@_reg("NoOpComponent", "ClipGradientComponent")
def _identity(p, comp, name, indexes, x, in_shape, out_shape):
    return p.op("Identity", [x], name), False


@_reg("BackpropTruncationComponent")
def _backprop_truncation(p, comp, name, indexes, x, in_shape, out_shape):
    # the forward pass scales by 'scale' (an LSTM's decay-time)
    if comp.scale_ == 1.0:
        return p.op("Identity", [x], name), False
    return p.op("Mul", [x, p.const(np.float32(comp.scale_))], name), False


@_reg("GeneralDropoutComponent", "SpecAugmentTimeMaskComponent")
def _identity_in_test_mode(p, comp, name, indexes, x, in_shape, out_shape):
    _need_test_mode(comp, name)
    return p.op("Identity", [x], name), False


@_reg("DropoutComponent")
def _dropout(p, comp, name, indexes, x, in_shape, out_shape):
    _need_test_mode(comp, name)
    return p.op("Mul", [x, p.const(np.float32(1.0 - comp.dropout_proportion))], name), False


@_reg("DropoutMaskComponent")
def _dropout_mask(p, comp, name, indexes, x, in_shape, out_shape):
    prop = comp.dropout_proportion
    if prop != 0 and not comp.test_mode:
        _need_test_mode(comp, name)
    value = 1.0 if (prop == 0 or comp.continuous) else 1.0 - prop
    return p.const(np.full(out_shape, value, np.float32)), False


@_reg("PnormComponent")
def _pnorm(p, comp, name, indexes, x, in_shape, out_shape):
    g = _reshape(p, x, [in_shape[0], out_shape[1], in_shape[1] // out_shape[1]], name)
    s = p.op("ReduceSum", [p.op("Mul", [g, g], name), p.ints([2])], name, keepdims=0)
    return p.op("Sqrt", [s], name), False


@_reg("NormalizeComponent")
def _normalize(p, comp, name, indexes, x, in_shape, out_shape):
    rows = in_shape[0]
    bd = comp.block_dim
    xb = _reshape(p, x, [rows * (in_shape[1] // bd), bd], name)
    sumsq = p.op("ReduceSum", [p.op("Mul", [xb, xb], name), p.ints([1])], name, keepdims=1)
    d_scaled = np.float32(bd) * np.float32(comp.target_rms) * np.float32(comp.target_rms)
    norm = p.op("Mul", [sumsq, p.const(np.float32(1.0 / float(d_scaled)))], name)
    norm = p.op("Max", [norm, p.const(np.float32(comp.SQUARED_NORM_FLOOR))], name)
    inv = p.op("Div", [p.const(np.float32(1.0)), p.op("Sqrt", [norm], name)], name)
    y = p.op("Mul", [xb, inv], name)
    if comp.add_log_stddev:
        log_col = p.op("Add", [p.op("Neg", [p.op("Log", [inv], name)], name),
                               p.const(np.float32(np.log(comp.target_rms)))], name)
        y = p.op("Concat", [y, log_col], name, axis=1)
    return _reshape(p, y, [rows, out_shape[1]], name), False


@_reg("BatchNormComponent")
def _batchnorm(p, comp, name, indexes, x, in_shape, out_shape):
    _need_test_mode(comp, name)
    if comp.offset.shape[0] != comp.block_dim:
        raise ExportError(f"component '{name}' (BatchNormComponent): test mode but no stats")
    rows = in_shape[0]
    xb = _reshape(p, x, [-1, comp.block_dim], name)
    y = p.op("Add", [p.op("Mul", [xb, p.param(f"{name}.scale", comp.scale_)], name),
                     p.param(f"{name}.offset", comp.offset)], name)
    return _reshape(p, y, [rows, out_shape[1]], name), False


@_reg("PerElementScaleComponent", "NaturalGradientPerElementScaleComponent",
      "FixedScaleComponent")
def _per_element_scale(p, comp, name, indexes, x, in_shape, out_shape):
    return p.op("Mul", [x, p.param(f"{name}.scales", comp.scales)], name), False


@_reg("PerElementOffsetComponent")
def _per_element_offset(p, comp, name, indexes, x, in_shape, out_shape):
    block = comp.offsets.shape[0]
    xb = _reshape(p, x, [in_shape[0], -1, block], name)
    y = p.op("Add", [xb, p.param(f"{name}.offsets", comp.offsets)], name)
    return _reshape(p, y, [in_shape[0], out_shape[1]], name), False


@_reg("FixedBiasComponent")
def _fixed_bias(p, comp, name, indexes, x, in_shape, out_shape):
    return p.op("Add", [x, p.param(f"{name}.bias", comp.bias)], name), False


@_reg("ScaleAndOffsetComponent")
def _scale_and_offset(p, comp, name, indexes, x, in_shape, out_shape):
    block = comp.scales.shape[0]
    xb = _reshape(p, x, [in_shape[0], -1, block], name)
    y = p.op("Add", [p.op("Mul", [xb, p.param(f"{name}.scales", comp.scales_nonzero())], name),
                     p.param(f"{name}.offsets", comp.offsets)], name)
    return _reshape(p, y, [in_shape[0], out_shape[1]], name), False


@_reg("ElementwiseProductComponent")
def _elementwise_product(p, comp, name, indexes, x, in_shape, out_shape):
    d = out_shape[1]
    y = _cols(p, x, 0, d, name)
    for i in range(1, in_shape[1] // d):
        y = p.op("Mul", [y, _cols(p, x, i * d, (i + 1) * d, name)], name)
    return y, False


@_reg("SumGroupComponent")
def _sum_group(p, comp, name, indexes, x, in_shape, out_shape):
    sizes = np.asarray(comp.sizes, dtype=np.int64)
    m = np.zeros((in_shape[1], len(sizes)), np.float32)
    m[np.arange(in_shape[1]), np.repeat(np.arange(len(sizes)), sizes)] = 1.0
    return p.op("MatMul", [x, p.const(m)], name), False


@_reg("SumBlockComponent")
def _sum_block(p, comp, name, indexes, x, in_shape, out_shape):
    d = out_shape[1]
    xb = _reshape(p, x, [in_shape[0], in_shape[1] // d, d], name)
    s = p.op("ReduceSum", [xb, p.ints([1])], name, keepdims=0)
    return p.op("Mul", [s, p.const(np.float32(comp.scale_))], name), True


@_reg("PermuteComponent")
def _permute(p, comp, name, indexes, x, in_shape, out_shape):
    return p.op("Gather", [x, p.ints(np.asarray(comp.column_map))], name, axis=1), False


# -- recurrent nonlinearities -------------------------------------------------------
@_reg("LstmNonlinearityComponent")
def _lstm(p, comp, name, indexes, x, in_shape, out_shape):
    c = comp.cell_dim()
    params = p.param(f"{name}.params", comp.params)
    part = [_cols(p, x, k * c, (k + 1) * c, name) for k in range(5)]
    i_part, f_part, c_part, o_part, c_prev = part
    w_ic, w_fc, w_oc = (_rows(p, params, k, k + 1, name) for k in range(3))
    if in_shape[1] == 5 * c + 3:
        i_scale, f_scale, o_scale = (_cols(p, x, 5 * c + k, 5 * c + k + 1, name)
                                     for k in range(3))
    elif in_shape[1] == 5 * c:
        i_scale = f_scale = o_scale = None
    else:
        raise ExportError(f"component '{name}': input has {in_shape[1]} columns, expected "
                          f"{5 * c} or {5 * c + 3}")

    def mul(a: str, b: str | None) -> str:
        return a if b is None else p.op("Mul", [a, b], name)

    i_t = p.op("Sigmoid", [p.op("Add", [i_part, p.op("Mul", [w_ic, c_prev], name)], name)],
               name)
    f_t = p.op("Sigmoid", [p.op("Add", [f_part, p.op("Mul", [w_fc, c_prev], name)], name)],
               name)
    c_t = p.op("Add", [mul(mul(f_t, f_scale), c_prev),
                       mul(mul(i_t, i_scale), p.op("Tanh", [c_part], name))], name)
    o_t = p.op("Sigmoid", [p.op("Add", [o_part, p.op("Mul", [w_oc, c_t], name)], name)],
               name)
    m_t = mul(mul(o_t, o_scale), p.op("Tanh", [c_t], name))
    return p.op("Concat", [c_t, m_t], name, axis=1), False


def _gru_output(p: Program, name: str, h_t: str, z_t: str, c_t1: str) -> str:
    # (h_t, h_t - z_t h_t + z_t c_{t-1})
    c_t = p.op("Add", [p.op("Sub", [h_t, p.op("Mul", [z_t, h_t], name)], name),
                       p.op("Mul", [z_t, c_t1], name)], name)
    return p.op("Concat", [h_t, c_t], name, axis=1)


@_reg("GruNonlinearityComponent")
def _gru(p, comp, name, indexes, x, in_shape, out_shape):
    c, r = comp.cell_dim, comp.recurrent_dim
    z_t, r_t = _cols(p, x, 0, c, name), _cols(p, x, c, c + r, name)
    hpart = _cols(p, x, c + r, 2 * c + r, name)
    c_t1 = _cols(p, x, 2 * c + r, 3 * c + r, name)
    s_t1 = _cols(p, x, in_shape[1] - r, in_shape[1], name)
    w_h = p.param(f"{name}.w_h", comp.w_h)
    rec = _gemm(p, p.op("Mul", [r_t, s_t1], name), w_h, None, name)
    h_t = p.op("Tanh", [p.op("Add", [hpart, rec], name)], name)
    return _gru_output(p, name, h_t, z_t, c_t1), False


@_reg("OutputGruNonlinearityComponent")
def _output_gru(p, comp, name, indexes, x, in_shape, out_shape):
    c = comp.cell_dim
    z_t, hpart, c_t1 = (_cols(p, x, k * c, (k + 1) * c, name) for k in range(3))
    w_h = p.param(f"{name}.w_h", comp.w_h)
    h_t = p.op("Tanh", [p.op("Add", [p.op("Mul", [c_t1, w_h], name), hpart], name)], name)
    return _gru_output(p, name, h_t, z_t, c_t1), False


# -- components that mix rows ------------------------------------------------------
@_reg("StatisticsExtractionComponent")
def _stats_extraction(p, comp, name, indexes, x, in_shape, out_shape):
    from .trace import range_sum_matrix

    s = p.const(range_sum_matrix(np.asarray(indexes.forward_indexes), in_shape[0]))
    parts = [p.const(np.asarray(indexes.counts, np.float32).reshape(-1, 1)),
             p.op("MatMul", [s, x], name)]
    if comp.include_variance:
        parts.append(p.op("MatMul", [s, p.op("Mul", [x, x], name)], name))
    # Kaldi's Propagate zeroes its output first although the type "adds".
    return p.op("Concat", parts, name, axis=1), False


@_reg("StatisticsPoolingComponent")
def _stats_pooling(p, comp, name, indexes, x, in_shape, out_shape):
    from .trace import range_sum_matrix

    nl = comp.num_log_count_features
    d = comp.input_dim_ - 1
    s = p.const(range_sum_matrix(np.asarray(indexes.forward_indexes), in_shape[0]))
    sums = p.op("MatMul", [s, x], name)
    counts = _cols(p, sums, 0, 1, name)
    means = p.op("Div", [_cols(p, sums, 1, 1 + d, name), counts], name)
    parts = []
    if nl > 0:
        log_counts = p.op("Log", [counts], name)
        parts.append(p.op("Tile", [log_counts, p.ints([1, nl])], name))
    if comp.output_stddevs:
        f = d // 2
        mean = _cols(p, means, 0, f, name)
        var = p.op("Sub", [_cols(p, means, f, 2 * f, name), p.op("Mul", [mean, mean], name)],
                   name)
        var = p.op("Max", [var, p.const(np.float32(comp.variance_floor))], name)
        parts += [mean, p.op("Sqrt", [var], name)]
    else:
        parts.append(means)
    return (parts[0] if len(parts) == 1 else p.op("Concat", parts, name, axis=1)), False


@_reg("DistributeComponent")
def _distribute(p, comp, name, indexes, x, in_shape, out_shape):
    d = comp.output_dim_
    nb = in_shape[1] // d
    pairs = np.asarray(indexes.pairs, dtype=np.int64).reshape(-1, 2)
    flat = _reshape(p, x, [in_shape[0] * nb, d], name)
    return p.op("Gather", [flat, p.ints(pairs[:, 0] * nb + pairs[:, 1] // d)], name,
                axis=0), False


@_reg("RestrictedAttentionComponent")
def _attention(p, comp, name, indexes, x, in_shape, out_shape):
    io = indexes.io
    kd, vd, cd = comp.key_dim, comp.value_dim, comp.context_dim
    in_per_head = kd + vd + kd + cd
    num_out = out_shape[0]
    left_rows = (io.start_t_out - io.start_t_in) // io.t_step_in * io.num_images
    row_shift = (in_shape[0] - num_out) // (cd - 1) if cd > 1 else 0
    rows_o = (np.arange(cd, dtype=np.int64)[:, None] * row_shift
              + np.arange(num_out, dtype=np.int64)[None, :])          # (cd, num_out)
    heads = []
    for h in range(comp.num_heads):
        base = h * in_per_head
        keys = _cols(p, x, base, base + kd, name)
        values = _cols(p, x, base + kd, base + kd + vd, name)
        q_all = _rows(p, _cols(p, x, base + kd + vd, base + in_per_head, name), left_rows,
                      left_rows + num_out, name)
        q_key = _cols(p, q_all, 0, kd, name)
        q_ctx = _cols(p, q_all, kd, kd + cd, name)
        k_o = p.op("Gather", [keys, p.ints(rows_o)], name, axis=0)        # (cd, num_out, kd)
        dots = p.op("ReduceSum", [p.op("Mul", [k_o, q_key], name), p.ints([2])], name,
                    keepdims=0)                                             # (cd, num_out)
        b = p.op("Add", [p.op("Mul", [p.op("Transpose", [dots], name, perm=[1, 0]),
                                      p.const(np.float32(comp.key_scale))], name), q_ctx], name)
        c = p.op("Softmax", [b], name, axis=1)                              # (num_out, cd)
        v_o = p.op("Gather", [values, p.ints(rows_o)], name, axis=0)      # (cd, num_out, vd)
        c3 = _reshape(p, p.op("Transpose", [c], name, perm=[1, 0]), [cd, num_out, 1], name)
        out_v = p.op("ReduceSum", [p.op("Mul", [v_o, c3], name), p.ints([0])], name,
                     keepdims=0)
        heads.append(out_v)
        if comp.output_context:
            heads.append(c)
    return (heads[0] if len(heads) == 1 else p.op("Concat", heads, name, axis=1)), True


# -- convolution ---------------------------------------------------------------------
def _gather_cols(p: Program, x: str, cols: np.ndarray, num_rows: int, num_cols: int,
                 name: str) -> str:
    cols = np.asarray(cols, dtype=np.int64)
    if (cols >= 0).all():
        if cols.size and np.array_equal(cols, np.arange(cols[0], cols[0] + cols.size)):
            return _cols(p, x, int(cols[0]), int(cols[0]) + cols.size, name)
        return p.op("Gather", [x, p.ints(cols)], name, axis=1)
    # a column of zeros for the -1 entries (padding)
    zeros = p.const(np.zeros((num_rows, 1), np.float32))
    table = p.op("Concat", [x, zeros], name, axis=1)
    return p.op("Gather", [table, p.ints(np.where(cols >= 0, cols, num_cols))], name, axis=1)


@_reg("TimeHeightConvolutionComponent")
def _time_height_convolution(p, comp, name, indexes, x, in_shape, out_shape):
    cc = indexes.computation
    m = comp.model
    required_rows = cc.num_images * cc.num_t_in
    inp = x
    in_cols = in_shape[1]
    if in_shape[0] != required_rows:
        in_cols = in_shape[0] * in_shape[1] // required_rows
        inp = _reshape(p, x, [required_rows, in_cols], name)
    out_rows = out_shape[0]
    w = p.param(f"{name}.linear_params", comp.linear_params)
    acc = None
    for step in cc.steps:
        row0 = step.input_time_shift * cc.num_images
        part = _rows(p, inp, row0, row0 + out_rows, name)
        temp = _gather_cols(p, part, step.columns, out_rows, in_cols, name)
        param_cols = step.columns.shape[0] // cc.height_out
        temp = _reshape(p, temp, [out_rows * cc.height_out, param_cols], name)
        wp = _cols(p, w, step.params_start_col, step.params_start_col + param_cols, name)
        prod = _gemm(p, temp, wp, None, name)
        acc = prod if acc is None else p.op("Add", [acc, prod], name)
    bias = p.op("Tile", [p.param(f"{name}.bias_params", comp.bias_params),
                         p.ints([m.height_out])], name)
    if acc is None:
        return p.op("Expand", [bias, p.ints(list(out_shape))], name), False
    return p.op("Add", [_reshape(p, acc, [out_rows, out_shape[1]], name), bias], name), False


@_reg("ConvolutionComponent")
def _convolution(p, comp, name, indexes, x, in_shape, out_shape):
    nx, ny = comp._num_steps()
    num_filters, filter_dim = comp.filter_params.shape
    patches = _reshape(p, _gather_cols(p, x, comp.patch_column_map(), in_shape[0], in_shape[1], name),
                       [-1, filter_dim], name)
    y = _gemm(p, patches, p.param(f"{name}.filter_params", comp.filter_params),
              p.param(f"{name}.bias_params", comp.bias_params), name)
    return _reshape(p, y, [in_shape[0], nx * ny * num_filters], name), True


@_reg("MaxpoolingComponent")
def _maxpooling(p, comp, name, indexes, x, in_shape, out_shape):
    num_pools = comp.output_dim()
    pool_size = comp.pool_x_size * comp.pool_y_size * comp.pool_z_size
    patches = _gather_cols(p, x, comp.patch_column_map(), in_shape[0], in_shape[1], name)
    y = None
    for k in range(pool_size):
        part = _cols(p, patches, k * num_pools, (k + 1) * num_pools, name)
        y = part if y is None else p.op("Max", [y, part], name)
    return p.op("Max", [y, p.const(np.float32(-1e20))], name), False


# -- constants and composites -------------------------------------------------------
@_reg("ConstantComponent", "ConstantFunctionComponent")
def _constant(p, comp, name, indexes, x, in_shape, out_shape):
    out = p.param(f"{name}.output", comp.output)
    return p.op("Expand", [out, p.ints(list(out_shape))], name), False


@_reg("CompositeComponent")
def _composite(p, comp, name, indexes, x, in_shape, out_shape):
    cur, shape = x, tuple(in_shape)
    adds = False
    for i, sub in enumerate(comp.components):
        sub_shape = (shape[0], sub.output_dim())
        cur, adds = translate_propagate(p, sub, f"{name}.{i}", None, cur, shape, sub_shape)
        shape = sub_shape
    return cur, adds
