"""The kernels file of the speed judge times the models' own (type, row length) shapes."""

from __future__ import annotations

import shutil
from pathlib import Path

from bench.bench_cpu_kernels import TYPES, model_shapes


def test_the_shapes_are_those_each_model_needs_beyond_the_2048_wide_ones(
    smollm_path: Path, tmp_path: Path
) -> None:
    shutil.copy(smollm_path, tmp_path / "smollm.gguf")
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03\x00")  # skipped with a message
    shapes = model_shapes(tmp_path, extra_buffers=True)
    # SmolLM2-135M: 576 wide (hidden) and 1536 wide (ffn_down); never the embedding alone
    assert {cols for _t, cols in shapes} == {576, 1536}
    assert all(t.upper() == t for t, _cols in shapes)
    assert not [s for s in shapes if s[1] == 2048 and s[0] in TYPES]
