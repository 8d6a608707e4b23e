"""Chain (LF-MMI) training: supervision FSTs, chain egs and their tools.

``fst``: OpenFst StdArc FSTs as arrays (binary vector / compact-acceptor
formats, Kaldi's text form, properties, kaldifst conversion);
``supervision``: Kaldi's chain::Supervision; ``egs``: NnetChainSupervision and
NnetChainExample (nnet3/nnet-chain-example.h).
"""
