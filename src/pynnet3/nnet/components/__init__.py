"""All Kaldi nnet3 component types, by family (as Kaldi's source files group them).

Importing this package registers every type; use
:func:`pynnet3.nnet.components.base.new_component_of_type` or
:func:`read_component` to create them by name.
"""
from __future__ import annotations

from .base import (Component, Prop, UpdatableComponent, component_types,  # noqa: F401
                   new_component_of_type, read_component, register)


def _import_families() -> None:
    # Explicit list: no wildcard registration magic.
    from . import simple, affine, normalize, general, convolution, attention, combined  # noqa: F401


_import_families()
_load_all = True
