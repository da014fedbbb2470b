"""Issue 18, "remembering and acting": what the user set for a model (runner preset, quant
level, the sliders, llama-server's prompt cache and checkpoints) and the hardware planned
for survive a restart; each model keeps its own; a kept value that no longer reads is
dropped without a word.

Two real windows on one settings file, as two runs of the app are.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from app.hardware.devices import Hardware, planned_hardware
from app.planning.runner_plan import DEFAULT_CACHE_RAM_MIB
from tests.ui.desktop.test_main_window import LOAD_TIMEOUT_MS, make_window
from tests.ui.desktop.test_quant_selector import wait_for_levels
from ui.desktop.main_window import MainWindow
from ui.desktop.settings.remembered import HARDWARE_KEY, hardware_from_json, model_key

GIB = 1024**3
MIB = 1024**2
RTX_3060 = planned_hardware(Hardware.cpu_only(32 * GIB), gpu_bytes=[11 * GIB])
OTHER_MODEL = "catalog:qwen3-8b"


def restart(qtbot: QtBot, qsettings: QSettings, *, open_demo: bool = True) -> MainWindow:
    """Start the app again on the same settings file (no hardware forced on it)."""
    machines = Path(qsettings.fileName()).with_name("rpc_machines.json")
    window = MainWindow(qsettings, detect_hardware=False, machines_file=machines)
    qtbot.addWidget(window)
    window.show()
    if open_demo:
        with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
            window.models.open_demo()
    return window


def test_a_models_settings_and_the_hardware_plan_survive_a_restart(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    first = make_window(qtbot, qsettings)
    wait_for_levels(qtbot, first)
    first.hardware.set_hardware(RTX_3060, "Profile RTX 3060 12 GB", "profile")
    est = first.estimates
    first.settings_panel.runner_combo.setCurrentIndex(
        first.settings_panel.runner_combo.findData("llama-server")
    )
    est.update(n_ctx=8192, cache_type_k="q8_0", flash_attn="on", n_parallel=2, n_batch=1024)
    first.settings_panel.cache_ram.setValue(2048)
    first.settings_panel.checkpoints.setValue(4)
    levels = [c.name for c in est.quant_choices() if c.name != est.own_quant()]
    assert levels, "the demo model simulates other levels"
    est.set_quant(levels[0])
    kept = (est.settings, est.pinned, est.runner, est.options, est.quant)
    first.close()

    second = restart(qtbot, qsettings)
    assert second.hardware.choice.hardware == RTX_3060
    assert second.hardware.choice.label == "Profile RTX 3060 12 GB"
    assert second.settings_panel.profile.isChecked()
    again = second.estimates
    assert (again.settings, again.pinned, again.runner, again.options, again.quant) == kept
    assert again.options.cache_ram_mib == 2048
    panel = second.settings_panel
    assert panel.context.spin.value() == 8192
    assert panel.cache_k.currentData() == "q8_0"
    assert panel.parallel.value() == 2
    assert panel.cache_ram.value() == 2048
    assert panel.checkpoints.value() == 4
    wait_for_levels(qtbot, second)  # the combo lists the levels once they are worked out
    assert panel.quant_combo.currentData() == levels[0]


def test_each_model_keeps_its_own_settings(qtbot: QtBot, qsettings: QSettings) -> None:
    first = make_window(qtbot, qsettings)
    first.estimates.update(n_ctx=4096)
    with qtbot.waitSignal(first.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        first.models.open_path(OTHER_MODEL)
    first.estimates.update(n_ctx=32768)
    first.close()

    second = restart(qtbot, qsettings)
    assert second.estimates.settings.n_ctx == 4096
    with qtbot.waitSignal(second.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        second.models.open_path(OTHER_MODEL)
    assert second.estimates.settings.n_ctx == 32768
    assert "n_ctx" in second.estimates.pinned


def test_what_no_longer_reads_is_dropped(qtbot: QtBot, qsettings: QSettings) -> None:
    first = make_window(qtbot, qsettings)
    model = first.estimates.model
    assert model is not None
    first.close()
    qsettings.setValue(model_key(model.path), '{"runner": "llama-server", "pinned": [1, 2')
    qsettings.setValue(HARDWARE_KEY, "not json")
    assert hardware_from_json("not json") is None
    second = restart(qtbot, qsettings)
    assert second.estimates.model is not None
    assert second.banner.isHidden()
    assert second.hardware.choice.source == "local"


def test_the_prompt_cache_and_checkpoints_are_llama_servers_and_in_the_estimate(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    window = make_window(qtbot, qsettings)
    panel, est = window.settings_panel, window.estimates
    panel.runner_combo.setCurrentIndex(panel.runner_combo.findData("llama-server"))
    assert panel.cache_ram.isEnabled()
    assert panel.cache_ram.value() == DEFAULT_CACHE_RAM_MIB
    assert panel.cache_ram.suffix() == " MiB"

    def prompt_cache() -> int:
        estimate = est.state.estimate
        assert estimate is not None
        return sum(d.prompt_cache_bytes for d in estimate.devices)

    panel.cache_ram.setValue(0)
    assert est.options.cache_ram_mib == 0
    assert prompt_cache() == 0
    panel.cache_ram.setValue(1)
    assert 0 < prompt_cache() <= 1 * MIB
    panel.runner_combo.setCurrentIndex(panel.runner_combo.findData("llama-cpp-python"))
    assert not panel.cache_ram.isEnabled()
    assert not panel.checkpoints.isEnabled()
    assert est.options.cache_ram_mib is None
    assert prompt_cache() == 0  # Llama() keeps no prompt cache


def test_the_export_carries_the_prompt_cache_and_checkpoints_set(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    window = make_window(qtbot, qsettings)
    panel = window.settings_panel
    panel.runner_combo.setCurrentIndex(panel.runner_combo.findData("llama-server"))
    window.tabs.setCurrentWidget(window.export_panel)
    command = window.export_panel.preview.toPlainText()
    assert "-cram" not in command  # llama-server's defaults need no flag
    panel.cache_ram.setValue(2048)
    panel.checkpoints.setValue(4)
    qtbot.waitUntil(lambda: "-cram 2048" in window.export_panel.preview.toPlainText())
    assert "-ctxcp 4" in window.export_panel.preview.toPlainText()
