"""Networks, requests and builders shared by the graph-stage tests (tests/compile)."""
from __future__ import annotations

from pynnet3 import fast_paths
from pynnet3.compile.graph.builder import ComputationGraphBuilder
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import PynnetError
from pynnet3.nnet.index import Index
from pynnet3.nnet.nnet import Nnet
from tests.helpers import reference_dir


def graph_builder(nnet: Nnet, fast: bool = True, jit_from: int = 0) -> ComputationGraphBuilder:
    """A builder with the accelerations on (``fast``; the Numba loops from
    requests of ``jit_from`` cindexes on, by default always, so that tests of
    small requests check them) or Kaldi's algorithm alone."""
    with fast_paths.override(graph=fast, graph_jit_from=jit_from):
        return ComputationGraphBuilder(nnet)


TDNN = """
input-node name=input dim=4
component name=a1 type=AffineComponent input-dim=12 output-dim=5
component name=r1 type=RectifiedLinearComponent dim=5
component name=a2 type=AffineComponent input-dim=10 output-dim=3
component-node name=a1 component=a1 input=Append(Offset(input, -1), input, Offset(input, 2))
component-node name=r1 component=r1 input=a1
component-node name=a2 component=a2 input=Append(Offset(r1, -3), Offset(r1, 3))
output-node name=output input=a2
"""


# Every kind of descriptor expression, a dim-range node and a Failover whose
# second branch (node y) is computable but unused, so pruning drops it.
MIXED = """
input-node name=input dim=2
input-node name=ivector dim=2
component name=y type=RectifiedLinearComponent dim=2
component-node name=y component=y input=input
component name=a type=AffineComponent input-dim=4 output-dim=2
component-node name=a component=a input=Append(Failover(Offset(input, -1), y), \
ReplaceIndex(ivector, t, 0))
component name=b type=AffineComponent input-dim=6 output-dim=2
component-node name=b component=b input=Append(IfDefined(Offset(a, 2)), \
Switch(a, Offset(a, 1)), Round(a, 3))
dim-range-node name=d input-node=b dim-offset=0 dim=1
component name=c type=AffineComponent input-dim=2 output-dim=2
component-node name=c component=c input=Append(d, Sum(Offset(d, -1), Const(1.0, 1)))
output-node name=output input=c
"""


def frames_of(t0: int, t1: int, num_seq: int = 1) -> list[Index]:
    return [Index(n, t, 0) for n in range(num_seq) for t in range(t0, t1)]


def parse_kaldi_request(text: str) -> ComputationRequest:
    """Read the text form of Kaldi's ComputationRequest::Write (tests only)."""
    tokens = text.split()
    pos = 0

    def take():
        nonlocal pos
        pos += 1
        return tokens[pos - 1]

    def expect(tok):
        got = take()
        assert got == tok, (got, tok)

    def read_io():
        expect("<IoSpecification>")
        name = take()
        expect("<NumIndexes>")
        num = int(take())
        expect("<Indexes>")
        expect("<I1V>")
        assert int(take()) == num
        indexes = []
        for _ in range(num):
            expect("<I1>")
            indexes.append(Index(int(take()), int(take()), int(take())))
        expect("<HasDeriv>")
        has_deriv = take() == "T"
        expect("</IoSpecification>")
        return IoSpecification(name, indexes, has_deriv)

    req = ComputationRequest()
    expect("<ComputationRequest>")
    expect("<NumInputs>")
    num_in = int(take())
    expect("<Inputs>")
    req.inputs = [read_io() for _ in range(num_in)]
    expect("<NumOutputs>")
    num_out = int(take())
    expect("<Outputs>")
    req.outputs = [read_io() for _ in range(num_out)]
    expect("<NeedModelDerivative>")
    req.need_model_derivative = take() == "T"
    expect("<StoreComponentStats>")
    req.store_component_stats = take() == "T"
    expect("</ComputationRequest>")
    return req


def tdnnf_config(num_layers: int) -> str:
    """A TDNN-F-like stack: ~100 nodes with Append/Offset/Sum/Scale descriptors."""
    lines = ["input-node name=input dim=8", "input-node name=ivector dim=4",
             "component name=lda type=AffineComponent input-dim=28 output-dim=8",
             "component-node name=lda component=lda "
             "input=Append(Offset(input, -1), input, Offset(input, 1), ReplaceIndex(ivector, t, 0))"]
    prev = "lda"
    for i in range(num_layers):
        lines += [
            f"component name=l{i} type=AffineComponent input-dim=16 output-dim=4",
            f"component-node name=l{i} component=l{i} input=Append(Offset({prev}, -1), {prev})",
            f"component name=a{i} type=AffineComponent input-dim=8 output-dim=8",
            f"component-node name=a{i} component=a{i} input=Append(l{i}, Offset(l{i}, 1))",
            f"component name=r{i} type=RectifiedLinearComponent dim=8",
            f"component-node name=r{i} component=r{i} input=a{i}",
            f"component name=n{i} type=RectifiedLinearComponent dim=8",
            f"component-node name=n{i} component=n{i} input=Sum(Scale(0.66, {prev}), r{i})",
        ]
        prev = f"n{i}"
    lines += ["component name=final type=AffineComponent input-dim=8 output-dim=5",
              f"component-node name=final component=final input={prev}",
              "output-node name=output input=final"]
    return "\n".join(lines) + "\n"


def reference_random_cases():
    """(name, network, request) of Kaldi's random test networks that have a
    request (networks with a component type we lack are left out)."""
    ref = reference_dir()
    for d in sorted((ref / "random").iterdir()):
        if not (d / "request.kaldi-text").is_file():
            continue
        nnet = Nnet()
        try:
            for cfg in sorted(d.glob("config*.txt"), key=lambda p: int(p.stem[6:])):
                nnet.read_config(cfg.read_text(), str(cfg))
        except PynnetError as e:
            if "unknown component type" in str(e):
                continue
            raise
        yield d.name, nnet, parse_kaldi_request((d / "request.kaldi-text").read_text())
