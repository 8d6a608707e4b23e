"""Two small table tools of Kaldi's src/bin that training scripts use to turn
network outputs into priors: matrix-sum-rows (each matrix of a table summed
over its rows) and vector-sum (vectors added up, in its three usages).

Sums run in double precision where Kaldi's do (so the float32 results agree
with Kaldi's bit for bit) and in float32 where Kaldi adds floats.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import log
from ..errors import FormatError, UsageError
from .kaldi_io import KaldiWriter, kaldi_object_bytes, open_kaldi_object, write_wxfilename
from .table import (MATRIX_HOLDER, VECTOR_HOLDER, RandomAccessTableReader,
                    SequentialTableReader, TableWriter, classify_rspecifier,
                    classify_wspecifier)

__all__ = ["matrix_sum_rows", "vector_sum", "is_rspecifier", "is_wspecifier",
           "printable_wxfilename", "VectorSumUsageError"]


def is_rspecifier(arg: str) -> bool:
    """Whether Kaldi's ClassifyRspecifier sees a table (not kNoRspecifier)."""
    try:
        classify_rspecifier(arg)
    except UsageError:
        return False
    return True


def is_wspecifier(arg: str) -> bool:
    """Whether Kaldi's ClassifyWspecifier sees a table (not kNoWspecifier)."""
    try:
        classify_wspecifier(arg)
    except UsageError:
        return False
    return True


def printable_wxfilename(wxfilename: str) -> str:
    """Kaldi's PrintableWxfilename: standard output named in words."""
    return "standard output" if wxfilename in ("", "-") else wxfilename


def matrix_sum_rows(matrix_rspecifier: str, vector_wspecifier: str) -> int:
    """matrix-sum-rows: for each matrix, the sum of its rows (added in double,
    written as float) under the same key; returns the exit status."""
    num_done = num_rows = 0
    with TableWriter(vector_wspecifier, VECTOR_HOLDER) as writer, \
            SequentialTableReader(matrix_rspecifier, MATRIX_HOLDER) as reader:
        for key, mat in reader:
            total = np.asarray(mat, dtype=np.float64).sum(axis=0)
            writer.write(key, total.astype(np.float32))
            num_done += 1
            num_rows += mat.shape[0]
    log.log(f"Summed rows {num_done} matrices, {num_rows} rows in total.")
    return 0 if num_done else 1


class VectorSumUsageError(UsageError):
    """The arguments fit none of vector-sum's three usages."""


@dataclass
class _Counts:
    utts: int = 0
    vectors: int = 0
    success: int = 0
    missing: int = 0


def _sum_tables(args: Sequence[str]) -> int:
    """Type one: per key of the first table, the sum over all input tables."""
    first, others, out = args[0], list(args[1:-1]), args[-1]
    counts = _Counts()
    readers = [RandomAccessTableReader(r, VECTOR_HOLDER) for r in others]
    try:
        with TableWriter(out, VECTOR_HOLDER) as writer, \
                SequentialTableReader(first, VECTOR_HOLDER) as reader:
            for key, vec in reader:
                counts.utts += 1
                counts.vectors += 1
                total = np.array(vec, dtype=np.float32)
                for i, other in enumerate(readers):
                    if not other.has_key(key):
                        log.warn(f"No vector found for utterance {key} for system {i + 2}, "
                                 f"rspecifier: {others[i]}")
                        counts.missing += 1
                        continue
                    vec2 = other.value(key)
                    counts.vectors += 1
                    if vec2.shape[0] == total.shape[0]:
                        total += vec2          # float32, as Vector<BaseFloat>::AddVec
                    else:
                        log.warn(f"Dimension mismatch for utterance {key} : {vec2.shape[0]} "
                                 f"for system {i + 2}, rspecifier: {others[i]} vs "
                                 f"{total.shape[0]} primary vector, rspecifier:{first}")
                writer.write(key, total)
                counts.success += 1
    finally:
        for r in readers:
            r.close()
    log.log(f"Processed {counts.utts} utterances: with a total of {counts.vectors} vectors "
            f"across {len(args) - 1} different systems")
    log.log(f"Produced output for {counts.success} utterances; {counts.missing} total missing "
            "vectors")
    ok = counts.success != 0 and counts.missing < counts.success - counts.missing
    return 0 if ok else 1


def _write_vector(wxfilename: str, vec: np.ndarray, binary: bool) -> None:
    w = KaldiWriter(binary)
    w.write_vector(vec)
    write_wxfilename(wxfilename, kaldi_object_bytes(w))


def _sum_table_to_file(rspecifier: str, wxfilename: str, binary: bool, average: bool) -> int:
    """Type two: all vectors of one table added (in double) into one file."""
    total: np.ndarray | None = None
    num_done = num_err = 0
    with SequentialTableReader(rspecifier, VECTOR_HOLDER) as reader:
        for key, vec in reader:
            if vec.shape[0] == 0:
                log.warn(f"Zero vector input for key {key}")
                num_err += 1
                continue
            if total is None:
                total = np.zeros(vec.shape[0], dtype=np.float64)
            if total.shape[0] != vec.shape[0]:
                log.warn(f"Dimension mismatch for key {key}: {vec.shape[0]} vs. "
                         f"{total.shape[0]}")
                num_err += 1
                continue
            total += vec
            num_done += 1
    if total is None:
        total = np.zeros(0, dtype=np.float64)
    if num_done > 0 and average:
        total *= 1.0 / num_done
    _write_vector(wxfilename, total.astype(np.float32), binary)
    log.log(f"Summed {num_done} vectors, {num_err} with errors; wrote sum to "
            f"{printable_wxfilename(wxfilename)}")
    return 0 if num_done > 0 and num_err < num_done else 1


def _sum_files(args: Sequence[str], binary: bool) -> int:
    """Type three: single-vector files added (in float) into one file."""
    if any(is_rspecifier(a) for a in args[:-1]):
        raise UsageError("Wrong usage (type 3): if first and last arguments are not tables, "
                         "the intermediate arguments must not be tables.")
    total = np.zeros(0, dtype=np.float32)
    for rxfilename in args[:-1]:
        vec = open_kaldi_object(rxfilename).read_vector()
        if total.shape[0] < vec.shape[0]:
            total = np.concatenate([total, np.zeros(vec.shape[0] - total.shape[0], np.float32)])
        if vec.shape[0] != total.shape[0]:
            raise FormatError(f"vector of dimension {vec.shape[0]} cannot be added to the sum "
                              f"of dimension {total.shape[0]}", where=rxfilename)
        total += vec
    _write_vector(args[-1], total, binary)
    log.log(f"Summed {len(args) - 1} vectors; wrote sum to {printable_wxfilename(args[-1])}")
    return 0


def vector_sum(args: Sequence[str], binary: bool = True, average: bool = False) -> int:
    """vector-sum: picks the usage from the arguments as Kaldi does and returns
    the exit status; :class:`VectorSumUsageError` if none fits.

    * ``rspecifier1 [rspecifier2 ...] wspecifier``: per key, the sum over the
      tables (``average`` is ignored, as in Kaldi);
    * ``rspecifier wxfilename``: the sum (or with ``average`` the mean) of all
      vectors of the table, as one vector file;
    * ``rxfilename1 ... wxfilename``: the sum of single-vector files.
    """
    n = len(args)
    if n >= 2 and is_wspecifier(args[-1]):
        return _sum_tables(args)
    if n == 2 and is_rspecifier(args[0]):
        return _sum_table_to_file(args[0], args[1], binary, average)
    if n >= 2 and not is_rspecifier(args[0]):
        return _sum_files(args, binary)
    raise VectorSumUsageError(f"wrong number or kind of arguments ({n})")
