"""A pynnet3 network as PyTorch operations, for benchmarks (bench/compute.py).

Not part of the package: PyTorch is not a dependency of pynnet3.

:class:`TorchNetwork` evaluates a *feed-forward* network in test mode for a
fixed set of output frames, on a batch of sequences that all have the same
input frames.  Every node is computed at exactly the frames the output needs
(found once, by following the descriptors' and components' dependencies, as
the compiler does), so a frame-subsampled chain model computes its upper
layers at every third frame, as Kaldi does; splicing is done by indexing
rows (``index_select``) and the affine parts by ``torch.nn.functional.linear``.

Supported: Affine / NaturalGradientAffine / Linear / Tdnn components,
RectifiedLinear, BatchNorm (test mode: x * scale + offset), NoOp and
(General)Dropout (identity in test mode), LogSoftmax; descriptors made of
Append, Sum, Scale, Offset, ReplaceIndex, Round and Const.  Anything else
raises :class:`Unsupported`.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

try:
    import torch
except ImportError:  # affine_flops() works without it
    torch = None  # type: ignore[assignment]

from pynnet3.nnet import descriptor as d
from pynnet3.nnet.graph import compute_topological_order, nnet_to_directed_graph
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet, NodeType


class Unsupported(Exception):
    pass


def _dependencies(nnet: Nnet, node: int, t: int) -> list[tuple[int, int]]:
    info = nnet.nodes[node]
    index = Index(0, t, 0)
    if info.node_type is NodeType.DESCRIPTOR:
        return [(n, i[1]) for n, i in info.descriptor.get_dependencies(index)]
    if info.node_type is NodeType.COMPONENT:
        comp = nnet.components[info.component_index]
        return [(node - 1, i[1]) for i in comp.get_input_indexes(None, index)]
    if info.node_type is NodeType.DIM_RANGE:
        return [(info.node_index, t)]
    return []


def _select(x: torch.Tensor, rows: "torch.Tensor | slice | None") -> torch.Tensor:
    if rows is None:
        return x
    if isinstance(rows, slice):
        return x[:, rows]
    return x.index_select(1, rows)


def needed_times(nnet: Nnet, out_node: int, output_times: list[int]
                 ) -> tuple[list[int], dict[int, np.ndarray]]:
    """(nodes in topological order, node -> sorted frames it is needed at)."""
    order = compute_topological_order(nnet_to_directed_graph(nnet))
    by_order = sorted(range(nnet.num_nodes()), key=lambda n: order[n])
    need: dict[int, set[int]] = defaultdict(set)
    need[out_node] = set(output_times)
    for node in reversed(by_order):
        for t in sorted(need.get(node, ())):
            for src, st in _dependencies(nnet, node, t):
                need[src].add(st)
    return by_order, {n: np.array(sorted(ts), dtype=np.int64) for n, ts in need.items() if ts}


def affine_flops(nnet: Nnet, output_times: list[int], output: str = "output") -> int:
    """Multiply-add FLOPs (2 per weight per row) of the affine, linear and
    TDNN components for outputs at ``output_times``."""
    _, times = needed_times(nnet, nnet.get_node_index(output), output_times)
    total = 0
    for node, ts in times.items():
        info = nnet.nodes[node]
        if info.node_type is NodeType.COMPONENT:
            comp = nnet.components[info.component_index]
            kind = type(comp).__name__
            if kind in ("AffineComponent", "NaturalGradientAffineComponent", "TdnnComponent"):
                total += 2 * len(ts) * comp.linear_params.size
            elif kind == "LinearComponent":
                total += 2 * len(ts) * comp.params.size
    return total


class TorchNetwork:
    """``nnet`` (test mode) for outputs at ``output_times`` of node ``output``,
    inputs ``input`` at ``input_times`` (and ``ivector`` at t = 0 if any)."""

    def __init__(self, nnet: Nnet, output_times: list[int], input_times: list[int],
                 output: str = "output") -> None:
        self.nnet = nnet
        out_node = nnet.get_node_index(output)
        by_order, self.times = needed_times(nnet, out_node, output_times)
        self.input_node = nnet.get_node_index("input")
        self.ivector_node = nnet.get_node_index("ivector")
        given = set(input_times)
        missing = set(self.times.get(self.input_node, [])) - given
        if missing:
            raise Unsupported(f"input frames {sorted(missing)[:5]}... are needed but not given")
        self.input_rows = torch.as_tensor(
            np.searchsorted(np.array(input_times), self.times[self.input_node]))
        self.order = [n for n in by_order if n in self.times]
        self.out_node = out_node
        self.steps = []
        last_read: dict[int, int] = {}
        for n in self.order:
            self._reads: set[int] = set()
            self.steps.append(self._plan(n))
            for src in self._reads:
                last_read[src] = n
        # node -> the nodes whose values are no longer needed once it is computed
        self.last_readers: dict[int, list[int]] = defaultdict(list)
        for src, reader in last_read.items():
            if src != out_node:
                self.last_readers[reader].append(src)
        self.flops_per_sequence = sum(s[2] for s in self.steps)
        self._last_read = last_read

    # -- planning ------------------------------------------------------------
    def _rows(self, src: int, times: np.ndarray) -> torch.Tensor:
        src_times = self.times[src]
        self._reads.add(src)
        if np.array_equal(src_times, times):
            return None          # every row, in order
        pos = np.searchsorted(src_times, times)
        if np.any(pos >= len(src_times)) or np.any(src_times[np.minimum(pos, len(src_times) - 1)]
                                                   != times):
            raise Unsupported(f"node {self.nnet.node_names[src]} lacks a needed frame")
        if len(pos) > 1:
            steps = np.diff(pos)
            if steps[0] > 0 and np.all(steps == steps[0]):
                # rows a, a + s, a + 2s, ...: a strided view, no copy
                return slice(int(pos[0]), int(pos[-1]) + 1, int(steps[0]))
        return torch.as_tensor(pos)

    def _sum_term(self, term: Any, times: np.ndarray) -> Any:
        if isinstance(term, d.SimpleSumDescriptor):
            fwd = term.src
            srcs, ts = [], []
            for t in times.tolist():
                node, index = fwd.map_to_input(Index(0, t, 0))
                srcs.append(node)
                ts.append(index[1])
            if len(set(srcs)) != 1:
                raise Unsupported("a Switch() descriptor")
            src = srcs[0]
            return ("rows", src, self._rows(src, np.array(ts, dtype=np.int64)),
                    float(fwd.get_scale_for_node(src)))
        if isinstance(term, d.BinarySumDescriptor) and term.op == d.BinarySumDescriptor.SUM:
            return ("sum", self._sum_term(term.src1, times), self._sum_term(term.src2, times))
        if isinstance(term, d.ConstantSumDescriptor):
            return ("const", term.value, term.dim_)
        raise Unsupported(f"descriptor {type(term).__name__}")

    def _plan(self, node: int) -> tuple[str, Any, int]:
        info = self.nnet.nodes[node]
        times = self.times[node]
        if info.node_type is NodeType.INPUT:
            return ("input", None, 0)
        if info.node_type is NodeType.DESCRIPTOR:
            return ("descriptor", [self._sum_term(p, times) for p in info.descriptor.parts], 0)
        if info.node_type is NodeType.DIM_RANGE:
            return ("dim-range", (self._rows(info.node_index, times), info.dim_offset, info.dim), 0)
        comp = self.nnet.components[info.component_index]
        kind = type(comp).__name__
        rows = len(times)
        if kind in ("AffineComponent", "NaturalGradientAffineComponent"):
            w = torch.from_numpy(comp.linear_params.copy())
            b = torch.from_numpy(comp.bias_params.copy())
            return ("linear", (self._rows(node - 1, times), w, b), 2 * rows * w.numel())
        if kind == "LinearComponent":
            w = torch.from_numpy(comp.params.copy())
            return ("linear", (self._rows(node - 1, times), w, None), 2 * rows * w.numel())
        if kind == "TdnnComponent":
            w = comp.linear_params
            b = torch.from_numpy(comp.bias_params.copy()) if comp.bias_params.shape[0] else None
            k = len(comp.time_offsets)
            dim = w.shape[1] // k
            weights = [torch.from_numpy(np.ascontiguousarray(w[:, i * dim:(i + 1) * dim]))
                       for i in range(k)]
            parts = [self._rows(node - 1, times + off) for off in comp.time_offsets]
            return ("tdnn", (parts, weights, b), 2 * rows * w.size)
        rows_in = self._rows(node - 1, times)
        if kind == "RectifiedLinearComponent":
            return ("relu", rows_in, 0)
        if kind == "BatchNormComponent":
            if not comp.test_mode:
                raise Unsupported("BatchNorm in training mode")
            return ("batchnorm", (rows_in, torch.from_numpy(comp.scale_.copy()),
                                  torch.from_numpy(comp.offset.copy()), comp.block_dim), 0)
        if kind in ("NoOpComponent", "GeneralDropoutComponent", "DropoutComponent"):
            if kind != "NoOpComponent" and not comp.test_mode:
                raise Unsupported(f"{kind} in training mode")
            return ("identity", rows_in, 0)
        if kind == "LogSoftmaxComponent":
            return ("log-softmax", rows_in, 0)
        raise Unsupported(f"component {kind}")

    def _owned(self, node: int) -> bool:
        """Whether component ``node`` may overwrite its input value in place:
        the descriptor before it is read by nothing else, and holds a tensor
        of its own (not another node's, forwarded unchanged)."""
        desc = node - 1
        if self._last_read.get(desc) != node:
            return False
        kind, terms, _ = self.steps[self.order.index(desc)]
        return not (len(terms) == 1 and terms[0][0] == "rows" and terms[0][2] is None
                    and terms[0][3] == 1.0)

    # -- running ---------------------------------------------------------------
    def _eval_term(self, term: Any, values: dict[int, torch.Tensor], batch: int,
                   rows: int) -> torch.Tensor:
        if term[0] == "rows":
            _, src, idx, scale = term
            x = _select(values[src], idx)
            return x if scale == 1.0 else x * scale
        if term[0] == "sum":
            a, b = term[1], term[2]
            if b[0] == "rows" and b[3] != 1.0 and a[0] == "rows" and a[3] == 1.0:
                a, b = b, a
            if a[0] == "rows" and b[0] == "rows" and b[3] == 1.0:
                # x * scale + y in one operation (Sum(Scale(0.66, x), y))
                return torch.add(_select(values[b[1]], b[2]), _select(values[a[1]], a[2]),
                                 alpha=a[3])
            return self._eval_term(a, values, batch, rows) + \
                self._eval_term(b, values, batch, rows)
        return torch.full((batch, rows, term[2]), term[1])

    def forward(self, feats: torch.Tensor, ivectors: torch.Tensor | None = None) -> torch.Tensor:
        """feats: [batch, input frames, dim]; ivectors: [batch, dim] (the
        iVector of each sequence, given at t = 0)."""
        with torch.no_grad():
            return self._forward(feats, ivectors)

    def _forward(self, feats: torch.Tensor, ivectors: torch.Tensor | None) -> torch.Tensor:
        batch = feats.shape[0]
        values: dict[int, torch.Tensor] = {}
        for node, (kind, arg, _) in zip(self.order, self.steps):
            rows = len(self.times[node])
            if kind == "input":
                if node == self.input_node:
                    values[node] = feats.index_select(1, self.input_rows)
                elif node == self.ivector_node:
                    if ivectors is None or list(self.times[node]) != [0]:
                        raise Unsupported("ivector needed at frames other than 0")
                    values[node] = ivectors[:, None, :]
                else:
                    raise Unsupported(f"input node {self.nnet.node_names[node]}")
            elif kind == "descriptor":
                parts = [self._eval_term(t, values, batch, rows) for t in arg]
                values[node] = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
            elif kind == "dim-range":
                idx, offset, dim = arg
                values[node] = _select(values[self.nnet.nodes[node].node_index],
                                       idx)[:, :, offset:offset + dim]
            else:
                x_all = values[node - 1]
                if kind == "linear":
                    idx, w, b = arg
                    values[node] = torch.nn.functional.linear(_select(x_all, idx), w, b)
                elif kind == "tdnn":
                    # one product per time offset, added up (no spliced copy)
                    parts, weights, b = arg
                    y = torch.nn.functional.linear(_select(x_all, parts[0]), weights[0], b)
                    for p, w in zip(parts[1:], weights[1:]):
                        y.add_(torch.nn.functional.linear(_select(x_all, p), w))
                    values[node] = y
                elif kind == "relu":
                    x = _select(x_all, arg)
                    values[node] = x.relu_() if arg is None and self._owned(node) else x.relu()
                elif kind == "batchnorm":
                    idx, scale, offset, block = arg
                    x = _select(x_all, idx)
                    if block == x.shape[2] and idx is None and self._owned(node):
                        values[node] = x.mul_(scale).add_(offset)      # in place
                    else:
                        shape = x.shape
                        values[node] = torch.addcmul(offset, x.reshape(batch, -1, block),
                                                     scale).reshape(shape)
                elif kind == "identity":
                    values[node] = _select(x_all, arg)
                elif kind == "log-softmax":
                    values[node] = torch.log_softmax(_select(x_all, arg), dim=2)
            for src in self.last_readers.get(node, ()):
                del values[src]
        return values[self.out_node]
