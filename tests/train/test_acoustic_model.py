"""The transition update, the priors of nnet3-am-train-transitions and the
prior diagnostics of nnet3-am-adjust-priors, against Kaldi's library run on
the same inputs (tests/data/am/kaldi/goldens.tsv; see tests/data/README.md)."""
from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

import numpy as np
import pytest

from pynnet3.compile.am_nnet import read_mdl
from pynnet3.errors import PynnetError
from pynnet3.io.kaldi_io import KaldiWriter, open_kaldi_object
from pynnet3.io.table import INT32_VECTOR_HOLDER, SequentialTableReader
from pynnet3.nnet.transition_model import (MleTransitionUpdateConfig, kaldi_scale, logf,
                                           read_transition_model)
from pynnet3.train import acoustic_model as am

DATA = Path(__file__).resolve().parents[1] / "data" / "am"


def _goldens(kind: str) -> list[list[str]]:
    rows = []
    for line in (DATA / "kaldi" / "goldens.tsv").read_text().splitlines():
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        if fields[0] == kind:
            rows.append(fields[1:])
    return rows


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _binary(write) -> bytes:
    w = KaldiWriter(True)
    write(w)
    return b"\0B" + w.getvalue()


def _messages(text: str) -> list[str]:
    return [ln.split(") ", 1)[1] for ln in text.splitlines()
            if ln.startswith(("LOG (", "WARNING ("))]


def _options(text: str) -> dict[str, str]:
    return dict(a[2:].split("=", 1) for a in shlex.split(text))


TRAIN = _goldens("train-transitions")


@pytest.mark.parametrize("model,options,shas,logs", TRAIN,
                         ids=[f"{r[0]}:{r[1]}" for r in TRAIN])
def test_mle_update_and_priors_are_kaldis(model: str, options: str, shas: str, logs: str,
                                          capsys) -> None:
    opts = _options(options)
    path = DATA / model if "/" in model else DATA / "kaldi" / model
    tm = read_transition_model(str(path))
    ali = DATA / ("recipe/ali.txt" if "/" in model else f"kaldi/ali{model[len('trans'):]}.txt")
    accs = tm.init_stats()
    with SequentialTableReader(f"ark:{ali}", INT32_VECTOR_HOLDER) as reader:
        for _, alignment in reader:
            tm.accumulate_alignment(accs, alignment)
    cfg = MleTransitionUpdateConfig(float(opts["transition-floor"]),
                                    float(opts["transition-min-count"]),
                                    opts["share-for-pdfs"] == "true")
    capsys.readouterr()
    tm.mle_update(accs, cfg)
    priors = am.priors_from_transition_accs(tm, accs, float(opts["prior-floor"]))
    assert _messages(capsys.readouterr().err) == logs.split(" | ")
    tm_sha, priors_sha = shas.split(",")
    assert _sha(_binary(tm.write)) == tm_sha
    assert _sha(_binary(lambda w: w.write_vector(priors))) == priors_sha


ADJUST = _goldens("adjust-priors")


@pytest.mark.parametrize("old,post,sha,logs", ADJUST, ids=[f"{r[0]}-{r[1]}" for r in ADJUST])
def test_prior_diagnostics_are_kaldis(old: str, post: str, sha: str, logs: str,
                                      capsys) -> None:
    old_priors = open_kaldi_object(str(DATA / "kaldi" / old)).read_vector()
    posterior = open_kaldi_object(str(DATA / "kaldi" / post)).read_vector()
    new = am.normalize_posterior(posterior)
    capsys.readouterr()
    am.print_prior_diagnostics(old_priors, new)
    assert _messages(capsys.readouterr().err) == logs.split(" | ")
    assert _sha(_binary(lambda w: w.write_vector(new))) == sha


def test_accumulate_checks_transition_ids() -> None:
    tm = read_transition_model(str(DATA / "kaldi" / "trans4"))
    accs = tm.init_stats()
    tm.accumulate_alignment(accs, [1, 1, 2, 26])
    assert accs[1] == 2 and accs[2] == 1 and accs[26] == 1 and accs.sum() == 4
    with pytest.raises(PynnetError, match="transition-id 27 out of range"):
        tm.accumulate_alignment(accs, [3, 27])
    # Transition-id 0 is counted (as Kaldi does) but then refused for priors.
    tm.accumulate_alignment(accs, [0])
    with pytest.raises(PynnetError, match="transition-id 0"):
        am.priors_from_transition_accs(tm, accs, 1e-5)


def test_kaldi_scale_is_openblas_sscal() -> None:
    v = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    assert np.array_equal(kaldi_scale(v, 2.0), np.array([2.0, np.nan, 6.0], np.float32),
                          equal_nan=True)
    # OpenBLAS 0.3.21's sscal zeroes the vector for alpha 0 and for alpha NaN.
    assert np.array_equal(kaldi_scale(v, 0.0), np.zeros(3, np.float32))
    assert np.array_equal(kaldi_scale(v, float("nan")), np.zeros(3, np.float32))


def test_logf_is_the_c_librarys() -> None:
    """logf of the recipe topology's 0.75 / 0.25, as stored in Kaldi's 0.mdl."""
    tm, _, _ = read_mdl(str(DATA / "recipe" / "1.mdl"))
    assert logf(np.float32(0.75)) == tm.log_probs[1] and logf(np.float32(0.25)) == tm.log_probs[2]


def test_update_without_floor_of_an_unseen_state_fails_as_kaldi() -> None:
    """--transition-floor=0 --transition-min-count=0 and a state with no counts:
    0/0 probabilities stay zero, so their logs are -inf: Kaldi's KALDI_ERR."""
    tm = read_transition_model(str(DATA / "kaldi" / "trans4"))
    accs = tm.init_stats()
    accs[1] = 3
    with pytest.raises(PynnetError, match="Log probs is inf or NaN"):
        tm.mle_update(accs, MleTransitionUpdateConfig(0.0, 0.0, False))


def test_alignment_archives_text_and_binary(tmp_path: Path) -> None:
    """Int32 vector tables (Kaldi's BasicVectorHolder<int32>): ``key 1 2 3 \\n`` in
    text; an int32 count then int32 values after ``\\0B`` in binary."""
    from pynnet3.io.table import TableWriter

    alis = {"a": [1, 2, 3], "b": [], "c": [70000, 5]}
    with TableWriter(f"ark,t:{tmp_path / 'a.txt'}", INT32_VECTOR_HOLDER) as w:
        for k, v in alis.items():
            w.write(k, v)
    assert (tmp_path / "a.txt").read_bytes() == b"a 1 2 3 \nb \nc 70000 5 \n"
    with TableWriter(f"ark:{tmp_path / 'a.ark'}", INT32_VECTOR_HOLDER) as w:
        for k, v in alis.items():
            w.write(k, v)
    assert (tmp_path / "a.ark").read_bytes().startswith(
        b"a \0B\x04\x03\x00\x00\x00\x04\x01\x00\x00\x00\x04\x02\x00\x00\x00")
    for name in ("a.txt", "a.ark"):
        with SequentialTableReader(f"ark:{tmp_path / name}", INT32_VECTOR_HOLDER) as r:
            assert dict(r) == alis


def test_kaldi_binary_alignment_archive() -> None:
    """The reference chain setup's ali.ark (Kaldi binary) reads as its ali.txt."""
    from tests.helpers import reference_dir

    d = reference_dir() / "chain"
    if not (d / "ali.ark").is_file():
        pytest.skip(f"no chain reference at {d}")
    with SequentialTableReader(f"ark:{d / 'ali.ark'}", INT32_VECTOR_HOLDER) as r:
        binary = list(r)
    with SequentialTableReader(f"ark:{d / 'ali.txt'}", INT32_VECTOR_HOLDER) as r:
        text = list(r)
    assert len(binary) == 30 and binary == text
