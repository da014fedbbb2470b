"""How fast is ``estimate()``? Target: ≤ 1 ms per call for a 1,000-tensor model.

Three figures: the same settings again (the compute buffers come from the memo), a context
not seen before (every cache of the compute model emptied: the graph is built, scheduled
and reserved), and a context slider over 64 positions (the compute model's lines answer
most ticks once a few were reserved).

Run: ``.venv/bin/python -m bench.bench_estimate`` (after ``python3 tasks.py run`` fetched the
demo models). Prints a markdown table for docs/benchmarks.md.

The 1,000-tensor model is Gemma-3 270M's real header widened to 96 layers (each layer's
tensors repeated), so the estimator walks 1,000+ tensors with real types and shapes.
"""

from __future__ import annotations

import dataclasses
import platform
import statistics
import time

from app.hardware.devices import Hardware
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, TensorSpec, model_spec
from app.predict import estimate as estimate_module
from app.predict.estimate import estimate
from app.predict.graph import compute
from app.settings import Settings
from app.sources.demo_models import ensure_demo_models


def widen(spec: ModelSpec, n_layer: int) -> ModelSpec:
    """Return ``spec`` with its repeating layers repeated up to ``n_layer`` layers."""
    layer0 = [t for t in spec.tensors if t.layer == 0]
    outside = [t for t in spec.tensors if t.layer is None]
    tensors: list[TensorSpec] = list(outside)
    for il in range(n_layer):
        for t in layer0:
            name = t.name.replace("blk.0.", f"blk.{il}.", 1)
            tensors.append(dataclasses.replace(t, name=name, layer=il))
    # every other per-layer field (cache membership …) repeats layer 0's
    rest = {
        f.name: (getattr(spec, f.name)[0],) * n_layer
        for f in dataclasses.fields(spec)
        if isinstance(getattr(spec, f.name), tuple)
        and len(getattr(spec, f.name)) == spec.n_layer_all
        and f.name != "tensors"
    }
    rest.update(
        n_head=(spec.n_head[0],) * n_layer,
        n_head_kv=(spec.n_head_kv[0],) * n_layer,
        n_ff=(spec.n_ff[0],) * n_layer,
        is_swa=tuple(il % 6 < 5 for il in range(n_layer)),
        is_recurrent=(False,) * n_layer,
    )
    return dataclasses.replace(
        spec,
        n_layer_all=n_layer,
        tensors=tuple(tensors),
        **rest,  # type: ignore[arg-type]
    )


def cold(spec: ModelSpec, settings: Settings, hw: Hardware, n: int) -> list[float]:
    """Return per-call times (µs) with every cache of the compute model emptied first: a
    context the estimate has not seen (the first tick at a new setting)."""
    out = []
    for k in range(n):
        s = dataclasses.replace(settings, n_ctx=settings.n_ctx + 256 * (k % 64))
        estimate_module._COMPUTE_MEMO.clear()
        compute.clear_caches()
        t0 = time.perf_counter_ns()
        estimate(spec, s, hw)
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def slider(spec: ModelSpec, settings: Settings, hw: Hardware, n: int) -> list[float]:
    """Return per-call times (µs) over 64 contexts in turn, caches kept (a context slider
    dragged back and forth: after a few ticks its lines answer)."""
    estimate_module._COMPUTE_MEMO.clear()
    compute.clear_caches()
    out = []
    for k in range(n):
        s = dataclasses.replace(settings, n_ctx=settings.n_ctx + 256 * (k * 37 % 64))
        t0 = time.perf_counter_ns()
        estimate(spec, s, hw)
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def time_calls(fn: object, n: int) -> list[float]:
    """Return per-call times in microseconds for ``n`` calls of ``fn``."""
    assert callable(fn)
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def main() -> None:
    models = ensure_demo_models()
    gemma = model_spec(read_model(models.gemma))
    smollm = model_spec(read_model(models.smollm))
    wide = widen(gemma, 96)
    hw_gpu = Hardware.with_gpus([24 * 1024**3], ram_bytes=64 * 1024**3, cpu_flags=("avx2",))
    print(
        f"machine: {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}"
    )
    print(
        "| model | tensors | settings | same settings median µs | p99 µs "
        "| new context (cold) median µs | context slider median µs | p99 µs |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    cases = [
        ("SmolLM2-135M", smollm, Settings(n_ctx=8192)),
        ("Gemma-3 270M", gemma, Settings(n_ctx=32768, swa_full=False)),
        ("Gemma-3 widened", wide, Settings(n_ctx=32768, n_gpu_layers=60, swa_full=False)),
    ]
    for label, spec, settings in cases:
        for _ in range(50):  # warm up
            estimate(spec, settings, hw_gpu)
        times = sorted(time_calls(lambda s=spec, st=settings: estimate(s, st, hw_gpu), 1000))
        p99 = times[int(len(times) * 0.99) - 1]
        cold_times = cold(spec, settings, hw_gpu, 100)
        slide = sorted(slider(spec, settings, hw_gpu, 1000))
        print(
            f"| {label} | {len(spec.tensors)} | ctx {settings.n_ctx}, ngl "
            f"{settings.n_gpu_layers} | {statistics.median(times):.0f} | {p99:.0f} | "
            f"{statistics.median(cold_times):.0f} | {statistics.median(slide):.0f} | "
            f"{slide[int(len(slide) * 0.99) - 1]:.0f} |"
        )


if __name__ == "__main__":
    main()
