"""Model averaging (the body of Kaldi's nnet3-average).

Kaldi scales the first model by its weight and adds the others with theirs
(``ScaleNnet`` then ``AddNnet``, float32 arithmetic).  With several reading
threads each thread sums its own share (models ``1 + t``, ``1 + t + T``, ...)
and the shares are then added in thread order; the same grouping is used
here, so the output is bitwise Kaldi's.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .. import log
from ..errors import PynnetError
from ..compile.model_io import read_nnet
from ..nnet.nnet import Nnet
from .nnet_update import add_nnet, scale_nnet

F32 = np.float32

__all__ = ["get_weights", "default_num_threads", "average_nnets"]


def get_weights(weights_str: str, num_inputs: int) -> list[float]:
    """Kaldi's GetWeights: the ``--weights`` list (or 1/N each), normalised to
    sum to one in float32, with Kaldi's warning when they did not."""
    if num_inputs < 1:
        raise PynnetError("need at least one input model")
    if weights_str:
        try:
            weights = [F32(float(w)) for w in weights_str.split(":") if w != ""]
        except ValueError:
            raise PynnetError(f"--weights option must be a colon-separated list of numbers, "
                              f"got: {weights_str}") from None
        if len(weights) != num_inputs:
            raise PynnetError(f"--weights option must be a colon-separated list with "
                              f"{num_inputs} elements, got: {weights_str}")
    else:
        weights = [F32(F32(1.0) / F32(num_inputs)) for _ in range(num_inputs)]
    weight_sum = F32(0.0)
    for w in weights:
        weight_sum = F32(weight_sum + w)
    out = [float(F32(w / weight_sum)) for w in weights]
    if abs(float(weight_sum) - 1.0) > 0.01:
        log.warn(f"Normalizing weights to sum to one, sum was {float(weight_sum):g}")
    return out


def default_num_threads(num_inputs: int, num_threads: int = -1) -> int:
    """Kaldi's choice of reader threads for nnet3-average."""
    if num_threads <= 0:
        num_threads = 3 if num_inputs > 10 else 2 if num_inputs > 5 else 1
    if num_threads > 1 and num_threads * 2 > num_inputs:
        num_threads = num_inputs // 2
    return max(num_threads, 1)


def _read_share(models_and_weights: Sequence[tuple[str, float]]) -> Nnet:
    first, w0 = models_and_weights[0]
    out = read_nnet(first)
    scale_nnet(w0, out)
    for name, w in models_and_weights[1:]:
        add_nnet(read_nnet(name), w, out)
    return out


def average_nnets(models: Sequence[str], weights: Sequence[float],
                  num_threads: int = -1) -> Nnet:
    """The weighted sum of the networks in ``models`` (rxfilenames)."""
    if len(models) != len(weights) or not models:
        raise PynnetError("average_nnets: need one weight per model")
    num_threads = default_num_threads(len(models), num_threads)
    shares = [_read_share([(models[j], weights[j])
                           for j in range(t, len(models), num_threads)])
              for t in range(num_threads)]
    for other in shares[1:]:
        add_nnet(other, 1.0, shares[0])
    return shares[0]
