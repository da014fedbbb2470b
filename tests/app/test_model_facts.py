"""A model's facts, as ``ggtune inspect`` prints them and the model card words them."""

from __future__ import annotations

import json
from pathlib import Path

from app.model.catalog import catalog_header
from app.model.facts import describe_model, kv_bytes_per_token
from app.model.gguf_reader import read_model
from app.model.spec import model_spec

STABLE_KEYS = {
    "path", "name", "architecture", "parameters", "weights_bytes", "bits_per_weight",
    "quantization", "context_length", "n_layer", "n_embd", "n_vocab", "n_head", "n_head_kv",
    "head_size_k", "head_size_v", "sliding_window", "experts", "mla", "kv_lora_rank",
    "rope_dimensions", "tied_embeddings", "memory_kind", "kv_bytes_per_token",
    "layers_by_kind", "notes",
}  # fmt: skip


def test_gemma_described_from_its_header(gemma_path: Path) -> None:
    spec = model_spec(read_model(gemma_path))
    d = describe_model(spec)
    assert (d.architecture, d.n_layer, d.sliding_window) == ("gemma3", 18, 512)
    assert d.layers_by_kind == {"sliding window": 15, "full attention": 3}
    # f16 K and V, 256 wide each, over 18 layers; q8_0 keeps 34 bytes per 32 values
    assert d.kv_bytes_per_token == {"f16": 18 * 2 * 256 * 2, "q8_0": 9792, "q4_0": 5184}
    assert sum(q.bytes for q in d.quantization.values()) == spec.weights_bytes
    assert sum(q.tensors for q in d.quantization.values()) == len(spec.tensors)
    data = json.loads(json.dumps(d.to_dict()))
    assert set(data) == STABLE_KEYS
    assert data["quantization"]["Q4_K"]["tensors"] == d.quantization["Q4_K"].tensors


def test_mla_caches_k_alone_and_moe_counts_experts() -> None:
    spec = model_spec(catalog_header("catalog:deepseek-v3"))
    d = describe_model(spec)
    assert d.mla
    assert d.experts is not None
    assert (d.experts.used, d.experts.total, d.experts.shared) == (8, 256, 1)
    per_layer = spec.n_embd_k_gqa(0) * 2  # f16, no V rows
    assert kv_bytes_per_token(spec, "f16") == per_layer * spec.n_layer
