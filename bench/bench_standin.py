"""Header stand-ins: how long an engine check takes, and the catalog's agreement table.

Run: ``.venv/bin/python -m bench.bench_standin > /tmp/standin.md`` (a few minutes on two
cores); ``--catalog-only`` prints the table alone, ``--keys=a,b`` only those entries' rows.
Prints markdown for docs/benchmarks.md:

1. the time of one engine check on a model without a file of its own: writing its
   stand-in (app/sources/standins.py, median of 5) and the dry run in a child process
   (runner/dry_run.py, one settings, median of 3), for catalog entries, a simulated quant
   and the demo files' own stand-ins;
2. per catalog entry, its stand-in dry-run beside the analytic estimate on the grid of
   tests/agreement: settings where the weights and every KV/recurrent cache agree, and
   the compute-buffer error at the time of the run (the compute model is helper
   compute's; these numbers say where it stands).
"""

from __future__ import annotations

import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from app.errors import EngineError, SettingsError
from app.hardware.devices import Hardware
from app.hardware.probe import local_cpu_flags
from app.model.catalog import catalog_header, catalog_keys
from app.model.gguf_reader import read_model
from app.model.quant import simulate_quant
from app.model.spec import ModelSpec, model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from app.sources.demo_models import ensure_demo_models
from app.sources.standins import write_model_standin
from bench.bench_agreement import describe, llama_mib
from runner.dry_run import dry_run, dry_run_many
from tests.agreement.test_agreement import settings_grid

MIB = 1024 * 1024
TIMED_CATALOG = ("smollm2-135m", "llama-3.1-8b", "gemma-3-27b", "llama-3.1-70b", "deepseek-v3")


def _median_s(fn: object, n: int) -> float:
    assert callable(fn)
    runs = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def timing(folder: Path) -> None:
    """Print the table of stand-in creation and dry-run times."""
    demo = ensure_demo_models()
    cases: list[tuple[str, ModelSpec]] = [
        (f"catalog {k}", model_spec(catalog_header(k))) for k in TIMED_CATALOG
    ]
    gemma = model_spec(read_model(demo.gemma))
    cases.append(("Gemma-3 270M simulated Q8_0", simulate_quant(gemma, "Q8_0").spec))
    settings = Settings(n_ctx=8192)
    print("| model | file size | header written | on disk | stand-in ms | dry run s | total s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, spec in cases:
        made = write_model_standin(spec, folder=folder)
        create = _median_s(lambda s=spec: write_model_standin(s, folder=folder), 5)
        run = _median_s(lambda p=made.path: dry_run(p, settings, timeout_s=300), 3)
        print(
            f"| {label} | {made.file_bytes / 2**30:.2f} GiB | {made.header_bytes / 1024:.0f} KiB "
            f"| {made.disk_bytes / 1024:.0f} KiB | {create * 1000:.1f} | {run:.2f} | "
            f"{create + run:.2f} |"
        )
    for label, path in (("SmolLM2-135M file", demo.smollm), ("Gemma-3 270M file", demo.gemma)):
        spec = model_spec(read_model(path))
        run = _median_s(lambda p=path: dry_run(p, settings, timeout_s=300), 3)
        print(
            f"| {label} (no stand-in needed) | {spec.weights_bytes / MIB:.0f} MiB | – | – "
            f"| – | {run:.2f} | {run:.2f} |"
        )


def catalog_table(folder: Path, keys: tuple[str, ...] = ()) -> None:
    """Print the catalog stand-ins' agreement with the estimate over the test grid."""
    hw = Hardware.cpu_only(cpu_flags=local_cpu_flags())
    print(
        "| catalog entry | arch | settings | weights = | KV/state = | compute error (min … max) "
        "| worst case |"
    )
    print("|---|---|---:|---:|---:|---:|---|")
    aborted: list[str] = []
    for key in keys or catalog_keys():
        spec = model_spec(catalog_header(key))
        valid = []
        for s in settings_grid():
            try:
                estimate(spec, s, hw)
            except SettingsError:
                continue
            valid.append(s)
        made = write_model_standin(spec, folder=folder)
        try:
            pairs = list(zip(valid, dry_run_many(made.path, valid, timeout_s=600), strict=True))
        except EngineError:
            pairs = []  # one settings aborts llama.cpp: run them one by one to see which
            for s in valid:
                try:
                    pairs.append((s, dry_run(made.path, s, timeout_s=600)))
                except EngineError as err:
                    aborted.append(f"| {key} | {describe(s)} | {str(err)[:90]} |")
        weights_ok = kv_ok = 0
        errors = []
        for s, report in pairs:
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
            kv_ok += ours == theirs and rs_ours == rs_theirs
            engine = report.compute_bytes_on("CPU")
            mine = est.device("CPU").compute_bytes
            errors.append((100.0 * (mine - engine) / engine, describe(s), mine / MIB, engine / MIB))
        worst = max(errors, key=lambda e: abs(e[0]))
        lo, hi = min(e[0] for e in errors), max(e[0] for e in errors)
        print(
            f"| {key} | {spec.arch} | {len(pairs)} | {weights_ok}/{len(pairs)} | "
            f"{kv_ok}/{len(pairs)} | {lo:+.1f}% … {hi:+.1f}% | "
            f"{worst[1]}: {worst[2]:.2f} vs {worst[3]:.2f} MiB |"
        )
    if aborted:
        print()
        print("Settings llama.cpp aborted on (the stand-in loads; the context does not):")
        print()
        print("| catalog entry | settings | engine |")
        print("|---|---|---|")
        print("\n".join(aborted))


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="ggtune-standins-"))
    print(
        f"machine: {platform.machine()} {platform.platform()}, {' '.join(local_cpu_flags())}; "
        f"Python {platform.python_version()}; {time.strftime('%Y-%m-%d %H:%M')}",
        file=sys.stderr,
    )
    if "--catalog-only" not in sys.argv:
        timing(folder)
        print()
    keys = next((a.removeprefix("--keys=") for a in sys.argv if a.startswith("--keys=")), "")
    catalog_table(folder, tuple(k for k in keys.split(",") if k))


if __name__ == "__main__":
    main()
