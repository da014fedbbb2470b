"""Per-architecture reserve graphs, after ``src/models/<arch>.cpp`` of the vendored llama.cpp.

Each builder takes an :class:`~.llm.LlmGraph` (the shared building blocks) and the
:class:`~app.spec.ModelSpec` and adds the architecture's layers in the order the C++
graph constructor does. Optional weights (biases, Q/K norms, rope factors) are looked up
by name, as ``load_arch_tensors`` creates them ``TENSOR_NOT_REQUIRED``.

``BUILDERS`` maps an architecture name to its builder; an architecture without one has no
graph model (the estimate then says its compute buffer is approximate).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Final

from app.model.spec import ModelSpec
from app.predict.graph import ggml
from app.predict.graph.ggml import Tensor
from app.predict.graph.llm import AttnInput, LlmGraph, RsInput

Builder = Callable[[LlmGraph, ModelSpec], None]


def _head(spec: ModelSpec, il: int) -> tuple[int, int]:
    if spec.is_swa[il]:
        return spec.head_k_swa, spec.head_v_swa
    return spec.head_k_full, spec.head_v_full


def _attn_inputs(lg: LlmGraph, spec: ModelSpec) -> dict[str, AttnInput]:
    """The attention inputs of a KV or iSWA model, keyed by cache (base first, then SWA)."""
    inputs = {"kv": lg.build_attn_inp_kv("kv")}
    if "kv_swa" in lg.p.caches:
        inputs["kv_swa"] = lg.build_attn_inp_kv("kv_swa")
    h0 = _head(spec, 0)
    for name, inp in inputs.items():
        swa = None if "kv_swa" not in inputs else name == "kv_swa"
        hk, hv = _cache_heads(spec, swa)
        lg.add_rot(inp, hk, hv, head0_k=h0[0], head0_v=h0[1])
    return inputs


def _cache_heads(spec: ModelSpec, swa: bool | None) -> tuple[int, int]:
    """The K and V head size all layers of one cache share, or -1 (``n_embd_head_k_all``)."""
    kv = spec.kv_layers or tuple(not r for r in spec.is_recurrent)
    heads = {
        _head(spec, il)
        for il in range(spec.n_layer_all)
        if kv[il] and (swa is None or spec.is_swa[il] == swa)
    }
    ks = {h[0] for h in heads}
    vs = {h[1] for h in heads}
    return (ks.pop() if len(ks) == 1 else -1, vs.pop() if len(vs) == 1 else -1)


def _inp_for(inputs: dict[str, AttnInput], spec: ModelSpec, il: int) -> AttnInput:
    return inputs["kv_swa"] if spec.is_swa[il] and "kv_swa" in inputs else inputs["kv"]


def _dense_or_moe_ffn(
    lg: LlmGraph, spec: ModelSpec, cur: Tensor, il: int, act: str = "silu"
) -> Tensor:
    t = lg.t
    if t("ffn_gate_inp.weight", il) is None:
        return lg.build_ffn(
            cur,
            t("ffn_up.weight", il),
            t("ffn_up.bias", il),
            t("ffn_gate.weight", il),
            t("ffn_gate.bias", il),
            t("ffn_down.weight", il),
            t("ffn_down.bias", il),
            act,
            True,
            il,
        )
    return lg.build_moe_ffn(
        cur,
        il,
        spec.n_expert,
        spec.n_expert_used,
        act,
        bool(lg.hp.get("expert_weights_norm", True)),
        lg.hpf("expert_weights_scale"),
        "softmax",
    )


def _rms(lg: LlmGraph, cur: Tensor, name: str, il: int) -> Tensor:
    """``build_norm(cur, layer.<name>, NULL, LLM_NORM_RMS, il)`` (a no-op weight may be absent)."""
    return lg.build_norm(cur, lg.t(f"{name}.weight", il), None, True, il)


def _out_rms(lg: LlmGraph, cur: Tensor, norm: bool = True) -> Tensor:
    w = lg.t("output_norm.weight")
    b = lg.t("output_norm.bias")
    cur = lg.build_norm(cur, w, b, norm, -1)
    lg.cb(cur, "result_norm", -1)
    return cur


def _lm_head(lg: LlmGraph, cur: Tensor) -> Tensor:
    out = lg.build_lora_mm(lg.output_weight(), cur)
    b = lg.t("output.bias")
    if b is not None:
        out = ggml.add(lg.g, out, b)
    lg.cb(out, "result_output", -1)
    return out


def _softcap(lg: LlmGraph, cur: Tensor) -> Tensor:
    g = lg.g
    cur = ggml.unary(g, cur, "SCALE")
    cur = ggml.unary(g, cur)
    return ggml.unary(g, cur, "SCALE")


def _attention(
    lg: LlmGraph,
    spec: ModelSpec,
    inputs: dict[str, AttnInput],
    cur: Tensor,
    inp_pos: Tensor,
    il: int,
    *,
    qk_norm: bool = False,
    rope: bool = True,
    q_scale: bool = False,
    sinks: Tensor | None = None,
    soft_cap: bool = False,
    q_mul: Tensor | None = None,
) -> Tensor:
    """Q/K/V, optional per-head norms, RoPE, the cache and attention, the output proj.

    ``q_mul``: a per-token factor Q is multiplied by after RoPE (mistral3's temperature)."""
    g = lg.g
    head_k, head_v = _head(spec, il)
    factors = lg.t("rope_freqs.weight", il) or lg.t("rope_factors_long.weight", il)
    q, k, v = lg.build_qkv(il, cur, head_k, spec.n_head[il], head_k, spec.n_head_kv[il])
    if qk_norm:
        q = _rms(lg, q, "attn_q_norm", il)
    if rope:
        q = ggml.rope(g, q, inp_pos, factors)
    if qk_norm:
        k = _rms(lg, k, "attn_k_norm", il)
    if rope:
        k = ggml.rope(g, k, inp_pos, factors)
    if q_scale:
        q = ggml.unary(g, q, "SCALE")
    if q_mul is not None:
        q = ggml.mul(g, q, q_mul)
    return lg.build_attn(
        _inp_for(inputs, spec, il),
        lg.t("attn_output.weight", il),
        lg.t("attn_output.bias", il),
        q,
        k,
        v,
        il,
        head_k,
        head_v,
        spec.n_head_kv[il],
        sinks=sinks,
        soft_cap=soft_cap,
    )


def build_llama(
    lg: LlmGraph, spec: ModelSpec, qk_norm: bool = False, temp_scale: bool = False
) -> None:
    """``src/models/llama.cpp``; also qwen2 (output bias), qwen3/qwen3moe (Q/K norms) and
    mistral3 (``temp_scale``: ``build_inp_attn_scale``, Q multiplied by it after RoPE)."""
    g = lg.g
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    attn_scale = g.input(ggml.F32, 1, 1, lg.n_tokens, name="inp_attn_scale") if temp_scale else None
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    for il in lg.layers:
        inp_sa = inp_l
        cur = _rms(lg, inp_l, "attn_norm", il)
        cur = _attention(lg, spec, inputs, cur, inp_pos, il, qk_norm=qk_norm, q_mul=attn_scale)
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_sa = ggml.get_rows(g, inp_sa, out_ids)
        ffn_inp = ggml.add(g, cur, inp_sa)
        cur = _rms(lg, ffn_inp, "ffn_norm", il)
        cur = _dense_or_moe_ffn(lg, spec, cur, il)
        cur = ggml.add(g, cur, ffn_inp)
        lg.cb(cur, "l_out", il)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    lg.finish(_lm_head(lg, embd), embd)


def build_mistral3(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/mistral3.cpp``: the llama graph, plus (when ``attention.temperature_scale``
    is set, as in Ministral 3) an ``inp_attn_scale`` input that scales Q after RoPE."""
    build_llama(lg, spec, temp_scale=bool(lg.hpf("attention.temperature_scale")))


def build_qwen3(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/qwen3.cpp`` and ``qwen3moe.cpp``: llama with per-head Q/K RMS norms."""
    build_llama(lg, spec, qk_norm=True)


def build_deci(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/deci.cpp``: per-layer heads; no-attention and linear-attention layers."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    for il in lg.layers:
        inp_sa = inp_l
        n_head, n_head_kv, n_ff = spec.n_head[il], spec.n_head_kv[il], spec.n_ff[il]
        cur = inp_l if n_head == 0 else _rms(lg, inp_l, "attn_norm", il)
        if n_head > 0 and n_head_kv == 0:
            cur = lg.build_lora_mm(lg.req("attn_output.weight", il), cur)
        elif n_head > 0:
            cur = _attention(lg, spec, inputs, cur, inp_pos, il)
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_sa = ggml.get_rows(g, inp_sa, out_ids)
        if n_ff == 0:
            continue
        ffn_inp = ggml.add(g, cur, inp_sa) if n_head > 0 else cur
        cur = _rms(lg, ffn_inp, "ffn_norm", il)
        cur = lg.build_ffn(
            cur,
            t("ffn_up.weight", il),
            t("ffn_up.bias", il),
            t("ffn_gate.weight", il),
            t("ffn_gate.bias", il),
            t("ffn_down.weight", il),
            t("ffn_down.bias", il),
            "silu",
            True,
            il,
        )
        cur = ggml.add(g, cur, ffn_inp)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    lg.finish(_lm_head(lg, embd), embd)


def build_phi3(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/phi3.cpp``: fused QKV, Q scaled before attention, fused up+gate."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    for il in lg.layers:
        residual = inp_l
        cur = lg.build_norm(inp_l, t("attn_norm.weight", il), t("attn_norm.bias", il), True, il)
        cur = _attention(lg, spec, inputs, cur, inp_pos, il, q_scale=True)
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            residual = ggml.get_rows(g, residual, out_ids)
        cur = ggml.add(g, cur, residual)
        residual = cur
        cur = lg.build_norm(cur, t("ffn_norm.weight", il), t("ffn_norm.bias", il), True, il)
        if t("ffn_gate_inp.weight", il) is None:
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                None,
                None,
                None,
                t("ffn_down.weight", il),
                None,
                "swiglu",
                False,
                il,
            )
        else:
            cur = lg.build_moe_ffn(
                cur,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "silu",
                True,
                lg.hpf("expert_weights_scale"),
                "softmax",
            )
        cur = ggml.add(g, residual, cur)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    lg.finish(_lm_head(lg, embd), embd)


def build_gemma2(lg: LlmGraph, spec: ModelSpec, gemma3: bool = False) -> None:
    """``src/models/gemma2.cpp`` / ``gemma3.cpp``: scaled embeddings, sandwich norms, GELU."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_l = ggml.unary(g, inp_l, "SCALE")
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    for il in lg.layers:
        cur = _rms(lg, inp_l, "attn_norm", il)
        cur = _attention(
            lg, spec, inputs, cur, inp_pos, il, qk_norm=gemma3, q_scale=True, soft_cap=not gemma3
        )
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_l = ggml.get_rows(g, inp_l, out_ids)
        cur = _rms(lg, cur, "post_attention_norm", il)
        sa_out = ggml.add(g, cur, inp_l)
        cur = _rms(lg, sa_out, "ffn_norm", il)
        cur = lg.build_ffn(
            cur,
            t("ffn_up.weight", il),
            None,
            t("ffn_gate.weight", il),
            None,
            t("ffn_down.weight", il),
            None,
            "gelu",
            True,
            il,
        )
        cur = lg.build_norm(cur, t("post_ffw_norm.weight", il), None, True, -1)
        cur = ggml.add(g, cur, sa_out)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    cur = _lm_head(lg, embd)
    if not gemma3 or lg.hpf("final_logit_softcapping") != 0.0:
        cur = _softcap(lg, cur)
    lg.finish(cur, embd)


def build_gemma3(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/gemma3.cpp``."""
    build_gemma2(lg, spec, gemma3=True)


def build_cohere2(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/cohere2.cpp``: parallel attention and FFN on one LayerNorm; RoPE on SWA."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    for il in lg.layers:
        cur = lg.build_norm(inp_l, t("attn_norm.weight", il), None, False, il)
        ffn_inp = cur
        cur = _attention(lg, spec, inputs, cur, inp_pos, il, rope=spec.is_swa[il])
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_l = ggml.get_rows(g, inp_l, out_ids)
            ffn_inp = ggml.get_rows(g, ffn_inp, out_ids)
        attn_out = cur
        cur = lg.build_ffn(
            ffn_inp,
            t("ffn_up.weight", il),
            None,
            t("ffn_gate.weight", il),
            None,
            t("ffn_down.weight", il),
            None,
            "silu",
            True,
            il,
        )
        cur = ggml.add(g, cur, inp_l)
        cur = ggml.add(g, cur, attn_out)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = lg.build_norm(inp_l, t("output_norm.weight"), None, False, -1)
    cur = _lm_head(lg, embd)
    if lg.hpf("logit_scale") != 0.0:
        cur = ggml.unary(g, cur, "SCALE")
    lg.finish(cur, embd)


def build_gpt_oss(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/openai-moe.cpp``: attention sinks, biased experts, SwiGLU-OAI."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    for il in lg.layers:
        inp_sa = inp_l
        cur = _rms(lg, inp_l, "attn_norm", il)
        cur = _attention(lg, spec, inputs, cur, inp_pos, il, sinks=t("attn_sinks.weight", il))
        ffn_inp = ggml.add(g, cur, inp_sa)
        cur = _rms(lg, ffn_inp, "post_attention_norm", il)
        cur = lg.build_moe_ffn(
            cur,
            il,
            spec.n_expert,
            spec.n_expert_used,
            "swiglu_oai",
            False,
            lg.hpf("expert_weights_scale"),
            "softmax_weight",
            gate_inp_b=t("ffn_gate_inp.bias", il),
            up_b=t("ffn_up_exps.bias", il),
            gate_b=t("ffn_gate_exps.bias", il),
            down_b=t("ffn_down_exps.bias", il),
        )
        cur = ggml.add(g, cur, ffn_inp)
        inp_l = cur
        lg.layer_done(il, cur)
    # t_h_nextn: the last hidden state is a graph output
    inp_l.flags |= ggml.FLAG_OUTPUT
    cur = ggml.get_rows(g, inp_l, out_ids)
    embd = _out_rms(lg, cur)
    lg.finish(_lm_head(lg, embd), embd)


def _int(lg: LlmGraph, key: str, default: int = 0) -> int:
    return int(lg.hpf(key, float(default)))


def build_deepseek2(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/deepseek2.cpp``: MLA (absorbed, K-only cache) or plain KV; shared experts."""
    g = lg.g
    t = lg.t
    n_tokens = lg.n_tokens
    is_mla = spec.is_mla
    head_k = _int(lg, "attention.key_length_mla", spec.head_k_full)
    head_v = _int(lg, "attention.value_length_mla", spec.head_v_full)
    n_rope = spec.n_rot
    n_nope = head_k - n_rope
    rank = spec.kv_lora_rank
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    attn_scale = None
    if lg.hpf("attention.temperature_scale") != 0.0:
        attn_scale = g.input(ggml.F32, 1, 1, n_tokens, name="inp_attn_scale")
    inp_pos = lg.build_inp_pos()
    inp = lg.build_attn_inp_kv("kv", with_v=not is_mla)
    if not is_mla:
        lg.add_rot(inp, head_k, head_v)
    # MLA takes build_attn_inp_k (src/llama-graph.cpp, build_attn_inp_k_impl), which makes
    # no attn_inp_k_rot: a quantized K cache of 64-multiple heads (576 in DeepSeek-V3,
    # Kimi K2) is not rotated although llama_kv_cache logs attn_rot_k = 1
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    n_dense = _int(lg, "leading_dense_block_count")
    gating = {2: "sigmoid"}.get(_int(lg, "expert_gating_func", 1), "softmax")
    rs = ggml.row_size
    for il in lg.layers:
        inp_sa = inp_l
        n_head = spec.n_head[il]
        cur = _rms(lg, inp_l, "attn_norm", il)
        wq = t("attn_q.weight", il)
        if wq is None:
            q = ggml.mul_mat(g, lg.req("attn_q_a.weight", il), cur)
            q = _rms(lg, q, "attn_q_a_norm", il)
            q = ggml.mul_mat(g, lg.req("attn_q_b.weight", il), q)
        else:
            q = ggml.mul_mat(g, wq, cur)
        q = ggml.reshape(g, q, head_k, n_head, n_tokens)
        kv_pe = ggml.mul_mat(g, lg.req("attn_kv_a_mqa.weight", il), cur)
        row = rs(kv_pe.type, rank + n_rope)
        kv_cmpr = ggml.view_2d(g, kv_pe, rank, n_tokens, row, 0)
        k_pe = ggml.view_3d(g, kv_pe, n_rope, 1, n_tokens, row, row, rs(kv_pe.type, rank))
        k_pe = ggml.rope(g, k_pe, inp_pos)
        kv_cmpr = _rms(lg, kv_cmpr, "attn_kv_a_norm", il)
        if is_mla:
            q_nope = ggml.view_3d(g, q, n_nope, n_head, n_tokens, q.nb[1], q.nb[2], 0)
            q_pe = ggml.view_3d(
                g, q, n_rope, n_head, n_tokens, q.nb[1], q.nb[2], rs(q.type, n_nope)
            )
            q_pe = ggml.rope(g, q_pe, inp_pos)
            q_nope = ggml.permute(g, q_nope, 0, 2, 1, 3)
            q_abs = ggml.mul_mat(g, lg.req("attn_k_b.weight", il), q_nope)
            q_abs = ggml.permute(g, q_abs, 0, 2, 1, 3)
            q_cur = ggml.concat(g, q_abs, q_pe, 0)
            kv_cmpr = ggml.reshape(g, kv_cmpr, rank, 1, n_tokens)
            k_cur = ggml.concat(g, kv_cmpr, k_pe, 0)
            v_cur = kv_cmpr
            if attn_scale is not None:
                q_cur = ggml.mul(g, q_cur, attn_scale)
            cur = lg.build_attn(
                inp,
                t("attn_output.weight", il),
                None,
                q_cur,
                k_cur,
                v_cur,
                il,
                rank + n_rope,
                rank,
                1,
                v_mla=t("attn_v_b.weight", il),
                k_only=True,
            )
        else:
            kv = ggml.mul_mat(g, lg.req("attn_kv_b.weight", il), kv_cmpr)
            kvr = rs(kv.type, n_nope + head_v)
            k_nope = ggml.view_3d(g, kv, n_nope, n_head, n_tokens, kvr, kvr * n_head, 0)
            v_cur = ggml.view_3d(
                g, kv, head_v, n_head, n_tokens, kvr, kvr * n_head, rs(kv.type, n_nope)
            )
            v_cur = ggml.cont(g, v_cur)
            q_cur = ggml.rope(g, q, inp_pos)
            k_cur = ggml.concat(g, k_nope, ggml.repeat_4d(g, k_pe, n_rope, n_head, n_tokens, 1), 0)
            if attn_scale is not None:
                q_cur = ggml.mul(g, q_cur, attn_scale)
            cur = lg.build_attn(
                inp,
                t("attn_output.weight", il),
                None,
                q_cur,
                k_cur,
                v_cur,
                il,
                head_k,
                head_v,
                n_head,
            )
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_sa = ggml.get_rows(g, inp_sa, out_ids)
        ffn_inp = ggml.add(g, cur, inp_sa)
        cur = _rms(lg, ffn_inp, "ffn_norm", il)
        if il < n_dense:
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                None,
                t("ffn_gate.weight", il),
                None,
                t("ffn_down.weight", il),
                None,
                "silu",
                True,
                il,
            )
        else:
            moe = lg.build_moe_ffn(
                cur,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "silu",
                bool(lg.hp.get("expert_weights_norm", False)),
                lg.hpf("expert_weights_scale"),
                gating,
                exp_probs_b=t("exp_probs_b.bias", il),
                n_expert_groups=_int(lg, "expert_group_count"),
                n_group_used=_int(lg, "expert_group_used_count"),
            )
            shexp = lg.build_ffn(
                cur,
                t("ffn_up_shexp.weight", il),
                None,
                t("ffn_gate_shexp.weight", il),
                None,
                t("ffn_down_shexp.weight", il),
                None,
                "silu",
                True,
                il,
            )
            cur = ggml.add(g, moe, shexp)
        cur = ggml.add(g, cur, ffn_inp)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    embd.flags |= ggml.FLAG_OUTPUT  # t_h_nextn
    out = ggml.mul_mat(g, lg.output_weight(), embd)
    lg.finish(out, embd)


def _mamba_layer(lg: LlmGraph, spec: ModelSpec, inp: RsInput, cur: Tensor, il: int) -> Tensor:
    """``llm_build_mamba_base::build_mamba_layer`` (Mamba-1)."""
    g = lg.g
    t = lg.t
    d_conv, d_inner, d_state = spec.ssm_d_conv, spec.ssm_d_inner, spec.ssm_d_state
    dt_rank = _int(lg, "ssm.time_step_rank")
    n_head, head_dim = d_inner, 1
    n_seqs = lg.n_seqs
    n_seq_tokens = lg.n_tokens // n_seqs
    conv_all = lg.state_tensor("cache_r_l", il, spec.n_embd_r())
    ssm_all = lg.state_tensor("cache_s_l", il, spec.n_embd_s())
    conv = lg.build_rs(inp, conv_all, spec.n_embd_r(), n_seqs)
    conv = ggml.reshape(g, conv, d_conv - 1, d_inner, n_seqs)
    cur = ggml.reshape(g, cur, cur.ne[0], n_seq_tokens, n_seqs)
    xz = ggml.mul_mat(g, lg.req("ssm_in.weight", il), cur)
    x = ggml.view_3d(g, xz, d_inner, xz.ne[1], xz.ne[2], xz.nb[1], xz.nb[2], 0)
    z = ggml.view_3d(g, xz, d_inner, xz.ne[1], xz.ne[2], xz.nb[1], xz.nb[2], d_inner * 4)
    conv_x = ggml.concat(g, conv, ggml.transpose(g, x), 0)
    last = ggml.view_3d(
        g,
        conv_x,
        d_conv - 1,
        d_inner,
        n_seqs,
        conv_x.nb[1],
        conv_x.nb[2],
        n_seq_tokens * conv_x.nb[0],
    )
    g.expand(ggml.cpy(g, last, ggml.view_1d(g, conv_all, (d_conv - 1) * d_inner * n_seqs, 0)))
    x = ggml.ssm_conv(g, conv_x, lg.req("ssm_conv1d.weight", il))
    x = ggml.add(g, x, lg.req("ssm_conv1d.bias", il))
    x = ggml.unary(g, x)
    x_db = ggml.mul_mat(g, lg.req("ssm_x.weight", il), x)
    dt = ggml.view_3d(g, x_db, dt_rank, n_seq_tokens, n_seqs, x_db.nb[1], x_db.nb[2], 0)
    b = ggml.view_4d(
        g,
        x_db,
        (d_state, 1, n_seq_tokens, n_seqs),
        d_state * x_db.nb[0],
        x_db.nb[1],
        x_db.nb[2],
        4 * dt_rank,
    )
    c = ggml.view_4d(
        g,
        x_db,
        (d_state, 1, n_seq_tokens, n_seqs),
        d_state * x_db.nb[0],
        x_db.nb[1],
        x_db.nb[2],
        4 * (dt_rank + d_state),
    )
    dt_norm = t("ssm_dt_norm.weight", il)
    if bool(lg.hp.get("ssm.dt_b_c_rms", False)) or (
        dt_norm is not None
        and t("ssm_b_norm.weight", il) is not None
        and t("ssm_c_norm.weight", il) is not None
    ):
        dt = lg.build_norm(dt, dt_norm, None, True, il)
        b = lg.build_norm(b, t("ssm_b_norm.weight", il), None, True, il)
        c = lg.build_norm(c, t("ssm_c_norm.weight", il), None, True, il)
    else:
        dt = ggml.cont(g, dt)
    dt = ggml.mul_mat(g, lg.req("ssm_dt.weight", il), dt)
    dt = ggml.add(g, dt, lg.req("ssm_dt.bias", il))
    cur = x
    x = ggml.reshape(g, x, head_dim, n_head, n_seq_tokens, n_seqs)
    a = lg.req("ssm_a", il)
    n_rs = lg.p.n_rs

    def get_ssm_rows(gg: ggml.Graph, states: Tensor, ids: Tensor) -> Tensor:
        ssm = ggml.reshape(gg, states, d_state, head_dim, n_head, n_rs)
        return ggml.ssm_scan(gg, ssm, x, dt, a, b, c, ids)

    y_ssm = lg.build_rs(inp, ssm_all, spec.n_embd_s(), n_seqs, get_ssm_rows)
    g.expand(
        ggml.cpy(
            g,
            ggml.view_1d(g, y_ssm, d_state * d_inner * n_seqs, x.nb[3] * x.ne[3]),
            ggml.view_1d(g, ssm_all, d_state * d_inner * n_seqs, 0),
        )
    )
    y = ggml.view_3d(g, y_ssm, d_inner, n_seq_tokens, n_seqs, x.nb[2], x.nb[3], 0)
    y = ggml.add(g, y, ggml.mul(g, cur, lg.req("ssm_d", il)))
    y = ggml.glu(g, ggml.cont(g, z), y)
    cur = ggml.mul_mat(g, lg.req("ssm_out.weight", il), y)
    return ggml.reshape(g, cur, cur.ne[0], n_seq_tokens * n_seqs)


def _mamba2_layer(lg: LlmGraph, spec: ModelSpec, inp: RsInput, cur: Tensor, il: int) -> Tensor:
    """``llm_build_mamba_base::build_mamba2_layer``."""
    g = lg.g
    d_conv, d_inner, d_state = spec.ssm_d_conv, spec.ssm_d_inner, spec.ssm_d_state
    n_head = _int(lg, "ssm.time_step_rank")
    head_dim = d_inner // n_head
    n_group = spec.ssm_n_group
    n_seqs = lg.n_seqs
    n_seq_tokens = lg.n_tokens // n_seqs
    conv_dim = d_inner + 2 * n_group * d_state
    conv_all = lg.state_tensor("cache_r_l", il, spec.n_embd_r())
    ssm_all = lg.state_tensor("cache_s_l", il, spec.n_embd_s())
    n_rs = lg.p.n_rs
    conv = lg.build_rs(inp, conv_all, spec.n_embd_r(), n_seqs)
    conv = ggml.reshape(g, conv, d_conv - 1, conv_dim, n_seqs)
    zx = ggml.mul_mat(g, lg.req("ssm_in.weight", il), cur)
    zx = ggml.reshape(g, zx, zx.ne[0], n_seq_tokens, n_seqs)
    z = ggml.view_4d(
        g, zx, (head_dim, n_head, n_seq_tokens, n_seqs), head_dim * zx.nb[0], zx.nb[1], zx.nb[2], 0
    )
    xbc = ggml.view_3d(g, zx, conv_dim, n_seq_tokens, n_seqs, zx.nb[1], zx.nb[2], d_inner * 4)
    dt = ggml.view_3d(
        g,
        zx,
        n_head,
        n_seq_tokens,
        n_seqs,
        zx.nb[1],
        zx.nb[2],
        (2 * d_inner + 2 * n_group * d_state) * 4,
    )
    conv_x = ggml.concat(g, conv, ggml.transpose(g, xbc), 0)
    row_count = (d_conv - 1) * conv_dim
    last = ggml.view_3d(
        g,
        conv_x,
        d_conv - 1,
        conv_dim,
        n_seqs,
        conv_x.nb[1],
        conv_x.nb[2],
        n_seq_tokens * conv_x.nb[0],
    )
    g.expand(ggml.cpy(g, last, ggml.view_2d(g, conv_all, row_count, n_seqs, conv_all.nb[1], 0)))
    xbc = ggml.ssm_conv(g, conv_x, lg.req("ssm_conv1d.weight", il))
    xbc = ggml.add(g, xbc, lg.req("ssm_conv1d.bias", il))
    xbc = ggml.unary(g, xbc)
    x = ggml.view_4d(
        g,
        xbc,
        (head_dim, n_head, n_seq_tokens, n_seqs),
        head_dim * xbc.nb[0],
        xbc.nb[1],
        xbc.nb[2],
        0,
    )
    b = ggml.view_4d(
        g,
        xbc,
        (d_state, n_group, n_seq_tokens, n_seqs),
        d_state * xbc.nb[0],
        xbc.nb[1],
        xbc.nb[2],
        d_inner * 4,
    )
    c = ggml.view_4d(
        g,
        xbc,
        (d_state, n_group, n_seq_tokens, n_seqs),
        d_state * xbc.nb[0],
        xbc.nb[1],
        xbc.nb[2],
        (d_inner + n_group * d_state) * 4,
    )
    dt = ggml.add(g, ggml.cont(g, dt), lg.req("ssm_dt.bias", il))
    a = lg.req("ssm_a", il)
    slots = ssm_all.ne[1]

    def get_ssm_rows(gg: ggml.Graph, states: Tensor, ids: Tensor) -> Tensor:
        ssm = ggml.reshape(gg, states, d_state, head_dim, n_head, slots)
        return ggml.ssm_scan(gg, ssm, x, dt, a, b, c, ids)

    y_ssm = lg.build_rs(inp, ssm_all, spec.n_embd_s(), n_seqs, get_ssm_rows)
    big_d = d_state * d_inner
    row = 4 * big_d
    g.expand(
        ggml.cpy(
            g,
            ggml.view_3d(g, y_ssm, big_d, n_seqs, 1, row, row * n_seqs, x.nelements() * 4),
            ggml.view_3d(g, ssm_all, big_d, n_seqs, 1, ssm_all.nb[1], n_rs * row, 0),
        )
    )
    y = ggml.view_4d(
        g,
        y_ssm,
        (head_dim, n_head, n_seq_tokens, n_seqs),
        x.nb[1],
        n_head * x.nb[1],
        n_seq_tokens * n_head * x.nb[1],
        0,
    )
    y = ggml.add(g, y, ggml.mul(g, x, lg.req("ssm_d", il)))
    y = ggml.glu(g, ggml.cont(g, z), y)
    norm = lg.t("ssm_norm.weight", il)
    if norm is not None:
        y = ggml.reshape(g, y, d_inner // n_group, n_group, n_seq_tokens, n_seqs)
        y = lg.build_norm(y, norm, None, True, il)
    y = ggml.reshape(g, y, d_inner, n_seq_tokens * n_seqs)
    return ggml.mul_mat(g, lg.req("ssm_out.weight", il), y)


def build_mamba(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/mamba.cpp`` (Mamba-1 and Mamba-2)."""
    g = lg.g
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    rs_inp = lg.build_rs_inp()
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    for il in lg.layers:
        cur = _rms(lg, inp_l, "attn_norm", il)
        if spec.arch == "mamba2":
            cur = _mamba2_layer(lg, spec, rs_inp, cur, il)
        else:
            cur = _mamba_layer(lg, spec, rs_inp, cur, il)
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_l = ggml.get_rows(g, inp_l, out_ids)
        cur = ggml.add(g, cur, inp_l)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    lg.finish(_lm_head(lg, embd), embd)


def build_granitehybrid(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/granite-hybrid.cpp``: Mamba-2 and attention layers, scaled residuals."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"), scale=lg.hpf("embedding_scale") != 0.0)
    rs_inp = lg.build_rs_inp()
    inp = lg.build_attn_inp_kv("kv")
    lg.add_rot(inp, spec.head_k_full, spec.head_v_full)
    out_ids = lg.build_inp_out_ids()
    rope = bool(lg.hp.get("rope.scaling.finetuned", True))
    inp_pos = lg.build_inp_pos() if rope else None
    residual = lg.hpf("residual_scale") != 0.0
    n_layer = spec.n_layer
    for il in lg.layers:
        inp_sa = inp_l
        cur = _rms(lg, inp_l, "attn_norm", il)
        if spec.is_recurrent[il]:
            cur = _mamba2_layer(lg, spec, rs_inp, cur, il)
        else:
            head = spec.head_v_full
            q, k, v = lg.build_qkv(il, cur, head, spec.n_head[il], head, spec.n_head_kv[il])
            if inp_pos is not None:
                factors = t("rope_freqs.weight", il)
                q = ggml.rope(g, q, inp_pos, factors)
                k = ggml.rope(g, k, inp_pos, factors)
            cur = lg.build_attn(
                inp,
                t("attn_output.weight", il),
                t("attn_output.bias", il),
                q,
                k,
                v,
                il,
                head,
                head,
                spec.n_head_kv[il],
            )
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_sa = ggml.get_rows(g, inp_sa, out_ids)
        if residual:
            cur = ggml.unary(g, cur, "SCALE")
        ffn_inp = ggml.add(g, cur, inp_sa)
        cur = _rms(lg, ffn_inp, "ffn_norm", il)
        if t("ffn_gate_inp.weight", il) is None:
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                t("ffn_up.bias", il),
                t("ffn_gate.weight", il),
                t("ffn_gate.bias", il),
                t("ffn_down.weight", il),
                t("ffn_down.bias", il),
                "silu",
                True,
                il,
            )
        else:
            moe = lg.build_moe_ffn(
                cur,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "silu",
                True,
                lg.hpf("expert_weights_scale"),
                "softmax",
            )
            if t("ffn_up_shexp.weight", il) is not None:
                sh = lg.build_ffn(
                    cur,
                    t("ffn_up_shexp.weight", il),
                    None,
                    t("ffn_gate_shexp.weight", il),
                    None,
                    t("ffn_down_shexp.weight", il),
                    None,
                    "silu",
                    True,
                    il,
                )
                cur = ggml.add(g, moe, sh)
            else:
                cur = moe
        if residual:
            cur = ggml.unary(g, cur, "SCALE")
        cur = ggml.add(g, cur, ffn_inp)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    cur = _lm_head(lg, embd)
    if lg.hpf("logit_scale") != 0.0:
        cur = ggml.unary(g, cur, "SCALE")
    lg.finish(cur, embd)


def build_lfm2(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/lfm2.cpp``: gated short convolutions and attention (iSWA when set)."""
    g = lg.g
    t = lg.t
    cur = lg.build_inp_embd(lg.req("token_embd.weight"))
    g.expand(cur)
    rs_inp = lg.build_rs_inp()
    inputs = _attn_inputs(lg, spec)
    inp_pos = lg.build_inp_pos()
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    n_dense = _int(lg, "leading_dense_block_count", n_layer)
    n_embd = spec.n_embd
    n_seqs = lg.n_seqs
    n_seq_tokens = lg.n_tokens // n_seqs
    d_conv = spec.shortconv_l_cache - 1
    for il in lg.layers:
        prev = cur
        cur = _rms(lg, cur, "attn_norm", il)
        if spec.is_recurrent[il]:
            x3 = ggml.reshape(g, cur, cur.ne[0], n_seq_tokens, n_seqs)
            bcx = ggml.mul_mat(g, lg.req("shortconv.in_proj.weight", il), x3)
            chunk = bcx.ne[0] // 3
            b = ggml.view_3d(g, bcx, chunk, bcx.ne[1], bcx.ne[2], bcx.nb[1], bcx.nb[2], 0)
            c = ggml.view_3d(g, bcx, chunk, bcx.ne[1], bcx.ne[2], bcx.nb[1], bcx.nb[2], chunk * 4)
            x = ggml.view_3d(
                g, bcx, chunk, bcx.ne[1], bcx.ne[2], bcx.nb[1], bcx.nb[2], 2 * chunk * 4
            )
            bx = ggml.transpose(g, ggml.mul(g, b, x))
            state = lg.state_tensor("cache_r_l", il, spec.n_embd_r())
            conv = lg.build_rs(rs_inp, state, spec.n_embd_r(), n_seqs)
            conv = ggml.reshape(g, conv, d_conv, n_embd, n_seqs)
            bx = ggml.concat(g, conv, bx, 0)
            snap = ggml.view_3d(
                g, bx, d_conv, bx.ne[1], bx.ne[2], bx.nb[1], bx.nb[2], (bx.ne[0] - d_conv) * 4
            )
            g.expand(
                ggml.cpy(g, snap, ggml.view_2d(g, state, d_conv * n_embd, n_seqs, state.nb[1], 0))
            )
            conv_out = ggml.ssm_conv(g, bx, lg.req("shortconv.conv.weight", il))
            y = ggml.mul(g, c, conv_out)
            y = ggml.mul_mat(g, lg.req("shortconv.out_proj.weight", il), y)
            cur = ggml.reshape(g, y, y.ne[0], n_seq_tokens * n_seqs)
        else:
            cur = _attention(lg, spec, inputs, cur, inp_pos, il, qk_norm=True)
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            prev = ggml.get_rows(g, prev, out_ids)
        cur = ggml.add(g, prev, cur)
        ffn_norm = _rms(lg, cur, "ffn_norm", il)
        if il >= n_dense:
            gating = {2: "sigmoid"}.get(_int(lg, "expert_gating_func", 1), "softmax")
            ffn_out = lg.build_moe_ffn(
                ffn_norm,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "silu",
                True,
                lg.hpf("expert_weights_scale"),
                gating,
                exp_probs_b=t("exp_probs_b.bias", il),
            )
        else:
            ffn_out = lg.build_ffn(
                ffn_norm,
                t("ffn_up.weight", il),
                None,
                t("ffn_gate.weight", il),
                None,
                t("ffn_down.weight", il),
                None,
                "silu",
                True,
                il,
            )
        cur = ggml.add(g, cur, ffn_out)
        lg.layer_done(il, cur)
    embd = lg.build_norm(cur, t("token_embd_norm.weight"), None, True, -1)
    lg.finish(lg.build_lora_mm(lg.output_weight(), embd), embd)


def _ln(lg: LlmGraph, cur: Tensor, name: str, il: int) -> Tensor:
    """``build_norm(cur, <name>.weight, <name>.bias, LLM_NORM, il)``."""
    return lg.build_norm(cur, lg.t(f"{name}.weight", il), lg.t(f"{name}.bias", il), False, il)


def build_rwkv(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/rwkv6.cpp`` / ``rwkv7.cpp`` with ``rwkv6-base.cpp`` / ``rwkv7-base.cpp``."""
    g = lg.g
    t = lg.t
    v7 = spec.arch == "rwkv7"
    n_embd = spec.n_embd
    n_tokens = lg.n_tokens
    n_seqs = lg.n_seqs
    n_seq_tokens = n_tokens // n_seqs
    head_size = spec.wkv_head_size
    n_head = n_embd // head_size
    tsc = spec.token_shift_count
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_l = lg.build_norm(inp_l, t("token_embd_norm.weight"), t("token_embd_norm.bias"), False, 0)
    rs_inp = lg.build_rs_inp()
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    rescale = _int(lg, "rescale_every_n_layers")
    v_first: list[Tensor] = []

    def unary(x: Tensor) -> Tensor:
        return ggml.unary(g, x)

    def time_mix6(cur: Tensor, x_prev: Tensor, il: int) -> Tensor:
        sx = ggml.binary(g, "SUB", x_prev, cur)
        sx = ggml.reshape(g, sx, n_embd, n_tokens)
        cur = ggml.reshape(g, cur, n_embd, n_tokens)
        xxx = ggml.add(g, ggml.mul(g, sx, lg.req("time_mix_lerp_x.weight", il)), cur)
        w1 = lg.req("time_mix_w1.weight", il)
        xxx = ggml.reshape(g, unary(ggml.mul_mat(g, w1, xxx)), w1.ne[1] // 5, 1, 5, n_tokens)
        xxx = ggml.cont(g, ggml.permute(g, xxx, 0, 1, 3, 2))
        w2 = lg.req("time_mix_w2.weight", il)
        xxx = ggml.mul_mat(g, ggml.reshape(g, w2, w2.ne[0], w2.ne[1], 1, 5), xxx)
        fused = t("time_mix_lerp_fused.weight", il)
        off = n_embd * n_tokens * 4
        if fused is not None:
            sx = ggml.reshape(g, sx, n_embd, 1, n_tokens)
            cur = ggml.reshape(g, cur, n_embd, 1, n_tokens)
            xxx = ggml.add(g, ggml.mul(g, ggml.add(g, xxx, fused), sx), cur)
            xw, xk, xv, xr, xg = (
                ggml.view_2d(g, xxx, n_embd, n_tokens, xxx.nb[1], i * off) for i in range(5)
            )
        else:
            views = [ggml.view_2d(g, xxx, n_embd, n_tokens, xxx.nb[1], i * off) for i in range(5)]
            mixed = []
            for view, name in zip(views, "wkvrg", strict=True):
                lerp = lg.req(f"time_mix_lerp_{name}.weight", il)
                mixed.append(ggml.add(g, ggml.mul(g, ggml.add(g, view, lerp), sx), cur))
            xw, xk, xv, xr, xg = mixed
        r = ggml.mul_mat(g, lg.req("time_mix_receptance.weight", il), xr)
        k = ggml.mul_mat(g, lg.req("time_mix_key.weight", il), xk)
        v = ggml.mul_mat(g, lg.req("time_mix_value.weight", il), xv)
        for name in ("receptance", "key", "value"):
            b = t(f"time_mix_{name}.bias", il)
            if b is not None:
                if name == "receptance":
                    r = ggml.add(g, r, b)
                elif name == "key":
                    k = ggml.add(g, k, b)
                else:
                    v = ggml.add(g, v, b)
        gate = unary(ggml.mul_mat(g, lg.req("time_mix_gate.weight", il), xg))
        k = ggml.reshape(g, k, head_size, n_head, n_tokens)
        v = ggml.reshape(g, v, head_size, n_head, n_tokens)
        r = ggml.reshape(g, r, head_size, n_head, n_tokens)
        w = ggml.mul_mat(
            g,
            lg.req("time_mix_decay_w2.weight", il),
            unary(ggml.mul_mat(g, lg.req("time_mix_decay_w1.weight", il), xw)),
        )
        w = ggml.add(g, w, lg.req("time_mix_decay.weight", il))
        w = unary(unary(unary(w)))
        w = ggml.reshape(g, w, head_size, n_head, n_tokens)
        s_l = lg.state_tensor("cache_s_l", il, spec.n_embd_s())
        state = lg.build_rs(rs_inp, s_l, spec.n_embd_s(), n_seqs)
        first = lg.req("time_mix_first.weight", il)
        out = ggml.rwkv_wkv(
            g, "RWKV_WKV6", (k, v, r, first, w, state), head_size, n_head, n_tokens, n_seqs
        )
        return _wkv_out(out, s_l, gate, il)

    def _wkv_out(
        out: Tensor,
        s_l: Tensor,
        gate: Tensor | None,
        il: int,
        extra: Callable[[Tensor], Tensor] | None = None,
    ) -> Tensor:
        cur = ggml.view_1d(g, out, n_embd * n_tokens, 0)
        new_state = ggml.view_1d(g, out, n_embd * head_size * n_seqs, n_embd * n_tokens * 4)
        g.expand(ggml.cpy(g, new_state, ggml.view_1d(g, s_l, spec.n_embd_s() * n_seqs, 0)))
        ln = t("time_mix_ln.weight", il)
        if ln is not None and t("time_mix_ln.bias", il) is not None:
            cur = ggml.reshape(g, cur, n_embd // n_head, n_head, n_tokens)
            cur = ggml.unary(g, cur, "NORM")
            cur = ggml.reshape(g, cur, n_embd, n_tokens)
            cur = ggml.add(g, ggml.mul(g, cur, ln), lg.req("time_mix_ln.bias", il))
        else:
            cur = ggml.reshape(g, cur, n_embd, n_tokens)
        if extra is not None:
            cur = extra(cur)
        if gate is not None:
            cur = ggml.mul(g, cur, gate)
        cur = ggml.mul_mat(g, lg.req("time_mix_output.weight", il), cur)
        return ggml.reshape(g, cur, n_embd, n_seq_tokens, n_seqs)

    def time_mix7(cur: Tensor, x_prev: Tensor, il: int) -> Tensor:
        g1 = t("time_mix_g1.weight", il)
        g2 = t("time_mix_g2.weight", il)
        gating = g1 is not None and g2 is not None
        sx = ggml.binary(g, "SUB", x_prev, cur)
        dummy = ggml.new_tensor(g, ggml.F32, n_embd, n_seq_tokens, n_seqs, 6 if gating else 5)
        sx = ggml.repeat(g, sx, dummy)
        xxx = ggml.add(g, ggml.mul(g, sx, lg.req("time_mix_lerp_fused.weight", il)), cur)
        off = n_embd * n_tokens * 4
        xs = [
            ggml.view_2d(g, xxx, n_embd, n_tokens, xxx.nb[1], i * off)
            for i in range(6 if gating else 5)
        ]
        xr, xw, xk, xv, xa = xs[:5]
        r = ggml.mul_mat(g, lg.req("time_mix_receptance.weight", il), xr)
        w = ggml.add(
            g,
            ggml.mul_mat(
                g,
                lg.req("time_mix_w2.weight", il),
                unary(ggml.mul_mat(g, lg.req("time_mix_w1.weight", il), xw)),
            ),
            lg.req("time_mix_w0.weight", il),
        )
        w = unary(ggml.unary(g, unary(w), "SCALE"))
        k = ggml.mul_mat(g, lg.req("time_mix_key.weight", il), xk)
        v = ggml.mul_mat(g, lg.req("time_mix_value.weight", il), xv)
        if not v_first:
            v_first.append(v)
        else:
            mix = ggml.add(
                g,
                ggml.mul_mat(
                    g,
                    lg.req("time_mix_v2.weight", il),
                    ggml.mul_mat(g, lg.req("time_mix_v1.weight", il), xv),
                ),
                lg.req("time_mix_v0.weight", il),
            )
            v = ggml.add(g, v, ggml.mul(g, ggml.binary(g, "SUB", v_first[0], v), unary(mix)))
        gate = None
        if gating:
            assert g1 is not None
            assert g2 is not None
            gate = ggml.mul_mat(g, g2, unary(ggml.mul_mat(g, g1, xs[5])))
        a = unary(
            ggml.add(
                g,
                ggml.mul_mat(
                    g,
                    lg.req("time_mix_a2.weight", il),
                    ggml.mul_mat(g, lg.req("time_mix_a1.weight", il), xa),
                ),
                lg.req("time_mix_a0.weight", il),
            )
        )
        kk = ggml.reshape(
            g, ggml.mul(g, k, lg.req("time_mix_k_k.weight", il)), head_size, n_head, n_tokens
        )
        kk = ggml.unary(g, kk, "L2_NORM")
        ka = ggml.mul(g, k, lg.req("time_mix_k_a.weight", il))
        k = ggml.add(g, k, ggml.binary(g, "SUB", ggml.mul(g, a, ka), ka))
        r = ggml.reshape(g, r, head_size, n_head, n_tokens)
        w = ggml.reshape(g, w, head_size, n_head, n_tokens)
        k = ggml.reshape(g, k, head_size, n_head, n_tokens)
        v = ggml.reshape(g, v, head_size, n_head, n_tokens)
        a = ggml.reshape(g, a, head_size, n_head, n_tokens)
        s_l = lg.state_tensor("cache_s_l", il, spec.n_embd_s())
        state = lg.build_rs(rs_inp, s_l, spec.n_embd_s(), n_seqs)
        out = ggml.rwkv_wkv(
            g,
            "RWKV_WKV7",
            (r, w, k, v, unary(kk), ggml.mul(g, kk, a), state),
            head_size,
            n_head,
            n_tokens,
            n_seqs,
        )

        def bonus(cur: Tensor) -> Tensor:
            r_k = ggml.reshape(g, lg.req("time_mix_r_k.weight", il), head_size, n_head)
            rk = ggml.sum_rows(g, ggml.mul(g, ggml.mul(g, k, r), r_k))
            return ggml.add(g, cur, ggml.reshape(g, ggml.mul(g, v, rk), n_embd, n_tokens))

        return _wkv_out(out, s_l, gate, il, bonus)

    for il in lg.layers:
        inp_l = ggml.reshape(g, inp_l, n_embd, n_seq_tokens, n_seqs)
        r_l = lg.state_tensor("cache_r_l", il, spec.n_embd_r())
        shift = lg.build_rs(rs_inp, r_l, spec.n_embd_r(), n_seqs)
        shift = ggml.reshape(g, shift, n_embd, tsc, n_seqs)
        att_shift = ggml.view_3d(g, shift, n_embd, 1, n_seqs, shift.nb[1], shift.nb[2], 0)
        ffn_shift = ggml.view_3d(g, shift, n_embd, 1, n_seqs, shift.nb[1], shift.nb[2], n_embd * 4)
        att_norm = _ln(lg, inp_l, "attn_norm", il)
        x_prev = ggml.concat(
            g,
            att_shift,
            ggml.view_3d(
                g, att_norm, n_embd, n_seq_tokens - 1, n_seqs, att_norm.nb[1], att_norm.nb[2], 0
            ),
            1,
        )
        cur = time_mix7(att_norm, x_prev, il) if v7 else time_mix6(att_norm, x_prev, il)
        ffn_inp = ggml.add(g, cur, inp_l)
        ffn_norm = _ln(lg, ffn_inp, "attn_norm_2", il)
        x_prev = ggml.concat(
            g,
            ffn_shift,
            ggml.view_3d(
                g, ffn_norm, n_embd, n_seq_tokens - 1, n_seqs, ffn_norm.nb[1], ffn_norm.nb[2], 0
            ),
            1,
        )
        last = (n_seq_tokens - 1) * n_embd * 4
        shift = ggml.concat(
            g,
            ggml.view_3d(g, att_norm, n_embd, 1, n_seqs, att_norm.nb[1], att_norm.nb[2], last),
            ggml.view_3d(g, ffn_norm, n_embd, 1, n_seqs, ffn_norm.nb[1], ffn_norm.nb[2], last),
            1,
        )
        g.expand(
            ggml.cpy(
                g,
                ggml.view_1d(g, shift, n_embd * n_seqs * tsc, 0),
                ggml.view_1d(g, r_l, spec.n_embd_r() * n_seqs, 0),
            )
        )
        ffn_inp = ggml.reshape(g, ffn_inp, n_embd, n_tokens)
        ffn_norm = ggml.reshape(g, ffn_norm, n_embd, n_tokens)
        x_prev = ggml.reshape(g, x_prev, n_embd, n_tokens)
        if not v7:
            cur = ggml.reshape(g, cur, n_embd, n_tokens)
        if il == n_layer - 1:
            ffn_inp = ggml.get_rows(g, ffn_inp, out_ids)
            ffn_norm = ggml.get_rows(g, ffn_norm, out_ids)
            x_prev = ggml.get_rows(g, x_prev, out_ids)
            if not v7:
                cur = ggml.get_rows(g, cur, out_ids)
        # channel mix
        sx = ggml.binary(g, "SUB", x_prev, ffn_norm)
        xk = ggml.add(g, ggml.mul(g, sx, lg.req("channel_mix_lerp_k.weight", il)), ffn_norm)
        if v7:
            kx = ggml.unary(
                g, unary(ggml.mul_mat(g, lg.req("channel_mix_key.weight", il), xk)), "SQR"
            )
            cur = ggml.mul_mat(g, lg.req("channel_mix_value.weight", il), kx)
        else:
            xr = ggml.add(g, ggml.mul(g, sx, lg.req("channel_mix_lerp_r.weight", il)), ffn_norm)
            rr = unary(ggml.mul_mat(g, lg.req("channel_mix_receptance.weight", il), xr))
            kx = ggml.unary(
                g, unary(ggml.mul_mat(g, lg.req("channel_mix_key.weight", il), xk)), "SQR"
            )
            cur = ggml.mul(g, rr, ggml.mul_mat(g, lg.req("channel_mix_value.weight", il), kx))
        cur = ggml.add(g, cur, ffn_inp)
        if not v7 and rescale and (il + 1) % rescale == 0:
            cur = ggml.unary(g, cur, "SCALE")
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _ln(lg, inp_l, "output_norm", -1)
    lg.finish(_lm_head(lg, embd), embd)


def build_llama4(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/llama4.cpp``: chunked attention, no RoPE (temperature-scaled Q) on every
    4th layer, Q/K RMS norms, MoE with the router weight applied before the experts."""
    g = lg.g
    t = lg.t
    n_tokens = lg.n_tokens
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    attn_scale = g.input(ggml.F32, 1, 1, n_tokens, name="inp_attn_scale")
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    chunked = "kv_swa" in lg.p.caches or any(spec.is_swa[: spec.n_layer])
    no_rope_step = 4 if chunked else n_layer
    n_expert = spec.n_expert
    # llama4.cpp: use_kq_norm unless it is the 128-expert Maverick
    kq_norm = n_expert != 128
    for il in lg.layers:
        inp_sa = inp_l
        use_rope = no_rope_step > 0 and (il + 1) % no_rope_step != 0
        cur = _rms(lg, inp_l, "attn_norm", il)
        head_k, head_v = _head(spec, il)
        factors = t("rope_freqs.weight", il)
        q, k, v = lg.build_qkv(il, cur, head_k, spec.n_head[il], head_k, spec.n_head_kv[il])
        if use_rope:
            q = ggml.rope(g, q, inp_pos, factors)
            k = ggml.rope(g, k, inp_pos, factors)
        else:
            q = ggml.mul(g, q, attn_scale)
        if use_rope and kq_norm:
            q = ggml.unary(g, q, "RMS_NORM")
            k = ggml.unary(g, k, "RMS_NORM")
        cur = lg.build_attn(
            _inp_for(inputs, spec, il),
            t("attn_output.weight", il),
            t("attn_output.bias", il),
            q,
            k,
            v,
            il,
            head_k,
            head_v,
            spec.n_head_kv[il],
        )
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_sa = ggml.get_rows(g, inp_sa, out_ids)
        ffn_inp = ggml.add(g, cur, inp_sa)
        if t("ffn_gate_inp.weight", il) is None:
            cur = _rms(lg, ffn_inp, "ffn_norm", il)
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                t("ffn_up.bias", il),
                t("ffn_gate.weight", il),
                t("ffn_gate.bias", il),
                t("ffn_down.weight", il),
                t("ffn_down.bias", il),
                "silu",
                True,
                il,
            )
        else:
            normed = _rms(lg, ffn_inp, "ffn_norm", il)
            moe = lg.build_moe_ffn(
                normed,
                il,
                n_expert,
                spec.n_expert_used,
                "silu",
                False,
                lg.hpf("expert_weights_scale"),
                "sigmoid",
                weight_before_ffn=True,
            )
            sh = lg.build_ffn(
                normed,
                t("ffn_up_shexp.weight", il),
                None,
                t("ffn_gate_shexp.weight", il),
                None,
                t("ffn_down_shexp.weight", il),
                None,
                "silu",
                True,
                il,
            )
            cur = ggml.add(g, moe, sh)
        cur = ggml.add(g, cur, ffn_inp)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    lg.finish(_lm_head(lg, embd), embd)


def build_gemma4(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/gemma4.cpp``: iSWA with per-kind head sizes, the last layers reading
    earlier layers' KV, per-layer input embeddings (PLE), dense or dense+MoE FFNs."""
    g = lg.g
    t = lg.t
    n_tokens = lg.n_tokens
    n_layer = spec.n_layer
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_l = ggml.unary(g, inp_l, "SCALE")
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_shared = _int(lg, "attention.shared_kv_layers")
    kv_from = spec.n_layer_all - n_shared
    ple = t("per_layer_token_embd.weight")
    per_layer = None
    if ple is not None:
        n_per = _int(lg, "embedding_length_per_layer_input")
        tokens = g.input(ggml.I32, n_tokens, name="inp_per_layer_tokens")
        per = ggml.get_rows(g, ple, tokens)
        per = ggml.reshape(g, per, n_per, n_layer, n_tokens)
        per = ggml.unary(g, per, "SCALE")
        g.expand(per)
        proj = ggml.mul_mat(g, lg.req("per_layer_model_proj.weight"), inp_l)
        proj = ggml.unary(g, proj, "SCALE")
        proj = ggml.reshape(g, proj, n_per, n_layer, n_tokens)
        proj = lg.build_norm(proj, t("per_layer_proj_norm.weight"), None, True, -1)
        per = ggml.add(g, proj, per)
        per = ggml.unary(g, per, "SCALE")
        per_layer = ggml.cont(g, ggml.permute(g, per, 0, 2, 1, 3))
    for il in lg.layers:
        head_k, head_v = _head(spec, il)
        n_head, n_head_kv = spec.n_head[il], spec.n_head_kv[il]
        cur = _rms(lg, inp_l, "attn_norm", il)
        factors = None if spec.is_swa[il] else t("rope_freqs.weight", il)
        wqkv = t("attn_qkv.weight", il)
        fused = None
        if wqkv is not None:
            fused = ggml.mul_mat(g, wqkv, cur)
            q = ggml.cont(g, ggml.view_2d(g, fused, head_k * n_head, n_tokens, fused.nb[1], 0))
        else:
            q = ggml.mul_mat(g, lg.req("attn_q.weight", il), cur)
        q = ggml.reshape(g, q, head_k, n_head, n_tokens)
        q = _rms(lg, q, "attn_q_norm", il)
        q = ggml.rope(g, q, inp_pos, factors)
        inp = _inp_for(inputs, spec, il)
        if il < kv_from:
            if fused is not None:
                qd, kd = head_k * n_head, head_k * n_head_kv
                k = ggml.cont(g, ggml.view_2d(g, fused, kd, n_tokens, fused.nb[1], qd * 4))
                v = ggml.cont(g, ggml.view_2d(g, fused, kd, n_tokens, fused.nb[1], (qd + kd) * 4))
            else:
                k = ggml.mul_mat(g, lg.req("attn_k.weight", il), cur)
                wv = t("attn_v.weight", il)
                v = ggml.mul_mat(g, wv, cur) if wv is not None else k
            k = ggml.reshape(g, k, head_k, n_head_kv, n_tokens)
            v = ggml.reshape(g, v, head_k, n_head_kv, n_tokens)
            k = _rms(lg, k, "attn_k_norm", il)
            v = ggml.unary(g, v, "RMS_NORM")
            k = ggml.rope(g, k, inp_pos, factors)
            cur = lg.build_attn(
                inp, t("attn_output.weight", il), None, q, k, v, il, head_k, head_v, n_head_kv
            )
        else:
            # llama-model.cpp create_memory: layers from n_layer_kv_from_start reuse the
            # last sliding (kv_from - 2) or full (kv_from - 1) layer before them
            src = kv_from - (2 if spec.is_swa[il] else 1)
            cur = lg.build_attn(
                inp,
                t("attn_output.weight", il),
                None,
                q,
                None,
                None,
                il,
                head_k,
                head_v,
                n_head_kv,
                cache_layer=src,
                cache_n_head_kv=spec.n_head_kv[src],
            )
        cur = _rms(lg, cur, "post_attention_norm", il)
        attn_out = ggml.add(g, cur, inp_l)
        if t("ffn_gate_inp.weight", il) is not None:
            mlp = _rms(lg, attn_out, "ffn_norm", il)
            mlp = lg.build_ffn(
                mlp,
                t("ffn_up.weight", il),
                None,
                t("ffn_gate.weight", il),
                None,
                t("ffn_down.weight", il),
                None,
                "gelu",
                True,
                il,
            )
            mlp = _rms(lg, mlp, "post_ffw_norm_1", il)
            moe_in = _rms(lg, attn_out, "pre_ffw_norm_2", il)
            tmp = ggml.unary(g, attn_out, "RMS_NORM")
            tmp = ggml.unary(g, tmp, "SCALE")
            scale_w = t("ffn_gate_inp.scale", il)
            if scale_w is not None:
                tmp = ggml.mul(g, tmp, scale_w)
            logits = ggml.mul_mat(g, lg.req("ffn_gate_inp.weight", il), tmp)
            moe = lg.build_moe_ffn(
                moe_in,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "gelu",
                True,
                1.0,
                "softmax",
                logits_in=logits,
            )
            moe = _rms(lg, moe, "post_ffw_norm_2", il)
            cur = ggml.add(g, mlp, moe)
        else:
            cur = _rms(lg, attn_out, "ffn_norm", il)
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                None,
                t("ffn_gate.weight", il),
                None,
                t("ffn_down.weight", il),
                None,
                "gelu",
                True,
                il,
            )
        cur = lg.build_norm(cur, t("post_ffw_norm.weight", il), None, True, -1)
        cur = ggml.add(g, cur, attn_out)
        if per_layer is not None:
            pe_in = cur
            cur = ggml.mul_mat(g, lg.req("inp_gate.weight", il), cur)
            cur = ggml.unary(g, cur)
            n_per = per_layer.ne[0]
            this = ggml.view_2d(
                g,
                per_layer,
                n_per,
                per_layer.ne[1],
                ggml.row_size(per_layer.type, n_per),
                il * n_per * per_layer.ne[1] * 4,
            )
            cur = ggml.mul(g, cur, this)
            cur = ggml.mul_mat(g, lg.req("proj.weight", il), cur)
            cur = _rms(lg, cur, "post_norm", il)
            cur = ggml.add(g, pe_in, cur)
        out_scale = t("layer_output_scale.weight", il)
        if out_scale is not None:
            cur = ggml.mul(g, cur, out_scale)
        inp_l = cur
        lg.layer_done(il, cur)
    cur = lg.build_norm(inp_l, t("output_norm.weight"), None, True, -1)
    cur.flags |= ggml.FLAG_OUTPUT  # t_h_nextn
    embd = ggml.get_rows(g, cur, out_ids)
    cur = _lm_head(lg, embd)
    if lg.hpf("final_logit_softcapping", 30.0) != 0.0:
        cur = _softcap(lg, cur)
    lg.finish(cur, embd)


def build_gemma3n(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/gemma3n.cpp``: AltUp (4 streams, one active), LAuReL, per-layer inputs,
    sparse gated FFN in the first 10 layers, the last layers reading earlier layers' KV."""
    g = lg.g
    t = lg.t
    n_tokens = lg.n_tokens
    n_embd = spec.n_embd
    n_layer = spec.n_layer
    n_altup, i_act, n_embd_altup = 4, 0, 256  # llama_hparams defaults (llama-hparams.h)
    kv_from = 20  # gemma3n.cpp load_arch_hparams: n_layer_kv_from_start = 20
    n_sparsity = 10  # models.h: n_layer_sparsity

    def unary(x: Tensor, op: str = "UNARY") -> Tensor:
        return ggml.unary(g, x, op)

    def slice2d(x: Tensor, idx: int) -> Tensor:  # gemma3n_view_2d_slice
        return ggml.view_2d(
            g, x, x.ne[0], x.ne[1], ggml.row_size(x.type, x.ne[0]), idx * x.ne[0] * x.ne[1] * 4
        )

    def magnitude(x: Tensor) -> Tensor:
        return unary(ggml.sum_rows(g, unary(x, "SQR")), "SQRT")

    def router(x: Tensor, il: int) -> Tensor:
        r = _rms(lg, x, "altup_router_norm", il)
        r = unary(r, "SCALE")
        return unary(ggml.mul_mat(g, lg.req("altup_router.weight", il), r))

    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_l = unary(inp_l, "SCALE")
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    tokens = g.input(ggml.I32, n_tokens, name="inp_per_layer_tokens")
    per = ggml.get_rows(g, lg.req("per_layer_token_embd.weight"), tokens)
    per = ggml.reshape(g, per, n_embd_altup, n_layer, n_tokens)
    per = unary(per, "SCALE")
    g.expand(per)
    proj = ggml.mul_mat(g, lg.req("per_layer_model_proj.weight"), inp_l)
    proj = unary(proj, "SCALE")
    proj = ggml.reshape(g, proj, n_embd_altup, n_layer, n_tokens)
    proj = lg.build_norm(proj, t("per_layer_proj_norm.weight"), None, True, -1)
    per = ggml.add(g, proj, per)
    per = unary(per, "SCALE")
    per_layer = ggml.cont(g, ggml.permute(g, per, 0, 2, 1, 3))
    target = magnitude(inp_l)
    repeated = ggml.repeat_4d(g, inp_l, n_embd, n_tokens, n_altup - 1, 1)
    added = ggml.mul_mat(g, lg.req("altup_proj.weight"), repeated)
    new_mag = magnitude(added)
    added = ggml.binary(g, "DIV", ggml.mul(g, added, target), new_mag)
    inp_l = ggml.concat(g, inp_l, added, 2)
    for il in lg.layers:
        head_k, head_v = _head(spec, il)
        n_head, n_head_kv = spec.n_head[il], spec.n_head_kv[il]
        # altup_predict
        activated = slice2d(inp_l, i_act)
        modalities = router(activated, il)
        coefs = ggml.mul_mat(g, lg.req("altup_predict_coef.weight", il), modalities)
        coefs = ggml.reshape(g, coefs, n_altup, n_altup, n_tokens)
        permuted = ggml.cont(g, ggml.permute(g, inp_l, 1, 2, 0, 3))
        predictions = ggml.mul_mat(g, permuted, coefs)
        predictions = ggml.cont(g, ggml.permute(g, predictions, 0, 2, 1, 3))
        predictions = ggml.add(g, predictions, inp_l)
        active = slice2d(predictions, i_act)
        cur = _rms(lg, active, "attn_norm", il)
        # laurel
        lau = ggml.mul_mat(g, lg.req("laurel_l.weight", il), cur)
        lau = ggml.mul_mat(g, lg.req("laurel_r.weight", il), lau)
        lau = _rms(lg, lau, "laurel_post_norm", il)
        laurel = ggml.add(g, lau, cur)
        inp = _inp_for(inputs, spec, il)
        if il < kv_from:
            q, k, v = lg.build_qkv(il, cur, head_k, n_head, head_k, n_head_kv)
            q = _rms(lg, q, "attn_q_norm", il)
            k = _rms(lg, k, "attn_k_norm", il)
            v = unary(v, "RMS_NORM")
            q = ggml.rope(g, q, inp_pos)
            k = ggml.rope(g, k, inp_pos)
            cur = lg.build_attn(
                inp, t("attn_output.weight", il), None, q, k, v, il, head_k, head_v, n_head_kv
            )
        else:
            wqkv = t("attn_qkv.weight", il)
            if wqkv is not None:
                qkv = ggml.mul_mat(g, wqkv, cur)
                q = ggml.cont(g, ggml.view_2d(g, qkv, head_k * n_head, n_tokens, qkv.nb[1], 0))
            else:
                q = ggml.mul_mat(g, lg.req("attn_q.weight", il), cur)
            q = ggml.reshape(g, q, head_k, n_head, n_tokens)
            q = _rms(lg, q, "attn_q_norm", il)
            q = ggml.rope(g, q, inp_pos)
            src = kv_from - (2 if spec.is_swa[il] else 1)
            cur = lg.build_attn(
                inp,
                t("attn_output.weight", il),
                None,
                q,
                None,
                None,
                il,
                head_k,
                head_v,
                n_head_kv,
                cache_layer=src,
                cache_n_head_kv=spec.n_head_kv[src],
            )
        cur = _rms(lg, cur, "post_attention_norm", il)
        cur = ggml.add(g, cur, active)
        attn_laurel = unary(ggml.add(g, cur, laurel), "SCALE")
        cur = _rms(lg, attn_laurel, "ffn_norm", il)
        up = ggml.mul_mat(g, lg.req("ffn_up.weight", il), cur)
        gate = ggml.mul_mat(g, lg.req("ffn_gate.weight", il), cur)
        if il < n_sparsity:  # gaussian_topk
            mean = ggml.new_tensor(
                g, ggml.F32, 1, gate.ne[1], gate.ne[2], gate.ne[3], op="MEAN", src=(gate,)
            )
            std = unary(
                unary(ggml.sum_rows(g, unary(ggml.binary(g, "SUB", gate, mean), "SQR")), "SCALE"),
                "SQRT",
            )
            cutoff = ggml.add(g, mean, unary(std, "SCALE"))
            gate = unary(ggml.binary(g, "SUB", gate, cutoff))
        gate = unary(gate)
        cur = ggml.mul(g, up, gate)
        cur = ggml.mul_mat(g, lg.req("ffn_down.weight", il), cur)
        cur = lg.build_norm(cur, t("post_ffw_norm.weight", il), None, True, -1)
        gated = ggml.add(g, cur, attn_laurel)
        # altup_correct
        modalities = router(gated, il)
        active = slice2d(predictions, i_act)
        innovation = ggml.binary(g, "SUB", gated, active)
        coefs = ggml.mul_mat(g, lg.req("altup_correct_coef.weight", il), modalities)
        coefs = unary(coefs, "SCALE")
        coefs = ggml.transpose(g, coefs)
        coefs = ggml.cont(g, coefs, 1, n_tokens, n_altup)
        innovation = ggml.repeat_4d(g, innovation, n_embd, n_tokens, n_altup, 1)
        corrected = ggml.mul(g, innovation, coefs)
        corrected = ggml.add(g, corrected, predictions)
        first = slice2d(corrected, i_act)
        first = ggml.mul(g, first, lg.req("altup_correct_scale.weight", il))
        first = ggml.mul_mat(g, lg.req("inp_gate.weight", il), first)
        first = unary(first)
        first = ggml.mul(g, first, slice2d(per_layer, il))
        first = ggml.mul_mat(g, lg.req("proj.weight", il), first)
        first = _rms(lg, first, "post_norm", il)
        s_first = slice2d(corrected, 0)
        rest = ggml.view_3d(
            g,
            corrected,
            n_embd,
            n_tokens,
            n_altup - 1,
            ggml.row_size(corrected.type, n_embd),
            ggml.row_size(corrected.type, n_embd * n_tokens),
            n_embd * n_tokens * 4,
        )
        tmp = ggml.add(g, rest, first)
        corrected = ggml.concat(g, s_first, tmp, 2)
        inp_l = corrected
        lg.layer_done(il, corrected)
    cur = inp_l
    target = magnitude(slice2d(cur, i_act))
    alt = ggml.view_3d(
        g,
        cur,
        n_embd,
        n_tokens,
        n_altup - 1,
        ggml.row_size(cur.type, n_embd),
        ggml.row_size(cur.type, n_embd * n_tokens),
        n_embd * n_tokens * 4,
    )
    unembd = ggml.mul_mat(g, lg.req("altup_unembd_proj.weight"), alt)
    new_mag = magnitude(unembd)
    unembd = ggml.binary(g, "DIV", ggml.mul(g, unembd, target), new_mag)
    cur = slice2d(cur, 0)
    for i in range(n_altup - 1):
        cur = ggml.add(g, cur, slice2d(unembd, i))
    cur = unary(cur, "SCALE")
    out_ids = lg.build_inp_out_ids()
    cur = ggml.get_rows(g, cur, out_ids)
    embd = lg.build_norm(cur, t("output_norm.weight"), None, True, -1)
    cur = _softcap(lg, _lm_head(lg, embd))
    lg.finish(cur, embd)


def _gdn_l2_norm(g: ggml.Graph, x: Tensor) -> Tensor:
    """``build_gdn_l2_norm``: ``ggml_scale(ggml_rms_norm(x))``."""
    return ggml.unary(g, ggml.unary(g, x, "RMS_NORM"), "SCALE")


def _delta_net_layer(lg: LlmGraph, spec: ModelSpec, inp: RsInput, cur: Tensor, il: int) -> Tensor:
    """``build_layer_attn_linear`` of qwen35/qwen35moe: the gated delta net, with the fused
    ``GGML_OP_GATED_DELTA_NET`` (``resolve_fused_ops`` keeps it on: CPU, CUDA, Metal and
    Vulkan run it on the layer's device) and no rollback snapshots (``n_rs_seq`` 0)."""
    g = lg.g
    d_inner = spec.ssm_d_inner
    head_k_dim = spec.ssm_d_state
    num_k_heads = spec.ssm_n_group
    num_v_heads = _int(lg, "ssm.time_step_rank")
    head_v_dim = d_inner // num_v_heads
    n_seqs = lg.n_seqs
    n_st = lg.n_tokens // n_seqs
    qkv = ggml.mul_mat(g, lg.req("attn_qkv.weight", il), cur)
    qkv = ggml.reshape(g, qkv, qkv.ne[0], n_st, n_seqs)
    z = ggml.mul_mat(g, lg.req("attn_gate.weight", il), cur)
    beta = ggml.mul_mat(g, lg.req("ssm_beta.weight", il), cur)
    beta = ggml.unary(g, ggml.reshape(g, beta, 1, num_v_heads, n_st, n_seqs))
    alpha = ggml.mul_mat(g, lg.req("ssm_alpha.weight", il), cur)
    alpha = ggml.reshape(g, alpha, num_v_heads, n_st, n_seqs)
    alpha = ggml.unary(g, ggml.add(g, alpha, lg.req("ssm_dt.bias", il)))
    gate = ggml.mul(g, alpha, lg.req("ssm_a", il))
    gate = ggml.reshape(g, gate, 1, num_v_heads, n_st, n_seqs)
    conv_all = lg.state_tensor("cache_r_l", il, spec.n_embd_r())
    ssm_all = lg.state_tensor("cache_s_l", il, spec.n_embd_s())
    kernel = lg.req("ssm_conv1d.weight", il)
    d_conv = kernel.ne[0]
    channels = d_inner + 2 * num_k_heads * head_k_dim
    # build_conv_state
    conv = lg.build_rs(inp, conv_all, spec.n_embd_r(), n_seqs)
    conv = ggml.reshape(g, conv, d_conv - 1, channels, n_seqs)
    conv_in = ggml.concat(g, conv, ggml.transpose(g, qkv), 0)
    last = ggml.view_3d(
        g,
        conv_in,
        d_conv - 1,
        channels,
        n_seqs,
        conv_in.nb[1],
        conv_in.nb[2],
        (conv_in.ne[0] - conv.ne[0]) * 4,
    )
    row_count = (d_conv - 1) * channels
    g.expand(ggml.cpy(g, last, ggml.view_2d(g, conv_all, row_count, n_seqs, conv_all.nb[1], 0)))
    state = lg.build_rs(inp, ssm_all, spec.n_embd_s(), n_seqs)
    state = ggml.reshape(g, state, head_v_dim, head_v_dim, num_v_heads, n_seqs)
    mix = ggml.unary(g, ggml.ssm_conv(g, conv_in, kernel))
    nb1 = (head_k_dim * num_k_heads * 2 + head_v_dim * num_v_heads) * 4
    q = ggml.view_4d(
        g, mix, (head_k_dim, num_k_heads, n_st, n_seqs), head_k_dim * 4, nb1, nb1 * n_st, 0
    )
    k = ggml.view_4d(
        g,
        mix,
        (head_k_dim, num_k_heads, n_st, n_seqs),
        head_k_dim * 4,
        nb1,
        nb1 * n_st,
        head_k_dim * num_k_heads * 4,
    )
    v = ggml.view_4d(
        g,
        mix,
        (head_v_dim, num_v_heads, n_st, n_seqs),
        head_v_dim * 4,
        nb1,
        nb1 * n_st,
        2 * head_k_dim * num_k_heads * 4,
    )
    q = _gdn_l2_norm(g, q)
    k = _gdn_l2_norm(g, k)
    # build_recurrent_attn -> build_delta_net_fused (K = 1)
    s_v, h_v = v.ne[0], v.ne[1]
    res = ggml.new_tensor(
        g,
        ggml.F32,
        s_v * h_v,
        n_st * n_seqs + s_v * n_seqs,
        op="GATED_DELTA_NET",
        src=(q, k, v, gate, beta, state),
    )
    r4 = 4
    out = ggml.view_4d(
        g, res, (s_v, h_v, n_st, n_seqs), r4 * s_v, r4 * s_v * h_v, r4 * s_v * h_v * n_st, 0
    )
    new_state = ggml.view_4d(
        g,
        res,
        (s_v, s_v, h_v, n_seqs),
        r4 * s_v,
        r4 * s_v * s_v,
        r4 * s_v * s_v * h_v,
        r4 * s_v * h_v * n_st * n_seqs,
    )
    n_embd_s = spec.n_embd_s()
    g.expand(ggml.cpy(g, new_state, ggml.view_2d(g, ssm_all, n_embd_s, n_seqs, ssm_all.nb[1], 0)))
    z2 = ggml.reshape(g, z, head_v_dim, num_v_heads, n_st, n_seqs)
    normed = lg.build_norm(out, lg.req("ssm_norm.weight", il), None, True, il)
    cur = ggml.mul(g, normed, ggml.unary(g, z2))
    cur = ggml.reshape(g, cur, head_v_dim * num_v_heads, n_st, n_seqs)
    cur = ggml.mul_mat(g, lg.req("ssm_out.weight", il), cur)
    return ggml.reshape(g, cur, spec.n_embd, n_st * n_seqs)


def build_qwen35(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/qwen35.cpp`` / ``qwen35moe.cpp``: gated-delta-net layers and gated full
    attention (joint Q+gate projection, Q/K norms, M-RoPE), post-attention norm; the MoE
    variant adds a sigmoid-gated shared expert. The MTP block is not part of the graph."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    rs_inp = lg.build_rs_inp()
    inp = lg.build_attn_inp_kv("kv")
    lg.add_rot(inp, spec.head_k_full, spec.head_v_full)
    inp_pos = lg.build_inp_pos(4)
    out_ids = lg.build_inp_out_ids()
    n_tokens = lg.n_tokens
    for il in lg.layers:
        inp_sa = inp_l
        cur = _rms(lg, inp_l, "attn_norm", il)
        g.expand(cur)
        if spec.is_recurrent[il]:
            cur = _delta_net_layer(lg, spec, rs_inp, cur, il)
        else:
            head = spec.head_v_full
            n_head = spec.n_head[il]
            q_full = ggml.mul_mat(g, lg.req("attn_q.weight", il), cur)
            k = ggml.mul_mat(g, lg.req("attn_k.weight", il), cur)
            v = ggml.mul_mat(g, lg.req("attn_v.weight", il), cur)
            rs = ggml.row_size(q_full.type, head)
            q = ggml.view_3d(g, q_full, head, n_head, n_tokens, 2 * rs, 2 * rs * n_head, 0)
            q = _rms(lg, q, "attn_q_norm", il)
            k = ggml.reshape(g, k, head, spec.n_head_kv[il], n_tokens)
            k = _rms(lg, k, "attn_k_norm", il)
            gate = ggml.view_3d(g, q_full, head, n_head, n_tokens, 2 * rs, 2 * rs * n_head, rs)
            gate = ggml.cont(g, gate, head * n_head, n_tokens)
            v = ggml.reshape(g, v, head, spec.n_head_kv[il], n_tokens)
            q = ggml.rope(g, q, inp_pos)
            k = ggml.rope(g, k, inp_pos)
            cur = lg.build_attn(inp, None, None, q, k, v, il, head, head, spec.n_head_kv[il])
            cur = ggml.mul(g, cur, ggml.unary(g, gate))
            cur = ggml.mul_mat(g, lg.req("attn_output.weight", il), cur)
        cur = ggml.add(g, cur, inp_sa)
        ffn_res = cur
        cur = _rms(lg, cur, "post_attention_norm", il)
        if t("ffn_gate_inp.weight", il) is None:
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                None,
                t("ffn_gate.weight", il),
                None,
                t("ffn_down.weight", il),
                None,
                "silu",
                True,
                il,
            )
        else:
            moe = lg.build_moe_ffn(
                cur,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "silu",
                True,
                lg.hpf("expert_weights_scale"),
                "softmax",
            )
            if t("ffn_up_shexp.weight", il) is not None:
                sh = lg.build_ffn(
                    cur,
                    t("ffn_up_shexp.weight", il),
                    None,
                    t("ffn_gate_shexp.weight", il),
                    None,
                    t("ffn_down_shexp.weight", il),
                    None,
                    "silu",
                    True,
                    il,
                )
                sg = ggml.mul_mat(g, lg.req("ffn_gate_inp_shexp.weight", il), cur)
                sh = ggml.mul(g, sh, ggml.unary(g, sg))
                cur = ggml.add(g, moe, sh)
            else:
                cur = moe
        cur = ggml.add(g, cur, ffn_res)
        inp_l = cur
        lg.layer_done(il, cur)
    cur = lg.build_norm(inp_l, t("output_norm.weight"), None, True, -1)
    # t_h_nextn: the normed hidden state is a graph output (llama-graph.cpp
    # llm_graph_result::set_outputs), so ggml-alloc never frees it
    cur.flags |= ggml.FLAG_OUTPUT
    embd = ggml.get_rows(g, cur, out_ids)
    lg.cb(embd, "result_norm", -1)
    lg.finish(_lm_head(lg, embd), embd)


def _dsa_attn(
    lg: LlmGraph,
    inp: AttnInput,
    lid: AttnInput,
    q_cur: Tensor,
    k_cur: Tensor,
    v_cur: Tensor,
    top_k: Tensor,
    il: int,
    head_k: int,
) -> Tensor:
    """``build_attn(llm_graph_input_attn_k_dsa *, …)``: the MLA cache, with the KQ mask
    opened only at the indexer's top-k keys (``ggml_set_rows`` of zeros into a -inf mask)."""
    g = lg.g
    g.expand(q_cur)
    g.expand(v_cur)
    g.expand(k_cur)
    kv_size = inp.n_kv
    ns = lg.p.n_stream
    k_cache, _ = lg.kv_tensors(il, head_k, 0, kv_size, with_v=False)
    kc = ggml.view_2d(g, k_cur, head_k, k_cur.ne[2], k_cur.nb[2], 0)
    kdst = ggml.reshape(g, k_cache, head_k, kv_size * ns) if ns > 1 else k_cache
    g.expand(ggml.set_rows(g, kdst, kc, inp.k_idxs))
    mask = inp.mask
    mask_all = ggml.fill(g, mask)
    mask_all = ggml.view_4d(
        g,
        mask_all,
        (1, mask_all.ne[0], mask_all.ne[1], mask_all.ne[3]),
        mask_all.nb[0],
        mask_all.nb[1],
        mask_all.nb[2],
        0,
    )
    top3 = ggml.view_4d(
        g,
        top_k,
        (top_k.ne[0], top_k.ne[1], top_k.ne[3], 1),
        top_k.nb[1],
        top_k.nb[2],
        top_k.ne[3] * top_k.nb[3],
        0,
    )
    zeros = ggml.fill(g, ggml.new_tensor(g, ggml.F32, 1, top3.ne[0], top3.ne[1], top3.ne[2]))
    opened = ggml.set_rows(g, mask_all, zeros, top3)
    opened = ggml.view_4d(
        g,
        opened,
        (opened.ne[1], opened.ne[2], 1, opened.ne[3]),
        opened.nb[2],
        opened.nb[3],
        opened.nb[3],
        0,
    )
    opened = ggml.add(g, opened, mask)
    rs = ggml.row_size
    k = ggml.view_4d(
        g,
        k_cache,
        (head_k, 1, kv_size, ns),
        rs(k_cache.type, head_k),
        rs(k_cache.type, head_k),
        rs(k_cache.type, head_k * kv_size),
        0,
    )
    v = ggml.view_4d(g, k, (v_cur.ne[0], k.ne[1], k.ne[2], k.ne[3]), k.nb[1], k.nb[2], k.nb[3], 0)
    cur = lg.build_attn_mha(q_cur, k, v, None, opened, None, lg.t("attn_v_b.weight", il), il)
    lg.cb(cur, "kqv_out", il)
    return lg.build_lora_mm(lg.req("attn_output.weight", il), cur)


def build_deepseek32(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/deepseek32.cpp``: DeepSeek sparse attention. MLA (K-only cache) whose
    mask the lightning indexer narrows to its top-k keys; the indexer keeps its own
    one-head key cache (``llama_kv_cache_dsa``: f16/quantized like K, Hadamard-rotated
    always) and runs fused (``GGML_OP_LIGHTNING_INDEXER``, f16 mask: ``fused_lid``)."""
    g = lg.g
    t = lg.t
    n_tokens = lg.n_tokens
    head_k = _int(lg, "attention.key_length_mla", spec.head_k_full)
    n_rope = spec.n_rot
    n_nope = head_k - n_rope
    rank = spec.kv_lora_rank
    n_idx_head = _int(lg, "attention.indexer.head_count")
    idx_head = _int(lg, "attention.indexer.key_length")
    idx_top_k = _int(lg, "attention.indexer.top_k")
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    inp = lg.build_attn_inp_kv("kv", with_v=False)
    n_kv = inp.n_kv
    ns = lg.p.n_stream
    lid_mask = g.input(ggml.F16, n_kv, n_tokens // ns, 1, ns, name="attn_inp_kq_mask")
    lid_idxs = g.input(ggml.I64, n_tokens, name="attn_inp_k_idxs")
    lid = AttnInput("kv", n_kv, lid_idxs, None, lid_mask, None, None, False)
    nrot = 64
    while idx_head % (nrot * 2) == 0:
        nrot *= 2
    lid_rot = g.input(ggml.F32, nrot, nrot, name="attn_inp_k_rot")
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    n_dense = _int(lg, "leading_dense_block_count")
    gating = {2: "sigmoid"}.get(_int(lg, "expert_gating_func", 1), "softmax")
    rs = ggml.row_size
    for il in lg.layers:
        inp_sa = inp_l
        n_head = spec.n_head[il]
        cur = _rms(lg, inp_l, "attn_norm", il)
        qr = ggml.mul_mat(g, lg.req("attn_q_a.weight", il), cur)
        qr = _rms(lg, qr, "attn_q_a_norm", il)
        # lightning indexer
        iq = ggml.mul_mat(g, lg.req("indexer.attn_q_b.weight", il), qr)
        iq = ggml.rope(g, ggml.reshape(g, iq, idx_head, n_idx_head, n_tokens), inp_pos)
        ik = ggml.mul_mat(g, lg.req("indexer.attn_k.weight", il), cur)
        ik = lg.build_norm(
            ik, t("indexer.k_norm.weight", il), t("indexer.k_norm.bias", il), False, il
        )
        ik = ggml.rope(g, ggml.reshape(g, ik, idx_head, 1, n_tokens), inp_pos)
        iq = ggml.mul_mat(g, lid_rot, iq)
        ik = ggml.mul_mat(g, lid_rot, ik)
        lid_cache = lg.cache_tensor(f"cache_k_lid{il}", lg.p.type_k, (idx_head, n_kv, ns, 1), il)
        kc = ggml.view_2d(g, ik, idx_head, ik.ne[2], ik.nb[2], 0)
        kdst = ggml.reshape(g, lid_cache, idx_head, n_kv * ns) if ns > 1 else lid_cache
        g.expand(ggml.set_rows(g, kdst, kc, lid_idxs))
        iw = ggml.mul_mat(g, lg.req("indexer.proj.weight", il), cur)
        ik = ggml.view_4d(
            g,
            lid_cache,
            (idx_head, 1, n_kv, ns),
            rs(lid_cache.type, idx_head),
            rs(lid_cache.type, idx_head),
            rs(lid_cache.type, idx_head * n_kv),
            0,
        )
        iq = ggml.view_4d(
            g, iq, (iq.ne[0], iq.ne[1], iq.ne[2] // ns, ns), iq.nb[1], iq.nb[2], iq.nb[3] // ns, 0
        )
        iw = ggml.view_4d(
            g,
            iw,
            (iw.ne[0], iw.ne[1] // ns, iw.ne[2], ns),
            iw.nb[1],
            iw.nb[2] // ns,
            iw.nb[3] // ns,
            0,
        )
        iw = ggml.unary(g, iw, "SCALE")
        score = ggml.new_tensor(
            g,
            ggml.F32,
            ik.ne[2],
            iq.ne[2],
            1,
            iq.ne[3],
            op="LIGHTNING_INDEXER",
            src=(iq, ik, iw, lid_mask),
        )
        n_top = min(score.ne[0], idx_top_k)
        top_k = ggml.new_tensor(
            g, ggml.I32, n_top, score.ne[1], score.ne[2], score.ne[3], op="TOP_K", src=(score,)
        )
        top_k = ggml.cont(g, top_k)
        # MLA
        q = ggml.mul_mat(g, lg.req("attn_q_b.weight", il), qr)
        qrow = rs(q.type, head_k)
        q_nope = ggml.view_3d(g, q, n_nope, n_head, n_tokens, qrow, qrow * n_head, 0)
        q_pe = ggml.view_3d(g, q, n_rope, n_head, n_tokens, qrow, qrow * n_head, rs(q.type, n_nope))
        kv_pe = ggml.mul_mat(g, lg.req("attn_kv_a_mqa.weight", il), cur)
        row = rs(kv_pe.type, rank + n_rope)
        kv_cmpr = ggml.view_2d(g, kv_pe, rank, n_tokens, row, 0)
        k_pe = ggml.view_3d(g, kv_pe, n_rope, 1, n_tokens, row, row, rs(kv_pe.type, rank))
        q_pe = ggml.rope(g, q_pe, inp_pos)
        k_pe = ggml.rope(g, k_pe, inp_pos)
        kv_cmpr = _rms(lg, kv_cmpr, "attn_kv_a_norm", il)
        q_nope = ggml.permute(g, q_nope, 0, 2, 1, 3)
        q_abs = ggml.mul_mat(g, lg.req("attn_k_b.weight", il), q_nope)
        q_abs = ggml.permute(g, q_abs, 0, 2, 1, 3)
        q_cur = ggml.concat(g, q_abs, q_pe, 0)
        kv_cmpr = ggml.reshape(g, kv_cmpr, rank, 1, n_tokens)
        k_cur = ggml.concat(g, kv_cmpr, k_pe, 0)
        cur = _dsa_attn(lg, inp, lid, q_cur, k_cur, kv_cmpr, top_k, il, rank + n_rope)
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_sa = ggml.get_rows(g, inp_sa, out_ids)
        ffn_inp = ggml.add(g, cur, inp_sa)
        cur = _rms(lg, ffn_inp, "ffn_norm", il)
        if il < n_dense:
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                None,
                t("ffn_gate.weight", il),
                None,
                t("ffn_down.weight", il),
                None,
                "silu",
                True,
                il,
            )
        else:
            moe = lg.build_moe_ffn(
                cur,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "silu",
                bool(lg.hp.get("expert_weights_norm", False)),
                lg.hpf("expert_weights_scale"),
                gating,
                exp_probs_b=t("exp_probs_b.bias", il),
            )
            shexp = lg.build_ffn(
                cur,
                t("ffn_up_shexp.weight", il),
                None,
                t("ffn_gate_shexp.weight", il),
                None,
                t("ffn_down_shexp.weight", il),
                None,
                "silu",
                True,
                il,
            )
            cur = ggml.add(g, moe, shexp)
        cur = ggml.add(g, cur, ffn_inp)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    embd.flags |= ggml.FLAG_OUTPUT  # t_h_nextn
    out = ggml.mul_mat(g, lg.output_weight(), embd)
    lg.finish(out, embd)


def build_t5(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/t5.cpp`` ``graph<false>``: the decoder, which is what ``graph_reserve``
    builds for an encoder-decoder model. Self-attention over the KV cache with the relative
    position bias (``build_pos_bias`` of layer 0's ``attn_rel_b``, rebuilt per layer), then
    cross-attention over ``cross_embd``: ``n_ctx_train`` encoder rows while no encoder has
    run (``build_inp_cross_embd``), K and V recomputed each layer, never cached."""
    g = lg.g
    t = lg.t
    n_tokens = lg.n_tokens
    head = spec.head_v_full
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    n_enc = spec.n_ctx_train
    embd_enc = g.input(ggml.F32, spec.n_embd, n_enc, name="cross_embd")
    inp = lg.build_attn_inp_kv("kv")
    pos_bucket = g.input(ggml.I32, inp.n_kv, n_tokens, name="pos_bucket_dec")
    lg.add_rot(inp, spec.head_k_full, spec.head_v_full)
    cross_mask = g.input(
        ggml.F16 if lg.flash_attn else ggml.F32, n_enc, n_tokens, 1, 1, name="cross_kq_mask"
    )
    out_ids = lg.build_inp_out_ids()
    n_dec = _int(lg, "decoder_block_count", spec.n_layer)
    rel_b0 = lg.req("dec.blk.0.attn_rel_b.weight")
    for il in range(n_dec):
        b = f"dec.blk.{il}."
        n_head, n_head_kv = spec.n_head[il], spec.n_head_kv[il]
        inp_sa = inp_l
        cur = lg.build_norm(inp_l, t(b + "attn_norm.weight"), None, True, il)
        q = ggml.mul_mat(g, lg.req(b + "attn_q.weight"), cur)
        k = ggml.mul_mat(g, lg.req(b + "attn_k.weight"), cur)
        v = ggml.mul_mat(g, lg.req(b + "attn_v.weight"), cur)
        q = ggml.reshape(g, q, head, n_head, n_tokens)
        k = ggml.reshape(g, k, head, n_head_kv, n_tokens)
        v = ggml.reshape(g, v, head, n_head_kv, n_tokens)
        rel_b = t(b + "attn_rel_b.weight")
        rel_b = rel_b0 if rel_b is None else rel_b
        pb = ggml.reshape(g, pos_bucket, pos_bucket.ne[0] * pos_bucket.ne[1])
        bias = ggml.get_rows(g, rel_b, pb)
        bias = ggml.reshape(g, bias, bias.ne[0], pos_bucket.ne[0], pos_bucket.ne[1])
        bias = ggml.cont(g, ggml.permute(g, bias, 2, 0, 1, 3))
        cur = lg.build_attn(
            inp,
            lg.req(b + "attn_o.weight"),
            None,
            q,
            k,
            v,
            il,
            head,
            head,
            n_head_kv,
            kq_b=bias,
        )
        cur = ggml.add(g, cur, inp_sa)
        inp_ca = cur
        cur = lg.build_norm(cur, t(b + "cross_attn_norm.weight"), None, True, il)
        q = ggml.mul_mat(g, lg.req(b + "cross_attn_q.weight"), cur)
        k = ggml.mul_mat(g, lg.req(b + "cross_attn_k.weight"), embd_enc)
        v = ggml.mul_mat(g, lg.req(b + "cross_attn_v.weight"), embd_enc)
        q = ggml.reshape(g, q, head, n_head, n_tokens)
        k = ggml.reshape(g, k, head, n_head_kv, n_enc)
        v = ggml.reshape(g, v, head, n_head_kv, n_enc)
        g.expand(q)
        g.expand(k)
        g.expand(v)
        cur = lg.build_attn_mha(q, k, v, None, cross_mask, None, None, il)
        lg.cb(cur, "kqv_out", il)
        cur = ggml.mul_mat(g, lg.req(b + "cross_attn_o.weight"), cur)
        if il == n_dec - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_ca = ggml.get_rows(g, inp_ca, out_ids)
        ffn_inp = ggml.add(g, cur, inp_ca)
        cur = lg.build_norm(ffn_inp, t(b + "ffn_norm.weight"), None, True, il)
        gate = t(b + "ffn_gate.weight")
        cur = lg.build_ffn(
            cur,
            t(b + "ffn_up.weight"),
            None,
            gate,
            None,
            t(b + "ffn_down.weight"),
            None,
            "gelu" if gate is not None else "relu",
            gate is not None,
            il,
        )
        cur = ggml.add(g, cur, ffn_inp)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = lg.build_norm(inp_l, t("dec.output_norm.weight"), None, True, -1)
    lg.cb(embd, "result_norm", -1)
    lg.finish(_lm_head(lg, embd), embd)


def build_glm4moe(lg: LlmGraph, spec: ModelSpec) -> None:
    """``src/models/glm4-moe.cpp`` ``graph`` (the NextN/MTP layer has its own graph,
    ``graph_mtp``, which the reserve graph does not build): q/k/v biases, optional Q/K
    norms (both before either RoPE), the post-attention norm as the FFN norm, leading dense
    layers, then routed experts (sigmoid router with the selection bias) plus one shared
    expert. The partial RoPE keeps Q/K's shape."""
    g = lg.g
    t = lg.t
    inp_l = lg.build_inp_embd(lg.req("token_embd.weight"))
    inp_pos = lg.build_inp_pos()
    inputs = _attn_inputs(lg, spec)
    out_ids = lg.build_inp_out_ids()
    n_layer = spec.n_layer
    n_dense = _int(lg, "leading_dense_block_count")
    # load_arch_hparams: expert_gating_func defaults to sigmoid (NONE -> SIGMOID)
    gating = {1: "softmax"}.get(_int(lg, "expert_gating_func", 2), "sigmoid")
    for il in lg.layers:
        inp_sa = inp_l
        cur = _rms(lg, inp_l, "attn_norm", il)
        head_k, head_v = _head(spec, il)
        q, k, v = lg.build_qkv(il, cur, head_k, spec.n_head[il], head_k, spec.n_head_kv[il])
        if t("attn_q_norm.weight", il) is not None:
            q = _rms(lg, q, "attn_q_norm", il)
        if t("attn_k_norm.weight", il) is not None:
            k = _rms(lg, k, "attn_k_norm", il)
        q = ggml.rope(g, q, inp_pos, None)
        k = ggml.rope(g, k, inp_pos, None)
        cur = lg.build_attn(
            _inp_for(inputs, spec, il),
            t("attn_output.weight", il),
            None,
            q,
            k,
            v,
            il,
            head_k,
            head_v,
            spec.n_head_kv[il],
        )
        if il == n_layer - 1:
            cur = ggml.get_rows(g, cur, out_ids)
            inp_sa = ggml.get_rows(g, inp_sa, out_ids)
        ffn_inp = ggml.add(g, cur, inp_sa)
        cur = _rms(lg, ffn_inp, "post_attention_norm", il)
        if il < n_dense:
            cur = lg.build_ffn(
                cur,
                t("ffn_up.weight", il),
                None,
                t("ffn_gate.weight", il),
                None,
                t("ffn_down.weight", il),
                None,
                "silu",
                True,
                il,
            )
        else:
            moe = lg.build_moe_ffn(
                cur,
                il,
                spec.n_expert,
                spec.n_expert_used,
                "silu",
                bool(lg.hp.get("expert_weights_norm", False)),
                lg.hpf("expert_weights_scale"),
                gating,
                exp_probs_b=t("exp_probs_b.bias", il),
            )
            shexp = lg.build_ffn(
                cur,
                t("ffn_up_shexp.weight", il),
                None,
                t("ffn_gate_shexp.weight", il),
                None,
                t("ffn_down_shexp.weight", il),
                None,
                "silu",
                True,
                il,
            )
            cur = ggml.add(g, moe, shexp)
        cur = ggml.add(g, cur, ffn_inp)
        lg.cb(cur, "l_out", il)
        inp_l = cur
        lg.layer_done(il, cur)
    embd = _out_rms(lg, inp_l)
    lg.finish(_lm_head(lg, embd), embd)


def _hp_int(spec: ModelSpec, key: str, default: int = 0) -> int:
    value = spec.hparam(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


LayerVariant = Callable[[ModelSpec, int], Hashable]

LAYER_VARIANTS: Final[dict[str, LayerVariant]] = {
    # what makes a layer's graph differ beyond its tensors, its heads and its kind: the
    # builders above branch on the layer index here (compute.py cuts only equal layers)
    "llama4": lambda spec, il: (il + 1) % 4 == 0,  # no RoPE, temperature-scaled Q
    "rwkv6": lambda spec, il: (
        (il + 1) % r == 0 if (r := _hp_int(spec, "rescale_every_n_layers")) else False
    ),
    "gemma4": lambda spec, il: il >= spec.n_layer_all - _hp_int(spec, "attention.shared_kv_layers"),
    "gemma3n": lambda spec, il: (il >= 20, il < 10),  # shared KV, sparse FFN
}


BUILDERS: Final[dict[str, Builder]] = {
    "llama": build_llama,
    "mistral3": build_mistral3,
    "qwen2": build_llama,
    "qwen3": build_qwen3,
    "qwen3moe": build_qwen3,
    "deci": build_deci,
    "phi3": build_phi3,
    "gemma2": build_gemma2,
    "gemma3": build_gemma3,
    "cohere2": build_cohere2,
    "gpt-oss": build_gpt_oss,
    "deepseek2": build_deepseek2,
    "mamba": build_mamba,
    "mamba2": build_mamba,
    "granitehybrid": build_granitehybrid,
    "lfm2": build_lfm2,
    "rwkv6": build_rwkv,
    "rwkv7": build_rwkv,
    "llama4": build_llama4,
    "gemma4": build_gemma4,
    "gemma3n": build_gemma3n,
    "qwen35": build_qwen35,
    "qwen35moe": build_qwen35,
    "deepseek32": build_deepseek32,
    "t5": build_t5,
    "glm4moe": build_glm4moe,
}
