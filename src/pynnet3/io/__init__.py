"""The bottom layer: Kaldi's serialisation (binary and text tokens, vectors,
matrices), rx/wxfilenames and atomic writes (:mod:`.kaldi_io`), tables of keyed
objects behind rspecifiers/wspecifiers (:mod:`.table`), GeneralMatrix
(:mod:`.general_matrix`) and posteriors (:mod:`.posterior`).  Nothing here
knows about networks."""
