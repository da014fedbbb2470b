"""The ggtune command line: every capability of the app, scriptable.

``ggtune inspect MODEL`` describes a model; ``ggtune estimate MODEL [flags]`` says where every
byte goes. Settings flags use llama-server's names and meanings so users can paste what they
know; flags not given take the chosen runner's defaults. Errors are one line on stderr and
exit code 2.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict
from types import ModuleType
from typing import Any, NoReturn

from app.errors import GGTuneError, SettingsError
from app.hardware.devices import Device, Hardware
from app.hardware.probe import local_hardware
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.predict.estimate import MemoryEstimate, estimate, row_bytes
from app.settings import CACHE_TYPES, RUNNERS, RunnerName, Settings, runner_defaults

GIB = 1024**3
MIB = 1024**2
EXIT_USAGE = 2


def format_bytes(n: int | None) -> str:
    """Return ``n`` bytes as a short human string with its unit (MiB below 1 GiB)."""
    if n is None:
        return "unknown"
    if abs(n) >= GIB:
        return f"{n / GIB:.2f} GiB"
    return f"{n / MIB:.2f} MiB"


class _Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line and exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"ggtune: {message} (see ggtune {self.prog.split()[-1]} --help)\n")


def _on_off(value: str) -> bool:
    v = value.lower()
    if v in ("on", "1", "true", "yes"):
        return True
    if v in ("off", "0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {value!r}")


def _ngl(value: str) -> int:
    v = value.lower()
    if v in ("all", "auto", "max"):
        return -1
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, all or auto, got {value!r}") from None
    # llama.cpp treats any number above the layer count as "all"; -1 means all too
    return -1 if n < 0 else n


def _tensor_split(value: str) -> tuple[float, ...]:
    try:
        parts = tuple(float(p) for p in value.replace("/", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected proportions like 3,1, got {value!r}") from None
    if any(p < 0 for p in parts):
        raise argparse.ArgumentTypeError("tensor split proportions must be ≥ 0")
    return parts


def add_settings_flags(p: argparse.ArgumentParser) -> None:
    """Add llama-server's settings flags and the runner/hardware options to ``p``."""
    g = p.add_argument_group("settings (llama-server's flags; unset = the runner's default)")
    g.add_argument(
        "-c",
        "--ctx-size",
        type=int,
        dest="n_ctx",
        metavar="N",
        help="context size in tokens, all slots together (0 = training context)",
    )
    g.add_argument(
        "-ngl",
        "--n-gpu-layers",
        "--gpu-layers",
        type=_ngl,
        dest="n_gpu_layers",
        metavar="N",
        help="layers on the GPU (the output layer counts); all/auto = all",
    )
    g.add_argument(
        "-ctk", "--cache-type-k", choices=CACHE_TYPES, dest="cache_type_k", help="K cache type"
    )
    g.add_argument(
        "-ctv",
        "--cache-type-v",
        choices=CACHE_TYPES,
        dest="cache_type_v",
        help="V cache type (quantized needs flash attention)",
    )
    g.add_argument(
        "-fa",
        "--flash-attn",
        choices=("on", "off", "auto"),
        dest="flash_attn",
        help="flash attention",
    )
    g.add_argument(
        "-np",
        "--parallel",
        type=int,
        dest="n_parallel",
        metavar="N",
        help="parallel sequences (slots)",
    )
    g.add_argument(
        "-kvu",
        "--kv-unified",
        action="store_const",
        const=True,
        dest="kv_unified",
        help="one KV buffer shared by all slots",
    )
    g.add_argument(
        "--no-kv-unified",
        action="store_const",
        const=False,
        dest="kv_unified",
        help="one KV buffer per slot",
    )
    g.add_argument(
        "--swa-full",
        action="store_const",
        const=True,
        dest="swa_full",
        help="full-size sliding-window cache",
    )
    g.add_argument(
        "--no-swa-full",
        action="store_const",
        const=False,
        dest="swa_full",
        help="window-sized sliding-window cache",
    )
    g.add_argument(
        "-b",
        "--batch-size",
        type=int,
        dest="n_batch",
        metavar="N",
        help="logical batch size in tokens",
    )
    g.add_argument(
        "-ub",
        "--ubatch-size",
        type=int,
        dest="n_ubatch",
        metavar="N",
        help="physical batch size in tokens",
    )
    g.add_argument(
        "-ncmoe",
        "--n-cpu-moe",
        type=int,
        dest="n_cpu_moe",
        metavar="N",
        help="keep the MoE experts of the first N layers on the CPU",
    )
    g.add_argument(
        "-ts",
        "--tensor-split",
        type=_tensor_split,
        dest="tensor_split",
        metavar="A,B",
        help="share of layers per GPU, e.g. 3,1",
    )
    g.add_argument(
        "--no-mmap",
        action="store_const",
        const=False,
        dest="use_mmap",
        help="load weights into memory instead of mapping the file",
    )
    g.add_argument(
        "-nkvo",
        "--no-kv-offload",
        action="store_const",
        const=False,
        dest="offload_kqv",
        help="keep the KV cache in system RAM",
    )
    h = p.add_argument_group("runner and hardware")
    h.add_argument(
        "--runner",
        choices=RUNNERS,
        default="llama-server",
        help="whose defaults fill unset flags (default: llama-server)",
    )
    h.add_argument(
        "--gpu-mem",
        type=float,
        nargs="+",
        metavar="GiB",
        default=None,
        help="plan for GPUs of these sizes (one number per GPU)",
    )
    h.add_argument(
        "--ram",
        type=float,
        metavar="GiB",
        default=None,
        help="plan for this much system RAM (default: this machine's)",
    )
    h.add_argument(
        "--profile",
        metavar="NAME[,NAME]",
        default=None,
        help='plan for hardware profiles, e.g. rtx-4090, m2-max:64GB or "2x rtx-3090 + '
        '64 GB DDR5" (ggtune hw --profiles lists them)',
    )


_SETTING_FIELDS = (
    "n_ctx",
    "n_gpu_layers",
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "n_parallel",
    "kv_unified",
    "swa_full",
    "n_batch",
    "n_ubatch",
    "n_cpu_moe",
    "tensor_split",
    "use_mmap",
    "offload_kqv",
)


def settings_from_args(args: argparse.Namespace, hardware: Hardware) -> Settings:
    """Return the runner's defaults overridden by the flags the user gave."""
    runner: RunnerName = args.runner
    gpu_total = sum(g.capacity_bytes or 0 for g in hardware.gpus)
    base = runner_defaults(runner, gpu_total_bytes=gpu_total)
    given = {f: getattr(args, f) for f in _SETTING_FIELDS if getattr(args, f) is not None}
    if runner == "ollama" and "n_parallel" in given and "n_ctx" in given:
        # Ollama passes -c num_ctx*parallel: keep the user's per-slot meaning
        given["n_ctx"] = given["n_ctx"] * given["n_parallel"]
    if "n_batch" in given and "n_ubatch" not in given and runner == "ollama":
        given["n_ubatch"] = given["n_batch"]  # num_batch sets both -b and -ub
    if "n_parallel" in given and "kv_unified" not in given and runner == "llama-server":
        # setting -np turns llama-server's unified cache off (PR #16736)
        given["kv_unified"] = False
    return base.replace(**given)


def hardware_from_args(args: argparse.Namespace) -> Hardware:
    """Return this machine, or the GPUs/RAM the user asked to plan for."""
    here = local_hardware()
    host = here.host
    gpus: tuple[Device, ...] = here.gpus
    if getattr(args, "profile", None):
        from ui.cli.hw import hardware_from_profile

        planned = hardware_from_profile(args.profile, here, gpu_mem_given=bool(args.gpu_mem))
        host, gpus = planned.host, planned.gpus
    if args.ram is not None:
        ram = int(args.ram * GIB)
        host = Device("CPU", "host", ram, ram, cpu_flags=host.cpu_flags)
    if args.gpu_mem:
        gpus = tuple(
            Device(f"CUDA{i}", "gpu", int(g * GIB), int(g * GIB))
            for i, g in enumerate(args.gpu_mem)
        )
    return Hardware(host=host, gpus=gpus)


# --- inspect -------------------------------------------------------------------------------


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


# --- estimate ------------------------------------------------------------------------------


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
                "total_bytes": d.total_bytes,
                "capacity_bytes": d.capacity_bytes,
                "fits": d.fits,
                "n_layers": d.n_layers,
            }
            for d in est.devices
        ],
        "kv_cells": {c.kind: c.cells for c in est.caches},
        "caches": [asdict(c) | {"total_bytes": c.total_bytes} for c in est.caches],
        "total_bytes": est.total_bytes,
        "fits": est.fits,
        "kv_rule_known": est.kv_rule_known,
        "notes": list(est.notes),
    }


_COLUMNS = (
    ("weights", "weights_bytes"),
    ("KV cache", "kv_bytes"),
    ("recurrent", "recurrent_bytes"),
    ("compute", "compute_bytes"),
    ("output", "output_bytes"),
    ("other", "other_bytes"),
    ("total", "total_bytes"),
    ("capacity", "capacity_bytes"),
)


def _print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if j == 0:
            print("  ".join("-" * w for w in widths))


def _print_estimate(d: dict[str, Any]) -> None:
    ctx = d["context"]
    print(f"{d['model']['name'] or d['model']['path']} — {d['model']['architecture']}")
    print(
        f"  context {ctx['n_ctx']:,} cells ({ctx['n_stream']} × {ctx['n_ctx_seq']:,} per "
        f"stream), batch {ctx['n_batch']}/{ctx['n_ubatch']}, flash attention "
        f"{'on' if ctx['flash_attn'] else 'off'}, GPU layers {d['n_gpu_layers']}"
    )
    rows = [["device", *[c for c, _ in _COLUMNS], "fits"]]
    for dev in d["devices"]:
        fits = {True: "yes", False: "NO", None: "?"}[dev["fits"]]
        rows.append(
            [f"{dev['name']} ({dev['kind']})", *[format_bytes(dev[k]) for _, k in _COLUMNS], fits]
        )
    _print_table(rows)
    for c in d["caches"]:
        label = {"kv": "KV cache", "kv_swa": "SWA KV cache", "recurrent": "recurrent state"}
        print(
            f"  {label[c['kind']]}: {c['cells']:,} cells × {c['n_stream']} stream(s), "
            f"{c['n_layers']} layers, {c['type_k']} {format_bytes(c['k_bytes'])} + "
            f"{c['type_v']} {format_bytes(c['v_bytes'])}"
        )
    for note in d["notes"]:
        print(f"  note: {note}")


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
            rows.append([name, format_bytes(est_b), "n/a", ""])
            continue
        diff = est_b - eng_b
        pct = f" ({100 * diff / eng_b:+.2f}%)" if eng_b else ""
        rows.append([name, format_bytes(est_b), format_bytes(eng_b), format_bytes(diff) + pct])
    return rows


# --- entry point ---------------------------------------------------------------------------


Handler = Callable[[argparse.Namespace], int]


def _command_modules() -> list[ModuleType]:
    """Return the modules that add subcommands beside inspect and estimate.

    Each has ``register(sub) -> None`` adding its parsers with ``set_defaults(handler=…)``;
    a handler takes the parsed arguments and returns the exit code. Add a module here to
    add a command (ui/cli/*.py), so no command needs to edit another's code.
    """
    from ui.cli import bench, catalog, export, hf, hw, plan, quant

    return [hw, export, bench, catalog, quant, hf, plan]


def build_parser() -> argparse.ArgumentParser:
    """Return the ``ggtune`` argument parser."""
    parser = _Parser(prog="ggtune", description="Will this model fit, how fast, what settings?")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    p_inspect = sub.add_parser("inspect", help="describe a GGUF model")
    p_inspect.add_argument("model", help="path to a .gguf file (any shard of a split model)")
    p_inspect.add_argument("--json", action="store_true", help="print one JSON object")
    p_inspect.set_defaults(handler=_run_inspect)
    p_est = sub.add_parser("estimate", help="where every byte goes, per device")
    p_est.add_argument("model", help="path to a .gguf file (any shard of a split model)")
    add_settings_flags(p_est)
    p_est.add_argument("--json", action="store_true", help="print one JSON object")
    p_est.add_argument(
        "--verify",
        action="store_true",
        help="also run llama.cpp's own dry run and show both side by side",
    )
    p_est.set_defaults(handler=_run_estimate)
    for module in _command_modules():
        module.register(sub)
    return parser


def load_spec(path: str) -> ModelSpec:
    """Read the model at ``path`` (any shard, or ``catalog:NAME``) and return its spec."""
    if path.startswith("catalog:"):
        from app.model.catalog import catalog_header

        return model_spec(catalog_header(path))
    if path.startswith(("http://", "https://")):  # read over HTTP with range requests
        from app.sources.hf import read_url_model

        return model_spec(read_url_model(path))
    return model_spec(read_model(path))


def _run_inspect(args: argparse.Namespace) -> int:
    data = inspect_dict(load_spec(args.model))
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_inspect(data)
    return 0


def _run_estimate(args: argparse.Namespace) -> int:
    spec = load_spec(args.model)
    hardware = hardware_from_args(args)
    settings = settings_from_args(args, hardware)
    est = estimate(spec, settings, hardware)
    data = estimate_dict(spec, settings, est)
    engine = None
    if args.verify:
        from runner.dry_run import dry_run

        if args.model.startswith("catalog:"):
            raise SettingsError(
                "--verify runs llama.cpp on the model file; a catalog entry has no weights "
                "to load (download a GGUF of it and pass its path)"
            )

        print("running llama.cpp's dry run…", file=sys.stderr)
        engine = dry_run(args.model, settings)
        data["engine"] = engine.to_dict()
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_estimate(data)
        if engine is not None:
            print("\nestimate vs llama.cpp (dry run, this machine):")
            _print_table(_compare_rows(data, engine))
    return 0


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (errors: one line on stderr, code 2)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as stop:  # --help, or a bad flag (already reported on stderr)
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    handler: Handler = args.handler
    try:
        return handler(args)
    except GGTuneError as err:
        print(f"ggtune: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ggtune: interrupted", file=sys.stderr)
        return 130


def main() -> NoReturn:
    """Console-script entry point."""
    multiprocessing.freeze_support()
    sys.exit(run())


if __name__ == "__main__":
    main()
