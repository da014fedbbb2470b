"""Popular models as exact header specs: plan any of them without downloading a byte.

A catalog entry (``profiles/models/<key>.json``) holds a model's hyperparameters exactly as
the GGUF metadata of its F16 conversion would hold them (``general.architecture`` and the
``{arch}.*`` keys that ``convert_hf_to_gguf.py`` writes from the published ``config.json``),
plus what the metadata does not say but the tensor list depends on, and the URL of the
published config it was taken from::

    {
      "name": "Qwen3-8B",
      "source": "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
      "tensors": {"tied_embeddings": false},
      "metadata": {
        "general.architecture": "qwen3",
        "qwen3.vocab_size": 151936,
        "qwen3.block_count": 36,
        ...
      }
    }

The vocabulary size is stored as ``{arch}.vocab_size`` (a key llama.cpp reads; the real
file's ``tokenizer.ggml.tokens`` has that many entries). ``tensors`` holds the options:
``tied_embeddings`` (no ``output.weight``), ``rope_freqs`` (Llama 3 rope scaling: the
converter adds a global ``rope_freqs.weight``), ``rope_factors`` (Phi-3 LongRoPE:
``rope_factors_long/short.weight``), ``qk_norm`` (GLM-4.5/4.6's ``use_qk_norm``: per-head
q/k norms, optional in glm4moe), ``k_eq_v`` (Gemma 4's ``attention_k_eq_v``: the
full-attention layers have no V projection, V is K) and ``expert_type`` (``"MXFP4"`` for
gpt-oss, whose experts are published in MXFP4 and kept so by the converter).

:func:`generate_tensors` builds the full tensor list from metadata with one generator driven
by per-architecture templates that follow ``load_arch_tensors`` in the vendored llama.cpp
(``src/models/<arch>.cpp``) and the converter's type rules (``conversion/base.py``
``prepare_tensors``: 1-D tensors, norms, biases and routers stay F32). :func:`catalog_header`
wraps the result in an object that satisfies :class:`app.model.spec.HeaderLike`, so a catalog
model goes through the same :func:`app.model.spec.model_spec` path as a real file::

    spec = model_spec(catalog_header("qwen3-8b"))
    spec.n_params          # 8_190_735_360
    estimate(spec, settings, hardware)

Any problem with an entry raises :class:`~app.errors.CatalogError` naming the file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Final, Literal

from app.errors import CatalogError
from app.model.catalog_names import CATALOG_PREFIX, catalog_key, is_catalog
from app.model.ggml import GGML_QUANT_SIZES, GGMLQuantizationType, LlamaFileType
from app.model.spec import ModelSpec
from app.paths import data_dir

__all__ = [
    "CATALOG_DIR",
    "CATALOG_PREFIX",
    "CatalogEntry",
    "CatalogHeader",
    "CatalogTensor",
    "TensorOptions",
    "active_params",
    "catalog_header",
    "catalog_key",
    "catalog_keys",
    "generate_tensors",
    "header_from_metadata",
    "is_catalog",
    "load_catalog",
    "load_entry",
    "parse_entry",
]

CATALOG_DIR: Final = data_dir() / "models"
"""Where the shipped catalog lives (``profiles/models/*.json``)."""

ExpertType = Literal["F16", "MXFP4"]

_F16: Final = GGMLQuantizationType.F16
_F32: Final = GGMLQuantizationType.F32
_EXPERT_TYPES: Final[dict[str, GGMLQuantizationType]] = {
    "F16": GGMLQuantizationType.F16,
    "MXFP4": GGMLQuantizationType.MXFP4,
}
_KEY_RE: Final = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


# --------------------------------------------------------------------------- public types


@dataclass(frozen=True, slots=True)
class TensorOptions:
    """What the tensor list depends on beyond the GGUF metadata (see the module docstring)."""

    tied_embeddings: bool = False
    rope_freqs: bool = False
    rope_factors: bool = False
    qk_norm: bool = False
    k_eq_v: bool = False
    expert_type: ExpertType = "F16"


@dataclass(frozen=True, slots=True)
class CatalogTensor:
    """One generated tensor: ``shape`` in ggml order (ne0 first), size in bytes."""

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    type_name: str
    n_bytes: int

    @property
    def n_elements(self) -> int:
        """Return the number of weights in the tensor."""
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class CatalogHeader:
    """A generated GGUF header; satisfies :class:`app.model.spec.HeaderLike`."""

    path: str
    metadata: Mapping[str, object]
    tensors: tuple[CatalogTensor, ...]


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One catalog model: ``key`` is the file stem, ``source`` the published config's URL.

    ``metadata`` holds the GGUF keys, ``notes`` what a user should know about the entry
    (what the converter drops, what is not counted), ``file`` the JSON file it came from.
    """

    key: str
    name: str
    source: str
    arch: str
    options: TensorOptions
    metadata: Mapping[str, object] = field(repr=False)
    notes: str = ""
    file: str = ""
    vision_projector: bool = False
    """The published model has a vision tower: llama.cpp loads it from a separate mmproj
    file (its memory is not in this entry's weights; see the runner footprint)."""

    @property
    def path(self) -> str:
        """Return the model's path as specs and messages show it (``catalog:<key>``)."""
        return CATALOG_PREFIX + self.key


# --------------------------------------------------------------------------- loading


def catalog_keys(directory: Path = CATALOG_DIR) -> tuple[str, ...]:
    """Return the keys (file stems) of the entries in ``directory``, sorted."""
    if not directory.is_dir():
        return ()
    return tuple(sorted(p.stem for p in directory.glob("*.json")))


def load_entry(name: str | Path, directory: Path = CATALOG_DIR) -> CatalogEntry:
    """Load and validate an entry given by key (``"qwen3-8b"``) or by the path of a file.

    Raise :class:`~app.errors.CatalogError` for an unknown key (listing the known ones), a
    file that cannot be read, is not JSON, or does not describe a model ggtune can build.
    """
    if isinstance(name, Path) or name.endswith(".json"):
        file = Path(name)
    else:
        key = name.removeprefix(CATALOG_PREFIX)
        file = directory / f"{key}.json"
        if not _KEY_RE.match(key) or not file.is_file():
            known = ", ".join(catalog_keys(directory)) or "none"
            raise CatalogError(f"no catalog model {key!r} (known: {known})")
    try:
        raw = file.read_bytes()
    except OSError as err:
        raise CatalogError(f"cannot read the entry: {err.strerror or err}", path=file) from err
    try:
        data = json.loads(raw.decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CatalogError(f"not valid JSON: {err}", path=file) from err
    return parse_entry(data, key=file.stem, file=str(file))


def load_catalog(directory: Path = CATALOG_DIR) -> tuple[CatalogEntry, ...]:
    """Load every entry in ``directory`` (sorted by key); the first bad file raises."""
    return tuple(load_entry(directory / f"{key}.json") for key in catalog_keys(directory))


def parse_entry(data: object, *, key: str, file: str = "") -> CatalogEntry:
    """Validate decoded JSON ``data`` as a catalog entry and return it.

    Raise :class:`~app.errors.CatalogError` naming ``file`` and the field at fault. The
    tensor list is generated once here, so an entry that loads is one that builds.
    """
    where = file or None
    if not isinstance(data, dict):
        raise CatalogError("the entry should be a JSON object", path=where)
    allowed = {"name", "source", "tensors", "metadata", "notes", "vision_projector"}
    extra = sorted(set(data) - allowed)
    if extra:
        raise CatalogError(f"unknown field(s) {', '.join(extra)}", path=where)
    name = _field_str(data, "name", where)
    source = _field_str(data, "source", where)
    if not source.startswith("https://"):
        raise CatalogError("source should be an https:// URL of the published config", path=where)
    options = _parse_options(data.get("tensors", {}), where)
    notes = data.get("notes", "")
    if not isinstance(notes, str):
        raise CatalogError("notes should be a string", path=where)
    vision = data.get("vision_projector", False)
    if not isinstance(vision, bool):
        raise CatalogError("vision_projector should be true or false", path=where)
    raw_md = data.get("metadata")
    if not isinstance(raw_md, dict) or not raw_md:
        raise CatalogError("metadata should be a non-empty object of GGUF keys", path=where)
    metadata: dict[str, object] = {}
    for k, v in raw_md.items():
        metadata[k] = _metadata_value(k, v, where)
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or arch not in _TEMPLATES:
        known = ", ".join(sorted(_TEMPLATES))
        raise CatalogError(
            f"general.architecture should be one of {known}, not {arch!r}", path=where
        )
    for k in metadata:
        if k != "general.architecture" and not k.startswith(f"{arch}."):
            raise CatalogError(f"metadata key {k!r} does not belong to {arch}", path=where)
    entry = CatalogEntry(
        key=key,
        name=name,
        source=source,
        arch=arch,
        options=options,
        metadata=MappingProxyType(metadata),
        notes=notes,
        file=file,
        vision_projector=vision,
    )
    generate_tensors(entry.metadata, entry.options, path=file or entry.path)
    return entry


def catalog_header(entry: str | CatalogEntry, directory: Path = CATALOG_DIR) -> CatalogHeader:
    """Return the generated F16 header of a catalog model (key, ``catalog:key`` or entry)."""
    if not isinstance(entry, CatalogEntry):
        entry = load_entry(entry, directory)
    md: dict[str, object] = dict(entry.metadata)
    md["general.name"] = entry.name
    return header_from_metadata(md, entry.options, path=entry.path)


def header_from_metadata(
    metadata: Mapping[str, object], options: TensorOptions, *, path: str
) -> CatalogHeader:
    """Return a header whose tensors are generated from ``metadata`` and ``options``.

    ``general.file_type`` is set as the converter sets it for an F16 conversion
    (``MOSTLY_MXFP4_MOE`` when the experts stay MXFP4).
    """
    tensors = generate_tensors(metadata, options, path=path)
    md = dict(metadata)
    md["general.file_type"] = int(
        LlamaFileType.MXFP4_MOE if options.expert_type == "MXFP4" else LlamaFileType.F16
    )
    return CatalogHeader(path=path, metadata=MappingProxyType(md), tensors=tensors)


def active_params(spec: ModelSpec) -> int:
    """Return the parameters one decoded token is multiplied with.

    That is every tensor except the routed experts not chosen (``n_expert - n_expert_used``
    of each ``*_exps`` tensor) and except ``token_embd`` (one row is looked up), unless the
    output head is tied to it. OpenAI's "active parameters" for gpt-oss are this number.
    """
    total = 0
    for t in spec.tensors:
        n = t.n_elements
        if t.name == "token_embd.weight" and not spec.tied_embeddings:
            continue
        if t.role == "expert" and spec.n_expert > 0:
            n = n * spec.n_expert_used // spec.n_expert
        total += n
    return total


# --------------------------------------------------------------------------- validation


def _field_str(data: Mapping[str, object], name: str, where: str | None) -> str:
    value = data.get(name)
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(f"{name} should be a non-empty string", path=where)
    return value


def _parse_options(raw: object, where: str | None) -> TensorOptions:
    if not isinstance(raw, dict):
        raise CatalogError("tensors should be an object of options", path=where)
    known = {"tied_embeddings", "rope_freqs", "rope_factors", "qk_norm", "k_eq_v", "expert_type"}
    extra = sorted(set(raw) - known)
    if extra:
        raise CatalogError(f"unknown tensor option(s) {', '.join(extra)}", path=where)
    flags: dict[str, bool] = {}
    for k in ("tied_embeddings", "rope_freqs", "rope_factors", "qk_norm", "k_eq_v"):
        v = raw.get(k, False)
        if not isinstance(v, bool):
            raise CatalogError(f"tensors.{k} should be true or false", path=where)
        flags[k] = v
    expert_type = raw.get("expert_type", "F16")
    if expert_type == "F16":
        return TensorOptions(**flags, expert_type="F16")
    if expert_type == "MXFP4":
        return TensorOptions(**flags, expert_type="MXFP4")
    raise CatalogError(
        f"tensors.expert_type should be one of {', '.join(_EXPERT_TYPES)}, not {expert_type!r}",
        path=where,
    )


def _metadata_value(key: str, value: object, where: str | None) -> object:
    """Check one metadata value: a GGUF scalar, or an array of them (as a tuple)."""
    if not isinstance(key, str) or not key:
        raise CatalogError("metadata keys should be non-empty strings", path=where)
    if isinstance(value, bool | int | float | str):
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise CatalogError(f"metadata {key} is negative ({value})", path=where)
        return value
    if isinstance(value, list) and value and all(_is_scalar(v) for v in value):
        return tuple(value)
    raise CatalogError(
        f"metadata {key} should be a number, string, bool or a list of them", path=where
    )


def _is_scalar(value: object) -> bool:
    return isinstance(value, bool | int | float | str)


# --------------------------------------------------------------------------- hyperparameters


class _Hparams:
    """Typed reads of ``{arch}.*`` keys; errors name the entry and the key."""

    def __init__(self, metadata: Mapping[str, object], path: str) -> None:
        arch = metadata.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            raise CatalogError("metadata lacks general.architecture", path=path)
        self.arch = arch
        self.md = metadata
        self.path = path

    def int_(self, suffix: str, default: int | None = None) -> int:
        key = f"{self.arch}.{suffix}"
        value = self.md.get(key)
        if value is None:
            if default is None:
                raise CatalogError(f"metadata lacks {key}", path=self.path)
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CatalogError(f"{key} should be a non-negative integer", path=self.path)
        return value

    def per_layer(self, suffix: str, n_layer: int, default: int | None = None) -> tuple[int, ...]:
        key = f"{self.arch}.{suffix}"
        value = self.md.get(key)
        if isinstance(value, tuple):
            if len(value) != n_layer or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
            ):
                raise CatalogError(
                    f"{key} should hold {n_layer} non-negative integers", path=self.path
                )
            return tuple(int(v) for v in value)
        return (self.int_(suffix, default),) * n_layer

    def n_vocab(self) -> int:
        tokens = self.md.get("tokenizer.ggml.tokens")
        if isinstance(tokens, tuple):
            return len(tokens)
        count = getattr(tokens, "count", None)
        if isinstance(count, int):
            return count
        return self.int_("vocab_size")


def _model_dims(hp: _Hparams) -> tuple[dict[str, int], list[dict[str, int]]]:
    """Return (global dims, per-layer dims) of the model, as ``load_arch_tensors`` sees them."""
    n_layer_all = hp.int_("block_count")
    if not 0 < n_layer_all <= 4096:
        raise CatalogError(f"{hp.arch}.block_count out of range ({n_layer_all})", path=hp.path)
    # The converter drops DeepSeek's NextN/MTP layers (conversion/deepseek.py skip_mtp).
    n_layer = n_layer_all - hp.int_("nextn_predict_layers", 0)
    n_embd = hp.int_("embedding_length")
    n_head = hp.per_layer("attention.head_count", n_layer_all)
    n_head_kv = hp.per_layer("attention.head_count_kv", n_layer_all, n_head[0])
    n_ff = hp.per_layer("feed_forward_length", n_layer_all, 0)
    head0 = n_head[0]
    if head0 == 0:
        raise CatalogError(f"{hp.arch}.attention.head_count should be > 0", path=hp.path)
    head_k = hp.int_("attention.key_length", n_embd // head0)
    head_v = hp.int_("attention.value_length", n_embd // head0)
    n_rot = hp.int_("rope.dimension_count", head_k)
    n_expert = hp.int_("expert_count", 0)
    n_expert_used = hp.int_("expert_used_count", 0)
    if n_expert and not 0 < n_expert_used <= n_expert:
        raise CatalogError(
            f"{hp.arch}.expert_used_count should be between 1 and {n_expert}", path=hp.path
        )
    # qwen3moe: n_ff_exp defaults to n_ff / n_expert_used (src/models/qwen3moe.cpp)
    n_ff_exp = hp.int_("expert_feed_forward_length", n_ff[0] // n_expert_used if n_expert else 0)
    k_mla = hp.int_("attention.key_length_mla", 0)
    v_mla = hp.int_("attention.value_length_mla", 0)
    glob = {
        "n_embd": n_embd,
        "n_vocab": hp.n_vocab(),
        "n_layer": n_layer,
        "n_dense": hp.int_("leading_dense_block_count", 0),
        "half_rot": n_rot // 2,
        "n_expert": n_expert,
        "n_ff_exp": n_ff_exp,
        # qwen35moe names the shared expert's size; DeepSeek/GLM give a count of experts
        "n_ff_shexp": hp.int_(
            "expert_shared_feed_forward_length", n_ff_exp * hp.int_("expert_shared_count", 0)
        ),
        "q_lora": hp.int_("attention.q_lora_rank", 0),
        "kv_lora": hp.int_("attention.kv_lora_rank", 0),
        "kv_a": hp.int_("attention.kv_lora_rank", 0) + n_rot,
        "k_nope": k_mla - n_rot,
        "v_mla": v_mla,
        "idx_heads": hp.int_("attention.indexer.head_count", 0),
        "idx_dim": hp.int_("attention.indexer.key_length", 0),
        "idx_q": hp.int_("attention.indexer.head_count", 0)
        * hp.int_("attention.indexer.key_length", 0),
        # gated delta net (qwen35/qwen35moe load_arch_tensors): head sizes are ssm.state_size,
        # key heads ssm.group_count, value heads ssm.time_step_rank
        "d_conv": hp.int_("ssm.conv_kernel", 0),
        "d_state": hp.int_("ssm.state_size", 0),
        "dt_rank": hp.int_("ssm.time_step_rank", 0),
        "ssm_v": hp.int_("ssm.state_size", 0) * hp.int_("ssm.time_step_rank", 0),
        "ssm_conv": hp.int_("ssm.state_size", 0)
        * (2 * hp.int_("ssm.group_count", 0) + hp.int_("ssm.time_step_rank", 0)),
    }
    # gemma4: per-layer sliding-window flags, the sliding layers' own head size, per-layer
    # input embeddings and the last shared_kv_layers layers without K/V of their own
    swa = hp.md.get(f"{hp.arch}.attention.sliding_window_pattern")
    swa_flags = swa if hp.arch == "gemma4" and isinstance(swa, tuple) else ()
    if swa_flags and len(swa_flags) != n_layer_all:
        raise CatalogError(
            f"{hp.arch}.attention.sliding_window_pattern should hold {n_layer_all} flags",
            path=hp.path,
        )
    n_pl = hp.int_("embedding_length_per_layer_input", 0) if hp.arch == "gemma4" else 0
    glob["n_pl"] = n_pl
    glob["n_pl_all"] = n_pl * n_layer
    glob["n_kv_from"] = n_layer - hp.int_("attention.shared_kv_layers", 0)
    glob["n_ff_exp2"] = 2 * n_ff_exp
    layers = []
    for il in range(n_layer):
        is_swa = bool(swa_flags[il]) if swa_flags else False
        hk = hp.int_("attention.key_length_swa") if is_swa else head_k
        hv = hp.int_("attention.value_length_swa") if is_swa else head_v
        q = n_head[il] * hk
        kv_k = n_head_kv[il] * hk
        kv_v = n_head_kv[il] * hv
        layers.append(
            {
                **glob,
                "is_swa": int(is_swa),
                "head_k": hk,
                "n_head": n_head[il],
                "q": q,
                "kv_k": kv_k,
                "kv_v": kv_v,
                "qkv": q + kv_k + kv_v,
                "q2": 2 * q,  # qwen35: the q projection carries the output gate too
                "n_ff": n_ff[il],
                "n_ff2": 2 * n_ff[il],
                "q_mla": n_head[il] * k_mla,
                "o_mla": n_head[il] * v_mla,
            }
        )
    return glob, layers


# --------------------------------------------------------------------------- templates

# A tensor template: name (without "blk.N.") and shape as dimension names of _model_dims.
_T = tuple[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class _Template:
    """Which tensors an architecture has: per layer, then dense-FFN or MoE layers."""

    layer: tuple[_T, ...]
    dense: tuple[_T, ...]
    moe: tuple[_T, ...] = ()
    output_required: bool = False  # no tied fallback in load_arch_tensors (gpt-oss)
    moe_step: bool = False  # MoE on every interleave_moe_layer_step-th layer (llama4)
    # hybrid models (qwen35): attention-layer and recurrent-layer tensors after ``layer``
    attn: tuple[_T, ...] = ()
    recurrent: tuple[_T, ...] = ()


_ATTN_NORM: Final[tuple[_T, ...]] = (("attn_norm.weight", ("n_embd",)),)
_QKV: Final[tuple[_T, ...]] = (
    ("attn_q.weight", ("n_embd", "q")),
    ("attn_k.weight", ("n_embd", "kv_k")),
    ("attn_v.weight", ("n_embd", "kv_v")),
)
_QKV_BIAS: Final[tuple[_T, ...]] = (
    ("attn_q.bias", ("q",)),
    ("attn_k.bias", ("kv_k",)),
    ("attn_v.bias", ("kv_v",)),
)
_QK_NORM: Final[tuple[_T, ...]] = (
    ("attn_q_norm.weight", ("head_k",)),
    ("attn_k_norm.weight", ("head_k",)),
)
_ATTN_OUT: Final[tuple[_T, ...]] = (("attn_output.weight", ("q", "n_embd")),)
_FFN_NORM: Final[tuple[_T, ...]] = (("ffn_norm.weight", ("n_embd",)),)
_FFN: Final[tuple[_T, ...]] = (
    ("ffn_gate.weight", ("n_embd", "n_ff")),
    ("ffn_up.weight", ("n_embd", "n_ff")),
    ("ffn_down.weight", ("n_ff", "n_embd")),
)
_EXPERTS: Final[tuple[_T, ...]] = (
    ("ffn_gate_inp.weight", ("n_embd", "n_expert")),
    ("ffn_gate_exps.weight", ("n_embd", "n_ff_exp", "n_expert")),
    ("ffn_up_exps.weight", ("n_embd", "n_ff_exp", "n_expert")),
    ("ffn_down_exps.weight", ("n_ff_exp", "n_embd", "n_expert")),
)

_TEMPLATES: Final[dict[str, _Template]] = {
    # src/models/llama.cpp (also Mistral; Mixtral when expert_count > 0)
    "llama": _Template(
        layer=(*_ATTN_NORM, *_QKV, *_ATTN_OUT, *_FFN_NORM), dense=_FFN, moe=_EXPERTS
    ),
    # src/models/qwen2.cpp: q/k/v biases
    "qwen2": _Template(layer=(*_ATTN_NORM, *_QKV, *_QKV_BIAS, *_ATTN_OUT, *_FFN_NORM), dense=_FFN),
    # src/models/qwen3.cpp: per-head q/k RMS norms
    "qwen3": _Template(layer=(*_ATTN_NORM, *_QKV, *_QK_NORM, *_ATTN_OUT, *_FFN_NORM), dense=_FFN),
    # src/models/qwen3moe.cpp: every layer MoE
    "qwen3moe": _Template(
        layer=(*_ATTN_NORM, *_QKV, *_QK_NORM, *_ATTN_OUT, *_FFN_NORM), dense=(), moe=_EXPERTS
    ),
    # src/models/gemma3.cpp: sandwich norms around attention and FFN
    "gemma3": _Template(
        layer=(
            *_ATTN_NORM,
            *_QKV,
            *_QK_NORM,
            *_ATTN_OUT,
            ("post_attention_norm.weight", ("n_embd",)),
            *_FFN_NORM,
            ("post_ffw_norm.weight", ("n_embd",)),
        ),
        dense=_FFN,
    ),
    # src/models/phi3.cpp: fused QKV and fused gate+up (as the converter keeps them)
    "phi3": _Template(
        layer=(
            *_ATTN_NORM,
            ("attn_qkv.weight", ("n_embd", "qkv")),
            *_ATTN_OUT,
            *_FFN_NORM,
        ),
        dense=(("ffn_up.weight", ("n_embd", "n_ff2")), ("ffn_down.weight", ("n_ff", "n_embd"))),
    ),
    # src/models/openai-moe.cpp: biases everywhere, attention sinks, post-attention norm
    # as the FFN norm, routed experts with biases
    "gpt-oss": _Template(
        layer=(
            *_ATTN_NORM,
            ("post_attention_norm.weight", ("n_embd",)),
            *_QKV,
            *_QKV_BIAS,
            *_ATTN_OUT,
            ("attn_output.bias", ("n_embd",)),
            ("attn_sinks.weight", ("n_head",)),
        ),
        dense=(),
        moe=(
            *_EXPERTS,
            ("ffn_gate_inp.bias", ("n_expert",)),
            ("ffn_gate_exps.bias", ("n_ff_exp", "n_expert")),
            ("ffn_up_exps.bias", ("n_ff_exp", "n_expert")),
            ("ffn_down_exps.bias", ("n_embd", "n_expert")),
        ),
        output_required=True,
    ),
    # src/models/deepseek2.cpp with MLA (q/kv LoRA, wkv_b split into wk_b/wv_b by the
    # converter), leading dense layers, routed experts with the selection bias and a shared
    # expert. The q LoRA tensors are dropped by _layer_tensors when q_lora_rank is 0.
    "deepseek2": _Template(
        layer=(
            *_ATTN_NORM,
            ("attn_q_a_norm.weight", ("q_lora",)),
            ("attn_kv_a_norm.weight", ("kv_lora",)),
            ("attn_q_a.weight", ("n_embd", "q_lora")),
            ("attn_q_b.weight", ("q_lora", "q_mla")),
            ("attn_kv_a_mqa.weight", ("n_embd", "kv_a")),
            ("attn_k_b.weight", ("k_nope", "kv_lora", "n_head")),
            ("attn_v_b.weight", ("kv_lora", "v_mla", "n_head")),
            ("attn_output.weight", ("o_mla", "n_embd")),
            *_FFN_NORM,
        ),
        dense=_FFN,
        moe=(
            *_EXPERTS,
            ("exp_probs_b.bias", ("n_expert",)),
            ("ffn_gate_shexp.weight", ("n_embd", "n_ff_shexp")),
            ("ffn_up_shexp.weight", ("n_embd", "n_ff_shexp")),
            ("ffn_down_shexp.weight", ("n_ff_shexp", "n_embd")),
        ),
    ),
}

_TEMPLATES["deepseek32"] = _Template(
    # src/models/deepseek32.cpp: DeepSeek-V2/V3 MLA layers plus the DSA lightning indexer
    layer=(
        *_TEMPLATES["deepseek2"].layer,
        ("indexer.k_norm.weight", ("idx_dim",)),
        ("indexer.k_norm.bias", ("idx_dim",)),
        ("indexer.proj.weight", ("n_embd", "idx_heads")),
        ("indexer.attn_k.weight", ("n_embd", "idx_dim")),
        ("indexer.attn_q_b.weight", ("q_lora", "idx_q")),
    ),
    dense=_TEMPLATES["deepseek2"].dense,
    moe=_TEMPLATES["deepseek2"].moe,
)
_TEMPLATES["llama4"] = _Template(
    # src/models/llama4.cpp: MoE layers every interleave_moe_layer_step-th layer, each with
    # routed experts and one shared expert of the expert size; dense layers in between
    layer=(*_ATTN_NORM, *_QKV, *_ATTN_OUT, *_FFN_NORM),
    dense=_FFN,
    moe=(
        *_EXPERTS,
        ("ffn_gate_shexp.weight", ("n_embd", "n_ff_exp")),
        ("ffn_up_shexp.weight", ("n_embd", "n_ff_exp")),
        ("ffn_down_shexp.weight", ("n_ff_exp", "n_embd")),
    ),
    moe_step=True,
)

# src/models/mistral3.cpp: the llama layout (Mistral Small 3.1/3.2 convert to mistral3)
_TEMPLATES["mistral3"] = _TEMPLATES["llama"]
_TEMPLATES["glm4moe"] = _Template(
    # src/models/glm4-moe.cpp: q/k/v biases, q/k norms with the qk_norm option (GLM-4.5/4.6
    # use_qk_norm; not GLM-4.5-Air), the post-attention norm as the FFN norm, leading dense
    # layers, routed experts with the selection bias and one shared expert; the NextN/MTP
    # layer is not generated (the entries describe a --no-mtp conversion)
    layer=(
        *_ATTN_NORM,
        *_QKV,
        *_QKV_BIAS,
        *_ATTN_OUT,
        ("post_attention_norm.weight", ("n_embd",)),
    ),
    dense=_FFN,
    moe=(
        *_EXPERTS,
        ("exp_probs_b.bias", ("n_expert",)),
        ("ffn_gate_shexp.weight", ("n_embd", "n_ff_shexp")),
        ("ffn_up_shexp.weight", ("n_embd", "n_ff_shexp")),
        ("ffn_down_shexp.weight", ("n_ff_shexp", "n_embd")),
    ),
)
_QWEN35_ATTN: Final[tuple[_T, ...]] = (
    ("attn_q.weight", ("n_embd", "q2")),
    ("attn_k.weight", ("n_embd", "kv_k")),
    ("attn_v.weight", ("n_embd", "kv_v")),
    *_ATTN_OUT,
    *_QK_NORM,
)
_QWEN35_RECURRENT: Final[tuple[_T, ...]] = (
    ("attn_qkv.weight", ("n_embd", "ssm_conv")),
    ("attn_gate.weight", ("n_embd", "ssm_v")),
    ("ssm_conv1d.weight", ("d_conv", "ssm_conv")),
    ("ssm_dt.bias", ("dt_rank",)),
    ("ssm_a", ("dt_rank",)),
    ("ssm_beta.weight", ("n_embd", "dt_rank")),
    ("ssm_alpha.weight", ("n_embd", "dt_rank")),
    ("ssm_norm.weight", ("d_state",)),
    ("ssm_out.weight", ("ssm_v", "n_embd")),
)
_QWEN35_LAYER: Final[tuple[_T, ...]] = (
    *_ATTN_NORM,
    ("post_attention_norm.weight", ("n_embd",)),
)
# src/models/qwen35.cpp / qwen35moe.cpp: gated delta net layers and gated full attention
# every full_attention_interval-th layer; the MTP block is not generated (--no-mtp)
_TEMPLATES["qwen35"] = _Template(
    layer=_QWEN35_LAYER, dense=_FFN, attn=_QWEN35_ATTN, recurrent=_QWEN35_RECURRENT
)
_TEMPLATES["qwen35moe"] = _Template(
    layer=_QWEN35_LAYER,
    dense=(),
    moe=(
        *_EXPERTS,
        ("ffn_gate_inp_shexp.weight", ("n_embd",)),
        ("ffn_gate_shexp.weight", ("n_embd", "n_ff_shexp")),
        ("ffn_up_shexp.weight", ("n_embd", "n_ff_shexp")),
        ("ffn_down_shexp.weight", ("n_ff_shexp", "n_embd")),
    ),
    attn=_QWEN35_ATTN,
    recurrent=_QWEN35_RECURRENT,
)

# src/models/gemma4.cpp: built by _gemma4_layer (per-layer head sizes, shared KV, MoE)
_TEMPLATES["gemma4"] = _Template(layer=(), dense=(), moe=())

ARCHITECTURES: Final = frozenset(_TEMPLATES)
"""Architectures the generator has templates for."""


def _gemma4_layer(il: int, dims: Mapping[str, int], options: TensorOptions) -> list[_T]:
    """Return the tensors of Gemma 4 layer ``il`` (src/models/gemma4.cpp load_arch_tensors).

    K (and its norm) only on layers that own a cache (before the shared-KV layers); V also
    only there, and not on full-attention layers when V is K (``k_eq_v``); sandwich norms;
    a dense FFN on every layer plus, on MoE models, routed experts with fused gate+up, the
    router's input scale, per-expert output scales and their own norms; per-layer inputs.
    """
    has_kv = il < dims["n_kv_from"]
    parts: list[_T] = [*_ATTN_NORM, ("attn_q.weight", ("n_embd", "q"))]
    if has_kv:
        parts.append(("attn_k.weight", ("n_embd", "kv_k")))
        if dims["is_swa"] or not options.k_eq_v:
            parts.append(("attn_v.weight", ("n_embd", "kv_v")))
    parts += [*_ATTN_OUT, ("attn_q_norm.weight", ("head_k",))]
    if has_kv:
        parts.append(("attn_k_norm.weight", ("head_k",)))
    parts += [
        ("post_attention_norm.weight", ("n_embd",)),
        *_FFN_NORM,
        *_FFN,
        ("post_ffw_norm.weight", ("n_embd",)),
    ]
    if dims["n_expert"]:
        parts += [
            ("ffn_gate_inp.weight", ("n_embd", "n_expert")),
            ("ffn_gate_inp.scale", ("n_embd",)),
            ("pre_ffw_norm_2.weight", ("n_embd",)),
            ("post_ffw_norm_1.weight", ("n_embd",)),
            ("post_ffw_norm_2.weight", ("n_embd",)),
            ("ffn_gate_up_exps.weight", ("n_embd", "n_ff_exp2", "n_expert")),
            ("ffn_down_exps.weight", ("n_ff_exp", "n_embd", "n_expert")),
            ("ffn_down_exps.scale", ("n_expert",)),
        ]
    if dims["n_pl"]:
        parts += [
            ("inp_gate.weight", ("n_embd", "n_pl")),
            ("proj.weight", ("n_pl", "n_embd")),
            ("post_norm.weight", ("n_embd",)),
        ]
    return parts


def _layer_tensors(
    hp: _Hparams, template: _Template, il: int, dims: Mapping[str, int], options: TensorOptions
) -> list[_T]:
    """Return the templates of layer ``il``: common part, then dense FFN or MoE."""
    if hp.arch == "gemma4":
        return _gemma4_layer(il, dims, options)
    if template.moe_step:
        step = hp.int_("interleave_moe_layer_step", 1)
        is_moe = dims["n_expert"] > 0 and step > 0 and (il + 1) % step == 0
    else:
        is_moe = dims["n_expert"] > 0 and il >= dims["n_dense"]
    mixer: tuple[_T, ...] = ()
    if template.recurrent:
        mixer = template.recurrent if _is_recurrent(hp, il) else template.attn
    parts = [*template.layer, *mixer, *(template.moe if is_moe else template.dense)]
    if is_moe and not template.moe:
        raise CatalogError(f"{hp.arch} has no mixture-of-experts layers", path=hp.path)
    if hp.arch in ("deepseek2", "deepseek32") and dims["q_lora"] == 0:
        # DeepSeek-V2-Lite: a plain wq instead of the q LoRA pair
        parts = [p for p in parts if not p[0].startswith(("attn_q_a", "attn_q_b"))]
        parts.insert(1, ("attn_q.weight", ("n_embd", "q_mla")))
    if hp.arch == "glm4moe" and options.qk_norm:
        parts[7:7] = _QK_NORM  # after the q/k/v weights and biases, as glm4-moe.cpp has them
    if hp.arch in ("deepseek2", "deepseek32") and dims["n_ff_shexp"] == 0:
        parts = [p for p in parts if "_shexp" not in p[0]]
    return parts


def _is_recurrent(hp: _Hparams, il: int) -> bool:
    """Return whether layer ``il`` of a hybrid model is a recurrent (delta-net) layer.

    ``load_arch_hparams`` of qwen35/qwen35moe: ``attention.recurrent_layers`` when the
    converter wrote it, otherwise all but every ``full_attention_interval``-th layer (4).
    """
    flags = hp.md.get(f"{hp.arch}.attention.recurrent_layers")
    if isinstance(flags, tuple) and il < len(flags):
        return bool(flags[il])
    interval = hp.int_("full_attention_interval", 4)
    if interval == 0:
        raise CatalogError(f"{hp.arch}.full_attention_interval should be > 0", path=hp.path)
    return (il + 1) % interval != 0


def _tensor_type(name: str, n_dims: int, options: TensorOptions) -> GGMLQuantizationType:
    """Return the type convert_hf_to_gguf.py gives a tensor at ``--outtype f16``.

    ``conversion/base.py`` ``prepare_tensors``: 1-D tensors and ``*_norm.weight`` are F32,
    the MoE router (``ffn_gate_inp``) and the delta net's ``ssm_conv1d`` are F32, anything
    not named ``.weight`` (biases) is F32;
    gpt-oss experts keep their published MXFP4 blocks (``conversion/gpt_oss.py``).
    """
    if n_dims <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return _F32
    if ".ffn_gate_inp." in name or ".ssm_conv1d." in name:
        return _F32
    if "_exps." in name:
        return _EXPERT_TYPES[options.expert_type]
    return _F16


def _make_tensor(
    name: str, shape: tuple[int, ...], options: TensorOptions, path: str
) -> CatalogTensor:
    if any(d <= 0 for d in shape):
        raise CatalogError(f"tensor {name} would have shape {shape}", path=path)
    qtype = _tensor_type(name, len(shape), options)
    block, size = GGML_QUANT_SIZES[qtype]
    if shape[0] % block:
        raise CatalogError(
            f"tensor {name}: row of {shape[0]} does not fill {qtype.name} blocks of {block}",
            path=path,
        )
    n_bytes = math.prod(shape) // block * size
    return CatalogTensor(name, shape, int(qtype), qtype.name, n_bytes)


def generate_tensors(
    metadata: Mapping[str, object], options: TensorOptions, *, path: str = ""
) -> tuple[CatalogTensor, ...]:
    """Return every tensor of the F16 GGUF that ``metadata`` describes, as the converter writes it.

    Order: ``token_embd``, global rope tensors, the layers, ``output_norm``, ``output``.
    Raise :class:`~app.errors.CatalogError` for an architecture without a template or
    hyperparameters that give no valid shape.
    """
    hp = _Hparams(metadata, path)
    template = _TEMPLATES.get(hp.arch)
    if template is None:
        known = ", ".join(sorted(_TEMPLATES))
        raise CatalogError(f"no tensor template for {hp.arch!r} (known: {known})", path=path)
    if options.tied_embeddings and template.output_required:
        raise CatalogError(f"{hp.arch} requires an output.weight (no tied embeddings)", path=path)
    glob, layers = _model_dims(hp)
    out: list[CatalogTensor] = []

    def add(name: str, dims: Mapping[str, int], shape: Sequence[str]) -> None:
        out.append(_make_tensor(name, tuple(dims[d] for d in shape), options, path))

    add("token_embd.weight", glob, ("n_embd", "n_vocab"))
    if options.rope_freqs:
        add("rope_freqs.weight", glob, ("half_rot",))
    if options.rope_factors:
        add("rope_factors_long.weight", glob, ("half_rot",))
        add("rope_factors_short.weight", glob, ("half_rot",))
    if glob["n_pl"]:
        add("per_layer_token_embd.weight", glob, ("n_pl_all", "n_vocab"))
        add("per_layer_model_proj.weight", glob, ("n_embd", "n_pl_all"))
        add("per_layer_proj_norm.weight", glob, ("n_pl",))
    for il, dims in enumerate(layers):
        for name, shape in _layer_tensors(hp, template, il, dims, options):
            add(f"blk.{il}.{name}", dims, shape)
    add("output_norm.weight", glob, ("n_embd",))
    if not options.tied_embeddings:
        add("output.weight", glob, ("n_embd", "n_vocab"))
    return tuple(out)
