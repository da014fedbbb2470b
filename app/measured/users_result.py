"""What a multi-user load test on the real engine measured: per user, per round, goodput.

:func:`runner.load_test.load_test` runs N users decoding together on llama.cpp with
continuous batching (one ``llama_decode`` per step over every active sequence, new
prompts joining the batch as they arrive, the way llama-server schedules its slots) and
returns a :class:`UsersResult`; this module holds only frozen, picklable data and pure
functions over it, so ``app/`` and ``ui/`` use them without ``llama_cpp``.

The metrics follow the convention of ``vllm bench serve`` and NVIDIA GenAI-Perf:

* **TTFT** (time to first token) of a request: from its arrival until its first new token
  is picked; it includes the time it waited for the batch (queueing) and the prefill.
* **TPOT** (time per output token) of a request: ``(finish − first token) / (n_out − 1)``,
  the mean gap between its tokens after the first; its **tok/s** is ``1 / TPOT``.
* **ITL** (inter-token latency): every gap between two successive tokens of a request,
  pooled over requests (a new user's prefill in the same batch shows up as a long gap).
* **Aggregate tok/s** of a round: all tokens generated over the round's wall time, from
  the first arrival until the last request finished.
* **Goodput**: the requests that met *both* SLOs (TTFT ≤ ``ttft_s`` and tok/s ≥
  ``min_tok_per_s``), as a count, a share and requests per second.

Example::

    plan = UsersPlan(n_users=(1, 2, 4), n_prompt=128, n_gen=32)
    result = load_test("gemma-3-270m-q4_k_m.gguf", Settings(n_ctx=4096, n_parallel=4), plan)
    for r in result.rounds:
        s = r.summary(Slo(ttft_s=2.0, min_tok_per_s=10.0))
        print(r.n_users, s.per_user_tok_per_s, s.ttft_p95_s, s.goodput)
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from app.hardware.devices import Hardware
from app.measured.bench_result import MachineInfo
from app.measured.engine_report import EngineReport
from app.model.spec import ModelSpec
from app.predict.speed import (
    SpeedFactors,
    SpeedMeasurement,
    Workload,
    batch_s,
    settings_from_dict,
)
from app.settings import Settings

ArrivalKind = Literal["burst", "staggered", "poisson"]

DEFAULT_TTFT_SLO_S: Final = 2.0
"""Time-to-first-token target of the default SLO, seconds (a chat user's patience; the
servebench convention is 0.5 s on GPUs, which a CPU rarely meets)."""

DEFAULT_MIN_TOK_PER_S: Final = 10.0
"""Per-user decode target of the default SLO, tokens per second (faster than most people
read; the Memory view's "N users fit" line uses the same figure)."""


@dataclass(frozen=True, slots=True)
class Slo:
    """A service-level objective: first token within ``ttft_s`` and ≥ ``min_tok_per_s``
    for every user."""

    ttft_s: float = DEFAULT_TTFT_SLO_S
    min_tok_per_s: float = DEFAULT_MIN_TOK_PER_S

    def __post_init__(self) -> None:
        if not (self.ttft_s > 0 and math.isfinite(self.ttft_s)):
            raise ValueError(f"the TTFT target must be > 0 s, got {self.ttft_s}")
        if not (self.min_tok_per_s >= 0 and math.isfinite(self.min_tok_per_s)):
            raise ValueError(f"the speed target must be ≥ 0 tok/s, got {self.min_tok_per_s}")

    def describe(self) -> str:
        """Return the SLO in words: ``"first token ≤ 2 s, ≥ 10 tok/s each"``."""
        return f"first token ≤ {self.ttft_s:g} s, ≥ {self.min_tok_per_s:g} tok/s each"


@dataclass(frozen=True, slots=True)
class Arrivals:
    """When the users of a round arrive: all at once (``burst``), one every
    ``interval_s`` (``staggered``), or a Poisson process with mean gap ``interval_s``
    (exponential gaps, seeded, like ``vllm bench serve --request-rate``)."""

    kind: ArrivalKind = "burst"
    interval_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("burst", "staggered", "poisson"):
            raise ValueError(f"arrivals must be burst, staggered or poisson, got {self.kind!r}")
        if not (self.interval_s >= 0 and math.isfinite(self.interval_s)):
            raise ValueError(f"the arrival interval must be ≥ 0 s, got {self.interval_s}")
        if self.kind != "burst" and self.interval_s <= 0:
            raise ValueError(f"{self.kind} arrivals need an interval > 0 s")

    def times(self, n_users: int, seed: int = 0) -> tuple[float, ...]:
        """Return the arrival time of each of ``n_users`` users, seconds from the start."""
        if self.kind == "burst":
            return (0.0,) * n_users
        if self.kind == "staggered":
            return tuple(i * self.interval_s for i in range(n_users))
        rng = random.Random(seed)
        t, out = 0.0, []
        for _ in range(n_users):
            out.append(t)
            t += rng.expovariate(1.0 / self.interval_s)
        return tuple(out)

    def describe(self) -> str:
        """Return the arrivals in words."""
        if self.kind == "burst":
            return "all at once"
        if self.kind == "staggered":
            return f"one every {self.interval_s:g} s"
        return f"Poisson, one every {self.interval_s:g} s on average"

    @classmethod
    def parse(cls, text: str) -> Arrivals:
        """Parse ``burst``, ``staggered:S`` or ``poisson:S`` (S = seconds between users)."""
        kind, _, value = text.strip().partition(":")
        kind = kind.lower()
        if kind == "burst" and not value:
            return cls()
        if kind in ("staggered", "poisson") and value:
            try:
                interval = float(value)
            except ValueError:
                raise ValueError(f"{text!r}: {value!r} is not a number of seconds") from None
            return cls(kind, interval)  # type: ignore[arg-type]
        raise ValueError(f"{text!r}: expected burst, staggered:SECONDS or poisson:SECONDS")


@dataclass(frozen=True, slots=True)
class UsersPlan:
    """What the load test does. Token counts in tokens.

    ``n_users``: the rounds, one per count (each round starts from an empty cache);
    ``n_prompt``: each user's prompt (real text, different per user); ``n_gen``: tokens
    each user generates (the first one included); ``depth``: tokens of earlier
    conversation already in each user's cache before the prompt (filled once, untimed,
    and copied to every sequence, like ``llama-batched-bench -pps``); ``repetitions``:
    rounds per count.
    """

    n_users: tuple[int, ...] = (1, 2, 4)
    n_prompt: int = 128
    n_gen: int = 32
    depth: int = 0
    arrivals: Arrivals = field(default_factory=Arrivals)
    repetitions: int = 1
    seed: int = 1234

    def __post_init__(self) -> None:
        if not self.n_users or any(n < 1 for n in self.n_users):
            raise ValueError(f"user counts must be ≥ 1, got {self.n_users}")
        if self.n_prompt < 1 or self.n_gen < 2:
            raise ValueError("a user needs a prompt of ≥ 1 token and ≥ 2 generated tokens")
        if self.depth < 0 or self.repetitions < 1:
            raise ValueError("depth must be ≥ 0 and repetitions ≥ 1")

    @property
    def max_users(self) -> int:
        """The most users of any round (the slots the context needs)."""
        return max(self.n_users)

    def cells_per_user(self) -> int:
        """Return the cache cells one user fills: depth, prompt and generated tokens."""
        return self.depth + self.n_prompt + self.n_gen

    @classmethod
    def quick(cls, n_users: Sequence[int] = (1, 2, 4)) -> UsersPlan:
        """128-token prompts, 32 tokens each, one round per count."""
        return cls(n_users=tuple(n_users), n_prompt=128, n_gen=32)

    @classmethod
    def thorough(cls, n_users: Sequence[int] = (1, 2, 4, 8)) -> UsersPlan:
        """512-token prompts, 128 tokens each, three rounds per count."""
        return cls(n_users=tuple(n_users), n_prompt=512, n_gen=128, repetitions=3)


# --- what was measured --------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """Return the ``q``-th percentile (0-100) of ``values``, linear between ranks.

    The method of ``numpy.percentile``'s default (and of vLLM's and GenAI-Perf's
    reports). ``nan`` for no values.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50), percentile([1.0, 2.0, 3.0, 4.0], 95)
    (2.5, 3.85)
    """
    assert 0 <= q <= 100, f"percentile must be in 0..100, got {q}"
    if not values:
        return math.nan
    vs = sorted(values)
    pos = (len(vs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(vs) - 1)
    return vs[lo] + (vs[hi] - vs[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class UserTiming:
    """One request of a round: when it arrived and when each of its tokens was picked.

    Times in seconds from the round's start. ``token_s[0]`` is the first token (the end
    of its prefill); the request is done at ``token_s[-1]``. ``n_prompt`` tokens of
    prompt after ``depth`` cached ones.
    """

    user: int
    arrival_s: float
    n_prompt: int
    depth: int
    token_s: tuple[float, ...]

    def __post_init__(self) -> None:
        assert len(self.token_s) >= 2, "a request has at least two tokens"

    @property
    def ttft_s(self) -> float:
        """Arrival to first token, seconds (queueing and prefill)."""
        return self.token_s[0] - self.arrival_s

    @property
    def n_out(self) -> int:
        """Tokens generated."""
        return len(self.token_s)

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first, seconds."""
        return (self.token_s[-1] - self.token_s[0]) / (self.n_out - 1)

    @property
    def tok_per_s(self) -> float:
        """This user's decode speed: 1 / TPOT."""
        return 1.0 / self.tpot_s if self.tpot_s > 0 else math.inf

    @property
    def itl_s(self) -> tuple[float, ...]:
        """Each gap between two successive tokens, seconds."""
        return tuple(b - a for a, b in zip(self.token_s, self.token_s[1:], strict=False))

    @property
    def finish_s(self) -> float:
        """When its last token was picked, seconds from the round's start."""
        return self.token_s[-1]

    def meets(self, slo: Slo) -> bool:
        """Whether this request met both targets of ``slo``."""
        return self.ttft_s <= slo.ttft_s and self.tok_per_s >= slo.min_tok_per_s


@dataclass(frozen=True, slots=True)
class RoundSummary:
    """The figures of one user count over its repetitions (see the module doc).

    ``per_user_tok_per_s`` is the mean over requests of 1/TPOT; ``*_p50``/``*_p95`` are
    percentiles over requests (TTFT, TPOT) or over all gaps (ITL);
    ``aggregate_tok_per_s`` the mean over repetitions. ``goodput`` counts the requests of
    one repetition that met both SLOs (the mean over repetitions, rounded down, so it
    reads "users served"); ``goodput_share`` is over all requests, and
    ``goodput_req_per_s`` requests meeting the SLO per second of wall time.
    """

    n_users: int
    n_requests: int
    per_user_tok_per_s: float
    per_user_tok_per_s_min: float
    aggregate_tok_per_s: float
    ttft_s: float
    ttft_p50_s: float
    ttft_p95_s: float
    tpot_s: float
    tpot_p50_s: float
    tpot_p95_s: float
    itl_s: float
    itl_p50_s: float
    itl_p95_s: float
    goodput: int
    goodput_share: float
    goodput_req_per_s: float
    slo: Slo


@dataclass(frozen=True, slots=True)
class StepTiming:
    """One ``llama_decode`` call of a round: ``n_decode`` users' next tokens and
    ``n_prefill`` prompt tokens in one batch, at a mean cached depth of ``depth``
    tokens per decoding user; ``seconds`` includes picking the tokens (argmax).
    ``cpu_s`` is the CPU time all the process's threads spent in it: on a machine shared
    with other work, ``cpu_s / n_threads`` shows what the step costs without the waits
    for a core (it leaves out waits between threads, so it reads low)."""

    n_decode: int
    n_prefill: int
    depth: int
    seconds: float
    cpu_s: float = 0.0


@dataclass(frozen=True, slots=True)
class UsersRound:
    """One round: ``n_users`` requests served together; ``wall_s`` from the first arrival
    to the last token; ``steps`` every ``llama_decode`` call it took."""

    n_users: int
    repetition: int
    users: tuple[UserTiming, ...]
    wall_s: float
    steps: tuple[StepTiming, ...]

    @property
    def aggregate_tok_per_s(self) -> float:
        """Every generated token over the round's wall time."""
        return sum(u.n_out for u in self.users) / self.wall_s if self.wall_s > 0 else math.inf


def summarize(rounds: Sequence[UsersRound], slo: Slo) -> RoundSummary:
    """Return the figures of ``rounds`` (the repetitions of one user count) under ``slo``."""
    assert rounds, "summarize needs at least one round"
    n = rounds[0].n_users
    assert all(r.n_users == n for r in rounds), "rounds of one user count only"
    users = [u for r in rounds for u in r.users]
    ttft = [u.ttft_s for u in users]
    tpot = [u.tpot_s for u in users]
    tps = [u.tok_per_s for u in users]
    itl = [g for u in users for g in u.itl_s]
    met = sum(1 for u in users if u.meets(slo))
    wall = sum(r.wall_s for r in rounds)
    return RoundSummary(
        n_users=n,
        n_requests=len(users),
        per_user_tok_per_s=statistics.fmean(tps),
        per_user_tok_per_s_min=min(tps),
        aggregate_tok_per_s=statistics.fmean(r.aggregate_tok_per_s for r in rounds),
        ttft_s=statistics.fmean(ttft),
        ttft_p50_s=percentile(ttft, 50),
        ttft_p95_s=percentile(ttft, 95),
        tpot_s=statistics.fmean(tpot),
        tpot_p50_s=percentile(tpot, 50),
        tpot_p95_s=percentile(tpot, 95),
        itl_s=statistics.fmean(itl) if itl else math.nan,
        itl_p50_s=percentile(itl, 50),
        itl_p95_s=percentile(itl, 95),
        goodput=met // len(rounds),
        goodput_share=met / len(users),
        goodput_req_per_s=met / wall if wall > 0 else 0.0,
        slo=slo,
    )


@dataclass(frozen=True, slots=True)
class FillTiming:
    """The untimed-for-users depth fill, timed anyway: ``n_tokens`` after ``depth``
    cached tokens took ``seconds`` (one batch of prompt processing); ``cpu_s`` as in
    :class:`StepTiming`."""

    depth: int
    n_tokens: int
    seconds: float
    cpu_s: float = 0.0


@dataclass(frozen=True, slots=True)
class UsersResult:
    """Everything one load test measured (see the module doc).

    ``engine`` is llama.cpp's report for this load and context; ``started_at`` ISO 8601
    UTC; ``n_threads`` what llama.cpp was given; ``fill`` the depth fill's chunks.
    """

    model_path: str
    settings: Settings
    plan: UsersPlan
    n_threads: int
    engine: EngineReport
    load_s: float
    rounds: tuple[UsersRound, ...]
    fill: tuple[FillTiming, ...]
    machine: MachineInfo
    started_at: str
    duration_s: float
    loadavg: tuple[float, float, float] | None = None
    """``/proc/loadavg`` when the test ended (how busy the machine was), where known."""

    @property
    def model_name(self) -> str:
        """llama.cpp's description of the model."""
        return self.engine.model_desc

    def user_counts(self) -> tuple[int, ...]:
        """Return the user counts measured, in the plan's order, each once."""
        seen: list[int] = []
        for r in self.rounds:
            if r.n_users not in seen:
                seen.append(r.n_users)
        return tuple(seen)

    def summary(self, n_users: int, slo: Slo) -> RoundSummary:
        """Return the figures of the rounds with ``n_users`` under ``slo``."""
        return summarize([r for r in self.rounds if r.n_users == n_users], slo)

    def summaries(self, slo: Slo) -> tuple[RoundSummary, ...]:
        """Return one summary per user count, in the plan's order."""
        return tuple(self.summary(n, slo) for n in self.user_counts())


def served_users(summaries: Sequence[RoundSummary]) -> tuple[int, int | None]:
    """Return (the most users of a round where every request met the SLO, the first
    count measured above it where some did not, or ``None``).

    >>> # 1, 2 and 4 users all met it, 8 did not: (4, 8)
    """
    best, first_fail = 0, None
    for s in sorted(summaries, key=lambda s: s.n_users):
        if s.goodput_share >= 1.0 and first_fail is None:
            best = s.n_users
        elif s.goodput_share < 1.0 and first_fail is None:
            first_fail = s.n_users
    return best, first_fail


def _misses(s: RoundSummary, slo: Slo) -> str:
    """Return which targets a round missed, in words."""
    parts = []
    if s.per_user_tok_per_s_min < slo.min_tok_per_s:
        parts.append(f"{s.per_user_tok_per_s_min:.1f} tok/s at worst")
    if s.ttft_p95_s > slo.ttft_s:
        parts.append(f"first token after {s.ttft_p95_s:.2f} s at p95")
    return " and ".join(parts) or "some requests missed a target"


def answer(summaries: Sequence[RoundSummary], slo: Slo) -> str:
    """Return the load test's answer in words.

    "4 users get ≥ 10 tok/s and first token ≤ 2 s; the 5th does not (with 5: 8.1 tok/s at
    worst)." when the count above the last one served was run (a prediction over every
    count), else "…; with 8, 3 of 8 requests do not (5.1 tok/s at worst; 5 to 7 not run)."
    """
    if not summaries:
        return "No rounds were run."
    best, fail = served_users(summaries)
    goal = f"≥ {slo.min_tok_per_s:g} tok/s and first token ≤ {slo.ttft_s:g} s"
    by_n = {s.n_users: s for s in summaries}
    if best == 0:
        s = by_n[min(by_n)]
        who = "1 user gets" if s.n_users == 1 else f"{s.n_users} users get"
        return f"Not even {who} {goal}: {_misses(s, slo)}."
    text = f"{best} user{'s' if best != 1 else ''} get{'s' if best == 1 else ''} {goal}"
    if fail is None:
        return text + " (the most measured)." if best == max(by_n) else text + "."
    s = by_n[fail]
    if fail == best + 1:
        return f"{text}; the {ordinal(fail)} does not (with {fail}: {_misses(s, slo)})."
    missed = s.n_requests - round(s.goodput_share * s.n_requests)
    gap = f"{best + 1}" if fail == best + 2 else f"{best + 1} to {fail - 1}"
    return (
        f"{text}; with {fail}, {missed} of {s.n_requests} request"
        f"{'s' if s.n_requests != 1 else ''} do{'es' if missed == 1 else ''} not "
        f"({_misses(s, slo)}; {gap} not run)."
    )


def ordinal(n: int) -> str:
    """Return ``n`` as an English ordinal.

    >>> ordinal(1), ordinal(2), ordinal(3), ordinal(5), ordinal(11), ordinal(22)
    ('1st', '2nd', '3rd', '5th', '11th', '22nd')
    """
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    suffix = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def users_to_dict(result: UsersResult, slo: Slo) -> dict[str, Any]:
    """Return ``result`` as JSON-ready data; the key names are a stable interface.

    ``users`` holds one entry per user count with ``n_users``, ``per_user_tok_per_s``,
    ``aggregate_tok_per_s``, ``ttft_s``, ``ttft_p95_s``, ``tpot_p95_s``, ``goodput`` (and
    the other percentiles); ``rounds`` every request's raw token times.
    """
    import dataclasses

    def summary_dict(s: RoundSummary) -> dict[str, Any]:
        d = dataclasses.asdict(s)
        d.pop("slo")
        return d

    return {
        "model_path": result.model_path,
        "model_name": result.model_name,
        "settings": dataclasses.asdict(result.settings),
        "plan": {
            "n_users": list(result.plan.n_users),
            "n_prompt": result.plan.n_prompt,
            "n_gen": result.plan.n_gen,
            "depth": result.plan.depth,
            "arrivals": {
                "kind": result.plan.arrivals.kind,
                "interval_s": result.plan.arrivals.interval_s,
            },
            "repetitions": result.plan.repetitions,
            "seed": result.plan.seed,
        },
        "slo": {"ttft_s": slo.ttft_s, "min_tok_per_s": slo.min_tok_per_s},
        "n_threads": result.n_threads,
        "load_s": result.load_s,
        "users": [summary_dict(s) for s in result.summaries(slo)],
        "answer": answer(result.summaries(slo), slo),
        "rounds": [
            {
                "n_users": r.n_users,
                "repetition": r.repetition,
                "wall_s": r.wall_s,
                "steps": [dataclasses.astuple(st) for st in r.steps],
                "users": [
                    {
                        "user": u.user,
                        "arrival_s": u.arrival_s,
                        "n_prompt": u.n_prompt,
                        "depth": u.depth,
                        "token_s": list(u.token_s),
                    }
                    for u in r.users
                ],
            }
            for r in result.rounds
        ],
        "fill": [dataclasses.asdict(f) for f in result.fill],
        "machine": dataclasses.asdict(result.machine),
        "engine": result.engine.to_dict(),
        "started_at": result.started_at,
        "duration_s": result.duration_s,
        "loadavg": list(result.loadavg) if result.loadavg else None,
    }


# --- the same load test, predicted --------------------------------------------------


def predict_rounds(
    work: Workload,
    plan: UsersPlan,
    *,
    n_batch: int,
    factors: SpeedFactors | None = None,
) -> tuple[UsersRound, ...]:
    """Return the rounds of ``plan`` as the speed model predicts them (one per user count).

    The rounds are served as :mod:`runner.load_test` serves them — the same arrivals, the
    same continuous batching (each step one token of every decoding user, then prompt
    tokens of the users who arrived, oldest first, up to ``n_batch``) — with each step's
    time from :func:`app.predict.speed.batch_s` instead of a clock. So the predicted TTFT
    includes queueing behind other users' prompts, as the measured one does, and
    :func:`summarize` reads both the same way.
    """
    factors = factors or SpeedFactors()
    rounds = []
    for n_users in plan.n_users:
        arrivals = plan.arrivals.times(n_users, plan.seed + 1000 * n_users)
        fed = [0] * n_users
        pos = [plan.depth] * n_users
        tokens: list[list[float]] = [[] for _ in range(n_users)]
        steps: list[StepTiming] = []
        t = 0.0
        while True:
            active = [u for u in range(n_users) if len(tokens[u]) < plan.n_gen]
            if not active:
                break
            ready = [u for u in active if arrivals[u] <= t]
            if not ready:
                t = min(arrivals[u] for u in active)
                continue
            decoding = [u for u in ready if fed[u] == plan.n_prompt]
            parts: list[tuple[int, int, bool]] = []
            ends: list[int] = []
            room = n_batch - len(decoding)
            for u in ready:
                if fed[u] == plan.n_prompt or room <= 0:
                    continue
                take = min(plan.n_prompt - fed[u], room)
                done = fed[u] + take == plan.n_prompt
                parts.append((take, pos[u], done))
                if done:
                    ends.append(u)
                fed[u] += take
                pos[u] += take
                room -= take
            depths = [pos[u] for u in decoding]
            step = batch_s(work, decode_depths=depths, prompt_parts=parts, factors=factors)
            t += step
            for u in decoding:
                pos[u] += 1
            for u in (*decoding, *ends):
                tokens[u].append(t)
            mean = sum(depths) // len(depths) if depths else 0
            steps.append(StepTiming(len(decoding), sum(c for c, _d, _e in parts), mean, step))
        users = tuple(
            UserTiming(u, arrivals[u], plan.n_prompt, plan.depth, tuple(tokens[u]))
            for u in range(n_users)
        )
        wall = max(u.finish_s for u in users) - min(arrivals)
        rounds.append(UsersRound(n_users, 0, users, wall, tuple(steps)))
    return tuple(rounds)


def measurements_from_users_record(
    record: Mapping[str, Any],
    spec: ModelSpec,
    hardware: Hardware,
    *,
    model_key: str = "",
    clock: Literal["wall", "cpu"] = "wall",
) -> tuple[SpeedMeasurement, ...]:
    """Return the speeds a stored load test measured (:func:`users_to_dict`), for calibration.

    Per round: each user's decode speed from the median of the steps that decoded one token
    for every user and nothing else (at their median depth), and the first step's prefill
    of the users' prompts (all in one batch when they arrived together); then each chunk
    of the depth fill. ``clock="cpu"`` takes the engine's CPU time over its threads instead
    of the elapsed time (see :class:`StepTiming`).
    """
    settings = settings_from_dict(record["settings"])
    threads = max(1, int(record.get("n_threads", 1)))
    plan = record["plan"]
    n_prompt, depth0 = int(plan["n_prompt"]), int(plan["depth"])
    burst = plan.get("arrivals", {}).get("kind", "burst") == "burst"

    def secs(step: Sequence[float]) -> float:
        return float(step[4]) / threads if clock == "cpu" else float(step[3])

    out: list[SpeedMeasurement] = []
    for r in record.get("rounds", ()):
        n = int(r["n_users"])
        steps = r["steps"]
        dec = [s for s in steps if int(s[0]) == n and int(s[1]) == 0 and secs(s) > 0]
        if len(dec) >= 3:
            t = statistics.median(secs(s) for s in dec)
            depth = round(statistics.median(int(s[2]) for s in dec))
            out.append(
                SpeedMeasurement(
                    spec, settings, hardware, "tg", 1, depth, 1.0 / t, model_key, n_users=n
                )
            )
        if burst and steps and int(steps[0][1]) == n * n_prompt and secs(steps[0]) > 0:
            t = secs(steps[0])
            out.append(
                SpeedMeasurement(
                    spec,
                    settings,
                    hardware,
                    "pp",
                    n_prompt,
                    depth0,
                    n_prompt / t,
                    model_key,
                    n_users=n,
                )
            )
    for f in record.get("fill", ()):
        t = float(f["cpu_s"]) / threads if clock == "cpu" else float(f["seconds"])
        if t > 0:
            n_tok = int(f["n_tokens"])
            out.append(
                SpeedMeasurement(
                    spec, settings, hardware, "pp", n_tok, int(f["depth"]), n_tok / t, model_key
                )
            )
    return tuple(out)


def settings_for_users(
    spec: ModelSpec, settings: Settings, plan: UsersPlan, *, context_given: bool = False
) -> Settings:
    """Return ``settings`` made to serve ``plan``: at least one slot per user, and a context
    with room for every user's conversation (depth, prompt and answer).

    ``context_given``: the user chose the context; one too small is then refused
    (ValueError, the message says how much is needed) instead of raised.
    """
    from app.predict.estimate import resolve_context

    if settings.n_parallel < plan.max_users:
        settings = settings.replace(n_parallel=plan.max_users)
    need = plan.cells_per_user()
    ctx = resolve_context(spec, settings)
    room = ctx.n_ctx // settings.n_parallel if settings.kv_unified else ctx.n_ctx_seq
    if room >= need:
        return settings
    if context_given:
        raise ValueError(
            f"each user needs {need} tokens of context (depth {plan.depth} + prompt "
            f"{plan.n_prompt} + {plan.n_gen} generated) but the context gives {room}: raise "
            f"it to {settings.n_parallel * need} or more"
        )
    return settings.replace(n_ctx=-(-settings.n_parallel * need // 256) * 256)
