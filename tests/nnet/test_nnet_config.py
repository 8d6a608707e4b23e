"""Config parsing and validation of the Nnet (Kaldi's Nnet::ReadConfig / Check)."""
from __future__ import annotations

import pytest

from pynnet3.compile.graph.context import nnet_info
from pynnet3.compile.model_io import nnet_bytes
from pynnet3.errors import ConfigError
from pynnet3.io.kaldi_io import KaldiReader
from pynnet3.nnet.config_line import ConfigLine
from pynnet3.nnet.nnet import Nnet, NodeType, ObjectiveType

SMALL = """
input-node name=input dim=10
component name=affine1 type=AffineComponent input-dim=30 output-dim=8
component name=relu1 type=RectifiedLinearComponent dim=8
component name=final type=AffineComponent input-dim=8 output-dim=5
component name=softmax type=LogSoftmaxComponent dim=5
component-node name=affine1 component=affine1 input=Append(Offset(input, -1), input, Offset(input, 1))
component-node name=relu1 component=relu1 input=affine1
dim-range-node name=half input-node=relu1 dim-offset=0 dim=4
component-node name=final component=final input=relu1
component-node name=softmax component=softmax input=final
output-node name=output input=softmax
output-node name=output-half input=half objective=quadratic
"""


def make(text: str = SMALL) -> Nnet:
    nnet = Nnet()
    nnet.read_config(text, "test.config")
    return nnet


def test_config_line_values_with_spaces_and_quotes() -> None:
    c = ConfigLine("component-node name=a input=Append(Offset(x, -1), x) component='my comp' k=\"v w\"")
    assert c.first_token == "component-node"
    assert c.get_str("input") == "Append(Offset(x, -1), x)"
    assert c.get_str("component") == "my comp"
    assert c.get_str("k") == "v w"
    assert c.unused_values() == ["name=a"]


def test_nodes_expand_as_in_kaldi() -> None:
    nnet = make()
    # A component-node becomes '<name>_input' (descriptor) + the component node.
    assert nnet.node_names[:3] == ["input", "affine1_input", "affine1"]
    assert nnet.nodes[1].node_type is NodeType.DESCRIPTOR
    assert nnet.nodes[2].node_type is NodeType.COMPONENT
    assert nnet.is_component_input_node(1) and not nnet.is_output_node(1)
    assert nnet.output_node_names() == ["output", "output-half"]
    assert nnet.nodes[nnet.get_node_index("output-half")].objective_type is ObjectiveType.QUADRATIC
    assert nnet.node_dim(nnet.get_node_index("half")) == 4
    assert nnet.output_dim("output") == 5 and nnet.input_dim("input") == 10
    assert nnet.num_parameters() == 30 * 8 + 8 + 8 * 5 + 5


def test_config_lines_and_info_lines() -> None:
    nnet = make()
    lines = nnet.get_config_lines(include_dim=True)
    assert lines[1] == ("component-node name=affine1 component=affine1 input=Append(Offset(input, -1), "
                        "input, Offset(input, 1)) input-dim=30 output-dim=8")
    assert "dim-range-node name=half input-node=relu1 dim-offset=0 dim=4" in lines
    assert lines[-1] == "output-node name=output-half input=half dim=4 objective=quadratic"
    info = nnet_info(nnet)
    assert info.startswith("left-context: 1\nright-context: 1\nnum-parameters: 293\nmodulus: 1\n")


def test_second_config_replaces_definitions() -> None:
    nnet = make()
    nnet.read_config("component name=final type=AffineComponent input-dim=4 output-dim=5\n"
                     "component-node name=final component=final input=half\n", "second.config")
    assert nnet.component_for_node(nnet.get_node_index("final")).input_dim() == 4
    # Kaldi drops the earlier line and keeps the new one where it appears,
    # i.e. after all the existing nodes.
    assert nnet.node_names[-2:] == ["final_input", "final"]


@pytest.mark.parametrize("bad, message", [
    ("input-node name=input dim=10\nfoo name=x\n", "invalid config line type 'foo'"),
    ("input-node name=input dim=ten\noutput-node name=output input=input\n", "expected an integer"),
    ("input-node name=input dim=10\ncomponent name=a type=NoSuchComponent dim=3\n"
     "output-node name=output input=input\n", "unknown component type 'NoSuchComponent'"),
    ("input-node name=input dim=10\noutput-node name=output input=nosuchnode\n", "nosuchnode"),
    ("input-node name=input dim=10\ncomponent name=a type=AffineComponent input-dim=11 output-dim=3\n"
     "component-node name=a component=a input=input\noutput-node name=output input=a\n",
     "dimension mismatch for network-node a: input-dim 10 versus component-input-dim 11"),
    ("input-node name=input dim=10\ncomponent name=a type=RectifiedLinearComponent dim=10\n"
     "component name=b type=RectifiedLinearComponent dim=10\n"
     "component-node name=a component=a input=Sum(input, b)\ncomponent-node name=b component=b input=a\n"
     "output-node name=output input=b\n", "cycle"),
    ("input-node name=input dim=10\ncomponent name=a type=RectifiedLinearComponent dim=10 foo=bar\n"
     "component-node name=a component=a input=input\noutput-node name=output input=a\n",
     "foo=bar"),
    ("input-node name=input dim=10\ninput-node name=input dim=12\noutput-node name=output input=input\n",
     "appears twice"),
])
def test_bad_configs_name_the_line(bad: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        make(bad)
    text = str(e.value)
    assert message in text
    assert "test.config" in text


def test_error_names_line_number() -> None:
    with pytest.raises(ConfigError) as e:
        make("input-node name=input dim=10\n# comment\n\ncomponent name=a type=Bogus dim=3\n")
    assert "test.config:4" in str(e.value)


@pytest.mark.parametrize("binary", [True, False])
def test_model_round_trip(binary: bool) -> None:
    nnet = make()
    data = nnet_bytes(nnet, binary)
    start = 2 if binary else 0
    again = Nnet.read(KaldiReader(data, binary, "mem", pos=start))
    assert nnet_bytes(again, binary) == data
    assert again.info() == nnet.info()


def test_descriptor_names_resolve_against_the_whole_config_once() -> None:
    """Descriptors may name nodes defined further down (the lookup is made
    after every node line was seen), descriptor-node names stay hidden, and
    a config that fails half-way leaves no lookup behind."""
    nnet = make(SMALL.replace("component-node name=final component=final input=relu1",
                              "component-node name=final component=final input=Sum(relu1, "
                              "Scale(0.0, Offset(relu1, 1)))"))
    assert nnet.nodes[nnet.get_node_index("final") - 1].descriptor.get_node_dependencies() \
        == [nnet.get_node_index("relu1")]
    with pytest.raises(ConfigError, match="output"):
        make(SMALL.replace("output-node name=output input=softmax",
                           "output-node name=output input=output-half"))
    bad = Nnet()
    with pytest.raises(ConfigError):
        bad.read_config(SMALL.replace("input=final", "input=nosuchnode"))
    assert bad._descriptor_lookup is None
