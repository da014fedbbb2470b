"""``ggtune estimate MODEL [flags]``: where every byte goes, per device; ``--verify`` adds
llama.cpp's own dry run beside it."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from app.model.spec import ModelSpec
from app.planning.runner_plan import RunnerPlan
from app.predict.estimate import DeviceEstimate, MemoryEstimate
from app.predict.verdict import verdict
from app.settings import Settings
from app.sources.reading import load_model_spec
from app.units import format_bytes
from ui.cli.commands import COMMANDS
from ui.cli.options import add_settings_flags, hardware_from_args, plan_from_args
from ui.cli.output import print_table


def register(sub: Any) -> None:
    """Add ``estimate`` to the ``ggtune`` subparsers ``sub``."""
    p_est = sub.add_parser("estimate", help=COMMANDS["estimate"].help)
    p_est.add_argument("model", help="path to a .gguf file (any shard of a split model)")
    add_settings_flags(p_est)
    p_est.add_argument(
        "-md",
        "--model-draft",
        dest="draft",
        metavar="GGUF",
        help="a draft model for speculative decoding (budgeted with every slot)",
    )
    p_est.add_argument("--json", action="store_true", help="print one JSON object")
    p_est.add_argument(
        "--verify",
        action="store_true",
        help="also run llama.cpp's own dry run and show both side by side",
    )
    p_est.set_defaults(handler=run_estimate)


def plan_dict(plan: RunnerPlan) -> dict[str, Any]:
    """Return what the runner decides, as plain data (``runner`` in ``estimate --json``)."""
    fit = plan.fit
    return {
        "name": plan.runner,
        "summary": plan.summary,
        "details": list(plan.details),
        "notes": list(plan.notes),
        "pinned": sorted(plan.pinned),
        "decided": sorted(plan.decided),
        "fit": None
        if fit is None
        else {
            "status": fit.status,
            "message": fit.message,
            "args": fit.args,
            "n_ctx": fit.n_ctx,
            "n_ctx_reduced_from": fit.n_ctx_reduced_from,
            "n_gpu_layers": fit.n_gpu_layers,
            "tensor_split": list(fit.tensor_split),
            "overrides": [list(o) for o in fit.buffer_overrides],
            "steps": list(fit.steps),
        },
        "fit_target_mib": list(plan.margins_mib),
        "fit_env": dict(plan.fit_env),
        "cache_ram_mib": plan.cache_ram_mib,
        "ctx_checkpoints": plan.ctx_checkpoints,
        "projector": None
        if plan.projector is None
        else {
            "path": plan.projector.path,
            "source": plan.projector.source,
            "weights_bytes": plan.projector.weights_bytes,
            "compute_bytes": plan.projector.compute_bytes,
            "on_gpu": plan.projector_on_gpu,
        },
    }


def estimate_dict(spec: ModelSpec, settings: Settings, est: MemoryEstimate) -> dict[str, Any]:
    """Return the estimate as plain data; the key names are a stable interface."""
    return {
        "model": {
            "path": spec.path,
            "architecture": spec.arch,
            "name": spec.name,
            "weights_bytes": spec.weights_bytes,
        },
        "settings": asdict(settings),
        "context": asdict(est.context),
        "n_gpu_layers": est.n_gpu_layers,
        "devices": [
            {
                "name": d.name,
                "kind": d.kind,
                "weights_bytes": d.weights_bytes,
                "kv_bytes": d.kv_bytes,
                "recurrent_bytes": d.recurrent_bytes,
                "compute_bytes": d.compute_bytes,
                "output_bytes": d.output_bytes,
                "other_bytes": d.other_bytes,
                "projector_bytes": d.projector_bytes,
                "draft_bytes": d.draft_bytes,
                "prompt_cache_bytes": d.prompt_cache_bytes,
                "checkpoint_bytes": d.checkpoint_bytes,
                "total_bytes": d.total_bytes,
                "growth_bytes": d.growth_bytes,
                "capacity_bytes": d.capacity_bytes,
                "fits": _device_fits(est, d),
                "n_layers": d.n_layers,
            }
            for d in est.devices
        ],
        "kv_cells": {c.kind: c.cells for c in est.caches},
        "caches": [asdict(c) | {"total_bytes": c.total_bytes} for c in est.caches],
        "total_bytes": est.total_bytes,
        "fits": est.fits,
        "kv_rule_known": est.kv_rule_known,
        "kv_status": est.kv_status,
        "compute_known": est.compute_known,
        "exact": est.exact,
        "not_estimated": list(est.not_estimated()),
        "engine_checked": list(est.engine_checked),
        "notes": list(est.notes),
    }


def _device_fits(est: MemoryEstimate, d: DeviceEstimate) -> bool | None:
    """Return whether ``d`` fits, never True on a guess (see MemoryEstimate.fits)."""
    if d.fits is False and (est.exact or est.certain_bytes(d) > (d.capacity_bytes or 0)):
        return False
    return d.fits if est.exact else None


_COLUMNS = (
    ("weights", "weights_bytes"),
    ("KV cache", "kv_bytes"),
    ("recurrent", "recurrent_bytes"),
    ("compute", "compute_bytes"),
    ("output", "output_bytes"),
    ("other", "other_bytes"),
    ("projector", "projector_bytes"),
    ("draft", "draft_bytes"),
    ("total", "total_bytes"),
    ("capacity", "capacity_bytes"),
    ("+prompt cache", "prompt_cache_bytes"),
    ("+checkpoints", "checkpoint_bytes"),
)
"""Columns of the table; the last two grow with use (their limits), apart from the total."""
_OPTIONAL = (
    "recurrent_bytes",
    "projector_bytes",
    "draft_bytes",
    "prompt_cache_bytes",
    "checkpoint_bytes",
)
"""Columns left out when every device has none of it."""


def _print_estimate(d: dict[str, Any]) -> None:
    ctx = d["context"]
    print(f"{d['model']['name'] or d['model']['path']} — {d['model']['architecture']}")
    runner = d.get("runner")
    if runner:
        print(f"  {runner['summary']}")
        for line in runner["details"]:
            print(f"    {line}")
    print(
        f"  context {ctx['n_ctx']:,} cells ({ctx['n_stream']} × {ctx['n_ctx_seq']:,} per "
        f"stream), batch {ctx['n_batch']}/{ctx['n_ubatch']}, flash attention "
        f"{'on' if ctx['flash_attn'] else 'off'}, GPU layers {d['n_gpu_layers']}"
    )
    columns = [(c, k) for c, k in _COLUMNS if k not in _OPTIONAL or any(x[k] for x in d["devices"])]
    rows = [["device", *[c for c, _ in columns], "fits"]]
    for dev in d["devices"]:
        fits = {True: "yes", False: "NO", None: "?"}[dev["fits"]]
        rows.append(
            [
                f"{dev['name']} ({dev['kind']})",
                *[format_bytes(dev[k], 2) for _, k in columns],
                fits,
            ]
        )
    print_table(rows)
    for c in d["caches"]:
        label = {
            "kv": "KV cache",
            "kv_swa": "SWA KV cache",
            "kv_idx": "indexer key cache",
            "recurrent": "recurrent state",
        }
        print(
            f"  {label[c['kind']]}: {c['cells']:,} cells × {c['n_stream']} stream(s), "
            f"{c['n_layers']} layers, {c['type_k']} {format_bytes(c['k_bytes'], 2)} + "
            f"{c['type_v']} {format_bytes(c['v_bytes'], 2)}"
        )
    for note in d["notes"]:
        print(f"  note: {note}")
    for note in (runner or {}).get("notes", []):
        print(f"  note: {note}")
    if d["engine_checked"]:
        print(f"  engine-checked (llama.cpp's dry run): {', '.join(d['engine_checked'])}")
    elif not d["exact"]:
        print(
            f"  not verified: {'; '.join(d['not_estimated'])} — no verdict on a guess; "
            "--verify runs llama.cpp's dry run (on a header stand-in if there is no file)"
        )


def _compare_rows(d: dict[str, Any], engine: Any) -> list[list[str]]:
    """Rows of estimate vs engine per component (engine numbers are llama.cpp's MiB)."""
    host = next(x for x in d["devices"] if x["kind"] == "host")
    pairs = [
        (
            "weights (file)",
            d["model"]["weights_bytes"],
            engine.model_size_bytes,
        ),
        ("KV cache", sum(x["kv_bytes"] for x in d["devices"]), engine.kv_bytes),
        (
            "recurrent state",
            sum(x["recurrent_bytes"] for x in d["devices"]),
            engine.recurrent_bytes,
        ),
        ("compute (host)", host["compute_bytes"], engine.compute_bytes_on("CPU")),
        ("output", host["output_bytes"], engine.output_bytes),
    ]
    rows = [["component", "estimate", "llama.cpp", "difference"]]
    for name, est_b, eng_b in pairs:
        if eng_b is None:
            rows.append([name, format_bytes(est_b, 2), "n/a", ""])
            continue
        diff = est_b - eng_b
        pct = f" ({100 * diff / eng_b:+.2f}%)" if eng_b else ""
        rows.append(
            [name, format_bytes(est_b, 2), format_bytes(eng_b, 2), format_bytes(diff, 2) + pct]
        )
    return rows


def run_estimate(args: argparse.Namespace) -> int:
    spec = load_model_spec(args.model)
    hardware = hardware_from_args(args)
    draft = load_model_spec(args.draft) if args.draft else None
    plan = plan_from_args(args, spec, hardware, model=args.model, draft=draft)
    settings, est = plan.settings, plan.estimate
    data = estimate_dict(spec, settings, est)
    data["runner"] = plan_dict(plan)
    engine = None
    analytic = data
    if args.verify:
        from app.measured.engine_checked import with_engine_figures
        from runner.engine_check import engine_check

        print("running llama.cpp's dry run…", file=sys.stderr)
        result = engine_check(spec, [settings])
        engine = result.reports[0]
        data["engine"] = engine.to_dict()
        if result.target.stand_in is not None:
            data["engine"]["stand_in"] = str(result.target.path)
        checked = with_engine_figures(est, engine)
        if checked.engine_checked:
            data = estimate_dict(spec, settings, checked) | {
                "engine": data["engine"],
                "runner": data["runner"],
            }
        est = checked
    v = verdict(est)
    data["verdict"] = v.headline
    data["verdict_details"] = list(v.details)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_estimate(data)
        print(f"  verdict: {data['verdict']}")
        for line in data["verdict_details"]:
            print(f"    {line}")
        if engine is not None:
            where = "a header stand-in" if "stand_in" in data["engine"] else "the model file"
            print(f"\nestimate vs llama.cpp (dry run on {where}, this machine):")
            print_table(_compare_rows(analytic, engine))
    return 0
