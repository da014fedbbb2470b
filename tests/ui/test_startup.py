"""Cold start (bench/bench_startup.py's probe): a fresh process shows the window on the demo
model with the estimate painted, and llama.cpp is never imported in the GUI process."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from bench.bench_startup import measure_once

# The target is 2 s (docs/benchmarks.md); a loaded CI machine gets room, a hang does not.
CEILING_S = 15.0


@pytest.mark.slow
def test_cold_start_paints_the_estimate_without_importing_llama_cpp(gemma_path: Path) -> None:
    startup = measure_once()
    assert startup.model == gemma_path.name
    assert startup.llama_cpp_imported is False
    assert 0 < startup.seconds < CEILING_S
