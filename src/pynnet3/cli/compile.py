"""nnet3-compile: compile (and cache) the computation for a request."""
from __future__ import annotations

import sys
from typing import Any

import click

from .common import BOOL, bool_option, check_num_args, kaldi_command, run
from .options import compiler_options, compiler_options_from, disk_cache_options

USAGE = """Compile the computation of a ComputationRequest for a raw nnet3 network (or
the network of an .mdl), through the computation cache, and write it.
The request is the usual one for chunks of a simple network (options below;
outputs at t = 0, f, 2f, ... for f = --frame-subsampling-factor, inputs over
the network's context plus the extra context, the ivector at t = 0), or is read
from --request (Kaldi's printed, text or binary ComputationRequest format).
<computation-out> is a Kaldi wxfilename ('-' is stdout); leave it out to only
--print the computation or fill the cache.  Read a computation back with
'nnet3-info <nnet> <computation>'.

\b
Usage:  nnet3-compile [options] <nnet-in> [<computation-out>]
e.g.:
 nnet3-compile --num-sequences=64 --frames-per-chunk=150 --need-model-derivative 0.raw c.cmp
 nnet3-compile --print --request=request.txt final.raw"""


@kaldi_command(USAGE)
@click.option("--num-sequences", type=int, default=1, show_default=True,
              help="Number of sequences (n = 0 .. num-sequences-1) in the request.")
@click.option("--frames-per-chunk", type=int, default=50, show_default=True,
              help="Number of output frames per sequence.")
@click.option("--extra-left-context", type=int, default=0, show_default=True,
              help="Input frames on the left beyond the network's left context.")
@click.option("--extra-right-context", type=int, default=0, show_default=True,
              help="Input frames on the right beyond the network's right context.")
@click.option("--frame-subsampling-factor", type=int, default=1, show_default=True,
              help="Output frames are t = 0, f, 2f, ... for this f.")
@bool_option("--need-model-derivative", False, "Request the model derivative (training).")
@bool_option("--need-input-derivative", False, "Request derivatives w.r.t. the inputs.")
@click.option("--outputs", default="output", show_default=True,
              help="Comma-separated output nodes to request.")
@bool_option("--ivector", True, "Add an ivector input at t=0 per sequence when the network "
             "has an 'ivector' input node.")
@bool_option("--store-component-stats", False, "Set store-component-stats in the request.")
@click.option("--request", "request_file", default="",
              help="Read the request from this file (Kaldi's printed, text or binary format) "
              "instead of building it from the options above.")
@bool_option("--optimize", True, "Optimize the computation (Kaldi's default optimization "
             "options; false runs only the passes Kaldi always runs).")
@compiler_options(names=("use_shortcut", "output_debug_info", "cache_capacity"), help={
    "use_shortcut": "If true, use the 'shortcut' in compilation: compile a 2-sequence version "
    "of the request and expand it.",
    "cache_capacity": "Number of computations cached in memory."})
@disk_cache_options(note="")
@click.option("--print", "print_computation", type=BOOL, default=False, show_default=True,
              help="Write the computation in Kaldi's printed format to stdout.")
@click.option("--plot-memory", "plot_memory", default="",
              help="(pynnet3) Draw the matrix memory allocated after each command of the "
              "computation (peak marked, backward pass shaded) to this file; .png, .svg or "
              ".pdf by its extension.")
@click.argument("args", nargs=-1)
def command(num_sequences: int, frames_per_chunk: int, extra_left_context: int,
            extra_right_context: int, frame_subsampling_factor: int,
            need_model_derivative: bool, need_input_derivative: bool, outputs: str,
            ivector: bool, store_component_stats: bool, request_file: str, optimize: bool,
            cache_dir: str, use_disk_cache: bool, print_computation: bool, plot_memory: str,
            args: tuple[str, ...], **kw: Any) -> None:
    check_num_args(args, (1, 2))
    if len(args) == 2 and args[1].strip() == "-" and print_computation:
        raise click.UsageError("--print and <computation-out> '-' would both write to stdout")
    from .. import log
    from ..cache import CachingCompiler, default_optimize_options
    from ..compile.computation_io import computation_to_bytes
    from ..compile.request_io import build_request, read_request_file
    from ..io.kaldi_io import write_wxfilename
    from ..compile.model_io import read_nnet

    nnet = read_nnet(args[0])
    if request_file:
        request = read_request_file(request_file)
    else:
        names = [o for o in outputs.split(",") if o]
        request = build_request(
            nnet, num_sequences, frames_per_chunk, extra_left_context, extra_right_context,
            frame_subsampling_factor, need_model_derivative, need_input_derivative, names,
            None if ivector else False, store_component_stats)
    optimize_options = default_optimize_options()
    if not optimize:
        import dataclasses

        optimize_options = dataclasses.replace(optimize_options, optimize=False)
    compiler_config = compiler_options_from(kw)
    compiler = CachingCompiler(nnet, compiler_config, optimize_options,
                               cache_dir=cache_dir or None, use_disk=use_disk_cache)
    computation = compiler.compile(request)
    if optimize:
        before = unoptimized_figures(nnet, request, compiler_config.use_shortcut)
        log.log(f"Before optimization: {before}")
        log.log(f"After optimization: {computation_figures(computation)}")
    if print_computation:
        sys.stdout.write(computation.print(nnet.component_names, nnet.node_names))
        sys.stdout.flush()
    if len(args) == 2:
        write_wxfilename(args[1], computation_to_bytes(computation))
    if plot_memory:
        _plot_memory(computation, plot_memory, args[0])
    log.log(compiler.timing_summary())
    log.log(f"Computation has {len(computation.commands)} commands, "
            f"{len(computation.matrices)} matrices" +
            (f"; wrote it to {args[1]}" if len(args) == 2 else ""))


def _plot_memory(computation, path: str, source: str) -> None:
    from .. import log
    from ..optimize.memory_profile import memory_profile
    from .pictures import draw_memory_profile

    profile = memory_profile(computation)
    what = "training" if computation.need_model_derivative else "computation"
    draw_memory_profile(profile, path, title=f"{source}: matrix memory over the {what} "
                        f"({profile.num_commands} commands, {len(computation.matrices) - 1} "
                        "matrices)")
    log.log(f"Wrote the memory profile to {path}: peak {profile.peak} bytes after "
            f"command c{profile.peak_index}" + (
                f", backward pass from c{profile.backward_start}"
                if profile.backward_start >= 0 else ""))


def computation_figures(computation) -> str:
    return (f"{len(computation.commands)} commands, {len(computation.matrices)} matrices, "
            f"matrix-elements-peak {computation.matrix_elements_peak()}")


def unoptimized_figures(nnet, request, use_shortcut: bool) -> str:
    """The same request compiled without optimization (through the shortcut
    when allowed, so that it stays cheap), summarised for comparison."""
    from ..compile.compiler import Compiler, CompilerOptions
    from ..compile.shortcut import compile_via_shortcut

    def compile_fn(req):
        return Compiler([req], nnet).create_computation(CompilerOptions())

    computation = compile_via_shortcut(compile_fn, nnet, request) if use_shortcut else None
    if computation is None:
        computation = compile_fn(request)
    return computation_figures(computation)


def main() -> int:
    return run(command, "nnet3-compile")
