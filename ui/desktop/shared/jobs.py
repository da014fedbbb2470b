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

Object lifetimes across threads (what used to crash, seen as a SIGSEGV at the relay's
``emit`` in a full test run):

* A pool thread touches one QObject only, :class:`_Dispatcher`, made once on the GUI
  thread and never deleted. It used to emit on a relay that was a child of ``parent``; when
  ``parent`` was deleted on the GUI thread (or collected, below) during that ``emit``, the
  pool thread used freed memory. Whether ``parent`` still lives is now asked on the GUI
  thread, where it is deleted (``shiboken6.isValid``).
* The pool holds no Python object the GUI thread lets go of: the runnable carries a job
  number, the job itself (its function, callbacks, ``parent``) stays in :data:`_TASKS`
  until its outcome is delivered on the GUI thread, so its last reference (and whatever
  Qt wrappers its closures hold) goes away there.
* Python's cyclic garbage collector runs in whichever thread allocates past its
  threshold, and collecting a QObject that Python owns deletes it in that thread: a pool
  thread reading a model file could delete a widget's controller. :class:`GuiCollector`
  (the idea of calibre's ``GarbageCollector``, ``src/calibre/gui2/__init__.py``) turns
  automatic collection off and collects on the GUI thread, from a timer, when the
  thresholds are passed; :func:`make_application` installs it and the desktop tests'
  conftest does too.

:class:`LatestJob` runs the latest of a stream of requests (a slider's ticks): it waits
``delay_ms`` for the requests to rest, runs only the newest on the pool, and drops the
answer of any request a newer one replaced. The Memory view's users, Compare and
Recommend use it.
"""

from __future__ import annotations

import functools
import gc
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import shiboken6
from PySide6.QtCore import (
    QObject,
    QThreadPool,
    QTimer,
    Signal,
    Slot,
)

T = TypeVar("T")


@dataclass(slots=True)
class _Task:
    """One job, owned by the GUI thread until its outcome is delivered there."""

    fn: Callable[[], object]
    on_success: Callable[[Any], None]
    on_failure: Callable[[Exception], None]
    parent: QObject


class _Dispatcher(QObject):
    """Lives on the GUI thread for the life of the process: the only QObject a pool thread
    touches (its signal, emitted there, is delivered here as a queued call)."""

    delivered = Signal(object)  # (job number, result, exception or None)

    def __init__(self) -> None:
        super().__init__()
        self.delivered.connect(self._on_delivered)

    @Slot(object)
    def _on_delivered(self, outcome: tuple[int, object, Exception | None]) -> None:
        """Call the job's callback (GUI thread), unless its parent is gone."""
        number, result, error = outcome
        task = _TASKS.pop(number, None)
        if task is None or not shiboken6.isValid(task.parent):
            return
        if error is not None:
            task.on_failure(error)
        else:
            task.on_success(result)


_TASKS: dict[int, _Task] = {}
"""Jobs not delivered yet, by number (written and emptied on the GUI thread only)."""
_NUMBERS = itertools.count(1)
_DISPATCHER: list[_Dispatcher] = []


def _run_task(number: int) -> None:
    """Run job ``number`` (pool thread) and post its outcome to the dispatcher."""
    task = _TASKS[number]  # it stays there until the GUI thread has the outcome
    fn = task.fn
    del task
    result: object = None
    error: Exception | None = None
    try:
        result = fn()
    except Exception as err:  # handed to on_failure on the GUI thread
        error = err
    del fn
    try:
        _DISPATCHER[0].delivered.emit((number, result, error))
    except RuntimeError:
        # "Signal source has been deleted": the process is exiting (Python's finalizer
        # deleted the dispatcher while this job, started just before the window closed,
        # still ran): nobody is left to tell, and a traceback on the way out helps no one
        return


def job_pool() -> QThreadPool:
    """Return the pool every short job runs on (Qt's global pool)."""
    return QThreadPool.globalInstance()


_BACKGROUND_POOL: list[QThreadPool] = []


def background_pool() -> QThreadPool:
    """Return the one-thread pool of long background work (timing this CPU's kernels, tens
    of seconds): on a 2-core machine Qt's global pool has two threads, and one held that
    long left header reads and the users count a single thread."""
    if not _BACKGROUND_POOL:
        pool = QThreadPool()
        pool.setMaxThreadCount(1)
        _BACKGROUND_POOL.append(pool)
    return _BACKGROUND_POOL[0]


def run_job(
    fn: Callable[[], T],
    *,
    on_success: Callable[[T], None],
    on_failure: Callable[[Exception], None],
    parent: QObject,
    pool: QThreadPool | None = None,
) -> None:
    """Run ``fn()`` on the pool; call ``on_success(result)`` or ``on_failure(error)`` later.

    Call on the GUI thread; the callbacks run there too, after this returns, unless
    ``parent`` was deleted meanwhile. ``pool``: :func:`job_pool` unless given (long work
    goes to :func:`background_pool`).
    """
    assert threading.current_thread() is threading.main_thread(), "run_job is for the GUI thread"
    if not _DISPATCHER:
        _DISPATCHER.append(_Dispatcher())
    number = next(_NUMBERS)
    _TASKS[number] = _Task(fn, on_success, on_failure, parent)
    (pool or job_pool()).start(functools.partial(_run_task, number))


class GuiCollector(QObject):
    """Run Python's cyclic garbage collector on the GUI thread only (see the module doc).

    Turns automatic collection off and, every ``INTERVAL_MS``, collects each generation
    whose count passed its threshold, as the automatic collector would have. GUI thread;
    :meth:`stop` (or deleting it) turns automatic collection back on.
    """

    INTERVAL_MS: Final = 1000

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thresholds = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._timer = QTimer(self)
        self._timer.setInterval(self.INTERVAL_MS)
        self._timer.timeout.connect(self.collect_due)
        self._timer.start()

    def collect_due(self) -> int:
        """Collect the generations past their thresholds now; return the objects freed."""
        counts = gc.get_count()
        freed = 0
        for generation in (2, 1, 0):  # the oldest due generation collects the younger too
            if counts[generation] > self._thresholds[generation]:
                freed += gc.collect(generation)
                break
        return freed

    def stop(self) -> None:
        """Stop collecting here; automatic collection is back as it was."""
        self._timer.stop()
        if self._was_enabled:
            gc.enable()


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
