"""``ggtune recommend MODEL --goal longest-context|fastest|best-quality|users [--users N --ctx C
--min-tps X] [--leave-free GiB] [--min-ctx N] [--json]``: the plan and why, with the
llama-server command, a draft model's verdict, and for a plan over several machines what
each one holds and sends, the commands for each and (``--write-scripts DIR``) their scripts.

MODEL is a path or ``catalog:NAME``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
from typing import Any

from app.errors import GGTuneError
from app.planning.goals import GOALS, LOCAL_MACHINE, Goal, Recommendation
from app.planning.planner import recommend, server_argv
from app.planning.words import RPC_SECURITY_NOTE
from app.predict.speed import DEFAULT_DRAFT_ACCEPTANCE
from app.sources.reading import load_model_spec
from app.units import format_bytes
from ui.cli.commands import COMMANDS
from ui.cli.options import hardware_from_args, nonnegative_number
from ui.cli.output import print_table
from ui.cli.planning import (
    candidate_dict,
    factors_from_args,
    goal_from_args,
    plan_flags,
    quants_from_args,
)


def register(sub: Any) -> None:
    """Add ``recommend`` to the ``ggtune`` subparsers ``sub``."""
    r = sub.add_parser("recommend", help=COMMANDS["recommend"].help)
    plan_flags(r)
    r.add_argument("--goal", choices=GOALS, required=True, help="what to optimise")
    d = r.add_argument_group("speculative decoding")
    d.add_argument(
        "--draft",
        metavar="MODEL",
        help="a draft model (path or catalog:NAME, at its own quant) to budget and judge",
    )
    d.add_argument(
        "--draft-acceptance", type=nonnegative_number, default=DEFAULT_DRAFT_ACCEPTANCE,
        metavar="A",
        help=f"share of drafted tokens the target accepts (default {DEFAULT_DRAFT_ACCEPTANCE:g})",
    )  # fmt: skip
    w = r.add_argument_group("scripts for a plan over several machines")
    w.add_argument(
        "--write-scripts",
        metavar="DIR",
        help="write one ggml-rpc-server script per remote machine and the llama-server "
        "script for this one into DIR (with --rpc-host or --rpc-saved)",
    )
    w.add_argument("--windows", action="store_true", help="PowerShell scripts (.ps1)")
    w.add_argument("--overwrite", action="store_true", help="replace scripts already in DIR")
    r.set_defaults(handler=run_recommend)


def run_recommend(args: argparse.Namespace) -> int:
    """Print the plan for ``--goal`` and why; return the exit code."""
    spec = load_model_spec(args.model)
    hardware = hardware_from_args(args)
    goal = goal_from_args(args, args.goal)
    factors = factors_from_args(args, spec, hardware)
    rec = recommend(spec, hardware, goal, options=quants_from_args(args, spec), factors=factors)
    if args.json:
        data = {
            "goal": _goal_dict(goal),
            "feasible": rec.feasible,
            "why": rec.why,
            "best": candidate_dict(rec.best) if rec.best else None,
            "runner_up": candidate_dict(rec.runner_up) if rec.runner_up else None,
            "evaluated": rec.n_evaluated,
            "draft": _draft_dict(rec),
            "rpc": _rpc_dict(rec),
            "command": None if rec.best is None else shlex.join(_server_argv(args, rec)),
        }
        print(json.dumps(data, indent=2))
        return 0
    print(rec.why)
    if rec.best is not None:
        # the exporter's own command line: every setting, --load-mode none included
        print(f"\nllama-server command: {shlex.join(_server_argv(args, rec))}")
        print(f"speed: {rec.best.speed.factors_source}")
        _print_draft_rpc(args, rec)
    if getattr(args, "write_scripts", None):
        _write_scripts(args, rec)
    return 0 if rec.best is not None else 1


def _goal_dict(goal: Goal) -> dict[str, Any]:
    """Return ``goal`` as plain data: the draft by its path, remotes by address."""
    data = {
        f.name: getattr(goal, f.name)
        for f in dataclasses.fields(goal)
        if f.name not in ("draft", "rpc_hosts", "link")
    }
    data["draft"] = goal.draft.path if goal.draft is not None else None
    data["rpc_hosts"] = [h.endpoint for h in goal.rpc_hosts]
    data["link"] = dataclasses.asdict(goal.link)
    return data


def _draft_dict(rec: Recommendation) -> dict[str, Any] | None:
    d = rec.draft
    if d is None:
        return None
    return {
        "model": d.spec.path,
        "used": d.used,
        "why": d.why,
        "acceptance": d.acceptance,
        "draft_max": d.draft_max,
        "n_gpu_layers": None if d.settings is None else d.settings.n_gpu_layers,
        "devices": None
        if d.estimate is None
        else {x.name: x.total_bytes for x in d.estimate.devices},
        "draft_tok_per_s": d.draft_tok_per_s,
        "target_tok_per_s": d.target_tok_per_s,
        "speed_ratio": d.speed_ratio,
        "tokens_per_step": d.tokens_per_step,
        "speedup": d.speedup,
        "decode_tok_per_s": d.decode_tok_per_s,
    }


def _rpc_dict(rec: Recommendation) -> dict[str, Any] | None:
    r = rec.rpc
    if r is None:
        return None
    t = r.traffic
    return {
        "machines": [dataclasses.asdict(m) for m in r.machines],
        "network_s_per_token": r.network_s_per_token,
        "depth": r.depth,
        "traffic": None
        if t is None
        else {
            "bytes_per_token": t.total_bytes,
            "round_trips": t.round_trips,
            "messages": t.messages,
            "complete": t.complete,
            "machines": [dataclasses.asdict(m) for m in t.machines],
        },
        "link": dataclasses.asdict(r.link),
        "remote_commands": [shlex.join(c) for c in r.remote_commands],
        "rpc": r.rpc_arg,
        "security": RPC_SECURITY_NOTE,
    }


def _write_scripts(args: argparse.Namespace, rec: Recommendation) -> None:
    """Write the pooled plan's scripts into ``--write-scripts DIR`` (atomic, none replaced
    unless ``--overwrite``); all are checked before the first is written."""
    from pathlib import Path

    from app.export.common import write_text_atomic
    from app.planning.pool import pool_scripts

    folder = Path(args.write_scripts)
    scripts = pool_scripts(args.model, rec, windows=args.windows)
    if not args.overwrite:
        taken = [s.filename for s in scripts if (folder / s.filename).exists()]
        if taken:
            raise GGTuneError(f"{folder}: {', '.join(taken)} already there (--overwrite replaces)")
    run = "powershell -File" if args.windows else "sh"
    print(f"\nscripts in {folder}:")
    for script in scripts:
        path = write_text_atomic(
            folder / script.filename, script.text, overwrite=args.overwrite, make_parents=True
        )
        print(f"  {run} {path}")


def _server_argv(args: argparse.Namespace, rec: Recommendation) -> tuple[str, ...]:
    return server_argv(args.model, rec, draft_path=getattr(args, "draft", None))


def _print_draft_rpc(args: argparse.Namespace, rec: Recommendation) -> None:
    """Print the draft's verdict and the commands for a draft or an RPC split."""
    if rec.draft is not None and rec.draft.used:
        print(f"draft: -md {rec.draft.spec.path} --spec-type draft-simple (see above)")
    if rec.rpc is not None:
        _print_machines(rec)
        print("\non each remote machine:")
        for host, argv in zip(rec.rpc.hosts, rec.rpc.remote_commands, strict=True):
            print(f"  {host.endpoint}:  {shlex.join(argv)}")
        print(f"  ({RPC_SECURITY_NOTE})")
        if any(h.endpoint.startswith("remote") for h in rec.rpc.hosts):
            print("  (remoteN: give each machine's address with --rpc-host PROFILE@HOST:PORT)")
    if rec.rpc is not None or (rec.draft is not None and rec.draft.used):
        print(f"\non this machine:\n  {shlex.join(_server_argv(args, rec))}")


def _print_machines(rec: Recommendation) -> None:
    """Print memory per device and machine, and what loading and one token send each one."""
    rpc, best = rec.rpc, rec.best
    if rpc is None or best is None or not rpc.machines:
        return
    where = {d: m.machine for m in rpc.machines for d in m.devices}
    rows = [["machine", "device", "layers", "weights", "KV", "compute", "total", "capacity",
             "spare"]]  # fmt: skip
    for d in best.estimate.devices:
        rows.append(
            [
                where.get(d.name, "?"),
                "RAM" if d.kind == "host" else d.name,
                str(d.n_layers),
                format_bytes(d.weights_bytes),
                format_bytes(d.kv_bytes + d.recurrent_bytes),
                format_bytes(d.compute_bytes),
                format_bytes(d.total_bytes),
                format_bytes(d.capacity_bytes),
                format_bytes(d.headroom_bytes),
            ]
        )
    print()
    print_table(rows)
    traffic = {m.machine: m for m in rpc.traffic.machines} if rpc.traffic else {}
    net = [["remote machine", "load", "reload (-c)", "sent/token", "back/token", "round trips"]]
    for m in rpc.machines:
        if m.machine == LOCAL_MACHINE:
            continue
        t = traffic.get(m.machine)
        net.append(
            [
                m.machine + (f" ({m.label})" if m.label else ""),
                format_bytes(m.load_bytes),
                format_bytes(m.reload_bytes),
                format_bytes(t.sent_bytes, down_to="bytes") if t else "-",
                format_bytes(t.received_bytes, down_to="bytes") if t else "-",
                str(t.round_trips) if t else "0",
            ]
        )
    print()
    print_table(net)
    if rpc.traffic is not None and not rpc.traffic.complete:
        print("  (this model has inputs the network figures leave out: they are a lower bound)")
