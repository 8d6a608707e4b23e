"""The PyTorch side of the export: a ``torch.nn.Module`` that interprets the
same tensor programs the ONNX export writes (:mod:`.ir`), with the
components' parameters as ``nn.Parameter`` s named after the components
(``tdnn1.affine.linear_params``; dots in component names make nested
modules), so the module can be fine-tuned.

``module(input, ivector=None, chunk=0)`` computes one chunk of geometry
``module.geometries[chunk]`` (the rows the chunk's input needs, see
docs/export.md) and returns a dict {output name: tensor};
:meth:`NnetModule.compute` runs a whole utterance with nnet3-compute's
chunking, as nnet3-compute-onnx does.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import PynnetError

__all__ = ["to_torch"]


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:  # pragma: no cover - the extra is missing
        raise PynnetError("the PyTorch export needs torch (pip install 'pynnet3[torch]')") from e
    return torch


def _slice(torch: Any, x: Any, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray) -> Any:
    index = [slice(None)] * x.dim()
    for s, e, a in zip(starts.tolist(), ends.tolist(), axes.tolist()):
        index[a] = slice(s, e)
    return x[tuple(index)]


def _gemm(torch: Any, a: Any, b: Any, c: Any = None, transB: int = 0, **_: Any) -> Any:
    y = a @ (b.t() if transB else b)
    return y if c is None else y + c


def _build_module_class() -> Any:
    torch = _torch()
    nn = torch.nn

    class NnetModule(nn.Module):
        """Chunk computations of an nnet3 network (see the module doc)."""

        def __init__(self, translated: Any) -> None:
            super().__init__()
            self.geometries = translated.geometries
            self.metadata = dict(translated.metadata)
            self._programs = translated.programs
            self._param_names: dict[str, tuple[Any, str]] = {}
            for name, value in translated.parameters.items():
                owner, attr = self, name
                parts = name.split(".")
                for part in parts[:-1]:
                    sub = owner._modules.get(part)
                    if sub is None:
                        sub = nn.Module()
                        owner.add_module(part, sub)
                    owner = sub
                attr = parts[-1]
                owner.register_parameter(attr, nn.Parameter(torch.from_numpy(value.copy())))
                self._param_names[name] = (owner, attr)
            self._consts = [{k: torch.from_numpy(np.array(v)) for k, v in p.constants.items()}
                            for p in translated.programs]

        def _value(self, env: dict[str, Any], consts: dict[str, Any], name: str) -> Any:
            v = env.get(name)
            if v is not None:
                return v
            if name in consts:
                return consts[name]
            owner, attr = self._param_names[name]
            return getattr(owner, attr)

        def forward(self, input: Any, ivector: Any = None, chunk: int = 0) -> dict[str, Any]:
            p = self._programs[chunk]
            consts = self._consts[chunk]
            env: dict[str, Any] = {"input": input}
            if ivector is not None:
                env["ivector"] = ivector.reshape(1, -1)
            for node in p.nodes:
                args = [self._value(env, consts, i) for i in node.inputs]
                env[node.output] = _OPS[node.op](torch, p, node, args)
            return {o: env[v] if v in env else self._value(env, consts, v)
                    for o, v in p.outputs}

        def compute(self, feats: np.ndarray, ivector: np.ndarray | None = None,
                    output: str = "output") -> Any:
            """nnet3-compute's output for one utterance (a torch tensor)."""
            from .exporter import geometry_key
            from ..compute.decodable import NnetSimpleComputationOptions, chunk_window

            m = {k: int(v) for k, v in self.metadata.items() if v.lstrip("-").isdigit()}
            opts = NnetSimpleComputationOptions(
                extra_left_context=m["extra_left_context"],
                extra_right_context=m["extra_right_context"],
                extra_left_context_initial=m["extra_left_context_initial"],
                extra_right_context_final=m["extra_right_context_final"],
                frame_subsampling_factor=m["frame_subsampling_factor"],
                frames_per_chunk=m["frames_per_chunk"])
            fss = m["frame_subsampling_factor"]
            feats_t = torch.as_tensor(np.asarray(feats, dtype=np.float32))
            iv = None if ivector is None else torch.as_tensor(
                np.asarray(ivector, dtype=np.float32))
            total = (feats_t.shape[0] + fss - 1) // fss
            pieces, s = [], 0
            while s < total:
                w = chunk_window(opts, total, s)
                g = geometry_key(s == 0, s + w.num_subsampled_frames == total,
                                 w.num_subsampled_frames, m)
                first = w.first_output_frame - m["left_context"] - g.extra_left
                n_in = g.input_frames(m["left_context"], m["right_context"], fss)
                rows = np.clip(np.arange(first, first + n_in), 0, feats_t.shape[0] - 1)
                out = self.forward(feats_t[torch.as_tensor(rows)], iv,
                                   self.geometries.index(g))[output]
                pieces.append(out[:w.num_subsampled_frames])
                s += w.num_subsampled_frames
            return torch.cat(pieces, 0)

    return NnetModule


def _ints(p: Any, node: Any, k: int) -> np.ndarray:
    return np.asarray(p.constants[node.inputs[k]])


def _op_slice(torch, p, node, a):
    return _slice(torch, a[0], _ints(p, node, 1), _ints(p, node, 2), _ints(p, node, 3))


def _op_reduce_sum(torch, p, node, a):
    axes = tuple(int(x) for x in _ints(p, node, 1).tolist())
    return torch.sum(a[0], dim=axes, keepdim=bool(node.attrs.get("keepdims", 1)))


def _op_gather(torch, p, node, a):
    idx = a[1].long()
    return torch.index_select(a[0], node.attrs.get("axis", 0), idx.reshape(-1)).reshape(
        tuple(a[0].shape[:node.attrs.get("axis", 0)]) + tuple(idx.shape)
        + tuple(a[0].shape[node.attrs.get("axis", 0) + 1:]))


def _op_reshape(torch, p, node, a):
    return a[0].reshape(tuple(int(x) for x in _ints(p, node, 1).tolist()))


def _op_expand(torch, p, node, a):
    return a[0].expand(tuple(int(x) for x in _ints(p, node, 1).tolist()))


def _op_tile(torch, p, node, a):
    return a[0].repeat(tuple(int(x) for x in _ints(p, node, 1).tolist()))


_OPS: dict[str, Any] = {
    "Add": lambda t, p, n, a: a[0] + a[1],
    "Sub": lambda t, p, n, a: a[0] - a[1],
    "Mul": lambda t, p, n, a: a[0] * a[1],
    "Div": lambda t, p, n, a: a[0] / a[1],
    "MatMul": lambda t, p, n, a: a[0] @ a[1],
    "Gemm": lambda t, p, n, a: _gemm(t, *a, **n.attrs),
    "Gather": _op_gather,
    "Concat": lambda t, p, n, a: t.cat(a, dim=n.attrs["axis"]),
    "Slice": _op_slice,
    "Reshape": _op_reshape,
    "Transpose": lambda t, p, n, a: a[0].permute(*n.attrs["perm"]),
    "Relu": lambda t, p, n, a: t.relu(a[0]),
    "Sigmoid": lambda t, p, n, a: t.sigmoid(a[0]),
    "Tanh": lambda t, p, n, a: t.tanh(a[0]),
    "Exp": lambda t, p, n, a: t.exp(a[0]),
    "Log": lambda t, p, n, a: t.log(a[0]),
    "Sqrt": lambda t, p, n, a: t.sqrt(a[0]),
    "Max": lambda t, p, n, a: t.maximum(a[0], a[1]),
    "Min": lambda t, p, n, a: t.minimum(a[0], a[1]),
    "ReduceSum": _op_reduce_sum,
    "Softmax": lambda t, p, n, a: t.softmax(a[0], dim=n.attrs["axis"]),
    "LogSoftmax": lambda t, p, n, a: t.log_softmax(a[0], dim=n.attrs["axis"]),
    "Identity": lambda t, p, n, a: a[0],
    "Neg": lambda t, p, n, a: -a[0],
    "Abs": lambda t, p, n, a: t.abs(a[0]),
    "Tile": _op_tile,
    "Expand": _op_expand,
}


def to_torch(nnet: Any, frames_per_chunk: int = 50, extra_left_context: int = 0,
             extra_right_context: int = 0, extra_left_context_initial: int = -1,
             extra_right_context_final: int = -1, frame_subsampling_factor: int = 1,
             outputs: tuple[str, ...] = ("output",), priors: Any = None) -> Any:
    """A torch.nn.Module computing ``nnet`` (prepared for test in place, as
    nnet3-compute does) chunk by chunk with these nnet3-compute options;
    its parameters are the components' (nn.Parameter, trainable)."""
    from ..compute.decodable import NnetSimpleComputationOptions
    from .exporter import ExportOptions, translate_nnet

    opts = NnetSimpleComputationOptions(
        frames_per_chunk=frames_per_chunk, extra_left_context=extra_left_context,
        extra_right_context=extra_right_context,
        extra_left_context_initial=extra_left_context_initial,
        extra_right_context_final=extra_right_context_final,
        frame_subsampling_factor=frame_subsampling_factor, acoustic_scale=1.0)
    translated = translate_nnet(nnet, ExportOptions(opts=opts, outputs=tuple(outputs)), priors)
    return _build_module_class()(translated)
