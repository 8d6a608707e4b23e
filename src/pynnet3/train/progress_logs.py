"""Training progress read back from a recipe's logs (``nnet3-plot-progress``).

Kaldi's steps/nnet3 scripts (and egs/mini_train) leave, per iteration ``i``:

- ``log/compute_prob_valid.<i>.log`` and ``log/compute_prob_train.<i>.log``
  (nnet3-compute-prob on held-out subsets), with the lines
  ``Overall log-likelihood for 'output' is -0.979 per frame, over 1188.5 frames.``
  and ``Overall accuracy for 'output' is 0.69 per frame, ...``;
- ``log/train.<i>.<job>.log`` (nnet3-train), with
  ``Overall average objective function for 'output' is -1.47 over 2176 frames.``

Iterations named by a word (``combined``, ``final``) are held separately, after the
numbered ones.  Logs that are missing, unfinished or of another form are
skipped: a plot of a recipe still running is still a plot.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ProgressSeries", "TrainingProgress", "parse_compute_prob_log",
           "parse_train_log", "read_training_progress"]

# nnet3-compute-prob: log-likelihood (linear objective), objective (quadratic);
# the chain binaries say log-probability.
_PROB_RE = re.compile(r"Overall (log-likelihood|log-probability|objective) for '([^']+)' is "
                      r"(\S+) per frame, over (\S+) frames")
_ACC_RE = re.compile(r"Overall accuracy for '([^']+)' is (\S+) per frame")
_TRAIN_RE = re.compile(r"Overall average objective function for '([^']+)' is (\S+) over "
                       r"(\S+) frames")
_PROB_FILE = re.compile(r"^compute_prob_(valid|train)\.([^.]+)\.log$")
_TRAIN_FILE = re.compile(r"^train\.(\d+)\.(\d+)\.log$")


def _float(text: str) -> float | None:
    try:
        return float(text.rstrip(".,"))
    except ValueError:
        return None


def parse_compute_prob_log(text: str, output: str = "output") -> tuple[float | None,
                                                                       float | None]:
    """(objective per frame, accuracy) for ``output`` from nnet3-compute-prob's log."""
    objf = acc = None
    for m in _PROB_RE.finditer(text):
        if m.group(2) == output:
            objf = _float(m.group(3))
    for m in _ACC_RE.finditer(text):
        if m.group(1) == output:
            acc = _float(m.group(2))
    return objf, acc


def parse_train_log(text: str, output: str = "output") -> tuple[float, float] | None:
    """(objective per frame, frames) for ``output`` from nnet3-train's log."""
    for m in _TRAIN_RE.finditer(text):
        if m.group(1) == output:
            objf, frames = _float(m.group(2)), _float(m.group(3))
            if objf is not None and frames is not None:
                return objf, frames
    return None


@dataclass
class ProgressSeries:
    """Values per iteration; ``named`` holds the word-named ones (combined...)."""

    iters: list[int] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    named: dict[str, float] = field(default_factory=dict)

    def add(self, it: str, value: float) -> None:
        if it.isdigit():
            self.iters.append(int(it))
            self.values.append(value)
        else:
            self.named[it] = value

    def sort(self) -> None:
        pairs = sorted(zip(self.iters, self.values))
        self.iters = [i for i, _ in pairs]
        self.values = [v for _, v in pairs]

    def __len__(self) -> int:
        return len(self.iters) + len(self.named)


@dataclass
class TrainingProgress:
    valid_objf: ProgressSeries = field(default_factory=ProgressSeries)
    train_objf: ProgressSeries = field(default_factory=ProgressSeries)
    valid_acc: ProgressSeries = field(default_factory=ProgressSeries)
    train_acc: ProgressSeries = field(default_factory=ProgressSeries)
    # nnet3-train's own average over each iteration's jobs (frame-weighted).
    train_jobs_objf: ProgressSeries = field(default_factory=ProgressSeries)
    num_logs: int = 0

    def is_empty(self) -> bool:
        return not any(len(s) for s in (self.valid_objf, self.train_objf, self.valid_acc,
                                         self.train_acc, self.train_jobs_objf))


def read_training_progress(exp_dir: str | Path, output: str = "output") -> TrainingProgress:
    """Read ``<exp_dir>/log`` (or ``exp_dir`` itself if it holds the logs)."""
    exp = Path(exp_dir)
    log_dir = exp / "log" if (exp / "log").is_dir() else exp
    ans = TrainingProgress()
    jobs: dict[int, list[tuple[float, float]]] = {}
    for path in sorted(log_dir.glob("*.log")):
        m = _PROB_FILE.match(path.name)
        t = _TRAIN_FILE.match(path.name) if m is None else None
        if m is None and t is None:
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        if m is not None:
            objf, acc = parse_compute_prob_log(text, output)
            if objf is None and acc is None:
                continue
            ans.num_logs += 1
            which, it = m.group(1), m.group(2)
            if objf is not None:
                (ans.valid_objf if which == "valid" else ans.train_objf).add(it, objf)
            if acc is not None:
                (ans.valid_acc if which == "valid" else ans.train_acc).add(it, acc)
        else:
            assert t is not None
            got = parse_train_log(text, output)
            if got is not None:
                ans.num_logs += 1
                jobs.setdefault(int(t.group(1)), []).append(got)
    for it, results in sorted(jobs.items()):
        frames = sum(f for _, f in results)
        if frames > 0:
            ans.train_jobs_objf.add(str(it), sum(o * f for o, f in results) / frames)
    for s in (ans.valid_objf, ans.train_objf, ans.valid_acc, ans.train_acc):
        s.sort()
    return ans
