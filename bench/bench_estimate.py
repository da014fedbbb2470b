"""How fast is ``estimate()``? Target: ≤ 1 ms per call for a 1,000-tensor model.

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
from app.predict.estimate import estimate
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
    return dataclasses.replace(
        spec,
        n_layer_all=n_layer,
        n_head=(spec.n_head[0],) * n_layer,
        n_head_kv=(spec.n_head_kv[0],) * n_layer,
        n_ff=(spec.n_ff[0],) * n_layer,
        is_swa=tuple(il % 6 < 5 for il in range(n_layer)),
        is_recurrent=(False,) * n_layer,
        tensors=tuple(tensors),
    )


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
    print("| model | tensors | settings | median µs | p99 µs |")
    print("|---|---:|---|---:|---:|")
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
        print(
            f"| {label} | {len(spec.tensors)} | ctx {settings.n_ctx}, ngl "
            f"{settings.n_gpu_layers} | {statistics.median(times):.0f} | {p99:.0f} |"
        )


if __name__ == "__main__":
    main()
