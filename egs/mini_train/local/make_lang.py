#!/usr/bin/env python3
"""The toy task's "lang" and "alignment" directories, in Kaldi's formats.

A real recipe gets these from GMM training (steps/train_*.sh, then
steps/align_*.sh).  The toy data has one pdf per frame label, so the smallest
consistent HMM system is: a one-state HMM per phone (a self-loop and an exit
transition), phone p+1 for pdf p, and a monophone tree mapping phone p+1 to
pdf p.  Writes:

  <lang>/topo             HmmTopology (text)
  <ali>/tree              ContextDependency (text), context width 1
  <ali>/ali.1.gz          transition-id alignments of <data>/post.ark, gzipped
                          text archive (as steps/align_*.sh writes ali.*.gz)
  <ali>/num_jobs          1

In this system transition-ids are numbered as Kaldi's TransitionModel numbers
them: phone p's self-loop is 2p-1 and its exit transition 2p.  A run of equal
frame labels is one phone occurrence: self-loops, then the exit on its last
frame.
"""
import argparse
import gzip
import os
import re


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-pdfs", type=int, required=True)
    p.add_argument("data", help="data dir with post.ark (text, one [ pdf 1 ] per frame)")
    p.add_argument("lang")
    p.add_argument("ali")
    a = p.parse_args()
    os.makedirs(a.lang, exist_ok=True)
    os.makedirs(a.ali, exist_ok=True)
    phones = " ".join(str(ph) for ph in range(1, a.num_pdfs + 1))
    with open(os.path.join(a.lang, "topo"), "w") as f:
        f.write("<Topology>\n<TopologyEntry>\n<ForPhones>\n" + phones + "\n</ForPhones>\n"
                "<State> 0 <PdfClass> 0 <Transition> 0 0.75 <Transition> 1 0.25 </State>\n"
                "<State> 1 </State>\n</TopologyEntry>\n</Topology>\n")
    # EventMap: a TableEventMap on key 0 (the phone), entry p+1 -> constant pdf p.
    with open(os.path.join(a.ali, "tree"), "w") as f:
        f.write(f"ContextDependency 1 0 ToPdf TE 0 {a.num_pdfs + 1} ( NULL "
                + " ".join(f"CE {pdf}" for pdf in range(a.num_pdfs)) + " ) \n"
                "EndContextDependency \n")
    with open(os.path.join(a.data, "post.ark")) as post, \
            gzip.open(os.path.join(a.ali, "ali.1.gz"), "wt") as ali:
        for line in post:
            key, rest = line.split(None, 1)
            labels = [int(x) for x in re.findall(r"\[ (\d+) ", rest)]
            tids = []
            i = 0
            while i < len(labels):
                j = i
                while j + 1 < len(labels) and labels[j + 1] == labels[i]:
                    j += 1
                phone = labels[i] + 1
                tids += [2 * phone - 1] * (j - i) + [2 * phone]
                i = j + 1
            ali.write(key + " " + " ".join(map(str, tids)) + "\n")
    with open(os.path.join(a.ali, "num_jobs"), "w") as f:
        f.write("1\n")


if __name__ == "__main__":
    main()
