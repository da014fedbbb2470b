"""The model catalog: entries load, generate the tensors llama.cpp's converter writes, and
plan through the same ModelSpec path as real files.

The generator is checked against real GGUF files, not against itself: the two demo models
(llama and gemma3, converted by llama.cpp's own converter) and the zoo models (qwen2,
qwen3, qwen3moe, gpt-oss, deepseek2, phi3, gemma3, llama), which the real llama.cpp loads,
so their tensor lists are the ones ``load_arch_tensors`` demands. Parameter counts are then
compared with the figures each vendor published (sources beside each number).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

from app.errors import CatalogError, GGTuneError
from app.hardware.devices import Hardware
from app.model.catalog import (
    CATALOG_DIR,
    CatalogHeader,
    TensorOptions,
    active_params,
    catalog_header,
    catalog_keys,
    generate_tensors,
    header_from_metadata,
    load_catalog,
    load_entry,
)
from app.model.gguf_reader import read_model
from app.model.spec import HeaderLike, ModelSpec, model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from tests.zoo import dense, write_model

GIB = 1024**3


def spec_of(key: str) -> ModelSpec:
    return model_spec(catalog_header(key))


def shapes(header: HeaderLike) -> dict[str, tuple[int, ...]]:
    return {t.name: tuple(t.shape) for t in header.tensors}


# --------------------------------------------------------------------------- the entries

REQUIRED = (
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.2-3b",
    "qwen3-8b",
    "qwen3-32b",
    "qwen3-30b-a3b",
    "qwen2.5-7b-instruct",
    "gemma-3-4b",
    "gemma-3-12b",
    "gemma-3-27b",
    "mistral-small-24b-2501",
    "gpt-oss-20b",
    "gpt-oss-120b",
    "deepseek-r1-distill-qwen-7b",
    "phi-4",
    "deepseek-v3",
    "deepseek-v3.2",
    "kimi-k2-instruct-0905",
    "llama-4-scout-17b-16e",
    "llama-4-maverick-17b-128e",
    "mistral-small-3.1-24b-2503",
    "mistral-small-3.2-24b-2506",
    "glm-4.5",
    "glm-4.6",
    "glm-4.5-air",
    "qwen3.5-0.8b",
    "qwen3.5-4b",
    "qwen3.5-9b",
    "qwen3.5-27b",
    "qwen3.5-35b-a3b",
    "qwen3.5-122b-a10b",
    "qwen3.5-397b-a17b",
    "gemma-4-e2b",
    "gemma-4-e4b",
    "gemma-4-12b",
    "gemma-4-26b-a4b",
    "gemma-4-31b",
)


def test_catalog_holds_the_popular_models() -> None:
    keys = catalog_keys()
    assert len(keys) >= 15
    assert set(REQUIRED) <= set(keys)
    entries = load_catalog()
    assert [e.key for e in entries] == list(keys)
    for e in entries:
        assert e.source.startswith("https://huggingface.co/"), e.key
        assert e.source.endswith("/config.json"), e.key
        assert e.path == f"catalog:{e.key}"


# (key, published total parameters, source). The GGUF holds the language model only: the
# Gemma 3 figures are embedding + non-embedding parameters of the Gemma 3 technical report
# (arXiv:2503.19786, table 1), without the 417M vision encoder that goes into an mmproj
# file; DeepSeek-V3's 671B is the main model without the 14B MTP module, which
# convert_hf_to_gguf.py drops (conversion/deepseek.py skip_mtp).
PUBLISHED_TOTAL = [
    ("llama-3.1-8b", 8.03e9, "huggingface.co/meta-llama/Llama-3.1-8B (safetensors: 8.03B)"),
    ("llama-3.1-70b", 70.6e9, "huggingface.co/meta-llama/Llama-3.1-70B (safetensors: 70.6B)"),
    ("llama-3.2-3b", 3.21e9, "huggingface.co/meta-llama/Llama-3.2-3B (safetensors: 3.21B)"),
    ("qwen3-8b", 8.2e9, "huggingface.co/Qwen/Qwen3-8B model card: 8.2B"),
    ("qwen3-32b", 32.8e9, "huggingface.co/Qwen/Qwen3-32B model card: 32.8B"),
    ("qwen3-30b-a3b", 30.5e9, "huggingface.co/Qwen/Qwen3-30B-A3B model card: 30.5B"),
    ("qwen2.5-7b-instruct", 7.61e9, "huggingface.co/Qwen/Qwen2.5-7B-Instruct card: 7.61B"),
    ("deepseek-r1-distill-qwen-7b", 7.62e9, "huggingface.co/deepseek-ai/... (safetensors 7.62B)"),
    ("gemma-3-4b", (675 + 3209) * 1e6, "Gemma 3 report table 1: 675M + 3,209M"),
    ("gemma-3-12b", (1012 + 10759) * 1e6, "Gemma 3 report table 1: 1,012M + 10,759M"),
    ("gemma-3-27b", (1416 + 25600) * 1e6, "Gemma 3 report table 1: 1,416M + 25,600M"),
    ("gemma-3-270m", 268_098_176, "the real demo GGUF: llama_model_n_params"),
    ("smollm2-135m", 134_515_008, "the real demo GGUF: llama_model_n_params"),
    ("mistral-small-24b-2501", 23.57e9, "huggingface.co/mistralai/... (safetensors 23.6B)"),
    ("gpt-oss-20b", 20.91e9, "gpt-oss model card (arXiv:2508.10925) table 1: 20.91B"),
    ("gpt-oss-120b", 116.83e9, "gpt-oss model card (arXiv:2508.10925) table 1: 116.83B"),
    ("phi-4", 14.7e9, "Phi-4 technical report (arXiv:2412.08905): 14B / HF card 14.7B"),
    ("deepseek-v3", 671e9, "DeepSeek-V3 technical report (arXiv:2412.19437): 671B total"),
    # V3's 671B plus the lightning indexer (61 x 13.9M); 685B with the MTP block
    ("deepseek-v3.2", 671.9e9, "V3's 671B + the DSA indexer, without the MTP block"),
    ("kimi-k2-instruct-0905", 1.026e12, "Kimi K2 model card: 1T total (1.026T by its config)"),
    ("llama-4-maverick-17b-128e", 400e9, "Llama 4 model card: Maverick 400B total"),
    # Mistral Small 3.1/3.2: the text_config is Mistral Small 3's (2501) layout to the number
    ("mistral-small-3.1-24b-2503", 23.57e9, "Mistral-Small-24B-2501 safetensors: 23.6B"),
    ("mistral-small-3.2-24b-2506", 23.57e9, "Mistral-Small-24B-2501 safetensors: 23.6B"),
    ("qwen3.5-27b", 27e9, "Qwen3.5-27B: 27B"),
    ("qwen3.5-122b-a10b", 122e9, "Qwen3.5-122B-A10B: 122B"),
    ("qwen3.5-397b-a17b", 397e9, "Qwen3.5-397B-A17B: 397B"),
    # Gemma 4 model cards: 31B 30.7B, 26B A4B 25.2B total; 12B 11.95B (with the 37.5M
    # encoder-free vision/audio embedders, an mmproj file: 11.91B of text weights)
    ("gemma-4-31b", 30.7e9, "Gemma 4 model card: 31B dense, 30.7B"),
    ("gemma-4-26b-a4b", 25.2e9, "Gemma 4 model card: 26B A4B, 25.2B total"),
    ("gemma-4-12b", 11.95e9, "Gemma 4 12B model card: 11.95B"),
]

# Published totals that count more than the GGUF holds, with the tolerance that leaves:
# GLM-4.5/4.6's 355B (zai-org/GLM-4.5 README) include the NextN/MTP layer (~4.0B: 160
# experts of 3 x 5120 x 1536 plus attention), which a --no-mtp conversion drops; Qwen3.5's
# names (35B, 9B, 0.8B) include the vision encoder (an mmproj file) and the MTP block.
PUBLISHED_TOTAL_WITH_EXTRAS = [
    ("glm-4.5", 355e9, 0.01, "GLM-4.5 README: 355B total, MTP layer included"),
    ("glm-4.6", 355e9, 0.01, "GLM-4.5 README (GLM-4.6 row): 355B-A32B"),
    ("qwen3.5-35b-a3b", 35e9, 0.015, "Qwen3.5-35B-A3B: 35B with vision and MTP"),
    ("qwen3.5-9b", 9e9, 0.015, "Qwen3.5-9B: 9B with vision and MTP"),
    ("qwen3.5-0.8b", 0.8e9, 0.07, "Qwen3.5-0.8B: 0.8B; its vision tower is ~6% of it"),
    # Gemma 4 E2B/E4B "with per-layer embeddings" include the vision and audio encoders
    ("gemma-4-e2b", 5.1e9, 0.1, "Gemma 4 model card: E2B 5.1B with embeddings"),
    ("gemma-4-e4b", 8e9, 0.1, "Gemma 4 model card: E4B 8B with embeddings"),
]


# zai-org/GLM-4.5 README: "GLM-4.5 has 355 billion total parameters with 32 billion active
# parameters, while GLM-4.5-Air ... 106 billion total parameters and 12 billion active":
# Zhipu counts neither the embedding row nor the output head as active.
@pytest.mark.parametrize(
    ("key", "published"), [("glm-4.5", 32e9), ("glm-4.6", 32e9), ("glm-4.5-air", 12e9)]
)
def test_glm_active_parameters_without_embedding_and_head(key: str, published: float) -> None:
    spec = spec_of(key)
    head = next(t.n_elements for t in spec.tensors if t.name == "output.weight")
    n = active_params(spec) - head
    assert abs(n - published) / published < 0.02, f"{key}: {n:,}"


# Totals known only as a size label in whole billions: within a billion of it. GLM-4.5-Air
# (README: 106B; 106.85B without its ~2.4B MTP layer), Qwen3.5-4B (4.21B of text, tied).
@pytest.mark.parametrize(("key", "label"), [("glm-4.5-air", 106e9), ("qwen3.5-4b", 4e9)])
def test_parameter_count_is_near_the_size_label(key: str, label: float) -> None:
    n = spec_of(key).n_params
    assert abs(n - label) < 1e9, f"{key}: {n:,}"


# Gemma 4 E2B/E4B: the "effective" parameters are the weights without the per-layer
# embedding table (per_layer_token_embd: layers x 256 x 262144, looked up, not multiplied)
@pytest.mark.parametrize(
    ("key", "published", "tolerance"),
    [("gemma-4-e2b", 2.3e9, 0.01), ("gemma-4-e4b", 4.5e9, 0.04)],  # model card: 2.3B, 4.5B
)
def test_gemma4_effective_parameters(key: str, published: float, tolerance: float) -> None:
    spec = spec_of(key)
    table = next(t for t in spec.tensors if t.name == "per_layer_token_embd.weight")
    assert table.n_elements == spec.n_layer * 256 * 262144
    n = spec.n_params - table.n_elements
    assert abs(n - published) / published < tolerance, f"{key}: {n:,}"


@pytest.mark.parametrize(("key", "published", "source"), PUBLISHED_TOTAL)
def test_parameter_count_matches_the_published_one(key: str, published: float, source: str) -> None:
    n = spec_of(key).n_params
    assert abs(n - published) / published < 0.005, f"{key}: {n:,} vs {published:,.0f} ({source})"


@pytest.mark.parametrize(("key", "published", "tolerance", "source"), PUBLISHED_TOTAL_WITH_EXTRAS)
def test_parameter_count_is_below_a_published_one_with_extras(
    key: str, published: float, tolerance: float, source: str
) -> None:
    n = spec_of(key).n_params
    assert published * (1 - tolerance) < n < published, f"{key}: {n:,} ({source})"


def test_the_real_demo_models_match_to_the_parameter() -> None:
    # Exact: llama.cpp's own count of the converted files (tests/app/test_estimate.py).
    assert spec_of("smollm2-135m").n_params == 134_515_008
    assert spec_of("gemma-3-270m").n_params == 268_098_176


# Active parameters (what one decoded token is multiplied with). OpenAI counts the output
# head but not the embedding lookup, which is active_params' definition: it matches to
# 0.1%. Qwen and DeepSeek publish rounded figures ("3.3B", "37B") and count the input
# embedding as well; with it the catalog gives 3.35B and 37.6B.
@pytest.mark.parametrize(
    ("key", "published", "with_embedding", "tolerance"),
    [
        ("gpt-oss-20b", 3.61e9, False, 0.002),  # gpt-oss model card table 1
        ("gpt-oss-120b", 5.13e9, False, 0.002),  # gpt-oss model card table 1
        ("qwen3-30b-a3b", 3.3e9, True, 0.02),  # Qwen3-30B-A3B model card: 3.3B activated
        ("deepseek-v3", 37e9, True, 0.02),  # DeepSeek-V3 report: 37B activated
        ("kimi-k2-instruct-0905", 32e9, True, 0.04),  # Kimi K2 card: 32B activated
        ("llama-4-scout-17b-16e", 17e9, True, 0.04),  # Llama 4 card: 17B active
        ("llama-4-maverick-17b-128e", 17e9, True, 0.04),  # Llama 4 card: 17B active
        ("qwen3.5-122b-a10b", 10e9, True, 0.04),  # Qwen3.5-122B-A10B: 10B activated
        ("qwen3.5-397b-a17b", 17e9, True, 0.04),  # Qwen3.5-397B-A17B: 17B activated
        # "A3B" rounds 3.45B (with the embedding row; 2.95B without) to whole billions
        ("qwen3.5-35b-a3b", 3e9, True, 0.16),
        # tied: the output head reads token_embd, so active_params counts it once
        ("gemma-4-26b-a4b", 3.8e9, False, 0.02),  # Gemma 4 model card: 3.8B active
    ],
)
def test_active_parameters_of_the_moe_models(
    key: str, published: float, with_embedding: bool, tolerance: float
) -> None:
    spec = spec_of(key)
    n = active_params(spec)
    if with_embedding:
        n += next(t.n_elements for t in spec.tensors if t.name == "token_embd.weight")
    assert abs(n - published) / published < tolerance, f"{key}: {n:,}"


def test_dense_active_parameters_skip_only_the_embedding_lookup() -> None:
    untied = spec_of("llama-3.1-8b")
    assert active_params(untied) == untied.n_params - 4096 * 128256
    tied = spec_of("llama-3.2-3b")  # the output head reads token_embd in full
    assert active_params(tied) == tied.n_params


# KV bytes per token at f16 over all layers, from the hyperparameters by hand:
# layers x (K + V) x n_head_kv x head size x 2 bytes; MLA caches K only, the compressed
# latent + RoPE part (kv_lora_rank 512 + 64) of its single KV head.
@pytest.mark.parametrize(
    ("key", "per_token"),
    [
        ("llama-3.1-8b", 32 * 2 * 8 * 128 * 2),
        ("llama-3.1-70b", 80 * 2 * 8 * 128 * 2),
        ("llama-3.2-3b", 28 * 2 * 8 * 128 * 2),
        ("mistral-small-24b-2501", 40 * 2 * 8 * 128 * 2),
        ("qwen3-8b", 36 * 2 * 8 * 128 * 2),
        ("qwen3-30b-a3b", 48 * 2 * 4 * 128 * 2),
        ("qwen2.5-7b-instruct", 28 * 2 * 4 * 128 * 2),
        ("phi-4", 40 * 2 * 10 * 128 * 2),
        ("gemma-3-27b", 62 * 2 * 16 * 128 * 2),
        ("gpt-oss-20b", 24 * 2 * 8 * 64 * 2),
        ("deepseek-v3", 61 * (512 + 64) * 2),
        ("kimi-k2-instruct-0905", 61 * (512 + 64) * 2),
        # MLA latent + RoPE part, plus the indexer's one key of 128 per layer and token
        ("deepseek-v3.2", 61 * (512 + 64) * 2 + 61 * 128 * 2),
        ("llama-4-scout-17b-16e", 48 * 2 * 8 * 128 * 2),  # chunked layers: 8192 cells max
        ("mistral-small-3.1-24b-2503", 40 * 2 * 8 * 128 * 2),
        ("glm-4.5", 92 * 2 * 8 * 128 * 2),
        # Gemma 4: full layers have heads of 512 and their own KV-head count, sliding ones
        # heads of 256; E2B's last 20 layers read the cache of layers 13 and 14
        ("gemma-4-31b", 10 * 2 * 4 * 512 * 2 + 50 * 2 * 16 * 256 * 2),
        ("gemma-4-26b-a4b", 5 * 2 * 2 * 512 * 2 + 25 * 2 * 8 * 256 * 2),
        ("gemma-4-12b", 8 * 2 * 1 * 512 * 2 + 40 * 2 * 8 * 256 * 2),
        ("gemma-4-e2b", 3 * 2 * 1 * 512 * 2 + 12 * 2 * 1 * 256 * 2),
        ("gemma-4-e4b", 4 * 2 * 2 * 512 * 2 + 20 * 2 * 2 * 256 * 2),
    ],
)
def test_kv_cache_per_token_through_the_estimator(key: str, per_token: int) -> None:
    spec = spec_of(key)
    n_ctx = 4096
    settings = Settings(n_ctx=n_ctx, swa_full=True)
    est = estimate(spec, settings, Hardware.cpu_only())
    assert sum(c.total_bytes for c in est.caches) == per_token * n_ctx


# Qwen3.5: only every 4th layer has K/V (gated attention); the delta-net layers hold a
# recurrent state per sequence instead: conv (kernel 4 - 1) x (2 x 16 x 128 + v_heads x 128)
# and the 128 x 128 state of each value head, both F32 (src/models/qwen35.cpp).
@pytest.mark.parametrize(
    ("key", "n_layer", "n_head_kv", "v_heads"),
    [
        ("qwen3.5-0.8b", 24, 2, 16),
        ("qwen3.5-4b", 32, 4, 32),
        ("qwen3.5-9b", 32, 4, 32),
        ("qwen3.5-27b", 64, 4, 48),
        ("qwen3.5-35b-a3b", 40, 2, 32),
        ("qwen3.5-122b-a10b", 48, 2, 64),
        ("qwen3.5-397b-a17b", 60, 2, 64),
    ],
)
def test_hybrid_kv_and_recurrent_state(
    key: str, n_layer: int, n_head_kv: int, v_heads: int
) -> None:
    spec = spec_of(key)
    n_ctx = 4096
    est = estimate(spec, Settings(n_ctx=n_ctx), Hardware.cpu_only())
    kv = sum(c.total_bytes for c in est.caches if c.kind == "kv")
    state = sum(c.total_bytes for c in est.caches if c.kind == "recurrent")
    assert kv == n_layer // 4 * 2 * n_head_kv * 256 * 2 * n_ctx
    conv = 3 * (2 * 16 * 128 + v_heads * 128) * 4
    assert state == n_layer * 3 // 4 * (conv + 128 * 128 * v_heads * 4)


def test_every_entry_plans_through_the_model_spec_path() -> None:
    hardware = Hardware.with_gpus([24 * GIB], ram_bytes=64 * GIB)
    for entry in load_catalog():
        header = catalog_header(entry)
        assert isinstance(header, CatalogHeader)
        spec = model_spec(header)
        assert spec.path == f"catalog:{entry.key}"
        assert spec.name == entry.name
        assert spec.kv_rule_known, entry.key
        est = estimate(spec, Settings(n_ctx=8192, n_gpu_layers=-1), hardware)
        assert est.total_bytes > spec.weights_bytes
        # a tied output head offloaded to a GPU is a second copy of token_embd
        on_devices = sum(d.weights_bytes for d in est.devices)
        assert (on_devices == spec.weights_bytes) != spec.tied_embeddings, entry.key


def test_specs_carry_the_architecture_rules() -> None:
    ds = spec_of("deepseek-v3")
    assert ds.is_mla
    assert ds.kv_lora_rank == 512
    assert (ds.n_layer, ds.n_expert, ds.n_expert_used, ds.n_expert_shared) == (61, 256, 8, 1)
    assert not any(t.name.startswith("blk.61.") for t in ds.tensors)  # no MTP layer
    g = spec_of("gemma-3-12b")
    assert (g.memory_kind, g.n_swa) == ("iswa", 1024)
    assert [il for il in range(48) if not g.is_swa[il]] == list(range(5, 48, 6))
    oss = spec_of("gpt-oss-120b")
    assert (oss.memory_kind, oss.n_swa) == ("iswa", 128)
    assert oss.is_swa[:4] == (True, False, True, False)
    assert spec_of("phi-4").memory_kind == "kv"  # sliding_window 0: one full cache
    assert spec_of("mistral-small-24b-2501").head_k_full == 128  # not 5120 / 32


def test_tensor_types_follow_the_converter() -> None:
    header = catalog_header("gpt-oss-20b")
    types = {t.name: t.type_name for t in header.tensors}
    assert types["token_embd.weight"] == "F16"
    assert types["blk.0.attn_q.weight"] == "F16"
    assert types["blk.0.ffn_gate_exps.weight"] == "MXFP4"
    assert types["blk.0.ffn_down_exps.weight"] == "MXFP4"
    for name in (
        "blk.0.attn_norm.weight",
        "blk.0.attn_q.bias",
        "blk.0.attn_sinks.weight",
        "blk.0.ffn_gate_inp.weight",  # the router stays F32
        "blk.0.ffn_gate_exps.bias",
    ):
        assert types[name] == "F32", name
    assert header.metadata["general.file_type"] == 38  # MOSTLY_MXFP4_MOE
    # MXFP4: 17 bytes per 32 weights
    exps = next(t for t in header.tensors if t.name == "blk.0.ffn_up_exps.weight")
    assert exps.shape == (2880, 2880, 32)
    assert exps.n_bytes == 2880 * 2880 * 32 // 32 * 17
    llama = catalog_header("llama-3.1-8b")
    assert llama.metadata["general.file_type"] == 1  # MOSTLY_F16
    rope = next(t for t in llama.tensors if t.name == "rope_freqs.weight")
    assert (rope.shape, rope.type_name) == ((64,), "F32")
    deepseek = {t.name: t for t in catalog_header("deepseek-v3").tensors}
    assert deepseek["blk.3.exp_probs_b.bias"].type_name == "F32"
    assert deepseek["blk.3.ffn_up_exps.weight"].shape == (7168, 2048, 256)
    assert deepseek["blk.0.attn_k_b.weight"].shape == (128, 512, 128)
    assert deepseek["blk.0.attn_v_b.weight"].shape == (512, 128, 128)
    assert deepseek["blk.0.attn_kv_a_mqa.weight"].shape == (7168, 576)
    assert "blk.2.ffn_gate_inp.weight" not in deepseek  # leading dense layers


# --------------------------------------------------------------------------- against real files


@pytest.mark.parametrize(
    ("key", "fixture"), [("smollm2-135m", "smollm_path"), ("gemma-3-270m", "gemma_path")]
)
def test_generator_equals_the_real_demo_file(
    key: str, fixture: str, request: pytest.FixtureRequest
) -> None:
    real = read_model(request.getfixturevalue(fixture))
    generated = catalog_header(key)
    assert shapes(generated) == shapes(real)
    # the published config gives the same hyperparameters as the real file's metadata
    entry = load_entry(key)
    for k, v in entry.metadata.items():
        if k in real.metadata and not k.endswith("layer_norm_rms_epsilon"):
            assert real.metadata[k] == v, k
    # ... and so the same spec: every per-layer rule, the vocabulary, the KV layout
    a, b = model_spec(generated), model_spec(real)
    for fld in ("arch", "n_layer_all", "n_embd", "n_vocab", "n_ctx_train", "n_head", "n_head_kv"):
        assert getattr(a, fld) == getattr(b, fld), fld
    for fld in ("n_ff", "head_k_full", "head_v_full", "is_swa", "n_swa", "tied_embeddings"):
        assert getattr(a, fld) == getattr(b, fld), fld
    assert a.n_params == b.n_params


def _zoo_options(name: str) -> TensorOptions:
    if name in dense.SPECS:
        spec = dense.SPECS[name]
        return TensorOptions(
            tied_embeddings=spec.tied,
            rope_factors=spec.rope_factors,
            expert_type="MXFP4" if spec.ffn_type == dense.MXFP4 else "F16",
        )
    if name == "gemma4":  # tests/zoo/modern.py: tied, the full layers' rope_freqs
        return TensorOptions(tied_embeddings=True, rope_freqs=True)
    if name == "glm4moe":  # tests/zoo/special.py: GLM-4.5's q/k norms
        return TensorOptions(qk_norm=True)
    return TensorOptions()  # tests/zoo/special.py: untied, F16


@pytest.mark.parametrize(
    "name",
    [
        "llama",
        "mistral3",
        "qwen2",
        "qwen3",
        "qwen3moe",
        "gpt-oss",
        "deepseek2",
        "glm4moe",
        "phi3",
        "gemma3",
        "llama4",
        "deepseek32",
        "qwen35",
        "qwen35moe",
        "gemma4",
    ],
)
def test_generator_equals_the_zoo_model(name: str, zoo_dir: Path) -> None:
    real = read_model(write_model(name, zoo_dir))
    generated = header_from_metadata(real.metadata, _zoo_options(name), path=f"zoo:{name}")
    assert shapes(generated) == shapes(real)
    # The zoo writes F16 matrices with F32 norms and biases like the converter, except
    # where a zoo spec quantizes its FFN (Q8_0) on purpose and where tests/zoo/dense.py
    # keeps the router F16 (the converter makes it F32; llama.cpp takes either).
    real_types = {t.name: t.type_name for t in real.tensors}
    for t in generated.tensors:
        if real_types[t.name] != "Q8_0" and ".ffn_gate_inp.weight" not in t.name:
            assert t.type_name == real_types[t.name], t.name
    assert model_spec(generated).n_params == model_spec(real).n_params


# --------------------------------------------------------------------------- bad entries


def _write(tmp_path: Path, data: object, name: str = "bad.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def _good() -> dict[str, object]:
    data = json.loads((CATALOG_DIR / "qwen3-8b.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _with_md(changes: Mapping[str, object | None]) -> dict[str, object]:
    data = _good()
    md = dict(data["metadata"])  # type: ignore[call-overload]
    for k, v in changes.items():
        if v is None:
            md.pop(k, None)
        else:
            md[k] = v
    data["metadata"] = md
    return data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "should be a JSON object"),
        ({**_good(), "name": ""}, "name should be a non-empty string"),
        ({**_good(), "source": "ftp://x"}, "source should be an https:// URL"),
        ({**_good(), "colour": "red"}, "unknown field(s) colour"),
        ({**_good(), "tensors": {"tied": True}}, "unknown tensor option(s) tied"),
        ({**_good(), "tensors": {"tied_embeddings": "yes"}}, "tied_embeddings should be true"),
        ({**_good(), "tensors": {"expert_type": "Q4_0"}}, "expert_type should be one of"),
        ({**_good(), "metadata": {}}, "metadata should be a non-empty object"),
        (_with_md({"general.architecture": "mamba"}), "general.architecture should be one of"),
        (_with_md({"llama.block_count": 36}), "'llama.block_count' does not belong to qwen3"),
        (_with_md({"qwen3.embedding_length": None}), "metadata lacks qwen3.embedding_length"),
        (_with_md({"qwen3.block_count": -1}), "qwen3.block_count is negative"),
        (_with_md({"qwen3.block_count": 0}), "block_count out of range"),
        (_with_md({"qwen3.attention.head_count": {"a": 1}}), "should be a number"),
        (_with_md({"qwen3.attention.head_count": [32, 32]}), "should hold 36 non-negative"),
        (_with_md({"qwen3.attention.key_length": 0}), "would have shape"),
    ],
)
def test_a_bad_entry_raises_a_catalog_error_naming_the_file(
    tmp_path: Path, data: object, message: str
) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(CatalogError) as info:
        load_entry(path)
    assert message in str(info.value)
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: ")
    assert isinstance(info.value, GGTuneError)


def test_an_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match=r"no catalog model 'qwen9-1t' \(known: .*qwen3-8b"):
        catalog_header("qwen9-1t")
    with pytest.raises(CatalogError, match="no catalog model"):
        catalog_header("../../etc/passwd")
    with pytest.raises(CatalogError, match=r"known: none"):
        load_entry("qwen3-8b", tmp_path)


def test_an_unreadable_file_is_a_catalog_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="cannot read the entry"):
        load_entry(tmp_path / "missing.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(CatalogError, match="not valid JSON"):
        load_entry(tmp_path / "bin.json")


def test_generator_refuses_what_llama_cpp_would_refuse() -> None:
    md = dict(load_entry("gpt-oss-20b").metadata)
    with pytest.raises(CatalogError, match=r"requires an output\.weight"):
        generate_tensors(md, TensorOptions(tied_embeddings=True))
    with pytest.raises(CatalogError, match="no tensor template for 'mamba'"):
        generate_tensors({"general.architecture": "mamba"}, TensorOptions())
    md = dict(load_entry("qwen3-8b").metadata)
    md["qwen3.expert_count"] = 8
    md["qwen3.expert_used_count"] = 2
    with pytest.raises(CatalogError, match="qwen3 has no mixture-of-experts layers"):
        generate_tensors(md, TensorOptions())
    md["qwen3.expert_used_count"] = 9
    with pytest.raises(CatalogError, match="expert_used_count should be between 1 and 8"):
        generate_tensors(md, TensorOptions())


def test_mxfp4_experts_need_whole_blocks() -> None:
    md = dict(load_entry("gpt-oss-20b").metadata)
    md["gpt-oss.embedding_length"] = 2880 + 16
    with pytest.raises(CatalogError, match="row of 2896 does not fill MXFP4 blocks of 32"):
        generate_tensors(md, TensorOptions(expert_type="MXFP4"), path="x")
    assert generate_tensors(md, TensorOptions(), path="x")  # F16 experts: any row length


def test_error_survives_a_process_boundary() -> None:
    import pickle

    err = CatalogError("metadata lacks qwen3.block_count", path="x.json")
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.path, back.message) == (str(err), "x.json", err.message)


def test_layer_names_are_contiguous() -> None:
    for entry in load_catalog():
        layers = {
            int(m.group(1))
            for t in catalog_header(entry).tensors
            if (m := re.match(r"blk\.(\d+)\.", t.name))
        }
        assert layers == set(range(len(layers))), entry.key


# --------------------------------------------------------------------------- command line
# (here rather than in tests/ui because these files are the catalog's; no Qt involved)


def test_cli_takes_a_catalog_model(capsys: pytest.CaptureFixture[str]) -> None:
    from ui.cli.main import run

    assert run(["inspect", "catalog:gpt-oss-20b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == "catalog:gpt-oss-20b"
    assert run(["estimate", "catalog:qwen3-8b", "-c", "8192", "--gpu-mem", "24", "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["context"]["n_ctx"] == 8192
    assert run(["inspect", "catalog:qwen9-1t"]) == 2
    assert "no catalog model 'qwen9-1t'" in capsys.readouterr().err


def test_catalog_command_lists_every_entry(capsys: pytest.CaptureFixture[str]) -> None:

    from ui.cli.main import build_parser

    parser = build_parser()
    args = parser.parse_args(["catalog", "--json"])
    assert args.handler(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in rows] == [f"catalog:{k}" for k in catalog_keys()]
    by_key = {r["model"]: r for r in rows}
    assert by_key["catalog:llama-3.1-8b"]["kv_bytes_per_token_f16"] == 131072
    assert by_key["catalog:gpt-oss-20b"]["sliding_window"] == 128
    args = parser.parse_args(["catalog"])
    assert args.handler(args) == 0
    out = capsys.readouterr().out
    assert "catalog:deepseek-v3" in out
    assert "671.03B" in out


def test_vision_projectors_are_marked() -> None:
    """Entries whose published model has a vision tower say so (it is an mmproj file)."""
    marked = {e.key for e in load_catalog() if e.vision_projector}
    assert {"llama-4-scout-17b-16e", "llama-4-maverick-17b-128e"} <= marked
    assert {"gemma-3-4b", "gemma-3-12b", "gemma-3-27b"} <= marked
    assert {"mistral-small-3.1-24b-2503", "mistral-small-3.2-24b-2506"} <= marked
    assert {"qwen3.5-9b", "qwen3.5-35b-a3b", "qwen3.5-397b-a17b"} <= marked
    assert {k for k in catalog_keys() if k.startswith("gemma-4-")} <= marked
    assert not {"llama-3.1-8b", "qwen3-8b", "deepseek-v3", "gpt-oss-20b", "glm-4.5"} & marked
    assert "glm-4.5-air" not in marked


def test_new_layouts_follow_load_arch_tensors() -> None:
    """Shapes the published configs imply, as src/models/<arch>.cpp creates them."""
    glm = {t.name: t for t in catalog_header("glm-4.5").tensors}
    assert glm["blk.0.attn_q.weight"].shape == (5120, 96 * 128)  # head_dim 128, not 5120/96
    assert glm["blk.0.attn_q.bias"].type_name == "F32"
    assert glm["blk.3.ffn_gate_exps.weight"].shape == (5120, 1536, 160)
    assert glm["blk.3.ffn_up_shexp.weight"].shape == (5120, 1536)
    assert "blk.2.ffn_gate_inp.weight" not in glm  # three leading dense layers
    assert "blk.92.attn_norm.weight" not in glm  # no NextN/MTP layer (--no-mtp)
    assert glm["blk.0.attn_k_norm.weight"].shape == (128,)  # use_qk_norm
    air = {t.name for t in catalog_header("glm-4.5-air").tensors}
    assert "blk.0.attn_k_norm.weight" not in air
    assert "blk.1.ffn_gate_exps.weight" in air
    q = {t.name: t for t in catalog_header("qwen3.5-27b").tensors}
    assert q["blk.3.attn_q.weight"].shape == (5120, 2 * 24 * 256)  # q and its output gate
    assert "blk.3.ssm_out.weight" not in q
    assert "blk.4.attn_q.weight" not in q
    assert q["blk.0.attn_qkv.weight"].shape == (5120, 2 * 16 * 128 + 48 * 128)
    assert q["blk.0.ssm_conv1d.weight"].type_name == "F32"
    assert q["blk.0.ssm_a"].shape == (48,)
    m = {t.name: t for t in catalog_header("qwen3.5-35b-a3b").tensors}
    assert m["blk.0.ffn_gate_inp_shexp.weight"].shape == (2048,)
    assert m["blk.0.ffn_down_shexp.weight"].shape == (512, 2048)
    g = {t.name: t for t in catalog_header("gemma-4-26b-a4b").tensors}
    assert "blk.5.attn_v.weight" not in g  # full layer: V is K (attention_k_eq_v)
    assert g["blk.5.attn_k.weight"].shape == (2816, 2 * 512)
    assert g["blk.0.attn_v.weight"].shape == (2816, 8 * 256)
    assert g["blk.0.ffn_up.weight"].shape == (2816, 2112)  # dense FFN beside the experts
    assert g["blk.0.ffn_gate_up_exps.weight"].shape == (2816, 2 * 704, 128)
    assert g["blk.0.ffn_down_exps.scale"].type_name == "F32"
    assert g["rope_freqs.weight"].shape == (256,)
    e = {t.name: t for t in catalog_header("gemma-4-e2b").tensors}
    assert "blk.14.attn_k.weight" in e
    assert "blk.15.attn_k.weight" not in e  # shared-KV layers own no K/V
    assert e["blk.15.ffn_up.weight"].shape == (1536, 2 * 6144)  # use_double_wide_mlp
    assert e["per_layer_token_embd.weight"].shape == (35 * 256, 262144)
