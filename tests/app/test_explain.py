"""The Explain walk on the real demo model: every number is the estimator's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.hardware.devices import Hardware
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
from runner.dry_run import dry_run_many
from tests.agreement.test_agreement import llama_mib
from tests.agreement.test_multi_device import device_buffers, hardware_of
from tests.llama_tools import RpcServers

GIB = 1024**3
HW = Hardware.cpu_only(32 * GIB, cpu_flags=("avx", "avx2", "f16c", "fma"))


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
    # the per-token cost quoted is the one that grows with the context (3 full-attention
    # layers), so per token × context is the full-attention cache, as the card counts it
    assert format_bytes(f.kv_bytes_per_token_full, down_to="bytes") == "3.0 KiB"
    assert "3.0 KiB of cache in its 3 full-attention layers" in kv
    assert "18.0 KiB" not in kv
    assert f.kv_bytes_per_token_full * 32768 == f.kv_bytes_full_cache
    assert f"full-attention part ({format_bytes(f.kv_bytes_full_cache, down_to='bytes')} now)" in kv
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


# --- a shared (tied) token embedding, held twice --------------------------------------


GPU_24 = Hardware.with_gpus([24 * GIB], cpu_flags=("avx", "avx2", "f16c", "fma"))


def _weights_text(spec: ModelSpec, settings: Settings, hardware: Hardware) -> str:
    est = estimate(spec, settings, hardware)
    return _text(_section(explain_model(spec, settings, est, hardware), "weights"))


def test_a_tied_embedding_on_the_cpu_and_the_gpu_is_explained(gemma: ModelSpec) -> None:
    """Gemma's output layer reuses the token embedding: with the output layer on a GPU the
    weights in memory exceed the file by exactly that table, and the words say why."""
    assert gemma.tied_embeddings
    settings = _settings(gemma, 4096).replace(n_gpu_layers=-1)
    est = estimate(gemma, settings, GPU_24)
    f = explain_facts(gemma, settings, est, GPU_24)
    embd = next(t for t in gemma.tensors if t.name == "token_embd.weight")
    assert f.tied_copy_bytes == embd.n_bytes
    assert f.tied_copy_device == GPU_24.gpus[0].name
    assert f.weights_bytes - f.weights_file_bytes == embd.n_bytes
    assert est.device("CPU").weights_bytes == embd.n_bytes  # the input layer's copy
    text = _weights_text(gemma, settings, GPU_24)
    assert format_bytes(f.weights_bytes, down_to="bytes") in text
    assert format_bytes(f.weights_file_bytes, down_to="bytes") in text
    assert format_bytes(embd.n_bytes, down_to="bytes") in text
    assert "loaded twice" in text
    assert "on the CPU" in text
    assert f"the GPU ({GPU_24.gpus[0].name})" in text
    sections = explain_model(gemma, settings, est, GPU_24)
    assert _section(sections, "weights").title.startswith("3. ")  # where the overview points
    overview = _text(_section(sections, "overview"))
    assert f"{format_bytes(embd.n_bytes, down_to='bytes')} of it a second copy" in overview
    # the Gemma 3 27B of the issue: 16.5 GiB shown against a 15.4 GiB file
    from app.model.catalog import catalog_header
    from app.model.quant import simulate_quant

    big = simulate_quant(model_spec(catalog_header("gemma-3-27b")), "Q4_K_M").spec
    text = _weights_text(big, _settings(big, 16384), GPU_24)
    assert "The weights take 16.5 GiB in memory, 1.1 GiB more than their own 15.4 GiB" in text


def test_no_second_copy_no_words(gemma: ModelSpec) -> None:
    """Output layer on the CPU (no GPU, or -ngl 0): one copy, shared; a model with its own
    output weights: nothing to explain."""
    from app.model.catalog import catalog_header

    for spec, settings, hardware in (
        (gemma, _settings(gemma, 4096), HW),
        (gemma, _settings(gemma, 4096).replace(n_gpu_layers=0), GPU_24),
    ):
        est = estimate(spec, settings, hardware)
        assert explain_facts(spec, settings, est, hardware).tied_copy_bytes == 0
        assert "loaded twice" not in _weights_text(spec, settings, hardware)
        overview = _section(explain_model(spec, settings, est, hardware), "overview")
        assert "second copy" not in _text(overview)
    qwen = model_spec(catalog_header("qwen3-8b"))
    assert not qwen.tied_embeddings
    settings = _settings(qwen, 4096).replace(n_gpu_layers=-1)
    est = estimate(qwen, settings, GPU_24)
    assert explain_facts(qwen, settings, est, GPU_24).tied_copy_bytes == 0


@pytest.mark.engine
def test_llama_cpp_holds_the_tied_embedding_twice(
    gemma: ModelSpec, gemma_path: Path, rpc_servers: RpcServers
) -> None:
    """The oracle: llama.cpp really loads Gemma's token embedding on the CPU and again on the
    device that holds the output layer (an RPC server is a GPU-class device to it)."""
    settings = Settings(n_ctx=4096, n_gpu_layers=-1, use_mmap=False)
    with rpc_servers(1) as servers:
        (report,) = dry_run_many(
            str(gemma_path),
            [settings],
            mode="alloc",
            rpc_servers=[s.endpoint for s in servers],
            timeout_s=300,
        )
    hardware = hardware_of(report, 1)
    est = estimate(gemma, settings, hardware)
    f = explain_facts(gemma, settings, est, hardware)
    buffers = device_buffers(report)
    on_cpu = buffers[("weights", "CPU")]
    on_gpu = buffers[("weights", f.tied_copy_device)]
    embd = next(t for t in gemma.tensors if t.name == "token_embd.weight")
    assert llama_mib(on_cpu) == llama_mib(embd.n_bytes)  # the input layer: the table alone
    # everything else, and the table again for the output layer
    assert llama_mib(on_gpu) == llama_mib(gemma.weights_bytes)
    assert llama_mib(on_cpu + on_gpu - gemma.weights_bytes) == llama_mib(f.tied_copy_bytes)


def test_the_compute_buffer_now_is_the_one_with_or_without_flash_attention() -> None:
    """On a GPU the host keeps a small compute buffer of its own: "now", "with" and
    "without flash attention" all count every device, so "now" is one of the two."""
    from app.model.catalog import catalog_header
    from app.model.quant import simulate_quant

    spec = simulate_quant(model_spec(catalog_header("gemma-3-27b")), "Q4_K_M").spec
    for flash in ("on", "off"):
        settings = _settings(spec, 16384).replace(flash_attn=flash)
        est = estimate(spec, settings, GPU_24)
        assert len([d for d in est.devices if d.compute_bytes]) == 2  # the GPU and the host
        f = explain_facts(spec, settings, est, GPU_24)
        now = f.compute_bytes_flash_on if flash == "on" else f.compute_bytes_flash_off
        assert now == f.compute_bytes == sum(d.compute_bytes for d in est.devices)
        numbers = {
            n.label: n.text
            for n in _section(explain_model(spec, settings, est, GPU_24), "flash").numbers
        }
        label = "With flash attention" if flash == "on" else "Without flash attention"
        assert numbers["Compute buffer now"] == numbers[label]


def test_a_small_model_on_a_gpu_is_said_to_wait_for_the_cpu() -> None:
    """SmolLM2 135M on an RTX 4090: the CPU's part of each step (graph nodes, llama.cpp
    #7456) is most of the token, and the speed paragraph says so with the step's figure; a
    7-8B model's share (~12 %) and a CPU-only plan get no such words."""
    from app.hardware.profiles import compose
    from app.model.catalog import catalog_header
    from app.model.quant import simulate_quant

    gpu = compose("rtx-4090")
    for name, quant, hardware, said in (
        ("smollm2-135m", "Q8_0", gpu, True),
        ("llama-3.1-8b", "Q4_K_M", gpu, False),
        ("smollm2-135m", "Q8_0", HW, False),
    ):
        spec = simulate_quant(model_spec(catalog_header(name)), quant).spec
        settings = _settings(spec, 4096).replace(n_gpu_layers=-1)
        est = estimate(spec, settings, hardware)
        f = explain_facts(spec, settings, est, hardware)
        text = _text(_section(explain_model(spec, settings, est, hardware), "speed"))
        assert ("prepares and launches it" in text) is said, (name, hardware)
        if said:
            assert f.step_nodes > 500
            assert f"{f.step_nodes:,} operations" in text
            assert f"{f.step_cpu_s * 1000:.2f} ms" in text
