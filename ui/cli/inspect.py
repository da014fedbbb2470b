"""``ggtune inspect MODEL``: what a model is, from its header alone."""

from __future__ import annotations

import argparse
import json
from typing import Any

from app.model.facts import ModelDescription, describe_model
from app.sources.reading import load_model_spec
from app.units import format_bytes
from ui.cli.commands import COMMANDS


def register(sub: Any) -> None:
    """Add ``inspect`` to the ``ggtune`` subparsers ``sub``."""
    p_inspect = sub.add_parser("inspect", help=COMMANDS["inspect"].help)
    p_inspect.add_argument("model", help="path to a .gguf file (any shard of a split model)")
    p_inspect.add_argument("--json", action="store_true", help="print one JSON object")
    p_inspect.set_defaults(handler=run_inspect)


def _print_inspect(d: ModelDescription) -> None:
    print(f"{d.name or d.path}")
    print(f"  file:           {d.path}")
    print(f"  architecture:   {d.architecture} ({d.memory_kind} memory)")
    print(f"  parameters:     {d.parameters / 1e9:.3f} B ({d.parameters:,})")
    print(
        f"  weights:        {format_bytes(d.weights_bytes, 2)}, "
        f"{d.bits_per_weight:.2f} bits per weight"
    )
    print(f"  context:        {d.context_length:,} tokens (training)")
    print(
        f"  layers:         {d.n_layer} — "
        + ", ".join(f"{n} {k}" for k, n in d.layers_by_kind.items())
    )
    print(
        f"  attention:      {d.n_head} heads, {d.n_head_kv} KV heads, "
        f"head size {d.head_size_k}/{d.head_size_v}"
        + (f", window {d.sliding_window} tokens" if d.sliding_window else "")
        + (
            f", MLA (latent rank {d.kv_lora_rank}, RoPE {d.rope_dimensions}; K-only cache)"
            if d.mla
            else ""
        )
    )
    if d.experts:
        e = d.experts
        print(
            f"  experts:        {e.used} of {e.total} used per token"
            + (f", {e.shared} shared" if e.shared else "")
        )
    print(
        f"  vocabulary:     {d.n_vocab:,} tokens"
        + (" (output tied to embeddings)" if d.tied_embeddings else "")
    )
    if d.kv_bytes_per_token:
        kv = ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in d.kv_bytes_per_token.items())
        print(f"  KV per token:   {kv} (all attention layers, before any window)")
    print("  quantization:")
    for name, q in sorted(d.quantization.items(), key=lambda kv: -kv[1].bytes):
        print(f"    {name:<8} {q.tensors:>5} tensors  {format_bytes(q.bytes, 2):>12}")
    for note in d.notes:
        print(f"  note: {note}")


def run_inspect(args: argparse.Namespace) -> int:
    description = describe_model(load_model_spec(args.model))
    if args.json:
        print(json.dumps(description.to_dict(), indent=2))
    else:
        _print_inspect(description)
    return 0
