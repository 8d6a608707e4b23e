"""OptimizeOptions: Kaldi's defaults and flag names, the cache key, the
relative max-deriv-time (the click options built from the fields' metadata
are tested in tests/cli/test_options.py)."""
from __future__ import annotations

import dataclasses

import pytest

from pynnet3.errors import ConfigError
from pynnet3.optimize.options import OptimizeOptions, field_for_flag, flag_name


def test_options_defaults_and_flags_are_kaldis() -> None:
    o = OptimizeOptions()
    kaldi_defaults = dict(optimize=True, consolidate_model_update=True, propagate_in_place=True,
                          backprop_in_place=True, optimize_row_ops=True, split_row_ops=True,
                          extend_matrices=True, convert_addition=True, remove_assignments=True,
                          allow_left_merge=True, allow_right_merge=True,
                          initialize_undefined=True, move_sizing_commands=True,
                          allocate_from_other=True, min_deriv_time=-2147483648,
                          max_deriv_time=2147483647, max_deriv_time_relative=2147483647,
                          snip_row_ops=True, memory_compression_level=1,
                          optimize_looped_computation=False)
    assert dataclasses.asdict(o) == kaldi_defaults
    assert list(dataclasses.asdict(o)) == list(kaldi_defaults)   # Kaldi's member order
    assert flag_name("max_deriv_time_relative") == "max-deriv-time-relative"
    assert flag_name("optimize_looped_computation") is None        # hidden in Kaldi
    assert field_for_flag("--optimization.allow-left-merge") == "allow_left_merge"
    with pytest.raises(KeyError):
        flag_name("nonsense")
    with pytest.raises(ConfigError):
        field_for_flag("--optimization.nonsense")
    with pytest.raises(ConfigError):
        OptimizeOptions(memory_compression_level=-1)
    with pytest.raises(ConfigError):
        OptimizeOptions(optimize="yes")  # type: ignore[arg-type]


def test_options_cache_key_and_relative_deriv_time() -> None:
    a, b = OptimizeOptions(), OptimizeOptions(allow_right_merge=False)
    assert a.cache_key() == OptimizeOptions().cache_key()
    assert a.cache_key() != b.cache_key()
    assert "allow_right_merge=false" in b.cache_key()
    assert OptimizeOptions(max_deriv_time=7).effective_max_deriv_time(None) == 7
    assert OptimizeOptions(max_deriv_time_relative=3).effective_max_deriv_time(10) == 13
    with pytest.raises(ConfigError):
        OptimizeOptions(max_deriv_time_relative=3).effective_max_deriv_time(None)
