"""optimize_memory_compression (Kaldi's MemoryCompressionOptimizer) at each
level."""
from __future__ import annotations

from pynnet3.compile.computation import CommandType, CompressedMatrixType
from pynnet3.optimize import copy_computation
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.compression import optimize_memory_compression
from tests.optimize.helpers import _compare_runs, _compile, _nnet, _request, _types

T = CommandType


_RELU = """input-node name=input dim=4
component name=a type=AffineComponent input-dim=4 output-dim=6
component name=r type=RectifiedLinearComponent dim=6
component name=b type=AffineComponent input-dim=6 output-dim=3
component-node name=a component=a input=input
component-node name=r component=r input=a
component-node name=b component=b input=r
output-node name=output input=b
"""


def test_memory_compression_levels() -> None:
    nnet = _nnet(_RELU)
    request = _request([("input", 0, 5, True)], [("output", 0, 5, True)],
                       need_model_derivative=True)
    comp = _compile(nnet, request)
    relu = nnet.component_names.index("r")
    for level in (0, 1, 2):
        opt = copy_computation(comp)
        optimize_memory_compression(nnet, level, opt)
        check_computation(nnet, opt)
        compress = [c for c in opt.commands if c.command_type is T.COMPRESS_MATRIX]
        decompress = [c for c in opt.commands if c.command_type is T.DECOMPRESS_MATRIX]
        assert len(compress) == len(decompress)
        if level == 0:
            assert opt.commands == comp.commands
            continue
        marker = _types(opt).index(T.NO_OPERATION_MARKER)
        signs = [c for c in compress if c.alpha == 0.0]
        # level 1: only the ReLU output, kept as signs (uint8, range 0)
        assert len(signs) == 1
        assert (signs[0].arg2, signs[0].arg3) == (CompressedMatrixType.UINT8, 1)
        m = opt.submatrices[signs[0].arg1].matrix_index
        i_dec = next(i for i, c in enumerate(opt.commands) if c.command_type is T.DECOMPRESS_MATRIX
                     and opt.submatrices[c.arg1].matrix_index == m)
        after = opt.commands[i_dec + 1]
        assert after.command_type is T.BACKPROP and after.arg1 == relu
        assert opt.commands.index(signs[0]) < marker < i_dec
        others = [c for c in compress if c.alpha != 0.0]
        if level == 1:
            assert not others
            _compare_runs(nnet, request, comp, opt, tol=0.0)          # exact
        else:
            assert others and all(c.arg2 == CompressedMatrixType.INT16 and c.alpha == 10.0
                                  for c in others)
            _compare_runs(nnet, request, comp, opt, tol=1e-2)        # 16-bit: lossy
    # nothing to do without a backward pass
    forward = _compile(nnet, _request([("input", 0, 5, False)], [("output", 0, 5, False)]))
    before = list(forward.commands)
    optimize_memory_compression(nnet, 2, forward)
    assert forward.commands == before
