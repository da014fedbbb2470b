"""Run short blocking jobs off the GUI thread; get the outcome back on the GUI thread.

Modelled on Anki's ``QueryOp`` (``qt/aqt/operations/__init__.py``) and Picard's
``run_task``: the job runs on a ``QThreadPool`` thread, and exactly one of its callbacks runs
later on the thread that called :func:`run_job` (the GUI thread), through a queued signal.

Example (GUI thread)::

    run_job(
        lambda: load_model(path),          # pool thread: may block, may raise
        on_success=self._on_model_loaded,  # GUI thread, with the return value
        on_failure=self._on_model_failed,  # GUI thread, with the exception
        parent=self,
    )

A job whose ``parent`` is destroyed before it ends is dropped silently: its callbacks never
run. Jobs are not cancellable; keep them short (≤ a few seconds).

:class:`LatestJob` runs the latest of a stream of requests (a slider's ticks): it waits
``delay_ms`` for the requests to rest, runs only the newest on the pool, and drops the
answer of any request a newer one replaced. The Memory view's users, Compare and
Recommend use it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import (
    QObject,
    QRunnable,
    QThreadPool,
    QTimer,
    Signal,
    Slot,
)

T = TypeVar("T")


class _Relay(QObject):
    """Lives on the GUI thread; its signal crosses from the pool thread as a queued call."""

    done = Signal(object, object)  # (result, exception or None)

    def __init__(
        self,
        on_success: Callable[[Any], None],
        on_failure: Callable[[Exception], None],
        parent: QObject,
    ) -> None:
        super().__init__(parent)
        self._on_success = on_success
        self._on_failure = on_failure
        self.done.connect(self._on_done)

    @Slot(object, object)
    def _on_done(self, result: object, error: object) -> None:
        """Call the right callback (GUI thread), then go away."""
        try:
            if isinstance(error, Exception):
                self._on_failure(error)
            else:
                self._on_success(result)
        finally:
            self.deleteLater()


class _Reaper(QObject):
    """Lives on the GUI thread and drops finished jobs there.

    PySide6 crashes (a use of a freed thread state in ``Shiboken::Object::destroy``, seen
    as heap corruption or SIGSEGV) when Qt deletes a Python ``QRunnable`` on the pool
    thread after ``run()``. So jobs are not auto-deleted: :data:`_LIVE` owns them until
    they are done, and the last reference goes away here, on the GUI thread.
    """

    reap = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.reap.connect(self._on_reap)

    @Slot(object)
    def _on_reap(self, job: object) -> None:
        _LIVE.discard(job)


_LIVE: set[_Job] = set()
_REAPER: list[_Reaper] = []


class _Job(QRunnable):
    def __init__(self, fn: Callable[[], object], relay: _Relay) -> None:
        super().__init__()
        self.setAutoDelete(False)
        self._fn = fn
        self._relay = relay

    def run(self) -> None:
        """Run the job (pool thread) and post its outcome to the relay."""
        result: object = None
        error: Exception | None = None
        try:
            result = self._fn()
        except Exception as err:  # handed to on_failure on the GUI thread
            error = err
        # RuntimeError: the relay's parent was destroyed meanwhile, nobody is waiting
        with contextlib.suppress(RuntimeError):
            self._relay.done.emit(result, error)
        del result, error
        _REAPER[0].reap.emit(self)


def job_pool() -> QThreadPool:
    """Return the pool every short job runs on (Qt's global pool)."""
    return QThreadPool.globalInstance()


def run_job(
    fn: Callable[[], T],
    *,
    on_success: Callable[[T], None],
    on_failure: Callable[[Exception], None],
    parent: QObject,
) -> None:
    """Run ``fn()`` on the pool; call ``on_success(result)`` or ``on_failure(error)`` later.

    Call on the GUI thread; the callbacks run there too, after this returns.
    """
    if not _REAPER:
        _REAPER.append(_Reaper())
    relay = _Relay(on_success, on_failure, parent)
    job = _Job(fn, relay)
    _LIVE.add(job)
    job_pool().start(job)


class LatestJob(QObject):
    """Run the newest of a series of requests on the job pool, after a quiet spell.

    GUI thread. :meth:`request` replaces any request not yet started and restarts the
    ``delay_ms`` timer; at most one job runs at a time; a result whose request was
    superseded (or :meth:`cancel` led) is dropped, so ``on_success``/``on_failure`` only
    ever see the newest answer. ``busy_changed(bool)`` says whether an answer is awaited.
    """

    busy_changed = Signal(bool)

    def __init__(
        self,
        delay_ms: int,
        on_success: Callable[[Any], None],
        on_failure: Callable[[Exception], None],
        parent: QObject,
    ) -> None:
        super().__init__(parent)
        self._on_success = on_success
        self._on_failure = on_failure
        self._pending: Callable[[], object] | None = None
        self._running = False
        self._serial = 0
        self._busy = False
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(delay_ms)
        self._timer.timeout.connect(self._on_timer_timeout)

    @property
    def busy(self) -> bool:
        """Whether an answer is awaited (waiting out the delay or running)."""
        return self._busy

    def request(self, fn: Callable[[], object], *, now: bool = False) -> None:
        """Run ``fn`` on the pool after the delay (``now``: at once), instead of older ones."""
        self._serial += 1
        self._pending = fn
        self._set_busy(True)
        if now:
            self._timer.stop()
            self._on_timer_timeout()
        else:
            self._timer.start()

    def cancel(self) -> None:
        """Forget the request waiting and drop the answer of the one running."""
        self._serial += 1
        self._pending = None
        self._timer.stop()
        self._set_busy(False)

    def _set_busy(self, busy: bool) -> None:
        if busy != self._busy:
            self._busy = busy
            self.busy_changed.emit(busy)

    def _on_timer_timeout(self) -> None:
        if self._running or self._pending is None:
            return  # the running job's end starts the pending one
        fn, self._pending = self._pending, None
        serial = self._serial
        self._running = True
        run_job(
            fn,
            on_success=lambda result: self._on_job_done(serial, result, None),
            on_failure=lambda error: self._on_job_done(serial, None, error),
            parent=self,
        )

    def _on_job_done(self, serial: int, result: object, error: Exception | None) -> None:
        self._running = False
        if serial != self._serial:
            if self._pending is not None:
                # wait out the delay again: restarting at once kept a job running through
                # every slider drag, and its GIL time doubled the tick
                self._timer.start()
            return
        self._set_busy(False)
        if error is not None:
            self._on_failure(error)
        else:
            self._on_success(result)
