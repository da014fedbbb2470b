"""``ggtune bench``: run the model on the real engine and show measured beside estimated.

``ggtune bench MODEL [settings flags] [--quick|--thorough] [--json]`` loads the model with
llama.cpp in a child process (runner/benchmark.py), measures prompt processing and
decoding speed, time to first token and memory, stores the run in the results database
(app/measured/results_db.py) and prints the estimate beside what was measured. Progress goes to
stderr with a percentage; the table (or one JSON object) to stdout.

``ggtune bench MODEL --users 1,2,4 [--ttft S] [--min-tps X]`` runs N users together
instead (ui/cli/users.py): each user's speed and first token, goodput under the SLO.

``ggtune bench --history [MODEL]`` lists past runs (of that model, by its file hash).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from app.errors import ModelFileNotFoundError, ResultsDBError
from app.measured.bench_result import (
    BenchPlan,
    BenchProgress,
    BenchResult,
    BenchStep,
    Loaded,
    LoadProgress,
    MemoryGap,
    compare_memory,
    gap_to_dict,
    result_to_dict,
)
from app.measured.results_db import ResultsDB, StoredRun, quick_file_hash
from app.model.facts import offloaded_text
from app.predict.estimate import estimate
from app.sources.reading import load_model_spec
from app.units import format_bytes
from ui.cli.commands import COMMANDS
from ui.cli.options import (
    add_settings_flags,
    hardware_from_args,
    positive_number,
    settings_from_args,
)
from ui.cli.output import EXIT_USAGE, control, print_table
from ui.cli.users import add_users_flags, run_users


def register(sub: Any) -> None:
    """Add the ``bench`` subcommand to ``sub`` (an argparse subparsers object)."""
    p = sub.add_parser(
        "bench",
        help=COMMANDS["bench"].help,
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    p.add_argument("model", nargs="?", help="path to a .gguf file (optional with --history)")
    add_settings_flags(p)
    b = p.add_argument_group("benchmark")
    mode = b.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="mode",
        action="store_const",
        const="quick",
        help="pp512, tg32, depth 512, 2 runs each (default; ~15 s for a 270M model on 2 cores)",
    )
    mode.add_argument(
        "--thorough",
        dest="mode",
        action="store_const",
        const="thorough",
        help="pp512, tg128, depth 4096, 5 runs each",
    )
    b.add_argument(
        "-t",
        "--threads",
        type=int,
        dest="n_threads",
        metavar="N",
        help="CPU threads (default: the physical cores)",
    )
    b.add_argument("--mlock", action="store_true", help="lock the weights in RAM")
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--history", action="store_true", help="list past runs instead of running")
    b.add_argument("--no-save", action="store_true", help="do not store this run")
    b.add_argument("--db", metavar="FILE", help="results database (default: user data dir)")
    b.add_argument(
        "--timeout", type=positive_number, default=300.0, metavar="S", help=argparse.SUPPRESS
    )
    # tests and bench/: an explicit plan "n_prompt,n_gen,depth,n_chat_prompt,repetitions"
    b.add_argument("--plan", type=_plan, default=None, help=argparse.SUPPRESS)
    add_users_flags(p.add_argument_group("users (load test)"))
    p.set_defaults(handler=run_bench, mode=None)


def _plan(value: str) -> BenchPlan:
    try:
        p, g, d, c, r = (int(x) for x in value.split(","))
        return BenchPlan("custom", n_prompt=p, n_gen=g, depth=d, n_chat_prompt=c, repetitions=r)
    except (ValueError, AssertionError):
        raise argparse.ArgumentTypeError(
            f"expected five numbers P,G,D,C,R, got {value!r}"
        ) from None


class Progress:
    """Print progress on ``stream``: one line per phase, rewritten in place on a TTY."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._last = ""
        self._quarter = -1

    def __call__(self, event: BenchProgress) -> None:
        if isinstance(event, LoadProgress):
            pct = int(event.fraction * 100)
            line = f"loading the model… {pct:3d}%"
            if not self.tty:  # a log, not a screen: every quarter is enough
                if pct // 25 == self._quarter:
                    return
                self._quarter = pct // 25
        elif isinstance(event, Loaded):
            r = event.report
            line = (
                f"loaded in {event.load_s:.2f} s (context {event.context_s:.2f} s): "
                f"{', '.join(f'{b.buffer} {b.mib:.2f} MiB' for b in r.model_buffers)}"
            )
        else:
            assert isinstance(event, BenchStep)
            line = f"benchmark {int(event.fraction * 100):3d}%  {event.label}"
        if line == self._last:
            return
        self._last = line
        if self.tty:
            control(self.stream, "\r\x1b[K")
            self.stream.write(line)
            if isinstance(event, Loaded):
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def done(self) -> None:
        if self.tty:
            control(self.stream, "\r\x1b[K")
            self.stream.write("benchmark 100%\n")
            self.stream.flush()


def _signed(n: int) -> str:
    return ("+" if n > 0 else "") + format_bytes(n, 2)


def gap_rows(gaps: tuple[MemoryGap, ...]) -> list[list[str]]:
    """Return the estimate-vs-measured table as rows of text (header first)."""
    rows = [["component", "device", "estimated", "measured", "difference", "tolerance", "ok"]]
    for g in gaps:
        rel = g.relative
        diff = _signed(g.difference_bytes) + (f" ({100 * rel:+.1f}%)" if rel is not None else "")
        tol = ("≥ −" if g.upper_bound else "±") + format_bytes(g.tolerance_bytes, 2)
        rows.append(
            [
                g.component,
                g.device,
                format_bytes(g.estimated_bytes, 2),
                format_bytes(g.measured_bytes, 2),
                diff,
                tol,
                "yes" if g.within_tolerance else "NO",
            ]
        )
    return rows


def _print_result(result: BenchResult, gaps: tuple[MemoryGap, ...]) -> None:
    s = result.settings
    mem = result.memory
    print(f"{result.model_name} — {os.path.basename(result.model_path)}")
    has_gpu = any(d.type in ("gpu", "igpu") for d in result.engine.devices)
    layers = offloaded_text(result.engine.offloaded_layers, result.engine.n_layer, has_gpu)
    print(
        f"  {result.backend}, {layers}, {result.n_threads} threads; context "
        f"{result.engine.n_ctx:,} cells, batch "
        f"{result.engine.n_batch}/{result.engine.n_ubatch}, flash attention "
        f"{'on' if result.engine.flash_attn else 'off'}, KV {s.cache_type_k}/{s.cache_type_v}"
    )
    print(
        f"  {result.engine.engine_version}; load {result.load_s:.2f} s; "
        f"{result.plan.mode} plan, {result.plan.repetitions} runs per test"
    )
    print()
    rows = [["test", "tok/s", "± sd"]]
    for f in result.speeds:
        rows.append([f.name, f"{f.tok_per_s.mean:.1f}", f"{f.tok_per_s.sd:.1f}"])
    ttft = result.ttft.stat
    rows.append(
        [
            f"time to first token ({result.ttft.n_prompt} tokens)",
            f"{ttft.mean:.3f} s",
            f"{ttft.sd:.3f}",
        ]
    )
    print_table(rows)
    print()
    split = ""
    if mem.peak_rss_file_bytes is not None and mem.peak_rss_anon_bytes is not None:
        split = (
            f" (file-backed {format_bytes(mem.peak_rss_file_bytes, 2)}, "
            f"anonymous {format_bytes(mem.peak_rss_anon_bytes, 2)})"
        )
    print(f"  peak RSS {format_bytes(mem.peak_rss_bytes, 2)}{split}; before loading "
          f"{format_bytes(mem.before_load.rss_bytes, 2)}")  # fmt: skip
    for gpu in mem.gpus:
        print(
            f"  GPU {gpu.index} {gpu.name}: {format_bytes(gpu.used_bytes, 2)} used by the process"
        )
    if mem.gpu_note:
        print(f"  {mem.gpu_note}")
    print("\nestimated vs measured:")
    print_table(gap_rows(gaps))


def _print_history(runs: list[StoredRun]) -> None:
    if not runs:
        print("no stored runs")
        return
    rows = [
        [
            "#",
            "date",
            "model",
            "mode",
            "backend",
            "ctx",
            "pp tok/s",
            "tg tok/s",
            "TTFT s",
            "peak RSS",
        ]
    ]
    for r in runs:
        rows.append(
            [
                str(r.id),
                r.created_at.replace("T", " ")[:16],
                r.model_name or r.model_file,
                r.mode,
                r.backend,
                str(r.settings.get("n_ctx", "?")),
                f"{r.pp_tok_per_s:.1f}" if r.pp_tok_per_s is not None else "-",
                f"{r.tg_tok_per_s:.1f}" if r.tg_tok_per_s is not None else "-",
                f"{r.ttft_s:.3f}" if r.ttft_s is not None else "-",
                format_bytes(r.peak_rss_bytes, 2),
            ]
        )
    print_table(rows)


def report_set_aside(db: ResultsDB) -> None:
    for moved in db.set_aside:
        print(f"ggtune: {moved.reason}; it was kept as {moved.path} and a new one started",
              file=sys.stderr)  # fmt: skip


def run_bench(args: argparse.Namespace) -> int:
    """Handle ``ggtune bench``; return the exit code."""
    db = ResultsDB(args.db) if args.db else ResultsDB()
    if args.history:
        model_hash = quick_file_hash(args.model) if args.model else None
        runs = db.runs(model_hash=model_hash)
        report_set_aside(db)
        if db.skipped_rows:
            print(
                f"ggtune: {db.skipped_rows} damaged run(s) in {db.path} were left out",
                file=sys.stderr,
            )
        if args.json:
            print(json.dumps([r.result | {"id": r.id} for r in runs], indent=2))
        else:
            _print_history(runs)
        return 0
    if not args.model:
        print("ggtune: bench needs a MODEL (or --history)", file=sys.stderr)
        return EXIT_USAGE
    if not os.path.isfile(args.model):
        raise ModelFileNotFoundError("no such model file", path=args.model)
    if args.n_threads is not None and args.n_threads < 1:
        print("ggtune: --threads must be ≥ 1", file=sys.stderr)
        return EXIT_USAGE
    if args.gpu_mem or args.ram is not None or getattr(args, "profile", None):
        print(
            "ggtune: bench measures this machine; --gpu-mem, --ram and --profile plan for "
            "another one (use ggtune estimate)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.users:
        return run_users(args, db)
    spec = load_model_spec(args.model)
    hardware = hardware_from_args(args)
    settings = settings_from_args(args, hardware)
    est = estimate(spec, settings, hardware)  # refuses what llama.cpp would refuse, early
    plan = args.plan or BenchPlan.of(args.mode or "quick")
    from runner.benchmark import benchmark

    progress = Progress(sys.stderr)
    result = benchmark(
        args.model,
        settings,
        plan,
        n_threads=args.n_threads,
        use_mlock=args.mlock,
        timeout_s=args.timeout,
        on_progress=progress,
    )
    progress.done()
    gaps = compare_memory(est, result)
    run_id = None
    store_error: str | None = None
    if not args.no_save:
        # The measurement is printed whatever the database does: a store that fails
        # (in use, read-only, a newer schema) is reported after it, never instead of it.
        try:
            run_id = db.add(result, model_hash=quick_file_hash(args.model))
        except ResultsDBError as err:
            store_error = str(err)
        except OSError as err:
            store_error = f"{args.model}: cannot read it to store the run: {err.strerror or err}"
    if args.json:
        data = result_to_dict(result) | {
            "comparison": [gap_to_dict(g) for g in gaps],
            "run_id": run_id,
            "database": None if args.no_save else os.fspath(db.path),
            "store_error": store_error,
        }
        print(json.dumps(data, indent=2))
    else:
        _print_result(result, gaps)
        if run_id is not None:
            print(f"\nstored as run #{run_id} in {db.path}")
    report_set_aside(db)
    if store_error is not None:
        print(f"ggtune: the run was measured but not stored: {store_error}", file=sys.stderr)
        return EXIT_USAGE
    return 0
