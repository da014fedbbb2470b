"""Verify's Users run: N users on the real llama.cpp from the window, measured beside
predicted (in words, a plot and a table), judged by the SLO, stored, cancelled; and
Verify's predicted speeds are the Memory view's figure. Real child processes (the kernel
timing and the load test); nothing is mocked."""

from __future__ import annotations

import html
from pathlib import Path

import psutil
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.qtbot import QtBot

from app.hardware.bandwidth import machine_key
from app.hardware.host import probe_host
from app.hardware.kernels import cached_rates
from app.measured.results_db import ResultsDB, quick_file_hash
from app.measured.users_result import Slo, UsersPlan, served_users
from app.predict.speed import SpeedFactors
from app.units import format_when
from ui.desktop.main_window import MainWindow
from ui.desktop.verify.users_plot import UsersPoint, describe
from ui.desktop.verify.users_run import users_counts
from ui.desktop.verify.users_view import NO_RUN

pytestmark = pytest.mark.engine

ENGINE_TIMEOUT_MS = 600_000


def test_users_counts_go_up_to_the_slots() -> None:
    assert users_counts(1) == (1, 2, 4)
    assert users_counts(4) == (1, 2, 4)
    assert users_counts(6) == (1, 2, 4, 6)
    assert users_counts(64) == (1, 2, 4, 8, 16)


def test_plot_description_names_the_slo_and_both_figures() -> None:
    points = (UsersPoint(1, 40.0, 38.0, 0.2, 0.25), UsersPoint(4, 12.5, None, 0.9, None))
    text = describe(points, Slo(ttft_s=2.0, min_tok_per_s=10.0))
    assert text.splitlines()[0] == "SLO: first token ≤ 2 s, ≥ 10 tok/s each"
    assert "1 user: 40.0 tok/s each (predicted 38.0), first token 0.20 s (predicted 0.25 s)" in text
    assert "4 users: 12.5 tok/s each, first token 0.90 s" in text


def users_window(
    qtbot: QtBot, qsettings: QSettings, path: Path, db_path: Path, plan: UsersPlan
) -> MainWindow:
    window = MainWindow(qsettings, detect_hardware=False, time_kernels=False)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.hardware.local_detected, timeout=30_000):
        window.hardware.detect()
    with qtbot.waitSignal(window.models.model_loaded, timeout=60_000):
        window.models.open_path(str(path))
    window.estimates.update(n_ctx=2048, n_parallel=2, kv_unified=False)
    window.verify.set_results_db(ResultsDB(db_path))
    window.verify.users_plan = plan
    return window


def test_users_run_shows_measured_beside_predicted_and_stores_it(
    qtbot: QtBot,
    qsettings: QSettings,
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # kernels timed afresh
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the database every tab reads
    db_path = ResultsDB().path
    plan = UsersPlan(n_users=(1, 2), n_prompt=16, n_gen=6)
    window = users_window(qtbot, qsettings, smollm_path, db_path, plan)
    panel = window.verify_panel
    view = panel.users_view
    assert NO_RUN in view.answer.text()  # before a run: what it does, and the SLO
    assert "first token ≤ 2 s, ≥ 10 tok/s each" in view.answer.text()
    assert view.table_model.rowCount() == 0
    # Verify's predicted column uses the Memory view's factors: one figure on every tab
    assert window.verify.speed_factors() is window.memory_panel.speed.factors
    labels: list[tuple[int, str]] = []
    window.verify.progress.connect(lambda pct, label: labels.append((pct, label)))
    with qtbot.waitSignal(window.verify.running_changed, timeout=15_000) as started:
        qtbot.mouseClick(panel.users_button, Qt.MouseButton.LeftButton)
    assert started.args == [True]
    assert window.verify.kind == "users"
    assert not panel.users_button.isEnabled()
    assert panel.cancel_button.isEnabled()
    assert panel.progress.isVisible()
    assert panel.results.currentWidget() is view  # the Users tab comes to the front at once
    with qtbot.waitSignal(window.verify.users_finished, timeout=ENGINE_TIMEOUT_MS) as done:
        pass
    outcome = done.args[0]
    # progress like the benchmark's: the kernels, loading, then each round, up to 100 %
    texts = [label for _pct, label in labels]
    assert "timing this CPU's kernels (once)" in texts
    assert any(t.startswith("loading the model") for t in texts)
    last_step = [t for t in texts if t.startswith("step ")][-1].split(":")[0].split()
    assert last_step[1] == last_step[3]  # "step N of N": every step reported
    percents = [pct for pct, _label in labels]
    assert percents == sorted(percents)
    assert percents[-1] == 100
    assert [s.n_users for s in outcome.measured] == [1, 2]
    assert set(outcome.predicted) == {1, 2}  # every count from 1 to the most measured
    assert panel.results.currentWidget() is view  # the run's own tab comes to the front
    # the plot: measured and predicted at each count measured, the predicted line through all
    points = view.plot.points
    assert [p.n_users for p in points] == [1, 2]
    for p in points:
        assert p.measured_tok_per_s > 0
        assert p.measured_ttft_s > 0
        assert p.predicted_tok_per_s is not None
        assert p.predicted_tok_per_s > 0
        assert p.predicted_ttft_s is not None
        assert p.predicted_ttft_s > 0
    assert [n for n, _tps, _ttft in view.plot.curve] == [1, 2]
    assert view.plot.toolTip().startswith("SLO: first token ≤ 2 s, ≥ 10 tok/s each")
    # the table: side by side, per count, the same numbers as the run
    model = view.table_model
    assert model.rowCount() == 2
    for row, s in enumerate(outcome.measured):
        cells = [model.index(row, c).data(Qt.ItemDataRole.UserRole) for c in range(6)]
        assert cells[0] == s.n_users
        assert cells[1] == s.per_user_tok_per_s
        assert cells[2] == outcome.predicted[s.n_users].per_user_tok_per_s
        assert cells[3] == s.ttft_s
        assert cells[4] == outcome.predicted[s.n_users].ttft_s
        assert cells[5] == s.goodput_share
        met = model.index(row, 5).data()
        assert met.endswith(f" of {s.n_requests}")
        assert met.startswith("✓" if s.goodput_share == 1.0 else "✗")
    # the answer in words: measured and predicted, the SLO, where the prediction comes from
    text = view.answer.text()
    assert "<b>Measured:</b>" in text
    assert "<b>Predicted:</b>" in text
    assert "SLO: first token ≤ 2 s, ≥ 10 tok/s each" in text
    calibrated = window.memory_panel.speed.factors.n_measurements > 0
    assert outcome.calibrated is calibrated
    assert ("calibrated on " in text) is calibrated
    assert ("not calibrated" in text) is not calibrated
    assert panel.status.text().startswith("Done: 2 rounds of 16-token prompts")
    assert panel.status.text().endswith(" · saved to this model's history (1 Users run)")
    # the kernels were timed for this model (once) and cached for this machine
    rates = cached_rates(machine_key(probe_host()), outcome.result.n_threads)
    assert rates is not None
    assert {"q4_1", "q8_0"} <= rates.types()
    # stored in the results database, with the users each round served
    stored = ResultsDB(db_path).users_runs(model_hash=quick_file_hash(smollm_path))
    assert [r.id for r in stored] == [outcome.run_id]
    assert stored[0].result["users"][1]["n_users"] == 2
    assert panel.users_button.isEnabled()
    assert not window.verify.running
    # the Memory view's users line reads the stored run at once (not at the next launch):
    # the same count as Verify's answer, and the calibration now includes the run
    speed = window.memory_panel.speed
    qtbot.waitUntil(lambda: speed.summary.measured is not None, timeout=30_000)
    measured = speed.summary.measured
    assert measured is not None
    served, _fail = served_users(outcome.measured)
    assert (measured.served, measured.tested) == (served, 2)
    assert outcome.answer.startswith(
        f"{served} user" if served else "Not even 1 user"
    )  # Verify says the same number
    qtbot.waitUntil(
        lambda: f"{served} of up to 2 met it" in window.memory_panel.speed_label.text(),
        timeout=30_000,
    )
    qtbot.waitUntil(lambda: speed.factors.n_measurements > 0, timeout=30_000)
    assert window.verify.speed_factors() is speed.factors
    # the next launch: Verify's Users tab shows the stored run (measured, same numbers)
    again = users_window(qtbot, qsettings, smollm_path, db_path, plan)
    again.tabs.setCurrentWidget(again.verify_panel)
    shown = again.verify_panel.users_view
    qtbot.waitUntil(lambda: shown.stored is not None, timeout=30_000)
    assert shown.stored is not None
    assert shown.stored.id == outcome.run_id
    assert shown.outcome is None
    text = html.unescape(shown.answer.text())
    assert f"Measured {format_when(shown.stored.created_at)}:</b> {outcome.answer}" in text
    assert "load test #" not in text  # the database's row id means nothing to a user
    stored_model = shown.table_model
    assert stored_model.rowCount() == 2
    for row, s in enumerate(outcome.measured):
        assert stored_model.index(row, 1).data(Qt.ItemDataRole.UserRole) == s.per_user_tok_per_s
        assert stored_model.index(row, 3).data(Qt.ItemDataRole.UserRole) == s.ttft_s
        assert stored_model.index(row, 2).data(Qt.ItemDataRole.UserRole) is None  # no rerun
    assert [p.n_users for p in shown.plot.points] == [1, 2]
    # a run started before the calibration loads predicts with it all the same (read the
    # way the Memory view reads it), not with the published ratios
    again.verify.speed_factors = SpeedFactors  # as if the factors had not loaded yet
    with qtbot.waitSignal(again.verify.users_finished, timeout=ENGINE_TIMEOUT_MS) as rerun:
        qtbot.mouseClick(again.verify_panel.users_button, Qt.MouseButton.LeftButton)
    assert rerun.args[0].calibrated
    assert rerun.args[0].prediction_source.startswith("calibrated on ")


def test_cancel_mid_users_run_ends_the_child_and_stores_nothing(
    qtbot: QtBot,
    qsettings: QSettings,
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the user's cache untouched
    db_path = tmp_path / "results.sqlite3"
    long_plan = UsersPlan(n_users=(1, 2, 4), n_prompt=256, n_gen=400, repetitions=20)
    window = users_window(qtbot, qsettings, smollm_path, db_path, long_plan)
    panel = window.verify_panel
    labels: list[str] = []
    window.verify.progress.connect(lambda _pct, label: labels.append(label))
    qtbot.mouseClick(panel.users_button, Qt.MouseButton.LeftButton)
    thread = window.verify.dry_run_thread
    assert thread is not None
    qtbot.waitUntil(lambda: thread.pid is not None, timeout=ENGINE_TIMEOUT_MS)
    pid = thread.pid
    assert pid is not None
    qtbot.waitUntil(lambda: any(s.startswith("step ") for s in labels), timeout=ENGINE_TIMEOUT_MS)
    assert window.verify.running  # mid-run: the rounds have begun
    with qtbot.waitSignal(window.verify.cancelled, timeout=30_000):
        qtbot.keyClick(panel.cancel_button, Qt.Key.Key_Escape)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert panel.status.text().startswith("Cancelled")
    assert panel.users_button.isEnabled()
    assert not panel.banner.isVisible()
    assert panel.users_view.outcome is None
    assert ResultsDB(db_path).users_runs() == []  # nothing stored
