"""Training: examples (egs) and their tables, objectives, updates, averaging.

The egs part mirrors Kaldi's nnet3 egs code: :mod:`.general_matrix`
(full / compressed / sparse matrices), :mod:`.egs` (NnetIo, NnetExample),
:mod:`.table` (ark/scp tables), :mod:`.posterior`, :mod:`.egs_split`
(UtteranceSplitter), :mod:`.egs_merge` (MergeExamples, ExampleMerger),
:mod:`.egs_tools` (the bodies of the egs binaries) and
:mod:`.kaldi_random` (Kaldi's random streams, reproduced).
"""
