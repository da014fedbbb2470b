"""Tiny dense-attention models for the zoo (see tests/zoo/__init__.py).

Every model is written by one function, :func:`write_spec`, from a :class:`Spec` that
holds what differs between architectures: the hyperparameters, the tensors of a layer
(as a tuple of *roles*, expanded by :func:`layer_tensors`), and the extra metadata keys.
The tensor shapes follow ``load_arch_tensors`` in the vendored llama.cpp
(``src/models/<arch>.cpp``); llama.cpp refuses a file with a missing, extra or
misshapen tensor, so loading the file checks the spec.

The models are small (0.9-1.7 MiB a file, vocabulary of 533 tokens) but not degenerate:
GQA everywhere, head sizes that differ from ``n_embd / n_head``, a 131072-token training
context, sliding windows of 128 and 512, per-layer head counts (deci), MoE with
attention sinks (gpt-oss), and F32/F16/Q8_0/MXFP4 tensors.

``llama`` does not accept a per-layer ``head_count_kv`` array with a 0 in it: its
tensors and graph use the layer-0 sizes for every layer. The per-layer variant is
therefore ``deci`` (Llama-3.1-Nemotron-51B), whose loader and graph read the head
counts of each layer and treat ``n_head_kv == 0`` as a "linear attention" layer and
``n_head == 0`` as an attention-free one.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable, Mapping
from functools import cache, partial
from pathlib import Path

import numpy as np
from gguf import (
    GGMLQuantizationType,
    GGUFValueType,
    GGUFWriter,
    Keys,
    LlamaFileType,
    TokenType,
    quants,
)
from gguf.gguf_writer import GGUFValue

F16 = GGMLQuantizationType.F16
Q8_0 = GGMLQuantizationType.Q8_0
MXFP4 = GGMLQuantizationType.MXFP4

# Roles of a layer's tensors, expanded by layer_tensors().
LLAMA_LAYER = ("attn_norm", "qkv", "attn_out", "ffn_norm", "ffn")


@dataclasses.dataclass(frozen=True)
class Spec:
    """What one zoo model is: hyperparameters, layer tensors and extra metadata."""

    arch: str
    n_layer: int
    n_embd: int
    n_head: int | tuple[int, ...]
    n_head_kv: int | tuple[int, ...]
    n_ff: int | tuple[int, ...] = 0
    # Size of a K (and V) head; written as key_length and value_length when set,
    # otherwise llama.cpp derives n_embd / n_head.
    head_dim: int | None = None
    layer: tuple[str, ...] = LLAMA_LAYER
    tied: bool = False  # no output.weight: the output projection reuses token_embd
    ffn_type: GGMLQuantizationType = F16  # type of the FFN matrices (dense or experts)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    rope_factors: bool = False  # global rope_factors_long/short tensors (Phi-3 LongRoPE)
    layer_norm: bool = False  # LayerNorm epsilon instead of RMSNorm epsilon
    n_ctx_train: int = 131072
    rope_freq_base: float = 10000.0
    # Further "{arch}.…" metadata (gguf.Keys templates) -> value.
    kv: Mapping[str, object] = dataclasses.field(default_factory=dict)

    @staticmethod
    def per_layer(value: int | tuple[int, ...], il: int) -> int:
        """Layer ``il``'s value of a hyperparameter given once or per layer."""
        return value if isinstance(value, int) else value[il]

    def head_size(self) -> int:
        """Size of a K/V head (also the rope dimension count)."""
        return self.head_dim or self.n_embd // self.per_layer(self.n_head, 0)


# ---------------------------------------------------------------------------------------
# tokenizer: a real byte-level BPE ("gpt2") with 256 byte tokens, some merges and
# four control tokens.

_TEXT = (
    "the and that with this from have for not are but you was all can her his one our "
    "out day get has him how man new now old see two way who boy did its let put say "
    "she too use model layer cache token memory context window attention expert tune"
)
# Named as in Llama/Phi-3 vocabularies: llama.cpp looks "<unk>", "<s>", "</s>" and
# "<|endoftext|>" up by name when general.name contains "phi3".
_SPECIALS = ("<unk>", "<s>", "</s>", "<|endoftext|>")


@cache
def _byte_chars() -> tuple[str, ...]:
    """GPT-2's printable stand-in character for each byte 0..255."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    extra = iter(range(256, 512))
    return tuple(chr(b) if b in keep else chr(next(extra)) for b in range(256))


@cache
def tokenizer() -> tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]:
    """Return (tokens, merges, token types) of the zoo's tokenizer."""
    tokens = list(_byte_chars())
    merges: list[str] = []
    seen = set(tokens)
    for word in _TEXT.split():
        for text in (word, "\u0120" + word):  # "Ġ" marks a leading space
            merged = text[0]
            for ch in text[1:]:
                if merged + ch not in seen:
                    merges.append(f"{merged} {ch}")
                    tokens.append(merged + ch)
                    seen.add(merged + ch)
                merged += ch
    types = [TokenType.NORMAL] * len(tokens) + [TokenType.CONTROL] * len(_SPECIALS)
    return (*tokens, *_SPECIALS), tuple(merges), tuple(int(t) for t in types)


def n_vocab() -> int:
    return len(tokenizer()[0])


# ---------------------------------------------------------------------------------------
# tensors


def layer_tensors(spec: Spec, il: int) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, ggml shape ne0-first, kind) of layer ``il``'s tensors, as llama.cpp wants."""
    e, d = spec.n_embd, spec.head_size()
    n_head = spec.per_layer(spec.n_head, il)
    n_kv = spec.per_layer(spec.n_head_kv, il)
    n_ff = spec.per_layer(spec.n_ff, il)
    q, kv = n_head * d, n_kv * d
    x, fe = spec.n_expert, spec.n_ff_exp
    has_attn, has_ffn = n_head > 0, n_ff > 0 or x > 0

    roles: dict[str, list[tuple[str, tuple[int, ...], str]]] = {
        "attn_norm": [("attn_norm.weight", (e,), "norm")] if has_attn else [],
        "qkv": [
            ("attn_q.weight", (e, q), "attn"),
            ("attn_k.weight", (e, kv), "attn"),
            ("attn_v.weight", (e, kv), "attn"),
        ],
        "qkv_fused": [("attn_qkv.weight", (e, q + 2 * kv), "attn")],
        "qkv_bias": [
            ("attn_q.bias", (q,), "bias"),
            ("attn_k.bias", (kv,), "bias"),
            ("attn_v.bias", (kv,), "bias"),
        ],
        "qk_norm": [("attn_q_norm.weight", (d,), "norm"), ("attn_k_norm.weight", (d,), "norm")],
        "attn_out": [("attn_output.weight", (q, e), "attn")],
        "attn_out_bias": [("attn_output.bias", (e,), "bias")],
        "attn_sinks": [("attn_sinks.weight", (n_head,), "bias")],
        "post_attention_norm": [("post_attention_norm.weight", (e,), "norm")],
        "ffn_norm": [("ffn_norm.weight", (e,), "norm")] if has_ffn else [],
        "ffn": [
            ("ffn_gate.weight", (e, n_ff), "ffn"),
            ("ffn_up.weight", (e, n_ff), "ffn"),
            ("ffn_down.weight", (n_ff, e), "ffn"),
        ]
        if has_ffn
        else [],
        "ffn_fused": [
            ("ffn_up.weight", (e, 2 * n_ff), "ffn"),
            ("ffn_down.weight", (n_ff, e), "ffn"),
        ],
        "moe": [
            ("ffn_gate_inp.weight", (e, x), "router"),
            ("ffn_gate_inp.bias", (x,), "bias"),
            ("ffn_gate_exps.weight", (e, fe, x), "ffn"),
            ("ffn_up_exps.weight", (e, fe, x), "ffn"),
            ("ffn_down_exps.weight", (fe, e, x), "ffn"),
            ("ffn_gate_exps.bias", (fe, x), "bias"),
            ("ffn_up_exps.bias", (fe, x), "bias"),
            ("ffn_down_exps.bias", (e, x), "bias"),
        ],
        "post_ffw_norm": [("post_ffw_norm.weight", (e,), "norm")],
    }
    if not has_attn:  # attention-free layer (deci): no attention tensors at all
        for role in ("qkv", "qkv_fused", "qkv_bias", "qk_norm", "attn_out", "attn_out_bias"):
            roles[role] = []
    elif n_kv == 0:  # deci "linear attention": a single n_embd x n_embd projection
        roles["qkv"] = roles["qkv_bias"] = roles["qk_norm"] = []
        roles["attn_out"] = [("attn_output.weight", (e, e), "attn")]
    return [
        (f"blk.{il}.{name}", shape, kind)
        for role in spec.layer
        for name, shape, kind in roles[role]
    ]


def model_tensors(spec: Spec) -> list[tuple[str, tuple[int, ...], str]]:
    """All tensors of the model: token embedding, layers, output norm and head."""
    e, v = spec.n_embd, n_vocab()
    out = [("token_embd.weight", (e, v), "embd")]
    if spec.rope_factors:
        half = spec.head_size() // 2
        out += [
            ("rope_factors_long.weight", (half,), "rope"),
            ("rope_factors_short.weight", (half,), "rope"),
        ]
    for il in range(spec.n_layer):
        out += layer_tensors(spec, il)
    out.append(("output_norm.weight", (e,), "norm"))
    if not spec.tied:
        out.append(("output.weight", (e, v), "embd"))
    return out


def _tensor_data(
    spec: Spec, shape: tuple[int, ...], kind: str, rng: np.random.Generator
) -> tuple[np.ndarray, GGMLQuantizationType | None]:
    """(numpy data, raw type or None) for a tensor of ggml ``shape`` and ``kind``."""
    np_shape = tuple(reversed(shape))
    if kind in ("norm", "rope"):
        return np.ones(np_shape, np.float32), None
    if kind == "bias":
        return np.zeros(np_shape, np.float32), None
    data = rng.normal(0.0, 0.02, np_shape).astype(np.float32)
    qtype = spec.ffn_type if kind == "ffn" else F16
    if qtype == F16:
        return data.astype(np.float16), None
    return quants.quantize(data, qtype), qtype


# ---------------------------------------------------------------------------------------
# writing


def _put(writer: GGUFWriter, key: str, value: object) -> None:
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, tuple | list):
        writer.add_array(key, list(value))
    else:
        raise TypeError(f"unsupported metadata value {value!r} for {key}")


Override = tuple[GGUFValueType, object, GGUFValueType | None] | None
"""A metadata value to write instead: (type, value, array item type), or None to drop."""


def write_spec(
    spec: Spec, path: Path, name: str, *, overrides: Mapping[str, Override] | None = None
) -> None:
    """Write the model ``spec`` describes to ``path``.

    ``overrides`` replace (or, with None, drop) metadata keys just before the header is
    written, with the exact GGUF types given: tests/runner/test_refusals_agree.py writes
    hyperparameters llama.cpp should refuse on tensors made for the real ones.
    """
    a = spec.arch
    writer = GGUFWriter(str(path), a)
    writer.add_name(f"ggtune-zoo-{name}")
    writer.add_file_type(LlamaFileType.MOSTLY_F16)
    writer.add_context_length(spec.n_ctx_train)
    writer.add_embedding_length(spec.n_embd)
    writer.add_block_count(spec.n_layer)
    if spec.n_ff:
        writer.add_feed_forward_length(spec.n_ff)
    writer.add_head_count(spec.n_head)
    writer.add_head_count_kv(spec.n_head_kv)
    if spec.head_dim is not None:
        writer.add_key_length(spec.head_dim)
        writer.add_value_length(spec.head_dim)
    writer.add_rope_dimension_count(spec.head_size())
    writer.add_rope_freq_base(spec.rope_freq_base)
    if spec.layer_norm:
        writer.add_layer_norm_eps(1e-5)
    else:
        writer.add_layer_norm_rms_eps(1e-6)
    if spec.n_expert:
        writer.add_expert_count(spec.n_expert)
        writer.add_expert_used_count(spec.n_expert_used)
        writer.add_expert_feed_forward_length(spec.n_ff_exp)
    for key, value in spec.kv.items():
        _put(writer, key.format(arch=a), value)

    tokens, merges, types = tokenizer()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(list(tokens))
    writer.add_token_types(list(types))
    writer.add_token_merges(list(merges))
    writer.add_unk_token_id(tokens.index("<unk>"))
    writer.add_bos_token_id(tokens.index("<s>"))
    writer.add_eos_token_id(tokens.index("</s>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(True)

    rng = np.random.default_rng(zlib.crc32(name.encode()))
    for tensor_name, shape, kind in model_tensors(spec):
        data, raw_dtype = _tensor_data(spec, shape, kind, rng)
        writer.add_tensor(tensor_name, data, raw_dtype=raw_dtype)

    for key, override in (overrides or {}).items():
        key = key.format(arch=a)
        if override is None:
            writer.kv_data[0].pop(key, None)
        else:
            vtype, value, sub_type = override
            writer.kv_data[0][key] = GGUFValue(value=value, type=vtype, sub_type=sub_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


# ---------------------------------------------------------------------------------------
# the models

SPECS: dict[str, Spec] = {
    # Llama 3 style: GQA 4:1, Q8_0 FFN, separate output head.
    "llama": Spec(
        arch="llama",
        n_layer=4,
        n_embd=128,
        n_head=8,
        n_head_kv=2,
        n_ff=384,
        ffn_type=Q8_0,
        rope_freq_base=500000.0,
    ),
    # Mistral 3 (src/models/mistral3.cpp): the llama layout with head size 32 on n_embd
    # 128 (q width 256, as Mistral Small's 32 x 128 on 5120), and Ministral 3's attention
    # temperature (Q scaled per token after RoPE), which needs the original context length.
    "mistral3": Spec(
        arch="mistral3",
        n_layer=4,
        n_embd=128,
        n_head=8,
        n_head_kv=2,
        head_dim=32,
        n_ff=384,
        ffn_type=Q8_0,
        rope_freq_base=1000000000.0,
        kv={
            Keys.Attention.TEMPERATURE_SCALE: 0.1,
            Keys.Rope.SCALING_ORIG_CTX_LEN: 16384,
        },
    ),
    # Per-layer head counts (Nemotron-51B style): layer 0 GQA 8:2, layer 1 "linear
    # attention" (8 heads, 0 KV heads), layer 2 GQA 8:4, layer 3 attention-free.
    "deci": Spec(
        arch="deci",
        n_layer=4,
        n_embd=128,
        n_head=(8, 8, 8, 0),
        n_head_kv=(2, 0, 4, 0),
        n_ff=(256, 384, 256, 128),
        head_dim=16,
        ffn_type=Q8_0,
        rope_freq_base=500000.0,
    ),
    # Qwen2: q/k/v biases, tied embeddings, head size fixed at n_embd / n_head.
    "qwen2": Spec(
        arch="qwen2",
        n_layer=4,
        n_embd=128,
        n_head=8,
        n_head_kv=2,
        n_ff=384,
        tied=True,
        layer=("attn_norm", "qkv", "qkv_bias", "attn_out", "ffn_norm", "ffn"),
        rope_freq_base=1000000.0,
    ),
    # Qwen3: q/k norms, head size 32 with 8 heads on n_embd 128 (q width 256).
    "qwen3": Spec(
        arch="qwen3",
        n_layer=4,
        n_embd=128,
        n_head=8,
        n_head_kv=2,
        head_dim=32,
        n_ff=384,
        tied=True,
        ffn_type=Q8_0,
        rope_freq_base=1000000.0,
        layer=("attn_norm", "qkv", "qk_norm", "attn_out", "ffn_norm", "ffn"),
    ),
    # Phi-3 (medium-128k style): fused QKV and gate+up, LongRoPE factors, and a
    # sliding_window key that llama.cpp ignores for phi3 (one full cache).
    "phi3": Spec(
        arch="phi3",
        n_layer=4,
        n_embd=128,
        n_head=4,
        n_head_kv=2,
        n_ff=256,
        layer=("attn_norm", "qkv_fused", "attn_out", "ffn_norm", "ffn_fused"),
        rope_factors=True,
        kv={
            Keys.Attention.SLIDING_WINDOW: 2047,
            Keys.Rope.SCALING_ORIG_CTX_LEN: 4096,
            Keys.Rope.SCALING_ATTN_FACTOR: 1.1902380714238083,
        },
    ),
    # Gemma 2: sliding window on every other layer (0 and 2), logit soft-capping,
    # head size 48 with 4 heads on n_embd 128.
    "gemma2": Spec(
        arch="gemma2",
        n_layer=4,
        n_embd=128,
        n_head=4,
        n_head_kv=2,
        head_dim=48,
        n_ff=256,
        tied=True,
        layer=(
            "attn_norm",
            "qkv",
            "attn_out",
            "post_attention_norm",
            "ffn_norm",
            "ffn",
            "post_ffw_norm",
        ),
        kv={
            Keys.Attention.SLIDING_WINDOW: 512,
            Keys.LLM.ATTN_LOGIT_SOFTCAPPING: 50.0,
            Keys.LLM.FINAL_LOGIT_SOFTCAPPING: 30.0,
        },
    ),
    # Gemma 3: iSWA with the default pattern 6 (layers 0-4 local, layer 5 global),
    # one KV head, head size 64, separate rope base for the local layers.
    "gemma3": Spec(
        arch="gemma3",
        n_layer=6,
        n_embd=128,
        n_head=4,
        n_head_kv=1,
        head_dim=64,
        n_ff=256,
        tied=True,
        ffn_type=Q8_0,
        rope_freq_base=1000000.0,
        layer=(
            "attn_norm",
            "qkv",
            "qk_norm",
            "attn_out",
            "post_attention_norm",
            "ffn_norm",
            "ffn",
            "post_ffw_norm",
        ),
        kv={Keys.Attention.SLIDING_WINDOW: 512, Keys.Rope.FREQ_BASE_SWA: 10000.0},
    ),
    # Command R7B: iSWA with the default pattern 4 (3 local : 1 global, 8 layers),
    # LayerNorm, parallel attention/FFN (no ffn_norm), logit scale.
    "cohere2": Spec(
        arch="cohere2",
        n_layer=8,
        n_embd=128,
        n_head=8,
        n_head_kv=2,
        n_ff=128,
        tied=True,
        ffn_type=Q8_0,
        layer_norm=True,
        rope_freq_base=50000.0,
        layer=("attn_norm", "qkv", "attn_out", "ffn"),
        kv={Keys.Attention.SLIDING_WINDOW: 128, Keys.LLM.LOGIT_SCALE: 0.25},
    ),
    # gpt-oss: 8 experts (2 used) in MXFP4, attention sinks, biases everywhere, iSWA
    # with window 128 on every other layer, YaRN x32 over a 4096 original context.
    "gpt-oss": Spec(
        arch="gpt-oss",
        n_layer=4,
        n_embd=128,
        n_head=8,
        n_head_kv=2,
        head_dim=32,
        n_expert=8,
        n_expert_used=2,
        n_ff_exp=64,
        ffn_type=MXFP4,
        rope_freq_base=150000.0,
        layer=(
            "attn_norm",
            "qkv",
            "qkv_bias",
            "attn_out",
            "attn_out_bias",
            "attn_sinks",
            "post_attention_norm",
            "moe",
        ),
        kv={
            Keys.Attention.SLIDING_WINDOW: 128,
            Keys.Rope.SCALING_TYPE: "yarn",
            Keys.Rope.SCALING_FACTOR: 32.0,
            Keys.Rope.SCALING_ORIG_CTX_LEN: 4096,
        },
    ),
}

BUILDERS: dict[str, Callable[[Path], None]] = {
    name: partial(write_spec, spec, name=name) for name, spec in SPECS.items()
}
