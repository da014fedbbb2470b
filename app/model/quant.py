"""What a model would become at each llama.cpp quant level, tensor by tensor, to the byte.

:func:`simulate_quant` takes any :class:`~app.model.spec.ModelSpec` (whatever its own quant) and
returns the :class:`QuantResult` of quantizing it with ``llama_model_quantize`` to one
llama.cpp file type: every tensor's new ggml type and size, the file size, the bits per
weight, whether llama.cpp demands an importance matrix, and a new ``ModelSpec`` the
estimator takes unchanged. :func:`simulate_all` does it for every file type.

The rules are those of the vendored ``src/llama-quant.cpp`` (llama-cpp-python 0.3.36),
followed line by line; the comments name the function each rule comes from:

* the order tensors are visited in: ``llama_model_loader::weights_map`` sorts them by
  block number (non-block tensors first), then by name (``weight_name_comparer``,
  ``src/llama-model-loader.h``). Counters such as ``i_attention_wv`` depend on it;
* which tensors may change type (``tensor_allows_quantization``): 2-D and 3-D weights
  except norms, routers, positional embeddings, conv1d, RWKV's small matrices …;
* the type for each (``llama_tensor_get_type`` → ``llama_tensor_get_type_impl``): the
  file type's default type, bumped by tensor category, layer, GQA ratio, expert count and
  architecture, then ``tensor_type_fallback`` when the row length does not divide the
  block size;
* whether an importance matrix is required (``tensor_requires_imatrix``);
* the size: ``ggml_row_size(type, ne0) * nrows``, each tensor padded to 32 bytes in the
  file (``GGUF_DEFAULT_ALIGNMENT``).

The source type of a tensor does not change its target type: llama.cpp dequantizes any
quantized tensor to f32 and quantizes it again (``allow_requantize``). It matters only in
two ways: tensors llama.cpp may not quantize keep their source type and bytes, and a
tensor already of the target type is copied as it is (no requantization loss).

Example::

    spec = model_spec(read_model("SmolLM2-135M-Instruct.Q4_1.gguf"))
    q = simulate_quant(spec, "Q4_K_M", header_bytes=1785664)
    q.file_bytes, round(q.bits_per_weight, 2), q.needs_imatrix   # (…, 5.6, False)
    q.spec.weights_bytes          # the estimator's weights, as if the file existed
    [r.file_type.name for r in simulate_all(spec) if isinstance(r, QuantResult)]
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

from app.errors import QuantError
from app.model.ggml import GGML_TYPES, GgmlType
from app.model.ggml import GGMLQuantizationType as _T
from app.model.ggml import LlamaFileType as _F
from app.model.spec import ModelSpec, TensorSpec

__all__ = [
    "FILE_TYPES",
    "FileType",
    "QuantError",
    "QuantFailure",
    "QuantResult",
    "TensorPlan",
    "file_type",
    "simulate_all",
    "simulate_quant",
]

ALIGNMENT: Final = 32
"""``GGUF_DEFAULT_ALIGNMENT``: every tensor's data is padded to it in the output file."""


# --- file types (include/llama.h enum llama_ftype) -----------------------------------


@dataclass(frozen=True, slots=True)
class FileType:
    """A llama.cpp file type: ``name`` as ``llama-quantize`` takes it, ``ftype`` the
    ``LLAMA_FTYPE_*`` value, ``default_type`` the ggml type most tensors get
    (``llama_ftype_get_default_type``)."""

    name: str
    ftype: int
    default_type: GgmlType


def _ft(name: str, ftype: _F, default: int) -> FileType:
    return FileType(name, int(ftype), GGML_TYPES[default])


FILE_TYPES: Final[tuple[FileType, ...]] = (
    _ft("F32", _F.ALL_F32, _T.F32),
    _ft("F16", _F.F16, _T.F16),
    _ft("BF16", _F.BF16, _T.BF16),
    _ft("Q8_0", _F.Q8_0, _T.Q8_0),
    _ft("Q6_K", _F.Q6_K, _T.Q6_K),
    _ft("Q5_1", _F.Q5_1, _T.Q5_1),
    _ft("Q5_K_M", _F.Q5_K_M, _T.Q5_K),
    _ft("Q5_K_S", _F.Q5_K_S, _T.Q5_K),
    _ft("Q5_0", _F.Q5_0, _T.Q5_0),
    _ft("Q4_1", _F.Q4_1, _T.Q4_1),
    _ft("Q4_K_M", _F.Q4_K_M, _T.Q4_K),
    _ft("Q4_K_S", _F.Q4_K_S, _T.Q4_K),
    _ft("Q4_0", _F.Q4_0, _T.Q4_0),
    _ft("IQ4_NL", _F.IQ4_NL, _T.IQ4_NL),
    _ft("IQ4_XS", _F.IQ4_XS, _T.IQ4_XS),
    _ft("MXFP4_MOE", _F.MXFP4_MOE, _T.MXFP4),
    _ft("Q3_K_L", _F.Q3_K_L, _T.Q3_K),
    _ft("Q3_K_M", _F.Q3_K_M, _T.Q3_K),
    _ft("IQ3_M", _F.IQ3_M, _T.IQ3_S),
    _ft("IQ3_S", _F.IQ3_S, _T.IQ3_S),
    _ft("Q3_K_S", _F.Q3_K_S, _T.Q3_K),
    _ft("IQ3_XS", _F.IQ3_XS, _T.IQ3_S),
    _ft("IQ3_XXS", _F.IQ3_XXS, _T.IQ3_XXS),
    _ft("Q2_K", _F.Q2_K, _T.Q2_K),
    _ft("Q2_K_S", _F.Q2_K_S, _T.Q2_K),
    _ft("Q2_0", _F.Q2_0, _T.Q2_0),
    _ft("IQ2_M", _F.IQ2_M, _T.IQ2_S),
    _ft("IQ2_S", _F.IQ2_S, _T.IQ2_XS),
    _ft("IQ2_XS", _F.IQ2_XS, _T.IQ2_XS),
    _ft("IQ2_XXS", _F.IQ2_XXS, _T.IQ2_XXS),
    _ft("TQ2_0", _F.TQ2_0, _T.TQ2_0),
    _ft("IQ1_M", _F.IQ1_M, _T.IQ1_M),
    _ft("TQ1_0", _F.TQ1_0, _T.TQ1_0),
    _ft("IQ1_S", _F.IQ1_S, _T.IQ1_S),
    _ft("Q1_0", _F.Q1_0, _T.Q1_0),
)
"""Every file type ``llama_model_quantize`` accepts here, roughly from big to small.

``LLAMA_FTYPE_MOSTLY_NVFP4`` (39) is in llama.h but ``llama_ftype_get_default_type`` has
no case for it, so llama.cpp refuses it ("invalid output file type"); it is left out."""

_BY_NAME: Final = {ft.name: ft for ft in FILE_TYPES}
# llama-quantize's aliases (tools/quantize/quantize.cpp QUANT_OPTIONS)
_ALIASES: Final = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M", "MXFP4": "MXFP4_MOE"}


def file_type(name: str | FileType) -> FileType:
    """Return the file type called ``name`` (case-insensitive, llama-quantize's aliases too).

    >>> file_type("q4_k").name
    'Q4_K_M'
    """
    if isinstance(name, FileType):
        return name
    key = name.strip().upper()
    key = _ALIASES.get(key, key)
    try:
        return _BY_NAME[key]
    except KeyError:
        known = ", ".join(_BY_NAME)
        raise QuantError(f"unknown quant type {name!r} (known: {known})") from None


# --- results ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorPlan:
    """What happens to one tensor: ``source`` and ``target`` types, ``n_bytes`` after.

    ``quantizable``: llama.cpp may change its type at all (``tensor_allows_quantization``).
    ``fallback``: the target's block did not divide the row length, so a fallback type
    was taken (``tensor_type_fallback``). ``requires_imatrix``: llama.cpp refuses to make
    this tensor without an importance matrix (``tensor_requires_imatrix``).
    """

    name: str
    shape: tuple[int, ...]
    source: GgmlType
    target: GgmlType
    n_bytes: int
    quantizable: bool
    fallback: bool
    requires_imatrix: bool

    @property
    def requantized(self) -> bool:
        """Return whether a quantized tensor is dequantized and quantized again."""
        return self.source.is_quantized and self.source.id != self.target.id


@dataclass(frozen=True, slots=True)
class QuantResult:
    """A model quantized to ``file_type`` (see the module doc).

    ``tensors`` in the order llama.cpp writes them; ``spec`` is the source spec with
    those tensors (same order) and ``file_type`` set. ``tensor_bytes`` is the sum of
    the tensor sizes (= ``llama_model_size``), ``file_bytes`` the file: the header
    (``header_bytes`` as given, padded) plus every tensor padded to 32 bytes.
    ``imatrix`` tells whether the plan assumes an importance matrix was given;
    ``needs_imatrix`` whether llama.cpp requires one for this file type on this model
    (without one it refuses: "this quantization requires an imatrix!").
    """

    file_type: FileType
    spec: ModelSpec
    tensors: tuple[TensorPlan, ...]
    tensor_bytes: int
    file_bytes: int
    imatrix: bool
    needs_imatrix: bool

    @property
    def bits_per_weight(self) -> float:
        """Return bits per weight over all tensors (as ``llama_model_quantize`` logs)."""
        return self.spec.bits_per_weight

    @property
    def n_fallback(self) -> int:
        """Return how many tensors took a fallback type (llama.cpp warns with this count)."""
        return sum(t.fallback for t in self.tensors)

    @property
    def imatrix_tensors(self) -> tuple[str, ...]:
        """Return the tensors that need an importance matrix."""
        return tuple(t.name for t in self.tensors if t.requires_imatrix and t.quantizable)

    @property
    def requantizes(self) -> bool:
        """Return whether an already quantized tensor is quantized again (llama-quantize
        needs ``--allow-requantize``; quality is worse than quantizing from F16)."""
        return any(t.requantized for t in self.tensors)

    def type_counts(self) -> dict[str, int]:
        """Return how many tensors end up in each ggml type."""
        counts: dict[str, int] = {}
        for t in self.tensors:
            counts[t.target.name] = counts.get(t.target.name, 0) + 1
        return counts


@dataclass(frozen=True, slots=True)
class QuantFailure:
    """llama.cpp would fail to make this file type from this model; ``reason`` says why."""

    file_type: FileType
    reason: str


# --- the rules (src/llama-quant.cpp) --------------------------------------------------


class _Cat(Enum):
    """``enum class tensor_category``."""

    TOKEN_EMBD = 0
    ATTENTION_Q = 1
    ATTENTION_V = 2
    ATTENTION_K = 3
    ATTENTION_QKV = 4
    ATTENTION_KV_B = 5
    ATTENTION_OUTPUT = 6
    FFN_UP = 7
    FFN_GATE = 8
    FFN_DOWN = 9
    OUTPUT = 10
    OTHER = 11


_ATTN_V_LIKE: Final = frozenset({_Cat.ATTENTION_V, _Cat.ATTENTION_QKV, _Cat.ATTENTION_KV_B})
"""``category_is_attn_v``."""


def _category(name: str) -> _Cat:
    """``tensor_get_category``: substring tests, in this order."""
    if name == "output.weight":
        return _Cat.OUTPUT
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return _Cat.TOKEN_EMBD
    for needle, cat in (
        ("attn_qkv.weight", _Cat.ATTENTION_QKV),
        ("attn_kv_b.weight", _Cat.ATTENTION_KV_B),
        ("attn_v.weight", _Cat.ATTENTION_V),
        ("attn_k.weight", _Cat.ATTENTION_K),
        ("attn_q.weight", _Cat.ATTENTION_Q),
        ("attn_output.weight", _Cat.ATTENTION_OUTPUT),
        ("ffn_up", _Cat.FFN_UP),
        ("ffn_gate", _Cat.FFN_GATE),
        ("ffn_down", _Cat.FFN_DOWN),
    ):
        if needle in name:
            return cat
    return _Cat.OTHER


def _n_dims(shape: Sequence[int]) -> int:
    """``ggml_n_dims``: trailing dimensions of size 1 do not count."""
    for i in range(len(shape) - 1, 0, -1):
        if shape[i] > 1:
            return i + 1
    return 1


_NEVER_QUANTIZED: Final = (
    "_norm.weight",
    "ffn_gate_inp.weight",
    "ffn_gate_tid2eid.weight",
    "altup",
    "laurel",
    "per_layer_model_proj",
    "ssm_conv1d",
    "shortconv.conv.weight",
    "indexer.k_proj.weight",
    "indexer.q_proj.weight",
    "time_mix_first.weight",
    "time_mix_w0.weight",
    "time_mix_w1.weight",
    "time_mix_w2.weight",
    "time_mix_v0.weight",
    "time_mix_v1.weight",
    "time_mix_v2.weight",
    "time_mix_a0.weight",
    "time_mix_a1.weight",
    "time_mix_a2.weight",
    "time_mix_g1.weight",
    "time_mix_g2.weight",
    "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight",
    "time_mix_lerp_fused.weight",
    "attn_rel_b.weight",
    ".position_embd",
    "sam.pos_embd",
    "sam.neck.",
    "sam.net_",
    ".rel_pos",
    ".patch_embd",
    ".patch_merger",
    "a.rvq.codebook",
    "mm.a.code_embd",
)
"""Substrings that keep a tensor's type (``tensor_allows_quantization``)."""

_NEVER_QUANTIZED_GLM5_NEXT: Final = (
    "hc_",
    "indexer.attn_q_b",
    "indexer.attn_k",
    "indexer.proj",
    "indexer_compressor_gate",
    "indexer_compressor_ape",
    "ssm_f_a.weight",
    "ssm_f_b.weight",
    "ssm_g_a.weight",
    "ssm_g_b.weight",
    "ssm_beta.weight",
    "attn_kv_a_mqa.weight",
    "attn_k_b.weight",
    "attn_v_b.weight",
)


def allows_quantization(arch: str, name: str, shape: Sequence[int]) -> bool:
    """Return whether llama.cpp may change this tensor's type (``tensor_allows_quantization``
    with the default params: output.weight is quantized, nothing is copy-only)."""
    if _n_dims(shape) < 2:
        return False
    if not name.endswith("weight"):
        return False
    # LLM_TN(arch)(LLM_TENSOR_POS_EMBD / TOKEN_TYPES, "weight") is the same for every arch
    if name in ("position_embd.weight", "token_types.weight"):
        return False
    if any(s in name for s in _NEVER_QUANTIZED):
        return False
    return not (arch == "glm5-next" and any(s in name for s in _NEVER_QUANTIZED_GLM5_NEXT))


_BLOCK_PREFIX: Final = re.compile(r"blk\.([+-]?\d+)")


def _sscanf_layer(name: str) -> int | None:
    """``sscanf(name, "blk.%d.", &il)``: the layer number, or None when it does not match."""
    m = _BLOCK_PREFIX.match(name)
    return int(m.group(1)) if m else None


def _load_order(tensors: Sequence[TensorSpec]) -> list[TensorSpec]:
    """Sort as ``weights_map`` does (``weight_name_comparer``): block, then name bytes."""

    def key(t: TensorSpec) -> tuple[int, bytes]:
        layer = _sscanf_layer(t.name)
        return (-1 if layer is None else layer, t.name.encode())

    return sorted(tensors, key=key)


def _is_70b(spec: ModelSpec) -> bool:
    """``model.type == LLM_TYPE_70B`` as ``load_arch_hparams`` sets it (src/models/*.cpp)."""
    n_layer = spec.n_layer
    head = spec.n_head[0] if spec.n_head else 0
    head_kv = spec.n_head_kv[0] if spec.n_head_kv else 0
    if spec.arch == "llama":
        return spec.n_expert != 8 and n_layer == 80 and head != head_kv
    if spec.arch in ("qwen2", "deci", "olmo"):
        return n_layer == 80
    return spec.arch == "jais2" and n_layer == 68


def _use_more_bits(i_layer: int, n_layers: int) -> bool:
    # C integer division and remainder; the first test catches the negative case
    return (
        i_layer < n_layers // 8
        or i_layer >= 7 * n_layers // 8
        or (i_layer - n_layers // 8) % 3 == 2
    )


class _State:
    """``quantize_state_impl``: counters shared by all tensors of one quantization."""

    def __init__(self, spec: ModelSpec, ordered: Sequence[TensorSpec], imatrix: bool) -> None:
        self.arch = spec.arch
        self.n_expert = spec.n_expert
        head = spec.n_head[0] if spec.n_head else 0
        head_kv = spec.n_head_kv[0] if spec.n_head_kv else 0
        self.n_gqa = head // head_kv if head_kv else 0  # llama_hparams::n_gqa(0)
        self.is_70b = _is_70b(spec)
        self.has_imatrix = imatrix
        # init_quantize_state_counters
        cats = [_category(t.name) for t in ordered]
        self.n_attention_wv = sum(c in _ATTN_V_LIKE for c in cats)
        self.has_tied_embeddings = _Cat.OUTPUT not in cats
        self.n_ffn_down = self.n_ffn_gate = self.n_ffn_up = spec.n_layer_all
        self.i_attention_wv = 0
        self.i_ffn_down = 0
        self.i_ffn_gate = 0
        self.i_ffn_up = 0

    def layer_info(self, counter: int, n_layer: int, name: str) -> tuple[int, int]:
        """``layer_info``: the counter, or for MoE models the layer parsed from the name."""
        if max(1, self.n_expert) > 1:
            il = _sscanf_layer(name)
            if il is None:
                raise QuantError(f"Failed to determine layer for tensor {name}")
            if not 0 <= il < n_layer:
                raise QuantError(f"Bad layer {il} for tensor {name}. Must be in [0, {n_layer})")
            return il, n_layer
        return counter, n_layer


_IQ2_GROUP: Final = frozenset({_F.IQ2_XXS, _F.IQ2_XS, _F.IQ1_S, _F.IQ2_S, _F.IQ2_M, _F.IQ1_M})


def _type_impl(qs: _State, new_type: int, t: TensorSpec, ftype: _F, cat: _Cat) -> int:
    """``llama_tensor_get_type_impl``: the file type's mixture rules (default params)."""
    name = t.name
    arch = qs.arch
    n_expert = qs.n_expert
    F = _F
    T = _T

    # glm5-next: these stay at Q8_0 or better
    glm5_kept = ("attn_q_a", "attn_q_b", "nextn.eh_proj")
    if (
        arch == "glm5-next"
        and any(s in name for s in glm5_kept)
        and new_type not in (T.F32, T.BF16, T.F16)
    ):
        return T.Q8_0

    if cat is _Cat.OUTPUT or (qs.has_tied_embeddings and cat is _Cat.TOKEN_EMBD):
        # tied embeddings are quantized like the output tensor
        nx = t.shape[0]
        qk_k = GGML_TYPES[new_type].block_size
        if ftype is F.MXFP4_MOE or arch == "falcon" or nx % qk_k != 0:
            new_type = T.Q8_0
        elif ftype in (F.IQ2_XXS, F.IQ2_XS, F.IQ3_XXS, F.IQ1_S, F.IQ2_S, F.IQ2_M, F.IQ1_M):
            new_type = T.Q5_K
        elif new_type != T.Q8_0:
            new_type = T.Q6_K
    elif ftype is F.MXFP4_MOE:
        # expert tensors (3-D) -> MXFP4, everything else -> Q8_0
        is_bailing_expert = arch == "bailingmoe3" and cat in (
            _Cat.FFN_UP,
            _Cat.FFN_GATE,
            _Cat.FFN_DOWN,
        )
        ne2 = t.shape[2] if len(t.shape) > 2 else 1
        if ne2 > 1 and (arch != "bailingmoe3" or is_bailing_expert):
            new_type = T.MXFP4
        else:
            new_type = T.Q8_0
    elif cat is _Cat.TOKEN_EMBD:
        if ftype in (F.IQ2_XXS, F.IQ2_XS, F.IQ1_S, F.IQ1_M):
            new_type = T.Q2_K
        elif ftype in (F.IQ2_S, F.IQ2_M, F.IQ3_XXS):
            new_type = T.IQ3_S
        elif ftype in (F.TQ1_0, F.TQ2_0, F.Q2_0):
            new_type = T.Q4_K
    elif ftype in _IQ2_GROUP:
        iq2_sm = ftype in (F.IQ2_S, F.IQ2_M)
        if cat in _ATTN_V_LIKE:
            if qs.n_gqa >= 4 or n_expert >= 4:
                new_type = T.Q4_K
            else:
                new_type = T.IQ3_S if iq2_sm else T.Q2_K
            qs.i_attention_wv += 1
        elif n_expert == 8 and cat is _Cat.ATTENTION_K:
            new_type = T.Q4_K
        elif cat is _Cat.FFN_DOWN:
            # the raw counter here, not layer_info
            if qs.i_ffn_down < qs.n_ffn_down // 8:
                new_type = T.IQ3_S if iq2_sm else T.Q2_K
            qs.i_ffn_down += 1
        elif cat is _Cat.ATTENTION_OUTPUT:
            if n_expert == 8:
                new_type = T.Q5_K
            elif ftype in (F.IQ1_S, F.IQ1_M):
                new_type = T.IQ2_XXS
            elif iq2_sm:
                new_type = T.IQ3_S
    elif cat in _ATTN_V_LIKE:
        if ftype is F.Q2_K:
            new_type = T.Q4_K if qs.n_gqa >= 4 else T.Q3_K
        elif ftype is F.Q2_K_S and qs.n_gqa >= 4:
            new_type = T.Q4_K
        elif ftype is F.IQ3_XXS:
            if qs.n_gqa >= 4:
                new_type = T.Q4_K
            else:
                new_type = T.IQ3_XXS if qs.has_imatrix else T.IQ3_S
        elif (ftype in (F.IQ3_XS, F.IQ3_S) and qs.n_gqa >= 4) or ftype is F.IQ3_M:
            new_type = T.Q4_K
        elif ftype is F.Q3_K_M:
            new_type = T.Q5_K if qs.i_attention_wv < 2 else T.Q4_K
        elif ftype is F.Q3_K_L or (ftype in (F.IQ4_NL, F.IQ4_XS) and qs.n_gqa >= 4):
            new_type = T.Q5_K
        elif ftype in (F.Q4_K_M, F.Q5_K_M) and _use_more_bits(qs.i_attention_wv, qs.n_attention_wv):
            new_type = T.Q6_K
        elif ftype is F.Q4_K_S and qs.i_attention_wv < 4:
            new_type = T.Q5_K
        if qs.is_70b and new_type in (T.Q3_K, T.Q4_K):
            # 8 heads share attn_v in the 70B: more bits cost little
            new_type = T.Q5_K
        if n_expert == 8:
            new_type = T.Q8_0
        qs.i_attention_wv += 1
    elif cat is _Cat.ATTENTION_K:
        if n_expert == 8:
            new_type = T.Q8_0
        elif ftype is F.IQ3_XS:
            new_type = T.IQ3_XXS
        elif ftype is F.IQ3_XXS:
            new_type = T.IQ2_S
    elif cat is _Cat.ATTENTION_Q:
        if ftype is F.IQ3_XS:
            new_type = T.IQ3_XXS
        elif ftype is F.IQ3_XXS:
            new_type = T.IQ2_S
    elif cat is _Cat.FFN_DOWN:
        i_layer, n_layer = qs.layer_info(qs.i_ffn_down, qs.n_ffn_down, name)
        if ftype is F.Q2_K:
            new_type = T.Q3_K
        elif ftype is F.Q2_K_S:
            if i_layer < n_layer // 8:
                new_type = T.Q4_K
        elif ftype is F.IQ3_XXS and not qs.has_imatrix:
            new_type = T.Q4_K if i_layer < n_layer // 8 else T.Q3_K
        elif ftype is F.Q3_K_M:
            if i_layer < n_layer // 16:
                new_type = T.Q5_K
            elif arch != "falcon" or _use_more_bits(i_layer, n_layer):
                new_type = T.Q4_K
            else:
                new_type = T.Q3_K
        elif ftype is F.IQ3_M and (
            i_layer < n_layer // 8 or (n_expert == 8 and _use_more_bits(i_layer, n_layer))
        ):
            new_type = T.Q4_K
        elif ftype is F.Q3_K_L:
            new_type = T.Q4_K if arch == "falcon" else T.Q5_K
        elif ftype is F.Q4_K_M:
            if arch == "falcon":
                if i_layer < n_layer // 16:
                    new_type = T.Q6_K
                elif _use_more_bits(i_layer, n_layer):
                    new_type = T.Q5_K
                else:
                    new_type = T.Q4_K
            elif _use_more_bits(i_layer, n_layer):
                new_type = T.Q6_K
        elif i_layer < n_layer // 8 and ftype in (F.IQ4_NL, F.IQ4_XS) and not qs.has_imatrix:
            new_type = T.Q5_K
        elif ftype is F.Q5_K_M and _use_more_bits(i_layer, n_layer):
            new_type = T.Q6_K
        elif ftype is F.Q4_K_S and arch != "falcon" and i_layer < n_layer // 8:
            new_type = T.Q5_K
        elif ftype in (F.Q4_0, F.Q5_0) and qs.has_imatrix and i_layer < n_layer // 8:
            new_type = T.Q4_1 if ftype is F.Q4_0 else T.Q5_1
        qs.i_ffn_down += 1
    elif cat is _Cat.ATTENTION_OUTPUT:
        if arch != "falcon":
            if n_expert == 8:
                if ftype in (
                    F.Q2_K,
                    F.IQ3_XS,
                    F.IQ3_XXS,
                    F.Q3_K_S,
                    F.Q3_K_M,
                    F.IQ4_NL,
                    F.Q4_K_S,
                    F.Q4_K_M,
                    F.IQ3_S,
                    F.IQ3_M,
                    F.IQ4_XS,
                ):
                    new_type = T.Q5_K
            elif ftype is F.Q2_K:
                new_type = T.Q3_K
            elif ftype is F.IQ3_XXS:
                new_type = T.IQ3_S
            elif ftype is F.Q3_K_M:
                new_type = T.Q4_K
            elif ftype is F.Q3_K_L:
                new_type = T.Q5_K
            elif ftype is F.IQ3_M:
                new_type = T.Q4_K
        elif ftype is F.Q3_K_L:
            new_type = T.Q4_K
    elif cat is _Cat.ATTENTION_QKV:
        if ftype in (F.Q3_K_M, F.Q3_K_L, F.IQ3_M):
            new_type = T.Q4_K
        elif ftype is F.Q4_K_M:
            new_type = T.Q5_K
        elif ftype is F.Q5_K_M:
            new_type = T.Q6_K
    elif cat is _Cat.FFN_GATE:
        i_layer, n_layer = qs.layer_info(qs.i_ffn_gate, qs.n_ffn_gate, name)
        if ftype is F.IQ3_XS and n_layer // 8 <= i_layer < 7 * n_layer // 8:
            new_type = T.IQ3_XXS
        qs.i_ffn_gate += 1
    elif cat is _Cat.FFN_UP:
        i_layer, n_layer = qs.layer_info(qs.i_ffn_up, qs.n_ffn_up, name)
        if ftype is F.IQ3_XS and n_layer // 8 <= i_layer < 7 * n_layer // 8:
            new_type = T.IQ3_XXS
        qs.i_ffn_up += 1
    return new_type


# tensor_type_fallback: a 256-block type demotes to a 32-block one
_FALLBACK: Final[dict[int, int]] = {
    _T.IQ1_S: _T.IQ4_NL,
    _T.IQ1_M: _T.IQ4_NL,
    _T.IQ2_XXS: _T.IQ4_NL,
    _T.IQ2_XS: _T.IQ4_NL,
    _T.IQ2_S: _T.IQ4_NL,
    _T.IQ3_XXS: _T.IQ4_NL,
    _T.IQ3_S: _T.IQ4_NL,
    _T.IQ4_XS: _T.IQ4_NL,
    _T.Q2_0: _T.Q4_0,
    _T.Q2_K: _T.Q4_0,
    _T.Q3_K: _T.Q4_0,
    _T.TQ1_0: _T.Q4_0,
    _T.TQ2_0: _T.Q4_0,
    _T.Q4_K: _T.Q5_0,
    _T.Q5_K: _T.Q5_1,
    _T.Q6_K: _T.Q8_0,
}


def _fallback(t: TensorSpec, target: int) -> tuple[int, bool]:
    """``tensor_type_fallback``: (type, whether it fell back) for the row length ``ne0``."""
    ncols = t.shape[0]
    block = GGML_TYPES[target].block_size
    if ncols % block == 0:
        return target, False
    if target in _FALLBACK:
        new = _FALLBACK[target]
    elif block <= 32:
        new = target  # no smaller block: F16 below
    else:
        raise QuantError(
            f"no tensor type fallback is defined for type {GGML_TYPES[target].name.lower()} "
            f"({t.name}: {ncols} columns)"
        )
    if ncols % GGML_TYPES[new].block_size != 0:
        new = _T.F16  # "must use F16 due to unusual shape"
    return new, True


def _requires_imatrix(name: str, target: int, ftype: _F) -> bool:
    """``tensor_requires_imatrix``."""
    if name in ("token_embd.weight", "per_layer_token_embd.weight", "output.weight"):
        return False
    if target in (_T.IQ3_XXS, _T.IQ2_XXS, _T.IQ2_XS, _T.IQ2_S, _T.IQ1_M, _T.IQ1_S):
        return True
    # k-quants need none, except the Q2_K tensors of a Q2_K_S file
    return target == _T.Q2_K and ftype is _F.Q2_K_S


def _n_bytes(t: TensorSpec, target: GgmlType) -> int:
    nrows = 1
    for d in t.shape[1:]:
        nrows *= d
    return nrows * target.row_bytes(t.shape[0])


def _pad(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def simulate_quant(
    spec: ModelSpec,
    quant: str | FileType,
    *,
    imatrix: bool = False,
    header_bytes: int = 0,
) -> QuantResult:
    """Return what ``llama_model_quantize`` makes of ``spec`` at file type ``quant``.

    Default params (``llama_model_quantize_default_params``) with requantization allowed;
    ``imatrix`` says whether an importance matrix is given (it changes a few rules: IQ3_XXS
    attn_v, the ffn_down of IQ3_XXS/IQ4_NL/IQ4_XS/Q4_0/Q5_0). ``header_bytes`` is the
    source file's header size (its data offset); llama.cpp copies the metadata, so the
    new file's header is the same size when ``general.file_type`` and
    ``general.quantization_version`` were there already (else ~90 bytes more).

    Raises :class:`QuantError` when llama.cpp would fail for a reason other than a
    missing importance matrix (a row length no fallback type fits, a MoE tensor outside
    the blocks). A missing importance matrix is not an error here: see
    :attr:`QuantResult.needs_imatrix`.
    """
    assert header_bytes >= 0, f"header_bytes must be >= 0, got {header_bytes}"
    ft = file_type(quant)
    ftype = _F(ft.ftype)
    default = ft.default_type
    ordered = _load_order(spec.tensors)
    qs = _State(spec, ordered, imatrix)
    plans: list[TensorPlan] = []
    new_tensors: list[TensorSpec] = []
    for t in ordered:
        source = GGML_TYPES.get(t.ggml_type)
        if source is None:
            raise QuantError(f"{t.name}: unknown ggml type {t.ggml_type}")
        quantizable = allows_quantization(spec.arch, t.name, t.shape)
        fell_back = False
        if not quantizable:
            target = source
        elif default.is_quantized:
            # llama_tensor_get_type: mixture rules, then the fallback
            cat = _category(t.name)
            chosen = _type_impl(qs, default.id, t, ftype, cat)
            target_id, fell_back = _fallback(t, chosen)
            target = GGML_TYPES[target_id]
        else:
            target = default  # F32/F16/BF16: every quantizable tensor, no exceptions
        n_bytes = t.n_bytes if target.id == source.id else _n_bytes(t, target)
        plans.append(
            TensorPlan(
                name=t.name,
                shape=t.shape,
                source=source,
                target=target,
                n_bytes=n_bytes,
                quantizable=quantizable,
                fallback=fell_back,
                requires_imatrix=_requires_imatrix(t.name, target.id, ftype),
            )
        )
        new_tensors.append(
            dataclasses.replace(t, ggml_type=target.id, type_name=target.name, n_bytes=n_bytes)
        )
    tensor_bytes = sum(p.n_bytes for p in plans)
    note = f"simulated {ft.name} quantization of {spec.path}"
    new_spec = dataclasses.replace(
        spec, tensors=tuple(new_tensors), file_type=ft.ftype, notes=(*spec.notes, note)
    )
    return QuantResult(
        file_type=ft,
        spec=new_spec,
        tensors=tuple(plans),
        tensor_bytes=tensor_bytes,
        file_bytes=_pad(header_bytes) + sum(_pad(p.n_bytes) for p in plans),
        imatrix=imatrix,
        needs_imatrix=any(p.requires_imatrix and p.quantizable for p in plans),
    )


def simulate_all(
    spec: ModelSpec, *, header_bytes: int = 0
) -> tuple[QuantResult | QuantFailure, ...]:
    """Return every file type of :data:`FILE_TYPES` for ``spec``, in that order.

    A file type that needs an importance matrix is simulated with one (that is how such
    files are made) and has ``needs_imatrix`` set; one llama.cpp cannot make at all is a
    :class:`QuantFailure`.
    """
    out: list[QuantResult | QuantFailure] = []
    for ft in FILE_TYPES:
        try:
            result = simulate_quant(spec, ft, header_bytes=header_bytes)
            if result.needs_imatrix:
                with_imatrix = simulate_quant(spec, ft, imatrix=True, header_bytes=header_bytes)
                result = dataclasses.replace(with_imatrix, needs_imatrix=True)
        except QuantError as err:
            out.append(QuantFailure(ft, str(err)))
        else:
            out.append(result)
    return tuple(out)
