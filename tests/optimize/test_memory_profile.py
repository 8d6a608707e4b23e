"""The per-command matrix memory of a computation (nnet3-compile --plot-memory)."""
from __future__ import annotations

import numpy as np

from pynnet3.compile.computation import CommandType, NnetComputation
from pynnet3.optimize.analysis import get_max_memory_use
from pynnet3.optimize.memory_profile import memory_profile
from tests.helpers import nnet_from_config

CONFIG = """
input-node name=input dim=5
component name=a1 type=AffineComponent input-dim=15 output-dim=7
component-node name=a1 component=a1 input=Append(Offset(input, -1), input, Offset(input, 1))
component name=r1 type=RectifiedLinearComponent dim=7
component-node name=r1 component=r1 input=a1
component name=a2 type=AffineComponent input-dim=7 output-dim=4
component-node name=a2 component=a2 input=r1
component name=sm type=LogSoftmaxComponent dim=4
component-node name=sm component=sm input=a2
output-node name=output input=sm
"""


def _direct(computation: NnetComputation) -> list[int]:
    """Bytes held after each command, walking the commands with a table of
    the live matrices and what each takes now (float32; 1 or 2 bytes per
    element while compressed; a swap moves the memory from one to the other)."""
    from pynnet3.compile.computation import CompressedMatrixType

    T = CommandType
    held: dict[int, int] = {}
    out = []
    for c in computation.commands:
        t = c.command_type
        if t is T.SWAP_MATRIX:  # the memory moves between the two matrices
            m1, m2 = (computation.submatrices[a].matrix_index for a in (c.arg1, c.arg2))
            a1, a2 = held.pop(m1, None), held.pop(m2, None)
            if a1 is not None:
                held[m2] = a1
            if a2 is not None:
                held[m1] = a2
        elif t in (T.ALLOC_MATRIX, T.ACCEPT_INPUT, T.DEALLOC_MATRIX, T.COMPRESS_MATRIX,
                 T.DECOMPRESS_MATRIX):
            m = computation.submatrices[c.arg1].matrix_index
            elements = computation.matrices[m].num_rows * computation.matrices[m].num_cols
            if t is T.DEALLOC_MATRIX:
                del held[m]
            elif t is T.COMPRESS_MATRIX:
                assert held[m] == 4 * elements
                small = c.arg2 in (CompressedMatrixType.INT8, CompressedMatrixType.UINT8)
                held[m] = (1 if small else 2) * elements
            elif t is T.DECOMPRESS_MATRIX:
                held[m] = 4 * elements
            else:
                assert m not in held
                held[m] = 4 * elements
        out.append(sum(held.values()))
    return out


def _compile(need_model_derivative: bool, optimize: bool) -> NnetComputation:
    from pynnet3.cache import CachingCompiler, CachingCompilerOptions, default_optimize_options
    from pynnet3.compile.request_io import build_request
    import dataclasses

    nnet = nnet_from_config(CONFIG)
    request = build_request(nnet, 2, 4, need_model_derivative=need_model_derivative)
    opts = dataclasses.replace(default_optimize_options(), optimize=optimize)
    return CachingCompiler(nnet, CachingCompilerOptions(), opts, use_disk=False).compile(request)


def test_memory_curve_equals_direct_computation() -> None:
    compressed = False
    for deriv in (False, True):
        for optimize in (False, True):
            computation = _compile(deriv, optimize)
            p = memory_profile(computation)
            direct = _direct(computation)
            assert p.alive.tolist() == direct
            assert p.peak == max(direct) == get_max_memory_use(computation)
            assert p.peak_index == direct.index(max(direct))
            assert p.num_commands == len(computation.commands)
            compressed |= CommandType.COMPRESS_MATRIX in [c.command_type
                                                          for c in computation.commands]
            assert int(p.delta.sum()) == direct[-1]
            types = [c.command_type for c in computation.commands]
            if deriv:
                # The backward pass starts at Kaldi's segment marker, before any Backprop.
                assert p.backward_start >= 0
                first_backprop = min(i for i, t in enumerate(types) if t in (
                    CommandType.BACKPROP, CommandType.BACKPROP_NO_MODEL_UPDATE))
                assert p.backward_start <= first_backprop
                if CommandType.NO_OPERATION_MARKER in types:
                    assert types[p.backward_start] is CommandType.NO_OPERATION_MARKER
            else:
                assert p.backward_start == -1
    assert compressed  # the optimized training computation compresses a matrix


def test_hand_made_program() -> None:
    c = NnetComputation()
    a = c.new_matrix(3, 4)      # 12 elements, 48 bytes
    b = c.new_matrix(2, 5)      # 40 bytes
    from pynnet3.compile.computation import Command
    T = CommandType
    c.commands = [Command(T.ALLOC_MATRIX, arg1=a), Command(T.ALLOC_MATRIX, arg1=b),
                  Command(T.DEALLOC_MATRIX, arg1=a),
                  Command(T.BACKPROP, 1.0, 0, 0, b, b, b, b),
                  Command(T.DEALLOC_MATRIX, arg1=b)]
    p = memory_profile(c)
    assert p.alive.tolist() == [48, 88, 40, 40, 0]
    assert p.delta.tolist() == [48, 40, -48, 0, -40]
    assert (p.peak, p.peak_index, p.backward_start) == (88, 1, 3)
    empty = memory_profile(NnetComputation())
    assert (empty.peak, empty.peak_index, empty.backward_start) == (0, -1, -1)
    assert np.asarray(empty.alive).shape == (0,)
