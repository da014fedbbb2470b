"""The estimator against numbers llama.cpp printed for the same settings.

The golden figures below were read from llama.cpp's own log (llama-cpp-python 0.3.36, CPU
build, AVX2) for the real demo models; tests/agreement re-derives them from the engine on
every run. Rules that only a GPU machine shows (placement) are checked against the rules of
``src/llama-model.cpp`` directly.
"""

from __future__ import annotations

import pytest

from app.errors import SettingsError
from app.hardware.devices import Hardware
from app.model.spec import ModelSpec, model_spec
from app.predict.estimate import estimate, resolve_context
from app.settings import Settings, runner_defaults

MIB = 1024 * 1024
AVX2 = Hardware.cpu_only(cpu_flags=("avx2",))


def mib(n: int) -> str:
    """Format bytes the way llama.cpp logs them (%.2f MiB)."""
    return f"{n / MIB:.2f}"


def test_spec_of_the_real_models(smollm: ModelSpec, gemma: ModelSpec) -> None:
    # llama_model_size / llama_model_n_params as llama.cpp reports them
    assert smollm.weights_bytes == 96_576_768
    assert smollm.n_params == 134_515_008
    assert gemma.weights_bytes == 246_587_904
    assert gemma.n_params == 268_098_176
    assert (smollm.arch, smollm.n_layer, smollm.n_vocab) == ("llama", 30, 49152)
    assert (gemma.arch, gemma.n_layer, gemma.n_vocab, gemma.n_swa) == ("gemma3", 18, 262144, 512)
    # gemma3: 5 local : 1 global (load_swa_pattern(ml, 6)); llama.cpp logs is_swa per layer
    assert [il for il in range(18) if not gemma.is_swa[il]] == [5, 11, 17]
    assert gemma.tied_embeddings
    assert smollm.tied_embeddings


@pytest.mark.parametrize(
    ("kwargs", "cells", "kv_mib", "compute_mib", "output_mib"),
    [
        # llama_kv_cache: size = 90.00 MiB (4096 cells, 30 layers, 1/1 seqs)
        ({"n_ctx": 4096, "flash_attn": "off"}, 4096, "90.00", "99.38", "0.19"),
        ({"n_ctx": 4096, "flash_attn": "on"}, 4096, "90.00", "98.25", "0.19"),
        ({"n_ctx": 8192, "flash_attn": "off"}, 8192, "180.00", "166.38", "0.19"),
        ({"n_ctx": 8192, "flash_attn": "on"}, 8192, "180.00", "98.25", "0.19"),
        ({"n_ctx": 8192, "flash_attn": "off", "n_ubatch": 256}, 8192, "180.00", "83.19", "0.19"),
        # 4 slots, one stream each: 2048 cells per stream (180.00 MiB, 4/4 seqs)
        ({"n_ctx": 8192, "flash_attn": "off", "n_parallel": 4}, 2048, "180.00", "99.38", "0.75"),
        (
            {"n_ctx": 8192, "flash_attn": "off", "n_parallel": 4, "kv_unified": True},
            8192,
            "180.00",
            "166.38",
            "0.75",
        ),
        (
            {"n_ctx": 8192, "flash_attn": "on", "cache_type_k": "q8_0", "cache_type_v": "q8_0"},
            8192,
            "95.62",
            "99.38",
            "0.19",
        ),
    ],
)
def test_smollm_matches_llama_cpp_log(
    smollm: ModelSpec,
    kwargs: dict[str, object],
    cells: int,
    kv_mib: str,
    compute_mib: str,
    output_mib: str,
) -> None:
    est = estimate(smollm, Settings(**kwargs), AVX2)  # type: ignore[arg-type]
    (cache,) = est.caches
    assert cache.cells == cells
    assert cache.n_layers == 30
    assert mib(cache.total_bytes) == kv_mib
    cpu = est.device("CPU")
    assert mib(cpu.weights_bytes) == "92.10"  # CPU_Mapped model buffer size = 92.10 MiB
    assert cpu.other_bytes == 0  # Q4_1 is never repacked
    assert mib(cpu.output_bytes) == output_mib
    assert abs(cpu.compute_bytes / MIB - float(compute_mib)) <= 0.03 * float(compute_mib)


def test_gemma_iswa_caches_match_llama_cpp_log(gemma: ModelSpec) -> None:
    full = estimate(gemma, Settings(n_ctx=4096, swa_full=True), AVX2)
    assert [(c.kind, c.cells, c.n_layers, mib(c.total_bytes)) for c in full.caches] == [
        ("kv", 4096, 3, "12.00"),
        ("kv_swa", 4096, 15, "60.00"),
    ]
    window = estimate(gemma, Settings(n_ctx=4096, swa_full=False, flash_attn="on"), AVX2)
    # SWA cache = PAD(min(4096, 512 + 512), 256) = 1024 cells: 15.00 MiB
    assert [(c.kind, c.cells, mib(c.total_bytes)) for c in window.caches] == [
        ("kv", 4096, "12.00"),
        ("kv_swa", 1024, "15.00"),
    ]
    cpu = window.device("CPU")
    assert mib(cpu.weights_bytes) == "235.16"  # CPU_Mapped
    assert mib(cpu.other_bytes) == "12.66"  # CPU_REPACK: the Q4_K tensors, 8x8 interleaved
    assert mib(cpu.output_bytes) == "1.00"
    assert abs(cpu.compute_bytes / MIB - 514.50) <= 0.03 * 514.50


AMX = Hardware.cpu_only(
    cpu_flags=("avx", "avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_int8", "f16c", "fma")
)


def test_amx_cpu_packs_weights_as_llama_cpp_logs(smollm: ModelSpec, gemma: ModelSpec) -> None:
    """On a CPU with AMX-INT8 llama.cpp's AMX buffer comes before CPU_REPACK. The figures are
    llama.cpp's log loading the demo models on such a CPU (Intel Xeon, AVX512 + AMX, the
    pinned build, 2026-12-02; docs/engine.md, "AMX")."""
    small = estimate(smollm, Settings(n_ctx=256), AMX).device("CPU")
    assert mib(small.weights_bytes) == "92.10"  # CPU_Mapped model buffer size = 92.10 MiB
    assert mib(small.other_bytes) == "95.34"  # AMX model buffer size = 95.34 MiB (Q4_1 and
    # the tied output head, Q8_0 with 4 bytes of compensation per 32 weights)
    big = estimate(gemma, Settings(n_ctx=256), AMX).device("CPU")
    assert mib(big.weights_bytes) == "235.16"  # CPU_Mapped
    assert mib(big.other_bytes) == "213.91"  # AMX; no CPU_REPACK: AMX takes what it can first
    # without mmap the packed copy is the only one
    unmapped = estimate(smollm, Settings(n_ctx=256, use_mmap=False), AMX).device("CPU")
    assert unmapped.other_bytes == small.other_bytes
    assert mib(unmapped.weights_bytes) == "28.82"  # CPU model buffer: token_embd, the norms
    # the flag alone is not enough: llama.cpp builds its AMX buffer with AVX512-VNNI
    no_vnni = Hardware.cpu_only(cpu_flags=("avx2", "avx512f", "amx_int8"))
    assert mib(estimate(smollm, Settings(n_ctx=256), no_vnni).device("CPU").other_bytes) == ("0.00")


def test_no_repack_without_avx2(gemma: ModelSpec) -> None:
    est = estimate(gemma, Settings(n_ctx=4096), Hardware.cpu_only())
    assert est.device("CPU").other_bytes == 0


def test_context_rules() -> None:
    spec_ctx = 8192
    fake = type("S", (), {"n_ctx_train": spec_ctx})()
    # n_ctx 0 = training context; padded to 256; per-stream cells padded too
    r = resolve_context(fake, Settings(n_ctx=0))  # type: ignore[arg-type]
    assert (r.n_ctx, r.n_ctx_seq, r.n_stream) == (8192, 8192, 1)
    r = resolve_context(fake, Settings(n_ctx=1000))  # type: ignore[arg-type]
    assert (r.n_ctx, r.n_ctx_seq) == (1024, 1024)
    r = resolve_context(fake, Settings(n_ctx=4096, n_parallel=3))  # type: ignore[arg-type]
    # 4096 / 3 = 1365 -> 1536 per stream -> n_ctx "rounded" to 4608
    assert (r.n_ctx, r.n_ctx_seq, r.n_stream) == (4608, 1536, 3)
    r = resolve_context(fake, Settings(n_ctx=300, n_batch=2048, n_ubatch=512))  # type: ignore[arg-type]
    assert (r.n_batch, r.n_ubatch) == (300, 300)


def test_quantized_v_needs_flash_attention(smollm: ModelSpec) -> None:
    with pytest.raises(SettingsError, match="flash attention"):
        estimate(smollm, Settings(cache_type_v="q8_0", flash_attn="off"), AVX2)
    # K alone may be quantized without flash attention
    estimate(smollm, Settings(cache_type_k="q8_0", flash_attn="off"), AVX2)


def test_output_layer_is_offloaded_first(smollm: ModelSpec) -> None:
    hw = Hardware.with_gpus([8 * 1024**3], cpu_flags=("avx2",))
    embd = next(t for t in smollm.tensors if t.name == "token_embd.weight")
    one = estimate(smollm, Settings(n_gpu_layers=1), hw)
    gpu, cpu = one.device("CUDA0"), one.device("CPU")
    # ngl=1: only the output layer (here the tied copy of token_embd + output_norm) moves
    assert gpu.n_layers == 0
    out_norm = next(t for t in smollm.tensors if t.name == "output_norm.weight")
    assert gpu.weights_bytes == embd.n_bytes + out_norm.n_bytes
    assert cpu.weights_bytes == smollm.weights_bytes - out_norm.n_bytes
    # ngl=11: output + the LAST 10 layers (il >= n_layer + 1 - ngl)
    eleven = estimate(smollm, Settings(n_gpu_layers=11), hw)
    assert eleven.device("CUDA0").n_layers == 10
    last10 = sum(t.n_bytes for t in smollm.tensors if t.layer is not None and t.layer >= 20)
    assert eleven.device("CUDA0").weights_bytes == last10 + embd.n_bytes + out_norm.n_bytes
    # KV follows the layers: 10 of 30 layers' KV on the GPU
    total_kv = sum(d.kv_bytes for d in eleven.devices)
    assert eleven.device("CUDA0").kv_bytes * 3 == total_kv
    # token embeddings always stay on the CPU, even with every layer offloaded
    full = estimate(smollm, Settings(n_gpu_layers=-1), hw)
    assert full.device("CPU").weights_bytes == embd.n_bytes
    assert full.device("CPU").kv_bytes == 0


def test_no_kv_offload_keeps_cache_on_host(smollm: ModelSpec) -> None:
    hw = Hardware.with_gpus([8 * 1024**3])
    est = estimate(smollm, Settings(n_gpu_layers=-1, offload_kqv=False), hw)
    assert est.device("CUDA0").kv_bytes == 0
    assert est.device("CPU").kv_bytes == est.caches[0].total_bytes


def test_tensor_split_across_two_gpus(smollm: ModelSpec) -> None:
    hw = Hardware.with_gpus([8 * 1024**3, 8 * 1024**3])
    est = estimate(smollm, Settings(n_gpu_layers=-1, tensor_split=(3.0, 1.0)), hw)
    # 31 offloaded layers (30 + output) split 3:1 by upper_bound over [0.75, 1.0]
    assert est.device("CUDA0").n_layers == 24  # il/31 < 0.75 -> il <= 23
    assert est.device("CUDA1").n_layers == 6


def test_runner_presets_differ() -> None:
    lcp = runner_defaults("llama-cpp-python")
    server = runner_defaults("llama-server")
    ollama_small = runner_defaults("ollama", gpu_total_bytes=8 * 1024**3)
    ollama_big = runner_defaults("ollama", gpu_total_bytes=80 * 1024**3)
    assert lcp.swa_full
    assert not server.swa_full
    assert server.kv_unified
    assert server.n_parallel == 4
    assert (lcp.n_ctx, server.n_ctx) == (512, 0)
    assert (ollama_small.n_ctx, ollama_big.n_ctx) == (4096, 262144)
    assert ollama_small.n_batch == ollama_small.n_ubatch == 512


def test_estimate_is_fast_enough_for_a_slider(gemma: ModelSpec) -> None:
    # not a timing assertion (bench/ measures speed): the call must stay pure and repeatable
    a = estimate(gemma, Settings(n_ctx=16384), AVX2)
    b = estimate(gemma, Settings(n_ctx=16384), AVX2)
    assert a == b


def test_repacked_weights_counted_twice_with_mmap_get_a_note_with_the_saving() -> None:
    """On an AVX2 CPU llama.cpp repacks Q4_K weights into CPU_REPACK while the mapped file
    keeps the originals (issue #16761): the estimate says so, and how much mmap off saves."""
    import dataclasses

    from app.model.catalog import catalog_header
    from app.model.quant import simulate_quant
    from app.predict.estimate import REPACK_NOTE_BYTES

    spec = simulate_quant(model_spec(catalog_header("llama-3.1-8b")), "Q4_K_M").spec
    cpu = Hardware.cpu_only()
    avx2 = dataclasses.replace(cpu, host=dataclasses.replace(cpu.host, cpu_flags=("avx2",)))
    settings = runner_defaults("llama-server").replace(n_ctx=8192)
    mapped = estimate(spec, settings, avx2)
    copied = estimate(spec, settings.replace(use_mmap=False), avx2)
    twice = mapped.devices[-1].total_bytes - copied.devices[-1].total_bytes
    # the repacked weights count twice but for those outside the mapped span (the last
    # tensors of the file, unmapped after loading)
    assert REPACK_NOTE_BYTES <= twice <= mapped.devices[-1].other_bytes
    (note,) = [n for n in mapped.notes if "repacked" in n]
    assert note.startswith(f"{twice / 2**30:.1f} GiB of weights are repacked")
    assert f"saves {twice / 2**30:.1f} GiB of RAM" in note
    assert not any("repacked" in n for n in copied.notes)
    # no repacking without the CPU features, so no note
    assert not any("repacked" in n for n in estimate(spec, settings, cpu).notes)
