"""nnet3-compute-request: run the computation of one ComputationRequest."""
from __future__ import annotations

from typing import Any

import click

from .common import bool_option, check_num_args, kaldi_command, run
from .options import (compiler_options, compiler_options_from, computation_options,
                      computation_options_from, disk_cache_options, optimization_options,
                      optimize_options_from)

USAGE = """Compile the computation of a ComputationRequest for a raw nnet3 network (through
the computation cache), run it on the given inputs and write its outputs: a pynnet3
tool (Kaldi's unit tests do this with NnetComputer).  The request is in Kaldi's
printed, text or binary format.  The inputs are matrices named in_<node> for each
input of the request (rows in the request's index order), and outderiv_<node> for
each output that has has-deriv=true; written are out_<node> for each output, and
inderiv_<node> for each input that has has-deriv=true.  The network is used as it
is (BatchNorm in training mode uses the statistics of the batch) unless --test-mode.

\b
Usage:  nnet3-compute-request [options] <nnet-in> <request-file> <inputs-rspecifier> <outputs-wspecifier>
 e.g.:  nnet3-compute-request final.raw request.txt ark:io.ark ark,t:out.ark"""


@kaldi_command(USAGE)
@optimization_options
@bool_option("--test-mode", False, "Set batch-norm and dropout components to test mode "
             "before computing (as nnet3-compute does).")
@computation_options
@compiler_options(names=("use_shortcut",), help={
    "use_shortcut": "If true, use the 'shortcut' in compilation."})
@disk_cache_options()
@click.option("--backend", type=click.Choice(["numpy", "numba"]), default="numpy",
              show_default=True, help="Compute with the NumPy (reference) or the Numba CPU "
              "backend.")
@click.option("--write-model", default="", help="Also write the network after the backward "
              "pass updated it (learning rate x gradient, natural gradient where the "
              "components use it), as Kaldi's tests do; needs a model derivative.")
@bool_option("--binary", True, "Write --write-model in binary mode")
@click.argument("args", nargs=-1)
def command(args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (4,))
    import copy

    from .. import log
    from ..cache import CachingCompiler
    from ..compile.request_io import read_request_file
    from ..compute.request_run import compute_request, required_input_names
    from ..errors import PynnetError
    from ..compile.model_io import read_nnet, write_nnet
    from ..io.table import MATRIX_HOLDER, SequentialTableReader, TableWriter

    nnet_rxfilename, request_rxfilename, inputs_rspecifier, outputs_wspecifier = args
    optimize_options = optimize_options_from(kw)
    nnet = read_nnet(nnet_rxfilename)
    if kw["test_mode"]:
        from ..nnet.utils import set_batchnorm_test_mode, set_dropout_test_mode

        set_batchnorm_test_mode(True, nnet)
        set_dropout_test_mode(True, nnet)
    request = read_request_file(request_rxfilename)
    wanted = set(required_input_names(request))
    inputs = {}
    with SequentialTableReader(inputs_rspecifier, MATRIX_HOLDER) as reader:
        for key, matrix in reader:
            if key in wanted:
                inputs[key] = matrix
    compiler = CachingCompiler(nnet, compiler_options_from(kw), optimize_options,
                               cache_dir=kw["cache_dir"] or None, use_disk=kw["use_disk_cache"])
    updated = None
    if kw["write_model"]:
        if not request.need_model_derivative:
            raise PynnetError("--write-model needs a request with need-model-derivative")
        updated = copy.deepcopy(nnet)
    results = compute_request(
        nnet, request, inputs, compiler,
        backend="reference" if kw["backend"] == "numpy" else "cpu",
        compute_options=computation_options_from(kw),
        nnet_to_update=updated)
    if updated is not None:
        write_nnet(kw["write_model"], updated, kw["binary"])
    with TableWriter(outputs_wspecifier, MATRIX_HOLDER) as writer:
        for key, matrix in results.items():
            writer.write(key, matrix)
    log.log(compiler.timing_summary())
    log.log(f"Wrote {len(results)} matrices ({', '.join(results)})")


def main() -> int:
    return run(command, "nnet3-compute-request")
