"""NnetChainTrainer details that the reference run does not exercise: the
example's deriv weights (--apply-deriv-weights) and the chain request."""
from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from pynnet3.compile.model_io import read_nnet
from pynnet3.nnet.components.base import set_random_seed
from pynnet3.train.chain.den_graph import DenominatorGraph
from pynnet3.train.chain.egs import iter_chain_examples
from pynnet3.train.chain.fst import read_fst_file
from pynnet3.train.chain.objective import ChainTrainingOptions
from pynnet3.train.chain.trainer import (NnetChainTrainer, NnetChainTrainingOptions,
                                         get_chain_computation_request)
from pynnet3.train.kaldi_random import GlibcRand
from pynnet3.train.trainer import NnetTrainerOptions
from tests.helpers import reference_dir


@pytest.fixture(scope="module")
def setup():
    root = reference_dir("chain/0.raw", "chain/den.fst", "chain/merged.ark") / "chain"
    eg = next(iter(iter_chain_examples(f"ark:{root / 'merged.ark'}")))[1]
    return root, eg


def _train(root, eg, apply: bool = True):
    nnet = read_nnet(str(root / "0.raw"))
    graph = DenominatorGraph.from_fst(read_fst_file(str(root / "den.fst")), 64)
    opts = NnetChainTrainingOptions(NnetTrainerOptions(), ChainTrainingOptions(
        leaky_hmm_coefficient=0.1, xent_regularize=0.1), apply_deriv_weights=apply)
    set_random_seed(1)          # the components' sampled stats (self-repair reads them)
    with contextlib.redirect_stderr(io.StringIO()):
        with NnetChainTrainer(opts, graph, nnet, GlibcRand(1)) as trainer:
            trainer.train(eg)
    return {name: comp.linear_params.copy() for name, comp in
            zip(nnet.component_names, nnet.components) if hasattr(comp, "linear_params")}


@pytest.mark.slow
def test_deriv_weights_scale_both_derivatives(setup) -> None:
    """The reference egs carry deriv weights (0.5 on the frames shared by two
    chunks).  --apply-deriv-weights=false gives what egs without weights
    give; zero weights stop every derivative from reaching the network (the
    affine parameters move only by the ReLUs' self-repair term, which does
    not depend on the output derivative: < 1e-4, while a plain step moves
    them by more than 1e-3)."""
    root, eg = setup
    nnet0 = read_nnet(str(root / "0.raw"))
    before = {name: comp.linear_params for name, comp in
              zip(nnet0.component_names, nnet0.components) if hasattr(comp, "linear_params")}
    assert eg.outputs[0].deriv_weights.size and eg.outputs[0].deriv_weights.min() < 1.0

    def with_weights(value: float | None):
        out = eg.copy()
        for sup in out.outputs:
            sup.deriv_weights = (np.zeros(0, np.float32) if value is None else
                                 np.full(sup.indexes.shape[0], value, np.float32))
        return out

    plain = _train(root, eg)
    ignored = _train(root, eg, apply=False)
    unweighted = _train(root, with_weights(None))
    zeroed = _train(root, with_weights(0.0))
    for name in plain:
        np.testing.assert_array_equal(ignored[name], unweighted[name], err_msg=name)
    assert any(not np.array_equal(plain[n], unweighted[n]) for n in plain)
    assert max(np.abs(plain[n] - before[n]).max() for n in plain) > 1e-3
    assert max(np.abs(zeroed[n] - before[n]).max() for n in zeroed) < 1e-4


def test_chain_request_has_the_xent_output(setup) -> None:
    """GetChainComputationRequest: 'output' and 'output-xent' with the
    supervision's Indexes; the xent derivative only when asked for."""
    root, eg = setup
    nnet = read_nnet(str(root / "0.raw"))
    req = get_chain_computation_request(nnet, eg, True, True, True, False)
    assert [(o.name, o.has_deriv) for o in req.outputs] == [("output", True),
                                                           ("output-xent", False)]
    assert req.outputs[0].indexes == req.outputs[1].indexes
    assert len(req.outputs[0].indexes) == eg.outputs[0].indexes.shape[0]
    assert [i.name for i in req.inputs] == [io.name for io in eg.inputs]
    req = get_chain_computation_request(nnet, eg, False, False, False, False)
    assert [(o.name, o.has_deriv) for o in req.outputs] == [("output", False)]
