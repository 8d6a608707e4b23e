"""nnet3-info: print a summary of a raw nnet3 network (or the Nnet of an .mdl),
or of a computation written by nnet3-compile."""
from __future__ import annotations

import sys

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Print some text information about 'raw' nnet3 neural network, to
standard output.  Given a computation written by nnet3-compile, print its
summary (counts of commands, matrices, elements); given a network and a
computation, print the computation in Kaldi's format followed by the summary.

\b
Usage:  nnet3-info [options] <raw-nnet>
        nnet3-info [options] [<raw-nnet>] <computation>
e.g.:
 nnet3-info 0.raw
 nnet3-info 0.raw train.cmp
 nnet3-info --graph=net.png final.mdl
See also: nnet3-am-info, nnet3-compile"""


@kaldi_command(USAGE)
@click.option("--graph", "graph", default="",
              help="(pynnet3) Also draw the network's node graph (input, component and "
              "output nodes with their dims, Descriptors on the edges) to this file; "
              ".png, .svg or .pdf by its extension.")
@click.argument("args", nargs=-1)
def command(graph: str, args: tuple[str, ...]) -> None:
    check_num_args(args, (1, 2))
    from ..compile.computation_io import computation_from_bytes, is_computation_file
    from ..compile.graph.context import nnet_info
    from ..compile.model_io import nnet_from_bytes
    from ..errors import UsageError
    from ..io.kaldi_io import read_rxfilename

    data = read_rxfilename(args[-1])
    if not is_computation_file(data):
        if len(args) == 2:
            raise UsageError(f"{args[1]} is not a computation written by nnet3-compile")
        nnet = nnet_from_bytes(data, args[0])
        sys.stdout.write(nnet_info(nnet))
        sys.stdout.flush()
        if graph:
            _draw_graph(nnet, graph, args[0])
        return
    computation = computation_from_bytes(data, args[-1])
    if graph and len(args) == 1:
        raise UsageError("--graph needs the network: nnet3-info --graph=<file> <raw-nnet> "
                         "[<computation>]")
    if len(args) == 2:
        nnet = nnet_from_bytes(read_rxfilename(args[0]), args[0])
        if graph:
            _draw_graph(nnet, graph, args[0])
        _check_fits(computation, nnet, args)
        sys.stdout.write(computation.print(nnet.component_names, nnet.node_names))
    sys.stdout.write(computation.summary())
    sys.stdout.flush()


def _draw_graph(nnet, path: str, source: str) -> None:
    from .. import log
    from ..nnet.graph_layout import layout_nnet_graph
    from .pictures import draw_network_graph

    layout = layout_nnet_graph(nnet)
    draw_network_graph(layout, path, title=f"{source}: {len(layout.nodes)} nodes, "
                       f"{nnet.num_parameters()} parameters")
    log.log(f"Wrote the graph of {len(layout.nodes)} nodes in {layout.num_levels} levels "
            f"to {path}")


def _check_fits(computation, nnet, args: tuple[str, ...]) -> None:
    """The printer indexes the network's names; a mismatched pair fails clearly."""
    from ..compile.computation import CommandType
    from ..errors import UsageError

    for c in computation.commands:
        t = c.command_type
        if t in (CommandType.PROPAGATE, CommandType.BACKPROP,
                 CommandType.BACKPROP_NO_MODEL_UPDATE) and c.arg1 >= nnet.num_components():
            raise UsageError(f"computation {args[1]} refers to component {c.arg1} but "
                             f"{args[0]} has {nnet.num_components()} components")
        if t in (CommandType.ACCEPT_INPUT, CommandType.PROVIDE_OUTPUT) and \
                c.arg2 >= nnet.num_nodes():
            raise UsageError(f"computation {args[1]} refers to node {c.arg2} but "
                             f"{args[0]} has {nnet.num_nodes()} nodes")
    for d in computation.matrix_debug_info:
        if d.cindexes and max(node for node, _ in d.cindexes) >= nnet.num_nodes():
            raise UsageError(f"computation {args[1]} does not belong to network {args[0]}")


def main() -> int:
    return run(command, "nnet3-info")
