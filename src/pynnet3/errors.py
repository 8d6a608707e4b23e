"""Typed errors of pynnet3.

Library code raises these; only the command-line layer turns them into a
Kaldi-style ``ERROR (...)`` line and a non-zero exit status.
"""
from __future__ import annotations


class PynnetError(Exception):
    """Base class of every error pynnet3 raises for bad input or bad state."""


class FormatError(PynnetError):
    """A Kaldi file (model, matrix, egs ...) is malformed or truncated.

    ``where`` names the file and, when known, the byte offset or token.
    """

    def __init__(self, message: str, where: str | None = None) -> None:
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class ConfigError(PynnetError):
    """A config line (or option value) is wrong.

    ``source`` is the file name and ``line_number`` the 1-based line number,
    so that the message points at the place to fix.
    """

    def __init__(self, message: str, source: str | None = None,
                 line_number: int | None = None, line: str | None = None) -> None:
        self.source = source
        self.line_number = line_number
        self.line = line
        place = ""
        if source is not None:
            place = source if line_number is None else f"{source}:{line_number}"
        text = f"{place}: {message}" if place else message
        if line is not None:
            text += f" (in line: {line.strip()})"
        super().__init__(text)


class UsageError(PynnetError):
    """Wrong command-line usage (number of arguments, option values)."""


class DeviceError(PynnetError):
    """The compute device asked for cannot be used (Kaldi's ``--use-gpu=yes``
    with no usable GPU)."""


class ComputationCheckError(PynnetError):
    """A compiled NnetComputation is malformed (Kaldi's ComputationChecker).

    ``command_index`` is the offending command when one can be named (else
    None) and ``command_text`` that command as the computation printer shows
    it, so that the message points at the line of the printed computation.
    """

    def __init__(self, message: str, command_index: int | None = None,
                 command_text: str | None = None) -> None:
        self.command_index = command_index
        self.command_text = command_text
        text = message
        if command_index is not None:
            text = f"command c{command_index}: {message}"
            if command_text:
                text += f"\n  {command_text.rstrip()}"
        super().__init__(text)


class NumericalError(PynnetError, ArithmeticError):
    """A numerical procedure broke down during training (e.g. the
    natural-gradient Fisher estimate or the orthonormal constraint diverged);
    Kaldi stops with KALDI_ERR / KALDI_ASSERT in these places."""
