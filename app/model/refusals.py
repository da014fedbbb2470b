"""What llama.cpp refuses in a model's hyperparameters, checked before any estimate.

llama.cpp refuses a model while loading it — an exception, or an abort from a
``GGML_ASSERT`` — when a key has the wrong type, a count is out of range, or a tensor's
shape does not follow from the hyperparameters. ggtune refuses the same files, naming
the key, so it never shows a verdict ("fits") for a model the engine would not load.
The rules, from the pinned llama.cpp:

- ``src/llama-model-loader.cpp``, ``GGUFMeta::GKV::get_kv``: a scalar key must have
  exactly the type the loader reads (UINT32 for the counts and sizes here, FLOAT32 for
  the RoPE figures, STRING for the scaling type); ``get_key_or_arr``: a per-layer key is
  a UINT32 scalar or an array of exactly ``block_count`` INT32/UINT32/BOOL items (INT32
  items are read as ``uint32_t``, so a negative one becomes a count of billions).
- ``src/llama-model.cpp``, ``load_hparams``: ``context_length``, ``embedding_length`` and
  ``block_count`` are required; ``0 < block_count <= LLAMA_MAX_LAYERS`` (512),
  ``nextn_predict_layers <= block_count``; ``expert_count <= LLAMA_MAX_EXPERTS`` (1024),
  experts used at most the experts, and some exactly when there are experts; the RoPE
  scaling type is one of none, linear, yarn, longrope; for llama, deci, falcon and
  llama-embed, ``rope.dimension_count`` equals the head size.
- ``create_tensor`` checks every tensor's shape against what the hyperparameters imply.
  ggtune checks the tensors whose shape follows from the attention figures it sizes the
  KV cache with: ``blk.N.attn_k.weight`` is ``{n_embd, n_embd_k_gqa(N)}`` and
  ``blk.N.attn_v.weight`` ``{n_embd, n_embd_v_gqa(N)}``, and ``token_embd.weight`` is
  ``n_embd`` wide, for the plain-attention families (not MLA, not fused QKV); and the
  dense FFN's ``ffn_gate`` and ``ffn_down`` are ``feed_forward_length`` wide.

Files read without value types (a catalog entry) get the range checks only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from app.errors import InvalidMetadataError
from app.model.ggml import GGUFValueType

if TYPE_CHECKING:
    from app.model.spec import HeaderLike, ModelSpec

__all__ = ["check_llama_cpp_rules"]

LLAMA_MAX_LAYERS: Final = 512
"""src/llama-hparams.h."""

LLAMA_MAX_EXPERTS: Final = 1024
"""src/llama-hparams.h."""

_U32: Final = int(GGUFValueType.UINT32)
_I32: Final = int(GGUFValueType.INT32)
_F32: Final = int(GGUFValueType.FLOAT32)
_BOOL: Final = int(GGUFValueType.BOOL)
_STR: Final = int(GGUFValueType.STRING)
_ARRAY: Final = int(GGUFValueType.ARRAY)

_REQUIRED: Final = ("context_length", "embedding_length", "block_count")

# Scalar keys load_hparams reads for every architecture, with the type it reads them as.
_SCALARS: Final[dict[str, int]] = {
    "context_length": _U32,
    "embedding_length": _U32,
    "block_count": _U32,
    "nextn_predict_layers": _U32,
    "expert_count": _U32,
    "expert_group_count": _U32,
    "expert_group_used_count": _U32,
    "rope.scaling.original_context_length": _U32,
    "rope.freq_base": _F32,
    "rope.scaling.type": _STR,
    "rope.scaling.factor": _F32,
    "rope.scale_linear": _F32,
    "rope.scaling.attn_factor": _F32,
    "rope.scaling.finetuned": _BOOL,
    "attention.key_length_swa": _U32,
    "attention.value_length_swa": _U32,
    "rope.dimension_count_swa": _U32,
}

# Read only when the model has attention heads (n_head() > 0).
_HEAD_SCALARS: Final[dict[str, int]] = {
    "attention.key_length": _U32,
    "attention.value_length": _U32,
    "rope.dimension_count": _U32,
}

# get_key_or_arr: a UINT32 scalar, or an array of block_count INT32/UINT32/BOOL items.
_PER_LAYER: Final = (
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "expert_used_count",
)

_ROPE_SCALING: Final = ("none", "linear", "yarn", "longrope")
_ROT_EQUALS_HEAD: Final = frozenset(
    {
        # load_hparams throws "invalid n_rot" for these four ...
        "llama", "deci", "falcon", "llama-embed",
        # ... and the graph of these asserts GGML_ASSERT(n_embd_head == n_rot)
        # (src/models/<file>.cpp, found with grep in the pinned llama.cpp)
        "apertus", "arcee", "arctic", "baichuan", "chameleon", "codeshell", "cogvlm",
        "cohere2moe", "dbrx", "deepseek", "dots1", "dream", "ernie4_5", "ernie4_5-moe",
        "exaone", "exaone-moe", "exaone4", "granite", "granite_swa", "graniteswitch",
        "grok", "grovemoe", "hunyuan-dense", "hunyuan-moe", "hunyuan_vl", "hy_v3",
        "internlm2", "jais2", "llada", "llada-moe", "llama4", "maincoder", "mellum",
        "minimax-01", "minimax-m2", "mistral3", "nemotron", "olmo", "olmo2", "olmoe",
        "orion", "paddleocr", "pangu-embedded", "plamo", "pockettts", "qwen2", "qwen2moe",
        "qwen2vl", "qwen3", "qwen3moe", "qwen3tts", "qwen3vl", "qwen3vlmoe", "rnd1",
        "seed_oss", "smallthinker", "smollm3", "starcoder2", "talkie", "xverse",
        # openai-moe.cpp sizes Q, K and V by n_rot, the KV cache by the head size
        "gpt-oss",
    }
)  # fmt: skip

# Families whose blk.N.attn_k / attn_v / token_embd shapes follow from the figures here.
_SHAPE_CHECKED_FAMILIES: Final = frozenset({"kv", "iswa"})


def _type_name(code: int) -> str:
    try:
        return GGUFValueType(code).name
    except ValueError:
        return str(code)


class _Rules:
    def __init__(self, header: HeaderLike, arch: str) -> None:
        self.path = header.path
        self.md = header.metadata
        types = getattr(header, "value_types", None)
        self.types: Mapping[str, tuple[int, int]] | None = types or None
        self.arch = arch

    def refuse(self, key: str, why: str) -> InvalidMetadataError:
        return InvalidMetadataError(
            self.path, None, f"{key} {why}; llama.cpp refuses this model, so ggtune does too"
        )

    def full(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def check_type(self, suffix: str, wanted: int) -> None:
        key = self.full(suffix)
        if self.types is None or key not in self.types:
            return
        got, item = self.types[key]
        if got != wanted:
            stored = f"an array of {_type_name(item)}" if got == _ARRAY else _type_name(got)
            raise self.refuse(key, f"is stored as {stored}, not {_type_name(wanted)}")

    def check_per_layer(self, suffix: str, n_layer: int) -> None:
        key = self.full(suffix)
        value = self.md.get(key)
        if value is None:
            return
        if self.types is not None and key in self.types:
            got, item = self.types[key]
            if got == _ARRAY:
                if item not in (_U32, _I32, _BOOL):
                    raise self.refuse(key, f"is an array of {_type_name(item)}, not of integers")
            elif got != _U32:
                raise self.refuse(key, f"is stored as {_type_name(got)}, not UINT32")
        if isinstance(value, tuple):
            if len(value) != n_layer:
                raise self.refuse(key, f"has {len(value)} values for {n_layer} layers")
            if any(isinstance(v, int) and v < 0 for v in value):
                raise self.refuse(key, f"holds a negative count ({min(value)})")
        elif isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise self.refuse(key, f"is negative ({value})")


def check_llama_cpp_rules(header: HeaderLike, spec: ModelSpec) -> None:
    """Raise :class:`~app.errors.InvalidMetadataError` (naming the key) when llama.cpp
    would refuse the model ``header`` describes; ``spec`` is what ggtune read from it."""
    arch = spec.arch
    if arch == "clip":  # load_hparams stops before the model's figures for projectors
        return
    rules = _Rules(header, arch)
    if rules.types is not None:
        for suffix in _REQUIRED:
            if rules.full(suffix) not in rules.md:
                raise rules.refuse(rules.full(suffix), "is missing")
    for suffix, wanted in _SCALARS.items():
        rules.check_type(suffix, wanted)
    n_file = header.metadata.get(rules.full("block_count"))
    if isinstance(n_file, int) and not 0 < n_file <= LLAMA_MAX_LAYERS:
        raise rules.refuse(rules.full("block_count"), f"is {n_file}, not 1 to {LLAMA_MAX_LAYERS}")
    n_file = n_file if isinstance(n_file, int) else spec.n_layer_all
    for suffix in _PER_LAYER:
        rules.check_per_layer(suffix, n_file)
    if any(spec.n_head):
        for suffix, wanted in _HEAD_SCALARS.items():
            rules.check_type(suffix, wanted)

    nextn = header.metadata.get(rules.full("nextn_predict_layers"), 0)
    if isinstance(nextn, int) and nextn > n_file:
        raise rules.refuse(
            rules.full("nextn_predict_layers"), f"is {nextn}, more than the {n_file} layers"
        )
    if spec.n_layer <= 0:
        raise rules.refuse(rules.full("nextn_predict_layers"), "leaves no layer to run")
    if spec.n_embd <= 0:
        raise rules.refuse(rules.full("embedding_length"), "is 0")

    n_expert = spec.n_expert
    used = spec.n_expert_used
    if n_expert > LLAMA_MAX_EXPERTS:
        raise rules.refuse(
            rules.full("expert_count"), f"is {n_expert}, more than {LLAMA_MAX_EXPERTS}"
        )
    if used > n_expert:
        raise rules.refuse(
            rules.full("expert_used_count"), f"is {used}, more than the {n_expert} experts"
        )
    if n_expert > 0 and used == 0:
        raise rules.refuse(rules.full("expert_used_count"), "is 0 for a model with experts")

    scaling = header.metadata.get(rules.full("rope.scaling.type"))
    if isinstance(scaling, str) and scaling not in _ROPE_SCALING:
        raise rules.refuse(
            rules.full("rope.scaling.type"),
            f"is {scaling!r}, not one of {', '.join(_ROPE_SCALING)}",
        )
    if arch in _ROT_EQUALS_HEAD and any(spec.n_head) and spec.n_rot != spec.head_k_full:
        if spec.head_k_full == 0:  # the head size comes from embedding_length / head_count
            raise rules.refuse(
                rules.full("attention.head_count"),
                f"is {max(spec.n_head)}, more heads than the {spec.n_embd} embedding values",
            )
        raise rules.refuse(
            rules.full("rope.dimension_count"),
            f"is {spec.n_rot}, but the head size is {spec.head_k_full}",
        )
    for tensor in spec.tensors:  # done_getting_tensors: every tensor must be used
        layer = _layer_index(tensor.name)
        if layer is not None and layer >= spec.n_layer_all:
            raise rules.refuse(
                rules.full("block_count"),
                f"is {spec.n_layer_all}, but the file holds tensors of layer {layer} "
                f"({tensor.name})",
            )
    _check_shapes(rules, spec)


def _check_shapes(rules: _Rules, spec: ModelSpec) -> None:
    """Check the attention tensors' shapes against the figures the KV cache comes from."""
    if spec.is_mla or spec.memory_kind not in _SHAPE_CHECKED_FAMILIES:
        return
    by_name = {t.name: t.shape for t in spec.tensors}
    embd = by_name.get("token_embd.weight")
    if embd is not None and len(embd) == 2 and embd[0] != spec.n_embd:
        raise rules.refuse(
            rules.full("embedding_length"),
            f"is {spec.n_embd}, but token_embd.weight is {embd[0]} wide",
        )
    for il in range(spec.n_layer):
        head_k = spec.head_k_swa if spec.is_swa[il] else spec.head_k_full
        q = by_name.get(f"blk.{il}.attn_q.weight")
        if q is not None and len(q) == 2 and q[1] != spec.n_head[il] * head_k:
            raise rules.refuse(
                rules.full("attention.head_count"),
                f"({spec.n_head[il]} heads of {head_k} in layer {il}) makes "
                f"{spec.n_head[il] * head_k} query values, but blk.{il}.attn_q.weight holds {q[1]}",
            )
        for part, axis in (("ffn_gate", 1), ("ffn_down", 0)):
            shape = by_name.get(f"blk.{il}.{part}.weight")
            if shape is not None and len(shape) == 2 and shape[axis] != spec.n_ff[il]:
                raise rules.refuse(
                    rules.full("feed_forward_length"),
                    f"is {spec.n_ff[il]} in layer {il}, but blk.{il}.{part}.weight has "
                    f"{shape[axis]}",
                )
        for part, width, what in (
            ("attn_k", spec.n_embd_k_gqa(il), "key_length"),
            ("attn_v", spec.n_embd_v_gqa(il), "value_length"),
        ):
            shape = by_name.get(f"blk.{il}.{part}.weight")
            if shape is None or len(shape) != 2:
                continue
            if shape[0] != spec.n_embd:
                raise rules.refuse(
                    rules.full("embedding_length"),
                    f"is {spec.n_embd}, but blk.{il}.{part}.weight takes {shape[0]} inputs",
                )
            if shape[1] != width:
                heads = spec.n_head_kv[il]
                raise rules.refuse(
                    rules.full("attention.head_count_kv"),
                    f"({heads} KV heads in layer {il}, {what} {width // heads if heads else 0}) "
                    f"makes {width} values per token, but blk.{il}.{part}.weight holds "
                    f"{shape[1]}",
                )


def _layer_index(name: str) -> int | None:
    """Return N of a ``blk.N.…`` tensor name, or None."""
    if not name.startswith("blk."):
        return None
    head = name[4:].split(".", 1)[0]
    return int(head) if head.isdigit() and len(head) < 7 else None
