"""All Kaldi nnet3 component types, one module per family.

A family is loaded when one of its types is first needed:
:func:`pynnet3.nnet.components.base.new_component_of_type` and
:func:`read_component` create components by type name and import the
family that defines it (``base.COMPONENT_FAMILIES``), and
:func:`component_types` loads every family.  (A run of a TDNN-F model then
leaves the attention, convolution, recurrent and statistics families out: a
megabyte of resident memory and several milliseconds of start-up for every
binary.)  The families are also attributes of this package, imported on
first access.
"""
from __future__ import annotations

import importlib
from typing import Any

from .base import (COMPONENT_FAMILIES, Component, Prop, UpdatableComponent, component_class,
                   component_types, load_all_families, new_component_of_type, read_component,
                   register)

__all__ = ["COMPONENT_FAMILIES", "Component", "Prop", "UpdatableComponent", "component_class",
           "component_types", "load_all_families", "new_component_of_type", "read_component",
           "register"]


def __getattr__(name: str) -> Any:
    if name in set(COMPONENT_FAMILIES.values()):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
