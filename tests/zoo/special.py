"""Tiny MoE, MLA, recurrent and hybrid models for the zoo (see tests/zoo/__init__.py).

Every model here is complete enough for the real llama.cpp to load it, create a context and
decode a few tokens, yet only a few MB large: random F16 matrices, F32 norms and state
tensors, and a small byte-level BPE tokenizer. The hyperparameters are small but not
degenerate, so that the memory rules of each family are exercised: GQA and a head size that
is not ``n_embd / n_head``, routed and shared experts with leading dense layers, MLA with
distinct q/kv LoRA ranks and RoPE dims, SSM states with several groups, hybrid layer
patterns mixing attention and recurrent layers.

A builder is a data description (``_Model``: metadata + tensor shapes, shapes in ggml order
``ne0, ne1, ...``) turned into a file by one shared writer, ``_write``.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

import gguf
import numpy as np

K = gguf.Keys

#: training context of the attention models (so any n_ctx up to it is valid)
N_CTX_TRAIN = 131072
#: what convert_hf_to_gguf.py writes for Mamba/RWKV, which have no training context
N_CTX_RECURRENT = 1 << 20


# --------------------------------------------------------------------------- tokenizer


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


_CORPUS = (
    "the quick brown fox jumps over the lazy dog and then the dog sleeps in the sun "
    "while the fox runs into the forest where there are other animals that are eating"
)
# the control tokens (and ids used for them) are those of tests/zoo/dense.py
_SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<|endoftext|>")


@dataclass(frozen=True)
class _Tokenizer:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]

    def id(self, token: str) -> int:
        return self.tokens.index(token)


def _tokenizer(n_merges: int = 48) -> _Tokenizer:
    """A byte-level BPE ("gpt2") vocab: 256 bytes + ``n_merges`` merges + 4 control tokens."""
    byte_chars = _bytes_to_unicode()
    tokens = [byte_chars[b] for b in range(256)]
    words = [[byte_chars[b] for b in (" " + w).encode()] for w in _CORPUS.split()]
    merges: list[str] = []
    for _ in range(n_merges):
        counts: dict[tuple[str, str], int] = {}
        for word in words:
            for pair in pairwise(word):
                counts[pair] = counts.get(pair, 0) + 1
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], p))  # deterministic tie-break
        merges.append(f"{best[0]} {best[1]}")
        tokens.append(best[0] + best[1])
        for word in words:
            i = 0
            while i < len(word) - 1:
                if (word[i], word[i + 1]) == best:
                    word[i : i + 2] = [best[0] + best[1]]
                i += 1
    types = [int(gguf.TokenType.NORMAL)] * len(tokens)
    tokens += _SPECIAL_TOKENS
    types += [int(gguf.TokenType.CONTROL)] * len(_SPECIAL_TOKENS)
    return _Tokenizer(tokens, types, merges)


_TOKENIZER = _tokenizer()
N_VOCAB = len(_TOKENIZER.tokens)


# --------------------------------------------------------------------------- model description

Shape = tuple[int, ...]


@dataclass
class _Model:
    """What a builder produces: metadata (key templates with ``{arch}``) and tensor shapes."""

    arch: str
    kv: dict[str, Any]
    tensors: dict[str, Shape] = field(default_factory=dict)
    #: tensor name -> constant fill (others are random); norms default to 1
    fill: dict[str, float] = field(default_factory=dict)
    #: tensors kept F32 although _F32 does not name them (element-wise weights)
    f32: set[str] = field(default_factory=set)

    def add(self, name: str, *ne: int, fill: float | None = None) -> None:
        assert name not in self.tensors, name
        assert all(n > 0 for n in ne), (name, ne)
        self.tensors[name] = tuple(ne)
        if fill is not None:
            self.fill[name] = fill


# multi-dimensional tensors that are not matmul weights (element-wise, conv, scan) and the
# router stay F32 like convert_hf_to_gguf.py leaves them; 1-D tensors are always F32
_F32 = re.compile(r"norm|ssm_conv1d|ssm_[ad]$|lerp|time_mix_first|shortconv\.conv|ffn_gate_inp")


def _dtype(name: str, ne: Shape, f32: Container[str] = ()) -> np.dtype[Any]:
    return np.dtype(np.float32 if len(ne) == 1 or name in f32 or _F32.search(name) else np.float16)


def _data(model: _Model, name: str, ne: Shape, rng: np.random.Generator) -> np.ndarray[Any, Any]:
    shape = tuple(reversed(ne))  # numpy order is the reverse of ggml's ne
    dtype = _dtype(name, ne, model.f32)
    if name in model.fill:
        return np.full(shape, model.fill[name], dtype=dtype)
    if name.endswith(".weight") and ("norm" in name or name.endswith("_ln.weight")):
        return np.ones(shape, dtype=dtype)
    if name.endswith(".bias"):
        return np.zeros(shape, dtype=dtype)
    return (rng.standard_normal(shape) * 0.02).astype(dtype)


def _add_kv(writer: gguf.GGUFWriter, key: str, value: Any) -> None:
    vt = gguf.GGUFValueType
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list) and value and isinstance(value[0], str):
        writer.add_key_value(key, value, vt.ARRAY, sub_type=vt.STRING)
    elif isinstance(value, list):
        sub = vt.FLOAT32 if isinstance(value[0], float) else vt.INT32
        writer.add_key_value(key, value, vt.ARRAY, sub_type=sub)
    else:
        raise TypeError(f"{key}: unsupported value {value!r}")


def _write(model: _Model, path: Path) -> None:
    """Write ``model`` (metadata, tokenizer, tensors) as a GGUF file at ``path``."""
    arch = model.arch
    # gguf-py lists each architecture's tensors; newer ones (deepseek32) it does not know
    # yet, and then llama.cpp's loader alone checks the names (it refuses extra tensors)
    arch_enums = [a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch]
    allowed = {gguf.TENSOR_NAMES[t] for a in arch_enums for t in gguf.MODEL_TENSORS[a]}
    tok = _TOKENIZER
    kv: dict[str, Any] = {
        K.General.NAME: f"ggtune-zoo-{arch}",
        K.General.FILE_TYPE: int(gguf.LlamaFileType.MOSTLY_F16),
        K.General.QUANTIZATION_VERSION: gguf.GGML_QUANT_VERSION,
        K.LLM.VOCAB_SIZE: N_VOCAB,
        **model.kv,
        K.Tokenizer.MODEL: "gpt2",
        K.Tokenizer.PRE: "gpt-2",
        K.Tokenizer.LIST: tok.tokens,
        K.Tokenizer.TOKEN_TYPE: tok.token_types,
        K.Tokenizer.MERGES: tok.merges,
        K.Tokenizer.UNK_ID: tok.id("<unk>"),
        K.Tokenizer.BOS_ID: tok.id("<s>"),
        K.Tokenizer.EOS_ID: tok.id("</s>"),
        K.Tokenizer.PAD_ID: tok.id("<|endoftext|>"),
        K.Tokenizer.ADD_BOS: True,
    }
    writer = gguf.GGUFWriter(path, arch)
    for key, value in kv.items():
        _add_kv(writer, key.format(arch=arch), value)
    rng = np.random.default_rng(zlib.crc32(arch.encode()))
    for name, ne in model.tensors.items():
        base = re.sub(
            r"^((?:enc\.|dec\.)?blk)\.\d+\.", r"\1.{bid}.", re.sub(r"\.(weight|bias)$", "", name)
        )
        if arch_enums and base not in allowed:
            raise ValueError(f"{arch}: tensor {name} is not a {arch} tensor in gguf-py")
        writer.add_tensor(name, _data(model, name, ne, rng))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# --------------------------------------------------------------------------- shared pieces


def _base_kv(
    n_layer: int, n_embd: int, *, n_ctx: int = N_CTX_TRAIN, rms_eps: float | None = 1e-6
) -> dict[str, Any]:
    kv: dict[str, Any] = {
        K.LLM.CONTEXT_LENGTH: n_ctx,
        K.LLM.EMBEDDING_LENGTH: n_embd,
        K.LLM.BLOCK_COUNT: n_layer,
    }
    if rms_eps is not None:
        kv[K.Attention.LAYERNORM_RMS_EPS] = rms_eps
    return kv


def _io(m: _Model, n_embd: int, *, output_norm: str = "output_norm", bias: bool = False) -> None:
    """Token embedding, final norm and an untied output head."""
    m.add("token_embd.weight", n_embd, N_VOCAB)
    m.add(f"{output_norm}.weight", n_embd)
    if bias:
        m.add(f"{output_norm}.bias", n_embd)
    m.add("output.weight", n_embd, N_VOCAB)


def _attn(
    m: _Model, i: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int, *, qk_norm: bool
) -> None:
    """A GQA attention block with separate q/k/v and optional per-head q/k RMS norms."""
    b = f"blk.{i}"
    m.add(f"{b}.attn_q.weight", n_embd, n_head * head_dim)
    m.add(f"{b}.attn_k.weight", n_embd, n_head_kv * head_dim)
    m.add(f"{b}.attn_v.weight", n_embd, n_head_kv * head_dim)
    m.add(f"{b}.attn_output.weight", n_head * head_dim, n_embd)
    if qk_norm:
        m.add(f"{b}.attn_q_norm.weight", head_dim)
        m.add(f"{b}.attn_k_norm.weight", head_dim)


def _ffn(m: _Model, i: int, n_embd: int, n_ff: int, suffix: str = "") -> None:
    """A SwiGLU feed-forward block (``suffix`` "_shexp" for a shared expert)."""
    b = f"blk.{i}"
    m.add(f"{b}.ffn_gate{suffix}.weight", n_embd, n_ff)
    m.add(f"{b}.ffn_up{suffix}.weight", n_embd, n_ff)
    m.add(f"{b}.ffn_down{suffix}.weight", n_ff, n_embd)


def _moe(m: _Model, i: int, n_embd: int, n_ff_exp: int, n_expert: int, *, bias: bool) -> None:
    """Router + stacked routed experts (``bias``: the aux-loss-free selection bias)."""
    b = f"blk.{i}"
    m.add(f"{b}.ffn_gate_inp.weight", n_embd, n_expert)
    if bias:
        m.add(f"{b}.exp_probs_b.bias", n_expert)
    m.add(f"{b}.ffn_gate_exps.weight", n_embd, n_ff_exp, n_expert)
    m.add(f"{b}.ffn_up_exps.weight", n_embd, n_ff_exp, n_expert)
    m.add(f"{b}.ffn_down_exps.weight", n_ff_exp, n_embd, n_expert)


@dataclass(frozen=True)
class _Ssm:
    """Mamba-2 mixer sizes (``n_head`` is stored as ssm.time_step_rank)."""

    d_inner: int
    d_state: int
    d_conv: int
    n_group: int
    n_head: int

    def kv(self) -> dict[str, Any]:
        return {
            K.SSM.CONV_KERNEL: self.d_conv,
            K.SSM.INNER_SIZE: self.d_inner,
            K.SSM.STATE_SIZE: self.d_state,
            K.SSM.TIME_STEP_RANK: self.n_head,
            K.SSM.GROUP_COUNT: self.n_group,
        }


def _mamba2_mixer(m: _Model, i: int, n_embd: int, s: _Ssm) -> None:
    b = f"blk.{i}"
    conv_dim = s.d_inner + 2 * s.n_group * s.d_state
    m.add(f"{b}.ssm_in.weight", n_embd, s.d_inner + conv_dim + s.n_head)
    m.add(f"{b}.ssm_conv1d.weight", s.d_conv, conv_dim)
    m.add(f"{b}.ssm_conv1d.bias", conv_dim)
    m.add(f"{b}.ssm_dt.bias", s.n_head)
    m.add(f"{b}.ssm_a", 1, s.n_head, fill=-1.0)
    m.add(f"{b}.ssm_d", 1, s.n_head, fill=1.0)
    m.add(f"{b}.ssm_norm.weight", s.d_inner // s.n_group, s.n_group)
    m.add(f"{b}.ssm_out.weight", s.d_inner, n_embd)


def _layers(pattern: str) -> Iterator[tuple[int, bool]]:
    """(index, is_attention) for a layer pattern like "MMAMMA" (A = attention)."""
    return ((i, c == "A") for i, c in enumerate(pattern))


# --------------------------------------------------------------------------- architectures


def qwen3moe() -> _Model:
    """Qwen3-30B-A3B in miniature: GQA 4:1, head_dim 32 (q dim 2*n_embd), 8 experts / 2 used."""
    n_layer, n_embd, n_head, n_head_kv, head_dim = 4, 128, 8, 2, 32
    n_expert, n_expert_used, n_ff_exp = 8, 2, 64
    m = _Model(
        "qwen3moe",
        {
            **_base_kv(n_layer, n_embd),
            K.LLM.FEED_FORWARD_LENGTH: 384,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: n_head_kv,
            K.Attention.KEY_LENGTH: head_dim,
            K.Attention.VALUE_LENGTH: head_dim,
            K.Rope.FREQ_BASE: 1e6,
            K.LLM.EXPERT_COUNT: n_expert,
            K.LLM.EXPERT_USED_COUNT: n_expert_used,
            K.LLM.EXPERT_FEED_FORWARD_LENGTH: n_ff_exp,
        },
    )
    _io(m, n_embd)
    for i in range(n_layer):
        m.add(f"blk.{i}.attn_norm.weight", n_embd)
        _attn(m, i, n_embd, n_head, n_head_kv, head_dim, qk_norm=True)
        m.add(f"blk.{i}.ffn_norm.weight", n_embd)
        _moe(m, i, n_embd, n_ff_exp, n_expert, bias=False)
    return m


def deepseek2(kv_lora: int = 64, n_rot: int = 16) -> _Model:
    """DeepSeek-V3 in miniature: MLA (q/kv LoRA, decoupled RoPE), 1 dense + 3 MoE layers.

    Stored as llama.cpp's converter does since the MLA rework: one KV head whose K is the
    compressed latent + RoPE part (key_length = kv_lora_rank + n_rot) and whose V is the
    latent (value_length = kv_lora_rank); the per-head "decompressed" sizes are
    key_length_mla / value_length_mla, with wk_b / wv_b split out of wkv_b. llama.cpp then
    caches K only (V is a view of K). ``kv_lora=32, n_rot=32`` makes the K head 64 wide, a
    multiple of 64 like DeepSeek-V3's 576: llama_kv_cache then turns attn_rot_k on for a
    quantized K cache, which the MLA graph does not use (tests/agreement/test_compute_graph.py).
    """
    n_layer, n_dense, n_embd, n_head = 4, 1, 128, 4
    q_lora, k_mla, v_mla = 64, 48, 32
    n_ff, n_expert, n_expert_used, n_shared, n_ff_exp = 256, 8, 2, 1, 64
    m = _Model(
        "deepseek2",
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
            K.Rope.DIMENSION_COUNT: n_rot,
            K.Rope.FREQ_BASE: 10000.0,
            K.Rope.SCALING_TYPE: "yarn",
            K.Rope.SCALING_FACTOR: 32.0,
            K.Rope.SCALING_ORIG_CTX_LEN: N_CTX_TRAIN // 32,
            K.Rope.SCALING_YARN_LOG_MUL: 0.1,
            K.LLM.LEADING_DENSE_BLOCK_COUNT: n_dense,
            K.LLM.EXPERT_COUNT: n_expert,
            K.LLM.EXPERT_USED_COUNT: n_expert_used,
            K.LLM.EXPERT_SHARED_COUNT: n_shared,
            K.LLM.EXPERT_FEED_FORWARD_LENGTH: n_ff_exp,
            K.LLM.EXPERT_WEIGHTS_SCALE: 2.5,
            K.LLM.EXPERT_WEIGHTS_NORM: True,
            K.LLM.EXPERT_GATING_FUNC: int(gguf.ExpertGatingFuncType.SIGMOID),
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
        if i < n_dense:
            _ffn(m, i, n_embd, n_ff)
        else:
            _moe(m, i, n_embd, n_ff_exp, n_expert, bias=True)
            _ffn(m, i, n_embd, n_ff_exp * n_shared, "_shexp")
    return m


def mamba() -> _Model:
    """Mamba-1: d_inner 2*n_embd (the only expansion llama.cpp supports), dt_rank 8."""
    n_layer, n_embd, d_inner, d_state, d_conv, dt_rank = 4, 128, 256, 16, 4, 8
    m = _Model(
        "mamba",
        {
            **_base_kv(n_layer, n_embd, n_ctx=N_CTX_RECURRENT, rms_eps=1e-5),
            K.LLM.FEED_FORWARD_LENGTH: 0,
            K.Attention.HEAD_COUNT: 0,
            K.SSM.CONV_KERNEL: d_conv,
            K.SSM.INNER_SIZE: d_inner,
            K.SSM.STATE_SIZE: d_state,
            K.SSM.TIME_STEP_RANK: dt_rank,
        },
    )
    _io(m, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        m.add(f"{b}.ssm_in.weight", n_embd, 2 * d_inner)
        m.add(f"{b}.ssm_conv1d.weight", d_conv, d_inner)
        m.add(f"{b}.ssm_conv1d.bias", d_inner)
        m.add(f"{b}.ssm_x.weight", d_inner, dt_rank + 2 * d_state)
        m.add(f"{b}.ssm_dt.weight", dt_rank, d_inner)
        m.add(f"{b}.ssm_dt.bias", d_inner)
        m.add(f"{b}.ssm_a", d_state, d_inner, fill=-1.0)
        m.add(f"{b}.ssm_d", d_inner, fill=1.0)
        m.add(f"{b}.ssm_out.weight", d_inner, n_embd)
    return m


def mamba2() -> _Model:
    """Mamba-2: 8 SSM heads of 32, d_state 64, 2 groups."""
    n_layer, n_embd = 4, 128
    ssm = _Ssm(d_inner=256, d_state=64, d_conv=4, n_group=2, n_head=8)
    m = _Model(
        "mamba2",
        {
            **_base_kv(n_layer, n_embd, n_ctx=N_CTX_RECURRENT, rms_eps=1e-5),
            K.LLM.FEED_FORWARD_LENGTH: 0,
            K.Attention.HEAD_COUNT: 0,
            **ssm.kv(),
        },
    )
    _io(m, n_embd)
    for i in range(n_layer):
        m.add(f"blk.{i}.attn_norm.weight", n_embd)
        _mamba2_mixer(m, i, n_embd, ssm)
    return m


GRANITE_PATTERN = "MMAMMA"


def granitehybrid() -> _Model:
    """Granite-4.0-H in miniature: Mamba-2 layers + GQA attention layers ("MMAMMA").

    A layer is recurrent iff its head_count_kv entry is 0.
    """
    n_embd, n_head, n_head_kv, n_ff = 128, 8, 2, 256
    head_dim = n_embd // n_head
    ssm = _Ssm(d_inner=2 * n_embd, d_state=64, d_conv=4, n_group=1, n_head=8)
    pattern = GRANITE_PATTERN
    m = _Model(
        "granitehybrid",
        {
            **_base_kv(len(pattern), n_embd, rms_eps=1e-5),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: [n_head_kv if c == "A" else 0 for c in pattern],
            K.Rope.FREQ_BASE: 10000.0,
            K.LLM.EMBEDDING_SCALE: 12.0,
            K.LLM.RESIDUAL_SCALE: 0.22,
            K.Attention.SCALE: 0.0078125,
            K.LLM.LOGIT_SCALE: 8.0,
            **ssm.kv(),
        },
    )
    _io(m, n_embd)
    for i, is_attn in _layers(pattern):
        m.add(f"blk.{i}.attn_norm.weight", n_embd)
        if is_attn:
            _attn(m, i, n_embd, n_head, n_head_kv, head_dim, qk_norm=False)
        else:
            _mamba2_mixer(m, i, n_embd, ssm)
        m.add(f"blk.{i}.ffn_norm.weight", n_embd)
        _ffn(m, i, n_embd, n_ff)
    return m


LFM2_PATTERN = "CCACCA"


def lfm2() -> _Model:
    """LFM2 in miniature: short-convolution layers + GQA attention layers ("CCACCA")."""
    n_embd, n_head, n_head_kv, n_ff, l_cache = 128, 8, 2, 256, 3
    head_dim = n_embd // n_head
    pattern = LFM2_PATTERN
    m = _Model(
        "lfm2",
        {
            **_base_kv(len(pattern), n_embd, rms_eps=1e-5),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: [n_head_kv if c == "A" else 0 for c in pattern],
            K.Rope.FREQ_BASE: 1e6,
            K.ShortConv.L_CACHE: l_cache,
        },
    )
    _io(m, n_embd, output_norm="token_embd_norm")
    for i, is_attn in _layers(pattern):
        b = f"blk.{i}"
        m.add(f"{b}.attn_norm.weight", n_embd)
        if is_attn:
            _attn(m, i, n_embd, n_head, n_head_kv, head_dim, qk_norm=True)
        else:
            m.add(f"{b}.shortconv.conv.weight", l_cache, n_embd)
            m.add(f"{b}.shortconv.in_proj.weight", n_embd, 3 * n_embd)
            m.add(f"{b}.shortconv.out_proj.weight", n_embd, n_embd)
        m.add(f"{b}.ffn_norm.weight", n_embd)
        _ffn(m, i, n_embd, n_ff)
    return m


def _rwkv_common(m: _Model, i: int, n_embd: int, n_ff: int) -> None:
    """Layer norms, attention-side projections and channel mix shared by RWKV-6 and -7."""
    b = f"blk.{i}"
    for norm in ("attn_norm", "attn_norm_2", "time_mix_ln"):
        m.add(f"{b}.{norm}.weight", n_embd)
        m.add(f"{b}.{norm}.bias", n_embd)
    for proj in ("key", "value", "receptance"):
        m.add(f"{b}.time_mix_{proj}.weight", n_embd, n_embd)
    m.add(f"{b}.time_mix_output.weight", n_embd, n_embd)
    m.add(f"{b}.channel_mix_lerp_k.weight", n_embd, 1, 1, fill=0.5)
    m.add(f"{b}.channel_mix_key.weight", n_embd, n_ff)
    m.add(f"{b}.channel_mix_value.weight", n_ff, n_embd)


def _rwkv_io(m: _Model, n_embd: int) -> None:
    _io(m, n_embd, bias=True)
    m.add("token_embd_norm.weight", n_embd)
    m.add("token_embd_norm.bias", n_embd)


def rwkv6() -> _Model:
    """RWKV-6 (Finch): 2 heads of 64, time-mix/decay LoRA dims 32/64."""
    n_layer, n_embd, head_size, n_ff, mix_dim, decay_dim = 4, 128, 64, 448, 32, 64
    m = _Model(
        "rwkv6",
        {
            **_base_kv(n_layer, n_embd, n_ctx=N_CTX_RECURRENT, rms_eps=None),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: 0,
            K.Attention.LAYERNORM_EPS: 1e-5,
            K.WKV.HEAD_SIZE: head_size,
            K.LLM.TIME_MIX_EXTRA_DIM: mix_dim,
            K.LLM.TIME_DECAY_EXTRA_DIM: decay_dim,
            K.LLM.RESCALE_EVERY_N_LAYERS: 6,
        },
    )
    _rwkv_io(m, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        _rwkv_common(m, i, n_embd, n_ff)
        m.add(f"{b}.time_mix_w1.weight", n_embd, mix_dim * 5)
        m.add(f"{b}.time_mix_w2.weight", mix_dim, n_embd, 5)
        m.add(f"{b}.time_mix_lerp_x.weight", n_embd, 1, 1, fill=0.5)
        m.add(f"{b}.time_mix_lerp_fused.weight", n_embd, 1, 1, 5, fill=0.5)
        m.add(f"{b}.time_mix_first.weight", head_size, n_embd // head_size)
        m.add(f"{b}.time_mix_decay.weight", n_embd, fill=-1.0)
        m.add(f"{b}.time_mix_decay_w1.weight", n_embd, decay_dim)
        m.add(f"{b}.time_mix_decay_w2.weight", decay_dim, n_embd)
        m.add(f"{b}.time_mix_gate.weight", n_embd, n_embd)
        m.add(f"{b}.channel_mix_lerp_r.weight", n_embd, 1, 1, fill=0.5)
        m.add(f"{b}.channel_mix_receptance.weight", n_embd, n_embd)
    return m


def rwkv7() -> _Model:
    """RWKV-7 (Goose): 2 heads of 64, decay/iclr/value-mix/gate LoRA ranks 32/32/16/64."""
    n_layer, n_embd, head_size, n_ff = 4, 128, 64, 512
    decay, iclr, v_mix, gate = 32, 32, 16, 64
    m = _Model(
        "rwkv7",
        {
            **_base_kv(n_layer, n_embd, n_ctx=N_CTX_RECURRENT, rms_eps=None),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: 0,
            K.Attention.LAYERNORM_EPS: 1e-5,
            K.WKV.HEAD_SIZE: head_size,
            K.Attention.DECAY_LORA_RANK: decay,
            K.Attention.ICLR_LORA_RANK: iclr,
            K.Attention.VALUE_RESIDUAL_MIX_LORA_RANK: v_mix,
            K.Attention.GATE_LORA_RANK: gate,
        },
    )
    _rwkv_io(m, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        _rwkv_common(m, i, n_embd, n_ff)
        v_rank = iclr if i == 0 else v_mix  # layer 0's value-mix LoRA is unused, sized iclr
        for name, rank in (("w", decay), ("a", iclr), ("v", v_rank), ("g", gate)):
            if name != "g":
                m.add(f"{b}.time_mix_{name}0.weight", n_embd)
            m.add(f"{b}.time_mix_{name}1.weight", n_embd, rank)
            m.add(f"{b}.time_mix_{name}2.weight", rank, n_embd)
        m.add(f"{b}.time_mix_lerp_fused.weight", n_embd, 1, 1, 6, fill=0.5)
        for name in ("k_k", "k_a", "r_k"):
            m.add(f"{b}.time_mix_{name}.weight", n_embd)
    return m


def glm4moe(mtp: bool = False) -> _Model:
    """GLM-4.5 in miniature (src/models/glm4-moe.cpp): q/k/v biases, q/k norms, partial RoPE
    (16 of 32), the post-attention norm as the FFN norm, 2 leading dense layers, then 8
    experts (2 used) with the sigmoid router's selection bias and one shared expert; no
    NextN/MTP layer (as converted with --no-mtp), or with ``mtp`` one more MoE layer
    carrying the NextN tensors (the default conversion; llama.cpp skips it at inference)."""
    n_trunk, n_dense, n_embd, n_head, n_head_kv, head_dim = 5, 2, 128, 8, 2, 32
    n_layer = n_trunk + 1 if mtp else n_trunk
    n_ff, n_expert, n_expert_used, n_shared, n_ff_exp = 256, 8, 2, 1, 64
    m = _Model(
        "glm4moe",
        {
            **_base_kv(n_layer, n_embd),
            K.LLM.FEED_FORWARD_LENGTH: n_ff,
            K.Attention.HEAD_COUNT: n_head,
            K.Attention.HEAD_COUNT_KV: n_head_kv,
            K.Attention.KEY_LENGTH: head_dim,
            K.Attention.VALUE_LENGTH: head_dim,
            K.Rope.DIMENSION_COUNT: head_dim // 2,
            K.Rope.FREQ_BASE: 1000000.0,
            K.LLM.LEADING_DENSE_BLOCK_COUNT: n_dense,
            K.LLM.EXPERT_COUNT: n_expert,
            K.LLM.EXPERT_USED_COUNT: n_expert_used,
            K.LLM.EXPERT_SHARED_COUNT: n_shared,
            K.LLM.EXPERT_FEED_FORWARD_LENGTH: n_ff_exp,
            K.LLM.EXPERT_WEIGHTS_SCALE: 2.5,
            K.LLM.EXPERT_WEIGHTS_NORM: True,
            K.LLM.EXPERT_GATING_FUNC: int(gguf.ExpertGatingFuncType.SIGMOID),
            **({K.LLM.NEXTN_PREDICT_LAYERS: 1} if mtp else {}),
        },
    )
    _io(m, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        if i >= n_trunk:
            m.add(f"{b}.nextn.eh_proj.weight", 2 * n_embd, n_embd)
            m.add(f"{b}.nextn.enorm.weight", n_embd)
            m.add(f"{b}.nextn.hnorm.weight", n_embd)
            m.add(f"{b}.nextn.shared_head_norm.weight", n_embd)
        m.add(f"{b}.attn_norm.weight", n_embd)
        _attn(m, i, n_embd, n_head, n_head_kv, head_dim, qk_norm=True)
        m.add(f"{b}.attn_q.bias", n_head * head_dim)
        m.add(f"{b}.attn_k.bias", n_head_kv * head_dim)
        m.add(f"{b}.attn_v.bias", n_head_kv * head_dim)
        m.add(f"{b}.post_attention_norm.weight", n_embd)
        if i < n_dense:
            _ffn(m, i, n_embd, n_ff)
        else:
            _moe(m, i, n_embd, n_ff_exp, n_expert, bias=True)
            _ffn(m, i, n_embd, n_ff_exp * n_shared, "_shexp")
    return m


def _builder(describe: Callable[[], _Model]) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        _write(describe(), path)

    build.__doc__ = describe.__doc__
    return build


_DESCRIBE: dict[str, Callable[[], _Model]] = {
    "qwen3moe": qwen3moe,
    "deepseek2": deepseek2,
    "glm4moe": glm4moe,
    "glm4moe-mtp": partial(glm4moe, mtp=True),
    "mamba": mamba,
    "mamba2": mamba2,
    "granitehybrid": granitehybrid,
    "lfm2": lfm2,
    "rwkv6": rwkv6,
    "rwkv7": rwkv7,
}

BUILDERS: dict[str, Callable[[Path], None]] = {
    name: _builder(describe) for name, describe in _DESCRIBE.items()
}

VARIANTS: dict[str, Callable[[Path], None]] = {
    # not in the zoo every suite runs: each reproduces one effect its zoo model lacks
    "deepseek2-k64": _builder(partial(deepseek2, kv_lora=32, n_rot=32)),
}
