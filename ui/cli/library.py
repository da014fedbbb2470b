"""``ggtune library [--json] [--add DIR]``: models in from disk. It lists the models on this
machine and, when an Ollama server runs, what it has loaded beside ggtune's estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from app.errors import GGTuneError
from app.sources.library import (
    Library,
    add_folder,
    compare_with_ollama,
    entries_as_dicts,
    scan_library,
)
from app.sources.ollama_api import ollama_status, show_model
from app.units import format_bytes
from ui.cli.commands import COMMANDS


def register(sub: argparse._SubParsersAction[Any]) -> None:
    """Add the ``library`` subcommand to ``sub``."""
    lib = sub.add_parser("library", help=COMMANDS["library"].help)
    lib.add_argument("--json", action="store_true", help="print one JSON object")
    lib.add_argument("--add", metavar="DIR", help="add a folder to scan from now on")
    lib.set_defaults(handler=run_library)


def run_library(args: argparse.Namespace) -> int:
    """List the library (and Ollama's loaded models); return the exit code."""
    if args.add:
        added = add_folder(args.add)
        print(f"added {added}", file=sys.stderr)
    library = scan_library()
    status = ollama_status()
    comparisons = _ollama_comparisons(library, status.models) if status.running else []
    if args.json:
        data = {
            "models": entries_as_dicts(library.entries),
            "issues": [{"path": i.path, "message": i.message} for i in library.issues],
            "ollama": {
                "url": status.base_url,
                "running": status.running,
                "error": status.error,
                "loaded": [
                    {
                        "name": m.name,
                        "size_bytes": m.size_bytes,
                        "size_vram_bytes": m.size_vram_bytes,
                        "context_length": m.context_length,
                    }
                    for m in status.models
                ],
                "comparisons": comparisons,
            },
        }
        print(json.dumps(data, indent=2))
        return 0
    _print_library(library)
    if not status.running:
        print(f"\nOllama: not running ({status.base_url})")
    else:
        print(f"\nOllama at {status.base_url}: {len(status.models)} model(s) loaded")
        for m in status.models:
            print(
                f"  {m.name}: {format_bytes(m.size_bytes, 2)} in all, "
                f"{format_bytes(m.size_vram_bytes, 2)} on GPUs, context {m.context_length} per slot"
            )
        for c in comparisons:
            print(
                f"  {c['name']}: ggtune estimates {format_bytes(c['ggtune_total_bytes'], 2)} in "
                f"all, {format_bytes(c['ggtune_gpu_bytes'], 2)} on GPUs for the same settings"
            )
    return 0


def _ollama_comparisons(library: Library, models: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    parallel = os.environ.get("OLLAMA_NUM_PARALLEL", "1").strip() or "1"
    kv = os.environ.get("OLLAMA_KV_CACHE_TYPE", "f16").strip().lower() or "f16"
    for m in models:
        entry = library.find(m.name)
        if entry is None:
            continue
        show = show_model(m.name)
        try:
            c = compare_with_ollama(
                m,
                entry.path,
                num_parallel=int(parallel) if parallel.isdigit() else 1,
                kv_cache_type=kv,
                parameters=show.parameters if show else None,
            )
        except GGTuneError:
            continue
        out.append(
            {
                "name": c.name,
                "ollama_total_bytes": c.ollama_total_bytes,
                "ollama_vram_bytes": c.ollama_vram_bytes,
                "ggtune_total_bytes": c.ggtune_total_bytes,
                "ggtune_gpu_bytes": c.ggtune_gpu_bytes,
            }
        )
    return out


def _print_library(library: Library) -> None:
    if not library.entries:
        print("no GGUF models found")
    for e in library.entries:
        extra = f" (same file as {e.duplicate_of})" if e.duplicate_of else ""
        kind = " [projector]" if e.kind == "projector" else ""
        shards = f", {len(e.files)} shards" if len(e.files) > 1 else ""
        print(
            f"{e.source:<11} {e.name}{kind}  {format_bytes(e.size_bytes, 2)}{shards}  "
            f"{e.architecture or '?'}{extra}"
        )
        print(f"{'':<11} {e.path}")
    for issue in library.issues:
        print(f"skipped: {issue.path}: {issue.message}")


__all__ = ["register", "run_library"]
