"""nnet3-combine against real Kaldi (reference/recipe/<case>, inputs in
reference/train/<case>) and against the small golden in tests/data/combine."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from tests.helpers import CURATED_REFERENCE, curated, reference_dir

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "data" / "combine"
CASES = curated("recipe", ["affine_xent", "ngaffine_bn"])
FLOAT = r"(-?[0-9.]+(?:e[-+]?\d+)?|-?inf|nan)"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A pynnet3 binary from this checkout; bin/ first on PATH so that the
    egs pipes of an rspecifier run pynnet3's binaries too."""
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    path = os.pathsep.join([str(ROOT / "bin"), os.path.dirname(sys.executable), "/usr/bin",
                            "/bin"])
    return subprocess.run([sys.executable, "-c", code, *args[1:]], cwd=cwd, capture_output=True,
                          timeout=300, env={"PYTHONPATH": str(ROOT / "src"), "PATH": path})


def dirs(case: str) -> tuple[Path, Path]:
    """(reference/train/<case>, reference/recipe/<case>)."""
    ref = reference_dir()
    train, recipe = ref / "train" / case, ref / "recipe" / case
    if not (train.is_dir() and (recipe / "log.combine.txt").is_file()):
        pytest.skip(f"no reference recipe case {recipe}")
    return train, recipe


def combine_messages(stderr: str) -> list[str]:
    """nnet3-combine's own LOG lines (not those of the egs pipe's programs),
    without the ``LOG (prog[version]:where) `` prefix.  Left out: Kaldi's
    compilation lines (the compiler's timing line, and at --verbose=2 and
    above the optimizer's memory figures), which pynnet3 does not print, and
    pynnet3's one-time note that Numba kernels are being compiled (printed
    only by the first process after an install or a kernel change)."""
    out = []
    for line in stderr.splitlines():
        m = re.match(r"LOG \(nnet3-combine\[[^\]]*\]:([^(]*)\(\):\S*\) (.*)$", line)
        if m is None or m.group(1) in ("~CachingOptimizingCompiler", "Optimize"):
            continue
        if m.group(2).startswith("compiling Numba kernels"):
            continue
        out.append(m.group(2))
    return out


def split_numbers(messages: list[str]) -> tuple[list[str], list[float]]:
    """The messages with each number replaced by ``#``, and the numbers."""
    number = r"(?<![\w.])" + FLOAT
    numbers = [float(x) for m in messages for x in re.findall(number, m)]
    texts = [re.sub(number, "#", m) for m in messages]
    return texts, numbers


def assert_same_messages(ours: list[str], kaldi: list[str], rel: float = 5e-4) -> float:
    """Same lines; numbers within ``rel`` (relative).  Returns the largest
    relative difference seen."""
    t1, n1 = split_numbers(ours)
    t2, n2 = split_numbers(kaldi)
    assert t1 == t2, "\n".join(ours) + "\n----- Kaldi:\n" + "\n".join(kaldi)
    assert len(n1) == len(n2)
    worst = 0.0
    for a, b in zip(n1, n2):
        assert a == pytest.approx(b, rel=rel), (a, b)
        if b != 0:
            worst = max(worst, abs(a - b) / abs(b))
    return worst


def arrays(nnet) -> dict[tuple[str, str], np.ndarray]:
    """The float arrays of every component, by (component, attribute)."""
    out = {}
    for name, comp in zip(nnet.component_names, nnet.components):
        for attr, value in vars(comp).items():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.size:
                out[(name, attr)] = value
    return out


def max_rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    scale = float(np.abs(b).max())
    return float(np.abs(a.astype(np.float64) - b).max()) / (scale if scale else 1.0)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def kaldi_sha256(recipe: Path, name: str) -> str:
    for line in (recipe / "sha256.txt").read_text().splitlines():
        digest, _, file = line.partition("  ")
        if file == name:
            return digest
    raise AssertionError(f"{name} not in {recipe}/sha256.txt")


def compare_models(ours_path: Path, kaldi_path: Path) -> None:
    """Parameters within 1e-4 relative (they come out identical), BatchNorm
    statistics too.  The ReLU statistics are left out: Kaldi stores them on a
    random half of the minibatches, drawn from glibc's rand() stream after
    its compiler's random self-checks have used an unpredictable part of it
    (see test_recomputed_relu_stats_match_kaldi_given_its_draws)."""
    from pynnet3.compile.model_io import read_nnet

    ours, kaldi = read_nnet(str(ours_path)), read_nnet(str(kaldi_path))
    a, b = arrays(ours), arrays(kaldi)
    assert a.keys() == b.keys()
    for (name, attr), value in a.items():
        comp = kaldi.components[kaldi.component_names.index(name)]
        if comp.type_name == "RectifiedLinearComponent":
            continue
        if comp.is_updatable():
            assert np.array_equal(value, b[(name, attr)]), (name, attr)
        else:
            assert max_rel_diff(value, b[(name, attr)]) < 1e-4, (name, attr)
    for name, ours_comp, comp in zip(kaldi.component_names, ours.components, kaldi.components):
        if comp.type_name == "BatchNormComponent":
            assert ours_comp.count == comp.count and not ours_comp.test_mode, name


@pytest.mark.parametrize("case", CASES)
def test_combine_reproduces_kaldi(case: str, tmp_path: Path) -> None:
    """nnet3-combine 0.raw 1.raw 1b.raw ark:merged.ark comb.raw: the same LOG
    lines (objective of the last model, of each average, the choice; for the
    BatchNorm network the statistics recomputation and its objective), and
    the same model (byte-identical without BatchNorm)."""
    train, recipe = dirs(case)
    p = run("nnet3-combine", str(train / "0.raw"), str(train / "1.raw"), str(train / "1b.raw"),
            f"ark:{train}/merged.ark", "comb.raw", cwd=tmp_path)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    kaldi = combine_messages((recipe / "log.combine.txt").read_text())
    assert kaldi[1].startswith("objective function using the last model is")
    assert_same_messages(combine_messages(err), kaldi)
    if case == "affine_xent":
        assert (tmp_path / "comb.raw").read_bytes() == (recipe / "comb.raw").read_bytes()
    else:
        compare_models(tmp_path / "comb.raw", recipe / "comb.raw")


@pytest.mark.parametrize("case", ["affine_xent",
                                  pytest.param("ngaffine_bn", marks=pytest.mark.slow)])
def test_combine_through_egs_pipe_reproduces_kaldi(case: str, tmp_path: Path) -> None:
    """The recipes' form: --max-objective-evaluations=2 --verbose=3 with the
    egs from an ``ark,bg:nnet3-copy-egs ... | nnet3-merge-egs
    --minibatch-size=1:64 ... |`` pipe (5 minibatches): one evaluation of the
    average of all 3 models, the same LOG lines as Kaldi, and without
    BatchNorm the very file Kaldi wrote (its sha256)."""
    train, recipe = dirs(case)
    egs = (f"ark,bg:nnet3-copy-egs ark:{train}/egs.ark ark:- | "
           "nnet3-merge-egs --minibatch-size=1:64 ark:- ark:- |")
    p = run("nnet3-combine", "--max-objective-evaluations=2", "--verbose=3",
            str(train / "0.raw"), str(train / "1.raw"), str(train / "1b.raw"), egs, "comb2.raw",
            cwd=tmp_path)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    kaldi = combine_messages((recipe / "log.combine2.txt").read_text())
    ours = combine_messages(err)
    assert not any(m.startswith("Combining last 2 models") for m in ours)
    assert_same_messages(ours, kaldi)
    out = tmp_path / "comb2.raw"
    if case == "affine_xent":
        assert sha256(out) == kaldi_sha256(recipe, "comb2.raw")
    else:
        # Kaldi's comb2.raw is not kept; its parameters are those of comb.raw
        # (the same average), only the BatchNorm/ReLU statistics differ.
        from pynnet3.compile.model_io import read_nnet

        ours_nnet, kaldi_nnet = read_nnet(str(out)), read_nnet(str(recipe / "comb.raw"))
        a, b = arrays(ours_nnet), arrays(kaldi_nnet)
        for (name, attr), value in a.items():
            comp = kaldi_nnet.components[kaldi_nnet.component_names.index(name)]
            if comp.is_updatable():
                assert np.array_equal(value, b[(name, attr)]), (name, attr)


def test_combine_golden(tmp_path: Path) -> None:
    """tests/data/combine (no reference folder needed): Kaldi's affine_xent
    models, combined on the first minibatch of its merged egs, give the very
    file real Kaldi wrote from all 16 (comb.raw; its sha256 is in the README):
    the running average of 3 models, in float32 with fused multiply-adds."""
    # The models are the curated reference's (the same files as the full set's).
    models = CURATED_REFERENCE / "train" / "affine_xent"
    for name in ("0.raw", "1.raw", "1b.raw"):
        shutil.copy(models / name, tmp_path / name)
    shutil.copy(GOLDEN / "merged1.ark", tmp_path / "merged1.ark")
    p = run("nnet3-combine", "0.raw", "1.raw", "1b.raw", "ark:merged1.ark", "comb.raw",
            cwd=tmp_path)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    msgs = combine_messages(err)
    assert msgs[0] == "Read 1 examples."
    assert msgs[-2].startswith("Combining 3 nnets, objective function changed from ")
    assert sha256(tmp_path / "comb.raw") == (
        "389cedbb4bf9bc82702dd242234e293b4ab00a85283f2a054f8d1094e7246908")


def test_worse_average_is_not_kept(tmp_path: Path) -> None:
    """1.raw first, then 0.raw: the average is worse than 1.raw alone (Kaldi's
    nnet3-compute-prob gives -3.21387 for 1.raw, its combine -3.44696 for the
    average), so 1.raw itself is written back, unchanged (as nnet3-copy would
    write it: the derived statistics of a component, e.g. ReLU's oderiv-rms,
    do not round-trip to the bit)."""
    from pynnet3.compile.model_io import nnet_bytes, read_nnet

    train, _ = dirs("affine_xent")
    p = run("nnet3-combine", str(train / "1.raw"), str(train / "0.raw"),
            f"ark:{train}/merged.ark", "out.raw", cwd=tmp_path)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert combine_messages(err)[1:4] == [
        "objective function using the last model is -3.21387",
        "Combining last 2 models, objective function is -3.44696",
        "Combining 1 nnets, objective function changed from -3.21387 to -3.21387"]
    assert (tmp_path / "out.raw").read_bytes() == nnet_bytes(read_nnet(str(train / "1.raw")),
                                                             True)


def test_usage_and_errors(tmp_path: Path) -> None:
    # Fewer than 3 arguments: usage and exit status 1, as Kaldi.
    p = run("nnet3-combine", "a.raw", "ark:b.ark")
    err = p.stderr.decode()
    assert p.returncode == 1 and "Usage:  nnet3-combine [options] <nnet-in1>" in err
    assert "Traceback" not in err
    # Kaldi's nnet3-combine registers no --compiler.* options.
    p = run("nnet3-combine", "--compiler.use-shortcut=false", "a.raw", "ark:b.ark", "c.raw")
    assert p.returncode == 1 and "compiler.use-shortcut" in p.stderr.decode()
    train = tmp_path
    (train / "empty.ark").write_bytes(b"")
    model = CURATED_REFERENCE / "train" / "affine_xent" / "0.raw"
    for args, text in (
            ([str(model), "ark:empty.ark", "o.raw"], "no examples were read"),
            (["--max-objective-evaluations=0", str(model), str(model), "ark:missing.ark",
              "o.raw"], "--max-objective-evaluations must be at least 1"),
            ([str(tmp_path / "missing.raw"), "ark:empty.ark", "o.raw"], "missing.raw")):
        p = run("nnet3-combine", *args, cwd=tmp_path)
        err = p.stderr.decode()
        assert p.returncode == 1, err
        assert text in err and "Traceback" not in err
        assert not (tmp_path / "o.raw").exists()
