"""Making and adjusting ``.mdl`` acoustic models: the bodies of Kaldi's
nnet3-am-init, nnet3-am-adjust-priors and nnet3-am-train-transitions.

A ``.mdl`` is a TransitionModel followed by an AmNnetSimple (the network, its
context and the pdf priors that ``nnet3-compute --use-priors`` and decoders
divide by).  The float arithmetic follows Kaldi's: priors are float vectors
normalised with Kaldi's float ``Sum()`` (OpenBLAS's summation order) and a
float scale, so the models written are Kaldi's to the bit.
"""
from __future__ import annotations

import math

import numpy as np

from .. import log
from ..compile.am_nnet import AmNnetSimple, read_mdl, write_mdl
from ..compile.model_io import read_nnet
from ..errors import FormatError, PynnetError
from ..io.kaldi_io import open_kaldi_object
from ..io.table import INT32_VECTOR_HOLDER, SequentialTableReader
from ..nnet.components.base import blas_sum
from ..nnet.transition_model import (MleTransitionUpdateConfig, TransitionModel,
                                     kaldi_normalize, logf, read_topology,
                                     read_transition_model)
from ..nnet.tree import read_context_dependency

F32 = np.float32

__all__ = ["am_init", "adjust_priors", "train_transitions", "priors_from_transition_accs",
           "normalize_posterior", "print_prior_diagnostics", "kl_divergence"]


def _g(value: float) -> str:
    """A float as C++'s ``operator<<`` prints it (precision 6)."""
    v = float(value)
    if math.isnan(v):
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return "%.6g" % v


def am_init(raw_nnet_rx: str, am_out_wx: str, *, trans_model_rx: str | None = None,
            tree_rx: str | None = None, topo_rx: str | None = None,
            binary: bool = True) -> None:
    """nnet3-am-init: a transition model (read from a file, or built from a
    tree and a topology) and a raw nnet, written as a ``.mdl`` without priors."""
    if trans_model_rx is not None:
        trans_model = read_transition_model(trans_model_rx)
    else:
        if tree_rx is None or topo_rx is None:
            raise PynnetError("am_init: need a transition model, or a tree and a topology")
        ctx_dep = read_context_dependency(tree_rx)
        trans_model = TransitionModel.from_tree(ctx_dep, read_topology(topo_rx))
    am_nnet = AmNnetSimple(read_nnet(raw_nnet_rx))
    write_mdl(am_out_wx, trans_model, am_nnet, binary)
    log.log(f"Initialized am-nnet (neural net acoustic model) and wrote to {am_out_wx}")


def _scale_to_sum_one(vec: np.ndarray) -> np.ndarray:
    """Kaldi's ``v.Scale(1.0 / v.Sum())`` on a float vector."""
    return kaldi_normalize(vec, blas_sum)


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """The one-sided K-L divergence from p to q that nnet3-am-adjust-priors
    prints (each normalised by its float sum; float terms, double total)."""
    sum_p, sum_q = blas_sum(p), blas_sum(q)
    if abs(float(sum_p) - 1.0) > 0.01 or abs(float(sum_q) - 1.0) > 0.01:
        log.warn(f"KlDivergence: vectors are not close to being normalized {_g(sum_p)}, "
                 f"{_g(sum_q)}")
    if p.shape != q.shape:
        raise PynnetError(f"KlDivergence: dimension mismatch {p.shape[0]} vs. {q.shape[0]}")
    with np.errstate(divide="ignore", invalid="ignore"):
        p_prob = (p / sum_p).astype(F32)
        q_prob = (q / sum_q).astype(F32)
        terms = p_prob * logf((p_prob / q_prob).astype(F32))
    total = 0.0
    for t in terms.astype(np.float64).tolist():
        total += t
    return float(F32(total))


def normalize_posterior(posterior: np.ndarray) -> np.ndarray:
    """A summed-posterior vector divided by its (float) sum, as the new priors."""
    posterior = np.asarray(posterior, dtype=F32)
    if not float(blas_sum(posterior)) > 0.0:
        raise PynnetError("the summed-posterior vector does not sum to a positive value "
                          "(KALDI_ASSERT(posterior_vec.Sum() > 0.0))")
    return _scale_to_sum_one(posterior)


def print_prior_diagnostics(old_priors: np.ndarray, new_priors: np.ndarray) -> None:
    """nnet3-am-adjust-priors' log lines: none before, or the largest change
    and the K-L divergence from the old priors to the new."""
    if old_priors.shape[0] == 0:
        log.log("Model did not previously have priors attached.")
        return
    if old_priors.shape != new_priors.shape:
        raise PynnetError(f"the model's priors have dimension {old_priors.shape[0]}, the new "
                          f"ones {new_priors.shape[0]}")
    diff = np.abs((new_priors - old_priors).astype(F32))
    i = int(np.argmax(diff))
    log.log(f"Adjusting priors: largest absolute difference was for pdf {i}, "
            f"{_g(old_priors[i])} -> {_g(new_priors[i])}")
    log.log(f"Adjusting priors: K-L divergence from old to new is "
            f"{_g(kl_divergence(old_priors, new_priors))}")


def adjust_priors(am_in_rx: str, posterior_vec_rx: str, am_out_wx: str, *,
                  binary: bool = True, prior_floor: float = 1.0e-15) -> None:
    """nnet3-am-adjust-priors: set the priors to a summed-posterior vector
    divided by its sum.

    ``prior_floor`` is accepted and, as in Kaldi, not applied: the normalised
    posteriors become the priors as they are.
    """
    del prior_floor  # registered by Kaldi's binary but never used
    trans_model, am_nnet, _ = read_mdl(am_in_rx)
    r = open_kaldi_object(posterior_vec_rx)
    try:
        posterior = normalize_posterior(r.read_vector())
    except PynnetError as e:
        raise FormatError(str(e), where=posterior_vec_rx) from None
    print_prior_diagnostics(am_nnet.priors, posterior)
    am_nnet.set_priors(posterior)
    write_mdl(am_out_wx, trans_model, am_nnet, binary)
    log.log(f"Modified priors of neural network model and wrote it to {am_out_wx}")


def priors_from_transition_accs(trans_model: TransitionModel, transition_accs: np.ndarray,
                                prior_floor: float) -> np.ndarray:
    """Kaldi's SetPriors in nnet3-am-train-transitions: per-pdf counts from the
    transition-id counts, normalised, floored, normalised again (float)."""
    if transition_accs[0] != 0.0:
        raise PynnetError("transition-id 0 occurs in the alignments (there is no "
                          "transition-id 0)")
    if not 0.0 < prior_floor < 1.0:
        raise PynnetError(f"--prior-floor must be between 0 and 1, got {prior_floor}")
    pdf_counts = np.zeros(trans_model.num_pdfs(), dtype=F32)
    id2pdf = trans_model.transition_id_to_pdf_array()
    # A float += double per transition-id, in transition-id order as Kaldi adds them.
    accs = np.asarray(transition_accs, dtype=np.float64).tolist()
    for tid in range(1, len(accs)):
        if accs[tid] != 0.0:
            pdf = int(id2pdf[tid])
            pdf_counts[pdf] = F32(float(pdf_counts[pdf]) + accs[tid])
    if float(blas_sum(pdf_counts)) == 0.0:
        raise PynnetError("no transition counts: cannot set priors (KALDI_ASSERT(sum != 0.0))")
    pdf_counts = _scale_to_sum_one(pdf_counts)
    pdf_counts = np.maximum(pdf_counts, F32(prior_floor))
    return _scale_to_sum_one(pdf_counts)


def train_transitions(am_in_rx: str, ali_rspecifier: str, am_out_wx: str, *,
                      cfg: MleTransitionUpdateConfig | None = None, set_priors: bool = True,
                      prior_floor: float = 5.0e-06, binary: bool = True) -> None:
    """nnet3-am-train-transitions: re-estimate the transition probabilities
    from alignments (one count per frame) and, by default, set the priors to
    the pdfs' relative frequencies in them."""
    cfg = cfg or MleTransitionUpdateConfig()
    trans_model, am_nnet, _ = read_mdl(am_in_rx)
    accs = trans_model.init_stats()
    num_done = 0
    with SequentialTableReader(ali_rspecifier, INT32_VECTOR_HOLDER) as reader:
        for key, alignment in reader:
            try:
                trans_model.accumulate_alignment(accs, alignment)
            except FormatError as e:
                raise FormatError(f"alignment for utterance {key}: {e}") from None
            num_done += 1
    log.log(f"Accumulated transition stats from {num_done} utterances.")
    objf_impr, count = trans_model.mle_update(accs, cfg)
    log.log(f"Transition model update: average {_g(F32(F32(objf_impr) / F32(count)))} "
            f"log-like improvement per frame over {_g(count)} frames.")
    if set_priors:
        log.log("Setting priors of pdfs in the model.")
        if trans_model.num_pdfs() != am_nnet.num_pdfs():
            raise PynnetError(f"the transition model has {trans_model.num_pdfs()} pdfs but the "
                              f"nnet's output has dimension {am_nnet.num_pdfs()}")
        am_nnet.set_priors(priors_from_transition_accs(trans_model, accs, prior_floor))
    write_mdl(am_out_wx, trans_model, am_nnet, binary)
    log.log(f"Trained transitions of neural network model and wrote it to {am_out_wx}")
