"""Create the QApplication and the main window; optionally render a screenshot and quit."""

from __future__ import annotations

import sys
from typing import Final

from PySide6.QtCore import QSettings, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication

from app.paths import icons_dir
from ui.desktop.main_window import MainWindow
from ui.desktop.shared.jobs import GuiCollector

ORGANIZATION: Final = "ggtune"
APPLICATION: Final = "ggtune"
DESKTOP_FILE: Final = "ggtune"
"""``packaging/linux/ggtune.desktop`` without the suffix: Wayland's app id, so docks and task
bars match the window to its launcher and icon."""
SCREENSHOT_TIMEOUT_MS: Final = 30_000


def user_settings() -> QSettings:
    """Return the user's settings store (recent files, window state)."""
    return QSettings(ORGANIZATION, APPLICATION)


def app_icon() -> QIcon:
    """Return ggtune's icon from the PNGs in :func:`app.paths.icons_dir` (empty if none)."""
    icon = QIcon()
    for png in sorted(icons_dir().glob("ggtune-*.png")):
        icon.addFile(str(png))
    return icon


def make_application() -> QApplication:
    """Return the QApplication (made once), named and with the window icon set; Python's
    garbage collector then runs on the GUI thread only
    (:class:`~ui.desktop.shared.jobs.GuiCollector`)."""
    app = QApplication.instance() or QApplication(sys.argv)
    assert isinstance(app, QApplication), "a QApplication is needed"
    if app.findChild(GuiCollector) is None:
        GuiCollector(app)
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    app.setApplicationDisplayName("ggtune")
    app.setDesktopFileName(DESKTOP_FILE)
    app.setWindowIcon(app_icon())
    return app


def run_app(
    model: str | None = None,
    *,
    screenshot: str | None = None,
    size: tuple[int, int] | None = None,
    view: str | None = None,
) -> int:
    """Show the main window and run the event loop; return the exit status."""
    app = make_application()
    window = MainWindow(user_settings())
    if size is not None:
        window.resize(*size)
    if view is not None:
        tabs = window.tabs
        titles = [tabs.tabText(i).replace("&", "").lower() for i in range(tabs.count())]
        window.tabs.setCurrentIndex(titles.index(view) if view in titles else 0)
    window.show()
    if model:
        window.models.open_path(model)
    elif screenshot is not None:  # docs and checks: always the demo model, never the last one
        window.models.open_demo()
        window.models.scan_library()
    else:
        window.start()
    if screenshot is not None:
        _schedule_screenshot(app, window, screenshot)
    return app.exec()


def _schedule_screenshot(app: QApplication, window: MainWindow, path: str) -> None:
    """Save the window to ``path`` once a model is shown (or a timeout), then quit."""

    def save() -> None:
        app.processEvents()
        ok = window.grab().save(path)
        print(f"screenshot {'saved to' if ok else 'FAILED:'} {path}", file=sys.stderr)
        app.exit(0 if ok else 1)

    waiting = {"model", "hardware"}

    def ready(what: str) -> None:
        waiting.discard(what)
        if not waiting:
            QTimer.singleShot(300, save)

    window.models.model_loaded.connect(lambda _m: ready("model"))
    window.models.model_failed.connect(lambda _f: ready("model"))
    window.hardware.local_detected.connect(lambda _h: ready("hardware"))
    window.hardware.detection_failed.connect(lambda _e: ready("hardware"))
    QTimer.singleShot(SCREENSHOT_TIMEOUT_MS, save)
