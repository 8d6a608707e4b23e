"""nnet3-average: average the parameters of several raw nnet3 networks."""
from __future__ import annotations

import click

from .common import bool_option, check_min_args, kaldi_command, run

USAGE = """This program averages the parameters over a number of 'raw' nnet3 neural nets.

\b
Usage:  nnet3-average [options] <model1> <model2> ... <modelN> <model-out>

\b
e.g.:
 nnet3-average 1.1.nnet 1.2.nnet 1.3.nnet 2.nnet"""


@kaldi_command(USAGE)
@bool_option("--binary", True, "Write output in binary mode")
@click.option("--weights", default="", help="Colon-separated list of weights, one for each "
              "input model.  These will be normalized to sum to one.")
@click.option("--num-threads", type=int, default=-1, show_default=True,
              help="Number of threads to read the models (will be set automatically if not "
              "set.  pynnet3 reads them one after the other but sums them in the same groups "
              "as Kaldi's threads, so that the result is the same to the bit).")
@click.argument("args", nargs=-1)
def command(binary: bool, weights: str, num_threads: int, args: tuple[str, ...]) -> None:
    check_min_args(args, 2)
    from .. import log
    from ..compile.model_io import write_nnet
    from ..train.average import average_nnets, get_weights

    inputs = list(args[:-1])
    model_weights = get_weights(weights, len(inputs))
    nnet = average_nnets(inputs, model_weights, num_threads)
    write_nnet(args[-1], nnet, binary)
    log.log(f"Averaged parameters of {len(inputs)} neural nets, and wrote to {args[-1]}")


def main() -> int:
    return run(command, "nnet3-average")
