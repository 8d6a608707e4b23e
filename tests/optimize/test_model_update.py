"""consolidate_model_update (Kaldi's ModelUpdateConsolidator) on a network
whose rewrite is known."""
from __future__ import annotations

from pynnet3.compile.computation import CommandType
from pynnet3.optimize import copy_computation
from pynnet3.optimize.check import check_computation
from pynnet3.optimize.model_update import consolidate_model_update
from tests.optimize.helpers import _compare_runs, _compile, _consolidate_io, _nnet, _request

T = CommandType


_SHARED_AFFINE = """input-node name=input dim=4
component name=a type=AffineComponent input-dim=4 output-dim=3
component-node name=a1 component=a input=input
component-node name=a2 component=a input=Offset(input, 1)
output-node name=output input=Sum(a1, a2)
"""


def test_consolidate_model_update_known_rewrite() -> None:
    nnet = _nnet(_SHARED_AFFINE)
    request = _request([("input", 0, 6, True)], [("output", 0, 5, True)],
                       need_model_derivative=True)
    comp = _compile(nnet, request)
    backprops = [c for c in comp.commands if c.command_type is T.BACKPROP]
    assert len(backprops) == 2
    opt = copy_computation(comp)
    consolidate_model_update(nnet, opt)
    _consolidate_io(nnet, opt)
    check_computation(nnet, opt, check_rewrite=True)
    # the two backprops now only compute input derivatives ...
    no_update = [c for c in opt.commands if c.command_type is T.BACKPROP_NO_MODEL_UPDATE]
    assert [c.args for c in no_update] == [c.args for c in backprops]
    # ... and one final Backprop updates from 10-row consolidated matrices
    final = [c for c in opt.commands if c.command_type is T.BACKPROP]
    assert len(final) == 1
    f = final[0]
    assert (f.arg2, f.arg4, f.arg6, f.arg7) == (0, 0, 0, 0)
    for arg, first_rows in ((f.arg3, [b.arg3 for b in backprops]),
                            (f.arg5, [b.arg5 for b in backprops])):
        info = opt.submatrices[arg]
        assert opt.is_whole_matrix(arg)
        assert (info.num_rows, info.num_cols) == (10, 4 if arg == f.arg3 else 3)
        # debug info: the concatenation of the original submatrices' cindexes
        expect = [cx for s in first_rows
                  for cx in comp.matrix_debug_info[comp.submatrices[s].matrix_index].cindexes]
        assert list(opt.matrix_debug_info[info.matrix_index].cindexes) == expect
    # every original backprop is preceded by the copies that feed the update
    for b in no_update:
        i = opt.commands.index(b)
        copies = [c for c in opt.commands[i - 2:i] if c.command_type is T.MATRIX_COPY]
        assert sorted(c.arg2 for c in copies) == sorted((b.arg3, b.arg5))
    errs = _compare_runs(nnet, request, comp, opt)
    assert "grad_a" in errs
    # nothing to do without a model derivative
    plain = _compile(nnet, _request([("input", 0, 6, True)], [("output", 0, 5, True)]))
    before = list(plain.commands)
    consolidate_model_update(nnet, plain)
    assert plain.commands == before
