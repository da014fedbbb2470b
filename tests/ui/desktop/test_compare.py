"""Compare tab and the memory view's speed line on the real demo model.

Expected numbers come from the core (``app.planning.compare.compare_rows`` over
``app.planning.options.quant_options``, ``app.model.quant.simulate_quant``,
``app.predict.speed.predict_speed``):
the window shows what ``ggtune compare`` prints, and nothing else.
"""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.model.quant import simulate_quant
from app.planning.compare import compare_rows, repo_rows
from app.planning.options import COMPARE_QUANTS, quant_options
from app.planning.planner import max_users
from app.planning.users import users_within_slo
from app.predict.speed import predict_speed
from app.sources.hf import list_repo, read_models
from app.units import speed_depth
from tests.fake_hub import REPO, FakeHub
from tests.ui.desktop.test_main_window import TEST_HARDWARE, make_window
from ui.desktop.compare.rows import compare_table
from ui.desktop.compare.table import CompareTableModel
from ui.desktop.main_window import MainWindow
from ui.desktop.shared.speed import SPEED_PROMPT_TOKENS, USERS_MIN_TOK_PER_S, USERS_SLO, users_goal

RESULT_TIMEOUT_MS = 30_000


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    w = make_window(qtbot, qsettings)
    w.estimates.update(n_ctx=4096, n_parallel=1, kv_unified=False)
    w.tabs.setCurrentWidget(w.compare_panel)  # Compare works out rows only while shown
    return w


def wait_for_rows(qtbot: QtBot, window: MainWindow) -> None:
    def settled() -> None:
        result = window.compare.result
        assert result is not None
        assert result.settings == window.estimates.state.settings  # what the runner runs
        assert not window.compare.busy

    qtbot.waitUntil(settled, timeout=RESULT_TIMEOUT_MS)


def test_rows_match_ggtune_compare(qtbot: QtBot, window: MainWindow) -> None:
    window.tabs.setCurrentWidget(window.compare_panel)
    wait_for_rows(qtbot, window)
    spec = window.estimates.model.spec  # type: ignore[union-attr]
    settings = window.estimates.settings
    options = quant_options(spec, names=COMPARE_QUANTS, file_bytes=None)
    factors = window.memory_panel.speed.factors
    expected = [r.to_dict() for r in compare_rows(spec, options, settings, TEST_HARDWARE, factors)]
    rows = window.compare.result.rows  # type: ignore[union-attr]
    assert [r.quant for r in rows] == [e["quant"] for e in expected]
    assert len(rows) >= 10
    for row, e in zip(rows, expected, strict=True):
        assert row.origin == e["origin"]
        assert row.bits_per_weight == e["bits_per_weight"]
        assert row.fits == e["fits"]
        assert row.decode_tok_per_s == e["decode_tok_per_s"]
        assert row.kld == e["kld"]
        assert {n: b for n, b, _c in row.devices} == e["devices"]
        if not row.on_disk:
            assert row.file_bytes == simulate_quant(spec, row.quant).file_bytes
    on_disk = [r for r in rows if r.on_disk]
    assert [r.quant for r in on_disk] == ["Q4_K_M"]
    model = window.compare_panel.table_model
    assert model.rowCount() == len(rows)
    assert model.index(0, 0).data() == rows[0].quant
    qtbot.waitUntil(lambda: window.compare_panel.chart.paint_count > 0, timeout=5_000)


def test_rows_follow_the_context_slider(qtbot: QtBot, window: MainWindow) -> None:
    wait_for_rows(qtbot, window)
    before = window.compare.result
    window.estimates.update(n_ctx=16384)
    wait_for_rows(qtbot, window)
    after = window.compare.result
    assert before is not None
    assert after is not None
    assert after.settings.n_ctx == 16384
    assert after.rows[0].total_bytes > before.rows[0].total_bytes


def test_selecting_a_simulated_row_says_what_to_do(qtbot: QtBot, window: MainWindow) -> None:
    window.tabs.setCurrentWidget(window.compare_panel)
    wait_for_rows(qtbot, window)
    panel = window.compare_panel
    rows = panel.table_model.rows
    simulated = next(i for i, r in enumerate(rows) if not r.on_disk)
    panel.table.selectRow(simulated)
    assert "llama-quantize" in panel.hint_label.text()
    assert rows[simulated].quant in panel.hint_label.text()
    own = next(i for i, r in enumerate(rows) if r.on_disk)
    panel.table.selectRow(own)
    assert "file you have open" in panel.hint_label.text()


def test_table_model_passes_the_model_tester(
    qtbot: QtBot, qtmodeltester: ModelTester, window: MainWindow
) -> None:
    wait_for_rows(qtbot, window)
    model = CompareTableModel()
    qtmodeltester.check(model)
    assert window.compare.result is not None
    model.set_result(window.compare.result)
    qtmodeltester.check(model)
    for role in (Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.UserRole):
        for c in range(model.columnCount()):
            model.index(0, c).data(role)
    spec = window.estimates.model.spec  # type: ignore[union-attr]
    fewer = compare_table(
        spec,
        quant_options(spec, simulate=None),
        window.estimates.settings,
        TEST_HARDWARE,
        window.memory_panel.speed.factors,
    )
    model.set_result(fewer)
    qtmodeltester.check(model)
    assert model.rowCount() == 1


def test_compare_failure_is_a_banner_not_a_traceback(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    window.tabs.setCurrentWidget(window.compare_panel)
    wait_for_rows(qtbot, window)

    def broken(*_args: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr("ui.desktop.compare.rows.compare_rows", broken)
    with qtbot.waitSignal(window.compare.failed, timeout=RESULT_TIMEOUT_MS):
        window.estimates.update(n_ctx=8192)
    banner = window.compare_panel.banner
    assert banner.isVisible()
    assert "Could not compare the quants" in banner.label.text()
    assert "boom" in banner.label.text()
    assert "Traceback" not in banner.label.text()


def test_memory_view_shows_speed_and_users(qtbot: QtBot, window: MainWindow) -> None:
    speed = window.memory_panel.speed
    qtbot.waitUntil(lambda: speed.summary.capacity is not None, timeout=RESULT_TIMEOUT_MS)
    spec = window.estimates.model.spec  # type: ignore[union-attr]
    settings = window.estimates.settings
    expected = predict_speed(
        spec,
        settings,
        TEST_HARDWARE,
        depth=speed_depth(settings.n_ctx, settings.n_parallel),
        n_prompt=SPEED_PROMPT_TOKENS,
        factors=speed.factors,
    )
    summary = speed.summary
    assert summary.prediction == expected
    users = max_users(
        spec,
        TEST_HARDWARE,
        ctx_per_user=4096,
        min_tok_per_s=USERS_MIN_TOK_PER_S,
        goal=users_goal(settings, window.estimates.state.margin_bytes),
        options=quant_options(spec, simulate=None),
        factors=speed.factors,
        max_n=256,
    )
    assert summary.capacity is not None
    assert summary.capacity.n_users == users.n_users
    # the line counts the users whose first token also comes within the SLO, and says
    # which SLO and that the figure is predicted (and whether it is calibrated)
    within = users_within_slo(users, TEST_HARDWARE, USERS_SLO, speed.factors)
    assert summary.users == within
    assert within.n_users <= users.n_users
    text = window.memory_panel.speed_label.text()
    assert "tok/s writing" in text
    assert f"{within.n_users} user" in text
    assert f"({USERS_SLO.describe()}; predicted" in text
    assert "first token after" in text
    assert "— not calibrated" in text or "— calibrated on " in text
    # a CPU whose kernels were not timed says its figure is rough
    rough = "the CPU's part is rough, from its memory bandwidth alone" in text
    assert rough == (expected.host_kernels is False)


def test_rows_wait_while_the_tab_is_hidden(qtbot: QtBot, window: MainWindow) -> None:
    wait_for_rows(qtbot, window)
    window.tabs.setCurrentWidget(window.memory_panel)
    window.estimates.update(n_ctx=8192)
    qtbot.wait(400)  # longer than the debounce: nothing may start while hidden
    result = window.compare.result
    assert result is not None
    assert result.settings.n_ctx == 4096
    window.tabs.setCurrentWidget(window.compare_panel)
    wait_for_rows(qtbot, window)
    assert window.compare.result is not None
    assert window.compare.result.settings.n_ctx == 8192


# --- a Hugging Face repo, from the local fake hub ---------------------------------------------


def wait_for_repo_rows(qtbot: QtBot, window: MainWindow) -> None:
    def settled() -> None:
        result = window.compare.result
        assert result is not None
        assert result.repo == REPO
        assert result.settings == window.estimates.state.settings  # what the runner runs
        assert not window.compare.busy

    qtbot.waitUntil(settled, timeout=RESULT_TIMEOUT_MS)


def test_compare_a_repo_and_go_back(qtbot: QtBot, window: MainWindow, hub: FakeHub) -> None:
    wait_for_rows(qtbot, window)
    panel = window.compare_panel
    assert not panel.back_button.isVisible()
    qtbot.keyClicks(panel.repo_edit, f"hf.co/{REPO}")
    qtbot.mouseClick(panel.repo_button, Qt.MouseButton.LeftButton)
    wait_for_repo_rows(qtbot, window)
    result = window.compare.result
    assert result is not None
    listing = list_repo(REPO)
    expected = [
        r.to_dict()
        for r in repo_rows(
            listing,
            read_models(listing),
            window.estimates.settings,
            TEST_HARDWARE,
            window.memory_panel.speed.factors,
        )
    ]
    assert [r.quant for r in result.rows] == [e["quant"] for e in expected]
    assert {r.quant for r in result.rows} == {"Q8_0", "Q4_1", "Q4_K_M"}
    for row, e in zip(result.rows, expected, strict=True):
        assert row.origin == "hub"
        assert not row.on_disk
        assert row.error is None
        assert row.file_bytes == e["file_bytes"]
        assert row.bits_per_weight == e["bits_per_weight"]
        assert row.fits == e["fits"]
        assert row.decode_tok_per_s == e["decode_tok_per_s"]
        assert row.kld == e["kld"]
        assert {n: b for n, b, _c in row.devices} == e["devices"]
    assert panel.table_model.index(0, 1).data() == "hub"
    assert panel.back_button.isVisible()
    assert REPO in panel.summary_label.text()
    assert not panel.banner.isVisible()
    assert hub.sent("/cdn/") < 20 * 2**20  # headers only, no download
    own = next(i for i, r in enumerate(result.rows) if r.quant == "Q4_K_M")
    panel.table.selectRow(own)
    assert "--download demo-Q4_K_M.gguf" in panel.hint_label.text()

    # the hub rows follow the settings; the headers are not read again
    hub.clear()
    window.estimates.update(n_ctx=8192)
    wait_for_repo_rows(qtbot, window)
    assert window.compare.result is not None
    assert window.compare.result.settings.n_ctx == 8192
    assert hub.requests() == []

    qtbot.mouseClick(panel.back_button, Qt.MouseButton.LeftButton)
    wait_for_rows(qtbot, window)
    back = window.compare.result
    assert back is not None
    assert back.repo is None
    assert any(r.on_disk for r in back.rows)
    assert not panel.back_button.isVisible()


def test_repo_errors_are_a_banner(qtbot: QtBot, window: MainWindow, hub: FakeHub) -> None:
    wait_for_rows(qtbot, window)
    panel = window.compare_panel
    with qtbot.waitSignal(window.compare.failed, timeout=RESULT_TIMEOUT_MS):
        window.compare.compare_repo("ggtune-test/nope")
    assert panel.banner.isVisible()
    assert "no such repository" in panel.banner.label.text()
    assert "Traceback" not in panel.banner.label.text()
    # nothing is being read any more: no "Reading the quant files…" left for good (issue 18)
    assert "Reading" not in panel.summary_label.text()
    assert "Nothing read from ggtune-test/nope" in panel.summary_label.text()
    assert panel.table_model.rowCount() == 0
    # a file whose header cannot be read: a row without numbers, and the banner says why
    sha = hub.repos[REPO].files["demo-Q4_1.gguf"].sha256
    hub.fail[f"/cdn/{sha}"] = (404, {})
    window.compare.compare_repo(REPO)
    wait_for_repo_rows(qtbot, window)
    result = window.compare.result
    assert result is not None
    bad = next(r for r in result.rows if r.quant == "Q4_1")
    assert bad.error
    assert panel.banner.isVisible()
    assert "demo-Q4_1.gguf" in panel.banner.label.text()
    row = result.rows.index(bad)
    assert panel.table_model.index(row, 3).data() == "?"
    qtbot.waitUntil(lambda: panel.chart.paint_count > 0, timeout=5_000)


def test_repo_waits_while_the_tab_is_hidden(qtbot: QtBot, window: MainWindow, hub: FakeHub) -> None:
    wait_for_rows(qtbot, window)
    window.tabs.setCurrentWidget(window.memory_panel)
    hub.clear()
    window.compare.compare_repo(REPO)
    qtbot.wait(400)
    assert hub.requests() == []  # nothing read while hidden
    window.tabs.setCurrentWidget(window.compare_panel)
    wait_for_repo_rows(qtbot, window)


def test_a_row_is_applied_by_its_button_a_double_click_or_its_menu(
    qtbot: QtBot, window: MainWindow
) -> None:
    """Issue 18: Compare rows could not be applied. Each way sets the quant every tab
    estimates; the file's own row goes back to the file."""
    wait_for_rows(qtbot, window)
    panel = window.compare_panel
    rows = panel.table_model.rows
    own = window.estimates.own_quant()
    simulated = [i for i, r in enumerate(rows) if r.origin == "simulated" and not r.error]
    assert len(simulated) >= 2
    assert not panel.use_button.isEnabled()
    panel.table.selectRow(simulated[0])
    assert panel.use_button.isEnabled()
    panel.use_button.click()
    assert window.estimates.quant == rows[simulated[0]].quant
    assert window.settings_panel.quant_combo.currentData() == rows[simulated[0]].quant

    wait_for_rows(qtbot, window)
    rows = panel.table_model.rows
    second = next(
        i
        for i, r in enumerate(rows)
        if r.origin == "simulated" and not r.error and r.quant != window.estimates.quant
    )
    target = panel.table_model.index(second, 0)
    panel.table.scrollTo(target)
    rect = panel.table.visualRect(target)
    assert rect.isValid(), "the row is on screen"
    viewport = panel.table.viewport()
    qtbot.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=rect.center())
    qtbot.mouseDClick(viewport, Qt.MouseButton.LeftButton, pos=rect.center())
    assert window.estimates.quant == rows[second].quant

    wait_for_rows(qtbot, window)
    mine = next(i for i, r in enumerate(panel.table_model.rows) if r.quant == own)
    panel.table.selectRow(mine)
    assert panel.use_action in panel.table.actions()
    panel.use_action.trigger()
    assert window.estimates.quant is None


def test_a_cpu_only_machine_is_told_why_ram_can_run_backwards(
    qtbot: QtBot, window: MainWindow
) -> None:
    """Issue 18: on a CPU, Q4_K_M needed more RAM than Q5_K_M (the repacked copy and the
    mapped file both count) with no word why."""
    wait_for_rows(qtbot, window)
    text = window.compare_panel.summary_label.text()
    assert "repacks" in text
    assert "Q4_K" in text
    window.estimates.update(use_mmap=False)
    wait_for_rows(qtbot, window)
    assert "repacks" not in window.compare_panel.summary_label.text()


def test_fits_and_the_writing_speed_come_before_the_memory_columns(
    qtbot: QtBot, window: MainWindow
) -> None:
    """Issue 18 (seen on the screens): the writing speed, half of "which quant, and how
    fast?", sat right of every device's memory, past the edge at 1280×800."""
    wait_for_rows(qtbot, window)
    model = window.compare_panel.table_model
    headers = [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())]
    assert headers[:6] == ["Quant", "Source", "File", "Bits/weight", "Fits", "Writing tok/s"]
    assert headers[-2:] == ["Reading tok/s", "Quality loss (KLD)"]
    assert headers[6:-2] == ["RAM"]  # the test machine has no GPU: one device
