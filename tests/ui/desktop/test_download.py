"""Download a quant file of a Hugging Face repo from the Compare tab, against the fake hub.

The real :func:`app.sources.hf.download` runs on the job pool and fetches the real demo model from
tests/fake_hub.py (which counts the bytes it sends); only the folder dialog is replaced,
and the free disk where a test needs a full disk. To cancel at a known point, a test wraps
the real download so that its worker waits, after its first chunk, until the user cancels.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog
from pytestqt.qtbot import QtBot

import ui.desktop.compare.download
from app.planning.compare import CompareRow
from app.sources.demo_models import SMOLLM
from app.sources.hf import DownloadProgress, ModelEntry, RepoListing
from app.sources.library import user_folders
from tests.fake_hub import COMMIT, REPO, FakeHub, Served
from tests.ui.desktop.test_main_window import make_window
from ui.desktop.compare.download import format_eta, progress_percent, progress_text
from ui.desktop.compare.panel import ComparePanel
from ui.desktop.main_window import MainWindow
from ui.desktop.shared.jobs import job_pool, run_job

RESULT_TIMEOUT_MS = 30_000
DOWNLOAD_TIMEOUT_MS = 120_000
CDN = f"/cdn/{SMOLLM.sha256}"
STATUS = re.compile(
    r"^\d+\.\d (MiB|GiB) of \d+\.\d (MiB|GiB) · \d+\.\d MiB/s · ETA \d+:\d\d · file 1/1$"
)


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    w = make_window(qtbot, qsettings)
    w.estimates.update(n_ctx=4096, n_parallel=1, kv_unified=False)
    w.tabs.setCurrentWidget(w.compare_panel)
    return w


def open_repo(qtbot: QtBot, window: MainWindow) -> ComparePanel:
    """Compare the fake hub's repo and wait for its rows."""
    window.compare.compare_repo(REPO)

    def settled() -> None:
        result = window.compare.result
        assert result is not None
        assert result.repo == REPO
        assert not window.compare.busy

    qtbot.waitUntil(settled, timeout=RESULT_TIMEOUT_MS)
    return window.compare_panel


def select(panel: ComparePanel, quant: str) -> CompareRow:
    rows = panel.table_model.rows
    index = next(i for i, r in enumerate(rows) if r.quant == quant)
    panel.table.selectRow(index)
    return rows[index]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def hold_after_first_chunk(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Make the worker wait, after its first chunk, until the download is cancelled.

    Return the real download, to put back.
    """
    real = ui.desktop.compare.download.download

    def held(
        listing: RepoListing,
        entry: ModelEntry,
        *,
        progress: Callable[[DownloadProgress], None],
        cancel: threading.Event,
        **kwargs: object,
    ) -> Path:
        def report(p: DownloadProgress) -> None:
            progress(p)
            if p.stage == "downloading" and p.done_bytes > 0:
                cancel.wait(60)  # pool thread: until the test cancels

        return real(listing, entry, progress=report, cancel=cancel, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ui.desktop.compare.download, "download", held)
    return real


def test_progress_words_have_units() -> None:
    p = DownloadProgress("m.gguf", 1, 2, 3 * 2**29, 4 * 2**30, 45 * 2**20, 95.4)
    assert progress_text(p) == "1.5 GiB of 4.0 GiB · 45.0 MiB/s · ETA 1:35 · file 2/2"
    assert progress_percent(p) == 37
    checking = DownloadProgress("m.gguf", 0, 1, 2**20, 2**30, 0.0, None, "checking")
    assert progress_text(checking) == (
        "Checking the partial download: 1.0 MiB of 1.0 GiB · file 1/1"
    )
    assert format_eta(None) == "?"
    assert format_eta(59.6) == "1:00"
    assert format_eta(3725) == "1:02:05"


def test_download_to_a_folder_opens_the_model(
    qtbot: QtBot,
    window: MainWindow,
    hub: FakeHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    panel = open_repo(qtbot, window)
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setattr(
        QFileDialog, "getExistingDirectory", staticmethod(lambda *_a, **_k: str(folder))
    )
    assert panel.download_box.isVisible()
    assert not panel.download_button.isEnabled()  # nothing selected yet
    select(panel, "Q4_1")
    assert panel.download_button.isEnabled()
    assert panel.download_button.focusPolicy() & Qt.FocusPolicy.TabFocus
    assert panel.download_button.toolTip()
    hint = panel.hint_label.text()
    assert "Download button" in hint
    assert f"ggtune hf {REPO} --download demo-Q4_1.gguf" in hint
    assert "93.8 MiB; " in hint  # SMOLLM.size_bytes
    assert "free in the Hugging Face cache" in hint

    # Save to → Choose a folder… from the keyboard opens the (replaced) folder dialog
    panel.save_to_box.setFocus()
    qtbot.keyClick(panel.save_to_box, Qt.Key.Key_Down)
    assert panel.save_to_box.currentText() == str(folder)
    assert panel.download_folder() == folder
    assert f"free in {folder}." in panel.hint_label.text()

    seen: list[tuple[DownloadProgress, str, int]] = []
    panel.downloads.progress.connect(
        lambda p: seen.append((p, panel.download_status.text(), panel.download_progress.value()))
    )
    running: list[bool] = []
    panel.downloads.running_changed.connect(running.append)
    hub.clear()
    with qtbot.waitSignal(window.models.model_loaded, timeout=DOWNLOAD_TIMEOUT_MS):
        qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
        assert running == [True]
        assert not panel.download_button.isEnabled()
        assert panel.cancel_button.isVisible()
        assert panel.download_progress.isVisible()
    path = folder / "demo-Q4_1.gguf"
    assert os.listdir(folder) == ["demo-Q4_1.gguf"]  # no partial file left
    assert path.stat().st_size == SMOLLM.size_bytes
    assert sha256(path) == SMOLLM.sha256
    assert hub.sent(CDN) == SMOLLM.size_bytes
    model = window.estimates.model
    assert model is not None
    assert model.path == str(path)
    assert running == [True, False]
    assert panel.download_progress.value() == 100
    assert seen, "progress was reported"
    last, _text, _value = seen[-1]
    assert last.done_bytes == last.total_bytes == SMOLLM.size_bytes
    assert [v for _p, _t, v in seen] == [progress_percent(p) for p, _t, _v in seen]
    assert any(STATUS.match(text) for _p, text, _v in seen), [t for _p, t, _v in seen]
    assert panel.download_status.text() == f"Downloaded and checked: {path}; opening it."
    assert panel.download_button.isEnabled()
    assert not panel.cancel_button.isVisible()
    assert not panel.banner.isVisible()

    def listed() -> None:  # the chosen folder joined the library, as Add folder… does
        library = window.models.library
        assert library is not None
        assert [e.path for e in library.entries if e.source == "folder"] == [str(path)]

    qtbot.waitUntil(listed, timeout=DOWNLOAD_TIMEOUT_MS)
    assert user_folders() == (folder,)


def test_download_into_the_hf_cache_joins_the_library(
    qtbot: QtBot, window: MainWindow, hub: FakeHub, tmp_path: Path
) -> None:
    panel = open_repo(qtbot, window)
    select(panel, "Q4_1")
    assert panel.download_folder() is None
    with qtbot.waitSignal(panel.downloads.finished, timeout=DOWNLOAD_TIMEOUT_MS) as done:
        qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
    storage = tmp_path / "hf" / "hub" / "models--ggtune-test--demo-GGUF"
    path = storage / "snapshots" / COMMIT / "demo-Q4_1.gguf"
    assert done.args == [str(path)]
    blob = storage / "blobs" / SMOLLM.sha256
    assert path.resolve() == blob
    assert sha256(blob) == SMOLLM.sha256

    def opened_and_listed() -> None:
        model = window.estimates.model
        assert model is not None
        assert model.path == str(path)
        library = window.models.library
        assert library is not None
        assert [e.path for e in library.entries if e.source == "huggingface"] == [str(path)]

    qtbot.waitUntil(opened_and_listed, timeout=DOWNLOAD_TIMEOUT_MS)


def test_cancel_keeps_the_partial_file_and_download_resumes(
    qtbot: QtBot,
    window: MainWindow,
    hub: FakeHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    panel = open_repo(qtbot, window)
    folder = tmp_path / "models"
    panel.set_download_folder(str(folder))
    assert panel.save_to_box.currentText() == str(folder)
    select(panel, "Q4_1")
    real = hold_after_first_chunk(monkeypatch)
    hub.clear()
    with qtbot.waitSignal(panel.downloads.progress, timeout=DOWNLOAD_TIMEOUT_MS):
        qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
    assert panel.downloads.running
    assert panel.cancel_button.isVisible()
    assert panel.cancel_button.hasFocus()
    assert not panel.save_to_box.isEnabled()
    with qtbot.waitSignal(panel.downloads.cancelled, timeout=DOWNLOAD_TIMEOUT_MS):
        qtbot.keyClick(panel.cancel_button, Qt.Key.Key_Escape)
    assert panel.download_button.hasFocus()  # the keyboard stays in the download row
    part = folder / "demo-Q4_1.gguf.part"
    assert os.listdir(folder) == ["demo-Q4_1.gguf.part"]
    have = part.stat().st_size
    assert 0 < have < SMOLLM.size_bytes
    status = panel.download_status.text()
    assert status.startswith("Download cancelled at 1.0 MiB of 93.8 MiB;")
    assert "resumes" in status
    assert not panel.banner.isVisible()
    assert not panel.downloads.running
    assert panel.download_button.isEnabled()
    assert not panel.cancel_button.isVisible()
    assert 0 < panel.download_progress.value() < 100

    monkeypatch.setattr(ui.desktop.compare.download, "download", real)
    hub.clear()
    with qtbot.waitSignal(window.models.model_loaded, timeout=DOWNLOAD_TIMEOUT_MS):
        qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
    path = folder / "demo-Q4_1.gguf"
    assert os.listdir(folder) == ["demo-Q4_1.gguf"]
    assert [e.range for e in hub.requests(CDN)] == [f"bytes={have}-"]
    assert hub.sent(CDN) == SMOLLM.size_bytes - have
    assert sha256(path) == SMOLLM.sha256
    model = window.estimates.model
    assert model is not None
    assert model.path == str(path)


@pytest.mark.parametrize("problem", ["no room", "checksum", "no access"])
def test_download_errors_are_one_line(
    qtbot: QtBot,
    window: MainWindow,
    hub: FakeHub,
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    problem: str,
) -> None:
    if problem == "checksum":  # the hub says a sha256 the bytes do not have
        hub.repos[REPO].files["demo-Q4_1.gguf"] = Served(smollm_path, "0" * 64, SMOLLM.size_bytes)
    panel = open_repo(qtbot, window)
    folder = tmp_path / "models"
    folder.mkdir()
    panel.set_download_folder(str(folder))
    if problem == "no room":
        monkeypatch.setattr(
            "app.sources.hf.shutil.disk_usage",
            lambda _: shutil._ntuple_diskusage(10**12, 10**12, 0),
        )
    if problem == "no access":
        hub.fail[f"/{REPO}/resolve/{COMMIT}/demo-Q4_1.gguf"] = (
            401,
            {"X-Error-Code": "GatedRepo", "X-Error-Message": "Access to this model is restricted."},
        )
    select(panel, "Q4_1")
    if problem == "no room":
        assert "0.0 MiB free in " in panel.hint_label.text()
        assert "Not enough room there" in panel.hint_label.text()
    hub.clear()
    with qtbot.waitSignal(panel.downloads.failed, timeout=DOWNLOAD_TIMEOUT_MS) as failed:
        qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
    text = panel.banner.label.text()
    assert panel.banner.isVisible()
    assert text == failed.args[0]
    assert text.startswith("Could not download: ")
    assert "\n" not in text
    assert "Traceback" not in text
    expected = {
        "no room": r"needs 0\.09 GiB more, but .* has 0\.00 GiB free",
        "checksum": r"checksum mismatch: got 98,362,432 bytes",
        "no access": r"HTTP 401",
    }[problem]
    assert re.search(expected, text), text
    if problem == "no room":
        assert hub.requests() == []  # checked before asking for anything
    assert os.listdir(folder) == []  # nothing half-written left (a bad checksum's is deleted)
    assert panel.download_status.text() == "Download failed."
    assert not panel.downloads.running
    assert panel.download_button.isEnabled()
    assert not panel.cancel_button.isVisible()
    model = window.estimates.model
    assert model is not None
    assert model.is_demo  # the open model stays


def test_download_only_for_readable_hub_rows(
    qtbot: QtBot, window: MainWindow, hub: FakeHub
) -> None:
    panel = window.compare_panel
    qtbot.waitUntil(lambda: window.compare.result is not None, timeout=RESULT_TIMEOUT_MS)
    assert not panel.download_box.isVisible()  # the open model's quants: nothing to fetch
    panel.table.selectRow(0)
    assert panel.table_model.rows[0].origin != "hub"
    assert not panel.download_button.isEnabled()

    hub.fail[CDN] = (404, {})  # Q4_1's header cannot be read
    open_repo(qtbot, window)
    assert panel.download_box.isVisible()
    bad = select(panel, "Q4_1")
    assert bad.error
    assert window.compare.hub_entry(bad) is None
    assert not panel.download_button.isEnabled()
    assert "Download button" not in panel.hint_label.text()
    good = select(panel, "Q4_K_M")
    assert good.error is None
    assert panel.download_button.isEnabled()
    pair = window.compare.hub_entry(good)
    assert pair is not None
    assert pair[1].name == "demo-Q4_K_M.gguf"

    qtbot.mouseClick(panel.back_button, Qt.MouseButton.LeftButton)
    assert not panel.download_box.isVisible()
    assert not panel.download_button.isEnabled()


def test_closing_the_window_cancels_the_download(
    request: pytest.FixtureRequest,
    qtbot: QtBot,
    window: MainWindow,
    hub: FakeHub,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    panel = open_repo(qtbot, window)
    folder = tmp_path / "models"
    panel.set_download_folder(str(folder))
    select(panel, "Q4_1")
    hold_after_first_chunk(monkeypatch)
    pool = job_pool()
    threads = pool.maxThreadCount()
    pool.setMaxThreadCount(1)
    request.addfinalizer(lambda: pool.setMaxThreadCount(threads))
    with qtbot.waitSignal(panel.downloads.progress, timeout=DOWNLOAD_TIMEOUT_MS):
        qtbot.mouseClick(panel.download_button, Qt.MouseButton.LeftButton)
    # The download hands its pool slot back: short jobs still run on a 1-thread pool.
    answers: list[int] = []
    run_job(lambda: 42, on_success=answers.append, on_failure=pytest.fail, parent=window)
    qtbot.waitUntil(lambda: answers == [42], timeout=RESULT_TIMEOUT_MS)
    assert not panel.downloads.worker_done

    window.close()  # cancels, and waits for the worker to stop
    assert panel.downloads.worker_done
    assert os.listdir(folder) == ["demo-Q4_1.gguf.part"]
    assert 0 < (folder / "demo-Q4_1.gguf.part").stat().st_size < SMOLLM.size_bytes
