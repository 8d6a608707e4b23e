"""The context of feed-forward networks from what each output frame reads
(pynnet3.compile.graph.context_reads) must equal Kaldi's graph-based answer, which
compute_simple_nnet_context still computes with
``fast_paths.override(context_from_reads=False)``:

* hand-made networks for each kind of dependency: Offset, Append, Sum,
  Scale, Const, ReplaceIndex (a fixed iVector frame), Round and Switch (a
  modulus above 1), dim-range nodes, TDNN components with time offsets;
* networks it must decline (IfDefined, Failover, recurrence, components that
  accept missing inputs), where the graphs are built as before;
* random networks of the project's generator, and every reference network
  (Kaldi's random test networks, recipe configs, the vosk TDNN-F model);
  the contexts in Kaldi's own nnet3-info printouts are checked by
  tests/nnet/test_graph.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3 import fast_paths
from pynnet3.compile.graph.context import compute_simple_nnet_context, is_simple_nnet
from pynnet3.compile.graph.context_reads import output_reads
from pynnet3.nnet.nnet import Nnet
from pynnet3.testing.generate import generate_config_sequence, nnet_from_configs
from tests.helpers import reference_dir

HEAD = "input-node name=input dim=4\ninput-node name=ivector dim=3\n"


def nnet_of(body: str) -> Nnet:
    nnet = Nnet()
    nnet.read_config(HEAD + body, "test")
    return nnet


def both(nnet: Nnet) -> tuple[tuple[int, int], tuple[int, int]]:
    with fast_paths.override(context_from_reads=False):
        graphs = compute_simple_nnet_context(nnet)
    return compute_simple_nnet_context(nnet), graphs


FAST_CASES = {
    "offsets": """component name=a type=AffineComponent input-dim=15 output-dim=5
component-node name=a component=a input=Append(Offset(input, -3), input, Offset(input, 2), ReplaceIndex(ivector, t, 0))
output-node name=output input=Sum(Offset(a, 1), Scale(0.5, Offset(a, -1)))
""",
    "tdnn-and-dim-range": """component name=t type=TdnnComponent input-dim=4 output-dim=6 time-offsets=-2,0,3
component-node name=t component=t input=input
dim-range-node name=d input-node=t dim-offset=2 dim=3
component name=r type=RectifiedLinearComponent dim=3
component-node name=r component=r input=Offset(d, -1)
output-node name=output input=Append(r, Const(1.0, 2), ReplaceIndex(ivector, t, 0))
""",
    "round": """component name=a type=AffineComponent input-dim=7 output-dim=5
component-node name=a component=a input=Append(Round(input, 3), ReplaceIndex(ivector, t, 0))
output-node name=output input=Offset(a, 2)
""",
    "round-ivector": """component name=a type=AffineComponent input-dim=7 output-dim=5
component-node name=a component=a input=Append(Offset(input, 1), Round(ivector, 4))
output-node name=output input=a
""",
    "switch": """component name=a type=AffineComponent input-dim=4 output-dim=4
component-node name=a component=a input=Switch(Offset(input, -1), Offset(input, 2))
output-node name=output input=Sum(a, Offset(input, 4))
""",
    "subsampled-tdnn": """component name=t1 type=TdnnComponent input-dim=4 output-dim=6 time-offsets=-1,0,1
component-node name=t1 component=t1 input=input
component name=t2 type=TdnnComponent input-dim=6 output-dim=5 time-offsets=-3,0,3
component-node name=t2 component=t2 input=t1
output-node name=output input=Append(Offset(t2, -6), t2, ReplaceIndex(ivector, t, 0))
""",
}

SLOW_CASES = {
    "if-defined": """component name=a type=AffineComponent input-dim=4 output-dim=4
component-node name=a component=a input=Sum(input, IfDefined(Offset(input, -5)))
output-node name=output input=a
""",
    "failover": """component name=a type=AffineComponent input-dim=4 output-dim=4
component-node name=a component=a input=Failover(Offset(input, 3), input)
output-node name=output input=a
""",
    "recurrent": """component name=a type=AffineComponent input-dim=8 output-dim=4
component-node name=a component=a input=Append(input, IfDefined(Offset(a, -1)))
output-node name=output input=a
""",
    "statistics": """component name=e type=StatisticsExtractionComponent input-dim=4 input-period=1 output-period=1 include-variance=false
component-node name=e component=e input=input
component name=p type=StatisticsPoolingComponent input-dim=5 input-period=1 left-context=3 right-context=2 num-log-count-features=0 output-stddevs=false
component-node name=p component=p input=e
output-node name=output input=p
""",
}


@pytest.mark.parametrize("name", sorted(FAST_CASES))
def test_fast_path_agrees_with_graphs(name: str) -> None:
    nnet = nnet_of(FAST_CASES[name])
    assert output_reads(nnet, nnet.modulus()) is not None
    fast, graph = both(nnet)
    assert fast == graph


def test_hand_checked_contexts() -> None:
    # offsets: a reads input t-3 .. t+2; output reads a at t-1 and t+1.
    assert both(nnet_of(FAST_CASES["offsets"]))[0] == (4, 3)
    # tdnn: offsets -2..3 then Offset(-1): input t-3 .. t+2.
    assert both(nnet_of(FAST_CASES["tdnn-and-dim-range"]))[0] == (3, 2)
    # two TDNN layers (t1: -1..1, t2: -3..3) and Offset(t2, -6): t-10 .. t+4.
    assert both(nnet_of(FAST_CASES["subsampled-tdnn"]))[0] == (10, 4)


@pytest.mark.parametrize("name", sorted(SLOW_CASES))
def test_other_networks_build_graphs(name: str) -> None:
    try:
        nnet = nnet_of(SLOW_CASES[name])
    except Exception as e:  # noqa: BLE001 (a component this checkout lacks)
        pytest.skip(f"network not buildable here: {e}")
    assert output_reads(nnet, nnet.modulus()) is None
    fast, graph = both(nnet)
    assert fast == graph


def test_generated_networks() -> None:
    rng = np.random.default_rng(5)
    checked = fast = 0
    for _ in range(40):
        try:
            nnet = nnet_from_configs(generate_config_sequence(None, rng))
        except Exception:  # noqa: BLE001 (a network type this checkout cannot build)
            continue
        if not is_simple_nnet(nnet):
            continue
        checked += 1
        fast += output_reads(nnet, nnet.modulus()) is not None
        a, b = both(nnet)
        assert a == b
    assert checked >= 10 and fast >= 3


def _reference_networks() -> list[str]:
    root = reference_dir()
    return ([str(p) for p in sorted((root / "random").glob("*/final.raw"))]
            + [str(p) for p in sorted((root / "configs").glob("*/ref.config"))
               if "xvector" not in str(p)])  # (its graphs take ~10 s)


@pytest.mark.slow
def test_reference_networks() -> None:
    from pynnet3.compile.model_io import read_nnet

    fast = 0
    for path in _reference_networks():
        if path.endswith(".config"):
            nnet = Nnet()
            nnet.read_config(open(path).read(), path)
        else:
            nnet = read_nnet(path)
        fast += output_reads(nnet, nnet.modulus()) is not None
        a, b = both(nnet)
        assert a == b, path
    assert fast >= 20


def test_vosk_is_fast(vosk_mdl: object) -> None:
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(str(vosk_mdl))
    assert output_reads(nnet, nnet.modulus()) is not None
    assert compute_simple_nnet_context(nnet) == (34, 34)   # Kaldi's nnet3-am-info
