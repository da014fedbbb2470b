"""The CPU half of the speed model: kernel rates, their cache, pricing a graph with them,
fitting their scales, the predicted load test, and users within an SLO.

Rates here are written by hand (the runner's kernel benchmark makes real ones:
tests/runner/test_kernel_bench.py); the models are the two real demo models' headers.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Literal

import pytest

from app.hardware.devices import Device, Hardware
from app.hardware.kernels import (
    AttentionTiming,
    KernelRates,
    KernelTiming,
    cache_file,
    cached_rates,
    store_rates,
)
from app.measured.results_db import MIGRATIONS, ResultsDB
from app.measured.users_result import (
    Arrivals,
    Slo,
    UsersPlan,
    predict_rounds,
    settings_for_users,
    summarize,
)
from app.model.spec import ModelSpec
from app.predict.speed import (
    NODES_OUTSIDE_LAYERS,
    SpeedFactors,
    SpeedMeasurement,
    calibrate,
    decode_step_s,
    graph_nodes,
    kernel_needs,
    predict_measurement,
    prefill_s,
    workload,
)
from app.settings import Settings

TYPES = ("F32", "F16", "BF16", "Q8_0", "Q6_K", "Q5_0", "Q5_1", "Q4_0", "Q4_1", "Q4_K")


def rates(
    *, scale: float = 1.0, cols: tuple[int, ...] = (576, 640, 1024, 1536, 2048)
) -> KernelRates:
    """Hand-made rates: ns per weight grows with the tokens sharing a product, more for
    short rows; attention 0.3 ns per element for one query token, 0.1 for many."""
    timings = []
    for t in TYPES:
        for c in cols:
            row_cost = 1.0 + 256 / c
            for n, ns in ((1, 0.05), (2, 0.08), (4, 0.12), (8, 0.2), (64, 1.0), (512, 6.0)):
                v = ns * row_cost * scale
                timings.append(KernelTiming(t, n, v, (v,), t in ("Q4_0", "Q4_K"), c))
    attention = tuple(
        AttentionTiming(kv, d, n, 4096, v * scale)
        for kv in ("F16", "Q8_0")
        for d in (64, 256)
        for n, v in ((1, 0.3), (8, 0.25), (512, 0.1))
    )
    return KernelRates(2, tuple(timings), attention, 1.0, ("CPU",), 1.0, decode_us=20.0,
                       measured_at="2026-12-01T10:00:00", machine_key="m")  # fmt: skip


def runs_made_with(
    truth: SpeedFactors,
    specs: tuple[ModelSpec, ...],
    settings: Settings,
    hw: Hardware,
    cases: tuple[tuple[str, int, int, int], ...],
) -> list[SpeedMeasurement]:
    """Return the measurements ``cases`` (kind, tokens, depth, users) of every spec would
    give on a machine where ``truth`` holds (each spec its own model key)."""
    out = []
    for i, spec in enumerate(specs):
        for kind, n_tokens, depth, users in cases:
            test: Literal["pp", "tg"] = "pp" if kind == "pp" else "tg"
            m = SpeedMeasurement(
                spec, settings, hw, test, n_tokens, depth, 1.0, f"m{i}", n_users=users
            )
            out.append(dataclasses.replace(m, tok_per_s=predict_measurement(m, truth)))
    return out


def hardware(r: KernelRates | None = None) -> Hardware:
    host = Device("CPU", "host", 24 << 30, 20 << 30, 20.0, cpu_flags=("avx2",), kernels=r)
    return Hardware(host=host)


# --- the rates ------------------------------------------------------------------------


def test_rates_interpolate_in_tokens_and_pick_the_nearest_row_length() -> None:
    r = rates()
    assert r.ns_per_weight("q4_0", 1, 576) == pytest.approx(0.05 * (1 + 256 / 576))
    # between 2 and 4 tokens: geometric in log-log
    three = r.ns_per_weight("Q4_0", 3, 2048)
    assert three is not None
    assert 0.08 * 1.125 < three < 0.12 * 1.125
    # past the largest count: in proportion (compute bound)
    assert r.ns_per_weight("Q4_0", 1024, 2048) == pytest.approx(12.0 * 1.125)
    # a row length never timed: the nearest in log (600 → 576, 1800 → 2048)
    assert r.ns_per_weight("Q4_0", 1, 600) == r.ns_per_weight("Q4_0", 1, 576)
    assert r.ns_per_weight("Q4_0", 1, 1800) == r.ns_per_weight("Q4_0", 1, 2048)
    assert r.ns_per_weight("IQ2_XXS", 1, 2048) is None
    assert r.attention_ns("F16", 128, 1) == pytest.approx(0.3)  # nearest head size
    assert r.attention_ns("F16", 64, 4096) == pytest.approx(0.1)  # flat past the last
    assert r.attention_ns("Q4_0", 64, 1) is None


def test_rates_cache_round_trip_merge_and_damage(tmp_path: Path) -> None:
    timed = dataclasses.replace(rates(), clock="cpu", loadavg=(1.0, 2.0, 3.0), node_us=0.5)
    assert KernelRates.from_dict(json.loads(json.dumps(timed.to_dict()))) == timed
    a = rates(cols=(2048,))
    stored = store_rates(a, cache_dir=tmp_path)
    assert cached_rates("m", 2, cache_dir=tmp_path) == stored
    assert cached_rates("m", 1, cache_dir=tmp_path) is None  # another thread count
    assert cached_rates("other", 2, cache_dir=tmp_path) is None
    b = rates(scale=2.0, cols=(576,))
    merged = store_rates(b, cache_dir=tmp_path)
    assert merged.shapes() == a.shapes() | b.shapes()
    assert merged.ns_per_weight("Q8_0", 1, 576) == pytest.approx(2 * 0.05 * (1 + 256 / 576))
    assert cached_rates("m", 2, cache_dir=tmp_path) == merged
    cache_file(tmp_path).write_text("{not json", encoding="utf-8")
    assert cached_rates("m", 2, cache_dir=tmp_path) is None  # damaged: time them again
    cache_file(tmp_path).write_text(json.dumps({"version": 99, "machines": {}}))
    assert cached_rates("m", 2, cache_dir=tmp_path) is None


# --- the graph ------------------------------------------------------------------------


def test_node_count_follows_llamas_logged_counts(smollm: ModelSpec, gemma: ModelSpec) -> None:
    # llama.cpp logs "sched_reserve: graph: nodes = N" (pinned build, flash attention on/off)
    for spec, logged_on, logged_off in ((smollm, 936, 1086), (gemma, 727, 817)):
        layers = range(spec.n_layer)
        on = graph_nodes(spec, layers, flash_attn=True) + NODES_OUTSIDE_LAYERS
        off = graph_nodes(spec, layers, flash_attn=False) + NODES_OUTSIDE_LAYERS
        assert on == pytest.approx(logged_on, rel=0.03)
        assert off == pytest.approx(logged_off, rel=0.03)


def test_kernel_needs_name_every_shape_on_the_host(smollm: ModelSpec) -> None:
    needs = kernel_needs(smollm, Settings(n_ctx=4096, flash_attn="on"), hardware())
    assert needs.shapes == {("Q4_1", 576), ("Q4_1", 1536), ("Q8_0", 576)}
    assert needs.attention == {("F16", 64)}
    assert "Q4_0" in needs.repack
    covered = rates()
    assert not needs.missing(covered)
    half = dataclasses.replace(
        covered, timings=tuple(t for t in covered.timings if t.n_cols != 1536)
    )
    assert needs.missing(half).shapes == {("Q4_1", 1536)}
    no_fa = kernel_needs(smollm, Settings(n_ctx=4096, flash_attn="off"), hardware())
    assert ("F16", 64) in no_fa.shapes  # K and V multiplied as matrices


def test_host_priced_by_kernels_only_when_every_type_was_timed(smollm: ModelSpec) -> None:
    s = Settings(n_ctx=4096)
    priced = workload(smollm, s, hardware(rates())).devices[-1].kernels
    assert priced is not None
    assert priced.n_nodes > 900
    partial = dataclasses.replace(
        rates(), timings=tuple(t for t in rates().timings if t.type_name != "Q4_1")
    )
    assert workload(smollm, s, hardware(partial)).devices[-1].kernels is None
    assert workload(smollm, s, hardware(None)).devices[-1].kernels is None


def test_kernel_prices_scale_with_the_rates_and_the_physics(smollm: ModelSpec) -> None:
    s = Settings(n_ctx=8192, n_parallel=8)
    work = workload(smollm, s, hardware(rates()))
    slow = workload(smollm, s, hardware(rates(scale=2.0)))
    one = decode_step_s(work, depth=0)
    # matrix products and attention double with the rates, the nodes do not
    assert one < decode_step_s(slow, depth=0) < 2 * one
    # deeper: attention over more cells; more users: more tokens per product
    assert decode_step_s(work, depth=4096) > decode_step_s(work, depth=0)
    assert decode_step_s(work, depth=0, n_users=8) > decode_step_s(work, depth=0, n_users=2) > one
    # but fewer seconds per token for each user than one by one
    assert decode_step_s(work, depth=0, n_users=8) < 8 * one
    # prefill: in micro-batches, later ones attend to more
    assert prefill_s(work, n_tokens=1024) > 2 * prefill_s(work, n_tokens=256)
    assert prefill_s(work, n_tokens=64, n_seqs=4) > prefill_s(work, n_tokens=64)


def test_calibration_recovers_the_scales_the_runs_were_made_with(smollm: ModelSpec) -> None:
    hw = hardware(rates())
    truth = SpeedFactors(host_kernel_scale=1.6, host_attention_scale=0.7, host_node_scale=2.5)
    s = Settings(n_ctx=8192, n_parallel=4)
    ms = []
    for kind, n_tokens, depth, users in (
        ("tg", 1, 0, 1), ("tg", 1, 4000, 1), ("tg", 1, 1000, 4), ("tg", 1, 0, 2),
        ("pp", 512, 0, 1), ("pp", 512, 3000, 1), ("pp", 64, 0, 4), ("tg", 1, 2000, 2),
    ):  # fmt: skip
        m = SpeedMeasurement(smollm, s, hw, kind, n_tokens, depth, 1.0, "m", n_users=users)  # type: ignore[arg-type]
        ms.append(dataclasses.replace(m, tok_per_s=predict_measurement(m, truth)))
    fit = calibrate(ms)
    assert fit.host_kernel_scale == pytest.approx(1.6, rel=0.1)
    assert fit.host_attention_scale == pytest.approx(0.7, rel=0.15)
    # the nodes are 6 % of a SmolLM2 token here: the weak pull towards the measured
    # kernels (KERNEL_SCALE_PRIOR) keeps their scale short of the truth, moving towards it
    assert 1.0 < fit.host_node_scale < 2.5
    for m in ms:
        assert predict_measurement(m, fit) == pytest.approx(m.tok_per_s, rel=0.05)


def test_calibration_learns_a_weight_types_own_scale_for_one_token(
    smollm: ModelSpec, gemma: ModelSpec
) -> None:
    # the runs were made where one user's Q4_1 products (SmolLM2's layers; Gemma has none)
    # take 1.6x what the kernels timed and batched ones 0.8x: one common kernel scale
    # cannot explain both models and both regimes, a scale per type and regime can
    hw = hardware(rates())
    truth = SpeedFactors(host_type_scales=(("q4_1/1", 1.6), ("q4_1", 0.8)))
    s = Settings(n_ctx=8192, n_parallel=8)
    ms = runs_made_with(truth, (smollm, gemma), s, hw, (
        ("tg", 1, 0, 1), ("tg", 1, 2000, 1), ("tg", 1, 0, 2), ("tg", 1, 1000, 4),
        ("tg", 1, 0, 8), ("pp", 64, 0, 1), ("pp", 512, 1000, 1), ("pp", 64, 0, 4),
    ))  # fmt: skip
    fit = calibrate(ms)
    scales = dict(fit.host_type_scales)
    assert scales["q4_1/1"] * fit.host_kernel_scale == pytest.approx(1.6, rel=0.1)
    assert scales["q4_1"] * fit.host_kernel_scale == pytest.approx(0.8, rel=0.1)
    for t in ("q4_k", "q6_k", "q8_0/1"):  # the types the runs had at their kernels' rate
        assert scales[t] * fit.host_kernel_scale == pytest.approx(1.0, rel=0.1)
    for m in ms:
        assert predict_measurement(m, fit) == pytest.approx(m.tok_per_s, rel=0.03)
    # the scales price only their own type and regime
    slow = SpeedFactors(host_type_scales=(("q4_1/1", 2.0),))
    work = workload(gemma, s, hw)
    assert decode_step_s(work, depth=0, factors=slow) == decode_step_s(work, depth=0)
    work = workload(smollm, s, hw)
    assert decode_step_s(work, depth=0, factors=slow) > 1.3 * decode_step_s(work, depth=0)
    assert decode_step_s(work, depth=0, n_users=4, factors=slow) == decode_step_s(
        work, depth=0, n_users=4
    )


def test_calibration_learns_an_attention_kernels_own_scale(
    smollm: ModelSpec, gemma: ModelSpec
) -> None:
    # the runs were made where Gemma's tiled attention (F16 cache, heads of 256) takes 1.5x
    # what the kernels timed and SmolLM2's (heads of 64) 0.8x: one common attention scale
    # cannot explain both models' prompts after a long history, a scale per kernel can
    hw = hardware(rates())
    truth = SpeedFactors(host_attention_scales=(("f16/256/tiled", 1.5), ("f16/64/tiled", 0.8)))
    s = Settings(n_ctx=8192, n_parallel=8)
    ms = runs_made_with(truth, (smollm, gemma), s, hw, (
        ("tg", 1, 0, 1), ("tg", 1, 3000, 1), ("tg", 1, 1000, 4), ("pp", 64, 0, 1),
        ("pp", 64, 2000, 1), ("pp", 64, 4000, 4), ("pp", 512, 1000, 1), ("pp", 64, 1000, 8),
    ))  # fmt: skip
    fit = calibrate(ms)
    kernels = dict(fit.host_attention_scales)
    assert set(kernels) == {"f16/64/rows", "f16/64/tiled", "f16/256/rows", "f16/256/tiled"}
    b = fit.host_attention_scale
    assert kernels["f16/256/tiled"] * b == pytest.approx(1.5, rel=0.1)
    assert kernels["f16/64/tiled"] * b == pytest.approx(0.8, rel=0.1)
    for m in ms:
        assert predict_measurement(m, fit) == pytest.approx(m.tok_per_s, rel=0.03)
    # a kernel's scale prices only its own path: decoding one token at a time is untouched
    slow = SpeedFactors(host_attention_scales=(("f16/256/tiled", 2.0),))
    work = workload(gemma, s, hw)
    assert decode_step_s(work, depth=4000, factors=slow) == decode_step_s(work, depth=4000)
    assert prefill_s(work, n_tokens=64, depth=4000, factors=slow) > 1.2 * prefill_s(
        work, n_tokens=64, depth=4000
    )
    work = workload(smollm, s, hw)
    assert prefill_s(work, n_tokens=64, depth=4000, factors=slow) == prefill_s(
        work, n_tokens=64, depth=4000
    )


# --- the load test, predicted ---------------------------------------------------------


def test_predicted_rounds_follow_the_load_tests_scheduling(gemma: ModelSpec) -> None:
    plan = UsersPlan(n_users=(1, 4), n_prompt=128, n_gen=16)
    s = settings_for_users(gemma, Settings(n_ctx=2048, n_parallel=1), plan)
    assert s.n_parallel == 4
    work = workload(gemma, s, hardware(rates()))
    one, four = predict_rounds(work, plan, n_batch=s.n_batch)
    assert [len(r.users) for r in (one, four)] == [1, 4]
    # a burst: one prefill step for the four prompts, then lockstep decoding
    assert four.steps[0].n_prefill == 4 * 128
    assert all(st.n_decode == 4 for st in four.steps[1:])
    assert len({u.token_s[0] for u in four.users}) == 1
    s1, s4 = summarize([one], Slo()), summarize([four], Slo())
    assert s4.ttft_s > s1.ttft_s
    assert s4.per_user_tok_per_s < s1.per_user_tok_per_s
    assert s4.aggregate_tok_per_s > s1.aggregate_tok_per_s
    # the step times are the speed model's
    assert one.steps[1].seconds == pytest.approx(decode_step_s(work, depth=128, n_users=1))
    # staggered users queue: the later ones join a running batch
    late = dataclasses.replace(plan, n_users=(3,), arrivals=Arrivals("staggered", 0.05))
    (r,) = predict_rounds(work, late, n_batch=s.n_batch)
    assert [u.arrival_s for u in r.users] == pytest.approx([0.0, 0.05, 0.10])
    assert all(u.token_s[0] >= u.arrival_s for u in r.users)


def test_settings_for_users_makes_room_or_says_how_much(gemma: ModelSpec) -> None:
    plan = UsersPlan(n_users=(8,), n_prompt=512, n_gen=128, depth=1024)
    s = settings_for_users(gemma, Settings(n_ctx=2048), plan)
    assert s.n_parallel == 8
    assert s.n_ctx >= 8 * (1024 + 512 + 128)
    with pytest.raises(ValueError, match="each user needs 1664 tokens of context"):
        settings_for_users(gemma, Settings(n_ctx=2048), plan, context_given=True)


# --- the results database -------------------------------------------------------------


def test_schema_2_adds_the_load_tests_table(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "results.sqlite3"
    conn = sqlite3.connect(path)
    with conn:
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    db = ResultsDB(path)
    assert db.schema_version() == 2
    assert db.users_runs() == []


def test_settings_read_back_from_a_stored_run_are_hashable() -> None:
    import json

    from app.predict.speed import settings_from_dict

    s = Settings(n_ctx=4096, tensor_split=(1.0, 2.0), tensor_overrides=((r"blk\.1\..*", "CPU"),))
    back = settings_from_dict(json.loads(json.dumps(dataclasses.asdict(s))))
    assert back == s
    assert hash(back) == hash(s)  # calibration keys its workloads by settings
