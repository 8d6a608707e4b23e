"""What nnet3-compute loads: the modules that cost resident memory and that
a run of a network does not need stay out (issue 15: peak memory within 2x
of Kaldi's), and the hashing that replaced hashlib gives hashlib's digests."""
from __future__ import annotations

import hashlib
import subprocess
import sys

import numpy as np

from pynnet3.arraytools import sorted_unique
from pynnet3.io.hashing import blake2b, sha1, sha256
from pynnet3.nnet.components.tdnn_indexes import _sorted_distinct


def test_hashing_matches_hashlib() -> None:
    for data in (b"", b"abc", bytes(range(256)) * 1000):
        assert sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
        assert sha1(data).hexdigest() == hashlib.sha1(data).hexdigest()
        h = sha256()
        h.update(data[:7])
        h.update(data[7:])
        assert h.digest() == hashlib.sha256(data).digest()


def test_blake2b_matches_hashlib() -> None:
    for data in (b"", b"abc", bytes(range(256)) * 1000):
        for size in (32, 64):
            assert blake2b(data, digest_size=size).hexdigest() == \
                hashlib.blake2b(data, digest_size=size).hexdigest()


def test_sorted_distinct_matches_unique() -> None:
    rng = np.random.default_rng(1)
    for size in (0, 1, 513, 5000):
        values = rng.integers(-50, 50, size=size).astype(np.int64)
        assert np.array_equal(_sorted_distinct(values), np.unique(values))


def test_sorted_unique_matches_unique() -> None:
    rng = np.random.default_rng(2)
    for size in (0, 1, 2, 7, 1000):
        for dtype in (np.int32, np.int64):
            values = rng.integers(-20, 20, size=size).astype(dtype)
            got = sorted_unique(values)
            assert got.dtype == dtype
            assert np.array_equal(got, np.unique(values))
    grid = rng.integers(0, 5, size=(6, 7))
    assert np.array_equal(sorted_unique(grid), np.unique(grid))      # flattened, as np.unique


def test_small_compile_leaves_numpy_ma_out() -> None:
    """A small request (no Numba) compiles without importing numpy.ma, which
    NumPy 2's np.unique imports on its first call."""
    code = """
import sys
from pynnet3.nnet.nnet import Nnet
from pynnet3.compile.request_io import build_request
from pynnet3.cache import CachingCompiler
nnet = Nnet()
nnet.read_config(
    "input-node name=input dim=4\\n"
    "component name=a type=AffineComponent input-dim=12 output-dim=3\\n"
    "component-node name=a component=a input=Append(Offset(input,-1),input,Offset(input,1))\\n"
    "output-node name=output input=a\\n")
comp = CachingCompiler(nnet, use_disk=False).compile(build_request(nnet, frames_per_chunk=8))
assert comp.commands
print([m for m in ("numpy.ma", "numba") if m in sys.modules])
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]", p.stdout


HEAVY = ("_hashlib", "numpy.random", "numpy.ma", "socket", "scipy", "numba", "matplotlib",
         "kaldiio")


def test_compute_cli_import_leaves_heavy_modules_out() -> None:
    code = ("import sys; import pynnet3.cli.compute, pynnet3.compute.utterances, "
            "pynnet3.compile.model_io, pynnet3.cache, pynnet3.io.table; "
            f"print([m for m in {HEAVY!r} if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]", p.stdout


def test_binary_matrix_bytes_unchanged_for_any_shape() -> None:
    """The matrix writer hands its buffer over without tobytes(): the bytes
    are those of the old writer, empty and strided matrices included."""
    from pynnet3.io.kaldi_io import KaldiWriter

    for mat in (np.zeros((0, 0), np.float32), np.zeros((3, 0), np.float32),
                np.zeros((0, 4), np.float32), np.arange(12, dtype=np.float64).reshape(3, 4),
                np.arange(40, dtype=np.float32).reshape(5, 8)[::2, 1::3]):
        for double in (False, True):
            w = KaldiWriter(True)
            w.write_matrix(mat, double)
            rows, cols = mat.shape
            head = (b"DM " if double else b"FM ") + b"\x04" + np.int32(rows).tobytes() \
                + b"\x04" + np.int32(cols).tobytes()
            body = np.ascontiguousarray(mat, dtype="<f8" if double else "<f4").tobytes()
            assert w.getvalue() == head + body


def test_reading_full_matrices_leaves_general_matrix_out(tmp_path) -> None:
    """Tables of full matrices (binary and text) are read without importing
    the GeneralMatrix module, to the arrays GeneralMatrix.read gives; a
    compressed matrix still reads, through it."""
    from pynnet3.io.general_matrix import CompressedMatrix, GeneralMatrix
    from pynnet3.io.table import (GENERAL_MATRIX_HOLDER, MATRIX_HOLDER,
                                  SequentialTableReader, TableWriter)

    def read(spec: str, holder) -> dict:
        with SequentialTableReader(spec, holder) as r:
            return dict(r)

    rng = np.random.RandomState(3)
    mats = {"a": rng.randn(5, 3).astype(np.float32), "b": np.zeros((0, 0), np.float32)}
    for binary in (True, False):
        path = tmp_path / f"m{int(binary)}.ark"
        writer = TableWriter(f"ark{'' if binary else ',t'}:{path}", MATRIX_HOLDER)
        for key, m in mats.items():
            writer.write(key, m)
        writer.close()
        code = ("import sys; from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader\n"
                f"with SequentialTableReader('ark:{path}', MATRIX_HOLDER) as r:\n"
                "    assert len(list(r)) == 2\n"
                "print('pynnet3.io.general_matrix' in sys.modules)")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.strip() == "False", (p.stdout, p.stderr)
        got = read(f"ark:{path}", MATRIX_HOLDER)
        want = {k: g.to_matrix() for k, g in read(f"ark:{path}", GENERAL_MATRIX_HOLDER).items()}
        assert list(got) == list(want)
        for key, value in got.items():
            assert value.dtype == np.float32 and value.flags.c_contiguous
            np.testing.assert_array_equal(value, want[key])
    compressed = GeneralMatrix(CompressedMatrix.from_matrix(mats["a"]))
    writer = TableWriter(f"ark:{tmp_path / 'c.ark'}", GENERAL_MATRIX_HOLDER)
    writer.write("c", compressed)
    writer.close()
    np.testing.assert_array_equal(read(f"ark:{tmp_path / 'c.ark'}", MATRIX_HOLDER)["c"],
                                  compressed.to_matrix())


def test_train_run_leaves_numpy_random_out(tmp_path) -> None:
    """A whole nnet3-train run on a model with no dropout (the ReLU and
    softmax stats sampling draws only small integers) never imports
    numpy.random and its hashing modules (~10 ms of start-up): the light
    generator draws them (and was used: its state moved on)."""
    from tests.helpers import reference_dir

    case = reference_dir("train/affine_xent/0.raw", "train/affine_xent/merged.ark") \
        / "train" / "affine_xent"
    code = f"""
import sys
from pynnet3.cli.train import command
from pynnet3.cli.common import run
import pynnet3.nnet.components.base as base
status = run(command, "nnet3-train", ["--srand=1", {str(case / '0.raw')!r},
                                      "ark:{case / 'merged.ark'}", {str(tmp_path / 'out.raw')!r}])
moved = base._RNG is not None and base._RNG._state != type(base._RNG)(1)._state
# (locale: click's --help option made without a gettext lookup)
print(status, moved, [m for m in ("numpy.random", "secrets", "hmac", "_hashlib", "locale")
                      if m in sys.modules])
import pynnet3.numba_cache, pynnet3.train.cache_file
# tempfile (and random behind it) only where a cache directory is made
print(hasattr(pynnet3.numba_cache, "tempfile"), hasattr(pynnet3.train.cache_file, "tempfile"))
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines() == ["0 True []", "False False"], p.stdout + p.stderr
