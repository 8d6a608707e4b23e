"""OptimizeOptions: which optimization passes run (Kaldi's NnetOptimizeOptions).

One field per member of Kaldi's struct, same names, same defaults.  On a
command line they are Kaldi's ``--optimization.<flag>`` options (Kaldi
registers them under the "optimization" prefix in every binary that
compiles); :func:`register_click_options` adds them to a click command and
:func:`options_from_click_kwargs` builds the dataclass back from the parsed
values.  ``optimize_looped_computation`` is Kaldi's hidden option: it has no
flag and is set by the looped decoders in code.

:meth:`OptimizeOptions.cache_key` is a stable text that changes whenever a
field that changes the optimized computation changes, for the computation
cache.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping

from ..errors import ConfigError

__all__ = ["OptimizeOptions", "INT32_MIN", "INT32_MAX", "flag_name", "field_for_flag",
           "register_click_options", "options_from_click_kwargs", "CLICK_PREFIX"]

# Kaldi's "unset" values of the deriv-time options (std::numeric_limits<int32>).
INT32_MIN = -2 ** 31
INT32_MAX = 2 ** 31 - 1

CLICK_PREFIX = "optimization"


@dataclass(frozen=True)
class OptimizeOptions:
    """Kaldi's NnetOptimizeOptions (the order of the fields is Kaldi's)."""

    optimize: bool = True                    # false turns every optimization off
    consolidate_model_update: bool = True
    propagate_in_place: bool = True
    backprop_in_place: bool = True
    optimize_row_ops: bool = True
    split_row_ops: bool = True
    extend_matrices: bool = True
    convert_addition: bool = True
    remove_assignments: bool = True
    allow_left_merge: bool = True
    allow_right_merge: bool = True
    initialize_undefined: bool = True
    move_sizing_commands: bool = True
    allocate_from_other: bool = True
    min_deriv_time: int = INT32_MIN
    max_deriv_time: int = INT32_MAX
    max_deriv_time_relative: int = INT32_MAX
    snip_row_ops: bool = True
    memory_compression_level: int = 1
    # Hidden in Kaldi (no command-line flag): turns a multi-segment computation
    # into a loop, for online decoding.
    optimize_looped_computation: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"--{CLICK_PREFIX}.{_FLAGS.get(f.name, f.name)}: "
                                      f"expected true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) \
                    or not INT32_MIN <= value <= INT32_MAX:
                raise ConfigError(f"--{CLICK_PREFIX}.{_FLAGS.get(f.name, f.name)}: "
                                  f"expected a 32-bit integer, got {value!r}")
        if self.memory_compression_level < 0:
            raise ConfigError(f"--{CLICK_PREFIX}.memory-compression-level must be >= 0, "
                              f"got {self.memory_compression_level}")

    def replace(self, **changes: Any) -> "OptimizeOptions":
        return dataclasses.replace(self, **changes)

    def effective_max_deriv_time(self, max_output_time_in_request: int | None) -> int:
        """max_deriv_time, or max_deriv_time_relative + the largest output t
        when the relative form is set (as Kaldi's Optimize() computes it)."""
        if self.max_deriv_time_relative != INT32_MAX:
            if max_output_time_in_request is None:
                raise ConfigError(f"--{CLICK_PREFIX}.max-deriv-time-relative needs the largest "
                                  "output time of the request")
            return self.max_deriv_time_relative + max_output_time_in_request
        return self.max_deriv_time

    def cache_key(self) -> str:
        """Stable ``name=value;...`` text of every field (Kaldi compares all
        of them when it decides whether a cache file may be read)."""
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            parts.append(f"{f.name}={str(value).lower() if isinstance(value, bool) else value}")
        return "OptimizeOptions(" + ";".join(parts) + ")"


# Kaldi's flag names (without the "optimization." prefix).  Hidden fields
# have none.
_FLAGS: dict[str, str] = {f.name: f.name.replace("_", "-") for f in fields(OptimizeOptions)
                          if f.name != "optimize_looped_computation"}

_HELP: dict[str, str] = {
    "optimize": "Set this to false to turn off all optimizations",
    "consolidate_model_update": "Set to false to disable optimization that consolidates the "
    "model-update phase of backprop (e.g. for recurrent architectures)",
    "propagate_in_place": "Set to false to disable optimization that allows in-place "
    "propagation",
    "backprop_in_place": "Set to false to disable optimization that allows in-place backprop",
    "optimize_row_ops": "Set to false to disable certain optimizations that act on operations "
    "of type *Row*.",
    "split_row_ops": "Set to false to disable an optimization that may replace some operations "
    "of type kCopyRowsMulti or kAddRowsMulti with up to two simpler operations.",
    "extend_matrices": "This optimization can reduce memory requirements for TDNNs when applied "
    "together with --convert-addition=true",
    "convert_addition": "Set to false to disable the optimization that converts Add commands "
    "into Copy commands wherever possible.",
    "remove_assignments": "Set to false to disable optimization that removes redundant "
    "assignments",
    "allow_left_merge": "Set to false to disable left-merging of variables in "
    "remove-assignments (obscure option)",
    "allow_right_merge": "Set to false to disable right-merging of variables in "
    "remove-assignments (obscure option)",
    "initialize_undefined": "Set to false to disable optimization that avoids redundant zeroing",
    "move_sizing_commands": "Set to false to disable optimization that moves matrix allocation "
    "and deallocation commands to conserve memory.",
    "allocate_from_other": "Instead of deleting a matrix of a given size and then allocating a "
    "matrix of the same size, allow re-use of that memory",
    "min_deriv_time": "You can set this to the minimum t value that you want derivatives to be "
    "computed at when updating the model.  This is an optimization that saves time in the "
    "backprop phase for recurrent frameworks",
    "max_deriv_time": "You can set this to the maximum t value that you want derivatives to be "
    "computed at when updating the model.  This is an optimization that saves time in the "
    "backprop phase for recurrent frameworks",
    "max_deriv_time_relative": "An alternative mechanism for setting the --max-deriv-time, "
    "suitable for situations where the length of the egs is variable.  If set, it is "
    "equivalent to setting the --max-deriv-time to this value plus the largest 't' value in "
    "any 'output' node of the computation request.",
    "snip_row_ops": "Set this to false to disable an optimization that reduces the size of "
    "certain per-row operations",
    "memory_compression_level": "This is only relevant to training, not decoding.  Set this to "
    "0,1,2; higher levels are more aggressive at reducing memory by compressing quantities "
    "needed for backprop, potentially at the expense of speed and the accuracy of "
    "derivatives.  0 means no compression at all; 1 means compression that shouldn't affect "
    "results at all.",
}


def flag_name(field_name: str) -> str | None:
    """Kaldi's flag for a field, without the ``--optimization.`` prefix
    (``min_deriv_time`` -> ``min-deriv-time``); None for the hidden
    ``optimize_looped_computation``."""
    if field_name == "optimize_looped_computation":
        return None
    if field_name not in _FLAGS:
        raise KeyError(f"OptimizeOptions has no field {field_name!r}")
    return _FLAGS[field_name]


def field_for_flag(flag: str) -> str:
    """Inverse of :func:`flag_name`; accepts ``--optimization.x-y``, ``x-y`` or ``x_y``."""
    name = flag.lstrip("-")
    if name.startswith(CLICK_PREFIX + "."):
        name = name[len(CLICK_PREFIX) + 1:]
    name = name.replace("-", "_")
    if name not in _FLAGS:
        raise ConfigError(f"unknown optimization option {flag!r}")
    return name


def _param_name(field_name: str) -> str:
    return f"{CLICK_PREFIX}_{field_name}"


def register_click_options(command: Callable) -> Callable:
    """Decorator adding Kaldi's ``--optimization.<flag>`` options to a click
    command.  The values arrive as keyword arguments ``optimization_<field>``;
    turn them back into an :class:`OptimizeOptions` with
    :func:`options_from_click_kwargs`."""
    import click

    from ..cli.common import BOOL

    defaults = OptimizeOptions()
    # click applies decorators bottom-up; add in reverse so --help lists
    # them in Kaldi's order.
    for f in reversed([f for f in fields(OptimizeOptions) if f.name in _FLAGS]):
        default = getattr(defaults, f.name)
        command = click.option(f"--{CLICK_PREFIX}.{_FLAGS[f.name]}", _param_name(f.name),
                               type=BOOL if isinstance(default, bool) else int,
                               default=default, show_default=True,
                               help=_HELP[f.name])(command)
    return command


def options_from_click_kwargs(kwargs: Mapping[str, Any] | dict[str, Any],
                              pop: bool = True, **overrides: Any) -> OptimizeOptions:
    """The OptimizeOptions of the ``optimization_<field>`` keyword arguments
    that :func:`register_click_options` produced (removed from ``kwargs``
    when ``pop``); ``overrides`` set hidden fields."""
    values: dict[str, Any] = {}
    for name in _FLAGS:
        key = _param_name(name)
        if key in kwargs:
            values[name] = kwargs.pop(key) if pop and isinstance(kwargs, dict) else kwargs[key]
    values.update(overrides)
    return OptimizeOptions(**values)
