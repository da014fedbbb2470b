"""``ggtune compare``, ``ggtune recommend`` and ``ggtune plan``: quants side by side, settings
for a goal with the reason, and how many users fit.

* ``ggtune compare MODEL [--ctx N] [--profile …] [--json]``: one row per quant level (the
  file and simulated ones): file size, bits per weight, memory per device at the context,
  whether it fits, predicted tok/s, quality loss, on disk or simulated.
* ``ggtune recommend MODEL --goal longest-context|fastest|best-quality|users [--users N
  --ctx C --min-tps X] [--leave-free GiB] [--min-ctx N] [--json]``: the plan and why.
* ``ggtune plan MODEL --users N --ctx C --min-tps X``: how many users fit (N is the count
  the user hopes for; the answer says whether it fits and the most that do).

MODEL is a path or ``catalog:NAME``; for ``compare`` also a Hugging Face repo (``org/name``,
``hf.co/org/name``, a huggingface.co URL, as :func:`app.sources.refs.parse_repo` reads it): one row
per quant file of the repo, source "hub", from headers read over HTTP (nothing downloaded); a
file whose header cannot be read gets a row with the error. On this machine (no
``--profile``/``--gpu-mem``) the speed model is calibrated with the user's own
``ggtune bench`` runs (app/measured/results_db.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import sys
from typing import Any

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.measured.calibration import machine_factors
from app.model.catalog import is_catalog
from app.model.spec import ModelSpec, model_spec
from app.planning.compare import CompareRow, compare_rows, repo_rows
from app.planning.goals import (
    DEFAULT_RPC_PORT,
    GOALS,
    KV_TYPES,
    LOCAL_MACHINE,
    Candidate,
    Goal,
    Recommendation,
    RpcHost,
)
from app.planning.options import COMPARE_QUANTS, QuantOption, quant_options
from app.planning.planner import max_users, recommend, server_argv
from app.planning.words import RPC_SECURITY_NOTE
from app.predict.speed import (
    DEFAULT_DRAFT_ACCEPTANCE,
    DEFAULT_LINK_GBPS,
    DEFAULT_LINK_LATENCY_S,
    Link,
    SpeedFactors,
)
from app.settings import ALL_LAYERS, Settings, runner_defaults
from app.sources.reading import load_model_spec
from app.sources.refs import is_repo, parse_repo
from app.units import GIB, format_bytes
from ui.cli.commands import COMMANDS
from ui.cli.options import gib, hardware_from_args, nonnegative_number, positive_number
from ui.cli.output import print_table


def _hardware_flags(p: argparse.ArgumentParser) -> None:
    h = p.add_argument_group("hardware (default: this machine)")
    h.add_argument("--profile", metavar="NAME[,NAME]", default=None, help="plan for a profile")
    h.add_argument("--gpu-mem", type=gib, nargs="+", metavar="GiB", default=None)
    h.add_argument("--ram", type=gib, metavar="GiB", default=None)
    h.add_argument("--no-calibrate", action="store_true", help="use the published ratios")
    h.add_argument("--db", metavar="FILE", help="results database to calibrate from")


def _plan_flags(p: argparse.ArgumentParser) -> None:
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
    _hardware_flags(p)
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


def register(sub: Any) -> None:
    """Add ``compare``, ``recommend`` and ``plan`` to the ``ggtune`` subparsers ``sub``."""
    p = sub.add_parser("compare", help=COMMANDS["compare"].help)
    p.add_argument(
        "model",
        help="path to a .gguf file, catalog:NAME, or a Hugging Face repo (org/name, hf.co/…, "
        "a huggingface.co URL): every quant file's header read over HTTP, nothing downloaded",
    )
    p.add_argument("--ctx", type=int, default=4096, metavar="N", help="context (default 4096)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _hardware_flags(p)
    p.set_defaults(handler=run_compare)

    r = sub.add_parser("recommend", help=COMMANDS["recommend"].help)
    _plan_flags(r)
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

    c = sub.add_parser("plan", help=COMMANDS["plan"].help)
    _plan_flags(c)
    c.set_defaults(handler=run_plan)


# --- shared ------------------------------------------------------------------------------


def _hardware(args: argparse.Namespace) -> Hardware:
    return hardware_from_args(args)


def _this_machine(args: argparse.Namespace) -> bool:
    return not (args.profile or args.gpu_mem or args.ram)


def _factors(args: argparse.Namespace, spec: ModelSpec, hardware: Hardware) -> SpeedFactors:
    """Return speed factors fitted to this machine's stored runs (defaults elsewhere)."""
    if args.no_calibrate or not _this_machine(args):
        return SpeedFactors()
    return machine_factors(spec, hardware, db_path=args.db)


def _options(args: argparse.Namespace, spec: ModelSpec) -> tuple[QuantOption, ...]:
    size = None
    if not is_catalog(spec.path):
        try:
            size = os.path.getsize(spec.path)
        except OSError:
            size = None
    if getattr(args, "no_simulate", False):
        return quant_options(spec, simulate=None, file_bytes=size)
    return quant_options(spec, names=COMPARE_QUANTS, file_bytes=size)


def _goal(args: argparse.Namespace, name: str) -> Goal:
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


# --- compare ---------------------------------------------------------------------------


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
    hardware = _hardware(args)
    settings = _compare_settings(args.ctx)
    factors = _factors(args, spec, hardware)
    rows = compare_rows(spec, _options(args, spec), settings, hardware, factors)
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
    hardware = _hardware(args)
    settings = _compare_settings(args.ctx)
    first = next((m.model for m in models if m.model is not None), None)
    factors = SpeedFactors()
    if first is not None:
        try:
            factors = _factors(args, model_spec(first), hardware)
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


# --- recommend / plan --------------------------------------------------------------------


def run_recommend(args: argparse.Namespace) -> int:
    """Print the plan for ``--goal`` and why; return the exit code."""
    spec = load_model_spec(args.model)
    hardware = _hardware(args)
    goal = _goal(args, args.goal)
    factors = _factors(args, spec, hardware)
    rec = recommend(spec, hardware, goal, options=_options(args, spec), factors=factors)
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


def run_plan(args: argparse.Namespace) -> int:
    """Print how many users fit at ``--ctx`` and ``--min-tps``; return the exit code."""
    if args.ctx is None or args.min_tps is None:
        print("ggtune: plan needs --ctx and --min-tps (and --users for a target)", file=sys.stderr)
        return 2
    spec = load_model_spec(args.model)
    hardware = _hardware(args)
    goal = _goal(args, "users")
    factors = _factors(args, spec, hardware)
    cap = max_users(
        spec,
        hardware,
        ctx_per_user=args.ctx,
        min_tok_per_s=args.min_tps,
        goal=goal,
        options=_options(args, spec),
        factors=factors,
    )
    target_ok = cap.n_users >= args.users
    if args.json:
        data = {
            "users_asked": args.users,
            "fits": target_ok,
            "max_users": cap.n_users,
            "ctx_per_user": cap.ctx_per_user,
            "min_tok_per_s": cap.min_tok_per_s,
            "limit": cap.limit,
            "why": cap.why,
            "plan": candidate_dict(cap.plan) if cap.plan else None,
        }
        print(json.dumps(data, indent=2))
        return 0
    verdict = "yes" if target_ok else "no"
    print(f"{args.users} user(s) with {args.ctx:,} tokens at ≥ {args.min_tps:g} tok/s: {verdict}.")
    print(cap.why)
    return 0
