"""Verify: llama.cpp's real dry run of SmolLM2, run from the window, compared, cancelled,
and failing cleanly. Real child processes, real llama.cpp; nothing is mocked."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.qtbot import QtBot

from ui.desktop.main_window import MainWindow

pytestmark = pytest.mark.engine

GIB = 1024**3
MIB = 1024**2
ENGINE_TIMEOUT_MS = 180_000
# llama.cpp prints MiB with two decimals: each printed number is within 0.005 MiB
PRINT_TOLERANCE_BYTES = int(0.01 * MIB)


def open_window(qtbot: QtBot, qsettings: QSettings, path: Path) -> MainWindow:
    window = MainWindow(qsettings, detect_hardware=False)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.hardware.local_detected, timeout=30_000):
        window.hardware.detect()
    with qtbot.waitSignal(window.models.model_loaded, timeout=60_000):
        window.models.open_path(str(path))
    window.estimates.update(n_ctx=2048, n_parallel=1, kv_unified=False)
    return window


def test_dry_run_fills_the_table_with_the_engines_numbers(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path
) -> None:
    window = open_window(qtbot, qsettings, smollm_path)
    panel = window.verify_panel
    with qtbot.waitSignal(window.verify.running_changed, timeout=5_000) as started:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert started.args == [True]
    assert window.tabs.currentWidget() is panel
    assert not panel.run_button.isEnabled()
    assert panel.cancel_button.isEnabled()
    assert panel.progress.maximum() == 0  # busy
    with qtbot.waitSignal(window.verify.finished, timeout=ENGINE_TIMEOUT_MS) as done:
        pass
    result = done.args[0]
    rows = {r.component: r for r in result.rows}
    assert rows["Weights"].difference_bytes == 0  # exact on both sides
    assert rows["Weights"].engine_bytes == window.estimates.model.spec.weights_bytes
    kv = rows["KV cache"]
    assert kv.engine_bytes is not None
    assert kv.engine_bytes > 0
    assert abs(kv.difference_bytes or 0) <= PRINT_TOLERANCE_BYTES
    assert result.report.n_ctx == 2048
    compute = rows["Compute buffers"]
    assert compute.engine_bytes
    assert abs(compute.difference_percent or 0) < 5
    assert panel.table_model.rowCount() == len(result.rows)
    assert panel.table_model.index(0, 0).data() == "Weights"
    assert panel.status.text().startswith("Done:")
    assert panel.run_button.isEnabled()
    assert not panel.cancel_button.isEnabled()
    assert not window.verify.running


def test_cancel_stops_the_engine(qtbot: QtBot, qsettings: QSettings, smollm_path: Path) -> None:
    window = open_window(qtbot, qsettings, smollm_path)
    panel = window.verify_panel
    window.start_dry_run()
    thread = window.verify.dry_run_thread
    assert thread is not None
    qtbot.waitUntil(lambda: thread.pid is not None, timeout=10_000)
    with qtbot.waitSignal(window.verify.cancelled, timeout=30_000):
        qtbot.keyClick(panel.cancel_button, Qt.Key.Key_Escape)
    assert panel.status.text().startswith("Cancelled")
    assert panel.run_button.isEnabled()
    assert panel.table_model.rowCount() == 0


def test_engine_failure_shows_cause_and_log_and_the_app_stays_up(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "smollm-cut.gguf"
    shutil.copyfile(smollm_path, copy)
    window = open_window(qtbot, qsettings, copy)
    # The header stays readable; the weights end early: llama.cpp refuses the file.
    with copy.open("r+b") as f:
        f.truncate(copy.stat().st_size // 2)
    with qtbot.waitSignal(window.verify.failed, timeout=ENGINE_TIMEOUT_MS) as blocker:
        window.start_dry_run()
    failure = blocker.args[0]
    assert "llama.cpp" in failure.cause
    assert failure.log_tail, "the last llama.cpp log lines come with the error"
    box = window.verify_panel.findChild(QMessageBox, "engine_failure_dialog")
    assert box is not None
    assert box.isVisible()
    assert box.informativeText() == failure.cause
    assert "Traceback" not in box.detailedText()
    box.close()
    assert window.verify_panel.status.text().startswith("Failed:")
    assert window.verify_panel.run_button.isEnabled()
    # still up: the estimate answers the next tick
    window.estimates.update(n_ctx=4096)
    assert window.estimates.state.estimate is not None
