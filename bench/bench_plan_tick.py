"""How long does the runner's plan take on one context-slider tick? Target: ≤ 50 ms.

Each desktop tick runs :func:`app.planning.runner_plan.plan_runner` with
``RunnerOptions(live=True)`` (the fit's search on the stage model, calibrated on the reserve
graph of where it ends); the CLI and the planner run it on the reserve graph throughout.
For catalog models (simulated quants, no file needed) on a few GPU sets: the first tick
(every cache of the compute model emptied, three contexts, median) and 200 ticks over 64
contexts in turn with the caches kept, both as CPU time of this thread (the machine's load
changes wall time several-fold; CPU time is what the tick costs the GUI thread).

Run: ``.venv/bin/python -m bench.bench_plan_tick [--exact]`` (``--exact``: the plan on the
graph throughout, what the tick cost without the live mode). Prints a markdown table for
docs/benchmarks.md.
"""

from __future__ import annotations

import platform
import statistics
import sys
import time

from app.hardware.devices import Hardware
from app.model.catalog import catalog_header
from app.model.quant import simulate_quant
from app.model.spec import model_spec
from app.planning.runner_plan import RunnerOptions, plan_runner
from app.predict import estimate as estimate_module
from app.predict.graph import compute

GIB = 1024**3
CASES = [
    ("llama-3.1-8b", "Q4_K_M", (24,)),
    ("llama-3.1-8b", "Q4_K_M", (6,)),
    ("llama-3.1-70b", "Q4_K_M", (24,)),
    ("llama-3.1-70b", "Q4_K_M", (24, 24)),
    ("qwen3-30b-a3b", "Q4_K_M", (12,)),
    ("gemma-3-27b", "Q8_0", (24,)),
]


def clear() -> None:
    estimate_module._COMPUTE_MEMO.clear()
    compute.clear_caches()


def main() -> None:
    options = RunnerOptions(live="--exact" not in sys.argv)
    print(
        f"machine: {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M')}, live={options.live}"
    )
    print("| model, GPUs (GiB) | first tick ms | slider tick median ms | p95 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    for name, quant, gpus in CASES:
        spec = simulate_quant(model_spec(catalog_header(name)), quant).spec
        hw = Hardware.with_gpus([g * GIB for g in gpus], ram_bytes=64 * GIB)
        first = []
        for k in range(3):
            clear()
            t0 = time.thread_time()
            plan_runner(spec, "llama-server", hw, given={"n_ctx": 8192 + 4096 * k}, options=options)
            first.append((time.thread_time() - t0) * 1e3)
        clear()
        ticks = []
        for k in range(200):
            n_ctx = 4096 + 1024 * (k * 37 % 64)
            t0 = time.thread_time()
            plan_runner(spec, "llama-server", hw, given={"n_ctx": n_ctx}, options=options)
            ticks.append((time.thread_time() - t0) * 1e3)
        ticks.sort()
        print(
            f"| {name} {quant}, {' + '.join(map(str, gpus))} | {statistics.median(first):.1f} | "
            f"{statistics.median(ticks):.1f} | {ticks[int(len(ticks) * 0.95)]:.1f} | "
            f"{ticks[-1]:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
