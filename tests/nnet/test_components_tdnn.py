"""TdnnComponent (tdnn.py): config, precomputed indexes, the reordered index
layout and propagate against a direct splice."""
from __future__ import annotations

import numpy as np
import pytest

from pynnet3.errors import ConfigError
from pynnet3.io.kaldi_io import KaldiReader, KaldiWriter
from pynnet3.nnet.components.base import Prop
from pynnet3.nnet.components.tdnn import TdnnComponent, TdnnPrecomputedIndexes
from pynnet3.nnet.index import Index, K_NO_TIME

from tests.helpers_components import make_affine


def test_tdnn_config():
    c = make_affine(TdnnComponent, "input-dim=40 output-dim=100 time-offsets=-1,0,1")
    assert (c.input_dim(), c.output_dim(), c.num_parameters()) == (40, 100, 12100)
    assert c.properties() == (Prop.UPDATABLE | Prop.REORDERS_INDEXES | Prop.BACKPROP_ADDS
                              | Prop.BACKPROP_NEEDS_INPUT)
    assert (c.preconditioner_in.rank, c.preconditioner_out.rank) == (20, 50)
    assert c.info().endswith(", rank-in=20, rank-out=50, num-samples-history=2000, "
                             "update-period=4, alpha-in=4, alpha-out=4")
    assert ", time-offsets=-1,0,1, linear-params-rms=" in c.info()
    c = make_affine(TdnnComponent, "input-dim=4 output-dim=3 time-offsets=-3,0 use-bias=false "
                            "use-natural-gradient=false orthonormal-constraint=-1 "
                            "alpha-in=2 alpha-out=3 rank-in=2 rank-out=1")
    assert c.bias_params.shape == (0,) and c.num_parameters() == 24
    assert c.properties() & Prop.PROPAGATE_ADDS
    assert ", orthonormal-constraint=-1, time-offsets=-3,0, " in c.info()
    assert c.info().endswith(", has-bias=false, use-natural-gradient=false")
    assert (c.preconditioner_in.alpha, c.preconditioner_out.alpha) == (2.0, 3.0)
    for bad in ("input-dim=4 output-dim=3", "input-dim=4 output-dim=3 time-offsets=0,0",
                "input-dim=4 output-dim=3 time-offsets=1,,2",
                "input-dim=0 output-dim=3 time-offsets=0",
                "input-dim=4 output-dim=3 time-offsets=0 update-period=2"):
        with pytest.raises(ConfigError):
            make_affine(TdnnComponent, bad)


def test_precomputed_indexes_io():
    p = TdnnPrecomputedIndexes(3, [0, 4, 5])
    for binary in (False, True):
        w = KaldiWriter(binary)
        p.write(w)
        q = TdnnPrecomputedIndexes()
        q.read(KaldiReader(w.getvalue(), binary, "t"))
        assert q == p


@pytest.mark.parametrize("offsets,out_ts,use_bias,xs", [
    ([-1, 0, 1], list(range(0, 6)), True, [0]),
    ([-3, 0, 3], list(range(-3, 9, 3)), False, [0]),
    ([-1, 0, 1], list(range(0, 12, 3)), True, [0, 2]),    # subsampled: reorder_t_in == 3
    ([0, 2], [1, 2, 4, 5], True, [0]),                     # gap in the output t values
    ([-2], [7], True, [0]),                                # a single frame
])
def test_tdnn_indexes_and_propagate(offsets, out_ts, use_bias, xs):
    c = make_affine(TdnnComponent,
                    f"input-dim=3 output-dim=4 time-offsets={','.join(map(str, offsets))}"
                            f" use-bias={'true' if use_bias else 'false'}")
    outputs = [Index(n, t, x) for n in (0, 1) for t in out_ts for x in xs]
    needed = sorted({ix for o in outputs for ix in c.get_input_indexes(None, o)})
    available = set(needed)
    for o in outputs:
        ok, used = c.is_computable(None, o, available)
        assert ok and used == c.get_input_indexes(None, o)
    missing = set(needed[1:])
    assert not all(c.is_computable(None, o, missing)[0] for o in outputs)

    inputs, outs = c.reorder_indexes(list(needed), list(outputs))
    assert {i for i in inputs if i.t != K_NO_TIME} == set(needed)
    assert {o for o in outs if o.t != K_NO_TIME} == set(outputs)
    pre = c.precompute_indexes(None, inputs, outs, False)
    rng = np.random.default_rng(5)
    values = {ix: rng.standard_normal(3).astype(np.float32) for ix in needed}
    in_mat = np.stack([values.get(ix, np.zeros(3, np.float32)) for ix in inputs])
    out_mat = np.zeros((len(outs), 4), np.float32)
    c.propagate(pre, in_mat, out_mat)
    bias = c.bias_params if use_bias else np.zeros(4, np.float32)
    for row, o in enumerate(outs):
        if o.t == K_NO_TIME:
            continue
        spliced = np.concatenate([values[Index(o.n, o.t + off, o.x)] for off in offsets])
        np.testing.assert_allclose(out_mat[row], c.linear_params.astype(np.float64) @ spliced
                                   + bias, rtol=1e-5, atol=1e-5)


def test_tdnn_reorder_known_layout():
    c = make_affine(TdnnComponent, "input-dim=1 output-dim=1 time-offsets=-1,1")
    outputs = [Index(0, 0), Index(1, 0), Index(0, 2), Index(1, 2)]
    inputs = [Index(n, t) for n in (0, 1) for t in (-1, 1, 3)]
    new_in, new_out = c.reorder_indexes(inputs, outputs)
    # Output t step 2, input t step 2: t-major order, no reordering inside blocks.
    assert new_in == [Index(0, -1), Index(1, -1), Index(0, 1), Index(1, 1), Index(0, 3),
                      Index(1, 3)]
    assert new_out == [Index(0, 0), Index(1, 0), Index(0, 2), Index(1, 2)]
    pre = c.precompute_indexes(None, new_in, new_out, False)
    assert (pre.row_stride, pre.row_offsets) == (1, [0, 2])
    # Subsampling: input every frame, output every third -> interleaved blocks.
    outputs = [Index(0, 0), Index(0, 3)]
    inputs = [Index(0, t) for t in range(-1, 5)]
    new_in, new_out = c.reorder_indexes(inputs, outputs)
    assert [ix.t for ix in new_in] == [-1, 0, 1, 2, 3, 4]
    pre = c.precompute_indexes(None, new_in, new_out, False)
    assert (pre.row_stride, pre.row_offsets) == (3, [0, 2])
    # Padding: missing frames become blank (t = kNoTime) indexes.
    new_in, _ = c.reorder_indexes([Index(0, -1), Index(0, 1), Index(0, 4)], [Index(0, 0)])
    blank = Index(0, K_NO_TIME)
    assert new_in == [Index(0, -1), blank, Index(0, 1), blank, blank, Index(0, 4)]


@pytest.mark.parametrize("in_ts,out_ts", [
    (range(0, 151, 3), range(0, 148, 3)),          # subsampled layer, reorder 1
    (range(-1, 213), range(0, 213)),               # step 1
    (range(0, 140), range(0, 140, 2)),             # reorder_t_in 2, even length
    (range(0, 141), range(0, 140, 2)),             # reorder_t_in 2, one blank pad row
    (range(5, 6), range(5, 6)),                    # one t value each
    (range(0, 30, 3), range(9, 10)),               # one output t
    ([0, 3, 6, 12], range(0, 12, 3)),              # a gap: not regular, general path
    (range(0, 10), [4, 2, 6]),                     # unsorted output: general path
])
def test_tdnn_reorder_single_image_matches_general(in_ts, out_ts):
    """The one-image shortcut of reorder_indexes gives the general grid code's answer."""
    from pynnet3.nnet.components import tdnn_indexes as ti
    from pynnet3.nnet.index import index_columns

    for n, x in ((0, 0), (3, -2)):
        inputs = [Index(n, t, x) for t in in_ts]
        outputs = [Index(n, t, x) for t in out_ts]
        in_cols, out_cols = index_columns(inputs), index_columns(outputs)
        io, nx = ti._computation_io(in_cols, out_cols)
        ti._modify_computation_io(io)
        want = ti._indexes_for_computation_columns(io, nx, in_cols, out_cols)
        fast = ti.reorder_single_image(in_cols, out_cols)
        regular = not isinstance(in_ts, list) and not isinstance(out_ts, list)
        assert (fast is not None) == regular
        if fast is not None:
            assert np.array_equal(fast[0], want[0]) and np.array_equal(fast[1], want[1])
        c = make_affine(TdnnComponent, "input-dim=2 output-dim=2 time-offsets=0")
        got_in, got_out = c.reorder_indexes(inputs, outputs)
        assert list(got_in) == [Index(*r) for r in want[0].tolist()]
        assert list(got_out) == [Index(*r) for r in want[1].tolist()]
        # The grids the shortcut leaves on its lists give precompute_indexes
        # the answer it finds from plain lists of the same indexes.
        assert (c.precompute_indexes(None, got_in, got_out, False)
                == c.precompute_indexes(None, list(got_in), list(got_out), False))
    # Two images, or an output image the input lacks: the general path.
    two = [Index(n, t, 0) for n in (0, 1) for t in range(4)]
    assert ti.reorder_single_image(index_columns(two), index_columns(two)) is None
    assert ti.reorder_single_image(index_columns([Index(0, 0, 0), Index(0, 1, 0)]),
                                   index_columns([Index(1, 0, 0)])) is None


@pytest.mark.parametrize("ts", [
    list(range(0, 151, 3)), list(range(0, 151, 3)) + [K_NO_TIME] * 2, [7], [7, K_NO_TIME],
    [0, 3, K_NO_TIME, 6], [K_NO_TIME, 0, 1], [0, 2, 3], [3, 2, 1],
])
def test_tdnn_computation_io_single_image_matches_general(ts):
    """get_computation_io's one-image reading of the grid agrees with finding
    the distinct t values (blanks only at the end take the short way)."""
    from pynnet3.nnet.components import tdnn_indexes as ti
    from pynnet3.nnet.index import index_columns

    inputs = [Index(2, t, 1) for t in ts]
    outputs = [Index(2, t, 1) for t in ts if t != K_NO_TIME][:3]
    got = ti.get_computation_io(inputs, outputs)
    nx, t_in = ti._distinct_nx_and_t(inputs)
    want = ti.ComputationIo(int(nx.size), *ti.regularize_t_list(t_in),
                            *ti.regularize_t_list(ti._distinct_nx_and_t(outputs)[1]), 1)
    assert got == want
    regular = ts[0] != K_NO_TIME and ts[:3] != [0, 2, 3] and ts != [3, 2, 1] and ts[2:3] != [K_NO_TIME]
    assert (ti._single_image_grid(index_columns(inputs)) is not None) == regular
