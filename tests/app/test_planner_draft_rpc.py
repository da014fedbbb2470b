"""Planner: a speculative draft model (memory, the speed-up formula, when it is refused) and a
split over several machines with llama.cpp's RPC backend (placement, memory per machine,
network cost, the commands)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from app.errors import PlanError
from app.hardware.devices import Device, Hardware
from app.hardware.profiles import compose
from app.model.catalog import catalog_header
from app.model.spec import ModelSpec, model_spec
from app.planning.planner import (
    Goal,
    QuantOption,
    RpcHost,
    quant_options,
    recommend,
    rpc_hardware,
    server_argv,
)
from app.predict.estimate import estimate
from app.predict.speed import (
    Link,
    best_draft_length,
    expected_tokens_per_step,
    predict_speed,
    speculative_speedup,
)
from app.settings import ALL_LAYERS, Settings
from app.units import DEFAULT_MARGIN_BYTES

GIB = 1024**3
HOST = Device("CPU", "host", 64 * GIB, None, 50.0)
VENDORED = Path("vendor") / "llama.cpp"


def _spec(name: str) -> ModelSpec:
    return model_spec(catalog_header(name))


def _quant(spec: ModelSpec, name: str) -> QuantOption:
    return next(o for o in quant_options(spec, names=(name,)) if o.name == name)


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    return _spec("llama-3.1-8b")


@pytest.fixture(scope="module")
def draft3b_q4() -> ModelSpec:
    return _quant(_spec("llama-3.2-3b"), "Q4_K_M").spec


# --- the speed-up formula -----------------------------------------------------------------


def test_expected_tokens_per_step_is_the_geometric_sum() -> None:
    # (1 - α^(k+1)) / (1 - α): 1 + α + α² + … + α^k
    assert expected_tokens_per_step(0.7, 3) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    assert expected_tokens_per_step(0.7, 3) == pytest.approx(2.533)
    assert expected_tokens_per_step(0.0, 5) == pytest.approx(1.0)  # nothing accepted
    assert expected_tokens_per_step(1.0, 4) == pytest.approx(5.0)  # everything accepted
    with pytest.raises(ValueError, match="acceptance"):
        expected_tokens_per_step(1.5, 2)


def test_speculative_speedup_numbers() -> None:
    # an 8× faster draft, k = 4: 2.7731 tokens for 4/8 + 1 = 1.5 target steps -> ×1.849
    assert speculative_speedup(0.7, 4, 1 / 8, 1.0) == pytest.approx(2.77309 / 1.5, rel=1e-4)
    # a draft only 2× faster never pays at k = 1: 1.7 tokens for 1.5 steps -> ×1.133;
    # with low acceptance it slows decoding down (PR #10455)
    assert speculative_speedup(0.7, 1, 0.5, 1.0) == pytest.approx(1.7 / 1.5)
    assert speculative_speedup(0.2, 4, 0.5, 1.0) < 1.0
    # the best draft length for an 8× faster draft at α = 0.7 is 4 (×1.85 — the 1.7×
    # measured on an RTX 3060 with a 1B draft for an 8B, llama.cpp #5877, is this size)
    k, up = best_draft_length(0.7, 1 / 8, 1.0)
    assert k == 4
    assert up == pytest.approx(1.8487, abs=1e-3)
    assert best_draft_length(0.7, 1 / 8, 1.0, k_max=2)[0] == 2


# --- the draft in the plan ------------------------------------------------------------------


def test_draft_memory_is_the_drafts_own_estimate_on_the_same_devices(
    llama8b: ModelSpec, draft3b_q4: ModelSpec
) -> None:
    # Llama-3.1-8B F16 (15 GiB) on an RTX 4090 (23 GiB usable): a 3B Q4_K_M draft (1.9 GiB)
    # decodes ~7× faster, so at α = 0.7 it pays off (×1.78 predicted) and is used.
    hw = compose("rtx-4090", default_host=HOST)
    opts = quant_options(llama8b, simulate=None)
    rec = recommend(llama8b, hw, Goal("fastest", draft=draft3b_q4), options=opts)
    assert rec.best is not None
    assert rec.draft is not None
    d = rec.draft
    assert d.used, d.why
    assert d.settings is not None
    assert d.estimate is not None
    assert d.settings.n_gpu_layers == ALL_LAYERS  # the target keeps all its layers on the GPU
    assert d.settings.n_ctx == rec.best.settings.n_ctx  # same context
    assert d.settings.cache_type_k == rec.best.settings.cache_type_k
    draft_alone = estimate(draft3b_q4, d.settings, hw)
    assert d.estimate == draft_alone
    target_alone = estimate(llama8b, rec.best.settings, hw)
    for dev in rec.best.estimate.devices:
        added = dev.total_bytes - target_alone.device(dev.name).total_bytes
        assert added == draft_alone.device(dev.name).total_bytes
    # the draft's layers and KV sit on the GPU, its token embeddings on the CPU (as llama.cpp)
    assert draft_alone.device("CUDA0").kv_bytes > 0
    assert draft_alone.device("CUDA0").weights_bytes > 1 * GIB
    assert draft_alone.device("CPU").kv_bytes == 0
    # everything still fits with the margin
    gpu = rec.best.estimate.device("CUDA0")
    assert gpu.capacity_bytes is not None
    assert gpu.total_bytes <= gpu.capacity_bytes - DEFAULT_MARGIN_BYTES
    # speed: the formula on the predicted speeds
    assert d.speed_ratio is not None
    assert d.speed_ratio >= 2.5
    assert d.draft_max is not None
    assert d.speedup is not None
    t_d, t_t = 1 / (d.draft_tok_per_s or 1), 1 / (d.target_tok_per_s or 1)
    assert d.speedup == pytest.approx(speculative_speedup(0.7, d.draft_max, t_d, t_t))
    assert d.speedup > 1.1
    assert "used" in rec.why
    assert "Leviathan" in rec.why
    assert "#5877" in rec.why
    # the command: -md FILE --spec-type draft-simple -ngld all --spec-draft-n-max K
    argv = server_argv("target.gguf", rec, draft_path="draft.gguf")
    assert shlex.split(shlex.join(argv)) == list(argv)
    i = argv.index("-md")
    assert argv[i : i + 6] == ("-md", "draft.gguf", "--spec-type", "draft-simple", "-ngld", "all")
    assert argv[argv.index("--spec-draft-n-max") + 1] == str(d.draft_max)


def test_draft_refused_when_too_slow_and_the_plan_is_the_plain_one(
    llama8b: ModelSpec, draft3b_q4: ModelSpec
) -> None:
    # 8B Q4_K_M (4.6 GiB) vs 3B Q4_K_M (1.9 GiB): the draft is only ~2.2× faster (< 2.5×)
    hw = compose("rtx-3060-12g", default_host=HOST)
    opts = (_quant(llama8b, "Q4_K_M"),)
    rec = recommend(llama8b, hw, Goal("fastest", draft=draft3b_q4), options=opts)
    assert rec.best is not None
    assert rec.draft is not None
    assert not rec.draft.used
    assert rec.draft.speed_ratio is not None
    assert rec.draft.speed_ratio < 2.5
    assert "too slow" in rec.draft.why
    assert "2.5" in rec.draft.why
    assert "#10455" in rec.draft.why  # the caveat
    assert "not used — too slow" in rec.why
    # no draft memory in the plan, no draft flags in the command
    assert rec.best.estimate == estimate(opts[0].spec, rec.best.settings, hw)
    assert "-md" not in server_argv("m.gguf", rec)


def test_draft_refused_when_too_big(llama8b: ModelSpec) -> None:
    # 8B Q8_0 (7.95 GiB) alone fits the 3060 (11 GiB usable); a 3B F16 draft (6 GiB) does
    # not fit next to it, and 4 GiB of RAM cannot take the rest (8 GiB could: the draft all
    # on the CPU is 6.2 GiB there, the GPU taking its prompt matmuls, op offload)
    hw = compose("rtx-3060-12g", default_host=Device("CPU", "host", 4 * GIB, None, 50.0))
    opts = (_quant(llama8b, "Q8_0"),)
    rec = recommend(llama8b, hw, Goal("fastest", draft=_spec("llama-3.2-3b")), options=opts)
    assert rec.best is not None
    assert rec.best.all_on_gpu
    assert rec.draft is not None
    assert not rec.draft.used
    assert "too big" in rec.draft.why
    assert rec.best.estimate == estimate(opts[0].spec, rec.best.settings, hw)


def test_draft_with_another_vocabulary_is_refused(llama8b: ModelSpec) -> None:
    hw = compose("rtx-3060-12g", default_host=HOST)
    opts = (_quant(llama8b, "Q4_K_M"),)
    rec = recommend(llama8b, hw, Goal("fastest", draft=_spec("smollm2-135m")), options=opts)
    assert rec.draft is not None
    assert not rec.draft.used
    assert "vocabulary" in rec.draft.why


def test_draft_goal_checks() -> None:
    with pytest.raises(PlanError):
        Goal("fastest", draft_acceptance=1.0)
    with pytest.raises(PlanError):
        Goal("fastest", draft_max=0)


# --- RPC split --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama70b_q4() -> QuantOption:
    return _quant(_spec("llama-3.1-70b"), "Q4_K_M")


def _remotes() -> tuple[RpcHost, ...]:
    return (
        RpcHost(compose("rtx-3090"), "10.0.0.2:50052", "rtx-3090"),
        RpcHost(compose("rtx-3090"), "10.0.0.3:50052", "rtx-3090"),
    )


def test_rpc_devices_are_named_and_ordered_like_llama_cpp(llama_cpp_source: Path) -> None:
    local = compose("rtx-4090", default_host=HOST)
    hw, machines = rpc_hardware(local, _remotes())
    assert [d.name for d in hw.devices] == ["RPC0", "RPC1", "CUDA0", "CPU"]
    assert machines["RPC1"] == "10.0.0.3:50052"
    assert machines["CUDA0"] == "this machine"
    assert "10.0.0.2:50052" in hw.gpus[0].description
    # a remote without a GPU offers its CPU (rpc-server's fallback)
    cpu_box = RpcHost(Hardware.cpu_only(32 * GIB), "10.0.0.4:50052")
    hw2, _ = rpc_hardware(local, (cpu_box,))
    assert hw2.gpus[0].name == "RPC0"
    assert hw2.gpus[0].capacity_bytes == 32 * GIB
    # ggml-rpc names devices "RPC" + a global counter
    text = (llama_cpp_source / VENDORED / "ggml/src/ggml-rpc/ggml-rpc.cpp").read_text()
    assert 'std::string dev_name = "RPC" + std::to_string(dev_id);' in text


def test_rpc_split_of_a_70b_fits_where_one_machine_does_not(
    llama70b_q4: QuantOption, llama_cpp_source: Path
) -> None:
    # Llama-3.1-70B Q4_K_M is ~40 GiB of weights: an RTX 4090 (23 GiB usable) alone must put
    # about half the layers in system RAM; with two remote RTX 3090s (23 GiB each) and 32k
    # tokens of context (~5 GiB of q8_0 KV) all 80 layers sit on the three GPUs, split in
    # proportion to their memory.
    spec = llama70b_q4.spec
    local = compose("rtx-4090", default_host=HOST)
    goal = Goal("fastest", ctx=32768)
    alone = recommend(spec, local, goal, options=(llama70b_q4,))
    assert alone.best is not None
    assert not alone.best.all_on_gpu
    goal = Goal("fastest", ctx=32768, rpc_hosts=_remotes())
    rec = recommend(spec, local, goal, options=(llama70b_q4,))
    best, rpc = rec.best, rec.rpc
    assert best is not None
    assert rpc is not None
    assert rec.hardware is not None
    assert best.all_on_gpu
    assert best.speed.decode_tok_per_s > 3 * alone.best.speed.decode_tok_per_s
    # memory per machine: remotes first, each within its capacity less the margin
    assert [m.machine for m in rpc.machines] == ["10.0.0.2:50052", "10.0.0.3:50052", "this machine"]
    assert [m.devices for m in rpc.machines] == [("RPC0",), ("RPC1",), ("CUDA0", "CPU")]
    assert sum(m.n_layers for m in rpc.machines) == spec.n_layer_all
    for m in rpc.machines[:2]:
        assert m.capacity_bytes is not None
        assert m.total_bytes <= m.capacity_bytes - DEFAULT_MARGIN_BYTES
        assert 20 <= m.n_layers <= 30  # ~a third each
    assert sum(m.total_bytes for m in rpc.machines) == best.estimate.total_bytes
    # the weights add up to those of the same model on one machine big enough for it
    big = compose("rtx-4090:200GB", default_host=HOST)
    single = estimate(spec, best.settings.replace(tensor_split=()), big)
    assert sum(m.weights_bytes for m in rpc.machines) == sum(
        d.weights_bytes for d in single.devices
    )
    # the split is pinned with -ts: each device's layer count (the output layer included)
    counts = best.settings.tensor_split
    assert sum(counts) == spec.n_layer_all + 1
    remote_layers = [float(m.n_layers) for m in rpc.machines[:2]]
    # this machine's GPU also holds the output layer
    assert counts == (*remote_layers, float(best.estimate.device("CUDA0").n_layers + 1))
    assert estimate(spec, best.settings, rec.hardware) == best.estimate
    # network, per token: this machine -> RPC0 -> (via this machine) RPC1 -> CUDA0, which
    # holds the output layer: two GET_TENSOR round trips (RPC0's and RPC1's last hidden
    # state), the embeddings and RPC0's result sent on, and each remote's graph inputs
    t = rpc.traffic
    assert t is not None
    assert t.complete
    assert [m.machine for m in t.machines] == ["10.0.0.2:50052", "10.0.0.3:50052"]
    assert t.round_trips == 2
    hidden = 8192 * 4
    fa = best.estimate.context.flash_attn
    n_kv = -(-(best.speed.depth + 1) // 256) * 256
    inputs = 314 + 4 + (314 + 8) * 2 + 314 + n_kv * (2 if fa else 4)
    if not fa:
        inputs += 8 * (1024 - 1)  # V stored transposed: one index per V element
    for m in t.machines:
        assert m.sent_bytes == 13 + 321 + 314 + hidden + inputs
        assert m.received_bytes == 8 + hidden
    assert rpc.network_s_per_token == pytest.approx(t.total_bytes * 8 / 1e9 + 2 * 2 * 0.0005)
    raw = predict_speed(spec, best.settings, rec.hardware, depth=best.speed.depth)
    assert 1 / best.speed.decode_tok_per_s == pytest.approx(
        1 / raw.decode_tok_per_s + rpc.network_s_per_token
    )
    assert "RPC backend" in rec.why
    assert "ms per token" in rec.why
    # loading sends each remote its weights; with -c a later load only the small tensors
    for m in rpc.machines[:2]:
        assert m.load_bytes == m.weights_bytes
        assert 0 < m.reload_bytes < m.load_bytes / 20  # norms, K/V projections: ~2 %
    assert rpc.machines[2].load_bytes == 0
    # the commands: ggml-rpc-server bound to the address the main machine uses, with cache
    assert rpc.remote_commands == (
        ("ggml-rpc-server", "-H", "10.0.0.2", "-p", "50052", "-c"),
        ("ggml-rpc-server", "-H", "10.0.0.3", "-p", "50052", "-c"),
    )
    argv = server_argv("/models/llama-70b-Q4_K_M.gguf", rec)
    line = shlex.join(argv)
    assert shlex.split(line) == list(argv)
    assert argv[:3] == ("llama-server", "-m", "/models/llama-70b-Q4_K_M.gguf")
    assert argv[argv.index("--rpc") + 1] == "10.0.0.2:50052,10.0.0.3:50052"
    assert argv[argv.index("-ts") + 1] == ",".join(str(int(c)) for c in counts)
    text = (llama_cpp_source / VENDORED / "common/arg.cpp").read_text()
    assert '{"--rpc"}' in text
    assert '{"--spec-draft-n-max"}' in text


def test_a_machine_the_plan_leaves_empty_is_dropped(llama70b_q4: QuantOption) -> None:
    # At 4k tokens the 70B fits the RTX 4090 and one RTX 3090: the second remote machine
    # would only add a round trip per token, so the plan goes without it, and says so
    spec = llama70b_q4.spec
    local = compose("rtx-4090", default_host=HOST)
    rec = recommend(spec, local, Goal("fastest", rpc_hosts=_remotes()), options=(llama70b_q4,))
    assert rec.best is not None
    assert rec.best.all_on_gpu
    assert rec.rpc is not None
    assert [h.endpoint for h in rec.rpc.hosts] == ["10.0.0.2:50052"]
    assert [m.machine for m in rec.rpc.machines] == ["10.0.0.2:50052", "this machine"]
    assert rec.rpc.remote_commands == (("ggml-rpc-server", "-H", "10.0.0.2", "-p", "50052", "-c"),)
    assert rec.rpc.n_round_trips == 1
    assert "Not used: 10.0.0.3:50052" in rec.why
    argv = server_argv("m.gguf", rec)
    assert argv[argv.index("--rpc") + 1] == "10.0.0.2:50052"
    # the same plan as when only the machine it uses is offered
    one = recommend(spec, local, Goal("fastest", rpc_hosts=_remotes()[:1]), options=(llama70b_q4,))
    assert one.best is not None
    assert rec.best.settings == one.best.settings
    assert rec.best.speed.decode_tok_per_s == one.best.speed.decode_tok_per_s


def test_a_remote_cpu_runs_at_cpu_speed_and_the_gpu_is_filled_first() -> None:
    # a 12 GB RTX 3060 and a 32 GB machine without a GPU (it lends its CPU and RAM): an 8B
    # Q4_K_M fits the 3060 alone, and the plan keeps it there rather than spread it by size
    spec = model_spec(catalog_header("llama-3.1-8b"))
    q4 = _quant(spec, "Q4_K_M")
    cpu_box = RpcHost(compose("32 GB"), "10.0.0.9:50052", "32 GB")
    gpu_box = RpcHost(compose("rtx-3060-12g"), "10.0.0.8:50052", "rtx-3060-12g")
    hw, _ = rpc_hardware(Hardware.cpu_only(16 * GIB), (gpu_box, cpu_box))
    assert hw.gpus[1].lent_cpu
    assert not hw.gpus[0].lent_cpu
    fast = predict_speed(
        q4.spec, Settings(n_ctx=4096, n_gpu_layers=ALL_LAYERS, tensor_split=(1.0, 0.0)), hw
    )
    slow = predict_speed(
        q4.spec, Settings(n_ctx=4096, n_gpu_layers=ALL_LAYERS, tensor_split=(0.0, 1.0)), hw
    )
    assert fast.decode_tok_per_s > 5 * slow.decode_tok_per_s  # CPU rates, not a GPU's
    local = Hardware.cpu_only(16 * GIB)
    rec = recommend(q4.spec, local, Goal("fastest", rpc_hosts=(gpu_box, cpu_box)), options=(q4,))
    assert rec.best is not None
    assert rec.rpc is not None
    assert [h.endpoint for h in rec.rpc.hosts] == ["10.0.0.8:50052"]
    assert rec.best.estimate.device("RPC0").n_layers == spec.n_layer_all


def test_slower_link_slows_the_split(llama70b_q4: QuantOption) -> None:
    local = compose("rtx-4090", default_host=HOST)
    fast = recommend(
        llama70b_q4.spec, local, Goal("fastest", rpc_hosts=_remotes()), options=(llama70b_q4,)
    )
    slow = recommend(
        llama70b_q4.spec,
        local,
        Goal("fastest", rpc_hosts=_remotes(), link=Link(0.1, 0.005)),
        options=(llama70b_q4,),
    )
    assert fast.best is not None
    assert slow.best is not None
    assert slow.best.speed.decode_tok_per_s < fast.best.speed.decode_tok_per_s
    assert slow.rpc is not None
    assert fast.rpc is not None
    assert slow.rpc.traffic == fast.rpc.traffic  # the same bytes, on a slower link
    # a tenth of the bandwidth and ten times the latency: ten times the network time
    assert slow.rpc.network_s_per_token == pytest.approx(10 * fast.rpc.network_s_per_token)


def test_rpc_host_checks() -> None:
    with pytest.raises(PlanError):
        RpcHost(compose("rtx-3090"), "no-port")
    with pytest.raises(PlanError):
        RpcHost(compose("rtx-3090"), "host:99999")
    with pytest.raises(PlanError, match="IPv6"):
        RpcHost(compose("rtx-3090"), "[fe80::1]:50052")
    with pytest.raises(PlanError, match="IPv6"):
        RpcHost(compose("rtx-3090"), "fe80::1:50052")
    h = RpcHost(compose("rtx-3090"), "a:50052")
    with pytest.raises(PlanError):
        Goal("fastest", rpc_hosts=(h, h))


def test_of_two_equal_machines_the_one_that_holds_it_all_is_used() -> None:
    # two machines without a GPU (the same CPU speed): 3 GiB and 16 GiB of RAM lent; the
    # 8B Q4_K_M (4.6 GiB + KV) fits the larger alone, so the plan does not split it
    spec = model_spec(catalog_header("llama-3.1-8b"))
    q4 = _quant(spec, "Q4_K_M")
    small = RpcHost(compose("3 GB"), "10.0.0.5:50052")
    large = RpcHost(compose("16 GB"), "10.0.0.6:50052")
    rec = recommend(
        q4.spec, Hardware.cpu_only(16 * GIB), Goal("fastest", rpc_hosts=(small, large)),
        options=(q4,),
    )  # fmt: skip
    assert rec.rpc is not None
    assert [h.endpoint for h in rec.rpc.hosts] == ["10.0.0.6:50052"]
    assert "Not used: 10.0.0.5:50052" in rec.why
