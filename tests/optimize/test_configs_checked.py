"""Every real recipe config optimizes with the ComputationChecker run after
every pass, for a forward-only and a training request (the optimizer issue's
acceptance test on ../shared/reference/configs)."""
from __future__ import annotations

from pathlib import Path

import pytest

from pynnet3.compile.compiler import Compiler, CompilerOptions
from pynnet3.compile.request_io import build_request
from pynnet3.nnet.nnet import Nnet
from pynnet3.optimize import checking_hook, optimize
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.options import OptimizeOptions
from tests.helpers import SHARED_REFERENCE

CONFIGS = sorted((SHARED_REFERENCE / "configs").glob("*/ref.config")) if SHARED_REFERENCE.is_dir() else []
# The x-vector network pools statistics over 10,000 frames: its graphs are
# large, so it runs in the slow set only.
SLOW = {"xvector_sre16_1a"}


def _params() -> list:
    out = []
    for path in CONFIGS:
        name = path.parent.name
        for kind in ("forward", "training"):
            marks = [pytest.mark.slow] if name in SLOW else []
            out.append(pytest.param(path, kind, id=f"{name}-{kind}", marks=marks))
    return out


@pytest.mark.skipif(not CONFIGS, reason="reference configs/ not present")
@pytest.mark.parametrize("path,kind", _params())
def test_config_optimizes_with_checker_after_every_pass(path: Path, kind: str) -> None:
    nnet = Nnet()
    nnet.read_config(path.read_text(), str(path))
    training = kind == "training"
    recurrent = any(t in path.parent.name for t in ("lstm", "gru"))
    request = build_request(nnet, num_sequences=2 if training else 1, frames_per_chunk=20,
                            extra_left_context=10 if recurrent else 0, extra_right_context=0,
                            frame_subsampling_factor=1, need_model_derivative=training,
                            need_input_derivative=False, outputs=["output"], ivector=None,
                            store_component_stats=training)
    computation = Compiler([request], nnet).create_computation(CompilerOptions())
    check_computation(nnet, computation, check_rewrite=True)
    optimized = optimize(OptimizeOptions(), nnet, request, computation, checking_hook(nnet))
    check_computation(nnet, optimized)
    assert len(optimized.commands) < len(computation.commands)
