"""``ggtune quants MODEL``: the model at every llama.cpp quant level, without quantizing.

One row per file type (app/model/quant.py simulates ``llama_model_quantize`` tensor by tensor):
file size, bits per weight, whether llama.cpp needs an importance matrix to make it, and
the quality cost measured by llama.cpp (app/model/quality.py, with the model it was measured
on). ``--json`` prints the same as a list of objects. MODEL is a .gguf file or
``catalog:NAME``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.model.catalog import is_catalog
from app.model.gguf_reader import read_model
from app.model.quality import QualityTable, load_quality, weight_quality
from app.model.quant import QuantFailure, QuantResult, simulate_all
from app.model.spec import ModelSpec, model_spec
from app.sources.reading import load_model_spec
from app.units import format_bytes
from ui.cli.commands import COMMANDS


def register(sub: Any) -> None:
    """Add the ``quants`` subcommand to the ``ggtune`` subparsers ``sub``."""
    p = sub.add_parser("quants", help=COMMANDS["quants"].help)
    p.add_argument("model", help="path to a .gguf file, or catalog:NAME")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(handler=run_quants)


def _load(path: str) -> tuple[ModelSpec, int]:
    if is_catalog(path):
        return load_model_spec(path), 0
    model = read_model(path)
    return model_spec(model), model.shards[0].data_offset


def quant_rows(spec: ModelSpec, header_bytes: int, table: QualityTable) -> list[dict[str, Any]]:
    """Return one plain-data row per file type (what ``quants --json`` prints)."""
    rows: list[dict[str, Any]] = []
    for r in simulate_all(spec, header_bytes=header_bytes):
        row: dict[str, Any] = {"quant": r.file_type.name, "ftype": r.file_type.ftype}
        if isinstance(r, QuantFailure):
            row.update(possible=False, reason=r.reason)
            rows.append(row)
            continue
        assert isinstance(r, QuantResult)
        q = weight_quality(table, r.file_type.name, imatrix=r.needs_imatrix)
        row.update(
            possible=True,
            file_bytes=r.file_bytes,
            weights_bytes=r.tensor_bytes,
            bits_per_weight=round(r.bits_per_weight, 4),
            needs_imatrix=r.needs_imatrix,
            requantizes=r.requantizes,
            n_fallback=r.n_fallback,
            types=r.type_counts(),
            quality=None
            if q is None
            else {
                "delta_ppl": q.delta_ppl,
                "kld": q.kld,
                "same_top_token_pct": q.same_top_token_pct,
                "model": q.model,
                "imatrix": q.imatrix,
                "source": q.source.url,
            },
        )
        rows.append(row)
    return rows


def run_quants(args: argparse.Namespace) -> int:
    """Print the quant table for ``args.model``; return the exit code."""
    spec, header_bytes = _load(args.model)
    rows = quant_rows(spec, header_bytes, load_quality())
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{spec.name or spec.path} ({spec.arch}), {spec.n_params / 1e9:.2f} B parameters")
    print(f"{'quant':<10} {'file':>10} {'bpw':>6}  {'imatrix':<8} quality loss (measured on)")
    for row in rows:
        if not row["possible"]:
            print(f"{row['quant']:<10} {'—':>10} {'—':>6}  {'':<8} not possible: {row['reason']}")
            continue
        q = row["quality"]
        quality = (
            f"+{q['delta_ppl']:.3f} PPL, KLD {q['kld']:.4f} ({q['model']}"
            f"{', imatrix' if q['imatrix'] else ''})"
            if q
            else "not measured"
        )
        print(
            f"{row['quant']:<10} {format_bytes(row['file_bytes'], 2):>10} "
            f"{row['bits_per_weight']:>6.2f}  {'needed' if row['needs_imatrix'] else '':<8} "
            f"{quality}"
        )
    print("Quality: llama.cpp tools/perplexity/README.md; smaller models lose more.")
    return 0
