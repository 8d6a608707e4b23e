"""Helpers shared by the optimizer tests."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import pytest

from pynnet3.optimize import pipeline


def replace_pass(monkeypatch: pytest.MonkeyPatch, name: str,
                 function: Callable[..., Any]) -> None:
    """Run ``function`` in place of the pass ``name`` for the rest of the test."""
    assert any(p.name == name for p in pipeline.PASSES), name
    monkeypatch.setattr(pipeline, "PASSES", tuple(
        dataclasses.replace(p, function=function) if p.name == name else p
        for p in pipeline.PASSES))
