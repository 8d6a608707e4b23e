"""nnet3-chain-combine's body: pynnet3's model combination
(:func:`pynnet3.train.combine.combine_nnets`) with the chain objective
(Kaldi's nnet3-chain-combine.cc: the same running average over the first n
models, evaluated with NnetChainComputeProb; RecomputeStats of
nnet-chain-diagnostics.cc for BatchNorm)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ... import log
from ...errors import PynnetError
from ..combine import NnetCombineOptions, combine_nnets
from ..diagnostics import NnetComputeProbOptions
from .den_graph import DenominatorGraph
from .diagnostics import NnetChainComputeProb, recompute_chain_stats
from .egs import iter_chain_examples
from .fst import read_fst_file
from .objective import ChainTrainingOptions

if TYPE_CHECKING:
    from ...nnet.nnet import Nnet

__all__ = ["read_chain_examples", "chain_combine_nnets"]


def read_chain_examples(rspecifier: str) -> list:
    egs = [eg for _, eg in iter_chain_examples(rspecifier)]
    log.log(f"Read {len(egs)} examples.")
    if not egs:
        raise PynnetError(f"no examples were read from {rspecifier} (nnet3-chain-combine "
                          "needs at least one)")
    return egs


def chain_combine_nnets(den_fst_rxfilename: str, models: Sequence[str], egs_rspecifier: str,
                        config: NnetCombineOptions | None = None,
                        chain_config: ChainTrainingOptions | None = None,
                        backend: Any = "reference") -> "Nnet":
    chain_config = chain_config or ChainTrainingOptions()
    chain_config.check()
    den_fst = read_fst_file(den_fst_rxfilename)
    graphs: dict[int, DenominatorGraph] = {}

    def graph_for(nnet: "Nnet") -> DenominatorGraph:
        dim = nnet.output_dim("output")
        if dim not in graphs:
            graphs[dim] = DenominatorGraph.from_fst(den_fst, dim)
        return graphs[dim]

    def make_prob(opts: NnetComputeProbOptions, nnet: "Nnet", backend: Any = "reference",
                  compiler: Any = None) -> NnetChainComputeProb:
        return NnetChainComputeProb(opts, chain_config, graph_for(nnet), nnet,
                                    backend=backend, compiler=compiler)

    def recompute(egs: Sequence[Any], nnet: "Nnet") -> None:
        recompute_chain_stats(egs, chain_config, graph_for(nnet), nnet, backend)

    return combine_nnets(models, egs_rspecifier, config, backend,
                         NnetComputeProbOptions(compute_accuracy=False),
                         read_egs=read_chain_examples, make_prob=make_prob,
                         recompute=recompute)
