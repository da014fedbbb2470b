"""Predicted vs measured decode and prefill speed for ``ggtune bench`` runs made here.

Run from the repository root::

    python -m bench.bench_speed RUN.json [RUN.json …] [--fixture tests/app/data/speed_runs.json]
    python -m bench.bench_speed --from-fixture tests/app/data/speed_runs.json

Each RUN.json is the output of ``ggtune bench MODEL --quick --json``. ``--fixture`` writes
the measurements (machine, date, settings, speeds) as the small JSON the tests read;
``--from-fixture`` reads them back (the model files must be in ``$GGTUNE_MODELS_DIR`` or
``~/.cache/ggtune/models``). Prints the markdown of docs/benchmarks.md's speed section:
for every test, the prediction with the published defaults, with the factors fitted to
all *other* runs (leave one run out: the model's own other runs included, so its
correction is fitted without the run it predicts), and fitted to the other *model's*
runs only (leave one model out: how well the machine factors carry to a new model).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `app` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.hardware.devices import Device, Hardware
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.predict.speed import (
    SpeedFactors,
    SpeedMeasurement,
    calibrate,
    measurements_from_record,
    predict_measurement,
    predict_speed,
    settings_from_dict,
)


def models_dir() -> Path:
    """Return where the demo models live."""
    env = os.environ.get("GGTUNE_MODELS_DIR")
    return Path(env) if env else Path.home() / ".cache" / "ggtune" / "models"


def fixture_record(run: dict[str, Any]) -> dict[str, Any]:
    """Return the part of a ``ggtune bench --json`` output the tests keep."""
    return {
        "run": run["run_name"],
        "model_file": os.path.basename(run["model_path"]),
        "started_at": run["started_at"],
        "n_threads": run["n_threads"],
        "settings": run["settings"],
        "speeds": [
            {k: s[k] for k in ("kind", "n_tokens", "depth", "tok_per_s", "tok_per_s_sd")}
            for s in run["speeds"]
        ],
        "ttft": {k: run["ttft"][k] for k in ("n_prompt", "seconds", "seconds_sd")},
    }


def load_fixture(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return (machine description, runs) of a fixture file."""
    data = json.loads(path.read_text())
    return data["machine"], data["runs"]


def host_of(machine: dict[str, Any]) -> Hardware:
    """Return the host the runs were measured on (bandwidth as ``ggtune hw`` measured it)."""
    return Hardware(
        host=Device(
            "CPU",
            "host",
            int(machine["ram_bytes"]),
            bandwidth_gb_per_s=float(machine["host_bandwidth_gb_per_s"]),
            cpu_flags=tuple(machine.get("cpu_flags", ())),
        )
    )


def measurements(
    runs: list[dict[str, Any]], hardware: Hardware, specs: dict[str, ModelSpec]
) -> list[tuple[str, SpeedMeasurement]]:
    """Return (run name, measurement) for every speed test of ``runs``."""
    out = []
    for r in runs:
        spec = specs[r["model_file"]]
        for m in measurements_from_record(r, spec, hardware, model_key=r["model_file"]):
            out.append((r["run"], m))
    return out


def _pct(pred: float, meas: float) -> str:
    return f"{100 * (pred - meas) / meas:+.0f}%"


def main(argv: list[str] | None = None) -> int:
    """Print the speed section (and write the fixture when asked); return the status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("runs", nargs="*", help="ggtune bench --json outputs")
    parser.add_argument("--fixture", type=Path, help="write the measurements here")
    parser.add_argument("--from-fixture", type=Path, help="read the measurements from here")
    parser.add_argument("--bandwidth", type=float, help="host GB/s (default: ggtune hw cache)")
    args = parser.parse_args(argv)
    if args.from_fixture:
        machine, runs = load_fixture(args.from_fixture)
    else:
        raw = []
        for p in args.runs:
            data = json.loads(Path(p).read_text())
            data["run_name"] = Path(p).stem
            raw.append(data)
        if not raw:
            parser.error("give RUN.json files or --from-fixture")
        from app.hardware.probe import local_hardware

        here = local_hardware()
        bw = args.bandwidth or here.host.bandwidth_gb_per_s
        machine = dict(raw[0]["machine"])
        machine["host_bandwidth_gb_per_s"] = bw
        machine["cpu_flags"] = list(here.host.cpu_flags)
        machine["measured_with"] = "ggtune bench MODEL --quick --json"
        runs = [fixture_record(r) for r in raw]
        if args.fixture:
            args.fixture.write_text(json.dumps({"machine": machine, "runs": runs}, indent=2) + "\n")
    hardware = host_of(machine)
    specs = {
        r["model_file"]: model_spec(read_model(str(models_dir() / r["model_file"]))) for r in runs
    }
    points = measurements(runs, hardware, specs)
    defaults = SpeedFactors()
    print(
        f"Machine: {machine['cpu_model']}, {machine['physical_cores']} cores, "
        f"{machine['ram_bytes'] / 1024**3:.1f} GiB RAM, host bandwidth "
        f"{machine['host_bandwidth_gb_per_s']:.1f} GB/s (`ggtune hw`), shared with other "
        f"jobs; runs of {runs[0]['started_at'][:10]}, `ggtune bench MODEL --quick --json`."
    )
    print()
    print(
        "| run | test | measured tok/s | default | err | leave-one-run-out | err "
        "| leave-one-model-out | err |"
    )
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    errs: dict[str, list[float]] = {"default": [], "loro": [], "lomo": []}
    for run, m in points:
        others = [p for r, p in points if r != run]
        loro = calibrate(others, model_key=m.model_key)
        lomo = calibrate([p for _, p in points if p.model_key != m.model_key])
        pd = predict_measurement(m, defaults)
        pr = predict_measurement(m, loro)
        pm = predict_measurement(m, lomo)
        for key, pred in (("default", pd), ("loro", pr), ("lomo", pm)):
            errs[key].append(abs(pred - m.tok_per_s) / m.tok_per_s)
        name = f"{m.kind}{m.n_tokens}" + (f" @ d{m.depth}" if m.depth else "")
        print(
            f"| {run} | {name} | {m.tok_per_s:.1f} | {pd:.1f} | {_pct(pd, m.tok_per_s)} "
            f"| {pr:.1f} | {_pct(pr, m.tok_per_s)} | {pm:.1f} | {_pct(pm, m.tok_per_s)} |"
        )
    print()
    for key, label in (
        ("default", "published defaults"),
        ("loro", "leave one run out"),
        ("lomo", "leave one model out"),
    ):
        e = errs[key]
        within = sum(x <= 0.25 for x in e)
        print(
            f"- {label}: median |error| {100 * statistics.median(e):.0f}%, "
            f"{within} of {len(e)} within ±25%"
        )
    print()
    print("| run | TTFT measured s | predicted s (leave one run out) |")
    print("|---|--:|--:|")
    for r in runs:
        own = [p for run, p in points if run != r["run"]]
        f = calibrate(own, model_key=r["model_file"])
        p = predict_speed(
            specs[r["model_file"]],
            settings_from_dict(r["settings"]),
            hardware,
            n_prompt=r["ttft"]["n_prompt"],
            factors=f,
        )
        print(f"| {r['run']} | {r['ttft']['seconds']:.3f} | {p.ttft_s:.3f} |")
    fitted = calibrate([p for _, p in points])
    print()
    print(
        f"Fitted on all runs (machine factors, no per-model correction): host bandwidth "
        f"efficiency {fitted.host_bandwidth_efficiency:.2f}, overhead "
        f"{1000 * fitted.host_overhead_s:.1f} ms/token, CPU prefill rate "
        f"{fitted.host_compute_gflops:.0f} GFLOP/s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
