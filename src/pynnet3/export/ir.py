"""A small tensor program (SSA, ONNX operator names and semantics) that the
translation of an NnetComputation writes, and its two emitters: an ONNX
graph (:meth:`Program.to_onnx_graph`) and a PyTorch interpreter
(:func:`torch_module` in :mod:`.torch_export`).

Only the operators the translation uses are allowed (:data:`OPS`), each with
the ONNX meaning at opset 17; constant integer inputs (shapes, indexes,
slice bounds) are always constants, so the PyTorch side can read them.
Values that are a component's parameters are *parameters* (named
``<component>.<what>``): ONNX initializers, nn.Parameters in PyTorch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Node", "Program", "OPS"]

# Operators a Program may contain (ONNX opset-17 semantics).
OPS = frozenset({
    "Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Gather", "Concat", "Slice", "Reshape",
    "Transpose", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Max", "Min", "ReduceSum",
    "Softmax", "LogSoftmax", "Identity", "Neg", "Abs", "Tile", "Expand"})


@dataclass
class Node:
    op: str
    inputs: list[str]
    output: str
    attrs: dict[str, Any]
    name: str


@dataclass
class Program:
    """Nodes in execution order; constants and parameters by name."""

    nodes: list[Node] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    # parameter name -> array (float32); shared by every sub-program of an export
    parameters: dict[str, np.ndarray] = field(default_factory=dict)
    inputs: list[tuple[str, int]] = field(default_factory=list)      # (name, num_cols)
    outputs: list[tuple[str, str]] = field(default_factory=list)     # (public name, value)
    prefix: str = ""
    _counter: int = 0
    _const_cache: dict[tuple, str] = field(default_factory=dict)

    def fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{self.prefix}{hint}__{self._counter}"

    def op(self, op: str, inputs: list[str], name: str = "", **attrs: Any) -> str:
        if op not in OPS:
            raise ValueError(f"operator {op} is not in the export's operator set")
        out = self.fresh(name or op.lower())
        self.nodes.append(Node(op, list(inputs), out, attrs, f"{self.prefix}{name or op}"
                               f"/{op}_{self._counter}"))
        return out

    def const(self, value: Any, dtype: Any = np.float32) -> str:
        arr = np.ascontiguousarray(np.asarray(value, dtype=dtype))
        key = None
        if arr.size <= 16:
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            if key in self._const_cache:
                return self._const_cache[key]
        name = self.fresh("const")
        self.constants[name] = arr
        if key is not None:
            self._const_cache[key] = name
        return name

    def ints(self, values: Any) -> str:
        return self.const(values, np.int64)

    def param(self, name: str, value: Any) -> str:
        """A component parameter, shared by name across sub-programs."""
        arr = np.ascontiguousarray(np.asarray(value, dtype=np.float32))
        old = self.parameters.get(name)
        if old is not None and (old.shape != arr.shape or not np.array_equal(old, arr)):
            raise ValueError(f"parameter {name} given two different values")
        self.parameters[name] = arr
        return name

    def const_value(self, name: str) -> np.ndarray:
        return self.constants[name]

    # -- ONNX ---------------------------------------------------------------
    def onnx_nodes(self) -> tuple[list[Any], list[Any]]:
        """(nodes, constant initializers) of this program for an ONNX graph."""
        from onnx import helper, numpy_helper

        nodes = [helper.make_node(n.op, n.inputs, [n.output], name=n.name, **n.attrs)
                 for n in self.nodes]
        inits = [numpy_helper.from_array(v, k) for k, v in self.constants.items()]
        return nodes, inits
