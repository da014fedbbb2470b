"""The Settings panel's Quantization combo on the real demo model: the open file's own
quant, then every level app.model.quant simulates; the estimate (and so the memory view) follows,
Recommend's Apply selects a simulated plan's level, and another model resets to the file."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.qtbot import QtBot

from app.model.quant import QuantResult, simulate_all, simulate_quant
from app.model.spec import ModelSpec
from app.planning.options import own_quant_name
from app.predict.estimate import estimate
from app.units import format_bytes
from tests.ui.desktop.test_main_window import LOAD_TIMEOUT_MS, TEST_HARDWARE, held_only, make_window
from ui.desktop.main_window import MainWindow
from ui.desktop.memory.components import COMPONENTS
from ui.desktop.recommend.rows import GoalForm
from ui.desktop.settings.panel import FILE_QUANT

PLAN_TIMEOUT_MS = 30_000
WEIGHTS_ROW = [c.field for c in COMPONENTS].index("weights_bytes")


def wait_for_levels(qtbot: QtBot, window: MainWindow) -> None:
    """Wait until the levels worked out on the job pool are in the combo."""
    qtbot.waitUntil(
        lambda: (
            not window.estimates.quant_choices_pending
            and window.settings_panel.quant_combo.count() > 1
        ),
        timeout=PLAN_TIMEOUT_MS,
    )


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    w = make_window(qtbot, qsettings)
    wait_for_levels(qtbot, w)
    return w


def test_levels_are_worked_out_off_the_gui_thread(qtbot: QtBot, qsettings: QSettings) -> None:
    w = make_window(qtbot, qsettings, open_demo=False)
    combo = w.settings_panel.quant_combo
    with qtbot.waitSignal(w.estimates.quant_choices_changed, timeout=PLAN_TIMEOUT_MS) as got:
        with qtbot.waitSignal(w.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
            w.models.open_demo()
        # the model is on screen before its levels: only the file, and a tooltip saying so
        assert w.estimates.quant_choices_pending
        assert combo.count() == 1
        assert combo.toolTip().startswith("Working out the other quant levels")
    choices = got.args[0]
    model = w.estimates.model
    assert model is not None
    own = own_quant_name(model.spec)
    assert [c.name for c in choices] == [
        r.file_type.name
        for r in simulate_all(model.spec)
        if isinstance(r, QuantResult) and r.file_type.name != own
    ]
    assert combo.count() == 1 + len(choices)
    assert not w.estimates.quant_choices_pending
    assert not combo.toolTip().startswith("Working out")


def select(window: MainWindow, quant: str) -> None:
    combo = window.settings_panel.quant_combo
    index = combo.findData(quant)
    assert index >= 0, f"{quant} is not offered"
    combo.setCurrentIndex(index)


def shown_weights(window: MainWindow) -> int:
    value = window.memory_panel.table_model.index(WEIGHTS_ROW, 0).data(Qt.ItemDataRole.UserRole)
    assert isinstance(value, int)
    return value


def test_combo_offers_the_file_then_every_simulated_level(window: MainWindow) -> None:
    model = window.estimates.model
    assert model is not None
    combo = window.settings_panel.quant_combo
    own = own_quant_name(model.spec)
    assert own == "Q4_K_M"
    assert combo.isEnabled()
    assert combo.itemText(0) == "Q4_K_M — this file"
    assert combo.itemData(0) == FILE_QUANT
    expected = [
        r
        for r in simulate_all(model.spec)
        if isinstance(r, QuantResult) and r.file_type.name != own
    ]
    assert combo.count() == 1 + len(expected)
    for i, r in enumerate(expected, start=1):
        assert combo.itemData(i) == r.file_type.name
        extra = ", needs an imatrix" if r.needs_imatrix else ""
        size = format_bytes(r.spec.weights_bytes)  # each level says its size (issue 18)
        assert combo.itemText(i) == f"{r.file_type.name} — simulated, {size}{extra}"
    assert any("needs an imatrix" in combo.itemText(i) for i in range(combo.count()))
    assert window.estimates.state.quant is None
    assert window.estimates.state.spec is model.spec


def test_selecting_q8_0_estimates_the_simulated_file_and_back(
    window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = window.estimates.model
    assert model is not None
    file_weights = shown_weights(window)
    settings = window.estimates.settings
    simulated = simulate_quant(model.spec, "Q8_0").spec
    expected = estimate(simulated, settings, TEST_HARDWARE)

    select(window, "Q8_0")
    state = window.estimates.state
    assert state.quant == "Q8_0"
    assert state.model is model  # the loaded file stays the model
    assert state.spec == simulated
    assert held_only(state.estimate) == expected
    assert held_only(window.memory_panel.bars.estimate) == expected
    assert shown_weights(window) == expected.device("CPU").weights_bytes
    assert shown_weights(window) > file_weights
    assert state.verdict is not None
    assert window.memory_panel.verdict_label.text() == state.verdict.headline

    # slider ticks keep the simulated spec, and do not simulate again
    calls: list[str] = []

    def counting(spec: ModelSpec, quant: str, **kw: bool) -> QuantResult:
        calls.append(quant)
        return simulate_quant(spec, quant, **kw)

    monkeypatch.setattr("ui.desktop.shared.estimate_controller.simulate_quant", counting)
    slider = window.settings_panel.context.slider
    slider.setValue(slider.maximum() // 2)
    slider.setValue(3)
    select(window, FILE_QUANT)
    select(window, "Q8_0")
    assert calls == []
    s = window.estimates.settings
    assert held_only(window.estimates.state.estimate) == estimate(simulated, s, TEST_HARDWARE)

    select(window, FILE_QUANT)
    state = window.estimates.state
    assert state.quant is None
    assert state.spec is model.spec
    assert held_only(state.estimate) == estimate(model.spec, s, TEST_HARDWARE)
    assert state.estimate is not None
    assert shown_weights(window) == state.estimate.device("CPU").weights_bytes


def test_apply_of_a_simulated_plan_selects_its_level(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: not window.recommender.busy, timeout=PLAN_TIMEOUT_MS)
    panel = window.recommend_panel
    panel.set_form(GoalForm("best-quality", ctx=4096))
    with qtbot.waitSignal(window.recommender.finished, timeout=PLAN_TIMEOUT_MS) as done:
        panel.run_button.click()
    best = done.args[0].recommendation.best
    assert best is not None
    assert not best.quant.on_disk  # F16 beats the open Q4_K_M on quality
    model = window.estimates.model
    assert model is not None

    with qtbot.waitSignal(window.estimates.quant_changed, timeout=15_000):
        panel.apply_button.click()
    combo = window.settings_panel.quant_combo
    assert combo.currentData() == best.quant.name
    state = window.estimates.state
    assert state.quant == best.quant.name
    assert held_only(state.estimate) == estimate(best.quant.spec, state.settings, TEST_HARDWARE)
    note = panel.apply_label.text()
    assert best.quant.name in note
    assert "download" in note
    assert "llama-quantize" in note


def test_opening_another_model_resets_to_this_file(
    qtbot: QtBot, window: MainWindow, smollm_path: Path
) -> None:
    select(window, "Q8_0")
    assert window.estimates.quant == "Q8_0"
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(str(smollm_path))
    wait_for_levels(qtbot, window)
    model = window.estimates.model
    assert model is not None
    assert model.spec.path == str(smollm_path)
    combo = window.settings_panel.quant_combo
    assert combo.currentIndex() == 0
    assert combo.itemText(0) == f"{own_quant_name(model.spec)} — this file"
    assert combo.findData("Q8_0") > 0
    state = window.estimates.state
    assert state.quant is None
    assert state.spec is model.spec
    assert held_only(state.estimate) == estimate(model.spec, state.settings, TEST_HARDWARE)
