"""Fuzzing the binaries with mutated configs and models, as a hostile user
would: byte flips, truncations, deleted / duplicated lines, changed numbers
(text and binary int32s), swapped tokens.

Seeds: the repository's own configs (egs/), networks from Kaldi's test
generator (pynnet3.testing) and models made from them (text and binary
``.raw``, ``.mdl``); with the reference folder, also Kaldi's small recipe
configs and its test-generator models.  Each mutation goes through
nnet3-init (configs) or nnet3-info / nnet3-copy / nnet3-am-info (models), in
this process (tests/helpers.py: run_binary) so that hundreds run in seconds.

Every run must exit 0 (an accepted mutation, e.g. a changed number) or 1
with exactly one ``ERROR`` line; never an internal error (exit 2), a
traceback, or a hang.  A few mutations also run as real subprocesses to check
the whole process's output.  The default test is bounded (a fixed seed, a
few hundred runs); ``slow`` runs many more.
"""
from __future__ import annotations

import re
import os
import signal
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from pynnet3.cli import BINARIES
from tests.helpers import SHARED_REFERENCE, run_binary

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 60          # one binary on one (small) input; far above the usual 0.1 s


# ---------------------------------------------------------------------------
# Seeds


@dataclass
class Seed:
    name: str
    data: bytes
    kind: str                   # "config", "edits" (applied to small.raw), "raw" or "mdl"


HMM_TEXT = (
    "<TransitionModel> \n<Topology> \n"
    "<TopologyEntry> \n<ForPhones> \n1 2 3 4 \n</ForPhones> \n"
    "<State> 0 <PdfClass> 0 <Transition> 0 0.5 <Transition> 1 0.5 </State> \n"
    "<State> 1 </State> \n</TopologyEntry> \n</Topology> \n"
    "<Triples> 4 \n1 0 0 \n2 0 1 \n3 0 2 \n4 0 3 \n</Triples> \n"
    "<LogProbs> \n [ 0 -0.6931472 -0.6931472 -0.6931472 -0.6931472 -0.6931472 "
    "-0.6931472 -0.6931472 -0.6931472 ]\n</LogProbs> \n</TransitionModel> \n")

SMALL_CONFIG = """# a small TDNN
input-node name=input dim=6
input-node name=ivector dim=2
component name=affine1 type=NaturalGradientAffineComponent input-dim=20 output-dim=8
component name=relu1 type=RectifiedLinearComponent dim=8
component name=bn1 type=BatchNormComponent dim=8
component name=tdnn2 type=TdnnComponent input-dim=8 output-dim=8 time-offsets=-1,0,1
component name=final type=AffineComponent input-dim=4 output-dim=4
component name=softmax type=LogSoftmaxComponent dim=4
component-node name=affine1 component=affine1 input=Append(Offset(input, -1), input, Offset(input, 1), ReplaceIndex(ivector, t, 0))
component-node name=relu1 component=relu1 input=affine1
component-node name=bn1 component=bn1 input=relu1
component-node name=tdnn2 component=tdnn2 input=bn1
dim-range-node name=half input-node=tdnn2 dim-offset=0 dim=4
component-node name=final component=final input=Sum(half, Scale(0.5, half))
component-node name=softmax component=softmax input=final
output-node name=output input=softmax objective=linear
"""


EDITS_CONFIG = """# edits for small.raw
set-learning-rate name=affine* learning-rate=0.01
set-learning-rate-factor name=* learning-rate-factor=0.5
rename-node old-name=half new-name=half2
set-dropout-proportion name=* proportion=0.1
convert-to-fixed-affine name=final
remove-output-nodes name=nothing*
remove-orphans
"""


def small_seeds() -> list[Seed]:
    """The small network's config, an edits config for it, and its model as
    text and binary ``.raw`` and ``.mdl``."""
    from pynnet3.compile.am_nnet import AmNnetSimple, mdl_bytes
    from pynnet3.compile.model_io import nnet_bytes
    from pynnet3.io.kaldi_io import KaldiReader
    from pynnet3.nnet.nnet import Nnet
    from pynnet3.nnet.transition_model import TransitionModel

    nnet = Nnet()
    nnet.read_config(SMALL_CONFIG, "small.config")
    tm = TransitionModel()
    tm.read(KaldiReader(HMM_TEXT.encode(), False))
    am = AmNnetSimple(nnet)
    am.set_priors(np.array([0.1, 0.2, 0.3, 0.4], dtype=np.float32))
    return [Seed("small.config", SMALL_CONFIG.encode(), "config"),
            Seed("edits.config", EDITS_CONFIG.encode(), "edits"),
            Seed("small.raw", nnet_bytes(nnet, True), "raw"),
            Seed("small.txt.raw", nnet_bytes(nnet, False), "raw"),
            Seed("small.mdl", mdl_bytes(tm, am, True), "mdl"),
            Seed("small.txt.mdl", mdl_bytes(tm, am, False), "mdl")]


def own_seeds() -> list[Seed]:
    """Seeds that need nothing outside the repository."""
    from pynnet3.compile.model_io import nnet_bytes
    from pynnet3.testing.generate import (NETWORK_TYPE_NAMES, generate_config_sequence,
                                          nnet_from_configs)

    seeds = small_seeds()
    for conf in sorted((ROOT / "egs").glob("*/conf/*.config")):
        seeds.append(Seed(str(conf.relative_to(ROOT)), conf.read_bytes(), "config"))
    # Each family of Kaldi's test generator (LSTM, CNN, attention, statistics
    # ...): its first config, and its model in binary (text for every other).
    for k, family in enumerate(NETWORK_TYPE_NAMES):
        configs = generate_config_sequence(rng=100 + k, network_type=family)
        seeds.append(Seed(f"{family}.config", configs[0].encode(), "config"))
        nnet = nnet_from_configs(configs)
        seeds.append(Seed(f"{family}.raw", nnet_bytes(nnet, True), "raw"))
        if k % 2:
            seeds.append(Seed(f"{family}.txt.raw", nnet_bytes(nnet, False), "raw"))
    return seeds


def nnet_bytes_of(config: str) -> bytes:
    from pynnet3.compile.model_io import nnet_bytes
    from pynnet3.nnet.nnet import Nnet

    nnet = Nnet()
    nnet.read_config(config, "config")
    return nnet_bytes(nnet, True)


def reference_seeds(quick: bool = False) -> list[Seed]:
    """Kaldi's small recipe configs and test-generator models, if present.
    ``quick`` leaves out the x-vector network, whose context (statistics
    over 10000 frames) takes seconds to compute."""
    ref = SHARED_REFERENCE
    seeds = []
    for conf in sorted(ref.glob("small/*/configs/ref.config")):
        if quick and "xvector" in str(conf):
            continue
        seeds.append(Seed(str(conf.relative_to(ref)), conf.read_bytes(), "config"))
    for model in sorted(ref.glob("random/00[2-9]/final*.raw")):
        seeds.append(Seed(str(model.relative_to(ref)), model.read_bytes(), "raw"))
    return seeds


# ---------------------------------------------------------------------------
# Mutations


_NUMBER = re.compile(rb"(?<![A-Za-z_.])-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_TOKEN = re.compile(rb"[^ \t\n]+")
# Replacement numbers: edges of int32 and of float32, junk, and small changes.
# (Values that are valid but need gigabytes, like a dim of 2147483647, are
# tested by tests/nnet/test_config_values.py, not here.)
_NUMBERS = [b"0", b"-1", b"1", b"-7", b"2147483648", b"-2147483649", b"99999999999999999999",
            b"1e38", b"3e38", b"-1e39", b"nan", b"inf", b"0.5", b"x", b"", b"1.5e", b"+-3"]
_INT32S = [0, -1, 1, 7, 64, 5000, -2 ** 31, 2 ** 31 - 1, 2 ** 24]


def _mutate_number(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    found = list(_NUMBER.finditer(data))
    if not found:
        return "no-number", data
    m = found[int(rng.integers(len(found)))]
    if rng.random() < 0.5:
        value = _NUMBERS[int(rng.integers(len(_NUMBERS)))]
    else:
        try:
            old = float(m.group())
        except ValueError:
            old = 1.0
        factor = [2, 3, 10, -1, 0.5][int(rng.integers(5))]
        new = old * factor + int(rng.integers(-2, 3))
        value = (b"%d" % int(new)) if m.group().lstrip(b"-").isdigit() else b"%.6g" % new
    return (f"number@{m.start()}:{m.group()[:12]!r}->{value!r}",
            data[:m.start()] + value + data[m.end():])


def _mutate_binary_int32(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    """A size-prefixed int32 of a binary model (``\\x04`` + 4 bytes) changed."""
    starts = [m.start() for m in re.finditer(rb"\x04", data[2:])]
    if not starts:
        return "no-int32", data
    at = 2 + starts[int(rng.integers(len(starts)))]
    value = _INT32S[int(rng.integers(len(_INT32S)))]
    return (f"int32@{at}->{value}",
            data[:at + 1] + int(value).to_bytes(4, "little", signed=True) + data[at + 5:])


def _mutate_lines(data: bytes, rng: np.random.Generator, op: str) -> tuple[str, bytes]:
    lines = data.split(b"\n")
    i = int(rng.integers(len(lines)))
    if op == "delete":
        del lines[i]
    elif op == "duplicate":
        lines.insert(i, lines[i])
    else:
        j = int(rng.integers(len(lines)))
        lines[i], lines[j] = lines[j], lines[i]
        return f"swap-lines {i},{j}", b"\n".join(lines)
    return f"{op}-line {i}", b"\n".join(lines)


def _mutate_tokens(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    found = list(_TOKEN.finditer(data[:200000]))
    if len(found) < 2:
        return "no-tokens", data
    a, b = sorted(int(k) for k in rng.choice(len(found), 2, replace=False))
    ma, mb = found[a], found[b]
    return (f"swap-tokens {ma.group()[:12]!r},{mb.group()[:12]!r}",
            data[:ma.start()] + mb.group() + data[ma.end():mb.start()] + ma.group()
            + data[mb.end():])


def mutate(data: bytes, rng: np.random.Generator) -> tuple[str, bytes]:
    """One random mutation of ``data``: (what was done, the mutated bytes)."""
    op = int(rng.integers(9))
    if not data:
        return "empty", data
    if op == 0:
        at = int(rng.integers(len(data)))
        value = int(rng.integers(256))
        return f"byte@{at}->{value:#04x}", data[:at] + bytes([value]) + data[at + 1:]
    if op == 1:
        at = int(rng.integers(len(data)))
        return f"truncate@{at}", data[:at]
    if op in (2, 3):
        return _mutate_lines(data, rng, "delete" if op == 2 else "duplicate")
    if op == 4:
        return _mutate_lines(data, rng, "swap")
    if op in (5, 6):
        if data.startswith(b"\0B") and op == 6:
            return _mutate_binary_int32(data, rng)
        return _mutate_number(data, rng)
    if op == 7:
        return _mutate_tokens(data, rng)
    # Several at once.
    what = []
    for _ in range(int(rng.integers(2, 4))):
        w, data = mutate(data, rng)
        what.append(w)
    return "+".join(what), data


# ---------------------------------------------------------------------------
# Running


class RunTimeout(BaseException):
    """A binary ran past RUN_TIMEOUT_S (a BaseException, so that the binary's
    own error handling does not turn it into an ordinary failure)."""


@dataclass
class Tally:
    mutations: int = 0
    accepted: int = 0
    rejected: int = 0
    runs: int = 0
    runs_with_warnings: int = 0      # Python warnings (e.g. NumPy overflow), not failures
    problems: list[str] = field(default_factory=list)


def _alarm(signum: int, frame: object) -> None:
    raise RunTimeout()


def check_run(tally: Tally, what: str, name: str, *args: str,
              capsys: pytest.CaptureFixture) -> int:
    """Run binary ``name``; record a problem unless it exits 0, or 1 with one
    ERROR line and no internal error or traceback.  Returns the status."""
    tally.runs += 1
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(RUN_TIMEOUT_S)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            status = run_binary(name, *args)
    except RunTimeout:
        status = -1
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    if caught:
        tally.runs_with_warnings += 1
    captured = capsys.readouterr()
    err = captured.err
    errors = [ln for ln in err.splitlines() if ln.startswith("ERROR (")]
    problem = None
    if status == -1:
        problem = f"hang (> {RUN_TIMEOUT_S} s)"
    elif "Traceback" in err or "internal error" in err or status not in (0, 1):
        problem = f"exit {status}: {errors[-1] if errors else err[-300:]}"
    elif status == 1 and len(errors) != 1:
        problem = f"exit 1 with {len(errors)} ERROR lines: {err[-300:]}"
    elif status == 0 and errors:
        problem = f"exit 0 with ERROR lines: {errors[0]}"
    if problem is not None:
        tally.problems.append(f"{name} on {what}: {problem}")
    return status


def run_mutation(tally: Tally, seed: Seed, what: str, data: bytes, work: Path,
                 capsys: pytest.CaptureFixture) -> None:
    suffix = {"config": ".config", "edits": ".config", "raw": ".raw", "mdl": ".mdl"}[seed.kind]
    path = work / f"in{suffix}"
    path.write_bytes(data)
    label = f"{seed.name} [{what}]"
    tally.mutations += 1
    out = str(work / "out.raw")
    if seed.kind == "edits":
        small = work / "small.raw"
        if not small.exists():
            small.write_bytes(nnet_bytes_of(SMALL_CONFIG))
        status = check_run(tally, label, "nnet3-copy", f"--edits-config={path}", str(small),
                           out, capsys=capsys)
    elif seed.kind == "config":
        status = check_run(tally, label, "nnet3-init", str(path), out, capsys=capsys)
        if status == 0:
            # Accepted: the network must be usable by the next binary too.
            check_run(tally, label, "nnet3-info", out, capsys=capsys)
    else:
        status = check_run(tally, label, "nnet3-info", str(path), capsys=capsys)
        check_run(tally, label, "nnet3-copy", "--binary=false", str(path), out, capsys=capsys)
        if seed.kind == "mdl":
            check_run(tally, label, "nnet3-am-info", str(path), capsys=capsys)
    if status == 0:
        tally.accepted += 1
    else:
        tally.rejected += 1


def fuzz(seeds: list[Seed], num_mutations: int, seed: int, work: Path,
         capsys: pytest.CaptureFixture) -> Tally:
    rng = np.random.default_rng(seed)
    tally = Tally()
    for k in range(num_mutations):
        s = seeds[k % len(seeds)]
        what, data = mutate(s.data, rng)
        run_mutation(tally, s, what, data, work, capsys)
        if tally.problems and len(tally.problems) >= 20:
            break
    return tally


def report(tally: Tally) -> str:
    return (f"{tally.mutations} mutations ({tally.runs} runs): {tally.accepted} accepted, "
            f"{tally.rejected} rejected, {len(tally.problems)} problems "
            f"({tally.runs_with_warnings} runs printed Python warnings)")


@pytest.fixture
def quiet_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYNNET3_CACHE_DIR", str(tmp_path / "cache"))
    work = tmp_path / "work"
    work.mkdir()
    return work


def test_fuzz_configs_and_models(quiet_cache: Path, capsys: pytest.CaptureFixture) -> None:
    seeds = own_seeds()
    if SHARED_REFERENCE.is_dir():
        seeds += reference_seeds(quick=True)
    capsys.readouterr()
    tally = fuzz(seeds, 300, seed=11, work=quiet_cache, capsys=capsys)
    with capsys.disabled():
        print(f"\nfuzz: {report(tally)}")
    assert not tally.problems, "\n".join(tally.problems[:20])
    # The mutations must exercise both outcomes.
    assert tally.accepted > 10 and tally.rejected > 50


@pytest.mark.slow
def test_fuzz_many(quiet_cache: Path, capsys: pytest.CaptureFixture) -> None:
    seeds = own_seeds() + reference_seeds()
    capsys.readouterr()
    tally = fuzz(seeds, 1500, seed=12345, work=quiet_cache, capsys=capsys)
    with capsys.disabled():
        print(f"\nfuzz (slow): {report(tally)}")
    assert not tally.problems, "\n".join(tally.problems[:20])


def test_fuzz_subprocesses(tmp_path: Path) -> None:
    """A few mutated inputs through real processes: the whole stderr holds no
    traceback, and a refused input ends with exit 1 and one ERROR line."""
    seeds = {s.name: s for s in small_seeds()}
    rng = np.random.default_rng(5)
    cases: list[tuple[str, Seed, Callable[[bytes], bytes]]] = [
        ("nnet3-init", seeds["small.config"], lambda d: d.replace(b"dim=8", b"dim=8x", 1)),
        ("nnet3-info", seeds["small.raw"], lambda d: d[: len(d) // 2]),
        ("nnet3-am-info", seeds["small.txt.mdl"], lambda d: mutate(d, rng)[1]),
    ]
    for name, seed, change in cases:
        path = tmp_path / f"in_{name}"
        path.write_bytes(change(seed.data))
        args = [str(path)] + ([str(tmp_path / "out.raw")] if name == "nnet3-init" else [])
        module, func = BINARIES[name].split(":")
        p = subprocess.run([sys.executable, "-c",
                            f"import sys; from {module} import {func}; sys.exit({func}())",
                            *args], capture_output=True, timeout=300,
                           env={**os.environ, "PYNNET3_CACHE_DIR": str(tmp_path / "cache")})
        err = p.stderr.decode(errors="replace")
        assert "Traceback" not in err and "internal error" not in err, err
        assert p.returncode in (0, 1), err
        if p.returncode == 1:
            assert len([ln for ln in err.splitlines() if ln.startswith("ERROR (")]) == 1, err
