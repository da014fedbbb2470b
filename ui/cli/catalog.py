"""``ggtune catalog``: the popular models ggtune can plan without downloading them.

``ggtune catalog`` lists the entries of ``profiles/models/`` (see app/model/catalog.py) with their
parameter count, layers, training context, KV cache per token at f16 and size at F16;
``--json`` prints the same as a list of objects. Any entry can then be used as a model:
``ggtune estimate catalog:qwen3-8b -c 32768 --gpu-mem 24``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.model.catalog import CATALOG_PREFIX, active_params, catalog_header, load_catalog
from app.model.facts import kv_bytes_per_token
from app.model.spec import model_spec
from app.units import format_bytes
from ui.cli.commands import COMMANDS


def register(sub: Any) -> None:
    """Add the ``catalog`` subcommand to the ``ggtune`` subparsers ``sub``."""
    p = sub.add_parser("catalog", help=COMMANDS["catalog"].help)
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(handler=run_catalog)


def catalog_rows() -> list[dict[str, Any]]:
    """Return one plain-data row per catalog entry (what ``catalog --json`` prints)."""
    rows = []
    for entry in load_catalog():
        spec = model_spec(catalog_header(entry))
        rows.append(
            {
                "model": f"{CATALOG_PREFIX}{entry.key}",
                "name": entry.name,
                "arch": spec.arch,
                "n_params": spec.n_params,
                "n_active_params": active_params(spec),
                "n_expert": spec.n_expert,
                "n_layer": spec.n_layer,
                "n_ctx_train": spec.n_ctx_train,
                "kv_bytes_per_token_f16": kv_bytes_per_token(spec, "f16"),
                "sliding_window": spec.n_swa if any(spec.is_swa) else None,
                "f16_bytes": spec.weights_bytes,
                "source": entry.source,
                "notes": entry.notes,
            }
        )
    return rows


def _billions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def run_catalog(args: argparse.Namespace) -> int:
    """Print the catalog as a table (or JSON); return the exit code."""
    rows = catalog_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ["model", "arch", "params", "active", "layers", "context", "KV/token f16", "F16"]
    table = [header]
    for r in rows:
        active = _billions(r["n_active_params"]) if r["n_expert"] else ""
        kv = f"{r['kv_bytes_per_token_f16'] / 1024:.0f} KiB"
        if r["sliding_window"]:
            kv += f" (SWA {r['sliding_window']})"
        table.append(
            [
                r["model"],
                r["arch"],
                _billions(r["n_params"]),
                active,
                str(r["n_layer"]),
                str(r["n_ctx_train"]),
                kv,
                format_bytes(r["f16_bytes"], 2),
            ]
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    print("\nuse one as MODEL: ggtune estimate catalog:qwen3-8b -c 32768 --gpu-mem 24")
    return 0
