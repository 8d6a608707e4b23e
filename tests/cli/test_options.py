"""Options dataclasses as click options: cli.common.register_options /
options_from, and the option groups of cli/options.py."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import click
import pytest

from pynnet3.cache import CachingCompilerOptions
from pynnet3.cli.common import (KaldiBool, has_option_metadata, normalize_argv, option_fields,
                                options_from, register_options)
from pynnet3.cli.options import (build_compile_options, compiler_and_computation_options,
                                 optimization_options, optimize_options_from)
from pynnet3.optimize.options import OptimizeOptions


@dataclass(frozen=True)
class Toy:
    size: int = field(default=16, metadata={"flag": "size", "help": "How many."})
    scale: float = field(default=0.5, metadata={"flag": "scale", "help": "How much."})
    name: str = field(default="", metadata={"flag": "name", "help": "Which."})
    mode: str = field(default="a", metadata={"flag": "mode", "help": "How.",
                                              "choices": ("a", "b")})
    fast: bool = field(default=False, metadata={"flag": "fast-path", "help": "Hurry."})
    hidden: int = 3


def _command(*decorators):
    def body(**kw):
        body.kw = kw

    f = body
    for d in reversed(decorators):
        f = d(f)
    return click.command()(f), body


def _parse(cmd: click.Command, *argv: str) -> None:
    cmd.main(normalize_argv(list(argv), cmd), standalone_mode=False)


def test_fields_flags_types_defaults_and_help() -> None:
    cmd, _ = _command(register_options(Toy))
    opts = {p.name: p for p in cmd.params}
    assert [p.opts for p in cmd.params] == [["--size"], ["--scale"], ["--name"], ["--mode"],
                                            ["--fast-path"]]
    assert "hidden" not in opts and [f.name for f in option_fields(Toy)][-1] == "fast"
    assert isinstance(opts["fast"].type, KaldiBool) and opts["size"].type is click.INT
    assert opts["scale"].type is click.FLOAT and list(opts["mode"].type.choices) == ["a", "b"]
    assert opts["size"].default == 16 and opts["size"].help == "How many."
    assert opts["size"].show_default and not opts["name"].show_default


def test_round_trip_with_prefix_names_instance_and_overrides() -> None:
    spec = Toy(size=4)                     # a binary's own default, as Kaldi sets it
    cmd, body = _command(register_options(spec, prefix="toy", names=("scale", "size"),
                                          help={"size": "Binary's own help."}))
    assert [p.opts for p in cmd.params] == [["--toy.scale"], ["--toy.size"]]
    assert cmd.params[1].default == 4 and cmd.params[1].help == "Binary's own help."
    _parse(cmd, "--toy.scale=2")
    assert body.kw == {"toy_scale": 2.0, "toy_size": 4}
    kw = dict(body.kw, other=1)
    built = options_from(spec, kw, prefix="toy", hidden=7)
    assert built == Toy(size=4, scale=2.0, hidden=7) and kw == {"other": 1}
    assert options_from(Toy, {"fast": True}) == Toy(fast=True)
    with pytest.raises(KeyError, match="hidden"):
        register_options(Toy, names=("hidden",))


def test_optimization_options_are_kaldis() -> None:
    cmd, body = _command(optimization_options)
    flags = [p.opts[0] for p in cmd.params]
    assert flags[0] == "--optimization.optimize" and len(flags) == 19
    assert "--optimization.optimize-looped-computation" not in flags
    defaults = OptimizeOptions()
    for p in cmd.params:
        assert p.default == getattr(defaults, p.name[len("optimization_"):])
    _parse(cmd, "--optimization.max-deriv-time=7", "--optimization.snip-row-ops=false")
    assert optimize_options_from(dict(body.kw)) == OptimizeOptions(max_deriv_time=7,
                                                                   snip_row_ops=False)


def test_compiler_and_computation_options() -> None:
    cmd, body = _command(compiler_and_computation_options)
    flags = [p.opts[0] for p in cmd.params]
    assert flags[-3:] == ["--compiler.use-shortcut", "--compiler.cache-capacity",
                          "--computation.debug"]
    _parse(cmd, "--compiler.cache-capacity=3", "--computation.debug")
    kw = dict(body.kw)
    optimize, compiler, debug = build_compile_options(kw)
    assert kw == {} and debug is True and optimize == OptimizeOptions()
    assert compiler == CachingCompilerOptions(cache_capacity=3)


@pytest.mark.parametrize("module,cls", [
    ("pynnet3.cache", "CachingCompilerOptions"),
    ("pynnet3.compute.computer", "NnetComputeOptions"),
    ("pynnet3.compute.decodable", "NnetSimpleComputationOptions"),
    ("pynnet3.compute.utterances", "Nnet3ComputeConfig"),
    ("pynnet3.train.trainer", "NnetTrainerOptions"),
    ("pynnet3.train.diagnostics", "NnetComputeProbOptions"),
    ("pynnet3.train.egs_split", "ExampleGenerationConfig"),
    ("pynnet3.train.egs_merge", "ExampleMergingConfig"),
    ("pynnet3.train.egs_tools", "GetEgsOptions"),
    ("pynnet3.train.egs_tools", "CopyEgsOptions"),
    ("pynnet3.nnet.edit", "NnetEditOptions"),
])
def test_library_options_carry_flags(module: str, cls: str) -> None:
    import importlib

    spec = getattr(importlib.import_module(module), cls)
    assert has_option_metadata(spec)
    for f in option_fields(spec):
        assert f.metadata["help"] and "_" not in f.metadata["flag"]
        _command(register_options(spec, names=(f.name,)))   # a click type for each
    assert dataclasses.is_dataclass(spec)


def test_optimization_options_round_trip() -> None:
    """OptimizeOptions registered from its fields' metadata parses back into
    the same dataclass; Kaldi's hidden option stays hidden."""
    import click
    from click.testing import CliRunner

    seen = {}

    @click.command()
    @optimization_options
    def cmd(**kwargs: object) -> None:
        seen["options"] = optimize_options_from(kwargs)
        seen["rest"] = dict(kwargs)

    result = CliRunner().invoke(cmd, ["--optimization.min-deriv-time=-5",
                                      "--optimization.allow-left-merge=false",
                                      "--optimization.memory-compression-level", "2"])
    assert result.exit_code == 0, result.output
    assert seen["options"] == OptimizeOptions(min_deriv_time=-5, allow_left_merge=False,
                                              memory_compression_level=2)
    assert seen["rest"] == {}
    help_text = CliRunner().invoke(cmd, ["--help"]).output
    assert "--optimization.max-deriv-time-relative" in help_text
    assert "optimize-looped-computation" not in help_text
