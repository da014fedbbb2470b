"""The Explain tab on the real demo model: the estimator's numbers, refreshed only when seen."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from app.hardware.devices import Hardware
from app.predict.estimate import estimate
from app.units import format_bytes
from tests.ui.desktop.test_main_window import TEST_HARDWARE, make_window
from ui.desktop.explain.panel import ExplainPanel
from ui.desktop.main_window import MainWindow
from ui.desktop.shared.speed import SpeedController

GIB = 1024**3


def _kv_text(panel: ExplainPanel) -> str:
    section = panel.section("kv")
    assert section is not None
    return " ".join(section.paragraphs)


def _show(qtbot: QtBot, window: MainWindow) -> ExplainPanel:
    window.tabs.setCurrentWidget(window.explain_panel)
    panel = window.explain_panel
    qtbot.waitUntil(lambda: not panel.dirty and panel.section("kv") is not None, timeout=15_000)
    return panel


def test_explain_tab_shows_the_estimators_numbers(qtbot: QtBot, qsettings: QSettings) -> None:
    window = make_window(qtbot, qsettings)
    titles = [window.tabs.tabText(i) for i in range(window.tabs.count())]
    assert "Explain" in titles
    panel = _show(qtbot, window)
    state = window.estimates.state
    assert state.model is not None
    expected = estimate(state.model.spec, state.settings, TEST_HARDWARE)
    cpu = expected.device("CPU")
    text = panel.text.toPlainText()
    assert format_bytes(cpu.kv_bytes, down_to="bytes") in text
    assert format_bytes(cpu.weights_bytes, down_to="bytes") in text
    assert "3.0 KiB" in text  # gemma-3-270m: KV per token at f16 in the 3 layers that grow
    assert "sliding window" in text.lower()
    assert panel.memory_bar.caption.startswith("Where the memory goes")
    assert "tokens/s" in panel.read_bar.caption
    assert panel.layers.describe().startswith("3 layers keep all")


def test_hidden_tab_costs_nothing_and_catches_up_when_shown(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    window = make_window(qtbot, qsettings)
    panel = _show(qtbot, window)
    before = _kv_text(panel)
    window.tabs.setCurrentWidget(window.memory_panel)
    count = panel.refresh_count
    slider = window.settings_panel.context.slider
    for position in (0, 5, 10, slider.maximum() // 3):
        slider.setValue(position)
    qtbot.wait(2 * ExplainPanel.DELAY_MS)
    assert panel.refresh_count == count, "a hidden tab must not rebuild on slider ticks"
    assert panel.dirty
    window.tabs.setCurrentWidget(panel)
    assert panel.refresh_count == count + 1
    after = _kv_text(panel)
    assert after != before
    state = window.estimates.state
    assert state.estimate is not None
    assert format_bytes(state.estimate.device("CPU").kv_bytes, down_to="bytes") in after


def test_visible_tab_refreshes_once_after_the_slider_rests(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    window = make_window(qtbot, qsettings)
    panel = _show(qtbot, window)
    count = panel.refresh_count
    slider = window.settings_panel.context.slider
    for position in range(5, 15):
        slider.setValue(position)
    assert panel.refresh_count == count  # debounced
    qtbot.waitUntil(lambda: panel.refresh_count == count + 1, timeout=15_000)
    state = window.estimates.state
    assert state.estimate is not None
    assert format_bytes(state.estimate.device("CPU").kv_bytes, down_to="bytes") in _kv_text(panel)


def test_settings_that_cannot_run_say_why(qtbot: QtBot, qsettings: QSettings) -> None:
    window = make_window(qtbot, qsettings)
    panel = _show(qtbot, window)
    s = window.settings_panel
    s.flash.setCurrentIndex(s.flash.findData("off"))
    s.cache_v.setCurrentIndex(s.cache_v.findData("q8_0"))
    qtbot.waitUntil(lambda: not panel.message.isHidden(), timeout=15_000)
    assert "cannot run" in panel.message.text()


def test_a_tied_embedding_held_twice_is_said_on_the_tab(qtbot: QtBot, qsettings: QSettings) -> None:
    """The demo Gemma on a machine with a GPU: the weights in memory are more than the
    file's, and the tab says why (the token embedding on the CPU, its copy on the GPU)."""
    window = make_window(qtbot, qsettings)
    panel = _show(qtbot, window)
    assert "loaded twice" not in panel.text.toPlainText()  # CPU only: one copy
    gpu = Hardware.with_gpus([8 * GIB], cpu_flags=TEST_HARDWARE.host.cpu_flags)
    window.hardware.set_hardware(gpu, "Test machine: one 8 GiB GPU", "profile")
    qtbot.waitUntil(lambda: "loaded twice" in panel.text.toPlainText(), timeout=15_000)
    state = window.estimates.state
    assert state.estimate is not None
    assert state.model is not None
    weights = sum(d.weights_bytes for d in state.estimate.devices)
    text = panel.text.toPlainText()
    assert format_bytes(weights, down_to="bytes") in text
    assert format_bytes(state.model.spec.weights_bytes, down_to="bytes") in text
    assert f"the GPU ({gpu.gpus[0].name})" in text
    # the new machine's users line is worked out after the slider-rest delays: let it end
    # here, not after this test's leak check (it ran into interpreter exit once)
    speed = window.memory_panel.speed
    qtbot.wait(2 * SpeedController.LINE_DELAY_MS)
    qtbot.waitUntil(lambda: not speed.users_busy, timeout=15_000)
