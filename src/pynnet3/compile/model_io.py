"""Reading and writing whole model files (``.raw`` and ``.mdl``), text or binary.

(Here rather than in ``nnet``: reading an ``.mdl`` recomputes its context,
which builds computation graphs; see :mod:`.am_nnet`.)
"""
from __future__ import annotations

from ..io.kaldi_io import (BINARY_HEADER, KaldiReader, KaldiWriter, kaldi_object_bytes,
                           kaldi_object_parts, open_kaldi_object, write_wxfilename)
from ..nnet.nnet import Nnet


def read_nnet(rxfilename: str) -> Nnet:
    """A raw Nnet; like Kaldi, an ``.mdl`` (TransitionModel + AmNnetSimple) is
    accepted too and its Nnet returned."""
    return _read_nnet_from(open_kaldi_object(rxfilename))


def nnet_from_bytes(data: bytes, where: str = "<nnet>") -> Nnet:
    """:func:`read_nnet` of a file's bytes already in memory."""
    binary = data.startswith(BINARY_HEADER)
    return _read_nnet_from(KaldiReader(data, binary, where, pos=2 if binary else 0))


def _read_nnet_from(r: KaldiReader) -> Nnet:
    if r.peek_token() == "<TransitionModel>":
        from .am_nnet import read_mdl_from

        return read_mdl_from(r)[1].nnet
    return Nnet.read(r)


def nnet_bytes(nnet: Nnet, binary: bool) -> bytes:
    w = KaldiWriter(binary)
    nnet.write(w)
    return kaldi_object_bytes(w)


def write_nnet(wxfilename: str, nnet: Nnet, binary: bool) -> None:
    """Write atomically (temp file + rename) unless the target is a pipe or stdout."""
    w = KaldiWriter(binary)
    nnet.write(w)
    # (the pieces, not one joined copy; the parameters must not change until
    # the write is done, which it is when this returns)
    write_wxfilename(wxfilename, kaldi_object_parts(w))
