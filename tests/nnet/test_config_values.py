"""Config values as Kaldi reads them: configs are bytes (anything goes in a
comment), and int32 values out of int32's range are refused where they are
parsed (Kaldi's ConfigLine::GetValue / ConvertStringToInteger)."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.nnet.config_line import ConfigLine, parse_int32, read_config_lines
from pynnet3.nnet.nnet import Nnet
from pynnet3.nnet.utils import read_edit_config

TAIL = (b"component name=a type=AffineComponent input-dim=3 output-dim=4\n"
        b"component-node name=a component=a input=input\n"
        b"output-node name=output input=a\n")


def test_parse_int32_follows_convert_string_to_integer() -> None:
    assert parse_int32("2147483647") == 2147483647
    assert parse_int32(" -2147483648 ") == -2147483648
    assert parse_int32("+7") == 7
    for bad in ("2147483648", "-2147483649", "99999999999999999999", "1_000", "1e3", "",
                "0x10", "\u0663"):
        assert parse_int32(bad) is None, bad


@pytest.mark.parametrize("key,value", [("input-dim", "2147483648"),
                                       ("output-dim", "99999999999999999999"),
                                       ("input-dim", "-2147483649")])
def test_int_beyond_int32_names_key_and_range(key: str, value: str) -> None:
    line = f"component name=a type=AffineComponent {key}={value}"
    cfl = ConfigLine(line, "x.config", 2)
    with pytest.raises(ConfigError) as e:
        cfl.get_int(key)
    msg = str(e.value)
    assert msg.startswith("x.config:2: ") and f"{key}={value}" in msg
    assert "-2147483648 .. 2147483647" in msg


def test_int_list_beyond_int32() -> None:
    cfl = ConfigLine("component name=a sizes=1,2,4294967296", "x.config", 1)
    with pytest.raises(ConfigError, match=r"sizes=.*4294967296: out of range"):
        cfl.get_int_list("sizes")


@pytest.mark.parametrize("line,what", [
    ("input-node name=input dim=2147483648", "dim=2147483648"),
    ("component name=b type=RepeatedAffineComponent input-dim=6 output-dim=4 "
     "num-repeats=4294967296", "num-repeats=4294967296"),
    ("component name=b type=SumGroupComponent sizes=2,99999999999", "sizes="),
    ("component name=b type=TdnnComponent input-dim=3 output-dim=4 "
     "time-offsets=0,3000000000", "time-offsets"),
    ("component name=b type=NaturalGradientAffineComponent input-dim=-5 output-dim=4",
     "input-dim"),
])
def test_out_of_range_values_in_a_network_config(line: str, what: str) -> None:
    text = b"input-node name=input dim=3\n" + line.encode() + b"\n" + TAIL
    if line.startswith("input-node"):
        text = line.encode() + b"\n" + TAIL
    with pytest.raises(ConfigError) as e:
        Nnet().read_config(text, "net.config")
    assert f"net.config:{1 if line.startswith('input-node') else 2}:" in str(e.value)
    assert what in str(e.value)


def test_dimensions_beyond_memory_are_a_config_error() -> None:
    # Each dim is a valid int32; their product is far beyond any memory.
    text = (b"input-node name=input dim=3\n"
            b"component name=big type=AffineComponent input-dim=2147483647 "
            b"output-dim=2147483647\n" + TAIL)
    with pytest.raises(ConfigError, match=r"net.config:2: component big: not enough memory"):
        Nnet().read_config(text, "net.config")


@pytest.mark.parametrize("dims", ["input-x-dim=0", "filt-x-dim=-1", "filt-y-step=0",
                                  "filt-x-dim=9"])
def test_convolution_dims_are_checked(dims: str) -> None:
    key = dims.split("=")[0]
    base = {"input-x-dim": "5", "input-y-dim": "4", "input-z-dim": "2", "filt-x-dim": "3",
            "filt-y-dim": "2", "filt-x-step": "1", "filt-y-step": "2"}
    base[key] = dims.split("=")[1]
    line = ("component name=c type=ConvolutionComponent num-filters=3 "
            + " ".join(f"{k}={v}" for k, v in base.items()))
    with pytest.raises(ConfigError, match="ConvolutionComponent|filter"):
        Nnet().read_config(b"input-node name=input dim=40\n" + line.encode() + b"\n", "c.config")


def test_latin1_bytes_in_comments_are_accepted() -> None:
    text = (b"# r\xe9seau de neurones \xff\xfe\n"
            b"input-node name=input dim=3   # entr\xe9e\n" + TAIL)
    nnet = Nnet()
    nnet.read_config(text, "net.config")
    assert nnet.output_dim("output") == 4
    # Line numbers still count the comment lines.
    assert read_config_lines(text, "net.config")[0] == (2, "input-node name=input dim=3")


def test_non_utf8_byte_outside_a_comment_names_file_line_byte_column() -> None:
    text = b"input-node name=input dim=3\n  component name=\xe9 type=AffineComponent\n"
    with pytest.raises(ConfigError) as e:
        Nnet().read_config(text, "net.config")
    msg = str(e.value)
    assert msg == ("net.config:2: byte 0xe9 at column 18 is not valid UTF-8 text (bytes "
                   "that are not UTF-8 are allowed only in comments)")


def test_edits_config_bytes() -> None:
    nnet = Nnet()
    nnet.read_config(b"input-node name=input dim=3\n" + TAIL, "net.config")
    read_edit_config(b"# \xe9dition\nset-learning-rate learning-rate=0.5 # \xe9\n", nnet, "e.cfg")
    assert nnet.components[0].learning_rate == 0.5
    with pytest.raises(ConfigError, match=r"e\.cfg:1: byte 0xe9 at column 5"):
        read_edit_config(b"set-\xe9 learning-rate=0.5\n", nnet, "e.cfg")
    # The same bytes as they reach us from a command line (surrogateescape).
    with pytest.raises(ConfigError, match=r"--edits:1: byte 0xe9"):
        read_edit_config(b"set-\xe9".decode("utf-8", "surrogateescape"), nnet, "--edits")


# ---------------------------------------------------------------------------
# Found by tests/cli/test_fuzz_inputs.py: each was an internal error or a
# runaway computation, now one clear error.


@pytest.mark.parametrize("line", [
    b"component name=b type=BackpropTruncationComponent dim=4 clipping-threshold=nan",
    b"component name=b type=AffineComponent input-dim=4 output-dim=4 param-stddev=nan"])
def test_nan_where_kaldi_asserts_a_value_is_a_config_error(line: bytes) -> None:
    text = (b"input-node name=input dim=4\n" + line + b"\n"
            b"component-node name=b component=b input=input\noutput-node name=output input=b\n")
    with pytest.raises(ConfigError, match=r"net.config:2: "):
        Nnet().read_config(text, "net.config")


POOLING = (b"input-node name=input dim=27\n"
           b"component name=extraction type=StatisticsExtractionComponent input-dim=27 "
           b"input-period=2 output-period=6 include-variance=false\n"
           b"component name=pooling type=StatisticsPoolingComponent input-dim=28 input-period=6 "
           b"left-context=18 right-context=18 num-log-count-features=0 output-stddevs=false\n"
           b"component name=affine type=AffineComponent input-dim=27 output-dim=27\n"
           b"component-node name=extraction component=extraction input=input\n"
           b"component-node name=pooling component=pooling input=extraction\n"
           b"component-node name=affine component=affine input=input\n"
           b"output-node name=output input=Sum(affine, Round(pooling, 6))\n")


def test_descriptor_asking_pooling_for_missing_times() -> None:
    from pynnet3.compile.graph.context import nnet_info

    nnet = Nnet()
    nnet.read_config(POOLING, "pool.config")
    assert nnet_info(nnet).startswith("left-context: ")
    # Round(pooling, 19) asks for t=19, 38 ...: pooling outputs exist only
    # at multiples of its input-period 6 (Kaldi asserts).
    nnet = Nnet()
    nnet.read_config(POOLING.replace(b"Round(pooling, 6)", b"Round(pooling, 19)"), "pool.config")
    with pytest.raises(ConfigError, match="not a multiple of its input-period 6"):
        nnet_info(nnet)


@pytest.mark.parametrize("context", [b"left-context=100002", b"right-context=2147483646"])
def test_statistics_pooling_context_limit(context: bytes) -> None:
    key = context.split(b"=")[0] + b"=18"
    from pynnet3.compile.model_io import nnet_bytes, nnet_from_bytes
    from pynnet3.errors import FormatError

    with pytest.raises(ConfigError, match=r"pool.config:3: .*at most 100000"):
        Nnet().read_config(POOLING.replace(key, context, 1)
                           .replace(b"input-period=6", b"input-period=1", 1), "pool.config")
    # The same in a model file (Kaldi's reader has no limit; the context
    # computation would exhaust memory).
    nnet = Nnet()
    nnet.read_config(POOLING, "pool.config")
    text = nnet_bytes(nnet, False).replace(b"<LeftContext> 18", b"<LeftContext> 1200000")
    with pytest.raises(FormatError, match="at most 100000"):
        nnet_from_bytes(text, "pool.raw")


def test_statistics_extraction_period_limit() -> None:
    text = POOLING.replace(b"output-period=6", b"output-period=16777216")
    with pytest.raises(ConfigError, match=r"pool.config:2: .*at most 100000"):
        Nnet().read_config(text, "pool.config")


def test_float_values_are_kaldi_base_floats() -> None:
    # Kaldi's GetValue for a BaseFloat: float32, out of its range fails
    # (an edits config with learning-rate-factor=-1e39 crashed at write).
    cfl = ConfigLine("component name=a learning-rate=1e39 l2=1e38 x=-inf y=0.1 z=1_0",
                     "x.config", 4)
    with pytest.raises(ConfigError, match=r"x.config:4: option learning-rate=1e39: out of the "
                                          r"range of a float"):
        cfl.get_float("learning-rate")
    assert cfl.get_float("l2") == pytest.approx(1e38)
    assert cfl.get_float("x") == float("-inf")
    assert cfl.get_float("y") == float(np.float32(0.1))
    with pytest.raises(ConfigError, match="expected a number"):
        cfl.get_float("z")
    nnet = Nnet()
    nnet.read_config(b"input-node name=input dim=3\n" + TAIL, "net.config")
    with pytest.raises(ConfigError, match=r"e.cfg:1: .*out of the range"):
        read_edit_config(b"set-learning-rate-factor learning-rate-factor=-1e39\n", nnet, "e.cfg")
