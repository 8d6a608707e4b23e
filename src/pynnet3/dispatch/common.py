"""What run.pl, queue.pl and slurm.pl share: the ``JOB=1:N`` range, the
quoting of the command line and the log file's header and footer lines."""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass

__all__ = ["JobRange", "parse_job_range", "quote_command", "kaldi_date", "warn"]

# Kaldi's patterns: NAME=START:END, NAME=N, and anything that looks like a
# mistyped range (warned about, then taken as the log file).
_RANGE = re.compile(r"^([A-Za-z_]\w*)=(\d+):(\d+)$")
_SINGLE = re.compile(r"^([A-Za-z_]\w*)=(\d+)$")
_SUSPICIOUS = re.compile(r".+=.*:.*$")


@dataclass
class JobRange:
    name: str | None = None   # the identifier substituted (usually JOB); None: a single job
    start: int = 1
    end: int = 1

    @property
    def count(self) -> int:
        return self.end - self.start + 1

    def ids(self) -> range:
        return range(self.start, self.end + 1)

    def substitute(self, text: str, job: int | str) -> str:
        """Every occurrence of the name replaced, as Kaldi's ``s/$jobname/$jobid/g``."""
        return text.replace(self.name, str(job)) if self.name else text


class RangeError(ValueError):
    """An invalid JOB=a:b range (Kaldi's scripts die on it)."""


def parse_job_range(arg: str, prog: str) -> JobRange | None:
    """The range that ``arg`` names, or None when it is no range (a warning is
    printed when it looks like a mistyped one, as Kaldi does)."""
    m = _RANGE.match(arg)
    if m:
        start, end = int(m.group(2)), int(m.group(3))
        if start > end:
            raise RangeError(f"{prog}: invalid job range {arg}")
        if start <= 0:
            raise RangeError(f"{prog}: invalid job range {arg}, start must be strictly positive "
                             "(this is required for GridEngine compatibility).")
        return JobRange(m.group(1), start, end)
    m = _SINGLE.match(arg)
    if m:
        return JobRange(m.group(1), int(m.group(2)), int(m.group(2)))
    if _SUSPICIOUS.match(arg):
        warn(f"{prog}: Warning: suspicious first argument to {prog}: {arg}")
    return None


def quote_command(args: list[str]) -> str:
    """The command line as Kaldi's scripts build it for bash: a word without
    whitespace as it is (so ``|``, ``>`` and ``\\&`` stay shell syntax), a word
    with whitespace in double quotes, or in single quotes when it holds a
    double quote.  Each word is followed by a space."""
    out = []
    for x in args:
        if re.fullmatch(r"\S+", x):
            out.append(x + " ")
        elif '"' in x:
            out.append(f"'{x}' ")
        else:
            out.append(f'"{x}" ')
    return "".join(out)


def kaldi_date(t: float | None = None) -> str:
    """The output of ``date`` in the C locale, e.g. ``Tue Nov 26 10:03:04 UTC 2024``."""
    return time.strftime("%a %b %e %H:%M:%S %Z %Y", time.localtime(t))


def warn(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
