"""Comparisons and reference cases shared by the shortcut tests (tests/compile)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from pynnet3.compile.computation import NnetComputation
from pynnet3.compile.n_stride import cindex_array
from tests.helpers import SHARED_REFERENCE


def same_data(a: Any, b: Any) -> bool:
    """Equality of precomputed-index objects, whose fields may be NumPy arrays."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.all(a == b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_data(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_data(a[k], b[k]) for k in a)
    fields = getattr(a, "__dataclass_fields__", None) or (
        a.__dict__ if hasattr(a, "__dict__") else None)
    if fields is not None:
        return all(same_data(getattr(a, f), getattr(b, f)) for f in fields)
    slots = getattr(type(a), "__slots__", None)
    if slots:
        return all(same_data(getattr(a, f), getattr(b, f)) for f in slots)
    return a == b


def assert_same_computation(got: NnetComputation, want: NnetComputation,
                            check_precomputed_data: bool = True) -> None:
    assert [(m.num_rows, m.num_cols, m.stride_type) for m in got.matrices] == \
        [(m.num_rows, m.num_cols, m.stride_type) for m in want.matrices]
    assert got.submatrices == want.submatrices
    assert got.commands == want.commands
    for name in ("indexes", "indexes_multi", "indexes_ranges"):
        g, w = getattr(got, name), getattr(want, name)
        assert len(g) == len(w), name
        for k, (a, b) in enumerate(zip(g, w)):
            assert np.array_equal(a, b), f"{name}[{k}]"
    assert len(got.matrix_debug_info) == len(want.matrix_debug_info)
    for m, (a, b) in enumerate(zip(got.matrix_debug_info, want.matrix_debug_info)):
        assert a.is_deriv == b.is_deriv
        assert np.array_equal(cindex_array(a.cindexes).reshape(-1, 4),
                              cindex_array(b.cindexes).reshape(-1, 4)), f"debug info m{m}"
    assert len(got.component_precomputed_indexes) == len(want.component_precomputed_indexes)
    for a, b in zip(got.component_precomputed_indexes[1:], want.component_precomputed_indexes[1:]):
        assert list(a.input_indexes) == list(b.input_indexes)
        assert list(a.output_indexes) == list(b.output_indexes)
        if check_precomputed_data:
            assert same_data(a.data, b.data), (a.data, b.data)
    assert got.need_model_derivative == want.need_model_derivative


def kaldi_expanded_cases() -> list[Path]:
    """Reference seeds whose request has N > 2 sequences numbered from 0: Kaldi
    compiled those through its shortcut, so computation.txt is an expansion."""
    root = SHARED_REFERENCE / "random"
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        req = d / "request.txt"
        if req.is_file() and "indexes=[(0," in req.read_text() and "(2," in req.read_text():
            out.append(d)
    return out
