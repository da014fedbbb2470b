"""The rules of llama.cpp's fit (common/fit.cpp) that hold whatever the memory figures are.

The decisions themselves are checked against llama.cpp's own fitter in
tests/agreement/test_fit_grid.py; these are the refusals, the order of the steps and the
way the result is written, on catalog models (no file needed).
"""

from __future__ import annotations

import pytest

from app.errors import SettingsError
from app.hardware.devices import Device, Hardware
from app.model.catalog import catalog_header
from app.model.quant import simulate_quant
from app.model.spec import ModelSpec, model_spec
from app.planning.llama_fit import llama_fit
from app.predict.estimate import estimate
from app.settings import Settings, runner_defaults

GIB = 1024**3
MIB = 1024**2


def catalog_spec(name: str, quant: str = "Q4_K_M") -> ModelSpec:
    """Return a catalog model at ``quant`` (simulated: no file needed)."""
    return simulate_quant(model_spec(catalog_header(name)), quant).spec


@pytest.fixture(scope="module")
def dense() -> ModelSpec:
    return catalog_spec("llama-3.1-8b")


@pytest.fixture(scope="module")
def moe() -> ModelSpec:
    return catalog_spec("qwen3-30b-a3b")


def _server(**changes: object) -> Settings:
    return runner_defaults("llama-server").replace(**changes)


def test_nothing_changes_when_the_settings_fit_with_the_margin(dense: ModelSpec) -> None:
    fit = llama_fit(dense, _server(n_ctx=4096), Hardware.with_gpus([24 * GIB]))
    assert fit.status == "not_needed"
    assert fit.args == "-c 4096 -ngl -1"
    assert not fit.changed


def test_one_gpu_is_fitted_by_the_context_alone_when_it_can_be(dense: ModelSpec) -> None:
    # 8B Q4_K_M: 4.6 GiB of weights, 128k training context (16 GiB of f16 KV, one slot)
    settings = _server(n_ctx=0, n_parallel=1, kv_unified=False)
    fit = llama_fit(dense, settings, Hardware.with_gpus([12 * GIB]))
    assert fit.status == "fitted"
    assert fit.n_ctx_reduced_from == 131072
    assert 4096 < fit.n_ctx < 131072
    assert fit.n_ctx % 256 == 0
    assert fit.n_gpu_layers is None  # every layer stays on the GPU
    room = (
        12 * GIB
        - estimate(dense, fit.settings, Hardware.with_gpus([12 * GIB])).devices[0].total_bytes
    )
    assert room >= 1024 * MIB


def test_the_context_never_goes_below_fit_ctx_and_layers_move_instead(dense: ModelSpec) -> None:
    settings = _server(n_ctx=0, n_parallel=1, kv_unified=False)
    fit = llama_fit(dense, settings, Hardware.with_gpus([4 * GIB]))
    assert fit.n_ctx == 4096
    assert fit.n_gpu_layers is not None
    assert 0 < fit.n_gpu_layers < 33
    fit8k = llama_fit(dense, settings, Hardware.with_gpus([4 * GIB]), n_ctx_min=8192)
    assert fit8k.n_ctx == 8192
    assert fit8k.n_gpu_layers is not None
    assert fit8k.n_gpu_layers <= fit.n_gpu_layers


def test_a_context_the_user_set_is_kept(dense: ModelSpec) -> None:
    fit = llama_fit(
        dense, _server(n_ctx=32768), Hardware.with_gpus([6 * GIB]), pinned=frozenset({"n_ctx"})
    )
    assert fit.n_ctx == 32768
    assert fit.n_ctx_reduced_from is None
    assert "context set by the user (32768): unchanged" in fit.steps


def test_pinned_gpu_layers_stop_fit_after_the_context_step(dense: ModelSpec) -> None:
    # several devices: the context shrinks first, then fit gives up (the -ngl check comes
    # after step 2 in common_params_fit_impl), and llama.cpp keeps the smaller context
    settings = _server(n_ctx=0, n_parallel=1, kv_unified=False, n_gpu_layers=20)
    fit = llama_fit(
        dense, settings, Hardware.with_gpus([2 * GIB, 2 * GIB]), pinned=frozenset({"n_gpu_layers"})
    )
    assert fit.status == "failed"
    assert "n_gpu_layers already set by user to 20" in fit.message
    assert fit.settings.n_ctx == 4096
    assert fit.settings.n_gpu_layers == 20


@pytest.mark.parametrize(
    ("changes", "pinned", "why"),
    [
        ({"tensor_split": (1.0, 1.0)}, {"tensor_split"}, "tensor_split already set by user"),
        (
            {"tensor_overrides": ((r"blk\.0\.ffn_up.*", "CPU"),)},
            {"tensor_overrides"},
            "tensor_buft_overrides already set by user",
        ),
        ({"n_cpu_moe": 4}, {"n_cpu_moe"}, "tensor_buft_overrides already set by user"),
    ],
)
def test_what_the_user_placed_stops_fit(
    dense: ModelSpec, changes: dict[str, object], pinned: set[str], why: str
) -> None:
    settings = _server(n_ctx=8192, **changes)
    fit = llama_fit(
        dense,
        settings,
        Hardware.with_gpus([2 * GIB, 2 * GIB]),
        pinned=frozenset({"n_ctx", *pinned}),
    )
    assert fit.status == "failed"
    assert why in fit.message


def test_without_a_gpu_only_the_context_can_shrink(dense: ModelSpec) -> None:
    settings = _server(n_ctx=0, n_parallel=1, kv_unified=False)
    fit = llama_fit(dense, settings, Hardware.cpu_only(16 * GIB))
    assert fit.status == "fitted"
    assert fit.n_ctx < 131072
    tiny = llama_fit(dense, settings, Hardware.cpu_only(4 * GIB))
    assert tiny.status == "failed"
    assert "unable to fit model into system memory" in tiny.message


def test_an_unknown_capacity_is_an_error_not_a_guess(dense: ModelSpec) -> None:
    hw = Hardware(host=Device("CPU", "host", 16 * GIB), gpus=(Device("CUDA0", "gpu"),))
    fit = llama_fit(dense, _server(n_ctx=4096), hw)
    assert fit.status == "error"
    assert "CUDA0" in fit.message


def test_layers_fill_back_to_front_and_the_split_is_layers_per_device(dense: ModelSpec) -> None:
    fit = llama_fit(
        dense,
        _server(n_ctx=4096),
        Hardware.with_gpus([2 * GIB, 3 * GIB]),
        pinned=frozenset({"n_ctx"}),
    )
    assert fit.status == "fitted"
    assert sum(fit.tensor_split) == fit.n_gpu_layers
    assert fit.tensor_split[1] > fit.tensor_split[0]  # the last device is filled first
    assert fit.steps[-2].startswith("CUDA1")  # …and reported first
    assert "-ts " in fit.args


def test_moe_experts_go_to_the_cpu_as_overrides(moe: ModelSpec) -> None:
    fit = llama_fit(
        moe, _server(n_ctx=4096), Hardware.with_gpus([8 * GIB]), pinned=frozenset({"n_ctx"})
    )
    assert fit.status == "fitted"
    assert fit.n_gpu_layers == moe.n_layer + 1  # every layer, some without their experts
    patterns = [p for p, _ in fit.overrides]
    assert patterns, fit.steps
    assert all(b == "CPU" for _, b in fit.overrides)
    assert any(p.endswith(r"ffn_(up|down|gate_up|gate)_(ch|)exps") for p in patterns)
    # the first partial layer may keep part of its FFN: UP, GATE or ATTN overflow
    assert patterns[0].split("ffn_")[1] in (
        "(up|down|gate_up|gate)_(ch|)exps",
        "(gate|gate_up|down).*",
        "down.*",
        "(gate|up|gate_up|down).*",
    )
    assert '-ot "' in fit.args


def test_a_tensor_override_moves_weights_and_names_only_known_devices(dense: ModelSpec) -> None:
    hw = Hardware.with_gpus([24 * GIB])
    base = estimate(dense, _server(n_ctx=4096), hw)
    moved = estimate(
        dense, _server(n_ctx=4096, tensor_overrides=((r"blk\.[0-9]\.ffn_.*", "CPU"),)), hw
    )
    ffn = sum(
        t.n_bytes
        for t in dense.tensors
        if t.layer is not None and t.layer < 10 and t.name.split(".")[2].startswith("ffn_")
    )
    assert base.devices[0].weights_bytes - moved.devices[0].weights_bytes == ffn
    assert moved.devices[0].kv_bytes == base.devices[0].kv_bytes  # KV stays with the layer
    with pytest.raises(SettingsError, match="no device 'CUDA7'"):
        estimate(dense, _server(n_ctx=4096, tensor_overrides=(("blk", "CUDA7"),)), hw)
    with pytest.raises(SettingsError, match="not a regex"):
        Settings(tensor_overrides=(("blk(", "CPU"),))
