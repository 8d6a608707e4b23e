"""Backprop of the combined components (LSTM / GRU nonlinearities); kept apart
from :mod:`.combined` to keep files short.

Kaldi references: cu::BackpropLstmNonlinearity (cu-math.cc, its CPU loop) and
GruNonlinearityComponent / OutputGruNonlinearityComponent::Backprop
(nnet-combined-component.cc).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .base import rng

if TYPE_CHECKING:  # pragma: no cover
    from .combined import (GruNonlinearityComponent, LstmNonlinearityComponent,
                           OutputGruNonlinearityComponent)

F32 = np.float32
F64 = np.float64


def lstm_backprop(comp: "LstmNonlinearityComponent", in_value: np.ndarray,
                  out_deriv: np.ndarray, to_update: "LstmNonlinearityComponent | None",
                  in_deriv: np.ndarray | None) -> None:
    from .combined import kaldi_sigmoid, kaldi_tanh

    c = comp.cell_dim()
    x = np.asarray(in_value, dtype=F32)
    num_rows = x.shape[0]
    i_part, f_part = x[:, 0:c], x[:, c:2 * c]
    c_part, o_part, c_prev = x[:, 2 * c:3 * c], x[:, 3 * c:4 * c], x[:, 4 * c:5 * c]
    if x.shape[1] == 5 * c + 3:
        i_scale, f_scale, o_scale = x[:, 5 * c:5 * c + 1], x[:, 5 * c + 1:5 * c + 2], \
            x[:, 5 * c + 2:5 * c + 3]
    elif x.shape[1] == 5 * c:
        i_scale = f_scale = o_scale = F32(1.0)
    else:
        raise ValueError(f"{comp.type_name}: input has {x.shape[1]} columns")
    w_ic, w_fc, w_oc = comp.params[0], comp.params[1], comp.params[2]
    one = F32(1.0)

    # Self-repair (from the statistics of the model being run): a unit whose
    # average derivative is below its threshold gets its scale, else 0.
    count = F32(1.0 + comp.count)        # + 1 avoids dividing by zero
    cfg = comp.self_repair_config
    active = comp.deriv_sum / float(count) < cfg[:5, None].astype(F64)    # (5, c)
    sr = np.where(active, cfg[5:, None], F32(0.0)).astype(F32)
    i_t_sr, f_t_sr, c_part_sr, o_t_sr, c_t_sr = sr

    i_t = kaldi_sigmoid(i_part + w_ic * c_prev)
    f_t = kaldi_sigmoid(f_part + w_fc * c_prev)
    tanh_c_part = kaldi_tanh(c_part)
    c_t = f_t * f_scale * c_prev + i_t * i_scale * tanh_c_part
    o_t = kaldi_sigmoid(o_part + w_oc * c_t)
    tanh_c_t = kaldi_tanh(c_t)

    dc_t_out = out_deriv[:, :c]
    dm_t = out_deriv[:, c:2 * c]
    dtanh_c_t = o_t * o_scale * dm_t
    do_t = o_scale * tanh_c_t * dm_t
    do_t_input = o_t * (one - o_t) * do_t - (F32(2.0) * o_t - one) * o_t_sr
    dc_t = ((one - tanh_c_t * tanh_c_t) * dtanh_c_t + dc_t_out + do_t_input * w_oc
            - tanh_c_t * c_t_sr)
    dtanh_c_part = i_t * i_scale * dc_t
    df_t = dc_t * f_scale * c_prev
    df_t_input = df_t * f_t * (one - f_t) - (F32(2.0) * f_t - one) * f_t_sr
    di_t = dc_t * i_scale * tanh_c_part
    di_t_input = di_t * i_t * (one - i_t) - (F32(2.0) * i_t - one) * i_t_sr

    if in_deriv is not None:
        in_deriv[:, 0:c] = di_t_input
        in_deriv[:, c:2 * c] = df_t_input
        in_deriv[:, 2 * c:3 * c] = ((one - tanh_c_part * tanh_c_part) * dtanh_c_part
                                    - tanh_c_part * c_part_sr)
        in_deriv[:, 3 * c:4 * c] = do_t_input
        in_deriv[:, 4 * c:5 * c] = w_ic * di_t_input + w_fc * df_t_input + f_t * f_scale * dc_t
    if to_update is None:
        return

    params_deriv = np.stack([(c_prev * di_t_input).sum(axis=0, dtype=F32),
                             (c_prev * df_t_input).sum(axis=0, dtype=F32),
                             (c_t * do_t_input).sum(axis=0, dtype=F32)]).astype(F32)
    values = (i_t, f_t, tanh_c_part, o_t, tanh_c_t)
    derivs = (i_t * (one - i_t), f_t * (one - f_t), one - tanh_c_part * tanh_c_part,
              o_t * (one - o_t), one - tanh_c_t * tanh_c_t)
    to_update.value_sum += np.stack([v.sum(axis=0, dtype=F32) for v in values]).astype(F64)
    # The self-repair counts use the statistics from before this minibatch.
    to_update.self_repair_total += active.sum(axis=1) * float(num_rows)
    to_update.deriv_sum += np.stack([d.sum(axis=0, dtype=F32) for d in derivs]).astype(F64)
    to_update.count += float(num_rows)
    scale = 1.0
    if not to_update.is_gradient:
        scale = to_update.preconditioner.precondition_directions(params_deriv)
    to_update.params += F32(F32(to_update.learning_rate) * F32(scale)) * params_deriv


def _tanh_stats_and_self_repair(to_update: Any, h_t: np.ndarray, h_t_deriv: np.ndarray) -> None:
    """Kaldi's TanhStatsAndSelfRepair of the GRU components: on about half of
    the minibatches, accumulate tanh value/derivative statistics and push
    units whose average derivative is below the threshold away from
    saturation (modifies h_t_deriv in place)."""
    repair_and_stats_probability = 0.5
    if rng().random() > repair_and_stats_probability:
        return
    tanh_deriv = F32(1.0) - h_t * h_t
    to_update.count += h_t.shape[0]
    to_update.value_sum += h_t.sum(axis=0, dtype=F32).astype(F64)
    to_update.deriv_sum += tanh_deriv.sum(axis=0, dtype=F32).astype(F64)
    if to_update.count <= 0.0:
        return
    thresholds = ((-to_update.deriv_sum + to_update.self_repair_threshold * to_update.count)
                  .astype(F32) > 0).astype(F32)
    to_update.self_repair_total += float(thresholds.sum())
    h_t_deriv += (F32(-to_update.self_repair_scale / repair_and_stats_probability)
                  * h_t * thresholds)


def _backprop_c_t(z_t: np.ndarray, c_t1: np.ndarray, h_t: np.ndarray, out_deriv: np.ndarray,
                  c: int, in_deriv: np.ndarray | None, z_col: int,
                  c_t1_col: int) -> np.ndarray:
    """The part shared by both GRUs, for c_t = (1 - z_t) h_t + z_t c_{t-1}:
    adds to the z_t and c_{t-1} derivatives; returns the derivative w.r.t.
    the argument of the tanh giving h_t (the h_t output's own derivative,
    normally zero, is included so that tests can check it)."""
    c_t_deriv = out_deriv[:, c:2 * c]
    h_t_deriv = out_deriv[:, :c] + c_t_deriv - c_t_deriv * z_t
    if in_deriv is not None:
        in_deriv[:, z_col:z_col + c] += c_t_deriv * (c_t1 - h_t)
        in_deriv[:, c_t1_col:c_t1_col + c] += c_t_deriv * z_t
    return (h_t_deriv * (F32(1.0) - h_t * h_t)).astype(F32)       # tanh'


def gru_backprop(comp: "GruNonlinearityComponent", in_value: np.ndarray,
                 out_value: np.ndarray, out_deriv: np.ndarray,
                 to_update: "GruNonlinearityComponent | None",
                 in_deriv: np.ndarray | None) -> None:
    """BACKPROP_ADDS.  As in Kaldi the parameters are updated before the input
    derivative is computed, so when to_update is comp that derivative uses
    the updated w_h."""
    if in_deriv is None and to_update is None:
        raise ValueError("GruNonlinearityComponent.backprop: nothing to do")
    c, r = comp.cell_dim, comp.recurrent_dim
    ncol = in_value.shape[1]
    z_t, r_t = in_value[:, :c], in_value[:, c:c + r]
    c_t1, s_t1 = in_value[:, 2 * c + r:3 * c + r], in_value[:, ncol - r:]
    h_t = out_value[:, :c]
    sdotr = (r_t * s_t1).astype(F32)
    h_t_deriv = _backprop_c_t(z_t, c_t1, h_t, out_deriv, c, in_deriv, 0, 2 * c + r)
    if to_update is not None:
        _tanh_stats_and_self_repair(to_update, h_t, h_t_deriv)
        to_update.update_parameters(sdotr, h_t_deriv)
    if in_deriv is not None:
        in_deriv[:, c + r:2 * c + r] += h_t_deriv
        sdotr_deriv = h_t_deriv @ comp.w_h
        in_deriv[:, c:c + r] += sdotr_deriv * s_t1
        in_deriv[:, ncol - r:] += sdotr_deriv * r_t


def output_gru_backprop(comp: "OutputGruNonlinearityComponent", in_value: np.ndarray,
                        out_value: np.ndarray, out_deriv: np.ndarray,
                        to_update: "OutputGruNonlinearityComponent | None",
                        in_deriv: np.ndarray | None) -> None:
    """BACKPROP_ADDS; the update comes first, as in gru_backprop."""
    if in_deriv is None and to_update is None:
        raise ValueError("OutputGruNonlinearityComponent.backprop: nothing to do")
    c = comp.cell_dim
    z_t, c_t1 = in_value[:, :c], in_value[:, 2 * c:3 * c]
    h_t = out_value[:, :c]
    h_t_deriv = _backprop_c_t(z_t, c_t1, h_t, out_deriv, c, in_deriv, 0, 2 * c)
    if to_update is not None:
        _tanh_stats_and_self_repair(to_update, h_t, h_t_deriv)
        to_update.update_parameters(c_t1, h_t_deriv)
    if in_deriv is not None:
        in_deriv[:, c:2 * c] += h_t_deriv
        in_deriv[:, 2 * c:3 * c] += h_t_deriv * comp.w_h
