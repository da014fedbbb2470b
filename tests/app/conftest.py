"""Fixtures of the core's tests: the demo models' specs (read once per test module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec


@pytest.fixture(scope="module")
def smollm(smollm_path: Path) -> ModelSpec:
    """SmolLM2-135M-Instruct Q4_1's spec."""
    return model_spec(read_model(smollm_path))


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> ModelSpec:
    """Gemma-3 270M Q4_K_M's spec."""
    return model_spec(read_model(gemma_path))
