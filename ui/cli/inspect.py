"""``ggtune inspect MODEL``: what a model is, from its header alone."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from typing import Any

from app.model.spec import ModelSpec
from app.predict.estimate import row_bytes
from ui.cli.commands import COMMANDS
from ui.cli.options import load_spec
from ui.cli.output import format_bytes


def register(sub: Any) -> None:
    """Add ``inspect`` to the ``ggtune`` subparsers ``sub``."""
    p_inspect = sub.add_parser("inspect", help=COMMANDS["inspect"].help)
    p_inspect.add_argument("model", help="path to a .gguf file (any shard of a split model)")
    p_inspect.add_argument("--json", action="store_true", help="print one JSON object")
    p_inspect.set_defaults(handler=run_inspect)


def kv_bytes_per_token(spec: ModelSpec, cache_type: str) -> int:
    """Return K+V bytes one token adds to the cache over all attention layers (no window)."""
    total = 0
    for il in range(spec.n_layer):
        if spec.is_recurrent[il] or spec.memory_kind in ("none", "unknown", "recurrent"):
            continue
        total += row_bytes(cache_type, spec.n_embd_k_gqa(il))  # type: ignore[arg-type]
        if not spec.is_mla:
            total += row_bytes(cache_type, spec.n_embd_v_gqa(il))  # type: ignore[arg-type]
    return total


def _layer_kinds(spec: ModelSpec) -> dict[str, int]:
    kinds: Counter[str] = Counter()
    for il in range(spec.n_layer):
        if spec.is_recurrent[il]:
            kinds["recurrent"] += 1
        elif spec.n_head_kv[il] == 0 and spec.memory_kind not in ("recurrent",):
            kinds["no KV"] += 1
        elif spec.is_swa[il]:
            kinds["sliding window"] += 1
        else:
            kinds["full attention"] += 1
    if spec.n_layer_nextn:
        kinds["NextN/MTP"] = spec.n_layer_nextn
    return dict(kinds)


def inspect_dict(spec: ModelSpec) -> dict[str, Any]:
    """Return the model description as plain data (what ``inspect --json`` prints)."""
    quant: dict[str, dict[str, int]] = {}
    for t in spec.tensors:
        q = quant.setdefault(t.type_name, {"tensors": 0, "bytes": 0, "params": 0})
        q["tensors"] += 1
        q["bytes"] += t.n_bytes
        q["params"] += t.n_elements
    kv_per_token: dict[str, int] | None = None
    if spec.kv_rule_known:
        kv_per_token = {}
        for ct in ("f16", "q8_0", "q4_0"):
            try:
                kv_per_token[ct] = kv_bytes_per_token(spec, ct)
            except AssertionError:
                continue  # head size not a multiple of this type's block
    return {
        "path": spec.path,
        "name": spec.name,
        "architecture": spec.arch,
        "parameters": spec.n_params,
        "weights_bytes": spec.weights_bytes,
        "bits_per_weight": round(spec.bits_per_weight, 3),
        "quantization": quant,
        "context_length": spec.n_ctx_train,
        "n_layer": spec.n_layer,
        "n_embd": spec.n_embd,
        "n_vocab": spec.n_vocab,
        "n_head": max(spec.n_head) if spec.n_head else 0,
        "n_head_kv": max(spec.n_head_kv) if spec.n_head_kv else 0,
        "head_size_k": spec.head_k_full,
        "head_size_v": spec.head_v_full,
        "sliding_window": spec.n_swa or None,
        "experts": {
            "total": spec.n_expert,
            "used": spec.n_expert_used,
            "shared": spec.n_expert_shared,
        }
        if spec.n_expert
        else None,
        "mla": spec.is_mla,
        "kv_lora_rank": spec.kv_lora_rank or None,
        "rope_dimensions": spec.n_rot,
        "tied_embeddings": spec.tied_embeddings,
        "memory_kind": spec.memory_kind,
        "kv_bytes_per_token": kv_per_token,
        "layers_by_kind": _layer_kinds(spec),
        "notes": list(spec.notes),
    }


def _print_inspect(d: dict[str, Any]) -> None:
    print(f"{d['name'] or d['path']}")
    print(f"  file:           {d['path']}")
    print(f"  architecture:   {d['architecture']} ({d['memory_kind']} memory)")
    print(f"  parameters:     {d['parameters'] / 1e9:.3f} B ({d['parameters']:,})")
    print(
        f"  weights:        {format_bytes(d['weights_bytes'])}, "
        f"{d['bits_per_weight']:.2f} bits per weight"
    )
    print(f"  context:        {d['context_length']:,} tokens (training)")
    print(
        f"  layers:         {d['n_layer']} — "
        + ", ".join(f"{n} {k}" for k, n in d["layers_by_kind"].items())
    )
    print(
        f"  attention:      {d['n_head']} heads, {d['n_head_kv']} KV heads, "
        f"head size {d['head_size_k']}/{d['head_size_v']}"
        + (f", window {d['sliding_window']} tokens" if d["sliding_window"] else "")
        + (
            f", MLA (latent rank {d['kv_lora_rank']}, RoPE {d['rope_dimensions']}; K-only cache)"
            if d["mla"]
            else ""
        )
    )
    if d["experts"]:
        e = d["experts"]
        print(
            f"  experts:        {e['used']} of {e['total']} used per token"
            + (f", {e['shared']} shared" if e["shared"] else "")
        )
    print(
        f"  vocabulary:     {d['n_vocab']:,} tokens"
        + (" (output tied to embeddings)" if d["tied_embeddings"] else "")
    )
    if d["kv_bytes_per_token"]:
        kv = ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in d["kv_bytes_per_token"].items())
        print(f"  KV per token:   {kv} (all attention layers, before any window)")
    print("  quantization:")
    for name, q in sorted(d["quantization"].items(), key=lambda kv: -kv[1]["bytes"]):
        print(f"    {name:<8} {q['tensors']:>5} tensors  {format_bytes(q['bytes']):>12}")
    for note in d["notes"]:
        print(f"  note: {note}")


def run_inspect(args: argparse.Namespace) -> int:
    data = inspect_dict(load_spec(args.model))
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_inspect(data)
    return 0
