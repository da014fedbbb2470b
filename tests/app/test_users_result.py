"""The load test's figures: TTFT, TPOT, ITL percentiles, goodput and the answer in words.

Hand-built rounds with known token times; the engine's own rounds are checked in
tests/runner/test_load_test.py.
"""

from __future__ import annotations

import math

import pytest

from app.measured.users_result import (
    Arrivals,
    Slo,
    StepTiming,
    UsersPlan,
    UsersRound,
    UserTiming,
    answer,
    percentile,
    served_users,
    summarize,
)


def _user(i: int, arrival: float, tokens: list[float]) -> UserTiming:
    return UserTiming(i, arrival, 16, 0, tuple(tokens))


def _round(n: int, users: list[UserTiming]) -> UsersRound:
    wall = max(u.finish_s for u in users) - min(u.arrival_s for u in users)
    return UsersRound(n, 0, tuple(users), wall, (StepTiming(n, 0, 16, 0.1),))


def test_percentile_is_numpys_linear_method() -> None:
    np = pytest.importorskip("numpy")
    values = [0.3, 0.1, 0.9, 0.4, 0.2, 2.5, 0.05]
    for q in (0, 5, 50, 90, 95, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert math.isnan(percentile([], 50))


def test_request_figures() -> None:
    u = _user(0, 0.5, [1.0, 1.125, 1.5, 1.75])
    assert u.ttft_s == 0.5
    assert u.tpot_s == 0.25
    assert u.tok_per_s == 4.0
    assert u.itl_s == (0.125, 0.375, 0.25)
    assert u.meets(Slo(ttft_s=0.5, min_tok_per_s=4.0))
    assert not u.meets(Slo(ttft_s=0.49, min_tok_per_s=4.0))
    assert not u.meets(Slo(ttft_s=1.0, min_tok_per_s=4.1))


def test_summary_percentiles_and_goodput() -> None:
    fast = _user(0, 0.0, [0.2, 0.25, 0.30, 0.35])  # 20 tok/s, TTFT 0.2
    slow = _user(1, 0.0, [0.2, 0.4, 0.6, 0.8])  # 5 tok/s
    late = _user(2, 1.0, [3.5, 3.55, 3.6, 3.65])  # TTFT 2.5, 20 tok/s
    s = summarize([_round(3, [fast, slow, late])], Slo(ttft_s=2.0, min_tok_per_s=10.0))
    assert s.n_requests == 3
    assert s.goodput == 1
    assert s.goodput_share == pytest.approx(1 / 3)
    assert s.per_user_tok_per_s == pytest.approx((20 + 5 + 20) / 3)
    assert s.per_user_tok_per_s_min == pytest.approx(5.0)
    assert s.ttft_p50_s == pytest.approx(0.2)
    assert s.ttft_p95_s == pytest.approx(percentile([0.2, 0.2, 2.5], 95))
    assert s.tpot_p95_s == pytest.approx(percentile([0.05, 0.2, 0.05], 95))
    assert s.aggregate_tok_per_s == pytest.approx(12 / 3.65)
    assert s.goodput_req_per_s == pytest.approx(1 / 3.65)


def test_goodput_over_repetitions_reads_users_served() -> None:
    ok = _user(0, 0.0, [0.1, 0.2, 0.3])
    bad = _user(1, 0.0, [5.0, 5.1, 5.2])
    rounds = [_round(2, [ok, ok]), _round(2, [ok, bad])]
    s = summarize(rounds, Slo())
    assert s.goodput == 1  # 3 of 4 requests over 2 rounds: 1.5 users, rounded down
    assert s.goodput_share == pytest.approx(0.75)


def test_answer_in_words() -> None:
    slo = Slo(ttft_s=2.0, min_tok_per_s=10.0)

    def summary(n: int, tps: float, ttft: float) -> object:
        users = [_user(i, 0.0, [ttft + k / tps for k in range(4)]) for i in range(n)]
        return summarize([_round(n, users)], slo)

    rows = [summary(1, 40, 0.3), summary(2, 25, 0.6), summary(4, 12, 1.5), summary(8, 6, 3.0)]
    assert served_users(rows) == (4, 8)  # type: ignore[arg-type]
    text = answer(rows, slo)  # type: ignore[arg-type]
    assert text.startswith("4 users get ≥ 10 tok/s and first token ≤ 2 s; with 8, 8 of 8")
    assert "6.0 tok/s at worst" in text
    assert "first token after 3.00 s at p95" in text
    assert text.endswith("; 5 to 7 not run).")
    every = [*rows[:3], summary(5, 9, 1.8)]  # the count after the last served was run
    assert answer(every, slo) == (  # type: ignore[arg-type]
        "4 users get ≥ 10 tok/s and first token ≤ 2 s; the 5th does not "
        "(with 5: 9.0 tok/s at worst)."
    )
    assert answer(rows[:3], slo).endswith("(the most measured).")  # type: ignore[arg-type]
    assert answer([summary(1, 4, 0.3)], slo).startswith(  # type: ignore[list-item]
        "Not even 1 user gets ≥ 10 tok/s"
    )


@pytest.mark.parametrize(
    ("text", "kind", "interval"),
    [("burst", "burst", 0.0), ("staggered:0.5", "staggered", 0.5), ("Poisson:2", "poisson", 2.0)],
)
def test_arrivals_parse(text: str, kind: str, interval: float) -> None:
    a = Arrivals.parse(text)
    assert (a.kind, a.interval_s) == (kind, interval)


@pytest.mark.parametrize("text", ["", "burst:1", "staggered", "poisson:x", "poisson:-1", "wave:2"])
def test_arrivals_parse_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected burst|not a number|interval"):
        Arrivals.parse(text)


def test_arrival_times() -> None:
    assert Arrivals().times(3) == (0.0, 0.0, 0.0)
    assert Arrivals("staggered", 0.25).times(3) == (0.0, 0.25, 0.5)
    gaps = Arrivals("poisson", 1.0).times(2000, seed=7)
    mean_gap = gaps[-1] / (len(gaps) - 1)
    assert 0.9 < mean_gap < 1.1


@pytest.mark.parametrize(
    "kwargs",
    [{"n_users": ()}, {"n_users": (0,)}, {"n_gen": 1}, {"n_prompt": 0}, {"depth": -1}],
)
def test_plan_refuses_nonsense(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"must be|needs"):
        UsersPlan(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"ttft_s": 0.0}, {"ttft_s": math.inf}, {"min_tok_per_s": -1}])
def test_slo_refuses_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="target must be"):
        Slo(**kwargs)
