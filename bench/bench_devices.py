"""Per-device memory, estimate beside llama.cpp, on multi-device placements over RPC.

Run: ``.venv/bin/python -m bench.bench_devices > /tmp/devices.md`` (a few minutes on two
cores). The placements of tests/agreement/test_multi_device.py (two or three
ggml-rpc-servers on loopback, each a device to llama.cpp; the model really loaded,
``alloc``, mmap off); prints one markdown row per settings and device: weights
(+ repacked), KV cache (+ recurrent state) and compute buffer, as estimate / llama.cpp in
MiB, and whether each of the five equals llama.cpp's as printed.
"""

from __future__ import annotations

import platform
import sys
import tempfile
import time
from pathlib import Path

from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from app.sources.demo_models import ensure_demo_models
from runner.dry_run import dry_run_many
from runner.llama_tools import find_tool
from tests.agreement.test_agreement import _model_path, llama_mib
from tests.agreement.test_multi_device import GRIDS, device_buffers, hardware_of
from tests.llama_tools import running_rpc_servers

MIB = 1024 * 1024


def describe(s: Settings) -> str:
    """Return the settings that vary in the grid, as llama.cpp's flags."""
    ngl = "all" if s.n_gpu_layers < 0 else str(s.n_gpu_layers)
    parts = [f"-c {s.n_ctx}", f"-ngl {ngl}", f"-fa {s.flash_attn}"]
    if s.n_parallel > 1:
        parts.append(f"-np {s.n_parallel}" + (" -kvu" if s.kv_unified else ""))
    if s.tensor_split:
        parts.append("-ts " + ",".join(str(int(x)) for x in s.tensor_split))
    if s.n_cpu_moe:
        parts.append(f"-ncmoe {s.n_cpu_moe}")
    if not s.swa_full:
        parts.append("--swa-full off")
    if not s.offload_kqv:
        parts.append("-nkvo")
    return " ".join(parts)


def main() -> None:
    demo = ensure_demo_models()
    zoo_dir = Path(tempfile.mkdtemp(prefix="ggtune-zoo-"))
    exe = find_tool("ggml-rpc-server")
    print(f"machine: {platform.machine()}; {time.strftime('%Y-%m-%d %H:%M')}", file=sys.stderr)
    print(
        "| model | servers | settings | device | weights MiB | KV + state MiB | compute MiB "
        "| each as printed |"
    )
    print("|---|---:|---|---|---:|---:|---:|---|")
    for name, by_count in GRIDS.items():
        path = _model_path(name, demo.smollm, demo.gemma, zoo_dir)
        spec = model_spec(read_model(path))
        for n, grid in by_count.items():
            settings = [s.replace(use_mmap=False) for s in grid]
            with running_rpc_servers(exe, n) as servers:
                reports = dry_run_many(
                    path,
                    settings,
                    mode="alloc",
                    rpc_servers=[s.endpoint for s in servers],
                    timeout_s=600,
                )
            for s, report in zip(settings, reports, strict=True):
                est = estimate(spec, s, hardware_of(report, n))
                engine = device_buffers(report)
                for d in est.devices:
                    ours = {
                        "weights": d.weights_bytes + d.other_bytes,
                        "kv": d.kv_bytes + d.recurrent_bytes,
                        "compute": d.compute_bytes,
                    }
                    theirs = {
                        "weights": engine.get(("weights", d.name), 0)
                        + engine.get(("repack", d.name), 0),
                        "kv": engine.get(("kv", d.name), 0) + engine.get(("rs", d.name), 0),
                        "compute": engine.get(("compute", d.name), 0),
                    }
                    cells = [
                        f"{ours[k] / MIB:.2f} / {theirs[k] / MIB:.2f}"
                        for k in ("weights", "kv", "compute")
                    ]
                    parts = {
                        "weights": d.weights_bytes,
                        "repack": d.other_bytes,
                        "kv": d.kv_bytes,
                        "rs": d.recurrent_bytes,
                        "compute": d.compute_bytes,
                    }
                    equal = all(
                        llama_mib(v) == llama_mib(engine.get((k, d.name), 0))
                        for k, v in parts.items()
                    )
                    print(
                        f"| {name} | {n} | {describe(s)} | {d.name} | {' | '.join(cells)} | "
                        f"{'yes' if equal else 'no'} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
