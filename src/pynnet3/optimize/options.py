"""OptimizeOptions: which optimization passes run (Kaldi's NnetOptimizeOptions).

One field per member of Kaldi's struct, same names, same defaults.  On a
command line they are Kaldi's ``--optimization.<flag>`` options (Kaldi
registers them under the "optimization" prefix in every binary that
compiles): each field's metadata holds its Kaldi flag name and help text
(``metadata={"flag": ..., "help": ...}``), from which the command-line layer
registers them.  ``optimize_looped_computation`` is Kaldi's hidden option:
its flag is None, and the looped decoders set it in code.

:meth:`OptimizeOptions.cache_key` is a stable text that changes whenever a
field that changes the optimized computation changes, for the computation
cache.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

from ..errors import ConfigError

__all__ = ["OptimizeOptions", "INT32_MIN", "INT32_MAX", "flag_name", "field_for_flag",
           "FLAG_PREFIX"]

# Kaldi's "unset" values of the deriv-time options (std::numeric_limits<int32>).
INT32_MIN = -2 ** 31
INT32_MAX = 2 ** 31 - 1

FLAG_PREFIX = "optimization"


@dataclass(frozen=True)
class OptimizeOptions:
    """Kaldi's NnetOptimizeOptions (the order of the fields is Kaldi's)."""

    optimize: bool = field(default=True, metadata={
        "flag": "optimize",
        "help": "Set this to false to turn off all optimizations"})
    consolidate_model_update: bool = field(default=True, metadata={
        "flag": "consolidate-model-update",
        "help": "Set to false to disable optimization that consolidates the "
        "model-update phase of backprop (e.g. for recurrent architectures)"})
    propagate_in_place: bool = field(default=True, metadata={
        "flag": "propagate-in-place",
        "help": "Set to false to disable optimization that allows in-place "
        "propagation"})
    backprop_in_place: bool = field(default=True, metadata={
        "flag": "backprop-in-place",
        "help": "Set to false to disable optimization that allows in-place backprop"})
    optimize_row_ops: bool = field(default=True, metadata={
        "flag": "optimize-row-ops",
        "help": "Set to false to disable certain optimizations that act on "
        "operations of type *Row*."})
    split_row_ops: bool = field(default=True, metadata={
        "flag": "split-row-ops",
        "help": "Set to false to disable an optimization that may replace some "
        "operations of type kCopyRowsMulti or kAddRowsMulti with up to two "
        "simpler operations."})
    extend_matrices: bool = field(default=True, metadata={
        "flag": "extend-matrices",
        "help": "This optimization can reduce memory requirements for TDNNs when "
        "applied together with --convert-addition=true"})
    convert_addition: bool = field(default=True, metadata={
        "flag": "convert-addition",
        "help": "Set to false to disable the optimization that converts Add "
        "commands into Copy commands wherever possible."})
    remove_assignments: bool = field(default=True, metadata={
        "flag": "remove-assignments",
        "help": "Set to false to disable optimization that removes redundant "
        "assignments"})
    allow_left_merge: bool = field(default=True, metadata={
        "flag": "allow-left-merge",
        "help": "Set to false to disable left-merging of variables in "
        "remove-assignments (obscure option)"})
    allow_right_merge: bool = field(default=True, metadata={
        "flag": "allow-right-merge",
        "help": "Set to false to disable right-merging of variables in "
        "remove-assignments (obscure option)"})
    initialize_undefined: bool = field(default=True, metadata={
        "flag": "initialize-undefined",
        "help": "Set to false to disable optimization that avoids redundant zeroing"})
    move_sizing_commands: bool = field(default=True, metadata={
        "flag": "move-sizing-commands",
        "help": "Set to false to disable optimization that moves matrix allocation "
        "and deallocation commands to conserve memory."})
    allocate_from_other: bool = field(default=True, metadata={
        "flag": "allocate-from-other",
        "help": "Instead of deleting a matrix of a given size and then allocating a "
        "matrix of the same size, allow re-use of that memory"})
    min_deriv_time: int = field(default=INT32_MIN, metadata={
        "flag": "min-deriv-time",
        "help": "You can set this to the minimum t value that you want derivatives "
        "to be computed at when updating the model.  This is an "
        "optimization that saves time in the backprop phase for recurrent "
        "frameworks"})
    max_deriv_time: int = field(default=INT32_MAX, metadata={
        "flag": "max-deriv-time",
        "help": "You can set this to the maximum t value that you want derivatives "
        "to be computed at when updating the model.  This is an "
        "optimization that saves time in the backprop phase for recurrent "
        "frameworks"})
    max_deriv_time_relative: int = field(default=INT32_MAX, metadata={
        "flag": "max-deriv-time-relative",
        "help": "An alternative mechanism for setting the --max-deriv-time, "
        "suitable for situations where the length of the egs is variable.  "
        "If set, it is equivalent to setting the --max-deriv-time to this "
        "value plus the largest 't' value in any 'output' node of the "
        "computation request."})
    snip_row_ops: bool = field(default=True, metadata={
        "flag": "snip-row-ops",
        "help": "Set this to false to disable an optimization that reduces the size "
        "of certain per-row operations"})
    memory_compression_level: int = field(default=1, metadata={
        "flag": "memory-compression-level",
        "help": "This is only relevant to training, not decoding.  Set this to "
        "0,1,2; higher levels are more aggressive at reducing memory by "
        "compressing quantities needed for backprop, potentially at the "
        "expense of speed and the accuracy of derivatives.  0 means no "
        "compression at all; 1 means compression that shouldn't affect "
        "results at all."})
    # Hidden in Kaldi (no command-line flag): turns a multi-segment computation
    # into a loop, for online decoding.
    optimize_looped_computation: bool = field(default=False, metadata={"flag": None})


    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("bool", bool):
                if not isinstance(value, bool):
                    raise ConfigError(f"--{FLAG_PREFIX}.{_FLAGS.get(f.name, f.name)}: "
                                      f"expected true or false, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, int) \
                    or not INT32_MIN <= value <= INT32_MAX:
                raise ConfigError(f"--{FLAG_PREFIX}.{_FLAGS.get(f.name, f.name)}: "
                                  f"expected a 32-bit integer, got {value!r}")
        if self.memory_compression_level < 0:
            raise ConfigError(f"--{FLAG_PREFIX}.memory-compression-level must be >= 0, "
                              f"got {self.memory_compression_level}")

    def replace(self, **changes: Any) -> "OptimizeOptions":
        return dataclasses.replace(self, **changes)

    def effective_max_deriv_time(self, max_output_time_in_request: int | None) -> int:
        """max_deriv_time, or max_deriv_time_relative + the largest output t
        when the relative form is set (as Kaldi's Optimize() computes it)."""
        if self.max_deriv_time_relative != INT32_MAX:
            if max_output_time_in_request is None:
                raise ConfigError(f"--{FLAG_PREFIX}.max-deriv-time-relative needs the largest "
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


# Kaldi's flag names (without the "optimization." prefix), from the fields'
# metadata.  Hidden fields have none.
_FLAGS: dict[str, str] = {f.name: f.metadata["flag"] for f in fields(OptimizeOptions)
                          if f.metadata.get("flag")}


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
    if name.startswith(FLAG_PREFIX + "."):
        name = name[len(FLAG_PREFIX) + 1:]
    name = name.replace("-", "_")
    if name not in _FLAGS:
        raise ConfigError(f"unknown optimization option {flag!r}")
    return name
