"""Kaldi-style log lines on stderr.

``LOG (nnet3-init[pynnet3-0.1.0]:main():init.py:42) message`` — the same shape
as Kaldi's KALDI_LOG / KALDI_WARN / KALDI_ERR so that recipes and log parsers
that grep for ``LOG (`` / ``WARNING (`` / ``ERROR (`` keep working.
Library code logs through :func:`log` / :func:`warn` / :func:`vlog`; it never
prints otherwise.
"""
from __future__ import annotations

import os
import sys

from . import __version__

_program = "pynnet3"
_verbose = 0


def set_program_name(name: str) -> None:
    global _program
    _program = name


def set_verbose(level: int) -> None:
    global _verbose
    _verbose = level


def verbose_level() -> int:
    return _verbose


def _where(depth: int) -> str:
    frame = sys._getframe(depth + 1)
    return f"{frame.f_code.co_name}():{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _emit(kind: str, message: str, depth: int) -> None:
    sys.stderr.write(f"{kind} ({_program}[pynnet3-{__version__}]:{_where(depth + 1)}) {message}\n")
    sys.stderr.flush()


def log(message: str) -> None:
    _emit("LOG", message, 1)


def warn(message: str) -> None:
    _emit("WARNING", message, 1)


def error(message: str) -> None:
    _emit("ERROR", message, 1)


def vlog(level: int, message: str) -> None:
    if _verbose >= level:
        _emit(f"VLOG[{level}]", message, 1)
