"""The first screen on a new machine times this CPU's kernels in the background: the speed
line says its CPU figure is rough until then, moves to the priced figure after, the rates
are cached, a Verify run holds the timing off (its child killed) and it starts again after.
Real child processes on the real llama.cpp; the failure path swaps the timer for one that
raises (the seam :class:`KernelTimingController` takes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.qtbot import QtBot

from app.errors import EngineError
from app.hardware.bandwidth import machine_key
from app.hardware.host import probe_host
from app.hardware.kernels import KernelRates, cached_rates
from app.predict.speed import KernelNeeds
from ui.desktop.main_window import KERNELS_MESSAGE, MainWindow
from ui.desktop.shared.kernel_timing import KernelTimingController, host_threads
from ui.desktop.shared.speed import SpeedSummary

pytestmark = pytest.mark.engine

TIMING_TIMEOUT_MS = 300_000


def open_window(
    qtbot: QtBot, qsettings: QSettings, path: Path, *, time_kernels: bool = True
) -> MainWindow:
    window = MainWindow(qsettings, detect_hardware=False, time_kernels=time_kernels)
    qtbot.addWidget(window)
    window.show()
    with qtbot.waitSignal(window.hardware.local_detected, timeout=30_000):
        window.hardware.detect()
    with qtbot.waitSignal(window.models.model_loaded, timeout=60_000):
        window.models.open_path(str(path))
    return window


def settled_summary(qtbot: QtBot, window: MainWindow) -> SpeedSummary:
    """Return the speed line's summary once its prediction is there."""
    speed = window.memory_panel.speed
    qtbot.waitUntil(lambda: speed.summary.prediction is not None, timeout=30_000)
    return speed.summary


def test_new_machine_times_the_kernels_in_the_background_and_the_figure_moves(
    qtbot: QtBot,
    qsettings: QSettings,
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a machine never timed
    window = open_window(qtbot, qsettings, smollm_path)
    timing = window.kernel_timing
    assert timing is not None
    # every start/end from now on: the timing may start (its 1.5 s rest) while the Hardware
    # tab below still probes, before a waitSignal there would be listening
    timing_events: list[bool] = []
    timing.timing.connect(timing_events.append)
    assert window.hardware.local is not None
    assert window.hardware.local.host.kernels is None
    before = settled_summary(qtbot, window)
    assert before.prediction is not None
    assert before.prediction.host_kernels is False
    assert "the CPU's part is rough, from its memory bandwidth alone" in (
        window.memory_panel.speed_label.text()
    )
    # the Hardware tab, looked at before the timing, says they are not timed yet …
    with qtbot.waitSignal(window.hardware_panel.report_ready, timeout=30_000):
        window.tabs.setCurrentWidget(window.hardware_panel)
    assert "cpu kernels: not timed yet" in window.hardware_panel.probes_label.text()
    window.tabs.setCurrentWidget(window.memory_panel)
    needs = timing.missing()
    assert needs is not None
    assert needs.shapes  # SmolLM2's Q8_0 products at least

    # it starts by itself once the settings rest; the line and the status bar say so
    qtbot.waitUntil(lambda: bool(timing_events), timeout=30_000)
    assert timing_events == [True]
    assert window.statusBar().currentMessage() == KERNELS_MESSAGE
    qtbot.waitUntil(
        lambda: "timing them now…" in window.memory_panel.speed_label.text(), timeout=5_000
    )

    # a Verify run holds it off: the timing's child is killed before the dry run's starts
    with qtbot.waitSignal(timing.timing, timeout=15_000) as held:
        qtbot.mouseClick(window.verify_panel.run_button, Qt.MouseButton.LeftButton)
    assert held.args == [False]
    assert not timing.running
    with qtbot.waitSignal(window.verify.finished, timeout=180_000):
        pass
    # … and once Verify is done it starts again and finishes
    with qtbot.waitSignal(timing.timed, timeout=TIMING_TIMEOUT_MS) as timed:
        pass
    rates = timed.args[0]
    assert isinstance(rates, KernelRates)
    assert needs.missing(rates).shapes == frozenset()
    local = window.hardware.local
    assert local is not None
    assert local.host.kernels == rates
    assert window.estimates.state.hardware.hardware.host.kernels == rates
    assert timing.missing() is None
    # cached for the next launch (the hardware probe reads it)
    cached = cached_rates(machine_key(probe_host()), host_threads())
    assert cached is not None
    assert not needs.missing(cached)
    # … and says what was timed once they are (it probes again by itself)
    qtbot.waitUntil(
        lambda: "weight types at" in window.hardware_panel.probes_label.text(), timeout=30_000
    )

    speed = window.memory_panel.speed
    qtbot.waitUntil(
        lambda: (
            speed.summary.prediction is not None and speed.summary.prediction.host_kernels is True
        ),
        timeout=10_000,
    )
    assert "rough" not in window.memory_panel.speed_label.text()
    after = speed.summary.prediction
    assert after is not None
    assert before.prediction is not None
    assert after.decode_tok_per_s != before.prediction.decode_tok_per_s
    assert window.statusBar().currentMessage() != KERNELS_MESSAGE

    # nothing left to time: a new context length does not start another
    window.estimates.update(n_ctx=4096)
    qtbot.wait(2_500)
    assert not timing.running


def test_a_failed_timing_is_said_once_and_not_retried(
    qtbot: QtBot,
    qsettings: QSettings,
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    window = open_window(qtbot, qsettings, smollm_path, time_kernels=False)
    calls: list[KernelNeeds] = []

    def broken(
        needs: KernelNeeds,
        n_threads: int,
        rates: KernelRates | None,
        on_cancel_ready: Callable[[Callable[[], None]], None],
    ) -> KernelRates:
        calls.append(needs)
        raise EngineError("the engine aborted (SIGABRT)")

    timing = KernelTimingController(
        window.estimates, window.hardware, window, delay_ms=50, time_kernels=broken
    )
    with qtbot.waitSignal(timing.failed, timeout=10_000) as failed:
        timing.set_paused(False)
    assert failed.args == ["Could not time this CPU's kernels: the engine aborted (SIGABRT)"]
    assert len(calls) == 1
    window.estimates.update(n_ctx=4096)  # the same kernels: not tried again
    qtbot.wait(500)
    assert len(calls) == 1
    assert not timing.running
    assert window.hardware.local is not None
    assert window.hardware.local.host.kernels is None
