"""``ggtune hf REPO``: every quant file of a Hugging Face repo, side by side, before downloading.

``ggtune hf org/name-GGUF -c 16384 --gpu-mem 24`` lists the repo's GGUF models (split
shards joined), reads only their headers over HTTP (range requests, cached on disk by
sha256) and prints per file: quant level, size, bits per weight, memory per device at the
chosen settings (app.predict.estimate) and whether it fits. ``--json`` prints one object.
``ggtune hf REPO --download Q4_K_M [--to DIR]`` downloads that model (all shards) into the
Hugging Face cache or ``DIR``, with progress, speed and ETA on stderr; an interrupted
download resumes on the next run. ``REPO`` is ``org/name``, ``org/name:FILE-or-QUANT``,
``org/name@revision`` or a huggingface.co / hf.co URL.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Any

from app.errors import GGTuneError
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.sources.hf import (
    DownloadProgress,
    RemoteModel,
    RepoListing,
    download,
    list_repo,
    read_models,
)
from app.sources.refs import parse_repo
from app.units import format_bytes, format_transfer_rate
from ui.cli.commands import COMMANDS
from ui.cli.options import add_settings_flags, hardware_from_args, settings_from_args
from ui.cli.output import control


def register(sub: Any) -> None:
    """Add the ``hf`` subcommand to the ``ggtune`` subparsers ``sub``."""
    p = sub.add_parser("hf", help=COMMANDS["hf"].help)
    p.add_argument(
        "repo", help="org/name, org/name:FILE-or-QUANT, org/name@revision or a huggingface.co URL"
    )
    add_settings_flags(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--download", metavar="FILE|QUANT", help="download this model (all shards of a split one)"
    )
    p.add_argument(
        "--to",
        metavar="DIR",
        type=Path,
        help="download into this folder instead of the Hugging Face cache",
    )
    p.add_argument(
        "--no-cache", action="store_true", help="read headers again instead of the cached copy"
    )
    p.set_defaults(handler=run_hf)


def run_hf(args: argparse.Namespace) -> int:
    """Compare the repo's models, or download one; return the exit code."""
    ref = parse_repo(args.repo)
    listing = list_repo(ref)
    if args.download or (args.to is not None):
        selector = args.download or ref.selector
        if not selector:
            print("ggtune: --to needs --download FILE|QUANT", file=sys.stderr)
            return 2
        return _download(listing, selector, args.to)
    entries = [listing.find(ref.selector)] if ref.selector else list(listing.models)
    models = read_models(listing, entries, cache=not args.no_cache)
    data = compare_dict(listing, models, args)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_compare(data)
    return 0


def compare_dict(
    listing: RepoListing, models: list[RemoteModel], args: argparse.Namespace
) -> dict[str, Any]:
    """Return the comparison as plain data (what ``hf --json`` prints)."""
    hardware = hardware_from_args(args)
    settings = settings_from_args(args, hardware)
    rows: list[dict[str, Any]] = []
    for m in models:
        row: dict[str, Any] = {
            "name": m.entry.name,
            "quant": m.entry.quant,
            "files": [f.path for f in m.entry.files],
            "size_bytes": m.entry.size_bytes,
            "sha256": [f.sha256 for f in m.entry.files],
            "url": listing.url(m.entry.files[0]),
        }
        if m.model is None:
            row["error"] = str(m.error)
            rows.append(row)
            continue
        spec = model_spec(m.model)
        try:
            est = estimate(spec, settings, hardware)
        except GGTuneError as err:  # one file's unsupported setting must not hide the others
            row["error"] = str(err)
            rows.append(row)
            continue
        row |= {
            "architecture": spec.arch,
            "parameters": spec.n_params,
            "bits_per_weight": round(spec.bits_per_weight, 3),
            "n_ctx": est.context.n_ctx,
            "devices": [
                {
                    "name": d.name,
                    "kind": d.kind,
                    "total_bytes": d.total_bytes,
                    "capacity_bytes": d.capacity_bytes,
                    "fits": d.fits,
                }
                for d in est.devices
            ],
            "total_bytes": est.total_bytes,
            "fits": est.fits,
        }
        rows.append(row)
    return {
        "repo": listing.repo_id,
        "revision": listing.revision,
        "commit": listing.commit,
        "models": rows,
        "extras": [{"path": f.path, "size_bytes": f.size_bytes} for f in listing.extras],
        "issues": list(listing.issues),
    }


def _print_compare(d: dict[str, Any]) -> None:
    print(f"{d['repo']} @ {d['revision']} ({d['commit'][:12]})")
    device_names: list[str] = []
    for row in d["models"]:
        for dev in row.get("devices", []):
            if dev["name"] not in device_names:
                device_names.append(dev["name"])
    ctx = next((r["n_ctx"] for r in d["models"] if "n_ctx" in r), None)
    header = ["quant", "file", "size", "bits/w", *device_names, "fits"]
    table = [header]
    errors = []
    for row in d["models"]:
        if "error" in row:
            errors.append(f"  {row['name']}: {row['error']}")
            table.append(
                [row["quant"] or "?", row["name"], format_bytes(row["size_bytes"], 2), "?"]
                + ["?"] * len(device_names)
                + ["?"]
            )
            continue
        per_dev = {dev["name"]: format_bytes(dev["total_bytes"], 2) for dev in row["devices"]}
        fits = {True: "yes", False: "NO", None: "?"}[row["fits"]]
        table.append(
            [
                row["quant"] or "?",
                row["name"]
                + (f" (+{len(row['files']) - 1} shards)" if len(row["files"]) > 1 else ""),
                format_bytes(row["size_bytes"], 2),
                f"{row['bits_per_weight']:.2f}",
                *[per_dev.get(n, "") for n in device_names],
                fits,
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for j, r in enumerate(table):
        print(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if j == 0:
            print("  ".join("-" * w for w in widths))
    if ctx is not None:
        print(f"memory per device at a context of {ctx:,} tokens (headers read over HTTP only)")
    for line in errors:
        print(line)
    for extra in d["extras"]:
        print(f"  also: {extra['path']} ({format_bytes(extra['size_bytes'], 2)}, not a model)")
    for issue in d["issues"]:
        print(f"  skipped: {issue}")
    print(f"download one: ggtune hf {d['repo']} --download QUANT [--to DIR]")


def _download(listing: RepoListing, selector: str, to: Path | None) -> int:
    entry = listing.find(selector)
    cancel = threading.Event()

    def show(p: DownloadProgress) -> None:
        eta = f"ETA {p.eta_s:,.0f} s" if p.eta_s is not None else "ETA ?"
        what = "checking" if p.stage == "checking" else format_transfer_rate(p.bytes_per_s)
        control(sys.stderr, "\r")
        sys.stderr.write(
            f"{entry.quant or entry.name}: {format_bytes(p.done_bytes, 2)} of "
            f"{format_bytes(p.total_bytes, 2)}  {what}  {eta}  "
            f"(file {p.file_index + 1}/{p.n_files})"
        )
        control(sys.stderr, "\x1b[K")
        sys.stderr.flush()

    try:
        path = download(listing, entry, to=to, progress=show, cancel=cancel)
    except KeyboardInterrupt:
        cancel.set()
        print("\nggtune: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    finally:
        print(file=sys.stderr)
    print(path)
    return 0
