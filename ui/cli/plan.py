"""``ggtune plan MODEL --users N --ctx C --min-tps X``: how many users fit (N is the count the
user hopes for; the answer says whether it fits and the most that do).

MODEL is a path or ``catalog:NAME``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.planning.planner import max_users
from app.sources.reading import load_model_spec
from ui.cli.commands import COMMANDS
from ui.cli.options import hardware_from_args
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
