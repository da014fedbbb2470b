"""Tiny models of the memory families llama.cpp gained in 2025-2026 (see tests/zoo/__init__.py).

Each builder describes a model with :class:`tests.zoo.special._Model` (metadata + tensor
shapes in ggml order) and the shared writer ``special._write`` turns it into a GGUF file.
The tensors follow ``load_arch_tensors`` in the vendored llama.cpp
(``src/models/<arch>.cpp``); llama.cpp refuses a file with a missing, extra or misshapen
tensor, so a model that loads is one whose description is right.

What each model exercises (the memory rule in ``src/llama-model.cpp`` ``create_memory``):

* ``llama4``: chunked attention (``LLAMA_SWA_TYPE_CHUNKED``, 3 chunked : 1 full, the window
  fixed at 8192 by ``load_arch_hparams``) and interleaved MoE layers with a shared expert.
* ``gemma4``: iSWA from a per-layer pattern array, different head sizes and KV-head counts
  on the sliding and the full layers, and KV sharing (``shared_kv_layers``: the last layers
  have no cache and read the cache of the last layer of their kind before them).
* ``gemma3n``: iSWA (pattern 5) with the KV sharing hard-wired at layer 20, AltUp, LAuReL
  and per-layer embeddings.
* ``qwen35`` / ``qwen35moe``: hybrid gated-delta-net (recurrent) + gated full attention
  every 4th layer, the MoE one with a gated shared expert.
* ``deepseek32``: DeepSeek Sparse Attention: the K-only MLA cache plus the lightning
  indexer's key cache (``llama_kv_cache_dsa``).
* ``t5``: encoder-decoder; the decoder's self-attention cache has one layer per
  *encoder* block (``block_count``), also when the decoder has fewer.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.zoo.special import (
    N_CTX_TRAIN,
    N_VOCAB,
    K,
    _attn,
    _base_kv,
    _builder,
    _ffn,
    _io,
    _Model,
    _moe,
)

# --------------------------------------------------------------------------- llama4


def llama4() -> _Model:
    """Llama 4 Scout in miniature: chunked attention, MoE every 2nd layer (1 of 4 + shared)."""
    n_layer, n_embd, n_head, n_head_kv, head_dim = 8, 128, 8, 2, 16
    n_ff, n_expert, n_ff_exp = 256, 4, 64
    m = _Model(
        "llama4",
        {
            **_base_kv(n_layer, n_embd, rms_eps=1e-5),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: n_head_kv,
            K.Rope.DIMENSION_COUNT: head_dim,
            K.Rope.FREQ_BASE: 500000.0,
            K.LLM.EXPERT_COUNT: n_expert,
            K.LLM.EXPERT_USED_COUNT: 1,
            K.LLM.EXPERT_FEED_FORWARD_LENGTH: n_ff_exp,
            K.LLM.INTERLEAVE_MOE_LAYER_STEP: 2,
        },
    )
    _io(m, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        _attn(m, i, n_embd, n_head, n_head_kv, head_dim, qk_norm=False)
        m.add(f"{b}.ffn_norm.weight", n_embd)
        if (i + 1) % 2 == 0:
            _moe(m, i, n_embd, n_ff_exp, n_expert, bias=False)
            _ffn(m, i, n_embd, n_ff_exp, "_shexp")
        else:
            _ffn(m, i, n_embd, n_ff)
    return m


# --------------------------------------------------------------------------- gemma4

#: 1 = sliding-window layer; layers 4-7 share the KV of layers 2 (SWA) and 3 (full)
GEMMA4_SWA = (1, 1, 1, 0, 1, 1, 1, 0)
GEMMA4_SHARED_KV_LAYERS = 4


def gemma4() -> _Model:
    """Gemma 4 (E2B style) in miniature: iSWA array, per-kind head sizes, shared KV layers.

    Sliding layers: 4 heads of 32, 2 KV heads; full layers: 4 heads of 64, 1 KV head; the
    last 4 layers have no K/V of their own; per-layer input embeddings of 32.
    """
    n_embd, n_ff, n_per_layer = 128, 256, 32
    pattern = GEMMA4_SWA
    n_layer = len(pattern)
    n_head = 4
    n_head_kv = [2 if swa else 1 for swa in pattern]
    head_swa, head_full = 32, 64
    n_kv_from = n_layer - GEMMA4_SHARED_KV_LAYERS
    m = _Model(
        "gemma4",
        {
            **_base_kv(n_layer, n_embd),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: n_head_kv,
            K.Attention.KEY_LENGTH: head_full,
            K.Attention.VALUE_LENGTH: head_full,
            K.Attention.KEY_LENGTH_SWA: head_swa,
            K.Attention.VALUE_LENGTH_SWA: head_swa,
            K.Attention.SLIDING_WINDOW: 128,
            K.Attention.SLIDING_WINDOW_PATTERN: [bool(s) for s in pattern],
            K.Attention.SHARED_KV_LAYERS: GEMMA4_SHARED_KV_LAYERS,
            K.LLM.EMBD_LENGTH_PER_LAYER_INP: n_per_layer,
            K.Rope.DIMENSION_COUNT: head_full,
            "{arch}.rope.dimension_count_swa": head_swa,
            K.Rope.FREQ_BASE: 1e6,
            K.Rope.FREQ_BASE_SWA: 10000.0,
            K.LLM.FINAL_LOGIT_SOFTCAPPING: 30.0,
        },
    )
    m.add("token_embd.weight", n_embd, N_VOCAB)
    m.add("per_layer_token_embd.weight", n_per_layer * n_layer, N_VOCAB)
    m.add("per_layer_model_proj.weight", n_embd, n_per_layer * n_layer)
    m.add("per_layer_proj_norm.weight", n_per_layer)
    m.add("output_norm.weight", n_embd)
    m.add("rope_freqs.weight", head_full // 2, fill=1.0)  # the full layers' proportional rope
    for i, swa in enumerate(pattern):
        b = f"blk.{i}"
        head = head_swa if swa else head_full
        kv = n_head_kv[i] * head
        m.add(f"{b}.attn_norm.weight", n_embd)
        m.add(f"{b}.attn_q.weight", n_embd, n_head * head)
        if i < n_kv_from:
            m.add(f"{b}.attn_k.weight", n_embd, kv)
            m.add(f"{b}.attn_v.weight", n_embd, kv)
            m.add(f"{b}.attn_k_norm.weight", head)
        m.add(f"{b}.attn_output.weight", n_head * head, n_embd)
        m.add(f"{b}.attn_q_norm.weight", head)
        m.add(f"{b}.post_attention_norm.weight", n_embd)
        m.add(f"{b}.ffn_norm.weight", n_embd)
        _ffn(m, i, n_embd, n_ff)
        m.add(f"{b}.post_ffw_norm.weight", n_embd)
        m.add(f"{b}.inp_gate.weight", n_embd, n_per_layer)
        m.add(f"{b}.proj.weight", n_per_layer, n_embd)
        m.add(f"{b}.post_norm.weight", n_embd)
    return m


# --------------------------------------------------------------------------- gemma3n

GEMMA3N_LAYERS = 22
"""llama.cpp hard-codes ``n_layer_kv_from_start = 20``: layers 20 and 21 reuse KV."""


def gemma3n() -> _Model:
    """Gemma 3n in miniature: 22 layers, pattern 5 (4 local : 1 global), AltUp 4, LAuReL 64.

    ``n_embd_altup`` (256) and the LAuReL rank (64) are fixed in llama.cpp's hparams.
    """
    n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff = GEMMA3N_LAYERS, 64, 2, 1, 32, 128
    n_altup, n_embd_altup, laurel = 4, 256, 64
    m = _Model(
        "gemma3n",
        {
            **_base_kv(n_layer, n_embd),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: n_head_kv,
            K.Attention.KEY_LENGTH: head_dim,
            K.Attention.VALUE_LENGTH: head_dim,
            K.Attention.SLIDING_WINDOW: 256,
            K.Rope.FREQ_BASE: 1e6,
            K.Rope.FREQ_BASE_SWA: 10000.0,
        },
        f32={"altup_proj.weight", "altup_unembd_proj.weight"},
    )
    m.add("token_embd.weight", n_embd, N_VOCAB)
    m.add("altup_proj.weight", n_embd, n_embd, n_altup - 1)
    m.add("altup_unembd_proj.weight", n_embd, n_embd, n_altup - 1)
    m.add("per_layer_token_embd.weight", n_embd_altup * n_layer, N_VOCAB)
    m.add("per_layer_model_proj.weight", n_embd, n_embd_altup * n_layer)
    m.add("per_layer_proj_norm.weight", n_embd_altup)
    m.add("output_norm.weight", n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        _attn(m, i, n_embd, n_head, n_head_kv, head_dim, qk_norm=True)
        m.add(f"{b}.post_attention_norm.weight", n_embd)
        m.add(f"{b}.ffn_norm.weight", n_embd)
        _ffn(m, i, n_embd, n_ff)
        m.add(f"{b}.post_ffw_norm.weight", n_embd)
        m.add(f"{b}.inp_gate.weight", n_embd, n_embd_altup)
        m.add(f"{b}.proj.weight", n_embd_altup, n_embd)
        m.add(f"{b}.post_norm.weight", n_embd)
        m.add(f"{b}.altup_correct_coef.weight", n_altup, n_altup)
        m.add(f"{b}.altup_correct_scale.weight", n_embd)
        m.add(f"{b}.altup_predict_coef.weight", n_altup, n_altup * n_altup)
        m.add(f"{b}.altup_router.weight", n_embd, n_altup)
        m.add(f"{b}.altup_router_norm.weight", n_embd)
        m.add(f"{b}.laurel_l.weight", n_embd, laurel)
        m.add(f"{b}.laurel_r.weight", laurel, n_embd)
        m.add(f"{b}.laurel_post_norm.weight", n_embd)
        m.f32 |= {f"{b}.altup_correct_coef.weight", f"{b}.altup_predict_coef.weight"}
    return m


# --------------------------------------------------------------------------- qwen3.5

QWEN35_LAYERS = 8
"""Layers 3 and 7 are full attention (``full_attention_interval`` 4), the rest delta-net."""


def _qwen35(arch: str) -> _Model:
    """Qwen3.5 (dense or MoE) in miniature: gated delta net + gated attention every 4th layer.

    Delta net: 2 key heads and 4 value heads of 32 (``ssm.group_count`` 2,
    ``ssm.time_step_rank`` 4, ``ssm.state_size`` 32, ``ssm.inner_size`` 128), conv kernel 4.
    Attention: 4 heads of 32 with a gate (q projection twice as wide), 1 KV head.
    """
    n_layer, n_embd, n_head, n_head_kv, head_dim = QWEN35_LAYERS, 128, 4, 1, 32
    d_state, n_group, n_v_heads, d_conv = 32, 2, 4, 4
    key_dim, value_dim = d_state * n_group, d_state * n_v_heads
    conv_dim = 2 * key_dim + value_dim
    n_ff, n_expert, n_ff_exp, n_ff_shexp = 256, 8, 64, 128
    moe = arch == "qwen35moe"
    kv: dict[str, Any] = {
        **_base_kv(n_layer, n_embd),
        K.LLM.FEED_FORWARD_LENGTH: n_ff,
        K.Attention.HEAD_COUNT: n_head,
        K.Attention.HEAD_COUNT_KV: n_head_kv,
        K.Attention.KEY_LENGTH: head_dim,
        K.Attention.VALUE_LENGTH: head_dim,
        K.Rope.DIMENSION_COUNT: head_dim // 2,
        K.Rope.DIMENSION_SECTIONS: [4, 2, 2, 0],
        K.Rope.FREQ_BASE: 1e7,
        K.SSM.CONV_KERNEL: d_conv,
        K.SSM.INNER_SIZE: value_dim,
        K.SSM.STATE_SIZE: d_state,
        K.SSM.TIME_STEP_RANK: n_v_heads,
        K.SSM.GROUP_COUNT: n_group,
        K.LLM.FULL_ATTENTION_INTERVAL: 4,
    }
    if moe:
        kv |= {
            K.LLM.EXPERT_COUNT: n_expert,
            K.LLM.EXPERT_USED_COUNT: 2,
            K.LLM.EXPERT_FEED_FORWARD_LENGTH: n_ff_exp,
            K.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH: n_ff_shexp,
        }
    m = _Model(arch, kv, f32=set())
    _io(m, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        m.add(f"{b}.post_attention_norm.weight", n_embd)
        if (i + 1) % 4 == 0:
            m.add(f"{b}.attn_q.weight", n_embd, 2 * n_head * head_dim)
            m.add(f"{b}.attn_k.weight", n_embd, n_head_kv * head_dim)
            m.add(f"{b}.attn_v.weight", n_embd, n_head_kv * head_dim)
            m.add(f"{b}.attn_output.weight", n_head * head_dim, n_embd)
            m.add(f"{b}.attn_q_norm.weight", head_dim)
            m.add(f"{b}.attn_k_norm.weight", head_dim)
        else:
            m.add(f"{b}.attn_qkv.weight", n_embd, conv_dim)
            m.add(f"{b}.attn_gate.weight", n_embd, value_dim)
            m.add(f"{b}.ssm_conv1d.weight", d_conv, conv_dim)
            m.add(f"{b}.ssm_dt.bias", n_v_heads)
            m.add(f"{b}.ssm_a", n_v_heads, fill=-1.0)
            m.add(f"{b}.ssm_beta.weight", n_embd, n_v_heads)
            m.add(f"{b}.ssm_alpha.weight", n_embd, n_v_heads)
            m.add(f"{b}.ssm_norm.weight", d_state)
            m.add(f"{b}.ssm_out.weight", value_dim, n_embd)
        if moe:
            m.add(f"{b}.ffn_gate_inp.weight", n_embd, n_expert)
            m.add(f"{b}.ffn_gate_exps.weight", n_embd, n_ff_exp, n_expert)
            m.add(f"{b}.ffn_up_exps.weight", n_embd, n_ff_exp, n_expert)
            m.add(f"{b}.ffn_down_exps.weight", n_ff_exp, n_embd, n_expert)
            m.add(f"{b}.ffn_gate_inp_shexp.weight", n_embd)
            _ffn(m, i, n_embd, n_ff_shexp, "_shexp")
        else:
            _ffn(m, i, n_embd, n_ff)
    return m


def qwen35() -> _Model:
    """Qwen3.5 dense in miniature (see ``_qwen35``)."""
    return _qwen35("qwen35")


def qwen35moe() -> _Model:
    """Qwen3.5 MoE in miniature: 8 experts, 2 used, a gated shared expert of 128."""
    return _qwen35("qwen35moe")


# --------------------------------------------------------------------------- deepseek32


def deepseek32() -> _Model:
    """DeepSeek-V3.2 in miniature: MLA as in ``special.deepseek2`` plus the lightning indexer.

    The indexer has 4 heads of 64 (a power of two of at least 64: llama.cpp rotates its
    keys with a Hadamard matrix) and one key head it caches per token (K only, like MLA).
    """
    n_layer, n_dense, n_embd, n_head = 4, 1, 128, 4
    q_lora, kv_lora, n_rot, k_mla, v_mla = 64, 64, 16, 48, 32
    n_ff, n_expert, n_ff_exp = 256, 8, 64
    idx_heads, idx_dim = 4, 64
    m = _Model(
        "deepseek32",
        {
            **_base_kv(n_layer, n_embd),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: 1,
            K.Attention.Q_LORA_RANK: q_lora,
            K.Attention.KV_LORA_RANK: kv_lora,
            K.Attention.KEY_LENGTH: kv_lora + n_rot,
            K.Attention.VALUE_LENGTH: kv_lora,
            K.Attention.KEY_LENGTH_MLA: k_mla,
            K.Attention.VALUE_LENGTH_MLA: v_mla,
            "{arch}.attention.indexer.head_count": idx_heads,
            "{arch}.attention.indexer.key_length": idx_dim,
            "{arch}.attention.indexer.top_k": 64,
            K.Rope.DIMENSION_COUNT: n_rot,
            K.Rope.FREQ_BASE: 10000.0,
            K.LLM.LEADING_DENSE_BLOCK_COUNT: n_dense,
            K.LLM.EXPERT_COUNT: n_expert,
            K.LLM.EXPERT_USED_COUNT: 2,
            K.LLM.EXPERT_SHARED_COUNT: 1,
            K.LLM.EXPERT_FEED_FORWARD_LENGTH: n_ff_exp,
            K.LLM.EXPERT_WEIGHTS_SCALE: 2.5,
            K.LLM.EXPERT_WEIGHTS_NORM: True,
            K.LLM.EXPERT_GATING_FUNC: 2,  # sigmoid
        },
    )
    _io(m, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        m.add(f"{b}.attn_q_a_norm.weight", q_lora)
        m.add(f"{b}.attn_kv_a_norm.weight", kv_lora)
        m.add(f"{b}.attn_q_a.weight", n_embd, q_lora)
        m.add(f"{b}.attn_q_b.weight", q_lora, n_head * k_mla)
        m.add(f"{b}.attn_kv_a_mqa.weight", n_embd, kv_lora + n_rot)
        m.add(f"{b}.attn_k_b.weight", k_mla - n_rot, kv_lora, n_head)
        m.add(f"{b}.attn_v_b.weight", kv_lora, v_mla, n_head)
        m.add(f"{b}.attn_output.weight", n_head * v_mla, n_embd)
        m.add(f"{b}.ffn_norm.weight", n_embd)
        m.add(f"{b}.indexer.k_norm.weight", idx_dim)
        m.add(f"{b}.indexer.k_norm.bias", idx_dim)
        m.add(f"{b}.indexer.proj.weight", n_embd, idx_heads)
        m.add(f"{b}.indexer.attn_k.weight", n_embd, idx_dim)
        m.add(f"{b}.indexer.attn_q_b.weight", q_lora, idx_heads * idx_dim)
        if i < n_dense:
            _ffn(m, i, n_embd, n_ff)
        else:
            _moe(m, i, n_embd, n_ff_exp, n_expert, bias=True)
            _ffn(m, i, n_embd, n_ff_exp, "_shexp")
    return m


# --------------------------------------------------------------------------- t5

T5_ENCODER_LAYERS = 3
T5_DECODER_LAYERS = 2


def t5() -> _Model:
    """T5 in miniature: 3 encoder and 2 decoder blocks, 4 heads of 32, relative buckets 32."""
    n_embd, n_head, head_dim, n_ff, n_bkts = 128, 4, 32, 256, 32
    n_enc, n_dec = T5_ENCODER_LAYERS, T5_DECODER_LAYERS
    m = _Model(
        "t5",
        {
            **_base_kv(n_enc, n_embd),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.KEY_LENGTH: head_dim,
            K.Attention.VALUE_LENGTH: head_dim,
            K.Attention.REL_BUCKETS_COUNT: n_bkts,
            K.LLM.DECODER_START_TOKEN_ID: 0,
            "{arch}.decoder_block_count": n_dec,
        },
    )
    q = n_head * head_dim
    m.add("token_embd.weight", n_embd, N_VOCAB)
    m.add("enc.output_norm.weight", n_embd)
    m.add("dec.output_norm.weight", n_embd)
    m.add("output.weight", n_embd, N_VOCAB)
    for i in range(n_enc):
        b = f"enc.blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        if i == 0:
            m.add(f"{b}.attn_rel_b.weight", n_head, n_bkts)
        for p in ("q", "k", "v"):
            m.add(f"{b}.attn_{p}.weight", n_embd, q)
        m.add(f"{b}.attn_o.weight", q, n_embd)
        m.add(f"{b}.ffn_norm.weight", n_embd)
        m.add(f"{b}.ffn_gate.weight", n_embd, n_ff)
        m.add(f"{b}.ffn_up.weight", n_embd, n_ff)
        m.add(f"{b}.ffn_down.weight", n_ff, n_embd)
    for i in range(n_dec):
        b = f"dec.blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        m.add(f"{b}.cross_attn_norm.weight", n_embd)
        if i == 0:
            m.add(f"{b}.attn_rel_b.weight", n_head, n_bkts)
            m.add(f"{b}.cross_attn_rel_b.weight", n_head, n_bkts)
        for p in ("q", "k", "v"):
            m.add(f"{b}.attn_{p}.weight", n_embd, q)
            m.add(f"{b}.cross_attn_{p}.weight", n_embd, q)
        m.add(f"{b}.attn_o.weight", q, n_embd)
        m.add(f"{b}.cross_attn_o.weight", q, n_embd)
        m.add(f"{b}.ffn_norm.weight", n_embd)
        m.add(f"{b}.ffn_gate.weight", n_embd, n_ff)
        m.add(f"{b}.ffn_up.weight", n_embd, n_ff)
        m.add(f"{b}.ffn_down.weight", n_ff, n_embd)
    m.f32 |= {n for n in m.tensors if "rel_b" in n}
    return m


_DESCRIBE: dict[str, Callable[[], _Model]] = {
    "llama4": llama4,
    "gemma4": gemma4,
    "gemma3n": gemma3n,
    "qwen35": qwen35,
    "qwen35moe": qwen35moe,
    "deepseek32": deepseek32,
    "t5": t5,
}

BUILDERS: dict[str, Callable[[Path], None]] = {
    name: _builder(describe) for name, describe in _DESCRIBE.items()
}
assert N_CTX_TRAIN >= 131072
