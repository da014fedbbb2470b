"""How many users a plan serves within an SLO, predicted and (where run) measured.

:func:`app.planning.planner.max_users` finds the most users whose KV cache fits and who
each decode at the SLO's speed. The SLO also bounds the time to first token, which grows
with the users arriving together (their prompts share the batches): :func:`users_within_slo`
takes the capacity down to the users whose first token also comes in time, predicted by
replaying a burst of them through the load test's scheduling
(:func:`app.measured.users_result.predict_rounds`). :func:`measured_users` reads the
newest stored load test of the model under the same SLO, so the Memory view can say
whether its figure is measured or predicted.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Final

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.measured.users_result import (
    RoundSummary,
    Slo,
    UsersPlan,
    predict_rounds,
    served_users,
    summarize,
)
from app.model.spec import ModelSpec
from app.planning.goals import Candidate
from app.planning.planner import Capacity
from app.predict.estimate import resolve_context
from app.predict.speed import SpeedFactors, workload
from app.settings import Settings

FIRST_TOKEN_PROMPT: Final = 128
"""Tokens of each user's prompt for the first-token check (a chat turn)."""


@dataclass(frozen=True, slots=True)
class UsersAnswer:
    """Users served within ``slo`` (predicted): ``n_users``; ``capacity`` the memory and speed
    bound before the first-token check; ``ttft_s`` the predicted first token of the last of
    ``n_users`` arriving together; ``limit`` what stops one more ("memory", "speed" or
    "first token"); ``calibrated`` whether the speed model was fitted to this machine."""

    n_users: int
    capacity: Capacity
    ttft_s: float | None
    slo: Slo
    limit: str
    calibrated: bool


def burst_ttft_s(
    capacity: Capacity, hardware: Hardware, n_users: int, factors: SpeedFactors, n_prompt: int
) -> float:
    """Return the predicted first token (worst user) of ``n_users`` arriving together."""
    plan = capacity.plan
    assert plan is not None, "a capacity of at least one user has a plan"
    return plan_burst_ttft_s(plan, hardware, n_users, factors, n_prompt)


def plan_burst_ttft_s(
    plan: Candidate, hardware: Hardware, n_users: int, factors: SpeedFactors, n_prompt: int
) -> float:
    """Return the predicted first token (worst user) of ``n_users`` arriving together at
    ``plan``'s settings."""
    settings = plan.settings
    work = workload(plan.quant.spec, settings, hardware, factors)
    n_batch = resolve_context(plan.quant.spec, settings).n_batch
    users = UsersPlan(n_users=(n_users,), n_prompt=n_prompt, n_gen=2)
    (r,) = predict_rounds(work, users, n_batch=n_batch, factors=factors)
    return max(u.ttft_s for u in r.users)


def users_within_slo(
    capacity: Capacity,
    hardware: Hardware,
    slo: Slo,
    factors: SpeedFactors,
    *,
    n_prompt: int = FIRST_TOKEN_PROMPT,
) -> UsersAnswer:
    """Return the users of ``capacity`` whose first token also comes within ``slo.ttft_s``.

    The first token grows with the users arriving together, so the count is a binary
    search between 1 and ``capacity.n_users``.
    """
    calibrated = factors.n_measurements > 0
    if capacity.plan is None or capacity.n_users < 1:
        return UsersAnswer(0, capacity, None, slo, capacity.limit, calibrated)
    try:
        top = capacity.n_users
        ttft_top = burst_ttft_s(capacity, hardware, top, factors, n_prompt)
        if ttft_top <= slo.ttft_s:
            return UsersAnswer(top, capacity, ttft_top, slo, capacity.limit, calibrated)
        lo, lo_ttft, hi = 0, None, top  # lo meets the SLO, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            t = burst_ttft_s(capacity, hardware, mid, factors, n_prompt)
            if t <= slo.ttft_s:
                lo, lo_ttft = mid, t
            else:
                hi = mid
        return UsersAnswer(lo, capacity, lo_ttft, slo, "first token", calibrated)
    except GGTuneError:
        return UsersAnswer(capacity.n_users, capacity, None, slo, capacity.limit, calibrated)


@dataclass(frozen=True, slots=True)
class MeasuredUsers:
    """The newest stored load test of a model under an SLO: the most users whose every
    request met it (``served``), of ``tested`` at most, on ``date`` (ISO)."""

    served: int
    tested: int
    date: str

    def describe(self) -> str:
        """Return it in words, as every screen says it (Memory view, ``ggtune plan``).

        >>> MeasuredUsers(3, 8, "2026-12-01").describe()
        'measured 2026-12-01: 3 of up to 8 met it in a Users run'
        """
        return f"measured {self.date}: {self.served} of up to {self.tested} met it in a Users run"


def measured_users(
    model_path: str, slo: Slo, *, db_path: str | os.PathLike[str] | None = None
) -> MeasuredUsers | None:
    """Return the newest load test of ``model_path`` with ``slo`` in the results database.

    Blocks on the database and a hash of the file: call off the GUI thread. None when there
    is none (or the database or the file cannot be read).
    """
    from app.measured.results_db import ResultsDB, quick_file_hash
    from app.measured.users_result import RoundSummary

    try:
        db = ResultsDB(db_path) if db_path else ResultsDB()
        if not db.path.exists():
            return None
        runs = db.users_runs(model_hash=quick_file_hash(model_path), limit=20)
    except (GGTuneError, OSError):
        return None
    for run in runs:
        data = run.result.get("slo", {})
        if not isinstance(data, dict):
            continue
        if (data.get("ttft_s"), data.get("min_tok_per_s")) != (slo.ttft_s, slo.min_tok_per_s):
            continue
        try:
            rows = [
                RoundSummary(**{**u, "slo": slo})
                for u in run.result.get("users", ())
                if isinstance(u, dict)
            ]
        except TypeError:
            continue
        if not rows:
            continue
        served, _fail = served_users(rows)
        return MeasuredUsers(served, max(r.n_users for r in rows), run.created_at[:10])
    return None


def predict_every_count(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    plan: UsersPlan,
    slo: Slo,
    factors: SpeedFactors,
) -> dict[int, RoundSummary]:
    """Return the speed model's round of every user count from 1 to the most of ``plan``
    (its prompts, tokens, depth and arrivals; one round each; pure, ~ms per round).

    Every count, not only the measured ones, so the predicted answer names the first user
    who misses ("the 5th does not"); ``ggtune bench --users`` and Verify's Users run both
    answer from it, so they say the same number.
    """
    work = workload(spec, settings, hardware, factors)
    n_batch = resolve_context(spec, settings).n_batch
    every = dataclasses.replace(plan, n_users=tuple(range(1, plan.max_users + 1)), repetitions=1)
    rounds = predict_rounds(work, every, n_batch=n_batch, factors=factors)
    return {r.n_users: summarize([r], slo) for r in rounds}


def plan_users_line(
    plan: Candidate,
    hardware: Hardware,
    slo: Slo,
    factors: SpeedFactors,
    measured: MeasuredUsers | None = None,
    *,
    n_prompt: int = FIRST_TOKEN_PROMPT,
) -> str:
    """Return a plan's users in one line: each user's speed, the last one's first token when
    they arrive together, whether that meets ``slo``, predicted or measured — the Recommend
    tab's users line, in the Memory view's words.

    Raises GGTuneError where the speed model cannot price the plan.
    """
    n = max(1, plan.settings.n_parallel)
    ttft = plan_burst_ttft_s(plan, hardware, n, factors, n_prompt)
    tps = plan.speed.per_user_tok_per_s
    met = ttft <= slo.ttft_s and tps >= slo.min_tok_per_s
    who = "1 user" if n == 1 else f"{n} users arriving together"
    basis = "calibrated" if factors.n_measurements > 0 else "not calibrated"
    text = (
        f"{who}: ~{tps:.1f} tok/s each, first token after {ttft:.2f} s at worst "
        f"({n_prompt}-token prompts): {'within' if met else 'outside'} {slo.describe()} "
        f"(predicted, {basis})"
    )
    if measured is not None:
        text += f"; {measured.describe()}"
    return text + "."
