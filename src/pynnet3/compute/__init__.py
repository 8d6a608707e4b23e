"""Running computations: the executor (``computer``) and its backends."""
from __future__ import annotations

from .computer import NnetComputeOptions, NnetComputer

__all__ = ["NnetComputeOptions", "NnetComputer"]
