"""Helpers for tests: random networks, requests, components and training
examples (Kaldi's nnet-test-utils).  Library code never imports this package."""
from __future__ import annotations

from .generate import (NnetGenerationOptions, compute_example_computation_request_simple,
                       draw_network_type, example_approx_equal, generate_config_sequence,
                       generate_random_simple_component, generate_simple_nnet_training_example,
                       nnet_from_configs, nnet_is_recurrent, nnet_parameters_are_identical)

__all__ = ["NnetGenerationOptions", "generate_config_sequence", "draw_network_type",
           "compute_example_computation_request_simple", "generate_random_simple_component",
           "generate_simple_nnet_training_example", "example_approx_equal",
           "nnet_from_configs", "nnet_is_recurrent", "nnet_parameters_are_identical"]
