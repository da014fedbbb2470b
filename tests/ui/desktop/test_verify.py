"""Verify: llama.cpp's real dry run and quick benchmark of SmolLM2, run from the window,
compared, stored, cancelled, and failing cleanly. Real child processes, real llama.cpp;
nothing is mocked."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import psutil
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication, QMessageBox
from pytestqt.qtbot import QtBot

from app.hardware.devices import Hardware
from app.measured.bench_result import BenchPlan
from app.measured.results_db import ResultsDB, quick_file_hash
from ui.desktop.main_window import MainWindow
from ui.desktop.verify.rows import ComparisonRow, SpeedRow

pytestmark = pytest.mark.engine

GIB = 1024**3
MIB = 1024**2
ENGINE_TIMEOUT_MS = 180_000
# llama.cpp prints MiB with two decimals: each printed number is within 0.005 MiB
PRINT_TOLERANCE_BYTES = int(0.01 * MIB)


def open_window(qtbot: QtBot, qsettings: QSettings, path: Path) -> MainWindow:
    window = MainWindow(qsettings, detect_hardware=False, time_kernels=False)
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
    with qtbot.waitSignal(window.verify.running_changed, timeout=15_000) as started:
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


# --- the quick benchmark ------------------------------------------------------------------

# A tiny plan (the CLI's hidden --plan does the same): seconds, not tens of seconds.
TINY_PLAN = BenchPlan("custom", n_prompt=16, n_gen=4, depth=0, n_chat_prompt=8, repetitions=1)
# Long enough to cancel mid-run on any machine.
LONG_PLAN = BenchPlan(
    "custom", n_prompt=512, n_gen=2048, depth=1024, n_chat_prompt=256, repetitions=50
)


def bench_window(
    qtbot: QtBot, qsettings: QSettings, path: Path, db_path: Path, plan: BenchPlan
) -> MainWindow:
    window = open_window(qtbot, qsettings, path)
    window.verify.set_results_db(ResultsDB(db_path))
    window.verify.bench_plan = plan
    return window


def test_quick_benchmark_measures_stores_and_shows_history(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path, tmp_path: Path, qtmodeltester: object
) -> None:
    db_path = tmp_path / "results.sqlite3"
    window = bench_window(qtbot, qsettings, smollm_path, db_path, TINY_PLAN)
    panel = window.verify_panel
    progress: list[tuple[int, str]] = []
    window.verify.progress.connect(lambda pct, label: progress.append((pct, label)))
    with qtbot.waitSignal(window.verify.running_changed, timeout=15_000) as started:
        qtbot.mouseClick(panel.bench_button, Qt.MouseButton.LeftButton)
    assert started.args == [True]
    assert window.verify.kind == "benchmark"
    assert window.tabs.currentWidget() is panel
    assert not panel.bench_button.isEnabled()
    assert not panel.run_button.isEnabled()
    assert panel.cancel_button.isEnabled()
    assert panel.progress.maximum() == 100  # a real bar, not a busy one
    with qtbot.waitSignal(window.verify.benchmark_finished, timeout=ENGINE_TIMEOUT_MS) as done:
        pass
    outcome = done.args[0]
    # progress: loading (≤ 30 %), then the steps, never backwards, ending at 100 %
    percents = [p for p, _ in progress]
    assert percents == sorted(percents)
    assert any(label.startswith("loading the model") for _, label in progress)
    assert any(label.startswith("step ") for _, label in progress)
    assert percents[-1] == 100
    assert not panel.progress.isVisible()  # hidden again once the run is over
    # estimate vs engine vs measured, one table
    rows = {r.component: r for r in outcome.rows}
    weights = rows["Weights"]
    assert isinstance(weights, ComparisonRow)
    assert weights.engine_bytes == window.estimates.model.spec.weights_bytes
    file_backed = rows["RSS file-backed (mapped weights)"]
    assert isinstance(file_backed, ComparisonRow)
    assert file_backed.measured_bytes is not None
    assert file_backed.measured_bytes > 0
    assert isinstance(rows["RSS anonymous (buffers)"], ComparisonRow)
    speeds = [r for r in outcome.rows if isinstance(r, SpeedRow)]
    names = [r.component for r in speeds]
    assert names[0].startswith("Prompt processing (pp16")
    assert names[1].startswith("Generation (tg4")
    assert names[2].startswith("Time to first token (8 tokens)")
    assert all(r.measured.mean > 0 for r in speeds)
    assert panel.table_model.rowCount() == len(outcome.rows)
    last = panel.table_model.rowCount() - 1
    assert panel.table_model.index(last, 4).data().endswith(" s")  # TTFT measured
    qtmodeltester.check(panel.table_model)  # type: ignore[attr-defined]
    # the RSS rows say why they sit below the estimate; the rows llama.cpp reports need not
    names = [r.component for r in outcome.rows]
    anonymous = panel.table_model.index(names.index("RSS anonymous (buffers)"), 3)
    assert "upper bound" in anonymous.data(Qt.ItemDataRole.ToolTipRole)
    assert panel.table_model.index(0, 3).data(Qt.ItemDataRole.ToolTipRole) is None
    assert anonymous.data().endswith("\u00a0%)")  # "%" never wraps alone
    assert panel.table_model.index(0, 3).data() == "0.00 MiB"  # weights: exact, no "(+0.00 %)"
    # at 1004 pixels the sizes stay on one line ("235.16 MiB" wrapped); the rest wraps
    window.resize(1004, 700)
    QApplication.processEvents()
    header = panel.table.horizontalHeader()
    metrics = panel.table.fontMetrics()
    for row in range(panel.table_model.rowCount()):
        for col in (1, 2, 4):
            text = str(panel.table_model.index(row, col).data())
            assert metrics.horizontalAdvance(text) < header.sectionSize(col), (row, col, text)
    # stored, in the injected database, and shown in the history
    assert outcome.run_id is not None
    assert outcome.store_error is None
    stored = ResultsDB(db_path).runs(model_hash=quick_file_hash(smollm_path))
    assert [r.id for r in stored] == [outcome.run_id]
    assert panel.status.text().startswith("Done:")
    assert "saved to this model's history (1 benchmark)" in panel.status.text()
    qtbot.waitUntil(lambda: panel.history_model.rowCount() == 1, timeout=10_000)
    assert panel.history_model.index(0, 0).data(Qt.ItemDataRole.UserRole) == outcome.run_id
    assert panel.history_model.index(0, 1).data() == "custom"
    assert panel.history_model.index(0, 2).data() == "2,048"
    qtmodeltester.check(panel.history_model)  # type: ignore[attr-defined]
    assert not panel.banner.isVisible()
    assert panel.bench_button.isEnabled()
    assert not window.verify.running


def test_a_stored_run_is_counted_in_the_models_history_and_the_layers_are_in_words(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path, tmp_path: Path
) -> None:
    """The status says how many runs of this model the history holds, never the database's
    row id (which counts every model's runs), and llama.cpp's "offloaded 0/31" in words."""
    db_path = tmp_path / "results.sqlite3"
    window = bench_window(qtbot, qsettings, smollm_path, db_path, TINY_PLAN)
    panel = window.verify_panel
    with qtbot.waitSignal(window.verify.benchmark_finished, timeout=ENGINE_TIMEOUT_MS) as done:
        qtbot.mouseClick(panel.bench_button, Qt.MouseButton.LeftButton)
    first = done.args[0]
    assert "(1 benchmark)" in panel.status.text()
    # another model's run lands in the same database: the row ids run ahead of the count
    ResultsDB(db_path).add(first.result, model_hash="1:another-model")
    with qtbot.waitSignal(window.verify.benchmark_finished, timeout=ENGINE_TIMEOUT_MS) as done:
        qtbot.mouseClick(panel.bench_button, Qt.MouseButton.LeftButton)
    second = done.args[0]
    assert second.run_id == 3
    assert second.history_runs == 2
    text = panel.status.text()
    assert "saved to this model's history (2 benchmarks)" in text
    assert "#" not in text
    qtbot.waitUntil(lambda: panel.history_model.rowCount() == 2, timeout=10_000)
    assert panel.history_label.text().endswith("(2, newest first):")
    # the layers as the slider and the model card say them, not llama.cpp's "0/31"
    engine = second.result.engine
    n = engine.n_layer
    assert f"/{n + 1}" not in text
    if not any(d.type in ("gpu", "igpu") for d in engine.devices):
        # this machine has no GPU, whatever llama.cpp's log counts (an RPC-capable build
        # prints "offloaded 31/31 layers to GPU" and puts every layer on the CPU)
        assert f"no GPU: all {n} layers on the CPU" in text
        assert "GPU layers:" not in text
    else:
        assert "GPU layers: " in text
    # the history's dates as people write them
    date = panel.history_model.index(0, 0).data()
    assert re.fullmatch(r"\d{1,2} [A-Z][a-z]{2} \d{4}, \d\d:\d\d UTC", date), date


def test_history_lists_stored_runs_when_the_tab_opens(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path, tmp_path: Path
) -> None:
    window = bench_window(qtbot, qsettings, smollm_path, tmp_path / "r.sqlite3", TINY_PLAN)
    with qtbot.waitSignal(window.verify.benchmark_finished, timeout=ENGINE_TIMEOUT_MS):
        window.verify.start_benchmark(
            window.estimates.model,  # type: ignore[arg-type]
            window.estimates.settings,
            window.hardware.local or Hardware.cpu_only(),
        )
    window.tabs.setCurrentIndex(0)
    window.verify_panel.history_model.set_rows(())
    with qtbot.waitSignal(window.verify.history_changed, timeout=10_000) as shown:
        window.tabs.setCurrentWidget(window.verify_panel)
    assert len(shown.args[0]) == 1
    assert window.verify_panel.history_model.rowCount() == 1


def test_cancel_mid_benchmark_ends_the_child(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path, tmp_path: Path
) -> None:
    db_path = tmp_path / "results.sqlite3"
    window = bench_window(qtbot, qsettings, smollm_path, db_path, LONG_PLAN)
    panel = window.verify_panel
    steps: list[str] = []
    window.verify.progress.connect(lambda _pct, label: steps.append(label))
    qtbot.mouseClick(panel.bench_button, Qt.MouseButton.LeftButton)
    thread = window.verify.dry_run_thread
    assert thread is not None
    qtbot.waitUntil(lambda: thread.pid is not None, timeout=10_000)
    pid = thread.pid
    assert pid is not None
    qtbot.waitUntil(lambda: any(s.startswith("step ") for s in steps), timeout=ENGINE_TIMEOUT_MS)
    assert window.verify.running  # mid-run: the benchmark steps have begun
    with qtbot.waitSignal(window.verify.cancelled, timeout=30_000):
        qtbot.mouseClick(panel.cancel_button, Qt.MouseButton.LeftButton)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert panel.status.text().startswith("Cancelled")
    assert panel.bench_button.isEnabled()
    assert not panel.banner.isVisible()
    assert ResultsDB(db_path).runs() == []  # nothing stored
    # the no-leftover-children check of conftest.py runs after this test too


def test_a_second_space_does_not_cancel_and_esc_does(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path, tmp_path: Path
) -> None:
    """Space starts a run from its button; the focus must then not sit on Cancel (a second
    Space, or a held key's repeat, would stop the run at once); Esc still cancels."""
    window = bench_window(qtbot, qsettings, smollm_path, tmp_path / "r.sqlite3", LONG_PLAN)
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    panel = window.verify_panel
    window.tabs.setCurrentWidget(panel)
    panel.bench_button.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is panel.bench_button, timeout=5_000)
    with qtbot.waitSignal(window.verify.running_changed, timeout=15_000) as started:
        qtbot.keyClick(panel.bench_button, Qt.Key.Key_Space)
    assert started.args == [True]
    focused = QApplication.focusWidget()
    assert focused is not None, "the focus left the window"
    assert focused is not panel.cancel_button
    assert focused.isEnabled()
    assert panel.isAncestorOf(focused)  # still on the Verify tab, where the run shows
    qtbot.keyClick(focused, Qt.Key.Key_Space)  # the second Space
    assert window.verify.running
    assert not panel.status.text().startswith("Cancelling")
    thread = window.verify.dry_run_thread
    assert thread is not None
    qtbot.waitUntil(lambda: thread.pid is not None, timeout=10_000)
    with qtbot.waitSignal(window.verify.cancelled, timeout=30_000):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Escape)
    assert panel.status.text().startswith("Cancelled")
    assert QApplication.focusWidget() is panel.bench_button  # back where the run began


def test_benchmark_failure_is_a_banner_with_the_cause_and_the_app_stays_up(
    qtbot: QtBot, qsettings: QSettings, smollm_path: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "smollm-cut.gguf"
    shutil.copyfile(smollm_path, copy)
    window = bench_window(qtbot, qsettings, copy, tmp_path / "r.sqlite3", TINY_PLAN)
    with copy.open("r+b") as f:
        f.truncate(copy.stat().st_size // 2)
    panel = window.verify_panel
    with qtbot.waitSignal(window.verify.failed, timeout=ENGINE_TIMEOUT_MS) as blocker:
        qtbot.mouseClick(panel.bench_button, Qt.MouseButton.LeftButton)
    failure = blocker.args[0]
    assert failure.kind == "benchmark"
    assert panel.banner.isVisible()
    assert failure.cause in panel.banner.label.text()
    assert "Traceback" not in panel.banner.label.text()
    assert panel.findChild(QMessageBox, "engine_failure_dialog") is None
    assert panel.bench_button.isEnabled()
    window.estimates.update(n_ctx=4096)
    assert window.estimates.state.estimate is not None
