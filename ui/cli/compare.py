"""``ggtune compare MODEL [--ctx N] [--profile …] [--json]``: one row per quant level (the
file and simulated ones): file size, bits per weight, memory per device at the context,
whether it fits, predicted tok/s, quality loss, on disk or simulated.

MODEL is a path, ``catalog:NAME`` or a Hugging Face repo (``org/name``, ``hf.co/org/name``, a
huggingface.co URL, as :func:`app.sources.refs.parse_repo` reads it): one row per quant file
of the repo, source "hub", from headers read over HTTP (nothing downloaded); a file whose
header cannot be read gets a row with the error. On this machine (no
``--profile``/``--gpu-mem``) the speed model is calibrated with the user's own
``ggtune bench`` runs (app/measured/results_db.py).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.model.spec import model_spec
from app.planning.compare import CompareRow, compare_rows, repo_rows
from app.predict.speed import SpeedFactors
from app.settings import ALL_LAYERS, Settings, runner_defaults
from app.sources.reading import load_model_spec
from app.sources.refs import is_repo, parse_repo
from app.units import format_bytes
from ui.cli.commands import COMMANDS
from ui.cli.options import hardware_from_args
from ui.cli.output import print_table
from ui.cli.planning import factors_from_args, hardware_flags, quants_from_args


def register(sub: Any) -> None:
    """Add ``compare`` to the ``ggtune`` subparsers ``sub``."""
    p = sub.add_parser("compare", help=COMMANDS["compare"].help)
    p.add_argument(
        "model",
        help="path to a .gguf file, catalog:NAME, or a Hugging Face repo (org/name, hf.co/…, "
        "a huggingface.co URL): every quant file's header read over HTTP, nothing downloaded",
    )
    p.add_argument("--ctx", type=int, default=4096, metavar="N", help="context (default 4096)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    hardware_flags(p)
    p.set_defaults(handler=run_compare)


def _compare_settings(ctx: int) -> Settings:
    # llama-server's defaults, one user, every layer offloaded: the quants' own footprint
    return runner_defaults("llama-server").replace(
        n_ctx=ctx, n_gpu_layers=ALL_LAYERS, n_parallel=1, kv_unified=False
    )


def run_compare(args: argparse.Namespace) -> int:
    """Print every quant side by side; return the exit code."""
    if is_repo(args.model):
        return _run_compare_repo(args)
    spec = load_model_spec(args.model)
    hardware = hardware_from_args(args)
    settings = _compare_settings(args.ctx)
    factors = factors_from_args(args, spec, hardware)
    rows = compare_rows(spec, quants_from_args(args, spec), settings, hardware, factors)
    if args.json:
        data = {"model": spec.path, "n_ctx": args.ctx, "rows": [r.to_dict() for r in rows]}
        print(json.dumps(data, indent=2))
        return 0
    print(f"{spec.name or spec.path} at {args.ctx:,} tokens of context, most layers that fit")
    _print_compare_table(rows, hardware)
    print(f"speed: {factors.source}; KLD vs FP16 measured on Llama-3-8B (~: nearest bpw)")
    return 0


def _run_compare_repo(args: argparse.Namespace) -> int:
    """``ggtune compare REPO``: one row per quant file of the repo, headers read over HTTP."""
    from app.sources.hf import list_repo, read_models

    ref = parse_repo(args.model)
    listing = list_repo(ref)
    entries = [listing.find(ref.selector)] if ref.selector else list(listing.models)
    models = read_models(listing, entries)
    hardware = hardware_from_args(args)
    settings = _compare_settings(args.ctx)
    first = next((m.model for m in models if m.model is not None), None)
    factors = SpeedFactors()
    if first is not None:
        try:
            factors = factors_from_args(args, model_spec(first), hardware)
        except GGTuneError:
            factors = SpeedFactors()
    rows = repo_rows(listing, models, settings, hardware, factors)
    if args.json:
        data = {
            "model": f"{listing.endpoint}/{listing.repo_id}",
            "repo": listing.repo_id,
            "revision": listing.revision,
            "commit": listing.commit,
            "n_ctx": args.ctx,
            "rows": [r.to_dict() for r in rows],
            "issues": list(listing.issues),
        }
        print(json.dumps(data, indent=2))
        return 0
    print(
        f"{listing.repo_id} @ {listing.revision} ({listing.commit[:12]}) at {args.ctx:,} tokens "
        "of context, most layers that fit; headers read over HTTP, nothing downloaded"
    )
    if rows:
        _print_compare_table(rows, hardware)
    else:
        print("  the repo has no GGUF model files")
    for r in rows:
        if r.error:
            print(f"  {r.name}: {r.error}")
    for issue in listing.issues:
        print(f"  skipped: {issue}")
    print(f"speed: {factors.source}; KLD vs FP16 measured on Llama-3-8B (~: nearest bpw)")
    print(f"download one: ggtune hf {listing.repo_id} --download QUANT [--to DIR]")
    return 0


def _print_compare_table(rows: list[CompareRow], hardware: Hardware) -> None:
    names = [d.name for d in hardware.devices]
    table = [["quant", "file", "bpw", *names, "fits", "tok/s", "KLD", "source"]]
    for r in rows:
        if r.error:
            table.append(
                [r.quant, format_bytes(r.file_bytes, 2), "?", *["?"] * len(names), "?", "?",
                 "?", r.origin + " (unread)"]
            )  # fmt: skip
            continue
        used = {name: n for name, n, _cap in r.devices}
        table.append(
            [
                r.quant,
                format_bytes(r.file_bytes, 2),
                f"{r.bits_per_weight:.2f}",
                *[format_bytes(used[n], 2) if n in used else "?" for n in names],
                r.fits_text,
                f"{r.decode_tok_per_s:.1f}",
                r.quality_text,
                r.origin + (" (imatrix)" if r.needs_imatrix else ""),
            ]
        )
    print_table(table)
