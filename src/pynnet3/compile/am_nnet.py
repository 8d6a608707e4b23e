"""Kaldi's AmNnetSimple and whole ``.mdl`` files (TransitionModel + AmNnetSimple).

On disk an AmNnetSimple is just the nnet (``<Nnet3> ... </Nnet3>``) followed by
``<LeftContext> L <RightContext> R <Priors> vector``; there is no header or
footer of its own.  Kaldi does not trust the stored contexts: after reading
it recomputes them from the network (SetContext), and so do we, so a file
with stale contexts is written back corrected, as Kaldi would.  That
computation builds computation graphs (:mod:`.graph.context`), which is why
model files are read here, above the nnet layer.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import log as _logmod
from ..errors import FormatError
from ..io.kaldi_io import (KaldiReader, KaldiWriter, kaldi_object_bytes, open_kaldi_object,
                           write_wxfilename)
from ..nnet.transition_model import TransitionModel
from .graph.context import compute_simple_nnet_context, nnet_info

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet



def _read_nnet(r: KaldiReader) -> "Nnet":
    # Imported lazily: the Nnet class pulls in every component, and this
    # module must stay cheap to import for tools that only touch the
    # TransitionModel.
    from ..nnet.nnet import Nnet

    return Nnet.read(r)


def _compute_context(nnet: "Nnet") -> tuple[int, int]:
    """(left, right) context of a "simple" nnet; raises if it is not simple.

    This is Kaldi's SetContext: it errors out for networks AmNnetSimple is not
    meant for (no ``input``/``output`` nodes, extra inputs other than
    ``ivector``).
    """
    left, right = compute_simple_nnet_context(nnet)
    return int(left), int(right)


def _kaldi_vector_sum(vec: np.ndarray) -> float:
    """VectorBase<float>::Sum as Kaldi gets it from OpenBLAS's sdot with a zero stride.

    That path adds the float products two at a time in float and accumulates
    the pairs in double, returning a float.
    """
    v = np.asarray(vec, dtype=np.float32)
    n1 = v.shape[0] & ~1
    pairs = (v[0:n1:2] + v[1:n1:2]).astype(np.float64)
    total = 0.0
    for x in pairs.tolist():
        total += x
    if n1 < v.shape[0]:
        total += float(v[-1])
    return float(np.float32(total))


def _fmt_float(value: float) -> str:
    """C++ ``operator<<`` of a float with the default precision 6."""
    return "%.6g" % value


class AmNnetSimple:
    """An nnet3 acoustic model: the network, its context and the pdf priors."""

    def __init__(self, nnet: "Nnet | None" = None) -> None:
        self.nnet = nnet
        self.left_context = 0
        self.right_context = 0
        self.priors = np.zeros(0, dtype=np.float32)
        if nnet is not None:
            self.set_context()

    # -- queries ---------------------------------------------------------
    def num_pdfs(self) -> int:
        ans = self.nnet.output_dim("output")
        if ans <= 0:
            raise FormatError("AmNnetSimple: the nnet has no output node named 'output'")
        return ans

    def set_context(self) -> None:
        self.left_context, self.right_context = _compute_context(self.nnet)

    def set_nnet(self, nnet: "Nnet") -> None:
        self.nnet = nnet
        self.set_context()
        if self.priors.shape[0] != 0 and self.priors.shape[0] != nnet.output_dim("output"):
            # Kaldi warns and drops priors that no longer fit the network.
            _warn(
                "Removing priors since there is a dimension mismatch after changing the nnet: "
                "%d vs. %d", self.priors.shape[0], nnet.output_dim("output"))
            self.priors = np.zeros(0, dtype=np.float32)

    def set_priors(self, priors: np.ndarray) -> None:
        priors = np.ascontiguousarray(priors, dtype=np.float32).reshape(-1)
        if priors.shape[0] != 0 and priors.shape[0] != self.nnet.output_dim("output"):
            raise FormatError(f"Dimension mismatch when setting priors: priors have dim "
                              f"{priors.shape[0]}, model expects {self.nnet.output_dim('output')}")
        self.priors = priors

    # -- I/O -------------------------------------------------------------
    def read(self, r: KaldiReader) -> None:
        self.nnet = _read_nnet(r)
        r.expect_token("<LeftContext>")
        self.left_context = r.read_int32()
        r.expect_token("<RightContext>")
        self.right_context = r.read_int32()
        self.set_context()
        r.expect_token("<Priors>")
        self.priors = r.read_vector()

    def write(self, w: KaldiWriter) -> None:
        self.nnet.write(w)
        w.write_token("<LeftContext>")
        w.write_int32(self.left_context)
        w.write_token("<RightContext>")
        w.write_int32(self.right_context)
        w.write_token("<Priors>")
        w.write_vector(self.priors)

    def info(self) -> str:
        """What ``nnet3-am-info`` prints."""
        lines = [
            f"input-dim: {self.nnet.input_dim('input')}",
            f"ivector-dim: {self.nnet.input_dim('ivector')}",
            f"num-pdfs: {self.nnet.output_dim('output')}",
            f"prior-dimension: {self.priors.shape[0]}",
        ]
        if self.priors.shape[0] != 0:
            lines.append(f"prior-sum: {_fmt_float(_kaldi_vector_sum(self.priors))}")
            lines.append(f"prior-min: {_fmt_float(float(self.priors.min()))}")
            lines.append(f"prior-max: {_fmt_float(float(self.priors.max()))}")
        lines.append("# Nnet info follows.")
        return "\n".join(lines) + "\n" + nnet_info(self.nnet)


# ---------------------------------------------------------------------------
# Whole .mdl files


def read_mdl_from(r: KaldiReader) -> tuple[TransitionModel, AmNnetSimple]:
    tm = TransitionModel()
    tm.read(r)
    am = AmNnetSimple()
    am.read(r)
    return tm, am


def read_mdl(rxfilename: str) -> tuple[TransitionModel, AmNnetSimple, bool]:
    """Read a ``.mdl`` file: (transition model, acoustic model, was-binary)."""
    r = open_kaldi_object(rxfilename)
    tm, am = read_mdl_from(r)
    return tm, am, r.binary


def mdl_bytes(tm: TransitionModel, am: AmNnetSimple, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    tm.write(w)
    am.write(w)
    return kaldi_object_bytes(w)


def write_mdl(wxfilename: str, tm: TransitionModel, am: AmNnetSimple, binary: bool) -> None:
    """Write a ``.mdl`` file as Kaldi's nnet3-am-copy would."""
    write_wxfilename(wxfilename, mdl_bytes(tm, am, binary))


def _warn(fmt: str, *args: object) -> None:
    _logmod.warn(fmt % args if args else fmt)
