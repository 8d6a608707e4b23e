"""The computation cache: keys, memory LRU, disk entries, corruption, atomic writes."""
from __future__ import annotations

import copy
import dataclasses
import os
import threading
from pathlib import Path

import numpy as np
import pytest

import pynnet3.cache as cache_mod
from pynnet3.io import atomic
from pynnet3.cache import (CachingCompiler, CachingCompilerOptions, atomic_write,
                           default_cache_dir, nnet_structure_text)
from pynnet3.compile.computation import (Command, CommandType, MatrixDebugInfo, NnetComputation,
                                         PrecomputedIndexesInfo)
from pynnet3.compile.computation_io import computation_from_bytes, computation_to_bytes
from pynnet3.compile.request import ComputationRequest, IoSpecification
from pynnet3.compile.request_io import read_request_file
from pynnet3.errors import FormatError
from pynnet3.nnet.index import Index
from pynnet3.compile.model_io import read_nnet
from pynnet3.nnet.nnet import Nnet
from tests.helpers import curated, deep_equal, reference_dir

ROOT = Path(__file__).resolve().parents[1]
CONFIG = (ROOT / "egs" / "mini_tdnn" / "conf" / "tdnn.config").read_text()
NO_CHECK = CachingCompilerOptions(use_shortcut=False, check=False)


def _nnet(text: str = CONFIG) -> Nnet:
    nnet = Nnet()
    nnet.read_config(text, "<test>")
    return nnet


def _request(num_seq: int = 2, frames: int = 4, deriv: bool = False) -> ComputationRequest:
    return ComputationRequest(
        [IoSpecification("input", [Index(n, t, 0) for n in range(num_seq)
                                   for t in range(-8, frames + 8)]),
         IoSpecification("ivector", [Index(n, 0, 0) for n in range(num_seq)])],
        [IoSpecification("output", [Index(n, t, 0) for n in range(num_seq)
                                    for t in range(frames)], deriv)],
        need_model_derivative=deriv)


class FakeCompiler:
    """Stands in for the Compiler: a small computation that depends on the request."""

    def __init__(self, nnet: Nnet) -> None:
        self.nnet = nnet
        self.calls = 0

    def __call__(self, request: ComputationRequest) -> NnetComputation:
        self.calls += 1
        out = request.outputs[0]
        comp = NnetComputation(matrix_debug_info=[MatrixDebugInfo()])
        rows = len(out.indexes)
        # (valid as far as the checks of a disk load go: sizes and indexes in range)
        node = self.nnet.get_node_index(out.name)
        s, t = (comp.new_matrix(rows, self.nnet.output_dim(out.name)) for _ in range(2))
        cindexes = [(node, i) for i in out.indexes]
        comp.matrix_debug_info[1:] = [MatrixDebugInfo(False, cindexes)] * 2
        comp.add_indexes(np.arange(rows)[::-1])
        comp.commands += [Command(CommandType.ALLOC_MATRIX, arg1=s),
                          Command(CommandType.ALLOC_MATRIX, arg1=t),
                          Command(CommandType.SET_CONST, 0.25, arg1=t),
                          Command(CommandType.COPY_ROWS, 1.0, s, t, 0),
                          Command(CommandType.DEALLOC_MATRIX, arg1=t),
                          Command(CommandType.PROVIDE_OUTPUT, arg1=s, arg2=node)]
        return comp


def _compiler(nnet: Nnet, tmp_path: Path, fake: FakeCompiler | None = None,
              options: CachingCompilerOptions = NO_CHECK, **kw) -> CachingCompiler:
    return CachingCompiler(nnet, options, cache_dir=tmp_path / "cache",
                           compile_fn=fake or FakeCompiler(nnet), **kw)


def _entries(tmp_path: Path) -> list[str]:
    d = tmp_path / "cache"
    return sorted(os.listdir(d)) if d.exists() else []


# -- keys -------------------------------------------------------------------------


def test_key_ignores_parameters_but_not_structure(tmp_path: Path) -> None:
    nnet = _nnet()
    request = _request()
    key = _compiler(nnet, tmp_path).key(request)
    assert key == _compiler(_nnet(), tmp_path).key(copy.deepcopy(request))

    trained = _nnet()
    for comp in trained.components:
        for name in ("linear_params", "bias_params"):
            if hasattr(comp, name):
                setattr(comp, name, getattr(comp, name) * 3 + 1)
        if hasattr(comp, "learning_rate"):
            comp.learning_rate = 0.123
    assert nnet_structure_text(trained) == nnet_structure_text(nnet)
    assert _compiler(trained, tmp_path).key(request) == key

    # A zero learning rate changes what the compiler emits (no model update).
    frozen = _nnet()
    frozen.components[frozen.get_component_index("tdnn2.affine")].learning_rate = 0.0
    assert _compiler(frozen, tmp_path).key(request) != key

    for old, new in (("Offset(input, 1)", "Offset(input, 2)"),
                     ("type=RectifiedLinearComponent dim=256 self-repair-scale=1e-05\n"
                      "component name=tdnn1.batchnorm",
                      "type=SigmoidComponent dim=256\ncomponent name=tdnn1.batchnorm"),
                     ("name=output.log-softmax type=LogSoftmaxComponent",
                      "name=output.softmax type=LogSoftmaxComponent")):
        assert old in CONFIG
        changed = _nnet(CONFIG.replace(old, new).replace("component=output.log-softmax",
                                                         "component=output.softmax")
                        if "softmax" in new else CONFIG.replace(old, new))
        assert _compiler(changed, tmp_path).key(request) != key, new


def test_code_fingerprint_only_when_a_disk_key_is_needed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the disk cache the source files are never hashed and the
    network's structure text is never made (a compile and a memory hit
    included); the key made later is the key made from the whole context
    (fingerprint, options, structure) at once."""
    calls = []
    structures = []
    real = cache_mod.code_fingerprint
    real_structure = cache_mod.component_structure

    def counted() -> str:
        calls.append(1)
        return real()

    def counted_structure(component):
        structures.append(1)
        return real_structure(component)

    monkeypatch.setattr(cache_mod, "code_fingerprint", counted)
    monkeypatch.setattr(cache_mod, "component_structure", counted_structure)
    nnet = _nnet()
    compiler = CachingCompiler(nnet, use_disk=False)
    request = _request()
    compiler.compile(request)
    compiler.compile(request)
    assert calls == [] and structures == [] and compiler.num_memory_hits == 1
    key = compiler.key(request)
    assert len(calls) == 1 and len(structures) == nnet.num_components()
    compiler.key(request)
    assert len(calls) == 1 and len(structures) == nnet.num_components()
    assert key == CachingCompiler(_nnet(), cache_dir=tmp_path / "c").key(request)
    import json
    from pynnet3.io.hashing import sha256
    context, structure = compiler._key_context
    h = sha256(cache_mod._KEY_VERSION)
    h.update(json.dumps({**context, "code": real()}, sort_keys=True).encode() + b"\n")
    h.update(structure.encode())
    assert key == sha256(h.digest() + sha256(
        cache_mod.request_key_bytes(request)).digest()).hexdigest()


def test_key_depends_on_options_and_request(tmp_path: Path) -> None:
    nnet = _nnet()
    request = _request()
    key = _compiler(nnet, tmp_path).key(request)
    assert _compiler(nnet, tmp_path, options=dataclasses.replace(NO_CHECK, cache_capacity=3,
                                                                 check=True)).key(request) == key
    for opts in (dataclasses.replace(NO_CHECK, use_shortcut=True),
                 dataclasses.replace(NO_CHECK, output_debug_info=False)):
        assert _compiler(nnet, tmp_path, options=opts).key(request) != key

    @dataclasses.dataclass
    class Opts:
        optimize: bool = True

    a = _compiler(nnet, tmp_path, optimize_options=Opts(True)).key(request)
    assert a != _compiler(nnet, tmp_path, optimize_options=Opts(False)).key(request)
    for other in (_request(num_seq=3), _request(deriv=True), _request(frames=5)):
        assert _compiler(nnet, tmp_path).key(other) != key
    flipped = _request()
    flipped.store_component_stats = True
    assert _compiler(nnet, tmp_path).key(flipped) != key


def test_key_of_non_simple_component_config(tmp_path: Path) -> None:
    nnet = read_nnet(str(reference_dir() / "random" / "000" / "final.raw"))
    request = read_request_file(str(reference_dir() / "random" / "000" / "request.txt"))
    key = _compiler(nnet, tmp_path).key(request)
    attention = nnet.components[nnet.get_component_index("attention")]
    assert attention.type_name == "RestrictedAttentionComponent"
    attention.stats_count += 10.0           # training statistics: not structure
    attention.entropy_stats = np.ones(attention.num_heads, dtype=np.float32)
    assert _compiler(nnet, tmp_path).key(request) == key
    attention.num_left_inputs += 1          # changes which inputs each output needs
    assert _compiler(nnet, tmp_path).key(request) != key


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYNNET3_CACHE_DIR", str(tmp_path / "x"))
    assert default_cache_dir() == tmp_path / "x"
    monkeypatch.delenv("PYNNET3_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "pynnet3" / "computations"
    assert CachingCompiler(_nnet(), NO_CHECK).cache_dir == default_cache_dir()


# -- memory and disk ---------------------------------------------------------------


def test_memory_then_disk(tmp_path: Path) -> None:
    nnet = _nnet()
    fake = FakeCompiler(nnet)
    cc = _compiler(nnet, tmp_path, fake)
    request = _request()
    first = cc.compile(request)
    assert cc.compile(copy.deepcopy(request)) is first
    assert fake.calls == 1 and cc.num_memory_hits == 1 and cc.num_compiled == 1
    assert _entries(tmp_path) == [cc.key(request) + ".computation"]

    cc2 = _compiler(nnet, tmp_path, fake)
    loaded = cc2.compile(request)
    assert fake.calls == 1 and cc2.num_disk_hits == 1
    assert loaded is not first and computation_to_bytes(loaded) == computation_to_bytes(first)
    assert [d.cindexes for d in loaded.matrix_debug_info] == \
        [d.cindexes for d in first.matrix_debug_info]
    assert "1 disk hits" in cc2.timing_summary()

    no_disk = _compiler(nnet, tmp_path, fake, use_disk=False)
    no_disk.compile(request)
    assert fake.calls == 2


def test_memory_lru_capacity(tmp_path: Path) -> None:
    nnet = _nnet()
    fake = FakeCompiler(nnet)
    cc = _compiler(nnet, tmp_path, fake, options=dataclasses.replace(NO_CHECK, cache_capacity=2),
                   use_disk=False)
    r1, r2, r3 = _request(frames=1), _request(frames=2), _request(frames=3)
    for r in (r1, r2, r3):
        cc.compile(r)
    assert fake.calls == 3
    cc.compile(r1)            # evicted by r3
    assert fake.calls == 4
    cc.compile(r3)            # still cached; now most recent
    assert fake.calls == 4
    cc.compile(r2)            # evicted (r1 and r3 were used after it)
    assert fake.calls == 5
    cc.compile(r1)            # evicted by r2 (r3 was used more recently)
    assert fake.calls == 6


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped", "other-key", "empty"])
def test_corrupt_entry_is_ignored_and_rewritten(tmp_path: Path, damage: str,
                                                capsys: pytest.CaptureFixture) -> None:
    nnet = _nnet()
    fake = FakeCompiler(nnet)
    request = _request()
    good = _compiler(nnet, tmp_path, fake).compile(request)
    path = tmp_path / "cache" / _entries(tmp_path)[0]
    data = path.read_bytes()
    if damage == "garbage":
        path.write_bytes(b"\x00garbage" * 10)
    elif damage == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif damage == "flipped":
        path.write_bytes(data[:-100] + bytes([data[-100] ^ 1]) + data[-99:])
    elif damage == "other-key":
        other = _compiler(nnet, tmp_path, fake).key(_request(frames=9))
        path.write_bytes(data.replace(path.stem.encode(), other.encode()))
    else:
        path.write_bytes(b"")
    capsys.readouterr()
    cc = _compiler(nnet, tmp_path, fake)
    again = cc.compile(request)
    err = capsys.readouterr().err
    assert "WARNING (" in err and "ignoring unusable computation cache entry" in err
    assert str(path) in err
    assert fake.calls == 2 and cc.num_compiled == 1 and cc.num_disk_hits == 0
    assert computation_to_bytes(again) == computation_to_bytes(good)
    # The entry was rewritten: a fresh compiler loads it without complaint.
    cc3 = _compiler(nnet, tmp_path, fake)
    cc3.compile(request)
    assert cc3.num_disk_hits == 1 and "WARNING" not in capsys.readouterr().err


def _failing_write(f, data: bytes) -> None:
    f.write(data[:len(data) // 2])
    f.flush()
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("where", ["write", "rename"])
def test_failed_write_leaves_no_partial_file(tmp_path: Path, where: str,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture) -> None:
    nnet = _nnet()
    fake = FakeCompiler(nnet)
    if where == "write":
        monkeypatch.setattr(atomic, "_write_all", _failing_write)
    else:
        def failing_replace(src: str, dst: str) -> None:
            raise OSError(13, "Permission denied")
        monkeypatch.setattr(cache_mod.os, "replace", failing_replace)
    cc = _compiler(nnet, tmp_path, fake)
    comp = cc.compile(_request())
    assert len(comp.commands) == 6                      # compiling still worked
    assert "cannot write computation cache entry" in capsys.readouterr().err
    assert _entries(tmp_path) == []                     # no entry, no temporary file
    cc.compile(_request(frames=7))                      # further writes are not attempted
    assert _entries(tmp_path) == []
    monkeypatch.undo()
    assert computation_to_bytes(_compiler(nnet, tmp_path, fake).compile(_request())) == \
        computation_to_bytes(comp)
    assert len(_entries(tmp_path)) == 1


def test_concurrent_atomic_writes(tmp_path: Path) -> None:
    path = tmp_path / "entry"
    contents = [bytes([i]) * (200_000 + i) for i in range(6)]
    threads = [threading.Thread(target=atomic_write, args=(path, c)) for c in contents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert path.read_bytes() in contents
    assert os.listdir(tmp_path) == ["entry"]


# -- with the real compiler ------------------------------------------------------------


@pytest.mark.parametrize("seed", curated("random", ["000", "005", "007", "011", "020", "021"]))
def test_loaded_computation_equals_compiled(tmp_path: Path, seed: str) -> None:
    """Reference networks with attention, statistics, convolution, distribute, TDNN and
    backprop-truncation components: their precomputed indexes are rebuilt on load."""
    pytest.importorskip("pynnet3.compile.compiler")
    d = reference_dir() / "random" / seed
    nnet = read_nnet(str(d / "final.raw"))
    request = read_request_file(str(d / "request.txt"))
    opts = CachingCompilerOptions()
    compiled = CachingCompiler(nnet, opts, cache_dir=tmp_path).compile(request)
    cc = CachingCompiler(nnet, opts, cache_dir=tmp_path)
    loaded = cc.compile(request)
    assert cc.num_disk_hits == 1 and cc.num_compiled == 0
    assert computation_to_bytes(loaded) == computation_to_bytes(compiled)
    pre_c, pre_l = compiled.component_precomputed_indexes, loaded.component_precomputed_indexes
    assert len(pre_c) == len(pre_l)
    assert sum(p.data is not None for p in pre_c) >= 1
    for p, (a, b) in enumerate(zip(pre_c, pre_l)):
        assert deep_equal(a.data, b.data), f"precomputed_indexes[{p}]"
    assert loaded.print(nnet.component_names, nnet.node_names) == \
        compiled.print(nnet.component_names, nnet.node_names)


def test_shortcut_caches_the_mini_request(tmp_path: Path) -> None:
    pytest.importorskip("pynnet3.compile.shortcut")
    nnet = _nnet()
    request = _request(num_seq=4, frames=3, deriv=True)
    cc = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=True), cache_dir=tmp_path)
    comp = cc.compile(request)
    assert cc.num_compiled == 2 and len(os.listdir(tmp_path)) == 2   # mini + expanded
    cc2 = CachingCompiler(nnet, CachingCompilerOptions(use_shortcut=True), cache_dir=tmp_path)
    assert computation_to_bytes(cc2.compile(request)) == computation_to_bytes(comp) \
        and cc2.num_disk_hits == 1
    mini = _request(num_seq=2, frames=3, deriv=True)
    cc2.compile(mini)
    assert cc2.num_disk_hits == 2 and cc2.num_compiled == 0


# -- the optimizer hook ------------------------------------------------------------------


def test_optimize_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache runs the optimizer (looked up on the optimize package when
    first needed) with its own options, which are part of the key."""
    nnet = _nnet()
    import pynnet3.optimize as opt_pkg

    seen = []

    def fake_optimize(options, nnet_, request, computation, analyzer=None):
        seen.append(options)
        computation.commands.insert(0, Command(CommandType.NO_OPERATION))
        return computation

    before = _compiler(nnet, tmp_path).key(_request())
    monkeypatch.setattr(opt_pkg, "optimize", fake_optimize, raising=False)
    cc = _compiler(nnet, tmp_path, optimize_options="my-options")
    assert cc.key(_request()) != before
    out = cc.compile(_request())
    assert seen == ["my-options"] and out.commands[0].command_type is CommandType.NO_OPERATION


def test_computation_bytes_edge_cases() -> None:
    """What the cache stores: empty computations, empty and multi-column index tables."""
    empty = NnetComputation()
    assert computation_to_bytes(computation_from_bytes(computation_to_bytes(empty))) == \
        computation_to_bytes(empty)
    comp = FakeCompiler(_nnet())(_request())
    comp.add_indexes([])
    comp.add_indexes_multi([(1, 0), (-1, -1), (1, 3)])
    comp.add_indexes_ranges([(0, 2), (-1, -1)])
    comp.component_precomputed_indexes.append(
        PrecomputedIndexesInfo(None, [Index(0, t, 0) for t in range(3)], [Index(1, 2, 3)]))
    back = computation_from_bytes(computation_to_bytes(comp))
    assert computation_to_bytes(back) == computation_to_bytes(comp)
    assert [a.tolist() for a in back.indexes] == [a.tolist() for a in comp.indexes]
    assert back.indexes_multi[0].tolist() == [[1, 0], [-1, -1], [1, 3]]
    assert back.indexes_ranges[0].tolist() == [[0, 2], [-1, -1]]
    assert list(back.component_precomputed_indexes[1].output_indexes) == [Index(1, 2, 3)]
    assert back.matrix_debug_info[1].cindexes == comp.matrix_debug_info[1].cindexes
    with pytest.raises(FormatError):
        computation_from_bytes(computation_to_bytes(comp)[:-50])


def test_raw_container_round_trip_and_damage() -> None:
    """The computation file holds the computation (read back as views, not
    copies); damaged data is a FormatError."""
    comp = FakeCompiler(_nnet())(_request())
    comp.add_indexes([0, -1, 2])
    comp.add_indexes_multi([(1, 0), (-1, -1)])
    comp.component_precomputed_indexes.append(
        PrecomputedIndexesInfo(None, [Index(0, t, 0) for t in range(3)], [Index(1, 2, 3)]))
    raw = computation_to_bytes(comp)
    assert not raw.startswith(b"PK")
    back = computation_from_bytes(memoryview(raw))
    assert computation_to_bytes(back) == computation_to_bytes(comp)
    back.indexes[-1][0] = 5           # index tables are the computation's own (writable)
    assert computation_from_bytes(raw).indexes[-1][0] == 0
    for damaged in (raw[:-4], raw[:40], b"x" + raw[1:]):
        with pytest.raises(FormatError):
            computation_from_bytes(damaged)


def test_source_fingerprint_follows_the_source_bytes(tmp_path: Path) -> None:
    """The code fingerprint changes with any byte or name of a source file
    and with nothing else (bytecode, other files)."""
    (tmp_path / "optimize" / "sub").mkdir(parents=True)
    (tmp_path / "compile").mkdir()
    a = tmp_path / "optimize" / "a.py"
    a.write_text("x = 1\n")
    (tmp_path / "optimize" / "sub" / "b.py").write_text("y = 2\n")
    (tmp_path / "compile" / "c.py").write_text("z = 3\n")
    subs = ("compile", "optimize")
    base = cache_mod.source_fingerprint(str(tmp_path), subs)
    assert base == cache_mod.source_fingerprint(str(tmp_path), subs)
    (tmp_path / "optimize" / "__pycache__").mkdir()
    (tmp_path / "optimize" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0junk")
    (tmp_path / "optimize" / "notes.txt").write_text("not source\n")
    assert cache_mod.source_fingerprint(str(tmp_path), subs) == base
    a.write_text("x = 2\n")
    changed = cache_mod.source_fingerprint(str(tmp_path), subs)
    assert changed != base
    a.write_text("x = 1\n")
    assert cache_mod.source_fingerprint(str(tmp_path), subs) == base
    a.rename(tmp_path / "optimize" / "a2.py")
    assert cache_mod.source_fingerprint(str(tmp_path), subs) != base
    assert cache_mod.source_fingerprint(str(tmp_path), ("compile",)) != base
