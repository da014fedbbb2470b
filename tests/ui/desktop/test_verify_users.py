"""Verify's Users run: N users on the real llama.cpp from the window, measured beside
predicted, plotted with the SLO, answered in words, stored; and Verify's predicted speeds
are the Memory view's figure. Real child processes (the kernel timing and the load test);
nothing is mocked."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.qtbot import QtBot

from app.hardware.bandwidth import machine_key
from app.hardware.host import probe_host
from app.hardware.kernels import cached_rates
from app.measured.results_db import ResultsDB, quick_file_hash
from app.measured.users_result import Slo, UsersPlan
from ui.desktop.main_window import MainWindow
from ui.desktop.verify.users import users_counts
from ui.desktop.verify.users_plot import UsersPoint, describe

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


def test_users_run_plots_measured_beside_predicted_and_stores_it(
    qtbot: QtBot,
    qsettings: QSettings,
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # kernels timed afresh
    window = MainWindow(qsettings, detect_hardware=False)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.hardware.local_detected, timeout=30_000):
        window.hardware.detect()
    with qtbot.waitSignal(window.models.model_loaded, timeout=60_000):
        window.models.open_path(str(smollm_path))
    window.estimates.update(n_ctx=2048, n_parallel=2, kv_unified=False)
    db_path = tmp_path / "results.sqlite3"
    window.verify.set_results_db(ResultsDB(db_path))
    window.verify.users_plan = UsersPlan(n_users=(1, 2), n_prompt=16, n_gen=6)
    panel = window.verify_panel
    assert not panel.users_box.isVisible()
    # Verify's predicted column uses the Memory view's factors: one figure on every tab
    assert window.verify.speed_factors() is window.memory_panel.speed.factors
    with qtbot.waitSignal(window.verify.running_changed, timeout=15_000) as started:
        qtbot.mouseClick(panel.users_button, Qt.MouseButton.LeftButton)
    assert started.args == [True]
    assert window.verify.kind == "users"
    assert not panel.users_button.isEnabled()
    assert panel.cancel_button.isEnabled()
    with qtbot.waitSignal(window.verify.users_finished, timeout=ENGINE_TIMEOUT_MS) as done:
        pass
    outcome = done.args[0]
    assert [s.n_users for s in outcome.measured] == [1, 2]
    assert set(outcome.predicted) == {1, 2}
    points = panel.users_plot.points
    assert [p.n_users for p in points] == [1, 2]
    for p in points:
        assert p.measured_tok_per_s > 0
        assert p.measured_ttft_s > 0
        assert p.predicted_tok_per_s is not None
        assert p.predicted_tok_per_s > 0
        assert p.predicted_ttft_s is not None
        assert p.predicted_ttft_s > 0
    assert panel.users_box.isVisible()
    text = panel.users_answer.text()
    assert "Measured:" in text
    assert "Predicted:" in text
    assert "first token ≤ 2 s" in text
    assert outcome.prediction_source in text
    assert panel.status.text().startswith("Done: 2 rounds of 16-token prompts")
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
