"""The chain egs binaries against real Kaldi's outputs (goldens in tests/data/chain;
the full reference/chain folder too when present)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from pynnet3.io.table import SequentialTableReader
from pynnet3.train.chain.egs import CHAIN_EXAMPLE_HOLDER
from tests.helpers import FULL_REFERENCE

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "chain"
FULL = FULL_REFERENCE / "chain"
GET_EGS_OPTS = ("--srand=1", "--left-context=8", "--right-context=8", "--num-frames=30",
                "--frame-subsampling-factor=3", "--compress=false")


def run(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    return subprocess.run([sys.executable, "-c", code, *args[1:]], input=stdin,
                          capture_output=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})


def log_messages(stderr: str) -> list[str]:
    """LOG/WARNING texts without Kaldi's ``LOG (prog[version]:where) `` prefix."""
    return [re.sub(r"^(LOG|WARNING) \(.*?\.(?:py|cc):\d+\) ", r"\1 ", line)
            for line in stderr.splitlines() if line.startswith(("LOG (", "WARNING ("))]


def read_egs(path: Path) -> list:
    with SequentialTableReader(f"ark:{path}", CHAIN_EXAMPLE_HOLDER) as rd:
        return list(rd)


def ok(p: subprocess.CompletedProcess) -> None:
    assert p.returncode == 0, p.stderr.decode()


def full(name: str) -> Path:
    if not (FULL / name).exists():
        pytest.skip(f"{FULL / name} not present")
    return FULL / name


# -- goldens (every clone) ----------------------------------------------------


def test_merge_golden(tmp_path):
    ok(p := run("nnet3-chain-merge-egs", "--minibatch-size=32", f"ark:{GOLDEN}/cegs_32.ark",
                f"ark:{tmp_path}/m.ark"))
    assert (tmp_path / "m.ark").read_bytes() == (GOLDEN / "merged_0.ark").read_bytes()
    assert "46={32->1,d=0}" in p.stderr.decode()


def test_merge_default_minibatch_is_64_and_discards(tmp_path):
    """32 egs, default --minibatch-size=64: nothing written, all discarded, exit 1."""
    p = run("nnet3-chain-merge-egs", f"ark:{GOLDEN}/cegs_32.ark", f"ark:{tmp_path}/m.ark")
    assert p.returncode == 1
    assert "d=32}" in p.stderr.decode()
    # 1:64 allows the partial minibatch at the end
    ok(run("nnet3-chain-merge-egs", "--minibatch-size=1:64", f"ark:{GOLDEN}/cegs_32.ark",
           f"ark:{tmp_path}/m2.ark"))
    assert (tmp_path / "m2.ark").read_bytes().replace(b"merged-0-32", b"") \
        == (GOLDEN / "merged_0.ark").read_bytes().replace(b"merged-0-32", b"")


def test_copy_golden_and_text(tmp_path):
    ok(p := run("nnet3-chain-copy-egs", f"ark:{GOLDEN}/cegs_32.ark", f"ark:{tmp_path}/c.ark"))
    assert (tmp_path / "c.ark").read_bytes() == (GOLDEN / "cegs_32.ark").read_bytes()
    assert log_messages(p.stderr.decode()) == [
        "LOG Read 32 neural-network training examples, wrote 32"]
    # round robin to two outputs, text on one
    ok(run("nnet3-chain-copy-egs", f"ark:{GOLDEN}/cegs_32.ark", f"ark:{tmp_path}/a.ark",
           f"ark,t:{tmp_path}/b.ark"))
    a, b = read_egs(tmp_path / "a.ark"), read_egs(tmp_path / "b.ark")
    keys = [k for k, _ in read_egs(GOLDEN / "cegs_32.ark")]
    assert [k for k, _ in a] == keys[0::2] and [k for k, _ in b] == keys[1::2]
    assert (tmp_path / "b.ark").read_bytes().split(b" ", 2)[1] == b"<Nnet3ChainEg>"


def test_copy_keep_proportion_frame_shift_and_context(tmp_path):
    src = read_egs(GOLDEN / "cegs_32.ark")
    ok(run("nnet3-chain-copy-egs", "--keep-proportion=0.5", "--srand=2",
           f"ark:{GOLDEN}/cegs_32.ark", f"ark:{tmp_path}/k.ark"))
    kept = [k for k, _ in read_egs(tmp_path / "k.ark")]
    assert 5 < len(kept) < 27 and set(kept) <= {k for k, _ in src}
    ok(run("nnet3-chain-copy-egs", "--keep-proportion=0.5", "--srand=2",
           f"ark:{GOLDEN}/cegs_32.ark", f"ark:{tmp_path}/k2.ark"))
    assert (tmp_path / "k2.ark").read_bytes() == (tmp_path / "k.ark").read_bytes()
    # --frame-shift=2: inputs move by 2, outputs by the nearest multiple of 3 (3)
    ok(run("nnet3-chain-copy-egs", "--frame-shift=2", f"ark:{GOLDEN}/cegs_32.ark",
           f"ark:{tmp_path}/s.ark"))
    e0, e1 = src[0][1], read_egs(tmp_path / "s.ark")[0][1]
    assert np.array_equal(e1.inputs[0].indexes[:, 1], e0.inputs[0].indexes[:, 1] + 2)
    assert np.array_equal(e1.outputs[0].indexes[:, 1], e0.outputs[0].indexes[:, 1] + 3)
    # --left-context=4 --right-context=2: input t from -4 to 27 + 2
    ok(run("nnet3-chain-copy-egs", "--left-context=4", "--right-context=2",
           f"ark:{GOLDEN}/cegs_32.ark", f"ark:{tmp_path}/ctx.ark"))
    e2 = read_egs(tmp_path / "ctx.ark")[0][1]
    assert e2.inputs[0].indexes[:, 1].tolist() == list(range(-4, 30))
    feats = e0.inputs[0].features.to_matrix()
    assert np.array_equal(e2.inputs[0].features.to_matrix(), feats[4:4 + 34])


def test_get_egs_golden_with_kaldis_chunk_starts(tmp_path):
    """Features of utt000-utt004 + supervision + normalization.fst, chunks
    forced to start where Kaldi's did (the eg keys): Kaldi's first 27 egs, byte
    for byte (supervision FSTs, deriv weights, input rows, keys)."""
    out = tmp_path / "g.ark"
    ok(p := run("nnet3-chain-get-egs", *GET_EGS_OPTS, f"--chunk-starts=ark:{GOLDEN}/cegs_32.ark",
                f"{GOLDEN}/normalization.fst", f"ark:{GOLDEN}/feats_5.ark",
                f"ark:{GOLDEN}/supervision.ark", f"ark:{out}"))
    mine = read_egs(out)
    ref = read_egs(GOLDEN / "cegs_32.ark")
    assert len(mine) == 27
    assert out.read_bytes() == b"".join(
        k.encode() + b" " + eg.to_bytes() for k, eg in ref[:27])
    assert ("LOG Split 5 utts, with total length 778 frames (0.00216111 hours assuming 100 "
            "frames per second) into 27 chunks.") in log_messages(p.stderr.decode())


def test_get_egs_without_normalization_then_normalize(tmp_path):
    ok(run("nnet3-chain-get-egs", *GET_EGS_OPTS, f"--chunk-starts=ark:{GOLDEN}/cegs_32.ark",
           f"ark:{GOLDEN}/feats_5.ark", f"ark:{GOLDEN}/supervision.ark", f"ark:{tmp_path}/u.ark"))
    un = read_egs(tmp_path / "u.ark")
    assert all(np.all(eg.outputs[0].supervision.fst.weight == 0) for _, eg in un)
    ok(p := run("nnet3-chain-normalize-egs", f"{GOLDEN}/normalization.fst",
                f"ark:{tmp_path}/u.ark", f"ark:{tmp_path}/n.ark"))
    assert log_messages(p.stderr.decode()) == ["LOG Added normalization to 27 egs; had errors on 0"]
    ref = read_egs(GOLDEN / "cegs_32.ark")[:27]
    assert (tmp_path / "n.ark").read_bytes() == b"".join(
        k.encode() + b" " + eg.to_bytes() for k, eg in ref)


def test_get_egs_random_chunks_are_consistent(tmp_path):
    """Without forced starts (Kaldi's placement is random): the same chunk
    count and sizes as Kaldi, every chunk's supervision equal to the one made
    at its start, and the same output for the same --srand."""
    args = (*GET_EGS_OPTS, f"{GOLDEN}/normalization.fst", f"ark:{GOLDEN}/feats_5.ark",
            f"ark:{GOLDEN}/supervision.ark")
    ok(run("nnet3-chain-get-egs", *args, f"ark:{tmp_path}/r1.ark"))
    ok(run("nnet3-chain-get-egs", *args, f"ark:{tmp_path}/r2.ark"))
    assert (tmp_path / "r1.ark").read_bytes() == (tmp_path / "r2.ark").read_bytes()
    egs = read_egs(tmp_path / "r1.ark")
    assert len(egs) == 27
    ok(run("nnet3-chain-get-egs", *GET_EGS_OPTS, f"--chunk-starts=ark:{tmp_path}/r1.ark", *args[6:],
           f"ark:{tmp_path}/r3.ark"))
    assert (tmp_path / "r3.ark").read_bytes() == (tmp_path / "r1.ark").read_bytes()


def test_shuffle_and_subset(tmp_path):
    src = {k: eg.to_bytes() for k, eg in read_egs(GOLDEN / "cegs_32.ark")}
    ok(run("nnet3-chain-shuffle-egs", "--srand=3", f"ark:{GOLDEN}/cegs_32.ark",
           f"ark:{tmp_path}/s.ark"))
    shuffled = read_egs(tmp_path / "s.ark")
    assert sorted(k for k, _ in shuffled) == sorted(src)
    assert [k for k, _ in shuffled] != list(src)
    assert all(eg.to_bytes() == src[k] for k, eg in shuffled)
    ok(run("nnet3-chain-shuffle-egs", "--buffer-size=5", f"ark:{GOLDEN}/cegs_32.ark",
           f"ark:{tmp_path}/b.ark"))
    assert sorted(k for k, _ in read_egs(tmp_path / "b.ark")) == sorted(src)
    ok(p := run("nnet3-chain-subset-egs", "--n=10", "--randomize-order=false",
                f"ark:{GOLDEN}/cegs_32.ark", f"ark:{tmp_path}/sub.ark"))
    sub = [k for k, _ in read_egs(tmp_path / "sub.ark")]
    assert len(sub) == 10 and set(sub) <= set(src)
    assert log_messages(p.stderr.decode()) == [
        "LOG Selected a subset of 10 out of 32 nnet3+chain training examples "]


def test_exit_statuses(tmp_path):
    (tmp_path / "empty.ark").write_bytes(b"")
    for name in ("nnet3-chain-copy-egs", "nnet3-chain-shuffle-egs", "nnet3-chain-subset-egs",
                 "nnet3-chain-merge-egs"):
        p = run(name, f"ark:{tmp_path}/empty.ark", f"ark:{tmp_path}/o.ark")
        assert p.returncode == 1, name
    p = run("nnet3-chain-get-egs", f"ark:{GOLDEN}/cegs_32.ark")
    assert p.returncode != 0 and b"Usage:  nnet3-chain-get-egs" in p.stderr + p.stdout


# -- the full reference (developers) ------------------------------------------


def test_full_merge_copy_get_egs(tmp_path):
    cegs = full("cegs.ark")
    ok(p := run("nnet3-chain-merge-egs", "--minibatch-size=32", f"ark:{cegs}",
                f"ark:{tmp_path}/m.ark"))
    assert (tmp_path / "m.ark").read_bytes() == (FULL / "merged.ark").read_bytes()
    assert log_messages(p.stderr.decode()) == log_messages((FULL / "log.merge.txt").read_text())
    ok(p := run("nnet3-chain-copy-egs", f"ark:{cegs}", f"ark:{tmp_path}/c.ark"))
    assert (tmp_path / "c.ark").read_bytes() == cegs.read_bytes()
    assert log_messages(p.stderr.decode()) == log_messages(
        (FULL / "log.copy_egs.txt").read_text())
    ok(p := run("nnet3-chain-get-egs", *GET_EGS_OPTS, f"--chunk-starts=ark:{cegs}",
                f"{FULL}/normalization.fst", f"ark:{FULL}/feats.ark",
                f"ark:{FULL}/supervision.ark", f"ark:{tmp_path}/g.ark"))
    assert (tmp_path / "g.ark").read_bytes() == cegs.read_bytes()
    assert log_messages(p.stderr.decode()) == log_messages((FULL / "log.get_egs.txt").read_text())
    # random placement: Kaldi's chunk count (the first stats line is placement-free)
    ok(p := run("nnet3-chain-get-egs", *GET_EGS_OPTS, f"{FULL}/normalization.fst",
                f"ark:{FULL}/feats.ark", f"ark:{FULL}/supervision.ark", f"ark:{tmp_path}/r.ark"))
    assert log_messages(p.stderr.decode())[0] == log_messages(
        (FULL / "log.get_egs.txt").read_text())[0]


def test_get_egs_ivectors_and_deriv_weights(tmp_path):
    """--online-ivectors: an 'ivector' input, one row of the utterance's
    iVectors; --deriv-weights-rspecifier: the chunk's slice of the weights
    times the overlap weights (Kaldi's ProcessFile)."""
    from pynnet3.io.table import TableWriter, MATRIX_HOLDER, VECTOR_HOLDER, GENERAL_MATRIX_HOLDER

    rng = np.random.default_rng(0)
    with SequentialTableReader(f"ark:{GOLDEN}/feats_5.ark", GENERAL_MATRIX_HOLDER) as rd:
        lengths = {k: m.num_rows for k, m in rd}
    ivecs = {k: rng.standard_normal(((n + 9) // 10, 4)).astype(np.float32)
             for k, n in lengths.items()}
    dws = {k: rng.uniform(0, 1, (n + 2) // 3).astype(np.float32) for k, n in lengths.items()}
    with TableWriter(f"ark:{tmp_path}/iv.ark", MATRIX_HOLDER) as w:
        for k, v in ivecs.items():
            w.write(k, v)
    with TableWriter(f"ark:{tmp_path}/dw.ark", VECTOR_HOLDER) as w:
        for k, v in dws.items():
            w.write(k, v)
    ok(run("nnet3-chain-get-egs", *GET_EGS_OPTS, f"--chunk-starts=ark:{GOLDEN}/cegs_32.ark",
           f"--online-ivectors=ark:{tmp_path}/iv.ark", "--online-ivector-period=10",
           f"--deriv-weights-rspecifier=ark:{tmp_path}/dw.ark", f"{GOLDEN}/normalization.fst",
           f"ark:{GOLDEN}/feats_5.ark", f"ark:{GOLDEN}/supervision.ark", f"ark:{tmp_path}/g.ark"))
    ref = dict(read_egs(GOLDEN / "cegs_32.ark"))
    mine = read_egs(tmp_path / "g.ark")
    assert len(mine) == 27
    for key, eg in mine:
        utt, first = key.rsplit("-", 1)
        r = ref[key]
        assert [io.name for io in eg.inputs] == ["input", "ivector"]
        iv = eg.inputs[1].features.to_matrix()
        assert iv.shape == (1, 4) and any(np.array_equal(iv[0], row) for row in ivecs[utt])
        assert eg.outputs[0].supervision == r.outputs[0].supervision
        start = int(first) // 3
        want = dws[utt][start:start + 10] * r.outputs[0].deriv_weights
        np.testing.assert_array_equal(eg.outputs[0].deriv_weights, want.astype(np.float32))


def test_get_egs_forced_chunks_carry_their_sizes(tmp_path):
    """With several --num-frames sizes the chunk sizes are drawn at random:
    --chunk-starts takes each chunk's size from the archive too, so another
    seed (another draw) still reproduces the archive's chunks exactly."""
    common = ("--left-context=8", "--right-context=8", "--num-frames=30,21",
              "--frame-subsampling-factor=3", "--compress=false", f"{GOLDEN}/normalization.fst",
              f"ark:{GOLDEN}/feats_5.ark", f"ark:{GOLDEN}/supervision.ark")
    ok(run("nnet3-chain-get-egs", "--srand=5", *common, f"ark:{tmp_path}/a.ark"))
    sizes = {eg.outputs[0].supervision.frames_per_sequence for _, eg in read_egs(tmp_path / "a.ark")}
    assert sizes == {7, 10}
    ok(run("nnet3-chain-get-egs", "--srand=11", f"--chunk-starts=ark:{tmp_path}/a.ark", *common,
           f"ark:{tmp_path}/b.ark"))
    assert (tmp_path / "b.ark").read_bytes() == (tmp_path / "a.ark").read_bytes()


def test_copy_truncate_deriv_weights(tmp_path):
    """--truncate-deriv-weights=2 (Kaldi's earlier option): the first and last
    two output frames get weight 0, the rest keep theirs."""
    ok(run("nnet3-chain-copy-egs", "--truncate-deriv-weights=2", f"ark:{GOLDEN}/merged_0.ark",
           f"ark:{tmp_path}/t.ark"))
    (_, src), = read_egs(GOLDEN / "merged_0.ark")
    (_, eg), = read_egs(tmp_path / "t.ark")
    want = src.outputs[0].deriv_weights.reshape(10, 32).copy()
    want[:2] = 0
    want[-2:] = 0
    assert np.array_equal(eg.outputs[0].deriv_weights, want.reshape(-1))
    p = run("nnet3-chain-copy-egs", "--truncate-deriv-weights=5", f"ark:{GOLDEN}/merged_0.ark",
            f"ark:{tmp_path}/t2.ark")
    assert p.returncode != 0
