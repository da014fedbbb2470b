"""How long does one context-slider tick take in the desktop app? Target: ≤ 16 ms.

Run: ``QT_QPA_PLATFORM=offscreen .venv/bin/python -m bench.bench_desktop`` (after
``python3 tasks.py run`` fetched the demo model). Opens the main window at 1000×700 on the
demo model (Gemma 3 270M), then moves the context slider 1,000 times, alternating between
positions so every tick changes the context. One tick is: ``QSlider.setValue`` (the
controller re-estimates and emits; the memory bars, the table and the verdict update),
then ``processEvents()`` until the bars have painted. Prints a markdown table for
docs/benchmarks.md.
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.hardware.probe import local_hardware
from ui.desktop.main_window import MainWindow

TICKS = 1000
WARMUP = 50


def main() -> None:
    app = QApplication.instance() or QApplication(sys.argv)
    assert isinstance(app, QApplication)
    with tempfile.TemporaryDirectory() as tmp:
        settings = QSettings(os.path.join(tmp, "bench.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings, detect_hardware=False)
        hardware = local_hardware()
        window.hardware.set_hardware(hardware, "This machine", "local")
        window.resize(1000, 700)
        window.show()
        loaded: list[object] = []
        window.models.model_loaded.connect(loaded.append)
        window.models.open_demo()
        deadline = time.monotonic() + 120
        while not loaded and time.monotonic() < deadline:
            app.processEvents()
            time.sleep(0.01)
        assert loaded, "the demo model did not load"
        slider = window.settings_panel.context.slider
        bars = window.memory_panel.bars
        top = slider.maximum()
        positions = [(i * 37) % (top + 1) for i in range(TICKS + WARMUP)]
        times_ms: list[float] = []
        estimate_ms: list[float] = []
        for i, pos in enumerate(positions):
            if pos == slider.value():
                pos = (pos + 1) % (top + 1)
            painted = bars.paint_count
            t0 = time.perf_counter()
            slider.setValue(pos)
            t1 = time.perf_counter()
            while bars.paint_count == painted:
                app.processEvents()
            t2 = time.perf_counter()
            if i >= WARMUP:
                times_ms.append((t2 - t0) * 1000)
                estimate_ms.append((t1 - t0) * 1000)
        window.close()
    times_ms.sort()
    p95 = times_ms[int(0.95 * len(times_ms))]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), ", end="")
    print(f"Python {platform.python_version()}, Qt platform {app.platformName()}\n")
    print("| step | mean ms | median ms | p95 ms | max ms |")
    print("|---|---:|---:|---:|---:|")
    print(
        f"| setValue → estimate → signals (no paint) | {statistics.mean(estimate_ms):.2f} | "
        f"{statistics.median(estimate_ms):.2f} | "
        f"{sorted(estimate_ms)[int(0.95 * len(estimate_ms))]:.2f} | {max(estimate_ms):.2f} |"
    )
    print(
        f"| whole tick, until the bars painted | {statistics.mean(times_ms):.2f} | "
        f"{statistics.median(times_ms):.2f} | {p95:.2f} | {max(times_ms):.2f} |"
    )
    print(f"\n{len(times_ms)} ticks after {WARMUP} warm-up ticks; target ≤ 16 ms per tick.")


if __name__ == "__main__":
    main()
