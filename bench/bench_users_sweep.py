"""Measure N users at several depths on every quant level of the real models: the data the
speed model is judged on (docs/benchmarks.md, section "speed-model").

Run: ``.venv/bin/python -m bench.bench_users_sweep --out /tmp/sweep.jsonl [--passes 2]``.

For every file of ``--quants`` (default: ``<user cache>/ggtune/speed-quants/*.gguf``, made
by ``llama_model_quantize`` from the two demo models at every level it makes without an
importance matrix; ``--make`` makes the missing ones) and every depth of ``--depths``, one
load test (runner/load_test.py, one child process): users 1, 2, 4, 8 arriving at once,
64-token prompts after ``depth`` tokens of earlier conversation, 16 tokens each; flash
attention auto, f16 cache, one stream per user. Each run is appended to ``--out`` as one
JSON line: the load test's record (every step's time), the file, the pass, and
``/proc/loadavg`` before and after, so noisy runs can be seen. Passes go over all files in
turn (not one file several times in a row), so a busy minute hits one run of a file, not
all of them. ``--repetitions R`` serves each user count R times in a run (after one depth
fill); :mod:`bench.bench_speed_model` then judges each figure's median round, so a single
step's noise (about 12 % on the machine of docs/benchmarks.md) weighs less.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from app.measured.users_result import Slo, UsersPlan, users_to_dict
from app.settings import Settings

SOURCES = {
    "smollm2-135m": "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma3-270m": "gemma-3-270m-q4_k_m.gguf",
}


def quants_dir() -> Path:
    """Return where the quantized copies live (``<user cache>/ggtune/speed-quants``)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("ggtune", appauthor=False)) / "speed-quants"


def make_quants(out: Path) -> None:
    """Quantize both demo models to every file type llama.cpp makes without an imatrix."""
    from app.model.quant import FILE_TYPES
    from app.sources.demo_models import ensure_demo_models
    from runner.quantize import quantize_many

    out.mkdir(parents=True, exist_ok=True)
    models = ensure_demo_models()
    for tag, name in SOURCES.items():
        src = models.smollm if models.smollm.name == name else models.gemma
        jobs = [
            (out / f"{tag}-{ft.name}.gguf", ft, "none")
            for ft in FILE_TYPES
            if not (out / f"{tag}-{ft.name}.gguf").exists()
        ]
        for o in quantize_many(src, jobs, nthread=os.cpu_count() or 2):
            state = "made" if o.error is None else "refused (needs an imatrix)"
            print(f"{tag} {o.file_type.name}: {state}", file=sys.stderr)


def parse_skip(text: str) -> set[tuple[str, int]]:
    """Return the ``NAME@DEPTH`` entries of ``--skip`` as (name, depth) pairs."""
    out: set[tuple[str, int]] = set()
    for item in text.split(","):
        name, sep, depth = item.strip().rpartition("@")
        if sep and name:
            out.add((name, int(depth)))
    return out


def skipped(file_name: str, depth: int, skip: set[tuple[str, int]]) -> bool:
    """Return whether the run of ``file_name`` at ``depth`` is one ``skip`` names.

    A name is a whole file stem (``gemma3-270m-Q2_0``) or a quant, the part after the
    model tag's last ``-`` (``Q2_0``): ``Q2_0`` leaves out ``*-Q2_0.gguf`` and not
    ``*-TQ2_0.gguf``, ``Q4_K`` not ``*-Q4_K_M.gguf`` (a substring matched both).
    """
    stem = file_name.removesuffix(".gguf")
    quant = stem.rpartition("-")[2]
    return any(d == depth and name in (stem, quant) for name, d in skip)


def settings_for(depth: int, plan: UsersPlan) -> Settings:
    """Return the settings of one run: a stream per user with room for the plan (no
    repacking on a CPU with AMX, as ggtune plans there: :func:`app.predict.estimate.
    repack_is_safe`)."""
    from app.hardware.devices import Device
    from app.hardware.probe import local_cpu_flags
    from app.predict.estimate import repack_is_safe

    per_user = depth + plan.n_prompt + plan.n_gen
    n_ctx = -(-plan.max_users * per_user // 256) * 256
    return Settings(
        n_ctx=n_ctx,
        n_parallel=plan.max_users,
        flash_attn="auto",
        swa_full=False,
        kv_unified=False,
        repack=repack_is_safe(Device("CPU", "host", None, cpu_flags=local_cpu_flags())),
    )


def busy_share(seconds: float = 2.0) -> float:
    """Return the share of all CPUs busy over ``seconds`` (``/proc/stat``), 0..1."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v), idle

    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_for_quiet(limit: float, max_wait_s: float) -> float:
    """Wait until other work keeps under ``limit`` of the CPUs busy (or ``max_wait_s``
    passed); return the busy share last seen."""
    deadline = time.monotonic() + max_wait_s
    while True:
        busy = busy_share()
        if busy <= limit or time.monotonic() > deadline:
            return busy
        time.sleep(5)


def main() -> None:
    from runner.load_test import load_test, read_loadavg

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--quants", type=Path, default=None)
    ap.add_argument("--make", action="store_true")
    ap.add_argument("--depths", default="0,1024,4096")
    ap.add_argument("--users", default="1,2,4,8")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument(
        "--repetitions",
        type=int,
        default=1,
        help="rounds of each user count per run (the judge takes their median round)",
    )
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--only", default="", help="substring a file name must contain")
    ap.add_argument(
        "--skip",
        default="",
        help="QUANT@DEPTH or FILE-STEM@DEPTH,... runs to leave out (e.g. Q2_0@4096: not TQ2_0)",
    )
    ap.add_argument(
        "--timeout", type=float, default=None, help="seconds per step (the load test's default)"
    )
    ap.add_argument("--quiet", type=float, default=0.25, help="wait until other work uses less")
    ap.add_argument("--max-wait", type=float, default=300.0, help="seconds to wait for quiet")
    args = ap.parse_args()
    folder = args.quants or quants_dir()
    if args.make:
        make_quants(folder)
    files = sorted(p for p in folder.glob("*.gguf") if args.only in p.name)
    depths = [int(d) for d in args.depths.split(",")]
    users = tuple(int(n) for n in args.users.split(","))
    skip = parse_skip(args.skip)
    timeout = {} if args.timeout is None else {"timeout_s": args.timeout}
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["pass"], r["file"], r["plan"]["depth"]))
    for p in range(args.passes):
        for f in files:
            for depth in depths:
                if (p, f.name, depth) in done:
                    continue
                if skipped(f.name, depth, skip):
                    continue
                plan = UsersPlan(
                    n_users=users, n_prompt=64, n_gen=16, depth=depth, repetitions=args.repetitions
                )
                busy = wait_for_quiet(args.quiet, args.max_wait)
                before = read_loadavg()
                t0 = time.time()
                try:
                    result = load_test(
                        f, settings_for(depth, plan), plan, n_threads=args.threads, **timeout
                    )
                except Exception as exc:  # a file llama.cpp cannot run: say so, go on
                    print(f"{f.name} d{depth}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                record = users_to_dict(result, Slo()) | {
                    "pass": p,
                    "file": f.name,
                    "loadavg_before": list(before) if before else None,
                    "busy_before": busy,
                    "wall_s": time.time() - t0,
                }
                with args.out.open("a") as out:
                    out.write(json.dumps(record) + "\n")
                tps = [round(u["per_user_tok_per_s"], 1) for u in record["users"]]
                print(
                    f"pass {p} {f.name} d{depth}: per-user tok/s {tps}, busy {busy:.2f}, "
                    f"load {before} → "
                    f"{result.loadavg}, {time.time() - t0:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )


if __name__ == "__main__":
    main()
