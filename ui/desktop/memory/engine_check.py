"""The engine check in the background: llama.cpp's own figures where the estimate guesses.

:class:`EngineCheckController` watches the :class:`~ui.desktop.shared.estimate_controller.
EstimateController`. Whenever the estimate is not known to agree with llama.cpp
(:attr:`~app.predict.estimate.MemoryEstimate.exact` is False: an architecture whose KV
or compute rule is not checked) it waits until the settings rest for ``debounce_ms``,
then runs :class:`runner.engine_check.EngineCheck` on the job pool: a dry run in a child
process, on the model file or on its header stand-in (catalog models, Hugging Face files
read header-only, simulated quants). The sliders keep showing the analytic estimate; when
the check for the current settings comes back, ``checked`` carries the estimate with
llama.cpp's figures in place (:func:`app.measured.engine_checked.with_engine_figures`)
and its verdict. A check that the settings made stale is cancelled (its child killed).

Signals (GUI thread): ``checking(bool)`` when a check starts / ends or is no longer
needed, ``checked(object)``: an :class:`EngineChecked`, or None when the current
estimate has no check (yet); ``failed(str)``: the one-line reason a check failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QCoreApplication, QObject, QTimer, Signal

from app.errors import EngineCancelledError, GGTuneError
from app.measured.engine_checked import with_engine_figures
from app.predict.estimate import MemoryEstimate
from app.predict.verdict import Verdict, verdict
from runner.engine_check import EngineCheck, EngineCheckResult
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.jobs import run_job

DEBOUNCE_MS: Final = 700
"""How long the settings must rest before a check starts (a dry run takes ~1 s)."""


@dataclass(frozen=True, slots=True)
class EngineChecked:
    """The estimate with llama.cpp's figures, its verdict, and how the check went."""

    key: object
    estimate: MemoryEstimate
    verdict: Verdict
    result: EngineCheckResult

    def describe(self) -> str:
        """Return which figures are llama.cpp's and where they came from, in one line."""
        names = {"kv": "KV cache", "recurrent": "recurrent state", "compute": "compute buffer"}
        figures = [names[f] for f in self.estimate.engine_checked if f in names]
        where = "a header stand-in" if self.result.target.stand_in else "the model file"
        took = self.result.standin_s + self.result.dry_run_s
        return (
            f"Engine-checked: {', '.join(figures)} from llama.cpp's dry run on {where} "
            f"({took:.1f} s)"
        )


def state_key(state: EstimateState) -> object:
    """Return what a check depends on: the spec estimated, the settings, the hardware."""
    return (id(state.spec), state.settings, state.hardware.hardware, state.margin_bytes)


class EngineCheckController(QObject):
    """Run the engine check for estimates that are not exact (GUI thread; see module doc)."""

    checking = Signal(bool)
    checked = Signal(object)
    failed = Signal(str)

    def __init__(
        self,
        estimates: EstimateController,
        parent: QObject | None = None,
        *,
        debounce_ms: int = DEBOUNCE_MS,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._key: object = None
        self._result: EngineChecked | None = None
        self._running: EngineCheck | None = None
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(debounce_ms)
        self._timer.timeout.connect(self._on_timer_timeout)
        estimates.state_changed.connect(self._on_estimates_state_changed)
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.cancel)
        self.destroyed.connect(self._running_cancel)
        self._on_estimates_state_changed(estimates.state)

    @property
    def result(self) -> EngineChecked | None:
        """The check of the current estimate, when it has come back."""
        return self._result

    @property
    def busy(self) -> bool:
        """Whether a check is waiting for the settings to rest or running."""
        return self._timer.isActive() or self._running is not None

    def cancel(self) -> None:
        """Stop any waiting or running check (its child process is killed)."""
        self._timer.stop()
        self._running_cancel()

    def _running_cancel(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            running.cancel()

    def _on_estimates_state_changed(self, state: EstimateState) -> None:
        key = state_key(state)
        if key == self._key:
            return
        self._key = key
        self._result = None
        self.cancel()
        est = state.estimate
        needed = est is not None and state.error is None and not est.exact
        self.checked.emit(None)
        if needed:
            self._timer.start()
        self.checking.emit(needed)

    def _on_timer_timeout(self) -> None:
        state = self._estimates.state
        spec, est = state.spec, state.estimate
        if spec is None or est is None or state_key(state) != self._key:
            return
        check = EngineCheck(spec, [state.settings])
        self._running = check
        key = self._key
        margin = state.margin_bytes

        def done(result: EngineCheckResult) -> None:
            if self._running is check:
                self._running = None
            if key != self._key:
                return
            checked_est = with_engine_figures(est, result.reports[0])
            self._result = EngineChecked(
                key, checked_est, verdict(checked_est, margin_bytes=margin), result
            )
            self.checking.emit(False)
            self.checked.emit(self._result)

        def failed(error: Exception) -> None:
            if self._running is check:
                self._running = None
            if key != self._key or isinstance(error, EngineCancelledError):
                return
            self.checking.emit(False)
            text = str(error) if isinstance(error, GGTuneError) else type(error).__name__
            self.failed.emit(f"The engine check failed: {text}")

        run_job(check.run, on_success=done, on_failure=failed, parent=self)
