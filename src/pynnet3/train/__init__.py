"""Training: examples (egs) and their tables, objectives, updates, averaging.

The egs part mirrors Kaldi's nnet3 egs code: :mod:`.general_matrix`
(full / compressed / sparse matrices), :mod:`.egs` (NnetIo, NnetExample),
:mod:`.table` (ark/scp tables), :mod:`.posterior`, :mod:`.egs_split`
(UtteranceSplitter), :mod:`.egs_merge` (MergeExamples, ExampleMerger),
:mod:`.egs_tools` (the bodies of the egs binaries) and
:mod:`.kaldi_random` (Kaldi's random streams, reproduced).

Training itself: :mod:`.objective` (objective functions, accuracy),
:mod:`.eg_request` (an example's ComputationRequest), :mod:`.nnet_update`
(max-change, l2, whole-network arithmetic), :mod:`.trainer` (NnetTrainer),
:mod:`.diagnostics` (NnetComputeProb), :mod:`.average`,
:mod:`.show_progress` and :mod:`.cache_file` (--read-cache/--write-cache).
"""
