"""Projectors against the pinned llama.cpp's mtmd loader (tools/mtmd/clip.cpp).

tests/runner/tiny_projector.py writes Gemma 3 projectors with GGUFWriter; the engine loads
each one beside the Gemma 3 270M demo model (``mtmd_init_from_file``, CPU, in a child
process) and logs its ``model size`` and warm-up ``compute buffer size`` in MiB with two
decimals. :func:`app.model.projector.read_projector` must agree: the weights exactly as
printed, the compute buffer within 3 % or 0.02 MiB (the engine's rounding on the tiny ones).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.model.projector import read_projector
from tests.runner.tiny_projector import write_tiny_projector

pytestmark = pytest.mark.engine

MIB = 1024 * 1024

_LOAD = r"""
import sys
import llama_cpp as L
import llama_cpp.mtmd_cpp as M
L.llama_backend_init()
model = L.llama_model_load_from_file(sys.argv[2].encode(), L.llama_model_default_params())
assert model, "text model did not load"
params = M.mtmd_context_params_default()
params.use_gpu = False
ctx = M.mtmd_init_from_file(sys.argv[1].encode(), model, params)
assert ctx, "mtmd refused the projector"
M.mtmd_free(ctx)
L.llama_model_free(model)
print("MTMD-OK", flush=True)
"""

CASES = [
    # image size, patch, ViT width, FFN, pooling
    (64, 16, 64, 128, 2),
    (224, 14, 64, 256, 4),
    (448, 14, 128, 512, 4),
    (448, 16, 256, 1024, 4),
    (896, 14, 64, 128, 4),
]


@pytest.mark.parametrize(("size", "patch", "n_embd", "n_ff", "merge"), CASES)
def test_projector_weights_and_compute_match_the_engine(
    tmp_path: Path, gemma_path: Path, size: int, patch: int, n_embd: int, n_ff: int, merge: int
) -> None:
    path = write_tiny_projector(
        tmp_path / "mmproj-tiny.gguf",
        n_embd_text=640,  # Gemma 3 270M's n_embd: mtmd checks the projection width
        image_size=size,
        patch_size=patch,
        n_embd=n_embd,
        n_ff=n_ff,
        merge=merge,
    )
    out = subprocess.run(
        [sys.executable, "-c", _LOAD, str(path), str(gemma_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    log = out.stdout + out.stderr
    assert "MTMD-OK" in out.stdout, log[-3000:]
    weights = float(re.findall(r"model size:\s+([\d.]+) MiB", log)[-1])
    compute = float(re.findall(r"CPU compute buffer size =\s+([\d.]+) MiB", log)[-1])
    ours = read_projector(path)
    assert f"{ours.weights_bytes / MIB:.2f}" == f"{weights:.2f}"
    assert abs(ours.compute_bytes / MIB - compute) <= max(0.03 * compute, 0.02), (
        f"compute {ours.compute_bytes / MIB:.2f} MiB vs the engine's {compute:.2f} MiB"
    )
