"""The reserve graph's building blocks, as ``src/llama-graph.cpp`` builds them.

:class:`LlmGraph` mirrors ``llm_graph_context`` for the worst-case micro-batch that
``llama_context::sched_reserve`` reserves: ``n_tokens = min(n_ctx, n_ubatch)`` rounded up
to ``n_seq_max`` sequences, every token an output, the memory module "full" (every KV cell
visible: ``n_kv`` = the cache size; the recurrent state at head 0). Its methods are named
after the C++ helpers (``build_inp_embd``, ``build_attn``, ``build_ffn``,
``build_moe_ffn``, ``build_rs`` …) and create the same tensors in the same order, with
the same ``ggml_build_forward_expand`` calls, so the node order — which decides how
ggml-alloc reuses memory — is llama.cpp's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from app.predict.graph import ggml
from app.predict.graph.ggml import (
    BUF_STATE,
    BUF_WEIGHTS,
    F16,
    F32,
    FLAG_OUTPUT,
    I32,
    I64,
    Graph,
    Tensor,
)

HOST: Final = -1
"""Device index of the host (the CPU backend)."""


@dataclass(frozen=True, slots=True)
class GraphParams:
    """What the reserve graph depends on besides the model.

    ``caches`` maps a cache name (``"kv"``, ``"kv_swa"``) to its size in cells per stream;
    ``layer_device``/``output_device`` give each layer's device (-1 = host) and
    ``n_cpu_moe`` the layers whose experts stay on the host (``--n-cpu-moe``),
    ``overrides`` the device of each tensor a ``-ot`` pattern moves.
    """

    n_tokens: int
    n_seqs: int
    n_outputs: int
    kv_unified: bool
    flash_attn: bool
    type_k: int
    type_v: int
    caches: Mapping[str, int]
    n_rs: int
    layer_device: tuple[int, ...]
    output_device: int
    n_cpu_moe: int = 0
    offload_kqv: bool = True
    overrides: Mapping[str, int] | None = None

    @property
    def n_stream(self) -> int:
        """Return the number of KV streams (one when unified)."""
        return 1 if self.kv_unified else self.n_seqs


class WeightSource:
    """The model's weights as graph leaves: shape and type from the file, device by layer."""

    def __init__(self, tensors: Mapping[str, tuple[tuple[int, ...], int, int | None, str]]):
        # name -> (shape, ggml type, layer, role as in app.model.spec.tensor_role)
        self.tensors = tensors

    def has(self, name: str) -> bool:
        """Return whether the model has tensor ``name``."""
        return name in self.tensors


class LlmGraph:
    """``llm_graph_context`` for the reserve graph of one model and one set of params."""

    def __init__(
        self,
        weights: WeightSource,
        params: GraphParams,
        hp: Mapping[str, object],
    ) -> None:
        self.g = Graph()
        self.w = weights
        self.p = params
        self.hp = hp
        self.n_tokens = params.n_tokens
        self.n_seqs = params.n_seqs
        self.n_outputs = params.n_outputs
        self.flash_attn = params.flash_attn
        self._leaf: dict[tuple[str, int], Tensor] = {}
        self.t_logits: Tensor | None = None
        self.t_embd: Tensor | None = None
        self.pinned: dict[int, int] = {}
        """Tensor id -> device forced by ``ggml_backend_sched_set_tensor_backend``."""
        self.layer_of_norm: dict[int, int] = {}
        """Tensor id -> layer of each ``norm`` / ``l_last`` callback (graph_get_cb pins them)."""
        self.layers: list[int] = []
        """The layers to build, in order (all of them unless a run of equal ones is cut)."""
        self.layer_outputs: dict[int, Tensor] = {}
        """Layer -> its output (the next layer's input), for the allocator checkpoints."""

    def layer_done(self, il: int, out: Tensor) -> None:
        """Note layer ``il``'s output (the residual the next layer reads)."""
        self.layer_outputs[il] = out

    # --- weights and caches ---------------------------------------------------------

    def weight_device(self, name: str, layer: int | None, role: str, il: int | None) -> int:
        """Return the device a weight lives on (``src/llama-model.cpp`` ``load_tensors``).

        As app.predict.estimate ``tensor_device`` places it: the input layer on the host,
        block tensors with their layer, the rest with the output layer.
        """
        p = self.p
        if p.overrides and name in p.overrides:
            return p.overrides[name]
        expert = role == "expert"
        if role == "token_embedding":
            return HOST
        if layer is None:
            if il is not None and 0 <= il < len(p.layer_device):
                return p.layer_device[il]  # per-layer duplicates (rope_freqs)
            return p.output_device
        if layer >= len(p.layer_device):
            return HOST
        if expert and layer < p.n_cpu_moe:
            return HOST
        return p.layer_device[layer]

    def t(self, name: str, il: int | None = None) -> Tensor | None:
        """Return weight ``name`` (``blk.{il}.`` is prefixed when ``il`` is given), or None."""
        if il is not None and il < 0:
            il = None
        full = f"blk.{il}.{name}" if il is not None and not name.startswith("blk.") else name
        info = self.w.tensors.get(full)
        if info is None:
            return None
        shape, ggml_type, layer, role = info
        dev = self.weight_device(full, layer, role, il)
        key = (full, dev)
        leaf = self._leaf.get(key)
        if leaf is None:
            ne = (*shape, 1, 1, 1, 1)
            leaf = self.g.leaf(ggml_type, (ne[0], ne[1], ne[2], ne[3]), full, BUF_WEIGHTS, dev)
            self._leaf[key] = leaf
        return leaf

    def req(self, name: str, il: int | None = None) -> Tensor:
        """Return weight ``name``; it must exist."""
        t = self.t(name, il)
        assert t is not None, f"missing tensor {name} (layer {il})"
        return t

    def output_weight(self) -> Tensor:
        """Return ``output.weight`` or, tied, ``token_embd.weight`` on the output device."""
        out = self.t("output.weight")
        if out is not None:
            return out
        shape, ggml_type, _, _ = self.w.tensors["token_embd.weight"]
        dev = self.p.output_device
        key = ("token_embd.weight", dev)
        leaf = self._leaf.get(key)
        if leaf is None:
            ne = (*shape, 1, 1)
            leaf = self.g.leaf(
                ggml_type, (ne[0], ne[1], 1, 1), "token_embd.weight", BUF_WEIGHTS, dev
            )
            self._leaf[key] = leaf
        return leaf

    def kv_device(self, il: int) -> int:
        """Return where layer ``il``'s cache lives (the layer's device unless no KV offload)."""
        p = self.p
        return p.layer_device[il] if p.offload_kqv else HOST

    def cache_tensor(
        self, name: str, ggml_type: int, ne: tuple[int, int, int, int], il: int
    ) -> Tensor:
        """Return a cache tensor (``cache_k_l{il}`` …): pre-allocated, never in compute."""
        key = (name, -100 - il)
        leaf = self._leaf.get(key)
        if leaf is None:
            leaf = self.g.leaf(ggml_type, ne, name, BUF_STATE, self.kv_device(il))
            self._leaf[key] = leaf
        return leaf

    def hpf(self, key: str, default: float = 0.0) -> float:
        """Return the ``{arch}.{key}`` number from the file, or ``default``."""
        value = self.hp.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return default
        return float(value)

    # --- callbacks --------------------------------------------------------------------

    def cb(self, cur: Tensor, name: str, il: int) -> None:
        """``graph_get_cb``: name the tensor; remember norms and layer outputs to pin."""
        cur.name = f"{name}-{il}" if il >= 0 else name
        if il >= 0 and name in ("norm", "l_last"):
            self.layer_of_norm[cur.id] = il

    # --- inputs -----------------------------------------------------------------------

    def build_inp_embd(self, tok_embd: Tensor, scale: bool = False) -> Tensor:
        """``build_inp_embd``: token ids, the (unused) embeddings input, the get_rows.

        ``scale``: the architecture sets ``f_embedding_scale`` (granite family).
        """
        g = self.g
        tokens = g.input(I32, self.n_tokens, name="inp_tokens")
        embd = g.input(F32, tok_embd.ne[0], self.n_tokens, name="inp_embd")
        cur = ggml.get_rows(g, tok_embd, tokens)
        # ggml_build_forward_select: both paths are visited, the vector one as a leaf
        g.expand(cur)
        g.expand(embd)
        if scale:
            if not cur.is_contiguous():
                cur = ggml.cont(g, cur)
            cur = ggml.unary(g, cur, "SCALE")
        self.cb(cur, "embd", -1)
        g.expand(cur)
        return cur

    def build_inp_pos(self, n_pos_per_embd: int = 1) -> Tensor:
        """``build_inp_pos``."""
        return self.g.input(I32, self.n_tokens * n_pos_per_embd, name="inp_pos")

    def build_inp_out_ids(self) -> Tensor:
        """``build_inp_out_ids``: one i32 per output row."""
        return self.g.input(I32, self.n_outputs, name="out_ids")

    def _kq_mask(self, n_kv: int) -> Tensor:
        # build_attn_inp_kq_mask: f16 with flash attention, [n_kv, n_tokens/n_stream, 1, n_stream]
        n_stream = self.p.n_stream
        t = F16 if self.flash_attn else F32
        return self.g.input(
            t, n_kv, self.n_tokens // n_stream, 1, n_stream, name="attn_inp_kq_mask"
        )

    def _rot(self, quantized: bool, head_all: int, head0: int, for_k: bool) -> Tensor | None:
        # llama_kv_cache (constructor, build_input_k_rot / v_rot; PR #21038): a quantized
        # cache whose layers share one head size (head_all > 0) is rotated when layer 0's
        # head size (hparams.n_embd_head_k() without a layer) is a multiple of 64
        if not quantized or head_all <= 0 or head0 % 64:
            return None
        nrot = 64
        if for_k:
            while True:
                nrot *= 2
                if head_all % nrot:
                    break
            nrot //= 2
        return self.g.input(F32, nrot, nrot, name="attn_inp_k_rot" if for_k else "attn_inp_v_rot")

    def build_attn_inp_kv(self, cache: str = "kv", with_v: bool = True) -> AttnInput:
        """``build_attn_inp_kv`` (or ``_k`` when ``with_v`` is False): indices and mask."""
        g = self.g
        n_kv = self.p.caches[cache]
        k_idxs = g.input(I64, self.n_tokens, name="attn_inp_k_idxs")
        v_idxs = None
        if with_v:
            v_n = self.n_tokens if self.flash_attn else self.n_tokens * self.n_embd_v_gqa_max()
            v_idxs = g.input(I64, v_n, name="attn_inp_v_idxs")
        mask = self._kq_mask(n_kv)
        return AttnInput(cache, n_kv, k_idxs, v_idxs, mask, None, None, "kv_swa" in self.p.caches)

    def add_rot(
        self,
        inp: AttnInput,
        head_k: int,
        head_v: int,
        with_v: bool = True,
        head0_k: int | None = None,
        head0_v: int | None = None,
    ) -> None:
        """Add the rotation inputs of a quantized cache (created after the masks).

        ``head_k``/``head_v``: the cache's head size (-1 when its layers differ);
        ``head0_*``: layer 0's (default: the same).
        """
        qk = ggml.is_quantized(self.p.type_k)
        qv = ggml.is_quantized(self.p.type_v)
        h0k = head_k if head0_k is None else head0_k
        h0v = head_v if head0_v is None else head0_v
        inp.k_rot = self._rot(qk, head_k, h0k, True)
        inp.v_rot = self._rot(qv, head_v, h0v, False) if with_v else None

    def n_embd_v_gqa_max(self) -> int:
        """Return the widest V row (``hparams.n_embd_v_gqa_max``), set by the model."""
        value = self.hp.get("__n_embd_v_gqa_max")
        assert isinstance(value, int)
        return value

    # --- blocks -----------------------------------------------------------------------

    def build_norm(
        self, cur: Tensor, mw: Tensor | None, mb: Tensor | None, rms: bool, il: int
    ) -> Tensor:
        """``build_norm`` (LLM_NORM_RMS or LLM_NORM)."""
        g = self.g
        cur = ggml.unary(g, cur, "RMS_NORM" if rms else "NORM")
        if mw is not None or mb is not None:
            self.cb(cur, "norm", il)
        if mw is not None:
            cur = ggml.mul(g, cur, mw)
        if mb is not None:
            cur = ggml.add(g, cur, mb)
        return cur

    def build_lora_mm(self, w: Tensor, cur: Tensor, w_s: Tensor | None = None) -> Tensor:
        """``build_lora_mm`` (no adapters)."""
        res = ggml.mul_mat(self.g, w, cur)
        if w_s is not None:
            res = ggml.mul(self.g, res, w_s)
        return res

    def build_qkv(
        self,
        il: int,
        cur: Tensor,
        head_q: int,
        n_head_q: int,
        head_k: int,
        n_head_k: int,
        head_v: int | None = None,
        n_head_v: int | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """``build_qkv``: fused or separate projections (+ biases), reshaped to heads."""
        g = self.g
        head_v = head_k if head_v is None else head_v
        n_head_v = n_head_k if n_head_v is None else n_head_v
        n_tokens = self.n_tokens
        wqkv = self.t("attn_qkv.weight", il)
        if wqkv is not None:
            qkv = self.build_lora_mm(wqkv, cur)
            b = self.t("attn_qkv.bias", il)
            if b is not None:
                qkv = ggml.add(g, qkv, b)
            q_embd = head_q * n_head_q
            k_embd = head_k * n_head_k
            rs = ggml.row_size
            q = ggml.view_3d(g, qkv, head_q, n_head_q, n_tokens, rs(qkv.type, head_q), qkv.nb[1], 0)
            k = ggml.view_3d(
                g,
                qkv,
                head_k,
                n_head_k,
                n_tokens,
                rs(qkv.type, head_k),
                qkv.nb[1],
                rs(qkv.type, q_embd),
            )
            v = ggml.view_3d(
                g,
                qkv,
                head_v,
                n_head_v,
                n_tokens,
                rs(qkv.type, head_v),
                qkv.nb[1],
                rs(qkv.type, q_embd + k_embd),
            )
            return q, k, v
        q = self.build_lora_mm(self.req("attn_q.weight", il), cur)
        self.cb(q, "Qcur", il)
        b = self.t("attn_q.bias", il)
        if b is not None:
            q = ggml.add(g, q, b)
        k = self.build_lora_mm(self.req("attn_k.weight", il), cur)
        self.cb(k, "Kcur", il)
        b = self.t("attn_k.bias", il)
        if b is not None:
            k = ggml.add(g, k, b)
        v = self.build_lora_mm(self.req("attn_v.weight", il), cur)
        self.cb(v, "Vcur", il)
        b = self.t("attn_v.bias", il)
        if b is not None:
            v = ggml.add(g, v, b)
        q = ggml.reshape(g, q, head_q, n_head_q, n_tokens)
        k = ggml.reshape(g, k, head_k, n_head_k, n_tokens)
        v = ggml.reshape(g, v, head_v, n_head_v, n_tokens)
        return q, k, v

    def build_ffn(
        self,
        cur: Tensor,
        up: Tensor | None,
        up_b: Tensor | None,
        gate: Tensor | None,
        gate_b: Tensor | None,
        down: Tensor | None,
        down_b: Tensor | None,
        act: str,
        parallel: bool,
        il: int,
    ) -> Tensor:
        """``build_ffn``: ``act`` is "silu", "gelu", "relu", "relu_sqr" or "swiglu"."""
        g = self.g
        tmp = self.build_lora_mm(up, cur) if up is not None else cur
        self.cb(tmp, "ffn_up", il)
        if up_b is not None:
            tmp = ggml.add(g, tmp, up_b)
        if gate is not None:
            cur = self.build_lora_mm(gate, cur if parallel else tmp)
            self.cb(cur, "ffn_gate", il)
            if gate_b is not None:
                cur = ggml.add(g, cur, gate_b)
        else:
            cur = tmp
        par = gate is not None and parallel
        if act in ("silu", "gelu", "relu"):
            if par:
                cur = ggml.glu(g, cur, tmp)
                par = False
            else:
                cur = ggml.unary(g, cur)
        elif act == "relu_sqr":
            cur = ggml.unary(g, cur)
            cur = ggml.unary(g, cur, "SQR")
        elif act in ("swiglu", "geglu"):
            cur = ggml.glu(g, cur, None)
        else:
            raise AssertionError(f"unknown ffn activation {act}")
        if par:
            cur = ggml.mul(g, cur, tmp)
        if down is not None:
            cur = self.build_lora_mm(down, cur)
        if down_b is not None:
            cur = ggml.add(g, cur, down_b)
        return cur

    def build_moe_ffn(
        self,
        cur: Tensor,
        il: int,
        n_expert: int,
        n_expert_used: int,
        act: str,
        norm_w: bool,
        w_scale: float,
        gating: str,
        exp_probs_b: Tensor | None = None,
        gate_inp_b: Tensor | None = None,
        up_b: Tensor | None = None,
        gate_b: Tensor | None = None,
        down_b: Tensor | None = None,
        n_expert_groups: int = 0,
        n_group_used: int = 0,
        weight_before_ffn: bool = False,
        logits_in: Tensor | None = None,
    ) -> Tensor:
        """``build_moe_ffn``: router, top-k, per-expert up/gate/down, weighted sum.

        ``logits_in``: router logits the model computed itself (gemma4's ``probs_in``).
        """
        g = self.g
        n_embd, n_tokens = cur.ne[0], cur.ne[1]
        if logits_in is not None:
            logits = logits_in
        else:
            logits = self.build_lora_mm(self.req("ffn_gate_inp.weight", il), cur)
            self.cb(logits, "ffn_moe_logits", il)
        if gate_inp_b is not None:
            logits = ggml.add(g, logits, gate_inp_b)
        if gating == "softmax":
            probs = ggml.soft_max(g, logits)
        elif gating == "sigmoid":
            probs = ggml.unary(g, logits)
        elif gating == "softmax_weight":
            probs = logits
        else:
            raise AssertionError(f"unknown gating {gating}")
        selection = probs
        if exp_probs_b is not None:
            selection = ggml.add(g, probs, exp_probs_b)
        if weight_before_ffn:
            selection = logits
        if n_expert_groups > 1 and n_tokens > 0:
            per_group = n_expert // n_expert_groups
            groups = ggml.reshape(g, selection, per_group, n_expert_groups, n_tokens)
            scores = ggml.argsort_top_k(g, groups, 2)
            scores = ggml.get_rows(
                g, ggml.reshape(g, groups, 1, groups.ne[0], groups.ne[1], groups.ne[2]), scores
            )
            scores = ggml.sum_rows(
                g, ggml.reshape(g, scores, scores.ne[1], scores.ne[2], scores.ne[3])
            )
            scores = ggml.reshape(g, scores, scores.ne[1], scores.ne[2])
            expert_groups = ggml.argsort_top_k(g, scores, n_group_used)
            sel = ggml.get_rows(g, groups, expert_groups)
            selection = ggml.set_rows(g, ggml.fill(g, groups), sel, expert_groups)
            selection = ggml.reshape(g, selection, n_expert, n_tokens)
        selected = ggml.argsort_top_k(g, selection, n_expert_used)
        probs = ggml.reshape(g, probs, 1, n_expert, n_tokens)
        weights = ggml.get_rows(g, probs, selected)
        if gating == "softmax_weight":
            weights = ggml.reshape(g, weights, n_expert_used, n_tokens)
            weights = ggml.soft_max(g, weights)
            weights = ggml.reshape(g, weights, 1, n_expert_used, n_tokens)
        if norm_w:
            weights = ggml.reshape(g, weights, n_expert_used, n_tokens)
            weights_sum = ggml.sum_rows(g, weights)
            weights_sum = ggml.clamp(g, weights_sum)
            weights = ggml.binary(g, "DIV", weights, weights_sum)
            weights = ggml.reshape(g, weights, 1, n_expert_used, n_tokens)
        if w_scale != 0.0 and w_scale != 1.0:
            weights = ggml.unary(g, weights, "SCALE")
        g.expand(weights)
        cur = ggml.reshape(g, cur, n_embd, 1, n_tokens)
        if weight_before_ffn:
            repeated = ggml.repeat_4d(g, cur, n_embd, n_expert_used, n_tokens, 1)
            cur = ggml.mul(g, repeated, weights)
        gate_up = self.t("ffn_gate_up_exps.weight", il)
        gate_exps = self.t("ffn_gate_exps.weight", il)
        if gate_up is not None:
            gu = ggml.mul_mat_id(g, gate_up, cur, selected)
            n_ff = gu.ne[0] // 2
            cur = ggml.view_3d(g, gu, n_ff, gu.ne[1], gu.ne[2], gu.nb[1], gu.nb[2], 0)
            up = ggml.view_3d(g, gu, n_ff, gu.ne[1], gu.ne[2], gu.nb[1], gu.nb[2], n_ff * gu.nb[0])
        else:
            up = ggml.mul_mat_id(g, self.req("ffn_up_exps.weight", il), cur, selected)
            if up_b is not None:
                up = ggml.add_id(g, up, up_b, selected)
            if gate_exps is not None:
                cur = ggml.mul_mat_id(g, gate_exps, cur, selected)
            else:
                cur = up
            if gate_b is not None:
                cur = ggml.add_id(g, cur, gate_b, selected)
        has_gate = gate_exps is not None or gate_up is not None
        if act in ("silu", "gelu", "relu"):
            cur = ggml.glu(g, cur, up) if has_gate else ggml.unary(g, cur)
        elif act == "swiglu_oai":
            cur = ggml.glu(g, cur, up)
        elif act == "relu_sqr":
            cur = ggml.unary(g, ggml.unary(g, cur), "SQR")
        else:
            raise AssertionError(f"unknown moe activation {act}")
        experts = ggml.mul_mat_id(g, self.req("ffn_down_exps.weight", il), cur, selected)
        if down_b is not None:
            experts = ggml.add_id(g, experts, down_b, selected)
        if not weight_before_ffn:
            experts = ggml.mul(g, experts, weights)
        g.expand(experts)
        views = []
        for i in range(n_expert_used):
            v = ggml.view_2d(g, experts, n_embd, n_tokens, experts.nb[2], i * experts.nb[1])
            g.expand(v)
            views.append(v)
        moe_out = views[0]
        for v in views[1:]:
            moe_out = ggml.add(g, moe_out, v)
            g.expand(moe_out)
        if n_expert_used == 1:
            moe_out = ggml.cont(g, moe_out)
        return moe_out

    # --- attention --------------------------------------------------------------------

    def build_attn_mha(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        kq_b: Tensor | None,
        mask: Tensor | None,
        sinks: Tensor | None,
        v_mla: Tensor | None,
        il: int,
        soft_cap: bool = False,
    ) -> Tensor:
        """``build_attn_mha``: flash attention, or KQ, soft_max and KQV."""
        g = self.g
        v_trans = v.nb[1] > v.nb[2]
        n_stream = k.ne[3]
        q = ggml.view_4d(
            g,
            q,
            (q.ne[0], q.ne[1], q.ne[2] // n_stream, n_stream),
            q.nb[1],
            q.nb[2],
            q.nb[2] * (q.ne[2] // n_stream),
            0,
        )
        q = ggml.permute(g, q, 0, 2, 1, 3)
        k = ggml.permute(g, k, 0, 2, 1, 3)
        v = ggml.permute(g, v, 0, 2, 1, 3)
        if self.flash_attn and kq_b is None:
            if v_trans:
                v = ggml.transpose(g, v)
            if k.type == F32:
                k = ggml.cast(g, k, F16)
            if v.type == F32:
                v = ggml.cast(g, v, F16)
            cur = ggml.flash_attn_ext(g, q, k, v, mask, sinks)
            if v_mla is not None:
                cur = ggml.permute(g, cur, 0, 2, 1, 3)
                cur = ggml.mul_mat(g, v_mla, cur)
                cur = ggml.permute(g, cur, 0, 2, 1, 3)
                cur = ggml.cont(g, cur)
            cur = ggml.reshape(g, cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
        else:
            kq = ggml.mul_mat(g, k, q)
            self.cb(kq, "kq", il)
            if soft_cap:
                kq = ggml.unary(g, kq, "SCALE")
                kq = ggml.unary(g, kq)
                kq = ggml.unary(g, kq, "SCALE")
            if kq_b is not None:
                kq = ggml.add(g, kq, kq_b)
            kq = ggml.soft_max(g, kq, mask, sinks)
            if not v_trans:
                v = ggml.cont(g, ggml.transpose(g, v))
            kqv = ggml.mul_mat(g, v, kq)
            if v_mla is not None:
                kqv = ggml.mul_mat(g, v_mla, kqv)
            cur = ggml.permute(g, kqv, 0, 2, 1, 3)
            cur = ggml.cont(g, cur, cur.ne[0] * cur.ne[1], cur.ne[2] * cur.ne[3])
            if not self.p.offload_kqv:
                self.pinned[cur.id] = HOST
        g.expand(cur)
        return cur

    def hadamard(self, cur: Tensor, rot: Tensor) -> Tensor:
        """``llama_mul_mat_hadamard`` (``src/llama-impl.h``)."""
        g = self.g
        n = rot.ne[0]
        if not cur.is_contiguous():
            res = ggml.cont(g, cur, n, cur.nelements() // n)
        else:
            res = ggml.reshape(g, cur, n, cur.nelements() // n)
        res = ggml.mul_mat(g, rot, res)
        return ggml.reshape(g, res, *cur.ne)

    def kv_tensors(
        self, il: int, n_embd_k: int, n_embd_v: int, cache_size: int, with_v: bool = True
    ) -> tuple[Tensor, Tensor | None]:
        """Return layer ``il``'s K and V cache tensors ``[n_embd_gqa, kv_size, n_stream]``."""
        ns = self.p.n_stream
        k = self.cache_tensor(f"cache_k_l{il}", self.p.type_k, (n_embd_k, cache_size, ns, 1), il)
        v = None
        if with_v:
            v = self.cache_tensor(
                f"cache_v_l{il}", self.p.type_v, (n_embd_v, cache_size, ns, 1), il
            )
        return k, v

    def build_attn(
        self,
        inp: AttnInput,
        wo: Tensor | None,
        wo_b: Tensor | None,
        q_cur: Tensor,
        k_cur: Tensor | None,
        v_cur: Tensor | None,
        il: int,
        head_k: int,
        head_v: int,
        n_head_kv: int,
        sinks: Tensor | None = None,
        kq_b: Tensor | None = None,
        v_mla: Tensor | None = None,
        soft_cap: bool = False,
        k_only: bool = False,
        cache_layer: int | None = None,
        cache_n_head_kv: int | None = None,
    ) -> Tensor:
        """``build_attn`` with a KV cache (``llm_graph_input_attn_kv`` / ``_k``).

        Without ``k_cur`` the layer stores nothing and reads the cache of ``cache_layer``
        (gemma3n/gemma4 layers that reuse an earlier layer's KV, ``llama_kv_cache``'s
        ``reuse``; ``cache_n_head_kv`` is that layer's KV head count).
        """
        g = self.g
        if inp.k_rot is not None:
            q_cur = self.hadamard(q_cur, inp.k_rot)
            if k_cur is not None:
                k_cur = self.hadamard(k_cur, inp.k_rot)
        if inp.v_rot is not None and v_cur is not None:
            v_cur = self.hadamard(v_cur, inp.v_rot)
        # these nodes are added together so that they are not reordered; the iSWA variant
        # expands K before V
        g.expand(q_cur)
        if inp.iswa:
            if k_cur is not None:
                g.expand(k_cur)
            if v_cur is not None:
                g.expand(v_cur)
        else:
            if v_cur is not None:
                g.expand(v_cur)
            if k_cur is not None:
                g.expand(k_cur)
        kv_size = inp.n_kv
        v_trans = not self.flash_attn
        owner = il if cache_layer is None else cache_layer
        owner_kv = n_head_kv if cache_n_head_kv is None else cache_n_head_kv
        n_embd_k = head_k * owner_kv
        n_embd_v = head_v * owner_kv
        v_width = self.n_embd_v_gqa_max() if v_trans else n_embd_v
        k_cache, v_cache = self.kv_tensors(owner, n_embd_k, v_width, kv_size, with_v=not k_only)
        ns = self.p.n_stream
        if k_cur is not None:
            # cpy_k
            kc = ggml.view_2d(g, k_cur, n_embd_k, k_cur.ne[2], k_cur.nb[2], 0)
            kdst = ggml.reshape(g, k_cache, n_embd_k, kv_size * ns) if ns > 1 else k_cache
            g.expand(ggml.set_rows(g, kdst, kc, inp.k_idxs))
        if not k_only and k_cur is not None:
            assert v_cur is not None
            assert v_cache is not None
            assert inp.v_idxs is not None
            g.expand(self._cpy_v(v_cur, v_cache, inp.v_idxs, kv_size))
        rs = ggml.row_size
        k = ggml.view_4d(
            g,
            k_cache,
            (head_k, n_head_kv, inp.n_kv, ns),  # this layer's heads over the cache's rows
            rs(k_cache.type, head_k),
            rs(k_cache.type, n_embd_k),
            rs(k_cache.type, n_embd_k * kv_size),
            0,
        )
        if k_only:
            assert v_cur is not None, "MLA: V is a view of K as wide as V"
            v = ggml.view_4d(
                g, k, (v_cur.ne[0], k.ne[1], k.ne[2], k.ne[3]), k.nb[1], k.nb[2], k.nb[3], 0
            )
        else:
            assert v_cache is not None
            vt = v_cache.type
            if not v_trans:
                v = ggml.view_4d(
                    g,
                    v_cache,
                    (head_v, n_head_kv, inp.n_kv, ns),
                    rs(vt, head_v),
                    rs(vt, v_width),
                    rs(vt, v_width * kv_size),
                    0,
                )
            else:
                v = ggml.view_4d(
                    g,
                    v_cache,
                    (inp.n_kv, n_head_kv, head_v, ns),
                    rs(vt, kv_size * head_v),
                    rs(vt, kv_size),
                    rs(vt, kv_size * v_width),
                    0,
                )
        cur = self.build_attn_mha(q_cur, k, v, kq_b, inp.mask, sinks, v_mla, il, soft_cap)
        self.cb(cur, "kqv_out", il)
        if inp.v_rot is not None:
            cur = self.hadamard(cur, inp.v_rot)
        if wo is not None:
            cur = self.build_lora_mm(wo, cur)
        if wo_b is not None:
            cur = ggml.add(g, cur, wo_b)
        return cur

    def _cpy_v(self, v_cur: Tensor, v_cache: Tensor, v_idxs: Tensor, kv_size: int) -> Tensor:
        """``llama_kv_cache::cpy_v``."""
        g = self.g
        n_embd_gqa = v_cur.ne[0] * v_cur.ne[1]
        n_tokens = v_cur.ne[2]
        ns = self.p.n_stream
        if self.flash_attn:
            vc = ggml.view_2d(g, v_cur, n_embd_gqa, n_tokens, v_cur.nb[2], 0)
            vdst = ggml.reshape(g, v_cache, n_embd_gqa, kv_size * ns) if ns > 1 else v_cache
            return ggml.set_rows(g, vdst, vc, v_idxs)
        if ggml.row_size(v_cur.type, n_embd_gqa) == v_cur.nb[2]:
            vc = ggml.reshape(g, v_cur, n_embd_gqa, n_tokens)
        else:
            vc = ggml.cont(g, v_cur, n_embd_gqa, n_tokens)
        if n_embd_gqa < v_cache.ne[0]:
            vc = ggml.pad(g, vc, v_cache.ne[0] - n_embd_gqa)
        v_view = ggml.reshape(g, v_cache, 1, v_cache.nelements())
        vc = ggml.reshape(g, vc, 1, vc.nelements())
        return ggml.set_rows(g, v_view, vc, v_idxs)

    # --- recurrent state ---------------------------------------------------------------

    def build_rs_inp(self) -> RsInput:
        """``build_rs_inp``: the state copy ids, split into main and extra views."""
        g = self.g
        n_rs = self.p.n_rs
        s_copy = g.input(I32, n_rs, name="rs_s_copy")
        main = ggml.view_1d(g, s_copy, self.n_seqs, 0)
        extra = ggml.view_1d(g, s_copy, n_rs - self.n_seqs, self.n_seqs * s_copy.nb[0])
        return RsInput(s_copy, main, extra)

    def state_tensor(self, name: str, il: int, n_embd: int) -> Tensor:
        """Return a recurrent state tensor (``cache_r_l``/``cache_s_l``: f32 ``[n_embd, n_rs]``)."""
        return self.cache_tensor(f"{name}{il}", F32, (n_embd, self.p.n_rs, 1, 1), il)

    def build_rs(
        self,
        inp: RsInput,
        s: Tensor,
        state_size: int,
        n_seqs: int,
        get_rows: Callable[[Graph, Tensor, Tensor], Tensor] | None = None,
    ) -> Tensor:
        """``build_rs``: clear the zero state, gather the sequences' states."""
        g = self.g
        n_rs = self.p.n_rs
        states = ggml.reshape(g, s, state_size, s.ne[1])
        zero = ggml.view_1d(g, states, state_size, 0)
        g.expand(ggml.unary(g, zero, "SCALE", inplace=True))
        out = (get_rows or ggml.get_rows)(g, states, inp.main)
        g.expand(out)
        extra = ggml.get_rows(g, states, inp.extra)
        g.expand(
            ggml.cpy(
                g,
                extra,
                ggml.view_2d(g, s, state_size, n_rs - n_seqs, states.nb[1], n_seqs * states.nb[1]),
            )
        )
        return out

    # --- output -----------------------------------------------------------------------

    def finish(self, cur: Tensor, embd: Tensor) -> None:
        """Set the outputs (``llm_graph_result::set_outputs``) and expand the logits."""
        self.t_logits = cur
        self.t_embd = embd
        self.g.expand(cur)
        cur.flags |= FLAG_OUTPUT
        embd.flags |= FLAG_OUTPUT


@dataclass(slots=True)
class AttnInput:
    """``llm_graph_input_attn_kv`` of one cache: indices, mask, rotations."""

    cache: str
    n_kv: int
    k_idxs: Tensor
    v_idxs: Tensor | None
    mask: Tensor
    k_rot: Tensor | None
    v_rot: Tensor | None
    iswa: bool


@dataclass(slots=True)
class RsInput:
    """``llm_graph_input_rs``: the copy ids and their two views."""

    s_copy: Tensor
    main: Tensor
    extra: Tensor


def kq_scale(head: int) -> float:
    """Return ``1/sqrt(head)`` (unused by memory; kept for readers of the builders)."""
    return 1.0 / math.sqrt(head)
