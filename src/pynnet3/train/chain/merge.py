"""Merging chain egs into minibatches (nnet3-chain-merge-egs; Kaldi's
MergeChainExamples and ChainExampleMerger in nnet3/nnet-chain-example.cc).

The inputs are merged as ordinary egs (:func:`pynnet3.train.egs_merge.merge_examples`);
each chain output's supervisions are appended into one (chain::MergeSupervision:
FSTs concatenated, epsilons removed, states sorted breadth-first), its indexes
renumbered ``n`` = position in the minibatch and sorted t-major, and its deriv
weights interleaved to match.  :class:`ChainExampleMerger` groups egs of the
same structure exactly as Kaldi's (same ``--minibatch-size`` rules, same
``std::unordered_map`` order for the final partial minibatches and the
statistics), so the output is byte-identical to Kaldi's.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ...errors import FormatError
from ...std_order import StdUnorderedOrder
from ..egs import NnetExample
from ..egs_merge import ExampleMergingConfig, ExampleMergingStats, merge_examples
from .egs import NnetChainExample, NnetChainSupervision, chain_example_size, chain_structure_hash
from .supervision import merge_supervision


def merge_chain_supervision(inputs: Sequence[NnetChainSupervision]) -> NnetChainSupervision:
    """Kaldi's MergeSupervision for NnetChainSupervision (same name required)."""
    name = inputs[0].name
    for sup in inputs:
        if sup.name != name:
            raise FormatError(f"merging chain outputs with different names: '{name}' vs. "
                              f"'{sup.name}'")
        if sup.indexes.shape[0] and np.any(sup.indexes[:, 0] != 0):
            raise FormatError("Merging already-merged chain egs")
    supervision = merge_supervision([s.supervision for s in inputs])
    parts = []
    for n, sup in enumerate(inputs):
        idx = sup.indexes.astype(np.int64).copy()
        idx[:, 0] = n
        parts.append(idx)
    idx = np.concatenate(parts)
    # Index's operator<: t, then x, then n.
    idx = idx[np.lexsort((idx[:, 0], idx[:, 2], idx[:, 1]))]
    dw = np.zeros(0, np.float32)
    if inputs[0].deriv_weights.shape[0]:
        fps = inputs[0].deriv_weights.shape[0]
        if any(s.deriv_weights.shape[0] != fps for s in inputs):
            raise FormatError("merging chain egs with different deriv-weight dimensions")
        dw = np.stack([s.deriv_weights for s in inputs], axis=1).reshape(-1)
    out = NnetChainSupervision(name, idx.astype(np.int32), supervision, dw)
    out.check_dim()
    return out


def merge_chain_examples(egs: Sequence[NnetChainExample], compress: bool = False
                         ) -> NnetChainExample:
    """Kaldi's MergeChainExamples."""
    if not egs:
        raise ValueError("merge_chain_examples: no examples")
    inputs = merge_examples([NnetExample(eg.inputs) for eg in egs], compress).io
    num_outputs = len(egs[0].outputs)
    if any(len(eg.outputs) != num_outputs for eg in egs):
        raise FormatError("merging chain egs with different numbers of outputs")
    outputs = [merge_chain_supervision([eg.outputs[i] for eg in egs]) for i in range(num_outputs)]
    return NnetChainExample(inputs, outputs)


class ChainExampleMerger:
    """Kaldi's ChainExampleMerger: accepts chain egs one by one, writes merged
    minibatches through ``writer(key, eg)`` with keys ``merged-<i>-<size>``."""

    def __init__(self, config: ExampleMergingConfig,
                 writer: Callable[[str, NnetChainExample], None]) -> None:
        self.config = config
        self.writer = writer
        self.finished = False
        self.num_egs_written = 0
        self.stats = ExampleMergingStats()
        self._groups: dict[tuple, list[NnetChainExample]] = {}
        self._hash: dict[tuple, int] = {}
        self._order = StdUnorderedOrder()

    def accept_example(self, eg: NnetChainExample) -> None:
        if self.finished:
            raise RuntimeError("accept_example() after finish()")
        key = eg.structure_key()
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = []
            self._hash[key] = chain_structure_hash(eg)
            self._order.insert(key, self._hash[key])
        group.append(eg)
        mb = self.config.minibatch_size_for(chain_example_size(eg), len(group), False)
        if mb != 0:
            if mb != len(group):
                raise RuntimeError("minibatch size does not match the number of available egs")
            del self._groups[key]
            self._order.erase(key)
            self._write_minibatch(group, self._hash.pop(key))

    def _write_minibatch(self, egs: list[NnetChainExample], hash_value: int) -> None:
        self.stats.wrote_example(chain_example_size(egs[0]), hash_value, len(egs))
        merged = merge_chain_examples(egs, self.config.compress)
        suffix = ""
        if self.config.multilingual_eg:
            name = merged.outputs[0].name
            suffix = "?lang=" + name[name.find("-") + 1:]
        key = f"merged-{self.num_egs_written}-{len(egs)}{suffix}"
        self.num_egs_written += 1
        self.writer(key, merged)

    def finish(self) -> None:
        """Flush the remaining groups as the rules allow, discard the rest, log stats."""
        if self.finished:
            return
        self.finished = True
        for key in list(self._order):
            vec = self._groups.pop(key)
            hash_value = self._hash.pop(key)
            eg_size = chain_example_size(vec[0])
            while vec:
                mb = self.config.minibatch_size_for(eg_size, len(vec), True)
                if mb == 0:
                    break
                batch, vec = vec[:mb], vec[mb:]
                self._write_minibatch(batch, hash_value)
            if vec:
                self.stats.discarded_examples(eg_size, hash_value, len(vec))
        self._order = StdUnorderedOrder()
        self.stats.print_stats()

    def exit_status(self) -> int:
        self.finish()
        return 0 if self.num_egs_written > 0 else 1


__all__ = ["merge_chain_supervision", "merge_chain_examples", "ChainExampleMerger"]
