"""Each runner's own choices, as their sources state them (app/planning/runner_plan.py).

The citations are in the module; each test names the rule it checks. Memory figures come
from the estimate (checked against the engine in tests/agreement/), the fit's steps from
common/fit.cpp (checked against llama-fit-params in tests/agreement/test_fit_grid.py).
"""

from __future__ import annotations

import pytest

from app.hardware.devices import Device, Hardware
from app.model.projector import Projector
from app.model.spec import ModelSpec
from app.planning.runner_plan import (
    DEFAULT_CACHE_RAM_MIB,
    RunnerOptions,
    checkpoint_bytes_each,
    ollama_auto_batch,
    ollama_default_num_ctx,
    plan_runner,
)
from app.predict.verdict import verdict
from app.settings import Settings
from tests.app.test_llama_fit import catalog_spec

GIB = 1024**3
MIB = 1024**2


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    return catalog_spec("llama-3.1-8b")


@pytest.fixture(scope="module")
def gemma27b_q8() -> ModelSpec:
    return catalog_spec("gemma-3-27b", "Q8_0")


def _machine(gpu_gib: float, ram_gib: float) -> Hardware:
    ram = int(ram_gib * GIB)
    gpu = int(gpu_gib * GIB)
    return Hardware(host=Device("CPU", "host", ram, ram), gpus=(Device("CUDA0", "gpu", gpu, gpu),))


@pytest.mark.parametrize(
    ("gpus", "num_ctx"),
    [
        ((), 4096),
        ((12,), 4096),
        ((22.9,), 4096),
        ((24,), 32768),
        ((24, 24), 262144),
        ((46,), 32768),
    ],
)
def test_ollama_default_context_by_vram(gpus: tuple[float, ...], num_ctx: int) -> None:
    # server/routes.go: >= 47 GiB -> 262144, >= 23 GiB -> 32768, else 4096
    hw = Hardware.with_gpus([int(g * GIB) for g in gpus], ram_bytes=64 * GIB)
    assert ollama_default_num_ctx(hw) == num_ctx


def test_ollama_gpu_overhead_lowers_the_tier() -> None:
    hw = Hardware.with_gpus([24 * GIB])
    assert ollama_default_num_ctx(hw, overhead_bytes=2 * GIB) == 4096


def test_ollama_runs_llama_server_with_c_times_np_and_no_unified_cache(llama8b: ModelSpec) -> None:
    plan = plan_runner(
        llama8b, "ollama", _machine(24, 64), given={"n_ctx": 8192 * 2, "n_parallel": 2}
    )
    s = plan.settings
    assert (s.n_ctx, s.n_parallel, s.kv_unified, s.swa_full) == (16384, 2, False, False)
    assert s.n_batch == s.n_ubatch  # num_batch is both -b and -ub
    assert s.cache_type_k == s.cache_type_v


def test_ollama_caps_num_ctx_at_the_training_context() -> None:
    spec = catalog_spec("gemma-3-270m")  # 32768 tokens of training context
    plan = plan_runner(spec, "ollama", _machine(48, 64))  # the 262144 tier
    assert plan.settings.n_ctx == spec.n_ctx_train
    assert any("caps num_ctx" in n for n in plan.notes)


def test_ollama_num_parallel_defaults_to_one(llama8b: ModelSpec) -> None:
    plan = plan_runner(llama8b, "ollama", _machine(24, 64))
    assert plan.settings.n_parallel == 1
    assert plan.settings.n_ctx == 32768


def test_ollama_num_gpu_unset_leaves_the_layers_to_llama_server_fit(llama8b: ModelSpec) -> None:
    plan = plan_runner(llama8b, "ollama", _machine(4, 64))  # 4096 tier
    assert plan.fit is not None
    assert plan.fit.status == "fitted"
    assert "n_gpu_layers" in plan.decided
    pinned = plan_runner(llama8b, "ollama", _machine(4, 64), given={"n_gpu_layers": 33})
    assert pinned.fit is not None
    assert pinned.fit.status in ("failed", "not_needed")
    assert pinned.settings.n_gpu_layers == 33


def test_ollama_automatic_batch_follows_the_context(llama8b: ModelSpec) -> None:
    # server/sched.go generationBatchForContext: > 32768 -> 2048, > 4096 -> 1024, else 512
    cpu = Hardware.cpu_only(64 * GIB)  # no GPU memory to check: the context decides
    assert ollama_auto_batch(llama8b, cpu, 4096, flash_off=False) == 512
    assert ollama_auto_batch(llama8b, cpu, 8192, flash_off=False) == 1024
    assert ollama_auto_batch(llama8b, cpu, 65536, flash_off=False) == 2048
    # a GPU the predicted VRAM nearly fills keeps the default
    assert ollama_auto_batch(llama8b, Hardware.with_gpus([6 * GIB]), 65536, False) == 512


def test_ollama_turns_mmap_off_without_a_gpu(llama8b: ModelSpec) -> None:
    # server/sched.go disableMmapDefaultReason: "cpu"
    plan = plan_runner(llama8b, "ollama", Hardware.cpu_only(64 * GIB))
    assert plan.settings.use_mmap is False
    assert plan_runner(llama8b, "ollama", _machine(24, 64)).settings.use_mmap is True


def test_ollama_pads_the_fit_target_by_the_projector(llama8b: ModelSpec) -> None:
    projector = Projector("mmproj.gguf", 800 * MIB, 100 * MIB, "next to the model")
    plan = plan_runner(llama8b, "ollama", _machine(24, 64), projector=projector)
    # extraEnvsForStart: ceil((projector weights + 1 GiB) / MiB)
    assert plan.margins_mib == (800 + 1024,)
    assert plan.fit_env == (("LLAMA_ARG_FIT_TARGET", "1824"),)
    assert plan.projector_on_gpu
    assert plan.estimate.devices[0].projector_bytes == 900 * MIB
    # a partial num_gpu keeps the projector on the CPU (shouldDisableMMProjOffload)
    partial = plan_runner(
        llama8b, "ollama", _machine(24, 64), given={"n_gpu_layers": 10}, projector=projector
    )
    assert not partial.projector_on_gpu
    assert partial.estimate.devices[-1].projector_bytes == 900 * MIB


def test_ollama_retries_a_load_that_runs_out_of_memory_at_a_lower_context() -> None:
    # 4 x 12 GiB: the 262144 tier, capped at the 70B's 131072; at that context fit leaves
    # more layers to the host than its 16 GiB hold, so Ollama's one retry at 32768
    # (server/sched.go reduceAutoNumCtxForLoadOOM) is what runs
    spec = catalog_spec("llama-3.1-70b")
    plan = plan_runner(spec, "ollama", Hardware.with_gpus([12 * GIB] * 4, ram_bytes=16 * GIB))
    assert plan.settings.n_ctx == 32768
    assert any("retries once at 32768" in n for n in plan.notes)
    # 69, not 70: with 11 layers on the host, CUDA takes their matmuls of a 512-token batch
    # (op_offload) and copies the weights into CUDA0's compute buffer (412 vs 232 MiB);
    # on four RPC devices of the same size llama-fit-params and the estimate both say 70
    assert plan.summary.startswith("Ollama would put 69 of 80 layers + output on 4 GPUs")
    roomy = plan_runner(spec, "ollama", Hardware.with_gpus([12 * GIB] * 4, ram_bytes=64 * GIB))
    assert roomy.settings.n_ctx == 131072


def test_llama_server_np_auto_is_four_slots_unified_and_explicit_np_splits(
    llama8b: ModelSpec,
) -> None:
    auto = plan_runner(llama8b, "llama-server", _machine(24, 64))
    assert (auto.settings.n_parallel, auto.settings.kv_unified) == (4, True)
    explicit = plan_runner(
        llama8b, "llama-server", _machine(24, 64), given={"n_parallel": 4, "n_ctx": 16384}
    )
    assert explicit.settings.kv_unified is False
    assert explicit.estimate.context.n_ctx_seq == 4096


def test_llama_server_shrinks_an_unset_context_to_fit(llama8b: ModelSpec) -> None:
    plan = plan_runner(llama8b, "llama-server", _machine(12, 64))
    assert plan.fit is not None
    assert plan.fit.n_ctx_reduced_from == 131072
    assert "n_ctx" in plan.decided
    assert "--fit shrinks the context" in " ".join(plan.details)
    assert verdict(plan.estimate).level == "fits"


def test_llama_server_fit_off_runs_the_settings_as_given(llama8b: ModelSpec) -> None:
    plan = plan_runner(llama8b, "llama-server", _machine(12, 64), options=RunnerOptions(fit=False))
    assert plan.fit is None
    assert plan.settings.n_ctx == 131072
    assert verdict(plan.estimate).level == "does_not_fit"


def test_lmstudio_keeps_its_context_and_fits_the_layers(llama8b: ModelSpec) -> None:
    plan = plan_runner(llama8b, "lmstudio", _machine(4, 64))
    s = plan.settings
    assert (s.n_ctx, s.n_parallel, s.kv_unified, s.flash_attn) == (4096, 4, True, "off")
    assert plan.fit is not None
    assert plan.fit.n_ctx_reduced_from is None
    assert s.n_gpu_layers < llama8b.n_layer + 1
    assert any("autoFit" in n for n in plan.notes)


def test_llama_cpp_python_has_no_fit_and_no_prompt_cache(llama8b: ModelSpec) -> None:
    plan = plan_runner(llama8b, "llama-cpp-python", _machine(24, 64))
    assert plan.fit is None
    assert plan.settings == Settings(n_ctx=512, n_batch=512, n_ubatch=512, flash_attn="off")
    assert plan.estimate.devices[-1].growth_bytes == 0


def test_the_prompt_cache_is_host_memory_up_to_cache_ram(llama8b: ModelSpec) -> None:
    plan = plan_runner(llama8b, "llama-server", _machine(24, 64))
    host = plan.estimate.devices[-1]
    assert host.prompt_cache_bytes == DEFAULT_CACHE_RAM_MIB * MIB
    assert host.checkpoint_bytes == 0  # full attention rolls back: no checkpoints
    assert host.total_bytes < host.total_bytes + host.growth_bytes  # growth is apart
    off = plan_runner(
        llama8b, "llama-server", _machine(24, 64), options=RunnerOptions(cache_ram_mib=0)
    )
    assert off.estimate.devices[-1].prompt_cache_bytes == 0


def test_checkpoints_hold_the_sliding_window_of_each_slot(gemma27b_q8: ModelSpec) -> None:
    s = Settings(n_ctx=32768, swa_full=False, n_parallel=1, n_ubatch=512)
    each = checkpoint_bytes_each(gemma27b_q8, s)
    swa_layers = sum(gemma27b_q8.is_swa[: gemma27b_q8.n_layer])
    kv_row = 2 * 2 * gemma27b_q8.n_embd_k_gqa(0)  # K + V, f16
    assert each == swa_layers * kv_row * (gemma27b_q8.n_swa + 512)
    assert checkpoint_bytes_each(gemma27b_q8, s.replace(swa_full=True)) == 0
    plan = plan_runner(gemma27b_q8, "ollama", _machine(24, 23.5))
    assert plan.estimate.devices[-1].checkpoint_bytes == 32 * each


def test_gemma3_27b_q8_in_ollama_on_one_24_gib_gpu(gemma27b_q8: ModelSpec) -> None:
    """The review's case: ggtune said 'Does not fit: 6.4 GiB over on CUDA0' with all 63
    layers on the GPU; Ollama lets llama-server's fit place about 47 and runs."""
    plan = plan_runner(gemma27b_q8, "ollama", _machine(24, 23.5))
    assert plan.settings.n_ctx == 32768  # the 24 GiB tier
    assert plan.fit is not None
    assert plan.fit.status == "fitted"
    assert 44 <= plan.gpu_layers <= 48
    on = plan.gpu_layers - 1  # -ngl counts the output layer too
    assert plan.summary.startswith(f"Ollama would put {on} of 62 layers + output on CUDA0")
    assert "32k context" in plan.summary
    v = verdict(plan.estimate)
    assert v.level == "spills"
