"""The self-test's GUI half: drive the real main window through open, estimate, dry run.

Called by :func:`ui.entry.selftest` (which parses arguments and finds the model); Qt is
imported here, under ui/desktop/, like everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from app.units import format_bytes, format_mib
from ui.desktop.main_window import MainWindow

EXIT_FAILED: Final = 1

SELFTEST_CONTEXT: Final = 512
"""Context of the self-test's dry run (tokens): small, so it takes seconds anywhere."""

#: Ends the self-test's event loop: ``finish(exit_status, reason)``.
_Finish = Callable[[int, str], None]


def _say(text: str) -> None:
    print(f"selftest: {text}", flush=True)


def run_window(model: str, scratch: Path, timeout_s: float) -> tuple[int, str]:
    """Drive the real main window through open, estimate and dry run (GUI thread)."""
    from PySide6.QtCore import QSettings, QTimer

    from ui.desktop.app import make_application
    from ui.desktop.main_window import MainWindow

    app = make_application()
    _say(f"Qt platform {app.platformName()}")
    settings = QSettings(str(scratch / "settings.ini"), QSettings.Format.IniFormat)
    window = MainWindow(settings, time_kernels=False)
    outcome: list[tuple[int, str]] = []  # the first finish() wins
    stage = {"now": "opening the model"}
    waiting = {"model", "hardware"}

    def finish(code: int, reason: str) -> None:
        if not outcome:
            outcome.append((code, reason))
            app.exit(code)

    def ready(what: str) -> None:
        waiting.discard(what)
        if not waiting:
            QTimer.singleShot(0, lambda: _estimate_and_dry_run(window, stage, finish))

    def on_model_failed(failure: object) -> None:
        finish(EXIT_FAILED, f"could not open the model: {getattr(failure, 'message', failure)}")

    window.models.model_loaded.connect(lambda _m: ready("model"))
    window.models.model_failed.connect(on_model_failed)
    window.hardware.local_detected.connect(lambda _h: ready("hardware"))
    window.hardware.detection_failed.connect(lambda _e: ready("hardware"))
    window.verify.finished.connect(lambda result: _on_dry_run_done(result, finish))
    window.verify.failed.connect(
        lambda failure: finish(EXIT_FAILED, f"dry run failed: {_failure_text(failure)}")
    )
    window.verify.step.connect(lambda label: stage.update(now=f"dry run: {label}"))
    QTimer.singleShot(
        int(timeout_s * 1000),
        lambda: finish(EXIT_FAILED, f"timed out after {timeout_s:g} s while {stage['now']}"),
    )
    window.show()
    _say("main window shown")
    window.models.open_path(model)
    app.exec()
    window.verify.wait()
    window.close()
    window.deleteLater()
    return outcome[0] if outcome else (EXIT_FAILED, "the event loop ended early")


def _estimate_and_dry_run(window: MainWindow, stage: dict[str, str], finish: _Finish) -> None:
    """Check the estimate on screen, then start the window's dry run (GUI thread)."""

    window.estimates.update(n_ctx=SELFTEST_CONTEXT)
    state = window.estimates.state
    if state.estimate is None:
        finish(EXIT_FAILED, f"no estimate: {state.error or 'unknown reason'}")
        return
    est = state.estimate
    headline = state.verdict.headline if state.verdict is not None else "no verdict"
    _say(
        f"estimate: {format_bytes(est.total_bytes)} in total at n_ctx={est.context.n_ctx} "
        f"({headline})"
    )
    stage["now"] = "starting the dry run"
    window.start_dry_run()
    if window.verify.running:
        _say(f"dry run started in a child process (n_ctx={SELFTEST_CONTEXT})")
    else:  # start() reports its own failure first, and the first finish() wins
        finish(EXIT_FAILED, "the dry run did not start")


def _on_dry_run_done(result: object, finish: _Finish) -> None:
    from ui.desktop.verify.rows import VerifyResult

    assert isinstance(result, VerifyResult), "VerifyController.finished carries a VerifyResult"
    _say(f"dry run ok: {result.summary}")
    for row in result.rows:
        if row.engine_bytes is None:
            engine = "not reported"
        else:
            difference = format_mib(row.difference_bytes or 0, signed=True)
            engine = f"{format_mib(row.engine_bytes)} ({difference})"
        _say(f"  {row.component}: estimate {format_mib(row.estimate_bytes)}, llama.cpp {engine}")
    finish(0, "")


def _failure_text(failure: object) -> str:
    cause = getattr(failure, "cause", str(failure))
    tail = getattr(failure, "log_tail", ())
    last = f" (last engine line: {tail[-1]})" if tail else ""
    return f"{cause}{last}"
