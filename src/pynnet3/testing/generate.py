"""Random test networks and requests (Kaldi's nnet-test-utils.{h,cc}).

:func:`generate_config_sequence` draws one of Kaldi's network families
(plain affine, spliced context, TDNN, feed-forward with batch-norm, RNN,
clockwork RNN, LSTM with and without backprop truncation, the old and new
CNNs, DistributeComponent, CompositeComponent blocks, statistics pooling,
restricted attention; their generators are in :mod:`.config_families`) with
random sizes, as a list of config texts to be applied in turn with
``Nnet.read_config``.
:func:`compute_example_computation_request_simple` draws a request (inputs,
outputs, which derivatives) and random inputs for a "simple" network, and
:func:`generate_random_simple_component` a random component for component
tests (its configs are in :mod:`.random_component`), and
:func:`generate_simple_nnet_training_example` a training example.

Randomness comes from a ``numpy.random.Generator``; Kaldi's ``rand()``
stream cannot be reproduced, so a seed gives a network of the same families
and size ranges as Kaldi's, not the network Kaldi draws for that seed.  Every
draw is made in the order Kaldi makes it, so the code reads side by side with
Kaldi's.  Parameters are initialised by the components from the process-wide
generator of :mod:`pynnet3.nnet.components.base` (``set_random_seed``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import log
from ..compile.request import ComputationRequest, IoSpecification
from ..errors import PynnetError
from ..nnet.components.base import Prop
from ..compile.graph.context import compute_simple_nnet_context, is_simple_nnet
from ..nnet.graph import graph_has_cycles, nnet_to_directed_graph
from ..nnet.index import Index
from ..nnet.nnet import Nnet
from .config_families import (NETWORK_TYPE_NAMES, NETWORK_TYPES, NnetGenerationOptions,
                              rand_below, rand_int, as_generator)
from .random_component import generate_random_component_config, generate_random_simple_component

if TYPE_CHECKING:
    from ..train.egs import NnetExample

__all__ = ["NnetGenerationOptions", "generate_config_sequence", "draw_network_type",
           "NETWORK_TYPES", "NETWORK_TYPE_NAMES",
           "compute_example_computation_request_simple", "generate_random_simple_component",
           "generate_random_component_config", "nnet_from_configs", "nnet_is_recurrent",
           "nnet_parameters_are_identical", "as_generator",
           "generate_simple_nnet_training_example", "example_approx_equal"]


def draw_network_type(opts: NnetGenerationOptions | None = None,
                      rng: "np.random.Generator | int | None" = None) -> str:
    """The family :func:`generate_config_sequence` would draw: Kaldi's
    switch, drawing again while the options rule the family out."""
    opts = opts if opts is not None else NnetGenerationOptions()
    rng = as_generator(rng)
    if not any(allowed(opts) for _, _, allowed in NETWORK_TYPES):
        raise PynnetError("the generation options allow no network type")
    while True:
        name, _, allowed = NETWORK_TYPES[rand_int(rng, 0, len(NETWORK_TYPES) - 1)]
        if allowed(opts):
            return name


def generate_config_sequence(opts: NnetGenerationOptions | None = None,
                             rng: "np.random.Generator | int | None" = None,
                             network_type: str | None = None) -> list[str]:
    """Kaldi's GenerateConfigSequence: config texts, the first building the
    network and any others changing it (e.g. adding a layer).

    ``network_type`` (a name of :data:`NETWORK_TYPE_NAMES`) picks a family
    instead of drawing one (:func:`draw_network_type`); it must be allowed
    by ``opts``.
    """
    opts = opts if opts is not None else NnetGenerationOptions()
    rng = as_generator(rng)
    if network_type is None:
        network_type = draw_network_type(opts, rng)
    for name, gen, allowed in NETWORK_TYPES:
        if name == network_type:
            if not allowed(opts):
                raise PynnetError(f"network type {network_type!r} is not allowed by "
                                  f"these generation options")
            configs = gen(opts, rng)
            if not configs:
                raise PynnetError("error generating config sequence")
            return configs
    raise PynnetError(f"unknown network type {network_type!r}; known: "
                      f"{', '.join(NETWORK_TYPE_NAMES)}")


def nnet_from_configs(configs: list[str], source: str = "generated") -> Nnet:
    """A network built by applying ``configs`` in turn (as Kaldi's tests do
    with Nnet::ReadConfig)."""
    nnet = Nnet()
    for j, text in enumerate(configs):
        nnet.read_config(text, f"<{source} config[{j}]>")
    return nnet


# ---------------------------------------------------------------------------
# Requests


def compute_example_computation_request_simple(
        nnet: Nnet, rng: "np.random.Generator | int | None" = None
) -> tuple[ComputationRequest, list[np.ndarray]]:
    """Kaldi's ComputeExampleComputationRequestSimple: a random request for
    a simple network and random inputs for it (``input``, then ``ivector``
    if the network has one).

    1-10 output frames starting at t in [0, 10) for 1-4 sequences (n
    starting at 0 or 1); input frames cover the network's context plus 0-2
    frames on each side, at least 3 frames (so that statistics pooling has
    something to pool).  Derivatives: the output with probability ~2/3, the
    inputs and the model sometimes when the output has one; component
    statistics sometimes.
    """
    if not is_simple_nnet(nnet):
        raise PynnetError("compute_example_computation_request_simple needs a simple network")
    rng = as_generator(rng)
    left_context, right_context = compute_simple_nnet_context(nnet)
    num_output_frames = 1 + rand_below(rng, 10)
    output_start_frame = rand_below(rng, 10)
    num_examples = 1 + rand_below(rng, 4)
    output_end_frame = output_start_frame + num_output_frames
    input_start_frame = output_start_frame - left_context - rand_below(rng, 3)
    input_end_frame = output_end_frame + right_context + rand_below(rng, 3)
    n_offset = rand_below(rng, 2)
    need_deriv = rand_below(rng, 2) == 0
    input_end_frame = max(input_end_frame, input_start_frame + 3)

    ns = range(n_offset, n_offset + num_examples)
    input_indexes = [Index(n, t, 0) for n in ns
                     for t in range(input_start_frame, input_end_frame)]
    output_indexes = [Index(n, t, 0) for n in ns
                      for t in range(output_start_frame, output_end_frame)]
    ivector_indexes = [Index(n, 0, 0) for n in ns]

    request = ComputationRequest()
    request.outputs.append(IoSpecification("output", output_indexes))
    if need_deriv or rand_below(rng, 3) == 0:
        request.outputs[-1].has_deriv = True
    request.inputs.append(IoSpecification("input", input_indexes))
    if need_deriv and rand_below(rng, 2) == 0:
        request.inputs[-1].has_deriv = True
    input_dim = nnet.input_dim("input")
    if input_dim <= 0:
        raise PynnetError("network has no input node 'input'")
    inputs = [rng.standard_normal((len(input_indexes), input_dim)).astype(np.float32)]
    if nnet.get_node_index("ivector") != -1:
        request.inputs.append(IoSpecification("ivector", ivector_indexes))
        inputs.append(rng.standard_normal((num_examples, nnet.input_dim("ivector")))
                      .astype(np.float32))
        if need_deriv and rand_below(rng, 2) == 0:
            request.inputs[-1].has_deriv = True
    if rand_below(rng, 2) == 0:
        request.need_model_derivative = need_deriv
    if rand_below(rng, 2) == 0:
        request.store_component_stats = True
    return request, inputs


# ---------------------------------------------------------------------------
# Comparing networks


def nnet_is_recurrent(nnet: Nnet) -> bool:
    """Kaldi's NnetIsRecurrent: the node graph has a cycle."""
    return graph_has_cycles(nnet_to_directed_graph(nnet))


def nnet_parameters_are_identical(nnet1: Nnet, nnet2: Nnet, threshold: float = 1.0e-05) -> bool:
    """Kaldi's NnetParametersAreIdentical: for each updatable component the
    four dot products <u1,u1>, <u1,u2>, <u2,u1>, <u2,u2> must lie within
    ``threshold`` (relative to the largest); warns and returns False at the
    first component where they do not."""
    if nnet1.num_components() != nnet2.num_components():
        raise PynnetError("nnet_parameters_are_identical: different numbers of components")
    for c in range(nnet1.num_components()):
        c1, c2 = nnet1.get_component(c), nnet2.get_component(c)
        if c1.type_name != c2.type_name:
            raise PynnetError(f"component {c} differs in type: {c1.type_name} vs "
                              f"{c2.type_name}")
        if not c1.properties() & Prop.UPDATABLE:
            continue
        prods = [float(a.dot_product(b)) for a, b in ((c1, c1), (c1, c2), (c2, c1), (c2, c2))]
        if max(prods) - min(prods) > threshold * max(prods):
            log.warn(f"Component '{nnet1.component_names[c]}' differs in nnet1 versus nnet2: "
                     f"prod(11,12,21,22) = {','.join(f'{p:g}' for p in prods)}")
            return False
    return True


# ---------------------------------------------------------------------------
# Training examples


def generate_simple_nnet_training_example(
        num_supervised_frames: int, left_context: int, right_context: int, input_dim: int,
        output_dim: int, ivector_dim: int,
        rng: "np.random.Generator | int | None" = None) -> "NnetExample":
    """Kaldi's GenerateSimpleNnetTrainingExample: an example with ``input``
    (exactly ``left_context`` + ``num_supervised_frames`` + ``right_context``
    random frames from t in [0, 2]), an ``ivector`` at t=0 when
    ``ivector_dim`` > 0 (each compressed half of the time), and sparse
    ``output`` targets of 1-3 labels per frame summing to 1."""
    from ..train.egs import NnetExample, NnetIo

    if not (num_supervised_frames > 0 and left_context >= 0 and right_context >= 0
            and output_dim > 0 and input_dim > 0):
        raise PynnetError("generate_simple_nnet_training_example: bad dimensions")
    rng = as_generator(rng)
    example = NnetExample()
    feature_t_begin = rand_int(rng, 0, 2)
    num_feat_frames = left_context + right_context + num_supervised_frames
    feats = rng.standard_normal((num_feat_frames, input_dim)).astype(np.float32)
    io = NnetIo.from_matrix("input", feature_t_begin, feats)
    if rand_int(rng, 0, 1) == 0:
        io.features.compress()
    example.io.append(io)
    if ivector_dim > 0:
        ivector = rng.standard_normal((1, ivector_dim)).astype(np.float32)
        io = NnetIo.from_matrix("ivector", 0, ivector)
        if rand_int(rng, 0, 1) == 0:
            io.features.compress()
        example.io.append(io)
    labels: list[list[tuple[int, float]]] = []
    for _ in range(num_supervised_frames):
        num_labels = rand_int(rng, 1, 3)
        remaining = 1.0
        frame: list[tuple[int, float]] = []
        for i in range(num_labels):
            prob = (1.0 if i + 1 == num_labels else float(rng.random())) * remaining
            remaining -= prob
            frame.append((rand_int(rng, 0, output_dim - 1), prob))
        labels.append(frame)
    example.io.append(NnetIo.from_posterior("output", output_dim,
                                            feature_t_begin + left_context, labels))
    return example


def example_approx_equal(eg1: "NnetExample", eg2: "NnetExample", delta: float) -> bool:
    """Kaldi's ExampleApproxEqual: same names and indexes, and each
    feature matrix equal to relative Frobenius error ``delta``."""
    if len(eg1.io) != len(eg2.io):
        return False
    for io1, io2 in zip(eg1.io, eg2.io):
        if io1.name != io2.name or not np.array_equal(io1.indexes, io2.indexes):
            return False
        a = io1.features.to_matrix().astype(np.float64)
        b = io2.features.to_matrix().astype(np.float64)
        if a.shape != b.shape or np.linalg.norm(a - b) > delta * np.linalg.norm(a):
            return False
    return True
