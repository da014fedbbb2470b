"""A model's shape as llama.cpp sees it: per-layer hyperparameters and every tensor.

:func:`model_spec` turns a GGUF header into a :class:`ModelSpec` the estimator can use. The
rules follow the llama.cpp vendored in the pinned llama-cpp-python (see docs/engine.md):
``src/llama-model.cpp`` (``load_hparams``, ``create_memory``), ``src/llama-hparams.cpp`` and
the per-architecture ``src/models/<arch>.cpp`` (``load_arch_hparams``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from app.errors import InvalidMetadataError

TensorRole = Literal[
    "token_embedding",
    "output",
    "output_norm",
    "attention",
    "ffn",
    "expert",
    "shared_expert",
    "router",
    "norm",
    "ssm",
    "other",
]

MemoryKind = Literal["kv", "iswa", "recurrent", "hybrid", "hybrid_iswa", "none", "unknown"]
"""How llama.cpp keeps per-sequence state for an architecture (``create_memory``)."""


class _TensorLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def ggml_type(self) -> int: ...
    @property
    def type_name(self) -> str: ...
    @property
    def n_bytes(self) -> int: ...


class HeaderLike(Protocol):
    """What :func:`model_spec` needs from a header (``Header`` or ``ModelFile``)."""

    @property
    def path(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, object]: ...
    @property
    def tensors(self) -> Sequence[_TensorLike]: ...


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One weight tensor: ``shape`` in ggml order (ne0 first), ``layer`` None outside blocks."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    type_name: str
    n_bytes: int
    layer: int | None
    role: TensorRole

    @property
    def n_elements(self) -> int:
        """Return the number of weights in the tensor."""
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Everything about a model that decides its memory use and speed.

    Per-layer tuples have ``n_layer_all`` entries (trunk layers then NextN/MTP layers).
    Head sizes are in elements; ``n_swa`` in tokens.
    """

    path: str
    arch: str
    name: str | None
    n_layer_all: int
    n_layer_nextn: int
    n_embd: int
    n_vocab: int
    n_ctx_train: int
    n_head: tuple[int, ...]
    n_head_kv: tuple[int, ...]
    n_ff: tuple[int, ...]
    head_k_full: int
    head_v_full: int
    head_k_swa: int
    head_v_swa: int
    is_swa: tuple[bool, ...]
    is_recurrent: tuple[bool, ...]
    n_swa: int
    is_mla: bool
    kv_lora_rank: int
    n_rot: int
    """Rotary dimensions per head (``rope.dimension_count``; MLA: the decoupled RoPE part)."""
    n_expert: int
    n_expert_used: int
    n_expert_shared: int
    ssm_d_conv: int
    ssm_d_inner: int
    ssm_d_state: int
    ssm_n_group: int
    wkv_head_size: int
    token_shift_count: int
    shortconv_l_cache: int
    memory_kind: MemoryKind
    tensors: tuple[TensorSpec, ...]
    tied_embeddings: bool
    file_type: int | None
    rope_scaling: str | None
    notes: tuple[str, ...] = ()

    @property
    def n_layer(self) -> int:
        """Return the number of trunk layers (without NextN/MTP layers)."""
        return self.n_layer_all - self.n_layer_nextn

    @property
    def weights_bytes(self) -> int:
        """Return the size of all tensors in the file, in bytes (= ``llama_model_size``)."""
        return sum(t.n_bytes for t in self.tensors)

    @property
    def n_params(self) -> int:
        """Return the number of parameters (elements of all tensors)."""
        return sum(t.n_elements for t in self.tensors)

    @property
    def bits_per_weight(self) -> float:
        """Return the average bits per parameter over all tensors."""
        n = self.n_params
        return 8.0 * self.weights_bytes / n if n else 0.0

    @property
    def kv_rule_known(self) -> bool:
        """Return whether ggtune knows how this architecture's KV/recurrent state is sized."""
        return self.memory_kind != "unknown"

    def n_embd_k_gqa(self, il: int) -> int:
        """Return K elements per token in layer ``il`` (``llama_hparams::n_embd_k_gqa``)."""
        head = self.head_k_swa if self.is_swa[il] else self.head_k_full
        return head * self.n_head_kv[il]

    def n_embd_v_gqa(self, il: int) -> int:
        """Return V elements per token in layer ``il`` (``llama_hparams::n_embd_v_gqa``)."""
        head = self.head_v_swa if self.is_swa[il] else self.head_v_full
        return head * self.n_head_kv[il]

    def n_embd_v_gqa_max(self) -> int:
        """Return the widest V row over all layers (used when V is stored transposed)."""
        return max((self.n_embd_v_gqa(il) for il in range(self.n_layer_all)), default=0)

    def n_embd_r(self) -> int:
        """Return the recurrent conv/shift state per cell, in f32 elements (``n_embd_r``)."""
        if self.wkv_head_size:
            return self.token_shift_count * self.n_embd
        if self.shortconv_l_cache:
            return self.n_embd * (self.shortconv_l_cache - 1)
        d_conv = self.ssm_d_conv - 1 if self.ssm_d_conv > 0 else 0
        return d_conv * (self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state)

    def n_embd_s(self) -> int:
        """Return the recurrent SSM/WKV state per cell, in f32 elements (``n_embd_s``)."""
        if self.wkv_head_size:
            return self.n_embd * self.wkv_head_size
        return self.ssm_d_state * self.ssm_d_inner


# --- architecture tables (src/llama-arch.cpp, src/models/*.cpp) --------------------------

RECURRENT_ARCHS: Final = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
"""``llm_arch_is_recurrent``."""

HYBRID_ARCHS: Final = frozenset(
    {"jamba", "falcon-h1", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "qwen3next"}
)
"""Hybrids of ``llm_arch_is_hybrid`` whose layer filters ggtune knows."""

NO_MEMORY_ARCHS: Final = frozenset(
    {
        "bert",
        "jina-bert-v2",
        "jina-bert-v3",
        "nomic-bert",
        "nomic-bert-moe",
        "neo-bert",
        "eurobert",
        "modern-bert",
        "gemma-embedding",
        "dream",
        "llada",
        "llada-moe",
        "rnd1",
        "wavtokenizer-dec",
    }
)
"""Architectures that get no KV cache at all (``create_memory`` returns nullptr)."""

# arch -> (default pattern n, dense_first, needs a positive sliding_window key to enable SWA)
_SWA_PATTERNS: Final[dict[str, tuple[int, bool, bool]]] = {
    "gemma2": (2, False, False),
    "gemma3": (6, False, True),
    "cohere2": (4, False, False),
    "cohere2moe": (4, True, False),
    "gpt-oss": (2, False, False),
    "olmo2": (4, False, True),
    "exaone4": (4, False, True),
    "exaone-moe": (4, False, False),
    "afmoe": (4, False, True),
    "mellum": (4, False, True),
    "muse-glimmer": (4, False, False),
    "plamo3": (8, False, True),
    "smallthinker": (4, True, True),
}

_DEFAULT_N_SWA: Final[dict[str, int]] = {"gemma2": 4096}

STANDARD_KV_ARCHS: Final = frozenset(
    {
        "llama",
        "deci",
        "falcon",
        "gpt2",
        "gptj",
        "gptneox",
        "mpt",
        "baichuan",
        "starcoder",
        "refact",
        "bloom",
        "stablelm",
        "qwen",
        "qwen2",
        "qwen2moe",
        "qwen2vl",
        "qwen3",
        "qwen3moe",
        "qwen3vl",
        "qwen3vlmoe",
        "phi2",
        "phi3",
        "phimoe",
        "plamo",
        "codeshell",
        "orion",
        "internlm2",
        "minicpm",
        "minicpm3",
        "gemma",
        "starcoder2",
        "xverse",
        "command-r",
        "dbrx",
        "olmo",
        "olmoe",
        "openelm",
        "arctic",
        "deepseek",
        "deepseek2",
        "chatglm",
        "glm4",
        "glm4moe",
        "bitnet",
        "jais",
        "nemotron",
        "exaone",
        "granite",
        "granitemoe",
        "chameleon",
        "plm",
        "bailingmoe",
        "bailingmoe2",
        "dots1",
        "arcee",
        "ernie4_5",
        "ernie4_5-moe",
        "hunyuan-moe",
        "hunyuan-dense",
        "smollm3",
        "seed_oss",
        "grovemoe",
        "apertus",
        "minimax-m2",
        "pangu-embedded",
        "mistral3",
        "llama-embed",
    }
)
"""Architectures with one plain KV cache over all layers (the ``default`` branch)."""

_BLOCK_RE: Final = re.compile(r"^blk\.(\d+)\.(.+)$")


def _arch_memory_kind(arch: str, swa_enabled: bool) -> MemoryKind:
    if arch in NO_MEMORY_ARCHS:
        return "none"
    if arch in RECURRENT_ARCHS:
        return "recurrent"
    if arch in HYBRID_ARCHS:
        return "hybrid_iswa" if swa_enabled else "hybrid"
    if arch in _SWA_PATTERNS:
        return "iswa" if swa_enabled else "kv"
    if arch in STANDARD_KV_ARCHS:
        return "kv"
    return "unknown"


def tensor_role(name: str) -> TensorRole:
    """Classify a tensor by its GGUF name (names from ``src/llama-arch.cpp``)."""
    if name.startswith(("token_embd", "position_embd", "token_types")):
        return "token_embedding"
    if name.startswith("output_norm"):
        return "output_norm"
    if name.startswith("output."):
        return "output"
    m = _BLOCK_RE.match(name)
    if m is None:
        return "other"
    part = m.group(2)
    if "_exps" in part or "_chexps" in part:
        return "expert"
    if "_shexp" in part:
        return "shared_expert"
    if part.startswith(("ffn_gate_inp", "exp_probs")):
        return "router"
    if part.startswith(("ssm_", "time_mix", "channel_mix", "shortconv")):
        return "ssm"
    if "norm" in part:
        return "norm"
    if part.startswith("attn_"):
        return "attention"
    if part.startswith("ffn_"):
        return "ffn"
    return "other"


def _layer_of(name: str) -> int | None:
    m = _BLOCK_RE.match(name)
    return int(m.group(1)) if m else None


class _Meta:
    """Typed access to ``{arch}.*`` keys with errors that name the file and the key."""

    def __init__(self, path: str, metadata: Mapping[str, object], arch: str) -> None:
        self.path = path
        self.md = metadata
        self.arch = arch

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def has(self, suffix: str) -> bool:
        return self.key(suffix) in self.md

    def int_(self, suffix: str, default: int | None = None) -> int:
        full = self.key(suffix)
        value = self.md.get(full)
        if value is None:
            if default is None:
                raise InvalidMetadataError(self.path, None, f"missing required key {full}")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, tuple) and value and all(isinstance(v, int) for v in value):
                # some converters write an array where llama.cpp reads the first/max
                return int(max(value))
            raise InvalidMetadataError(self.path, None, f"{full} should be an integer")
        if value < 0:
            raise InvalidMetadataError(self.path, None, f"{full} is negative ({value})")
        return value

    def per_layer(self, suffix: str, n_layer: int, default: Sequence[int]) -> tuple[int, ...]:
        """Read a key that may be a scalar or a per-layer array (``get_key_or_arr``)."""
        full = self.key(suffix)
        value = self.md.get(full)
        if value is None:
            return tuple(default)
        if isinstance(value, bool):
            raise InvalidMetadataError(self.path, None, f"{full} should be an integer")
        if isinstance(value, int):
            return (value,) * n_layer
        if isinstance(value, tuple):
            if len(value) != n_layer or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
            ):
                raise InvalidMetadataError(
                    self.path, None, f"{full} should hold {n_layer} non-negative integers"
                )
            return tuple(int(v) for v in value)
        raise InvalidMetadataError(self.path, None, f"{full} should be an integer or an array")


def _vocab_size(meta: _Meta, tensors: Sequence[_TensorLike]) -> int:
    tokens = meta.md.get("tokenizer.ggml.tokens")
    count = getattr(tokens, "count", None)
    if isinstance(count, int):
        return count
    if isinstance(tokens, tuple):
        return len(tokens)
    if meta.has("vocab_size"):
        return meta.int_("vocab_size")
    for t in tensors:
        if t.name == "token_embd.weight" and len(t.shape) >= 2:
            return t.shape[1]
    return 0


def _swa_layers(meta: _Meta, n_layer_all: int, n_layer: int) -> tuple[tuple[bool, ...], int]:
    """Return (is_swa per layer, n_swa) following the arch's ``load_arch_hparams``."""
    arch = meta.arch
    none = (False,) * n_layer_all
    if arch == "lfm2" or arch == "lfm2moe":
        return none, meta.int_("attention.sliding_window", 0)  # applied after is_recurrent
    if arch not in _SWA_PATTERNS:
        return none, 0
    n_pattern, dense_first, needs_key = _SWA_PATTERNS[arch]
    n_swa = meta.int_("attention.sliding_window", _DEFAULT_N_SWA.get(arch, 0))
    if needs_key and n_swa == 0:
        return none, 0
    pattern = meta.md.get(meta.key("attention.sliding_window_pattern"))
    if isinstance(pattern, tuple):
        # llama_model_loader::get_arr copies the array into is_swa_impl as given
        flags = [bool(v) for v in pattern[:n_layer_all]]
        flags += [False] * (n_layer_all - len(flags))
        return tuple(flags), n_swa
    if isinstance(pattern, int) and not isinstance(pattern, bool):
        n_pattern = pattern
    # llama_hparams::set_swa_pattern
    flags = []
    for il in range(n_layer_all):
        if il >= n_layer:
            flags.append(False)
        elif dense_first:
            flags.append(n_pattern == 0 or il % n_pattern != 0)
        else:
            flags.append(n_pattern == 0 or il % n_pattern < n_pattern - 1)
    return tuple(flags), n_swa


def _recurrent_layers(
    meta: _Meta, n_layer_all: int, n_layer: int, n_head_kv: tuple[int, ...], n_ff: tuple[int, ...]
) -> tuple[bool, ...]:
    """Return which layers are recurrent (``is_recr_impl``) for recurrent and hybrid archs."""
    arch = meta.arch
    if arch in RECURRENT_ARCHS or arch == "falcon-h1":
        return (True,) * n_layer_all
    if arch in {"jamba", "granitehybrid", "lfm2", "lfm2moe"}:
        return tuple(il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all))
    if arch == "nemotron_h":
        return tuple(
            il < n_layer and n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_layer_all)
        )
    if arch == "qwen3next":
        arr = meta.md.get(meta.key("attention.recurrent_layers"))
        if isinstance(arr, tuple) and len(arr) == n_layer_all:
            return tuple(bool(v) for v in arr)
        interval = meta.int_("full_attention_interval", 4) or 4
        return tuple(il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all))
    return (False,) * n_layer_all


def model_spec(header: HeaderLike) -> ModelSpec:
    """Build the :class:`ModelSpec` of a parsed GGUF header.

    Raises :class:`~app.errors.InvalidMetadataError` when a key llama.cpp requires is
    missing or malformed. Unknown architectures still get their tensors and weights;
    ``memory_kind`` is then ``"unknown"`` and the estimator reports no KV figure.
    """
    md = header.metadata
    path = header.path
    arch_value = md.get("general.architecture")
    if not isinstance(arch_value, str) or not arch_value:
        raise InvalidMetadataError(path, None, "missing general.architecture")
    arch = arch_value
    meta = _Meta(path, md, arch)
    tensors_in = header.tensors
    notes: list[str] = []

    n_layer_all = meta.int_("block_count")
    if not 0 < n_layer_all <= 4096:
        raise InvalidMetadataError(path, None, f"{arch}.block_count out of range ({n_layer_all})")
    n_layer_nextn = min(meta.int_("nextn_predict_layers", 0), n_layer_all)
    n_layer = n_layer_all - n_layer_nextn
    n_embd = meta.int_("embedding_length")
    n_ctx_train = meta.int_("context_length", 0)

    n_head = meta.per_layer("attention.head_count", n_layer_all, (0,) * n_layer_all)
    n_head_kv = meta.per_layer("attention.head_count_kv", n_layer_all, n_head)
    n_ff = meta.per_layer("feed_forward_length", n_layer_all, (0,) * n_layer_all)

    head0 = n_head[0] if n_head else 0
    if head0 > 0:
        head_k_full = meta.int_("attention.key_length", n_embd // head0)
        head_v_full = meta.int_("attention.value_length", n_embd // head0)
    else:
        head_k_full = head_v_full = 0
    head_k_swa = meta.int_("attention.key_length_swa", head_k_full)
    head_v_swa = meta.int_("attention.value_length_swa", head_v_full)

    is_mla = meta.has("attention.key_length_mla") and meta.has("attention.value_length_mla")
    kv_lora_rank = meta.int_("attention.kv_lora_rank", 0)

    is_recurrent = _recurrent_layers(meta, n_layer_all, n_layer, n_head_kv, n_ff)
    is_swa, n_swa = _swa_layers(meta, n_layer_all, n_layer)
    if arch in {"lfm2", "lfm2moe"} and n_swa > 0:
        is_swa = tuple(il < n_layer and not is_recurrent[il] for il in range(n_layer_all))
    swa_enabled = any(is_swa)

    tensors = tuple(
        TensorSpec(
            name=t.name,
            shape=tuple(t.shape),
            ggml_type=t.ggml_type,
            type_name=t.type_name,
            n_bytes=t.n_bytes,
            layer=_layer_of(t.name),
            role=tensor_role(t.name),
        )
        for t in tensors_in
    )
    names = {t.name for t in tensors}
    tied = "output.weight" not in names and "token_embd.weight" in names

    memory_kind = _arch_memory_kind(arch, swa_enabled)
    if memory_kind == "unknown":
        notes.append(f"KV rule unknown for {arch}: weights are exact, KV cache is not estimated")

    file_type_value = md.get("general.file_type")
    rope_value = md.get(meta.key("rope.scaling.type"))
    name_value = md.get("general.name")

    return ModelSpec(
        path=path,
        arch=arch,
        name=name_value if isinstance(name_value, str) else None,
        n_layer_all=n_layer_all,
        n_layer_nextn=n_layer_nextn,
        n_embd=n_embd,
        n_vocab=_vocab_size(meta, tensors_in),
        n_ctx_train=n_ctx_train,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        head_k_full=head_k_full,
        head_v_full=head_v_full,
        head_k_swa=head_k_swa,
        head_v_swa=head_v_swa,
        is_swa=is_swa,
        is_recurrent=is_recurrent,
        n_swa=n_swa,
        is_mla=is_mla,
        kv_lora_rank=kv_lora_rank,
        n_rot=meta.int_("rope.dimension_count", head_k_full),
        n_expert=meta.int_("expert_count", 0),
        n_expert_used=meta.int_("expert_used_count", 0),
        n_expert_shared=meta.int_("expert_shared_count", 0),
        ssm_d_conv=meta.int_("ssm.conv_kernel", 0),
        ssm_d_inner=meta.int_("ssm.inner_size", 0),
        ssm_d_state=meta.int_("ssm.state_size", 0),
        ssm_n_group=meta.int_("ssm.group_count", 0),
        wkv_head_size=meta.int_("wkv.head_size", 0),
        token_shift_count=meta.int_("token_shift_count", 2),
        shortconv_l_cache=meta.int_("shortconv.l_cache", 0),
        memory_kind=memory_kind,
        tensors=tensors,
        tied_embeddings=tied,
        file_type=file_type_value if isinstance(file_type_value, int) else None,
        rope_scaling=rope_value if isinstance(rope_value, str) else None,
        notes=tuple(notes),
    )
