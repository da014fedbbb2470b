"""Model specs from headers: layer kinds, tensor roles, unknown architectures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from app.errors import InvalidMetadataError
from app.hardware.devices import Hardware
from app.model.gguf_reader import read_model
from app.model.spec import model_spec, tensor_role
from app.predict.estimate import estimate
from app.settings import Settings
from tests.zoo import write_model


def write_unknown(path: Path, arch: str = "madeup-arch", *, with_layers: bool = True) -> None:
    w = GGUFWriter(str(path), arch)
    if with_layers:
        w.add_block_count(2)
    w.add_embedding_length(64)
    w.add_context_length(2048)
    w.add_head_count(4)
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float16))
    for il in range(2):
        w.add_tensor(f"blk.{il}.attn_q.weight", np.zeros((64, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_unknown_architecture_gets_weights_and_a_clear_note(tmp_path: Path) -> None:
    path = tmp_path / "unknown.gguf"
    write_unknown(path)
    spec = model_spec(read_model(path))
    assert spec.memory_kind == "unknown"
    assert not spec.kv_rule_known
    assert spec.weights_bytes == (100 * 64 + 2 * 64 * 64) * 2
    est = estimate(spec, Settings(n_ctx=1024), Hardware.cpu_only())
    assert est.caches == ()
    assert est.device("CPU").weights_bytes == spec.weights_bytes
    assert any("KV rule unknown for madeup-arch" in n for n in est.notes)


def test_missing_required_key_names_it(tmp_path: Path) -> None:
    path = tmp_path / "nolayers.gguf"
    write_unknown(path, with_layers=False)
    with pytest.raises(InvalidMetadataError, match=r"madeup-arch\.block_count"):
        model_spec(read_model(path))


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("token_embd.weight", "token_embedding"),
        ("output.weight", "output"),
        ("output_norm.weight", "output_norm"),
        ("blk.3.attn_q.weight", "attention"),
        ("blk.3.attn_norm.weight", "norm"),
        ("blk.3.ffn_up.weight", "ffn"),
        ("blk.3.ffn_gate_exps.weight", "expert"),
        ("blk.3.ffn_down_shexp.weight", "shared_expert"),
        ("blk.3.ffn_gate_inp.weight", "router"),
        ("blk.3.ssm_in.weight", "ssm"),
        ("rope_freqs.weight", "other"),
    ],
)
def test_tensor_roles(name: str, role: str) -> None:
    assert tensor_role(name) == role


def test_layer_patterns_of_zoo_models(zoo_dir: Path) -> None:
    gemma3 = model_spec(read_model(write_model("gemma3", zoo_dir)))
    assert gemma3.is_swa == (True, True, True, True, True, False)
    hybrid = model_spec(read_model(write_model("granitehybrid", zoo_dir)))
    assert hybrid.memory_kind == "hybrid"
    # a layer is recurrent iff its KV head count is 0 (granite-hybrid.cpp)
    assert hybrid.is_recurrent == tuple(h == 0 for h in hybrid.n_head_kv)
    mla = model_spec(read_model(write_model("deepseek2", zoo_dir)))
    assert mla.is_mla
    assert (mla.n_expert, mla.n_expert_used, mla.n_expert_shared) == (8, 2, 1)
    deci = model_spec(read_model(write_model("deci", zoo_dir)))
    assert 0 in deci.n_head_kv  # per-layer KV heads with a layer that keeps no KV
    rwkv = model_spec(read_model(write_model("rwkv7", zoo_dir)))
    assert rwkv.memory_kind == "recurrent"
    assert rwkv.n_embd_s() == rwkv.n_embd * rwkv.wkv_head_size
