"""The agreement table: estimate beside llama.cpp's dry run, for every model and settings.

Run: ``.venv/bin/python -m bench.bench_agreement > /tmp/agreement.md`` (a few minutes on two
cores). It uses the same grid as tests/agreement and prints markdown for
docs/benchmarks.md: per model the number of settings where weights, KV cache and recurrent
state, and the compute buffer matched llama.cpp's printed figures, and the compute-buffer
error (min/max/worst case).
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from app.errors import SettingsError
from app.hardware.devices import Hardware
from app.hardware.probe import local_cpu_flags
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from app.sources.demo_models import ensure_demo_models
from runner.dry_run import dry_run_many
from tests.agreement.test_agreement import settings_grid
from tests.zoo import ZOO, write_model

MIB = 1024 * 1024


def llama_mib(n_bytes: int) -> str:
    """Format bytes as llama.cpp prints MiB (float32 division, two decimals)."""
    return f"{float(np.float32(n_bytes) / np.float32(MIB)):.2f}"


def describe(s: Settings) -> str:
    """Return a short label of the settings that vary in the grid."""
    return (
        f"ctx {s.n_ctx} {s.cache_type_k}/{s.cache_type_v} fa {s.flash_attn} "
        f"np {s.n_parallel}{' unified' if s.kv_unified else ''}"
        f"{' swa_full' if s.swa_full else ''} ub {s.n_ubatch}"
    )


def main() -> None:
    demo = ensure_demo_models()
    hw = Hardware.cpu_only(cpu_flags=local_cpu_flags())
    zoo_dir = Path(tempfile.mkdtemp(prefix="ggtune-zoo-"))
    paths = {"SmolLM2-135M Q4_1": demo.smollm, "Gemma-3 270M Q4_K_M": demo.gemma}
    paths.update({f"zoo {name}": write_model(name, zoo_dir) for name in ZOO})
    print(
        f"machine: {platform.machine()}, {' '.join(local_cpu_flags())}; "
        f"{time.strftime('%Y-%m-%d')}",
        file=sys.stderr,
    )
    print(
        "| model | settings | weights = | KV/state = | compute = | compute error (min … max) "
        "| worst case |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    outliers: list[str] = []
    for label, path in paths.items():
        spec = model_spec(read_model(path))
        valid = []
        for s in settings_grid():
            try:
                estimate(spec, s, hw)
            except SettingsError:
                continue
            valid.append(s)
        reports = dry_run_many(path, valid, timeout_s=300)
        weights_ok = kv_ok = compute_ok = 0
        errors: list[tuple[float, str, float, float]] = []
        for s, report in zip(valid, reports, strict=True):
            est = estimate(spec, s, hw)
            weights_ok += report.model_size_bytes == spec.weights_bytes
            ours = [
                (c.cells, c.n_layers, llama_mib(c.total_bytes))
                for c in est.caches
                if c.kind != "recurrent"
            ]
            theirs = [(c.cells, c.layers, f"{c.size_mib:.2f}") for c in report.kv_caches]
            rs_ours = [llama_mib(c.total_bytes) for c in est.caches if c.kind == "recurrent"]
            rs_theirs = [f"{c.r_mib + c.s_mib:.2f}" for c in report.recurrent_caches]
            kv_ok += ours == theirs and len(rs_ours) == len(rs_theirs)
            engine = report.compute_bytes_on("CPU")
            mine = est.device("CPU").compute_bytes
            compute_ok += llama_mib(mine) == llama_mib(engine)
            err = 100.0 * (mine - engine) / engine
            errors.append((err, describe(s), mine / MIB, engine / MIB))
            if abs(err) > 3.0:
                outliers.append(
                    f"| {label} | {describe(s)} | {mine / MIB:.2f} | "
                    f"{engine / MIB:.2f} | {err:+.1f}% |"
                )
        worst = max(errors, key=lambda e: abs(e[0]))
        lo = min(e[0] for e in errors)
        hi = max(e[0] for e in errors)
        print(
            f"| {label} | {len(valid)} | {weights_ok}/{len(valid)} | {kv_ok}/{len(valid)} | "
            f"{compute_ok}/{len(valid)} | {lo:+.1f}% … {hi:+.1f}% | "
            f"{worst[1]}: {worst[2]:.2f} vs {worst[3]:.2f} MiB |"
        )
    print()
    print("Compute buffers outside 3 %:")
    print()
    print("| model | settings | estimate MiB | llama.cpp MiB | error |")
    print("|---|---|---:|---:|---:|")
    for row in outliers:
        print(row)


if __name__ == "__main__":
    main()
