"""All Kaldi nnet3 component types, one module per family.

Importing this package (which importing any of its modules does) loads every
family, and so registers every type; use
:func:`pynnet3.nnet.components.base.new_component_of_type` or
:func:`read_component` to create them by name.
"""
from __future__ import annotations

from . import (affine, attention, composite, constant, convolution,  # noqa: F401
               distribute, dropout, fixed, gradient_clipping, nonlinearities, normalization,
               per_element, recurrent, statistics, tdnn)
from .base import (Component, Prop, UpdatableComponent, component_types,  # noqa: F401
                   new_component_of_type, read_component, register)
