"""The random network / request / component generator (Kaldi's nnet-test-utils).

Checked against the configs real Kaldi's generator wrote
(/work/shared/reference/random/NNN/config*.txt): every component type,
node and option Kaldi uses appears in ours with the same names, and the
options that are always present are the same.  Every family builds a
simple network whose random request compiles; every random-component case
initialises with all its options used.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from pynnet3.compile.compiler import Compiler
from pynnet3.nnet.components.base import set_random_seed
from pynnet3.nnet.config_line import ConfigLine
from pynnet3.compile.graph.context import compute_simple_nnet_context, is_simple_nnet
from pynnet3.nnet.index import Index
from pynnet3.testing.generate import (NETWORK_TYPE_NAMES, NnetGenerationOptions,
                                      compute_example_computation_request_simple,
                                      draw_network_type, example_approx_equal,
                                      generate_config_sequence,
                                      generate_simple_nnet_training_example,
                                      nnet_from_configs, nnet_is_recurrent,
                                      nnet_parameters_are_identical)
from pynnet3.testing.random_component import (NUM_COMPONENT_CASES,
                                               generate_random_component_config,
                                               generate_random_simple_component)
from tests.helpers import reference_dir

RECURRENT = {"rnn", "rnn_clockwork", "lstm", "lstm_with_truncation"}


def _line_keys(texts: list[str]) -> dict[tuple[str, str], list[frozenset[str]]]:
    """(kind, component type or node name) -> the option-key sets of its lines."""
    ans: dict[tuple[str, str], list[frozenset[str]]] = defaultdict(list)
    for text in texts:
        for line in text.splitlines():
            if not line.strip():
                continue
            c = ConfigLine(line)
            what = c.get_str("type") if c.first_token == "component" else c.get_str("name")
            assert what is not None
            ans[(c.first_token, what)].append(frozenset(c.keys()))
    return ans


def test_configs_use_kaldis_names_and_options() -> None:
    ref = reference_dir() / "random"
    kaldi_texts = [p.read_text() for p in sorted(ref.glob("*/config*.txt"))]
    assert kaldi_texts
    ours_texts = [t for family in NETWORK_TYPE_NAMES for seed in range(60)
                  for t in generate_config_sequence(None, np.random.default_rng(seed), family)]
    kaldi, ours = _line_keys(kaldi_texts), _line_keys(ours_texts)
    missing = sorted(set(kaldi) - set(ours))
    assert not missing, f"Kaldi's generator writes lines ours never does: {missing}"
    for what, key_sets in kaldi.items():
        union = frozenset().union(*ours[what])
        always = frozenset.intersection(*ours[what])
        for keys in key_sets:
            assert keys <= union, f"{what}: Kaldi uses options {sorted(keys - union)}"
            assert always <= keys, f"{what}: Kaldi omits options {sorted(always - keys)}"


@pytest.mark.parametrize("family", NETWORK_TYPE_NAMES)
def test_every_family_builds_and_compiles(family: str) -> None:
    for seed in range(3):
        rng = np.random.default_rng(seed)
        set_random_seed(seed)
        configs = generate_config_sequence(None, rng, family)
        nnet = nnet_from_configs(configs)
        assert is_simple_nnet(nnet)
        assert nnet_is_recurrent(nnet) == (family in RECURRENT)
        request, inputs = compute_example_computation_request_simple(nnet, rng)
        # The request is one Kaldi's compiler accepts: every output computable.
        computation = Compiler([request], nnet).create_computation()
        assert computation.commands
        assert [io.name for io in request.inputs] == [n for n in ("input", "ivector")
                                                     if nnet.get_node_index(n) != -1]
        for io, value in zip(request.inputs, inputs):
            assert value.shape == (len(io.indexes), nnet.input_dim(io.name))
            assert value.dtype == np.float32


def test_output_dim_option_and_disallowed_families() -> None:
    opts = NnetGenerationOptions(output_dim=7, allow_recursion=False, allow_context=False,
                                 allow_statistics_pooling=False)
    rng = np.random.default_rng(5)
    drawn = set()
    for _ in range(60):
        family = draw_network_type(opts, rng)
        drawn.add(family)
        nnet = nnet_from_configs(generate_config_sequence(opts, rng, family))
        if family not in ("composite_block", "cnn"):     # Kaldi's ignore output_dim
            assert nnet.output_dim("output") == 7, family
    assert drawn <= {"simplest", "cnn", "distribute", "composite_block"}
    assert not drawn & RECURRENT
    with pytest.raises(Exception):
        generate_config_sequence(opts, rng, "lstm")


def test_ivector_networks() -> None:
    opts = NnetGenerationOptions(allow_ivector=True)
    found = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        nnet = nnet_from_configs(generate_config_sequence(opts, rng, "simple"))
        if nnet.get_node_index("ivector") == -1:
            continue
        found += 1
        request, inputs = compute_example_computation_request_simple(nnet, rng)
        ivec = request.inputs[1]
        assert ivec.name == "ivector"
        ns = sorted({ix.n for ix in request.inputs[0].indexes})
        assert ivec.indexes == [Index(n, 0, 0) for n in ns]
        assert inputs[1].shape == (len(ns), nnet.input_dim("ivector"))
        Compiler([request], nnet).create_computation()
    assert found > 0


def test_request_covers_the_context() -> None:
    rng = np.random.default_rng(11)
    for _ in range(10):
        nnet = nnet_from_configs(generate_config_sequence(None, rng, "simple_context"))
        left, right = compute_simple_nnet_context(nnet)
        request, _ = compute_example_computation_request_simple(nnet, rng)
        in_t = [ix.t for ix in request.inputs[0].indexes]
        out_t = [ix.t for ix in request.outputs[0].indexes]
        assert min(in_t) <= min(out_t) - left and max(in_t) >= max(out_t) + right
        assert max(in_t) - min(in_t) + 1 >= 3
        ns = sorted({ix.n for ix in request.outputs[0].indexes})
        assert 1 <= len(ns) <= 4 and ns[0] in (0, 1) and ns == list(range(ns[0], ns[-1] + 1))
        if request.need_model_derivative or any(io.has_deriv for io in request.inputs):
            assert request.outputs[0].has_deriv


@pytest.mark.parametrize("case", range(NUM_COMPONENT_CASES))
def test_random_component_cases_initialise(case: int) -> None:
    for seed in range(4):
        rng = np.random.default_rng(seed)
        kind, _ = generate_random_component_config(np.random.default_rng(seed), case)
        comp = generate_random_simple_component(rng, case)
        assert comp.type_name == kind
        assert comp.input_dim() > 0 and comp.output_dim() > 0


def test_random_component_draws_every_case() -> None:
    rng = np.random.default_rng(0)
    kinds = {generate_random_simple_component(rng).type_name for _ in range(400)}
    assert len(kinds) == 36        # 38 cases; composite and sum-group have two each


def test_nnet_parameters_are_identical() -> None:
    set_random_seed(3)
    configs = generate_config_sequence(None, np.random.default_rng(3), "simple")
    a = nnet_from_configs(configs)
    set_random_seed(3)
    b = nnet_from_configs(configs)
    assert nnet_parameters_are_identical(a, b)
    _, comp = next(iter(b.updatable_components()))
    comp.perturb_params(1e-3)
    assert nnet_parameters_are_identical(a, b, 1.0)
    assert not nnet_parameters_are_identical(a, b, 1e-7)


def test_simple_training_example_round_trips() -> None:
    """Kaldi's nnet-example-test pattern: generate, write, read back,
    compare with ExampleApproxEqual."""
    from pynnet3.io.kaldi_io import KaldiReader
    from pynnet3.train.egs import NnetExample

    rng = np.random.default_rng(4)
    for ivector_dim in (0, 7):
        eg = generate_simple_nnet_training_example(5, 3, 2, input_dim=6, output_dim=9,
                                                   ivector_dim=ivector_dim, rng=rng)
        assert [io.name for io in eg.io] == (["input", "ivector"] if ivector_dim
                                             else ["input"]) + ["output"]
        feats, out = eg.io[0], eg.io[-1]
        assert feats.features.num_rows == 10 and feats.features.num_cols == 6
        assert out.indexes[0, 1] == feats.indexes[0, 1] + 3 and out.features.num_rows == 5
        post = out.features.to_matrix()
        np.testing.assert_allclose(post.sum(axis=1), 1.0, rtol=1e-5)
        for binary in (True, False):
            data = eg.to_bytes(binary)[2 if binary else 0:]
            back = NnetExample.read(KaldiReader(data, binary))
            assert example_approx_equal(eg, back, 1e-4)
        other = eg.copy()
        other.io[0].features.scale(1.1)
        assert not example_approx_equal(eg, other, 1e-4)
