"""A one-line progress display on stderr, shown only when stderr is a terminal
(so logs redirected to files, as Kaldi recipes do, never contain it)."""
from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    """``update(n)`` after each item; ``close()`` at the end.  Redraws at most
    every ``interval`` seconds; the line ends in ``\\r`` so that a LOG line
    printed meanwhile simply overwrites it."""

    def __init__(self, what: str, unit: str = "egs", stream: TextIO | None = None,
                 interval: float = 0.5, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if enabled is None:
            isatty = getattr(self.stream, "isatty", None)
            enabled = bool(isatty and isatty())
        self.enabled = enabled
        self.what = what
        self.unit = unit
        self.interval = interval
        self.start = time.perf_counter()
        self._last = 0.0
        self.count = 0
        self.units = 0

    def update(self, items: int = 1, units: int = 0) -> None:
        self.count += items
        self.units += units
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < self.interval:
            return
        self._last = now
        elapsed = max(now - self.start, 1e-9)
        text = (f"{self.what}: {self.count} done, {self.units} {self.unit} "
                f"({self.units / elapsed:.0f} {self.unit}/s, {elapsed:.0f} s)")
        self.stream.write("\r\033[K" + text + "\r")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self.enabled = False


def progress_wanted(output_target: str, stream: Any = None) -> bool:
    """A progress display only when stderr is a terminal and the output goes
    to a file (not to stdout or a pipe, whose reader may share the terminal)."""
    stream = stream if stream is not None else sys.stderr
    target = output_target.strip()
    if target in ("", "-") or target.startswith("|"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
