"""Exit statuses of the binaries (Kaldi's rule for each, docs/exit-statuses.md),
what a shell sees when a binary is interrupted or its output pipe closes, and
how usage errors and --help read.

Each binary runs as a subprocess on tiny self-made inputs (no reference data):
the statuses are those of the process, as a ``set -e`` recipe sees them.
"""
from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np
import pytest

from pynnet3.cli import BINARIES

ROOT = Path(__file__).resolve().parents[2]

# input 3-dim, context 1 frame on the left, 4 outputs; IVEC also has a 2-dim ivector.
PLAIN_CONFIG = """\
input-node name=input dim=3
component name=affine type=AffineComponent input-dim=6 output-dim=4
component-node name=affine component=affine input=Append(Offset(input, -1), input)
component name=sm type=LogSoftmaxComponent dim=4
component-node name=sm component=sm input=affine
output-node name=output input=sm objective=linear
"""
IVEC_CONFIG = """\
input-node name=ivector dim=2
input-node name=input dim=3
component name=affine type=AffineComponent input-dim=8 output-dim=4
component-node name=affine component=affine input=Append(Offset(input, -1), input, ReplaceIndex(ivector, t, 0))
component name=sm type=LogSoftmaxComponent dim=4
component-node name=sm component=sm input=affine
output-node name=output input=sm objective=linear
"""
UTTS = ("utt0", "utt1", "utt2")
EGS_OPTS = ("--left-context=1", "--right-context=0", "--num-frames=2")


def _command(name: str) -> list[str]:
    module, func = BINARIES[name].split(":")
    return [sys.executable, "-c", f"import sys; from {module} import {func}; sys.exit({func}())"]


def _env(work: Path) -> dict[str, str]:
    return dict(os.environ, PYNNET3_CACHE_DIR=str(work / "cache"),
                PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))


def run(work: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("env", _env(work))
    kw.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(_command(args[0]) + list(args[1:]), stderr=subprocess.PIPE, cwd=work,
                          timeout=300, **kw)


def lines(p: subprocess.CompletedProcess) -> list[str]:
    return p.stderr.decode().splitlines()


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tiny models, features, ivectors, targets, egs and an empty archive."""
    from pynnet3.io.table import MATRIX_HOLDER, VECTOR_HOLDER, TableWriter

    d = tmp_path_factory.mktemp("exits")
    (d / "plain.config").write_text(PLAIN_CONFIG)
    (d / "ivec.config").write_text(IVEC_CONFIG)
    rng = np.random.default_rng(0)
    with TableWriter(f"ark:{d}/feats.ark", MATRIX_HOLDER) as w:
        for utt in UTTS:
            w.write(utt, rng.standard_normal((6, 3)).astype(np.float32))
    with TableWriter(f"ark:{d}/targets.ark", MATRIX_HOLDER) as w:
        for utt in UTTS:
            w.write(utt, rng.standard_normal((6, 4)).astype(np.float32))
    for name, keys in (("ivectors.ark", UTTS), ("other_ivectors.ark", ("a", "b", "c"))):
        with TableWriter(f"ark:{d}/{name}", VECTOR_HOLDER) as w:
            for key in keys:
                w.write(key, rng.standard_normal(2).astype(np.float32))
    (d / "post.txt").write_text("".join(
        f"{utt} " + " ".join(f"[ {t % 4} 1 ]" for t in range(6)) + "\n" for utt in UTTS))
    (d / "empty.egs").write_bytes(b"")
    for model in ("plain", "ivec"):
        p = run(d, "nnet3-init", f"{model}.config", f"{model}.raw")
        assert p.returncode == 0, p.stderr.decode()
    p = run(d, "nnet3-get-egs", "--num-pdfs=4", *EGS_OPTS, "ark:feats.ark", "ark:post.txt",
            "ark:egs.ark")
    assert p.returncode == 0, p.stderr.decode()
    return d


# ---------------------------------------------------------------------------
# Kaldi's exit status of each binary.  Before the fix (597edd9) every one of
# these non-zero statuses was 0.


def test_compute_exits_1_when_no_utterance_succeeds(work: Path) -> None:
    # Kaldi: return num_success != 0 ? 0 : 1 (a missing iVector fails an utterance).
    p = run(work, "nnet3-compute", "--ivectors=ark:other_ivectors.ark", "ivec.raw",
            "ark:feats.ark", "ark:out_none.ark")
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert err.count("No iVector available for utterance") == 3
    assert "Done 0 utterances, failed for 3" in err and "ERROR" not in err
    assert (work / "out_none.ark").read_bytes() == b""  # Kaldi's writer leaves it empty
    ok = run(work, "nnet3-compute", "--ivectors=ark:ivectors.ark", "ivec.raw", "ark:feats.ark",
             "ark:out_all.ark")
    assert ok.returncode == 0 and "Done 3 utterances, failed for 0" in ok.stderr.decode()


def test_compute_exits_0_when_some_utterance_succeeds(work: Path) -> None:
    # One zero-length utterance fails (Kaldi: "Zero-length utterance"), the others succeed.
    from pynnet3.io.table import MATRIX_HOLDER, TableWriter

    with TableWriter(f"ark:{work}/with_empty.ark", MATRIX_HOLDER) as w:
        w.write("empty", np.zeros((0, 3), dtype=np.float32))
        w.write("full", np.ones((4, 3), dtype=np.float32))
    p = run(work, "nnet3-compute", "plain.raw", "ark:with_empty.ark", "ark:out_some.ark")
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "Zero-length utterance: empty" in err and "Done 1 utterances, failed for 1" in err


def test_train_on_empty_egs_writes_the_model_and_exits_1(work: Path) -> None:
    # Kaldi writes the model, then returns (PrintTotalStats() ? 0 : 1).
    p = run(work, "nnet3-train", "plain.raw", "ark:empty.egs", "trained.raw")
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "Wrote model to trained.raw" in err and "ERROR" not in err
    assert (work / "trained.raw").read_bytes() == (work / "plain.raw").read_bytes()
    ok = run(work, "nnet3-train", "plain.raw", "ark:egs.ark", "trained_ok.raw")
    assert ok.returncode == 0, ok.stderr.decode()


def test_compute_prob_on_empty_egs_exits_1(work: Path) -> None:
    p = run(work, "nnet3-compute-prob", "plain.raw", "ark:empty.egs")
    assert p.returncode == 1 and "ERROR" not in p.stderr.decode()
    assert run(work, "nnet3-compute-prob", "plain.raw", "ark:egs.ark").returncode == 0


@pytest.mark.parametrize("binary,options", [
    ("nnet3-copy-egs", []), ("nnet3-shuffle-egs", []),
    ("nnet3-merge-egs", ["--minibatch-size=3"])])
def test_egs_tools_exit_1_when_nothing_is_written(work: Path, binary: str,
                                                  options: list[str]) -> None:
    # Kaldi: num_written == 0 ? 1 : 0 (merge-egs: ExampleMerger::ExitStatus, the same).
    p = run(work, binary, *options, "ark:empty.egs", f"ark:{binary}.empty.ark")
    assert p.returncode == 1, p.stderr.decode()
    assert "ERROR" not in p.stderr.decode()
    ok = run(work, binary, *options, "ark:egs.ark", f"ark:{binary}.ark")
    assert ok.returncode == 0, ok.stderr.decode()


@pytest.mark.parametrize("binary,args,ok_args", [
    # Kaldi: return (num_read != 0 ? 0 : 1)
    ("nnet3-subset-egs", ["--n=2", "ark:empty.egs", "ark:sub.ark"],
     ["--n=2", "ark:egs.ark", "ark:sub.ark"]),
    # Kaldi: return (num_done != 0 ? 0 : 1)
    ("matrix-sum-rows", ["ark:empty.egs", "ark:sums.ark"], ["ark:feats.ark", "ark:sums.ark"]),
    # one table summed into a file: (num_done > 0 && num_err < num_done) ? 0 : 1
    ("vector-sum", ["ark:empty.egs", "sum.vec"], ["ark:ivectors.ark", "sum.vec"]),
    # Kaldi: return (num_done > 0 ? 0 : 1); no key of the input has a target
    ("nnet3-get-egs-simple", ["input=ark:feats.ark", "output=ark:empty.egs", "ark:simple.ark"],
     ["input=ark:feats.ark", "output=ark:targets.ark", "ark:simple.ark"]),
])
def test_recipe_tools_exit_1_when_nothing_is_done(work: Path, binary: str, args: list[str],
                                                  ok_args: list[str]) -> None:
    p = run(work, binary, *args)
    assert p.returncode == 1, p.stderr.decode()
    assert "ERROR" not in p.stderr.decode()
    ok = run(work, binary, *ok_args)
    assert ok.returncode == 0, ok.stderr.decode()


def test_merge_egs_exits_1_when_every_eg_is_discarded(work: Path) -> None:
    # 9 egs, minibatches of 256, partial minibatches discarded: none written.
    p = run(work, "nnet3-merge-egs", "ark:egs.ark", "ark:discarded.ark")
    assert p.returncode == 1
    assert "Processed 9 egs of avg. size 3 into 0 minibatches" in p.stderr.decode()


def test_copy_egs_status_counts_written_not_read(work: Path) -> None:
    p = run(work, "nnet3-copy-egs", "--keep-proportion=0", "ark:egs.ark", "ark:none.ark")
    assert p.returncode == 1
    assert "Read 9 neural-network training examples, wrote 0" in p.stderr.decode()


@pytest.mark.parametrize("binary,targets,options", [
    ("nnet3-get-egs", "ark:post.txt", ["--num-pdfs=4"]),
    ("nnet3-get-egs-dense-targets", "ark:targets.ark", ["--num-targets=4"])])
def test_get_egs_exits_1_when_no_frames_were_chunked(work: Path, binary: str, targets: str,
                                                     options: list[str]) -> None:
    # Kaldi: UtteranceSplitter::ExitStatus(), total_frames_in_chunks_ > 0 ? 0 : 1.
    # Features under keys the targets lack: every utterance is skipped.
    from pynnet3.io.table import MATRIX_HOLDER, TableWriter

    with TableWriter(f"ark:{work}/other_feats.ark", MATRIX_HOLDER) as w:
        w.write("stranger", np.ones((6, 3), dtype=np.float32))
    p = run(work, binary, *options, *EGS_OPTS, "ark:other_feats.ark", targets,
            f"ark:{binary}.none.ark")
    err = p.stderr.decode()
    assert p.returncode == 1, err
    assert "1 utterances had errors and could not be processed." in err and "ERROR" not in err
    ok = run(work, binary, *options, *EGS_OPTS, "ark:feats.ark", targets, f"ark:{binary}.ark")
    assert ok.returncode == 0, ok.stderr.decode()


def test_show_progress_statuses(work: Path) -> None:
    p = run(work, "nnet3-show-progress", "plain.raw", "plain.raw", "ark:empty.egs")
    assert p.returncode == 1 and lines(p)[-1].endswith("No examples read.")
    # Kaldi warns and exits 0 when the parameter dimensions differ.
    p = run(work, "nnet3-show-progress", "plain.raw", "ivec.raw", "ark:egs.ark")
    assert p.returncode == 0 and "Parameter-dim mismatch, cannot show progress." in \
        p.stderr.decode()


def test_set_e_script_stops_at_the_failing_binary(work: Path) -> None:
    script = work / "recipe.sh"
    script.write_text(
        "set -e\n"
        '"$PY" "$BIN/nnet3-copy-egs" ark:egs.ark ark:step1.ark\n'
        '"$PY" "$BIN/nnet3-merge-egs" ark:empty.egs ark:step2.ark\n'
        "echo reached > step3.txt\n")
    p = subprocess.run(["sh", str(script)], cwd=work, capture_output=True, timeout=300,
                       env=dict(_env(work), PY=sys.executable, BIN=str(ROOT / "bin")))
    assert p.returncode == 1, p.stderr.decode()
    assert (work / "step1.ark").stat().st_size > 0
    assert p.stderr.decode().splitlines()[-1].startswith("LOG (nnet3-merge-egs[")
    assert not (work / "step3.txt").exists()


# ---------------------------------------------------------------------------
# Signals: die as Unix tools (and Kaldi) do, without a traceback.


def test_sigint_kills_by_the_signal(work: Path) -> None:
    # nnet3-compute reading features from a stdin that never ends.
    proc = subprocess.Popen(_command("nnet3-compute") + ["plain.raw", "ark:-", "ark:out.ark"],
                            cwd=work, env=_env(work), stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        seen = []
        # The model is read (LOG lines) before the features: then it waits on stdin.
        while not any("orphan components" in line for line in seen):
            line = proc.stderr.readline().decode()
            assert line, "".join(seen)
            seen.append(line)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        rest = proc.stderr.read().decode()
        status = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdin.close()
        proc.stderr.close()
    assert status == -signal.SIGINT, rest  # WIFSIGNALED: a shell's $? is 130
    assert "Traceback" not in rest and "ERROR" not in rest and "aborted" not in rest


def test_closed_output_pipe_ends_quietly(work: Path) -> None:
    # The reader of stdout is gone before the binary writes (as after `| head`):
    # death by SIGPIPE as a Unix tool (and Kaldi), nothing on stderr but the
    # echoed command line; no "Exception ignored" from Python's final flush.
    for args in (["nnet3-info", "plain.raw"],
                 ["nnet3-compute", "plain.raw", "ark:feats.ark", "ark,t:-"],
                 ["nnet3-copy", "--binary=false", "plain.raw", "-"]):
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            p = run(work, *args, stdout=write_end)
        finally:
            os.close(write_end)
        assert p.returncode == -signal.SIGPIPE, (args, p.stderr.decode())
        err = lines(p)
        assert err[0].startswith(args[0]), err
        assert not [e for e in err[1:] if not e.startswith("LOG (")], err


def test_closed_stdout_is_a_clear_error(work: Path) -> None:
    # fd 1 closed before the start (">&-"): writing the model to "-" fails with
    # one ERROR line (it was an internal error); not writing to it is fine.
    cmd = " ".join(f"'{a}'" for a in _command("nnet3-copy"))
    p = subprocess.run(["sh", "-c", f"{cmd} plain.raw - >&-"], cwd=work, env=_env(work),
                       capture_output=True, timeout=300)
    assert p.returncode == 1
    last = p.stderr.decode().splitlines()[-1]
    assert last.startswith("ERROR (nnet3-copy[") and "standard output" in last
    assert "internal error" not in last
    p = subprocess.run(["sh", "-c", f"{cmd} plain.raw copy.raw >&-"], cwd=work, env=_env(work),
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()


def test_head_closing_the_pipe(work: Path) -> None:
    from pynnet3.io.table import MATRIX_HOLDER, TableWriter

    rng = np.random.default_rng(1)
    with TableWriter(f"ark:{work}/long.ark", MATRIX_HOLDER) as w:
        for i in range(8):
            w.write(f"long{i}", rng.standard_normal((4000, 3)).astype(np.float32))
    cmd = " ".join(f"'{a}'" for a in _command("nnet3-compute"))
    p = subprocess.run(["bash", "-c", f"{cmd} plain.raw ark:long.ark ark,t:- 2>err.txt "
                        "| head -c 10 >/dev/null; echo ${PIPESTATUS[0]}"],
                       cwd=work, env=_env(work), capture_output=True, timeout=300)
    assert p.stdout.decode().strip() == "141"  # 128 + SIGPIPE, as `yes | head` gives
    err = (work / "err.txt").read_text()
    assert "Traceback" not in err and "Exception ignored" not in err and "ERROR" not in err


# ---------------------------------------------------------------------------
# Usage errors and --help


def test_unknown_option_says_the_cause_first(work: Path) -> None:
    p = run(work, "nnet3-compute", "--frames-per-chunck=20", "plain.raw", "ark:feats.ark",
            "ark:x.ark")
    assert p.returncode == 1
    err = lines(p)
    assert err[1].startswith("ERROR (nnet3-compute[")
    assert "No such option '--frames-per-chunck'" in err[1]
    assert "Did you mean '--frames-per-chunk'?" in err[1]
    assert len(err) == 3 and "--help" in err[2]  # a pointer, not the whole usage
    p = run(work, "nnet3-compute", "--frames-per-chunk=abc", "plain.raw", "ark:feats.ark",
            "ark:x.ark")
    err = lines(p)
    assert p.returncode == 1 and len(err) == 3 and "'abc' is not a valid integer" in err[1]


def test_wrong_number_of_arguments_gives_the_cause_then_kaldis_usage(work: Path) -> None:
    p = run(work, "nnet3-copy-egs", "ark:egs.ark")
    assert p.returncode == 1
    err = lines(p)
    assert err[1].startswith("ERROR (nnet3-copy-egs[") and "wrong number of arguments" in err[1]
    assert any(e.startswith("Usage:  nnet3-copy-egs [options] <egs-rspecifier>") for e in err)
    assert "--help" in err[-1] and "--keep-proportion" not in p.stderr.decode()


def _help(name: str) -> str:
    import importlib

    module = importlib.import_module(BINARIES[name].split(":")[0])
    return module.command.get_help(click.Context(module.command, info_name=name))


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_help_has_one_usage_line_kaldis(name: str) -> None:
    text = _help(name)
    usage = [line for line in text.splitlines() if "Usage:" in line]
    if name == "vector-sum":  # Kaldi's text lists three "Type N usage:" forms instead
        assert not usage and text.count(f"\n {name} [options]") == 3
    elif name == "nnet3-chain-subset-egs":  # Kaldi's usage line spells it "cubset"
        assert len(usage) == 1 and usage[0].startswith("Usage:  nnet3-chain-cubset-egs"), usage
    else:
        assert len(usage) == 1 and usage[0].startswith(("Usage:  " + name, "Usage: " + name)), usage
    assert "[OPTIONS] [ARGS]" not in text and "\b" not in text
    assert "\nOptions:\n" in text


def test_help_on_the_command_line(work: Path) -> None:
    p = run(work, "nnet3-info", "--help")
    out = p.stdout.decode()
    assert p.returncode == 0 and out.count("Usage:") == 1
    assert out.startswith("Print some text information about 'raw' nnet3 neural network")


@pytest.mark.parametrize("name", sorted(BINARIES))
def test_see_also_names_only_existing_binaries(name: str) -> None:
    for match in re.finditer(r"See also:?\s*(.*)", _help(name)):
        named = re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)+", match.group(1))
        assert named, match.group(0)
        missing = [n for n in named if n not in BINARIES]
        assert not missing, f"{name}: 'See also' names {missing}, which pynnet3 lacks"


# ---------------------------------------------------------------------------
# Messages


def test_empty_config_error_names_the_file(work: Path) -> None:
    (work / "empty.config").write_text("# nothing but a comment\n\n")
    p = run(work, "nnet3-init", "empty.config", "empty.raw")
    assert p.returncode == 1
    last = lines(p)[-1]
    assert last.startswith("ERROR (nnet3-init[") and "empty.config: " in last
    assert not (work / "empty.raw").exists()


def test_info_of_a_huge_parameter_prints_kaldis_values_and_no_warning(work: Path) -> None:
    # Kaldi's statistics are float arithmetic: (3e38)^2 overflows to inf, and
    # the bias variance inf - inf is NaN; NumPy must not warn about either.
    text = run(work, "nnet3-copy", "--binary=false", "plain.raw", "-").stdout.decode()
    text = re.sub(r"(<LinearParams>\s+\[\s+)\S+", r"\g<1>3e38", text)
    text = re.sub(r"(<BiasParams>\s+\[\s+)\S+", r"\g<1>3e38", text)
    (work / "huge.raw").write_text(text)
    p = run(work, "nnet3-info", "huge.raw", env=dict(_env(work), PYTHONWARNINGS="always"))
    assert p.returncode == 0
    assert len(lines(p)) == 1, p.stderr.decode()  # only the echoed command line
    out = p.stdout.decode()
    assert "linear-params-rms=inf" in out and "-row-norms=[ inf " in out
    # x86's default NaN has its sign bit set: glibc (so Kaldi) prints it "-nan".
    assert re.search(r"bias-\{mean,stddev\}=7\.5e\+37,-?nan\b", out), out


def test_nan_is_printed_as_glibc_prints_it() -> None:
    from pynnet3.nnet.components.base import fmt_g, summarize_vector

    assert fmt_g(math.copysign(math.nan, -1.0)) == "-nan"
    assert fmt_g(math.nan) == "nan" and fmt_g(-math.inf) == "-inf"
    assert summarize_vector(np.array([math.copysign(math.nan, -1.0), 1.0])) == "[ -nan 1.0 ]"
