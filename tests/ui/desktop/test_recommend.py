"""Recommend tab on the real demo model: the plan is app.planning.planner's, Apply sets the sliders,
Cancel drops the answer, errors are a banner."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.qtbot import QtBot

from app.errors import GGTuneError
from app.planning.goals import Goal
from app.planning.options import COMPARE_QUANTS, quant_options
from app.planning.planner import recommend
from app.planning.users import plan_users_line
from app.predict.estimate import estimate
from tests.ui.desktop.test_main_window import TEST_HARDWARE, held_only, make_window
from ui.desktop.main_window import MainWindow
from ui.desktop.recommend.rows import GoalForm, RecommendOutcome
from ui.desktop.shared.estimate_controller import fit_settings
from ui.desktop.shared.speed import USERS_SLO

PLAN_TIMEOUT_MS = 30_000


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    w = make_window(qtbot, qsettings)
    qtbot.waitUntil(lambda: not w.recommender.busy, timeout=PLAN_TIMEOUT_MS)
    return w


def run(qtbot: QtBot, window: MainWindow, form: GoalForm) -> RecommendOutcome:
    panel = window.recommend_panel
    panel.set_form(form)
    assert panel.form() == form
    with qtbot.waitSignal(window.recommender.finished, timeout=PLAN_TIMEOUT_MS) as done:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    outcome = done.args[0]
    assert isinstance(outcome, RecommendOutcome)
    return outcome


def test_plan_matches_the_planner(qtbot: QtBot, window: MainWindow) -> None:
    form = GoalForm("users", n_users=4, min_tok_per_s=5.0, ctx=4096)
    outcome = run(qtbot, window, form)
    spec = window.estimates.model.spec  # type: ignore[union-attr]
    goal = Goal("users", ctx=4096, n_users=4, min_tok_per_s=5.0)
    expected = recommend(
        spec,
        TEST_HARDWARE,
        goal,
        options=quant_options(spec, names=COMPARE_QUANTS),
        factors=window.memory_panel.speed.factors,
    )
    rec = outcome.recommendation
    assert rec.why == expected.why
    assert rec.best is not None
    assert expected.best is not None
    assert rec.best.settings == expected.best.settings
    assert rec.best.quant.name == expected.best.quant.name
    panel = window.recommend_panel
    # the users line: the plan's 4 users against the Memory view's SLO, the same function
    # and factors (no Users run of this hardware profile: predicted only)
    line = plan_users_line(
        expected.best, TEST_HARDWARE, USERS_SLO, window.memory_panel.speed.factors
    )
    assert outcome.users_line == line
    assert line.startswith(f"4 users arriving together: ~{rec.best.speed.per_user_tok_per_s:.1f}")
    assert "first token ≤ 2 s, ≥ 10 tok/s each (predicted" in line
    assert panel.why_label.text() == f"{expected.why}\n{line}"
    assert rec.best.quant.name in panel.settings_label.text()
    assert panel.runner_up_label.text().startswith("Runner-up")
    assert panel.apply_button.isEnabled()
    assert not panel.progress.isVisible()


def test_apply_sets_the_sliders_for_the_open_file(qtbot: QtBot, window: MainWindow) -> None:
    outcome = run(qtbot, window, GoalForm("longest-context", only_open_file=True))
    best = outcome.recommendation.best
    assert best is not None
    assert best.quant.on_disk
    panel = window.recommend_panel
    with qtbot.waitSignal(window.estimates.settings_changed, timeout=15_000):
        qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
    spec = window.estimates.model.spec  # type: ignore[union-attr]
    assert window.estimates.settings == fit_settings(spec, best.settings)
    assert held_only(window.estimates.state.estimate) == estimate(
        spec, best.settings, TEST_HARDWARE
    )
    assert window.settings_panel.context.slider.isEnabled()
    assert "file you have open" in panel.apply_label.text()


def test_apply_for_another_quant_explains_the_download(qtbot: QtBot, window: MainWindow) -> None:
    outcome = run(qtbot, window, GoalForm("best-quality", ctx=4096))
    best = outcome.recommendation.best
    assert best is not None
    assert not best.quant.on_disk  # F16 beats the open Q4_K_M on quality
    note = window.recommender.apply()
    assert note is not None
    assert "download" in note
    assert best.quant.name in note
    assert window.estimates.settings == fit_settings(
        window.estimates.model.spec,  # type: ignore[union-attr]
        best.settings,
    )
    assert window.recommend_panel.apply_label.text() == note


def test_cancel_drops_the_answer(qtbot: QtBot, window: MainWindow) -> None:
    finished: list[object] = []
    window.recommender.finished.connect(finished.append)
    window.recommend_panel.set_form(GoalForm("fastest"))
    window.recommend_panel.run_button.click()
    assert window.recommender.busy
    assert window.recommend_panel.cancel_button.isEnabled()
    window.recommend_panel.cancel_button.click()
    assert not window.recommender.busy
    assert not window.recommend_panel.cancel_button.isEnabled()
    qtbot.wait(300)
    assert finished == []


def test_planner_error_is_a_banner(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise GGTuneError("the planner cannot answer this")

    monkeypatch.setattr("ui.desktop.recommend.rows.recommend", broken)
    window.tabs.setCurrentWidget(window.recommend_panel)
    qtbot.waitUntil(lambda: not window.recommender.busy, timeout=PLAN_TIMEOUT_MS)
    panel = window.recommend_panel
    with qtbot.waitSignal(window.recommender.failed, timeout=PLAN_TIMEOUT_MS):
        panel.run_button.click()
    assert panel.banner.isVisible()
    assert panel.banner.label.text() == "Could not plan: the planner cannot answer this"
    assert not panel.progress.isVisible()


def test_nonsense_goal_is_refused_in_words(qtbot: QtBot, window: MainWindow) -> None:
    form = dataclasses.replace(GoalForm("users"), n_users=0)
    failed: list[str] = []
    window.recommender.failed.connect(failed.append)
    window.recommender.run(form)
    assert failed
    assert failed[0].startswith("Cannot plan for that: users must be ≥ 1")
    assert not window.recommender.busy


def test_the_users_field_follows_settings_until_changed_here(
    qtbot: QtBot, window: MainWindow
) -> None:
    panel = window.recommend_panel
    window.estimates.update(n_parallel=3)
    assert panel.users.value() == 3
    assert panel.users.suffix() == " users"
    window.estimates.update(n_parallel=1)
    assert panel.users.value() == 1
    assert panel.users.suffix() == " user"  # never "1 users"
    panel.users.setValue(5)  # the user's own number stays
    window.estimates.update(n_parallel=2)
    assert panel.users.value() == 5


def test_a_plan_for_another_goal_is_marked_out_of_date_and_enter_runs_it(
    qtbot: QtBot, window: MainWindow
) -> None:
    panel = window.recommend_panel
    window.tabs.setCurrentWidget(panel)
    run(qtbot, window, GoalForm("users", n_users=2, ctx=4096))
    assert panel.stale_label.isHidden()
    panel.ctx.setValue(8192)
    assert not panel.stale_label.isHidden()
    panel.ctx.setValue(4096)  # asking the same again: the plan answers it
    assert panel.stale_label.isHidden()
    panel.ctx.setValue(8192)
    panel.ctx.setFocus()
    with qtbot.waitSignal(window.recommender.finished, timeout=PLAN_TIMEOUT_MS):
        qtbot.keyClick(panel.ctx, Qt.Key.Key_Return)
    assert panel.stale_label.isHidden()
    assert panel.form().ctx == 8192


def test_the_plan_line_says_no_gpu_on_a_machine_without_one(
    qtbot: QtBot, window: MainWindow
) -> None:
    """Issue 18: 'GPU layers all' on a CPU-only machine read as a GPU plan."""
    window.tabs.setCurrentWidget(window.recommend_panel)
    run(qtbot, window, GoalForm("users", n_users=1, ctx=4096))
    text = window.recommend_panel.settings_label.text()
    n_layer = window.estimates.model.spec.n_layer  # type: ignore[union-attr]
    assert f"no GPU: all {n_layer} layers on the CPU" in text  # as the slider says it
    assert "GPU layers all" not in text
