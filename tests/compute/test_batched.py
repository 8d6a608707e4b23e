"""Chunks computed several at a time (pynnet3.compute.batched) must give what
DecodableNnetSimple gives one chunk at a time, and so what Kaldi's
nnet3-compute gives:

* the batch sizes and the multi-sequence request (one chunk: exactly
  DecodableNnetSimple's request);
* a tiny linear network, against the one-chunk-at-a-time path: online
  iVectors (a different iVector per chunk), a different first chunk
  (extra-left-context-initial), priors, acoustic scale, frame subsampling;
* real Kaldi outputs: the vosk TDNN-F model (a 300-frame utterance: six
  chunks in batches of 4 + 2), and recurrent (LSTMP, TDNN-LSTM), attention,
  CNN and OPGRU recipe networks, whose outputs depend on each chunk keeping
  its own left context.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pynnet3.cache import request_key_bytes
from pynnet3.compute.batched import (ChunkBatchComputer, ChunkShape, batch_sizes,
                                     multi_chunk_request)
from pynnet3.compute.decodable import DecodableNnetSimple, NnetSimpleComputationOptions
from pynnet3.errors import ConfigError
from pynnet3.nnet.nnet import Nnet
from tests.compute.nnet3_compute_cases import (SMALL, SMALL_CI, TINY_CONFIG, assert_close,
                                               load_ark, new_compiler, small_case)

kaldiio = pytest.importorskip("kaldiio")


@pytest.fixture(scope="module")
def tiny() -> Nnet:
    nnet = Nnet()
    nnet.read_config(TINY_CONFIG, "tiny")
    rng = np.random.RandomState(1)
    affine = nnet.get_component(nnet.get_component_index("affine"))
    affine.linear_params = rng.randn(4, 11).astype(np.float32)
    affine.bias_params = rng.randn(4).astype(np.float32)
    return nnet


def test_batch_sizes() -> None:
    assert batch_sizes(19, 16) == [16, 2, 1]
    assert batch_sizes(32, 16) == [16, 16]
    assert batch_sizes(7, 8) == [4, 2, 1]
    assert batch_sizes(3, 1) == [1, 1, 1]
    assert batch_sizes(0, 16) == []
    # A maximum that is not a power of two: 12, 6, 3, 1.
    assert batch_sizes(22, 12) == [12, 6, 3, 1]
    with pytest.raises(ConfigError):
        batch_sizes(3, 0)
    with pytest.raises(ConfigError):
        ChunkBatchComputer(0)


def test_one_chunk_request_is_decodables(tiny: Nnet) -> None:
    feats = np.zeros((40, 3), dtype=np.float32)
    opts = NnetSimpleComputationOptions(frames_per_chunk=12, frame_subsampling_factor=3)
    dec = DecodableNnetSimple(opts, tiny, None, feats, new_compiler(tiny, opts),
                              ivector=np.zeros(2, np.float32))
    chunk = dec.chunk_inputs(4)
    shape = ChunkShape(chunk.input_t_start - chunk.output_t_start, chunk.input_feats.shape[0],
                       True, chunk.num_subsampled_frames)
    ours = multi_chunk_request(shape, 1, 3)
    kaldis = dec.make_request(chunk.input_t_start, chunk.input_feats.shape[0], True,
                              chunk.output_t_start, chunk.num_subsampled_frames)
    assert request_key_bytes(ours) == request_key_bytes(kaldis)
    # Three chunks: sequence-major rows, n = 0, 1, 2, as Kaldi's NnetBatchComputer.
    three = multi_chunk_request(shape, 3, 3)
    inputs = three.inputs[0].indexes
    assert len(inputs) == 3 * shape.num_input_frames
    assert [tuple(i) for i in inputs[:2]] == [(0, shape.input_offset, 0),
                                              (0, shape.input_offset + 1, 0)]
    assert tuple(inputs[shape.num_input_frames]) == (1, shape.input_offset, 0)
    assert [tuple(i) for i in three.inputs[1].indexes] == [(0, 0, 0), (1, 0, 0), (2, 0, 0)]
    assert [tuple(i) for i in three.outputs[0].indexes[:2]] == [(0, 0, 0), (0, 3, 0)]


@pytest.mark.parametrize("fields", [
    dict(frames_per_chunk=5, acoustic_scale=0.5),
    dict(frames_per_chunk=6, frame_subsampling_factor=3, extra_left_context=2,
         extra_left_context_initial=0, extra_right_context_final=1),
])
@pytest.mark.parametrize("max_chunks", [1, 2, 4, 16])
def test_tiny_batched_equals_one_at_a_time(tiny: Nnet, fields: dict[str, Any],
                                           max_chunks: int) -> None:
    rng = np.random.RandomState(4)
    feats = rng.randn(47, 3).astype(np.float32)
    online = rng.randn(10, 2).astype(np.float32)       # a different iVector per chunk
    priors = rng.uniform(0.1, 1.0, size=4).astype(np.float32)
    opts = NnetSimpleComputationOptions(**fields)
    compiler = new_compiler(tiny, opts)

    def decodable() -> DecodableNnetSimple:
        return DecodableNnetSimple(opts, tiny, priors, feats, compiler, online_ivectors=online,
                                   online_ivector_period=5)

    want = decodable().get_all_output()
    got = ChunkBatchComputer(max_chunks).get_all_output(decodable())
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_vosk_batched_against_kaldi(vosk_mdl: Path) -> None:
    from pynnet3.compute.decodable import prepare_nnet_for_test
    from pynnet3.compile.model_io import read_nnet
    from tests.helpers import reference_dir

    ref_dir = reference_dir() / "vosk_ko"
    nnet = read_nnet(str(vosk_mdl))
    prepare_nnet_for_test(nnet)
    feats, ivectors = load_ark(ref_dir / "feats.ark"), load_ark(ref_dir / "ivectors.ark")
    ref = load_ark(ref_dir / "out_a_fss3.ark")
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=3)
    compiler = new_compiler(nnet, opts)
    batcher = ChunkBatchComputer(4)
    # 2 and 6 chunks (a last, shorter one); the curated subset has only utt1_57
    for utt in [u for u in ("utt1_57", "utt2_300") if u in feats]:
        dec = DecodableNnetSimple(opts, nnet, None, feats[utt], compiler, ivector=ivectors[utt])
        assert_close(batcher.get_all_output(dec), ref[utt], f"vosk batched {utt}")


@pytest.mark.parametrize("name,archive,utts", SMALL_CI,
                         ids=[f"{n}-{a[:5]}" for n, a, _ in SMALL_CI])
def test_small_batched_against_kaldi(name: str, archive: str, utts: list[str]) -> None:
    case = small_case(name)
    if archive not in case["commands"]:
        pytest.skip(f"{name} has no {archive}")
    fields, use_ivectors = case["commands"][archive]
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, **fields)
    if case["compiler"] is None:
        case["compiler"] = new_compiler(case["nnet"], opts)
    ref = load_ark(case["dir"] / archive)
    batcher = ChunkBatchComputer(2)
    for utt in utts:
        ivector = case["ivectors"][utt] if use_ivectors else None
        dec = DecodableNnetSimple(opts, case["nnet"], None, case["feats"][utt], case["compiler"],
                                  ivector=ivector)
        assert_close(batcher.get_all_output(dec), ref[utt], f"{name} {archive} {utt} batched")


@pytest.mark.slow
@pytest.mark.parametrize("archive", ["out_a.ark", "out_b.ark", "out_c.ark"])
@pytest.mark.parametrize("name", SMALL)
def test_small_batched_all(name: str, archive: str) -> None:
    case = small_case(name)
    if archive not in case["commands"]:
        pytest.skip(f"{name} has no {archive}")
    fields, use_ivectors = case["commands"][archive]
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, **fields)
    if case["compiler"] is None:
        case["compiler"] = new_compiler(case["nnet"], opts)
    ref = load_ark(case["dir"] / archive)
    batcher = ChunkBatchComputer(4)
    for utt in sorted(ref):
        ivector = case["ivectors"][utt] if use_ivectors else None
        dec = DecodableNnetSimple(opts, case["nnet"], None, case["feats"][utt], case["compiler"],
                                  ivector=ivector)
        assert_close(batcher.get_all_output(dec), ref[utt], f"{name} {archive} {utt} batched")


@pytest.mark.parametrize("kaldi_chunks", [False, True])
def test_pieces_computed_straight_into_the_result(tiny: Nnet, kaldi_chunks: bool,
                                                  monkeypatch) -> None:
    """A batch of one chunk or piece writes its output straight into its rows
    of the utterance's result (NnetComputer.set_output_buffer), with the
    values of the one-chunk-at-a-time path; batches of several chunks copy."""
    from pynnet3.compute.computer import NnetComputer

    rng = np.random.RandomState(5)
    feats = rng.randn(61, 3).astype(np.float32)
    ivector = rng.randn(2).astype(np.float32)
    opts = NnetSimpleComputationOptions(frames_per_chunk=6, frame_subsampling_factor=3)
    compiler = new_compiler(tiny, opts)
    calls: list[bool] = []
    original = NnetComputer.set_output_buffer

    def recording(self: NnetComputer, name: str, buffer: np.ndarray) -> bool:
        calls.append(original(self, name, buffer))
        return calls[-1]

    monkeypatch.setattr(NnetComputer, "set_output_buffer", recording)

    def decodable() -> DecodableNnetSimple:
        return DecodableNnetSimple(opts, tiny, None, feats, compiler, ivector=ivector)

    want = decodable().get_all_output()
    got = ChunkBatchComputer(4, kaldi_chunks).get_all_output(decodable())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert calls and all(calls)


def _first_chunk_computation(tiny: Nnet, seed: int):
    """The first chunk of a random 30-frame utterance of ``tiny`` (6 frames a
    chunk, subsampling 3) and the compiled one-chunk computation for it."""
    rng = np.random.RandomState(seed)
    opts = NnetSimpleComputationOptions(frames_per_chunk=6, frame_subsampling_factor=3)
    dec = DecodableNnetSimple(opts, tiny, None, rng.randn(30, 3).astype(np.float32),
                              new_compiler(tiny, opts), ivector=rng.randn(2).astype(np.float32))
    chunk = dec.chunk_inputs(0)
    shape = ChunkShape(chunk.input_t_start - chunk.output_t_start, chunk.input_feats.shape[0],
                       True, chunk.num_subsampled_frames)
    return chunk, dec.compiler.compile(multi_chunk_request(shape, 1, 3))


def test_set_output_buffer(tiny: Nnet) -> None:
    from pynnet3.compute.computer import NnetComputeOptions, NnetComputer

    chunk, computation = _first_chunk_computation(tiny, seed=6)

    def run(buffer: np.ndarray | None) -> tuple[np.ndarray, bool]:
        computer = NnetComputer(NnetComputeOptions(), computation, tiny)
        taken = computer.set_output_buffer("output", buffer) if buffer is not None else False
        computer.accept_input("input", chunk.input_feats)
        computer.accept_input("ivector", chunk.ivector.reshape(1, -1))
        computer.run()
        return computer.get_output("output"), taken

    want, _ = run(None)
    buffer = np.full((want.shape[0] + 2, want.shape[1]), 7.0, np.float32)
    got, taken = run(buffer[1:-1])
    assert taken and got.base is buffer
    np.testing.assert_array_equal(got, want)
    assert (buffer[0] == 7).all() and (buffer[-1] == 7).all()    # nothing written outside
    # A buffer of another shape, dtype or layout is refused and nothing changes.
    for bad in (np.zeros((want.shape[0] + 1, want.shape[1]), np.float32),
                np.zeros(want.shape, np.float64),
                np.zeros((want.shape[1], want.shape[0]), np.float32).T):
        got, taken = run(bad)
        assert not taken and got is not bad
        np.testing.assert_array_equal(got, want)


def test_deferred_output_buffer(tiny: Nnet) -> None:
    """A DeferredBuffer is asked for its array once, while the computation
    runs (when it allocates the output), not when it is set; the output lands
    in that array with the values of a computer that allocates it; an array
    of the wrong shape is an error."""
    from pynnet3.compute.computer import DeferredBuffer, NnetComputeOptions, NnetComputer
    from pynnet3.errors import PynnetError

    chunk, computation = _first_chunk_computation(tiny, seed=8)

    def computer() -> NnetComputer:
        return NnetComputer(NnetComputeOptions(), computation, tiny)

    def run(c: NnetComputer) -> None:
        c.accept_input("input", chunk.input_feats)
        c.accept_input("ivector", chunk.ivector.reshape(1, -1))
        c.run()

    plain = computer()
    run(plain)
    want = plain.get_output("output")
    target = np.full(want.shape, 7.0, np.float32)
    asked: list[int] = []
    deferred = computer()

    def give() -> np.ndarray:
        asked.append(deferred.program_counter)
        return target

    assert deferred.set_output_buffer("output", DeferredBuffer(want.shape, give))
    assert not asked
    run(deferred)
    assert len(asked) == 1 and asked[0] > 0
    got = deferred.get_output("output")
    assert got is target
    np.testing.assert_array_equal(got, want)
    # The wrong shape up front is refused; a wrong array at allocation is an error.
    assert not computer().set_output_buffer(
        "output", DeferredBuffer((want.shape[0] + 1, want.shape[1]), give))
    wrong = computer()
    assert wrong.set_output_buffer("output", DeferredBuffer(
        want.shape, lambda: np.zeros((want.shape[0] + 1, want.shape[1]), np.float32)))
    with pytest.raises(PynnetError):
        run(wrong)


def test_utterance_output_taken_when_its_first_piece_allocates_it(tiny: Nnet) -> None:
    """ChunkBatchComputer takes an utterance's output pages while the first
    piece's computation runs (when it allocates its output), not before it
    starts: a worker thread that starts an utterance while the one before is
    still being written then gets the written one's pages back."""
    import sys

    from pynnet3.compute.computer import NnetComputer

    rng = np.random.RandomState(9)
    opts = NnetSimpleComputationOptions(frames_per_chunk=6, frame_subsampling_factor=3)
    compiler = new_compiler(tiny, opts)
    batcher = ChunkBatchComputer(4)
    pages = batcher.output_pages
    original = pages.matrix
    running: list[bool] = []

    def matrix(num_rows: int, num_cols: int) -> np.ndarray:
        frame, inside = sys._getframe(1), False
        while frame is not None:
            inside = inside or frame.f_code is NnetComputer.run.__code__
            frame = frame.f_back
        running.append(inside)
        return original(num_rows, num_cols)

    pages.matrix = matrix  # type: ignore[method-assign]
    feats = rng.randn(200, 3).astype(np.float32)
    ivector = rng.randn(2).astype(np.float32)
    want = DecodableNnetSimple(opts, tiny, None, feats, compiler, ivector=ivector) \
        .get_all_output()
    got = batcher.get_all_output(DecodableNnetSimple(opts, tiny, None, feats, compiler,
                                                     ivector=ivector))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert running == [True]


def test_scratch_buffer_lends_its_end() -> None:
    from pynnet3.compute.computer import ScratchBuffer

    scratch = ScratchBuffer()
    assert scratch.lend(0, 10) is None                 # (nothing to lend yet)
    buf = scratch.get(1000)
    lent = scratch.lend(100, 500)
    assert lent is not None and lent.size == 500 and np.shares_memory(lent, buf)
    # (from the offset rounded up to a cache line: 112 elements)
    assert lent.__array_interface__["data"][0] == buf[112:].__array_interface__["data"][0]
    assert scratch.lend(700, 10) is None               # (one loan at a time)
    assert scratch.get(112) is buf                     # below the loan: the buffer itself
    private = scratch.get(113)                         # reaching the loan: memory of its own
    assert private.size == 113 and not np.shares_memory(private, buf)
    assert not scratch.give_back(lent[:-1]) and not scratch.give_back(np.zeros(500, np.float32))
    assert scratch.give_back(lent.reshape(50, 10))
    assert scratch.get(1000) is buf
    assert scratch.lend(995, 10) is None               # (past the end)
    assert scratch.lend(3, 10) is not None and scratch._lent_from == 16   # (aligned)


WIDE_CONFIG = """input-node name=input dim=3
input-node name=ivector dim=2
component name=a1 type=AffineComponent input-dim=11 output-dim=64
component-node name=a1 component=a1 input=Append(Offset(input, -2), input, Offset(input, 1), ReplaceIndex(ivector, t, 0))
component name=r1 type=RectifiedLinearComponent dim=64
component-node name=r1 component=r1 input=a1
component name=a2 type=AffineComponent input-dim=64 output-dim=8
component-node name=a2 component=a2 input=r1
component name=r2 type=RectifiedLinearComponent dim=8
component-node name=r2 component=r2 input=a2
component name=a3 type=AffineComponent input-dim=8 output-dim=8
component-node name=a3 component=a3 input=r2
component name=r3 type=RectifiedLinearComponent dim=8
component-node name=r3 component=r3 input=a3
component name=a4 type=AffineComponent input-dim=8 output-dim=4
component-node name=a4 component=a4 input=r3
output-node name=output input=a4
"""


def _wide_nnet() -> Nnet:
    nnet = Nnet()
    nnet.read_config(WIDE_CONFIG, "wide")
    rng = np.random.RandomState(10)
    for name, dims in (("a1", (64, 11)), ("a2", (8, 64)), ("a3", (8, 8)), ("a4", (4, 8))):
        comp = nnet.get_component(nnet.get_component_index(name))
        comp.linear_params = rng.randn(*dims).astype(np.float32)
        comp.bias_params = rng.randn(dims[0]).astype(np.float32)
    return nnet


def test_nnet3_compute_borrows_and_hands_back(tmp_path: Path, monkeypatch) -> None:
    """nnet3_compute, with one thread and with two, puts every utterance's
    output in its worker's scratch buffer and hands it back once written (no
    computation falls back to memory of its own: a worker's next utterance
    waits for the write instead); the two archives are byte for byte the
    same."""
    from pynnet3.compile.model_io import write_nnet
    from pynnet3.compute.computer import ScratchBuffer
    from pynnet3.compute.utterances import Nnet3ComputeConfig, nnet3_compute

    write_nnet(str(tmp_path / "wide.raw"), _wide_nnet(), True)
    rng = np.random.RandomState(11)
    feats = {f"utt{i}": rng.randn(100 - 3 * i, 3).astype(np.float32) for i in range(3)}
    kaldiio.save_ark(str(tmp_path / "feats.ark"), feats)
    kaldiio.save_ark(str(tmp_path / "ivectors.ark"),
                     {k: rng.randn(2).astype(np.float32) for k in feats})
    lends: list[bool] = []
    own_memory: list[int] = []
    lend, get = ScratchBuffer.lend, ScratchBuffer.get

    def recording_lend(self: ScratchBuffer, offset: int, num: int) -> Any:
        lent = lend(self, offset, num)
        lends.append(lent is not None)
        return lent

    def recording_get(self: ScratchBuffer, num: int) -> np.ndarray:
        buf = get(self, num)
        if buf is not self._buf:
            own_memory.append(num)
        return buf

    monkeypatch.setattr(ScratchBuffer, "lend", recording_lend)
    monkeypatch.setattr(ScratchBuffer, "get", recording_get)
    outputs = {}
    for threads in (1, 2):
        lends.clear()
        config = Nnet3ComputeConfig(
            opts=NnetSimpleComputationOptions(frames_per_chunk=20, acoustic_scale=1.0),
            ivector_rspecifier=f"ark:{tmp_path / 'ivectors.ark'}", use_disk_cache=False,
            num_threads=threads, minibatch_size=4)
        out = tmp_path / f"out{threads}.ark"
        result = nnet3_compute(config, str(tmp_path / "wide.raw"),
                               f"ark:{tmp_path / 'feats.ark'}", f"ark:{out}")
        assert result.num_success == 3
        outputs[threads] = out.read_bytes()
        assert lends == [True] * 3
    assert not own_memory
    assert outputs[1] == outputs[2]


def test_outputs_in_scratch_are_identical_and_never_overwritten() -> None:
    """ChunkBatchComputer(outputs_in_scratch=True) puts an utterance's output
    in the idle end of the scratch buffer (a network wide at its input,
    narrow at its output) with the values of the usual path; an output not
    handed back is left alone by the next utterance, which gets other memory;
    once handed back, the next utterance borrows the scratch buffer again."""
    nnet = _wide_nnet()
    rng = np.random.RandomState(10)
    opts = NnetSimpleComputationOptions(frames_per_chunk=20)
    compiler = new_compiler(nnet, opts)
    ivector = rng.randn(2).astype(np.float32)
    # (a long piece and a short one: the output fits past what both use)
    feats = {n: rng.randn(n, 3).astype(np.float32) for n in (100, 97)}

    def decodable(n: int) -> DecodableNnetSimple:
        return DecodableNnetSimple(opts, nnet, None, feats[n], compiler, ivector=ivector)

    want = {n: ChunkBatchComputer(4).get_all_output(decodable(n)) for n in feats}
    lending = ChunkBatchComputer(4, outputs_in_scratch=True)
    first = lending.get_all_output(decodable(100))
    scratch = lending._scratch()
    assert np.shares_memory(first, scratch._buf)
    np.testing.assert_array_equal(first, want[100])
    second = lending.get_all_output(decodable(97))       # first not handed back
    np.testing.assert_array_equal(first, want[100])
    np.testing.assert_array_equal(second, want[97])
    assert not np.shares_memory(second, scratch._buf)
    lending.release_output(second)
    lending.release_output(first)
    third = lending.get_all_output(decodable(97))
    assert np.shares_memory(third, scratch._buf)
    np.testing.assert_array_equal(third, want[97])


def test_scratch_plan_is_a_valid_packing(tiny: Nnet) -> None:
    """plan_scratch gives matrices whose lifetimes overlap disjoint ranges of
    the buffer, leaves the inputs and outputs out, and a computer using the
    scratch buffer gives the output of one that allocates."""
    from pynnet3.compile.computation import CommandType
    from pynnet3.compute.computer import (NnetComputeOptions, NnetComputer, ScratchBuffer,
                                          plan_scratch)

    rng = np.random.RandomState(7)
    opts = NnetSimpleComputationOptions(frames_per_chunk=6, frame_subsampling_factor=3)
    dec = DecodableNnetSimple(opts, tiny, None, rng.randn(40, 3).astype(np.float32),
                              new_compiler(tiny, opts), ivector=rng.randn(2).astype(np.float32))
    piece = dec.piece_inputs(0, 8)
    shape = ChunkShape(piece.input_t_start - piece.output_t_start, piece.input_feats.shape[0],
                       True, piece.num_subsampled_frames)
    comp = dec.compiler.compile(multi_chunk_request(shape, 1, 3))
    plan = plan_scratch(comp)
    if plan is not None:
        offsets, total = plan
        life: dict[int, list[int]] = {}
        for pc, c in enumerate(comp.commands):
            if c.command_type in (CommandType.ALLOC_MATRIX, CommandType.DEALLOC_MATRIX):
                life.setdefault(comp.submatrices[c.arg1].matrix_index, []).append(pc)
            if c.command_type in (CommandType.ACCEPT_INPUT, CommandType.PROVIDE_OUTPUT):
                assert comp.submatrices[c.arg1].matrix_index not in offsets
        spans = {m: (o, o + comp.matrices[m].num_rows * comp.matrices[m].num_cols)
                 for m, o in offsets.items()}
        assert max(hi for _, hi in spans.values()) <= total
        for a in offsets:
            for b in offsets:
                if a < b and life[a][0] <= life[b][1] and life[b][0] <= life[a][1]:
                    assert spans[a][1] <= spans[b][0] or spans[b][1] <= spans[a][0]

    def run(scratch: ScratchBuffer | None) -> np.ndarray:
        computer = NnetComputer(NnetComputeOptions(poison_undefined=True), comp, tiny,
                                scratch=scratch)
        computer.accept_input("input", piece.input_feats)
        computer.accept_input("ivector", piece.ivector.reshape(1, -1))
        computer.run()
        return computer.get_output("output").copy()

    scratch = ScratchBuffer()
    np.testing.assert_array_equal(run(scratch), run(None))
    np.testing.assert_array_equal(run(scratch), run(None))     # (the buffer reused)


def test_scratch_buffer_waits_for_lent_elements() -> None:
    """A waiting ScratchBuffer's get() that reaches lent elements blocks until
    another thread gives them back, then hands out the buffer itself; after
    stop_waiting() it hands out memory of its own at once."""
    import threading

    from pynnet3.compute.computer import ScratchBuffer

    scratch = ScratchBuffer(wait_for_lent=True)
    base = scratch.get(1000)
    lent = scratch.lend(100, 500)
    assert lent is not None
    assert scratch.get(50) is base              # (below the lent elements: no wait)
    got: list[np.ndarray] = []
    worker = threading.Thread(target=lambda: got.append(scratch.get(800)))
    worker.start()
    worker.join(0.2)
    assert worker.is_alive() and not got        # waiting for the lent elements
    assert scratch.give_back(lent[:])
    worker.join(10)
    assert not worker.is_alive() and got[0] is base
    lent = scratch.lend(100, 500)
    assert lent is not None
    scratch.stop_waiting()
    own = scratch.get(800)
    assert own is not base and own.shape == (800,)
    assert ScratchBuffer().lend(0, 1) is None   # (nothing to lend from an empty buffer)


def test_vosk_scratch_plan_packs_the_peak(vosk_mdl: Path) -> None:
    """On the vosk TDNN-F piece computation the plan needs no more than the
    computation's peak of live matrices (greedy-by-size is optimal there)."""
    from pynnet3.compile.computation import CommandType
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.compute.computer import plan_scratch
    from pynnet3.compute.decodable import prepare_nnet_for_test

    nnet = read_nnet(str(vosk_mdl))
    prepare_nnet_for_test(nnet)
    opts = NnetSimpleComputationOptions(acoustic_scale=1.0, frame_subsampling_factor=3)
    dec = DecodableNnetSimple(opts, nnet, None, np.zeros((400, 40), np.float32),
                              new_compiler(nnet, opts), ivector=np.zeros(100, np.float32))
    piece = dec.piece_inputs(0, 68)
    shape = ChunkShape(piece.input_t_start - piece.output_t_start, piece.input_feats.shape[0],
                       True, piece.num_subsampled_frames)
    comp = dec.compiler.compile(multi_chunk_request(shape, 1, 3))
    plan = plan_scratch(comp)
    assert plan is not None
    live = peak = 0
    sizes: dict[int, int] = {}
    for c in comp.commands:
        if c.command_type not in (CommandType.ALLOC_MATRIX, CommandType.DEALLOC_MATRIX):
            continue
        m = comp.submatrices[c.arg1].matrix_index
        if c.command_type is CommandType.ALLOC_MATRIX and m in plan[0]:
            sizes[m] = comp.matrices[m].num_rows * comp.matrices[m].num_cols
            live += sizes[m]
            peak = max(peak, live)
        elif c.command_type is CommandType.DEALLOC_MATRIX:
            live -= sizes.pop(m, 0)
    assert peak <= plan[1] <= peak + 16 * len(plan[0])


def test_output_pages_are_reused_once_released() -> None:
    from pynnet3.compute.batched import OutputPages

    def pages_of(a: np.ndarray) -> Any:
        while isinstance(a, np.ndarray):
            a = a.base
        return a.obj if isinstance(a, memoryview) else a

    pool = OutputPages(keep=1)
    small = pool.matrix(10, 10)
    assert small.flags.owndata and small.dtype == np.float32     # (small: plain NumPy)
    first = pool.matrix(400, 1000)
    first[:] = 1.0
    second = pool.matrix(400, 1000)                    # first not released: new pages
    assert pages_of(second) is not pages_of(first)
    pool.release(first)
    pool.release(small)                                # (ignored)
    third = pool.matrix(300, 1000)                     # fits: the first's pages again
    assert pages_of(third) is pages_of(first) and third.shape == (300, 1000)
    assert pool.matrix(300, 1000) is not None and pages_of(pool.matrix(300, 1000)) \
        is not pages_of(first)                          # (taken: not handed out twice)
    pool.release(third)
    pool.release(second)                               # keep=1: one spare only
    assert len(pool._spare) == 1
