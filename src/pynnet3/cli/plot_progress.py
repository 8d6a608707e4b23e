"""nnet3-plot-progress: draw a training run's objective and accuracy per iteration."""
from __future__ import annotations

import click

from .common import check_num_args, kaldi_command, run

USAGE = """Draw the progress of an nnet3 training run from its logs: the objective
(log-likelihood per frame) and the accuracy per iteration, for the training
and validation diagnostics (<exp-dir>/log/compute_prob_{train,valid}.<iter>.log,
as nnet3-compute-prob writes them) and the average objective of the training
jobs (<exp-dir>/log/train.<iter>.<job>.log).  Missing logs are skipped.
The picture's format follows the extension of <picture-out> (.png, .svg, .pdf).
(pynnet3; Kaldi's steps/nnet3/report/generate_plots.py does this for a recipe.)

\b
Usage:  nnet3-plot-progress [options] <exp-dir> <picture-out>
e.g.:
 nnet3-plot-progress exp/tdnn exp/tdnn/progress.png
See also: nnet3-show-progress, nnet3-compute-prob"""


@kaldi_command(USAGE)
@click.option("--output", "output_name", default="output", show_default=True,
              help="Name of the output node whose objective and accuracy are plotted.")
@click.argument("args", nargs=-1)
def command(output_name: str, args: tuple[str, ...]) -> None:
    check_num_args(args, (2,))
    from .. import log
    from ..train.progress_logs import read_training_progress
    from .pictures import draw_training_progress

    progress = read_training_progress(args[0], output_name)
    if progress.is_empty():
        log.warn(f"no training or diagnostic logs for output '{output_name}' under "
                 f"{args[0]}/log; nothing to plot")
        raise click.exceptions.Exit(1)
    draw_training_progress(progress, args[1], title=f"{args[0]}: training progress "
                           f"('{output_name}')")
    v = progress.valid_objf
    last = (f"; last valid log-likelihood {v.values[-1]:g} (iteration {v.iters[-1]})"
            if v.iters else "")
    log.log(f"Read {progress.num_logs} logs, wrote {args[1]}{last}")


def main() -> int:
    return run(command, "nnet3-plot-progress")
