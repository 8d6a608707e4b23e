"""Operation-by-operation checks of a compute backend against the NumPy
reference backend, shared by the CPU tests (test_backends.py) and the CUDA
tests (cuda/test_cuda_backend.py, run under the CUDA simulator).

Each ``case_*`` function takes the backend under test, a random generator
and ``exact`` (True: results must equal the reference's bit for bit; False:
to float rounding, for GPUs where the compiler fuses multiply-adds).  Inputs
go in through ``backend.from_host`` and results come out through
``backend.to_host``, so the same case runs on host and device backends.
Destinations are often views into larger matrices, and the whole base
matrix is compared, so writes outside a view are caught too.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from pynnet3.compile.computation import CompressedMatrixType
from pynnet3.compute.backend import get_backend
from pynnet3.nnet.components.base import new_component_of_type
from pynnet3.nnet.config_line import ConfigLine

F32 = np.float32
REF = get_backend("reference")
ALPHAS = (1.0, 0.5, -3.0)


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(F32)


class Operand:
    """A matrix held twice: a NumPy base for the reference and the backend's
    copy; ``ref`` / ``dev`` are the (possibly view) operands."""

    def __init__(self, backend: Any, rng: np.random.Generator, rows: int, cols: int,
                 as_view: bool, values: np.ndarray | None = None) -> None:
        self.backend = backend
        r0 = c0 = 0
        if as_view:
            r0, c0 = int(rng.integers(0, 3)), int(rng.integers(0, 3))
            self.base = rand(rng, rows + r0 + int(rng.integers(0, 3)),
                             cols + c0 + int(rng.integers(0, 3)))
            self.ref = self.base[r0:r0 + rows, c0:c0 + cols]
        else:
            self.base = rand(rng, rows, cols)
            self.ref = self.base
        if values is not None:
            self.ref[...] = values
        self.dev_base = backend.from_host(self.base)
        self.dev = (backend.view(self.dev_base, r0, rows, c0, cols) if as_view
                    else self.dev_base)

    def check(self, exact: bool, what: str) -> None:
        got = np.asarray(self.backend.to_host(self.dev_base))
        if exact:
            np.testing.assert_array_equal(got, self.base, err_msg=what)
        else:
            np.testing.assert_allclose(got, self.base, rtol=1e-5, atol=1e-6, err_msg=what)


def _indexes(rng: np.random.Generator, n: int, num_src: int) -> np.ndarray:
    if num_src == 0:
        return np.full(n, -1, np.int32)
    idx = rng.integers(0, num_src, n).astype(np.int32)
    idx[rng.random(n) < 0.3] = -1
    return idx


def _shapes(rng: np.random.Generator) -> tuple[int, int, int]:
    """(dst rows, src rows, cols): small, sometimes empty."""
    return int(rng.integers(0, 12)), int(rng.integers(1, 10)), int(rng.integers(1, 9))


# ---------------------------------------------------------------------------
# row operations


def case_copy_add_rows(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    for trial in range(6):
        n, m, cols = _shapes(rng)
        for op in ("copy_rows", "add_rows"):
            alpha = ALPHAS[trial % 3]
            dst = Operand(backend, rng, n, cols, as_view=trial % 2 == 1)
            src = Operand(backend, rng, m, cols, as_view=trial % 4 >= 2)
            idx = _indexes(rng, n, m)
            getattr(REF, op)(dst.ref, src.ref, idx, alpha)
            prepared = backend.prepare_indexes(idx) if trial % 2 else idx
            getattr(backend, op)(dst.dev, src.dev, prepared, alpha)
            dst.check(exact, f"{op} trial {trial}")


def _multi_setup(backend: Any, rng: np.random.Generator, n: int, cols: int,
                 num_arrays: int, with_none: bool, duplicates: bool
                 ) -> tuple[list[Operand], np.ndarray]:
    arrays = [Operand(backend, rng, int(rng.integers(1, 8)), cols, as_view=k % 2 == 0)
              for k in range(num_arrays)]
    pairs = np.full((n, 2), -1, np.int32)
    for r in range(n):
        p = int(rng.integers(0, num_arrays))
        pairs[r] = (p, int(rng.integers(0, arrays[p].ref.shape[0])))
    if with_none and n:
        pairs[rng.random(n) < 0.3] = -1
    if not duplicates:
        # keep only the first use of each (array, row)
        seen: set[tuple[int, int]] = set()
        for r in range(n):
            key = (int(pairs[r, 0]), int(pairs[r, 1]))
            if key[0] >= 0 and key in seen:
                pairs[r] = -1
            seen.add(key)
    return arrays, pairs


def case_rows_multi(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    for trial in range(6):
        n, _, cols = _shapes(rng)
        alpha = ALPHAS[trial % 3]
        arrays, pairs = _multi_setup(backend, rng, n, cols, 1 + trial % 3, trial != 4, True)
        if trial == 5:
            pairs[:] = -1          # every row "none"
        prepared = backend.prepare_indexes(pairs) if trial % 2 else pairs
        for op in ("copy_rows_multi", "add_rows_multi"):
            dst = Operand(backend, rng, n, cols, as_view=trial % 2 == 0)
            getattr(REF, op)(dst.ref, [a.ref for a in arrays], pairs, alpha)
            getattr(backend, op)(dst.dev, [a.dev for a in arrays], prepared, alpha)
            dst.check(exact, f"{op} trial {trial}")
            # the sources are only read
            for a in arrays:
                a.check(True, f"{op} source, trial {trial}")


def case_to_rows_multi(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    for trial in range(6):
        n, _, cols = _shapes(rng)
        alpha = ALPHAS[trial % 3]
        num_arrays = 1 + trial % 3
        src = Operand(backend, rng, n, cols, as_view=trial % 2 == 1)
        # copy-to: distinct destinations (Kaldi forbids repeats)
        arrays, pairs = _multi_setup(backend, rng, n, cols, num_arrays, trial != 3, False)
        prepared = backend.prepare_indexes(pairs) if trial % 2 else pairs
        REF.copy_to_rows_multi(src.ref, [a.ref for a in arrays], pairs)
        backend.copy_to_rows_multi(src.dev, [a.dev for a in arrays], prepared)
        for k, a in enumerate(arrays):
            a.check(exact, f"copy_to_rows_multi array {k} trial {trial}")
        # add-to: repeated destinations allowed (the reference adds each)
        arrays, pairs = _multi_setup(backend, rng, n, cols, num_arrays, True, trial % 2 == 0)
        if trial == 0 and n >= 2:
            pairs[:, 0] = 0
            pairs[:, 1] = 0            # every row into one destination row
        prepared = backend.prepare_indexes(pairs) if trial % 2 else pairs
        REF.add_to_rows_multi(src.ref, [a.ref for a in arrays], pairs, alpha)
        backend.add_to_rows_multi(src.dev, [a.dev for a in arrays], prepared, alpha)
        for k, a in enumerate(arrays):
            a.check(exact, f"add_to_rows_multi array {k} trial {trial}")
        src.check(True, f"to-rows source, trial {trial}")


def case_add_row_ranges(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    for trial in range(6):
        n, m, cols = _shapes(rng)
        alpha = ALPHAS[trial % 3]
        begin = rng.integers(0, m, n)
        end = np.minimum(begin + rng.integers(1, m + 1, n), m)
        ranges = np.stack([begin, end], axis=1).astype(np.int32)
        if n:
            ranges[rng.random(n) < 0.25] = -1          # Kaldi's empty range
            ranges[0] = (1, 1) if trial == 2 else ranges[0]
        dst = Operand(backend, rng, n, cols, as_view=trial % 2 == 1)
        src = Operand(backend, rng, m, cols, as_view=trial % 2 == 0)
        REF.add_row_ranges(dst.ref, src.ref, ranges, alpha)
        prepared = backend.prepare_indexes(ranges) if trial % 2 else ranges
        backend.add_row_ranges(dst.dev, src.dev, prepared, alpha)
        # Row sums are taken in double both ways, but not in the same order.
        got = np.asarray(backend.to_host(dst.dev_base))
        np.testing.assert_allclose(got, dst.base, rtol=1e-6, atol=1e-6,
                                   err_msg=f"add_row_ranges trial {trial}")


# ---------------------------------------------------------------------------
# whole-matrix operations


def case_matrix_ops(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    for trial in range(6):
        n, _, cols = _shapes(rng)
        alpha = ALPHAS[trial % 3]
        view = trial % 2 == 1
        dst = Operand(backend, rng, n, cols, as_view=view)
        src = Operand(backend, rng, n, cols, as_view=not view)
        REF.set_const(dst.ref, 0.25 * trial - 1)
        backend.set_const(dst.dev, 0.25 * trial - 1)
        dst.check(True, f"set_const trial {trial}")
        REF.add(dst.ref, src.ref, alpha)
        backend.add(dst.dev, src.dev, alpha)
        dst.check(exact, f"add trial {trial}")
        REF.scale(dst.ref, alpha)
        backend.scale(dst.dev, alpha)
        dst.check(exact, f"scale trial {trial}")
        REF.copy(dst.ref, src.ref, alpha)
        backend.copy(dst.dev, src.dev, alpha)
        dst.check(exact, f"copy trial {trial}")
        # copying a matrix onto itself with alpha != 1 is how Kaldi scales
        REF.copy(dst.ref, dst.ref, alpha)
        backend.copy(dst.dev, dst.dev, alpha)
        dst.check(exact, f"copy to self trial {trial}")


def case_compression(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    for kind, range_ in ((CompressedMatrixType.INT8, 2.0), (CompressedMatrixType.UINT8, 1.0),
                         (CompressedMatrixType.INT16, 10.0), (CompressedMatrixType.UINT16, 3.5),
                         (CompressedMatrixType.UINT8, 0.0)):
        values = (rng.standard_normal((6, 7)) * 3).astype(F32)
        values[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
        if range_ > 0:   # exact ties of the rounding, and the bounds themselves
            hi = {1: 127, 2: 255, 3: 32767, 4: 65535}[int(kind)]
            scale = F32(F32(range_) / F32(hi))
            values[1, :4] = [F32(2.5) * scale, F32(-3.5) * scale, F32(hi) * scale,
                             F32(hi + 0.5) * scale]
        x = Operand(backend, rng, 6, 7, as_view=kind == CompressedMatrixType.INT16,
                    values=values)
        want = np.zeros_like(values)
        REF.decompress(REF.compress(x.ref, int(kind), range_, True), want)
        out = backend.alloc(6, 7)
        backend.decompress(backend.compress(x.dev, int(kind), range_, True), out)
        np.testing.assert_array_equal(np.asarray(backend.to_host(out)), want,
                                      err_msg=f"{kind.name} range {range_}")


# ---------------------------------------------------------------------------
# component math


def make_component(type_name: str, config: str) -> Any:
    comp = new_component_of_type(type_name)
    comp.init_from_config(ConfigLine(config, "test.config", 1))
    return comp


def case_nonlinearities(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    for type_name in ("SigmoidComponent", "TanhComponent", "RectifiedLinearComponent"):
        comp = make_component(type_name, "dim=7")
        for as_view in (False, True):
            values = rand(rng, 5, 7) * 4
            values[0, :4] = [0.0, -0.0, 30.0, -30.0]
            x = Operand(backend, rng, 5, 7, as_view=as_view, values=values)
            out = Operand(backend, rng, 5, 7, as_view=not as_view)
            REF.propagate(comp, None, x.ref, out.ref)
            backend.propagate(comp, None, x.dev, out.dev)
            # expf may differ by an ulp between NumPy, LLVM and CUDA
            got = np.asarray(backend.to_host(out.dev_base))
            np.testing.assert_allclose(got, out.base, rtol=1e-6, atol=3e-7, err_msg=type_name)
            d = Operand(backend, rng, 5, 7, as_view=as_view)
            in_deriv = Operand(backend, rng, 5, 7, as_view=not as_view)
            REF.backprop(comp, "c", None, x.ref, out.ref, d.ref, None, None, in_deriv.ref)
            backend.backprop(comp, "c", None, x.dev, out.dev, d.dev, None, None, in_deriv.dev)
            got = np.asarray(backend.to_host(in_deriv.dev_base))
            np.testing.assert_allclose(got, in_deriv.base, rtol=1e-6, atol=3e-7,
                                       err_msg=f"{type_name} backprop")
        # in place, as the optimiser arranges for these components
        x = Operand(backend, rng, 4, 7, as_view=False)
        REF.propagate(comp, None, x.ref, x.ref)
        backend.propagate(comp, None, x.dev, x.dev)
        np.testing.assert_allclose(np.asarray(backend.to_host(x.dev)), x.ref, rtol=1e-6,
                                   atol=3e-7, err_msg=f"{type_name} in place")


def case_affine_components(backend: Any, rng: np.random.Generator, exact: bool) -> None:
    """Products of the affine family (device GEMM on CUDA) and a component
    without device math (the host fallback on CUDA)."""
    from pynnet3.nnet.components.base import set_random_seed

    set_random_seed(3)
    comps = [("AffineComponent", "input-dim=6 output-dim=5"),
             ("NaturalGradientAffineComponent", "input-dim=6 output-dim=5"),
             ("LinearComponent", "input-dim=6 output-dim=5"),
             ("FixedScaleComponent", "dim=6 scale=0.5")]
    for type_name, config in comps:
        comp = make_component(type_name, config)
        in_dim, out_dim = comp.input_dim(), comp.output_dim()
        for rows, as_view in ((4, False), (7, True), (0, False)):
            x = Operand(backend, rng, rows, in_dim, as_view=as_view)
            out = Operand(backend, rng, rows, out_dim, as_view=not as_view)
            REF.propagate(comp, None, x.ref, out.ref)
            backend.propagate(comp, None, x.dev, out.dev)
            out.check(False, f"{type_name} propagate")
            d = Operand(backend, rng, rows, out_dim, as_view=as_view)
            in_deriv = Operand(backend, rng, rows, in_dim, as_view=not as_view)
            REF.backprop(comp, "c", None, x.ref, out.ref, d.ref, None, None, in_deriv.ref)
            backend.backprop(comp, "c", None, x.dev, out.dev, d.dev, None, None, in_deriv.dev)
            in_deriv.check(False, f"{type_name} backprop")


CASES: list[Callable[[Any, np.random.Generator, bool], None]] = [
    case_copy_add_rows, case_rows_multi, case_to_rows_multi, case_add_row_ranges,
    case_matrix_ops, case_compression, case_nonlinearities, case_affine_components,
]
