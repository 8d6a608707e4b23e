"""The full pipeline reproduces Kaldi's printed optimized computations
(reference/random/NNN/computation.txt and the real vosk TDNN-F model),
with every switch that matters shown to matter."""
from __future__ import annotations

import functools
from pathlib import Path

import pytest

from pynnet3.compile.computation import NnetComputation
from pynnet3.compile.request import ComputationRequest
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import checking_hook, optimize
from pynnet3.optimize.options import OptimizeOptions
from tests.helpers import curated, reference_dir
from tests.optimize.helpers import _case, _compile, _random_case, _random_seeds


def _kaldi_stats(seed: str) -> dict[str, int]:
    text = (reference_dir() / "random" / seed / "stats.txt").read_text()
    return {k: int(v) for k, v, *_ in (line.split() for line in text.splitlines() if line.strip())
            if v.lstrip("-").isdigit()}


def _kaldi_printout_matches(seed: str) -> None:
    nnet, request, comp = _case(seed)
    opt = optimize(OptimizeOptions(), nnet, request, comp, checking_hook(nnet))
    ours = opt.print(nnet.component_names, nnet.node_names)
    kaldi = (reference_dir() / "random" / seed / "computation.txt").read_text()
    stats = _kaldi_stats(seed)
    assert ours == kaldi, (f"{len(opt.commands)} commands / {len(opt.matrices)} matrices, "
                           f"Kaldi {stats['num_commands']} / {stats['num_matrices']}")
    assert opt.matrix_elements_total() == stats["total_matrix_elements"]


# Varied and quick: statistics pooling, distribute, attention (memo), ReLU
# TDNNs with two configs; each has merges, conversions, moved and swapped
# allocations.
# 003 and 058 need Kaldi's unordered_map order of Sum terms (std_order.py).
_FAST_SEEDS = curated("random", ["003", "009", "011", "019", "023", "043", "045", "058"])


@pytest.mark.parametrize("seed", _FAST_SEEDS)
def test_kaldi_printout_reproduced(seed: str) -> None:
    _kaldi_printout_matches(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", _random_seeds() or ["000"])
def test_kaldi_printout_reproduced_all(seed: str) -> None:
    _kaldi_printout_matches(seed)


@pytest.mark.parametrize("seed", _random_seeds() or ["000"])
def test_caching_compiler_reproduces_kaldi_printout(seed: str) -> None:
    """What a user (and bench/compile.py --random) gets: the CachingCompiler
    (shortcut on, the checker before and after optimization, no per-pass
    hook, so the passes share arrays and analyses) gives Kaldi's printout."""
    from pynnet3.cache import CachingCompiler, CachingCompilerOptions

    root = reference_dir()
    if root is None or not (root / "random" / seed / "computation.txt").is_file():
        pytest.skip(f"reference/random/{seed} not available")
    nnet, request, _ = _case(seed)
    compiler = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=True), use_disk=False)
    ours = compiler.compile(request).print(nnet.component_names, nnet.node_names)
    assert ours == (reference_dir() / "random" / seed / "computation.txt").read_text()


# Seeds whose Kaldi printout needs one of this module's passes: switching it
# off must change the result.
@pytest.mark.parametrize("seed,switch", [c for c in [("023", "remove_assignments"),
                                         ("023", "convert_addition"),
                                         ("045", "move_sizing_commands"),
                                         ("043", "allocate_from_other"),
                                         ("009", "initialize_undefined"),
                                         ("023", "propagate_in_place"),
                                         ("009", "allow_left_merge")]
                                         if c[0] in curated("random", [c[0]])])
def test_each_part1_switch_matters(seed: str, switch: str) -> None:
    nnet, request, comp = _case(seed)
    full = optimize(OptimizeOptions(), nnet, request, comp)
    off = optimize(OptimizeOptions(**{switch: False}), nnet, request, comp, checking_hook(nnet))
    assert off.print(nnet.component_names, nnet.node_names) != \
        full.print(nnet.component_names, nnet.node_names)


def test_counts_close_to_kaldi() -> None:
    """Commands and matrices after optimization vs Kaldi's stats.txt, summed
    over the quick seeds plus two with recurrences."""
    ours = kaldi = unopt = 0
    for seed in _FAST_SEEDS + curated("random", ["024", "052"]):
        nnet, request, comp = _case(seed)
        opt = optimize(OptimizeOptions(), nnet, request, comp)
        stats = _kaldi_stats(seed)
        unopt += len(comp.commands)
        ours += len(opt.commands)
        kaldi += stats["num_commands"]
    assert ours <= 1.05 * kaldi and ours < 0.7 * unopt, (unopt, ours, kaldi)


def _vosk_request(nnet: Nnet, path: Path) -> ComputationRequest:
    """The request printed at the top of Kaldi's file, or (where Kaldi
    shortened its index lists) the same request rebuilt: outputs every 3rd
    frame, inputs over the context, ivector at t=0."""
    import re

    from pynnet3.compile.request_io import build_request, parse_printed_request
    from pynnet3.errors import FormatError

    try:
        return parse_printed_request(path.read_text(), str(path))
    except FormatError:
        frames = int(re.search(r"_(\d+)frames", path.name).group(1))
        deriv = ".deriv1." in path.name
        request = build_request(nnet, 1, frames, frame_subsampling_factor=3,
                                need_model_derivative=deriv)
        for io in request.outputs:
            io.has_deriv = deriv
        return request


@functools.lru_cache(maxsize=1)
def _vosk_nnet(path: str) -> Nnet:
    from pynnet3.compile.model_io import read_nnet

    return read_nnet(path)


def _check_vosk(vosk_mdl: Path, name: str) -> None:
    from pynnet3.compile.compiler import Compiler, CompilerOptions

    path = reference_dir() / "compile" / f"computation.{name}.shortcut0.txt"
    nnet = _vosk_nnet(str(vosk_mdl))
    request = _vosk_request(nnet, path)
    comp = Compiler([request], nnet).create_computation(CompilerOptions())
    opt = optimize(OptimizeOptions(), nnet, request, comp, checking_hook(nnet))
    lines = path.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("store-component-stats"))
    kaldi = "\n".join(lines[start + 1:]).lstrip("\n") + "\n"
    assert opt.print(nnet.component_names, nnet.node_names) == kaldi


def test_vosk_training_computation_reproduced(vosk_mdl: Path) -> None:
    """602 commands: merges, in-place ReLUs/batchnorm, swaps, compression."""
    _check_vosk(vosk_mdl, "every_t0-149.seq1.deriv1")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["every_t0-149.seq1.deriv0", "stride3_t0-147_50frames.seq1.deriv0",
                                  "stride3_t0-147_50frames.seq1.deriv1",
                                  "stride3_t0-447_150frames.seq1.deriv0",
                                  "stride3_t0-447_150frames.seq1.deriv1"])
def test_vosk_computations_reproduced(vosk_mdl: Path, name: str) -> None:
    _check_vosk(vosk_mdl, name)


# Seeds whose Kaldi-printed optimized computation our full pipeline (with
# shortcut compilation, as Kaldi's default) reproduces exactly, and where
# switching one of this module's passes off changes the result.
_KALDI_IDENTICAL = {"009": "snip_row_ops", "023": "snip_row_ops", "011": "optimize_row_ops",
                    "018": "optimize_row_ops", "051": "snip_row_ops"}


@pytest.mark.parametrize("seed", curated("random", sorted(_KALDI_IDENTICAL)))
def test_pipeline_reproduces_kaldi_printout(seed: str) -> None:
    from pynnet3.compile.shortcut import compile_via_shortcut
    from pynnet3.optimize import optimize

    nnet, request, _ = _random_case(seed)

    def compile_optimized(options: OptimizeOptions) -> NnetComputation:
        def one(r: ComputationRequest) -> NnetComputation:
            return optimize(options, nnet, r, _compile(nnet, r))
        return compile_via_shortcut(one, nnet, request) or one(request)

    text = compile_optimized(OptimizeOptions()).print(nnet.component_names, nnet.node_names)
    assert text == (reference_dir() / "random" / seed / "computation.txt").read_text()
    off = OptimizeOptions(**{_KALDI_IDENTICAL[seed]: False})
    assert compile_optimized(off).print(nnet.component_names, nnet.node_names) != text


_VOSK_LAYOUTS = {"every_t0-149": (150, 1), "stride3_t0-147_50frames": (50, 3),
                 "stride3_t0-447_150frames": (150, 3)}


def _check_vosk_printout(vosk_mdl: Path, layout: str, deriv: int,
                         passes_that_matter: dict[str, OptimizeOptions]) -> None:
    from pynnet3.compile.request_io import build_request
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.optimize import optimize

    nnet = read_nnet(str(vosk_mdl))
    text = (reference_dir() / "compile" /
            f"computation.{layout}.seq1.deriv{deriv}.shortcut0.txt").read_text()
    header = text[:text.index("\n\n") + 1]
    frames, factor = _VOSK_LAYOUTS[layout]
    request = build_request(nnet, 1, frames, frame_subsampling_factor=factor,
                            need_model_derivative=bool(deriv))
    assert request.print() == header
    comp = _compile(nnet, request)

    def printed(options: OptimizeOptions) -> str:
        return optimize(options, nnet, request, comp).print(nnet.component_names,
                                                             nnet.node_names)

    ours = printed(OptimizeOptions())
    assert ours == text[len(header) + 1:]
    for name, options in passes_that_matter.items():
        assert printed(options) != ours, f"{name} made no difference"


def test_vosk_printout_with_extend_and_compression(vosk_mdl: Path) -> None:
    """Kaldi's optimized computation for the real TDNN-F model (150 frames,
    model derivative) is reproduced exactly; matrix extension, row-op
    replacement and ReLU sign compression all act in it."""
    _check_vosk_printout(vosk_mdl, "every_t0-149", 1, {
        "extend_matrices": OptimizeOptions(extend_matrices=False),
        "replace_row_with_matrix_ops": OptimizeOptions(optimize_row_ops=False),
        "optimize_memory_compression": OptimizeOptions(memory_compression_level=0)})


@pytest.mark.slow
@pytest.mark.parametrize("layout", sorted(_VOSK_LAYOUTS))
@pytest.mark.parametrize("deriv", [0, 1])
def test_vosk_printouts(vosk_mdl: Path, layout: str, deriv: int) -> None:
    _check_vosk_printout(vosk_mdl, layout, deriv,
                         {"extend_matrices": OptimizeOptions(extend_matrices=False)})
