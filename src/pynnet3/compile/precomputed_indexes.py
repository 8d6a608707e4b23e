"""Recompute the components' precomputed indexes of a computation.

A Propagate or Backprop command may refer to ``component_precomputed_indexes[k]``,
an object the component built from the step's input and output Indexes
(Kaldi's ``Component::PrecomputeIndexes``).  Those objects are not
serialised (see :mod:`.computation_io`) and a computation read
from Kaldi's printed form has only the Indexes, so this rebuilds them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import PynnetError
from .computation import CommandType, NnetComputation

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet

_USERS = (CommandType.PROPAGATE, CommandType.BACKPROP, CommandType.BACKPROP_NO_MODEL_UPDATE)
_BACKPROPS = (CommandType.BACKPROP, CommandType.BACKPROP_NO_MODEL_UPDATE)


def compute_precomputed_indexes(computation: NnetComputation, nnet: "Nnet",
                                misc_info: Any = None, only_missing: bool = True) -> None:
    """Fill ``data`` of every precomputed-indexes entry that a command uses.

    The component is the one of the commands that refer to the entry;
    ``need_backprop`` is true when a Backprop command refers to it, as in
    Kaldi's compiler (which asks for backprop data when the step has a
    derivative).  With ``only_missing`` entries that already have data are
    left alone.
    """
    component_of: dict[int, int] = {}
    need_backprop: dict[int, bool] = {}
    for c in computation.commands:
        if c.command_type in _USERS and c.arg2 > 0:
            prev = component_of.setdefault(c.arg2, c.arg1)
            if prev != c.arg1:
                raise PynnetError(f"precomputed_indexes[{c.arg2}] is used by two components, "
                                  f"{nnet.component_names[prev]} and {nnet.component_names[c.arg1]}")
            need_backprop[c.arg2] = need_backprop.get(c.arg2, False) or c.command_type in _BACKPROPS
    for k, component_index in sorted(component_of.items()):
        if k >= len(computation.component_precomputed_indexes):
            raise PynnetError(f"command refers to precomputed_indexes[{k}], which does not exist")
        info = computation.component_precomputed_indexes[k]
        if only_missing and info.data is not None:
            continue
        component = nnet.get_component(component_index)
        # (Array-backed index lists are passed as they are: components that
        # work on arrays never make their Index objects.)
        info.data = component.precompute_indexes(misc_info, info.input_indexes,
                                                 info.output_indexes, need_backprop[k])
