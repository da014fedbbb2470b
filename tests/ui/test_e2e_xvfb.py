"""End to end under a real X server: the real app in a subprocess on Qt's xcb platform.

The test starts Xvfb on a free display, then runs this file as a script in a fresh Python
(``DISPLAY`` set, ``QT_QPA_PLATFORM=xcb``): it builds the real main window on the demo model
and drives it from inside with Qt's own input events — a key press on the context slider
(the memory view must change by exactly what :func:`app.predict.estimate.estimate` says), a quick
benchmark of the demo model with a tiny plan (llama.cpp in runner's child process; stored in
a scratch results database), and Save on the Export tab for an Ollama Modelfile (the file
dialog answered by the same injection the Export tests use). Nothing is faked: no test
hooks in the app, real llama.cpp, real X11. The script prints a JSON summary as its last
line; the test checks it.

Skipped, with the reason, when Xvfb is not installed (``apt-get install xvfb``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

XVFB = shutil.which("Xvfb")
DRIVER_TIMEOUT_S = 300
TINY_PLAN = (16, 4, 0, 8, 1)  # n_prompt, n_gen, depth, n_chat_prompt, repetitions


# --- the test (pytest side) ---------------------------------------------------------------


def _free_display() -> int:
    for n in range(90, 400):
        if not Path(f"/tmp/.X{n}-lock").exists() and not Path(f"/tmp/.X11-unix/X{n}").exists():
            return n
    raise RuntimeError("no free X display number between :90 and :399")


@pytest.fixture
def xvfb_display() -> Iterator[str]:
    """Start Xvfb on a free display; stop it afterwards."""
    if XVFB is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb); the end-to-end test needs it")
    n = _free_display()
    proc = subprocess.Popen(
        [XVFB, f":{n}", "-screen", "0", "1600x1200x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    socket = Path(f"/tmp/.X11-unix/X{n}")
    deadline = time.monotonic() + 15
    while not socket.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not socket.exists():
        proc.kill()
        err = proc.communicate()[1].decode(errors="replace")
        pytest.fail(f"Xvfb :{n} did not start: {err[-500:]}")
    try:
        yield f":{n}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.engine
def test_app_end_to_end_under_xvfb(xvfb_display: str, gemma_path: Path, tmp_path: Path) -> None:
    pytest.importorskip("PySide6")
    env = dict(os.environ)
    env.update(
        DISPLAY=xvfb_display,
        QT_QPA_PLATFORM="xcb",
        XDG_CONFIG_HOME=str(tmp_path / "config"),  # the user's settings stay untouched
        XDG_DATA_HOME=str(tmp_path / "data"),  # and so does the user's results database
        GGTUNE_MODELS_DIR=str(gemma_path.parent),  # the demo model, already fetched
    )
    env.pop("WAYLAND_DISPLAY", None)
    done = subprocess.run(
        [sys.executable, __file__, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=DRIVER_TIMEOUT_S,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, (
        f"the app run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["platform"] == "xcb"
    assert summary["model"] == gemma_path.name
    assert summary["n_ctx_after"] != summary["n_ctx_before"]
    assert summary["memory_change"] == summary["estimator_change"]
    assert summary["memory_change"]["Total"] != 0
    assert summary["bench_rows"] >= 8
    assert summary["bench_tg_tok_per_s"] > 0
    assert summary["history_rows"] == 1
    assert summary["modelfile_ok"] is True
    assert summary["llama_cpp_in_gui"] is False
    modelfile = (tmp_path / "Modelfile").read_text(encoding="utf-8")
    assert f"\nFROM {gemma_path}" in modelfile
    assert "\nPARAMETER num_ctx " in modelfile


# --- the driver (the app's process) -------------------------------------------------------


def _drive(scratch: Path) -> dict[str, Any]:
    from PySide6.QtCore import QEventLoop, QSettings, Qt, QTimer
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest

    from app.export.common import model_facts
    from app.export.ollama import export_ollama
    from app.measured.bench_result import BenchPlan
    from app.measured.results_db import ResultsDB
    from app.planning.runner_plan import fitting_comments
    from app.predict.estimate import estimate
    from ui.desktop.app import make_application
    from ui.desktop.main_window import MainWindow
    from ui.desktop.memory.components import COMPONENTS

    app = make_application()

    def wait_for(
        signal: Any, trigger: Callable[[], object] | None, timeout_s: float
    ) -> tuple[Any, ...]:
        got: list[tuple[Any, ...]] = []
        loop = QEventLoop()

        def on(*args: Any) -> None:
            got.append(args)
            loop.quit()

        signal.connect(on)
        timer = QTimer()
        timer.setSingleShot(True)
        timer.timeout.connect(loop.quit)
        timer.start(int(timeout_s * 1000))
        if trigger is not None:
            trigger()
        if not got:
            loop.exec()
        timer.stop()
        signal.disconnect(on)
        if not got:
            raise TimeoutError(f"no signal within {timeout_s} s")
        return got[0]

    def wait_until(pred: Callable[[], bool], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not pred():
            if time.monotonic() > deadline:
                raise TimeoutError("condition not met in time")
            QTest.qWait(20)

    window = MainWindow(
        QSettings(str(scratch / "ggtune.ini"), QSettings.Format.IniFormat),
        detect_hardware=False,
        time_kernels=False,
    )
    window.resize(1200, 800)
    window.show()
    assert QTest.qWaitForWindowExposed(window, 10_000), "the window never got exposed on X"
    wait_for(window.hardware.local_detected, window.hardware.detect, 60)
    (model,) = wait_for(window.models.model_loaded, window.models.open_demo, 120)

    # 1. one key press on the context slider; the memory view moves by the estimator's amount
    memory = window.memory_panel.table_model
    titles = [c.title for c in COMPONENTS] + ["Total"]
    fields = [c.field for c in COMPONENTS] + ["total_bytes"]

    def shown() -> dict[str, int]:
        role = Qt.ItemDataRole.UserRole
        cols = range(memory.columnCount())
        return {
            t: sum(int(memory.index(r, c).data(role) or 0) for c in cols)
            for r, t in enumerate(titles)
        }

    estimates = window.estimates
    hardware = estimates.state.hardware.hardware
    settings_before = estimates.settings
    before = shown()
    slider = window.settings_panel.context.slider
    slider.setFocus()
    key = Qt.Key.Key_Left if slider.value() > slider.minimum() else Qt.Key.Key_Right
    QTest.keyClick(slider, key)
    wait_until(lambda: estimates.settings.n_ctx != settings_before.n_ctx, 5)
    QTest.qWait(50)
    after = shown()
    est_before = estimate(model.spec, settings_before, hardware)
    est_after = estimate(model.spec, estimates.settings, hardware)

    def total(est: Any, field: str) -> int:
        return int(sum(getattr(d, field) for d in est.devices))

    memory_change = {t: after[t] - before[t] for t in titles}
    estimator_change = {
        t: total(est_after, f) - total(est_before, f) for t, f in zip(titles, fields, strict=True)
    }

    # 2. a quick benchmark of the demo model (tiny plan), from the Verify tab's button
    db = ResultsDB(scratch / "results.sqlite3")
    window.verify.set_results_db(db)
    p, g, d, c, r = TINY_PLAN
    window.verify.bench_plan = BenchPlan(
        "custom", n_prompt=p, n_gen=g, depth=d, n_chat_prompt=c, repetitions=r
    )
    panel = window.verify_panel
    failures: list[Any] = []
    window.verify.failed.connect(failures.append)
    (outcome,) = wait_for(
        window.verify.benchmark_finished,
        lambda: QTest.mouseClick(panel.bench_button, Qt.MouseButton.LeftButton),
        240,
    )
    assert not failures, failures
    wait_until(lambda: panel.history_model.rowCount() >= 1, 10)
    tg = outcome.result.speed("tg")

    # 3. export an Ollama Modelfile through the Export tab's Save
    window.tabs.setCurrentWidget(window.export_panel)
    export = window.export_panel
    export.target_combo.setCurrentIndex(export.target_combo.findData("ollama"))
    target = scratch / "Modelfile"
    export.ask_save_path = lambda _parent, _suggested: str(target)
    export.confirm = lambda _parent, _title, _text: True
    wait_for(
        export.saved, lambda: QTest.mouseClick(export.save_button, Qt.MouseButton.LeftButton), 10
    )
    # what the runner runs (its own fitting) with the plan's comments, as the Export tab writes
    state = estimates.state
    assert state.plan is not None
    fitting = fitting_comments(state.plan, pinned_in_export=True)
    want = export_ollama(
        model.path, state.settings, facts=model_facts(model.path), fitting=fitting
    ).modelfile

    summary = {
        "platform": QGuiApplication.platformName(),
        "model": os.path.basename(model.path),
        "n_ctx_before": settings_before.n_ctx,
        "n_ctx_after": estimates.settings.n_ctx,
        "memory_change": memory_change,
        "estimator_change": estimator_change,
        "bench_rows": len(outcome.rows),
        "bench_tg_tok_per_s": tg.tok_per_s.mean if tg else 0.0,
        "history_rows": panel.history_model.rowCount(),
        "modelfile_ok": target.read_text(encoding="utf-8") == want,
        "llama_cpp_in_gui": "llama_cpp" in sys.modules,
    }
    window.close()
    app.processEvents()
    return summary


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    print(json.dumps(_drive(Path(sys.argv[1]))), flush=True)
