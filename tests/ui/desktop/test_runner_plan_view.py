"""The Memory view shows what the runner will do (issue 15): its own fitting of what the
user left unset, pinned by moving a slider, and the whole footprint in the bars."""

from __future__ import annotations

from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from app.hardware.devices import Device, Hardware
from app.planning.runner_plan import plan_runner
from tests.ui.desktop.test_main_window import GIB, make_window
from ui.desktop.main_window import MainWindow
from ui.desktop.memory.components import COMPONENTS
from ui.desktop.memory.words import device_tooltip

FLAGS = ("avx", "avx2", "f16c", "fma")


def _with_gpu(window: MainWindow, gpu_gib: float) -> None:
    gpu = int(gpu_gib * GIB)
    hw = Hardware(
        host=Device("CPU", "host", 32 * GIB, 32 * GIB, cpu_flags=FLAGS),
        gpus=(Device("CUDA0", "gpu", gpu, gpu),),
    )
    window.hardware.set_hardware(hw, f"Test: {gpu_gib} GiB GPU", "profile")


def test_the_runner_decides_what_was_left_unset(qtbot: QtBot, qsettings: QSettings) -> None:
    window = make_window(qtbot, qsettings)
    _with_gpu(window, 1.7)
    state = window.estimates.state
    assert state.plan is not None
    spec = window.estimates.spec
    assert spec is not None
    # the same plan as the core makes: llama-server's fit puts part of the layers on the GPU
    core = plan_runner(spec, "llama-server", state.hardware.hardware)
    assert state.plan.summary == core.summary
    assert state.estimate == core.estimate
    assert 0 < state.plan.gpu_layers < spec.n_layer + 1
    assert state.settings.n_gpu_layers == state.plan.gpu_layers  # what every tab reads
    panel = window.settings_panel
    assert panel.gpu_layers.value() == state.plan.gpu_layers
    assert panel.gpu_layers_label.text().endswith("chosen by llama-server")
    assert window.memory_panel.plan_label.text().startswith(core.summary)
    # moving the slider pins a value: fit leaves it as set
    panel.gpu_layers.setValue(2)
    state = window.estimates.state
    assert "n_gpu_layers" in state.pinned
    assert state.settings.n_gpu_layers == 2
    assert state.estimate is not None
    assert state.estimate.n_gpu_layers == 2
    # Reset gives it back to the runner
    panel.reset_button.click()
    assert window.estimates.state.pinned == frozenset()
    assert window.estimates.state.settings.n_gpu_layers == core.settings.n_gpu_layers


def test_the_bars_show_the_prompt_cache_and_checkpoints_as_growth(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    window = make_window(qtbot, qsettings)
    bars = window.memory_panel.bars
    est = bars.estimate
    assert est is not None
    host = est.devices[-1]
    assert host.prompt_cache_bytes == 8192 * 1024**2  # --cache-ram's default
    assert host.checkpoint_bytes > 0  # Gemma 3's sliding window: checkpoints per slot
    kinds = {COMPONENTS[i].field for i, _rect in bars._segments(len(est.devices) - 1, host)}
    assert {"prompt_cache_bytes", "checkpoint_bytes"} <= kinds
    tip = device_tooltip(host, window.estimates.state.margin_bytes)
    assert "Prompt cache (up to)" in tip
    assert "grows with use" in tip
    legend = [text for _kind, _color, text in bars._legend_items()]
    assert "Prompt cache (up to)" in legend
    # the growth is not in the load-time total and so not in the verdict's level
    assert host.total_bytes + host.growth_bytes > host.total_bytes
    window.estimates.set_options(cache_ram_mib=0, ctx_checkpoints=0)
    assert window.memory_panel.bars.estimate.devices[-1].growth_bytes == 0  # type: ignore[union-attr]


def test_compare_rows_follow_the_same_plan(qtbot: QtBot, qsettings: QSettings) -> None:
    """Compare's row for the open file shows what the Memory view shows (issue 15: the
    Compare tab picked 'the most GPU layers that fit' while the verdict ignored fitting)."""
    from app.planning.options import quant_options
    from app.predict.speed import SpeedFactors
    from ui.desktop.compare.rows import compare_table, runner_choice

    window = make_window(qtbot, qsettings)
    _with_gpu(window, 1.7)
    state = window.estimates.state
    spec = state.spec
    assert spec is not None
    assert state.estimate is not None
    (own,) = quant_options(spec, simulate=None, file_bytes=spec.weights_bytes)
    table = compare_table(
        spec, (own,), state.settings, state.hardware.hardware, SpeedFactors(), runner_choice(state)
    )
    (row,) = table.rows
    shown = {d.name: d.total_bytes for d in state.estimate.devices}
    assert {name: n for name, n, _cap in row.devices} == shown
