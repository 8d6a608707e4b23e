"""Export of nnet3 networks to ONNX and PyTorch (nnet3-export-onnx,
nnet3-compute-onnx, :func:`to_torch`); see docs/export.md.

The compiled forward computation of a chunk is translated, command by
command, into a tensor program (:mod:`.trace` runs the executor on a
translating backend; :mod:`.components` translates each component's
Propagate); :mod:`.onnx_model` writes it as ONNX, :mod:`.torch_export`
interprets it with PyTorch.  onnx, onnxruntime and torch are imported
only when used.
"""
from __future__ import annotations

from typing import Any

__all__ = ["to_torch", "ExportError"]

from .components import ExportError


def to_torch(nnet: Any, **kwargs: Any) -> Any:
    """A torch.nn.Module computing ``nnet``'s chunks (see
    :func:`pynnet3.export.torch_export.to_torch`)."""
    from .torch_export import to_torch as impl

    return impl(nnet, **kwargs)
