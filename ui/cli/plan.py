"""``ggtune plan MODEL --users N --ctx C --min-tps X``: how many users fit (N is the count the
user hopes for; the answer says whether it fits and the most that do).

MODEL is a path or ``catalog:NAME``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from app.measured.users_result import Slo
from app.model.catalog import is_catalog
from app.planning.planner import Capacity, max_users
from app.planning.users import measured_users, users_within_slo
from app.sources.reading import load_model_spec
from ui.cli.commands import COMMANDS
from ui.cli.options import hardware_from_args, positive_number
from ui.cli.planning import (
    candidate_dict,
    factors_from_args,
    goal_from_args,
    plan_flags,
    quants_from_args,
)


def register(sub: Any) -> None:
    """Add ``plan`` to the ``ggtune`` subparsers ``sub``."""
    c = sub.add_parser("plan", help=COMMANDS["plan"].help)
    plan_flags(c)
    c.add_argument(
        "--ttft",
        type=positive_number,
        default=None,
        metavar="S",
        help=f"first token within S seconds for users arriving together (default "
        f"{Slo().ttft_s:g}, the desktop's; 'ggtune bench --users' measures it)",
    )
    c.set_defaults(handler=run_plan)


def run_plan(args: argparse.Namespace) -> int:
    """Print how many users fit at ``--ctx`` and ``--min-tps``; return the exit code."""
    if args.ctx is None or args.min_tps is None:
        print("ggtune: plan needs --ctx and --min-tps (and --users for a target)", file=sys.stderr)
        return 2
    spec = load_model_spec(args.model)
    hardware = hardware_from_args(args)
    goal = goal_from_args(args, "users")
    factors = factors_from_args(args, spec, hardware)
    cap = max_users(
        spec,
        hardware,
        ctx_per_user=args.ctx,
        min_tok_per_s=args.min_tps,
        goal=goal,
        options=quants_from_args(args, spec),
        factors=factors,
    )
    slo = Slo(ttft_s=args.ttft if args.ttft is not None else Slo().ttft_s,
              min_tok_per_s=args.min_tps)  # fmt: skip
    within = users_within_slo(cap, hardware, slo, factors)  # the Memory view's count
    measured = None
    on_this_machine = not (args.profile or args.gpu_mem or args.ram)  # runs measured here
    if not is_catalog(spec.path) and on_this_machine:
        measured = measured_users(spec.path, slo, db_path=args.db)
    target_ok = within.n_users >= args.users
    if args.json:
        data = {
            "users_asked": args.users,
            "fits": target_ok,
            "max_users": cap.n_users,
            "users_within_slo": within.n_users,
            "slo": {"ttft_s": slo.ttft_s, "min_tok_per_s": slo.min_tok_per_s},
            "first_token_s": within.ttft_s,
            "calibrated": within.calibrated,
            "cpu_priced_by": _cpu_pricing(cap),
            "measured": dataclasses.asdict(measured) if measured else None,
            "ctx_per_user": cap.ctx_per_user,
            "min_tok_per_s": cap.min_tok_per_s,
            "limit": within.limit,
            "why": cap.why,
            "plan": candidate_dict(cap.plan) if cap.plan else None,
        }
        print(json.dumps(data, indent=2))
        return 0
    verdict = "yes" if target_ok else "no"
    print(f"{args.users} user(s) with {args.ctx:,} tokens, {slo.describe()}: {verdict}.")
    print(cap.why)
    count = f"{within.n_users} user{'s' if within.n_users != 1 else ''}"
    first = f", the last one's first token after {within.ttft_s:.2f} s" if within.ttft_s else ""
    basis = "calibrated on this machine's runs" if within.calibrated else "not calibrated"
    print(f"Within {slo.describe()}: {count}{first} (predicted, {basis}).")
    if measured is not None:
        print(f"  {measured.describe()} (ggtune bench --users or Verify).")
    if _cpu_pricing(cap) == "bandwidth":
        print(f"  {ROUGH_CPU}")
    return 0


ROUGH_CPU = (
    "The CPU's part is rough: priced by its memory bandwidth alone, as this CPU's kernels "
    "for this model were not timed yet ('ggtune bench MODEL --users 1' times them once)."
)


def _cpu_pricing(cap: Capacity) -> str | None:
    """Return how the plan's CPU share was priced: "kernels" (this CPU's timed kernels),
    "bandwidth" (its memory bandwidth alone, a rough figure), None (the CPU runs no layer)."""
    if cap.plan is None or cap.plan.speed.host_kernels is None:
        return None
    return "kernels" if cap.plan.speed.host_kernels else "bandwidth"
