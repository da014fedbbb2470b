"""The Explain walk on the real demo model: every number is the estimator's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.hardware.devices import Hardware
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.planning.explain import (
    ExplainFacts,
    Section,
    explain_facts,
    explain_model,
    fmt_tokens,
)
from app.predict.estimate import MemoryEstimate, estimate
from app.predict.speed import predict_speed
from app.settings import Settings, runner_defaults
from app.units import format_bytes

GIB = 1024**3
HW = Hardware.cpu_only(32 * GIB, cpu_flags=("avx", "avx2", "f16c", "fma"))


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> ModelSpec:
    return model_spec(read_model(str(gemma_path)))


@pytest.fixture(scope="module")
def smollm(smollm_path: Path) -> ModelSpec:
    return model_spec(read_model(str(smollm_path)))


def _settings(spec: ModelSpec, n_ctx: int = 32768) -> Settings:
    return runner_defaults("llama-server").replace(n_ctx=min(n_ctx, spec.n_ctx_train))


def _section(sections: tuple[Section, ...], key: str) -> Section:
    return next(s for s in sections if s.key == key)


def _text(section: Section) -> str:
    return " ".join(section.paragraphs)


def test_facts_equal_the_estimate(gemma: ModelSpec) -> None:
    settings = _settings(gemma)
    est = estimate(gemma, settings, HW)
    f = explain_facts(gemma, settings, est, HW)
    cpu = est.device("CPU")
    assert f.weights_bytes == cpu.weights_bytes
    assert f.kv_bytes == cpu.kv_bytes
    assert f.compute_bytes == cpu.compute_bytes
    assert f.total_bytes == est.total_bytes
    assert f.n_params == gemma.n_params
    assert f.n_layer == gemma.n_layer == 18
    assert f.n_ctx == est.context.n_ctx == 32768
    full, swa = est.caches
    assert f.kv_bytes_full_cache + f.kv_bytes_swa_cache == cpu.kv_bytes
    assert f.kv_bytes_per_token_full * full.cells == full.total_bytes
    assert f.kv_bytes_per_token_swa * swa.cells == swa.total_bytes
    assert (f.n_full_layers, f.n_swa_layers, f.n_swa) == (3, 15, 512)
    flash_off = estimate(gemma, settings.replace(flash_attn="off"), HW)
    assert f.compute_bytes_flash_off == flash_off.device("CPU").compute_bytes
    q8 = estimate(
        gemma, settings.replace(cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on"), HW
    )
    assert f.kv_bytes_q8 == q8.device("CPU").kv_bytes
    speed = predict_speed(gemma, settings, HW, depth=f.depth)
    assert f.decode_tok_per_s == pytest.approx(speed.decode_tok_per_s)
    # no per-token overhead on the CPU: the bound is the prediction
    assert f.bound_tok_per_s == pytest.approx(speed.decode_tok_per_s)


def test_sections_quote_the_models_own_numbers(gemma: ModelSpec) -> None:
    settings = _settings(gemma)
    est = estimate(gemma, settings, HW)
    f = explain_facts(gemma, settings, est, HW)
    sections = explain_model(gemma, settings, est, HW)
    keys = [s.key for s in sections]
    assert keys == ["overview", "tokens", "layers", "weights", "kv", "window", "flash", "speed"]
    assert sections[1].title.startswith("1. ")
    assert sections[-1].title.startswith("7. ")
    weights = _text(_section(sections, "weights"))
    assert "268 million" in weights
    assert "Q4_K_M" in weights
    assert format_bytes(est.device("CPU").weights_bytes, down_to="bytes") in weights
    kv = _text(_section(sections, "kv"))
    assert format_bytes(f.kv_bytes_per_token, down_to="bytes") == "18.0 KiB"
    assert "18.0 KiB" in kv
    assert format_bytes(est.device("CPU").kv_bytes, down_to="bytes") in kv
    assert fmt_tokens(32768) in kv
    window = _text(_section(sections, "window"))
    assert "15 of the 18 layers" in window
    assert fmt_tokens(512) in window
    flash = _text(_section(sections, "flash"))
    assert format_bytes(est.device("CPU").compute_bytes, down_to="bytes") in flash
    speed = _section(sections, "speed")
    assert f"{f.bound_tok_per_s:.0f} tokens/s" in _text(speed)
    assert "GB/s" in _text(speed)
    for s in sections:
        for n in s.numbers:
            assert any(ch.isalpha() for ch in n.text), f"{n.label} has no unit: {n.text}"


def test_context_changes_the_kv_paragraph(gemma: ModelSpec) -> None:
    small = _settings(gemma, 4096)
    big = _settings(gemma, 32768)
    a = _section(explain_model(gemma, small, estimate(gemma, small, HW), HW), "kv")
    b = _section(explain_model(gemma, big, estimate(gemma, big, HW), HW), "kv")
    assert _text(a) != _text(b)
    assert format_bytes(
        estimate(gemma, small, HW).device("CPU").kv_bytes, down_to="bytes"
    ) in _text(a)


def test_a_dense_model_without_window_skips_that_step(smollm: ModelSpec) -> None:
    settings = _settings(smollm, 8192)
    est = estimate(smollm, settings, HW)
    sections = explain_model(smollm, settings, est, HW)
    keys = [s.key for s in sections]
    assert "window" not in keys
    assert "experts" not in keys
    assert "recurrent" not in keys
    flash = _text(_section(sections, "flash"))
    off = estimate(smollm, settings.replace(flash_attn="off"), HW).device("CPU").compute_bytes
    assert format_bytes(off, down_to="bytes") in flash
    assert "close here" not in flash  # 98 MiB vs 166 MiB is no small difference


def test_a_quantized_cache_without_flash_attention_is_explained(gemma: ModelSpec) -> None:
    settings = _settings(gemma).replace(cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    est: MemoryEstimate = estimate(gemma, settings, HW)
    f: ExplainFacts = explain_facts(gemma, settings, est, HW)
    assert f.compute_bytes_flash_off is None  # llama.cpp refuses a q8_0 V cache without it
    flash = _text(_section(explain_model(gemma, settings, est, HW), "flash"))
    assert "cannot run without it" in flash


def test_speeds_keep_the_digits_that_matter() -> None:
    from app.planning.explain import _rate

    assert _rate(48.4) == "48 tokens/s"
    assert _rate(3.44) == "3.4 tokens/s"
    assert _rate(0.1234) == "0.12 tokens/s"  # a 70B on a CPU: not "0 tokens/s"


def test_an_unquantized_model_is_not_said_to_be_smaller_than_itself() -> None:
    from app.model.catalog import catalog_header

    spec = model_spec(catalog_header("llama-3.1-8b"))  # the catalog keeps F16 weights
    settings = _settings(spec, 8192)
    est = estimate(spec, settings, HW)
    text = _text(_section(explain_model(spec, settings, est, HW), "weights"))
    assert "keeps its weights at 16 bits" in text
    assert "instead of about" not in text
    assert (
        format_bytes(round(spec.n_params * 4.9 / 8), down_to="bytes") in text
    )  # what Q4_K_M would make it
