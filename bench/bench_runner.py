"""Benchmark both demo models on the real engine, quick and thorough, as markdown.

Run ``.venv/bin/python -m bench.bench_runner > /tmp/runner.md`` from the repository root
(about 5 minutes on two cores). For each demo model and plan it runs
:func:`runner.benchmark.benchmark` with the settings below and prints one table row:
prompt processing and decoding tok/s (mean ± sd) at depth 0 and at the plan's depth, time
to first token, and memory: peak RSS above the pre-load baseline beside the estimated host
total, and the file-backed part beside the mapped weights, with the gaps. A second table
lists llama.cpp's buffers beside the estimate. The machine and the date come first.
"""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `app` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.hardware.devices import Hardware
from app.hardware.probe import local_cpu_flags
from app.measured.bench_result import BenchPlan, BenchResult, MemoryGap, compare_memory
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from app.sources.demo_models import ensure_demo_models
from app.units import MIB
from runner.benchmark import benchmark

SETTINGS = Settings(n_ctx=8192, flash_attn="auto", swa_full=False, n_parallel=1)


def _mib(n: int) -> str:
    return f"{n / MIB:.0f}"


def _gap(g: MemoryGap) -> str:
    rel = f", {100 * g.relative:+.0f}%" if g.relative is not None else ""
    gap = f"{g.difference_bytes / MIB:+.0f}{rel}"
    return f"{_mib(g.measured_bytes)} / {_mib(g.estimated_bytes)} ({gap})"


def _speed(result: BenchResult, kind: str, deep: bool) -> str:
    figure = result.speed(kind, depth=None if deep else 0)  # type: ignore[arg-type]
    if figure is None or (deep and figure.depth == 0):
        return "-"
    return figure.tok_per_s.format()


def main() -> int:
    """Print the tables; return the exit status."""
    demo = ensure_demo_models()
    hw = Hardware.cpu_only(cpu_flags=local_cpu_flags())
    models = {"SmolLM2-135M Q4_1": demo.smollm, "Gemma-3 270M Q4_K_M": demo.gemma}
    rows: list[str] = []
    buffer_rows: list[str] = []
    machine = ""
    for label, path in models.items():
        spec = model_spec(read_model(path))
        est = estimate(spec, SETTINGS, hw)
        for plan in (BenchPlan.quick(), BenchPlan.thorough()):
            print(f"{label}: {plan.mode}…", file=sys.stderr)
            result = benchmark(path, SETTINGS, plan, timeout_s=600)
            m = result.machine
            machine = (
                f"{m.cpu_model}, {m.physical_cores} cores ({m.logical_cores} threads), "
                f"{m.ram_bytes / 1024**3:.0f} GiB, {m.os}; {result.engine.engine_version}, "
                f"backend {result.backend}, {result.n_threads} threads"
            )
            gaps = {g.component: g for g in compare_memory(est, result)}
            depth = result.speed("pp", depth=None)
            ttft = result.ttft
            rows.append(
                f"| {label} | {plan.mode} ({plan.repetitions}×) | {result.duration_s:.1f} "
                f"| {_speed(result, 'pp', False)} | {_speed(result, 'tg', False)} "
                f"| {depth.depth if depth else 0} | {_speed(result, 'pp', True)} "
                f"| {_speed(result, 'tg', True)} "
                f"| {ttft.stat.mean * 1000:.0f} ± {ttft.stat.sd * 1000:.0f} ({ttft.n_prompt} tok) "
                f"| {_gap(gaps['RSS total (peak − baseline)'])} "
                f"| {_gap(gaps['RSS file-backed (mapped weights)'])} "
                f"| {_gap(gaps['RSS anonymous (buffers)'])} |"
            )
            if plan.mode == "quick":
                for g in gaps.values():
                    if g.source == "llama.cpp log":
                        buffer_rows.append(
                            f"| {label} | {g.component} | {g.measured_bytes / MIB:.2f} "
                            f"| {g.estimated_bytes / MIB:.2f} | {g.difference_bytes / MIB:+.2f} "
                            f"| {'yes' if g.within_tolerance else 'NO'} |"
                        )
    print(
        f"Machine: {machine}. Date: {time.strftime('%Y-%m-%d')}. "
        f"Python {platform.python_version()}."
    )
    print(
        f"\nSettings: n_ctx {SETTINGS.n_ctx}, flash attention {SETTINGS.flash_attn}, "
        f"one slot, swa_full off, batch {SETTINGS.n_batch}/{SETTINGS.n_ubatch}, f16 KV, mmap.\n"
    )
    print(
        "| model | plan | wall s | pp512 tok/s | tg tok/s | depth | pp @ depth | tg @ depth "
        "| TTFT ms | RSS MiB: measured / estimated (gap) | file-backed / mapped weights "
        "| anonymous / other buffers |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(rows))
    print("\nllama.cpp's buffers (quick runs) beside the estimate, MiB:\n")
    print("| model | component | llama.cpp | estimate | difference | within tolerance |")
    print("|---|---|---:|---:|---:|---|")
    print("\n".join(buffer_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
