"""The ONNX model of a :class:`~.exporter.TranslatedNnet`.

One geometry: a plain graph.  Several: the graph has one more input,
``chunk`` (int64 scalar, the index of the geometry in the ``chunks``
metadata), and a tree of ``If`` nodes picks the geometry's subgraph; the
parameters are initializers of the main graph, shared by every subgraph.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .exporter import TranslatedNnet

__all__ = ["to_onnx_model", "export_onnx"]


def _branch(t: TranslatedNnet, k: int, out_names: list[str]) -> Any:
    """Geometry k's program as a subgraph (constants as Constant nodes)."""
    from onnx import TensorProto, helper, numpy_helper

    p = t.programs[k]
    nodes, _ = p.onnx_nodes()
    consts = [helper.make_node("Constant", [], [name], name=f"{name}/Constant",
                               value=numpy_helper.from_array(v, name))
              for name, v in p.constants.items()]
    outs = []
    for (o, value), out_name in zip(p.outputs, out_names):
        nodes.append(helper.make_node("Identity", [value], [out_name],
                                      name=f"{p.prefix}{o}/Identity"))
        outs.append(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, None))
    return helper.make_graph(consts + nodes, f"chunk{k}", [], outs)


def _if_tree(t: TranslatedNnet, lo: int, hi: int, out_names: list[str], nodes: list[Any],
             depth: int) -> None:
    """Nodes (appended to ``nodes``) computing ``out_names`` for chunk in [lo, hi)."""
    from onnx import TensorProto, helper, numpy_helper

    mid = (lo + hi) // 2
    cond = f"chunk_lt_{lo}_{mid}_{hi}"
    mid_name = f"chunk_mid_{lo}_{hi}"
    nodes.append(helper.make_node("Constant", [], [mid_name], name=f"{mid_name}/Constant",
                                  value=numpy_helper.from_array(np.array(mid, np.int64),
                                                                mid_name)))
    nodes.append(helper.make_node("Less", ["chunk", mid_name], [cond], name=f"{cond}/Less"))

    def branch(a: int, b: int, tag: str) -> Any:
        names = [f"{o}_{tag}_{a}_{b}" for o in out_names]
        if b - a == 1:
            g = _branch(t, a, names)
        else:
            inner: list[Any] = []
            _if_tree(t, a, b, names, inner, depth + 1)
            g = helper.make_graph(inner, f"chunks{a}_{b}", [],
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                                   for n in names])
        return g

    nodes.append(helper.make_node("If", [cond], list(out_names), name=f"select_chunk_{lo}_{hi}",
                                  then_branch=branch(lo, mid, "a"),
                                  else_branch=branch(mid, hi, "b")))


def to_onnx_model(t: TranslatedNnet, opset: int = 17) -> Any:
    """The checked ONNX ModelProto."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                            ["input_frames", t.input_dim])]
    if t.ivector_dim:
        inputs.append(helper.make_tensor_value_info("ivector", TensorProto.FLOAT,
                                                    [1, t.ivector_dim]))
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["output_frames", d])
               for o, d in t.outputs]
    out_names = [o for o, _ in t.outputs]
    inits = [numpy_helper.from_array(v, k) for k, v in t.parameters.items()]
    if len(t.programs) == 1:
        p = t.programs[0]
        nodes, consts = p.onnx_nodes()
        for o, value in p.outputs:
            nodes.append(helper.make_node("Identity", [value], [o], name=f"{o}/Identity"))
        inits += consts
    else:
        inputs.append(helper.make_tensor_value_info("chunk", TensorProto.INT64, []))
        nodes = []
        _if_tree(t, 0, len(t.programs), out_names, nodes, 0)
    graph = helper.make_graph(nodes, "pynnet3_nnet3", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="pynnet3", producer_version=t.metadata[
                                  "pynnet3_version"])
    # onnxruntime 1.17 reads IR version 9 (opset 17..20)
    model.ir_version = min(model.ir_version, 9 if opset <= 20 else model.ir_version)
    helper.set_model_props(model, t.metadata)
    onnx.checker.check_model(model, full_check=True)
    return model


def export_onnx(t: TranslatedNnet, path: str, opset: int = 17) -> None:
    """Write the model to ``path`` atomically."""
    from ..io.atomic import atomic_write

    atomic_write(path, to_onnx_model(t, opset).SerializeToString())


def read_model_for_export(rxfilename: str, use_priors: bool) -> tuple[Any, Any, bytes]:
    """(network, priors or None, the file's bytes for the metadata hash) from a
    raw network or an ``.mdl`` (TransitionModel + AmNnetSimple)."""
    import os

    from ..compile.am_nnet import read_mdl
    from ..compile.model_io import read_nnet
    from ..compute.utterances import read_model
    from ..errors import PynnetError

    data = b""
    if os.path.isfile(rxfilename):
        with open(rxfilename, "rb") as f:
            data = f.read()
    if use_priors:
        nnet, priors = read_model(rxfilename, True)
        return nnet, priors, data
    try:
        return read_nnet(rxfilename), None, data
    except PynnetError as raw_error:
        try:
            _, am, _ = read_mdl(rxfilename)
        except PynnetError:
            raise raw_error from None
        return am.nnet, None, data


def nnet3_export_onnx(options: Any, nnet_rxfilename: str, onnx_path: str,
                      use_priors: bool = False) -> Any:
    """nnet3-export-onnx: read, prepare, translate, check and write; returns
    the :class:`~.exporter.TranslatedNnet`."""
    from .. import log
    from .exporter import translate_nnet

    nnet, priors, data = read_model_for_export(nnet_rxfilename, use_priors)
    t = translate_nnet(nnet, options, priors, data)
    export_onnx(t, onnx_path, options.opset)
    log.log(f"Wrote {onnx_path}: {len(t.programs)} chunk geometr"
            f"{'y' if len(t.programs) == 1 else 'ies'}, {len(t.parameters)} parameter tensors, "
            f"outputs {t.metadata['outputs']}")
    return t
