"""Where every byte goes: weights, KV cache, recurrent state and buffers, per device.

:func:`estimate` is a pure function of a :class:`~app.model.spec.ModelSpec`, the run
:class:`~app.settings.Settings` and the :class:`~app.hardware.devices.Hardware`. It follows the
llama.cpp vendored in the pinned llama-cpp-python (commit in docs/engine.md); each rule cites
the source file it comes from. Weights, KV cache and recurrent state are exact; compute
buffers come from a model of llama.cpp's worst-case graph reservation, checked against the
engine in tests/ (docs/benchmarks.md lists the residual error).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Final, Literal, TypeVar

from app.errors import SettingsError
from app.hardware.devices import Device, DeviceKind, Hardware
from app.model.arch_table import COMPUTE_CHECKED_ARCHS, KNOWN_COMPUTE_ERRORS
from app.model.ggml import GGML_QUANT_SIZES, GGMLQuantizationType
from app.model.spec import KvStatus, ModelSpec, TensorRole, TensorSpec
from app.predict.graph.compute import LOCK as GRAPH_LOCK
from app.predict.graph.compute import (
    GraphRequest,
    caches_of,
    compute_buffers,
    graph_max_nodes,
    graph_tensors,
    graph_tensors_bound,
    has_graph,
    hash_size,
)
from app.settings import CacheType, Settings

_T = TypeVar("_T")

PAD_CELLS: Final = 256
"""``cparams.n_ctx`` and the SWA cache are padded to 256 cells (``llama-context.cpp``)."""

_CACHE_GGML: Final[dict[CacheType, GGMLQuantizationType]] = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "bf16": GGMLQuantizationType.BF16,
    "q8_0": GGMLQuantizationType.Q8_0,
    "q4_0": GGMLQuantizationType.Q4_0,
    "q4_1": GGMLQuantizationType.Q4_1,
    "q5_0": GGMLQuantizationType.Q5_0,
    "q5_1": GGMLQuantizationType.Q5_1,
    "iq4_nl": GGMLQuantizationType.IQ4_NL,
}

# ggml-cpu/repack.cpp ggml_repack_get_optimal_repack_type: with AVX2 these weight types are
# repacked (interleaved 8 rows) into a CPU_REPACK buffer when ne1 % 8 == 0.
_REPACK_AVX2: Final = frozenset(
    {
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_K,
        GGMLQuantizationType.IQ4_NL,
        GGMLQuantizationType.MXFP4,
    }
)
REPACK_NOTE_BYTES: Final = 256 * 2**20
"""Repacked weights counted twice (mmap on) from this size on get a note in the estimate."""
_REPACK_AVX512_EXTRA: Final = frozenset({GGMLQuantizationType.Q2_K})

# ggml-cpu/amx/amx.cpp: on a CPU with AMX-INT8 and AVX512-VNNI the first extra buffer type
# is "AMX" (ggml_backend_cpu_get_extra_buffer_types puts it before CPU_REPACK). Its
# supports_op takes a contiguous MUL_MAT weight of these types whose rows (ne0) are a
# multiple of the alignment here and whose row count (ne1) is a multiple of 32 (TILE_N * 2);
# qtype_has_amx_kernels (amx/common.h) lists the quant types it packs, F16 is copied as is.
_AMX_ALIGNMENT: Final = {
    GGMLQuantizationType.Q4_0: 32,
    GGMLQuantizationType.Q4_1: 32,
    GGMLQuantizationType.Q8_0: 32,
    GGMLQuantizationType.Q4_K: 256,
    GGMLQuantizationType.Q5_K: 256,
    GGMLQuantizationType.Q6_K: 256,
    GGMLQuantizationType.IQ4_XS: 256,
    GGMLQuantizationType.F16: 16,
}
# amx/mmq.cpp get_row_size: bytes the packed layout adds per block (Q8_0's int32
# compensation, the K-quants' unpacked scales, IQ4_XS's scales); the rest are the same size
_AMX_EXTRA_PER_BLOCK: Final = {
    GGMLQuantizationType.Q8_0: 4,
    GGMLQuantizationType.Q4_K: 4,
    GGMLQuantizationType.Q5_K: 4,
    GGMLQuantizationType.IQ4_XS: 2,
}
_AMX_PACKED: Final = frozenset(t for t in _AMX_ALIGNMENT if t != GGMLQuantizationType.F16)
"""The types the AMX buffer converts (F16 is copied as is and runs without the AMX kernels)."""
AMX_CPU_FLAGS: Final = ("amx_int8", "avx512_vnni")
"""The CPU flags (``/proc/cpuinfo`` names) with which llama.cpp's CPU backend has its AMX
buffer (``__AMX_INT8__ && __AVX512VNNI__`` in a native build)."""
EXTRA_WEIGHT_BUFFERS: Final = ("AMX", "CPU_REPACK")
"""llama.cpp's CPU buffers that hold a converted copy of weights (the estimate's *other*)."""
_REPACK_NEON_I8MM: Final = frozenset(
    {
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_K,
        GGMLQuantizationType.Q5_K,
        GGMLQuantizationType.Q6_K,
        GGMLQuantizationType.IQ4_NL,
        GGMLQuantizationType.MXFP4,
        GGMLQuantizationType.Q8_0,
    }
)


def row_bytes(cache_type: CacheType, n_elements: int) -> int:
    """Return ``ggml_row_size(type, n)``: bytes of one row of ``n_elements`` of ``cache_type``."""
    block, size = GGML_QUANT_SIZES[_CACHE_GGML[cache_type]]
    assert n_elements % block == 0, f"{n_elements} elements do not fill {cache_type} blocks"
    return n_elements // block * size


def pad(value: int, multiple: int) -> int:
    """Return ``GGML_PAD(value, multiple)``."""
    return (value + multiple - 1) // multiple * multiple


CacheKind = Literal["kv", "kv_swa", "kv_idx", "recurrent"]
"""``kv`` full attention, ``kv_swa`` sliding window, ``kv_idx`` a sparse-attention indexer's
key cache, ``recurrent`` recurrent state (R and S rows)."""


@dataclass(frozen=True, slots=True)
class CacheEstimate:
    """One cache llama.cpp creates, as its ``llama_kv_cache: size = …`` line reports it.

    ``kind`` is one of :data:`CacheKind`. ``cells`` is per stream; ``n_stream`` streams
    are allocated side by side.
    """

    kind: CacheKind
    cells: int
    n_stream: int
    n_layers: int
    type_k: str
    type_v: str
    k_bytes: int
    v_bytes: int

    @property
    def total_bytes(self) -> int:
        """Return K + V (or R + S) bytes."""
        return self.k_bytes + self.v_bytes


@dataclass(frozen=True, slots=True)
class DeviceEstimate:
    """Memory on one device, in bytes, and the layers placed there."""

    name: str
    kind: DeviceKind
    weights_bytes: int
    kv_bytes: int
    recurrent_bytes: int
    compute_bytes: int
    output_bytes: int
    other_bytes: int
    capacity_bytes: int | None
    n_layers: int
    projector_bytes: int = 0
    """A vision/audio projector's weights and compute buffer (``--mmproj``)."""
    draft_bytes: int = 0
    """A draft model's weights, KV for every slot and compute buffer (``-md``)."""
    prompt_cache_bytes: int = 0
    """llama-server's host prompt cache at its limit (``--cache-ram``); grows with use."""
    checkpoint_bytes: int = 0
    """Context checkpoints at their limit (``--ctx-checkpoints`` per slot); grow with use."""

    @property
    def total_bytes(self) -> int:
        """Return the memory held from the load on (every component but the growth)."""
        return (
            self.weights_bytes
            + self.kv_bytes
            + self.recurrent_bytes
            + self.compute_bytes
            + self.output_bytes
            + self.other_bytes
            + self.projector_bytes
            + self.draft_bytes
        )

    @property
    def growth_bytes(self) -> int:
        """Return what the runner may add with use: prompt cache and checkpoints."""
        return self.prompt_cache_bytes + self.checkpoint_bytes

    @property
    def headroom_bytes(self) -> int | None:
        """Return capacity minus total (negative when it does not fit), or None if unknown."""
        return None if self.capacity_bytes is None else self.capacity_bytes - self.total_bytes

    @property
    def fits(self) -> bool | None:
        """Return whether the total fits the capacity (None when the capacity is unknown)."""
        room = self.headroom_bytes
        return None if room is None else room >= 0


@dataclass(frozen=True, slots=True)
class ResolvedContext:
    """The context llama.cpp will really create for the settings (``llama-context.cpp``)."""

    n_ctx: int
    n_ctx_seq: int
    n_stream: int
    n_batch: int
    n_ubatch: int
    flash_attn: bool
    swa_full: bool


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """The full answer: per-device memory, the caches, and what llama.cpp will resolve."""

    devices: tuple[DeviceEstimate, ...]
    caches: tuple[CacheEstimate, ...]
    context: ResolvedContext
    n_gpu_layers: int
    kv_rule_known: bool
    notes: tuple[str, ...]
    kv_status: KvStatus = "exact"
    """Whether the KV/recurrent figures are engine-checked (:data:`app.model.spec.KvStatus`)."""
    compute_known: bool = True
    """Whether the compute-buffer model is checked for this architecture (tests/agreement);
    when False the compute figure is a rough guess and only the engine's figure counts."""
    compute_error: str = ""
    """The known miss of this architecture's compute model at real size, when it has one
    (:data:`app.model.arch_table.KNOWN_COMPUTE_ERRORS`; ``compute_known`` is then False)."""
    engine_checked: tuple[str, ...] = ()
    """Figures taken from llama.cpp's own dry run (``"kv"``, ``"recurrent"``, ``"compute"``,
    ``"output"``) in place of the analytic ones (app/measured/engine_checked.py)."""
    mapped_twice_bytes: int = 0
    """With mmap: the converted weights (AMX, CPU_REPACK) whose originals the mapped file
    also keeps in RAM, i.e. what turning mmap off saves (0 without mmap)."""

    @property
    def kv_exact(self) -> bool:
        """Return whether the KV/recurrent figures agree with llama.cpp (checked or engine's)."""
        return self.kv_status == "exact" or "kv" in self.engine_checked

    @property
    def compute_exact(self) -> bool:
        """Return whether the compute figure is checked or the engine's."""
        return self.compute_known or "compute" in self.engine_checked

    @property
    def exact(self) -> bool:
        """Return whether every figure is known to agree with llama.cpp.

        Weights are always exact; KV must be checked and so must the compute model (or
        both be llama.cpp's own figures). Without it there is no verdict (app/predict/verdict.py).
        """
        return self.kv_exact and self.compute_exact

    def not_estimated(self) -> tuple[str, ...]:
        """Return, in words, each figure that is not known to agree with llama.cpp."""
        out = []
        if not self.kv_exact:
            out.append(
                "the KV cache (no rule for this architecture)"
                if self.kv_status == "unknown"
                else "the KV cache (rule not yet checked against llama.cpp)"
            )
        if not self.compute_exact:
            out.append(
                "the compute buffer (known to miss llama.cpp's at real size for this "
                f"architecture: {self.compute_error})"
                if self.compute_error
                else "the compute buffer (not modelled for this architecture)"
            )
        return tuple(out)

    @property
    def total_bytes(self) -> int:
        """Return the total over all devices."""
        return sum(d.total_bytes for d in self.devices)

    @property
    def fits(self) -> bool | None:
        """Return whether it fits: never True on a guess.

        False when a device overflows even without the figures that are not known to be
        right (those can only be checked, not trusted); None when a capacity is unknown or
        a figure is not known to agree with llama.cpp (:attr:`exact`); else True.
        """
        for d in self.devices:
            over = d.fits is False and d.capacity_bytes is not None
            if over and (self.exact or self.certain_bytes(d) > (d.capacity_bytes or 0)):
                return False
        if not self.exact:
            return None
        verdicts = [d.fits for d in self.devices]
        if any(v is False for v in verdicts):
            return False
        if any(v is None for v in verdicts):
            return None
        return True

    def certain_bytes(self, device: DeviceEstimate) -> int:
        """Return ``device``'s total without the figures not known to agree with llama.cpp."""
        total = device.total_bytes
        if not self.kv_exact:
            total -= device.kv_bytes + device.recurrent_bytes
        if not self.compute_exact:
            total -= device.compute_bytes
        return total

    def device(self, name: str) -> DeviceEstimate:
        """Return the device called ``name``."""
        for d in self.devices:
            if d.name == name:
                return d
        raise KeyError(name)


def resolve_context(spec: ModelSpec, settings: Settings) -> ResolvedContext:
    """Apply llama.cpp's context rules: defaults, batch clamps, 256-cell padding, streams.

    Mirrors ``llama_context::llama_context`` in ``src/llama-context.cpp``.
    """
    n_seq = settings.n_parallel
    n_ctx = settings.n_ctx if settings.n_ctx > 0 else spec.n_ctx_train
    if n_ctx <= 0:
        raise SettingsError("the model has no training context; set a context size")
    # causal attention: the batch is limited by the (unpadded) context size
    n_batch = min(n_ctx, settings.n_batch)
    n_ubatch = min(n_batch, settings.n_ubatch)
    n_ctx = pad(n_ctx, PAD_CELLS)
    if settings.kv_unified:
        n_ctx_seq = n_ctx
        n_stream = 1
    else:
        n_ctx_seq = pad(n_ctx // n_seq, PAD_CELLS)
        n_ctx = n_ctx_seq * n_seq
        n_stream = n_seq
    flash = _resolve_flash_attn(settings)
    return ResolvedContext(
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_stream=n_stream,
        n_batch=n_batch,
        n_ubatch=n_ubatch,
        flash_attn=flash,
        swa_full=settings.swa_full,
    )


def check_cache_types(spec: ModelSpec, settings: Settings) -> None:
    """Refuse cache types llama.cpp refuses (``llama_init_from_model``, llama-context.cpp).

    MLA models need K and V of one type; with flash attention a quantized K (V) type's block
    must divide every layer's K (V) head size (and the indexer's key size). A T5 context with
    several KV streams aborts in llama.cpp's graph reserve (tests/zoo/test_zoo_modern.py).
    """
    if spec.memory_kind == "enc_dec" and settings.n_parallel > 1 and not settings.kv_unified:
        raise SettingsError(
            f"{spec.arch}: llama.cpp cannot run several sequences of an encoder-decoder model "
            "without a unified KV cache (it aborts); turn kv_unified on or use one slot"
        )
    if spec.is_mla and settings.cache_type_k != settings.cache_type_v:
        raise SettingsError(
            f"{spec.arch} (MLA) needs the same K and V cache type, got "
            f"{settings.cache_type_k} and {settings.cache_type_v}"
        )
    for which, cache_type in (("K", settings.cache_type_k), ("V", settings.cache_type_v)):
        block = GGML_QUANT_SIZES[_CACHE_GGML[cache_type]][0]
        if block == 1:
            continue
        for il in range(spec.n_layer):
            if spec.is_swa[il]:
                head = spec.head_k_swa if which == "K" else spec.head_v_swa
            else:
                head = spec.head_k_full if which == "K" else spec.head_v_full
            if head % block or (which == "K" and spec.idx_layers and spec.idx_head_k % block):
                head = head if head % block else spec.idx_head_k
                raise SettingsError(
                    f"{which} cache type {cache_type} (block of {block}) does not divide "
                    f"this model's head size {head}; choose f16 or a type it divides"
                )


def _resolve_flash_attn(settings: Settings) -> bool:
    """Return whether flash attention ends up on (``llama_init_from_model`` checks).

    ``auto`` resolves to on for every backend ggtune models (CPU, CUDA, Metal support FA);
    the memory module is created with ``v_trans = !flash_attn`` where auto counts as on.
    """
    quantized_v = settings.cache_type_v not in ("f32", "f16", "bf16")
    if settings.flash_attn == "off":
        if quantized_v:
            raise SettingsError(
                "a quantized V cache needs flash attention (-fa on); llama.cpp refuses it"
            )
        return False
    return True


# --- placement (src/llama-model.cpp load_tensors) -----------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """Device index per repeating layer and for the output layer; -1 is the host."""

    layer_device: tuple[int, ...]
    output_device: int
    n_gpu_layers: int


def place_layers(spec: ModelSpec, settings: Settings, hardware: Hardware) -> Placement:
    """Assign each repeating layer and the output layer to a GPU or the host.

    ``src/llama-model.cpp`` ``load_tensors``: the output layer counts as one layer and is
    offloaded first; GPU layers are ``il >= n_layer + 1 - ngl``, split by ``tensor_split``
    (or free memory) with ``upper_bound`` over the cumulative shares.
    """
    n_layer_all = spec.n_layer_all
    n_gpus = len(hardware.gpus)
    ngl = settings.n_gpu_layers if settings.n_gpu_layers >= 0 else n_layer_all + 1
    if n_gpus == 0:
        return Placement((-1,) * n_layer_all, -1, 0)
    # the output layer counts as one layer and is offloaded first (PR #18148)
    i_gpu_start = max(n_layer_all + 1 - ngl, 0)
    act_gpu_layers = min(ngl, n_layer_all + 1)
    if settings.tensor_split and any(settings.tensor_split):
        weights = list(settings.tensor_split[:n_gpus]) + [0.0] * (
            n_gpus - len(settings.tensor_split)
        )
    else:
        # default split: proportional to each device's free memory
        weights = [float(g.free_bytes or g.capacity_bytes or 1) for g in hardware.gpus]
    total = sum(weights)
    splits: list[float] = []
    acc = 0.0
    for w in weights:
        acc += w
        splits.append(acc / total)

    def device_of(il: int) -> int:
        if il < i_gpu_start or il - i_gpu_start >= act_gpu_layers:
            return -1
        frac = (il - i_gpu_start) / act_gpu_layers
        return min(bisect.bisect_right(splits, frac), n_gpus - 1)

    layers = tuple(device_of(il) for il in range(n_layer_all))
    return Placement(layers, device_of(n_layer_all), act_gpu_layers)


@dataclass(frozen=True, slots=True)
class _TensorGroup:
    """Tensors that land on the same device and buffer: one layer, role, type, shape class."""

    layer: int | None
    role: TensorRole
    ggml_type: int
    repack_shape: bool
    amx_shape: bool
    n_bytes: int
    host_bytes: int = 0
    """What the tensors take in a CPU model buffer: each padded to 32 bytes."""


_ALL_REPACK_TYPES: Final = _REPACK_AVX2 | _REPACK_AVX512_EXTRA | _REPACK_NEON_I8MM


def _group_tensors(spec: ModelSpec) -> tuple[_TensorGroup, ...]:
    sums: dict[tuple[int | None, TensorRole, int, bool, bool], int] = {}
    padded: dict[tuple[int | None, TensorRole, int, bool, bool], int] = {}
    for t in spec.tensors:
        key = (t.layer, t.role, t.ggml_type, _is_repacked(t, _ALL_REPACK_TYPES), _is_amx(t))
        sums[key] = sums.get(key, 0) + t.n_bytes
        padded[key] = padded.get(key, 0) + _cpu_padded(t.n_bytes)
    return tuple(_TensorGroup(*key, n_bytes, padded[key]) for key, n_bytes in sums.items())


CPU_TENSOR_ALIGNMENT: Final = 32
"""TENSOR_ALIGNMENT of ggml's CPU buffer (``ggml-cpu.c``), which is also GGUF's default
data alignment, so a mapped file's tensors sit 32-byte aligned too: a 16-byte bias takes
32 bytes of the CPU model buffer (measured: the zoo Qwen3.5-MoE's host weights, 1.61 MiB
summed, 1.62 MiB in llama.cpp's buffer)."""


def _cpu_padded(n_bytes: int) -> int:
    return -(-n_bytes // CPU_TENSOR_ALIGNMENT) * CPU_TENSOR_ALIGNMENT


_SPEC_MEMO: dict[int, tuple[ModelSpec, dict[str, object]]] = {}
_SPEC_MEMO_SIZE: Final = 16


def _memo(spec: ModelSpec, name: str, compute: Callable[[ModelSpec], _T]) -> _T:
    """Return ``compute(spec)``, computed once per spec object (the slider hot path).

    Keyed by identity (hashing a spec means hashing every tensor); the entry keeps the
    spec alive so an id is never reused while cached.
    """
    entry = _SPEC_MEMO.get(id(spec))
    if entry is None or entry[0] is not spec:
        if len(_SPEC_MEMO) >= _SPEC_MEMO_SIZE:
            _SPEC_MEMO.pop(next(iter(_SPEC_MEMO)))
        entry = (spec, {})
        _SPEC_MEMO[id(spec)] = entry
    values = entry[1]
    if name not in values:
        values[name] = compute(spec)
    return values[name]  # type: ignore[return-value]


def _tensor_groups(spec: ModelSpec) -> tuple[_TensorGroup, ...]:
    return _memo(spec, "tensor_groups", _group_tensors)


def tensor_device(t: TensorSpec | _TensorGroup, placement: Placement, n_cpu_moe: int) -> int:
    """Return the device index (-1 = host) a weight tensor is loaded to."""
    if t.role == "token_embedding":
        return -1  # the input layer always stays on the CPU
    if t.layer is None:
        return placement.output_device
    if t.layer >= len(placement.layer_device):
        return -1
    if t.role == "expert" and t.layer < n_cpu_moe:
        return -1  # --n-cpu-moe: blk.i.ffn_*_exps of the first N layers on the CPU
    return placement.layer_device[t.layer]


def _repack_types(host: Device) -> frozenset[GGMLQuantizationType]:
    flags = set(host.cpu_flags)
    if "avx2" in flags:
        extra = _REPACK_AVX512_EXTRA if "avx512f" in flags else frozenset()
        return _REPACK_AVX2 | extra
    if "neon" in flags and "i8mm" in flags:
        return _REPACK_NEON_I8MM
    return frozenset()


def has_amx(host: Device) -> bool:
    """Return whether llama.cpp's CPU backend has its AMX buffer on ``host``'s CPU."""
    return all(f in host.cpu_flags for f in AMX_CPU_FLAGS)


def amx_takes(type_name: str, n_cols: int, n_rows: int) -> bool:
    """Return whether the AMX buffer takes a ``type_name`` weight of ``n_rows`` rows of
    ``n_cols`` (``ne0``) on a CPU that has it (:func:`has_amx`)."""
    try:
        ggml_type = GGMLQuantizationType[type_name.upper()]
    except KeyError:
        return False
    return _amx_fits(ggml_type, n_cols, n_rows)


def _amx_fits(ggml_type: int, n_cols: int, n_rows: int) -> bool:
    align = _AMX_ALIGNMENT.get(GGMLQuantizationType(ggml_type))
    return align is not None and n_cols % align == 0 and n_rows % 32 == 0


def amx_bytes(ggml_type: int, n_bytes: int) -> int:
    """Return the size in the AMX buffer of a weight of ``n_bytes`` in ``ggml_type``."""
    extra = _AMX_EXTRA_PER_BLOCK.get(GGMLQuantizationType(ggml_type), 0)
    if not extra:
        return n_bytes
    _, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    return n_bytes // type_size * (type_size + extra)


_OTHER_MUL_MAT: Final = frozenset({"per_layer_model_proj", "inp_gate", "proj"})
"""Weights of role "other" that llama.cpp multiplies (``src/llama-arch.cpp`` LLM_TENSOR_INFOS:
Gemma 3n/4's per-layer input projections, ``GGML_OP_MUL_MAT``)."""


def _is_amx(t: TensorSpec) -> bool:
    """Whether ``t`` goes into the AMX buffer when it stays on a CPU that has one."""
    mul_mat = t.role in _MUL_MAT_ROLES or (
        t.role == "other" and t.name.rsplit(".", 2)[-2] in _OTHER_MUL_MAT
    )
    if not mul_mat or len(t.shape) < 2:
        return False  # experts are MUL_MAT_ID, not an AMX op; supports_op checks no rank
    return _amx_fits(t.ggml_type, t.shape[0], t.shape[1])


def host_extra_buffer(t: TensorSpec, host: Device) -> str | None:
    """Return the CPU buffer that holds a converted copy of ``t`` when it stays on the host
    (``AMX`` or ``CPU_REPACK``, tried in llama.cpp's order), or None (plain CPU)."""
    if has_amx(host) and _is_amx(t):
        return "AMX"
    if _is_repacked(t, _repack_types(host)):
        return "CPU_REPACK"
    return None


def repack_is_safe(host: Device) -> bool:
    """Return whether ggtune lets llama.cpp repack weights on ``host`` by default.

    Not on a CPU with AMX: the pinned llama.cpp's AMX matrix product segfaults in the
    first product of several tokens on some AMX CPUs (llama.cpp issue #20824, closed
    without a fix; Ollama issues #17006 and #17236 show the same crash), and on the AMX
    machine ggtune was tested on it did for every packed quant type (docs/engine.md,
    "AMX"). Plans there say ``--no-repack``, which the user can turn back on.
    """
    return not has_amx(host)


def safe_repack(settings: Settings, host: Device, given: Collection[str] = ()) -> Settings:
    """Return ``settings`` with repacking off on a CPU where it is unsafe
    (:func:`repack_is_safe`), unless ``repack`` is among the ``given`` (user-set) fields."""
    if "repack" in given or repack_is_safe(host) or not settings.repack:
        return settings
    return settings.replace(repack=False)


def amx_refusal(
    spec: ModelSpec, settings: Settings, hardware: Hardware, placement: Placement | None = None
) -> str | None:
    """Return why llama.cpp aborts creating a context for ``spec`` on an AMX CPU, or None.

    The AMX buffer takes a 3-D ``MUL_MAT`` weight (its ``supports_op`` is asked with a
    contiguous input when the weight is placed), but MLA multiplies ``attn_k_b`` by a
    strided view of the query, which no backend then runs: ``GGML_ASSERT(*cur_backend_id
    != -1)`` in ``ggml-backend.cpp`` (measured on the pinned build with the DeepSeek-2
    tiny model of tests/zoo).
    """
    if not (settings.repack and has_amx(hardware.host)):
        return None
    placement = placement or place_layers(spec, settings, hardware)
    for t in spec.tensors:
        on_host = tensor_device(t, placement, settings.n_cpu_moe) < 0
        if len(t.shape) == 3 and t.shape[2] > 1 and _is_amx(t) and on_host:
            return (
                f"llama.cpp aborts on this CPU: its AMX buffer takes {t.name} "
                f"({t.type_name}, 3-D), which the graph multiplies by a strided view "
                "(GGML_ASSERT(*cur_backend_id != -1)); run it with --no-repack"
            )
    return None


def repack_type_names(host: Device) -> frozenset[str]:
    """Return the weight types llama.cpp repacks for ``host``'s CPU (``CPU_REPACK``), by name."""
    return frozenset(t.name for t in _repack_types(host))


def repacked_bytes(spec: ModelSpec, host: Device) -> int:
    """Return the bytes of ``spec``'s weights llama.cpp would convert on ``host``'s CPU (into
    AMX or CPU_REPACK) if they all sat there; with mmap the mapped file keeps a second copy."""
    total = 0
    for t in spec.tensors:
        buffer = host_extra_buffer(t, host)
        if buffer == "AMX":
            total += amx_bytes(t.ggml_type, t.n_bytes)
        elif buffer is not None:
            total += t.n_bytes
    return total


_MUL_MAT_ROLES: Final = ("attention", "ffn", "shared_expert", "output", "ssm")


def _is_repacked(t: TensorSpec, types: frozenset[GGMLQuantizationType]) -> bool:
    if not types or t.ggml_type not in types or len(t.shape) < 2 or t.shape[1] % 8:
        return False
    # only weights consumed by MUL_MAT (2-D) or MUL_MAT_ID (3-D experts) are repacked
    if t.role in _MUL_MAT_ROLES:
        return len(t.shape) == 2 or (len(t.shape) == 3 and t.shape[2] == 1)
    if t.role == "expert":
        return len(t.shape) == 3
    return False


def _mapped_ends_outside(
    spec: ModelSpec, hardware: Hardware, placement: Placement, settings: Settings
) -> int:
    """Return the bytes of converted host weights outside the mapped CPU buffer's span.

    With mmap the CPU model buffer is the file range from the first to the last tensor the
    CPU context holds (``llama_model_loader::get_mapping_range``); a weight that went into
    AMX or CPU_REPACK before the first or after the last plain one is outside it (measured:
    SmolLM2 Q8_0 on an AMX CPU, CPU_Mapped 135.50 MiB, one ``ffn_down`` less than the file).
    """
    overridden = _overridden_devices(spec, settings.tensor_overrides, hardware)
    outside = 0
    for order in (spec.tensors, tuple(reversed(spec.tensors))):
        for t in order:
            dev = overridden.get(t.name, tensor_device(t, placement, settings.n_cpu_moe))
            if dev >= 0:
                continue
            if host_extra_buffer(t, hardware.host) is None:
                break
            outside += t.n_bytes
    return outside


def _overridden_devices(
    spec: ModelSpec, overrides: tuple[tuple[str, str], ...], hardware: Hardware
) -> dict[str, int]:
    """Return the device (-1 = host) of each tensor a ``-ot`` pattern moves.

    ``src/llama-model-loader.cpp`` ``create_tensor``: the patterns are tried in order with
    ``std::regex_search`` on the tensor's name and the first match decides; a pattern sent
    to the CPU buffer may still land in CPU_REPACK (the extra buffer types are considered).
    The token embeddings stay on the CPU whatever the pattern.
    """
    if not overrides:
        return {}
    key = (id(spec), overrides, tuple(g.name for g in hardware.gpus))
    hit = _OVERRIDE_MEMO.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    moved = _match_overrides(spec, overrides, hardware)
    if len(_OVERRIDE_MEMO) >= _OVERRIDE_MEMO_SIZE:
        _OVERRIDE_MEMO.pop(next(iter(_OVERRIDE_MEMO)))
    _OVERRIDE_MEMO[key] = (spec, moved)
    return moved


_OVERRIDE_MEMO: dict[
    tuple[int, tuple[tuple[str, str], ...], tuple[str, ...]], tuple[ModelSpec, dict[str, int]]
] = {}
_OVERRIDE_MEMO_SIZE: Final = 256
"""A fit tries a few dozen override sets per model (``common/fit.cpp``); keep them."""


def _match_overrides(
    spec: ModelSpec, overrides: tuple[tuple[str, str], ...], hardware: Hardware
) -> dict[str, int]:
    names = {g.name: i for i, g in enumerate(hardware.gpus)}
    names.update({g.buffer_name: i for i, g in enumerate(hardware.gpus)})
    compiled = []
    for pattern, buffer in overrides:
        target = -1 if buffer.upper().startswith("CPU") else names.get(buffer)
        if target is None:
            raise SettingsError(
                f"tensor override {pattern}={buffer}: no device {buffer!r} "
                f"(devices: {', '.join(names) or 'none'}, CPU)"
            )
        compiled.append((re.compile(pattern), target))
    moved: dict[str, int] = {}
    for t in spec.tensors:
        if t.role == "token_embedding":
            continue
        for regex, target in compiled:
            if regex.search(t.name):
                moved[t.name] = target
                break
    return moved


# --- caches (src/llama-kv-cache.cpp, -iswa.cpp, llama-memory-recurrent.cpp) ----------------


def _kv_layers(spec: ModelSpec) -> list[int]:
    """Layers in the main attention KV cache (``create_memory``'s filters, app.model.spec)."""
    if spec.memory_kind in ("none", "unknown", "recurrent"):
        return []
    return [il for il, on in enumerate(spec.kv_layers) if on]


def _recurrent_layers(spec: ModelSpec) -> list[int]:
    """Layers holding recurrent state (``llama_memory_recurrent``'s filter)."""
    if spec.memory_kind == "unknown":
        return []
    return [il for il, on in enumerate(spec.rs_layers) if on]


def _kv_cache(
    spec: ModelSpec,
    layers: list[int],
    kind: CacheKind,
    cells: int,
    n_stream: int,
    settings: Settings,
    v_trans: bool,
) -> tuple[CacheEstimate, dict[int, int]]:
    """Size one ``llama_kv_cache`` and return it with the bytes per layer."""
    v_width_max = spec.n_embd_v_gqa_max() if v_trans else 0
    per_layer: dict[int, int] = {}
    k_total = v_total = 0
    for il in layers:
        k = row_bytes(settings.cache_type_k, spec.n_embd_k_gqa(il)) * cells * n_stream
        v = 0
        if not spec.is_mla:  # MLA caches K only (llama.cpp PR #19067)
            width = v_width_max if v_trans else spec.n_embd_v_gqa(il)
            v = row_bytes(settings.cache_type_v, width) * cells * n_stream
        per_layer[il] = k + v
        k_total += k
        v_total += v
    cache = CacheEstimate(
        kind=kind,
        cells=cells,
        n_stream=n_stream,
        n_layers=len(layers),
        type_k=settings.cache_type_k,
        type_v=settings.cache_type_v,
        k_bytes=k_total,
        v_bytes=v_total,
    )
    return cache, per_layer


def _indexer_cache(
    spec: ModelSpec, cells: int, n_stream: int, settings: Settings
) -> tuple[CacheEstimate, dict[int, int]]:
    """Size the indexer's key cache (DSA, MSA, hybrid-idx): one key head per layer.

    ``llama_kv_cache_dsa`` / ``_msa`` / ``llama_memory_hybrid_idx`` build it as a
    ``llama_kv_cache`` over a copy of the hparams with one KV head of the indexer's key
    size; it caches K only where the model is MLA (DSA) or the copy is made MLA
    (hybrid-idx), K and V otherwise (MSA). V of the MSA copy is as wide as a value head,
    the widest one when V is stored transposed (no flash attention).
    """
    layers = [il for il, on in enumerate(spec.idx_layers) if on]
    per_layer: dict[int, int] = {}
    k_total = v_total = 0
    for il in layers:
        k_width = spec.head_k_swa if spec.is_swa[il] else spec.idx_head_k
        k = row_bytes(settings.cache_type_k, k_width) * cells * n_stream
        v = row_bytes(settings.cache_type_v, spec.idx_head_v) * cells * n_stream
        per_layer[il] = k + v
        k_total += k
        v_total += v
    cache = CacheEstimate(
        kind="kv_idx",
        cells=cells,
        n_stream=n_stream,
        n_layers=len(layers),
        type_k=settings.cache_type_k,
        type_v=settings.cache_type_v,
        k_bytes=k_total,
        v_bytes=v_total,
    )
    return cache, per_layer


def _caches(
    spec: ModelSpec, settings: Settings, ctx: ResolvedContext
) -> tuple[list[CacheEstimate], dict[int, int], dict[int, int], dict[str, int]]:
    """Return the caches, KV bytes per layer, recurrent bytes per layer, and n_kv per cache.

    The caches come in the order llama.cpp creates (and logs) them: the full cache, the
    indexer cache (sparse attention), the sliding-window cache, then recurrent state.
    """
    caches: list[CacheEstimate] = []
    kv_per_layer: dict[int, int] = {}
    rs_per_layer: dict[int, int] = {}
    n_kv: dict[str, int] = {}
    v_trans = not ctx.flash_attn
    kv_layers = _kv_layers(spec)

    def add(cache: CacheEstimate, per: dict[int, int]) -> None:
        caches.append(cache)
        for il, n_bytes in per.items():
            kv_per_layer[il] = kv_per_layer.get(il, 0) + n_bytes

    if kv_layers:
        size_base = ctx.n_ctx_seq
        split = spec.memory_kind in ("iswa", "hybrid_iswa", "dsa_iswa")
        base_layers = [il for il in kv_layers if not (split and spec.is_swa[il])]
        add(*_kv_cache(spec, base_layers, "kv", size_base, ctx.n_stream, settings, v_trans))
        n_kv["kv"] = size_base
        if spec.memory_kind in ("dsa", "dsa_iswa", "msa", "hybrid_idx"):
            add(*_indexer_cache(spec, size_base, ctx.n_stream, settings))
        if split:
            # llama-kv-cache-iswa.cpp: the SWA cache holds the window (per sequence when
            # unified) plus one ubatch, padded to 256, unless swa_full
            unified = ctx.n_stream == 1
            window = spec.n_swa * (settings.n_parallel if unified else 1) + ctx.n_ubatch
            size_swa = size_base if ctx.swa_full else pad(min(size_base, window), PAD_CELLS)
            swa_layers = [il for il in kv_layers if spec.is_swa[il]]
            add(*_kv_cache(spec, swa_layers, "kv_swa", size_swa, ctx.n_stream, settings, v_trans))
            n_kv["kv_swa"] = size_swa
    rs_layers = _recurrent_layers(spec)
    if rs_layers:
        # llama_memory_recurrent: f32 R and S rows, max(1, n_seq_max) cells
        rs_cells = max(1, settings.n_parallel)
        r_row = 4 * spec.n_embd_r()
        s_row = 4 * spec.n_embd_s()
        for il in rs_layers:
            rs_per_layer[il] = (r_row + s_row) * rs_cells
        caches.append(
            CacheEstimate(
                kind="recurrent",
                cells=rs_cells,
                n_stream=1,
                n_layers=len(rs_layers),
                type_k="f32",
                type_v="f32",
                k_bytes=r_row * rs_cells * len(rs_layers),
                v_bytes=s_row * rs_cells * len(rs_layers),
            )
        )
    return caches, kv_per_layer, rs_per_layer, n_kv


# --- compute buffers (src/llama-context.cpp graph_reserve, ggml-alloc) --------------------
#
# llama_context::sched_reserve builds the prompt graph for n_tokens = min(n_ctx, n_ubatch)
# tokens split into n_seq_max equal sequences, every token an output, and lets ggml-alloc
# (ggml/src/ggml-alloc.c) place it: graph inputs first, at the bottom of the buffer, then
# each node in execution order, reusing freed blocks (best fit) or a parent in place. The
# buffer is the highest offset ever reached. We model it as the persistent inputs plus the
# largest working set of the stages below; hole terms (freed blocks too small for the next
# big tensor) follow the allocation traces of the vendored ggml-alloc (GGML_ALLOCATOR_DEBUG).

_ALIGN: Final = 32
"""CPU buffer alignment (``TENSOR_ALIGNMENT``); ggml-alloc pads every tensor to it."""

_PARALLEL_BLOCK_ARCHS: Final = frozenset({"cohere2", "command-r", "phi2", "gptj", "gptneox"})
"""Attention and FFN read the same ``attn_norm`` output (parallel residual)."""

_POST_NORM_ARCHS: Final = frozenset({"gemma2", "gemma3", "gemma3n", "cohere2"})
"""FFN input two n_embd rows above the inputs, not three (traces): sandwich norms, parallel."""

_MROPE_ARCHS: Final = frozenset({"qwen2vl", "qwen3vl", "qwen3vlmoe"})
"""``n_pos_per_embd() == 4``: four position ids per token (llama-hparams.cpp)."""


def _al(n_bytes: int) -> int:
    return pad(n_bytes, _ALIGN)


@dataclass(frozen=True, slots=True)
class _GraphShapes:
    """Widths (in elements) of the activations the graph builders create, from the weights."""

    fused_qkv: int
    q_b: int
    ffn_up: dict[int, int]
    ffn_gate: dict[int, int]
    exp_ff: int
    exp_gate_up: bool
    exp_has_gate: bool
    shexp_ff: int
    ssm_in: int
    ssm_x: int
    ssm_conv: int


def _graph_shapes(spec: ModelSpec) -> _GraphShapes:
    """Read activation widths from the weight shapes (ne1 of each projection)."""
    fused_qkv = q_b = exp_ff = shexp_ff = ssm_in = ssm_x = ssm_conv = 0
    exp_gate_up = exp_has_gate = False
    ffn_up: dict[int, int] = {}
    ffn_gate: dict[int, int] = {}
    for t in spec.tensors:
        # a layer's tensor outside blk.N (gemma4's per_layer_model_proj, block 0's) is none
        # of the projections read here
        if t.layer is None or len(t.shape) < 2 or not t.name.startswith("blk."):
            continue
        if not t.name.endswith(".weight"):
            continue
        kind = t.name.split(".")[2]
        out = t.shape[1]
        if kind == "attn_qkv":
            fused_qkv = max(fused_qkv, out)
        elif kind == "attn_q_b":
            q_b = max(q_b, out)
        elif kind == "ffn_up" and len(t.shape) == 2:
            ffn_up[t.layer] = out
        elif kind == "ffn_gate" and len(t.shape) == 2:
            ffn_gate[t.layer] = out
        elif kind in ("ffn_up_exps", "ffn_gate_exps"):
            exp_ff = max(exp_ff, out)
            exp_has_gate |= kind == "ffn_gate_exps"
        elif kind == "ffn_gate_up_exps":
            exp_ff = max(exp_ff, out // 2)
            exp_gate_up = exp_has_gate = True
        elif kind in ("ffn_up_shexp", "ffn_gate_shexp"):
            shexp_ff = max(shexp_ff, out)
        elif kind == "ssm_in":
            ssm_in = max(ssm_in, out)
        elif kind == "ssm_x":
            ssm_x = max(ssm_x, out)
        elif kind == "ssm_conv1d":
            ssm_conv = max(ssm_conv, out)
    return _GraphShapes(
        fused_qkv,
        q_b,
        ffn_up,
        ffn_gate,
        exp_ff,
        exp_gate_up,
        exp_has_gate,
        shexp_ff,
        ssm_in,
        ssm_x,
        ssm_conv,
    )


def _input_bytes(
    spec: ModelSpec, ctx: ResolvedContext, n_kv: dict[str, int], n_tokens: int, n_seq: int
) -> int:
    """Graph inputs, allocated first and kept until their last reader (llama-graph.cpp).

    ``inp_tokens`` (i32) and ``inp_embd`` (f32 n_embd × n_tokens, allocated although the
    token path does not read it, so it lives to the end), ``inp_pos``, per KV cache the
    K/V row indices (i64; V indexes every element when V is stored transposed, i.e.
    without flash attention) and the mask (f16 with flash attention, f32 without), the
    recurrent ``s_copy`` ids and ``out_ids``.
    """
    total = _al(4 * n_tokens) + _al(4 * spec.n_embd * n_tokens) + _al(4 * n_tokens)
    if n_kv:
        total += _al(4 * n_tokens * (4 if spec.arch in _MROPE_ARCHS else 1))
        v_idx = 8 * n_tokens * (1 if ctx.flash_attn else spec.n_embd_v_gqa_max())
        for cells in n_kv.values():
            total += _al(8 * n_tokens)  # k_idxs
            if not spec.is_mla:  # MLA caches K only (PR #19067): no V indices
                total += _al(v_idx)
            total += _al((2 if ctx.flash_attn else 4) * cells * n_tokens)
    if any(spec.is_recurrent[: spec.n_layer]):
        total += _al(4 * n_seq)  # inp_s_copy
    return total


def _attention_stage(
    spec: ModelSpec,
    ctx: ResolvedContext,
    n_kv: dict[str, int],
    shapes: _GraphShapes,
    n_tokens: int,
) -> int:
    """Working set at the attention peak, above the inputs (build_attn_mha).

    Live: the residual ``inpL`` and ``attn_norm`` (or the blocks they left), Q before and
    after RoPE, and without flash attention the f32 KQ matrix ``n_kv × n_tokens × n_head``
    (``kq``; soft_max then runs in place). A fused QKV projection leaves Q as a view, one
    Q-sized block less. MLA (deepseek2) keeps q_b's output, the absorbed q_nope and the
    concatenated Q (``n_head × (kv_lora_rank + n_rot)``).
    """
    e = 4 * spec.n_embd * n_tokens
    best = 0
    for il in range(spec.n_layer):
        n_head = spec.n_head[il]
        if n_head == 0 or spec.n_head_kv[il] == 0 or spec.is_recurrent[il]:
            continue
        swa = spec.is_swa[il]
        cells = n_kv.get("kv_swa" if swa else "kv", max(n_kv.values()))
        head_k = spec.head_k_swa if swa else spec.head_k_full
        q = 4 * n_tokens * n_head * head_k
        if spec.is_mla:
            # q_b output, q_pe, absorbed q_nope, the concatenated Q (deepseek2.cpp); without
            # flash attention V is a cont() copy of the K cache's latent part (f16)
            q_b = 4 * n_tokens * (shapes.q_b or n_head * head_k)
            q_abs = 4 * n_tokens * n_head * spec.kv_lora_rank
            if ctx.flash_attn:
                q_pe = 4 * n_tokens * n_head * (head_k - spec.kv_lora_rank)
                stage = 2 * e + q_b + q_pe + q_abs + q
            else:
                stage = 2 * e + q_b + q_abs + q + 2 * cells * spec.kv_lora_rank
        elif shapes.fused_qkv:
            stage = e + q
        else:
            stage = 2 * e + 2 * q
        if spec.arch in _PARALLEL_BLOCK_ARCHS:
            stage += e  # attn_norm stays live for the parallel FFN
        if not ctx.flash_attn:
            stage += 4 * cells * n_tokens * n_head
        best = max(best, stage)
    return best


def _ffn_stage(spec: ModelSpec, shapes: _GraphShapes, n_tokens: int) -> int:
    """Working set at the FFN peak, above the inputs (build_ffn / build_moe_ffn).

    Dense: the residual with the block below it, then up, gate and the GLU output (the
    ``*_split`` GLU ops are not in place). MoE: router logits/probs, selected ids and
    weights, then per selected expert up, gate and GLU output, or the GLU output and the
    down projection ``n_embd × n_expert_used``; a shared expert runs after ``moe_out``.
    """
    e = 4 * spec.n_embd * n_tokens
    best = 0
    for il in range(spec.n_layer):
        # the residual sits above the attention's last blocks (embd, attn_norm, Q): three
        # rows for separate Q/K/V; two after a fused QKV, MLA, a sandwich norm, a recurrent
        # or attention-free layer, or in hybrids (allocation traces)
        three = (
            spec.n_head_kv[il] > 0
            and not spec.is_recurrent[il]
            and not shapes.fused_qkv
            and not spec.is_mla
            and spec.arch not in _POST_NORM_ARCHS
            and spec.memory_kind not in ("hybrid", "hybrid_iswa")
        )
        below = 3 * e if three else 2 * e
        stage = 0
        if il in shapes.ffn_up:
            up = shapes.ffn_up[il]
            gate = shapes.ffn_gate.get(il, 0)
            act = spec.n_ff[il] if (gate or up > spec.n_ff[il]) else 0
            stage = below + 4 * n_tokens * (up + gate + act)
        if spec.n_expert and shapes.exp_ff:
            used = spec.n_expert_used
            ff = shapes.exp_ff
            router = 4 * n_tokens * (2 * spec.n_expert + 2 * used)
            gate = ff if shapes.exp_has_gate else 0
            experts = 4 * n_tokens * used * max(ff + gate + ff, ff + spec.n_embd)
            stage = max(stage, below + router + experts)
            if shapes.shexp_ff:
                stage = max(stage, below + e + 4 * n_tokens * 3 * shapes.shexp_ff)
        best = max(best, stage)
    return best


def _recurrent_stage(
    spec: ModelSpec, shapes: _GraphShapes, n_tokens: int, n_seq: int, ffn_stage: int
) -> int:
    """Working set at the SSM / RWKV peak, above the inputs.

    Mamba (mamba-base.cpp build_mamba_layer): ``xz`` (2·d_inner), ``conv_x`` ((d_conv-1 +
    n_seq_tokens) × d_inner × n_seqs), the conv output, dt and the ssm_scan result (y plus
    the new states). Mamba-2 (build_mamba2_layer): ``zxBCdt``, ``conv_x``, the conv output
    xBC, ``cont(z)`` and the new states. RWKV 6/7 (rwkv6-base.cpp, rwkv7-base.cpp): the
    token-shift lerps (5 or 6 × n_embd in one tensor), r/k/v/g/w projections and the wkv
    output with its state; counted in n_embd-wide rows from the allocation traces.
    """
    if not any(spec.is_recurrent[: spec.n_layer]):
        return 0
    e = 4 * spec.n_embd * n_tokens
    seq_tokens = -(-n_tokens // n_seq)
    if spec.wkv_head_size:
        state = 4 * spec.n_embd * spec.wkv_head_size * n_seq
        rows = 18.25 if spec.arch in ("rwkv7", "arwkv7") else 13.25
        return int(rows * e) + 2 * state
    if spec.shortconv_l_cache:
        # lfm2 shortconv: in_proj (3 × n_embd), the concatenated conv input, conv output
        conv_x = 4 * spec.n_embd * (spec.shortconv_l_cache - 1 + seq_tokens) * n_seq
        return 2 * e + 3 * e + conv_x + e
    d_inner = spec.ssm_d_inner
    if not d_inner:
        return 0
    conv_dim = shapes.ssm_conv or d_inner
    conv_x = 4 * conv_dim * (spec.ssm_d_conv - 1 + seq_tokens) * n_seq
    states = 4 * spec.ssm_d_state * d_inner * n_seq
    if spec.ssm_n_group:  # mamba2 / hybrids
        z_in = 4 * n_tokens * (shapes.ssm_in or 2 * d_inner + 2 * conv_dim)
        # zxBCdt goes below the residual, or in the previous FFN's freed blocks (hybrids)
        low = max(e + z_in, ffn_stage)
        return low + e + conv_x + states + 4 * n_tokens * (conv_dim + d_inner)
    d = 4 * d_inner * n_tokens
    return 2 * e + 2 * d + d + conv_x + d + states


def _compute_bytes(
    spec: ModelSpec, ctx: ResolvedContext, n_kv: dict[str, int], n_seq: int | None = None
) -> int:
    """Model the worst-case compute buffer of one micro-batch (CPU ``compute buffer size``).

    ``n_seq`` is ``n_seq_max`` (the reserve graph splits the micro-batch into that many
    sequences; it matters for recurrent state only); it defaults to the number of KV streams.
    The result is the largest of: the output stage (``inp_tokens``' block, ``inp_embd``, the
    last residual and the f32 logits ``n_vocab × n_tokens``), and the inputs plus the
    attention, FFN/MoE or SSM/RWKV working set.
    """
    n_tokens = min(ctx.n_ctx, ctx.n_ubatch)
    n_seq = max(1, n_seq if n_seq is not None else ctx.n_stream)
    if n_tokens % n_seq:
        n_tokens = -(-n_tokens // n_seq) * n_seq  # graph_reserve rounds up to n_seqs
    e = _al(4 * spec.n_embd * n_tokens)
    output_stage = _al(4 * n_tokens) + (2 if ctx.flash_attn else 3) * e
    output_stage += _al(4 * spec.n_vocab * n_tokens)
    shapes = _memo(spec, "graph_shapes", _graph_shapes)
    inputs = _input_bytes(spec, ctx, n_kv, n_tokens, n_seq)
    ffn = _ffn_stage(spec, shapes, n_tokens)
    working = max(
        _attention_stage(spec, ctx, n_kv, shapes, n_tokens) if n_kv else 0,
        ffn,
        _recurrent_stage(spec, shapes, n_tokens, n_seq, ffn),
    )
    return max(output_stage, inputs + working)


# --- compute buffers per device -----------------------------------------------------------


def graph_request(
    spec: ModelSpec,
    settings: Settings,
    ctx: ResolvedContext,
    n_kv: dict[str, int],
    placement: Placement,
    hardware: Hardware,
    *,
    as_dry_run: bool = False,
) -> GraphRequest:
    """Return what the reserve graph depends on for these settings (hashable)."""
    n_seqs = max(1, settings.n_parallel)
    n_tokens = min(ctx.n_ctx, ctx.n_ubatch)
    # sched_reserve: one output per token of the micro-batch (n_outputs_max = n_batch);
    # graph_reserve rounds n_tokens up to a multiple of n_seq_max
    n_outputs = min(n_tokens, ctx.n_batch)
    if n_tokens % n_seqs:
        n_tokens = -(-n_tokens // n_seqs) * n_seqs
    ngl = settings.n_gpu_layers if settings.n_gpu_layers >= 0 else spec.n_layer_all + 1
    return GraphRequest(
        n_tokens=n_tokens,
        n_outputs=n_outputs,
        n_seqs=n_seqs,
        kv_unified=settings.kv_unified,
        flash_attn=ctx.flash_attn,
        type_k=settings.cache_type_k,
        type_v=settings.cache_type_v,
        caches=caches_of(n_kv),
        layer_device=placement.layer_device,
        output_device=placement.output_device,
        n_gpu_layers=ngl,
        n_cpu_moe=settings.n_cpu_moe,
        offload_kqv=settings.offload_kqv,
        gpu_names=tuple(g.name for g in hardware.gpus),
        overrides=tuple(
            sorted(_overridden_devices(spec, settings.tensor_overrides, hardware).items())
        ),
        has_overrides=bool(settings.tensor_overrides) or settings.n_cpu_moe > 0,
        pins=not as_dry_run,
    )


_COMPUTE_MEMO: dict[tuple[int, GraphRequest], tuple[ModelSpec, tuple[int, ...]]] = {}
_COMPUTE_MEMO_SIZE: Final = 2048


def _device_compute(
    spec: ModelSpec,
    settings: Settings,
    ctx: ResolvedContext,
    n_kv: dict[str, int],
    placement: Placement,
    hardware: Hardware,
    as_dry_run: bool = False,
) -> tuple[int, ...]:
    """Return the compute buffer of each device (GPUs, then the host).

    From the rebuilt reserve graph (app/predict/graph) where ggtune has the architecture's
    graph; otherwise the stage model below, on every used GPU alike.
    """
    req = graph_request(spec, settings, ctx, n_kv, placement, hardware, as_dry_run=as_dry_run)
    if has_graph(spec):
        _check_scheduler_table(spec, req, min(ctx.n_ctx, ctx.n_ubatch), len(hardware.gpus))
    key = (id(spec), req)
    with GRAPH_LOCK:  # the GUI thread and the job pool estimate at once
        hit = _COMPUTE_MEMO.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
        sizes = compute_buffers(spec, req)
        if sizes is None:
            sizes = _stage_model_devices(spec, settings, ctx, n_kv, placement, len(hardware.gpus))
        if len(_COMPUTE_MEMO) >= _COMPUTE_MEMO_SIZE:
            _COMPUTE_MEMO.pop(next(iter(_COMPUTE_MEMO)))
        _COMPUTE_MEMO[key] = (spec, sizes)
        return sizes


EXTRA_MODEL_TENSORS: Final = 2
"""Tensors llama.cpp may create beyond the file's on the host (duplicates; see
:func:`_check_scheduler_table`)."""


def _check_scheduler_table(spec: ModelSpec, req: GraphRequest, n_tokens: int, n_gpus: int) -> None:
    """Raise :class:`SettingsError` where llama.cpp aborts creating the context because
    its scheduler's hash table cannot hold the reserve graph (:func:`graph_tensors`).

    The table is sized from ``llama_model::n_tensors``: the file's tensors and the
    duplicates llama.cpp creates in another buffer context (a tied output, shared RoPE
    factors: Gemma 4 has one more on the host; with GPUs, once more per device). The
    refusal counts :data:`EXTRA_MODEL_TENSORS` more, plus two per GPU, so its table is
    never smaller than llama.cpp's (no refusal on a doubt; the catalog test checks the
    host's against llama.cpp's logged ``max_nodes``). Phi-4 with a quantized K/V cache
    and flash attention on two or more streams: 2,058 tensors for 2,053 slots
    (docs/benchmarks.md, catalog stand-ins).
    """
    n_model = len(spec.tensors)
    extra = EXTRA_MODEL_TENSORS + 2 * n_gpus
    slots = hash_size(graph_max_nodes(spec, n_tokens, n_model + extra))
    if graph_tensors_bound(spec, req) <= slots:
        return  # the cheap upper bound fits: no need to count the whole graph
    n = graph_tensors(spec, req)
    if n > slots:
        raise SettingsError(
            f"llama.cpp aborts creating this context: its reserve graph has {n:,} tensors "
            f"and the scheduler's table {slots:,} slots (sized for "
            f"{graph_max_nodes(spec, n_tokens, n_model):,} nodes, {n_model:,} model tensors); "
            "an f16 K/V cache (no Hadamard rotation), one slot or a unified KV cache "
            "makes the graph smaller"
        )


def _stage_model_devices(
    spec: ModelSpec,
    settings: Settings,
    ctx: ResolvedContext,
    n_kv: dict[str, int],
    placement: Placement,
    n_dev: int,
) -> tuple[int, ...]:
    compute = [0] * (n_dev + 1)
    graph_bytes = _compute_bytes(spec, ctx, n_kv, settings.n_parallel)
    used_gpus = {d for d in (*placement.layer_device, placement.output_device) if d >= 0}
    if used_gpus:
        for d in used_gpus:
            compute[d] = graph_bytes
        # the host keeps a small buffer for the input embeddings of one micro-batch
        compute[n_dev] = 4 * min(ctx.n_ctx, ctx.n_ubatch) * spec.n_embd
    else:
        compute[n_dev] = graph_bytes
    return tuple(compute)


# --- the estimate -----------------------------------------------------------------------


def estimate(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    *,
    compute: bool = True,
    as_dry_run: bool = False,
    quick_compute: bool = False,
) -> MemoryEstimate:
    """Return where every byte goes for ``spec`` run with ``settings`` on ``hardware``.

    Pure and fast (no I/O): safe to call on every slider tick. ``compute=False`` leaves
    the compute buffers out (0, ``compute_known`` False): a lower bound of every device's
    total for a search that only needs to rule settings out (the planner).
    ``as_dry_run``: the compute buffers as llama.cpp's ``no_alloc`` dry run sizes them,
    not as a real load does. They differ with GPUs: the dry run
    (``ggml_backend_sched_reserve_size``) resets the scheduler and forgets the pins of
    ``graph_get_cb`` (norms on their layer's device, the attention output on the CPU
    without KV offload); llama-fit-params and ``--fit`` decide with those figures.
    ``quick_compute``: the compute buffers from the stage model (microseconds; the same
    figure on every used GPU, ``compute_known`` False) instead of the reserve graph (a
    graph built, scheduled and reserved: 10–70 ms for a partial offload of a 70B model on
    a 2-core machine): for a search over many candidates whose result is then estimated
    in full (the runner's fit on a slider tick, see ``RunnerOptions.live``).

    >>> est = estimate(spec, Settings(n_ctx=8192), Hardware.cpu_only())  # doctest: +SKIP
    >>> est.device("CPU").kv_bytes                                       # doctest: +SKIP
    """
    notes: list[str] = list(spec.notes)
    ctx = resolve_context(spec, settings)
    check_cache_types(spec, settings)
    placement = place_layers(spec, settings, hardware)
    refusal = amx_refusal(spec, settings, hardware, placement)
    if refusal is not None:
        raise SettingsError(refusal)
    gpus = hardware.gpus
    n_dev = len(gpus)
    host_index = n_dev  # devices are the GPUs in order, then the host

    def index(dev: int) -> int:
        return host_index if dev < 0 else dev

    weights = [0] * (n_dev + 1)
    other = [0] * (n_dev + 1)
    repack = _repack_types(hardware.host) if settings.repack else frozenset()
    amx = settings.repack and has_amx(hardware.host)
    converted = 0  # bytes (as in the file) of host weights in AMX or CPU_REPACK
    amx_packed = False  # quantized weights packed for the AMX kernels
    overridden = _overridden_devices(spec, settings.tensor_overrides, hardware)
    units: tuple[TensorSpec, ...] | tuple[_TensorGroup, ...] = (
        spec.tensors if overridden else _tensor_groups(spec)
    )
    for g in units:
        dev = tensor_device(g, placement, settings.n_cpu_moe)
        if overridden and isinstance(g, TensorSpec) and g.name in overridden:
            dev = overridden[g.name]
        repack_shape = (
            g.repack_shape if isinstance(g, _TensorGroup) else _is_repacked(g, _ALL_REPACK_TYPES)
        )
        amx_shape = g.amx_shape if isinstance(g, _TensorGroup) else _is_amx(g)
        if dev < 0 and amx and amx_shape:
            # the AMX buffer holds a packed copy (mmap keeps the original, as for CPU_REPACK)
            other[host_index] += amx_bytes(g.ggml_type, g.n_bytes)
            converted += g.n_bytes
            amx_packed = amx_packed or g.ggml_type in _AMX_PACKED
            if not settings.use_mmap:
                continue
        elif dev < 0 and repack_shape and g.ggml_type in repack:
            # CPU_REPACK holds an interleaved copy; with mmap the mapped file still covers
            # the original, without mmap the tensor lives in the repack buffer alone
            other[host_index] += g.n_bytes
            converted += g.n_bytes
            if not settings.use_mmap:
                continue
        if dev < 0:
            weights[host_index] += (
                g.host_bytes if isinstance(g, _TensorGroup) else _cpu_padded(g.n_bytes)
            )
        else:
            weights[dev] += g.n_bytes
    if settings.use_mmap and converted:
        # the mapped originals of converted weights, minus those outside the mapped span
        outside = _mapped_ends_outside(spec, hardware, placement, settings)
        converted -= outside
        weights[host_index] -= outside
    if spec.tied_embeddings:
        embd = next(t for t in spec.tensors if t.name == "token_embd.weight")
        out_dev = placement.output_device
        # the output layer reuses token_embd (TENSOR_DUPLICATED): a copy when the output
        # layer sits on a GPU; on the host it shares the input layer's data (measured with
        # and without mmap: the CPU model buffer holds token_embd once)
        if out_dev >= 0:
            weights[index(out_dev)] += embd.n_bytes
        if out_dev < 0:
            tied = TensorSpec(
                "output.weight",
                embd.shape,
                embd.ggml_type,
                embd.type_name,
                embd.n_bytes,
                None,
                "output",
            )
            if amx and _is_amx(tied):
                other[host_index] += amx_bytes(embd.ggml_type, embd.n_bytes)
            elif _is_repacked(tied, repack):
                other[host_index] += embd.n_bytes

    kv = [0] * (n_dev + 1)
    rs = [0] * (n_dev + 1)
    caches: list[CacheEstimate] = []
    n_kv: dict[str, int] = {}
    if spec.kv_rule_known:
        caches, kv_per_layer, rs_per_layer, n_kv = _caches(spec, settings, ctx)
        for il, b in kv_per_layer.items():
            dev = placement.layer_device[il] if settings.offload_kqv else -1
            kv[index(dev)] += b
        for il, b in rs_per_layer.items():
            dev = placement.layer_device[il] if settings.offload_kqv else -1
            rs[index(dev)] += b

    if compute and quick_compute:
        buffers = list(_stage_model_devices(spec, settings, ctx, n_kv, placement, n_dev))
    elif compute:
        buffers = list(_device_compute(spec, settings, ctx, n_kv, placement, hardware, as_dry_run))
    else:
        buffers = [0] * (n_dev + 1)

    output = [0] * (n_dev + 1)
    # llama_context::output_reserve: f32 logits for max(n_outputs, n_seq_max) rows, in host
    # memory (pinned host memory of the output device when it is a GPU)
    # T5 (enc-dec) also keeps the embeddings: has_embd with n_embd_out = n_embd
    width = spec.n_vocab + (spec.n_embd if spec.memory_kind == "enc_dec" else 0)
    output[host_index] = 4 * width * settings.n_parallel

    devices = []
    for i, dev_info in enumerate((*gpus, hardware.host)):
        n_layers = sum(1 for d in placement.layer_device if index(d) == i)
        devices.append(
            DeviceEstimate(
                name=dev_info.name,
                kind=dev_info.kind,
                weights_bytes=weights[i],
                kv_bytes=kv[i],
                recurrent_bytes=rs[i],
                compute_bytes=buffers[i],
                output_bytes=output[i],
                other_bytes=other[i],
                capacity_bytes=dev_info.free_bytes
                if dev_info.free_bytes is not None
                else dev_info.capacity_bytes,
                n_layers=n_layers,
            )
        )
    if amx_packed:
        notes.append(
            "this CPU has AMX: llama.cpp packs weights into its AMX buffer, and the pinned "
            "build's AMX kernels crash (segfault at the first prompt) on some AMX CPUs "
            "(llama.cpp issue #20824); if the runner crashes, run it with --no-repack"
        )
    twice = converted if settings.use_mmap else 0
    if twice >= REPACK_NOTE_BYTES:
        size = f"{twice / 2**30:.1f} GiB" if twice >= 2**30 else f"{twice / 2**20:.0f} MiB"
        notes.append(
            f"{size} of weights are repacked for this CPU (llama.cpp's "
            f"{'AMX and CPU_REPACK buffers' if amx else 'CPU_REPACK buffer'}) "
            "while the memory-mapped file keeps the originals, so with mmap they count "
            f"twice; turning mmap off (llama-server --load-mode none, Ollama use_mmap "
            f"false) saves {size} of RAM (llama.cpp issue #16761)"
        )
    if ctx.n_ctx_seq > spec.n_ctx_train > 0:
        notes.append(
            f"context per sequence ({ctx.n_ctx_seq}) exceeds the training context "
            f"({spec.n_ctx_train}): quality may suffer"
        )
    return MemoryEstimate(
        devices=tuple(devices),
        caches=tuple(caches),
        context=ctx,
        n_gpu_layers=placement.n_gpu_layers,
        kv_rule_known=spec.kv_rule_known,
        kv_status=spec.kv_status,
        compute_known=compute
        and not quick_compute
        and spec.arch in COMPUTE_CHECKED_ARCHS
        and spec.arch not in KNOWN_COMPUTE_ERRORS,
        compute_error=KNOWN_COMPUTE_ERRORS.get(spec.arch, "") if compute else "",
        notes=tuple(notes),
        mapped_twice_bytes=twice,
    )
