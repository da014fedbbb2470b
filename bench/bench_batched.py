"""The load test beside llama.cpp's ``llama-batched-bench``: per-user decode speed, both ways.

Run: ``.venv/bin/python -m bench.bench_batched [--threads 1] [--users 1,2,4,8]``.

For each demo model and user count: llama-batched-bench (``-npp 32 -ntg 16|208 -npl N``, one
stream per sequence, batch 2048/512, flash attention auto) and ggtune's load test
(runner/load_test.py, the same settings, 32-token prompts, 209 tokens each, users arriving
together). Two comparisons:

* **CPU time** (the test's, tests/runner/test_batched_bench.py): the engine's mean CPU
  seconds per decode step over the same 192 steps, those 48-239 tokens deep; for
  llama-batched-bench the difference between its ``-ntg 208`` and ``-ntg 16`` runs over the
  192 extra steps (its own report is wall time), for the load test its steps at those
  depths (:func:`load_test_step_cpu`);
* **wall time**: its ``S_TG / N`` from the ``-ntg 208`` run beside 1 / the load test's mean
  time per output token — what each prints, noisy on shared cores.

``/proc/loadavg`` is printed with every row.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.measured.users_result import StepTiming

N_CTX_PER_USER = 512
N_PROMPT = 32
SHORT = 16
ORACLE_LONG = SHORT + 192
"""llama-batched-bench's longer run: 192 steps more than SHORT, so the few hundred ms by
which a process's start-up and loading move between runs are a few per cent of the
difference (with 64 steps, 10-20 %: one pair put Gemma-3 270M at 1 user 18 % off in CI)."""
LONG = ORACLE_LONG + 1
"""Tokens per user in the load test: its first comes from the prompt's batch, the other 208
from decode steps 32-239 tokens deep, which cover the oracle's 192 (48-239 deep). Compared
over exactly those depths, because attention grows with depth: a load test of 80 tokens
(steps 32-111 deep) read 3-7 % faster per step than the same engine at 48-239, and a
fresh-clone CI run failed on it (SmolLM2 at 1 user: 76.7 vs 66.3, 77.2 vs 69.0, 82.9 vs
67.8 tok/s, median +15.7 %)."""
WINDOW = range(N_PROMPT + SHORT, N_PROMPT + ORACLE_LONG)
"""The cached depths of the oracle's 192 extra steps (each decodes one token per user)."""


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_batched_bench(
    tool: Path,
    model: Path,
    n_users: int,
    n_gen: int,
    *,
    n_ctx: int,
    threads: int,
    repack: bool = True,
) -> tuple[dict[str, Any], float]:
    """Run llama-batched-bench once; return its JSON row and the CPU seconds it took
    (``repack`` False adds ``--no-repack``, as ``Settings.repack``)."""
    before = _children_cpu_s()
    out = subprocess.run(
        [
            str(tool),
            "-m",
            str(model),
            "-c",
            str(n_ctx),
            "-b",
            "2048",
            "-ub",
            "512",
            "-npp",
            str(N_PROMPT),
            "-ntg",
            str(n_gen),
            "-npl",
            str(n_users),
            "-t",
            str(threads),
            "-fa",
            "auto",
            "--output-format",
            "jsonl",
            *(() if repack else ("--no-repack",)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    spent = _children_cpu_s() - before
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if len(rows) != 1 or (rows[0]["pl"], rows[0]["tg"], rows[0]["pp"]) != (
        n_users,
        n_gen,
        N_PROMPT,
    ):
        raise RuntimeError(f"llama-batched-bench printed {rows!r}")
    return rows[0], spent


def batched_bench_step(
    tool: Path, model: Path, n_users: int, *, n_ctx: int, threads: int, repack: bool = True
) -> tuple[float, float]:
    """Return (CPU seconds per decode step of ``n_users``, its wall S_TG / n_users)."""

    def run(n_gen: int) -> tuple[dict[str, Any], float]:
        return run_batched_bench(
            tool, model, n_users, n_gen, n_ctx=n_ctx, threads=threads, repack=repack
        )

    _row, short = run(SHORT)
    row, long = run(ORACLE_LONG)
    return (long - short) / (ORACLE_LONG - SHORT) / threads, row["speed_tg"] / n_users


def load_test_step_cpu(steps: Iterable[StepTiming], n_users: int, threads: int = 1) -> float:
    """The load test's mean CPU seconds per decode step of ``n_users`` over the oracle's
    depths (:data:`WINDOW`): a mean, as llama-batched-bench's difference of two runs is one
    (a median left out the steps another process slowed, which the oracle's total keeps:
    on Gemma-3 270M at 1 user the two differed by 10 % under load)."""
    chosen = [
        s.cpu_s for s in steps if s.n_decode == n_users and s.n_prefill == 0 and s.depth in WINDOW
    ]
    if len(chosen) != len(WINDOW):
        raise RuntimeError(
            f"the load test decoded {len(chosen)} steps of {n_users} users at depths "
            f"{WINDOW.start}-{WINDOW.stop - 1}, not {len(WINDOW)}"
        )
    return statistics.fmean(chosen) / threads


def main() -> None:
    from app.measured.users_result import Slo, UsersPlan
    from app.settings import Settings
    from app.sources.demo_models import ensure_demo_models
    from runner.llama_tools import find_tool
    from runner.load_test import load_test

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--users", default="1,2,4,8")
    args = ap.parse_args()
    users = tuple(int(n) for n in args.users.split(","))
    tool = find_tool("llama-batched-bench")
    models = ensure_demo_models()
    n_ctx = N_CTX_PER_USER * max(users)
    print("| model | users | CPU: load test | CPU: batched-bench | Δ | wall: load test | "
          "wall: batched-bench S_TG/N | Δ | load before |")  # fmt: skip
    print("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, model in (
        ("SmolLM2-135M Q4_1", models.smollm),
        ("Gemma-3 270M Q4_K_M", models.gemma),
    ):
        settings = Settings(
            n_ctx=n_ctx, n_parallel=max(users), kv_unified=False, swa_full=False,
            n_batch=2048, n_ubatch=512, flash_attn="auto",
        )  # fmt: skip
        plan = UsersPlan(n_users=users, n_prompt=N_PROMPT, n_gen=LONG)
        load = os.getloadavg()[0]
        result = load_test(model, settings, plan, n_threads=args.threads)
        summaries = {s.n_users: s for s in result.summaries(Slo())}
        for n in users:
            (r,) = [r for r in result.rounds if r.n_users == n]
            cpu = load_test_step_cpu(r.steps, n, args.threads)
            theirs_cpu, theirs_wall = batched_bench_step(
                tool, model, n, n_ctx=n_ctx, threads=args.threads
            )
            ours_cpu, ours_wall = 1.0 / cpu, summaries[n].per_user_tok_per_s
            print(
                f"| {name} | {n} | {ours_cpu:.1f} | {1 / theirs_cpu:.1f} | "
                f"{100 * (ours_cpu * theirs_cpu - 1):+.1f}% | {ours_wall:.1f} | "
                f"{theirs_wall:.1f} | {100 * (ours_wall / theirs_wall - 1):+.1f}% | {load:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
