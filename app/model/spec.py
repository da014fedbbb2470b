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
from app.model.arch_table import ARCH_RULES, UNCHECKED_ARCHS, ArchRule, SwaRule
from app.model.refusals import check_llama_cpp_rules

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

MemoryKind = Literal[
    "kv",
    "iswa",
    "recurrent",
    "hybrid",
    "hybrid_iswa",
    "dsa",
    "dsa_iswa",
    "msa",
    "hybrid_idx",
    "enc_dec",
    "none",
    "unknown",
]
"""The memory module llama.cpp builds for the model (``create_memory``; see
:mod:`app.model.arch_table`); ``unknown`` when ggtune does not size it."""

KvStatus = Literal["exact", "modelled", "unknown"]
"""How far the KV/recurrent figures can be trusted: ``exact`` = the rule is checked against
llama.cpp's dry run in tests/agreement (a zoo or real model of the same mechanism);
``modelled`` = the rule is read from the vendored source but not engine-checked yet;
``unknown`` = not estimated."""


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
    kv_layers: tuple[bool, ...] = ()
    """Layers in the (main) attention KV cache, after ``has_kv`` and the filters."""
    rs_layers: tuple[bool, ...] = ()
    """Layers that hold recurrent state (``llama_memory_recurrent``'s filter)."""
    idx_layers: tuple[bool, ...] = ()
    """Layers in the indexer key cache (DSA, MSA, hybrid-idx)."""
    idx_head_k: int = 0
    """Indexer K row per layer, elements (one key head)."""
    idx_head_v: int = 0
    """Indexer V row per layer (MSA only; 0 = K only)."""
    n_embd_head_kda: int = 0
    """Kimi delta attention head size (``kda.head_dim``): KDA recurrent state."""
    n_embd_head_la: int = 0
    """Lightning-attention head size (minimax-01): its recurrent state."""
    swa_chunked: bool = False
    """The window is chunked attention (llama4), not a sliding one (same cache size)."""
    family: str = ""
    """The architecture's family in :data:`app.model.arch_table.ARCH_RULES` (``""``: unknown)."""
    kv_status: KvStatus = "unknown"
    graph_hparams: tuple[tuple[str, int | float | bool], ...] = ()
    """Every scalar ``{arch}.*`` key of the file (key without the prefix): the switches the
    compute-graph model reads (softcapping, logit scale, expert gating …)."""

    def hparam(self, key: str) -> int | float | bool | None:
        """Return the scalar ``{arch}.{key}`` from the file, or None."""
        for k, v in self.graph_hparams:
            if k == key:
                return v
        return None

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

    @property
    def kv_exact(self) -> bool:
        """Return whether the KV/recurrent rule is checked against llama.cpp (see KvStatus)."""
        return self.kv_status == "exact"

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
        if self.n_embd_head_kda:
            # Kimi KDA: conv states of Q, K and V (llama_hparams::n_embd_r)
            kda_conv = self.ssm_d_conv - 1 if self.ssm_d_conv > 0 else 3
            return 3 * kda_conv * self.n_head[0] * self.n_embd_head_kda
        d_conv = self.ssm_d_conv - 1 if self.ssm_d_conv > 0 else 0
        return d_conv * (self.ssm_d_inner + 2 * self.ssm_n_group * self.ssm_d_state)

    def n_embd_s(self) -> int:
        """Return the recurrent SSM/WKV state per cell, in f32 elements (``n_embd_s``)."""
        if self.wkv_head_size:
            return self.n_embd * self.wkv_head_size
        if self.n_embd_head_kda:
            return self.n_embd_head_kda * self.n_embd_head_kda * self.n_head[0]
        if self.n_embd_head_la:
            return self.n_embd_head_la * self.n_embd_head_la * self.n_head[0]
        return self.ssm_d_state * self.ssm_d_inner


# --- architecture rules (app/model/arch_table.py) ----------------------------------------

_BLOCK_RE: Final = re.compile(r"^(?:enc\.|dec\.)?blk\.(\d+)\.(.+)$")


def tensor_role(name: str, arch: str = "") -> TensorRole:
    """Classify a tensor by its GGUF name (names from ``src/llama-arch.cpp``)."""
    if name.startswith("token_embd_norm"):
        # LLM_TENSOR_OUTPUT_NORM_LFM2 reuses the name for the output norm; elsewhere it is
        # LLM_TENSOR_TOKEN_EMBD_NORM, a norm of the first layer
        return "output_norm" if arch in _LFM2_ARCHS else "norm"
    if name.startswith(
        ("token_embd", "position_embd", "token_types", "per_layer_token_embd", "masked_embd_")
    ):
        # LLM_TENSOR_LAYER_INPUT in src/llama-arch.cpp: loaded to the CPU
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


_LFM2_ARCHS: Final = frozenset({"lfm2", "lfm2moe"})


def _layer_of(name: str, arch: str = "") -> int | None:
    """Return the block a tensor belongs to (its ``blk.N.`` prefix).

    ``token_embd_norm`` has no prefix but is created with block 0
    (``tn(LLM_TENSOR_TOKEN_EMBD_NORM, "weight", 0)`` in every model that has one), so it
    lives on the first layer's device; lfm2's output norm of the same name does not; nor
    do gemma3n's and gemma4's per-layer input projection and its norm.
    """
    m = _BLOCK_RE.match(name)
    if m:
        return int(m.group(1))
    if name.startswith("token_embd_norm") and arch not in _LFM2_ARCHS:
        return 0
    if name.startswith(("per_layer_model_proj", "per_layer_proj_norm")):
        # gemma3n, gemma4: tn(LLM_TENSOR_PER_LAYER_MODEL_PROJ, "weight", 0), repeating
        return 0
    return None


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


def _swa_enabled(meta: _Meta, rule: SwaRule, n_layer: int) -> bool:
    """Return whether ``load_arch_hparams`` turns the sliding window on (``swa_type``)."""
    raw = meta.md.get(meta.key("attention.sliding_window"))
    window = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
    if rule.enable == "always":
        return True
    if rule.enable == "key":
        return window is not None and window > 0
    if rule.enable == "key_not_zero":
        return window != 0
    if rule.enable == "n_layer_64":
        return n_layer == 64
    # hc_or_key (dflash): all layers with hyper-connections, else a positive window key
    return meta.int_("hyper_connection.count", 0) > 0 or (window is not None and window > 0)


def _swa_layers(
    meta: _Meta, rule: SwaRule | None, n_layer_all: int, n_layer: int, is_recurrent: Sequence[bool]
) -> tuple[tuple[bool, ...], int]:
    """Return (is_swa per layer, n_swa) as the arch's ``load_arch_hparams`` sets them."""
    none = (False,) * n_layer_all
    if rule is None or not _swa_enabled(meta, rule, n_layer):
        return none, meta.int_("attention.sliding_window", 0)
    n_swa = meta.int_("attention.sliding_window", rule.default_n_swa)
    if rule.forced_n_swa:
        n_swa = rule.forced_n_swa
    if rule.layers == "all" or (
        rule.enable == "hc_or_key" and meta.int_("hyper_connection.count", 0) > 0
    ):
        return (True,) * n_layer_all, n_swa
    if rule.layers == "non_recurrent":
        return tuple(il < n_layer and not is_recurrent[il] for il in range(n_layer_all)), n_swa
    pattern = meta.md.get(meta.key("attention.sliding_window_pattern"))
    if isinstance(pattern, tuple):
        # llama_model_loader::get_arr copies the array into is_swa_impl as given
        flags = [bool(v) for v in pattern[:n_layer_all]]
        flags += [False] * (n_layer_all - len(flags))
        return tuple(flags), n_swa
    if rule.layers == "array":
        return none, n_swa  # llama.cpp requires the array; the file does not load without it
    n_pattern = rule.n_pattern
    if isinstance(pattern, int) and not isinstance(pattern, bool):
        n_pattern = pattern
    # llama_hparams::set_swa_pattern
    flags = []
    for il in range(n_layer_all):
        if il >= n_layer:
            flags.append(False)
        elif rule.dense_first:
            flags.append(n_pattern == 0 or il % n_pattern != 0)
        else:
            flags.append(n_pattern == 0 or il % n_pattern < n_pattern - 1)
    return tuple(flags), n_swa


def _recurrent_layers(
    meta: _Meta,
    rule: ArchRule,
    n_layer_all: int,
    n_layer: int,
    n_head_kv: tuple[int, ...],
    n_ff: tuple[int, ...],
) -> tuple[bool, ...]:
    """Return which layers are recurrent (``is_recr_impl``) for recurrent and hybrid archs."""
    kind = rule.recurrent
    if kind is None:
        return (False,) * n_layer_all
    if kind == "all":
        return (True,) * n_layer_all
    if kind == "kv0":
        return tuple(il < n_layer and n_head_kv[il] == 0 for il in range(n_layer_all))
    if kind == "kv0_all":
        return tuple(n_head_kv[il] == 0 for il in range(n_layer_all))
    if kind == "kv0_ff0":
        return tuple(
            il < n_layer and n_head_kv[il] == 0 and n_ff[il] == 0 for il in range(n_layer_all)
        )
    arr = meta.md.get(meta.key("attention.recurrent_layers"))
    if isinstance(arr, tuple):
        flags = [bool(v) for v in arr[:n_layer_all]]
        return tuple(flags + [False] * (n_layer_all - len(flags)))
    if isinstance(arr, int) and not isinstance(arr, bool):
        return (bool(arr),) * n_layer_all
    default = 8 if kind == "interval8" else 4
    interval = meta.int_("full_attention_interval", default) or default
    return tuple(il < n_layer and (il + 1) % interval != 0 for il in range(n_layer_all))


def _indexer_full(meta: _Meta, arch: str, n_layer: int, n_layer_all: int) -> tuple[bool, ...]:
    """Return ``is_indexer_full`` per layer (glm-dsa, hy_v4, dots3note, glm5-next)."""
    value = meta.md.get(meta.key("attention.indexer.types"))
    if arch in ("glm-dsa", "glm5-next"):
        if arch == "glm-dsa" and meta.int_("context_length", 0) >= 1048576:
            # GLM-5.2 without the key: GLM_5_2_DEFAULT_INDEXER_TYPES (src/models/glm-dsa.cpp)
            default = [True, True] + [il % 4 == 0 for il in range(n_layer_all)]
        else:
            default = [True] * n_layer_all
    else:
        default = [False] * n_layer_all
    if isinstance(value, tuple):
        flags = [bool(v) for v in value[:n_layer]]
        default = flags + default[len(flags) :]
    elif isinstance(value, int) and not isinstance(value, bool):
        default = [bool(value)] * n_layer + default[n_layer:]
    return tuple(default[:n_layer_all]) + (False,) * max(0, n_layer_all - len(default))


@dataclass(frozen=True, slots=True)
class _Memory:
    """The memory plan of one model: kind, layer sets and the indexer's row sizes."""

    kind: MemoryKind
    kv_layers: tuple[bool, ...]
    rs_layers: tuple[bool, ...]
    idx_layers: tuple[bool, ...]
    idx_head_k: int
    idx_head_v: int
    note: str


def _memory(
    meta: _Meta,
    rule: ArchRule,
    *,
    n_layer_all: int,
    n_layer: int,
    is_swa: tuple[bool, ...],
    is_recurrent: tuple[bool, ...],
    n_ff: tuple[int, ...],
    head_v_full: int,
    head_v_swa: int,
    n_layer_kv_from_start: int,
    router_layer: bool,
) -> _Memory:
    """Follow ``llama_model::create_memory`` (``src/llama-model.cpp``) for this model."""
    arch = meta.arch
    layers = range(n_layer_all)
    nothing = (False,) * n_layer_all
    trunk = tuple(il < n_layer for il in layers)
    # llama_hparams::has_kv: the first n_layer_kv_from_start layers own K/V (gemma3n, gemma4)
    has_kv = tuple(n_layer_kv_from_start < 0 or il < n_layer_kv_from_start for il in layers)
    swa_any = any(is_swa)
    family = rule.family

    if family in ("none", "not_a_model", "draft", "dsv4"):
        kind: MemoryKind = "none" if family == "none" else "unknown"
        note = "" if family == "none" else f"{arch}: {rule.note or family}; its KV is not estimated"
        return _Memory(kind, nothing, nothing, nothing, 0, 0, note)
    if family == "recurrent":
        return _Memory("recurrent", nothing, trunk, nothing, 0, 0, "")
    if family in ("hybrid", "hybrid_idx"):
        if arch == "qwen4exp":
            note = "qwen4exp: the PLE conv state and QSA indexer are not estimated"
            return _Memory("unknown", nothing, nothing, nothing, 0, 0, note)
        if rule.attn_filter == "all":
            attn = tuple(True for _ in layers)
        elif rule.attn_filter == "trunk_not_recurrent":
            attn = tuple(il < n_layer and not is_recurrent[il] for il in layers)
        elif rule.attn_filter == "not_recurrent_ff0":
            attn = tuple(not is_recurrent[il] and n_ff[il] == 0 for il in layers)
        else:
            attn = tuple(not is_recurrent[il] for il in layers)
        if rule.recurrent == "all":
            recr = trunk
        else:
            recr = tuple(il < n_layer and is_recurrent[il] for il in layers)
        attn = tuple(a and h for a, h in zip(attn, has_kv, strict=True))
        if family == "hybrid_idx":
            full = _indexer_full(meta, arch, n_layer, n_layer_all)
            idx = tuple(a and f for a, f in zip(attn, full, strict=True))
            width = meta.int_("attention.indexer.key_length", 0)
            kpool = meta.int_("attention.indexer.kpool", 0)
            return _Memory("hybrid_idx", attn, recr, idx, width * (3 if kpool > 0 else 1), 0, "")
        return _Memory("hybrid_iswa" if swa_any else "hybrid", attn, recr, nothing, 0, 0, "")

    # nextn/MTP layers are filtered out of the trunk context unless the model repurposes
    # n_layer_nextn for a router layer (graniteswitch)
    filtered = n_layer_all > n_layer and n_layer > 0 and not router_layer
    kv = tuple(h and (not filtered or il < n_layer) for il, h in zip(layers, has_kv, strict=True))
    width_idx = meta.int_("attention.indexer.key_length", 0)
    if family == "dsa" or (family == "dsa_iswa"):
        if arch == "hy_v4" and meta.int_("attention.indexer.top_k", 0) == 0:
            return _Memory("kv", kv, nothing, nothing, 0, 0, "")
        full = _indexer_full(meta, arch, n_layer, n_layer_all)
        if arch == "deepseek32":
            idx = tuple(il < n_layer for il in layers)
        elif arch == "hy_v4":
            idx = full
        else:
            idx = tuple(il < n_layer and full[il] for il in layers)
        kind = "dsa_iswa" if family == "dsa_iswa" else "dsa"
        return _Memory(kind, kv, nothing, idx, width_idx, 0, "")
    if family == "msa":
        dense_lead = meta.int_("leading_dense_block_count", 0)
        idx = tuple(il >= dense_lead for il in layers)
        # the indexer cache is a plain (not MLA) cache of one head: it holds V rows too
        return _Memory("msa", has_kv, nothing, idx, width_idx, max(head_v_full, head_v_swa), "")
    if family == "enc_dec":
        return _Memory("enc_dec", kv, nothing, nothing, 0, 0, "")
    return _Memory("iswa" if swa_any else "kv", kv, nothing, nothing, 0, 0, "")


def _kv_status(arch: str, memory: _Memory) -> KvStatus:
    if memory.kind == "unknown":
        return "unknown"
    return "modelled" if arch in UNCHECKED_ARCHS else "exact"


def model_spec(header: HeaderLike) -> ModelSpec:
    """Build the :class:`ModelSpec` of a parsed GGUF header.

    Raises :class:`~app.errors.InvalidMetadataError` when a key llama.cpp requires is
    missing or malformed. Architectures whose memory ggtune does not size still get their
    tensors and weights; ``memory_kind`` is then ``"unknown"`` and the estimator reports
    no KV figure (a note says why).
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
    rule = ARCH_RULES.get(arch)

    n_layer_file = meta.int_("block_count")
    if not 0 < n_layer_file <= 4096:
        raise InvalidMetadataError(path, None, f"{arch}.block_count out of range ({n_layer_file})")
    n_layer_nextn = min(meta.int_("nextn_predict_layers", 0), n_layer_file)
    n_embd = meta.int_("embedding_length")
    n_ctx_train = meta.int_("context_length", 0)

    n_head = meta.per_layer("attention.head_count", n_layer_file, (0,) * n_layer_file)
    n_head_kv = meta.per_layer("attention.head_count_kv", n_layer_file, n_head)
    n_ff = meta.per_layer("feed_forward_length", n_layer_file, (0,) * n_layer_file)

    head0 = n_head[0] if n_head else 0
    if head0 > 0:
        head_k_full = meta.int_("attention.key_length", n_embd // head0)
        head_v_full = meta.int_("attention.value_length", n_embd // head0)
    else:
        head_k_full = head_v_full = 0
    head_k_swa = meta.int_("attention.key_length_swa", head_k_full)
    head_v_swa = meta.int_("attention.value_length_swa", head_v_full)
    if arch in ("glm5-next", "kimi-k3"):
        # the MLA cache holds the compressed latent (load_arch_hparams)
        head_v_full = meta.int_("attention.kv_lora_rank", head_v_full)

    n_layer_all = n_layer_file
    router_layer = False
    if arch == "nanbeige" and meta.int_("num_loops", 1) > 1:
        # looped layers: the logical layer count is block_count x num_loops (load_arch_hparams)
        loops = meta.int_("num_loops", 1)
        n_head, n_head_kv, n_ff = n_head * loops, n_head_kv * loops, n_ff * loops
        n_layer_all = n_layer_file * loops
    if arch == "graniteswitch":
        # one extra single-head attention layer at the end holds the adapter router's K/V
        n_head, n_head_kv, n_ff = (*n_head, 1), (*n_head_kv, 1), (*n_ff, 0)
        n_layer_all, n_layer_nextn, router_layer = n_layer_file + 1, 1, True
    n_layer = n_layer_all - n_layer_nextn

    is_mla = bool(
        rule is not None
        and rule.mla
        and meta.int_("attention.key_length_mla", 0)
        and meta.int_("attention.value_length_mla", 0)
    )
    kv_lora_rank = meta.int_("attention.kv_lora_rank", 0)

    if rule is None:
        rule = ArchRule("not_a_model", "src/llama-arch.cpp", note="not in LLM_ARCH_NAMES")
    is_recurrent = _recurrent_layers(meta, rule, n_layer_all, n_layer, n_head_kv, n_ff)
    is_swa, n_swa = _swa_layers(meta, rule.swa, n_layer_all, n_layer, is_recurrent)

    if arch == "gemma3n":
        kv_from = 20  # hparams.n_layer_kv_from_start (src/models/gemma3n.cpp)
    elif arch == "gemma4":
        kv_from = n_layer_all - meta.int_("attention.shared_kv_layers", 0)
    else:
        kv_from = -1

    tensors = tuple(
        TensorSpec(
            name=t.name,
            shape=tuple(t.shape),
            ggml_type=t.ggml_type,
            type_name=t.type_name,
            n_bytes=t.n_bytes,
            layer=_layer_of(t.name, arch),
            role=tensor_role(t.name, arch),
        )
        for t in tensors_in
    )
    names = {t.name for t in tensors}
    tied = "output.weight" not in names and "token_embd.weight" in names

    memory = _memory(
        meta,
        rule,
        n_layer_all=n_layer_all,
        n_layer=n_layer,
        is_swa=is_swa,
        is_recurrent=is_recurrent,
        n_ff=n_ff,
        head_v_full=head_v_full,
        head_v_swa=head_v_swa,
        n_layer_kv_from_start=kv_from,
        router_layer=router_layer,
    )
    if memory.kind == "unknown":
        if rule.family == "not_a_model" and arch not in ARCH_RULES:
            notes.append(
                f"KV rule unknown for {arch} (not an architecture of the pinned llama.cpp): "
                "weights are exact, KV cache is not estimated"
            )
        else:
            notes.append(memory.note or f"KV rule unknown for {arch}: KV cache is not estimated")
    kv_status = _kv_status(arch, memory)
    if kv_status == "modelled":
        notes.append(
            f"the KV rule for {arch} is read from llama.cpp's source but not yet checked "
            "against its dry run: check it with the engine"
        )

    file_type_value = md.get("general.file_type")
    rope_value = md.get(meta.key("rope.scaling.type"))
    name_value = md.get("general.name")

    spec = ModelSpec(
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
        memory_kind=memory.kind,
        tensors=tensors,
        tied_embeddings=tied,
        file_type=file_type_value if isinstance(file_type_value, int) else None,
        rope_scaling=rope_value if isinstance(rope_value, str) else None,
        notes=tuple(notes),
        kv_layers=memory.kv_layers,
        rs_layers=memory.rs_layers,
        idx_layers=memory.idx_layers,
        idx_head_k=memory.idx_head_k,
        idx_head_v=memory.idx_head_v,
        n_embd_head_kda=meta.int_("kda.head_dim", 0),
        n_embd_head_la=head_k_full if arch == "minimax-01" else 0,
        swa_chunked=bool(rule.swa and rule.swa.chunked and any(is_swa)),
        family=rule.family if arch in ARCH_RULES else "",
        kv_status=kv_status,
        graph_hparams=_scalar_keys(md, arch),
    )
    check_llama_cpp_rules(header, spec)  # never a verdict on a file llama.cpp refuses
    return spec


def _scalar_keys(md: Mapping[str, object], arch: str) -> tuple[tuple[str, int | float | bool], ...]:
    prefix = f"{arch}."
    return tuple(
        (key[len(prefix) :], value)
        for key, value in md.items()
        if key.startswith(prefix) and isinstance(value, int | float | bool)
    )
