"""Issue 18, "broken flows" and "layout and keyboard" on the real window: a failed open
leaves no "Reading…" behind, Enter in the filter opens the first match and Down walks the
matches, About says the version, licence and where to read more, the Open dialog starts in
the last model's folder (never the current directory), names are cut at the end.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QApplication, QFileDialog
from pytestqt.qtbot import QtBot

from tests.ui.desktop.test_main_window import LOAD_TIMEOUT_MS, make_window
from ui.desktop.main_window import READING_MESSAGE, MainWindow, about_text

TIMEOUT_MS = 30_000


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    w = make_window(qtbot, qsettings)
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5_000)
    return w


def test_a_failed_open_leaves_no_reading_behind(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00")
    shown = window.models.current
    assert shown is not None
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(str(bad))
    qtbot.waitUntil(lambda: not window.banner.isHidden(), timeout=TIMEOUT_MS)
    assert window.statusBar().currentMessage() != READING_MESSAGE
    assert window.models_panel.card_title.text() == shown.card.title
    assert "Reading" not in window.models_panel.card_title.text()


def test_enter_in_the_filter_opens_the_first_match_and_down_walks_them(
    qtbot: QtBot, window: MainWindow
) -> None:
    panel = window.models_panel
    panel.show()
    qtbot.waitUntil(lambda: panel.library_proxy.rowCount() > 0, timeout=TIMEOUT_MS)
    panel.search.setFocus()
    qtbot.keyClicks(panel.search, "qwen3-8b")
    assert panel.proxy.rowCount() == 0  # not among the recent ones: the library has it
    match = panel.first_match()
    assert match is not None
    view, index = match
    assert view is panel.library_tree
    assert "Qwen3-8B" in str(index.data())
    qtbot.keyClick(panel.search, Qt.Key.Key_Down)
    assert QApplication.focusWidget() is panel.library_tree
    assert panel.library_tree.currentIndex() == index
    panel.search.setFocus()
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS) as opened:
        qtbot.keyClick(panel.search, Qt.Key.Key_Return)
    assert opened.args[0].path == "catalog:qwen3-8b"
    assert panel.library_tree.textElideMode() == Qt.TextElideMode.ElideRight


def test_about_says_the_version_licence_and_where_to_read_more() -> None:
    import importlib.metadata

    text = about_text()
    assert f"ggtune {importlib.metadata.version('ggtune')}" in text
    assert "Licence: MIT" in text
    assert "<a href=" in text


def test_the_open_dialog_starts_in_the_last_models_folder(
    qtbot: QtBot, window: MainWindow, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[str] = []

    def answer(_parent: object, _title: str, start: str, _filter: str) -> tuple[str, str]:
        asked.append(start)
        return "", ""

    monkeypatch.setattr(QFileDialog, "getOpenFileName", answer)
    window.open_file_dialog()
    recent = window.models.recent
    expected = os.path.dirname(recent[0]) if recent else str(Path.home())
    assert asked == [expected]
    assert os.path.isdir(asked[0])  # a folder, never "" (Qt's current directory)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "the file is empty"),
        (b"hello, not a model", "not a GGUF model file"),
        (None, "the file is cut short"),  # a real model's first 5,000 bytes
    ],
)
def test_a_bad_file_is_said_in_plain_words_with_the_detail_on_demand(
    qtbot: QtBot, window: MainWindow, tmp_path: Path, content: bytes | None, words: str
) -> None:
    bad = tmp_path / "bad.gguf"
    if content is None:
        demo = window.models.current
        assert demo is not None
        content = Path(demo.path).read_bytes()[:5000]
    bad.write_bytes(content)
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS) as failed:
        window.models.open_path(str(bad))
    banner = window.banner
    text = banner.label.text()
    assert words in text, text
    for jargon in ("b'", "bytes left", "at byte"):
        assert jargon not in text
    detail = failed.args[0].detail
    if content:  # the reader found something at a place: said on demand
        assert detail.startswith("at byte")
        assert not banner.details_button.isHidden()
        assert banner.detail_label.isHidden()
        banner.details_button.click()
        assert banner.detail_label.text() == detail
        assert not banner.detail_label.isHidden()


def test_the_error_banner_goes_when_a_later_action_succeeds(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"hello")
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(str(bad))
    assert not window.banner.isHidden()
    window.settings_panel.planned.click()  # another plan: a success
    assert window.banner.isHidden()
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(str(bad))
    assert not window.banner.isHidden()
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_demo()
    assert window.banner.isHidden()


def test_starting_with_a_bad_last_file_leaves_nothing_working(
    qtbot: QtBot, qsettings: QSettings, tmp_path: Path
) -> None:
    """A bad last model at start: no 'Working out the quants…', no editable empty box."""
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"hello")
    window = make_window(qtbot, qsettings, open_demo=False)
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(str(bad))
    assert window.estimates.model is None
    combo = window.settings_panel.quant_combo
    assert not combo.isEnabled()
    assert not combo.isEditable()
    assert "Working" not in window.compare_panel.chart.empty_text
    assert "Reading" not in window.statusBar().currentMessage()
