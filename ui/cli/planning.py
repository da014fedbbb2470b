"""What ``ggtune compare``, ``recommend`` and ``plan`` share: the hardware and goal flags, the
values they become (speed factors fitted to this machine's own ``ggtune bench`` runs,
app/measured/results_db.py; the quant levels to weigh; the goal with its remote machines
and link), and a plan as plain data (the ``--json`` interface).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.measured.calibration import machine_factors
from app.model.catalog import is_catalog
from app.model.spec import ModelSpec
from app.planning.goals import DEFAULT_RPC_PORT, KV_TYPES, Candidate, Goal, RpcHost
from app.planning.options import COMPARE_QUANTS, QuantOption, quant_options
from app.predict.speed import (
    DEFAULT_DRAFT_ACCEPTANCE,
    DEFAULT_LINK_GBPS,
    DEFAULT_LINK_LATENCY_S,
    Link,
    SpeedFactors,
)
from app.sources.reading import load_model_spec
from app.units import GIB
from ui.cli.options import gib, nonnegative_number, positive_number


def hardware_flags(p: argparse.ArgumentParser) -> None:
    h = p.add_argument_group("hardware (default: this machine)")
    h.add_argument("--profile", metavar="NAME[,NAME]", default=None, help="plan for a profile")
    h.add_argument("--gpu-mem", type=gib, nargs="+", metavar="GiB", default=None)
    h.add_argument("--ram", type=gib, metavar="GiB", default=None)
    h.add_argument("--no-calibrate", action="store_true", help="use the published ratios")
    h.add_argument("--db", metavar="FILE", help="results database to calibrate from")


def plan_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="path to a .gguf file, or catalog:NAME")
    g = p.add_argument_group("constraints")
    g.add_argument("--ctx", type=int, metavar="N", help="context per user, tokens")
    g.add_argument("--min-ctx", type=int, default=0, metavar="N", help="never less context")
    g.add_argument("--users", type=int, default=1, metavar="N", help="parallel users")
    g.add_argument("--min-tps", type=positive_number, metavar="X", help="tok/s each user must get")
    g.add_argument(
        "--leave-free", type=nonnegative_number, default=0.0, metavar="GiB", help="keep free"
    )
    g.add_argument(
        "--kv-types",
        default="f16,q8_0",
        metavar="A,B",
        help=f"KV cache types allowed (of {', '.join(KV_TYPES)}; default f16,q8_0)",
    )
    g.add_argument(
        "--any-quant",
        action="store_true",
        help="also pick quants below Q4_K_M's quality (KLD > 0.031)",
    )
    g.add_argument("--no-simulate", action="store_true", help="only the model's own quant")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    hardware_flags(p)
    n = p.add_argument_group("split over several machines (llama.cpp's RPC backend)")
    n.add_argument(
        "--rpc-host",
        action="append",
        default=[],
        metavar="PROFILE[@HOST:PORT]",
        help="a remote machine running ggml-rpc-server, as a hardware profile (e.g. rtx-3090 "
        "or '2x rtx-3090', '32 GB' without a GPU); repeat for each; default address "
        "remoteN:50052",
    )
    n.add_argument(
        "--rpc-saved",
        action="store_true",
        help="also the machines remembered with ggtune hw --rpc-add (those that are on)",
    )
    n.add_argument(
        "--link-gbps", type=positive_number, default=DEFAULT_LINK_GBPS, metavar="X",
        help=f"network between the machines, Gbit/s (default {DEFAULT_LINK_GBPS:g})",
    )  # fmt: skip
    n.add_argument(
        "--link-latency-ms", type=nonnegative_number, default=DEFAULT_LINK_LATENCY_S * 1000,
        metavar="MS",
        help=f"latency per transfer, ms (default {DEFAULT_LINK_LATENCY_S * 1000:g})",
    )  # fmt: skip


def _this_machine(args: argparse.Namespace) -> bool:
    return not (args.profile or args.gpu_mem or args.ram)


def factors_from_args(
    args: argparse.Namespace, spec: ModelSpec, hardware: Hardware
) -> SpeedFactors:
    """Return speed factors fitted to this machine's stored runs (defaults elsewhere)."""
    if args.no_calibrate or not _this_machine(args):
        return SpeedFactors()
    return machine_factors(spec, hardware, db_path=args.db)


def quants_from_args(args: argparse.Namespace, spec: ModelSpec) -> tuple[QuantOption, ...]:
    size = None
    if not is_catalog(spec.path):
        try:
            size = os.path.getsize(spec.path)
        except OSError:
            size = None
    if getattr(args, "no_simulate", False):
        return quant_options(spec, simulate=None, file_bytes=size)
    return quant_options(spec, names=COMPARE_QUANTS, file_bytes=size)


def goal_from_args(args: argparse.Namespace, name: str) -> Goal:
    names = [t.strip() for t in args.kv_types.split(",") if t.strip()]
    bad = [t for t in names if t not in KV_TYPES]
    if bad:
        raise GGTuneError(f"unknown KV cache type {bad[0]!r}; choose from {', '.join(KV_TYPES)}")
    kv = tuple(t for t in KV_TYPES if t in names)
    return Goal(
        name,  # type: ignore[arg-type]
        ctx=args.ctx,
        min_ctx=args.min_ctx,
        n_users=args.users,
        min_tok_per_s=args.min_tps,
        leave_free_bytes=int(args.leave_free * GIB),
        max_kld=None if args.any_quant else Goal("fastest").max_kld,
        kv_types=kv,
        draft=load_model_spec(args.draft) if getattr(args, "draft", None) else None,
        draft_acceptance=getattr(args, "draft_acceptance", DEFAULT_DRAFT_ACCEPTANCE),
        rpc_hosts=_rpc_hosts(args),
        link=_link(args),
    )


def _rpc_hosts(args: argparse.Namespace) -> tuple[RpcHost, ...]:
    """Return the ``--rpc-host PROFILE[@HOST:PORT]`` machines (remoteN:50052 unnamed), then
    with ``--rpc-saved`` the remembered ones that are on (``ggtune hw --rpc-add``)."""
    from app.planning.machines import RemoteMachine, parse_machine, saved_hosts

    hosts = []
    for i, text in enumerate(getattr(args, "rpc_host", None) or [], start=1):
        if "@" in text:
            machine = parse_machine(text)
        else:
            machine = RemoteMachine(f"remote{i}:{DEFAULT_RPC_PORT}", text)
        hosts.append(machine.host())
    if getattr(args, "rpc_saved", False):
        saved = saved_hosts()
        if not saved:
            raise GGTuneError("--rpc-saved: no machine is remembered and on (ggtune hw --rpc-list)")
        hosts.extend(saved)
    return tuple(hosts)


def _link(args: argparse.Namespace) -> Link:
    try:
        return Link(
            getattr(args, "link_gbps", DEFAULT_LINK_GBPS),
            getattr(args, "link_latency_ms", DEFAULT_LINK_LATENCY_S * 1000) / 1000,
        )
    except ValueError as e:
        raise GGTuneError(str(e)) from e


def candidate_dict(c: Candidate) -> dict[str, Any]:
    """Return a plan as plain data (the ``--json`` interface)."""
    return {
        "quant": c.quant.name,
        "origin": c.quant.origin,
        "bits_per_weight": round(c.quant.bits_per_weight, 3),
        "settings": dataclasses.asdict(c.settings),
        "n_ctx_per_user": c.n_ctx_per_user,
        "n_users": c.n_users,
        "gpu_layers": c.gpu_layers,
        "n_layers": c.n_layers,
        "all_on_gpu": c.all_on_gpu,
        "devices": [
            {
                "name": d.name,
                "total_bytes": d.total_bytes,
                "capacity_bytes": d.capacity_bytes,
                "spare_bytes": None
                if d.capacity_bytes is None
                else d.capacity_bytes - d.total_bytes,
            }
            for d in c.estimate.devices
        ],
        "speed": {
            "depth": c.speed.depth,
            "decode_tok_per_s": c.speed.decode_tok_per_s,
            "prefill_tok_per_s": c.speed.prefill_tok_per_s,
            "ttft_s": c.speed.ttft_s,
            "per_user_tok_per_s": c.speed.per_user_tok_per_s,
            "aggregate_tok_per_s": c.speed.aggregate_tok_per_s,
            "calibration": c.speed.factors_source,
        },
        "quality": {
            "kld": c.quant.kld,
            "delta_ppl": c.quant.delta_ppl,
            "measured_on": c.quant.quality_model,
        },
    }
