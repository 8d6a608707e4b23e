"""nnet3-subset-egs, nnet3-get-egs-simple, nnet3-compute-from-egs, nnet3-copy-egs,
nnet3-show-progress, matrix-sum-rows and vector-sum against real Kaldi.

Two sources: the small goldens in tests/data/recipe_egs (cut from Kaldi's
outputs, see tests/data/README.md), which every clone has; and the recipe
cases of the reference folder (``recipe/<case>/checks.tsv``: the exact
command lines, re-run here; ``sha256.txt``: hashes of every output Kaldi
wrote, including those the folder leaves out), skipped when it is absent.
"""
from __future__ import annotations

import hashlib
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from tests.helpers import curated, reference_dir

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "recipe_egs"
CASES = curated("recipe", ["affine_xent", "ngaffine_bn"])
FLOAT = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


def run(*args: str, cwd: Path | None = None, stdin: bytes | None = None
        ) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    return subprocess.run([sys.executable, "-c", code, *args[1:]], cwd=cwd, input=stdin,
                          capture_output=True, timeout=600,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})


def messages(stderr: str | bytes) -> list[str]:
    """LOG / WARNING lines without Kaldi's ``(prog[version]:func():file:line)``; the
    compiler's end-of-run timing line (its figures and wording are pynnet3's own)
    becomes a placeholder, so that only where it is printed is compared."""
    if isinstance(stderr, bytes):
        stderr = stderr.decode()
    out = []
    for line in stderr.splitlines():
        if not line.startswith(("LOG (", "WARNING (")):
            continue
        text = re.sub(r"^(LOG|WARNING) \(.*?\.(?:py|cc):\d+\) ", r"\1 ", line)
        if "seconds taken in nnet3 compilation total" in text:
            text = "LOG <compiler timing>"
        out.append(text.rstrip())
    return out


def assert_messages_match(ours: list[str], kaldi: list[str], rel: float = 0.0) -> None:
    """Same lines; numbers equal to within ``rel`` relative (exact text when 0)."""
    assert len(ours) == len(kaldi), "\n".join(ours) + "\n--- Kaldi:\n" + "\n".join(kaldi)
    for a, b in zip(ours, kaldi):
        assert re.sub(FLOAT, "#", a) == re.sub(FLOAT, "#", b), (a, b)
        for x, y in zip(re.findall(FLOAT, a), re.findall(FLOAT, b)):
            assert float(x) == pytest.approx(float(y), rel=rel, abs=1e-6 if rel else 0), (a, b)


def read_matrices(path: Path) -> dict[str, np.ndarray]:
    from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader

    with SequentialTableReader(f"ark:{path}", MATRIX_HOLDER) as reader:
        return dict(reader)


def archive_keys(path: Path) -> list[str]:
    from pynnet3.train.egs import iter_examples

    return [k for k, _ in iter_examples(f"ark:{path}")]


# ---------------------------------------------------------------------------
# goldens (tests/data/recipe_egs)


@pytest.mark.parametrize("options,golden", [
    (["--frame=3"], "egs10_frame3.ark"),
    (["--left-context=1", "--right-context=1"], "egs10_ctx1.ark"),
    (["--frame=random", "--srand=1"], "egs10_frame_rand.ark"),
    (["--keep-proportion=0.5", "--srand=2"], "egs10_keep.ark"),
])
def test_copy_egs_golden(tmp_path: Path, options: list[str], golden: str) -> None:
    out = tmp_path / "out.ark"
    p = run("nnet3-copy-egs", *options, f"ark:{DATA / 'egs10.ark'}", f"ark:{out}")
    assert p.returncode == 0, p.stderr.decode()
    assert out.read_bytes() == (DATA / golden).read_bytes()


def test_subset_egs_selection_order(tmp_path: Path) -> None:
    """Kaldi's reservoir selection and shuffle depend only on the number of egs:
    tiny egs under the reference archive's 261 keys give Kaldi's key orders."""
    from pynnet3.io.table import TableWriter
    from pynnet3.train.egs import EXAMPLE_HOLDER, NnetExample, NnetIo
    from pynnet3.train.egs_tools import subset_egs

    lines = (DATA / "subset_keys.txt").read_text().splitlines()
    keys = lines[0].split()
    expected = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    egs = tmp_path / "egs.ark"
    with TableWriter(f"ark:{egs}", EXAMPLE_HOLDER) as writer:
        for i, key in enumerate(keys):
            writer.write(key, NnetExample([NnetIo.from_matrix("input", 0, np.full((1, 1), i,
                                                                                  np.float32))]))
    for name, kw in (("subset", dict(n=50)), ("subset_s3", dict(n=40, srand=3)),
                     ("subset_ord", dict(n=30, randomize_order=False))):
        out = tmp_path / f"{name}.ark"
        assert subset_egs(f"ark:{egs}", f"ark:{out}", **kw) == 0
        assert archive_keys(out) == expected[name], name
    # n larger than the input: everything, shuffled; an empty input: exit status 1.
    assert subset_egs(f"ark:{egs}", f"ark:{tmp_path / 'all.ark'}", n=1000) == 0
    assert sorted(archive_keys(tmp_path / "all.ark")) == sorted(keys)
    (tmp_path / "empty.ark").write_bytes(b"")
    p = run("nnet3-subset-egs", f"ark:{tmp_path / 'empty.ark'}", f"ark:{tmp_path / 'e.ark'}")
    assert p.returncode == 1
    assert messages(p.stderr) == ["LOG Selected a subset of 0 out of 0 neural-network training "
                                  "examples"]
    p = run("nnet3-subset-egs", f"ark:{egs}")
    assert p.returncode == 1 and "Usage:  nnet3-subset-egs" in p.stderr.decode()


def test_get_egs_simple_golden(tmp_path: Path) -> None:
    out = tmp_path / "egs.ark"
    p = run("nnet3-get-egs-simple", f"input=ark:{DATA / 'feats2.ark'}",
            f"output=ark:{DATA / 'targets2.ark'}", f"ark:{out}")
    assert p.returncode == 0, p.stderr.decode()
    assert messages(p.stderr) == []           # Kaldi logs nothing
    assert out.read_bytes() == (DATA / "egs_simple2.ark").read_bytes()
    # A key missing from a later archive: warned, skipped, counted.
    p = run("nnet3-get-egs-simple", f"input=ark:{DATA / 'feats2.ark'}",
            f"output=ark:{DATA / 'targets2.ark'}", f"other=ark:{DATA / 'egs10_cfe_exp.ark'}",
            f"ark:{tmp_path / 'none.ark'}")
    assert p.returncode == 1
    assert messages(p.stderr) == [
        "WARNING Could not find input for key utt0001 for io-name=other",
        "WARNING Could not find input for key utt0002 for io-name=other",
        "WARNING 2 utterances had errors and could not be processed."]
    for bad, text in (("input", "expecting '='"), ("in put=ark:x", "expecting a valid name"),
                      ("input=x.ark", "expecting an rspecifier")):
        p = run("nnet3-get-egs-simple", bad, f"ark:{tmp_path / 'x.ark'}")
        err = p.stderr.decode()
        assert p.returncode == 1 and "Traceback" not in err and text in err, err


def test_compute_from_egs_golden(tmp_path: Path) -> None:
    """A TDNN with BatchNorm in training mode (each eg normalised by its own
    statistics, as Kaldi's nnet3-compute-from-egs leaves it)."""
    out = tmp_path / "cfe.ark"
    p = run("nnet3-compute-from-egs", "--use-gpu=no", "--apply-exp=true", str(DATA / "1.raw"),
            f"ark:{DATA / 'egs10.ark'}", f"ark:{out}")
    assert p.returncode == 0, p.stderr.decode()
    assert messages(p.stderr)[-2:] == ["LOG Processed 10 examples.", "LOG <compiler timing>"]
    ours, kaldi = read_matrices(out), read_matrices(DATA / "egs10_cfe_exp.ark")
    assert list(ours) == list(kaldi)
    for key in kaldi:
        assert ours[key].shape == kaldi[key].shape == (8, 32)
        np.testing.assert_allclose(ours[key], kaldi[key], rtol=0, atol=1e-5, err_msg=key)
    # Without --apply-exp: the log-probabilities (the exp'd rows sum to one).
    p = run("nnet3-compute-from-egs", "--use-gpu=no", "--output-name=output", str(DATA / "1.raw"),
            f"ark:{DATA / 'egs10.ark'}", f"ark,t:{tmp_path / 'log.txt'}")
    assert p.returncode == 0, p.stderr.decode()
    from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader

    with SequentialTableReader(f"ark:{tmp_path / 'log.txt'}", MATRIX_HOLDER) as reader:
        logs = dict(reader)
    for key in kaldi:
        np.testing.assert_allclose(np.exp(logs[key].astype(np.float64)), kaldi[key], atol=1e-5)
    p = run("nnet3-compute-from-egs", "--use-gpu=no", "--output-name=nope", str(DATA / "1.raw"),
            f"ark:{DATA / 'egs10.ark'}", f"ark:{tmp_path / 'x.ark'}")
    assert p.returncode == 1 and "no output named 'nope'" in p.stderr.decode()


def test_matrix_sum_rows_and_vector_sum(tmp_path: Path) -> None:
    mats = read_matrices(DATA / "egs10_cfe_exp.ark")
    sums = run("matrix-sum-rows", f"ark:{DATA / 'egs10_cfe_exp.ark'}", "ark:-")
    assert sums.returncode == 0
    assert messages(sums.stderr) == ["LOG Summed rows 10 matrices, 80 rows in total."]
    p = run("vector-sum", "--binary=false", "ark:-", str(tmp_path / "post.vec"), stdin=sums.stdout)
    assert p.returncode == 0
    assert messages(p.stderr) == [f"LOG Summed 10 vectors, 0 with errors; wrote sum to "
                                  f"{tmp_path / 'post.vec'}"]
    text = (tmp_path / "post.vec").read_text()
    assert text.startswith(" [ ") and text.endswith(" ]\n")
    # Each matrix's row sum is written as float; vector-sum adds those in double.
    row_sums = [m.astype(np.float64).sum(axis=0).astype(np.float32) for m in mats.values()]
    want = np.sum(np.array(row_sums, dtype=np.float64), axis=0)
    assert [float(v) for v in text.split()[1:-1]] == [float("%.7g" % v) for v in
                                                      want.astype(np.float32)]
    # --average, binary output, the per-key (type one) and file (type three) usages.
    (tmp_path / "sums.ark").write_bytes(sums.stdout)
    p = run("vector-sum", "--average=true", f"ark:{tmp_path / 'sums.ark'}", str(tmp_path / "a.vec"))
    assert p.returncode == 0
    from pynnet3.io.kaldi_io import open_kaldi_object

    avg = open_kaldi_object(str(tmp_path / "a.vec")).read_vector()
    np.testing.assert_array_equal(avg, (want * (1.0 / 10)).astype(np.float32))
    p = run("vector-sum", f"ark:{tmp_path / 'sums.ark'}", f"ark:{tmp_path / 'sums.ark'}",
            f"ark,t:{tmp_path / 'double.ark'}")
    assert p.returncode == 0
    assert messages(p.stderr) == [
        "LOG Processed 10 utterances: with a total of 20 vectors across 2 different systems",
        "LOG Produced output for 10 utterances; 0 total missing vectors"]
    p = run("vector-sum", str(tmp_path / "post.vec"), str(tmp_path / "a.vec"),
            str(tmp_path / "b.vec"))
    assert p.returncode == 0
    total = open_kaldi_object(str(tmp_path / "b.vec")).read_vector()
    post = open_kaldi_object(str(tmp_path / "post.vec")).read_vector()   # text: 7 digits
    np.testing.assert_array_equal(total, post + avg)
    p = run("vector-sum", "only-one")
    assert p.returncode == 1 and "Type two usage" in p.stderr.decode()


# ---------------------------------------------------------------------------
# the reference's recipe cases: Kaldi's exact command lines


def recipe_case(case: str) -> Path:
    d = reference_dir() / "recipe" / case
    if not (d / "checks.tsv").is_file():
        pytest.skip(f"no recipe reference case {d}")
    return d


def checks(case: str, tally: str) -> list[tuple[str, list[str]]]:
    """(outputs, command) of the checks.tsv lines of ``tally``."""
    lines = (recipe_case(case) / "checks.tsv").read_text().splitlines()[1:]
    return [(out, cmd) for t, out, cmd in (line.split("\t") for line in lines) if t == tally]


def run_check(command: str, workdir: Path) -> tuple[subprocess.CompletedProcess, str]:
    """One reference command line (``prog args 2> log``) run in ``workdir``;
    returns the process and the log file name."""
    words = shlex.split(command)
    assert words[-2] == "2>", command
    p = run(*words[:-2], cwd=workdir)
    return p, words[-1]


@pytest.fixture
def workdir(tmp_path: Path, request: pytest.FixtureRequest) -> Path:
    """recipe/<case> beside train/ (the commands read ../../train/<case>/...)."""
    case = request.node.callspec.params["case"]
    ref = recipe_case(case)
    (tmp_path / "train").symlink_to(ref.parents[1] / "train")
    d = tmp_path / "recipe" / case
    d.mkdir(parents=True)
    for name in ("targets.ark", "cfe_exp.ark", "post.vec"):
        (d / name).symlink_to(ref / name)
    return d


def sha256s(case: str) -> dict[str, str]:
    text = (recipe_case(case) / "sha256.txt").read_text()
    return {name: digest for digest, name in (line.split() for line in text.splitlines())}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("tally", ["subset-egs", "get-egs-simple", "copy-egs"])
def test_recipe_egs_tools_byte_identical(case: str, tally: str, workdir: Path) -> None:
    ref, hashes = recipe_case(case), sha256s(case)
    todo = checks(case, tally)
    assert todo, f"no {tally} lines in checks.tsv"
    for outputs, command in todo:
        p, log_name = run_check(command, workdir)
        assert p.returncode == 0, p.stderr.decode()
        for output in outputs.split(","):
            kind, name = output.split(":")
            assert kind == "egs"
            digest = hashlib.sha256((workdir / name).read_bytes()).hexdigest()
            assert digest == hashes[name], f"{name} differs from Kaldi's ({command})"
        assert_messages_match(messages(p.stderr), messages((ref / log_name).read_text()))


@pytest.mark.parametrize("case", CASES)
def test_recipe_compute_from_egs(case: str, workdir: Path) -> None:
    ref = recipe_case(case)
    for outputs, command in checks(case, "compute-from-egs"):
        p, log_name = run_check(command, workdir)
        assert p.returncode == 0, p.stderr.decode()
        assert_messages_match(messages(p.stderr), messages((ref / log_name).read_text()))
    kaldi, ours = read_matrices(ref / "cfe_exp.ark"), read_matrices(workdir / "cfe_exp.ark")
    assert list(ours) == list(kaldi)
    worst = max(float(np.max(np.abs(ours[k] - kaldi[k]))) for k in kaldi)
    assert worst < 1e-5
    # cfe_merged.ark is only hashed in the reference: its keys and shapes are
    # those of merged.ark's outputs, and where no BatchNorm couples the rows of
    # a minibatch, its rows are the single egs' outputs in the merged order.
    from pynnet3.train.egs import iter_examples

    merged = read_matrices(workdir / "cfe_merged.ark")
    train = ref.parents[1] / "train" / case
    minibatches = list(iter_examples(f"ark:{train / 'merged.ark'}"))
    assert list(merged) == [k for k, _ in minibatches]
    for key, eg in minibatches:
        assert merged[key].shape == (eg.get_io("output").indexes.shape[0], 32)
    if case == "affine_xent":
        singles = list(iter_examples(f"ark:{train / 'egs.ark'}"))
        first = 0
        for key, eg in minibatches:
            idx = eg.get_io("output").indexes
            for row, (n, t, _) in enumerate(idx.tolist()):
                single_key, single = singles[first + n]
                t0 = int(single.get_io("output").indexes[0, 1])
                np.testing.assert_allclose(np.exp(merged[key][row].astype(np.float64)),
                                           ours[single_key][t - t0], atol=1e-5)
            first += int(idx[:, 0].max()) + 1


@pytest.mark.parametrize("case", CASES)
def test_recipe_priors_pipeline(case: str, workdir: Path) -> None:
    """``matrix-sum-rows ark:cfe_exp.ark ark:- | vector-sum --binary=false ark:- post.vec``
    on Kaldi's cfe_exp.ark: the exactly rounded sums (row sums of <= 64 rows
    and the sum of the row sums are exact in double for these values), and
    Kaldi's post.vec to its 7 printed digits.  (affine_xent's post.vec is
    byte-identical; ngaffine_bn's differs in one digit at a rounding boundary:
    28.73604 where the exact sum of the stored cfe_exp.ark, 28.736045085, rounds
    to the float 28.7360458, printed 28.73605.)"""
    ref = recipe_case(case)
    line = next(x for x in (ref / "commands.txt").read_text().splitlines()
                if x.startswith("matrix-sum-rows"))
    assert line == ("matrix-sum-rows ark:cfe_exp.ark ark:- 2> log.sum_rows.txt | vector-sum "
                    "--binary=false ark:- post.vec 2> log.vector_sum.txt")
    sums = run("matrix-sum-rows", "ark:cfe_exp.ark", "ark:-", cwd=workdir)
    assert sums.returncode == 0
    assert_messages_match(messages(sums.stderr), messages((ref / "log.sum_rows.txt").read_text()))
    p = run("vector-sum", "--binary=false", "ark:-", "mine.vec", cwd=workdir, stdin=sums.stdout)
    assert p.returncode == 0
    kaldi_log = (ref / "log.vector_sum.txt").read_text().replace("post.vec", "mine.vec")
    assert_messages_match(messages(p.stderr), messages(kaldi_log))
    mine = [float(v) for v in (workdir / "mine.vec").read_text().split()[1:-1]]
    mats = read_matrices(ref / "cfe_exp.ark").values()
    exact = np.sum([m.astype(np.float64).sum(axis=0).astype(np.float32) for m in mats], axis=0,
                   dtype=np.float64).astype(np.float32)
    assert mine == [float("%.7g" % v) for v in exact]
    kaldi = [float(v) for v in (ref / "post.vec").read_text().split()[1:-1]]
    np.testing.assert_allclose(mine, kaldi, rtol=1e-6)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("which", [0, pytest.param(1, marks=pytest.mark.slow),
                                   pytest.param(2, marks=pytest.mark.slow)])
def test_recipe_show_progress(case: str, which: int, workdir: Path) -> None:
    """Kaldi's log lines, the figures to within 5e-4 relative: two models
    (parameter changes only); with egs; with egs and --num-segments=3."""
    ref = recipe_case(case)
    todo = checks(case, "show-progress")
    assert len(todo) == 3
    p, log_name = run_check(todo[which][1], workdir)
    assert p.returncode == 0, p.stderr.decode()
    assert_messages_match(messages(p.stderr), messages((ref / log_name).read_text()), rel=5e-4)
