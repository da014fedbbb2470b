"""Whole-process time of ``ggtune inspect``/``estimate``, beside llama.cpp's llama-fit-params.

Target: ``ggtune inspect MODEL --json`` and ``ggtune estimate MODEL --json`` each ≤ 0.2 s
from process start to exit, on the demo model (Gemma 3 270M).

Run: ``.venv/bin/python -m bench.bench_cli [--runs N]`` (after ``python3 tasks.py run``
fetched the demo model and built llama.cpp's tools). Every run is a fresh process started
with ``subprocess.run`` and timed from just before the spawn to its exit, with bytecode
already cached (the sources compiled first, ``PYTHONDONTWRITEBYTECODE`` left out of the
children's environment, and one untimed run of each command). In the same run, llama.cpp's own
``llama-fit-params`` (built by the set-up beside the wheel, found by
:func:`runner.llama_tools.find_tool`) on the same model: ``-fitp on`` prints llama.cpp's
memory estimate per device, without it the tool fits context and GPU layers; both load the
model's metadata into the real engine. Prints a markdown table for docs/benchmarks.md, with
each command's CPU time (user + system, median) beside its wall time and the load average
before and after: on a busy machine the wall time waits for a core, the CPU time far less.

``--source DIR`` times the ggtune of another checkout with this venv, to compare with an
older commit (``git worktree add --detach /tmp/old COMMIT``).

Example::

    $ .venv/bin/python -m bench.bench_cli --runs 5
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Final

TARGET_S: Final = 0.2
ROOT: Final = Path(__file__).resolve().parents[1]


def ggtune_command(source: Path | None = None) -> list[str]:
    """Return how to start ggtune: the venv's console script, as a user types it; or the
    ggtune of another checkout ``source`` (``python -m ui.entry`` with it first on the path)."""
    if source is not None:
        return [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(source)!r}); "
                "import runpy; runpy.run_module('ui.entry', run_name='__main__')"]  # fmt: skip
    script = Path(sys.executable).with_name("ggtune")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "ui.entry"]


def _env() -> dict[str, str]:
    """The children's environment: this one, with bytecode caching on (as a user has it)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def compile_sources(source: Path) -> None:
    """Write the bytecode of ``source``'s packages (what a user's second run finds)."""
    for package in ("app", "runner", "ui"):
        compileall.compile_dir(source / package, quiet=1)


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's finished children; 0 without ``resource``."""
    try:
        import resource
    except ImportError:  # Windows
        return 0.0
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def load_average() -> str:
    """The 1-minute load average ("1.8"), or "?" where the OS does not say."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except (AttributeError, OSError):
        return "?"


def time_process(argv: Sequence[str]) -> tuple[float, float]:
    """Run ``argv`` once (output discarded); return (seconds from spawn to exit, the CPU
    seconds it used). On a loaded machine the wall time grows with the wait for a core;
    the CPU time much less, so it tells a slower program from a busier machine."""
    cpu_before = _children_cpu_s()
    started = time.perf_counter()
    done = subprocess.run(
        list(argv), cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed, _children_cpu_s() - cpu_before


def main(argv: list[str] | None = None) -> int:
    """Time each command ``--runs`` times and print a markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="time the ggtune of this checkout instead (e.g. a git worktree of an older commit)",
    )
    args = parser.parse_args(argv)

    from app.sources.demo_models import ensure_demo_models

    model = str(ensure_demo_models().gemma)
    compile_sources(args.source or ROOT)
    ggtune = ggtune_command(args.source)
    commands: list[tuple[str, list[str], float | None]] = [
        ("`ggtune inspect MODEL --json`", [*ggtune, "inspect", model, "--json"], TARGET_S),
        ("`ggtune estimate MODEL --json`", [*ggtune, "estimate", model, "--json"], TARGET_S),
    ]
    try:
        from runner.llama_tools import LlamaToolMissing, find_tool

        fit = str(find_tool("llama-fit-params"))
        commands += [
            ("`llama-fit-params -m MODEL -fitp on` (llama.cpp's estimate)",
             [fit, "-m", model, "-fitp", "on"], None),
            ("`llama-fit-params -m MODEL` (llama.cpp fits -c and -ngl)",
             [fit, "-m", model], None),
        ]  # fmt: skip
    except LlamaToolMissing as missing:
        print(f"llama-fit-params not measured: {missing}\n", file=sys.stderr)

    rows = []
    load_before = load_average()
    for label, command, target in commands:
        time_process(command)  # bytecode and the OS file cache warm: "cold" = a new process
        timed = [time_process(command) for _ in range(args.runs)]
        rows.append((label, [wall for wall, _ in timed], [cpu for _, cpu in timed], target))

    cpu = platform.processor() or platform.machine()
    print(f"{Path(model).name}, {os.cpu_count()} CPUs ({cpu}), Python "
          f"{platform.python_version()}, {args.runs} runs each, {date.today()}, load average "
          f"{load_before} before, {load_average()} after\n")  # fmt: skip
    print("| command | median | min | max | CPU time (median) | target |")
    print("|---|---:|---:|---:|---:|---:|")
    met = True
    for label, secs, cpus, target in rows:
        median = statistics.median(secs)
        mark = ""
        if target is not None:
            met = met and median <= target
            mark = f"≤ {target:g} s" + ("" if median <= target else " (missed)")
        print(f"| {label} | {median:.2f} s | {min(secs):.2f} s | {max(secs):.2f} s | "
              f"{statistics.median(cpus):.2f} s | {mark} |")  # fmt: skip
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
