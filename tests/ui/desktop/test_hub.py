"""Find on Hugging Face (issue 18, Finding a model), against the fake hub.

The real window and the real core: the search (app.sources.hf.search_models), the listing
and header reads over HTTP, the badges (app.planning.badges) and the download all run on
the job pool against tests/fake_hub.py; a badge on screen must be the one the core gives
for the same settings and hardware. Offline is a port nobody listens on. To cancel at a
known point, a test holds the header reader after its first batch until the user cancels.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QAbstractButton, QApplication, QLabel, QWidget
from pytestqt.qtbot import QtBot

import ui.desktop.compare.download
import ui.desktop.hub.rows
from app.hardware.devices import Hardware
from app.planning.badges import badge
from app.sources.demo_models import SMOLLM
from app.sources.hf import RemoteModel
from app.units import GIB, MIB
from tests.fake_hub import REPO, FakeHub, unreachable_endpoint
from tests.ui.desktop.test_download import hold_after_first_chunk
from tests.ui.desktop.test_keyboard import mnemonic
from tests.ui.desktop.test_main_window import make_window
from ui.desktop.compare.rows import read_repo, repo_table, runner_choice
from ui.desktop.hub.dialog import HubDialog
from ui.desktop.main_window import MainWindow

TIMEOUT_MS = 30_000
DOWNLOAD_TIMEOUT_MS = 120_000


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    # made before the hub fixture points the caches at tmp_path: the demo model opens
    # from the shared cache (every test below asks for ``window`` before ``hub``)
    w = make_window(qtbot, qsettings)
    w.estimates.update(n_ctx=4096, n_parallel=1, kv_unified=False)
    return w


def open_dialog(qtbot: QtBot, window: MainWindow) -> HubDialog:
    """Open the dialog the way a user does: Ctrl+Shift+F on the main window."""
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow, timeout=5_000)
    ctrl_shift = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
    qtbot.keyClick(window, Qt.Key.Key_F, ctrl_shift)
    dialog = window.hub_dialog
    assert dialog is not None
    qtbot.waitUntil(dialog.isActiveWindow, timeout=5_000)
    return dialog


def search(qtbot: QtBot, dialog: HubDialog, words: str) -> None:
    """Type ``words`` and press Enter; wait for the answer."""
    dialog.search_field.clear()
    qtbot.keyClicks(dialog.search_field, words)
    qtbot.keyClick(dialog.search_field, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not dialog.controller.busy, timeout=TIMEOUT_MS)


def pick_repo(qtbot: QtBot, dialog: HubDialog, repo_id: str) -> None:
    """Select ``repo_id`` in the results and wait for its files."""
    ids = [r.repo_id for r in dialog.repos.rows]
    dialog.repo_view.selectRow(ids.index(repo_id))

    def shown() -> None:
        files = dialog.controller.files
        assert files is not None
        assert files.repo_id == repo_id
        assert not dialog.controller.busy
        assert dialog.files.rows == files.rows

    qtbot.waitUntil(shown, timeout=TIMEOUT_MS)


def badge_texts(dialog: HubDialog) -> dict[str, str]:
    model = dialog.files
    return {
        r.entry.name: str(model.data(model.index(i, 3), Qt.ItemDataRole.DisplayRole))
        for i, r in enumerate(model.rows)
    }


def expected_badges(window: MainWindow) -> dict[str, str]:
    """The core's badges for the fake repo at the window's settings and hardware."""
    state = window.estimates.state
    result = repo_table(
        read_repo(REPO),
        state.settings,
        state.hardware.hardware,
        window.memory_panel.speed.factors,
        runner_choice(state),
    )
    return {row.name: badge(row).text for row in result.rows}


def test_search_lists_repos_by_downloads_and_a_repo_its_files_with_badges(
    qtbot: QtBot, window: MainWindow, hub: FakeHub
) -> None:
    dialog = open_dialog(qtbot, window)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is dialog.search_field, timeout=5_000)
    search(qtbot, dialog, "ggtune-test")
    assert [(r.repo_id, r.downloads, r.likes) for r in dialog.repos.rows] == [
        (REPO, 1200, 7),
        ("ggtune-test/gated-GGUF", 40, 1),
    ]
    model = dialog.repos
    assert model.data(model.index(0, 1), Qt.ItemDataRole.DisplayRole) == "1,200"
    assert model.data(model.index(1, 0), Qt.ItemDataRole.DisplayRole).endswith("(gated)")
    assert dialog.status.text().startswith("2 repos with GGUF files match “ggtune-test”")

    pick_repo(qtbot, dialog, REPO)
    rows = dialog.files.rows
    assert [(r.row.quant, r.size_bytes) for r in rows] == [
        (m.quant, m.size_bytes)
        for m in dialog.controller.files.headers.listing.models  # type: ignore[union-attr]
    ]
    assert badge_texts(dialog) == expected_badges(window)
    # the test machine has no GPU and 32 GiB: every tiny demo file fits in RAM
    assert all(t.startswith("fits in RAM, ~") for t in badge_texts(dialog).values())
    assert "Test machine: 32 GiB RAM" in dialog.basis.text()
    assert "only their headers were read" in dialog.status.text()
    # header only: nothing near a whole file was sent
    assert hub.sent("/cdn/") < SMOLLM.size_bytes


def test_badges_follow_the_hardware_and_match_the_core(
    qtbot: QtBot, window: MainWindow, hub: FakeHub
) -> None:
    dialog = open_dialog(qtbot, window)
    search(qtbot, dialog, "demo")
    pick_repo(qtbot, dialog, REPO)
    before = badge_texts(dialog)
    window.hardware.set_hardware(
        Hardware.with_gpus([2 * GIB], 32 * GIB), "Planned: 2 GiB GPU", "planned"
    )
    qtbot.waitUntil(lambda: badge_texts(dialog) != before, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: badge_texts(dialog) == expected_badges(window), timeout=TIMEOUT_MS)
    assert all(t.startswith("fits on GPU, ~") for t in badge_texts(dialog).values())
    assert "Planned: 2 GiB GPU" in dialog.basis.text()
    window.hardware.set_hardware(Hardware.with_gpus([8 * MIB], 8 * MIB), "Tiny", "planned")
    # the demo models (135M, 270M) cannot; the tiny 2-shard llama still fits in part
    qtbot.waitUntil(
        lambda: badge_texts(dialog)["demo-Q4_1.gguf"] == "too large", timeout=TIMEOUT_MS
    )
    assert badge_texts(dialog)["demo-Q4_K_M.gguf"] == "too large"
    assert badge_texts(dialog) == expected_badges(window)


def test_download_and_open_opens_the_model_in_the_main_window(
    qtbot: QtBot, window: MainWindow, hub: FakeHub, tmp_path: Path
) -> None:
    dialog = open_dialog(qtbot, window)
    search(qtbot, dialog, "demo")
    pick_repo(qtbot, dialog, REPO)
    names = [r.entry.name for r in dialog.files.rows]
    assert not dialog.download_button.isEnabled()  # nothing selected yet
    dialog.file_view.selectRow(names.index("demo-Q4_1.gguf"))
    assert dialog.download_button.isEnabled()
    with qtbot.waitSignal(window.models.model_loaded, timeout=DOWNLOAD_TIMEOUT_MS) as loaded:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    path = Path(loaded.args[0].spec.path)
    assert path.name == "demo-Q4_1.gguf"
    assert (tmp_path / "hf") in path.parents  # the Hugging Face cache of the test
    assert path.resolve().name == SMOLLM.sha256  # the blob, named by its checked sha256
    assert window.estimates.model is not None
    assert Path(window.estimates.model.spec.path) == path
    qtbot.waitUntil(lambda: "opened in the main window" in dialog.status.text(), timeout=5_000)
    assert not dialog.progress.isVisible()


def test_cancel_a_download_then_download_again_resumes_and_opens(
    qtbot: QtBot, window: MainWindow, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialog = open_dialog(qtbot, window)
    search(qtbot, dialog, "demo")
    pick_repo(qtbot, dialog, REPO)
    real = hold_after_first_chunk(monkeypatch)  # the worker waits for the Cancel
    names = [r.entry.name for r in dialog.files.rows]
    dialog.file_view.selectRow(names.index("demo-Q4_1.gguf"))
    qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    try:
        qtbot.waitUntil(lambda: " · file 1/1" in dialog.status.text(), timeout=TIMEOUT_MS)
        assert dialog.progress.isVisible()
        assert not dialog.download_button.isEnabled()
        assert dialog.cancel_button.isEnabled()
        qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
    finally:
        dialog.downloads.cancel()  # never leave the worker waiting (a no-op after the click)
    qtbot.waitUntil(lambda: not dialog.downloads.running, timeout=TIMEOUT_MS)
    assert dialog.status.text().startswith("Download cancelled at ")
    assert dialog.status.text().endswith("the next Download resumes it.")
    assert not dialog.progress.isVisible()
    assert dialog.download_button.isEnabled()
    sent = hub.sent("/cdn/")
    monkeypatch.setattr(ui.desktop.compare.download, "download", real)
    with qtbot.waitSignal(window.models.model_loaded, timeout=DOWNLOAD_TIMEOUT_MS) as loaded:
        qtbot.mouseClick(dialog.download_button, Qt.MouseButton.LeftButton)
    assert Path(loaded.args[0].spec.path).name == "demo-Q4_1.gguf"
    # a resume is an open range from the bytes kept (header reads are closed ranges)
    resumed = [r.range for r in hub.requests("/cdn/") if r.range and r.range.endswith("-")]
    assert resumed
    assert resumed[-1] != "bytes=0-"
    assert hub.sent("/cdn/") - sent < SMOLLM.size_bytes  # the rest only, not the whole file


def test_offline_says_so_in_one_line_and_nothing_stays_busy(
    qtbot: QtBot, window: MainWindow, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialog = open_dialog(qtbot, window)
    monkeypatch.setenv("HF_ENDPOINT", unreachable_endpoint())
    search(qtbot, dialog, "qwen3 8b")
    text = dialog.status.text()
    assert text.startswith("Could not search Hugging Face: ")
    assert "\n" not in text
    assert "Traceback" not in text
    assert "Searching" not in text
    assert not dialog.cancel_button.isEnabled()
    # and an empty search asks for words instead of sending anything
    search(qtbot, dialog, "   ")
    assert dialog.status.text() == "Type a few words to search for, e.g. qwen3 8b."


def test_offline_repo_read_says_so(
    qtbot: QtBot, window: MainWindow, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialog = open_dialog(qtbot, window)
    search(qtbot, dialog, "demo")
    monkeypatch.setenv("HF_ENDPOINT", unreachable_endpoint())
    dialog.repo_view.selectRow(0)
    qtbot.waitUntil(
        lambda: dialog.status.text().startswith(f"Could not read {REPO}: "), timeout=TIMEOUT_MS
    )
    assert not dialog.controller.busy
    assert dialog.files.rows == ()


def test_cancel_stops_reading_the_headers(
    qtbot: QtBot, window: MainWindow, hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialog = open_dialog(qtbot, window)
    search(qtbot, dialog, "demo")
    monkeypatch.setattr(ui.desktop.hub.rows, "HEADER_BATCH", 1)
    real = ui.desktop.hub.rows.read_models
    release = threading.Event()
    batches: list[int] = []

    def held(listing: object, entries: Sequence[object], **kwargs: object) -> list[RemoteModel]:
        batches.append(len(entries))
        out = real(listing, entries, **kwargs)  # type: ignore[arg-type]
        release.wait(30)  # pool thread: until the test has cancelled
        return out

    monkeypatch.setattr(ui.desktop.hub.rows, "read_models", held)
    try:
        dialog.repo_view.selectRow(0)
        qtbot.waitUntil(lambda: len(batches) == 1, timeout=TIMEOUT_MS)
        # the report comes through a queued signal: it may follow the batch's start
        qtbot.waitUntil(
            lambda: dialog.status.text() == "Reading the file headers… 0 of 3", timeout=5_000
        )
        assert dialog.controller.busy
        assert dialog.cancel_button.isEnabled()
        qtbot.mouseClick(dialog.cancel_button, Qt.MouseButton.LeftButton)
        assert dialog.status.text() == "Cancelled: the repo's files were not read."
        assert not dialog.controller.busy
        assert not dialog.cancel_button.isEnabled()
    finally:
        release.set()
    qtbot.wait(300)
    assert batches == [1]  # no batch started after the cancel
    assert dialog.files.rows == ()
    assert dialog.status.text() == "Cancelled: the repo's files were not read."


def test_keyboard_reaches_everything_with_one_letter_each(
    qtbot: QtBot, window: MainWindow, hub: FakeHub
) -> None:
    dialog = open_dialog(qtbot, window)
    search(qtbot, dialog, "demo")
    pick_repo(qtbot, dialog, REPO)
    dialog.file_view.selectRow(0)
    letters: dict[str, list[str]] = {}
    for w in dialog.findChildren(QWidget):
        text = None
        if isinstance(w, QAbstractButton) or (isinstance(w, QLabel) and w.buddy() is not None):
            text = w.text()
        if w.isVisible() and text and (key := mnemonic(text)) is not None:
            letters.setdefault(key, []).append(text)
    assert {k: v for k, v in letters.items() if len(v) > 1} == {}
    assert set(letters) >= {"s", "r", "f", "d", "c"}
    stops = [
        dialog.search_field,
        dialog.search_button,
        dialog.repo_view,
        dialog.file_view,
        dialog.download_button,
        dialog.close_button,
    ]
    dialog.search_field.setFocus()
    qtbot.waitUntil(lambda: QApplication.focusWidget() is dialog.search_field, timeout=5_000)
    seen = []
    for _ in range(2 * len(stops) + 2):
        qtbot.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        seen.append(QApplication.focusWidget())
    assert all(s in seen for s in stops)
    # Alt+F goes to the files, Alt+R to the repos
    qtbot.keyClick(dialog, Qt.Key.Key_F, Qt.KeyboardModifier.AltModifier)
    assert QApplication.focusWidget() is dialog.file_view
    qtbot.keyClick(dialog, Qt.Key.Key_R, Qt.KeyboardModifier.AltModifier)
    assert QApplication.focusWidget() is dialog.repo_view
    # Enter on a repo reads it at once (no wait for the selection to rest); on a file,
    # downloads and opens it
    search(qtbot, dialog, "ggtune-test")
    dialog.repo_view.setFocus()
    dialog.repo_view.setCurrentIndex(dialog.repos.index(1, 0))
    qtbot.keyClick(dialog.repo_view, Qt.Key.Key_Return)
    assert dialog.controller.busy  # started by the key, not by the timer
    pick_repo(qtbot, dialog, "ggtune-test/gated-GGUF")
    search(qtbot, dialog, "demo")
    pick_repo(qtbot, dialog, REPO)
    names = [r.entry.name for r in dialog.files.rows]
    dialog.file_view.setFocus()
    dialog.file_view.setCurrentIndex(dialog.files.index(names.index("demo-Q4_1.gguf"), 0))
    with qtbot.waitSignal(window.models.model_loaded, timeout=DOWNLOAD_TIMEOUT_MS) as loaded:
        qtbot.keyClick(dialog.file_view, Qt.Key.Key_Return)
    assert Path(loaded.args[0].spec.path).name == "demo-Q4_1.gguf"
