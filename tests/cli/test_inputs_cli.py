"""Hostile inputs to the binaries, as Kaldi treats them: bytes in configs,
int32 ranges, duplicate keys, failing pipes, permissive tables and output
pipes.  Binaries run in this process (tests/helpers.py: run_binary); each
refused input must end in exit status 1 and exactly one ERROR line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers import run_binary

CONFIG = (b"input-node name=input dim=3\n"
          b"component name=a type=AffineComponent input-dim=3 output-dim=4\n"
          b"component-node name=a component=a input=input\n"
          b"output-node name=output input=a\n")


def error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("ERROR (")]


def refused(capsys: pytest.CaptureFixture, status: int) -> str:
    """The one ERROR line of a run that must have failed with status 1."""
    err = capsys.readouterr().err
    assert status == 1, err
    assert "Traceback" not in err and "internal error" not in err
    errors = error_lines(err)
    assert len(errors) == 1, err
    return errors[0]


# ---------------------------------------------------------------------------
# Item 3: configs are bytes


def test_init_accepts_latin1_comments(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(b"# r\xe9seau\n" + CONFIG.replace(b"dim=3\n", b"dim=3 # entr\xe9e\n", 1))
    assert run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")) == 0
    assert (tmp_path / "0.raw").is_file()


def test_init_refuses_latin1_outside_comment(tmp_path: Path,
                                             capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG.replace(b"name=a type", b"name=a\xe9 type", 1))
    line = refused(capsys, run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")))
    assert f"{conf}:2: byte 0xe9 at column 17" in line
    assert not (tmp_path / "0.raw").exists()


def test_copy_nnet_config_and_edits_config_bytes(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG)
    raw = tmp_path / "0.raw"
    assert run_binary("nnet3-init", str(conf), str(raw)) == 0
    add = tmp_path / "add.config"
    add.write_bytes(b"# \xe0 ajouter\ncomponent name=a type=AffineComponent input-dim=3 "
                    b"output-dim=4 learning-rate=0.25 # \xe9\n")
    edits = tmp_path / "edits.config"
    edits.write_bytes(b"# \xe9dition\nset-learning-rate learning-rate=0.5\n")
    out = tmp_path / "1.txt"
    assert run_binary("nnet3-copy", "--binary=false", f"--nnet-config={add}",
                      f"--edits-config={edits}", str(raw), str(out)) == 0
    assert b"<LearningRate> 0.5 " in out.read_bytes()
    edits.write_bytes(b"set-learning-rate learning-rate=0.5 \xe9=1\n")
    line = refused(capsys, run_binary("nnet3-copy", f"--edits-config={edits}", str(raw),
                                      str(out)))
    assert f"{edits}:1: byte 0xe9 at column 37" in line


def test_option_config_file_bytes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG)
    opts = tmp_path / "opts.conf"
    opts.write_bytes(b"# options \xe9crites \xe0 la main\n--binary=false  # \xe9\n")
    out = tmp_path / "0.raw"
    assert run_binary("nnet3-init", f"--config={opts}", str(conf), str(out)) == 0
    assert out.read_bytes().startswith(b"<Nnet3> ")
    opts.write_bytes(b"--binary=f\xe9lse\n")
    line = refused(capsys, run_binary("nnet3-init", f"--config={opts}", str(conf), str(out)))
    assert f"{opts}:1: byte 0xe9 at column 11" in line


# ---------------------------------------------------------------------------
# Item 5: int32 values


@pytest.mark.parametrize("dims,key", [
    ("input-dim=2147483648 output-dim=4", "input-dim=2147483648"),
    ("input-dim=3 output-dim=99999999999999999999", "output-dim=99999999999999999999"),
])
def test_init_refuses_values_beyond_int32(tmp_path: Path, capsys: pytest.CaptureFixture,
                                          dims: str, key: str) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG.replace(b"input-dim=3 output-dim=4", dims.encode()))
    line = refused(capsys, run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")))
    assert f"{conf}:2:" in line and key in line and "-2147483648 .. 2147483647" in line


@pytest.mark.parametrize("dims,expect", [
    ("input-dim=-3 output-dim=4", "must be positive"),
    ("input-dim=2147483647 output-dim=2147483647", "not enough memory"),
])
def test_init_refuses_impossible_dims(tmp_path: Path, capsys: pytest.CaptureFixture,
                                      dims: str, expect: str) -> None:
    conf = tmp_path / "net.config"
    conf.write_bytes(CONFIG.replace(b"input-dim=3 output-dim=4", dims.encode()))
    line = refused(capsys, run_binary("nnet3-init", str(conf), str(tmp_path / "0.raw")))
    assert f"{conf}:2:" in line and expect in line


# ---------------------------------------------------------------------------
# Item 7: Kaldi's table and pipe semantics

COMPUTE_CONFIG = (b"input-node name=input dim=3\n"
                  b"input-node name=ivector dim=2\n"
                  b"component name=a type=AffineComponent input-dim=5 output-dim=4\n"
                  b"component-node name=a component=a input=Append(input, "
                  b"ReplaceIndex(ivector, t, 0))\n"
                  b"output-node name=output input=a\n")


@pytest.fixture
def work(tmp_path: Path, capsys: pytest.CaptureFixture) -> Path:
    """A tiny network with an iVector input, three utterances' features
    (feats.ark, feats.scp) and their iVectors (iv.ark, iv.scp; online: oiv.ark)."""
    from pynnet3.io.table import MATRIX_HOLDER, VECTOR_HOLDER, TableWriter

    (tmp_path / "net.config").write_bytes(COMPUTE_CONFIG)
    assert run_binary("nnet3-init", str(tmp_path / "net.config"), str(tmp_path / "m.raw")) == 0
    rng = np.random.default_rng(0)
    with TableWriter(f"ark,scp:{tmp_path}/feats.ark,{tmp_path}/feats.scp", MATRIX_HOLDER) as w:
        for i in range(3):
            w.write(f"u{i}", rng.standard_normal((5, 3)).astype(np.float32))
    with TableWriter(f"ark,scp:{tmp_path}/iv.ark,{tmp_path}/iv.scp", VECTOR_HOLDER) as w:
        for i in range(3):
            w.write(f"u{i}", rng.standard_normal(2).astype(np.float32))
    with TableWriter(f"ark:{tmp_path}/oiv.ark", MATRIX_HOLDER) as w:
        for i in range(3):
            w.write(f"u{i}", rng.standard_normal((1, 2)).astype(np.float32))
    capsys.readouterr()
    return tmp_path


def compute(work: Path, *args: str) -> int:
    return run_binary("nnet3-compute", f"--cache-dir={work}/cache", *args)


def read_keys(path: Path) -> list[str]:
    from pynnet3.io.table import MATRIX_HOLDER, SequentialTableReader

    with SequentialTableReader(f"ark:{path}", MATRIX_HOLDER) as r:
        return [k for k, _ in r]


def concat_entries(src: Path, dst: Path, keys: list[str]) -> None:
    """An archive of ``src``'s entries in the order (and repetitions) ``keys``."""
    from pynnet3.io.table import (GENERAL_MATRIX_HOLDER, VECTOR_HOLDER, SequentialTableReader,
                                  TableWriter)

    holder = VECTOR_HOLDER if src.name == "iv.ark" else GENERAL_MATRIX_HOLDER
    with SequentialTableReader(f"ark:{src}", holder) as r:
        entries = dict(r)
    with TableWriter(f"ark:{dst}", holder) as w:
        for k in keys:
            w.write(k, entries[k])


@pytest.mark.parametrize("option,archive", [("--ivectors", "iv.ark"),
                                            ("--online-ivectors", "oiv.ark")])
def test_duplicate_key_in_ivector_archive(work: Path, capsys: pytest.CaptureFixture,
                                          option: str, archive: str) -> None:
    # Kaldi's RandomAccessTableReader errors on a duplicate key met while
    # reading forward to a key it looks for ("Error in RandomAccessTableReader:
    # duplicate key").
    dup = work / f"dup_{archive}"
    concat_entries(work / archive, dup, ["u0", "u1", "u0", "u2"])
    extra = ["--online-ivector-period=10"] if option == "--online-ivectors" else []
    line = refused(capsys, compute(work, *extra, f"{option}=ark:{dup}", str(work / "m.raw"),
                                   f"ark:{work}/feats.ark", f"ark:{work}/out.ark"))
    assert "duplicate key u0" in line and str(dup) in line


def test_duplicate_key_in_ivector_script(work: Path, capsys: pytest.CaptureFixture) -> None:
    scp = work / "iv.scp"
    lines = scp.read_text().splitlines()
    scp.write_text("\n".join(lines + lines[:1]) + "\n")
    line = refused(capsys, compute(work, f"--ivectors=scp:{scp}", str(work / "m.raw"),
                                   f"ark:{work}/feats.ark", f"ark:{work}/out.ark"))
    assert "duplicate key: u0" in line and str(scp) in line


def test_model_through_a_failing_pipe(work: Path, capsys: pytest.CaptureFixture) -> None:
    raw = work / "m.raw"
    # Complete data, then a failing command: Kaldi's Input::Close warns only.
    assert run_binary("nnet3-info", f"cat {raw}; exit 2 |") == 0
    err = capsys.readouterr().err
    assert "WARNING (nnet3-info" in err and "had nonzero return status 512" in err
    assert not error_lines(err)
    # Incomplete data: the reader's error, after the pipe's warning.
    status = run_binary("nnet3-info", f"head -c 100 {raw}; exit 2 |")
    err = capsys.readouterr().err
    assert status == 1 and len(error_lines(err)) == 1 and "Traceback" not in err
    assert "had nonzero return status 512" in err
    # Nothing at all.
    line = refused(capsys, run_binary("nnet3-info", "exit 3 |"))
    assert "exit 3 |" in line and "no output" in line and "status 768" in line


def test_table_through_a_failing_pipe(work: Path, capsys: pytest.CaptureFixture) -> None:
    model, feats = str(work / "m.raw"), work / "feats.ark"
    ivectors = f"--ivectors=ark:{work}/iv.ark"
    # The archive was read to its end and the command failed: its data may
    # be incomplete, an error (Kaldi's TableReader Close()) ...
    line = refused(capsys, compute(work, ivectors, model, f"ark:cat {feats}; exit 3 |",
                                   f"ark:{work}/out.ark"))
    assert "error detected closing archive" in line and "status 768" in line
    # ... but only a warning with the permissive option.
    assert compute(work, ivectors, model, f"ark,p:cat {feats}; exit 3 |",
                   f"ark:{work}/out.ark") == 0
    err = capsys.readouterr().err
    assert "had nonzero return status 768" in err and not error_lines(err)
    assert read_keys(work / "out.ark") == ["u0", "u1", "u2"]


def test_permissive_script_skips_unreadable_entry(work: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    lines = (work / "feats.scp").read_text().splitlines()
    lines[1] = f"u1 {work}/missing.ark:5"
    (work / "bad.scp").write_text("\n".join(lines) + "\n")
    model, ivectors = str(work / "m.raw"), f"--ivectors=ark:{work}/iv.ark"
    line = refused(capsys, compute(work, ivectors, model, f"scp:{work}/bad.scp",
                                   f"ark:{work}/out.ark"))
    assert "key u1" in line and "missing.ark" in line and "permissive" in line
    assert compute(work, ivectors, model, f"scp,p:{work}/bad.scp", f"ark:{work}/out.ark") == 0
    err = capsys.readouterr().err
    assert "WARNING (" in err and "missing.ark" in err and not error_lines(err)
    assert read_keys(work / "out.ark") == ["u0", "u2"]


def test_permissive_random_access_script(work: Path, capsys: pytest.CaptureFixture) -> None:
    u0 = (work / "iv.scp").read_text().splitlines()[0]
    (work / "iv.scp").write_text(f"{u0}\nu1 {work}/nothing.ark\n")
    model, feats = str(work / "m.raw"), f"ark:{work}/feats.ark"
    line = refused(capsys, compute(work, f"--ivectors=scp:{work}/iv.scp", model, feats,
                                   f"ark:{work}/out.ark"))
    assert "key u1" in line and "nothing.ark" in line
    # With p, u1's entry is as if absent: u1 (and u2, not listed) fail, u0 is done.
    compute(work, f"--ivectors=scp,p:{work}/iv.scp", model, feats, f"ark:{work}/out.ark")
    err = capsys.readouterr().err
    assert "Traceback" not in err and "nothing.ark" in err
    assert read_keys(work / "out.ark") == ["u0"]


def test_permissive_archive_stops_at_corrupt_entry(work: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    data = (work / "feats.ark").read_bytes()
    at = data.index(b"u1 ") + len(b"u1 \0BFM ")
    # u1's row count becomes a float's size byte: the entry cannot be parsed.
    (work / "corrupt.ark").write_bytes(data[:at] + b"\x08" + data[at + 1:])
    model, ivectors = str(work / "m.raw"), f"--ivectors=ark:{work}/iv.ark"
    line = refused(capsys, compute(work, ivectors, model, f"ark:{work}/corrupt.ark",
                                   f"ark:{work}/out.ark"))
    assert "corrupt.ark" in line
    assert compute(work, ivectors, model, f"ark,p:{work}/corrupt.ark",
                   f"ark:{work}/out.ark") == 0
    err = capsys.readouterr().err
    assert "WARNING (" in err and "corrupt.ark" in err and not error_lines(err)
    assert read_keys(work / "out.ark") == ["u0"]


def test_wxfilename_pipes(work: Path, capsys: pytest.CaptureFixture) -> None:
    raw = work / "m.raw"
    # "x.raw |" is an input pipe: Kaldi cannot write to it (kNoOutput).
    line = refused(capsys, run_binary("nnet3-copy", str(raw), f"{work}/x.raw |"))
    assert "x.raw |" in line and "| cmd" in line
    assert sorted(p.name for p in work.iterdir() if p.name.startswith("x.raw")) == []
    # "| cmd" is Kaldi's output pipe.
    gz = work / "x.gz"
    assert run_binary("nnet3-copy", "--binary=false", str(raw), f"| gzip -c > {gz}") == 0
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert run_binary("nnet3-info", f"gunzip -c {gz} |") == 0
    assert capsys.readouterr().out.startswith("left-context: 0\n")
    # The same for a table's archive.
    line = refused(capsys, compute(work, f"--ivectors=ark:{work}/iv.ark", str(raw),
                                   f"ark:{work}/feats.ark", f"ark:{work}/out.ark |"))
    assert "out.ark |" in line
    assert not list(work.glob("out.ark*"))
