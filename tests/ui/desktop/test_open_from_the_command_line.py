"""``ggtune MISSING.gguf``: the real entry point opens the window and says "no such file".

A fresh Python runs this file as a script: it calls ui.entry.dispatch as the console
script does (the GUI preflight, the QApplication, the main window, the event loop) and,
once the window is shown, reads what it shows and ends the event loop. Nothing in the app
is replaced; the user's settings are swapped for a scratch file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("PySide6")

ROOT = Path(__file__).resolve().parents[3]
WAIT_MS = 60_000


def test_a_missing_model_opens_the_app_saying_no_such_file(tmp_path: Path) -> None:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", XDG_CONFIG_HOME=str(tmp_path))
    missing = tmp_path / "MISSING.gguf"
    done = subprocess.run(
        [sys.executable, __file__, str(missing), str(tmp_path / "ggtune.ini")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["exit"] == 0
    assert "Could not open MISSING.gguf" in seen["banner"], seen
    assert "no such file" in seen["banner"]
    assert seen["card"] == "No model open"  # not "Reading MISSING.gguf…" for ever


def _drive(model: str, ini: str) -> dict[str, Any]:
    import time

    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from ui import entry
    from ui.desktop import app as desktop_app
    from ui.desktop.main_window import MainWindow

    desktop_app.user_settings = lambda: QSettings(ini, QSettings.Format.IniFormat)
    seen: dict[str, Any] = {}
    started = time.monotonic()
    show = MainWindow.show

    def look(window: MainWindow) -> None:
        if window.banner.isVisible():
            seen["banner"] = window.banner.label.text()
            seen["card"] = window.models_panel.card_title.text()
        if seen or (time.monotonic() - started) * 1000 > WAIT_MS:
            QApplication.instance().exit(0)
        else:
            QTimer.singleShot(50, lambda: look(window))

    def show_and_look(window: MainWindow) -> None:
        show(window)
        QTimer.singleShot(50, lambda: look(window))

    MainWindow.show = show_and_look  # type: ignore[method-assign]
    seen["exit"] = entry.dispatch([model])
    return seen


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    print(json.dumps(_drive(sys.argv[1], sys.argv[2])), flush=True)
