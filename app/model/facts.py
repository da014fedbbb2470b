"""What a model is, in the numbers a person reads: ``ggtune inspect`` and the model card.

:func:`describe_model` turns a :class:`~app.model.spec.ModelSpec` into a
:class:`ModelDescription` (frozen, typed); ``ggtune inspect --json`` prints its
:meth:`~ModelDescription.to_dict` (the key names are a stable interface) and the desktop's
model card words the same fields, so both faces say the same about a model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from app.model.ggml import GGML_TYPES
from app.model.spec import ModelSpec

KV_TYPES_SHOWN: Final = ("f16", "q8_0", "q4_0")
"""The cache types whose bytes per token a description gives."""

_BY_NAME: Final = {t.name.lower(): t for t in GGML_TYPES.values()}


@dataclass(frozen=True, slots=True)
class QuantShare:
    """The tensors of one ggml type in a model: how many, their bytes and parameters."""

    tensors: int
    bytes: int
    params: int


@dataclass(frozen=True, slots=True)
class Experts:
    """A mixture of experts: ``used`` of ``total`` per token, ``shared`` always on."""

    total: int
    used: int
    shared: int


@dataclass(frozen=True, slots=True)
class ModelDescription:
    """A model's facts as ``ggtune inspect`` gives them.

    ``quantization`` maps each ggml type name to its :class:`QuantShare`;
    ``kv_bytes_per_token`` maps a cache type (:data:`KV_TYPES_SHOWN`) to the K+V bytes one
    token adds over all attention layers, before any window (None where the KV rule of the
    architecture is unknown; a type whose blocks do not fit the head size is left out);
    ``layers_by_kind`` counts the layers by attention kind (``full attention``,
    ``sliding window``, ``recurrent``, ``no KV``, ``NextN/MTP``); ``bits_per_weight`` is
    rounded to 3 decimals.
    """

    path: str
    name: str | None
    architecture: str
    parameters: int
    weights_bytes: int
    bits_per_weight: float
    quantization: Mapping[str, QuantShare]
    context_length: int
    n_layer: int
    n_embd: int
    n_vocab: int
    n_head: int
    n_head_kv: int
    head_size_k: int
    head_size_v: int
    sliding_window: int | None
    experts: Experts | None
    mla: bool
    kv_lora_rank: int | None
    rope_dimensions: int
    tied_embeddings: bool
    memory_kind: str
    kv_bytes_per_token: Mapping[str, int] | None
    layers_by_kind: Mapping[str, int]
    notes: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Return the description as plain data (what ``ggtune inspect --json`` prints)."""
        out = asdict(self)
        out["notes"] = list(self.notes)
        return out


def kv_bytes_per_token(spec: ModelSpec, cache_type: str, *, sliding: bool | None = None) -> int:
    """Return K+V bytes one token adds to the cache over all attention layers (no window).

    ``sliding`` False counts only the layers without a sliding window (those whose cache
    grows with the context), True only the sliding-window layers (whose cache holds the
    last ``n_swa`` tokens and stops growing there); None every attention layer.

    Raises ValueError when a layer's K or V width is not a whole number of
    ``cache_type``'s blocks (llama.cpp refuses that cache type for the model).
    """
    ggml = _BY_NAME[cache_type.lower()]
    total = 0
    for il in range(spec.n_layer):
        if spec.is_recurrent[il] or spec.memory_kind in ("none", "unknown", "recurrent"):
            continue
        if sliding is not None and spec.is_swa[il] != sliding:
            continue
        widths = [spec.n_embd_k_gqa(il)]
        if not spec.is_mla:  # MLA caches K alone
            widths.append(spec.n_embd_v_gqa(il))
        for width in widths:
            if width % ggml.block_size:
                raise ValueError(f"{width} elements do not fill {cache_type} blocks")
            total += ggml.row_bytes(width)
    return total


def layers_by_kind(spec: ModelSpec) -> dict[str, int]:
    """Count ``spec``'s layers by kind of attention (see :class:`ModelDescription`)."""
    kinds: Counter[str] = Counter()
    for il in range(spec.n_layer):
        if spec.is_recurrent[il]:
            kinds["recurrent"] += 1
        elif spec.n_head_kv[il] == 0 and spec.memory_kind not in ("recurrent",):
            kinds["no KV"] += 1
        elif spec.is_swa[il]:
            kinds["sliding window"] += 1
        else:
            kinds["full attention"] += 1
    if spec.n_layer_nextn:
        kinds["NextN/MTP"] = spec.n_layer_nextn
    return dict(kinds)


def describe_model(spec: ModelSpec) -> ModelDescription:
    """Return the facts of ``spec`` that ``ggtune inspect`` and the model card show."""
    counts: dict[str, list[int]] = {}
    for t in spec.tensors:
        q = counts.setdefault(t.type_name, [0, 0, 0])
        q[0] += 1
        q[1] += t.n_bytes
        q[2] += t.n_elements
    kv_per_token: dict[str, int] | None = None
    if spec.kv_rule_known:
        kv_per_token = {}
        for ct in KV_TYPES_SHOWN:
            try:
                kv_per_token[ct] = kv_bytes_per_token(spec, ct)
            except ValueError:
                continue  # head size not a multiple of this type's block
    return ModelDescription(
        path=spec.path,
        name=spec.name,
        architecture=spec.arch,
        parameters=spec.n_params,
        weights_bytes=spec.weights_bytes,
        bits_per_weight=round(spec.bits_per_weight, 3),
        quantization={name: QuantShare(*q) for name, q in counts.items()},
        context_length=spec.n_ctx_train,
        n_layer=spec.n_layer,
        n_embd=spec.n_embd,
        n_vocab=spec.n_vocab,
        n_head=max(spec.n_head) if spec.n_head else 0,
        n_head_kv=max(spec.n_head_kv) if spec.n_head_kv else 0,
        head_size_k=spec.head_k_full,
        head_size_v=spec.head_v_full,
        sliding_window=spec.n_swa or None,
        experts=Experts(spec.n_expert, spec.n_expert_used, spec.n_expert_shared)
        if spec.n_expert
        else None,
        mla=spec.is_mla,
        kv_lora_rank=spec.kv_lora_rank or None,
        rope_dimensions=spec.n_rot,
        tied_embeddings=spec.tied_embeddings,
        memory_kind=spec.memory_kind,
        kv_bytes_per_token=kv_per_token,
        layers_by_kind=layers_by_kind(spec),
        notes=tuple(spec.notes),
    )


def gpu_layers_text(n_gpu_layers: int, n_layer: int) -> str:
    """Return llama.cpp's ``-ngl`` count in the layers the model card and the verdict
    count: ``n_layer`` repeating layers, and the output layer, which ``-ngl`` counts first
    (``src/llama-model.cpp``: the layers from ``n_layer + 1 - ngl`` on go to the GPU, the
    output layer being number ``n_layer``).

    >>> gpu_layers_text(63, 62), gpu_layers_text(48, 62), gpu_layers_text(1, 62)
    ('all 62 layers + output', '47 of 62 layers + output', 'the output layer only')
    >>> gpu_layers_text(0, 18), gpu_layers_text(-1, 18)
    ('none (all 18 layers on the CPU)', 'all 18 layers + output')
    """
    if n_gpu_layers < 0 or n_gpu_layers > n_layer:
        return f"all {n_layer} layers + output"
    if n_gpu_layers == 0:
        return f"none (all {n_layer} layers on the CPU)"
    if n_gpu_layers == 1:
        return "the output layer only"
    return f"{n_gpu_layers - 1} of {n_layer} layers + output"


def offloaded_text(offloaded: tuple[int, int] | None, n_layer: int, has_gpu: bool = True) -> str:
    """Return llama.cpp's own ``load_tensors: offloaded N/M layers to GPU`` count in the
    words of :func:`gpu_layers_text` (the model card's and the slider's layers).

    ``offloaded`` is ``(N, M)`` from that line; M is ``n_layer + 1`` because llama.cpp
    counts the output layer as one (``src/llama-model.cpp``, ``load_tensors``:
    ``max_offloadable_layers = n_layer_all + 1``), so "0/19" is an 18-layer model with
    nothing on a GPU. The line is printed whenever the build supports offload
    (``llama_supports_gpu_offload()``: a GPU or the RPC backend compiled in) and N is the
    ``-ngl`` asked for, not what was placed: without a GPU device (``has_gpu`` False)
    ``act_gpu_layers = devices.empty() ? 0 : …`` puts every layer on the CPU while the log
    still says "offloaded 19/19". That, and a build without offload (no line, ``None``),
    is said as the GPU-layers slider says it on a machine without a GPU.

    >>> offloaded_text((37, 37), 36), offloaded_text((0, 19), 18)
    ('GPU layers: all 36 layers + output', 'GPU layers: none (all 18 layers on the CPU)')
    >>> offloaded_text((16, 63), 62), offloaded_text(None, 18)
    ('GPU layers: 15 of 62 layers + output', 'no GPU: all 18 layers on the CPU')
    >>> offloaded_text((19, 19), 18, has_gpu=False)
    'no GPU: all 18 layers on the CPU'
    """
    if offloaded is None or not has_gpu:
        return f"no GPU: all {n_layer} layers on the CPU"
    on, of = offloaded
    return "GPU layers: " + gpu_layers_text(on, of - 1)
