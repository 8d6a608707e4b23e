"""The body of Kaldi's nnet3-compute-from-egs: the network's output for each eg.

For every eg the request is the eg's own (GetComputationRequest with neither
model derivative nor component statistics: every NnetIo of an input node is
an input, every one of an output node an output, with the eg's Indexes); the
computation is compiled through the caching compiler, run forward on the eg's
inputs, and the output called ``output_name`` is written under the eg's key,
its rows in the order of that output's Indexes.  The network is used as it
is: Kaldi does not put BatchNorm or dropout in test mode here, so a
BatchNormComponent normalises with the statistics of the eg's own rows.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import log
from ..cache import CachingCompiler, CachingCompilerOptions
from ..compute.computer import NnetComputeOptions, NnetComputer
from ..errors import PynnetError
from ..io.table import MATRIX_HOLDER, SequentialTableReader, TableWriter
from .eg_request import accept_example_inputs, get_computation_request
from .egs import EXAMPLE_HOLDER

if TYPE_CHECKING:
    from ..nnet.nnet import Nnet
    from .egs import NnetExample

__all__ = ["NnetComputerFromEg", "compute_from_egs", "expf"]


def expf(mat: np.ndarray) -> np.ndarray:
    """exp of a float32 matrix, rounded as C's ``expf`` (Kaldi's ApplyExp):
    computed in double and rounded once, which is the correctly rounded
    value that glibc's expf returns (NumPy's float32 exp may be 1 ulp off)."""
    return np.exp(mat.astype(np.float64)).astype(np.float32)


class NnetComputerFromEg:
    """Kaldi's NnetComputerFromEg: forward computation of one eg's outputs."""

    def __init__(self, nnet: "Nnet", backend: Any = "reference",
                 compiler_options: CachingCompilerOptions | None = None,
                 optimize_options: Any = None, cache_dir: str | None = None,
                 use_disk_cache: bool = False) -> None:
        self.nnet = nnet
        self.backend = backend
        self.compiler = CachingCompiler(nnet, compiler_options, optimize_options,
                                        cache_dir=cache_dir, use_disk=use_disk_cache)

    def compute(self, eg: "NnetExample", output_name: str = "output") -> np.ndarray:
        """The value of output ``output_name`` for ``eg`` (a float32 NumPy matrix)."""
        request = get_computation_request(self.nnet, eg, need_model_derivative=False,
                                          store_component_stats=False)
        if all(io.name != output_name for io in request.outputs):
            raise PynnetError(f"the example has no output named '{output_name}' (its outputs: "
                              f"{', '.join(io.name for io in request.outputs)})")
        computation = self.compiler.compile(request)
        # Kaldi's CPU build never compresses; debug output from --verbose=3 on, as Kaldi.
        options = NnetComputeOptions(debug=log.verbose_level() >= 3, compress_matrices=False)
        computer = NnetComputer(options, computation, self.nnet, None, backend=self.backend)
        accept_example_inputs(computer, self.nnet, eg)
        computer.run()
        return np.array(computer.get_output(output_name), dtype=np.float32)


def compute_from_egs(nnet: "Nnet", egs_rspecifier: str, matrix_wspecifier: str,
                     apply_exp: bool = False, output_name: str = "output",
                     computer: NnetComputerFromEg | None = None) -> int:
    """nnet3-compute-from-egs: write the output (exp'd with ``apply_exp``) of
    every eg of ``egs_rspecifier`` under its key; returns the number of egs.
    ``computer`` (default: one on the NumPy backend) does the computing."""
    if computer is None:
        computer = NnetComputerFromEg(nnet)
    num_egs = 0
    with TableWriter(matrix_wspecifier, MATRIX_HOLDER) as writer, \
            SequentialTableReader(egs_rspecifier, EXAMPLE_HOLDER) as reader:
        for key, eg in reader:
            output = computer.compute(eg, output_name)
            if output.shape[0] == 0:
                raise PynnetError(f"empty output '{output_name}' for example {key}")
            writer.write(key, expf(output) if apply_exp else output)
            num_egs += 1
    log.log(f"Processed {num_egs} examples.")
    log.log(computer.compiler.timing_summary())
    return num_egs
