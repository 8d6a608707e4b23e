"""The computation file (computation_io, format 4) that the cache stores, and
the fast paths a cache hit takes: n-tiled index lists, lazy debug info,
shared precomputed indexes, and the index hooks that work on tilings."""
from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cache import CachingCompiler, CachingCompilerOptions, rebuild_precomputed_indexes
from pynnet3.compile.computation import (Command, CommandType, MatrixDebugInfo, MatrixInfo,
                                         NnetComputation, PrecomputedIndexesInfo, StrideType,
                                         SubMatrixInfo)
from pynnet3.compile.computation_io import (computation_from_bytes, computation_to_bytes,
                                            find_n_tiling)
from pynnet3.compile.n_stride import cindex_array, index_array
from pynnet3.compile.precomputed_indexes import compute_precomputed_indexes
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.errors import FormatError
from pynnet3.nnet.components.base import set_random_seed
from pynnet3.nnet.index import K_NO_TIME, Index, first_appearance_numbers
from pynnet3.nnet.index_lists import CindexList, IndexList, ListTable, NTiling, slotted_maker
from pynnet3.nnet.nnet import Nnet
from tests.helpers import deep_equal, reference_dir

ROOT = Path(__file__).resolve().parents[1]
TDNN_CONFIG = (ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config").read_text()


def _nnet(text: str) -> Nnet:
    set_random_seed(0)
    nnet = Nnet()
    nnet.read_config(text, "<test>")
    return nnet


def _tdnn_request(num_seq: int, frames: int = 6, deriv: bool = True) -> ComputationRequest:
    return ComputationRequest(
        [IoSpecification("input", [Index(n, t, 0) for n in range(num_seq)
                                   for t in range(-8, frames + 8)]),
         IoSpecification("ivector", [Index(n, 0, 0) for n in range(num_seq)])],
        [IoSpecification("output", [Index(n, t, 0) for n in range(num_seq)
                                    for t in range(frames)], deriv)],
        need_model_derivative=deriv)


# -- n tilings ----------------------------------------------------------------------


def _tiled(rng: np.random.Generator, width: int, n_col: int) -> tuple[np.ndarray, NTiling]:
    num_blocks, stride, num_n = (int(v) for v in rng.integers(1, 5, size=3) + [0, 0, 1])
    base = rng.integers(-20, 20, size=(num_blocks * stride, width)).astype(np.int32)
    base[:, n_col] = 0
    tiling = NTiling(base, num_n, stride, n_col)
    return tiling.expand(), tiling


@pytest.mark.parametrize("width,n_col", [(3, 0), (4, 1)])
def test_n_tiling_found_and_exact(width: int, n_col: int) -> None:
    rng = np.random.default_rng(5)
    found = 0
    for _ in range(200):
        array, tiling = _tiled(rng, width, n_col)
        got = find_n_tiling(array, n_col)
        if got is not None:
            found += 1
            assert np.array_equal(got.expand(), array)
            assert got.expand().dtype == np.int32
    assert found > 100      # (repeated base rows can make FindNStride pick another stride)
    # Lists without the structure: n out of order, a missing copy, one n value.
    array, _ = _tiled(np.random.default_rng(1), width, n_col)
    for bad in (array[::-1], array[:-1], array[array[:, n_col] == 0]):
        t = find_n_tiling(np.ascontiguousarray(bad), n_col)
        assert t is None or np.array_equal(t.expand(), bad)


def test_tiled_list_is_lazy_and_equal() -> None:
    array, tiling = _tiled(np.random.default_rng(2), 3, 0)
    lazy = IndexList.from_tiling(tiling)
    assert len(lazy) == len(array) and not lazy.is_built and lazy.n_tiling is tiling
    assert lazy == IndexList(array) and lazy.is_built
    assert list(lazy) == [Index(*r) for r in array.tolist()]


def test_list_table_lists() -> None:
    rng = np.random.default_rng(3)
    plain = rng.integers(0, 9, size=(5, 4)).astype(np.int32)
    tiled, tiling = _tiled(rng, 4, 1)
    rows = np.concatenate([plain, tiling.base])
    meta = np.array([[0, 5, 1, 1], [5, len(tiling.base), tiling.num_n, tiling.n_stride]])
    lists = ListTable(rows, meta, 1).lists(CindexList)
    assert [type(x) for x in lists] == [CindexList, CindexList]
    assert lists[0].n_tiling is None and lists[1].n_tiling.num_n == tiling.num_n
    assert [len(x) for x in lists] == [5, len(tiled)]
    assert np.array_equal(lists[0].array, plain) and np.array_equal(lists[1].array, tiled)
    assert lists[1][0] == (int(tiled[0, 0]), Index(*tiled[0, 1:].tolist()))
    for bad in ([[0, 6, 1, 1]], [[0, 5, 0, 1]], [[-1, 2, 1, 1]], [[0, 3, 2, 2]]):
        with pytest.raises(ValueError):
            ListTable(rows[:5], np.array(bad), 1)


def test_slotted_maker_makes_ordinary_instances() -> None:
    make = slotted_maker(Command, Command.__slots__)
    c, d = make([CommandType.COPY_ROWS, CommandType.SET_CONST], [0.5, 1.0], [1, 4], [2, -1],
                [3, -1], *[[-1, -1]] * 4)
    assert type(c) is Command and c == Command(CommandType.COPY_ROWS, 0.5, 1, 2, 3)
    assert d == Command(CommandType.SET_CONST, 1.0, 4)
    with pytest.raises(Exception):
        c.arg1 = 5                                   # still frozen
    (s,) = slotted_maker(SubMatrixInfo, SubMatrixInfo.__slots__)([1], [0], [3], [0], [7])
    assert type(s) is SubMatrixInfo and s == SubMatrixInfo(1, 0, 3, 0, 7)
    assert hash(s) == hash(SubMatrixInfo(1, 0, 3, 0, 7))
    m = slotted_maker(MatrixInfo, MatrixInfo.__slots__)([2], [3], [StrideType.DEFAULT])
    assert m == [MatrixInfo(2, 3)] and type(m[0]) is MatrixInfo


# -- the raw container ---------------------------------------------------------------


def _snapshot(comp: NnetComputation) -> dict:
    """Everything a computation holds, as plain values (types included)."""
    for c in comp.commands:
        assert type(c) is Command and type(c.command_type) is CommandType
        assert type(c.alpha) is float
    assert all(type(m.stride_type) is StrideType for m in comp.matrices)
    return {
        "need_model_derivative": comp.need_model_derivative,
        "matrices": [(m.num_rows, m.num_cols, m.stride_type) for m in comp.matrices],
        "submatrices": list(comp.submatrices),
        "commands": list(comp.commands),
        "indexes": [a.tolist() for a in comp.indexes],
        "indexes_multi": [np.asarray(a).tolist() for a in comp.indexes_multi],
        "indexes_ranges": [np.asarray(a).tolist() for a in comp.indexes_ranges],
        "debug": [(d.is_deriv, cindex_array(d.cindexes).tolist() if d.cindexes else [])
                  for d in comp.matrix_debug_info],
        "precomputed": [(index_array(p.input_indexes).tolist() if p.input_indexes else [],
                         index_array(p.output_indexes).tolist() if p.output_indexes else [])
                        for p in comp.component_precomputed_indexes],
    }


def _handmade() -> NnetComputation:
    """Regular and irregular lists, shared and repeated lists, odd alphas."""
    comp = NnetComputation(matrix_debug_info=[MatrixDebugInfo()])
    rng = np.random.default_rng(7)
    regular, _ = _tiled(rng, 4, 1)
    irregular = rng.integers(-3, 3, size=(11, 4)).astype(np.int32)
    for cindexes in (regular, irregular, regular.copy(), irregular[:1]):
        comp.new_matrix(len(cindexes), 3)
        comp.matrix_debug_info[-1] = MatrixDebugInfo(
            bool(len(comp.matrices) % 2), [(int(r[0]), Index(*r[1:].tolist())) for r in cindexes])
    comp.matrices[2] = MatrixInfo(comp.matrices[2].num_rows, 3, StrideType.EQUAL_NUM_COLS)
    comp.new_submatrix(1, 0, 2, 1, 2)
    comp.add_indexes([3, -1, 0])
    comp.add_indexes([])
    comp.add_indexes_multi([(1, 0), (-1, -1)])
    comp.add_indexes_ranges([(0, 2), (-1, -1), (4, 9)])
    in_list, _ = _tiled(rng, 3, 0)
    shared = IndexList(in_list)
    for inputs, outputs in ((shared, shared), (shared, [Index(0, 5, 1)]), ([], [])):
        comp.component_precomputed_indexes.append(PrecomputedIndexesInfo(None, inputs, outputs))
    comp.commands += [Command(CommandType.ALLOC_MATRIX, arg1=1),
                      Command(CommandType.SET_CONST, 1.0 / 3.0, arg1=2),
                      Command(CommandType.ADD_ROW_RANGES, -2.5e-7, 1, 2, 0),
                      Command(CommandType.PROPAGATE, 1.0, 0, 1, 0, 3, 4, 5, 6)]
    comp.need_model_derivative = True
    return comp


def test_raw_round_trip_handmade() -> None:
    comp = _handmade()
    raw = computation_to_bytes(comp)
    back = computation_from_bytes(memoryview(raw), "<test>")
    assert _snapshot(back) == _snapshot(comp)
    assert computation_to_bytes(back) == computation_to_bytes(comp)
    # Equal lists are stored once and load as one object.
    pre = back.component_precomputed_indexes
    assert pre[1].input_indexes is pre[1].output_indexes is pre[2].input_indexes
    assert back.matrix_debug_info[1].cindexes is back.matrix_debug_info[3].cindexes
    assert back.matrix_debug_info[1].cindexes.n_tiling is not None
    assert back.matrix_debug_info[2].cindexes.n_tiling is None
    assert _snapshot(computation_from_bytes(raw)) == _snapshot(comp)
    assert computation_to_bytes(back) == raw
    empty = NnetComputation()
    assert _snapshot(computation_from_bytes(memoryview(computation_to_bytes(empty)), "")) == \
        _snapshot(empty)


def _layout(raw: bytes) -> tuple[int, dict]:
    magic = raw.index(b"\n") + 1
    (size,) = struct.unpack_from("<Q", raw, magic)
    header = json.loads(raw[magic + 8:magic + 8 + size])
    return magic + 8 + size, header["arrays"]


def test_raw_damage_is_a_format_error() -> None:
    raw = computation_to_bytes(_handmade())
    base, arrays = _layout(raw)

    def with_int(name: str, flat_index: int, value: int) -> bytes:
        pos = base + arrays[name][0] + 4 * flat_index
        return raw[:pos] + struct.pack("<i", value) + raw[pos + 4:]

    damaged = [raw[:-8], raw[:30], b"x" + raw[1:],
               raw.replace(b"pynnet3-computation v4", b"pynnet3-computation v3"),
               with_int("c_meta", 3, 0),          # n-stride 0
               with_int("c_meta", 1, 10 ** 6),    # rows beyond the data
               with_int("dbg", 3, 99),            # no such list
               with_int("pre", 2, -7),
               with_int("cmd", 0, 77),            # no such command type
               with_int("mat", 2, 9)]             # no such stride type
    for data in damaged:
        with pytest.raises(FormatError):
            computation_from_bytes(data)


@pytest.fixture(scope="module")
def tdnn_case() -> tuple[Nnet, ComputationRequest, NnetComputation]:
    nnet = _nnet(TDNN_CONFIG)
    request = _tdnn_request(16)
    comp = CachingCompiler(nnet, CachingCompilerOptions(), use_disk=False).compile(request)
    return nnet, request, comp


def test_raw_round_trip_compiled(tdnn_case) -> None:
    nnet, request, _ = tdnn_case
    comp = CachingCompiler(nnet, CachingCompilerOptions(), use_disk=False).compile(request)
    lazy = [d.cindexes for d in comp.matrix_debug_info if d.cindexes]
    assert lazy and not any(x.is_built for x in lazy)
    raw = computation_to_bytes(comp)
    # (Their tilings came from the expander's factories: nothing was built.)
    assert not any(x.is_built for x in lazy)
    back = computation_from_bytes(memoryview(raw), "<test>")
    assert _snapshot(back) == _snapshot(comp)
    # The 16-sequence lists are stored as their first sequence.
    total = sum(len(d.cindexes) for d in comp.matrix_debug_info)
    _, arrays = _layout(raw)
    assert arrays["c_rows"][2][0] * 16 <= total


def test_loaded_computation_remembers_its_tables(tdnn_case,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded computation's command and submatrix tables are the arrays it
    was built from (the checks of a disk hit need not rebuild them), and equal
    to the tables made from its records."""
    import pynnet3.compile.computation as computation_mod

    _, _, comp = tdnn_case
    back = computation_from_bytes(computation_to_bytes(comp), "<test>")
    expected = (computation_mod.command_table(back.commands),
                computation_mod.submatrix_table(back.submatrices))

    def must_not_rebuild(items):
        raise AssertionError("table rebuilt from the records")

    monkeypatch.setattr(computation_mod, "command_table", must_not_rebuild)
    monkeypatch.setattr(computation_mod, "submatrix_table", must_not_rebuild)
    for got, want in zip((back.command_table(), back.submatrix_table()), expected):
        assert got.dtype == np.int64 and not got.flags.writeable
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("config,num_seq", [("lstmp_swbd_6j", 3), ("tdnn_norm_opgru_ami_1a", 2),
                                            ("cnn_e2eali_ocr_bentham_1a", 3)])
def test_raw_round_trip_reference_configs(tmp_path: Path, config: str, num_seq: int) -> None:
    from pynnet3.compile.request_io import build_request
    from pynnet3.compile.graph.context import compute_simple_nnet_context

    text = (reference_dir() / "configs" / config / "ref.config").read_text()
    nnet = _nnet(text)
    request = build_request(nnet, num_seq, 6, need_model_derivative=True,
                            context=compute_simple_nnet_context(nnet))
    opts = CachingCompilerOptions()
    comp = CachingCompiler(nnet, opts, cache_dir=tmp_path).compile(request)
    cc = CachingCompiler(nnet, opts, cache_dir=tmp_path)
    loaded = cc.compile(request)
    assert cc.num_disk_hits == 1
    assert _snapshot(loaded) == _snapshot(comp)
    _assert_same_precomputed(comp, loaded)


def _assert_same_precomputed(a: NnetComputation, b: NnetComputation) -> None:
    pa, pb = a.component_precomputed_indexes, b.component_precomputed_indexes
    assert len(pa) == len(pb)
    for k, (x, y) in enumerate(zip(pa, pb)):
        assert deep_equal(x.data, y.data), f"precomputed_indexes[{k}]"


# -- disk hits -----------------------------------------------------------------------


def test_disk_hit_debug_info_lazy_and_prints_the_same(tmp_path: Path, tdnn_case) -> None:
    nnet, request, compiled = tdnn_case
    opts = CachingCompilerOptions()
    CachingCompiler(nnet, opts, cache_dir=tmp_path).compile(request)
    cc = CachingCompiler(nnet, opts, cache_dir=tmp_path)
    loaded = cc.compile(request)
    assert cc.num_disk_hits == 1
    lists = [d.cindexes for d in loaded.matrix_debug_info if d.cindexes]
    assert lists and not any(x.is_built for x in lists)
    names = (nnet.component_names, nnet.node_names)
    assert loaded.print(*names) == compiled.print(*names)      # (builds them)
    assert all(x.is_built for x in lists)
    _assert_same_precomputed(compiled, loaded)


def _entry(cc: CachingCompiler, request: ComputationRequest) -> Path:
    return cc.entry_path(cc.key(request))


def _rewrite_payload(path: Path, edit) -> None:
    """Apply ``edit`` to the payload and fix the entry's checksum, so that
    only the container's own checks can notice."""
    data = path.read_bytes()
    head, sep, payload = data.partition(b"pynnet3-computation v4\n")
    payload = edit(sep + payload)
    lines = head.decode().split("\n")
    lines = [f"payload-crc32 {zlib.crc32(payload):08x}" if x.startswith("payload-crc32") else x
             for x in lines]
    path.write_bytes("\n".join(lines).encode() + payload)


@pytest.mark.parametrize("damage", ["flip-compact-rows", "bad-tiling", "old-container"])
def test_damaged_compact_entry_is_recompiled(tmp_path: Path, tdnn_case, damage: str,
                                             capsys: pytest.CaptureFixture) -> None:
    nnet, request, compiled = tdnn_case
    opts = CachingCompilerOptions()
    first = CachingCompiler(nnet, opts, cache_dir=tmp_path)
    first.compile(request)
    path = _entry(first, request)
    data = path.read_bytes()
    start = data.index(b"pynnet3-computation v4\n")
    base, arrays = _layout(data[start:])
    if damage == "flip-compact-rows":
        pos = start + base + arrays["c_rows"][0] + 5
        path.write_bytes(data[:pos] + bytes([data[pos] ^ 0x10]) + data[pos + 1:])
    elif damage == "bad-tiling":
        def edit(payload: bytes) -> bytes:
            b, a = _layout(payload)
            meta = np.frombuffer(payload, "<i4", count=int(np.prod(a["c_meta"][2])),
                                 offset=b + a["c_meta"][0]).reshape(-1, 4)
            k = int(np.flatnonzero(meta[:, 2] > 1)[0])
            pos = b + a["c_meta"][0] + 4 * (4 * k + 3)
            return payload[:pos] + struct.pack("<i", 0) + payload[pos + 4:]
        _rewrite_payload(path, edit)
    else:
        path.write_bytes(data.replace(b"pynnet3-computation-cache 2",
                                      b"pynnet3-computation-cache 1"))
    capsys.readouterr()
    cc = CachingCompiler(nnet, opts, cache_dir=tmp_path)
    again = cc.compile(request)
    err = capsys.readouterr().err
    assert "ignoring unusable computation cache entry" in err and str(path) in err
    assert cc.num_compiled == 1          # (its two-sequence mini request is still a hit)
    assert _snapshot(again) == _snapshot(compiled)
    cc2 = CachingCompiler(nnet, opts, cache_dir=tmp_path)   # rewritten: a clean hit now
    cc2.compile(request)
    assert cc2.num_disk_hits == 1 and "WARNING" not in capsys.readouterr().err


def test_rebuilt_precomputed_indexes_equal_and_shared(tdnn_case) -> None:
    """rebuild_precomputed_indexes gives what compute_precomputed_indexes
    gives, sharing an object only between entries of the same configuration
    and lists."""
    nnet, request, compiled = tdnn_case
    loaded = computation_from_bytes(memoryview(computation_to_bytes(compiled)), "")
    reference = computation_from_bytes(memoryview(computation_to_bytes(compiled)), "")
    cc = CachingCompiler(nnet, use_disk=False)
    rebuild_precomputed_indexes(loaded, nnet, None, cc._component_keys)
    compute_precomputed_indexes(reference, nnet, None)
    _assert_same_precomputed(reference, loaded)


# -- index hooks on tilings ----------------------------------------------------------


def test_backprop_truncation_zeroing_matches_loop() -> None:
    from pynnet3.nnet.components.gradient_clipping import BackpropTruncationComponent

    c = BackpropTruncationComponent()
    c.init(8, 1.0, 30.0, 15.0, 7, 3)
    rng = np.random.default_rng(0)
    rows = [Index(int(n), int(t), 0) for n, t in zip(rng.integers(0, 9, 300),
                                                     rng.integers(-40, 40, 300))]
    pre = c.precompute_indexes(None, rows, IndexList(np.array(rows, dtype=np.int32)), True)
    want = [-1.0 if (t - n) // 7 != (t - 3 - n) // 7 else 0.0 for n, t, _ in rows]
    assert pre.zeroing.dtype == np.float32 and pre.zeroing.tolist() == want
    assert pre.zeroing_sum == -sum(want)


def test_dropout_rows_on_tiling_match_full() -> None:
    from pynnet3.nnet.components.dropout import _dropout_rows_tiled

    rng = np.random.default_rng(4)
    for _ in range(100):
        full, tiling = _tiled(rng, 3, 0)
        lst = IndexList.from_tiling(tiling)
        for period in (0, 1, 3):
            got = _dropout_rows_tiled(lst, lst, period)
            cols = full.astype(np.int64)
            keys = np.stack([cols[:, 0], cols[:, 1] // period if period else 0 * cols[:, 1]], 1)
            want = first_appearance_numbers(keys)
            assert got is not None and got[0] == want[0] and np.array_equal(got[1], want[1])
    assert _dropout_rows_tiled(IndexList(full), lst, 0) is None        # no tiling: not used
    other = IndexList.from_tiling(tiling._replace(base=tiling.base + 1))
    assert _dropout_rows_tiled(lst, other, 0) is None                  # lists differ


def test_tdnn_io_on_tiling_matches_full() -> None:
    from pynnet3.nnet.components.tdnn_indexes import distinct_nx_and_t

    rng = np.random.default_rng(6)
    for _ in range(50):
        _, tiling = _tiled(rng, 3, 0)
        base = tiling.base.copy()
        base[:, 0] = rng.integers(0, 3, len(base))          # (any n in the base)
        base[rng.random(len(base)) < 0.2, 1] = K_NO_TIME
        tiling = tiling._replace(base=base)
        nx, t = distinct_nx_and_t(IndexList.from_tiling(tiling))
        nx_ref, t_ref = distinct_nx_and_t(IndexList(tiling.expand()))
        assert np.array_equal(nx, nx_ref) and np.array_equal(t, t_ref)


@pytest.mark.parametrize("line,t_in,t_out", [
    ("num-filters-in=2 num-filters-out=3 height-in=5 height-out=5 height-offsets=-1,0,1 "
     "time-offsets=-1,0,1 required-time-offsets=0", range(0, 6), range(0, 6)),
    ("num-filters-in=2 num-filters-out=2 height-in=4 height-out=4 height-offsets=-1,0,1 "
     "time-offsets=-1,0,1 max-memory-mb=0.0001", range(-1, 11), range(0, 10, 3)),
])
def test_convolution_precompute_matches_list_version(line: str, t_in: range,
                                                     t_out: range) -> None:
    from pynnet3.nnet.components.convolution import TimeHeightConvolutionComponent
    from pynnet3.nnet.components.convolution_model import compile_convolution_computation
    from pynnet3.nnet.config_line import ConfigLine

    c = TimeHeightConvolutionComponent()
    cfl = ConfigLine(f"component name=x type={c.type_name} {line}", "test.config", 1)
    cfl.get_str("name")
    cfl.get_str("type")
    c.init_from_config(cfl)
    in_idx = [Index(n, t) for t in t_in for n in range(3)]
    out_idx = [Index(n, t) for t in t_out for n in range(3)]
    new_in, new_out = c.reorder_indexes(in_idx, out_idx)
    want, _, _ = compile_convolution_computation(c.model, new_in, new_out, c.max_memory_mb)
    as_arrays = (IndexList(np.array(new_in, np.int32)), IndexList(np.array(new_out, np.int32)))
    for ins, outs in ((new_in, new_out), as_arrays):
        got = c.precompute_indexes(None, ins, outs, True).computation
        assert [getattr(got, f) for f in ("num_images", "num_t_in", "num_t_out", "temp_rows",
                                          "temp_cols", "height_in")] == \
            [getattr(want, f) for f in ("num_images", "num_t_in", "num_t_out", "temp_rows",
                                        "temp_cols", "height_in")]
        assert [(s.input_time_shift, s.params_start_col, s.height_map) for s in got.steps] == \
            [(s.input_time_shift, s.params_start_col, s.height_map) for s in want.steps]
    blank = [Index(ix.n, K_NO_TIME, ix.x) if i == 4 else ix for i, ix in enumerate(new_in)]
    c.precompute_indexes(None, blank, new_out, True)       # a blanked row is still reordered
    for bad_in in (new_in[::-1], new_in[:-1]):
        with pytest.raises(ValueError, match="reorder"):
            c.precompute_indexes(None, bad_in, new_out, True)


def test_old_npz_computation_is_a_clear_error() -> None:
    """Format 2 (.npz) files of older versions are refused, naming the file."""
    from pynnet3.compile.computation_io import is_computation_file

    old = b"PK\x03\x04" + bytes(60)
    assert is_computation_file(old)
    with pytest.raises(FormatError, match="npz") as info:
        computation_from_bytes(old, "old.cmp")
    assert "old.cmp" in str(info.value) and "compile it again" in str(info.value)
