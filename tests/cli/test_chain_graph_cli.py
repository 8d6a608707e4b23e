"""chain-est-phone-lm, chain-make-den-fst and chain-get-supervision as
binaries, against real Kaldi's outputs (goldens in tests/data/chain): output
bytes, Kaldi's printed LOG lines, usage errors."""
from __future__ import annotations

from pathlib import Path

from pynnet3.train.chain import fst as F
from tests.helpers import fst_isomorphic, run_binary

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "chain"


def _messages(text: str) -> list[str]:
    return [ln.split(") ", 1)[1] for ln in text.splitlines() if ln.startswith(("LOG (", "WARNING ("))]


def test_chain_est_phone_lm(tmp_path, capsys):
    out = tmp_path / "lm.fst"
    assert run_binary("chain-est-phone-lm", "--num-extra-lm-states=200",
                      f"ark:{GOLDEN / 'phones.txt'}", str(out)) == 0
    assert out.read_bytes() == (GOLDEN / "phone_lm.fst").read_bytes()
    msgs = _messages(capsys.readouterr().err)
    # Kaldi's log.est_phone_lm.txt, line for line
    assert msgs[2:6] == [
        "Estimating language model with --no-prune-ngram-order=3, --ngram-order=4, "
        "--num-extra-lm-states=200",
        "In LM [hard] backoff, target num states was 122 + --num-extra-lm-states=200 = 322, "
        "pruned from 501 to 322",
        "Total number of phone instances seen was 719",
        "Perplexity on training data is: 1.98919"]
    assert "Created phone language model with 322 states and 552 arcs." in msgs


def test_chain_get_supervision(tmp_path, capsys):
    out = tmp_path / "sup.ark"
    assert run_binary("chain-get-supervision", "--frame-subsampling-factor=3",
                      "--left-tolerance=5", "--right-tolerance=5", str(GOLDEN / "tree"),
                      str(GOLDEN / "0.trans_mdl"), f"ark:{GOLDEN / 'phone_lengths.txt'}",
                      f"ark:{out}") == 0
    assert out.read_bytes() == (GOLDEN / "supervision.ark").read_bytes()
    assert _messages(capsys.readouterr().err)[-1] == \
        "Generated chain supervision information for 30 utterances, errors on 0"


def test_chain_get_supervision_errors(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("u1 1 1 ; 7 1 ; 3 1 \n")
    # a phone with no allowed output frame is an error, as Kaldi's assertion
    assert run_binary("chain-get-supervision", "--frame-subsampling-factor=3",
                      "--left-tolerance=1", "--right-tolerance=1", str(GOLDEN / "tree"),
                      str(GOLDEN / "0.trans_mdl"), f"ark:{bad}", f"ark:{tmp_path / 'o.ark'}") == 1
    assert "ERROR" in capsys.readouterr().err
    # too many phones for the frames: the utterance fails, and no utterance done -> status 1
    assert run_binary("chain-get-supervision", "--frame-subsampling-factor=3",
                      "--left-tolerance=2", "--right-tolerance=2", str(GOLDEN / "tree"),
                      str(GOLDEN / "0.trans_mdl"), f"ark:{bad}", f"ark:{tmp_path / 'o.ark'}") == 1
    err = capsys.readouterr().err
    assert "Failed creating supervision for utterance u1" in err
    assert run_binary("chain-get-supervision", str(GOLDEN / "tree")) == 1
    assert "Usage: chain-get-supervision" in capsys.readouterr().err


def test_chain_make_den_fst(tmp_path, capsys):
    den, norm = tmp_path / "den.fst", tmp_path / "normalization.fst"
    assert run_binary("chain-make-den-fst", str(GOLDEN / "tree"), str(GOLDEN / "0.trans_mdl"),
                      str(GOLDEN / "phone_lm.fst"), str(den), str(norm)) == 0
    assert den.read_bytes() == (GOLDEN / "den.fst").read_bytes()
    assert norm.read_bytes() == (GOLDEN / "normalization.fst").read_bytes()
    assert fst_isomorphic(F.read_fst_file(str(den)), F.read_fst_file(str(GOLDEN / "den.fst")))
    assert fst_isomorphic(F.read_fst_file(str(norm)),
                          F.read_fst_file(str(GOLDEN / "normalization.fst")))
    msgs = _messages(capsys.readouterr().err)
    # the sizes at every stage are Kaldi's (log.make_den_fst.txt)
    assert msgs[:4] == [
        "Number of states and arcs in phone-LM FST is 322 and 552",
        "Number of states and arcs in context-dependent LM FST is 322 and 552",
        "Number of states and arcs in transition-id FST is 643 and 1194",
        "Number of states and arcs in transition-id FST after removing epsilons is 322 and 873"]
    assert msgs[4:10:2] == [
        f"Number of states and arcs in transition-id FST after reversed minimization is {s} (pass {i})"
        for i, s in ((1, "324 and 902"), (2, "323 and 898"), (3, "325 and 900"))]
    assert msgs[-2] == ("Number of states is 319 and arcs 867; number of states with in-degree "
                        "<= 3 is 258 and with out-degree <= 3 is 271")
    assert run_binary("chain-make-den-fst", "a", "b") == 1


def test_chain_est_phone_lm_no_input_is_an_error(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert run_binary("chain-est-phone-lm", f"ark:{empty}", str(tmp_path / "lm.fst")) == 1
    assert "ERROR" in capsys.readouterr().err
    assert not (tmp_path / "lm.fst").exists()
