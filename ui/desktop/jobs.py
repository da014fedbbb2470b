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
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, TypeVar

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal, Slot

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
