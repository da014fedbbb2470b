"""The quant simulation against llama.cpp's own quantizer, on real and zoo models.

Each model is quantized with ``llama_model_quantize`` (runner/quantize.py, a child
process, allow_requantize, 2 threads); the file is read back and every tensor's type and
byte size must equal app.model.quant.simulate_quant's, the file size within 0.1%. File types
the simulation says need an importance matrix must be refused without one ("this
quantization requires an imatrix!") and, made with one (all ones), match too.

Kept to a few minutes on two cores: every file type on the zoo models that reach the
special rules (experts, MLA, fused QKV, RWKV, SSM, per-layer heads; the MoE and MLA ones
also with an importance matrix) and on SmolLM2 except
the four slowest IQ3/IQ4 types (15-28 s each there; IQ3_XXS and IQ4_XS stay); a
representative subset on Gemma-3 270M. bench/bench_quant.py runs the full matrix
(docs/benchmarks.md, section quant).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import EngineError, EngineTimeoutError, ModelFileNotFoundError
from app.model.quant import FILE_TYPES
from runner.quantize import quantize, quantize_many
from tests.runner.quant_check import Agreement, run_matrix
from tests.zoo import write_model

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ZOO_MODELS = ("qwen3moe", "gpt-oss", "deepseek2", "phi3", "rwkv6", "mamba", "deci")
ZOO_WITH_IMATRIX = ("qwen3moe", "gpt-oss", "deepseek2")
"""Also made with an importance matrix where one is needed (IQ1/IQ2 are slow to make)."""

SMOLLM_SKIPPED = ("IQ4_NL", "IQ3_M", "IQ3_S", "IQ3_XS")
"""The slowest to make on SmolLM2 (15-28 s each on 2 cores); in bench/bench_quant.py."""

GEMMA_SUBSET = ("F16", "Q8_0", "Q6_K", "Q4_K_M", "Q4_0", "Q3_K_M", "Q2_K", "Q1_0", "IQ2_XXS")
"""Float, legacy and k-quant mixtures, a 128-block type and an imatrix refusal."""


def _report(results: list[Agreement]) -> str:
    lines = []
    for a in results:
        if not a.agrees:
            lines.append(
                f"{a.file_type.name} (imatrix {a.imatrix}): error={a.error!r} "
                f"file error={a.file_error:.5%} mismatches={list(a.mismatches[:5])}"
            )
    return "\n".join(lines)


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_every_file_type(name: str, zoo_dir: Path, tmp_path: Path) -> None:
    path = write_model(name, zoo_dir)
    results = run_matrix(path, tmp_path, with_imatrix=name in ZOO_WITH_IMATRIX, batch=100)
    assert len(results) >= len(FILE_TYPES)
    assert all(a.agrees for a in results), _report(results)
    assert any(a.error is None for a in results)


def test_smollm_file_types(smollm_path: Path, tmp_path: Path) -> None:
    quants = [ft for ft in FILE_TYPES if ft.name not in SMOLLM_SKIPPED]
    results = run_matrix(smollm_path, tmp_path, quants, with_imatrix=False)
    assert all(a.agrees for a in results), _report(results)
    refused = {a.file_type.name for a in results if a.error is not None}
    # 576 columns: every IQ1/IQ2 mixture keeps Q2_K/IQ* tensors needing an imatrix
    # somewhere, and Q1_0 has no fallback type
    assert refused == {"Q2_K_S", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S", "Q1_0"}
    exact = [a for a in results if a.error is None]
    assert all(a.file_error == 0 for a in exact)  # SmolLM2 has both keys llama.cpp sets


def test_smollm_with_imatrix(smollm_path: Path, tmp_path: Path) -> None:
    results = run_matrix(smollm_path, tmp_path, ["Q2_K_S"])
    assert [(a.imatrix, a.error is None) for a in results] == [("none", False), ("ones", True)]
    assert all(a.agrees for a in results), _report(results)


def test_gemma_subset(gemma_path: Path, tmp_path: Path) -> None:
    results = run_matrix(gemma_path, tmp_path, GEMMA_SUBSET, with_imatrix=False)
    assert all(a.agrees for a in results), _report(results)
    assert {a.file_type.name for a in results if a.error is not None} == {"IQ2_XXS"}


def test_refusal_and_missing_input(smollm_path: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="requires an imatrix"):
        quantize(smollm_path, tmp_path / "out.gguf", "IQ1_S")
    (outcome,) = quantize_many(smollm_path, [(tmp_path / "q.gguf", "Q1_0", "none")])
    assert outcome.error is not None
    assert "no tensor type fallback" in outcome.error
    with pytest.raises(ModelFileNotFoundError, match="no such model file"):
        quantize(tmp_path / "missing.gguf", tmp_path / "out.gguf", "Q4_0")


def test_a_stuck_quantizer_is_killed(smollm_path: Path, tmp_path: Path) -> None:
    """The quantizer runs in a child: past its time limit it is killed, the caller lives."""
    with pytest.raises(EngineTimeoutError, match="while quantizing to file type 25"):
        quantize(smollm_path, tmp_path / "slow.gguf", "IQ4_NL", timeout_s=2.0)
