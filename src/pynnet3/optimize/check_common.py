"""What the analysis and the checkers share that needs no Numba: a command's
printed text and errors naming it, the components' property flags as an
array, and the range check of the submatrices.

:mod:`.check_indexes` imports only these (not the Numba loops of
:mod:`.variables` and :mod:`.accesses`), so the computation cache can run
it on every computation it reads from disk at little cost.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..compile.computation import NnetComputation
from ..errors import ComputationCheckError
from ..nnet.properties_cache import nnet_component_properties

__all__ = ["command_text", "command_error", "properties_array", "validate_submatrices"]


def command_text(computation: NnetComputation, nnet: Any, command_index: int) -> str:
    """The command as the computation printer shows it, or its raw fields when
    its arguments are too broken to print."""
    try:
        return computation.command_string(command_index, nnet.component_names,
                                          nnet.node_names).rstrip("\n")
    except (IndexError, KeyError, ValueError, TypeError, AttributeError):
        return f"c{command_index}: {computation.commands[command_index]!r}"


def command_error(computation: NnetComputation, nnet: Any, command_index: int,
                  message: str) -> ComputationCheckError:
    return ComputationCheckError(message, command_index,
                                 command_text(computation, nnet, command_index))


# The last properties list seen and its array: inside
# component_properties_cached() nnet_component_properties returns the same
# list object for the same network, so its array is made once.
_last_properties: tuple[Any, np.ndarray] = (None, np.zeros(0, dtype=np.int64))


def properties_array(nnet: Any) -> np.ndarray:
    """The property flags of all components of ``nnet`` (int64 array,
    read-only)."""
    global _last_properties
    if nnet is None:
        return np.zeros(0, dtype=np.int64)
    props = nnet_component_properties(nnet)
    last = _last_properties
    if last[0] is props:
        return last[1]
    array = np.array(props, dtype=np.int64)
    array.flags.writeable = False
    _last_properties = (props, array)
    return array


def validate_submatrices(mat: np.ndarray, r0: np.ndarray, nr: np.ndarray, c0: np.ndarray,
                         nc: np.ndarray, sizes: np.ndarray) -> None:
    """ComputationCheckError unless every submatrix (the columns of the
    submatrix table without submatrix 0) lies inside its matrix (``sizes``:
    int64 [matrices, 2])."""
    num_matrices = len(sizes)
    bad = (mat < 1) | (mat >= num_matrices)
    m = np.where(bad, 0, mat)
    bad |= (r0 < 0) | (nr <= 0) | (r0 + nr > sizes[m, 0])
    bad |= (c0 < 0) | (nc <= 0) | (c0 + nc > sizes[m, 1])
    if bad.any():
        s = int(np.flatnonzero(bad)[0])
        raise ComputationCheckError(
            f"submatrix {s + 1} = (matrix {mat[s]}, rows {r0[s]}+{nr[s]}, cols {c0[s]}+{nc[s]})"
            " is out of range of its matrix")
