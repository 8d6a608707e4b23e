"""Shortcut compilation inside the pipeline: against pynnet3's compiler,
executor and optimizer, and against Kaldi's printed computations and counts
(the expander's own unit tests are in test_shortcut.py).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3.compile.computation import NnetComputation
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.compile.shortcut import compile_via_shortcut
from pynnet3.nnet.index import Index
from tests.helpers_shortcut import assert_same_computation, kaldi_expanded_cases


# -- against pynnet3's compiler (and executor) ----------------------------------------

def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


needs_compiler = pytest.mark.skipif(not _have("pynnet3.compile.compiler"),
                                    reason="pynnet3.compile.compiler not written yet")


def _widen(request: ComputationRequest, N: int) -> ComputationRequest:
    """``request`` with its first sequence repeated for n = 0 .. N-1 (n-major)."""
    out = ComputationRequest(need_model_derivative=request.need_model_derivative,
                             store_component_stats=request.store_component_stats)
    for src, dst in ((request.inputs, out.inputs), (request.outputs, out.outputs)):
        for io in src:
            first = [ix for ix in io.indexes if ix.n == io.indexes[0].n]
            dst.append(IoSpecification(io.name, [Index(n, t, x) for n in range(N)
                                                 for _, t, x in first], io.has_deriv))
    return out


def _run(comp: NnetComputation, nnet: Any, request: ComputationRequest,
         inputs: dict, out_derivs: dict) -> list[np.ndarray]:
    """Outputs, input derivatives and updated parameters of one forward+backward."""
    import copy

    from pynnet3.compute.computer import NnetComputeOptions, NnetComputer
    from pynnet3.nnet.components import base

    # Components draw from the process-wide generator (dropout masks, the
    # random third of minibatches whose stats are kept): the same seed for
    # both runs, and the caller's generator back afterwards.
    saved = base.rng()
    base.set_random_seed(1234)
    try:
        return _run_seeded(comp, nnet, request, inputs, out_derivs, copy.deepcopy(nnet),
                           NnetComputer, NnetComputeOptions)
    finally:
        base._RNG = saved


def _run_seeded(comp: NnetComputation, nnet: Any, request: ComputationRequest, inputs: dict,
                out_derivs: dict, to_update: Any, NnetComputer: Any,
                NnetComputeOptions: Any) -> list[np.ndarray]:
    c = NnetComputer(NnetComputeOptions(), comp, nnet,
                     nnet_to_update=to_update if request.need_model_derivative else None,
                     nnet_to_store_stats=to_update)
    for io in request.inputs:
        c.accept_input(io.name, inputs[io.name])
    c.run()
    results = [np.array(c.get_output(io.name)) for io in request.outputs]
    if any(io.has_deriv for io in request.outputs):
        for io in request.outputs:
            if io.has_deriv:
                c.accept_input(io.name, out_derivs[io.name])
        c.run()
        results += [np.array(c.get_output(io.name)) for io in request.inputs if io.has_deriv]
    for comp_ in to_update.components:
        results += [v for v in vars(comp_).values()
                    if isinstance(v, np.ndarray) and v.dtype.kind == "f"]
    return results


def _check_shortcut_against_direct(nnet: Any, full: ComputationRequest, N: int,
                                   execute: bool) -> None:
    from pynnet3.compile.compiler import Compiler, CompilerOptions

    calls = []

    def compile_fn(req: ComputationRequest) -> NnetComputation:
        calls.append(req)
        return Compiler([req], nnet).create_computation(CompilerOptions())

    got = compile_via_shortcut(compile_fn, nnet, full)
    assert got is not None and len(calls) == 1
    assert {io.indexes[-1].n for io in calls[0].inputs + calls[0].outputs} == {1}
    want = compile_fn(full)
    assert_same_computation(got, want)
    if execute and _have("pynnet3.compute.computer"):
        rng = np.random.default_rng(N)
        inputs = {io.name: rng.standard_normal((len(io.indexes), nnet.input_dim(io.name)),
                                               dtype=np.float32) for io in full.inputs}
        derivs = {io.name: rng.standard_normal((len(io.indexes), nnet.output_dim(io.name)),
                                               dtype=np.float32) for io in full.outputs}
        a = _run(want, nnet, full, inputs, derivs)
        b = _run(got, nnet, full, inputs, derivs)
        assert len(a) == len(b)
        for x, y in zip(a, b):
            scale = float(np.abs(x).max()) if x.size else 0.0
            assert x.shape == y.shape and float(np.abs(x - y).max(initial=0.0)) <= 1e-5 * scale


def _random_cases() -> list[Path]:
    from tests.helpers import SHARED_REFERENCE

    root = SHARED_REFERENCE / "random"
    return sorted(d for d in root.iterdir() if (d / "final.raw").is_file()) \
        if root.is_dir() else []


def _kaldi_num_commands(case: Path) -> int:
    """Commands of Kaldi's optimized computation for this seed (stats.txt)."""
    for line in (case / "stats.txt").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key.strip(":=") in ("num_commands", "num-commands", "commands"):
            return int(value.strip(" :="))
    return 0


@needs_compiler
@pytest.mark.parametrize("case", _random_cases(), ids=lambda p: p.name)
def test_random_nets_shortcut_equals_direct(case: Path) -> None:
    """Kaldi's random test networks, its request widened to 3 sequences:
    expand(compile(mini)) is compile(full), and runs to the same numbers."""
    from pynnet3.compile.request_io import parse_printed_request
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(str(case / "final.raw"))
    request = parse_printed_request((case / "request.txt").read_text())
    # Executing the biggest networks takes seconds; the slow variant runs them.
    _check_shortcut_against_direct(nnet, _widen(request, 3), 3,
                                   execute=_kaldi_num_commands(case) < 400)


@needs_compiler
@pytest.mark.slow
@pytest.mark.parametrize("case", _random_cases(), ids=lambda p: p.name)
def test_random_nets_shortcut_equals_direct_5(case: Path) -> None:
    from pynnet3.compile.request_io import parse_printed_request
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(str(case / "final.raw"))
    request = parse_printed_request((case / "request.txt").read_text())
    _check_shortcut_against_direct(nnet, _widen(request, 5), 5, execute=True)


_FAST_CONFIGS = {"tdnn_xent_nnet3_wsj_1b", "tdnn_attention_swbd_1a"}


def _config_cases() -> list:
    from tests.helpers import SHARED_REFERENCE

    root = SHARED_REFERENCE / "configs"
    if not root.is_dir():
        return []
    return [pytest.param(d, id=d.name, marks=() if d.name in _FAST_CONFIGS else pytest.mark.slow)
            for d in sorted(root.iterdir())
            if (d / "ref.config").is_file() and not d.name.startswith("xvector")]


@needs_compiler
@pytest.mark.parametrize("case", _config_cases())
def test_recipe_configs_shortcut_equals_direct(case: Path) -> None:
    """Real recipe networks (ref.config), 3 sequences with model derivatives and
    5 with frame subsampling 3."""
    from pynnet3.compile.request_io import build_request
    from pynnet3.nnet.nnet import Nnet

    nnet = Nnet()
    nnet.read_config((case / "ref.config").read_text(), str(case / "ref.config"))
    output = nnet.output_node_names()[0]
    for N, deriv, fsf in ((3, True, 1), (5, False, 3)):
        full = build_request(nnet, num_sequences=N, frames_per_chunk=6,
                             frame_subsampling_factor=fsf, need_model_derivative=deriv,
                             outputs=[output])
        _check_shortcut_against_direct(nnet, full, N, execute=False)


@needs_compiler
def test_vosk_tdnnf_shortcut_equals_direct(vosk_mdl: Path) -> None:
    """The real TDNN-F chain model: a 3-sequence chain-style training request."""
    from pynnet3.compile.request_io import build_request
    from pynnet3.compile.model_io import read_nnet

    nnet = read_nnet(str(vosk_mdl))
    full = build_request(nnet, num_sequences=3, frames_per_chunk=8, frame_subsampling_factor=3,
                         need_model_derivative=True)
    _check_shortcut_against_direct(nnet, full, 3, execute=False)


def _kaldi_expanded_params() -> list:
    return [pytest.param(d, id=d.name,
                         marks=pytest.mark.slow if _kaldi_num_commands(d) >= 600 else ())
            for d in kaldi_expanded_cases()]


@needs_compiler
@pytest.mark.skipif(not _have("pynnet3.optimize.options"), reason="optimizer not written yet")
@pytest.mark.parametrize("case", _kaldi_expanded_params())
def test_shortcut_pipeline_prints_as_kaldi(case: Path) -> None:
    """compile -> optimize the 2-sequence request -> expand, printed, is the
    computation Kaldi printed (Kaldi compiled these through its shortcut)."""
    from pynnet3.compile.compiler import Compiler, CompilerOptions
    from pynnet3.compile.request_io import parse_printed_request
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.optimize import OptimizeOptions, optimize

    nnet = read_nnet(str(case / "final.raw"))
    request = parse_printed_request((case / "request.txt").read_text())

    def compile_fn(req: ComputationRequest) -> NnetComputation:
        return optimize(OptimizeOptions(), nnet, req,
                        Compiler([req], nnet).create_computation(CompilerOptions()))

    got = compile_via_shortcut(compile_fn, nnet, request)
    assert got is not None
    kaldi = (case / "computation.txt").read_text()
    kaldi = kaldi[kaldi.index("matrix "):]
    text = got.print(nnet.component_names, nnet.node_names)
    assert text == kaldi


def _vosk_anchor_rows() -> list:
    """Kaldi's compile anchors for 64-sequence vosk requests with the shortcut on."""
    from tests.helpers import SHARED_REFERENCE

    path = SHARED_REFERENCE / "compile" / "compile_anchor_vosk.tsv"
    if not path.is_file():
        return []
    rows = [line.split("\t") for line in path.read_text().splitlines()
            if line and not line.startswith("#")]
    header, body = rows[0], rows[1:]
    out = []
    for r in body:
        row = dict(zip(header, r))
        if row["num_seq"] == "64" and row["use_shortcut"] == "1":
            cheap = row["layout"] == "stride3_t0-147_50frames" and row["need_model_deriv"] == "1"
            out.append(pytest.param(row, id=f"{row['layout']}-deriv{row['need_model_deriv']}",
                                    marks=() if cheap else pytest.mark.slow))
    return out


@needs_compiler
@pytest.mark.skipif(not _have("pynnet3.optimize.options"), reason="optimizer not written yet")
@pytest.mark.parametrize("row", _vosk_anchor_rows())
def test_vosk_64_sequences_sizes_match_kaldi(row: dict, vosk_mdl: Path) -> None:
    """64 sequences of the real TDNN-F model through compile(2 sequences) ->
    optimize -> expand: Kaldi's command, matrix and element counts."""
    from pynnet3.compile.compiler import Compiler, CompilerOptions
    from pynnet3.compile.request_io import build_request
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.optimize import OptimizeOptions, optimize

    nnet = read_nnet(str(vosk_mdl))
    fsf = 3 if row["layout"].startswith("stride3") else 1
    full = build_request(nnet, num_sequences=64,
                         frames_per_chunk=int(row["num_out_frames_per_seq"]),
                         frame_subsampling_factor=fsf,
                         need_model_derivative=row["need_model_deriv"] == "1")
    assert len(full.inputs[0].indexes) == 64 * int(row["input_frames_per_seq"])

    def compile_fn(req: ComputationRequest) -> NnetComputation:
        return optimize(OptimizeOptions(), nnet, req,
                        Compiler([req], nnet).create_computation(CompilerOptions()))

    got = compile_via_shortcut(compile_fn, nnet, full)
    assert got is not None
    assert (len(got.commands), len(got.matrices), got.matrix_elements_total()) == \
        (int(row["num_commands"]), int(row["num_matrices"]), int(row["total_matrix_elements"]))
