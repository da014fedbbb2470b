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
  NVIDIA (llama.cpp #15013, default the middle, 0.72), the Apple fit above for unified
  memory, and for the CPU a share of the host bandwidth ``ggtune hw`` measured.
* **Prefill** is compute-bound: about ``2·active_params`` FLOPs per token (the output head
  once per prompt: only the last token's logits are computed), plus attention
  ``4·depth·n_head·head_dim`` per layer, over an effective compute rate
  (``fp16_tflops`` × efficiency on a GPU; on the CPU a rate fitted to measurements), plus
  one read of the weights per micro-batch.
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
from app.model.spec import ModelSpec
from app.predict.estimate import (
    check_cache_types,
    # the estimator's own placement, so speed and memory always agree on where tensors are
    place_layers,
    resolve_context,
    row_bytes,
    tensor_device,
)
from app.settings import Settings

SpeedKind = Literal["pp", "tg"]
DeviceClass = Literal["gpu", "host", "unified"]
"""A discrete GPU, a unified-memory GPU (Apple, DGX Spark) or the CPU host."""

GB: Final = 1e9

NVIDIA_BANDWIDTH_EFFICIENCY: Final = 0.72
"""llama.cpp decodes at 64–80 % of the bandwidth bound on NVIDIA (llama.cpp #15013)."""

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
"""Share of the dense FP16 rate prefill reaches on a GPU: a ggtune assumption (llama.cpp's
int8 MMQ kernels for quantized weights can beat the FP16 figure); calibrated when runs
exist."""

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
    multiplies ``fp16_tflops``; ``host_compute_gflops`` is the CPU's effective prefill
    rate (used when the host has no ``fp16_tflops``). ``quant_kv_attention_factor``
    multiplies the attention FLOPs when the KV cache is quantized (q8_0, q4_0 …): the CPU
    dequantizes every cell it attends to (fitted here: ~4-7× on the 2-core EPYC of
    docs/benchmarks.md; 1 until measured). ``decode_scale``/``prefill_scale``
    multiply predicted times for one model, fitted to that model's own runs (1 = none).
    ``source`` says where the numbers come from, in words.
    """

    gpu_bandwidth_efficiency: float = NVIDIA_BANDWIDTH_EFFICIENCY
    gpu_overhead_s: float = 0.0
    unified_bandwidth_efficiency: float = UNIFIED_BANDWIDTH_EFFICIENCY
    unified_overhead_s: float = UNIFIED_OVERHEAD_S
    host_bandwidth_efficiency: float = HOST_BANDWIDTH_EFFICIENCY
    host_overhead_s: float = 0.0
    gpu_compute_efficiency: float = GPU_COMPUTE_EFFICIENCY
    host_compute_gflops: float = HOST_COMPUTE_GFLOPS
    quant_kv_attention_factor: float = 1.0
    decode_scale: float = 1.0
    prefill_scale: float = 1.0
    n_measurements: int = 0
    source: str = "published ratios (docs/sources.md §5), not calibrated on this machine"


# --- work per token ---------------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class Workload:
    """A model with settings on hardware, reduced to per-device work (see DeviceWork)."""

    devices: tuple[DeviceWork, ...]
    n_swa: int
    n_expert: int
    n_expert_used: int
    n_ubatch: int

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
    return "unified" if device.unified_memory else "gpu"


def _rates(device: Device, factors: SpeedFactors) -> tuple[float, float, float]:
    """Return (bandwidth B/s, FLOP/s, overhead s) of ``device`` under ``factors``."""
    kind = _device_kind(device)
    if kind == "host":
        bw = (device.bandwidth_gb_per_s or DEFAULT_HOST_BANDWIDTH_GB_PER_S) * GB
        bw *= factors.host_bandwidth_efficiency
        if device.fp16_tflops:
            flops = device.fp16_tflops * 1e12 * factors.gpu_compute_efficiency
        else:
            flops = factors.host_compute_gflops * 1e9
        return bw, flops, factors.host_overhead_s
    bw = (device.bandwidth_gb_per_s or DEFAULT_GPU_BANDWIDTH_GB_PER_S) * GB
    flops = (device.fp16_tflops or DEFAULT_GPU_TFLOPS) * 1e12 * factors.gpu_compute_efficiency
    if kind == "unified":
        return bw * factors.unified_bandwidth_efficiency, flops, factors.unified_overhead_s
    return bw * factors.gpu_bandwidth_efficiency, flops, factors.gpu_overhead_s


def decode_bandwidth(device: Device, factors: SpeedFactors | None = None) -> float:
    """Return the bytes per second ``device`` reads while decoding (its bandwidth times the
    efficiency of its kind): what ranks devices by speed."""
    return _rates(device, factors or SpeedFactors())[0]


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
    all_weight = [0.0] * n
    layer_flops = [0.0] * n
    head_flops = [0.0] * n
    frac = spec.n_expert_used / spec.n_expert if spec.n_expert else 1.0

    def idx(dev: int) -> int:
        return host if dev < 0 else dev

    for t in spec.tensors:
        d = idx(tensor_device(t, placement, settings.n_cpu_moe))
        if t.role == "token_embedding":
            rows = t.shape[1] if len(t.shape) >= 2 else 1
            weight[d] += t.n_bytes / max(rows, 1)  # one row looked up per token
            all_weight[d] += t.n_bytes
            continue
        all_weight[d] += t.n_bytes
        if t.role == "expert":
            weight[d] += t.n_bytes * frac
            expert[d] += t.n_bytes * frac
            layer_flops[d] += 2.0 * t.n_elements * frac
        elif t.role == "output":
            weight[d] += t.n_bytes
            head_flops[d] += 2.0 * t.n_elements
        else:
            weight[d] += t.n_bytes
            if len(t.shape) >= 2:
                layer_flops[d] += 2.0 * t.n_elements
    if spec.tied_embeddings:
        embd = next((t for t in spec.tensors if t.name == "token_embd.weight"), None)
        if embd is not None:
            d = idx(placement.output_device)
            weight[d] += embd.n_bytes  # the output head multiplies the whole matrix
            head_flops[d] += 2.0 * embd.n_elements

    kv_full = [0.0] * n
    kv_swa = [0.0] * n
    attn_full = [0.0] * n
    attn_swa = [0.0] * n
    state = [0.0] * n
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

    quantized_kv = settings.cache_type_k not in ("f32", "f16", "bf16") or (
        settings.cache_type_v not in ("f32", "f16", "bf16")
    )
    works = []
    for i, dev in enumerate(devs):
        bw, flops, overhead = _rates(dev, factors)
        works.append(
            DeviceWork(
                name=dev.name,
                kind=_device_kind(dev),
                weight_bytes=weight[i],
                expert_bytes=expert[i],
                all_weight_bytes=all_weight[i],
                kv_bytes_per_depth=kv_full[i],
                swa_kv_bytes_per_depth=kv_swa[i],
                state_bytes=state[i],
                layer_flops=layer_flops[i],
                head_flops=head_flops[i],
                attn_flops_per_depth=attn_full[i],
                swa_attn_flops_per_depth=attn_swa[i],
                bandwidth_bytes_per_s=bw,
                flops_per_s=flops,
                overhead_s=overhead,
                kv_quantized=quantized_kv,
            )
        )
    return Workload(
        devices=tuple(works),
        n_swa=spec.n_swa if any(spec.is_swa) else 0,
        n_expert=spec.n_expert,
        n_expert_used=spec.n_expert_used,
        n_ubatch=ctx.n_ubatch,
    )


def _busy(d: DeviceWork) -> bool:
    return d.weight_bytes > 0 or d.kv_bytes_per_depth > 0 or d.layer_flops > 0


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
    total = 0.0
    overhead = 0.0
    for d in work.devices:
        if not _busy(d):
            continue
        swa = min(depth, work.n_swa) if work.n_swa else depth
        kv = d.kv_bytes_per_depth * depth + d.swa_kv_bytes_per_depth * swa + d.state_bytes
        weights = d.weight_bytes + d.expert_bytes * (share - 1.0)
        total += (weights + n_users * kv) / d.bandwidth_bytes_per_s
        attn = d.attn_flops_per_depth * depth + d.swa_attn_flops_per_depth * swa
        flops = d.layer_flops + d.head_flops + attn
        total += (n_users - 1) * flops / d.flops_per_s
        if d.kv_quantized:  # dequantizing the cells attended to, for every user
            total += n_users * (factors.quant_kv_attention_factor - 1.0) * attn / d.flops_per_s
        overhead = max(overhead, d.overhead_s)
    return (total + overhead) * factors.decode_scale


def prefill_s(
    work: Workload, *, n_tokens: int, depth: int = 0, factors: SpeedFactors | None = None
) -> float:
    """Return seconds to process a prompt of ``n_tokens`` after ``depth`` cached tokens.

    FLOPs (layers per token, attention over the growing context, the output head once)
    over each device's compute rate, plus one read of each device's weights per
    micro-batch of ``n_ubatch`` tokens.
    """
    assert n_tokens >= 1, f"n_tokens must be ≥ 1, got {n_tokens}"
    assert depth >= 0, f"depth must be ≥ 0, got {depth}"
    factors = factors or SpeedFactors()
    n_ubatch = max(1, work.n_ubatch)
    n_micro = math.ceil(n_tokens / n_ubatch)
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
        attn = d.attn_flops_per_depth * ctx_sum + d.swa_attn_flops_per_depth * swa_sum
        if d.kv_quantized:
            attn *= factors.quant_kv_attention_factor
        total += (d.layer_flops * n_tokens + d.head_flops + attn) / d.flops_per_s
        total += n_micro * d.all_weight_bytes / d.bandwidth_bytes_per_s
    return total * factors.prefill_scale


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


def rerate(work: Workload, hardware: Hardware, factors: SpeedFactors) -> Workload:
    """Return ``work`` with each device's rates recomputed under ``factors`` (fast)."""
    devices = []
    for d, dev in zip(work.devices, hardware.devices, strict=True):
        bw, flops, overhead = _rates(dev, factors)
        devices.append(
            dataclasses.replace(d, bandwidth_bytes_per_s=bw, flops_per_s=flops, overhead_s=overhead)
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
        return 1.0 / decode_step_s(work, depth=mid, factors=factors)
    return m.n_tokens / prefill_s(work, n_tokens=m.n_tokens, depth=m.depth, factors=factors)


def _log_error(points: Sequence[tuple[float, float]]) -> float:
    return sum(math.log(p / m) ** 2 for p, m in points)


def _single_kind(m: SpeedMeasurement) -> DeviceClass | None:
    """Return the kind of device that holds (almost) all the work of ``m``, if one does."""
    work = workload(m.spec, m.settings, m.hardware)
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
    for m in ms:
        kind = _single_kind(m)
        if kind is not None:
            by_kind.setdefault(kind, []).append(m)
    for kind, group in by_kind.items():
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
        else:
            f = dataclasses.replace(f, gpu_compute_efficiency=f.gpu_compute_efficiency * ratio)
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
        work, devices=tuple(dataclasses.replace(d, flops_per_s=math.inf) for d in work.devices)
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
