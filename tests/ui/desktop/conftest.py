"""pytest-qt set-up for the desktop app: offscreen Qt, Qt warnings fail, nothing leaks.

Without PySide6 or pytest-qt (the headless leg of ``python3 tasks.py test``) this folder is
not collected at all. Otherwise every test here:

* runs on Qt's ``offscreen`` platform unless ``QT_QPA_PLATFORM`` says otherwise;
* fails on any Qt message of WARNING or above (pytest-qt's ``qt_log_level_fail``, set
  here as a marker so the project's ini stays valid where pytest-qt is not installed);
* fails when it leaves a QThread running, a pool job unfinished, or a child process alive
  (after napari's ``_dangling_qthreads``);
* runs Python's garbage collector on the GUI thread only, as the app does
  (:class:`ui.desktop.shared.jobs.GuiCollector`), and collects after each test: a test's
  controllers without a Qt parent are Python's to delete, and collected from a pool thread
  they were deleted there (a flaky SIGSEGV in a full run).
"""

from __future__ import annotations

import gc
import importlib.util
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HAVE_QT = (
    importlib.util.find_spec("PySide6") is not None
    and importlib.util.find_spec("pytestqt") is not None
)

if not HAVE_QT:
    collect_ignore_glob = ["test_*.py"]
else:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

    import psutil
    from PySide6.QtCore import QSettings, QThread, QThreadPool

    HERE = Path(__file__).parent

    def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
        """Make every Qt warning in this folder's tests a failure."""
        for item in items:
            if HERE in Path(str(item.path)).parents:
                item.add_marker(pytest.mark.qt_log_level_fail("WARNING"))
                # The offscreen platform cannot pass size hints to a window system; a
                # platform limitation, not a defect of the app.
                item.add_marker(
                    pytest.mark.qt_log_ignore("^This plugin does not support propagateSizeHints")
                )

    def _is_resource_tracker(process: psutil.Process) -> bool:
        """multiprocessing's resource tracker: started by the first spawn, lives on by design."""
        try:
            return any("resource_tracker" in part for part in process.cmdline())
        except psutil.Error:
            return False

    @pytest.fixture(scope="session")
    def _gui_collector(qapp: object) -> Iterator[None]:
        """Collect garbage on the GUI thread only, for the whole session."""
        from ui.desktop.shared.jobs import GuiCollector

        collector = GuiCollector()
        yield
        collector.stop()
        collector.deleteLater()

    @pytest.fixture(autouse=True)
    def _no_leaks(monkeypatch: pytest.MonkeyPatch, _gui_collector: None) -> Iterator[None]:
        """Fail a test that leaves a QThread, a pool job or a child process behind."""
        started: list[QThread] = []
        original: Callable[..., None] = QThread.start

        def tracking_start(self: QThread, *args: object) -> None:
            started.append(self)
            original(self, *args)

        monkeypatch.setattr(QThread, "start", tracking_start)
        me = psutil.Process()
        before = {p.pid for p in me.children(recursive=True)}
        yield
        pool_done = QThreadPool.globalInstance().waitForDone(10_000)
        gc.collect()  # this test's garbage goes here, on the GUI thread
        running = []
        for thread in started:
            try:
                if thread.isRunning():
                    running.append(type(thread).__name__)
            except RuntimeError:
                continue  # the C++ object is gone: it was deleted, so it ended
        deadline = time.monotonic() + 5
        children = [
            p
            for p in me.children(recursive=True)
            if p.pid not in before and not _is_resource_tracker(p)
        ]
        while children and time.monotonic() < deadline:
            time.sleep(0.05)
            children = [p for p in children if p.is_running() and p.status() != "zombie"]
        assert pool_done, "a job on the thread pool did not finish within 10 s"
        assert not running, f"QThreads left running: {running}"
        assert not children, f"child processes left behind: {[p.pid for p in children]}"

    @pytest.fixture
    def qsettings(tmp_path: Path) -> QSettings:
        """Return a settings store of the test's own (never the user's)."""
        return QSettings(str(tmp_path / "ggtune.ini"), QSettings.Format.IniFormat)
