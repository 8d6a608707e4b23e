#!/usr/bin/env python3
"""Toy data for the mini_chain recipe, in Kaldi's formats (what a real chain
recipe has from GMM training, its tree building and alignment):

  <dir>/lang/topo          the 1-state chain topology (steps/nnet3/chain/gen_topo.py):
                           forward pdf-class 0, self-loop pdf-class 1; phone 1 = silence
  <dir>/lang/tree          a left-biphone tree (context width 2, central position 1):
                           silence has one pdf per pdf-class; every other phone's
                           pdf-class 0 (the first frame) depends on whether the left
                           phone is in a fixed random half of the phones, its
                           self-loop pdf-class 1 does not
  <dir>/lang/0.trans_mdl   the TransitionModel of tree + topo
  <dir>/SET/phones.txt     phone sequences (what ali-to-phones writes)
  <dir>/SET/phone_lengths.txt  phones with durations (ali-to-phones --write-lengths=true)
  <dir>/SET/ali.txt        transition-id alignments (reorder=true: the forward
                           transition on a phone's first frame, then self-loops)
  <dir>/SET/feats.ark      features: a per-pdf mean vector for each frame's pdf plus noise,
                           so that a network can learn the pdfs

Phone sequences follow a fixed random bigram (same for every set) so that the phone LM
has structure.  SET is train, valid and test.
"""
import argparse
import importlib.util
import os
import sys

import numpy as np

if importlib.util.find_spec("pynnet3") is None:
    # a checkout that is not installed: path.sh set PYNNET3_ROOT
    sys.path.insert(0, os.path.join(os.environ.get("PYNNET3_ROOT", "../.."), "src"))

from pynnet3.io.kaldi_io import KaldiWriter, kaldi_object_bytes, write_wxfilename  # noqa: E402
from pynnet3.io.table import MATRIX_HOLDER, TableWriter  # noqa: E402
from pynnet3.nnet.transition_model import TransitionModel, read_topology  # noqa: E402
from pynnet3.nnet.tree import (K_PDF_CLASS, ConstantEventMap, ContextDependency,  # noqa: E402
                               SplitEventMap, TableEventMap, write_context_dependency)


def make_tree(num_phones: int, rng: np.random.Generator) -> ContextDependency:
    phones = list(range(1, num_phones + 1))
    left_class = sorted(int(p) for p in rng.choice(phones, size=num_phones // 2, replace=False))
    table = [None]
    pdf = 0
    for phone in phones:
        if phone == 1:
            classes = [ConstantEventMap(pdf), ConstantEventMap(pdf + 1)]
            pdf += 2
        else:
            first = SplitEventMap(0, left_class, ConstantEventMap(pdf), ConstantEventMap(pdf + 1))
            classes = [first, ConstantEventMap(pdf + 2)]
            pdf += 3
        table.append(TableEventMap(K_PDF_CLASS, classes))
    return ContextDependency(2, 1, TableEventMap(1, table))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-phones", type=int, default=8)
    p.add_argument("--feat-dim", type=int, default=20)
    p.add_argument("--num-utts", default="train=80,valid=10,test=3",
                   help="utterances per set")
    p.add_argument("--min-dur", type=int, default=3)
    p.add_argument("--max-dur", type=int, default=9)
    p.add_argument("--min-phones", type=int, default=10)
    p.add_argument("--max-phones", type=int, default=30)
    p.add_argument("dir")
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    lang = os.path.join(a.dir, "lang")
    os.makedirs(lang, exist_ok=True)
    with open(os.path.join(lang, "topo"), "w") as f:
        f.write("<Topology>\n<TopologyEntry>\n<ForPhones>\n"
                + " ".join(str(i) for i in range(1, a.num_phones + 1)) + "\n</ForPhones>\n"
                "<State> 0 <ForwardPdfClass> 0 <SelfLoopPdfClass> 1 <Transition> 0 0.5 "
                "<Transition> 1 0.5 </State>\n<State> 1 </State>\n</TopologyEntry>\n</Topology>\n")
    topo = read_topology(os.path.join(lang, "topo"))
    tree = make_tree(a.num_phones, rng)
    write_context_dependency(os.path.join(lang, "tree"), tree, binary=False)
    tm = TransitionModel.from_tree(tree, topo)
    w = KaldiWriter(True)
    tm.write(w)
    write_wxfilename(os.path.join(lang, "0.trans_mdl"), kaldi_object_bytes(w))
    num_pdfs = tm.num_pdfs()
    means = 1.5 * rng.standard_normal((num_pdfs, a.feat_dim))
    # bigram over phones 2..N (silence appears at the start, the end and now and then)
    bigram = rng.dirichlet(np.full(a.num_phones - 1, 0.7), size=a.num_phones + 1)

    def tid_of(phone: int, left: int, self_loop: bool) -> int:
        fwd = tree.compute([left, phone], 0)
        loop = tree.compute([left, phone], 1)
        ts = tm.tuple_to_transition_state(phone, 0, fwd, loop)
        return tm.pair_to_transition_id(ts, 0 if self_loop else 1)

    for spec in a.num_utts.split(","):
        name, n = spec.split("=")
        d = os.path.join(a.dir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "phones.txt"), "w") as ph, \
                open(os.path.join(d, "phone_lengths.txt"), "w") as pl, \
                open(os.path.join(d, "ali.txt"), "w") as al, \
                TableWriter(f"ark:{d}/feats.ark", MATRIX_HOLDER) as feats:
            for u in range(int(n)):
                key = f"{name}_{u:04d}"
                num = int(rng.integers(a.min_phones, a.max_phones + 1))
                seq = [1]
                for _ in range(num):
                    if rng.random() < 0.08:
                        seq.append(1)
                    else:
                        seq.append(int(rng.choice(np.arange(2, a.num_phones + 1), p=bigram[seq[-1]])))
                seq.append(1)
                durs = [int(x) for x in rng.integers(a.min_dur, a.max_dur + 1, size=len(seq))]
                tids, pdfs = [], []
                left = 0
                for phone, dur in zip(seq, durs):
                    for k in range(dur):
                        tid = tid_of(phone, left, self_loop=k > 0)
                        tids.append(tid)
                        pdfs.append(tm.transition_id_to_pdf(tid))
                    left = phone
                x = means[pdfs] + rng.standard_normal((len(pdfs), a.feat_dim))
                feats.write(key, x.astype(np.float32))
                ph.write(key + " " + " ".join(map(str, seq)) + " \n")
                pl.write(key + " " + " ; ".join(f"{q} {r}" for q, r in zip(seq, durs)) + " \n")
                al.write(key + " " + " ".join(map(str, tids)) + " \n")
    print(f"{a.dir}: {a.num_phones} phones, {num_pdfs} pdfs, {tm.num_transition_ids()} "
          f"transition-ids; sets {a.num_utts}")


if __name__ == "__main__":
    main()
