"""Objective functions at the output nodes, and frame accuracy
(Kaldi's ComputeObjectiveFunction in nnet-training.cc and ComputeAccuracy in
nnet-diagnostics.cc).

Two objective types exist (``objective=`` of an output-node line):

* ``linear``: objf = sum of supervision .* output.  After a LogSoftmax layer
  this is the cross-entropy's negative against the (possibly soft, possibly
  weighted) targets.  The total weight is the sum of the supervision values,
  so a frame that nnet3-get-egs gave weight 0.5 (shared by two chunks)
  counts half.  The derivative is the supervision itself.
* ``quadratic``: objf = -0.5 ||supervision - output||^2.  The total weight is
  the number of rows; the derivative is ``supervision - output``.

The totals are float32, as Kaldi returns them in BaseFloat; the callers add
them up in double.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import PynnetError
from ..nnet.nnet import ObjectiveType
from ..io.general_matrix import GeneralMatrix, MatrixType, SparseMatrix

F32 = np.float32

__all__ = ["ObjectiveResult", "compute_objective_function", "compute_objective",
           "compute_accuracy", "supervision_row_max"]


@dataclass
class ObjectiveResult:
    tot_weight: float
    tot_objf: float
    deriv: np.ndarray | None       # d objf / d output (float32), if asked for


def _check_dims(output: np.ndarray, supervision: GeneralMatrix, output_name: str) -> None:
    if output.shape[1] != supervision.num_cols:
        raise PynnetError(f"Nnet versus example output dimension (num-classes) mismatch for "
                          f"'{output_name}': {output.shape[1]} (nnet) vs. "
                          f"{supervision.num_cols} (egs)")
    if output.shape[0] != supervision.num_rows:
        raise PynnetError(f"Nnet versus example output rows mismatch for '{output_name}': "
                          f"{output.shape[0]} (nnet) vs. {supervision.num_rows} (egs)")


def _sparse_row_ids(smat: SparseMatrix) -> np.ndarray:
    return np.repeat(np.arange(smat.num_rows), np.diff(smat.indptr))


def compute_objective(supervision: GeneralMatrix, objective_type: ObjectiveType,
                      output: np.ndarray, output_name: str = "output",
                      supply_deriv: bool = True) -> ObjectiveResult:
    """The objective of ``output`` (the network's output matrix, rows in the
    request's order) against ``supervision``; with ``supply_deriv`` also the
    derivative to hand back to the computer."""
    output = np.asarray(output, dtype=F32)
    _check_dims(output, supervision, output_name)
    if objective_type is ObjectiveType.LINEAR:
        value = supervision.value
        if supervision.type is MatrixType.SPARSE:
            assert isinstance(value, SparseMatrix)
            rows = _sparse_row_ids(value)
            vals = value.values.astype(np.float64)
            tot_weight = F32(vals.sum())
            tot_objf = F32(np.dot(output[rows, value.indices].astype(np.float64), vals))
            deriv = value.to_matrix() if supply_deriv else None
        else:
            post = supervision.to_matrix()
            tot_weight = F32(post.sum(dtype=np.float64))
            tot_objf = F32(np.vdot(output.astype(np.float64), post.astype(np.float64)))
            deriv = np.array(post, dtype=F32) if supply_deriv else None
        return ObjectiveResult(float(tot_weight), float(tot_objf), deriv)
    if objective_type is ObjectiveType.QUADRATIC:
        diff = supervision.to_matrix().astype(F32) - output       # supervision - output
        tot_weight = float(diff.shape[0])
        d64 = diff.astype(np.float64)
        tot_objf = F32(-0.5 * np.vdot(d64, d64))
        return ObjectiveResult(tot_weight, float(tot_objf), diff if supply_deriv else None)
    raise PynnetError(f"Objective function type {objective_type} not handled.")


def compute_objective_function(supervision: GeneralMatrix, objective_type: ObjectiveType,
                               output_name: str, supply_deriv: bool,
                               computer) -> tuple[float, float]:
    """Kaldi's ComputeObjectiveFunction: reads output ``output_name`` from
    ``computer`` (an NnetComputer after its forward pass), and with
    ``supply_deriv`` gives it the derivative.  Returns (tot_weight, tot_objf)."""
    output = computer.get_output(output_name)
    res = compute_objective(supervision, objective_type, output, output_name, supply_deriv)
    if supply_deriv:
        # (res.deriv is a new array made for this: handed over, not copied)
        computer.accept_input(output_name, res.deriv, take=True)
    return res.tot_weight, res.tot_objf


def supervision_row_max(supervision: GeneralMatrix) -> tuple[np.ndarray, np.ndarray]:
    """(row sums, index of each row's maximum) of the supervision, as Kaldi's
    ComputeAccuracy finds them: the first maximum of each row; for a sparse
    row, the first maximum of its stored elements, unless they are all
    negative and the row has unstored zeros (then the first unstored column)."""
    value = supervision.value
    if supervision.type is not MatrixType.SPARSE:
        mat = supervision.to_matrix()
        # VectorBase::Sum is a float BLAS sum; double then float is close enough
        # (these are only weights of an accuracy).
        return mat.sum(axis=1, dtype=np.float64).astype(F32), np.argmax(mat, axis=1)
    assert isinstance(value, SparseMatrix)
    n = value.num_rows
    counts = np.diff(value.indptr)
    rows = _sparse_row_ids(value)
    sums = np.zeros(n, dtype=np.float64)
    np.add.at(sums, rows, value.values.astype(np.float64))
    best = np.zeros(n, dtype=np.int64)
    if value.values.size:
        # Order the elements by (row, -value, position) and take each row's first.
        order = np.lexsort((np.arange(rows.size), -value.values, rows))
        first = np.searchsorted(rows[order], np.arange(n))
        has = counts > 0
        best[has] = value.indices[order[first[has]]]
        max_val = np.full(n, -np.inf)
        max_val[has] = value.values[order[first[has]]]
    else:
        max_val = np.full(n, -np.inf)
    odd = np.nonzero((max_val < 0) & (counts < value.num_cols))[0]
    for r in odd.tolist():
        stored = set(value.indices[value.indptr[r]:value.indptr[r + 1]].tolist())
        best[r] = next(c for c in range(value.num_cols) if c not in stored)
    return sums.astype(F32), best


def compute_accuracy(supervision: GeneralMatrix, nnet_output: np.ndarray,
                     per_dim: bool = False) -> tuple[float, float, np.ndarray | None,
                                                     np.ndarray | None]:
    """Kaldi's ComputeAccuracy: (tot_weight, tot_accuracy, weight per class,
    accuracy per class); the per-class vectors only with ``per_dim``.

    A row counts with its weight (sum of its supervision) towards the class
    of its largest supervision value, and is correct when the network's
    largest output (first one on ties) is in the same column."""
    nnet_output = np.asarray(nnet_output)
    if (supervision.num_rows, supervision.num_cols) != nnet_output.shape:
        raise PynnetError(f"ComputeAccuracy: supervision is {supervision.num_rows} x "
                          f"{supervision.num_cols} but the output is "
                          f"{nnet_output.shape[0]} x {nnet_output.shape[1]}")
    row_sum, ref = supervision_row_max(supervision)
    hyp = np.argmax(nnet_output, axis=1)
    correct = ref == hyp
    w = row_sum.astype(np.float64)
    tot_weight = float(np.sum(w))
    tot_accuracy = float(np.sum(w[correct]))
    if not per_dim:
        return tot_weight, tot_accuracy, None, None
    dim = supervision.num_cols
    weight_vec = np.zeros(dim, dtype=np.float64)
    acc_vec = np.zeros(dim, dtype=np.float64)
    np.add.at(weight_vec, ref, w)
    np.add.at(acc_vec, ref[correct], w[correct])
    return tot_weight, tot_accuracy, weight_vec.astype(F32), acc_vec.astype(F32)
