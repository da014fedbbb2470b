"""How fast a model runs: decode and prefill tok/s, time to first token, parallel users.

The model is the physics of docs/sources.md §5, with the published efficiency ratios
listed there as defaults and a fit to the user's own benchmark runs on top:

* **Decode** (one token per step) is bound by memory bandwidth. For every token each
  device reads the weights resident on it — for MoE only the active experts
  (``n_expert_used / n_expert`` of each expert tensor) plus the dense and shared parts;
  one row of the token embeddings; the whole output head — and the KV cache of every
  earlier token (up to the window on sliding-window layers). Devices of a split model run
  one after the other, so the time per token is ``Σ_d bytes_d / bw_d + overhead``: the
  form of the Apple fit (time/token ≈ bytes / (0.86–0.97·BW) + 4–6.5 ms, llama.cpp #4167).
  ``bw_d`` is the device's bandwidth times an efficiency: 0.64–0.80 of the bound on
  NVIDIA (llama.cpp #15013, default the middle, 0.72; also for a CUDA GPU on unified
  memory, the DGX Spark's GB10), the Apple fit above for Metal's unified memory, and for
  the CPU a share of the host bandwidth ``ggtune hw`` measured.
* **Prefill** is compute-bound: about ``2·active_params`` FLOPs per token (the output head
  once per prompt: only the last token's logits are computed), plus attention
  ``4·depth·n_head·head_dim`` per layer, over an effective compute rate
  (``fp16_tflops`` × efficiency on a GPU, and for quantized weights on an NVIDIA GPU
  ``int8_tops`` × the MMQ efficiency: llama.cpp's MMQ kernels run on the int8 tensor
  cores; on the CPU a rate fitted to measurements), plus one read of the weights per
  micro-batch. ROCm devices reach a fitted share of the CUDA ratios; Metal reads the KV
  cache in decode slower than the weights (docs/benchmarks.md, section users, *GPUs*).
* **Time to first token** for a prompt of P tokens is the prefill of those P tokens.
* **n parallel users** decode in one batch: each step reads the weights once (MoE: the
  experts any of the n tokens picks), the KV of every user, and spends ``2·active_params``
  FLOPs per extra token. Per-user speed falls and aggregate speed grows with n, faster
  with long contexts: the shape of llama.cpp ``benches/dgx-spark.md`` (Qwen2.5-7B Q8_0:
  29 tok/s for 1 user, 18.5 each for 32 users with 512-token prompts, 8.4 each with 8k
  prompts); tests/app/test_speed.py checks the shape against those figures.

:func:`calibrate` fits the efficiency factors to measurements (``ggtune bench`` runs on
this machine, from :mod:`app.measured.results_db`) and returns new :class:`SpeedFactors`; with no
measurements it returns the defaults. Example::

    factors = calibrate(measurements)              # or SpeedFactors() for the defaults
    p = predict_speed(spec, settings, hardware, depth=2048, factors=factors)
    p.decode_tok_per_s, p.prefill_tok_per_s, p.ttft_s
    predict_users(spec, settings, hardware, n_users=8, depth=4096).per_user_tok_per_s
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from app.hardware.devices import Device, Hardware
from app.hardware.kernels import KernelRates
from app.model.spec import ModelSpec, TensorSpec
from app.predict.estimate import (
    check_cache_types,
    # the estimator's own placement, so speed and memory always agree on where tensors are
    place_layers,
    repack_type_names,
    resolve_context,
    row_bytes,
    tensor_device,
)
from app.settings import Settings

SpeedKind = Literal["pp", "tg"]
DeviceClass = Literal["gpu", "host", "unified"]
"""How a device is priced: a GPU (discrete, or a CUDA GPU on unified memory such as the
DGX Spark's GB10: llama.cpp runs the same CUDA kernels and CUDA graphs on it), a
unified-memory GPU of another backend (Apple's Metal: the fit of llama.cpp #4167) or the
CPU host."""

GB: Final = 1e9

NVIDIA_END_TO_END_EFFICIENCY: Final = 0.72
"""llama.cpp decodes at 64–80 % of the bandwidth bound on NVIDIA (llama.cpp #15013, 7B
Q4_0 on many cards), the middle: the whole token, the CPU's part included."""

GPU_HOST_SHARE: Final = 0.125
"""Share of a decoded token's time the CPU takes on the critical path with a GPU backend
(building and splitting the graph, launching it): 10–15 % for Llama 2 7B and 13B Q4_K_M on
A100 and H100 (llama.cpp #7456), the middle."""

NVIDIA_BANDWIDTH_EFFICIENCY: Final = round(NVIDIA_END_TO_END_EFFICIENCY / (1 - GPU_HOST_SHARE), 3)
"""The share of the bandwidth bound the GPU's own reads reach in decode: 0.72 end to end,
of which 12.5 % is the CPU's, so 0.72 / 0.875 = 0.823 (the CPU's part is
:data:`GPU_NODE_OVERHEAD_S` per graph node)."""

GPU_NODE_OVERHEAD_S: Final = round(GPU_HOST_SHARE / 163.83 / 1152, 12)
"""The CPU's time per graph node for each decode step on a GPU: 12.5 % (#7456) of a Llama
2 7B Q4_K_M token on an H100 PCIe with CUDA graphs (163.83 tok/s, llama.cpp #6763) over
that model's 1,152 graph nodes (:func:`graph_nodes`, 32 layers, no flash attention):
0.66 µs. It sets a floor under small models, whose tokens the bandwidth alone would make
absurdly fast (SmolLM2 135M Q8_0 at ~5,000 tok/s on an RTX 4090, ~1,260 with it); for a
7B model it is the 12.5 % above."""

UNIFIED_BANDWIDTH_EFFICIENCY: Final = 0.915
UNIFIED_OVERHEAD_S: Final = 0.00525
"""Apple Silicon: time/token ≈ bytes / (0.86–0.97·BW) + 4–6.5 ms (llama.cpp #4167); the
middle of both ranges. Overall llama.cpp reaches 58–91 % of the bound there."""

HOST_BANDWIDTH_EFFICIENCY: Final = 0.8
"""Share of the host bandwidth (``ggtune hw``'s measured copy, else the profile's
theoretical figure) CPU decoding reaches before calibration: a ggtune assumption, replaced
by :func:`calibrate` as soon as the user has a benchmark run."""

DEFAULT_HOST_BANDWIDTH_GB_PER_S: Final = 20.0
"""Used when the host's bandwidth is unknown (not measured yet, no profile)."""

DEFAULT_GPU_BANDWIDTH_GB_PER_S: Final = 300.0
"""Used when a GPU's bandwidth is unknown (``--gpu-mem`` GPUs): a mid-range card."""

GPU_COMPUTE_EFFICIENCY: Final = 0.8
"""Share of the dense FP16 rate prefill reaches on a GPU for the products that do not go
through MMQ (F16/BF16/F32 weights everywhere, every weight on a GPU without ``int8_tops``:
Metal, ROCm, Vulkan): a ggtune assumption; calibrated when runs exist."""

GPU_ATTENTION_EFFICIENCY: Final = 0.5
"""Share of the matrix products' rate a GPU's flash attention reaches in prefill (FLOPs
``4·n_head·head_dim`` per token per cached token) on every backend but CUDA
(:data:`CUDA_ATTENTION_EFFICIENCY`): a ggtune assumption, set so that the published M2
Ultra prefill at 16k of depth (llama.cpp benches/mac-m2-ultra.md) comes out right; Metal's
flash-attention kernels reach less of the peak than its dense products do.
docs/benchmarks.md has the whole published table against it."""

GPU_MMQ_EFFICIENCY: Final = 0.1902
"""Share of the dense INT8 tensor rate (``int8_tops``) llama.cpp's MMQ kernels reach in
prefill of quantized weights on NVIDIA GPUs (ggml-cuda/mmq.cu, ggml_cuda_should_use_mmq:
every type of :data:`MMQ_TYPES` on Turing and later), on a discrete card: fitted to the
published RTX 3090/4090 rows of tests/app/data/published_llama_cpp_speeds.json (the
median of the rate each row implies: 0.19–0.25), checked leave one out in
docs/benchmarks.md; bench/bench_speed_published.py --fit prints it."""

UNIFIED_MMQ_EFFICIENCY: Final = 0.1259
""":data:`GPU_MMQ_EFFICIENCY` for an NVIDIA GPU with unified memory (GB10, the DGX
Spark): fitted the same way to the DGX Spark rows of the published table. GB10 reaches a
smaller share of its INT8 rate than the discrete cards do (0.09–0.16 against 0.19–0.25);
its INT8 rate is itself computed, not published (profiles/hardware/nvidia-dgx.toml), and
the whole chip runs on 140 W."""

CUDA_ATTENTION_EFFICIENCY: Final = 0.975
""":data:`GPU_ATTENTION_EFFICIENCY` for a CUDA device (llama.cpp's CUDA flash-attention
kernels, not Metal's): fitted to the published CUDA rows of prompt processing at a depth
(the median of what each implies), checked leave one out in docs/benchmarks.md."""

ROCM_BANDWIDTH_RATIO: Final = 0.677
ROCM_COMPUTE_RATIO: Final = 0.539
"""llama.cpp's ROCm (HIP) backend against the CUDA ratios above: decode reaches this
share of ``gpu_bandwidth_efficiency``, prefill this share of ``gpu_compute_efficiency``
(a device named ``ROCm<n>``). Fitted to the published RX 7900 XTX rows (RDNA3, the only
AMD GPU of tests/app/data/published_llama_cpp_speeds.json: llama.cpp PR #26284), checked
leave one out in docs/benchmarks.md; other AMD architectures are assumed alike."""

METAL_KV_READ_SCALE: Final = 2.24
"""On Metal (a device named ``MTL<n>``) decode reads the KV cache this many times slower
than the weights (flash attention's one-token kernel, ggml-metal's
``kernel_flash_attn_ext_vec``, against large matrix × vector products): the extra time per
token from depth 0 to depth 16384 in llama.cpp benches/mac-m2-ultra.md over the extra
time the bandwidth model gives, median over its models; checked leave one model out in
docs/benchmarks.md."""

METAL_EXPERT_PRODUCT_S: Final = 2.55e-6
"""On Metal each routed expert's matrix × vector product (``mul_mat_id``, one per expert
tensor per expert a token picks) costs this much more than its bytes in decode: the
median of what the MoE decode rows of llama.cpp benches/mac-m2-ultra.md imply (0 for a
row that needs none), checked leave one out in docs/benchmarks.md."""

MMQ_TYPES: Final = frozenset(
    {
        "Q1_0", "Q2_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
        "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
        "IQ1_S", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_XS", "IQ4_NL",
        "MXFP4", "NVFP4",
    }
)  # fmt: skip
"""Weight types CUDA multiplies with MMQ (ggml-cuda/mmq.cu, ggml_cuda_should_use_mmq):
int8 tensor-core products on the quantized blocks; other types (F16, BF16, F32, TQ*) go
through cuBLAS at the FP16 rate."""

DEFAULT_GPU_TFLOPS: Final = 20.0
"""Used when a GPU's FP16 rate is unknown."""

HOST_COMPUTE_GFLOPS: Final = 50.0
"""Effective CPU prefill rate when neither a profile nor a measurement gives one (the
2-core shared EPYC of docs/benchmarks.md reaches 24–40; an 8-core AVX2 desktop several
times more): a guess that :func:`calibrate` replaces."""


@dataclass(frozen=True, slots=True)
class SpeedFactors:
    """Efficiency factors of the speed model (see the module doc); units in the names.

    ``*_bandwidth_efficiency`` multiply a device's bandwidth; ``*_overhead_s`` is a fixed
    cost per decoded token (kernel launches, synchronisation); ``gpu_compute_efficiency``
    multiplies ``fp16_tflops``; ``gpu_mmq_efficiency`` multiplies ``int8_tops`` for the
    products of quantized weights where the GPU has one (MMQ; ``unified_mmq_efficiency``
    on a unified-memory GPU); ``gpu_attention_efficiency`` is the share of the compute
    rate flash attention reaches in prefill (``cuda_attention_efficiency`` on a CUDA
    device); on a ROCm device
    ``rocm_bandwidth_ratio``/``rocm_compute_ratio`` further multiply the GPU's bandwidth
    and compute efficiencies; ``metal_kv_read_scale`` multiplies the time a Metal device
    reads the KV cache in decode, ``metal_expert_product_s`` is its cost per routed expert
    product in decode; ``host_compute_gflops`` is the CPU's effective prefill
    rate (used when the host has no ``fp16_tflops``). ``quant_kv_attention_factor``
    multiplies the attention FLOPs when the KV cache is quantized (q8_0, q4_0 …): the CPU
    dequantizes every cell it attends to (fitted here: ~4-7× on the 2-core EPYC of
    docs/benchmarks.md; 1 until measured). Where the host's kernels were measured
    (:class:`~app.hardware.kernels.KernelRates`), ``host_kernel_scale``,
    ``host_attention_scale`` and ``host_node_scale`` multiply the time of its matrix
    products, its attention and its graph nodes (1 until calibrated);
    ``host_type_scales`` (lower-case weight type, scale) further multiply the products of
    one weight type on top of ``host_kernel_scale`` (1 for a type not listed): a loaded
    model's BF16/F16/Q8_0/MXFP4 products run slower against the timed kernels than its
    K-quants do, which one common scale cannot absorb (docs/benchmarks.md, section users).
    ``host_attention_scales`` (:func:`attention_key`, scale) do the same for each attention
    kernel on top of ``host_attention_scale``: llama.cpp's CPU flash attention is one
    kernel per cache type, head size and path (one query row at a time below 64 rows per
    stream, tiles of 64 from there), each off from its timing in its own way.
    ``decode_scale``/``prefill_scale`` multiply predicted times for one model, fitted to
    that model's own runs (1 = none).
    ``source`` says where the numbers come from, in words.
    """

    gpu_bandwidth_efficiency: float = NVIDIA_BANDWIDTH_EFFICIENCY
    gpu_overhead_s: float = 0.0
    gpu_node_overhead_s: float = GPU_NODE_OVERHEAD_S
    unified_bandwidth_efficiency: float = UNIFIED_BANDWIDTH_EFFICIENCY
    unified_overhead_s: float = UNIFIED_OVERHEAD_S
    host_bandwidth_efficiency: float = HOST_BANDWIDTH_EFFICIENCY
    host_overhead_s: float = 0.0
    gpu_compute_efficiency: float = GPU_COMPUTE_EFFICIENCY
    host_compute_gflops: float = HOST_COMPUTE_GFLOPS
    quant_kv_attention_factor: float = 1.0
    gpu_attention_efficiency: float = GPU_ATTENTION_EFFICIENCY
    gpu_mmq_efficiency: float = GPU_MMQ_EFFICIENCY
    unified_mmq_efficiency: float = UNIFIED_MMQ_EFFICIENCY
    cuda_attention_efficiency: float = CUDA_ATTENTION_EFFICIENCY
    rocm_bandwidth_ratio: float = ROCM_BANDWIDTH_RATIO
    rocm_compute_ratio: float = ROCM_COMPUTE_RATIO
    metal_kv_read_scale: float = METAL_KV_READ_SCALE
    metal_expert_product_s: float = METAL_EXPERT_PRODUCT_S
    host_kernel_scale: float = 1.0
    host_attention_scale: float = 1.0
    host_node_scale: float = 1.0
    host_type_scales: tuple[tuple[str, float], ...] = ()
    host_attention_scales: tuple[tuple[str, float], ...] = ()
    decode_scale: float = 1.0
    prefill_scale: float = 1.0
    n_measurements: int = 0
    source: str = "not calibrated: published ratios"
    """Where the factors come from, in words a screen shows as they are (the published
    ratios are docs/sources.md §5; a user of the app has no docs/ folder to look in)."""


# --- work per token ---------------------------------------------------------------------

NODES_PER_TENSOR: Final = 2
NODES_PER_LAYER: Final = 13
NODES_WITHOUT_FLASH_ATTN: Final = 5
NODES_OUTSIDE_LAYERS: Final = 8
"""Compute nodes of llama.cpp's graph: per layer about two per weight tensor (the product or
multiply, and what joins it: norms, adds, ropes) plus 13 (attention, cache copies,
residuals), five more without flash attention (the explicit KQ, softmax, KQV), and about
eight outside the layers. Fitted to the counts llama.cpp logs (``sched_reserve: graph:
nodes = N``): SmolLM2-135M 936 (938 counted) and 1,086 without flash attention (1,088),
Gemma 3 270M 727 (710) and 817 (800)."""


@dataclass(frozen=True, slots=True)
class KernelWork:
    """The host's share of one graph, in the units this CPU's measured kernels are priced
    in (:class:`~app.hardware.kernels.KernelRates`).

    ``dense``: (weight type, row length, weights) multiplied by every token of a step
    (attention, FFN, shared experts); ``experts``: (type, row length, weights of all
    routed experts); ``output``: the same for the output head, multiplied by each token
    that needs logits. ``attn_full``/``attn_swa``: Σ ``n_head · head_dim`` over the
    full-attention and sliding-window layers (work per query token per cached token);
    ``attn_kv_full``/``attn_kv_swa`` the same with KV heads (what is read without flash
    attention); ``n_nodes`` the graph's compute nodes on the host.
    """

    dense: tuple[tuple[str, int, float], ...]
    experts: tuple[tuple[str, int, float], ...]
    output: tuple[tuple[str, int, float], ...]
    attn_full: float
    attn_swa: float
    attn_kv_full: float
    attn_kv_swa: float
    head_dim: int
    group: float
    n_nodes: int
    kv_type: str
    flash_attn: bool
    rates: KernelRates


@dataclass(frozen=True, slots=True)
class KernelNeeds:
    """What the host's kernels must have been timed for to price ``spec`` on it: (weight
    type, row length) pairs, (cache type, head size) pairs of its attention, and the types
    this CPU repacks."""

    shapes: frozenset[tuple[str, int]]
    attention: frozenset[tuple[str, int]]
    repack: frozenset[str]
    extra_buffers: bool = True
    """Whether the weights go into llama.cpp's extra CPU buffers (AMX, CPU_REPACK) where
    they can (``Settings.repack``); False times every type in the plain CPU buffer."""

    @property
    def types(self) -> frozenset[str]:
        """The weight types alone."""
        return frozenset(t for t, _cols in self.shapes)

    def missing(self, rates: KernelRates | None) -> KernelNeeds:
        """Return the part of these needs ``rates`` does not cover."""
        if rates is None:
            return self
        have = rates.shapes()
        if not self.extra_buffers:  # only timings in the plain CPU buffer will do
            have = frozenset(
                (t.type_name.upper(), t.n_cols) for t in rates.timings if not t.repacked
            )
        timed = {(a.kv_type.upper(), a.head_dim) for a in rates.attention}
        return KernelNeeds(
            frozenset(s for s in self.shapes if (s[0].upper(), s[1]) not in have),
            frozenset(a for a in self.attention if a not in timed),
            self.repack,
            self.extra_buffers,
        )

    def __bool__(self) -> bool:
        return bool(self.shapes or self.attention)


def kernel_needs(spec: ModelSpec, settings: Settings, hardware: Hardware) -> KernelNeeds:
    """Return the kernels the host must have timed for ``spec`` with ``settings``."""
    ctx = resolve_context(spec, settings)
    placement = place_layers(spec, settings, hardware)
    shapes: set[tuple[str, int]] = set()
    for t in spec.tensors:
        on_host = tensor_device(t, placement, settings.n_cpu_moe) < 0
        if on_host and len(t.shape) >= 2 and t.role != "token_embedding":
            shapes.add((t.type_name.upper(), t.shape[0]))
    if spec.tied_embeddings and placement.output_device < 0:
        embd = next((t for t in spec.tensors if t.name == "token_embd.weight"), None)
        if embd is not None:
            shapes.add((embd.type_name.upper(), embd.shape[0]))
    kv = settings.cache_type_k.upper()
    attention: set[tuple[str, int]] = set()
    if spec.memory_kind not in ("none", "unknown", "recurrent"):
        for il in range(spec.n_layer):
            if spec.is_recurrent[il] or spec.n_head_kv[il] == 0:
                continue
            if placement.layer_device[il] < 0 or not settings.offload_kqv:
                head = spec.head_k_swa if spec.is_swa[il] else spec.head_k_full
                attention.add((kv, head))
    if attention and not ctx.flash_attn:  # K and V are then multiplied as matrices
        shapes.update((kv, head) for _kv, head in attention)
    return KernelNeeds(
        frozenset(shapes),
        frozenset(attention),
        repack_type_names(hardware.host) if settings.repack else frozenset(),
        settings.repack,
    )


def graph_nodes(spec: ModelSpec, layers: Sequence[int], *, flash_attn: bool) -> int:
    """Return the compute nodes of llama.cpp's graph for ``layers`` (see NODES_PER_TENSOR)."""
    per_layer: dict[int, int] = {}
    for t in spec.tensors:
        if t.layer is not None:
            per_layer[t.layer] = per_layer.get(t.layer, 0) + 1
    extra = NODES_PER_LAYER + (0 if flash_attn else NODES_WITHOUT_FLASH_ATTN)
    return sum(NODES_PER_TENSOR * per_layer.get(il, 0) + extra for il in layers)


@dataclass(frozen=True, slots=True)
class DeviceWork:
    """What one device does per step: bytes read and FLOPs, with its effective rates.

    ``weight_bytes`` for one decoded token (``expert_bytes`` of it are routed experts, the
    part that grows with more users); ``kv_bytes_per_depth`` is KV read per earlier token
    (full-attention layers) and ``swa_kv_bytes_per_depth`` on sliding-window layers, read
    for at most ``n_swa`` tokens; ``layer_flops`` per token without the output head,
    ``head_flops`` of the output head; ``attn_flops_per_depth`` per token per earlier token.
    """

    name: str
    kind: DeviceClass
    weight_bytes: float
    expert_bytes: float
    all_weight_bytes: float
    """Bytes a micro-batch of prefill reads: every weight on the device but the token
    embeddings, of which it reads only the rows of its tokens (``lookup_bytes``)."""
    kv_bytes_per_depth: float
    swa_kv_bytes_per_depth: float
    state_bytes: float
    layer_flops: float
    head_flops: float
    attn_flops_per_depth: float
    swa_attn_flops_per_depth: float
    bandwidth_bytes_per_s: float
    flops_per_s: float
    overhead_s: float
    kv_quantized: bool = False
    mmq_layer_flops: float = 0.0
    mmq_head_flops: float = 0.0
    """The part of ``layer_flops``/``head_flops`` whose weights are of :data:`MMQ_TYPES`."""
    mmq_flops_per_s: float = 0.0
    """The rate of those products in prefill (int8 tensor cores × MMQ efficiency); 0: the
    device has no such path and they run at ``flops_per_s``."""
    kv_read_scale: float = 1.0
    """Multiplies the time of reading the KV cache in decode (Metal's, see
    METAL_KV_READ_SCALE)."""
    expert_tensors: int = 0
    """Routed-expert weight tensors on the device (one product per expert a token picks)."""
    expert_product_s: float = 0.0
    """The cost of each such product in decode beyond its bytes (Metal's, see
    METAL_EXPERT_PRODUCT_S)."""
    kernels: KernelWork | None = None
    """The host's share priced by this CPU's measured kernels (None: bandwidth model)."""
    attention_efficiency: float = 1.0
    """Share of ``flops_per_s`` flash attention reaches in prefill (1 on the host)."""
    lookup_bytes: float = 0.0
    """Bytes of one token's row of the token embeddings on the device (``get_rows``
    reads one row per token of a batch, never the whole matrix)."""


@dataclass(frozen=True, slots=True)
class Workload:
    """A model with settings on hardware, reduced to per-device work (see DeviceWork)."""

    devices: tuple[DeviceWork, ...]
    n_swa: int
    n_expert: int
    n_expert_used: int
    n_ubatch: int
    n_nodes: int = 0
    """Compute nodes of the whole decode graph (:func:`graph_nodes`, all layers)."""

    def kv_bytes(self, depth: int) -> float:
        """Return KV bytes one token reads at ``depth`` over all devices."""
        swa = min(depth, self.n_swa) if self.n_swa else depth
        return sum(
            d.kv_bytes_per_depth * depth + d.swa_kv_bytes_per_depth * swa for d in self.devices
        )


def _device_kind(device: Device) -> DeviceClass:
    if device.kind == "host" or device.lent_cpu:
        # a remote machine's CPU over RPC runs at CPU rates (this machine's CPU factors:
        # an assumption, as nothing was measured there)
        return "host"
    if device.unified_memory and not device.name.startswith("CUDA"):
        return "unified"
    return "gpu"


@dataclass(frozen=True, slots=True)
class _Rates:
    bandwidth: float
    """B/s"""
    flops: float
    """FLOP/s of dense FP16 products and attention"""
    overhead: float
    """s per decoded token"""
    mmq: float = 0.0
    """int8 ops/s of quantized products in prefill (0: none, they run at ``flops``)"""
    kv_scale: float = 1.0
    """time multiplier of KV reads in decode"""
    expert_product_s: float = 0.0
    """s per routed expert product in decode"""
    attention: float = 1.0
    """share of ``flops`` flash attention reaches in prefill"""


def _rates(device: Device, factors: SpeedFactors) -> _Rates:
    """Return the rates of ``device`` under ``factors``."""
    kind = _device_kind(device)
    if kind == "host":
        bw = (device.bandwidth_gb_per_s or DEFAULT_HOST_BANDWIDTH_GB_PER_S) * GB
        bw *= factors.host_bandwidth_efficiency
        if device.fp16_tflops:
            flops = device.fp16_tflops * 1e12 * factors.gpu_compute_efficiency
        else:
            flops = factors.host_compute_gflops * 1e9
        return _Rates(bw, flops, factors.host_overhead_s)
    bw = (device.bandwidth_gb_per_s or DEFAULT_GPU_BANDWIDTH_GB_PER_S) * GB
    flops = (device.fp16_tflops or DEFAULT_GPU_TFLOPS) * 1e12 * factors.gpu_compute_efficiency
    mmq_share = (
        factors.unified_mmq_efficiency if device.unified_memory else factors.gpu_mmq_efficiency
    )
    mmq = (device.int8_tops or 0.0) * 1e12 * mmq_share
    metal = device.name.startswith("MTL")
    kv_scale = factors.metal_kv_read_scale if metal else 1.0
    per_expert = factors.metal_expert_product_s if metal else 0.0
    cuda = device.name.startswith("CUDA")
    attention = factors.cuda_attention_efficiency if cuda else factors.gpu_attention_efficiency
    if kind == "unified":
        bw *= factors.unified_bandwidth_efficiency
        return _Rates(bw, flops, factors.unified_overhead_s, mmq, kv_scale, per_expert, attention)
    bw *= factors.gpu_bandwidth_efficiency
    if device.name.startswith("ROCm"):
        bw *= factors.rocm_bandwidth_ratio
        flops *= factors.rocm_compute_ratio
    return _Rates(bw, flops, factors.gpu_overhead_s, mmq, kv_scale, per_expert, attention)


def decode_bandwidth(device: Device, factors: SpeedFactors | None = None) -> float:
    """Return the bytes per second ``device`` reads while decoding (its bandwidth times the
    efficiency of its kind): what ranks devices by speed."""
    return _rates(device, factors or SpeedFactors()).bandwidth


def workload(
    spec: ModelSpec, settings: Settings, hardware: Hardware, factors: SpeedFactors | None = None
) -> Workload:
    """Return the per-device work of ``spec`` run with ``settings`` on ``hardware``.

    Tensors land where :func:`app.predict.estimate.estimate` puts them (same placement code).
    Raises :class:`~app.errors.SettingsError` for settings llama.cpp refuses.
    """
    factors = factors or SpeedFactors()
    ctx = resolve_context(spec, settings)
    check_cache_types(spec, settings)
    placement = place_layers(spec, settings, hardware)
    devs = hardware.devices
    host = len(devs) - 1
    n = len(devs)
    weight = [0.0] * n
    expert = [0.0] * n
    expert_tensors = [0] * n
    all_weight = [0.0] * n
    lookup = [0.0] * n
    layer_flops = [0.0] * n
    head_flops = [0.0] * n
    mmq_layer = [0.0] * n
    mmq_head = [0.0] * n
    frac = spec.n_expert_used / spec.n_expert if spec.n_expert else 1.0

    def idx(dev: int) -> int:
        return host if dev < 0 else dev

    dense: dict[tuple[str, int], float] = {}
    experts: dict[tuple[str, int], float] = {}
    output: dict[tuple[str, int], float] = {}

    def add(table: dict[tuple[str, int], float], t: TensorSpec) -> None:
        key = (t.type_name.upper(), t.shape[0])
        table[key] = table.get(key, 0.0) + t.n_elements

    for t in spec.tensors:
        d = idx(tensor_device(t, placement, settings.n_cpu_moe))
        if d == host and len(t.shape) >= 2:
            if t.role == "expert":
                add(experts, t)
            elif t.role == "output":
                add(output, t)
            elif t.role != "token_embedding":
                add(dense, t)
        if t.role == "token_embedding":
            rows = t.shape[1] if len(t.shape) >= 2 else 1
            weight[d] += t.n_bytes / max(rows, 1)  # one row looked up per token
            lookup[d] += t.n_bytes / max(rows, 1)
            continue
        all_weight[d] += t.n_bytes
        mmq = t.type_name.upper() in MMQ_TYPES and len(t.shape) >= 2
        if t.role == "expert":
            weight[d] += t.n_bytes * frac
            expert[d] += t.n_bytes * frac
            expert_tensors[d] += len(t.shape) >= 3  # a stack of matrices (not a bias)
            layer_flops[d] += 2.0 * t.n_elements * frac
            mmq_layer[d] += 2.0 * t.n_elements * frac if mmq else 0.0
        elif t.role == "output":
            weight[d] += t.n_bytes
            head_flops[d] += 2.0 * t.n_elements
            mmq_head[d] += 2.0 * t.n_elements if mmq else 0.0
        else:
            weight[d] += t.n_bytes
            if len(t.shape) >= 2:
                layer_flops[d] += 2.0 * t.n_elements
                mmq_layer[d] += 2.0 * t.n_elements if mmq else 0.0
    if spec.tied_embeddings:
        embd = next((t for t in spec.tensors if t.name == "token_embd.weight"), None)
        if embd is not None:
            d = idx(placement.output_device)
            weight[d] += embd.n_bytes  # the output head multiplies the whole matrix
            head_flops[d] += 2.0 * embd.n_elements
            if embd.type_name.upper() in MMQ_TYPES:
                mmq_head[d] += 2.0 * embd.n_elements
            if d == host:
                add(output, embd)

    kv_full = [0.0] * n
    kv_swa = [0.0] * n
    attn_full = [0.0] * n
    attn_swa = [0.0] * n
    state = [0.0] * n
    # the host's attention in kernel units: Σ n_head·head_dim (and with KV heads)
    k_attn = {"full": 0.0, "swa": 0.0, "kv_full": 0.0, "kv_swa": 0.0}
    heads: list[int] = []
    if spec.memory_kind not in ("none", "unknown"):
        for il in range(spec.n_layer):
            d = idx(placement.layer_device[il] if settings.offload_kqv else -1)
            if spec.is_recurrent[il]:
                # the state is read and written once per token
                state[d] += 2 * 4 * (spec.n_embd_r() + spec.n_embd_s())
                continue
            if spec.memory_kind == "recurrent" or spec.n_head_kv[il] == 0:
                continue
            per = float(row_bytes(settings.cache_type_k, spec.n_embd_k_gqa(il)))
            if not spec.is_mla:
                per += row_bytes(settings.cache_type_v, spec.n_embd_v_gqa(il))
            head = spec.head_k_swa if spec.is_swa[il] else spec.head_k_full
            attn = 4.0 * spec.n_head[il] * head  # QK^T and AV per earlier token
            if spec.is_swa[il] and spec.n_swa:
                kv_swa[d] += per
                attn_swa[d] += attn
            else:
                kv_full[d] += per
                attn_full[d] += attn
            if d == host:
                where = "swa" if spec.is_swa[il] and spec.n_swa else "full"
                k_attn[where] += spec.n_head[il] * head
                k_attn["kv_" + where] += spec.n_head_kv[il] * head
                heads.append(head)

    quantized_kv = settings.cache_type_k not in ("f32", "f16", "bf16") or (
        settings.cache_type_v not in ("f32", "f16", "bf16")
    )
    host_layers = [il for il in range(spec.n_layer) if placement.layer_device[il] < 0]
    kernels = _kernel_work(
        spec, settings, devs[host], ctx.flash_attn, dense, experts, output, k_attn, heads,
        host_layers, host_output=idx(placement.output_device) == host,
    )  # fmt: skip
    works = []
    for i, dev in enumerate(devs):
        r = _rates(dev, factors)
        works.append(
            DeviceWork(
                name=dev.name,
                kind=_device_kind(dev),
                weight_bytes=weight[i],
                expert_bytes=expert[i],
                expert_tensors=expert_tensors[i],
                all_weight_bytes=all_weight[i],
                kv_bytes_per_depth=kv_full[i],
                swa_kv_bytes_per_depth=kv_swa[i],
                state_bytes=state[i],
                layer_flops=layer_flops[i],
                head_flops=head_flops[i],
                attn_flops_per_depth=attn_full[i],
                swa_attn_flops_per_depth=attn_swa[i],
                bandwidth_bytes_per_s=r.bandwidth,
                flops_per_s=r.flops,
                overhead_s=r.overhead,
                kv_quantized=quantized_kv,
                kernels=kernels if i == host else None,
                mmq_layer_flops=mmq_layer[i],
                mmq_head_flops=mmq_head[i],
                mmq_flops_per_s=r.mmq,
                kv_read_scale=r.kv_scale,
                expert_product_s=r.expert_product_s,
                lookup_bytes=lookup[i],
                attention_efficiency=r.attention,
            )
        )
    return Workload(
        devices=tuple(works),
        n_swa=spec.n_swa if any(spec.is_swa) else 0,
        n_expert=spec.n_expert,
        n_expert_used=spec.n_expert_used,
        n_ubatch=ctx.n_ubatch,
        n_nodes=graph_nodes(spec, range(spec.n_layer), flash_attn=ctx.flash_attn)
        + NODES_OUTSIDE_LAYERS,
    )


def _kernel_work(
    spec: ModelSpec,
    settings: Settings,
    device: Device,
    flash_attn: bool,
    dense: Mapping[tuple[str, int], float],
    experts: Mapping[tuple[str, int], float],
    output: Mapping[tuple[str, int], float],
    attn: Mapping[str, float],
    heads: Sequence[int],
    host_layers: Sequence[int],
    *,
    host_output: bool,
) -> KernelWork | None:
    """Return the host's work priced by its measured kernels, or None where a type it needs
    was not measured (then the bandwidth model prices the host)."""
    rates = device.kernels
    if rates is None:
        return None
    measured = rates.types()
    if any(t.lower() not in measured for t, _cols in (*dense, *experts, *output)):
        return None
    kv_type = settings.cache_type_k.upper()
    head_dim = max(heads) if heads else 128
    if heads and rates.attention_ns(kv_type, head_dim, 1) is None:
        return None
    kv_heads = attn["kv_full"] + attn["kv_swa"]
    group = (attn["full"] + attn["swa"]) / kv_heads if kv_heads else 1.0
    nodes = graph_nodes(spec, host_layers, flash_attn=flash_attn)
    if host_output:
        nodes += NODES_OUTSIDE_LAYERS
    return KernelWork(
        dense=tuple((t, c, w) for (t, c), w in sorted(dense.items())),
        experts=tuple((t, c, w) for (t, c), w in sorted(experts.items())),
        output=tuple((t, c, w) for (t, c), w in sorted(output.items())),
        attn_full=attn["full"],
        attn_swa=attn["swa"],
        attn_kv_full=attn["kv_full"],
        attn_kv_swa=attn["kv_swa"],
        head_dim=head_dim,
        group=group,
        n_nodes=nodes,
        kv_type=kv_type,
        flash_attn=flash_attn,
        rates=rates,
    )


def scale_key(type_name: str, n_tokens: int) -> str:
    """Return the key of :attr:`SpeedFactors.host_type_scales` for products of
    ``type_name`` shared by ``n_tokens`` tokens: ``"q8_0/1"`` for one token (a
    matrix-vector product, which streams every weight from memory once for one token),
    ``"q8_0"`` for more (the weights are reused across the tokens)."""
    key = type_name.lower()
    return f"{key}/1" if n_tokens <= 1 else key


FLASH_TILE_ROWS: Final = 64
"""Query rows per stream from which llama.cpp's CPU flash attention takes its tiled path
(``GGML_FA_TILE_Q``; fewer rows go one at a time): docs/sources.md §5."""


def attention_key(kv_type: str, head_dim: int, n_tokens: int) -> str:
    """Return the key of :attr:`SpeedFactors.host_attention_scales` for attention over a
    ``kv_type`` cache with heads of ``head_dim`` for a graph of ``n_tokens`` tokens:
    ``"f16/64/tiled"`` from :data:`FLASH_TILE_ROWS` tokens on, ``"f16/64/rows"`` below."""
    path = "tiled" if n_tokens >= FLASH_TILE_ROWS else "rows"
    return f"{kv_type.lower()}/{head_dim}/{path}"


def kernel_graph_s(
    k: KernelWork,
    factors: SpeedFactors,
    *,
    n_tokens: int,
    ctx_full: float,
    ctx_swa: float,
    n_outputs: int,
    n_expert: int = 0,
    n_expert_used: int = 0,
) -> float:
    """Return seconds for one graph of ``n_tokens`` tokens on the host, priced by its kernels.

    ``ctx_full``/``ctx_swa``: Σ over the tokens of the cached tokens each attends to on
    full-attention / sliding-window layers; ``n_outputs`` tokens need logits. Matrix
    products cost ``weights × ns_per_weight(type, tokens sharing one read)``: every token
    for dense weights, the tokens routed to each expert for experts (of ``n_expert``, each
    token picks ``n_expert_used``), the outputs for the output head; attention costs
    ``Σ n_head·head_dim × cached tokens × ns per element`` (flash attention) or the K and V
    reads priced as products of the cache type; each graph node its synchronisation cost.
    """
    r = k.rates
    t = max(1, n_tokens)
    scales = dict(factors.host_type_scales)
    mm = 0.0
    for type_name, cols, weights in k.dense:
        ts = scales.get(scale_key(type_name, t), 1.0)
        mm += weights * ts * (r.ns_per_weight(type_name, t, cols) or 0.0)
    if n_outputs > 0:
        for type_name, cols, weights in k.output:
            ts = scales.get(scale_key(type_name, n_outputs), 1.0)
            mm += weights * ts * (r.ns_per_weight(type_name, n_outputs, cols) or 0.0)
    if k.experts and n_expert:
        p = n_expert_used / n_expert
        share = 1.0 - (1.0 - p) ** t  # expected share of the experts some token picks
        per_expert = max(1, round(t * p / share))  # tokens each picked expert multiplies
        for type_name, cols, weights in k.experts:
            ts = scales.get(scale_key(type_name, per_expert), 1.0)
            mm += weights * share * ts * (r.ns_per_weight(type_name, per_expert, cols) or 0.0)
    work = k.attn_full * ctx_full + k.attn_swa * ctx_swa
    if k.flash_attn:
        attn = work * (r.attention_ns(k.kv_type, k.head_dim, t) or 0.0)
    else:
        # KQ and KQV as products: each KV head's cells times its query rows
        kv_work = 2.0 * (k.attn_kv_full * ctx_full + k.attn_kv_swa * ctx_swa) / t
        rows = max(1, round(t * k.group))
        attn = kv_work * (r.ns_per_weight(k.kv_type, rows, k.head_dim) or 0.0)
    attn *= dict(factors.host_attention_scales).get(attention_key(k.kv_type, k.head_dim, t), 1.0)
    nodes_s = (k.n_nodes * r.node_us + r.decode_us) * 1e-6
    return (
        mm * 1e-9 * factors.host_kernel_scale
        + attn * 1e-9 * factors.host_attention_scale
        + nodes_s * factors.host_node_scale
    )


def _swa_sum(start: int, n: int, n_swa: int) -> float:
    """Return Σ_{i=1..n} min(start + i, n_swa): the cells tokens start+1…start+n attend to
    on a sliding-window layer."""
    if n <= 0:
        return 0.0
    k = max(0, min(n, n_swa - start))  # tokens still inside the window
    return k * start + k * (k + 1) / 2 + (n - k) * n_swa


def _busy(d: DeviceWork) -> bool:
    return d.weight_bytes > 0 or d.kv_bytes_per_depth > 0 or d.layer_flops > 0


def gpu_step_cpu_s(work: Workload, factors: SpeedFactors | None = None) -> float:
    """Return the CPU's time to prepare and launch one decode step on a GPU: the graph's
    nodes × ``gpu_node_overhead_s`` when a GPU does part of the step, else 0."""
    if not any(d.kind == "gpu" and _busy(d) for d in work.devices):
        return 0.0
    return work.n_nodes * (factors or SpeedFactors()).gpu_node_overhead_s


def _expert_share(work: Workload, n_users: int) -> float:
    """Expected share of all experts that ``n_users`` tokens touch, over one token's share."""
    if not work.n_expert or n_users <= 1:
        return 1.0
    p = work.n_expert_used / work.n_expert
    return (1.0 - (1.0 - p) ** n_users) / p


# --- predictions -------------------------------------------------------------------------


def decode_step_s(
    work: Workload, *, depth: int, n_users: int = 1, factors: SpeedFactors | None = None
) -> float:
    """Return seconds for one decode step of ``n_users`` tokens, each at ``depth``.

    ``Σ_d (weights_d + n·KV_d(depth)) / bw_d + (n−1)·FLOPs_d / rate_d`` plus the largest
    per-token overhead of the devices that work. The first token's compute is inside the
    bandwidth efficiency (the published ratios are single-user decode).
    """
    assert depth >= 0, f"depth must be ≥ 0, got {depth}"
    assert n_users >= 1, f"users must be ≥ 1, got {n_users}"
    factors = factors or SpeedFactors()
    share = _expert_share(work, n_users)
    node_s = gpu_step_cpu_s(work, factors)
    total = 0.0
    overhead = 0.0
    for d in work.devices:
        if not _busy(d):
            continue
        if d.kernels is not None:
            cells = depth + 1  # each token attends to the cache and to itself
            total += kernel_graph_s(
                d.kernels,
                factors,
                n_tokens=n_users,
                ctx_full=n_users * cells,
                ctx_swa=n_users * (min(cells, work.n_swa) if work.n_swa else cells),
                n_outputs=n_users,
                n_expert=work.n_expert,
                n_expert_used=work.n_expert_used,
            )
            continue
        swa = min(depth, work.n_swa) if work.n_swa else depth
        kv = (d.kv_bytes_per_depth * depth + d.swa_kv_bytes_per_depth * swa) * d.kv_read_scale
        kv += d.state_bytes
        weights = d.weight_bytes + d.expert_bytes * (share - 1.0)
        total += (weights + n_users * kv) / d.bandwidth_bytes_per_s
        if d.expert_product_s:  # each expert any of the tokens picks, once per tensor
            total += d.expert_tensors * work.n_expert_used * share * d.expert_product_s
        attn = d.attn_flops_per_depth * depth + d.swa_attn_flops_per_depth * swa
        flops = d.layer_flops + d.head_flops + attn
        total += (n_users - 1) * flops / d.flops_per_s
        if d.kv_quantized:  # dequantizing the cells attended to, for every user
            total += n_users * (factors.quant_kv_attention_factor - 1.0) * attn / d.flops_per_s
        overhead = max(overhead, d.overhead_s + (node_s if d.kind == "gpu" else 0.0))
    return (total + overhead) * factors.decode_scale


def prefill_s(
    work: Workload,
    *,
    n_tokens: int,
    depth: int = 0,
    factors: SpeedFactors | None = None,
    n_seqs: int = 1,
) -> float:
    """Return seconds to process a prompt of ``n_tokens`` after ``depth`` cached tokens.

    With ``n_seqs`` > 1, as many users' prompts of that size go through together (one
    batch, as a server fills it for users arriving at once), each after ``depth`` tokens
    of its own. FLOPs (layers per token, attention over the growing context, the output
    head once per prompt) over each device's compute rate, plus one read of each device's
    weights per micro-batch of ``n_ubatch`` tokens; on a CPU whose kernels were measured,
    each micro-batch is priced by them (:func:`kernel_graph_s`).
    """
    assert n_tokens >= 1, f"n_tokens must be ≥ 1, got {n_tokens}"
    assert depth >= 0, f"depth must be ≥ 0, got {depth}"
    assert n_seqs >= 1, f"n_seqs must be ≥ 1, got {n_seqs}"
    factors = factors or SpeedFactors()
    n_ubatch = max(1, work.n_ubatch)
    total_tokens = n_tokens * n_seqs
    n_micro = math.ceil(total_tokens / n_ubatch)
    # Σ over the prompt's tokens of the context each one attends to
    ctx_sum = n_tokens * depth + n_tokens * (n_tokens - 1) / 2
    swa_sum = ctx_sum
    if work.n_swa:  # Σ min(depth + i, n_swa): the window caps what a token attends to
        k = max(0, min(n_tokens, work.n_swa - depth))
        swa_sum = k * depth + k * (k - 1) / 2 + (n_tokens - k) * work.n_swa
    total = 0.0
    for d in work.devices:
        if not _busy(d):
            continue
        if d.kernels is not None:
            total += _kernel_prefill_s(d.kernels, work, factors, n_tokens, depth, n_seqs)
            continue
        attn = d.attn_flops_per_depth * ctx_sum + d.swa_attn_flops_per_depth * swa_sum
        if d.kv_quantized:
            attn *= factors.quant_kv_attention_factor
        attn /= d.attention_efficiency
        products = d.layer_flops * n_tokens + d.head_flops
        products_s = 0.0
        if d.mmq_flops_per_s > 0:  # quantized products on the int8 tensor cores (MMQ)
            mmq = d.mmq_layer_flops * n_tokens + d.mmq_head_flops
            products_s += n_seqs * mmq / d.mmq_flops_per_s
            products -= mmq
        products_s += n_seqs * products / d.flops_per_s
        total += products_s + n_seqs * attn / d.flops_per_s
        read = n_micro * d.all_weight_bytes + total_tokens * d.lookup_bytes
        total += read / d.bandwidth_bytes_per_s
    return total * factors.prefill_scale


def _kernel_prefill_s(
    k: KernelWork, work: Workload, factors: SpeedFactors, n_tokens: int, depth: int, n_seqs: int
) -> float:
    """Price ``n_seqs`` prompts of ``n_tokens`` after ``depth`` on the host's kernels.

    One prompt is cut into micro-batches of ``n_ubatch`` in order (each attends to what
    came before it); several prompts share micro-batches, each micro-batch taking an equal
    share of every prompt (llama.cpp's ``split_equal`` for several sequences)."""
    n_ubatch = max(1, work.n_ubatch)

    def swa(start: int, c: int) -> float:
        if work.n_swa:
            return _swa_sum(start, c, work.n_swa)
        return c * start + c * (c + 1) / 2

    total = 0.0
    if n_seqs == 1:
        for start in range(0, n_tokens, n_ubatch):
            c = min(n_ubatch, n_tokens - start)
            d0 = depth + start
            total += kernel_graph_s(
                k,
                factors,
                n_tokens=c,
                ctx_full=c * d0 + c * (c + 1) / 2,
                ctx_swa=swa(d0, c),
                n_outputs=1 if start + c >= n_tokens else 0,
                n_expert=work.n_expert,
                n_expert_used=work.n_expert_used,
            )
        return total
    per_ub = max(1, n_ubatch // n_seqs)  # tokens of each prompt in one micro-batch
    for start in range(0, n_tokens, per_ub):
        c = min(per_ub, n_tokens - start)
        d0 = depth + start
        total += kernel_graph_s(
            k,
            factors,
            n_tokens=c * n_seqs,
            ctx_full=n_seqs * (c * d0 + c * (c + 1) / 2),
            ctx_swa=n_seqs * swa(d0, c),
            n_outputs=n_seqs if start + c >= n_tokens else 0,
            n_expert=work.n_expert,
            n_expert_used=work.n_expert_used,
        )
    return total


def batch_s(
    work: Workload,
    *,
    decode_depths: Sequence[int],
    prompt_parts: Sequence[tuple[int, int, bool]],
    factors: SpeedFactors | None = None,
) -> float:
    """Return seconds for one ``llama_decode`` of a server's batch: the next token of each
    user decoding (``decode_depths``: the tokens each has cached) and parts of prompts
    (``(tokens, cached before them, ends the prompt)``), as continuous batching mixes them.

    On a CPU priced by its kernels the batch is one graph (or several micro-batches) of all
    its tokens; elsewhere it costs a decode step of the decoding users plus the prompts'
    prefill (the weights read once more: an upper bound).
    """
    factors = factors or SpeedFactors()
    n_dec = len(decode_depths)
    n_new = n_dec + sum(c for c, _d, _e in prompt_parts)
    assert n_new >= 1, "a batch needs at least one token"
    total = 0.0
    kernel_devices = [d for d in work.devices if d.kernels is not None and _busy(d)]
    for d in kernel_devices:
        assert d.kernels is not None
        full = sum(dd + 1 for dd in decode_depths) + sum(
            c * d0 + c * (c + 1) / 2 for c, d0, _e in prompt_parts
        )
        if work.n_swa:
            swa = sum(min(dd + 1, work.n_swa) for dd in decode_depths) + sum(
                _swa_sum(d0, c, work.n_swa) for c, d0, _e in prompt_parts
            )
        else:
            swa = full
        n_out = n_dec + sum(1 for _c, _d, ends in prompt_parts if ends)
        n_micro = math.ceil(n_new / max(1, work.n_ubatch))
        for _ in range(n_micro):
            total += kernel_graph_s(
                d.kernels,
                factors,
                n_tokens=math.ceil(n_new / n_micro),
                ctx_full=full / n_micro,
                ctx_swa=swa / n_micro,
                n_outputs=math.ceil(n_out / n_micro),
                n_expert=work.n_expert,
                n_expert_used=work.n_expert_used,
            )
    if len(kernel_devices) == sum(1 for d in work.devices if _busy(d)):
        return total
    rest = dataclasses.replace(work, devices=tuple(d for d in work.devices if d.kernels is None))
    if n_dec:
        mean = round(sum(decode_depths) / n_dec)
        total += decode_step_s(rest, depth=mean, n_users=n_dec, factors=factors)
    for c, d0, _ends in prompt_parts:
        total += prefill_s(rest, n_tokens=c, depth=d0, factors=factors)
    return total


@dataclass(frozen=True, slots=True)
class SpeedPrediction:
    """Predicted speed for one setting (see the module doc); units in the names.

    ``decode_tok_per_s`` for one user at ``depth``; ``prefill_tok_per_s`` for a prompt of
    ``n_prompt`` tokens from an empty cache; ``ttft_s`` the time to first token for it;
    ``per_user_tok_per_s``/``aggregate_tok_per_s`` with ``n_users`` decoding together,
    each at ``depth``. ``bottleneck`` names the device that takes the most decode time.
    """

    depth: int
    n_prompt: int
    n_users: int
    decode_tok_per_s: float
    prefill_tok_per_s: float
    ttft_s: float
    per_user_tok_per_s: float
    aggregate_tok_per_s: float
    bottleneck: str
    device_decode_s: tuple[tuple[str, float], ...]
    factors_source: str
    host_kernels: bool | None = None
    """How the CPU's share is priced: True by this CPU's timed kernels
    (:class:`~app.hardware.kernels.KernelRates`), False by its bandwidth alone (a rough
    figure: the kernels this model needs were not timed on this machine yet), None when
    the CPU runs no layer and no output head."""


def host_pricing(work: Workload) -> bool | None:
    """Return :attr:`SpeedPrediction.host_kernels` for ``work``."""
    for d in work.devices:
        if d.kind == "host" and (d.layer_flops > 0 or d.head_flops > 0):
            return d.kernels is not None
    return None


def predict_speed(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    *,
    depth: int = 0,
    n_prompt: int = 512,
    n_users: int = 1,
    factors: SpeedFactors | None = None,
) -> SpeedPrediction:
    """Return decode and prefill speed, TTFT and per-user/aggregate speed (pure, ~ms).

    >>> predict_speed(spec, Settings(n_ctx=8192), hw, depth=4096)  # doctest: +SKIP
    """
    factors = factors or SpeedFactors()
    work = workload(spec, settings, hardware, factors)
    one = decode_step_s(work, depth=depth, factors=factors)
    many = decode_step_s(work, depth=depth, n_users=n_users, factors=factors)
    pp = prefill_s(work, n_tokens=n_prompt, factors=factors)
    per_dev = []
    for d in work.devices:
        if not _busy(d):
            continue
        swa = min(depth, work.n_swa) if work.n_swa else depth
        kv = d.kv_bytes_per_depth * depth + d.swa_kv_bytes_per_depth * swa + d.state_bytes
        per_dev.append((d.name, (d.weight_bytes + kv) / d.bandwidth_bytes_per_s))
    bottleneck = max(per_dev, key=lambda x: x[1])[0] if per_dev else ""
    return SpeedPrediction(
        depth=depth,
        n_prompt=n_prompt,
        n_users=n_users,
        decode_tok_per_s=1.0 / one,
        prefill_tok_per_s=n_prompt / pp,
        ttft_s=pp,
        per_user_tok_per_s=1.0 / many,
        aggregate_tok_per_s=n_users / many,
        bottleneck=bottleneck,
        device_decode_s=tuple(per_dev),
        factors_source=factors.source,
        host_kernels=host_pricing(work),
    )


def predict_users(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    *,
    n_users: int,
    depth: int,
    factors: SpeedFactors | None = None,
) -> SpeedPrediction:
    """Return the prediction for ``n_users`` decoding together, each at ``depth``."""
    return predict_speed(spec, settings, hardware, depth=depth, n_users=n_users, factors=factors)


# --- calibration -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpeedMeasurement:
    """One measured speed: ``n_tokens`` of ``kind`` after ``depth`` cached tokens.

    ``model_key`` names the model file (its fast hash, or its file name) so a model's own
    runs can correct its predictions. ``spec``/``settings``/``hardware`` describe the run
    (the hardware as this machine was when it ran).
    """

    spec: ModelSpec
    settings: Settings
    hardware: Hardware
    kind: SpeedKind
    n_tokens: int
    depth: int
    tok_per_s: float
    model_key: str = ""
    n_users: int = 1
    """Users served together: a ``tg`` step decodes one token for each (``tok_per_s`` is
    each user's speed); a ``pp`` test prefills that many prompts of ``n_tokens`` in one
    batch (``tok_per_s`` is one prompt's tokens over the time)."""


def rerate(work: Workload, hardware: Hardware, factors: SpeedFactors) -> Workload:
    """Return ``work`` with each device's rates recomputed under ``factors`` (fast)."""
    devices = []
    for d, dev in zip(work.devices, hardware.devices, strict=True):
        r = _rates(dev, factors)
        devices.append(
            dataclasses.replace(
                d,
                bandwidth_bytes_per_s=r.bandwidth,
                flops_per_s=r.flops,
                overhead_s=r.overhead,
                mmq_flops_per_s=r.mmq,
                kv_read_scale=r.kv_scale,
                expert_product_s=r.expert_product_s,
                attention_efficiency=r.attention,
            )
        )
    return dataclasses.replace(work, devices=tuple(devices))


def predict_measurement(
    m: SpeedMeasurement, factors: SpeedFactors, work: Workload | None = None
) -> float:
    """Return the predicted tok/s for the test ``m`` describes under ``factors``.

    ``work`` is ``workload(m.spec, m.settings, m.hardware)`` when the caller has it.
    """
    if work is None:
        work = workload(m.spec, m.settings, m.hardware, factors)
    else:
        work = rerate(work, m.hardware, factors)
    if m.kind == "tg":
        # a tg test decodes n_tokens one by one from depth: the mean step
        mid = m.depth + m.n_tokens // 2
        return 1.0 / decode_step_s(work, depth=mid, n_users=m.n_users, factors=factors)
    return m.n_tokens / prefill_s(
        work, n_tokens=m.n_tokens, depth=m.depth, factors=factors, n_seqs=m.n_users
    )


def _weight_types(work: Workload) -> list[str]:
    """Return the keys of the host's weight types in ``work`` (:func:`scale_key`), for one
    token and for several."""
    found = {
        scale_key(t, n)
        for n in (1, 2)
        for d in work.devices
        if d.kernels is not None
        for t, _c, _w in (*d.kernels.dense, *d.kernels.experts, *d.kernels.output)
    }
    return sorted(found)


def _attention_keys(work: Workload) -> list[str]:
    """Return the keys of the host's attention kernels in ``work`` (:func:`attention_key`),
    for both paths."""
    return sorted(
        {
            attention_key(d.kernels.kv_type, d.kernels.head_dim, n)
            for n in (1, FLASH_TILE_ROWS)
            for d in work.devices
            if d.kernels is not None
        }
    )


def _kernel_parts(
    m: SpeedMeasurement, work: Workload
) -> tuple[dict[str, float], dict[str, float], float] | None:
    """Return the seconds of ``m``'s test spent in the host's matrix products (by weight
    type), attention (by kernel) and graph nodes at unit scales, or None when the run is
    not priced by kernels alone."""
    if not all(d.kernels is not None for d in work.devices if _busy(d)):
        return None
    size = m.n_tokens if m.kind == "pp" else 1.0

    def seconds(c: float, zero: str | None = None, zero_attention: str | None = None) -> float:
        f = SpeedFactors(
            host_node_scale=c,
            host_type_scales=((zero, 0.0),) if zero else (),
            host_attention_scales=((zero_attention, 0.0),) if zero_attention else (),
        )
        return size / predict_measurement(m, f, work)

    full = seconds(1.0)
    products = {t: full - seconds(1.0, t) for t in _weight_types(work)}
    attention = {a: full - seconds(1.0, zero_attention=a) for a in _attention_keys(work)}
    return (
        {t: v for t, v in products.items() if v > 0},
        {a: v for a, v in attention.items() if v > 0},
        full - seconds(0.0),
    )


class _Works:
    """Workloads of measurements, computed once per (spec, settings, hardware)."""

    def __init__(self) -> None:
        self._cache: dict[tuple[int, Settings, Hardware], tuple[ModelSpec, Workload]] = {}

    def of(self, m: SpeedMeasurement) -> Workload:
        key = (id(m.spec), m.settings, m.hardware)
        found = self._cache.get(key)
        if found is None:
            found = (m.spec, workload(m.spec, m.settings, m.hardware))  # the spec stays alive
            self._cache[key] = found
        return found[1]


def _fit_log_scales(
    rows: Sequence[tuple[Sequence[float], float]],
    priors: Sequence[float],
    n_attention: int = 1,
    iterations: int = 40,
) -> list[float]:
    """Return scales (k, b, c, a_1 … a_m, s_1 … s_n) > 0 minimising Σ log²(p / t) +
    Σ prior_i·log² scale_i, with ``p = b·Σ a_j·attention_j + c·nodes + k·Σ s_i·products_i``.

    ``rows`` are ((attention_1 … attention_m, nodes, products_1 … products_n), t): the
    seconds of each part at unit scales and the measured seconds; ``n_attention`` is m.
    Levenberg-Marquardt on the logs of the scales (Gaussian elimination on the normal
    equations); starts at 1 (the kernels as measured).
    """
    n = len(priors)
    na = n_attention
    u = [0.0] * n
    damping = 1e-3

    def shares(e: Sequence[float], x: Sequence[float]) -> tuple[float, list[float]]:
        """Return p and d p / d log scale_i."""
        attn = [e[1] * a * q for a, q in zip(e[3 : 3 + na], x[:na], strict=True)]
        typed = [e[0] * s * q for s, q in zip(e[3 + na :], x[na + 1 :], strict=True)]
        d = [sum(typed), sum(attn), e[2] * x[na], *attn, *typed]
        return d[0] + d[1] + d[2], d

    def cost(v: Sequence[float]) -> float:
        e = [math.exp(x) for x in v]
        total = sum(w * x * x for w, x in zip(priors, v, strict=True))
        for x, t in rows:
            p, _ = shares(e, x)
            total += math.log(p / t) ** 2 if p > 0 else 1e9
        return total

    current = cost(u)
    for _ in range(iterations):
        e = [math.exp(x) for x in u]
        jtj = [[0.0] * n for _ in range(n)]
        jtr = [0.0] * n
        for x, t in rows:
            p, d = shares(e, x)
            if p <= 0:
                continue
            r = math.log(p / t)
            j = [q / p for q in d]
            for i in range(n):
                if j[i] == 0.0:
                    continue
                jtr[i] += j[i] * r
                for k in range(n):
                    jtj[i][k] += j[i] * j[k]
        for i in range(n):
            jtr[i] += priors[i] * u[i]
            jtj[i][i] += priors[i]
        improved = False
        while damping < 1e6:
            a = [[jtj[i][k] + (damping * jtj[i][i] if i == k else 0.0) for k in range(n)]
                 for i in range(n)]  # fmt: skip
            step = _solve(a, [-v for v in jtr])
            trial = [u[i] + step[i] for i in range(n)]
            c = cost(trial)
            if c < current:
                u, current, damping, improved = trial, c, damping / 3, True
                break
            damping *= 4
        if not improved:
            break
    return [math.exp(x) for x in u]


def _solve(a: Sequence[Sequence[float]], b: Sequence[float]) -> list[float]:
    """Solve a small linear system by Gaussian elimination (zeros when it is singular)."""
    n = len(b)
    m = [[*a[i], b[i]] for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            return [0.0] * n
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for k in range(col, n + 1):
                m[r][k] -= f * m[col][k]
    out = [0.0] * n
    for r in range(n - 1, -1, -1):
        out[r] = (m[r][n] - sum(m[r][k] * out[k] for k in range(r + 1, n))) / m[r][r]
    return out


def _priced_by_kernels(m: SpeedMeasurement, works: _Works | None = None) -> bool:
    work = (works or _Works()).of(m)
    return all(d.kernels is not None for d in work.devices if _busy(d))


KERNEL_SCALE_PRIOR: Final = 0.002
"""Weight of the pull of each kernel scale towards 1 (squared log), per measurement: with
few runs the fit stays near what the kernels measured."""

TYPE_SCALE_PRIOR: Final = 0.01
"""The same pull for each weight type's own scale, per measurement that has that type:
stronger than the common scale's, so what all types share goes to ``host_kernel_scale``
and a type's scale only keeps what sets it apart."""


def _fit_kernels(
    group: Sequence[SpeedMeasurement], f: SpeedFactors, works: _Works | None = None
) -> SpeedFactors:
    """Fit the host's kernel, attention and node scales to runs priced by its kernels.

    Each test's time is ``k·Σ_type s_type·products_type + b·Σ_kernel a_kernel·attention_kernel
    + c·nodes`` (the parts at unit scales); the common scales k, b, c, one scale per weight
    type and one per attention kernel (:func:`attention_key`) minimise the squared log
    error of the times plus a weak pull towards 1 (a stronger one on the type and kernel
    scales, :data:`TYPE_SCALE_PRIOR`).
    """
    found = []
    works = works or _Works()
    for m in group:
        parts = _kernel_parts(m, works.of(m))
        if parts is None:
            continue
        measured_s = (m.n_tokens if m.kind == "pp" else 1.0) / m.tok_per_s
        found.append((parts, measured_s))
    if not found:
        return f
    types = sorted({t for (products, _a, _n), _s in found for t in products})
    kernels = sorted({k for (_p, attention, _n), _s in found for k in attention})
    na = len(kernels)
    rows = [
        (
            (
                *(attention.get(k, 0.0) for k in kernels),
                n,
                *(products.get(t, 0.0) for t in types),
            ),
            measured_s,
        )
        for (products, attention, n), measured_s in found
    ]
    counts = [sum(1 for x, _s in rows if x[i] > 0) for i in range(na)] + [
        sum(1 for x, _s in rows if x[na + 1 + i] > 0) for i in range(len(types))
    ]
    # unknowns: the common kernel scale, attention, nodes, then one per attention kernel
    # and one per weight type
    priors = [KERNEL_SCALE_PRIOR * len(rows)] * 3 + [TYPE_SCALE_PRIOR * c for c in counts]
    best = _fit_log_scales(rows, priors, n_attention=na)
    return dataclasses.replace(
        f,
        host_kernel_scale=best[0],
        host_attention_scale=best[1],
        host_node_scale=best[2],
        host_attention_scales=tuple(zip(kernels, best[3 : 3 + na], strict=True)),
        host_type_scales=tuple(zip(types, best[3 + na :], strict=True)),
    )


def _log_error(points: Sequence[tuple[float, float]]) -> float:
    return sum(math.log(p / m) ** 2 for p, m in points)


def _single_kind(m: SpeedMeasurement, works: _Works | None = None) -> DeviceClass | None:
    """Return the kind of device that holds (almost) all the work of ``m``, if one does."""
    work = (works or _Works()).of(m)
    total = sum(d.weight_bytes for d in work.devices) or 1.0
    for d in work.devices:
        if d.weight_bytes / total >= 0.95:
            return d.kind
    return None


def _grid(lo: float, hi: float, n: int) -> list[float]:
    return [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]


_EFF_FIELD: Final[dict[DeviceClass, tuple[str, str]]] = {
    "host": ("host_bandwidth_efficiency", "host_overhead_s"),
    "gpu": ("gpu_bandwidth_efficiency", "gpu_overhead_s"),
    "unified": ("unified_bandwidth_efficiency", "unified_overhead_s"),
}


def calibrate(
    measurements: Iterable[SpeedMeasurement],
    base: SpeedFactors | None = None,
    *,
    model_key: str | None = None,
) -> SpeedFactors:
    """Return ``base`` with its factors fitted to ``measurements`` (pure; defaults if none).

    Per kind of device that did (nearly) all the work of a run: decode bandwidth
    efficiency and per-token overhead by a grid search minimising the squared log error
    of tok/s (efficiency capped at 1.0 of the device's bandwidth: a fit that wants more
    says the per-token overhead dominates); the CPU's prefill rate (or the GPU's compute
    efficiency) as the median that explains each prefill run. With ``model_key``, the
    runs of that model then fit ``decode_scale``/``prefill_scale`` (median ratio of
    measured to predicted time), so its own history corrects its prediction.
    """
    factors = base or SpeedFactors()
    ms = [m for m in measurements if m.tok_per_s > 0 and math.isfinite(m.tok_per_s)]
    if not ms:
        return factors
    factors = dataclasses.replace(factors, decode_scale=1.0, prefill_scale=1.0)
    by_kind: dict[DeviceClass, list[SpeedMeasurement]] = {}
    works = _Works()
    for m in ms:
        kind = _single_kind(m, works)
        if kind is not None:
            by_kind.setdefault(kind, []).append(m)
    for kind, group in by_kind.items():
        if kind == "host":
            factors = _fit_kernels(group, factors, works)
            group = [m for m in group if not _priced_by_kernels(m, works)]
        # prefill first (decode does not depend on it), then decode
        pps = [m for m in group if m.kind == "pp"]
        if pps:
            factors = _fit_prefill(kind, pps, factors)
        tgs = [m for m in group if m.kind == "tg"]
        if tgs:
            factors = _fit_decode(kind, tgs, factors)
    if model_key:
        own = [m for m in ms if m.model_key == model_key]
        scales: dict[str, float] = {}
        for kind_name in ("tg", "pp"):
            ratios = [
                predict_measurement(m, factors) / m.tok_per_s for m in own if m.kind == kind_name
            ]
            if ratios:
                scales[kind_name] = statistics.median(ratios)
        factors = dataclasses.replace(
            factors,
            decode_scale=scales.get("tg", 1.0),
            prefill_scale=scales.get("pp", 1.0),
        )
    n = len(ms)
    own_note = f", corrected by {model_key}'s own runs" if model_key else ""
    return dataclasses.replace(
        factors,
        n_measurements=n,
        source=f"fitted to {n} measurement(s) on this machine{own_note}",
    )


def _fit_decode(
    kind: DeviceClass, group: Sequence[SpeedMeasurement], f: SpeedFactors
) -> SpeedFactors:
    eff_name, over_name = _EFF_FIELD[kind]
    works = [workload(m.spec, m.settings, m.hardware, f) for m in group]
    best: tuple[float, SpeedFactors] | None = None
    for eff in _grid(0.02, 1.0, 48):
        for over_ms in (0.0, *_grid(0.05, 30.0, 40)):
            changes: dict[str, Any] = {eff_name: eff, over_name: over_ms / 1000.0}
            trial = dataclasses.replace(f, **changes)
            err = _log_error(
                [
                    (predict_measurement(m, trial, w), m.tok_per_s)
                    for m, w in zip(group, works, strict=True)
                ]
            )
            if best is None or err < best[0]:
                best = (err, trial)
    assert best is not None
    return best[1]


def _fit_prefill(
    kind: DeviceClass, group: Sequence[SpeedMeasurement], f: SpeedFactors
) -> SpeedFactors:
    """Fit the compute rate of ``kind`` on prefill runs, then the quantized-KV factor.

    A run's time is compute (FLOPs / rate) plus weight reads (bandwidth): the rate that
    explains it is ``compute_s / (measured_s - reads_s)`` times the assumed one (median
    over the runs with an f16 cache, or all when there are none). Runs with a quantized
    cache then give the factor on their attention FLOPs the same way.
    """
    plain = [m for m in group if not _quantized(m.settings)] or list(group)
    ratios = []
    for m in plain:
        reads_s, compute_s, _ = _prefill_parts(m, f)
        spare = m.n_tokens / m.tok_per_s - reads_s
        if compute_s > 0 and spare > 0:
            ratios.append(compute_s / spare)
    if ratios:
        ratio = statistics.median(ratios)
        if kind == "host" and not any(m.hardware.host.fp16_tflops for m in group):
            f = dataclasses.replace(f, host_compute_gflops=f.host_compute_gflops * ratio)
        else:  # one scale for the GPU's FP16 and MMQ products
            f = dataclasses.replace(
                f,
                gpu_compute_efficiency=f.gpu_compute_efficiency * ratio,
                gpu_mmq_efficiency=f.gpu_mmq_efficiency * ratio,
                unified_mmq_efficiency=f.unified_mmq_efficiency * ratio,
            )
    factors = []
    for m in group:
        if not _quantized(m.settings):
            continue
        reads_s, compute_s, attn_s = _prefill_parts(
            m, dataclasses.replace(f, quant_kv_attention_factor=1.0)
        )
        spare = m.n_tokens / m.tok_per_s - reads_s - (compute_s - attn_s)
        if attn_s > 0 and spare > 0:
            factors.append(spare / attn_s)
    if factors:
        f = dataclasses.replace(f, quant_kv_attention_factor=max(1.0, statistics.median(factors)))
    return f


def _quantized(settings: Settings) -> bool:
    return any(
        t not in ("f32", "f16", "bf16") for t in (settings.cache_type_k, settings.cache_type_v)
    )


def _prefill_parts(m: SpeedMeasurement, f: SpeedFactors) -> tuple[float, float, float]:
    """Return (weight-read s, compute s, attention compute s) of a prefill run under ``f``."""
    work = workload(m.spec, m.settings, m.hardware, f)
    reads_only = dataclasses.replace(
        work,
        devices=tuple(
            dataclasses.replace(d, flops_per_s=math.inf, mmq_flops_per_s=math.inf)
            for d in work.devices
        ),
    )
    no_attn = dataclasses.replace(
        work,
        devices=tuple(
            dataclasses.replace(d, attn_flops_per_depth=0.0, swa_attn_flops_per_depth=0.0)
            for d in work.devices
        ),
    )
    reads_s = prefill_s(reads_only, n_tokens=m.n_tokens, depth=m.depth)
    total_s = prefill_s(work, n_tokens=m.n_tokens, depth=m.depth, factors=f)
    no_attn_s = prefill_s(no_attn, n_tokens=m.n_tokens, depth=m.depth, factors=f)
    return reads_s, total_s - reads_s, total_s - no_attn_s


def settings_from_dict(data: Mapping[str, Any]) -> Settings:
    """Return the :class:`Settings` stored as ``dataclasses.asdict`` (a run's record)."""
    fields = {f.name for f in dataclasses.fields(Settings)}
    values = {k: v for k, v in data.items() if k in fields}
    if "tensor_split" in values:
        values["tensor_split"] = tuple(values["tensor_split"])
    if "tensor_overrides" in values:  # JSON keeps the (pattern, buffer) pairs as lists
        values["tensor_overrides"] = tuple(tuple(p) for p in values["tensor_overrides"])
    return Settings(**values)


def measurements_from_record(
    record: Mapping[str, Any], spec: ModelSpec, hardware: Hardware, *, model_key: str = ""
) -> tuple[SpeedMeasurement, ...]:
    """Return the speeds of one stored run (:func:`app.measured.bench_result.result_to_dict`).

    ``spec`` is the run's model and ``hardware`` this machine (the run's own hardware
    fingerprint matched it). Each pp/tg test becomes one measurement.
    """
    settings = settings_from_dict(record["settings"])
    out = []
    for s in record.get("speeds", ()):
        tok = float(s["tok_per_s"])
        if s["kind"] not in ("pp", "tg") or not math.isfinite(tok) or tok <= 0:
            continue
        out.append(
            SpeedMeasurement(
                spec=spec,
                settings=settings,
                hardware=hardware,
                kind=s["kind"],
                n_tokens=int(s["n_tokens"]),
                depth=int(s["depth"]),
                tok_per_s=tok,
                model_key=model_key,
            )
        )
    return tuple(out)


# --- speculative decoding and the network of an RPC split --------------------------------

DEFAULT_DRAFT_ACCEPTANCE: Final = 0.7
"""Acceptance rate α assumed for a draft model: a ggtune assumption. It depends on how
alike the two models are; llama.cpp measured 1.7× on an RTX 3060 with a 1B draft for an
8B (#5877) and no gain at low acceptance (PR #10455) (docs/sources.md §5)."""

MIN_DRAFT_SPEED_RATIO: Final = 2.5
"""A draft must decode at least 2.5× faster than the target to pay off (docs/sources.md §5)."""

MIN_DRAFT_SPEEDUP: Final = 1.1
"""The planner only recommends a draft whose predicted speed-up is above this."""


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Return the expected tokens one target step yields with ``k`` drafted tokens.

    ``(1 − α^(k+1)) / (1 − α)`` for a per-token acceptance rate ``α`` (Leviathan, Kalman
    and Matias 2023, "Fast Inference from Transformers via Speculative Decoding", eq. 1);
    ``k + 1`` when every draft token is accepted (α = 1).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance must be in [0, 1], got {alpha}")
    if k < 0:
        raise ValueError(f"draft length must be ≥ 0, got {k}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def speculative_speedup(alpha: float, k: int, t_draft_s: float, t_target_s: float) -> float:
    """Return the decode speed-up of drafting ``k`` tokens per target step.

    One step costs ``k·t_draft + t_target`` (the target verifies the ``k`` drafted tokens
    in one batch, taken to cost one ordinary decode step) and yields
    :func:`expected_tokens_per_step` tokens; without a draft a token costs ``t_target``.
    """
    step = k * t_draft_s + t_target_s
    return expected_tokens_per_step(alpha, k) * t_target_s / step


def best_draft_length(
    alpha: float, t_draft_s: float, t_target_s: float, *, k_max: int = 16
) -> tuple[int, float]:
    """Return the draft length in 1…``k_max`` with the largest speed-up, and that speed-up."""
    best = max(
        range(1, k_max + 1),
        key=lambda k: (speculative_speedup(alpha, k, t_draft_s, t_target_s), -k),
    )
    return best, speculative_speedup(alpha, best, t_draft_s, t_target_s)


DEFAULT_LINK_GBPS: Final = 1.0
"""Link between machines of an RPC split, Gbit/s (plain gigabit Ethernet): an assumption."""

DEFAULT_LINK_LATENCY_S: Final = 0.0005
"""One-way latency per transfer between machines, seconds (0.5 ms): an assumption."""


@dataclass(frozen=True, slots=True)
class Link:
    """The network between the machines of an RPC split: bandwidth and latency."""

    gbit_per_s: float = DEFAULT_LINK_GBPS
    latency_s: float = DEFAULT_LINK_LATENCY_S

    def __post_init__(self) -> None:
        if self.gbit_per_s <= 0 or self.latency_s < 0:
            raise ValueError("the link needs a bandwidth > 0 and a latency ≥ 0")


def with_network(
    pred: SpeedPrediction,
    *,
    decode_s: float,
    prefill_s: float,
    decode_batch_s: float | None = None,
) -> SpeedPrediction:
    """Return ``pred`` with ``decode_s`` added to each one-user decode step,
    ``decode_batch_s`` (default ``decode_s``) to each step of ``n_users`` together and
    ``prefill_s`` to the prompt (the network time of an RPC split,
    :meth:`app.predict.rpc_traffic.StepTraffic.seconds`)."""
    batch_s = decode_s if decode_batch_s is None else decode_batch_s
    if decode_s <= 0 and prefill_s <= 0 and batch_s <= 0:
        return pred
    one = 1.0 / pred.decode_tok_per_s + decode_s
    many = 1.0 / pred.per_user_tok_per_s + batch_s
    ttft = pred.ttft_s + prefill_s
    return dataclasses.replace(
        pred,
        decode_tok_per_s=1.0 / one,
        prefill_tok_per_s=pred.n_prompt / ttft,
        ttft_s=ttft,
        per_user_tok_per_s=1.0 / many,
        aggregate_tok_per_s=pred.n_users / many,
        device_decode_s=(*pred.device_decode_s, ("network", decode_s)),
    )
