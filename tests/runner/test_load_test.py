"""The multi-user load test on the real llama.cpp, in real child processes, real models.

Token counts are tiny: the figures must be consistent (every user gets its tokens, in
order, after it arrived; a burst's prompts share one batch; more users per step cost
each user speed), not precise — docs/benchmarks.md has the measured numbers, and
tests/runner/test_batched_bench.py checks them against llama.cpp's own tool.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from app.errors import EngineCancelledError, EngineUnsupportedError
from app.measured.bench_result import BenchProgress, BenchStep, Loaded
from app.measured.users_result import Arrivals, Slo, UsersPlan, UsersResult
from app.settings import Settings
from runner.load_test import LoadTest, load_test
from tests.engine_host import ENGINE_REPACK

pytestmark = pytest.mark.engine

SETTINGS = Settings(
    n_ctx=2048, n_parallel=4, flash_attn="auto", swa_full=False, repack=ENGINE_REPACK
)
BURST = UsersPlan(n_users=(1, 4), n_prompt=24, n_gen=6)

_RUNS: dict[str, tuple[UsersResult, list[BenchProgress]]] = {}


def _run(name: str, path: Path) -> tuple[UsersResult, list[BenchProgress]]:
    if name not in _RUNS:
        events: list[BenchProgress] = []
        _RUNS[name] = (load_test(path, SETTINGS, BURST, on_progress=events.append), events)
    return _RUNS[name]


@pytest.fixture(params=["smollm", "gemma"])
def burst(
    request: pytest.FixtureRequest, smollm_path: Path, gemma_path: Path
) -> tuple[UsersResult, list[BenchProgress]]:
    return _run(request.param, smollm_path if request.param == "smollm" else gemma_path)


def test_every_user_gets_its_tokens_in_order(
    burst: tuple[UsersResult, list[BenchProgress]],
) -> None:
    result, _ = burst
    assert [r.n_users for r in result.rounds] == [1, 4]
    for r in result.rounds:
        assert [u.user for u in r.users] == list(range(r.n_users))
        for u in r.users:
            assert u.n_out == BURST.n_gen
            assert list(u.token_s) == sorted(u.token_s)
            assert u.token_s[0] > u.arrival_s == 0.0
            assert u.tpot_s > 0
        # every token of a round comes from one of its steps, one per user per step
        assert sum(s.n_decode for s in r.steps) + r.n_users == r.n_users * BURST.n_gen
        assert sum(s.n_prefill for s in r.steps) == r.n_users * BURST.n_prompt
        assert r.wall_s == pytest.approx(max(u.finish_s for u in r.users))


def test_a_burst_shares_one_prefill_and_then_decodes_in_lockstep(
    burst: tuple[UsersResult, list[BenchProgress]],
) -> None:
    result, _ = burst
    four = next(r for r in result.rounds if r.n_users == 4)
    # 4 prompts of 24 tokens fit one batch of 2048: one step prefills all, then every
    # step decodes all four users together
    assert four.steps[0].n_prefill == 4 * BURST.n_prompt
    assert four.steps[0].n_decode == 0
    assert all(s.n_decode == 4 and s.n_prefill == 0 for s in four.steps[1:])
    assert len({u.token_s[0] for u in four.users}) == 1
    assert [s.depth for s in four.steps[1:]] == list(
        range(BURST.n_prompt, BURST.n_prompt + BURST.n_gen - 1)
    )


def test_summary_and_goodput_follow_the_slo(
    burst: tuple[UsersResult, list[BenchProgress]],
) -> None:
    result, _ = burst
    one, four = result.summaries(Slo())
    assert (one.n_users, four.n_users) == (1, 4)
    assert four.n_requests == 4
    # one token for each of four users costs the engine more than one token for one user
    # (CPU time: other work on the shared cores stretches wall time by 2× and more)
    step1 = min(s.cpu_s for s in result.rounds[0].steps[1:])
    step4 = min(s.cpu_s for s in result.rounds[1].steps[1:])
    assert step4 > step1 > 0
    lenient = Slo(ttft_s=1e6, min_tok_per_s=0.0)
    strict = Slo(ttft_s=1e-6, min_tok_per_s=0.0)
    assert result.summary(4, lenient).goodput == 4
    assert result.summary(4, strict).goodput == 0
    fast = Slo(ttft_s=1e6, min_tok_per_s=1e6)
    assert result.summary(1, fast).goodput == 0
    assert four.ttft_p95_s >= four.ttft_p50_s > 0
    assert four.itl_p95_s >= four.itl_p50_s > 0


def test_progress_names_each_round(burst: tuple[UsersResult, list[BenchProgress]]) -> None:
    _, events = burst
    assert any(isinstance(e, Loaded) for e in events)
    labels = [e.label for e in events if isinstance(e, BenchStep)]
    assert labels[-2:] == ["1 user, round 1", "4 users, round 1"]
    steps = [e for e in events if isinstance(e, BenchStep)]
    assert [s.index for s in steps] == list(range(1, len(steps) + 1))
    assert all(s.total == len(steps) for s in steps)


def test_staggered_users_join_a_running_batch_at_depth(smollm_path: Path) -> None:
    plan = UsersPlan(
        n_users=(3,), n_prompt=16, n_gen=12, depth=100, arrivals=Arrivals("staggered", 0.15)
    )
    result = load_test(smollm_path, SETTINGS, plan)
    (r,) = result.rounds
    assert [u.arrival_s for u in r.users] == pytest.approx([0.0, 0.15, 0.30])
    for u in r.users:
        assert u.token_s[0] >= u.arrival_s
    # the later users' prompts went into batches that also decoded the earlier users
    assert any(s.n_decode > 0 and s.n_prefill > 0 for s in r.steps)
    assert all(s.depth >= plan.depth for s in r.steps if s.n_decode)
    # the depth fill was timed chunk by chunk
    assert sum(f.n_tokens for f in result.fill) == 100
    assert result.loadavg is None or len(result.loadavg) == 3


def test_poisson_arrivals_are_seeded() -> None:
    a = Arrivals("poisson", 0.5)
    assert a.times(5, seed=3) == a.times(5, seed=3)
    assert a.times(5, seed=3) != a.times(5, seed=4)
    assert a.times(5, seed=3)[0] == 0.0


def test_too_few_slots_are_refused_before_the_engine_starts(smollm_path: Path) -> None:
    with pytest.raises(EngineUnsupportedError, match="4 users need 4 parallel slots"):
        LoadTest(smollm_path, Settings(n_ctx=2048, n_parallel=2, repack=ENGINE_REPACK), BURST)


def test_a_context_too_small_for_the_users_is_a_clear_error(smollm_path: Path) -> None:
    plan = UsersPlan(n_users=(4,), n_prompt=200, n_gen=100)
    with pytest.raises(EngineUnsupportedError, match="each user needs 300 cells"):
        load_test(smollm_path, Settings(n_ctx=1024, n_parallel=4, repack=ENGINE_REPACK), plan)


def test_cancel_stops_the_child_mid_round(smollm_path: Path) -> None:
    plan = UsersPlan(n_users=(4,), n_prompt=16, n_gen=400)
    steps: list[BenchProgress] = []
    test = LoadTest(smollm_path, SETTINGS, plan, on_progress=steps.append)

    def cancel_when_serving() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(isinstance(e, BenchStep) and "users" in e.label for e in steps):
                time.sleep(0.3)
                test.cancel()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=cancel_when_serving)
    thread.start()
    t0 = time.monotonic()
    with pytest.raises(EngineCancelledError, match="4 users, round 1"):
        test.run()
    thread.join()
    assert time.monotonic() - t0 < 60
