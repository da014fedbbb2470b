"""Quant simulation (app/model/quant.py): llama.cpp's rules on real and synthetic models.

Golden file sizes below are the sizes of the files llama.cpp's own quantizer wrote from
SmolLM2-135M-Instruct Q4_1 (``llama_model_quantize``, llama-cpp-python 0.3.36,
allow_requantize; tests/runner/test_quant_agreement.py repeats them live). The synthetic
cases follow ``src/llama-quant.cpp`` rules no real test model reaches (70B attn_v bump,
8 experts, falcon, row lengths no block fits), each with the rule quoted.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from app.hardware.devices import Hardware
from app.model.ggml import GGML_TYPES
from app.model.gguf_reader import read_model
from app.model.quant import (
    FILE_TYPES,
    QuantError,
    QuantFailure,
    QuantResult,
    allows_quantization,
    file_type,
    simulate_all,
    simulate_quant,
)
from app.model.spec import ModelSpec, TensorSpec, model_spec, tensor_role
from app.predict.estimate import estimate
from app.settings import Settings

F32, F16, Q4_0, Q8_0 = 0, 1, 2, 8


# --- helpers -----------------------------------------------------------------------


def tensor(name: str, shape: tuple[int, ...], ggml_type: int = F16) -> TensorSpec:
    t = GGML_TYPES[ggml_type]
    n = 1
    for d in shape[1:]:
        n *= d
    layer = int(name.split(".")[1]) if name.startswith("blk.") else None
    return TensorSpec(
        name, shape, ggml_type, t.name, n * t.row_bytes(shape[0]), layer, tensor_role(name)
    )


@dataclasses.dataclass(frozen=True)
class _Header:
    path: str
    metadata: dict[str, object]
    tensors: tuple[TensorSpec, ...]


def dense_spec(
    *,
    arch: str = "llama",
    n_layer: int = 8,
    n_embd: int = 512,
    n_ff: int = 1024,
    n_head: int = 8,
    n_head_kv: int = 2,
    n_expert: int = 0,
    tied: bool = False,
    extra: tuple[TensorSpec, ...] = (),
) -> ModelSpec:
    """A llama-like model at F16 with ``n_layer`` layers (experts when ``n_expert``)."""
    head = n_embd // n_head
    ts: list[TensorSpec] = [
        tensor("token_embd.weight", (n_embd, 1000)),
        tensor("output_norm.weight", (n_embd,), F32),
    ]
    if not tied:
        ts.append(tensor("output.weight", (n_embd, 1000)))
    for il in range(n_layer):
        p = f"blk.{il}."
        ts += [
            tensor(p + "attn_norm.weight", (n_embd,), F32),
            tensor(p + "attn_q.weight", (n_embd, n_embd)),
            tensor(p + "attn_k.weight", (n_embd, head * n_head_kv)),
            tensor(p + "attn_v.weight", (n_embd, head * n_head_kv)),
            tensor(p + "attn_output.weight", (n_embd, n_embd)),
            tensor(p + "ffn_norm.weight", (n_embd,), F32),
        ]
        if n_expert:
            ts += [
                tensor(p + "ffn_gate_inp.weight", (n_embd, n_expert), F32),
                tensor(p + "ffn_gate_exps.weight", (n_embd, n_ff, n_expert)),
                tensor(p + "ffn_up_exps.weight", (n_embd, n_ff, n_expert)),
                tensor(p + "ffn_down_exps.weight", (n_ff, n_embd, n_expert)),
            ]
        else:
            ts += [
                tensor(p + "ffn_gate.weight", (n_embd, n_ff)),
                tensor(p + "ffn_up.weight", (n_embd, n_ff)),
                tensor(p + "ffn_down.weight", (n_ff, n_embd)),
            ]
    ts += list(extra)
    metadata: dict[str, object] = {
        "general.architecture": arch,
        f"{arch}.block_count": n_layer,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head_kv,
        f"{arch}.context_length": 4096,
        "general.file_type": 1,
    }
    if n_expert:
        metadata[f"{arch}.expert_count"] = n_expert
        metadata[f"{arch}.expert_used_count"] = 2
    return model_spec(_Header("synthetic.gguf", metadata, tuple(ts)))


def types(result: QuantResult) -> dict[str, str]:
    return {p.name: p.target.name for p in result.tensors}


# --- tables ------------------------------------------------------------------------


def test_file_types_and_aliases() -> None:
    assert len({ft.ftype for ft in FILE_TYPES}) == len(FILE_TYPES) == 35
    assert file_type("q4_k").name == "Q4_K_M"
    assert file_type("Q3_K").name == "Q3_K_M"
    assert file_type("mxfp4").name == "MXFP4_MOE"
    assert file_type("IQ2_M").default_type.name == "IQ2_S"  # llama_ftype_get_default_type
    with pytest.raises(QuantError, match="unknown quant type 'NVFP4'"):
        file_type("NVFP4")


@pytest.mark.parametrize(
    ("name", "shape", "allowed"),
    [
        ("blk.0.attn_q.weight", (64, 64), True),
        ("blk.0.attn_norm.weight", (64, 64), False),  # "_norm.weight"
        ("blk.0.attn_q.weight", (64, 1), False),  # ggml_n_dims: trailing 1 does not count
        ("blk.0.attn_q.bias", (64, 64), False),  # must end with "weight"
        ("blk.0.ffn_gate_inp.weight", (64, 8), False),  # router
        ("position_embd.weight", (64, 512), False),
        ("blk.0.ssm_conv1d.weight", (4, 64), False),
        ("blk.0.time_mix_w1.weight", (64, 64), False),
        ("blk.0.ffn_down_exps.weight", (64, 64, 8), True),
    ],
)
def test_allows_quantization(name: str, shape: tuple[int, ...], allowed: bool) -> None:
    assert allows_quantization("llama", name, shape) is allowed


# --- the rules on synthetic models -------------------------------------------------


def test_q4_k_m_mixture() -> None:
    """attn_v and ffn_down get Q6_K where use_more_bits(i, n); output Q6_K; rest Q4_K."""
    got = types(simulate_quant(dense_spec(), "Q4_K_M"))
    # use_more_bits(i, 8): i < 1 or i >= 7 or (i - 1) % 3 == 2 -> layers 0, 3, 6, 7
    for il in range(8):
        bumped = "Q6_K" if il in (0, 3, 6, 7) else "Q4_K"
        assert got[f"blk.{il}.attn_v.weight"] == bumped, il
        assert got[f"blk.{il}.ffn_down.weight"] == bumped, il
        assert got[f"blk.{il}.attn_q.weight"] == "Q4_K"
    assert got["output.weight"] == "Q6_K"
    assert got["token_embd.weight"] == "Q4_K"
    assert got["blk.0.attn_norm.weight"] == "F32"


def test_tied_embeddings_take_the_output_rule() -> None:
    got = types(simulate_quant(dense_spec(tied=True), "Q4_0"))
    assert got["token_embd.weight"] == "Q6_K"
    got = types(simulate_quant(dense_spec(tied=True), "IQ2_XXS", imatrix=True))
    assert got["token_embd.weight"] == "Q5_K"
    got = types(simulate_quant(dense_spec(), "IQ2_XXS", imatrix=True))
    assert got["token_embd.weight"] == "Q2_K"  # untied: the token_embd rule


def test_70b_bumps_attn_v() -> None:
    """llama with 80 layers and GQA is LLM_TYPE_70B: Q3_K/Q4_K attn_v become Q5_K."""
    spec = dense_spec(n_layer=80, n_embd=256, n_ff=256)
    got = types(simulate_quant(spec, "Q4_K_S"))
    assert {got[f"blk.{il}.attn_v.weight"] for il in range(80)} == {"Q5_K"}
    not_70b = types(simulate_quant(dense_spec(n_layer=79, n_embd=256, n_ff=256), "Q4_K_S"))
    assert not_70b["blk.10.attn_v.weight"] == "Q4_K"  # i_attention_wv >= 4


def test_eight_experts() -> None:
    """n_expert == 8 (Mixtral): attn_v and attn_k Q8_0, attn_output Q5_K."""
    got = types(simulate_quant(dense_spec(n_expert=8), "Q4_K_M"))
    assert got["blk.3.attn_v.weight"] == "Q8_0"
    assert got["blk.3.attn_k.weight"] == "Q8_0"
    assert got["blk.3.attn_output.weight"] == "Q5_K"
    # ffn_down: the layer comes from the name (layer_info), not a counter
    assert got["blk.0.ffn_down_exps.weight"] == "Q6_K"
    assert got["blk.1.ffn_down_exps.weight"] == "Q4_K"


def test_mxfp4_moe() -> None:
    got = types(simulate_quant(dense_spec(n_expert=4), "MXFP4_MOE"))
    assert got["blk.0.ffn_up_exps.weight"] == "MXFP4"
    assert got["blk.0.attn_q.weight"] == "Q8_0"
    assert got["output.weight"] == "Q8_0"
    assert got["blk.0.ffn_gate_inp.weight"] == "F32"


def test_falcon_ffn_down_q3_k_m() -> None:
    spec = dataclasses.replace(dense_spec(n_layer=16), arch="falcon")
    got = types(simulate_quant(spec, "Q3_K_M"))
    assert got["output.weight"] == "Q8_0"  # falcon's output is always Q8_0
    assert got["blk.0.ffn_down.weight"] == "Q5_K"  # i < n/16
    assert got["blk.1.ffn_down.weight"] == "Q4_K"  # use_more_bits(1, 16)
    assert got["blk.3.ffn_down.weight"] == "Q3_K"


def test_fallback_chain() -> None:
    """Row length 576: Q4_K -> Q5_0; 100: Q5_0 -> F16 ("must use F16"); Q1_0 has none."""
    extra = (tensor("blk.0.attn_odd.weight", (100, 64)),)
    spec = dense_spec(n_embd=576, n_ff=1536, n_head=9, n_head_kv=3, extra=extra)
    result = simulate_quant(spec, "Q4_K_S")
    got = types(result)
    assert got["blk.0.attn_q.weight"] == "Q5_0"
    assert got["blk.0.ffn_down.weight"] == "Q5_K"  # 1536 = 6 * 256 fits
    assert got["blk.0.attn_odd.weight"] == "F16"
    assert result.n_fallback > 0
    with pytest.raises(QuantError, match="no tensor type fallback is defined for type q1_0"):
        simulate_quant(spec, "Q1_0")


def test_load_order_and_counters() -> None:
    """weights_map sorts blk.10 after blk.9; Q3_K_M's first two attn_v get Q5_K."""
    spec = dense_spec(n_layer=12)
    spec = dataclasses.replace(spec, tensors=tuple(reversed(spec.tensors)))
    result = simulate_quant(spec, "Q3_K_M")
    names = [p.name for p in result.tensors]
    assert names.index("blk.10.attn_v.weight") > names.index("blk.9.attn_v.weight")
    assert names[0] == "output.weight"  # non-block tensors first, by name
    got = types(result)
    assert [got[f"blk.{il}.attn_v.weight"] for il in range(3)] == ["Q5_K", "Q5_K", "Q4_K"]


def test_imatrix_requirement() -> None:
    spec = dense_spec()
    q2ks = simulate_quant(spec, "Q2_K_S")
    assert q2ks.needs_imatrix  # Q2_K tensors of a Q2_K_S file
    assert "blk.0.ffn_down.weight" not in q2ks.imatrix_tensors  # Q4_K for i < n/8
    assert "blk.1.ffn_down.weight" in q2ks.imatrix_tensors
    assert not simulate_quant(spec, "Q2_K").needs_imatrix
    for name in ("IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "IQ3_XS", "IQ3_XXS"):
        assert simulate_quant(spec, name).needs_imatrix, name
    for name in ("IQ3_S", "IQ3_M", "IQ4_XS", "IQ4_NL", "TQ1_0"):
        assert not simulate_quant(spec, name).needs_imatrix, name
    # with an imatrix, IQ3_XXS keeps attn_v at IQ3_XXS (n_gqa < 4) instead of IQ3_S
    gqa2 = dense_spec(n_head_kv=4)
    assert types(simulate_quant(gqa2, "IQ3_XXS", imatrix=True))["blk.0.attn_v.weight"] == (
        "IQ3_XXS"
    )
    assert types(simulate_quant(gqa2, "IQ3_XXS"))["blk.0.attn_v.weight"] == "IQ3_S"
    assert types(simulate_quant(spec, "IQ3_XXS"))["blk.0.attn_v.weight"] == "Q4_K"  # gqa 4


def test_float_file_types_touch_only_quantizable_tensors() -> None:
    spec = dense_spec()
    f32 = simulate_quant(spec, "F32")
    assert set(types(f32).values()) == {"F32"}
    bf16 = types(simulate_quant(spec, "BF16"))
    assert bf16["output.weight"] == "BF16"
    assert bf16["blk.0.attn_norm.weight"] == "F32"


def test_simulate_all_labels_imatrix_types() -> None:
    results = simulate_all(dense_spec(), header_bytes=1000)
    assert [r.file_type.name for r in results] == [ft.name for ft in FILE_TYPES]
    by_name = {r.file_type.name: r for r in results}
    iq2 = by_name["IQ2_XXS"]
    assert isinstance(iq2, QuantResult)
    assert iq2.needs_imatrix
    assert iq2.imatrix
    q1 = by_name["Q1_0"]
    assert isinstance(q1, QuantResult)  # 512/1024 columns fit 128-blocks
    odd = simulate_all(dense_spec(n_embd=576, n_ff=1536, n_head=9, n_head_kv=3))
    assert isinstance({r.file_type.name: r for r in odd}["Q1_0"], QuantFailure)


# --- the real model: sizes llama.cpp wrote -----------------------------------------

SMOLLM_FILE_BYTES = {
    "F32": 539845696,
    "F16": 270885952,
    "BF16": 270885952,
    "Q8_0": 144811072,
    "Q6_K": 138382912,
    "Q5_K_M": 112103488,
    "Q5_K_S": 109974592,
    "Q5_1": 111633472,
    "Q5_0": 104997952,
    "Q4_K_M": 105454144,
    "Q4_K_S": 102039616,
    "Q4_1": 98362432,
    "Q4_0": 91726912,
    "IQ4_NL": 92058688,
    "IQ4_XS": 91312192,
    "MXFP4_MOE": 144811072,
    "Q3_K_L": 97532992,
    "Q3_K_M": 93510208,
    "IQ3_M": 90213184,
    "IQ3_S": 88201792,
    "Q3_K_S": 88201792,
    "IQ3_XS": 88201792,
    "IQ3_XXS": 88554304,
    "Q2_K": 88201792,
    "Q2_0": 61867072,
    "TQ2_0": 83639872,
    "TQ1_0": 82395712,
}
"""File sizes of llama.cpp's quantizations of SmolLM2-135M-Instruct Q4_1, in bytes."""

SMOLLM_IMATRIX_FILE_BYTES = {"Q2_K_S": 86128192, "IQ2_XXS": 83826496, "IQ1_S": 82333504}
"""The same with an importance matrix (all ones) for the types that need one."""


@pytest.fixture(scope="module")
def smollm(smollm_path: Path) -> tuple[ModelSpec, int]:
    model = read_model(smollm_path)
    return model_spec(model), model.shards[0].data_offset


@pytest.mark.parametrize(("name", "size"), SMOLLM_FILE_BYTES.items())
def test_smollm_file_sizes(smollm: tuple[ModelSpec, int], name: str, size: int) -> None:
    spec, header = smollm
    result = simulate_quant(spec, name, header_bytes=header)
    assert result.file_bytes == size
    assert not result.needs_imatrix


@pytest.mark.parametrize(("name", "size"), SMOLLM_IMATRIX_FILE_BYTES.items())
def test_smollm_imatrix_file_sizes(smollm: tuple[ModelSpec, int], name: str, size: int) -> None:
    spec, header = smollm
    assert simulate_quant(spec, name, header_bytes=header).needs_imatrix
    assert simulate_quant(spec, name, header_bytes=header, imatrix=True).file_bytes == size


def test_smollm_refusals(smollm: tuple[ModelSpec, int]) -> None:
    spec, _ = smollm
    for name in ("Q2_K_S", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S"):
        assert simulate_quant(spec, name).needs_imatrix, name
    with pytest.raises(QuantError):
        simulate_quant(spec, "Q1_0")  # 576 columns: no fallback for 128-blocks


def test_simulated_spec_feeds_the_estimator(smollm: tuple[ModelSpec, int]) -> None:
    spec, header = smollm
    result = simulate_quant(spec, "Q4_K_M", header_bytes=header)
    assert result.spec.weights_bytes == result.tensor_bytes
    assert result.spec.file_type == 15
    assert result.requantizes  # Q4_1 tensors quantized again
    assert result.bits_per_weight == pytest.approx(8 * result.tensor_bytes / spec.n_params)
    est = estimate(result.spec, Settings(n_ctx=2048), Hardware.cpu_only())
    base = estimate(spec, Settings(n_ctx=2048), Hardware.cpu_only())
    assert est.total_bytes - base.total_bytes == result.tensor_bytes - spec.weights_bytes
