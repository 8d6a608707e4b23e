"""nnet3-am-init, nnet3-am-train-transitions and nnet3-am-adjust-priors against
real Kaldi: the goldens in tests/data/am (a clone has them) and, when present,
every command of the reference recipe folders (affine_xent, ngaffine_bn, vosk)."""
from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from pynnet3.compile.am_nnet import read_mdl
from pynnet3.io.kaldi_io import KaldiWriter
from tests.helpers import SHARED_REFERENCE, curated, reference_dir, vosk_model_path

DATA = Path(__file__).resolve().parents[1] / "data" / "am"
RECIPE = DATA / "recipe"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    module, func = BINARIES[args[0]].split(":")
    code = f"import sys; from {module} import {func}; sys.exit({func}())"
    env = dict(os.environ)
    # Run elsewhere (the reference folder), a relative PYTHONPATH=src must still work.
    env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in
                                        env.get("PYTHONPATH", "").split(os.pathsep) if p)
    return subprocess.run([sys.executable, "-c", code, *args[1:]], capture_output=True,
                          timeout=300, cwd=cwd, env=env)


def messages(stderr: bytes | str) -> list[str]:
    """LOG/WARNING lines without the '(program[version]:function():file:line)' prefix."""
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    return [ln.split(") ", 1)[1] for ln in text.splitlines()
            if ln.startswith(("LOG (", "WARNING ("))]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def kaldi_sha(name: str) -> str:
    for line in (RECIPE / "kaldi.sha256").read_text().splitlines():
        digest, file = line.split()
        if file == name:
            return digest
    raise KeyError(name)


def tm_and_priors_sha(mdl: Path) -> tuple[str, str]:
    tm, am, _ = read_mdl(str(mdl))
    w = KaldiWriter(True)
    tm.write(w)
    v = KaldiWriter(True)
    v.write_vector(am.priors)
    return sha(b"\0B" + w.getvalue()), sha(b"\0B" + v.getvalue())


@pytest.fixture(scope="module")
def raw1(tmp_path_factory) -> Path:
    """The raw nnet inside Kaldi's 1.mdl (nnet3-am-init's input there)."""
    out = tmp_path_factory.mktemp("am") / "1.raw"
    p = run("nnet3-am-copy", "--raw=true", str(RECIPE / "1.mdl"), str(out))
    assert p.returncode == 0, p.stderr.decode()
    return out


def test_am_init_both_forms_are_kaldis(tmp_path: Path, raw1: Path) -> None:
    """1.mdl = Kaldi's nnet3-am-init of (tree, topo -> 0.mdl's transition model) and 1.raw."""
    out = tmp_path / "a.mdl"
    p = run("nnet3-am-init", str(RECIPE / "tree"), str(RECIPE / "topo"), str(raw1), str(out))
    assert p.returncode == 0, p.stderr.decode()
    assert sha(out.read_bytes()) == kaldi_sha("1.mdl")
    assert messages(p.stderr) == [
        f"Initialized am-nnet (neural net acoustic model) and wrote to {out}"]
    out2 = tmp_path / "b.mdl"
    p = run("nnet3-am-init", str(RECIPE / "1.mdl"), str(raw1), str(out2))
    assert p.returncode == 0, p.stderr.decode()
    assert out2.read_bytes() == (RECIPE / "1.mdl").read_bytes()
    out3 = tmp_path / "c.txt.mdl"
    p = run("nnet3-am-init", "--binary=false", str(RECIPE / "1.mdl"), str(raw1), str(out3))
    assert p.returncode == 0 and sha(out3.read_bytes()) == kaldi_sha("1.txt.mdl")


def test_train_transitions_is_kaldis(tmp_path: Path) -> None:
    out = tmp_path / "1tt.mdl"
    p = run("nnet3-am-train-transitions", str(RECIPE / "1.mdl"), f"ark:{RECIPE / 'ali.txt'}",
            str(out))
    assert p.returncode == 0, p.stderr.decode()
    assert sha(out.read_bytes()) == kaldi_sha("1tt.mdl")
    kaldi = messages((RECIPE / "log.train_transitions.txt").read_text())
    assert messages(p.stderr) == [m.replace("1tt.mdl", str(out)) for m in kaldi]


def _option_goldens() -> list[tuple[str, str, str]]:
    rows = []
    for line in (DATA / "kaldi" / "goldens.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] == "train-transitions" and f[1] == "recipe/1.mdl":
            rows.append((f[2], f[3], f[4]))
    return rows


@pytest.mark.parametrize("options,shas,logs", _option_goldens())
def test_train_transitions_options(tmp_path: Path, options: str, shas: str, logs: str) -> None:
    out = tmp_path / "x.mdl"
    p = run("nnet3-am-train-transitions", *shlex.split(options), str(RECIPE / "1.mdl"),
            f"ark:{RECIPE / 'ali.txt'}", str(out))
    assert p.returncode == 0, p.stderr.decode()
    assert ",".join(tm_and_priors_sha(out)) == shas
    got = messages(p.stderr)
    expected = logs.split(" | ")
    assert got[1:1 + len(expected)] == expected


def test_train_transitions_without_priors_and_with_priors_in(tmp_path: Path) -> None:
    out = tmp_path / "nopriors.mdl"
    p = run("nnet3-am-train-transitions", "--set-priors=false", str(RECIPE / "1.mdl"),
            f"ark:{RECIPE / 'ali.txt'}", str(out))
    assert p.returncode == 0, p.stderr.decode()
    _, am, _ = read_mdl(str(out))
    assert am.priors.shape == (0,)
    assert "Setting priors of pdfs in the model." not in messages(p.stderr)
    kaldi_tm, _ = tm_and_priors_sha(out)
    assert kaldi_tm == _option_goldens()[0][1].split(",")[0]


def test_adjust_priors_is_kaldis(tmp_path: Path) -> None:
    out = tmp_path / "1adj.mdl"
    p = run("nnet3-am-adjust-priors", str(RECIPE / "1.mdl"), str(RECIPE / "post.vec"), str(out))
    assert p.returncode == 0, p.stderr.decode()
    assert sha(out.read_bytes()) == kaldi_sha("1adj.mdl")
    kaldi = messages((RECIPE / "log.adjust_priors.txt").read_text())
    assert messages(p.stderr) == [m.replace("1adj.mdl", str(out)) for m in kaldi]
    # --prior-floor is accepted and, as in Kaldi, has no effect.
    out2 = tmp_path / "floor.mdl"
    p = run("nnet3-am-adjust-priors", "--prior-floor=0.1", str(RECIPE / "1.mdl"),
            str(RECIPE / "post.vec"), str(out2))
    assert p.returncode == 0 and out2.read_bytes() == out.read_bytes()


def test_adjust_priors_of_a_model_with_priors(tmp_path: Path) -> None:
    """Kaldi's diagnostics (largest change, K-L divergence) when priors exist."""
    tt = tmp_path / "1tt.mdl"
    assert run("nnet3-am-train-transitions", str(RECIPE / "1.mdl"),
               f"ark:{RECIPE / 'ali.txt'}", str(tt)).returncode == 0
    out = tmp_path / "adj.mdl"
    p = run("nnet3-am-adjust-priors", str(tt), str(RECIPE / "post.vec"), str(out))
    assert p.returncode == 0, p.stderr.decode()
    row = [ln.split("\t") for ln in (DATA / "kaldi" / "goldens.tsv").read_text().splitlines()
           if ln.startswith("adjust-priors\trecipe_1tt_priors.vec")][0]
    assert messages(p.stderr)[:2] == row[4].split(" | ")
    # The new priors are 1adj.mdl's; the transition model stays 1tt.mdl's.
    assert tm_and_priors_sha(out)[1] == row[3]


def test_usage_and_errors(tmp_path: Path, raw1: Path) -> None:
    for name, nargs in (("nnet3-am-init", 2), ("nnet3-am-adjust-priors", 2),
                        ("nnet3-am-train-transitions", 4)):
        p = run(name, *(["x"] * nargs))
        assert p.returncode == 1
        err = p.stderr.decode()
        assert f"Usage:  {name}" in err or f"Usage: {name}" in err
        assert f"ERROR ({name}" in err
    # A transition model with 8 pdfs and a 32-output network: priors cannot be set.
    bad = tmp_path / "bad.mdl"
    assert run("nnet3-am-init", str(DATA / "kaldi" / "trans4"), str(raw1),
               str(bad)).returncode == 0
    ali = tmp_path / "ali.txt"
    ali.write_text("u1 1 1 2 3\n")
    p = run("nnet3-am-train-transitions", str(bad), f"ark:{ali}", str(tmp_path / "o.mdl"))
    assert p.returncode == 1 and "ERROR (" in p.stderr.decode()
    assert "8 pdfs" in p.stderr.decode() and not (tmp_path / "o.mdl").exists()
    # An alignment with a transition-id the model does not have.
    ali.write_text("u1 1 1 2 99\n")
    p = run("nnet3-am-train-transitions", str(RECIPE / "1.mdl"), f"ark:{ali}",
            str(tmp_path / "o.mdl"))
    assert p.returncode == 1 and "transition-id 99 out of range" in p.stderr.decode()
    # A zero posterior vector.
    vec = tmp_path / "zero.vec"
    vec.write_text(" [ " + "0 " * 32 + "]\n")
    p = run("nnet3-am-adjust-priors", str(RECIPE / "1.mdl"), str(vec), str(tmp_path / "o.mdl"))
    assert p.returncode == 1 and "positive" in p.stderr.decode()
    # Priors of the wrong dimension.
    vec.write_text(" [ 1 2 3 ]\n")
    p = run("nnet3-am-adjust-priors", str(RECIPE / "1.mdl"), str(vec), str(tmp_path / "o.mdl"))
    assert p.returncode == 1 and "Dimension mismatch when setting priors" in p.stderr.decode()


# ---------------------------------------------------------------------------
# The reference recipe folders: each checked command, re-run


TALLIES = ("am-init", "train-transitions", "adjust-priors")


def _reference_commands() -> list[tuple[str, str, str]]:
    base = SHARED_REFERENCE / "recipe"
    out = []
    for case in curated("recipe", ["affine_xent", "ngaffine_bn", "vosk"]):
        checks = base / case / "checks.tsv"
        if not checks.is_file():
            out.append((case, "", ""))
            continue
        for line in checks.read_text().splitlines()[1:]:
            tally, outputs, command = line.split("\t")
            if tally in TALLIES:
                out.append((case, outputs.split(":", 1)[1], command))
    return out


def _ref_sha(case_dir: Path, name: str) -> str:
    for line in (case_dir / "sha256.txt").read_text().splitlines():
        digest, file = line.split()
        if file == name:
            return digest
    raise KeyError(name)


@pytest.mark.parametrize("case,output,command", _reference_commands(),
                         ids=[f"{c}:{o}" for c, o, _ in _reference_commands()])
def test_reference_recipe_command(tmp_path: Path, case: str, output: str, command: str) -> None:
    case_dir = reference_dir() / "recipe" / case
    if not command:
        pytest.skip(f"no reference recipe folder {case_dir}")
    line, _, log_name = command.partition(" 2> ")
    args = shlex.split(line)
    if "$VOSK_MDL" in args:
        args[args.index("$VOSK_MDL")] = str(vosk_model_path())
    assert args[-1] == output
    out = tmp_path / output
    p = run(*args[:-1], str(out), cwd=case_dir)
    assert p.returncode == 0, p.stderr.decode()
    digest = sha(out.read_bytes())
    assert digest == _ref_sha(case_dir, output)
    if (case_dir / output).is_file():
        assert out.read_bytes() == (case_dir / output).read_bytes()
    kaldi = [m.replace(f"to {output}", f"to {out}")
             for m in messages((case_dir / log_name.strip()).read_text())]
    assert messages(p.stderr) == kaldi


def test_reference_vosk_priors_are_normalised(tmp_path: Path) -> None:
    """vosk: 2616 pdfs, some never seen: their priors stay zero (no floor, as in Kaldi)."""
    case_dir = reference_dir() / "recipe" / "vosk"
    if not (case_dir / "tiny.mdl").is_file():
        pytest.skip(f"no reference recipe folder {case_dir}")
    out = tmp_path / "adj.mdl"
    p = run("nnet3-am-adjust-priors", str(case_dir / "tiny.mdl"), str(case_dir / "counts.vec"),
            str(out))
    assert p.returncode == 0, p.stderr.decode()
    tm, am, _ = read_mdl(str(out))
    assert tm.num_pdfs() == am.priors.shape[0] == 2616
    counts = np.array((case_dir / "counts.vec").read_text().split()[1:-1], dtype=np.float64)
    assert np.count_nonzero(counts == 0) >= 20
    assert np.array_equal(am.priors == 0, counts == 0)
    assert abs(float(am.priors.sum(dtype=np.float64)) - 1.0) < 1e-5
