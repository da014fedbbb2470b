"""``ggtune bench MODEL --users 1,2,4``: N users on the real engine, measured beside predicted.

Runs the multi-user load test (runner/load_test.py: N users decoding together with
continuous batching, prompts of the plan's length, arriving at once, staggered or as a
Poisson process) for each user count, prints each user's tok/s and time to first token
with their percentiles, the aggregate, the goodput under the SLO (``--ttft``,
``--min-tps``) and the answer in words, beside the speed model's prediction of the same
rounds (:func:`app.measured.users_result.predict_rounds`, calibrated on this machine's
stored runs where there are any). The run is stored in the results database and feeds the
calibration.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from typing import Any

from app.errors import ResultsDBError
from app.hardware.devices import Hardware
from app.measured.calibration import machine_factors
from app.measured.results_db import ResultsDB, quick_file_hash
from app.measured.users_result import (
    Arrivals,
    RoundSummary,
    Slo,
    UsersPlan,
    UsersResult,
    answer,
    settings_for_users,
    users_to_dict,
)
from app.model.spec import ModelSpec
from app.planning.users import predict_every_count
from app.predict.estimate import estimate
from app.predict.speed import SpeedFactors, kernel_needs
from app.settings import Settings
from app.sources.reading import load_model_spec
from ui.cli.options import hardware_from_args, settings_from_args
from ui.cli.output import EXIT_USAGE, print_table

MAX_USERS = 256


def user_counts(text: str) -> tuple[int, ...]:
    """Parse ``1,2,4,8`` (argparse type): distinct counts from 1 to 256, in order."""
    try:
        counts = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected user counts like 1,2,4, got {text!r}") from None
    if not counts or any(n < 1 or n > MAX_USERS for n in counts):
        raise argparse.ArgumentTypeError(f"user counts must be 1…{MAX_USERS}, got {text!r}")
    if len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"each user count once, got {text!r}")
    return counts


def arrivals(text: str) -> Arrivals:
    """Parse ``burst``, ``staggered:S`` or ``poisson:S`` (argparse type)."""
    try:
        return Arrivals.parse(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def add_users_flags(group: Any) -> None:
    """Add the load-test flags to ``ggtune bench``'s argument group."""
    group.add_argument(
        "--users",
        type=user_counts,
        metavar="N[,N…]",
        help="load test: N users decoding together, e.g. 1,2,4,8 (continuous batching)",
    )
    group.add_argument(
        "--ttft", type=float, default=None, metavar="S", help="SLO: first token within S s (2)"
    )
    group.add_argument(
        "--min-tps",
        type=float,
        default=None,
        metavar="X",
        help="SLO: at least X tok/s for each user (10)",
    )
    group.add_argument(
        "--prompt", type=int, default=None, metavar="N", help="tokens of each user's prompt"
    )
    group.add_argument(
        "--gen", type=int, default=None, metavar="N", help="tokens each user generates"
    )
    group.add_argument(
        "--depth",
        type=int,
        default=0,
        metavar="N",
        help="tokens of earlier conversation each user has cached (0)",
    )
    group.add_argument(
        "--arrivals",
        type=arrivals,
        default=Arrivals(),
        metavar="HOW",
        help="burst (all at once, the default), staggered:S or poisson:S (S s apart)",
    )
    group.add_argument("--rounds", type=int, default=None, metavar="N", help="rounds per count")


def users_plan(args: argparse.Namespace) -> UsersPlan:
    """Return the load test the flags ask for (quick: 128/32, thorough: 512/128 × 3)."""
    base = (
        UsersPlan.thorough(args.users) if args.mode == "thorough" else UsersPlan.quick(args.users)
    )
    return dataclasses.replace(
        base,
        n_prompt=args.prompt if args.prompt is not None else base.n_prompt,
        n_gen=args.gen if args.gen is not None else base.n_gen,
        depth=args.depth,
        arrivals=args.arrivals,
        repetitions=args.rounds if args.rounds is not None else base.repetitions,
    )


def users_settings(
    args: argparse.Namespace, spec: ModelSpec, hardware: Hardware, plan: UsersPlan
) -> Settings:
    """Return the settings for ``plan``: one slot per user unless ``-np`` says otherwise,
    and (unless ``-c`` is given) a context with room for every user's conversation."""
    if args.n_parallel is None:
        args.n_parallel = plan.max_users
    settings = settings_from_args(args, hardware)
    if settings.n_parallel < plan.max_users:
        raise ValueError(
            f"{plan.max_users} users need {plan.max_users} parallel slots; -np is "
            f"{settings.n_parallel}"
        )
    return settings_for_users(spec, settings, plan, context_given=args.n_ctx is not None)


@dataclasses.dataclass(frozen=True, slots=True)
class Prediction:
    """The speed model's view of the plan: one summary per user count, and the factors'
    source in words."""

    summaries: dict[int, RoundSummary]
    source: str
    calibrated: bool


def predict(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    plan: UsersPlan,
    slo: Slo,
    factors: SpeedFactors,
) -> Prediction:
    """Return the predicted rounds of every user count from 1 to the most of ``plan`` (the
    load test's scheduling, modelled times): the same prediction as Verify's Users run."""
    return Prediction(
        predict_every_count(spec, settings, hardware, plan, slo, factors),
        factors.source,
        factors.n_measurements > 0,
    )


def with_kernels(
    hardware: Hardware, spec: ModelSpec, settings: Settings, n_threads: int
) -> Hardware:
    """Return ``hardware`` with the host's kernel rates for ``n_threads``, timing the ones
    this model needs and the cache lacks (a child process, once per machine)."""
    from runner.kernel_bench import ensure_rates

    needs = kernel_needs(spec, settings, hardware)
    current = hardware.host.kernels
    if current is not None and current.n_threads != n_threads:
        current = None
    missing = needs.missing(current)
    if missing:
        types = ", ".join(sorted(missing.types)) or "attention"
        print(f"timing this CPU's kernels for {types} (once)…", file=sys.stderr)
    rates = ensure_rates(needs, n_threads=n_threads, rates=current)
    host = dataclasses.replace(hardware.host, kernels=rates)
    return dataclasses.replace(hardware, host=host)


def _cell(measured: float, predicted: float | None, fmt: str) -> str:
    if predicted is None or not math.isfinite(predicted):
        return format(measured, fmt)
    return f"{format(measured, fmt)} ({format(predicted, fmt)})"


def print_users(result: UsersResult, slo: Slo, pred: Prediction) -> None:
    """Print the load test: one row per user count, measured (predicted), and the answer."""
    plan = result.plan
    print(f"{result.model_name} — {os.path.basename(result.model_path)}")
    print(
        f"  {result.n_threads} threads; {plan.n_prompt}-token prompts after {plan.depth} "
        f"cached, {plan.n_gen} tokens each, users arrive {plan.arrivals.describe()}, "
        f"{plan.repetitions} round(s) per count"
    )
    print(f"  SLO: {slo.describe()}; predicted in brackets ({pred.source})")
    print()
    rows = [
        [
            "users",
            "tok/s each",
            "worst",
            "aggregate",
            "TTFT s",
            "TTFT p95",
            "TPOT p95 ms",
            "ITL p95 ms",
            "goodput",
        ]
    ]
    summaries = result.summaries(slo)
    for s in summaries:
        p = pred.summaries.get(s.n_users)
        rows.append(
            [
                str(s.n_users),
                _cell(s.per_user_tok_per_s, p.per_user_tok_per_s if p else None, ".1f"),
                f"{s.per_user_tok_per_s_min:.1f}",
                _cell(s.aggregate_tok_per_s, p.aggregate_tok_per_s if p else None, ".1f"),
                _cell(s.ttft_s, p.ttft_s if p else None, ".2f"),
                f"{s.ttft_p95_s:.2f}",
                f"{1000 * s.tpot_p95_s:.1f}",
                f"{1000 * s.itl_p95_s:.1f}",
                f"{s.goodput}/{s.n_users}",
            ]
        )
    print_table(rows)
    print()
    print(answer(summaries, slo))
    predicted = [pred.summaries[n] for n in sorted(pred.summaries)]  # every count
    print(f"predicted: {answer(predicted, slo)}")


def users_json(result: UsersResult, slo: Slo, pred: Prediction) -> dict[str, Any]:
    """Return the load test as JSON-ready data (the ``users`` list names the issue's fields)."""
    data = users_to_dict(result, slo)
    for entry in data["users"]:
        p = pred.summaries.get(entry["n_users"])
        entry["predicted_per_user_tok_per_s"] = p.per_user_tok_per_s if p else None
        entry["predicted_ttft_s"] = p.ttft_s if p else None
        entry["predicted_aggregate_tok_per_s"] = p.aggregate_tok_per_s if p else None
        entry["predicted_goodput"] = p.goodput if p else None
    predicted = [pred.summaries[n] for n in sorted(pred.summaries)]  # every count
    data["predicted_answer"] = answer(predicted, slo)
    data["prediction_source"] = pred.source
    data["prediction_calibrated"] = pred.calibrated
    return data


def run_users(args: argparse.Namespace, db: ResultsDB) -> int:
    """Handle ``ggtune bench MODEL --users …``; return the exit code."""
    from runner.benchmark import physical_cores
    from runner.load_test import LoadTest
    from ui.cli.bench import Progress, report_set_aside

    try:
        slo = Slo(
            ttft_s=args.ttft if args.ttft is not None else Slo().ttft_s,
            min_tok_per_s=args.min_tps if args.min_tps is not None else Slo().min_tok_per_s,
        )
        plan = users_plan(args)
    except ValueError as err:
        print(f"ggtune: {err}", file=sys.stderr)
        return EXIT_USAGE
    spec = load_model_spec(args.model)
    hardware = hardware_from_args(args)
    try:
        settings = users_settings(args, spec, hardware, plan)
    except ValueError as err:
        print(f"ggtune: {err}", file=sys.stderr)
        return EXIT_USAGE
    estimate(spec, settings, hardware)  # refuses what llama.cpp would refuse, early
    n_threads = args.n_threads or physical_cores()
    hardware = with_kernels(hardware, spec, settings, n_threads)
    factors = machine_factors(spec, hardware, db_path=args.db)
    pred = predict(spec, settings, hardware, plan, slo, factors)
    progress = Progress(sys.stderr)
    result = LoadTest(
        args.model,
        settings,
        plan,
        n_threads=n_threads,
        timeout_s=max(args.timeout, 600.0),
        on_progress=progress,
    ).run()
    progress.done()
    run_id = None
    store_error: str | None = None
    if not args.no_save:
        try:
            run_id = db.add_users(result, model_hash=quick_file_hash(args.model), slo=slo)
        except ResultsDBError as err:
            store_error = str(err)
        except OSError as err:
            store_error = f"{args.model}: cannot read it to store the run: {err.strerror or err}"
    if args.json:
        data = users_json(result, slo, pred) | {
            "run_id": run_id,
            "database": None if args.no_save else os.fspath(db.path),
            "store_error": store_error,
        }
        print(json.dumps(data, indent=2))
    else:
        print_users(result, slo, pred)
        if run_id is not None:
            print(f"\nstored as load test #{run_id} in {db.path}")
    report_set_aside(db)
    if store_error is not None:
        print(f"ggtune: the run was measured but not stored: {store_error}", file=sys.stderr)
        return EXIT_USAGE
    return 0
