"""Planner: recommendations on hardware profiles, each expected answer derived from the
estimator and written down with its reasoning; monotonicity the binary searches rely on."""

from __future__ import annotations

import dataclasses
import time

import pytest

from app.errors import PlanError
from app.hardware.devices import Device, Hardware
from app.hardware.profiles import compose
from app.model.catalog import catalog_header
from app.model.spec import ModelSpec, model_spec
from app.planning.goals import Goal
from app.planning.options import QuantOption, quant_options
from app.planning.planner import fit_layers, max_users, recommend, server_argv
from app.planning.words import explain
from app.predict.estimate import estimate
from app.settings import MAX_SEQUENCES, Settings
from app.units import DEFAULT_MARGIN_BYTES

GIB = 1024**3
HOST = Device("CPU", "host", 64 * GIB, None, 50.0)


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    return model_spec(catalog_header("llama-3.1-8b"))


@pytest.fixture(scope="module")
def llama8b_quants(llama8b: ModelSpec) -> tuple[QuantOption, ...]:
    return quant_options(llama8b)


@pytest.fixture(scope="module")
def rtx3060() -> Hardware:
    return compose("rtx-3060-12g", default_host=HOST)


def _gpu_total(spec: ModelSpec, settings: Settings, hw: Hardware) -> int:
    return estimate(spec, settings, hw).devices[0].total_bytes


def test_f16_8b_on_a_3060_spills_and_longest_context_picks_q8_kv(
    llama8b: ModelSpec, rtx3060: Hardware
) -> None:
    # The 3060 profile gives 11.0 GiB usable; Llama-3.1-8B at F16 is 14.96 GiB of weights,
    # so no context keeps every layer on the GPU. With 64 GiB of RAM the training context
    # (131072) fits with layers spilled, for f16 and q8_0 KV alike; q8_0 KV is half the
    # size, so it leaves room for more layers on the GPU (12 vs 9) and wins. (12, not 13:
    # the CUDA compute buffer holds the weights of the CPU layers while their prompt
    # matmuls are offloaded to it, llama.cpp's op_offload; app/predict/graph/compute.py.)
    assert llama8b.weights_bytes > rtx3060.gpus[0].capacity_bytes  # type: ignore[operator]
    rec = recommend(llama8b, rtx3060, Goal("longest-context"))
    best, runner = rec.best, rec.runner_up
    assert best is not None
    assert runner is not None
    assert best.quant.name == "F16"
    assert not best.all_on_gpu
    assert best.n_ctx_per_user == 131072 == runner.n_ctx_per_user
    assert best.kv_type == "q8_0"
    assert runner.kv_type == "f16"
    assert best.gpu_layers > runner.gpu_layers
    assert best.speed.decode_tok_per_s > runner.speed.decode_tok_per_s
    assert "12 of 32 layers" in rec.why
    assert "128k tokens" in rec.why
    assert "Runner-up: an f16 KV cache" in rec.why


def test_best_quality_on_a_3060_is_q8_0_because_f16_does_not_fit(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware
) -> None:
    # At 4096 tokens F16 needs 14.7 GiB on the GPU (> 11.0 - 1 GiB margin); Q8_0 needs
    # 8.2 GiB and fits with every layer: the best quality that keeps all layers on the GPU.
    # The runner-up is Q6_K (the next-best quality that fits).
    by_name = {o.name: o for o in llama8b_quants}
    s = Settings(n_ctx=4096, n_gpu_layers=-1, flash_attn="on")
    room = rtx3060.gpus[0].capacity_bytes - DEFAULT_MARGIN_BYTES  # type: ignore[operator]
    assert _gpu_total(by_name["F16"].spec, s, rtx3060) > room
    assert _gpu_total(by_name["Q8_0"].spec, s, rtx3060) < room
    rec = recommend(by_name["F16"].spec, rtx3060, Goal("best-quality"), options=llama8b_quants)
    assert rec.best is not None
    assert rec.runner_up is not None
    assert rec.best.quant.name == "Q8_0"
    assert rec.best.all_on_gpu
    assert rec.best.kv_type == "f16"  # nothing forces a lossy cache at 4k
    assert rec.runner_up.quant.name == "Q6_K"


def test_fastest_picks_the_smallest_quant_within_the_quality_floor(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware
) -> None:
    # Decode is bandwidth-bound, so the fewest bytes win; the default floor is Q4_K_M's
    # KLD (0.0313), so Q4_K_S/IQ4_XS/Q3… are not picked unasked. With --any-quant
    # (max_kld None) the smallest quant of all, Q2_K, is fastest.
    rec = recommend(llama8b_quants[0].spec, rtx3060, Goal("fastest"), options=llama8b_quants)
    assert rec.best is not None
    assert rec.best.quant.name == "Q4_K_M"
    anything = recommend(
        llama8b_quants[0].spec, rtx3060, Goal("fastest", max_kld=None), options=llama8b_quants
    )
    assert anything.best is not None
    assert anything.best.quant.name == "Q2_K"


def test_leave_free_and_min_ctx_are_respected(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware
) -> None:
    goal = Goal("longest-context", leave_free_bytes=4 * GIB, min_ctx=8192)
    rec = recommend(llama8b_quants[0].spec, rtx3060, goal, options=llama8b_quants)
    assert rec.best is not None
    for d in rec.best.estimate.devices:
        assert d.capacity_bytes is not None
        assert d.total_bytes <= d.capacity_bytes - 4 * GIB - DEFAULT_MARGIN_BYTES
    plain = recommend(
        llama8b_quants[0].spec, rtx3060, Goal("longest-context"), options=llama8b_quants
    )
    assert plain.best is not None
    assert rec.best.n_ctx_per_user < plain.best.n_ctx_per_user
    assert rec.best.n_ctx_per_user >= 8192


def test_users_goal_meets_the_speed_or_says_it_does_not(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware
) -> None:
    spec = llama8b_quants[0].spec
    goal = Goal("users", n_users=4, ctx=8192, min_tok_per_s=20)
    rec = recommend(spec, rtx3060, goal, options=llama8b_quants)
    assert rec.feasible
    assert rec.best is not None
    assert rec.best.settings.n_parallel == 4
    assert rec.best.speed.per_user_tok_per_s >= 20
    assert "meets the 20 tok/s" in rec.why
    hopeless = recommend(
        spec, rtx3060, Goal("users", n_users=4, ctx=8192, min_tok_per_s=500), options=llama8b_quants
    )
    assert not hopeless.feasible
    assert "does NOT meet" in hopeless.why


def test_how_many_users_fit_shrinks_with_context_and_speed(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware
) -> None:
    spec = llama8b_quants[0].spec
    short = max_users(spec, rtx3060, ctx_per_user=4096, min_tok_per_s=20, options=llama8b_quants)
    long = max_users(spec, rtx3060, ctx_per_user=16384, min_tok_per_s=20, options=llama8b_quants)
    fast = max_users(spec, rtx3060, ctx_per_user=4096, min_tok_per_s=40, options=llama8b_quants)
    assert short.n_users >= long.n_users >= 1
    assert short.n_users >= fast.n_users
    assert short.plan is not None
    assert short.plan.speed.per_user_tok_per_s >= 20
    assert f"{short.n_users} users fit" in short.why


def test_the_users_count_stops_at_llama_cpps_limit() -> None:
    # a tiny model, a short context, any speed: more users fit than llama.cpp serves (256
    # parallel sequences); the search stopped there instead of asking for 512 (the Settings
    # of 512 sequences are refused: `ggtune plan` failed after a calibration made it fast)
    spec = model_spec(catalog_header("smollm2-135m"))
    big = Hardware.with_gpus([80 * 1024**3], ram_bytes=256 * 1024**3)
    cap = max_users(spec, big, ctx_per_user=256, min_tok_per_s=0.001, max_n=1024)
    assert cap.n_users == MAX_SEQUENCES
    assert cap.plan is not None
    assert cap.plan.settings.n_parallel == MAX_SEQUENCES


def test_moe_on_a_small_gpu_moves_experts_to_the_cpu(rtx3060: Hardware) -> None:
    # Qwen3-30B-A3B at Q4_K_M (~17 GiB) cannot sit on an 11 GiB card; --n-cpu-moe keeps
    # attention and the dense parts on the GPU and is faster than offloading whole layers
    spec = quant_options(model_spec(catalog_header("qwen3-30b-a3b")), names=("Q4_K_M",))
    q4 = next(o for o in spec if o.name == "Q4_K_M")
    s = fit_layers(q4.spec, Settings(n_ctx=4096, flash_attn="on"), rtx3060)
    assert s is not None
    assert s.n_cpu_moe > 0
    assert s.n_gpu_layers == -1


def test_cpu_only_machine_plans_in_system_ram() -> None:
    spec = model_spec(catalog_header("llama-3.2-3b"))
    hw = Hardware.cpu_only(16 * GIB)
    rec = recommend(spec, hw, Goal("longest-context"))
    assert rec.best is not None
    assert "runs from system RAM" in rec.why
    assert rec.best.estimate.devices[-1].total_bytes <= 15 * GIB
    tiny = recommend(spec, Hardware.cpu_only(2 * GIB), Goal("fastest"))
    assert tiny.best is None
    assert tiny.why.startswith("Nothing fits")


def test_a_plan_on_a_repacking_cpu_turns_mmap_off_and_says_why(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware
) -> None:
    """On an AVX2 CPU llama.cpp repacks Q4_K weights and, with mmap, the mapped file keeps
    the originals too (llama.cpp #16761): the same plan without mmap needs that much less
    RAM, so it wins, and the reasons say why."""
    from app.planning.words import mmap_saving
    from app.predict.estimate import REPACK_NOTE_BYTES

    spec = model_spec(catalog_header("llama-3.1-8b"))
    avx2 = Hardware.cpu_only(32 * GIB, cpu_flags=("avx2",))
    rec = recommend(spec, avx2, Goal("fastest"), options=llama8b_quants)
    best = rec.best
    assert best is not None
    assert best.quant.name.startswith("Q4_K")
    assert not best.settings.use_mmap
    assert mmap_saving(best) == 0
    repacked = best.estimate.devices[-1].other_bytes
    assert repacked >= REPACK_NOTE_BYTES
    mapped = estimate(best.quant.spec, best.settings.replace(use_mmap=True), avx2)
    saved = mapped.devices[-1].total_bytes - best.estimate.devices[-1].total_bytes
    # all repacked weights but those past the mapped span's end (unmapped after loading)
    assert saved == mapped.mapped_twice_bytes
    assert REPACK_NOTE_BYTES <= saved <= repacked
    assert "mmap is off (llama-server --load-mode none" in rec.why
    assert f"repacks {repacked / GIB:.1f} GiB of {best.quant.name}'s weights" in rec.why
    argv = server_argv("/models/llama-3.1-8b-Q4_K_M.gguf", rec)
    assert argv[argv.index("--load-mode") + 1] == "none"
    # a plan kept with mmap on says what turning it off would save
    kept = dataclasses.replace(best, settings=best.settings.replace(use_mmap=True), estimate=mapped)
    assert mmap_saving(kept) == saved
    assert f"save {saved / GIB:.1f} GiB of RAM" in explain(Goal("fastest"), kept, None, avx2)
    # without the CPU features nothing is repacked: mmap stays on, nothing said
    plain = recommend(spec, Hardware.cpu_only(32 * GIB), Goal("fastest"), options=llama8b_quants)
    assert plain.best is not None
    assert plain.best.settings.use_mmap
    assert "mmap" not in plain.why
    # everything on the GPU: nothing of the model on the CPU to repack
    gpu = recommend(spec, rtx3060, Goal("fastest"), options=llama8b_quants)
    assert gpu.best is not None
    assert gpu.best.all_on_gpu
    assert gpu.best.settings.use_mmap
    assert "mmap" not in gpu.why


def test_mmap_off_buys_a_longer_context_on_a_small_repacking_cpu(
    llama8b_quants: tuple[QuantOption, ...],
) -> None:
    """16 GiB, AVX2: Q4_K_M's repacked copy costs ~3 GiB with mmap; without it the cache
    gets that room, so the longest context is planned with mmap off."""
    spec = model_spec(catalog_header("llama-3.1-8b"))
    avx2 = Hardware.cpu_only(16 * GIB, cpu_flags=("avx2",))
    q4 = [o for o in llama8b_quants if o.name == "Q4_K_M"]
    rec = recommend(spec, avx2, Goal("longest-context"), options=q4)
    assert rec.best is not None
    assert not rec.best.settings.use_mmap
    # the same context with mmap on would not fit: the mapped file keeps a second copy
    mapped = estimate(q4[0].spec, rec.best.settings.replace(use_mmap=True), avx2)
    host = mapped.devices[-1]
    assert host.capacity_bytes is not None
    assert host.total_bytes > host.capacity_bytes - DEFAULT_MARGIN_BYTES
    on = recommend(
        spec,
        dataclasses.replace(avx2, host=dataclasses.replace(avx2.host, cpu_flags=())),
        Goal("longest-context"),
        options=q4,
    )
    assert on.best is not None
    # the same quant without repacking (no CPU features) reaches the same context: the
    # repacked copy is what mmap off gives back, not more
    assert rec.best.n_ctx_per_user == on.best.n_ctx_per_user


@pytest.mark.parametrize("ngl", [0, 10, 20, 33])
def test_more_context_never_uses_less_memory(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware, ngl: int
) -> None:
    spec = llama8b_quants[-1].spec
    totals = [
        estimate(spec, Settings(n_ctx=c, n_gpu_layers=ngl), rtx3060).total_bytes
        for c in range(512, 131072, 4096)
    ]
    assert totals == sorted(totals)


def test_more_gpu_layers_never_use_less_gpu_memory(llama8b: ModelSpec, rtx3060: Hardware) -> None:
    gpu = [
        estimate(llama8b, Settings(n_ctx=8192, n_gpu_layers=n), rtx3060).devices[0].total_bytes
        for n in range(34)
    ]
    assert gpu == sorted(gpu)


def test_a_typical_plan_takes_a_few_hundred_ms(
    llama8b_quants: tuple[QuantOption, ...], rtx3060: Hardware
) -> None:
    start = time.perf_counter()
    recommend(llama8b_quants[0].spec, rtx3060, Goal("longest-context"), options=llama8b_quants)
    assert time.perf_counter() - start < 1.5  # ~0.15 s here; slack for a shared machine


def test_bad_goals_are_refused() -> None:
    with pytest.raises(PlanError):
        Goal("cheapest")  # type: ignore[arg-type]
    with pytest.raises(PlanError):
        Goal("users", n_users=0)
