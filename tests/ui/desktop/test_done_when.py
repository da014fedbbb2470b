"""Issue 18, "Done when": the two questions a new user brings, asked through the screens as
a user asks them, and every number the screens show held against the core's own answer for
the same model, settings and hardware (:func:`app.planning.runner_plan.plan_runner`, the
verdict, the compare rows).

1. "Will Qwen3-8B Q4_K_M at 32k fit on my RTX 3060 12 GB + 32 GB, and how fast?"
2. "Which quant of Gemma 3 27B for 16k on a 24 GB GPU?"
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.qtbot import QtBot

from app.hardware.profiles import compose
from app.planning.runner_plan import plan_runner
from app.predict.speed import predict_speed
from app.predict.verdict import verdict
from app.units import format_bytes, format_tps, speed_depth
from tests.ui.desktop.test_compare import wait_for_rows
from tests.ui.desktop.test_main_window import LOAD_TIMEOUT_MS, make_window
from tests.ui.desktop.test_quant_selector import wait_for_levels
from ui.desktop.main_window import MainWindow
from ui.desktop.shared.estimate_controller import simulate_level
from ui.desktop.shared.speed import SPEED_PROMPT_TOKENS

GIB = 1024**3
TIMEOUT_MS = 30_000


def open_model(qtbot: QtBot, window: MainWindow, path: str) -> None:
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(path)
    wait_for_levels(qtbot, window)


def choose_quant(window: MainWindow, quant: str) -> None:
    combo = window.settings_panel.quant_combo
    index = combo.findData(quant)
    assert index >= 0, f"{quant} is not offered"
    combo.setCurrentIndex(index)


def core_plan(window: MainWindow) -> object:
    """The core's plan for what the screens were asked, worked out apart."""
    est = window.estimates
    model = est.model
    assert model is not None
    spec = model.spec if est.quant is None else simulate_level(model.spec, est.quant).spec
    requested = est.state.requested
    assert requested is not None
    return plan_runner(
        spec,
        est.runner,
        window.hardware.choice.hardware,
        given={f: getattr(requested, f) for f in est.pinned},
        options=est.options,
    )


def test_qwen3_8b_q4_k_m_at_32k_on_an_rtx_3060_and_32_gb(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    window = make_window(qtbot, qsettings, open_demo=False)
    # the Hardware tab: the card by its name, as the user says it
    window.tabs.setCurrentWidget(window.hardware_panel)
    hw_panel = window.hardware_panel
    qtbot.waitUntil(lambda: len(hw_panel.profile_model.rows) > 10, timeout=TIMEOUT_MS)
    hw_panel.composition.setText("RTX 3060 + 32 GB")
    assert hw_panel.plan_composition_button.isEnabled(), hw_panel.composition_feedback.text()
    hw_panel.plan_composition_button.click()
    hardware = window.hardware.choice.hardware
    assert hardware == compose("rtx-3060-12g + 32 GB", default_host=None)
    assert "usable of 12.0 GiB" in window.settings_panel.profile_label.text()

    open_model(qtbot, window, "catalog:qwen3-8b")
    choose_quant(window, "Q4_K_M")
    window.settings_panel.context.spin.setValue(32768)
    state = window.estimates.state
    assert state.settings.n_ctx == 32768
    plan = core_plan(window)
    assert state.estimate == plan.estimate  # type: ignore[attr-defined]
    judged = verdict(plan.estimate, margin_bytes=state.margin_bytes)  # type: ignore[attr-defined]
    assert state.verdict == judged

    # Memory: the verdict and the speed, as the core says them
    memory = window.memory_panel
    assert memory.verdict_label.text().startswith(judged.headline)
    speed = memory.speed
    runs = plan.settings  # type: ignore[attr-defined]
    expected = predict_speed(
        window.estimates.spec,  # type: ignore[arg-type]
        runs,
        hardware,
        depth=speed_depth(runs.n_ctx, runs.n_parallel),
        n_prompt=SPEED_PROMPT_TOKENS,
        factors=speed.factors,
    )
    qtbot.waitUntil(lambda: speed.summary.prediction == expected, timeout=TIMEOUT_MS)
    line = memory.speed_label.text()
    writing = expected.decode_tok_per_s
    assert format_tps(writing) in line, line
    assert judged.level in ("fits", "tight"), judged.headline
    assert re.search(r"\d+(\.\d+)? tok/s", line), line

    # Settings and the card: the same layers, the quant chosen
    n = plan.settings.n_gpu_layers  # type: ignore[attr-defined]
    label = window.settings_panel.gpu_layers_label.text()
    assert label.startswith("all 36 layers + output") or "of 36 layers" in label, label
    assert n != 0
    weights = window.models_panel.card_form
    texts = [
        weights.itemAt(r, weights.ItemRole.FieldRole).widget().text()  # type: ignore[union-attr]
        for r in range(weights.rowCount())
        if weights.itemAt(r, weights.ItemRole.FieldRole) is not None
    ]
    assert any("as Q4_K_M (simulated" in t for t in texts)

    # Compare: the Q4_K_M row has the Memory tab's numbers and speed
    window.tabs.setCurrentWidget(window.compare_panel)
    wait_for_rows(qtbot, window)
    rows = {r.quant: r for r in window.compare_panel.table_model.rows}
    row = rows["Q4_K_M"]
    est = plan.estimate  # type: ignore[attr-defined]
    assert row.total_bytes == est.total_bytes
    assert row.fits is True
    assert row.decode_tok_per_s == pytest.approx(writing, abs=0.01)  # rounded to 0.01

    # Export: the command runs what was planned
    window.tabs.setCurrentWidget(window.export_panel)
    command = window.export_panel.preview.toPlainText()
    assert "32768" in command
    assert "-ctk" not in command or "q8_0" not in command


def test_which_quant_of_gemma_3_27b_for_16k_on_a_24_gb_gpu(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    window = make_window(qtbot, qsettings, open_demo=False)
    panel = window.settings_panel
    panel.planned.click()
    panel.gpu_count.setValue(1)
    panel.gpu_gib.setValue(24)
    panel.ram_gib.setValue(64)
    hardware = window.hardware.choice.hardware
    assert [g.capacity_bytes for g in hardware.gpus] == [24 * GIB]
    open_model(qtbot, window, "catalog:gemma-3-27b")
    panel.context.spin.setValue(16384)
    assert window.estimates.settings.n_ctx == 16384

    window.tabs.setCurrentWidget(window.compare_panel)
    wait_for_rows(qtbot, window)
    rows = window.compare_panel.table_model.rows
    assert len(rows) >= 8
    est = window.estimates
    for row in rows:
        if row.error:
            continue
        if row.quant == est.own_quant():
            spec = est.model.spec  # type: ignore[union-attr]
        else:
            spec = simulate_level(est.model.spec, row.quant).spec  # type: ignore[union-attr]
        requested = est.state.requested
        assert requested is not None
        plan = plan_runner(
            spec,
            est.runner,
            hardware,
            given={f: getattr(requested, f) for f in est.pinned},
            options=est.options,
        )
        assert row.total_bytes == plan.estimate.total_bytes, row.quant
        assert row.fits == plan.estimate.fits, row.quant
        assert [d[1] for d in row.devices] == [d.total_bytes for d in plan.estimate.devices], (
            row.quant
        )
    fitting = [r for r in rows if r.fits and r.gpu_layers == r.n_layers]
    assert fitting, "some quant of Gemma 3 27B holds 16k on a 24 GiB GPU"
    assert any(r.quant == "Q4_K_M" for r in fitting)
    assert not any(r.quant in ("F16", "BF16") and r.gpu_layers == r.n_layers for r in rows)
    # the KV cache a user reads on the card is the one that grows: 10 layers' worth
    kv = next(
        t
        for t in (
            window.models_panel.card_form.itemAt(
                r, window.models_panel.card_form.ItemRole.FieldRole
            )
            .widget()  # type: ignore[union-attr]
            .text()
            for r in range(window.models_panel.card_form.rowCount())
            if window.models_panel.card_form.itemAt(
                r, window.models_panel.card_form.ItemRole.FieldRole
            )
            is not None
        )
        if "full-attention layers" in t
    )
    assert "in the 10 full-attention layers" in kv
    table = window.compare_panel.table_model
    q4 = next(i for i, r in enumerate(rows) if r.quant == "Q4_K_M")
    shown = [
        str(table.index(q4, c).data(Qt.ItemDataRole.DisplayRole))
        for c in range(table.columnCount())
    ]
    assert any(format_bytes(rows[q4].file_bytes) in s for s in shown), shown
